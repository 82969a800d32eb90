"""The cases issue "Plans you can trust" found, as plain tests: identical cards are two devices, and partial offload
is found when the host cannot take everything. Each number was measured with the planner on these sparse headers."""

from __future__ import annotations

import dataclasses

import pytest

from fitplan.core.base.devices import GIB, Machine, assumed_gpu, host_device
from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import NGL_ALL, Engine, FlashAttn, LaunchSettings
from fitplan.core.engines import context_grid, ik_pad_context, resolve_context
from fitplan.core.estimate.estimator import estimate
from fitplan.core.gguf.reader import open_model
from fitplan.core.hardware import assumed_devices
from fitplan.core.inputs.machine import MachineRequest, build_machine
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.alternatives import what_would_change
from fitplan.core.plan.objective import Goal, Objective
from fitplan.core.plan.planner import MarginPolicy, Pins, kv_streams, plan, plan_verdict
from fitplan.core.plan.usage import usage_of
from fitplan.core.plan.verdict import FitLevel
from support.models import TESTS

SPARSE = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"


def _profile(name: str) -> ModelProfile:
    return build_profile(
        open_model(str(SPARSE / f"{name}.header.gguf"), find_mmproj=False, allow_incomplete=True)
    )


def _sound(p_settings: LaunchSettings, prof: ModelProfile, m: Machine) -> bool:
    """The plan's own settings, estimated again, fit every device within the default margins."""
    return all(u.fits for u in usage_of(estimate(prof, p_settings, m), m, MarginPolicy()))


def test_identical_cards_are_two_devices() -> None:
    # "2x 12GiB" is one Device value twice; named separately it is two values. Both must give the same estimate:
    # the second card holds the second half of the layers, not a copy of the first card's numbers.
    prof = _profile("qwen3-30b-a3b")
    s = LaunchSettings(n_ctx=32768, n_gpu_layers=NGL_ALL, tensor_split=(24.0, 24.0), fit=False)
    twice = Machine(assumed_devices(["2x 12GiB"]), host_device(64 * GIB))
    assert twice.gpus[0] is twice.gpus[1]
    named = Machine((assumed_gpu("A", 12), assumed_gpu("B", 12)), host_device(64 * GIB))
    a, b = estimate(prof, s, twice), estimate(prof, s, named)
    assert [d.used_bytes for d in a.devices] == [d.used_bytes for d in b.devices]
    assert a.devices[0].used_bytes != a.devices[1].used_bytes  # 25 and 24 layers: not charged as one card


def test_identical_cards_plan_like_named_cards() -> None:
    prof = _profile("qwen3-30b-a3b")
    twice = Machine(assumed_devices(["2x 12GiB"]), host_device(64 * GIB))
    named = Machine((assumed_gpu("A", 12), assumed_gpu("B", 12)), host_device(64 * GIB))
    pa, pb = plan(prof, twice), plan(prof, named)
    assert (pa.fits, pa.settings, pa.placement.description) == (
        pb.fits,
        pb.settings,
        pb.placement.description,
    )
    assert _sound(pa.settings, prof, twice)


def test_the_machine_builder_keeps_every_card() -> None:
    m, _ = build_machine(MachineRequest(("2x 12GiB",), "64GiB"))
    assert len(m.gpus) == 2 and m.host.total_bytes == 64 * GIB


@pytest.mark.parametrize(
    ("name", "gpus", "host_gib", "pins", "placement"),
    [
        # measured: before, "does not fit: host RAM short by 7237 MiB", with every layer on the CPU (17 of 62 since
        # the first GPU's compute is measured on CUDA-shaped stand-ins: the host layers run there, one weight copy
        # at a time, and the host keeps only the graph inputs)
        # (and since the planner tries a partial layer: layer 16's ffn_down on the CPU, the rest of it on the GPU)
        (
            "gemma-3-27b",
            ["24GiB"],
            22,
            Pins(n_ctx=131072),
            "ffn_down of layer 16 on CPU, 16 of 62 layers on CPU",
        ),
        # measured: before, "host RAM short by 18.88 GiB" with 48 of 48 layers on the CPU and -ts 0,0,0
        (
            "qwen3-next-80b-a3b",
            ["3x 16GiB"],
            32,
            Pins(n_ctx=65536, n_parallel=1),
            "9 expert layers on CPU, split 21:14:14 layers across GPUs",
        ),
        # measured: before, "host RAM short by 1489 MiB" with 40 of 40 layers on the CPU (21 expert layers since
        # the expert copies are counted one at a time, as the stand-in recordings show, and the CUDA reserve is
        # derived term by term instead of a flat 512 MiB)
        ("granite-4.0-h-tiny", ["4GiB"], 4, Pins(), "21 expert layers on CPU"),
    ],
)
def test_partial_offload_when_the_host_is_short(
    name: str, gpus: list[str], host_gib: int, pins: Pins, placement: str
) -> None:
    prof = _profile(name)
    m = Machine(assumed_devices(gpus), host_device(host_gib * GIB))
    p = plan(prof, m, pins)
    assert p.fits
    assert p.placement.description == placement
    assert plan_verdict(p, m).level is FitLevel.OFFLOAD
    assert _sound(p.settings, prof, m)
    # the GPUs are used: no "-ngl 0" and no empty "-ts 0,0"
    assert p.settings.n_gpu_layers != 0
    assert len(m.gpus) == 1 or sum(p.settings.tensor_split) > 0


