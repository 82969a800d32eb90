"""The planner against the exhaustive search (`fitplan.core.plan.oracle`) on spaces small enough to enumerate.

Scenarios (Hypothesis, derandomized): depth-truncated realistic sparse models (dense, dense with SWA, MoE, hybrid
Mamba2 + MoE, hybrid gated-delta-net + MoE, MLA + MoE); 1 to 3 GPUs, identical or mixed; host RAM from 1 to 128 GiB;
with and without pins; each objective (fastest placement first, longest context first) with and without a
generation-speed floor (a fake speed model that keeps the objective's assumption: more on the GPUs is not slower, a
longer context is not faster). For every scenario:

* sound: a plan that fits fits again when its own exported command is parsed back and estimated, on every device;
* complete: a plan that does not fit has no fitting point in the space;
* optimal: the exhaustive search finds nothing better by the written objective;
* identical cards (one `Device` value repeated) plan exactly like separately named cards of the same size;
* floors: a plan that fits keeps the speed floor;
* monotone: more VRAM or more host RAM never loses the fit nor (placement first) takes layers off the GPUs nor
  (context first) shortens the context, and at the same placement never shrinks the context;
* deterministic: the same inputs give the same plan.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitplan.core.base.devices import GIB, Machine, assumed_gpu, host_device
from fitplan.core.base.launch_settings import FlashAttn, LaunchSettings
from fitplan.core.estimate.estimator import estimate
from fitplan.core.launch.command_line import plan_to_args
from fitplan.core.launch.flags import parse_flags
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan import planner, solver
from fitplan.core.plan.objective import Goal, Objective, PlacementKey, placement_key
from fitplan.core.plan.oracle import OracleResult, exhaustive_plan
from fitplan.core.plan.planner import Pins, Plan, plan, plan_key, problem_of
from fitplan.core.plan.search import Evaluator, default_estimate_fn, largest_true
from fitplan.core.plan.solver import Point, Solver
from fitplan.core.plan.usage import MarginPolicy, usage_of
from support.plan_models import SMALL, small_model

#: what every scenario checked; the closing test prints it
TALLY = {
    "scenarios": 0,
    "fits": 0,
    "no_fit": 0,
    "points": 0,
    "violations": 0,
    "placement": 0,
    "context": 0,
    "floor": 0,
    "finer": 0,
}

#: few layers, so 3 GPUs stay enumerable: (kind, largest GPU count)
KINDS = {kind: (3 if kind in ("dense", "hybrid-next") else 2) for kind in SMALL}

PIN_CHOICES = ("none", "ctx", "min_ctx", "np1", "np32", "q8", "ngl", "ncmoe", "ts", "all_on_gpu", "fa_off")
#: generation floors (t/s of `fake_speed`): none, one most placements keep, one that needs most layers on the GPUs
FLOORS = (None, 8.0, 30.0)


def fake_speed(p: Plan) -> float:
    """A stand-in speed model with the objective's assumption: 5 t/s per offloaded layer index, less than 4 t/s for
    the bytes off the GPUs (so a larger `placement_key` is never slower), less for a longer context."""
    off_gib = p.placement.off_gpu_bytes / GIB
    return 5.0 * p.placement.objective_layers + 4.0 / (1.0 + off_gib) - p.settings.n_ctx / 65536


@dataclasses.dataclass(frozen=True)
class Scenario:
    kind: str
    gpu_gib: tuple[float, ...]
    identical: bool
    host_gib: float
    pin: str
    goal: Goal = Goal.PLACEMENT
    floor: float | None = None

    def objective(self) -> Objective:
        return Objective(self.goal, self.floor)

    def machine(
        self, extra_gpu_gib: float = 0.0, extra_host_gib: float = 0.0, named: bool = False
    ) -> Machine:
        host = host_device(int((self.host_gib + extra_host_gib) * GIB))
        if self.identical and not named:
            one = assumed_gpu(f"{self.gpu_gib[0]:g} GiB GPU", self.gpu_gib[0] + extra_gpu_gib)
            return Machine((one,) * len(self.gpu_gib), host)
        gpus = tuple(assumed_gpu(f"G{i}", g + extra_gpu_gib) for i, g in enumerate(self.gpu_gib))
        return Machine(gpus, host)

    def pins(self, prof: ModelProfile) -> Pins:
        base = Pins()
        match self.pin:
            case "ctx":
                return Pins(n_ctx=8192)
            case "min_ctx":
                return Pins(min_ctx=8192)
            case "np1":
                return Pins(n_parallel=1)
            case "np32":  # 32 outputs: at -ngl 0 the first GPU copies the output matrix in for the logits
                return Pins(n_parallel=32, kv_unified=True)
            case "q8":
                return Pins(cache_type_k="q8_0", cache_type_v="q8_0")
            case "ngl":
                return Pins(n_gpu_layers=prof.n_layer_all - 1)
            case "ncmoe":
                return Pins(n_cpu_moe=2)
            case "ts":
                return Pins(tensor_split=(1.0,) * len(self.gpu_gib)) if len(self.gpu_gib) > 1 else base
            case "all_on_gpu":
                return Pins(all_weights_on_gpu=True)
            case "fa_off":
                return Pins(base=LaunchSettings(flash_attn=FlashAttn.OFF))
        return base


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    kind = draw(st.sampled_from(sorted(KINDS)))
    n = draw(st.integers(1, KINDS[kind]))
    weights = small_model(kind).weight_bytes / GIB
    sizes = st.sampled_from([round(weights * f * 4) / 4 + 1 for f in (0.15, 0.3, 0.5, 0.7, 1.0, 1.4)])
    identical = n > 1 and draw(st.booleans())
    gpu = (draw(sizes),) * n if identical else tuple(draw(sizes) for _ in range(n))
    host = draw(st.sampled_from([1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 32.0, 128.0]))
    pin = draw(st.sampled_from(PIN_CHOICES))
    return Scenario(
        kind, gpu, identical, host, pin, draw(st.sampled_from(list(Goal))), draw(st.sampled_from(FLOORS))
    )


def _key(p: Plan) -> PlacementKey:
    return placement_key(p.placement.objective_layers, p.placement.off_gpu_bytes)


def _exported_fits(prof: ModelProfile, p: Plan, m: Machine) -> bool:
    argv = plan_to_args(p, "model.gguf", program="")
    parsed = parse_flags(list(argv)).settings
    est = estimate(prof, parsed, m)
    return all(u.fits for u in usage_of(est, m, MarginPolicy()))


def _check_optimal(p: Plan, o: OracleResult) -> list[str]:
    """The plan is as good as the exhaustive search's best by the objective (`objective.key`, compared whole:
    a change of objective needs no change here)."""
    if p.fits != o.fits:
        return [f"plan fits={p.fits}, exhaustive fits={o.fits} ({o.point})"]
    if not p.fits or o.key is None:
        return []
    mine = plan_key(p)
    if mine < o.key:
        return [
            f"objective {mine} ({p.placement.description}, -c {p.settings.n_ctx}) below the exhaustive {o.key} "
            f"at {o.point}"
        ]
    return []


def _check_monotone(prof: ModelProfile, sc: Scenario, pins: Pins, p: Plan) -> list[str]:
    bad: list[str] = []
    obj = sc.objective()
    for what, m in (("VRAM", sc.machine(extra_gpu_gib=1.0)), ("host RAM", sc.machine(extra_host_gib=4.0))):
        more = _plan(prof, m, pins, obj)
        if p.fits and not more.fits:
            bad.append(f"more {what} loses the fit")
        elif p.fits and sc.goal is Goal.PLACEMENT and _key(more) < _key(p):
            bad.append(f"more {what} takes weights off the GPUs: {_key(p)} -> {_key(more)}")
        elif p.fits and sc.goal is Goal.CONTEXT and more.settings.n_ctx < p.settings.n_ctx:
            bad.append(f"more {what} shortens the context first objective's context")
        elif p.fits and pins.n_ctx is None and p.settings.devices is None:
            same = dataclasses.replace(
                pins,
                n_gpu_layers=p.placement.n_gpu_layers,
                n_cpu_moe=p.placement.n_cpu_moe,
                tensor_split=p.settings.tensor_split or pins.tensor_split,
                # the partial layer's -ot and -nkvo, when the plan chose them
                no_kv_offload=True if p.placement.finer.no_kv_offload else pins.no_kv_offload,
                base=dataclasses.replace(pins.base, tensor_overrides=p.settings.tensor_overrides),
            )
            again = _plan(prof, m, same, obj)
            if again.settings.n_ctx < p.settings.n_ctx:
                bad.append(f"more {what} shrinks the context at the same placement")
    return bad


def _plan(prof: ModelProfile, m: Machine, pins: Pins, obj: Objective) -> Plan:
    return plan(prof, m, pins, objective=obj, speed_of=fake_speed)


def check_scenario(sc: Scenario) -> list[str]:
    prof = small_model(sc.kind)
    m = sc.machine()
    pins = sc.pins(prof)
    obj = sc.objective()
    p = _plan(prof, m, pins, obj)
    o = exhaustive_plan(prof, m, pins, objective=obj, speed_of=fake_speed)
    bad = _check_optimal(p, o)
    if p.fits and not _exported_fits(prof, p, m):
        bad.append("unsound: the exported command does not fit")
    if p.fits and sc.floor is not None and fake_speed(p) < sc.floor:
        bad.append(f"below the speed floor: {fake_speed(p):.2f} < {sc.floor}")
    named = _plan(prof, sc.machine(named=True), pins, obj)
    if sc.identical and (named.fits, named.settings) != (p.fits, p.settings):
        bad.append("identical cards plan differently from named cards")
    if _plan(prof, m, pins, obj) != p:
        bad.append("not deterministic")
    bad.extend(_check_monotone(prof, sc, pins, p))
    TALLY["scenarios"] += 1
    TALLY[sc.goal.value] += 1
    TALLY["floor"] += sc.floor is not None
    TALLY["fits" if p.fits else "no_fit"] += 1
    TALLY["finer"] += p.fits and (p.placement.finer.ffn_cpu > 0 or p.placement.finer.no_kv_offload)
    TALLY["points"] += o.points
    TALLY["violations"] += len(bad)
    return [f"{sc}: {b}" for b in bad]


@settings(
    max_examples=int(os.environ.get("FITPLAN_ORACLE_EXAMPLES", "150")),  # more for an offline run
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_planner_matches_the_exhaustive_search(sc: Scenario) -> None:
    assert check_scenario(sc) == []


@pytest.mark.parametrize(
    "sc",
    [
        # the shapes of the cases, small: host short with one card, identical cards, a hybrid on 3 GPUs
        Scenario("dense-swa", (2.0,), False, 1.5, "ctx"),
        Scenario("moe", (1.5, 1.5), True, 3.0, "none"),
        Scenario("hybrid-next", (2.0, 2.0, 2.0), True, 4.0, "np1"),
        Scenario("mla-moe", (1.5, 2.5), False, 2.0, "q8"),
        Scenario("hybrid-moe", (1.0,), False, 1.0, "none"),
        # longest context first, and speed floors: the single-card MoE trades experts on the GPU for context
        Scenario("moe", (2.0,), False, 16.0, "none", Goal.CONTEXT),
        Scenario("moe", (2.0,), False, 16.0, "none", Goal.CONTEXT, 30.0),
        Scenario("mla-moe", (2.0, 2.5), False, 16.0, "none", Goal.PLACEMENT, 30.0),
        Scenario("dense", (1.5,), False, 16.0, "none", Goal.PLACEMENT, 8.0),
    ],
)
def test_fixed_scenarios_match_the_exhaustive_search(sc: Scenario) -> None:
    assert check_scenario(sc) == []


#: Where -ngl 0 is off the order of the other points (the output layer stays on the host): with a few outputs the
#: first GPU runs the host layers' products but copies no output matrix in, so -ngl 0 with the GPUs is cheaper than
#: -ngl 1 and reaches the longest context, where it ties with -dev none (whose GPUs keep all their headroom: the
#: tie's last criterion); with 32 outputs the first GPU copies the output matrix in at -ngl 0, so it holds more there
#: than at -ngl 1 with the output layer on the second GPU, and nothing fits at -ngl 0 that fits at -ngl 1 or more.
CHEAPER_AT_NGL0 = [
    Scenario("hybrid-next", (2.0, 1.25), False, 6.0, "ncmoe", Goal.CONTEXT),
    Scenario("moe", (1.75,), False, 6.0, "ncmoe", Goal.CONTEXT),
    Scenario("dense", (1.75, 1.5, 1.5), False, 32.0, "ctx", Goal.CONTEXT),
]
DEARER_AT_NGL0 = [
    Scenario("dense", (1.75, 2.0), False, 2.5, "np32"),
    Scenario("dense-swa", (1.75, 3.0), False, 3.0, "np32"),
]


def _solver(sc: Scenario) -> tuple[Solver, int]:
    prof = small_model(sc.kind)
    pb = problem_of(prof, sc.machine(), sc.pins(prof))
    ev = Evaluator(prof, pb.machine, MarginPolicy(), default_estimate_fn())
    return Solver(ev, pb.base, pb.space, tensor_split=pb.pins.tensor_split), pb.ncmoe_choices[0]


#: Where the first GPU holds more at -ngl 1 than at -ngl 2 under a pinned split (the output layer on it, with the
#: host layers' attention over copies of their cache): a bisection of -ngl from 0 probes -ngl 3 (no fit) and 1 (no
#: fit) and returns 0, where -ngl 2 with every expert on the CPU fits (`Solver.output_settled`).
OUTPUT_LAYER_MOVES = [Scenario("hybrid-moe", (1.5, 1.5), True, 2.0, "ts", Goal.PLACEMENT)]


@pytest.mark.parametrize("sc", OUTPUT_LAYER_MOVES)
def test_the_output_layers_gpu_bounds_the_bisection(sc: Scenario) -> None:
    s, _ = _solver(sc)
    assert s.check(2, 6, 4096).gpus_fit and not s.check(1, 6, 4096).gpus_fit
    assert check_scenario(sc) == []


@pytest.mark.parametrize("sc", CHEAPER_AT_NGL0 + DEARER_AT_NGL0)
def test_ngl0_off_the_order_matches_the_exhaustive_search(sc: Scenario) -> None:
    assert check_scenario(sc) == []


@pytest.mark.parametrize("sc", CHEAPER_AT_NGL0)
def test_the_gpus_hold_less_at_ngl0(sc: Scenario) -> None:
    """The scenario has the case: at the plan's context the GPUs fit at -ngl 0 and at no split of -ngl 1, and the
    plan leaves them out (-dev none), their headroom whole."""
    p = _plan(small_model(sc.kind), sc.machine(), sc.pins(small_model(sc.kind)), sc.objective())
    assert p.fits and p.settings.devices == ()
    s, ncmoe = _solver(sc)
    assert s.check(0, ncmoe, p.settings.n_ctx).gpus_fit
    assert not s.check(1, ncmoe, p.settings.n_ctx).gpus_fit


@pytest.mark.parametrize("sc", DEARER_AT_NGL0)
def test_the_first_gpu_holds_more_at_ngl0(sc: Scenario) -> None:
    """The scenario has the case: the first GPU uses more at -ngl 0 than at -ngl 1 with the output layer on the
    second GPU, does not fit at -ngl 0, and the plan offloads layers."""
    s, ncmoe = _solver(sc)
    at0 = s.usage(Point(0, ncmoe, (0, 0)), 4096)[0]
    at1 = s.usage(Point(1, ncmoe, (0, 1)), 4096)[0]
    assert at0.used_bytes > at1.used_bytes and not at0.fits
    p = _plan(small_model(sc.kind), sc.machine(), sc.pins(small_model(sc.kind)), sc.objective())
    assert p.fits and p.placement.n_gpu_layers >= 1


def _cpu_may_win_by_context_only(best: Plan, pb: planner.Problem, objective: Objective) -> bool:
    """The rule before: with the longest context first, -dev none was tried only when the context could grow."""
    if not best.fits:
        return True
    if objective.goal is Goal.CONTEXT:
        return pb.pinned_ctx is None and not best.context.capped_by_training
    return best.placement.n_gpu_layers == 0


def test_a_planner_assuming_monotone_memory_misses_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenarios catch a planner that assumes the GPUs hold the most at -ngl 0 where fewer layers are on them
    (-dev none tried only for a longer context) or the least (a bisection of -ngl from 0)."""
    saved = dict(TALLY)
    try:
        with monkeypatch.context() as m:
            m.setattr(planner, "_cpu_may_win", _cpu_may_win_by_context_only)
            assert all(check_scenario(sc) for sc in CHEAPER_AT_NGL0)
        with monkeypatch.context() as m:
            m.setattr(solver, "_largest_gpu_fit", lambda lo, hi, pred, edge=None: largest_true(lo, hi, pred))
            assert all(check_scenario(sc) for sc in DEARER_AT_NGL0)
    finally:
        TALLY.update(saved)


