"""The Vulkan and Metal stand-in recordings (`record.py --grids standin_vulkan,standin_metal`): each case is the
recorder's own setting with its commit and command, on the devices its spec names, and the rules the stand-ins
answer with show in llama.cpp's buffers (tools/groundtruth/standin/standin.cpp)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.models import REPO
from support.tools import load_tool

record = load_tool("tools/groundtruth/record.py")
FIXTURES = REPO / "tests" / "fixtures" / "llamacpp"
MIB = 1 << 20
GRIDS = {"standin_vulkan": record.VULKAN_16, "standin_metal": record.METAL_64}


def _doc(grid: str, model: str) -> dict[str, Any]:
    return json.loads((FIXTURES / grid / f"{model}.json").read_text())


def _case(grid: str, model: str, case_id: str) -> dict[str, Any]:
    return next(c for c in _doc(grid, model)["cases"] if c["id"] == case_id)


@pytest.mark.parametrize(
    ("grid", "model"), [(g, m) for g in sorted(GRIDS) for m in record.standin_grid_models(g)]
)
def test_every_case_is_the_recorders_setting_with_commit_and_command(grid: str, model: str) -> None:
    doc = _doc(grid, model)
    assert doc["llama_cpp"] == {"commit": "515e85511", "build": 11434} and doc["tool"] == "membreak"
    n_layer, moe = record._layers_and_moe(model)
    wide = model in record.STANDIN_VULKAN_EXTRA_MODELS
    expected = {
        cid: ["--standin", spec, "-t", "1", *args]
        for cid, spec, args in record.standin_backend_settings(GRIDS[grid], n_layer, moe, wide)
    }
    recorded = {c["id"]: c["command"][3:] for c in doc["cases"]}
    assert recorded == expected
    assert all(c["command"][:3] == ["membreak", "-m", f"$MODELS/sparse/{model}.gguf"] for c in doc["cases"])
    assert all("results" in c for c in doc["cases"]), "every setting was accepted"


def test_vulkan_devices_and_buffers_are_named_as_ggml_vulkan_names_them() -> None:
    res = _case("standin_vulkan", "qwen3-30b-a3b", "2dev-c8192-faon")["results"]
    assert [d["name"] for d in res["resolved"]["devices"]] == ["Vulkan0", "Vulkan1"]
    assert {(b["buffer_type"], b["is_host"]) for b in res["buffers"]} == {
        ("Vulkan0", False),
        ("Vulkan1", False),
        ("Vulkan_Host", True),
    }


def test_metal_has_no_host_buffer_type() -> None:
    """ggml-metal's device has no host buffer type: with the experts in host memory they stay in the CPU's own
    buffer types (here repacked: the recording host's CPU), not in a pinned GPU host buffer as on CUDA/Vulkan."""
    res = _case("standin_metal", "qwen3-30b-a3b", "c8192-faon-cmoe-ub512")["results"]
    assert {b["buffer_type"] for b in res["buffers"]} == {"MTL0", "CPU", "CPU_REPACK"}
    vk = _case("standin_vulkan", "qwen3-30b-a3b", "c8192-faon-cmoe-ub512")["results"]
    assert {b["buffer_type"] for b in vk["buffers"]} == {"Vulkan0", "Vulkan_Host"}


def test_vulkans_1_gib_chunks_show_where_the_logits_exceed_them() -> None:
    """llama-3.1-8b at -ub 2048 with flash attention: ggml-cuda's compute buffer puts the 1002 MiB logits over the
    other tensors (1146.1 MiB); Vulkan's 1 GiB chunks give the logits one of their own (1482.1 MiB). At -ub 512
    (250.5 MiB of logits) both are 286.5 MiB."""
    cuda = _case("standin", "llama-3.1-8b", "c4096-faon-ub2048")["results"]["buffers"]
    vk = _case("standin_vulkan", "llama-3.1-8b", "c4096-faon-ub2048")["results"]["buffers"]
    gpu = {b["buffer_type"]: b["compute"] for b in cuda + vk if not b["is_host"]}
    assert round(gpu["CUDA0"] / MIB, 1) == 1146.1 and round(gpu["Vulkan0"] / MIB, 1) == 1482.1
    small = _case("standin_vulkan", "llama-3.1-8b", "c4096-faon-ub512")["results"]["buffers"]
    assert [round(b["compute"] / MIB, 1) for b in small if not b["is_host"]] == [286.5]


def test_metals_flash_attention_scratch_shows_at_long_contexts() -> None:
    """llama-3.1-8b with flash attention: Metal reserves the f16 copies of K and V beside every attention output
    (2 x 256 MiB at 131072 cells), so there the attention phase is the peak (706.5 MiB), where at 32768 cells the
    logits phase still is (314.5 MiB, as on CUDA)."""
    long = _case("standin_metal", "llama-3.1-8b", "c131072-faon")["results"]["buffers"]
    short = _case("standin_metal", "llama-3.1-8b", "c32768-faon-ub512")["results"]["buffers"]
    mtl = next(b["compute"] for b in long if b["buffer_type"] == "MTL0")
    mtl_short = next(b["compute"] for b in short if b["buffer_type"] == "MTL0")
    assert round(mtl / MIB, 1) == 706.5 and round(mtl_short / MIB, 1) == 314.5


SERVER = FIXTURES / "standin_server"


def test_the_server_grid_runs_llama_server_on_the_dynamically_loaded_stand_in() -> None:
    """Each case names the backend library and the devices it ran with, and the recorder's own flags; the
    stand-in's byte counts hold the projector's two buffers (weights and warm-up compute) where it is on the GPU."""
    specs = {(name, cid): (mm, draft, args) for name, mm, draft, cid, args in record.STANDIN_SERVER_CASES}
    seen = set()
    for path in sorted(SERVER.glob("*.json")):
        doc = json.loads(path.read_text())
        assert doc["llama_cpp"] == {"commit": "515e85511", "build": 11434} and doc["tool"] == "llama-server"
        for c in doc["cases"]:
            mm, draft, args = specs[(doc["model"]["name"], c["id"])]
            seen.add((doc["model"]["name"], c["id"]))
            cmd = c["command"]
            assert cmd[:3] == [
                "GGML_BACKEND_PATH=libggml-standin.so",
                "FITPLAN_STANDIN=cuda:24GiB",
                "llama-server",
            ]
            assert " ".join(args) in " ".join(cmd)
            assert ("--mmproj" in cmd) == (mm is not None) and ("-md" in cmd) == (draft is not None)
            allocs = [a["bytes"] for a in c["results"]["standin_alloc"]]
            if mm and "--no-mmproj-offload" not in cmd:
                # clip allocates its weights and warm-up buffers after the text model's (and once before, for
                # the server's memory probe): the weights padded, at least what clip logs as the model size
                weights = c["results"]["mmproj_buffers_mib"][0]["mib"]
                assert allocs[:2] == allocs[-2:] and allocs[-2] >= (weights - 0.005) * MIB
    assert seen == set(specs)


LLAMA_BIN = Path(os.environ.get("FITPLAN_LLAMA_BUILD", "/work/llama/build")) / "bin"


def _replay(case: dict[str, Any], header: Path, file_bytes: int, tmp: Path) -> dict[str, Any]:
    """Run a recorded membreak command again on the model rebuilt from its header copy (a dry run never reads the
    tensor data: the header, then zeros up to the recorded size)."""
    model = tmp / "model.gguf"
    with open(model, "wb") as f:
        f.write(header.read_bytes())
        f.truncate(file_bytes)
    argv = [
        str(LLAMA_BIN / "membreak"),
        *[str(model) if a.startswith("$MODELS/") else a for a in case["command"][1:]],
    ]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    out: dict[str, Any] = json.loads(p.stdout)
    return out


@pytest.mark.llamacpp
@pytest.mark.skipif(
    not (LLAMA_BIN / "membreak").exists(), reason="needs the llama.cpp build (FITPLAN_LLAMA_BUILD)"
)
@pytest.mark.parametrize(
    ("grid", "case_id"),
    [("standin_vulkan", "2dev-c8192-faon-ts3,1-ub2048"), ("standin_metal", "c131072-faon")],
)
def test_the_build_replays_a_recorded_case_to_the_byte(grid: str, case_id: str, tmp_path: Path) -> None:
    doc = _doc(grid, "llama-3.1-8b")
    case = next(c for c in doc["cases"] if c["id"] == case_id)
    header = FIXTURES / doc["model"]["header"]
    got = _replay(case, header, doc["model"]["file_bytes"], tmp_path)
    keys = ("buffer_type", "model", "context", "compute")
    assert sorted(tuple(b[k] for k in keys) for b in got["buffers"]) == sorted(
        tuple(b[k] for k in keys) for b in case["results"]["buffers"]
    )
