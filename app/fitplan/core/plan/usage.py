"""What a plan may use on each device (capacity minus a margin) and what an estimate uses there."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fitplan.core.base.devices import MIB, Device, DeviceKind, Machine, Vendor
from fitplan.core.base.errors import FlagError
from fitplan.core.base.numbers import int_or_none
from fitplan.core.base.results import Estimate
from fitplan.core.hardware.catalog import parse_size
from fitplan.core.hardware.probe import DetectedGpu

__all__ = [
    "DEFAULT_MARGIN_MIB",
    "DeviceUse",
    "MarginPolicy",
    "Reserve",
    "Shortfall",
    "device_label",
    "fits",
    "gib",
    "held_by_others",
    "parse_gpu_margins",
    "parse_reserve",
    "planned_positions",
    "shortfalls",
    "usage_of",
    "within_capacity",
]


#: The default margin per GPU and of host RAM, in MiB: llama.cpp's `--fit-target` default. The one default the CLI's
#: --margin/--host-margin, the saved settings and `MarginPolicy` share.
DEFAULT_MARGIN_MIB = 1024


@dataclass(frozen=True, slots=True)
class Reserve:
    """Memory kept on one device for something else, by name: another program (`--hold GPU0=2GiB:desktop`) or
    another model of a set planned together (`plan.multi`). It is subtracted like a margin."""

    gpu_index: int | None  # the device's position among the machine's GPUs; None = host RAM
    bytes: int
    name: str

    def describe(self) -> str:
        where = "host RAM" if self.gpu_index is None else f"GPU{self.gpu_index}"
        return f"{self.bytes // MIB} MiB of {where} for {self.name}"


def _device_index(word: str, n_gpus: int, what: str) -> int | None:
    """The position of "GPU1", "CUDA1" or "1" (1) among the GPUs; None for "host"."""
    w = word.strip()
    if w.lower() in ("host", "ram", "cpu"):
        return None
    digits = w[3:] if w[:3].upper() in ("GPU",) else w[4:] if w[:4].upper() == "CUDA" else w
    i = int_or_none(digits, 0, 15)
    if i is None:
        raise FlagError(f"{what}: {word!r} is not a device (GPU0, GPU1 ... or host)")
    if i >= n_gpus:
        raise FlagError(
            f"{what}: GPU{i} is not among this machine's {n_gpus} GPU{'s' if n_gpus != 1 else ''}"
        )
    return i


def parse_reserve(text: str, n_gpus: int) -> Reserve:
    """`--hold DEVICE=SIZE[:NAME]`: "GPU0=2GiB:desktop", "host=8GiB:browser", "1=512MiB"."""
    what = f"--hold {text!r}"
    dev, eq, rest = text.partition("=")
    size_text, _, name = rest.partition(":")
    size = parse_size(size_text.strip()) if eq else None
    if size is None:
        raise FlagError(f"{what}: expected DEVICE=SIZE[:NAME], like GPU0=2GiB:desktop")
    return Reserve(_device_index(dev, n_gpus, what), size, name.strip() or "other programs")


def parse_gpu_margins(text: str) -> tuple[int, ...]:
    """`--gpu-margin 2048,256`: MiB kept free on each GPU in order (llama.cpp's `-fitt a,b,...`), in bytes."""
    out = []
    for part in text.split(","):
        n = int_or_none(part.strip(), 0, 1 << 30)
        if n is None:
            raise FlagError(f"--gpu-margin {text!r}: expected MiB per GPU in order, like 2048,256")
        out.append(n * MIB)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class MarginPolicy:
    """How much of each device a plan may use: capacity minus a margin.

    `gpu_margin_bytes` is llama.cpp's `--fit-target` (1024 MiB per device by default); `per_gpu_bytes` overrides it
    per GPU in order, like `-fitt a,b,c`. The host keeps `host_margin_bytes` free. `use_free` measures against
    each device's free memory (what `--fit` does), else against its total. `reserves` keep named amounts on
    given devices on top of the margin (`Reserve`).
    """

    gpu_margin_bytes: int = DEFAULT_MARGIN_MIB * MIB
    use_free: bool = True
    host_margin_bytes: int = DEFAULT_MARGIN_MIB * MIB
    per_gpu_bytes: tuple[int, ...] = ()
    check_host: bool = True
    reserves: tuple[Reserve, ...] = ()

    def base_margin(self, device: Device, gpu_index: int | None) -> int:
        """The margin alone (no reserve) of one device."""
        if device.kind is DeviceKind.CPU or gpu_index is None:
            return self.host_margin_bytes
        if gpu_index < len(self.per_gpu_bytes):
            return self.per_gpu_bytes[gpu_index]
        return self.gpu_margin_bytes

    def reserves_on(self, device: Device, gpu_index: int | None) -> tuple[Reserve, ...]:
        """The named reserves of one device (the host's when `gpu_index` is None or the device is the host)."""
        gi = None if device.kind is DeviceKind.CPU else gpu_index
        return tuple(r for r in self.reserves if r.gpu_index == gi)

    def margin(self, device: Device, gpu_index: int | None) -> int:
        """What a plan keeps free on one device: its margin plus its named reserves."""
        return self.base_margin(device, gpu_index) + sum(r.bytes for r in self.reserves_on(device, gpu_index))

    def capacity(self, device: Device, gpu_index: int | None) -> int:
        """The bytes a plan may use on `device`."""
        base = device.free_bytes if self.use_free else device.total_bytes
        return base - self.margin(device, gpu_index)

    def kept_free(self, machine: Machine) -> tuple[int, ...]:
        """The bytes kept free on each device of `machine` (its GPUs in order, then the host), as `capacity`
        applies them; 0 on the host when it is not checked. What a front end draws as each device's margin."""
        gpus = tuple(self.margin(d, i) for i, d in enumerate(machine.gpus))
        return (*gpus, self.margin(machine.host, None) if self.check_host else 0)

    def describe(self) -> str:
        """The margins in words, as every verdict states them."""
        basis = "free" if self.use_free else "total"
        gpu = f"{self.gpu_margin_bytes // MIB} MiB per GPU"
        if self.per_gpu_bytes:
            gpu = "per GPU " + ",".join(str(b // MIB) for b in self.per_gpu_bytes) + " MiB"
        host = (
            f"{self.host_margin_bytes // MIB} MiB of host RAM" if self.check_host else "host RAM not checked"
        )
        text = f"{gpu} and {host} kept free ({basis} memory)"
        if self.reserves:
            text += "; reserved: " + ", ".join(r.describe() for r in self.reserves)
        return text


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """One device of an estimate against its capacity."""

    device: Device
    label: str
    used_bytes: int
    capacity_bytes: int
    checked: bool = True  # False: the host when MarginPolicy.check_host is off
    gpu_index: int | None = None  # the device's position among the machine's GPUs (None: the host)

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes

    @property
    def fits(self) -> bool:
        return within_capacity(self.used_bytes, self.capacity_bytes, self.checked)


def within_capacity(used_bytes: int, capacity_bytes: int, checked: bool = True) -> bool:
    """The one "fits" of a device: within capacity; a device that holds nothing always fits (its margin may exceed
    its free memory); an unchecked one (the host when MarginPolicy.check_host is off) too."""
    return not checked or used_bytes == 0 or used_bytes <= capacity_bytes


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A device the plan overfills, and by how much."""

    label: str
    used_bytes: int
    capacity_bytes: int

    @property
    def over_bytes(self) -> int:
        return self.used_bytes - self.capacity_bytes

    def describe(self) -> str:
        return (
            f"{self.label} short by {gib(self.over_bytes)} "
            f"(needs {gib(self.used_bytes)}, may use {gib(self.capacity_bytes)})"
        )


def gib(n: int) -> str:
    """Bytes for people: MiB below 10 GiB (precise enough to act on), GiB above."""
    if abs(n) >= 10 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    return f"{n / MIB:.0f} MiB"


def device_label(device: Device, gpu_index: int | None) -> str:
    """How plans name a device: llama.cpp's name when known ("CUDA0", "RPC0[host:port]"), else GPUi (name)."""
    if device.kind is DeviceKind.CPU or gpu_index is None:
        return "host RAM"
    if device.backend_name and (device.vendor is Vendor.RPC or not device.hypothetical):
        return device.backend_name
    return f"GPU{gpu_index} ({device.name})" if device.name else f"GPU{gpu_index}"


def usage_of(est: Estimate, machine: Machine, margin: MarginPolicy) -> tuple[DeviceUse, ...]:
    """Every device of `est` against its capacity. The estimate lists the machine's GPUs in order, then the host:
    a device is its position (two identical cards are two devices)."""
    out: list[DeviceUse] = []
    n_gpu = len(machine.gpus)
    for pos, de in enumerate(est.devices):
        d = de.device
        gi = pos if pos < n_gpu and d.kind is not DeviceKind.CPU else None
        checked = margin.check_host or gi is not None
        out.append(DeviceUse(d, device_label(d, gi), de.used_bytes, margin.capacity(d, gi), checked, gi))
    return tuple(out)


def planned_positions(est: Estimate) -> tuple[int, ...]:
    """The positions in `est.devices` of the devices the plan uses: the GPUs llama-server is given (`-dev`; every
    GPU without it), each shown even when it holds nothing (no layers), and the host. A GPU left out by -dev is not
    planned."""
    from fitplan.core.memory.weights import (
        active_gpu_positions,
    )  # the settings file reads this module at start

    gpus = tuple(de.device for de in est.devices[:-1])
    machine = Machine(gpus, est.devices[-1].device)
    return (*active_gpu_positions(est.settings, machine), len(gpus))


def fits(usage: Sequence[DeviceUse]) -> bool:
    return all(u.fits for u in usage)


def shortfalls(usage: Sequence[DeviceUse]) -> tuple[Shortfall, ...]:
    over = [u for u in usage if not u.fits]
    over.sort(key=lambda u: u.capacity_bytes - u.used_bytes)
    return tuple(Shortfall(u.label, u.used_bytes, u.capacity_bytes) for u in over)


def held_by_others(machine: Machine, detected: Sequence[DetectedGpu]) -> tuple[str, ...]:
    """Per GPU of `machine` that was detected and holds memory: who holds it, by process (the driver's list: pid,
    program, amount) and what no process accounts for (the driver, the display). With free memory as the basis
    (`MarginPolicy.use_free`) this memory is already outside what a plan may use."""
    from fitplan.core.plan.held import UNLISTED, gpu_holders

    lines: list[str] = []
    for i, d in enumerate(machine.gpus):
        g = next((x for x in detected if x.device == d), None)
        if g is None or not g.used_bytes:
            continue
        by_pid = {p.pid: p for p in g.processes}
        parts = [
            by_pid[h.pid].describe() if h.pid in by_pid else f"{UNLISTED} {gib(h.bytes or 0)}"
            for h in gpu_holders(g)
        ]
        lines.append(f"{device_label(d, i)}: {gib(g.used_bytes)} in use by others: " + "; ".join(parts))
    return tuple(lines)
