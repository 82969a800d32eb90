"""`fitplan plan A.gguf B.gguf ...` and `fitplan plan --models-preset router.ini`: one plan for a set of models that
run at the same time (`fitplan.core.plan.multi`), with one budget per device, and the commands, the router preset
and the llama-swap configuration that launch it.

Models are given in priority order (the first one stays resident first). Flags after the models apply to every
model; flags for one model follow it after a `+`: `fitplan plan chat.gguf -c 16384 + embed.gguf --embedding +
rerank.gguf --reranking`. A router preset gives one model per section (its `[*]` section applies to all).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fitplan.commands import _output as out
from fitplan.commands._speed import speed_json, speed_of, speed_text
from fitplan.commands.estimate import engine_of
from fitplan.commands.plan import SET_SEPARATOR, PlanRequest, build_request, detect_machine, is_set
from fitplan.core import hardware
from fitplan.core.base.devices import Machine
from fitplan.core.base.errors import FlagError
from fitplan.core.base.files import read_regular_file
from fitplan.core.base.launch_settings import Engine
from fitplan.core.base.numbers import int_or_none
from fitplan.core.base.results import TERM_ORDER
from fitplan.core.hardware.probe import ProbeResult
from fitplan.core.launch.command_line import PRESET_GLOBAL_SECTION, read_preset_ini
from fitplan.core.launch.set_launch import llama_swap_yaml, router_command, router_preset, set_commands
from fitplan.core.launch.shell import Shell, default_shell, join
from fitplan.core.plan.multi import DeviceBudget, ModelChoice, MultiModel, MultiPlan, MultiRequest, plan_set
from fitplan.core.plan.usage import gib, held_by_others
from fitplan.core.speed import PlanSpeed

__all__ = ["is_set", "run"]

_SEPARATOR = SET_SEPARATOR


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    path: str
    flags: tuple[str, ...]


def _take(extra: list[str], flag: str) -> str | None:
    """Removes `flag VALUE` from `extra` and returns VALUE (the last one given)."""
    value = None
    while flag in extra:
        i = extra.index(flag)
        if i + 1 >= len(extra):
            raise FlagError(f"{flag} needs a value")
        value = extra[i + 1]
        del extra[i : i + 2]
    return value


def _name(path: str, taken: set[str]) -> str:
    base = os.path.basename(path).removesuffix(".gguf") or "model"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def _entries(args: argparse.Namespace, extra: Sequence[str]) -> tuple[list[_Entry], int]:
    """The models in priority order with their own flags, and --models-max (0 when not given)."""
    rest = list(extra)
    preset = _take(rest, "--models-preset")
    max_text = _take(rest, "--models-max")
    models_max = int_or_none(max_text, 0, 1 << 16) if max_text is not None else 0
    if models_max is None:
        raise FlagError(f"--models-max {max_text!r}: expected a count (0 = no limit)")
    tokens = [str(args.model), *rest]
    if tokens[0].lower().endswith(".ini"):
        if preset is not None:
            raise FlagError("give the router preset once")
        preset, tokens = tokens[0], tokens[1:]
    taken: set[str] = set()
    entries: list[_Entry] = []
    if preset is not None:
        entries += _preset_entries(preset, taken)
    segments: list[list[str]] = [[]]
    for t in tokens:
        if t == _SEPARATOR:
            segments.append([])
        else:
            segments[-1].append(t)
    common: list[str] = []
    if len(segments) == 1:
        # A.gguf B.gguf ... [flags for all of them]
        words = segments[0]
        k = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
        segments = [[w] for w in words[:k]]
        common = words[k:]
    for seg in segments:
        if not seg:
            continue
        if seg[0].startswith("-"):
            raise FlagError(f"each model after '{_SEPARATOR}' comes first, then its flags (got {seg[0]!r})")
        entries.append(_Entry(_name(seg[0], taken), seg[0], (*seg[1:], *common)))
    if not entries:
        raise FlagError("no model to plan")
    return entries, models_max


def _preset_entries(path: str, taken: set[str]) -> list[_Entry]:
    try:
        text = read_regular_file(path, 1 << 20).decode("utf-8")
    except (OSError, ValueError) as exc:
        raise FlagError(f"the router preset {path!r}: {exc}") from None
    sections = read_preset_ini(text)
    common = sections.pop(PRESET_GLOBAL_SECTION, ())
    out_: list[_Entry] = []
    for name, words in sections.items():
        args = [*common, *words]
        if "-m" not in args:
            raise FlagError(f"preset section [{name}] names no model (model = PATH)")
        i = args.index("-m")
        model = args[i + 1]
        del args[i : i + 2]
        taken.add(name)
        out_.append(_Entry(name, model, tuple(args)))
    return out_


def _request(args: argparse.Namespace, extra: Sequence[str], machine: Machine | None) -> MultiRequest:
    if engine_of(args) is Engine.OLLAMA:
        raise FlagError(
            "a set of models is launched as llama-server processes: plan ollama's models one at a time"
        )
    entries, models_max = _entries(args, extra)
    base = machine if machine is not None else detect_machine(args.assume_gpu, args.host_ram)
    models: list[MultiModel] = []
    first: PlanRequest | None = None
    for e in entries:
        ns = argparse.Namespace(**{**vars(args), "model": e.path})
        req = build_request(ns, list(e.flags), base)
        first = first or req
        models.append(MultiModel(e.name, req.profile, req.pins, req.estimate_fn, e.path, req.passthrough))
    assert first is not None
    return MultiRequest(tuple(models), first.machine, first.margin, models_max)


def _status_text(p: MultiPlan) -> str:
    if p.unfit:
        return out.style(f"{len(p.unfit)} of {len(p.models)} models do not fit even alone", out.RED, out.BOLD)
    if not p.swapped:
        return out.style(f"all {len(p.models)} models resident together", out.GREEN)
    return out.style(
        f"{len(p.resident)} resident, {len(p.swapped)} loaded in turn (one at a time)", out.YELLOW
    )


def _terms(m: ModelChoice, budgets: Sequence[DeviceBudget]) -> list[tuple[str, list[tuple[str, int]]]]:
    """(device, [(term kind, bytes)]) for every device that holds some of the model, in the estimate's term order."""
    out: list[tuple[str, list[tuple[str, int]]]] = []
    for b, de in zip(budgets, m.estimate.devices, strict=True):
        kinds = [(k.value, de.bytes_of(k)) for k in TERM_ORDER if de.bytes_of(k)]
        if kinds:
            out.append((b.label, kinds))
    return out


