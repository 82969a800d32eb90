"""Fork engines reproduce the forks' published measurements (the source is cited per test)."""

from __future__ import annotations

import pytest

from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import Engine
from fitplan.core.engines import (
    OllamaConfig,
    beellama_kv_cache,
    cache_row_bytes,
    ik_attention_intermediate_bytes,
    ik_kv_cache,
    kvarn_materialization_window_bytes,
    kvarn_promote,
    kvarn_record_bytes,
    ollama_default_num_ctx,
    ollama_environment,
    ollama_llama_server_args,
    ollama_modelfile,
)
from fitplan.core.model.profile import LayerKind, LayerProfile, MlaParams, ModelProfile

MIB = 1 << 20
GIB = 1 << 30


def _profile(layers: list[LayerProfile], *, mla: MlaParams | None = None, n_swa: int = 0) -> ModelProfile:
    return ModelProfile(
        path="synthetic.gguf",
        shard_paths=("synthetic.gguf",),
        architecture="synthetic",
        name="synthetic",
        file_type="F16",
        file_size=0,
        n_params=0,
        n_layer=len(layers),
        n_layer_all=len(layers),
        n_nextn=0,
        n_embd=4096,
        n_vocab=32000,
        n_ctx_train=163840,
        layers=tuple(layers),
        tensors=(),
        mla=mla,
        n_swa=n_swa,
    )


def deepseek(n_layer: int) -> ModelProfile:
    """Modern DeepSeek GGUF: head_count_kv 1, key_length 576 (512 + 64), value_length 512, 16 or 128 heads."""
    heads = 16 if n_layer == 27 else 128
    layers = [
        LayerProfile(
            index=i,
            kind=LayerKind.MLA,
            n_head=heads,
            n_head_kv=1,
            n_embd_head_k=576,
            n_embd_head_v=512,
            n_ff=0,
            has_kv=True,
        )
        for i in range(n_layer)
    ]
    return _profile(
        layers, mla=MlaParams(kv_lora_rank=512, n_rot=64, key_length_mla=192, value_length_mla=128)
    )


def qwen36_27b() -> ModelProfile:
    """Qwen3.6-27B: 64 layers, every 4th full attention (16 layers, 4 KV heads x 256); the rest gated delta net."""
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
    return _profile(layers)


def mib(parts: tuple) -> float:
    return sum(p.bytes for p in parts) / MIB


# --- ik_llama.cpp -----------------------------------------------------------------------------------------------


def test_ik_deepseek_lite_32k_k_only_vs_k_plus_v() -> None:
    """ik_llama.cpp discussion #354 (2025-04-29), DeepSeek-Lite, 32K: K-only 972 MiB vs K576 + V512 1836 MiB.

    The 1836 MiB layout (a 576-wide K plus a 512-wide V per layer) is what mainline allocated then and what ik
    still allocates with -mla 1 and FA off: 27 * 32768 * (576 + 512) * 2 B = 1836 MiB.
    """
    p = deepseek(27)
    assert mib(ik_kv_cache(p, 32768, mla_mode=3, flash_attn=True)) == 972.0  # 27 * 32768 * 576 * 2
    assert mib(ik_kv_cache(p, 32768, mla_mode=1, flash_attn=False)) == 1836.0


def test_ik_deepseek_lite_65k_q8_kv_row_metadata() -> None:
    """ik PR #240: 65K, -ctk q8_KV -mla 1 without FA: c^KV 985.50 MiB = 584 B (576 + 8 row meta) * 27 * 65536."""
    parts = ik_kv_cache(deepseek(27), 65536, mla_mode=1, flash_attn=False, type_k="q8_KV", type_v="f16")
    latent = next(p for p in parts if p.name.startswith("K"))
    assert latent.bytes / MIB == 985.5
    vt = next(p for p in parts if p.name.startswith("V"))
    assert vt.bytes / MIB == 1728.0  # kv^T f16: 512 * 65536 * 2 * 27 (same PR)


@pytest.mark.parametrize(("ctx", "expected_mib"), [(32768, 1166.62), (65536, 2333.25)])
def test_ik_deepseek_r1_q8_0_mla2(ctx: int, expected_mib: float) -> None:
    """ik discussion #258, DeepSeek-R1 (61 layers) -mla 2 -fa -ctk q8_0: KV 1166.62 MiB at 32K, 2333.25 at 65K."""
    got = mib(ik_kv_cache(deepseek(61), ctx, mla_mode=2, flash_attn=True, type_k="q8_0", type_v="q8_0"))
    assert round(got, 2) == expected_mib  # 612 B * 61 * ctx


