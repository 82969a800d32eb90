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

The published configurations (hidden sizes, heads, experts...) of the models that
`tools/groundtruth/sparse_models.py` also writes come from its table, and both write headers with its writer.

The convention and the list of examples are described in docs/examples.md.

    python tools/make_examples.py [OUT_DIR]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from gguf.constants import GGMLQuantizationType, LlamaFileType

from gguf import GGUFValueType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "groundtruth"))
from sparse_models import (  # noqa: E402
    CONFIGS,
    MMPROJ_CONFIGS,
    ModelSpec,
    attn_dims,
    cfg_float,
    cfg_int,
    vit_blocks,
    write_header,
)

OUT_DIR = ROOT / "resources" / "examples"
HEADER_ONLY_KEY = "fitplan.header_only"

Q = GGMLQuantizationType
QK_K = 256


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp's rule for which layers get the bigger type in *_M mixes."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def fallback(qtype: GGMLQuantizationType, ne0: int) -> GGMLQuantizationType:
    """K-quants need rows of whole 256-element super-blocks; llama-quant falls back as below otherwise."""
    if ne0 % QK_K == 0 or qtype not in (Q.Q4_K, Q.Q6_K):
        return qtype
    return Q.Q5_0 if qtype is Q.Q4_K else Q.Q8_0


def mixed(more: bool, ne0: int) -> GGMLQuantizationType:
    """The Q4_K_M type of attn_v / ffn_down rows of `ne0` elements: Q6_K on "more bits" layers, else Q4_K."""
    return fallback(Q.Q6_K if more else Q.Q4_K, ne0)


def general(spec: ModelSpec, name: str, basename: str, size_label: str, ctx: int) -> None:
    """The general.* keys of a Q4_K_M text model and its context length (GGUFWriter writes general.architecture)."""
    spec.s("general.type", "model")
    spec.s("general.name", name)
    spec.s("general.basename", basename)
    spec.s("general.size_label", size_label)
    spec.u32("general.file_type", LlamaFileType.MOSTLY_Q4_K_M)
    spec.u32("general.quantization_version", 2)
    spec.a("context_length", ctx)


def attn_qkv(s: ModelSpec, i: int, n_embd: int, n_head: int, n_head_kv: int, head: int, more: bool) -> None:
    s.tq(f"blk.{i}.attn_q.weight", (n_embd, n_head * head), Q.Q4_K)
    s.tq(f"blk.{i}.attn_k.weight", (n_embd, n_head_kv * head), Q.Q4_K)
    s.tq(f"blk.{i}.attn_v.weight", (n_embd, n_head_kv * head), Q.Q6_K if more else Q.Q4_K)


def ffn_dense(s: ModelSpec, i: int, n_embd: int, n_ff: int, more: bool) -> None:
    s.tq(f"blk.{i}.ffn_gate.weight", (n_embd, n_ff), Q.Q4_K)
    s.tq(f"blk.{i}.ffn_up.weight", (n_embd, n_ff), Q.Q4_K)
    s.tq(f"blk.{i}.ffn_down.weight", (n_ff, n_embd), mixed(more, n_ff))


