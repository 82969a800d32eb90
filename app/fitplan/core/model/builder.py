"""Build a `ModelProfile` from GGUF headers, resolving hyper-parameters per layer as llama.cpp 515e85511 does.

Sources (llama.cpp root): src/llama-model.cpp:llama_model_base::load_hparams (generic keys),
src/models/<arch>.cpp:load_arch_hparams (per-arch rules, tabulated in `fitplan.core.model.archs`),
src/llama-hparams.cpp (n_embd_r / n_embd_s, is_swa, has_kv), src/llama-model.cpp:create_memory (which layers own a
cache), src/llama-arch.cpp:LLM_TENSOR_INFOS (input / output layer tensors).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from fitplan.core.base.errors import HeaderValueError
from fitplan.core.base.numbers import int_or_none
from fitplan.core.gguf.ggml_types import model_file_type, quant_mix, type_name
from fitplan.core.gguf.gguf_tables import Keys
from fitplan.core.gguf.header import GGUFArray, GGUFHeader, MetadataValue, ModelFiles
from fitplan.core.gguf.reader import is_mmproj
from fitplan.core.model import archs
from fitplan.core.model.archs import (
    MMPROJ_ARCHITECTURE,
    ArchSwa,
    ArchTraits,
    HybridAttnFilter,
    IndexerRule,
    KpoolSource,
    KvSharing,
    MemoryLayout,
    RecurrentRule,
    SwaRule,
    traits_of,
)
from fitplan.core.model.profile import (
    ClipParams,
    LayerKind,
    LayerProfile,
    MlaParams,
    ModelProfile,
    MoeParams,
    RopeParams,
    SsmParams,
    SwaType,
    TensorProfile,
    TensorRole,
)
from fitplan.core.model.validation import MAX_LAYER_INDEX, validate_hparams

_BLK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")

#: Non-block tensors of the input layer (src/llama-arch.cpp:LLM_TENSOR_INFOS, LLM_TENSOR_LAYER_INPUT).
_POS_EMBD_PREFIXES = ("position_embd", "token_types", "per_layer_token_embd", "masked_embd")
#: Non-block tensors of the output layer (LLM_TENSOR_LAYER_OUTPUT).
_OUTPUT_PREFIXES = (
    "output",
    "cls",
    "dec_output_norm",
    "enc_output_norm",
    "dense_2",
    "dense_3",
    "hc_head",
    "altup_proj",
    "altup_unembd_proj",
    "decision",
)


class _Meta:
    """Typed access to `{arch}.*` metadata with llama.cpp's get_key / get_key_or_arr semantics."""

    def __init__(self, header: GGUFHeader, arch: str) -> None:
        self.md = header.metadata
        self.arch = arch
        self.source = header.source
        self.warnings: list[str] = []

    def _whole(self, key: str, x: float) -> int:
        """Every integer this class returns: a NaN, an infinity or a fraction in any key is refused naming the key
        (the key lists of `validation` name what llama.cpp checks; this holds for a key they do not list)."""
        if isinstance(x, float) and not (math.isfinite(x) and x.is_integer()):
            raise HeaderValueError(self.source, self.full(key), f"{x} is not a whole number")
        return int(x)

    def full(self, key: str) -> str:
        """`{arch}.key`: a `gguf.constants.Keys` template, or a key gguf-py does not name yet (its suffix)."""
        return key.format(arch=self.arch) if "{arch}" in key else f"{self.arch}.{key}"

    def raw(self, key: str) -> MetadataValue | None:
        return self.md.get(self.full(key))

    def has(self, key: str) -> bool:
        return self.full(key) in self.md

    def num(self, key: str, default: int = 0) -> int:
        v = self.raw(key)
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return self._whole(key, v)
        if isinstance(v, GGUFArray) and v.values:
            first = v.values[0]
            if isinstance(first, (int, float)):
                return self._whole(key, first)
        return default

    def real(self, key: str, default: float = 0.0) -> float:
        v = self.raw(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if not math.isfinite(v):
                raise HeaderValueError(self.source, self.full(key), f"{v} is not a finite number")
            return float(v)
        return default

    def text(self, key: str, default: str = "") -> str:
        v = self.raw(key)
        return v if isinstance(v, str) else default

    def flag(self, key: str, default: bool) -> bool:
        v = self.raw(key)
        if isinstance(v, bool):
            return v
        if isinstance(v, int):
            return v != 0
        return default

    def array(self, key: str) -> list[int] | None:
        """An integer/bool array key (None when absent, not an array, or not materialised)."""
        v = self.raw(key)
        if not isinstance(v, GGUFArray):
            return None
        if v.values is None:
            self.warnings.append(f"{self.full(key)}: array of {v.length} values was not read")
            return None
        return [self._whole(key, x) for x in v.values if isinstance(x, (int, float))]

    def key_or_arr(self, key: str, n: int, default: list[int]) -> list[int]:
        """src/llama-model-loader.cpp:get_key_or_arr: an array fills the first len entries, a scalar fills n."""
        v = self.raw(key)
        if v is None:
            return default
        out = list(default)
        if isinstance(v, GGUFArray):
            vals = self.array(key)
            if vals is None:
                return default
            if len(vals) != n:
                self.warnings.append(f"{self.full(key)} has {len(vals)} values, llama.cpp expects {n}")
            for i, x in enumerate(vals[: len(out)]):
                out[i] = x
            return out
        if isinstance(v, (int, float)) and not isinstance(v, str):
            return [self._whole(key, v)] * n + out[n:]
        return default


def _headers(files: ModelFiles | GGUFHeader) -> tuple[tuple[GGUFHeader, ...], int]:
    if isinstance(files, ModelFiles):
        return files.shards, files.file_size
    return (files,), files.file_size or files.expected_file_size


@functools.lru_cache(maxsize=1 << 16)
def tensor_role(name: str) -> tuple[int | None, TensorRole]:
    """Layer index and role of a tensor, from its GGUF name (kept: the quants of a model share their names)."""
    m = _BLK_RE.match(name)
    if m is None:
        base = name.split(".", 1)[0]
        if base == "token_embd":
            return None, TensorRole.TOKEN_EMBD
        if base.startswith(_POS_EMBD_PREFIXES):
            return None, TensorRole.POS_EMBD
        if base.startswith(_OUTPUT_PREFIXES):
            return None, TensorRole.OUTPUT
        if base.endswith("norm"):
            return None, TensorRole.NORM
        return None, TensorRole.OTHER
    layer = int_or_none(m.group(1), 0, MAX_LAYER_INDEX)
    if layer is None:  # blk.<5000 digits>: no layer of any model; counted as an unknown tensor
        return None, TensorRole.OTHER
    rest = m.group(2)
    sub = rest.split(".", 1)[0]
    if "_exps" in sub or "_chexps" in sub:
        return layer, TensorRole.EXPERTS
    if sub.endswith("norm") or "_norm" in sub:
        return layer, TensorRole.NORM
    if sub.startswith(("ssm_", "time_mix", "shortconv", "conv1d", "linear_attn")):
        return layer, TensorRole.SSM
    if sub.startswith(("attn", "indexer", "self_attn", "cross_attn", "enc_attn", "dec_attn")):
        return layer, TensorRole.ATTENTION
    if sub.startswith(("ffn", "channel_mix")):
        return layer, TensorRole.FFN
    return layer, TensorRole.OTHER


def _tensors(headers: Sequence[GGUFHeader]) -> tuple[TensorProfile, ...]:
    out: list[TensorProfile] = []
    names: dict[int, str] = {}
    for shard, h in enumerate(headers):
        for t in h.tensors:
            layer, role = tensor_role(t.name)
            tname = names.get(t.ggml_type)
            if tname is None:
                tname = names[t.ggml_type] = type_name(t.ggml_type)
            out.append(
                TensorProfile(
                    name=t.name,
                    ggml_type=t.ggml_type,
                    type_name=tname,
                    shape=t.shape,
                    n_bytes=t.n_bytes,
                    layer=layer,
                    role=role,
                    shard=shard,
                    offset=h.data_offset + t.offset,
                )
            )
    return tuple(out)


def _quant_mix(tensors: Sequence[TensorProfile]) -> tuple[tuple[str, int], ...]:
    return quant_mix((t.type_name, t.n_bytes) for t in tensors)


def _file_type(header: GGUFHeader, mix: Sequence[tuple[str, int]]) -> str:
    return model_file_type(header.metadata.get("general.file_type"), mix)


def _n_vocab(meta: _Meta, header: GGUFHeader, tensors: Sequence[TensorProfile]) -> int:
    if meta.has(Keys.LLM.VOCAB_SIZE):
        return meta.num(Keys.LLM.VOCAB_SIZE)
    toks = header.metadata.get("tokenizer.ggml.tokens")
    if isinstance(toks, GGUFArray):
        return toks.length
    for t in tensors:
        if t.name == "token_embd.weight" and len(t.shape) >= 2:
            return t.shape[1]
    return 0


def _mmproj_profile(headers: Sequence[GGUFHeader], file_size: int) -> ModelProfile:
    h = headers[0]
    tensors = _tensors(headers)
    mix = _quant_mix(tensors)
    return ModelProfile(
        path=h.source,
        shard_paths=tuple(x.source for x in headers),
        architecture=MMPROJ_ARCHITECTURE,
        name=h.get_str("general.name"),
        file_type=_file_type(h, mix),
        file_size=file_size,
        n_params=sum(t.n_elements for t in tensors),
        n_layer=0,
        n_layer_all=0,
        n_nextn=0,
        n_embd=0,
        n_vocab=0,
        n_ctx_train=0,
        layers=(),
        tensors=tensors,
        has_memory=False,
        alignment=h.get_int("general.alignment", 32),
        is_mmproj=True,
        quant_mix=mix,
        clip=ClipParams(
            projector_type=h.get_str("clip.projector_type"),
            image_size=h.get_int("clip.vision.image_size"),
            patch_size=h.get_int("clip.vision.patch_size"),
            n_embd=h.get_int("clip.vision.embedding_length"),
            n_ff=h.get_int("clip.vision.feed_forward_length"),
            n_head=h.get_int("clip.vision.attention.head_count"),
            n_layer=h.get_int("clip.vision.block_count"),
            projection_dim=h.get_int("clip.vision.projection_dim"),
            spatial_merge_size=h.get_int("clip.vision.spatial_merge_size"),
            n_wa_pattern=h.get_int("clip.vision.n_wa_pattern"),
        ),
    )


@dataclass(slots=True)
class _Dims:
    """The generic hyper-parameters (load_hparams) as the per-architecture rules reshape them; per-layer lists have
    n_layer_all entries. Internal to the builder: the result is the frozen ModelProfile."""

    n_embd: int
    n_layer_all: int
    n_nextn: int
    n_expert: int
    n_expert_used: list[int]
    n_ff: list[int]
    n_head: list[int]
    n_head_kv: list[int]
    head_k: int = 0
    head_v: int = 0
    n_rot: int = 0
    head_k_swa: int = 0
    head_v_swa: int = 0
    kv_lora_rank: int = 0
    router_layer: int = -1  # graniteswitch's appended router layer, -1 when none
    warnings: list[str] = field(default_factory=list)

    @property
    def n_layer(self) -> int:
        return self.n_layer_all - self.n_nextn

    @property
    def head0(self) -> int:
        return self.n_head[0] if self.n_head else 0

    @property
    def zeros(self) -> list[int]:
        return [0] * self.n_layer_all


def _generic_dims(meta: _Meta, t: ArchTraits, tensor_names: set[str]) -> _Dims:
    """src/llama-model.cpp:load_hparams, the generic keys, with the per-architecture overrides of
    load_arch_hparams that change them."""
    hp = t.hparams
    n_layer_all = meta.num(Keys.LLM.BLOCK_COUNT)
    n_nextn = meta.num(Keys.LLM.NEXTN_PREDICT_LAYERS)
    probe = f"blk.{n_layer_all - n_nextn}.nextn.eh_proj.weight"
    if hp.nextn_needs_eh_proj and n_nextn > 0 and probe not in tensor_names:
        n_nextn = 0
    zeros = [0] * n_layer_all
    n_head = meta.key_or_arr(Keys.Attention.HEAD_COUNT, n_layer_all, zeros)
    d = _Dims(
        n_embd=meta.num(Keys.LLM.EMBEDDING_LENGTH),
        n_layer_all=n_layer_all,
        n_nextn=min(n_nextn, n_layer_all),
        n_expert=meta.num(Keys.LLM.EXPERT_COUNT),
        n_expert_used=meta.key_or_arr(Keys.LLM.EXPERT_USED_COUNT, n_layer_all, zeros),
        n_ff=meta.key_or_arr(Keys.LLM.FEED_FORWARD_LENGTH, n_layer_all, zeros),
        n_head=n_head,
        n_head_kv=meta.key_or_arr(Keys.Attention.HEAD_COUNT_KV, n_layer_all, list(n_head)),
    )
    if hp.dense_when_single_expert and d.n_expert <= 1:
        d.n_expert = 0
        d.n_expert_used = list(zeros)
    if d.head0 > 0:
        d.head_k = meta.num(Keys.Attention.KEY_LENGTH, d.n_embd // d.head0)
        d.head_v = meta.num(Keys.Attention.VALUE_LENGTH, d.n_embd // d.head0)
        d.n_rot = meta.num(Keys.Rope.DIMENSION_COUNT, d.head_k)
    if hp.rereads_head_lengths:
        d.head_k = meta.num(Keys.Attention.KEY_LENGTH, d.head_k)
        d.head_v = meta.num(Keys.Attention.VALUE_LENGTH, d.head_v)
    d.head_k_swa = meta.num(Keys.Attention.KEY_LENGTH_SWA, d.head_k)
    d.head_v_swa = meta.num(Keys.Attention.VALUE_LENGTH_SWA, d.head_v)
    d.kv_lora_rank = meta.num(Keys.Attention.KV_LORA_RANK)
    if hp.head_v_is_kv_lora:
        d.head_v = d.kv_lora_rank
    if hp.layer_loops:
        _loop_layers(d, max(1, meta.num("num_loops", 1)))
    if hp.router_layer:
        _append_router_layer(d)
    return d


def _loop_layers(d: _Dims, loops: int) -> None:
    """models/nanbeige.cpp: num_loops repeats the physical layers."""
    if loops <= 1:
        return
    phys = d.n_layer_all - d.n_nextn
    d.n_head = d.n_head[:phys] * loops
    d.n_head_kv = d.n_head_kv[:phys] * loops
    d.n_ff = d.n_ff[:phys] * loops
    d.n_expert_used = d.n_expert_used[:phys] * loops
    d.n_layer_all = phys * loops


def _append_router_layer(d: _Dims) -> None:
    """models/granite-switch.cpp: a single-head router attention layer is appended at index n_real; llama.cpp
    repurposes n_layer_nextn = 1 for it, but the trunk attends it, so it keeps its KV (router_layer)."""
    r = d.n_layer_all - d.n_nextn
    d.router_layer = r
    d.n_layer_all = r + 1
    d.n_nextn = 1
    d.n_head = [*d.n_head[:r], 1]
    d.n_head_kv = [*d.n_head_kv[:r], 1]
    d.n_ff = [*d.n_ff[:r], 0]
    d.n_expert_used = [*d.n_expert_used[:r], 0]


def _recurrent_layers(meta: _Meta, t: ArchTraits, d: _Dims) -> list[bool]:
    """hparams.is_recr per layer (src/models/<arch>.cpp:load_arch_hparams)."""
    rec = t.hparams.recurrent
    n, n_layer = d.n_layer_all, d.n_layer
    if rec.rule is RecurrentRule.ALL:
        return [True] * n
    if rec.rule is RecurrentRule.HEAD_KV_ZERO:
        return [il < n_layer and d.n_head_kv[il] == 0 for il in range(n)]
    if rec.rule is RecurrentRule.HEAD_KV_ZERO_ALL:
        return [d.n_head_kv[il] == 0 for il in range(n)]
    if rec.rule is RecurrentRule.NEMOTRON:
        return [il < n_layer and d.n_head_kv[il] == 0 and d.n_ff[il] == 0 for il in range(n)]
    if rec.rule is RecurrentRule.INTERVAL:
        if meta.has("attention.recurrent_layers"):
            return [x != 0 for x in meta.key_or_arr("attention.recurrent_layers", n, [0] * n)]
        interval = meta.num(Keys.LLM.FULL_ATTENTION_INTERVAL, rec.default_interval)
        if interval <= 0:
            d.warnings.append(
                f"{meta.full(Keys.LLM.FULL_ATTENTION_INTERVAL)} is missing; llama.cpp refuses this file"
            )
            interval = 1
        return [il < n_layer and (il + 1) % interval != 0 for il in range(n)]
    return [False] * n


def _swa_layers(meta: _Meta, t: ArchTraits, d: _Dims, is_recr: list[bool]) -> tuple[SwaType, int, list[bool]]:
    """swa_type, n_swa and is_swa per layer (src/models/<arch>.cpp, src/llama-model.cpp:load_swa_pattern)."""
    sw = t.hparams.swa
    n = d.n_layer_all
    found = meta.has(Keys.Attention.SLIDING_WINDOW)
    window = meta.num(Keys.Attention.SLIDING_WINDOW)

    def pattern(period: int, dense_first: bool) -> list[bool]:
        arr = meta.array(Keys.Attention.SLIDING_WINDOW_PATTERN)
        if arr is not None:
            flags = [bool(x) for x in arr[:n]]
            return flags + [False] * (n - len(flags))
        n_pattern = meta.num(Keys.Attention.SLIDING_WINDOW_PATTERN, period)
        return list(archs.swa_pattern(d.n_layer, n, n_pattern, dense_first))

    rule = sw.rule
    if rule is SwaRule.ALWAYS:
        return sw.swa_type, _always_window(meta, sw, d, found, window), pattern(sw.period, sw.dense_first)
    if rule is SwaRule.IF_WINDOW and found and window > 0:
        return sw.swa_type, sw.forced_window or window, pattern(sw.period, sw.dense_first)
    if rule is SwaRule.ARRAY:
        return sw.swa_type, window, _swa_array(meta, d, n)
    if rule is SwaRule.LLAMA4 and not (found and window == 0):
        return SwaType.CHUNKED, sw.forced_window, pattern(sw.period, False)
    if rule is SwaRule.EXAONE4 and d.n_layer == 64:
        return SwaType.STANDARD, window if found else sw.default_window, pattern(sw.period, False)
    if rule is SwaRule.NON_RECURRENT and found and window > 0:
        return SwaType.STANDARD, window, [il < d.n_layer and not is_recr[il] for il in range(n)]
    if rule is SwaRule.ALL_LAYERS:
        return SwaType.STANDARD, window, [True] * n
    return SwaType.NONE, 0, [False] * n


def _always_window(meta: _Meta, sw: ArchSwa, d: _Dims, found: bool, window: int) -> int:
    """The window of an always-SWA architecture: the file's, else the architecture's default (none: a warning)."""
    if not found and sw.default_window == 0:
        d.warnings.append(f"{meta.full(Keys.Attention.SLIDING_WINDOW)} is missing; llama.cpp requires it")
    return window if found else sw.default_window


def _swa_array(meta: _Meta, d: _Dims, n: int) -> list[bool]:
    """is_swa per layer from the file's per-layer array (missing: a warning, and no SWA layer)."""
    arr = meta.array(Keys.Attention.SLIDING_WINDOW_PATTERN)
    if arr is None:
        d.warnings.append(f"{meta.full(Keys.Attention.SLIDING_WINDOW_PATTERN)} must be a per-layer array")
        return [False] * n
    flags = [bool(x) for x in arr[:n]]
    return flags + [False] * (n - len(flags))


def _mla(meta: _Meta, t: ArchTraits, d: _Dims) -> MlaParams | None:
    """MLA (models/deepseek2.cpp and the other MLA archs): only archs that read the *_mla keys run MLA."""
    k_mla = meta.num(Keys.Attention.KEY_LENGTH_MLA)
    v_mla = meta.num(Keys.Attention.VALUE_LENGTH_MLA)
    if not (t.hparams.reads_mla_keys and k_mla > 0 and v_mla > 0):
        return None
    return MlaParams(
        kv_lora_rank=d.kv_lora_rank,
        n_rot=d.n_rot,
        key_length_mla=k_mla,
        value_length_mla=v_mla,
        q_lora_rank=meta.num(Keys.Attention.Q_LORA_RANK),
    )


def _kv_from_start(meta: _Meta, t: ArchTraits, d: _Dims) -> int:
    """src/llama-hparams.cpp:n_layer_kv_from_start (-1: every layer has its own KV)."""
    if t.hparams.kv_sharing is KvSharing.FROM_LAYER_20:
        return 20
    if t.hparams.kv_sharing is KvSharing.SHARED_KV_LAYERS:
        return d.n_layer_all - meta.num(Keys.Attention.SHARED_KV_LAYERS)
    return -1


def _recurrent_state(
    meta: _Meta, t: ArchTraits, d: _Dims, is_recr: list[bool]
) -> tuple[SsmParams | None, int, int]:
    """src/llama-hparams.cpp:n_embd_r / n_embd_s and the SSM parameters."""
    hp = t.hparams
    d_conv = meta.num(Keys.SSM.CONV_KERNEL)
    d_inner = meta.num(Keys.SSM.INNER_SIZE)
    d_state = meta.num(Keys.SSM.STATE_SIZE)
    n_group = meta.num(Keys.SSM.GROUP_COUNT) if hp.reads_ssm_group_count else 0
    wkv = meta.num(Keys.WKV.HEAD_SIZE) if hp.reads_wkv_head_size else 0
    token_shift = meta.num(Keys.LLM.TOKEN_SHIFT_COUNT, 2)
    l_cache = meta.num(Keys.ShortConv.L_CACHE) if hp.reads_shortconv else 0
    kda = meta.num("kda.head_dim") if hp.reads_kda else 0
    head_la = d.head_k if hp.linear_attn_head_is_key else 0
    if wkv:
        n_embd_r, n_embd_s = token_shift * d.n_embd, d.n_embd * wkv
    elif l_cache:
        n_embd_r, n_embd_s = d.n_embd * (l_cache - 1), 0
    elif kda:
        n_embd_r = 3 * (d_conv - 1 if d_conv > 0 else 3) * d.head0 * kda
        n_embd_s = kda * kda * d.head0
    else:
        n_embd_r = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
        n_embd_s = head_la * head_la * d.head0 if head_la else d_state * d_inner
    if not any(is_recr):
        return None, n_embd_r, n_embd_s
    ssm = SsmParams(
        d_conv=d_conv,
        d_inner=d_inner,
        d_state=d_state,
        n_group=n_group,
        dt_rank=meta.num(Keys.SSM.TIME_STEP_RANK),
        wkv_head_size=wkv,
        token_shift_count=token_shift if wkv else 0,
        shortconv_l_cache=l_cache,
        kda_head_dim=kda,
    )
    return ssm, n_embd_r, n_embd_s


def _ple_state(meta: _Meta, t: ArchTraits, d: _Dims) -> tuple[set[int], int]:
    """qwen4exp PLE conv history (src/llama-hparams.cpp:ple_conv_state, models/qwen4exp.cpp): one extra f32 row
    tensor on the PLE layer, (conv_kernel - 1) * ngram_size * hc_mult * n_embd per sequence."""
    if not t.hparams.ple_conv_state:
        return set(), 0
    ple_arr = meta.array("ple.layers") or []
    if not ple_arr:
        return set(), 0
    ngram = meta.num("ple.ngram_size")
    conv = meta.num("ple.conv_kernel")
    heads = (ngram - 1) * meta.num("ple.heads_per_ngram")
    state = (
        (conv - 1) * ngram * meta.num("hyper_connection.count") * d.n_embd if heads > 0 and conv > 0 else 0
    )
    return set(ple_arr), state


def _cache_owners(
    t: ArchTraits, d: _Dims, is_recr: list[bool], kv_from_start: int
) -> tuple[list[bool], list[bool]]:
    """Which layers own KV and which hold recurrent state (src/llama-model.cpp:create_memory)."""
    n, n_layer = d.n_layer_all, d.n_layer
    layout = t.memory.layout
    if layout is MemoryLayout.KV:
        trunk_only = d.n_nextn > 0 and n_layer > 0 and d.router_layer < 0
        own = [
            (kv_from_start < 0 or il < kv_from_start) and (not trunk_only or il < n_layer) for il in range(n)
        ]
        return own, [False] * n
    if layout is MemoryLayout.RECURRENT:
        return [False] * n, [il < n_layer for il in range(n)]
    if layout is MemoryLayout.HYBRID:
        return _hybrid_owners(t.memory.hybrid_filter, d, is_recr)
    if layout is MemoryLayout.DSV4:
        return [True] * n, [False] * n  # the raw cache has no layer filter (hparams_raw.n_layer_nextn = 0)
    if layout in (MemoryLayout.DSA, MemoryLayout.DSA_ISWA, MemoryLayout.MSA):
        trunk_only = (
            t.memory.mla_trunk_filter and d.n_nextn > 0
        )  # filter_mla keeps the trunk with NextN layers
        return [not trunk_only or il < n_layer for il in range(n)], [False] * n
    return [False] * n, [False] * n


def _hybrid_owners(filt: HybridAttnFilter, d: _Dims, is_recr: list[bool]) -> tuple[list[bool], list[bool]]:
    """create_memory's hybrid branch: filter_attn picks the KV layers, filter_recr the recurrent ones."""
    has_kv: list[bool] = []
    holds_rs: list[bool] = []
    for il in range(d.n_layer_all):
        if filt is HybridAttnFilter.ALL:
            has_kv.append(True)
        elif filt is HybridAttnFilter.NEMOTRON:
            has_kv.append(not is_recr[il] and d.n_ff[il] == 0)
        elif filt is HybridAttnFilter.TRUNK_NOT_RECURRENT:
            has_kv.append(il < d.n_layer and not is_recr[il])
        else:
            has_kv.append(not is_recr[il])
        nemotron_ff = filt is not HybridAttnFilter.NEMOTRON or d.n_ff[il] == 0
        holds_rs.append(il < d.n_layer and is_recr[il] and nemotron_ff)
    return has_kv, holds_rs


def _indexer_layers(
    meta: _Meta, t: ArchTraits, d: _Dims, is_recr: list[bool], ratios: list[int]
) -> list[bool]:
    """Which layers carry an indexer key cache (src/llama-model.cpp:create_memory filter_lid / filter_idx)."""
    rule = t.memory.indexer
    n_layer = d.n_layer
    if rule is IndexerRule.DSV4_CSA:
        # src/llama-kv-cache-dsv4.cpp: the lightning indexer follows the CSA layers (over all n_layer_all layers)
        return [r == archs.DSV4_CSA_RATIO for r in ratios]
    out = [False] * d.n_layer_all
    if rule is IndexerRule.NONE:
        return out
    types = meta.key_or_arr("attention.indexer.types", n_layer, [-1] * n_layer) if n_layer else []

    def typed(il: int, default: bool) -> bool:
        v = types[il] if il < len(types) else -1
        return default if v == -1 else bool(v)

    n_ctx_train = meta.num(Keys.LLM.CONTEXT_LENGTH)
    top_k = meta.num(Keys.Attention.Indexer.TOP_K)
    dense_lead = meta.num(Keys.LLM.LEADING_DENSE_BLOCK_COUNT)
    idx_head = meta.num(Keys.Attention.Indexer.KEY_LENGTH)
    for il in range(n_layer):
        if rule is IndexerRule.ALL:
            out[il] = True
        elif rule is IndexerRule.GLM_DSA:
            out[il] = typed(il, archs.glm_dsa_default_indexer_full(il, n_ctx_train))
        elif rule is IndexerRule.TOP_K_TYPED:
            out[il] = top_k > 0 and typed(il, False)
        elif rule is IndexerRule.TYPED:
            out[il] = typed(il, False)
        elif rule is IndexerRule.AFTER_DENSE:
            out[il] = il >= dense_lead
        elif rule is IndexerRule.ATTENTION_TYPED:
            out[il] = not is_recr[il] and typed(il, True)
        elif rule is IndexerRule.ATTENTION_IF_HEAD:
            out[il] = idx_head > 0 and not is_recr[il]
    return out


def _indexer_kpool(meta: _Meta, t: ArchTraits, d: _Dims) -> int:
    """The k-pool indexer's pool size (hparams.indexer_kpool), 0 without k-pooling."""
    src = t.memory.kpool_source
    if src is KpoolSource.INDEXER_KPOOL:
        return meta.num("attention.indexer.kpool")
    if src is KpoolSource.COMPRESS_RATIOS:  # models/qwen4exp.cpp: the one nonzero attention.compress_ratios
        return max(meta.key_or_arr("attention.compress_ratios", d.n_layer_all, d.zeros), default=0)
    return 0


def _indexer_kpool_tail(meta: _Meta, t: ArchTraits) -> bool:
    """hparams.indexer_kpool_select_tail: models/qwen4exp.cpp always sets it, glm5-next.cpp reads the key."""
    if t.memory.kpool_source is KpoolSource.COMPRESS_RATIOS:
        return True
    return bool(meta.num("attention.indexer.kpool_select_tail"))


def _indexer_width(meta: _Meta, t: ArchTraits, d: _Dims) -> int:
    """Values per indexer key row: the key length, times the k-pool row when k-pooling is on."""
    idx_head = meta.num(Keys.Attention.Indexer.KEY_LENGTH)
    return idx_head * t.memory.kpool_row if _indexer_kpool(meta, t, d) > 0 else idx_head


@dataclass(frozen=True, slots=True)
class _LayerPlan:
    """Per-layer facts the stages above resolved, for `_layers`."""

    is_recr: list[bool]
    is_swa: list[bool]
    has_kv: list[bool]
    holds_rs: list[bool]
    indexer: list[bool]
    ratios: list[int]
    kv_from_start: int
    is_mla: bool
    n_embd_r: int
    n_embd_s: int
    ple_layers: set[int]
    ple_state: int
    exp_layers: set[int]


def _layer_kind(il: int, t: ArchTraits, d: _Dims, p: _LayerPlan) -> tuple[LayerKind, int | None]:
    if il >= d.n_layer and il != d.router_layer:
        return LayerKind.NEXTN, None
    if t.memory.layout is MemoryLayout.NONE:
        return LayerKind.NONE, None
    swa = p.is_swa[il]
    if p.kv_from_start >= 0 and il >= p.kv_from_start:
        return LayerKind.SHARED, p.kv_from_start - (2 if swa else 1)
    if p.holds_rs[il]:
        return (LayerKind.HYBRID if p.has_kv[il] else LayerKind.RECURRENT), None
    if p.has_kv[il] and d.n_head_kv[il] > 0:
        return (LayerKind.MLA if p.is_mla else (LayerKind.SWA if swa else LayerKind.FULL)), None
    return LayerKind.NONE, None


def _layers(t: ArchTraits, d: _Dims, p: _LayerPlan) -> tuple[LayerProfile, ...]:
    layers: list[LayerProfile] = []
    for il in range(d.n_layer_all):
        swa = p.is_swa[il]
        kind, kv_source = _layer_kind(il, t, d, p)
        rs = p.holds_rs[il]
        layers.append(
            LayerProfile(
                index=il,
                kind=kind,
                n_head=d.n_head[il],
                n_head_kv=d.n_head_kv[il],
                n_embd_head_k=d.head_k_swa if swa else d.head_k,
                n_embd_head_v=d.head_v_swa if swa else d.head_v,
                n_ff=d.n_ff[il],
                is_swa=swa,
                is_recurrent=rs,
                has_kv=p.has_kv[il],
                kv_source=kv_source,
                is_moe=il in p.exp_layers,
                is_nextn=il >= d.n_layer and il != d.router_layer,
                n_embd_r=p.n_embd_r if rs else 0,
                n_embd_s=p.n_embd_s if rs else 0,
                n_expert_used=d.n_expert_used[il],
                n_embd_p=p.ple_state if rs and il in p.ple_layers else 0,
                has_indexer=p.indexer[il],
                compress_ratio=p.ratios[il],
            )
        )
    return tuple(layers)


def _moe(meta: _Meta, d: _Dims) -> MoeParams | None:
    if d.n_expert <= 0:
        return None
    n_ff_exp = meta.key_or_arr(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, d.n_layer_all, d.zeros)
    return MoeParams(
        n_expert=d.n_expert,
        n_expert_used=max(d.n_expert_used, default=0),
        n_expert_shared=meta.num(Keys.LLM.EXPERT_SHARED_COUNT),
        n_ff_exp=max(n_ff_exp, default=0),
        n_ff_shexp=meta.num(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH),
        n_layer_dense_lead=meta.num(Keys.LLM.LEADING_DENSE_BLOCK_COUNT),
        n_group_used=meta.num(Keys.LLM.EXPERT_GROUP_USED_COUNT),
        n_expert_groups=meta.num(Keys.LLM.EXPERT_GROUP_COUNT),
        weights_norm=meta.flag(Keys.LLM.EXPERT_WEIGHTS_NORM, False),
        weights_scale=meta.real(Keys.LLM.EXPERT_WEIGHTS_SCALE),
    )


def _arch_warnings(t: ArchTraits) -> list[str]:
    out: list[str] = []
    if not t.known:
        out.append(
            f"architecture {t.name!r} is not known to llama.cpp 515e85511; profile built from the generic keys only"
        )
    if t.memory.approximate:
        out.append(t.memory.approximate)
    return out


def build_profile(files: ModelFiles | GGUFHeader) -> ModelProfile:
    """Resolve a model's hyper-parameters per layer, as llama.cpp's load_hparams + create_memory do."""
    headers, file_size = _headers(files)
    hparam_warnings = validate_hparams(
        headers
    )  # every hyper-parameter checked once (raises HeaderValueError)
    h = headers[0]
    if is_mmproj(h):
        return _mmproj_profile(headers, file_size)
    t = traits_of(h.architecture)
    meta = _Meta(h, h.architecture)
    tensors = _tensors(headers)
    d = _generic_dims(meta, t, {x.name for x in tensors})
    is_recr = _recurrent_layers(meta, t, d)
    swa_type, n_swa, is_swa = _swa_layers(meta, t, d, is_recr)
    mla = _mla(meta, t, d)
    ssm, n_embd_r, n_embd_s = _recurrent_state(meta, t, d, is_recr)
    ple_layers, ple_state = _ple_state(meta, t, d)
    kv_from_start = _kv_from_start(meta, t, d)
    has_kv, holds_rs = _cache_owners(t, d, is_recr, kv_from_start)
    ratios = (
        meta.key_or_arr("attention.compress_ratios", d.n_layer_all, d.zeros)
        if t.hparams.compressed_layers
        else d.zeros
    )
    indexer = _indexer_layers(meta, t, d, is_recr, ratios)
    plan = _LayerPlan(
        is_recr=is_recr, is_swa=is_swa, has_kv=has_kv, holds_rs=holds_rs, indexer=indexer, ratios=ratios,
        kv_from_start=kv_from_start, is_mla=mla is not None, n_embd_r=n_embd_r, n_embd_s=n_embd_s,
        ple_layers=ple_layers, ple_state=ple_state,
        exp_layers={x.layer for x in tensors if x.role is TensorRole.EXPERTS and x.layer is not None},
    )  # fmt: skip
    n_embd_out = meta.num(Keys.LLM.EMBEDDING_LENGTH_OUT)
    if t.hparams.hyper_connection_output:
        n_embd_out = meta.num("hyper_connection.count") * d.n_embd  # n_embd_out_impl = hc_mult * n_embd
    mix = _quant_mix(tensors)
    has_output = any(x.name == "output.weight" for x in tensors)
    return ModelProfile(
        path=h.source,
        shard_paths=tuple(x.source for x in headers),
        architecture=h.architecture,
        name=h.get_str("general.name"),
        file_type=_file_type(h, mix),
        file_size=file_size,
        n_params=sum(x.n_elements for x in tensors),
        n_layer=d.n_layer,
        n_layer_all=d.n_layer_all,
        n_nextn=d.n_nextn,
        n_embd=d.n_embd,
        n_vocab=_n_vocab(meta, h, tensors),
        n_ctx_train=meta.num(Keys.LLM.CONTEXT_LENGTH),
        layers=_layers(t, d, plan),
        tensors=tensors,
        n_embd_out=n_embd_out,
        swa_type=swa_type,
        n_swa=n_swa,
        mla=mla,
        kv_lora_rank=d.kv_lora_rank,
        moe=_moe(meta, d),
        ssm=ssm,
        rope=RopeParams(
            dimension_count=d.n_rot,
            freq_base=meta.real(Keys.Rope.FREQ_BASE, 10000.0),
            scaling_type=meta.text(Keys.Rope.SCALING_TYPE),
            scaling_factor=meta.real(Keys.Rope.SCALING_FACTOR),
            original_context_length=meta.num(Keys.Rope.SCALING_ORIG_CTX_LEN),
        ),
        causal_attn=False if t.hparams.non_causal else meta.flag(Keys.Attention.CAUSAL, True),
        has_encoder=t.hparams.has_encoder,
        pooling_type=meta.num(Keys.LLM.POOLING_TYPE),
        has_memory=t.memory.layout is not MemoryLayout.NONE,
        tied_embeddings=not has_output and any(x.name == "token_embd.weight" for x in tensors),
        alignment=h.get_int("general.alignment", 32),
        verified_architecture=t.known,
        quant_mix=mix,
        warnings=(*hparam_warnings, *_arch_warnings(t), *d.warnings, *meta.warnings),
        indexer_head_size=_indexer_width(meta, t, d) if any(indexer) else 0,
        indexer_top_k=meta.num(Keys.Attention.Indexer.TOP_K),
        # not in gguf-py's Keys: src/llama-arch.cpp LLM_KV_ATTN_RES_BLOCK_SIZE
        attn_res_block_size=meta.num("{arch}.attn_res.block_size"),
        # not in gguf-py's Keys: src/llama-arch.cpp LLM_KV_HRM_LAYERS_PER_STACK, LLM_KV_HRM_H_CYCLES, _L_CYCLES
        hrm_cycles=(
            meta.num("{arch}.hrm.layers_per_stack"),
            meta.num("{arch}.hrm.h_cycles"),
            meta.num("{arch}.hrm.l_cycles"),
        ),
        # not in gguf-py's Keys: src/llama-arch.cpp LLM_KV_ATTENTION_INDEXER_BLOCK_SIZE
        indexer_block_size=meta.num("{arch}.attention.indexer.block_size"),
        indexer_kpool=_indexer_kpool(meta, t, d) if any(indexer) else 0,
        indexer_kpool_tail=_indexer_kpool_tail(meta, t)
        if any(indexer) and _indexer_kpool(meta, t, d)
        else False,
    )
