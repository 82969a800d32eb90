"""The estimate beside what llama-server really allocated, device by device and term by term, against the error band
the estimate claimed; and the check saved as JSON in the shape of the recordings (`tests/fixtures/llamacpp/server`).

Terms: weights (llama.cpp's model buffers), K/V cache, recurrent state, output, compute and the projector, each read
from the buffer lines of the log (`server_log`). The band (`estimate.accuracy`): weights exact to the MiB and the
K/V cache and recurrent state exact (to the log's 0.01 MiB) where the recordings of the architecture and
configuration class were all exact; compute within the recorded range of its error, in percent. The output buffer
has no band of its own: it is shown, not judged. "Unaccounted" is what the device really holds for the process
(`hardware.usage`) less llama.cpp's buffers there: the runtime reserve the estimate adds to each GPU should cover it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fitplan.core.base.devices import Device, DeviceKind, Machine
from fitplan.core.base.errors import FitplanError
from fitplan.core.base.numbers import int_or_none, loads_json
from fitplan.core.base.results import MMPROJ_IMAGES_LABEL, DeviceEstimate, Estimate, TermKind
from fitplan.core.estimate.accuracy import AccuracyBand
from fitplan.core.hardware.usage import ProcessUse
from fitplan.core.launch.server_log import (
    BreakdownRow,
    BufferKind,
    BufferLine,
    BuildInfo,
    FailureKind,
    KvCacheLine,
    LogDevice,
    RsCacheLine,
    ServerFailure,
    ServerLog,
    parse_server_log,
)
from fitplan.core.memory.weights import gpu_backend

MIB = 1 << 20
HOST = "Host"
#: The log prints MiB with two decimals: a byte-exact estimate may differ by this much from the printed figure.
PRINT_MIB = 0.01
#: The schema of the recordings this writes (tools/groundtruth/README.md).
SCHEMA = 1

#: The estimate's terms and the buffers they are compared with.
TERM_BUFFERS: tuple[tuple[TermKind, tuple[BufferKind, ...]], ...] = (
    (TermKind.WEIGHTS, (BufferKind.MODEL,)),
    (TermKind.KV, (BufferKind.KV,)),
    (TermKind.RECURRENT, (BufferKind.RS,)),
    (TermKind.OUTPUT, (BufferKind.OUTPUT,)),
    (TermKind.COMPUTE, (BufferKind.COMPUTE,)),
    (TermKind.MMPROJ, (BufferKind.MMPROJ_MODEL, BufferKind.MMPROJ_COMPUTE)),
)


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far the estimate claimed to be: within `low_pct`..`high_pct` percent of the allocation (plus `abs_mib`
    for the log's rounding)."""

    low_pct: float
    high_pct: float
    abs_mib: float
    text: str

    def allows(self, estimate_bytes: int, allocated_bytes: int) -> bool:
        diff = estimate_bytes - allocated_bytes
        slack = self.abs_mib * MIB
        return (
            allocated_bytes * self.low_pct / 100 - slack
            <= diff
            <= allocated_bytes * self.high_pct / 100 + slack
        )


@dataclass(frozen=True, slots=True)
class TermCheck:
    term: TermKind
    estimate_bytes: int
    allocated_bytes: int  # from the log's buffer lines
    tolerance: Tolerance | None  # None: the estimate claimed no band for this term
    label: str = ""  # a part of the term compared on its own ("CPU_REPACK" weights)

    @property
    def name(self) -> str:
        return f"{self.term.value} ({self.label})" if self.label else self.term.value

    @property
    def difference_bytes(self) -> int:
        return self.estimate_bytes - self.allocated_bytes

    @property
    def within(self) -> bool | None:
        """Inside the claimed band; None where none was claimed."""
        if self.tolerance is None:
            return None
        return self.tolerance.allows(self.estimate_bytes, self.allocated_bytes)


