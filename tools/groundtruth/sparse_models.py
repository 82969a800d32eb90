"""Write realistic-size *sparse* GGUF files from published model configurations.

Each file has the real header (metadata keys as llama.cpp's converter writes them) and tensor infos with the
real published shapes and a typical quantization mix. The tensor data is left as a hole (the file is extended with
``truncate``), so a 16 GB model costs a few hundred KB of disk, and llama.cpp can load it for a dry run
(``no_alloc``) or even mmap it (the data reads as zeros).

The vocabulary is declared with ``tokenizer.ggml.model = "none"`` plus ``{arch}.vocab_size`` (llama.cpp then
creates that many dummy tokens, ``src/llama-vocab.cpp``), so the header stays small and the header-only copy is
an exact prefix of the sparse file. ``--vocab spm`` writes real-length SentencePiece-style token arrays instead
(needed by llama-server, which tokenizes at startup).

Deterministic: the same name and options always give the same bytes. ``tools/make_examples.py`` takes the
configurations of the models it shares with this table, and writes its headers with ``write_header``: a change
here must leave both the fixtures and ``resources/examples/`` byte-identical.

Usage:
    python tools/groundtruth/sparse_models.py OUT_DIR [--only NAME ...] [--vocab none|spm] [--header-only]
    python tools/groundtruth/sparse_models.py --list
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, GGUFWriter

Q = GGMLQuantizationType

# --------------------------------------------------------------------------------------------------------------
# Published configurations (one table). Keys follow the Hugging Face config.json names of each model.
# --------------------------------------------------------------------------------------------------------------

CONFIGS: dict[str, dict[str, object]] = {
    "llama-3.1-8b": {
        "source": "meta-llama/Llama-3.1-8B-Instruct config.json",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "rope_scaling": "llama3 (factor 8, low_freq_factor 1, high_freq_factor 4, original 8192): rope_freqs tensor",
    },
    "qwen3-8b": {
        "source": "Qwen/Qwen3-8B config.json",
        "hidden_size": 4096,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 12288,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    },
    "qwen3-30b-a3b": {
        "source": "Qwen/Qwen3-30B-A3B config.json",
        "hidden_size": 2048,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    },
    "gemma-3-27b": {
        "source": "google/gemma-3-27b-it config.json (text_config)",
        "hidden_size": 5376,
        "num_hidden_layers": 62,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "intermediate_size": 21504,
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rms_norm_eps": 1e-6,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "rope_scaling_factor": 8.0,
        "tie_word_embeddings": True,
    },
    "gpt-oss-20b": {
        "source": "openai/gpt-oss-20b config.json",
        "hidden_size": 2880,
        "num_hidden_layers": 24,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "rope_theta": 150000.0,
        "rms_norm_eps": 1e-5,
        "sliding_window": 128,
        "layer_types": "sliding_attention / full_attention alternating (even = sliding)",
        "rope_scaling": "yarn factor 32, original_max_position_embeddings 4096",
        "tie_word_embeddings": False,
    },
    "gpt-oss-120b": {
        "source": "openai/gpt-oss-120b config.json",
        "hidden_size": 2880,
        "num_hidden_layers": 36,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "rope_theta": 150000.0,
        "rms_norm_eps": 1e-5,
        "sliding_window": 128,
        "layer_types": "sliding_attention / full_attention alternating (even = sliding)",
        "rope_scaling": "yarn factor 32, original_max_position_embeddings 4096",
        "tie_word_embeddings": False,
    },
    "deepseek-v2-lite": {
        "source": "deepseek-ai/DeepSeek-V2-Lite-Chat config.json",
        "hidden_size": 2048,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "vocab_size": 102400,
        "max_position_embeddings": 163840,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "routed_scaling_factor": 1.0,
        "norm_topk_prob": False,
        "scoring_func": "softmax",
        "rope_scaling": "yarn factor 40, original_max_position_embeddings 4096, mscale_all_dim 0.707",
        "tie_word_embeddings": False,
    },
    "deepseek-v3": {
        "source": "deepseek-ai/DeepSeek-V3 config.json",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "n_group": 8,
        "topk_group": 4,
        "first_k_dense_replace": 3,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc (e_score_correction_bias: exp_probs_b)",
        "rope_scaling": "yarn factor 40, original_max_position_embeddings 4096, mscale_all_dim 1.0",
        "num_nextn_predict_layers": "1 (the converter skips the MTP layer)",
        "tie_word_embeddings": False,
    },
    "qwen3-next-80b-a3b": {
        "source": "Qwen/Qwen3-Next-80B-A3B-Instruct config.json",
        "hidden_size": 2048,
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "intermediate_size": 5120,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "vocab_size": 151936,
        "max_position_embeddings": 262144,
        "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-6,
        "full_attention_interval": 4,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "tie_word_embeddings": False,
    },
    "granite-4.0-h-tiny": {
        "source": "ibm-granite/granite-4.0-h-tiny config.json",
        "hidden_size": 1536,
        "num_hidden_layers": 40,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "intermediate_size": 512,
        "shared_intermediate_size": 1024,
        "num_local_experts": 64,
        "num_experts_per_tok": 6,
        "vocab_size": 100352,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "position_embedding_type": "nope",
        "mamba_d_conv": 4,
        "mamba_d_state": 128,
        "mamba_n_heads": 48,
        "mamba_d_head": 64,
        "mamba_n_groups": 1,
        "mamba_expand": 2,
        "layer_types": "attention at layers 5, 15, 25, 35; mamba2 elsewhere",
        "attention_layers": [5, 15, 25, 35],
        "tie_word_embeddings": True,
    },
    "llama-4-scout-17b-16e": {
        "source": "meta-llama/Llama-4-Scout-17B-16E-Instruct config.json (text_config)",
        "hidden_size": 5120,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "vocab_size": 202048,
        "max_position_embeddings": 10485760,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
        "attention_chunk_size": 8192,
        "layer_types": "chunked attention, every 4th layer global (no RoPE)",
        "tie_word_embeddings": False,
    },
    "qwen2.5-vl-7b": {
        "source": "Qwen/Qwen2.5-VL-7B-Instruct config.json (text part)",
        "hidden_size": 3584,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "max_position_embeddings": 128000,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "mrope_section": [16, 24, 24],
        "tie_word_embeddings": False,
    },
    "lfm2-1.2b": {
        "source": "LiquidAI/LFM2-1.2B config.json",
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "block_ff_dim": 12288,
        "block_auto_adjust_ff_dim": True,
        "block_ffn_dim_multiplier": 1.0,
        "block_multiple_of": 256,
        "conv_L_cache": 3,
        "conv_bias": False,
        "full_attn_idxs": [2, 5, 8, 10, 12, 14],
        "vocab_size": 65536,
        "max_position_embeddings": 128000,
        "norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "tie_embedding": True,
    },
}

# vision projectors (mmproj files, as llama.cpp's converter writes them: F16 matrices, F32 norms and biases)
MMPROJ_CONFIGS: dict[str, dict[str, object]] = {
    "mmproj-gemma-3-27b": {
        "source": "google/gemma-3-27b-it config.json (vision_config: SigLIP so400m) + mm_tokens_per_image 256",
        "projector_type": "gemma3",
        "text_model": "gemma-3-27b",
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "patch_size": 14,
        "image_size": 896,
        "layer_norm_eps": 1e-6,
        "text_hidden_size": 5376,
    },
    "mmproj-llava-llama-3-8b": {
        "source": "xtuner/llava-llama-3-8b-v1_1 (CLIP ViT-L/14-336 vision tower, 2-layer MLP projector)",
        "projector_type": "mlp",
        "text_model": "llama-3.1-8b",
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 23,
        "num_attention_heads": 16,
        "patch_size": 14,
        "image_size": 336,
        "layer_norm_eps": 1e-5,
        "text_hidden_size": 4096,
        "note": "24 layers in the tower; the converter keeps 23 (features from the second-to-last layer)",
    },
    "mmproj-qwen2.5-vl-7b": {
        "source": "Qwen/Qwen2.5-VL-7B-Instruct config.json (vision_config)",
        "projector_type": "qwen2.5vl_merger",
        "text_model": "qwen2.5-vl-7b",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_hidden_layers": 32,
        "num_attention_heads": 16,
        "patch_size": 14,
        "image_size": 560,
        "layer_norm_eps": 1e-6,
        "spatial_merge_size": 2,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "window_size": 112,
        "text_hidden_size": 3584,
    },
    "mmproj-qwen2-vl-7b": {
        "source": "Qwen/Qwen2-VL-7B-Instruct config.json (vision_config: embed_dim 1280, depth 32, mlp_ratio 4)",
        "projector_type": "qwen2vl_merger",
        "text_model": "qwen2.5-vl-7b",
        "hidden_size": 1280,
        "intermediate_size": 5120,
        "num_hidden_layers": 32,
        "num_attention_heads": 16,
        "patch_size": 14,
        "image_size": 560,
        "layer_norm_eps": 1e-6,
        "spatial_merge_size": 2,
        "text_hidden_size": 3584,
        "note": "text_model: Qwen2-VL-7B's language model has Qwen2.5-VL-7B's shapes (the projector is what differs)",
    },
    "mmproj-qwen3-vl-8b": {
        "source": "Qwen/Qwen3-VL-8B-Instruct config.json (vision_config)",
        "projector_type": "qwen3vl_merger",
        "text_model": "qwen3-8b",
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "patch_size": 16,
        "image_size": 768,
        "layer_norm_eps": 1e-6,
        "spatial_merge_size": 2,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [8, 16, 24],
        "text_hidden_size": 4096,
    },
    "mmproj-mistral-small-3.1-24b": {
        "source": "mistralai/Mistral-Small-3.1-24B-Instruct-2503 config.json (vision_config: Pixtral tower; "
        "spatial_merge_size 2, multimodal_projector_bias false, text hidden_size 5120)",
        "projector_type": "pixtral",
        "text_model": "llama-3.1-8b",
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "patch_size": 14,
        "image_size": 1540,
        "layer_norm_eps": 1e-5,
        "spatial_merge_size": 2,
        "text_hidden_size": 5120,
        "note": "text_model: any text model serves the projector's recordings (mmproj_image.cpp loads it alone)",
    },
}

# typical "Q4_K_M"-like mix: the matrix types by role (norms, biases and small vectors are always F32)
QUANT_MIX: dict[str, GGMLQuantizationType] = {
    "token_embd": Q.Q4_K,
    "output": Q.Q6_K,
    "attn_q": Q.Q4_K,
    "attn_k": Q.Q4_K,
    "attn_v": Q.Q6_K,
    "attn_output": Q.Q4_K,
    "ffn_gate": Q.Q4_K,
    "ffn_up": Q.Q4_K,
    "ffn_down": Q.Q6_K,
    "exps": Q.Q4_K,
    "exps_down": Q.Q6_K,
    "other": Q.Q4_K,
}
FTYPE_Q4_K_M = 15


def fit_type(qtype: GGMLQuantizationType, ne0: int) -> GGMLQuantizationType:
    """Fall back (as llama-quantize does) when a row does not split into whole blocks."""
    blk = GGML_QUANT_SIZES[qtype][0]
    if ne0 % blk == 0:
        return qtype
    if ne0 % 32 == 0:
        return Q.Q8_0
    return Q.F16


def tensor_nbytes(qtype: GGMLQuantizationType, ne: tuple[int, ...]) -> int:
    blk, size = GGML_QUANT_SIZES[qtype]
    n = 1
    for d in ne[1:]:
        n *= d
    assert ne[0] % blk == 0, (qtype, ne)
    return n * (ne[0] // blk) * size


@dataclass
class ModelSpec:
    name: str
    arch: str
    kv: list[tuple[str, object, GGUFValueType, GGUFValueType | None]] = field(default_factory=list)
    tensors: list[tuple[str, tuple[int, ...], GGMLQuantizationType]] = field(default_factory=list)

    def u32(self, key: str, v: int) -> None:
        self.kv.append((key, int(v), GGUFValueType.UINT32, None))

    def f32(self, key: str, v: float) -> None:
        self.kv.append((key, float(v), GGUFValueType.FLOAT32, None))

    def s(self, key: str, v: str) -> None:
        self.kv.append((key, v, GGUFValueType.STRING, None))

    def b(self, key: str, v: bool) -> None:
        self.kv.append((key, bool(v), GGUFValueType.BOOL, None))

    def arr_u32(self, key: str, v: list[int]) -> None:
        self.kv.append((key, [int(x) for x in v], GGUFValueType.ARRAY, GGUFValueType.UINT32))

    def a(self, key: str, v: int | float | bool | str) -> None:
        """Architecture key: ``{arch}.key``."""
        full = f"{self.arch}.{key}"
        if isinstance(v, bool):
            self.b(full, v)
        elif isinstance(v, int):
            self.u32(full, v)
        elif isinstance(v, float):
            self.f32(full, v)
        else:
            self.s(full, v)

    def t(self, name: str, ne: tuple[int, ...], role: str | None = None) -> None:
        """Add a tensor; ``role`` picks the quant type from QUANT_MIX, None means F32."""
        qtype = Q.F32 if role is None else fit_type(QUANT_MIX[role], ne[0])
        self.tensors.append((name, ne, qtype))

    def tq(self, name: str, ne: tuple[int, ...], qtype: GGMLQuantizationType) -> None:
        self.tensors.append((name, ne, fit_type(qtype, ne[0])))


def _begin(name: str, arch: str, ftype: int = FTYPE_Q4_K_M) -> tuple[dict[str, object], ModelSpec]:
    """The configuration of model ``name`` and its spec with the keys every model starts with."""
    cfg = CONFIGS[name]
    spec = ModelSpec(name, arch)
    spec.s("general.name", spec.name)
    spec.u32("general.file_type", ftype)
    spec.u32("general.quantization_version", 2)
    spec.a("vocab_size", cfg_int(cfg, "vocab_size"))
    spec.a("context_length", cfg_int(cfg, "max_position_embeddings"))
    spec.a("embedding_length", cfg_int(cfg, "hidden_size"))
    spec.a("block_count", cfg_int(cfg, "num_hidden_layers"))
    return cfg, spec


def _attn_keys(spec: ModelSpec, cfg: dict[str, object]) -> None:
    """feed_forward_length, the head counts, the RoPE base and the norm epsilon, in the converter's order."""
    spec.a("feed_forward_length", cfg_int(cfg, "intermediate_size"))
    spec.a("attention.head_count", cfg_int(cfg, "num_attention_heads"))
    spec.a("attention.head_count_kv", cfg_int(cfg, "num_key_value_heads"))
    spec.a("rope.freq_base", cfg_float(cfg, "rope_theta"))
    spec.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "rms_norm_eps"))


