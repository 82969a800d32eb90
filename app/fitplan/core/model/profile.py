"""ModelProfile: everything the estimator needs about a model, resolved per layer as llama.cpp's load_hparams does.

This module holds the typed contract. `build_profile` (in `fitplan.core.model.builder`) fills it from a GGUF header.
All sizes are in bytes; all element counts are plain ints. Frozen dataclasses only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from fitplan.core.model.archs import ArchTraits, traits_of
from fitplan.core.model.archs import SwaType as SwaType  # part of the profile contract


class LayerKind(StrEnum):
    """The attention kind of one layer, in the user's words."""

    FULL = "full"  # standard full-context attention with its own KV cache
    SWA = "swa"  # sliding-window attention (own KV in the SWA cache)
    MLA = "mla"  # multi-head latent attention: K-only compressed cache
    RECURRENT = "recurrent"  # SSM / linear attention / RWKV: fixed-size state, no KV
    HYBRID = "hybrid"  # both a KV cache and a recurrent state in the same layer (falcon-h1)
    SHARED = "shared"  # attention that reuses another layer's KV (gemma3n/gemma4)
    NONE = "none"  # no attention memory (MLP-only layer, or a model with no memory module)
    NEXTN = "nextn"  # NextN / MTP prediction layer (excluded from the main context)


class TensorRole(StrEnum):
    TOKEN_EMBD = "token_embd"  # input embeddings (always on the host in llama.cpp)
    POS_EMBD = "pos_embd"  # position / per-layer token embeddings (also input tensors)
    OUTPUT = "output"  # output projection, output norm, classifier heads (the "output layer")
    ATTENTION = "attention"
    FFN = "ffn"  # dense FFN (and shared experts)
    EXPERTS = "experts"  # routed expert tensors (*_exps), what --n-cpu-moe / -cmoe move
    SSM = "ssm"  # recurrent / linear-attention tensors
    NORM = "norm"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class TensorProfile:
    name: str
    ggml_type: int
    type_name: str
    shape: tuple[int, ...]  # ggml order: ne0 (row length) first
    n_bytes: int
    layer: int | None  # blk.N index, None for non-block tensors
    role: TensorRole
    shard: int = 0  # which split file holds it
    offset: int = 0  # absolute offset of its data in that shard

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True, slots=True)
class LayerProfile:
    """One layer, resolved as llama.cpp resolves hparams for index `index`."""

    index: int
    kind: LayerKind
    n_head: int
    n_head_kv: int
    n_embd_head_k: int  # K head size used by the cache (key_length, or key_length_swa on SWA layers)
    n_embd_head_v: int
    n_ff: int  # dense FFN length of this layer (0 if none)
    is_swa: bool = False
    is_recurrent: bool = False
    has_kv: bool = False  # owns a KV cache in the main context
    kv_source: int | None = None  # for SHARED layers: the layer whose KV it reuses
    is_moe: bool = False
    is_nextn: bool = False
    n_embd_r: int = 0  # recurrent "r" (conv / token-shift) state, f32 elements per sequence
    n_embd_s: int = 0  # recurrent "s" (ssm / wkv) state, f32 elements per sequence
    n_expert_used: int = 0
    n_embd_p: int = 0  # qwen4exp PLE conv history, f32 elements per sequence (its own recurrent tensor)
    has_indexer: bool = False  # owns a row in a sparse-attention indexer cache (DSA, MSA, k-pool indexers)
    compress_ratio: int = 0  # DeepSeek-V4 attention.compress_ratios[il] (4 = CSA, 128 = HCA, 0 = window only)

    @property
    def n_embd_k_gqa(self) -> int:
        return self.n_embd_head_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        return self.n_embd_head_v * self.n_head_kv


@dataclass(frozen=True, slots=True)
class MlaParams:
    kv_lora_rank: int
    n_rot: int  # rope part of the K cache row
    key_length_mla: int  # decompressed K head size (192 for DeepSeek)
    value_length_mla: int  # decompressed V head size (128 for DeepSeek)
    q_lora_rank: int = 0


@dataclass(frozen=True, slots=True)
class MoeParams:
    n_expert: int
    n_expert_used: int
    n_expert_shared: int = 0
    n_ff_exp: int = 0
    n_ff_shexp: int = 0
    n_layer_dense_lead: int = 0
    n_group_used: int = 0
    n_expert_groups: int = 0  # expert_group_count: the router's group-limited selection when > 1
    weights_norm: bool = False  # expert_weights_norm: the selected weights divided by their sum
    weights_scale: float = 0.0  # expert_weights_scale: the weights scaled when neither 0 nor 1


@dataclass(frozen=True, slots=True)
class SsmParams:
    d_conv: int = 0
    d_inner: int = 0
    d_state: int = 0
    n_group: int = 0
    dt_rank: int = 0
    wkv_head_size: int = 0
    token_shift_count: int = 0
    shortconv_l_cache: int = 0
    kda_head_dim: int = 0


