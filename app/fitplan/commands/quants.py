"""`fitplan quants SOURCE [llama-server pins...]`: which file of a repository (or a folder of quants) fits this
machine, with what context and placement, and the command for each, before anything is downloaded.

SOURCE is a Hugging Face repository (`ORG/REPO`, `hf.co/ORG/REPO`, `https://huggingface.co/ORG/REPO`, with an
optional revision: `ORG/REPO@REV` or `.../tree/REV`) or a local folder. For a repository only the headers are read
(Range requests, a few files at a time, cached by URL and object id); each model is planned by exactly the code
`fitplan plan` runs (`commands.plan.build_request` and `make_plan`), so each row equals `fitplan plan` on that file.
Commands for Hub models use llama-server's `-hf ORG/REPO:QUANT`; the token never appears in them.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fitplan.commands import SUMMARIES
from fitplan.commands import _output as out
from fitplan.commands._speed import speed_json, speed_of
from fitplan.commands.estimate import add_flags_parser
from fitplan.commands.plan import add_common_arguments, build_request, command_argv, detect_machine, make_plan
from fitplan.core.base.devices import Machine
from fitplan.core.base.errors import FitplanError, FlagError
from fitplan.core.base.numbers import int_reader
from fitplan.core.gguf.remote import hub_token
from fitplan.core.inputs.model_source import LoadedModel, SourceKind, SourceModels, load_source_models
from fitplan.core.launch.shell import Shell, default_shell, join
from fitplan.core.plan import ranking
from fitplan.core.plan.planner import Plan
from fitplan.core.speed import PlanSpeed

EXAMPLES = """examples:
  fitplan quants unsloth/Qwen3-8B-GGUF                       every quant of a repository on this machine
  fitplan quants hf.co/org/model-GGUF --assume-gpu "RTX 4090" --json
  fitplan quants https://huggingface.co/org/model-GGUF/tree/main -c 32768      pin the context
  fitplan quants ~/models/qwen3                              a folder of quants
"""

#: Headers read at once.
DEFAULT_JOBS = 4


@dataclass(frozen=True, slots=True)
class Row:
    """One model of the source, planned (or the one-line reason it could not be)."""

    name: str
    files: tuple[str, ...]
    size_bytes: int
    model_arg: str = ""
    loaded: LoadedModel | None = None
    plan: Plan | None = None
    argv: tuple[str, ...] = ()
    error: str = ""
    speed: PlanSpeed | None = None  # the plan's expected speed (`core.speed`), when it fits

    @property
    def fits(self) -> bool:
        return self.plan is not None and self.plan.fits

    @property
    def all_on_gpu(self) -> bool:
        p = self.plan
        if p is None:
            return False
        pl = p.placement
        return pl.cpu_layers == 0 and pl.cpu_expert_layers == 0 and pl.n_gpu_layers > 0

    @property
    def identity(self) -> ranking.ModelIdentity | None:
        return ranking.identity_of(self.loaded.profile) if self.loaded is not None else None

    @property
    def model(self) -> str:
        """The model this row is a quant of (its group), for people."""
        ident = self.identity
        return ident.label() if ident is not None else "could not be read"

    def tier(self) -> int:
        p = self.plan
        if p is None:
            return ranking.tier(None, False, 0, 0)
        return ranking.tier(p.fits, self.all_on_gpu, p.settings.n_ctx, p.context.cap)


def rank(rows: Sequence[Row]) -> list[Row]:
    """Rows grouped by model (`core.plan.ranking.group_by_model`), each group best first (`core.plan.ranking`)."""
    groups = ranking.group_by_model([r.identity for r in rows])
    return [
        r
        for g in groups
        for r in sorted((rows[i] for i in g), key=lambda r: ranking.rank_key(r.tier(), r.size_bytes, r.name))
    ]


def best_of_each_model(rows: Sequence[Row]) -> set[int]:
    """The recommended rows (by id): the first of each model's group when it fits."""
    best: dict[ranking.ModelIdentity | None, Row] = {}
    for r in rows:
        best.setdefault(r.identity, r)
    return {id(r) for r in best.values() if r.fits}


