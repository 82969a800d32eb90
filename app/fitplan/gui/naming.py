"""How the window names devices: by their names, told apart by position where two are the same card."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from fitplan.core.base.devices import Device, DeviceKind


def device_names(devices: Sequence[Device]) -> list[str]:
    """Each device's name; GPUs that share a name (two identical cards) get their position too: "RTX 3090 (GPU1)"."""
    counts = Counter(d.name for d in devices if d.kind is DeviceKind.GPU)
    out: list[str] = []
    gpu = 0
    for d in devices:
        if d.kind is DeviceKind.GPU:
            out.append(f"{d.name} (GPU{gpu})" if counts[d.name] > 1 else d.name)
            gpu += 1
        else:
            out.append(d.name)
    return out
