"""Library scanning on generated folders: hub cache links, splits, projectors, partial downloads, loops, ollama,
the on-disk index (a rescan reads no header), streaming, progress and cancellation."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from types import MappingProxyType

import pytest

from fitplan.core.base.errors import GGUFError
from fitplan.core.gguf.header import GGUFHeader, GGUFTensorInfo
from fitplan.core.gguf.reader import read_header
from fitplan.core.library import (
    INDEX_SCHEMA,
    JsonScanIndex,
    LibraryModel,
    LibraryRoot,
    LibraryScanner,
    MemoryScanIndex,
    RootKind,
    ScanProgress,
    SkippedFile,
)
from fitplan.core.library.scanner import file_type_name
from fitplan.core.model.builder import build_profile
from support.library import CountingReader, write_mmproj, write_model
from support.models import REPO

# write_model's default: 2 tensors of 64 f32 elements
PARAMS_PER_FILE = 2 * 64


def scan(roots: list[LibraryRoot], reader: CountingReader, index: MemoryScanIndex | None = None):  # type: ignore[no-untyped-def]
    return LibraryScanner(reader=reader, index=index or MemoryScanIndex()).scan(roots)


def folder(p: Path) -> LibraryRoot:
    return LibraryRoot(str(p), RootKind.FOLDER)


def reasons(result) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {os.path.basename(s.path): s.reason for s in result.skipped}


def make_hub_repo(hub: Path) -> Path:
    """models--org--repo with two snapshots linking to one blob, and a download still in progress."""
    repo = hub / "models--org--repo"
    blob = write_model(repo / "blobs" / "aaaa1111")
    for rev in ("rev1", "rev2"):
        snap = repo / "snapshots" / rev
        snap.mkdir(parents=True)
        (snap / "model-Q4_K_M.gguf").symlink_to(os.path.relpath(blob, snap))
    (repo / "blobs" / "bbbb2222.incomplete").write_bytes(b"GGUF")
    (repo / "blobs" / "cccc3333.incomplete").write_bytes(b"{safetensors}")  # not a GGUF download: not listed
    (repo / "snapshots" / "rev2" / "model-Q8_0.gguf").symlink_to("../../blobs/bbbb2222")  # not there yet
    return repo


def test_hub_cache_links_are_one_model(tmp_path: Path) -> None:
    make_hub_repo(tmp_path / "hub")
    reader = CountingReader()
    r = scan([LibraryRoot(str(tmp_path / "hub"), RootKind.HUGGINGFACE)], reader)
    assert [m.display_name for m in r.models] == ["org/repo: model-Q4_K_M.gguf"]
    m = r.models[0]
    assert m.path.endswith("snapshots/rev1/model-Q4_K_M.gguf")  # the link as found, not the blob
    assert (m.architecture, m.file_type, m.n_params, m.n_ctx_train, m.n_layer) == (
        "llama",
        "Q4_K_M",
        128,
        4096,
        2,
    )
    assert m.file_size == os.path.getsize(m.path)
    assert reader.calls == 1  # the second snapshot's link is the same inode
    assert "not there" in reasons(r)["model-Q8_0.gguf"]
    assert reasons(r)["bbbb2222.incomplete"] == "partial download (org/repo, Hugging Face hub)"
    assert "cccc3333.incomplete" not in reasons(r)


def test_split_set_is_one_model_and_missing_shards_are_named(tmp_path: Path) -> None:
    for i in (1, 2, 3):
        write_model(tmp_path / "full" / f"big-{i:05d}-of-00003.gguf", split=(i - 1, 3))
    for i in (1, 3):
        write_model(tmp_path / "holey" / f"gap-{i:05d}-of-00003.gguf", split=(i - 1, 3))
    r = scan([folder(tmp_path)], CountingReader())
    (m,) = r.models
    assert [os.path.basename(p) for p in m.shard_paths] == [f"big-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    assert m.n_params == 3 * PARAMS_PER_FILE
    assert m.file_size == sum(os.path.getsize(p) for p in m.shard_paths)
    why = reasons(r)
    assert (
        why["gap-00001-of-00003.gguf"]
        == why["gap-00003-of-00003.gguf"]
        == "missing shard(s): gap-00002-of-00003.gguf"
    )


def test_projector_is_attached_to_the_models_of_its_folder(tmp_path: Path) -> None:
    write_model(tmp_path / "vl" / "model-Q4_K_M.gguf")
    write_model(tmp_path / "vl" / "model-Q8_0.gguf")
    proj = write_mmproj(tmp_path / "vl" / "mmproj-model-f16.gguf")
    write_mmproj(tmp_path / "lonely" / "mmproj.gguf")
    r = scan([folder(tmp_path)], CountingReader())
    assert [(os.path.basename(m.path), m.mmproj_path) for m in r.models] == [
        ("model-Q4_K_M.gguf", str(proj)),
        ("model-Q8_0.gguf", str(proj)),
    ]
    assert reasons(r) == {"mmproj.gguf": "projector (mmproj) with no model in its folder"}


def test_named_projectors_pair_by_name_in_a_flat_folder(tmp_path: Path) -> None:
    write_model(tmp_path / "gemma-3-4b-it-Q4_K_M.gguf")
    write_model(tmp_path / "llama-3.1-8b-Q4_K_M.gguf")
    f16 = write_mmproj(tmp_path / "mmproj-gemma-3-4b-it-f16.gguf")
    write_mmproj(tmp_path / "mmproj-gemma-3-4b-it-f32.gguf")
    r = scan([folder(tmp_path)], CountingReader())
    assert [(os.path.basename(m.path), m.mmproj_path) for m in r.models] == [
        ("gemma-3-4b-it-Q4_K_M.gguf", str(f16)),  # f16 preferred over f32 (the reader's ranking)
        ("llama-3.1-8b-Q4_K_M.gguf", None),
    ]


def test_partial_downloads_are_skipped_with_a_reason(tmp_path: Path) -> None:
    write_model(tmp_path / "good.gguf")
    full = write_model(tmp_path / "cut.gguf", truncate_by=100)
    size = os.path.getsize(full)
    for name in ("a.gguf.part", "b.gguf.downloadInProgress", "c.gguf.incomplete", "d.gguf.downloading"):
        (tmp_path / name).write_bytes(b"GGUF")
    (tmp_path / "notes.txt").write_text("not a model")
    (tmp_path / "fake.gguf").write_bytes(b"PK\x03\x04 not gguf at all")
    reader = CountingReader()
    r = scan([folder(tmp_path)], reader)
    assert [os.path.basename(m.path) for m in r.models] == ["good.gguf"]
    why = reasons(r)
    assert why["cut.gguf"] == f"incomplete download: {size} of {size + 100} bytes present, 100 bytes missing"
    for name in ("a.gguf.part", "b.gguf.downloadInProgress", "c.gguf.incomplete", "d.gguf.downloading"):
        assert why[name] == "partial download"
    assert why["fake.gguf"].startswith("not a readable GGUF file")
    assert "notes.txt" not in why
    assert sorted(os.path.basename(p) for p in reader.paths) == ["cut.gguf", "fake.gguf", "good.gguf"]


def test_symlink_loops_and_duplicate_roots(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    write_model(lib / "sub" / "m.gguf")
    (lib / "sub" / "loop").symlink_to("..")  # lib/sub/loop -> lib
    (tmp_path / "alias").symlink_to(lib)
    (lib / "m-again.gguf").symlink_to(lib / "sub" / "m.gguf")
    reader = CountingReader()
    r = scan([folder(lib), folder(tmp_path / "alias"), folder(lib / "sub")], reader)
    assert len(r.models) == 1 and reader.calls == 1
    assert r.skipped == ()


def test_unreadable_folder_is_reported_and_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_model(tmp_path / "ok" / "m.gguf")
    locked = tmp_path / "locked"
    write_model(locked / "hidden.gguf")
    real_scandir = os.scandir

    def scandir(path):  # type: ignore[no-untyped-def]
        if os.fspath(path) == str(locked):  # chmod 0 does not stop root, so refuse here as the OS would
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr("fitplan.core.library.scanner.os.scandir", scandir)
    r = scan([folder(tmp_path)], CountingReader())
    assert [os.path.basename(m.path) for m in r.models] == ["m.gguf"]
    assert r.skipped == (SkippedFile(str(locked), "unreadable folder: Permission denied"),)


def test_missing_user_folder(tmp_path: Path) -> None:
    r = scan(
        [folder(tmp_path / "nope"), LibraryRoot(str(tmp_path / "no-hub"), RootKind.HUGGINGFACE)],
        CountingReader(),
    )
    assert r.models == () and r.skipped == (SkippedFile(str(tmp_path / "nope"), "folder not found"),)


def test_a_file_can_be_a_root(tmp_path: Path) -> None:
    p = write_model(tmp_path / "x.gguf")
    r = scan([folder(p)], CountingReader())
    assert [m.path for m in r.models] == [str(p)]


def build_library(root: Path) -> None:
    make_hub_repo(root / "hub")
    for i in (1, 2):
        write_model(root / "split" / f"s-{i:05d}-of-00002.gguf", split=(i - 1, 2))
    write_model(root / "vl" / "m.gguf")
    write_mmproj(root / "vl" / "mmproj.gguf")
    (root / "junk.gguf").write_bytes(b"nope")
    write_model(root / "cut.gguf", truncate_by=10)


def test_rescan_of_an_unchanged_library_reads_no_header(tmp_path: Path) -> None:
    build_library(tmp_path / "lib")
    roots = [folder(tmp_path / "lib")]
    index_path = tmp_path / "cache" / "scan-index.json"
    cold_reader = CountingReader()
    cold = LibraryScanner(cold_reader, JsonScanIndex(index_path)).scan(roots)
    # hub blob, 2 shards, model, projector, junk, cut
    assert cold_reader.calls == 7 and cold.headers_read == 7 and cold.header_bytes_read > 0
    warm_reader = CountingReader()
    warm = LibraryScanner(warm_reader, JsonScanIndex(index_path)).scan(
        roots
    )  # a new process: index from disk
    assert warm_reader.calls == 0 and warm.headers_read == 0 and warm.header_bytes_read == 0
    assert warm.models == cold.models and warm.skipped == cold.skipped
    # a changed file (new size and mtime) is read again, and only that one
    write_model(tmp_path / "lib" / "vl" / "m.gguf", n_elements=128)
    again = CountingReader()
    r = LibraryScanner(again, JsonScanIndex(index_path)).scan(roots)
    assert [os.path.basename(p) for p in again.paths] == ["m.gguf"]
    assert next(m for m in r.models if m.path.endswith("vl/m.gguf")).n_params == 2 * 128


def test_corrupt_index_file_is_rebuilt(tmp_path: Path) -> None:
    write_model(tmp_path / "lib" / "m.gguf")
    index_path = tmp_path / "idx.json"
    index_path.write_text("{ not json")
    reader = CountingReader()
    LibraryScanner(reader, JsonScanIndex(index_path)).scan([folder(tmp_path / "lib")])
    assert reader.calls == 1
    assert json.loads(index_path.read_text())["schema"] == INDEX_SCHEMA


def test_results_stream_folder_by_folder(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        write_model(tmp_path / name / "m.gguf")
    reader = CountingReader()
    it = LibraryScanner(reader, MemoryScanIndex()).iter_scan([folder(tmp_path)])
    first = next(it)
    assert isinstance(first, LibraryModel) and first.display_name == "a/m.gguf"
    assert reader.calls == 1  # folders b and c are not read yet
    assert [e.display_name for e in it if isinstance(e, LibraryModel)] == ["b/m.gguf", "c/m.gguf"]


def test_progress_and_cancel(tmp_path: Path) -> None:
    for name in ("a", "b", "c", "d"):
        write_model(tmp_path / name / "m.gguf")
    cancel = threading.Event()
    seen: list[ScanProgress] = []

    def on_progress(p: ScanProgress) -> None:
        seen.append(p)
        if p.headers_read == 2:
            cancel.set()

    reader = CountingReader()
    r = LibraryScanner(reader, MemoryScanIndex()).scan(
        [folder(tmp_path)], cancel=cancel, on_progress=on_progress
    )
    assert r.cancelled and reader.calls == 2
    assert [m.display_name for m in r.models] == ["a/m.gguf", "b/m.gguf"]  # the folders done so far
    assert seen[-1].headers_read == 2 and seen[-1].header_bytes_read == r.header_bytes_read > 0
    full = LibraryScanner(CountingReader(), MemoryScanIndex()).scan(
        [folder(tmp_path)], on_progress=seen.append
    )
    assert not full.cancelled and len(full.models) == 4
    assert seen[-1].files_seen == 4


def fake_header(path: str, arch: str = "qwen3") -> GGUFHeader:
    return GGUFHeader(
        source=path,
        version=3,
        byte_order="<",
        metadata=MappingProxyType(
            {
                "general.architecture": arch,
                f"{arch}.context_length": 40960,
                f"{arch}.block_count": 36,
                "general.file_type": 7,
            }
        ),
        tensors=(GGUFTensorInfo("blk.0.attn_q.weight", 8, (4096, 4096), 0, 4096 * 4096 * 34 // 32),),
        alignment=32,
        data_offset=0,
        file_size=None,
        header_bytes_read=12345,
    )


def test_injected_fake_reader(tmp_path: Path) -> None:
    """The scanner needs nothing but the reader: a fake one that parses nothing is enough (and errors pass through)."""
    (tmp_path / "a.gguf").write_bytes(b"")
    (tmp_path / "b.gguf").write_bytes(b"")
    calls: list[str] = []

    def reader(path: str) -> GGUFHeader:
        calls.append(path)
        if path.endswith("b.gguf"):
            raise GGUFError("bad magic", 0, path)
        return fake_header(path)

    # the fake header declares 4096*4096*34/32 bytes of data; the empty file is shorter: incomplete
    r = LibraryScanner(reader, MemoryScanIndex()).scan([folder(tmp_path)])
    assert r.models == () and len(calls) == 2
    assert reasons(r)["a.gguf"].startswith("incomplete download: 0 of 17825792 bytes")
    assert reasons(r)["b.gguf"] == "not a readable GGUF file: bad magic"


# ollama digests are sha256:<64 hex digits> (anything else is refused)
DA, DB, DP, DD, DC = ("a" * 64, "b" * 64, "e" * 64, "d" * 64, "c" * 64)


def write_manifest(store: Path, parts: tuple[str, ...], model: str, projector: str | None = None) -> None:
    layers = [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:tmpl", "size": 10},
        {"mediaType": "application/vnd.ollama.image.model", "digest": model, "size": 1},
    ]
    if projector:
        layers.append({"mediaType": "application/vnd.ollama.image.projector", "digest": projector, "size": 1})
    p = store.joinpath("manifests", *parts)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))


def test_ollama_store(tmp_path: Path) -> None:
    store = tmp_path / "models"
    blobs = store / "blobs"
    write_model(blobs / f"sha256-{DA}")
    write_mmproj(blobs / f"sha256-{DP}")
    write_model(blobs / f"sha256-{DB}", arch="qwen2")
    (blobs / f"sha256-{DC}-partial").write_bytes(b"x")
    (blobs / f"sha256-{DC}-partial-0").write_bytes(b"x")
    write_manifest(
        store, ("registry.ollama.ai", "library", "llava", "latest"), f"sha256:{DA}", f"sha256:{DP}"
    )
    write_manifest(store, ("registry.ollama.ai", "library", "llava", "7b"), f"sha256:{DA}", f"sha256:{DP}")
    write_manifest(store, ("hf.co", "org", "repo", "Q4_K_M"), f"sha256:{DB}")
    write_manifest(store, ("registry.ollama.ai", "library", "gone", "latest"), f"sha256:{DD}")
    (store / "manifests" / "registry.ollama.ai" / "library" / "llava" / "broken").write_text("{")
    reader = CountingReader()
    r = scan([LibraryRoot(str(store), RootKind.OLLAMA)], reader)
    assert [(m.display_name, m.aliases, m.architecture) for m in r.models] == [
        ("hf.co/org/repo:Q4_K_M", (), "qwen2"),
        ("llava:7b", ("llava:latest",), "llama"),
    ]
    assert r.models[1].mmproj_path == str(blobs / f"sha256-{DP}")
    assert r.models[1].root_kind is RootKind.OLLAMA
    why = reasons(r)
    assert why[f"sha256-{DC}-partial"] == "partial download (ollama pull not finished)"
    assert why["latest"] == f"model blob sha256-{DD} is missing"
    assert why["broken"].startswith("unreadable ollama manifest")
    assert reader.calls == 2  # the projector is named by the manifest, not read


def test_ollama_store_found_inside_a_folder(tmp_path: Path) -> None:
    store = tmp_path / ".ollama" / "models"
    write_model(store / "blobs" / f"sha256-{DA}")
    write_manifest(store, ("registry.ollama.ai", "library", "tiny", "latest"), f"sha256:{DA}")
    r = scan([folder(tmp_path / ".ollama")], CountingReader())
    assert [(m.display_name, m.root_kind) for m in r.models] == [("tiny:latest", RootKind.FOLDER)]


def test_index_forgets_deleted_files(tmp_path: Path) -> None:
    write_model(tmp_path / "lib" / "keep.gguf")
    gone = write_model(tmp_path / "lib" / "gone.gguf")
    write_model(tmp_path / "other" / "elsewhere.gguf")
    index_path = tmp_path / "idx.json"
    LibraryScanner(CountingReader(), JsonScanIndex(index_path)).scan(
        [folder(tmp_path / "lib"), folder(tmp_path / "other")]
    )
    assert len(json.loads(index_path.read_text())["files"]) == 3
    gone.unlink()
    # a scan of "lib" only: the deleted file is forgotten, the file under "other" (not scanned, still there) is kept
    LibraryScanner(CountingReader(), JsonScanIndex(index_path)).scan([folder(tmp_path / "lib")])
    kept = sorted(os.path.basename(e["path"]) for e in json.loads(index_path.read_text())["files"].values())
    assert kept == ["elsewhere.gguf", "keep.gguf"]


def test_cancel_inside_a_folder_drops_the_half_read_folder(tmp_path: Path) -> None:
    for i in (1, 2, 3):
        write_model(tmp_path / f"big-{i:05d}-of-00003.gguf", split=(i - 1, 3))
    cancel = threading.Event()

    def on_progress(p: ScanProgress) -> None:
        if p.headers_read == 1:
            cancel.set()

    r = LibraryScanner(CountingReader(), MemoryScanIndex()).scan([folder(tmp_path)], cancel, on_progress)
    assert r.cancelled and r.models == () and r.skipped == ()  # not "missing shard(s)"


def test_header_only_file_is_a_model_not_an_incomplete_download(tmp_path: Path) -> None:
    # 2 f32 tensors of 64 elements: 2 * 64 * 4 = 512 bytes of tensor data, all cut off; the second file is cut the
    # same way but lacks fitplan.header_only, so it stays an interrupted download.
    kept = write_model(tmp_path / "lib" / "example.gguf", truncate_by=512, header_only=True)
    write_model(tmp_path / "lib" / "cut.gguf", truncate_by=512)
    index = MemoryScanIndex()
    r = scan([folder(tmp_path / "lib")], CountingReader(), index)
    assert [m.path for m in r.models] == [str(kept)]
    model = r.models[0]
    assert model.header_only
    assert model.file_size == kept.stat().st_size
    assert model.expected_size == kept.stat().st_size + 512
    assert [Path(s.path).name for s in r.skipped] == ["cut.gguf"]
    assert r.skipped[0].reason.startswith("incomplete download")
    # The index remembers it as a model: a rescan reads no header and finds it again.
    reader = CountingReader()
    again = scan([folder(tmp_path / "lib")], reader, index)
    assert reader.calls == 0
    assert [m.path for m in again.models] == [str(kept)] and again.models[0].header_only


def test_header_only_flag_survives_the_index_file(tmp_path: Path) -> None:
    write_model(tmp_path / "lib" / "example.gguf", truncate_by=512, header_only=True)
    index_path = tmp_path / "idx.json"
    LibraryScanner(CountingReader(), JsonScanIndex(index_path)).scan([folder(tmp_path / "lib")])
    reader = CountingReader()
    r = LibraryScanner(reader, JsonScanIndex(index_path)).scan([folder(tmp_path / "lib")])
    assert reader.calls == 0
    assert len(r.models) == 1 and r.models[0].header_only


def test_index_of_an_older_schema_is_not_trusted(tmp_path: Path) -> None:
    # Schema 1 cached header-only files as incomplete downloads; such an index is dropped and the file read again.
    path = write_model(tmp_path / "lib" / "example.gguf", truncate_by=512, header_only=True)
    st = path.stat()
    index_path = tmp_path / "idx.json"
    stale = {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "summary": None,
        "error": "incomplete",
        "path": str(path),
    }
    index_path.write_text(json.dumps({"schema": 1, "files": {f"{st.st_dev}:{st.st_ino}": stale}}))
    reader = CountingReader()
    r = LibraryScanner(reader, JsonScanIndex(index_path)).scan([folder(tmp_path / "lib")])
    assert reader.calls == 1
    assert len(r.models) == 1 and r.skipped == ()


def test_bundled_examples_are_four_models_with_gemma_holding_its_projector() -> None:
    examples = REPO / "resources" / "examples"
    r = scan([LibraryRoot(str(examples), RootKind.EXAMPLES)], CountingReader())
    assert r.skipped == ()
    by_name = {Path(m.path).name: m for m in r.models}
    assert sorted(by_name) == [
        "DeepSeek-V2-Lite-Chat-Q4_K_M.gguf",
        "Llama-3.1-8B-Instruct-Q4_K_M.gguf",
        "Qwen3-30B-A3B-Q4_K_M.gguf",
        "gemma-3-12b-it-Q4_K_M.gguf",
    ]
    assert all(m.header_only and m.root_kind is RootKind.EXAMPLES for m in r.models)
    assert [Path(m.mmproj_path).name for m in r.models if m.mmproj_path] == ["mmproj-gemma-3-12b-it-F16.gguf"]
    # Each header declares far more tensor data than the file holds (18-40 KB of header each).
    assert all(m.expected_size > 1000 * m.file_size for m in r.models)


@pytest.mark.parametrize("file_type", [41, 15, 15 | 1024, None])
def test_the_scan_labels_the_file_type_as_the_profile_does(tmp_path: Path, file_type: int | None) -> None:
    """One label per file: the scan list and the profile agree (41 is Q2_0 in both; once it was "type 41")."""
    path = write_model(tmp_path / "m.gguf", file_type=file_type)
    header = read_header(path)
    assert file_type_name(header) == build_profile(header).file_type
    if file_type == 41:
        assert file_type_name(header) == "Q2_0"