def _expert_keys(spec: ModelSpec, cfg: dict[str, object], n_expert: int) -> None:
    spec.a("expert_count", n_expert)
    spec.a("expert_used_count", cfg_int(cfg, "num_experts_per_tok"))


def _ssm_keys(spec: ModelSpec, d_conv: int, d_state: int, n_group: int, dt_rank: int, d_inner: int) -> None:
    spec.a("ssm.conv_kernel", d_conv)
    spec.a("ssm.state_size", d_state)
    spec.a("ssm.group_count", n_group)
    spec.a("ssm.time_step_rank", dt_rank)
    spec.a("ssm.inner_size", d_inner)


def attn_dims(cfg: dict[str, object]) -> tuple[int, int, int, int, int]:
    """n_embd, n_layer, n_head, n_head_kv and the head size (hidden_size / heads where no head_dim is given)."""
    n_embd, n_head = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "num_attention_heads")
    hd = cfg_int(cfg, "head_dim") if "head_dim" in cfg else n_embd // n_head
    return n_embd, cfg_int(cfg, "num_hidden_layers"), n_head, cfg_int(cfg, "num_key_value_heads"), hd


def cfg_int(cfg: dict[str, object], key: str) -> int:
    v = cfg[key]
    assert isinstance(v, int)
    return v


def cfg_float(cfg: dict[str, object], key: str) -> float:
    v = cfg[key]
    assert isinstance(v, float)
    return v


