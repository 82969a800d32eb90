"""Resolved context, KV cache, recurrent state and output buffer: worked examples and llama.cpp's rules.

Worked examples are section 9 of the memory-model notes (Llama-3.1-8B, Gemma-3-27B, DeepSeek-V2-Lite: verified
against llama.cpp 515e85511 with the CPU build), computed on the header-only copies of the same sparse models that
tests/fixtures/llamacpp/sparse/ records.
"""

from __future__ import annotations

import time

import pytest
from gguf.constants import GGUFValueType

from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import DraftSettings, FlashAttn, LaunchSettings, Tool
from fitplan.core.base.results import TermKind
from fitplan.core.gguf.reader import read_header
from fitplan.core.memory.context import (
    CellRule,
    context_caches,
    kv_bytes,
    output_buffer_bytes,
    recurrent_bytes,
    resolve_context,
)
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import ModelProfile
from support.headers import arr, dense, make_header, ssm_meta
from support.models import TESTS

MIB = 1 << 20
SPARSE = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"
ARCHS = SPARSE.parent / "archs"


def sparse(name: str) -> ModelProfile:
    return build_profile(read_header(SPARSE / f"{name}.header.gguf", allow_incomplete=True))


def fit(**kw: object) -> LaunchSettings:
    return LaunchSettings(tool=Tool.FIT_PARAMS, n_parallel=1, **kw)  # type: ignore[arg-type]


def kv_mib(p: ModelProfile, s: LaunchSettings) -> float:
    return kv_bytes(p, resolve_context(p, s), s) / MIB


# -- worked examples ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama8b() -> ModelProfile:
    return sparse("llama-3.1-8b")


@pytest.fixture(scope="module")
def gemma27b() -> ModelProfile:
    return sparse("gemma-3-27b")


def test_llama_8b_kv(llama8b: ModelProfile) -> None:
    # 32 layers x 32768 cells x 2*(8*128)*2 B = 4096 MiB
    assert kv_mib(llama8b, fit(n_ctx=32768)) == 4096
    # q8_0: 34 B per 32 elements -> 2176 MiB; q4_0: 18 B per 32 -> 1152 MiB
    assert kv_mib(llama8b, fit(n_ctx=32768, cache_type_k="q8_0", cache_type_v="q8_0")) == 2176
    assert kv_mib(llama8b, fit(n_ctx=32768, cache_type_k="q4_0", cache_type_v="q4_0")) == 1152
    # -np 4, unified or not: the cells still total n_ctx
    for unified in (True, False):
        s = LaunchSettings(n_ctx=32768, n_parallel=4, kv_unified=unified, tool=Tool.FIT_PARAMS)
        assert kv_mib(llama8b, s) == 4096
    # -c unset: the training context, 131072 cells -> 16384 MiB
    assert kv_mib(llama8b, fit()) == 16384


def test_gemma_27b_kv(gemma27b: ModelProfile) -> None:
    s = fit(n_ctx=32768)
    base, swa = context_caches(gemma27b, resolve_context(gemma27b, s), s)
    # 10 full layers x 32768 x 8192 B = 2560 MiB; 52 SWA layers x PAD(1024 + 512) = 1536 cells x 8192 B = 624 MiB
    assert (base.n_layers, base.cells, base.bytes / MIB) == (10, 32768, 2560)
    assert (swa.n_layers, swa.cells, swa.bytes / MIB) == (52, 1536, 624)
    assert swa.cell_rule is CellRule.SWA
    # server default: 4 slots, unified: SWA cells PAD(4*1024 + 512) = 4608 -> 1872 MiB, total 4432 MiB
    srv = LaunchSettings(n_ctx=32768)
    assert kv_mib(gemma27b, srv) == 4432
    # -np 4 -no-kvu: 1536 SWA cells per stream x 4 streams = 2496 MiB, base 2560 MiB
    s4 = LaunchSettings(n_ctx=32768, n_parallel=4, kv_unified=False)
    base4, swa4 = context_caches(gemma27b, resolve_context(gemma27b, s4), s4)
    assert (base4.bytes / MIB, swa4.bytes / MIB, swa4.cells, swa4.n_stream) == (2560, 2496, 1536, 4)
    # --swa-full: 62 layers x 256 MiB
    assert kv_mib(gemma27b, fit(n_ctx=32768, swa_full=True)) == 15872


