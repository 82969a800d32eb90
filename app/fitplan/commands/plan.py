"""`fitplan plan MODEL [llama-server flags...]`: the fastest placement and the largest context that fit (or, with
`--objective context`, the longest context and the fastest placement for it), and the llama-server command for them.

Flags after MODEL use llama-server's own spellings and are pins: `-c 32768` fixes the context, `-ngl 20` the layers,
`-ctk q8_0` the cache type, and so on; everything not given is chosen by the planner. The command it prints can be
fed back unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fitplan.commands import SUMMARIES
from fitplan.commands import _output as out
from fitplan.commands._speed import add_speed_arguments, speed_json, speed_text, tps_floor
from fitplan.commands.estimate import (
    accuracy_json,
    add_engine_argument,
    add_flags_parser,
    add_margin_arguments,
    engine_of,
    margin_policy,
    verdict_json,
)
from fitplan.core.base.devices import Machine
from fitplan.core.base.errors import FlagError
from fitplan.core.base.launch_settings import Engine
from fitplan.core.base.numbers import INT32_MAX, int_reader
from fitplan.core.estimate.accuracy import accuracy_band
from fitplan.core.inputs.machine import machine_of
from fitplan.core.inputs.model_source import launch_projector, load_loras, load_model
from fitplan.core.launch.command_line import (
    OllamaExport,
    annotate,
    env_lines,
    first_shard,
    given_keys,
    ollama_export,
    plan_to_args,
    to_preset_ini,
)
from fitplan.core.launch.flags import parse_flags
from fitplan.core.launch.rpc import RpcServer, rpc_devices, rpc_flag_value, rpc_server_commands, with_rpc
from fitplan.core.launch.shell import Shell, default_shell, join
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.alternatives import Alternative
from fitplan.core.plan.objective import Goal, Objective
from fitplan.core.plan.pins import pins_from_settings
from fitplan.core.plan.planner import (
    EstimateFn,
    MarginPolicy,
    Pins,
    Plan,
    default_estimate_fn,
    plan_verdict,
)
from fitplan.core.plan.pool import memory_notes
from fitplan.core.plan.request import PlanQuery, answer, plan_of
from fitplan.core.plan.summary import slots_words, verdict_words
from fitplan.core.plan.usage import held_by_others
from fitplan.core.plan.verdict import Verdict

EXAMPLES = """examples:
  fitplan plan model.gguf                                   plan for the GPUs of this machine
  fitplan plan model.gguf --assume-gpu "RTX 4090"           plan for a GPU you do not have
  fitplan plan model.gguf -c 32768 -ctk q8_0 -ctv q8_0      pin the context and cache types
  fitplan plan model.gguf --rpc 192.168.1.20:50052=24GiB    add a GPU served by ggml-rpc-server
  fitplan plan model.gguf --min-ctx 16384 --json
  fitplan plan model.gguf --objective context               the longest context first, then the fastest placement
  fitplan plan --engine ik_llama.cpp deepseek.gguf -amb 512      ik_llama.cpp: -mla 3 -fmoe in the command
  fitplan plan --engine ollama model.gguf --kv-cache-type q8_0     ollama: environment variables and a Modelfile
  fitplan plan chat.gguf -c 16384 + embed.gguf --embedding + rerank.gguf --reranking    a set: one budget
  fitplan plan router.ini --models-max 2                   the sections of a --models-preset file, planned together
  fitplan plan model.gguf --hold GPU0=2GiB:desktop --gpu-margin 2048,256    keep room for other programs
