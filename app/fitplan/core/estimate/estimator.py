"""The estimate: per device, per term, the memory llama.cpp allocates for a model with given launch settings.

Terms (see `fitplan.core.base.results.TermKind`):

* weights: `fitplan.core.memory.weights.place_weights` (per buffer type, llama.cpp's placement rules);
* kv / recurrent: the caches of `fitplan.core.memory.context`, each layer's share on that layer's device (or the
  host with `-nkvo`);
* compute: `fitplan.core.memory.compute.compute_buffers`, one per backend;
* output: the host logits/embeddings buffer (not part of llama.cpp's memory breakdown);
* mmproj: the projector's weights on its device, its warm-up compute buffer and, for a projector whose images
  grow past the warm-up one (Qwen2.5-VL), what the largest image adds at run time;
* draft: a draft model's own weights, KV and compute at the target's context;
* reserve: the assumed per-GPU runtime reserve (`fitplan.core.memory.reserve`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence

from fitplan.core import engines
from fitplan.core.base.devices import MIB, Device, DeviceKind, Machine, Vendor
from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import (
    NGL_ALL,
    NGL_AUTO,
    Engine,
    LaunchSettings,
    MmprojPlacement,
    SplitMode,
)
from fitplan.core.base.numbers import int_or_none
from fitplan.core.base.results import (
    MMPROJ_IMAGES_LABEL,
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
from fitplan.core.memory.compute.allocator import BestFit
from fitplan.core.memory.reserve import (
    CUDA_RESERVE_ASSUMPTION,
    matmul_shapes,
    reserve_terms,
    user_reserve_explanation,
)
from fitplan.core.memory.weights import (
    CPU_ALIGNMENT,
    CUDA_VENDORS,
    DEFAULT_CPU_FEATURES,
    CpuFeatures,
    WeightPlacement,
    active_gpu_positions,
    active_gpus,
    effective_overrides,
    gpu_backend,
    mapped_span_bytes,
    place_weights,
)
from fitplan.core.model.lora import LoraAdapter, LoraError
from fitplan.core.model.profile import ClipParams, ModelProfile

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
    cache: context_memory.CacheAllocation,
    placement: WeightPlacement,
    settings: LaunchSettings,
    row_padding: Sequence[tuple[int, int]] = (),
) -> dict[int | None, tuple[int, int]]:
    """A cache's bytes and layer count on each device: every layer's share goes where that layer's KV lives,
    with the padded last row a GPU's buffer type adds to a quantized tensor ((row padding, alignment) per GPU)."""
    per_dev: dict[int | None, tuple[int, int]] = {}
    m = cache.cells * cache.n_stream
    for rows, (layer, nbytes) in zip(cache.layer_rows, cache.layer_bytes, strict=True):
        dev = _cache_device(placement, settings, layer)
        if dev is not None and dev < len(row_padding):
            nbytes += cache.row_padding_bytes(rows, *row_padding[dev], m)
        b, n = per_dev.get(dev, (0, 0))
        per_dev[dev] = (b + nbytes, n + 1)
    return per_dev


def gpu_row_padding(settings: LaunchSettings, machine: Machine) -> tuple[tuple[int, int], ...]:
    """Per active GPU, the elements its buffer type pads the last row of a quantized tensor to (0: none) and the
    buffer's alignment, where the engine's cache sizes include it (`EngineHooks.pads_cache_rows`)."""
    if not engines.hooks(settings.engine).pads_cache_rows:
        return ()
    return tuple(
        (b.row_padding, b.alignment)
        for b in (gpu_backend(machine.gpus[i], i) for i in active_gpu_positions(settings, machine))
    )


