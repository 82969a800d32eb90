"""NVIDIA GPUs through NVML (the `pynvml` module of nvidia-ml-py, imported only when probing).

Enumeration order. llama.cpp's CUDA backend numbers devices as the CUDA runtime does (CUDA0, CUDA1, ...).
NVML always lists GPUs by PCI bus id. CUDA does the same only when `CUDA_DEVICE_ORDER=PCI_BUS_ID`; its default,
`FASTEST_FIRST`, puts the fastest GPU first and leaves the rest unspecified. fitplan reproduces FASTEST_FIRST
as: higher compute capability first, then more CUDA cores x max SM clock, then PCI bus id. When the GPUs are
all of one model this is exactly the PCI order; with mixed models the order is an estimate and a problem line
says so (set CUDA_DEVICE_ORDER=PCI_BUS_ID to make it certain).

`CUDA_VISIBLE_DEVICES` is then applied to that order as CUDA does: a comma-separated list of indices, `GPU-`
UUIDs (a unique prefix is enough) or `MIG-` UUIDs (also the older `MIG-GPU-<uuid>/<gi>/<ci>` form); the list
order becomes the device order; parsing stops at the first entry that matches nothing (or repeats one), so
`CUDA_VISIBLE_DEVICES=-1` or an empty value hides every GPU.

MIG. A GPU in MIG mode is not usable as a whole: each MIG instance is listed as its own device with its own
memory. A CUDA process can use only one MIG instance, so when several are visible a problem line says to pick
one with `CUDA_VISIBLE_DEVICES=MIG-...`.

Unified memory. On a GB10 (DGX Spark) NVML answers no memory size (nvidia-smi shows "Not Supported"): the GPU
allocates from system RAM, and llama.cpp's CUDA backend reports MemAvailable as its free memory for an integrated
GPU (ggml-cuda.cu, ggml_backend_cuda_device_get_memory). Such a GPU is marked `memory_from_host`, and
`resolve_unified` gives it the host's reading.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fitplan.core.base.devices import Device, DeviceKind, Vendor
from fitplan.core.base.numbers import int_or_none, is_digits
from fitplan.core.hardware.probe import DetectedGpu, GpuProcess, ProbeResult

# NVML return codes (nvml.h) the messages below single out.
_NVML_ERROR_DRIVER_NOT_LOADED = 9
_NVML_ERROR_LIBRARY_NOT_FOUND = 12
_NVML_ERROR_NOT_FOUND = 6
_NVML_ERROR_NOT_SUPPORTED = 3
_NVML_CLOCK_SM = 1
_NVML_DEVICE_MIG_ENABLE = 1

NvmlLoader = Callable[[], Any]


def _import_pynvml() -> Any:
    return importlib.import_module("pynvml")


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _nvml_reason(exc: BaseException) -> str:
    code = getattr(exc, "value", None)
    if code == _NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML library not found (no NVIDIA driver installed)"
    if code == _NVML_ERROR_DRIVER_NOT_LOADED:
        return "the NVIDIA driver is not loaded"
    return f"NVML failed: {exc}"


def _normal_bus_id(bus_id: str) -> str:
    """NVML reports `00000000:03:00.0` (8-digit domain); CUDA and sysfs use `0000:03:00.0`. Lowercase, 4 digits."""
    bus = bus_id.strip().lower()
    head, sep, rest = bus.partition(":")
    if sep and len(head) == 8:
        bus = head[4:] + ":" + rest
    return bus


@dataclass
class _Gpu:
    """One physical GPU as NVML reports it, before ordering and visibility filtering."""

    handle: Any
    name: str
    uuid: str
    bus_id: str
    total: int
    free: int
    used: int
    cc: tuple[int, int] | None
    speed: int  # cores x max SM clock (MHz); 0 when unknown
    proc_bytes: int
    procs: int
    notes: list[str] = field(default_factory=list)
    migs: list[_Mig] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)
    mig_enabled: bool = False
    memory_bandwidth: float = 0.0  # bytes/s from the bus width and max memory clock; 0 when NVML lacks them
    link_bandwidth: float = 0.0  # bytes/s of the PCIe link (max generation x max width); 0 when unknown
    unified: bool = False  # NVML reports no memory of its own: the GPU allocates from host RAM (GB10)


@dataclass
class _Mig:
    name: str
    uuid: str
    total: int
    free: int
    used: int


def parse_cuda_visible_devices(value: str) -> list[str]:
    """The entries of CUDA_VISIBLE_DEVICES, trimmed; an empty value is an empty list (no GPU visible)."""
    return [part.strip() for part in value.split(",")] if value.strip() else []


class NvmlProbe:
    """Reads NVIDIA GPUs through NVML. `loader` returns the pynvml module (tests pass a fake); `env` is os.environ."""

    name = "NVIDIA"

    def __init__(self, env: Mapping[str, str], loader: NvmlLoader = _import_pynvml) -> None:
        self._env = env
        self._loader = loader

    def probe(self) -> ProbeResult:
        try:
            nvml = self._loader()
        except ImportError:
            return ProbeResult(problems=("NVIDIA: nvidia-ml-py (pynvml) is not installed",))
        try:
            nvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVML (a C library behind pynvml) fails in many ways; each becomes a note
            return ProbeResult(problems=(f"NVIDIA: {_nvml_reason(exc)}",))
        try:
            return self._probe(nvml)
        except Exception as exc:  # noqa: BLE001 - NVML (a C library behind pynvml) fails in many ways; each becomes a note
            return ProbeResult(problems=(f"NVIDIA: {_nvml_reason(exc)}",))
        finally:
            with contextlib.suppress(Exception):  # shutting down after a failure: nothing more to report
                nvml.nvmlShutdown()

    def _probe(self, nvml: Any) -> ProbeResult:
        problems: list[str] = []
        driver = _optional(lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        cuda_int = _optional(lambda: int(nvml.nvmlSystemGetCudaDriverVersion()))
        cuda = (
            f"{cuda_int // 1000}.{cuda_int % 1000 // 10}"
            if isinstance(cuda_int, int) and cuda_int > 0
            else ""
        )
        count = int(nvml.nvmlDeviceGetCount())
        gpus: list[_Gpu] = []
        for i in range(count):
            try:
                gpus.append(self._read_gpu(nvml, i))
            except Exception as exc:  # noqa: BLE001 - NVML (a C library behind pynvml) fails in many ways; each becomes a note
                problems.append(f"NVIDIA: GPU {i} (NVML index) skipped: {_nvml_reason(exc)}")
        ordered, certain = self._cuda_order(gpus)
        if not certain:
            problems.append(
                "NVIDIA: GPUs of different models: the CUDA order (FASTEST_FIRST) is estimated; "
                "set CUDA_DEVICE_ORDER=PCI_BUS_ID to make it certain"
            )
        visible = self._apply_visible(ordered, problems)
        detected: list[DetectedGpu] = []
        for gpu, mig_filter in visible:
            if gpu.mig_enabled:
                migs = [m for m in gpu.migs if mig_filter is None or m.uuid in mig_filter]
                if not migs:
                    problems.append(
                        f"NVIDIA: {gpu.name} ({gpu.bus_id}) is in MIG mode with no MIG instance visible"
                    )
                for m in migs:
                    detected.append(self._mig_device(gpu, m, len(detected), driver, cuda))
            else:
                detected.append(self._gpu_device(gpu, len(detected), driver, cuda))
        if sum(1 for d in detected if d.mig_parent) > 1:
            problems.append(
                "NVIDIA: a CUDA process uses only one MIG instance; choose it with CUDA_VISIBLE_DEVICES=MIG-<uuid>"
            )
        return ProbeResult(gpus=tuple(detected), problems=tuple(problems))

    def _read_gpu(self, nvml: Any, index: int) -> _Gpu:
        h = nvml.nvmlDeviceGetHandleByIndex(index)
        try:
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
        except Exception as exc:
            if getattr(exc, "value", None) != _NVML_ERROR_NOT_SUPPORTED:
                raise
            # GB10: "Not Supported"; the GPU allocates from host RAM
            return _unified_gpu(nvml, h, _text(nvml.nvmlDeviceGetName(h)))
        name = _text(nvml.nvmlDeviceGetName(h))
        uuid = _text(_optional(lambda: nvml.nvmlDeviceGetUUID(h)) or "")
        pci = _optional(lambda: nvml.nvmlDeviceGetPciInfo(h))
        bus_id = _normal_bus_id(_text(getattr(pci, "busId", ""))) if pci is not None else ""
        cc_raw = _optional(lambda: nvml.nvmlDeviceGetCudaComputeCapability(h))
        cc = (int(cc_raw[0]), int(cc_raw[1])) if cc_raw is not None else None
        cores = _optional(lambda: int(nvml.nvmlDeviceGetNumGpuCores(h))) or 0
        clock = _optional(lambda: int(nvml.nvmlDeviceGetMaxClockInfo(h, _NVML_CLOCK_SM))) or 0
        gpu = _Gpu(
            handle=h,
            name=name,
            uuid=uuid,
            bus_id=bus_id,
            total=int(mem.total),
            free=int(mem.free),
            used=int(mem.used),
            cc=cc,
            speed=cores * clock,
            proc_bytes=0,
            procs=0,
        )
        gpu.memory_bandwidth = memory_bandwidth(nvml, h)
        gpu.link_bandwidth = pcie_bandwidth(nvml, h)
        self._read_processes(nvml, gpu)
        mode = _optional(lambda: nvml.nvmlDeviceGetMigMode(h))
        if mode is not None and int(mode[0]) == _NVML_DEVICE_MIG_ENABLE:
            gpu.mig_enabled = True
            gpu.migs = self._read_migs(nvml, gpu)
        return gpu

    @staticmethod
    def _read_processes(nvml: Any, gpu: _Gpu) -> None:
        by_pid: dict[int, int] = {}
        known: dict[int, int | None] = {}
        kinds: dict[int, list[str]] = {}
        failed = 0
        for kind, fn_name in (
            ("compute", "nvmlDeviceGetComputeRunningProcesses"),
            ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
        ):
            fn = getattr(nvml, fn_name, None)
            if fn is None:
                continue
            try:
                procs = fn(gpu.handle)
            except Exception:  # noqa: BLE001 - an optional NVML query: unavailable is an answer
                failed += 1
                continue
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                pid = int(getattr(p, "pid", -1))
                # usedGpuMemory is None when the driver cannot tell (Windows WDDM, or no permission)
                by_pid[pid] = max(by_pid.get(pid, 0), int(used) if isinstance(used, int) else 0)
                if isinstance(used, int):
                    known[pid] = max(known.get(pid) or 0, used)
                else:
                    known.setdefault(pid, None)
                kinds.setdefault(pid, []).append(kind)
        gpu.procs = len(by_pid)
        gpu.proc_bytes = sum(by_pid.values())
        gpu.processes = [
            GpuProcess(pid, _process_name(nvml, pid), known[pid], "+".join(kinds[pid]))
            for pid in sorted(known)
        ]
        if failed:
            gpu.notes.append("process list unavailable")

    @staticmethod
    def _read_migs(nvml: Any, gpu: _Gpu) -> list[_Mig]:
        out: list[_Mig] = []
        n = int(_optional(lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(gpu.handle)) or 0)
        for j in range(n):
            try:
                mh = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, j)
            except Exception as exc:  # noqa: BLE001 - NVML (a C library behind pynvml) fails in many ways; each becomes a note
                if getattr(exc, "value", None) != _NVML_ERROR_NOT_FOUND:
                    gpu.notes.append(f"MIG slot {j}: {exc}")
                continue  # an empty MIG slot answers NOT_FOUND
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(mh)
            except Exception as exc:  # noqa: BLE001 - NVML (a C library behind pynvml) fails in many ways; each becomes a note
                gpu.notes.append(f"MIG slot {j}: memory unavailable: {exc}")
                continue
            mig_name = _text(_optional_call(nvml.nvmlDeviceGetName, mh) or f"{gpu.name} MIG {j}")
            mig_uuid = _text(_optional_call(nvml.nvmlDeviceGetUUID, mh) or "")
            out.append(_Mig(mig_name, mig_uuid, int(mem.total), int(mem.free), int(mem.used)))
        return out

    def _cuda_order(self, gpus: list[_Gpu]) -> tuple[list[_Gpu], bool]:
        """The CUDA runtime's order (see the module docstring) and whether it is certain."""
        by_bus = sorted(gpus, key=lambda g: g.bus_id)
        if self._env.get("CUDA_DEVICE_ORDER", "").strip().upper() == "PCI_BUS_ID":
            return by_bus, True
        if len({g.name for g in gpus}) <= 1:
            return by_bus, True

        def fastest(g: _Gpu) -> tuple[int, int, int]:
            major, minor = g.cc if g.cc is not None else (0, 0)
            return (-major, -minor, -g.speed)

        return sorted(by_bus, key=fastest), False

    def _apply_visible(self, ordered: list[_Gpu], problems: list[str]) -> list[tuple[_Gpu, set[str] | None]]:
        """The GPUs CUDA_VISIBLE_DEVICES leaves visible, in its order; each with the MIG UUIDs it selects (None: all)."""
        raw = self._env.get("CUDA_VISIBLE_DEVICES")
        if raw is None:
            return [(g, None) for g in ordered]
        out: list[tuple[_Gpu, set[str] | None]] = []
        seen: set[str] = set()
        for entry in parse_cuda_visible_devices(raw):
            found = self._match_entry(ordered, entry)
            token = f"{found[0].uuid}/{sorted(found[1]) if found[1] else ''}" if found else ""
            if found is None or token in seen:
                problems.append(
                    f"NVIDIA: CUDA_VISIBLE_DEVICES entry {entry!r} matches no GPU (or repeats one): "
                    "it and the entries after it are ignored, as CUDA does"
                )
                break
            seen.add(token)
            gpu, migs = found
            merged = next((pair for pair in out if pair[0] is gpu), None)
            if merged is not None and merged[1] is not None and migs is not None:
                merged[1].update(migs)
            else:
                out.append((gpu, migs))
        if not out:
            problems.append("NVIDIA: CUDA_VISIBLE_DEVICES hides every GPU")
        return out

    @staticmethod
    def _match_entry(ordered: list[_Gpu], entry: str) -> tuple[_Gpu, set[str] | None] | None:
        if is_digits(entry.lstrip("-")):
            i = int_or_none(entry, -(2**63), 2**63 - 1)
            return (ordered[i], None) if i is not None and 0 <= i < len(ordered) else None
        low = entry.lower()
        if low.startswith(
            "mig-gpu-"
        ):  # MIG-GPU-<uuid>/<gi>/<ci> (CUDA 11.0 form): instance ids are not in NVML
            parent = entry[4:].split("/")[0]
            gpu = next((g for g in ordered if g.uuid.lower() == parent.lower()), None)
            return (gpu, None) if gpu is not None else None
        if low.startswith("mig-"):
            for g in ordered:
                for m in g.migs:
                    if m.uuid.lower() == low:
                        return g, {m.uuid}
            return None
        if low.startswith("gpu-"):
            matches = [g for g in ordered if g.uuid.lower().startswith(low)]
            return (matches[0], None) if len(matches) == 1 else None
        return None

    @staticmethod
    def _details(gpu: _Gpu, driver: str, cuda: str) -> str:
        parts = []
        if gpu.cc is not None:
            parts.append(f"compute {gpu.cc[0]}.{gpu.cc[1]}")
        if driver:
            parts.append(f"driver {driver}")
        if cuda:
            parts.append(f"CUDA {cuda}")
        if gpu.bus_id:
            parts.append(f"PCI {gpu.bus_id}")
        return ", ".join(parts)

    def _gpu_device(self, gpu: _Gpu, index: int, driver: str, cuda: str) -> DetectedGpu:
        dev = Device(
            name=gpu.name,
            kind=DeviceKind.GPU,
            total_bytes=gpu.total,
            free_bytes=gpu.free,
            vendor=Vendor.NVIDIA,
            backend_name=f"CUDA{index}",
            memory_bandwidth=gpu.memory_bandwidth,
            link_bandwidth=gpu.link_bandwidth,
            unified_memory=gpu.unified,
            detail=("unified memory (host RAM, MemAvailable as llama.cpp reads it); " if gpu.unified else "")
            + self._details(gpu, driver, cuda),
        )
        return DetectedGpu(
            device=dev,
            key=gpu.uuid or f"pci:{gpu.bus_id}",
            index=index,
            driver_version=driver,
            runtime_version=cuda,
            compute_capability=f"{gpu.cc[0]}.{gpu.cc[1]}" if gpu.cc else "",
            pci_bus_id=gpu.bus_id,
            uuid=gpu.uuid,
            used_bytes=gpu.used,
            other_process_bytes=gpu.proc_bytes,
            other_processes=gpu.procs,
            notes=tuple(gpu.notes),
            processes=tuple(gpu.processes),
            memory_from_host=gpu.unified,
        )

    def _mig_device(self, gpu: _Gpu, mig: _Mig, index: int, driver: str, cuda: str) -> DetectedGpu:
        base = self._gpu_device(gpu, index, driver, cuda)
        dev = replace(
            base.device,
            name=mig.name,
            total_bytes=mig.total,
            free_bytes=mig.free,
            detail=f"MIG instance of {gpu.name}; " + base.device.detail,
        )
        # per-process accounting is per physical GPU, not per MIG instance
        return replace(
            base,
            device=dev,
            key=mig.uuid or f"{base.key}/mig",
            uuid=mig.uuid,
            used_bytes=mig.used,
            other_process_bytes=0,
            other_processes=0,
            processes=(),
            mig_parent=gpu.uuid,
        )


