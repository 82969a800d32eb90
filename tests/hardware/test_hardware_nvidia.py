"""NVIDIA probing through a fake pynvml module: order, CUDA_VISIBLE_DEVICES, MIG, processes, failures."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from fitplan.core.base.devices import GIB, MIB, Vendor
from fitplan.core.hardware import NvmlProbe, ProbeResult, detect_hardware

NOT_FOUND = 6
LIBRARY_NOT_FOUND = 12
DRIVER_NOT_LOADED = 9
NOT_SUPPORTED = 3


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeMig:
    name: str
    uuid: str
    total: int
    used: int


@dataclass
class FakeGpu:
    name: str
    uuid: str
    bus: str  # NVML form, 8-digit domain
    total: int
    used: int
    cc: tuple[int, int] = (8, 9)
    cores: int = 16384
    clock: int = 2520
    compute: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, usedGpuMemory)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    migs: list[FakeMig | None] | None = None  # None: MIG off; a list: MIG on, None entries are empty slots
    fail: set[str] = field(default_factory=set)  # NVML function names that raise NOT_SUPPORTED
    fail_code: int = 3  # the NVML error they raise (NOT_SUPPORTED)


def mem(total: int, used: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(total=total, free=total - used, used=used)


def proc(pid: int, used: int | None) -> types.SimpleNamespace:
    return types.SimpleNamespace(pid=pid, usedGpuMemory=used)


class FakeNvml:
    """The subset of pynvml the probe calls; handles are the FakeGpu / FakeMig objects themselves."""

    NVMLError = FakeNVMLError

    def __init__(
        self, gpus: list[FakeGpu], init_error: int | None = None, driver: Any = b"560.35.03"
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.driver = driver
        self.shutdown_calls = 0

    def _check(self, h: Any, fn: str) -> None:
        if isinstance(h, FakeGpu) and fn in h.fail:
            raise FakeNVMLError(h.fail_code)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self) -> Any:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12060

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: Any) -> str:
        self._check(h, "name")
        return str(h.name)

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return str(h.uuid)

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(busId=h.bus.encode())

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> types.SimpleNamespace:
        self._check(h, "memory")
        return mem(h.total, h.used)

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeGpu) -> tuple[int, int]:
        self._check(h, "cc")
        return h.cc

    def nvmlDeviceGetNumGpuCores(self, h: FakeGpu) -> int:
        self._check(h, "cores")
        return h.cores

    def nvmlDeviceGetMaxClockInfo(self, h: FakeGpu, clock_type: int) -> int:
        return h.clock

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[types.SimpleNamespace]:
        self._check(h, "processes")
        return [proc(p, u) for p, u in h.compute]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeGpu) -> list[types.SimpleNamespace]:
        self._check(h, "processes")
        return [proc(p, u) for p, u in h.graphics]

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> tuple[int, int]:
        if h.migs is None:
            raise FakeNVMLError(h.fail_code)  # consumer GPUs answer NOT_SUPPORTED
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeGpu) -> int:
        return len(h.migs or [])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeGpu, j: int) -> FakeMig:
        m = (h.migs or [])[j]
        if m is None:
            raise FakeNVMLError(NOT_FOUND)
        return m


def rtx4090(bus: str = "00000000:01:00.0", uuid: str = "GPU-4090aaaa-0000") -> FakeGpu:
    return FakeGpu("NVIDIA GeForce RTX 4090", uuid, bus, 24564 * MIB, 400 * MIB, cc=(8, 9))


def rtx3090(bus: str = "00000000:02:00.0", uuid: str = "GPU-3090bbbb-0000") -> FakeGpu:
    return FakeGpu(
        "NVIDIA GeForce RTX 3090", uuid, bus, 24576 * MIB, 300 * MIB, cc=(8, 6), cores=10496, clock=1695
    )


def probe(gpus: list[FakeGpu], env: dict[str, str] | None = None, **kw: Any) -> ProbeResult:
    fake = FakeNvml(gpus, **kw)
    return NvmlProbe(env or {}, loader=lambda: fake).probe()


def names(r: ProbeResult) -> list[str]:
    return [g.device.name for g in r.gpus]


def test_one_gpu_details() -> None:
    g = rtx4090()
    g.compute = [(100, 2 * GIB), (101, None)]
    g.graphics = [(100, 2 * GIB), (200, 64 * MIB)]  # pid 100 also has a graphics context: counted once
    r = probe([g])
    assert r.problems == ()
    (d,) = r.gpus
    assert d.device.name == "NVIDIA GeForce RTX 4090"
    assert d.device.vendor is Vendor.NVIDIA and d.device.backend_name == "CUDA0"
    assert d.device.total_bytes == 24564 * MIB
    assert d.device.free_bytes == (24564 - 400) * MIB
    assert d.used_bytes == 400 * MIB
    assert d.driver_version == "560.35.03"  # bytes from older pynvml are decoded
    assert d.runtime_version == "12.6"  # 12060 = 12 * 1000 + 6 * 10
    assert d.compute_capability == "8.9"
    assert d.pci_bus_id == "0000:01:00.0"  # NVML's 8-digit domain shortened to the CUDA/sysfs form
    assert d.key == d.uuid == "GPU-4090aaaa-0000"
    assert d.other_processes == 3  # pids 100, 101, 200
    assert d.other_process_bytes == 2 * GIB + 64 * MIB  # None (unknown) counts as 0
    assert "compute 8.9" in d.device.detail and "CUDA 12.6" in d.device.detail


def test_identical_gpus_follow_pci_order_with_no_problem() -> None:
    a = rtx3090("00000000:41:00.0", "GPU-b")
    b = rtx3090("00000000:01:00.0", "GPU-a")
    r = probe([a, b])
    assert [g.uuid for g in r.gpus] == ["GPU-a", "GPU-b"]
    assert [g.device.backend_name for g in r.gpus] == ["CUDA0", "CUDA1"]
    assert r.problems == ()


def test_mixed_gpus_fastest_first_is_estimated() -> None:
    # NVML (PCI) order: 3090 at 01, 4090 at 02. FASTEST_FIRST puts the compute 8.9 card first.
    r = probe([rtx3090("00000000:01:00.0"), rtx4090("00000000:02:00.0")])
    assert names(r) == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"]
    assert any("estimated" in p and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in p for p in r.problems)


def test_pci_bus_id_order_when_asked() -> None:
    r = probe([rtx3090("00000000:01:00.0"), rtx4090("00000000:02:00.0")], {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert names(r) == ["NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090"]
    assert r.problems == ()


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        ("1,0", ["GPU-b", "GPU-a"]),
        ("1", ["GPU-b"]),
        ("GPU-b", ["GPU-b"]),  # a unique UUID prefix is enough
        (" GPU-a , 1 ", ["GPU-a", "GPU-b"]),
        ("0,7,1", ["GPU-a"]),  # parsing stops at the first entry that matches nothing
        ("0,0", ["GPU-a"]),  # a repeated entry also stops it
        ("-1", []),
        ("", []),
    ],
)
def test_cuda_visible_devices(visible: str, expected: list[str]) -> None:
    gpus = [rtx3090("00000000:01:00.0", "GPU-a"), rtx3090("00000000:02:00.0", "GPU-b")]
    r = probe(gpus, {"CUDA_VISIBLE_DEVICES": visible, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert [g.uuid for g in r.gpus] == expected
    assert [g.device.backend_name for g in r.gpus] == [f"CUDA{i}" for i in range(len(expected))]
    if len(expected) < len(visible.split(",")) or not expected:
        assert any("CUDA_VISIBLE_DEVICES" in p for p in r.problems)


def test_ambiguous_uuid_prefix_matches_nothing() -> None:
    gpus = [rtx3090("00000000:01:00.0", "GPU-ab1"), rtx3090("00000000:02:00.0", "GPU-ab2")]
    r = probe(gpus, {"CUDA_VISIBLE_DEVICES": "GPU-ab"})
    assert r.gpus == ()


def a100_mig() -> FakeGpu:
    g = FakeGpu("NVIDIA A100-SXM4-80GB", "GPU-a100", "00000000:81:00.0", 81920 * MIB, 0, cc=(8, 0))
    g.migs = [
        FakeMig("NVIDIA A100-SXM4-80GB MIG 3g.40gb", "MIG-one", 40192 * MIB, 50 * MIB),
        None,  # an empty slot
        FakeMig("NVIDIA A100-SXM4-80GB MIG 2g.20gb", "MIG-two", 19968 * MIB, 25 * MIB),
    ]
    return g


def test_mig_instances_are_devices() -> None:
    r = probe([a100_mig()])
    assert [g.uuid for g in r.gpus] == ["MIG-one", "MIG-two"]
    one = r.gpus[0]
    assert one.device.total_bytes == 40192 * MIB
    assert one.device.free_bytes == (40192 - 50) * MIB
    assert one.mig_parent == "GPU-a100"
    assert "MIG instance of NVIDIA A100-SXM4-80GB" in one.device.detail
    assert any("only one MIG instance" in p for p in r.problems)


def test_mig_uuid_in_cuda_visible_devices() -> None:
    r = probe([rtx4090(), a100_mig()], {"CUDA_VISIBLE_DEVICES": "MIG-two"})
    assert [g.uuid for g in r.gpus] == ["MIG-two"]
    assert r.gpus[0].device.backend_name == "CUDA0"
    assert not any("only one MIG" in p for p in r.problems)


def test_legacy_mig_gpu_form_selects_the_parent() -> None:
    r = probe(
        [rtx4090(), a100_mig()],
        {"CUDA_VISIBLE_DEVICES": "MIG-GPU-a100/1/0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    )
    assert {g.mig_parent for g in r.gpus} == {"GPU-a100"}


def test_mig_mode_without_instances() -> None:
    g = a100_mig()
    g.migs = [None, None]
    r = probe([g])
    assert r.gpus == ()
    assert any("MIG mode with no MIG instance" in p for p in r.problems)


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (LIBRARY_NOT_FOUND, "NVML library not found"),
        (DRIVER_NOT_LOADED, "driver is not loaded"),
        (999, "NVML failed"),
    ],
)
def test_init_failure_is_one_clear_reason(code: int, text: str) -> None:
    r = probe([rtx4090()], init_error=code)
    assert r.gpus == ()
    assert len(r.problems) == 1 and text in r.problems[0] and r.problems[0].startswith("NVIDIA: ")


def test_missing_library_module() -> None:
    def loader() -> Any:
        raise ImportError("No module named 'pynvml'")

    r = NvmlProbe({}, loader=loader).probe()
    assert r.gpus == () and r.problems == ("NVIDIA: nvidia-ml-py (pynvml) is not installed",)


def test_failing_memory_call_skips_only_that_gpu() -> None:
    bad = rtx3090("00000000:02:00.0", "GPU-bad")
    bad.fail = {"memory"}
    bad.fail_code = 999  # an NVML failure; NOT_SUPPORTED is a unified-memory GPU (test_hardware_unified.py)
    fake = FakeNvml([rtx4090(), bad])
    r = NvmlProbe({}, loader=lambda: fake).probe()
    assert [g.uuid for g in r.gpus] == ["GPU-4090aaaa-0000"]
    assert any("GPU 1 (NVML index) skipped" in p for p in r.problems)
    assert fake.shutdown_calls == 1


def test_optional_queries_failing_leave_fields_empty() -> None:
    g = rtx4090()
    g.fail = {"cc", "cores", "processes"}
    (d,) = probe([g]).gpus
    assert d.compute_capability == ""
    assert d.other_processes == 0
    assert "process list unavailable" in d.notes


def test_count_failing_after_init_is_reported() -> None:
    fake = FakeNvml([rtx4090()])

    def broken() -> int:
        raise FakeNVMLError(DRIVER_NOT_LOADED)

    fake.nvmlDeviceGetCount = broken  # type: ignore[method-assign]
    r = NvmlProbe({}, loader=lambda: fake).probe()
    assert r.gpus == () and r.problems == ("NVIDIA: the NVIDIA driver is not loaded",)
    assert fake.shutdown_calls == 1


def test_default_loader_uses_the_pynvml_module(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([rtx4090()])
    module = types.ModuleType("pynvml")
    for attr in dir(fake):
        if attr.startswith("nvml"):
            setattr(module, attr, getattr(fake, attr))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    r = detect_hardware([NvmlProbe({})])
    assert names(r) == ["NVIDIA GeForce RTX 4090"]


def test_processes_are_read_per_pid_with_their_names() -> None:
    # whose memory is whose: each process by pid and program name, the kinds of context it holds, and an
    # amount the driver cannot tell (None) kept unknown rather than read as 0
    g = rtx4090()
    g.compute = [(100, 2 * GIB), (101, None)]
    g.graphics = [(100, 2 * GIB), (200, 64 * MIB)]
    fake = FakeNvml([g])
    names_by_pid = {100: b"/usr/bin/python3", 200: "C:\\Program Files\\Mozilla\\firefox.exe"}

    def get_name(pid: int) -> Any:
        if pid not in names_by_pid:
            raise FakeNVMLError(NOT_SUPPORTED)  # another container's process, or no permission
        return names_by_pid[pid]

    fake.nvmlSystemGetProcessName = get_name  # type: ignore[attr-defined]
    (d,) = NvmlProbe({}, loader=lambda: fake).probe().gpus
    assert [(p.pid, p.name, p.used_bytes, p.kind) for p in d.processes] == [
        (100, "python3", 2 * GIB, "compute+graphics"),
        (101, "", None, "compute"),
        (200, "firefox.exe", 64 * MIB, "graphics"),
    ]
    assert d.processes[0].describe() == "python3 (100) holds 2048 MiB (compute+graphics)"
    assert d.processes[1].describe() == "pid 101 holds an unknown amount (compute)"


def test_no_process_list_and_no_name_query_leave_no_processes() -> None:
    class OldNvml(FakeNvml):  # an old pynvml without the process queries
        nvmlDeviceGetComputeRunningProcesses = None
        nvmlDeviceGetGraphicsRunningProcesses = None

    g = rtx4090()
    g.compute = [(100, GIB)]
    fake = OldNvml([g])
    (d,) = NvmlProbe({}, loader=lambda: fake).probe().gpus
    assert d.processes == () and d.other_processes == 0
