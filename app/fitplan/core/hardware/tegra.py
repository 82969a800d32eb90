"""NVIDIA Jetson (Tegra): one integrated GPU that allocates from system RAM, found from the device tree.

Jetson boards have no NVML before JetPack 7; the device tree names the board (`/proc/device-tree/model`,
"NVIDIA Jetson AGX Orin Developer Kit") and its SoC (`compatible`: "nvidia,tegra234"). llama.cpp's CUDA backend
reports MemAvailable (or the free huge pages) as the free memory of an integrated GPU (ggml-cuda.cu,
ggml_backend_cuda_device_get_memory), so the GPU is `memory_from_host`: `resolve_unified` gives it the host's
reading and the plan shares one pool between the two.
"""

from __future__ import annotations

from pathlib import Path

from fitplan.core.base.devices import Device, DeviceKind, Vendor
from fitplan.core.hardware.probe import TEGRA_KEY, DetectedGpu, ProbeResult


def _read(path: Path) -> str:
    try:
        return path.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


class TegraProbe:
    name = "Jetson"

    def __init__(self, root: str | Path = "/") -> None:
        self._tree = Path(root) / "proc" / "device-tree"

    def probe(self) -> ProbeResult:
        model = _read(self._tree / "model")
        compatible = _read(self._tree / "compatible").lower()
        if "nvidia,tegra" not in compatible and "jetson" not in model.lower():
            return ProbeResult()
        dev = Device(
            name=model or "NVIDIA Jetson",
            kind=DeviceKind.GPU,
            total_bytes=0,
            free_bytes=0,
            vendor=Vendor.NVIDIA,
            backend_name="CUDA0",
            unified_memory=True,
            detail="integrated GPU: unified memory (host RAM, MemAvailable as llama.cpp reads it)",
        )
        return ProbeResult(gpus=(DetectedGpu(device=dev, key=TEGRA_KEY, index=0, memory_from_host=True),))
