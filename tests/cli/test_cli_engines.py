"""`--engine` on `fitplan estimate`, `fitplan plan` and `fitplan command`, through `fitplan.cli.main`."""

from __future__ import annotations

import json

import pytest

import fitplan.core.hardware as hardware
from fitplan.cli import main
from fitplan.core.base.devices import GIB, MIB
from fitplan.core.hardware.probe import HostMemory, ProbeResult
from support.models import TESTS

MODELS = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"
DEEPSEEK = str(MODELS / "deepseek-v2-lite.header.gguf")
QWEN3_8B = str(MODELS / "qwen3-8b.header.gguf")
HOST = ["--host-ram", "64GiB"]


@pytest.fixture(autouse=True)
def _fixed_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """No probing of this machine: a fixed 64 GiB host and no detected GPU."""
    monkeypatch.setenv("NO_COLOR", "1")
    host = HostMemory(64 * GIB, 64 * GIB, "test")
    monkeypatch.setattr(hardware, "detect_hardware", lambda *a, **k: ProbeResult(host=host))


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, dict[str, object]]:
    rc = main(argv)
    return rc, json.loads(capsys.readouterr().out)


def _device(doc: dict[str, object], index: int) -> dict[str, object]:
    devices = doc["devices"]
    assert isinstance(devices, list)
    dev = devices[index]
    assert isinstance(dev, dict)
    return dev