def _attn_std(spec: ModelSpec, il: int, n_embd: int, n_head: int, n_kv: int, hd: int) -> None:
    spec.t(f"blk.{il}.attn_q.weight", (n_embd, n_head * hd), "attn_q")
    spec.t(f"blk.{il}.attn_k.weight", (n_embd, n_kv * hd), "attn_k")
    spec.t(f"blk.{il}.attn_v.weight", (n_embd, n_kv * hd), "attn_v")
    spec.t(f"blk.{il}.attn_output.weight", (n_head * hd, n_embd), "attn_output")


def _ffn_dense(spec: ModelSpec, il: int, n_embd: int, n_ff: int) -> None:
    spec.t(f"blk.{il}.ffn_gate.weight", (n_embd, n_ff), "ffn_gate")
    spec.t(f"blk.{il}.ffn_up.weight", (n_embd, n_ff), "ffn_up")
    spec.t(f"blk.{il}.ffn_down.weight", (n_ff, n_embd), "ffn_down")


def _ffn_moe(spec: ModelSpec, il: int, n_embd: int, n_ff_exp: int, n_expert: int) -> None:
    spec.t(f"blk.{il}.ffn_gate_inp.weight", (n_embd, n_expert))
    spec.t(f"blk.{il}.ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), "exps")
    spec.t(f"blk.{il}.ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), "exps")
    spec.t(f"blk.{il}.ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), "exps_down")


def _ffn_shexp(spec: ModelSpec, il: int, n_embd: int, n_ff_sh: int) -> None:
    spec.t(f"blk.{il}.ffn_gate_shexp.weight", (n_embd, n_ff_sh), "ffn_gate")
    spec.t(f"blk.{il}.ffn_up_shexp.weight", (n_embd, n_ff_sh), "ffn_up")
    spec.t(f"blk.{il}.ffn_down_shexp.weight", (n_ff_sh, n_embd), "ffn_down")


def _embd_out(spec: ModelSpec, n_embd: int, n_vocab: int, tied: bool) -> None:
    spec.t("token_embd.weight", (n_embd, n_vocab), "token_embd")
    spec.t("output_norm.weight", (n_embd,))
    if not tied:
        spec.t("output.weight", (n_embd, n_vocab), "output")


def build_llama_3_1_8b() -> ModelSpec:
    cfg, spec = _begin("llama-3.1-8b", "llama")
    n_embd, n_layer, n_head, n_kv, hd = attn_dims(cfg)
    _attn_keys(spec, cfg)
    spec.a("rope.dimension_count", hd)
    _embd_out(spec, n_embd, cfg_int(cfg, "vocab_size"), tied=False)
    spec.t("rope_freqs.weight", (hd // 2,))
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        _attn_std(spec, il, n_embd, n_head, n_kv, hd)
        spec.t(f"blk.{il}.ffn_norm.weight", (n_embd,))
        _ffn_dense(spec, il, n_embd, cfg_int(cfg, "intermediate_size"))
    return spec


def _qwen3_like(name: str, moe: bool) -> ModelSpec:
    cfg, spec = _begin(name, "qwen3moe" if moe else "qwen3")
    n_embd, n_layer, n_head, n_kv, hd = attn_dims(cfg)
    _attn_keys(spec, cfg)
    spec.a("attention.key_length", hd)
    spec.a("attention.value_length", hd)
    if moe:
        _expert_keys(spec, cfg, cfg_int(cfg, "num_experts"))
        spec.a("expert_feed_forward_length", cfg_int(cfg, "moe_intermediate_size"))
    _embd_out(spec, n_embd, cfg_int(cfg, "vocab_size"), tied=False)
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        _attn_std(spec, il, n_embd, n_head, n_kv, hd)
        spec.t(f"blk.{il}.attn_q_norm.weight", (hd,))
        spec.t(f"blk.{il}.attn_k_norm.weight", (hd,))
        spec.t(f"blk.{il}.ffn_norm.weight", (n_embd,))
        if moe:
            _ffn_moe(spec, il, n_embd, cfg_int(cfg, "moe_intermediate_size"), cfg_int(cfg, "num_experts"))
        else:
            _ffn_dense(spec, il, n_embd, cfg_int(cfg, "intermediate_size"))
    return spec


def build_qwen3_8b() -> ModelSpec:
    return _qwen3_like("qwen3-8b", moe=False)


def build_qwen3_30b_a3b() -> ModelSpec:
    return _qwen3_like("qwen3-30b-a3b", moe=True)


def build_gemma_3_27b() -> ModelSpec:
    cfg, spec = _begin("gemma-3-27b", "gemma3")
    n_embd, n_layer, n_head, n_kv, hd = attn_dims(cfg)
    spec.a("feed_forward_length", cfg_int(cfg, "intermediate_size"))
    spec.a("attention.head_count", n_head)
    spec.a("attention.head_count_kv", n_kv)
    spec.a("attention.key_length", hd)
    spec.a("attention.value_length", hd)
    spec.a("rope.freq_base", cfg_float(cfg, "rope_theta"))
    spec.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "rms_norm_eps"))
    spec.a("attention.sliding_window", cfg_int(cfg, "sliding_window"))
    spec.a("rope.scaling.type", "linear")
    spec.a("rope.scaling.factor", cfg_float(cfg, "rope_scaling_factor"))
    # the converter writes no sliding_window_pattern key for gemma3: llama.cpp defaults to 6 (load_swa_pattern)
    _embd_out(spec, n_embd, cfg_int(cfg, "vocab_size"), tied=True)
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        _attn_std(spec, il, n_embd, n_head, n_kv, hd)
        spec.t(f"blk.{il}.post_attention_norm.weight", (n_embd,))
        spec.t(f"blk.{il}.attn_q_norm.weight", (hd,))
        spec.t(f"blk.{il}.attn_k_norm.weight", (hd,))
        spec.t(f"blk.{il}.ffn_norm.weight", (n_embd,))
        _ffn_dense(spec, il, n_embd, cfg_int(cfg, "intermediate_size"))
        spec.t(f"blk.{il}.post_ffw_norm.weight", (n_embd,))
    return spec


def build_gpt_oss(name: str) -> ModelSpec:
    """gpt-oss-20b and gpt-oss-120b: the same layout at two sizes."""
    cfg, spec = _begin(name, "gpt-oss", ftype=38)  # LLAMA_FTYPE_MOSTLY_MXFP4_MOE
    n_embd, n_layer, n_head, n_kv, hd = attn_dims(cfg)
    n_ff_exp, n_expert = cfg_int(cfg, "intermediate_size"), cfg_int(cfg, "num_local_experts")
    spec.a("feed_forward_length", n_ff_exp)
    spec.a("expert_feed_forward_length", n_ff_exp)
    spec.a("attention.head_count", n_head)
    spec.a("attention.head_count_kv", n_kv)
    spec.a("attention.key_length", hd)
    spec.a("attention.value_length", hd)
    spec.a("rope.dimension_count", hd)
    spec.a("rope.freq_base", cfg_float(cfg, "rope_theta"))
    spec.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "rms_norm_eps"))
    spec.a("attention.sliding_window", cfg_int(cfg, "sliding_window"))
    _expert_keys(spec, cfg, n_expert)
    spec.a("rope.scaling.type", "yarn")
    spec.a("rope.scaling.factor", 32.0)
    spec.a("rope.scaling.original_context_length", 4096)
    n_vocab = cfg_int(cfg, "vocab_size")
    spec.tq("token_embd.weight", (n_embd, n_vocab), Q.Q8_0)
    spec.t("output_norm.weight", (n_embd,))
    spec.tq("output.weight", (n_embd, n_vocab), Q.Q8_0)
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        spec.t(f"blk.{il}.post_attention_norm.weight", (n_embd,))
        spec.tq(f"blk.{il}.attn_q.weight", (n_embd, n_head * hd), Q.Q8_0)
        spec.tq(f"blk.{il}.attn_k.weight", (n_embd, n_kv * hd), Q.Q8_0)
        spec.tq(f"blk.{il}.attn_v.weight", (n_embd, n_kv * hd), Q.Q8_0)
        spec.t(f"blk.{il}.attn_q.bias", (n_head * hd,))
        spec.t(f"blk.{il}.attn_k.bias", (n_kv * hd,))
        spec.t(f"blk.{il}.attn_v.bias", (n_kv * hd,))
        spec.tq(f"blk.{il}.attn_output.weight", (n_head * hd, n_embd), Q.Q8_0)
        spec.t(f"blk.{il}.attn_output.bias", (n_embd,))
        spec.t(f"blk.{il}.attn_sinks.weight", (n_head,))
        spec.t(f"blk.{il}.ffn_gate_inp.weight", (n_embd, n_expert))
        spec.t(f"blk.{il}.ffn_gate_inp.bias", (n_expert,))
        spec.tq(f"blk.{il}.ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), Q.MXFP4)
        spec.tq(f"blk.{il}.ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), Q.MXFP4)
        spec.tq(f"blk.{il}.ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), Q.MXFP4)
        spec.t(f"blk.{il}.ffn_gate_exps.bias", (n_ff_exp, n_expert))
        spec.t(f"blk.{il}.ffn_up_exps.bias", (n_ff_exp, n_expert))
        spec.t(f"blk.{il}.ffn_down_exps.bias", (n_embd, n_expert))
    return spec


def build_deepseek_v2_lite() -> ModelSpec:
    cfg, spec = _begin("deepseek-v2-lite", "deepseek2")
    n_embd, n_layer = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "num_hidden_layers")
    n_head = cfg_int(cfg, "num_attention_heads")
    kv_lora, nope, rope, v_hd = (
        cfg_int(cfg, "kv_lora_rank"),
        cfg_int(cfg, "qk_nope_head_dim"),
        cfg_int(cfg, "qk_rope_head_dim"),
        cfg_int(cfg, "v_head_dim"),
    )
    n_ff_exp, n_expert, n_shared = (
        cfg_int(cfg, "moe_intermediate_size"),
        cfg_int(cfg, "n_routed_experts"),
        cfg_int(cfg, "n_shared_experts"),
    )
    spec.a("feed_forward_length", cfg_int(cfg, "intermediate_size"))
    spec.a("attention.head_count", n_head)
    # modern (MLA) GGUF layout: one latent "head" of kv_lora_rank + rope for K, kv_lora_rank for V
    spec.a("attention.head_count_kv", 1)
    spec.a("attention.key_length", kv_lora + rope)
    spec.a("attention.value_length", kv_lora)
    spec.a("attention.key_length_mla", nope + rope)
    spec.a("attention.value_length_mla", v_hd)
    spec.a("attention.kv_lora_rank", kv_lora)
    spec.a("rope.dimension_count", rope)
    spec.a("rope.freq_base", cfg_float(cfg, "rope_theta"))
    spec.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "rms_norm_eps"))
    spec.a("leading_dense_block_count", cfg_int(cfg, "first_k_dense_replace"))
    _expert_keys(spec, cfg, n_expert)
    spec.a("expert_shared_count", n_shared)
    spec.a("expert_feed_forward_length", n_ff_exp)
    spec.a("expert_weights_scale", cfg_float(cfg, "routed_scaling_factor"))
    spec.a("expert_weights_norm", False)
    spec.a("expert_gating_func", 1)  # softmax
    spec.a("rope.scaling.type", "yarn")
    spec.a("rope.scaling.factor", 40.0)
    spec.a("rope.scaling.original_context_length", 4096)
    spec.a("rope.scaling.yarn_log_multiplier", 0.0707)
    _embd_out(spec, n_embd, cfg_int(cfg, "vocab_size"), tied=False)
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        spec.t(f"blk.{il}.attn_kv_a_norm.weight", (kv_lora,))
        spec.t(f"blk.{il}.attn_q.weight", (n_embd, n_head * (nope + rope)), "attn_q")
        spec.t(f"blk.{il}.attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), "attn_k")
        spec.t(f"blk.{il}.attn_k_b.weight", (nope, kv_lora, n_head), "attn_k")
        spec.t(f"blk.{il}.attn_v_b.weight", (kv_lora, v_hd, n_head), "attn_v")
        spec.t(f"blk.{il}.attn_output.weight", (n_head * v_hd, n_embd), "attn_output")
        spec.t(f"blk.{il}.ffn_norm.weight", (n_embd,))
        if il < cfg_int(cfg, "first_k_dense_replace"):
            _ffn_dense(spec, il, n_embd, cfg_int(cfg, "intermediate_size"))
        else:
            _ffn_moe(spec, il, n_embd, n_ff_exp, n_expert)
            _ffn_shexp(spec, il, n_embd, n_ff_exp * n_shared)
    return spec


def build_deepseek_v3() -> ModelSpec:
    """DeepSeek-V3 as conversion/deepseek.py (DeepseekV2Model) writes it: the compressed query (q_a, its norm,
    q_b), sigmoid routing with the selection bias `exp_probs_b` over 8 expert groups (4 used), normed weights."""
    cfg, spec = _begin("deepseek-v3", "deepseek2")
    n_embd, n_layer = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "num_hidden_layers")
    n_head = cfg_int(cfg, "num_attention_heads")
    kv_lora, q_lora = cfg_int(cfg, "kv_lora_rank"), cfg_int(cfg, "q_lora_rank")
    nope, rope, v_hd = (
        cfg_int(cfg, "qk_nope_head_dim"),
        cfg_int(cfg, "qk_rope_head_dim"),
        cfg_int(cfg, "v_head_dim"),
    )
    n_ff_exp, n_expert, n_shared = (
        cfg_int(cfg, "moe_intermediate_size"),
        cfg_int(cfg, "n_routed_experts"),
        cfg_int(cfg, "n_shared_experts"),
    )
    n_dense = cfg_int(cfg, "first_k_dense_replace")
    spec.a("feed_forward_length", cfg_int(cfg, "intermediate_size"))
    spec.a("attention.head_count", n_head)
    spec.a("attention.head_count_kv", 1)
    spec.a("rope.freq_base", cfg_float(cfg, "rope_theta"))
    spec.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "rms_norm_eps"))
    _expert_keys(spec, cfg, n_expert)
    spec.a("expert_group_count", cfg_int(cfg, "n_group"))
    spec.a("expert_group_used_count", cfg_int(cfg, "topk_group"))
    spec.a("expert_gating_func", 2)  # sigmoid
    spec.a("leading_dense_block_count", n_dense)
    spec.a("attention.q_lora_rank", q_lora)
    spec.a("attention.kv_lora_rank", kv_lora)
    spec.a("attention.key_length", kv_lora + rope)
    spec.a("attention.value_length", kv_lora)
    spec.a("attention.key_length_mla", nope + rope)
    spec.a("attention.value_length_mla", v_hd)
    spec.a("expert_feed_forward_length", n_ff_exp)
    spec.a("expert_shared_count", n_shared)
    spec.a("expert_weights_scale", cfg_float(cfg, "routed_scaling_factor"))
    spec.a("expert_weights_norm", True)
    spec.a("rope.dimension_count", rope)
    spec.a("rope.scaling.type", "yarn")
    spec.a("rope.scaling.factor", 40.0)
    spec.a("rope.scaling.original_context_length", 4096)
    spec.a("rope.scaling.yarn_log_multiplier", 0.1)
    _embd_out(spec, n_embd, cfg_int(cfg, "vocab_size"), tied=False)
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        spec.t(f"blk.{il}.attn_q_a_norm.weight", (q_lora,))
        spec.t(f"blk.{il}.attn_kv_a_norm.weight", (kv_lora,))
        spec.t(f"blk.{il}.attn_q_a.weight", (n_embd, q_lora), "attn_q")
        spec.t(f"blk.{il}.attn_q_b.weight", (q_lora, n_head * (nope + rope)), "attn_q")
        spec.t(f"blk.{il}.attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), "attn_k")
        spec.t(f"blk.{il}.attn_k_b.weight", (nope, kv_lora, n_head), "attn_k")
        spec.t(f"blk.{il}.attn_v_b.weight", (kv_lora, v_hd, n_head), "attn_v")
        spec.t(f"blk.{il}.attn_output.weight", (n_head * v_hd, n_embd), "attn_output")
        spec.t(f"blk.{il}.ffn_norm.weight", (n_embd,))
        if il < n_dense:
            _ffn_dense(spec, il, n_embd, cfg_int(cfg, "intermediate_size"))
        else:
            _ffn_moe(spec, il, n_embd, n_ff_exp, n_expert)
            spec.t(f"blk.{il}.exp_probs_b.bias", (n_expert,))
            _ffn_shexp(spec, il, n_embd, n_ff_exp * n_shared)
    return spec


def build_qwen3_next_80b_a3b() -> ModelSpec:
    cfg, spec = _begin("qwen3-next-80b-a3b", "qwen3next")
    n_embd, n_layer, n_head, n_kv, hd = attn_dims(cfg)
    n_ff_exp, n_expert = cfg_int(cfg, "moe_intermediate_size"), cfg_int(cfg, "num_experts")
    n_ff_sh = cfg_int(cfg, "shared_expert_intermediate_size")
    d_conv = cfg_int(cfg, "linear_conv_kernel_dim")
    head_k, head_v = cfg_int(cfg, "linear_key_head_dim"), cfg_int(cfg, "linear_value_head_dim")
    n_kh, n_vh = cfg_int(cfg, "linear_num_key_heads"), cfg_int(cfg, "linear_num_value_heads")
    interval = cfg_int(cfg, "full_attention_interval")
    key_dim, value_dim = head_k * n_kh, head_v * n_vh
    spec.a("feed_forward_length", cfg_int(cfg, "intermediate_size"))
    spec.a("attention.head_count", n_head)
    spec.a("attention.head_count_kv", n_kv)
    spec.a("attention.key_length", hd)
    spec.a("attention.value_length", hd)
    spec.a("rope.dimension_count", int(hd * 0.25))
    spec.a("rope.freq_base", cfg_float(cfg, "rope_theta"))
    spec.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "rms_norm_eps"))
    _expert_keys(spec, cfg, n_expert)
    spec.a("expert_feed_forward_length", n_ff_exp)
    spec.a("expert_shared_feed_forward_length", n_ff_sh)
    _ssm_keys(spec, d_conv, head_k, n_kh, n_vh, value_dim)
    spec.a("full_attention_interval", interval)
    _embd_out(spec, n_embd, cfg_int(cfg, "vocab_size"), tied=False)
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        spec.t(f"blk.{il}.post_attention_norm.weight", (n_embd,))
        if (il + 1) % interval == 0:
            spec.t(f"blk.{il}.attn_q.weight", (n_embd, n_head * hd * 2), "attn_q")
            spec.t(f"blk.{il}.attn_k.weight", (n_embd, n_kv * hd), "attn_k")
            spec.t(f"blk.{il}.attn_v.weight", (n_embd, n_kv * hd), "attn_v")
            spec.t(f"blk.{il}.attn_output.weight", (n_head * hd, n_embd), "attn_output")
            spec.t(f"blk.{il}.attn_q_norm.weight", (hd,))
            spec.t(f"blk.{il}.attn_k_norm.weight", (hd,))
        else:
            spec.t(f"blk.{il}.attn_qkv.weight", (n_embd, key_dim * 2 + value_dim), "attn_q")
            spec.t(f"blk.{il}.attn_gate.weight", (n_embd, value_dim), "attn_q")
            spec.t(f"blk.{il}.ssm_conv1d.weight", (d_conv, key_dim * 2 + value_dim))
            spec.t(f"blk.{il}.ssm_dt.bias", (n_vh,))
            spec.t(f"blk.{il}.ssm_a", (n_vh,))
            spec.t(f"blk.{il}.ssm_ba.weight", (n_embd, n_vh * 2), "attn_k")
            spec.t(f"blk.{il}.ssm_norm.weight", (head_v,))
            spec.t(f"blk.{il}.ssm_out.weight", (value_dim, n_embd), "attn_output")
        _ffn_moe(spec, il, n_embd, n_ff_exp, n_expert)
        spec.t(f"blk.{il}.ffn_gate_inp_shexp.weight", (n_embd,))
        _ffn_shexp(spec, il, n_embd, n_ff_sh)
    return spec