@dataclass(frozen=True, slots=True)
class RopeParams:
    dimension_count: int = 0
    freq_base: float = 0.0
    scaling_type: str = ""
    scaling_factor: float = 0.0
    original_context_length: int = 0


@dataclass(frozen=True, slots=True)
class ClipParams:
    """A projector's vision tower (`clip.*` keys of an mmproj file), as tools/mtmd/clip.cpp's load_hparams reads it."""

    projector_type: str = ""  # clip.projector_type ("mlp", "gemma3", "qwen2.5vl_merger", ...)
    image_size: int = 0  # clip.vision.image_size
    patch_size: int = 0  # clip.vision.patch_size
    n_embd: int = 0  # clip.vision.embedding_length
    n_ff: int = 0  # clip.vision.feed_forward_length
    n_head: int = 0  # clip.vision.attention.head_count
    n_layer: int = 0  # clip.vision.block_count
    projection_dim: int = 0  # clip.vision.projection_dim (the text model's width)
    spatial_merge_size: int = 0  # clip.vision.spatial_merge_size (0 = absent)
    n_wa_pattern: int = 0  # clip.vision.n_wa_pattern: every n-th block has full attention, the rest windows


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """A model as the estimator sees it. Built from GGUF metadata and tensor infos only."""

    path: str  # the first shard's path (or URL)
    shard_paths: tuple[str, ...]
    architecture: str
    name: str
    file_type: str  # "Q4_K_M", "F16", ... (from general.file_type, else guessed from the tensor mix)
    file_size: int  # bytes of all shards together
    n_params: int
    n_layer: int  # trunk layers (block_count - nextn)
    n_layer_all: int  # block_count, includes NextN/MTP layers
    n_nextn: int
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    layers: tuple[LayerProfile, ...]  # len == n_layer_all
    tensors: tuple[TensorProfile, ...]
    n_embd_out: int = 0  # embedding output width (0 = n_embd)
    swa_type: SwaType = SwaType.NONE
    n_swa: int = 0
    mla: MlaParams | None = None
    moe: MoeParams | None = None
    ssm: SsmParams | None = None
    rope: RopeParams = field(default_factory=RopeParams)
    causal_attn: bool = True
    has_encoder: bool = False
    pooling_type: int = 0
    has_memory: bool = True  # False for archs with no memory module (bert family, dream, llada...)
    tied_embeddings: bool = False  # no output.weight: llama.cpp duplicates token_embd for the output layer
    alignment: int = 32
    verified_architecture: bool = True  # False: unknown arch, profile from the generic keys only
    is_mmproj: bool = False  # a multimodal projector file (general.architecture == "clip")
    quant_mix: tuple[tuple[str, int], ...] = ()  # (type name, bytes) sorted by bytes desc
    warnings: tuple[str, ...] = ()
    #: attention.kv_lora_rank even when the GGUF lacks the *_mla keys (legacy DeepSeek files): mainline then runs
    #: them non-MLA, but ik_llama.cpp still keeps the latent cache (it decides MLA by architecture)
    kv_lora_rank: int = 0
    indexer_head_size: int = (
        0  # elements per indexer-cache row (key_length x k-pool row count); 0 = no indexer cache
    )
    clip: ClipParams | None = None  # the vision tower of an mmproj file
    #: attention.indexer.top_k: KV cells a DSA indexer keeps per token (0 = no top-k mask)
    indexer_top_k: int = 0
    #: attn_res.block_size: kimi-k3's cross-layer residual attention banks the layer input every that many layers
    #: (0 = none)
    attn_res_block_size: int = 0
    #: hrm.layers_per_stack, hrm.h_cycles, hrm.l_cycles: HRM-Text's cache slots reuse the weights of its first low
    #: and high stack passes (src/models/hrm-text.cpp `load_arch_tensors`); (0, 0, 0) for other models
    hrm_cycles: tuple[int, int, int] = (0, 0, 0)
    #: attention.indexer.block_size: positions per block of MiniMax-M3's block-sparse indexer (0 = none)
    indexer_block_size: int = 0
    #: the k-pool indexer's pool size (attention.indexer.kpool, qwen4exp: its compress ratio; 0 = no k-pool) and
    #: whether its selection appends the incomplete tail (attention.indexer.kpool_select_tail)
    indexer_kpool: int = 0
    indexer_kpool_tail: bool = False

    @property
    def is_moe(self) -> bool:
        return self.moe is not None and self.moe.n_expert > 0

    @property
    def traits(self) -> ArchTraits:
        """The architecture's record in the registry (`fitplan.core.model.archs`)."""
        return traits_of(self.architecture)

    @property
    def is_mla(self) -> bool:
        return self.mla is not None

    @property
    def is_recurrent_or_hybrid(self) -> bool:
        return any(layer.is_recurrent for layer in self.layers)

    @property
    def weight_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)
