"""The bundled GPU catalog, --assume-gpu specs, HardwareConfig, and `fitplan gpus`."""

from __future__ import annotations

import argparse
import json

import pytest

from fitplan.commands import gpus as gpus_cmd
from fitplan.core.base.devices import GIB, MIB, Device, DeviceKind, Vendor
from fitplan.core.hardware import (
    AssumedGpu,
    AssumedGpuError,
    DetectedGpu,
    FakeProbe,
    HardwareConfig,
    HostMemory,
    ProbeResult,
    assumed_devices,
    load_catalog,
    parse_assumed_gpu,
)
from fitplan.core.hardware.catalog import normalise_name, parse_size


def test_catalog_is_well_formed_and_covers_the_families() -> None:
    cat = load_catalog()
    names = [g.name for g in cat]
    assert len(names) == len(set(names)) == len(cat)
    for g in cat:
        assert g.memory_gib and all(m > 0 for m in g.memory_gib), g.name
        assert g.segment in {"consumer", "workstation", "datacenter", "apple", "apu", "unified"}
    for required in (
        "GeForce GTX 1080 Ti",
        "GeForce RTX 2080 Ti",
        "GeForce RTX 3090",
        "GeForce RTX 4090",
        "GeForce RTX 5090",
        "A100",
        "H100",
        "H200",
        "L4",
        "L40S",
        "Tesla T4",
        "Tesla V100",
        "Radeon RX 6800 XT",
        "Radeon RX 7900 XTX",
        "Radeon RX 9070 XT",
        "Instinct MI210",
        "Instinct MI250",
        "Instinct MI300X",
        "Apple M1 Max",
        "Apple M2 Ultra",
        "Apple M4 Max",
        "Arc A770",
        "Arc B580",
    ):
        assert required in names, required
    # every name must resolve to itself (no alias shadows another GPU)
    for g in cat:
        assert cat.find(g.name) == g


@pytest.mark.parametrize(
    ("spec", "name", "memory", "count", "vendor"),
    [
        ("RTX 4090", "GeForce RTX 4090", 24 * GIB, 1, Vendor.NVIDIA),
        ("nvidia geforce rtx 4090", "GeForce RTX 4090", 24 * GIB, 1, Vendor.NVIDIA),
        ("4090", "GeForce RTX 4090", 24 * GIB, 1, Vendor.NVIDIA),
        ("24GiB", "24 GiB GPU", 24 * GIB, 1, Vendor.GENERIC),
        ("24 GB", "24 GiB GPU", 24 * GIB, 1, Vendor.GENERIC),
        ("11.5", "11.5 GiB GPU", int(11.5 * GIB), 1, Vendor.GENERIC),
        ("24576MiB", "24 GiB GPU", 24 * GIB, 1, Vendor.GENERIC),
        ("RTX 4090=20GiB", "RTX 4090", 20 * GIB, 1, Vendor.NVIDIA),
        ("my card=12GB", "my card", 12 * GIB, 1, Vendor.GENERIC),
        ("2x RTX 3090", "GeForce RTX 3090", 24 * GIB, 2, Vendor.NVIDIA),
        ("2xRTX 3060", "GeForce RTX 3060 12 GiB", 12 * GIB, 2, Vendor.NVIDIA),  # no space after the count
        ("2XRTX 3060", "GeForce RTX 3060 12 GiB", 12 * GIB, 2, Vendor.NVIDIA),
        ("3 x 16GiB", "16 GiB GPU", 16 * GIB, 3, Vendor.GENERIC),
        ("2*H100", "H100", 80 * GIB, 2, Vendor.NVIDIA),
        ("A100", "A100 80 GiB", 80 * GIB, 1, Vendor.NVIDIA),
        ("A100 40GB", "A100 40 GiB", 40 * GIB, 1, Vendor.NVIDIA),
        ("A100-40GB", "A100 40 GiB", 40 * GIB, 1, Vendor.NVIDIA),
        ("7900 XTX", "Radeon RX 7900 XTX", 24 * GIB, 1, Vendor.AMD),  # "X" of XTX is not a count
        ("RTX 4060 Ti 16GB", "GeForce RTX 4060 Ti 16 GiB", 16 * GIB, 1, Vendor.NVIDIA),
        ("Arc B580", "Arc B580", 12 * GIB, 1, Vendor.INTEL),
    ],
)
def test_assumed_gpu_specs(spec: str, name: str, memory: int, count: int, vendor: Vendor) -> None:
    g = parse_assumed_gpu(spec)
    assert (g.name, g.memory_bytes, g.count, g.vendor) == (name, memory, count, vendor)