def build_granite_4_0_h_tiny() -> ModelSpec:
    cfg, spec = _begin("granite-4.0-h-tiny", "granitehybrid")
    n_embd, n_layer, n_head, n_kv, hd = attn_dims(cfg)
    n_ff_exp, n_expert, n_ff_sh = (
        cfg_int(cfg, "intermediate_size"),
        cfg_int(cfg, "num_local_experts"),
        cfg_int(cfg, "shared_intermediate_size"),
    )
    d_conv, d_state = cfg_int(cfg, "mamba_d_conv"), cfg_int(cfg, "mamba_d_state")
    n_ssm_head, n_group = cfg_int(cfg, "mamba_n_heads"), cfg_int(cfg, "mamba_n_groups")
    d_inner = cfg_int(cfg, "mamba_expand") * n_embd
    attn_layers = cfg["attention_layers"]
    assert isinstance(attn_layers, list)
    spec.a("feed_forward_length", n_ff_exp)
    spec.a("attention.head_count", n_head)
    spec.arr_u32(
        f"{spec.arch}.attention.head_count_kv", [n_kv if il in attn_layers else 0 for il in range(n_layer)]
    )
    spec.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "rms_norm_eps"))
    spec.a("rope.dimension_count", hd)
    spec.a("rope.scaling.finetuned", False)  # position_embedding_type "nope"
    _expert_keys(spec, cfg, n_expert)
    spec.a("expert_shared_feed_forward_length", n_ff_sh)
    _ssm_keys(spec, d_conv, d_state, n_group, n_ssm_head, d_inner)
    # the embedding/residual/attention/logit multipliers change no memory and are left out
    _embd_out(spec, n_embd, cfg_int(cfg, "vocab_size"), tied=True)
    d_in_proj = 2 * d_inner + 2 * n_group * d_state + n_ssm_head
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        if il in attn_layers:
            _attn_std(spec, il, n_embd, n_head, n_kv, hd)
        else:
            spec.t(f"blk.{il}.ssm_in.weight", (n_embd, d_in_proj), "attn_q")
            spec.t(f"blk.{il}.ssm_conv1d.weight", (d_conv, d_inner + 2 * n_group * d_state))
            spec.t(f"blk.{il}.ssm_conv1d.bias", (d_inner + 2 * n_group * d_state,))
            spec.t(f"blk.{il}.ssm_dt.bias", (n_ssm_head,))
            spec.t(f"blk.{il}.ssm_a", (1, n_ssm_head))
            spec.t(f"blk.{il}.ssm_d", (1, n_ssm_head))
            spec.t(f"blk.{il}.ssm_norm.weight", (d_inner // n_group, n_group))
            spec.t(f"blk.{il}.ssm_out.weight", (d_inner, n_embd), "attn_output")
        spec.t(f"blk.{il}.ffn_norm.weight", (n_embd,))
        _ffn_moe(spec, il, n_embd, n_ff_exp, n_expert)
        _ffn_shexp(spec, il, n_embd, n_ff_sh)
    return spec


def lfm2_ff_dim(cfg: dict[str, object]) -> int:
    """The FFN width the converter writes (conversion/lfm2.py ``LFM2Model._add_feed_forward_length``): with
    ``block_auto_adjust_ff_dim`` two thirds of ``block_ff_dim``, times the multiplier, rounded up to
    ``block_multiple_of``."""
    ff = cfg_int(cfg, "block_ff_dim")
    if cfg["block_auto_adjust_ff_dim"]:
        ff = int(2 * ff / 3)
        ff = int(cfg_float(cfg, "block_ffn_dim_multiplier") * ff)
        mult = cfg_int(cfg, "block_multiple_of")
        ff = mult * ((ff + mult - 1) // mult)
    return ff


def build_lfm2_1_2b() -> ModelSpec:
    """LFM2 as conversion/lfm2.py writes it: ``head_count_kv`` 0 on the short-convolution layers (llama.cpp takes
    those as recurrent, ``src/models/lfm2.cpp``), the output norm named ``token_embd_norm``, tied embeddings, and
    tensor names and shapes from ``llama_model_lfm2::load_arch_tensors``."""
    cfg, spec = _begin("lfm2-1.2b", "lfm2")
    n_embd, n_layer, n_head, n_kv, hd = attn_dims(cfg)
    n_ff, l_cache = lfm2_ff_dim(cfg), cfg_int(cfg, "conv_L_cache")
    attn_layers = cfg["full_attn_idxs"]
    assert isinstance(attn_layers, list)
    spec.a("feed_forward_length", n_ff)
    spec.a("attention.head_count", n_head)
    spec.arr_u32(
        f"{spec.arch}.attention.head_count_kv", [n_kv if il in attn_layers else 0 for il in range(n_layer)]
    )
    spec.a("rope.freq_base", cfg_float(cfg, "rope_theta"))
    spec.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "norm_eps"))
    spec.a("shortconv.l_cache", l_cache)
    spec.t("token_embd.weight", (n_embd, cfg_int(cfg, "vocab_size")), "token_embd")
    spec.t("token_embd_norm.weight", (n_embd,))
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        if il in attn_layers:
            spec.t(f"blk.{il}.attn_q_norm.weight", (hd,))
            spec.t(f"blk.{il}.attn_k_norm.weight", (hd,))
            _attn_std(spec, il, n_embd, n_head, n_kv, hd)
        else:
            spec.t(f"blk.{il}.shortconv.conv.weight", (l_cache, n_embd))  # conv_bias false: no bias
            spec.t(f"blk.{il}.shortconv.in_proj.weight", (n_embd, 3 * n_embd), "attn_q")
            spec.t(f"blk.{il}.shortconv.out_proj.weight", (n_embd, n_embd), "attn_output")
        spec.t(f"blk.{il}.ffn_norm.weight", (n_embd,))
        _ffn_dense(spec, il, n_embd, n_ff)
    return spec


def build_qwen2_5_vl_7b() -> ModelSpec:
    cfg, spec = _begin("qwen2.5-vl-7b", "qwen2vl")
    n_embd, n_layer, n_head, n_kv, hd = attn_dims(cfg)
    _attn_keys(spec, cfg)
    sections = cfg["mrope_section"]
    assert isinstance(sections, list)
    spec.arr_u32(f"{spec.arch}.rope.dimension_sections", [*sections, 0])
    _embd_out(spec, n_embd, cfg_int(cfg, "vocab_size"), tied=False)
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        _attn_std(spec, il, n_embd, n_head, n_kv, hd)
        spec.t(f"blk.{il}.attn_q.bias", (n_embd,))
        spec.t(f"blk.{il}.attn_k.bias", (n_kv * hd,))
        spec.t(f"blk.{il}.attn_v.bias", (n_kv * hd,))
        spec.t(f"blk.{il}.ffn_norm.weight", (n_embd,))
        _ffn_dense(spec, il, n_embd, cfg_int(cfg, "intermediate_size"))
    return spec


def build_llama_4_scout() -> ModelSpec:
    cfg, spec = _begin("llama-4-scout-17b-16e", "llama4")
    n_embd, n_layer, n_head, n_kv, hd = attn_dims(cfg)
    n_ff_exp, n_expert = cfg_int(cfg, "intermediate_size"), cfg_int(cfg, "num_local_experts")
    step = cfg_int(cfg, "interleave_moe_layer_step")
    spec.a("feed_forward_length", cfg_int(cfg, "intermediate_size_mlp"))
    spec.a("expert_feed_forward_length", n_ff_exp)
    spec.a("interleave_moe_layer_step", step)
    spec.a("attention.head_count", n_head)
    spec.a("attention.head_count_kv", n_kv)
    spec.a("rope.dimension_count", hd)
    spec.a("rope.freq_base", cfg_float(cfg, "rope_theta"))
    spec.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "rms_norm_eps"))
    _expert_keys(spec, cfg, n_expert)
    # no sliding_window key: llama.cpp then uses chunked attention, chunk 8192, 3 chunked : 1 global
    _embd_out(spec, n_embd, cfg_int(cfg, "vocab_size"), tied=False)
    for il in range(n_layer):
        spec.t(f"blk.{il}.attn_norm.weight", (n_embd,))
        _attn_std(spec, il, n_embd, n_head, n_kv, hd)
        spec.t(f"blk.{il}.ffn_norm.weight", (n_embd,))
        if (il + 1) % step == 0:
            _ffn_moe(spec, il, n_embd, n_ff_exp, n_expert)
            _ffn_shexp(spec, il, n_embd, n_ff_exp)
        else:
            _ffn_dense(spec, il, n_embd, cfg_int(cfg, "intermediate_size_mlp"))
    return spec


