"""The terms of a device's compute buffer: each one a label, its bytes at one context (`at`, the KV cells per
stream of the base and the SWA cache) and its bytes over arrays of contexts (`over`, the same cells as numpy
arrays, for a whole curve at once). `DevicePlan` says how the terms combine (the live set of the layer phase,
the larger of the attention and the FFN, the output phase); one evaluator (`device_plan.device_parts`) reads them
at one context or over a curve.

A new graph term is one class here with `label`, `at` and `over` (`over` may loop over `at` when the term is a
replay), added to the right group of the plan in `PlanBuilder` (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

from fitplan.core.memory.compute.allocator import Affine, ffn_reuse, max_at, reuse_array
from fitplan.core.memory.compute.attention import Dsv4Attention, IndexerScores, KpoolSelection
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
        out: Cells = np.where(grow <= a.room, 0, grow + a.c)
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
class AttentionScores:
    """The attention's live set: the largest over the layer shapes (`kq`: Q, K, V, the KQ scores, a fused QKV
    output, ...) plus the largest of CUDA's f16 copies of a quantized cache (`fa`), part of the same op."""

    kq: tuple[Affine, ...]
    fa: tuple[Affine, ...] = ()

    @property
    def label(self) -> str:
        return SCORES if any(a.a_base or a.a_swa for a in self.kq) else SCAN

    def at(self, nb: int, ns: int) -> int:
        return max_at(self.kq, nb, ns) + max_at(self.fa, nb, ns)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return _largest_over(self.kq, nb, ns) + _largest_over(self.fa, nb, ns)


@dataclass(frozen=True, slots=True)
class FfnReuse:
    """The FFN of the layers that run after the last reader of a mask and V's indices: (FFN, first intermediate,
    held block, the freed space's alternatives) each; the first intermediate goes into the freed space when it
    fits (`ffn_reuse`)."""

    holes: tuple[tuple[int, int, int, tuple[Affine, ...]], ...]
    label: str = FFN

    def at(self, nb: int, ns: int) -> int:
        return max(
            (
                f - max(ffn_reuse(first, held, hole.at(nb, ns), f) for hole in alts)
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
            out = np.maximum(out, f - reuse)
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
class LogitsOnTop:
    """The host's logits where they raise the buffer: nothing when a freed mask (`room`, one per cache the last
    layers read) holds them. The graph allocator (ggml-alloc.c, `ggml_dyn_tallocr_alloc`) gives a tensor the
    smallest free block it fits in, and by the output layer (src/llama-graph.cpp `build_inp_attn_kv`: the mask is
    an input of every attention layer and of nothing after them) the masks' blocks are free (the allocator's trace
    on LFM2-1.2B at 131072 cells with flash attention: the 128 MiB logits in the freed 128 MiB f16 mask, the peak
    at the first layer's FFN)."""

    logits: int
    room: tuple[Affine, ...] = ()
    label: str = "logits"

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

    def at(self, nb: int, ns: int) -> int:
        return self.kpool.inputs(nb)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return self.kpool.inputs_array(nb)


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

    def at(self, nb: int, ns: int) -> int:
        return self.dsv4.inputs(nb)

    def over(self, nb: Cells, ns: Cells) -> Cells:
        return self.dsv4.inputs_array(nb)
