"""Placements finer than whole layers (`fitplan.core.plan.finer`): a dense model's partial layer (its FFN tensors on
the host, as common/fit.cpp writes them), -nkvo, and dropping the draft model in "what would change it". Each case
is one where the new option is the best answer: the planner finds it, the exhaustive search (`oracle`, over the same
space) agrees, and the exported command carries the flags and fits when parsed back. The estimates of these
placements are checked against llama.cpp in tests/estimate/test_finer_recorded.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fitplan.core.base.devices import GIB, Machine, assumed_gpu, host_device
from fitplan.core.base.launch_settings import NGL_ALL, DraftSettings, LaunchSettings
from fitplan.core.base.results import TermKind
from fitplan.core.estimate.estimator import estimate
from fitplan.core.gguf.reader import open_model
from fitplan.core.launch.command_line import plan_to_args
from fitplan.core.launch.flags import parse_flags
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.alternatives import what_would_change
from fitplan.core.plan.objective import Goal, Objective
from fitplan.core.plan.oracle import exhaustive_plan
from fitplan.core.plan.planner import Pins, Plan, plan, plan_key
from fitplan.core.plan.search import default_estimate_fn
from fitplan.core.plan.usage import MarginPolicy, usage_of

SPARSE = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "models" / "sparse"


def _profile(name: str) -> ModelProfile:
    return build_profile(
        open_model(str(SPARSE / f"{name}.header.gguf"), find_mmproj=False, allow_incomplete=True)
    )


@pytest.fixture(scope="module")
def llama8b() -> ModelProfile:
    return _profile("llama-3.1-8b")


def _machine(gpu_gib: float, host_gib: float) -> Machine:
    return Machine((assumed_gpu(f"{gpu_gib:g} GiB GPU", gpu_gib),), host_device(int(host_gib * GIB)))


def _args(p: Plan) -> list[str]:
    return list(plan_to_args(p, "model.gguf", program=""))


def _exported_fits(prof: ModelProfile, p: Plan, m: Machine) -> bool:
    est = estimate(prof, parse_flags(_args(p)).settings, m)
    return all(u.fits for u in usage_of(est, m, MarginPolicy()))


def _matches_the_oracle(
    prof: ModelProfile, m: Machine, pins: Pins, p: Plan, goal: Goal = Goal.PLACEMENT
) -> None:
    o = exhaustive_plan(prof, m, pins, objective=Objective(goal))
    assert o.fits and p.fits
    assert plan_key(p) == o.key, (p.placement.description, o.point)


def test_the_partial_layer_is_the_best_placement(llama8b: ModelProfile) -> None:
    """llama-3.1-8b on a 5.5 GiB card: 25 whole layers fit; the 26th with its ffn_down and ffn_gate on the host
    (LAYER_FRACTION_UP) fits too and keeps more on the GPU. Before: -ngl 25, 8 of 32 layers on the CPU."""
    m = _machine(5.5, 32)
    p = plan(llama8b, m, Pins())
    assert p.fits
    assert p.placement.n_gpu_layers == 26 and p.placement.cpu_layers == 7
    assert p.placement.description == "ffn_down+gate of layer 7 on CPU, 7 of 32 layers on CPU"
    args = _args(p)
    assert args[args.index("-ot") + 1] == r"blk\.7\.ffn_(gate|gate_up|down).*=CPU"
    assert args[args.index("-ngl") + 1] == "26"
    assert _exported_fits(llama8b, p, m)
    assert any(n.startswith("layer 7 split: attention and cache on the GPU") for n in p.notes)
    _matches_the_oracle(llama8b, m, Pins(), p)


def test_the_partial_layer_fits_where_whole_layers_do_not(llama8b: ModelProfile) -> None:
    """The same card with 2.45 GiB of host RAM: with whole layers the 8 on the host need 1508 MiB, more than the
    host has; the partial layer keeps one layer's attention and cache on the GPU and fits. Before: does not fit."""
    m = _machine(5.5, 2.45)
    p = plan(llama8b, m, Pins())
    assert p.fits, p.binding
    assert p.placement.finer.ffn_cpu and p.placement.cpu_layers == 7
    assert _exported_fits(llama8b, p, m)
    _matches_the_oracle(llama8b, m, Pins(), p)
    for ngl in (25, 26):  # whole layers: the host is short at 25, the GPU at 26
        assert not plan(llama8b, m, Pins(n_gpu_layers=ngl)).fits


def _two(gpu_gib: float, host_gib: float) -> Machine:
    gpu = assumed_gpu(f"{gpu_gib:g} GiB GPU", gpu_gib)
    return Machine((gpu, gpu), host_device(int(host_gib * GIB)))