"""


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a .gguf file (any shard of a split model)")
    p.add_argument(
        "--assume-gpu",
        action="append",
        default=[],
        metavar="SPEC",
        help='plan for these GPUs instead of the detected ones ("RTX 4090", "24GiB", "NAME=24GiB", "2x RTX 3090")',
    )
    p.add_argument(
        "--rpc",
        dest="rpc_specs",
        action="append",
        default=[],
        metavar="HOST:PORT=SIZE",
        help="a ggml-rpc-server device and its memory; repeat the endpoint for a second device of that server",
    )
    add_margin_arguments(p)
    p.add_argument(
        "--host-ram", metavar="SIZE", help="plan for this much host RAM instead of the detected amount"
    )
    p.add_argument(
        "--min-ctx",
        type=int_reader(0, INT32_MAX),
        metavar="N",
        help="keep at least N tokens of context (per sequence)",
    )
    p.add_argument(
        "--objective",
        choices=[g.value for g in Goal],
        default=Goal.PLACEMENT.value,
        help="what comes first: the fastest placement (the most weights on the GPUs; default) or the longest context",
    )
    p.add_argument(
        "--min-tps",
        type=tps_floor,
        metavar="T/S",
        help="keep at least this many generated tokens per second at the planned context (the speed model's "
        "estimate; the context is lowered, or the plan does not fit, to keep it)",
    )
    p.add_argument("--all-on-gpu", action="store_true", help="never move weights to the CPU")
    p.add_argument(
        "--mmproj-file", metavar="FILE", help="estimate this multimodal projector (same as --mmproj)"
    )
    p.add_argument(
        "--program", default="llama-server", help="the program in the command (default llama-server)"
    )
    add_engine_argument(p)
    add_speed_arguments(p)
    p.add_argument(
        "--header-only",
        action="store_true",
        help="accept a file shorter than its tensor data (a download in progress): only the header is needed",
    )


def register(subparsers: Any) -> None:
    p = add_flags_parser(
        subparsers,
        "plan",
        SUMMARIES["plan"],
        "The fastest placement and the largest context that fit, and the llama-server command. "
        "Any llama-server flags after MODEL (-c, -np, -ctk, -ngl, -ts, --n-cpu-moe, -fa ...) are pins: the plan "
        "keeps them and chooses the rest.",
        EXAMPLES,
        usage="fitplan plan MODEL [llama-server flags...] [options]",
    )
    add_common_arguments(p)
    p.add_argument("--shell", choices=[s.value for s in Shell], help="shell to quote the command for")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=run, accepts_extra=True)


# ---------------------------------------------------------------------------------------------------------------------
# Shared by `plan` and `command`
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlanRequest:
    profile: ModelProfile
    machine: Machine
    pins: Pins
    margin: MarginPolicy
    rpc: tuple[RpcServer, ...]
    model_arg: str
    estimate_fn: EstimateFn
    ignored: tuple[str, ...]
    unmodelled: tuple[str, ...]
    passthrough: tuple[str, ...] = ()  # the words of the flags fitplan does not model, kept in the command
    projector: str | None = None  # the projector counted (path or URL), as llama-server would load it
    projector_bytes: int = 0
    projector_auto: bool = False  # the repository's own, loaded by -hf without -mm
    objective: Objective = field(default_factory=Objective)  # --objective, --min-tps
    host_bandwidth: float | None = None  # --host-bandwidth, bytes/s (the speed model's and the floor's)

    @property
    def query(self) -> PlanQuery:
        """The planning question these flags ask (the window asks the same type)."""
        return PlanQuery(
            self.profile,
            self.machine,
            self.pins,
            self.objective,
            self.margin,
            self.estimate_fn,
            self.host_bandwidth,
        )


def load_profile(path: str, header_only: bool = False) -> ModelProfile:
    """A model's profile from its headers: a local file (any shard), an http(s) URL, or a Hub model."""
    return load_model(path, header_only=header_only).profile


def detect_machine(assume: Sequence[str], host_ram: str | None) -> Machine:
    """The machine to plan for (`fitplan.core.inputs.machine`)."""
    return machine_of(assume, host_ram)


