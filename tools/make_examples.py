#!/usr/bin/env python3
"""Write the header-only example GGUFs shipped in `resources/examples/`.

Each file carries the metadata and tensor infos (names, ggml shapes, types) of a published model as llama.cpp's
converter writes them (`src/models/*.cpp` create_tensor shapes, `gguf.constants` names), but no tensor data and no
tokenizer arrays. That keeps each file under 200 KB while every size fitplan derives from the header stays real.

Header-only convention: such a file sets the metadata key `fitplan.header_only = true` (a bool). The file then ends
right after the header padding (at the declared data offset); readers must not report it as an incomplete download.
`{arch}.vocab_size` is stored because the tokenizer arrays are omitted (token_embd's shape also gives n_vocab).

Quantization mixes follow llama.cpp's Q4_K_M recipe (`src/llama-quant.cpp`): Q4_K everywhere, Q6_K for the output
and for attn_v / ffn_down on the "more bits" layers (the first and last eighth, and every third layer between), with
K-quant fallbacks (Q4_K -> Q5_0, Q6_K -> Q8_0) for rows that are not a multiple of 256; norms, biases and routers F32.

The convention and the list of examples are described in docs/examples.md.

    python tools/make_examples.py [OUT_DIR]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "resources" / "examples"
HEADER_ONLY_KEY = "fitplan.header_only"

Q = GGMLQuantizationType
QK_K = 256


@dataclass
class Spec:
    """One example file: metadata in insertion order and tensors as (name, ggml shape ne0 first, type)."""

    filename: str
    arch: str
    metadata: list[tuple[str, object, GGUFValueType]] = field(default_factory=list)
    tensors: list[tuple[str, tuple[int, ...], GGMLQuantizationType]] = field(default_factory=list)

    def kv(self, key: str, value: object, vtype: GGUFValueType) -> None:
        self.metadata.append((key, value, vtype))

    def t(self, name: str, shape: tuple[int, ...], qtype: GGMLQuantizationType) -> None:
        self.tensors.append((name, shape, qtype))


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp's rule for which layers get the bigger type in *_M mixes."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def fallback(qtype: GGMLQuantizationType, ne0: int) -> GGMLQuantizationType:
    """K-quants need rows of whole 256-element super-blocks; llama-quant falls back as below otherwise."""
    if ne0 % QK_K == 0 or qtype not in (Q.Q4_K, Q.Q6_K):
        return qtype
    return Q.Q5_0 if qtype is Q.Q4_K else Q.Q8_0


def qmat(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> GGMLQuantizationType:
    return fallback(qtype, shape[0])


def n_bytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, type_size = GGML_QUANT_SIZES[qtype]
    n = 1
    for d in shape:
        n *= d
    assert shape[0] % block == 0, (shape, qtype)
    return n // block * type_size


def general(spec: Spec, name: str, basename: str, size_label: str, file_type: int, ctx: int) -> None:
    spec.kv("general.architecture", spec.arch, GGUFValueType.STRING)
    spec.kv("general.type", "model", GGUFValueType.STRING)
    spec.kv("general.name", name, GGUFValueType.STRING)
    spec.kv("general.basename", basename, GGUFValueType.STRING)
    spec.kv("general.size_label", size_label, GGUFValueType.STRING)
    spec.kv("general.file_type", file_type, GGUFValueType.UINT32)
    spec.kv("general.quantization_version", 2, GGUFValueType.UINT32)
    spec.kv(f"{spec.arch}.context_length", ctx, GGUFValueType.UINT32)


def llama_3_1_8b() -> Spec:
    """meta-llama/Llama-3.1-8B-Instruct (config.json): 32 layers, 4096 wide, GQA 32/8, FFN 14336, vocab 128256."""
    s = Spec("Llama-3.1-8B-Instruct-Q4_K_M.gguf", "llama")
    n_layer, n_embd, n_ff, n_head, n_head_kv, n_vocab, head = 32, 4096, 14336, 32, 8, 128256, 128
    general(s, "Llama 3.1 8B Instruct", "Llama-3.1", "8B", LlamaFileType.MOSTLY_Q4_K_M, 131072)
    a = s.arch
    s.kv(f"{a}.embedding_length", n_embd, GGUFValueType.UINT32)
    s.kv(f"{a}.block_count", n_layer, GGUFValueType.UINT32)
    s.kv(f"{a}.feed_forward_length", n_ff, GGUFValueType.UINT32)
    s.kv(f"{a}.rope.dimension_count", head, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.head_count", n_head, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.head_count_kv", n_head_kv, GGUFValueType.UINT32)
    s.kv(f"{a}.rope.freq_base", 500000.0, GGUFValueType.FLOAT32)
    s.kv(f"{a}.attention.layer_norm_rms_epsilon", 1e-5, GGUFValueType.FLOAT32)
    s.kv(f"{a}.vocab_size", n_vocab, GGUFValueType.UINT32)
    s.t("token_embd.weight", (n_embd, n_vocab), Q.Q4_K)
    s.t("rope_freqs.weight", (head // 2,), Q.F32)
    for i in range(n_layer):
        more = use_more_bits(i, n_layer)
        s.t(f"blk.{i}.attn_norm.weight", (n_embd,), Q.F32)
        s.t(f"blk.{i}.attn_q.weight", (n_embd, n_head * head), Q.Q4_K)
        s.t(f"blk.{i}.attn_k.weight", (n_embd, n_head_kv * head), Q.Q4_K)
        s.t(f"blk.{i}.attn_v.weight", (n_embd, n_head_kv * head), Q.Q6_K if more else Q.Q4_K)
        s.t(f"blk.{i}.attn_output.weight", (n_head * head, n_embd), Q.Q4_K)
        s.t(f"blk.{i}.ffn_norm.weight", (n_embd,), Q.F32)
        s.t(f"blk.{i}.ffn_gate.weight", (n_embd, n_ff), Q.Q4_K)
        s.t(f"blk.{i}.ffn_up.weight", (n_embd, n_ff), Q.Q4_K)
        s.t(f"blk.{i}.ffn_down.weight", (n_ff, n_embd), qmat((n_ff, n_embd), Q.Q6_K if more else Q.Q4_K))
    s.t("output_norm.weight", (n_embd,), Q.F32)
    s.t("output.weight", (n_embd, n_vocab), Q.Q6_K)
    return s


def qwen3_30b_a3b() -> Spec:
    """Qwen/Qwen3-30B-A3B (config.json): 48 layers, 2048 wide, 32/4 heads of 128, 128 experts (8 used) of 768."""
    s = Spec("Qwen3-30B-A3B-Q4_K_M.gguf", "qwen3moe")
    n_layer, n_embd, n_head, n_head_kv, head, n_vocab = 48, 2048, 32, 4, 128, 151936
    n_expert, n_used, n_ff_exp = 128, 8, 768
    general(s, "Qwen3 30B A3B", "Qwen3", "30B-A3B", LlamaFileType.MOSTLY_Q4_K_M, 40960)
    a = s.arch
    s.kv(f"{a}.block_count", n_layer, GGUFValueType.UINT32)
    s.kv(f"{a}.embedding_length", n_embd, GGUFValueType.UINT32)
    s.kv(f"{a}.feed_forward_length", 6144, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.head_count", n_head, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.head_count_kv", n_head_kv, GGUFValueType.UINT32)
    s.kv(f"{a}.rope.freq_base", 1000000.0, GGUFValueType.FLOAT32)
    s.kv(f"{a}.attention.layer_norm_rms_epsilon", 1e-6, GGUFValueType.FLOAT32)
    s.kv(f"{a}.expert_used_count", n_used, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.key_length", head, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.value_length", head, GGUFValueType.UINT32)
    s.kv(f"{a}.expert_count", n_expert, GGUFValueType.UINT32)
    s.kv(f"{a}.expert_feed_forward_length", n_ff_exp, GGUFValueType.UINT32)
    s.kv(f"{a}.vocab_size", n_vocab, GGUFValueType.UINT32)
    s.t("token_embd.weight", (n_embd, n_vocab), Q.Q4_K)
    for i in range(n_layer):
        more = use_more_bits(i, n_layer)
        s.t(f"blk.{i}.attn_norm.weight", (n_embd,), Q.F32)
        s.t(f"blk.{i}.attn_q.weight", (n_embd, n_head * head), Q.Q4_K)
        s.t(f"blk.{i}.attn_k.weight", (n_embd, n_head_kv * head), Q.Q4_K)
        s.t(f"blk.{i}.attn_v.weight", (n_embd, n_head_kv * head), Q.Q6_K if more else Q.Q4_K)
        s.t(f"blk.{i}.attn_output.weight", (n_head * head, n_embd), Q.Q4_K)
        s.t(f"blk.{i}.attn_q_norm.weight", (head,), Q.F32)
        s.t(f"blk.{i}.attn_k_norm.weight", (head,), Q.F32)
        s.t(f"blk.{i}.ffn_norm.weight", (n_embd,), Q.F32)
        s.t(f"blk.{i}.ffn_gate_inp.weight", (n_embd, n_expert), Q.F32)
        s.t(f"blk.{i}.ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), Q.Q4_K)
        s.t(f"blk.{i}.ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), Q.Q4_K)
        down = (n_ff_exp, n_embd, n_expert)
        s.t(f"blk.{i}.ffn_down_exps.weight", down, qmat(down, Q.Q6_K if more else Q.Q4_K))
    s.t("output_norm.weight", (n_embd,), Q.F32)
    s.t("output.weight", (n_embd, n_vocab), Q.Q6_K)
    return s


def gemma_3_12b() -> Spec:
    """google/gemma-3-12b-it (config.json): 48 layers, 3840 wide, 16/8 heads of 256, FFN 15360, window 1024,
    5 local : 1 global layers, tied embeddings (no output.weight), vocab 262208."""
    s = Spec("gemma-3-12b-it-Q4_K_M.gguf", "gemma3")
    n_layer, n_embd, n_head, n_head_kv, head, n_ff, n_vocab = 48, 3840, 16, 8, 256, 15360, 262208
    general(s, "Gemma 3 12b It", "gemma-3", "12B", LlamaFileType.MOSTLY_Q4_K_M, 131072)
    a = s.arch
    s.kv(f"{a}.embedding_length", n_embd, GGUFValueType.UINT32)
    s.kv(f"{a}.block_count", n_layer, GGUFValueType.UINT32)
    s.kv(f"{a}.feed_forward_length", n_ff, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.head_count", n_head, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.head_count_kv", n_head_kv, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.key_length", head, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.value_length", head, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.layer_norm_rms_epsilon", 1e-6, GGUFValueType.FLOAT32)
    s.kv(f"{a}.rope.freq_base", 1000000.0, GGUFValueType.FLOAT32)
    s.kv(f"{a}.rope.scaling.type", "linear", GGUFValueType.STRING)
    s.kv(f"{a}.rope.scaling.factor", 8.0, GGUFValueType.FLOAT32)
    s.kv(f"{a}.attention.sliding_window", 1024, GGUFValueType.UINT32)
    s.kv(f"{a}.vocab_size", n_vocab, GGUFValueType.UINT32)
    s.t("token_embd.weight", (n_embd, n_vocab), Q.Q6_K)
    for i in range(n_layer):
        more = use_more_bits(i, n_layer)
        s.t(f"blk.{i}.attn_norm.weight", (n_embd,), Q.F32)
        s.t(f"blk.{i}.attn_q.weight", (n_embd, n_head * head), Q.Q4_K)
        s.t(f"blk.{i}.attn_k.weight", (n_embd, n_head_kv * head), Q.Q4_K)
        s.t(f"blk.{i}.attn_v.weight", (n_embd, n_head_kv * head), Q.Q6_K if more else Q.Q4_K)
        s.t(f"blk.{i}.attn_q_norm.weight", (head,), Q.F32)
        s.t(f"blk.{i}.attn_k_norm.weight", (head,), Q.F32)
        s.t(f"blk.{i}.attn_output.weight", (n_head * head, n_embd), Q.Q4_K)
        s.t(f"blk.{i}.post_attention_norm.weight", (n_embd,), Q.F32)
        s.t(f"blk.{i}.ffn_norm.weight", (n_embd,), Q.F32)
        s.t(f"blk.{i}.ffn_gate.weight", (n_embd, n_ff), Q.Q4_K)
        s.t(f"blk.{i}.ffn_up.weight", (n_embd, n_ff), Q.Q4_K)
        s.t(f"blk.{i}.ffn_down.weight", (n_ff, n_embd), qmat((n_ff, n_embd), Q.Q6_K if more else Q.Q4_K))
        s.t(f"blk.{i}.post_ffw_norm.weight", (n_embd,), Q.F32)
    s.t("output_norm.weight", (n_embd,), Q.F32)
    return s


def gemma_3_12b_mmproj() -> Spec:
    """The Gemma 3 vision tower (SigLIP so400m, 27 layers, 1152 wide, FFN 4304, 896 px images, 14 px patches)
    with the gemma3 projector into the 3840-wide text model (`tools/mtmd/clip.cpp`, PROJECTOR_TYPE_GEMMA3)."""
    s = Spec("mmproj-gemma-3-12b-it-F16.gguf", "clip")
    n_layer, n_embd, n_ff, n_head, image, patch, text = 27, 1152, 4304, 16, 896, 14, 3840
    s.kv("general.architecture", "clip", GGUFValueType.STRING)
    s.kv("general.type", "mmproj", GGUFValueType.STRING)
    s.kv("general.name", "Gemma 3 12b It", GGUFValueType.STRING)
    s.kv("general.file_type", LlamaFileType.MOSTLY_F16, GGUFValueType.UINT32)
    s.kv("clip.has_vision_encoder", True, GGUFValueType.BOOL)
    s.kv("clip.projector_type", "gemma3", GGUFValueType.STRING)
    s.kv("clip.use_gelu", True, GGUFValueType.BOOL)
    s.kv("clip.vision.image_size", image, GGUFValueType.UINT32)
    s.kv("clip.vision.patch_size", patch, GGUFValueType.UINT32)
    s.kv("clip.vision.embedding_length", n_embd, GGUFValueType.UINT32)
    s.kv("clip.vision.feed_forward_length", n_ff, GGUFValueType.UINT32)
    s.kv("clip.vision.projection_dim", text, GGUFValueType.UINT32)
    s.kv("clip.vision.block_count", n_layer, GGUFValueType.UINT32)
    s.kv("clip.vision.attention.head_count", n_head, GGUFValueType.UINT32)
    s.kv("clip.vision.attention.layer_norm_epsilon", 1e-6, GGUFValueType.FLOAT32)
    s.kv("clip.vision.image_mean", [0.5, 0.5, 0.5], GGUFValueType.ARRAY)
    s.kv("clip.vision.image_std", [0.5, 0.5, 0.5], GGUFValueType.ARRAY)
    n_pos = (image // patch) ** 2
    s.t("mm.input_projection.weight", (text, n_embd), Q.F16)
    s.t("mm.soft_emb_norm.weight", (n_embd,), Q.F32)
    s.t("v.patch_embd.weight", (patch, patch, 3, n_embd), Q.F16)
    s.t("v.patch_embd.bias", (n_embd,), Q.F32)
    s.t("v.position_embd.weight", (n_embd, n_pos), Q.F16)
    for i in range(n_layer):
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            s.t(f"v.blk.{i}.{proj}.weight", (n_embd, n_embd), Q.F16)
            s.t(f"v.blk.{i}.{proj}.bias", (n_embd,), Q.F32)
        for norm in ("ln1", "ln2"):
            s.t(f"v.blk.{i}.{norm}.weight", (n_embd,), Q.F32)
            s.t(f"v.blk.{i}.{norm}.bias", (n_embd,), Q.F32)
        s.t(f"v.blk.{i}.ffn_up.weight", (n_embd, n_ff), Q.F16)
        s.t(f"v.blk.{i}.ffn_up.bias", (n_ff,), Q.F32)
        s.t(f"v.blk.{i}.ffn_down.weight", (n_ff, n_embd), Q.F16)
        s.t(f"v.blk.{i}.ffn_down.bias", (n_embd,), Q.F32)
    s.t("v.post_ln.weight", (n_embd,), Q.F32)
    s.t("v.post_ln.bias", (n_embd,), Q.F32)
    return s


def deepseek_v2_lite() -> Spec:
    """deepseek-ai/DeepSeek-V2-Lite-Chat (config.json): 27 layers, 2048 wide, 16 heads, MLA with kv_lora_rank 512
    and a 64-wide rope part (qk_nope 128, v 128), no q LoRA; 64 routed experts (6 used) of 1408 plus 2 shared, the
    first layer dense (FFN 10944). Written as current converters do: K/V heads 1, key 576, value 512, split k_b/v_b."""
    s = Spec("DeepSeek-V2-Lite-Chat-Q4_K_M.gguf", "deepseek2")
    n_layer, n_embd, n_head, n_vocab, n_ff = 27, 2048, 16, 102400, 10944
    kv_lora, rope, nope, v_head = 512, 64, 128, 128
    n_expert, n_used, n_shared, n_ff_exp = 64, 6, 2, 1408
    general(s, "DeepSeek V2 Lite Chat", "DeepSeek-V2-Lite", "16B", LlamaFileType.MOSTLY_Q4_K_M, 163840)
    a = s.arch
    s.kv(f"{a}.block_count", n_layer, GGUFValueType.UINT32)
    s.kv(f"{a}.embedding_length", n_embd, GGUFValueType.UINT32)
    s.kv(f"{a}.feed_forward_length", n_ff, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.head_count", n_head, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.head_count_kv", 1, GGUFValueType.UINT32)
    s.kv(f"{a}.rope.freq_base", 10000.0, GGUFValueType.FLOAT32)
    s.kv(f"{a}.attention.layer_norm_rms_epsilon", 1e-6, GGUFValueType.FLOAT32)
    s.kv(f"{a}.expert_used_count", n_used, GGUFValueType.UINT32)
    s.kv(f"{a}.leading_dense_block_count", 1, GGUFValueType.UINT32)
    s.kv(f"{a}.vocab_size", n_vocab, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.kv_lora_rank", kv_lora, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.key_length", kv_lora + rope, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.value_length", kv_lora, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.key_length_mla", nope + rope, GGUFValueType.UINT32)
    s.kv(f"{a}.attention.value_length_mla", v_head, GGUFValueType.UINT32)
    s.kv(f"{a}.expert_feed_forward_length", n_ff_exp, GGUFValueType.UINT32)
    s.kv(f"{a}.expert_count", n_expert, GGUFValueType.UINT32)
    s.kv(f"{a}.expert_shared_count", n_shared, GGUFValueType.UINT32)
    s.kv(f"{a}.expert_weights_scale", 1.0, GGUFValueType.FLOAT32)
    s.kv(f"{a}.rope.dimension_count", rope, GGUFValueType.UINT32)
    s.kv(f"{a}.rope.scaling.type", "yarn", GGUFValueType.STRING)
    s.kv(f"{a}.rope.scaling.factor", 40.0, GGUFValueType.FLOAT32)
    s.kv(f"{a}.rope.scaling.original_context_length", 4096, GGUFValueType.UINT32)
    s.kv(f"{a}.rope.scaling.yarn_log_multiplier", 0.0707, GGUFValueType.FLOAT32)
    s.t("token_embd.weight", (n_embd, n_vocab), Q.Q4_K)
    for i in range(n_layer):
        more = use_more_bits(i, n_layer)
        s.t(f"blk.{i}.attn_norm.weight", (n_embd,), Q.F32)
        s.t(f"blk.{i}.attn_q.weight", (n_embd, n_head * (nope + rope)), Q.Q4_K)
        s.t(f"blk.{i}.attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), Q.Q4_K)
        s.t(f"blk.{i}.attn_kv_a_norm.weight", (kv_lora,), Q.F32)
        s.t(f"blk.{i}.attn_k_b.weight", (nope, kv_lora, n_head), qmat((nope,), Q.Q4_K))
        s.t(f"blk.{i}.attn_v_b.weight", (kv_lora, v_head, n_head), Q.Q6_K if more else Q.Q4_K)
        s.t(f"blk.{i}.attn_output.weight", (n_head * v_head, n_embd), Q.Q4_K)
        s.t(f"blk.{i}.ffn_norm.weight", (n_embd,), Q.F32)
        down_type = Q.Q6_K if more else Q.Q4_K
        if i == 0:
            s.t(f"blk.{i}.ffn_gate.weight", (n_embd, n_ff), Q.Q4_K)
            s.t(f"blk.{i}.ffn_up.weight", (n_embd, n_ff), Q.Q4_K)
            s.t(f"blk.{i}.ffn_down.weight", (n_ff, n_embd), qmat((n_ff,), down_type))
            continue
        n_ff_sh = n_ff_exp * n_shared
        s.t(f"blk.{i}.ffn_gate_inp.weight", (n_embd, n_expert), Q.F32)
        s.t(f"blk.{i}.ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), Q.Q4_K)
        s.t(f"blk.{i}.ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), Q.Q4_K)
        s.t(f"blk.{i}.ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), qmat((n_ff_exp,), down_type))
        s.t(f"blk.{i}.ffn_gate_shexp.weight", (n_embd, n_ff_sh), Q.Q4_K)
        s.t(f"blk.{i}.ffn_up_shexp.weight", (n_embd, n_ff_sh), Q.Q4_K)
        s.t(f"blk.{i}.ffn_down_shexp.weight", (n_ff_sh, n_embd), qmat((n_ff_sh,), down_type))
    s.t("output_norm.weight", (n_embd,), Q.F32)
    s.t("output.weight", (n_embd, n_vocab), Q.Q6_K)
    return s


EXAMPLES: tuple[Callable[[], Spec], ...] = (llama_3_1_8b, qwen3_30b_a3b, gemma_3_12b, gemma_3_12b_mmproj, deepseek_v2_lite)


def write_header_only(spec: Spec, path: Path) -> int:
    """Write metadata + tensor infos + padding to the data offset; returns the bytes the tensor data would take."""
    writer = GGUFWriter(path, spec.arch, use_temp_file=False)
    # GGUFWriter writes general.architecture itself; skip ours to keep the key single.
    for key, value, vtype in spec.metadata:
        if key == "general.architecture":
            continue
        if vtype is GGUFValueType.ARRAY:
            writer.add_array(key, value)  # type: ignore[arg-type]
        else:
            writer.add_key_value(key, value, vtype)
    writer.add_bool(HEADER_ONLY_KEY, True)
    data = 0
    for name, shape, qtype in spec.tensors:
        nb = n_bytes(shape, qtype)
        data += nb
        # GGUFWriter takes the numpy order (outermost first) and reverses it into ggml's ne order.
        writer.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), nb, raw_dtype=qtype)
    writer.write_header_to_file(path)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    assert writer.fout is not None
    fout = writer.fout[0]
    writer.write_padding(fout, fout.tell())
    writer.close()
    return data


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    for make in EXAMPLES:
        spec = make()
        path = out / spec.filename
        data = write_header_only(spec, path)
        size = path.stat().st_size
        print(f"{path.name}: {size / 1024:.1f} KiB header, {data / (1 << 30):.2f} GiB of tensor data declared")
        if size >= 200 * 1024:
            print(f"error: {path.name} is over 200 KB", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