def test_ik_mla_without_fa_uses_ctv_for_modes_2_and_3() -> None:
    p = deepseek(27)
    # -mla 2 without FA: the latent takes -ctv (f16: 576 * 2 B), not -ctk (q8_0 would be 612 B)
    mode2 = ik_kv_cache(p, 1024, mla_mode=2, flash_attn=False, type_k="q8_0", type_v="f16")
    assert len(mode2) == 1 and mode2[0].bytes == 31_850_496  # 27 layers x 1024 cells x 1152 B
    # -mla 1 without FA: the latent takes -ctk (q8_0: 576 / 32 * 34 = 612 B) plus a transposed f16 V of 512
    mode1 = ik_kv_cache(p, 1024, mla_mode=1, flash_attn=False, type_k="q8_0", type_v="f16")
    assert mode1[0].bytes == 16_920_576  # 27 x 1024 x 612 B
    assert mode1[1].bytes == 28_311_552  # 27 x 1024 x 1024 B
    with pytest.raises(SettingsError):  # ik refuses a quantized V cache without FA
        ik_kv_cache(p, 1024, mla_mode=2, flash_attn=False, type_k="q8_0", type_v="q8_0")


def test_ik_mla0_is_decompressed_heads() -> None:
    # 16 heads * 192 K + 16 * 128 V, f16: 10240 B per cell per layer (ik's legacy layout), 27 layers, 1024 cells
    assert sum(x.bytes for x in ik_kv_cache(deepseek(27), 1024, mla_mode=0)) == 283_115_520


def test_ik_amb_caps_attention_intermediate() -> None:
    p = deepseek(27)
    full = ik_attention_intermediate_bytes(p, 32768, 512, mla_mode=3, flash_attn=False, amb_mib=0)
    assert full == 1 << 30  # KQ: 32768 cells x 512 tokens x 16 heads x 4 B
    capped = ik_attention_intermediate_bytes(p, 32768, 512, mla_mode=3, flash_attn=False, amb_mib=256)
    assert capped == 256 * MIB  # 64 MiB per head -> 4 heads per chunk


def test_ik_rejects_unknown_cache_type() -> None:
    with pytest.raises(SettingsError):
        cache_row_bytes(Engine.LLAMA_CPP, "q6_0", 128)
    assert cache_row_bytes(Engine.IK_LLAMA, "q6_0", 128) == 4 * 26


# --- beellama.cpp KVarN -------------------------------------------------------------------------------------------

QWEN36_RS_MIB = (
    149.625  # 48 GDN layers x (3 * (6144 + 2*16*128) + 128 * 6144) f32, from beellama's published records
)


def _kvarn(ctx: int, *, ctk: str = "kvarn4", tail: int = 0, np_: int = 1, unified: bool = True) -> float:
    n_ctx = (ctx + 255) // 256 * 256
    return mib(
        beellama_kv_cache(
            qwen36_27b(),
            n_ctx_seq=n_ctx,
            n_stream=1,
            n_seq_max=np_,
            kv_unified=unified,
            n_ubatch=512,
            type_k=ctk,
            type_v=ctk,
            tail_tokens=tail,
        )
    )


def test_kvarn_record_sizes() -> None:
    # beellama's published table: record bytes per side
    assert [kvarn_record_bytes(b) for b in (2, 3, 4, 5, 6, 8)] == [4864, 6912, 8960, 11008, 13056, 17152]


@pytest.mark.parametrize(
    ("ctx", "ctk", "tail", "reported_context_mib"),
    [
        (50000, "q4_0", 0, 1031),  # q4_0, tail 0
        (50000, "kvarn4", 128, 1039),  # KVarN4, tail 128
        (50000, "kvarn4", 1024, 1095),  # KVarN4, tail 1024
        (100000, "kvarn4", 128, 1892),  # KVarN4 at 100,000
    ],
)
def test_kvarn_qwen36_27b_matches_fit_log(ctx: int, ctk: str, tail: int, reported_context_mib: float) -> None:
    """beellama docs/records/kvarn-tail-fit-remediation-completion-20260809.md (Vulkan fit, np 1, ub 512): the
    reported 'context' MiB is KV + recurrent state. Within 1 MiB of what the fork printed."""
    got = _kvarn(ctx, ctk=ctk, tail=tail) + QWEN36_RS_MIB
    assert abs(got - reported_context_mib) < 1.0


