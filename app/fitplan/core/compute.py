"""Compute buffers: what llama.cpp's scheduler reserves per backend (`llama_context::sched_reserve`).

The reserve builds the prompt-processing graph for `n_tok = min(n_ctx, n_ubatch)` tokens, `n_seq_max` sequences and
`n_out = min(n_tok, n_outputs_max)` outputs, with every KV view spanning the whole cache. The graph allocator then
reuses memory between tensors whose lifetimes do not overlap, so the buffer is the peak of the live set, not the sum.

This module names the tensors that make up that peak (all sizes in bytes, f32 activations unless said otherwise):

* graph inputs, allocated in the host backend and copied to each GPU that uses them: the KQ masks
  (`[n_kv, n_tok]`, f16 with flash attention, f32 without; one per distinct mask: base cache and SWA cache), the
  `v_idxs` of the transposed V cache without flash attention (`n_tok x n_embd_v_gqa` int64);
* the token embeddings `get_rows` (`[n_embd, n_tok]`) on the host, where `token_embd` lives;
* the residual-stream activations of one layer: five `[n_embd, n_tok]` blocks live at once (residual input,
  norm output, attention output, the residual sum, and the FFN input);
* the largest transient of one layer, which never coexists with the logits: the FFN intermediates (gate, up and the
  GLU output: `3 x n_ff x n_tok`; MoE: `n_used x (3 x n_ff_exp + n_embd) x n_tok`) or, without flash attention,
  the KQ scores `[n_kv, n_tok, n_head]` (softmax runs in place);
* the logits `[n_vocab, n_out]` on the output layer's device;
* with `--op-offload` and `n_ubatch >= 32`, the copy into the first GPU's compute buffer of the largest group of
  host-resident matrix weights one layer multiplies;
* CUDA only, with a quantized K or V cache and flash attention: the f16 copies of one layer's whole K and V views the
  FA kernel allocates (`ggml_cuda_flash_attn_ext_get_alloc_size`);
* MLA without flash attention: the contiguous copy of V (`n_kv x kv_lora_rank`, K cache type).

Checked against CPU dry runs (single backend). How the terms split between a GPU and the host is read from the
scheduler source, not measured (no GPU was available): see `docs/accuracy.md`.
"""

from __future__ import annotations

from dataclasses import dataclass

from fitplan.core.devices import Vendor
from fitplan.core.profile import LayerKind, ModelProfile, TensorRole
from fitplan.core.weights import WeightPlacement, row_bytes

F32 = 4
F16 = 2
I64 = 8
#: `ggml-backend.cpp`: ops whose weight is on the host go to the GPU only for batches of at least 32 tokens.
OP_OFFLOAD_MIN_BATCH = 32
#: Activation blocks `[n_embd, n_tok]` live at the peak of one layer (residual in, norm out, attention out, sum,
#: FFN input): the structure the CPU dry runs show, within one block.
RESIDUAL_BLOCKS = 5
#: On a GPU that does not hold the input embeddings: the hidden state handed over from the previous device and the
#: residual stream (the RPC recordings show two blocks besides the masks and the transient).
GPU_LAYER_BLOCKS = 2
#: Host with no layers: the embeddings input, the token-embedding get_rows output and the two blocks the recordings
#: show next to them.
HOST_INPUT_BLOCKS = 4
#: `ggml-backend.cpp:GGML_SCHED_MAX_COPIES`: copies of every graph and split input with pipeline parallelism.
PIPELINE_COPIES = 4
#: Backends that implement `offload_op` (CUDA/ROCm, Vulkan, SYCL): host weights used by large batches run there.
OP_OFFLOAD_VENDORS = frozenset({Vendor.NVIDIA, Vendor.AMD, Vendor.INTEL, Vendor.GENERIC})

_KV_TYPE_IDS = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 6,
    "q5_1": 7,
    "q8_0": 8,
    "iq4_nl": 20,
    "bf16": 30,
}


