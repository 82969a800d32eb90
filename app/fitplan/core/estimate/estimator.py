"""The estimate: per device, per term, the memory llama.cpp allocates for a model with given launch settings.

Terms (see `fitplan.core.base.results.TermKind`):

* weights: `fitplan.core.memory.weights.place_weights` (per buffer type, llama.cpp's placement rules);
* kv / recurrent: the caches of `fitplan.core.memory.context`, each layer's share on that layer's device (or the
  host with `-nkvo`);
* compute: `fitplan.core.memory.compute.compute_buffers`, one per backend;
* output: the host logits/embeddings buffer (not part of llama.cpp's memory breakdown);
* mmproj: the projector's weights on its device plus its warm-up compute buffer;
* draft: a draft model's own weights, KV and compute at the target's context;
* reserve: the assumed per-GPU runtime reserve (`fitplan.core.memory.reserve`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fitplan.core import engines
from fitplan.core.base.devices import MIB, Device, DeviceKind, Machine, Vendor
from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import (
    KV_CACHE_TYPES,
    NGL_ALL,
    NGL_AUTO,
    Engine,
    LaunchSettings,
    LoadMode,
    MmprojPlacement,
    SplitMode,
)
from fitplan.core.base.results import (
    DeviceEstimate,
    Estimate,
    HostRuntimeBound,
    ResolvedContext,
    Term,
    TermKind,
)
from fitplan.core.base.units import pad
from fitplan.core.memory import context as context_memory
from fitplan.core.memory.compute import ComputeBuffer, ComputeInputs, compute_buffers
from fitplan.core.memory.reserve import (
    CUDA_RESERVE_ASSUMPTION,
    matmul_shapes,
    reserve_terms,
    user_reserve_explanation,
)
from fitplan.core.memory.weights import (
    CPU_ALIGNMENT,
    DEFAULT_CPU_FEATURES,
    CpuFeatures,
    WeightPlacement,
    active_gpu_positions,
    active_gpus,
    effective_overrides,
    gpu_backend,
    place_weights,
)
from fitplan.core.model.profile import ModelProfile

#: Patches assumed for an mmproj whose header gives no position-embedding table (a 448x448 image, 14-pixel patches).
MMPROJ_DEFAULT_PATCHES = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class _Parts:
    """Per-device term lists while building an estimate: index = active GPU index, last = host."""

    terms: list[list[Term]]
    transient: list[list[Term]] = dataclasses.field(default_factory=list)

    def add(self, dev: int | None, term: Term) -> None:
        if term.bytes:
            self.terms[-1 if dev is None else dev].append(term)

    def add_transient(self, dev: int | None, term: Term) -> None:
        if term.bytes:
            self.transient[-1 if dev is None else dev].append(term)


def validate_settings(profile: ModelProfile, settings: LaunchSettings) -> None:
    """Reject what llama.cpp (or the selected engine) refuses (`llama_init_from_model`), with the reason."""
    allowed = engines.cache_types(settings.engine)
    for flag, t in (("-ctk", settings.cache_type_k), ("-ctv", settings.cache_type_v)):
        if t.lower() not in allowed:
            raise SettingsError(
                f"{flag} {t}: not a KV cache type {settings.engine.value} accepts ({', '.join(allowed)})"
            )
    if settings.n_ubatch <= 0 or settings.n_batch <= 0:
        raise SettingsError("-b and -ub must be positive")


def _cache_bytes_by_device(
    cache: context_memory.CacheAllocation, placement: WeightPlacement, settings: LaunchSettings
) -> dict[int | None, tuple[int, int]]:
    """A cache's bytes and layer count on each device: every layer's share goes where that layer's KV lives."""
    per_dev: dict[int | None, tuple[int, int]] = {}
    for layer, nbytes in cache.layer_bytes:
        dev = _cache_device(placement, settings, layer)
        b, n = per_dev.get(dev, (0, 0))
        per_dev[dev] = (b + nbytes, n + 1)
    return per_dev


def _cache_device(placement: WeightPlacement, settings: LaunchSettings, layer: int) -> int | None:
    if settings.no_kv_offload:
        return None
    if layer >= len(placement.layer_device):
        return placement.output_device
    return placement.layer_device[layer]


