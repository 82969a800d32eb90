"""`fitplan scan`: listing, JSON shape, skipped files, fit answers, exit codes (generated folders only)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from fitplan.cli import main
from fitplan.commands import scan as scan_cmd
from fitplan.core.base.devices import GIB, Machine, assumed_gpu, host_device
from fitplan.core.library import LibraryModel
from fitplan.core.plan.usage import MarginPolicy
from support.library import CountingReader, write_mmproj, write_model


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("FITPLAN_CACHE_DIR", str(cache))
    return cache


def args(*dirs: str, json_out: bool = False, no_fit: bool = False) -> argparse.Namespace:
    return argparse.Namespace(
        dirs=list(dirs), json=json_out, no_fit=no_fit, assume_gpu=[], margin=0, host_margin=0, use_total=False
    )


def library(root: Path) -> Path:
    write_model(root / "a" / "alpha.gguf", name="Alpha")
    for i in (1, 2):
        write_model(root / "b" / f"beta-{i:05d}-of-00002.gguf", split=(i - 1, 2), name="Beta")
    write_mmproj(root / "b" / "mmproj-beta.gguf")
    (root / "b" / "gamma.gguf.part").write_bytes(b"GG")
    return root


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lib = library(tmp_path / "lib")

    def fit(m: LibraryModel) -> scan_cmd.FitAnswer:
        return scan_cmd.FitAnswer(m.name == "Alpha", "")

    assert scan_cmd.run(args(str(lib), json_out=True), [], reader=CountingReader(), fit_check=fit) == 0
    doc = json.loads(capsys.readouterr().out)
    alpha, beta = doc["models"]
    assert alpha["path"] == str(lib / "a" / "alpha.gguf")
    assert (alpha["architecture"], alpha["file_type"], alpha["n_params"], alpha["fits"]) == (
        "llama",
        "Q4_K_M",
        128,
        True,
    )
    assert alpha["file_size"] == (lib / "a" / "alpha.gguf").stat().st_size
    assert beta["fits"] is False and len(beta["shard_paths"]) == 2 and beta["n_params"] == 256
    assert beta["mmproj_path"] == str(lib / "b" / "mmproj-beta.gguf")
    assert doc["skipped"] == [{"path": str(lib / "b" / "gamma.gguf.part"), "reason": "partial download"}]


def test_text_output_and_index_in_the_cache_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], private_cache: Path
) -> None:
    lib = library(tmp_path / "lib")
    reader = CountingReader()
    assert scan_cmd.run(args(str(lib), no_fit=True), [], reader=reader) == 0
    text = capsys.readouterr().out
    assert "a/alpha.gguf" in text and "b/beta-00001-of-00002.gguf (2 files) +mmproj" in text
    assert "gamma.gguf.part: partial download" in text
    assert (private_cache / "scan-index.json").is_file()
    again = CountingReader()
    assert scan_cmd.run(args(str(lib), no_fit=True), [], reader=again) == 0
    assert again.calls == 0


def test_unknown_fit_shows_a_question_mark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(tmp_path / "m.gguf")

    def fit(m: LibraryModel) -> scan_cmd.FitAnswer:
        return scan_cmd.FitAnswer(None, "estimator unavailable")

    scan_cmd.run(args(str(tmp_path)), [], reader=CountingReader(), fit_check=fit)
    row = next(line for line in capsys.readouterr().out.splitlines() if "m.gguf" in line)
    assert row.rstrip().endswith("?")


def test_missing_folders_are_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(tmp_path / "nowhere"), "--no-fit"]) == 2
    assert "none of the folders exist" in capsys.readouterr().err


def test_planner_fit_check_answers_for_a_model(tmp_path: Path) -> None:
    """With the planner: a tiny model fits a 24 GiB GPU, and cannot fit 1 GiB of host RAM that the 1 GiB host
    margin leaves nothing of."""
    write_model(tmp_path / "m.gguf")
    (model,) = (
        scan_cmd.LibraryScanner(reader=CountingReader()).scan(scan_cmd.roots_for([str(tmp_path)])).models
    )
    roomy = Machine(gpus=(assumed_gpu("24 GiB GPU", 24),), host=host_device(64 * GIB))
    assert scan_cmd.planner_fit_check(roomy, MarginPolicy())(model) == scan_cmd.FitAnswer(
        True, "fits", "fits"
    )
    tiny = Machine(gpus=(), host=host_device(GIB))
    answer = scan_cmd.planner_fit_check(tiny, MarginPolicy())(model)
    assert (answer.fits, answer.level) == (False, "no_fit")


def test_progress_line_is_throttled() -> None:
    import io

    from fitplan.core.library import ScanProgress

    now = [0.0]
    stream = io.StringIO()
    line = scan_cmd.ProgressLine(stream, interval=0.2, clock=lambda: now[0])
    for i in range(5):  # five updates within 0.1 s: one line drawn
        now[0] = i * 0.025
        line(ScanProgress(i + 1, i, 0, i, 0, "x"))
    now[0] = 0.5
    line(ScanProgress(9, 7, 1, 9, 0, "y"))
    assert (
        stream.getvalue()
        == "\rscanning: 1 files, 0 models, 0 skipped\rscanning: 9 files, 7 models, 1 skipped"
    )
    line.clear()
    assert stream.getvalue().endswith("\r\033[K")


def test_margin_mib_is_the_old_spelling_of_margin() -> None:
    from fitplan.cli import build_parser

    parser = build_parser()
    old = parser.parse_args(["scan", "--margin-mib", "512", "--no-fit"])
    new = parser.parse_args(["scan", "--margin", "512", "--no-fit"])
    assert old.margin == new.margin == 512
    assert parser.parse_args(["scan", "--no-fit"]).margin == 1024  # plan's default
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    scan_help = actions[0].choices["scan"].format_help()
    assert "--margin-mib" not in scan_help and "--margin MiB" in scan_help