def build_request(
    args: argparse.Namespace, extra: Sequence[str], machine: Machine | None = None
) -> PlanRequest:
    parsed = parse_flags(list(extra), engine=engine_of(args))
    if parsed.model_path is not None:
        raise FlagError("give the model once, as the first argument (not with -m)")
    if parsed.rpc_servers:
        raise FlagError("--rpc needs the memory of each device here: --rpc HOST:PORT=SIZE (one per device)")
    settings = parsed.settings
    if args.mmproj_file:
        settings = dataclasses.replace(settings, mmproj_path=args.mmproj_file)
    given = given_keys(extra)
    pins = pins_from_settings(settings, given, args.min_ctx, args.all_on_gpu)
    model = load_model(args.model, header_only=args.header_only)
    profile = model.profile
    mm_source, mmproj = launch_projector(model, settings)
    if mm_source is not None and mmproj is None:
        mmproj = load_profile(mm_source, args.header_only)
    draft = load_profile(settings.draft.model_path, args.header_only) if settings.draft is not None else None
    rpc = rpc_devices(args.rpc_specs)
    base_machine = machine if machine is not None else detect_machine(args.assume_gpu, args.host_ram)
    full = with_rpc(base_machine, rpc)
    margin = margin_policy(args, full)
    return PlanRequest(
        profile=profile,
        machine=full,
        pins=pins,
        margin=margin,
        rpc=rpc,
        model_arg=args.model,
        estimate_fn=default_estimate_fn(mmproj=mmproj, draft=draft, loras=load_loras(settings)),
        ignored=parsed.ignored,
        unmodelled=parsed.unmodelled,
        passthrough=parsed.passthrough,
        projector=mm_source,
        projector_bytes=mmproj.weight_bytes if mmproj is not None else 0,
        projector_auto=mm_source is not None and not settings.mmproj_path,
        objective=Objective(
            Goal(getattr(args, "objective", Goal.PLACEMENT.value)), getattr(args, "min_tps", None)
        ),
        host_bandwidth=getattr(args, "host_bandwidth", None) and args.host_bandwidth * 1e9,
    )


def make_plan(req: PlanRequest) -> Plan:
    return plan_of(req.query)


def command_argv(req: PlanRequest, p: Plan, program: str) -> tuple[str, ...]:
    """The plan's command, with the user's flags fitplan does not model kept at the end as given."""
    return plan_to_args(
        p, first_shard(req.model_arg), program=program, rpc_servers=_endpoints(req), kept=req.passthrough
    )


def ollama_of(req: PlanRequest, p: Plan) -> OllamaExport | None:
    """For the ollama engine: the environment and Modelfile that make ollama run the plan."""
    if p.settings.engine is not Engine.OLLAMA:
        return None
    return ollama_export(p, os.path.abspath(first_shard(req.model_arg)))


def ollama_text(exp: OllamaExport, shell: Shell) -> str:
    """The ollama instructions: environment for `ollama serve`, the Modelfile, and `ollama create`."""
    lines = []
    if exp.environment:
        lines.append(f"environment of `ollama serve` ({shell.value}):")
        lines.append(env_lines(exp.environment, shell))
        lines.append("ollama serve")
        lines.append("")
    lines.append("Modelfile:")
    lines.append(exp.modelfile.rstrip("\n"))
    lines.append("")
    lines.append(join(exp.create_argv(), shell, exact_text=out.text_encoding()))
    return "\n".join(lines)


def ollama_json(exp: OllamaExport, shell: Shell) -> dict[str, object]:
    return {
        "environment": dict(exp.environment),
        "environment_script": env_lines(exp.environment, shell),
        "modelfile": exp.modelfile,
        "model_name": exp.model_name,
        "create_argv": list(exp.create_argv()),
    }


def _endpoints(req: PlanRequest) -> tuple[str, ...]:
    v = rpc_flag_value(req.rpc)
    return tuple(v.split(",")) if v else ()


def preset_text(req: PlanRequest, p: Plan, name: str) -> str:
    return to_preset_ini(
        p, name, os.path.abspath(first_shard(req.model_arg)), rpc_servers=_endpoints(req), comment=p.binding
    )


# ---------------------------------------------------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------------------------------------------------


