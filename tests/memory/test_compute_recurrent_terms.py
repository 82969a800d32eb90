"""Compute-buffer terms of graphs beyond plain attention, each read from the graph allocator's list of live tensors
at the peak (a `ggml-base` built with GGML_ALLOCATOR_DEBUG): gated delta nets, lightning attention, Kimi's and
MiniCPM3's compressed attention, indexer queries and hyper-connection streams."""

from __future__ import annotations

import pytest

from fitplan.core.base.devices import GIB, Machine, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.memory.compute import ComputeInputs, ComputePlan, compute_buffers
from fitplan.core.memory.compute.allocator import Affine
from fitplan.core.memory.compute.recurrent import gdn_transient
from fitplan.core.memory.compute.shapes import hc_width, indexer_q_rows
from fitplan.core.memory.compute.terms import AttentionScores
from fitplan.core.memory.weights import place_weights
from fitplan.core.model.profile import ModelProfile
from support.compute import assert_curve_matches_evaluate, compute_inputs
from support.models import MODELS, TESTS, profile_at

FIXTURES = TESTS / "fixtures" / "llamacpp" / "models"
HOST = host_device(64 * GIB)
MIB = 1 << 20


def _model(rel: str) -> ModelProfile:
    return profile_at(MODELS / rel)


def _inputs(**kw: object) -> ComputeInputs:
    return compute_inputs(**{"n_kv_base": 512, "n_kv_swa": 512, **kw})


def _host(profile: ModelProfile, **kw: object) -> dict[str, int]:
    pl = place_weights(profile, LaunchSettings(), Machine((), HOST))
    (host,) = compute_buffers(profile, _inputs(**kw), pl)
    return {p.label: p.bytes for p in host.parts}


def test_gated_delta_net_on_qwen3_next() -> None:
    p = _model("sparse/qwen3-next-80b-a3b.header.gguf")
    # The allocator's peak on the first RPC device with -cmoe (-ub 512): conv_output_raw 16 MiB ([4096 + 2 x 16 x
    # 128, 512] f32), the repeated Q and K 8 MiB each ([128, 32, 512]), a and b 64 KiB each ([32, 512]) and the
    # fused op's output 10 MiB (8 MiB + the 2 MiB new state). The state read from the cache, 2 MiB ([128, 128,
    # 32]), lies in a freed 4 MiB block under them (the allocator's trace at c4096: every layer's at 4.00 or
    # 16.02 MiB): it adds nothing while it fits one.
    assert gdn_transient(p, 512, 1) == 16 * MIB + 2 * 8 * MIB + 2 * 64 * 1024 + 10 * MIB
    # a second sequence adds a new state; the two states read still fit the block
    assert gdn_transient(p, 512, 2) - gdn_transient(p, 512, 1) == 2 * MIB
    # four do not: they go on top
    assert gdn_transient(p, 512, 4) - gdn_transient(p, 512, 1) == 3 * 2 * MIB + 4 * 2 * MIB


def test_gated_delta_net_on_the_qwen35_smoke_model() -> None:
    p = _model("archs/qwen35-dense.header.gguf")
    # peak list: conv_output_raw 1.5 MiB ([256 + 2 x 2 x 128, 512]), the L2-normed Q and K 0.5 MiB each (two heads
    # of 128, no repeat), the op's output 0.625 MiB, beta and the gate 4 KiB each; the state read, 128 KiB
    # ([128, 128, 2]), in the freed block of the mixed batch's token rows (`node_26` at 0.50 MiB)
    assert gdn_transient(p, 512, 1) == 3 * MIB // 2 + MIB + 5 * MIB // 8 + 2 * 4096
    parts = _host(p)
    assert parts["attention / SSM scan"] == gdn_transient(p, 512, 1)
    # recorded 6.15 MiB (-c 512 -np 1): masks 0.5 + five blocks 2.5 + 3.14 MiB (3.26 and 0.13 MiB over before
    # the state read was put in its block)
    assert sum(parts.values()) == pytest.approx(6.15 * MIB, rel=0.002)


def test_other_recurrent_graphs_have_no_delta_net() -> None:
    assert gdn_transient(_model("archs/minimax-01-moe.header.gguf"), 512, 1) == 0


def test_lightning_attention() -> None:
    p = _model("archs/minimax-01-moe.header.gguf")
    # peak list: QKVcur 1.5 MiB ([3 x 2 x 128, 512]), qkv_none_diag 0.5 MiB, qk and the diag_decay_exp input
    # 2 MiB each ([512, 512, 2 heads])
    assert _host(p)["attention / SSM scan"] == 6 * MIB
    # two sequences: [256, 256, 2, 2] scores and decays, 1 MiB each
    pl = place_weights(p, LaunchSettings(), Machine((), HOST))
    plan = ComputePlan(p, _inputs(n_seqs=2), pl)
    (scores,) = (t for t in plan.plans[-1].attention if isinstance(t, AttentionScores))
    assert Affine(c=(4 * 256 * 512 + 2 * 256 * 256 * 2 * 2) * 4) in scores.kq


