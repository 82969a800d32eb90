"""What the llama.cpp forks allocate differently from mainline: ik_llama.cpp, beellama.cpp (KVarN), ollama.

Sources (read, not guessed): `../shared/docs/forks-memory.md` and the forks' code it cites:
- ik_llama.cpp HEAD 8337e4c: src/llama.cpp `llama_kv_cache_init`, src/llama-model.cpp `llama_model::cache_size`,
  src/graphs/build_deepseek2.cpp (-amb), ggml/src/ggml.c type_traits (row_meta per row).
- beellama.cpp v0.4.4-v0.4.6: src/llama-kvarn.cpp `llama_kvarn_make_layout`, src/llama-kv-cache-kvarn.cpp
  `kvarn_record_bytes` and the `llama_kv_cache_kvarn` constructor, src/llama-kv-cache-tail.cpp.
- ollama fb30760 (2026-08-21): server/routes.go (VRAM-tier default context), llm/llama_server.go (the llama-server
  command it builds), envconfig/config.go (OLLAMA_* variables and their defaults).

Everything here is pure arithmetic on a ModelProfile; the estimator places each layer's bytes on its device.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import Engine, FlashAttn, LaunchSettings
from fitplan.core.base.results import ResolvedContext, TermKind
from fitplan.core.memory.context import CacheAllocation, CellRule, context_caches, context_pad_cells
from fitplan.core.model.profile import LayerProfile, ModelProfile

MIB = 1 << 20
GIB = 1 << 30

# --------------------------------------------------------------------------------------------------------------
# Cache element sizes. (block size, bytes per block, bytes of metadata per row)
# --------------------------------------------------------------------------------------------------------------

#: mainline -ctk/-ctv types (common/arg.cpp:kv_cache_types) as (blck, type_size, row_meta).
_MAINLINE_CACHE_TYPES: dict[str, tuple[int, int, int]] = {
    "f32": (1, 4, 0),
    "f16": (1, 2, 0),
    "bf16": (1, 2, 0),
    "q8_0": (32, 34, 0),
    "q4_0": (32, 18, 0),
    "q4_1": (32, 20, 0),
    "iq4_nl": (32, 18, 0),
    "q5_0": (32, 22, 0),
    "q5_1": (32, 24, 0),
}

#: ik_llama.cpp adds q6_0 and q8_KV (8 bytes of row metadata: row bytes = 8 + 32 * n / 32).
_IK_CACHE_TYPES: dict[str, tuple[int, int, int]] = {
    **_MAINLINE_CACHE_TYPES,
    "q6_0": (32, 26, 0),
    "q8_kv": (32, 32, 8),
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

#: KVarN payload bits per element (there is no kvarn7).
KVARN_BITS: dict[str, int] = {"kvarn2": 2, "kvarn3": 3, "kvarn4": 4, "kvarn5": 5, "kvarn6": 6, "kvarn8": 8}

KVARN_GROUP = 128  # tokens per record group and elements per head slice
KVARN_STAGE_BYTES_PER_SLICE_GROUP = 128 * 128 * 2  # one F16 staging group: 128 dims x 128 tokens


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


# --------------------------------------------------------------------------------------------------------------
# Result type
# --------------------------------------------------------------------------------------------------------------


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


def _pad(x: int, n: int) -> int:
    return (x + n - 1) // n * n


def _kv_layers(profile: ModelProfile) -> tuple[LayerProfile, ...]:
    return tuple(layer for layer in profile.layers if layer.has_kv and not layer.is_nextn)


# --------------------------------------------------------------------------------------------------------------
# ik_llama.cpp
# --------------------------------------------------------------------------------------------------------------


#: ik decides MLA by architecture (src/llama.cpp llama_kv_cache_init: is_mla_attn = arch == DEEPSEEK2 || GLM_DSA ||
#: MISTRAL4) and derives wk_b/wv_b from attn_kv_b at load, so legacy GGUFs without the *_mla keys run MLA too.
IK_MLA_ARCHS = frozenset({"deepseek2", "glm-dsa", "mistral4"})


def ik_is_mla(profile: ModelProfile) -> bool:
    return profile.is_mla or (profile.architecture in IK_MLA_ARCHS and profile.kv_lora_rank > 0)


def _ik_latent_dims(profile: ModelProfile) -> tuple[int, int]:
    """(kv_lora_rank, n_rot) of the latent cache row; legacy GGUFs give the rope part as rope.dimension_count."""
    if profile.mla is not None:
        return profile.mla.kv_lora_rank, profile.mla.n_rot
    return profile.kv_lora_rank, profile.rope.dimension_count


ik_latent_dims = _ik_latent_dims


def ik_effective_mla_mode(profile: ModelProfile, mla_mode: int) -> int:
    """ik forces non-MLA models to -mla 0 (src/llama.cpp, llama_new_context_with_model)."""
    if not ik_is_mla(profile):
        return 0
    if mla_mode not in (0, 1, 2, 3):
        raise SettingsError(f"-mla must be 0, 1, 2 or 3, got {mla_mode}")
    return mla_mode


def ik_caches(
    profile: ModelProfile, ctx: ResolvedContext, settings: LaunchSettings
) -> tuple[CacheAllocation, ...]:
    """ik_llama.cpp's KV cache (src/llama.cpp llama_kv_cache_init), every layer at the full context.

    MLA models with -mla >= 1 keep ONE latent tensor per layer, [kv_lora_rank + n_rot, kv_size]; its type is -ctk
    with FA on, and with FA off -ctk for -mla 1 but -ctv for -mla 2/3. Only -mla 1 without FA adds a transposed V
    cache [kv_lora_rank * kv_size] of type -ctv. -mla 0 (and every non-MLA model) is the standard K + V layout;
    an MLA model at -mla 0 caches the decompressed heads (n_head x key_length_mla, n_head x value_length_mla).
    SWA layers are sized to the full context (ik's --swa-compress, off by default, shrinks them; not modelled).
    """
    mode = ik_effective_mla_mode(profile, settings.mla_mode)
    eng = Engine.IK_LLAMA
    type_k, type_v = settings.cache_type_k, settings.cache_type_v
    if not ctx.flash_attn and type_v.lower() not in ("f32", "f16", "bf16"):
        # common/common.cpp: "Quantized V cache cannot be used without flash attention" (recorded: ik exits)
        raise SettingsError(f"ik_llama.cpp refuses a quantized V cache ({type_v}) without flash attention")
    layers = _kv_layers(profile)
    rows: list[tuple[int, int, int]] = []
    if mode == 0:
        if type_v.lower() == "q8_kv":
            # the V cache is one 1-D tensor with a single row header, but the graph addresses V cells at
            # ggml_row_size(q8_KV, n_embd_v_gqa): the view overruns it and ik aborts at context creation (recorded)
            raise SettingsError("ik_llama.cpp aborts with a q8_KV V cache at -mla 0; use q8_0 or f16 for -ctv")
        for la in layers:
            if profile.mla is not None:
                heads, k_head, v_n = la.n_head, profile.mla.key_length_mla, la.n_head * profile.mla.value_length_mla
            else:
                heads, k_head, v_n = la.n_head_kv, la.n_embd_head_k, la.n_embd_v_gqa
            # K is [n_embd_head_k, n_head_kv * kv_size]: one row (and one q8_KV row header) per head and cell
            k_row = heads * cache_row_bytes(eng, type_k, k_head)
            rows.append((la.index, k_row, cache_row_bytes(eng, type_v, v_n)))
        name = "KV self"
    else:
        rank, n_rot = _ik_latent_dims(profile)
        width = rank + n_rot
        latent_type = type_k if ctx.flash_attn or mode == 1 else type_v
        k_row = cache_row_bytes(eng, latent_type, width)
        v_row = cache_row_bytes(eng, type_v, rank) if mode == 1 and not ctx.flash_attn else 0
        rows = [(la.index, k_row, v_row) for la in layers]
        type_k, type_v = latent_type, (type_v if v_row else "")
        name = f"KV self (-mla {mode}, c^KV{' + kv^T' if v_row else ''})"
    alloc = CacheAllocation(
        name=name,
        kind=TermKind.KV,
        cells=ctx.n_ctx_seq,
        n_stream=ctx.n_stream,
        type_k=type_k,
        type_v=type_v,
        layer_rows=tuple(rows),
    )
    return (alloc,)


def ik_kv_cache(
    profile: ModelProfile,
    kv_size: int,
    *,
    mla_mode: int = 3,
    flash_attn: bool = True,
    type_k: str = "f16",
    type_v: str = "f16",
) -> tuple[EngineCachePart, ...]:
    """`ik_caches` for an explicit cache size, split into its K (latent) and V tensors."""
    ctx = ResolvedContext(
        n_ctx=kv_size,
        n_ctx_seq=kv_size,
        n_seq_max=1,
        n_stream=1,
        kv_unified=True,
        n_batch=512,
        n_ubatch=512,
        n_outputs_max=1,
        flash_attn=flash_attn,
        n_gpu_layers=-1,
    )
    settings = LaunchSettings(
        engine=Engine.IK_LLAMA, mla_mode=mla_mode, cache_type_k=type_k, cache_type_v=type_v
    )
    (alloc,) = ik_caches(profile, ctx, settings)
    k = tuple((i, kr * kv_size) for i, kr, _ in alloc.layer_rows)
    v = tuple((i, vr * kv_size) for i, _, vr in alloc.layer_rows if vr)
    latent = profile.is_mla and ik_effective_mla_mode(profile, mla_mode) > 0
    parts = [
        EngineCachePart("K (MLA latent)" if latent else "K", k, f"{alloc.name}: K rows of {alloc.type_k}")
    ]
    if v:
        parts.append(
            EngineCachePart("V^T (MLA)" if latent else "V", v, f"{alloc.name}: V rows of {alloc.type_v}")
        )
    return tuple(parts)


def ik_pad_context(n_ctx: int, flash_attn: bool) -> int:
    """ik pads the context to 256 with FA and to 32 without (`context.context_pad_cells`)."""
    return _pad(n_ctx, context_pad_cells(Engine.IK_LLAMA, flash_attn))


def ik_attention_intermediate_bytes(
    profile: ModelProfile,
    n_kv: int,
    n_tokens: int,
    *,
    mla_mode: int,
    flash_attn: bool,
    amb_mib: int,
) -> int:
    """The largest attention intermediate of one layer after ik's -amb head chunking (`ik_compute`).

    Without flash attention the scores KQ = n_kv * n_tokens * 4 bytes a head: the MLA path splits them into
    ceil(n_head / min(ceil(KQ MiB / amb), n_head)) heads a chunk, the standard path one head at a time (only
    without GQA). -mla 2/3 with flash attention on a prompt (n_tokens >= 128): the decompressed wkv_b product
    (nope + v) * n_kv * 4 bytes a head, in chunks of n_head / niter heads. 0 = no cap.
    """
    from fitplan.core.engines.ik_compute import ik_scores_bytes

    return ik_scores_bytes(profile, n_kv, n_tokens, mla_mode=mla_mode, flash_attn=flash_attn, amb_mib=amb_mib)


# --------------------------------------------------------------------------------------------------------------
# beellama.cpp KVarN
# --------------------------------------------------------------------------------------------------------------


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
                    add("KVarN records (SWA)", CellRule.KVARN_SWA, (type_k, type_v), la.index, side, per_cell)
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


# --------------------------------------------------------------------------------------------------------------
# Engine defaults
# --------------------------------------------------------------------------------------------------------------

#: `--kv-tail-tokens auto`: 1024 tokens per group (beellama docs/beellama-args.md).
KV_TAIL_AUTO = 1024


def engine_base_settings(engine: Engine, base: LaunchSettings | None = None) -> LaunchSettings:
    """The settings an engine starts from before the user's flags: its own defaults where they differ from
    mainline llama-server's.

    * ik_llama.cpp: flash attention on, `-mla 3`, fused MoE on (the LaunchSettings defaults already say so);
    * beellama.cpp: mainline's defaults;
    * ollama: one slot with a non-unified cache, `-b 512 -ub 512`, and n_ctx 0 meaning ollama's VRAM-tier default
      (resolved against the machine by `ollama_resolve`).
    """
    s = dataclasses.replace(base or LaunchSettings(), engine=engine)
    if engine is Engine.IK_LLAMA:
        return dataclasses.replace(
            s, flash_attn=FlashAttn.ON if s.flash_attn is FlashAttn.AUTO else s.flash_attn
        )
    if engine is Engine.OLLAMA:
        return dataclasses.replace(s, n_parallel=1, kv_unified=False, n_batch=512, n_ubatch=512)
    return s


@dataclass(frozen=True, slots=True)
class OllamaResolved:
    settings: LaunchSettings
    num_ctx: int  # per slot, as ollama passes it (PARAMETER num_ctx)
    automatic: bool  # num_ctx came from the VRAM tier
    note: str


def ollama_resolve(
    profile: ModelProfile, settings: LaunchSettings, total_vram_bytes: int, n_gpus: int
) -> OllamaResolved:
    """The llama-server settings ollama runs for `settings` (engine ollama): `-np` auto becomes one slot, the cache
    is not unified, and n_ctx 0 becomes the VRAM-tier num_ctx (capped at the training context) times the slots."""
    n_par = settings.n_parallel if settings.n_parallel > 0 else 1
    kvu = bool(settings.kv_unified) if settings.kv_unified is not None else False
    automatic = settings.n_ctx <= 0
    if automatic:
        num_ctx = ollama_default_num_ctx(total_vram_bytes, settings.gpu_overhead_bytes, n_gpus)
        tier = num_ctx
        if profile.n_ctx_train > 0:
            num_ctx = min(num_ctx, profile.n_ctx_train)
        note = (
            f"ollama: num_ctx {num_ctx} from its VRAM tier ({tier} for {total_vram_bytes / GIB:.1f} GiB of VRAM"
            f"{' less OLLAMA_GPU_OVERHEAD' if settings.gpu_overhead_bytes else ''}"
            f"{', capped at the training context' if num_ctx < tier else ''}), -c {num_ctx * n_par} -np {n_par}"
        )
    else:
        num_ctx = max(1, settings.n_ctx // n_par)
        note = f"ollama: num_ctx {num_ctx} per slot, -c {num_ctx * n_par} -np {n_par}"
    resolved = dataclasses.replace(settings, n_ctx=num_ctx * n_par, n_parallel=n_par, kv_unified=kvu)
    return OllamaResolved(
        resolved, num_ctx, automatic, note + f", {'unified' if kvu else 'non-unified'} cache"
    )


def ollama_config(settings: LaunchSettings) -> OllamaConfig:
    """The ollama configuration (environment and Modelfile) that makes ollama run `settings`."""
    n_par = settings.n_parallel if settings.n_parallel > 0 else 1
    kv = settings.cache_type_k if settings.cache_type_k != "f16" else ""
    fa = None if settings.flash_attn is FlashAttn.AUTO else settings.flash_attn is FlashAttn.ON
    return OllamaConfig(
        num_ctx=settings.n_ctx // n_par if settings.n_ctx > 0 else 0,
        num_parallel=n_par,
        kv_cache_type=kv,
        flash_attention=fa,
        gpu_overhead_bytes=settings.gpu_overhead_bytes,
        num_gpu=settings.n_gpu_layers if settings.n_gpu_layers >= 0 else -1,
        num_batch=settings.n_batch,
    )


# --------------------------------------------------------------------------------------------------------------
# ollama
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OllamaConfig:
    """What an ollama user sets: environment variables and Modelfile parameters."""

    num_ctx: int = 0  # PARAMETER num_ctx / OLLAMA_CONTEXT_LENGTH; 0 = the VRAM-tier default
    num_parallel: int = 1  # OLLAMA_NUM_PARALLEL (default 1)
    kv_cache_type: str = ""  # OLLAMA_KV_CACHE_TYPE ("" = f16)
    flash_attention: bool | None = None  # OLLAMA_FLASH_ATTENTION; None = auto where supported
    gpu_overhead_bytes: int = 0  # OLLAMA_GPU_OVERHEAD, reserved per GPU
    num_gpu: int = -1  # PARAMETER num_gpu; -1 = let llama-server fit it
    num_batch: int = 512  # PARAMETER num_batch (ollama's default 512 is passed as -b and -ub)


def ollama_default_num_ctx(total_vram_bytes: int, gpu_overhead_bytes: int = 0, n_gpus: int = 1) -> int:
    """server/routes.go: 262144 from 47 GiB of VRAM (minus OLLAMA_GPU_OVERHEAD per GPU), 32768 from 23 GiB, else 4096."""
    vram = total_vram_bytes - gpu_overhead_bytes * n_gpus
    if vram >= 47 * GIB:
        return 262144
    if vram >= 23 * GIB:
        return 32768
    return 4096


def ollama_llama_server_args(
    cfg: OllamaConfig, n_ctx_train: int, total_vram_bytes: int, n_gpus: int
) -> list[str]:
    """The memory-relevant part of the llama-server command ollama builds (llm/llama_server.go)."""
    num_ctx = cfg.num_ctx or ollama_default_num_ctx(total_vram_bytes, cfg.gpu_overhead_bytes, n_gpus)
    if n_ctx_train > 0:
        num_ctx = min(
            num_ctx, n_ctx_train
        )  # server/sched.go caps the automatic context at the trained length
    args = ["-c", str(num_ctx * cfg.num_parallel), "-np", str(cfg.num_parallel)]
    if cfg.kv_cache_type:
        args += ["--cache-type-k", cfg.kv_cache_type, "--cache-type-v", cfg.kv_cache_type]
    if cfg.flash_attention is None:
        args += ["--flash-attn", "auto"]
    else:
        args += ["--flash-attn", "on" if cfg.flash_attention else "off"]
    if cfg.num_batch > 0:
        args += ["-b", str(cfg.num_batch), "-ub", str(cfg.num_batch)]
    if cfg.num_gpu >= 0:
        args += ["-ngl", str(cfg.num_gpu)]
    return args


def ollama_environment(cfg: OllamaConfig) -> dict[str, str]:
    """Environment variables for `ollama serve` that reproduce the configuration."""
    env: dict[str, str] = {}
    if cfg.num_parallel != 1:
        env["OLLAMA_NUM_PARALLEL"] = str(cfg.num_parallel)
    if cfg.kv_cache_type and cfg.kv_cache_type != "f16":
        env["OLLAMA_KV_CACHE_TYPE"] = cfg.kv_cache_type
    if cfg.flash_attention is not None:
        env["OLLAMA_FLASH_ATTENTION"] = "1" if cfg.flash_attention else "0"
    if cfg.gpu_overhead_bytes:
        env["OLLAMA_GPU_OVERHEAD"] = str(cfg.gpu_overhead_bytes)
    if cfg.num_ctx:
        env["OLLAMA_CONTEXT_LENGTH"] = str(cfg.num_ctx)
    return env


def ollama_modelfile(model_ref: str, cfg: OllamaConfig) -> str:
    """A Modelfile pinning the context and GPU layers for a model."""
    lines = [f"FROM {model_ref}"]
    if cfg.num_ctx:
        lines.append(f"PARAMETER num_ctx {cfg.num_ctx}")
    if cfg.num_gpu >= 0:
        lines.append(f"PARAMETER num_gpu {cfg.num_gpu}")
    if cfg.num_batch != 512:
        lines.append(f"PARAMETER num_batch {cfg.num_batch}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------------
# Dispatch from fitplan.core.memory.context
# --------------------------------------------------------------------------------------------------------------


def resolve_flash_attn(profile: ModelProfile, settings: LaunchSettings) -> bool:
    """Flash attention for the forks: both default to on ("auto" resolves on, as in mainline); the cache types must
    be ones the fork accepts, and a quantized V cache without FA is refused except for ik's MLA latent cache."""
    allowed = cache_types(settings.engine)
    for which, t in (("K", settings.cache_type_k), ("V", settings.cache_type_v)):
        if t.lower() not in allowed:
            raise SettingsError(
                f"{settings.engine.value} has no {which} cache type {t!r}; allowed: {', '.join(allowed)}"
            )
    on = settings.flash_attn is not FlashAttn.OFF
    if not on and settings.cache_type_v.lower() not in ("f32", "f16", "bf16"):
        raise SettingsError(f"a quantized V cache ({settings.cache_type_v}) requires flash attention")
    return on


def fork_context_caches(
    profile: ModelProfile, ctx: ResolvedContext, settings: LaunchSettings
) -> tuple[CacheAllocation, ...]:
    """The caches of ik_llama.cpp or beellama.cpp: their own KV layout, mainline's recurrent state."""
    kv = (
        ik_caches(profile, ctx, settings)
        if settings.engine is Engine.IK_LLAMA
        else beellama_caches(profile, ctx, settings)
    )
    mainline = LaunchSettings(engine=Engine.LLAMA_CPP, cache_type_k="f16", cache_type_v="f16")
    recurrent = tuple(c for c in context_caches(profile, ctx, mainline) if c.kind is TermKind.RECURRENT)
    return (*kv, *recurrent)
