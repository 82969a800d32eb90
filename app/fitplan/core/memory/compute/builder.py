"""The builder: walks a model's layers over the devices of a placement and names the tensors of each
device's peak (see the package's docstring for the terms)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

from fitplan.core.base.devices import Vendor
from fitplan.core.memory.compute.allocator import F16, F32, I32, I64, Affine, ReplayOp, in_hole
from fitplan.core.memory.compute.attention import (
    DSV4_BLOCKS,
    DSV4_STREAM_TENSORS,
    HADAMARD_MIN,
    MSA_POSITIONS,
    Dsv4Attention,
    IndexerScores,
    KpoolSelection,
    absorbed_mla_attention,
    absorbed_mla_ops,
    hadamard_rotations,
    indexer_queries,
    rotation_size,
)
from fitplan.core.memory.compute.device_plan import DevicePlan
from fitplan.core.memory.compute.ffn import (
    FFN_HOLE_BLOCKS,
    NO_MIXED_BATCH_BLOCKS,
    RESIDUAL_BLOCKS,
    expert_copy_hole,
    ffn_in_hole,
    ffn_layer,
    ffn_norm_hole,
    ffn_transient,
    gate_up_outputs,
    glu_ffn_ops,
    moe_down_outputs,
    moe_split_below_logits,
    offloaded_down_top,
    offloaded_ffn_above,
    offloaded_ffn_ops,
    offloaded_ffn_peak,
    residual_blocks,
    routed_sum_inputs,
    shexp_only_ffn,
    weighted_input_below_logits,
)
from fitplan.core.memory.compute.inputs import ComputeInputs
from fitplan.core.memory.compute.layer_replay import LAYER_IN, deepseek2_runs
from fitplan.core.memory.compute.recurrent import (
    SsmLead,
    SsmReplay,
    gdn_host_conv_copy,
    gdn_output,
    gdn_transient,
    mamba1_first_gpu,
    mamba2_host_state_copies,
    mamba2_split_below_logits,
    mamba_first_gpu,
    mamba_ops,
    ssm_transient,
)
from fitplan.core.memory.compute.shapes import (
    attn_layers,
    ffn_devices,
    hc_width,
    host_matrices,
    indexer_q_rows,
    kv_a_mqa_rows,
    kv_type_id,
    layer_shapes,
    tensor_rows,
)
from fitplan.core.memory.compute.terms import (
    FA_COPIES,
    FFN,
    LOGITS,
    AttentionScores,
    Chunks,
    ChunkSpill,
    DsaZeros,
    Dsv4Inputs,
    Dsv4Peak,
    FfnReuse,
    Fixed,
    ForkAttention,
    FreedChunk,
    HostCacheAttention,
    HostScores,
    IndexerPeak,
    KpoolInputs,
    KpoolPeak,
    Largest,
    Linear,
    LogitsOnTop,
    MlaHostCache,
    ReplayedBuffer,
    Term,
    nonzero,
)
from fitplan.core.memory.context import cuda_flash_attn_supported
from fitplan.core.memory.weights import CPU_REPACK_BUFT, CUDA_VENDORS, WeightPlacement, row_bytes
from fitplan.core.model.archs import DSV4_CSA_RATIO, DSV4_HCA_RATIO, HcHead, KpoolGraph
from fitplan.core.model.profile import LayerKind, LayerProfile, MlaParams, ModelProfile, TensorRole

#: `ggml-backend.cpp`: ops whose weight is on the host go to the GPU only for batches of at least 32 tokens.
OP_OFFLOAD_MIN_BATCH = 32
#: On a GPU that does not hold the input embeddings: the hidden state handed over from the previous device and the
#: residual stream (the RPC recordings show two blocks besides the masks and the transient).
GPU_LAYER_BLOCKS = 2
#: Host with no layers: the embeddings input, the token-embedding get_rows output and the two blocks the recordings
#: show next to them.
HOST_INPUT_BLOCKS = 4
#: `ggml-backend.cpp:GGML_SCHED_MAX_COPIES`: with pipeline parallelism the scheduler makes this many copies of
#: every graph input (on the host) and of every split input (on the backend that reads it), flagged as graph inputs
#: and outputs so the allocator places them first and never frees them; the rest of the graph is allocated after.
PIPELINE_COPIES = 4
#: Split inputs that carry the hidden state, per copy. The GPU that runs the first layer reads three
#: `[n_embd, n_tok]` tensors computed on the host: the embeddings input of a mixed batch (`inp_mixed_embd`), the
#: token-embedding rows of the mixed batch and those of the plain batch (`embd`). Every later GPU reads two from the
#: previous device: the last layer's output (`l_out`, the residual) and the weightless norm of the next layer's
#: input, which the scheduler runs where its source is.
PP_INPUT_BLOCKS_FIRST = 3
PP_INPUT_BLOCKS_OTHER = 2
#: A GPU that runs no layer, only the output layer, reads one: the weightless output norm (`norm`), which the
#: scheduler runs on the last layer's device (ggml-backend.cpp `ggml_backend_sched_split_graph`, pass 2: an op
#: without a weight takes its neighbour's backend), so only the output norm's weight multiplication is here; the
#: output ids are read by the last layer's `get_rows` (src/llama-graph.cpp `build_inp_out_ids`), on that layer's
#: device (the allocator's peak on the llama smoke model over two CUDA stand-ins at c1024: the four copies of
#: `norm`, `result_norm` and the logits, 2.75 MiB).
PP_INPUT_BLOCKS_OUTPUT = 1
#: With learned position embeddings (gpt2, starcoder, mpt) the first GPU reads two: the token rows (`embd`, the
#: mixed batch's rows set on the host: the position rows' get_rows, a host op between them and the first layer,
#: stops the scheduler's expansion) and the position rows (`pos_embd`); its layer phase then holds the sum `inpL`
#: and the attention norm under the fused QKV output (the allocator's peak on the gpt2 smoke model over two CUDA
#: stand-ins at c1024: 10.54 MiB).
PP_INPUT_BLOCKS_POSITIONS = 2
PP_LAYER_BLOCKS_POSITIONS = 2
#: HRM-Text's alias slots (src/models/hrm-text.cpp `load_arch_tensors`: the later low and high stack passes reuse
#: the layers of the first ones, whose weights stay on the device of their own block). Where a slot's cache and its
#: weights are on different GPUs the scheduler splits the layer between them (ggml-backend.cpp
#: `ggml_backend_sched_split_graph`, pass 1: an op runs where its weight is, the cache writes where the cache is;
#: pass 2: a weightless op takes its neighbour's backend), and every tensor that crosses is a split input held
#: PIPELINE_COPIES times. Counted per alias slot from the allocator's peaks on the hrm_text smoke model over two
#: CUDA stand-ins at c1024 (slots 4 and 5 on CUDA1 use blk.0's and blk.1's weights on CUDA0): the slot's GPU
#: reads eight `[n_embd, n_tok]` blocks (the norm fed to the projections' split, Q, K and V back for the cache and
#: the attention, the gated attention output and the residual sums: `node_170`, `node_175`, `node_179`,
#: `Kcur-4 (view)`, `Vcur-4 (view)`, `Qcur-4 (view) (permuted)`, `node_199`, `node_168`), the weights' GPU six
#: (`Qcur-4`, `Kcur-4`, `Vcur-4`, `attn_pregate-4`, `ffn_norm-4`, `attn_add-4`). On the slots' GPU this is an upper
#: bound: the first alias slot's input and its norm are also the layer input blocks PP_INPUT_BLOCKS_OTHER counts,
#: and the layer phase is counted as if the slots ran there (recorded 38.31 MiB on CUDA0 and 39.03 on CUDA1,
#: estimated 38.31 (exact, with the output ids: `_reads_out_ids`) and 42.53, +4.1% in all; before, 14.3 and 10.5:
#: 60.7% under).
HRM_ALIAS_INPUTS_CACHE = 8
HRM_ALIAS_INPUTS_WEIGHTS = 6
#: Blocks of the layer phase allocated after the copies: on the first GPU the copy of the embeddings input
#: (`node_2`), the two-block hole of the FFN norm and the attention output; on a later GPU the hole and the
#: attention output. (Measured with the allocator's debug dump: the dumps list every live tensor at each new peak.)
PP_LAYER_BLOCKS_FIRST = 4
PP_LAYER_BLOCKS_OTHER = 3
#: The output phase on the first GPU (all layers there, the other devices empty): the copy of the embeddings
#: input stays, next to the output norm's block.
PP_OUTPUT_BLOCKS_FIRST = 2
#: Host graph inputs of `[n_embd, n_tok]`: the embeddings input and the mixed-batch embeddings input.
HOST_GRAPH_INPUT_BLOCKS = 2
#: Per token, the small graph inputs a backend with attention layers reads: positions (i32) and the K and V
#: row indices (i64 each, flash attention; without it V's indices are per element, `v_idxs` below).
SMALL_INPUT_BYTES_PER_TOKEN = 4 + 8 + 8
#: Backends that implement `offload_op` (CUDA/ROCm, Vulkan, SYCL): host weights used by large batches run there.
OP_OFFLOAD_VENDORS = frozenset({Vendor.NVIDIA, Vendor.AMD, Vendor.INTEL, Vendor.GENERIC})
#: ggml-metal-impl.h / ggml-metal-ops.cpp: the flash-attention kernels' padding block (OP_FLASH_ATTN_EXT_NCPSG
#: cells), workgroups (`nwg`), the batch below which the vector kernel runs (`ggml_metal_op_flash_attn_ext_use_vec`)
#: and the cache types dequantized to f16 first (`ggml_metal_op_flash_attn_ext_use_kv_f16`, from 32 tokens).
METAL_FA_PAD_CELLS = 64
METAL_FA_WORKGROUPS = 32
METAL_FA_VEC_BELOW = 20
METAL_KV_F16_TYPES = frozenset({"q4_0", "q4_1", "q5_0", "q5_1", "q8_0"})
#: ggml-vulkan's buffer type maximum size (`ggml_backend_vk_buffer_type_get_max_size`: the device's
#: `suballocation_block_size`, 1 GiB unless maxMemoryAllocationSize is smaller, ggml-vulkan.cpp `ggml_vk_get_device`):
#: ggml-alloc makes the compute buffer of chunks of at most this size.
VULKAN_MAX_CHUNK = 1 << 30
#: ggml-vulkan's `supports_op` (`ggml_backend_vk_device_supports_op`, `tensor_size_supported`) refuses an op with
#: a tensor above the maximum buffer size (`device->max_buffer_size`, maintenance4's maxBufferSize: 4 GiB on a
#: typical desktop card) and, unless the device has VK_EXT_shader_64bit_indexing (`device->shader_64b_indexing`),
#: above maxStorageBufferRange (4 GiB - 1): the scheduler runs it on the host.
VULKAN_MAX_BUFFER = 4 << 30
VULKAN_STORAGE_RANGE = (4 << 30) - 1


def tensor_limit(shader_64bit_indexing: bool) -> int:
    """The first tensor size a Vulkan GPU refuses (`VULKAN_MAX_BUFFER`): the buffer size is allowed with 64-bit
    shader indexing, the storage range without (the stand-in with `idx64=1`, DeepSeek-V2-Lite at 32768 cells,
    `-ub 2048`, no flash attention: its 4 GiB `kq-0` on the device, in the host's buffer without)."""
    return (VULKAN_MAX_BUFFER if shader_64bit_indexing else VULKAN_STORAGE_RANGE) + 1


def tensor_limits(n_gpu: int, gpu_idx64: tuple[bool, ...]) -> tuple[int, ...]:
    """`tensor_limit` of each of `n_gpu` GPUs (`gpu_idx64`: which have 64-bit shader indexing; none past its end)."""
    return tuple(tensor_limit(i < len(gpu_idx64) and gpu_idx64[i]) for i in range(n_gpu))


def max_chunk(vendor: Vendor) -> int:
    """The largest chunk of a GPU's compute buffer (0: no limit): Vulkan's suballocation block on a GPU fitplan
    plans with ggml-vulkan (`weights.gpu_backend`: neither ggml-cuda's makers nor Apple nor an RPC server)."""
    if vendor in CUDA_VENDORS or vendor in (Vendor.APPLE, Vendor.RPC, Vendor.HOST):
        return 0
    return VULKAN_MAX_CHUNK


def _output_chunk(under: list[Term], chunk: int) -> int:
    """The chunk size a device plan's output phase is counted with (`DevicePlan.max_chunk`): 0 where the layer
    phase is replayed whole over the chunks, whose output phase counts the logits' chunk too (`ChunkSpill.runs`)."""
    return 0 if any(isinstance(t, ChunkSpill) and t.runs for t in under) else chunk


def _replayed(under: list[Term]) -> ReplayedBuffer | None:
    """The device's whole buffer replayed where its layer phase is (`ChunkSpill.runs`, `DevicePlan.replayed`)."""
    for t in under:
        if isinstance(t, ChunkSpill) and t.runs:
            return ReplayedBuffer(t.prelude, t.runs, t.tail, t.size)
    return None


def compute_devices(
    inputs: ComputeInputs, placement: WeightPlacement, gpu_vendors: tuple[Vendor, ...]
) -> tuple[bool, tuple[int | None, ...]]:
    """Whether the first GPU takes host-resident multiplications (op offload), and where each layer's graph runs.

    With op offload the scheduler gives every matrix multiplication whose weight sits in host memory to the first
    GPU (ggml-backend.cpp `ggml_backend_sched_backend_id_from_cur`, the device's `offload_op`), and the ops between
    them follow it there (the scheduler's expansion passes): a host layer's activations, its K/V views and the
    output layer's logits are then on the first GPU, the host keeps the graph inputs (the allocator's lists on a
    CUDA-shaped stand-in: llama-3.1-8b with -ngl 0 and 16, the host's compute buffer as with every layer
    offloaded)."""
    offload = bool(
        gpu_vendors
        and inputs.op_offload
        and inputs.n_tok >= OP_OFFLOAD_MIN_BATCH
        and gpu_vendors[0] in OP_OFFLOAD_VENDORS
    )
    if not offload:
        return False, placement.layer_device
    return True, tuple(0 if d is None else d for d in placement.layer_device)


def matmul_offload(inputs: ComputeInputs, gpu_vendors: tuple[Vendor, ...]) -> bool:
    """ggml-metal offloads matrix multiplications only (ggml-metal.cpp `ggml_backend_metal_device_offload_op`:
    MUL_MAT and MUL_MAT_ID from a batch of 32), so a host layer's other ops stay on the host."""
    return bool(
        gpu_vendors
        and gpu_vendors[0] is Vendor.APPLE
        and inputs.op_offload
        and inputs.n_tok >= OP_OFFLOAD_MIN_BATCH
    )


def _host_expert_matrices(
    placement: WeightPlacement, compute_dev: tuple[int | None, ...]
) -> dict[int | None, dict[str, int]]:
    """With matrix multiplications offloaded (`matmul_offload`): the expert matrices in a host buffer of layers
    that run on the first GPU, which that GPU copies in, one split at a time, and runs the experts there (the
    ops between them follow). The scheduler offloads an op whose weight is in a host buffer
    (ggml-backend.cpp `ggml_backend_sched_backend_id_from_cur`: `ggml_backend_buffer_is_host`): a weight
    repacked for the CPU (CPU_REPACK, not a host buffer) stays with its multiplication on the host."""
    out: dict[int | None, dict[str, int]] = {}
    for p in placement.tensors:
        il = p.layer
        if p.device is not None or not p.matrix or p.role is not TensorRole.EXPERTS or il is None:
            continue
        if compute_dev[il] == 0 and p.buffer_type != CPU_REPACK_BUFT:
            out.setdefault(il, {})[p.name] = max(p.n_bytes, out.get(il, {}).get(p.name, 0))
    return out


def _host_glu_offloaded(
    profile: ModelProfile, placement: WeightPlacement, ffn_dev: dict[int, int | None]
) -> frozenset[int]:
    """With matrix multiplications offloaded (`matmul_offload`): the gated layers whose FFN runs on the host with
    a down matrix in a host buffer (not repacked for the CPU: a K-quant mix's Q6_K down). The first GPU takes that
    multiplication (ggml-metal.cpp `ggml_backend_metal_device_offload_op`), and the scheduler's pass that expands
    a GPU's ops up the graph (ggml-backend.cpp `ggml_backend_sched_split_graph`, "expand gpu up") gives it the
    GLU that feeds it too: the host keeps gate's and up's outputs only (`gate_up_outputs`; the allocator's list on
    a Metal-shaped stand-in, llama-3.1-8b with `-ngl 16`: the host's peak at `ffn_gate-0` and `ffn_up-0`, with
    `MTL0#ffn_gate-0#0`, `MTL0#ffn_up-0#0` and `ffn_swiglu-0` on the GPU; Qwen3-30B-A3B with `-ngl 24`: the
    same with `ffn_moe_gate-0` and `ffn_moe_up-0`)."""
    gated = layer_shapes(profile).gated
    out: set[int] = set()
    for p in placement.tensors:
        il = p.layer
        if il is None or p.device is not None or not p.matrix or p.buffer_type == CPU_REPACK_BUFT:
            continue
        if not p.name.endswith((".ffn_down.weight", ".ffn_down_exps.weight")):
            continue
        moe = profile.layers[il].is_moe and profile.moe is not None
        if ffn_dev.get(il, placement.layer_device[il]) is None and (moe or il in gated):
            out.add(il)
    return frozenset(out)


def _host_mla_offloaded(
    profile: ModelProfile, placement: WeightPlacement, compute_dev: tuple[int | None, ...]
) -> frozenset[int]:
    """With matrix multiplications offloaded (`matmul_offload`): the host layers of an MLA model whose absorbed
    key matrix (`attn_k_b`) is in a host buffer, not repacked. The first GPU takes the absorbed query's
    multiplication, and the scheduler's pass that expands a GPU's ops down the graph (ggml-backend.cpp
    `ggml_backend_sched_split_graph`, "expand gpu down") gives it the rest of the attention: the host keeps none
    of its live set (the allocator's list on a Metal-shaped stand-in, DeepSeek-V3 with `-ngl 30`:
    `MTL0#blk.0.attn_k_b.weight#0`, `q_nope_absorbed-0`, `Qcur-0` and the copied K views of host layer 0 on the
    GPU, the host's peak at its dense FFN's gate and up)."""
    if profile.mla is None:
        return frozenset()
    return frozenset(
        p.layer
        for p in placement.tensors
        if p.layer is not None
        and p.device is None
        and p.buffer_type != CPU_REPACK_BUFT
        and p.name.endswith(".attn_k_b.weight")
        and compute_dev[p.layer] is None
    )


#: The order in which a layer's FFN copies its host matrices in (`ffn._offloaded_ffn`).
_COPY_ORDER = ("ffn_gate_up", "ffn_gate", "ffn_up", "ffn_down")


def _own_chunk_copies(
    mats: dict[int | None, dict[str, int]], chunk: int, trunk: list[int]
) -> tuple[dict[int | None, dict[str, int]], tuple[int, ...]]:
    """Op offload on a device whose buffer is made of chunks (Vulkan's; `max_chunk`): a copied host matrix larger
    than a chunk fits in no chunk's free space and opens a chunk of its own, sized to it (ggml-alloc.c
    `ggml_dyn_tallocr_new_chunk`: `MAX(min_size, max_chunk_size)`); a later copy goes into a free chunk at least
    its size, the best fit (`ggml_dyn_tallocr_alloc`), else opens another. The copies follow each other
    (`ffn._offloaded_ffn`), so these chunks are as many as the distinct sizes that do not fit the earlier ones
    require: DeepSeek-V3 with its experts on the host, on a Vulkan-shaped stand-in, `-cmoe`: chunk 1 of 2016 MiB
    for `blk.3.ffn_gate_exps` (and up's copy after it), chunk 2 of 2940 MiB for `blk.3.ffn_down_exps`, the
    rest of the graph in chunk 0 (400 MiB; 5356 MiB in all). The matrices without those copies, and the sizes of
    the chunks they took."""
    caps: list[int] = []
    kept: dict[int | None, dict[str, int]] = {}
    order = [il for il in trunk if il in mats] + [il for il in mats if il not in trunk]
    for il in order:
        layer = mats[il]
        names = sorted(layer, key=lambda n: next((i for i, k in enumerate(_COPY_ORDER) if f".{k}" in n), 9))
        kept[il] = {}
        for name in names:
            size = layer[name]
            if size <= chunk:
                kept[il][name] = size
                continue
            fits = [c for c in caps if c >= size]
            if not fits:
                caps.append(size)
    return kept, tuple(caps)


def _ffn_devices(
    profile: ModelProfile, placement: WeightPlacement, trunk: list[int], offload_gpu0: bool
) -> tuple[dict[int, int | None], dict[int | None, list[int]]]:
    """Where each layer's FFN runs: with its FFN weights (an override can move them), or on the first GPU when
    op offload takes host-resident matrix multiplications there; and the layers whose FFN runs on each device."""
    ffn_dev = ffn_devices(profile, placement)
    if offload_gpu0:
        ffn_dev = {il: (0 if d is None else d) for il, d in ffn_dev.items()}
    ffn_by_dev: dict[int | None, list[int]] = {}
    for il in trunk:
        ffn_by_dev.setdefault(ffn_dev.get(il, placement.layer_device[il]), []).append(il)
    return ffn_dev, ffn_by_dev


def _rotations(
    profile: ModelProfile, inputs: ComputeInputs, trunk: list[int]
) -> tuple[tuple[int, int], tuple[int, int], frozenset[int]]:
    """The Hadamard rotations of a quantized cache (mainline only): their f32 matrices are graph inputs of every
    backend that runs the cache's layers, and a rotated V leaves a smaller FFN hole (`ffn_layer`). Bytes of both
    rotations and of V's alone, per cache (base, SWA), and the layers whose V is rotated."""
    rot_bytes = [0, 0]  # base cache, SWA cache
    v_rot_bytes = [0, 0]  # V's rotation alone
    v_rot: set[int] = set()
    if not inputs.fork_attention and profile.has_memory:
        for i, group in enumerate(attn_layers(profile, trunk)):
            n_rot_k, n_rot_v = hadamard_rotations(profile, group, inputs.cache_type_k, inputs.cache_type_v)
            rot_bytes[i] = F32 * (n_rot_k * n_rot_k + n_rot_v * n_rot_v)
            v_rot_bytes[i] = F32 * n_rot_v * n_rot_v
            if n_rot_v:
                v_rot.update(group)
    return (rot_bytes[0], rot_bytes[1]), (v_rot_bytes[0], v_rot_bytes[1]), frozenset(v_rot)


def _q_norm_layers(profile: ModelProfile) -> frozenset[int]:
    """The layers with a Q norm (`attn_q_norm`): their normed Q is a tensor of its own, allocated above Q's
    product (`PlanBuilder._q_shift`)."""
    return frozenset(t.layer for t in profile.tensors if t.layer is not None and "attn_q_norm" in t.name)


def _q_bias_layers(profile: ModelProfile) -> frozenset[int]:
    """The layers whose Q product has a bias added (`attn_q.bias`): on a host layer, a tensor of its own
    (`PlanBuilder._q_second`)."""
    return frozenset(t.layer for t in profile.tensors if t.layer is not None and ".attn_q.bias" in t.name)


def _freed_chunk(attention: tuple[Term, ...]) -> Term | None:
    """The chunk the scores had to themselves, where the device's buffer is made of chunks (`FreedChunk`)."""
    att = attention[0] if attention else None
    return FreedChunk(att) if isinstance(att, AttentionScores) and att.chunks is not None else None


def _model_inputs(profile: ModelProfile) -> tuple[bool, bool]:
    """Whether the model has a norm weight outside the layers (the output norm's; lfm2 names its
    `token_embd_norm`), and learned position embeddings (gpt2, starcoder, mpt: their rows are one more
    block-sized graph input)."""
    names = [t.name for t in profile.tensors if t.layer is None]
    return any("norm" in n for n in names), "position_embd.weight" in names


class PlanBuilder:
    """The graph facts of one model, settings and placement that every backend's `DevicePlan` is built from."""

    def __init__(
        self,
        profile: ModelProfile,
        inputs: ComputeInputs,
        placement: WeightPlacement,
        gpu_vendors: tuple[Vendor, ...],
        gpu_idx64: tuple[bool, ...] = (),
    ) -> None:
        self.inputs = inputs
        #: per GPU, the first tensor size its Vulkan driver refuses (`tensor_limit`)
        self.tensor_limits = tensor_limits(len(gpu_vendors), gpu_idx64)
        n_tok, n_out = inputs.n_tok, inputs.n_out
        fa = inputs.flash_attn
        n_gpu = len(gpu_vendors)
        trunk = [lp.index for lp in profile.layers if not lp.is_nextn and lp.index < profile.n_layer]
        offload_gpu0, compute_dev = compute_devices(inputs, placement, gpu_vendors)
        by_dev: dict[int | None, list[int]] = {}
        for il in trunk:
            by_dev.setdefault(compute_dev[il], []).append(il)
        out_dev = compute_dev[-1]
        mask_elt = F16 if fa else F32
        embd_block = F32 * profile.n_embd * n_tok
        # ik_llama.cpp reserves the worst case with every token an output (llm_build_context: n_outputs = n_tokens)
        logits = F32 * profile.n_vocab * (n_tok if inputs.fork_attention else n_out)
        v_gqa_max = max((lp.n_embd_v_gqa for lp in profile.layers), default=0)

        idx_heads, idx_q = indexer_queries(profile, n_tok)

        dsa_top_k = profile.indexer_top_k if profile.traits.graph.dsa_indexer else 0
        idx_rows = indexer_q_rows(profile)
        self.idx_q_proj = tensor_rows(profile, ".indexer.q_proj.weight")
        kv_a_mqa = kv_a_mqa_rows(profile)
        # hyper-connection residual streams, live through every layer like the residual blocks
        hc_block = F32 * n_tok * hc_width(profile) * profile.traits.graph.hc_streams
        if profile.traits.graph.dsv4_attention and hc_block:
            # the streams and blocks at DeepSeek-V4's indexer peak (DSV4_STREAM_TENSORS, DSV4_BLOCKS), counted
            # in place of the residual blocks
            hc_block = DSV4_STREAM_TENSORS * hc_block + (DSV4_BLOCKS - residual_blocks(profile)) * embd_block

        shapes = layer_shapes(profile)
        fork_q: set[tuple[bool, int]] = set()
        ffn_dev, ffn_by_dev = _ffn_devices(profile, placement, trunk, offload_gpu0)
        # the host-resident weights the first GPU copies in, one split at a time (`host_matrices`)
        self.host_mats = host_matrices(placement) if offload_gpu0 else {}
        # Vulkan: the copies too large for a chunk take chunks of their own (`_own_chunk_copies`)
        self.copy_chunks: tuple[int, ...] = ()
        if self.host_mats and max_chunk(gpu_vendors[0]):
            self.host_mats, self.copy_chunks = _own_chunk_copies(
                self.host_mats, max_chunk(gpu_vendors[0]), trunk
            )
        self.q_bias = _q_bias_layers(profile)
        self.host_glu_offloaded: frozenset[int] = frozenset()
        self.host_mla_offloaded: frozenset[int] = frozenset()
        if matmul_offload(inputs, gpu_vendors):
            self.host_mats = _host_expert_matrices(placement, compute_dev)
            ffn_dev = {il: (0 if il in self.host_mats else d) for il, d in ffn_dev.items()}
            ffn_by_dev = {}
            for il in trunk:
                ffn_by_dev.setdefault(ffn_dev.get(il, placement.layer_device[il]), []).append(il)
            self.host_glu_offloaded = _host_glu_offloaded(profile, placement, ffn_dev)
            self.host_mla_offloaded = _host_mla_offloaded(profile, placement, compute_dev)

        self.rot_bytes, self.v_rot_bytes, self.v_rot = _rotations(profile, inputs, trunk)

        skip = 1 if profile.traits.graph.embd_skip else 0
        below_logits = moe_split_below_logits(profile, trunk[-1], n_tok) if trunk else 0
        self.profile, self.placement, self.gpu_vendors = profile, placement, gpu_vendors
        self.n_tok = n_tok
        self.n_out = n_out
        self.fa = fa
        self.n_gpu = n_gpu
        self.trunk = trunk
        self.by_dev = by_dev
        self.out_dev = out_dev
        self.mask_elt = mask_elt
        self.embd_block = embd_block
        self.logits = logits
        self.v_gqa_max = v_gqa_max
        self.idx_heads = idx_heads
        self.idx_q = idx_q
        self.dsa_top_k = dsa_top_k
        self.idx_rows = idx_rows
        self.kv_a_mqa = kv_a_mqa
        self.kv_a_mqa_first: dict[Affine, Affine] = {}  # the first GPU's live set for each (`_layer_q`)
        self.hc_block = hc_block
        self.shapes = shapes
        self.fork_q = fork_q
        self.offload_gpu0 = offload_gpu0
        self.ffn_dev = ffn_dev
        self.ffn_by_dev = ffn_by_dev
        self.compute_dev = compute_dev
        self.skip = skip
        self.below_logits = below_logits
        self.output_norm_weight, self.pos_embd = _model_inputs(profile)

    def dsa_zeros(self, layers: list[int]) -> int:
        # every full-attention layer's attention takes the top-k mask (a shared-indexer layer reuses another's
        # indices, but builds its own mask); sliding-window layers have none
        return F32 * self.n_tok * len(attn_layers(self.profile, layers)[0]) if self.dsa_top_k else 0

    def indexer_scores(self, layers: list[int]) -> IndexerScores | None:
        """The DSA lightning indexer's peak on a backend running `layers` (None without an indexer layer)."""
        indexed = [il for il in layers if self.profile.layers[il].has_indexer]
        if not (self.idx_q and indexed) or self.inputs.fork_attention:
            return None
        query = F32 * self.n_tok * self.idx_heads * self.profile.indexer_head_size
        kq = 0 if self.fa else F32 * self.n_tok * max(self.profile.layers[il].n_head for il in indexed)
        rotated = self.profile.traits.graph.indexer_rotation
        head = self.profile.indexer_head_size
        # the indexer cache's rotation input `attn_inp_k_rot` [n_rot, n_rot] f32 (llama-kv-cache.cpp builds it
        # for these architectures whatever the cache type), a graph input live through the graph
        rot = F32 * rotation_size(head) ** 2 if rotated and head % HADAMARD_MIN == 0 else 0
        return IndexerScores(
            self.idx_q - 2 * query + rot, query, self.n_tok, self.dsa_top_k, kq, 1 if rotated else 2
        )

    def kpool_selection(self, layers: list[int]) -> KpoolSelection | None:
        """The k-pool sparse attention on a backend running `layers` (None without an indexer layer there)."""
        profile = self.profile
        graph = profile.traits.graph.kpool_graph
        if graph is KpoolGraph.NONE or profile.indexer_kpool < 2:
            return None
        indexed = [il for il in layers if profile.layers[il].has_indexer]
        if not indexed:
            return None
        rows = max(self.idx_rows.get(il, 0) for il in indexed)  # the indexer query's rows
        # a cache row holds kpool_row keys (the raw key and the pooled one for qwen4exp)
        key = profile.indexer_head_size // max(1, profile.traits.memory.kpool_row)
        mla_rows, v_row, streams_over = self.kpool_first_layer(layers, indexed, graph)
        return KpoolSelection(
            n_tok=self.n_tok,
            flash_attn=self.fa,
            kpool=profile.indexer_kpool,
            top_k=profile.indexer_top_k,
            tail=profile.indexer_kpool_tail,
            n_seqs=max(1, self.inputs.n_seqs),
            query=F32 * self.n_tok * rows,
            block=self.embd_block,
            kq_per_cell=0 if self.fa else F32 * self.n_tok * max(profile.layers[il].n_head for il in indexed),
            gather=graph is KpoolGraph.GATHER_MASK,
            head=key,
            heads=rows // key if key else 0,
            v_idxs=self.v_idxs(layers),
            mla_rows=mla_rows,
            v_row=v_row,
            streams_over=streams_over,
        )

    def kpool_first_layer(
        self, layers: list[int], indexed: list[int], graph: KpoolGraph
    ) -> tuple[tuple[int, ...], int, int]:
        """glm5-next's first layer without flash attention (`KpoolSelection.first_layer`), where this backend runs
        the graph's first layer and it is a k-pool layer, and its k-pool layers with flash attention
        (`KpoolSelection.cast_above`): their MLA rows per token (src/models/glm5-next.cpp
        `build_dsa_layer`: q_resid `[q_lora_rank]`, `q` `[n_head x key_length_mla]`, the absorbed query
        `[kv_lora_rank x n_head]` and the compressed KV row `[kv_lora_rank + n_rot]`), V's copy per cell and the
        streams counted beyond `hc_init`; ((), 0, 0) elsewhere."""
        mla = self.profile.mla
        v_copy = self.mla_v(layers)
        first = bool(self.trunk) and layers[0] == self.trunk[0] == indexed[0]
        if (
            graph is not KpoolGraph.GATHER_MASK
            or mla is None
            or not mla.q_lora_rank
            or not (first or self.fa)
        ):
            return (), 0, 0
        if v_copy.room or v_copy.a_swa or v_copy.c or self.inputs.fork_attention:
            return (), 0, 0
        h = self.profile.layers[indexed[0]].n_head
        stream = F32 * self.n_tok * hc_width(self.profile)
        rows = (mla.q_lora_rank, h * mla.key_length_mla, h * mla.kv_lora_rank, mla.kv_lora_rank + mla.n_rot)
        return rows, v_copy.a_base, self.hc_block - stream if self.hc_block else 0

    def dsv4(self, layers: list[int]) -> Dsv4Attention | None:
        """DeepSeek-V4's compressed attention on a backend running `layers` (None without a CSA layer there)."""
        profile = self.profile
        if not profile.traits.graph.dsv4_attention:
            return None
        csa = [il for il in layers if profile.layers[il].compress_ratio == DSV4_CSA_RATIO]
        if not csa:
            return None
        lp = profile.layers[csa[0]]
        head = profile.indexer_head_size
        return Dsv4Attention(
            n_tok=self.n_tok,
            flash_attn=self.fa,
            csa_layers=sum(1 for il in csa if profile.layers[il].has_indexer),
            hca=any(profile.layers[il].compress_ratio == DSV4_HCA_RATIO for il in layers),
            top_k=profile.indexer_top_k,
            query=F32 * self.n_tok * max(self.idx_rows.get(il, 0) for il in csa),
            rot=F32 * rotation_size(head) ** 2 if head % HADAMARD_MIN == 0 else 0,
            n_head=lp.n_head,
            head_v=lp.n_embd_head_v,
            block=self.embd_block,
        )

    def masks(self, layers: list[int]) -> Affine:
        if not self.profile.has_memory:
            return Affine(c=self.mask_elt * self.n_tok * self.n_tok) if layers else Affine()
        base, swa = attn_layers(self.profile, layers)
        lid = (
            F16 * self.n_tok
            if self.idx_q and any(self.profile.layers[il].has_indexer for il in layers)
            else 0
        )
        return Affine(
            a_base=(self.mask_elt * self.n_tok if base else 0) + lid,
            a_swa=self.mask_elt * self.n_tok if swa else 0,
        )

    def fork_groups(self, layers: list[int]) -> tuple[tuple[bool, int], ...]:
        self.fork_q.clear()
        self.kq(layers)
        return tuple(sorted(self.fork_q))

    def kq(
        self, layers: list[int], replayed: frozenset[int] = frozenset(), fa_extra: int = 0
    ) -> tuple[Affine, ...]:
        """The attention's live set on a backend running `layers`: one Affine per distinct layer shape (the
        recurrent layers in `replayed` are counted by `ssm_after` instead)."""
        base, swa = attn_layers(self.profile, layers)
        out: set[Affine] = set()
        for group, is_swa in ((base, False), (swa, True)):
            for il in group:
                self._kq_layer(il, is_swa, out, last=il == group[-1], fa_extra=fa_extra)
        self._recurrent_terms([il for il in layers if il not in replayed], bool(base or swa), out)
        if (
            self.idx_q
            and self.inputs.fork_attention
            and any(self.profile.layers[il].has_indexer for il in layers)
        ):
            out.add(Affine(c=self.idx_q))  # mainline's indexer peak: `indexer_scores`
        msa = self._msa_mask(layers)
        if msa is not None:
            out.add(msa)
        iq = max((self.idx_rows.get(il, 0) for il in layers), default=0)
        if iq and not self.profile.traits.graph.dsv4_attention:  # DeepSeek-V4's: `Dsv4Attention.transient`
            out.add(Affine(c=self.profile.traits.graph.indexer_q_copies * F32 * self.n_tok * iq))
        if self.profile.traits.graph.parallel_attn_ffn and (base or swa) and self.fa:
            # the norm output feeds the FFN after the attention: it stays live through it (phi2's allocator
            # peak: Q, K and V above the norm output); without flash attention the recordings match without it
            out = {Affine(a.a_base, a.a_swa, a.c + self.embd_block) for a in out}
        return tuple(sorted(out, key=lambda x: (x.a_base, x.a_swa, x.c)))

    def _gated_query(self, q: int) -> int:
        """The query's bytes live under the scores, where one projection gives the query and its output gate
        (src/models/qwen35.cpp `build_layer_attn`: `Qcur_full` [2 n_embd_head, n_head, n_tok]). The gate is a view
        of it, copied after the attention, so all of it stays live under the scores while the normed query takes
        the freed token rows' block (the allocator's trace on the qwen35 smoke model with four slots at c4096). A
        query larger than a block does not add it: qwen3-next at `-ub 2048` on the CUDA stand-in is within 1%
        without it, 5% over with it."""
        return 2 * q if self._gated_product() and q <= self.embd_block else q

    def _row_indices_room(self, il: int, last: bool) -> int:
        """The space the scores of the last layer of a cache may take without raising the peak: that layer has
        stored its K and V rows before its scores, so their row indices (K's, and V's per element without flash
        attention) are freed (the allocator's trace on the gemma2 smoke model with four separate slots at c512:
        `kq-0` in the freed `attn_inp_k_idxs` and `attn_inp_v_idxs`); 0 elsewhere."""
        return I64 * self.n_tok * (1 + self.v_gqa_max) if last and self.v_idxs([il]) else 0

    def _msa_mask(self, layers: list[int]) -> Affine | None:
        """MiniMax-M3's block-sparse layer at its peak (src/models/minimax-m3.cpp, `msa_enabled`: flash attention,
        and one sequence or a stream per sequence; the layers after the dense lead), None elsewhere.

        Per stream the graph turns the indexer's top-k blocks into a cell mask: `bmc` (`get_rows` of the block
        mask by the cells' blocks, `[n_tps x Hd, n_kv]` f32, Hd = attention.indexer.head_count) and its
        transposed copy `bmx` `[n_kv, n_tps, Hd]` f32 are live together; the f32 copy of the FA mask `msa_mf`
        `[n_kv, n_tok]`, allocated when the mask is added, goes into `bmc`'s freed space when it fits (one
        stream), else above (the allocator's peaks on the smoke model: `node_121` and `(cont)`, 32 MiB each at
        c8192; with four streams `(cont)` 2 MiB above the freed 2 MiB and `(copy)` 4 MiB). Under them the graph
        inputs of `llm_graph_input_msa` (`pos_mask` `[n_ps, n_tok]` and `bias` `[n_blk, n_tok]` f32,
        `pos_slot_i` `[n_ps, ns]` and `cell_blk` `[n_kv, ns]` i32, with n_ps = 256 positions padded to whole
        blocks at the reserve: `llama_kv_cache_msa_context::get_n_pos` of an empty cache) and one block more: the
        peak has the layer's norm output `norm-1` above a freed block, six blocks in all.
        """
        profile, ci = self.profile, self.inputs
        if not (profile.traits.graph.msa_attention and self.fa and profile.indexer_block_size > 0):
            return None
        if ci.n_seqs > 1 and ci.n_stream == 1:
            return None  # a unified cache with several sequences: dense attention
        sparse = [il for il in layers if profile.layers[il].has_indexer]
        if not sparse or not profile.indexer_head_size:
            return None
        hd = max(self.idx_q_proj.get(il, 0) for il in sparse) // profile.indexer_head_size
        ns = max(1, ci.n_stream)
        n_tps = self.n_tok // ns
        blk = profile.indexer_block_size
        n_ps = -(-MSA_POSITIONS // blk) * blk
        inputs = F32 * self.n_tok * (n_ps + n_ps // blk) + I32 * n_ps * ns
        per_cell = 2 * F32 * n_tps * hd + (F32 * self.n_tok if ns > hd else 0) + I32 * ns
        return Affine(a_base=per_cell, c=inputs + self.embd_block)

    def _kq_layer(
        self, il: int, is_swa: bool, out: set[Affine], last: bool = False, fa_extra: int = 0
    ) -> None:
        """One attention layer's live set (added to `out`); ik's chunked groups go to `self.fork_q`. `last`: the
        last layer of its cache here, the last to read the cache's row indices."""
        lp = self.profile.layers[il]
        mla = self.profile.mla
        if mla is not None and self._replayed_mla():
            self._deepseek2_mla_layer(lp, mla, is_swa, out, fa_extra)
            return
        qkv = self.shapes.qkv_rows.get(il, 0)
        q = self._layer_q(il, lp, qkv, out)
        if qkv:
            out.add(self._fused_qkv(il, lp, qkv))
        elif mla is None:
            # Q, K and V are all live until K and V are stored into the cache; the smaller of K and V
            # goes into the one-block hole the mixed batch's token rows leave (freed after the first
            # layer's input is assembled)
            kv_min = min(lp.n_embd_k_gqa, lp.n_embd_v_gqa)
            q_k_v = lp.n_head * lp.n_embd_head_k + lp.n_embd_k_gqa + lp.n_embd_v_gqa
            out.add(Affine(c=F32 * self.n_tok * (q_k_v - (kv_min if kv_min <= self.profile.n_embd else 0))))
        if self.fa:
            # flash attention: its output [n_embd_head_v, n_head, n_tok] next to Q, no scores; without a cache it
            # takes V's freed block, and the f16 casts of K and V (src/llama-graph.cpp `build_attn_mha`) the freed
            # attention norm's (the allocator's list on the CUDA stand-in, the dream smoke model at c512: the casts
            # at 0 and 0.25 MiB, `node_26` at 0.5 MiB, below the layer input)
            fa_out = F32 * self.n_tok * lp.n_head * lp.n_embd_head_v if self.profile.has_memory else 0
            out.add(Affine(c=q + fa_out))
            if self.inputs.fork_graph is not None and self.inputs.fork_graph.has_mla(self.profile):
                self.fork_q.add((is_swa, q))  # ik's decompressed MLA product (mla 2/3), in -amb chunks
            return
        self._kq_scores(il, lp, is_swa, q, qkv, out, last)

    def _layer_q(self, il: int, lp: LayerProfile, qkv: int, out: set[Affine]) -> int:
        """Q's bytes (permuted, in the cache's K row width), live while the attention runs; MLA adds the absorbed
        q_nope [kv_lora_rank, n_head, n_tok]. The compressed-KV live sets of MiniCPM3 and Kimi go to `out`."""
        q = F32 * self.n_tok * lp.n_head * lp.n_embd_head_k
        mla = self.profile.mla
        if mla is not None:
            q += F32 * self.n_tok * lp.n_head * mla.kv_lora_rank
        if il in self.kv_a_mqa:
            # Q [n_head x head_k, n_tok], the compressed KV with its rope part [kv_a_mqa rows, n_tok]
            # and the normed latent [kv_lora, n_tok] (minicpm3 smoke model's peak: 0.5 + 1.25 + 1.0 MiB)
            rows, lora, kv_b = self.kv_a_mqa[il]
            full = Affine(c=F32 * self.n_tok * (lp.n_head * lp.n_embd_head_k + rows + lora))
            out.add(full)
            if lora <= FFN_HOLE_BLOCKS * self.profile.n_embd:
                # on the first GPU the normed latent takes the two blocks of the mixed batch's freed copies, and
                # the decompressed K and V [kv_b rows, n_tok] stand on top instead (the allocator's list on the
                # CUDA stand-in, the minicpm3 smoke model at c512: `norm-0` at 0-1 MiB, then `q_states`,
                # `kv_pe_compresseed` and `kv` above `node_2`, 0.5 + 1.25 + 0.5 MiB, 4.77 MiB)
                self.kv_a_mqa_first[full] = Affine(
                    c=F32 * self.n_tok * (lp.n_head * lp.n_embd_head_k + rows + kv_b)
                )
        if mla is not None and self.profile.traits.graph.kimi_mla:
            out.add(self._kimi_mla_concat(lp, mla))
        if not self.profile.has_memory:
            # no cache: this batch's roped K [n_embd_k_gqa, n_tok] feeds the attention directly, next to Q; V's
            # projection takes K's freed projection, and its copy (contiguous, or an f16 cast under flash
            # attention) the freed attention norm's block (the allocator's lists on the CUDA stand-in, the dream
            # smoke model at c512: `Qcur-0` and `Kcur-0` above `node_2`, 3.51 MiB with flash attention; without,
            # `v_cont-0` at 0 and Q, K and the scores `kq-0` on top, 6.01 MiB)
            q += F32 * self.n_tok * lp.n_embd_k_gqa
        if qkv and not self.fa and self.profile.traits.graph.no_rope_qkv:
            q = F32 * self.n_tok * qkv  # Q stays a view of the fused QKV output: all of it stays live
        return q

    def _fused_qkv(self, il: int, lp: LayerProfile, qkv: int) -> Affine:
        """A fused QKV projection's output [n_q + 2 n_kv, n_tok], live as a whole before the split."""
        graph = self.profile.traits.graph
        above = 0
        if (
            self.fa
            and graph.no_rope_qkv
            and il - 1 in self.shapes.gated
            and qkv > FFN_HOLE_BLOCKS * self.profile.n_embd
        ):
            # after a gated FFN the blocks leave a two-block hole the output does not fit, and the layer's
            # norm output sits in the token rows' freed block: one block more than in the first layer (the
            # allocator's peak on the jais smoke model at c512: inp_embd, norm-1, the hole, node_2, the
            # previous layer's output and node_43, the 1.5 MiB QKV, on top: 5.02 MiB)
            above = self.profile.n_embd
        if il in self.v_rot and not graph.no_rope_qkv:
            # V is a view of the projection: its rotation (`llama_mul_mat_hadamard`, src/llama-impl.h) copies
            # it (`ggml_cont_2d`) and multiplies the copy, and `llm_graph_context::build_attn` expands Q, then
            # V, then K, so the projection is still live for K: the rotated Q and V's copy take the token rows'
            # and the attention norm's freed blocks, V's product goes above the projection (the allocator's
            # peak on the plamo2 smoke model with q4_0 caches at c8192: `wqkv-0`, then `node_16` on top;
            # the unroped views of jais are within 0.1% without it)
            above += lp.n_embd_v_gqa
        return Affine(c=F32 * self.n_tok * (qkv + above))

    def _kq_scores(
        self, il: int, lp: LayerProfile, is_swa: bool, q: int, qkv: int, out: set[Affine], last: bool
    ) -> None:
        """Without flash attention: the KQ scores [n_kv, n_tok, n_head] (softmax in place) above Q."""
        a = F32 * self.n_tok * lp.n_head
        q = self._gated_query(q)
        if qkv and not self.profile.traits.graph.no_rope_qkv:
            # the roped Q of a fused projection takes the attention norm's block (the norm has one
            # reader, freed before the QKV output is split): only what exceeds a block is added
            q = max(0, q - F32 * self.n_tok * self.profile.n_embd)
        if self.inputs.fork_attention and self.profile.has_memory:
            self.fork_q.add((is_swa, q))  # the scores come in -amb chunks (fork_groups)
            return
        room = self._row_indices_room(il, last)
        if not self.profile.has_memory:
            out.add(Affine(c=a * self.n_tok + q))
        elif is_swa:
            out.add(Affine(a_swa=a, c=q, room=room))
        else:
            out.add(Affine(a_base=a, c=q, room=room))

    def _replayed_mla(self) -> bool:
        """Mainline's graph of src/models/deepseek2.cpp with the absorbed MLA query, whose attention is replayed
        through the allocator (`absorbed_mla_attention`); a fork's MLA modes are modelled by the fork."""
        return self.profile.traits.graph.deepseek2_mla and self.inputs.fork_graph is None

    def _deepseek2_mla_layer(
        self, lp: LayerProfile, mla: MlaParams, is_swa: bool, out: set[Affine], fa_extra: int = 0
    ) -> None:
        """The attention terms of an absorbed-MLA layer: the replayed peak, and without flash attention the KQ
        scores `[n_kv, n_tok, n_head]` (softmax in place) above the replay's end unless they fit into its
        largest free block (short contexts: the space the query's parts left under Qcur)."""
        hole = self.embd_block + (I32 + I64) * self.n_tok  # the mixed batch's token rows, tokens and slots
        peak, end, room = absorbed_mla_attention(self.profile, lp, mla, self.n_tok, self.fa, hole, fa_extra)
        out.add(Affine(c=peak))
        if not self.fa:
            a = F32 * self.n_tok * lp.n_head
            out.add(Affine(a_swa=a, c=end, room=room) if is_swa else Affine(a_base=a, c=end, room=room))

    def _kimi_mla_concat(self, lp: LayerProfile, mla: MlaParams) -> Affine:
        # src/models/kimi-linear.cpp: the compressed KV with its rope part [kv_lora + rope, n_tok],
        # its normed latent part [kv_lora, n_tok], the absorbed Qcur [kv_lora + rope, n_head, n_tok]
        # and Kcur [kv_lora + rope, n_tok] are live when Kcur is concatenated (the allocator's peak
        # on the kimi-linear smoke model: 1.125 + 1.0 + 1.125 + 1.125 MiB), above the space the
        # query projection q [key_length_mla, n_head, n_tok] and q_nope_absorbed [kv_lora, n_head,
        # n_tok] took when the concatenation into Qcur read them (kimi-k3: q_nope_absorbed goes into
        # the freed q_a [q_lora, n_tok] when it fits). The compressed KV, its norm and Kcur go
        # into that space while they fit: on the smoke models the compressed KV leaves 0.25 MiB of
        # it, a hole under Qcur (kimi-linear: q 0.375 + q_nope_absorbed 1.0 MiB at 1.76-3.14 MiB,
        # then the compressed KV at 1.76-2.89), 6.39 MiB in all
        kr, lora, q_lora = lp.n_embd_head_k, mla.kv_lora_rank, mla.q_lora_rank
        q_abs = lp.n_head * lora
        slot = q_lora if 0 < q_abs <= q_lora else q_lora + q_abs
        room = slot + lp.n_head * mla.key_length_mla
        left, above = room, 0
        for t in (kr, lora, kr):  # the compressed KV, its normed latent, Kcur
            if t <= left:
                left -= t
            else:
                above += t
        # without flash attention the contiguous copy of V (`mla_v`, counted with every attention
        # term) comes later: it is not live at this point (kimi-linear smoke model, -fa off: 6.89 MiB
        # with the f32 mask, no copy of V)
        v_copy = (
            0
            if self.fa or self.inputs.fork_attention
            else row_bytes(kv_type_id(self.inputs.cache_type_k), lora) * self.inputs.n_stream
        )
        return Affine(a_base=-v_copy, c=F32 * self.n_tok * (room + lp.n_head * kr + above))

    def ssm_after(
        self, layers: list[int], m: Affine, vi: int
    ) -> tuple[frozenset[int], tuple[ReplayOp, ...], Affine]:
        """The Mamba layers that run after the device's last attention layer, their block's allocations and the
        space they find free: the masks, V's indices and the small inputs, freed by then, next to the block of
        the mixed batch's token rows (as for the FFN, `ffn_holes`). The allocator's peaks on the granitehybrid
        smoke model at c4096 with flash attention: the input projection zxBCdt (3 MiB) inside the freed 4 MiB
        mask, the conv input and output (2.01 + 2 MiB) above the blocks, 10.53 MiB; jamba (Mamba-1): xz and
        the conv output in the mask's space, dt's projection and the scan output above, 8.77 MiB."""
        none: tuple[frozenset[int], tuple[ReplayOp, ...], Affine] = (frozenset(), (), Affine())
        base, swa = attn_layers(self.profile, layers)
        if not (base or swa) or not (m.a_base or m.a_swa or m.c or vi):
            return none
        if self.profile.traits.graph.parallel_attn_ffn or any(
            self.profile.layers[il].kind is LayerKind.HYBRID for il in layers
        ):
            return none
        last = max(base + swa)
        post = frozenset(il for il in layers if il > last and self.profile.layers[il].is_recurrent)
        ops = mamba_ops(self.profile, self.n_tok, self.inputs.n_seqs) if post else ()
        if not ops:
            return none
        return post, ops, Affine(m.a_base, m.a_swa, m.c + vi)

    def _attention_only_before_ssm(self, layers: list[int]) -> bool:
        """Whether the device's last attention layer, before the replayed Mamba blocks, has no FFN."""
        base, swa = attn_layers(self.profile, layers)
        if not (base or swa):
            return False
        lp = self.profile.layers[max(base + swa)]
        return self.fa and not lp.n_ff and not lp.is_moe

    def _recurrent_terms(self, layers: list[int], attends: bool, out: set[Affine]) -> None:
        """The recurrent blocks' live sets (Mamba scans, lightning attention, gated delta nets), added to `out`."""
        # Hybrid layers (falcon-h1) run attention and the SSM side by side from one norm output: the masks
        # stay live through the SSM and the attention output waits for it.
        parallel = any(self.profile.layers[il].kind is LayerKind.HYBRID for il in layers)
        ssm = ssm_transient(self.profile, self.n_tok, self.inputs.n_seqs, attends and not parallel)
        if ssm and any(self.profile.layers[il].is_recurrent for il in layers):
            out.add(Affine(c=ssm + (F32 * self.n_tok * self.profile.n_embd if parallel else 0)))
        if self.profile.traits.graph.lightning:
            # src/models/minimax-01.cpp, a lightning-attention layer over the whole ubatch per sequence: the
            # fused QKV output [3 n_head head_dim, n_tok], the inter-block product qkv_none_diag
            # [n_head head_dim, n_tok], the intra-block scores qk [n_st, n_st, n_head, n_seqs] and the graph
            # input diag_decay_exp of the same shape, freed after the last such layer (the smoke model's peak:
            # 1.5 + 0.5 + 2 + 2 MiB at 512 tokens)
            n_st = self.n_tok // max(1, self.inputs.n_seqs)
            for il in layers:
                lp = self.profile.layers[il]
                if lp.is_recurrent:
                    dim = lp.n_head * lp.n_embd_head_k
                    sq = n_st * n_st * lp.n_head * self.inputs.n_seqs
                    # with pipeline parallelism the input is among the never-freed copies (`_pipeline_inputs`)
                    n_sq = 1 if self.inputs.pipeline_parallel else 2
                    out.add(Affine(c=F32 * (4 * dim * self.n_tok + n_sq * sq)))
        gdn = gdn_transient(self.profile, self.n_tok, self.inputs.n_seqs)
        if gdn and any(self.profile.layers[il].is_recurrent for il in layers):
            out.add(Affine(c=gdn))

    def mla_v(self, layers: list[int]) -> Affine:
        if self.inputs.fork_graph is not None:
            # ik's kv_cache_trans (-mla 2/3 without flash attention, in the latent's type: -ctv), or none
            row = self.inputs.fork_graph.mla_v_copy_row(self.profile, self.fa, self.inputs.cache_type_v)
            has = row and attn_layers(self.profile, layers)[0]
            return Affine(a_base=row * self.inputs.n_stream) if has else Affine()
        if self.fa or self.profile.mla is None or not attn_layers(self.profile, layers)[0]:
            return Affine()
        # the contiguous copy of V (the latent rows of every stream's cells)
        mla = self.profile.mla
        row = row_bytes(kv_type_id(self.inputs.cache_type_k), mla.kv_lora_rank)
        if self._replayed_mla():
            # it is made after the KQ scores, which free Qcur `[kv_lora_rank + n_rot, n_head, n_tok]`: it goes
            # into that space while it fits (the deepseek2 smoke model at c512 without flash attention: 5.52 MiB
            # with the 0.5 MiB copy inside Qcur's freed 1.125 MiB)
            heads = max(
                (self.profile.layers[il].n_head for il in attn_layers(self.profile, layers)[0]), default=0
            )
            qcur = F32 * self.n_tok * heads * (mla.kv_lora_rank + mla.n_rot)
            return Affine(a_base=row * self.inputs.n_stream, room=qcur)
        return Affine(a_base=row * self.inputs.n_stream)

    def v_idxs(self, layers: list[int]) -> int:
        if self.inputs.fork_attention:
            return 0  # ik stores V through a view at kv_head: no index input (its allocator lists none)
        if self.fa or not self.profile.has_memory or self.profile.mla is not None:
            return 0  # MLA caches have no V: V is a view of the latent K rows
        base, swa = attn_layers(self.profile, layers)
        # one per cache (an iSWA model has two: the base and the SWA cache's)
        return I64 * self.n_tok * self.v_gqa_max * ((1 if base else 0) + (1 if swa else 0))

    def small_inputs(self, layers: list[int]) -> int:
        base, swa = attn_layers(self.profile, layers)
        if not (base or swa) or not self.profile.has_memory:
            return 0
        # positions (i32) and K's row indices (i64); V's (i64) too with flash attention (else `v_idxs`); the
        # Hadamard rotations of the caches the layers read
        rot = (self.rot_bytes[0] if base else 0) + (self.rot_bytes[1] if swa else 0)
        return self.n_tok * (SMALL_INPUT_BYTES_PER_TOKEN - (0 if self.fa else I64)) + rot

    def fa_copies(self, layers: list[int]) -> tuple[Affine, ...]:
        if not self.fa or (self.inputs.cache_type_k == "f16" and self.inputs.cache_type_v == "f16"):
            return ()
        base, swa = attn_layers(self.profile, layers)
        out: set[Affine] = set()
        for il in base + swa:
            lp = self.profile.layers[il]
            k = F16 * lp.n_embd_k_gqa if self.inputs.cache_type_k != "f16" else 0
            # MLA has no V cache: V is a view of K and shares K's f16 copy (fattn-common.cuh
            # `ggml_cuda_flash_attn_ext_get_f16_extra_data`, V_is_K_view)
            v = F16 * lp.n_embd_v_gqa if self.inputs.cache_type_v != "f16" and not self.profile.is_mla else 0
            out.add(Affine(a_swa=k + v) if lp.is_swa else Affine(a_base=k + v))
        return tuple(sorted(out, key=lambda x: (x.a_base, x.a_swa)))

    def _cuda_fa_runs(self, layers: list[int]) -> bool:
        """Whether ggml-cuda runs the flash attention of every attention layer in `layers`
        (`cuda_flash_attn_supported`). With `-fa on` a shape it refuses runs on the host, where the scheduler puts
        the op (the MLA smoke models' single query head: the GPU's part 4.5 MiB recorded, the host's 7.0), which
        is not modelled: the copies stay added to the largest live set there, as before."""
        tk, tv = self.inputs.cache_type_k, self.inputs.cache_type_v
        base, swa = attn_layers(self.profile, layers)
        return all(cuda_flash_attn_supported(self.profile.layers[il], tk, tv) for il in base + swa)

    def _fa_terms(
        self, gi: int, layers: list[int], kq: tuple[Affine, ...], first: bool, pp: bool
    ) -> tuple[tuple[Affine, ...], tuple[Affine, ...], tuple[Affine, ...]]:
        """GPU `gi`'s attention live sets with the flash-attention op's own allocation, its part (CUDA's f16 copies,
        Metal's scratch) and what is added to the largest live set: CUDA's copies are in the live sets
        (`_fa_op_live`; a fork's graph and a shape ggml-cuda refuses keep them added), Metal's scratch is added."""
        vendor = self.gpu_vendors[gi]
        if vendor is Vendor.APPLE:
            scratch = self.metal_fa_scratch(layers)
            return kq, scratch, scratch
        fa = self._gpu_fa_copies(gi, layers)  # none over copied host-cache views (-nkvo)
        if fa and not self.inputs.fork_attention and self._cuda_fa_runs(layers):
            split = self._split_first(gi, first, pp) and self._attention_one_block_fewer()
            return self._fa_op_live(layers, kq, split), fa, ()
        return kq, fa, fa

    def _fa_op_live(self, layers: list[int], kq: tuple[Affine, ...], split: bool) -> tuple[Affine, ...]:
        """The attention's live sets with CUDA's f16 copies of a quantized cache (`fa_copies`): the copies are
        part of the flash-attention output's own allocation (ggml-cuda.cu
        `ggml_backend_cuda_buffer_type_get_alloc_size`, fattn.cu `ggml_cuda_flash_attn_ext_get_alloc_size`), made
        once K and V are stored into the cache and freed, so they are not live with the projections before it: the
        op's live set is Q, its output and the copies, the larger of that and the other live sets. On the GPU that
        holds the input blocks (`_split_first`) that phase has one block space fewer, as the FFN's, and Q (rotated
        or roped) sits in a freed one-block hole when it fits (the allocator's trace on the CUDA stand-in, the
        arctic and llama smoke models at c2048 with q8_0 caches: `node_12`, the rotated Q, in the block the mixed
        batch's token rows left, the FA output with its 2 MiB of copies on top of the layer input: 6.59 MiB, where
        Q, K and V under the copies would make 7.59). The absorbed MLA attention's replayed peak is larger than
        its FA op's live set: its copy (36 MiB for DeepSeek-V3 at 32768 cells) adds nothing (DeepSeek-V3's
        stand-in recordings with a quantized cache on one GPU, experts there, exact: 3-10% over before)."""
        block = self.embd_block
        less = block if split else 0
        graph = self.profile.traits.graph
        out: set[Affine] = set(kq)
        base, swa = attn_layers(self.profile, layers)
        for il in base + swa:
            lp = self.profile.layers[il]
            k = F16 * lp.n_embd_k_gqa if self.inputs.cache_type_k != "f16" else 0
            # MLA's V is a view of K: one copy (`fa_copies`)
            v = F16 * lp.n_embd_v_gqa if self.inputs.cache_type_v != "f16" and not self.profile.is_mla else 0
            q = F32 * self.n_tok * lp.n_head * lp.n_embd_head_k
            fa_out = F32 * self.n_tok * lp.n_head * lp.n_embd_head_v
            # learned position embeddings: the copy of the position rows (`CUDA0#pos_embd#0`) holds the hole, Q
            # goes above (the gpt2 smoke model: the rotated Q under the FA output, 7.59 MiB)
            q_hole = 0 if self.pos_embd or not split else min(q, block) + less
            c = fa_out + q - q_hole
            if self.pos_embd and il in self.shapes.qkv_rows and graph.no_rope_qkv:
                # the fused QKV output's space stays under Q's contiguous copy (`Qcur-0 (cont)`, made while the
                # output is live), the FA output above both; the layer's FFN input is not allocated yet: one
                # block fewer (the gpt2 smoke model: `wqkv` freed at 3.09-4.59 MiB, the rotated Q, then the
                # 2.5 MiB FA output with its copies, 7.59 MiB)
                c += F32 * self.n_tok * self.shapes.qkv_rows[il] - block
            out.add(Affine(a_swa=k + v, c=c) if lp.is_swa else Affine(a_base=k + v, c=c))
            # (cohere2moe's parallel MoE runs after the attention's output projection: its FA output is freed by
            # then, the experts' intermediates over the freed masks, 9.43 MiB)
            if (graph.parallel_attn_ffn and not lp.is_moe) or graph.ffn_beside_attention:
                # the FFN reads the attention's input: it runs while the FA output, with its copies, waits for
                # it. A dense FFN's gate and up are above it (the command-r smoke model: `ffn_gate-0` and `ffn_up-0`
                # above the 2.5 MiB `node_39`, 8.09 MiB; the GLU output then takes the attention's freed space;
                # falcon: its ungated `ffn_up-0`), a MoE branch's intermediates all of them (arctic: the experts'
                # gate, up and GLU output, 11.09 MiB)
                f = ffn_layer(self.profile, il, self.n_tok)[0]
                part = f if lp.is_moe else F32 * self.n_tok * lp.n_ff * (2 if il in self.shapes.gated else 1)
                c2 = fa_out + part - less
                out.add(Affine(a_swa=k + v, c=c2) if lp.is_swa else Affine(a_base=k + v, c=c2))
        return tuple(sorted(out, key=lambda x: (x.a_base, x.a_swa, x.c)))

    def metal_fa_scratch(self, layers: list[int]) -> tuple[Affine, ...]:
        """Metal's flash-attention scratch, one per layer shape: ggml-metal sizes each FLASH_ATTN_EXT output with
        room for its kernels and always reserves it "to avoid graph reallocations" (ggml-metal.cpp
        `ggml_backend_metal_buffer_type_get_alloc_size`; ggml-metal-ops.cpp `ggml_metal_op_flash_attn_ext_extra_*`):
        the f16 copies of the K and V views (one when V is a view of K: MLA), a padding block of 64 cells of each
        view's rows and the mask's, the block mask (one byte per 64 cells and 8 queries; 32 cells and one query
        below 20 tokens) and the workgroup results, 4 x min(n_tok, 32) x n_head x 32 x (d_v + 2) bytes. The
        absorbed MLA query's output is replayed with its part that does not follow the cells
        (`_deepseek2_mla_layer`): only the cells' part is here."""
        if not self.fa:
            return ()
        out: set[Affine] = set()
        replayed = self.profile.mla is not None and self._replayed_mla()
        for is_swa, group in zip((False, True), attn_layers(self.profile, layers), strict=True):
            for il in group:
                per_cell, c = self._metal_fa_extra(self.profile.layers[il])
                c = 0 if replayed else c
                out.add(Affine(a_swa=per_cell, c=c) if is_swa else Affine(a_base=per_cell, c=c))
        return tuple(sorted(out, key=lambda x: (x.a_base, x.a_swa, x.c)))

    def _metal_fa_extra(self, lp: LayerProfile) -> tuple[int, int]:
        """`metal_fa_scratch` of one layer: bytes per cell and bytes that do not follow the cells."""
        ns = max(1, self.inputs.n_stream)
        tps = max(1, self.n_tok // ns)
        tk, tv = kv_type_id(self.inputs.cache_type_k), kv_type_id(self.inputs.cache_type_v)
        kv_f16 = tps >= OP_OFFLOAD_MIN_BATCH and self.inputs.cache_type_k in METAL_KV_F16_TYPES
        q_rows, cells = (1, 32) if tps < METAL_FA_VEC_BELOW else (8, 64)
        mask_blocks = -(-tps // q_rows) * ns  # block-mask bytes per `cells` cells
        mla = self.profile.mla if self._replayed_mla() else None
        if mla is not None:  # the absorbed query: K is the compressed row, V a view of it
            d_k, d_v, hkv, v_view = mla.kv_lora_rank + mla.n_rot, mla.kv_lora_rank, 1, True
            nb_k = nb_v = row_bytes(tk, d_k)
        else:
            d_k, d_v = lp.n_embd_head_k, lp.n_embd_head_v
            hkv, v_view = lp.n_embd_k_gqa // max(1, d_k), False
            nb_k, nb_v = row_bytes(tk, lp.n_embd_k_gqa), row_bytes(tv, lp.n_embd_v_gqa)
        if kv_f16:
            nb_k, nb_v = F16 * d_k, F16 * (d_k if v_view else d_v)
        per_cell = F16 * (d_k + (0 if v_view else d_v)) * hkv * ns + mask_blocks // cells
        pad = METAL_FA_PAD_CELLS * ((nb_k + nb_v) * hkv * ns + F16 * tps * ns)
        tmp = F32 * min(tps, METAL_FA_WORKGROUPS) * lp.n_head * ns * METAL_FA_WORKGROUPS * (d_v + 2)
        return per_cell, pad + tmp + mask_blocks  # the block mask's last, partial group of cells at most

    def ffn_holes(
        self,
        layers: list[int],
        flayers: list[int],
        m: Affine,
        vi: int,
        split: bool = False,
        cast: bool = False,
    ) -> tuple[int, tuple[tuple[int, int, int, tuple[Affine, ...]], ...]]:
        """The FFN transient of the layers that cannot reuse freed inputs, and (FFN, first intermediate, hole)
        of those that can: a mask and V's indices are freed after the last layer that reads them, so that
        layer's FFN can put its first intermediate in their space (with the device's input block, freed after
        its first layer, next to them)."""
        base, swa = attn_layers(self.profile, layers)
        # parallel attention/FFN blocks too: their waiting attention output is in the FFN's own hole
        # (`ffn_layer`), and the freed inputs take the FFN (the cohere2moe smoke model at c512 without flash
        # attention: the fused gate_up and the GLU output inside the freed f32 masks and V's indices, 9.02 MiB)
        if not (m.a_base or m.a_swa or m.c or vi) or not (base or swa):
            return ffn_transient(self.profile, flayers, self.n_tok, self.v_rot, split, cast), ()
        v_one = vi // ((1 if base else 0) + (1 if swa else 0))
        rest: list[int] = []
        holes: set[tuple[int, int, int, tuple[Affine, ...]]] = set()
        big = len(self.profile.layers)
        last_base = max(base, default=-1) if base else big
        last_swa = max(swa, default=-1) if swa else big
        for il in flayers:
            # inputs freed by the end of this layer's attention (freed neighbours merge into one block)
            freed = (il >= last_base, il >= last_swa)
            if not any(freed):
                rest.append(il)
                continue
            f, first, held = ffn_layer(self.profile, il, self.n_tok, il in self.v_rot, split, cast)
            holes.add((f, first, held, self._freed_space(il, min(layers), m, v_one, freed, split)))
        key = lambda h: (h[0], h[1], h[2], tuple((a.a_base, a.a_swa, a.c) for a in h[3]))  # noqa: E731
        return ffn_transient(self.profile, rest, self.n_tok, self.v_rot, split, cast), tuple(
            sorted(holes, key=key)
        )

    def _freed_space(
        self, il: int, first_il: int, m: Affine, v_one: int, freed: tuple[bool, bool], split: bool = False
    ) -> tuple[Affine, ...]:
        """The space layer `il`'s FFN finds freed (the alternatives it chooses the better of): the masks and V's
        indices of the caches whose last reader it follows (`freed`: base, SWA), with the input block."""
        freed_base, freed_swa = freed
        # the mixed batch's token rows, freed after the first layer's input is assembled; with the residual
        # added into the layer input (lfm2) they are free by the first layer's FFN already, next to the mask;
        # with parallel attention and FFN a MoE layer's attention output waits for the FFN in that block (the
        # cohere2moe smoke model with four streams: `node_73` next to inp_embd, the freed masks above it)
        first_layer = il == first_il and not self.profile.traits.graph.residual_into_input
        if split and self.profile.traits.graph.residual_into_input:
            # on the first GPU the residual is added into the copied embeddings' block, which stays between the
            # freed blocks and the copied mask (the allocator's list on the CUDA stand-in, the lfm2 smoke model at
            # c512: `node_47` in `model.embed_tokens`' block at 1.0 MiB, the freed mask above it, 0.51 MiB, and
            # gate, up and the GLU output on top, 4.77 MiB)
            first_layer = True
        parallel = self.profile.traits.graph.parallel_attn_ffn
        freed_input = 0 if first_layer or (parallel and self.profile.is_moe) else self.embd_block
        if freed_base and freed_swa and parallel and any(self.rot_bytes):
            # the caches' rotation inputs sit between the two masks: the freed masks are two blocks, the FFN
            # takes the better one (the cohere2moe smoke model with q8_0 caches: `attn_inp_v_rot` between the
            # freed 6.2 and 8.03 MiB, the 12 MiB fused gate-and-up output above both)
            return (Affine(m.a_base, 0, m.c + v_one + freed_input), Affine(0, m.a_swa, v_one + freed_input))
        hole = Affine(
            m.a_base if freed_base else 0,
            m.a_swa if freed_swa else 0,
            (m.c if freed_base else 0) + v_one * (int(freed_base) + int(freed_swa)) + freed_input,
        )
        return (hole,)

    def _pipeline_blocks(self, first: bool, runs: bool) -> tuple[int, int]:
        """With pipeline parallelism: the blocks of a GPU's layer phase allocated after the copies, and those next
        to the logits in its output phase."""
        blocks = PP_LAYER_BLOCKS_FIRST if first else PP_LAYER_BLOCKS_OTHER
        if first and self.pos_embd:
            blocks = PP_LAYER_BLOCKS_POSITIONS
        out_blocks = PP_OUTPUT_BLOCKS_FIRST if first else 1
        if not runs and not self.output_norm_weight:
            # no output norm weight (olmo): the whole norm runs on the last layer's device, its output is the
            # split input and only the logits are computed here (the olmo smoke model over two CUDA stand-ins: the
            # four copies of `result_norm` and the logits, 2.25 MiB)
            out_blocks = 0
        return blocks, out_blocks

    def _pipeline_inputs(
        self, gi: int, layers: list[int], first: bool, has_out: bool, m: Affine, vi: int
    ) -> Affine:
        """Every split input is held PIPELINE_COPIES times below the rest of the graph: the masks, V's indices,
        the small inputs, the hidden-state blocks, and the output ids on the GPU that runs the last layer. The
        layer phase then adds its own blocks; the output phase its norm output and the logits."""
        last = bool(layers) and layers[-1] == self.trunk[-1]
        pp_small = self.small_inputs(layers) + (I32 * self.n_out if self._reads_out_ids(gi, layers) else 0)
        if first and not self.pos_embd:
            pp_small += I64 * self.n_tok  # the mixed batch's slots: its rows are set on the first GPU
        if any(self.profile.layers[il].is_recurrent for il in layers):
            # the lightning layers' decay input (the MiniMax-01 smoke model over two CUDA stand-ins: four 2 MiB
            # copies of `diag_decay_exp` on the first GPU, 25.7 MiB)
            pp_small += self._lightning_decay([])
        n_hidden = (
            PP_INPUT_BLOCKS_FIRST if first else PP_INPUT_BLOCKS_OTHER if layers else PP_INPUT_BLOCKS_OUTPUT
        )
        if first and self.pos_embd:
            n_hidden = PP_INPUT_BLOCKS_POSITIONS
        hidden = n_hidden * self.embd_block
        hidden += self._alias_slot_inputs(gi, layers)
        if not layers and self.output_head()[0]:
            hidden = self.output_head()[0]
        elif last and not has_out and self.res_stack_head()[0]:
            # the norm of the last MoE output the output GPU computes comes back (`res_stack_head`: four copies
            # of `norm-1` on the first GPU of the kimi-k3 smoke model)
            hidden += self._routed_norm_block()
        return Affine(
            PIPELINE_COPIES * m.a_base,
            PIPELINE_COPIES * m.a_swa,
            PIPELINE_COPIES * (m.c + vi + pp_small + hidden),
        )

    def weight_block(self, il: int) -> int:
        """The block whose weights layer slot `il` uses: HRM-Text's later low passes use the first low pass's
        layers (blocks `[0, lps)`), its high passes the first high pass's (blocks `[lps, 2 lps)`,
        src/models/hrm-text.cpp `load_arch_tensors`); every other model's slot uses its own."""
        lps, _h_cycles, l_cycles = self.profile.hrm_cycles
        if not lps:
            return il
        group, i = divmod(il, lps)
        return (lps if group % (l_cycles + 1) == l_cycles else 0) + i

    def _reads_out_ids(self, gi: int, layers: list[int]) -> bool:
        """Whether GPU `gi` reads the output ids: the last layer's `get_rows` runs where that layer's tail runs,
        on the GPU of the last layer, or for an HRM-Text alias slot on the GPU of its weights (the hrm_text smoke
        model over two CUDA stand-ins: the four copies of `out_ids` on CUDA0, none on CUDA1)."""
        if not self.trunk:
            return False
        il = self.trunk[-1]
        where = self.placement.layer_device
        weights = where[self.weight_block(il)]
        if weights is not None and where[il] is not None and weights != where[il]:
            return weights == gi
        return bool(layers) and layers[-1] == il

    def _alias_slot_inputs(self, gi: int, layers: list[int]) -> int:
        """Per copy, the bytes of the blocks GPU `gi` reads for HRM-Text's alias slots split between two GPUs
        (HRM_ALIAS_INPUTS_CACHE per slot of its own whose weights are elsewhere, HRM_ALIAS_INPUTS_WEIGHTS per slot
        elsewhere that uses its weights); 0 for other models. Weights on the host are not modelled here."""
        if not self.profile.hrm_cycles[0]:
            return 0
        where = self.placement.layer_device
        own = sum(1 for il in layers if where[self.weight_block(il)] not in (gi, None))
        lent = sum(
            1
            for il in self.trunk
            if where[il] is not None and where[il] != gi and where[self.weight_block(il)] == gi
        )
        return (HRM_ALIAS_INPUTS_CACHE * own + HRM_ALIAS_INPUTS_WEIGHTS * lent) * self.embd_block

    def output_head(self) -> tuple[int, int]:
        """What a GPU that runs only the output layer reads per copy and computes above them beyond the output
        norm's input (`hc_head`, `res_stack_head`), bytes; (0, 0): the output norm's one block."""
        hc = self.hc_head()
        return hc if hc[0] else self.res_stack_head()

    def res_stack_head(self) -> tuple[int, int]:
        """kimi-k3's final residual mix (src/models/kimi-k3.cpp `res_mix` with `output_res_score`) on a GPU that
        runs only the output layer: its weightless norms run there, and the scheduler interleaves them with the
        last layer's tail (ggml-backend.cpp `ggml_backend_sched_split_graph`, pass 2), so that GPU reads the
        banked stack `[n_embd, n_ckpt, n_tok]` (a checkpoint every `attn_res.block_size` layers) and its norm, the
        last layer's output and its norm, the output ids and the last MoE output `[n_embd_latent, n_tok]`, whose
        norm it computes for the first GPU; above them the stack's scores and their sums and that norm. The
        allocator's peak on the smoke model over two CUDA stand-ins at c1024: four copies of `node_227`,
        `ffn_moe_out-1`, `node_248`, `inp_embd (reshaped)`, `l_out-1` and `out_ids`, then `node_228` (freed),
        `node_229` and `norm-1`, 6.13 MiB. (0, 0) for other models."""
        bs = self.profile.attn_res_block_size
        if not bs or not any(t.name == "output_res_score.weight" for t in self.profile.tensors):
            return 0, 0
        n_ckpt = len(range(0, len(self.profile.layers), bs))
        block, lat = self.embd_block, self._routed_norm_block()
        inputs = (2 * n_ckpt + 2) * block + lat + I32 * self.n_out
        return inputs, n_ckpt * block + F32 * n_ckpt * self.n_out + lat

    def _routed_norm_block(self) -> int:
        """The last layer's latent MoE output `[n_embd_latent, n_tok]` whose norm the output GPU computes
        (`res_stack_head`), f32 bytes; 0 without kimi-k3's residual stack or a latent last layer."""
        if not self.profile.attn_res_block_size:
            return 0
        name = f"blk.{len(self.profile.layers) - 1}.ffn_routed_norm.weight"
        latent = next((t.shape[0] for t in self.profile.tensors if t.name == name), 0)
        return F32 * latent * self.n_out

    def hc_head(self) -> tuple[int, int]:
        """A hyper-connection model's output head on a GPU that runs only the output layer: the split inputs it
        reads from the last layer's GPU (per copy) and its live set above them, bytes; (0, 0) for other models.
        The weightless norms run where their source is, the first weighted op here (ggml-backend.cpp
        `ggml_backend_sched_split_graph`, pass 2). hy_v4 (`build_hc_head`, `hy_v4_hc_reduce`): the streams' norm
        `[hc n_embd, n_out]` and one view of each stream, a split input each, its size spanning the streams
        (`[n_embd, n_out]` with the streams' row stride); the mixes `[hc, n_out]`, the running sum and a
        product above them (the allocator's peak on the smoke model over two CUDA stand-ins at c1024: four
        copies of five 1 MiB inputs, `hc_head_mixes` and two 0.25 MiB blocks, 20.48 MiB). qwen4exp
        (`build_hc_mix`): the streams' grouped norm, then its weighted copy `[hc n_embd, n_out]`, the down
        projection `[hc_lr, n_out]` and the gate `[hc n_embd, n_out]` (four 2 MiB copies, `node_388`, `node_390`
        and `hc_gate`: 12.02 MiB)."""
        kind = self.profile.traits.graph.hc_head
        width = hc_width(self.profile)
        n_embd, n = self.profile.n_embd, self.n_out
        if kind is HcHead.NONE or not width or not n_embd:
            return 0, 0
        stream = F32 * width * n
        if kind is HcHead.STREAM_VIEWS:
            hc = width // n_embd
            view = F32 * n_embd * (hc * n - hc + 1)
            return stream + hc * view, F32 * hc * n + 2 * F32 * n_embd * n
        low = next((t.shape[1] for t in self.profile.tensors if t.name == "output_hc_down.weight"), 0)
        return stream, 2 * stream + F32 * low * n

    def host_expert_down(self) -> tuple[dict[int, int], int]:
        """With pipeline parallelism, the experts' down products a CUDA GPU refuses (`moe_down_f32_src1`: MUL_MAT_ID
        with f32 precision, ggml-cuda.cu `ggml_backend_cuda_device_supports_op`) run on the host, a split of their
        own: per MoE layer the host holds four copies of the down weights, of the GLU output
        `[n_ff_exp, n_used, n_tok]` and of the selected experts' ids, the GPU four copies of the product
        `[n_embd, n_used, n_tok]` it reads back, all never freed (`PIPELINE_COPIES`). The allocator's peaks on
        the mistral4 smoke model over two CUDA stand-ins at c1024: `ffn_moe_down-1` four times 0.5 MiB on the
        first GPU, 18.42 MiB; `blk.1.ffn_down_exps.weight`, `ffn_moe_swiglu-1` and `ffn_moe_topk-1` four times
        each on the host, 14.33 MiB. Per GPU and the host's, bytes; without pipeline parallelism not modelled."""
        moe = self.profile.moe
        if (
            not self.inputs.pipeline_parallel
            or not self.profile.traits.graph.moe_down_f32_src1
            or moe is None
        ):
            return {}, 0
        gpu: dict[int, int] = {}
        host = 0
        for il in self.trunk:
            lp = self.profile.layers[il]
            gi = self.ffn_dev.get(il)
            if not lp.is_moe or gi is None or self.gpu_vendors[gi] not in CUDA_VENDORS:
                continue
            used = lp.n_expert_used or moe.n_expert_used
            n_ff_exp = moe.n_ff_exp or lp.n_ff
            weight = sum(
                t.n_bytes for t in self.profile.tensors if t.name == f"blk.{il}.ffn_down_exps.weight"
            )
            gpu[gi] = gpu.get(gi, 0) + PIPELINE_COPIES * F32 * self.profile.n_embd * used * self.n_tok
            host += PIPELINE_COPIES * (weight + (F32 * n_ff_exp + I32) * used * self.n_tok)
        return gpu, host

    def _expert_copy_terms(
        self, gi: int, layers: list[int], flayers: list[int], kq_gi: tuple[Affine, ...], ffn_rest: int
    ) -> tuple[tuple[Affine, ...], int]:
        """What the layers between a copied expert layer and the last attention layer allocate over the hole
        under the masks (`expert_copy_hole`): the attention terms and the FFN transient, raised to it."""
        copy_hole, e, last_att = expert_copy_hole(
            self.profile, self.compute_dev, self.ffn_dev, gi, layers, self.n_tok
        )
        if not copy_hole:
            return kq_gi, ffn_rest
        held_set = {Affine(c=copy_hole)}
        gdn = gdn_transient(self.profile, self.n_tok, self.inputs.n_seqs)
        if gdn and any(self.profile.layers[il].is_recurrent for il in layers if e < il <= last_att):
            out = gdn_output(self.profile, self.n_tok, self.inputs.n_seqs)
            held_set.add(Affine(c=in_hole(gdn - out, out, copy_hole)))
        kq_gi = tuple(sorted(set(kq_gi) | held_set, key=lambda x: (x.a_base, x.a_swa, x.c)))
        ffn_rest = max(
            [ffn_rest]
            + [ffn_in_hole(self.profile, il, self.n_tok, copy_hole) for il in flayers if e < il < last_att]
        )
        return kq_gi, ffn_rest

    def _offloaded_terms(
        self,
        layers: list[int],
        flayers: list[int],
        kq_gi: tuple[Affine, ...],
        ffn_rest: int,
        split: tuple[bool, bool],
    ) -> tuple[tuple[Affine, ...], int]:
        """The first GPU with op offload: the FFNs whose matrices are in host memory with their copies
        (`offloaded_ffn_peak`), and the attention of a layer whose K/V cache is in host memory with the copies of
        its K and V views (the flash-attention or KQ op's sources in a host buffer are the split's inputs)."""
        peaks = [
            offloaded_ffn_peak(self.profile, il, self.n_tok, self.host_mats[il])
            for il in flayers
            if il in self.host_mats
        ]
        ffn_rest = max([ffn_rest, *peaks])
        kq_gi = self._late_masks(layers, flayers, kq_gi, split)
        host_kv = [il for il in layers if self.placement.layer_device[il] is None]
        if host_kv:
            base, swa = attn_layers(self.profile, host_kv)
            tk, tv = kv_type_id(self.inputs.cache_type_k), kv_type_id(self.inputs.cache_type_v)
            views: set[Affine] = set()
            for group, is_swa in ((base, False), (swa, True)):
                for il in group:
                    lp = self.profile.layers[il]
                    row = row_bytes(tk, lp.n_embd_k_gqa)
                    if not self.profile.is_mla:  # MLA's V is a view of K
                        row += row_bytes(tv, lp.n_embd_v_gqa)
                    views.add(Affine(a_swa=row) if is_swa else Affine(a_base=row))
            kq_gi = tuple(
                sorted(
                    {Affine(a.a_base + v.a_base, a.a_swa + v.a_swa, a.c) for a in kq_gi for v in views}
                    | set(kq_gi),
                    key=lambda x: (x.a_base, x.a_swa, x.c),
                )
            )
        return kq_gi, ffn_rest

    def _late_masks(
        self, layers: list[int], flayers: list[int], kq_gi: tuple[Affine, ...], split: tuple[bool, bool]
    ) -> tuple[Affine, ...]:
        """A mask first read after a layer whose down matrix the first GPU copies in lands right above that copy
        (`offloaded_down_top`) and stays until its last reader: what a later layer allocates goes above it when it
        does not fit in the space below (the copy's, and the hole the FFN norm leaves, `ffn_norm_hole`: one block
        on the first GPU). The allocator's lists on a CUDA-shaped stand-in: Llama-4-Scout without flash attention,
        `-cmoe`: the full-attention mask at 600 MiB above layer 2's down copy and layer 3's 640 MiB of KQ scores
        above it; Qwen3-Next-80B-A3B: layer 3's 420 MiB down copy above its mask, its GLU output having taken part
        of the space below; Llama-4-Scout with flash attention at 32768 cells, f16 or q8_0 caches, `-ub 512`: the
        16 MiB GLU output does not fit in the one-block hole and takes the space left above the outputs of gate
        and up, and layer 3's 525 MiB copy goes above the 32 MiB mask (1146.51 MiB; granite-4.0-h-tiny: layer 5's
        39.4 MiB copy above its mask, 128.75 MiB). A mask that fits in the hole goes there instead, with nothing
        above the copy (Llama-4-Scout at 8192 cells: the 8 MiB full-attention mask at 20.09 MiB, in layer 2's
        norm's hole; its 32 MiB at 32768 cells does not fit there), so the term is past that room only (`flat`:
        the mask is counted under the blocks)."""
        out = set(kq_gi)
        on = set(flayers)
        for group in attn_layers(self.profile, layers):
            # a reader whose own attention weights are copied in starts a split of its own with them
            if not group or group[0] - 1 not in on or self.placement.layer_device[group[0]] is None:
                continue
            mats = self.host_mats.get(group[0] - 1)
            top = offloaded_down_top(self.profile, group[0] - 1, self.n_tok, mats) if mats else 0
            if not top:
                continue
            later = [il for il in layers if il >= group[0]]
            hole = F32 * self.n_tok * ffn_norm_hole(self.profile, group[0] - 1 in self.v_rot, *split)
            for a in self.kq(later):
                if a.a_base or a.a_swa:  # the scores go above while they do not fit below
                    out.add(Affine(a.a_base, a.a_swa, a.c + top, room=top))
            above = max(
                (
                    offloaded_ffn_above(
                        self.profile,
                        il,
                        self.n_tok,
                        self.host_mats[il],
                        (top, F32 * self.n_tok * ffn_norm_hole(self.profile, il in self.v_rot, *split)),
                    )
                    for il in later
                    if il in self.host_mats and il in on
                ),
                default=0,
            )
            if above:
                # only where the mask does not fit in the FFN norm's hole of the layer before (it is counted
                # under the blocks already)
                mask = self.masks(group[:1])
                out.add(Affine(mask.a_base, mask.a_swa, top + above, room=hole, flat=True))
        return tuple(sorted(out, key=lambda x: (x.a_base, x.a_swa, x.c, x.room, x.flat)))

    def _output_layout(self, gi: int, first: bool, has_out: bool) -> tuple[bool, int]:
        """Whether the graph inputs stay under the logits on GPU `gi` (the first GPU that holds the first layer,
        without pipeline parallelism, when it computes the logits), and the blocks next to the logits."""
        if not first:
            return False, 1
        inputs = (
            self.placement.layer_device[self.trunk[0]] == gi
            and not self.inputs.pipeline_parallel
            and not self._masks_in_later_split(gi)
        )
        if not has_out:
            return False, residual_blocks(self.profile) - 1 if inputs else RESIDUAL_BLOCKS
        return inputs, residual_blocks(self.profile) - 1 if inputs else RESIDUAL_BLOCKS

    def _masks_in_later_split(self, gi: int) -> bool:
        """Whether GPU `gi` copies the masks in after its first split: its first attention layer comes after a
        layer whose weights it copies in from host memory (op offload) or whose FFN runs on the host, each a
        split of its own (ggml-backend.cpp `ggml_backend_sched_split_graph`). A later split's input copies are
        graph nodes the allocator frees after their last reader, not the first split's inputs, which stay under
        the logits (the allocator's peaks on the CUDA-shaped stand-in, granite-4.0-h-tiny with `-cmoe`: the mask
        copied at layer 4's experts, above its down matrix's copy, the logits at 12.00 MiB with nothing under
        them but the blocks; 208.0 MiB, 240.1 counted with the 32 MiB mask under them before)."""
        late = self._late_mask_groups(gi)
        return bool(late) and all(late)

    def _masks_under_logits(self, gi: int, m: Affine, small: int) -> Affine:
        """The masks and small inputs under the logits: those of the first split (`_late_mask_groups`)."""
        base, swa = attn_layers(self.profile, self.by_dev.get(gi, []))
        late = iter(self._late_mask_groups(gi))
        late_base = next(late) if base else False
        late_swa = next(late) if swa else False
        return Affine(0 if late_base else m.a_base, 0 if late_swa else m.a_swa, m.c + small)

    def _late_mask_groups(self, gi: int) -> tuple[bool, ...]:
        """For each cache whose layers GPU `gi` runs (full attention, then sliding window), whether its mask is
        copied in after the first split (`_masks_in_later_split`): only the masks of the first split stay under
        the logits (the allocator's peak on the CUDA-shaped stand-in, gpt-oss-20b at 32768 cells with `-cmoe`:
        the sliding-window layer 0 reads its mask in the first split, the full-attention mask comes with layer
        1's split after layer 0's expert copies; the logits at 23.29 MiB, 416.04 MiB, where the 32 MiB full
        mask under them made 448.1)."""
        late: list[bool] = []
        for group in attn_layers(self.profile, self.by_dev.get(gi, [])):
            if group:
                late.append(
                    any(
                        il in self.host_mats or self.ffn_dev.get(il, gi) != gi or self.compute_dev[il] != gi
                        for il in self.trunk
                        if il < min(group)
                    )
                )
        return tuple(late)

    def _output_copy(self, gi: int, has_out: bool) -> int:
        """The output matrix's copy under the logits when the first GPU takes the host's output layer: copied in
        at the start of the output layer's split, after every layer, so it is part of the output phase, not under
        the layers' (the stand-in recordings with `-ngl 0`: gpt-oss-120b 1002.1 MiB = the 586.8 MiB copy, the
        logits and a block; counted under both phases it was 1206.6). ggml-cuda offloads a multiplication by the
        batch of its result (`get_op_batch_size`: `ne[1]` of a MUL_MAT, the output count here, not the
        micro-batch): below OP_OFFLOAD_MIN_BATCH outputs the output matrix stays on the host (a llama-server draft
        with its layers on the host, -ngld 0: no copy in its first GPU's buffer). So the GPUs can hold less at
        -ngl 0 than at -ngl 1, or the first GPU more (from 32 outputs, the output layer on another GPU at -ngl 1):
        the planner assumes neither (`planner._cpu_may_win`, `solver._largest_gpu_fit`)."""
        if not has_out or not self.host_mats or gi != 0 or self.placement.output_device is not None:
            return 0
        if self.n_out < OP_OFFLOAD_MIN_BATCH:
            return 0
        out_mats = self.host_mats.get(None, {})
        return out_mats.get("output.weight") or max(out_mats.values(), default=0)

    def _host_attention(self, gi: int) -> bool:
        """-nkvo with flash attention on a CUDA-shaped GPU: the GPU still runs the attention (the scheduler skips
        FLASH_ATTN_EXT when it places ops by their weights, ggml-backend.cpp lines 1098-1099), but its masks are
        split inputs of the layers' second splits (after the stores into the host cache, which run on the host):
        copied in at each cache's first layer, above what lies there, never under the logits. They are counted
        there, with the K and V views' copies (`_host_cache_attention`), not as inputs under the blocks; and no f16
        copies of a quantized cache come with the copied views (`_host_cache_layer`). The CUDA stand-in recordings
        of tests/fixtures/llamacpp/finer and standin: one GPU's buffer the same at 4096 and 32768 cells (the
        logits above the layer phase), 360.0 MiB at 65536 cells (the copies above them); a loopback RPC device
        still takes the masks under its blocks (the placement grid)."""
        return self.fa and not self.inputs.kv_offload and self.gpu_vendors[gi] in CUDA_VENDORS

    def _gpu_masks(self, gi: int, layers: list[int]) -> Affine:
        """The masks GPU `gi` copies in under its blocks (none with `_host_attention`: the replay counts them)."""
        return Affine() if self._host_attention(gi) else self.masks(layers)

    def _gpu_fa_copies(self, gi: int, layers: list[int]) -> tuple[Affine, ...]:
        """CUDA's f16 copies of a quantized cache for flash attention on GPU `gi` (`fa_copies`)."""
        if self.gpu_vendors[gi] not in CUDA_VENDORS or self._host_attention(gi):
            return ()
        return self.fa_copies(layers)

    def _host_cache_attention(
        self, gi: int, layers: list[int], where: tuple[bool, bool, bool], blocks: int, base: Affine
    ) -> tuple[Term, ...]:
        """GPU `gi`'s first layer of each cache (full attention, sliding window) when it runs the flash attention
        over a cache in host memory (`-nkvo`, or a host layer whose multiplications the first GPU takes): the K
        and V views and that cache's mask copied in at the layer's split, replayed over the blocks live there
        (`HostCacheAttention`). The layout at the split, from the allocator's lists on the CUDA-shaped stand-in
        (llama-3.1-8b and gemma-3-27b over one and two GPUs with `-nkvo`): at the GPU's first layer, on the GPU
        that runs the model's first layer, the two blocks the attention norm and Q's product freed at the bottom,
        then the embeddings and the residual, Q on top; on a later GPU its input block, a freed block, then Q; at
        the first layer of the GPU's other cache (gemma-3-27b's layer 5, the first full-attention layer after
        five sliding-window ones) the blocks with one freed among them, then Q `_q_shift` up. `where`: whether the GPU
        runs the model's first layer, pipeline parallelism, and a Mamba block's unmerged free end
        (`_unmerged_free_end`). CUDA only (the recordings); none with pipeline parallelism, a fork's graph or
        an unmerged free end (granite-4.0-h-tiny with `-nkvo`: its recordings show no such peak); MLA's own form
        in `_mla_host_cache`."""
        first, pp, unmerged = where
        if pp or unmerged or not layers:
            return ()
        if self.profile.mla is not None:
            return self._mla_host_cache(gi, layers, first, blocks, base)
        if not self._host_cache_replayed(gi):
            return ()
        out: list[Term] = []
        q_norm = _q_norm_layers(self.profile)
        groups = attn_layers(self.profile, layers)
        first_attn = min((g[0] for g in groups if g), default=-1)
        for swa, group in enumerate(groups):
            il = group[0] if group else -1
            if il < 0 or not self._host_cache(il) or (self.fa and not self._cuda_fa_runs([il])):
                continue
            layout = self._host_cache_layout(il, il == layers[0], first, blocks, q_norm)
            later = [self._q_shift(j, q_norm) for j in group[1:] if self._host_cache(j)]
            lead = max(later) if self.fa and later and (first or il != layers[0]) else -1
            term = self._host_cache_layer(gi, il, bool(swa), layout, base, lead)
            out.append(self._host_cache_later(term, gi, group, first, first_attn))
        return tuple(out)

    def _host_cache_later(
        self, term: HostCacheAttention, gi: int, group: list[int], first: bool, first_attn: int
    ) -> HostCacheAttention:
        """`term` (the first layer of `group` on GPU `gi`) with what comes after its attention: the next layer's
        copies and scores, its whole replay (`_next_host_layer`), the residual before the FFN
        (`_second_cache_residual`)."""
        il = group[0]
        return replace(
            term,
            scores_next=il + 1 in group and self._host_cache(il + 1),
            next_layer=self._next_host_layer(gi, il + 1, first and il + 1 in group[1:2]),
            residual=self._second_cache_residual(il, first_attn),
        )

    def _second_cache_residual(self, il: int, first_attn: int) -> tuple[ReplayOp, ...]:
        """`HostCacheAttention.residual`: host layer `il`, the GPU's first layer of its second cache (after the
        first cache's layer `first_attn`), copies its output matrix into Q's freed block and the space above it,
        and its product, the residual live through the FFN, goes right above the copy, so the FFN's copies go
        above both. The allocator's list on the CUDA-shaped stand-in, gemma-3-27b with llama-server's reserve at
        4096 cells: layer 5's 11.8 MiB attn_output copy at Q's 42.0 MiB, the residual at 53.8 MiB, its FFN's
        copies at 64.3 (210.3 MiB, the peak at `-ngl 31`), where layers 0-4 keep their residual under the blocks'
        top (188.0 MiB). Empty for a cache's first layer on the GPU (a hybrid's first attention layer after
        recurrent ones: not traced)."""
        wo = next((b for n, b in self.host_mats.get(il, {}).items() if ".attn_output.weight" in n), 0)
        if not wo or il <= first_attn:
            return ()
        return (("wo", wo), ("res", self.embd_block), ("wo", 0))

    def _next_host_layer(
        self, gi: int, il: int, adjacent: bool
    ) -> tuple[tuple[ReplayOp, ...], tuple[ReplayOp, ...]]:
        """`HostCacheAttention.next_layer`: host layer `il`, the GPU's second layer over the same host cache, whose
        attention matrices the GPU copies in (op offload), next to the GPU's first layer (`adjacent`: another
        layer between them, as a hybrid's recurrent layers, leaves other blocks), with flash attention, no Q
        norm, bias or gate, and its FFN copied in too. Graph order from the allocator's list on the CUDA-shaped stand-in (llama-3.1-8b with
        llama-server's reserve at `-ngl 0`, 4096 cells): the attention norm in Q's freed block, the Q matrix's copy
        in the blocks' free space, Q's product above the mask (the copy leaves too little room), the V matrix's
        copy, the roped Q in the blocks' space after it (the product freed), V's and K's products and copies
        there; after the attention the output matrix's copy in the blocks' space and its product (the residual,
        live through the FFN) in the V view's freed block above the mask, the later of two equal fits (ggml-alloc.c
        `ggml_dyn_tallocr_alloc`), so the FFN's copies go one block higher than the first layer's: 139.5 MiB
        where the first layer reaches 131.5. Layers 2-31 leave the allocator as layer 1 found it (their FFN's
        gate copies at layer 1's offset), so no later layer is replayed. Empty where not traced."""
        if not adjacent:
            return (), ()
        mats = self.host_mats.get(il, {})
        lp = self.profile.layers[il]

        def mat(key: str) -> int:
            return next((b for n, b in mats.items() if f".{key}." in n and n.endswith(".weight")), 0)

        wq, wk, wv, wo = mat("attn_q"), mat("attn_k"), mat("attn_v"), mat("attn_output")
        if (
            not self.fa
            or not (wq and wk and wv and wo)
            or il in _q_norm_layers(self.profile)
            or il in self.q_bias
            or self._gated_product()
            or self.ffn_dev.get(il, gi) != gi
        ):
            return (), ()
        ffn = offloaded_ffn_ops(self.profile, il, self.n_tok, mats)
        if not ffn:
            return (), ()
        f = F32 * self.n_tok
        q, kc, vc = f * lp.n_head * lp.n_embd_head_k, f * lp.n_embd_k_gqa, f * lp.n_embd_v_gqa
        out = f * lp.n_head * lp.n_embd_head_v
        head: tuple[ReplayOp, ...] = (
            ("norm", self.embd_block),
            ("wq", wq),
            ("qp", q),
            ("wq", 0),
            ("wv", wv),
            ("q1", q),
            ("qp", 0),
            ("vc", vc),
            ("wv", 0),
            ("wk", wk),
            ("kc", kc),
            ("wk", 0),
            ("norm", 0),
            ("kr", kc),
            ("kc", 0),
            ("kr", 0),
            ("vc", 0),
        )
        tail: tuple[ReplayOp, ...] = (
            ("q1", 0),
            ("k", 0),
            ("v", 0),
            ("wo", wo),
            ("res", out),
            ("wo", 0),
            ("o", 0),
            *ffn,
        )
        return head, tail

    def _mla_host_cache(
        self, gi: int, layers: list[int], first: bool, blocks: int, base: Affine
    ) -> tuple[MlaHostCache, ...]:
        """`_host_cache_attention` with MLA (`MlaHostCache`): the GPU's first layer over a host cache, mainline's
        absorbed graph with flash attention on a CUDA GPU (the recordings). The blocks at its start, from the
        allocator's lists on the CUDA-shaped stand-in: on the GPU that runs the model's first layer (DeepSeek-V2-
        Lite with llama-server's reserve at `-ngl 0`) the attention norm's block, a block the mixed batch's rows
        left (the copies of the host layer's attention matrices and the positions go there), the embeddings and
        the residual, q above them; on a later GPU (DeepSeek-V3 over two GPUs with `-nkvo`) the norm's block
        alone, the layer input copied in at the attention's split."""
        mla = self.profile.mla
        il = layers[0] if layers else -1
        if (
            mla is None
            or il < 0
            or not self.fa
            or self.gpu_vendors[gi] not in CUDA_VENDORS
            or not self._replayed_mla()
            or self.inputs.fork_attention
            or not self._host_cache(il)
            or not self._cuda_fa_runs([il])
        ):
            return ()
        lp = self.profile.layers[il]
        blk = self.embd_block
        layout = (("norm", blk), ("", blk), ("blk", max(0, blocks - 3) * blk)) if first else (("norm", blk),)
        full = absorbed_mla_ops(self.profile.n_embd, lp.n_head, lp.n_embd_head_v, mla, self.n_tok, True)
        head = absorbed_mla_ops(self.profile.n_embd, lp.n_head, lp.n_embd_head_v, mla, self.n_tok, False)
        # the attention norm's output is read by the compressed KV's product and freed after it
        at = next(i for i, (name, _) in enumerate(head) if name == "kv_cmpr_pe") + 1
        query = (*head[:at], ("norm", 0), *head[at:])
        tail = full[len(head) :]
        attend = (*tail[:2], ("k", 0), ("v", 0), *tail[2:])  # the copies freed with Qcur, after the attention
        cache = kv_type_id(self.inputs.cache_type_k)
        row = row_bytes(cache, mla.kv_lora_rank + mla.n_rot) * self.inputs.n_stream
        short = row_bytes(cache, mla.kv_lora_rank + mla.n_rot) - row_bytes(cache, mla.kv_lora_rank)
        ffns = {self._mla_host_ffn(j) for j in layers if self.ffn_dev.get(j, gi) == gi}
        term = MlaHostCache(
            layout=layout,
            query=query,
            k=Affine(a_base=row),
            v=Affine(a_base=row, c=-short),
            mask=self.masks([il]),
            attend=attend,
            ffns=tuple(sorted(f for f in ffns if f)),
            base=base,
            residual=0 if first else blk,
            next_query=self._mla_next_query(layers, layout, query),
            fa_f16=Affine(a_base=F16 * (2 * mla.kv_lora_rank + mla.n_rot) * self.inputs.n_stream)
            if self.inputs.cache_type_k != "f16"
            else Affine(),
        )
        return (term,)

    def _mla_next_query(
        self, layers: list[int], layout: tuple[tuple[str, int], ...], query: tuple[ReplayOp, ...]
    ) -> tuple[ReplayOp, ...]:
        """`MlaHostCache.next_query`: the GPU's second layer over the host cache takes its attention norm's block
        again; a host layer also the mixed batch's block (the previous layer's output and the positions are
        there) and copies its first query matrix in above the blocks before its first product, freed after it
        (the allocator's list, DeepSeek-V2-Lite with llama-server's reserve at `-ngl 0`, 131072 cells: layer 1's
        attn_q copy at the blocks' top, q-1 above it, Qcur-1 3.4 MiB higher than Qcur-0; with `-nkvo` and the
        weights on the GPU layer 1's copies where layer 0's were, 472.0 MiB); on a later GPU (`layout` the norm's
        block alone) the next layer's norm and input take the two blocks above the bottom one and the input copied
        in at the split is freed (DeepSeek-V3 over two GPUs with `-nkvo` at 131072 cells: norm-32 and l_out-31
        above the freed copy of l_out-30, q-32 in that copy's block, 897.0 MiB)."""
        mla = self.profile.mla
        nxt = layers[1] if len(layers) > 1 else -1
        if mla is None or nxt < 0 or not self._host_cache(nxt):
            return ()
        name = ".attn_q_a.weight" if mla.q_lora_rank else ".attn_q.weight"
        lead = next((b for n, b in self.host_mats.get(nxt, {}).items() if n.endswith(name)), 0)
        if not lead and len(layout) == 1:
            # a later GPU: the next layer's norm and input in the two blocks above the bottom one, where the input
            # copied in at the split is freed after the FFN's residual add
            return (("taken", layout[0][1]), ("taken1", layout[0][1]), ("res", 0), *query)
        if not lead:
            return (("taken", layout[0][1]), *query)
        retake = tuple((f"taken{i}", size) for i, (name, size) in enumerate(layout) if name != "blk")
        return (*retake, ("lead", lead), query[0], ("lead", 0), *query[1:])

    def _mla_host_ffn(self, il: int) -> tuple[ReplayOp, ...]:
        """Layer `il`'s FFN as `MlaHostCache` replays it: a host layer's copies (`offloaded_ffn_ops`), else its
        outputs (`glu_ffn_ops`)."""
        if il in self.host_mats:
            ops = offloaded_ffn_ops(self.profile, il, self.n_tok, self.host_mats[il])
            return (*ops, ("d", 0)) if ops else ()
        return glu_ffn_ops(self.profile, il, self.n_tok)

    def _host_cache_replayed(self, gi: int) -> bool:
        """Whether GPU `gi`'s copies of a host cache are replayed: a CUDA GPU (the recordings), mainline's graph,
        no MLA (`_mla_host_cache`)."""
        return (
            self.gpu_vendors[gi] in CUDA_VENDORS
            and self.profile.mla is None
            and not self.inputs.fork_attention
        )

    def _host_cache_layout(
        self, il: int, gpu_first: bool, first: bool, blocks: int, q_norm: frozenset[int]
    ) -> tuple[tuple[str, int], ...]:
        """The blocks live at layer `il`'s split, bottom up (`HostCacheAttention.layout`; `_host_cache_attention`):
        `gpu_first`: the GPU's first layer; `first`: the GPU runs the model's first layer."""
        lp = self.profile.layers[il]
        q = F32 * self.n_tok * lp.n_head * lp.n_embd_head_k
        blk = self.embd_block
        shift, q = self._q_second(il, q_norm) or (-1, q)
        if not gpu_first:
            rest = max(0, blocks - 3) * blk
            shift = self._q_shift(il, q_norm) if shift < 0 else shift
            return (("blk", blk), ("", blk), ("blk", rest), ("", shift), ("q", q))
        shift = max(0, shift)
        if first:
            return (("", 2 * blk), ("blk", max(0, blocks - 3) * blk), ("", shift), ("q", q))
        return (("blk", max(0, blocks - 1) * blk), ("", blk + shift), ("q", q))

    def _gpu_v_idxs(self, layers: list[int]) -> int:
        """V's row indices a GPU copies in: they feed the stores into the cache (set_rows), which run where the
        cache is, so none are copied to a GPU whose layers all keep their cache in host memory (the allocator's
        lists with `-nkvo`, flash attention off: no `attn_inp_v_idxs` copy on the GPU)."""
        return 0 if all(self._host_cache(il) for il in layers) else self.v_idxs(layers)

    def _host_cache(self, il: int) -> bool:
        """Whether layer `il`'s attention runs on a GPU over copies of a cache in host memory: with `-nkvo`
        (offload_kqv off: llama-kv-cache.cpp keeps every layer's cache on the host), and for a host layer whose
        multiplications the first GPU takes (op offload, `compute_devices`): its cache is on the host too, and the
        scheduler places its flash attention with Q, on that GPU, which copies its views and mask in the same way
        (ggml-backend.cpp `ggml_backend_sched_backend_id_from_cur` skips FLASH_ATTN_EXT where it places ops by
        their weights). The stand-in recordings: llama-3.1-8b over two GPUs at `-ngl 16`, 151.5 MiB at 8192 cells
        and 264.0 at 32768 (135.5 and 208.0 without these copies); with llama-server's reserve of one output row,
        where the layer phase and not the logits sets the first GPU's buffer, at `-ngl 0` and `-ngl 16` at 32768
        cells 264.0 MiB (208.0 without: 17% under). The first GPU can so hold more at a partial `-ngl` than with
        every layer offloaded, and more at `-ngl 1` than at `-ngl 2` where the output layer moves to a second GPU:
        the planner's search allows for both (`solver._largest_gpu_fit`, `Solver.output_settled`)."""
        return not self.inputs.kv_offload or (
            self.placement.layer_device[il] is None and self.compute_dev[il] is not None
        )

    def _host_cache_layer(
        self, gi: int, il: int, swa: bool, layout: tuple[tuple[str, int], ...], base: Affine, lead: int
    ) -> HostCacheAttention:
        """One layer's `HostCacheAttention` over `layout`: its views' copies in the cache types, its mask, the
        attention's output or, without flash attention, its scores, and its FFN as one block."""
        lp = self.profile.layers[il]
        streams = self.inputs.n_stream
        k = row_bytes(kv_type_id(self.inputs.cache_type_k), lp.n_embd_k_gqa) * streams
        v = row_bytes(kv_type_id(self.inputs.cache_type_v), lp.n_embd_v_gqa) * streams
        # the attention's output alone: the copied views are contiguous, and no f16 copies of a quantized cache
        # come with it (the allocator's list with q8_0 caches over two GPUs with `-nkvo`: node_33, 8.00 MiB)
        out = F32 * self.n_tok * lp.n_head * lp.n_embd_head_v
        ffn_ops: tuple[ReplayOp, ...] = ()
        if self.ffn_dev.get(il, gi) != gi:
            ffn = 0
        elif il in self.host_mats:
            ffn = offloaded_ffn_peak(self.profile, il, self.n_tok, self.host_mats[il])
            ffn_ops = offloaded_ffn_ops(self.profile, il, self.n_tok, self.host_mats[il])
        else:
            ffn = ffn_layer(self.profile, il, self.n_tok)[0]
        per_cell = 0 if self.fa else F32 * self.n_tok * lp.n_head
        return HostCacheAttention(
            scores=Affine(a_swa=per_cell) if swa else Affine(a_base=per_cell),
            layout=layout,
            k=Affine(a_swa=k) if swa else Affine(a_base=k),
            v=Affine(a_swa=v) if swa else Affine(a_base=v),
            mask=self.masks([il]),
            out=Affine(c=out),
            ffn=ffn,
            base=base,
            next_lead=lead,
            ffn_ops=ffn_ops,
        )

    def _q_shift(self, il: int, q_norm: frozenset[int]) -> int:
        """How far above the blocks a later layer's Q lands at its split (`HostCacheAttention.next_lead`, the
        layout of a cache's first layer after the GPU's first): after the copy of the V matrix a host layer's split
        makes first; with a Q norm, a layer on the GPU puts its product there and the normed Q above it, while a
        host layer's product goes above its weight copies and the normed Q into that space. The allocator's lists
        on the CUDA-shaped stand-in: llama-3.1-8b at `-ngl 16`, layer 1's Q after the 3.3 MiB attn_v copy;
        gemma-3-27b over two GPUs with `-nkvo -ngl 31` at 32768 cells, host layer 5's normed Q right above the
        blocks and GPU layer 35's one Q higher, its V copy then above layer 5's mask (466.0 MiB)."""
        mats = {n: b for n, b in self.host_mats.get(il, {}).items() if ".attn_" in n}
        second = self._q_second(il, q_norm)
        if second is not None:
            return second[0]
        if il in q_norm:
            lp = self.profile.layers[il]
            return 0 if mats else F32 * self.n_tok * lp.n_head * lp.n_embd_head_k
        return next((b for n, b in mats.items() if ".attn_v." in n), 0)

    def _q_second(self, il: int, q_norm: frozenset[int]) -> tuple[int, int] | None:
        """A host layer's second Q at its split (None: none): the free space under it above the blocks and the
        live block it ends (the Q, or from the normed Q to the end of a gated product). With a Q norm or a Q
        bias, the product goes above the copy of the Q matrix, which lies on the blocks, and the normed or biased
        Q into the copy's freed space where it fits there, else above the product; a product that carries the
        output gate (`Qcur_full`) stays live through the attention. The allocator's lists on the CUDA-shaped
        stand-in at `-ngl 0`, 32768 cells: gpt-oss-20b's biased Qcur-1 at 22.5 MiB in its 12.0 MiB attn_q copy's
        place, K's copy right above it; qwen3-30b-a3b's 8 MiB normed Q at 28.5 MiB above its 4.5 MiB attn_q copy
        and its product, K's copy right above it; qwen3-next-80b-a3b's normed Q at 16 MiB in its 9 MiB attn_q
        copy's place, its 16 MiB Qcur_full-3 above the copy, K's copy above that at 41 MiB, the mask at 105."""
        mats = self.host_mats.get(il, {})
        if not any(".attn_" in n for n in mats) or (il not in q_norm and il not in self.q_bias):
            return None
        lp = self.profile.layers[il]
        q = F32 * self.n_tok * lp.n_head * lp.n_embd_head_k
        wq = next((b for n, b in mats.items() if ".attn_q." in n), 0)
        if not wq:
            return None  # no Q matrix of its own (a fused QKV): not traced
        full = 2 * q if self._gated_product() else 0
        if q <= wq:
            return 0, wq + full if full else q
        return wq + (0 if full else q), full + q

    def _gated_product(self) -> bool:
        """Whether one projection gives the query and its output gate (`_gated_query`)."""
        return self.profile.traits.graph.gated_delta_net and self.profile.has_memory

    def gpu_plan(self, gi: int) -> DevicePlan:
        """The compute plan of GPU `gi`."""
        layers = self.by_dev.get(gi, [])
        flayers = self.ffn_by_dev.get(gi, [])
        has_out = self.out_dev == gi
        runs = bool(layers or flayers)
        # The GPU that runs the first layer takes the embeddings from the host: it holds the same residual
        # blocks as a single backend does (the recordings with one RPC device show five).
        first = bool(self.trunk) and self.compute_dev[self.trunk[0]] == gi
        pp = self.inputs.pipeline_parallel and (runs or has_out)
        m = self._gpu_masks(gi, layers)
        # the copies of the small split inputs: positions, K/V row indices, the output ids
        small = self.small_inputs(layers) + (I32 * self.n_out if has_out else 0) if runs and not pp else 0
        vi = self._gpu_v_idxs(layers) if runs else 0
        blocks = self._layer_blocks(gi, layers, flayers, first, pp)
        # The first GPU's output phase: the graph inputs it copied at the start of its first split (the masks, V's
        # indices and the small inputs) stay where they were put, above the input blocks they were copied next
        # to, and the block allocated right after them is live to the end: the logits go on top of all that (the
        # allocator's peak on a CUDA-shaped stand-in, llama-3.1-8b at 32768 cells with flash attention: three
        # input blocks, the 32 MiB mask, the output ids, a block, then the logits)
        out_inputs, out_blocks = self._output_layout(gi, first, has_out)
        out_extra = self._gpu_below_logits(gi, layers, first, has_out, runs)
        under: list[Term] = []
        pp_inputs = Affine()
        if pp:
            pp_inputs = self._pipeline_inputs(gi, layers, first, has_out, m, vi)
            under.append(Linear("pipeline-parallel input copies", pp_inputs))
            under.append(Fixed("experts' down products from the host", self.host_expert_down()[0].get(gi, 0)))
            m, vi = Affine(), 0
            blocks, out_blocks = self._pipeline_blocks(first, runs)
            out_extra = 0
        below = self._masks_under_logits(gi, m, vi + small) if out_inputs else Affine()
        output, above = self._output_terms(layers, has_out, below, out_blocks * self.embd_block, out_extra)
        if output:  # the output matrix's copy comes with the output layer's split (`_output_copy`)
            output = (*output, Fixed("op-offload weight copy", self._output_copy(gi, has_out)))
        chunk = max_chunk(self.gpu_vendors[gi])
        if chunk:
            base = Affine(
                m.a_base + pp_inputs.a_base,
                m.a_swa + pp_inputs.a_swa,
                m.c + vi + small + blocks * self.embd_block + pp_inputs.c,
            )
            inputs = Affine(m.a_base, m.a_swa, m.c + vi + small)
            prelude = self._chunk_prelude(layers, first, pp, inputs, pp_inputs)
            under += self._chunk_terms(
                gi, layers, base, chunk, self.logits if has_out else 0, out_blocks, prelude
            )
        if not runs:
            # a hyper-connection head's live set, the larger of it and the output phase (`hc_head`)
            head = (Fixed("output head", self.output_head()[1]),) if pp and has_out else ()
            return DevicePlan(
                device=gi,
                layer_phase=False,
                inputs=nonzero(head),
                output=nonzero(output),
                under=nonzero(under),
                max_chunk=chunk,
            )
        kq, ffn, ssm = self._gpu_transient(gi, layers, flayers, first, pp, m, small, vi)
        kq, fa, fa_added = self._fa_terms(gi, layers, kq, first, pp)
        att = self._attention(layers, kq, fa_added, ssm, chunk, gi)
        under_layer = Affine(m.a_base, m.a_swa, m.c + vi + small + blocks * self.embd_block + self.hc_block)
        att += self._host_cache_attention(gi, layers, (first, pp, above), blocks, under_layer)
        return DevicePlan(
            device=gi,
            layer_phase=True,
            inputs=nonzero(
                (
                    Linear("masks (copy)", m),
                    Fixed("v_idxs (copy)", vi),
                    Fixed("positions, indices (copy)", small),
                    Fixed(
                        "layer input + residual", blocks * self.embd_block + (self.hc_block if layers else 0)
                    ),
                )
            ),
            attention=att,
            fa_copies=Largest(FA_COPIES, fa) if fa else None,
            ffn=ffn,
            after=nonzero(self._graph_inputs(layers, PIPELINE_COPIES if pp else 1)),
            output=nonzero(output),
            under=nonzero(under),
            max_chunk=_output_chunk(under, chunk),
            replayed=_replayed(under),
            freed_chunk=_freed_chunk(att),
            output_above_layer=above,
        )

    def _output_terms(
        self, layers: list[int], has_out: bool, below: Affine, out_blocks: int, out_extra: int
    ) -> tuple[tuple[Term, ...], bool]:
        """A GPU's output phase (none where it does not compute the logits), and whether it goes on top of the
        layer phase (`_unmerged_free_end`: the logits alone then)."""
        if not has_out or not self.logits:
            return (), False
        if self._unmerged_free_end(layers):
            return (Fixed(LOGITS, self.logits),), True
        return (
            Fixed(LOGITS, self.logits),
            Fixed("output norm", out_blocks),
            Fixed("last MoE layer under the logits", out_extra),
            Linear("inputs under the logits (copy)", below),
        ), False

    def _unmerged_free_end(self, layers: list[int]) -> bool:
        """Whether the GPU runs a Mamba block whose states are in host memory (`-nkvo`) for one sequence: its scan
        reads the states through its own getter, so the gather of the others skips the first state
        (llama-graph.cpp `build_rs`: `ggml_get_rows(states, state_copy)` with `s_copy_tail`, n_rs - 1 rows; the
        reserve's n_rs is n_seq_max) and has no row with one sequence, a zero-byte tensor on the GPU.
        With the states copied in from the host it is placed at the end of the space the copy then frees and
        merges into, and freed as a block of its own inside that free block (ggml-alloc.c
        `ggml_dyn_tallocr_free_bytes` adds one where no block ends or starts at its offset); the next tensor taken
        from that free block moves the block's start past it (`ggml_dyn_tallocr_alloc`), and the free list is out
        of order from then on: a freed tensor merges only with its neighbours in the list, so the freed space
        stops merging back into the free end. The logits go on the free end, which stays within the layer phase:
        they are counted on top of the layer phase without its scores (`DevicePlan.output_above_layer`; the
        scores, larger than any free block, are taken from the free end and merge back into it). The allocator's
        lists on the CUDA-shaped stand-in, granite-4.0-h-tiny at 8192 cells with `-nkvo`: with flash attention the
        free end stays at 52.50 MiB from layer 35's down outputs on, everything from 21.00 MiB up free, the peak
        before the logits 66.63 MiB, the logits at 52.50 (248.50 MiB; 216.0 counted before with the logits above
        the blocks and the mask, 252.1 now); without flash attention each layer's 192 MiB scores go on the free
        end and give it back, the logits at 46.50 (242.50 MiB; 228.0 before, 262.0 now). With two slots the
        gather has a row and the list stays in order (205.0 MiB recorded, 212.0 counted). The Mamba-1/2 smoke
        models' lists go out of order the same way with `-nkvo`; the gated delta nets' and lfm2's do not (their
        gather reads every state)."""
        if self.inputs.kv_offload or self.inputs.n_seqs != 1 or not self.profile.traits.graph.mamba_scan:
            return False
        return any(
            self.profile.layers[il].is_recurrent and self.placement.layer_device[il] is not None
            for il in layers
        )

    def _split_first(self, gi: int, first: bool, pp: bool) -> bool:
        """The first GPU's FFN phase has one block space fewer and the FFN norm's hole split in one-block holes: the
        scheduler's copies of the embeddings inputs are freed once the first layer's input is built, and the
        attention output sits between the freed blocks (the allocator's list on the CUDA stand-in, llama-3.1-8b at
        4096 cells: three block spaces with `attn_out-0` in the middle one, the mask, `node_2`, then gate, up and
        the GLU output, 120.01 MiB; the llama smoke model at c512, 4.77 MiB). Not on an RPC server (its
        recordings show five blocks) nor with pipeline parallelism (its copies are never freed). Where the
        residual is added into the layer input (lfm2) the freed inputs there are not next to the mask
        (`_freed_space`): the lfm2moe smoke model at c512, the blocks, the mask's space and `node_2` under gate,
        up and the GLU output, 7.02 MiB."""
        return first and not pp and self.gpu_vendors[gi] is not Vendor.RPC

    def _first_gpu_recurrent(
        self, gi: int, layers: list[int], first: bool, pp: bool
    ) -> tuple[frozenset[int], int]:
        """The recurrent layers the first GPU counts on its own layout, and their live set: a Mamba model
        without attention (`mamba_first_gpu`); falcon-h1's parallel attention and SSM layers, whose attention
        output waits for the SSM in the freed copies' blocks, where z's contiguous copy goes after it (the
        allocator's trace on the CUDA-shaped stand-in, falcon-h1 smoke model at c512: `kqv_out` at 0.00 MiB, z's
        copy there once it is freed; 10.03 MiB, 11.53 counted with the host's layout, the output's block and z on
        top, before). Nothing elsewhere."""
        if self._mamba_only_first(gi, layers, first, pp):
            return frozenset(layers), mamba_first_gpu(self.profile, self.n_tok, self.inputs.n_seqs)
        gdn = gdn_transient(self.profile, self.n_tok, self.inputs.n_seqs)
        if gdn and self._split_first(gi, first, pp):
            # a gated delta net's input norm, read again by the gate after the op, stays in the first freed
            # copy's block, the state read in the second: one block fewer than the host's five (the allocator's
            # peak on the stand-in, qwen35 smoke model at c512: `norm-0` at 0.00, the state at 0.50 MiB, 5.65 MiB;
            # 6.15 counted before)
            rec = frozenset(il for il in layers if self.profile.layers[il].is_recurrent)
            return rec, gdn - self.embd_block if rec else 0
        hybrid = frozenset(il for il in layers if self.profile.layers[il].kind is LayerKind.HYBRID)
        if not hybrid or not first or pp or self.gpu_vendors[gi] is Vendor.RPC:
            return frozenset(), 0
        return hybrid, ssm_transient(self.profile, self.n_tok, self.inputs.n_seqs, True)

    def _hybrid_fa_copies(
        self, gi: int, layers: list[int], own_layers: frozenset[int], own: int
    ) -> tuple[Affine, ...]:
        """falcon-h1's SSM live set on the first GPU (`_first_gpu_recurrent`) with CUDA's f16 copies of a
        quantized cache: they are part of the flash-attention output's allocation (`_fa_op_live`), which waits
        for the SSM beside it, so they stay live through the scan. The output itself keeps its one-block place
        (the allocator's trace on the CUDA stand-in, falcon-h1 smoke model at c2048 with q8_0 caches: `node_39`,
        2.5 MiB with its 2 MiB of copies, above `node_2`, then zxBCdt, the conv input and the conv output on top,
        13.61 MiB, 11.61 counted before; at c512 the output with its 0.5 MiB of copies, 10.61 MiB)."""
        if not any(self.profile.layers[il].kind is LayerKind.HYBRID for il in own_layers):
            return ()
        if self.inputs.fork_attention or not self._cuda_fa_runs(layers):
            return ()
        return tuple(Affine(a.a_base, a.a_swa, own) for a in self._gpu_fa_copies(gi, layers))

    def _mamba_only_first(self, gi: int, layers: list[int], first: bool, pp: bool) -> bool:
        """The first GPU of a Mamba model without attention layers there (`mamba_first_gpu`), where the
        scheduler's copies of the embeddings inputs are freed (`_split_first`)."""
        graph = self.profile.traits.graph
        if not self._split_first(gi, first, pp) or not graph.mamba_scan or graph.plamo2_mamba:
            return False
        base, swa = attn_layers(self.profile, layers)
        if base or swa or not any(self.profile.layers[il].is_recurrent for il in layers):
            return False
        here = set(layers)  # no FFN after the blocks (the header's feed-forward length is no FFN tensor)
        return not any(t.layer in here and ".ffn_" in t.name for t in self.profile.tensors)

    def _layer_blocks(self, gi: int, layers: list[int], flayers: list[int], first: bool, pp: bool) -> int:
        """The `[n_embd, n_tok]` blocks of GPU `gi`'s layer phase: `_gpu_blocks`, or the two live blocks under
        a Mamba model's blocks on the first GPU (`mamba_first_gpu` counts the hole of the other two)."""
        if self._mamba_only_first(gi, layers, first, pp):
            return FFN_HOLE_BLOCKS + self.skip
        return self._gpu_blocks(layers, flayers, first)

    def _attention_one_block_fewer(self) -> bool:
        """Whether the first GPU's attention phase has one block space fewer, as its FFN phase (`_split_first`):
        the copies of the embeddings inputs are freed once the first layer's input is built, and the attention's
        projections take their space (the allocator's peak on the CUDA stand-in, the arcee smoke model at c512:
        the attention norm, K in the mixed batch's freed token rows, the embeddings, the layer input, then Q and V,
        3.52 MiB; DeepSeek-V3 at 4096 and 32768 cells: every absorbed-MLA recording exact, 14 MiB over before).
        Not measured that way, left as they were: the recurrent blocks (Mamba, gated delta nets, lightning
        attention), MiniMax-M3's block-sparse mask, the kept input embeddings of a skip connection and a graph
        without the mixed batch's inputs (`residual_blocks`: three blocks already)."""
        graph = self.profile.traits.graph
        recurrent = any(lp.is_recurrent for lp in self.profile.layers)
        return not (recurrent or graph.msa_attention or graph.embd_skip or graph.no_mixed_batch)

    def _first_gpu_live_sets(self, layers: list[int], kq: tuple[Affine, ...]) -> tuple[Affine, ...]:
        """The attention's live sets on the GPU that holds the input blocks (`_split_first`): one block space
        fewer (`_attention_one_block_fewer`), and a Mamba-1 block in that GPU's layout (`mamba1_first_gpu`)."""
        block = self.embd_block
        kq = tuple(self.kv_a_mqa_first.get(a, a) for a in kq)
        if self._attention_one_block_fewer():
            kq = tuple(Affine(a.a_base, a.a_swa, a.c - block, a.room) for a in kq)
        mamba1 = mamba1_first_gpu(self.profile, self.n_tok, self.inputs.n_seqs)
        if mamba1 and not any(attn_layers(self.profile, layers)):
            cpu = ssm_transient(self.profile, self.n_tok, self.inputs.n_seqs, False)
            kq = tuple(Affine(c=mamba1) if a == Affine(c=cpu) else a for a in kq)
        return kq

    def _gpu_blocks(self, layers: list[int], flayers: list[int], first: bool) -> int:
        """The `[n_embd, n_tok]` blocks of a GPU's layer phase (without pipeline parallelism)."""
        first_blocks = NO_MIXED_BATCH_BLOCKS if self.pos_embd else residual_blocks(self.profile)
        blocks = (first_blocks if first else GPU_LAYER_BLOCKS) + self.skip
        if first and layers and not flayers and not self.profile.is_moe:
            blocks -= FFN_HOLE_BLOCKS  # the FFNs run elsewhere (-ot): no FFN norm hole here
        return blocks

    def _gpu_below_logits(self, gi: int, layers: list[int], first: bool, has_out: bool, runs: bool) -> int:
        """What of the last layer stays under the logits on GPU `gi` (without pipeline parallelism)."""
        if not self.trunk:
            return 0
        runs_last = self.compute_dev[self.trunk[-1]] == gi
        # a later GPU that runs the last layer: what of that layer's FFN stays under the logits
        out_extra = self._later_gpu_below_logits(layers) if not first and runs_last else 0
        if first and has_out and runs_last and self._host_first_layer(gi):
            out_extra = moe_down_outputs(self.profile, self.trunk[-1], self.n_tok)
        if has_out and not first and not out_extra and layers and layers[-1] == self.trunk[-1]:
            out_extra = mamba2_split_below_logits(
                self.profile, layers, self.ffn_dev.get(self.trunk[-1], gi) == gi, self.n_tok
            )
        if has_out and not runs:
            out_extra = routed_sum_inputs(self.profile, self.trunk[-1], self.n_tok)
        return out_extra

    def _later_gpu_below_logits(self, layers: list[int]) -> int:
        """What of the last layer's FFN stays under the logits on a later GPU that runs it."""
        if self._after_host_ffn(layers):
            # the layers' outputs stay in the lowest blocks: the experts' sum takes a freed one, or a MoE that
            # weights its input first leaves its down outputs and their sum under the logits
            last = weighted_input_below_logits(self.profile, self.trunk[-1], self.n_tok)
            return self.embd_block if self.below_logits else last
        if self._weighted_input_last():
            # llama4's sum of one expert (a copy) takes the previous layer's freed output block, one block above
            # the lowest: the logits go above it (the allocator's trace on the CUDA-shaped stand-in,
            # Llama-4-Scout over two GPUs at `-ngl 24`: ffn_moe_out-47 at 10 MiB in l_out-46's place, the logits
            # at 20 MiB; 414.6 MiB on the second GPU, 404.6 counted with the output norm's block alone)
            return self.embd_block
        return self.below_logits

    def _after_host_ffn(self, layers: list[int]) -> bool:
        """Whether a GPU's first layer follows a layer whose FFN ran on the host (`--no-op-offload` at a partial
        `-ngl`). The ops after that FFN carry no weights and run in the GPU's first split, over copies of the
        FFN's outputs and its input at the bottom of the buffer, so the layers' outputs stay in the lowest blocks
        there. The last layer's attention output rows then leave a freed block under the experts' down outputs,
        which the router's outputs use and give back: the experts' sum takes it, not the space above the down
        outputs (`moe_split_below_logits`), and the logits go above the FFN input's block, two blocks up (the
        allocator's trace on the CUDA-shaped stand-in, deepseek-v2-lite at `-ngl 13 --no-op-offload`: the copies
        of ffn_moe_out-14, ffn_shexp-14 and ffn_inp-14 at 0, 4 and 8 MiB, l_out-25 at 0, node_1731 at 4 MiB and
        freed, the experts' sum node_1753 at 4 MiB, the logits at 8 MiB: 208.0 MiB, 236.3 counted before)."""
        if not layers or layers[0] == self.trunk[0]:
            return False
        prev = self.trunk[self.trunk.index(layers[0]) - 1]
        return (
            self.compute_dev[prev] is None
            and self.ffn_dev.get(prev, self.placement.layer_device[prev]) is None
        )

    def _weighted_input_last(self) -> bool:
        """Whether the last layer is a MoE that weights its input before the experts (llama4)."""
        return weighted_input_below_logits(self.profile, self.trunk[-1], self.n_tok) > 0

    def _host_first_layer(self, gi: int) -> bool:
        """Whether GPU `gi` runs the first layer over weights left in host memory (op offload at a partial
        `-ngl`). Its inputs and the host layers' replayed attention leave the blocks under the last layer's
        experts in use or a few bytes short of a block (the small inputs copied next to the first block), so the
        experts' sum goes above their down outputs, or into the last layer's freed input right above them, and
        the logits above it (with the output layer's weights on the GPU; at `-ngl 0` the output matrix's copy
        comes first, `_output_copy`): the down outputs `[n_embd, n_used, n_tok]` lie under the logits besides the blocks
        (`moe_down_outputs`; the allocator's traces on the CUDA-shaped stand-in, deepseek-v2-lite at `-ngl 13`:
        at `-ub 2048` ffn_moe_down-26 at 64-160 MiB, the 15.99 MiB hole at 32.02-48.02 MiB too short for
        node_1753, which goes to 160 MiB, the logits at 176 MiB: 976.0 MiB, 880.0 counted before; at `-ub 512`
        ffn_moe_down-26 at 16-40 MiB, node_1753 at 40 MiB in l_out-25's place, the logits at 44 MiB)."""
        return (
            bool(self.host_mats)
            and self.placement.layer_device[self.trunk[0]] != gi
            and self.placement.output_device == gi
        )

    def _gpu_transient(
        self,
        gi: int,
        layers: list[int],
        flayers: list[int],
        first: bool,
        pp: bool,
        m: Affine,
        small: int,
        vi: int,
    ) -> tuple[tuple[Affine, ...], tuple[Term, ...], SsmReplay | None]:
        """A GPU's attention live sets, its FFN terms and its replayed Mamba blocks."""
        freed = Affine(m.a_base, m.a_swa, m.c + small)
        split = self._split_first(gi, first, pp)
        ffn_rest, holes = self.ffn_holes(layers, flayers, freed, vi, split, split and self._cast_hole())
        replayed, ssm_ops, ssm_hole = self.ssm_after(layers, freed, vi)
        kq_gi = self._gpu_attention_sets(gi, layers, replayed, first, pp)
        shexp_ffn = shexp_only_ffn(
            self.profile, [il for il in layers if self.ffn_dev.get(il, gi) != gi], self.n_tok
        )
        if shexp_ffn and first:
            # the first GPU holds four block-sized spaces in that phase, not five (the allocator's peaks on
            # qwen3-30b-a3b and Llama-4-Scout with `-cmoe`; gpt-oss-20b's recording matches to the 0.01 MiB)
            shexp_ffn -= self.embd_block
        less = self.embd_block if split else 0
        ffn_rest = max(max(0, ffn_rest - less), shexp_ffn)
        if split:
            kq_gi = self._first_gpu_live_sets(layers, kq_gi)
        if not pp:
            kq_gi, ffn_rest = self._expert_copy_terms(gi, layers, flayers, kq_gi, ffn_rest)
        if self.host_mats and gi == 0:
            hole_of = (split, split and self._cast_hole())
            kq_gi, ffn_rest = self._offloaded_terms(layers, flayers, kq_gi, ffn_rest, hole_of)
        if gi == 0:
            ffn_rest = max(ffn_rest, self._host_glu_on_gpu())
        graph = self.profile.traits.graph
        # jamba's Mamba-1 block in graph order over its freed inputs, as on the host
        jamba = graph.residual_into_input and not graph.plamo2_mamba
        lead = self._jamba_lead(layers, m) if ssm_ops and jamba else None
        return (
            kq_gi,
            self._ffn_terms(ffn_rest, holes, less),
            self._ssm_replay(
                layers, ssm_ops, ssm_hole, lead, first and not pp and self.gpu_vendors[gi] is not Vendor.RPC
            ),
        )

    def _gpu_attention_sets(
        self, gi: int, layers: list[int], replayed: frozenset[int], first: bool, pp: bool
    ) -> tuple[Affine, ...]:
        """GPU `gi`'s attention live sets (`kq`) with the recurrent layers the first GPU counts on its own layout
        (`_first_gpu_recurrent`) and Metal's flash-attention extra for an MLA layer."""
        own_layers, own = self._first_gpu_recurrent(gi, layers, first, pp)
        metal = self.gpu_vendors[gi] is Vendor.APPLE and self.profile.mla is not None and bool(layers)
        kq_gi = self.kq(
            layers,
            replayed | own_layers,
            self._metal_fa_extra(self.profile.layers[layers[0]])[1] if metal else 0,
        )
        if not own:
            return kq_gi
        return (*kq_gi, Affine(c=own), *self._hybrid_fa_copies(gi, layers, own_layers, own))

    def _cast_hole(self) -> bool:
        """Without a cache, flash attention's f16 casts of K and V leave the first GPU's FFN norm's hole two
        blocks (`ffn_layer`'s `cast_hole`), as does an attention norm's block kept through the attention
        (`attn_out_below`). Only where the embeddings' copies are freed next to it (`_split_first`): with pipeline
        parallelism the FFN norm's freed block is a hole of its own (the dream smoke model over two GPUs: gate, up
        and the GLU output above it, 11.78 MiB)."""
        return self.fa and (not self.profile.has_memory or self.profile.traits.graph.attn_out_below)

    def _chunk_terms(
        self,
        gi: int,
        layers: list[int],
        base: Affine,
        chunk: int,
        logits: int,
        out_blocks: int,
        prelude: tuple[tuple[str, Affine], ...] = (),
    ) -> list[Term]:
        """What a device whose buffer is made of chunks has below both phases: the chunks of the first GPU's
        expert copies (`_own_chunk_copies`) and what its layer phase spills into (`_chunk_spill`), with `base`
        under the layer's attention in the first chunk (`prelude`: the layout `_chunk_prelude` gives for the
        replay of the whole layer phase)."""
        out: list[Term] = []
        if gi == 0 and self.copy_chunks:
            out.append(Fixed("op-offload weight copies (chunks of their own)", sum(self.copy_chunks)))
        spill = self._chunk_spill(gi, layers, base, chunk, logits, out_blocks, prelude) if layers else None
        if spill is not None:
            out.append(spill)
        return out

    def _chunk_spill(
        self,
        gi: int,
        layers: list[int],
        base: Affine,
        chunk: int,
        logits: int,
        out_blocks: int,
        prelude: tuple[tuple[str, Affine], ...],
    ) -> ChunkSpill | None:
        """An absorbed-MLA layer phase on a device whose buffer is made of chunks (`ChunkSpill`): the device's
        layers replayed one after the other from `prelude` where `_chunk_prelude` knows the layout and every
        layer's FFN runs on the device, else the first layer's attention with the same sequence and hole as
        `absorbed_mla_attention` (None: another graph), next to the chunks the first GPU's expert copies opened
        (`_own_chunk_copies`)."""
        mla = self.profile.mla
        if mla is None or not self._replayed_mla() or self.inputs.fork_attention:
            return None
        lp = self.profile.layers[layers[0]]
        ops = absorbed_mla_ops(self.profile.n_embd, lp.n_head, lp.n_embd_head_v, mla, self.n_tok, self.fa)
        hole = self.embd_block + (I32 + I64) * self.n_tok
        others = self.copy_chunks if layers[0] in self.by_dev.get(0, []) else ()
        spill = ChunkSpill(base, ops, hole, chunk, logits, out_blocks * self.embd_block, others)
        if not prelude or others or not self._whole_layers_on(gi, layers):
            return spill
        # the output phase: the logits above the last layer's output; a device before the output's hands its
        # last layer's output on after the next layer's first norm, made where the output is (the trace of
        # DeepSeek-V3 over two Vulkan-shaped stand-ins: `norm-47` on the first)
        tail = (("logits", logits),) if logits else (("next norm", self.embd_block),)
        runs = deepseek2_runs(self.profile, layers, mla, self.n_tok, self.n_out)
        return dataclasses.replace(spill, prelude=prelude, runs=runs, tail=tail)

    def _whole_layers_on(self, gi: int, layers: list[int]) -> bool:
        """Whether GPU `gi` runs all of its layers' graphs, FFNs included, with flash attention, the cache on the
        GPUs and no weight copied in from the host: the sequence `deepseek2_runs` replays."""
        if not (self.fa and self.inputs.kv_offload) or self.ffn_by_dev.get(gi, []) != layers:
            return False
        if any(il in self.host_mats for il in layers):
            return False
        return all(self.compute_dev[il] == gi and not self.profile.layers[il].is_nextn for il in layers)

    def _chunk_prelude(
        self, layers: list[int], first: bool, pp: bool, inputs: Affine, pp_inputs: Affine
    ) -> tuple[tuple[str, Affine], ...]:
        """What lies in GPU `gi`'s first chunk when its first layer starts, from the bottom up, for the replay of
        its whole layer phase (`ChunkSpill.runs`); () where it was not traced. The allocator's trace of
        DeepSeek-V3 on the Vulkan-shaped stand-in at `-ub 2048`: on one device the first layer's attention norm
        in the copy of the mixed batch's rows, what is left of them and of the gathered token rows and slots
        free above it, the copy of the embeddings (the first layer's residual, freed after its attention), the
        copied masks and small inputs (`inputs`), then the block the embeddings are assembled in, live to the
        end. With pipeline parallelism the input copies (`pp_inputs`, never freed) and, on the GPU that takes
        the embeddings, that block above them; the first layer makes its norm itself."""
        block = self.embd_block
        if not layers:
            return ()
        if not pp:
            if not first:
                return ()
            free = Affine(c=block + I64 * self.n_tok)
            return (
                ("attn_norm", Affine(c=block)),
                ("", free),
                (LAYER_IN, Affine(c=block)),
                ("inputs", inputs),
                ("embeddings", Affine(c=block)),
            )
        copies = ("pipeline-parallel copies", pp_inputs)
        return (copies, ("embeddings", Affine(c=block))) if first else (copies,)

    def _host_glu_on_gpu(self) -> int:
        """The first GPU's part of the host layers' FFNs in `host_glu_offloaded`: the copies of gate's and up's
        outputs with the GLU output (llama-3.1-8b with `-ngl 16`: `MTL0#ffn_gate-0#0`, `MTL0#ffn_up-0#0`,
        `ffn_swiglu-0`), then the GLU output, the copy of the down matrix and the down output, live together (the
        allocator's peak on a Metal-shaped stand-in,
        DeepSeek-V3 with `-ngl 30`: `ffn_moe_swiglu-3` (32 MiB), `MTL0#blk.3.ffn_down_exps.weight#0` (2940 MiB)
        and `ffn_moe_down-3` (112 MiB) over the copied mask)."""
        if not self.host_glu_offloaded:
            return 0
        moe = self.profile.moe
        peak = 0
        for p in self.placement.tensors:
            il = p.layer
            if il not in self.host_glu_offloaded or p.device is not None:
                continue
            if not p.name.endswith((".ffn_down.weight", ".ffn_down_exps.weight")):
                continue
            routed = self.profile.layers[il].is_moe and moe is not None
            used = (self.profile.layers[il].n_expert_used or moe.n_expert_used) if routed and moe else 1
            out = F32 * self.n_tok * used * self.profile.n_embd
            glu = gate_up_outputs(self.profile, il, self.n_tok) // 2
            # the copies of gate's and up's outputs with the GLU output, then the GLU output with the down copy
            peak = max(peak, 3 * glu, glu + p.n_bytes + out)
        return peak

    def _ffn_terms(
        self, ffn_rest: int, holes: tuple[tuple[int, int, int, tuple[Affine, ...]], ...], less: int = 0
    ) -> tuple[Term, ...]:
        """The FFN's terms: the layers that reuse no freed input, and those that do (`FfnReuse`, `less` bytes
        fewer: the first GPU's block space fewer in that phase, `_split_first`)."""
        return (Fixed(FFN, ffn_rest), FfnReuse(holes, less=less)) if holes else (Fixed(FFN, ffn_rest),)

    def _ssm_replay(
        self,
        layers: list[int],
        ops: tuple[ReplayOp, ...],
        hole: Affine,
        lead: SsmLead | None,
        first_gpu: bool = False,
    ) -> SsmReplay | None:
        """The Mamba blocks after the device's last attention layer as a term (None: there are none)."""
        if not ops:
            return None
        graph = self.profile.traits.graph
        return SsmReplay(
            ops=ops,
            hole=hole,
            block=self.embd_block,
            residual_in_input=graph.residual_into_input or graph.plamo2_mamba,
            after_attention_only=self._attention_only_before_ssm(layers),
            lead=lead,
            first_gpu=first_gpu and self._ffn_before_ssm(layers),
        )

    def _ffn_before_ssm(self, layers: list[int]) -> bool:
        """Whether the device's last attention layer has an FFN: its output then lands in the first freed copy's
        block, below the free space; an attention-only layer's output lands amid the freed masks and splits it
        (the allocator's peak on the stand-in, nemotron_h smoke model at c512 without flash attention: `l_out-0`
        at 1.50 MiB, the conv input on top, 11.03 MiB)."""
        base, swa = attn_layers(self.profile, layers)
        lp = self.profile.layers[max(base + swa)] if base or swa else None
        return lp is not None and bool(lp.n_ff or lp.is_moe)

    def _attention(
        self,
        layers: list[int],
        kq: tuple[Affine, ...],
        fa: tuple[Affine, ...],
        ssm: SsmReplay | None,
        chunk: int = 0,
        gi: int = 0,
    ) -> tuple[Term, ...]:
        """The attention's live sets on a backend running `layers` (the transient takes the largest); `chunk`:
        the device's largest chunk (`AttentionScores`), with more than one layer; `gi`: the GPU (with `chunk`)."""
        out: list[Term] = [AttentionScores(kq, fa, self._chunks(layers, chunk, gi))]
        graph = self.inputs.fork_graph
        groups = self.fork_groups(layers) if graph is not None else ()
        if graph is not None and groups:
            ci = self.inputs
            fork = ForkAttention(
                graph, self.profile, groups, ci.n_tok, ci.flash_attn, ci.cache_type_k, self.n_gpu > 0
            )
            out.append(fork)
        if ssm is not None:
            out.append(ssm)
        dsv4, indexer, kpool = self.dsv4(layers), self.indexer_scores(layers), self.kpool_selection(layers)
        if dsv4 is not None:
            out.append(Dsv4Peak(dsv4))
        if indexer is not None:
            out.append(IndexerPeak(indexer))
        if kpool is not None:
            out.append(KpoolPeak(kpool))
        return tuple(out)

    def _chunks(self, layers: list[int], size: int, gi: int) -> Chunks | None:
        """The chunk rules of a device whose buffer type has a maximum size (`Chunks`; None: no limit)."""
        if not size:
            return None
        first = max((self._ffn_start(il) for il in layers), default=0)
        base, swa = attn_layers(self.profile, layers)
        order = tuple(il in swa for il in sorted([*base, *swa]))
        block = self.embd_block
        return Chunks(size, self.tensor_limits[gi], block, first, len(order) > 1, order, self.mla_v(layers))

    def _ffn_start(self, il: int) -> int:
        """The FFN intermediates a layer allocates before it frees any (`Chunks.ffn_first`): the outputs of gate and
        up, both read by the GLU (`gate_up_outputs`), or the first intermediate alone (`ffn_layer`; no gate). The
        allocator's trace on the Vulkan stand-in with 64-bit indexing, DeepSeek-V2-Lite at 32768 cells, `-ub 2048`,
        no flash attention: `ffn_gate-0` (85.5 MiB) fits in chunk 0, `ffn_up-0` does not and goes into the freed
        chunk of the 4 GiB `kq-0`, where `ffn_out-0` follows it, so `kq-1` opens chunk 2."""
        first = ffn_layer(self.profile, il, self.n_tok)[1]
        lp = self.profile.layers[il]
        if (lp.is_moe and self.profile.moe is not None) or il in layer_shapes(self.profile).gated:
            return max(first, gate_up_outputs(self.profile, il, self.n_tok))
        return first

    def _host_scores(self) -> tuple[Term, ...]:
        """The KQ scores the Vulkan GPUs refuse, run on the host with copies of their K and V views and of Q
        (`HostScores`; DeepSeek-V3 at 4096 cells, `-ub 2048`, no flash attention: `CPU#Qcur-0` 576 MiB next to
        the 4 GiB `kq-0` in the host's buffer)."""
        tk, tv = kv_type_id(self.inputs.cache_type_k), kv_type_id(self.inputs.cache_type_v)
        shapes: set[tuple[Affine, Affine, int]] = set()
        for gi, vendor in enumerate(self.gpu_vendors):
            layers = self.by_dev.get(gi, [])
            if not max_chunk(vendor) or not layers or self.fa:
                continue
            base, swa = attn_layers(self.profile, layers)
            view, q = [0, 0], [0, 0]
            for i, group in enumerate((base, swa)):
                for il in group:
                    lp = self.profile.layers[il]
                    row = row_bytes(tk, lp.n_embd_k_gqa)
                    row += 0 if self.profile.is_mla else row_bytes(tv, lp.n_embd_v_gqa)
                    view[i] = max(view[i], row)
                    q[i] = max(q[i], F32 * self.n_tok * lp.n_head * lp.n_embd_head_k)
            for a in self.kq(layers):
                if a.a_base or a.a_swa:
                    views = Affine(a_base=view[0], c=q[0]) if a.a_base else Affine(a_swa=view[1], c=q[1])
                    shapes.add((a, views, self.tensor_limits[gi]))
        key = lambda x: (x[0].a_base, x[0].a_swa, x[0].c, x[2])  # noqa: E731
        return (HostScores(tuple(sorted(shapes, key=key))),) if shapes else ()

    def _graph_inputs(self, layers: list[int], copies: int = 1) -> tuple[Term, ...]:
        """The cell-sized graph inputs and copies of a backend running `layers`: V's MLA copy, the DSA top-k
        zeros, DeepSeek-V4's compressed-attention masks and the k-pool inputs (`copies` of those two: a GPU's
        split inputs with pipeline parallelism, the glm5-next smoke model over two CUDA stand-ins: four copies of
        the k-pool inputs on the first GPU, 42.6 MiB)."""
        out: list[Term] = [
            Linear("MLA V copy", self.mla_v(layers)),
            DsaZeros(self.dsa_zeros(layers), self.dsa_top_k),
        ]
        dsv4, kpool = self.dsv4(layers), self.kpool_selection(layers)
        if dsv4 is not None:
            out.append(Dsv4Inputs(dsv4, copies=copies))
        if kpool is not None:
            out.append(KpoolInputs(kpool, copies=copies))
        return tuple(out)

    def _host_blocks(
        self, runs: bool, has_layers: bool, ffn_only: bool, experts_only: bool, n_copies: int, host_small: int
    ) -> tuple[int, str]:
        """The host's block-sized activations and their label."""
        if runs:
            if experts_only:
                blocks = HOST_GRAPH_INPUT_BLOCKS * self.embd_block
            elif not ffn_only:
                blocks = (
                    (residual_blocks(self.profile) + self.skip) if has_layers else HOST_INPUT_BLOCKS
                ) * self.embd_block
                blocks += self.hc_block if has_layers else 0
            else:
                # only dense FFNs (their weights kept on the host): the embeddings input and the FFN input's copy
                # stay; the token-embedding rows went to the first GPU before (the input phase, in `kq` below)
                blocks = HOST_GRAPH_INPUT_BLOCKS * self.embd_block
            label = "embeddings + residual activations"
        else:
            # The graph inputs (embeddings inputs, masks, V's indices), n_copies times with pipeline parallelism,
            # and the two token-embedding get_rows outputs.
            blocks = (
                n_copies * HOST_GRAPH_INPUT_BLOCKS + HOST_INPUT_BLOCKS - HOST_GRAPH_INPUT_BLOCKS
            ) * self.embd_block
            if self.profile.traits.graph.no_mixed_batch:
                # no mixed batch (`llm_arch_supports_mixed_batch`): one embeddings input and one token-rows output
                # (the cogvlm smoke model on the CUDA stand-in: `inp_embd`, the mask and `embd`, 1.5 MiB at c512)
                blocks //= 2
            if n_copies > 1:
                blocks += n_copies * host_small
            if self.pos_embd:
                # the position rows' get_rows output, next to the token rows (the allocator's trace of the gpt2
                # smoke model on the CUDA stand-in: `pos_embd` in the space `node_1` left, 4.6 MiB, not 4.1)
                blocks += self.embd_block
            label = "embeddings input + get_rows"
        return blocks, label

    def _host_graph_inputs(self, runs: bool, n_copies: int) -> tuple[Term, ...]:
        """The sparse and compressed attentions' graph inputs where the GPUs run the layers that read them:
        allocated on the host, which fills them, and copied to the GPUs, `n_copies` times with pipeline
        parallelism. DeepSeek-V4's (`Dsv4Attention.inputs`: the masks, the top-k leaves, the indexer's rotation;
        the allocator's peak on the smoke model over two CUDA stand-ins: the three masks and the rotation four
        times each next to the embeddings inputs, 11.37 MiB), the k-pool selection's and MiniMax-M3's."""
        if runs:
            return ()
        dsv4, kpool = self.dsv4(self.trunk), self.kpool_selection(self.trunk)
        out: list[Term] = [] if dsv4 is None else [Dsv4Inputs(dsv4, copies=n_copies)]
        if kpool is not None:
            # the k-pool selection's inputs likewise (the glm5-next smoke model at c512: `leaf_8`, `leaf_9` and
            # the 1.51 MiB `leaf_10` on the host, 3.72 MiB)
            out.append(KpoolInputs(kpool, copies=n_copies))
        msa = self._msa_mask(self.trunk)
        if msa is not None:
            # MiniMax-M3's block-sparse inputs (`llm_graph_input_msa`, `_msa_mask` without the GPU's block)
            c = msa.c - self.embd_block
            out.append(
                Linear("block-sparse inputs", Affine(n_copies * I32 * self.inputs.n_stream, 0, n_copies * c))
            )
        return tuple(out)

    def _lightning_decay(self, host_layers: list[int]) -> int:
        """The host's copy of the lightning attention's graph input `diag_decay_exp` `[n_st, n_st, n_head,
        n_seqs]` f32 (src/models/minimax-01.cpp), where the GPUs run the lightning layers: graph inputs are
        allocated on the host and copied to the GPU that reads them (the allocator's peak on the MiniMax-01 smoke
        model on the CUDA stand-in at c512: the 2 MiB input next to the embeddings inputs, 4.53 MiB); with the
        host running them it is in their transient (`_recurrent_terms`)."""
        if not self.profile.traits.graph.lightning:
            return 0
        lightning = [lp for lp in self.profile.layers if lp.is_recurrent and lp.index not in host_layers]
        if not lightning or len(lightning) < sum(1 for lp in self.profile.layers if lp.is_recurrent):
            return 0
        n_st = self.n_tok // max(1, self.inputs.n_seqs)
        return F32 * n_st * n_st * max(lp.n_head for lp in lightning) * self.inputs.n_seqs

    def host_plan(self) -> DevicePlan:
        """The compute plan of the host."""
        host_layers = self.by_dev.get(None, [])
        host_flayers = self.ffn_by_dev.get(None, [])
        runs = bool(host_layers or host_flayers)
        n_copies = PIPELINE_COPIES if self.inputs.pipeline_parallel and not runs else 1
        m = self.masks(self.trunk)
        # the small graph inputs: token ids of the plain and the mixed batch (i32), the mixed batch's slots (i64),
        # positions, K/V row indices and the output ids
        host_small = self.small_inputs(self.trunk) + I32 * self.n_out + (2 * I32 + I64) * self.n_tok
        ffn_only = runs and not host_layers and not self.profile.is_moe
        # only routed experts (`-cmoe`, `-ncmoe`, `-ot exps=CPU`): the graph inputs stay as with dense FFNs; the
        # other two blocks and the FFN input's copy are freed by the first experts' peak (the allocator's live
        # tensors on Qwen3-Next-80B-A3B over two RPC devices, `-cmoe`: the embeddings input, a one-block hole, the
        # mask, the router's copied argsort, a hole where gate and up were, the GLU output and the down outputs)
        experts_only = runs and not host_layers and self.profile.is_moe and self.profile.moe is not None
        blocks, label = self._host_blocks(
            runs, bool(host_layers), ffn_only, experts_only, n_copies, host_small
        )
        # the host's masks are graph inputs the GPUs copy from: they are freed early only when the host runs the
        # last layer
        host_last = bool(self.trunk) and self.compute_dev[self.trunk[-1]] is None
        kq, ffn, ssm = self._host_transient(host_layers, host_flayers, m, n_copies, host_small, host_last)
        if ffn_only or experts_only:
            kq = (Affine(c=(HOST_INPUT_BLOCKS - HOST_GRAPH_INPUT_BLOCKS) * self.embd_block),)
        inputs: tuple[Term, ...] = (
            Linear("masks", Affine(n_copies * m.a_base, n_copies * m.a_swa, n_copies * m.c)),
            Fixed("v_idxs", n_copies * self.v_idxs(self.trunk)),
            Fixed("token ids, positions, indices", host_small if n_copies == 1 else 0),
            Fixed(label, blocks),
            Fixed("Mamba states' copies", self._host_state_copies()),
            Fixed("lightning decay input", n_copies * self._lightning_decay(host_layers)),
            *self._graph_inputs(host_layers),
            *self._host_graph_inputs(runs, n_copies),
        )
        logits, output = self._host_output(runs, host_layers if host_last and n_copies == 1 else None)
        return DevicePlan(
            device=None,
            layer_phase=runs,
            inputs=nonzero(inputs),
            attention=self._attention(host_layers, kq, (), ssm),
            ffn=ffn,
            logits=logits,
            output=nonzero(output),
            under=(
                *self._host_scores(),
                *nonzero((Fixed("experts' down products", self.host_expert_down()[1]),)),
            ),
        )

    def _host_state_copies(self) -> int:
        """The host's copies for Mamba-2 layers whose recurrent states are in host memory while a GPU runs the
        rest of them (`mamba2_host_state_copies`): the states stay on the host with `-nkvo` or with the layer's
        weights there (llama-memory-recurrent.cpp puts a layer's states on its device, or on the host without KV
        offload), and op offload runs the host layers on the first GPU but their scan (`compute_devices`)."""
        if not self.gpu_vendors:
            return 0
        state_host = scan_host = False
        for il in self.trunk:
            if not self.profile.layers[il].is_recurrent:
                continue
            on_host = self.placement.layer_device[il] is None
            gpu_runs = self.compute_dev[il] is not None
            state_host = state_host or (gpu_runs and (on_host or not self.inputs.kv_offload))
            scan_host = scan_host or (gpu_runs and on_host)
        if not state_host:
            return 0
        gdn = gdn_host_conv_copy(self.profile, self.n_tok, self.inputs.n_seqs)
        if gdn:
            # in the space of the two embeddings' blocks freed above the mask (`gdn_host_conv_copy`)
            return max(0, gdn - (HOST_INPUT_BLOCKS - HOST_GRAPH_INPUT_BLOCKS) * self.embd_block)
        return mamba2_host_state_copies(self.profile, self.n_tok, self.inputs.n_seqs, scan_host)

    def _host_transient(
        self,
        host_layers: list[int],
        host_flayers: list[int],
        m: Affine,
        n_copies: int,
        host_small: int,
        host_last: bool,
    ) -> tuple[tuple[Affine, ...], tuple[Term, ...], SsmReplay | None]:
        """The host's attention live sets, its FFN terms and its replayed Mamba blocks."""
        freed = Affine(
            n_copies * m.a_base, n_copies * m.a_swa, n_copies * m.c + (host_small if n_copies == 1 else 0)
        )
        if not host_last:
            freed = Affine()
        vi = n_copies * self.v_idxs(self.trunk) if host_last else 0
        glu_gpu = [il for il in host_flayers if il in self.host_glu_offloaded]
        host_flayers = [il for il in host_flayers if il not in self.host_glu_offloaded]
        ffn_rest, holes = self.ffn_holes(host_layers, host_flayers, freed, vi)
        replayed, ssm_ops, ssm_hole = self.ssm_after(host_layers, freed, vi)
        moe = self.profile.moe
        if host_flayers and not host_layers and self.profile.is_moe and moe is not None:
            # the router's argsort [n_expert, n_tok] (i32; the top-k is a view of it) is copied in for the experts;
            # llama4's router-weighted input is a copy here too, freed once gate and up have read it (the
            # allocator's peak on Llama-4-Scout with `-cmoe`: the two masks, gate, up and the GLU output above the
            # embeddings input and a one-block hole)
            ffn_rest = max(
                f - held for f, _, held in (ffn_layer(self.profile, il, self.n_tok) for il in host_flayers)
            )
            ffn_rest += I32 * self.n_tok * moe.n_expert
            holes = ()
        ffn_rest = max([ffn_rest] + [gate_up_outputs(self.profile, il, self.n_tok) for il in glu_gpu])
        lead = self._ssm_lead(host_layers, m) if ssm_ops and host_last and n_copies == 1 else None
        ssm = self._ssm_replay(host_layers, ssm_ops, ssm_hole, lead)
        attends = [il for il in host_layers if il not in self.host_mla_offloaded]
        return self.kq(attends, replayed), self._ffn_terms(ffn_rest, holes), ssm

    def _host_output(self, runs: bool, last_layers: list[int] | None) -> tuple[Term | None, tuple[Term, ...]]:
        """The host's logits: a fork's output phase on its own (the logits with the output norm's block), else
        the logits in the transient's place where larger, over the freed masks of the last layers when the host
        runs them (`last_layers`)."""
        if self.out_dev is not None:
            return None, ()
        if self.inputs.fork_attention and runs:
            # ik_llama.cpp: the masks and activations are freed before the output layer, whose logits sit with the
            # output norm's block alone (the allocator's peak list of ik's output phase)
            return None, (Fixed("logits", self.logits), Fixed("output norm", self.embd_block))
        room = self._logits_room(last_layers) if last_layers is not None else ()
        return LogitsOnTop(self.logits, room), ()

    def _logits_room(self, layers: list[int]) -> tuple[Affine, ...]:
        """The masks of `layers` (one per cache the attention layers read: base and SWA), each a block the logits
        can take once it is freed (`terms.LogitsOnTop`)."""
        if not self.profile.has_memory:
            return ()
        base, swa = attn_layers(self.profile, layers)
        one = self.mask_elt * self.n_tok
        return tuple(a for a, used in ((Affine(a_base=one), base), (Affine(a_swa=one), swa)) if used)

    def _ssm_lead(self, layers: list[int], m: Affine) -> SsmLead | None:
        """The host's space around its last attention layer for `SsmReplay` (flash attention, a dense
        FFN or none in that layer, the Mamba blocks' input not kept in the input's block; jamba's Mamba-1 blocks
        with or without flash attention, `_jamba_lead`); None elsewhere."""
        graph = self.profile.traits.graph
        if graph.residual_into_input and not graph.plamo2_mamba:
            return self._jamba_lead(layers, m)
        if not self.fa or graph.residual_into_input or graph.plamo2_mamba:
            return None
        base, swa = attn_layers(self.profile, layers)
        if swa or not base:
            return None
        last = max(base)
        lp = self.profile.layers[last]
        if lp.is_moe:
            return None
        names = {t.name.rsplit(".", 2)[-2] for t in self.profile.tensors if t.layer == last}
        gated = "ffn_gate" in names
        if lp.n_ff and ("ffn_up" not in names or "ffn_gate_up" in names):
            return None
        v_rot = self.v_rot_bytes[0]
        return SsmLead(
            mask=m,
            low=(2 * I32 + I64) * self.n_tok + self.rot_bytes[0] - v_rot,
            v_rot=v_rot,
            idxs=2 * I64 * self.n_tok,
            ffn=F32 * lp.n_ff * self.n_tok if lp.n_ff else 0,
            gated=gated,
        )

    def _jamba_lead(self, layers: list[int], m: Affine) -> SsmLead | None:
        """Jamba's graph inputs around its last attention layer (`SsmReplay._ssm_after_residual`): the mixed
        batch's tokens (i32) and slots (i64), no positions (src/models/jamba.cpp uses no RoPE), the rotations, K's
        row indices and V's (i64 per token with flash attention, per element without it, `v_idxs`)."""
        ssm = self.profile.ssm
        base, swa = attn_layers(self.profile, layers)
        if ssm is None or ssm.n_group or swa or not base:
            return None
        v_rot = self.v_rot_bytes[0]
        return SsmLead(
            mask=m,
            low=(I32 + I64) * self.n_tok + self.rot_bytes[0] - v_rot,
            v_rot=v_rot,
            idxs=I64 * self.n_tok + (I64 * self.n_tok if self.fa else self.v_idxs(layers)),
            ffn=0,
            gated=False,
            residual=True,
            fa=self.fa,
            tokens=I32 * self.n_tok,
            out_ids=I32 * self.n_out,
        )