def test_kvarn_parts_match_formula_breakdown() -> None:
    """records 857.5 + stage 24 + tail 8.06 MiB at 50,000 tokens (beellama's published records)."""
    parts = {
        p.name: p.bytes / MIB
        for p in beellama_kv_cache(
            qwen36_27b(),
            n_ctx_seq=50176,
            n_stream=1,
            n_seq_max=1,
            kv_unified=True,
            n_ubatch=512,
            type_k="kvarn4",
            type_v="kvarn4",
            tail_tokens=128,
        )
    }
    assert parts["KVarN records"] == 857.5
    assert parts["KVarN stage"] == 24.0
    assert round(parts["KVarN tail"], 2) == 8.06


def test_kvarn_16k_to_64k_grows_each_side_by_420_mib() -> None:
    """beellama features doc: 16K -> 64K grows compressed K and V by 420 MiB each (16*8*384*8960 B)."""

    def records(ctx: int) -> float:
        parts = beellama_kv_cache(
            qwen36_27b(),
            n_ctx_seq=ctx,
            n_stream=1,
            n_seq_max=1,
            kv_unified=True,
            n_ubatch=512,
            type_k="kvarn4",
            type_v="kvarn4",
        )
        return next(p.bytes for p in parts if p.name == "KVarN records") / MIB

    assert records(65536) - records(16384) == 2 * 420.0


def test_kvarn_mtp_draft_cache_vs_f16() -> None:
    """MTP draft: one nextn layer (4 x 256) at ctx 212,992, 4 slots unified: f16 832 MiB, kvarn2 about 131 MiB."""
    nextn = (
        LayerProfile(
            index=64,
            kind=LayerKind.FULL,
            n_head=24,
            n_head_kv=4,
            n_embd_head_k=256,
            n_embd_head_v=256,
            n_ff=0,
            has_kv=True,
        ),
    )
    p = qwen36_27b()
    f16 = 212992 * 4 * 256 * 2 * 2  # cells x K+V width x 2 bytes
    assert f16 / MIB == 832.0
    kv2 = beellama_kv_cache(
        p,
        n_ctx_seq=212992,
        n_stream=1,
        n_seq_max=4,
        kv_unified=True,
        n_ubatch=512,
        type_k="kvarn2",
        type_v="kvarn2",
        layers=nextn,
    )
    parts = {x.name: x.bytes / MIB for x in kv2}
    assert parts["KVarN records"] == 123.5 and parts["KVarN stage"] == 4.5
    assert abs(sum(parts.values()) - 131) < 1.5  # reported "about 131"; formula gives 130.0


def test_kvarn_promotes_the_other_side_and_rejects_bad_heads() -> None:
    assert kvarn_promote("kvarn4", "f16") == ("kvarn4", "kvarn4")
    assert kvarn_promote("q8_0", "kvarn3") == ("kvarn3", "kvarn3")
    bad = _profile(
        [
            LayerProfile(
                index=0,
                kind=LayerKind.FULL,
                n_head=8,
                n_head_kv=8,
                n_embd_head_k=96,
                n_embd_head_v=96,
                n_ff=0,
                has_kv=True,
            )
        ]
    )
    with pytest.raises(SettingsError):
        beellama_kv_cache(
            bad,
            n_ctx_seq=4096,
            n_stream=1,
            n_seq_max=1,
            kv_unified=True,
            n_ubatch=512,
            type_k="kvarn4",
            type_v="kvarn4",
        )


def test_kvarn_materialization_window() -> None:
    """Qwen3.6-27B: 4 KiB per token -> 128 MiB with a 32K chunk, 256 MiB with 64K (beellama's published records)."""
    p = qwen36_27b()
    assert kvarn_materialization_window_bytes(p, 100352, 1, chunk=32768) == 128 * MIB
    assert kvarn_materialization_window_bytes(p, 100352, 1, chunk=65536) == 256 * MIB
    assert kvarn_materialization_window_bytes(p, 8192, 1) == 32 * MIB  # grows with context below the chunk


# --- ollama -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vram_gib", "ctx"), [(8, 4096), (22.9, 4096), (24, 32768), (46, 32768), (48, 262144)]
)
def test_ollama_vram_tier_default_context(vram_gib: float, ctx: int) -> None:
    """ollama server/routes.go: >= 47 GiB -> 262144, >= 23 GiB -> 32768, else 4096."""
    assert ollama_default_num_ctx(int(vram_gib * GIB)) == ctx


def test_ollama_gpu_overhead_lowers_the_tier() -> None:
    assert ollama_default_num_ctx(24 * GIB, gpu_overhead_bytes=2 * GIB) == 4096


