"""Hugging Face repositories against a loopback Hub (tests/fake_hub.py): spellings, the tree API, resolve/ redirects
to a second server, the token (reaches the Hub, never the CDN), Range, the remote header cache, the one loader."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fitplan.core.base.errors import GGUFError, MissingShardError
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.gguf.hub import (
    HubError,
    HubFile,
    HubRef,
    group_files,
    hf_arg,
    list_repo,
    parse_hub_ref,
    quant_label,
)
from fitplan.core.gguf.reader import open_model
from fitplan.core.gguf.remote import FIRST_CHUNK_REMOTE
from fitplan.core.gguf.remote_cache import RemoteHeaderCache
from fitplan.core.inputs.model_source import SourceKind, forget_loaded, load_model
from fitplan.core.launch.command_line import plan_to_args
from support.hub import TEST_REPO, HubState, requant
from support.models import TESTS

REPO = TEST_REPO
NAME = "Qwen2.5-VL-7B-Instruct"


@pytest.fixture(autouse=True)
def _fresh_memo() -> Iterator[None]:
    forget_loaded()
    yield
    forget_loaded()


# -- spellings and names -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "ref"),
    [
        ("unsloth/Qwen3-8B-GGUF", HubRef("unsloth/Qwen3-8B-GGUF")),
        ("hf.co/unsloth/Qwen3-8B-GGUF", HubRef("unsloth/Qwen3-8B-GGUF")),
        ("huggingface.co/unsloth/Qwen3-8B-GGUF:Q4_K_M", HubRef("unsloth/Qwen3-8B-GGUF", quant="Q4_K_M")),
        ("https://huggingface.co/unsloth/Qwen3-8B-GGUF", HubRef("unsloth/Qwen3-8B-GGUF")),
        ("https://huggingface.co/o/r/tree/refs%2Fpr%2F3", HubRef("o/r", "refs/pr/3")),
        ("o/r@v1.0", HubRef("o/r", "v1.0")),
        ("https://hf.co/o/r/resolve/main/sub/M-Q8_0.gguf", HubRef("o/r", "main", "Q8_0", "sub/M-Q8_0.gguf")),
        (
            "https://huggingface.co/o/r/blob/dev/M-IQ4_XS.gguf",
            HubRef("o/r", "dev", "IQ4_XS", "M-IQ4_XS.gguf"),
        ),
    ],
)
def test_repository_spellings(spelling: str, ref: HubRef) -> None:
    assert parse_hub_ref(spelling) == ref


@pytest.mark.parametrize(
    "spelling", ["model.gguf", "/abs/model.gguf", "https://example.org/o/r", "a/b/c", "o/"]
)
def test_not_a_repository(spelling: str) -> None:
    assert parse_hub_ref(spelling) is None


def test_quant_labels() -> None:
    assert quant_label("Qwen3-8B-Q4_K_M.gguf") == "Q4_K_M"
    assert quant_label("qwen2.5-7b-instruct-q4_k_m.gguf") == "Q4_K_M"
    assert quant_label("UD-Q4_K_XL/Qwen3-30B-A3B-UD-Q4_K_XL-00001-of-00002.gguf") == "UD-Q4_K_XL"
    assert quant_label("BF16/Model-00002-of-00003.gguf") == "BF16"  # from the folder
    assert quant_label("Llama-3.1-8B-Instruct-IQ2_XXS.gguf") == "IQ2_XXS"
    assert quant_label("model.gguf") is None


def test_hf_argument() -> None:
    assert hf_arg("hf.co/o/r:Q4_K_M") == "o/r:Q4_K_M"
    assert hf_arg("hf.co/o/r") is None and hf_arg("o/r:Q4_K_M") is None and hf_arg("/x/hf.co/o/r:Q") is None
    argv = plan_to_args(LaunchSettings(n_ctx=4096), "hf.co/o/r:Q4_K_M")
    assert argv[:3] == ("llama-server", "-hf", "o/r:Q4_K_M")


def test_grouping() -> None:
    files = [
        HubFile("README.md", 10, "a"),
        HubFile("M-Q4_K_M.gguf", 100, "b"),
        HubFile("Q8_0/M-Q8_0-00002-of-00002.gguf", 50, "c"),
        HubFile("Q8_0/M-Q8_0-00001-of-00002.gguf", 60, "d"),
        HubFile("BF16/M-BF16-00001-of-00003.gguf", 70, "e"),
        HubFile("mmproj-F16.gguf", 5, "f"),
        HubFile("M-F16.GGUF.part", 5, "g"),
    ]
    models, projectors, ignored = group_files(files)
    assert [(m.name, [f.path for f in m.files], m.size_bytes) for m in models] == [
        ("Q4_K_M", ["M-Q4_K_M.gguf"], 100),
        ("Q8_0", ["Q8_0/M-Q8_0-00001-of-00002.gguf", "Q8_0/M-Q8_0-00002-of-00002.gguf"], 110),
        ("BF16", ["BF16/M-BF16-00001-of-00003.gguf"], 70),
    ]
    assert models[2].missing == ("BF16/M-BF16-00002-of-00003.gguf", "BF16/M-BF16-00003-of-00003.gguf")
    assert [p.first for p in projectors] == ["mmproj-F16.gguf"] and ignored == 2


# -- the tree API, redirects, the token -----------------------------------------------------------------------------


def test_listing(hub: tuple[str, HubState]) -> None:
    endpoint, _ = hub
    listing = list_repo(HubRef(REPO))
    assert sorted(m.name for m in listing.models) == sorted(
        ["Q2_K", "Q3_K_M", "IQ4_XS", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "BF16"]
    )
    assert {len(m.files) for m in listing.models if m.name in ("Q8_0", "BF16")} == {2, 3}
    assert all(m.mmproj == "mmproj-F16.gguf" for m in listing.models)  # paired from the repository's root
    assert listing.ignored == 3 and listing.endpoint == endpoint


def test_listing_pages(hub: tuple[str, HubState]) -> None:
    _, state = hub
    state.page_size = 4  # 15 files: 4 pages, followed through Link: rel="next"
    listing = list_repo(HubRef(REPO), fresh=True)
    assert len(listing.models) == 8 and listing.ignored == 3
    assert sum(1 for p, _ in state.hub_log if p.startswith("/api/")) == 4


def test_token_reaches_the_hub_and_never_the_cdn(hub: tuple[str, HubState]) -> None:
    _, state = hub
    state.private.add(REPO)
    with pytest.raises(HubError, match="HTTP 401: a private or gated repository \\(pass a token"):
        load_model(f"hf.co/{REPO}:Q4_K_M")
    state.hub_log.clear()
    m = load_model(f"hf.co/{REPO}:Q4_K_M", token="hf_secret")
    assert m.profile.file_type == "Q4_K_M" and m.origin.kind is SourceKind.HUB
    assert len(state.hub_log) == 3  # the listing, the model's resolve/, the projector's resolve/
    assert all(a == "Bearer hf_secret" for _, a in state.hub_log)
    assert state.cdn_log and all(a is None for _, _, a in state.cdn_log)


def test_hub_model_loads_like_the_local_file(hub: tuple[str, HubState], repo_dir: Path) -> None:
    _, state = hub
    m = load_model(f"{REPO}:q8_0")  # the tag is matched case-insensitively
    local = open_model(repo_dir / "Q8_0" / f"{NAME}-Q8_0-00002-of-00002.gguf", find_mmproj=False)
    assert [h.tensors for h in m.files.shards] == [h.tensors for h in local.shards]
    assert m.model_arg == f"hf.co/{REPO}:Q8_0" and m.origin.hf_repo == REPO and m.origin.hf_quant == "Q8_0"
    assert (
        m.mmproj is not None and m.mmproj_source is not None and m.mmproj_source.endswith("/mmproj-F16.gguf")
    )
    # two shards and the projector, one range request each (each header is under 256 KiB): 3 x 256 KiB
    assert m.requests == 3 and state.cdn_bytes == 3 * FIRST_CHUNK_REMOTE == m.bytes_read


def test_a_resolve_url_on_the_hub_gets_the_hf_argument(hub: tuple[str, HubState]) -> None:
    endpoint, _ = hub
    m = load_model(f"{endpoint}/{REPO}/resolve/main/{NAME}-Q6_K.gguf")
    assert m.model_arg == f"hf.co/{REPO}:Q6_K" and m.profile.file_type == "Q6_K"


def test_unknown_quant_names_what_there_is(hub: tuple[str, HubState]) -> None:
    with pytest.raises(
        HubError, match=r"no quant 'Q9_9' in test/Qwen2.5-VL-7B-Instruct-GGUF \(it has: .*Q4_K_M"
    ):
        load_model(f"hf.co/{REPO}:Q9_9")
    with pytest.raises(HubError, match="HTTP 404: no such repository"):
        load_model("hf.co/nobody/nothing:Q4_K_M")
    with pytest.raises(HubError, match="a repository holds many models"):
        load_model(f"hf.co/{REPO}")


def test_cdn_ignoring_range_is_refused_without_the_download(hub: tuple[str, HubState]) -> None:
    _, state = hub
    state.honour_range = False
    with pytest.raises(GGUFError, match=r"ignored the byte-range request \(HTTP 200 instead of 206\)"):
        load_model(f"hf.co/{REPO}:Q2_K")
    # the body is never read: the server stops at its first write after the close, having filled at most the
    # loopback socket buffers (a few MiB) of a 2.5 GB file
    size = state.repos[REPO]["Qwen2.5-VL-7B-Instruct-Q2_K.gguf"].size
    assert state.cdn_bytes < 64 << 20 < size


def test_cache_second_look_reads_nothing(hub: tuple[str, HubState], tmp_path: Path) -> None:
    _, state = hub
    cache = RemoteHeaderCache(tmp_path / "c")
    first = load_model(f"hf.co/{REPO}:BF16", cache=cache)
    assert first.bytes_read == state.cdn_bytes > 0
    forget_loaded()
    state.cdn_log.clear()
    again = load_model(f"hf.co/{REPO}:BF16", cache=cache)
    assert state.cdn_log == [] and again.bytes_read == 0 and again.requests == 0
    assert again.files.shards == first.files.shards


def test_cache_entries_are_checksummed(hub: tuple[str, HubState], tmp_path: Path) -> None:
    _, state = hub
    cache = RemoteHeaderCache(tmp_path / "c")
    load_model(f"hf.co/{REPO}:Q2_K", cache=cache)
    for p in (tmp_path / "c").glob("*.bin"):
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0xFF
        p.write_bytes(bytes(data))
    forget_loaded()
    before = state.cdn_bytes
    m = load_model(f"hf.co/{REPO}:Q2_K", cache=cache)
    assert m.profile.file_type == "Q2_K" and state.cdn_bytes > before  # read again, not the corrupt entry


def test_plain_url_is_validated_by_its_etag(hub: tuple[str, HubState], tmp_path: Path) -> None:
    _, state = hub
    cache = RemoteHeaderCache(tmp_path / "c")
    oid = state.repos[REPO][f"{NAME}-Q5_K_M.gguf"].oid
    url = f"{state.cdn_base}/blob/{oid}"  # not on the Hub: no listing, a 1-byte probe learns the ETag
    assert load_model(url, cache=cache).profile.file_type == "Q5_K_M"
    forget_loaded()
    state.cdn_log.clear()
    m = load_model(url, cache=cache)
    assert [r for _, r, _ in state.cdn_log] == ["bytes=0-0"] and m.bytes_read == 1


def test_missing_shard_in_the_listing(hub: tuple[str, HubState], tmp_path: Path) -> None:
    _, state = hub
    folder = tmp_path / "r"
    requant(
        TESTS / "fixtures/llamacpp/models/sparse/qwen3-8b.header.gguf",
        folder / "M.gguf",
        None,
        3,
    )
    (folder / "M-00002-of-00003.gguf").unlink()
    state.add("o/split", folder)
    with pytest.raises(MissingShardError, match=r"M-00002-of-00003\.gguf"):
        load_model("hf.co/o/split:M")
    assert state.cdn_log == []  # the listing told: no header was read


def test_a_missing_relative_path_is_not_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(GGUFError, match="cannot open"):
        load_model("models/x.gguf")
    (tmp_path / "org").mkdir()
    requant(TESTS / "fixtures/llamacpp/models/sparse/qwen3-8b.header.gguf", tmp_path / "org/m:Q8_0", None)
    assert (
        load_model("org/m:Q8_0").origin.kind is SourceKind.FILE
    )  # an existing file wins over the Hub spelling


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"<html>busy</html>", "not JSON"),
        (b'{"error": "x"}', "not a list"),
        (b'[{"type": "file", "path": "m.gguf", "size": -5, "oid": "a"}]', "malformed entry"),
        (b'[{"type": "file", "path": 7, "size": 1, "oid": "a"}]', "malformed entry"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    ],
)
def test_a_malformed_listing_is_one_line(hub: tuple[str, HubState], body: bytes, problem: str) -> None:
    _, state = hub
    state.tree_body = body
    with pytest.raises(HubError, match=problem) as e:
        list_repo(HubRef(REPO), fresh=True)
    assert "\n" not in str(e.value) and len(str(e.value)) < 300
