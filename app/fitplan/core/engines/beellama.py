"""beellama.cpp's KVarN caches: packed records, the F16 stage and tail, and the MTP draft caches.

Sources: beellama.cpp v0.4.4-v0.4.6 src/llama-kvarn.cpp `llama_kvarn_make_layout`, src/llama-kv-cache-kvarn.cpp
`kvarn_record_bytes` and the `llama_kv_cache_kvarn` constructor, src/llama-kv-cache-tail.cpp.
"""

from __future__ import annotations

from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import Engine, LaunchSettings
from fitplan.core.base.results import ResolvedContext, TermKind
from fitplan.core.base.units import pad as _pad
from fitplan.core.engines.common import (
    KVARN_BITS,
    EngineCachePart,
    _kv_layers,
    cache_row_bytes,
)
from fitplan.core.memory.context import CacheAllocation, CellRule
from fitplan.core.model.profile import LayerProfile, ModelProfile

KVARN_GROUP = 128  # tokens per record group and elements per head slice


KVARN_GROUP = 128  # tokens per record group and elements per head slice
KVARN_STAGE_BYTES_PER_SLICE_GROUP = 128 * 128 * 2  # one F16 staging group: 128 dims x 128 tokens


def kvarn_record_bytes(bits: int) -> int:
    """One side's record: 128 dims x 128 tokens packed at `bits` (2048*bits bytes) + three fp16 vectors of 128."""
    return 128 * 128 * bits // 8 + 3 * 128 * 2


def kvarn_promote(type_k: str, type_v: str) -> tuple[str, str]:
    """If only one side is kvarnN the other is promoted to the same width (src/llama-kvarn.cpp)."""
    k_is, v_is = type_k in KVARN_BITS, type_v in KVARN_BITS
    if k_is and not v_is:
        return type_k, type_k
    if v_is and not k_is:
        return type_v, type_v
    return type_k, type_v


def kvarn_tail_rows(request: int, window: int, rollback_rows: int = 1) -> int:
    """Tail rows per sequence: N + R with N = max(min(128, W), min(roundup128(request), W)); 0 = intrinsic 128."""
    n = (
        max(min(KVARN_GROUP, window), min(_pad(request, KVARN_GROUP), window))
        if request > 0
        else min(128, window)
    )
    return n + rollback_rows


def _layer_types(settings: LaunchSettings, swa: bool) -> tuple[str, str, tuple[str, str], int]:
    """(K type, V type, tail types, tail element bytes) of a layer: the SWA types for SWA layers when given."""
    if swa and settings.cache_type_k_swa:
        type_k, type_v = kvarn_promote(
            settings.cache_type_k_swa, settings.cache_type_v_swa or settings.cache_type_k_swa
        )
    else:
        type_k, type_v = kvarn_promote(settings.cache_type_k, settings.cache_type_v)
    is_kvarn = type_k in KVARN_BITS
    ttype = settings.kv_tail_type or ("f16" if is_kvarn else "bf16")
    tail_elt = 4 if ttype == "f32" else 2
    tail_types = (ttype, ttype)
    return type_k, type_v, tail_types, tail_elt