def estimate(
    profile: ModelProfile,
    settings: LaunchSettings,
    machine: Machine,
    *,
    mmproj: ModelProfile | None = None,
    draft: ModelProfile | None = None,
    reserve_bytes: int | None = None,
    cpu: CpuFeatures = DEFAULT_CPU_FEATURES,
) -> Estimate:
    """Everything llama.cpp allocates for `profile` with `settings` on `machine`, per device and term."""
    validate_settings(profile, settings)
    gpus = active_gpus(settings, machine)
    assumptions: list[str] = []
    settings, wsettings = _engine_settings(profile, settings, gpus, assumptions)
    placement = place_weights(
        profile, wsettings, machine, cpu=cpu, load_mtp="draft-mtp" in settings.spec_types
    )
    warnings = _profile_warnings(profile)
    _auto_ngl_note(settings, bool(gpus), assumptions)

    ctx = _resolve(profile, settings, placement)
    parts = _Parts([[] for _ in range(len(gpus) + 1)], [[] for _ in range(len(gpus) + 1)])
    names = [gpu_backend(machine.gpus[i], i).buffer_type for i in active_gpu_positions(settings, machine)]

    _add_weights(parts, placement, names)

    # KV cache and recurrent state.
    caches = engines.engine_context_caches(profile, ctx, settings)
    for cache in caches:
        for dev, (nbytes, n_layers) in _cache_bytes_by_device(cache, placement, settings).items():
            parts.add(dev, Term(cache.kind, nbytes, _cache_explanation(cache, n_layers), cache.name))

    if settings.engine is Engine.BEELLAMA:
        _add_beellama_extras(parts, profile, settings, ctx, placement, gpus, names, assumptions)
    elif settings.engine is Engine.IK_LLAMA:
        _ik_assumptions(profile, settings, ctx, assumptions)

    _add_output(parts, profile, ctx)

    # Compute buffers.
    cinputs = compute_inputs(profile, settings, ctx, caches, gpus, placement)
    cbufs = compute_buffers(profile, cinputs, placement, tuple(d.vendor for d in gpus))
    for cb in cbufs:
        parts.add(cb.device, _compute_term(cb, cinputs))
    if gpus:
        assumptions.append(
            "GPU compute buffers: the split of graph tensors between GPU and host follows the scheduler's rules; "
            "it was checked against CPU runs only"
        )

    # mmproj.
    if mmproj is not None:
        _add_mmproj(parts, mmproj, settings, gpus, ctx, assumptions)

    # Draft model: same n_ctx as the target, its own cache types and -ngld.
    if draft is not None and settings.draft is not None:
        _add_draft(parts, draft, settings, machine, ctx, cpu)

    _add_reserves(parts, gpus, settings, reserve_bytes, assumptions, profile, ctx.n_ubatch)

    if settings.n_ctx > profile.n_ctx_train > 0:
        warnings.append(f"-c {settings.n_ctx} is above the model's training context {profile.n_ctx_train}")

    devices = _assemble(machine, active_gpu_positions(settings, machine), parts)
    host_runtime = _host_runtime(profile, settings, ctx, caches)
    return Estimate(
        settings=settings,
        context=ctx,
        devices=devices,
        host_runtime=host_runtime,
        weights_file_backed=placement.file_backed,
        warnings=tuple(warnings),
        assumptions=tuple(assumptions),
    )


def _add_weights(parts: _Parts, placement: WeightPlacement, names: Sequence[str]) -> None:
    """Weights, one term per buffer type."""
    for b in placement.buffers:
        where = "host" if b.device is None else names[b.device]
        kind_note = ""
        if b.buffer_type == "CPU_Mapped":
            kind_note = ", mmap'd from the file (evictable page cache)"
        elif b.buffer_type == "CPU_REPACK":
            kind_note = ", repacked copies for the CPU kernels (anonymous memory)"
        parts.add(
            b.device,
            Term(
                TermKind.WEIGHTS,
                b.bytes,
                f"{b.n_tensors} tensors in {b.buffer_type} on {where}, each padded to the buffer's alignment"
                f"{kind_note}",
                label=b.buffer_type,
            ),
        )