def _vit_common(spec: ModelSpec, cfg: dict[str, object], *, gelu: bool) -> None:
    spec.s("general.name", spec.name)
    spec.u32("general.file_type", 1)  # F16
    spec.b("clip.has_vision_encoder", True)
    spec.s("clip.projector_type", str(cfg["projector_type"]))
    spec.u32("clip.vision.embedding_length", cfg_int(cfg, "hidden_size"))
    spec.u32("clip.vision.feed_forward_length", cfg_int(cfg, "intermediate_size"))
    spec.u32("clip.vision.block_count", cfg_int(cfg, "num_hidden_layers"))
    spec.u32("clip.vision.attention.head_count", cfg_int(cfg, "num_attention_heads"))
    spec.f32("clip.vision.attention.layer_norm_epsilon", cfg_float(cfg, "layer_norm_eps"))
    spec.u32("clip.vision.projection_dim", cfg_int(cfg, "text_hidden_size"))
    spec.u32("clip.vision.image_size", cfg_int(cfg, "image_size"))
    spec.u32("clip.vision.patch_size", cfg_int(cfg, "patch_size"))
    spec.kv.append(("clip.vision.image_mean", [0.5, 0.5, 0.5], GGUFValueType.ARRAY, GGUFValueType.FLOAT32))
    spec.kv.append(("clip.vision.image_std", [0.5, 0.5, 0.5], GGUFValueType.ARRAY, GGUFValueType.FLOAT32))
    if gelu:
        spec.b("clip.use_gelu", True)
    else:
        spec.b("clip.use_silu", True)


