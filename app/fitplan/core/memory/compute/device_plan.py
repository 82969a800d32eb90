"""One device's compute plan: the terms the builder found (`terms`), grouped by how they combine, and the one
evaluator that reads them at one context or over a whole curve at once (`device_parts`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeAlias, TypeVar

from fitplan.core.memory.compute.inputs import ComputeBuffer, ComputePart
from fitplan.core.memory.compute.terms import FA_COPIES, FFN, LOGITS, SCAN, SCORES, Cells, Fixed, Term

#: The part under the logits where the free end stays within the layer phase (`DevicePlan.output_above_layer`).
BELOW_FREE_END = "layer phase under the logits"

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
else:
    from fitplan.core.base.lazy import np

V = TypeVar("V")  # bytes: an int at one context, an array over a curve
B = TypeVar("B")  # a condition: a bool, an array of them


@dataclass(frozen=True, slots=True)
class DevicePlan:
    """The compute buffer of one backend as terms of the KV cells (built once per placement).

    The buffer is the larger of two phases (the layer phase on a tie), with `under` below both. The layer phase:
    `inputs`, the transient, `after`; the transient (when the device runs layers) is the larger of the
    attention's live sets (`attention`, largest of; `fa_copies` is part of it, named apart) and the FFN's (`ffn`,
    largest of; the FFN on a tie), or the host's `logits` where they are at least as large. The output phase:
    `output` (none: the layer phase alone).

    `max_chunk` > 0: the buffer type's maximum size (Vulkan's 1 GiB suballocation block). ggml-alloc then builds
    the buffer from chunks of at most that size (ggml-alloc.c `ggml_dyn_tallocr_alloc`: a tensor that fits in no
    chunk's free space opens a new chunk, `ggml_dyn_tallocr_new_chunk`), and the buffer is the sum of the chunks'
    highest ends. The output phase's logits (`LOGITS` in `output`) that do not fit above what lies under them in
    the first chunk take a chunk of their own: the buffer is then the larger of the layer phase and what is under
    the logits, plus the logits. A layer phase larger than a chunk leaves the logits a chunk its scores had to
    themselves (`freed_chunk`) where they fit there; where they do not, they take one of their own too.

    `output_above_layer`: the allocator could not merge the layer phase's freed space back into its free end (an
    out-of-order free list, `PlanBuilder._unmerged_free_end`): the output phase's terms sit on top of the layer
    phase without the attention's scores (`BELOW_FREE_END`; the scores are taken from the free end and merge back
    into it when freed), the larger of that and the layer phase live (one chunk: no recording has both).

    `replayed`: the device's whole buffer as its layers replayed one after the other give it
    (`terms.ReplayedBuffer`); what it holds beyond the other terms is a part of its own (the free blocks the
    layers leave between the carried tensors)."""

    device: int | None  # GPU index, None = host
    layer_phase: bool  # the device runs layers (attention or FFN)
    inputs: tuple[Term, ...] = ()  # graph inputs and blocks live under the transient, listed before it
    attention: tuple[Term, ...] = ()
    fa_copies: Term | None = None  # CUDA's f16 copies of a quantized cache: the attention op's own allocation
    ffn: tuple[Term, ...] = ()
    after: tuple[Term, ...] = ()  # live with the transient, listed after it
    logits: Term | None = None  # the host's logits, in the transient's place where larger
    output: tuple[Term, ...] = ()
    under: tuple[Term, ...] = ()  # below both phases (pipeline-parallel copies)
    max_chunk: int = 0  # the largest chunk ggml-alloc makes of the buffer (0: no limit)
    freed_chunk: Term | None = None  # the largest chunk the layer phase's scores had to themselves
    output_above_layer: bool = False  # the output phase above the layer phase without its scores
    replayed: Term | None = None  # the whole buffer, replayed (a floor on the other terms' sum)

    def terms(self) -> tuple[Term, ...]:
        """Every term of the plan: the groups, then the attention's CUDA copies, the host's logits, the chunk
        the scores freed and the replayed buffer."""
        groups = (self.inputs, self.attention, self.ffn, self.after, self.output, self.under)
        extra = tuple(
            t for t in (self.fa_copies, self.logits, self.freed_chunk, self.replayed) if t is not None
        )
        return tuple(t for g in groups for t in g) + extra


class Space(Protocol, Generic[V, B]):
    """Where the evaluator reads the terms: one context (`OneContext`) or arrays of contexts (`ManyContexts`)."""

    def of(self, term: Term) -> V: ...
    def zero(self) -> V: ...
    def add(self, a: V, b: V) -> V: ...
    def sub(self, a: V, b: V) -> V: ...
    def larger(self, a: V, b: V) -> V: ...
    def ge(self, a: V, b: V) -> B: ...
    def gt(self, a: V, b: V) -> B: ...
    def nonzero(self, a: V) -> B: ...
    def both(self, a: B, b: B) -> B: ...
    def either(self, a: B, b: B) -> B: ...
    def no(self, a: B) -> B: ...
    def when(self, c: B, a: V) -> V: ...


class OneContext:
    """Bytes at one context: `nb` base and `ns` SWA cells per stream."""

    def __init__(self, nb: int, ns: int) -> None:
        self.nb, self.ns = nb, ns

    def of(self, term: Term) -> int:
        return term.at(self.nb, self.ns)

    def zero(self) -> int:
        return 0

    def add(self, a: int, b: int) -> int:
        return a + b

    def sub(self, a: int, b: int) -> int:
        return a - b

    def larger(self, a: int, b: int) -> int:
        return max(a, b)

    def ge(self, a: int, b: int) -> bool:
        return a >= b

    def gt(self, a: int, b: int) -> bool:
        return a > b

    def nonzero(self, a: int) -> bool:
        return a != 0

    def both(self, a: bool, b: bool) -> bool:
        return a and b

    def either(self, a: bool, b: bool) -> bool:
        return a or b

    def no(self, a: bool) -> bool:
        return not a

    def when(self, c: bool, a: int) -> int:
        return a if c else 0


Flags: TypeAlias = "NDArray[np.bool_]"


class ManyContexts:
    """Bytes at each of many contexts: arrays of base and SWA cells per stream."""

    def __init__(self, nb: Cells, ns: Cells) -> None:
        self.nb, self.ns = nb, ns
        self._zero = np.zeros_like(nb)
        self._zero.flags.writeable = False  # shared: every operation here makes a new array

    def of(self, term: Term) -> Cells:
        return term.over(self.nb, self.ns)

    def zero(self) -> Cells:
        return self._zero

    def add(self, a: Cells, b: Cells) -> Cells:
        return a + b

    def sub(self, a: Cells, b: Cells) -> Cells:
        return a - b

    def larger(self, a: Cells, b: Cells) -> Cells:
        return np.maximum(a, b)

    def ge(self, a: Cells, b: Cells) -> Flags:
        return a >= b

    def gt(self, a: Cells, b: Cells) -> Flags:
        return a > b

    def nonzero(self, a: Cells) -> Flags:
        out: Flags = a != 0
        return out

    def both(self, a: Flags, b: Flags) -> Flags:
        return a & b

    def either(self, a: Flags, b: Flags) -> Flags:
        return a | b

    def no(self, a: Flags) -> Flags:
        return ~a

    def when(self, c: Flags, a: Cells) -> Cells:
        out: Cells = np.where(c, a, 0)
        return out


#: Parts of a buffer live together, when a condition holds (None: always); at one context the condition is a bool.
Segment = tuple[B | None, list[tuple[str, V]]]


def device_parts(p: DevicePlan, s: Space[V, B]) -> list[Segment[B, V]]:
    """The device's buffer as segments of (label, bytes) parts, in order, each live where its condition holds: the
    phase that is the peak, the transient's larger side."""
    trans, trans_total = _transient(p, s) if p.layer_phase else ([], s.zero())
    if p.logits is not None:
        top = (p.logits.label, s.of(p.logits))
        if p.layer_phase:
            keep = s.ge(top[1], trans_total)
            trans = [*_within(trans, s.no(keep), s), (keep, [top])]
            trans_total = s.larger(top[1], trans_total)
        else:
            trans, trans_total = [(None, [top])], top[1]
    inputs, after = _read(p.inputs, s), _read(p.after, s)
    layer: list[Segment[B, V]] = [(None, inputs), *trans, (None, after)]
    if p.output:
        layer_total = s.add(s.add(_total(inputs, s), trans_total), _total(after, s))
        layer = _output_phase(p, layer, layer_total, s)
    segments = [*layer, (None, _read(p.under, s))]
    if p.replayed is not None:
        total = s.zero()
        for live, seg in segments:
            t = _total(seg, s)
            total = s.add(total, t if live is None else s.when(live, t))
        short = s.larger(s.zero(), s.sub(s.of(p.replayed), total))
        segments.append((None, [(p.replayed.label, short)]))
    return segments