def test_apple_configurations_get_the_metal_working_set() -> None:
    g = parse_assumed_gpu("M2 Max 64GB")
    assert g.unified_ram_bytes == 64 * GIB
    assert g.memory_bytes == 48 * GIB  # 64 GiB x 3/4 (above 36 GiB)
    (d,) = g.devices()
    assert d.unified_memory and d.hypothetical and d.vendor is Vendor.APPLE
    small = parse_assumed_gpu("Apple M3 Pro 18GB")
    assert small.memory_bytes == 18 * GIB * 2 // 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("Voodoo 5", "unknown GPU"),
        ("RTX 4090=lots", "not a memory size"),
        ("0GiB", "positive"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(AssumedGpuError, match=message):
        parse_assumed_gpu(spec)


def test_assumed_devices_expand_counts() -> None:
    devs = assumed_devices(["2x RTX 3090", "8GiB"])
    assert [d.name for d in devs] == ["GeForce RTX 3090", "GeForce RTX 3090", "8 GiB GPU"]
    assert all(d.hypothetical and d.kind is DeviceKind.GPU and d.free_bytes == d.total_bytes for d in devs)


def test_size_and_name_helpers() -> None:
    assert parse_size("1TiB") == 1 << 40 and parse_size("512 MB") == 512 * MIB and parse_size("big") is None
    assert normalise_name("NVIDIA GeForce RTX 4090 D") == "rtx4090d"


def detected(key: str, name: str) -> DetectedGpu:
    return DetectedGpu(
        Device(name, DeviceKind.GPU, 24 * GIB, 23 * GIB, Vendor.NVIDIA, backend_name="CUDA0"), key=key
    )


PROBED = ProbeResult(
    gpus=(detected("GPU-1", "A"), detected("GPU-2", "B")), host=HostMemory(64 * GIB, 50 * GIB, "test")
)


def test_hardware_config_machine() -> None:
    cfg = HardwareConfig(excluded=("GPU-1",), hypothetical=(AssumedGpu("X", 8 * GIB, Vendor.AMD, count=2),))
    m = cfg.machine(PROBED)
    assert [(d.name, d.hypothetical) for d in m.gpus] == [("B", False), ("X", True), ("X", True)]
    assert m.host.total_bytes == 64 * GIB and m.host.free_bytes == 50 * GIB
    only_assumed = HardwareConfig(use_detected=False, host_ram_bytes=128 * GIB).machine(PROBED)
    assert (
        only_assumed.gpus == () and only_assumed.host.total_bytes == only_assumed.host.free_bytes == 128 * GIB
    )


def test_hardware_config_round_trip_through_json() -> None:
    cfg = HardwareConfig(
        use_detected=False,
        excluded=("GPU-1",),
        hypothetical=(parse_assumed_gpu("2x RTX 3090"), parse_assumed_gpu("M4 Max 128GB")),
        host_ram_bytes=96 * GIB,
    )
    assert HardwareConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert HardwareConfig.from_dict({}) == HardwareConfig()


def test_hardware_config_tolerates_bad_data() -> None:
    data: dict[str, object] = {
        "use_detected": "yes",
        "excluded": ["GPU-1", 3],
        "hypothetical": [
            {"name": "ok", "memory_bytes": GIB, "vendor": "martian", "count": 0},
            {"name": "no memory"},
            "junk",
        ],
        "host_ram_bytes": -5,
        "future_field": 1,
    }
    cfg = HardwareConfig.from_dict(data)
    assert cfg.use_detected is True and cfg.excluded == ("GPU-1",) and cfg.host_ram_bytes is None
    assert cfg.hypothetical == (AssumedGpu("ok", GIB, Vendor.GENERIC, 1),)


def test_gpus_command_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    result = ProbeResult(gpus=PROBED.gpus[:1], host=PROBED.host, problems=("AMD: something",))
    probes = (FakeProbe(result),)
    assert gpus_cmd.run(argparse.Namespace(json=False), [], probes) == 0
    text = capsys.readouterr().out
    assert "CUDA0: A  23.00 GiB free of 24.00 GiB" in text
    assert "Host RAM: 50.00 GiB available of 64.00 GiB" in text and "why: AMD: something" in text
    assert gpus_cmd.run(argparse.Namespace(json=True), [], probes) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpus"][0]["total_bytes"] == 24 * GIB and doc["gpus"][0]["key"] == "GPU-1"
    assert doc["host"]["available_bytes"] == 50 * GIB and doc["problems"] == ["AMD: something"]


def test_gpus_command_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    probes = (
        FakeProbe(ProbeResult(problems=("NVIDIA: NVML library not found (no NVIDIA driver installed)",))),
    )
    assert gpus_cmd.run(argparse.Namespace(json=False), [], probes) == 0
    text = capsys.readouterr().out
    assert (
        text.startswith("No GPU found.") and "Host RAM: unknown" in text and "NVML library not found" in text
    )