def plan_to_dict(req: PlanRequest, p: Plan, argv: Sequence[str], shell: Shell) -> dict[str, object]:
    devices = []
    for u in p.context.usage:
        devices.append(
            {
                "device": u.label,
                "name": u.device.name,
                "used_bytes": u.used_bytes,
                "capacity_bytes": u.capacity_bytes,
                "headroom_bytes": u.headroom_bytes,
                "fits": u.fits,
            }
        )
    return {
        "model": req.profile.path,
        "fits": p.fits,
        "binding": p.binding,
        "n_ctx": p.settings.n_ctx,
        "context_step": p.context.step,
        "context_cap": p.context.cap,
        "capped_by_training": p.context.capped_by_training,
        "placement": p.placement,
        "mmproj": req.projector,
        "devices": devices,
        "shortfalls": [
            {
                "device": s.label,
                "used_bytes": s.used_bytes,
                "capacity_bytes": s.capacity_bytes,
                "over_bytes": s.over_bytes,
            }
            for s in p.shortfalls
        ],
        "notes": list(p.notes),
        "objective": p.objective.goal.value,
        "memory_notes": list(memory_notes(p.context.usage)),
        "verdict": verdict_json(verdict_of(req, p)) | {"text": verdict_text(req, p)},
        "accuracy": accuracy_json(accuracy_band(req.profile, p.estimate)) if p.estimate is not None else None,
        "largest_n_ctx": p.largest.n_ctx if p.largest is not None else 0,
        "ignored_flags": list(req.ignored),
        "unmodelled_flags": list(req.unmodelled),
        "engine": p.settings.engine.value,
        "argv": list(argv),
        "command": join(argv, shell, exact_text=False),
        "shell": shell.value,
        "rpc_hosts": [{"endpoint": h.endpoint, "argv": list(h.argv)} for h in rpc_server_commands(req.rpc)],
    }


def verdict_of(req: PlanRequest, p: Plan) -> Verdict:
    return plan_verdict(p, req.machine)


def verdict_text(req: PlanRequest, p: Plan) -> str:
    """The verdict in the one sentence the window shows too (`fitplan.core.plan.summary`)."""
    return verdict_words(p, verdict_of(req, p), p.settings.n_ctx, bool(req.machine.gpus)).text


def format_text(req: PlanRequest, p: Plan, argv: Sequence[str], shell: Shell, why: str = "") -> str:
    lines: list[str] = []
    prof = req.profile
    name = prof.name or os.path.basename(prof.path)
    head = f"{name}  ({prof.architecture}, {prof.file_type}, weights {out.size(prof.weight_bytes)})"
    lines.append(out.style(head, out.BOLD))
    verdict = out.style("fits", out.GREEN) if p.fits else out.style("does not fit", out.RED, out.BOLD)
    lines.append(f"plan: {verdict}: {p.binding}")
    v = verdict_of(req, p)
    if p.fits:
        largest = p.largest
        more = ""
        if largest is not None and largest.n_ctx > p.settings.n_ctx:
            more = f", up to {largest.n_ctx} fit at this placement"
        lines.append(
            f"context: {p.settings.n_ctx} tokens (grid step {p.context.step}, training cap {p.context.cap}{more})"
        )
    lines.append(f"margins: {v.margin_text()}; slots: {slots_words(v)}")
    lines.append(f"objective: {p.objective.describe()}")
    if why:
        lines.append(f"why this context: {why}")
    lines.append(f"placement: {p.placement.description}")
    if req.projector is not None:
        how = ", the repository's own: -hf loads it (--no-mmproj leaves it out)" if req.projector_auto else ""
        lines.append(f"projector: {os.path.basename(req.projector)} ({out.size(req.projector_bytes)}){how}")
    if p.estimate is not None:
        lines.append(accuracy_band(prof, p.estimate).text)
    lines.append("")
    rows = []
    for u in p.context.usage:
        rows.append(
            [
                u.label,
                out.size(u.used_bytes),
                out.size(u.capacity_bytes) if u.checked else "not checked",
                out.size(u.headroom_bytes),
                "ok" if u.fits else out.style("OVER", out.RED),
            ]
        )
    lines.append(out.table(["device", "uses", "may use", "left", ""], rows, align="lrrrl"))
    for n in (*memory_notes(p.context.usage), *p.notes):
        lines.append(f"note: {n}")
    if req.unmodelled:
        lines.append("not modelled (memory not estimated): " + ", ".join(req.unmodelled))
    if req.ignored:
        lines.append("kept as given (no memory effect): " + ", ".join(req.ignored))
    lines.append("")
    exp = ollama_of(req, p)
    if exp is not None:
        lines.append(ollama_text(exp, shell))
        return "\n".join(lines)
    lines.append(f"command ({shell.value}):")
    lines.append(join(argv, shell, multiline=True, exact_text=out.text_encoding()))
    hosts = rpc_server_commands(req.rpc)
    if hosts:
        lines.append("")
        lines.append("on each RPC host:")
        for h in hosts:
            lines.append(f"  {h.endpoint}:  {join(h.argv, shell)}")
        lines.append(out.style("warning: " + hosts[0].warning, out.YELLOW))
    return "\n".join(lines)