def test_pinned_context_reports_the_largest_context_too() -> None:
    prof = _profile("llama-3.1-8b")
    m = Machine(assumed_devices(["24GiB"]), host_device(64 * GIB))
    p = plan(prof, m, Pins(n_ctx=8192))
    assert p.settings.n_ctx == 8192
    assert p.largest is not None and p.largest.n_ctx > 8192
    free = plan(prof, m, dataclasses.replace(Pins(), min_ctx=8192))
    assert free.settings.n_ctx == p.largest.n_ctx


def test_alternatives_are_checked_plans() -> None:
    # qwen3-30b-a3b on one 12 GiB card: the plan keeps 23 expert layers on the CPU and reaches 5,376 tokens
    # (measured; 24 and 5,632 while a copy of a layer's three expert matrices was counted on top of the GPU's
    # compute buffer and the CUDA reserve was a flat 512 MiB). Every alternative is a plan of its own: the number it shows is what planning with it gives.
    prof = _profile("qwen3-30b-a3b")
    m = Machine(assumed_devices(["12GiB"]), host_device(64 * GIB))
    base = plan(prof, m, Pins())
    assert (base.settings.n_ctx, base.placement.description) == (5376, "23 expert layers on CPU")
    alts = what_would_change(prof, m, Pins(), base)
    # measured: -c 13312 (26 expert layers on CPU) and --n-cpu-moe 30; a q8_0 cache keeps one more expert layer on
    # the GPU at 5,120 tokens, less context, so it is not listed
    assert 2 <= len(alts) <= 5
    changes = {a.change: a for a in alts}
    q8 = changes["-ctk q8_0 -ctv q8_0"]
    assert q8.n_ctx == plan(prof, m, Pins(cache_type_k="q8_0", cache_type_v="q8_0")).settings.n_ctx
    assert q8.effect == f"context 5,376 -> {q8.n_ctx:,}"
    moe = next(a for a in alts if a.change.startswith("--n-cpu-moe"))
    assert moe.n_ctx == plan(prof, m, Pins(n_cpu_moe=int(moe.change.split()[1]))).settings.n_ctx
    # ranked by the plan's objective (fastest placement first): fewer expert layers on the CPU first (the 16 GiB
    # card, at a slightly shorter context), then by context among equal placements
    experts = [int(a.placement.split()[0]) for a in alts]
    assert experts == sorted(experts)
    assert alts[0].change == "a 16 GiB card" and alts[0].n_ctx < base.settings.n_ctx
    # the other goal is offered, and gives the most context
    other = changes["--objective context"]
    assert other.n_ctx == max(a.n_ctx for a in alts)
    assert other.n_ctx == plan(prof, m, Pins(), objective=Objective(Goal.CONTEXT)).settings.n_ctx


def test_alternatives_when_nothing_fits_make_it_fit() -> None:
    # llama-3.1-8b at -c 131072 on an 8 GiB card with 4 GiB of host RAM: host RAM short (measured)
    prof = _profile("llama-3.1-8b")
    m = Machine(assumed_devices(["8GiB"]), host_device(4 * GIB))
    base = plan(prof, m, Pins(n_ctx=131072))
    assert not base.fits
    alts = what_would_change(prof, m, Pins(n_ctx=131072), base)
    assert alts and all(a.fits and a.effect.startswith("fits at ") for a in alts)


def test_one_context_grid() -> None:
    # kv_streams raises where resolve_context raises (LLAMA_MAX_SEQ = 256), instead of clamping to 256
    prof = _profile("llama-3.1-8b")
    too_many = LaunchSettings(n_parallel=300)
    with pytest.raises(SettingsError):
        resolve_context(prof, too_many)
    with pytest.raises(SettingsError):
        kv_streams(too_many)
    # ik_llama.cpp pads to 32 cells without flash attention, 256 with it: 1100 -> 1120 (35 x 32), 1280 (5 x 256)
    ik_off = LaunchSettings(engine=Engine.IK_LLAMA, flash_attn=FlashAttn.OFF, n_parallel=1)
    assert context_grid(prof, ik_off).padded(1100) == (1120, 1120)
    assert ik_pad_context(1100, False) == 1120 and ik_pad_context(1100, True) == 1280
    # 3 sequences without a unified cache: PAD(8000 -> 8192 / 3 = 2730, 256) = 2816 per stream, 8448 in all
    three = LaunchSettings(n_parallel=3, n_ctx=8000)
    assert context_grid(prof, three).padded(8000) == (8448, 2816)
    r = resolve_context(prof, three)
    assert (r.n_ctx, r.n_ctx_seq, r.n_stream) == (8448, 2816, 3)
