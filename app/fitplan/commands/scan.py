"""`fitplan scan [DIR...] [--json]`: the GGUF models in the given folders (default: the usual download places),
with architecture, quantization, size, parameters, and whether each fits this machine: the planner's answer (the
same one `fitplan plan` and the window's library badge give) with llama-server's defaults (4 slots sharing one KV
cache) and the margins of --margin / --host-margin."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fitplan.commands import SUMMARIES
from fitplan.commands import _output as out
from fitplan.commands.estimate import add_margin_arguments, margin_policy
from fitplan.core.base.devices import Machine
from fitplan.core.base.files import expand_home
from fitplan.core.base.launch_settings import SERVER_AUTO_PARALLEL
from fitplan.core.base.numbers import INT32_MAX, int_reader
from fitplan.core.gguf.header import ModelFiles
from fitplan.core.gguf.header_cache import cached_read_header
from fitplan.core.inputs.machine import MachineRequest, build_machine
from fitplan.core.library import (
    JsonScanIndex,
    LibraryModel,
    LibraryRoot,
    LibraryScanner,
    RootKind,
    ScanResult,
    default_index_path,
    default_roots,
)
from fitplan.core.library.model import ScanProgress
from fitplan.core.library.scanner import HeaderReader, ProgressCallback
from fitplan.core.model.builder import build_profile
from fitplan.core.plan.planner import MarginPolicy, plan_verdict
from fitplan.core.plan.request import PlanQuery, plan_of
from fitplan.core.plan.search import default_estimate_fn
from fitplan.core.plan.verdict import slots_text

EPILOG = """examples:
  fitplan scan                        the Hugging Face cache, llama.cpp, LM Studio and ollama folders
  fitplan scan ~/models /data/gguf    these folders only
  fitplan scan ~/models --json        {"models": [...], "skipped": [{"path", "reason"}]}
  fitplan scan --assume-gpu "2x RTX 3090"   fit against GPUs you do not have
