"""End-to-end estimates (fitplan.core.estimate.estimator) on the header copies of the recorded models.

Expected numbers are derived in the comments from the model shapes and llama.cpp's rules; the recorded llama.cpp
runs themselves are compared in tests/estimate/test_accuracy.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from fitplan.core.base.devices import GIB, MIB, Device, Machine, assumed_gpu, host_device
from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import (
    NGL_ALL,
    DraftSettings,
    FlashAttn,
    LaunchSettings,
    MmprojPlacement,
    Tool,
)
from fitplan.core.base.results import Estimate, TermKind
from fitplan.core.estimate.estimator import estimate, mmproj_compute
from fitplan.core.memory.weights import place_weights
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.usage import MarginPolicy
from fitplan.core.plan.verdict import judge
from support.models import TESTS, sparse

MODELS = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"
HOST = host_device(64 * GIB)


@pytest.fixture(scope="module")
def llama8b() -> ModelProfile:
    return sparse("llama-3.1-8b")


@pytest.fixture(scope="module")
def gemma27b() -> ModelProfile:
    return sparse("gemma-3-27b")


def _gpu(gib: float = 24, name: str = "RTX 4090") -> Device:
    return dataclasses.replace(assumed_gpu(name, gib), backend_name="CUDA0")


def _host(e: Estimate):  # type: ignore[no-untyped-def]
    return e.devices[-1]


def test_full_offload_on_one_gpu(llama8b: ModelProfile) -> None:
    s = LaunchSettings(n_ctx=32768, n_gpu_layers=NGL_ALL)
    m = Machine((_gpu(),), HOST)
    e = estimate(llama8b, s, m)
    gpu, host = e.devices
    # KV: 32 layers x 32768 cells x (8 heads x 128 x 2 B) x 2 (K and V) = 4096 MiB, all on the GPU.
    assert gpu.bytes_of(TermKind.KV) == 4096 * MIB
    assert host.bytes_of(TermKind.KV) == 0
    # Only token_embd stays on the host: q4_K [4096, 128256] = 4096/256 * 144 * 128256 bytes.
    assert host.bytes_of(TermKind.WEIGHTS) == 4096 // 256 * 144 * 128256
    # Reserve: 350 MiB assumed context + 32 MiB cuBLAS workspace (compute capability unknown: the Hopper value)
    # + pool: ffn_down's 14336-wide rows, 512 tokens as q8_1 (144 B per 128 values) = 8064 MiB/1024 = 7.875 MiB,
    # + one 128-column tile of q8_1 (18 KiB) + stream-k fixup 128 SMs x 128 x 128 x 4 B = 8 MiB: 15.89 MiB -> 16 MiB.
    assert gpu.bytes_of(TermKind.RESERVE) == (350 + 32 + 16) * MIB
    assert [t.label for t in gpu.terms if t.kind is TermKind.RESERVE] == [
        "CUDA context",
        "cuBLAS workspace",
        "CUDA pool",
    ]
    # Server default: 4 slots, n_outputs_max = 4: logits 4 B x 128256 x 4 on the host.
    assert host.bytes_of(TermKind.OUTPUT) == 4 * 128256 * 4
    assert e.context.n_gpu_layers == 33
    assert judge(e, m, MarginPolicy()).fits_card
    assert all(t.explanation for d in e.devices for t in d.terms)


def test_partial_offload_splits_kv_by_layer(llama8b: ModelProfile) -> None:
    # -ngl 17: the output layer and blocks 16..31 on the GPU, so 16 of 32 layers' KV (128 MiB each at 32768 cells).
    e = estimate(llama8b, LaunchSettings(n_ctx=32768, n_gpu_layers=17), Machine((_gpu(),), HOST))
    gpu, host = e.devices
    assert gpu.bytes_of(TermKind.KV) == 16 * 128 * MIB
    assert host.bytes_of(TermKind.KV) == 16 * 128 * MIB


def test_no_kv_offload_puts_kv_on_host(llama8b: ModelProfile) -> None:
    e = estimate(llama8b, LaunchSettings(n_ctx=32768, no_kv_offload=True), Machine((_gpu(),), HOST))
    assert e.devices[0].bytes_of(TermKind.KV) == 0
    assert e.devices[1].bytes_of(TermKind.KV) == 4096 * MIB


def test_cpu_only_machine_has_no_reserve(llama8b: ModelProfile) -> None:
    e = estimate(llama8b, LaunchSettings(n_ctx=8192), Machine((), HOST))
    assert len(e.devices) == 1
    assert e.devices[0].bytes_of(TermKind.RESERVE) == 0
    assert e.context.n_gpu_layers == 0
    # A GPU that is not used (-dev none) gets no terms at all.
    e = estimate(llama8b, LaunchSettings(n_ctx=8192, devices=()), Machine((_gpu(),), HOST))
    assert e.devices[0].used_bytes == 0


def test_user_reserve_replaces_the_assumption(llama8b: ModelProfile) -> None:
    e = estimate(llama8b, LaunchSettings(n_ctx=4096), Machine((_gpu(),), HOST), reserve_bytes=300 * MIB)
    assert e.devices[0].bytes_of(TermKind.RESERVE) == 300 * MIB
    assert not any("runtime reserve" in a for a in e.assumptions)


def test_does_not_fit_on_a_small_gpu(llama8b: ModelProfile) -> None:
    m = Machine((_gpu(8),), HOST)
    e = estimate(llama8b, LaunchSettings(n_ctx=131072, n_gpu_layers=NGL_ALL), m)
    assert not judge(e, m, MarginPolicy()).fits_card
    assert "auto" not in " ".join(e.assumptions)  # -ngl was given


def test_ngl_auto_is_all_layers_with_an_assumption(llama8b: ModelProfile) -> None:
    e = estimate(llama8b, LaunchSettings(n_ctx=4096), Machine((_gpu(),), HOST))
    assert e.context.n_gpu_layers == 33
    assert any("-ngl auto" in a for a in e.assumptions)


def test_settings_llama_cpp_refuses(llama8b: ModelProfile) -> None:
    machine = Machine((), HOST)
    with pytest.raises(SettingsError):
        estimate(llama8b, LaunchSettings(cache_type_v="q8_0", flash_attn=FlashAttn.OFF), machine)
    with pytest.raises(SettingsError):
        estimate(llama8b, LaunchSettings(cache_type_k="q3_K"), machine)


def test_unknown_architecture_is_flagged(llama8b: ModelProfile) -> None:
    odd = dataclasses.replace(llama8b, verified_architecture=False, architecture="llama-next")
    e = estimate(odd, LaunchSettings(n_ctx=4096), Machine((), HOST))
    assert any("not known" in w for w in e.warnings)
    assert e.devices[0].bytes_of(TermKind.KV) > 0


def test_host_runtime_bounds(gemma27b: ModelProfile) -> None:
    e = estimate(gemma27b, LaunchSettings(n_ctx=32768), Machine((), HOST))
    bounds = {b.name: b.max_bytes for b in e.host_runtime}
    assert bounds["prompt cache"] == 8192 * MIB
    # One sequence's SWA state: 52 SWA layers x (16 KV heads x 128 x 2 B x 2) = 8192 B per cell, over
    # min(SWA cells, window 1024 + ubatch 512) = 1536 cells: 52 * 8192 * 1536 bytes; x 32 checkpoints x 4 slots.
    assert bounds["context checkpoints"] == 52 * 8192 * 1536 * 32 * 4
    e = estimate(gemma27b, LaunchSettings(n_ctx=32768, cache_ram_mib=0, ctx_checkpoints=0), Machine((), HOST))
    assert e.host_runtime == ()


def test_tied_embedding_copy_counts_on_the_gpu(gemma27b: ModelProfile) -> None:
    e_machine = Machine((_gpu(48),), HOST)
    e = estimate(gemma27b, LaunchSettings(n_ctx=4096, n_gpu_layers=NGL_ALL), e_machine)
    gpu, host = e.devices
    # The host keeps the input copy of token_embd, mmap'd from the file as it is (792,916,992 B in the header); the
    # GPU holds every tensor including a second, CUDA-padded copy of token_embd (792,917,248 B, see test_weights).
    (embd,) = (t for t in gemma27b.tensors if t.name == "token_embd.weight")
    assert embd.n_bytes == 792_916_992
    assert host.bytes_of(TermKind.WEIGHTS) == embd.n_bytes
    gpu_placed = [p for p in place_weights(gemma27b, e.settings, e_machine).tensors if p.device == 0]
    assert [p.alloc_bytes for p in gpu_placed if p.duplicate] == [792_917_248]
    assert gpu.bytes_of(TermKind.WEIGHTS) == sum(p.alloc_bytes for p in gpu_placed)


def test_mmproj_weights_and_compute(llama8b: ModelProfile) -> None:
    mm = sparse("mmproj-llava-llama-3-8b")
    on_gpu = estimate(llama8b, LaunchSettings(n_ctx=4096), Machine((_gpu(),), HOST), mmproj=mm)
    gw = [t for t in on_gpu.devices[0].terms if t.label == "mmproj weights"]
    assert gw and gw[0].bytes >= sum(t.n_bytes for t in mm.tensors)
    on_cpu = estimate(
        llama8b, LaunchSettings(n_ctx=4096, mmproj=MmprojPlacement.CPU), Machine((_gpu(),), HOST), mmproj=mm
    )
    assert on_cpu.devices[0].bytes_of(TermKind.MMPROJ) == 0
    assert on_cpu.devices[1].bytes_of(TermKind.MMPROJ) > 0
    # CLIP ViT-L/14 at 336 px: 577 positions (576 patches + class token), width 1024, projector to 4096. Graph
    # inputs: raw image 4*3*336*336 = 1,354,752 B, positions 4*577 = 2,308 B (2,336 padded to 32), patch indices
    # 4*576 = 2,304 B; then the projector's input [1024, 576] and its two [4096, 576] activations. 22,593,056 B is
    # llama.cpp's 21.55 MiB (the allocator's peak, to the byte).
    cbytes, _ = mmproj_compute(mm, flash_attn=True)
    assert cbytes == 1_354_752 + 2_336 + 2_304 + 4 * 576 * (1024 + 2 * 4096) == 22_593_056


def test_draft_model_uses_the_target_context(llama8b: ModelProfile) -> None:
    draft = sparse("qwen3-8b")
    s = LaunchSettings(
        n_ctx=8192, draft=DraftSettings(model_path="d.gguf", cache_type_k="q8_0", cache_type_v="q8_0")
    )
    e = estimate(llama8b, s, Machine((_gpu(48),), HOST), draft=draft)
    alone = estimate(
        draft,
        dataclasses.replace(s, draft=None, cache_type_k="q8_0", cache_type_v="q8_0", n_gpu_layers=NGL_ALL),
        Machine((_gpu(48),), HOST),
        reserve_bytes=0,
    )
    assert e.devices[0].bytes_of(TermKind.DRAFT) == alone.devices[0].used_bytes
    assert e.devices[1].bytes_of(TermKind.DRAFT) == alone.devices[1].used_bytes


def test_tool_changes_the_logits_reservation(llama8b: ModelProfile) -> None:
    server = estimate(llama8b, LaunchSettings(n_ctx=8192, n_parallel=1), Machine((), HOST))
    fitp = estimate(
        llama8b, LaunchSettings(n_ctx=8192, n_parallel=1, tool=Tool.FIT_PARAMS), Machine((), HOST)
    )
    # llama-server reserves logits for 1 output, llama-fit-params for n_batch = 2048 (capped by n_ubatch 512 in
    # the compute graph): 4 B x 128256 x 512 = 250.5 MiB of logits there.
    assert (
        fitp.devices[0].bytes_of(TermKind.COMPUTE) - server.devices[0].bytes_of(TermKind.COMPUTE) > 160 * MIB
    )
    # The output buffer starts at n_seq_max = 1 output for both (it grows only for all-logits requests).
    assert (
        fitp.devices[0].bytes_of(TermKind.OUTPUT) == server.devices[0].bytes_of(TermKind.OUTPUT) == 4 * 128256
    )