def _process_name(nvml: Any, pid: int) -> str:
    """The program of `pid` as NVML names it (nvmlSystemGetProcessName: a path), its base name; "" when NVML
    cannot tell (no permission, another container's process)."""
    raw = _optional_call(getattr(nvml, "nvmlSystemGetProcessName", lambda _pid: None), pid)
    text = _text(raw) if raw is not None else ""
    return text.replace("\\", "/").rsplit("/", 1)[-1].strip()


#: nvml.h NVML_CLOCK_MEM: the memory clock domain of nvmlDeviceGetMaxClockInfo.
_NVML_CLOCK_MEM = 2
#: GB/s per lane of each PCIe generation after line encoding (8b/10b for 1-2, 128b/130b from 3).
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def memory_bandwidth(nvml: Any, handle: Any) -> float:
    """Peak memory bandwidth in bytes/s: bus width (bits) x max memory clock (MHz) x 2 (double data rate) / 8.

    NVML reports the memory clock of GDDR and HBM as the command clock; the data moves on both edges. 0 when the
    driver lacks `nvmlDeviceGetMemoryBusWidth` (older pynvml) or either value."""
    bits = _optional(lambda: int(nvml.nvmlDeviceGetMemoryBusWidth(handle))) or 0
    mhz = _optional(lambda: int(nvml.nvmlDeviceGetMaxClockInfo(handle, _NVML_CLOCK_MEM))) or 0
    return bits * mhz * 1e6 * 2 / 8 if bits > 0 and mhz > 0 else 0.0