def _add_output(parts: _Parts, profile: ModelProfile, ctx: ResolvedContext) -> None:
    # Output buffer (host, never in llama.cpp's breakdown): created for n_seq_max outputs, it grows only for
    # requests that ask for every token's logits.
    out_bytes = context_memory.output_buffer_bytes(profile, ctx)
    grown = context_memory.output_buffer_bytes(profile, ctx, grown=True)
    parts.add(
        None,
        Term(
            TermKind.OUTPUT,
            out_bytes,
            f"logits buffer: 4 B x n_vocab {profile.n_vocab} x {ctx.n_seq_max} outputs (host); grows to "
            f"{grown / MIB:.1f} MiB if a request asks for all {max(ctx.n_outputs_max, ctx.n_seq_max)} logits",
        ),
    )


def _add_reserves(
    parts: _Parts,
    gpus: Sequence[Device],
    settings: LaunchSettings,
    reserve_bytes: int | None,
    assumptions: list[str],
    profile: ModelProfile,
    n_ubatch: int,
) -> None:
    # Runtime reserve on each GPU in use: one term per named part, or the user's value.
    shapes = matmul_shapes(profile, n_ubatch)
    for gi, d in enumerate(gpus):
        if not parts.terms[gi]:
            continue
        if reserve_bytes is not None:
            terms = [Term(TermKind.RESERVE, reserve_bytes, user_reserve_explanation(reserve_bytes))]
        else:
            terms = [
                Term(TermKind.RESERVE, t.bytes, t.explanation, t.label) for t in reserve_terms(d, shapes)
            ]
        if settings.engine is Engine.OLLAMA and settings.gpu_overhead_bytes:
            terms.append(
                Term(
                    TermKind.RESERVE,
                    settings.gpu_overhead_bytes,
                    f"OLLAMA_GPU_OVERHEAD {settings.gpu_overhead_bytes / MIB:.0f} MiB (ollama keeps it free)",
                    "OLLAMA_GPU_OVERHEAD",
                )
            )
        for term in terms:
            parts.add(gi, term)
    if reserve_bytes is None and any(d.vendor in (Vendor.NVIDIA, Vendor.GENERIC) for d in gpus):
        assumptions.append(CUDA_RESERVE_ASSUMPTION)


def _profile_warnings(profile: ModelProfile) -> list[str]:
    warnings: list[str] = list(profile.warnings)
    if not profile.verified_architecture:
        warnings.append(
            f"architecture {profile.architecture!r} is not known to this version: generic estimate from the "
            "standard keys (KV for every layer, dense FFN)"
        )
    return warnings


def _auto_ngl_note(settings: LaunchSettings, has_gpus: bool, assumptions: list[str]) -> None:
    if settings.n_gpu_layers == NGL_AUTO and has_gpus:
        assumptions.append(
            "-ngl auto: estimated with all layers on the GPUs; with --fit on llama.cpp may move layers to the CPU "
            "(see the plan)"
            if settings.fit
            else "-ngl auto with --fit off: all layers on the GPUs"
        )


def _engine_settings(
    profile: ModelProfile, settings: LaunchSettings, gpus: Sequence[Device], assumptions: list[str]
) -> tuple[LaunchSettings, LaunchSettings]:
    """What the engine makes of the settings: (settings the context is built from, settings the weights are placed
    with). ollama resolves its VRAM-tier context and one non-unified slot; ik_llama.cpp's -rtr loads without mmap."""
    if settings.engine is Engine.OLLAMA:
        vram = sum(d.total_bytes for d in gpus)
        res = engines.ollama_resolve(profile, settings, vram, len(gpus))
        assumptions.append(res.note)
        return res.settings, res.settings
    if settings.engine is Engine.IK_LLAMA and settings.run_time_repack:
        assumptions.append(
            "ik_llama.cpp -rtr: CPU-side weights are repacked at load (same bytes) and --no-mmap is forced: they "
            "are anonymous RAM, not page cache"
        )
        return settings, dataclasses.replace(settings, load_mode=LoadMode.NONE)
    return settings, settings