def _others(args: argparse.Namespace, req: PlanRequest, machine: Machine | None) -> tuple[str, ...]:
    """Who else holds the detected GPUs' memory (none for assumed GPUs or a machine given by the caller)."""
    if args.assume_gpu or machine is not None:
        return ()
    from fitplan.core import hardware

    return held_by_others(req.machine, hardware.detect_hardware().gpus)


def _print_others(others: Sequence[str]) -> None:
    if others:
        print("")
        print("other programs (read from the driver):")
        print("\n".join(f"  {line}" for line in others))


def _print_alternatives(alts: Sequence[Alternative]) -> None:
    if alts:
        print("")
        print("what would change it:")
        for a in alts:
            speed = a.speed_words()
            print(f"  {a.describe()}" + (f" ({speed})" if speed else ""))


#: between two models of a set plan (`commands.plan_multi`)
SET_SEPARATOR = "+"
#: llama-server's router flags: a set plan
SET_PRESET_FLAGS = ("--models-preset", "--models-max")


def is_set(args: argparse.Namespace, extra: Sequence[str]) -> bool:
    """Several models, a `+`, or a router preset: a set plan rather than one model's."""
    return (
        bool(extra and not extra[0].startswith("-"))
        or SET_SEPARATOR in extra
        or any(f in extra for f in SET_PRESET_FLAGS)
        or str(args.model).lower().endswith(".ini")
    )


def run(args: argparse.Namespace, extra: list[str], machine: Machine | None = None) -> int:
    if is_set(args, extra):
        from fitplan.commands import plan_multi  # a set plan: several models or a router preset

        return plan_multi.run(args, extra, machine)
    req = build_request(args, extra, machine)
    got = answer(req.query)
    p, alts, why, speed = got.plan, got.alternatives, got.why, got.speed
    shell = Shell(args.shell) if args.shell else default_shell()
    argv = command_argv(req, p, args.program)
    if args.json:
        doc = plan_to_dict(req, p, argv, shell)
        doc["speed"] = speed_json(speed)
        doc["alternatives"] = [dataclasses.asdict(a) for a in alts]
        doc["why"] = why
        doc["other_programs"] = list(_others(args, req, machine))
        exp = ollama_of(req, p)
        if exp is not None:
            doc["ollama"] = ollama_json(exp, shell)
        out.print_json(doc)
    else:
        print(format_text(req, p, argv, shell, why))
        if p.fits:
            print(speed_text(speed))
        _print_others(_others(args, req, machine))
        _print_alternatives(alts)
        if p.fits and p.settings.engine is not Engine.OLLAMA:
            notes = annotate(p, None, req.profile, req.machine, req.estimate_fn).notes
            if notes:
                print("")
                print("what the flags do:")
                for n in notes:
                    flag = f"{n.flag} {n.value}" if n.value is not None else n.flag
                    print(f"  {flag}: {n.note}")
    sys.stdout.flush()
    return out.EXIT_OK if p.fits else out.EXIT_DOES_NOT_FIT