def test_the_partial_layer_with_a_free_split_over_two_gpus(llama8b: ModelProfile) -> None:
    """Two 2.75 GiB cards, the split free: 14 whole layers fit; the 15th with its
    FFN on the host goes to the first card (-ts 9,6 in layers: the first card takes the first offloaded indices,
    the partial layer among them; its ffn_down and ffn_gate alone on the host before the second host layer's
    attention was replayed whole on the first card, 8 MiB more at this context). Before: -ngl 14, whole layers
    only with several GPUs."""
    m = _two(2.75, 32)
    p = plan(llama8b, m, Pins())
    assert p.fits, p.binding
    assert p.placement.description == (
        "the FFN of layer 18 on CPU, 18 of 32 layers on CPU, split 9:6 layers across GPUs"
    )
    args = _args(p)
    assert args[args.index("-ngl") + 1] == "15"
    assert args[args.index("-ts") + 1] == "9,6"
    assert args[args.index("-ot") + 1] == r"blk\.18\.ffn_(gate|up|gate_up|down).*=CPU"
    assert _exported_fits(llama8b, p, m)
    _matches_the_oracle(llama8b, m, Pins(), p)


def test_the_partial_layer_of_a_27b_model_on_two_8gib_cards() -> None:
    """gemma-3-27b on two 8.25 GiB cards: 45 whole layers fit, the 46th with its ffn_down on the host too (the
    exhaustive search over this model's splits is too large for a unit test; llama-3.1-8b's case above checks the
    same search against it). Before: -ngl 45."""
    prof = _profile("gemma-3-27b")
    m = _two(8.25, 32)
    p = plan(prof, m, Pins())
    assert p.fits, p.binding
    args = _args(p)
    assert args[args.index("-ngl") + 1] == "46"
    assert args[args.index("-ot") + 1] == r"blk\.17\.ffn_down.*=CPU"
    assert "-ts" in args
    assert _exported_fits(prof, p, m)
    whole = plan(prof, m, Pins(n_gpu_layers=46, no_kv_offload=False))  # the 46th layer whole does not fit
    assert not whole.fits


def test_nkvo_keeps_every_weight_on_the_gpu(llama8b: ModelProfile) -> None:
    """--all-on-gpu on a 6.1 GiB card: the weights and compute fit, the cache of 4096 cells does not;
    with -nkvo the cache lives in host memory and the plan fits. Before: does not fit with all weights on the GPU."""
    m = _machine(6.1, 32)
    pins = Pins(all_weights_on_gpu=True)
    p = plan(llama8b, m, pins)
    assert p.fits, p.binding
    assert p.settings.no_kv_offload and p.placement.cpu_layers == 0
    assert "-nkvo" in _args(p)
    assert p.placement.description == "all layers on the GPU, KV cache on the host (-nkvo)"
    assert _exported_fits(llama8b, p, m)
    _matches_the_oracle(llama8b, m, pins, p)


def test_nkvo_over_two_gpus_when_the_weights_fill_them(llama8b: ModelProfile) -> None:
    """--all-on-gpu over two 4.0 GiB cards: the weights fit split 17:16, the cache at the context floor does not;
    -nkvo keeps the cache on the host. Over two GPUs the first one runs each layer's attention over copies of the
    cache's views and mask (`HostCacheAttention`, exact on the two-GPU -nkvo recordings of llama-3.1-8b), which grow
    with the context and bound it. Before, -nkvo was planned on one GPU only and nothing fitted here."""
    gpu = assumed_gpu("4 GiB GPU", 4.0)
    m = Machine((gpu, gpu), host_device(32 * GIB))
    pins = Pins(all_weights_on_gpu=True)
    p = plan(llama8b, m, pins)
    assert p.fits and p.settings.no_kv_offload and p.placement.cpu_layers == 0
    assert "-nkvo" in _args(p) and "-ts" in _args(p)
    assert _exported_fits(llama8b, p, m)
    _matches_the_oracle(llama8b, m, pins, p)


def test_nkvo_counts_the_cache_it_reads_from_the_host(llama8b: ModelProfile) -> None:
    """The objective weighs -nkvo by the cache's bytes at the context floor (512 MiB at 4096 cells, 4 layers'
    worth of weights): where the partial layer fits it keeps more on the GPU and wins (the same 6.1 GiB card)."""
    m = _machine(6.1, 32)
    p = plan(llama8b, m, Pins())
    assert p.placement.finer.ffn_cpu and not p.settings.no_kv_offload
    _matches_the_oracle(llama8b, m, Pins(), p)


def test_nkvo_for_the_longest_context_pays_its_copies(llama8b: ModelProfile) -> None:
    """Longest context first on the 6.1 GiB card: the training length with every layer on the GPU and the cache in
    host memory would need the GPU to run each layer's attention over copies of the cache's K and V views and its
    mask (the recording finer/llama-3.1-8b nkvo-c131072: 680.0 MiB of compute on the GPU, where 282.5 MiB were
    counted before), so -nkvo no longer fits with the margin there and whole layers keep the training length (27 of
    32 on the CPU); the exhaustive search agrees."""
    m = _machine(6.1, 32)
    p = plan(llama8b, m, Pins(), objective=Objective(Goal.CONTEXT))
    assert p.fits and p.settings.n_ctx == 131072
    assert not p.settings.no_kv_offload and p.placement.cpu_layers == 27
    _matches_the_oracle(llama8b, m, Pins(), p, Goal.CONTEXT)
    nkvo = dataclasses.replace(p.settings, no_kv_offload=True, n_gpu_layers=NGL_ALL, tensor_overrides=())
    est = estimate(llama8b, nkvo, m)
    assert est.devices[0].bytes_of(TermKind.COMPUTE) >> 20 == 680
    assert not all(u.fits for u in usage_of(est, m, MarginPolicy()))


