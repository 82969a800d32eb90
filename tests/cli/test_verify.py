"""`fitplan verify`: the estimate next to llama-fit-params' own numbers (a fake binary always, the real one when
a llama.cpp build is present)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from fitplan.cli import main
from fitplan.core.gguf.reader import read_header
from fitplan.core.launch.fit_params import fit_params_args, parse_output
from support.models import TESTS

MODELS = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"
REAL_BIN = Path(os.environ.get("FITPLAN_LLAMA_BUILD", "/work/llama/build")) / "bin"  # tools/groundtruth

FAKE_STDOUT = "Host 2268 1024 298 \n"
FAKE_STDERR = """\
0.00.058.217 D sched_reserve:        CPU compute buffer size =   298.52 MiB
0.00.058.558 I common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |
0.00.058.558 I common_memory_breakdown_print: |   - Host               |                 3591 =  2268 +    1024 +     298                |
0.00.058.558 I common_memory_breakdown_print: |   - CPU_REPACK         |                 2664 =  2664 +       0 +       0                |
"""


@pytest.fixture
def model(tmp_path: Path) -> Path:
    src = MODELS / "llama-3.1-8b.header.gguf"
    dst = tmp_path / "llama.gguf"
    shutil.copyfile(src, dst)
    with dst.open("r+b") as f:
        f.truncate(read_header(src, allow_incomplete=True).expected_file_size)
    return dst


def _fake_bin(tmp_path: Path, stdout: str = FAKE_STDOUT, stderr: str = FAKE_STDERR, rc: int = 0) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    (d / "out.txt").write_text(stdout)
    (d / "err.txt").write_text(stderr)
    exe = d / "llama-fit-params"
    exe.write_text(
        f'#!/bin/sh\necho "$@" > "{d}/args.txt"\ncat "{d}/out.txt"\ncat "{d}/err.txt" >&2\nexit {rc}\n'
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return d


def test_parse_output() -> None:
    rows, compute = parse_output(FAKE_STDOUT, FAKE_STDERR)
    assert [(r.name, r.model, r.context, r.compute) for r in rows] == [
        ("Host", 2268, 1024, 298),
        ("CPU_REPACK", 2664, 0, 0),
    ]
    assert compute == {"CPU": 298.52}


def test_only_fit_params_flags_are_passed() -> None:
    argv = [
        "-c",
        "8192",
        "-kvu",
        "--cache-ram",
        "0",
        "-ngl",
        "10",
        "--host",
        "x",
        "-ctk",
        "q8_0",
        "--mmproj",
        "p",
    ]
    assert fit_params_args(argv) == ["-c", "8192", "-ngl", "10", "-ctk", "q8_0"]


def test_with_a_fake_binary(tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _fake_bin(tmp_path)
    rc = main(["verify", str(model), "-c", "8192", "-dev", "none", "--llama-bin", str(d), "-t", "4"])
    text = capsys.readouterr().out
    assert rc == 0
    assert (d / "args.txt").read_text().split() == [
        "-m",
        str(model),
        "-c",
        "8192",
        "-dev",
        "none",
        "-fitp",
        "on",
        "-v",
    ]
    lines = {tuple(x.split()[:3]): x for x in text.splitlines() if x.startswith(("Host", "CPU_REPACK"))}
    # KV: 32 layers x 8192 cells x 4096 B = 1024 MiB, exactly what the fake llama.cpp says.
    assert "1024.00" in lines[("Host", "kv", "+")] and "+0.00" in lines[("Host", "kv", "+")]
    assert "llama.cpp compute buffers" in text


def test_binary_failure_and_absence(tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _fake_bin(tmp_path, stdout="", stderr="error: bad things\n", rc=1)
    assert main(["verify", str(model), "--llama-bin", str(d)]) == 2
    assert "bad things" in capsys.readouterr().err
    assert main(["verify", str(model), "--llama-bin", str(tmp_path / "nowhere")]) == 2
    assert "not found" in capsys.readouterr().err


@pytest.mark.llamacpp
@pytest.mark.skipif(
    not (REAL_BIN / "llama-fit-params").exists(), reason="no llama.cpp build (FITPLAN_LLAMA_BUILD)"
)
def test_with_the_real_binary(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["verify", str(model), "-c", "4096", "-dev", "none", "--llama-bin", str(REAL_BIN)])
    text = capsys.readouterr().out
    assert rc == 0
    kv = next(x for x in text.splitlines() if x.startswith("Host") and "kv" in x)
    # 32 layers x 4096 cells x 4096 B = 512 MiB, and llama.cpp agrees to the MiB.
    assert kv.split()[4:6] == ["512.00", "512"]
    comp = next(x for x in text.splitlines() if x.startswith("Host") and "compute" in x)
    est, real = float(comp.split()[2]), float(comp.split()[3])
    assert abs(est - real) / real < 0.05


def test_json(tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    d = _fake_bin(tmp_path)
    assert main(["verify", str(model), "-c", "8192", "-dev", "none", "--llama-bin", str(d), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {(r["device"], r["term"]): r for r in doc["rows"]}
    assert rows[("Host", "kv + recurrent")] == {
        "device": "Host", "term": "kv + recurrent", "estimate_mib": 1024.0, "llamacpp_mib": 1024.0,
    }  # fmt: skip
    assert rows[("CPU_REPACK", "weights")]["llamacpp_mib"] == 2664.0
    assert doc["llamacpp_compute_mib"] == {"CPU": 298.52}
