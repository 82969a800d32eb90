"""The one machine builder of the CLI and the window: detected GPUs, `--assume-gpu` specs, `--host-ram`, RPC devices.

Every device is its position in the machine: "2x RTX 3090" gives two GPUs (CUDA0 and CUDA1) even though both are
the same `Device` value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from fitplan.core import hardware
from fitplan.core.base.devices import Device, DeviceKind, Machine, Vendor
from fitplan.core.base.errors import FitplanError, FlagError
from fitplan.core.hardware import HardwareConfig, parse_assumed_gpu
from fitplan.core.hardware.catalog import MAX_ASSUMED_GPUS, parse_size
from fitplan.core.hardware.probe import ProbeResult

__all__ = ["MachineRequest", "build_machine", "parse_host_ram"]


@dataclass(frozen=True, slots=True)
class MachineRequest:
    """What the user said about the machine."""

    assume_gpus: tuple[str, ...] = ()  # --assume-gpu specs: plan for these instead of the detected GPUs
    host_ram: str | None = None  # --host-ram SIZE: instead of the detected host RAM
    rpc: tuple[Device, ...] = ()  # RPC devices, listed first (llama.cpp enumerates them first)
    no_gpu: bool = False  # -dev none


def parse_host_ram(text: str) -> int:
    ram = parse_size(text)
    if ram is None or ram <= 0:
        raise FlagError(f"--host-ram {text!r}: not a memory size like 64GiB")
    return ram


def build_machine(
    req: MachineRequest, detect: Callable[[], ProbeResult] | None = None
) -> tuple[Machine, tuple[str, ...]]:
    """The machine to plan for, and what the probes could not read (one line each)."""
    ram = parse_host_ram(req.host_ram) if req.host_ram is not None else None
    try:
        hyp = tuple(parse_assumed_gpu(s) for s in req.assume_gpus)
    except FitplanError:
        raise
    except ValueError as exc:
        raise FlagError(f"--assume-gpu: {exc}") from None
    use_detected = not req.assume_gpus and not req.no_gpu
    if use_detected or detect is not None:
        detected = (detect or hardware.detect_hardware)()
    elif ram is None:
        # only host RAM is needed: the GPU probes (and what they could not read) do not matter here
        detected = ProbeResult(host=hardware.HostMemoryProbe().read())
    else:
        detected = ProbeResult()
    config = HardwareConfig(
        use_detected=use_detected, hypothetical=() if req.no_gpu else hyp, host_ram_bytes=ram
    )
    machine = config.machine(detected)
    total = len(req.rpc) + len(machine.gpus)
    if (
        total > MAX_ASSUMED_GPUS
    ):  # llama_max_devices(): a total over every spec, --rpc and --assume-gpu together
        given = " and ".join(
            x for x in (f"{len(req.rpc)} from --rpc" if req.rpc else "", f"{len(machine.gpus)} GPUs") if x
        )
        raise FlagError(f"at most {MAX_ASSUMED_GPUS} devices in all (llama.cpp's device limit); got {given}")
    return Machine((*req.rpc, *machine.gpus), machine.host), tuple(detected.problems)


def machine_of(assume: Sequence[str], host_ram: str | None) -> Machine:
    """`build_machine` for the plain case: assumed GPUs (else the detected ones) and host RAM."""
    return build_machine(MachineRequest(tuple(assume), host_ram))[0]


def hypothetical_gpu(name: str, total_bytes: int, vendor: str, host_shared_bytes: int = 0) -> Device:
    """A GPU the user plans for without having it: entirely free; an unknown vendor name is a generic GPU;
    `host_shared_bytes` of it are host RAM (a unified-memory machine, an APU's GTT: one pool with the host)."""
    try:
        v = Vendor(vendor)
    except ValueError:
        v = Vendor.GENERIC
    shared = max(0, min(host_shared_bytes, total_bytes))
    return Device(
        name,
        DeviceKind.GPU,
        total_bytes,
        total_bytes,
        v,
        hypothetical=True,
        unified_memory=shared > 0,
        host_shared_bytes=shared,
    )


def planned_machine(gpus: Sequence[Device], host: Device, host_ram_bytes: int | None = None) -> Machine:
    """The machine to plan for: the chosen GPUs in order, and this host or a hypothetical RAM size (entirely free)."""
    if host_ram_bytes is not None and host_ram_bytes > 0:
        host = replace(host, total_bytes=host_ram_bytes, free_bytes=host_ram_bytes, hypothetical=True)
    return Machine(tuple(gpus), host)
