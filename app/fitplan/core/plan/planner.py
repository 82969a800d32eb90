"""Plan a launch: where the weights go and the largest context, by the user's objective (`objective`).

The user's pins are always kept: `-c`, `-np`, `-kvu`/`-no-kvu`, `-ngl`, `-ts`, `--n-cpu-moe` (and `--cpu-moe`), `-ot`,
the cache types, flash attention, `--min-ctx` and "all weights on the GPU" (`--all-on-gpu`), along with every other
setting in `Pins.base`. The plan only chooses `-ngl`, `--n-cpu-moe`, `-ts` (as layer counts) and `-c`, and turns
`--fit` off. The search (`solver`) and the largest-context search (`search`) are checked against an exhaustive
search of the same space with the same estimator and the same objective (`oracle`, in the test suite).

Leaving the GPUs out (`-dev none`) is a placement like the others: when no device list is given and nothing pins
weights to a GPU, the all-on-CPU plan is planned too where it could win by the objective (nothing fits with the
GPUs, or the best placement offloads nothing, or the context comes first).

The estimate itself is injected (`EstimateFn`): by default `fitplan.core.estimate.estimator.estimate`; so is the
speed of a plan (`objective.SpeedOf`) when the objective has a generation floor.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from fitplan.core.base.devices import Machine
from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import (
    NGL_ALL,
    NGL_AUTO,
    Engine,
    LaunchSettings,
    MmprojPlacement,
    SplitMode,
)
from fitplan.core.base.results import Estimate
from fitplan.core.engines import context_grid
from fitplan.core.memory.context import N_CTX_PAD, trained_context
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.finer import finer_search
from fitplan.core.plan.objective import (
    Goal,
    Key,
    Objective,
    SpeedOf,
    key,
    min_gpu_headroom,
    placement_key,
    point_key,
    tie_key,
)
from fitplan.core.plan.search import (
    ContextFit,
    EstimateFn,
    Evaluator,
    context_fit,
    context_pad,
    context_step,
    default_estimate_fn,
    kv_streams,
    largest_true,
    training_cap,
)
from fitplan.core.plan.solver import Check, Point, Solver
from fitplan.core.plan.space import (
    FFN_FRACTION_WORDS,
    Finer,
    Placement,
    PlacementSpace,
    cpu_experts_words,
    describe_placement,
)
from fitplan.core.plan.usage import DeviceUse, MarginPolicy, Shortfall, device_label, shortfalls
from fitplan.core.plan.verdict import FitLevel, Verdict, judge

__all__ = [
    "CTX_PAD",
    "MIN_PLAN_CTX",
    "ContextFit",
    "DeviceUse",
    "EstimateFn",
    "MarginPolicy",
    "Pins",
    "Placement",
    "Plan",
    "Shortfall",
    "context_pad",
    "context_step",
    "default_estimate_fn",
    "device_label",
    "kv_streams",
    "plan",
    "plan_at",
    "plan_key",
    "plan_verdict",
    "training_cap",
    "without_gpus",
]

#: llama_context pads n_ctx (per stream) to a multiple of 256.
CTX_PAD = N_CTX_PAD
#: The smallest context the placement search keeps (llama.cpp's `--fit-ctx` default).
MIN_PLAN_CTX = 4096


@dataclass(frozen=True, slots=True)
class Pins:
    """The user's fixed choices. None = let the planner choose (or keep llama-server's default).

    `base` carries every other setting unchanged (flash attention, batch sizes, paths, draft, devices, the engine
    and its own fields ...): the plan only sets the context, the placement (-ngl, --n-cpu-moe, -ts) and --fit off.
    """

    base: LaunchSettings = field(default_factory=LaunchSettings)
    n_ctx: int | None = None  # -c (0 = the training context)
    min_ctx: int | None = None  # "context at least N" tokens per sequence (x n_stream if not unified)
    n_parallel: int | None = None  # -np
    kv_unified: bool | None = None  # -kvu / -no-kvu
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    n_gpu_layers: int | None = None  # -ngl (N, NGL_ALL)
    tensor_split: tuple[float, ...] | None = None  # -ts
    n_cpu_moe: int | None = None  # --n-cpu-moe
    mmproj: MmprojPlacement | None = None
    all_weights_on_gpu: bool = False  # "keep all weights on GPU": never move experts or layers to the CPU
    no_kv_offload: bool | None = None  # -nkvo / -kvo (None: the plan may choose -nkvo, `finer`)


@dataclass(frozen=True, slots=True)
class Plan:
    settings: LaunchSettings  # ready for `command.plan_to_args`
    estimate: Estimate | None  # at the planned context
    context: ContextFit
    placement: Placement
    fits: bool
    binding: str  # the constraint that decided the plan, in words
    notes: tuple[str, ...]
    shortfalls: tuple[Shortfall, ...]  # when the pins cannot fit: what is short on which device
    evaluations: int
    margin: MarginPolicy = field(default_factory=MarginPolicy)  # the margins "fits" was judged with
    #: the largest context at the plan's placement: `context` itself unless -c is pinned (None when nothing fits)
    largest: ContextFit | None = None
    objective: Objective = field(default_factory=Objective)  # what the plan was chosen for
    #: the pins that keep weights on the CPU, as flags ("--n-cpu-moe 10"); empty when the planner chose the offload
    pinned_offload: str = ""
    context_pinned: bool = False  # -c was given: the context is the user's, not the plan's


#: the Pins fields that, when set, are copied into the LaunchSettings field of the same name
_PINNED_SETTINGS = (
    "n_parallel",
    "kv_unified",
    "cache_type_k",
    "cache_type_v",
    "mmproj",
    "no_kv_offload",
    "tensor_split",
    "n_cpu_moe",
)


def _base_settings(pins: Pins) -> LaunchSettings:
    changes: dict[str, object] = {"fit": False}
    for name in _PINNED_SETTINGS:
        value = getattr(pins, name)
        if value is not None:
            changes[name] = value
    return dataclasses.replace(pins.base, **changes)  # type: ignore[arg-type]


def _resolve_ngl(ngl: int, profile: ModelProfile) -> int:
    if ngl in (NGL_ALL, NGL_AUTO) or ngl < 0:
        return profile.n_layer_all + 1
    return min(ngl, profile.n_layer_all + 1)


@dataclass(frozen=True, slots=True)
class Problem:
    """One planning problem, resolved: the space to search and the context floor."""

    profile: ModelProfile
    machine: Machine
    pins: Pins
    base: LaunchSettings
    space: PlacementSpace
    has_gpu: bool
    ngl_choices: tuple[int, int]
    ncmoe_choices: tuple[int, int]
    need_ctx: int  # the context floor (the pinned context when pinned)
    pinned_ctx: int | None
    notes: tuple[str, ...]
    may_leave_out_gpus: bool = False  # `-dev none` is a choice: no device list given, nothing pins a GPU


_NO_GPU_NOTE = "no GPU: everything runs on the CPU"


def without_gpus(pins: Pins) -> Pins:
    """The same pins with the GPUs left out (`-dev none`)."""
    return dataclasses.replace(pins, base=dataclasses.replace(pins.base, devices=()))


def _may_leave_out_gpus(pins: Pins, base: LaunchSettings, has_gpu: bool) -> bool:
    """`-dev none` is a placement to try: no device list given, nothing pins weights to a GPU, and an engine whose
    launch can say so (the ollama export writes num_gpu, which is -ngl, and has no -dev none)."""
    return (
        has_gpu
        and base.engine is not Engine.OLLAMA
        and base.devices is None
        and pins.n_gpu_layers in (None, 0)
        and pins.tensor_split is None
        and not pins.all_weights_on_gpu
    )


def problem_of(profile: ModelProfile, machine: Machine, pins: Pins) -> Problem:
    base = _base_settings(pins)
    notes: list[str] = []
    grid = context_grid(profile, base)
    trained = trained_context(profile, base)
    cap = grid.training_cap(trained)
    pinned_ctx: int | None = None
    if pins.n_ctx is not None:
        pinned_ctx = pins.n_ctx if pins.n_ctx > 0 else trained
        need_ctx = pinned_ctx
    else:
        want = pins.min_ctx if pins.min_ctx is not None else min(MIN_PLAN_CTX, cap // grid.n_stream)
        need_ctx = (
            max(1, math.ceil(want / N_CTX_PAD)) * N_CTX_PAD * grid.n_stream
        )  # per sequence, as --fit-ctx
        if need_ctx > cap:
            notes.append(
                f"the minimum context {want} is above the model's training length {trained}: "
                f"planned for at most {cap}"
            )
            need_ctx = cap
    space = PlacementSpace(profile)
    L = space.L
    has_gpu = (
        bool(machine.gpus)
        and base.devices != ()
        and not (base.split_mode is SplitMode.NONE and base.main_gpu < 0)
    )
    ncmoe0 = pins.n_cpu_moe if pins.n_cpu_moe is not None else base.n_cpu_moe
    if not has_gpu:
        ngl_choices, ncmoe_choices = (0, 0), (ncmoe0, ncmoe0)
    else:
        if pins.n_gpu_layers is not None:
            g = _resolve_ngl(pins.n_gpu_layers, profile)
            ngl_choices = (g, g)
        else:
            ngl_choices = (L + 1, L + 1) if pins.all_weights_on_gpu else (0, L + 1)
        free_moe = (
            space.is_moe and pins.n_cpu_moe is None and not base.cpu_moe and not pins.all_weights_on_gpu
        )
        ncmoe_choices = (0, space.max_ncmoe) if free_moe else (ncmoe0, ncmoe0)
    return Problem(
        profile,
        machine,
        pins,
        base,
        space,
        has_gpu,
        ngl_choices,
        ncmoe_choices,
        need_ctx,
        pinned_ctx,
        tuple(notes),
        _may_leave_out_gpus(pins, base, has_gpu),
    )


def plan(
    profile: ModelProfile,
    machine: Machine,
    pins: Pins | None = None,
    *,
    objective: Objective | None = None,
    speed_of: SpeedOf | None = None,
    margin: MarginPolicy | None = None,
    estimate_fn: EstimateFn | None = None,
    mmproj: ModelProfile | None = None,
    draft: ModelProfile | None = None,
    reserve_bytes: int | None = None,
) -> Plan:
    """The best plan for the pins by the objective (`objective`; by default the fastest placement first)."""
    pins = pins or Pins()
    margin = margin or MarginPolicy()
    objective = objective or Objective()
    if objective.min_gen_tps is not None and speed_of is None:
        raise SettingsError("a generation speed floor needs the speed of each plan (no speed model given)")
    fn = estimate_fn or default_estimate_fn(mmproj=mmproj, draft=draft, reserve_bytes=reserve_bytes)
    ev = Evaluator(profile, machine, margin, fn)
    pb = problem_of(profile, machine, pins)
    best = _plan_problem(pb, ev, margin, objective, speed_of)
    if pb.may_leave_out_gpus and _cpu_may_win(best, pb, objective):
        cpu = _plan_problem(problem_of(profile, machine, without_gpus(pins)), ev, margin, objective, speed_of)
        if cpu.fits and (not best.fits or plan_key(cpu) > plan_key(best)):
            best = _left_out(cpu, best)
        elif not best.fits and not cpu.fits and not cpu.shortfalls and best.shortfalls:
            best = cpu  # fits in memory without the GPUs, only too slow: that is what to say
    return dataclasses.replace(best, evaluations=ev.evaluations)


def _left_out(cpu: Plan, with_gpus: Plan) -> Plan:
    """The plan without the GPUs, saying so and what the GPUs would have given."""
    note = "-dev none leaves the GPUs out: everything runs on the CPU; with them " + (
        f"the plan is {with_gpus.placement.description} at {with_gpus.settings.n_ctx}"
        if with_gpus.fits
        else "it does not fit (" + with_gpus.binding + ")"
    )
    placement = dataclasses.replace(cpu.placement, description="everything on the CPU (-dev none)")
    notes = tuple(n for n in cpu.notes if n != _NO_GPU_NOTE)
    return dataclasses.replace(cpu, placement=placement, notes=(*notes, note))


def plan_key(p: Plan) -> Key:
    """`objective.key` of a plan that fits, by the goal it was planned for."""
    pk = placement_key(p.placement.objective_layers, p.placement.off_gpu_bytes)
    ties = tie_key(p.settings.n_ctx, p.placement.n_cpu_moe, min_gpu_headroom(p.context.usage))
    return key(pk, ties, p.objective.goal)


def _cpu_may_win(best: Plan, pb: Problem, objective: Objective) -> bool:
    """Whether the plan without the GPUs (every weight off them) could be better than `best`: when `best` fits, only
    by a longer context (longest context first) or, at `best`'s own placement key (-ngl 0), by the ties: the GPUs'
    headroom. -ngl 0 is not the costliest point for the GPUs: the first GPU still runs the host layers' matrix
    products (op offload) and copies the output matrix in only for its output phase, or not at all below 32
    outputs, so it can reach the training length or the pinned context and still lose the tie to -dev none."""
    if not best.fits or best.placement.n_gpu_layers == 0:
        return True
    return objective.goal is Goal.CONTEXT and pb.pinned_ctx is None and not best.context.capped_by_training


def _plan_problem(
    pb: Problem, ev: Evaluator, margin: MarginPolicy, objective: Objective, speed_of: SpeedOf | None
) -> Plan:
    solver = Solver(ev, pb.base, pb.space, tensor_split=pb.pins.tensor_split)
    floor_ctx = pb.need_ctx
    if objective.goal is Goal.CONTEXT and pb.pinned_ctx is None:
        floor_ctx = _context_first(pb, solver, margin, objective, speed_of)
    found, last = search_all(pb, solver, floor_ctx)
    if not found:
        return _no_fit(pb, solver, last, margin, objective)
    point, cf = _best_context(pb, solver, found, floor_ctx, objective.goal)
    best = _fit(pb, solver, point, cf, margin, objective)
    if objective.min_gen_tps is not None and speed_of is not None:
        return _speed_floor(pb, solver, best, point, objective.min_gen_tps, speed_of)
    return best


def search_all(pb: Problem, solver: Solver, n_ctx: int) -> tuple[list[Check], Check]:
    """The whole-layer search, then the placements finer than whole layers where they may do better (`finer`)."""
    found, last = solver.search(pb.ngl_choices, pb.ncmoe_choices, n_ctx)
    return finer_search(pb, solver, found, last, n_ctx)


def _context_first(
    pb: Problem, solver: Solver, margin: MarginPolicy, objective: Objective, speed_of: SpeedOf | None
) -> int:
    """`Goal.CONTEXT`: the largest context on the grid at which some placement fits (and, with a speed floor, whose
    best placement keeps it), bisected: memory only grows with the context. The floor when none does."""
    grid = context_grid(pb.profile, pb.base)
    step = grid.step
    k_lo = max(1, math.ceil(pb.need_ctx / step))
    k_hi = max(k_lo, grid.training_cap(trained_context(pb.profile, pb.base)) // step)

    def feasible(k: int) -> bool:
        found, _ = search_all(pb, solver, k * step)
        if not found:
            return False
        if objective.min_gen_tps is None or speed_of is None:
            return True
        best = max(
            (_fixed_context(pb, solver, c.point, k * step, objective.goal) for c in found), key=_by_key
        )
        at = _fit(pb, solver, best.point, best.context, margin, objective)
        return speed_of(at) >= objective.min_gen_tps

    k = largest_true(k_lo, k_hi, feasible)
    return pb.need_ctx if k is None else max(pb.need_ctx, k * step)


def plan_at(pb: Problem, solver: Solver, p: Point, n_ctx: int, objective: Objective) -> Plan:
    """The plan of one point at one context (its split rebalanced for it): what a `SpeedOf` is asked about."""
    sc = _fixed_context(pb, solver, p, n_ctx, objective.goal)
    return _fit(pb, solver, sc.point, sc.context, solver.ev.margin, objective)


def _speed_floor(
    pb: Problem, solver: Solver, best: Plan, point: Point, floor: float, speed_of: SpeedOf
) -> Plan:
    """The speed floor at the chosen placement: the plan itself when it keeps the floor, else the largest smaller
    context that does; when even the context floor is too slow, no placement is fast enough (`objective`)."""
    if speed_of(best) >= floor:
        return best
    step = best.context.step
    k_lo = max(1, math.ceil(pb.need_ctx / step))
    k_hi = best.settings.n_ctx // step - 1
    goal = best.objective.goal

    def at(k: int) -> Plan:
        sc = _fixed_context(pb, solver, point, k * step, goal)
        return _fit(
            pb, solver, sc.point, sc.context, best.margin, best.objective, why=f"at least {floor:g} t/s"
        )

    k = None if pb.pinned_ctx is not None else largest_true(k_lo, k_hi, lambda k: speed_of(at(k)) >= floor)
    if k is not None:
        return at(k)
    slow = at(k_lo) if pb.pinned_ctx is None else best
    tps = speed_of(slow)
    binding = (
        f"does not reach {floor:g} t/s generation: the fastest placement ({slow.placement.description}) gives "
        f"{tps:.1f} t/s at -c {slow.settings.n_ctx}"
    )
    return dataclasses.replace(slow, fits=False, binding=binding)


@dataclass(frozen=True, slots=True)
class _Scored:
    point: Point
    context: ContextFit
    key: Key


def _fixed_context(pb: Problem, solver: Solver, p: Point, n_ctx: int, goal: Goal) -> _Scored:
    """One point at a given context (its split rebalanced for it)."""
    ev = solver.ev
    split = solver.balance(p.ngl, p.ncmoe, p.split, n_ctx, p.finer) if p.split is not None else None
    q = dataclasses.replace(p, split=split)
    est, usage = ev(solver.settings(q, n_ctx))
    step = context_grid(pb.profile, pb.base).step
    cap = training_cap(pb.profile, pb.base)
    cf = ContextFit(n_ctx, step, cap, n_ctx >= cap, est, None, usage, "", (), 0)
    return _scored(pb, q, cf, goal)


def _context_at(pb: Problem, solver: Solver, p: Point, floor_ctx: int, goal: Goal) -> _Scored:
    """The largest context of one point (its split rebalanced for the context found), or the pinned one."""
    ev = solver.ev
    if pb.pinned_ctx is not None:
        return _fixed_context(pb, solver, p, pb.pinned_ctx, goal)
    cf = context_fit(ev, solver.settings(p, 0), min_ctx=floor_ctx)
    q = p
    for _ in range(3):  # rebalance for the context found, then search again while that raises the context
        if q.split is None or not cf.fits:
            break
        better = solver.balance(q.ngl, q.ncmoe, q.split, cf.n_ctx, q.finer)
        if better == q.split:
            break
        cand = dataclasses.replace(q, split=better)
        cf2 = context_fit(ev, solver.settings(cand, 0), min_ctx=floor_ctx)
        if cf2.n_ctx < cf.n_ctx:
            break
        q, cf = cand, cf2
    return _scored(pb, q, cf, goal)


def _scored(pb: Problem, p: Point, cf: ContextFit, goal: Goal) -> _Scored:
    ties = tie_key(cf.n_ctx, p.ncmoe, min_gpu_headroom(cf.usage))
    return _Scored(p, cf, key(point_key(pb.space, p.ngl, p.ncmoe, pb.has_gpu, p.finer), ties, goal))


def _by_key(s: _Scored) -> Key:
    return s.key


def _best_context(
    pb: Problem, solver: Solver, found: list[Check], floor_ctx: int, goal: Goal
) -> tuple[Point, ContextFit]:
    """The best of the solver's points by the objective (`objective.key`)."""
    # at most two candidates (`Solver.search`): each is scored whole, so that the objective alone decides
    scored = [_context_at(pb, solver, c.point, floor_ctx, goal) for c in found]
    best = max(scored, key=_by_key)
    return best.point, best.context


