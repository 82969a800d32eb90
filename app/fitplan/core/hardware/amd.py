"""AMD GPUs on Linux, read from the amdgpu driver's sysfs files (no ROCm needed).

For each `class/drm/cardN` whose `device/vendor` is 0x1002: `device/mem_info_vram_total` and
`device/mem_info_vram_used` (bytes), the name from `device/product_name` when the driver fills it (it is empty
on most consumer boards), otherwise the PCI ids ("AMD GPU 1002:744c"). Devices are taken in PCI bus order, as
HIP enumerates them by default, then `ROCR_VISIBLE_DEVICES` and `HIP_VISIBLE_DEVICES` (applied in that order, each
indexing the list the previous one left) keep and reorder them; they are numbered ROCm0, ROCm1, ... afterwards.
Only numeric indices are understood: a UUID entry stops the list with a problem line saying so.

For the speed model: the top level of `device/pp_dpm_mclk` (the memory clock, MHz; `core.speed.figures` turns it into
a bandwidth with the catalog's bus width and memory type) and `device/mem_info_vram_vendor` (shown in the detail).
When `product_name` is empty, the PCI device id and revision name the board where `PCI_NAMES` knows them.
APUs (the integrated GPU of a Ryzen: Strix Halo's Radeon 8060S, the 780M...) have a small VRAM carve-out set in
the firmware and allocate the rest from system RAM through the GTT (`mem_info_gtt_total` / `mem_info_gtt_used`,
sized by the kernel: `ttm.pages_limit`, `amdgpu.gttsize`). llama.cpp's Vulkan backend reports an integrated
GPU's every heap, carve-out and GTT, as its memory (ggml-vulkan.cpp, ggml_backend_vk_get_device_memory); its HIP
backend reports hipMemGetInfo, which depending on the kernel and ROCm release is the carve-out alone or the GTT.
fitplan plans an APU with what it can allocate, carve-out plus free GTT, and marks the GTT part as host RAM
(`Device.host_shared_bytes`): the plan charges the host for it. An APU is known by its PCI device id
(`APU_DEVICE_IDS`): the driver's sysfs files look the same on a discrete card, which has a GTT too.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from fitplan.core.base.devices import GIB, Device, DeviceKind, Vendor
from fitplan.core.base.numbers import int_or_none, is_digits, real_or_none
from fitplan.core.hardware.probe import DetectedGpu, ProbeResult

AMD_PCI_VENDOR = "0x1002"
_CARD_RE = re.compile(r"^card\d+$")
#: "device:revision" (lower-case hex, no 0x) -> the catalog's name, for boards whose product_name is empty. Navi 31
#: boards share the device id 744c; the revision tells them apart (LACT's database lists 0x1002:0x744C:0xC8 as the
#: RX 7900 XTX). Only pairs with a published lsPCI/LACT record are listed.
PCI_NAMES = {"744c:c8": "Radeon RX 7900 XTX"}
_MCLK_RE = re.compile(r"^\s*\d+:\s*(\d+(?:\.\d+)?)\s*mhz", re.IGNORECASE)

#: PCI device ids of AMD APUs' integrated GPUs (pci.ids names), as lspci prints them.
APU_DEVICE_IDS: Mapping[str, str] = {
    "1586": "Strix Halo (Radeon 8060S / 8050S)",
    "150e": "Strix Point (Radeon 890M / 880M)",
    "1114": "Krackan Point (Radeon 860M / 840M)",
    "15bf": "Phoenix1 (Radeon 780M / 760M)",
    "1900": "Phoenix3 / Hawk Point (Radeon 780M)",
    "1681": "Rembrandt (Radeon 680M)",
    "164e": "Raphael (Radeon Graphics)",
    "1638": "Cezanne (Radeon Vega)",
}

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Card:
    slot: str
    name: str
    total: int
    used: int
    gtt_total: int = 0  # APUs only
    gtt_used: int = 0
    apu: str = ""  # the APU family of APU_DEVICE_IDS, "" for a discrete card
    memory_clock_mhz: float = 0.0  # the top level of pp_dpm_mclk (the speed model's), 0 when unread
    vram_vendor: str = ""  # mem_info_vram_vendor, shown in the detail


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def max_memory_clock(text: str | None) -> float:
    """The highest level of a pp_dpm_mclk listing ("0: 96Mhz *\\n...\\n3: 1249Mhz") in MHz; 0 when unreadable."""
    found = (real_or_none(m.group(1), 0.0, 1e6) for m in map(_MCLK_RE.match, (text or "").splitlines()) if m)
    return max((x for x in found if x is not None), default=0.0)


def _board_name(dev_dir: Path) -> str:
    """product_name when the driver fills it, else the catalog name of the PCI id and revision, else the ids."""
    name = _read(dev_dir / "product_name") or ""
    if name:
        return name
    device_id = (_read(dev_dir / "device") or "").lower().removeprefix("0x")
    revision = (_read(dev_dir / "revision") or "").lower().removeprefix("0x")
    known = PCI_NAMES.get(f"{device_id}:{revision}")
    if known:
        return known
    return f"AMD GPU 1002:{device_id}" if device_id else "AMD GPU"


def _slot(dev_dir: Path) -> str:
    uevent = _read(dev_dir / "uevent") or ""
    for line in uevent.splitlines():
        if line.startswith("PCI_SLOT_NAME="):
            return line.split("=", 1)[1].strip().lower()
    try:
        return dev_dir.resolve().name.lower()
    except OSError:
        return ""


class AmdSysfsProbe:
    name = "AMD"

    def __init__(self, sysfs_root: str | Path = "/sys", env: Mapping[str, str] | None = None) -> None:
        self._root = Path(sysfs_root)
        self._env = os.environ if env is None else env

    def probe(self) -> ProbeResult:
        drm = self._root / "class" / "drm"
        try:
            cards = sorted(p for p in drm.iterdir() if _CARD_RE.match(p.name))
        except OSError:
            return ProbeResult()  # no DRM class: not Linux, or no GPU driver at all; nothing to say
        found: list[_Card] = []
        problems: list[str] = []
        for card in cards:
            dev_dir = card / "device"
            if (_read(dev_dir / "vendor") or "").lower() != AMD_PCI_VENDOR:
                continue
            total_s = _read(dev_dir / "mem_info_vram_total")
            used_s = _read(dev_dir / "mem_info_vram_used")
            slot = _slot(dev_dir)
            total_n = int_or_none(total_s or "", 1, 1 << 60)
            if total_n is None:
                problems.append(
                    f"AMD: {card.name} ({slot}): no readable mem_info_vram_total (amdgpu driver?)"
                )
                continue
            total = total_n
            used = int_or_none(used_s or "", 0, total) or 0
            device_id = (_read(dev_dir / "device") or "").lower().removeprefix("0x")
            card_info = _card(
                dev_dir, slot, _board_name(dev_dir), total, used, APU_DEVICE_IDS.get(device_id, "")
            )
            found.append(
                dataclasses.replace(
                    card_info,
                    memory_clock_mhz=max_memory_clock(_read(dev_dir / "pp_dpm_mclk")),
                    vram_vendor=_read(dev_dir / "mem_info_vram_vendor") or "",
                )
            )
        visible = sorted(found, key=lambda c: c.slot)
        for var in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
            if var in self._env:
                visible = _apply_visible(visible, var, self._env[var], problems)
        gpus: list[DetectedGpu] = []
        for index, c in enumerate(visible):
            gpus.append(
                DetectedGpu(
                    device=_device(c, index),
                    key=f"pci:{c.slot}",
                    index=index,
                    pci_bus_id=c.slot,
                    used_bytes=c.used + c.gtt_used,
                )
            )
        return ProbeResult(gpus=tuple(gpus), problems=tuple(problems))


def _card(dev_dir: Path, slot: str, name: str, total: int, used: int, apu: str) -> _Card:
    if not apu:
        return _Card(slot, name, total, used)
    gtt_total = int_or_none(_read(dev_dir / "mem_info_gtt_total") or "", 0, 1 << 60) or 0
    gtt_used = int_or_none(_read(dev_dir / "mem_info_gtt_used") or "", 0, gtt_total) or 0
    return _Card(slot, name, total, used, gtt_total, gtt_used, apu)


def _device(c: _Card, index: int) -> Device:
    where = ", ".join(
        x for x in (f"PCI {c.slot}" if c.slot else "", f"VRAM {c.vram_vendor}" if c.vram_vendor else "") if x
    )
    vram_free = max(0, c.total - c.used)
    if not c.apu:
        return Device(
            name=c.name,
            kind=DeviceKind.GPU,
            total_bytes=c.total,
            free_bytes=vram_free,
            vendor=Vendor.AMD,
            backend_name=f"ROCm{index}",
            detail=where,
            memory_clock_mhz=c.memory_clock_mhz,
        )
    gtt_free = max(0, c.gtt_total - c.gtt_used)
    detail = (
        f"APU {c.apu}: VRAM carve-out {c.total / GIB:.1f} GiB + GTT {c.gtt_total / GIB:.1f} GiB of system RAM"
        " (the GTT part is shared with the host)"
    )
    return Device(
        name=c.name,
        kind=DeviceKind.GPU,
        total_bytes=c.total + c.gtt_total,
        free_bytes=vram_free + gtt_free,
        vendor=Vendor.AMD,
        backend_name=f"ROCm{index}",
        unified_memory=True,
        host_shared_bytes=gtt_free,
        detail=f"{detail}; {where}" if where else detail,
        memory_clock_mhz=c.memory_clock_mhz,
    )


def _apply_visible(gpus: list[_T], var: str, value: str, problems: list[str]) -> list[_T]:
    out: list[_T] = []
    used: set[int] = set()
    for entry in (e.strip() for e in value.split(",") if value.strip()):
        index = int_or_none(entry, 0, len(gpus) - 1) if is_digits(entry) else None
        if index is None or index in used:
            problems.append(
                f"AMD: {var} entry {entry!r} is not a GPU index fitplan can match: it and the rest are ignored"
            )
            break
        used.add(index)
        out.append(gpus[index])
    return out