@dataclass(frozen=True, slots=True)
class DeviceCheck:
    device: str  # llama.cpp's name ("Host", "CUDA0")
    label: str  # the estimate's name for it ("RTX 4090")
    terms: tuple[TermCheck, ...]
    buffer_types: tuple[str, ...]  # the buffer types llama.cpp allocated there
    used: ProcessUse | None  # what the device really holds for the server, where readable
    reserve_bytes: int  # the estimate's runtime reserve on this device

    @property
    def estimate_bytes(self) -> int:
        return sum(t.estimate_bytes for t in self.terms) + self.reserve_bytes

    @property
    def allocated_bytes(self) -> int:
        return sum(t.allocated_bytes for t in self.terms)

    @property
    def unaccounted_bytes(self) -> int | None:
        """Device usage less llama.cpp's buffers there (None without a usage figure). On the host the mapped model
        file is left out of both: only what the process allocated counts."""
        if self.used is None:
            return None
        mine = self.allocated_bytes
        if self.device == HOST:
            mine -= self.mapped_bytes
        return self.used.used_bytes - mine

    mapped_bytes: int = 0  # host: model buffers mapped from the file (page cache, not allocated)

    def usage_text(self) -> str:
        """What the device really holds for the server, and the unaccounted rest, in one line ("" unknown)."""
        left = self.unaccounted_bytes
        if self.used is None or left is None:
            return ""
        text = (
            f"{self.device} uses {self.used.used_bytes / MIB:.2f} MiB ({self.used.source}); unaccounted (that less "
            f"llama.cpp's buffers) {left / MIB:+.2f} MiB"
        )
        if self.reserve_bytes:
            text += f"; the estimate's runtime reserve there: {self.reserve_bytes / MIB:.2f} MiB"
        if left < 0:
            text += " (below zero: buffers not yet written, such as compute, are not resident)"
        return text


@dataclass(frozen=True, slots=True)
class LaunchCheck:
    devices: tuple[DeviceCheck, ...]
    band_text: str  # the band as the estimate stated it

    @property
    def judged(self) -> tuple[tuple[str, TermCheck], ...]:
        return tuple((d.device, t) for d in self.devices for t in d.terms if t.within is not None)

    @property
    def all_within(self) -> bool:
        """Every term with a claimed band inside it (False when nothing could be judged)."""
        judged = self.judged
        return bool(judged) and all(t.within for _, t in judged)

    @property
    def outside(self) -> tuple[tuple[str, TermCheck], ...]:
        return tuple((d, t) for d, t in self.judged if not t.within)


def _tolerances(band: AccuracyBand | None) -> dict[TermKind, Tolerance]:
    f = band.figures if band is not None else None
    if f is None:
        return {}
    out: dict[TermKind, Tolerance] = {
        TermKind.COMPUTE: Tolerance(f.compute_min_pct, f.compute_max_pct, PRINT_MIB, f.range_text)
    }
    if f.weights_exact == f.cases:
        out[TermKind.WEIGHTS] = Tolerance(0.0, 0.0, 1.0, "exact to the MiB")
    if f.kv_exact == f.cases:
        exact = Tolerance(0.0, 0.0, PRINT_MIB, "exact")
        out[TermKind.KV] = exact
        out[TermKind.RECURRENT] = exact
    return out


def _device_names(est: Estimate) -> dict[str, DeviceEstimate]:
    """llama.cpp's device name of every device of the estimate."""
    names: dict[str, DeviceEstimate] = {}
    gi = 0
    for de in est.devices:
        if de.device.kind is DeviceKind.CPU:
            names[HOST] = de
        else:
            names[gpu_backend(de.device, gi).buffer_type] = de
            gi += 1
    return names


def device_of_buffer(buffer_type: str, gpus: Sequence[str]) -> str:
    """The device a buffer type lives on: a GPU ("CUDA0", "CUDA0_Split"), else the host ("CPU", "CPU_Mapped",
    "CPU_REPACK", "CUDA_Host"; the projector's model size has no buffer type)."""
    for g in sorted(gpus, key=len, reverse=True):
        if buffer_type == g or buffer_type.startswith(g + "_"):
            return g
    if not buffer_type or buffer_type.startswith("CPU") or buffer_type.endswith("_Host"):
        return HOST
    return buffer_type


def _mmproj_device(names: dict[str, DeviceEstimate]) -> str:
    for name, de in names.items():
        if de.bytes_of(TermKind.MMPROJ):
            return name
    return HOST


#: Weights llama.cpp repacks for the CPU sit in a buffer type of their own: compared apart from the rest.
REPACK = "CPU_REPACK"


def _part(kind: TermKind, buffer_type: str) -> str:
    return REPACK if kind is TermKind.WEIGHTS and buffer_type == REPACK else ""


def _labels(kind: TermKind, de: DeviceEstimate | None, bufs: Sequence[BufferLine]) -> tuple[str, ...]:
    """The parts a term is compared in: the weights in CPU_REPACK apart from the rest, where either side has any."""
    if kind is not TermKind.WEIGHTS:
        return ("",)
    repack = any(b.buffer_type == REPACK for b in bufs) or (
        de is not None and any(t.kind is kind and t.label == REPACK for t in de.terms)
    )
    return ("", REPACK) if repack else ("",)