def _no_fit(pb: Problem, solver: Solver, last: Check, margin: MarginPolicy, objective: Objective) -> Plan:
    p = last.point
    s = solver.settings(p, pb.need_ctx)
    est, usage = solver.ev(s)
    shorts = shortfalls(usage)
    n_gpus = len(pb.machine.gpus) if pb.has_gpu else 0
    placement = describe_placement(
        pb.space, p.ngl if pb.has_gpu else 0, p.ncmoe, p.split or (), n_gpus, _finer_of(pb, p)
    )
    what = f"-c {pb.need_ctx}" if pb.pinned_ctx is not None else f"the minimum context {pb.need_ctx}"
    lead = "does not fit with all weights on the GPU" if pb.pins.all_weights_on_gpu else "does not fit"
    binding = f"{lead} at {what}: " + "; ".join(sh.describe() for sh in shorts)
    grid = context_grid(pb.profile, pb.base)
    cap = grid.training_cap(trained_context(pb.profile, pb.base))
    cf = ContextFit(0, grid.step, cap, False, est, None, usage, shorts[0].label if shorts else "", shorts, 0)
    return Plan(
        s,
        est,
        cf,
        placement,
        False,
        binding,
        pb.notes,
        shorts,
        solver.ev.evaluations,
        margin,
        objective=objective,
    )


