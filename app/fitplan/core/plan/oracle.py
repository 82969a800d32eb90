"""The exhaustive search the planner is checked against: every point of the placement space, the same estimator.

For spaces small enough to enumerate (the test suite's scenarios, `bench/plan.py`): every -ngl, every --n-cpu-moe
and, with several GPUs and no -ts pin, every split of the offloaded layers, each estimated at the context floor;
of the points that fit there, the best by the planner's objective (`objective.key`) wins. The largest context of a
point is found by bisection over the grid (memory only grows with the context).

It shares the pins' reading (`planner.problem_of`), the settings a point launches (`Solver.settings`), the
estimator and the objective with the planner, and none of the planner's search.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fitplan.core.base.devices import Machine
from fitplan.core.engines import context_grid
from fitplan.core.memory.context import trained_context
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.objective import Key, PlacementKey, key, min_gpu_headroom, point_key, tie_key
from fitplan.core.plan.planner import Pins, Problem, problem_of
from fitplan.core.plan.search import EstimateFn, Evaluator, default_estimate_fn
from fitplan.core.plan.solver import Point, Solver
from fitplan.core.plan.space import compositions
from fitplan.core.plan.usage import MarginPolicy, fits

__all__ = ["OracleResult", "exhaustive_plan", "space_size"]


@dataclass(frozen=True, slots=True)
class OracleResult:
    fits: bool
    point: Point | None  # the best point (None when nothing fits)
    placement_key: PlacementKey | None  # `objective.placement_key` of the best point
    n_ctx: (
        int  # the largest context of the best point (the pinned one when -c is pinned), 0 when nothing fits
    )
    min_headroom: int  # the smallest GPU headroom at that context
    key: Key | None  # `objective.key` of the best point (None when nothing fits)
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


def _largest_context(pb: Problem, solver: Solver, p: Point) -> int:
    if pb.pinned_ctx is not None:
        return pb.pinned_ctx
    grid = context_grid(pb.profile, pb.base)
    k_lo = -(-pb.need_ctx // grid.step)  # fits (the point was feasible at the floor)
    k_hi = grid.training_cap(trained_context(pb.profile, pb.base)) // grid.step
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
    best_key: PlacementKey | None = None
    best: list[Point] = []
    count = 0
    for p in _points(pb, solver):
        count += 1
        if not fits(solver.usage(p, pb.need_ctx)):
            continue
        pk = point_key(pb.space, p.ngl, p.ncmoe, pb.has_gpu)
        if best_key is None or pk > best_key:
            best_key, best = pk, [p]
        elif pk == best_key:
            best.append(p)
    if best_key is None:
        return OracleResult(False, None, None, 0, 0, None, count, ev.evaluations)
    scored = []
    for p in best:
        n_ctx = _largest_context(pb, solver, p)
        head = min_gpu_headroom(solver.usage(p, n_ctx))
        scored.append((key(best_key, tie_key(n_ctx, p.ncmoe, head)), n_ctx, head, p))
    best_full, n_ctx, head, point = max(scored, key=lambda t: t[0])
    return OracleResult(True, point, best_key, n_ctx, head, best_full, count, ev.evaluations)