def test_ollama_builds_llama_server_args_and_exports() -> None:
    cfg = OllamaConfig(num_parallel=2, kv_cache_type="q8_0", flash_attention=True)
    args = ollama_llama_server_args(cfg, n_ctx_train=131072, total_vram_bytes=24 * GIB, n_gpus=1)
    # ollama multiplies the per-request context by the slots and passes -np without -kvu
    assert args[:4] == ["-c", str(32768 * 2), "-np", "2"]
    assert "--cache-type-v" in args and "-ub" in args and args[args.index("-ub") + 1] == "512"
    capped = ollama_llama_server_args(OllamaConfig(), n_ctx_train=8192, total_vram_bytes=80 * GIB, n_gpus=1)
    assert capped[:2] == ["-c", "8192"]
    env = ollama_environment(cfg)
    assert env == {"OLLAMA_NUM_PARALLEL": "2", "OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_FLASH_ATTENTION": "1"}
    mf = ollama_modelfile("llama3.1:8b", OllamaConfig(num_ctx=16384, num_gpu=20))
    assert mf == "FROM llama3.1:8b\nPARAMETER num_ctx 16384\nPARAMETER num_gpu 20\n"


# --- through context_memory (what the estimator calls) -----------------------------------------------------------


def test_context_memory_dispatches_to_the_fork_and_curves_stay_exact() -> None:
    from fitplan.core.base.launch_settings import LaunchSettings
    from fitplan.core.engines import engine_context_caches as context_caches
    from fitplan.core.engines import resolve_context

    p = qwen36_27b()
    bee = LaunchSettings(
        engine=Engine.BEELLAMA,
        n_ctx=50000,
        n_parallel=1,
        cache_type_k="kvarn4",
        cache_type_v="kvarn4",
        kv_tail_tokens=128,
    )
    ctx = resolve_context(p, bee)
    assert ctx.n_ctx == 50176
    caches = context_caches(p, ctx, bee)
    kv = sum(c.bytes for c in caches if c.kind.value == "kv") / MIB
    assert abs(kv - (857.5 + 24 + 8.0625)) < 1e-9
    # the fast path (row bytes x cells at another context) equals a fresh computation there
    for n in (65536, 100000, 131072):
        other = resolve_context(p, _replace(bee, n_ctx=n))
        fresh = sum(c.bytes for c in context_caches(p, other, _replace(bee, n_ctx=n)))
        assert sum(c.bytes_at(other) for c in caches) == fresh

    ik = LaunchSettings(
        engine=Engine.IK_LLAMA,
        n_ctx=32768,
        n_parallel=1,
        cache_type_k="q8_0",
        cache_type_v="q8_0",
        mla_mode=2,
    )
    dctx = resolve_context(deepseek(61), ik)
    assert round(sum(c.bytes for c in context_caches(deepseek(61), dctx, ik)) / MIB, 2) == 1166.62


def test_fork_settings_are_validated() -> None:
    from fitplan.core.base.launch_settings import FlashAttn, LaunchSettings
    from fitplan.core.engines import resolve_context

    with pytest.raises(SettingsError):
        resolve_context(qwen36_27b(), LaunchSettings(cache_type_k="kvarn4"))  # mainline has no KVarN
    with pytest.raises(SettingsError):
        resolve_context(qwen36_27b(), LaunchSettings(engine=Engine.IK_LLAMA, cache_type_k="kvarn4"))
    with pytest.raises(SettingsError):  # ik refuses a quantized V cache without FA, MLA or not
        resolve_context(
            deepseek(27),
            LaunchSettings(
                engine=Engine.IK_LLAMA,
                n_ctx=1000,
                flash_attn=FlashAttn.OFF,
                cache_type_k="q8_0",
                cache_type_v="q8_0",
            ),
        )
    ok = resolve_context(
        deepseek(27),
        LaunchSettings(
            engine=Engine.IK_LLAMA,
            n_ctx=1000,
            flash_attn=FlashAttn.OFF,
            cache_type_k="q8_0",
            cache_type_v="f16",
        ),
    )
    assert ok.n_ctx == 1024 and not ok.flash_attn  # ik pads to 32 without FA (1000 -> 1024)
    assert (
        resolve_context(
            deepseek(27), LaunchSettings(engine=Engine.IK_LLAMA, n_ctx=1000, flash_attn=FlashAttn.OFF)
        ).n_ctx
        == 1024
    )
    assert (
        resolve_context(
            deepseek(27), LaunchSettings(engine=Engine.IK_LLAMA, n_ctx=1010, flash_attn=FlashAttn.OFF)
        ).n_ctx
        == 1024
    )
    assert (
        resolve_context(
            deepseek(27), LaunchSettings(engine=Engine.IK_LLAMA, n_ctx=1030, flash_attn=FlashAttn.OFF)
        ).n_ctx
        == 1056
    )


def _replace(settings, **kw):
    import dataclasses

    return dataclasses.replace(settings, **kw)