#: The host buffer type of weights mapped from the file (src/llama-model.cpp: with mmap, the CPU buffer type's
#: tensors are a view of the mapped file).
MAPPED = "CPU_Mapped"


def _estimated(de: DeviceEstimate | None, kind: TermKind, label: str, mapped_span: int = 0) -> int:
    """The estimate's bytes for one term and part. With the file mapped (`mapped_span`, the estimate's
    `weights_mapped_span`), the host's mapped buffer is the span of the file a real load maps, not the sum of the
    tensors in it (weights repacked for the CPU lie inside that span and are counted again in CPU_REPACK)."""
    if de is None:
        return 0
    if kind is TermKind.MMPROJ:
        # the projector's growth for its largest image comes after the start, which the log shows
        return sum(t.bytes for t in de.terms if t.kind is kind and t.label != MMPROJ_IMAGES_LABEL)
    if kind is not TermKind.WEIGHTS:
        return de.bytes_of(kind)
    if mapped_span and label != REPACK:
        rest = sum(t.bytes for t in de.terms if t.kind is kind and t.label not in (REPACK, MAPPED))
        return mapped_span + rest
    return sum(t.bytes for t in de.terms if t.kind is kind and (t.label == REPACK) == (label == REPACK))


def compare(
    est: Estimate, log: ServerLog, band: AccuracyBand | None, usage: Sequence[ProcessUse] = ()
) -> LaunchCheck:
    """The estimate beside the log's buffers, per device and term, judged against the band."""
    names = _device_names(est)
    gpus = [n for n in names if n != HOST]
    mm_dev = _mmproj_device(names)
    by_device: dict[str, list[BufferLine]] = {}
    for b in log.buffers:
        dev = mm_dev if b.kind is BufferKind.MMPROJ_MODEL else device_of_buffer(b.buffer_type, gpus)
        by_device.setdefault(dev, []).append(b)
    tol = _tolerances(band)
    used = {u.device: u for u in usage}
    order = [*gpus, HOST] + [d for d in by_device if d not in names]
    checks: list[DeviceCheck] = []
    for dev in order:
        de = names.get(dev)
        bufs = by_device.get(dev, [])
        if de is not None and not de.terms and not bufs:
            continue  # a device the launch does not use
        mapped = est.weights_mapped_span if dev == HOST and any(b.buffer_type == MAPPED for b in bufs) else 0
        checks.append(_device_check(dev, de, bufs, tol, used.get(dev), mapped))
    return LaunchCheck(tuple(checks), band.text if band is not None else "no error band claimed")


def _device_check(
    dev: str,
    de: DeviceEstimate | None,
    bufs: list[BufferLine],
    tol: dict[TermKind, Tolerance],
    use: ProcessUse | None,
    mapped_span: int = 0,
) -> DeviceCheck:
    """One device: each term's estimate beside its buffers, the buffer types seen, the real use."""
    terms: list[TermCheck] = []
    for kind, kinds in TERM_BUFFERS:
        for label in _labels(kind, de, bufs):
            e = _estimated(de, kind, label, mapped_span)
            a = sum(b.bytes for b in bufs if b.kind in kinds and _part(kind, b.buffer_type) == label)
            if e or a:
                terms.append(TermCheck(kind, e, a, tol.get(kind), label))
    mapped = sum(b.bytes for b in bufs if b.kind is BufferKind.MODEL and b.buffer_type.endswith("_Mapped"))
    return DeviceCheck(
        dev,
        de.device.name if de is not None else dev,
        tuple(terms),
        tuple(dict.fromkeys(b.buffer_type for b in bufs if b.buffer_type)),
        use,
        de.bytes_of(TermKind.RESERVE) if de is not None else 0,
        mapped,
    )


# -- the saved check ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SavedCheck:
    """A check read back from its JSON file."""

    build: BuildInfo
    devices: tuple[LogDevice, ...]
    command: tuple[str, ...]
    model: str
    log: ServerLog
    rows: tuple[
        tuple[str, str, float, float, bool | None], ...
    ]  # device, term, estimate MiB, allocated MiB, within
    band_text: str


def _buffers_json(bufs: Sequence[BufferLine]) -> list[dict[str, Any]]:
    return [{"kind": b.kind.value, "buffer_type": b.buffer_type, "mib": b.mib} for b in bufs]


def _kv_json(k: KvCacheLine) -> dict[str, Any]:
    return {
        "cache": k.cache, "size_mib": k.size_mib, "cells": k.cells, "layers": k.layers, "seqs": k.seqs,
        "n_seq_max": k.n_seq_max, "type_k": k.type_k, "k_mib": k.k_mib, "type_v": k.type_v, "v_mib": k.v_mib,
        "layer_devices": [],
    }  # fmt: skip