def register(subparsers: Any) -> None:
    p = add_flags_parser(
        subparsers,
        "quants",
        SUMMARIES["quants"],
        __doc__,
        EXAMPLES,
        usage="fitplan quants SOURCE [llama-server flags...] [options]",
    )
    add_common_arguments(p)
    for action in p._actions:
        if action.dest == "model":
            action.metavar = "SOURCE"
            action.help = (
                "ORG/REPO[@REV], hf.co/ORG/REPO, https://huggingface.co/ORG/REPO[/tree/REV], or a folder"
            )
    p.add_argument("--token", help="Hugging Face token (default $HF_TOKEN); sent to the Hub endpoint only")
    p.add_argument(
        "--jobs",
        type=int_reader(1, 64),
        default=DEFAULT_JOBS,
        metavar="N",
        help="headers read at once (default 4)",
    )
    p.add_argument("--shell", choices=[s.value for s in Shell], help="shell to quote the commands for")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=run, accepts_extra=True)


# -- gathering the models ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gathered:
    found: SourceModels
    rows: tuple[Row, ...]
    seconds: float  # listing and reading the headers

    @property
    def source(self) -> str:
        return self.found.source

    @property
    def ignored(self) -> int:
        return self.found.ignored

    @property
    def mmproj(self) -> tuple[tuple[str, tuple[str, ...], int], ...]:
        return tuple((e.name, tuple(f.path for f in e.files), e.size_bytes) for e in self.found.projectors)


def gather(source: str, token: str | None, jobs: int, endpoint: str | None = None) -> Gathered:
    """The models of a folder or a Hub repository, each loaded (headers and profile) or with its error."""
    t0 = time.perf_counter()
    found = load_source_models(source, token=token, endpoint=endpoint, jobs=jobs)
    rows = tuple(
        Row(
            ranking.quant_label(m.entry.name, m.model.profile if m.model is not None else None),
            tuple(f.path for f in m.entry.files),
            ranking.quant_size(m.model.profile if m.model is not None else None, m.entry.size_bytes),
            m.model.model_arg if m.model is not None else "",
            m.model,
            error=m.error,
        )
        for m in found.models
    )
    return Gathered(found, rows, time.perf_counter() - t0)


# -- planning ----------------------------------------------------------------------------------------------------


def plan_row(row: Row, args: argparse.Namespace, extra: Sequence[str], machine: Machine) -> Row:
    """Plan one loaded model exactly as `fitplan plan MODEL_ARG [pins]` would (its projector included)."""
    if row.loaded is None:
        return row
    ns = argparse.Namespace(**vars(args))
    ns.model = row.model_arg
    if not args.mmproj_file and row.loaded.mmproj_source and row.loaded.origin.kind is not SourceKind.HUB:
        ns.mmproj_file = row.loaded.mmproj_source  # a folder's model names its projector; -hf loads its own
    try:
        req = build_request(ns, list(extra), machine)
        p = make_plan(req)
        argv = command_argv(req, p, args.program)
    except FlagError:
        raise  # a bad pin is the same for every row: one error, exit 2
    except FitplanError as exc:
        return Row(row.name, row.files, row.size_bytes, row.model_arg, row.loaded, error=str(exc))
    speed = speed_of(req.profile, req.machine, p.settings, args) if p.fits else None
    return Row(row.name, row.files, row.size_bytes, row.model_arg, row.loaded, p, argv, speed=speed)


def plan_rows(g: Gathered, args: argparse.Namespace, extra: Sequence[str], machine: Machine) -> list[Row]:
    return rank([plan_row(r, args, extra, machine) for r in g.rows])


# -- output ------------------------------------------------------------------------------------------------------


def row_to_dict(r: Row, shell: Shell, recommended: bool) -> dict[str, object]:
    p = r.plan
    return {
        "name": r.name,
        "model": r.model,
        "files": list(r.files),
        "file_type": r.loaded.profile.file_type if r.loaded is not None else None,
        "size_bytes": r.size_bytes,
        "fits": r.fits,
        "n_ctx": p.settings.n_ctx if p is not None and p.fits else 0,
        "placement": p.placement.description if p is not None else None,
        "all_on_gpu": r.all_on_gpu,
        "command": join(r.argv, shell, exact_text=False) if r.argv else None,
        "argv": list(r.argv),
        "mmproj": r.loaded.mmproj_source if r.loaded is not None else None,
        "recommended": recommended,
        "speed": speed_json(r.speed),
        "error": r.error or None,
    }


