"""ollama: the VRAM-tier default context, the llama-server command it builds, its OLLAMA_* environment.

Sources: ollama fb30760 (2026-08-21) server/routes.go, llm/llama_server.go, envconfig/config.go.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fitplan.core.base.launch_settings import FlashAttn, LaunchSettings
from fitplan.core.base.units import GIB
from fitplan.core.model.profile import ModelProfile

#: OLLAMA_NUM_PARALLEL when it is not set: one slot (envconfig.go `NumParallel`)
OLLAMA_DEFAULT_PARALLEL = 1


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


@dataclass(frozen=True, slots=True)
class OllamaConfig:
    """What an ollama user sets: environment variables and Modelfile parameters."""

    num_ctx: int = 0  # PARAMETER num_ctx / OLLAMA_CONTEXT_LENGTH; 0 = the VRAM-tier default
    num_parallel: int = OLLAMA_DEFAULT_PARALLEL  # OLLAMA_NUM_PARALLEL
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
