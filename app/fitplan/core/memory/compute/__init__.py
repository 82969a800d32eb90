"""Compute buffers: what llama.cpp's scheduler reserves per backend (`llama_context::sched_reserve`).

The reserve builds the prompt-processing graph for `n_tok = min(n_ctx, n_ubatch)` tokens, `n_seq_max` sequences and
`n_out = min(n_tok, n_outputs_max)` outputs, with every KV view spanning the whole cache. The graph allocator then
reuses memory between tensors whose lifetimes do not overlap, so the buffer is the peak of the live set, not the sum.

This package names the tensors that make up that peak (all sizes in bytes, f32 activations unless said otherwise):

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
  (`gdn_transient`), a lightning-attention layer, the DSA indexer's queries with the compressed query, or the
  indexer query projection of DeepSeek-V4, qwen4exp and glm5-next (`GraphTraits.indexer_q_copies` in the architecture registry);
* where the layout depends on which freed block a tensor fits, a few allocations are replayed through the
  allocator's best fit (`BestFit`, ggml-alloc.c): the absorbed MLA query of DeepSeek-V2/V3
  (`absorbed_mla_attention`) and the Mamba blocks after a device's last attention layer, over the freed masks
  (`mamba_ops`);
* hyper-connection models: their residual streams `[n_embd x hc, n_tok]` (`GraphTraits.hc_streams`) next to the blocks;
* sparse and compressed attention, each with its graph inputs and its peak as a function of the cells: the DSA
  lightning indexer's score and top-k (`IndexerScores`), DeepSeek-V4's compressed attention (`Dsv4Attention`),
  MiniMax-M3's block-sparse mask per stream (`PlanBuilder._msa_mask`) and the k-pool selection of qwen4exp and glm5-next
  (`KpoolSelection`);
* the logits `[n_vocab, n_out]` on the output layer's device, with one block (five on the first backend), and
  what of the last MoE layer stays under them where its experts' sum cannot take a freed block (a later GPU,
  `moe_split_below_logits`; the first GPU running host layers with op offload, `moe_down_outputs`; a GPU after
  host layers without it, `PlanBuilder._after_host_ffn`);
* with `--op-offload` and `n_ubatch >= 32`, on the first GPU of a backend that offloads ops (CUDA, Vulkan, SYCL;
  not RPC): the copies of the host-resident matrix weights one layer multiplies, one at a time; the output
  matrix's copy is made at the output layer's split, so it sits under the logits in the output phase only;
* CUDA only, with a quantized K or V cache and flash attention: the f16 copies of one layer's whole K and V views
  the FA kernel allocates (`ggml_cuda_flash_attn_ext_get_alloc_size`);
* MLA without flash attention: the contiguous copy of V (`n_kv x kv_lora_rank`, K cache type);
* the KV cache in host memory (`-nkvo`) on a CUDA GPU: the GPU still runs the attention, over copies of each
  layer's K and V views and of the mask made at the layer's split; each cache's first layer on the GPU and the
  next one are replayed over the blocks live there (`HostCacheAttention`), and V's row indices are not copied;
  with MLA the copies of the compressed cache's K view and of V's view of it, over the absorbed query, and the
  FFNs above the mask (`MlaHostCache`);
* recurrent states in host memory while a GPU runs the layers (`-nkvo`, or host layers with op offload): the
  host's copy of the conv input's view for the state's copy back, and for Mamba-2 layers with their weights on
  the host the scan's copied sources and output (`mamba2_host_state_copies`, `gdn_host_conv_copy`);
* pipeline parallelism: four copies of every graph input on the host and of every split input on each GPU, never
  freed, below the rest of the graph (see `PIPELINE_COPIES`); on a GPU with only the output layer a
  hyper-connection head's stream inputs and live set (`GraphTraits.hc_head`, `PlanBuilder.hc_head`); the experts'
  f32 down product ggml-cuda refuses, run on the host with its inputs' copies there and the product's on the GPU
  (`GraphTraits.moe_down_f32_src1`, `PlanBuilder.host_expert_down`);
* Vulkan: the compute buffer is made of chunks of at most 1 GiB (`DevicePlan.max_chunk`: the logits in a chunk of
  their own where they do not fit above what is under them; KQ scores that open chunks in graph order, counted
  again where the FFN follows them into one, `terms.Chunks`; op-offload copies larger than a chunk in chunks of
  their own, `_own_chunk_copies`), and KQ scores above the GPU's tensor limit run on the host
  (`terms.HostScores`; `builder.tensor_limit`: the 4 GiB storage range, or the buffer size on a GPU with 64-bit
  shader indexing, `gpu_idx64`);
* Metal: flash attention's always-reserved scratch in each output's allocation (`metal_fa_scratch`) and the
  offload of matrix multiplications only: host expert matrices not repacked for the CPU are copied in
  (`matmul_offload`); a host layer's down matrix in a host buffer takes its GLU to the GPU
  (`_host_glu_offloaded`), an absorbed-MLA host layer's `attn_k_b` its attention (`_host_mla_offloaded`).

Each of these is a term object (`terms`: a label, its bytes at one context and over arrays of contexts); the builder
(`PlanBuilder`) puts a device's terms in the groups of its `DevicePlan` that say how they combine, and one
evaluator (`device_plan.device_parts`) reads the plan at one context (`ComputePlan.evaluate`) or over a whole curve
(`ComputePlan.totals_array`).

Measured: single-backend CPU dry runs of 128 architectures and of published-shape models, and two loopback RPC
servers as extra devices (layer splits, overrides, pipeline parallelism); the placement of the terms was checked
against the graph allocator's debug list of live tensors at each peak. The GPU-specific parts (op-offload weight
copies, FA f16 copies, Vulkan's chunks and storage range, Metal's scratch) were checked the same way on
device-shaped stand-ins: llama.cpp's own scheduler and allocator answered as ggml-cuda, ggml-vulkan or ggml-metal
answers them, no kernel run. See `docs/accuracy.md`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from fitplan.core.base.cache import AnchoredCache
from fitplan.core.base.devices import Vendor
from fitplan.core.memory.compute.builder import PlanBuilder
from fitplan.core.memory.compute.device_plan import evaluate_plan, total_array
from fitplan.core.memory.compute.inputs import ComputeBuffer, ComputeInputs, ComputePart
from fitplan.core.memory.compute.shapes import kv_type_id
from fitplan.core.memory.weights import WeightPlacement
from fitplan.core.model.profile import ModelProfile

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
else:
    from fitplan.core.base.lazy import np


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
        gpu_idx64: tuple[bool, ...] = (),
    ) -> None:
        self.inputs = inputs
        b = PlanBuilder(profile, inputs, placement, gpu_vendors, gpu_idx64)
        self.plans = (*(b.gpu_plan(gi) for gi in range(len(gpu_vendors))), b.host_plan())

    def evaluate(self, n_kv_base: int, n_kv_swa: int) -> tuple[ComputeBuffer, ...]:
        return tuple(evaluate_plan(p, n_kv_base, n_kv_swa) for p in self.plans)

    def totals_array(self, n_kv_base: NDArray[np.int64], n_kv_swa: NDArray[np.int64]) -> NDArray[np.int64]:
        """Bytes per backend (rows: GPUs in order, then the host) for arrays of KV cells: the same evaluator as
        `evaluate` (`device_plan.device_parts`), over arrays."""
        return np.stack([total_array(p, n_kv_base, n_kv_swa) for p in self.plans])


def compute_buffers(
    profile: ModelProfile,
    inputs: ComputeInputs,
    placement: WeightPlacement,
    gpu_vendors: tuple[Vendor, ...] = (),
    gpu_idx64: tuple[bool, ...] = (),
) -> tuple[ComputeBuffer, ...]:
    """The compute buffer of every backend: one per GPU in use (in order), then the host's. `gpu_idx64`: per GPU,
    whether its Vulkan driver has 64-bit shader indexing (`Device.shader_64bit_indexing`; empty: none has).

    The plan does not depend on the KV cells, so the last few are kept (a search over contexts at one placement
    resolves it once)."""
    key = (id(profile), replace(inputs, n_kv_base=0, n_kv_swa=0), id(placement), gpu_vendors, gpu_idx64)
    plan = _PLANS.get_or_compute(
        key, (profile, placement), lambda: ComputePlan(profile, inputs, placement, gpu_vendors, gpu_idx64)
    )
    return plan.evaluate(inputs.n_kv_base, inputs.n_kv_swa)


#: The last compute plans, keyed by everything but the KV cells (shared by the estimator's threads).
_PLANS: AnchoredCache[ComputePlan] = AnchoredCache(32)


__all__ = ["ComputeBuffer", "ComputeInputs", "ComputePart", "ComputePlan", "compute_buffers", "kv_type_id"]
