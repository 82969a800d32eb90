"""Intel GPUs on Linux, read from sysfs (`class/drm/cardN/device`, PCI vendor 0x8086).

* A discrete Arc card publishes its VRAM: `device/tileN/physical_vram_size_bytes` (xe driver, summed over tiles)
  or `lmem_total_bytes` (i915). Neither driver publishes the memory in use, and llama.cpp's SYCL backend reports
  free = total when Level Zero's sysman cannot answer (ggml-sycl/mem.cpp, get_memory_size): the card is planned as
  entirely free, with a note saying so.
* An integrated GPU (no VRAM file) allocates from system RAM: it is `memory_from_host` (`resolve_unified`), and
  it is left out, with a problem line, when another GPU is found: a CUDA or ROCm build of llama.cpp does not see it.

Devices are named SYCL0, SYCL1 ... in PCI bus order.
"""

from __future__ import annotations

import re
from pathlib import Path

from fitplan.core.base.devices import Device, DeviceKind, Vendor
from fitplan.core.base.numbers import int_or_none
from fitplan.core.hardware.probe import DetectedGpu, ProbeResult

INTEL_PCI_VENDOR = "0x8086"
_CARD_RE = re.compile(r"^card\d+$")
_TILE_RE = re.compile(r"^tile\d+$")
FREE_IS_TOTAL_NOTE = (
    "the driver does not publish the memory in use: planned as all free, as llama.cpp's SYCL backend reports it "
    "without Level Zero sysman; close other programs on it"
)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def vram_bytes(card: Path) -> int | None:
    """The VRAM a discrete Intel card publishes, or None (an integrated GPU)."""
    dev = card / "device"
    tiles = 0
    try:
        tile_dirs = sorted(p for p in dev.iterdir() if _TILE_RE.match(p.name))
    except OSError:
        tile_dirs = []
    for t in tile_dirs:
        for f in (t / "physical_vram_size_bytes", t / "memory" / "physical_vram_size_bytes"):
            n = int_or_none(_read(f), 1, 1 << 50)
            if n is not None:
                tiles += n
                break
    if tiles:
        return tiles
    for f in (dev / "lmem_total_bytes", card / "lmem_total_bytes"):
        n = int_or_none(_read(f), 1, 1 << 50)
        if n is not None:
            return n
    return None


class IntelSysfsProbe:
    name = "Intel"

    def __init__(self, sysfs_root: str | Path = "/sys") -> None:
        self._root = Path(sysfs_root)

    def probe(self) -> ProbeResult:
        try:
            cards = sorted(p for p in (self._root / "class" / "drm").iterdir() if _CARD_RE.match(p.name))
        except OSError:
            return ProbeResult()
        found: list[tuple[str, Path]] = []
        for card in cards:
            if _read(card / "device" / "vendor").lower() == INTEL_PCI_VENDOR:
                slot = next(
                    (
                        ln.split("=", 1)[1].strip().lower()
                        for ln in _read(card / "device" / "uevent").splitlines()
                        if ln.startswith("PCI_SLOT_NAME=")
                    ),
                    card.name,
                )
                found.append((slot, card))
        gpus: list[DetectedGpu] = []
        for index, (slot, card) in enumerate(sorted(found)):
            device_id = _read(card / "device" / "device").lower().removeprefix("0x")
            name = f"Intel GPU 8086:{device_id}" if device_id else "Intel GPU"
            vram = vram_bytes(card)
            if vram is not None:
                dev = Device(
                    name=name,
                    kind=DeviceKind.GPU,
                    total_bytes=vram,
                    free_bytes=vram,
                    vendor=Vendor.INTEL,
                    backend_name=f"SYCL{index}",
                    detail=f"PCI {slot}",
                )
                notes: tuple[str, ...] = (FREE_IS_TOTAL_NOTE,)
                gpus.append(DetectedGpu(dev, f"pci:{slot}", index, pci_bus_id=slot, notes=notes))
            else:
                dev = Device(
                    name=name,
                    kind=DeviceKind.GPU,
                    total_bytes=0,
                    free_bytes=0,
                    vendor=Vendor.INTEL,
                    backend_name=f"SYCL{index}",
                    unified_memory=True,
                    detail=f"integrated GPU: unified memory (host RAM); PCI {slot}",
                )
                gpus.append(DetectedGpu(dev, f"pci:{slot}", index, pci_bus_id=slot, memory_from_host=True))
        return ProbeResult(gpus=tuple(gpus))
