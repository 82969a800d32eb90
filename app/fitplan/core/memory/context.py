"""The "context" memory llama.cpp 515e85511 allocates: the resolved context, KV caches, recurrent state, output buffer.

Pure functions, no I/O. Sources (llama.cpp root):
  src/llama-context.cpp:llama_context::llama_context (n_ctx, streams, batches, n_outputs_max),
  src/llama-context.cpp:llama_init_from_model (flash-attention and cache-type rules),
  src/llama-context.cpp:llama_context::output_reserve (output buffer),
  src/llama-model.cpp:llama_model::create_memory (which caches exist),
  src/llama-kv-cache.cpp:llama_kv_cache::llama_kv_cache (tensor shapes, [TAG_V_CACHE_VARIABLE]),
  src/llama-kv-cache-iswa.cpp (SWA cache size), src/llama-kv-cache-dsa.cpp (indexer cache),
  src/llama-memory-recurrent.cpp (recurrent state rows),
  tools/server/server.cpp + server-context.cpp:server_output_limits (server defaults).

Fast path for many context lengths: the per-cell row bytes of every cache do not depend on n_ctx, only its cell
count does. Call `context_caches` once, then `CacheAllocation.bytes_at(ctx)` (or `.at(ctx).layer_bytes` for the
per-layer split) for each `ResolvedContext` from `resolve_context` with another n_ctx, the other settings unchanged
(the row bytes depend on the cache types and on flash attention): every cache's bytes are
`row_bytes_total * cells_at(ctx) * n_stream_at(ctx)`, a few integer operations per cache.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import (
    KV_CACHE_TYPES,
    SERVER_AUTO_PARALLEL,
    FlashAttn,
    LaunchSettings,
    SplitMode,
    Tool,
)
from fitplan.core.base.results import ResolvedContext, TermKind
from fitplan.core.base.units import pad
from fitplan.core.gguf.ggml_types import get_type, is_quantized_cache_type, row_size, type_id
from fitplan.core.model import archs
from fitplan.core.model.profile import LayerProfile, ModelProfile, SwaType

#: llama.cpp pads n_ctx (and the SWA cache) to this many cells (llama_context::llama_context, kv-cache-iswa).
N_CTX_PAD = 256
#: include/llama.h LLAMA_MAX_SEQ.
LLAMA_MAX_SEQ = 256
F32_BYTES = 4


class CellRule(StrEnum):
    """How a cache's cell count follows the context."""

    CONTEXT = "context"  # n_ctx_seq cells per stream
    SWA = "swa"  # PAD(min(n_ctx_seq, n_swa * (unified ? n_seq_max : 1) + n_ubatch), 256); n_ctx_seq with --swa-full
    SEQUENCES = "sequences"  # recurrent rows: max(1, n_seq_max) * (1 + n_rs_seq), independent of n_ctx
    COMPRESSED = "compressed"  # DeepSeek-V4: PAD(max(1, ceil(n_ctx_seq / compress_ratio)), 256)
    FIXED = "fixed"  # a fork's buffer whose size does not follow the context: one "cell"
    #: a fork's SWA records kept in blocks of 128 cells, one stream:
    #: 128 * (ceil(min(n_ctx_seq, n_swa) / 128) + ceil(n_ubatch / 128))
    SWA_BLOCKS = "swa_blocks"


