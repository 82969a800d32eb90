"""build_profile on hand-made headers: each per-architecture rule of llama.cpp 515e85511's load_hparams."""

from __future__ import annotations

import time
from collections.abc import Iterable

import pytest
from gguf.constants import GGMLQuantizationType as T
from gguf.constants import GGUFValueType

from fitplan.core.gguf.header import GGUFArray, GGUFHeader, ModelFiles
from fitplan.core.model.builder import build_profile, tensor_role
from fitplan.core.model.profile import LayerKind, SwaType, TensorRole
from support.headers import arr, dense, llama_tensors, make_header, ssm_meta


def kinds(profile_layers: Iterable) -> list[str]:
    return [ly.kind.value for ly in profile_layers]


# -- generic keys -------------------------------------------------------------------------------------------------


def test_llama_like_profile() -> None:
    h = make_header(
        "llama",
        dense(4, **{"vocab_size": 1000, "rope.freq_base": 500000.0, "rope.dimension_count": 64}),
        llama_tensors(4),
        general={"general.name": "Tiny", "general.file_type": 15},
    )
    p = build_profile(h)
    assert (p.architecture, p.name, p.file_type) == ("llama", "Tiny", "Q4_K_M")
    assert (p.n_layer, p.n_layer_all, p.n_nextn, p.n_embd, p.n_vocab, p.n_ctx_train) == (
        4,
        4,
        0,
        512,
        1000,
        8192,
    )
    assert kinds(p.layers) == ["full"] * 4
    ly = p.layers[2]
    # head size defaults to n_embd / n_head = 512 / 8 = 64
    assert (ly.n_head, ly.n_head_kv, ly.n_embd_head_k, ly.n_embd_head_v, ly.n_ff) == (8, 2, 64, 64, 1024)
    assert ly.has_kv and not ly.is_swa and not ly.is_recurrent
    assert p.rope.freq_base == 500000.0 and p.rope.dimension_count == 64
    assert not p.tied_embeddings and p.verified_architecture and p.has_memory
    assert p.n_params == sum(t.n_elements for t in p.tensors)
    assert p.file_size == h.file_size
    # quant mix: bytes per type, largest first, and it accounts for every tensor byte
    assert sum(b for _, b in p.quant_mix) == p.weight_bytes
    assert [b for _, b in p.quant_mix] == sorted((b for _, b in p.quant_mix), reverse=True)
    assert p.quant_mix[0][0] == "Q4_K"


def test_file_type_guessed_from_dominant_tensor_type_without_general_file_type() -> None:
    p = build_profile(make_header("llama", dense(2), llama_tensors(2)))
    assert p.file_type == "Q4_K"


def test_tied_embeddings_when_output_weight_is_missing() -> None:
    p = build_profile(make_header("llama", dense(2), llama_tensors(2, output=False)))
    assert p.tied_embeddings


def test_vocab_from_tokenizer_list_when_vocab_size_is_absent() -> None:
    h = make_header("llama", dense(1), llama_tensors(1))
    md = dict(h.metadata)
    md["tokenizer.ggml.tokens"] = GGUFArray(element_type=GGUFValueType.STRING, length=32000, values=None)
    h2 = GGUFHeader(h.source, 3, "<", md, h.tensors, 32, h.data_offset, h.file_size, h.header_bytes_read)
    assert build_profile(h2).n_vocab == 32000


def test_per_layer_arrays() -> None:
    meta = dense(3)
    meta["attention.head_count"] = arr([8, 16, 4])
    meta["attention.head_count_kv"] = arr([2, 0, 4])
    meta["feed_forward_length"] = arr([100, 200, 300])
    meta["attention.key_length"] = 128
    meta["attention.value_length"] = 96
    p = build_profile(make_header("deci", meta))
    assert [ly.n_head for ly in p.layers] == [8, 16, 4]
    assert [ly.n_head_kv for ly in p.layers] == [2, 0, 4]
    assert [ly.n_ff for ly in p.layers] == [100, 200, 300]
    assert [(ly.n_embd_head_k, ly.n_embd_head_v) for ly in p.layers] == [(128, 96)] * 3
    # deci: a layer without KV heads still passes the cache filter (0-byte K) but has no attention memory
    assert kinds(p.layers) == ["full", "none", "full"]
    assert all(ly.has_kv for ly in p.layers)