def _fit(
    pb: Problem,
    solver: Solver,
    p: Point,
    cf: ContextFit,
    margin: MarginPolicy,
    objective: Objective,
    *,
    why: str = "",
) -> Plan:
    """The plan of point `p` at the context of `cf`; `why`: what else limited the context (a speed floor)."""
    s = dataclasses.replace(solver.settings(p, 0), n_ctx=cf.n_ctx)
    n_gpus = len(pb.machine.gpus) if pb.has_gpu else 0
    placement = describe_placement(
        pb.space, p.ngl if pb.has_gpu else 0, p.ncmoe, p.split or (), n_gpus, _finer_of(pb, p)
    )
    pinned = _pinned_offload(pb, placement)
    fixed = pb.pinned_ctx is not None or bool(why)
    largest = context_fit(solver.ev, solver.settings(p, 0)) if fixed else cf
    return Plan(
        settings=s,
        estimate=cf.estimate,
        context=cf,
        placement=placement,
        fits=True,
        binding="; ".join(_reasons(pb, placement, cf, objective, why)),
        notes=tuple(_fit_notes(pb, p, placement, objective, pinned)),
        shortfalls=(),
        evaluations=solver.ev.evaluations,
        margin=margin,
        largest=largest,
        objective=objective,
        pinned_offload=pinned,
        context_pinned=pb.pinned_ctx is not None,
    )