def test_deepseek_v2_lite_mla_kv() -> None:
    p = sparse("deepseek-v2-lite")
    (c,) = context_caches(p, resolve_context(p, fit(n_ctx=32768)), fit(n_ctx=32768))
    # K only: 27 x 32768 x 576*2 B = 972 MiB
    assert (c.bytes / MIB, c.v_bytes, c.type_v) == (972, 0, "")
    # q8_0 (both): 576/32*34 = 612 B per cell per layer -> 27 x 32768 x 612 B = 516.375 MiB
    assert kv_mib(p, fit(n_ctx=32768, cache_type_k="q8_0", cache_type_v="q8_0")) == 516.375
    with pytest.raises(SettingsError, match="different K"):
        resolve_context(p, fit(n_ctx=32768, cache_type_k="q8_0"))


def test_qwen3_next_kv_and_recurrent_state() -> None:
    p = sparse("qwen3-next-80b-a3b")
    s = fit(n_ctx=32768)
    ctx = resolve_context(p, s)
    # 12 attention layers x 32768 x 2*(2*256)*2 B = 768 MiB
    assert kv_bytes(p, ctx, s) / MIB == 768
    # 36 GDN layers x (r = 3*(4096 + 2*16*128) + s = 128*4096) f32 = 75.375 MiB per sequence
    assert recurrent_bytes(p, ctx, s) / MIB == 75.375
    srv = LaunchSettings(n_ctx=32768)  # 4 slots: 768 + 4 x 75.375 = 1069.5 MiB
    sctx = resolve_context(p, srv)
    assert (kv_bytes(p, sctx, srv) + recurrent_bytes(p, sctx, srv)) / MIB == 1069.5


# -- resolved context ---------------------------------------------------------------------------------------------


def test_non_unified_streams_pad_per_stream(llama8b: ModelProfile) -> None:
    # verified: c=10000, np=3 -> 10240 -> 10240/3 = 3413 -> PAD 3584 per stream -> n_ctx 10752
    ctx = resolve_context(llama8b, LaunchSettings(n_ctx=10000, n_parallel=3, kv_unified=False))
    assert (ctx.n_ctx, ctx.n_ctx_seq, ctx.n_stream, ctx.n_seq_max, ctx.kv_unified) == (
        10752,
        3584,
        3,
        3,
        False,
    )


def test_batch_is_clamped_by_the_unpadded_context(llama8b: ModelProfile) -> None:
    ctx = resolve_context(llama8b, fit(n_ctx=1000))
    assert (ctx.n_ctx, ctx.n_batch, ctx.n_ubatch, ctx.n_outputs_max) == (1024, 1000, 512, 1000)


def test_server_defaults(llama8b: ModelProfile) -> None:
    ctx = resolve_context(llama8b, LaunchSettings(n_ctx=8192, kv_unified=False))
    # -np auto: 4 slots and a unified cache regardless of -no-kvu; logits reserved for min(2048, 4 x 1) outputs
    assert (ctx.n_seq_max, ctx.kv_unified, ctx.n_stream, ctx.n_outputs_max) == (4, True, 1, 4)
    spec = resolve_context(llama8b, LaunchSettings(n_ctx=8192, draft=DraftSettings("d.gguf", n_max=3)))
    assert spec.n_outputs_max == 16  # 4 x (1 + 3)
    # measured with llama-server --embedding: n_batch = n_ubatch = 512, n_outputs_max = 512
    emb = resolve_context(llama8b, LaunchSettings(n_ctx=8192, embedding=True))
    assert (emb.n_batch, emb.n_outputs_max, emb.embeddings) == (512, 512, True)


def test_output_buffer_with_embeddings() -> None:
    # llama-server --embedding on the test-llama-archs llama model (vocab 128, n_embd 256, 4 slots) logs
    # "output buffer size = 0.01 MiB": 4 B x 4 outputs x (128 logits + 256 embedding values) = 6144 B
    p = build_profile(read_header(ARCHS / "llama-dense.header.gguf", allow_incomplete=True))
    ctx = resolve_context(p, LaunchSettings(n_ctx=4096, embedding=True))
    assert output_buffer_bytes(p, ctx) == 4 * 4 * (128 + 256)


