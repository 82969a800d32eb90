"""What each engine changes in an estimate, as one object per engine: the estimator asks `hooks(engine)` and never
branches on the engine itself.

`EngineHooks` is mainline's behaviour (nothing changes); each fork overrides what it does differently:

* `settings`: the settings the context is built from and those the weights are placed with (ollama resolves its
  VRAM-tier context and one slot; ik_llama.cpp's -rtr loads without mmap);
* `extras`: terms and assumptions of the fork's own (beellama's MTP draft caches and KVarN prefill window, ik's
  notes on its graph);
* `gpu_overhead`: bytes kept free on each GPU besides the runtime reserve (OLLAMA_GPU_OVERHEAD);
* `fork_graph`: the attention graph the fork plugs into the compute model (`memory.fork_graph.ForkGraph`), bound
  to its settings;
* `graph_cache_type`: the mainline cache type the compute graph is sized with for one of the engine's types;
* `pads_cache_rows`: whether a GPU's padded last row of a quantized cache tensor is in the engine's cache sizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fitplan.core.base.devices import MIB, Device
from fitplan.core.base.launch_settings import KV_CACHE_TYPES, Engine, LaunchSettings, LoadMode
from fitplan.core.base.results import ResolvedContext, Term, TermKind
from fitplan.core.engines.beellama import (
    KVARN_WINDOW_CHUNK,
    beellama_mtp_caches,
    kvarn_materialization_window_bytes,
    uses_kvarn,
)
from fitplan.core.engines.common import KVARN_BITS
from fitplan.core.engines.ik import ik_effective_mla_mode
from fitplan.core.engines.ik_compute import IkGraph, ik_attention_intermediate_bytes
from fitplan.core.engines.ollama import ollama_resolve
from fitplan.core.memory.fork_graph import ForkGraph
from fitplan.core.memory.weights import CUDA_VENDORS
from fitplan.core.model.profile import ModelProfile

__all__ = ["EngineExtras", "EngineHooks", "EngineSettings", "ExtrasInput", "hooks"]

#: Where a layer's cache lives: an active GPU's index, None for the host.
CacheDevice = Callable[[int], "int | None"]


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """What an engine makes of the settings."""

    settings: LaunchSettings  # the context and caches are built from these
    weights: LaunchSettings  # the weights are placed with these
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EngineExtras:
    """An engine's own terms: (active GPU index or None for the host, term)."""

    terms: tuple[tuple[int | None, Term], ...] = ()
    transient: tuple[tuple[int | None, Term], ...] = ()
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ExtrasInput:
    """What an engine's own terms depend on: one estimate's model, settings, context and devices."""

    profile: ModelProfile
    settings: LaunchSettings
    ctx: ResolvedContext
    cache_device: CacheDevice
    gpus: Sequence[Device]
    names: Sequence[str]  # the active GPUs' buffer names ("CUDA0", ...)


class EngineHooks:
    """Mainline llama.cpp: the estimate as `fitplan.core.memory` computes it."""

    def settings(
        self, profile: ModelProfile, settings: LaunchSettings, gpus: Sequence[Device]
    ) -> EngineSettings:
        return EngineSettings(settings, settings)

    def extras(self, at: ExtrasInput) -> EngineExtras:
        return EngineExtras()

    def gpu_overhead(self, settings: LaunchSettings) -> tuple[int, str]:
        """Bytes kept free on each GPU besides the runtime reserve, and their words (appended to the reserve's)."""
        return 0, ""

    def fork_graph(self, profile: ModelProfile, settings: LaunchSettings) -> ForkGraph | None:
        return None

    #: whether a GPU's padding of a quantized tensor's last row shows in the engine's cache sizes (mainline's
    #: buffers on the CUDA-shaped stand-ins: yes; ik_llama.cpp's published cache sizes are the tensors' own)
    pads_cache_rows: bool = True

    def graph_cache_type(self, name: str) -> str:
        """The mainline cache type the compute graph is sized with: a fork's own type maps to the mainline type of
        the same role (ik's q8_KV and q6_0 and beellama's q2_0..q6_1 to q8_0; KVarN, read as F16 windows, to
        f16)."""
        if name in KV_CACHE_TYPES:
            return name
        if name.lower() in KVARN_BITS:
            return "f16"
        return "q8_0"


class _Ollama(EngineHooks):
    def settings(
        self, profile: ModelProfile, settings: LaunchSettings, gpus: Sequence[Device]
    ) -> EngineSettings:
        res = ollama_resolve(profile, settings, sum(d.total_bytes for d in gpus), len(gpus))
        return EngineSettings(res.settings, res.settings, (res.note,))

    def gpu_overhead(self, settings: LaunchSettings) -> tuple[int, str]:
        b = settings.gpu_overhead_bytes
        if not b:
            return 0, ""
        return b, f" + OLLAMA_GPU_OVERHEAD {b / MIB:.0f} MiB (ollama keeps it free)"