def test_head_count_kv_defaults_to_head_count() -> None:
    meta = dense(2)
    del meta["attention.head_count_kv"]
    p = build_profile(make_header("qwen2", meta))
    assert [ly.n_head_kv for ly in p.layers] == [8, 8]


# -- SWA rules ----------------------------------------------------------------------------------------------------


def test_gemma3_pattern_six_with_window() -> None:
    p = build_profile(make_header("gemma3", dense(12, **{"attention.sliding_window": 1024})))
    assert p.swa_type is SwaType.STANDARD and p.n_swa == 1024
    # set_swa_pattern(6): SWA iff il % 6 < 5, so layers 5 and 11 are full
    assert [ly.index for ly in p.layers if not ly.is_swa] == [5, 11]
    assert kinds(p.layers)[4:6] == ["swa", "full"]


def test_gemma3_without_window_has_no_swa() -> None:
    p = build_profile(make_header("gemma3", dense(6)))
    assert p.swa_type is SwaType.NONE and not any(ly.is_swa for ly in p.layers)


def test_gemma2_default_window_and_pattern_two() -> None:
    p = build_profile(make_header("gemma2", dense(4)))
    assert (p.swa_type, p.n_swa) == (SwaType.STANDARD, 4096)  # models/gemma2.cpp default
    assert [ly.is_swa for ly in p.layers] == [True, False, True, False]


def test_llama4_window_is_forced_to_8192_and_chunked() -> None:
    p = build_profile(make_header("llama4", dense(8, **{"attention.sliding_window": 4096})))
    assert (p.swa_type, p.n_swa) == (SwaType.CHUNKED, 8192)
    assert [ly.index for ly in p.layers if not ly.is_swa] == [3, 7]


def test_llama4_window_zero_disables_swa() -> None:
    p = build_profile(make_header("llama4", dense(8, **{"attention.sliding_window": 0})))
    assert p.swa_type is SwaType.NONE


def test_phi3_ignores_the_sliding_window() -> None:
    p = build_profile(make_header("phi3", dense(4, **{"attention.sliding_window": 2047})))
    assert p.swa_type is SwaType.NONE and not any(ly.is_swa for ly in p.layers)


@pytest.mark.parametrize(("n_layer", "expect_swa"), [(64, True), (30, False)])
def test_exaone4_uses_swa_only_for_64_layers(n_layer: int, expect_swa: bool) -> None:
    p = build_profile(make_header("exaone4", dense(n_layer)))
    assert (p.swa_type is SwaType.STANDARD) is expect_swa
    if expect_swa:
        assert p.n_swa == 4096


def test_cohere2moe_dense_first_pattern() -> None:
    p = build_profile(make_header("cohere2moe", dense(8, **{"attention.sliding_window": 4096})))
    # dense_first: SWA iff il % 4 != 0
    assert [ly.index for ly in p.layers if not ly.is_swa] == [0, 4]


def test_scalar_pattern_key_overrides_arch_default() -> None:
    p = build_profile(
        make_header(
            "gemma3", dense(6, **{"attention.sliding_window": 512, "attention.sliding_window_pattern": 3})
        )
    )
    assert [ly.index for ly in p.layers if not ly.is_swa] == [2, 5]


def test_smallthinker_forces_window_4096() -> None:
    p = build_profile(make_header("smallthinker", dense(4, **{"attention.sliding_window": 100})))
    assert p.n_swa == 4096


