"""The rule kinds the architecture registry uses, and the few computed rules, as llama.cpp 515e85511 resolves them.

Each rule names the llama.cpp function it comes from (paths relative to the llama.cpp root). The profile builder
(`fitplan.core.model.builder`) applies these rules to GGUF metadata; `fitplan.core.memory.context` turns the
resolved layers into cache sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class SwaType(StrEnum):
    NONE = "none"
    STANDARD = "standard"
    CHUNKED = "chunked"
    SYMMETRIC = "symmetric"


#: Speculative types that make common/common.h:common_params_speculative::need_n_rs_seq return --spec-draft-n-max.
RS_SEQ_SPEC_TYPES: frozenset[str] = frozenset({"draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"})


class RecurrentRule(StrEnum):
    """How load_arch_hparams marks recurrent layers (hparams.is_recr_impl)."""

    NONE = "none"
    ALL = "all"  # src/llama-model.cpp:load_hparams fills is_recr with llm_arch_is_recurrent; falcon-h1 fills true
    HEAD_KV_ZERO = "head_kv_zero"  # trunk layer il is recurrent iff head_count_kv[il] == 0 (jamba, lfm2, ...)
    HEAD_KV_ZERO_ALL = "head_kv_zero_all"  # same over all n_layer_all layers (glm5-next)
    INTERVAL = "interval"  # attention.recurrent_layers array, else full_attention_interval
    NEMOTRON = "nemotron"  # il < n_layer && head_count_kv == 0 && feed_forward_length == 0


class SwaRule(StrEnum):
    """How load_arch_hparams decides swa_type and the SWA layers."""

    NONE = "none"  # the arch never uses SWA (sliding_window is ignored)
    ALWAYS = "always"  # swa on; pattern from the GGUF array/scalar or the arch default
    IF_WINDOW = "if_window"  # swa on only when `sliding_window` is present and > 0
    ARRAY = "array"  # swa on; `sliding_window_pattern` must be the per-layer array
    NON_RECURRENT = "non_recurrent"  # lfm2: when a window is set, every non-recurrent trunk layer is SWA
    EXAONE4 = "exaone4"  # swa only for 64-layer (32B) models
    LLAMA4 = "llama4"  # chunked unless the GGUF says sliding_window == 0; window forced to 8192
    ALL_LAYERS = "all_layers"  # deepseek4: every layer is SWA


@dataclass(frozen=True, slots=True)
class ArchSwa:
    rule: SwaRule = SwaRule.NONE
    period: int = 0  # default pattern period (set_swa_pattern n_pattern)
    dense_first: bool = False
    swa_type: SwaType = SwaType.STANDARD
    default_window: int = 0  # n_swa before the GGUF key is read (used when the key is absent)
    forced_window: int = 0  # n_swa after the key is read (overrides the GGUF value)


@dataclass(frozen=True, slots=True)
class ArchRecurrent:
    rule: RecurrentRule = RecurrentRule.NONE
    default_interval: int = 0  # full_attention_interval default (INTERVAL rule)


class MemoryLayout(StrEnum):
    """Which memory module src/llama-model.cpp:llama_model::create_memory builds."""

    NONE = "none"
    KV = "kv"  # llama_kv_cache, or llama_kv_cache_iswa when swa_type != NONE
    RECURRENT = "recurrent"  # llama_memory_recurrent
    HYBRID = "hybrid"  # llama_memory_hybrid(_iswa): KV for attention layers + recurrent state
    DSA = "dsa"  # llama_kv_cache_dsa: MLA K-only cache + indexer K cache
    DSA_ISWA = "dsa_iswa"  # llama_kv_cache_dsa_iswa: non-SWA MLA cache + indexer cache + SWA MLA cache
    MSA = "msa"  # llama_kv_cache_msa: main KV cache + indexer K/V cache (one key head)
    DSV4 = "dsv4"  # llama_kv_cache_dsv4: raw SWA K cache, CSA/HCA compressed K caches, indexer, compressor states


#: Attention filter of the hybrid memory (create_memory): which layers get KV.
class HybridAttnFilter(StrEnum):
    NOT_RECURRENT = "not_recurrent"  # default filter: !is_recr(il), over all n_layer_all layers
    TRUNK_NOT_RECURRENT = "trunk_not_recurrent"  # il < n_layer && !is_recr(il)
    ALL = "all"  # falcon-h1: every layer has KV and recurrent state
    NEMOTRON = "nemotron"  # !is_recr(il) && n_ff(il) == 0


def glm_dsa_default_indexer_full(il: int, n_ctx_train: int) -> bool:
    """models/glm-dsa.cpp: GLM 5/5.1 (n_ctx_train < 1M) index every layer; 5.2 uses GLM_5_2_DEFAULT_INDEXER_TYPES
    (layers 0, 1, then every 4th from 2, for the first 78 layers)."""
    if n_ctx_train < 1048576:
        return True
    return il < 78 and (il < 2 or (il - 2) % 4 == 0)


def swa_pattern(n_layer: int, n_layer_all: int, n_pattern: int, dense_first: bool) -> tuple[bool, ...]:
    """src/llama-hparams.cpp:llama_hparams::set_swa_pattern: per-layer is_swa; nextn layers are never SWA."""
    flags: list[bool] = []
    for il in range(n_layer):
        if n_pattern == 0:
            flags.append(True)
        elif dense_first:
            flags.append(il % n_pattern != 0)
        else:
            flags.append(il % n_pattern < n_pattern - 1)
    flags.extend([False] * (n_layer_all - n_layer))
    return tuple(flags)


#: src/llama-kv-cache-dsv4.cpp: DSV4_CSA_RATIO / DSV4_HCA_RATIO, the attention.compress_ratios values of the
#: compressed-sparse (with a lightning indexer) and heavily-compressed layers.
DSV4_CSA_RATIO = 4
DSV4_HCA_RATIO = 128
