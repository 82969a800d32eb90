"""Pins from settings: what a plan must keep as the user set it, and what it may choose (one rule for the CLI's
flags and the window's controls)."""

from __future__ import annotations

import dataclasses

from fitplan.core import engines
from fitplan.core.base.devices import Machine
from fitplan.core.base.launch_settings import NGL_AUTO, Engine, LaunchSettings
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.planner import Pins

__all__ = ["ollama_auto_context", "pins_from_settings"]


def ollama_auto_context(
    profile: ModelProfile, settings: LaunchSettings, machine: Machine
) -> tuple[LaunchSettings, str] | None:
    """ollama without a context picks num_ctx from the VRAM of the machine's GPUs: the settings at that context
    (to plan and pin) and the note that says so; None for other engines or a context that is set."""
    if settings.engine is not Engine.OLLAMA or settings.n_ctx > 0:
        return None
    vram = sum(d.total_bytes for d in machine.gpus)
    resolved = engines.ollama_resolve(profile, settings, vram, len(machine.gpus))
    return resolved.settings, resolved.note + "."


def pins_from_settings(
    settings: LaunchSettings, given: frozenset[str], min_ctx: int | None = None, all_on_gpu: bool = False
) -> Pins:
    """Pins: the settings as read, with a pin for each placement-relevant setting in `given` (the flag keys the user
    set, `fitplan.core.launch.command_line.given_keys`); the placement itself (-ngl auto, -ts, --n-cpu-moe) is the
    planner's to choose unless given."""
    base = dataclasses.replace(settings, n_gpu_layers=NGL_AUTO, tensor_split=(), n_cpu_moe=0)
    return Pins(
        base=base,
        n_ctx=settings.n_ctx if "n_ctx" in given else None,
        min_ctx=min_ctx,
        n_parallel=settings.n_parallel if "n_parallel" in given else None,
        kv_unified=settings.kv_unified if given & {"kv_unified", "no_kv_unified"} else None,
        cache_type_k=settings.cache_type_k if "cache_type_k" in given else None,
        cache_type_v=settings.cache_type_v if "cache_type_v" in given else None,
        n_gpu_layers=settings.n_gpu_layers
        if "n_gpu_layers" in given and settings.n_gpu_layers != NGL_AUTO
        else None,
        tensor_split=settings.tensor_split if "tensor_split" in given else None,
        n_cpu_moe=settings.n_cpu_moe if "n_cpu_moe" in given else None,
        mmproj=settings.mmproj if given & {"no_mmproj_offload", "mmproj_offload"} else None,
        all_weights_on_gpu=all_on_gpu,
        # -nkvo or -kvo as given; without either the plan may keep the cache in host memory (`finer`)
        no_kv_offload=settings.no_kv_offload if given & {"no_kv_offload", "kv_offload"} else None,
    )
