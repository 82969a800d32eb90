"""ik_llama.cpp's caches: MLA latent caches by architecture and -mla mode, per-row metadata types, its padding.

Sources: ik_llama.cpp src/llama.cpp `llama_kv_cache_init`, src/llama-model.cpp `llama_model::cache_size`,
src/graphs/build_deepseek2.cpp (-amb), ggml/src/ggml.c type_traits (row_meta per row).
"""

from __future__ import annotations

from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import Engine, LaunchSettings
from fitplan.core.base.results import ResolvedContext, TermKind
from fitplan.core.base.units import pad as _pad
from fitplan.core.engines.common import (
    EngineCachePart,
    _kv_layers,
    cache_row_bytes,
)
from fitplan.core.gguf.ggml_types import is_quantized_cache_type
from fitplan.core.memory.context import N_CTX_PAD, CacheAllocation
from fitplan.core.model.profile import ModelProfile


def ik_is_mla(profile: ModelProfile) -> bool:
    return profile.is_mla or (profile.traits.forks.ik_mla and profile.kv_lora_rank > 0)


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
    if not ctx.flash_attn and is_quantized_cache_type(type_v):
        # common/common.cpp: "Quantized V cache cannot be used without flash attention" (recorded: ik exits)
        raise SettingsError(f"ik_llama.cpp refuses a quantized V cache ({type_v}) without flash attention")
    layers = _kv_layers(profile)
    rows: list[tuple[int, int, int]] = []
    if mode == 0:
        if type_v.lower() == "q8_kv":
            # the V cache is one 1-D tensor with a single row header, but the graph addresses V cells at
            # ggml_row_size(q8_KV, n_embd_v_gqa): the view overruns it and ik aborts at context creation (recorded)
            raise SettingsError(
                "ik_llama.cpp aborts with a q8_KV V cache at -mla 0; use q8_0 or f16 for -ctv"
            )
        for la in layers:
            if profile.mla is not None:
                heads, k_head, v_n = (
                    la.n_head,
                    profile.mla.key_length_mla,
                    la.n_head * profile.mla.value_length_mla,
                )
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


#: ik_llama.cpp pads n_ctx to 32 cells without flash attention (256, mainline's, with it).
IK_CTX_PAD_NO_FA = 32


def ik_context_pad(flash_attn: bool) -> int:
    """Cells per stream ik pads the context to: 256 with FA and 32 without."""
    return N_CTX_PAD if flash_attn else IK_CTX_PAD_NO_FA


def ik_pad_context(n_ctx: int, flash_attn: bool) -> int:
    return _pad(n_ctx, ik_context_pad(flash_attn))
