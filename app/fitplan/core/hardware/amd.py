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
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from fitplan.core.base.devices import Device, DeviceKind, Vendor
from fitplan.core.base.numbers import int_or_none, is_digits
from fitplan.core.hardware.probe import DetectedGpu, ProbeResult

AMD_PCI_VENDOR = "0x1002"
_CARD_RE = re.compile(r"^card\d+$")
#: "device:revision" (lower-case hex, no 0x) -> the catalog's name, for boards whose product_name is empty. Navi 31
#: boards share the device id 744c; the revision tells them apart (LACT's database lists 0x1002:0x744C:0xC8 as the
#: RX 7900 XTX). Only pairs with a published lsPCI/LACT record are listed.
PCI_NAMES = {"744c:c8": "Radeon RX 7900 XTX"}
_MCLK_RE = re.compile(r"^\s*\d+:\s*(\d+(?:\.\d+)?)\s*mhz", re.IGNORECASE)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def max_memory_clock(text: str | None) -> float:
    """The highest level of a pp_dpm_mclk listing ("0: 96Mhz *\\n...\\n3: 1249Mhz") in MHz; 0 when unreadable."""
    levels = [float(m.group(1)) for m in map(_MCLK_RE.match, (text or "").splitlines()) if m]
    return max(levels, default=0.0)


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
        found: list[tuple[str, str, int, int]] = []
        clocks: dict[str, tuple[float, str]] = {}
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
            name = _board_name(dev_dir)
            clocks[slot] = (
                max_memory_clock(_read(dev_dir / "pp_dpm_mclk")),
                _read(dev_dir / "mem_info_vram_vendor") or "",
            )
            found.append((slot, name, total, used))
        visible = sorted(found)
        for var in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
            if var in self._env:
                visible = _apply_visible(visible, var, self._env[var], problems)
        gpus: list[DetectedGpu] = []
        for index, (slot, name, total, used) in enumerate(visible):
            mclk, vram_vendor = clocks.get(slot, (0.0, ""))
            detail = ", ".join(
                x for x in (f"PCI {slot}" if slot else "", f"VRAM {vram_vendor}" if vram_vendor else "") if x
            )
            dev = Device(
                name=name,
                kind=DeviceKind.GPU,
                total_bytes=total,
                free_bytes=max(0, total - used),
                vendor=Vendor.AMD,
                backend_name=f"ROCm{index}",
                detail=detail,
                memory_clock_mhz=mclk,
            )
            gpus.append(
                DetectedGpu(device=dev, key=f"pci:{slot}", index=index, pci_bus_id=slot, used_bytes=used)
            )
        return ProbeResult(gpus=tuple(gpus), problems=tuple(problems))


def _apply_visible(
    gpus: list[tuple[str, str, int, int]], var: str, value: str, problems: list[str]
) -> list[tuple[str, str, int, int]]:
    out: list[tuple[str, str, int, int]] = []
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