def test_gemma4_array_pattern_shared_kv_layers_and_swa_head_sizes() -> None:
    meta = dense(
        6,
        **{
            "attention.sliding_window": 512,
            "attention.sliding_window_pattern": arr(
                [True, True, False, True, True, False], GGUFValueType.BOOL
            ),
            "attention.shared_kv_layers": 2,
            "attention.key_length": 512,
            "attention.value_length": 512,
            "attention.key_length_swa": 256,
            "attention.value_length_swa": 256,
        },
    )
    p = build_profile(make_header("gemma4", meta))
    assert [ly.is_swa for ly in p.layers] == [True, True, False, True, True, False]
    assert [(ly.n_embd_head_k, ly.n_embd_head_v) for ly in p.layers[:3]] == [
        (256, 256),
        (256, 256),
        (512, 512),
    ]
    # n_layer_kv_from_start = 6 - 2 = 4: layers 4 (SWA) and 5 (full) reuse layers 4-2 = 2 and 4-1 = 3
    assert kinds(p.layers) == ["swa", "swa", "full", "swa", "shared", "shared"]
    assert [ly.kv_source for ly in p.layers[4:]] == [2, 3]
    assert [ly.has_kv for ly in p.layers] == [True, True, True, True, False, False]


def test_gemma3n_first_twenty_layers_own_kv() -> None:
    p = build_profile(make_header("gemma3n", dense(30, **{"attention.sliding_window": 512})))
    assert sum(ly.has_kv for ly in p.layers) == 20
    assert p.layers[25].kind is LayerKind.SHARED


# -- recurrent and hybrid ------------------------------------------------------------------------------------------


def test_qwen3next_full_attention_interval() -> None:
    p = build_profile(make_header("qwen3next", ssm_meta(8)))
    # default interval 4: attention iff (il + 1) % 4 == 0
    assert kinds(p.layers) == ["recurrent", "recurrent", "recurrent", "full"] * 2
    rec = p.layers[0]
    # n_embd_r = (4-1) * (4096 + 2*16*128) = 24576; n_embd_s = 128 * 4096 = 524288 (llama-hparams.cpp)
    assert (rec.n_embd_r, rec.n_embd_s) == (24576, 524288)
    assert p.layers[3].n_embd_r == 0 and p.is_recurrent_or_hybrid


def test_recurrent_layers_array_overrides_interval() -> None:
    p = build_profile(
        make_header(
            "qwen35", ssm_meta(4, **{"attention.recurrent_layers": arr([1, 0, 1, 0], GGUFValueType.BOOL)})
        )
    )
    assert kinds(p.layers) == ["recurrent", "full", "recurrent", "full"]


def test_jamba_recurrent_where_head_count_kv_is_zero_and_mamba1_ignores_group_count() -> None:
    p = build_profile(make_header("jamba", ssm_meta(4, **{"attention.head_count_kv": arr([0, 0, 8, 0])})))
    assert kinds(p.layers) == ["recurrent", "recurrent", "full", "recurrent"]
    # jamba does not read ssm.group_count: n_embd_r = (4-1) * 4096
    assert p.layers[0].n_embd_r == 3 * 4096


def test_nemotron_h_mlp_layers_have_no_memory() -> None:
    meta = ssm_meta(
        3, **{"attention.head_count_kv": arr([0, 8, 0]), "feed_forward_length": arr([0, 0, 1024])}
    )
    p = build_profile(make_header("nemotron_h", meta))
    assert kinds(p.layers) == ["recurrent", "full", "none"]


def test_falcon_h1_layers_are_hybrid() -> None:
    p = build_profile(make_header("falcon-h1", ssm_meta(2)))
    assert kinds(p.layers) == ["hybrid", "hybrid"]
    assert all(ly.has_kv and ly.is_recurrent for ly in p.layers)


def test_mamba_is_pure_recurrent() -> None:
    p = build_profile(make_header("mamba", ssm_meta(2)))
    assert kinds(p.layers) == ["recurrent", "recurrent"] and not any(ly.has_kv for ly in p.layers)


def test_rwkv7_state_sizes() -> None:
    meta = {**dense(2), "wkv.head_size": 64}
    p = build_profile(make_header("rwkv7", meta))
    # token_shift_count default 2: n_embd_r = 2 * 512; n_embd_s = 512 * 64
    assert (p.layers[0].n_embd_r, p.layers[0].n_embd_s) == (1024, 32768)


def test_lfm2_shortconv_and_swa_on_attention_layers() -> None:
    meta = {
        **dense(4, **{"attention.head_count_kv": arr([0, 8, 0, 8]), "attention.sliding_window": 512}),
        "shortconv.l_cache": 3,
    }
    p = build_profile(make_header("lfm2", meta))
    assert kinds(p.layers) == ["recurrent", "swa", "recurrent", "swa"]
    assert (p.layers[0].n_embd_r, p.layers[0].n_embd_s) == (512 * 2, 0)


