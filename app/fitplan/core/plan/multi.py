"""Plan a set of models that run at the same time on one machine: a chat model, an embedding model, a reranker ...
as llama-swap groups or llama-server's router (`--models-preset`, `--models-max`) run them.

Each model runs in its own llama-server: its own buffers and runtime reserve (driver context, pools) on every
device it uses, so a set's use of a device is the sum of its members' estimates there. Each model is planned at a
fixed context: its pinned `-c`, else the single-model planner's floor (`--min-ctx`, else 4096 tokens per sequence,
never above the training length; `planner.problem_of`). Its placements are its chain, in llama.cpp's `--fit` order:
all layers on the GPUs with the experts leaving first (`--n-cpu-moe` 0, 1, ...), then the layers (`-ngl` down to
0), best first by `objective.point_key` (points that move no byte more are skipped); a pinned `-ngl` or
`--n-cpu-moe` fixes its part of the chain.

A set plan splits the models that fit the machine alone into resident ones (loaded together and kept) and swapped
ones (loaded one at a time in the room the residents leave: llama-swap's swap group, the router's last slot).
It is feasible when the residents fit together and with any one swapped model, every device within its capacity
minus the margins (`usage.MarginPolicy`, the single model's rule). The best plan, in order (`multi_key`):

1. a model that does not fit the machine alone is reported and left out; every other one can be loaded;
2. the resident set, compared model by model in the order given (the first model resident before any later
   one): the flags of residency, lexicographically; with `--models-max N` below the number of models, at most
   N - 1 residents (the last slot is the swap slot);
3. the residents' placements, model by model in the order given (`objective.point_key`, lexicographically);
4. each swapped model's own placement in the room the residents leave (`objective.point_key`).

Then the first resident model whose context is not pinned takes the memory that is left as context: its largest
context on the grid with the other residents and the largest swapped model counted as reserves
(`usage.Reserve`), so that the set still fits.

The search: the resident set is built in the order given, a model joining when the set stays feasible (moving a
model from resident to swapped never breaks feasibility, so this is exact for criterion 2); the residents'
placements come from a depth-first walk in the order given, each chain best first, pruned by the least each
model still to place can use on each device: its first feasible leaf is the lexicographic best (criterion 3).
`multi_oracle.exhaustive_multi` checks both against every subset and every combination of chain points.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from fitplan.core.base.devices import Device, DeviceKind, Machine
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.base.results import Estimate
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.objective import PlacementKey, point_key
from fitplan.core.plan.planner import Pins, problem_of
from fitplan.core.plan.search import EstimateFn, Evaluator, context_fit, default_estimate_fn
from fitplan.core.plan.solver import Point, Solver
from fitplan.core.plan.space import Placement, PlacementSpace, describe_placement
from fitplan.core.plan.usage import MarginPolicy, Reserve, device_label, within_capacity

__all__ = [
    "Chain",
    "DeviceBudget",
    "ModelChoice",
    "MultiKey",
    "MultiModel",
    "MultiPlan",
    "MultiRequest",
    "Status",
    "chains_of",
    "multi_key",
    "plan_set",
]

#: Bytes per device position (the machine's GPUs in order, then the host).
Vec = tuple[int, ...]
#: criteria 2 to 4 of `plan_set`: resident flags, residents' placement keys, swapped models' placement keys
MultiKey = tuple[tuple[int, ...], tuple[PlacementKey, ...], tuple[PlacementKey, ...]]
#: a capacity for a device that is not checked (the host with `MarginPolicy.check_host` off)
_UNCHECKED = 1 << 62


@dataclass(frozen=True, slots=True)
class MultiModel:
    """One model of the set: its name (the preset section, llama-swap's model id), profile, pins and estimator."""

    name: str
    profile: ModelProfile
    pins: Pins = field(default_factory=Pins)
    estimate_fn: EstimateFn = field(default_factory=default_estimate_fn)
    path: str = ""  # the model argument as given (for the commands)
    passthrough: tuple[str, ...] = ()  # the flags fitplan does not model, kept in the model's command


@dataclass(frozen=True, slots=True)
class MultiRequest:
    models: tuple[MultiModel, ...]  # in priority order (the order given)
    machine: Machine
    margin: MarginPolicy = field(default_factory=MarginPolicy)
    models_max: int = 0  # llama-server's --models-max: at most this many loaded at once (0 = no limit)

    def resident_limit(self, n_loadable: int) -> int:
        """The most residents `models_max` allows: all of them, or one fewer than the limit (a swap slot)."""
        if self.models_max <= 0 or self.models_max >= n_loadable:
            return n_loadable
        return self.models_max - 1


class Status:
    RESIDENT = "resident"
    SWAPPED = "swapped"
    NO_FIT = "does not fit alone"


@dataclass(frozen=True, slots=True)
class Chain:
    """One model's placements, best first, each with its settings, estimate and use per device."""

    model: MultiModel
    points: tuple[Point, ...]
    settings: tuple[LaunchSettings, ...]
    estimates: tuple[Estimate, ...]
    vecs: tuple[Vec, ...]
    keys: tuple[PlacementKey, ...]
    n_ctx: int
    ctx_pinned: bool
    space: PlacementSpace
    has_gpu: bool

    @property
    def floor(self) -> Vec:
        """The least the model can use on each device, over its chain."""
        return tuple(min(v[d] for v in self.vecs) for d in range(len(self.vecs[0])))


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """One model's part of the set plan."""

    name: str
    status: str  # Status.*
    settings: LaunchSettings  # ready for `command_line.plan_to_args`
    estimate: Estimate
    placement: Placement
    use: Vec  # bytes per device position
    key: PlacementKey
    path: str = ""
    passthrough: tuple[str, ...] = ()
    note: str = ""

    @property
    def loadable(self) -> bool:
        return self.status != Status.NO_FIT


@dataclass(frozen=True, slots=True)
class DeviceBudget:
    """One device's budget: what each resident model uses there, the swap slot's largest model, what is kept."""

    label: str
    device: Device
    gpu_index: int | None
    capacity_bytes: int  # what the set may use (free or total, minus the margin and the reserves)
    kept_bytes: int  # the margin and the named reserves
    checked: bool
    resident: tuple[tuple[str, int], ...]  # (model, bytes) of the residents that use this device
    swap: tuple[str, int] | None  # the swapped model that uses the most here, and how much

    @property
    def used_bytes(self) -> int:
        return sum(b for _, b in self.resident) + (self.swap[1] if self.swap else 0)

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes

    @property
    def fits(self) -> bool:
        return within_capacity(self.used_bytes, self.capacity_bytes, self.checked)


@dataclass(frozen=True, slots=True)
class MultiPlan:
    models: tuple[ModelChoice, ...]  # in the order given
    budgets: tuple[DeviceBudget, ...]  # the machine's GPUs in order, then the host
    margin: MarginPolicy
    key: MultiKey
    grown: str = ""  # the model that took the memory left as context ("" when none did)
    evaluations: int = 0

    @property
    def resident(self) -> tuple[ModelChoice, ...]:
        return tuple(m for m in self.models if m.status == Status.RESIDENT)

    @property
    def swapped(self) -> tuple[ModelChoice, ...]:
        return tuple(m for m in self.models if m.status == Status.SWAPPED)

    @property
    def unfit(self) -> tuple[ModelChoice, ...]:
        return tuple(m for m in self.models if m.status == Status.NO_FIT)

    @property
    def fits(self) -> bool:
        """Every model can be loaded (resident, or swapped into the room the residents leave)."""
        return not self.unfit and all(b.fits for b in self.budgets)

    @property
    def models_max(self) -> int:
        """Models loaded at once under the plan: the residents and one swap slot."""
        return len(self.resident) + (1 if self.swapped else 0)

    @property
    def router_models_max(self) -> int:
        """llama-server's `--models-max` for the router: its router unloads the least recently used model, not a
        chosen one, so any that many of the models (at their planned settings) must fit together: the largest
        such count (at most `models_max`; every model alone fits)."""
        live = [m for m in self.models if m.loadable]
        caps = tuple(max(0, b.capacity_bytes) if b.checked else _UNCHECKED for b in self.budgets)
        best = min(1, len(live))
        for k in range(2, self.models_max + 1):
            if not all(within(_total(c, len(caps)), caps) for c in itertools.combinations(live, k)):
                break
            best = k
        return best


# ---------------------------------------------------------------------------------------------------------------------
# Chains and capacities
# ---------------------------------------------------------------------------------------------------------------------


def _chain_points(problem_ngl: tuple[int, int], problem_ncmoe: tuple[int, int], L: int) -> list[Point]:
    """llama.cpp's --fit order: experts leave first at the highest -ngl, then layers at the highest --n-cpu-moe."""
    lo_g, hi_g = problem_ngl
    lo_n, hi_n = problem_ncmoe
    top = min(hi_g, L + 1)
    pts = [Point(top, n, None) for n in range(lo_n, hi_n + 1)]
    pts += [Point(g, hi_n, None) for g in range(top - 1, lo_g - 1, -1)]
    return pts


def chains_of(req: MultiRequest) -> tuple[Chain, ...]:
    """Every model's chain, estimated at its fixed context."""
    return tuple(_chain(m, req.machine, req.margin) for m in req.models)


def _chain(m: MultiModel, machine: Machine, margin: MarginPolicy) -> Chain:
    pb = problem_of(m.profile, machine, m.pins)
    ev = Evaluator(m.profile, machine, margin, m.estimate_fn)
    solver = Solver(ev, pb.base, pb.space, tensor_split=m.pins.tensor_split)
    n_ctx = pb.need_ctx
    seen: set[PlacementKey] = set()
    points: list[Point] = []
    settings: list[LaunchSettings] = []
    ests: list[Estimate] = []
    vecs: list[Vec] = []
    keys: list[PlacementKey] = []
    for p in _chain_points(pb.ngl_choices, pb.ncmoe_choices, pb.space.L):
        k = point_key(pb.space, p.ngl, p.ncmoe, pb.has_gpu)
        if k in seen:
            continue  # moves nothing more off the GPUs than a point before it
        seen.add(k)
        s = solver.settings(p, n_ctx)
        est, _ = ev(s)
        points.append(p)
        settings.append(s)
        ests.append(est)
        vecs.append(tuple(d.used_bytes for d in est.devices))
        keys.append(k)
    return Chain(
        m,
        tuple(points),
        tuple(settings),
        tuple(ests),
        tuple(vecs),
        tuple(keys),
        n_ctx,
        pb.pinned_ctx is not None,
        pb.space,
        pb.has_gpu,
    )


def capacities(machine: Machine, margin: MarginPolicy) -> Vec:
    """What a set may use on each device position: `MarginPolicy.capacity` (a device is within it when it holds
    nothing, so a negative capacity counts as 0); a device that is not checked is unbounded."""
    out = [max(0, margin.capacity(d, i)) for i, d in enumerate(machine.gpus)]
    out.append(max(0, margin.capacity(machine.host, None)) if margin.check_host else _UNCHECKED)
    return tuple(out)


def within(used: Vec, caps: Vec) -> bool:
    return all(u <= c for u, c in zip(used, caps, strict=True))


def add(a: Vec, b: Vec) -> Vec:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _zeros(n: int) -> Vec:
    return (0,) * n


def _total(models: Sequence[ModelChoice], n: int) -> Vec:
    out = _zeros(n)
    for m in models:
        out = add(out, m.use)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------------------------------------------------


def _best_swap(chain: Chain, used: Vec, caps: Vec) -> int | None:
    """The best chain point of a swapped model in the room `used` leaves (None: no point fits there)."""
    return next((i for i, v in enumerate(chain.vecs) if within(add(used, v), caps)), None)


#: Nodes the residents' walk may visit for one resident set; beyond it the set is taken as infeasible (the plan
#: stays sound, with fewer residents) and the plan says so. The bounds below keep real sets far under it.
WALK_BUDGET = 200_000


class _OverBudget(Exception):
    pass


def _weights(n: int) -> tuple[Vec, ...]:
    """The weightings of the devices the walk's bounds use: each device alone, all together (a model moves bytes
    between a GPU and the host, so their total barely changes), and each GPU against the host both ways."""
    out: list[Vec] = [tuple(1 if d == e else 0 for d in range(n)) for e in range(n)]
    out.append((1,) * n)
    for g in range(n - 1):
        for a, b in ((2, 1), (1, 2)):
            out.append(tuple(a if d == g else b if d == n - 1 else 0 for d in range(n)))
    return tuple(out)


def _dot(w: Vec, v: Vec) -> int:
    return sum(a * b for a, b in zip(w, v, strict=True))


def _residents_walk(chains: Sequence[Chain], members: Sequence[int], caps: Vec) -> tuple[int, ...] | None:
    """The lexicographically best chain points of `members` (in order) with which they fit together and with any
    one of the other chains swapped in; None when there is none.

    Depth first in the order given, each chain best first, so the first complete choice found is the best. A branch
    is cut when it cannot be completed by a necessary condition: for each weighting w of the devices (`_weights`),
    w·used + the least w·v of each model still to place + the largest least w·v of the swapped models must stay
    within w·capacities (every constraint is a sum within the capacities, so a weighted sum of them holds too)."""
    n = len(caps)
    others = [c for i, c in enumerate(chains) if i not in members]
    ws = _weights(n)
    wcaps = [
        _dot(w, caps) if all(c < _UNCHECKED for c, x in zip(caps, w, strict=True) if x) else None for w in ws
    ]
    swap = [max((min(_dot(w, v) for v in c.vecs) for c in others), default=0) for w in ws]
    suffix: list[list[int]] = [swap]
    for i in reversed(members):
        least = [min(_dot(w, v) for v in chains[i].vecs) for w in ws]
        suffix.append([a + b for a, b in zip(suffix[-1], least, strict=True)])
    suffix.reverse()  # suffix[k][x]: the least members[k:] and the swap slot need under weighting x
    visited = 0

    def hopeless(k: int, used: Vec) -> bool:
        return any(
            cap is not None and _dot(w, used) + need > cap
            for w, cap, need in zip(ws, wcaps, suffix[k], strict=True)
        )

    def walk(k: int, used: Vec, picks: tuple[int, ...]) -> tuple[int, ...] | None:
        nonlocal visited
        visited += 1
        if visited > WALK_BUDGET:
            raise _OverBudget
        if not within(used, caps) or hopeless(k, used):
            return None
        if k == len(members):
            return picks if all(_best_swap(c, used, caps) is not None for c in others) else None
        for j, v in enumerate(chains[members[k]].vecs):
            found = walk(k + 1, add(used, v), (*picks, j))
            if found is not None:
                return found
        return None

    return walk(0, _zeros(n), ())


def plan_set(req: MultiRequest) -> MultiPlan:
    """The set plan by the rule of this module's docstring."""
    chains = chains_of(req)
    caps = capacities(req.machine, req.margin)
    loadable = [i for i, c in enumerate(chains) if any(within(v, caps) for v in c.vecs)]
    live = [chains[i] for i in loadable]
    members: list[int] = []  # positions in `live`
    picks: tuple[int, ...] = ()
    limit = req.resident_limit(len(live))
    cut: list[str] = []
    for pos in range(len(live)):
        if len(members) >= limit:
            break
        try:
            found = _residents_walk(live, [*members, pos], caps)
        except _OverBudget:
            cut.append(live[pos].model.name)
            continue
        if found is not None:
            members.append(pos)
            picks = found
    used = _zeros(len(caps))
    for pos, j in zip(members, picks, strict=True):
        used = add(used, live[pos].vecs[j])
    choice: dict[int, tuple[str, int]] = {}
    for pos, j in zip(members, picks, strict=True):
        choice[loadable[pos]] = (Status.RESIDENT, j)
    for pos, c in enumerate(live):
        if pos not in members:
            best = _best_swap(c, used, caps)
            choice[loadable[pos]] = (Status.SWAPPED, best if best is not None else 0)
    return _assemble(req, chains, choice, caps, tuple(cut))


def multi_key(statuses: Sequence[str], keys: Sequence[PlacementKey]) -> MultiKey:
    """Criteria 2 to 4 for models in the order given: their statuses and chosen placement keys."""
    flags = tuple(1 if s == Status.RESIDENT else 0 for s in statuses)
    res = tuple(k for s, k in zip(statuses, keys, strict=True) if s == Status.RESIDENT)
    swp = tuple(k for s, k in zip(statuses, keys, strict=True) if s == Status.SWAPPED)
    return (flags, res, swp)


# ---------------------------------------------------------------------------------------------------------------------
# The result
# ---------------------------------------------------------------------------------------------------------------------


def _choice(
    req: MultiRequest, c: Chain, status: str, j: int, settings: LaunchSettings, est: Estimate, note: str
) -> ModelChoice:
    n_gpus = len(req.machine.gpus) if c.has_gpu else 0
    p = c.points[j]
    placement = describe_placement(c.space, p.ngl if c.has_gpu else 0, p.ncmoe, (), n_gpus)
    return ModelChoice(
        name=c.model.name,
        status=status,
        settings=settings,
        estimate=est,
        placement=placement,
        use=tuple(d.used_bytes for d in est.devices),
        key=c.keys[j],
        path=c.model.path,
        passthrough=c.model.passthrough,
        note=note,
    )


def _grow(
    req: MultiRequest, chains: Sequence[Chain], choice: dict[int, tuple[str, int]]
) -> tuple[int, LaunchSettings, Estimate, int] | None:
    """The first resident model with an unpinned context, at its largest context with the rest of the set counted
    as reserves: (its position, settings, estimate, evaluations), or None."""
    residents = [i for i in range(len(chains)) if choice.get(i, ("", 0))[0] == Status.RESIDENT]
    grow = next((i for i in residents if not chains[i].ctx_pinned), None)
    if grow is None:
        return None
    n = len(req.machine.gpus) + 1
    others = _zeros(n)
    for i in residents:
        if i != grow:
            others = add(others, chains[i].vecs[choice[i][1]])
    swap = _zeros(n)
    for i, (status, j) in choice.items():
        if status == Status.SWAPPED:
            swap = tuple(max(a, b) for a, b in zip(swap, chains[i].vecs[j], strict=True))
    reserves = list(req.margin.reserves)
    for d in range(n):
        gi = d if d < n - 1 else None
        if others[d]:
            reserves.append(Reserve(gi, others[d], "the other resident models"))
        if swap[d]:
            reserves.append(Reserve(gi, swap[d], "the swap slot"))
    margin = dataclasses.replace(req.margin, reserves=tuple(reserves))
    c = chains[grow]
    ev = Evaluator(c.model.profile, req.machine, margin, c.model.estimate_fn)
    j = choice[grow][1]
    cf = context_fit(ev, c.settings[j], min_ctx=c.n_ctx)
    if not cf.fits or cf.estimate is None or cf.n_ctx <= c.n_ctx:
        return None
    return grow, dataclasses.replace(c.settings[j], n_ctx=cf.n_ctx), cf.estimate, ev.evaluations


def _assemble(
    req: MultiRequest,
    chains: Sequence[Chain],
    choice: dict[int, tuple[str, int]],
    caps: Vec,
    cut: tuple[str, ...] = (),
) -> MultiPlan:
    grown = _grow(req, chains, choice)
    evaluations = sum(len(c.vecs) for c in chains) + (grown[3] if grown else 0)
    models: list[ModelChoice] = []
    for i, c in enumerate(chains):
        status, j = choice.get(i, (Status.NO_FIT, 0))
        settings, est, note = c.settings[j], c.estimates[j], ""
        if status == Status.NO_FIT:
            # the point that needs the least of the machine: what is short is shown on it
            j = min(
                range(len(c.vecs)),
                key=lambda k: max(0, *(v - cp for v, cp in zip(c.vecs[k], caps, strict=True))),
            )
            settings, est = c.settings[j], c.estimates[j]
            note = "does not fit this machine even alone"
        elif grown is not None and grown[0] == i:
            settings, est = grown[1], grown[2]
            note = f"context raised from {c.n_ctx} to {settings.n_ctx}: the memory the set leaves"
        elif status == Status.SWAPPED:
            note = "loaded in turn with the other swapped models, beside the resident ones"
            if c.model.name in cut:
                note += f" (whether it could stay resident was not settled within {WALK_BUDGET} steps)"
        models.append(_choice(req, c, status, j, settings, est, note))
    key = multi_key([m.status for m in models], [m.key for m in models])
    return MultiPlan(
        tuple(models),
        budgets(req.machine, req.margin, models),
        req.margin,
        key,
        grown=chains[grown[0]].model.name if grown else "",
        evaluations=evaluations,
    )


def budgets(
    machine: Machine, margin: MarginPolicy, models: Sequence[ModelChoice]
) -> tuple[DeviceBudget, ...]:
    """Each device's budget for the models' choices."""
    out: list[DeviceBudget] = []
    for pos, d in enumerate(machine.all):
        gi = pos if pos < len(machine.gpus) else None
        resident = tuple((m.name, m.use[pos]) for m in models if m.status == Status.RESIDENT and m.use[pos])
        swapped = [(m.name, m.use[pos]) for m in models if m.status == Status.SWAPPED and m.use[pos]]
        swap = max(swapped, key=lambda t: t[1]) if swapped else None
        checked = gi is not None or margin.check_host
        kind_gi = None if d.kind is DeviceKind.CPU else gi
        out.append(
            DeviceBudget(
                device_label(d, kind_gi),
                d,
                gi,
                margin.capacity(d, kind_gi),
                margin.margin(d, kind_gi),
                checked,
                resident,
                swap,
            )
        )
    return tuple(out)