def pcie_bandwidth(nvml: Any, handle: Any) -> float:
    """One direction of the PCIe link in bytes/s (max generation and width the link supports); 0 when unknown."""
    gen = _optional(lambda: int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))) or 0
    width = _optional(lambda: int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))) or 0
    lane = PCIE_LANE_GBS.get(gen, 0.0)
    return lane * width * 1e9 if lane > 0 and width > 0 else 0.0


def _unified_gpu(nvml: Any, h: Any, name: str) -> _Gpu:
    """A GPU with no memory of its own in NVML: sizes come from the host (`resolve_unified`)."""
    uuid = _text(_optional(lambda: nvml.nvmlDeviceGetUUID(h)) or "")
    pci = _optional(lambda: nvml.nvmlDeviceGetPciInfo(h))
    bus_id = _normal_bus_id(_text(getattr(pci, "busId", ""))) if pci is not None else ""
    cc_raw = _optional(lambda: nvml.nvmlDeviceGetCudaComputeCapability(h))
    cc = (int(cc_raw[0]), int(cc_raw[1])) if cc_raw is not None else None
    return _Gpu(h, name, uuid, bus_id, 0, 0, 0, cc, 0, 0, 0, unified=True)


def _optional(fn: Callable[[], Any]) -> Any:
    """The value of an NVML query that may be unsupported on this GPU or driver; None when it fails."""
    try:
        return fn()
    except Exception:  # noqa: BLE001 - an optional NVML query: unavailable is an answer
        return None


def _optional_call(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), or None when the NVML query fails."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - an optional NVML query: unavailable is an answer
        return None
