"""What every engine shares: the cache types each accepts, their row sizes, and the fork cache result type."""

from __future__ import annotations

from dataclasses import dataclass

from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import KV_CACHE_TYPES, Engine
from fitplan.core.gguf.ggml_types import get_type, type_id
from fitplan.core.model.profile import LayerProfile, ModelProfile

#: KVarN payload bits per element (there is no kvarn7).
KVARN_BITS: dict[str, int] = {"kvarn2": 2, "kvarn3": 3, "kvarn4": 4, "kvarn5": 5, "kvarn6": 6, "kvarn8": 8}


#: mainline -ctk/-ctv types (common/arg.cpp:kv_cache_types) as (blck, type_size, row_meta).
_MAINLINE_CACHE_TYPES: dict[str, tuple[int, int, int]] = {
    name: (t.block_size, t.type_size, t.row_meta)
    for name in KV_CACHE_TYPES
    for t in [get_type(type_id(name))]
}


#: ik_llama.cpp adds q6_0 and q8_KV (8 bytes of row metadata: row bytes = 8 + 32 * n / 32).
_IK_CACHE_TYPES: dict[str, tuple[int, int, int]] = {
    **_MAINLINE_CACHE_TYPES,
    **{
        name.lower(): (t.block_size, t.type_size, t.row_meta)
        for name in ("Q6_0", "Q8_KV")
        for t in [get_type(type_id(name), ik=True)]
    },
}


#: beellama.cpp's extra standard cache types (docs/beellama-args.md): q2_0 is its internal Q2_0S.
#: Block layouts from its ggml/src/ggml-common.h static_asserts: block_q2_0s = half + 32/4 (10 B), block_q2_1 =
#: 2 halves + 32/4 (12), block_q3_0 = half + 32/8 + 32/4 (14), block_q3_1 (16), block_q6_0 = half + 32/2 + 32/4 (26),
#: block_q6_1 (28); all with 32 elements per block.
_BEELLAMA_CACHE_TYPES: dict[str, tuple[int, int, int]] = {
    **_MAINLINE_CACHE_TYPES,
    "q2_0": (32, 10, 0),
    "q2_1": (32, 12, 0),
    "q3_0": (32, 14, 0),
    "q3_1": (32, 16, 0),
    "q6_0": (32, 26, 0),
    "q6_1": (32, 28, 0),
}


def cache_types(engine: Engine) -> tuple[str, ...]:
    """Every -ctk/-ctv value the engine accepts."""
    if engine is Engine.IK_LLAMA:
        return tuple(_IK_CACHE_TYPES)
    if engine is Engine.BEELLAMA:
        return (*_BEELLAMA_CACHE_TYPES, *KVARN_BITS)
    return tuple(_MAINLINE_CACHE_TYPES)


def cache_row_bytes(engine: Engine, type_name: str, n: int) -> int:
    """Bytes of one cache row of `n` elements of a standard (non-KVarN) cache type."""
    table = {
        Engine.IK_LLAMA: _IK_CACHE_TYPES,
        Engine.BEELLAMA: _BEELLAMA_CACHE_TYPES,
    }.get(engine, _MAINLINE_CACHE_TYPES)
    key = type_name.lower()
    if key not in table:
        raise SettingsError(f"{engine.value} does not accept cache type {type_name!r}")
    blck, size, meta = table[key]
    if n % blck:
        raise SettingsError(f"cache type {type_name} needs a row length divisible by {blck}, got {n}")
    return meta + n // blck * size


@dataclass(frozen=True, slots=True)
class EngineCachePart:
    """One tensor family of a fork's cache, with its bytes per layer."""

    name: str  # "K (MLA latent)", "KVarN records", "KVarN stage", "KVarN tail", ...
    per_layer: tuple[tuple[int, int], ...]  # (layer index, bytes)
    explanation: str
    transient: bool = False  # scratch that exists only while a prompt is processed (not a persistent buffer)

    @property
    def bytes(self) -> int:
        return sum(b for _, b in self.per_layer)


def _kv_layers(profile: ModelProfile) -> tuple[LayerProfile, ...]:
    return tuple(layer for layer in profile.layers if layer.has_kv and not layer.is_nextn)
