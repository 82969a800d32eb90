"""`fitplan verify MODEL [llama-server flags...]`: the estimate next to llama.cpp's own dry run.

Runs `llama-fit-params` (found on PATH or in `--llama-bin DIR`) with the same memory flags, `-fitp on -v`, reads
its per-device memory (stdout: `DEVICE model context compute` in MiB; stderr: the memory breakdown table, with
extra rows such as CPU_REPACK, and the `compute buffer size` lines) and prints the estimate for the same program
(`--tool llama-fit-params`: its logits reservation is n_batch, its context is not unified) term by term with the
difference. Exit 0 when the comparison ran, 2 when it could not (no binary, bad input).

MODEL may be a URL, a Hub model (`hf.co/ORG/REPO:QUANT`), an interrupted download or a header-only file: then
llama-fit-params runs on a sparse copy (each shard's header, then a hole up to its declared size) written in a
temporary folder, which its dry run loads as the real file since it reads no tensor data.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fitplan.commands import SUMMARIES
from fitplan.commands import _output as out
from fitplan.commands.estimate import add_flags_parser, machine_for, split_model_flag
from fitplan.core.base.devices import MIB, DeviceKind
from fitplan.core.base.errors import FlagError
from fitplan.core.base.launch_settings import Tool
from fitplan.core.base.numbers import NumberError, parse_real, real_or_none
from fitplan.core.base.results import Estimate, TermKind
from fitplan.core.estimate.estimator import estimate
from fitplan.core.gguf.header import GGUFHeader
from fitplan.core.gguf.remote import hub_token, is_url
from fitplan.core.gguf.sparse_copy import write_sparse_copy
from fitplan.core.inputs.model_source import LoadedModel, load_model
from fitplan.core.launch.flags import _BY_NAME, parse_flags
from fitplan.core.memory.weights import CpuFeatures

BINARY = "llama-fit-params"
#: Memory flags llama-fit-params does not register (server-only in common/arg.cpp): not passed on.
SERVER_ONLY_KEYS = frozenset(
    {
        "kv_unified", "no_kv_unified", "cache_ram_mib", "ctx_checkpoints", "embedding", "mmproj_path",
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


EXAMPLES = """examples:
  fitplan verify model.gguf -c 32768 -ngl 99
  fitplan verify model.gguf -c 8192 -ctk q8_0 -ctv q8_0 --llama-bin ~/llama.cpp/build/bin
  fitplan verify model.gguf -c 16384 -dev none --json
  fitplan verify https://huggingface.co/ORG/REPO/resolve/main/model-Q4_K_M.gguf -c 8192    no download
  fitplan verify model.gguf.part -c 8192           an interrupted download: its header is enough
