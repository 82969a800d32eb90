"""llama.cpp's own dry run (`llama-fit-params`) next to the estimate: the flags it is given, its output read back,
and the comparison per device and term. `fitplan verify` and the window's Verify button both run it through here.

llama-fit-params is run with the same memory flags, `-fitp on -v`; its per-device memory is read from stdout
(`DEVICE model context compute` in MiB) and stderr (the memory breakdown table, with extra rows such as CPU_REPACK,
and the `compute buffer size` lines). The estimate is made for the same program (`Tool.FIT_PARAMS`: its logits
reservation is n_batch, its context is not unified). A model that is not whole on disk (a URL, a Hub model, an
interrupted download, a header-only file) is given as a sparse copy: each shard's header, then a hole up to its
declared size, which the dry run loads as the real file since it reads no tensor data.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fitplan.core.base.devices import MIB, DeviceKind, Machine
from fitplan.core.base.errors import FitplanError
from fitplan.core.base.launch_settings import Tool
from fitplan.core.base.numbers import real_or_none
from fitplan.core.base.results import Estimate, TermKind
from fitplan.core.estimate.estimator import estimate
from fitplan.core.gguf.header import GGUFHeader, ModelFiles
from fitplan.core.gguf.remote import hub_token, is_url
from fitplan.core.gguf.sparse_copy import write_sparse_copy
from fitplan.core.launch.flags import _BY_NAME, parse_flags
from fitplan.core.memory.weights import CpuFeatures
from fitplan.core.model.profile import ModelProfile

__all__ = [
    "BINARY",
    "SERVER_ONLY_KEYS",
    "Comparison",
    "Measured",
    "Row",
    "compare",
    "compare_rows",
    "detect_cpu_features",
    "find_binary",
    "fit_params_args",
    "model_for_binary",
    "parse_output",
    "summary",
]

BINARY = "llama-fit-params"
#: Memory flags llama-fit-params does not register (server-only in common/arg.cpp): not passed on.
SERVER_ONLY_KEYS = frozenset(
    {
        "kv_unified", "no_kv_unified", "cache_ram_mib", "ctx_checkpoints", "embedding", "reranking", "mmproj_path",
        "no_mmproj_offload", "mmproj_offload", "draft_model", "draft_ngl", "draft_n_max", "spec_types", "model",
    }
)  # fmt: skip

#: --timeout at most a week; a MiB count in llama.cpp's output at most 2^40 MiB.
MAX_TIMEOUT_S = 7 * 86400
MAX_MIB = float(2**40)
_DEVICE_LINE = re.compile(r"^\s*(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")
_BREAKDOWN = re.compile(r"\|\s+-\s+(.+?)\s+\|.*?(\d+)\s+=\s+(\d+)\s+\+\s+(\d+)\s+\+\s+(\d+)")
_COMPUTE = re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")


@dataclass(frozen=True, slots=True)
class Measured:
    """One llama.cpp row: MiB of model, context and compute."""

    name: str
    model: float
    context: float
    compute: float


@dataclass(frozen=True, slots=True)
class Row:
    """One device and term: the estimate's MiB and llama.cpp's (None where it printed no row for the device)."""

    device: str
    term: str
    estimate_mib: float
    llamacpp_mib: float | None


@dataclass(frozen=True, slots=True)
class Comparison:
    """What one dry run gave: the command run, the rows, llama.cpp's exact compute buffers, notes."""

    command: tuple[str, ...]
    rows: tuple[Row, ...]
    compute: dict[str, float]
    notes: tuple[str, ...]


def find_binary(llama_bin: Path | None) -> str | None:
    """llama-fit-params in `llama_bin`, else on PATH."""
    if llama_bin is not None:
        cand = llama_bin / BINARY
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
        return None
    return shutil.which(BINARY)


def fit_params_args(extra: Sequence[str]) -> list[str]:
    """The user's flags that llama-fit-params understands and that change memory."""
    outv: list[str] = []
    i = 0
    while i < len(extra):
        a = extra[i]
        flag = a.split("=", 1)[0] if a.startswith("--") else a
        spec = _BY_NAME.get(flag)
        n = 1 if spec is not None and spec.takes_value and "=" not in a else 0
        if spec is not None and spec.key not in SERVER_ONLY_KEYS:
            outv.extend(extra[i : i + 1 + n])
        i += 1 + n if spec is not None else 1
    return outv


def parse_output(stdout: str, stderr: str) -> tuple[list[Measured], dict[str, float]]:
    """Rows per device (stdout, then extra breakdown rows such as CPU_REPACK) and the exact compute lines."""
    rows: dict[str, Measured] = {}
    for line in stdout.splitlines():
        m = _DEVICE_LINE.match(line)
        mib = _mibs(m.group(2, 3, 4)) if m else None
        if m and mib:
            rows[m.group(1)] = Measured(m.group(1), *mib)
    for line in stderr.splitlines():
        m = _BREAKDOWN.search(line)
        mib = _mibs(m.group(3, 4, 5)) if m else None
        if m and mib:
            name = m.group(1).split(" (")[0].strip()
            if name not in rows:
                rows[name] = Measured(name, *mib)
    compute: dict[str, float] = {}
    for m in (_COMPUTE.search(x) for x in stderr.splitlines()):
        mib = _mibs(m.group(2, 2, 2)) if m else None
        if m and mib:
            compute[m.group(1)] = mib[0]
    return list(rows.values()), compute