def _reasons(pb: Problem, placement: Placement, cf: ContextFit, objective: Objective, why: str) -> list[str]:
    """What decided the plan, in words: the context's limit, then the weights kept on the CPU."""
    reasons: list[str] = []
    if pb.pinned_ctx is not None:
        reasons.append(f"context pinned at {pb.pinned_ctx}")
    elif why:
        reasons.append(f"context limited to keep {why} generation")
    elif cf.capped_by_training:
        reasons.append(
            f"context capped at the model's training length ({trained_context(pb.profile, pb.base)})"
        )
    else:
        first = "longest context first: " if objective.goal is Goal.CONTEXT else ""
        reasons.append(f"{first}context limited by {cf.binding_label} memory")
    if placement.cpu_expert_layers:
        reasons.append(
            cpu_experts_words(
                pb.space, placement.n_cpu_moe, placement.cpu_layers, placement.cpu_expert_layers
            )
        )
    if placement.cpu_layers and pb.has_gpu:
        reasons.append(f"{placement.cpu_layers} of {pb.profile.n_layer} layers on CPU")
    reasons += finer_reasons(pb.space, placement)
    return reasons


def _pinned_offload(pb: Problem, placement: Placement) -> str:
    """The user's pins that keep weights on the CPU, as flags, when they alone do (empty when the planner chose
    some of the offload, or there is none)."""
    layers_pinned = pb.ngl_choices[0] == pb.ngl_choices[1]
    experts_pinned = pb.ncmoe_choices[0] == pb.ncmoe_choices[1]
    if not pb.has_gpu or (placement.cpu_layers and not layers_pinned):
        return ""
    if placement.cpu_expert_layers and not experts_pinned:
        return ""
    flags: list[str] = []
    if placement.cpu_layers:
        flags.append(f"-ngl {placement.n_gpu_layers}")
    if placement.cpu_expert_layers:
        flags.append("--cpu-moe" if pb.base.cpu_moe else f"--n-cpu-moe {placement.n_cpu_moe}")
    return " ".join(flags)