"""


def register(subparsers: Any) -> None:
    summary = SUMMARIES["verify"]
    p = add_flags_parser(subparsers, "verify", summary, __doc__, EXAMPLES)
    p.add_argument("model", nargs="?", help="a .gguf file (or give it with -m)")
    p.add_argument("--llama-bin", type=Path, help=f"folder holding {BINARY} (default: search PATH)")
    p.add_argument("--assume-gpu", action="append", default=[], metavar="NAME=SIZE", help=argparse.SUPPRESS)
    p.add_argument("--timeout", default="300", help="seconds to wait for llama.cpp (at most a week)")
    p.add_argument("--token", help="Hugging Face token for a URL or Hub model (default $HF_TOKEN)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=run, accepts_extra=True)


def find_binary(llama_bin: Path | None) -> str | None:
    if llama_bin is not None:
        cand = llama_bin / BINARY
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
        return None
    return shutil.which(BINARY)


def fit_params_args(extra: list[str]) -> list[str]:
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


def run(args: argparse.Namespace, extra: list[str]) -> int:
    args.model, extra = split_model_flag(args.model, extra)
    try:
        parsed = parse_flags(extra)
        timeout = parse_real(args.timeout, 1, MAX_TIMEOUT_S)
    except FlagError as exc:
        return out.error(str(exc))
    except NumberError as exc:
        return out.error(f"--timeout: {exc}")
    model = args.model or parsed.model_path
    if not model:
        return out.error("no model: give MODEL or -m MODEL")
    exe = find_binary(args.llama_bin)
    if exe is None:
        where = f"in {args.llama_bin}" if args.llama_bin else "on PATH"
        return out.error(
            f"{BINARY} not found {where}. It is built with llama.cpp (cmake --build build --target "
            f"{BINARY}); give its folder with --llama-bin DIR."
        )
    settings = dataclasses.replace(parsed.settings, tool=Tool.FIT_PARAMS, kv_unified=False)
    loaded = load_model(model, token=args.token, header_only=True)
    machine, notes = machine_for(parsed, list(args.assume_gpu))
    est = estimate(loaded.profile, settings, machine, cpu=detect_cpu_features())
    with tempfile.TemporaryDirectory(prefix="fitplan-verify-") as tmp:
        target = model_for_binary(loaded, tmp, args.token)
        if target != loaded.files.main.source:
            notes.append(
                f"{BINARY} ran on a sparse copy (the header, then a hole up to the declared size) in a temporary "
                "folder: its dry run reads no tensor data"
            )
        cmd = [exe, "-m", target, *fit_params_args(extra), "-fitp", "on", "-v"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return out.error(f"could not run {BINARY}: {exc}")
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return out.error(f"{BINARY} failed (exit {proc.returncode}): " + " | ".join(tail))
    rows, compute = parse_output(proc.stdout, proc.stderr)
    if not rows:
        return out.error(f"{BINARY} printed no memory rows; its output was:\n{proc.stdout.strip()}")
    table = compare_rows(est, rows)
    if args.json:
        out.print_json(
            {
                "command": cmd,
                "rows": [
                    {"device": d, "term": t, "estimate_mib": round(m, 2), "llamacpp_mib": r}
                    for d, t, m, r in table
                ],
                "llamacpp_compute_mib": compute,
                "notes": notes,
            }
        )
        return out.EXIT_OK
    print("$ " + " ".join(cmd))
    print(compare_table(table, compute))
    for n in notes:
        print(out.style(f"note: {n}", out.DIM))
    print(
        out.style(
            "llama.cpp rounds down to whole MiB; the output buffer and the runtime reserve are not in its numbers "
            "and are left out here; CPU_REPACK is a row of its own.",
            out.DIM,
        )
    )
    return out.EXIT_OK


def _complete(h: GGUFHeader) -> bool:
    return not is_url(h.source) and not h.header_only and (h.file_size or 0) >= h.expected_file_size


def model_for_binary(loaded: LoadedModel, folder: str, token: str | None) -> str:
    """The file llama.cpp is given: the model itself when every shard is whole on disk, else a sparse copy in
    `folder` (a URL, a Hub model, an interrupted download or a header-only file)."""
    if all(_complete(h) for h in loaded.files.shards):
        return loaded.files.main.source
    return str(write_sparse_copy(loaded.files, folder, hub_token(token)))


def compare_rows(est: Estimate, rows: list[Measured]) -> list[tuple[str, str, float, float | None]]:
    """(device, term, estimate MiB, llama.cpp MiB or None) for every device the estimate uses."""
    gpu_rows = [r for r in rows if r.name not in ("Host", "CPU_REPACK")]
    by_name = {r.name: r for r in rows}
    table: list[tuple[str, str, float, float | None]] = []
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
        table.append((name, "weights", weights / MIB, real.model if real else None))
        table.append((name, "kv + recurrent", ctxb / MIB, real.context if real else None))
        table.append((name, "compute", comp / MIB, real.compute if real else None))
        if repack or "CPU_REPACK" in by_name:
            r = by_name.get("CPU_REPACK")
            table.append(("CPU_REPACK", "weights", repack / MIB, r.model if r else None))
    return table


def compare_table(table: list[tuple[str, str, float, float | None]], compute: dict[str, float]) -> str:
    """Estimate vs llama.cpp per device and term (MiB)."""
    lines = [
        out.table(
            ["device", "term", "estimate", "llama.cpp", "difference"],
            [_row(*r) for r in table],
            align="llrrr",
        )
    ]
    if compute:
        exact = ", ".join(f"{k} {v:.2f}" for k, v in compute.items())
        lines.append(f"llama.cpp compute buffers (MiB, from its log): {exact}")
    return "\n".join(lines)


def _row(device: str, term: str, m: float, theirs: float | None) -> list[object]:
    if theirs is None:
        return [device, term, f"{m:.2f}", "-", ""]
    diff = m - theirs
    rel = f" ({diff / theirs:+.1%})" if theirs else ""
    return [device, term, f"{m:.2f}", f"{theirs:.0f}", f"{diff:+.2f}{rel}"]