def vit_blocks(spec: ModelSpec, cfg: dict[str, object], *, ln_bias: bool, gated: bool) -> None:
    d, ff = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "intermediate_size")
    for il in range(cfg_int(cfg, "num_hidden_layers")):
        for w in ("attn_q", "attn_k", "attn_v", "attn_out"):
            spec.tq(f"v.blk.{il}.{w}.weight", (d, d), Q.F16)
            spec.t(f"v.blk.{il}.{w}.bias", (d,))
        for ln in ("ln1", "ln2"):
            spec.t(f"v.blk.{il}.{ln}.weight", (d,))
            if ln_bias:
                spec.t(f"v.blk.{il}.{ln}.bias", (d,))
        spec.tq(f"v.blk.{il}.ffn_up.weight", (d, ff), Q.F16)
        spec.t(f"v.blk.{il}.ffn_up.bias", (ff,))
        if gated:
            spec.tq(f"v.blk.{il}.ffn_gate.weight", (d, ff), Q.F16)
            spec.t(f"v.blk.{il}.ffn_gate.bias", (ff,))
        spec.tq(f"v.blk.{il}.ffn_down.weight", (ff, d), Q.F16)
        spec.t(f"v.blk.{il}.ffn_down.bias", (d,))


def build_mmproj_gemma_3_27b() -> ModelSpec:
    cfg = MMPROJ_CONFIGS["mmproj-gemma-3-27b"]
    spec = ModelSpec("mmproj-gemma-3-27b", "clip")
    d, p = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "patch_size")
    n_pos = (cfg_int(cfg, "image_size") // p) ** 2
    _vit_common(spec, cfg, gelu=True)
    spec.tq("v.patch_embd.weight", (p, p, 3, d), Q.F16)
    spec.t("v.patch_embd.bias", (d,))
    spec.tq("v.position_embd.weight", (d, n_pos), Q.F16)
    vit_blocks(spec, cfg, ln_bias=True, gated=False)
    spec.t("v.post_ln.weight", (d,))
    spec.t("v.post_ln.bias", (d,))
    spec.tq("mm.input_projection.weight", (cfg_int(cfg, "text_hidden_size"), d), Q.F16)
    spec.t("mm.soft_emb_norm.weight", (d,))
    return spec


def build_mmproj_llava_llama_3_8b() -> ModelSpec:
    cfg = MMPROJ_CONFIGS["mmproj-llava-llama-3-8b"]
    spec = ModelSpec("mmproj-llava-llama-3-8b", "clip")
    d, p, n_out = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "patch_size"), cfg_int(cfg, "text_hidden_size")
    n_pos = (cfg_int(cfg, "image_size") // p) ** 2 + 1
    _vit_common(spec, cfg, gelu=False)
    spec.kv = [kv for kv in spec.kv if kv[0] != "clip.use_silu"]  # CLIP uses quick-GELU (the default)
    spec.tq("v.patch_embd.weight", (p, p, 3, d), Q.F16)
    spec.t("v.class_embd", (d,))
    spec.tq("v.position_embd.weight", (d, n_pos), Q.F16)
    spec.t("v.pre_ln.weight", (d,))
    spec.t("v.pre_ln.bias", (d,))
    vit_blocks(spec, cfg, ln_bias=True, gated=False)
    spec.tq("mm.0.weight", (d, n_out), Q.F16)
    spec.t("mm.0.bias", (n_out,))
    spec.tq("mm.2.weight", (n_out, n_out), Q.F16)
    spec.t("mm.2.bias", (n_out,))
    return spec


def _qwen_vl_patches(spec: ModelSpec, p: int, d: int) -> None:
    """The Qwen-VL towers' patch embedding: two frames of a temporal patch, one kernel each."""
    spec.tq("v.patch_embd.weight", (p, p, 3, d), Q.F16)
    spec.tq("v.patch_embd.weight.1", (p, p, 3, d), Q.F16)


def _qwen_vl_merger(spec: ModelSpec, d_merge: int, n_out: int) -> None:
    """The Qwen-VL mergers' two-layer projector (mm.0, mm.2) from the merged patches to the text width."""
    spec.tq("mm.0.weight", (d_merge, d_merge), Q.F16)
    spec.t("mm.0.bias", (d_merge,))
    spec.tq("mm.2.weight", (d_merge, n_out), Q.F16)
    spec.t("mm.2.bias", (n_out,))


def build_mmproj_qwen2_5_vl_7b() -> ModelSpec:
    cfg = MMPROJ_CONFIGS["mmproj-qwen2.5-vl-7b"]
    spec = ModelSpec("mmproj-qwen2.5-vl-7b", "clip")
    d, p, n_out = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "patch_size"), cfg_int(cfg, "text_hidden_size")
    merge = cfg_int(cfg, "spatial_merge_size")
    full = cfg["fullatt_block_indexes"]
    assert isinstance(full, list)
    _vit_common(spec, cfg, gelu=False)
    spec.u32("clip.vision.spatial_merge_size", merge)
    spec.u32("clip.vision.n_wa_pattern", full[0] + 1)
    spec.u32("clip.vision.window_size", cfg_int(cfg, "window_size"))
    _qwen_vl_patches(spec, p, d)
    vit_blocks(spec, cfg, ln_bias=False, gated=True)
    spec.t("v.post_ln.weight", (d,))
    d_merge = d * merge * merge
    _qwen_vl_merger(spec, d_merge, n_out)
    return spec