# -- MLA, NextN, experts ---------------------------------------------------------------------------------------------


def mla_meta(with_mla_keys: bool) -> dict:
    meta = dense(
        3,
        n_head=16,
        n_head_kv=1 if with_mla_keys else 16,
        head=128,
        **{"attention.kv_lora_rank": 512, "rope.dimension_count": 64},
    )
    if with_mla_keys:
        meta.update({"attention.key_length": 576, "attention.value_length": 512})
        meta.update({"attention.key_length_mla": 192, "attention.value_length_mla": 128})
    else:
        meta.update({"attention.key_length": 192, "attention.value_length": 128})
    return meta


def test_deepseek2_mla_detection() -> None:
    p = build_profile(make_header("deepseek2", mla_meta(True)))
    assert p.is_mla and p.mla is not None
    assert (p.mla.kv_lora_rank, p.mla.key_length_mla, p.mla.value_length_mla) == (512, 192, 128)
    assert kinds(p.layers) == ["mla"] * 3
    assert p.layers[0].n_embd_k_gqa == 576


def test_legacy_deepseek2_without_mla_keys_is_plain_attention() -> None:
    p = build_profile(make_header("deepseek2", mla_meta(False)))
    assert not p.is_mla and kinds(p.layers) == ["full"] * 3


def test_mla_keys_are_ignored_by_archs_that_do_not_read_them() -> None:
    p = build_profile(make_header("llama", mla_meta(True)))
    assert not p.is_mla


def test_nextn_layers_are_excluded_from_the_trunk() -> None:
    p = build_profile(make_header("glm4moe", dense(4, **{"nextn_predict_layers": 1})))
    assert (p.n_layer, p.n_layer_all, p.n_nextn) == (3, 4, 1)
    assert kinds(p.layers) == ["full", "full", "full", "nextn"]
    assert not p.layers[3].has_kv and p.layers[3].is_nextn


def test_graniteswitch_router_layer_keeps_its_kv() -> None:
    p = build_profile(make_header("graniteswitch", dense(3)))
    # models/granite-switch.cpp: n_layer_all = 3 + 1, n_layer_nextn = 1, the router layer has 1 head and 1 KV head
    assert (p.n_layer, p.n_layer_all) == (3, 4)
    router = p.layers[3]
    assert (router.n_head, router.n_head_kv, router.n_ff, router.kind, router.has_kv) == (
        1,
        1,
        0,
        LayerKind.FULL,
        True,
    )
    assert not router.is_nextn


def test_nanbeige_loops_repeat_the_layers() -> None:
    meta = dense(2, **{"num_loops": 3, "attention.head_count_kv": arr([2, 4])})
    p = build_profile(make_header("nanbeige", meta))
    assert p.n_layer == 6
    assert [ly.n_head_kv for ly in p.layers] == [2, 4] * 3


def test_experts_and_per_layer_expert_used_count() -> None:
    meta = dense(
        2,
        **{
            "expert_count": 8,
            "expert_used_count": arr([2, 4]),
            "expert_feed_forward_length": 256,
            "expert_shared_count": 1,
            "leading_dense_block_count": 1,
        },
    )
    tensors = [
        ("blk.0.ffn_up.weight", T.F16, (512, 1024)),
        ("blk.1.ffn_up_exps.weight", T.Q4_K, (512, 256, 8)),
        ("blk.1.ffn_gate_inp.weight", T.F32, (512, 8)),
        ("blk.1.ffn_up_shexp.weight", T.Q8_0, (512, 256)),
    ]
    p = build_profile(make_header("qwen3moe", meta, tensors))
    assert p.is_moe and p.moe is not None
    assert (p.moe.n_expert, p.moe.n_expert_used, p.moe.n_ff_exp, p.moe.n_layer_dense_lead) == (8, 4, 256, 1)
    assert [ly.n_expert_used for ly in p.layers] == [2, 4]
    assert [ly.is_moe for ly in p.layers] == [False, True]
    roles = {t.name: t.role for t in p.tensors}
    assert roles["blk.1.ffn_up_exps.weight"] is TensorRole.EXPERTS
    assert roles["blk.1.ffn_up_shexp.weight"] is TensorRole.FFN
    assert roles["blk.1.ffn_gate_inp.weight"] is TensorRole.FFN


