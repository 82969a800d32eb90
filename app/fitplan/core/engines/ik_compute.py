"""ik_llama.cpp's attention in the compute reserve, tensor by tensor (src/llama-build-context.cpp).

ik builds DeepSeek-style MLA attention in its own graph (`build_deepseek2`), one path per `-mla` mode and flash
attention setting, and splits the large attention intermediates into head chunks with `-amb` (attn_max_batch,
MiB). The reserve graph is built for `n_tok` tokens over every cell of the cache (`n_kv`). At the attention's peak
these tensors are live (f32 unless said otherwise), on top of the masks, the small inputs and the residual blocks
that `fitplan.core.memory.compute` counts:

* `-mla 0` (the decompressed heads, `llm_build_kqv`): `q_states` = concat(q_nope, q_rope)
  `[n_embd_head_k, n_head, n_tok]` and the scores `kq` `[n_kv, n_tok, heads]`;
* `-mla 1/2/3` without flash attention: the absorbed query `q_nope2` `[kv_lora, n_tok, n_head]` (freed after the
  concat, its space stays under the scores), `q` = concat(q_rope, q_nope2) `[n_rot + kv_lora, n_tok, n_head]`, with
  `-amb` chunking the concat of the previous chunks' outputs `kqv_compressed` `[kv_lora, n_tok, done heads]`, and the
  scores `kq` `[n_kv, n_tok, heads]`; `-mla 2/3` also make the contiguous transposed latent `kv_cache_trans`
  `[n_kv, kv_lora]` in the cache's type (`ik_mla_v_copy_row`);
* `-mla 2/3` with flash attention and `n_tok >= 128`: `q_concat` `[n_rot + nope, n_head, n_tok]`, the decompressed
  `kv_f32` = wkv_b x latent `[heads * (nope + v), n_kv]` and its casts `k_nope` `[nope, n_kv, heads]` and `v`
  `[v, n_kv, heads]` to the cache type (f16 when a GPU backend is present); with more than one chunk also the
  repeated rope part `k_rope` `[n_rot, n_kv, n_max_head]`, made at the first chunk's K and kept for the others.
  The later tensors of a chunk (k, the flash-attention output, the growing concat of the outputs) fit in the space
  `kv_f32` leaves;
* `-mla 0/1` with flash attention (and `-mla 2/3` on fewer than 128 tokens) are mainline-like: `fitplan.core.memory.compute` counts
  them as mainline's.

Measured with the graph allocator's debug list on ik_llama.cpp 55d3c05bf (CPU, DeepSeek-V2-Lite, 32k cells, 512
tokens): every tensor above at its listed size, at -amb 0, 128 and 256 (tests/memory/test_compute_ik.py has the cases).
"""

from __future__ import annotations

from dataclasses import dataclass

from fitplan.core.base.launch_settings import Engine
from fitplan.core.base.units import MIB
from fitplan.core.engines.common import cache_row_bytes
from fitplan.core.engines.ik import ik_is_mla, ik_latent_dims
from fitplan.core.model.profile import ModelProfile

F32 = 4
#: `build_deepseek2`: `pp_opt = n_tokens >= 128` picks the prompt-processing form of -mla 2/3 with flash attention
PP_OPT_MIN_TOKENS = 128


@dataclass(frozen=True, slots=True)
class IkMlaDims:
    """The head sizes ik's DeepSeek graph uses (after its load-time conversion of either GGUF layout)."""

    n_head: int
    nope: int  # n_embd_head_qk_nope
    rope: int  # n_rot
    head_v: int  # n_embd_head_v (decompressed)
    kv_lora: int


def ik_mla_dims(profile: ModelProfile) -> IkMlaDims | None:
    """The MLA dimensions when ik runs the model as MLA, else None."""

    if not ik_is_mla(profile):
        return None
    kv_lora, rope = ik_latent_dims(profile)
    n_head = max((lp.n_head for lp in profile.layers), default=0)
    if profile.mla is not None:
        head_k, head_v = profile.mla.key_length_mla, profile.mla.value_length_mla
    else:  # legacy layout: the layers carry the decompressed head sizes
        head_k = max((lp.n_embd_head_k for lp in profile.layers), default=0)
        head_v = max((lp.n_embd_head_v for lp in profile.layers), default=0)
    if not (n_head and kv_lora and head_k > rope):
        return None
    return IkMlaDims(n_head=n_head, nope=head_k - rope, rope=rope, head_v=head_v, kv_lora=kv_lora)