def test_kimi_mla_concat_peak() -> None:
    p = _model("archs/kimi-linear-moe.header.gguf")
    # peak list (c512, flash attention, 6.39 MiB recorded): q [192, 1, 512] 0.375 MiB and q_nope_absorbed [512, 1,
    # 512] 1.0 MiB freed after the concatenation into Qcur [576, 1, 512] 1.125 MiB above them; kv_cmpr_pe [576, 512]
    # 1.125 MiB goes into their 1.375 MiB, leaving 0.25 MiB; the normed latent [512, 512] 1.0 MiB and Kcur 1.125 MiB
    # do not fit there and go on top: 1.375 + 1.125 + 1.0 + 1.125 MiB
    assert _host(p)["attention / SSM scan"] == (192 + 512 + 576 + 512 + 576) * 512 * 4
    # recorded 6699040 bytes = 6.389 MiB: masks 0.5 + residual blocks 1.25 + that term 4.625, and the small inputs
    assert sum(_host(p).values()) == pytest.approx(6699040, abs=0.02 * MIB)


def test_kimi_k3_concat_peak_with_q_compression() -> None:
    p = _model("archs/kimi-k3-moe.header.gguf")
    # kimi-k3 compresses Q (q_lora 512): q_nope_absorbed [512, 1, 512] takes the freed q_a [512, 512] (node_6,
    # 1.76-2.76 MiB), q [192, 1, 512] sits above it (node_9), Qcur above both; then as on kimi-linear (6.39 MiB)
    assert _host(p)["attention / SSM scan"] == (512 + 192 + 576 + 512 + 576) * 512 * 4
    assert sum(_host(p).values()) == pytest.approx(6699040, abs=0.02 * MIB)


def test_kimi_concat_peak_without_flash_attention_has_no_v_copy() -> None:
    p = _model("archs/kimi-linear-moe.header.gguf")
    # -fa off: the same tensors over an f32 mask (1.0 MiB); the contiguous copy of V (512 cells of the f16 latent,
    # 0.5 MiB) comes later and is not live at this peak. Recorded: 7223328 bytes = 6.889 MiB = 1.0 + 1.25 + 4.625
    parts = _host(p, flash_attn=False)
    assert parts["MLA V copy"] == 512 * 512 * 2
    assert sum(parts.values()) == pytest.approx(7223328, abs=0.02 * MIB)


def test_minicpm3_compressed_kv() -> None:
    p = _model("archs/minicpm3-dense.header.gguf")
    # peak list: q_states 0.5 MiB ([2 x 128, 512]), kv_pe_compresseed 1.25 MiB ([640, 512]), the normed latent
    # 1.0 MiB ([512, 512]); recorded total 5.77 MiB
    parts = _host(p)
    assert parts["attention / SSM scan"] == (256 + 640 + 512) * 512 * 4
    assert sum(parts.values()) == pytest.approx(5.77 * MIB, rel=0.01)


@pytest.mark.parametrize(
    ("rel", "recorded_mib"),
    [
        ("archs/openelm-dense.header.gguf", 5.27),
        ("archs/plamo3-dense.header.gguf", 5.78),
        ("archs/hrm_text-dense.header.gguf", 5.77),
    ],
)
def test_ffn_on_top_without_a_two_block_hole(rel: str, recorded_mib: float) -> None:
    # gate, up and the GLU output (0.75 MiB each, or a fused 1.5 MiB gate+up and the GLU output) above the blocks;
    # hrm_text also keeps the high-cycle state zH live (one more block)
    parts = _host(_model(rel))
    assert parts["FFN intermediates"] == 3 * 384 * 512 * 4
    assert sum(parts.values()) == pytest.approx(recorded_mib * MIB, rel=0.01)


def test_indexer_queries_and_hyper_connection_streams() -> None:
    q4 = _model("archs/qwen4exp-moe.header.gguf")
    # indexer.q_proj [256, 8192] on layer 1; hc_attn_down rows 1024 = 4 streams x 256
    assert indexer_q_rows(q4) == {1: 8192}
    assert hc_width(q4) == 1024
    parts = _host(q4)
    # the projection and its norm, 16 MiB each (node_250, norm-1 in the peak list)
    assert parts["attention / SSM scan"] == 2 * 8192 * 512 * 4
    # five blocks and two [1024, 512] streams (l_last-0, the grouped norm): 2.5 + 4 MiB
    assert parts["embeddings + residual activations"] == 5 * 256 * 512 * 4 + 2 * 1024 * 512 * 4
    glm = _model("archs/glm5-next-moe.header.gguf")
    # glm5-next scores the projection itself: one 16 MiB query (node_52) and its score over the 192 pools
    # [192, 512] f32 (indexer_score-0, 0.375 MiB, in the peak list at c512)
    assert _host(glm)["attention / SSM scan"] == 8192 * 512 * 4 + 192 * 512 * 4
    # models without hyper-connections have no stream width
    assert hc_width(_model("archs/qwen35-dense.header.gguf")) == 0