@pytest.mark.parametrize(
    ("name", "layer", "role"),
    [
        ("token_embd.weight", None, TensorRole.TOKEN_EMBD),
        ("per_layer_token_embd.weight", None, TensorRole.POS_EMBD),
        ("position_embd.weight", None, TensorRole.POS_EMBD),
        ("output.weight", None, TensorRole.OUTPUT),
        ("output_norm.weight", None, TensorRole.OUTPUT),
        ("cls.output.weight", None, TensorRole.OUTPUT),
        ("token_embd_norm.weight", None, TensorRole.NORM),
        ("rope_freqs.weight", None, TensorRole.OTHER),
        ("blk.7.attn_q.weight", 7, TensorRole.ATTENTION),
        ("blk.7.attn_kv_a_mqa.weight", 7, TensorRole.ATTENTION),
        ("blk.7.attn_norm.weight", 7, TensorRole.NORM),
        ("blk.7.ffn_down_exps.weight", 7, TensorRole.EXPERTS),
        ("blk.7.ffn_gate_up_exps.weight", 7, TensorRole.EXPERTS),
        ("blk.7.ffn_down.weight", 7, TensorRole.FFN),
        ("blk.7.ssm_conv1d.weight", 7, TensorRole.SSM),
        ("blk.7.time_mix_key.weight", 7, TensorRole.SSM),
        ("blk.7.channel_mix_key.weight", 7, TensorRole.FFN),
        ("blk.12.nextn.eh_proj.weight", 12, TensorRole.OTHER),
    ],
)
def test_tensor_roles(name: str, layer: int | None, role: TensorRole) -> None:
    assert tensor_role(name) == (layer, role)


# -- unknown archs, mmproj, shards, speed ----------------------------------------------------------------------------


def test_unknown_architecture_uses_generic_keys_and_warns() -> None:
    p = build_profile(make_header("futurenet", dense(3), llama_tensors(3)))
    assert not p.verified_architecture
    assert any("futurenet" in w for w in p.warnings)
    assert p.n_layer == 3 and kinds(p.layers) == ["full"] * 3


def test_mmproj_profile() -> None:
    h = make_header(
        "clip",
        {},
        [("v.patch_embd.weight", T.F16, (14, 14, 3, 1024)), ("mm.0.weight", T.F16, (1024, 4096))],
        general={"general.file_type": 1},
    )
    p = build_profile(h)
    assert p.is_mmproj and p.layers == () and not p.has_memory
    assert p.file_type == "F16"
    assert p.weight_bytes == 2 * (14 * 14 * 3 * 1024 + 1024 * 4096)


def test_split_model_tensors_keep_their_shard_and_absolute_offset() -> None:
    ts = llama_tensors(2)
    a = make_header("llama", dense(2), ts[:9], source="m-00001-of-00002.gguf", data_offset=8192)
    b = make_header("llama", dense(2), ts[9:], source="m-00002-of-00002.gguf", data_offset=1024)
    p = build_profile(ModelFiles(shards=(a, b)))
    assert p.shard_paths == ("m-00001-of-00002.gguf", "m-00002-of-00002.gguf")
    assert len(p.tensors) == len(ts)
    second = p.tensors[9]
    assert second.shard == 1 and second.offset == 1024 + b.tensors[0].offset
    assert p.tensors[0].offset == 8192
    assert p.file_size == (a.file_size or 0) + (b.file_size or 0)


def test_building_a_thousand_tensor_profile_is_fast() -> None:
    h = make_header("llama", dense(125), llama_tensors(125))
    assert len(h.tensors) >= 1000
    build_profile(h)  # warm imports
    t0 = time.perf_counter()
    for _ in range(5):
        build_profile(h)
    per_call = (time.perf_counter() - t0) / 5
    assert per_call < 0.05, f"{per_call * 1000:.1f} ms per profile"
