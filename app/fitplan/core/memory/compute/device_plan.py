"""One device's compute plan: the terms the builder found, and their evaluation at a number of cells and
sequences (one context, or a whole curve at once with numpy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fitplan.core.memory.compute.allocator import (
    Affine,
    BestFit,
    ReplayOp,
    ffn_reuse,
    max_at,
    replay,
    reuse_array,
)
from fitplan.core.memory.compute.attention import Dsv4Attention, IndexerScores, KpoolSelection
from fitplan.core.memory.compute.ffn import FFN_HOLE_BLOCKS
from fitplan.core.memory.compute.inputs import ComputeBuffer, ComputePart
from fitplan.core.memory.compute.recurrent import SsmLead


@dataclass(frozen=True, slots=True)
class DevicePlan:
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
    fork_groups: tuple[tuple[bool, int], ...] = ()
    # ik_llama.cpp on the host: the masks and activations are freed before the output layer, whose logits sit
    # with the output norm's block alone (the allocator's peak list of ik's output phase)
    fork_output_phase: bool = False
    # DSA top-k masks (src/llama-graph.cpp build_attn with top_k): a zero-filled f32 [1, min(n_kv, top_k), n_tok]
    # leaf per layer, allocated up front: bytes per kept cell, and the top_k cap
    dsa_zeros: int = 0
    dsa_top_k: int = 0
    # on a later GPU whose last layer is a MoE with a shared expert: that layer's tensors under the logits
    out_below: int = 0
    # DeepSeek-V4's compressed attention (its graph inputs and the indexer's peak), None elsewhere
    dsv4: Dsv4Attention | None = None
    # DeepSeek-V3.2's lightning indexer at its peak, None elsewhere
    indexer: IndexerScores | None = None
    # the k-pool sparse attention of qwen4exp and glm5-next (its inputs and the selection's peak), None elsewhere
    kpool: KpoolSelection | None = None
    # Mamba blocks after the last attention layer: their allocations, replayed over the freed masks' space
    # (with the block of the layer's input in it), the block under it and the FFN norm's two-block hole
    ssm_ops: tuple[ReplayOp, ...] = ()
    ssm_hole: Affine = Affine()
    ssm_block: int = 0
    ssm_residual_in_input: bool = False
    ssm_after_attention_only: bool = False
    ssm_lead: SsmLead | None = None
    # on the host that runs the last layer: the masks, each freed after the last layer that reads it; the logits
    # take the space of one when they fit there (`logits_on_top`)
    logits_room: tuple[Affine, ...] = ()
    # a GPU's output phase with the graph inputs it copied (masks, V's indices, small inputs) under the logits
    out_inputs: bool = False

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
            return replay(self.ssm_ops, (hole + b, b))
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
            return replay(ops, (hole + b, FFN_HOLE_BLOCKS * b))
        return replay(self.ssm_ops, (b, max(0, hole - b), FFN_HOLE_BLOCKS * b))

    def _ssm_after_lead(self, lead: SsmLead, nb: int, ns: int) -> int:
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
        sim = BestFit.from_layout((*free, ("ids", 1), ("embd", b), ("fa_out", b), ("inp", 1)))
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
        return sim.run(seq)

    def _ssm_after_residual(self, lead: SsmLead, nb: int, ns: int) -> int:
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
        input norm takes the smallest free block, then the block's allocations (`mamba_ops`). The allocator's
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
        sim = BestFit.from_layout((*inputs, *free, ("out_ids", lead.out_ids), ("embd", b), top, ("last", b)))
        seq: list[ReplayOp] = [ops[0], ("v_rot", 0), ("kqv_out", 0), ("fa_out", 0)]
        seq += [("norm", b), ops[1], ("norm", 0), *ops[2:]]
        return sim.run(seq)

    def zeros_at(self, nb: int) -> int:
        return self.dsa_zeros * min(nb, self.dsa_top_k)


def _last_ffn(p: DevicePlan, nb: int, ns: int) -> int:
    return max(
        (
            f - max(ffn_reuse(first, held, hole.at(nb, ns), f) for hole in alts)
            for f, first, held, alts in p.ffn_holes
        ),
        default=0,
    )


def _transient(p: DevicePlan, nb: int, ns: int, fork: int = 0) -> tuple[str, int]:
    # CUDA's f16 copies of a quantized cache are part of the flash-attention op's own allocation: they are live
    # with the attention, not with the FFN after it (ggml-cuda.cu `ggml_backend_cuda_buffer_type_get_alloc_size`)
    att = max(
        max_at(p.kq, nb, ns) + max_at(p.fa_copies, nb, ns),
        fork,
        p.ssm_after(nb, ns),
        p.dsv4.transient(nb, ns) if p.dsv4 is not None else 0,
        p.indexer.transient(nb) if p.indexer is not None else 0,
        p.kpool.transient(nb) if p.kpool is not None else 0,
    )
    ffn = max(p.ffn, _last_ffn(p, nb, ns))
    if att > ffn:
        scores = fork or (p.kq and any(a.a_base or a.a_swa for a in p.kq))
        return ("KQ scores + Q" if scores else "attention / SSM scan"), att
    return "FFN intermediates", ffn


def _transient_parts(p: DevicePlan, nb: int, ns: int, fork: int) -> list[ComputePart]:
    """The transient as parts: the attention's with the flash-attention f16 copies named apart."""
    label, size = _transient(p, nb, ns, fork)
    fa = max_at(p.fa_copies, nb, ns)
    if label == "FFN intermediates" or not fa:
        return [ComputePart(label, size)]
    return [ComputePart(label, size - fa), ComputePart("FA f16 K/V copies", fa)]


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