def build_mmproj_qwen2_vl_7b() -> ModelSpec:
    """Qwen2-VL's tower: LayerNorm with bias, a GELU MLP (fc1/fc2), no window attention; the merger's LayerNorm
    (ln_q) is v.post_ln."""
    cfg = MMPROJ_CONFIGS["mmproj-qwen2-vl-7b"]
    spec = ModelSpec("mmproj-qwen2-vl-7b", "clip")
    d, p, n_out = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "patch_size"), cfg_int(cfg, "text_hidden_size")
    merge = cfg_int(cfg, "spatial_merge_size")
    _vit_common(spec, cfg, gelu=True)
    spec.u32("clip.vision.spatial_merge_size", merge)
    _qwen_vl_patches(spec, p, d)
    vit_blocks(spec, cfg, ln_bias=True, gated=False)
    spec.t("v.post_ln.weight", (d,))
    spec.t("v.post_ln.bias", (d,))
    d_merge = d * merge * merge
    _qwen_vl_merger(spec, d_merge, n_out)
    return spec


def build_mmproj_qwen3_vl_8b() -> ModelSpec:
    """Qwen3-VL's tower: a fused QKV, LayerNorm with bias, a GELU MLP, a patch bias and learned position
    embeddings (resized to the image), and deepstack mergers (postshuffle norm, fc1, fc2) after the listed
    blocks whose outputs are concatenated to the main merger's."""
    cfg = MMPROJ_CONFIGS["mmproj-qwen3-vl-8b"]
    spec = ModelSpec("mmproj-qwen3-vl-8b", "clip")
    d, p, n_out = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "patch_size"), cfg_int(cfg, "text_hidden_size")
    ff, merge = cfg_int(cfg, "intermediate_size"), cfg_int(cfg, "spatial_merge_size")
    deep = cfg["deepstack_visual_indexes"]
    assert isinstance(deep, list)
    _vit_common(spec, cfg, gelu=True)
    spec.u32("clip.vision.spatial_merge_size", merge)
    _qwen_vl_patches(spec, p, d)
    spec.t("v.patch_embd.bias", (d,))
    spec.t("v.position_embd.weight", (d, cfg_int(cfg, "num_position_embeddings")))  # F32: ggml_interpolate
    for il in range(cfg_int(cfg, "num_hidden_layers")):
        spec.tq(f"v.blk.{il}.attn_qkv.weight", (d, 3 * d), Q.F16)
        spec.t(f"v.blk.{il}.attn_qkv.bias", (3 * d,))
        spec.tq(f"v.blk.{il}.attn_out.weight", (d, d), Q.F16)
        spec.t(f"v.blk.{il}.attn_out.bias", (d,))
        for ln in ("ln1", "ln2"):
            spec.t(f"v.blk.{il}.{ln}.weight", (d,))
            spec.t(f"v.blk.{il}.{ln}.bias", (d,))
        spec.tq(f"v.blk.{il}.ffn_up.weight", (d, ff), Q.F16)
        spec.t(f"v.blk.{il}.ffn_up.bias", (ff,))
        spec.tq(f"v.blk.{il}.ffn_down.weight", (ff, d), Q.F16)
        spec.t(f"v.blk.{il}.ffn_down.bias", (d,))
    d_merge = d * merge * merge
    for il in deep:
        spec.t(f"v.deepstack.{il}.norm.weight", (d_merge,))
        spec.t(f"v.deepstack.{il}.norm.bias", (d_merge,))
        spec.tq(f"v.deepstack.{il}.fc1.weight", (d_merge, d_merge), Q.F16)
        spec.t(f"v.deepstack.{il}.fc1.bias", (d_merge,))
        spec.tq(f"v.deepstack.{il}.fc2.weight", (d_merge, n_out), Q.F16)
        spec.t(f"v.deepstack.{il}.fc2.bias", (n_out,))
    spec.t("v.post_ln.weight", (d,))
    spec.t("v.post_ln.bias", (d,))
    _qwen_vl_merger(spec, d_merge, n_out)
    return spec


