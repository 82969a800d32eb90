"""Apple Silicon: one Metal GPU that allocates from the unified memory.

llama.cpp's Metal backend reports the device's `recommendedMaxWorkingSetSize` as its total and that total minus
`currentAllocatedSize` (about 0 before loading) as its free memory (ggml-metal-device.m,
ggml_metal_device_get_memory). fitplan asks Metal for that value through the Objective-C runtime (ctypes).
When Metal cannot be asked, it uses, in order:

1. `sysctl iogpu.wired_limit_mb` when it is set (non-zero): the user's GPU wired-memory limit;
2. otherwise an estimate of macOS's default: 2/3 of RAM up to 36 GiB, 3/4 above. Logs of llama.cpp show
   21845.34 MB on 32 GiB machines (32768 MiB x 2/3) and 147456 MB on 192 GiB ones (196608 MiB x 3/4); newer macOS
   releases have been seen granting more on large machines (107.5 GiB of 128 GiB), so the device detail says
   "estimated" whenever this rule is used.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from fitplan.core.base.devices import GIB, MIB, Device, DeviceKind, Vendor
from fitplan.core.base.numbers import int_or_none
from fitplan.core.hardware.host import CommandRunner, run_command
from fitplan.core.hardware.probe import DetectedGpu, ProbeResult

MetalQuery = Callable[[], int | None]

#: RAM up to which macOS's default GPU working set is 2/3 of RAM (3/4 above).
SMALL_MAC_RAM = 36 * GIB


def estimated_metal_working_set(ram_bytes: int) -> int:
    """macOS's default recommendedMaxWorkingSetSize, estimated from RAM (see the module docstring)."""
    return ram_bytes * 2 // 3 if ram_bytes <= SMALL_MAC_RAM else ram_bytes * 3 // 4


def query_metal_working_set() -> int | None:
    """MTLCreateSystemDefaultDevice().recommendedMaxWorkingSetSize, or None when Metal is not there."""
    import ctypes  # macOS only

    try:
        objc = ctypes.cdll.LoadLibrary("/usr/lib/libobjc.A.dylib")
        metal = ctypes.cdll.LoadLibrary("/System/Library/Frameworks/Metal.framework/Metal")
        metal.MTLCreateSystemDefaultDevice.restype = ctypes.c_void_p
        device = metal.MTLCreateSystemDefaultDevice()
        if not device:
            return None
        objc.sel_registerName.restype = ctypes.c_void_p
        objc.sel_registerName.argtypes = [ctypes.c_char_p]
        selector = objc.sel_registerName(b"recommendedMaxWorkingSetSize")
        send = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p)(("objc_msgSend", objc))
        value = int(send(device, selector))
    except (OSError, AttributeError, ValueError):
        return None
    return value if value > 0 else None


def _sysctl(run: CommandRunner, name: str) -> str:
    return (run(["sysctl", "-n", name]) or "").strip()


class AppleSiliconProbe:
    name = "Apple"

    def __init__(
        self,
        platform: str = sys.platform,
        run: CommandRunner = run_command,
        metal_query: MetalQuery = query_metal_working_set,
    ) -> None:
        self._platform = platform
        self._run = run
        self._metal = metal_query

    def probe(self) -> ProbeResult:
        if self._platform != "darwin":
            return ProbeResult()
        if _sysctl(self._run, "hw.optional.arm64") != "1":
            return ProbeResult(problems=("Apple: an Intel Mac: its Metal GPUs are not detected",))
        ram_n = int_or_none(_sysctl(self._run, "hw.memsize"), 1, 1 << 60)
        if ram_n is None:
            return ProbeResult(problems=("Apple: could not read hw.memsize",))
        ram = ram_n
        chip = _sysctl(self._run, "machdep.cpu.brand_string") or "Apple Silicon"
        limit_s = _sysctl(self._run, "iogpu.wired_limit_mb")
        wired = (int_or_none(limit_s, 0, 1 << 40) or 0) * MIB
        metal = self._metal()
        if metal is not None:
            total, how = metal, "Metal recommendedMaxWorkingSetSize"
        elif wired > 0:
            total, how = min(wired, ram), "iogpu.wired_limit_mb"
        else:
            total, how = estimated_metal_working_set(ram), "estimated (2/3 of RAM up to 36 GiB, 3/4 above)"
        dev = Device(
            name=chip,
            kind=DeviceKind.GPU,
            total_bytes=total,
            free_bytes=total,  # as llama.cpp: the working set minus what this process already allocated
            vendor=Vendor.APPLE,
            backend_name="MTL0",
            unified_memory=True,
            host_shared_bytes=total,  # every byte of the working set is host RAM
            detail=f"unified memory {ram / GIB:.0f} GiB; GPU working set {total / GIB:.1f} GiB ({how})",
        )
        return ProbeResult(gpus=(DetectedGpu(device=dev, key="apple", index=0),))
