"""The hardware figures the speed model divides by: memory bandwidth, matrix throughput and the host link per device.

Where each number comes from, in order:

* a GPU: what its driver reported (`Device.memory_bandwidth`, `Device.link_bandwidth`: NVML's bus width x max
  memory clock and PCIe generation x width), else the figures of its catalog name in
  `fitplan/data/gpu_speed.json` (vendor specifications, each with its source), else a stated default;
* the host: `--host-bandwidth` when given, else the configured speed of the memory modules where the firmware
  tables are readable (two channels assumed), else a stated default per platform.

Every figure that is not the driver's or the user's is named in `assumptions`, so the output can say it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from fitplan.core.base.devices import Device, DeviceKind, Machine, Vendor
from fitplan.core.base.files import package_text
from fitplan.core.base.numbers import json_real, loads_json
from fitplan.core.hardware.catalog import AssumedGpuError, load_catalog, normalise_name

#: Where the GPU figures are, inside the package.
DATA_PATH = "data/gpu_speed.json"

GB = 1e9
TFLOPS = 1e12

#: A GPU neither the driver nor the catalog knows: a mid-range card of the catalog (RTX 4060 Ti: 288 GB/s, 88 TFLOPS).
UNKNOWN_GPU_BANDWIDTH = 288 * GB
UNKNOWN_GPU_FLOPS = 88 * TFLOPS
#: The host link when the driver does not say: PCIe 4.0 x16, one direction (16 lanes x 1.969 GB/s).
DEFAULT_LINK_BANDWIDTH = 31.5 * GB
#: Host RAM bandwidth by platform when nothing better is known: two 64-bit channels of DDR5-5600 on x86-64
#: (2 x 8 bytes x 5600 MT/s), of LPDDR5-6400 on 64-bit ARM Linux boards, and what llama.cpp's CPU backend can use
#: on a Mac (the chip's unified bandwidth, from the catalog, when the GPU is known).
DEFAULT_HOST_BANDWIDTH = {"x86_64": 89.6 * GB, "arm64": 102.4 * GB}
FALLBACK_HOST_BANDWIDTH = 51.2 * GB  # two channels of DDR4-3200
#: Dense matrix throughput of the host's CPU when it computes (no GPU, or ops below the offload batch): a
#: desktop 8-core AVX2 CPU at 3.5 GHz, 2 FMA x 8 lanes x 2 = 32 FP32 FLOP per clock per core.
DEFAULT_HOST_FLOPS = 0.9 * TFLOPS
#: SMBIOS type 17 (memory device) tables, readable where the firmware tables are exported to users.
DMI_ENTRIES = Path("/sys/firmware/dmi/entries")


@dataclass(frozen=True, slots=True)
class GpuFigures:
    name: str
    bandwidth_gbs: float
    fp16_tflops: float
    source: str
    aliases: tuple[str, ...] = ()
    bus_bits: int = 0  # memory bus width, where the source states it
    int8_tops: float = 0.0  # dp4a int8 peak of GPUs without tensor cores (ggml-cuda's mmq on them); 0 = none
    memory: str = ""  # memory type ("GDDR6", "HBM2e"...), where the source states it


@dataclass(frozen=True, slots=True)
class SpeedTable:
    """The figures of `gpu_speed.json`, found by any spelling of a catalog name."""

    gpus: tuple[GpuFigures, ...]

    @classmethod
    def from_json(cls, text: str) -> SpeedTable:
        doc = loads_json(text)
        rows = []
        for r in doc["gpus"]:
            rows.append(
                GpuFigures(
                    name=str(r["name"]),
                    bandwidth_gbs=json_real(r["bandwidth_gbs"]),
                    fp16_tflops=json_real(r["fp16_tflops"]),
                    source=str(r["source"]),
                    aliases=tuple(str(a) for a in r.get("aliases", ())),
                    bus_bits=round(json_real(r.get("bus_bits", 0), 0, 1 << 16)),
                    memory=str(r.get("memory", "")),
                    int8_tops=json_real(r.get("int8_tops", 0.0)),
                )
            )
        return cls(tuple(rows))

    def find(self, name: str) -> GpuFigures | None:
        """The figures of the GPU called `name`: its own name or alias, else its catalog entry's, else None."""
        key = normalise_name(_without_size(name))
        for g in self.gpus:
            if key in {normalise_name(g.name), *(normalise_name(a) for a in g.aliases)}:
                return g
        try:
            hit = load_catalog().find(_without_size(name))
        except AssumedGpuError:  # an ambiguous name: no figures rather than a guess
            return None
        if hit is None:
            return None
        return next((g for g in self.gpus if g.name == hit.name), None)


