"""`fitplan plan` on the catalog's shared- and unified-memory machines: each is planned with the memory it really
has (docs/memory-kinds.md), and the host and GPU of one pool are not counted twice."""

from __future__ import annotations

import json

import pytest

from fitplan import cli
from fitplan.core.base.devices import GIB, MIB
from support.models import TESTS

SPARSE = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"
GPT_OSS_120B = str(SPARSE / "gpt-oss-120b.header.gguf")
QWEN3_MOE = str(SPARSE / "qwen3-30b-a3b.header.gguf")
MARGIN = 1024 * MIB  # the default margin per GPU and of host RAM


@pytest.fixture(autouse=True)
def _no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")


def plan_json(capsys: pytest.CaptureFixture[str], model: str, *argv: str) -> dict[str, object]:
    code = cli.main(["plan", model, "--header-only", "-np", "1", "--json", *argv])
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    doc = json.loads(out.out)
    assert isinstance(doc, dict)
    return doc


def devices(doc: dict[str, object]) -> list[dict[str, object]]:
    devs = doc["devices"]
    assert isinstance(devs, list)
    return devs


def test_strix_halo_gets_its_carve_out_and_gtt_and_one_pool(capsys: pytest.CaptureFixture[str]) -> None:
    doc = plan_json(capsys, GPT_OSS_120B, "--assume-gpu", "Strix Halo")
    gpu, host = devices(doc)
    # 128 GiB with the firmware's 512 MiB carve-out: the OS sees 127.5 GiB, the kernel's GTT is half of that
    seen = 128 * GIB - 512 * MIB
    assert gpu["capacity_bytes"] == 512 * MIB + seen // 2 - MARGIN
    assert host["capacity_bytes"] == seen - MARGIN  # the machine's own RAM, not this machine's
    assert doc["fits"] is True
    # the GPU's use beyond the carve-out is host RAM: counted in the host's use, once
    gpu_used, host_used = gpu["used_bytes"], host["used_bytes"]
    assert isinstance(gpu_used, int) and isinstance(host_used, int)
    assert host_used >= gpu_used - 512 * MIB
    notes = doc["memory_notes"]
    assert isinstance(notes, list) and len(notes) == 1 and "of host RAM" in notes[0]


def test_arc_a770_has_the_memory_sycl_reports(capsys: pytest.CaptureFixture[str]) -> None:
    # llama.cpp's SYCL device table for an Arc A770 16 GB: global mem size 16225243136 (issue 6036)
    doc = plan_json(capsys, QWEN3_MOE, "--assume-gpu", "Arc A770", "--host-ram", "64GiB")
    gpu, host = devices(doc)
    assert gpu["capacity_bytes"] == 16225243136 - MARGIN
    assert host["capacity_bytes"] == 64 * GIB - MARGIN
    assert doc["memory_notes"] == []  # a discrete card: nothing shared


def test_gb10_is_one_pool_of_the_ram_cuda_reports(capsys: pytest.CaptureFixture[str]) -> None:
    # a DGX Spark's CUDA device reports 121.69 GiB in all (published; gpu_catalog.json evidence)
    doc = plan_json(capsys, GPT_OSS_120B, "--assume-gpu", "DGX Spark")
    gpu, host = devices(doc)
    pool = round(121.69 * GIB)
    assert gpu["capacity_bytes"] == host["capacity_bytes"] == pool - MARGIN
    assert doc["fits"] is True and doc["n_ctx"] == 131072
    gpu_used, host_used = gpu["used_bytes"], host["used_bytes"]
    assert isinstance(gpu_used, int) and isinstance(host_used, int)
    assert host_used > gpu_used  # every GPU byte is a host byte too, and the host has its own share


def test_a_unified_machine_too_small_for_both_sides_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    # 64 GiB of host RAM given to a GB10: the GPU's 59 GiB of weights and the host's share do not both fit,
    # although each alone is under its own capacity (counted twice, they would)
    doc = plan_json(
        capsys, GPT_OSS_120B, "--assume-gpu", "GB10", "--host-ram", "60GiB", "-ngl", "99", "-c", "131072"
    )
    gpu, host = devices(doc)
    assert gpu["fits"] is True and host["fits"] is False and doc["fits"] is False
