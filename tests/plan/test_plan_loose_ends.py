"""The planner's loose ends of issue 23, on published-shape sparse headers: leaving the GPUs out is a placement, a short
host is reported at the best placement with the RAM its shortfall needs, the context alternative offers the training
length, and pinned placements are called pinned (with a way to drop the pin). Each number was measured with the
planner on these headers; each test fails on the planner of a462e25."""

from __future__ import annotations

import dataclasses

from fitplan.core.base.devices import GIB, Machine, host_device
from fitplan.core.base.launch_settings import Engine, LaunchSettings
from fitplan.core.gguf.reader import open_model
from fitplan.core.hardware import assumed_devices
from fitplan.core.launch.command_line import plan_to_args
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.alternatives import what_would_change
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


def test_leaving_the_gpus_out_is_a_placement() -> None:
    # gpt-oss-120b, a 1.75 GiB card and 96 GiB: the card cannot take even its compute buffer (the host layers'
    # products and attention run on it: short by 251 MiB at -ngl 0), so with it nothing fits; without it
    # (-dev none) everything fits at the training length
    prof = _profile("gpt-oss-120b")
    m = _machine("1.75GiB", 96)
    p = plan(prof, m)
    assert p.fits and p.settings.n_ctx == 131072
    assert p.settings.devices == ()
    assert p.placement.description == "everything on the CPU (-dev none)"
    assert any(n.startswith("-dev none leaves the GPUs out") and "short by 251 MiB" in n for n in p.notes)
    argv = plan_to_args(p, "m.gguf", program="llama-server")
    assert argv[argv.index("-dev") + 1] == "none"
    # a pin that needs the GPU is kept: -ngl 10 does not fit, and stays on the GPU; so is ollama, whose Modelfile
    # export cannot leave the GPU out (it writes num_gpu, which is -ngl)
    assert not plan(prof, m, Pins(n_gpu_layers=10)).fits
    assert not plan(prof, m, Pins(base=LaunchSettings(engine=Engine.OLLAMA))).fits


def test_leaving_the_gpus_out_wins_the_tie_at_ngl0() -> None:
    # a 2.5 GiB card takes that buffer: llama-server's 4 outputs are below the op-offload batch of 32, so the
    # output matrix stays on the host (with its copy the card was 65 MiB short), and at -ngl 0 the card reaches the
    # training length: the same context and placement as -dev none, which keeps the card's headroom whole
    prof = _profile("gpt-oss-120b")
    m = _machine("2.5GiB", 96)
    p = plan(prof, m)
    assert p.fits and p.settings.n_ctx == 131072
    assert p.settings.devices == ()
    assert any(
        n.endswith("with them the plan is 36 of 36 layers on CPU, nothing offloaded at 131072")
        for n in p.notes
    )
    # longest context first: the same tie, the same answer
    q = plan(prof, m, objective=Objective(Goal.CONTEXT))
    assert q.fits and (q.settings.n_ctx, q.settings.devices) == (131072, ())


