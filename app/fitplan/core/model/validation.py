"""Hyper-parameter validation: every number fitplan takes from a header is checked once, before anything uses it.

A GGUF file comes from a stranger. llama.cpp's loader refuses a file whose keys have the wrong type
(src/llama-model-loader.cpp, GGUFMeta: "key has wrong type"), whose per-layer arrays are longer than
LLAMA_MAX_LAYERS (src/llama-hparams.h, get_key_or_arr: "array length exceeds max"), or whose expert counts break its
asserts (src/llama-model.cpp:load_hparams: n_expert_used <= n_expert). fitplan refuses the same files, with one line
naming the key, and also refuses what would only make its own arithmetic absurd (NaN or infinity in a count,
negative sizes, a layer count no file can hold). What llama.cpp would only stumble on later (a tensor it cannot
find) is a warning.

`validate_hparams` is called once, at the start of `fitplan.core.model.builder.build_profile`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Sequence

from fitplan.core.base.errors import HeaderValueError
from fitplan.core.base.numbers import int_or_none
from fitplan.core.gguf.header import GGUFArray, GGUFHeader, GGUFTensorInfo, MetadataValue
from fitplan.core.gguf.reader import is_mmproj
from fitplan.core.model.archs import traits_of

__all__ = ["LLAMA_MAX_LAYERS", "MAX_LAYER_INDEX", "UINT32_MAX", "validate_hparams"]

#: src/llama-hparams.h: the per-layer arrays (n_head_arr, n_ff_arr, ...) hold this many entries.
LLAMA_MAX_LAYERS = 512
#: The largest `blk.N` index read from a tensor name; a longer number names no layer.
MAX_LAYER_INDEX = 2**32 - 1
#: llama.cpp reads every count and size below as a uint32_t.
UINT32_MAX = 2**32 - 1

#: `{arch}.` keys fitplan reads as integers (fitplan.core.model.builder), with their smallest allowed value.
INT_KEYS: dict[str, int] = dict.fromkeys(
    (
        "attention.compress_ratios",
        "attention.head_count",
        "attention.head_count_kv",
        "attention.indexer.key_length",
        "attention.indexer.kpool",
        "attention.indexer.top_k",
        "attention.key_length",
        "attention.key_length_mla",
        "attention.key_length_swa",
        "attention.kv_lora_rank",
        "attention.q_lora_rank",
        "attention.recurrent_layers",
        "attention.shared_kv_layers",
        "attention.sliding_window",
        "attention.sliding_window_pattern",
        "attention.value_length",
        "attention.value_length_mla",
        "attention.value_length_swa",
        "block_count",
        "context_length",
        "embedding_length",
        "embedding_length_out",
        "expert_count",
        "expert_feed_forward_length",
        "expert_group_used_count",
        "expert_shared_count",
        "expert_shared_feed_forward_length",
        "expert_used_count",
        "feed_forward_length",
        "full_attention_interval",
        "hyper_connection.count",
        "kda.head_dim",
        "leading_dense_block_count",
        "nextn_predict_layers",
        "num_loops",
        "ple.conv_kernel",
        "ple.heads_per_ngram",
        "ple.layers",
        "ple.ngram_size",
        "pooling_type",
        "rope.dimension_count",
        "rope.scaling.original_context_length",
        "shortconv.l_cache",
        "ssm.conv_kernel",
        "ssm.group_count",
        "ssm.inner_size",
        "ssm.state_size",
        "ssm.time_step_rank",
        "token_shift_count",
        "vocab_size",
        "wkv.head_size",
    ),
    0,
) | {"attention.indexer.types": -1}  # -1: "the default for this layer"
#: `{arch}.` keys read as real numbers, and whether zero is allowed.
FLOAT_KEYS: dict[str, bool] = {"rope.freq_base": False, "rope.scaling.factor": True}
#: `clip.` keys read as integers (the projector profile).
CLIP_INT_KEYS = frozenset(
    f"clip.vision.{k}"
    for k in (
        "attention.head_count",
        "block_count",
        "embedding_length",
        "feed_forward_length",
        "image_size",
        "n_wa_pattern",
        "patch_size",
        "projection_dim",
        "spatial_merge_size",
    )
)

_BLK_RE = re.compile(r"^blk\.(\d+)\.([^.]+)")


@functools.lru_cache(maxsize=1 << 16)
def _blk_part(name: str) -> tuple[int, str] | None:
    """A block tensor's layer and first name part (`blk.3.attn_q.weight` -> (3, "attn_q")); kept: the quants of a
    model share their names."""
    m = _BLK_RE.match(name)
    layer = None if m is None else int_or_none(m.group(1), 0, MAX_LAYER_INDEX)
    return None if m is None or layer is None else (layer, m.group(2))


_ATTN_TENSORS = frozenset({"attn_q", "attn_k", "attn_qkv", "attn_q_a", "attn_kv_a_mqa"})
_MAX_SHOWN = 40  # characters of a value quoted in a message


def _show(v: MetadataValue) -> str:
    text = f"array of {v.length}" if isinstance(v, GGUFArray) else repr(v)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _scalars(v: MetadataValue) -> Iterable[int | float | str]:
    if isinstance(v, GGUFArray):
        for x in v.values or ():
            yield from _scalars(x)
    else:
        yield v


def _check_int(source: str, key: str, v: MetadataValue, lowest: int) -> None:
    if isinstance(v, GGUFArray) and v.length > LLAMA_MAX_LAYERS:
        raise HeaderValueError(
            source, key, f"array of {v.length} values (llama.cpp reads at most {LLAMA_MAX_LAYERS})"
        )
    for x in _scalars(v):
        if isinstance(x, str):
            raise HeaderValueError(source, key, f"{_show(x)} is text, not a number")
        if isinstance(x, float):
            if not math.isfinite(x):
                raise HeaderValueError(source, key, f"{x} is not a finite number")
            if not x.is_integer():
                raise HeaderValueError(source, key, f"{x} is not a whole number")
        n = int(x)
        if n < lowest:
            raise HeaderValueError(
                source, key, f"{n} is negative" if lowest == 0 else f"{n} is below {lowest}"
            )
        if n > UINT32_MAX:
            raise HeaderValueError(source, key, f"{n} exceeds {UINT32_MAX}")


def _check_float(source: str, key: str, v: MetadataValue, zero_ok: bool) -> None:
    for x in _scalars(v):
        if isinstance(x, str):
            raise HeaderValueError(source, key, f"{_show(x)} is text, not a number")
        if isinstance(x, float) and not math.isfinite(x):
            raise HeaderValueError(source, key, f"{x} is not a finite number")
        if float(x) < 0 or (not zero_ok and float(x) == 0):
            raise HeaderValueError(source, key, f"{x} must be {'zero or ' if zero_ok else ''}positive")


def _check_types(h: GGUFHeader, arch: str) -> None:
    """Type, finiteness, sign and uint32 range of every hyper-parameter fitplan reads (other keys may hold -inf:
    afmoe's kda.gate_lower_bound does)."""
    prefix = f"{arch}."
    for key, v in h.metadata.items():
        if key in CLIP_INT_KEYS:
            _check_int(h.source, key, v, 0)
            continue
        if not key.startswith(prefix):
            continue
        sub = key[len(prefix) :]
        if sub in INT_KEYS:
            _check_int(h.source, key, v, INT_KEYS[sub])
        elif sub in FLOAT_KEYS:
            _check_float(h.source, key, v, FLOAT_KEYS[sub])


def _num(h: GGUFHeader, key: str, default: int = 0) -> int:
    """A checked key: its value (the first element of an array), or `default`."""
    v = h.metadata.get(key)
    if isinstance(v, GGUFArray):
        first = next(iter(_scalars(v)), None)
        return default if first is None or isinstance(first, str) else int(first)
    return default if v is None or isinstance(v, str | GGUFArray) else int(v)


def _per_layer(h: GGUFHeader, key: str, n_layer: int, default: int) -> list[int]:
    v = h.metadata.get(key)
    if isinstance(v, GGUFArray):
        vals = [int(x) for x in _scalars(v) if not isinstance(x, str)]
        return vals if vals else [default] * n_layer
    return [_num(h, key, default)] * max(n_layer, 1)


def _check_layers(h: GGUFHeader, arch: str, blk: dict[int, set[str]], warnings: list[str]) -> int:
    n_layer = _num(h, f"{arch}.block_count")
    if n_layer > LLAMA_MAX_LAYERS:
        raise HeaderValueError(
            h.source, f"{arch}.block_count", f"{n_layer} layers (llama.cpp holds at most {LLAMA_MAX_LAYERS})"
        )
    nextn = _num(h, f"{arch}.nextn_predict_layers")
    if nextn > n_layer:
        raise HeaderValueError(
            h.source, f"{arch}.nextn_predict_layers", f"{nextn} exceeds block_count {n_layer}"
        )
    hp = traits_of(arch).hparams
    loops = _num(h, f"{arch}.num_loops", 1) if hp.layer_loops else 1
    if loops > 1 and (n_layer - nextn) * loops > LLAMA_MAX_LAYERS:
        raise HeaderValueError(
            h.source,
            f"{arch}.num_loops",
            f"{loops} loops of {n_layer - nextn} layers exceed {LLAMA_MAX_LAYERS} layers",
        )
    top = max(blk, default=-1)
    if blk and top >= n_layer + (1 if hp.router_layer else 0):
        warnings.append(
            f"tensors go up to blk.{top} but {arch}.block_count is {n_layer}; llama.cpp refuses such a file"
        )
    elif blk and n_layer > top + 1 and not hp.layer_loops:
        warnings.append(
            f"{arch}.block_count is {n_layer} but tensors stop at blk.{top}; llama.cpp would miss tensors"
        )
    return n_layer


def _check_heads(
    h: GGUFHeader, arch: str, n_layer: int, blk: dict[int, set[str]], warnings: list[str]
) -> None:
    heads = _per_layer(h, f"{arch}.attention.head_count", n_layer, 0)
    kv = _per_layer(h, f"{arch}.attention.head_count_kv", n_layer, -1)
    for il, (nh, nkv) in enumerate(zip(heads, kv, strict=False)):
        if nkv > nh:
            key = f"{arch}.attention.head_count_kv"
            raise HeaderValueError(
                h.source, key, f"{nkv} KV heads exceed the {nh} attention heads (layer {il})"
            )
    with_attn = sorted(il for il, subs in blk.items() if subs & _ATTN_TENSORS)
    if with_attn and max(heads, default=0) == 0:
        warnings.append(
            f"{arch}.attention.head_count is 0 or missing but blk.{with_attn[0]} has attention tensors; "
            "llama.cpp refuses this file (no KV cache counted)"
        )


def _check_experts(h: GGUFHeader, tensors: Iterable[GGUFTensorInfo], arch: str, warnings: list[str]) -> None:
    exps = [t for t in tensors if "_exps" in t.name or "_chexps" in t.name]
    n_expert = _num(h, f"{arch}.expert_count")
    if exps and n_expert == 0:
        raise HeaderValueError(
            h.source, f"{arch}.expert_count", f"0 or missing, but {exps[0].name} holds experts"
        )
    used = max(_per_layer(h, f"{arch}.expert_used_count", 1, 0), default=0)
    if n_expert > 0 and used > n_expert:
        raise HeaderValueError(
            h.source, f"{arch}.expert_used_count", f"{used} exceeds expert_count {n_expert}"
        )
    if n_expert > 1 and used == 0:
        warnings.append(
            f"{arch}.expert_count is {n_expert} but expert_used_count is 0; llama.cpp refuses this file"
        )
    stacked = {t.shape[2] for t in exps if len(t.shape) == 3 and "_exps" in t.name}
    if n_expert > 0 and stacked and stacked != {n_expert}:
        warnings.append(
            f"{arch}.expert_count is {n_expert} but the expert tensors hold {sorted(stacked)} experts"
        )


def validate_hparams(headers: Sequence[GGUFHeader]) -> tuple[str, ...]:
    """Check the hyper-parameters of a model (its shards, main first): raise `HeaderValueError` naming the key for
    what llama.cpp would refuse or fitplan cannot compute with; return warnings for what is only doubtful."""
    if not headers:
        return ()
    h = headers[0]
    arch = h.architecture
    _check_types(h, arch)
    if not arch or is_mmproj(h):
        return ()
    blk: dict[int, set[str]] = {}
    for shard in headers:
        for t in shard.tensors:
            part = _blk_part(t.name)
            if part is not None:
                blk.setdefault(part[0], set()).add(part[1])
    warnings: list[str] = []
    n_layer = _check_layers(h, arch, blk, warnings)
    _check_heads(h, arch, n_layer, blk, warnings)
    _check_experts(h, (t for shard in headers for t in shard.tensors), arch, warnings)
    return tuple(warnings)