def _fit_notes(pb: Problem, p: Point, placement: Placement, objective: Objective, pinned: str) -> list[str]:
    notes = list(pb.notes)
    space = pb.space
    if not pb.has_gpu:
        notes.append(_NO_GPU_NOTE)
    elif (
        space.is_moe
        and pb.ncmoe_choices[0] != pb.ncmoe_choices[1]
        and p.ncmoe > 0
        and point_key(space, p.ngl, p.ncmoe, pb.has_gpu) == point_key(space, p.ngl, 0, pb.has_gpu)
    ):
        notes.append(
            f"--n-cpu-moe {p.ncmoe} moves no expert tensor but, as any tensor override, turns off pipeline "
            "parallelism: smaller compute buffers on the GPUs, slower prompt processing"
        )
    chosen_layers = placement.cpu_layers and pb.ngl_choices[0] != pb.ngl_choices[1]
    chosen_experts = placement.cpu_expert_layers and pb.ncmoe_choices[0] != pb.ncmoe_choices[1]
    if pb.pins.n_ctx is None and pb.has_gpu and (chosen_layers or chosen_experts):
        if objective.goal is Goal.CONTEXT:
            notes.append(
                "placement chosen for the longest context (--objective context); a smaller context could keep "
                "more on the GPU"
            )
        else:
            notes.append(
                f"placement chosen to keep at least {pb.need_ctx} tokens of context; a smaller context could keep "
                "more on the GPU"
            )
    if pinned:
        notes.append(f"weights kept on the CPU by {pinned}, as given")
    notes += finer_notes(pb.space, placement)
    return notes