def beellama_caches(
    profile: ModelProfile,
    ctx: ResolvedContext,
    settings: LaunchSettings,
    layers: tuple[LayerProfile, ...] | None = None,
    rollback_rows: int = 1,
) -> tuple[CacheAllocation, ...]:
    """beellama.cpp's KV caches (src/llama-kv-cache-kvarn.cpp) for KVarN types, or a standard cache plus its tail.

    Per KV layer and side, with `slices = head_dim / 128` and `h = n_head_kv * slices`:
    - records: I8 [record_bytes, h, G * n_stream], G = ceil(kv_size / 128), i.e. (16 * bits + 6) * h bytes per
      cell; SWA layers: G = ceil(min(kv, n_swa)/128) + ceil(n_ubatch/128) in one stream;
    - stage: F16 32768 * h * stage_groups * n_stream bytes, stage_groups = 2 * (unified ? n_seq_max : 1) + 1
      (the +1 is the permanent 128-token sink; SWA: 2 groups, one stream);
    - exact tail: [n_embd_gqa, (N + R) * n_seq_max] of the tail type (f16 for KVarN, bf16 for standard caches).
    A group whose tail covers its whole window (N == W) is one plain F16/BF16 cache instead (SWA: a bodyless ring
    of W + R rows per sequence). R (rollback rows) is 1 unless speculative rollback asks for more.
    """
    kv_layers = layers if layers is not None else _kv_layers(profile)
    n_seq = ctx.n_seq_max
    # group name -> (cell rule, K type, V type, layer -> [K bytes, V bytes] per cell)
    groups: dict[str, tuple[CellRule, str, str, dict[int, list[int]]]] = {}

    def add(group: str, rule: CellRule, types: tuple[str, str], layer: int, side: int, value: int) -> None:
        rows = groups.setdefault(group, (rule, types[0], types[1], {}))[3].setdefault(layer, [0, 0])
        rows[side] += value

    for la in kv_layers:
        swa = la.is_swa and not settings.swa_full and profile.n_swa > 0
        window = profile.n_swa if swa else ctx.n_ctx_seq
        type_k, type_v, tail_types, tail_elt = _layer_types(settings, swa)
        is_kvarn = type_k in KVARN_BITS
        tail_request = settings.kv_tail_tokens
        if swa and settings.kv_tail_tokens_swa >= 0:
            tail_request = settings.kv_tail_tokens_swa
        for side, (hd, tname) in enumerate(((la.n_embd_head_k, type_k), (la.n_embd_head_v, type_v))):
            width = hd * la.n_head_kv
            if width == 0:
                continue
            if is_kvarn:
                if hd not in (128, 256, 512):
                    raise SettingsError(
                        f"KVarN caches need a head size of 128, 256 or 512 (layer {la.index}: {hd})"
                    )
                n_tail = kvarn_tail_rows(tail_request, window, rollback_rows)
                if n_tail - rollback_rows >= window:
                    if swa:
                        add(
                            "KV (SWA ring)",
                            CellRule.FIXED,
                            tail_types,
                            la.index,
                            side,
                            width * tail_elt * (window + rollback_rows) * n_seq,
                        )
                    else:
                        add("KV", CellRule.CONTEXT, tail_types, la.index, side, width * tail_elt)
                    continue
                h = la.n_head_kv * (hd // 128)
                per_cell = (16 * KVARN_BITS[tname] + 6) * h  # record_bytes * h / 128 tokens
                if swa:
                    add(
                        "KVarN records (SWA)", CellRule.SWA_BLOCKS, (type_k, type_v), la.index, side, per_cell
                    )
                    stage = KVARN_STAGE_BYTES_PER_SLICE_GROUP * h * 2
                else:
                    add("KVarN records", CellRule.CONTEXT, (type_k, type_v), la.index, side, per_cell)
                    stage_groups = 2 * (n_seq if ctx.kv_unified else 1) + 1
                    stage = KVARN_STAGE_BYTES_PER_SLICE_GROUP * h * stage_groups * ctx.n_stream
                add("KVarN stage", CellRule.FIXED, ("f16", "f16"), la.index, side, stage)
                add(
                    "KVarN tail",
                    CellRule.FIXED,
                    tail_types,
                    la.index,
                    side,
                    width * tail_elt * n_tail * n_seq,
                )
            else:
                row = cache_row_bytes(Engine.BEELLAMA, tname, width)
                add(
                    "KV (SWA)" if swa else "KV",
                    CellRule.SWA if swa else CellRule.CONTEXT,
                    (type_k, type_v),
                    la.index,
                    side,
                    row,
                )
                if tail_request > 0:
                    n_tail = kvarn_tail_rows(tail_request, window, rollback_rows)
                    add(
                        "KV tail",
                        CellRule.FIXED,
                        tail_types,
                        la.index,
                        side,
                        width * tail_elt * n_tail * n_seq,
                    )
    return _group_allocations(groups, profile, ctx, settings)


def _group_allocations(
    groups: dict[str, tuple[CellRule, str, str, dict[int, list[int]]]],
    profile: ModelProfile,
    ctx: ResolvedContext,
    settings: LaunchSettings,
) -> tuple[CacheAllocation, ...]:
    """One cache allocation per tensor group (records, stage, tail, plain KV), at this context."""
    out: list[CacheAllocation] = []
    for name, (rule, tk, tv, rows) in groups.items():
        alloc = CacheAllocation(
            name=name,
            kind=TermKind.KV,
            cells=1,
            n_stream=1,
            type_k=tk,
            type_v=tv,
            layer_rows=tuple((i, kv[0], kv[1]) for i, kv in sorted(rows.items())),
            cell_rule=rule,
            n_swa=profile.n_swa,
            swa_full=settings.swa_full,
        )
        out.append(alloc.at(ctx))
    return tuple(out)


def beellama_kv_cache(
    profile: ModelProfile,
    *,
    n_ctx_seq: int,
    n_stream: int,
    n_seq_max: int,
    kv_unified: bool,
    n_ubatch: int,
    type_k: str,
    type_v: str,
    tail_tokens: int = 0,
    tail_type: str = "",
    swa_full: bool = False,
    rollback_rows: int = 1,
    layers: tuple[LayerProfile, ...] | None = None,
) -> tuple[EngineCachePart, ...]:
    """`beellama_caches` for explicit context numbers, as one EngineCachePart per tensor family."""
    ctx = ResolvedContext(
        n_ctx=n_ctx_seq * n_stream,
        n_ctx_seq=n_ctx_seq,
        n_seq_max=n_seq_max,
        n_stream=n_stream,
        kv_unified=kv_unified,
        n_batch=n_ubatch,
        n_ubatch=n_ubatch,
        n_outputs_max=n_seq_max,
        flash_attn=True,
        n_gpu_layers=-1,
    )
    settings = LaunchSettings(
        engine=Engine.BEELLAMA,
        cache_type_k=type_k,
        cache_type_v=type_v,
        kv_tail_tokens=tail_tokens,
        kv_tail_type=tail_type,
        swa_full=swa_full,
    )
    parts: dict[str, list[tuple[int, int]]] = {}
    for alloc in beellama_caches(profile, ctx, settings, layers, rollback_rows):
        family = alloc.name.replace(" (SWA)", "").replace(" (SWA ring)", "")
        parts.setdefault(family, []).extend(alloc.layer_bytes)
    return tuple(
        EngineCachePart(name, _merge(rows), f"{name} ({type_k}/{type_v})") for name, rows in parts.items()
    )


def _merge(rows: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: dict[int, int] = {}
    for i, b in rows:
        out[i] = out.get(i, 0) + b
    return tuple(sorted(out.items()))


#: GGML_CUDA_FATTN_KVARN_WINDOW_CHUNK per beellama version (v0.4.5 halved it: Anbeeld issue #140).
KVARN_WINDOW_CHUNK = {"0.4.3": 65536, "0.4.4": 65536, "0.4.5": 32768, "0.4.6": 65536}


def kvarn_materialization_window_bytes(
    profile: ModelProfile,
    n_kv: int,
    n_stream: int,
    chunk: int = 65536,
    layers: frozenset[int] | None = None,
) -> int:
    """CUDA multi-token KVarN prefill dequantizes the active span into F16 pool scratch (transient):
    min(n_kv, CHUNK) * n_head_kv * n_stream * (Dk + Dv) * 2 bytes, the largest over the attention layers (or over
    `layers`, the attention layers one device holds: the pool keeps its high-water mark per device).
    """
    best = 0
    for la in _kv_layers(profile):
        if layers is not None and la.index not in layers:
            continue
        best = max(
            best, min(n_kv, chunk) * la.n_head_kv * n_stream * (la.n_embd_head_k + la.n_embd_head_v) * 2
        )
    return best


def uses_kvarn(settings: LaunchSettings) -> bool:
    """Whether beellama.cpp builds a KVarN cache for the settings (either side, or the SWA types, is kvarnN)."""
    if settings.engine is not Engine.BEELLAMA:
        return False
    kinds = (
        settings.cache_type_k,
        settings.cache_type_v,
        settings.cache_type_k_swa,
        settings.cache_type_v_swa,
    )
    return any(t in KVARN_BITS for t in kinds)


def mtp_layers(profile: ModelProfile) -> tuple[LayerProfile, ...]:
    """The NextN/MTP layers an MTP draft context caches (il >= n_layer)."""
    return tuple(la for la in profile.layers if la.has_kv and (la.is_nextn or la.index >= profile.n_layer))


def beellama_mtp_caches(
    profile: ModelProfile, ctx: ResolvedContext, settings: LaunchSettings
) -> tuple[CacheAllocation, ...]:
    """beellama.cpp's MTP draft context: the same cache code over the NextN layers only, at the target's context,
    with the draft cache types (`--spec-draft-type-k/-v`, default f16)."""
    layers = mtp_layers(profile)
    if not layers:
        return ()
    draft = LaunchSettings(
        engine=Engine.BEELLAMA,
        cache_type_k=settings.mtp_cache_type_k,
        cache_type_v=settings.mtp_cache_type_v,
        kv_tail_tokens=settings.kv_tail_tokens,
        kv_tail_type=settings.kv_tail_type,
        swa_full=settings.swa_full,
    )
    return beellama_caches(profile, ctx, draft, layers)


#: `--kv-tail-tokens auto`: 1024 tokens per group (beellama docs/beellama-args.md).
KV_TAIL_AUTO = 1024