def to_dict(g: Gathered, rows: Sequence[Row], shell: Shell) -> dict[str, object]:
    best = best_of_each_model(rows)
    models = list(dict.fromkeys(r.model for r in rows))
    first_best = next((r.name for r in rows if id(r) in best), None)
    return {
        "source": g.source,
        "rule": ranking.RANK_RULE,
        # one model: its recommended quant; several: see `models` (each is ranked among its own quants)
        "recommended": first_best if len(models) == 1 else None,
        "models": [
            {"model": m, "recommended": next((r.name for r in rows if r.model == m and id(r) in best), None)}
            for m in models
        ],
        "quants": [row_to_dict(r, shell, id(r) in best) for r in rows],
        "mmproj": [{"name": n, "files": list(f), "size_bytes": s} for n, f, s in g.mmproj],
        "ignored_files": g.ignored,
        "bytes_read": g.found.bytes_read,
        "requests": g.found.requests,
    }


def _cells(r: Row, best: set[int]) -> list[object]:
    mark = out.style("*", out.GREEN, out.BOLD) if id(r) in best else ""
    if r.plan is None:
        err = out.style("error", out.RED)
        return [mark, r.name, len(r.files), out.size(r.size_bytes), err, "", "", r.error]
    p = r.plan
    fits = out.style("yes", out.GREEN) if p.fits else out.style("no", out.RED)
    ctx = str(p.settings.n_ctx) if p.fits else "-"
    where = p.placement.description if p.fits else p.binding
    ft = r.loaded.profile.file_type if r.loaded is not None else ""
    s = r.speed
    tps = (
        f"{s.generation.tps:.0f} ({s.generation.low:.0f}-{s.generation.high:.0f}) / {s.prompt.tps:.0f}"
        if s is not None
        else "-"
    )
    head = [mark, r.name, len(r.files), out.size(r.size_bytes), fits, ctx, tps]
    return [*head, f"{where} ({ft})" if ft else where]


def format_text(g: Gathered, rows: Sequence[Row], shell: Shell) -> str:
    best = best_of_each_model(rows)
    n_mm = f", {len(g.mmproj)} projector(s)" if g.mmproj else ""
    lines = [
        out.style(f"{g.source}: {len(rows)} model(s){n_mm}, {g.ignored} other file(s) ignored", out.BOLD)
    ]
    models = list(dict.fromkeys(r.model for r in rows))
    header = ["", "quant", "files", "size", "fits", "context", "t/s gen / prompt", "placement (file type)"]
    if len(models) == 1:
        lines.append(out.table(header, [_cells(r, best) for r in rows], align="llrrlrrl"))
    else:
        lines.append(f"{len(models)} different models: each is ranked among its own quants")
        for m in models:
            group = [_cells(r, best) for r in rows if r.model == m]
            lines += ["", out.style(m, out.BOLD), out.table(header, group, align="llrrlrrl")]
    lines += ["", ranking.RANK_RULE]
    if any(r.speed is not None for r in rows):
        lines.append(
            "t/s: expected generation at an empty context (its held-out band) / prompt rate; `fitplan plan` gives both "
            "bands"
        )
    if g.mmproj:
        lines.append("projectors: " + ", ".join(f"{n} ({out.size(s)})" for n, _, s in g.mmproj))
    if not best:
        lines.append(out.style("no model of this source fits this machine", out.RED, out.BOLD))
    lines.append("")
    for r in rows:
        if r.fits:
            tag = " (recommended)" if id(r) in best else ""
            tag = f" of {r.model}{tag}" if len(models) > 1 else tag
            lines.append(f"{r.name}{tag}: {join(r.argv, shell, exact_text=out.text_encoding())}")
    return "\n".join(lines)


def run(args: argparse.Namespace, extra: list[str], machine: Machine | None = None) -> int:
    if args.header_only:
        raise FlagError("--header-only does not apply to `quants` (remote headers are read alone anyway)")
    token = hub_token(args.token)
    g = gather(args.model, token, args.jobs)
    if not g.rows:
        raise FlagError(f"{g.source}: no GGUF model files ({g.ignored} other file(s))")
    m = machine if machine is not None else detect_machine(args.assume_gpu, args.host_ram)
    rows = plan_rows(g, args, extra, m)
    shell = Shell(args.shell) if args.shell else default_shell()
    if args.json:
        out.print_json(to_dict(g, rows, shell))
    else:
        print(format_text(g, rows, shell))
    sys.stdout.flush()
    return out.EXIT_OK if any(r.fits for r in rows) else out.EXIT_DOES_NOT_FIT