_SIZE_SUFFIX = re.compile(r"\s+\d+(?:\.\d+)?\s*(?:GiB|GB)$", re.IGNORECASE)


def _without_size(name: str) -> str:
    """ "RTX 3060 12 GiB" (a catalog configuration's name) -> "RTX 3060"."""
    return _SIZE_SUFFIX.sub("", name.strip())


@cache
def load_speed_table() -> SpeedTable:
    text = package_text(DATA_PATH)
    return SpeedTable.from_json(text)


@dataclass(frozen=True, slots=True)
class DeviceFigures:
    """What one device can move and compute, in bytes/s and FLOP/s, with where each came from."""

    name: str
    bandwidth: float  # memory bandwidth, bytes/s
    flops: float  # dense FP16 matrix throughput (GPU) or FP32 (host CPU), FLOP/s
    link: float  # host <-> device link, bytes/s, one direction (0 for the host itself)
    source: str  # one line
    #: the peak of quantized-weight matrix products where it differs from `flops` (dp4a int8 on GPUs without
    #: tensor cores); 0 = `flops`
    quant_flops: float = 0.0

    @property
    def q_flops(self) -> float:
        return self.quant_flops or self.flops


@dataclass(frozen=True, slots=True)
class MachineFigures:
    gpus: tuple[DeviceFigures, ...]  # in machine.gpus order
    host: DeviceFigures
    assumptions: tuple[str, ...] = ()


#: Data transfers per cycle of the memory clock amdgpu reports in pp_dpm_mclk, by memory type. GDDR6: 16 (the
#: RX 7900 XTX's top level reads 1249 MHz for its 20 Gbps modules: 384 bits / 8 x 1249 MHz x 16 = 959 GB/s, the
#: figure LACT prints for it). Types without a published pair of clock and data rate are left out: the catalog's
#: bandwidth is used for them.
AMDGPU_MCLK_TRANSFERS = {"GDDR6": 16}


def clock_bandwidth(device: Device, known: GpuFigures | None) -> float:
    """Bytes/s from a driver-reported memory clock and the catalog's bus width and memory type; 0 when either is
    missing or the memory type's transfers per clock are not known."""
    if device.memory_clock_mhz <= 0 or known is None or known.bus_bits <= 0:
        return 0.0
    per_clock = AMDGPU_MCLK_TRANSFERS.get(known.memory, 0)
    return known.bus_bits / 8 * device.memory_clock_mhz * 1e6 * per_clock


def gpu_figures(device: Device, table: SpeedTable | None = None) -> tuple[DeviceFigures, str | None]:
    """The figures of one GPU and, when some are not the driver's or the catalog's, the assumption in words."""
    tab = table if table is not None else load_speed_table()
    known = tab.find(device.name)
    link = device.link_bandwidth or DEFAULT_LINK_BANDWIDTH
    note = None
    from_clock = clock_bandwidth(device, known) if device.memory_bandwidth <= 0 else 0.0
    if from_clock > 0 and known is not None:
        src = (
            f"{from_clock / GB:.0f} GB/s from the driver's memory clock ({device.memory_clock_mhz:.0f} MHz) and "
            f"{known.name}'s {known.bus_bits}-bit {known.memory} bus"
        )
        return DeviceFigures(
            device.name, from_clock, known.fp16_tflops * TFLOPS, link, src, known.int8_tops * TFLOPS
        ), None
    if device.memory_bandwidth > 0:
        flops = known.fp16_tflops * TFLOPS if known else UNKNOWN_GPU_FLOPS
        src = f"{device.memory_bandwidth / GB:.0f} GB/s from the driver"
        if known is None:
            note = f"a GPU not in the speed catalog: matrix throughput {UNKNOWN_GPU_FLOPS / TFLOPS:.0f} TFLOPS assumed"
        int8 = known.int8_tops * TFLOPS if known else 0.0
        return DeviceFigures(device.name, device.memory_bandwidth, flops, link, src, int8), note
    if known is not None:
        src = f"{known.name}: {known.bandwidth_gbs:g} GB/s, {known.fp16_tflops:g} TFLOPS ({known.source})"
        return DeviceFigures(
            device.name,
            known.bandwidth_gbs * GB,
            known.fp16_tflops * TFLOPS,
            link,
            src,
            known.int8_tops * TFLOPS,
        ), None
    note = (
        f"a GPU not in the speed catalog: {UNKNOWN_GPU_BANDWIDTH / GB:.0f} GB/s and "
        f"{UNKNOWN_GPU_FLOPS / TFLOPS:.0f} TFLOPS assumed (a mid-range card)"
    )
    return DeviceFigures(device.name, UNKNOWN_GPU_BANDWIDTH, UNKNOWN_GPU_FLOPS, link, "assumed"), note


