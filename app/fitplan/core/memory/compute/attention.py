"""Attention terms beyond Q, K, V and the scores: the caches' Hadamard rotations, the absorbed MLA query of
DeepSeek-V2/V3, the DSA lightning indexer, DeepSeek-V4's compressed attention, MiniMax-M3's block-sparse
mask and the k-pool selection of qwen4exp and glm5-next."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fitplan.core.gguf.ggml_types import get_type, type_id
from fitplan.core.memory.compute.allocator import F16, F32, I32, I64, BestFit, ReplayOp, replay
from fitplan.core.memory.context import compressed_cells
from fitplan.core.model.archs import DSV4_CSA_RATIO, DSV4_HCA_RATIO
from fitplan.core.model.profile import LayerProfile, MlaParams, ModelProfile

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
else:
    from fitplan.core.base.lazy import np

#: src/llama-kv-cache-msa.cpp `get_n_pos`: the position axis of MiniMax-M3's indexer is padded to at least 256.
MSA_POSITIONS = 256
#: `llama-kv-cache.cpp` (llama_kv_cache constructor, `attn_rot_k` / `attn_rot_v`): the smallest Hadamard rotation.
HADAMARD_MIN = 64


def rotation_size(head: int) -> int:
    """K's rotation: 64, doubled while it still divides the head size twice over (`n_rot_k`)."""
    n = HADAMARD_MIN
    while head % (2 * n) == 0:
        n *= 2
    return n


