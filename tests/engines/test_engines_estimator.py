"""The estimator with a fork engine selected: what ik_llama.cpp, beellama.cpp and ollama change in an estimate.

Published numbers come from the forks' own pages and discussions (the source is cited per test); the others are derived, with the
arithmetic next to them.
"""

from __future__ import annotations

import dataclasses
from functools import cache

import pytest

from fitplan.core.base.devices import GIB, MIB, Machine, assumed_gpu, host_device
from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import Engine, FlashAttn, LaunchSettings, LoadMode
from fitplan.core.base.results import Estimate, TermKind
from fitplan.core.estimate.estimator import estimate, validate_settings
from fitplan.core.launch.flags import parse_flags
from fitplan.core.model.profile import LayerKind, LayerProfile, ModelProfile
from support.models import TESTS, sparse

MODELS = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"
HOST = host_device(256 * GIB, 256 * GIB)


@cache
def machine(*gib: float) -> Machine:
    return Machine(tuple(assumed_gpu(f"GPU{i}", g) for i, g in enumerate(gib)), HOST)


def settings(*argv: str) -> LaunchSettings:
    return parse_flags(list(argv)).settings


def kv_bytes(est: Estimate) -> int:
    return sum(d.bytes_of(TermKind.KV) for d in est.devices)


def qwen36_27b(nextn: bool = False) -> ModelProfile:
    """Qwen3.6-27B's attention (beellama's published records): 64 layers, every 4th full attention with 4 KV heads x 256; the
    rest gated delta net (no KV). `nextn` adds its MTP layer (index 64, 4 x 256). No tensors: only caches count."""
    layers = []
    for i in range(64):
        full = (i + 1) % 4 == 0
        layers.append(
            LayerProfile(
                index=i,
                kind=LayerKind.FULL if full else LayerKind.RECURRENT,
                n_head=24,
                n_head_kv=4 if full else 0,
                n_embd_head_k=256,
                n_embd_head_v=256,
                n_ff=17408,
                has_kv=full,
                is_recurrent=not full,
            )
        )
    if nextn:
        layers.append(
            LayerProfile(
                index=64,
                kind=LayerKind.NEXTN,
                n_head=24,
                n_head_kv=4,
                n_embd_head_k=256,
                n_embd_head_v=256,
                n_ff=17408,
                has_kv=True,
                is_nextn=True,
            )
        )
    return ModelProfile(
        path="qwen36.gguf", shard_paths=("qwen36.gguf",), architecture="synthetic", name="qwen36", file_type="F16",
        file_size=0, n_params=0, n_layer=64, n_layer_all=len(layers), n_nextn=1 if nextn else 0, n_embd=5120,
        n_vocab=248320, n_ctx_train=262144, layers=tuple(layers), tensors=(),
    )  # fmt: skip


# --- ik_llama.cpp -------------------------------------------------------------------------------------------------


def test_ik_defaults_are_fa_on_and_mla_3() -> None:
    s = settings("--engine", "ik_llama.cpp")
    assert s.engine is Engine.IK_LLAMA
    assert s.flash_attn is FlashAttn.ON and s.mla_mode == 3 and s.fused_moe
    # an explicit choice is kept
    assert settings("--engine", "ik_llama.cpp", "-fa", "off", "-mla", "1").flash_attn is FlashAttn.OFF


def test_ik_deepseek_lite_32k_kv_through_the_estimate() -> None:
    """ik discussion #354: DeepSeek-Lite at 32K with FlashMLA: K-only cache 972 MiB (576 * 2 B * 27 * 32768)."""
    est = estimate(
        sparse("deepseek-v2-lite"), settings("--engine", "ik_llama.cpp", "-c", "32768"), machine(24)
    )
    assert kv_bytes(est) / MIB == 972.0
    mainline = estimate(sparse("deepseek-v2-lite"), settings("-c", "32768"), machine(24))
    assert any("-mla 3" in a for a in est.assumptions)
    assert not any("ik_llama.cpp" in a for a in mainline.assumptions)


