"""`fitplan plan` with several models or a router preset: one set plan (`fitplan.core.plan.multi`), its budget per
device, and the commands, router preset and llama-swap configuration that launch it; `--hold` and
`--gpu-margin` keep room for other programs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitplan import cli
from fitplan.core.base.devices import GIB, MIB, Machine, assumed_gpu, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.hardware.probe import DetectedGpu, GpuProcess
from fitplan.core.launch.command_line import import_preset
from fitplan.core.launch.flags import parse_flags
from fitplan.core.memory.context import resolve_context
from fitplan.core.plan.usage import held_by_others
from support.models import TESTS

SPARSE = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"
QWEN3_8B = str(SPARSE / "qwen3-8b.header.gguf")
LLAMA_8B = str(SPARSE / "llama-3.1-8b.header.gguf")
GRANITE = str(SPARSE / "granite-4.0-h-tiny.header.gguf")
HW = ["--header-only", "--host-ram", "32GiB", "--assume-gpu", "RTX 4090"]


@pytest.fixture(autouse=True)
def _no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_three_models_with_their_own_flags_get_one_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, err = run(
        capsys, "plan", QWEN3_8B, "+", LLAMA_8B, "--embedding", "+", GRANITE, "--reranking", *HW, "--json"
    )
    assert code == 0, err
    doc = json.loads(stdout)
    assert [m["status"] for m in doc["models"]] == ["resident"] * 3
    gpu = doc["devices"][0]
    assert [r["model"] for r in gpu["resident"]] == [
        "qwen3-8b.header",
        "llama-3.1-8b.header",
        "granite-4.0-h-tiny.header",
    ]
    assert gpu["used_bytes"] == sum(r["bytes"] for r in gpu["resident"]) and gpu["fits"]
    # each model's terms per device add up to what it holds there
    for m, r in zip(doc["models"], gpu["resident"], strict=True):
        on_gpu = next(t for t in m["terms"] if t["device"] == gpu["device"])
        assert sum(on_gpu["bytes"].values()) == r["bytes"] and {"weights", "kv", "compute"} <= set(
            on_gpu["bytes"]
        )
    # each model's own flags reach its command, the router's preset and llama-swap's configuration
    argvs = {c["model"]: c["argv"] for c in doc["commands"]}
    assert "--embedding" in argvs["llama-3.1-8b.header"] and "--embedding" not in argvs["qwen3-8b.header"]
    assert "--rerank" in argvs["granite-4.0-h-tiny.header"]
    assert [a for a in argvs.values() if "--port" in a][2][-1] == "8082"
    assert doc["router_argv"][-2:] == ["--models-max", "3"]
    emb = import_preset(doc["router_preset"], "llama-3.1-8b.header").settings
    assert emb.embedding and emb.n_ctx == doc["models"][1]["n_ctx"]
    assert doc["router_preset"].count("load-on-startup = true") == 3
    assert '"resident":' in doc["llama_swap"] and "persistent: true" in doc["llama_swap"]


def test_models_given_in_a_row_share_the_flags_after_them(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(capsys, "plan", QWEN3_8B, LLAMA_8B, "-c", "8192", *HW, "--json")
    assert code == 0
    doc = json.loads(stdout)
    assert [m["n_ctx"] for m in doc["models"]] == [8192, 8192]


def test_a_router_preset_is_planned_section_by_section(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ini = tmp_path / "router.ini"
    ini.write_text(
        f"[*]\nctx-size = 8192\n[chat]\nmodel = {QWEN3_8B}\n[embed]\nmodel = {LLAMA_8B}\nembedding = true\n"
    )
    code, stdout, err = run(capsys, "plan", str(ini), "--models-max", "2", *HW, "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert [m["name"] for m in doc["models"]] == ["chat", "embed"]
    assert doc["models_max"] <= 2


def test_a_reserve_is_kept_on_its_device(capsys: pytest.CaptureFixture[str]) -> None:
    _, plain, _ = run(capsys, "plan", QWEN3_8B, *HW, "--json")
    code, held, _ = run(capsys, "plan", QWEN3_8B, *HW, "--hold", "GPU0=14GiB:desktop", "--json")
    assert code == 0
    a, b = json.loads(plain), json.loads(held)
    assert b["devices"][0]["capacity_bytes"] == a["devices"][0]["capacity_bytes"] - 14 * GIB
    assert "reserved: 14336 MiB of GPU0 for desktop" in b["verdict"]["margins"]
    assert b["n_ctx"] < a["n_ctx"]


def test_per_gpu_margins_and_bad_reserves(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(
        capsys, "plan", QWEN3_8B, "--header-only", "--host-ram", "32GiB", "--assume-gpu", "2x RTX 4090",
        "--gpu-margin", "2048,256", "--json",
    )  # fmt: skip
    assert code == 0
    caps = [d["capacity_bytes"] for d in json.loads(stdout)["devices"][:2]]
    assert caps[1] - caps[0] == (2048 - 256) * MIB
    code, _, err = run(capsys, "plan", QWEN3_8B, *HW, "--hold", "GPU1=1GiB")
    assert code == 2 and "GPU1 is not among this machine's 1 GPU" in err
    code, _, err = run(capsys, "plan", QWEN3_8B, *HW, "--hold", "GPU0")
    assert code == 2 and "DEVICE=SIZE" in err
    code, _, err = run(capsys, "plan", QWEN3_8B, LLAMA_8B, *HW, "--engine", "ollama")
    assert code == 2 and "one at a time" in err


def test_reranking_is_read_as_llama_cpp_reads_it() -> None:
    # common/arg.cpp (515e85511) --rerank/--reranking: params.embedding = true, pooling rank; llama-server then sets
    # n_batch = n_ubatch and asks for n_batch outputs, as for --embedding
    prof_ctx = LaunchSettings(n_ctx=8192, embedding=True)
    rer = parse_flags(["-c", "8192", "--reranking"]).settings
    assert rer.reranking and not rer.embedding
    from support.plan_models import small_model

    prof = small_model("dense")
    assert resolve_context(prof, rer) == resolve_context(prof, prof_ctx)
    assert resolve_context(prof, rer) != resolve_context(prof, LaunchSettings(n_ctx=8192))


def test_other_programs_are_named_from_the_driver() -> None:
    gpu = assumed_gpu("RTX 4090", 24)
    m = Machine((gpu,), host_device(32 * GIB))
    procs = (GpuProcess(100, "Xorg", 300 * MIB, "graphics"), GpuProcess(200, "python3", 2 * GIB, "compute"))
    g = DetectedGpu(gpu, "uuid", 0, used_bytes=3 * GIB, processes=procs)
    (line,) = held_by_others(m, [g])
    assert "Xorg (100) holds 300 MiB (graphics)" in line and "python3 (200) holds 2048 MiB" in line
    assert "the driver and unlisted processes 724 MiB" in line
    assert held_by_others(m, []) == ()


def test_gpus_names_the_processes_that_hold_memory(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from fitplan.commands import gpus as gpus_cmd
    from fitplan.core.hardware.probe import FakeProbe, HostMemory, ProbeResult

    gpu = assumed_gpu("RTX 4090", 24)
    procs = (GpuProcess(4242, "ComfyUI", 6 * GIB, "compute"),)
    g = DetectedGpu(
        gpu, "uuid", 0, used_bytes=7 * GIB, other_process_bytes=6 * GIB, other_processes=1, processes=procs
    )
    probes = (FakeProbe(ProbeResult(gpus=(g,), host=HostMemory(64 * GIB, 50 * GIB, "test"))),)
    assert gpus_cmd.run(argparse.Namespace(json=False), [], probes) == 0
    assert "ComfyUI (4242) holds 6144 MiB (compute)" in capsys.readouterr().out
    assert gpus_cmd.run(argparse.Namespace(json=True), [], probes) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpus"][0]["processes"] == [
        {"pid": 4242, "name": "ComfyUI", "used_bytes": 6 * GIB, "kind": "compute"}
    ]


def test_plan_names_who_else_holds_the_detected_gpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fitplan.core import hardware
    from fitplan.core.base.devices import Device, DeviceKind, Vendor
    from fitplan.core.hardware.probe import HostMemory, ProbeResult

    card = Device("RTX 4090", DeviceKind.GPU, 24 * GIB, 20 * GIB, Vendor.NVIDIA, backend_name="CUDA0")
    procs = (GpuProcess(1200, "Xorg", 512 * MIB, "graphics"), GpuProcess(3400, "ComfyUI", 3 * GIB, "compute"))
    g = DetectedGpu(card, "GPU-x", 0, used_bytes=4 * GIB, processes=procs)
    found = ProbeResult(gpus=(g,), host=HostMemory(64 * GIB, 50 * GIB, "test"))
    monkeypatch.setattr(hardware, "detect_hardware", lambda *a, **k: found)
    code, stdout, _ = run(capsys, "plan", QWEN3_8B, "--header-only")
    assert code == 0
    assert "other programs (read from the driver):" in stdout
    assert "CUDA0: 4096 MiB in use by others: Xorg (1200) holds 512 MiB (graphics); ComfyUI (3400)" in stdout
    assert "the driver and unlisted processes 512 MiB" in stdout
    code, stdout, _ = run(capsys, "plan", QWEN3_8B, "--header-only", "--json")
    assert code == 0 and json.loads(stdout)["other_programs"][0].startswith(
        "CUDA0: 4096 MiB in use by others"
    )
    code, stdout, _ = run(capsys, "plan", QWEN3_8B, "+", LLAMA_8B, "--embedding", "--header-only")
    assert code == 0 and "ComfyUI (3400) holds 3072 MiB (compute)" in stdout


def test_a_set_plan_says_how_fast_each_model_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """Every plan carries its speed (issue 23): each model of a set at its placement there, the speed `plan` gives
    that model with those settings (`plan_speed`), in text and JSON."""
    code, stdout, _ = run(capsys, "plan", QWEN3_8B, LLAMA_8B, "-c", "8192", *HW, "--json")
    assert code == 0
    doc = json.loads(stdout)
    speeds = doc["speeds"]
    assert len(speeds) == len(doc["models"]) == 2
    for m in doc["models"]:
        s = speeds[m["name"]]
        assert s is not None and s["generation"]["tps"] > 0 and s["prompt"]["tps"] > 0
        assert s["n_ctx"] == m["n_ctx"] == 8192
    code, text, _ = run(capsys, "plan", QWEN3_8B, LLAMA_8B, "-c", "8192", *HW)
    assert code == 0 and "speed of each model alone" in text
    for name, s in speeds.items():
        assert f"{name}: generation {round(s['generation']['tps'])} t/s" in text
