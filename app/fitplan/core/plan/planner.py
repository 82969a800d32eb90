"""Plan a launch: where the weights go and the largest context, by the written objective of `objective`.

The user's pins are always kept: `-c`, `-np`, `-kvu`/`-no-kvu`, `-ngl`, `-ts`, `--n-cpu-moe` (and `--cpu-moe`), `-ot`,
the cache types, flash attention, `--min-ctx` and "all weights on the GPU" (`--all-on-gpu`), along with every other
setting in `Pins.base`. The plan only chooses `-ngl`, `--n-cpu-moe`, `-ts` (as layer counts) and `-c`, and turns
`--fit` off. The search (`solver`) and the largest-context search (`search`) are checked against an exhaustive
search of the same space with the same estimator and the same objective (`oracle`, in the test suite).

The estimate itself is injected (`EstimateFn`): by default `fitplan.core.estimate.estimator.estimate`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from fitplan.core.base.devices import Machine
from fitplan.core.base.launch_settings import NGL_ALL, NGL_AUTO, LaunchSettings, MmprojPlacement, SplitMode
from fitplan.core.base.results import Estimate
from fitplan.core.engines import context_grid
from fitplan.core.memory.context import N_CTX_PAD, trained_context
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.objective import Key, key, min_gpu_headroom, point_key, tie_key
from fitplan.core.plan.search import (
    ContextFit,
    EstimateFn,
    Evaluator,
    context_fit,
    context_pad,
    context_step,
    default_estimate_fn,
    kv_streams,
    training_cap,
)
from fitplan.core.plan.solver import Check, Point, Solver
from fitplan.core.plan.space import Placement, PlacementSpace, describe_placement
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
    "plan_verdict",
    "training_cap",
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
    no_kv_offload: bool | None = None  # -nkvo: the KV cache stays in host memory (the solver never picks it)


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
    )


def plan(
    profile: ModelProfile,
    machine: Machine,
    pins: Pins | None = None,
    *,
    margin: MarginPolicy | None = None,
    estimate_fn: EstimateFn | None = None,
    mmproj: ModelProfile | None = None,
    draft: ModelProfile | None = None,
    reserve_bytes: int | None = None,
) -> Plan:
    """The best plan for the pins by the objective of this module's docstring."""
    pins = pins or Pins()
    margin = margin or MarginPolicy()
    fn = estimate_fn or default_estimate_fn(mmproj=mmproj, draft=draft, reserve_bytes=reserve_bytes)
    ev = Evaluator(profile, machine, margin, fn)
    pb = problem_of(profile, machine, pins)
    solver = Solver(ev, pb.base, pb.space, tensor_split=pins.tensor_split)
    found, last = solver.search(pb.ngl_choices, pb.ncmoe_choices, pb.need_ctx)
    if not found:
        return _no_fit(pb, solver, last, margin)
    point, cf = _best_context(pb, solver, found)
    return _fit(pb, solver, point, cf, margin)


@dataclass(frozen=True, slots=True)
class _Scored:
    point: Point
    context: ContextFit
    key: Key


def _context_at(pb: Problem, solver: Solver, p: Point) -> _Scored:
    """The largest context of one point (its split rebalanced for the context found), or the pinned one."""
    ev = solver.ev
    if pb.pinned_ctx is not None:
        split = solver.balance(p.ngl, p.ncmoe, p.split, pb.pinned_ctx) if p.split is not None else None
        q = Point(p.ngl, p.ncmoe, split)
        est, usage = ev(solver.settings(q, pb.pinned_ctx))
        step = context_grid(pb.profile, pb.base).step
        cap = training_cap(pb.profile, pb.base)
        cf = ContextFit(pb.pinned_ctx, step, cap, False, est, None, usage, "", (), 0)
        return _scored(pb, q, cf)
    cf = context_fit(ev, solver.settings(p, 0), min_ctx=pb.need_ctx)
    q = p
    for _ in range(3):  # rebalance for the context found, then search again while that raises the context
        if q.split is None or not cf.fits:
            break
        better = solver.balance(q.ngl, q.ncmoe, q.split, cf.n_ctx)
        if better == q.split:
            break
        cand = Point(q.ngl, q.ncmoe, better)
        cf2 = context_fit(ev, solver.settings(cand, 0), min_ctx=pb.need_ctx)
        if cf2.n_ctx < cf.n_ctx:
            break
        q, cf = cand, cf2
    return _scored(pb, q, cf)