def _mibs(texts: tuple[str | Any, ...]) -> tuple[float, float, float] | None:
    """Three MiB counts from llama.cpp's output (a line that does not parse is not a row)."""
    vals = [real_or_none(str(t), 0, MAX_MIB) for t in texts]
    a, b, c = vals
    return None if a is None or b is None or c is None else (a, b, c)


def detect_cpu_features() -> CpuFeatures:
    """The repack-relevant features of this CPU (Linux /proc/cpuinfo; AVX2 assumed elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return CpuFeatures()
    flags = set(re.findall(r"\b(avx2|avx512f|asimddp|i8mm)\b", text))
    return CpuFeatures(
        avx2="avx2" in flags,
        avx512="avx512f" in flags,
        neon_dotprod="asimddp" in flags,
        neon_i8mm="i8mm" in flags,
    )


def _complete(h: GGUFHeader) -> bool:
    return not is_url(h.source) and not h.header_only and (h.file_size or 0) >= h.expected_file_size


def model_for_binary(files: ModelFiles, folder: str, token: str | None) -> str:
    """The file llama.cpp is given: the model itself when every shard is whole on disk, else a sparse copy in
    `folder` (a URL, a Hub model, an interrupted download or a header-only file)."""
    if all(_complete(h) for h in files.shards):
        return files.main.source
    return str(write_sparse_copy(files, folder, hub_token(token)))


def compare_rows(est: Estimate, rows: list[Measured]) -> list[Row]:
    """The estimate against llama.cpp per device and term, for every device the estimate uses."""
    gpu_rows = [r for r in rows if r.name not in ("Host", "CPU_REPACK")]
    by_name = {r.name: r for r in rows}
    table: list[Row] = []
    gi = 0
    for de in est.devices:
        if de.device.kind is DeviceKind.CPU:
            real = by_name.get("Host")
            name = "Host"
            repack = sum(t.bytes for t in de.terms if t.kind is TermKind.WEIGHTS and t.label == "CPU_REPACK")
            weights = de.bytes_of(TermKind.WEIGHTS) - repack
        else:
            if not de.terms:
                continue
            real = gpu_rows[gi] if gi < len(gpu_rows) else None
            gi += 1
            name = de.device.name
            repack = 0
            weights = de.bytes_of(TermKind.WEIGHTS)
        ctxb = de.bytes_of(TermKind.KV) + de.bytes_of(TermKind.RECURRENT)
        comp = de.bytes_of(TermKind.COMPUTE)
        table.append(Row(name, "weights", weights / MIB, real.model if real else None))
        table.append(Row(name, "kv + recurrent", ctxb / MIB, real.context if real else None))
        table.append(Row(name, "compute", comp / MIB, real.compute if real else None))
        if repack or "CPU_REPACK" in by_name:
            r = by_name.get("CPU_REPACK")
            table.append(Row("CPU_REPACK", "weights", repack / MIB, r.model if r else None))
    return table


def compare(
    exe: str,
    profile: ModelProfile,
    files: ModelFiles,
    args: Sequence[str],
    machine: Machine,
    *,
    token: str | None = None,
    timeout: float = 300.0,
) -> Comparison:
    """Run llama-fit-params on the model with the memory flags of `args` (llama-server flags; `-m` is ignored) and
    compare its numbers with the estimate for `machine`. Raises FitplanError (one line) when it cannot run, fails
    or prints no memory rows."""
    parsed = parse_flags(list(args))
    settings = dataclasses.replace(parsed.settings, tool=Tool.FIT_PARAMS, kv_unified=False)
    est = estimate(profile, settings, machine, cpu=detect_cpu_features())
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fitplan-verify-") as tmp:
        target = model_for_binary(files, tmp, token)
        if target != files.main.source:
            notes.append(
                f"{BINARY} ran on a sparse copy (the header, then a hole up to the declared size) in a temporary "
                "folder: its dry run reads no tensor data"
            )
        cmd = (exe, "-m", target, *fit_params_args(args), "-fitp", "on", "-v")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise FitplanError(f"could not run {BINARY}: {exc}") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise FitplanError(f"{BINARY} failed (exit {proc.returncode}): " + " | ".join(tail))
    rows, compute = parse_output(proc.stdout, proc.stderr)
    if not rows:
        first = (proc.stdout.strip().splitlines() or [""])[0][:200]
        raise FitplanError(f"{BINARY} printed no memory rows (its output began: {first!r})")
    return Comparison(cmd, tuple(compare_rows(est, rows)), compute, tuple(notes))


def summary(rows: Sequence[Row]) -> str:
    """One sentence per device: the estimate's MiB against llama.cpp's own (weights, KV and compute)."""
    totals: dict[str, list[float]] = {}
    for row in rows:
        if row.llamacpp_mib is None:
            continue
        pair = totals.setdefault(row.device, [0.0, 0.0])
        pair[0] += row.estimate_mib
        pair[1] += row.llamacpp_mib
    if not totals:
        return f"{BINARY} gave no per-device memory to compare with."
    parts = []
    for device, (ours, theirs) in totals.items():
        rel = f" ({(ours - theirs) / theirs:+.1%})" if theirs else ""
        parts.append(f"{device}: planned {ours:,.0f} MiB, llama.cpp {theirs:,.0f} MiB{rel}")
    return f"Checked with {BINARY} (weights, KV and compute): " + "; ".join(parts) + "."
