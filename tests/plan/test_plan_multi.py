"""Set plans (`fitplan.core.plan.multi`): several models on one machine, resident together or swapped in turn.

* optimal: on sets small enough to enumerate, `plan_set` finds the best split and placements by the written rule
  (`multi_key`) that the exhaustive search (`multi_oracle`) finds, over every subset and every combination;
* sound: every resident model, with each swapped one in turn, fits every device at the settings the plan prints
  (estimated again from those settings), the grown context included;
* the issue's case: a 24 GiB card, a chat model, an embedding model and a reranker: all resident, one budget.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitplan.core.base.devices import GIB, Machine, assumed_gpu, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.estimate.estimator import estimate
from fitplan.core.plan.multi import MultiModel, MultiPlan, MultiRequest, Status, capacities, plan_set, within
from fitplan.core.plan.multi_oracle import exhaustive_multi
from fitplan.core.plan.planner import Pins
from fitplan.core.plan.usage import MarginPolicy, Reserve
from support.plan_models import generated, small_model

KINDS = ("dense", "dense-swa", "moe", "hybrid-moe")


def _request(
    kinds: tuple[str, ...], gpu_gib: float, host_gib: float, pinned: tuple[bool, ...], models_max: int = 0
) -> MultiRequest:
    models = tuple(
        MultiModel(f"{k}-{i}", small_model(k), Pins(n_ctx=8192) if pin else Pins())
        for i, (k, pin) in enumerate(zip(kinds, pinned, strict=True))
    )
    machine = Machine((assumed_gpu("G", gpu_gib),), host_device(int(host_gib * GIB)))
    return MultiRequest(models, machine, models_max=models_max)


def _sound(req: MultiRequest, p: MultiPlan) -> list[str]:
    """Re-estimate every model at the settings the plan gives it and check the residents with each swapped one."""
    caps = capacities(req.machine, req.margin)
    by_name = {m.name: m for m in req.models}
    use = {}
    for c in p.models:
        est = estimate(by_name[c.name].profile, c.settings, req.machine)
        use[c.name] = tuple(d.used_bytes for d in est.devices)
    base = tuple(0 for _ in caps)
    for c in p.resident:
        base = tuple(a + b for a, b in zip(base, use[c.name], strict=True))
    loads = [base] + [tuple(a + b for a, b in zip(base, use[c.name], strict=True)) for c in p.swapped]
    return [f"over capacity: {u} > {caps}" for u in loads if not within(u, caps)]


def check(req: MultiRequest) -> list[str]:
    p = plan_set(req)
    o = exhaustive_multi(req)
    bad = []
    if p.key != o.key:
        bad.append(f"plan key {p.key} != exhaustive {o.key}")
    if tuple(m.loadable for m in p.models) != o.loadable:
        bad.append("loadable models differ")
    bad += _sound(req, p)
    if p.fits != all(o.loadable) or not all(b.fits for b in p.budgets):
        bad.append(f"fits={p.fits} with loadable {o.loadable} and budgets {[b.fits for b in p.budgets]}")
    if plan_set(req) != p:
        bad.append("not deterministic")
    return bad


@st.composite
def scenarios(draw: st.DrawFn) -> MultiRequest:
    n = draw(st.integers(2, 3))
    kinds = tuple(draw(st.sampled_from(KINDS)) for _ in range(n))
    gpu = draw(st.sampled_from([1.5, 3.0, 4.5, 6.0, 9.0]))
    host = draw(st.sampled_from([2.0, 4.0, 8.0, 64.0]))
    pinned = tuple(draw(st.booleans()) for _ in range(n))
    return _request(kinds, gpu, host, pinned, draw(st.sampled_from([0, 0, 1, 2])))


@settings(
    max_examples=int(os.environ.get("FITPLAN_MULTI_EXAMPLES", "30")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_set_plan_matches_the_exhaustive_search(req: MultiRequest) -> None:
    assert check(req) == []


@pytest.mark.parametrize(
    ("kinds", "gpu", "host"),
    [
        (("dense", "moe", "dense-swa"), 4.5, 8.0),  # the GPU holds one whole, the rest shares
        (("moe", "dense"), 1.5, 2.0),  # a small card and little RAM: one model swaps
        (("dense-swa", "hybrid-moe", "dense"), 9.0, 64.0),  # everything resident on the GPU
    ],
)
def test_fixed_sets_match_the_exhaustive_search(kinds: tuple[str, ...], gpu: float, host: float) -> None:
    assert check(_request(kinds, gpu, host, (False,) * len(kinds))) == []


def test_the_first_model_stays_resident_and_the_others_take_turns() -> None:
    # three copies of a 2 GiB model (at -c 8192) on a 4.5 GiB card and 2 GiB of RAM: two fit together, three do not
    req = _request(("dense", "dense", "dense"), 4.5, 2.0, (True, True, True))
    p = plan_set(req)
    assert [m.status for m in p.models] == [Status.RESIDENT, Status.SWAPPED, Status.SWAPPED]
    assert p.models[0].placement.cpu_layers == 0  # the resident one keeps every layer on the card
    assert p.models_max == 2 and p.fits
    gpu = p.budgets[0]
    assert [n for n, _ in gpu.resident] == ["dense-0"] and gpu.swap is not None and gpu.fits


def test_models_max_leaves_a_swap_slot() -> None:
    # everything fits together on a 9 GiB card, but --models-max 2 loads at most two: one resident, one slot
    req = _request(("dense-swa", "hybrid-moe", "dense"), 9.0, 64.0, (False,) * 3, models_max=2)
    p = plan_set(req)
    assert [m.status for m in p.models] == [Status.RESIDENT, Status.SWAPPED, Status.SWAPPED]
    assert p.models_max == 2


def test_two_models_are_both_resident_or_both_swapped() -> None:
    # a swap slot holds one model: with two, "one resident and one swapped" is "both resident"
    req = _request(("dense", "dense"), 3.0, 2.5, (True, True))
    p = plan_set(req)
    assert [m.status for m in p.models] == [Status.SWAPPED, Status.SWAPPED]
    assert p.models_max == 1 and p.fits


def test_a_model_too_large_for_the_machine_is_left_out_and_named() -> None:
    req = _request(("dense", "moe"), 1.5, 1.0, (False, False))
    p = plan_set(req)
    assert not p.fits
    assert any(m.status == Status.NO_FIT and "even alone" in m.note for m in p.models)


def test_reserves_are_kept_on_their_device() -> None:
    req = _request(("dense", "moe"), 9.0, 64.0, (False, False))
    held = dataclasses.replace(req, margin=MarginPolicy(reserves=(Reserve(0, 6 * GIB, "desktop"),)))
    free, kept = plan_set(req), plan_set(held)
    assert kept.budgets[0].kept_bytes == free.budgets[0].kept_bytes + 6 * GIB
    assert kept.budgets[0].used_bytes <= kept.budgets[0].capacity_bytes
    assert kept.key < free.key  # less of the card: the set keeps fewer weights on it
    assert "6144 MiB of GPU0 for desktop" in held.margin.describe()


# ---------------------------------------------------------------------------------------------------------------------
# The case: a 24 GiB card, a chat model, an embedding model and a reranker
# ---------------------------------------------------------------------------------------------------------------------

#: Qwen/Qwen3-Embedding-0.6B and Qwen/Qwen3-Reranker-0.6B config.json (the same shape)
QWEN3_0_6B = {
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
    "vocab_size": 151669,
    "max_position_embeddings": 32768,
}


def chat_embedding_reranker() -> MultiRequest:
    chat = generated("qwen3-8b", {}, "qwen3-8b")
    small = generated("qwen3-8b", QWEN3_0_6B, "qwen3-0.6b")
    models = (
        MultiModel("chat", chat, path="chat.gguf"),
        MultiModel("embed", small, Pins(base=LaunchSettings(embedding=True)), path="embed.gguf"),
        MultiModel("rerank", small, Pins(base=LaunchSettings(reranking=True)), path="rerank.gguf"),
    )
    return MultiRequest(models, Machine((assumed_gpu("RTX 4090", 24),), host_device(32 * GIB)))


def test_chat_embedding_and_reranker_stay_resident_on_a_24_gib_card() -> None:
    req = chat_embedding_reranker()
    p = plan_set(req)
    assert [m.status for m in p.models] == [Status.RESIDENT] * 3
    assert all(m.placement.cpu_layers == 0 for m in p.models)  # every layer of every model on the card
    assert p.grown == "chat" and p.models[0].settings.n_ctx > 4096  # the chat model takes what is left
    gpu = p.budgets[0]
    assert [n for n, _ in gpu.resident] == ["chat", "embed", "rerank"] and gpu.fits
    assert p.models[0].settings.n_ctx == 40960  # up to its training length: the card has room for it
    assert _sound(req, p) == []
    assert p.models_max == 3


def test_a_walk_over_its_budget_leaves_the_model_swapped_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import fitplan.core.plan.multi as multi

    req = _request(("dense-swa", "hybrid-moe", "dense"), 9.0, 64.0, (False,) * 3)
    assert [m.status for m in plan_set(req).models] == [Status.RESIDENT] * 3
    monkeypatch.setattr(multi, "WALK_BUDGET", 2)  # one model: 2 steps; two or more: more
    p = plan_set(req)
    assert [m.status for m in p.models] == [Status.RESIDENT, Status.SWAPPED, Status.SWAPPED]
    assert all("not settled within 2 steps" in m.note for m in p.models[1:])
    assert _sound(req, p) == [] and p.fits


def test_the_router_loads_no_more_models_than_fit_in_any_combination() -> None:
    # llama-server's router unloads the least recently used model, not a chosen one: any --models-max of the
    # models may be loaded together, so the router's count is the largest that fits in every combination
    import itertools

    for req in (
        _request(("dense", "dense", "dense"), 4.5, 2.0, (True, True, True)),
        _request(("dense-swa", "hybrid-moe", "dense"), 9.0, 64.0, (False,) * 3),
        _request(("moe", "dense", "dense-swa"), 4.5, 8.0, (False,) * 3),
    ):
        p = plan_set(req)
        caps = capacities(req.machine, req.margin)
        by_name = {m.name: m for m in req.models}
        use = [
            tuple(d.used_bytes for d in estimate(by_name[m.name].profile, m.settings, req.machine).devices)
            for m in p.models
        ]

        def fit_all(k: int, use: list[tuple[int, ...]] = use, caps: tuple[int, ...] = caps) -> bool:
            return all(
                within(tuple(map(sum, zip(*combo, strict=True))), caps)
                for combo in itertools.combinations(use, k)
            )

        k = p.router_models_max
        assert 1 <= k <= p.models_max and fit_all(k)
        assert k == p.models_max or not fit_all(k + 1)