@pytest.mark.parametrize(
    ("sc", "partial", "nkvo"),
    [
        # placements finer than whole layers as the best answer (`finer`): a partial layer with the placement
        # first and with the context first, and -nkvo with every weight kept on the GPU (measured)
        (Scenario("dense", (2.0,), False, 3.0, "none"), 2, False),
        (Scenario("dense-swa", (3.25,), False, 3.0, "none", Goal.CONTEXT), 1, False),
        (Scenario("dense", (3.0,), False, 2.0, "all_on_gpu", Goal.CONTEXT), 0, True),
        # the same with a free split over two GPUs: the partial layer on top of the whole layers' split, with
        # the placement and with the context first
        (Scenario("dense", (2.0, 2.0), True, 2.0, "none"), 3, False),
        (Scenario("dense-swa", (2.5, 2.5), True, 3.0, "none", Goal.CONTEXT), 1, False),
        # not with a free split over three GPUs (`finer._common`)
        (Scenario("dense", (2.5, 2.5, 2.5), True, 2.0, "fa_off", Goal.CONTEXT), 0, False),
        # -nkvo over two GPUs with every weight kept on them (`finer.nkvo_devices`)
        (Scenario("dense", (2.25, 2.25), True, 3.0, "all_on_gpu", Goal.CONTEXT), 0, True),
        # two unlike GPUs where the whole layers' search finds no split that fits beyond a short context: the
        # partial layer at the top -ngl from the split balanced there (all on the second GPU) reaches 15104
        (Scenario("dense", (1.25, 3.0), False, 1.5, "none", Goal.CONTEXT), 1, False),
    ],
)
def test_finer_placements_match_the_exhaustive_search(sc: Scenario, partial: int, nkvo: bool) -> None:
    prof = small_model(sc.kind)
    p = _plan(prof, sc.machine(), sc.pins(prof), sc.objective())
    assert (p.placement.finer.ffn_cpu, p.placement.finer.no_kv_offload) == (partial, nkvo)
    assert check_scenario(sc) == []


def test_oracle_tally(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs after the scenarios (file order): prints how many were checked, for the closing note."""
    with capsys.disabled():
        print(f"\nplanner oracle: {TALLY}")
    assert TALLY["violations"] == 0


def test_oracle_space_is_the_whole_space() -> None:
    # a 6-layer dense model on 2 GPUs: -ngl 0..7 (7 = the 6 blocks and the output layer), each with every split of
    # the offloaded indices over 2 GPUs (n + 1 of them): sum over n = 0..7 of (n + 1) = 36 points; the partial
    # layers (-ngl 2..7, the first offloaded index a block) at 3 fractions, each at every split: 3 * (3 + 4 + ... +
    # 8) = 99; -nkvo at -ngl 7, at every split (`finer.nkvo_devices`: two GPUs of ggml-cuda's, an assumed GPU's
    # make unknown): 8; and the GPUs left out (-dev none): 144
    prof = small_model("dense")
    o = exhaustive_plan(prof, Machine((assumed_gpu("A", 8), assumed_gpu("B", 8)), host_device(64 * GIB)))
    assert o.points == 36 + 99 + 8 + 1
    assert o.fits and o.point is not None and o.point.ngl == 7