@dataclass(frozen=True, slots=True)
class CacheAllocation:
    """One cache llama.cpp creates, with the per-cell bytes of each of its layers."""

    name: str  # as llama.cpp's log names it
    kind: TermKind  # KV or RECURRENT
    cells: int  # cells per stream (KV) or rows (recurrent state)
    n_stream: int  # KV streams (1 when unified); 1 for recurrent state
    type_k: str  # K type (R for recurrent state: "f32")
    type_v: str  # V type ("" when there is no V tensor, as in MLA); S for recurrent state
    layer_rows: tuple[tuple[int, int, int], ...]  # (layer, K or R bytes per cell, V or S bytes per cell)
    cell_rule: CellRule = CellRule.CONTEXT
    n_swa: int = 0
    swa_full: bool = False
    #: (layer, bytes per row) of a third tensor some layers carry (qwen4exp's PLE conv history, "P" in the log)
    layer_extra: tuple[tuple[int, int], ...] = ()
    compress_ratio: int = 0  # COMPRESSED rule
    per_sequence_streams: bool = False  # one stream per sequence even with a unified context (DeepSeek-V4)

    @property
    def k_bytes(self) -> int:
        return sum(k for _, k, _ in self.layer_rows) * self.cells * self.n_stream

    @property
    def v_bytes(self) -> int:
        return sum(v for _, _, v in self.layer_rows) * self.cells * self.n_stream

    @property
    def extra_bytes(self) -> int:
        return sum(p for _, p in self.layer_extra) * self.cells * self.n_stream

    @property
    def bytes(self) -> int:
        return self.row_bytes_total * self.cells * self.n_stream

    @property
    def row_bytes_total(self) -> int:
        """Bytes of one cell across all layers (K+V, or R+S, plus any P rows)."""
        return sum(k + v for _, k, v in self.layer_rows) + sum(p for _, p in self.layer_extra)

    def row_padding_bytes(
        self, layer_rows: tuple[int, int, int], row_padding: int, alignment: int, m: int
    ) -> int:
        """What a GPU buffer type adds to one layer's K and V tensors of `m` cells x streams: the last row of a
        quantized tensor padded to `row_padding` elements (ggml-cuda.cu `ggml_backend_cuda_buffer_type_get_alloc_size`,
        `MATRIX_ROW_PADDING`; the tensors are `[n_embd_k_gqa, cells, streams]`, so one padded row each), and each
        tensor's allocation padded to the buffer's `alignment` (ggml-alloc.c `ggml_backend_alloc_ctx_tensors_from_buft`)."""
        if not row_padding or self.kind is not TermKind.KV:
            return 0
        extra = 0
        _, k_row, v_row = layer_rows
        for name, row in ((self.type_k, k_row), (self.type_v, v_row)):
            if not name or not row:
                continue
            try:
                t = get_type(type_id(name))
            except ValueError:  # a fork's own cache type: its buffers are not ggml-cuda's
                continue
            if not t.quantized:
                continue
            ne0 = row // t.type_size * t.block_size
            if ne0 % row_padding:
                size = row * m
                grown = size + row_size(t.id, row_padding - ne0 % row_padding, check=False)
                extra += pad(grown, alignment) - size
        return extra

    def buffer_bytes(self, alignment: int = 32) -> int:
        """Bytes of the backend buffer: every K/V (R/S) tensor padded to the buffer's alignment (CPU 32, CUDA 128),
        as ggml_backend_alloc_ctx_tensors_from_buft lays them out."""
        m = self.cells * self.n_stream
        return sum(pad(k * m, alignment) + pad(v * m, alignment) for _, k, v in self.layer_rows) + sum(
            pad(p * m, alignment) for _, p in self.layer_extra
        )

    @property
    def n_layers(self) -> int:
        """Layers this cache holds, as llama.cpp's `size = ... layers` counts them."""
        return len(self.layer_rows)

    @property
    def layer_bytes(self) -> tuple[tuple[int, int], ...]:
        """(layer, bytes) for every layer of the cache: put each on that layer's device."""
        m = self.cells * self.n_stream
        extra = dict(self.layer_extra)
        return tuple((il, (k + v + extra.get(il, 0)) * m) for il, k, v in self.layer_rows)

    def cells_at(self, ctx: ResolvedContext) -> int:
        if self.cell_rule is CellRule.CONTEXT:
            return ctx.n_ctx_seq
        if self.cell_rule is CellRule.SWA:
            return swa_cells(ctx, self.n_swa, self.swa_full, ctx.kv_unified and not self.per_sequence_streams)
        if self.cell_rule is CellRule.COMPRESSED:
            return compressed_cells(ctx.n_ctx_seq, self.compress_ratio)
        if self.cell_rule is CellRule.FIXED:
            return 1
        if self.cell_rule is CellRule.SWA_BLOCKS:
            return 128 * (-(-min(ctx.n_ctx_seq, self.n_swa) // 128) + -(-ctx.n_ubatch // 128))
        return max(1, ctx.n_seq_max) * (1 + ctx.n_rs_seq)

    def n_stream_at(self, ctx: ResolvedContext) -> int:
        if self.kind is TermKind.RECURRENT or self.cell_rule in (CellRule.FIXED, CellRule.SWA_BLOCKS):
            return 1
        return ctx.n_seq_max if self.per_sequence_streams else ctx.n_stream

    def bytes_at(self, ctx: ResolvedContext) -> int:
        """This cache's bytes for another resolved context (same settings otherwise)."""
        return self.row_bytes_total * self.cells_at(ctx) * self.n_stream_at(ctx)

    def at(self, ctx: ResolvedContext) -> CacheAllocation:
        return replace(self, cells=self.cells_at(ctx), n_stream=self.n_stream_at(ctx))


def swa_cells(ctx: ResolvedContext, n_swa: int, swa_full: bool, unified: bool | None = None) -> int:
    """src/llama-kv-cache-iswa.cpp: SWA cache cells per stream."""
    if swa_full:
        return ctx.n_ctx_seq
    unified = ctx.kv_unified if unified is None else unified
    per = n_swa * (ctx.n_seq_max if unified else 1) + ctx.n_ubatch
    return pad(min(ctx.n_ctx_seq, per), N_CTX_PAD)


def compressed_cells(n_ctx_seq: int, ratio: int) -> int:
    """src/llama-kv-cache-dsv4.cpp: GGML_PAD(dsv4_comp_size(kv_size, ratio), 256)."""
    return pad(max(1, (n_ctx_seq + ratio - 1) // ratio), N_CTX_PAD)


# -- resolved context -------------------------------------------------------------------------------------------


def _cache_type(name: str, which: str) -> int:
    if name.lower() not in KV_CACHE_TYPES:
        raise SettingsError(f"unsupported {which} cache type {name!r}; allowed: {', '.join(KV_CACHE_TYPES)}")
    return type_id(name)


def speculative_n_max(settings: LaunchSettings) -> int:
    """common/speculative.cpp:common_speculative_n_max for the draft-style speculative types."""
    if settings.draft is not None:
        return max(0, settings.draft.n_max)
    if settings.spec_types:
        return max(0, settings.spec_draft_n_max)
    return 0


def n_rs_seq(profile: ModelProfile, settings: LaunchSettings) -> int:
    """common/common.h:need_n_rs_seq, clamped by src/llama-context.cpp when the arch cannot roll back."""
    if not profile.traits.memory.rs_rollback:
        return 0
    if not any(t in archs.RS_SEQ_SPEC_TYPES for t in settings.spec_types):
        return 0
    n_max = settings.draft.n_max if settings.draft is not None else settings.spec_draft_n_max
    return max(0, n_max)


class EngineMemory(Protocol):
    """An engine's rules for the context and its caches. Mainline's are `MAINLINE`; the forks' live in
    `fitplan.core.engines` (`memory_rules(engine)` is the one dispatch point)."""

    def resolve_flash_attn(self, profile: ModelProfile, settings: LaunchSettings) -> bool: ...

    def context_pad(self, flash_attn: bool) -> int: ...

    def context_caches(
        self, profile: ModelProfile, ctx: ResolvedContext, settings: LaunchSettings
    ) -> tuple[CacheAllocation, ...]: ...


def resolve_flash_attn(profile: ModelProfile, settings: LaunchSettings) -> bool:
    """src/llama-context.cpp:llama_init_from_model rules; FA "auto" resolves to on (the probe keeps it on for CPU,
    CUDA and Metal with common head sizes)."""
    tk = _cache_type(settings.cache_type_k, "K")
    tv = _cache_type(settings.cache_type_v, "V")
    fa = settings.flash_attn
    if fa is not FlashAttn.OFF and profile.traits.memory.flash_attn_forced_off:
        fa = FlashAttn.OFF  # "flash_attn is not compatible with Grok - forcing off"
    if (profile.is_mla or profile.traits.memory.same_kv_types) and tk != tv:
        raise SettingsError(
            f"this model does not support different K ({settings.cache_type_k}) and V ({settings.cache_type_v}) "
            "cache types"
        )
    if is_quantized_cache_type(settings.cache_type_v) and fa is FlashAttn.OFF:
        raise SettingsError(f"a quantized V cache ({settings.cache_type_v}) requires flash attention")
    on = fa is not FlashAttn.OFF
    if on:
        trunk = [ly for ly in profile.layers if not ly.is_nextn]
        for which, t, attr in (("K", tk, "n_embd_head_k"), ("V", tv, "n_embd_head_v")):
            blck = get_type(t).block_size
            if blck <= 1:
                continue
            for ly in trunk:
                head: int = getattr(ly, attr)
                if head % blck:
                    raise SettingsError(
                        f"{which} cache type {get_type(t).name.lower()} with block size {blck} does not divide "
                        f"the head size {head} of layer {ly.index}"
                    )
    return on


#: ggml-cuda's flash-attention kernels (ggml/src/ggml-cuda/fattn.cu `ggml_cuda_get_best_fattn_kernel`): K head sizes
#: that need V of the same size, and those with their own V size and a multiple the GQA ratio must be of (the
#: kernels that group the heads sharing a K/V head, `gqa_opt_applies`: a ratio of 2 at least).
CUDA_FA_SAME_HEADS = frozenset({40, 64, 72, 80, 96, 112, 128, 256})
CUDA_FA_GQA_HEADS: dict[int, tuple[int, int]] = {192: (128, 8), 320: (256, 32), 512: (512, 1), 576: (512, 1)}
#: fattn.cu `ggml_cuda_fattn_kv_type_supported`.
CUDA_FA_CACHE_TYPES = frozenset({"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"})


def cuda_flash_attn_supported(layer: LayerProfile, type_k: str, type_v: str) -> bool:
    """Whether ggml-cuda runs flash attention for `layer`'s K/V heads and cache types (`supports_op`:
    `ggml_cuda_flash_attn_ext_supported`). An MLA layer attends with its compressed row as one K/V head shared by
    every query head (K = kv_lora_rank + n_rot, V = kv_lora_rank: DeepSeek-V3's 576/512 with 128 heads runs, a
    single-head model does not). Not read from the header: ALiBi's maximum bias, which turns the grouped kernels
    off too."""
    if type_k not in CUDA_FA_CACHE_TYPES or type_v not in CUDA_FA_CACHE_TYPES:
        return False
    dk, dv = layer.n_embd_head_k, layer.n_embd_head_v
    if dk in CUDA_FA_SAME_HEADS:
        return dv == dk
    if dk not in CUDA_FA_GQA_HEADS:
        return False
    need_v, multiple = CUDA_FA_GQA_HEADS[dk]
    gqa = layer.n_head // max(1, layer.n_head_kv)
    return dv == need_v and gqa >= 2 and gqa % multiple == 0


def device_flash_attn(
    profile: ModelProfile, settings: LaunchSettings, flash_attn: bool, cuda_layers: Sequence[int]
) -> bool:
    """Flash attention after llama.cpp's probe of "auto" (src/llama-context.cpp `resolve_fused_ops`): a one-token
    graph is reserved with flash attention and it is turned off when a layer's attention is not placed on that
    layer's device, which is what the scheduler does when the device refuses the op (here: a layer on a
    ggml-cuda GPU, `cuda_layers`, that `cuda_flash_attn_supported` refuses; the CPU backend runs every shape).
    Not probed: flash attention set on or off, or turned on by a quantized V cache or the tensor split
    (`llama_init_from_model`)."""
    if not flash_attn or settings.flash_attn is not FlashAttn.AUTO:
        return flash_attn
    if is_quantized_cache_type(settings.cache_type_v) or settings.split_mode is SplitMode.TENSOR:
        return flash_attn
    tk, tv = settings.cache_type_k.lower(), settings.cache_type_v.lower()
    for il in cuda_layers:
        if il >= len(profile.layers):
            continue  # the output layer
        lp = profile.layers[il]
        attends = (lp.has_kv or lp.kv_source is not None) and lp.n_head > 0 and not lp.is_nextn
        if attends and not cuda_flash_attn_supported(lp, tk, tv):
            return False
    return True


@dataclass(frozen=True, slots=True)
class ContextGrid:
    """The contexts llama.cpp can allocate for one set of settings: padding, sequences and streams.

    The one place for these rules (llama_context::llama_context, server.cpp's -np auto): `resolve_context`, the
    curve, the planner and the engines all take the grid from `context_grid`. The padding is the engine's
    (`EngineMemory.context_pad`: 256 cells, ik_llama.cpp 32 without flash attention).
    """

    pad: int  # cells per stream n_ctx is padded to
    n_seq_max: int  # sequences (slots): -np, 4 for llama-server's -np auto, 1 for the other tools' default
    kv_unified: bool  # one stream shared by every sequence (forced by llama-server's -np auto)
    flash_attn: bool  # resolved (the padding of ik_llama.cpp depends on it)

    @classmethod
    def of(cls, resolved: ResolvedContext, rules: EngineMemory) -> ContextGrid:
        """The grid a resolved context sits on (its sequences, streams and flash attention)."""
        fa = resolved.flash_attn
        return cls(rules.context_pad(fa), resolved.n_seq_max, resolved.kv_unified, fa)

    @property
    def n_stream(self) -> int:
        return 1 if self.kv_unified else self.n_seq_max

    @property
    def step(self) -> int:
        """The distance between two contexts on the grid: pad cells per stream."""
        return self.pad * self.n_stream

    def padded(self, n_ctx: int) -> tuple[int, int]:
        """(n_ctx, n_ctx_seq) llama.cpp allocates for a requested (non-zero) n_ctx."""
        n = pad(n_ctx, self.pad)
        if self.kv_unified:
            return n, n
        seq = pad(n // self.n_seq_max, self.pad)
        return seq * self.n_seq_max, seq

    def training_cap(self, n_ctx_train: int) -> int:
        """The largest context on the grid within the training length per stream (at least one step)."""
        per_stream = (n_ctx_train // self.pad) * self.pad if n_ctx_train > 0 else 0
        return max(self.pad, per_stream) * self.n_stream


def sequence_layout(settings: LaunchSettings) -> tuple[int, bool]:
    """(n_seq_max, kv_unified) of `settings`: -np, llama-server's -np auto (4 slots, one unified cache), the other
    tools' default of 1; SettingsError for more sequences than LLAMA_MAX_SEQ."""
    n_parallel = settings.n_parallel
    kv_unified = bool(settings.kv_unified)
    if n_parallel < 0:
        if settings.tool is Tool.SERVER:
            n_parallel = SERVER_AUTO_PARALLEL  # server.cpp: "-np auto" = 4 slots, kv_unified forced on
            kv_unified = True
        else:
            n_parallel = 1  # common/common.h: n_parallel = 1 (only llama-server defaults to auto)
    n_seq_max = max(1, n_parallel)
    if n_seq_max > LLAMA_MAX_SEQ:
        raise SettingsError(f"n_seq_max must be <= {LLAMA_MAX_SEQ}")
    return n_seq_max, kv_unified


def context_grid(
    profile: ModelProfile, settings: LaunchSettings, rules: EngineMemory | None = None
) -> ContextGrid:
    """The context grid of `settings` under the engine's `rules` (None = mainline's; see `sequence_layout`)."""
    if rules is None:
        rules = MAINLINE
    n_seq_max, kv_unified = sequence_layout(settings)
    flash_attn = rules.resolve_flash_attn(profile, settings)
    return ContextGrid(rules.context_pad(flash_attn), n_seq_max, kv_unified, flash_attn)


def _f32(x: float) -> float:
    """`x` rounded to a C float, as llama.cpp stores RoPE scales."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


def trained_context(profile: ModelProfile, settings: LaunchSettings) -> int:
    """The training context llama.cpp holds the model to with these settings (the server caps each slot's context
    to it). With YaRN and a frequency scale other than the model's own, llama_init_from_model re-adjusts it to
    n_ctx_orig_yarn / rope_freq_scale (src/llama-context.cpp; recorded in tests/fixtures/llamacpp/terms/): the
    context a model is run at beyond its training length. Memory itself does not change with the scaling."""
    rope = profile.rope
    kind = settings.rope_scaling or rope.scaling_type or "linear"
    train = _f32(1.0 / _f32(rope.scaling_factor)) if rope.scaling_factor else 1.0
    if settings.rope_freq_scale > 0:
        freq = _f32(settings.rope_freq_scale)
    elif settings.rope_scale > 0:
        freq = _f32(1.0 / _f32(settings.rope_scale))
    else:
        freq = train
    if kind == "none":
        freq = 1.0
    if kind != "yarn" or freq == train:
        return profile.n_ctx_train
    orig = settings.yarn_orig_ctx or rope.original_context_length or profile.n_ctx_train
    return int(_f32(_f32(float(orig)) / freq)) & 0xFFFFFFFF


def server_n_ctx(profile: ModelProfile, settings: LaunchSettings, n_parallel: int) -> int:
    """The context llama-server creates when -c is not given: n_parallel x --kv-unified-per-slot where that is set
    (tools/server/server.cpp; recorded in tests/fixtures/llamacpp/terms/), else the training context. An explicit
    -c 0 (which keeps the training context) reads the same as no -c here."""
    if settings.n_ctx > 0:
        return settings.n_ctx
    server_code = settings.tool in (Tool.SERVER, Tool.CLI)
    if server_code and settings.kv_unified_per_slot > 0:
        return n_parallel * settings.kv_unified_per_slot
    return profile.n_ctx_train


def resolve_context(
    profile: ModelProfile, settings: LaunchSettings, rules: EngineMemory | None = None
) -> ResolvedContext:
    """The context llama.cpp derives from the settings (src/llama-context.cpp:llama_context::llama_context).

    `rules`: the engine's (`fitplan.core.engines.memory_rules(settings.engine)`); None = mainline's."""
    grid = context_grid(profile, settings, rules)
    n_batch_param = settings.n_batch
    n_ubatch_param = settings.n_ubatch
    n_parallel = grid.n_seq_max
    # llama-cli runs the server in-process (tools/cli/cli-server.h: llama_server(params)) with its own defaults
    server_code = settings.tool in (Tool.SERVER, Tool.CLI)
    embedding = settings.embedding or settings.reranking  # common/arg.cpp: --reranking sets embedding
    if server_code and embedding and n_batch_param > n_ubatch_param:
        n_batch_param = n_ubatch_param  # server.cpp: embeddings need one ubatch per batch

    n_ctx = server_n_ctx(profile, settings, n_parallel)
    if n_ctx <= 0:
        raise SettingsError("n_ctx and the model's training context cannot both be zero")
    if n_batch_param <= 0 and n_ubatch_param <= 0:
        raise SettingsError("n_batch and n_ubatch cannot both be zero")
    # the batch is clamped by the context before it is padded
    n_batch = min(n_ctx, n_batch_param) if profile.causal_attn else n_batch_param
    n_ubatch = min(n_batch, n_ubatch_param if n_ubatch_param > 0 else n_batch_param)

    # n_outputs_max: the server (and llama-cli) asks for min(n_batch, n_parallel * (1 + n_draft)); llama-fit-params
    # and the other common tools pass 0 = n_batch
    if server_code:
        if embedding:
            # server_output_limits: {n_batch, 1} (it looks at the --pooling flag, not the model's pooling type)
            requested = n_batch_param
        else:
            per_seq = 1 + speculative_n_max(settings)
            requested = max(1, min(n_batch_param, n_parallel * per_seq))
    else:
        requested = 0
    n_outputs_max = n_batch if requested == 0 or profile.has_encoder else requested

    n_ctx, n_ctx_seq = grid.padded(n_ctx)
    return ResolvedContext(
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_seq_max=grid.n_seq_max,
        n_stream=grid.n_stream,
        kv_unified=grid.kv_unified,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
        n_outputs_max=n_outputs_max,
        flash_attn=grid.flash_attn,
        n_gpu_layers=settings.n_gpu_layers,
        n_rs_seq=n_rs_seq(profile, settings),
        embeddings=embedding,
    )


# -- caches -----------------------------------------------------------------------------------------------------


def _row_size(t: int, n: int) -> int:
    """A cache row: a cache type whose block does not divide the row is refused (llama_kv_cache)."""
    gt = get_type(t)
    if n % gt.block_size:
        raise SettingsError(
            f"{gt.name.lower()} cache rows need a multiple of {gt.block_size} elements, the model has {n}"
        )
    return row_size(t, n)


def _kv_rows(
    layers: list[LayerProfile], tk: int, tv: int, has_v: bool, v_width_max: int | None
) -> tuple[tuple[int, int, int], ...]:
    rows: list[tuple[int, int, int]] = []
    for ly in layers:
        k = _row_size(tk, ly.n_embd_k_gqa)
        if has_v:
            width = ly.n_embd_v_gqa if v_width_max is None else v_width_max
            v = _row_size(tv, width)
        else:
            v = 0
        rows.append((ly.index, k, v))
    return tuple(rows)


def context_caches(
    profile: ModelProfile, ctx: ResolvedContext, settings: LaunchSettings
) -> tuple[CacheAllocation, ...]:
    """Every cache llama.cpp's create_memory builds for this context, in creation order."""
    layout = profile.traits.memory.layout
    if layout is archs.MemoryLayout.NONE or not profile.layers:
        return ()
    tk = _cache_type(settings.cache_type_k, "K")
    tv = _cache_type(settings.cache_type_v, "V")
    tk_name = get_type(tk).name.lower()
    tv_name = get_type(tv).name.lower()
    has_v = not profile.is_mla
    # [TAG_V_CACHE_VARIABLE]: without FA, V is transposed and padded to the widest V over all layers
    v_max = None if ctx.flash_attn else max((ly.n_embd_v_gqa for ly in profile.layers), default=0)
    kv_layers = [ly for ly in profile.layers if ly.has_kv]
    out: list[CacheAllocation] = []

    def kv(name: str, layers: list[LayerProfile], rule: CellRule) -> CacheAllocation:
        cells = swa_cells(ctx, profile.n_swa, settings.swa_full) if rule is CellRule.SWA else ctx.n_ctx_seq
        return CacheAllocation(
            name=name,
            kind=TermKind.KV,
            cells=cells,
            n_stream=ctx.n_stream,
            type_k=tk_name,
            type_v=tv_name if has_v else "",
            layer_rows=_kv_rows(layers, tk, tv, has_v, v_max),
            cell_rule=rule,
            n_swa=profile.n_swa,
            swa_full=settings.swa_full,
        )

    def indexer() -> CacheAllocation:
        # src/llama-kv-cache-dsa.cpp, llama-memory-hybrid-idx.cpp: one key head of the indexer width per indexed
        # layer, K only (MLA-like); llama-kv-cache-msa.cpp (minimax-m3) keeps a V row of the value head size too
        idx = [ly for ly in profile.layers if ly.has_indexer]
        msa = layout is archs.MemoryLayout.MSA
        v_idx_max = max((ly.n_embd_head_v for ly in profile.layers), default=0)
        rows = tuple(
            (
                ly.index,
                _row_size(tk, profile.indexer_head_size),
                _row_size(tv, ly.n_embd_head_v if ctx.flash_attn else v_idx_max) if msa else 0,
            )
            for ly in idx
        )
        return CacheAllocation(
            name="llama_kv_cache (indexer)",
            kind=TermKind.KV,
            cells=ctx.n_ctx_seq,
            n_stream=ctx.n_stream,
            type_k=tk_name,
            type_v=tv_name if msa else "",
            layer_rows=rows,
        )

    has_indexer = profile.indexer_head_size > 0 and any(ly.has_indexer for ly in profile.layers)
    split_swa = profile.swa_type is not SwaType.NONE

    def kv_caches() -> list[CacheAllocation]:
        """The attention caches, in the order the layout's memory module creates them."""
        if layout is archs.MemoryLayout.DSA_ISWA:
            # src/llama-kv-cache-dsa-iswa.cpp: non-SWA MLA cache, its indexer, then the window-sized SWA cache
            full = kv("llama_kv_cache (non-SWA)", [ly for ly in kv_layers if not ly.is_swa], CellRule.CONTEXT)
            swa = kv("llama_kv_cache (SWA)", [ly for ly in kv_layers if ly.is_swa], CellRule.SWA)
            return [full, indexer(), swa] if has_indexer else [full, swa]
        if layout is archs.MemoryLayout.RECURRENT:
            return []
        if split_swa and layout in (archs.MemoryLayout.KV, archs.MemoryLayout.HYBRID):
            caches = [
                kv("llama_kv_cache (non-SWA)", [ly for ly in kv_layers if not ly.is_swa], CellRule.CONTEXT),
                kv("llama_kv_cache (SWA)", [ly for ly in kv_layers if ly.is_swa], CellRule.SWA),
            ]
        else:
            caches = [kv("llama_kv_cache", kv_layers, CellRule.CONTEXT)]
        if has_indexer and layout is not archs.MemoryLayout.HYBRID:
            caches.append(indexer())
        return caches

    if layout is archs.MemoryLayout.DSV4:
        return _dsv4_caches(profile, ctx, settings, tk, tk_name)
    out.extend(kv_caches())
    if layout in (archs.MemoryLayout.RECURRENT, archs.MemoryLayout.HYBRID):
        out.append(_recurrent_cache(profile, ctx))
        if has_indexer and layout is archs.MemoryLayout.HYBRID:
            out.append(indexer())  # llama_memory_hybrid_idx creates its indexer after the hybrid caches
    return tuple(out)


def _recurrent_cache(profile: ModelProfile, ctx: ResolvedContext) -> CacheAllocation:
    """llama_memory_recurrent: R and S rows (and P, where a layer has one) per sequence and rollback snapshot."""
    rs_layers = [ly for ly in profile.layers if ly.is_recurrent]
    return CacheAllocation(
        name="llama_memory_recurrent",
        kind=TermKind.RECURRENT,
        cells=max(1, ctx.n_seq_max) * (1 + ctx.n_rs_seq),
        n_stream=1,
        type_k="f32",
        type_v="f32",
        layer_rows=tuple((ly.index, F32_BYTES * ly.n_embd_r, F32_BYTES * ly.n_embd_s) for ly in rs_layers),
        cell_rule=CellRule.SEQUENCES,
        layer_extra=tuple((ly.index, F32_BYTES * ly.n_embd_p) for ly in rs_layers if ly.n_embd_p),
    )


def _dsv4_caches(
    profile: ModelProfile, ctx: ResolvedContext, settings: LaunchSettings, tk: int, tk_name: str
) -> tuple[CacheAllocation, ...]:
    """src/llama-kv-cache-dsv4.cpp:llama_kv_cache_dsv4::llama_kv_cache_dsv4. Every cache is K-only and keeps one
    stream per sequence ("unified_raw = false"); the compressor states are f32 and sized per sequence."""
    swa_unified_cells = swa_cells(ctx, profile.n_swa, settings.swa_full, unified=False)
    n_seq = ctx.n_seq_max

    def k_only(
        name: str, layers: list[LayerProfile], rule: CellRule, cells: int, width: int = 0, ratio: int = 0
    ) -> CacheAllocation:
        return CacheAllocation(
            name=name,
            kind=TermKind.KV,
            cells=cells,
            n_stream=n_seq,
            type_k=tk_name,
            type_v="",
            layer_rows=tuple((ly.index, _row_size(tk, width or ly.n_embd_k_gqa), 0) for ly in layers),
            cell_rule=rule,
            n_swa=profile.n_swa,
            swa_full=settings.swa_full,
            compress_ratio=ratio,
            per_sequence_streams=True,
        )

    layers = list(profile.layers)
    csa = [ly for ly in layers if ly.compress_ratio == archs.DSV4_CSA_RATIO]
    hca = [ly for ly in layers if ly.compress_ratio == archs.DSV4_HCA_RATIO]
    caches = [
        k_only(
            "llama_kv_cache (non-SWA)",
            [ly for ly in layers if not ly.is_swa],
            CellRule.CONTEXT,
            ctx.n_ctx_seq,
        ),
        k_only("llama_kv_cache (SWA)", [ly for ly in layers if ly.is_swa], CellRule.SWA, swa_unified_cells),
        k_only("llama_kv_cache (CSA)", csa, CellRule.COMPRESSED, compressed_cells(ctx.n_ctx_seq, 4), ratio=4),
        k_only(
            "llama_kv_cache (HCA)", hca, CellRule.COMPRESSED, compressed_cells(ctx.n_ctx_seq, 128), ratio=128
        ),
        k_only(
            "llama_kv_cache (indexer)",
            [ly for ly in layers if ly.has_indexer],
            CellRule.COMPRESSED,
            compressed_cells(ctx.n_ctx_seq, 4),
            width=profile.indexer_head_size,
            ratio=4,
        ),
    ]
    # llama_dsv4_comp_state: per trunk layer, kv and score tensors [n_embd_state, state_size, planes] in f32
    head_k = layers[0].n_embd_head_k if layers else 0  # hparams.n_embd_head_k() = layer 0's (an SWA layer)
    rows = max(1, n_seq) * (1 + ctx.n_rs_seq)
    for name, group, width, size in (
        ("dsv4 CSA compressor state", csa, 2 * head_k, 2 * archs.DSV4_CSA_RATIO),
        ("dsv4 HCA compressor state", hca, head_k, archs.DSV4_HCA_RATIO),
        ("dsv4 indexer compressor state", csa, 2 * profile.indexer_head_size, 2 * archs.DSV4_CSA_RATIO),
    ):
        per_row = F32_BYTES * width * size
        caches.append(
            CacheAllocation(
                name=name,
                kind=TermKind.RECURRENT,
                cells=rows,
                n_stream=1,
                type_k="f32",
                type_v="f32",
                layer_rows=tuple((ly.index, per_row, per_row) for ly in group if not ly.is_nextn),
                cell_rule=CellRule.SEQUENCES,
            )
        )
    return tuple(caches)


def kv_bytes(profile: ModelProfile, ctx: ResolvedContext, settings: LaunchSettings) -> int:
    return sum(c.bytes for c in context_caches(profile, ctx, settings) if c.kind is TermKind.KV)


def recurrent_bytes(profile: ModelProfile, ctx: ResolvedContext, settings: LaunchSettings) -> int:
    return sum(c.bytes for c in context_caches(profile, ctx, settings) if c.kind is TermKind.RECURRENT)


def output_buffer_bytes(profile: ModelProfile, ctx: ResolvedContext, *, grown: bool = False) -> int:
    """src/llama-context.cpp:output_reserve: f32 logits (plus embeddings with --embedding) per output.

    The buffer is created for n_seq_max outputs (the default here; what llama.cpp logs as "output buffer size") and
    grows on demand, never shrinking, up to n_outputs_max outputs (`grown=True`: perplexity-style runs that request
    logits for every token of a batch). It is host memory (pinned when the output layer is on a GPU) and is not part
    of llama.cpp's memory breakdown."""
    n_out = max(ctx.n_outputs_max, ctx.n_seq_max) if grown else ctx.n_seq_max
    floats = profile.n_vocab * n_out
    if ctx.embeddings or profile.traits.memory.encoder_output:
        floats += (profile.n_embd_out or profile.n_embd) * n_out
    return F32_BYTES * floats


class _Mainline:
    """Mainline llama.cpp's context rules (the functions above)."""

    def resolve_flash_attn(self, profile: ModelProfile, settings: LaunchSettings) -> bool:
        return resolve_flash_attn(profile, settings)

    def context_pad(self, flash_attn: bool) -> int:
        return N_CTX_PAD

    def context_caches(
        self, profile: ModelProfile, ctx: ResolvedContext, settings: LaunchSettings
    ) -> tuple[CacheAllocation, ...]:
        return context_caches(profile, ctx, settings)


#: Mainline llama.cpp's rules (the engines that size nothing their own way run them too).
MAINLINE: EngineMemory = _Mainline()