def ffn_moe(s: ModelSpec, i: int, n_embd: int, n_ff_exp: int, n_expert: int, more: bool) -> None:
    s.t(f"blk.{i}.ffn_gate_inp.weight", (n_embd, n_expert))
    s.tq(f"blk.{i}.ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), Q.Q4_K)
    s.tq(f"blk.{i}.ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), Q.Q4_K)
    s.tq(f"blk.{i}.ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), mixed(more, n_ff_exp))


def llama_3_1_8b() -> ModelSpec:
    """meta-llama/Llama-3.1-8B-Instruct (config.json): 32 layers, 4096 wide, GQA 32/8, FFN 14336, vocab 128256."""
    cfg = CONFIGS["llama-3.1-8b"]
    s = ModelSpec("Llama-3.1-8B-Instruct-Q4_K_M.gguf", "llama")
    n_embd, n_layer, n_head, n_head_kv, head = attn_dims(cfg)
    n_ff, n_vocab = cfg_int(cfg, "intermediate_size"), cfg_int(cfg, "vocab_size")
    general(s, "Llama 3.1 8B Instruct", "Llama-3.1", "8B", cfg_int(cfg, "max_position_embeddings"))
    s.a("embedding_length", n_embd)
    s.a("block_count", n_layer)
    s.a("feed_forward_length", n_ff)
    s.a("rope.dimension_count", head)
    s.a("attention.head_count", n_head)
    s.a("attention.head_count_kv", n_head_kv)
    s.a("rope.freq_base", cfg_float(cfg, "rope_theta"))
    s.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "rms_norm_eps"))
    s.a("vocab_size", n_vocab)
    s.tq("token_embd.weight", (n_embd, n_vocab), Q.Q4_K)
    s.t("rope_freqs.weight", (head // 2,))
    for i in range(n_layer):
        more = use_more_bits(i, n_layer)
        s.t(f"blk.{i}.attn_norm.weight", (n_embd,))
        attn_qkv(s, i, n_embd, n_head, n_head_kv, head, more)
        s.tq(f"blk.{i}.attn_output.weight", (n_head * head, n_embd), Q.Q4_K)
        s.t(f"blk.{i}.ffn_norm.weight", (n_embd,))
        ffn_dense(s, i, n_embd, n_ff, more)
    s.t("output_norm.weight", (n_embd,))
    s.tq("output.weight", (n_embd, n_vocab), Q.Q6_K)
    return s


def qwen3_30b_a3b() -> ModelSpec:
    """Qwen/Qwen3-30B-A3B (config.json): 48 layers, 2048 wide, 32/4 heads of 128, 128 experts (8 used) of 768."""
    cfg = CONFIGS["qwen3-30b-a3b"]
    s = ModelSpec("Qwen3-30B-A3B-Q4_K_M.gguf", "qwen3moe")
    n_embd, n_layer, n_head, n_head_kv, head = attn_dims(cfg)
    n_vocab = cfg_int(cfg, "vocab_size")
    n_expert, n_ff_exp = cfg_int(cfg, "num_experts"), cfg_int(cfg, "moe_intermediate_size")
    general(s, "Qwen3 30B A3B", "Qwen3", "30B-A3B", cfg_int(cfg, "max_position_embeddings"))
    s.a("block_count", n_layer)
    s.a("embedding_length", n_embd)
    s.a("feed_forward_length", cfg_int(cfg, "intermediate_size"))
    s.a("attention.head_count", n_head)
    s.a("attention.head_count_kv", n_head_kv)
    s.a("rope.freq_base", cfg_float(cfg, "rope_theta"))
    s.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "rms_norm_eps"))
    s.a("expert_used_count", cfg_int(cfg, "num_experts_per_tok"))
    s.a("attention.key_length", head)
    s.a("attention.value_length", head)
    s.a("expert_count", n_expert)
    s.a("expert_feed_forward_length", n_ff_exp)
    s.a("vocab_size", n_vocab)
    s.tq("token_embd.weight", (n_embd, n_vocab), Q.Q4_K)
    for i in range(n_layer):
        more = use_more_bits(i, n_layer)
        s.t(f"blk.{i}.attn_norm.weight", (n_embd,))
        attn_qkv(s, i, n_embd, n_head, n_head_kv, head, more)
        s.tq(f"blk.{i}.attn_output.weight", (n_head * head, n_embd), Q.Q4_K)
        s.t(f"blk.{i}.attn_q_norm.weight", (head,))
        s.t(f"blk.{i}.attn_k_norm.weight", (head,))
        s.t(f"blk.{i}.ffn_norm.weight", (n_embd,))
        ffn_moe(s, i, n_embd, n_ff_exp, n_expert, more)
    s.t("output_norm.weight", (n_embd,))
    s.tq("output.weight", (n_embd, n_vocab), Q.Q6_K)
    return s


def gemma_3_12b() -> ModelSpec:
    """google/gemma-3-12b-it (config.json): 48 layers, 3840 wide, 16/8 heads of 256, FFN 15360, window 1024,
    5 local : 1 global layers, tied embeddings (no output.weight), vocab 262208."""
    s = ModelSpec("gemma-3-12b-it-Q4_K_M.gguf", "gemma3")
    n_layer, n_embd, n_head, n_head_kv, head, n_ff, n_vocab = 48, 3840, 16, 8, 256, 15360, 262208
    general(s, "Gemma 3 12b It", "gemma-3", "12B", 131072)
    s.a("embedding_length", n_embd)
    s.a("block_count", n_layer)
    s.a("feed_forward_length", n_ff)
    s.a("attention.head_count", n_head)
    s.a("attention.head_count_kv", n_head_kv)
    s.a("attention.key_length", head)
    s.a("attention.value_length", head)
    s.a("attention.layer_norm_rms_epsilon", 1e-6)
    s.a("rope.freq_base", 1000000.0)
    s.a("rope.scaling.type", "linear")
    s.a("rope.scaling.factor", 8.0)
    s.a("attention.sliding_window", 1024)
    s.a("vocab_size", n_vocab)
    s.tq("token_embd.weight", (n_embd, n_vocab), Q.Q6_K)
    for i in range(n_layer):
        more = use_more_bits(i, n_layer)
        s.t(f"blk.{i}.attn_norm.weight", (n_embd,))
        attn_qkv(s, i, n_embd, n_head, n_head_kv, head, more)
        s.t(f"blk.{i}.attn_q_norm.weight", (head,))
        s.t(f"blk.{i}.attn_k_norm.weight", (head,))
        s.tq(f"blk.{i}.attn_output.weight", (n_head * head, n_embd), Q.Q4_K)
        s.t(f"blk.{i}.post_attention_norm.weight", (n_embd,))
        s.t(f"blk.{i}.ffn_norm.weight", (n_embd,))
        ffn_dense(s, i, n_embd, n_ff, more)
        s.t(f"blk.{i}.post_ffw_norm.weight", (n_embd,))
    s.t("output_norm.weight", (n_embd,))
    return s


def gemma_3_12b_mmproj() -> ModelSpec:
    """The Gemma 3 vision tower (SigLIP so400m, 27 layers, 1152 wide, FFN 4304, 896 px images, 14 px patches)
    with the gemma3 projector into the 3840-wide text model (`tools/mtmd/clip.cpp`, PROJECTOR_TYPE_GEMMA3).
    The tower is Gemma 3 27B's; only the projection width differs."""
    cfg = {**MMPROJ_CONFIGS["mmproj-gemma-3-27b"], "text_hidden_size": 3840}
    s = ModelSpec("mmproj-gemma-3-12b-it-F16.gguf", "clip")
    n_embd, image, patch, text = (
        cfg_int(cfg, "hidden_size"),
        cfg_int(cfg, "image_size"),
        cfg_int(cfg, "patch_size"),
        3840,
    )
    s.s("general.type", "mmproj")
    s.s("general.name", "Gemma 3 12b It")
    s.u32("general.file_type", LlamaFileType.MOSTLY_F16)
    s.b("clip.has_vision_encoder", True)
    s.s("clip.projector_type", str(cfg["projector_type"]))
    s.b("clip.use_gelu", True)
    s.u32("clip.vision.image_size", image)
    s.u32("clip.vision.patch_size", patch)
    s.u32("clip.vision.embedding_length", n_embd)
    s.u32("clip.vision.feed_forward_length", cfg_int(cfg, "intermediate_size"))
    s.u32("clip.vision.projection_dim", text)
    s.u32("clip.vision.block_count", cfg_int(cfg, "num_hidden_layers"))
    s.u32("clip.vision.attention.head_count", cfg_int(cfg, "num_attention_heads"))
    s.f32("clip.vision.attention.layer_norm_epsilon", cfg_float(cfg, "layer_norm_eps"))
    s.kv.append(("clip.vision.image_mean", [0.5, 0.5, 0.5], GGUFValueType.ARRAY, GGUFValueType.FLOAT32))
    s.kv.append(("clip.vision.image_std", [0.5, 0.5, 0.5], GGUFValueType.ARRAY, GGUFValueType.FLOAT32))
    n_pos = (image // patch) ** 2
    s.tq("mm.input_projection.weight", (text, n_embd), Q.F16)
    s.t("mm.soft_emb_norm.weight", (n_embd,))
    s.tq("v.patch_embd.weight", (patch, patch, 3, n_embd), Q.F16)
    s.t("v.patch_embd.bias", (n_embd,))
    s.tq("v.position_embd.weight", (n_embd, n_pos), Q.F16)
    vit_blocks(s, cfg, ln_bias=True, gated=False)
    s.t("v.post_ln.weight", (n_embd,))
    s.t("v.post_ln.bias", (n_embd,))
    return s


def deepseek_v2_lite() -> ModelSpec:
    """deepseek-ai/DeepSeek-V2-Lite-Chat (config.json): 27 layers, 2048 wide, 16 heads, MLA with kv_lora_rank 512
    and a 64-wide rope part (qk_nope 128, v 128), no q LoRA; 64 routed experts (6 used) of 1408 plus 2 shared, the
    first layer dense (FFN 10944). Written as current converters do: K/V heads 1, key 576, value 512, split k_b/v_b."""
    cfg = CONFIGS["deepseek-v2-lite"]
    s = ModelSpec("DeepSeek-V2-Lite-Chat-Q4_K_M.gguf", "deepseek2")
    n_layer, n_embd, n_head = (
        cfg_int(cfg, "num_hidden_layers"),
        cfg_int(cfg, "hidden_size"),
        cfg_int(cfg, "num_attention_heads"),
    )
    n_vocab, n_ff = cfg_int(cfg, "vocab_size"), cfg_int(cfg, "intermediate_size")
    kv_lora, rope = cfg_int(cfg, "kv_lora_rank"), cfg_int(cfg, "qk_rope_head_dim")
    nope, v_head = cfg_int(cfg, "qk_nope_head_dim"), cfg_int(cfg, "v_head_dim")
    n_expert, n_shared, n_ff_exp = (
        cfg_int(cfg, "n_routed_experts"),
        cfg_int(cfg, "n_shared_experts"),
        cfg_int(cfg, "moe_intermediate_size"),
    )
    n_dense = cfg_int(cfg, "first_k_dense_replace")
    general(s, "DeepSeek V2 Lite Chat", "DeepSeek-V2-Lite", "16B", cfg_int(cfg, "max_position_embeddings"))
    s.a("block_count", n_layer)
    s.a("embedding_length", n_embd)
    s.a("feed_forward_length", n_ff)
    s.a("attention.head_count", n_head)
    s.a("attention.head_count_kv", 1)
    s.a("rope.freq_base", cfg_float(cfg, "rope_theta"))
    s.a("attention.layer_norm_rms_epsilon", cfg_float(cfg, "rms_norm_eps"))
    s.a("expert_used_count", cfg_int(cfg, "num_experts_per_tok"))
    s.a("leading_dense_block_count", n_dense)
    s.a("vocab_size", n_vocab)
    s.a("attention.kv_lora_rank", kv_lora)
    s.a("attention.key_length", kv_lora + rope)
    s.a("attention.value_length", kv_lora)
    s.a("attention.key_length_mla", nope + rope)
    s.a("attention.value_length_mla", v_head)
    s.a("expert_feed_forward_length", n_ff_exp)
    s.a("expert_count", n_expert)
    s.a("expert_shared_count", n_shared)
    s.a("expert_weights_scale", cfg_float(cfg, "routed_scaling_factor"))
    s.a("rope.dimension_count", rope)
    s.a("rope.scaling.type", "yarn")
    s.a("rope.scaling.factor", 40.0)
    s.a("rope.scaling.original_context_length", 4096)
    s.a("rope.scaling.yarn_log_multiplier", 0.0707)
    s.tq("token_embd.weight", (n_embd, n_vocab), Q.Q4_K)
    for i in range(n_layer):
        more = use_more_bits(i, n_layer)
        s.t(f"blk.{i}.attn_norm.weight", (n_embd,))
        s.tq(f"blk.{i}.attn_q.weight", (n_embd, n_head * (nope + rope)), Q.Q4_K)
        s.tq(f"blk.{i}.attn_kv_a_mqa.weight", (n_embd, kv_lora + rope), Q.Q4_K)
        s.t(f"blk.{i}.attn_kv_a_norm.weight", (kv_lora,))
        s.tq(f"blk.{i}.attn_k_b.weight", (nope, kv_lora, n_head), fallback(Q.Q4_K, nope))
        s.tq(f"blk.{i}.attn_v_b.weight", (kv_lora, v_head, n_head), Q.Q6_K if more else Q.Q4_K)
        s.tq(f"blk.{i}.attn_output.weight", (n_head * v_head, n_embd), Q.Q4_K)
        s.t(f"blk.{i}.ffn_norm.weight", (n_embd,))
        if i < n_dense:
            ffn_dense(s, i, n_embd, n_ff, more)
            continue
        n_ff_sh = n_ff_exp * n_shared
        ffn_moe(s, i, n_embd, n_ff_exp, n_expert, more)
        s.tq(f"blk.{i}.ffn_gate_shexp.weight", (n_embd, n_ff_sh), Q.Q4_K)
        s.tq(f"blk.{i}.ffn_up_shexp.weight", (n_embd, n_ff_sh), Q.Q4_K)
        s.tq(f"blk.{i}.ffn_down_shexp.weight", (n_ff_sh, n_embd), mixed(more, n_ff_sh))
    s.t("output_norm.weight", (n_embd,))
    s.tq("output.weight", (n_embd, n_vocab), Q.Q6_K)
    return s


#: each builds one example; its ModelSpec.name is the file name
EXAMPLES: tuple[Callable[[], ModelSpec], ...] = (
    llama_3_1_8b,
    qwen3_30b_a3b,
    gemma_3_12b,
    gemma_3_12b_mmproj,
    deepseek_v2_lite,
)


def write_header_only(spec: ModelSpec, path: Path) -> int:
    """Write metadata + tensor infos + padding to the data offset; returns the bytes the tensor data would take."""
    header_only = (HEADER_ONLY_KEY, True, GGUFValueType.BOOL, None)
    header_bytes, align, data = write_header(spec, path, [header_only])
    os.truncate(path, (header_bytes + align - 1) // align * align)  # the padding: zeros up to the data offset
    return data


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    for make in EXAMPLES:
        spec = make()
        path = out / spec.name
        data = write_header_only(spec, path)
        size = path.stat().st_size
        print(
            f"{path.name}: {size / 1024:.1f} KiB header, {data / (1 << 30):.2f} GiB of tensor data declared"
        )
        if size >= 200 * 1024:
            print(f"error: {path.name} is over 200 KB", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
