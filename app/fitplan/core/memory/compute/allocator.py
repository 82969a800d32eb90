"""The graph allocator's model: tensor element sizes, the best-fit replay of `ggml_dyn_tallocr_alloc`
(ggml-alloc.c), terms affine in the cells and sequences, and the reuse of a freed block by the next tensor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
else:
    from fitplan.core.base.lazy import np


F32 = 4
F16 = 2
I32 = 4
I64 = 8


#: One step of a replayed allocation sequence: (tensor name, bytes) allocates it, (tensor name, 0) frees it.
ReplayOp = tuple[str, int]


def replay(ops: tuple[ReplayOp, ...], holes: tuple[int, ...]) -> int:
    """The highest end `ops` reach above the base, with free blocks of `holes` below it (`BestFit`)."""
    return BestFit(holes).run(ops)


def in_hole(pre: int, last: int, hole: int) -> int:
    """Bytes a live set takes over the hole's start: `pre` allocated first, then `last` (the largest, allocated
    last) into what is left of the hole or, when it does not fit there, above the mask."""
    if pre + last <= hole:
        return hole
    if pre <= hole:
        return hole + last
    return pre + last  # more than the hole before the last tensor: where it goes was not traced


@dataclass(frozen=True, slots=True)
class Affine:
    """`a_base * n_kv_base + a_swa * n_kv_swa + c`: how a tensor's size follows the KV cells.

    `room` > 0: the cell-dependent part is a tensor that goes into a free block of that size while it fits there;
    it then adds nothing (and `c` is not reached: a separate term holds what is live in that case).
    `flat`: that tensor is counted elsewhere (a graph input under the blocks); only where it lands depends on its
    size, so past `room` the term is `c` alone.
    """

    a_base: int = 0
    a_swa: int = 0
    c: int = 0
    room: int = 0
    flat: bool = False

    def at(self, n_kv_base: int, n_kv_swa: int) -> int:
        grow = self.a_base * n_kv_base + self.a_swa * n_kv_swa
        if self.room and grow <= self.room:
            return 0
        return self.c if self.flat else grow + self.c


def max_at(affs: tuple[Affine, ...], nb: int, ns: int) -> int:
    return max((a.at(nb, ns) for a in affs), default=0)


def merge_free(blocks: list[list[int]], end: int) -> tuple[list[list[int]], int]:
    """Sorted free blocks `[offset, size]` with neighbours merged, and the end lowered past a last block that
    reaches it (ggml-alloc.c `ggml_dyn_tallocr_free_bytes` merges a freed range with adjacent free blocks)."""
    merged: list[list[int]] = []
    for blk in blocks:
        if merged and merged[-1][0] + merged[-1][1] == blk[0]:
            merged[-1][1] += blk[1]
        else:
            merged.append(blk)
    if merged and merged[-1][0] + merged[-1][1] == end:
        end = merged.pop()[0]
    return merged, end


class BestFit:
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
    def from_layout(cls, segments: tuple[tuple[str, int], ...]) -> BestFit:
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
            self.free, self.end = merge_free(self.free, self.end)

    def run(self, ops: tuple[ReplayOp, ...] | list[ReplayOp]) -> int:
        """Replay `ops` (a size allocates the name, 0 frees it if live) and give the highest end reached."""
        for name, size in ops:
            if size:
                self.alloc(name, size)
            elif name in self.live:
                self.release(name)
        return self.peak

    def largest_hole(self) -> int:
        return max((size for _, size in self.free), default=0)


class ChunkedFit:
    """`BestFit` over a buffer made of chunks of at most `size` bytes (ggml-alloc.c `ggml_dyn_tallocr_alloc` with
    the buffer type's maximum size, Vulkan's 1 GiB): a free block below a chunk's end, the best fit (the last chunk
    with one that fits wins, as the loop there keeps its best size per chunk); else the free end of a chunk with
    room, the one it fills without growing it (the best such fit), else the one that grows least; else a new chunk
    of `MAX(size, tensor)` (`ggml_dyn_tallocr_new_chunk`). Chunk 0 starts with `base` bytes live and `holes` free
    blocks among them. `total` is the sum of the chunks' highest ends (the buffer ggml-alloc reserves)."""

    def __init__(self, size: int, base: int, holes: tuple[int, ...] = ()) -> None:
        self.size = size
        # per chunk: [capacity, end, highest end]; free blocks below the ends per chunk: [offset, size]
        self.chunks: list[list[int]] = [[max(size, base), base, base]]
        self.free: list[list[list[int]]] = [[]]
        at = 0
        for h in holes:
            if h and at + h < base:
                self.free[0].append([at, h])
                at += h + 1  # separate blocks, never adjacent to each other
        self.live: dict[str, tuple[int, int, int]] = {}  # name: chunk, offset, size

    @classmethod
    def from_layout(cls, size: int, segments: tuple[tuple[str, int], ...]) -> ChunkedFit:
        """The first chunk holding `segments` from the bottom up: ("", size) a free block, (name, size) a live
        tensor (released by name); zero-sized segments are skipped."""
        sim = cls(size, sum(n for _, n in segments))
        at = 0
        for name, n in segments:
            if n and name:
                sim.live[name] = (0, at, n)
            elif n:
                sim.free[0].append([at, n])
            at += n
        sim.free[0], sim.chunks[0][1] = merge_free(sim.free[0], sim.chunks[0][1])
        return sim

    def state(self) -> tuple[object, ...]:
        """Everything the next allocations depend on: the chunks, their free blocks and the live tensors."""
        return (
            tuple(map(tuple, self.chunks)),
            tuple(tuple(map(tuple, blocks)) for blocks in self.free),
            tuple(sorted(self.live.items())),
        )

    @property
    def total(self) -> int:
        return sum(top for _, _, top in self.chunks)

    def alloc(self, name: str, size: int) -> None:
        where = self._below(size)
        if where is not None:
            c, i = where
            off = self.free[c][i][0]
            self.free[c][i][0] += size
            self.free[c][i][1] -= size
            if not self.free[c][i][1]:
                del self.free[c][i]
        else:
            c = self._end(size)
            if c < 0:
                self.chunks.append([max(size, self.size), 0, 0])
                self.free.append([])
                c = len(self.chunks) - 1
            chunk = self.chunks[c]
            off = chunk[1]
            chunk[1] += size
            chunk[2] = max(chunk[2], chunk[1])
        self.live[name] = (c, off, size)

    def _below(self, size: int) -> tuple[int, int] | None:
        found: tuple[int, int] | None = None
        for c, blocks in enumerate(self.free):
            best = -1
            for i, (_, bsize) in enumerate(blocks):
                if bsize >= size and (best < 0 or bsize <= blocks[best][1]):
                    best = i
            if best >= 0:
                found = (c, best)
        return found

    def _end(self, size: int) -> int:
        best, best_reuse = -1, 0
        for c, (cap, end, top) in enumerate(self.chunks):
            if cap - end < size:
                continue
            reuse = top - end - size
            better_reuse = (best < 0 or best_reuse < 0) and (best < 0 or reuse > best_reuse)
            better_fit = best >= 0 and 0 <= reuse < best_reuse
            if better_reuse or better_fit:
                best, best_reuse = c, reuse
        return best

    def release(self, *names: str) -> None:
        for name in names:
            c, off, size = self.live.pop(name)
            self.free[c], self.chunks[c][1] = merge_free(
                sorted([*self.free[c], [off, size]]), self.chunks[c][1]
            )

    def run(self, ops: tuple[ReplayOp, ...] | list[ReplayOp]) -> int:
        """Replay `ops` (a size allocates the name, 0 frees it if live) and give the buffer's size."""
        for name, size in ops:
            if size:
                self.alloc(name, size)
            elif name in self.live:
                self.release(name)
        return self.total


def ffn_reuse(first: int, held: int, room: int, f: int = 0) -> int:
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


def reuse_array(f: int, first: int, held: int, room: NDArray[np.int64]) -> NDArray[np.int64]:
    """`ffn_reuse` over an array of rooms."""
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