def build_mmproj_mistral_small_3_1_24b() -> ModelSpec:
    """Pixtral's tower as Mistral Small 3.1 has it: RMS norms (weights only), no biases, a SiLU-gated FFN, 2D RoPE
    (no position embedding), then the patch merger (RMS norm, 2 x 2 unfold, a linear layer back to the tower's
    width), the two-layer GELU projector without biases, and the [IMG_BREAK] embedding."""
    cfg = MMPROJ_CONFIGS["mmproj-mistral-small-3.1-24b"]
    spec = ModelSpec("mmproj-mistral-small-3.1-24b", "clip")
    d, p, n_out = cfg_int(cfg, "hidden_size"), cfg_int(cfg, "patch_size"), cfg_int(cfg, "text_hidden_size")
    ff, merge = cfg_int(cfg, "intermediate_size"), cfg_int(cfg, "spatial_merge_size")
    _vit_common(spec, cfg, gelu=False)
    spec.u32("clip.vision.spatial_merge_size", merge)
    spec.tq("v.patch_embd.weight", (p, p, 3, d), Q.F16)
    spec.t("v.pre_ln.weight", (d,))
    for il in range(cfg_int(cfg, "num_hidden_layers")):
        for w in ("attn_q", "attn_k", "attn_v", "attn_out"):
            spec.tq(f"v.blk.{il}.{w}.weight", (d, d), Q.F16)
        spec.t(f"v.blk.{il}.ln1.weight", (d,))
        spec.t(f"v.blk.{il}.ln2.weight", (d,))
        spec.tq(f"v.blk.{il}.ffn_gate.weight", (d, ff), Q.F16)
        spec.tq(f"v.blk.{il}.ffn_up.weight", (d, ff), Q.F16)
        spec.tq(f"v.blk.{il}.ffn_down.weight", (ff, d), Q.F16)
    spec.t("mm.input_norm.weight", (d,))
    spec.tq("mm.patch_merger.weight", (d * merge * merge, d), Q.F16)
    spec.tq("mm.1.weight", (d, n_out), Q.F16)
    spec.tq("mm.2.weight", (n_out, n_out), Q.F16)
    spec.t("v.token_embd.img_break", (n_out,))
    return spec


MMPROJ_BUILDERS: dict[str, Callable[[], ModelSpec]] = {
    "mmproj-gemma-3-27b": build_mmproj_gemma_3_27b,
    "mmproj-llava-llama-3-8b": build_mmproj_llava_llama_3_8b,
    "mmproj-qwen2.5-vl-7b": build_mmproj_qwen2_5_vl_7b,
    "mmproj-qwen2-vl-7b": build_mmproj_qwen2_vl_7b,
    "mmproj-qwen3-vl-8b": build_mmproj_qwen3_vl_8b,
    "mmproj-mistral-small-3.1-24b": build_mmproj_mistral_small_3_1_24b,
}


BUILDERS: dict[str, Callable[[], ModelSpec]] = {
    "llama-3.1-8b": build_llama_3_1_8b,
    "qwen3-8b": build_qwen3_8b,
    "qwen3-30b-a3b": build_qwen3_30b_a3b,
    "gemma-3-27b": build_gemma_3_27b,
    "gpt-oss-20b": functools.partial(build_gpt_oss, "gpt-oss-20b"),
    "gpt-oss-120b": functools.partial(build_gpt_oss, "gpt-oss-120b"),
    "deepseek-v2-lite": build_deepseek_v2_lite,
    "deepseek-v3": build_deepseek_v3,
    "qwen3-next-80b-a3b": build_qwen3_next_80b_a3b,
    "granite-4.0-h-tiny": build_granite_4_0_h_tiny,
    "qwen2.5-vl-7b": build_qwen2_5_vl_7b,
    "llama-4-scout-17b-16e": build_llama_4_scout,
    "lfm2-1.2b": build_lfm2_1_2b,
}


def _spm_vocab(spec: ModelSpec, n_vocab: int) -> None:
    """Cheap SentencePiece-style vocab of the real length: <unk>, <s>, </s>, 256 byte tokens, then t<i>."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"t{i}" for i in range(len(tokens), n_vocab)]
    types = [2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259)
    spec.kv.append(("tokenizer.ggml.tokens", tokens, GGUFValueType.ARRAY, GGUFValueType.STRING))
    spec.kv.append(("tokenizer.ggml.scores", [0.0] * n_vocab, GGUFValueType.ARRAY, GGUFValueType.FLOAT32))
    spec.kv.append(("tokenizer.ggml.token_type", types, GGUFValueType.ARRAY, GGUFValueType.INT32))


KeyValue = tuple[str, object, GGUFValueType, GGUFValueType | None]


def write_header(spec: ModelSpec, path: Path, extra_kv: Sequence[KeyValue] = ()) -> tuple[int, int, int]:
    """Write the header of ``spec`` to ``path``: its metadata, then ``extra_kv``, then its tensor infos.

    Returns (header bytes, the data alignment, bytes of tensor data the infos declare); nothing follows the header.
    """
    w = GGUFWriter(path, spec.arch)
    for key, val, vtype, sub in [*spec.kv, *extra_kv]:
        w.add_key_value(key, val, vtype, sub_type=sub)
    weights = 0
    for name, ne, qtype in spec.tensors:
        nbytes = tensor_nbytes(qtype, ne)
        weights += nbytes
        w.add_tensor_info(name, tuple(reversed(ne)), np.dtype(np.float32), nbytes, raw_dtype=qtype)
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert w.fout is not None
    header_bytes = w.fout[0].tell()
    w.close()
    return header_bytes, w.data_alignment, weights


def write_gguf(
    spec: ModelSpec, path: Path, *, vocab: str = "none", header_only: bool = False
) -> dict[str, int]:
    """Write ``spec`` to ``path``: sparse full-size file, or only the header (KV + tensor infos).

    Returns {"header_bytes", "data_offset", "file_bytes" (as written), "full_bytes" (size of the sparse file),
    "weights_bytes"}.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    n_vocab = CONFIGS[spec.name]["vocab_size"] if spec.name in CONFIGS else 0
    assert isinstance(n_vocab, int)
    tokenizer = ModelSpec(spec.name, spec.arch)
    if spec.arch == "clip":
        pass
    elif vocab == "spm":
        tokenizer.s("tokenizer.ggml.model", "llama")
        _spm_vocab(tokenizer, n_vocab)
    elif vocab == "none":
        tokenizer.s("tokenizer.ggml.model", "none")
    else:
        raise ValueError(f"unknown vocab mode {vocab!r}")
    header_bytes, align, weights = write_header(spec, path, tokenizer.kv)
    data_offset = (header_bytes + align - 1) // align * align
    data_size = sum((tensor_nbytes(q, ne) + align - 1) // align * align for _, ne, q in spec.tensors)
    file_bytes = header_bytes if header_only else data_offset + data_size
    os.truncate(path, file_bytes)
    return {
        "header_bytes": header_bytes,
        "data_offset": data_offset,
        "file_bytes": file_bytes,
        "full_bytes": data_offset + data_size,
        "weights_bytes": weights,
    }


def generate_with_layout(
    name: str, out_dir: Path, *, vocab: str = "none", header_only: bool = False
) -> tuple[Path, dict[str, int]]:
    """Write model ``name`` (a key of BUILDERS or MMPROJ_BUILDERS); return its path and write_gguf's layout."""
    spec = BUILDERS[name]() if name in BUILDERS else MMPROJ_BUILDERS[name]()
    suffix = "" if vocab == "none" or spec.arch == "clip" else f".{vocab}"
    path = out_dir / (f"{name}{suffix}.header.gguf" if header_only else f"{name}{suffix}.gguf")
    layout = write_gguf(spec, path, vocab=vocab, header_only=header_only)
    return path, layout


def generate(name: str, out_dir: Path, *, vocab: str = "none", header_only: bool = False) -> Path:
    return generate_with_layout(name, out_dir, vocab=vocab, header_only=header_only)[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", nargs="?", type=Path)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--vocab", choices=["none", "spm"], default="none")
    ap.add_argument("--header-only", action="store_true")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    if args.list:
        for n in BUILDERS:
            print(n, "-", CONFIGS[n]["source"])
        for n in MMPROJ_BUILDERS:
            print(n, "-", MMPROJ_CONFIGS[n]["source"])
        return 0
    if args.out_dir is None:
        ap.error("out_dir is required")
    for name in args.only or [*BUILDERS, *MMPROJ_BUILDERS]:
        p = generate(name, args.out_dir, vocab=args.vocab, header_only=args.header_only)
        print(p, p.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