def format_text(p: MultiPlan, shell: Shell, program: str) -> str:
    lines = [out.style(f"set plan: {_status_text(p)}", out.BOLD), f"margins: {p.margin.describe()}", ""]
    rows = []
    for m in p.models:
        ctx = str(m.settings.n_ctx)
        rows.append([m.name, m.status, ctx, m.placement.description, *(out.size(b) for b in m.use)])
    labels = [b.label for b in p.budgets]
    lines.append(out.table(["model", "status", "context", "placement", *labels], rows))
    lines.append("terms per device:")
    for m in p.models:
        for label, kinds in _terms(m, p.budgets):
            lines.append(f"  {m.name} on {label}: " + ", ".join(f"{k} {gib(b)}" for k, b in kinds))
    for m in p.models:
        if m.note:
            lines.append(f"note: {m.name}: {m.note}")
    lines.append("")
    lines.append("budget per device (what each model holds; the swap slot is its largest swapped model):")
    brows = []
    for b in p.budgets:
        held = ", ".join(f"{n} {gib(x)}" for n, x in b.resident) or "-"
        swap = f"{b.swap[0]} {gib(b.swap[1])}" if b.swap else "-"
        cap = out.size(b.capacity_bytes) if b.checked else "not checked"
        ok = "ok" if b.fits else out.style("OVER", out.RED)
        brows.append([b.label, held, swap, out.size(b.kept_bytes), cap, out.size(b.headroom_bytes), ok])
    lines.append(out.table(["device", "resident", "swap slot", "kept", "may use", "left", ""], brows))
    lines.append("")
    lines.append(f"commands, one llama-server per model ({shell.value}):")
    for name, argv in set_commands(p, program):
        lines.append(f"# {name}")
        lines.append(join(argv, shell, exact_text=out.text_encoding()))
    lines.append("")
    lines.append("or llama-server's router with this preset (router.ini):")
    lines.append(join(router_command(p, "router.ini", program), shell, exact_text=out.text_encoding()))
    if p.router_models_max < p.models_max:
        lines.append(
            f"# the router unloads the least recently used model, not a swapped one: --models-max "
            f"{p.router_models_max} is what fits in any combination; llama-swap's groups below keep the residents"
        )
    lines.append(router_preset(p).rstrip("\n"))
    lines.append("")
    lines.append("or llama-swap (config.yaml):")
    lines.append(llama_swap_yaml(p, program).rstrip("\n"))
    return "\n".join(lines)


