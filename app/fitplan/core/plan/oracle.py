"""The exhaustive search the planner is checked against: every point of the placement space, the same estimator.

For spaces small enough to enumerate (the test suite's scenarios, `bench/plan.py`): every -ngl, every --n-cpu-moe
and, with several GPUs and no -ts pin, every split of the offloaded layers, each estimated at the context floor, the
finer points where the pins allow them (`finer.finer_points`: each -ngl's partial layer at each fraction, -nkvo), and
the GPUs left out (`-dev none`) where the planner may leave them out; of the points that fit there (and keep the
speed floor, when the objective has one), the best by the objective (`objective.key`, in the goal's order) wins.
The largest context of a point is found by bisection over the grid (memory only grows with the context; a speed
floor, by the objective's assumption, only falls with it).

It shares the pins' reading (`planner.problem_of`), the settings a point launches (`Solver.settings`), the plan of a
point at a context (`planner.plan_at`, what a speed floor is asked about), the estimator and the objective with the
planner, and none of the planner's search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from fitplan.core.base.devices import Machine
from fitplan.core.engines import context_grid
from fitplan.core.memory.context import trained_context
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.finer import finer_points, nkvo_finer
from fitplan.core.plan.objective import (
    Goal,
    Key,
    Objective,
    PlacementKey,
    SpeedOf,
    key,
    min_gpu_headroom,
    point_key,
    tie_key,
)
from fitplan.core.plan.planner import Pins, Problem, plan_at, problem_of, without_gpus
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
    gpus_left_out: bool = False  # the best point leaves the GPUs out (-dev none)


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
    yield from finer_points(pb, solver)


def _problems(profile: ModelProfile, machine: Machine, pins: Pins) -> list[Problem]:
    """The problem of the pins, and the same with the GPUs left out where that is a choice."""
    pb = problem_of(profile, machine, pins)
    return [pb, problem_of(profile, machine, without_gpus(pins))] if pb.may_leave_out_gpus else [pb]


def space_size(profile: ModelProfile, machine: Machine, pins: Pins | None = None) -> int:
    """How many points `exhaustive_plan` would enumerate."""
    n = 0
    for pb in _problems(profile, machine, pins or Pins()):
        ev = Evaluator(profile, machine, MarginPolicy(), default_estimate_fn())
        n += sum(1 for _ in _points(pb, Solver(ev, pb.base, pb.space, tensor_split=pb.pins.tensor_split)))
    return n


@dataclass(frozen=True, slots=True)
class _Candidate:
    pb: Problem
    solver: Solver
    point: Point
    placement: PlacementKey


class _Ranker:
    """The context of a point, and whether it keeps the objective's floors at a context."""

    def __init__(self, objective: Objective, speed_of: SpeedOf | None) -> None:
        self.objective = objective
        self.speed_of = speed_of

    def ok(self, c: _Candidate, n_ctx: int) -> bool:
        if not fits(c.solver.usage(c.point, n_ctx)):
            return False
        floor = self.objective.min_gen_tps
        if floor is None or self.speed_of is None:
            return True
        # -nkvo's speed as the planner counts it: with the context first, by its cache at this context
        p = _at_context(c, n_ctx, self.objective.goal).point
        return self.speed_of(plan_at(c.pb, c.solver, p, n_ctx, self.objective)) >= floor

    def largest_context(self, c: _Candidate, at_least: int) -> int:
        """The largest context of `c` that keeps the floors, when it is at least `at_least` (else 0)."""
        pb = c.pb
        if pb.pinned_ctx is not None:
            return pb.pinned_ctx
        grid = context_grid(pb.profile, pb.base)
        k_lo = max(-(-pb.need_ctx // grid.step), -(-at_least // grid.step))
        k_hi = grid.training_cap(trained_context(pb.profile, pb.base)) // grid.step
        if k_lo > k_hi or not self.ok(c, k_lo * grid.step):
            return 0
        if self.ok(c, k_hi * grid.step):
            return k_hi * grid.step
        while k_hi - k_lo > 1:
            mid = (k_lo + k_hi) // 2
            if self.ok(c, mid * grid.step):
                k_lo = mid
            else:
                k_hi = mid
        return k_lo * grid.step


def _feasible(ev: Evaluator, rank: _Ranker, problems: list[Problem]) -> tuple[list[_Candidate], int]:
    """Every point of the problems that fits at the context floor and keeps the floors there, and the count of all."""
    cands: list[_Candidate] = []
    count = 0
    for pb in problems:
        solver = Solver(ev, pb.base, pb.space, tensor_split=pb.pins.tensor_split)
        for p in _points(pb, solver):
            count += 1
            c = _Candidate(pb, solver, p, point_key(pb.space, p.ngl, p.ncmoe, pb.has_gpu, p.finer))
            if rank.ok(c, pb.need_ctx):
                cands.append(c)
    return cands, count


def _at_context(c: _Candidate, n_ctx: int, goal: Goal) -> _Candidate:
    """With the context first, -nkvo is counted by its cache at that context (`finer`)."""
    f = c.point.finer
    if goal is not Goal.CONTEXT or f is None or not f.no_kv_offload:
        return c
    p = dataclasses.replace(c.point, finer=nkvo_finer(c.solver, c.point.ngl, c.point.ncmoe, n_ctx))
    return _Candidate(c.pb, c.solver, p, point_key(c.pb.space, p.ngl, p.ncmoe, c.pb.has_gpu, p.finer))


def exhaustive_plan(
    profile: ModelProfile,
    machine: Machine,
    pins: Pins | None = None,
    *,
    objective: Objective | None = None,
    speed_of: SpeedOf | None = None,
    margin: MarginPolicy | None = None,
    estimate_fn: EstimateFn | None = None,
) -> OracleResult:
    """The best point of the whole placement space by the objective (see the module docstring)."""
    objective = objective or Objective()
    ev = Evaluator(profile, machine, margin or MarginPolicy(), estimate_fn or default_estimate_fn())
    rank = _Ranker(objective, speed_of)
    cands, count = _feasible(ev, rank, _problems(profile, machine, pins or Pins()))
    if not cands:
        return OracleResult(False, None, None, 0, 0, None, count, ev.evaluations)
    if objective.goal is Goal.PLACEMENT:
        top = max(c.placement for c in cands)
        cands = [c for c in cands if c.placement == top]
    best: tuple[Key, int, int, _Candidate] | None = None
    for c in cands:
        # longest context first: a point that cannot reach the best context so far cannot win
        floor = best[1] if best is not None and objective.goal is Goal.CONTEXT else 0
        n_ctx = rank.largest_context(c, floor)
        if n_ctx == 0:
            continue
        c = _at_context(c, n_ctx, objective.goal)
        head = min_gpu_headroom(c.solver.usage(c.point, n_ctx))
        k = key(c.placement, tie_key(n_ctx, c.point.ncmoe, head), objective.goal)
        if best is None or k > best[0]:
            best = (k, n_ctx, head, c)
    if best is None:  # no candidate keeps the floors above the context floor (each reached it: not expected)
        return OracleResult(False, None, None, 0, 0, None, count, ev.evaluations)
    k, n_ctx, head, c = best
    left_out = c.pb.base.devices == () and bool(machine.gpus)
    return OracleResult(True, c.point, c.placement, n_ctx, head, k, count, ev.evaluations, left_out)