def _ik_assumptions(
    profile: ModelProfile, settings: LaunchSettings, ctx: ResolvedContext, assumptions: list[str]
) -> None:
    mode = engines.ik_effective_mla_mode(profile, settings.mla_mode)
    if profile.is_mla:
        assumptions.append(f"ik_llama.cpp -mla {mode}: KV cache laid out by ik's llama_kv_cache_init")
    if settings.fused_moe and profile.is_moe:
        assumptions.append(
            "ik_llama.cpp -fmoe: fused up/gate MoE kernels; the compute buffer still counts separate up and gate "
            "intermediates (mainline's graph), so it errs high there"
        )
    inter = engines.ik_attention_intermediate_bytes(
        profile,
        ctx.n_ctx_seq,
        min(ctx.n_ctx, ctx.n_ubatch),
        mla_mode=mode,
        flash_attn=ctx.flash_attn,
        amb_mib=settings.attn_max_batch_mib,
    )
    if inter:
        cap = f"-amb {settings.attn_max_batch_mib}" if settings.attn_max_batch_mib else "no -amb cap"
        assumptions.append(
            f"ik_llama.cpp compute buffers follow ik's own graph (core/engines/ik_compute.py, checked against recorded ik "
            f"CPU runs): the attention intermediate per layer is {inter / MIB:.1f} MiB ({cap}); with a GPU, ik's f16 "
            "copies of the decompressed K/V are read from its source, not measured"
        )


def _add_beellama_extras(
    parts: _Parts,
    profile: ModelProfile,
    settings: LaunchSettings,
    ctx: ResolvedContext,
    placement: WeightPlacement,
    gpus: Sequence[Device],
    names: Sequence[str],
    assumptions: list[str],
) -> None:
    """beellama.cpp: the MTP draft context's caches and the KVarN prefill window (transient) per CUDA GPU."""
    if "draft-mtp" in settings.spec_types:
        for cache in engines.beellama_mtp_caches(profile, ctx, settings):
            for dev, (nbytes, _) in _cache_bytes_by_device(cache, placement, settings).items():
                parts.add(
                    dev,
                    Term(
                        TermKind.DRAFT,
                        nbytes,
                        f"MTP draft context: {cache.name} of the NextN layers at {ctx.n_ctx_seq} cells, K "
                        f"{cache.type_k}, V {cache.type_v}",
                        f"MTP draft {cache.name}",
                    ),
                )
    if not engines.uses_kvarn(settings) or settings.no_kv_offload:
        return
    chunk = engines.KVARN_WINDOW_CHUNK["0.4.6"]
    for gi, d in enumerate(gpus):
        if d.vendor not in (Vendor.NVIDIA, Vendor.AMD, Vendor.GENERIC):
            continue
        layers = frozenset(
            la.index
            for la in profile.layers
            if la.has_kv and _cache_device(placement, settings, la.index) == gi
        )
        if not layers:
            continue
        w = engines.kvarn_materialization_window_bytes(profile, ctx.n_ctx_seq, ctx.n_stream, chunk, layers)
        parts.add_transient(
            gi,
            Term(
                TermKind.KV,
                w,
                f"KVarN prefill window: min(n_kv {ctx.n_ctx_seq}, chunk {chunk}) x n_head_kv x {ctx.n_stream} "
                "streams x (Dk + Dv) x 2 B of F16 scratch in the CUDA pool, while a prompt is processed",
                "KVarN window (transient)",
            ),
        )
        assumptions.append(
            f"beellama KVarN: {names[gi]} also needs a transient {w / MIB:.0f} MiB prefill window (CUDA pool "
            f"scratch, chunk {chunk} tokens; {engines.KVARN_WINDOW_CHUNK['0.4.5']} in v0.4.5): not in the "
            "persistent total"
        )


def _resolve(profile: ModelProfile, settings: LaunchSettings, placement: WeightPlacement) -> ResolvedContext:
    ctx = context_memory.resolve_context(profile, settings, engines.memory_rules(settings.engine))
    return dataclasses.replace(ctx, n_gpu_layers=placement.n_gpu_layers)


