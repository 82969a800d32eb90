"""`fitplan plan` and `fitplan command`, end to end on recorded model headers, with assumed hardware only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fitplan import cli
from fitplan.commands.plan import detect_machine, load_profile
from fitplan.core.base.devices import GIB
from fitplan.core.launch.command_line import import_command
from fitplan.core.launch.shell import Shell
from fitplan.core.plan.planner import MarginPolicy, Pins, plan
from support.accuracy import recorded_band
from support.models import TESTS

SPARSE = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"
QWEN3_8B = str(SPARSE / "qwen3-8b.header.gguf")
QWEN3_MOE = str(SPARSE / "qwen3-30b-a3b.header.gguf")
HW = ["--header-only", "--host-ram", "64GiB"]


@pytest.fixture(autouse=True)
def _no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_plan_json_matches_the_planner(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(capsys, "plan", QWEN3_8B, *HW, "--assume-gpu", "A=8GiB", "-np", "1", "--json")
    assert code == 0
    doc = json.loads(stdout)
    expected = plan(
        load_profile(QWEN3_8B, header_only=True),
        detect_machine(["A=8GiB"], "64GiB"),
        Pins(n_parallel=1),
        margin=MarginPolicy(),
    )
    assert doc["fits"] is True
    assert doc["n_ctx"] == expected.settings.n_ctx
    assert doc["binding"] == expected.binding
    assert [d["device"] for d in doc["devices"]] == ["GPU0 (A)", "host RAM"]
    assert doc["devices"][0]["used_bytes"] <= doc["devices"][0]["capacity_bytes"]
    assert doc["argv"][:3] == ["llama-server", "-m", QWEN3_8B]
    assert "-np" in doc["argv"]


def test_plan_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(capsys, "plan", QWEN3_MOE, *HW, "--assume-gpu", "A=12GiB", "--shell", "sh")
    assert code == 0
    assert "plan: fits: context limited by GPU0 (A) memory;" in stdout
    assert re.search(r"\d+ expert layers on CPU", stdout)
    assert "command (sh):\nllama-server \\\n  -m " in stdout
    assert "--n-cpu-moe" in stdout


def test_command_output_feeds_back(capsys: pytest.CaptureFixture[str]) -> None:
    for shell in Shell:
        code, stdout, _ = run(
            capsys, "command", QWEN3_MOE, *HW, "--assume-gpu", "A=12GiB", "-ctk", "q8_0", "-ctv", "q8_0",
            "--shell", shell.value,
        )  # fmt: skip
        assert code == 0
        imported = import_command(stdout, shell)
        assert imported.model_path == QWEN3_MOE
        # the command's flags, given back as pins, give the same command
        code2, again, _ = run(capsys, "command", QWEN3_MOE, *HW, "--assume-gpu", "A=12GiB", "--shell", shell.value,
                              *[a for a in imported.args if a not in ("-m", QWEN3_MOE)])  # fmt: skip
        assert code2 == 0
        assert again == stdout
        assert import_command(again, shell).settings == imported.settings


def test_command_settings_equal_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(
        capsys, "command", QWEN3_8B, *HW, "--assume-gpu", "A=6GiB", "--shell", "sh", "-c", "16384"
    )
    assert code == 0
    expected = plan(
        load_profile(QWEN3_8B, header_only=True), detect_machine(["A=6GiB"], "64GiB"), Pins(n_ctx=16384)
    )
    assert import_command(stdout, Shell.SH).settings == expected.settings
    assert expected.settings.n_ctx == 16384


def test_preset(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(
        capsys, "command", QWEN3_8B, *HW, "--assume-gpu", "A=24GiB", "--preset", "--name", "q8b"
    )
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0].startswith("; ")
    assert lines[1] == "[q8b]"
    assert lines[2] == f"model = {Path(QWEN3_8B).resolve()}"
    assert "fit = off" in lines


@pytest.mark.parametrize("name", ["q\rx", "q\nx", "q]x"])
def test_preset_name_that_would_break_its_header_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code, stdout, err = run(
        capsys, "command", QWEN3_8B, *HW, "--assume-gpu", "A=24GiB", "--preset", "--name", name
    )
    assert (code, stdout) == (2, "")
    assert err.startswith("fitplan: error: preset name") and err.count("\n") == 1


def test_plan_json_carries_the_verdict_sentence_the_window_shows(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(capsys, "plan", QWEN3_8B, *HW, "--assume-gpu", "A=8GiB", "-np", "1", "--json")
    text = json.loads(stdout)["verdict"]["text"]
    assert code == 0 and text.startswith("Fits: ") and "to spare on GPU0 (A) after the margin." in text
    assert text.endswith("Planned for 1 slot (llama-server's default: 4 slots sharing one KV cache).")


def test_does_not_fit_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(capsys, "plan", QWEN3_8B, *HW, "--assume-gpu", "A=2GiB", "--all-on-gpu")
    assert code == 1
    assert "does not fit with all weights on the GPU" in stdout
    assert "GPU0 (A) short by" in stdout
    code, _, err = run(capsys, "command", QWEN3_8B, *HW, "--assume-gpu", "A=2GiB", "--all-on-gpu")
    assert code == 1
    assert "warning" in err


def test_rpc_in_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(
        capsys, "plan", QWEN3_MOE, *HW, "--assume-gpu", "A=12GiB", "--rpc", "10.0.0.2:50052=12GiB", "--json"
    )
    assert code == 0
    doc = json.loads(stdout)
    assert [d["device"] for d in doc["devices"]][:2] == ["RPC0[10.0.0.2:50052]", "GPU1 (A)"]
    argv = doc["argv"]
    assert argv[argv.index("--rpc") + 1] == "10.0.0.2:50052"
    assert doc["rpc_hosts"] == [
        {"endpoint": "10.0.0.2:50052", "argv": ["ggml-rpc-server", "-H", "0.0.0.0", "-p", "50052"]}
    ]


@pytest.mark.parametrize(
    "bad",
    [
        ["--rpc", "10.0.0.2:50052"],  # no size
        ["-m", "other.gguf"],
        ["--no-such-flag"],
        ["--assume-gpu", "A=lots"],
        ["-ctk", "q9_9"],
    ],
)
def test_bad_input(capsys: pytest.CaptureFixture[str], bad: list[str]) -> None:
    code, _, err = run(capsys, "plan", QWEN3_8B, *HW, "--assume-gpu", "A=8GiB", *bad)
    assert code == 2
    assert err.startswith("fitplan: error:")


def test_host_flag_is_not_taken_for_host_ram(capsys: pytest.CaptureFixture[str]) -> None:
    # llama-server's --host must reach the flag parser, not be read as an abbreviation of --host-ram
    code, stdout, _ = run(
        capsys, "plan", QWEN3_8B, *HW, "--assume-gpu", "A=8GiB", "--host", "0.0.0.0", "--json"
    )
    assert code == 0
    assert json.loads(stdout)["ignored_flags"] == ["--host 0.0.0.0"]


def test_machine_from_assumptions() -> None:
    m = detect_machine(["2x A=8GiB"], "32GiB")
    assert [g.total_bytes for g in m.gpus] == [8 * GIB, 8 * GIB]
    assert m.host.total_bytes == 32 * GIB


def test_command_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(
        capsys, "command", QWEN3_8B, *HW, "--assume-gpu", "A=8GiB", "--shell", "cmd", "--json"
    )
    assert code == 0
    doc = json.loads(stdout)
    assert doc["shell"] == "cmd"
    assert import_command(doc["command"], Shell.CMD).args == tuple(doc["argv"][1:])
    assert doc["preset"].splitlines()[1] == "[qwen3-8b.header]"


def test_plan_keeps_the_flags_it_does_not_model_in_its_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`--temp` (no memory effect) and `--mtmd-batch-max-tokens` (not modelled) are written at the end of the command as
    given."""
    model = str(SPARSE / "llama-3.1-8b.header.gguf")
    code = cli.main(["plan", model, "--header-only", "--assume-gpu", "24GiB", "--host-ram", "64GiB", "--json",
                     "--temp", "0.7", "--mtmd-batch-max-tokens", "1024"])  # fmt: skip
    assert code == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[-4:] == ["--temp", "0.7", "--mtmd-batch-max-tokens", "1024"]


def test_plan_prints_the_measured_error_band(capsys: pytest.CaptureFixture[str]) -> None:
    """One GPU that holds every layer, f16 cache, flash attention on: qwen3's band in that class, the figures
    the accuracy report measures on the recordings. A GPU of unknown make ("A=24GiB") is planned with ggml-cuda's
    rules, so the band is the one measured on the CUDA-shaped stand-ins."""
    args = ("plan", QWEN3_8B, *HW, "--assume-gpu", "A=24GiB", "-fa", "on", "-np", "1", "-c", "8192")
    expected = recorded_band("qwen3", "fa-on/kv-f16/one-device", "cuda")
    line = (
        f"compute: within {expected.range_text} on {expected.cases} recorded configurations of qwen3 "
        "on CUDA/ROCm stand-ins (flash attention on, f16 cache, one device)"
    )
    code, stdout, _ = run(capsys, *args)
    assert code == 0 and any(s.startswith(line) for s in stdout.splitlines()), stdout
    code, stdout, _ = run(capsys, *args, "--json")
    acc = json.loads(stdout)["accuracy"]
    assert acc["text"].startswith(line) and acc["cases"] == expected.cases
