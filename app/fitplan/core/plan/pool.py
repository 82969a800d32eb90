"""Memory that two devices share: one pool counted once.

A GPU with unified memory (Apple Silicon, NVIDIA GB10 and Jetson, Intel iGPUs) or an AMD APU's GTT allocates from
host RAM: every byte it uses beyond its dedicated part (`Device.host_shared_bytes`) is a byte the host no longer
has. `pooled` adds that spill to the host's use, so a plan never counts the same bytes once as GPU memory and again
as free host RAM. A discrete card's VRAM spills nothing.

On Windows a discrete GPU that runs out of VRAM does not fail: the driver puts the rest in shared GPU memory
(system RAM, `Device.os_shared_bytes`) and the model runs at a fraction of the speed. `shared_spill_notes` says so
for every GPU a plan overfills.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fitplan.core.base.devices import Machine
from fitplan.core.base.results import Estimate
from fitplan.core.plan.usage import DeviceUse, MarginPolicy, gib, usage_of

__all__ = ["host_spill_bytes", "memory_notes", "pooled", "pooled_usage", "shared_spill_notes"]


def host_spill_bytes(usage: Sequence[DeviceUse]) -> int:
    """The bytes the GPUs of `usage` take out of host RAM."""
    return sum(u.device.host_spill(u.used_bytes) for u in usage if u.gpu_index is not None)


def pooled(usage: Sequence[DeviceUse]) -> tuple[DeviceUse, ...]:
    """`usage` with the host charged for what the GPUs take out of host RAM (unchanged without such a GPU)."""
    spill = host_spill_bytes(usage)
    if spill == 0:
        return tuple(usage)
    return tuple(
        dataclasses.replace(u, used_bytes=u.used_bytes + spill) if u.gpu_index is None else u for u in usage
    )


def pooled_usage(est: Estimate, machine: Machine, margin: MarginPolicy) -> tuple[DeviceUse, ...]:
    """Every device of `est` against its capacity, host RAM shared with unified GPUs counted once."""
    return pooled(usage_of(est, machine, margin))


def shared_spill_notes(usage: Sequence[DeviceUse]) -> tuple[str, ...]:
    """One line per GPU whose use exceeds its memory where Windows would spill it into shared GPU memory."""
    out: list[str] = []
    for u in usage:
        d = u.device
        over = u.used_bytes - d.free_bytes
        if u.gpu_index is None or d.os_shared_bytes <= 0 or d.unified_memory or over <= 0:
            continue
        out.append(
            f"{u.label}: {gib(over)} over its dedicated memory: Windows would put that in shared GPU memory "
            f"(system RAM, {gib(d.os_shared_bytes)}) instead of failing, and the model would run several times "
            "slower; lower -ngl or the context"
        )
    return tuple(out)


def memory_notes(usage: Sequence[DeviceUse]) -> tuple[str, ...]:
    """What the plan's device table cannot say: the host RAM a GPU takes (counted once, in the host's use), and
    the GPUs Windows would spill into shared memory."""
    out: list[str] = []
    for u in usage:
        spill = u.device.host_spill(u.used_bytes) if u.gpu_index is not None else 0
        if spill > 0:
            out.append(
                f"{u.label} takes {gib(spill)} of host RAM (shared memory: one pool with the host); "
                "host RAM's use counts it"
            )
    return (*out, *shared_spill_notes(usage))
