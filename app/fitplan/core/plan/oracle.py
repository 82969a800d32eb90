"""The exhaustive search the planner is checked against: every point of the placement space, the same estimator.

For spaces small enough to enumerate (the test suite's scenarios, `bench/plan.py`): every -ngl, every --n-cpu-moe
and, with several GPUs and no -ts pin, every split of the offloaded layers, each estimated at the context floor;
the best by the planner's written objective (`planner`'s docstring) wins:

1. it fits at the floor;
2. the most layers on the GPUs, then the fewest weight bytes off them;
3. the largest context (each context of the grid is tried by bisection: memory only grows with the context);
4. the fewest --n-cpu-moe;
5. the largest smallest headroom across the GPUs.

It shares the pins' reading (`planner.problem_of`), the settings a point launches (`Solver.settings`) and the
estimator with the planner, and none of the planner's search.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fitplan.core.base.devices import Machine
from fitplan.core.engines import context_grid
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.planner import Pins, Problem, problem_of
from fitplan.core.plan.search import EstimateFn, Evaluator, default_estimate_fn
from fitplan.core.plan.solver import Point, Solver
from fitplan.core.plan.space import compositions
from fitplan.core.plan.usage import DeviceUse, MarginPolicy, fits

__all__ = ["OracleResult", "exhaustive_plan", "space_size"]


@dataclass(frozen=True, slots=True)
class OracleResult:
    fits: bool
    point: Point | None  # the best point (None when nothing fits)
    placement_key: tuple[int, int] | None  # (-offloaded layer indices, weight bytes off the GPUs)
    n_ctx: (
        int  # the largest context of the best point (the pinned one when -c is pinned), 0 when nothing fits
    )
    min_headroom: int  # the smallest GPU headroom at that context
    points: int  # points of the space enumerated
    evaluations: int  # estimates computed


def _points(pb: Problem, solver: Solver) -> Iterator[Point]:
    lo_g, hi_g = pb.ngl_choices
    lo_n, hi_n = pb.ncmoe_choices
    n_gpu = len(pb.machine.gpus)
    for ngl in range(hi_g, lo_g - 1, -1):
        splits: list[tuple[int, ...] | None] = [None]
        if solver.split_free:
            splits = list(compositions(min(ngl, pb.space.L + 1), n_gpu))
        for ncmoe in range(lo_n, hi_n + 1):
            for split in splits:
                yield Point(ngl, ncmoe, split)


def space_size(profile: ModelProfile, machine: Machine, pins: Pins | None = None) -> int:
    """How many points `exhaustive_plan` would enumerate."""
    pb = problem_of(profile, machine, pins or Pins())
    solver = Solver(
        Evaluator(profile, machine, MarginPolicy(), default_estimate_fn()),
        pb.base,
        pb.space,
        tensor_split=pb.pins.tensor_split,
    )
    return sum(1 for _ in _points(pb, solver))


def _min_headroom(usage: tuple[DeviceUse, ...]) -> int:
    heads = [u.headroom_bytes for u in usage if u.gpu_index is not None]
    return min(heads) if heads else 0


def _largest_context(pb: Problem, solver: Solver, p: Point) -> int:
    if pb.pinned_ctx is not None:
        return pb.pinned_ctx
    grid = context_grid(pb.profile, pb.base)
    k_lo = -(-pb.need_ctx // grid.step)  # fits (the point was feasible at the floor)
    k_hi = grid.training_cap(pb.profile.n_ctx_train) // grid.step
    if fits(solver.usage(p, k_hi * grid.step)):
        return k_hi * grid.step
    while k_hi - k_lo > 1:
        mid = (k_lo + k_hi) // 2
        if fits(solver.usage(p, mid * grid.step)):
            k_lo = mid
        else:
            k_hi = mid
    return k_lo * grid.step


def exhaustive_plan(
    profile: ModelProfile,
    machine: Machine,
    pins: Pins | None = None,
    *,
    margin: MarginPolicy | None = None,
    estimate_fn: EstimateFn | None = None,
) -> OracleResult:
    """The best point of the whole placement space by the planner's objective (see the module docstring)."""
    pb = problem_of(profile, machine, pins or Pins())
    ev = Evaluator(profile, machine, margin or MarginPolicy(), estimate_fn or default_estimate_fn())
    solver = Solver(ev, pb.base, pb.space, tensor_split=pb.pins.tensor_split)
    n_gpus = len(machine.gpus) if pb.has_gpu else 0
    best_key: tuple[int, int] | None = None
    best: list[Point] = []
    count = 0
    for p in _points(pb, solver):
        count += 1
        if not fits(solver.usage(p, pb.need_ctx)):
            continue
        act = min(p.ngl, pb.space.L + 1) if n_gpus else 0
        key = (-act, pb.space.off_gpu_bytes(act, p.ncmoe))
        if best_key is None or key < best_key:
            best_key, best = key, [p]
        elif key == best_key:
            best.append(p)
    if best_key is None:
        return OracleResult(False, None, None, 0, 0, count, ev.evaluations)
    scored = []
    for p in best:
        n_ctx = _largest_context(pb, solver, p)
        scored.append((n_ctx, -p.ncmoe, _min_headroom(solver.usage(p, n_ctx)), p))
    n_ctx, _, head, point = max(scored, key=lambda t: t[:3])
    return OracleResult(True, point, best_key, n_ctx, head, count, ev.evaluations)
