"""The probe interface: each source of devices (NVML, sysfs, Metal, the host) answers with a `ProbeResult`.

A probe never raises: anything that goes wrong becomes one line in `problems` ("NVIDIA: NVML library not found"),
and the devices it could read are still returned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from fitplan.core.base.devices import Device, DeviceKind, Machine, Vendor, host_device

#: DetectedGpu.key of a Jetson found from the device tree (core/hardware/unified.py)
TEGRA_KEY = "tegra"


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
    #: a unified-memory GPU whose backend reports host RAM as its memory (llama.cpp's CUDA backend on GB10 and
    #: Jetson: MemAvailable, or the free huge pages); `resolve_unified` fills its device from the host reading
    memory_from_host: bool = False  # see resolve_unified


@dataclass(frozen=True, slots=True)
class HostMemory:
    total_bytes: int
    available_bytes: int
    source: str  # "/proc/meminfo", "sysctl hw.memsize + vm_stat", "GlobalMemoryStatusEx"
    #: HugePages_Free x Hugepagesize when the kernel has huge pages reserved (HugePages_Total > 0), else None:
    #: llama.cpp's CUDA backend gives a unified-memory GPU that much instead of MemAvailable
    hugepages_free_bytes: int | None = None
    #: RAM the kernel reports (MemAvailable) before a cgroup limit lowered `available_bytes`; 0 without a limit
    unlimited_available_bytes: int = 0


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


def resolve_unified(result: ProbeResult) -> ProbeResult:
    """GPUs whose memory is the host's (`DetectedGpu.memory_from_host`) given it: total = MemTotal, free as
    llama.cpp's CUDA backend reports it (HugePages_Free x size when huge pages are reserved, else MemAvailable,
    before any cgroup limit), all of it host RAM. A Jetson found from the device tree is dropped when NVML found
    the same GPU."""
    nvml_found = any(g.device.vendor is Vendor.NVIDIA and g.key != TEGRA_KEY for g in result.gpus)
    others = [g for g in result.gpus if not (g.device.vendor is Vendor.INTEL and g.memory_from_host)]
    gpus: list[DetectedGpu] = []
    problems = list(result.problems)
    for g in result.gpus:
        if g.key == TEGRA_KEY and nvml_found:
            continue
        if g.device.vendor is Vendor.INTEL and g.memory_from_host and others:
            problems.append(f"Intel: integrated GPU {g.device.name} left out: another GPU was found")
            continue
        if g.memory_from_host and result.host is not None:
            h = result.host
            free = h.hugepages_free_bytes
            if free is None:
                free = h.unlimited_available_bytes or h.available_bytes
            dev = dataclasses.replace(
                g.device,
                total_bytes=h.total_bytes,
                free_bytes=free,
                unified_memory=True,
                host_shared_bytes=free,
            )
            g = dataclasses.replace(g, device=dev)
        gpus.append(g)
    return dataclasses.replace(result, gpus=tuple(gpus), problems=tuple(problems))


#: Windows (WDDM) lets a GPU use up to half of system RAM as shared GPU memory.
WINDOWS_SHARED_FRACTION = 2


def windows_shared(result: ProbeResult) -> ProbeResult:
    """Windows: every discrete GPU may spill into shared GPU memory, half of system RAM (`Device.os_shared_bytes`)."""
    if result.host is None:
        return result
    share = result.host.total_bytes // WINDOWS_SHARED_FRACTION
    gpus = tuple(
        g
        if g.device.unified_memory
        else dataclasses.replace(g, device=dataclasses.replace(g.device, os_shared_bytes=share))
        for g in result.gpus
    )
    return dataclasses.replace(result, gpus=gpus)


def run_probes(probes: Iterable[DeviceProbe]) -> ProbeResult:
    """Run every probe; a probe that raises despite its contract is reported, never propagated."""
    results: list[ProbeResult] = []
    for p in probes:
        try:
            results.append(p.probe())
        except Exception as exc:  # noqa: BLE001 - a probe bug must not take the app down
            results.append(ProbeResult(problems=(f"{p.name}: probe failed: {type(exc).__name__}: {exc}",)))
    return resolve_unified(merge_results(results))


def machine_from(result: ProbeResult, extra_gpus: Iterable[Device] = ()) -> Machine:
    """A Machine of the detected GPUs (then `extra_gpus`) and the host; host 0 bytes when RAM is unknown."""
    host = result.host
    host_dev = host_device(host.total_bytes, host.available_bytes) if host else host_device(0, 0)
    gpus = tuple(d for d in (*result.devices, *extra_gpus) if d.kind is DeviceKind.GPU)
    return Machine(gpus=gpus, host=host_dev)
