"""The planner against the exhaustive search on unified-memory machines: GPUs whose memory is the host's RAM
(one pool, `fitplan.core.plan.pool`), and an APU whose carve-out is its own and whose GTT is the host's. The same
checks as tests/plan/test_plan_oracle.py (sound, complete, optimal, monotone, deterministic)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_plan_oracle import KINDS, PIN_CHOICES, Scenario, check_scenario

from fitplan.core.base.devices import GIB, Device, DeviceKind, Machine, Vendor, host_device
from fitplan.core.plan.objective import Goal
from fitplan.core.plan.planner import plan
from support.plan_models import small_model


@dataclasses.dataclass(frozen=True)
class UnifiedScenario(Scenario):
    """`gpu_gib`: what each GPU may allocate; `carve_out_gib` of it is its own, the rest is host RAM."""

    carve_out_gib: float = 0.0

    def machine(
        self, extra_gpu_gib: float = 0.0, extra_host_gib: float = 0.0, named: bool = False
    ) -> Machine:
        host = host_device(int((self.host_gib + extra_host_gib) * GIB))
        gpus = []
        for i, g in enumerate(self.gpu_gib):
            size = int((g + extra_gpu_gib) * GIB)
            shared = size - int(self.carve_out_gib * GIB)
            name = f"U{i}" if named or not self.identical else f"{g:g} GiB unified GPU"
            gpus.append(
                Device(
                    name,
                    DeviceKind.GPU,
                    size,
                    size,
                    Vendor.GENERIC,
                    hypothetical=True,
                    unified_memory=True,
                    host_shared_bytes=shared,
                )
            )
        return Machine(tuple(gpus), host)


@st.composite
def unified_scenarios(draw: st.DrawFn) -> UnifiedScenario:
    kind = draw(st.sampled_from(sorted(KINDS)))
    weights = small_model(kind).weight_bytes / GIB
    gpu = draw(st.sampled_from([round(weights * f * 4) / 4 + 1 for f in (0.3, 0.7, 1.0, 1.4)]))
    host = draw(st.sampled_from([1.5, 3.0, 6.0, 16.0, 128.0]))
    carve = draw(st.sampled_from([0.0, 0.5]))
    pin = draw(st.sampled_from(PIN_CHOICES))
    goal = draw(st.sampled_from(list(Goal)))
    return UnifiedScenario(kind, (gpu,), False, host, pin, goal=goal, carve_out_gib=carve)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(unified_scenarios())
def test_planner_matches_the_exhaustive_search_on_unified_memory(sc: UnifiedScenario) -> None:
    assert check_scenario(sc) == []


@pytest.mark.parametrize(
    "sc",
    [
        UnifiedScenario(
            "dense", (4.0,), False, 3.0, "none", carve_out_gib=0.0
        ),  # the pool, not the GPU, is short
        UnifiedScenario("moe", (3.0,), False, 16.0, "none", carve_out_gib=0.5),
        UnifiedScenario("moe", (3.0,), False, 16.0, "none", goal=Goal.CONTEXT, carve_out_gib=0.5),
    ],
)
def test_fixed_unified_scenarios(sc: UnifiedScenario) -> None:
    assert check_scenario(sc) == []


def test_a_pool_shorter_than_the_gpu_lowers_the_plan() -> None:
    """The same GPU with a small pool plans less than with a large one: the host is charged for the GPU's bytes."""
    big = UnifiedScenario("dense", (4.0,), False, 64.0, "none")
    small = dataclasses.replace(big, host_gib=2.0)
    prof = small_model("dense")
    p_big, p_small = plan(prof, big.machine()), plan(prof, small.machine())
    assert p_big.fits
    smaller = (not p_small.fits) or p_small.settings.n_ctx < p_big.settings.n_ctx
    assert smaller or p_small.placement.n_gpu_layers < p_big.placement.n_gpu_layers