def test_fit_params_reserves_n_batch_outputs(llama8b: ModelProfile) -> None:
    ctx = resolve_context(llama8b, LaunchSettings(n_ctx=8192, tool=Tool.FIT_PARAMS))
    assert (ctx.n_seq_max, ctx.kv_unified, ctx.n_outputs_max) == (1, False, 2048)


def test_cli_runs_the_server_code_with_one_slot(llama8b: ModelProfile) -> None:
    # tools/cli/cli-server.h starts llama_server(params) in-process; the CLI's n_parallel default is 1, so
    # server_output_limits asks for min(2048, 1 x (1 + 0)) = 1 output
    ctx = resolve_context(llama8b, LaunchSettings(n_ctx=8192, tool=Tool.CLI))
    assert (ctx.n_seq_max, ctx.kv_unified, ctx.n_outputs_max) == (1, False, 1)


def test_context_zero_means_training_context(llama8b: ModelProfile) -> None:
    assert resolve_context(llama8b, fit()).n_ctx == 131072


def test_flash_attention_rules(llama8b: ModelProfile) -> None:
    assert resolve_context(llama8b, fit(n_ctx=4096)).flash_attn
    assert not resolve_context(llama8b, fit(n_ctx=4096, flash_attn=FlashAttn.OFF)).flash_attn
    with pytest.raises(SettingsError, match="requires flash attention"):
        resolve_context(llama8b, fit(n_ctx=4096, cache_type_v="q8_0", flash_attn=FlashAttn.OFF))
    assert resolve_context(llama8b, fit(n_ctx=4096, cache_type_v="q8_0")).flash_attn  # auto -> on
    with pytest.raises(SettingsError, match="unsupported"):
        resolve_context(llama8b, fit(n_ctx=4096, cache_type_k="q4_K"))


def test_grok_forces_flash_attention_off() -> None:
    p = build_profile(make_header("grok", dense(2)))
    assert not resolve_context(p, fit(n_ctx=4096, flash_attn=FlashAttn.ON)).flash_attn
    with pytest.raises(SettingsError):
        resolve_context(p, fit(n_ctx=4096, cache_type_k="q8_0", cache_type_v="q8_0"))


def test_quantized_k_needs_head_size_multiple_of_block() -> None:
    p = build_profile(make_header("llama", dense(2, n_head=4, head=80)))
    with pytest.raises(SettingsError, match="does not divide the head size 80"):
        resolve_context(p, fit(n_ctx=4096, cache_type_k="q8_0"))
    assert (
        resolve_context(p, fit(n_ctx=4096, cache_type_k="q8_0", flash_attn=FlashAttn.OFF)).flash_attn is False
    )


# -- caches -------------------------------------------------------------------------------------------------------


def test_v_is_padded_to_the_widest_layer_without_flash_attention() -> None:
    meta = dense(
        2,
        n_head=8,
        n_head_kv=2,
        **{
            "attention.sliding_window": 512,
            "attention.sliding_window_pattern": arr([True, False], GGUFValueType.BOOL),
            "attention.key_length": 512,
            "attention.value_length": 512,
            "attention.key_length_swa": 256,
            "attention.value_length_swa": 256,
        },
    )
    p = build_profile(make_header("gemma4", meta))
    on = fit(n_ctx=4096)
    off = fit(n_ctx=4096, flash_attn=FlashAttn.OFF)
    base_on, swa_on = context_caches(p, resolve_context(p, on), on)
    base_off, swa_off = context_caches(p, resolve_context(p, off), off)
    # SWA layer: V row 2 heads x 256 f16 = 1024 B with FA; padded to the full layer's 2 x 512 f16 = 2048 B without
    assert swa_on.layer_rows == ((0, 1024, 1024),)
    assert swa_off.layer_rows == ((0, 1024, 2048),)
    assert base_on.layer_rows == base_off.layer_rows == ((1, 2048, 2048),)


def test_recurrent_rows_grow_with_rollback_snapshots() -> None:
    p = build_profile(make_header("qwen35", ssm_meta(4)))
    s = LaunchSettings(n_ctx=4096, spec_types=("draft-mtp",))
    ctx = resolve_context(p, s)
    (_, rs) = context_caches(p, ctx, s)
    # server: 4 slots x (1 + --spec-draft-n-max 3) rows
    assert (ctx.n_rs_seq, rs.cells, rs.kind) == (3, 16, TermKind.RECURRENT)
    # qwen3next cannot roll back: llama.cpp clamps n_rs_seq to 0
    p2 = build_profile(make_header("qwen3next", ssm_meta(4)))
    assert resolve_context(p2, s).n_rs_seq == 0