def compute_inputs(
    profile: ModelProfile,
    settings: LaunchSettings,
    ctx: ResolvedContext,
    caches: Sequence[context_memory.CacheAllocation],
    gpus: Sequence[Device],
    placement: WeightPlacement,
) -> ComputeInputs:
    """What the compute reserve depends on, for this context."""
    n_kv_base, n_kv_swa = _mask_cells(caches, ctx)
    n_tok = min(ctx.n_ctx, ctx.n_ubatch)
    ik = settings.engine is Engine.IK_LLAMA
    return ComputeInputs(
        n_tok=n_tok,
        n_out=min(
            n_tok, ctx.n_outputs_max
        ),  # ik_compute sizes ik's own logits (every token is an output there)
        n_kv_base=n_kv_base,
        n_kv_swa=n_kv_swa,
        flash_attn=ctx.flash_attn,
        cache_type_k=_graph_cache_type(settings.cache_type_k),
        cache_type_v=_graph_cache_type(settings.cache_type_v),
        op_offload=settings.op_offload,
        n_seqs=ctx.n_seq_max,
        pipeline_parallel=_pipeline_parallel(profile, settings, gpus, placement),
        n_stream=ctx.n_stream,
        fork_graph=engines.fork_graph(settings.engine),
        ik_amb_mib=settings.attn_max_batch_mib,
        ik_mla_mode=engines.ik_effective_mla_mode(profile, settings.mla_mode),
        ik_type_k=settings.cache_type_k if ik else "",
    )


def _graph_cache_type(name: str) -> str:
    """The mainline cache type the compute graph is sized with: a fork's own type maps to the mainline type of the
    same role (ik's q8_KV and q6_0 and beellama's q2_0..q6_1 to q8_0; KVarN, read as F16 windows, to f16)."""
    if name in KV_CACHE_TYPES:
        return name
    if name.lower() in engines.KVARN_BITS:
        return "f16"
    return "q8_0"


def _pipeline_parallel(
    profile: ModelProfile, settings: LaunchSettings, gpus: Sequence[Device], placement: WeightPlacement
) -> bool:
    """`llama_context` turns pipeline parallelism on for >1 device, every layer offloaded, split mode layer, KV
    offloaded and no tensor overrides (async compute and events are assumed, as CUDA and RPC have them)."""
    return (
        len(gpus) > 1
        and placement.n_gpu_layers > profile.n_layer_all
        and settings.split_mode is SplitMode.LAYER
        and not settings.no_kv_offload
        and not effective_overrides(settings)
        and all(d.vendor is not Vendor.APPLE for d in gpus)
    )


def _cache_explanation(cache: context_memory.CacheAllocation, n_layers: int) -> str:
    if cache.kind is TermKind.RECURRENT:
        return f"{n_layers} recurrent layers x {cache.cells} rows (R + S state, f32)"
    types = f"K {cache.type_k}" + (f", V {cache.type_v}" if cache.type_v else " (no V: MLA)")
    streams = f" x {cache.n_stream} streams" if cache.n_stream > 1 else ""
    return f"{n_layers} layers x {cache.cells} cells{streams}, {types}"


def _mask_cells(caches: Sequence[context_memory.CacheAllocation], ctx: ResolvedContext) -> tuple[int, int]:
    """KV cells per stream of the base cache and of the SWA cache (what the masks span)."""
    base = swa = 0
    for c in caches:
        if c.kind is not TermKind.KV or not c.layer_rows or c.name.endswith("(indexer)"):
            continue
        if c.cell_rule is context_memory.CellRule.SWA:
            swa = max(swa, c.cells)
        else:
            base = max(base, c.cells)
    del ctx
    return base, swa


def _compute_term(cb: ComputeBuffer, ci: ComputeInputs) -> Term:
    return Term(
        TermKind.COMPUTE,
        cb.bytes,
        f"graph reserve for {ci.n_tok} tokens, {ci.n_out} outputs: {cb.explain()}",
    )