def total_array(
    p: DevicePlan, nb: NDArray[np.int64], ns: NDArray[np.int64], fork: NDArray[np.int64] | None = None
) -> NDArray[np.int64]:
    att = _max_aff(p.kq, nb, ns) + _max_aff(p.fa_copies, nb, ns)
    if fork is not None:
        att = np.maximum(att, fork)
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
        reuse = np.max(np.stack([reuse_array(f, first, held, _aff(hole, nb, ns)) for hole in alts]), axis=0)
        ffn = np.maximum(ffn, f - reuse)
    trans = np.where(att > ffn, att, ffn)
    zeros: NDArray[np.int64] = np.minimum(nb, p.dsa_top_k) * p.dsa_zeros + dsv4_inputs
    if p.device is None:
        total = _aff(p.masks, nb, ns) + p.v_idxs + p.small_inputs + p.blocks + _aff(p.mla_v, nb, ns) + zeros
        if p.fork_output_phase and p.logits and p.layer_phase:
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
    out: NDArray[np.int64] | int = p.logits + p.out_block + p.out_below
    if p.out_inputs:
        out = out + _aff(p.masks, nb, ns) + p.v_idxs + p.small_inputs
    if p.layer_phase:
        layer = (
            _aff(p.masks, nb, ns)
            + p.v_idxs
            + p.small_inputs
            + p.blocks
            + trans
            + _aff(p.mla_v, nb, ns)
            + zeros
        )
        phase = np.where(layer >= out, layer, out)
    else:
        phase = np.zeros_like(nb) + out
    return phase + _aff(p.pp_extra, nb, ns) + p.op_offload_copy


def evaluate_plan(p: DevicePlan, nb: int, ns: int, fork: int = 0) -> ComputeBuffer:
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
        trans: tuple[str, int] | None = _transient(p, nb, ns, fork) if p.layer_phase else None
        if p.fork_output_phase and p.logits and trans is not None:
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
                *_transient_parts(p, nb, ns, fork),
                ComputePart("MLA V copy", p.mla_v.at(nb, ns)),
                ComputePart("DSA top-k zeros", p.zeros_at(nb)),
                ComputePart("compressed-attention masks", p.dsv4.inputs(nb) if p.dsv4 is not None else 0),
                ComputePart("k-pool inputs", p.kpool.inputs(nb) if p.kpool is not None else 0),
            ]
        out = _output_parts(p, nb, ns)
        parts = layer if _sum(layer) >= _sum(out) else out
        parts.append(ComputePart("pipeline-parallel input copies", p.pp_extra.at(nb, ns)))
        parts.append(ComputePart("op-offload weight copy", p.op_offload_copy))
    return ComputeBuffer(p.device, tuple(x for x in parts if x.bytes))


def _output_parts(p: DevicePlan, nb: int, ns: int) -> list[ComputePart]:
    """A GPU's output phase: the logits and what stays under them."""
    if not p.logits:
        return []
    return [
        ComputePart("logits", p.logits),
        ComputePart("output norm", p.out_block),
        ComputePart("last MoE layer under the logits", p.out_below),
        ComputePart(
            "inputs under the logits (copy)",
            p.masks.at(nb, ns) + p.v_idxs + p.small_inputs if p.out_inputs else 0,
        ),
    ]


def _sum(parts: list[ComputePart]) -> int:
    return sum(p.bytes for p in parts)
