"""One planning question and its answer, the same for every front end: `fitplan plan` (and `command`, `launch`,
`quants`) and the window send a `PlanQuery` and read a `PlanAnswer`.

The query is the model on a machine with what the user fixed (`Pins`), wants (`Objective`: the goal and the floors)
and keeps free (`MarginPolicy`); the answer is the plan (`planner.plan`), what would change it (`alternatives`),
the line that says why the context is what it is, and the plan's expected speed (`core.speed.plan_speed`). A front
end adds only its own presentation: the command line's flags and text, the window's curve and controls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fitplan.core.base.devices import Machine
from fitplan.core.base.errors import FitplanError
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.alternatives import Alternative, what_would_change, why_this_context
from fitplan.core.plan.objective import Objective, SpeedOf, model_speed_of
from fitplan.core.plan.planner import Pins, Plan, plan
from fitplan.core.plan.search import EstimateFn
from fitplan.core.plan.usage import MarginPolicy
from fitplan.core.speed import PlanSpeed, plan_speed

__all__ = ["PlanAnswer", "PlanQuery", "answer", "plan_of"]


@dataclass(frozen=True, slots=True)
class PlanQuery:
    """One planning question: a model on a machine, the user's pins, objective and margins."""

    profile: ModelProfile
    machine: Machine
    pins: Pins = field(default_factory=Pins)
    objective: Objective = field(default_factory=Objective)
    margin: MarginPolicy = field(default_factory=MarginPolicy)
    estimate_fn: EstimateFn | None = (
        None  # the estimator (with the projector, draft and adapters); None: default
    )
    host_bandwidth: float | None = None  # bytes/s of host RAM for the speed model (None: detected or stated)

    def speed_of(self) -> SpeedOf | None:
        """The speed model for the objective's floor (None without a floor)."""
        if self.objective.min_gen_tps is None:
            return None
        return model_speed_of(self.profile, self.machine, self.host_bandwidth)


@dataclass(frozen=True, slots=True)
class PlanAnswer:
    plan: Plan
    alternatives: tuple[Alternative, ...]  # what would change it, best first by the query's objective
    why: str  # why the context is what it is, when the objective costs context ("" otherwise)
    speed: PlanSpeed | None  # the plan's expected speed (None when it does not fit or cannot be estimated)


def plan_of(q: PlanQuery) -> Plan:
    """The plan alone (what `command` and the window's badges need)."""
    return plan(
        q.profile,
        q.machine,
        q.pins,
        objective=q.objective,
        speed_of=q.speed_of(),
        margin=q.margin,
        estimate_fn=q.estimate_fn,
    )


def answer(q: PlanQuery, *, alternatives: bool = True) -> PlanAnswer:
    """The plan, what would change it (unless `alternatives` is off: they plan again a few times), why its context,
    and its speed."""
    p = plan_of(q)
    alts = (
        what_would_change(
            q.profile,
            q.machine,
            q.pins,
            p,
            margin=q.margin,
            estimate_fn=q.estimate_fn,
            speed_of=q.speed_of(),
            host_bandwidth=q.host_bandwidth,
        )
        if alternatives
        else ()
    )
    return PlanAnswer(p, alts, why_this_context(p, alts), _speed(q, p))


def _speed(q: PlanQuery, p: Plan) -> PlanSpeed | None:
    if not p.fits:
        return None
    try:
        return plan_speed(q.profile, q.machine, p.settings, host_bandwidth=q.host_bandwidth)
    except (FitplanError, ValueError, KeyError):
        return None