def test_estimate_ik_on_the_header_fixture(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's command: ik_llama.cpp, -mla 3 -amb 512 at 32K on DeepSeek-V2-Lite's header."""
    rc, doc = _json(
        capsys,
        [
            "estimate",
            "--engine",
            "ik_llama.cpp",
            DEEPSEEK,
            "-mla",
            "3",
            "-amb",
            "512",
            "-c",
            "32768",
            "--json",
        ],
    )
    assert rc == 0
    settings = doc["settings"]
    assert isinstance(settings, dict)
    assert (
        settings["engine"] == "ik_llama.cpp"
        and settings["mla_mode"] == 3
        and settings["attn_max_batch_mib"] == 512
    )
    # no GPU detected: the cache is on the host; 576 * 2 B * 27 layers * 32768 cells = 972 MiB (ik disc. #354)
    host = _device(doc, -1)
    terms = host["terms"]
    assert isinstance(terms, dict)
    assert terms["kv"] == 972 * MIB


def test_estimate_header_only_option_and_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = _json(
        capsys,
        ["estimate", DEEPSEEK, "--engine", "ik_llama.cpp", "-c", "32768", "--header-only", "--assume-gpu", "24GiB",
         "--json"],
    )  # fmt: skip
    assert rc == 0
    gpu = _device(doc, 0)
    terms = gpu["terms"]
    assert isinstance(terms, dict) and terms["kv"] == 972 * MIB
    assert gpu["transient"] == []


def test_estimate_fork_flag_without_engine_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", DEEPSEEK, "-mla", "3", "--assume-gpu", "24GiB"]) == 2
    assert "--engine ik_llama.cpp" in capsys.readouterr().err


def test_estimate_beellama_text_shows_the_transient_window(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["estimate", "--engine", "beellama", QWEN3_8B, "-c", "8192", "-np", "1", "-ctk", "kvarn4",
               "--assume-gpu", "24GiB"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    # qwen3-8b: 8 KV heads of 128 on the largest layer: 8192 x 8 x (128 + 128) x 2 B = 32 MiB
    assert "while a prompt is processed: KVarN window (transient) 32.00 MiB more" in out
    assert "engine beellama" in out


def test_estimate_ollama_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = _json(capsys, ["estimate", "--engine", "ollama", QWEN3_8B, "OLLAMA_KV_CACHE_TYPE=q8_0",
                             "--assume-gpu", "24GiB", "--json"])  # fmt: skip
    assert rc == 0
    s = doc["settings"]
    assert isinstance(s, dict)
    # 24 GiB: ollama's 32768 tier (under the 40960 training context), one slot, not unified, -b/-ub 512
    assert (s["n_ctx"], s["n_parallel"], s["kv_unified"], s["n_batch"], s["n_ubatch"]) == (
        32768,
        1,
        False,
        512,
        512,
    )
    assert (s["cache_type_k"], s["cache_type_v"]) == ("q8_0", "q8_0")
    assert any("VRAM tier" in a for a in doc["assumptions"])  # type: ignore[union-attr]


def test_plan_ik_command(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = _json(capsys, ["plan", "--engine", "ik_llama.cpp", DEEPSEEK, "-amb", "512", "-c", "32768",
                             "--header-only", "--assume-gpu", "24GiB", *HOST, "--json"])  # fmt: skip
    assert rc == 0 and doc["engine"] == "ik_llama.cpp"
    argv = doc["argv"]
    assert isinstance(argv, list)
    assert argv[argv.index("-mla") + 1] == "3" and argv[argv.index("-amb") + 1] == "512" and "-fmoe" in argv
    assert "--fit" not in argv


def test_plan_ollama_text(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "--engine", "ollama", QWEN3_8B, "--num-ctx", "8192", "--kv-cache-type", "q8_0",
               "--header-only", "--assume-gpu", "24GiB", *HOST, "--shell", "sh"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "export OLLAMA_KV_CACHE_TYPE=q8_0" in out and "export OLLAMA_CONTEXT_LENGTH=8192" in out
    assert "PARAMETER num_ctx 8192" in out and "PARAMETER num_gpu " in out
    assert "ollama create qwen3-8b.header -f Modelfile" in out
    assert "llama-server" not in out


@pytest.mark.parametrize(
    ("shell", "line"),
    [("sh", "export OLLAMA_NUM_PARALLEL=2"), ("powershell", "$env:OLLAMA_NUM_PARALLEL = '2'"),
     ("cmd", "set OLLAMA_NUM_PARALLEL=2")],
)  # fmt: skip
def test_command_ollama_per_shell(capsys: pytest.CaptureFixture[str], shell: str, line: str) -> None:
    rc = main(["command", "--engine", "ollama", QWEN3_8B, "OLLAMA_NUM_PARALLEL=2", "--num-ctx", "4096",
               "--header-only", "--assume-gpu", "24GiB", *HOST, "--shell", shell])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert line in out.splitlines()
    assert "PARAMETER num_ctx 4096" in out


def test_command_ollama_json_and_no_preset(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = _json(capsys, ["command", "--engine", "ollama", QWEN3_8B, "--num-ctx", "4096", "--header-only",
                             "--assume-gpu", "24GiB", *HOST, "--json"])  # fmt: skip
    assert rc == 0
    ollama = doc["ollama"]
    assert isinstance(ollama, dict)
    assert ollama["environment"] == {"OLLAMA_CONTEXT_LENGTH": "4096"}
    assert "PARAMETER num_ctx 4096\n" in str(ollama["modelfile"])
    assert main(["command", "--engine", "ollama", QWEN3_8B, "--preset", "--header-only", "--assume-gpu", "24GiB",
                 *HOST]) == 2  # fmt: skip


def test_command_beellama_feeds_back(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["command", "--engine", "beellama", QWEN3_8B, "--header-only", "--assume-gpu", "24GiB", *HOST,
            "--shell", "sh"]  # fmt: skip
    assert main([*base, "-ctk", "kvarn4", "-ctv", "kvarn4", "--kv-tail-tokens", "1024", "-c", "16384"]) == 0
    line = capsys.readouterr().out.strip()
    assert "-ctk kvarn4 -ctv kvarn4" in line and "--kv-tail-tokens 1024" in line
    again = line.split()[3:]  # drop "llama-server -m PATH"
    assert main([*base, *again]) == 0
    assert capsys.readouterr().out.strip() == line