def _scored(pb: Problem, p: Point, cf: ContextFit) -> _Scored:
    ties = tie_key(cf.n_ctx, p.ncmoe, min_gpu_headroom(cf.usage))
    return _Scored(p, cf, key(point_key(pb.space, p.ngl, p.ncmoe, pb.has_gpu), ties))


def _best_context(pb: Problem, solver: Solver, found: list[Check]) -> tuple[Point, ContextFit]:
    """The best of the solver's points by the objective (`objective.key`)."""
    # at most two candidates (`Solver.search`): each is scored whole, so that the objective alone decides
    scored = [_context_at(pb, solver, c.point) for c in found]
    best = max(scored, key=lambda s: s.key)
    return best.point, best.context


def _no_fit(pb: Problem, solver: Solver, last: Check, margin: MarginPolicy) -> Plan:
    p = last.point
    s = solver.settings(p, pb.need_ctx)
    est, usage = solver.ev(s)
    shorts = shortfalls(usage)
    n_gpus = len(pb.machine.gpus) if pb.has_gpu else 0
    placement = describe_placement(pb.space, p.ngl if pb.has_gpu else 0, p.ncmoe, p.split or (), n_gpus)
    what = f"-c {pb.need_ctx}" if pb.pinned_ctx is not None else f"the minimum context {pb.need_ctx}"
    lead = "does not fit with all weights on the GPU" if pb.pins.all_weights_on_gpu else "does not fit"
    binding = f"{lead} at {what}: " + "; ".join(sh.describe() for sh in shorts)
    grid = context_grid(pb.profile, pb.base)
    cap = grid.training_cap(trained_context(pb.profile, pb.base))
    cf = ContextFit(0, grid.step, cap, False, est, None, usage, shorts[0].label if shorts else "", shorts, 0)
    return Plan(s, est, cf, placement, False, binding, pb.notes, shorts, solver.ev.evaluations, margin)


def _fit(pb: Problem, solver: Solver, p: Point, cf: ContextFit, margin: MarginPolicy) -> Plan:
    s = dataclasses.replace(solver.settings(p, 0), n_ctx=cf.n_ctx)
    n_gpus = len(pb.machine.gpus) if pb.has_gpu else 0
    placement = describe_placement(pb.space, p.ngl if pb.has_gpu else 0, p.ncmoe, p.split or (), n_gpus)
    notes = list(pb.notes)
    reasons: list[str] = []
    if placement.cpu_expert_layers:
        n = placement.cpu_expert_layers
        reasons.append(f"{n} expert layer{'s' if n != 1 else ''} on CPU")
    if placement.cpu_layers and pb.has_gpu:
        reasons.append(f"{placement.cpu_layers} of {pb.profile.n_layer} layers on CPU")
    if pb.pinned_ctx is not None:
        reasons.insert(0, f"context pinned at {pb.pinned_ctx}")
    elif cf.capped_by_training:
        reasons.insert(
            0, f"context capped at the model's training length ({trained_context(pb.profile, pb.base)})"
        )
    else:
        reasons.insert(0, f"context limited by {cf.binding_label} memory")
    space = pb.space
    if not pb.has_gpu:
        notes.append("no GPU: everything runs on the CPU")
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
    if pb.pins.n_ctx is None and (placement.cpu_layers or placement.cpu_expert_layers) and pb.has_gpu:
        notes.append(
            f"placement chosen to keep at least {pb.need_ctx} tokens of context; a smaller context could keep more "
            "on the GPU"
        )
    largest = cf if pb.pinned_ctx is None else context_fit(solver.ev, solver.settings(p, 0))
    return Plan(
        settings=s,
        estimate=cf.estimate,
        context=cf,
        placement=placement,
        fits=True,
        binding="; ".join(reasons),
        notes=tuple(notes),
        shortfalls=(),
        evaluations=solver.ev.evaluations,
        margin=margin,
        largest=largest,
    )


def plan_verdict(p: Plan, machine: Machine) -> Verdict:
    """The verdict on a plan (`verdict.judge` of its estimate, OFFLOAD when it keeps weights on the CPU)."""
    if p.estimate is None:
        raise ValueError("a plan without an estimate has no verdict")
    on_cpu = bool(p.placement.cpu_layers or p.placement.cpu_expert_layers)
    v = judge(p.estimate, machine, p.margin, weights_on_cpu=on_cpu)
    if not p.fits and v.fits:
        # the pins could not be met (e.g. the minimum context): the plan's own answer stands
        v = dataclasses.replace(v, level=FitLevel.NO_FIT, fits=False)
    return v