def hadamard_rotations(profile: ModelProfile, layers: list[int], type_k: str, type_v: str) -> tuple[int, int]:
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
    of `indexer_queries`.)
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
        n_rot_k = rotation_size(head) if head > 0 and head % HADAMARD_MIN == 0 else 0
    if get_type(type_id(type_v)).quantized and len(heads_v) == 1:
        head = heads_v.pop()
        n_rot_v = HADAMARD_MIN if head > 0 and head % HADAMARD_MIN == 0 else 0
    return n_rot_k, n_rot_v


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
class IndexerScores:
    """DeepSeek-V3.2's lightning indexer at its peak (src/models/deepseek32.cpp and its copies), as a function of
    the indexed cache's cells per stream `nb`: what stays live under it (`base`: the compressed query, the absorbed
    Q and the freed space below it, see `indexer_queries`), without flash attention the layer's scores
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
class KpoolSelection:
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
    replayed through the allocator (`scatter_ops`, `BestFit`): which freed block the layer's scores `kq`
    `[n_kv, n_tok, n_head]` f32, the repeated `live_pool` and `live` fit depends on how the selection's tail
    makes the chain's `[n_sel, n_tok]` tensors a little larger than the selected cells (the allocator's lists on
    the smoke model, c512-c131072, 1 and 4 slots, `-ub` 512 and 2048).

    glm5-next (`gather`: src/models/glm5-next.cpp) also has the graph input `gather_mask` `[n_sel, n_tok]` f32,
    which gives each slot's liveness (`ggml_exp` of it). Its peak (the allocator's lists on the smoke model): the
    indexer query `[n_indexer_head x key_length, n_tok]` with the score at short contexts; else the score and
    the top-k, the selected cells and one `[n_sel, n_tok]` tensor of the chain (two when the f32 cast of the
    selection does not fit the selected cells' freed block, `cast_above`: c131072 at `-ub 512`, c32768 with four
    slots; at `-ub 2048` `q_resid` lies in that block and the cast fits); without flash attention the layer's
    scores `kq`, two chain tensors and the f32 `mask_all` `[n_kv + n_sel, n_tok]` that the selection is scattered
    into, and where the k-pool layer is the graph's first, that layer replayed through the allocator
    (`first_layer`).
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
            # the cast above the selected cells' block (`cast_above`); without the MLA rows, where top-k caps the
            # selection below the pools
            chains = 2 if (self.cast_above(nb) if self.mla_rows else n_top < n_pool) else 1
            return max(q + score, score + top + sel_rows + chains * chain)
        if not self.flash_attn:
            return replay(self.scatter_ops(nb), ())
        if top > 2 * q:
            # the top-k fits none of the freed query tensors: the three (the projection, its norm, the roped
            # copy) stay a hole under the score and the top-k (the smoke model at c131072)
            return 3 * q + score + top + sel_rows + 4 * chain
        below = self.block + score + top if score <= q else 2 * q + score
        return max(2 * q, below + sel_rows + 4 * chain)

    def cast_above(self, nb: int) -> bool:
        """glm5-next with flash attention: whether the f32 cast of the selection indices goes above the top
        instead of into the selected cells' freed space (the allocator's trace on the smoke model, c4096 and
        c32768). The selected cells lie above two top-k-sized tensors in the indexer query's freed space, with
        `q_resid`'s rows below them: freed, the three are one block. The query `q` and, when it still fits, the
        absorbed query go into the space the score's inputs leave lower down (the head weights `[n_indexer_head,
        n_tok]` f32 and the pool inputs); an absorbed query that does not fit there takes the block's start.
        The f16 zeros `[n_sel, n_tok]` come next, then the cast `[n_sel, n_tok]` f32, a tail of kpool - 1 cells
        longer than the selected cells: when the two do not fit the block, the cast goes above (c4096: by 6
        KiB), else it stays inside (c32768). `q_resid` is in that block only where it does not fit the hole the
        graph inputs leave lower down (`_q_resid_in_block`)."""
        if not self.mla_rows:
            return False
        n_pool, n_top, n_sel = self.sizes(nb)
        t = self.n_tok
        _, q_b, q_abs, _ = (F32 * t * r for r in self.mla_rows)
        low = F32 * self.heads * t + F16 * n_pool * t + I32 * n_pool * (1 + self.kpool)
        block = (
            self._q_resid_in_block(nb)
            + 2 * I32 * n_top * t
            + I32 * self.kpool * n_top * t
            - (0 if q_b + q_abs <= low else q_abs)
        )
        return F16 * n_sel * t + F32 * n_sel * t > block

    def _q_resid_in_block(self, nb: int) -> int:
        """`q_resid`'s bytes in the block under the selected cells: 0 where it fits the hole the graph inputs read
        by the indexer's cache row leave below the layer (the zero seed of the pooled half `[key_length, n_tok]`
        f32, the K row indices `[n_tok]` i64, `new_pool_idxs` `[kpool, n_new]` i32 and `new_pool_rep` `[n_new]`
        i64; the allocator's traces on the smoke model at 131072 cells: at `-ub 512` the 1 MiB `q_resid` in
        that 1.004 MiB hole, the cast above the block; at `-ub 2048` the 4 MiB one above the 1.77 MiB hole, next
        to the top-k's freed space, and the cast inside the block)."""
        t = self.n_tok
        q_a = F32 * t * self.mla_rows[0]
        n_new = max(nb // self.kpool * self.n_seqs, 1)
        hole = F32 * self.head * t + I64 * t + (I32 * self.kpool + I64) * n_new
        return 0 if q_a <= hole else q_a

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
        layer = replay(self.gather_ops(nb), (2 * self.block,))
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
class Dsv4Attention:
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


def indexer_queries(profile: ModelProfile, n_tok: int) -> tuple[int, int]:
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


def absorbed_mla_attention(
    profile: ModelProfile,
    lp: LayerProfile,
    mla: MlaParams,
    n_tok: int,
    fa: bool,
    hole: int,
    fa_extra: int = 0,
) -> tuple[int, int, int]:
    """The first layer's attention with the absorbed MLA query (src/models/deepseek2.cpp, llama_model_deepseek2::
    graph, then `llm_graph_context::build_attn_mha`), replayed through the allocator (`BestFit`) over the
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
    token rows' hole, Qcur, then kv_cmpr_pe above it (3.25 MiB). `fa_extra`: bytes the device's buffer type adds
    to the flash-attention output (Metal's scratch, `PlanBuilder.metal_fa_scratch`)."""
    return _replay_absorbed_mla(profile.n_embd, lp.n_head, lp.n_embd_head_v, mla, n_tok, fa, hole, fa_extra)


@functools.lru_cache(maxsize=1024)
def _replay_absorbed_mla(
    n_embd: int, h: int, head_v: int, mla: MlaParams, n_tok: int, fa: bool, hole: int, fa_extra: int = 0
) -> tuple[int, int, int]:
    """`absorbed_mla_attention` on the shapes it reads (kept: every layer of a model and every estimate of a
    plan replay the same sequence)."""
    sim = BestFit((hole,))
    sim.run(absorbed_mla_ops(n_embd, h, head_v, mla, n_tok, fa, fa_extra))
    return sim.peak, sim.end, sim.largest_hole()


def absorbed_mla_ops(
    n_embd: int, h: int, head_v: int, mla: MlaParams, n_tok: int, fa: bool, fa_extra: int = 0
) -> tuple[ReplayOp, ...]:
    """The allocations and frees of `absorbed_mla_attention`, in graph order (a size allocates, 0 frees)."""
    f = F32 * n_tok
    kv, rope = mla.kv_lora_rank, mla.n_rot
    ops: list[ReplayOp] = []
    if mla.q_lora_rank:
        ops.append(("q_a", f * mla.q_lora_rank))
    ops.append(("q", f * h * mla.key_length_mla))
    if mla.q_lora_rank:
        ops.append(("q_a", 0))
    ops += [("q_nope_absorbed", f * h * kv), ("q_pe", f * h * rope), ("q", 0), ("Qcur", f * h * (kv + rope))]
    ops += [("q_nope_absorbed", 0), ("q_pe", 0), ("kv_cmpr_pe", f * (kv + rope)), ("kv_cmpr", f * kv)]
    ops += [("k_pe", f * rope), ("kv_cmpr_pe", 0), ("Kcur", f * (kv + rope)), ("kv_cmpr", 0), ("k_pe", 0)]
    ops.append(("Kcur", 0))
    if fa:
        ops += [
            ("fattn", f * h * head_v + fa_extra),
            ("Qcur", 0),
            ("fattn_mla", f * h * mla.value_length_mla),
        ]
        ops += [("fattn", 0), ("cont", f * h * mla.value_length_mla), ("fattn_mla", 0), ("wo", f * n_embd)]
    return tuple(ops)