def plan_verdict(p: Plan, machine: Machine) -> Verdict:
    """The verdict on a plan (`verdict.judge` of its estimate, OFFLOAD when it keeps weights on the CPU)."""
    if p.estimate is None:
        raise ValueError("a plan without an estimate has no verdict")
    on_cpu = bool(p.placement.cpu_layers or p.placement.cpu_expert_layers or p.placement.finer.ffn_cpu)
    v = judge(p.estimate, machine, p.margin, weights_on_cpu=on_cpu)
    if not p.fits and v.fits:
        # the pins could not be met (e.g. the minimum context): the plan's own answer stands
        v = dataclasses.replace(v, level=FitLevel.NO_FIT, fits=False)
    return v


def _finer_of(pb: Problem, p: Point) -> Finer | None:
    """The point's finer options; a -nkvo of the user's is described too (and ranked as given: no KV count)."""
    if pb.base.no_kv_offload and (p.finer is None or not p.finer.no_kv_offload):
        return dataclasses.replace(p.finer or Finer(), no_kv_offload=True, kv_bytes=0)
    return p.finer


def finer_reasons(space: PlacementSpace, placement: Placement) -> list[str]:
    """The finer options a plan chose, as reasons (`finer`)."""
    f = placement.finer
    out: list[str] = []
    if f.ffn_cpu:
        il = space.first_gpu_layer(placement.n_gpu_layers)
        out.append(f"{FFN_FRACTION_WORDS[f.ffn_cpu]} of layer {il} on CPU (a partial layer)")
    if f.no_kv_offload:
        out.append("KV cache on the host (-nkvo)")
    return out


def finer_notes(space: PlacementSpace, placement: Placement) -> list[str]:
    """What the finer options cost, in words."""
    f = placement.finer
    out: list[str] = []
    if f.ffn_cpu:
        il = space.first_gpu_layer(placement.n_gpu_layers)
        ot = f.overrides(space, placement.n_gpu_layers)[0].pattern
        out.append(
            f"layer {il} split: attention and cache on the GPU, {FFN_FRACTION_WORDS[f.ffn_cpu]} on the CPU "
            f"(-ot {ot}=CPU)"
        )
    if f.no_kv_offload:
        out.append(
            "-nkvo keeps the KV cache in host memory: the host runs the attention and reads the whole cache for "
            "every token (generation slows as the context fills)"
        )
    return out
