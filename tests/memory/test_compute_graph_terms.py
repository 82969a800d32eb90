"""Compute-buffer terms read from llama.cpp's allocator: the DSA top-k zeros and what stays under the logits on a
later GPU whose last layer is a MoE with a shared expert."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fitplan.core.base.devices import GIB, Device, DeviceKind, Machine, Vendor, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.memory.compute import ComputeInputs, ComputePlan, compute_buffers
from fitplan.core.memory.compute.terms import IndexerPeak
from fitplan.core.memory.weights import place_weights
from fitplan.core.model.profile import ModelProfile
from support.compute import assert_curve_matches_evaluate, compute_inputs, parts
from support.models import TESTS, profile_at

FIXTURES = TESTS / "fixtures" / "llamacpp" / "models"
HOST = host_device(64 * GIB)
MIB = 1 << 20


@pytest.fixture(scope="module")
def deepseek32() -> ModelProfile:
    return profile_at(FIXTURES / "archs" / "deepseek32-moe.header.gguf")


@pytest.fixture(scope="module")
def dsv2lite() -> ModelProfile:
    return profile_at(FIXTURES / "sparse" / "deepseek-v2-lite.header.gguf")


def _inputs(**kw: object) -> ComputeInputs:
    return compute_inputs(**{"n_kv_base": 512, "n_kv_swa": 0, **kw})


_parts = parts


def test_indexer_top_k_is_read(deepseek32: ModelProfile) -> None:
    assert deepseek32.indexer_top_k == 131072  # deepseek32.attention.indexer.top_k of the smoke model


def test_dsa_top_k_zeros(deepseek32: ModelProfile) -> None:
    pl = place_weights(deepseek32, LaunchSettings(), Machine((), HOST))
    (host,) = compute_buffers(deepseek32, _inputs(), pl)
    # The allocator's peak list (-c 512 -np 1) holds leaf_23 and leaf_50, 1.00 MB each: the zero-filled
    # [1, min(512 cells, top_k 131072), 512 tokens] f32 of each of the two layers.
    assert _parts(host)["DSA top-k zeros"] == 2 * 4 * 512 * 512
    # top_k caps the rows: 300 kept cells of 512
    capped = dataclasses.replace(deepseek32, indexer_top_k=300)
    (host,) = compute_buffers(capped, _inputs(), pl)
    assert _parts(host)["DSA top-k zeros"] == 2 * 4 * 300 * 512
    # other architectures have no top-k mask even with the key
    other = dataclasses.replace(deepseek32, architecture="deepseek2")
    (host,) = compute_buffers(other, _inputs(), pl)
    assert "DSA top-k zeros" not in _parts(host)


def test_dsa_zeros_curve_matches_evaluate(deepseek32: ModelProfile) -> None:
    capped = dataclasses.replace(deepseek32, indexer_top_k=300)
    pl = place_weights(capped, LaunchSettings(), Machine((), HOST))
    plan = ComputePlan(capped, _inputs(), pl)
    assert_curve_matches_evaluate(plan, [64, 256, 299, 300, 301, 512, 4096])


def test_logits_sit_above_the_last_moe_layer_on_a_later_gpu(dsv2lite: ModelProfile) -> None:
    rpc = tuple(
        Device(f"RPC{i}", DeviceKind.GPU, 64 * GIB, 64 * GIB, Vendor.RPC, host=f"h:{i}") for i in range(2)
    )
    pl = place_weights(dsv2lite, LaunchSettings(n_gpu_layers=13), Machine(rpc, HOST))
    _, g1, _ = compute_buffers(dsv2lite, _inputs(n_kv_base=8192), pl, (Vendor.RPC, Vendor.RPC))
    # Recorded (-c 8192 -ngl 13, two RPC servers): RPC1 236.26 MiB. The allocator's trace: the FFN input and norm
    # (2 x 4 MiB), the router's probabilities and top-k (2 x 64 x 512 x 4 B) and weights (6 x 512 x 4 B), the
    # down outputs [2048, 6, 512] f32 (24 MiB), then the routed sum (4 MiB) that the residual, the output norm and
    # the logits [102400, 512] f32 (200 MiB) follow.
    below = 2 * 4 * MIB + 2 * 4 * 64 * 512 + 4 * 6 * 512 + 24 * MIB
    assert _parts(g1)["last MoE layer under the logits"] == below
    assert _parts(g1)["output norm"] == 4 * MIB
    assert g1.bytes == below + 4 * MIB + 200 * MIB
    assert round(g1.bytes / MIB, 2) == 236.26


def test_output_only_gpu_takes_the_routed_sum() -> None:
    qwen3moe = profile_at(FIXTURES / "sparse" / "qwen3-30b-a3b.header.gguf")
    rpc = tuple(
        Device(f"RPC{i}", DeviceKind.GPU, 64 * GIB, 64 * GIB, Vendor.RPC, host=f"h:{i}") for i in range(2)
    )
    # -ngl 1: only the output layer is on RPC0; the last block (a MoE, no shared expert) runs on the host
    pl = place_weights(qwen3moe, LaunchSettings(n_gpu_layers=1), Machine(rpc, HOST))
    g0, _, _ = compute_buffers(qwen3moe, _inputs(n_kv_base=8192), pl, (Vendor.RPC, Vendor.RPC))
    # The allocator's trace on RPC0: copies of the down outputs [2048, 8, 512] f32 (32 MiB), the router weights
    # [8, 512] f32 and the FFN input (4 MiB); the experts' sum (4 MiB) above them, then the logits [151936, 512]
    # f32. Recorded (-c 8192 -ngl 1, two RPC servers): 353124352 bytes.
    assert _parts(g0)["last MoE layer under the logits"] == 32 * MIB + 4 * 8 * 512 + 4 * MIB
    assert g0.bytes == 32 * MIB + 4 * 8 * 512 + 4 * MIB + 4 * MIB + 4 * 151936 * 512 == 353124352


def _host_parts(profile: ModelProfile, **kw: object) -> dict[str, int]:
    pl = place_weights(profile, LaunchSettings(), Machine((), HOST))
    (host,) = compute_buffers(profile, _inputs(**kw), pl)
    return _parts(host)


def test_talkie_skip_block_sits_in_the_ffn_hole() -> None:
    p = profile_at(FIXTURES / "archs" / "talkie-dense.header.gguf")
    # n_embd 256, n_ff 384, 512 tokens: a block is 0.5 MiB, an FFN intermediate 0.75 MiB. The allocator's peak
    # (c512, flash attention, 5525504 bytes recorded): the mask 0.5, inp_embd, the residual, the skip block
    # `embd`, the freed ffn_norm-0 (one block: the skip block holds the other) and node_2 (2.5 MiB), then gate, up
    # and the GLU output on top (2.25 MiB): none fits the one-block hole
    parts = _host_parts(p)
    assert parts["embeddings + residual activations"] == 6 * 256 * 512 * 4  # five blocks and the skip block
    assert parts["FFN intermediates"] == (3 * 384 - 256) * 512 * 4  # the skip block is one of the five
    assert sum(parts.values()) == pytest.approx(5525504, abs=0.02 * MIB)
    # -fa off: the peak is the attention's (recorded 7880704 bytes), unchanged
    assert sum(_host_parts(p, flash_attn=False).values()) == pytest.approx(7880704, abs=0.02 * MIB)


@pytest.mark.parametrize("name", ["dream-dense", "llada-dense"])
def test_cacheless_diffusion_models_have_no_two_block_ffn_hole(name: str) -> None:
    p = profile_at(FIXTURES / "archs" / f"{name}.header.gguf")
    # the peak (c512, flash attention, 5517312 bytes recorded): self_kq_mask 0.5 MiB between the two freed
    # one-block holes (0.5-1.0 and 1.51-2.01 MiB), inp_embd and two blocks, and gate, up and the GLU output
    # [384, 512] f32 on top: 0.5 + 2.5 + 2.25 MiB
    parts = _host_parts(p)
    assert parts["FFN intermediates"] == 3 * 384 * 512 * 4
    assert sum(parts.values()) == pytest.approx(5517312, abs=0.02 * MIB)


def test_dsa_indexer_peak_keeps_the_freed_query_space() -> None:
    p = profile_at(FIXTURES / "archs" / "dots3note-moe.header.gguf")
    # the allocator's peak (c512, flash attention, 41246720 bytes = 39.34 MiB recorded): qr-0 [512, 512] 1.0 MiB,
    # the free 1.375 MiB that q-0 [192, 1, 512] and q_nope_absorbed-0 [512, 1, 512] left when Qcur-0 [576, 1, 512]
    # 1.125 MiB was concatenated above them, then two indexer_q-0 [128, 64, 512] of 16 MiB that do not fit there
    attn = (512 + (192 + 512) + 576 + 2 * 128 * 64) * 512 * 4
    parts = _host_parts(p, n_kv_swa=512)
    # the rest: three masks 1.5 MiB, five blocks 1.25 MiB, the top-k zeros 1.0 MiB, the small inputs and the
    # Hadamard rotation input attn_inp_k_rot [128, 128] f32 (64 KiB, counted with the indexer's peak)
    assert parts["attention / SSM scan"] == attn + 128 * 128 * 4
    assert sum(parts.values()) == pytest.approx(41246720, abs=0.02 * MIB)
    # a query space that holds both indexer queries adds only itself (as on a published DeepSeek-V3.2 shape)
    wide = dataclasses.replace(p, layers=tuple(dataclasses.replace(lp, n_head=64) for lp in p.layers))
    attn_wide = (512 + 64 * (192 + 512) + 64 * 576) * 512 * 4
    pl = place_weights(wide, LaunchSettings(), Machine((), HOST))
    plan = ComputePlan(wide, _inputs(n_kv_swa=512), pl)
    (indexer,) = (t for t in plan.plans[-1].attention if isinstance(t, IndexerPeak))
    assert indexer.at(512, 512) == attn_wide + 128 * 128 * 4


def test_dsv4_compressed_attention_at_the_indexer_peak() -> None:
    p = profile_at(FIXTURES / "archs" / "deepseek4-moe.header.gguf")
    # c131072 with flash attention: 32768 CSA / indexer cells, 1024 HCA cells, 768 SWA cells. The allocator's peak
    # (269319072 bytes recorded): the masks dsv4_csa_kq_mask and dsv4_lid_kq_mask [32768, 512] f16 (32 MiB each),
    # dsv4_hca_kq_mask [1024, 512] f16, the zero-filled leaf [1, 32768, 512] f16 and attn_inp_k_rot [128, 128]
    # f32; at the indexer one freed 16 MiB query, lid_score_masked [32768, 512] f32 and the top-k [32768, 512] i32
    parts = _host_parts(p, n_kv_base=32768, n_kv_swa=768)
    assert parts["compressed-attention masks"] == (3 * 32768 + 1024) * 512 * 2 + 128 * 128 * 4
    assert parts["attention / SSM scan"] == 16 * MIB + 2 * 32768 * 512 * 4
    # the blocks: inp_embd, embd, one block and three [2048, 512] streams (hc_init, its copy, l_last)
    assert parts["embeddings + residual activations"] == 3 * MIB + 3 * 4 * MIB
    assert sum(parts.values()) == pytest.approx(269319072, abs=0.02 * MIB)
    # c8192: the score fits the freed query, the two 16 MiB indexer queries are the peak (56720288 bytes)
    parts = _host_parts(p, n_kv_base=2048, n_kv_swa=768)
    assert parts["attention / SSM scan"] == 2 * 16 * MIB
    assert sum(parts.values()) == pytest.approx(56720288, abs=0.02 * MIB)
    # c32768 without flash attention (239696800 bytes; 0.74 MiB less: half a block of the streams' space is not
    # taken there): f32 masks and the scores kq [768 + 8192, 512, 8] f32 under the indexer
    parts = _host_parts(p, n_kv_base=8192, n_kv_swa=768, flash_attn=False)
    assert parts["KQ scores + Q"] == (768 + 8192) * 512 * 8 * 4 + 2 * 16 * MIB
    assert sum(parts.values()) == pytest.approx(239696800, abs=0.75 * MIB)
    # the curve's vectorised form agrees
    pl = place_weights(p, LaunchSettings(), Machine((), HOST))
    for fa in (True, False):
        plan = ComputePlan(p, _inputs(n_kv_swa=768, flash_attn=fa), pl)
        assert_curve_matches_evaluate(plan, [256, 512, 2048, 8192, 8448, 32768], n_kv_swa=768)


def _recorded(grid: str, model: str, case_id: str) -> int:
    doc = json.loads((TESTS / "fixtures" / "llamacpp" / grid / f"{model}.json").read_text())
    (case,) = (c for c in doc["cases"] if c["id"] == case_id)
    return int(sum(b["compute"] for b in case["results"]["buffers"]))


def test_dsa_indexer_scores_at_long_contexts(deepseek32: ModelProfile) -> None:
    # c32768 with flash attention (4 slots, unified cache: 32768 cells): the score indexer_score-0 [32768, 512] f32 does not fit the freed 16 MiB query,
    # so it and the top-k [32768, 512] i32 go above the other query (the allocator's peak: 340.83 MiB)
    q = 128 * 64 * 512 * 4
    # qr, Qcur and the freed space of q and q_nope_absorbed; the rotation input attn_inp_k_rot [128, 128] f32
    base = (512 + 576 + (192 + 512)) * 512 * 4 + 128 * 128 * 4
    parts = _host_parts(deepseek32, n_kv_base=32768)
    assert parts["attention / SSM scan"] == base + q + 2 * 32768 * 512 * 4
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "deepseek32-moe", "c32768-np4-kvu-faon-ub512-f16"), abs=0.3 * MIB
    )
    # c8192 without flash attention: the layer's scores kq-0 [8192, 512, 1] f32 stay live under the two queries
    parts = _host_parts(deepseek32, n_kv_base=8192, flash_attn=False)
    assert parts["KQ scores + Q"] == base + 8192 * 512 * 4 + 2 * q
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "deepseek32-moe", "c8192-np1-faoff-ub512-f16"), abs=0.3 * MIB
    )
    # the curve's vectorised form agrees on both sides of the switch
    pl = place_weights(deepseek32, LaunchSettings(), Machine((), HOST))
    for fa in (True, False):
        plan = ComputePlan(deepseek32, _inputs(flash_attn=fa), pl)
        assert_curve_matches_evaluate(plan, [512, 8192, 8448, 32768])


def test_msa_block_sparse_mask_per_stream() -> None:
    p = profile_at(FIXTURES / "archs" / "minimax-m3-moe.header.gguf")
    assert p.indexer_block_size == 4  # minimax-m3.attention.indexer.block_size of the smoke model
    # c8192, one sequence: bmc [512 x 2, 8192] f32 and its transposed copy (32 MiB each) above the inputs pos_mask
    # [256, 512] f32, bias [64, 512] f32, pos_slot_i [256] and cell_blk [8192] i32, and one block (0.5 MiB)
    parts = _host_parts(p, n_kv_base=8192)
    msa = 2 * 8192 * 512 * 2 * 4 + (256 + 64) * 512 * 4 + 256 * 4 + 8192 * 4 + 256 * 512 * 4
    assert parts["KQ scores + Q"] == msa
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "minimax-m3-moe", "c8192-np1-faon-ub512-f16"), abs=0.02 * MIB
    )
    # four sequences, a stream each (2048 cells, 128 tokens per stream): the f32 copy of the whole mask
    # [2048, 512] does not fit the freed bmc of one stream and goes above
    parts = _host_parts(p, n_kv_base=2048, n_seqs=4, n_stream=4)
    msa4 = (
        2 * 2048 * 128 * 2 * 4 + 2048 * 512 * 4 + (256 + 64) * 512 * 4 + 4 * (256 + 2048) * 4 + 256 * 512 * 4
    )
    assert parts["KQ scores + Q"] == msa4
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "minimax-m3-moe", "c8192-np4-nokvu-faon-ub512-f16"), abs=0.02 * MIB
    )
    # a unified cache with four sequences, or no flash attention: dense attention (recorded 36.02 MiB at c32768
    # and 52.02 MiB at c8192), no mask per stream
    for kw, case in (
        ({"n_kv_base": 32768, "n_seqs": 4, "n_stream": 1}, "c32768-np4-kvu-faon-ub512-f16"),
        ({"n_kv_base": 8192, "flash_attn": False}, "c8192-np1-faoff-ub512-f16"),
    ):
        total = sum(_host_parts(p, **kw).values())
        assert total == pytest.approx(_recorded("newarchs", "minimax-m3-moe", case), abs=0.02 * MIB)


def test_kpool_selection_chain() -> None:
    p = profile_at(FIXTURES / "archs" / "qwen4exp-moe.header.gguf")
    assert (p.indexer_kpool, p.indexer_kpool_tail) == (4, True)  # the compress ratio of the QSA layer
    # c131072: 32768 pools of the full cache, padded to 32832; top_k 131072 / 4 keeps 32768, n_sel 131075.
    # The allocator's peak (1625.79 MiB recorded): three freed 16 MiB query tensors under the score
    # [32832, 512] f32 and the top-k [32768, 512] i32, the selected cells [4 x 32768, 512] i32 (whose space the
    # f16 zeros take) and four [131075, 512] f32 tensors of the scatter index chain
    parts = _host_parts(p, n_kv_base=131072)
    q, score, top = 16 * MIB, 32832 * 512 * 4, 32768 * 512 * 4
    assert parts["attention / SSM scan"] == 3 * q + score + top + 4 * 32768 * 512 * 4 + 4 * 131075 * 512 * 4
    inputs = 32832 * 4 * 5 + 32832 * 512 * 2 + 3 * 512 * 4 + 32768 * (4 * 4 + 8)
    assert parts["k-pool inputs"] == inputs
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "qwen4exp-moe", "c131072-np1-faon-ub512-f16"), abs=2 * MIB
    )
    # c8192: the score [2112, 512] fits a freed query, the chain above it (108.95 MiB recorded)
    parts = _host_parts(p, n_kv_base=8192)
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "qwen4exp-moe", "c8192-np1-faon-ub512-f16"), abs=1.1 * MIB
    )
    # the curve's vectorised form agrees
    pl = place_weights(p, LaunchSettings(), Machine((), HOST))
    for fa in (True, False):
        plan = ComputePlan(p, _inputs(flash_attn=fa), pl)
        assert_curve_matches_evaluate(plan, [512, 8192, 32768, 131072])


def test_kpool_gather_mask_selection() -> None:
    p = profile_at(FIXTURES / "archs" / "glm5-next-moe.header.gguf")
    assert (p.indexer_kpool, p.indexer_kpool_tail) == (4, True)  # attention.indexer.kpool, kpool_select_tail
    # c8192: 2112 pools, n_sel 4 x 2112 + 3 = 8451. The graph input gather_mask [8451, 512] f32 (leaf_10,
    # 16.51 MiB) with pool_mask [2112, 512] f16; at the peak the score and the top-k [2112, 512] (8.25 MiB), the
    # selected cells [4 x 2112, 512] i32 (node_71) and one chain tensor [8451, 512] f32 (node_73): 71.48 MiB
    parts = _host_parts(p, n_kv_base=8192)
    assert parts["attention / SSM scan"] == 2 * 2112 * 512 * 4 + 4 * 2112 * 512 * 4 + 8451 * 512 * 4
    assert parts["k-pool inputs"] >= 8451 * 512 * 4 + 2112 * 512 * 2
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "glm5-next-moe", "c8192-np1-faon-ub512-f16"), abs=0.35 * MIB
    )
    # c131072: top_k 131072 / 4 caps the selection at 32768 of 32832 pools; two chain tensors on top
    parts = _host_parts(p, n_kv_base=131072)
    chain = (4 * 32768 + 3) * 512 * 4
    assert parts["attention / SSM scan"] == (32832 + 32768 + 4 * 32768) * 512 * 4 + 2 * chain
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "glm5-next-moe", "c131072-np1-faon-ub512-f16"), abs=0.2 * MIB
    )
    # ... as the 1 MiB `q_resid` [512, 512] f32 fits the 1.004 MiB hole the graph inputs read by the indexer's cache
    # row leave (the zero seed [128, 512] f32, K's row indices [512] i64, new_pool_idxs [4, 32768] i32 and
    # new_pool_rep [32768] i64): the cast of the selection has only the top-k's freed space and the selected cells'.
    # At `-ub 2048` the 4 MiB `q_resid` does not fit the 1.77 MiB hole and lies next to that space, and the cast
    # fits it: one chain tensor on top (the allocator's trace: node_73 (copy) at 2188.51 MiB, under the 4240.52
    # peak; 5263.3 MiB counted with two before)
    parts = _host_parts(p, n_kv_base=131072, n_tok=2048)
    chain = (4 * 32768 + 3) * 2048 * 4
    assert parts["attention / SSM scan"] == (32832 + 32768 + 4 * 32768) * 2048 * 4 + chain
    assert sum(parts.values()) == pytest.approx(
        _recorded("widearchs", "glm5-next-moe", "c131072-np1-faon-ub2048"), abs=1.5 * MIB
    )
    # without flash attention the first layer (the k-pool layer) reaches 95700992 bytes above `hc_init`'s end in
    # the allocator's peak list at c8192 `-ub 512` (node_107, mask_all [8192 + 8451, 512] f32, ends at 134786400;
    # hc_init at 38036832-39085408, v_cont-0 [512, 8192] f16 right above it, in the freed indexer query's
    # space). Under it: one stream hc_init [512, 512] f32 where the plan counts two, V's copy not under it, and the
    # graph inputs the plan does not count elsewhere: the pooled key's zero seed [128, 512] f32 (leaf_19) and the
    # fill seeds [8451] and [8192 + 8451] f32 (leaf_36, leaf_37)
    parts = _host_parts(p, n_kv_base=8192, flash_attn=False)
    assert parts["MLA V copy"] == 512 * 8192 * 2
    seeds = 128 * 512 * 4 + (8451 + 8192 + 8451) * 4
    assert parts["KQ scores + Q"] == 95700992 + seeds - 512 * 512 * 4 - 512 * 8192 * 2
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "glm5-next-moe", "c8192-np1-faoff-ub512-f16"), abs=0.02 * MIB
    )
    # c2048 `-ub 2048`: 105979904 bytes above hc_init's end (48670048; node_107 ends at 154649952, the peak); V's
    # 2 MiB copy goes into the 2 MiB hole of the two freed token-row blocks under hc_init (v_cont-0 at 41330016)
    parts = _host_parts(p, n_kv_base=2048, n_tok=2048, flash_attn=False)
    seeds = 128 * 2048 * 4 + (2307 + 2048 + 2307) * 4
    assert parts["KQ scores + Q"] == 105979904 + seeds - 512 * 2048 * 4 - 512 * 2048 * 2
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "glm5-next-moe", "c2048-np1-faoff-ub2048-f16"), abs=0.04 * MIB
    )


def test_fused_qkv_after_a_gated_ffn_goes_above_the_blocks() -> None:
    jais = profile_at(FIXTURES / "archs" / "jais-dense.header.gguf")
    # layer 1's QKV [768, 512] f32 (1.5 MiB) does not fit the two-block hole layer 0's gated FFN leaves: one
    # block more under it (the allocator's peak, 5.02 MiB recorded at c512 with flash attention)
    parts = _host_parts(jais)
    assert parts["attention / SSM scan"] == (768 + 256) * 512 * 4
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "jais-dense", "c512-np1-faon-ub512-f16"), abs=0.02 * MIB
    )
    # gpt2's FFN has no gate: its QKV peak in the first layer is unchanged (4.52 MiB recorded)
    gpt2 = profile_at(FIXTURES / "archs" / "gpt2-dense.header.gguf")
    assert sum(_host_parts(gpt2).values()) == pytest.approx(
        _recorded("archs", "gpt2-dense", "c512-np1"), abs=0.02 * MIB
    )


def test_fused_gate_up_experts_and_the_freed_masks() -> None:
    p = profile_at(FIXTURES / "archs" / "cohere2moe-moe.header.gguf")
    # layer 1's experts have one fused gate-and-up output ffn_moe_gate_up [768, 2, n_tok] f32 and the GLU output
    # ffn_moe_swiglu [384, 2, n_tok]; layer 0 is the last full-attention layer, so its mask is free by then
    # c512: the 3 MiB fused output fits none of the freed space: both on top (8.03 MiB recorded)
    assert sum(_host_parts(p, n_kv_base=512, n_kv_swa=512).values()) == pytest.approx(
        _recorded("archs", "cohere2moe-moe", "c512-np1"), abs=0.02 * MIB
    )
    # c2048 with -ub 2048: it goes into the freed 8 MiB mask, the GLU output on top (32.11 MiB recorded)
    parts = _host_parts(p, n_tok=2048, n_out=2048, n_kv_base=2048, n_kv_swa=2048)
    assert parts["FFN intermediates"] == 384 * 2 * 2048 * 4
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "cohere2moe-moe", "c2048-np1-faon-ub2048-f16"), abs=0.04 * MIB
    )
    # four streams at c8192: the fused output above the freed 2.76 MiB of masks, the GLU output in them
    parts = _host_parts(p, n_kv_base=2048, n_kv_swa=768, n_seqs=4, n_stream=4)
    assert parts["FFN intermediates"] == 768 * 2 * 512 * 4
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "cohere2moe-moe", "c8192-np4-nokvu-faon-ub512-f16"), abs=0.02 * MIB
    )
    # q8_0 caches (c8192, four streams, -ub 2048): the V rotation input sits between the freed masks, so the
    # 12 MiB fused output fits neither, the 6 MiB GLU output goes into one of them (38.27 MiB recorded)
    parts = _host_parts(
        p, n_tok=2048, n_out=2048, n_kv_base=2048, n_kv_swa=2048, n_seqs=4, n_stream=4,
        cache_type_k="q8_0", cache_type_v="q8_0",
    )  # fmt: skip
    assert parts["FFN intermediates"] == 768 * 2 * 2048 * 4
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "cohere2moe-moe", "c8192-np4-nokvu-faon-ub2048-q8_0"), abs=0.05 * MIB
    )
    pl = place_weights(p, LaunchSettings(), Machine((), HOST))
    plan = ComputePlan(
        p, _inputs(n_tok=2048, n_out=2048, n_seqs=4, n_stream=4, cache_type_k="q8_0", cache_type_v="q8_0"), pl
    )
    assert_curve_matches_evaluate(plan, [512, 2048, 8192], n_kv_swa=2048)


def test_unrotated_indexer_leaves_both_queries_under_the_score() -> None:
    hy = profile_at(FIXTURES / "archs" / "hy_v4-moe.header.gguf")
    # src/models/hy-v4.cpp skips the indexer's Hadamard rotation: at c32768 the two freed 16 MiB queries are a
    # 32 MiB hole under indexer_score-0 [32768, 512] f32 and the top-k (the allocator's peak: 357.77 MiB)
    q = 16 * MIB
    base = (512 + 576 + (192 + 512)) * 512 * 4
    parts = _host_parts(hy, n_kv_base=32768)
    assert parts["attention / SSM scan"] == base + 2 * q + 2 * 32768 * 512 * 4
    assert sum(parts.values()) == pytest.approx(
        _recorded("newarchs", "hy_v4-moe", "c32768-np4-kvu-faon-ub512-f16"), abs=0.02 * MIB
    )