"""

#: Fit answer when the estimate cannot be made (estimator missing, or the model cannot be profiled).
UNKNOWN = None

FitCheck = Callable[[LibraryModel], "FitAnswer"]


@dataclass(frozen=True, slots=True)
class FitAnswer:
    fits: bool | None  # None: unknown
    reason: str = ""
    level: str = ""  # the verdict's FitLevel ("fits", "offload", "no_fit"), "" when unknown


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "scan",
        help=SUMMARIES["scan"],
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dirs", nargs="*", metavar="DIR", help="folders (or files) to scan")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--no-fit", action="store_true", help="do not estimate whether each model fits")
    p.add_argument(
        "--assume-gpu",
        action="append",
        default=[],
        metavar="SPEC",
        help='plan for these GPUs instead of the detected ones ("RTX 4090", "24GiB", "2x RTX 3090")',
    )
    add_margin_arguments(p)
    # the old spelling of --margin, kept working
    p.add_argument(
        "--margin-mib",
        dest="margin",
        type=int_reader(0, INT32_MAX),
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    p.add_argument(
        "--host-ram", metavar="SIZE", help="plan for this much host RAM instead of the detected amount"
    )
    p.set_defaults(handler=run, accepts_extra=False)


def roots_for(dirs: Sequence[str]) -> tuple[LibraryRoot, ...]:
    if dirs:
        return tuple(LibraryRoot(os.path.abspath(expand_home(d)), RootKind.FOLDER) for d in dirs)
    return default_roots()


def _index_path() -> Path:
    env = os.environ.get("FITPLAN_CACHE_DIR")
    return Path(env) / "scan-index.json" if env else default_index_path()


def machine_for(assume: Sequence[str], host_ram: str | None = None) -> Machine:
    return build_machine(MachineRequest(tuple(assume), host_ram))[0]


def planner_fit_check(machine: Machine, margin: MarginPolicy) -> FitCheck:
    """The planner's answer with llama-server's defaults (the window's library badge asks the same planner with
    the model's saved settings): fits, fits only with weights on the CPU, or does not fit."""

    def check(model: LibraryModel) -> FitAnswer:
        try:
            shards = tuple(cached_read_header(p) for p in model.shard_paths)
            profile = build_profile(ModelFiles(shards=shards))
            mmproj = build_profile(cached_read_header(model.mmproj_path)) if model.mmproj_path else None
            p = plan_of(
                PlanQuery(profile, machine, margin=margin, estimate_fn=default_estimate_fn(mmproj=mmproj))
            )
            v = plan_verdict(p, machine)
        except Exception as exc:  # noqa: BLE001 - one model the planner cannot handle must not stop the listing
            return FitAnswer(UNKNOWN, f"{type(exc).__name__}: {exc}")
        return FitAnswer(v.fits, v.headline, v.level.value)

    return check


def model_to_dict(m: LibraryModel, fit: FitAnswer | None) -> dict[str, object]:
    return {
        "path": m.path,
        "display_name": m.display_name,
        "source": m.root_kind.value,
        "architecture": m.architecture,
        "name": m.name,
        "file_type": m.file_type,
        "file_size": m.file_size,
        "header_only": m.header_only,  # a header written without tensor data on purpose (bundled examples)
        "declared_size": m.expected_size,
        "n_params": m.n_params,
        "n_ctx_train": m.n_ctx_train,
        "n_layer": m.n_layer,
        "shard_paths": list(m.shard_paths),
        "mmproj_path": m.mmproj_path,
        "aliases": list(m.aliases),
        "fits": fit.fits if fit is not None else None,
        "fit_level": fit.level if fit is not None else "",
        "fit_note": fit.reason if fit is not None else "not checked",
    }


def _params(n: int) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


class ProgressLine:
    """A one-line "scanning: N files, M models" on a terminal, redrawn at most every `interval` seconds."""

    def __init__(
        self, stream: Any, interval: float = 0.2, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stream = out.unescaped(stream)  # counts only: fitplan's own \r and erase-line pass
        self.interval = interval
        self.clock = clock
        self._last = -interval
        self.shown = False

    def __call__(self, p: ScanProgress) -> None:
        now = self.clock()
        if now - self._last < self.interval:
            return
        self._last = now
        self.stream.write(f"\rscanning: {p.files_seen} files, {p.models_found} models, {p.skipped} skipped")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()


_ANSWERS = {"fits": "yes", "offload": "with CPU offload", "no_fit": "no"}


def format_text(result: ScanResult, fits: Sequence[FitAnswer | None]) -> str:
    rows = []
    for m, fit in zip(result.models, fits, strict=True):
        answer = (
            "?"
            if fit is None or fit.fits is None
            else ("no" if not fit.fits else _ANSWERS.get(fit.level, "yes"))
        )
        extra = " +mmproj" if m.mmproj_path else ""
        shards = f" ({len(m.shard_paths)} files)" if len(m.shard_paths) > 1 else ""
        rows.append(
            [
                m.display_name + shards + extra,
                m.architecture,
                m.file_type,
                out.size(m.expected_size if m.header_only else m.file_size),
                _params(m.n_params),
                m.n_ctx_train,
                answer,
            ]
        )
    lines = [out.table(["model", "arch", "quant", "size", "params", "ctx", "fits"], rows, align="lllrrrl")]
    if not result.models:
        lines = ["No model found."]
    if result.skipped:
        lines.append("")
        lines.append(f"skipped {len(result.skipped)}:")
        lines.extend(f"  {out.clean(s.path)}: {out.clean(s.reason)}" for s in result.skipped)
    return "\n".join(lines)


def run(
    args: argparse.Namespace,
    extra: list[str],
    reader: HeaderReader | None = None,
    fit_check: FitCheck | None = None,
) -> int:
    roots = roots_for(args.dirs)
    if reader is None and not args.no_fit:
        # the fit check reads the headers again through the profile cache: let the scan fill it
        reader = cached_read_header
    scanner = LibraryScanner(reader=reader, index=JsonScanIndex(_index_path()))
    progress = ProgressLine(sys.stderr) if not args.json and sys.stderr.isatty() else None
    on_progress: ProgressCallback | None = progress
    try:
        result = scanner.scan(roots, on_progress=on_progress)
    finally:
        if progress is not None:
            progress.clear()
    fits: list[FitAnswer | None]
    caption = ""
    if args.no_fit:
        fits = [None] * len(result.models)
    else:
        if fit_check is None:
            machine = machine_for(args.assume_gpu, getattr(args, "host_ram", None))
            margin = margin_policy(args, machine)
            fit_check = planner_fit_check(machine, margin)
            caption = (
                f"fits: the plan for llama-server's defaults ({slots_text(SERVER_AUTO_PARALLEL, True)}), "
                f"{margin.describe()}"
            )
        check = fit_check
        fits = [check(m) for m in result.models]
    if args.json:
        out.print_json(
            {
                "models": [model_to_dict(m, f) for m, f in zip(result.models, fits, strict=True)],
                "skipped": [{"path": s.path, "reason": s.reason} for s in result.skipped],
            }
        )
    else:
        print(format_text(result, fits))
        if caption and result.models:
            print(caption)
    named_missing = [s for s in result.skipped if s.reason == "folder not found"]
    if args.dirs and len(named_missing) == len(args.dirs):
        return out.error("none of the folders exist: " + ", ".join(args.dirs))
    return 0