def test_mtp_rollback_rows_match_llama_server() -> None:
    # Measured with llama-server (515e85511) on the test-llama-archs qwen35 model:
    #   -c 4096 -np 2 --spec-type draft-mtp --spec-draft-n-max 5 -lv 4 logs n_rs_seq = 5, n_outputs_max = 12,
    #   "llama_kv_cache: size = 4.00 MiB (2048 cells, 1 layers, 2/2 seqs)" and
    #   "llama_memory_recurrent: size = 1.61 MiB (2 cells, ..., 2 seqs 5 rs_seq), R (f32): 0.11 MiB, S (f32): 1.50 MiB"
    p = build_profile(read_header(ARCHS / "qwen35-dense.header.gguf", allow_incomplete=True))
    s = LaunchSettings(n_ctx=4096, n_parallel=2, spec_types=("draft-mtp",), spec_draft_n_max=5)
    ctx = resolve_context(p, s)
    assert (ctx.n_rs_seq, ctx.n_outputs_max, ctx.n_ctx_seq, ctx.n_stream) == (5, 12, 2048, 2)
    kv, rs = context_caches(p, ctx, s)
    assert (kv.cells, kv.n_stream, kv.n_layers, kv.bytes) == (2048, 2, 1, 4 * MIB)
    assert rs.cells == 2 * (1 + 5)
    assert (round(rs.k_bytes / MIB, 2), round(rs.v_bytes / MIB, 2), round(rs.bytes / MIB, 2)) == (
        0.11,
        1.5,
        1.61,
    )


def test_no_memory_architectures_have_no_caches() -> None:
    p = build_profile(make_header("bert", dense(2)))
    s = fit(n_ctx=512)
    assert not p.has_memory and context_caches(p, resolve_context(p, s), s) == ()


def test_layer_bytes_add_up_and_follow_the_layer(gemma27b: ModelProfile) -> None:
    s = fit(n_ctx=32768)
    for c in context_caches(gemma27b, resolve_context(gemma27b, s), s):
        assert sum(b for _, b in c.layer_bytes) == c.bytes == c.k_bytes + c.v_bytes
    swa = context_caches(gemma27b, resolve_context(gemma27b, s), s)[1]
    assert dict(swa.layer_bytes)[0] == 1536 * 8192


def test_bytes_at_other_contexts_match_a_full_recomputation(gemma27b: ModelProfile) -> None:
    s = LaunchSettings(n_ctx=4096)
    caches = context_caches(gemma27b, resolve_context(gemma27b, s), s)
    contexts = [resolve_context(gemma27b, LaunchSettings(n_ctx=n)) for n in range(4096, 131073, 4096)]
    for ctx in contexts:
        direct = context_caches(gemma27b, ctx, s)
        assert [c.bytes_at(ctx) for c in caches] == [c.bytes for c in direct]
        assert [c.at(ctx).layer_bytes for c in caches] == [c.layer_bytes for c in direct]
    many = [resolve_context(gemma27b, LaunchSettings(n_ctx=512 * (i + 1))) for i in range(256)]
    t0 = time.perf_counter()
    total = sum(c.bytes_at(ctx) for ctx in many for c in caches)
    elapsed = time.perf_counter() - t0
    assert total > 0 and elapsed < 0.02, f"{elapsed * 1000:.2f} ms for 256 contexts"  # under 1 ms measured


def test_output_buffer(llama8b: ModelProfile) -> None:
    # verified: vocab 128256 -> 4 x 128256 B = 0.49 MiB at one sequence, x4 = 1.96 MiB in the server
    assert output_buffer_bytes(llama8b, resolve_context(llama8b, fit(n_ctx=4096))) == 4 * 128256
    assert (
        output_buffer_bytes(llama8b, resolve_context(llama8b, LaunchSettings(n_ctx=4096))) == 4 * 4 * 128256
    )
    # grown to n_outputs_max = n_batch outputs (perplexity-style runs)
    grown = output_buffer_bytes(llama8b, resolve_context(llama8b, fit(n_ctx=4096)), grown=True)
    assert grown == 4 * 128256 * 2048