def _gpu_compute_note(gpus: Sequence[Device]) -> str:
    """What the GPU compute buffers were checked against, for the plan's GPUs."""
    others = sorted({d.vendor.value for d in gpus if d.vendor not in CUDA_VENDORS | {Vendor.RPC}})
    if not others and all(d.vendor is Vendor.RPC for d in gpus):
        return "compute buffers of RPC devices: measured with loopback ggml-rpc-server devices"
    if not others:
        return (
            "GPU compute buffers: measured on CUDA-shaped stand-in devices (llama.cpp's own scheduler and allocator, "
            "no GPU kernel run); what only a running GPU allocates is counted apart"
        )
    notes = []
    if Vendor.APPLE.value in others:
        notes.append(
            "on Metal, planned with the CUDA-shaped compute model and measured on Metal-shaped stand-ins: under where "
            "Metal's always-reserved flash-attention scratch decides the peak (long contexts, MLA models) and where "
            "it copies host experts in (docs/accuracy.md)"
        )
    if any(v != Vendor.APPLE.value for v in others):
        notes.append(
            "on Vulkan, planned with the CUDA-shaped compute model and ggml-vulkan's limits (ggml-alloc's 1 GiB "
            "chunks, the 4 GiB storage range: no 64-bit shader indexing assumed) and measured on Vulkan-shaped "
            "stand-ins (docs/accuracy.md)"
        )
    return "GPU compute buffers " + "; ".join(notes)


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
    loras: Sequence[LoraAdapter] = (),
) -> Estimate:
    """Everything llama.cpp allocates for `profile` with `settings` on `machine`, per device and term."""
    validate_settings(profile, settings)
    gpus = active_gpus(settings, machine)
    engine = engines.hooks(settings.engine)
    resolved = engine.settings(profile, settings, gpus)
    settings = resolved.settings
    assumptions: list[str] = list(resolved.assumptions)
    placement = place_weights(
        profile, resolved.weights, machine, cpu=cpu, load_mtp="draft-mtp" in settings.spec_types
    )
    warnings = _profile_warnings(profile)
    _auto_ngl_note(settings, bool(gpus), assumptions)

    ctx = _resolve(profile, settings, placement, gpus)
    parts = _Parts([[] for _ in range(len(gpus) + 1)], [[] for _ in range(len(gpus) + 1)])
    names = [gpu_backend(machine.gpus[i], i).buffer_type for i in active_gpu_positions(settings, machine)]

    _add_weights(parts, placement, names)
    if loras:
        _add_loras(
            parts,
            profile,
            placement,
            loras,
            [machine.gpus[i] for i in active_gpu_positions(settings, machine)],
        )

    # KV cache and recurrent state.
    caches = engines.engine_context_caches(profile, ctx, settings)
    padding = gpu_row_padding(settings, machine)
    for cache in caches:
        for dev, (nbytes, n_layers) in _cache_bytes_by_device(cache, placement, settings, padding).items():
            parts.add(dev, Term(cache.kind, nbytes, _cache_explanation(cache, n_layers), cache.name))

    cache_device = functools.partial(_cache_device, placement, settings)
    extras = engine.extras(engines.ExtrasInput(profile, settings, ctx, cache_device, gpus, names))
    for dev, term in extras.terms:
        parts.add(dev, term)
    for dev, term in extras.transient:
        parts.add_transient(dev, term)
    assumptions.extend(extras.assumptions)

    _add_output(parts, profile, ctx)

    # Compute buffers.
    cinputs = compute_inputs(profile, settings, ctx, caches, gpus, placement)
    cbufs = compute_buffers(
        profile,
        cinputs,
        placement,
        tuple(d.vendor for d in gpus),
        tuple(d.shader_64bit_indexing for d in gpus),
    )
    for cb in cbufs:
        parts.add(cb.device, _compute_term(cb, cinputs))
    if gpus:
        assumptions.append(_gpu_compute_note(gpus))

    # mmproj.
    if mmproj is not None:
        _add_mmproj(parts, mmproj, settings, gpus, ctx, assumptions, profile.causal_attn)

    # Draft model: same n_ctx as the target, its own cache types and -ngld.
    if draft is not None and settings.draft is not None:
        _add_draft(parts, draft, settings, machine, ctx, cpu)

    _add_reserves(
        parts, gpus, engine.gpu_overhead(settings), reserve_bytes, assumptions, profile, ctx.n_ubatch
    )

    trained = context_memory.trained_context(profile, settings)
    if settings.n_ctx > trained > 0:
        warnings.append(f"-c {settings.n_ctx} is above the model's training context {trained}")
    elif trained != profile.n_ctx_train:
        assumptions.append(
            f"RoPE scaling: llama.cpp holds the model to a {trained}-token training context "
            f"(trained for {profile.n_ctx_train}); the scaling changes no buffer"
        )

    devices = _assemble(machine, active_gpu_positions(settings, machine), parts)
    host_runtime = _host_runtime(profile, settings, ctx, caches)
    return Estimate(
        settings=settings,
        context=ctx,
        devices=devices,
        host_runtime=host_runtime,
        weights_file_backed=placement.file_backed,
        weights_mapped_span=mapped_span_bytes(profile, placement),
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


def _add_loras(
    parts: _Parts,
    profile: ModelProfile,
    placement: WeightPlacement,
    loras: Sequence[LoraAdapter],
    gpus: Sequence[Device],
) -> None:
    """LoRA adapters (`fitplan.core.model.lora`): each pair in its base weight's buffer type, CPU for a repacked
    weight, padded to that buffer's alignment; one term per device. An adapter for another model is refused as
    llama.cpp refuses it."""
    where = {t.name: t for t in placement.tensors if not t.duplicate}
    shapes = {t.name: t.shape for t in profile.tensors}
    per_device: dict[int | None, tuple[int, int]] = {}
    for adapter in loras:
        name = adapter.path.rsplit("/", 1)[-1]
        for pair in adapter.pairs:
            base = where.get(pair.base)
            if base is None:
                raise LoraError(
                    f"--lora {name}: {pair.base} is not a weight of this model (another base model?)"
                )
            if not pair.fits(shapes.get(pair.base, ())):
                raise LoraError(
                    f"--lora {name}: {pair.base} has another shape in this model (another base model?)"
                )
            dev = base.device
            align = CPU_ALIGNMENT if dev is None else gpu_backend(gpus[dev], dev).alignment
            nbytes = pad(pair.a_bytes, align) + pad(pair.b_bytes, align)
            total, count = per_device.get(dev, (0, 0))
            per_device[dev] = (total + nbytes, count + 1)
    for dev, (nbytes, count) in per_device.items():
        parts.add(
            dev,
            Term(
                TermKind.WEIGHTS,
                nbytes,
                f"{count} LoRA pairs ({len(loras)} adapter{'s' if len(loras) != 1 else ''}) beside their base "
                "weights, allocated (not mapped), each tensor padded to the buffer's alignment",
                label="LoRA",
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
    overhead: tuple[int, str],
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
        if overhead[0]:  # what the engine keeps free besides (ollama's OLLAMA_GPU_OVERHEAD)
            terms.append(
                Term(TermKind.RESERVE, overhead[0], overhead[1].removeprefix(" + "), "engine overhead")
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


def _resolve(
    profile: ModelProfile, settings: LaunchSettings, placement: WeightPlacement, gpus: Sequence[Device]
) -> ResolvedContext:
    ctx = context_memory.resolve_context(profile, settings, engines.memory_rules(settings.engine))
    fa = ctx.flash_attn
    if settings.engine is Engine.LLAMA_CPP:
        # mainline's probe of flash attention "auto" on the devices the layers are placed on
        cuda = [
            il
            for il, d in enumerate(placement.layer_device)
            if d is not None and d < len(gpus) and gpus[d].vendor in CUDA_VENDORS
        ]
        fa = context_memory.device_flash_attn(profile, settings, fa, cuda)
    return dataclasses.replace(ctx, n_gpu_layers=placement.n_gpu_layers, flash_attn=fa)


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
    engine = engines.hooks(settings.engine)
    return ComputeInputs(
        n_tok=n_tok,
        n_out=min(n_tok, ctx.n_outputs_max),  # a fork graph sizes its own logits
        n_kv_base=n_kv_base,
        n_kv_swa=n_kv_swa,
        flash_attn=ctx.flash_attn,
        cache_type_k=engine.graph_cache_type(settings.cache_type_k),
        cache_type_v=engine.graph_cache_type(settings.cache_type_v),
        op_offload=settings.op_offload,
        n_seqs=ctx.n_seq_max,
        pipeline_parallel=_pipeline_parallel(profile, settings, gpus, placement),
        kv_offload=not settings.no_kv_offload,
        n_stream=ctx.n_stream,
        fork_graph=engine.fork_graph(profile, settings),
    )


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


def mmproj_on_gpu(placement: MmprojPlacement, active_gpus: int) -> bool:
    """Where the projector goes: on the first GPU when asked and a GPU takes part (after -dev), else on the CPU
    (clip.cpp falls back to the CPU backend when there is no GPU)."""
    return placement is MmprojPlacement.GPU and active_gpus > 0


#: tools/mtmd/mtmd.cpp `mtmd_decode_use_non_causal`: projectors whose images are decoded with non-causal attention
#: (Gemma 4's vision projector only at widths other than 1536 and 2560).
NON_CAUSAL_PROJECTORS = ("gemma3", "gemma4uv", "deepseek4v")


def server_image_token_cap(
    mmproj: ModelProfile, image_max_tokens: int, n_ubatch: int, text_causal: bool
) -> int | None:
    """The --image-max-tokens llama-server passes to the projector where it caps it, else None.

    tools/server/server-context.cpp (loading the projector): an image must fit in one ubatch when the text model
    processes the prompt in one ubatch (non-causal attention or no memory: half of it, the other half is left to
    the text) or when the projector needs non-causal attention on the image (the whole ubatch); a limit above
    that (the flag, else the projector's own: 4096 tokens for the Qwen-VL family, 1024 for Pixtral) is lowered to
    it, and --image-min-tokens with it. Only the Qwen-VL family's and Pixtral's limits are known here (clip.cpp applies the flag where
    load_hparams sets a limit, `set_limit_image_tokens`); other projectors are left uncapped."""
    clip = mmproj.clip
    if clip is None:
        return None
    ptype = clip.projector_type
    non_causal = ptype in NON_CAUSAL_PROJECTORS or (
        ptype == "gemma4v" and clip.projection_dim not in (1536, 2560)
    )
    if text_causal and not non_causal:
        return None
    if ptype not in (*QWEN_VL_FULL_ATTENTION, "qwen2.5vl_merger", "pixtral"):
        return None  # no token limit known here (clip applies the flag only where it sets one)
    n_max = n_ubatch // 2 if not text_causal else n_ubatch
    own = (
        image_max_tokens
        if image_max_tokens > 0
        else (PIXTRAL_MAX_TOKENS if ptype == "pixtral" else QWEN_VL_MAX_TOKENS)
    )
    return n_max if own > n_max else None


def _add_mmproj(
    parts: _Parts,
    mmproj: ModelProfile,
    settings: LaunchSettings,
    gpus: Sequence[Device],
    ctx: ResolvedContext,
    assumptions: list[str],
    text_causal: bool = True,
) -> None:
    capped = server_image_token_cap(mmproj, settings.image_max_tokens, ctx.n_ubatch, text_causal)
    if capped is not None:
        settings = dataclasses.replace(
            settings, image_max_tokens=capped, image_min_tokens=min(settings.image_min_tokens, capped)
        )
        assumptions.append(
            f"llama-server caps the projector's image tokens to {capped} (n_ubatch {ctx.n_ubatch}: "
            + (
                "the model processes the prompt in one ubatch"
                if not text_causal
                else "non-causal attention on images"
            )
            + "); a larger -ub raises it"
        )
    on_gpu = mmproj_on_gpu(settings.mmproj, len(gpus))
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
    imt = settings.image_max_tokens
    cbytes, detail = mmproj_compute(mmproj, ctx.flash_attn, align, imt)
    parts.add(dev, Term(TermKind.MMPROJ, cbytes, f"projector warm-up compute: {detail}", "mmproj compute"))
    if on_gpu:
        inputs = mmproj_graph_inputs(mmproj, image_max_tokens=imt)
        parts.add(
            None,
            Term(
                TermKind.MMPROJ,
                inputs,
                "projector graph inputs of the warm-up image, kept on the CPU backend and copied to the GPU "
                "(ggml_backend_sched: graph inputs go to the last backend)",
                "mmproj compute",
            ),
        )
    if detail.endswith("approximation)"):
        assumptions.append(
            "mmproj compute buffer approximated from the vision tower's shapes (only LLaVA MLP, Gemma 3, "
            "Qwen2-VL, Qwen2.5-VL and Qwen3-VL projector graphs are modelled)"
        )
    growth = mmproj_image_growth(mmproj, ctx.flash_attn, align, imt, settings.image_min_tokens)
    if growth is None:
        assumptions.append(
            "mmproj compute is the warm-up image's; real images larger than it grow the buffer (a measured "
            f"per-image rule exists for {MEASURED_IMAGE_RULES} projectors only)"
        )
        return
    parts.add(dev, Term(TermKind.MMPROJ, growth.device_bytes, growth.explain(), MMPROJ_IMAGES_LABEL))
    if on_gpu:
        parts.add(
            None,
            Term(
                TermKind.MMPROJ,
                growth.host_input_bytes,
                f"projector graph inputs of the largest image ({growth.tokens} tokens) beyond the warm-up's, "
                "on the CPU backend",
                MMPROJ_IMAGES_LABEL,
            ),
        )
    assumptions.append(growth.assumption())


#: tools/mtmd/clip.cpp load_hparams: Qwen2-VL, Qwen2.5-VL and Qwen3-VL warm up with an image of 46 x 46 merged
#: tokens ("avoid OOM on warmup"), whatever the image size key says.
QWEN_VL_WARMUP_SIDE = 46


#: clip.cpp load_hparams: a Qwen2-VL / 2.5-VL / 3-VL image takes 8 to 4096 merged tokens
#: (`set_limit_image_tokens(8, 4096)`), unless --image-min-tokens / --image-max-tokens say otherwise.
QWEN_VL_MIN_TOKENS = 8
QWEN_VL_MAX_TOKENS = 4096


def qwen_vl_warmup_side(image_max_tokens: int = -1, side: int = QWEN_VL_WARMUP_SIDE) -> int:
    """Merged tokens on a side of the Qwen-VL warm-up image: 46 (Pixtral: 16), or `int(sqrt(N))` (at least 1) when
    --image-max-tokens N allows fewer than that squared (clip-model.h `set_warmup_n_tokens`)."""
    if 0 < image_max_tokens < side * side:
        side = max(1, math.isqrt(image_max_tokens))
    return side


def mmproj_compute(
    mmproj: ModelProfile, flash_attn: bool, align: int = CPU_ALIGNMENT, image_max_tokens: int = -1
) -> tuple[int, str]:
    """Bytes of the projector's warm-up compute buffer (clip.cpp reserves the graph of one warm-up image;
    `image_max_tokens` is --image-max-tokens, which makes a Qwen-VL warm-up image smaller).

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
      and lives until the last windowed block, the f32 mask is freed once cast, and of a windowed block's three
      FFN intermediates (gate, up, SwiGLU output, `F` each) as many as fit go into the f32 mask's space, the rest
      above (`inputs + 4E + mask16 + (3 - k) F` with `k = min(3, mask32 // F)` from 784 tokens up; the whole
      graph is replayed with the allocator's best fit, `_qwen25vl_replay`, which also holds below 784 tokens,
      where other holes take more of the blocks); without it, `inputs + 5E + KQ`. Measured
      (`tools/groundtruth/mmproj_image.cpp`) from 64 to 32768 patches: byte-exact at every size.
    * Qwen2-VL, Qwen3-VL and Pixtral: `qwen2vl_graph_bytes`, `qwen3vl_graph_bytes`, `pixtral_graph_bytes`.

    Other projectors: the raw f32 image, then the larger of one block's live set (`2E + F`, plus `KQ` without
    flash attention) and the projector's (`4 * n_pos * (n_embd + 2 proj)`), an approximation read from the
    tensor shapes (`v.position_embd` gives n_pos, `v.blk.0.ffn_up` n_ff, the widest `mm.*` matrix the width).
    """
    shapes = {t.name: t.shape for t in mmproj.tensors}
    clip = mmproj.clip
    if clip is not None and clip.n_embd > 0 and clip.patch_size > 0 and clip.n_head > 0:
        fa = "flash attention" if flash_attn else "no flash attention"
        if clip.projector_type == "qwen2.5vl_merger" and clip.n_wa_pattern > 0:
            return _qwen25vl_compute(clip, flash_attn, align, fa, image_max_tokens)
        if clip.projector_type in QWEN_VL_FULL_ATTENTION:
            return _qwen_vl_full_compute(mmproj, flash_attn, align, fa, image_max_tokens)
        if clip.projector_type == "pixtral":
            return _pixtral_compute(mmproj, flash_attn, align, fa, image_max_tokens)
        if clip.projector_type == "gemma3":
            return _siglip_compute(clip, flash_attn, fa)
        if clip.projector_type == "mlp":
            return _llava_compute(clip, shapes, flash_attn, align, fa)
    return _generic_projector_compute(mmproj, shapes, flash_attn)


def mmproj_graph_inputs(mmproj: ModelProfile, align: int = CPU_ALIGNMENT, image_max_tokens: int = -1) -> int:
    """Bytes of the projector's graph inputs for the warm-up image, each tensor padded to `align`.

    `ggml_backend_sched` keeps a graph's inputs on its last backend, the CPU (ggml-backend.cpp
    `ggml_backend_sched_backend_id_from_cur`, "graph input"), and copies them to the GPU, whose warm-up buffer is
    the same as a CPU-only run's: with the projector on a GPU they are the host's share of clip's compute
    (llama-server on a CUDA-shaped stand-in: LLaVA 1.30 MiB, Gemma 3 9.19 MiB, Qwen2.5-VL 292.41 MiB with its f32
    window mask). LLaVA: the raw image, positions and patch indices; Qwen2.5-VL: the raw image, window indices,
    M-RoPE positions and the window mask; Gemma 3's SigLIP and the other projectors: the raw image."""
    clip = mmproj.clip
    shapes = {t.name: t.shape for t in mmproj.tensors}
    if clip is not None and clip.n_embd > 0 and clip.patch_size > 0 and clip.n_head > 0:
        if clip.projector_type == "qwen2.5vl_merger" and clip.n_wa_pattern > 0:
            n_pos = _qwen25vl_patches(clip, qwen_vl_warmup_side(image_max_tokens) ** 2)
            return sum(pad(b, align) for b in _qwen25vl_inputs(clip, n_pos))
        if clip.projector_type in QWEN_VL_FULL_ATTENTION:
            n_pos = _qwen25vl_patches(clip, qwen_vl_warmup_side(image_max_tokens) ** 2)
            return sum(pad(b, align) for b in _qwen_vl_full_inputs(clip, n_pos))
        if clip.projector_type == "pixtral":
            n_pos = (
                qwen_vl_warmup_side(image_max_tokens, PIXTRAL_WARMUP_SIDE) * (clip.spatial_merge_size or 1)
            ) ** 2
            return sum(pad(b, align) for b in _pixtral_inputs(clip, n_pos))
        if clip.projector_type == "mlp":
            return sum(pad(b, align) for b in _llava_inputs(clip, shapes))
        if clip.projector_type == "gemma3":
            return pad(4 * 3 * clip.image_size**2, align)
    return pad(_generic_raw_image(mmproj, shapes), align)


def _qwen25vl_patches(clip: ClipParams, tokens: int) -> int:
    """Patches of an image of `tokens` merged tokens (a token merges spatial_merge_size^2 patches)."""
    return tokens * (clip.spatial_merge_size or 2) ** 2


def _qwen25vl_inputs(clip: ClipParams, n_pos: int) -> tuple[int, ...]:
    """inp_raw (f32 RGB, patch^2 pixels a patch), inv_window_idx (n_pos/4 i32), positions (4 n_pos i32),
    window_mask (f32), window_idx."""
    return (4 * 3 * n_pos * clip.patch_size**2, n_pos, 16 * n_pos, 4 * n_pos * n_pos, n_pos)


def qwen25vl_graph_bytes(clip: ClipParams, n_pos: int, flash_attn: bool, align: int = CPU_ALIGNMENT) -> int:
    """The compute buffer of Qwen2.5-VL's graph for an image of `n_pos` patches (see `mmproj_compute`): the graph
    depends on the patch count, not on the image's shape."""
    if not flash_attn:
        inputs = sum(pad(b, align) for b in _qwen25vl_inputs(clip, n_pos))
        return inputs + 5 * 4 * n_pos * clip.n_embd + 4 * n_pos * n_pos * clip.n_head
    return _qwen25vl_replay(clip, n_pos, align)


@functools.lru_cache(maxsize=256)  # a replay per image size; estimates repeat them
def _qwen25vl_replay(clip: ClipParams, n_pos: int, align: int) -> int:
    """Qwen2.5-VL's graph with flash attention replayed with the allocator's best fit, in the order of the
    allocator's trace: the inputs (raw image, inverse window index, positions, the f32 window mask, window index);
    the two patch embeddings (f16 im2col, conv, a copy each), their sum and the window reordering; per block the
    norm, Q / K / V and the roped Q and K, the f16 copies of K and V, in a windowed block the mask's f16 copy
    (cast once in the first, freed after the last) and its per-block copy, the attention output and its
    projection (the next residual), the FFN norm, gate, up and SwiGLU, the FFN output. The merger stays below."""
    e, f = pad(4 * n_pos * clip.n_embd, align), pad(4 * n_pos * clip.n_ff, align)
    raw, inv, positions, mask, widx = (pad(b, align) for b in _qwen25vl_inputs(clip, n_pos))
    im2col, half, mask16 = (
        pad(b, align) for b in (2 * 3 * clip.patch_size**2 * n_pos, e // 2, 2 * n_pos * n_pos)
    )
    ops: list[tuple[str, int]] = [
        ("raw", raw), ("inv", inv), ("pos", positions), ("mask", mask), ("widx", widx),
        ("im0", im2col), ("cv0", e), ("im0", 0), ("c1", e), ("cv0", 0), ("im1", im2col), ("raw", 0), ("cv1", e),
        ("im1", 0), ("c2", e), ("cv1", 0), ("c2", 0), ("p1", e), ("c1", 0), ("p2", e), ("p1", 0), ("res0", e),
        ("p2", 0), ("inv", 0),
    ]  # fmt: skip
    windowed = [il for il in range(clip.n_layer) if (il + 1) % clip.n_wa_pattern]
    for il in range(clip.n_layer):
        ops += [
            ("ln", e), ("q", e), ("qr", e), ("q", 0), ("k", e), ("kr", e), ("k", 0), ("v", e), ("ln", 0),
            ("kc", half), ("kr", 0), ("vc", half), ("v", 0),
        ]  # fmt: skip
        if windowed and il == windowed[0]:
            ops += [("m16", mask16), ("mask", 0)]
        if il in windowed:
            ops += [("mc", mask16), *([("m16", 0)] if il == windowed[-1] else [])]
        ops += [
            ("fa", e), ("qr", 0), ("kc", 0), ("vc", 0), ("mc", 0), (f"res{il + 1}", e), ("fa", 0), (f"res{il}", 0),
            ("fn", e), ("gate", f), ("up", f), ("fn", 0), ("sw", f), ("gate", 0), ("up", 0), ("dn", e), ("sw", 0),
            ("dn", 0),
        ]  # fmt: skip
    return BestFit().run(ops)


def _qwen25vl_compute(
    clip: ClipParams, flash_attn: bool, align: int, fa: str, image_max_tokens: int = -1
) -> tuple[int, str]:
    tokens_side = qwen_vl_warmup_side(image_max_tokens)
    n_pos = _qwen25vl_patches(clip, tokens_side**2)
    side = tokens_side * (clip.spatial_merge_size or 2) * clip.patch_size
    return qwen25vl_graph_bytes(clip, n_pos, flash_attn, align), (
        f"Qwen2.5-VL warm-up image {side}x{side} ({n_pos} patches, width {clip.n_embd}, FFN {clip.n_ff}, {fa}): "
        "inputs with the window mask, its f16 copy, four blocks and the FFN intermediates the mask's space "
        "does not hold"
    )


#: Qwen-VL projectors without window attention (every block attends over the whole image): Qwen2-VL's graph
#: (models/qwen2vl.cpp without the window inputs) and Qwen3-VL's (models/qwen3vl.cpp, with deepstack mergers).
QWEN_VL_FULL_ATTENTION = ("qwen2vl_merger", "qwen3vl_merger")
_QWEN_VL_NAMES = {
    "qwen2vl_merger": "Qwen2-VL",
    "qwen2.5vl_merger": "Qwen2.5-VL",
    "qwen3vl_merger": "Qwen3-VL",
    "pixtral": "Pixtral",
}
#: the projectors whose per-image compute is modelled from a measured graph (the assumption line names them)
MEASURED_IMAGE_RULES = "Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Pixtral (Mistral Small 3.x)"


def _qwen_vl_full_inputs(clip: ClipParams, n_pos: int) -> tuple[int, ...]:
    """inp_raw (f32 RGB, patch^2 pixels a patch) and the M-RoPE positions (4 n_pos i32)."""
    return (4 * 3 * n_pos * clip.patch_size**2, 16 * n_pos)


def deepstack_layers(mmproj: ModelProfile) -> tuple[int, ...]:
    """The blocks whose outputs feed a Qwen3-VL deepstack merger (`v.deepstack.N.fc2.weight`), in order."""
    found = set()
    for t in mmproj.tensors:
        parts = t.name.split(".")
        if len(parts) == 5 and parts[:2] == ["v", "deepstack"] and parts[3] == "fc2":
            block = int_or_none(parts[2], 0, 1 << 20)
            if block is not None:
                found.add(block)
    return tuple(sorted(found))


def qwen2vl_graph_bytes(clip: ClipParams, n_pos: int, flash_attn: bool, align: int = CPU_ALIGNMENT) -> int:
    """The compute buffer of Qwen2-VL's graph (models/qwen2vl.cpp, no window attention) for `n_pos` patches, from
    the allocator's list of live tensors at each new peak: the inputs (raw image, positions) at the bottom, then
    the larger of a block's attention (`5E`: the residual, the normed input, V, the roped Q and K; plus the
    `KQ` scores without flash attention) and its FFN (`2E + F`: the residual, the normed input and FFN up, the
    GELU in place). Measured byte-exact from 64 to 32768 patches (tools/groundtruth/mmproj_image.cpp)."""
    e, f = 4 * n_pos * clip.n_embd, 4 * n_pos * clip.n_ff
    inputs = sum(pad(b, align) for b in _qwen_vl_full_inputs(clip, n_pos))
    attn = 5 * e + (0 if flash_attn else 4 * n_pos * n_pos * clip.n_head)
    return inputs + max(attn, 2 * e + f)


def qwen3vl_graph_bytes(
    clip: ClipParams, deepstack: tuple[int, ...], n_pos: int, flash_attn: bool, align: int = CPU_ALIGNMENT
) -> int:
    """The compute buffer of Qwen3-VL's graph (models/qwen3vl.cpp) for `n_pos` patches, from the allocator's
    lists: the graph is built from its output, the main merger's path first, so the deepstack mergers run last
    and the outputs of their blocks stay live through the later blocks (`k` of them). Three phases peak:

    * a late block's attention: `k E`, the residual, the fused QKV (`3E`), the roped Q and K (`(k + 6) E`);
      without flash attention the QKV's space is a hole under V's copy and the scores (`(k + 7) E + KQ`);
    * its FFN: `k E`, the residual, the normed input, FFN up (`(k + 2) E + F`);
    * the deepstack mergers, replayed with the allocator's best fit (`BestFit`) from the layout the lists show at
      the main merger's end: the freed inputs, the first held block output, the main merger's output (`O`, the
      projection width per merged token) in a block output's slot, the other held outputs; each merger's norm,
      fc1 (GELU in place) and fc2, and the concatenations, which find no hole and go on top.

    Measured byte-exact from 64 to 32768 patches with flash attention, from 1024 without
    (tools/groundtruth/mmproj_image.cpp)."""
    e, f = 4 * n_pos * clip.n_embd, 4 * n_pos * clip.n_ff
    inputs = sum(pad(b, align) for b in _qwen_vl_full_inputs(clip, n_pos))
    held = sum(1 for il in deepstack if il < clip.n_layer - 1)
    attn = (held + 6) * e if flash_attn else (held + 7) * e + 4 * n_pos * n_pos * clip.n_head
    peak = inputs + max(attn, (held + 2) * e + f)
    if deepstack:
        o = 4 * (n_pos // (clip.spatial_merge_size or 2) ** 2) * clip.projection_dim
        peak = max(peak, _qwen3vl_deepstack_peak(len(deepstack), inputs, e, o))
    return peak


@functools.lru_cache(maxsize=256)  # a replay per image size; estimates repeat them
def _qwen3vl_deepstack_peak(k: int, inputs: int, e: int, o: int) -> int:
    layout: list[tuple[str, int]] = [("", inputs), ("held0", e), ("main", o), ("", e - o)]
    layout += [(f"held{i}", e) for i in range(1, k)]
    ops: list[tuple[str, int]] = []
    for i in range(k):
        ops += [
            (f"norm{i}", e),
            (f"held{i}", 0),
            (f"fc1_{i}", e),
            (f"norm{i}", 0),
            (f"fc2_{i}", o),
            (f"fc1_{i}", 0),
        ]
        if i:
            prev = f"cat{i - 1}" if i > 1 else "fc2_0"
            ops += [(f"cat{i}", (i + 1) * o), (prev, 0), (f"fc2_{i}", 0)]
    ops += [("out", (k + 1) * o), ("main", 0), (f"cat{k - 1}" if k > 1 else "fc2_0", 0)]
    sim = BestFit.from_layout(tuple(layout))
    return sum(size for _, size in layout) + sim.run(ops)


def qwen_vl_full_graph_bytes(
    mmproj: ModelProfile, n_pos: int, flash_attn: bool, align: int = CPU_ALIGNMENT
) -> int:
    """Qwen2-VL's or Qwen3-VL's compute buffer for an image of `n_pos` patches."""
    assert mmproj.clip is not None
    if mmproj.clip.projector_type == "qwen3vl_merger":
        return qwen3vl_graph_bytes(mmproj.clip, deepstack_layers(mmproj), n_pos, flash_attn, align)
    return qwen2vl_graph_bytes(mmproj.clip, n_pos, flash_attn, align)


def _qwen_vl_full_compute(
    mmproj: ModelProfile, flash_attn: bool, align: int, fa: str, image_max_tokens: int = -1
) -> tuple[int, str]:
    clip = mmproj.clip
    assert clip is not None
    tokens_side = qwen_vl_warmup_side(image_max_tokens)
    n_pos = _qwen25vl_patches(clip, tokens_side**2)
    side = tokens_side * (clip.spatial_merge_size or 2) * clip.patch_size
    name = _QWEN_VL_NAMES[clip.projector_type]
    extra = f", {len(deepstack_layers(mmproj))} deepstack mergers" if name == "Qwen3-VL" else ""
    return qwen_vl_full_graph_bytes(mmproj, n_pos, flash_attn, align), (
        f"{name} warm-up image {side}x{side} ({n_pos} patches, width {clip.n_embd}, FFN {clip.n_ff}{extra}, {fa})"
    )


#: clip.cpp load_hparams (PROJECTOR_TYPE_PIXTRAL): 8 to 1024 merged tokens an image, warm-up with 256 (16 x 16).
PIXTRAL_MIN_TOKENS = 8
PIXTRAL_MAX_TOKENS = 1024
PIXTRAL_WARMUP_SIDE = 16


def _pixtral_inputs(clip: ClipParams, n_pos: int) -> tuple[int, ...]:
    """inp_raw (f32 RGB) and the 2D RoPE positions pos_h, pos_w (n_pos i32 each): the graph inputs."""
    return (4 * 3 * n_pos * clip.patch_size**2, 4 * n_pos, 4 * n_pos)


def pixtral_graph_bytes(
    mmproj: ModelProfile, n_pos: int, flash_attn: bool, align: int = CPU_ALIGNMENT
) -> int:
    """The compute buffer of Pixtral's graph (models/pixtral.cpp: Pixtral 12B, Mistral Small 3.x) for a square image
    of `n_pos` patches, from the allocator's lists (`tools/groundtruth/mmproj_image.cpp`).

    Below everything: the inputs (raw image, pos_h, pos_w) and the [IMG_BREAK] rows' leaf (`[n_text, 1, rows]`
    f32, one row per merged row). With flash attention the blocks are replayed with the allocator's best fit: the
    patch embedding (an f16 im2col, the conv output and two copies), then per block the norm, Q / K / V with their
    2D RoPE copies, the f16 copies of K and V, the attention output, the FFN norm, gate, up and SwiGLU (`3F` live
    at once), the FFN output; the freed raw image and the holes the attention leaves set where each goes. Without
    flash attention: V's copy, the residual, a freed block's hole, the roped Q and K and the scores
    (`5E + KQ`), or under 1024 patches the FFN phase, taken from the replay with flash attention (3% over at 64
    patches). Measured byte-exact from 64 to 32768 patches with flash attention (square images; wide ones differ
    only by the [IMG_BREAK] leaf) and from 1024 without; the patch merger and projector stay below the blocks'
    peak."""
    clip = mmproj.clip
    assert clip is not None
    merge = clip.spatial_merge_size or 1
    side = math.isqrt(n_pos)
    shapes = {t.name: t.shape for t in mmproj.tensors}
    brk = shapes.get("v.token_embd.img_break")
    leaf = 4 * brk[0] * max(1, side // merge) if brk else 0
    e, f = 4 * n_pos * clip.n_embd, 4 * n_pos * clip.n_ff
    base = (*(pad(b, align) for b in _pixtral_inputs(clip, n_pos)), pad(leaf, align))
    blocks = _pixtral_replay(clip, base, n_pos, e, f, align)
    if not flash_attn:  # the FFN phase (replayed with flash attention) where the scores are small
        return max(sum(base) + 5 * e + 4 * n_pos * n_pos * clip.n_head, blocks)
    return blocks


@functools.lru_cache(maxsize=256)  # a replay per image size; estimates repeat them
def _pixtral_replay(clip: ClipParams, base: tuple[int, ...], n_pos: int, e: int, f: int, align: int) -> int:
    raw, pos_h, pos_w, leaf = base
    ops: list[tuple[str, int]] = [
        ("raw", raw), ("pos_h", pos_h), ("pos_w", pos_w), ("brk", leaf),
        ("im2col", pad(2 * 3 * clip.patch_size**2 * n_pos, align)), ("raw", 0),
        ("conv", e), ("im2col", 0), ("cont1", e), ("conv", 0), ("cont2", e), ("cont1", 0), ("res0", e), ("cont2", 0),
    ]  # fmt: skip
    half = pad(e // 2, align)
    for il in range(clip.n_layer):
        res, out = (
            f"res{il}",
            f"res{il + 1}",
        )  # the attention output is the next block's residual (adds in place)
        ops += [
            ("norm", e), ("q", e), ("q_rope", e), ("q", 0), ("k", e), ("k_rope", e), ("k", 0), ("v", e),
            ("norm", 0), ("k16", half), ("k_rope", 0), ("v16", half), ("v", 0), ("attn", e), ("q_rope", 0),
            ("k16", 0), ("v16", 0), (out, e), ("attn", 0), (res, 0), ("ffn_norm", e), ("gate", f), ("up", f),
            ("ffn_norm", 0), ("swiglu", f), ("gate", 0), ("up", 0), ("ffn_out", e), ("swiglu", 0), ("ffn_out", 0),
        ]  # fmt: skip
    return BestFit().run(ops)


def _pixtral_compute(
    mmproj: ModelProfile, flash_attn: bool, align: int, fa: str, image_max_tokens: int = -1
) -> tuple[int, str]:
    clip = mmproj.clip
    assert clip is not None
    tokens_side = qwen_vl_warmup_side(image_max_tokens, PIXTRAL_WARMUP_SIDE)
    n_pos = (tokens_side * (clip.spatial_merge_size or 1)) ** 2
    side = tokens_side * (clip.spatial_merge_size or 1) * clip.patch_size
    return pixtral_graph_bytes(mmproj, n_pos, flash_attn, align), (
        f"Pixtral warm-up image {side}x{side} ({n_pos} patches, width {clip.n_embd}, FFN {clip.n_ff}, {fa})"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ProjectorImageGrowth:
    """What the largest image a projector accepts adds to its warm-up compute at run time: ggml_backend_sched
    grows the compute buffer to the graph of an image larger than the warm-up one and keeps it."""

    tokens: int  # merged tokens of the largest image
    patches: int
    warmup_tokens: int
    device_bytes: int  # on the projector's device, beyond the warm-up buffer
    host_input_bytes: int  # with the projector on a GPU: its graph inputs beyond the warm-up's, on the host
    from_flag: bool  # the limit is --image-max-tokens (else the projector's own)
    projector: str = "Qwen2.5-VL"  # whose measured per-image rule

    def explain(self) -> str:
        src = "--image-max-tokens" if self.from_flag else "the projector's limit"
        return (
            f"projector compute beyond the warm-up image ({self.warmup_tokens} tokens) for the largest image: "
            f"{self.tokens} tokens ({src}), {self.patches} patches; llama-server grows the buffer to it at the "
            "first image that large"
        )

    def assumption(self) -> str:
        return (
            f"mmproj compute is sized for the largest image ({self.tokens} tokens, {self.projector}'s measured "
            "per-image rule); lower it with --image-max-tokens"
        )


_GraphFn = Callable[[int, bool, int], int]
_InputsFn = Callable[[int], tuple[int, ...]]


def _image_family(
    mmproj: ModelProfile,
) -> tuple[ClipParams, int, int, int, int, _GraphFn, _InputsFn] | None:
    """A projector with a measured per-image rule: its parameters, token limits (max, min), warm-up side, merge
    and graph / inputs functions of the patch count; None for the others."""
    clip = mmproj.clip
    if clip is None or clip.n_embd <= 0 or clip.patch_size <= 0 or clip.n_head <= 0:
        return None
    ptype = clip.projector_type
    if ptype == "pixtral":
        merge = clip.spatial_merge_size or 1
        graph: _GraphFn = functools.partial(pixtral_graph_bytes, mmproj)
        return (
            clip,
            PIXTRAL_MAX_TOKENS,
            PIXTRAL_MIN_TOKENS,
            PIXTRAL_WARMUP_SIDE,
            merge,
            graph,
            functools.partial(_pixtral_inputs, clip),
        )
    merge = clip.spatial_merge_size or 2
    if ptype == "qwen2.5vl_merger" and clip.n_wa_pattern > 0:
        graph = functools.partial(qwen25vl_graph_bytes, clip)
        inputs: _InputsFn = functools.partial(_qwen25vl_inputs, clip)
    elif ptype in QWEN_VL_FULL_ATTENTION:
        graph = functools.partial(qwen_vl_full_graph_bytes, mmproj)
        inputs = functools.partial(_qwen_vl_full_inputs, clip)
    else:
        return None
    return clip, QWEN_VL_MAX_TOKENS, QWEN_VL_MIN_TOKENS, QWEN_VL_WARMUP_SIDE, merge, graph, inputs


def mmproj_image_growth(
    mmproj: ModelProfile,
    flash_attn: bool,
    align: int = CPU_ALIGNMENT,
    image_max_tokens: int = -1,
    image_min_tokens: int = -1,
) -> ProjectorImageGrowth | None:
    """The run-time growth of the projector's compute for its largest image, or None where it is not modelled
    (Qwen2.5-VL's, Qwen2-VL's, Qwen3-VL's and Pixtral's graphs are: the other dynamic-resolution projectors keep
    the warm-up assumption).

    clip.cpp lets a Qwen-VL image take up to 4096 merged tokens (Pixtral 1024, or --image-max-tokens) and warms
    up with at most 46 x 46 of them (Pixtral 16 x 16), so an image larger than the warm-up one makes the scheduler reserve its graph and
    grow the buffer (the buffer never shrinks). --image-min-tokens above the maximum is refused as llama.cpp
    refuses it (`image_max_pixels is less than image_min_pixels`)."""
    family = _image_family(mmproj)
    if family is None:
        return None
    clip, own_max, own_min, side, merge, graph, inputs = family
    tokens = image_max_tokens if image_max_tokens > 0 else own_max
    low = image_min_tokens if image_min_tokens > 0 else own_min
    if low > tokens:
        raise SettingsError(
            f"--image-min-tokens {low} is above the largest image's {tokens} tokens: llama.cpp refuses to load "
            "the projector (image_max_pixels is less than image_min_pixels)"
        )
    warm = qwen_vl_warmup_side(image_max_tokens, side) ** 2
    n_max, n_warm = tokens * merge * merge, warm * merge * merge
    grow = max(0, graph(n_max, flash_attn, align) - graph(n_warm, flash_attn, align))
    host = max(
        0,
        sum(pad(b, CPU_ALIGNMENT) for b in inputs(n_max))
        - sum(pad(b, CPU_ALIGNMENT) for b in inputs(n_warm)),
    )
    return ProjectorImageGrowth(
        tokens=tokens,
        patches=n_max,
        warmup_tokens=warm,
        device_bytes=grow,
        host_input_bytes=host,
        from_flag=image_max_tokens > 0,
        projector=_QWEN_VL_NAMES.get(clip.projector_type, clip.projector_type),
    )


def _siglip_compute(clip: ClipParams, flash_attn: bool, fa: str) -> tuple[int, str]:
    n_embd, n_ff, n_head = clip.n_embd, clip.n_ff, clip.n_head
    n_side = clip.image_size // clip.patch_size
    n_pos = n_side * n_side
    e, f, kq = 4 * n_pos * n_embd, 4 * n_pos * n_ff, 4 * n_pos * n_pos * n_head
    body = 3 * e + f if flash_attn else 6 * e + kq
    return body, (
        f"SigLIP warm-up image {clip.image_size}x{clip.image_size} ({n_pos} patches, width {n_embd}, "
        f"FFN {n_ff}, {fa})"
    )


def _llava_positions(clip: ClipParams, shapes: dict[str, tuple[int, ...]]) -> tuple[int, int]:
    """Patches and positions (the patches and a class token where the projector has one)."""
    n_side = clip.image_size // clip.patch_size
    n_pos = n_side * n_side
    return n_pos, n_pos + (1 if "v.class_embd" in shapes else 0)


def _llava_inputs(clip: ClipParams, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """inp_raw, positions (n_tok i32), patches (n_pos i32)."""
    n_pos, n_tok = _llava_positions(clip, shapes)
    return (4 * 3 * clip.image_size**2, 4 * n_tok, 4 * n_pos)


def _llava_compute(
    clip: ClipParams, shapes: dict[str, tuple[int, ...]], flash_attn: bool, align: int, fa: str
) -> tuple[int, str]:
    n_embd, n_ff, n_head = clip.n_embd, clip.n_ff, clip.n_head
    n_pos, n_tok = _llava_positions(clip, shapes)
    mm0 = shapes.get("mm.0.weight")
    proj = mm0[1] if mm0 and len(mm0) > 1 else clip.projection_dim
    e, f, kq = 4 * n_tok * n_embd, 4 * n_tok * n_ff, 4 * n_tok * n_tok * n_head
    inputs = sum(pad(b, align) for b in _llava_inputs(clip, shapes))
    # the patch embedding before the class token is joined ([n_embd, n_pos]) leaves a hole among the blocks
    e_patch = 4 * n_pos * n_embd
    block = 3 * e + e_patch + f if flash_attn else 4 * e + e_patch + kq
    projector = e_patch + 2 * 4 * n_pos * proj
    return inputs + max(block, projector), (
        f"CLIP warm-up image {clip.image_size}x{clip.image_size} ({n_tok} positions, width {n_embd}, "
        f"FFN {n_ff}, projection {proj}, {fa})"
    )


def _generic_projector_compute(
    mmproj: ModelProfile, shapes: dict[str, tuple[int, ...]], flash_attn: bool
) -> tuple[int, str]:
    clip = mmproj.clip
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
    side = round(math.sqrt(max(n_pos - 1, 1))) * patch
    raw = _generic_raw_image(mmproj, shapes)
    block = 4 * n_pos * (2 * n_embd + n_ff) + (0 if flash_attn else 4 * n_pos * n_pos * n_head)
    projector = 4 * n_pos * (n_embd + 2 * proj)
    return raw + max(block, projector), (
        f"image {side}x{side} ({n_pos} positions, width {n_embd}, FFN {n_ff}, projection {proj}; approximation)"
    )


def _generic_raw_image(mmproj: ModelProfile, shapes: dict[str, tuple[int, ...]]) -> int:
    """The f32 warm-up image of a projector whose graph is not modelled: a side of sqrt(positions) patches."""
    pos = shapes.get("v.position_embd.weight")
    n_pos = pos[1] if pos and len(pos) > 1 else MMPROJ_DEFAULT_PATCHES
    clip = mmproj.clip
    if clip is not None and clip.projector_type in ("qwen2vl_merger", "qwen3vl_merger"):
        n_pos = (QWEN_VL_WARMUP_SIDE * (clip.spatial_merge_size or 2)) ** 2
    patch = shapes.get("v.patch_embd.weight", (14,))[0]
    side = round(math.sqrt(max(n_pos - 1, 1))) * patch
    return 4 * 3 * side * side


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


def draft_estimate(
    draft: ModelProfile, settings: LaunchSettings, machine: Machine, n_ctx: int, cpu: CpuFeatures
) -> Estimate:
    """The draft model's own estimate, per device and term, at the target's resolved context `n_ctx` (its
    reserve is the target's)."""
    dsettings = dataclasses.replace(draft_settings(settings), n_ctx=n_ctx)
    return estimate(draft, dsettings, machine, reserve_bytes=0, cpu=cpu)


def _add_draft(
    parts: _Parts,
    draft: ModelProfile,
    settings: LaunchSettings,
    machine: Machine,
    ctx: ResolvedContext,
    cpu: CpuFeatures,
) -> None:
    sub = draft_estimate(draft, settings, machine, ctx.n_ctx, cpu)
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
