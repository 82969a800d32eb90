"""The probe interface: each source of devices (NVML, sysfs, Metal, the host) answers with a `ProbeResult`.

A probe never raises: anything that goes wrong becomes one line in `problems` ("NVIDIA: NVML library not found"),
and the devices it could read are still returned.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from fitplan.core.base.devices import Device, DeviceKind, Machine, host_device


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process that holds memory on a GPU, as the driver reports it (NVML's running-process lists)."""

    pid: int
    name: str  # the program ("" when the driver does not say)
    used_bytes: int | None  # None: the driver cannot tell (Windows WDDM, or no permission)
    kind: str  # "compute", "graphics" or "compute+graphics"

    def describe(self) -> str:
        who = f"{self.name or 'pid'} ({self.pid})" if self.name else f"pid {self.pid}"
        held = (
            f"{self.used_bytes / (1 << 20):.0f} MiB" if self.used_bytes is not None else "an unknown amount"
        )
        return f"{who} holds {held} ({self.kind})"


@dataclass(frozen=True, slots=True)
class DetectedGpu:
    """A GPU as found on this machine, with the details shown to the user next to its memory."""

    device: Device
    key: str  # stable identity across runs: NVIDIA UUID, "pci:0000:03:00.0", "apple"
    index: int = -1  # position in the backend's enumeration after visibility filtering (CUDA0 -> 0)
    driver_version: str = ""
    runtime_version: str = ""  # CUDA driver API version ("12.4")
    compute_capability: str = ""  # "8.9"
    pci_bus_id: str = ""
    uuid: str = ""
    used_bytes: int = 0  # memory in use on the device (all processes and the driver's reservation)
    other_process_bytes: int = 0  # memory held by running compute and graphics processes
    other_processes: int = 0  # how many such processes
    mig_parent: str = ""  # for a MIG instance: the UUID of the GPU it is carved from
    notes: tuple[str, ...] = ()
    processes: tuple[GpuProcess, ...] = ()  # who holds that memory, where the driver tells it


@dataclass(frozen=True, slots=True)
class HostMemory:
    total_bytes: int
    available_bytes: int
    source: str  # "/proc/meminfo", "sysctl hw.memsize + vm_stat", "GlobalMemoryStatusEx"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    gpus: tuple[DetectedGpu, ...] = ()
    host: HostMemory | None = None
    problems: tuple[str, ...] = ()

    @property
    def devices(self) -> tuple[Device, ...]:
        return tuple(g.device for g in self.gpus)


class DeviceProbe(Protocol):
    """One source of devices. `name` is what problems are prefixed with ("NVIDIA", "AMD", "Apple", "Host")."""

    name: str

    def probe(self) -> ProbeResult: ...


@dataclass(frozen=True, slots=True)
class FakeProbe:
    """A probe that answers a fixed result (tests, and `--assume-gpu` only machines)."""

    result: ProbeResult = field(default_factory=ProbeResult)
    name: str = "fake"

    def probe(self) -> ProbeResult:
        return self.result


def merge_results(results: Iterable[ProbeResult]) -> ProbeResult:
    """GPUs in probe order, the first host memory reading, every problem."""
    gpus: list[DetectedGpu] = []
    host: HostMemory | None = None
    problems: list[str] = []
    for r in results:
        gpus.extend(r.gpus)
        if host is None and r.host is not None:
            host = r.host
        problems.extend(r.problems)
    return ProbeResult(gpus=tuple(gpus), host=host, problems=tuple(problems))


def run_probes(probes: Iterable[DeviceProbe]) -> ProbeResult:
    """Run every probe; a probe that raises despite its contract is reported, never propagated."""
    results: list[ProbeResult] = []
    for p in probes:
        try:
            results.append(p.probe())
        except Exception as exc:  # noqa: BLE001 - a probe bug must not take the app down
            results.append(ProbeResult(problems=(f"{p.name}: probe failed: {type(exc).__name__}: {exc}",)))
    return merge_results(results)


def machine_from(result: ProbeResult, extra_gpus: Iterable[Device] = ()) -> Machine:
    """A Machine of the detected GPUs (then `extra_gpus`) and the host; host 0 bytes when RAM is unknown."""
    host = result.host
    host_dev = host_device(host.total_bytes, host.available_bytes) if host else host_device(0, 0)
    gpus = tuple(d for d in (*result.devices, *extra_gpus) if d.kind is DeviceKind.GPU)
    return Machine(gpus=gpus, host=host_dev)
