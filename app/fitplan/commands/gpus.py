"""`fitplan gpus [--json]`: the GPUs and host RAM found on this machine, and why anything was not found."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from fitplan.commands import SUMMARIES
from fitplan.commands import _output as out
from fitplan.core.base.devices import GIB
from fitplan.core.hardware import DetectedGpu, DeviceProbe, ProbeResult, detect_hardware

EPILOG = """examples:
  fitplan gpus                 GPUs (memory, driver, compute capability, PCI bus), host RAM, and what was not found
  fitplan gpus --json          the same as one JSON document
  CUDA_VISIBLE_DEVICES=1,0 fitplan gpus    the GPUs and order llama.cpp's CUDA backend would see
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "gpus",
        help=SUMMARIES["gpus"],
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=run, accepts_extra=False)


def gpu_to_dict(g: DetectedGpu) -> dict[str, object]:
    d = g.device
    return {
        "name": d.name,
        "backend_name": d.backend_name,
        "vendor": d.vendor.value,
        "total_bytes": d.total_bytes,
        "free_bytes": d.free_bytes,
        "used_bytes": g.used_bytes,
        "other_process_bytes": g.other_process_bytes,
        "other_processes": g.other_processes,
        "processes": [dataclasses.asdict(p) for p in g.processes],
        "unified_memory": d.unified_memory,
        "host_shared_bytes": d.host_shared_bytes,
        "os_shared_bytes": d.os_shared_bytes,
        "key": g.key,
        "uuid": g.uuid,
        "pci_bus_id": g.pci_bus_id,
        "driver_version": g.driver_version,
        "runtime_version": g.runtime_version,
        "compute_capability": g.compute_capability,
        "mig_parent": g.mig_parent,
        "detail": d.detail,
        "notes": list(g.notes),
    }


def result_to_dict(r: ProbeResult) -> dict[str, object]:
    host = (
        {
            "total_bytes": r.host.total_bytes,
            "available_bytes": r.host.available_bytes,
            "source": r.host.source,
            "hugepages_free_bytes": r.host.hugepages_free_bytes,
            "unlimited_available_bytes": r.host.unlimited_available_bytes,
        }
        if r.host is not None
        else None
    )
    return {"gpus": [gpu_to_dict(g) for g in r.gpus], "host": host, "problems": list(r.problems)}


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def format_text(r: ProbeResult) -> str:
    lines: list[str] = []
    if not r.gpus:
        lines.append("No GPU found.")
    for g in r.gpus:
        d = g.device
        label = d.backend_name or d.name
        lines.append(f"{label}: {d.name}  {_gib(d.free_bytes)} free of {_gib(d.total_bytes)}")
        if g.other_processes:
            lines.append(f"    {g.other_processes} other process(es) hold {_gib(g.other_process_bytes)}")
            lines.extend(f"      {p.describe()}" for p in g.processes)
        if d.detail:
            lines.append(f"    {d.detail}")
        lines.extend(f"    note: {n}" for n in g.notes)
    if r.host is not None:
        limited = f" (limited by {r.host.source.split(' + ', 1)[1]})" if " + cgroup" in r.host.source else ""
        lines.append(
            f"Host RAM: {_gib(r.host.available_bytes)} available of {_gib(r.host.total_bytes)}{limited}"
        )
    else:
        lines.append("Host RAM: unknown")
    lines.extend(f"why: {p}" for p in r.problems)
    return "\n".join(lines)


def run(args: argparse.Namespace, extra: list[str], probes: tuple[DeviceProbe, ...] | None = None) -> int:
    result = detect_hardware(probes)
    if args.json:
        out.print_json(result_to_dict(result))
    else:
        print(format_text(result))
    return 0