def _rs_json(r: RsCacheLine) -> dict[str, Any]:
    return {
        "size_mib": r.size_mib, "cells": r.cells, "layers": r.layers, "seqs": r.seqs, "rs_seq": r.rs_seq,
        "type_r": r.type_r, "r_mib": r.r_mib, "type_s": r.type_s, "s_mib": r.s_mib, "type_p": None, "p_mib": None,
        "layer_devices": [],
    }  # fmt: skip


def _resolved_json(log: ServerLog) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in log.resolved:
        n = int_or_none(v, 0, 2**62)
        out[k] = n if n is not None else {"true": True, "false": False}.get(v, v)
    if log.flash_attn_resolved:
        out["flash_attn_resolved"] = log.flash_attn_resolved
    return out


def recorded_command(argv: Sequence[str]) -> list[str]:
    """The command as the recordings write it: the program by name, the model by file name."""
    words = [Path(argv[0]).name, *argv[1:]]
    for i, w in enumerate(words[:-1]):
        if w in ("-m", "--model", "-mm", "--mmproj"):
            words[i + 1] = Path(words[i + 1]).name
    return words


def check_document(
    check: LaunchCheck,
    log: ServerLog,
    build: BuildInfo,
    argv: Sequence[str],
    model: str,
    file_bytes: int | None = None,
    fitplan_version: str = "",
) -> dict[str, Any]:
    """The check as a recording: one llama-server case with its buffers, caches and breakdown, plus the devices,
    the build, the buffer lines as printed and the comparison."""
    main = log.of_kind(BufferKind.MODEL, BufferKind.KV, BufferKind.RS, BufferKind.COMPUTE)
    output = log.of_kind(BufferKind.OUTPUT)
    mm = log.of_kind(BufferKind.MMPROJ_MODEL, BufferKind.MMPROJ_COMPUTE)
    results = {
        "buffers_mib": _buffers_json(main),
        "kv": [_kv_json(k) for k in log.kv],
        "rs": [_rs_json(r) for r in log.rs],
        "output_bytes": None,
        "output_mib": output[0].mib if output else None,
        "mmproj_buffers_mib": [
            {"kind": b.kind.value.removeprefix("mmproj "), "buffer_type": b.buffer_type or None, "mib": b.mib}
            for b in mm
        ],
        "breakdown_mib": [{"row": r.row, "values_mib": list(r.values_mib)} for r in log.breakdown],
        "worst_case": dict(zip(("n_tokens", "n_seqs", "n_outputs"), log.worst_case, strict=True))
        if log.worst_case
        else None,
        "resolved": _resolved_json(log),
    }
    rows = [
        {
            "device": d.device,
            "term": t.name,
            "estimate_mib": round(t.estimate_bytes / MIB, 2),
            "allocated_mib": round(t.allocated_bytes / MIB, 2),
            "band": t.tolerance.text if t.tolerance else None,
            "within": t.within,
        }
        for d in check.devices
        for t in d.terms
    ]
    usage = [
        {
            "device": d.device,
            "used_mib": round(d.used.used_bytes / MIB, 2),
            "source": d.used.source,
            "unaccounted_mib": round((d.unaccounted_bytes or 0) / MIB, 2),
            "reserve_estimate_mib": round(d.reserve_bytes / MIB, 2),
        }
        for d in check.devices
        if d.used is not None
    ]
    return {
        "schema": SCHEMA,
        "llama_cpp": {"commit": build.commit, "build": build.build, "version": build.text},
        "tool": "llama-server",
        "model": {"name": Path(model).name, "path_hint": Path(model).name, "file_bytes": file_bytes},
        "devices": [
            {"name": d.name, "description": d.description, "total_mib": d.total_mib, "free_mib": d.free_mib}
            for d in log.devices
        ],
        "fitplan": fitplan_version,
        "cases": [
            {
                "id": "launch",
                "command": recorded_command(argv),
                "results": results,
                "log_lines": list(log.buffer_lines),
                "check": {
                    "band": check.band_text,
                    "all_within": check.all_within,
                    "rows": rows,
                    "usage": usage,
                },
            }
        ],
    }


def save_check(path: str | Path, doc: dict[str, Any]) -> Path:
    p = Path(path)
    try:
        p.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise FitplanError(f"cannot write the check to {p}: {exc.strerror or exc}") from exc
    return p