def test_host_shortfall_at_the_best_placement_and_the_ram_it_needs() -> None:
    # gpt-oss-120b on an RTX 3060 with 16 GiB: host RAM is short at every placement. The report is the best
    # placement whose GPU fits (31 expert layers on CPU: 34.58 GiB short), not -ngl 0's (31 of 36 layers on CPU:
    # 35.59 GiB); the RAM alternative is what that shortfall needs (35 GiB), not a fixed 16 GiB that does not fit
    prof = _profile("gpt-oss-120b")
    m = _machine("RTX 3060", 16)
    p = plan(prof, m)
    assert not p.fits
    assert p.placement.description == "31 expert layers on CPU"
    (short,) = p.shortfalls
    assert short.label == "host RAM" and -(-short.over_bytes // GIB) == 35
    alts = what_would_change(prof, m, Pins(), p)
    ram = next(a for a in alts if a.change.endswith("more host RAM"))
    assert ram.change == "35 GiB more host RAM" and ram.fits
    more = Machine(m.gpus, dataclasses.replace(m.host, total_bytes=51 * GIB, free_bytes=51 * GIB))
    assert plan(prof, more).settings.n_ctx == ram.n_ctx


def test_the_context_alternative_offers_the_training_length() -> None:
    # Llama-3.1-8B on an RTX 3060: 48,384 tokens with everything on the GPU (the first GPU's FFN phase over four
    # block spaces: one 8 MiB block fewer than counted before, 48,128); the training length (131,072) fits with
    # 17 of 32 layers on the CPU, so that is offered instead of the double (96,768)
    prof = _profile("llama-3.1-8b")
    m = _machine("RTX 3060", 32)
    p = plan(prof, m)
    assert p.settings.n_ctx == 48384
    changes = {a.change: a for a in what_would_change(prof, m, Pins(), p)}
    assert changes["-c 131072"].n_ctx == 131072
    assert "-c 96768" not in changes


def test_a_pinned_ngl_is_not_called_chosen() -> None:
    prof = _profile("llama-3.1-8b")
    m = _machine("RTX 3060", 32)
    p = plan(prof, m, Pins(n_gpu_layers=20))
    assert p.fits and p.placement.cpu_layers == 13
    assert not any("placement chosen" in n for n in p.notes)
    assert _words(p, m).startswith("Fits with 13 of 32 layers on CPU, as -ngl 20 asks.")


def test_a_pinned_n_cpu_moe_says_so_and_offers_to_drop_the_pin() -> None:
    # qwen3-30b-a3b on a 24 GiB card: everything fits on the GPU at the training length; --n-cpu-moe 10 keeps ten
    # expert layers on the CPU at the same context, which is the pin's doing, not the machine's
    prof = _profile("qwen3-30b-a3b")
    m = _machine("24GiB", 64)
    assert plan(prof, m).placement.description == "all layers on the GPU"
    pins = Pins(n_cpu_moe=10)
    p = plan(prof, m, pins)
    words = _words(p, m)
    assert words.startswith("Fits with 10 expert layers on CPU, as --n-cpu-moe 10 asks.")
    assert "Fits only" not in words
    drop = next(a for a in what_would_change(prof, m, pins, p) if a.change == "without --n-cpu-moe")
    assert drop.placement == "all layers on the GPU"
    assert drop.effect == "all layers on the GPU instead of 10 expert layers on CPU"


def test_each_alternative_carries_the_speed_of_its_plan() -> None:
    """ "What would change it" says how fast each change runs (issue 23 point 4): the speed model's rates of the
    changed plan, the same `plan_speed` the plan itself prints, and a slower one where more weights leave the GPU
    (gpt-oss-120b on an RTX 4090 with 96 GiB: -c 131072 moves three more expert layers to the CPU)."""
    import dataclasses as dc

    from fitplan.core.speed import plan_speed

    prof = _profile("gpt-oss-120b")
    m = _machine("RTX 4090", 96)
    p = plan(prof, m)
    alts = {a.change: a for a in what_would_change(prof, m, Pins(), p)}
    assert alts and all(a.generation_tps > 0 and a.prompt_tps > 0 for a in alts.values() if a.fits)
    np1 = alts["-np 1"]
    again = plan(prof, m, Pins(n_parallel=1))
    assert np1.generation_tps == plan_speed(prof, m, again.settings).generation.tps
    longer = alts["-c 131072"]
    assert longer.generation_tps < plan_speed(prof, m, p.settings).generation.tps
    assert "t/s generating" in longer.speed_words() and longer.brief().endswith(" t/s")
    assert dc.replace(longer, generation_tps=0.0).speed_words() == ""


def test_ollama_is_offered_no_llama_server_flags() -> None:
    """With ollama, "what would change it" offers changes of machine only: -ctk, --n-cpu-moe or -c are no settings of
    ollama's (its cache type and context are OLLAMA_KV_CACHE_TYPE and num_ctx), and the verdict quotes ollama."""
    prof = _profile("qwen3-30b-a3b")
    m = _machine("RTX 4070", 64)
    pins = Pins(base=LaunchSettings(engine=Engine.OLLAMA))
    p = plan(prof, m, pins)
    alts = what_would_change(prof, m, pins, p)
    assert alts and all(not a.change.startswith("-") for a in alts), [a.change for a in alts]
    llama = what_would_change(prof, m, Pins(), plan(prof, m))
    assert any(a.change.startswith("-") for a in llama)
