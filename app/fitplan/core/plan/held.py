"""Whose memory is whose on each device: what other programs hold now (by process where the driver tells it),
what the plan keeps free (the margin and the named reserves), and what is left to the plan.

One rule for every surface: the CLI's "in use by others" lines (`usage.held_by_others`) and the window's device
bars read the same `DeviceHeld`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fitplan.core.base.devices import Device, DeviceKind, Machine
from fitplan.core.hardware.probe import DetectedGpu

if TYPE_CHECKING:
    from fitplan.core.plan.usage import MarginPolicy

__all__ = ["UNLISTED", "DeviceHeld", "Holder", "gpu_holders", "held_memory"]

#: What no listed process accounts for on a GPU: the driver's own reservation, the display, processes the driver
#: does not list (another container's, or without the permission to see them).
UNLISTED = "the driver and unlisted processes"


@dataclass(frozen=True, slots=True)
class Holder:
    """One holder of memory on a device: a process ("firefox (4242)"), what no process accounts for, or a named
    reserve the plan keeps free (`--hold GPU0=2GiB:desktop`)."""

    name: str  # the program ("firefox"), or what holds it
    bytes: int | None  # None: the driver lists the process but cannot tell how much it holds (Windows WDDM)
    detail: str = ""  # the driver's words: "compute", "graphics"
    pid: int = 0  # the process (0: not a process)

    @property
    def label(self) -> str:
        """ "firefox (4242)", "pid 4242" for a process the driver does not name, else the name."""
        if not self.pid:
            return self.name
        return f"{self.name} ({self.pid})" if self.name else f"pid {self.pid}"


@dataclass(frozen=True, slots=True)
class DeviceHeld:
    """One device's memory by owner. With free memory as the basis (`MarginPolicy.use_free`, what llama.cpp's
    --fit measures) what others hold is already outside the plan's capacity: `total = others + free`, and the plan
    may use `free - margin`."""

    total_bytes: int
    free_bytes: int
    holders: tuple[Holder, ...]  # the processes the driver lists, then what none accounts for
    margin_bytes: int  # kept free by the plan, the named reserves included
    reserves: tuple[Holder, ...] = ()  # the named part of the margin
    use_free: bool = True  # False: the plan measures against the total, what others hold is not subtracted

    @property
    def others_bytes(self) -> int:
        """What other programs hold now (total minus free; 0 for a hypothetical device)."""
        return max(0, self.total_bytes - self.free_bytes)

    @property
    def capacity_bytes(self) -> int:
        """What the plan may use, as `MarginPolicy.capacity` computes it."""
        return (self.free_bytes if self.use_free else self.total_bytes) - self.margin_bytes

    def others_lines(self) -> tuple[str, ...]:
        """What other programs hold, in words: the total, then each holder (empty when they hold nothing)."""
        if not self.others_bytes:
            return ()
        return (
            f"held by other programs: {_mib(self.others_bytes)}",
            *(f"  {h.label}: {_mib(h.bytes)}" + (f" ({h.detail})" if h.detail else "") for h in self.holders),
        )

    def lines(self) -> tuple[str, ...]:
        """The owners in words, one a line (empty when nothing is held and nothing kept)."""
        out = list(self.others_lines())
        if self.margin_bytes:
            named = ", ".join(f"{h.name} {_mib(h.bytes)}" for h in self.reserves)
            out.append(
                f"margin kept free: {_mib(self.margin_bytes)}" + (f" (of it {named})" if named else "")
            )
        return tuple(out)


def _mib(n: int | None) -> str:
    if n is None:
        return "an amount the driver does not tell"
    return f"{n / (1 << 30):.2f} GiB" if n >= 10 << 30 else f"{n / (1 << 20):.0f} MiB"


def gpu_holders(g: DetectedGpu) -> tuple[Holder, ...]:
    """Who holds a detected GPU's used memory: each process the driver lists (program and pid, amount), then
    what no listed process accounts for (`UNLISTED`), where any is left."""
    out = [Holder(p.name, p.used_bytes, p.kind, p.pid) for p in g.processes]
    rest = g.used_bytes - sum(p.used_bytes or 0 for p in g.processes)
    if rest > 0:
        out.append(Holder(UNLISTED, rest))
    return tuple(out)


def _device_holders(d: Device, detected: Sequence[DetectedGpu]) -> tuple[Holder, ...]:
    if d.kind is DeviceKind.CPU:
        others = d.total_bytes - d.free_bytes
        return (Holder("other programs and the kernel", others),) if others > 0 else ()
    g = next((x for x in detected if x.device == d), None)
    if g is not None and g.used_bytes:
        return gpu_holders(g)
    others = d.total_bytes - d.free_bytes
    return (Holder(UNLISTED, others),) if others > 0 else ()


def held_memory(
    machine: Machine, detected: Sequence[DetectedGpu], margin: MarginPolicy
) -> tuple[DeviceHeld, ...]:
    """Every device of `machine` (its GPUs in order, then the host) by owner: the processes the driver lists on
    each detected GPU (`detected`, matched by device), the margin and named reserves of `margin`. A hypothetical
    device holds nothing of others'."""
    kept = margin.kept_free(machine)
    out: list[DeviceHeld] = []
    for pos, d in enumerate((*machine.gpus, machine.host)):
        gi = pos if pos < len(machine.gpus) else None
        reserves = tuple(Holder(r.name, r.bytes) for r in margin.reserves_on(d, gi))
        out.append(
            DeviceHeld(
                d.total_bytes,
                d.free_bytes,
                _device_holders(d, detected),
                kept[pos],
                reserves,
                margin.use_free,
            )
        )
    return tuple(out)