def kv_type_id(name: str) -> int:
    return _KV_TYPE_IDS[name]


@dataclass(frozen=True, slots=True)
class ComputeInputs:
    """What the compute reserve depends on, resolved from the context."""

    n_tok: int  # min(n_ctx, n_ubatch)
    n_out: int  # min(n_tok, n_outputs_max)
    n_kv_base: int  # cells per stream of the base (full-attention) cache; 0 when the model has none
    n_kv_swa: int  # cells per stream of the SWA cache; 0 when none
    flash_attn: bool
    cache_type_k: str
    cache_type_v: str
    op_offload: bool = True
    pipeline_parallel: bool = (
        False  # more than one device, everything offloaded, no overrides (llama-context.cpp)
    )


@dataclass(frozen=True, slots=True)
class ComputePart:
    label: str
    bytes: int


@dataclass(frozen=True, slots=True)
class ComputeBuffer:
    """One backend's compute buffer: its parts (peak live set) and total."""

    device: int | None  # GPU index, None = host
    parts: tuple[ComputePart, ...]

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.parts)

    def explain(self) -> str:
        return " + ".join(f"{p.label} {p.bytes / 2**20:.1f} MiB" for p in self.parts if p.bytes)


def _ffn_transient(profile: ModelProfile, layers: list[int], n_tok: int) -> int:
    """Largest FFN intermediate set of the given layers: gate + up + GLU output, MoE per used expert."""
    best = 0
    moe = profile.moe
    for il in layers:
        lp = profile.layers[il]
        dense = 3 * lp.n_ff
        if lp.is_moe and moe is not None:
            used = lp.n_expert_used or moe.n_expert_used
            f = used * (3 * moe.n_ff_exp + profile.n_embd)
            if moe.n_ff_shexp and moe.n_expert_shared:
                f = max(f, 3 * moe.n_ff_shexp * moe.n_expert_shared)
            dense = f  # the dense n_ff of a MoE layer is not used there
        best = max(best, F32 * n_tok * dense)
    return best


def _attn_layers(profile: ModelProfile, layers: list[int]) -> tuple[list[int], list[int]]:
    base: list[int] = []
    swa: list[int] = []
    for il in layers:
        lp = profile.layers[il]
        if lp.kind in (LayerKind.RECURRENT, LayerKind.NONE, LayerKind.NEXTN) or lp.n_head == 0:
            continue
        (swa if lp.is_swa else base).append(il)
    return base, swa


