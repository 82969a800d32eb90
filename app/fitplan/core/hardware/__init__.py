"""What this machine has: GPUs (NVIDIA via NVML, AMD via sysfs, Apple Silicon via Metal), host RAM, and the
hypothetical GPUs the user plans for. Every source sits behind the `DeviceProbe` interface so tests use fakes."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from fitplan.core.hardware.apple import AppleSiliconProbe, estimated_metal_working_set
from fitplan.core.hardware.catalog import (
    AssumedGpuError,
    CatalogGpu,
    GpuCatalog,
    assumed_devices,
    load_catalog,
    parse_assumed_gpu,
)
from fitplan.core.hardware.config import AssumedGpu, HardwareConfig
from fitplan.core.hardware.host import HostMemoryProbe
from fitplan.core.hardware.probe import (
    DetectedGpu,
    DeviceProbe,
    FakeProbe,
    HostMemory,
    ProbeResult,
    machine_from,
    merge_results,
    resolve_unified,
    run_probes,
    windows_shared,
)

if TYPE_CHECKING:
    from fitplan.core.hardware.amd import AmdSysfsProbe
    from fitplan.core.hardware.intel import IntelSysfsProbe
    from fitplan.core.hardware.nvidia import NvmlProbe
    from fitplan.core.hardware.tegra import TegraProbe

#: the GPU probes, imported when a probe runs or is named (a plan for assumed GPUs needs none of them)
_PROBE_MODULES = {
    "AmdSysfsProbe": "amd",
    "IntelSysfsProbe": "intel",
    "NvmlProbe": "nvidia",
    "TegraProbe": "tegra",
}


def __getattr__(name: str) -> object:
    module = _PROBE_MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "AmdSysfsProbe",
    "AppleSiliconProbe",
    "AssumedGpu",
    "AssumedGpuError",
    "CatalogGpu",
    "DetectedGpu",
    "DeviceProbe",
    "FakeProbe",
    "GpuCatalog",
    "HardwareConfig",
    "HostMemory",
    "HostMemoryProbe",
    "IntelSysfsProbe",
    "NvmlProbe",
    "ProbeResult",
    "TegraProbe",
    "assumed_devices",
    "default_probes",
    "detect_hardware",
    "estimated_metal_working_set",
    "load_catalog",
    "machine_from",
    "merge_results",
    "parse_assumed_gpu",
    "resolve_unified",
    "run_probes",
    "windows_shared",
]


def default_probes(
    env: Mapping[str, str] | None = None, platform: str = sys.platform
) -> tuple[DeviceProbe, ...]:
    """The probes that make sense on `platform`, in llama.cpp's GPU order (CUDA, then ROCm, then Metal), then RAM."""
    from fitplan.core.hardware.amd import AmdSysfsProbe
    from fitplan.core.hardware.intel import IntelSysfsProbe
    from fitplan.core.hardware.nvidia import NvmlProbe
    from fitplan.core.hardware.tegra import TegraProbe

    environ = os.environ if env is None else env
    probes: list[DeviceProbe] = []
    if platform != "darwin":
        probes.append(NvmlProbe(environ))
    if platform.startswith("linux"):
        probes.append(TegraProbe())
        probes.append(AmdSysfsProbe(env=environ))
        probes.append(IntelSysfsProbe())
    if platform == "darwin":
        probes.append(AppleSiliconProbe(platform))
    probes.append(HostMemoryProbe(platform))
    return tuple(probes)


def detect_hardware(probes: Sequence[DeviceProbe] | None = None, platform: str = sys.platform) -> ProbeResult:
    """Run the probes (the defaults for this platform unless given): GPUs, host RAM, and why anything is missing.
    On Windows each discrete GPU is marked with the shared GPU memory it may spill into."""
    result = run_probes(default_probes(platform=platform) if probes is None else probes)
    return windows_shared(result) if platform in ("win32", "cygwin") else result