def test_what_would_change_offers_nkvo_with_its_speed_at_a_full_cache(llama8b: ModelProfile) -> None:
    """With -ngl pinned below all, -nkvo is offered; its speed says what a full cache in host memory costs."""
    m = _machine(6.1, 32)
    pins = Pins(n_gpu_layers=20)
    p = plan(llama8b, m, pins)
    alts = what_would_change(llama8b, m, pins, p)
    nkvo = next(a for a in alts if a.change == "-nkvo")
    assert nkvo.fits and nkvo.generation_tps > nkvo.generation_full_tps > 0
    assert "with the cache full" in nkvo.speed_words()


def test_what_would_change_offers_dropping_the_draft(llama8b: ModelProfile) -> None:
    """llama-3.1-8b with a qwen3-8b draft on a 10 GiB card: both do not fit on the GPU (layers on the CPU); without
    the draft every layer does. The plan keeps the draft the user asked for and says what dropping it gives."""
    draft = _profile("qwen3-8b")
    m = _machine(10, 64)
    pins = Pins(base=LaunchSettings(draft=DraftSettings("draft.gguf", n_gpu_layers=99)))
    fn = default_estimate_fn(draft=draft)
    p = plan(llama8b, m, pins, estimate_fn=fn)
    assert p.fits and p.settings.draft is not None and p.placement.cpu_layers > 0
    alts = what_would_change(llama8b, m, pins, p, estimate_fn=fn)
    drop = next(a for a in alts if a.change.startswith("without the draft model"))
    assert drop.fits and drop.placement == "all layers on the GPU"
    assert drop.generation_tps > 0


def test_a_given_kvo_or_ot_is_kept(llama8b: ModelProfile) -> None:
    """The user's -kvo keeps the cache on the GPU (the plan does not fit rather than choose -nkvo), and an -ot of the
    user's turns the partial layer off (whole layers then), as every pin is kept."""
    from fitplan.core.launch.command_line import given_keys
    from fitplan.core.plan.pins import pins_from_settings

    m = _machine(6.1, 32)
    for flags, fits in ((("-kvo",), False), ((), True)):
        s = parse_flags(list(flags)).settings
        p = plan(llama8b, m, pins_from_settings(s, given_keys(flags), all_on_gpu=True))
        assert (p.fits, p.settings.no_kv_offload) == (fits, fits)
    flags = ("-ot", r"token_embd\.weight=CPU")
    s = parse_flags(list(flags)).settings
    p = plan(llama8b, _machine(5.5, 32), pins_from_settings(s, given_keys(flags)))
    assert p.fits and not p.placement.finer.ffn_cpu and p.placement.cpu_layers == 8


def test_the_speed_model_counts_the_host_round_trips(llama8b: ModelProfile) -> None:
    """-nkvo runs each layer's attention on the host: the recorded reserve graph of llama-3.1-8b has 66 splits with
    -nkvo against 2 without (tests/fixtures/llamacpp/finer and standin), two per layer, and the speed model counts
    those 64 device changes per token (before: none, -nkvo as fast as the cache on the GPU at an empty context);
    a partial layer's FFN on the host is two more."""
    import json

    from fitplan.core.speed.work import model_work

    fixtures = SPARSE.parents[1]
    rec = {
        c["id"]: c["results"]["graph"]["splits"]
        for grid, ids in (("finer", ("nkvo-c4096",)), ("standin", ("c4096-faon",)))
        for c in json.loads((fixtures / grid / "llama-3.1-8b.json").read_text())["cases"]
        if c["id"] in ids
    }
    m = _machine(24, 64)
    base = parse_flags(["-ngl", "999", "-c", "4096", "-np", "1", "-fa", "on"]).settings
    plain = model_work(llama8b, base, m).boundaries
    nkvo = model_work(llama8b, dataclasses.replace(base, no_kv_offload=True), m).boundaries
    assert nkvo - plain == rec["nkvo-c4096"] - rec["c4096-faon"] == 64
    part = parse_flags(["-ngl", "26", "-ot", r"blk\.7\.ffn_down.*=CPU", "-c", "4096"]).settings
    whole = parse_flags(["-ngl", "26", "-c", "4096"]).settings
    assert model_work(llama8b, part, m).boundaries - model_work(llama8b, whole, m).boundaries == 2