def compute_buffers(
    profile: ModelProfile,
    inputs: ComputeInputs,
    placement: WeightPlacement,
    gpu_vendors: tuple[Vendor, ...] = (),
) -> tuple[ComputeBuffer, ...]:
    """The compute buffer of every backend: one per GPU in use (in order), then the host's."""
    n_tok, n_out = inputs.n_tok, inputs.n_out
    fa = inputs.flash_attn
    n_gpu = len(gpu_vendors)
    trunk = [lp.index for lp in profile.layers if not lp.is_nextn and lp.index < profile.n_layer]
    by_dev: dict[int | None, list[int]] = {}
    for il in trunk:
        by_dev.setdefault(placement.layer_device[il], []).append(il)
    out_dev = placement.output_device
    mask_elt = F16 if fa else F32
    embd_block = F32 * profile.n_embd * n_tok
    logits = F32 * profile.n_vocab * n_out
    v_gqa_max = max((lp.n_embd_v_gqa for lp in profile.layers), default=0)

    def masks(layers: list[int]) -> int:
        if not profile.has_memory:
            return mask_elt * n_tok * n_tok if layers else 0
        base, swa = _attn_layers(profile, layers)
        total = 0
        if base and inputs.n_kv_base:
            total += mask_elt * inputs.n_kv_base * n_tok
        if swa and inputs.n_kv_swa:
            total += mask_elt * inputs.n_kv_swa * n_tok
        return total

    def kq(layers: list[int]) -> int:
        if fa:
            return 0
        base, swa = _attn_layers(profile, layers)
        best = 0
        for group, n_kv in (
            (base, inputs.n_kv_base if profile.has_memory else n_tok),
            (swa, inputs.n_kv_swa),
        ):
            for il in group:
                lp = profile.layers[il]
                scores = F32 * n_kv * n_tok * lp.n_head
                # Q (permuted, in the cache's K row width) is live while KQ is; MLA adds the absorbed q_nope.
                q = F32 * n_tok * lp.n_head * lp.n_embd_head_k
                if profile.mla is not None:
                    q += F32 * n_tok * lp.n_head * profile.mla.kv_lora_rank
                best = max(best, scores + q)
        return best

    def mla_v_copy(layers: list[int]) -> int:
        if fa or profile.mla is None:
            return 0
        base, _ = _attn_layers(profile, layers)
        if not base:
            return 0
        return row_bytes(kv_type_id(inputs.cache_type_k), profile.mla.kv_lora_rank) * inputs.n_kv_base

    def v_idxs(layers: list[int]) -> int:
        if fa or not profile.has_memory:
            return 0
        base, swa = _attn_layers(profile, layers)
        return I64 * n_tok * v_gqa_max if (base or swa) else 0

    def cuda_fa_copies(layers: list[int]) -> int:
        if not fa or (inputs.cache_type_k == "f16" and inputs.cache_type_v == "f16"):
            return 0
        base, swa = _attn_layers(profile, layers)
        best = 0
        for il in base + swa:
            lp = profile.layers[il]
            n_kv = inputs.n_kv_swa if lp.is_swa else inputs.n_kv_base
            k = F16 * lp.n_embd_k_gqa * n_kv if inputs.cache_type_k != "f16" else 0
            v = F16 * lp.n_embd_v_gqa * n_kv if inputs.cache_type_v != "f16" else 0
            best = max(best, k + v)
        return best

    def transient(att_layers: list[int], ffn_layers: list[int]) -> ComputePart:
        ffn = _ffn_transient(profile, ffn_layers, n_tok)
        att = kq(att_layers)
        if att > ffn:
            return ComputePart("KQ scores + Q", att)
        return ComputePart("FFN intermediates", ffn)

    offload_gpu0 = bool(
        n_gpu and inputs.op_offload and n_tok >= OP_OFFLOAD_MIN_BATCH and gpu_vendors[0] in OP_OFFLOAD_VENDORS
    )
    # Where each layer's FFN runs: with its FFN weights (an override can move them), or on the first GPU when op
    # offload takes host-resident matrix multiplications there.
    ffn_dev = _ffn_devices(profile, placement, trunk)
    if offload_gpu0:
        ffn_dev = {il: (0 if d is None else d) for il, d in ffn_dev.items()}
    ffn_by_dev: dict[int | None, list[int]] = {}
    for il in trunk:
        ffn_by_dev.setdefault(ffn_dev.get(il, placement.layer_device[il]), []).append(il)
    host_weight_copy = _largest_host_weight_group(profile, placement) if offload_gpu0 else 0

    buffers: list[ComputeBuffer] = []
    for gi in range(n_gpu):
        layers = by_dev.get(gi, [])
        flayers = ffn_by_dev.get(gi, [])
        has_out = out_dev == gi
        parts: list[ComputePart] = []
        layer_phase: list[ComputePart] = []
        if layers or flayers:
            layer_phase = [
                ComputePart("masks (copy)", masks(layers)),
                ComputePart("v_idxs (copy)", v_idxs(layers)),
                ComputePart("layer input + residual", GPU_LAYER_BLOCKS * embd_block),
                transient(layers, flayers),
                ComputePart("MLA V copy", mla_v_copy(layers)),
            ]
            if gpu_vendors[gi] in (Vendor.NVIDIA, Vendor.AMD, Vendor.GENERIC):
                layer_phase.append(ComputePart("FA f16 K/V copies", cuda_fa_copies(layers)))
        out_phase = [ComputePart("logits", logits), ComputePart("output norm", embd_block)] if has_out else []
        parts = layer_phase if _sum(layer_phase) >= _sum(out_phase) else out_phase
        if inputs.pipeline_parallel and (layers or has_out):
            # GGML_SCHED_MAX_COPIES = 4: every split input (masks, the hidden state handed over) is kept 4 times.
            extra = (PIPELINE_COPIES - 1) * (masks(layers) + embd_block)
            parts = [*parts, ComputePart("pipeline-parallel input copies", extra)]
        if gi == 0 and host_weight_copy:
            parts = [*parts, ComputePart("op-offload weight copy", host_weight_copy)]
        buffers.append(ComputeBuffer(gi, tuple(p for p in parts if p.bytes)))

    host_layers = by_dev.get(None, [])
    host_flayers = ffn_by_dev.get(None, [])
    hparts: list[ComputePart]
    trans: ComputePart | None = None
    if host_layers or host_flayers:
        blocks = RESIDUAL_BLOCKS if host_layers else HOST_INPUT_BLOCKS
        hparts = [
            ComputePart("masks", masks(trunk)),
            ComputePart("v_idxs", v_idxs(trunk)),
            ComputePart("embeddings + residual activations", blocks * embd_block),
            ComputePart("MLA V copy", mla_v_copy(host_layers)),
        ]
        trans = transient(host_layers, host_flayers)
    else:
        n = PIPELINE_COPIES if inputs.pipeline_parallel else 1
        hparts = [
            ComputePart("graph inputs (masks)", n * masks(trunk)),
            ComputePart("v_idxs", n * v_idxs(trunk)),
            ComputePart("embeddings input + get_rows", (n - 1 + HOST_INPUT_BLOCKS) * embd_block),
        ]
        if inputs.pipeline_parallel:
            hparts.append(ComputePart("pipeline-parallel activations", 2 * embd_block))
    if out_dev is None and (trans is None or logits >= trans.bytes):
        trans = ComputePart("logits", logits)
    if trans is not None:
        hparts.append(trans)
    buffers.append(ComputeBuffer(None, tuple(p for p in hparts if p.bytes)))
    return tuple(buffers)


