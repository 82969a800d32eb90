"""Host RAM, total and available, with the standard library only.

* Linux: /proc/meminfo `MemTotal` and `MemAvailable` (the kernel's estimate of memory usable without swapping),
  lowered to the process's cgroup v2 limit where one is set (containers, systemd slices): for the cgroup of
  /proc/self/cgroup and each of its ancestors with a `memory.max`, the total is at most `memory.max` and the
  available RAM at most `memory.max - memory.current + inactive_file` (memory.stat: page cache the cgroup reclaims
  before it runs out). `HugePages_Free x Hugepagesize` is kept apart: llama.cpp's CUDA backend gives a unified
  memory GPU (GB10, Jetson) that instead of MemAvailable when huge pages are reserved.
* macOS: `sysctl -n hw.memsize` for the total; available = (free + inactive + speculative) pages of `vm_stat`.
* Windows: `GlobalMemoryStatusEx` (ullTotalPhys, ullAvailPhys) through ctypes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from fitplan.core.base.numbers import int_or_none
from fitplan.core.hardware.probe import HostMemory, ProbeResult

CommandRunner = Callable[[list[str]], str | None]


def run_command(argv: list[str]) -> str | None:
    """stdout of a short system command, or None if it cannot run or fails."""
    import subprocess  # imported when a command runs: a plan for assumed GPUs runs none

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
    huge: int | None = None
    if values.get("HugePages_Total", 0) > 0:  # counts, not kB: the scale above left them as they are
        huge = values.get("HugePages_Free", 0) * values.get("Hugepagesize", 0)
    return HostMemory(
        total_bytes=total, available_bytes=avail, source="/proc/meminfo", hugepages_free_bytes=huge
    )


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int_or_none(text, 0, 1 << 62)


def _inactive_file(cgroup_dir: Path) -> int:
    try:
        text = (cgroup_dir / "memory.stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "inactive_file":
            return int_or_none(value.strip(), 0, 1 << 62) or 0
    return 0


def cgroup_limit(self_cgroup: Path, cgroup_root: Path) -> tuple[int, int, str] | None:
    """(limit, headroom, where) of the tightest cgroup v2 memory limit over this process's cgroup and its
    ancestors; None without cgroup v2 or without any limit ("max")."""
    try:
        lines = self_cgroup.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return None
    rel = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    if rel is None:  # cgroup v1 only
        return None
    parts = [p for p in rel.strip().split("/") if p and p not in (".", "..")]
    best: tuple[int, int, str] | None = None
    for depth in range(len(parts), -1, -1):
        d = cgroup_root.joinpath(*parts[:depth])
        limit = _read_int(d / "memory.max")  # "max" (no limit) is not a number
        current = _read_int(d / "memory.current")
        if limit is None or current is None:
            continue
        headroom = max(0, limit - current + _inactive_file(d))
        headroom = min(headroom, limit)
        if best is None or headroom < best[1]:
            best = (limit, headroom, "/" + "/".join(parts[:depth]))
    return best


def apply_cgroup_limit(mem: HostMemory, limit: tuple[int, int, str] | None) -> HostMemory:
    """`mem` lowered to a cgroup limit (`cgroup_limit`) where that is lower than what the kernel reports."""
    if limit is None:
        return mem
    cap, headroom, where = limit
    if cap >= mem.total_bytes and headroom >= mem.available_bytes:
        return mem
    return HostMemory(
        total_bytes=min(mem.total_bytes, cap),
        available_bytes=min(mem.available_bytes, headroom),
        source=f"{mem.source} + cgroup memory.max of {where}",
        hugepages_free_bytes=mem.hugepages_free_bytes,
        unlimited_available_bytes=mem.available_bytes,
    )


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


def _windows_memory() -> HostMemory | None:
    import ctypes  # Windows only

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
        self_cgroup_path: str | Path = "/proc/self/cgroup",
        cgroup_root: str | Path = "/sys/fs/cgroup",
    ) -> None:
        self._platform = platform
        self._meminfo = Path(meminfo_path)
        self._self_cgroup = Path(self_cgroup_path)
        self._cgroup_root = Path(cgroup_root)
        self._run = run
        self._windows = windows_reader

    def read(self) -> HostMemory | None:
        if self._platform.startswith("linux"):
            try:
                mem = parse_meminfo(self._meminfo.read_text(encoding="ascii", errors="replace"))
            except OSError:
                return None
            if mem is None:
                return None
            return apply_cgroup_limit(mem, cgroup_limit(self._self_cgroup, self._cgroup_root))
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
