"""The terms of a device's compute buffer: each one a label, its bytes at one context (`at`, the KV cells per
stream of the base and the SWA cache) and its bytes over arrays of contexts (`over`, the same cells as numpy
arrays, for a whole curve at once). `DevicePlan` says how the terms combine (the live set of the layer phase,
the larger of the attention and the FFN, the output phase); one evaluator (`device_plan.device_parts`) reads them
at one context or over a curve.

A new graph term is one class here with `label`, `at` and `over` (`over` may loop over `at` when the term is a
replay), added to the right group of the plan in `PlanBuilder` (docs/architecture.md).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol, TypeAlias

from fitplan.core.memory.compute.allocator import (
    Affine,
    BestFit,
    ChunkedFit,
    ReplayOp,
    ffn_reuse,
    max_at,
    reuse_array,
)
from fitplan.core.memory.compute.attention import Dsv4Attention, IndexerScores, KpoolSelection
from fitplan.core.memory.compute.layer_replay import ONE_BUFFER, LayerRun, replay_curve, replay_layers
from fitplan.core.memory.fork_graph import ForkGraph
from fitplan.core.model.profile import ModelProfile

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
else:
    from fitplan.core.base.lazy import np

Cells: TypeAlias = "NDArray[np.int64]"

#: The transient's labels: the attention's (named after the scores when a term with this label is nonzero), the
#: attention of a graph without scores (recurrent blocks, flash attention), the FFN's, and the part of the
#: attention that is CUDA's f16 copies of a quantized cache.
SCORES = "KQ scores + Q"
SCAN = "attention / SSM scan"
FFN = "FFN intermediates"
FA_COPIES = "FA f16 K/V copies"
#: The output phase's logits `[n_vocab, n_out]` (the part a chunked buffer gives a chunk of its own).
LOGITS = "logits"


class Term(Protocol):
    """One tensor or live set of a compute buffer as a function of the KV cells."""

    @property
    def label(self) -> str: ...

    def at(self, nb: int, ns: int) -> int:
        """Bytes at `nb` base cells and `ns` SWA cells per stream."""
        ...

    def over(self, nb: Cells, ns: Cells) -> Cells:
        """Bytes at each of the contexts the arrays give (element for element `at`)."""
        ...


def nonzero(terms: Iterable[Term]) -> tuple[Term, ...]:
    """`terms` without those that are zero at every context (they add nothing to a buffer, and a curve reads each
    term it is given)."""
    return tuple(t for t in terms if not _always_zero(t))


def _always_zero(term: Term) -> bool:
    match term:
        case Fixed(bytes=0) | DsaZeros(per_cell=0) | Linear(size=Affine(a_base=0, a_swa=0, c=0)):
            return True
    return False


def loop_over(term: Term, nb: Cells, ns: Cells) -> Cells:
    """`term.over` for a term with no closed form over arrays: `at` at each context."""
    return np.fromiter(
        (term.at(b, w) for b, w in zip(nb.tolist(), ns.tolist(), strict=True)), dtype=np.int64, count=nb.size
    )


def affine_over(a: Affine, nb: Cells, ns: Cells) -> Cells:
    """`Affine.at` over arrays of cells."""
    grow = a.a_base * nb + a.a_swa * ns
    if a.room:
        out: Cells = np.where(grow <= a.room, 0, a.c if a.flat else grow + a.c)
        return out
    return grow + a.c


def _largest_over(sizes: tuple[Affine, ...], nb: Cells, ns: Cells) -> Cells:
    out = np.zeros_like(nb)
    for a in sizes:
        out = np.maximum(out, affine_over(a, nb, ns))
    return out


@dataclass(frozen=True, slots=True)
class Fixed:
    """Bytes that do not follow the cells."""

    label: str
    bytes: int

    def at(self, nb: int, ns: int) -> int:
        return self.bytes

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return np.full_like(nb, self.bytes)


@dataclass(frozen=True, slots=True)
class Linear:
    """A tensor whose size is affine in the cells (`Affine`: the masks, V's copy, pipeline copies)."""

    label: str
    size: Affine

    def at(self, nb: int, ns: int) -> int:
        return self.size.at(nb, ns)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return affine_over(self.size, nb, ns)


@dataclass(frozen=True, slots=True)
class Largest:
    """The largest of a few live sets affine in the cells, one per layer shape (CUDA's f16 K/V copies)."""

    label: str
    sizes: tuple[Affine, ...]

    def at(self, nb: int, ns: int) -> int:
        return max_at(self.sizes, nb, ns)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return _largest_over(self.sizes, nb, ns)


@dataclass(frozen=True, slots=True)
class Chunks:
    """How a device's buffer type limits the compute buffer (Vulkan's; none on the other backends).

    `size`: the largest chunk ggml-alloc makes of the buffer (`ggml_backend_buft_get_max_size`: Vulkan's 1 GiB
    suballocation block). `tensor_limit`: the largest tensor an op may touch on the device (ggml-vulkan
    `supports_op` refuses a tensor above maxStorageBufferRange or the buffer size, 4 GiB: the op runs on the host).
    `block`: one `[n_embd, n_tok]` block (the layer output that stays where the FFN put it). `ffn_first`: the
    largest FFN intermediates the device's layers allocate before freeing any (gate's and up's outputs;
    `PlanBuilder._ffn_start`). `many`: more than one attention layer on the device. `v_copy`: V's contiguous
    MLA copy (`PlanBuilder.mla_v`), made after the scores and freed before the FFN: where Qcur's freed space does
    not hold it, it lies above the attention's live set and its space is free to the FFN too."""

    size: int
    tensor_limit: int
    block: int
    ffn_first: int
    many: bool
    # the device's attention layers in graph order, True where the layer reads the SWA cache (empty: layers of
    # the base cache, two of them where `many`)
    order: tuple[bool, ...] = ()
    v_copy: Affine = Affine()

    def score_chunks(self, base: int, swa: int, twice: bool) -> int:
        """The bytes of the chunks the scores open (each chunk's highest end), the layers' scores taken in graph
        order (`order`; `base` and `swa`: the largest scores of each cache's layers that take a chunk of their
        own, 0: none). A layer's scores go into the chunk ggml-alloc picks (ggml-alloc.c `ggml_dyn_tallocr_alloc`:
        among the chunks whose free end holds them, the one they fill best without growing it, else the one that
        grows least), or open one (`ggml_dyn_tallocr_new_chunk`, `MAX(size, max_chunk_size)`). `twice`: the FFN
        after the first such scores goes into their freed chunk and the layer's output stays at its start, so no
        scores of that size fit there again (`AttentionScores`). gpt-oss-20b on the Vulkan-shaped stand-in at
        4096 cells, `-ub 2048`, no flash attention: `kq-0` (sliding window, 1152 MiB) opens chunk 1, `kq-1` (full,
        2048 MiB) chunk 2, and the later layers' scores fit in chunk 2: 220 + 1152 + 2048 = 3420 MiB."""
        chunks: list[list[int]] = []  # capacity, highest end, bytes held at its start
        used_first = False
        for is_swa in self.order or ((False, False) if self.many else (False,)):
            need = swa if is_swa else base
            if not need:
                for ch in chunks:
                    ch[2] = 0
                continue
            best: tuple[tuple[int, int], list[int]] | None = None
            for ch in chunks:
                cap, top, held = ch
                if cap - held < need:
                    continue
                reuse = top - held - need
                key = (0, reuse) if reuse >= 0 else (1, -reuse)
                if best is None or key < best[0]:
                    best = (key, ch)
            if best is None:
                ch = [max(need, self.size), need, 0]
                chunks.append(ch)
            else:
                ch = best[1]
                ch[1] = max(ch[1], ch[2] + need)
            if twice and not used_first:
                ch[2] = self.block
            used_first = True
        return sum(ch[1] for ch in chunks)

    def on_device(self, scores: int) -> bool:
        return scores < self.tensor_limit

    def own_chunk(self, scores: int) -> bool:
        """The scores open a chunk of their own (they and a block exceed a chunk) and stay on the device."""
        return scores + self.block > self.size and self.on_device(scores)


def _scores(a: Affine, nb: int, ns: int) -> int:
    """The KQ scores of a layer shape's live set: its cell-dependent part."""
    return a.a_base * nb + a.a_swa * ns


@dataclass(frozen=True, slots=True)
class AttentionScores:
    """The attention's live set: the largest over the layer shapes (`kq`: Q, K, V, the KQ scores, a fused QKV
    output, ...) plus the largest of CUDA's f16 copies of a quantized cache (`fa`), part of the same op.

    With `chunks` (a buffer made of chunks, Vulkan's; `Chunks`), at each context:

    * KQ scores at or above the device's tensor limit run on the host (`HostScores`): the device keeps the rest
      of the live set (the allocator's trace on the Vulkan stand-in, llama-3.1-8b at 32768 cells, `-ub 2048`, no
      flash attention: the 8 GiB `kq-0` in the host's buffer, with copies of the K and V views and of Q);
    * KQ scores that do not fit in a chunk next to a block open a chunk of their own; when the FFN's first
      intermediate fits in no space the first chunk has free (the largest live set there without such scores),
      it goes into the freed scores' chunk (ggml-alloc.c `ggml_dyn_tallocr_alloc`: a fit without growth beats
      growth), the layer's output stays there, and with more than one layer the next layer's scores open another
      chunk: the scores count twice (the trace, llama-3.1-8b at 4096 cells, `-ub 2048`: `kq-0` at offset 0 of
      chunk 1, `ffn_gate-0` and `ffn_out-0` at offset 0 of chunk 1, `kq-1`..`kq-31` in chunk 2; gemma-3-27b at
      32768 cells, `-ub 512`: its sliding-window layers' scores leave a hole in the first chunk that takes the FFN,
      every full layer's scores in chunk 1)."""

    kq: tuple[Affine, ...]
    fa: tuple[Affine, ...] = ()
    chunks: Chunks | None = None

    @property
    def label(self) -> str:
        return SCORES if any(a.a_base or a.a_swa for a in self.kq) else SCAN

    def at(self, nb: int, ns: int) -> int:
        c = self.chunks
        if c is None:
            return max_at(self.kq, nb, ns) + max_at(self.fa, nb, ns)
        live = [
            a.at(nb, ns) - (0 if c.on_device(_scores(a, nb, ns)) else _scores(a, nb, ns)) for a in self.kq
        ]
        own = [c.own_chunk(_scores(a, nb, ns)) for a in self.kq]
        room = max((v - _scores(a, nb, ns) if o else v for a, v, o in zip(self.kq, live, own, strict=True)),
                   default=0)  # fmt: skip
        twice = c.many and c.ffn_first > room + c.v_copy.at(nb, ns)
        rest = max(
            (v - _scores(a, nb, ns) if o else v for a, v, o in zip(self.kq, live, own, strict=True)),
            default=0,
        )
        sizes = [0, 0]  # the largest own-chunk scores of the base and the SWA layers
        for a, o in zip(self.kq, own, strict=True):
            if o:
                i = 1 if a.a_swa and not a.a_base else 0
                sizes[i] = max(sizes[i], _scores(a, nb, ns))
        return rest + c.score_chunks(sizes[0], sizes[1], twice) + max_at(self.fa, nb, ns)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        if self.chunks is not None:
            return loop_over(self, nb, ns)
        return _largest_over(self.kq, nb, ns) + _largest_over(self.fa, nb, ns)

    def freed_chunk(self, nb: int, ns: int) -> int:
        """The largest chunk the scores had to themselves, free for the logits after the layers (0: none)."""
        c = self.chunks
        if c is None:
            return 0
        return max(
            (max(t, c.size) for t in (_scores(a, nb, ns) for a in self.kq) if c.own_chunk(t)), default=0
        )


@dataclass(frozen=True, slots=True)
class FreedChunk:
    """`AttentionScores.freed_chunk` as a term (`DevicePlan.freed_chunk`)."""

    scores: AttentionScores
    label: str = ""

    def at(self, nb: int, ns: int) -> int:
        return self.scores.freed_chunk(nb, ns)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return loop_over(self, nb, ns)


@dataclass(frozen=True, slots=True)
class HostScores:
    """KQ scores a Vulkan device refuses (`Chunks.tensor_limit`) run on the host: the largest such scores, with the
    f16 K and V views (`views`: bytes per cell, `a_base` and `a_swa`) and Q (`views.c`) the host's KQ and KQV
    multiplications read copied in (the trace on the Vulkan stand-in, llama-3.1-8b at 32768 cells, `-ub 2048`: `CPU#cache_k_l0`,
    `CPU#cache_v_l0` and the 8 GiB `kq-0` in the host's buffer; Qwen3-30B-A3B: 8584 MiB recorded, 8192 of scores
    and its 2 x 32 MiB views above the host's graph inputs)."""

    # (the live set, the views, the first scores size the GPU refuses: `Chunks.tensor_limit`) per layer shape
    kq: tuple[tuple[Affine, Affine, int], ...]
    label: str = "KQ scores on the host (above the GPU's tensor limit)"

    def at(self, nb: int, ns: int) -> int:
        return max(
            (
                _scores(a, nb, ns) + views.at(nb, ns)
                for a, views, limit in self.kq
                if _scores(a, nb, ns) >= limit
            ),
            default=0,
        )

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return loop_over(self, nb, ns)


@dataclass(frozen=True, slots=True)
class FfnReuse:
    """The FFN of the layers that run after the last reader of a mask and V's indices: (FFN, first intermediate,
    held block, the freed space's alternatives) each; the first intermediate goes into the freed space when it
    fits (`ffn_reuse`)."""

    holes: tuple[tuple[int, int, int, tuple[Affine, ...]], ...]
    label: str = FFN
    less: int = 0  # bytes below the FFN fewer than the device's blocks count (`PlanBuilder._split_first`)

    def at(self, nb: int, ns: int) -> int:
        return max(
            (
                max(0, f - max(ffn_reuse(first, held, hole.at(nb, ns), f) for hole in alts) - self.less)
                for f, first, held, alts in self.holes
            ),
            default=0,
        )

    def over(self, nb: Cells, ns: Cells) -> Cells:
        out = np.zeros_like(nb)
        for f, first, held, alts in self.holes:
            reuse = np.max(
                np.stack([reuse_array(f, first, held, affine_over(h, nb, ns)) for h in alts]), axis=0
            )
            out = np.maximum(out, np.maximum(0, f - reuse - self.less))
        return out


@dataclass(frozen=True, slots=True)
class DsaZeros:
    """DSA top-k masks (src/llama-graph.cpp build_attn with top_k): a zero-filled f32 [1, min(n_kv, top_k), n_tok]
    leaf per layer, allocated up front: bytes per kept cell, and the top_k cap."""

    per_cell: int
    top_k: int
    label: str = "DSA top-k zeros"

    def at(self, nb: int, ns: int) -> int:
        return self.per_cell * min(nb, self.top_k)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        out: Cells = np.minimum(nb, self.top_k) * self.per_cell
        return out


@dataclass(frozen=True, slots=True)
class ChunkSpill:
    """A layer phase that outgrows the first chunk with no tensor that opens one by itself (Vulkan's 1 GiB chunks,
    `Chunks`): the layer's attention replayed over chunks (`ChunkedFit`) above what lies under it in the first
    chunk (`base`: the copied masks and indices, the blocks, pipeline-parallel copies), then the output phase's
    logits placed where ggml-alloc puts them once the attention is freed. The bytes those chunks add to the
    single-buffer figure of the other terms (the larger of the layer phase, `base` and the replay's peak, and the
    logits over `out_rest`); 0 where everything fits in one chunk. DeepSeek-V3 on the Vulkan-shaped stand-in at
    4096 cells, `-ub 2048`, flash attention: q, q_nope_absorbed and q_pe fill chunk 0 to 1008 MiB, Qcur (576 MiB)
    opens chunk 1, the 1010 MiB logits grow chunk 1 (2018 MiB recorded, 1584 in one buffer); at 32768 cells the
    larger masks leave q_nope_absorbed chunk 1 and Qcur chunk 2 (2194 MiB recorded).

    With `runs` the device's whole layer phase is replayed instead, layer after layer from the `prelude` (what
    lies in the first chunk when its first layer starts, bottom up), then `tail` (the output phase), once over
    chunks and once in one buffer (`layer_replay.replay_layers`): the bytes the chunks add are the difference,
    the output phase's chunks included (the device's plan then counts its phases as in one buffer,
    `DevicePlan.max_chunk` 0: DeepSeek-V2-Lite's 1600 MiB logits at `-ub 4096` in a chunk of their own).
    The free blocks one layer leaves decide where the next one's tensors go (DeepSeek-V3 over two Vulkan-shaped
    stand-ins, `-ts 3,1 -ub 2048`: the later layers' Q tensors over four chunks, 2888.16 and 2998.12 MiB
    recorded against 2432.16 and 2088.12 in one buffer; one layer's replay gave 0 and 434 MiB more)."""

    base: Affine
    ops: tuple[ReplayOp, ...]
    hole: int
    size: int
    logits: int
    out_rest: int
    others: tuple[int, ...] = ()  # chunks already there, counted elsewhere (`PlanBuilder.copy_chunks`)
    label: str = "chunks the layer phase spills into"
    prelude: tuple[tuple[str, Affine], ...] = ()
    runs: tuple[LayerRun, ...] = ()
    tail: tuple[ReplayOp, ...] = ()

    def at(self, nb: int, ns: int) -> int:
        if self.runs:
            prelude = tuple((name, a.at(nb, ns)) for name, a in self.prelude)
            one = replay_layers(ONE_BUFFER, prelude, self.runs, self.tail)[1]
            if one <= self.size:  # all in the first chunk: as in one buffer
                return 0
            return max(0, replay_layers(self.size, prelude, self.runs, self.tail)[1] - one)
        base = self.base.at(nb, ns)
        sim = ChunkedFit(self.size, base, (self.hole,))
        for cap in self.others:
            sim.chunks.append([cap, 0, cap])
            sim.free.append([])
        sim.run(self.ops)
        if len(sim.chunks) == 1 + len(self.others):
            return 0
        sim.release(*list(sim.live))
        if self.logits:
            sim.alloc("logits", self.logits)
        plain = max(base + BestFit((self.hole,)).run(self.ops), self.logits + self.out_rest)
        return max(0, sim.total - sum(self.others) - plain)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        if not self.runs:
            return loop_over(self, nb, ns)
        one, chunked = replayed_over(self.size, self.prelude, self.runs, self.tail, nb, ns)
        out: Cells = np.where(one <= self.size, 0, np.maximum(0, chunked - one))
        return out


def replayed_over(
    size: int,
    prelude: tuple[tuple[str, Affine], ...],
    runs: tuple[LayerRun, ...],
    tail: tuple[ReplayOp, ...],
    nb: Cells,
    ns: Cells,
) -> tuple[Cells, Cells]:
    """A layer phase's replay in one buffer and over chunks of `size` at each context (`replay_curve`)."""
    preludes = [
        tuple((name, a.at(b, w)) for name, a in prelude)
        for b, w in zip(nb.tolist(), ns.tolist(), strict=True)
    ]
    one = np.array(replay_curve(ONE_BUFFER, preludes, runs, tail), dtype=np.int64)
    chunked = np.array(replay_curve(size, preludes, runs, tail), dtype=np.int64)
    return one.reshape(nb.shape), chunked.reshape(nb.shape)


@dataclass(frozen=True, slots=True, eq=False)
class ReplayedBuffer:
    """A device's whole compute buffer as its layers replayed one after the other give it (`ChunkSpill.runs`:
    the first chunk's layout when the first layer starts, every layer, the output phase; over chunks of at most
    `size` bytes). The other terms take each phase's live set above what lies under it; the replay also has the
    free blocks the layers leave between the tensors they carry (DeepSeek-V3 over two stand-ins with `-ts 3,1`,
    `-ub 2048`, in one buffer: the peak at layer 2's Qcur with layer 1's output above a 120 MiB hole, 2432.16 MiB
    recorded, 2368 from the other terms), which the device plan counts where the replay is larger
    (`DevicePlan.replayed`)."""

    prelude: tuple[tuple[str, Affine], ...]
    runs: tuple[LayerRun, ...]
    tail: tuple[ReplayOp, ...]
    size: int
    label: str = "free blocks between the layers' tensors"

    def at(self, nb: int, ns: int) -> int:
        prelude = tuple((name, a.at(nb, ns)) for name, a in self.prelude)
        one = replay_layers(ONE_BUFFER, prelude, self.runs, self.tail)[1]
        if one <= self.size:  # all in the first chunk (the same replay as `ChunkSpill`'s)
            return one
        return replay_layers(self.size, prelude, self.runs, self.tail)[1]

    def over(self, nb: Cells, ns: Cells) -> Cells:
        one, chunked = replayed_over(self.size, self.prelude, self.runs, self.tail, nb, ns)
        out: Cells = np.where(one <= self.size, one, chunked)
        return out


@dataclass(frozen=True, slots=True)
class HostCacheAttention:
    """The first layer a GPU runs over a KV cache in host memory (`-nkvo`, or a host layer whose multiplications
    the first GPU takes): ggml-backend.cpp's `ggml_backend_sched_backend_id_from_cur` (lines 1098-1099 at
    515e85511) skips FLASH_ATTN_EXT when it places ops by their weights, so the attention runs on the GPU that holds
    its Q, and the cache's K and V views and the mask are split inputs copied into that GPU at the start of the
    layer's split (`ggml_backend_sched_split_graph`: the copies are graph nodes placed before the split's ops, in
    the order the op reads them: K, V, the mask). K's and V's copies are freed after the attention; the mask's copy
    is made once per GPU and stays live to the last layer that reads it. Replayed with the allocator's best fit
    (`BestFit`) over the blocks live at the split (`layout`, bottom up: ("", bytes) a free block, (name, bytes) a
    live tensor, Q last), then the FFN's whole set (`ffn`) above the mask when no freed block holds it. The bytes
    this live set reaches above the plan's layer inputs (`base`): the allocator's lists on the CUDA-shaped
    stand-in, llama-3.1-8b over two GPUs with `-nkvo`: at 8192 cells K's 16 MiB copy in the two freed blocks, V's
    and the 8 MiB mask above Q, the FFN above the mask (148.0 MiB); at 32768 cells K, V and the mask above Q
    (200.0 MiB) and the FFN in K's and V's freed space. A later layer of the same cache (`next_lead` >= 0: the
    highest of them) takes its Q from where this layer's space starts, `next_lead` bytes up (a host layer's V
    matrix copied in first, or a Q norm's product below the normed Q), with the layout's other free blocks taken
    again: its K and V copies fit where this layer's did only when it lands no higher (-ngl 16 at 32768 cells:
    layer 1's 3.3 MiB attn_v copy, Q after it, K after Q, V above the mask, 264.0 MiB; gemma-3-27b with `-nkvo
    -ngl 31`: GPU layer 35's normed Q one Q above host layer 5's, its V above the mask, 466.0 MiB). The GPU's
    second host layer, where traced (`next_layer`, `PlanBuilder._next_host_layer`), is replayed whole instead:
    its Q's product above the mask, its residual in V's freed block above it, its FFN one block higher than the
    first layer's (llama-3.1-8b with llama-server's reserve at 4096 cells: 139.5 MiB). Not replayed:
    a later GPU's next layer (layer 18's V copy above the mask left by layer 17 at 32768 cells, under the logits
    there); a GPU layer's FFN is placed as one tensor, an upper bound where its first intermediates alone would fit
    in a freed block; a host layer's (`ffn_ops`) is replayed, its matrices' copies and products one after the
    other."""

    layout: tuple[tuple[str, int], ...]
    k: Affine  # the K view's copy, f32 rows of the cache type per cell
    v: Affine  # the V view's copy (0: V is not copied)
    mask: Affine  # the mask's copy (0: copied before, or counted in `base`)
    out: Affine  # the attention's output
    ffn: int  # the layer's FFN live set as one block
    base: Affine  # what the plan counts under the transient (the layer inputs)
    next_lead: int = -1  # how far up a later layer's Q lands (-1: no later layer is replayed)
    ffn_ops: tuple[ReplayOp, ...] = ()  # a host layer's FFN copies and products (`offloaded_ffn_ops`)
    scores: Affine = Affine()  # without flash attention: the KQ scores (then `out` is not allocated)
    scores_next: bool = False  # the next layer reads the same cache: its copies and scores above the mask
    # the next host layer's ops in graph order before its K and V views' copies and after its attention's
    # output (replaces `next_lead`; empty: not replayed)
    next_layer: tuple[tuple[ReplayOp, ...], tuple[ReplayOp, ...]] = ((), ())
    residual: tuple[ReplayOp, ...] = ()  # the output matrix's copy and product before the FFN (empty: none)
    label: str = "host-cache K/V, mask copies"

    def at(self, nb: int, ns: int) -> int:
        return _host_cache_at(self, nb, ns)

    def replay(self, nb: int, ns: int) -> int:
        """`at` without the cache of the last replays (`_host_cache_at`)."""
        sim = BestFit.from_layout(self.layout)
        below = sum(size for _, size in self.layout)
        k, v, kq = self.k.at(nb, ns), self.v.at(nb, ns), self.scores.at(nb, ns)
        if kq:
            # the scores' product reads K, the softmax the mask, the product with V after it: the split's copies
            # in that order, then the scores
            sim.run([("k", k), ("m", self.mask.at(nb, ns)), ("v", v), ("o", kq)])
        else:
            sim.run([("k", k), ("v", v), ("m", self.mask.at(nb, ns)), ("o", self.out.at(nb, ns))])
        sim.run([("k", 0), ("v", 0), ("q", 0), ("o", 0)])
        top = sim.peak
        if kq and self.scores_next:
            # the next layer's copies and scores above the mask left there (llama-3.1-8b with `-nkvo`, flash
            # attention off, 8192 cells: layer 1's K and V copies and its 512 MiB scores above layer 0's mask,
            # 600.0 MiB where layer 0 reached 584.0; gemma-3-27b's next full-attention layer comes six layers
            # later, after other scores: its peak is layer 5's, 650.0 MiB)
            top = max(top, sim.end + k + v + kq)
        if self.ffn_ops:
            # a host layer's FFN (op offload): its copies and products replayed over the freed K, V and Q
            # (gpt-oss-20b at `-ngl 0`, 32768 cells: layer 1's 134.5 MiB gate copy right above the mask, its
            # 22.5 MiB products in K's and V's freed space, 261.0 MiB where the FFN as one block gave 307.5)
            top = max(top, copy.deepcopy(sim).run((*self.residual, *self.ffn_ops)))
        elif self.ffn > sim.largest_hole():
            top = max(top, sim.end + self.ffn)
        head, tail = self.next_layer
        if head:
            # the next layer replayed whole over what this one's attention left (`PlanBuilder._next_host_layer`)
            sim.run(head)
            sim.run([("k", k), ("v", v), ("o", self.out.at(nb, ns))])
            top = max(top, sim.run(tail))
        elif self.next_lead >= 0:
            q = dict(self.layout)["q"]
            # the blocks' free space is taken again by the next layer's own tensors; only the space from where
            # this layer's Q was up is left to its Q and copies
            taken = [(f"taken{i}", size) for i, (name, size) in enumerate(self.layout[:-2]) if not name]
            sim.run([*taken, ("lead", self.next_lead), ("q", q), ("lead", 0)])
            top = max(top, sim.run([("k", self.k.at(nb, ns)), ("v", self.v.at(nb, ns))]))
        return max(0, below + top - self.base.at(nb, ns))

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return loop_over(self, nb, ns)


@lru_cache(maxsize=8192)
def _host_cache_at(term: HostCacheAttention, nb: int, ns: int) -> int:
    """`HostCacheAttention.replay`, kept for the last contexts asked: a curve asks for the same few hundred again
    as a slider moves, and each is a replay."""
    return term.replay(nb, ns)


@dataclass(frozen=True, slots=True)
class LogitsOnTop:
    """The host's logits where they raise the buffer: nothing when a freed mask (`room`, one per cache the last
    layers read) holds them. The graph allocator (ggml-alloc.c, `ggml_dyn_tallocr_alloc`) gives a tensor the
    smallest free block it fits in, and by the output layer (src/llama-graph.cpp `build_inp_attn_kv`: the mask is
    an input of every attention layer and of nothing after them) the masks' blocks are free (the allocator's trace
    on LFM2-1.2B at 131072 cells with flash attention: the 128 MiB logits in the freed 128 MiB f16 mask, the peak
    at the first layer's FFN)."""

    logits: int
    room: tuple[Affine, ...] = ()
    label: str = LOGITS

    def at(self, nb: int, ns: int) -> int:
        if self.logits and any(self.logits <= a.at(nb, ns) for a in self.room):
            return 0
        return self.logits

    def over(self, nb: Cells, ns: Cells) -> Cells:
        out = np.full_like(nb, self.logits)
        for a in self.room:
            out = np.where(self.logits <= affine_over(a, nb, ns), 0, out)
        return out


@dataclass(frozen=True, slots=True, eq=False)
class ForkAttention:
    """A fork's attention at its peak (`ForkGraph.attention_peak`), the largest over the device's attention groups
    ((is_swa, Q bytes) each: the intermediate follows the group's cells)."""

    graph: ForkGraph
    profile: ModelProfile
    groups: tuple[tuple[bool, int], ...]
    n_tok: int
    flash_attn: bool
    cache_type: str
    gpu_backend: bool
    label: str = SCORES

    def at(self, nb: int, ns: int) -> int:
        out = 0
        for is_swa, q in self.groups:
            peak = self.graph.attention_peak(
                self.profile,
                ns if is_swa else nb,
                self.n_tok,
                q,
                flash_attn=self.flash_attn,
                cache_type=self.cache_type,
                gpu_backend=self.gpu_backend,
            )
            out = max(out, peak)
        return out

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return loop_over(self, nb, ns)


@dataclass(frozen=True, slots=True)
class IndexerPeak:
    """DeepSeek-V3.2's lightning indexer at its peak (`IndexerScores`)."""

    indexer: IndexerScores
    label: str = SCAN

    def at(self, nb: int, ns: int) -> int:
        return self.indexer.transient(nb)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return self.indexer.transient_array(nb)


@dataclass(frozen=True, slots=True)
class KpoolPeak:
    """The k-pool selection of qwen4exp and glm5-next at its peak (`KpoolSelection.transient`)."""

    kpool: KpoolSelection
    label: str = SCAN

    def at(self, nb: int, ns: int) -> int:
        return self.kpool.transient(nb)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return self.kpool.transient_array(nb)


@dataclass(frozen=True, slots=True)
class KpoolInputs:
    """The k-pool selection's graph inputs (`KpoolSelection.inputs`)."""

    kpool: KpoolSelection
    label: str = "k-pool inputs"
    copies: int = 1  # the host's copies with pipeline parallelism

    def at(self, nb: int, ns: int) -> int:
        return self.copies * self.kpool.inputs(nb)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return self.copies * self.kpool.inputs_array(nb)


@dataclass(frozen=True, slots=True)
class Dsv4Peak:
    """DeepSeek-V4's compressed attention at the indexer's peak (`Dsv4Attention.transient`)."""

    dsv4: Dsv4Attention
    label: str = SCAN

    def at(self, nb: int, ns: int) -> int:
        return self.dsv4.transient(nb, ns)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return self.dsv4.transient_array(nb, ns)


@dataclass(frozen=True, slots=True)
class Dsv4Inputs:
    """DeepSeek-V4's compressed-attention masks and leaves (`Dsv4Attention.inputs`)."""

    dsv4: Dsv4Attention
    label: str = "compressed-attention masks"
    copies: int = 1  # the host's copies with pipeline parallelism

    def at(self, nb: int, ns: int) -> int:
        return self.copies * self.dsv4.inputs(nb)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return self.copies * self.dsv4.inputs_array(nb)


@dataclass(frozen=True, slots=True)
class MlaHostCache:
    """`HostCacheAttention`'s MLA form: the GPU's first layer over a cache in host memory (`-nkvo`, or a host
    layer whose multiplications the first GPU takes), where the cache holds the compressed KV (kv_lora_rank + rope
    dims per cell) and the absorbed attention reads K as the cache's view and V as a view of its first kv_lora_rank
    dims (src/models/deepseek2.cpp at 515e85511: `build_attn(..., Qcur, Kcur, Vcur, ...)` with Vcur the latent;
    src/llama-graph.cpp `build_attn_mha`: `v = ggml_view_4d(k, ...)` for MLA). The scheduler copies both views and
    the mask in at the attention's split (ggml-backend.cpp `ggml_backend_sched_split_graph`, in the order the op
    reads them), each view as its whole extent (`ggml_nbytes`: V's ends one row's rope part short of K's). Replayed
    with the allocator's best fit (`BestFit`) over the blocks live at the layer's start (`layout`, bottom up; the
    attention norm's block "norm" is freed after the compressed KV's product): the query's ops (`query`,
    `attention.absorbed_mla_ops` to Kcur's store), the copies (on a later GPU first the layer input, `residual`,
    a split input of the attention's split as the stores into the cache before it ran on the host), the
    attention's ops (`attend`), then with only the
    blocks and the mask live each of the GPU's FFNs (`ffns`): a host layer's copied matrices and outputs
    (`ffn.offloaded_ffn_ops`), else its live set as one block. The allocator's list on the CUDA-shaped stand-in,
    DeepSeek-V2-Lite with llama-server's reserve at `-ngl 0` and 32768 cells: q and q_nope_absorbed above the
    blocks, Qcur above them (56 MiB), K's 36 MiB copy, V's, the 32 MiB mask at 128 MiB; layer 1's 187 MiB copy of
    its down experts above the mask (347.0 MiB, where the gate's and up's 99 MiB copies fit under it); at 131072
    cells layer 1's V copy above the mask (616.0 MiB): its attention norm's block and the mixed batch's block
    are taken again, and the copy of its query matrix (3.4 MiB) lands above the blocks, q above it, so its K copy
    lands 3.4 MiB higher than layer 0's and V no longer fits under the mask (`next_query`), and on the GPU that
    runs the model's first layer the next layer's attention output is replayed above what its copies left
    (DeepSeek-V3 with `-nkvo`, two sequences at 65536 cells: layer 1's q_nope_absorbed above the mask, its K copy
    in the 128 MiB block that leaves, the smallest that holds it, V's in the 144 MiB hole under the mask, the
    128 MiB output above Qcur-1, 632.0 MiB; on a later GPU the input copied in at the split is freed by the FFN's
    residual add and the next layer's norm and input take the two blocks above it: DeepSeek-V3 over two GPUs with
    `-nkvo` at 131072 cells, layer 32's K copy in the block its q and q_nope_absorbed left, V's and the 128 MiB
    output above the mask, 897.0 MiB on the second); with a quantized
    cache the attention's output holds the f16 copies of both copied views, V's copy no longer a view of K's
    (fattn-common.cuh `ggml_cuda_flash_attn_ext_get_f16_extra_data`, `V_is_K_view`; DeepSeek-V3 with q8_0 caches
    and `-nkvo` at 32768 cells: the 128 MiB output, K's 36 MiB and V's 32 MiB f16 copies above Qcur); DeepSeek-V3
    over two GPUs with `-nkvo` at 32768 cells, on the second: the layer input, K, V and the mask in the space
    q_nope_absorbed and q_pe left under Qcur, the 128 MiB attention output above Qcur (481.0 MiB). The bytes
    above the plan's layer inputs (`base`)."""

    layout: tuple[tuple[str, int], ...]
    query: tuple[ReplayOp, ...]
    k: Affine  # the cache view's copy
    v: Affine  # V's view's copy
    mask: Affine  # the mask's copy
    attend: tuple[ReplayOp, ...]  # the flash attention's output and what follows it to the output projection
    ffns: tuple[tuple[ReplayOp, ...], ...]
    base: Affine
    residual: int = 0  # the layer input a later GPU copies in at the split, before K (0: live in `layout`)
    next_query: tuple[ReplayOp, ...] = ()  # the next layer's blocks taken again and its query (empty: none)
    fa_f16: Affine = Affine()  # CUDA's f16 copies of the copied views, in the attention's output
    label: str = "host-cache K/V, mask copies (MLA)"

    def at(self, nb: int, ns: int) -> int:
        return _mla_host_at(self, nb, ns)

    def replay(self, nb: int, ns: int) -> int:
        """The highest end of the replays, above `base` (`at` without its cache)."""
        below = sum(size for _, size in self.layout)
        top = max((self._ffn_peak(ops, nb, ns) for ops in self.ffns), default=self._attention(nb, ns).peak)
        if self.next_query:
            # the next layer of the cache over the mask left there: its query, its K and V copies where they fit
            # and its attention's output above what they left
            sim = self._attention(nb, ns)
            sim.run(self.next_query)
            top = max(top, sim.run(self._copied(nb, ns, [])))
        return max(0, below + top - self.base.at(nb, ns))

    def _attention(self, nb: int, ns: int) -> BestFit:
        sim = BestFit.from_layout(self.layout)
        sim.run(self.query)
        sim.run(self._copied(nb, ns, [("res", self.residual)], ("m", self.mask.at(nb, ns))))
        # everything of the attention freed; the blocks and the mask stay
        sim.run([(name, 0) for name in list(sim.live) if name not in {"m", "res", *dict(self.layout)}])
        return sim

    def _copied(self, nb: int, ns: int, lead: list[ReplayOp], *mask: ReplayOp) -> list[ReplayOp]:
        """The copies in at the attention's split (`lead`, K's, V's, the `mask`'s) and the attention's ops."""
        f16 = self.fa_f16.at(nb, ns)
        copies = [*lead, ("k", max(0, self.k.at(nb, ns))), ("v", max(0, self.v.at(nb, ns))), *mask]
        return [*copies, *((n, b + f16 if n == "fattn" and b else b) for n, b in self.attend)]

    def _ffn_peak(self, ops: tuple[ReplayOp, ...], nb: int, ns: int) -> int:
        sim = self._attention(nb, ns)
        return sim.run(ops)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return loop_over(self, nb, ns)


@lru_cache(maxsize=4096)
def _mla_host_at(term: MlaHostCache, nb: int, ns: int) -> int:
    """`MlaHostCache.replay`, kept for the last contexts asked (a curve asks for the same ones as a slider moves)."""
    return term.replay(nb, ns)
