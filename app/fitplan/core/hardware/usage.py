"""The memory one running process really uses, per device: the host's resident set (Linux `/proc/PID/status`)
and each NVIDIA GPU's per-process figure (NVML). What cannot be read is left out, never guessed."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fitplan.core.base.numbers import int_or_none
from fitplan.core.hardware.nvidia import _import_pynvml

_KIB = 1024
_STATUS_FIELD = re.compile(r"^(VmRSS|RssAnon|RssFile|RssShmem):\s+(\d+) kB", re.M)


@dataclass(frozen=True, slots=True)
class ProcessUse:
    """Memory one device holds for the process: `used_bytes`, and where the figure comes from."""

    device: str  # "Host", "CUDA0"
    used_bytes: int
    source: str  # "RSS (anonymous)", "NVML (process)"
    detail: str = ""  # what else was read ("file-backed 12 MiB resident")


def host_use(pid: int, proc_root: Path = Path("/proc")) -> ProcessUse | None:
    """The process's anonymous resident memory (malloc'd buffers: KV, compute, repacked weights; not the mmap'd
    model file, which is page cache and resident only where read). None where /proc cannot be read."""
    try:
        text = (proc_root / str(pid) / "status").read_text()
    except OSError:
        return None
    fields = {
        m.group(1): (int_or_none(m.group(2), 0, 2**50) or 0) * _KIB for m in _STATUS_FIELD.finditer(text)
    }
    if "RssAnon" not in fields:
        return None
    file_backed = fields.get("RssFile", 0)
    return ProcessUse(
        "Host",
        fields["RssAnon"],
        "RSS (anonymous)",
        f"resident in all {fields.get('VmRSS', 0) / (1 << 20):.0f} MiB, of which file-backed "
        f"{file_backed / (1 << 20):.0f} MiB (the mapped model, where read)",
    )


def nvml_use(pid: int, loader: Callable[[], Any] = _import_pynvml) -> tuple[ProcessUse, ...]:
    """Per NVIDIA GPU (NVML's order, named CUDA<i>), the memory NVML attributes to `pid`; () without NVML."""
    try:
        nvml = loader()
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML, no driver: no figure
        return ()
    out: list[ProcessUse] = []
    try:
        for i in range(int(nvml.nvmlDeviceGetCount())):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                used = getattr(p, "usedGpuMemory", None)
                if int(getattr(p, "pid", -1)) == pid and isinstance(used, int):
                    out.append(ProcessUse(f"CUDA{i}", used, "NVML (process)"))
    except Exception:  # noqa: BLE001 - a query NVML refuses (permissions, Windows WDDM): what was read stays
        pass
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return tuple(out)


def process_use(pid: int) -> tuple[ProcessUse, ...]:
    """What every readable device holds for `pid`: its GPUs (NVML), then the host."""
    host = host_use(pid)
    return (*nvml_use(pid), *((host,) if host is not None else ()))