def test_ik_mla1_without_fa_adds_the_transposed_v_cache() -> None:
    """ik PR #240 layout at 32K: c^KV q8_KV 584 B/row + kv^T f16 512 * 2 B/row, 27 layers x 32768 cells."""
    s = settings(
        "--engine", "ik_llama.cpp", "-c", "32768", "-mla", "1", "-fa", "off", "-ctk", "q8_KV", "-np", "1"
    )
    est = estimate(sparse("deepseek-v2-lite"), s, machine(24))
    assert kv_bytes(est) == 27 * 32768 * (584 + 1024)


def test_ik_rtr_makes_host_weights_anonymous() -> None:
    """-rtr repacks at load and forces --no-mmap: the host weights are no longer file-backed."""
    p = sparse("deepseek-v2-lite")
    plain = estimate(p, settings("--engine", "ik_llama.cpp", "-c", "4096", "-dev", "none"), machine())
    rtr = estimate(p, settings("--engine", "ik_llama.cpp", "-c", "4096", "-dev", "none", "-rtr"), machine())
    assert plain.weights_file_backed and not rtr.weights_file_backed
    host_plain = {t.label for t in plain.devices[-1].terms if t.kind is TermKind.WEIGHTS}
    host_rtr = {t.label for t in rtr.devices[-1].terms if t.kind is TermKind.WEIGHTS}
    assert "CPU_Mapped" in host_plain and "CPU_Mapped" not in host_rtr
    # same bytes: repacking keeps the size of every tensor
    assert rtr.devices[-1].bytes_of(TermKind.WEIGHTS) >= plain.devices[-1].bytes_of(TermKind.WEIGHTS)
    assert any("-rtr" in a for a in rtr.assumptions)
    # the settings keep -rtr and not a load mode: the command writes -rtr only
    assert rtr.settings.load_mode is LoadMode.AUTO and rtr.settings.run_time_repack


def test_ik_fmoe_and_amb_are_noted() -> None:
    s = settings("--engine", "ik_llama.cpp", "-c", "32768", "-amb", "512", "-fa", "off")
    est = estimate(sparse("deepseek-v2-lite"), s, machine(24))
    notes = " ".join(est.assumptions)
    assert "-fmoe" in notes
    # without FA the largest intermediate is KQ: 32768 x 512 x 4 B = 64 MiB per head, 16 heads = 1 GiB; -amb 512
    # splits it into chunks of 8 heads = 512 MiB
    assert "512.0 MiB (-amb 512)" in notes


# --- beellama.cpp ---------------------------------------------------------------------------------------------


def test_beellama_kvarn_kv_through_the_estimate() -> None:
    """beellama fit record (beellama's published records): Qwen3.6-27B at 50,000 (-> 50,176) with kvarn4 and a 128-token tail:
    records 857.5 + stage 24 + tail 8.0625 MiB (the reported 1039 MiB adds 149 MiB of recurrent state)."""
    s = settings("--engine", "beellama", "-c", "50000", "-np", "1", "-ctk", "kvarn4", "-ctv", "kvarn4",
                 "--kv-tail-tokens", "128")  # fmt: skip
    est = estimate(qwen36_27b(), s, machine(24))
    assert kv_bytes(est) / MIB == 857.5 + 24 + 8.0625