def _add_mmproj(
    parts: _Parts,
    mmproj: ModelProfile,
    settings: LaunchSettings,
    gpus: Sequence[Device],
    ctx: ResolvedContext,
    assumptions: list[str],
) -> None:
    on_gpu = settings.mmproj is MmprojPlacement.GPU and bool(gpus)
    dev: int | None = 0 if on_gpu else None
    align = gpu_backend(gpus[0], 0).alignment if on_gpu else CPU_ALIGNMENT
    wbytes = sum(pad(t.n_bytes, align) for t in mmproj.tensors)
    where = gpu_backend(gpus[0], 0).buffer_type if on_gpu else "CPU"
    parts.add(
        dev,
        Term(
            TermKind.MMPROJ, wbytes, f"projector weights, one buffer on {where} (no mmap)", "mmproj weights"
        ),
    )
    # Warm-up compute (tools/mtmd/clip.cpp reserves the graph of one warm-up image).
    cbytes, detail = mmproj_compute(mmproj, ctx.flash_attn, align)
    parts.add(dev, Term(TermKind.MMPROJ, cbytes, f"projector warm-up compute: {detail}", "mmproj compute"))
    if detail.endswith("approximation)"):
        assumptions.append(
            "mmproj compute buffer approximated from the vision tower's shapes (only LLaVA MLP, Gemma 3 and "
            "Qwen2.5-VL projector graphs are modelled)"
        )
    assumptions.append("mmproj compute is the warm-up image's; real images larger than it grow the buffer")


#: tools/mtmd/clip.cpp load_hparams: Qwen2-VL, Qwen2.5-VL and Qwen3-VL warm up with an image of 46 x 46 merged
#: tokens ("avoid OOM on warmup"), whatever the image size key says.
QWEN_VL_WARMUP_SIDE = 46


