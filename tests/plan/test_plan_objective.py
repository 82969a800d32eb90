"""The user's objective (fastest placement first, longest context first, a speed floor) on published-shape sparse
headers. Each number was measured with the planner on these headers; the objective was not a choice before (a462e25:
these tests cannot import it)."""

from __future__ import annotations

import pytest

from fitplan.core.base.devices import GIB, Machine, host_device
from fitplan.core.base.errors import SettingsError
from fitplan.core.gguf.reader import open_model
from fitplan.core.hardware import assumed_devices
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.alternatives import what_would_change, why_this_context
from fitplan.core.plan.objective import Goal, Objective
from fitplan.core.plan.planner import Pins, Plan, plan, plan_verdict
from fitplan.core.plan.summary import verdict_words
from support.models import TESTS

SPARSE = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"


def _profile(name: str) -> ModelProfile:
    return build_profile(
        open_model(str(SPARSE / f"{name}.header.gguf"), find_mmproj=False, allow_incomplete=True)
    )


def _machine(gpu: str, host_gib: int) -> Machine:
    return Machine(assumed_devices([gpu]), host_device(host_gib * GIB))


def _words(p: Plan, m: Machine) -> str:
    return verdict_words(p, plan_verdict(p, m), p.settings.n_ctx, bool(m.gpus)).text


# -- the objective is a choice -------------------------------------------------------------------------------------


def test_longest_context_first_trades_experts_for_context() -> None:
    # gpt-oss-120b on an 18 GiB card and 96 GiB: the fastest placement (27 expert layers on CPU) leaves 5,120
    # tokens, a 16 GiB card gives more (38,144: fewer layers fit, the rest of its memory goes to the cache);
    # longest context first reaches the training length with 30 expert layers on the CPU
    prof = _profile("gpt-oss-120b")
    m18, m16 = _machine("18GiB", 96), _machine("16GiB", 96)
    fast18, fast16 = plan(prof, m18), plan(prof, m16)
    assert (fast18.settings.n_ctx, fast18.placement.description) == (5120, "27 expert layers on CPU")
    assert fast16.settings.n_ctx == 38144 > fast18.settings.n_ctx
    long18 = plan(prof, m18, objective=Objective(Goal.CONTEXT))
    assert long18.objective.goal is Goal.CONTEXT
    assert (long18.settings.n_ctx, long18.placement.description) == (131072, "30 expert layers on CPU")
    # context first, a bigger card never gives less context
    assert plan(prof, m16, objective=Objective(Goal.CONTEXT)).settings.n_ctx <= long18.settings.n_ctx
    # the output says why in one line, and offers the other goal
    alts = what_would_change(prof, m18, Pins(), fast18)
    other = next(a for a in alts if a.change == "--objective context")
    assert other.n_ctx == 131072
    why = why_this_context(fast18, alts)
    assert "\n" not in why
    assert why.startswith("the fastest placement comes first (27 expert layers on CPU)")
    assert "--objective context gives 131,072 with 30 expert layers on CPU" in why
    # no why when the context is the training length, or when the context came first, or was given
    assert why_this_context(long18, what_would_change(prof, m18, Pins(), long18)) == ""
    pinned = plan(prof, m18, Pins(n_ctx=5120))
    assert why_this_context(pinned, what_would_change(prof, m18, Pins(n_ctx=5120), pinned)) == ""


def test_a_speed_floor_needs_a_speed_model_and_is_kept() -> None:
    prof = _profile("qwen3-30b-a3b")
    m = _machine("12GiB", 64)
    with pytest.raises(SettingsError, match="speed"):
        plan(prof, m, objective=Objective(min_gen_tps=20.0))

    def speed(p: Plan) -> float:
        # a stand-in with the objective's assumption: fewer expert bytes off the GPU and less context are faster
        return 100.0 - p.placement.off_gpu_bytes / GIB - p.settings.n_ctx / 4096

    free = plan(prof, m, objective=Objective(Goal.CONTEXT), speed_of=speed)
    floor = speed(free) + 3.0  # the longest context is too slow for this floor
    kept = plan(prof, m, objective=Objective(Goal.CONTEXT, floor), speed_of=speed)
    assert kept.fits and speed(kept) >= floor
    assert kept.settings.n_ctx < free.settings.n_ctx
    fastest = plan(prof, m, speed_of=speed)
    too_fast = speed(fastest) + 0.2  # faster than the fastest placement at its own context: a shorter context
    short = plan(prof, m, objective=Objective(min_gen_tps=too_fast), speed_of=speed)
    assert short.fits and speed(short) >= too_fast and short.settings.n_ctx < fastest.settings.n_ctx
    assert "generation" in short.binding
    none = plan(prof, m, objective=Objective(min_gen_tps=1000.0), speed_of=speed)
    assert not none.fits and none.binding.startswith("does not reach 1000 t/s generation")


def test_context_first_keeps_a_small_card_when_it_helps() -> None:
    # gpt-oss-120b, a 3 GiB card and 96 GiB: placement first keeps 14 offloaded indices at 4,352 tokens; context
    # first keeps the output layer on the GPU at the training length (the card also runs the host layers' attention
    # over copies of their cache, 131072 cells of one layer's K and V and the mask), which beats leaving the card
    # out (-dev none, the same context with nothing on the GPU). 4,352 tokens since the host layers' FFN is replayed
    # over the freed K and V copies and the biased Q lands in its copy's space (4,096 before)
    prof = _profile("gpt-oss-120b")
    m3 = _machine("3GiB", 96)
    fast = plan(prof, m3)
    assert (fast.settings.n_ctx, fast.settings.devices, fast.placement.n_gpu_layers) == (4352, None, 14)
    long3 = plan(prof, m3, objective=Objective(Goal.CONTEXT))
    assert (long3.settings.n_ctx, long3.settings.devices, long3.placement.n_gpu_layers) == (131072, None, 1)
