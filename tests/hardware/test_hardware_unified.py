"""Shared and unified memory: every detection path on fake sysfs / proc trees, and the one-pool rule."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

from fitplan.core.base.devices import GIB, MIB, Device, DeviceKind, Vendor, host_device
from fitplan.core.hardware import (
    AmdSysfsProbe,
    DetectedGpu,
    FakeProbe,
    HostMemory,
    HostMemoryProbe,
    IntelSysfsProbe,
    NvmlProbe,
    ProbeResult,
    TegraProbe,
    detect_hardware,
    run_probes,
)
from fitplan.core.hardware.host import parse_meminfo
from fitplan.core.hardware.intel import FREE_IS_TOTAL_NOTE
from fitplan.core.plan.pool import host_spill_bytes, memory_notes, pooled, shared_spill_notes
from fitplan.core.plan.usage import DeviceUse

MEMINFO = """MemTotal:       131072000 kB
MemFree:         1000000 kB
MemAvailable:   100000000 kB
SwapFree:        8000000 kB
HugePages_Total:       0
HugePages_Free:        0
Hugepagesize:       2048 kB
"""


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def meminfo_probe(tmp_path: Path, text: str = MEMINFO) -> HostMemoryProbe:
    write(tmp_path, "proc/meminfo", text)
    return HostMemoryProbe("linux", tmp_path / "proc/meminfo", self_cgroup_path=tmp_path / "none")


# -- host: cgroup v2 and huge pages ------------------------------------------------------------------------------


def test_cgroup_v2_limit_lowers_host_ram(tmp_path: Path) -> None:
    write(tmp_path, "proc/meminfo", MEMINFO)
    write(tmp_path, "proc/self/cgroup", "0::/system.slice/box.scope\n")
    cg = "sys/fs/cgroup/system.slice/box.scope"
    write(tmp_path, f"{cg}/memory.max", str(16 * GIB))
    write(tmp_path, f"{cg}/memory.current", str(6 * GIB))
    write(tmp_path, f"{cg}/memory.stat", f"anon 100\ninactive_file {1 * GIB}\nactive_file 5\n")
    write(tmp_path, "sys/fs/cgroup/system.slice/memory.max", "max\n")
    write(tmp_path, "sys/fs/cgroup/system.slice/memory.current", str(50 * GIB))
    probe = HostMemoryProbe(
        "linux",
        tmp_path / "proc/meminfo",
        self_cgroup_path=tmp_path / "proc/self/cgroup",
        cgroup_root=tmp_path / "sys/fs/cgroup",
    )
    mem = probe.read()
    assert mem is not None
    assert mem.total_bytes == 16 * GIB  # memory.max, below MemTotal
    assert mem.available_bytes == 16 * GIB - 6 * GIB + 1 * GIB  # max - current + reclaimable page cache
    assert mem.unlimited_available_bytes == 100000000 * 1024  # MemAvailable, kept
    assert "cgroup memory.max of /system.slice/box.scope" in mem.source


def test_an_ancestor_cgroup_limit_applies_and_no_limit_changes_nothing(tmp_path: Path) -> None:
    write(tmp_path, "proc/meminfo", MEMINFO)
    write(tmp_path, "proc/self/cgroup", "0::/a/b\n")
    write(tmp_path, "cg/a/memory.max", str(8 * GIB))
    write(tmp_path, "cg/a/memory.current", str(2 * GIB))
    write(tmp_path, "cg/a/b/memory.max", "max\n")
    write(tmp_path, "cg/a/b/memory.current", str(1 * GIB))
    probe = HostMemoryProbe(
        "linux",
        tmp_path / "proc/meminfo",
        self_cgroup_path=tmp_path / "proc/self/cgroup",
        cgroup_root=tmp_path / "cg",
    )
    mem = probe.read()
    assert mem is not None and mem.total_bytes == 8 * GIB and mem.available_bytes == 6 * GIB
    write(tmp_path, "cg/a/memory.max", "max\n")
    mem = probe.read()
    assert mem is not None and mem.total_bytes == 131072000 * 1024 and mem.source == "/proc/meminfo"


def test_cgroup_v1_only_is_ignored(tmp_path: Path) -> None:
    write(tmp_path, "proc/meminfo", MEMINFO)
    write(tmp_path, "proc/self/cgroup", "12:memory:/docker/abc\n")
    probe = HostMemoryProbe(
        "linux",
        tmp_path / "proc/meminfo",
        self_cgroup_path=tmp_path / "proc/self/cgroup",
        cgroup_root=tmp_path / "cg",
    )
    mem = probe.read()
    assert mem is not None and mem.available_bytes == 100000000 * 1024


def test_hugepages_are_read_when_reserved() -> None:
    assert parse_meminfo(MEMINFO).hugepages_free_bytes is None  # type: ignore[union-attr]
    text = MEMINFO.replace("HugePages_Total:       0", "HugePages_Total:    1000").replace(
        "HugePages_Free:        0", "HugePages_Free:      600"
    )
    mem = parse_meminfo(text)
    assert mem is not None and mem.hugepages_free_bytes == 600 * 2048 * 1024


# -- AMD APU: carve-out + GTT ------------------------------------------------------------------------------------


def amd_card(root: Path, name: str, files: dict[str, str]) -> None:
    for k, v in files.items():
        write(root, f"class/drm/{name}/device/{k}", v + "\n")


def test_strix_halo_apu_gets_carve_out_plus_gtt_and_shares_the_gtt(tmp_path: Path) -> None:
    # the layout of ROCm/hip issue 3892: 15.49 GiB carve-out, 96 GiB GTT
    amd_card(
        tmp_path,
        "card1",
        {
            "vendor": "0x1002",
            "device": "0x1586",
            "mem_info_vram_total": "16636528640",
            "mem_info_vram_used": str(200 * MIB),
            "mem_info_gtt_total": "103079215104",
            "mem_info_gtt_used": str(1 * GIB),
            "uevent": "PCI_SLOT_NAME=0000:c5:00.0",
        },
    )
    r = AmdSysfsProbe(tmp_path, env={}).probe()
    (g,) = r.gpus
    d = g.device
    assert d.unified_memory and d.total_bytes == 16636528640 + 103079215104
    assert d.free_bytes == (16636528640 - 200 * MIB) + (103079215104 - GIB)
    assert d.host_shared_bytes == 103079215104 - GIB
    assert "Strix Halo" in d.detail and "GTT" in d.detail
    # what it uses up to the carve-out is its own; beyond, host RAM
    assert d.host_spill(10 * GIB) == 0
    assert d.host_spill(20 * GIB) == 20 * GIB - (16636528640 - 200 * MIB)


def test_a_discrete_amd_card_ignores_its_gtt(tmp_path: Path) -> None:
    amd_card(
        tmp_path,
        "card0",
        {
            "vendor": "0x1002",
            "device": "0x744c",
            "mem_info_vram_total": str(24 * GIB),
            "mem_info_vram_used": "0",
            "mem_info_gtt_total": str(32 * GIB),
            "mem_info_gtt_used": "0",
        },
    )
    (g,) = AmdSysfsProbe(tmp_path, env={}).probe().gpus
    assert (
        g.device.total_bytes == 24 * GIB and not g.device.unified_memory and g.device.host_shared_bytes == 0
    )


# -- NVIDIA GB10 (NVML: memory Not Supported) and Jetson (device tree) ---------------------------------------------


class _NvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class FakeGb10Nvml:
    NVMLError = _NvmlError

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.95.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return "h"

    def nvmlDeviceGetName(self, h: Any) -> str:
        return "NVIDIA GB10"

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return "GPU-gb10"

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        return types.SimpleNamespace(busId=b"0000000F:01:00.0")

    def nvmlDeviceGetCudaComputeCapability(self, h: Any) -> tuple[int, int]:
        return (12, 1)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        raise _NvmlError(3)  # NVML_ERROR_NOT_SUPPORTED, as nvidia-smi's "Not Supported" on a DGX Spark


def test_gb10_is_planned_with_memavailable_as_llama_cpp_reads_it(tmp_path: Path) -> None:
    r = run_probes([NvmlProbe({}, loader=FakeGb10Nvml), meminfo_probe(tmp_path)])
    (g,) = r.gpus
    d = g.device
    assert g.memory_from_host and d.unified_memory and d.backend_name == "CUDA0"
    assert d.total_bytes == 131072000 * 1024  # MemTotal
    assert d.free_bytes == 100000000 * 1024  # MemAvailable, not MemFree: page cache is reclaimable
    assert d.host_shared_bytes == d.free_bytes  # every byte of it is host RAM


def test_gb10_with_huge_pages_gets_the_free_huge_pages(tmp_path: Path) -> None:
    text = MEMINFO.replace("HugePages_Total:       0", "HugePages_Total:   30000").replace(
        "HugePages_Free:        0", "HugePages_Free:    20000"
    )
    r = run_probes([NvmlProbe({}, loader=FakeGb10Nvml), meminfo_probe(tmp_path, text)])
    assert r.gpus[0].device.free_bytes == 20000 * 2048 * 1024


def test_jetson_from_the_device_tree(tmp_path: Path) -> None:
    write(tmp_path, "proc/device-tree/model", "NVIDIA Jetson AGX Orin Developer Kit\0")
    write(tmp_path, "proc/device-tree/compatible", "nvidia,p3737-0000+p3701-0005\0nvidia,tegra234\0")
    r = run_probes([TegraProbe(tmp_path), meminfo_probe(tmp_path)])
    (g,) = r.gpus
    assert g.device.name == "NVIDIA Jetson AGX Orin Developer Kit"
    assert g.device.free_bytes == 100000000 * 1024 and g.device.unified_memory
    # NVML (JetPack 7) found it too: listed once
    r2 = run_probes([NvmlProbe({}, loader=FakeGb10Nvml), TegraProbe(tmp_path), meminfo_probe(tmp_path)])
    assert [x.key for x in r2.gpus] == ["GPU-gb10"]


def test_no_device_tree_no_jetson(tmp_path: Path) -> None:
    assert TegraProbe(tmp_path).probe() == ProbeResult()


# -- Intel: discrete Arc (free = total, as SYCL without sysman) and integrated GPUs --------------------------------


def test_intel_arc_on_xe_sums_its_tiles_and_says_free_is_total(tmp_path: Path) -> None:
    write(tmp_path, "class/drm/card1/device/vendor", "0x8086\n")
    write(tmp_path, "class/drm/card1/device/device", "0x56a0\n")
    write(tmp_path, "class/drm/card1/device/uevent", "PCI_SLOT_NAME=0000:03:00.0\n")
    write(tmp_path, "class/drm/card1/device/tile0/physical_vram_size_bytes", "16225243136\n")
    (g,) = IntelSysfsProbe(tmp_path).probe().gpus
    assert g.device.total_bytes == g.device.free_bytes == 16225243136
    assert (
        g.device.vendor is Vendor.INTEL and g.device.backend_name == "SYCL0" and not g.device.unified_memory
    )
    assert g.notes == (FREE_IS_TOTAL_NOTE,)


def test_intel_arc_on_i915_reads_lmem_total(tmp_path: Path) -> None:
    write(tmp_path, "class/drm/card0/device/vendor", "0x8086\n")
    write(tmp_path, "class/drm/card0/device/lmem_total_bytes", str(8 * GIB))
    (g,) = IntelSysfsProbe(tmp_path).probe().gpus
    assert g.device.total_bytes == 8 * GIB


def test_intel_igpu_is_unified_and_left_out_beside_another_gpu(tmp_path: Path) -> None:
    write(tmp_path, "class/drm/card0/device/vendor", "0x8086\n")
    write(tmp_path, "class/drm/card0/device/device", "0x7d55\n")
    r = run_probes([IntelSysfsProbe(tmp_path), meminfo_probe(tmp_path)])
    (g,) = r.gpus
    assert g.device.unified_memory and g.device.free_bytes == 100000000 * 1024
    other = DetectedGpu(Device("RTX", DeviceKind.GPU, 8 * GIB, 8 * GIB, Vendor.NVIDIA), key="GPU-x")
    r2 = run_probes(
        [FakeProbe(ProbeResult(gpus=(other,))), IntelSysfsProbe(tmp_path), meminfo_probe(tmp_path)]
    )
    assert [x.key for x in r2.gpus] == ["GPU-x"]
    assert any("integrated GPU" in p and "left out" in p for p in r2.problems)


# -- Windows: shared GPU memory ------------------------------------------------------------------------------------


def test_windows_marks_discrete_gpus_with_half_the_ram_as_shared() -> None:
    gpu = DetectedGpu(Device("RTX 4090", DeviceKind.GPU, 24 * GIB, 23 * GIB, Vendor.NVIDIA), key="k")
    host = HostMemory(64 * GIB, 40 * GIB, "GlobalMemoryStatusEx")
    probe = FakeProbe(ProbeResult(gpus=(gpu,), host=host))
    assert detect_hardware([probe], platform="win32").gpus[0].device.os_shared_bytes == 32 * GIB
    assert detect_hardware([probe], platform="linux").gpus[0].device.os_shared_bytes == 0


# -- the one pool --------------------------------------------------------------------------------------------------


def _use(dev: Device, used: int, gi: int | None) -> DeviceUse:
    return DeviceUse(dev, "host RAM" if gi is None else f"GPU{gi}", used, dev.free_bytes - GIB, True, gi)


def test_pool_charges_the_host_for_a_unified_gpu_once() -> None:
    gpu = Device(
        "GB10",
        DeviceKind.GPU,
        120 * GIB,
        100 * GIB,
        Vendor.NVIDIA,
        unified_memory=True,
        host_shared_bytes=100 * GIB,
    )
    host = host_device(120 * GIB, 100 * GIB)
    usage = (_use(gpu, 70 * GIB, 0), _use(host, 20 * GIB, None))
    assert host_spill_bytes(usage) == 70 * GIB
    pooled_usage = pooled(usage)
    assert pooled_usage[0] == usage[0]
    assert pooled_usage[1].used_bytes == 90 * GIB and pooled_usage[1].fits
    # 70 + 40 GiB do not fit a 100 GiB pool although each side alone is within its own capacity
    over = pooled((_use(gpu, 70 * GIB, 0), _use(host, 40 * GIB, None)))
    assert not over[1].fits and over[0].fits
    assert "takes 70 MiB" not in memory_notes(over)[0] and "of host RAM" in memory_notes(over)[0]


def test_pool_leaves_a_discrete_card_alone() -> None:
    gpu = Device("RTX", DeviceKind.GPU, 24 * GIB, 24 * GIB, Vendor.NVIDIA)
    host = host_device(64 * GIB)
    usage = (_use(gpu, 20 * GIB, 0), _use(host, 60 * GIB, None))
    assert pooled(usage) == usage and memory_notes(usage) == ()


def test_windows_spill_note_only_past_dedicated_memory() -> None:
    gpu = Device("RTX 4090", DeviceKind.GPU, 24 * GIB, 24 * GIB, Vendor.NVIDIA, os_shared_bytes=32 * GIB)
    assert shared_spill_notes((_use(gpu, 23 * GIB, 0),)) == ()
    (note,) = shared_spill_notes((_use(gpu, 26 * GIB, 0),))
    assert "shared GPU memory" in note and "2048 MiB over" in note


def test_a_unified_catalog_machine_brings_its_ram_as_the_host() -> None:
    from fitplan.core.hardware import HardwareConfig, parse_assumed_gpu

    detected = ProbeResult(host=HostMemory(16 * GIB, 8 * GIB, "/proc/meminfo"))
    spark = parse_assumed_gpu("DGX Spark")
    m = HardwareConfig(use_detected=False, hypothetical=(spark,)).machine(detected)
    assert m.host.total_bytes == m.host.free_bytes == spark.unified_ram_bytes and m.host.hypothetical
    # --host-ram still decides
    m2 = HardwareConfig(use_detected=False, hypothetical=(spark,), host_ram_bytes=64 * GIB).machine(detected)
    assert m2.host.total_bytes == 64 * GIB
    # a discrete card leaves this machine's host RAM as it is
    arc = parse_assumed_gpu("Arc A770")
    m3 = HardwareConfig(use_detected=False, hypothetical=(arc,)).machine(detected)
    assert m3.host.total_bytes == 16 * GIB and m3.host.free_bytes == 8 * GIB