def to_dict(p: MultiPlan, shell: Shell, program: str) -> dict[str, object]:
    return {
        "fits": p.fits,
        "margins": p.margin.describe(),
        "models_max": p.models_max,
        "router_models_max": p.router_models_max,
        "grown": p.grown,
        "models": [
            {
                "name": m.name,
                "status": m.status,
                "n_ctx": m.settings.n_ctx,
                "placement": m.placement,
                "use_bytes": list(m.use),
                "terms": [{"device": d, "bytes": dict(kinds)} for d, kinds in _terms(m, p.budgets)],
                "note": m.note,
            }
            for m in p.models
        ],
        "devices": [
            {
                "device": b.label,
                "capacity_bytes": b.capacity_bytes,
                "kept_bytes": b.kept_bytes,
                "resident": [{"model": n, "bytes": x} for n, x in b.resident],
                "swap": {"model": b.swap[0], "bytes": b.swap[1]} if b.swap else None,
                "used_bytes": b.used_bytes,
                "fits": b.fits,
            }
            for b in p.budgets
        ],
        "commands": [
            {"model": n, "argv": list(a), "command": join(a, shell)} for n, a in set_commands(p, program)
        ],
        "router_argv": list(router_command(p, "router.ini", program)),
        "router_preset": router_preset(p),
        "llama_swap": llama_swap_yaml(p, program),
    }


def _speeds(req: MultiRequest, p: MultiPlan, args: argparse.Namespace) -> dict[str, PlanSpeed | None]:
    """Each loaded model's expected speed at its placement in the set (`plan_speed`, as `plan` prints it)."""
    profiles = {m.name: m.profile for m in req.models}
    return {
        m.name: speed_of(profiles[m.name], req.machine, m.settings, args)
        for m in p.models
        if m.loadable and m.name in profiles
    }


def run(
    args: argparse.Namespace,
    extra: list[str],
    machine: Machine | None = None,
    detect: Callable[[], ProbeResult] | None = None,
) -> int:
    req = _request(args, extra, machine)
    p = plan_set(req)
    speeds = _speeds(req, p, args)
    shell = Shell(args.shell) if args.shell else default_shell()
    others: tuple[str, ...] = ()
    if not args.assume_gpu and (machine is None or detect is not None):
        others = held_by_others(req.machine, (detect or hardware.detect_hardware)().gpus)
    if args.json:
        doc = to_dict(p, shell, args.program) | {"other_programs": list(others)}
        doc["speeds"] = {name: speed_json(ps) for name, ps in speeds.items()}
        out.print_json(doc)
    else:
        text = format_text(p, shell, args.program)
        if speeds:
            head, sep, tail = text.partition("\nbudget per device")
            lines = ["speed of each model alone (the speed model; sharing the GPU slows both):"]
            lines += [f"  {name}: {speed_text(ps).removeprefix('speed: ')}" for name, ps in speeds.items()]
            text = head + "\n" + "\n".join(lines) + "\n" + sep + tail
        if others:
            head, sep, tail = text.partition("\ncommands, ")
            text = head + "\n".join(["other programs (read from the driver):", *others, ""]) + sep + tail
        print(text)
    return out.EXIT_OK if p.fits else out.EXIT_DOES_NOT_FIT
