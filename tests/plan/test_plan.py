"""The planner against a small, fully known estimator: every expected number is derived in a comment.

The fake estimator (`fake_estimate`) follows llama.cpp's placement rules (layer split, `-ngl` from the back,
`--n-cpu-moe` from the front, n_ctx padding and streams) with round per-layer sizes, so the solver's answers can be
worked out by hand. Tests against the real estimator are in test_plan_real.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from fitplan.core.base.devices import GIB, MIB, Device, DeviceKind, Machine, Vendor, assumed_gpu, host_device
from fitplan.core.base.launch_settings import NGL_ALL, LaunchSettings, Tool
from fitplan.core.base.results import Estimate
from fitplan.core.model.profile import ModelProfile, TensorRole
from fitplan.core.plan.planner import (
    ContextFit,
    MarginPolicy,
    Pins,
    context_step,
    kv_streams,
    plan,
)
from fitplan.core.plan.verdict import judge
from support.fake_estimator import (
    fake_estimate,
    make_profile,
)
from support.plan_models import largest_context


def machine(*gib: float, host_gib: float = 64) -> Machine:
    return Machine(
        gpus=tuple(assumed_gpu(f"G{i}", g) for i, g in enumerate(gib)), host=host_device(int(host_gib * GIB))
    )


def used_on(est: Estimate | None, index: int) -> int:
    assert est is not None
    return est.devices[index].used_bytes


# ---------------------------------------------------------------------------------------------------------------------
# the largest context at a fixed placement (search.context_fit)
# ---------------------------------------------------------------------------------------------------------------------


def test_largest_context_is_exact() -> None:
    # GPU 8 GiB, margin 1 GiB -> 7168 MiB usable. Fixed use: 32 x 100 + 300 output + 500 compute = 4000 MiB.
    # KV: 32 layers x 4 KiB = 128 KiB per cell -> (7168 - 4000) MiB / 128 KiB = 25344 cells = 99 x 256.
    fit = largest_context(make_profile(), LaunchSettings(), machine(8), estimate_fn=fake_estimate)
    assert fit.fits
    assert fit.step == 256
    assert fit.n_ctx == 25344
    assert not fit.capped_by_training
    assert fit.binding_label == "GPU0 (G0)"
    assert "limited by GPU0 (G0) memory" in fit.describe()
    # one step more does not fit: 4000 MiB + 25600 x 128 KiB = 7200 MiB > 7168 MiB
    assert used_on(fit.next_estimate, 0) == 7200 * MIB
    assert used_on(fit.estimate, 0) == 7168 * MIB


@pytest.mark.parametrize("gib", [5, 6.5, 8, 11, 23.7])
def test_one_step_more_does_not_fit(gib: float) -> None:
    prof = make_profile(n_ctx_train=1 << 20)
    m = machine(gib)
    fit = largest_context(prof, LaunchSettings(), m, estimate_fn=fake_estimate)
    margin = MarginPolicy()
    assert fit.fits
    at = fake_estimate(prof, dataclasses.replace(LaunchSettings(), n_ctx=fit.n_ctx), m)
    nxt = fake_estimate(prof, dataclasses.replace(LaunchSettings(), n_ctx=fit.n_ctx + fit.step), m)
    assert at.devices[0].used_bytes <= margin.capacity(m.gpus[0], 0)
    assert nxt.devices[0].used_bytes > margin.capacity(m.gpus[0], 0)
    assert fit.n_ctx % 256 == 0


def test_context_capped_at_training_length() -> None:
    fit = largest_context(
        make_profile(n_ctx_train=16384), LaunchSettings(), machine(24), estimate_fn=fake_estimate
    )
    assert fit.n_ctx == 16384
    assert fit.capped_by_training
    assert fit.next_estimate is None
    assert "capped at the model's training length" in fit.describe()


def test_training_length_off_the_grid_rounds_down() -> None:
    # 40000 is not a multiple of 256: the largest grid point within it is 156 x 256 = 39936
    fit = largest_context(
        make_profile(n_ctx_train=40000), LaunchSettings(), machine(48), estimate_fn=fake_estimate
    )
    assert fit.n_ctx == 39936


def test_streams_multiply_the_step() -> None:
    # -np 4 without -kvu: 4 streams, step 1024; the KV still has n_ctx cells in total, so the bound is the same
    # 25344 cells, rounded down to the 1024 grid: 24576.
    s = LaunchSettings(n_parallel=4)
    assert kv_streams(s) == 4
    assert context_step(s) == 1024
    fit = largest_context(make_profile(), s, machine(8), estimate_fn=fake_estimate)
    assert fit.step == 1024
    assert fit.n_ctx == 24576
    # and the cap is the training length per stream: 4 x 32768
    assert fit.cap == 131072


def test_stream_rules() -> None:
    assert kv_streams(LaunchSettings()) == 1  # server, -np auto: unified
    assert kv_streams(LaunchSettings(n_parallel=2)) == 2  # explicit -np: not unified
    assert kv_streams(LaunchSettings(n_parallel=2, kv_unified=True)) == 1
    assert kv_streams(LaunchSettings(n_parallel=-1, kv_unified=False)) == 1  # auto forces unified
    assert kv_streams(LaunchSettings(n_parallel=-1, tool=Tool.CLI)) == 1


def test_nothing_fits_reports_shortfall() -> None:
    # 4 GiB GPU -> 3072 MiB usable; at one step (256 cells x 128 KiB = 32 MiB) the GPU needs 4032 MiB: 960 MiB short
    fit = largest_context(make_profile(), LaunchSettings(), machine(4), estimate_fn=fake_estimate)
    assert not fit.fits
    assert fit.n_ctx == 0
    assert len(fit.shortfalls) == 1
    assert fit.shortfalls[0].label == "GPU0 (G0)"
    assert fit.shortfalls[0].over_bytes == 960 * MIB
    assert "short by 960 MiB" in fit.describe()


def test_margin_and_total_memory() -> None:
    # use the total instead of free: a GPU with 2 GiB taken by another program
    gpu = Device("busy", DeviceKind.GPU, 8 * GIB, 6 * GIB, Vendor.NVIDIA)
    m = Machine((gpu,), host_device(64 * GIB))
    by_free = largest_context(make_profile(), LaunchSettings(), m, estimate_fn=fake_estimate)
    by_total = largest_context(
        make_profile(), LaunchSettings(), m, MarginPolicy(use_free=False), estimate_fn=fake_estimate
    )
    # free: (6144 - 1024 - 4000) MiB / 128 KiB = 8960 = 35 x 256; total: 25344 as above
    assert by_free.n_ctx == 8960
    assert by_total.n_ctx == 25344
    # a 2048 MiB margin: (8192 - 2048 - 4000) MiB / 128 KiB = 17152 = 67 x 256
    wide = largest_context(
        make_profile(),
        LaunchSettings(),
        m,
        MarginPolicy(gpu_margin_bytes=2048 * MIB, use_free=False),
        fake_estimate,
    )
    assert wide.n_ctx == 17152


def test_host_is_checked() -> None:
    # no GPU: everything on the host. 8 GiB RAM, 1 GiB margin -> 7168 MiB. Fixed: 3200 + 300 + 200 embd + 100 compute
    # = 3800 MiB; KV 128 KiB per cell -> 3368 MiB / 128 KiB = 26944 cells -> 105 x 256 = 26880
    fit = largest_context(make_profile(), LaunchSettings(), machine(host_gib=8), estimate_fn=fake_estimate)
    assert fit.n_ctx == 26880
    assert fit.binding_label == "host RAM"


def test_binary_search_is_cheap() -> None:
    fit = largest_context(
        make_profile(n_ctx_train=1 << 20), LaunchSettings(), machine(8), estimate_fn=fake_estimate
    )
    # 4096 grid points: two ends, ~12 bisection steps, the next step
    assert fit.evaluations <= 16


# ---------------------------------------------------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------------------------------------------------


def test_plan_everything_on_one_gpu() -> None:
    p = plan(make_profile(), machine(8), estimate_fn=fake_estimate)
    assert p.fits
    assert p.settings.n_gpu_layers == NGL_ALL
    assert p.settings.n_ctx == 25344
    assert p.settings.fit is False
    assert p.placement.cpu_layers == 0
    assert p.binding == "context limited by GPU0 (G0) memory"
    assert p.placement.description == "all layers on the GPU"


def test_plan_moves_whole_layers_to_cpu() -> None:
    # 4 GiB GPU (3072 MiB usable), at the 4096-token minimum each layer costs 100 MiB + 4096 x 4 KiB = 116 MiB.
    # k layers + output + compute: 300 + 500 + 116 k <= 3072 -> k = 19 (3004 MiB; 20 would be 3120 MiB).
    # -ngl counts the output: 20. 32 - 19 = 13 layers stay on the CPU.
    p = plan(make_profile(), machine(4), estimate_fn=fake_estimate)
    assert p.fits
    assert p.settings.n_gpu_layers == 20
    assert p.placement.cpu_layers == 13
    # the context then grows: 300 + 19 x 100 + 500 = 2700 MiB fixed, 19 x 4 KiB = 76 KiB per cell,
    # 372 MiB / 76 KiB = 5012 cells -> 19 x 256 = 4864
    assert p.settings.n_ctx == 4864
    assert p.binding == "context limited by GPU0 (G0) memory; 13 of 32 layers on CPU"
    # one more layer does not fit at the minimum context
    more = fake_estimate(
        make_profile(), dataclasses.replace(p.settings, n_gpu_layers=21, n_ctx=4096), machine(4)
    )
    assert more.devices[0].used_bytes > 3072 * MIB


def test_plan_moves_experts_before_layers() -> None:
    # MoE: 32 layers of 20 MiB attention + 200 MiB experts. All on an 8 GiB GPU at 4096 tokens:
    # 32 x 220 + 300 + 500 + 32 x 16 (KV) = 8352 MiB > 7168: 1184 MiB over -> ceil(1184 / 200) = 6 expert layers
    prof = make_profile(expert=200 * MIB, layer=20 * MIB)
    p = plan(prof, machine(8), estimate_fn=fake_estimate)
    assert p.fits
    assert p.settings.n_cpu_moe == 6
    assert p.settings.n_gpu_layers == NGL_ALL
    assert p.placement.cpu_expert_layers == 6
    assert p.placement.cpu_layers == 0
    # context: fixed 32 x 20 + 26 x 200 + 300 + 500 = 6640 MiB; 528 MiB / 128 KiB = 4224 cells -> 16 x 256 = 4096
    assert p.settings.n_ctx == 4096
    assert p.binding == "context limited by GPU0 (G0) memory; 6 expert layers on CPU"
    # 5 expert layers on the CPU would not fit at 4096 tokens: 8352 - 1000 = 7352 MiB
    five = fake_estimate(prof, dataclasses.replace(p.settings, n_cpu_moe=5, n_ctx=4096), machine(8))
    assert five.devices[0].used_bytes == 7352 * MIB


def test_plan_moe_falls_back_to_layers_then_puts_experts_back() -> None:
    # 3 GiB GPU (2048 MiB usable). With every expert on the CPU, a GPU layer costs 20 + 16 = 36 MiB at 4096 tokens:
    # 300 + 500 + 36 k <= 2048 -> k = 34 > 32, so all layers fit with experts on the CPU and no layer moves.
    # Then experts come back while they fit: ncmoe = n puts 32 - n expert layers (200 MiB) on the GPU:
    # 800 + 32 x 36 + 200 (32 - n) <= 2048 -> 32 - n <= 0.48 -> n = 32.
    prof = make_profile(expert=200 * MIB, layer=20 * MIB)
    p = plan(prof, machine(3), estimate_fn=fake_estimate)
    assert p.settings.n_cpu_moe == 32
    assert p.settings.n_gpu_layers == NGL_ALL
    # 2 GiB GPU (1024 MiB usable): 800 + 36 k <= 1024 -> k = 6 layers, -ngl 7; the 26 CPU layers keep their experts
    # on the CPU anyway; the 6 GPU layers could take experts back only if 224 MiB were left: 1024 - 1016 = 8 MiB.
    p2 = plan(prof, machine(2), estimate_fn=fake_estimate)
    assert p2.settings.n_gpu_layers == 7
    assert p2.placement.cpu_layers == 26
    assert p2.placement.cpu_expert_layers == 6
    assert "26 of 32 layers on CPU" in p2.binding
    # --n-cpu-moe 32 covers every MoE layer: said as such, not as the 6 of them on the GPU side
    assert p2.placement.description == "all experts on CPU, 26 of 32 layers on CPU"


def test_plan_splits_two_gpus() -> None:
    m = machine(8, 4)
    prof = make_profile(n_ctx_train=1 << 20)
    p = plan(prof, m, estimate_fn=fake_estimate)
    assert p.fits
    split = p.placement.tensor_split
    assert len(split) == 2
    assert sum(split) == 33  # 32 layers + output
    assert split[0] > split[1]
    assert p.settings.tensor_split == tuple(float(x) for x in split)
    margin = MarginPolicy()
    for i, g in enumerate(m.gpus):
        assert used_on(p.estimate, i) <= margin.capacity(g, i)
    # balancing never does worse than the proportional split (7168 : 3072 -> 23 : 10 layers)
    prop = largest_context(
        prof, dataclasses.replace(p.settings, tensor_split=(23.0, 10.0)), m, estimate_fn=fake_estimate
    )
    assert p.settings.n_ctx >= prop.n_ctx
    # one step more does not fit with the chosen split
    assert p.context.next_estimate is not None
    assert not judge(p.context.next_estimate, m, MarginPolicy()).fits


def test_pinned_all_weights_on_gpu_reports_shortfall() -> None:
    # all on a 4 GiB GPU at 4096 tokens: 3200 + 300 + 500 + 512 = 4512 MiB vs 3072 usable: 1440 MiB short
    p = plan(make_profile(), machine(4), Pins(all_weights_on_gpu=True), estimate_fn=fake_estimate)
    assert not p.fits
    assert p.shortfalls[0].label == "GPU0 (G0)"
    assert p.shortfalls[0].over_bytes == 1440 * MIB
    assert p.binding.startswith("does not fit with all weights on the GPU at the minimum context 4096")
    assert "GPU0 (G0) short by 1440 MiB" in p.binding


def test_pinned_context_and_min_context() -> None:
    p = plan(make_profile(), machine(8), Pins(n_ctx=8192), estimate_fn=fake_estimate)
    assert p.fits
    assert p.settings.n_ctx == 8192
    assert p.binding == "context pinned at 8192"
    # at least 16384 tokens on a 4 GiB GPU: 300 + 500 + k (100 + 64) <= 3072 -> k = 13, -ngl 14
    q = plan(make_profile(), machine(4), Pins(min_ctx=16384), estimate_fn=fake_estimate)
    assert q.settings.n_gpu_layers == 14
    assert q.settings.n_ctx >= 16384
    # a pinned context that cannot fit even on the CPU
    r = plan(make_profile(), machine(4, host_gib=4), Pins(n_ctx=32768), estimate_fn=fake_estimate)
    assert not r.fits
    assert any(s.label == "host RAM" for s in r.shortfalls)


def test_pinned_layers_and_experts_are_kept() -> None:
    prof = make_profile(expert=200 * MIB, layer=20 * MIB)
    p = plan(prof, machine(8), Pins(n_cpu_moe=10, n_gpu_layers=30), estimate_fn=fake_estimate)
    assert p.settings.n_cpu_moe == 10
    assert p.settings.n_gpu_layers == 30
    assert p.fits


def test_plan_without_gpu() -> None:
    p = plan(make_profile(), machine(host_gib=8), estimate_fn=fake_estimate)
    assert p.fits
    assert p.settings.n_gpu_layers == 0
    assert p.settings.n_ctx == 26880  # as in test_host_is_checked
    assert "no GPU" in " ".join(p.notes)


def test_plan_context_capped() -> None:
    p = plan(make_profile(n_ctx_train=8192), machine(24), estimate_fn=fake_estimate)
    assert p.settings.n_ctx == 8192
    assert p.binding == "context capped at the model's training length (8192)"


def test_context_fit_type() -> None:
    fit = largest_context(make_profile(), LaunchSettings(), machine(8), estimate_fn=fake_estimate)
    assert isinstance(fit, ContextFit)
    assert [u.label for u in fit.usage] == ["GPU0 (G0)", "host RAM"]


@pytest.mark.parametrize(
    "settings",
    [
        LaunchSettings(),
        LaunchSettings(n_parallel=3),
        LaunchSettings(n_parallel=3, kv_unified=True),
        LaunchSettings(n_parallel=-1, kv_unified=False),
        LaunchSettings(n_parallel=2, tool=Tool.CLI),
        LaunchSettings(tool=Tool.FIT_PARAMS),
    ],
)
def test_streams_agree_with_the_context_resolver(settings: LaunchSettings) -> None:
    from fitplan.core.memory.context import resolve_context

    resolved = resolve_context(make_profile(), dataclasses.replace(settings, n_ctx=10000))
    assert kv_streams(settings) == resolved.n_stream
    # and a grid point is allocated exactly: no padding left to add
    on_grid = resolve_context(make_profile(), dataclasses.replace(settings, n_ctx=7 * context_step(settings)))
    assert on_grid.n_ctx == 7 * context_step(settings)


def test_mmproj_pin_reaches_the_settings() -> None:
    from fitplan.core.base.launch_settings import MmprojPlacement

    base = LaunchSettings(mmproj_path="/m/mmproj.gguf")
    p = plan(
        make_profile(), machine(8), Pins(base=base, mmproj=MmprojPlacement.CPU), estimate_fn=fake_estimate
    )
    assert p.settings.mmproj is MmprojPlacement.CPU
    assert p.settings.mmproj_path == "/m/mmproj.gguf"


def test_minimum_context_is_per_sequence() -> None:
    # -np 4 without -kvu: 4 streams; the 4096-token floor is per sequence, 16384 cells in total (as --fit-ctx x
    # n_stream). On a 4 GiB GPU: 300 + 500 + k (100 + 16384 x 4 KiB = 64 MiB) <= 3072 -> k = 13, -ngl 14.
    p = plan(make_profile(), machine(4), Pins(n_parallel=4), estimate_fn=fake_estimate)
    assert p.settings.n_gpu_layers == 14
    assert p.settings.n_ctx >= 16384
    assert p.settings.n_ctx % 1024 == 0


# Fields the plan itself decides; every other LaunchSettings field must come out as the pins' base put it in.
PLANNED_FIELDS = frozenset({"n_ctx", "n_gpu_layers", "n_cpu_moe", "tensor_split", "fit"})


def _not_default(name: str, default: object) -> object:
    """A value other than the default for a LaunchSettings field (fork fields spelled out, the rest by type)."""
    from enum import Enum

    from fitplan.core.base.launch_settings import DraftSettings, Engine, TensorOverride

    explicit: dict[str, object] = {
        "engine": Engine.BEELLAMA,
        "cache_type_k": "kvarn4",
        "cache_type_v": "kvarn4",
        "kv_tail_tokens": 1024,
        "kv_tail_type": "q8_0",
        "mla_mode": 1,
        "attn_max_batch_mib": 512,
        "gpu_overhead_bytes": 256 * MIB,
        "kv_unified": True,
        "devices": ("G0",),
        "mmproj_path": "/m/mmproj.gguf",
        "draft": DraftSettings("/m/draft.gguf"),
        "tensor_overrides": (TensorOverride("blk\\.0\\.", "CPU"),),
        "spec_types": ("ngram-simple",),
        "fit_target_mib": (512,),
        "lora": ("/m/adapter.gguf",),
        "lora_scaled": ("/m/other.gguf:0.5",),
        "rope_scaling": "yarn",
        "rope_scale": 4.0,
        "rope_freq_scale": 0.25,
    }
    if name in explicit:
        return explicit[name]
    if isinstance(default, bool):
        return not default
    if isinstance(default, Enum):
        return next(m for m in type(default) if m != default)
    if isinstance(default, int):
        return default + 3
    if isinstance(default, str):
        return default + "_q8_0" if default else "q8_0"
    raise AssertionError(f"no test value for LaunchSettings.{name} = {default!r}: add one to `explicit`")


def test_every_other_setting_passes_through() -> None:
    """The engine, its fork fields (ik_llama.cpp's -mla/-amb/-fmoe/-rtr, beellama's KVarN tail, ollama's overhead)
    and every other base setting reach the planned settings unchanged, whatever the plan decides."""
    defaults = LaunchSettings()
    changes = {
        f.name: _not_default(f.name, getattr(defaults, f.name))
        for f in dataclasses.fields(LaunchSettings)
        if f.name not in PLANNED_FIELDS
    }
    base = dataclasses.replace(defaults, **changes)  # type: ignore[arg-type]
    for name in changes:
        assert getattr(base, name) != getattr(defaults, name), name
    for m in (machine(8), machine(2), machine(8, 4), machine()):
        p = plan(make_profile(), m, Pins(base=base), estimate_fn=fake_estimate)
        for name in changes:
            assert getattr(p.settings, name) == getattr(base, name), name
        assert p.settings.fit is False


def test_no_kv_offload_pin_reaches_the_settings() -> None:
    p = plan(make_profile(), machine(8), Pins(no_kv_offload=True), estimate_fn=fake_estimate)
    assert p.settings.no_kv_offload is True
    q = plan(
        make_profile(), machine(8), Pins(base=LaunchSettings(no_kv_offload=True)), estimate_fn=fake_estimate
    )
    assert q.settings.no_kv_offload is True
    r = plan(
        make_profile(),
        machine(8),
        Pins(base=LaunchSettings(no_kv_offload=True), no_kv_offload=False),
        estimate_fn=fake_estimate,
    )
    assert r.settings.no_kv_offload is False


def test_ik_llama_without_flash_attention_has_a_finer_grid() -> None:
    from fitplan.core.base.launch_settings import Engine, FlashAttn

    ik_off = LaunchSettings(engine=Engine.IK_LLAMA, flash_attn=FlashAttn.OFF, n_parallel=1)
    assert context_step(ik_off) == 32
    assert context_step(dataclasses.replace(ik_off, n_parallel=3)) == 3 * 32
    assert context_step(dataclasses.replace(ik_off, flash_attn=FlashAttn.ON)) == 256
    assert context_step(dataclasses.replace(ik_off, engine=Engine.LLAMA_CPP)) == 256
    # "auto" resolves with the profile (ik_llama.cpp turns it on); without one only an explicit -fa off counts
    ik_auto = dataclasses.replace(ik_off, flash_attn=FlashAttn.AUTO)
    assert context_step(ik_auto) == 256
    assert context_step(ik_auto, make_profile()) == 256


def _alternating_moe(expert: int, layer: int) -> ModelProfile:
    """make_profile's MoE model with experts on the odd layers only (Jamba's expert_layer_period 2, offset 1)."""
    prof = make_profile(expert=expert, layer=layer)
    tensors = tuple(
        t
        for t in prof.tensors
        if not (t.role is TensorRole.EXPERTS and t.layer is not None and t.layer % 2 == 0)
    )
    layers = tuple(dataclasses.replace(lp, is_moe=lp.index % 2 == 1) for lp in prof.layers)
    return dataclasses.replace(
        prof, tensors=tensors, layers=layers, file_size=sum(t.n_bytes for t in tensors)
    )


def test_experts_on_cpu_are_worded_as_the_flag_says_when_moe_layers_alternate() -> None:
    # 16 MoE layers of 400 MiB experts (odd layers) and 32 layers of 20 MiB attention on an 8 GiB card (7168 MiB
    # usable): 32 x 20 + 16 x 400 + 300 + 500 + 32 x 16 (KV at 4096) = 8352 MiB, 1184 MiB over -> 3 MoE layers'
    # experts must leave (1200 MiB): --n-cpu-moe 6 moves layers 1, 3, 5. The words name the flag's 6 layers and the
    # 3 MoE layers among them; "3 expert layers on CPU" beside --n-cpu-moe 6 read as a contradiction.
    p = plan(_alternating_moe(400 * MIB, 20 * MIB), machine(8), estimate_fn=fake_estimate)
    assert p.fits
    assert p.settings.n_cpu_moe == 6
    assert p.placement.cpu_expert_layers == 3
    assert p.placement.description == "the experts of the first 6 layers on CPU (3 MoE layers)"
    assert "the experts of the first 6 layers on CPU (3 MoE layers)" in p.binding
