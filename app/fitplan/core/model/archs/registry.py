"""The architecture registry: one frozen `ArchTraits` record per architecture llama.cpp 515e85511 knows.

Every fact fitplan uses about an architecture is a trait, declared here once, next to the llama.cpp file and
function it mirrors (paths relative to the llama.cpp root), grouped by stage: `load_arch_hparams` (hyper-parameters),
`create_memory` (memory layout), the graph builders (compute buffers) and the forks. Adding an architecture means
adding its name to `KNOWN_ARCHITECTURES` and to the trait tables that apply, in this file only.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from fitplan.core.gguf.header import MMPROJ_ARCHITECTURE
from fitplan.core.model.archs.rules import (
    ArchRecurrent,
    ArchSwa,
    HybridAttnFilter,
    MemoryLayout,
    RecurrentRule,
    SwaRule,
    SwaType,
)
from fitplan.core.model.archs.traits import (
    ArchTraits,
    ForkTraits,
    GraphTraits,
    HcHead,
    HParamTraits,
    IndexerRule,
    KpoolGraph,
    KpoolSource,
    KvSharing,
    MemoryTraits,
)

#: Every architecture name of src/llama-arch.cpp:LLM_ARCH_NAMES ("clip" is the mmproj pseudo-architecture).
KNOWN_ARCHITECTURES: frozenset[str] = frozenset(
    {
        "clip", "llama", "llama4", "deci", "falcon", "grok", "gpt2", "gptj", "gptneox", "mpt", "baichuan",
        "starcoder", "refact", "bert", "modern-bert", "nomic-bert", "nomic-bert-moe", "neo-bert", "jina-bert-v2",
        "jina-bert-v3", "eurobert", "bloom", "stablelm", "qwen", "qwen2", "qwen2moe", "qwen2vl", "qwen3", "qwen3moe",
        "qwen3next", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "clef", "qwen4exp", "phi2", "phi3", "phimoe",
        "plamo", "plamo2", "plamo3", "codeshell", "orion", "internlm2", "minicpm", "minicpm3", "gemma", "gemma2",
        "gemma3", "gemma3n", "gemma4", "gemma4-assistant", "gemma-embedding", "starcoder2", "mamba", "mamba2",
        "maple", "jamba", "falcon-h1", "xverse", "command-r", "cohere2", "cohere2moe", "dbrx", "olmo", "olmo2",
        "olmoe", "muse-glimmer", "openelm", "arctic", "deepseek", "deepseek2", "deepseek2-ocr", "deepseek32",
        "deepseek4", "chatglm", "glm4", "glm4moe", "glm-dsa", "bitnet", "t5", "t5encoder", "jais", "jais2",
        "nemotron", "nemotron_h", "nemotron_h_moe", "exaone", "exaone4", "exaone-moe", "rwkv6", "rwkv6qwen2",
        "rwkv7", "arwkv7", "granite", "granitemoe", "granitehybrid", "graniteswitch", "granite_swa", "chameleon",
        "wavtokenizer-dec", "plm", "bailingmoe", "bailingmoe2", "bailingmoe3", "dots1", "dots3note", "arcee",
        "afmoe", "laguna", "ernie4_5", "ernie4_5-moe", "hunyuan-moe", "hunyuan-dense", "hunyuan_vl", "hy_v3",
        "hy_v4", "smollm3", "gpt-oss", "lfm2", "lfm2moe", "dream", "smallthinker", "llada", "llada-moe",
        "seed_oss", "grovemoe", "apertus", "minimax-01", "hrm_text", "minimax-m2", "minimax-m3", "cogvlm", "rnd1",
        "pangu-embedded", "mistral3", "eagle3", "dflash", "mistral4", "paddleocr", "mimo2", "step35", "spark2_5",
        "llama-embed", "maincoder", "kimi-linear", "kimi-k3", "glm5-next", "talkie", "mellum", "nanbeige",
        "qwen3tts", "pockettts",
    }
)  # fmt: skip

#: src/llama-model.cpp:llama_model::create_memory returns nullptr (no KV cache, no recurrent state).
NO_MEMORY_ARCHS: frozenset[str] = frozenset(
    {
        "bert", "jina-bert-v2", "jina-bert-v3", "nomic-bert", "nomic-bert-moe", "neo-bert", "eurobert",
        "wavtokenizer-dec", "modern-bert", "gemma-embedding", "dream", "llada", "llada-moe", "rnd1", "clef",
    }
)  # fmt: skip

#: src/llama-arch.cpp:llm_arch_is_recurrent: every trunk layer holds recurrent state, no KV cache.
RECURRENT_ARCHS: frozenset[str] = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})

#: src/llama-arch.cpp:llm_arch_is_hybrid: some layers attend (KV), others are recurrent.
HYBRID_ARCHS: frozenset[str] = frozenset(
    {
        "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe",
        "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe", "qwen4exp",
        "deepseek4", "minimax-01",
    }
)  # fmt: skip

#: src/llama-arch.cpp:llm_arch_supports_rs_rollback: n_rs_seq may be > 0 (speculative rollback snapshots).
RS_ROLLBACK_ARCHS: frozenset[str] = frozenset(
    {
        "kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe",
        "lfm2", "lfm2moe", "bailingmoe3",
    }
)  # fmt: skip


#: Archs whose load_arch_hparams reads `{arch}.attention.key_length_mla` / `value_length_mla` (src/models/*.cpp).
#: For every other arch those keys are ignored, so the model never runs MLA.
MLA_KEY_ARCHS: frozenset[str] = frozenset(
    {
        "deepseek2", "mistral4", "deepseek32", "glm-dsa", "dots3note", "bailingmoe3", "kimi-linear", "kimi-k3",
        "glm5-next", "hy_v4",
    }
)  # fmt: skip

#: src/llama-context.cpp:llama_init_from_model: "flash_attn is not compatible with Grok - forcing off".
FLASH_ATTN_FORCED_OFF_ARCHS: frozenset[str] = frozenset({"grok"})

#: Archs whose memory module llama.cpp builds in a way fitplan only approximates (the listed caches are
#: modelled as plain KV / recurrent caches; see `unmodelled_memory`).
APPROXIMATE_MEMORY_ARCHS: dict[str, str] = {
    # src/llama-model.cpp:create_memory: shares the target model's KV cache
    "gemma4-assistant": "gemma4-assistant shares the target model's KV cache",
    "dflash": "dflash draft caches are not modelled",
}

#: SWA facts per arch, from each src/models/<arch>.cpp:load_arch_hparams (and load_swa_pattern).
ARCH_SWA: dict[str, ArchSwa] = {
    "gemma2": ArchSwa(SwaRule.ALWAYS, 2, default_window=4096),  # models/gemma2.cpp
    "gemma3": ArchSwa(SwaRule.IF_WINDOW, 6),  # models/gemma3.cpp
    "gemma3n": ArchSwa(SwaRule.ALWAYS, 5),  # models/gemma3n.cpp
    "gemma4": ArchSwa(SwaRule.ARRAY),  # models/gemma4.cpp
    "gemma4-assistant": ArchSwa(SwaRule.ARRAY),  # models/gemma4-assistant.cpp
    "gemma-embedding": ArchSwa(SwaRule.ALWAYS, 6, swa_type=SwaType.SYMMETRIC),  # models/gemma-embedding.cpp
    "modern-bert": ArchSwa(SwaRule.IF_WINDOW, 3, dense_first=True, swa_type=SwaType.SYMMETRIC),
    "cohere2": ArchSwa(SwaRule.ALWAYS, 4),  # models/cohere2.cpp
    "cohere2moe": ArchSwa(SwaRule.ALWAYS, 4, dense_first=True),  # models/cohere2moe.cpp
    "gpt-oss": ArchSwa(SwaRule.ALWAYS, 2),  # models/openai-moe.cpp
    "llama4": ArchSwa(SwaRule.LLAMA4, 4, swa_type=SwaType.CHUNKED, forced_window=8192),  # models/llama4.cpp
    "exaone4": ArchSwa(SwaRule.EXAONE4, 4, default_window=4096),  # models/exaone4.cpp
    "exaone-moe": ArchSwa(SwaRule.ALWAYS, 4, default_window=128),  # models/exaone-moe.cpp
    "olmo2": ArchSwa(SwaRule.IF_WINDOW, 4),  # models/olmo2.cpp
    "afmoe": ArchSwa(SwaRule.IF_WINDOW, 4),  # models/afmoe.cpp
    "mellum": ArchSwa(SwaRule.IF_WINDOW, 4),  # models/mellum.cpp
    "smallthinker": ArchSwa(
        SwaRule.IF_WINDOW, 4, dense_first=True, forced_window=4096
    ),  # models/smallthinker.cpp
    "laguna": ArchSwa(SwaRule.IF_WINDOW, 4, dense_first=True),  # models/laguna.cpp
    "plamo3": ArchSwa(SwaRule.IF_WINDOW, 8),  # models/plamo3.cpp
    "muse-glimmer": ArchSwa(SwaRule.ALWAYS, 4),  # models/muse-glimmer.cpp
    "maple": ArchSwa(SwaRule.ARRAY),  # models/maple.cpp
    "mimo2": ArchSwa(SwaRule.ARRAY),  # models/mimo2.cpp
    "step35": ArchSwa(SwaRule.ARRAY),  # models/step35.cpp
    "spark2_5": ArchSwa(SwaRule.ARRAY),  # models/spark2-5.cpp
    "granite_swa": ArchSwa(SwaRule.ARRAY),  # models/granite-swa.cpp
    "dots3note": ArchSwa(SwaRule.ARRAY),  # models/dots3note.cpp
    "lfm2": ArchSwa(SwaRule.NON_RECURRENT),  # models/lfm2.cpp
    "deepseek4": ArchSwa(SwaRule.ALL_LAYERS),  # models/deepseek4.cpp: set_swa_pattern(0) + nextn layers
    # phi3 reads sliding_window but forces swa_type NONE (models/phi3.cpp), so it is not listed.
}

#: Recurrent-layer facts per arch, from each src/models/<arch>.cpp:load_arch_hparams.
ARCH_RECURRENT: dict[str, ArchRecurrent] = {
    **{a: ArchRecurrent(RecurrentRule.ALL) for a in RECURRENT_ARCHS},
    "falcon-h1": ArchRecurrent(RecurrentRule.ALL),  # models/falcon-h1.cpp: std::fill(is_recr, true)
    "jamba": ArchRecurrent(RecurrentRule.HEAD_KV_ZERO),
    "granitehybrid": ArchRecurrent(RecurrentRule.HEAD_KV_ZERO),
    "plamo2": ArchRecurrent(RecurrentRule.HEAD_KV_ZERO),
    "lfm2": ArchRecurrent(RecurrentRule.HEAD_KV_ZERO),
    "lfm2moe": ArchRecurrent(RecurrentRule.HEAD_KV_ZERO),
    "kimi-linear": ArchRecurrent(RecurrentRule.HEAD_KV_ZERO),
    "kimi-k3": ArchRecurrent(RecurrentRule.HEAD_KV_ZERO),
    "bailingmoe3": ArchRecurrent(RecurrentRule.HEAD_KV_ZERO),
    "glm5-next": ArchRecurrent(RecurrentRule.HEAD_KV_ZERO_ALL),
    "nemotron_h": ArchRecurrent(RecurrentRule.NEMOTRON),
    "nemotron_h_moe": ArchRecurrent(RecurrentRule.NEMOTRON),  # inherits llama_model_nemotron_h
    "qwen3next": ArchRecurrent(RecurrentRule.INTERVAL, 4),
    "qwen35": ArchRecurrent(RecurrentRule.INTERVAL, 4),
    "qwen35moe": ArchRecurrent(RecurrentRule.INTERVAL, 4),
    "clef": ArchRecurrent(RecurrentRule.INTERVAL, 4),  # inherits llama_model_qwen35 (no memory module)
    "qwen4exp": ArchRecurrent(RecurrentRule.INTERVAL, 0),  # interval required (qwen4exp_require_nonzero)
    "minimax-01": ArchRecurrent(RecurrentRule.INTERVAL, 8),
}

# -- src/models/<arch>.cpp:load_arch_hparams ----------------------------------------------------------------------

#: Archs whose load_arch_hparams does not read `{arch}.ssm.group_count` (so n_group stays 0).
NO_SSM_GROUP_ARCHS = frozenset({"mamba", "jamba"})
#: Archs whose load_arch_hparams reads `{arch}.wkv.head_size`.
WKV_ARCHS = frozenset({"rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
#: Archs whose load_arch_hparams reads `{arch}.shortconv.l_cache`.
SHORTCONV_ARCHS = frozenset({"lfm2", "lfm2moe"})
#: Archs whose load_arch_hparams reads `{arch}.kda.head_dim`.
KDA_ARCHS = frozenset({"kimi-linear", "kimi-k3", "bailingmoe3", "glm5-next"})
#: Archs whose hparams.causal_attn is forced false in load_arch_hparams.
NON_CAUSAL_ARCHS = frozenset({"dream", "llada", "llada-moe", "rnd1", "gemma-embedding"})
#: src/llama-model.cpp:llama_model_has_encoder.
ENCODER_ARCHS = frozenset({"t5", "t5encoder"})
#: src/llama-model.cpp:load_hparams: Hunyuan models with expert_count <= 1 are dense.
DENSE_SINGLE_EXPERT_ARCHS = frozenset({"hunyuan_vl", "hunyuan-dense"})
#: models/kimi-k3.cpp, models/glm5-next.cpp: "the MLA cache holds the latent" (head_v = kv_lora_rank).
HEAD_V_KV_LORA_ARCHS = frozenset({"kimi-k3", "glm5-next"})
#: models/deepseek4.cpp and models/qwen4exp.cpp: n_embd_out_impl = hyper_connection.count * n_embd.
HYPER_CONNECTION_OUTPUT_ARCHS = frozenset({"deepseek4", "qwen4exp"})
#: models/deepseek4.cpp: the MTP block counts only when its eh_proj tensor is present; per-layer compress ratios;
#: the graph's compressed attention (CSA with the lightning indexer, HCA) and its graph inputs
#: (src/llama-graph.cpp `build_inp_dsv4`), see fitplan.core.memory.compute `Dsv4Attention`.
DSV4_ARCHS = frozenset({"deepseek4"})
#: models/plamo2.cpp re-reads key/value_length (also when head_count is absent).
REREAD_HEAD_LENGTH_ARCHS = frozenset({"plamo2"})
#: models/nanbeige.cpp: num_loops repeats the physical layers.
LAYER_LOOP_ARCHS = frozenset({"nanbeige"})
#: models/granite-switch.cpp: a single-head router attention layer is appended at index n_real.
ROUTER_LAYER_ARCHS = frozenset({"graniteswitch"})
#: src/llama-hparams.cpp:has_kv / n_layer_kv_from_start: models/gemma3n.cpp (20), models/gemma4.cpp (shared_kv_layers).
KV_SHARING: Mapping[str, KvSharing] = {
    "gemma3n": KvSharing.FROM_LAYER_20,
    "gemma4": KvSharing.SHARED_KV_LAYERS,
}
#: models/minimax-01.cpp: n_embd_head_la = key_length.
LINEAR_ATTN_KEY_HEAD_ARCHS = frozenset({"minimax-01"})
#: src/llama-hparams.cpp:ple_conv_state, models/qwen4exp.cpp: the PLE conv history.
PLE_CONV_ARCHS = frozenset({"qwen4exp"})


# -- src/llama-model.cpp:llama_model::create_memory ----------------------------------------------------------------

#: create_memory builds llama_kv_cache_dsa (deepseek32, glm-dsa, hy_v4), llama_kv_cache_dsa_iswa (dots3note),
#: llama_kv_cache_msa (minimax-m3) or llama_kv_cache_dsv4 (deepseek4) for these.
SPECIAL_LAYOUTS: Mapping[str, MemoryLayout] = {
    "deepseek32": MemoryLayout.DSA,
    "glm-dsa": MemoryLayout.DSA,
    "hy_v4": MemoryLayout.DSA,
    "dots3note": MemoryLayout.DSA_ISWA,
    "minimax-m3": MemoryLayout.MSA,
    "deepseek4": MemoryLayout.DSV4,
}
#: create_memory: filter_attn of the hybrid branch.
HYBRID_FILTERS: Mapping[str, HybridAttnFilter] = {
    "falcon-h1": HybridAttnFilter.ALL,
    "nemotron_h": HybridAttnFilter.NEMOTRON,
    "nemotron_h_moe": HybridAttnFilter.NEMOTRON,
    **{
        a: HybridAttnFilter.TRUNK_NOT_RECURRENT
        for a in ("qwen3next", "qwen35", "qwen35moe", "qwen4exp", "minimax-01", "glm5-next")
    },
}
#: DSA/MSA caches pass no layer filter on hy_v4 and minimax-m3 (the others keep the trunk with NextN layers).
NO_MLA_TRUNK_FILTER_ARCHS = frozenset({"hy_v4", "minimax-m3"})
#: create_memory filter_lid / filter_idx: which layers carry an indexer key cache.
INDEXER_RULES: Mapping[str, IndexerRule] = {
    "deepseek32": IndexerRule.ALL,
    "glm-dsa": IndexerRule.GLM_DSA,
    "hy_v4": IndexerRule.TOP_K_TYPED,
    "dots3note": IndexerRule.TYPED,
    "minimax-m3": IndexerRule.AFTER_DENSE,
    "glm5-next": IndexerRule.ATTENTION_TYPED,
    "qwen4exp": IndexerRule.ATTENTION_IF_HEAD,
    "deepseek4": IndexerRule.DSV4_CSA,
}
#: Hybrid archs whose memory is llama_memory_hybrid_idx: an indexer K cache follows the attention and recurrent
#: caches, with `indexer_kpool_row` values per row when k-pooling is on (src/llama-memory-hybrid-idx.cpp;
#: glm5-next: key | gate | pooled = 3 (hparams default), qwen4exp: key | pooled = 2).
KPOOL: Mapping[str, tuple[KpoolSource, int]] = {
    "glm5-next": (KpoolSource.INDEXER_KPOOL, 3),
    "qwen4exp": (KpoolSource.COMPRESS_RATIOS, 2),
}
#: src/llama-context.cpp: deepseek4 refuses different K and V cache types (as every MLA model does).
SAME_KV_TYPE_ARCHS = frozenset({"deepseek4"})
#: src/llama-context.cpp:output_reserve: the encoder-decoder t5 keeps its embeddings in the output buffer.
ENCODER_OUTPUT_ARCHS = frozenset({"t5"})


# -- src/models/<arch>.cpp graph builders (compute buffers; see fitplan.core.memory.compute) -----------------------

#: Blocks run attention and FFN in parallel from one norm output and add both to the residual
#: (src/models/command-r.cpp, cohere2.cpp, phi2.cpp): the attention output stays allocated through the FFN.
PARALLEL_ATTN_FFN_ARCHS = frozenset({"command-r", "cohere2", "cohere2moe", "plamo", "phi2"})
#: An FFN that reads the layer's input or its attention norm, not the attention's output (src/models/falcon.cpp:
#: build_ffn(attn_norm); arctic.cpp: the MoE branch from the layer input): the graph runs it while the attention's
#: output waits for the residual sum, only that output staying live through it.
FFN_BESIDE_ATTENTION_ARCHS = frozenset({"falcon", "arctic"})
#: The graph only builds the dense FFN (src/models/refact.cpp calls build_ffn with ffn_up, ffn_gate and ffn_down):
#: a MoE file's expert matrices are loaded but never multiplied, so such layers add no intermediates.
DENSE_FFN_GRAPH_ARCHS = frozenset({"refact"})
#: `llm_graph_context::build_moe_ffn`: llama4 scales the FFN input by the router weights before the experts, a
#: `[n_embd, n_expert_used, n_tok]` copy that stays live while gate and up run.
WEIGHT_BEFORE_FFN_ARCHS = frozenset({"llama4"})
#: The (normed) input embeddings stay live through every layer for a skip connection added to each layer's output
#: (src/models/talkie.cpp `embd_skip`; src/models/hrm-text.cpp keeps the high-cycle state zH live through the
#: low-cycle stacks, which add it to their input): one more `[n_embd, n_tok]` block in the layer phase.
EMBD_SKIP_ARCHS = frozenset({"talkie", "hrm_text"})
#: The allocator's peaks show no two-block hole under the FFN: the blocks the attention frees are two separate
#: one-block holes (openelm's per-layer head counts, plamo3's and hrm_text's attention tensors differ from the
#: hidden size), so the FFN's last intermediate goes on top instead of into the hole. The cacheless diffusion
#: models' graphs (src/models/dream.cpp, llada.cpp) allocate their mask `self_kq_mask` between the two: the smoke
#: models' peak at c512 has the freed blocks at 0.5-1.0 and 1.51-2.01 MiB with the mask between them, and gate, up
#: and the GLU output on top (5.26 MiB). afmoe normalizes the attention output before the residual is added
#: (src/models/afmoe.cpp, llm_build_afmoe: `attn_post_norm`, then `ffn_inp = ggml_add(cur, inpSA)`): the FFN input
#: lands between the FFN norm's block and the layer input, and the block above the layer input is the buffer's
#: free end. The smoke model's peak at c8192 with flash attention: `ffn_norm` freed at 9.78-10.28 MiB, `ffn_inp`
#: (node_40) and `node_2` above it, up and the GLU output on top (12.78 MiB).
NO_FFN_HOLE_ARCHS = frozenset({"openelm", "plamo3", "hrm_text", "dream", "llada", "afmoe"})
#: On a GPU the attention norm's block is still taken when the flash-attention output is allocated, so the output
#: goes one block up and the output projection takes the bottom block: the FFN norm then lands beside the freed
#: embeddings, a two-block hole on the first GPU too (compute `ffn_layer`'s `cast_hole`). plamo3 normalizes Q as a
#: new tensor (src/models/plamo3.cpp: Q is a view of the fused QKV output, `build_norm` cannot work in place), which
#: takes the attention norm's freed block and is read by the attention; muse-glimmer's attention gate reads the
#: attention norm after the attention (src/models/muse-glimmer.cpp: `attn_gate_proj` from `attn_norm`, applied to
#: the attention output). The allocator's lists on the CUDA stand-in at c512: `node_28` (plamo3) and `node_38`
#: (muse-glimmer) at 0, the GLU output in the freed blocks above, 4.52 MiB each.
ATTN_OUT_BELOW_ARCHS = frozenset({"plamo3", "muse-glimmer"})
#: `llm_arch_supports_mixed_batch` (src/llama-arch.cpp) is false: `llm_graph_context::build_inp_embd` builds no
#: mixed-batch inputs (`inp_mixed_embd` and its token rows), so the first backend's layer phase holds three
#: blocks, not five: the embeddings input, the FFN input and a one-block hole (the freed token-embedding rows
#: `embd`, where the FFN norm output goes). The allocator's peak on the cogvlm smoke model at c512: `inp_embd`, the
#: hole at 1.01-1.51 MiB, `ffn_inp` (node_21) and gate, up and the GLU output on top (4.26 MiB); DeepSeek-V4 counts
#: the same three blocks (`DSV4_BLOCKS` in compute).
NO_MIXED_BATCH_ARCHS = frozenset(
    {"cogvlm", "deepseek4", "graniteswitch", "eagle3", "dflash", "gemma4-assistant"}
)
#: The attention compresses K/V through `attn_kv_a_mqa` without MLA's absorbed query (src/models/minicpm3.cpp):
#: Q, the compressed KV with its rope part and the normed latent are live together.
KV_A_MQA_ARCHS = frozenset({"minicpm3"})
#: A fused QKV projection and no rope (src/models/{gpt2,bloom,jais,mpt,starcoder}.cpp): Q, K and V are views of
#: the projection's output, which therefore stays live through the attention.
NO_ROPE_QKV_ARCHS = frozenset({"gpt2", "bloom", "jais", "mpt", "starcoder"})
#: The residual is added into the layer input, `ggml_add(prev_cur, cur)` (src/models/lfm2.cpp, llm_build_lfm2;
#: src/models/jamba.cpp: `ggml_add(inpL, cur)`): the sum takes the input's block, the attention output's block is
#: freed, and the FFN norm leaves a one-block hole instead of two.
RESIDUAL_INTO_INPUT_ARCHS = frozenset({"lfm2", "lfm2moe", "jamba"})
#: DeepSeek-V3.2's lightning indexer graph (src/models/deepseek32.cpp and its copies).
DSA_ARCHS = frozenset({"deepseek32", "glm-dsa", "dots3note", "hy_v4"})
#: Recurrent layers are Mamba-1 / Mamba-2 blocks (src/models/graph-context-mamba.cpp); gated delta nets, RWKV,
#: short convolutions and linear attention have other graphs.
MAMBA_ARCHS = frozenset(
    {"mamba", "mamba2", "jamba", "falcon-h1", "nemotron_h", "nemotron_h_moe", "granitehybrid", "plamo2"}
)
#: PLaMo-2's Mamba block (src/models/plamo2.cpp, `build_plamo2_mamba_layer`): a permuted copy of the input
#: projection, x split off as its own copy, B, C and dt normed out of one projection.
PLAMO2_MAMBA_ARCHS = frozenset({"plamo2"})
#: Lightning-attention layers (src/models/minimax-01.cpp), their recurrent layers.
LIGHTNING_ARCHS = frozenset({"minimax-01"})
#: MLA attention concatenates K after the absorbed Q (src/models/kimi-linear.cpp, kimi-k3.cpp).
KIMI_MLA_ARCHS = frozenset({"kimi-linear", "kimi-k3"})
#: The absorbed MLA query of src/models/deepseek2.cpp (llama_model_deepseek2::graph; mistral4 reuses it): q, the
#: absorbed q_nope and the roped q_pe, then their concatenation Qcur, then K's compressed KV. bailingmoe3's MLA
#: layers build the same sequence (src/models/bailingmoe3.cpp; the allocator's list on the CUDA stand-in at c512:
#: `q_a`, `q_b`, the absorbed `node_12`, the roped `node_15`, their concatenation `node_16`, then the compressed
#: KV `node_17`, 5.27 MiB).
DEEPSEEK2_MLA_ARCHS = frozenset({"deepseek2", "mistral4", "bailingmoe3"})
#: Recurrent layers are gated delta nets (src/models/qwen3next.cpp, qwen35.cpp, qwen35moe.cpp through
#: `llm_build_delta_net_base`), run as one fused `ggml_gated_delta_net` op.
GDN_ARCHS = frozenset({"qwen3next", "qwen35", "qwen35moe"})
#: Indexer query projections (`indexer.attn_q_b`, `indexer.q_proj`: `[n_indexer_head x key_length, n_tok]`) and
#: how many such tensors are live together at the indexer's peak: src/models/deepseek4.cpp ropes the projection
#: into a second tensor (`lid_q`, `lid_q_rope`), qwen4exp.cpp norms it (`build_norm` of the projection),
#: glm5-next.cpp scores the projection itself (`indexer_q` only). The allocator's peaks on the smoke models show
#: exactly these 16 MiB tensors at `-ub 512`.
INDEXER_Q_COPIES: Mapping[str, int] = {"deepseek4": 2, "qwen4exp": 2, "glm5-next": 1}
#: Block-sparse attention (src/models/minimax-m3.cpp, MSA): with flash attention and per-sequence streams the
#: layers after the dense lead build their attention mask per stream from the indexer's top-k blocks.
MSA_ARCHS = frozenset({"minimax-m3"})
#: k-pool sparse attention whose selection is scattered into a mask (`build_indexer_sel` of src/models/qwen4exp.cpp
#: and glm5-next.cpp; glm5-next reads each slot's liveness from its `gather_mask` input).
KPOOL_GRAPHS: Mapping[str, KpoolGraph] = {
    "qwen4exp": KpoolGraph.SCORE_LIVE,
    "glm5-next": KpoolGraph.GATHER_MASK,
}
#: src/llama-kv-cache.cpp (llama_kv_cache constructor): "always create Hadamard rotation tensors for DeepSeek
#: lightning indexers", so src/models/deepseek32.cpp and its copies rotate the indexer's query into a third tensor;
#: src/models/hy-v4.cpp skips the rotation.
INDEXER_ROTATION_ARCHS = frozenset({"deepseek32", "deepseek4", "glm-dsa", "dots3note"})
#: Hyper-connection residual streams `[n_embd x hc, n_tok]` live through the layers (the allocator's peaks on the
#: smoke models): the wide residual (`hc_init` / `l_last`) on all of them, plus, on qwen4exp and glm5-next, a
#: second one: qwen4exp's grouped norm of the streams (`hc_norm`, read again by the inject projection at the
#: combine), glm5-next's second stream tensor next to `hc_init`.
HC_STREAMS: Mapping[str, int] = {"deepseek4": 1, "hy_v4": 1, "qwen4exp": 2, "glm5-next": 2}
HC_HEADS: Mapping[str, HcHead] = {"hy_v4": HcHead.STREAM_VIEWS, "qwen4exp": HcHead.GROUPED_MIX}
#: src/llama-graph.cpp build_moe_ffn: `ggml_prec_set_src(experts, GGML_PREC_F32, 1)` on the experts' down
#: product, which ggml-cuda refuses (ggml-cuda.cu `ggml_backend_cuda_device_supports_op`, MUL_MAT_ID with f32
#: precision): the host runs it.
MOE_DOWN_F32_SRC1_ARCHS = frozenset({"mistral4"})

# -- the forks --------------------------------------------------------------------------------------------------

#: ik_llama.cpp decides MLA by architecture (src/llama.cpp llama_kv_cache_init: is_mla_attn = arch == DEEPSEEK2 ||
#: GLM_DSA || MISTRAL4), so legacy GGUFs without the *_mla keys still get the latent cache.
IK_MLA_ARCHS = frozenset({"deepseek2", "glm-dsa", "mistral4"})


def _layout(arch: str) -> MemoryLayout:
    """src/llama-model.cpp:llama_model::create_memory, by architecture."""
    if arch in NO_MEMORY_ARCHS or arch == MMPROJ_ARCHITECTURE:
        return MemoryLayout.NONE
    if arch in SPECIAL_LAYOUTS:
        return SPECIAL_LAYOUTS[arch]
    if arch in RECURRENT_ARCHS:
        return MemoryLayout.RECURRENT
    if arch in HYBRID_ARCHS:
        return MemoryLayout.HYBRID
    return MemoryLayout.KV


def _hparams(a: str) -> HParamTraits:
    return HParamTraits(
        recurrent=ARCH_RECURRENT.get(a, ArchRecurrent()),
        swa=ARCH_SWA.get(a, ArchSwa()),
        reads_mla_keys=a in MLA_KEY_ARCHS,
        reads_ssm_group_count=a not in NO_SSM_GROUP_ARCHS,
        reads_wkv_head_size=a in WKV_ARCHS,
        reads_shortconv=a in SHORTCONV_ARCHS,
        reads_kda=a in KDA_ARCHS,
        non_causal=a in NON_CAUSAL_ARCHS,
        has_encoder=a in ENCODER_ARCHS,
        nextn_needs_eh_proj=a in DSV4_ARCHS,
        dense_when_single_expert=a in DENSE_SINGLE_EXPERT_ARCHS,
        rereads_head_lengths=a in REREAD_HEAD_LENGTH_ARCHS,
        head_v_is_kv_lora=a in HEAD_V_KV_LORA_ARCHS,
        layer_loops=a in LAYER_LOOP_ARCHS,
        router_layer=a in ROUTER_LAYER_ARCHS,
        kv_sharing=KV_SHARING.get(a, KvSharing.NONE),
        linear_attn_head_is_key=a in LINEAR_ATTN_KEY_HEAD_ARCHS,
        ple_conv_state=a in PLE_CONV_ARCHS,
        hyper_connection_output=a in HYPER_CONNECTION_OUTPUT_ARCHS,
        compressed_layers=a in DSV4_ARCHS,
    )


def _memory(a: str) -> MemoryTraits:
    kpool_source, kpool_row = KPOOL.get(a, (KpoolSource.NONE, 0))
    return MemoryTraits(
        layout=_layout(a),
        hybrid_filter=HYBRID_FILTERS.get(a, HybridAttnFilter.NOT_RECURRENT),
        mla_trunk_filter=a not in NO_MLA_TRUNK_FILTER_ARCHS,
        indexer=INDEXER_RULES.get(a, IndexerRule.NONE),
        kpool_source=kpool_source,
        kpool_row=kpool_row,
        rs_rollback=a in RS_ROLLBACK_ARCHS,
        flash_attn_forced_off=a in FLASH_ATTN_FORCED_OFF_ARCHS,
        same_kv_types=a in SAME_KV_TYPE_ARCHS,
        encoder_output=a in ENCODER_OUTPUT_ARCHS,
        approximate=APPROXIMATE_MEMORY_ARCHS.get(a, ""),
    )


def _graph(a: str) -> GraphTraits:
    return GraphTraits(
        parallel_attn_ffn=a in PARALLEL_ATTN_FFN_ARCHS,
        ffn_beside_attention=a in FFN_BESIDE_ATTENTION_ARCHS,
        dense_ffn_only=a in DENSE_FFN_GRAPH_ARCHS,
        weight_before_ffn=a in WEIGHT_BEFORE_FFN_ARCHS,
        embd_skip=a in EMBD_SKIP_ARCHS,
        no_ffn_hole=a in NO_FFN_HOLE_ARCHS,
        attn_out_below=a in ATTN_OUT_BELOW_ARCHS,
        no_mixed_batch=a in NO_MIXED_BATCH_ARCHS,
        residual_into_input=a in RESIDUAL_INTO_INPUT_ARCHS,
        kv_a_mqa=a in KV_A_MQA_ARCHS,
        no_rope_qkv=a in NO_ROPE_QKV_ARCHS,
        dsa_indexer=a in DSA_ARCHS,
        mamba_scan=a in MAMBA_ARCHS,
        plamo2_mamba=a in PLAMO2_MAMBA_ARCHS,
        lightning=a in LIGHTNING_ARCHS,
        kimi_mla=a in KIMI_MLA_ARCHS,
        deepseek2_mla=a in DEEPSEEK2_MLA_ARCHS,
        gated_delta_net=a in GDN_ARCHS,
        indexer_q_copies=INDEXER_Q_COPIES.get(a, 0),
        hc_streams=HC_STREAMS.get(a, 0),
        hc_head=HC_HEADS.get(a, HcHead.NONE),
        moe_down_f32_src1=a in MOE_DOWN_F32_SRC1_ARCHS,
        dsv4_attention=a in DSV4_ARCHS,
        msa_attention=a in MSA_ARCHS,
        kpool_graph=KPOOL_GRAPHS.get(a, KpoolGraph.NONE),
        indexer_rotation=a in INDEXER_ROTATION_ARCHS,
    )


def _traits(a: str, known: bool = True) -> ArchTraits:
    return ArchTraits(
        name=a, known=known, hparams=_hparams(a), memory=_memory(a), graph=_graph(a),
        forks=ForkTraits(ik_mla=a in IK_MLA_ARCHS),
    )  # fmt: skip


#: Every known architecture's record.
ARCHITECTURES: Mapping[str, ArchTraits] = MappingProxyType(
    {a: _traits(a) for a in sorted(KNOWN_ARCHITECTURES)}
)

#: Every table above that names architectures (checked by the tests: each name is a known architecture).
NAME_TABLES: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        name: frozenset(value)
        for name, value in globals().items()
        if name.isupper() and name != "KNOWN_ARCHITECTURES" and isinstance(value, (frozenset, dict, Mapping))
        and name not in ("ARCHITECTURES", "NAME_TABLES")
    }
)  # fmt: skip


def traits_of(architecture: str) -> ArchTraits:
    """The record of `architecture`; an unknown one gets the generic traits (a plain KV-cache transformer)."""
    found = ARCHITECTURES.get(architecture)
    return found if found is not None else _traits(architecture, known=False)
