"""Compute buffers: what llama.cpp's scheduler reserves per backend (`llama_context::sched_reserve`).

The reserve builds the prompt-processing graph for `n_tok = min(n_ctx, n_ubatch)` tokens, `n_seq_max` sequences and
`n_out = min(n_tok, n_outputs_max)` outputs, with every KV view spanning the whole cache. The graph allocator then
reuses memory between tensors whose lifetimes do not overlap, so the buffer is the peak of the live set, not the sum.

This module names the tensors that make up that peak (all sizes in bytes, f32 activations unless said otherwise):

* graph inputs, allocated in the host backend and copied to each GPU that uses them: the KQ masks
  (`[n_kv, n_tok]`, f16 with flash attention, f32 without; one per distinct mask: base cache and SWA cache), the
  `v_idxs` of the transposed V cache without flash attention (`n_tok x n_embd_v_gqa` int64, one per cache; none
  for MLA, whose V is a view of K), and the small ones (token ids, positions, K/V row indices, output ids). A mask
  and its indices are freed after the last layer that reads them: that layer's FFN puts its first intermediate in
  their space when it fits;
* `[n_embd, n_tok]` blocks: on the backend that runs the first layer five are live at the peak (the embeddings
  input and the token-embedding rows, which stay allocated, the residual stream and the two-block hole the FFN
  norm output leaves; three without the mixed-batch inputs, `NO_MIXED_BATCH_BLOCKS`); a GPU that receives the
  hidden state from another device holds two;
* the largest transient of one layer, which never coexists with the logits: the FFN intermediates (gate, up and
  the GLU output `[n_ff, n_tok]`; MoE: up, gate, GLU `[n_ff_exp, n_used, n_tok]` and the experts' down outputs
  `[n_embd, n_used, n_tok]`, which take gate's and up's space when they fit; no gate: the up projection only),
  the attention (Q and the flash-attention output, or Q, K and V before they are stored, or a fused QKV output;
  without flash attention the KQ scores `[n_kv, n_tok, n_head]`, softmax in place), a Mamba block (input
  projection, conv output, then the conv input or the scan output in the same space), a gated delta net's layer
  (`_gdn_transient`), a lightning-attention layer, the DSA indexer's queries with the compressed query, or the
  indexer query projection of DeepSeek-V4, qwen4exp and glm5-next (`GraphTraits.indexer_q_copies` in the architecture registry);
* where the layout depends on which freed block a tensor fits, a few allocations are replayed through the
  allocator's best fit (`_BestFit`, ggml-alloc.c): the absorbed MLA query of DeepSeek-V2/V3
  (`_absorbed_mla_attention`) and the Mamba blocks after a device's last attention layer, over the freed masks
  (`_mamba_ops`);
* hyper-connection models: their residual streams `[n_embd x hc, n_tok]` (`GraphTraits.hc_streams`) next to the blocks;
* sparse and compressed attention, each with its graph inputs and its peak as a function of the cells: the DSA
  lightning indexer's score and top-k (`_IndexerScores`), DeepSeek-V4's compressed attention (`_Dsv4Attention`),
  MiniMax-M3's block-sparse mask per stream (`_msa_mask`) and the k-pool selection of qwen4exp and glm5-next
  (`_KpoolSelection`);
* the logits `[n_vocab, n_out]` on the output layer's device, with one block (five on the first backend);
* with `--op-offload` and `n_ubatch >= 32`, on the first GPU of a backend that offloads ops (CUDA, Vulkan, SYCL;
  not RPC): the copy of the largest group of host-resident matrix weights one layer multiplies;
* CUDA only, with a quantized K or V cache and flash attention: the f16 copies of one layer's whole K and V views
  the FA kernel allocates (`ggml_cuda_flash_attn_ext_get_alloc_size`);
* MLA without flash attention: the contiguous copy of V (`n_kv x kv_lora_rank`, K cache type);
* pipeline parallelism: four copies of every graph input on the host and of every split input on each GPU, never
  freed, below the rest of the graph (see `PIPELINE_COPIES`).

Measured: single-backend CPU dry runs of 128 architectures and of published-shape models, and two loopback RPC
servers as extra devices (layer splits, overrides, pipeline parallelism); the placement of the terms was checked
against the graph allocator's debug list of live tensors at each peak. Read from the source only, no GPU being
available: the CUDA-specific parts (op-offload weight copies, FA f16 copies, the 128-byte alignment of CUDA
buffers). See `docs/accuracy.md`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from fitplan.core.base.cache import AnchoredCache
from fitplan.core.base.devices import Vendor
from fitplan.core.gguf.ggml_types import get_type, type_id
from fitplan.core.memory.context import compressed_cells
from fitplan.core.memory.fork_graph import ForkGraph
from fitplan.core.memory.weights import WeightPlacement, row_bytes
from fitplan.core.model.archs import DSV4_CSA_RATIO, DSV4_HCA_RATIO, KpoolGraph
from fitplan.core.model.profile import LayerKind, LayerProfile, MlaParams, ModelProfile, TensorRole

F32 = 4
F16 = 2
I32 = 4
I64 = 8
#: `ggml-backend.cpp`: ops whose weight is on the host go to the GPU only for batches of at least 32 tokens.
OP_OFFLOAD_MIN_BATCH = 32
#: Activation blocks `[n_embd, n_tok]` on the backend that runs the first layer: the embeddings input and the
#: token-embedding rows (kept allocated through the graph), the residual stream (the FFN input) and the two-block
#: hole the FFN norm output leaves (FFN_HOLE_BLOCKS); the CPU dry runs show exactly this for dense and MoE models.
RESIDUAL_BLOCKS = 5
#: Architectures without mixed-batch inputs (`GraphTraits.no_mixed_batch`, src/llama-arch.cpp
#: `llm_arch_supports_mixed_batch`): the embeddings input, the FFN input and the one-block hole the freed
#: token-embedding rows leave, into which the FFN norm output goes (the allocator's peak on the cogvlm smoke model).
NO_MIXED_BATCH_BLOCKS = 3
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


def kv_type_id(name: str) -> int:
    """The ggml type of a mainline cache type name ("q8_0")."""
    return type_id(name)


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
    n_seqs: int = 1  # sequences in the reserved batch (n_seq_max): recurrent states are per sequence
    pipeline_parallel: bool = (
        False  # more than one device, everything offloaded, no overrides (llama-context.cpp)
    )
    n_stream: int = 1  # KV streams (n_seq_max without a unified cache): n_kv_* are cells per stream
    # a fork's own attention graph (ik_llama.cpp: MLA per -mla mode, -amb head chunks), with the output layer
    # reserved for every token and the host's output phase on its own; None = mainline's graph
    fork_graph: ForkGraph | None = None
    ik_amb_mib: int = 0
    ik_mla_mode: int = 3
    # ik_llama.cpp: the -ctk type as ik names it (q8_KV keeps its own row header); "" = cache_type_k
    ik_type_k: str = ""

    @property
    def ik_attention(self) -> bool:
        return self.fork_graph is not None


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


#: Blocks of `[n_embd, n_tok]` freed just before the FFN (the FFN norm output and its neighbour) that form one hole:
#: an FFN intermediate no larger than this is placed there instead of at the end of the buffer.
FFN_HOLE_BLOCKS = 2


def _residual_blocks(profile: ModelProfile) -> int:
    """`[n_embd, n_tok]` blocks in the layer phase of the backend that runs the first layer."""
    return NO_MIXED_BATCH_BLOCKS if profile.traits.graph.no_mixed_batch else RESIDUAL_BLOCKS


def _below_logits(profile: ModelProfile, il: int, n_tok: int) -> int:
    """Bytes that stay under the logits on a later GPU whose last layer is a MoE with a shared expert (read from
    the allocator's trace of deepseek-v2-lite split over two devices).

    The shared expert reads the FFN norm output after the routed experts, so the FFN input and the norm output
    stay live while the sum of the routed experts is allocated: no freed block below fits it, and it lands right
    above the experts' down outputs `[n_embd, n_used, n_tok]`, which took the space of gate and up (the rest of
    that space joins the free end of the buffer once the GLU output above it is freed). The residual, the output
    norm and the logits then follow in that sum's place. Under them: the two blocks, the router's probabilities
    and top-k indices `[n_expert, n_tok]` and weights `[n_used, n_tok]`, and the down outputs. Without a shared expert (gpt-oss, Qwen3-MoE) the
    norm output is freed after up and the sum takes its place; llama4's router-weighted input leaves a block-sized
    hole too.
    """
    moe = profile.moe
    lp = profile.layers[il]
    if not (lp.is_moe and moe is not None) or profile.traits.graph.weight_before_ffn:
        return 0
    if il not in _layer_shapes(profile).shexp:
        return 0
    used = lp.n_expert_used or moe.n_expert_used
    up = F32 * n_tok * used * (moe.n_ff_exp or lp.n_ff)
    down = F32 * n_tok * used * profile.n_embd
    if down > 2 * up:
        # the down outputs go above the GLU output and gate + up leave a hole the sum can take (Qwen3-Next);
        # where the logits then go is not modelled (granite-4.0-h-tiny: above the down outputs all the same)
        return 0
    router = 2 * F32 * n_tok * moe.n_expert + F32 * n_tok * used
    return 2 * F32 * n_tok * profile.n_embd + router + down


def _mamba2_split_below_logits(profile: ModelProfile, layers: list[int], ffn_here: bool, n_tok: int) -> int:
    """Bytes under the logits on a later GPU of a Mamba-2 MoE hybrid that runs a Mamba layer ahead of an
    attention layer (read from the allocator's peaks of granite-4.0-h-tiny split over two RPC devices, with a
    `ggml-alloc.c` built with GGML_ALLOCATOR_DEBUG; 0 elsewhere).

    The Mamba layers free zero-byte tensors (the empty `rs_s_copy` view of the extra recurrent states, a zero-byte
    node after the scan), and `ggml_dyn_tallocr_free_bytes` inserts them as free blocks; once the list is out of
    order a freed region no longer merges into the buffer's free end, so the free end stays where the last layer's
    FFN left it and the logits go above that layer's tensors: the FFN input, the norm output and the one-block
    hole (blocks `[n_embd, n_tok]`), then the experts' gate, up and GLU output `[n_ff_exp, n_used, n_tok]` and the
    down outputs `[n_embd, n_used, n_tok]` above them, which do not fit into gate and up (`-ngl 20`, layers 30-39
    on the output GPU: the logits at 45.04 MiB). With the experts on the host only the down outputs copied back for
    the experts' sum are above the blocks (`-cmoe`: 27.04 MiB). Where the device's first layer is the attention
    layer, or it runs none, the logits stay next to the last blocks (layers 35-39 and 37-39: 9.29 MiB, within a
    block of the one counted with the logits; not modelled)."""
    moe, ssm = profile.moe, profile.ssm
    if moe is None or ssm is None or not ssm.n_group or not profile.traits.graph.mamba_scan or not layers:
        return 0
    lp = profile.layers[layers[-1]]
    first_attn = next((i for i, il in enumerate(layers) if profile.layers[il].has_kv), None)
    if (
        not lp.is_moe
        or first_attn is None
        or not any(profile.layers[il].is_recurrent for il in layers[:first_attn])
    ):
        return 0
    used = lp.n_expert_used or moe.n_expert_used
    up = F32 * n_tok * used * (moe.n_ff_exp or lp.n_ff)
    down = F32 * n_tok * used * profile.n_embd
    if down <= 2 * up:
        return 0  # the down outputs fit into gate and up (`_below_logits`)
    # the out block the logits are counted with is the FFN input's; the norm output and the hole are two more
    return FFN_HOLE_BLOCKS * F32 * n_tok * profile.n_embd + (3 * up if ffn_here else 0) + down


def _routed_sum_inputs(profile: ModelProfile, il: int, n_tok: int) -> int:
    """Bytes under the logits on a GPU that holds the output layer and no block (`-ngl 1`), when the last block is a
    MoE without a shared expert (read from the allocator's traces of qwen3-30b-a3b and gpt-oss-20b).

    The ops after the experts' down projection carry no weights, so the scheduler runs them with the output
    layer: the down outputs `[n_embd, n_used, n_tok]`, the router weights `[n_used, n_tok]` and the FFN input are
    copied in, and the sum of the experts (then the residual, the output norm and the logits in its place) lands
    above them. A shared expert's matrix keeps the sum where the experts ran.
    """
    moe = profile.moe
    lp = profile.layers[il]
    if not (lp.is_moe and moe is not None) or il in _layer_shapes(profile).shexp:
        return 0
    used = lp.n_expert_used or moe.n_expert_used
    return F32 * n_tok * (used * profile.n_embd + used + profile.n_embd)


def _ffn_transient(
    profile: ModelProfile, layers: list[int], n_tok: int, v_rot: frozenset[int] = frozenset()
) -> int:
    """Largest FFN intermediate set of the given layers, f32 (see `_ffn_layer`)."""
    return max((_ffn_layer(profile, il, n_tok, il in v_rot)[0] for il in layers), default=0)


def _ffn_layer(profile: ModelProfile, il: int, n_tok: int, v_rot: bool = False) -> tuple[int, int, int]:
    """One layer's FFN intermediate set, its first (largest-shape) intermediate and the input it holds through the
    experts (llama4's router-weighted copy of the FFN input), bytes f32.

    Dense: gate, up and the GLU output `[n_ff, n_tok]` are live together (the down projection comes after gate and
    up are freed). MoE: up, gate, GLU output `[n_ff_exp, n_used, n_tok]` and the experts' down projections
    `[n_embd, n_used, n_tok]`. The last of them to be allocated goes into the two-block hole the FFN norm leaves
    when it fits there (small FFNs), so it adds nothing.

    `v_rot`: the layer's attention output is rotated back (`_hadamard_rotations`), which leaves one block of the
    hole: the output chain (flash attention, the rotation's product, the output projection with the residual added
    in place) has one more block-sized tensor, so the FFN input lands next to the FFN norm's block instead of in a
    block of its own (the allocator's trace on the llama smoke model with q8_0 caches: `ffn_inp-0` right above
    `norm-0`, and the GLU output above gate and up, where with f16 caches it takes the norm's two freed blocks).
    """
    moe = profile.moe
    graph = profile.traits.graph
    hole = 0 if graph.no_ffn_hole else FFN_HOLE_BLOCKS * profile.n_embd
    if graph.no_mixed_batch:
        # the FFN norm output takes the one-block hole of the token-embedding rows (NO_MIXED_BATCH_BLOCKS): once
        # it is freed after up, that block is the only space under the FFN (the cogvlm smoke model's peak: gate,
        # up and the GLU output above `ffn_inp`)
        hole = profile.n_embd
    if graph.residual_into_input:
        # the residual takes the layer input's block: only the FFN norm's own block is freed under the FFN (the
        # allocator's peak on the lfm2 smoke model at c4096: gate in the freed mask, up and the GLU output on top)
        hole = profile.n_embd
    above = 0
    if v_rot and hole and not graph.embd_skip:
        if graph.parallel_attn_ffn:
            # the attention output that waits for the FFN is allocated above the blocks, not in the hole (the
            # command-r smoke model with q8_0 caches: `node_39` between `node_2` and gate, one block more)
            above = profile.n_embd
        else:
            hole -= profile.n_embd
    if graph.parallel_attn_ffn:
        # the attention output waits for the FFN (both read the same norm output) in one block of the hole: the
        # allocator's peak on the command-r smoke model has it there (node_30) and gate, up and the GLU output on top
        hole -= profile.n_embd
    skip_in_hole = graph.embd_skip and bool(hole)
    if skip_in_hole:
        # the skip block (talkie's `embd_skip`, counted with the residual blocks) sits in one block of the hole:
        # the allocator's peak on the talkie smoke model (src/models/talkie.cpp, c512 with flash attention) has
        # `embd` next to the freed `ffn_norm-0` and gate, up and the GLU output on top, 5.27 MiB
        hole -= profile.n_embd
    lp = profile.layers[il]
    held = 0
    if graph.dense_ffn_only and il not in _layer_shapes(profile).dense_up:
        return 0, 0, 0  # the graph calls the dense FFN with no matrices: nothing but an in-place activation
    if lp.is_moe and moe is not None:
        used = lp.n_expert_used or moe.n_expert_used
        # expert_feed_forward_length, else feed_forward_length (Mixtral-style GGUFs: llama.cpp uses n_ff)
        n_ff_exp = moe.n_ff_exp or lp.n_ff
        up, down = used * n_ff_exp, used * profile.n_embd
        # the experts' down outputs are allocated after gate and up are freed: they go into that space (two
        # adjacent up-sized blocks) or into the FFN norm's hole when they fit, else above the GLU output
        f, first = 3 * up + (0 if down <= max(hole, 2 * up) else down), up
        if il in _layer_shapes(profile).gate_up_exps:
            # one fused gate_up product `[2 n_ff_exp, n_used, n_tok]` (`ffn_gate_up_exps`, build_moe_ffn's merged
            # path): the first intermediate is both (the cohere2moe smoke model's peak: ffn_moe_gate_up-1, 3 MiB,
            # above the blocks where the freed 1 MiB of masks cannot take it, then the GLU output)
            first = 2 * up
        shared = moe.n_ff_shexp * moe.n_expert_shared
        if 3 * shared > f:
            f, first = 3 * shared, shared
        if graph.weight_before_ffn:
            # the router-weighted input [n_embd, n_used, n_tok] feeds gate and up
            held = used * profile.n_embd
    elif il in _layer_shapes(profile).gated:
        f, first = 3 * lp.n_ff - (lp.n_ff if lp.n_ff <= hole else 0), lp.n_ff
    else:
        # no gate (build_ffn without `gate`): only the up projection `[n_ff, n_tok]`, its bias, scale and
        # activation computed in place; it goes into the hole when it fits
        f = first = 0 if lp.n_ff <= hole else lp.n_ff
    if skip_in_hole:
        f = max(0, f - profile.n_embd)  # the skip block is in the device's blocks already, inside the hole
    return F32 * n_tok * (f + held + above), F32 * n_tok * first, F32 * n_tok * held


@dataclass(frozen=True, slots=True)
class _LayerShapes:
    """Per-layer graph facts read from the tensor list (cached per profile)."""

    # dense FFN with a gate: `ffn_gate`, or `ffn_up` holding gate and up (2 x n_ff rows)
    gated: frozenset[int]
    qkv_rows: dict[int, int]  # fused `attn_qkv` output width per layer
    dense_up: frozenset[int] = frozenset()  # layers with a dense `ffn_up` matrix
    shexp: frozenset[int] = frozenset()  # layers with a shared expert (`ffn_up_shexp`)
    shexp_ff: int = 0  # the widest shared expert's rows (`ffn_up_shexp`; llama4 declares no such length)
    gate_up_exps: frozenset[int] = frozenset()  # layers with fused expert gate and up (`ffn_gate_up_exps`)


#: Per profile (shared by the estimator's threads).
_SHAPES: AnchoredCache[_LayerShapes] = AnchoredCache(16)


def _layer_shapes(profile: ModelProfile) -> _LayerShapes:
    return _SHAPES.get_or_compute(id(profile), (profile,), lambda: _compute_layer_shapes(profile))


def _compute_layer_shapes(profile: ModelProfile) -> _LayerShapes:
    gated: set[int] = set()
    qkv: dict[int, int] = {}
    up: set[int] = set()
    shexp: set[int] = set()
    gate_up_exps: set[int] = set()
    shexp_ff = 0
    for t in profile.tensors:
        il = t.layer
        if il is None or il >= len(profile.layers) or len(t.shape) < 2:
            continue
        if t.name.endswith(".ffn_up_shexp.weight"):
            shexp.add(il)
            shexp_ff = max(shexp_ff, t.shape[1])
        if t.name.endswith(".ffn_up.weight"):
            up.add(il)
        if t.name.endswith(".ffn_gate_up_exps.weight"):
            gate_up_exps.add(il)
        if ".ffn_gate." in t.name or ".ffn_gate_up." in t.name:
            gated.add(il)
        elif (
            t.name.endswith(".ffn_up.weight")
            and profile.layers[il].n_ff
            and t.shape[1] >= 2 * profile.layers[il].n_ff
        ):
            gated.add(il)  # fused gate + up (phi3, chatglm, glm4): the GLU splits one [2 n_ff] output
        elif t.name.endswith(".attn_qkv.weight"):
            qkv[il] = t.shape[1]
    return _LayerShapes(
        frozenset(gated), qkv, frozenset(up), frozenset(shexp), shexp_ff, frozenset(gate_up_exps)
    )


def _ssm_transient(profile: ModelProfile, n_tok: int, n_seqs: int, attention: bool = True) -> int:
    """Live set of one Mamba block during the selective scan, f32 (src/models/graph-context-mamba.cpp).

    Mamba-2 (`ssm.group_count` > 0): the input projection zxBCdt `[2 d_inner + 2 n_group d_state + n_head, n_tok]`
    and the conv output `[channels, n_tok]` (channels = d_inner + 2 n_group d_state) stay live through the scan;
    before them the conv input (conv state + xBC, `[d_conv - 1 + n_tok / n_seqs, channels, n_seqs]`), freed after
    the convolution, and after it the scan output (y `[d_inner, n_tok]` plus the final states
    `[d_state, d_inner, n_seqs]`) take the same space. Mamba-1: zx `[2 d_inner, n_tok]` and the conv output
    `[d_inner, n_tok]`, then the conv input, or x_db `[dt_rank + 2 d_state, n_tok]`, dt `[d_inner, n_tok]` and the
    scan output.
    """
    ssm = profile.ssm
    if ssm is None or not profile.traits.graph.mamba_scan or not ssm.d_inner:
        return 0
    scan = n_tok * ssm.d_inner + ssm.d_state * ssm.d_inner * n_seqs
    if ssm.n_group:
        channels = ssm.d_inner + 2 * ssm.n_group * ssm.d_state
        in_proj = 2 * ssm.d_inner + 2 * ssm.n_group * ssm.d_state + ssm.dt_rank
        conv_in = (ssm.d_conv - 1 + n_tok // max(1, n_seqs)) * channels * n_seqs
        # The conv input is freed after the convolution; the scan output takes its place when it fits there,
        # else it goes above and the conv input's space stays a hole. After the scan, the contiguous copy of z
        # `[d_inner, n_tok]` (for the gated output) needs a free block: what the scan left of the conv input's
        # space, or, on a backend with attention layers, the space of the masks freed after the last of them.
        z = ssm.d_inner * n_tok
        if scan > conv_in:
            floats = in_proj * n_tok + channels * n_tok + conv_in + scan
        else:
            floats = in_proj * n_tok + channels * n_tok + conv_in
            if not attention and conv_in - scan < z:
                floats += z
    else:
        conv_in = (ssm.d_conv - 1 + n_tok // max(1, n_seqs)) * ssm.d_inner * n_seqs
        x_db = (ssm.dt_rank + 2 * ssm.d_state) * n_tok
        rows_hole = F32 * profile.n_embd * n_tok + (I32 + I64) * n_tok
        if not attention and not profile.traits.graph.no_mixed_batch and F32 * x_db <= rows_hole:
            # no attention layer: x_db goes into the space of the mixed batch's token rows, tokens and slots,
            # freed after the first layer's input is assembled (the allocator's peak on the mamba smoke model at
            # c512: `node_32`, 0.504 MiB, at 0.50-1.01 MiB where `inp_mixed_embd` was; 7.77 MiB)
            x_db = 0
        x_db_dt = x_db + ssm.d_inner * n_tok
        floats = 2 * ssm.d_inner * n_tok + ssm.d_inner * n_tok + max(conv_in, x_db_dt + scan)
    return F32 * floats


#: One step of a replayed allocation sequence: (tensor name, bytes) allocates it, (tensor name, 0) frees it.
ReplayOp = tuple[str, int]


def _mamba_ops(profile: ModelProfile, n_tok: int, n_seqs: int) -> tuple[ReplayOp, ...]:
    """The allocations of one Mamba block in graph order (src/models/mamba-base.cpp, `build_mamba_layer` and
    `build_mamba2_layer`), f32 bytes; () for models without Mamba blocks. A freed tensor is (name, 0).

    Mamba-2: the conv states' rows, the input projection zxBCdt, the conv input (states + xBC), the conv output
    (bias and SiLU in place) in place of the conv input, dt, then `_mamba2_tail` from the scan on. Mamba-1: the
    same head with xz and the conv output x, then `_mamba1_tail`."""
    ssm = profile.ssm
    if ssm is None or not profile.traits.graph.mamba_scan or not ssm.d_inner:
        return ()
    if profile.traits.graph.plamo2_mamba:
        return _plamo2_mamba_ops(profile, n_tok, n_seqs)
    f, t, seqs = F32, n_tok, max(1, n_seqs)
    d_inner, d_state = ssm.d_inner, ssm.d_state
    # Mamba-2 convolves x, B and C (zxBCdt); Mamba-1 only x (xz)
    ch = d_inner + 2 * ssm.n_group * d_state
    in_proj = 2 * d_inner + 2 * ssm.n_group * d_state + ssm.dt_rank if ssm.n_group else 2 * d_inner
    head = (
        ("conv_rows", f * (ssm.d_conv - 1) * ch * seqs),
        ("in_proj", f * in_proj * t),
        ("conv_x", f * (ssm.d_conv - 1 + t // seqs) * ch * seqs),
        ("conv_rows", 0),
        ("conv", f * ch * t),
        ("conv_x", 0),
    )
    if ssm.n_group:
        return (*head, ("dt", f * ssm.dt_rank * t), *_mamba2_tail(profile, t, seqs))
    return (*head, *_mamba1_tail(profile, t, seqs))


def _mamba1_tail(profile: ModelProfile, t: int, seqs: int) -> tuple[ReplayOp, ...]:
    """A Mamba-1 block from x_db on (src/models/mamba-base.cpp, `build_mamba_layer`): x_db, then the scan's
    sources in `ggml_ssm_scan`'s order (ggml.c: s, x, dt, A, B, C; the graph is built depth-first through the
    sources, `ggml_visit_parents`): dt's norm (Jamba, FalconMamba) or contiguous copy and its projection, then B's
    and C's norms (the norms read x_db's views, which is freed after the last), the scan output (y and the final
    states; the scan reads the ubatch's states from the cache through the slot indices, no gathered copy), the
    gather of the other slots' states (`_extra_states`), z's contiguous copy, x D and y + x D in place of the conv
    output (its last reader), the gated output and the output projection. The allocator's list on the jamba smoke
    model with four slots at c512 (q4_0 caches): x_db in the freed mask's space, dt in the conv input's, the
    scan output on top of the conv output, 8.87 MiB."""
    ssm = profile.ssm
    assert ssm is not None
    f, d_inner, d_state = F32, ssm.d_inner, ssm.d_state
    normed = any(x.name.endswith(".ssm_dt_norm.weight") for x in profile.tensors)
    bc: tuple[ReplayOp, ...] = (("b_n", f * d_state * t), ("c_n", f * d_state * t)) if normed else ()
    return (
        ("x_db", f * (ssm.dt_rank + 2 * d_state) * t),
        ("dt_n", f * ssm.dt_rank * t),
        ("dt", f * d_inner * t),
        ("dt_n", 0),
        *bc,
        *((("x_db", 0),) if normed else ()),
        ("y_ssm", f * (d_inner * t + d_state * d_inner * seqs)),
        ("dt", 0),
        ("b_n", 0),
        ("c_n", 0),
        ("x_db", 0),
        *_extra_states(f * d_state * d_inner, seqs),
        ("z", f * d_inner * t),
        ("in_proj", 0),
        ("y_ssm", 0),
        ("gated", f * d_inner * t),
        ("z", 0),
        ("conv", 0),
        ("out", f * profile.n_embd * t),
    )


def _mamba2_tail(profile: ModelProfile, t: int, seqs: int) -> tuple[ReplayOp, ...]:
    """A Mamba-2 block from the scan on (src/models/mamba-base.cpp, `build_mamba2_layer`): the scan output (y and
    the final states), the gather of the other slots' states (`_extra_states`), z's contiguous copy, x D (a new
    tensor: the conv output has other views, so it cannot take its space; y + x D is computed in its place), the
    gated output, its grouped RMS norm (a new tensor: it reads a reshaped view) and the output projection. The
    allocator's lists on the granitehybrid and nemotron_h smoke models with four slots (c512, q4_0 caches): the
    scan output in the conv input's space, the 0.75 MiB of states in the masks' and z's copy on top, 10.90 MiB."""
    ssm = profile.ssm
    assert ssm is not None
    f, d_inner = F32, ssm.d_inner
    normed = any(x.name.endswith(".ssm_norm.weight") for x in profile.tensors)
    return (
        ("y_ssm", f * (d_inner * t + ssm.d_state * d_inner * seqs)),
        ("dt", 0),
        *_extra_states(f * ssm.d_state * d_inner, seqs),
        ("z", f * d_inner * t),
        ("in_proj", 0),
        ("x_d", f * d_inner * t),
        ("conv", 0),
        ("y_ssm", 0),
        ("gated", f * d_inner * t),
        ("z", 0),
        ("x_d", 0),
        *((("normed", f * d_inner * t), ("gated", 0)) if normed else ()),
        ("out", f * profile.n_embd * t),
    )


def _plamo2_mamba_ops(profile: ModelProfile, n_tok: int, n_seqs: int) -> tuple[ReplayOp, ...]:
    """PLaMo-2's Mamba block in graph order (src/models/plamo2.cpp, `build_plamo2_mamba_layer`): the conv states'
    rows, the input projection zx and its permuted contiguous copy, x's contiguous copy, the conv input and
    output, the B/C/dt projection, then the scan's sources in `ggml_ssm_scan`'s order (dt's norm and projection,
    then B's and C's norms: the graph is built depth-first through the sources, ggml.c `ggml_visit_parents`), the
    scan output, the gather of the other sequences' states (`_extra_states`), z's contiguous copy, x D (a new
    tensor: the conv output's views keep it from reusing their space; y + x D is computed in its place), the
    gated output and the output projection. The allocator's peaks on the plamo2 smoke model: c512 with flash
    attention, the conv output in the freed mask's space, the scan output in the input projection's, its permuted
    copy and z's copy on top, 8.02 MiB; c8192 with four slots at `-ub 2048` (q8_0 caches), the scan output (5 MiB)
    on top of the permuted copy, no freed block holding it, 31.16 MiB."""
    ssm = profile.ssm
    assert ssm is not None
    f, t, seqs = F32, n_tok, max(1, n_seqs)
    d_inner, d_state = ssm.d_inner, ssm.d_state
    dt_dim = max(64, profile.n_embd // 16)
    return (
        ("conv_rows", f * (ssm.d_conv - 1) * d_inner * seqs),
        ("in_proj", f * 2 * d_inner * t),
        ("in_proj_out", f * 2 * d_inner * t),
        ("in_proj", 0),
        ("x_split", f * d_inner * t),
        ("conv_x", f * (ssm.d_conv - 1 + t // seqs) * d_inner * seqs),
        ("conv_rows", 0),
        ("x_split", 0),
        ("conv", f * d_inner * t),
        ("conv_x", 0),
        ("x_bcdt", f * (2 * d_state + dt_dim) * t),
        ("dt_n", f * dt_dim * t),
        ("dt", f * ssm.dt_rank * t),
        ("dt_n", 0),
        ("b_n", f * d_state * t),
        ("c_n", f * d_state * t),
        ("x_bcdt", 0),
        ("y_ssm", f * (d_inner * t + d_state * d_inner * seqs)),
        ("dt", 0),
        ("b_n", 0),
        ("c_n", 0),
        *_extra_states(f * d_state * d_inner, seqs),
        ("z", f * d_inner * t),
        ("in_proj_out", 0),
        ("x_d", f * d_inner * t),
        ("conv", 0),
        ("y_ssm", 0),
        ("gated", f * d_inner * t),
        ("z", 0),
        ("x_d", 0),
        ("out", f * profile.n_embd * t),
    )


def _extra_states(state: int, n_seqs: int) -> tuple[ReplayOp, ...]:
    """The gather of the SSM states the ubatch leaves alone, right after the scan (src/llama-graph.cpp,
    `llm_graph_context::build_rs` with a custom row getter: `ggml_get_rows` of `s_copy_tail`, n_rs - 1 rows of
    `state` bytes, copied back into the cache and freed). At the reserve the recurrent memory is full, n_rs is its
    size, n_seq_max; the allocator's lists on the granitehybrid, nemotron_h and plamo2 smoke models: 0.25 MiB with
    two slots, 0.75 MiB with four, none with one."""
    if n_seqs <= 1:
        return ()
    return (("s_extra", state * (n_seqs - 1)), ("s_extra", 0))


def _replay(ops: tuple[ReplayOp, ...], holes: tuple[int, ...]) -> int:
    """The highest end `ops` reach above the base, with free blocks of `holes` below it (`_BestFit`)."""
    sim = _BestFit(holes)
    for name, size in ops:
        if size:
            sim.alloc(name, size)
        elif name in sim.live:
            sim.release(name)
    return sim.peak


def _hc_width(profile: ModelProfile) -> int:
    """Elements per token of one hyper-connection residual `n_embd x hc` (from `hc_attn_fn` / `hc_attn_down`,
    whose rows span all streams), 0 when the model has none (cached per profile)."""
    return _HC_WIDTH.get_or_compute(id(profile), (profile,), lambda: _find_hc_width(profile))


_HC_WIDTH: AnchoredCache[int] = AnchoredCache(16)


def _find_hc_width(profile: ModelProfile) -> int:
    for t in profile.tensors:
        if t.name.endswith((".hc_attn_fn.weight", ".hc_attn_down.weight")) and len(t.shape) > 1:
            return t.shape[0]
    return 0


def _indexer_q_rows(profile: ModelProfile) -> dict[int, int]:
    """Per layer, the rows of its indexer query projection (architectures with `GraphTraits.indexer_q_copies`)."""
    if not profile.traits.graph.indexer_q_copies:
        return {}
    out: dict[int, int] = {}
    for t in profile.tensors:
        if (
            t.layer is not None
            and t.name.endswith((".indexer.attn_q_b.weight", ".indexer.q_proj.weight"))
            and len(t.shape) > 1
        ):
            out[t.layer] = t.shape[1]
    return out


def _tensor_rows(profile: ModelProfile, suffix: str) -> dict[int, int]:
    """Per layer, the rows (output width) of its tensor named `blk.N<suffix>`."""
    return {
        t.layer: t.shape[1]
        for t in profile.tensors
        if t.layer is not None and t.name.endswith(suffix) and len(t.shape) > 1
    }


def _gdn_transient(profile: ModelProfile, n_tok: int, n_seqs: int) -> int:
    """Live set of a gated-delta-net layer when its fused op's output is allocated, bytes (f32).

    With head_k = `ssm.state_size`, num_k = `ssm.group_count`, num_v = `ssm.time_step_rank`, head_v = d_inner /
    num_v: the convolution output `[d_inner + 2 num_k head_k, n_tok]` (Q, K and V are views of it), the L2-normed
    Q and K repeated to num_v heads `[head_k, num_v, n_tok]` each (the normed ones themselves when num_k = num_v),
    beta and the gate's input `[num_v, n_tok]`, the recurrent state read from the cache `[head_v, head_v, num_v,
    n_seqs]` and the op's output: the attention output `[head_v, num_v, n_tok]` followed by the new state. The
    gate z `[d_inner, n_tok]` is computed after the op (it is read only by the gated norm). Measured with the
    allocator's list of live tensors: 44.12 MiB on Qwen3-Next-80B-A3B at `-ub 512` (16 + 8 + 8 + 2 + 10 MiB and
    two 64 KiB inputs), 3.26 MiB on the qwen35 smoke model.
    """
    ssm = profile.ssm
    if ssm is None or not profile.traits.graph.gated_delta_net or not (ssm.d_inner and ssm.dt_rank):
        return 0
    head_k, num_k, num_v = ssm.d_state, ssm.n_group, ssm.dt_rank
    head_v = ssm.d_inner // num_v
    state = head_v * head_v * num_v * n_seqs
    conv = (ssm.d_inner + 2 * num_k * head_k) * n_tok
    qk = 2 * head_k * num_v * n_tok
    return F32 * (conv + qk + 2 * num_v * n_tok + state + ssm.d_inner * n_tok + state)


def _gdn_output(profile: ModelProfile, n_tok: int, n_seqs: int) -> int:
    """The fused gated-delta-net op's output, the last tensor of `_gdn_transient`: the attention output
    `[head_v, num_v, n_tok]` followed by the new state `[head_v, head_v, num_v, n_seqs]`, bytes (f32)."""
    ssm = profile.ssm
    if ssm is None or not profile.traits.graph.gated_delta_net or not (ssm.d_inner and ssm.dt_rank):
        return 0
    head_v = ssm.d_inner // ssm.dt_rank
    return F32 * (ssm.d_inner * n_tok + head_v * head_v * ssm.dt_rank * n_seqs)


def _expert_copy_hole(
    profile: ModelProfile,
    layer_device: tuple[int | None, ...],
    ffn_dev: dict[int, int | None],
    gi: int,
    layers: list[int],
    n_tok: int,
) -> tuple[int, int, int]:
    """The hole a GPU's masks sit on when its routed experts run on the host: (bytes, layer, last attention layer).

    A layer whose experts run on the host (`-cmoe`, `-ncmoe`, `-ot exps=CPU`) and whose shared expert runs on the
    GPU has its experts' down outputs `[n_embd, n_used, n_tok]` (f32) copied back for the weighted sum. When the
    split that starts with that sum also runs the GPU's first attention layer, the copy and the mask are that
    split's inputs, allocated together: the mask lands above the copy, and once the sum has read the copy its
    space stays a hole under the mask until the last attention layer frees the mask. What the layers in between
    allocate goes into that hole while it fits, the rest above the mask (the allocator's live tensors on
    Qwen3-Next-80B-A3B over two RPC devices, `-cmoe`: the 40 MiB of `ffn_moe_down-2` at 16-56 MiB, the mask at
    56-64 MiB, layer 4's delta-net tensors at 16-50.3 MiB and its 10 MiB output at 68-78 MiB; `-ncmoe 1`: layer 1's
    gate, up and GLU output at 16-46 MiB and its 40 MiB of down outputs at 68-108 MiB).
    """
    base, swa = _attn_layers(profile, layers)
    att = sorted(base + swa)
    moe = profile.moe
    if not att or moe is None:
        return 0, -1, -1
    shexp = _layer_shapes(profile).shexp
    for il in range(att[0] - 1, -1, -1):
        if il >= len(layer_device) or layer_device[il] != gi:
            return 0, -1, -1  # the split starts with the layer input copied from another device
        if ffn_dev.get(il, gi) == gi:
            continue
        lp = profile.layers[il]
        if ffn_dev.get(il) is not None or not lp.is_moe or il not in shexp:
            return 0, -1, -1  # experts on another GPU, or no shared expert: not traced
        used = lp.n_expert_used or moe.n_expert_used
        return F32 * n_tok * used * profile.n_embd, il, att[-1]
    return 0, -1, -1


def _ffn_in_hole(profile: ModelProfile, il: int, n_tok: int, hole: int) -> int:
    """A layer's FFN intermediates over the hole under the masks (`_in_hole`): a MoE's gate, up and GLU output
    first, then the experts' down outputs when they do not go into gate and up's space (`_ffn_layer`)."""
    f = _ffn_layer(profile, il, n_tok)[0]
    lp, moe = profile.layers[il], profile.moe
    if lp.is_moe and moe is not None:
        used = lp.n_expert_used or moe.n_expert_used
        up = F32 * n_tok * used * (moe.n_ff_exp or lp.n_ff)
        down = F32 * n_tok * used * profile.n_embd
        if f == 3 * up + down:
            return _in_hole(3 * up, down, hole)
    return _in_hole(f, 0, hole)


def _shexp_only_ffn(profile: ModelProfile, layers: list[int], n_tok: int) -> int:
    """FFN intermediates on a GPU whose layers' routed experts run elsewhere: the shared expert runs there after
    the experts, its gate, up and GLU output `[n_ff_shexp, n_tok]` over the experts' sum `[n_embd, n_tok]` (the
    allocator's peak on Llama-4-Scout with `-cmoe`: `ffn_moe_out-2`, `ffn_gate-2`, `ffn_up-2`, `ffn_swiglu-2`);
    without a shared expert, the down outputs copied back for the weighted sum."""
    shapes = _layer_shapes(profile)
    moe = profile.moe
    out = 0
    for il in layers:
        lp = profile.layers[il]
        if not lp.is_moe or moe is None:
            continue
        if il in shapes.shexp:
            out = max(out, F32 * n_tok * (3 * shapes.shexp_ff + profile.n_embd))
        else:
            # no shared expert: the experts' down outputs [n_embd, n_used, n_tok] are copied back for the
            # weighted sum (qwen3-30b-a3b -cmoe: `ffn_moe_down-0` copied to the first device, 32 MiB)
            out = max(out, F32 * n_tok * (lp.n_expert_used or moe.n_expert_used) * profile.n_embd)
    return out


def _in_hole(pre: int, last: int, hole: int) -> int:
    """Bytes a live set takes over the hole's start: `pre` allocated first, then `last` (the largest, allocated
    last) into what is left of the hole or, when it does not fit there, above the mask."""
    if pre + last <= hole:
        return hole
    if pre <= hole:
        return hole + last
    return pre + last  # more than the hole before the last tensor: where it goes was not traced


def _attn_layers(profile: ModelProfile, layers: list[int]) -> tuple[list[int], list[int]]:
    """The attention layers among `layers`: those of the base cache, those of the SWA cache (cached per profile
    and layer set: every backend's plan asks for its own layers, each estimate again)."""
    base, swa = _ATTN_LAYERS.get_or_compute(
        (id(profile), tuple(layers)), (profile,), lambda: _split_attn_layers(profile, layers)
    )
    return list(base), list(swa)


_ATTN_LAYERS: AnchoredCache[tuple[tuple[int, ...], tuple[int, ...]]] = AnchoredCache(256)


def _split_attn_layers(profile: ModelProfile, layers: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    base: list[int] = []
    swa: list[int] = []
    for il in layers:
        lp = profile.layers[il]
        if lp.kind in (LayerKind.RECURRENT, LayerKind.NEXTN) or lp.n_head == 0:
            continue
        if lp.kind is LayerKind.NONE and profile.has_memory:
            continue  # an MLP-only layer; in models without a memory module every layer attends without a cache
        (swa if lp.is_swa else base).append(il)
    return tuple(base), tuple(swa)


#: src/llama-kv-cache-msa.cpp `get_n_pos`: the position axis of MiniMax-M3's indexer is padded to at least 256.
MSA_POSITIONS = 256
#: `llama-kv-cache.cpp` (llama_kv_cache constructor, `attn_rot_k` / `attn_rot_v`): the smallest Hadamard rotation.
HADAMARD_MIN = 64


def _rotation_size(head: int) -> int:
    """K's rotation: 64, doubled while it still divides the head size twice over (`n_rot_k`)."""
    n = HADAMARD_MIN
    while head % (2 * n) == 0:
        n *= 2
    return n


def _hadamard_rotations(
    profile: ModelProfile, layers: list[int], type_k: str, type_v: str
) -> tuple[int, int]:
    """(n_rot_k, n_rot_v) of the KV cache of `layers` (one cache: the base or the SWA one), 0 = no rotation.

    `llama-kv-cache.cpp`, llama_kv_cache constructor: a quantized K (V) cache whose layers all have the same head
    size, a multiple of 64, gets a Hadamard rotation; `n_rot_k` is the largest power of two (from 64) dividing
    the head size, `n_rot_v` is 64. The rotations are graph
    inputs `attn_inp_k_rot` / `attn_inp_v_rot` (`build_input_k_rot`, f32 `[n_rot, n_rot]`), and
    `llm_graph_context::build_attn` multiplies Q, K and V by them (`llama_mul_mat_hadamard`, llama-impl.h) and
    the attention output by V's rotation again.

    Only the inputs of a K/V cache build them (`build_attn_inp_kv_impl`, also under a recurrent hybrid's
    `build_inp_mem_hybrid`, and `build_attn_inp_kv_iswa`): a K-only cache (MLA, `build_attn_inp_k_impl`) and the
    hybrid iSWA memory (`build_inp_mem_hybrid_iswa`, LFM2 with sliding-window layers) build none, so their graphs
    are not rotated even though the cache logs an `n_rot_k`. (The DSA lightning indexers' own rotations are part
    of `_indexer_queries`.)
    """
    if not layers or profile.mla is not None:
        return 0, 0
    if profile.is_recurrent_or_hybrid and any(lp.is_swa for lp in profile.layers):
        return 0, 0
    heads_k = {profile.layers[il].n_embd_head_k for il in layers}
    heads_v = {profile.layers[il].n_embd_head_v for il in layers}
    n_rot_k = n_rot_v = 0
    if get_type(type_id(type_k)).quantized and len(heads_k) == 1:
        head = heads_k.pop()
        n_rot_k = _rotation_size(head) if head > 0 and head % HADAMARD_MIN == 0 else 0
    if get_type(type_id(type_v)).quantized and len(heads_v) == 1:
        head = heads_v.pop()
        n_rot_v = HADAMARD_MIN if head > 0 and head % HADAMARD_MIN == 0 else 0
    return n_rot_k, n_rot_v


@dataclass(frozen=True, slots=True)
class Affine:
    """`a_base * n_kv_base + a_swa * n_kv_swa + c`: how a tensor's size follows the KV cells.

    `room` > 0: the cell-dependent part is a tensor that goes into a free block of that size while it fits there;
    it then adds nothing (and `c` is not reached: a separate term holds what is live in that case).
    """

    a_base: int = 0
    a_swa: int = 0
    c: int = 0
    room: int = 0

    def at(self, n_kv_base: int, n_kv_swa: int) -> int:
        grow = self.a_base * n_kv_base + self.a_swa * n_kv_swa
        if self.room and grow <= self.room:
            return 0
        return grow + self.c


def _max_at(affs: tuple[Affine, ...], nb: int, ns: int) -> int:
    return max((a.at(nb, ns) for a in affs), default=0)


def _indexer_peak(query: int, score: int, top: int, below: int = 1) -> int:
    """A lightning indexer's peak over its two live queries `[n_indexer_head x key_length, n_tok]` (the projection
    and its roped or rotated copy), bytes: the score `[n_kv, n_tok]` f32 is allocated when the first query is
    freed and goes into its space while it fits, the top-k indices `[min(n_kv, top_k), n_tok]` i32 then into the
    second's; else the score goes above the second query and the indices above the score (the allocator's peaks
    on the deepseek32 smoke model: two 16 MiB `indexer_q-0` at c8192; at c32768 one freed 16 MiB query,
    `indexer_score-0` and the top-k, 64 MiB each, on top). `below`: the query tensors whose space is under the score
    then: one where the query is rotated into a third tensor that is live in the last slot, two without the
    rotation (hy_v4's peak at c32768: a 32 MiB hole under `indexer_score-0`)."""
    if score <= query:
        return 2 * query
    return below * query + score + (top if top > below * query else 0)


@dataclass(frozen=True, slots=True)
class _IndexerScores:
    """DeepSeek-V3.2's lightning indexer at its peak (src/models/deepseek32.cpp and its copies), as a function of
    the indexed cache's cells per stream `nb`: what stays live under it (`base`: the compressed query, the absorbed
    Q and the freed space below it, see `_indexer_queries`), without flash attention the layer's scores
    `kq` `[n_kv, n_tok, n_head]` f32, computed before the indexer and kept for the top-k mask added to them (the
    smoke model without flash attention: `kq-0` under the two `indexer_q-0`), and `_indexer_peak`."""

    base: int
    query: int
    n_tok: int
    top_k: int
    kq_per_cell: int  # 0 with flash attention
    below: int = 1  # query tensors under the score (`_indexer_peak`)

    def transient(self, nb: int) -> int:
        score = F32 * self.n_tok * nb
        top = I32 * self.n_tok * min(nb, self.top_k)
        return self.base + self.kq_per_cell * nb + _indexer_peak(self.query, score, top, self.below)

    def transient_array(self, nb: NDArray[np.int64]) -> NDArray[np.int64]:
        return np.fromiter((self.transient(int(x)) for x in nb), dtype=np.int64, count=nb.size)


#: src/llama-memory-hybrid-idx.cpp `kpool_pad`: pools are counted in steps of 64 (at least 64), one more than used.
KPOOL_PAD = 64


@dataclass(frozen=True, slots=True)
class _KpoolSelection:
    """The k-pool sparse attention of qwen4exp (src/models/qwen4exp.cpp `build_inp_kpool`, `build_indexer_sel`)
    and glm5-next, as a
    function of the indexer cache's cells per stream `nb`.

    At the reserve the pools are those of a full cache: n_pool = kpool_pad(nb / kpool x n_seq_max)
    (src/llama-memory-hybrid-idx.cpp, `n_pool_max`), n_top = min(n_pool, top_k / kpool) of them are selected and
    n_sel = kpool x n_top (+ kpool - 1 tail cells). Graph inputs: `pool_cells` `[n_pool]` and `pool_idxs`
    `[kpool, n_pool]` i32, `pool_mask` `[n_pool, n_tok]` f16, `tail_idxs` `[kpool - 1, n_tok]` i32,
    `new_pool_idxs` `[kpool, n_new]` i32 and `new_pool_rep` `[n_new]` i64 (n_new = the pools of the full cache).

    At the peak (the allocator's lists on the smoke model, c8192 and c32768, with and without flash attention):
    the indexer's score `[n_pool, n_tok]` f32 and top-k `[n_top, n_tok]` i32 (in the freed space of the two
    indexer queries when the score fits one, with the layer's norm block; else the score above them), then the
    selected cells `get_rows(pool_idxs, top_k)` `[kpool x n_top, n_tok]` i32, and four `[n_sel, n_tok]` tensors
    of the scatter index chain (the concatenated selection, its f32 cast, the liveness and the dump rows; the f16
    repeated zeros `[n_sel, n_tok]` take the freed selection's space). Without flash attention the layer is
    replayed through the allocator (`scatter_ops`, `_BestFit`): which freed block the layer's scores `kq`
    `[n_kv, n_tok, n_head]` f32, the repeated `live_pool` and `live` fit depends on how the selection's tail
    makes the chain's `[n_sel, n_tok]` tensors a little larger than the selected cells (the allocator's lists on
    the smoke model, c512-c131072, 1 and 4 slots, `-ub` 512 and 2048).

    glm5-next (`gather`: src/models/glm5-next.cpp) also has the graph input `gather_mask` `[n_sel, n_tok]` f32,
    which gives each slot's liveness (`ggml_exp` of it). Its peak (the allocator's lists on the smoke model): the
    indexer query `[n_indexer_head x key_length, n_tok]` with the score at short contexts; else the score and
    the top-k, the selected cells and one `[n_sel, n_tok]` tensor of the chain (two when top_k caps the selection
    below the pools: c131072, and c32768 with four slots); without flash attention the layer's scores `kq`, two
    chain tensors and the f32 `mask_all` `[n_kv + n_sel, n_tok]` that the selection is scattered into, and where
    the k-pool layer is the graph's first, that layer replayed through the allocator (`first_layer`).
    """

    n_tok: int
    flash_attn: bool
    kpool: int
    top_k: int
    tail: bool
    n_seqs: int
    query: int  # bytes of one indexer query
    block: int
    kq_per_cell: int  # the layer's scores per cell without flash attention
    gather: bool = False  # glm5-next's graph (the `gather_mask` input)
    head: int = 0  # the indexer's key length
    heads: int = 0  # the indexer's heads
    v_idxs: int = 0  # V's row indices without flash attention (a graph input)
    # glm5-next without flash attention, where its first k-pool layer is the graph's first layer (`gather_ops`):
    # the MLA rows per token (q_resid, the query, the absorbed query, the compressed KV row), () elsewhere
    mla_rows: tuple[int, ...] = ()
    v_row: int = 0  # the contiguous copy of V per cell (`mla_v`'s bytes, counted under every transient)
    streams_over: int = 0  # the residual streams the plan counts under the transient beyond the first layer's

    def sizes(self, nb: int) -> tuple[int, int, int]:
        """(n_pool, n_top, n_sel) for `nb` cells per stream."""
        real = nb // self.kpool * self.n_seqs
        n_pool = max(KPOOL_PAD, -(-(real + 1) // KPOOL_PAD) * KPOOL_PAD)
        n_top = min(n_pool, self.top_k // self.kpool)
        return n_pool, n_top, self.kpool * n_top + (self.kpool - 1 if self.tail else 0)

    def inputs(self, nb: int) -> int:
        n_pool, _, _ = self.sizes(nb)
        real = nb // self.kpool * self.n_seqs
        return (
            I32 * n_pool * (1 + self.kpool)
            + F16 * n_pool * self.n_tok
            + I32 * (self.kpool - 1) * self.n_tok
            + (I32 * self.kpool + I64) * max(real, 1)
            + (F32 * self.sizes(nb)[2] * self.n_tok if self.gather else 0)
        )

    def transient(self, nb: int) -> int:
        n_pool, n_top, n_sel = self.sizes(nb)
        score, top = F32 * n_pool * self.n_tok, I32 * n_top * self.n_tok
        sel_rows, chain = I32 * self.kpool * n_top * self.n_tok, F32 * n_sel * self.n_tok
        q, kq = self.query, self.kq_per_cell * nb
        if self.gather:
            if not self.flash_attn:
                if self.mla_rows:
                    return self.first_layer(nb)
                return max(q + score, kq + 2 * chain + F32 * (nb + n_sel) * self.n_tok)
            return max(q + score, score + top + sel_rows + (2 if n_top < n_pool else 1) * chain)
        if not self.flash_attn:
            return _replay(self.scatter_ops(nb), ())
        if top > 2 * q:
            # the top-k fits none of the freed query tensors: the three (the projection, its norm, the roped
            # copy) stay a hole under the score and the top-k (the smoke model at c131072)
            return 3 * q + score + top + sel_rows + 4 * chain
        below = self.block + score + top if score <= q else 2 * q + score
        return max(2 * q, below + sel_rows + 4 * chain)

    def first_layer(self, nb: int) -> int:
        """glm5-next's first layer without flash attention, bytes over what the plan counts under every transient
        (the graph inputs, the five blocks, `hc_streams` residual streams and V's contiguous copy).

        What is live under the layer there (the allocator's lists on the smoke model, c2048 `-ub 2048` and c8192
        `-ub 512`, layer 0 the k-pool layer): the graph inputs, among them the zero seed of the pooled key
        `[key_length, n_tok]` f32 that `build_inp_kpool`'s cache row is concatenated with (src/models/glm5-next.cpp
        `build_dsa_layer`, freed once read, a hole under the layer), the token-embedding blocks and one residual
        stream, `hc_init` `[n_embd x hc, n_tok]` (the repeated embeddings; a later layer's output stream does not
        exist yet), with the two freed token-row blocks of the mixed batch (`inp_embd` and its `get_rows` copy)
        a hole under it. V's contiguous copy is allocated in the layer (`gather_ops`): it takes that hole when it
        fits (c2048: the 2 MiB copy in the 2 MiB hole), else a block the layer has freed (c8192: above `hc_init`,
        in the indexer query's freed space); it does not raise the peak in either."""
        _, _, n_sel = self.sizes(nb)
        # with the fill seeds of the repeated zeros `[n_sel]` and of `mask_all` `[n_kv + n_sel]` f32 (graph inputs)
        seed = F32 * self.head * self.n_tok + F32 * (2 * n_sel + nb)
        layer = _replay(self.gather_ops(nb), (2 * self.block,))
        return layer + seed - self.streams_over - self.v_row * nb

    def gather_ops(self, nb: int) -> tuple[ReplayOp, ...]:
        """glm5-next without flash attention: its MLA layer from the query's low-rank projection to the selection
        mask in graph order (src/models/glm5-next.cpp `build_dsa_layer`, `build_kpool_select`), a freed tensor
        as (name, 0): `q_resid` `[q_lora_rank, n_tok]` (normed in place), the indexer query, the score, the
        top-k and its reordering by score (the f32 cast, the selected scores, their argsort, the reordered rows,
        their contiguous copy and the i32 cast), the selected cells and `sel_idx`, the query `q` `[n_head x
        key_length_mla, n_tok]`, the absorbed query, the compressed KV row (stored into the cache), V's
        contiguous copy `[kv_lora_rank, n_kv]` (read by `kqv` after the mask), the layer's scores `kq`, the
        repeated zeros, the f32 cast of `sel_idx`, `live` (`ggml_exp` of the `gather_mask` input; the sub, mul
        and add in place of the cast), the f32 `mask_all` `[n_kv + n_sel, n_tok]` and the selection mask
        `[n_kv, n_tok]`. The i32 cast of the indices takes the space `gather_mask` leaves once `live` has read it
        (the same bytes; the allocator's lists on the smoke model, whose one k-pool layer is the last to read
        it)."""
        n_pool, n_top, n_sel = self.sizes(nb)
        t = self.n_tok
        q_a, q_b, q_abs, kv_a = (F32 * t * r for r in self.mla_rows)
        chain, top = F32 * n_sel * t, F32 * n_top * t
        return (
            ("q_resid", q_a),
            ("iq", self.query),
            ("score", F32 * n_pool * t),
            ("iq", 0),
            ("top_k", I32 * n_top * t),
            ("top_f", top),
            ("sel_score", top),
            ("score", 0),
            ("top_k", 0),
            ("order", I32 * n_top * t),
            ("top_rows", top),
            ("top_f", 0),
            ("sel_score", 0),
            ("order", 0),
            ("top_cont", top),
            ("top_rows", 0),
            ("top_i32", I32 * n_top * t),
            ("top_cont", 0),
            ("sel_rows", I32 * self.kpool * n_top * t),
            ("top_i32", 0),
            ("sel_idx", chain),
            ("sel_rows", 0),
            ("q", q_b),
            ("q_resid", 0),
            ("q_absorbed", q_abs),
            ("q", 0),
            ("kv_cmpr", kv_a),
            ("kv_cmpr", 0),
            ("v_cont", self.v_row * nb),
            ("kq", self.kq_per_cell * nb),
            ("q_absorbed", 0),
            ("zeros", chain),
            ("idx_f", chain),
            ("sel_idx", 0),
            ("live", chain),
            ("live", 0),
            ("idx_f", 0),
            ("mask_all", F32 * (nb + n_sel) * t),
            ("zeros", 0),
            ("sel", F32 * nb * t),
        )

    def scatter_ops(self, nb: int) -> tuple[ReplayOp, ...]:
        """Without flash attention, the layer from the indexer query to the selection mask in graph order
        (src/models/qwen4exp.cpp `build_qsa_sel`, then `build_attn_mha`'s scores), a freed tensor as (name, 0):
        the query projection, its norm (scaled and roped in place), the score, the top-k, the selected cells and
        their concatenation with the tail `sel_idx`, the layer's scores `kq` (the mask's chain is expanded with
        the softmax, after them), the repeated zeros and the f32 cast of `sel_idx`, `top_score` (in the space the
        graph inputs read by then leave below the layer, when it fits; its scale and clamp in place), the
        repeated `live_pool`, `live`, its `ggml_fill` and `ggml_cumsum` (`dump`, scaled in place; the sub, mul
        and add in place of the cast), the i32 cast, the f32 `mask_all` `[n_kv + n_sel, n_tok]` the zeros are
        scattered into (`ggml_set_rows` in place) and the selection mask `[n_kv, n_tok]`."""
        n_pool, n_top, n_sel = self.sizes(nb)
        t = self.n_tok
        q, chain, ts = self.query, F32 * n_sel * t, F32 * n_top * t
        # the graph inputs the layer has read before its score leave a hole below it: the zero seed of the
        # pooled half `[key_length, n_tok]` f32 and the new pools' `new_pool_idxs`, `new_pool_rep` and
        # `new_pool_pos`; the gathered pooled keys `[key_length, n_pool]` and the filled head weights
        # `[n_indexer_head, n_tok]` go there when they fit, else into the query's freed space under the score
        n_new = max(nb // self.kpool * self.n_seqs, 1)
        hole = F32 * self.head * t + (I32 * self.kpool + I64 + I32 * 4) * n_new
        early: list[ReplayOp] = []
        for name, size in (("pooled_k", F32 * self.head * n_pool), ("head_weights", F32 * self.heads * t)):
            if size <= hole:
                hole -= size
            else:
                early.append((name, size))
        # by the top score, the head weights' seed and V's row indices have been read too: it goes below when
        # it fits the space they leave with the first seed's
        freed = F32 * t * (self.head + self.heads) + self.v_idxs
        ts_ops: tuple[ReplayOp, ...] = () if ts <= freed else (("top_score", ts),)
        return (
            ("q", q),
            ("q_norm", q),
            ("q", 0),
            *early,
            ("score", F32 * n_pool * t),
            ("q_norm", 0),
            ("pooled_k", 0),
            ("head_weights", 0),
            ("top_k", I32 * n_top * t),
            ("sel_rows", I32 * self.kpool * n_top * t),
            ("sel_idx", chain),
            ("sel_rows", 0),
            ("kq", self.kq_per_cell * nb),
            ("zeros", chain),
            ("idx_f", chain),
            ("sel_idx", 0),
            *ts_ops,
            ("score", 0),
            ("top_k", 0),
            ("live_pool", F32 * self.kpool * n_top * t),
            ("top_score", 0),
            ("live", chain),
            ("live_pool", 0),
            ("fill", chain),
            ("dump", chain),
            ("fill", 0),
            ("live", 0),
            ("dump", 0),
            ("sel_i32", chain),
            ("idx_f", 0),
            ("mask_all", F32 * (nb + n_sel) * t),
            ("zeros", 0),
            ("sel_i32", 0),
            ("sel", F32 * nb * t),
        )

    def inputs_array(self, nb: NDArray[np.int64]) -> NDArray[np.int64]:
        return np.fromiter((self.inputs(int(x)) for x in nb), dtype=np.int64, count=nb.size)

    def transient_array(self, nb: NDArray[np.int64]) -> NDArray[np.int64]:
        return np.fromiter((self.transient(int(x)) for x in nb), dtype=np.int64, count=nb.size)


#: Tensors `[n_embd x hc, n_tok]` of DeepSeek-V4's hyper-connection streams live at the indexer's peak: the
#: previous layer's output stream `l_last`, above the space the first layer's stream tensors took (`hc_init` and
#: its copy), and the blocks `[n_embd, n_tok]` with them: the embeddings input, the token-embedding rows `embd`
#: and one block (the allocator's peaks on the deepseek4 smoke model: `l_last-1` starts ten blocks above the graph
#: inputs with four streams, at every context, micro-batch and slot count; nine and a half without flash attention).
DSV4_STREAM_TENSORS = 3
DSV4_BLOCKS = 3
#: The contiguous copy of V without flash attention goes into the hole under the previous layer's stream while it
#: is at most this many blocks (the smoke model: `v_cont-2` at 0.09-1.09 MiB inside the 2.2-2.5 MiB hole, at
#: 4.09 MiB above the stream).
DSV4_V_HOLE_BLOCKS = 2


@dataclass(frozen=True, slots=True)
class _Dsv4Attention:
    """DeepSeek-V4's compressed attention on a backend that runs a CSA layer (src/models/deepseek4.cpp), as
    functions of the CSA cache's cells per stream `nb` (the HCA and indexer caches follow from it:
    src/llama-kv-cache-dsv4.cpp sizes each as GGML_PAD(ceil(n_ctx_seq / ratio), 256)).

    Graph inputs (src/llama-graph.cpp `build_inp_dsv4`, `dsv4_build_comp_inputs`), live through the graph: the
    masks of the CSA, HCA and indexer caches `[n_kv, n_tok]` (f16 with flash attention, else f32; the indexer's
    f16 for the fused `ggml_lightning_indexer`), the indexer cache's Hadamard rotation `attn_inp_k_rot`
    (`[n_rot, n_rot]` f32, always built for the lightning indexer: llama-kv-cache.cpp), and per CSA layer the
    zero-filled leaf `build_top_k_mask` writes into the mask `[1, min(n_kv, top_k), n_tok]` (f16 with flash
    attention, else f32).

    At the indexer's peak (`build_lightning_indexer`, `_indexer_peak`): its query `lid_q` and the roped copy, then
    the score `lid_score_masked` and the top-k indices (the smoke model at c131072: one freed 16 MiB query and the
    two 64 MiB tensors on top). Without
    flash attention the layer's scores `kq` `[n_swa + n_kv, n_tok, n_head]` f32 are computed before the indexer
    and stay live under it (the top-k mask is added to them), with the contiguous V `[head_v, n_swa + n_kv]` f16.
    """

    n_tok: int
    flash_attn: bool
    csa_layers: int  # CSA layers with the indexer on this backend (one zero-filled leaf each)
    hca: bool  # the backend runs an HCA layer (its mask)
    top_k: int
    query: int  # bytes of one indexer query `[n_indexer_head x key_length, n_tok]` f32
    rot: int  # the indexer cache's rotation input, bytes
    n_head: int
    head_v: int
    block: int  # `[n_embd, n_tok]` f32

    @staticmethod
    def _cells(nb: int) -> tuple[int, int]:
        """(HCA cells, indexer cells) per stream for `nb` CSA cells: the CSA cache holds ceil(n / 4) cells padded
        to 256, so the HCA cache's ceil(n / 128), padded alike, is that count's ceil(nb / 32), padded (exactly:
        the padding of the CSA count hides at most 7 HCA cells, and a multiple of 8 pads the same); the indexer
        cache has the CSA cache's ratio."""
        return compressed_cells(nb, DSV4_HCA_RATIO // DSV4_CSA_RATIO), nb

    def inputs(self, nb: int) -> int:
        elt = F16 if self.flash_attn else F32
        hca, lid = self._cells(nb)
        masks = elt * self.n_tok * nb + F16 * self.n_tok * lid + (elt * self.n_tok * hca if self.hca else 0)
        zeros = self.csa_layers * elt * self.n_tok * min(nb, self.top_k)
        return masks + zeros + self.rot

    def transient(self, nb: int, ns: int) -> int:
        score = F32 * self.n_tok * nb
        top = I32 * self.n_tok * min(nb, self.top_k)
        indexer = _indexer_peak(self.query, score, top)
        if self.flash_attn:
            return indexer
        kq = F32 * self.n_tok * self.n_head * (ns + nb)
        v = F16 * self.head_v * (ns + nb)
        return kq + (v if v > DSV4_V_HOLE_BLOCKS * self.block else 0) + indexer

    def inputs_array(self, nb: NDArray[np.int64]) -> NDArray[np.int64]:
        return np.fromiter((self.inputs(int(x)) for x in nb), dtype=np.int64, count=nb.size)

    def transient_array(self, nb: NDArray[np.int64], ns: NDArray[np.int64]) -> NDArray[np.int64]:
        return np.fromiter(
            (self.transient(int(b), int(w)) for b, w in zip(nb, ns, strict=True)),
            dtype=np.int64,
            count=nb.size,
        )


@dataclass(frozen=True, slots=True)
class _SsmLead:
    """The space around the host's last attention layer (flash attention) before the Mamba blocks after it, for
    replaying that layer's tail with them (`_DevicePlan.ssm_after`). The allocator's lists on the granitehybrid and
    nemotron_h smoke models: when the attention output is allocated, the graph inputs the layer has read are free
    below the blocks, in their allocation order (the mixed batch's tokens and slots and the token rows' block, K's
    rotation and the positions, then the K/V row indices and the mask), split in two by V's rotation, which stays
    live until the attention output is rotated back; above them the embeddings' block and the attention output's."""

    mask: Affine  # the masks, freed after the attention
    low: int  # the lower free block besides the token rows' block: mixed tokens and slots, K's rotation, positions
    v_rot: int  # V's rotation input (0: none, the two free blocks are one)
    idxs: int  # the K/V row indices, under the mask
    ffn: int  # the last attention layer's FFN intermediate [n_ff, n_tok] (0: that layer has no FFN)
    gated: bool  # its FFN has a separate gate
    # jamba: the residual goes into the layer input's block (`_DevicePlan._ssm_after_residual`), with or without
    # flash attention; `tokens` and `out_ids` are the token ids' and the output ids' bytes
    residual: bool = False
    fa: bool = True
    tokens: int = 0
    out_ids: int = 0


@dataclass(frozen=True, slots=True)
class _DevicePlan:
    """The compute buffer of one backend as functions of the KV cells (built once per placement)."""

    device: int | None
    layer_phase: bool  # the device runs layers (attention or FFN)
    masks: Affine
    v_idxs: int
    blocks_label: str
    blocks: int
    ffn: int
    kq: tuple[Affine, ...]  # KQ scores + Q per layer group (max of)
    mla_v: Affine
    fa_copies: tuple[Affine, ...]  # CUDA f16 K/V copies per layer (max of)
    logits: int  # > 0 on the output device
    out_block: int
    pp_extra: Affine
    op_offload_copy: int
    host_inputs: bool  # the host with no layers: graph inputs only
    small_inputs: int = 0  # token ids, positions, K/V row indices, output ids
    # (FFN, first intermediate, hole) of the layers that run after the last use of a mask and V's indices: the
    # first intermediate reuses their space when it fits there.
    ffn_holes: tuple[tuple[int, int, int, tuple[Affine, ...]], ...] = ()
    # ik_llama.cpp: (is_swa, Q bytes) per attention group; the intermediate follows the group's KV cells
    ik_groups: tuple[tuple[bool, int], ...] = ()
    # ik_llama.cpp on the host: the masks and activations are freed before the output layer, whose logits sit
    # with the output norm's block alone (the allocator's peak list of ik's output phase)
    ik_output_phase: bool = False
    # DSA top-k masks (src/llama-graph.cpp build_attn with top_k): a zero-filled f32 [1, min(n_kv, top_k), n_tok]
    # leaf per layer, allocated up front: bytes per kept cell, and the top_k cap
    dsa_zeros: int = 0
    dsa_top_k: int = 0
    # on a later GPU whose last layer is a MoE with a shared expert: that layer's tensors under the logits
    out_below: int = 0
    # DeepSeek-V4's compressed attention (its graph inputs and the indexer's peak), None elsewhere
    dsv4: _Dsv4Attention | None = None
    # DeepSeek-V3.2's lightning indexer at its peak, None elsewhere
    indexer: _IndexerScores | None = None
    # the k-pool sparse attention of qwen4exp and glm5-next (its inputs and the selection's peak), None elsewhere
    kpool: _KpoolSelection | None = None
    # Mamba blocks after the last attention layer: their allocations, replayed over the freed masks' space
    # (with the block of the layer's input in it), the block under it and the FFN norm's two-block hole
    ssm_ops: tuple[ReplayOp, ...] = ()
    ssm_hole: Affine = Affine()
    ssm_block: int = 0
    ssm_residual_in_input: bool = False
    ssm_after_attention_only: bool = False
    ssm_lead: _SsmLead | None = None
    # on the host that runs the last layer: the masks, each freed after the last layer that reads it; the logits
    # take the space of one when they fit there (`logits_on_top`)
    logits_room: tuple[Affine, ...] = ()

    def logits_on_top(self, nb: int, ns: int) -> int:
        """The logits where they raise the buffer: nothing when a freed mask holds them. The graph allocator
        (ggml-alloc.c, `ggml_dyn_tallocr_alloc`) gives a tensor the smallest free block it fits in, and by the
        output layer (src/llama-graph.cpp `build_inp_attn_kv`: the mask is an input of every attention layer and of
        nothing after them) the masks' blocks are free (the allocator's trace on LFM2-1.2B at 131072 cells with
        flash attention: the 128 MiB logits in the freed 128 MiB f16 mask, the peak at the first layer's FFN)."""
        if self.logits and any(self.logits <= a.at(nb, ns) for a in self.logits_room):
            return 0
        return self.logits

    def ssm_after(self, nb: int, ns: int) -> int:
        """The replayed Mamba block's extent above the blocks. Where the layer's input stays in the input's
        block (jamba adds the residual into it; plamo2's first layer output takes the embeddings' block) the
        token rows' block and the masks are one free block, with the FFN norm's block beside it (the allocator's
        peaks on the jamba and plamo2 smoke models); else the previous layer's output takes a block of the masks'
        space, between the token rows' block and the rest, and the FFN norm leaves two blocks (granitehybrid,
        nemotron_h). On the host with flash attention the last attention layer's tail is replayed with the block
        instead (`_ssm_after_lead`); jamba's Mamba-1 block over the inputs its attention layer freed
        (`_ssm_after_residual`)."""
        if not self.ssm_ops:
            return 0
        b, hole = self.ssm_block, self.ssm_hole.at(nb, ns)
        if self.ssm_lead is not None and self.ssm_lead.residual:
            return self._ssm_after_residual(self.ssm_lead, nb, ns)
        if self.ssm_lead is not None:
            return self._ssm_after_lead(self.ssm_lead, nb, ns)
        if self.ssm_residual_in_input:
            return _replay(self.ssm_ops, (hole + b, b))
        if self.ssm_after_attention_only:
            # flash attention and a last attention layer without FFN (nemotron_h's attention-only layers): the
            # token rows' block and the masks are one free block; the conv states' rows go at its bottom and the
            # attention layer's output `l_out` right above them (it is computed after them in graph order), while
            # the next norm and the embedding rows hold the FFN norm's two blocks until the input projection has
            # read the norm (the allocator's peaks on the nemotron_h_moe smoke model: `node_33` and `node_39` at
            # 0.50-1.01 MiB; at c2048 the conv output, 2 MiB, in the freed 2 MiB mask, 9.53 MiB; at c4096 the input
            # projection zxBCdt in it, 10.53 MiB; with four sequences at c8192 the 48 KiB of conv rows leave
            # 1.97 MiB, too little for the conv output, 11.57 MiB). With q8_0 caches at c2048 the trace differs:
            # the layer's output in one block of the FFN norm's two and the conv input (2.01 MiB) in the freed
            # 2.59 MiB, for the same peak (9.60 MiB; this replay gives 9.61); with q4_0 caches and four sequences
            # at c512 the contiguous copy of z goes on top (10.90 MiB, this replay 9.90)
            fill = ("norm_blocks", FFN_HOLE_BLOCKS * b)
            ops = (
                fill,
                self.ssm_ops[0],
                ("l_out", b),
                self.ssm_ops[1],
                ("norm_blocks", 0),
                *self.ssm_ops[2:],
            )
            return _replay(ops, (hole + b, FFN_HOLE_BLOCKS * b))
        return _replay(self.ssm_ops, (b, max(0, hole - b), FFN_HOLE_BLOCKS * b))

    def _ssm_after_lead(self, lead: _SsmLead, nb: int, ns: int) -> int:
        """The last attention layer's tail and the Mamba block after it, replayed from the attention output on
        (src/llama-graph.cpp `llm_graph_context::build_attn`, then the layer's FFN, `build_ffn`, and the Mamba
        block): the conv states' rows (built ahead of the output projection in graph order), V's rotation of the
        attention output (quantized V cache), the output projection, the FFN (norm, gate and up, the GLU output,
        which is a new tensor, and the down projection, which takes a freed block only where one of its size is
        left: the masks' space less the conv rows and the projection, or what the GLU output left of the FFN
        norm's), then the Mamba block with its input norm. The allocator's lists on the granitehybrid smoke model:
        with one slot the down projection in the masks' space (0.504 MiB left, 10.04 MiB); with two or four the
        conv rows (24 or 48 KiB) leave too little and it goes on top (10.55, 10.57 MiB); with q4_0 caches and four
        slots the GLU output on top and the down projection in the FFN norm's block, the Mamba block's z copy on
        top of the conv output (10.90 MiB; nemotron_h's attention-only layer alike)."""
        b = self.ssm_block
        ops = self.ssm_ops
        a2 = lead.idxs + lead.mask.at(nb, ns)
        free: tuple[tuple[str, int], ...] = (
            (("", b + lead.low), ("v_rot", lead.v_rot), ("", a2))
            if lead.v_rot
            else (("", b + lead.low + a2),)
        )
        # the output ids between the inputs and the embeddings' block, the layer input above the attention output
        sim = _BestFit.from_layout((*free, ("ids", 1), ("embd", b), ("fa_out", b), ("inp", 1)))
        seq: list[ReplayOp] = [ops[0]]
        if lead.v_rot:
            seq += [("v_out", b), ("v_rot", 0), ("fa_out", 0), ("wo", b), ("v_out", 0)]
        else:
            seq += [("wo", b), ("fa_out", 0)]
        seq.append(("embd", 0))
        if lead.ffn:
            seq.append(("ffn_norm", b))
            if lead.gated:
                seq += [("gate", lead.ffn), ("up", lead.ffn), ("ffn_norm", 0), ("glu", lead.ffn)]
                seq += [("gate", 0), ("up", 0), ("down", b), ("glu", 0)]
            else:
                seq += [("up", lead.ffn), ("ffn_norm", 0), ("down", b), ("up", 0)]
            seq.append(("wo", 0))  # the FFN input: the layer output is the down projection's
        seq += [("norm", b), ops[1], ("norm", 0), *ops[2:]]
        for name, size in seq:
            if size:
                sim.alloc(name, size)
            elif name in sim.live:
                sim.release(name)
        return sim.peak

    def _ssm_after_residual(self, lead: _SsmLead, nb: int, ns: int) -> int:
        """Jamba's Mamba-1 block after the host's last attention layer, replayed from the conv states' rows on
        (src/models/jamba.cpp: the attention's residual is added into the layer input's block, the FFN's into that
        sum; src/models/mamba-base.cpp `build_mamba_layer`). The conv states' rows are gathered inside the
        attention layer in graph order (after the attention output, before the output projection), when the
        space below holds, from the bottom: the freed plain token ids, the token rows' block, the freed mixed
        batch's tokens, slots and token rows, the rotations, the K/V row indices and the mask (flash attention:
        split by V's rotation, which is still live; without it the attention output `kqv_out` is at its bottom),
        the output ids, the layer input's block, the attention output's block (flash attention: still live;
        without it the freed `kqv`) and the last block; the rows take the smallest free block that fits
        (ggml-alloc.c, `ggml_dyn_tallocr_alloc`). By the Mamba block the layer's other tensors are freed; its
        input norm takes the smallest free block, then the block's allocations (`_mamba_ops`). The allocator's
        lists on the jamba smoke model: c4096 with flash attention, the rows at the freed inputs' bottom, the norm
        in the attention output's block, xz, the conv input and output in the mask's space, x_db in the conv
        input's, dt and the scan output on top (8.77 MiB); without flash attention at c512 the rows in the freed
        `kqv` block, the norm and xz in the freed inputs, the conv input and output, dt and the scan output on top
        (8.77 MiB); q4_0 caches with four slots, the rows in the mask's block (8.87 MiB)."""
        b, ops = self.ssm_block, self.ssm_ops
        low = lead.low + b  # the mixed batch's tokens, slots and token rows
        a2 = lead.idxs + lead.mask.at(nb, ns)
        if not lead.fa:
            free: tuple[tuple[str, int], ...] = (("kqv_out", b), ("", low - b + lead.v_rot + a2))
        elif lead.v_rot:
            free = (("", low), ("v_rot", lead.v_rot), ("", a2))
        else:
            free = (("", low + a2),)
        top = ("fa_out", b) if lead.fa else ("", b)
        inputs = (("", lead.tokens), ("inp_embd", b))
        sim = _BestFit.from_layout((*inputs, *free, ("out_ids", lead.out_ids), ("embd", b), top, ("last", b)))
        seq: list[ReplayOp] = [ops[0], ("v_rot", 0), ("kqv_out", 0), ("fa_out", 0)]
        seq += [("norm", b), ops[1], ("norm", 0), *ops[2:]]
        for name, size in seq:
            if size:
                sim.alloc(name, size)
            elif name in sim.live:
                sim.release(name)
        return sim.peak

    def zeros_at(self, nb: int) -> int:
        return self.dsa_zeros * min(nb, self.dsa_top_k)


def _indexer_queries(profile: ModelProfile, n_tok: int) -> tuple[int, int]:
    """The DSA lightning indexer's heads and the bytes of its queries at their peak (0, 0 without one)."""
    # DSA lightning indexer (src/models/deepseek32.cpp): its queries [head_size, n_indexer_head, n_tok] before and
    # after the Hadamard rotation are live together; it has its own f16 mask over the base cache.
    idx_heads = (
        max(
            (
                t.shape[1]
                for t in profile.tensors
                if t.name.endswith("indexer.proj.weight") and len(t.shape) > 1
            ),
            default=0,
        )
        if profile.traits.graph.dsa_indexer
        else 0
    )
    idx_q = 2 * F32 * n_tok * idx_heads * profile.indexer_head_size
    if idx_q and profile.mla is not None:
        # the indexer's queries come from the compressed query qr [q_lora_rank, n_tok], which stays live for
        # the main query, next to the absorbed Q [n_embd_head_k, n_head, n_tok] (measured: both are live at
        # the indexer's peak)
        idx_q += F32 * n_tok * profile.mla.q_lora_rank
        idx_q += F32 * n_tok * max((lp.n_head * lp.n_embd_head_k for lp in profile.layers), default=0)
        # below the absorbed Q, the space of the query q [key_length_mla, n_head, n_tok] and q_nope_absorbed
        # [kv_lora, n_head, n_tok] that the concatenation into Qcur read (src/models/deepseek32.cpp), free by
        # the indexer's peak: the indexer's queries go into it while they fit, else above (the dots3note smoke
        # model's peak at c512: qr-0 at 3.84-4.84 MiB, the free 1.375 MiB of q-0 and q_nope_absorbed-0,
        # Qcur-0 at 6.21-7.34 and the two 16 MiB indexer_q-0 above it, 39.34 MiB)
        q_rows = profile.mla.key_length_mla + profile.mla.kv_lora_rank
        room = F32 * n_tok * max((lp.n_head * q_rows for lp in profile.layers), default=0)
        one_q = F32 * n_tok * idx_heads * profile.indexer_head_size
        fit = min(2, room // one_q) if one_q else 0
        idx_q += room - fit * one_q
    return idx_heads, idx_q


class _BestFit:
    """A few allocations replayed the way `ggml_dyn_tallocr_alloc` (ggml/src/ggml-alloc.c) places them: the
    smallest free block below the end that fits (the later one on a tie), else the free end of the buffer; a freed
    tensor's space merges with its free neighbours. Offsets are relative to the top of what stays live below (the
    device's blocks); `holes` are free blocks under it. `peak` is the highest end reached."""

    def __init__(self, holes: tuple[int, ...] = ()) -> None:
        self.free: list[list[int]] = []  # [offset, size], sorted, all below `end`
        at = 0
        for h in holes:
            at -= h + 1  # separate blocks below the base (never adjacent to each other or to the end)
            self.free.insert(0, [at, h])
        self.end = 0  # the free end starts here
        self.peak = 0
        self.live: dict[str, tuple[int, int]] = {}

    @classmethod
    def from_layout(cls, segments: tuple[tuple[str, int], ...]) -> _BestFit:
        """The space under the base from the bottom up: ("", size) a free block, (name, size) a live tensor
        (released by name); zero-sized segments are skipped."""
        sim = cls()
        at = -sum(size for _, size in segments)
        for name, size in segments:
            if size and name:
                sim.live[name] = (at, size)
            elif size:
                sim.free.append([at, size])
            at += size
        return sim

    def alloc(self, name: str, size: int) -> None:
        best = -1
        for i, (_, bsize) in enumerate(self.free):
            if bsize >= size and (best < 0 or bsize <= self.free[best][1]):
                best = i
        if best >= 0 and size:
            off = self.free[best][0]
            self.free[best][0] += size
            self.free[best][1] -= size
            if not self.free[best][1]:
                del self.free[best]
        else:
            off = self.end
            self.end += size
            self.peak = max(self.peak, self.end)
        self.live[name] = (off, size)

    def release(self, *names: str) -> None:
        for name in names:
            off, size = self.live.pop(name)
            if off + size == self.end:
                self.end = off
            else:
                self.free.append([off, size])
                self.free.sort()
            merged: list[list[int]] = []
            for blk in self.free:
                if merged and merged[-1][0] + merged[-1][1] == blk[0]:
                    merged[-1][1] += blk[1]
                else:
                    merged.append(blk)
            if merged and merged[-1][0] + merged[-1][1] == self.end:
                self.end = merged.pop()[0]
            self.free = merged

    def largest_hole(self) -> int:
        return max((size for _, size in self.free), default=0)


def _absorbed_mla_attention(
    profile: ModelProfile, lp: LayerProfile, mla: MlaParams, n_tok: int, fa: bool, hole: int
) -> tuple[int, int, int]:
    """The first layer's attention with the absorbed MLA query (src/models/deepseek2.cpp, llama_model_deepseek2::
    graph, then `llm_graph_context::build_attn_mha`), replayed through the allocator (`_BestFit`) over the
    device's blocks with the one-block `hole` the mixed batch's token rows left: (peak, end, largest free block)
    before the KQ scores, bytes above the blocks. `build_attn` expands Q's graph first: the compressed query
    q_a `[q_lora_rank, n_tok]` normed in place (when the model has one), the query q `[key_length_mla, n_head,
    n_tok]`, the absorbed q_nope `[kv_lora_rank, n_head, n_tok]`, the roped q_pe `[n_rot, n_head, n_tok]` and
    their concatenation Qcur; then K's: the compressed KV kv_cmpr_pe `[kv_lora_rank + n_rot, n_tok]`, its normed
    latent, the roped k_pe and Kcur, stored into the cache. With flash attention its output `[kv_lora_rank,
    n_head, n_tok]`, the product with wv_b and its contiguous copy `[value_length_mla, n_head, n_tok]` follow,
    and the output projection. The allocator's peaks: DeepSeek-V3 (128 heads, `-ub 512`) q's freed 48 MiB,
    q_nope_absorbed 128, q_pe 16 and Qcur 144 MiB above the blocks (336 MiB), the KQ scores above Qcur without
    flash attention; the deepseek2 smoke model (one head): q_nope_absorbed in q_a's freed space, q_pe in the
    token rows' hole, Qcur, then kv_cmpr_pe above it (3.25 MiB)."""
    return _replay_absorbed_mla(profile.n_embd, lp.n_head, lp.n_embd_head_v, mla, n_tok, fa, hole)


@functools.lru_cache(maxsize=1024)
def _replay_absorbed_mla(
    n_embd: int, h: int, head_v: int, mla: MlaParams, n_tok: int, fa: bool, hole: int
) -> tuple[int, int, int]:
    """`_absorbed_mla_attention` on the shapes it reads (kept: every layer of a model and every estimate of a
    plan replay the same sequence)."""
    f = F32 * n_tok
    kv, rope = mla.kv_lora_rank, mla.n_rot
    sim = _BestFit((hole,))
    if mla.q_lora_rank:
        sim.alloc("q_a", f * mla.q_lora_rank)
    sim.alloc("q", f * h * mla.key_length_mla)
    if mla.q_lora_rank:
        sim.release("q_a")
    sim.alloc("q_nope_absorbed", f * h * kv)
    sim.alloc("q_pe", f * h * rope)
    sim.release("q")
    sim.alloc("Qcur", f * h * (kv + rope))
    sim.release("q_nope_absorbed", "q_pe")
    sim.alloc("kv_cmpr_pe", f * (kv + rope))
    sim.alloc("kv_cmpr", f * kv)
    sim.alloc("k_pe", f * rope)
    sim.release("kv_cmpr_pe")
    sim.alloc("Kcur", f * (kv + rope))
    sim.release("kv_cmpr", "k_pe", "Kcur")
    if fa:
        sim.alloc("fattn", f * h * head_v)
        sim.release("Qcur")
        sim.alloc("fattn_mla", f * h * mla.value_length_mla)
        sim.release("fattn")
        sim.alloc("cont", f * h * mla.value_length_mla)
        sim.release("fattn_mla")
        sim.alloc("wo", f * n_embd)
    return sim.peak, sim.end, sim.largest_hole()


def _kv_a_mqa_rows(profile: ModelProfile) -> dict[int, tuple[int, int]]:
    """Per layer, the rows of `attn_kv_a_mqa` and of its norm (minicpm3), empty for other architectures."""
    kv_a_mqa: dict[int, tuple[int, int]] = {}
    if profile.traits.graph.kv_a_mqa:
        norms = {t.layer: t.shape[0] for t in profile.tensors if t.name.endswith(".attn_kv_a_norm.weight")}
        for t in profile.tensors:
            if t.layer is not None and t.name.endswith(".attn_kv_a_mqa.weight") and len(t.shape) > 1:
                kv_a_mqa[t.layer] = (t.shape[1], norms.get(t.layer, 0))
    return kv_a_mqa


class _PlanBuilder:
    """The graph facts of one model, settings and placement that every backend's `_DevicePlan` is built from."""

    def __init__(
        self,
        profile: ModelProfile,
        inputs: ComputeInputs,
        placement: WeightPlacement,
        gpu_vendors: tuple[Vendor, ...],
    ) -> None:
        self.inputs = inputs
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
        # ik_llama.cpp reserves the worst case with every token an output (llm_build_context: n_outputs = n_tokens)
        logits = F32 * profile.n_vocab * (n_tok if inputs.ik_attention else n_out)
        v_gqa_max = max((lp.n_embd_v_gqa for lp in profile.layers), default=0)

        idx_heads, idx_q = _indexer_queries(profile, n_tok)

        dsa_top_k = profile.indexer_top_k if profile.traits.graph.dsa_indexer else 0
        idx_rows = _indexer_q_rows(profile)
        self.idx_q_proj = _tensor_rows(profile, ".indexer.q_proj.weight")
        kv_a_mqa = _kv_a_mqa_rows(profile)
        # hyper-connection residual streams, live through every layer like the residual blocks
        hc_block = F32 * n_tok * _hc_width(profile) * profile.traits.graph.hc_streams
        if profile.traits.graph.dsv4_attention and hc_block:
            # the streams and blocks at DeepSeek-V4's indexer peak (DSV4_STREAM_TENSORS, DSV4_BLOCKS), counted
            # in place of the residual blocks
            hc_block = DSV4_STREAM_TENSORS * hc_block + (DSV4_BLOCKS - _residual_blocks(profile)) * embd_block

        shapes = _layer_shapes(profile)
        ik_q: set[tuple[bool, int]] = set()
        offload_gpu0 = bool(
            n_gpu
            and inputs.op_offload
            and n_tok >= OP_OFFLOAD_MIN_BATCH
            and gpu_vendors[0] in OP_OFFLOAD_VENDORS
        )
        # Where each layer's FFN runs: with its FFN weights (an override can move them), or on the first GPU when
        # op offload takes host-resident matrix multiplications there.
        ffn_dev = _ffn_devices(profile, placement)
        if offload_gpu0:
            ffn_dev = {il: (0 if d is None else d) for il, d in ffn_dev.items()}
        ffn_by_dev: dict[int | None, list[int]] = {}
        for il in trunk:
            ffn_by_dev.setdefault(ffn_dev.get(il, placement.layer_device[il]), []).append(il)
        op_copy = _largest_host_weight_group(profile, placement) if offload_gpu0 else 0

        # the Hadamard rotations of a quantized cache (mainline only): their f32 matrices are graph inputs of every
        # backend that runs the cache's layers, and a rotated V leaves a smaller FFN hole (`_ffn_layer`)
        rot_bytes = [0, 0]  # base cache, SWA cache
        v_rot_bytes = [0, 0]  # V's rotation alone
        v_rot: set[int] = set()
        if not inputs.ik_attention and profile.has_memory:
            for i, group in enumerate(_attn_layers(profile, trunk)):
                n_rot_k, n_rot_v = _hadamard_rotations(
                    profile, group, inputs.cache_type_k, inputs.cache_type_v
                )
                rot_bytes[i] = F32 * (n_rot_k * n_rot_k + n_rot_v * n_rot_v)
                v_rot_bytes[i] = F32 * n_rot_v * n_rot_v
                if n_rot_v:
                    v_rot.update(group)
        self.rot_bytes = (rot_bytes[0], rot_bytes[1])
        self.v_rot_bytes = (v_rot_bytes[0], v_rot_bytes[1])
        self.v_rot = frozenset(v_rot)

        skip = 1 if profile.traits.graph.embd_skip else 0
        below_logits = _below_logits(profile, trunk[-1], n_tok) if trunk else 0
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
        self.hc_block = hc_block
        self.shapes = shapes
        self.ik_q = ik_q
        self.offload_gpu0 = offload_gpu0
        self.ffn_dev = ffn_dev
        self.ffn_by_dev = ffn_by_dev
        self.op_copy = op_copy
        self.skip = skip
        self.below_logits = below_logits

    def dsa_zeros(self, layers: list[int]) -> int:
        # every full-attention layer's attention takes the top-k mask (a shared-indexer layer reuses another's
        # indices, but builds its own mask); sliding-window layers have none
        return F32 * self.n_tok * len(_attn_layers(self.profile, layers)[0]) if self.dsa_top_k else 0

    def indexer_scores(self, layers: list[int]) -> _IndexerScores | None:
        """The DSA lightning indexer's peak on a backend running `layers` (None without an indexer layer)."""
        indexed = [il for il in layers if self.profile.layers[il].has_indexer]
        if not (self.idx_q and indexed) or self.inputs.ik_attention:
            return None
        query = F32 * self.n_tok * self.idx_heads * self.profile.indexer_head_size
        kq = 0 if self.fa else F32 * self.n_tok * max(self.profile.layers[il].n_head for il in indexed)
        rotated = self.profile.traits.graph.indexer_rotation
        head = self.profile.indexer_head_size
        # the indexer cache's rotation input `attn_inp_k_rot` [n_rot, n_rot] f32 (llama-kv-cache.cpp builds it
        # for these architectures whatever the cache type), a graph input live through the graph
        rot = F32 * _rotation_size(head) ** 2 if rotated and head % HADAMARD_MIN == 0 else 0
        return _IndexerScores(
            self.idx_q - 2 * query + rot, query, self.n_tok, self.dsa_top_k, kq, 1 if rotated else 2
        )

    def kpool_selection(self, layers: list[int]) -> _KpoolSelection | None:
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
        return _KpoolSelection(
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
        """glm5-next's first layer without flash attention (`_KpoolSelection.first_layer`), where this backend runs
        the graph's first layer and it is a k-pool layer: its MLA rows per token (src/models/glm5-next.cpp
        `build_dsa_layer`: q_resid `[q_lora_rank]`, `q` `[n_head x key_length_mla]`, the absorbed query
        `[kv_lora_rank x n_head]` and the compressed KV row `[kv_lora_rank + n_rot]`), V's copy per cell and the
        streams counted beyond `hc_init`; ((), 0, 0) elsewhere."""
        mla = self.profile.mla
        v_copy = self.mla_v(layers)
        first = bool(self.trunk) and layers[0] == self.trunk[0] == indexed[0]
        if graph is not KpoolGraph.GATHER_MASK or self.fa or mla is None or not mla.q_lora_rank or not first:
            return (), 0, 0
        if v_copy.room or v_copy.a_swa or v_copy.c or self.inputs.ik_attention:
            return (), 0, 0
        h = self.profile.layers[indexed[0]].n_head
        stream = F32 * self.n_tok * _hc_width(self.profile)
        rows = (mla.q_lora_rank, h * mla.key_length_mla, h * mla.kv_lora_rank, mla.kv_lora_rank + mla.n_rot)
        return rows, v_copy.a_base, self.hc_block - stream if self.hc_block else 0

    def dsv4(self, layers: list[int]) -> _Dsv4Attention | None:
        """DeepSeek-V4's compressed attention on a backend running `layers` (None without a CSA layer there)."""
        profile = self.profile
        if not profile.traits.graph.dsv4_attention:
            return None
        csa = [il for il in layers if profile.layers[il].compress_ratio == DSV4_CSA_RATIO]
        if not csa:
            return None
        lp = profile.layers[csa[0]]
        head = profile.indexer_head_size
        return _Dsv4Attention(
            n_tok=self.n_tok,
            flash_attn=self.fa,
            csa_layers=sum(1 for il in csa if profile.layers[il].has_indexer),
            hca=any(profile.layers[il].compress_ratio == DSV4_HCA_RATIO for il in layers),
            top_k=profile.indexer_top_k,
            query=F32 * self.n_tok * max(self.idx_rows.get(il, 0) for il in csa),
            rot=F32 * _rotation_size(head) ** 2 if head % HADAMARD_MIN == 0 else 0,
            n_head=lp.n_head,
            head_v=lp.n_embd_head_v,
            block=self.embd_block,
        )

    def masks(self, layers: list[int]) -> Affine:
        if not self.profile.has_memory:
            return Affine(c=self.mask_elt * self.n_tok * self.n_tok) if layers else Affine()
        base, swa = _attn_layers(self.profile, layers)
        lid = (
            F16 * self.n_tok
            if self.idx_q and any(self.profile.layers[il].has_indexer for il in layers)
            else 0
        )
        return Affine(
            a_base=(self.mask_elt * self.n_tok if base else 0) + lid,
            a_swa=self.mask_elt * self.n_tok if swa else 0,
        )

    def ik_groups(self, layers: list[int]) -> tuple[tuple[bool, int], ...]:
        self.ik_q.clear()
        self.kq(layers)
        return tuple(sorted(self.ik_q))

    def kq(self, layers: list[int], replayed: frozenset[int] = frozenset()) -> tuple[Affine, ...]:
        """The attention's live set on a backend running `layers`: one Affine per distinct layer shape (the
        recurrent layers in `replayed` are counted by `ssm_after` instead)."""
        base, swa = _attn_layers(self.profile, layers)
        out: set[Affine] = set()
        for group, is_swa in ((base, False), (swa, True)):
            for il in group:
                self._kq_layer(il, is_swa, out)
        self._recurrent_terms([il for il in layers if il not in replayed], bool(base or swa), out)
        if (
            self.idx_q
            and self.inputs.ik_attention
            and any(self.profile.layers[il].has_indexer for il in layers)
        ):
            out.add(Affine(c=self.idx_q))  # mainline's indexer peak: `indexer_scores`
        msa = self._msa_mask(layers)
        if msa is not None:
            out.add(msa)
        iq = max((self.idx_rows.get(il, 0) for il in layers), default=0)
        if iq and not self.profile.traits.graph.dsv4_attention:  # DeepSeek-V4's: `_Dsv4Attention.transient`
            out.add(Affine(c=self.profile.traits.graph.indexer_q_copies * F32 * self.n_tok * iq))
        if self.profile.traits.graph.parallel_attn_ffn and (base or swa) and self.fa:
            # the norm output feeds the FFN after the attention: it stays live through it (phi2's allocator
            # peak: Q, K and V above the norm output); without flash attention the recordings match without it
            out = {Affine(a.a_base, a.a_swa, a.c + self.embd_block) for a in out}
        return tuple(sorted(out, key=lambda x: (x.a_base, x.a_swa, x.c)))

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

    def _kq_layer(self, il: int, is_swa: bool, out: set[Affine]) -> None:
        """One attention layer's live set (added to `out`); ik's chunked groups go to `self.ik_q`."""
        lp = self.profile.layers[il]
        # Q (permuted, in the cache's K row width) is live while the attention runs; MLA adds the
        # absorbed q_nope [kv_lora_rank, n_head, n_tok].
        mla = self.profile.mla
        if mla is not None and self._replayed_mla():
            self._deepseek2_mla_layer(lp, mla, is_swa, out)
            return
        q = F32 * self.n_tok * lp.n_head * lp.n_embd_head_k
        if mla is not None:
            q += F32 * self.n_tok * lp.n_head * mla.kv_lora_rank
        if il in self.kv_a_mqa:
            # Q [n_head x head_k, n_tok], the compressed KV with its rope part [kv_a_mqa rows, n_tok]
            # and the normed latent [kv_lora, n_tok] (minicpm3 smoke model's peak: 0.5 + 1.25 + 1.0 MiB)
            rows, lora = self.kv_a_mqa[il]
            out.add(Affine(c=F32 * self.n_tok * (lp.n_head * lp.n_embd_head_k + rows + lora)))
        if self.profile.mla is not None and self.profile.traits.graph.kimi_mla:
            out.add(self._kimi_mla_concat(lp, self.profile.mla))
        if not self.profile.has_memory:
            # no cache: this batch's K and V [n_embd_{k,v}_gqa, n_tok] feed the attention directly
            q += F32 * self.n_tok * (lp.n_embd_k_gqa + lp.n_embd_v_gqa)
        qkv = self.shapes.qkv_rows.get(il, 0)
        if qkv and not self.fa and self.profile.traits.graph.no_rope_qkv:
            q = F32 * self.n_tok * qkv  # Q stays a view of the fused QKV output: all of it stays live
        if qkv:
            # a fused QKV projection's output [n_q + 2 n_kv, n_tok] is live as a whole before the split
            above = 0
            if (
                self.fa
                and self.profile.traits.graph.no_rope_qkv
                and il - 1 in self.shapes.gated
                and qkv > FFN_HOLE_BLOCKS * self.profile.n_embd
            ):
                # after a gated FFN the blocks leave a two-block hole the output does not fit, and the layer's
                # norm output sits in the token rows' freed block: one block more than in the first layer (the
                # allocator's peak on the jais smoke model at c512: inp_embd, norm-1, the hole, node_2, the
                # previous layer's output and node_43, the 1.5 MiB QKV, on top: 5.02 MiB)
                above = self.profile.n_embd
            if il in self.v_rot and not self.profile.traits.graph.no_rope_qkv:
                # V is a view of the projection: its rotation (`llama_mul_mat_hadamard`, src/llama-impl.h) copies
                # it (`ggml_cont_2d`) and multiplies the copy, and `llm_graph_context::build_attn` expands Q, then
                # V, then K, so the projection is still live for K: the rotated Q and V's copy take the token rows'
                # and the attention norm's freed blocks, V's product goes above the projection (the allocator's
                # peak on the plamo2 smoke model with q4_0 caches at c8192: `wqkv-0`, then `node_16` on top;
                # the unroped views of jais are within 0.1% without it)
                above += lp.n_embd_v_gqa
            out.add(Affine(c=F32 * self.n_tok * (qkv + above)))
        elif self.profile.mla is None:
            # Q, K and V are all live until K and V are stored into the cache; the smaller of K and V
            # goes into the one-block hole the mixed batch's token rows leave (freed after the first
            # layer's input is assembled)
            kv_min = min(lp.n_embd_k_gqa, lp.n_embd_v_gqa)
            q_k_v = lp.n_head * lp.n_embd_head_k + lp.n_embd_k_gqa + lp.n_embd_v_gqa
            out.add(Affine(c=F32 * self.n_tok * (q_k_v - (kv_min if kv_min <= self.profile.n_embd else 0))))
        if self.fa:
            # flash attention: its output [n_embd_head_v, n_head, n_tok] next to Q, no scores
            out.add(Affine(c=q + F32 * self.n_tok * lp.n_head * lp.n_embd_head_v))
            if self.inputs.fork_graph is not None and self.inputs.fork_graph.has_mla(self.profile):
                self.ik_q.add((is_swa, q))  # ik's decompressed MLA product (mla 2/3), in -amb chunks
            return
        a = F32 * self.n_tok * lp.n_head  # KQ scores [n_kv, n_tok, n_head], softmax in place
        if qkv and not self.profile.traits.graph.no_rope_qkv:
            # the roped Q of a fused projection takes the attention norm's block (the norm has one
            # reader, freed before the QKV output is split): only what exceeds a block is added
            q = max(0, q - F32 * self.n_tok * self.profile.n_embd)
        if self.inputs.ik_attention and self.profile.has_memory:
            self.ik_q.add((is_swa, q))  # the scores come in -amb chunks (ik_groups)
            return
        if not self.profile.has_memory:
            out.add(Affine(c=a * self.n_tok + q))
        elif is_swa:
            out.add(Affine(a_swa=a, c=q))
        else:
            out.add(Affine(a_base=a, c=q))

    def _replayed_mla(self) -> bool:
        """Mainline's graph of src/models/deepseek2.cpp with the absorbed MLA query, whose attention is replayed
        through the allocator (`_absorbed_mla_attention`); a fork's MLA modes are modelled by the fork."""
        return self.profile.traits.graph.deepseek2_mla and self.inputs.fork_graph is None

    def _deepseek2_mla_layer(self, lp: LayerProfile, mla: MlaParams, is_swa: bool, out: set[Affine]) -> None:
        """The attention terms of an absorbed-MLA layer: the replayed peak, and without flash attention the KQ
        scores `[n_kv, n_tok, n_head]` (softmax in place) above the replay's end unless they fit into its
        largest free block (short contexts: the space the query's parts left under Qcur)."""
        hole = self.embd_block + (I32 + I64) * self.n_tok  # the mixed batch's token rows, tokens and slots
        peak, end, room = _absorbed_mla_attention(self.profile, lp, mla, self.n_tok, self.fa, hole)
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
            if self.fa or self.inputs.ik_attention
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
        base, swa = _attn_layers(self.profile, layers)
        if not (base or swa) or not (m.a_base or m.a_swa or m.c or vi):
            return none
        if self.profile.traits.graph.parallel_attn_ffn or any(
            self.profile.layers[il].kind is LayerKind.HYBRID for il in layers
        ):
            return none
        last = max(base + swa)
        post = frozenset(il for il in layers if il > last and self.profile.layers[il].is_recurrent)
        ops = _mamba_ops(self.profile, self.n_tok, self.inputs.n_seqs) if post else ()
        if not ops:
            return none
        return post, ops, Affine(m.a_base, m.a_swa, m.c + vi)

    def _attention_only_before_ssm(self, layers: list[int]) -> bool:
        """Whether the device's last attention layer, before the replayed Mamba blocks, has no FFN."""
        base, swa = _attn_layers(self.profile, layers)
        if not (base or swa):
            return False
        lp = self.profile.layers[max(base + swa)]
        return self.fa and not lp.n_ff and not lp.is_moe

    def _recurrent_terms(self, layers: list[int], attends: bool, out: set[Affine]) -> None:
        """The recurrent blocks' live sets (Mamba scans, lightning attention, gated delta nets), added to `out`."""
        # Hybrid layers (falcon-h1) run attention and the SSM side by side from one norm output: the masks
        # stay live through the SSM and the attention output waits for it.
        parallel = any(self.profile.layers[il].kind is LayerKind.HYBRID for il in layers)
        ssm = _ssm_transient(self.profile, self.n_tok, self.inputs.n_seqs, attends and not parallel)
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
                    out.add(Affine(c=F32 * (4 * dim * self.n_tok + 2 * sq)))
        gdn = _gdn_transient(self.profile, self.n_tok, self.inputs.n_seqs)
        if gdn and any(self.profile.layers[il].is_recurrent for il in layers):
            out.add(Affine(c=gdn))

    def mla_v(self, layers: list[int]) -> Affine:
        if self.inputs.fork_graph is not None:
            # ik's kv_cache_trans (-mla 2/3 without flash attention, in the latent's type: -ctv), or none
            row = self.inputs.fork_graph.mla_v_copy_row(
                self.profile, self.inputs.ik_mla_mode, self.fa, self.inputs.cache_type_v
            )
            has = row and _attn_layers(self.profile, layers)[0]
            return Affine(a_base=row * self.inputs.n_stream) if has else Affine()
        if self.fa or self.profile.mla is None or not _attn_layers(self.profile, layers)[0]:
            return Affine()
        # the contiguous copy of V (the latent rows of every stream's cells)
        mla = self.profile.mla
        row = row_bytes(kv_type_id(self.inputs.cache_type_k), mla.kv_lora_rank)
        if self._replayed_mla():
            # it is made after the KQ scores, which free Qcur `[kv_lora_rank + n_rot, n_head, n_tok]`: it goes
            # into that space while it fits (the deepseek2 smoke model at c512 without flash attention: 5.52 MiB
            # with the 0.5 MiB copy inside Qcur's freed 1.125 MiB)
            heads = max(
                (self.profile.layers[il].n_head for il in _attn_layers(self.profile, layers)[0]), default=0
            )
            qcur = F32 * self.n_tok * heads * (mla.kv_lora_rank + mla.n_rot)
            return Affine(a_base=row * self.inputs.n_stream, room=qcur)
        return Affine(a_base=row * self.inputs.n_stream)

    def v_idxs(self, layers: list[int]) -> int:
        if self.inputs.ik_attention:
            return 0  # ik stores V through a view at kv_head: no index input (its allocator lists none)
        if self.fa or not self.profile.has_memory or self.profile.mla is not None:
            return 0  # MLA caches have no V: V is a view of the latent K rows
        base, swa = _attn_layers(self.profile, layers)
        # one per cache (an iSWA model has two: the base and the SWA cache's)
        return I64 * self.n_tok * self.v_gqa_max * ((1 if base else 0) + (1 if swa else 0))

    def small_inputs(self, layers: list[int]) -> int:
        base, swa = _attn_layers(self.profile, layers)
        if not (base or swa) or not self.profile.has_memory:
            return 0
        # positions (i32) and K's row indices (i64); V's (i64) too with flash attention (else `v_idxs`); the
        # Hadamard rotations of the caches the layers read
        rot = (self.rot_bytes[0] if base else 0) + (self.rot_bytes[1] if swa else 0)
        return self.n_tok * (SMALL_INPUT_BYTES_PER_TOKEN - (0 if self.fa else I64)) + rot

    def fa_copies(self, layers: list[int]) -> tuple[Affine, ...]:
        if not self.fa or (self.inputs.cache_type_k == "f16" and self.inputs.cache_type_v == "f16"):
            return ()
        base, swa = _attn_layers(self.profile, layers)
        out: set[Affine] = set()
        for il in base + swa:
            lp = self.profile.layers[il]
            k = F16 * lp.n_embd_k_gqa if self.inputs.cache_type_k != "f16" else 0
            v = F16 * lp.n_embd_v_gqa if self.inputs.cache_type_v != "f16" else 0
            out.add(Affine(a_swa=k + v) if lp.is_swa else Affine(a_base=k + v))
        return tuple(sorted(out, key=lambda x: (x.a_base, x.a_swa)))

    def ffn_holes(
        self, layers: list[int], flayers: list[int], m: Affine, vi: int
    ) -> tuple[int, tuple[tuple[int, int, int, tuple[Affine, ...]], ...]]:
        """The FFN transient of the layers that cannot reuse freed inputs, and (FFN, first intermediate, hole)
        of those that can: a mask and V's indices are freed after the last layer that reads them, so that
        layer's FFN can put its first intermediate in their space (with the device's input block, freed after
        its first layer, next to them)."""
        base, swa = _attn_layers(self.profile, layers)
        # parallel attention/FFN blocks too: their waiting attention output is in the FFN's own hole
        # (`_ffn_layer`), and the freed inputs take the FFN (the cohere2moe smoke model at c512 without flash
        # attention: the fused gate_up and the GLU output inside the freed f32 masks and V's indices, 9.02 MiB)
        if not (m.a_base or m.a_swa or m.c or vi) or not (base or swa):
            return _ffn_transient(self.profile, flayers, self.n_tok, self.v_rot), ()
        v_one = vi // ((1 if base else 0) + (1 if swa else 0))
        rest: list[int] = []
        holes: set[tuple[int, int, int, tuple[Affine, ...]]] = set()
        big = len(self.profile.layers)
        last_base = max(base, default=-1) if base else big
        last_swa = max(swa, default=-1) if swa else big
        for il in flayers:
            # inputs freed by the end of this layer's attention (freed neighbours merge into one block)
            freed_base, freed_swa = il >= last_base, il >= last_swa
            if not (freed_base or freed_swa):
                rest.append(il)
                continue
            f, first, held = _ffn_layer(self.profile, il, self.n_tok, il in self.v_rot)
            # the mixed batch's token rows, freed after the first layer's input is assembled; with the residual
            # added into the layer input (lfm2) they are free by the first layer's FFN already, next to the mask;
            # with parallel attention and FFN a MoE layer's attention output waits for the FFN in that block (the
            # cohere2moe smoke model with four streams: `node_73` next to inp_embd, the freed masks above it)
            first_layer = il == min(layers) and not self.profile.traits.graph.residual_into_input
            parallel = self.profile.traits.graph.parallel_attn_ffn
            freed_input = 0 if first_layer or (parallel and self.profile.is_moe) else self.embd_block
            hole = Affine(
                m.a_base if freed_base else 0,
                m.a_swa if freed_swa else 0,
                (m.c if freed_base else 0) + v_one * (int(freed_base) + int(freed_swa)) + freed_input,
            )
            alts: tuple[Affine, ...] = (hole,)
            if freed_base and freed_swa and parallel and any(self.rot_bytes):
                # the caches' rotation inputs sit between the two masks: the freed masks are two blocks, the FFN
                # takes the better one (the cohere2moe smoke model with q8_0 caches: `attn_inp_v_rot` between the
                # freed 6.2 and 8.03 MiB, the 12 MiB fused gate-and-up output above both)
                alts = (
                    Affine(m.a_base, 0, m.c + v_one + freed_input),
                    Affine(0, m.a_swa, v_one + freed_input),
                )
            holes.add((f, first, held, alts))
        key = lambda h: (h[0], h[1], h[2], tuple((a.a_base, a.a_swa, a.c) for a in h[3]))  # noqa: E731
        return _ffn_transient(self.profile, rest, self.n_tok, self.v_rot), tuple(sorted(holes, key=key))

    def _pipeline_inputs(self, layers: list[int], first: bool, has_out: bool, m: Affine, vi: int) -> Affine:
        """Every split input is held PIPELINE_COPIES times below the rest of the graph: the masks, V's indices,
        the small inputs, the hidden-state blocks, and the output ids on the output GPU. The layer phase then
        adds its own blocks; the output phase its norm output and the logits."""
        pp_small = self.small_inputs(layers) + (I32 * self.n_out if has_out else 0)
        if first:
            pp_small += I64 * self.n_tok  # the mixed batch's slots: its rows are set on the first GPU
        hidden = (PP_INPUT_BLOCKS_FIRST if first else PP_INPUT_BLOCKS_OTHER) * self.embd_block
        return Affine(
            PIPELINE_COPIES * m.a_base,
            PIPELINE_COPIES * m.a_swa,
            PIPELINE_COPIES * (m.c + vi + pp_small + hidden),
        )

    def _expert_copy_terms(
        self, gi: int, layers: list[int], flayers: list[int], kq_gi: tuple[Affine, ...], ffn_rest: int
    ) -> tuple[tuple[Affine, ...], int]:
        """What the layers between a copied expert layer and the last attention layer allocate over the hole
        under the masks (`_expert_copy_hole`): the attention terms and the FFN transient, raised to it."""
        copy_hole, e, last_att = _expert_copy_hole(
            self.profile, self.placement.layer_device, self.ffn_dev, gi, layers, self.n_tok
        )
        if not copy_hole:
            return kq_gi, ffn_rest
        held_set = {Affine(c=copy_hole)}
        gdn = _gdn_transient(self.profile, self.n_tok, self.inputs.n_seqs)
        if gdn and any(self.profile.layers[il].is_recurrent for il in layers if e < il <= last_att):
            out = _gdn_output(self.profile, self.n_tok, self.inputs.n_seqs)
            held_set.add(Affine(c=_in_hole(gdn - out, out, copy_hole)))
        kq_gi = tuple(sorted(set(kq_gi) | held_set, key=lambda x: (x.a_base, x.a_swa, x.c)))
        ffn_rest = max(
            [ffn_rest]
            + [_ffn_in_hole(self.profile, il, self.n_tok, copy_hole) for il in flayers if e < il < last_att]
        )
        return kq_gi, ffn_rest

    def gpu_plan(self, gi: int) -> _DevicePlan:
        """The compute plan of GPU `gi`."""
        layers = self.by_dev.get(gi, [])
        flayers = self.ffn_by_dev.get(gi, [])
        has_out = self.out_dev == gi
        runs = bool(layers or flayers)
        # The GPU that runs the first layer takes the embeddings from the host: it holds the same residual
        # blocks as a single backend does (the recordings with one RPC device show five).
        first = bool(self.trunk) and self.placement.layer_device[self.trunk[0]] == gi
        cuda = self.gpu_vendors[gi] in (Vendor.NVIDIA, Vendor.AMD, Vendor.GENERIC)
        pp = self.inputs.pipeline_parallel and (runs or has_out)
        m = self.masks(layers)
        # the copies of the small split inputs: positions, K/V row indices, the output ids
        small = self.small_inputs(layers) + (I32 * self.n_out if has_out else 0) if runs and not pp else 0
        vi = self.v_idxs(layers) if runs else 0
        blocks = (_residual_blocks(self.profile) if first else GPU_LAYER_BLOCKS) + self.skip if runs else 0
        if first and layers and not flayers and not self.profile.is_moe:
            blocks -= FFN_HOLE_BLOCKS  # the FFNs run elsewhere (-ot): no FFN norm hole here
        out_blocks = RESIDUAL_BLOCKS if first else 1
        # a later GPU that runs the last layer: what of that layer's FFN stays under the logits
        out_extra = (
            self.below_logits
            if not first and self.trunk and self.placement.layer_device[self.trunk[-1]] == gi
            else 0
        )
        if has_out and not first and not out_extra and self.trunk and layers and layers[-1] == self.trunk[-1]:
            out_extra = _mamba2_split_below_logits(
                self.profile, layers, self.ffn_dev.get(self.trunk[-1], gi) == gi, self.n_tok
            )
        if has_out and not runs and self.trunk:
            out_extra = _routed_sum_inputs(self.profile, self.trunk[-1], self.n_tok)
        pp_extra = Affine()
        if pp:
            pp_extra = self._pipeline_inputs(layers, first, has_out, m, vi)
            m, vi = Affine(), 0
            blocks = PP_LAYER_BLOCKS_FIRST if first else PP_LAYER_BLOCKS_OTHER
            out_blocks = PP_OUTPUT_BLOCKS_FIRST if first else 1
            out_extra = 0
        ffn_rest, holes = self.ffn_holes(layers, flayers, Affine(m.a_base, m.a_swa, m.c + small), vi)
        replayed, ssm_ops, ssm_hole = self.ssm_after(layers, Affine(m.a_base, m.a_swa, m.c + small), vi)
        kq_gi = self.kq(layers, replayed)
        shexp_ffn = _shexp_only_ffn(
            self.profile, [il for il in layers if self.ffn_dev.get(il, gi) != gi], self.n_tok
        )
        if shexp_ffn and first:
            # the first GPU holds four block-sized spaces in that phase, not five (the allocator's peaks on
            # qwen3-30b-a3b and Llama-4-Scout with `-cmoe`; gpt-oss-20b's recording matches to the 0.01 MiB)
            shexp_ffn -= self.embd_block
        if shexp_ffn > ffn_rest:
            ffn_rest = shexp_ffn
        if runs and not pp:
            kq_gi, ffn_rest = self._expert_copy_terms(gi, layers, flayers, kq_gi, ffn_rest)
        return _DevicePlan(
            device=gi,
            layer_phase=runs,
            masks=m if runs else Affine(),
            v_idxs=vi,
            small_inputs=small,
            blocks_label="layer input + residual",
            blocks=blocks * self.embd_block + (self.hc_block if layers else 0) if runs else 0,
            ffn=ffn_rest,
            ffn_holes=holes,
            ik_groups=self.ik_groups(layers) if self.inputs.ik_attention else (),
            dsa_zeros=self.dsa_zeros(layers),
            dsa_top_k=self.dsa_top_k,
            dsv4=self.dsv4(layers) if runs else None,
            indexer=self.indexer_scores(layers) if runs else None,
            kpool=self.kpool_selection(layers) if runs else None,
            kq=kq_gi,
            mla_v=self.mla_v(layers),
            fa_copies=self.fa_copies(layers) if cuda else (),
            logits=self.logits if has_out else 0,
            out_block=out_blocks * self.embd_block if has_out else 0,
            out_below=out_extra if has_out else 0,
            ssm_ops=ssm_ops,
            ssm_hole=ssm_hole,
            ssm_block=self.embd_block,
            ssm_residual_in_input=self.profile.traits.graph.residual_into_input
            or self.profile.traits.graph.plamo2_mamba,
            ssm_after_attention_only=self._attention_only_before_ssm(layers),
            # jamba's Mamba-1 block in graph order over its freed inputs, as on the host
            ssm_lead=self._jamba_lead(layers, m)
            if ssm_ops
            and self.profile.traits.graph.residual_into_input
            and not self.profile.traits.graph.plamo2_mamba
            else None,
            pp_extra=pp_extra,
            op_offload_copy=self.op_copy if gi == 0 else 0,
            host_inputs=False,
        )

    def _host_blocks(
        self, runs: bool, has_layers: bool, ffn_only: bool, experts_only: bool, n_copies: int, host_small: int
    ) -> tuple[int, str]:
        """The host's block-sized activations and their label."""
        if runs:
            if experts_only:
                blocks = HOST_GRAPH_INPUT_BLOCKS * self.embd_block
            elif not ffn_only:
                blocks = (
                    (_residual_blocks(self.profile) + self.skip) if has_layers else HOST_INPUT_BLOCKS
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
            if n_copies > 1:
                blocks += n_copies * host_small
            label = "embeddings input + get_rows"
        return blocks, label

    def host_plan(self) -> _DevicePlan:
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
        host_m = Affine(
            n_copies * m.a_base, n_copies * m.a_swa, n_copies * m.c + (host_small if n_copies == 1 else 0)
        )
        # the host's masks are graph inputs the GPUs copy from: they are freed early only when the host runs the
        # last layer
        host_last = bool(self.trunk) and self.placement.layer_device[self.trunk[-1]] is None
        ffn_rest, holes = self.ffn_holes(
            host_layers,
            host_flayers,
            host_m if host_last else Affine(),
            n_copies * self.v_idxs(self.trunk) if host_last else 0,
        )
        replayed, ssm_ops, ssm_hole = self.ssm_after(
            host_layers,
            host_m if host_last else Affine(),
            n_copies * self.v_idxs(self.trunk) if host_last else 0,
        )
        if experts_only and self.profile.moe is not None and host_flayers:
            # the router's argsort [n_expert, n_tok] (i32; the top-k is a view of it) is copied in for the experts;
            # llama4's router-weighted input is a copy here too, freed once gate and up have read it (the
            # allocator's peak on Llama-4-Scout with `-cmoe`: the two masks, gate, up and the GLU output above the
            # embeddings input and a one-block hole)
            ffn_rest = max(
                f - held for f, _, held in (_ffn_layer(self.profile, il, self.n_tok) for il in host_flayers)
            )
            ffn_rest += I32 * self.n_tok * self.profile.moe.n_expert
            holes = ()
        return _DevicePlan(
            device=None,
            layer_phase=runs,
            masks=Affine(n_copies * m.a_base, n_copies * m.a_swa, n_copies * m.c),
            v_idxs=n_copies * self.v_idxs(self.trunk),
            small_inputs=host_small if n_copies == 1 else 0,
            blocks_label=label,
            blocks=blocks,
            ffn=ffn_rest,
            ffn_holes=holes,
            ik_groups=self.ik_groups(host_layers) if self.inputs.ik_attention else (),
            dsa_zeros=self.dsa_zeros(host_layers),
            dsa_top_k=self.dsa_top_k,
            dsv4=self.dsv4(host_layers),
            indexer=self.indexer_scores(host_layers),
            kpool=self.kpool_selection(host_layers),
            kq=self.kq(host_layers, replayed)
            if not (ffn_only or experts_only)
            else (Affine(c=(HOST_INPUT_BLOCKS - HOST_GRAPH_INPUT_BLOCKS) * self.embd_block),),
            mla_v=self.mla_v(host_layers),
            fa_copies=(),
            logits=self.logits if self.out_dev is None else 0,
            out_block=self.embd_block if self.inputs.ik_attention and self.out_dev is None else 0,
            ik_output_phase=self.inputs.ik_attention,
            ssm_ops=ssm_ops,
            ssm_hole=ssm_hole,
            ssm_block=self.embd_block,
            ssm_residual_in_input=self.profile.traits.graph.residual_into_input
            or self.profile.traits.graph.plamo2_mamba,
            ssm_after_attention_only=self._attention_only_before_ssm(host_layers),
            ssm_lead=self._ssm_lead(host_layers, m) if ssm_ops and host_last and n_copies == 1 else None,
            logits_room=self._logits_room(host_layers) if host_last and n_copies == 1 else (),
            pp_extra=Affine(),
            op_offload_copy=0,
            host_inputs=not runs,
        )

    def _logits_room(self, layers: list[int]) -> tuple[Affine, ...]:
        """The masks of `layers` (one per cache the attention layers read: base and SWA), each a block the logits
        can take once it is freed (`_DevicePlan.logits_on_top`)."""
        if not self.profile.has_memory:
            return ()
        base, swa = _attn_layers(self.profile, layers)
        one = self.mask_elt * self.n_tok
        return tuple(a for a, used in ((Affine(a_base=one), base), (Affine(a_swa=one), swa)) if used)

    def _ssm_lead(self, layers: list[int], m: Affine) -> _SsmLead | None:
        """The host's space around its last attention layer for `_DevicePlan.ssm_after` (flash attention, a dense
        FFN or none in that layer, the Mamba blocks' input not kept in the input's block; jamba's Mamba-1 blocks
        with or without flash attention, `_jamba_lead`); None elsewhere."""
        graph = self.profile.traits.graph
        if graph.residual_into_input and not graph.plamo2_mamba:
            return self._jamba_lead(layers, m)
        if not self.fa or graph.residual_into_input or graph.plamo2_mamba:
            return None
        base, swa = _attn_layers(self.profile, layers)
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
        return _SsmLead(
            mask=m,
            low=(2 * I32 + I64) * self.n_tok + self.rot_bytes[0] - v_rot,
            v_rot=v_rot,
            idxs=2 * I64 * self.n_tok,
            ffn=F32 * lp.n_ff * self.n_tok if lp.n_ff else 0,
            gated=gated,
        )

    def _jamba_lead(self, layers: list[int], m: Affine) -> _SsmLead | None:
        """Jamba's graph inputs around its last attention layer (`_DevicePlan._ssm_after_residual`): the mixed
        batch's tokens (i32) and slots (i64), no positions (src/models/jamba.cpp uses no RoPE), the rotations, K's
        row indices and V's (i64 per token with flash attention, per element without it, `v_idxs`)."""
        ssm = self.profile.ssm
        base, swa = _attn_layers(self.profile, layers)
        if ssm is None or ssm.n_group or swa or not base:
            return None
        v_rot = self.v_rot_bytes[0]
        return _SsmLead(
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


class ComputePlan:
    """Everything the compute buffers depend on except the KV cells, resolved once for a placement.

    `evaluate(n_kv_base, n_kv_swa)` is a handful of integer operations per backend, so a whole context curve is
    cheap; `compute_buffers` is the one-shot form.
    """

    def __init__(
        self,
        profile: ModelProfile,
        inputs: ComputeInputs,
        placement: WeightPlacement,
        gpu_vendors: tuple[Vendor, ...] = (),
    ) -> None:
        self.inputs = inputs
        b = _PlanBuilder(profile, inputs, placement, gpu_vendors)
        self.plans = (*(b.gpu_plan(gi) for gi in range(len(gpu_vendors))), b.host_plan())
        self._profile = profile
        self._ik_gpu_backend = len(gpu_vendors) > 0

    def evaluate(self, n_kv_base: int, n_kv_swa: int) -> tuple[ComputeBuffer, ...]:
        return tuple(_evaluate(p, n_kv_base, n_kv_swa, self._ik(p, n_kv_base, n_kv_swa)) for p in self.plans)

    def _ik(self, p: _DevicePlan, nb: int, ns: int) -> int:
        """ik_llama.cpp's attention at its peak, largest over the device's attention groups: an MLA model's own
        graph (`ik_compute.ik_mla_attention`), else mainline's Q with ik's chunked intermediate."""
        ci = self.inputs
        out = 0
        graph = ci.fork_graph
        if graph is None:
            return out
        for is_swa, q in p.ik_groups:
            peak = graph.attention_peak(
                self._profile,
                ns if is_swa else nb,
                ci.n_tok,
                q,
                mla_mode=ci.ik_mla_mode,
                flash_attn=ci.flash_attn,
                amb_mib=ci.ik_amb_mib,
                cache_type=ci.ik_type_k or ci.cache_type_k,
                gpu_backend=self._ik_gpu_backend,
            )
            out = max(out, peak)
        return out

    def totals_array(self, n_kv_base: NDArray[np.int64], n_kv_swa: NDArray[np.int64]) -> NDArray[np.int64]:
        """Bytes per backend (rows: GPUs in order, then the host) for arrays of KV cells: the vectorised form of
        `evaluate`, term for term (tests check they agree)."""
        rows = []
        for p in self.plans:
            ik = None
            if p.ik_groups:
                ik = np.array(
                    [self._ik(p, int(b), int(w)) for b, w in zip(n_kv_base, n_kv_swa, strict=True)],
                    dtype=np.int64,
                )
            rows.append(_total_array(p, n_kv_base, n_kv_swa, ik))
        return np.stack(rows)


def _reuse(first: int, held: int, room: int, f: int = 0) -> int:
    """What of the FFN's intermediates fits into the freed inputs' space: all of them (`f`, the whole set) when
    they fit there together, else the first intermediate and the held block (the larger first), and as many of
    the next first-sized intermediates as still fit behind them (the gemma3 smoke model at `-ub 2048`: gate and up
    in the freed 8 MiB SWA mask, the GLU output elsewhere).

    The graph allocator (ggml-alloc.c, `ggml_dyn_tallocr_alloc`) gives each tensor the smallest free block it fits
    in and takes the end of the buffer only when none does, so a freed mask larger than the whole FFN takes all of
    it: with a long context this is the FFN of every layer after the last attention layer, LFM2's short-conv
    layers for instance (the allocator's peaks on the lfm2moe smoke model at c8192: gate, up, the GLU output and
    the experts' outputs of the conv layer inside the freed 8 MiB mask, and the buffer's peak at the attention
    layer's Q, K and V next to the mask).
    """
    if f and f <= room:
        return f
    if first + held <= room:
        # the next intermediates of the first's size (up after gate) follow it there while they fit
        more = min((room - first - held) // first, (f - first - held) // first) if first and f else 0
        return first + held + max(0, more) * first
    if first <= room:
        return first
    if f and f - first - held <= room and not held:
        # the first does not fit, what follows does (a fused gate-and-up output above the freed masks, the GLU
        # output in them: the cohere2moe smoke model with four streams at c8192)
        return f - first
    return held if held <= room else 0


def _reuse_array(f: int, first: int, held: int, room: NDArray[np.int64]) -> NDArray[np.int64]:
    """`_reuse` over an array of rooms."""
    more = (
        np.maximum(0, np.minimum((room - first - held) // first, (f - first - held) // first))
        if first
        else np.zeros_like(room)
    )
    rest_fits = (f - first - held <= room) & (held == 0) & (f > 0)
    out: NDArray[np.int64] = np.where(
        f <= room,
        f,
        np.where(
            first + held <= room,
            first + held + more * first,
            np.where(
                first <= room,
                first,
                np.where(rest_fits, f - first, np.where(held <= room, held, 0)),
            ),
        ),
    )
    return out


def _last_ffn(p: _DevicePlan, nb: int, ns: int) -> int:
    return max(
        (
            f - max(_reuse(first, held, hole.at(nb, ns), f) for hole in alts)
            for f, first, held, alts in p.ffn_holes
        ),
        default=0,
    )


def _transient(p: _DevicePlan, nb: int, ns: int, ik: int = 0) -> tuple[str, int]:
    att = max(
        _max_at(p.kq, nb, ns),
        ik,
        p.ssm_after(nb, ns),
        p.dsv4.transient(nb, ns) if p.dsv4 is not None else 0,
        p.indexer.transient(nb) if p.indexer is not None else 0,
        p.kpool.transient(nb) if p.kpool is not None else 0,
    )
    ffn = max(p.ffn, _last_ffn(p, nb, ns))
    if att > ffn:
        scores = ik or (p.kq and any(a.a_base or a.a_swa for a in p.kq))
        return ("KQ scores + Q" if scores else "attention / SSM scan"), att
    return "FFN intermediates", ffn


def _aff(a: Affine, nb: NDArray[np.int64], ns: NDArray[np.int64]) -> NDArray[np.int64]:
    grow = a.a_base * nb + a.a_swa * ns
    if a.room:
        return np.where(grow <= a.room, 0, grow + a.c)
    return grow + a.c


def _max_aff(affs: tuple[Affine, ...], nb: NDArray[np.int64], ns: NDArray[np.int64]) -> NDArray[np.int64]:
    out = np.zeros_like(nb)
    for a in affs:
        out = np.maximum(out, _aff(a, nb, ns))
    return out


def _total_array(
    p: _DevicePlan, nb: NDArray[np.int64], ns: NDArray[np.int64], ik: NDArray[np.int64] | None = None
) -> NDArray[np.int64]:
    att = _max_aff(p.kq, nb, ns)
    if ik is not None:
        att = np.maximum(att, ik)
    dsv4_inputs = np.zeros_like(nb)
    if p.dsv4 is not None:
        att = np.maximum(att, p.dsv4.transient_array(nb, ns))
        dsv4_inputs = p.dsv4.inputs_array(nb)
    if p.indexer is not None:
        att = np.maximum(att, p.indexer.transient_array(nb))
    if p.kpool is not None:
        att = np.maximum(att, p.kpool.transient_array(nb))
        dsv4_inputs = dsv4_inputs + p.kpool.inputs_array(nb)
    if p.ssm_ops:
        ssm = [p.ssm_after(int(b), int(w)) for b, w in zip(nb.tolist(), ns.tolist(), strict=True)]
        att = np.maximum(att, np.array(ssm, dtype=np.int64))
    ffn = np.full_like(nb, p.ffn)
    for f, first, held, alts in p.ffn_holes:
        reuse = np.max(np.stack([_reuse_array(f, first, held, _aff(hole, nb, ns)) for hole in alts]), axis=0)
        ffn = np.maximum(ffn, f - reuse)
    trans = np.where(att > ffn, att, ffn)
    zeros: NDArray[np.int64] = np.minimum(nb, p.dsa_top_k) * p.dsa_zeros + dsv4_inputs
    if p.device is None:
        total = _aff(p.masks, nb, ns) + p.v_idxs + p.small_inputs + p.blocks + _aff(p.mla_v, nb, ns) + zeros
        if p.ik_output_phase and p.logits and p.layer_phase:
            host_layer = total + trans
            host_out = p.logits + p.out_block
            return np.where(host_layer >= host_out, host_layer, host_out)
        if p.logits:
            logits = np.full_like(nb, p.logits)
            for a in p.logits_room:
                logits = np.where(p.logits <= _aff(a, nb, ns), 0, logits)
            trans = np.where(logits >= trans, logits, trans) if p.layer_phase else logits
        elif not p.layer_phase:
            trans = np.zeros_like(nb)
        return total + trans
    out = p.logits + p.out_block + p.out_below
    if p.layer_phase:
        layer = (
            _aff(p.masks, nb, ns)
            + p.v_idxs
            + p.small_inputs
            + p.blocks
            + trans
            + _aff(p.mla_v, nb, ns)
            + _max_aff(p.fa_copies, nb, ns)
            + zeros
        )
        phase = np.where(layer >= out, layer, out)
    else:
        phase = np.full_like(nb, out)
    return phase + _aff(p.pp_extra, nb, ns) + p.op_offload_copy


def _evaluate(p: _DevicePlan, nb: int, ns: int, ik: int = 0) -> ComputeBuffer:
    parts: list[ComputePart]
    if p.device is None:
        parts = [
            ComputePart("masks", p.masks.at(nb, ns)),
            ComputePart("v_idxs", p.v_idxs),
            ComputePart("token ids, positions, indices", p.small_inputs),
            ComputePart(p.blocks_label, p.blocks),
            ComputePart("MLA V copy", p.mla_v.at(nb, ns)),
            ComputePart("DSA top-k zeros", p.zeros_at(nb)),
            ComputePart("compressed-attention masks", p.dsv4.inputs(nb) if p.dsv4 is not None else 0),
            ComputePart("k-pool inputs", p.kpool.inputs(nb) if p.kpool is not None else 0),
        ]
        trans: tuple[str, int] | None = _transient(p, nb, ns, ik) if p.layer_phase else None
        if p.ik_output_phase and p.logits and trans is not None:
            host_out = [ComputePart("logits", p.logits), ComputePart("output norm", p.out_block)]
            if _sum(parts) + trans[1] < _sum(host_out):
                parts, trans = host_out, None
        elif p.logits and (trans is None or p.logits_on_top(nb, ns) >= trans[1]):
            trans = ("logits", p.logits_on_top(nb, ns))
        if trans is not None:
            parts.append(ComputePart(*trans))
    else:
        layer: list[ComputePart] = []
        if p.layer_phase:
            layer = [
                ComputePart("masks (copy)", p.masks.at(nb, ns)),
                ComputePart("v_idxs (copy)", p.v_idxs),
                ComputePart("positions, indices (copy)", p.small_inputs),
                ComputePart(p.blocks_label, p.blocks),
                ComputePart(*_transient(p, nb, ns, ik)),
                ComputePart("MLA V copy", p.mla_v.at(nb, ns)),
                ComputePart("FA f16 K/V copies", _max_at(p.fa_copies, nb, ns)),
                ComputePart("DSA top-k zeros", p.zeros_at(nb)),
                ComputePart("compressed-attention masks", p.dsv4.inputs(nb) if p.dsv4 is not None else 0),
                ComputePart("k-pool inputs", p.kpool.inputs(nb) if p.kpool is not None else 0),
            ]
        out = (
            [
                ComputePart("logits", p.logits),
                ComputePart("output norm", p.out_block),
                ComputePart("last MoE layer under the logits", p.out_below),
            ]
            if p.logits
            else []
        )
        parts = layer if _sum(layer) >= _sum(out) else out
        parts.append(ComputePart("pipeline-parallel input copies", p.pp_extra.at(nb, ns)))
        parts.append(ComputePart("op-offload weight copy", p.op_offload_copy))
    return ComputeBuffer(p.device, tuple(x for x in parts if x.bytes))


def compute_buffers(
    profile: ModelProfile,
    inputs: ComputeInputs,
    placement: WeightPlacement,
    gpu_vendors: tuple[Vendor, ...] = (),
) -> tuple[ComputeBuffer, ...]:
    """The compute buffer of every backend: one per GPU in use (in order), then the host's.

    The plan does not depend on the KV cells, so the last few are kept (a search over contexts at one placement
    resolves it once)."""
    key = (id(profile), replace(inputs, n_kv_base=0, n_kv_swa=0), id(placement), gpu_vendors)
    plan = _PLANS.get_or_compute(
        key, (profile, placement), lambda: ComputePlan(profile, inputs, placement, gpu_vendors)
    )
    return plan.evaluate(inputs.n_kv_base, inputs.n_kv_swa)


#: The last compute plans, keyed by everything but the KV cells (shared by the estimator's threads).
_PLANS: AnchoredCache[ComputePlan] = AnchoredCache(32)


def _sum(parts: list[ComputePart]) -> int:
    return sum(p.bytes for p in parts)


#: Per placement (shared by the estimator's threads).
_DERIVED: AnchoredCache[tuple[dict[int, int | None], int]] = AnchoredCache(16)


def _placement_facts(placement: WeightPlacement) -> tuple[dict[int, int | None], int]:
    """Per placement (cached: placements are reused across contexts): the device of each layer's FFN / expert
    matrices (an override can move them off the layer's device), and the largest group of host-resident matrix
    weights one layer multiplies (what op offload copies to the GPU)."""
    return _DERIVED.get_or_compute(id(placement), (placement,), lambda: _compute_placement_facts(placement))


def _compute_placement_facts(placement: WeightPlacement) -> tuple[dict[int, int | None], int]:
    ffn: dict[int, int | None] = {}
    host_group: dict[int | None, int] = {}
    ffn_role, exp_role = TensorRole.FFN, TensorRole.EXPERTS
    for p in placement.tensors:
        role = p.role
        il = p.layer
        if il is not None and (role is ffn_role or role is exp_role) and (role is exp_role or il not in ffn):
            ffn[il] = p.device
        if p.device is None and p.matrix and not p.duplicate:
            host_group[il] = host_group.get(il, 0) + p.n_bytes
    return ffn, max(host_group.values(), default=0)


def _ffn_devices(profile: ModelProfile, placement: WeightPlacement) -> dict[int, int | None]:
    """Device of each layer's FFN / expert matrices (they can differ from the layer's device with -ot/-cmoe)."""
    del profile
    return _placement_facts(placement)[0]


def _largest_host_weight_group(profile: ModelProfile, placement: WeightPlacement) -> int:
    """Bytes of the largest set of host-resident matrix weights one layer multiplies (op offload copies them)."""
    del profile
    return _placement_facts(placement)[1]
