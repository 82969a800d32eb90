"""The traits record of one architecture, grouped by the llama.cpp stage each trait mirrors.

`ArchTraits` is what the rest of fitplan asks about an architecture; nothing outside `fitplan.core.model.archs`
tests an architecture's name. The records themselves are assembled in `registry.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from fitplan.core.model.archs.rules import (
    ArchRecurrent,
    ArchSwa,
    HybridAttnFilter,
    MemoryLayout,
)


class KvSharing(StrEnum):
    """Which layers reuse an earlier layer's KV (src/llama-hparams.cpp:has_kv, n_layer_kv_from_start)."""

    NONE = "none"
    FROM_LAYER_20 = "from_layer_20"  # models/gemma3n.cpp: n_layer_kv_from_start = 20
    SHARED_KV_LAYERS = "shared_kv_layers"  # models/gemma4.cpp: n_layer - attention.shared_kv_layers


class IndexerRule(StrEnum):
    """Which layers carry an indexer key cache (src/llama-model.cpp:create_memory filter_lid / filter_idx)."""

    NONE = "none"
    ALL = "all"  # models/deepseek32.cpp: every trunk layer
    GLM_DSA = "glm_dsa"  # models/glm-dsa.cpp: attention.indexer.types, else the GLM 5.x defaults
    TOP_K_TYPED = "top_k_typed"  # models/hy-v4.cpp: indexer.top_k > 0 and attention.indexer.types
    TYPED = "typed"  # models/dots3note.cpp: attention.indexer.types (default off)
    AFTER_DENSE = "after_dense"  # models/minimax-m3.cpp: il >= leading_dense_block_count
    ATTENTION_TYPED = "attention_typed"  # models/glm5-next.cpp: attention layers, types default on
    ATTENTION_IF_HEAD = (
        "attention_if_head"  # models/qwen4exp.cpp: attention layers when indexer.key_length > 0
    )
    DSV4_CSA = "dsv4_csa"  # src/llama-kv-cache-dsv4.cpp: the CSA layers (compress ratio 4)


class KpoolSource(StrEnum):
    """Where a hybrid-idx indexer's k-pooling factor comes from (src/llama-memory-hybrid-idx.cpp)."""

    NONE = "none"
    INDEXER_KPOOL = "indexer_kpool"  # models/glm5-next.cpp: attention.indexer.kpool
    COMPRESS_RATIOS = "compress_ratios"  # models/qwen4exp.cpp: the nonzero attention.compress_ratios value


class KpoolGraph(StrEnum):
    """How a k-pool indexer's selection becomes the attention mask (src/models/<arch>.cpp `build_indexer_sel`)."""

    NONE = "none"
    SCORE_LIVE = "score_live"  # models/qwen4exp.cpp: a pool is live by its top score
    GATHER_MASK = "gather_mask"  # models/glm5-next.cpp: liveness from the graph input `gather_mask`


class HcHead(StrEnum):
    """How a hyper-connection model's output head reduces its streams (src/models/<arch>.cpp `build_hc_head`,
    `build_hc_mix`): what a GPU that runs only the output layer reads and computes."""

    NONE = "none"
    STREAM_VIEWS = "stream_views"  # models/hy-v4.cpp: the streams' norm, then a view of each stream weighted
    GROUPED_MIX = "grouped_mix"  # models/qwen4exp.cpp: grouped norm, down/up gate over all streams


@dataclass(frozen=True, slots=True)
class HParamTraits:
    """src/models/<arch>.cpp:load_arch_hparams and src/llama-model.cpp:load_hparams."""

    recurrent: ArchRecurrent = field(default_factory=ArchRecurrent)
    swa: ArchSwa = field(default_factory=ArchSwa)
    reads_mla_keys: bool = False  # attention.key_length_mla / value_length_mla are read (else never MLA)
    reads_ssm_group_count: bool = True  # ssm.group_count is read (mamba, jamba leave n_group at 0)
    reads_wkv_head_size: bool = False  # wkv.head_size (RWKV)
    reads_shortconv: bool = False  # shortconv.l_cache (LFM2)
    reads_kda: bool = False  # kda.head_dim (Kimi delta attention)
    non_causal: bool = False  # hparams.causal_attn forced false
    has_encoder: bool = False  # src/llama-model.cpp:llama_model_has_encoder
    nextn_needs_eh_proj: bool = (
        False  # models/deepseek4.cpp: the MTP block counts only with its eh_proj tensor
    )
    dense_when_single_expert: bool = False  # load_hparams: dense Hunyuan when expert_count <= 1
    rereads_head_lengths: bool = False  # models/plamo2.cpp re-reads key/value_length
    head_v_is_kv_lora: bool = False  # models/kimi-k3.cpp, glm5-next.cpp: the MLA cache holds the latent
    layer_loops: bool = False  # models/nanbeige.cpp: num_loops repeats the physical layers
    router_layer: bool = False  # models/granite-switch.cpp: a single-head router layer appended to the trunk
    kv_sharing: KvSharing = KvSharing.NONE
    linear_attn_head_is_key: bool = False  # models/minimax-01.cpp: n_embd_head_la = key_length
    ple_conv_state: bool = False  # models/qwen4exp.cpp: PLE conv history on the PLE layer
    hyper_connection_output: bool = False  # n_embd_out_impl = hyper_connection.count * n_embd
    compressed_layers: bool = False  # models/deepseek4.cpp: attention.compress_ratios per layer