def _row(type_name: str, n: int) -> int:

    return cache_row_bytes(Engine.IK_LLAMA, type_name, n)


def kq_chunk_heads_mla(kq_bytes: int, n_head: int, amb_mib: int) -> int:
    """Heads per chunk of the scores in the MLA path without flash attention: kq_size = KQ MiB (rounded down);
    chunked when 0 < amb < kq_size into n_step = min(ceil(kq_size / amb), n_head) steps of ceil(n_head / n_step)."""
    kq_size = kq_bytes // MIB
    if amb_mib <= 0 or amb_mib >= kq_size:
        return n_head
    n_step = min(-(-kq_size // amb_mib), n_head)
    return -(-n_head // n_step)


def kq_chunk_heads_std(kq_bytes: int, n_head: int, n_head_kv: int, amb_mib: int) -> int:
    """Heads per chunk of the scores in `llm_build_kqv` without flash attention: one head at a time when
    0 < amb < KQ MiB, but only when K and V have as many heads as Q (no GQA); otherwise all heads at once."""
    kq_size = kq_bytes // MIB
    if amb_mib <= 0 or amb_mib >= kq_size or n_head_kv != n_head:
        return n_head
    return 1


def fa_chunk_heads(kv_f32_bytes: int, n_head: int, amb_mib: int) -> int:
    """Heads per chunk of the -mla 2/3 flash-attention path: kv_f32_size = the whole decompressed product in MiB
    (rounded down); above amb, the first divisor `niter` of n_head (2 <= niter < n_head) with kv_f32_size / niter
    <= amb gives n_head / niter heads, else one head."""
    size = kv_f32_bytes // MIB
    if amb_mib <= 0 or size <= amb_mib:
        return n_head
    for niter in range(2, n_head):
        if n_head % niter == 0 and size // niter <= amb_mib:
            return n_head // niter
    return 1


def ik_mla_v_copy_row(profile: ModelProfile, mla_mode: int, flash_attn: bool, cache_type: str) -> int:
    """Bytes per cell of `kv_cache_trans` = cont(transpose(latent)) [n_kv, kv_lora] (-mla 2/3 without flash
    attention, in the latent cache's type: -ctv there); 0 where ik makes no such copy."""
    dims = ik_mla_dims(profile)
    if dims is None or flash_attn or mla_mode not in (2, 3):
        return 0
    return _row(cache_type, dims.kv_lora)


def ik_scores_bytes(
    profile: ModelProfile, n_kv: int, n_tok: int, *, mla_mode: int, flash_attn: bool, amb_mib: int
) -> int:
    """The largest scores / decompressed-product intermediate of one chunk (engines' summary of the term)."""
    dims = ik_mla_dims(profile)
    n_head = max((lp.n_head for lp in profile.layers), default=0)
    if not n_head:
        return 0
    if not flash_attn:
        kq = F32 * n_kv * n_tok * n_head
        if dims is not None and mla_mode >= 1:
            return kq // n_head * kq_chunk_heads_mla(kq, n_head, amb_mib)
        # an MLA model at -mla 0 caches n_head decompressed K heads (no GQA)
        n_head_kv = n_head if dims is not None else max((lp.n_head_kv for lp in profile.layers), default=0)
        return kq // n_head * kq_chunk_heads_std(kq, n_head, n_head_kv, amb_mib)
    if dims is not None and mla_mode in (2, 3) and n_tok >= PP_OPT_MIN_TOKENS:
        kv_f32 = F32 * n_head * (dims.nope + dims.head_v) * n_kv
        return kv_f32 // n_head * fa_chunk_heads(kv_f32, n_head, amb_mib)
    return 0


@dataclass(frozen=True, slots=True)
class IkAttentionTerm:
    """One tensor (or chunk of tensors) live at the attention's peak."""

    name: str
    bytes: int


def ik_mla_attention(
    profile: ModelProfile,
    n_kv: int,
    n_tok: int,
    *,
    mla_mode: int,
    flash_attn: bool,
    amb_mib: int,
    cache_type: str,
    gpu_backend: bool,
) -> tuple[IkAttentionTerm, ...] | None:
    """ik's MLA-model attention tensors at the peak of one layer (`build_deepseek2`), or None where the layer is
    mainline-like (flash attention with -mla 0/1, or -mla 2/3 on fewer than 128 tokens) or the model is not MLA.

    `cache_type`: the latent cache's type (-ctk with flash attention; it is the type the K/V casts take on a
    CPU-only build, f16 when a GPU backend is present).
    """
    dims = ik_mla_dims(profile)
    if dims is None:
        return None
    h, t = dims.n_head, n_tok
    if not flash_attn:
        kq = F32 * n_kv * t * h
        if mla_mode == 0:
            # ik's -mla 0 cache holds n_head decompressed K heads whatever the GGUF layout: no GQA
            heads = kq_chunk_heads_std(kq, h, h, amb_mib)
            return (
                IkAttentionTerm("q_states", F32 * (dims.nope + dims.rope) * h * t),
                IkAttentionTerm("kq", F32 * n_kv * t * heads),
            )
        heads = kq_chunk_heads_mla(kq, h, amb_mib)
        return (
            IkAttentionTerm("q_nope2", F32 * dims.kv_lora * t * h),
            IkAttentionTerm("q", F32 * (dims.rope + dims.kv_lora) * t * h),
            # the concat of the earlier chunks' outputs, live while the last chunk's scores are computed
            IkAttentionTerm("kqv_compressed (earlier chunks)", F32 * dims.kv_lora * t * (h - heads)),
            IkAttentionTerm("kq", F32 * n_kv * t * heads),
        )
    if mla_mode not in (2, 3) or t < PP_OPT_MIN_TOKENS:
        return None
    kv_type = "f16" if gpu_backend else cache_type
    kv_f32_all = F32 * h * (dims.nope + dims.head_v) * n_kv
    heads = fa_chunk_heads(kv_f32_all, h, amb_mib)
    terms = [IkAttentionTerm("q_concat", F32 * (dims.rope + dims.nope) * h * t)]
    if heads < h:
        terms.append(IkAttentionTerm("k_rope (repeated)", _row(kv_type, dims.rope) * n_kv * heads))
    terms += [
        IkAttentionTerm("kv_f32", F32 * (dims.nope + dims.head_v) * heads * n_kv),
        IkAttentionTerm("k_nope", _row(kv_type, dims.nope) * n_kv * heads),
        IkAttentionTerm("v", _row(kv_type, dims.head_v) * n_kv * heads),
    ]
    return tuple(terms)


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
    return ik_scores_bytes(profile, n_kv, n_tokens, mla_mode=mla_mode, flash_attn=flash_attn, amb_mib=amb_mib)


@dataclass(frozen=True, slots=True)
class IkGraph:
    """ik_llama.cpp's attention graph as the mainline compute model's `ForkGraph`, bound to ik's settings."""

    mla_mode: int = 3  # the effective -mla mode (`ik.ik_effective_mla_mode`)
    amb_mib: int = 0  # -amb, 0 = no cap
    cache_type_k: str = ""  # -ctk as ik names it (q8_KV keeps its own row header); "" = the graph's type

    def has_mla(self, profile: ModelProfile) -> bool:
        return ik_mla_dims(profile) is not None

    def mla_v_copy_row(self, profile: ModelProfile, flash_attn: bool, cache_type_v: str) -> int:
        return ik_mla_v_copy_row(profile, self.mla_mode, flash_attn, cache_type_v)

    def attention_peak(
        self,
        profile: ModelProfile,
        n_kv: int,
        n_tok: int,
        q_bytes: int,
        *,
        flash_attn: bool,
        cache_type: str,
        gpu_backend: bool,
    ) -> int:
        """An MLA model's own graph (`ik_mla_attention`), else mainline's Q with ik's chunked intermediate."""
        terms = ik_mla_attention(
            profile,
            n_kv,
            n_tok,
            mla_mode=self.mla_mode,
            flash_attn=flash_attn,
            amb_mib=self.amb_mib,
            cache_type=self.cache_type_k or cache_type,
            gpu_backend=gpu_backend,
        )
        if terms is not None:
            return sum(t.bytes for t in terms)
        if ik_mla_dims(profile) is None or not flash_attn:
            inter = ik_attention_intermediate_bytes(
                profile, n_kv, n_tok, mla_mode=self.mla_mode, flash_attn=flash_attn, amb_mib=self.amb_mib
            )
            return q_bytes + inter
        return 0
