"""Per-architecture facts that change memory, as llama.cpp 515e85511 resolves them.

Each rule names the llama.cpp function it comes from (paths relative to the llama.cpp root). The profile builder
(`fitplan.core.model.builder`) applies these rules to GGUF metadata; `fitplan.core.memory.context` turns the
resolved layers into cache sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fitplan.core.model.profile import SwaType

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

#: Speculative types that make common/common.h:common_params_speculative::need_n_rs_seq return --spec-draft-n-max.
RS_SEQ_SPEC_TYPES: frozenset[str] = frozenset({"draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"})

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
    "smallthinker": ArchSwa(SwaRule.IF_WINDOW, 4, dense_first=True, forced_window=4096),  # models/smallthinker.cpp
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


@dataclass(frozen=True, slots=True)
class ArchRecurrent:
    rule: RecurrentRule = RecurrentRule.NONE
    default_interval: int = 0  # full_attention_interval default (INTERVAL rule)


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


def memory_layout(arch: str) -> MemoryLayout:
    """src/llama-model.cpp:llama_model::create_memory, by architecture."""
    if arch in NO_MEMORY_ARCHS or arch == "clip":
        return MemoryLayout.NONE
    if arch in ("deepseek32", "glm-dsa", "hy_v4"):
        return MemoryLayout.DSA
    if arch == "dots3note":
        return MemoryLayout.DSA_ISWA
    if arch == "minimax-m3":
        return MemoryLayout.MSA
    if arch == "deepseek4":
        return MemoryLayout.DSV4
    if arch in RECURRENT_ARCHS:
        return MemoryLayout.RECURRENT
    if arch in HYBRID_ARCHS:
        return MemoryLayout.HYBRID
    return MemoryLayout.KV


def hybrid_attn_filter(arch: str) -> HybridAttnFilter:
    """src/llama-model.cpp:llama_model::create_memory: filter_attn of the hybrid branch."""
    if arch == "falcon-h1":
        return HybridAttnFilter.ALL
    if arch in ("nemotron_h", "nemotron_h_moe"):
        return HybridAttnFilter.NEMOTRON
    if arch in ("qwen3next", "qwen35", "qwen35moe", "qwen4exp", "minimax-01", "glm5-next"):
        return HybridAttnFilter.TRUNK_NOT_RECURRENT
    return HybridAttnFilter.NOT_RECURRENT


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


#: Hybrid archs whose memory is llama_memory_hybrid_idx: an indexer K cache follows the attention and recurrent
#: caches (src/llama-model.cpp:create_memory), with `indexer_kpool_row` values per row when k-pooling is on
#: (src/llama-memory-hybrid-idx.cpp; glm5-next: key | gate | pooled = 3 (hparams default), qwen4exp: key | pooled = 2).
HYBRID_IDX_KPOOL_ROW: dict[str, int] = {"glm5-next": 3, "qwen4exp": 2}

#: src/llama-kv-cache-dsv4.cpp: DSV4_CSA_RATIO / DSV4_HCA_RATIO, the attention.compress_ratios values of the
#: compressed-sparse (with a lightning indexer) and heavily-compressed layers.
DSV4_CSA_RATIO = 4
DSV4_HCA_RATIO = 128