@dataclass(frozen=True, slots=True)
class MemoryTraits:
    """src/llama-model.cpp:llama_model::create_memory and src/llama-context.cpp's checks on it."""

    layout: MemoryLayout = MemoryLayout.KV
    hybrid_filter: HybridAttnFilter = HybridAttnFilter.NOT_RECURRENT
    mla_trunk_filter: bool = True  # DSA/MSA caches keep the trunk when there are NextN layers (filter_mla)
    indexer: IndexerRule = IndexerRule.NONE
    kpool_source: KpoolSource = KpoolSource.NONE
    kpool_row: int = 0  # values per indexer row with k-pooling on (key | gate | pooled = 3, key | pooled = 2)
    rs_rollback: bool = False  # src/llama-arch.cpp:llm_arch_supports_rs_rollback
    flash_attn_forced_off: bool = False  # llama_init_from_model: "flash_attn is not compatible with Grok"
    same_kv_types: bool = False  # K and V cache types must match (besides every MLA model)
    encoder_output: bool = False  # output_reserve also holds the embeddings (t5)
    approximate: str = ""  # a memory module fitplan only approximates: the warning shown


@dataclass(frozen=True, slots=True)
class GraphTraits:
    """src/models/<arch>.cpp graph builders: what changes the compute buffers' live set."""

    parallel_attn_ffn: bool = (
        False  # attention and FFN from one norm output (command-r, cohere2, phi2, plamo)
    )
    ffn_beside_attention: bool = False  # the FFN reads the layer input or attention norm (falcon, arctic)
    dense_ffn_only: bool = False  # models/refact.cpp: only the dense FFN is built
    weight_before_ffn: bool = False  # build_moe_ffn: llama4 scales the input by the router weights first
    embd_skip: bool = False  # the input embeddings stay live for a skip connection (talkie, hrm_text)
    no_ffn_hole: bool = False  # no two-block hole under the FFN (see compute)
    attn_out_below: bool = False  # on a GPU the attention output takes the attention norm's block
    no_mixed_batch: bool = False  # src/llama-arch.cpp llm_arch_supports_mixed_batch is false
    residual_into_input: bool = False  # the attention's residual is added into the layer input (lfm2)
    kv_a_mqa: bool = False  # models/minicpm3.cpp: compressed K/V without MLA's absorbed query
    no_rope_qkv: bool = False  # fused QKV without rope: Q, K, V are views of the projection
    dsa_indexer: bool = False  # DeepSeek-V3.2's lightning indexer graph
    mamba_scan: bool = False  # recurrent layers are Mamba-1/2 blocks
    plamo2_mamba: bool = False  # models/plamo2.cpp's own Mamba block (its op order is replayed)
    lightning: bool = False  # models/minimax-01.cpp lightning attention
    kimi_mla: bool = False  # MLA concatenates K after the absorbed Q (kimi-linear, kimi-k3)
    deepseek2_mla: bool = False  # models/deepseek2.cpp's absorbed MLA query (replayed in compute)
    gated_delta_net: bool = False  # fused ggml_gated_delta_net (qwen3next, qwen35, qwen35moe)
    indexer_q_copies: int = 0  # indexer query projections live together at the indexer's peak
    hc_streams: int = 0  # hyper-connection residual streams live through the layers
    hc_head: HcHead = HcHead.NONE  # how the output head reduces the streams
    moe_down_f32_src1: bool = (
        False  # llama-graph.cpp build_moe_ffn: the experts' down product in f32 (mistral4)
    )
    dsv4_attention: bool = (
        False  # models/deepseek4.cpp: compressed attention (CSA/HCA) and its lightning indexer
    )
    msa_attention: bool = False  # models/minimax-m3.cpp: block-sparse attention, a mask per stream
    kpool_graph: KpoolGraph = KpoolGraph.NONE  # the k-pool sparse attention's selection chain
    indexer_rotation: bool = False  # llama-kv-cache.cpp rotates the lightning indexer's queries and keys


@dataclass(frozen=True, slots=True)
class ForkTraits:
    """What the forks decide by architecture rather than from the file."""

    ik_mla: bool = False  # ik_llama.cpp src/llama.cpp:llama_kv_cache_init is_mla_attn by architecture


@dataclass(frozen=True, slots=True)
class ArchTraits:
    """Everything fitplan knows about one architecture, resolved once into `ModelProfile.traits`."""

    name: str
    known: bool = True  # in src/llama-arch.cpp:LLM_ARCH_NAMES
    hparams: HParamTraits = field(default_factory=HParamTraits)
    memory: MemoryTraits = field(default_factory=MemoryTraits)
    graph: GraphTraits = field(default_factory=GraphTraits)
    forks: ForkTraits = field(default_factory=ForkTraits)
