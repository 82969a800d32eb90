"""Layer 4, the forks: what ik_llama.cpp, beellama.cpp (KVarN) and ollama allocate differently from mainline.

One protocol, one dispatch point: `memory_rules(engine)` returns the engine's context and cache rules (mainline's
`fitplan.core.memory.context.MAINLINE` for llama.cpp and ollama), `hooks(engine)` what the engine changes in an
estimate (its settings, its own terms, the attention graph it plugs into the compute model). Mainline `fitplan.core.memory` never imports this package.
Each fork lives in its own module (`ik`, `ik_compute`, `beellama`, `ollama`); `common` has their shared tables.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import Engine, FlashAttn, LaunchSettings
from fitplan.core.base.results import ResolvedContext, TermKind
from fitplan.core.base.units import GIB, MIB
from fitplan.core.engines.beellama import (
    KV_TAIL_AUTO,
    KVARN_GROUP,
    KVARN_STAGE_BYTES_PER_SLICE_GROUP,
    KVARN_WINDOW_CHUNK,
    beellama_caches,
    beellama_kv_cache,
    beellama_mtp_caches,
    kvarn_materialization_window_bytes,
    kvarn_promote,
    kvarn_record_bytes,
    kvarn_tail_rows,
    mtp_layers,
    uses_kvarn,
)
from fitplan.core.engines.common import (
    KVARN_BITS,
    EngineCachePart,
    cache_row_bytes,
    cache_types,
)
from fitplan.core.engines.hooks import EngineExtras, EngineHooks, EngineSettings, ExtrasInput, hooks
from fitplan.core.engines.ik import (
    ik_caches,
    ik_context_pad,
    ik_effective_mla_mode,
    ik_is_mla,
    ik_kv_cache,
    ik_latent_dims,
    ik_pad_context,
)
from fitplan.core.engines.ik_compute import ik_attention_intermediate_bytes
from fitplan.core.engines.ollama import (
    OllamaConfig,
    OllamaResolved,
    ollama_config,
    ollama_default_num_ctx,
    ollama_environment,
    ollama_llama_server_args,
    ollama_modelfile,
    ollama_resolve,
)
from fitplan.core.gguf.ggml_types import is_quantized_cache_type
from fitplan.core.memory.context import (
    MAINLINE,
    N_CTX_PAD,
    CacheAllocation,
    ContextGrid,
    EngineMemory,
    context_caches,
)
from fitplan.core.memory.context import context_grid as mainline_context_grid
from fitplan.core.memory.context import resolve_context as resolve_mainline_context
from fitplan.core.model.profile import ModelProfile


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


def _fork_flash_attn(profile: ModelProfile, settings: LaunchSettings) -> bool:
    """Flash attention for the forks: both default to on ("auto" resolves on, as in mainline); the cache types must
    be ones the fork accepts, and a quantized V cache without FA is refused except for ik's MLA latent cache."""
    allowed = cache_types(settings.engine)
    for which, t in (("K", settings.cache_type_k), ("V", settings.cache_type_v)):
        if t.lower() not in allowed:
            raise SettingsError(
                f"{settings.engine.value} has no {which} cache type {t!r}; allowed: {', '.join(allowed)}"
            )
    on = settings.flash_attn is not FlashAttn.OFF
    if not on and is_quantized_cache_type(settings.cache_type_v):
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


@dataclass(frozen=True, slots=True)
class _ForkMemory:
    """ik_llama.cpp's or beellama.cpp's context rules: their own cache types, padding and KV layout."""

    engine: Engine

    def resolve_flash_attn(self, profile: ModelProfile, settings: LaunchSettings) -> bool:
        return _fork_flash_attn(profile, settings)

    def context_pad(self, flash_attn: bool) -> int:
        return ik_context_pad(flash_attn) if self.engine is Engine.IK_LLAMA else N_CTX_PAD

    def context_caches(
        self, profile: ModelProfile, ctx: ResolvedContext, settings: LaunchSettings
    ) -> tuple[CacheAllocation, ...]:
        return fork_context_caches(profile, ctx, settings)


_RULES: dict[Engine, EngineMemory] = {
    Engine.LLAMA_CPP: MAINLINE,
    Engine.OLLAMA: MAINLINE,
    Engine.IK_LLAMA: _ForkMemory(Engine.IK_LLAMA),
    Engine.BEELLAMA: _ForkMemory(Engine.BEELLAMA),
}


def memory_rules(engine: Engine) -> EngineMemory:
    """The engine's context and cache rules: the one dispatch point between mainline and the forks."""
    return _RULES[engine]


def resolve_flash_attn(profile: ModelProfile, settings: LaunchSettings) -> bool:
    """Flash attention as the settings' engine resolves it."""
    return memory_rules(settings.engine).resolve_flash_attn(profile, settings)


def resolve_context(profile: ModelProfile, settings: LaunchSettings) -> ResolvedContext:
    """The context as the settings' engine resolves it (mainline's `resolve_context` with the engine's rules)."""
    return resolve_mainline_context(profile, settings, memory_rules(settings.engine))


def context_grid(profile: ModelProfile, settings: LaunchSettings) -> ContextGrid:
    """The contexts the settings' engine can allocate (mainline's `context_grid` with the engine's rules)."""
    return mainline_context_grid(profile, settings, memory_rules(settings.engine))


def context_pad(settings: LaunchSettings, flash_attn: bool) -> int:
    """Cells per stream the settings' engine pads n_ctx to."""
    return memory_rules(settings.engine).context_pad(flash_attn)


def engine_context_caches(
    profile: ModelProfile, ctx: ResolvedContext, settings: LaunchSettings
) -> tuple[CacheAllocation, ...]:
    """Every cache the settings' engine builds for this context."""
    return memory_rules(settings.engine).context_caches(profile, ctx, settings)


__all__ = [
    "GIB",
    "KVARN_BITS",
    "KVARN_GROUP",
    "KVARN_STAGE_BYTES_PER_SLICE_GROUP",
    "KVARN_WINDOW_CHUNK",
    "KV_TAIL_AUTO",
    "MIB",
    "EngineCachePart",
    "EngineExtras",
    "EngineHooks",
    "EngineSettings",
    "ExtrasInput",
    "OllamaConfig",
    "OllamaResolved",
    "beellama_caches",
    "beellama_kv_cache",
    "beellama_mtp_caches",
    "cache_row_bytes",
    "cache_types",
    "context_grid",
    "context_pad",
    "engine_base_settings",
    "engine_context_caches",
    "fork_context_caches",
    "hooks",
    "ik_attention_intermediate_bytes",
    "ik_caches",
    "ik_context_pad",
    "ik_effective_mla_mode",
    "ik_is_mla",
    "ik_kv_cache",
    "ik_latent_dims",
    "ik_pad_context",
    "kvarn_materialization_window_bytes",
    "kvarn_promote",
    "kvarn_record_bytes",
    "kvarn_tail_rows",
    "memory_rules",
    "mtp_layers",
    "ollama_config",
    "ollama_default_num_ctx",
    "ollama_environment",
    "ollama_llama_server_args",
    "ollama_modelfile",
    "ollama_resolve",
    "resolve_context",
    "resolve_flash_attn",
    "uses_kvarn",
]