class _Ik(EngineHooks):
    pads_cache_rows = False

    def settings(
        self, profile: ModelProfile, settings: LaunchSettings, gpus: Sequence[Device]
    ) -> EngineSettings:
        if not settings.run_time_repack:
            return EngineSettings(settings, settings)
        note = (
            "ik_llama.cpp -rtr: CPU-side weights are repacked at load (same bytes) and --no-mmap is forced: they "
            "are anonymous RAM, not page cache"
        )
        return EngineSettings(settings, dataclasses.replace(settings, load_mode=LoadMode.NONE), (note,))

    def fork_graph(self, profile: ModelProfile, settings: LaunchSettings) -> ForkGraph | None:
        mode = ik_effective_mla_mode(profile, settings.mla_mode)
        return IkGraph(mode, settings.attn_max_batch_mib, settings.cache_type_k)

    def extras(self, at: ExtrasInput) -> EngineExtras:
        profile, settings, ctx = at.profile, at.settings, at.ctx
        mode = ik_effective_mla_mode(profile, settings.mla_mode)
        notes: list[str] = []
        if profile.is_mla:
            notes.append(f"ik_llama.cpp -mla {mode}: KV cache laid out by ik's llama_kv_cache_init")
        if settings.fused_moe and profile.is_moe:
            notes.append(
                "ik_llama.cpp -fmoe: fused up/gate MoE kernels; the compute buffer still counts separate up and "
                "gate intermediates (mainline's graph), so it errs high there"
            )
        amb = settings.attn_max_batch_mib
        inter = ik_attention_intermediate_bytes(
            profile,
            ctx.n_ctx_seq,
            min(ctx.n_ctx, ctx.n_ubatch),
            mla_mode=mode,
            flash_attn=ctx.flash_attn,
            amb_mib=amb,
        )
        if inter:
            cap = f"-amb {amb}" if amb else "no -amb cap"
            notes.append(
                f"ik_llama.cpp compute buffers follow ik's own graph (core/engines/ik_compute.py, checked against "
                f"recorded ik CPU runs): the attention intermediate per layer is {inter / MIB:.1f} MiB ({cap}); "
                "with a GPU, ik's f16 copies of the decompressed K/V are read from its source, not measured"
            )
        return EngineExtras(assumptions=tuple(notes))


class _Beellama(EngineHooks):
    def extras(self, at: ExtrasInput) -> EngineExtras:
        """The MTP draft context's caches and the KVarN prefill window (transient) per CUDA GPU."""
        profile, settings, ctx, cache_device = at.profile, at.settings, at.ctx, at.cache_device
        terms = _mtp_terms(profile, settings, ctx, cache_device) if "draft-mtp" in settings.spec_types else ()
        if not uses_kvarn(settings) or settings.no_kv_offload:
            return EngineExtras(terms)
        transient: list[tuple[int | None, Term]] = []
        notes: list[str] = []
        chunk = KVARN_WINDOW_CHUNK["0.4.6"]
        for gi, d in enumerate(at.gpus):
            if d.vendor not in CUDA_VENDORS:
                continue
            layers = frozenset(
                la.index for la in profile.layers if la.has_kv and cache_device(la.index) == gi
            )
            if not layers:
                continue
            w = kvarn_materialization_window_bytes(profile, ctx.n_ctx_seq, ctx.n_stream, chunk, layers)
            words = (
                f"KVarN prefill window: min(n_kv {ctx.n_ctx_seq}, chunk {chunk}) x n_head_kv x {ctx.n_stream} "
                "streams x (Dk + Dv) x 2 B of F16 scratch in the CUDA pool, while a prompt is processed"
            )
            transient.append((gi, Term(TermKind.KV, w, words, "KVarN window (transient)")))
            notes.append(
                f"beellama KVarN: {at.names[gi]} also needs a transient {w / MIB:.0f} MiB prefill window (CUDA pool "
                f"scratch, chunk {chunk} tokens; {KVARN_WINDOW_CHUNK['0.4.5']} in v0.4.5): not in the "
                "persistent total"
            )
        return EngineExtras(terms, tuple(transient), tuple(notes))


def _mtp_terms(
    profile: ModelProfile, settings: LaunchSettings, ctx: ResolvedContext, cache_device: CacheDevice
) -> tuple[tuple[int | None, Term], ...]:
    """beellama's MTP draft context: its caches of the NextN layers, each layer's share on that layer's device."""
    out: list[tuple[int | None, Term]] = []
    for cache in beellama_mtp_caches(profile, ctx, settings):
        per_dev: dict[int | None, int] = {}
        for layer, nbytes in cache.layer_bytes:
            dev = cache_device(layer)
            per_dev[dev] = per_dev.get(dev, 0) + nbytes
        words = (
            f"MTP draft context: {cache.name} of the NextN layers at {ctx.n_ctx_seq} cells, K {cache.type_k}, "
            f"V {cache.type_v}"
        )
        out.extend(
            (dev, Term(TermKind.DRAFT, b, words, f"MTP draft {cache.name}")) for dev, b in per_dev.items()
        )
    return tuple(out)


_HOOKS: dict[Engine, EngineHooks] = {
    Engine.LLAMA_CPP: EngineHooks(),
    Engine.IK_LLAMA: _Ik(),
    Engine.BEELLAMA: _Beellama(),
    Engine.OLLAMA: _Ollama(),
}


def hooks(engine: Engine) -> EngineHooks:
    """The engine's hooks into the estimate (the one dispatch point with `memory_rules`)."""
    return _HOOKS[engine]