def _output_phase(
    p: DevicePlan, layer: list[Segment[B, V]], layer_total: V, s: Space[V, B]
) -> list[Segment[B, V]]:
    """The layer phase and the output phase, the larger of them live; with chunks (`DevicePlan.max_chunk`) the
    logits that do not fit in the first chunk above what is under them sit in a chunk of their own, next to the
    larger of the layer phase and what is under the logits."""
    out = _read(p.output, s)
    if p.output_above_layer:
        below = _below_free_end(p, s)
        on_top = s.ge(layer_total, s.add(below, _total(out, s)))
        return [*_within(layer, on_top, s), (s.no(on_top), [(BELOW_FREE_END, below), *out])]
    first = s.ge(layer_total, _total(out, s))
    if not p.max_chunk:
        return [*_within(layer, first, s), (s.no(first), out)]
    logits = [part for part in out if part[0] == LOGITS]
    rest = [part for part in out if part[0] != LOGITS]
    rest_total = _total(rest, s)
    limit = _const(s, p.max_chunk)
    own = s.ge(limit, layer_total)
    if p.freed_chunk is not None:
        # a layer phase that spans chunks: the logits take the chunk its scores had where they fit there
        freed = s.of(p.freed_chunk)
        own = s.either(own, s.both(s.nonzero(freed), s.gt(_total(logits, s), freed)))
    chunk = s.both(s.gt(_total(out, s), limit), own)
    # own chunk: the layer phase where it is at least what is under the logits; else the one phase as before
    layer_live = s.either(s.both(chunk, s.ge(layer_total, rest_total)), s.both(s.no(chunk), first))
    return [
        *_within(layer, layer_live, s),
        (s.no(layer_live), rest),
        (s.either(chunk, s.no(first)), logits),
    ]


