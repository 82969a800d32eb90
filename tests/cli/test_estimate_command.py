"""`fitplan estimate`: llama-server flags in, a per-device table or JSON out, exit 0 / 1 / 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fitplan.cli import main
from fitplan.core import hardware
from fitplan.core.base.devices import GIB
from fitplan.core.gguf.reader import read_header
from fitplan.core.hardware.probe import HostMemory, ProbeResult
from support.accuracy import recorded_band
from support.models import TESTS

MODELS = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"


def _model(tmp_path: Path, name: str = "llama-3.1-8b") -> Path:
    """A sparse full-size copy of a recorded model: the real header, the tensor data left as a hole."""
    src = MODELS / f"{name}.header.gguf"
    dst = tmp_path / f"{name}.gguf"
    shutil.copyfile(src, dst)
    size = read_header(src, allow_incomplete=True).expected_file_size
    with dst.open("r+b") as f:
        f.truncate(size)
    return dst


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # A fixed 64 GiB host, so that "fits" does not depend on this machine's free RAM.
    host = HostMemory(64 * GIB, 64 * GIB, "test")
    monkeypatch.setattr(hardware, "detect_hardware", lambda *a, **k: ProbeResult(host=host))
    return _model(tmp_path)


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict[str, object]]:
    rc = main(argv)
    return rc, json.loads(capsys.readouterr().out)


def test_json_document(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = _json(
        capsys,
        [
            "estimate",
            str(model),
            "-c",
            "32768",
            "-np",
            "1",
            "--assume-gpu",
            "RTX 4090=24GiB",
            "-t",
            "8",
            "--json",
        ],
    )
    assert rc == 0
    assert doc["fits"] is True
    m = doc["model"]
    assert isinstance(m, dict) and m["architecture"] == "llama" and m["path"] == str(model)
    s = doc["settings"]
    assert isinstance(s, dict)
    assert (s["n_ctx"], s["n_ctx_seq"], s["n_parallel"], s["cache_type_k"], s["flash_attn"]) == (
        32768, 32768, 1, "f16", True,
    )  # fmt: skip
    devices = doc["devices"]
    assert isinstance(devices, list) and [d["kind"] for d in devices] == ["gpu", "cpu"]
    gpu = devices[0]
    assert set(gpu["terms"]) == {
        "weights",
        "kv",
        "recurrent",
        "compute",
        "output",
        "mmproj",
        "draft",
        "reserve",
    }
    assert gpu["terms"]["kv"] == 4096 * 2**20  # 32 layers x 32768 cells x 4096 B
    assert gpu["used_bytes"] == sum(gpu["terms"].values())
    assert gpu["total_bytes"] == 24 * 2**30
    assert doc["ignored_flags"] == ["-t 8"]
    runtime = doc["host_runtime"]
    # No SWA or recurrent state: no context checkpoints, only the prompt cache.
    assert isinstance(runtime, dict) and set(runtime) == {"prompt_cache"}
    assert runtime["prompt_cache"]["max_bytes"] == 8192 * 2**20


def test_does_not_fit_exits_1(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["estimate", str(model), "-c", "131072", "-ngl", "all", "--assume-gpu", "8GiB"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "DOES NOT FIT" in out


def test_table_for_people(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["estimate", str(model), "-c", "8192", "--assume-gpu", "2x16GiB", "-ts", "1,1"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "weights" in out and "compute" in out and "Host" in out
    assert out.count("16 GiB GPU") == 2


def test_no_gpu(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = _json(capsys, ["estimate", str(model), "-dev", "none", "-c", "4096", "--json"])
    devices = doc["devices"]
    assert isinstance(devices, list) and [d["kind"] for d in devices] == ["cpu"]
    assert rc == 0  # 4.8 GiB of weights + 512 MiB of KV + compute fit the fixed 64 GiB host
    host = devices[0]
    assert host["terms"]["kv"] == 512 * 2**20  # 32 layers x 4096 cells x 4096 B
    assert host["terms"]["reserve"] == 0


def test_model_via_dash_m_and_tool(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = _json(
        capsys,
        [
            "estimate",
            "-m",
            str(model),
            "-c",
            "4096",
            "--tool",
            "llama-fit-params",
            "--assume-gpu",
            "24",
            "--json",
        ],
    )
    assert rc == 0
    s = doc["settings"]
    assert isinstance(s, dict) and s["tool"] == "llama-fit-params" and s["n_outputs_max"] == 2048


def test_reserve_option(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, doc = _json(capsys, ["estimate", str(model), "--assume-gpu", "24GiB", "--reserve", "100", "--json"])
    devices = doc["devices"]
    assert isinstance(devices, list) and devices[0]["terms"]["reserve"] == 100 * 2**20


@pytest.mark.parametrize(
    "argv",
    [
        ["--no-mmap"],
        ["-ctk", "q3_K"],
        ["-c"],
        ["-ctv", "q8_0", "-fa", "off"],
    ],
)
def test_bad_input_exits_2(model: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    rc = main(["estimate", str(model), "--assume-gpu", "24GiB", *argv])
    assert rc == 2
    assert "error" in capsys.readouterr().err


def test_missing_model_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", str(tmp_path / "nope.gguf"), "--assume-gpu", "24GiB"]) == 2
    assert main(["estimate", "-c", "4096"]) == 2


def test_text_and_json_carry_the_measured_error_band(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On the host alone, f16 cache, flash attention on: the band of llama's recordings in that class, with the
    figures the accuracy report measures on the recordings."""
    argv = ["estimate", str(model), "-dev", "none", "-c", "4096", "-fa", "on"]
    expected = recorded_band("llama", "fa-on/kv-f16/one-device")
    line = (
        f"compute: within {expected.range_text} on {expected.cases} recorded configurations of llama "
        "(flash attention on, f16 cache, one device)"
    )
    main(argv)
    assert line in capsys.readouterr().out.splitlines()[-1]
    _, doc = _json(capsys, [*argv, "--json"])
    acc = doc["accuracy"]
    assert isinstance(acc, dict)
    assert acc["text"].startswith(line)
    assert acc["configuration"]["key"] == "fa-on/kv-f16/one-device"
    assert (acc["cases"], acc["compute_min_pct"], acc["compute_max_pct"]) == (
        expected.cases,
        expected.compute_min_pct,
        expected.compute_max_pct,
    )
    assert acc["scope"] == "architecture" and acc["engine"] == "llama.cpp"


def test_a_fork_is_not_given_llama_cpps_band(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, doc = _json(
        capsys, ["estimate", str(model), "-dev", "none", "-c", "4096", "--engine", "beellama", "--json"]
    )
    acc = doc["accuracy"]
    assert isinstance(acc, dict)
    assert acc["cases"] == 0 and acc["compute_min_pct"] is None
    assert acc["text"].startswith("compute: no error band recorded for beellama")
