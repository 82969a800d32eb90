"""`fitplan quants`: a repository of mixed quants and split sets on a loopback Hub, and a folder of quants."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fitplan.cli import main
from fitplan.core.inputs.model_source import forget_loaded
from fitplan.core.plan.ranking import COMFORT_CTX
from support.hub import TEST_REPO, HubState, flags_without_model

REPO = TEST_REPO
MACHINE = ["--assume-gpu", "12GiB", "--host-ram", "32GiB"]
ALL = {"Q2_K", "Q3_K_M", "IQ4_XS", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "BF16"}


@pytest.fixture(autouse=True)
def _plain(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    forget_loaded()
    yield
    forget_loaded()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    o = capsys.readouterr()
    return rc, o.out, o.err


def quants_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    rc, out, err = run(capsys, "quants", *argv, "--json")
    assert rc in (0, 1), err
    doc: dict[str, object] = json.loads(out)
    return doc


def _rows(doc: dict[str, object]) -> list[dict[str, object]]:
    rows = doc["quants"]
    assert isinstance(rows, list)
    return rows


def test_repository_rows(capsys: pytest.CaptureFixture[str], hub: tuple[str, HubState]) -> None:
    _, state = hub
    doc = quants_json(capsys, REPO, *MACHINE)
    rows = _rows(doc)
    assert {r["name"] for r in rows} == ALL and doc["source"] == f"hf.co/{REPO}"
    by = {r["name"]: r for r in rows}
    assert by["Q8_0"]["files"] == [
        "Q8_0/Qwen2.5-VL-7B-Instruct-Q8_0-00001-of-00002.gguf",
        "Q8_0/Qwen2.5-VL-7B-Instruct-Q8_0-00002-of-00002.gguf",
    ]
    assert len(by["BF16"]["files"]) == 3  # type: ignore[arg-type]
    assert doc["mmproj"] == [{"name": "F16", "files": ["mmproj-F16.gguf"], "size_bytes": 1354162784}]
    assert doc["ignored_files"] == 3
    # every row is a Hub command, by tag, without the token; exactly one is recommended, the first
    assert [r["recommended"] for r in rows].count(True) == 1 and rows[0]["recommended"] is True
    for r in rows:
        assert r["argv"][:3] == ["llama-server", "-hf", f"{REPO}:{r['name']}"]  # type: ignore[index]
    # the ranking rule: fitting rows first, all-on-GPU with a comfortable context (COMFORT_CTX), then with less,
    # before offload, then larger files first (Q8_0 keeps 6656 tokens once the projector's largest image is counted)
    tiers = [(not r["fits"], not r["all_on_gpu"], r["n_ctx"] < COMFORT_CTX) for r in rows]  # type: ignore[operator]
    assert tiers == sorted(tiers)
    comfortable = [
        r["size_bytes"] for r in rows if r["fits"] and r["all_on_gpu"] and r["n_ctx"] >= COMFORT_CTX
    ]  # type: ignore[operator]
    assert comfortable == sorted(comfortable, reverse=True)  # type: ignore[type-var]
    # 15 headers (8 models in 12 files, the projector read once per model that pairs it... cached after the first)
    total = sum(f.size for f in state.repos[REPO].values())
    assert doc["bytes_read"] == state.cdn_bytes and state.cdn_bytes < total / 100


def test_each_row_equals_fitplan_plan_on_the_same_file(
    capsys: pytest.CaptureFixture[str], hub: tuple[str, HubState], repo_dir: Path
) -> None:
    rows = _rows(quants_json(capsys, REPO, *MACHINE, "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"))
    mmproj = str(repo_dir / "mmproj-F16.gguf")
    for r in rows:
        files = r["files"]
        assert isinstance(files, list)
        local = str(repo_dir / files[0])
        rc, out, err = run(
            capsys, "plan", local, "--mmproj-file", mmproj, *MACHINE, "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on",
            "--json",
        )  # fmt: skip
        assert rc in (0, 1), err
        p = json.loads(out)
        assert (p["fits"], p["n_ctx"] if p["fits"] else 0, p["placement"]["description"]) == (
            r["fits"], r["n_ctx"], r["placement"],
        ), r["name"]  # fmt: skip
        assert flags_without_model(p["argv"]) == flags_without_model(r["argv"]), r["name"]  # type: ignore[arg-type]


def test_plan_of_a_hub_reference_equals_its_row(
    capsys: pytest.CaptureFixture[str], hub: tuple[str, HubState]
) -> None:
    rows = {r["name"]: r for r in _rows(quants_json(capsys, REPO, *MACHINE))}
    mm = rows["Q6_K"]["mmproj"]
    assert isinstance(mm, str)
    rc, out, err = run(capsys, "plan", f"hf.co/{REPO}:Q6_K", "--mmproj-file", mm, *MACHINE, "--json")
    assert rc == 0, err
    p = json.loads(out)
    assert p["argv"] == rows["Q6_K"]["argv"] and p["n_ctx"] == rows["Q6_K"]["n_ctx"]


def test_a_hub_reference_counts_the_projector_llama_server_downloads(
    capsys: pytest.CaptureFixture[str], hub: tuple[str, HubState], repo_dir: Path
) -> None:
    """`-hf` loads the repository's projector unless --no-mmproj (common/arg.cpp: download_mmproj): the plan of a
    Hub reference without --mmproj-file equals the plan of the local file with its projector named, and with
    --no-mmproj the plan of the file alone, with --no-mmproj in the command."""

    def plan_json(*argv: str) -> dict[str, object]:
        rc, out, err = run(capsys, "plan", *argv, *MACHINE, "--json")
        assert rc in (0, 1), err
        doc: dict[str, object] = json.loads(out)
        return doc

    local = str(repo_dir / "Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf")
    with_mm = plan_json(local, "--mmproj-file", str(repo_dir / "mmproj-F16.gguf"))
    alone = plan_json(local)
    assert with_mm["n_ctx"] != alone["n_ctx"]  # the projector matters on this machine
    hf = plan_json(f"hf.co/{REPO}:Q4_K_M")
    assert hf["n_ctx"] == with_mm["n_ctx"] and str(hf["mmproj"]).endswith("/mmproj-F16.gguf")
    off = plan_json(f"hf.co/{REPO}:Q4_K_M", "--no-mmproj")
    assert off["n_ctx"] == alone["n_ctx"] and off["mmproj"] is None
    assert "--no-mmproj" in off["argv"] and "--no-mmproj" not in hf["argv"]  # type: ignore[operator]
    rc, text, _ = run(capsys, "plan", f"hf.co/{REPO}:Q4_K_M", *MACHINE)
    assert rc == 0
    assert "projector: mmproj-F16.gguf" in text and "-hf loads it" in text
    # a local -m loads no projector by itself: none is counted unless named
    assert alone["mmproj"] is None

    # estimate follows the same rule
    def projector_bytes(*argv: str) -> int:
        rc, out, err = run(capsys, "estimate", *argv, *MACHINE, "-c", "4096", "--json")
        assert rc == 0, err
        return sum(int(d["terms"]["mmproj"]) for d in json.loads(out)["devices"])

    named = projector_bytes(local, "--mmproj", str(repo_dir / "mmproj-F16.gguf"))
    assert named > 0 and projector_bytes(f"hf.co/{REPO}:Q4_K_M") == named
    assert projector_bytes(f"hf.co/{REPO}:Q4_K_M", "--no-mmproj") == 0 and projector_bytes(local) == 0


def test_pins_apply_to_every_row(capsys: pytest.CaptureFixture[str], hub: tuple[str, HubState]) -> None:
    rows = _rows(quants_json(capsys, f"https://huggingface.co/{REPO}", *MACHINE, "-c", "4096"))
    assert {r["n_ctx"] for r in rows if r["fits"]} == {4096}


def test_text_output_and_the_token(capsys: pytest.CaptureFixture[str], hub: tuple[str, HubState]) -> None:
    _, state = hub
    state.private.add(REPO)
    rc, out, err = run(capsys, "quants", f"hf.co/{REPO}", *MACHINE)
    assert rc == 2 and "HTTP 401" in err and "--token" in err and len(err.strip().splitlines()) == 1
    rc, out, err = run(capsys, "quants", f"hf.co/{REPO}", *MACHINE, "--token", "hf_secret")
    assert rc == 0, err
    assert "hf_secret" not in out
    lines = out.splitlines()
    assert lines[0] == f"hf.co/{REPO}: 8 model(s), 1 projector(s), 3 other file(s) ignored"
    assert lines[2].startswith("*  ")  # the recommended row, marked
    assert any(line.startswith("ranked: fits first") for line in lines)
    assert all(a is None for _, _, a in state.cdn_log)


def test_nothing_fits(capsys: pytest.CaptureFixture[str], hub: tuple[str, HubState]) -> None:
    rc, out, _ = run(capsys, "quants", REPO, "--assume-gpu", "1GiB", "--host-ram", "2GiB")
    assert rc == 1 and "no model of this source fits this machine" in out


def test_a_folder_of_quants(capsys: pytest.CaptureFixture[str], repo_dir: Path) -> None:
    doc = quants_json(capsys, str(repo_dir), *MACHINE)
    rows = _rows(doc)
    assert {r["name"] for r in rows} == ALL and doc["bytes_read"] == 0
    for r in rows:
        argv = r["argv"]
        assert isinstance(argv, list) and argv[1] == "-m" and argv[3] == "--mmproj"
        assert argv[4] == str(repo_dir / "mmproj-F16.gguf")


@pytest.mark.parametrize("source", ["no/such:thing:here", "/nonexistent/folder", "https://example.invalid/x"])
def test_bad_sources(
    capsys: pytest.CaptureFixture[str], source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no real network either way
    rc, _, err = run(capsys, "quants", source, *MACHINE)
    assert rc == 2 and err.startswith("fitplan: error:") and len(err.strip().splitlines()) == 1


def test_a_folder_of_unrelated_models_is_ranked_model_by_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The bundled examples are four different models (and one model's projector): each is its own group with its
    own recommendation, its size is the model's (the header's, not the header-only file's), and a projector goes
    only with the model it feeds."""
    examples = Path(__file__).resolve().parents[2] / "resources" / "examples"
    doc = quants_json(capsys, str(examples), "--assume-gpu", "24GiB", "--host-ram", "64GiB")
    rows = _rows(doc)
    models = {str(r["model"]) for r in rows}
    assert len(models) == 4 and len(rows) == 4
    assert any(m.startswith("Llama 3.1 8B Instruct (llama, 32 layers") for m in models)
    assert doc["recommended"] is None  # several models: no single recommendation
    assert [m["recommended"] for m in doc["models"]] == ["Q4_K_M"] * 4  # type: ignore[index]
    assert all(r["recommended"] for r in rows)  # each model's only quant is its recommendation
    by_file = {Path(str(r["files"][0])).name: r for r in rows}  # type: ignore[index]
    llama = by_file["Llama-3.1-8B-Instruct-Q4_K_M.gguf"]
    # the size is what the header says the file holds (4.58 GiB of a Q4_K_M 8B), not the 18 KiB copy on disk
    assert llama["size_bytes"] == 4912916416
    assert llama["mmproj"] is None and "--mmproj" not in llama["argv"]  # type: ignore[operator]
    gemma = by_file["gemma-3-12b-it-Q4_K_M.gguf"]
    assert gemma["mmproj"] == str(examples / "mmproj-gemma-3-12b-it-F16.gguf")
    rc, out, _ = run(capsys, "quants", str(examples), "--assume-gpu", "24GiB", "--host-ram", "64GiB")
    assert rc == 0 and "4 different models: each is ranked among its own quants" in out


def test_quants_of_one_model_are_one_group(capsys: pytest.CaptureFixture[str], repo_dir: Path) -> None:
    doc = quants_json(capsys, str(repo_dir), *MACHINE)
    rows = _rows(doc)
    assert len({r["model"] for r in rows}) == 1 and doc["recommended"] == rows[0]["name"]
