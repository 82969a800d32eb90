"""HardwareConfig: which devices to plan for (detected ones to leave out, hypothetical ones to add), saved in settings.

`to_dict` gives plain JSON types; `from_dict` accepts what an older or hand-edited file holds: unknown keys are
ignored and an entry it cannot read is dropped, so a bad settings file never stops the app.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from fitplan.core.base.devices import Device, DeviceKind, Machine, Vendor, host_device
from fitplan.core.hardware.probe import ProbeResult

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class AssumedGpu:
    """A GPU the user plans for without having it: `count` identical devices of `memory_bytes` each."""

    name: str
    memory_bytes: int  # what the GPU can allocate (for Apple: the Metal working set, not the RAM)
    vendor: Vendor = Vendor.GENERIC
    count: int = 1
    unified_ram_bytes: int = (
        0  # a unified-memory machine: the RAM this configuration has (0: a discrete card)
    )
    #: the part of memory_bytes that is host RAM (an APU's GTT); 0 with unified RAM: all of it
    host_shared_bytes: int = 0

    def devices(self) -> tuple[Device, ...]:
        dev = Device(
            name=self.name,
            kind=DeviceKind.GPU,
            total_bytes=self.memory_bytes,
            free_bytes=self.memory_bytes,
            vendor=self.vendor,
            hypothetical=True,
            unified_memory=self.unified_ram_bytes > 0,
            host_shared_bytes=self.shared_bytes,
        )
        return (dev,) * self.count

    @property
    def shared_bytes(self) -> int:
        """The bytes of `memory_bytes` that are host RAM."""
        if self.unified_ram_bytes <= 0:
            return 0
        if 0 < self.host_shared_bytes <= self.memory_bytes:
            return self.host_shared_bytes
        return self.memory_bytes

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "memory_bytes": self.memory_bytes,
            "vendor": self.vendor.value,
            "count": self.count,
            "unified_ram_bytes": self.unified_ram_bytes,
            "host_shared_bytes": self.host_shared_bytes,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> AssumedGpu | None:
        name, mem = data.get("name"), data.get("memory_bytes")
        if not isinstance(name, str) or not isinstance(mem, int) or isinstance(mem, bool) or mem <= 0:
            return None
        vendor_s = data.get("vendor", Vendor.GENERIC.value)
        try:
            vendor = Vendor(str(vendor_s))
        except ValueError:
            vendor = Vendor.GENERIC
        count = data.get("count", 1)
        ram = data.get("unified_ram_bytes", 0)
        shared = data.get("host_shared_bytes", 0)
        return cls(
            name=name,
            memory_bytes=mem,
            vendor=vendor,
            count=count if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else 1,
            unified_ram_bytes=ram if isinstance(ram, int) and not isinstance(ram, bool) and ram > 0 else 0,
            host_shared_bytes=shared
            if isinstance(shared, int) and not isinstance(shared, bool) and shared > 0
            else 0,
        )


@dataclass(frozen=True, slots=True)
class HardwareConfig:
    use_detected: bool = True  # plan for the GPUs found on this machine
    excluded: tuple[str, ...] = ()  # DetectedGpu.key of detected GPUs left out
    hypothetical: tuple[AssumedGpu, ...] = ()  # added after the detected GPUs, in order
    host_ram_bytes: int | None = None  # plan for this much host RAM instead of the detected amount
    schema_version: int = field(default=SCHEMA_VERSION)

    def to_dict(self) -> dict[str, object]:
        return {
            "schema_version": SCHEMA_VERSION,
            "use_detected": self.use_detected,
            "excluded": list(self.excluded),
            "hypothetical": [g.to_dict() for g in self.hypothetical],
            "host_ram_bytes": self.host_ram_bytes,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> HardwareConfig:
        use = data.get("use_detected", True)
        excluded = data.get("excluded", [])
        hyp = data.get("hypothetical", [])
        ram = data.get("host_ram_bytes")
        gpus: list[AssumedGpu] = []
        if isinstance(hyp, list):
            for row in hyp:
                g = AssumedGpu.from_dict(row) if isinstance(row, Mapping) else None
                if g is not None:
                    gpus.append(g)
        return cls(
            use_detected=use if isinstance(use, bool) else True,
            excluded=tuple(x for x in excluded if isinstance(x, str)) if isinstance(excluded, list) else (),
            hypothetical=tuple(gpus),
            host_ram_bytes=ram if isinstance(ram, int) and not isinstance(ram, bool) and ram > 0 else None,
        )

    def machine(self, detected: ProbeResult) -> Machine:
        """The GPUs to plan for (detected ones not excluded, then hypothetical ones) and the host."""
        gpus: list[Device] = []
        if self.use_detected:
            gpus.extend(g.device for g in detected.gpus if g.key not in self.excluded)
        for h in self.hypothetical:
            gpus.extend(h.devices())
        unified = next((h.unified_ram_bytes for h in self.hypothetical if h.unified_ram_bytes > 0), 0)
        if self.host_ram_bytes is not None:
            host = host_device(self.host_ram_bytes)
        elif unified:  # a unified-memory machine planned whole: its RAM is the host's, one pool with the GPU
            host = dataclasses.replace(host_device(unified), hypothetical=True)
        elif detected.host is not None:
            host = host_device(detected.host.total_bytes, detected.host.available_bytes)
        else:
            host = host_device(0, 0)
        return Machine(gpus=tuple(gpus), host=host)