def default_host_bandwidth(machine: Machine) -> tuple[float, str]:
    """The host's RAM bandwidth when the user gave none: an Apple chip's unified bandwidth, the modules' speed
    where readable, else the platform's default. Returns (bytes/s, how it was found)."""
    apple = next((g for g in machine.gpus if g.vendor is Vendor.APPLE), None)
    if apple is not None:
        known = load_speed_table().find(apple.name)
        if known is not None:
            return (
                known.bandwidth_gbs * GB,
                f"host RAM {known.bandwidth_gbs:g} GB/s (the chip's unified memory)",
            )
    mts = dmi_memory_speed()
    if mts:
        bw = 2 * 8 * mts * 1e6
        return (
            bw,
            f"host RAM {bw / GB:.1f} GB/s assumed (two channels of {mts} MT/s modules; --host-bandwidth to set)",
        )
    cpu = _machine().lower()
    cpu = "arm64" if cpu in ("aarch64", "arm64") else cpu
    bw = DEFAULT_HOST_BANDWIDTH.get(cpu, FALLBACK_HOST_BANDWIDTH)
    return (
        bw,
        f"host RAM {bw / GB:.1f} GB/s assumed (a default for {cpu or 'this platform'}; --host-bandwidth to set)",
    )


def _machine() -> str:
    """`platform.machine()`, which is `os.uname().machine` wherever there is `os.uname` (not importing `platform`
    and its regular expressions)."""
    if hasattr(os, "uname"):
        return os.uname().machine
    import platform

    return platform.machine()


def dmi_memory_speed(root: Path = DMI_ENTRIES) -> int:
    """The configured speed (MT/s) of the populated memory modules from SMBIOS type 17 tables, 0 when unreadable.

    SMBIOS 3.x, type 17: byte 0x0C-0x0D size (0 = empty slot), 0x15-0x16 speed, 0x20-0x21 configured speed."""
    speeds: list[int] = []
    try:
        entries = sorted(root.glob("17-*/raw"))
    except OSError:
        return 0
    for raw_path in entries[:64]:
        try:
            raw = raw_path.read_bytes()[:64]
        except OSError:
            continue
        if len(raw) < 0x17 or int.from_bytes(raw[0x0C:0x0E], "little") in (0, 0xFFFF):
            continue
        configured = int.from_bytes(raw[0x20:0x22], "little") if len(raw) >= 0x22 else 0
        speed = configured or int.from_bytes(raw[0x15:0x17], "little")
        if 0 < speed < 20000:
            speeds.append(speed)
    return min(speeds) if speeds else 0


def machine_figures(machine: Machine, host_bandwidth: float | None = None) -> MachineFigures:
    """The figures of every device of `machine` (`host_bandwidth` in bytes/s overrides the host's RAM)."""
    notes: list[str] = []
    gpus = []
    for d in machine.gpus:
        fig, note = gpu_figures(d)
        gpus.append(fig)
        if note and note not in notes:
            notes.append(note)
    if any(d.kind is DeviceKind.GPU and not d.link_bandwidth for d in machine.gpus):
        notes.append(
            f"PCIe link {DEFAULT_LINK_BANDWIDTH / GB:.1f} GB/s assumed (4.0 x16) where the driver does not say"
        )
    if host_bandwidth:
        bw, how = host_bandwidth, f"host RAM {host_bandwidth / GB:.1f} GB/s (--host-bandwidth)"
    else:
        bw, how = default_host_bandwidth(machine)
    notes.append(how)
    host = DeviceFigures(machine.host.name, bw, DEFAULT_HOST_FLOPS, 0.0, how)
    return MachineFigures(tuple(gpus), host, tuple(notes))
