"""AMD (sysfs), Apple Silicon, host RAM probes and the probe plumbing, all on fakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fitplan.core.base.devices import GIB, MIB, DeviceKind, Vendor
from fitplan.core.hardware import (
    AmdSysfsProbe,
    AppleSiliconProbe,
    DetectedGpu,
    FakeProbe,
    HostMemory,
    HostMemoryProbe,
    ProbeResult,
    default_probes,
    estimated_metal_working_set,
    machine_from,
    run_probes,
)
from fitplan.core.hardware.host import parse_meminfo, parse_vm_stat
from fitplan.core.hardware.nvidia import NvmlProbe

# -- AMD ---------------------------------------------------------------------------------------------------------


def card(root: Path, name: str, files: dict[str, str]) -> None:
    d = root / "class" / "drm" / name / "device"
    d.mkdir(parents=True)
    for k, v in files.items():
        (d / k).write_text(v + "\n")


def test_amd_sysfs(tmp_path: Path) -> None:
    card(
        tmp_path,
        "card1",
        {
            "vendor": "0x1002",
            "device": "0x744c",
            "mem_info_vram_total": str(24 * GIB),
            "mem_info_vram_used": str(512 * MIB),
            "uevent": "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:0b:00.0",
        },
    )
    card(
        tmp_path,
        "card0",
        {
            "vendor": "0x1002",
            "mem_info_vram_total": str(64 * GIB),
            "mem_info_vram_used": "0",
            "product_name": "AMD Instinct MI210",
            "uevent": "PCI_SLOT_NAME=0000:03:00.0",
        },
    )
    card(
        tmp_path, "card2", {"vendor": "0x8086", "uevent": "PCI_SLOT_NAME=0000:00:02.0"}
    )  # Intel iGPU: not AMD
    (tmp_path / "class" / "drm" / "card1-DP-1").mkdir()  # connector entries are ignored
    r = AmdSysfsProbe(tmp_path, {}).probe()
    assert r.problems == ()
    assert [g.device.name for g in r.gpus] == ["AMD Instinct MI210", "AMD GPU 1002:744c"]  # PCI bus order
    mi, rx = r.gpus
    assert mi.device.backend_name == "ROCm0" and rx.device.backend_name == "ROCm1"
    assert rx.device.total_bytes == 24 * GIB and rx.device.free_bytes == 24 * GIB - 512 * MIB
    assert rx.key == "pci:0000:0b:00.0" and rx.device.vendor is Vendor.AMD


def test_amd_visible_devices(tmp_path: Path) -> None:
    for i, slot in enumerate(("03", "0b", "43")):
        card(
            tmp_path,
            f"card{i}",
            {
                "vendor": "0x1002",
                "mem_info_vram_total": str((i + 1) * GIB),
                "mem_info_vram_used": "0",
                "uevent": f"PCI_SLOT_NAME=0000:{slot}:00.0",
            },
        )

    def totals(env: dict[str, str]) -> list[int]:
        return [g.device.total_bytes // GIB for g in AmdSysfsProbe(tmp_path, env).probe().gpus]

    assert totals({}) == [1, 2, 3]
    assert totals({"HIP_VISIBLE_DEVICES": "2,0"}) == [3, 1]
    assert totals({"ROCR_VISIBLE_DEVICES": "1,2", "HIP_VISIBLE_DEVICES": "1"}) == [
        3
    ]  # HIP indexes ROCR's list
    assert totals({"HIP_VISIBLE_DEVICES": ""}) == []
    r = AmdSysfsProbe(tmp_path, {"HIP_VISIBLE_DEVICES": "0,GPU-abc,1"}).probe()
    assert [g.device.backend_name for g in r.gpus] == ["ROCm0"] and "'GPU-abc'" in r.problems[0]


def test_amd_without_vram_files_is_reported(tmp_path: Path) -> None:
    card(tmp_path, "card0", {"vendor": "0x1002", "uevent": "PCI_SLOT_NAME=0000:03:00.0"})
    r = AmdSysfsProbe(tmp_path, {}).probe()
    assert r.gpus == () and len(r.problems) == 1 and "mem_info_vram_total" in r.problems[0]


def test_amd_no_drm_folder(tmp_path: Path) -> None:
    assert AmdSysfsProbe(tmp_path, {}).probe() == ProbeResult()


# -- Apple --------------------------------------------------------------------------------------------------------


def sysctl_runner(values: dict[str, str]):  # type: ignore[no-untyped-def]
    def run(argv: list[str]) -> str | None:
        assert argv[:2] == ["sysctl", "-n"]
        return values.get(argv[2])

    return run


MAC = {"hw.optional.arm64": "1", "hw.memsize": str(32 * GIB), "machdep.cpu.brand_string": "Apple M2 Max"}


def test_apple_metal_value_wins() -> None:
    r = AppleSiliconProbe("darwin", sysctl_runner(MAC), metal_query=lambda: 22906503168).probe()
    (g,) = r.gpus
    assert g.device.total_bytes == g.device.free_bytes == 22906503168
    assert g.device.unified_memory and g.device.vendor is Vendor.APPLE and g.device.backend_name == "MTL0"
    assert g.device.name == "Apple M2 Max" and "Metal recommendedMaxWorkingSetSize" in g.device.detail


def test_apple_wired_limit_when_metal_unavailable() -> None:
    values = {**MAC, "iogpu.wired_limit_mb": "28000"}
    (g,) = AppleSiliconProbe("darwin", sysctl_runner(values), metal_query=lambda: None).probe().gpus
    assert g.device.total_bytes == 28000 * MIB and "iogpu.wired_limit_mb" in g.device.detail


def test_apple_estimate_when_nothing_else() -> None:
    values = {**MAC, "iogpu.wired_limit_mb": "0"}  # 0 means "macOS default"
    (g,) = AppleSiliconProbe("darwin", sysctl_runner(values), metal_query=lambda: None).probe().gpus
    assert g.device.total_bytes == 32 * GIB * 2 // 3
    assert "estimated" in g.device.detail


@pytest.mark.parametrize(
    ("ram_gib", "expected"),
    # 32 GiB: llama.cpp logs recommendedMaxWorkingSetSize = 21845.34 MB = 32768 MiB * 2/3 (MiB printed as "MB")
    # 192 GiB: 147456.00 MB = 196608 MiB * 3/4
    [(32, 32 * GIB * 2 // 3), (36, 36 * GIB * 2 // 3), (64, 48 * GIB), (192, 147456 * MIB)],
)
def test_metal_working_set_rule(ram_gib: int, expected: int) -> None:
    assert estimated_metal_working_set(ram_gib * GIB) == expected


def test_apple_probe_elsewhere_and_on_intel_macs() -> None:
    assert AppleSiliconProbe("linux", sysctl_runner(MAC)).probe() == ProbeResult()
    r = AppleSiliconProbe("darwin", sysctl_runner({**MAC, "hw.optional.arm64": "0"})).probe()
    assert r.gpus == () and "Intel Mac" in r.problems[0]


# -- host RAM -----------------------------------------------------------------------------------------------------

MEMINFO = """MemTotal:       65759452 kB
MemFree:         1048576 kB
MemAvailable:   40000000 kB
Buffers:          100000 kB
"""


def test_linux_meminfo(tmp_path: Path) -> None:
    p = tmp_path / "meminfo"
    p.write_text(MEMINFO)
    r = HostMemoryProbe("linux", meminfo_path=p).probe()
    assert r.host == HostMemory(65759452 * 1024, 40000000 * 1024, "/proc/meminfo")


def test_meminfo_without_memavailable() -> None:
    m = parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 200 kB\n")
    assert m is not None and m.available_bytes == (100 + 10 + 200) * 1024


VM_STAT = """Mach Virtual Memory Statistics: (page size of 16384 bytes)
Pages free:                               10000.
Pages active:                            500000.
Pages inactive:                           20000.
Pages speculative:                         3000.
Pages wired down:                        100000.
"""


def test_macos_sysctl_and_vm_stat() -> None:
    def run(argv: list[str]) -> str | None:
        return {"sysctl": f"{64 * GIB}\n", "vm_stat": VM_STAT}[argv[0]]

    r = HostMemoryProbe("darwin", run=run).probe()
    assert r.host == HostMemory(64 * GIB, (10000 + 20000 + 3000) * 16384, "sysctl hw.memsize + vm_stat")
    assert parse_vm_stat("", 100).available_bytes == 0


def test_windows_reader_is_used() -> None:
    mem = HostMemory(16 * GIB, 9 * GIB, "GlobalMemoryStatusEx")
    assert HostMemoryProbe("win32", windows_reader=lambda: mem).probe().host == mem


def test_unknown_platform_is_a_problem() -> None:
    r = HostMemoryProbe("plan9").probe()
    assert r.host is None and r.problems == ("Host: could not read the RAM size on plan9",)


# -- plumbing -----------------------------------------------------------------------------------------------------


class Exploding:
    name = "Broken"

    def probe(self) -> ProbeResult:
        raise RuntimeError("boom")


def gpu(name: str, key: str) -> DetectedGpu:
    from fitplan.core.base.devices import Device

    return DetectedGpu(Device(name, DeviceKind.GPU, 8 * GIB, 7 * GIB, Vendor.NVIDIA), key=key)


def test_run_probes_merges_and_contains_failures() -> None:
    host = HostMemory(32 * GIB, 20 * GIB, "test")
    r = run_probes(
        [
            FakeProbe(ProbeResult(gpus=(gpu("A", "a"),), problems=("x: one",))),
            Exploding(),
            FakeProbe(ProbeResult(gpus=(gpu("B", "b"),), host=host)),
        ]
    )
    assert [g.device.name for g in r.gpus] == ["A", "B"]
    assert r.host == host
    assert r.problems == ("x: one", "Broken: probe failed: RuntimeError: boom")
    m = machine_from(r)
    assert [d.name for d in m.gpus] == ["A", "B"]
    assert m.host.total_bytes == 32 * GIB and m.host.free_bytes == 20 * GIB


def test_default_probes_per_platform() -> None:
    kinds = {p: [type(x).__name__ for x in default_probes({}, p)] for p in ("linux", "darwin", "win32")}
    assert kinds["linux"] == [
        "NvmlProbe",
        "TegraProbe",
        "AmdSysfsProbe",
        "IntelSysfsProbe",
        "HostMemoryProbe",
    ]
    assert kinds["darwin"] == ["AppleSiliconProbe", "HostMemoryProbe"]
    assert kinds["win32"] == ["NvmlProbe", "HostMemoryProbe"]
    assert isinstance(default_probes({}, "linux")[0], NvmlProbe)