def mmproj_compute(mmproj: ModelProfile, flash_attn: bool, align: int = CPU_ALIGNMENT) -> tuple[int, str]:
    """Bytes of the projector's warm-up compute buffer (clip.cpp reserves the graph of one warm-up image).

    Three vision graphs are named tensor by tensor, from the allocator's list of live tensors at each new peak
    (`ggml-base` built with GGML_ALLOCATOR_DEBUG, the projector loaded through libmtmd), with `E` one
    `[n_embd, n_pos]` f32 block, `F` one `[n_ff, n_pos]` FFN intermediate and `KQ` the `[n_pos, n_pos, n_head]`
    f32 scores of an attention without flash attention:

    * LLaVA's MLP projector (`mlp`, models/llava.cpp): the graph inputs (raw image, positions, patch indices) stay
      at the bottom; the peak is a block's FFN above four blocks (`4E + F`, one of them the hole the patch
      embedding left, a row shorter: no class token) or, without flash attention, the scores above five
      (`5E + KQ`), or the projector: its input (the `n_pos - 1` patch rows, the class token dropped) and its two
      projection-wide activations.
    * Gemma 3's SigLIP tower (`gemma3`, models/siglip.cpp): the inputs are freed before the blocks and their
      space reused; `3E + F` (residual, a one-block hole, the FFN norm, FFN up) or `6E + KQ`.
    * Qwen2.5-VL (`qwen2.5vl_merger`, models/qwen2vl.cpp, warm-up image 46 x 46 merged tokens): the inputs
      (raw image, window indices, M-RoPE positions and the f32 `[n_pos, n_pos]` window mask) stay at the bottom;
      with flash attention the mask's f16 copy is allocated above four blocks in the first block (no hole fits it)
      and lives until the last windowed block, and the next FFN's SwiGLU output lands above it (its gate and up
      take the f32 mask's space): `inputs + 4E + mask16 + F`; without it, `inputs + 5E + KQ`.

    Other projectors: the raw f32 image, then the larger of one block's live set (`2E + F`, plus `KQ` without
    flash attention) and the projector's (`4 * n_pos * (n_embd + 2 proj)`), an approximation read from the
    tensor shapes (`v.position_embd` gives n_pos, `v.blk.0.ffn_up` n_ff, the widest `mm.*` matrix the width).
    """
    shapes = {t.name: t.shape for t in mmproj.tensors}
    clip = mmproj.clip
    if clip is not None and clip.n_embd > 0 and clip.patch_size > 0 and clip.n_head > 0:
        n_embd, n_ff, n_head, patch = clip.n_embd, clip.n_ff, clip.n_head, clip.patch_size
        ptype = clip.projector_type
        fa = "flash attention" if flash_attn else "no flash attention"
        if ptype == "qwen2.5vl_merger" and clip.n_wa_pattern > 0:
            merge = clip.spatial_merge_size or 2
            side = QWEN_VL_WARMUP_SIDE * merge * patch
            n_pos = (side // patch) ** 2
            e, f, kq = 4 * n_pos * n_embd, 4 * n_pos * n_ff, 4 * n_pos * n_pos * n_head
            # inp_raw, inv_window_idx (n_pos/4 i32), positions (4 n_pos i32), window_mask, window_idx
            inputs = sum(
                pad(b, align) for b in (4 * 3 * side * side, n_pos, 16 * n_pos, 4 * n_pos * n_pos, n_pos)
            )
            body = 4 * e + pad(2 * n_pos * n_pos, align) + f if flash_attn else 5 * e + kq
            return inputs + body, (
                f"Qwen2.5-VL warm-up image {side}x{side} ({n_pos} patches, width {n_embd}, FFN {n_ff}, {fa}): "
                "inputs with the window mask, its f16 copy, four blocks and the FFN"
            )
        n_side = clip.image_size // patch
        n_pos = n_side * n_side
        if ptype == "gemma3":
            e, f, kq = 4 * n_pos * n_embd, 4 * n_pos * n_ff, 4 * n_pos * n_pos * n_head
            body = 3 * e + f if flash_attn else 6 * e + kq
            return body, (
                f"SigLIP warm-up image {clip.image_size}x{clip.image_size} ({n_pos} patches, width {n_embd}, "
                f"FFN {n_ff}, {fa})"
            )
        if ptype == "mlp":
            n_tok = n_pos + (1 if "v.class_embd" in shapes else 0)
            mm0 = shapes.get("mm.0.weight")
            proj = mm0[1] if mm0 and len(mm0) > 1 else clip.projection_dim
            e, f, kq = 4 * n_tok * n_embd, 4 * n_tok * n_ff, 4 * n_tok * n_tok * n_head
            # inp_raw, positions (n_tok i32), patches (n_pos i32)
            inputs = sum(pad(b, align) for b in (4 * 3 * clip.image_size**2, 4 * n_tok, 4 * n_pos))
            # the patch embedding before the class token is joined ([n_embd, n_pos]) leaves a hole among the blocks
            e_patch = 4 * n_pos * n_embd
            block = 3 * e + e_patch + f if flash_attn else 4 * e + e_patch + kq
            projector = e_patch + 2 * 4 * n_pos * proj
            return inputs + max(block, projector), (
                f"CLIP warm-up image {clip.image_size}x{clip.image_size} ({n_tok} positions, width {n_embd}, "
                f"FFN {n_ff}, projection {proj}, {fa})"
            )
    pos = shapes.get("v.position_embd.weight")
    n_embd = pos[0] if pos else (clip.n_embd if clip else mmproj.n_embd)
    n_pos = pos[1] if pos and len(pos) > 1 else MMPROJ_DEFAULT_PATCHES
    patch = shapes.get("v.patch_embd.weight", (14,))[0]
    if clip is not None and clip.projector_type in ("qwen2vl_merger", "qwen3vl_merger"):
        merge = clip.spatial_merge_size or 2
        n_pos = (QWEN_VL_WARMUP_SIDE * merge) ** 2
    up = shapes.get("v.blk.0.ffn_up.weight")
    n_ff = up[1] if up and len(up) > 1 else 4 * n_embd
    n_head = clip.n_head if clip and clip.n_head else max(1, n_embd // 64)
    proj = max((s[1] for n, s in shapes.items() if n.startswith("mm.") and len(s) > 1), default=n_embd)
    side = round(max(n_pos - 1, 1) ** 0.5) * patch
    raw = 4 * 3 * side * side
    block = 4 * n_pos * (2 * n_embd + n_ff) + (0 if flash_attn else 4 * n_pos * n_pos * n_head)
    projector = 4 * n_pos * (n_embd + 2 * proj)
    return raw + max(block, projector), (
        f"image {side}x{side} ({n_pos} positions, width {n_embd}, FFN {n_ff}, projection {proj}; approximation)"
    )


def draft_settings(settings: LaunchSettings) -> LaunchSettings:
    """The draft model's own settings: the target's context and slots, its -ngld and -ctkd/-ctvd, no overrides
    (`-ngld` auto offloads everything; --fit does not change it)."""
    ds = settings.draft
    assert ds is not None
    return dataclasses.replace(
        settings,
        n_gpu_layers=NGL_ALL if ds.n_gpu_layers == NGL_AUTO else ds.n_gpu_layers,
        cache_type_k=ds.cache_type_k,
        cache_type_v=ds.cache_type_v,
        tensor_overrides=(),
        n_cpu_moe=0,
        cpu_moe=False,
        draft=None,
        mmproj_path=None,
    )


def _add_draft(
    parts: _Parts,
    draft: ModelProfile,
    settings: LaunchSettings,
    machine: Machine,
    ctx: ResolvedContext,
    cpu: CpuFeatures,
) -> None:
    dsettings = dataclasses.replace(draft_settings(settings), n_ctx=ctx.n_ctx)
    sub = estimate(draft, dsettings, machine, reserve_bytes=0, cpu=cpu)
    positions = active_gpu_positions(settings, machine)
    for i, de in enumerate(sub.devices):  # in machine order: GPU i is machine.gpus[i]
        if de.device.kind is DeviceKind.CPU:
            dev: int | None = None
        else:
            dev = positions.index(i) if i in positions else None
            if dev is None:
                continue
        total = de.used_bytes
        detail = ", ".join(f"{k.value} {de.bytes_of(k) / MIB:.1f} MiB" for k in TermKind if de.bytes_of(k))
        parts.add(
            dev, Term(TermKind.DRAFT, total, f"draft model {draft.name or draft.path}: {detail}", "draft")
        )
        del i


def _assemble(machine: Machine, positions: Sequence[int], parts: _Parts) -> tuple[DeviceEstimate, ...]:
    out: list[DeviceEstimate] = []
    for mi, d in enumerate(machine.gpus):
        idx = positions.index(mi) if mi in positions else None
        terms = tuple(parts.terms[idx]) if idx is not None else ()
        transient = tuple(parts.transient[idx]) if idx is not None and parts.transient else ()
        out.append(DeviceEstimate(d, terms, transient))
    out.append(
        DeviceEstimate(
            machine.host, tuple(parts.terms[-1]), tuple(parts.transient[-1]) if parts.transient else ()
        )
    )
    return tuple(out)


def _host_runtime(
    profile: ModelProfile,
    settings: LaunchSettings,
    ctx: ResolvedContext,
    caches: Sequence[context_memory.CacheAllocation],
) -> tuple[HostRuntimeBound, ...]:
    bounds: list[HostRuntimeBound] = []
    if settings.cache_ram_mib != 0:
        if settings.cache_ram_mib < 0:
            bounds.append(
                HostRuntimeBound("prompt cache", -1, "--cache-ram -1: no limit on the host prompt cache")
            )
        else:
            bounds.append(
                HostRuntimeBound(
                    "prompt cache",
                    settings.cache_ram_mib * MIB,
                    f"--cache-ram {settings.cache_ram_mib} MiB: saved prompts' KV state, filled as requests arrive",
                )
            )
    per_seq = 0
    for c in caches:
        if c.kind is TermKind.RECURRENT:
            per_seq += c.row_bytes_total * (1 + ctx.n_rs_seq)
        elif c.cell_rule is context_memory.CellRule.SWA:
            per_seq += c.row_bytes_total * min(c.cells, profile.n_swa + ctx.n_ubatch)
    if per_seq and settings.ctx_checkpoints > 0:
        n_slots = ctx.n_seq_max
        bounds.append(
            HostRuntimeBound(
                "context checkpoints",
                per_seq * settings.ctx_checkpoints * n_slots,
                f"up to {settings.ctx_checkpoints} checkpoints x {n_slots} slots x {per_seq / MIB:.1f} MiB "
                "(one sequence's SWA / recurrent state)",
            )
        )
    return tuple(bounds)