def test_beellama_materialization_window_is_transient_per_gpu() -> None:
    """The CUDA prefill window: min(n_kv, 65536) x 4 heads x 1 stream x (256 + 256) x 2 B = 256 MiB at 100,352
    cells (beellama's published records: 4 KiB per token -> 256 MiB at the 64K chunk), on each GPU with attention layers,
    shown apart and not in used_bytes."""
    s = settings("--engine", "beellama", "-c", "100000", "-np", "1", "-ctk", "kvarn4", "-ctv", "kvarn4",
                 "-ngl", "all", "-ts", "1,1")  # fmt: skip
    est = estimate(qwen36_27b(), s, machine(24, 24))
    gpus = est.devices[:2]
    for d in gpus:
        assert [t.bytes for t in d.transient] == [256 * MIB]
        assert d.used_bytes == sum(t.bytes for t in d.terms)  # the window is not in the persistent total
    assert not est.devices[-1].transient
    assert sum("not in the persistent total" in a for a in est.assumptions) == 2
    # with -nkvo the caches live on the host: no CUDA window
    nkvo = estimate(qwen36_27b(), dataclasses.replace(s, no_kv_offload=True), machine(24, 24))
    assert not any(d.transient for d in nkvo.devices)


def test_beellama_window_grows_with_context_below_the_chunk() -> None:
    # 8192 cells: 8192 x 4 x 512 x 2 B = 32 MiB
    s = settings("--engine", "beellama", "-c", "8192", "-np", "1", "-ctk", "kvarn3")
    est = estimate(qwen36_27b(), s, machine(24))
    assert [t.bytes for t in est.devices[0].transient] == [32 * MIB]


def test_standard_cache_types_have_no_window() -> None:
    est = estimate(qwen36_27b(), settings("--engine", "beellama", "-c", "8192", "-ctk", "q4_0"), machine(24))
    assert not est.devices[0].transient


@pytest.mark.parametrize(
    ("draft_type", "expected_mib"),
    [
        # f16: 212,992 cells x 4 heads x 256 x (K + V) x 2 B = 832 MiB (published: 832.00 MiB)
        ("f16", 832.0),
        # kvarn2: records 212,992 x (16 x 2 + 6) x 8 slices x 2 sides = 123.5 MiB, stage 32768 x 8 x 9 groups x 2 =
        # 4.5 MiB, tail 1024 x 2 B x 129 rows x 4 slots x 2 = 2.015625 MiB (published: about 131 MiB)
        ("kvarn2", 123.5 + 4.5 + 2.015625),
    ],
)
def test_beellama_mtp_draft_cache(draft_type: str, expected_mib: float) -> None:
    """MTP draft context (beellama's published records): the NextN layer only, at the target's context, 4 unified slots."""
    s = settings("--engine", "beellama", "-c", "212992", "-np", "4", "-kvu", "--spec-type", "draft-mtp",
                 "-ctkd", draft_type, "-ctvd", draft_type)  # fmt: skip
    est = estimate(qwen36_27b(nextn=True), s, machine(80))
    draft = sum(d.bytes_of(TermKind.DRAFT) for d in est.devices)
    assert draft / MIB == expected_mib
    # the main context does not cache the NextN layer
    main = estimate(qwen36_27b(nextn=False), dataclasses.replace(s, spec_types=()), machine(80))
    assert kv_bytes(main) == kv_bytes(est)


def test_beellama_swa_cache_types_and_tail_forms() -> None:
    s = settings("--engine", "beellama", "-ctk", "q8_0", "--cache-type-k-swa", "kvarn4", "--cache-type-v-swa",
                 "kvarn4", "--kv-tail-tokens", "full=auto,swa=256")  # fmt: skip
    assert (s.cache_type_k_swa, s.cache_type_v_swa) == ("kvarn4", "kvarn4")
    assert (s.kv_tail_tokens, s.kv_tail_tokens_swa) == (1024, 256)


# --- ollama ---------------------------------------------------------------------------------------------------


def test_ollama_defaults_from_the_engine() -> None:
    s = settings("--engine", "ollama")
    assert (s.n_ctx, s.n_parallel, s.kv_unified, s.n_batch, s.n_ubatch) == (0, 1, False, 512, 512)
    assert s.flash_attn is FlashAttn.AUTO