def _sum(parts: list[ComputePart]) -> int:
    return sum(p.bytes for p in parts)


def _ffn_devices(
    profile: ModelProfile, placement: WeightPlacement, trunk: list[int]
) -> dict[int, int | None]:
    """Device of each layer's FFN / expert matrices (they can differ from the layer's device with -ot/-cmoe)."""
    layer_of = {t.name: t.layer for t in profile.tensors}
    role_of = {t.name: t.role for t in profile.tensors}
    out: dict[int, int | None] = {}
    for p in placement.tensors:
        il = layer_of.get(p.name)
        if il is None or role_of.get(p.name) not in (TensorRole.FFN, TensorRole.EXPERTS):
            continue
        if role_of.get(p.name) is TensorRole.EXPERTS or il not in out:
            out[il] = p.device
    del trunk
    return out


def _largest_host_weight_group(profile: ModelProfile, placement: WeightPlacement) -> int:
    """Bytes of the largest set of host-resident matrix weights one layer multiplies (op offload copies them)."""
    by_name = {t.name: t for t in profile.tensors}
    per_layer: dict[int | None, int] = {}
    for p in placement.tensors:
        if p.device is not None or p.duplicate:
            continue
        t = by_name.get(p.name)
        if t is None or t.role in (TensorRole.TOKEN_EMBD, TensorRole.POS_EMBD, TensorRole.NORM):
            continue
        if len([d for d in t.shape if d > 1]) < 2 or not t.name.endswith(".weight"):
            continue
        per_layer[t.layer] = per_layer.get(t.layer, 0) + t.n_bytes
    return max(per_layer.values(), default=0)