def _below_free_end(p: DevicePlan, s: Space[V, B]) -> V:
    """The layer phase without the attention's scores: how high the free end stays with an out-of-order free
    list (`DevicePlan.output_above_layer`)."""
    att, ffn = s.zero(), s.zero()
    for t in p.attention:
        if t.label != SCORES:
            att = s.larger(att, s.of(t))
    for t in p.ffn:
        ffn = s.larger(ffn, s.of(t))
    return s.add(s.add(_total(_read(p.inputs, s), s), s.larger(att, ffn)), _total(_read(p.after, s), s))


def _const(s: Space[V, B], n: int) -> V:
    """`n` bytes at every context of the space."""
    return s.of(Fixed("", n))


def _transient(p: DevicePlan, s: Space[V, B]) -> tuple[list[Segment[B, V]], V]:
    """The larger of the attention and the FFN (the FFN on a tie), and its bytes. The attention is named after
    the scores when one of its terms that has them is nonzero; CUDA's f16 copies inside it are a part of their
    own."""
    att, ffn = s.zero(), s.zero()
    scores: B | None = None
    for t in p.attention:
        v = s.of(t)
        att = s.larger(att, v)
        if t.label == SCORES:
            scores = s.nonzero(v) if scores is None else s.either(scores, s.nonzero(v))
    for t in p.ffn:
        ffn = s.larger(ffn, s.of(t))
    wins = s.gt(att, ffn)
    fa = s.of(p.fa_copies) if p.fa_copies is not None else s.zero()
    shown = s.sub(att, fa)
    named: list[Segment[B, V]] = (
        [(wins, [(SCAN, shown)])]
        if scores is None
        else [(s.both(wins, scores), [(SCORES, shown)]), (s.both(wins, s.no(scores)), [(SCAN, shown)])]
    )
    return [*named, (s.no(wins), [(FFN, ffn)]), (wins, [(FA_COPIES, fa)])], s.larger(att, ffn)


def _read(terms: tuple[Term, ...], s: Space[V, B]) -> list[tuple[str, V]]:
    return [(t.label, s.of(t)) for t in terms]


def _within(segments: list[Segment[B, V]], c: B, s: Space[V, B]) -> list[Segment[B, V]]:
    """`segments`, each live only where `c` holds too."""
    return [(c if cond is None else s.both(cond, c), parts) for cond, parts in segments]


def _total(parts: list[tuple[str, V]], s: Space[V, B]) -> V:
    if not parts:
        return s.zero()
    out = parts[0][1]
    for _, v in parts[1:]:
        out = s.add(out, v)
    return out


def evaluate_plan(p: DevicePlan, nb: int, ns: int) -> ComputeBuffer:
    """The device's buffer at one context: the nonzero parts of its live segments."""
    parts = (
        ComputePart(label, b)
        for live, seg in device_parts(p, OneContext(nb, ns))
        if live is None or live
        for label, b in seg
        if b
    )
    return ComputeBuffer(p.device, tuple(parts))


def total_array(p: DevicePlan, nb: Cells, ns: Cells) -> Cells:
    """The device's buffer at each of the contexts the arrays of cells give."""
    s = ManyContexts(nb, ns)
    out = s.zero()
    for live, seg in device_parts(p, s):
        total = _total(seg, s)
        out = s.add(out, total if live is None else s.when(live, total))
    return out