def test_new_terms_keep_the_curve_equal_to_evaluate() -> None:
    for rel in (
        "archs/qwen4exp-moe.header.gguf",
        "archs/minimax-01-moe.header.gguf",
        "sparse/qwen3-next-80b-a3b.header.gguf",
        # the replayed graphs: the absorbed MLA query (the scores fit the space under Qcur at short contexts),
        # the Mamba blocks after the last attention layer (the freed mask grows with the cells)
        "sparse/deepseek-v3.header.gguf",
        "archs/granitehybrid-dense.header.gguf",
        "archs/jamba-dense.header.gguf",
    ):
        p = _model(rel)
        pl = place_weights(p, LaunchSettings(), Machine((), HOST))
        for fa in (False, True):
            plan = ComputePlan(p, _inputs(flash_attn=fa), pl)
            assert_curve_matches_evaluate(plan, [256, 512, 4096, 65536])


def test_mamba2_block_after_the_last_attention_layer_reuses_the_freed_mask() -> None:
    """granitehybrid smoke model (layer 0 attention, layer 1 Mamba-2), c4096 with flash attention: the allocator's
    peak in layer 1 has the input projection zxBCdt (1538 x 512 f32, 3 MiB) inside the freed 4 MiB f16 mask, then
    the conv input (515 x 1024, 2.01 MiB) and the conv output (1024 x 512, 2 MiB) above the blocks: 10.53 MiB
    recorded, where counting the scan on top of the mask gave 13.54 MiB."""
    p = _model("archs/granitehybrid-dense.header.gguf")
    parts = _host(p, n_kv_base=4096, n_kv_swa=0)
    assert parts["attention / SSM scan"] == 4 * (515 * 1024 + 1024 * 512)
    # at 512 cells the 0.5 MiB mask takes nothing: the whole block stays above (the recorded 10.04 MiB)
    assert _host(p, n_kv_base=512, n_kv_swa=0)["attention / SSM scan"] == 4 * (
        1538 * 512 + 1024 * 512 + 515 * 1024
    )


def test_jamba_mamba1_block_after_the_attention_layer_in_graph_order() -> None:
    """jamba smoke model (layer 0 attention, layer 1 Mamba-1: d_inner 512, d_state 128, dt_rank 2, d_conv 4), 512
    tokens, read from the allocator's lists. The scan reads the ubatch's states from the cache (no gathered copy of
    them), so with flash attention at c4096 xz, the conv input and output fit the freed 4 MiB mask, x_db the conv
    input's space, and only dt (512 x 512) and the scan output (y and one state, 512 x 512 + 128 x 512) go on top
    (8.77 MiB recorded, where a gathered state copy gave 7.77). Without flash attention at c512 the layer's input
    norm takes the freed inputs' bottom and xz the 2.01 MiB left, so the conv input (515 x 512), the conv output,
    dt and the scan output go on top (8.77 MiB). With q4_0 caches and four slots without a unified cache (c512:
    128 cells a stream) V's rotation splits the freed inputs and the conv rows take the mask's block: xz, the conv
    input (131 x 512 x 4), the conv output and the scan output (four states) on top, where dt fits the conv
    input's space (8.87 MiB recorded; a gathered 1 MiB state copy gave 9.87)."""
    p = _model("archs/jamba-dense.header.gguf")
    scan = "attention / SSM scan"
    assert _host(p, n_kv_base=4096)[scan] == 4 * (512 * 512 + 512 * 512 + 128 * 512)
    # without flash attention the part is the larger of the KQ scores (2 MiB here) and the replayed block
    assert _host(p, n_kv_base=512, flash_attn=False)["KQ scores + Q"] == 4 * (
        515 * 512 + 512 * 512 + 512 * 512 + 512 * 512 + 128 * 512
    )
    q4 = _host(p, n_kv_base=128, n_seqs=4, n_stream=4, cache_type_k="q4_0", cache_type_v="q4_0")
    assert q4[scan] == 4 * (1024 * 512 + 131 * 512 * 4 + 512 * 512 + 512 * 512 + 128 * 512 * 4)
