"""Host RAM, total and available, with the standard library only.

* Linux: /proc/meminfo `MemTotal` and `MemAvailable` (the kernel's estimate of memory usable without swapping).
* macOS: `sysctl -n hw.memsize` for the total; available = (free + inactive + speculative) pages of `vm_stat`.
* Windows: `GlobalMemoryStatusEx` (ullTotalPhys, ullAvailPhys) through ctypes.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from fitplan.core.base.numbers import int_or_none
from fitplan.core.hardware.probe import HostMemory, ProbeResult

CommandRunner = Callable[[list[str]], str | None]


def run_command(argv: list[str]) -> str | None:
    """stdout of a short system command, or None if it cannot run or fails."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def parse_meminfo(text: str) -> HostMemory | None:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        n = int_or_none(parts[0], 0, 1 << 60) if parts else None
        if n is not None:
            scale = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
            values[key.strip()] = n * scale
    total = values.get("MemTotal")
    if total is None:
        return None
    avail = values.get("MemAvailable")
    if avail is None:  # kernels before 3.14
        avail = values.get("MemFree", 0) + values.get("Buffers", 0) + values.get("Cached", 0)
    return HostMemory(total_bytes=total, available_bytes=avail, source="/proc/meminfo")


_VM_PAGE_SIZE = re.compile(r"page size of (\d+) bytes")
_VM_LINE = re.compile(r"^(Pages [^:]+):\s+(\d+)\.?\s*$")


def parse_vm_stat(text: str, total_bytes: int) -> HostMemory:
    m = _VM_PAGE_SIZE.search(text)
    page = (int_or_none(m.group(1), 1, 1 << 30) if m else None) or 4096
    pages: dict[str, int] = {}
    for line in text.splitlines():
        lm = _VM_LINE.match(line.strip())
        if lm:
            n = int_or_none(lm.group(2), 0, 1 << 50)
            if n is not None:
                pages[lm.group(1)] = n
    avail_pages = (
        pages.get("Pages free", 0) + pages.get("Pages inactive", 0) + pages.get("Pages speculative", 0)
    )
    return HostMemory(
        total_bytes=total_bytes,
        available_bytes=min(total_bytes, avail_pages * page),
        source="sysctl hw.memsize + vm_stat",
    )


class _MemoryStatusEx(ctypes.Structure):
    _fields_ = [
        ("dwLength", ctypes.c_uint32),
        ("dwMemoryLoad", ctypes.c_uint32),
        ("ullTotalPhys", ctypes.c_uint64),
        ("ullAvailPhys", ctypes.c_uint64),
        ("ullTotalPageFile", ctypes.c_uint64),
        ("ullAvailPageFile", ctypes.c_uint64),
        ("ullTotalVirtual", ctypes.c_uint64),
        ("ullAvailVirtual", ctypes.c_uint64),
        ("ullAvailExtendedVirtual", ctypes.c_uint64),
    ]


def _windows_memory() -> HostMemory | None:
    status = _MemoryStatusEx()
    status.dwLength = ctypes.sizeof(_MemoryStatusEx)
    windll = getattr(ctypes, "windll", None)
    if windll is None or not windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
        return None
    return HostMemory(int(status.ullTotalPhys), int(status.ullAvailPhys), "GlobalMemoryStatusEx")


class HostMemoryProbe:
    name = "Host"

    def __init__(
        self,
        platform: str = sys.platform,
        meminfo_path: str | Path = "/proc/meminfo",
        run: CommandRunner = run_command,
        windows_reader: Callable[[], HostMemory | None] = _windows_memory,
    ) -> None:
        self._platform = platform
        self._meminfo = Path(meminfo_path)
        self._run = run
        self._windows = windows_reader

    def read(self) -> HostMemory | None:
        if self._platform.startswith("linux"):
            try:
                return parse_meminfo(self._meminfo.read_text(encoding="ascii", errors="replace"))
            except OSError:
                return None
        if self._platform == "darwin":
            total_n = int_or_none((self._run(["sysctl", "-n", "hw.memsize"]) or "").strip(), 1, 1 << 60)
            if total_n is None:
                return None
            vm = self._run(["vm_stat"])
            total = total_n
            return parse_vm_stat(vm, total) if vm else HostMemory(total, total, "sysctl hw.memsize")
        if self._platform in ("win32", "cygwin"):
            return self._windows()
        return None

    def probe(self) -> ProbeResult:
        mem = self.read()
        if mem is None:
            return ProbeResult(problems=(f"Host: could not read the RAM size on {self._platform}",))
        return ProbeResult(host=mem)