@pytest.mark.parametrize(
    ("gpus", "n_ctx"),
    [
        ((8,), 4096),  # under 23 GiB: 4096
        ((24,), 32768),  # 23..47 GiB: 32768
        ((24, 24), 40960),  # 48 GiB: 262144, capped at the training context 40960
    ],
)
def test_ollama_vram_tier_context_in_the_estimate(gpus: tuple[float, ...], n_ctx: int) -> None:
    est = estimate(sparse("qwen3-8b"), settings("--engine", "ollama"), machine(*gpus))
    ctx = est.context
    assert (ctx.n_ctx, ctx.n_seq_max, ctx.kv_unified, ctx.n_batch, ctx.n_ubatch) == (
        n_ctx,
        1,
        False,
        512,
        512,
    )
    # qwen3-8b: 36 layers x 8 KV heads x 128 x (K + V) x 2 B = 147456 B per cell
    assert kv_bytes(est) == 147456 * n_ctx
    assert any(f"num_ctx {n_ctx}" in a for a in est.assumptions)


def test_ollama_slots_multiply_the_context_and_are_not_unified() -> None:
    s = settings(
        "--engine", "ollama", "OLLAMA_NUM_PARALLEL=2", "--num-ctx", "8192", "OLLAMA_KV_CACHE_TYPE=q8_0"
    )
    est = estimate(sparse("qwen3-8b"), s, machine(24))
    ctx = est.context
    assert (ctx.n_ctx, ctx.n_ctx_seq, ctx.n_stream, ctx.kv_unified) == (16384, 8192, 2, False)
    # q8_0: 1024 elements = 32 blocks x 34 B = 1088 B per row; K + V, 36 layers, 16384 cells
    assert kv_bytes(est) == 2 * 1088 * 36 * 16384


def test_ollama_gpu_overhead_is_part_of_the_reserve_and_lowers_the_tier() -> None:
    s = settings("--engine", "ollama", "OLLAMA_GPU_OVERHEAD=2147483648")
    est = estimate(sparse("qwen3-8b"), s, machine(24))
    # mainline's derived reserve (350 + 32 + 16 MiB, see tests/estimate/test_estimator.py) plus the 2 GiB overhead
    assert est.devices[0].bytes_of(TermKind.RESERVE) == (350 + 32 + 16) * MIB + 2 * GIB
    assert any(
        "OLLAMA_GPU_OVERHEAD" in t.explanation for t in est.devices[0].terms if t.kind is TermKind.RESERVE
    )
    assert est.context.n_ctx == 4096  # 24 GiB - 2 GiB = 22 GiB: under the 23 GiB tier


def test_mainline_reserve_and_context_are_unchanged_by_ollama_fields() -> None:
    """gpu_overhead_bytes only counts with the ollama engine."""
    s = LaunchSettings(n_ctx=4096, gpu_overhead_bytes=GIB)
    est = estimate(sparse("qwen3-8b"), s, machine(24))
    # 350 MiB context + 32 MiB cuBLAS (unknown compute capability) + pool: 512 x 12288 q8_1 = 6.75 MiB, a tile's
    # 18 KiB and the 8 MiB stream-k fixup = 14.77 MiB -> 16 MiB
    assert est.devices[0].bytes_of(TermKind.RESERVE) == (350 + 32 + 16) * MIB


# --- validation -----------------------------------------------------------------------------------------------


def test_cache_types_are_checked_per_engine() -> None:
    p = sparse("qwen3-8b")
    with pytest.raises(SettingsError, match=r"llama\.cpp accepts"):
        validate_settings(p, LaunchSettings(cache_type_k="kvarn4"))
    validate_settings(p, LaunchSettings(engine=Engine.BEELLAMA, cache_type_k="kvarn4", cache_type_v="kvarn4"))
    validate_settings(p, LaunchSettings(engine=Engine.IK_LLAMA, cache_type_k="q8_KV"))
    with pytest.raises(SettingsError, match=r"ik_llama\.cpp accepts"):
        validate_settings(p, LaunchSettings(engine=Engine.IK_LLAMA, cache_type_k="kvarn4"))