def _log_from(case: dict[str, Any], devices: list[dict[str, Any]]) -> ServerLog:
    res = case["results"]
    bufs = [
        BufferLine(BufferKind(b["kind"]), str(b["buffer_type"]), float(b["mib"])) for b in res["buffers_mib"]
    ]
    if res.get("output_mib") is not None:
        bufs.append(BufferLine(BufferKind.OUTPUT, "", float(res["output_mib"])))
    for b in res.get("mmproj_buffers_mib") or []:
        bufs.append(
            BufferLine(BufferKind(f"mmproj {b['kind']}"), str(b["buffer_type"] or ""), float(b["mib"]))
        )
    kv = tuple(
        KvCacheLine(k["cache"], k["size_mib"], k["cells"], k["layers"], k["seqs"], k["n_seq_max"], k["type_k"],
                    k["k_mib"], k["type_v"], k["v_mib"])
        for k in res.get("kv") or []
    )  # fmt: skip
    rs = tuple(
        RsCacheLine(r["size_mib"], r["cells"], r["layers"], r["seqs"], r["rs_seq"], r["type_r"], r["r_mib"],
                    r["type_s"], r["s_mib"])
        for r in res.get("rs") or []
    )  # fmt: skip
    lines = tuple(case.get("log_lines") or ())
    if lines:  # the buffer lines as printed: every buffer with its buffer type, in the log's order
        bufs = list(parse_server_log(lines).buffers)
    return ServerLog(
        buffers=tuple(bufs),
        kv=kv,
        rs=rs,
        devices=tuple(LogDevice(d["name"], d["description"], d["total_mib"], d["free_mib"]) for d in devices),
        breakdown=tuple(
            BreakdownRow(r["row"], tuple(r["values_mib"])) for r in res.get("breakdown_mib") or []
        ),
        loaded=True,
        buffer_lines=lines,
    )


def load_check(path: str | Path) -> SavedCheck:
    """A check saved by `save_check` (or a server recording), read back."""
    p = Path(path)
    try:
        doc = loads_json(p.read_text(encoding="utf-8"))
        case = doc["cases"][0]
        lc = doc["llama_cpp"]
        build = BuildInfo(lc.get("build"), str(lc.get("commit", "")), str(lc.get("version", "")))
        devices = list(doc.get("devices") or [])
        log = _log_from(case, devices)
        rows = tuple(
            (r["device"], r["term"], float(r["estimate_mib"]), float(r["allocated_mib"]), r["within"])
            for r in (case.get("check") or {}).get("rows", [])
        )
        band = str((case.get("check") or {}).get("band", ""))
        return SavedCheck(
            build, log.devices, tuple(case["command"]), str(doc["model"]["name"]), log, rows, band
        )
    except OSError as exc:
        raise FitplanError(f"cannot read the check {p}: {exc.strerror or exc}") from exc
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise FitplanError(f"{p} is not a saved launch check: {type(exc).__name__} {exc}") from exc


def failure_line(failure: ServerFailure, est: Estimate | None) -> str:
    """The failure in one line; for an out-of-memory, the device and what it lacked against what the plan counted
    free there."""
    if failure.kind is not FailureKind.OUT_OF_MEMORY or est is None:
        return failure.message
    names = _device_names(est)
    dev = (
        device_of_buffer(failure.buffer_type, [n for n in names if n != HOST]) if failure.buffer_type else ""
    )
    de = names.get(dev)
    if de is None:
        return failure.message
    planned = de.used_bytes
    free = de.device.free_bytes
    need = f"; the plan put {planned / MIB:.0f} MiB on {de.device.name} with {free / MIB:.0f} MiB free"
    if failure.requested_bytes and failure.requested_bytes > free:
        need += f": the allocation was {(failure.requested_bytes - free) / MIB:.0f} MiB more than was free"
    return failure.message + need


def machine_after_oom(failure: ServerFailure, est: Estimate, machine: Machine) -> Machine | None:
    """The machine as the failed load showed it: the device that could not allocate has at least the failed
    allocation's size less free than the plan counted. None when the failure names no planned device or size."""
    if failure.kind is not FailureKind.OUT_OF_MEMORY or not failure.requested_bytes:
        return None
    names = _device_names(est)
    dev = (
        device_of_buffer(failure.buffer_type, [n for n in names if n != HOST]) if failure.buffer_type else ""
    )
    de = names.get(dev)
    if de is None:
        return None

    def shrunk(d: Device) -> Device:
        if d != de.device:
            return d
        return replace(d, free_bytes=max(0, d.free_bytes - failure.requested_bytes))

    return Machine(tuple(shrunk(g) for g in machine.gpus), shrunk(machine.host))
