"""One device's compute plan: the terms the builder found (`terms`), grouped by how they combine, and the one
evaluator that reads them at one context or over a whole curve at once (`device_parts`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from fitplan.core.memory.compute.inputs import ComputeBuffer, ComputePart
from fitplan.core.memory.compute.terms import FA_COPIES, FFN, SCAN, SCORES, Cells, Term

V = TypeVar("V")  # bytes: an int at one context, an array over a curve
B = TypeVar("B")  # a condition: a bool, an array of them


@dataclass(frozen=True, slots=True)
class DevicePlan:
    """The compute buffer of one backend as terms of the KV cells (built once per placement).

    The buffer is the larger of two phases (the layer phase on a tie), with `under` below both. The layer phase:
    `inputs`, the transient, `after`; the transient (when the device runs layers) is the larger of the
    attention's live sets (`attention`, largest of; `fa_copies` is part of it, named apart) and the FFN's (`ffn`,
    largest of; the FFN on a tie), or the host's `logits` where they are at least as large. The output phase:
    `output` (none: the layer phase alone)."""

    device: int | None  # GPU index, None = host
    layer_phase: bool  # the device runs layers (attention or FFN)
    inputs: tuple[Term, ...] = ()  # graph inputs and blocks live under the transient, listed before it
    attention: tuple[Term, ...] = ()
    fa_copies: Term | None = None  # CUDA's f16 copies of a quantized cache: the attention op's own allocation
    ffn: tuple[Term, ...] = ()
    after: tuple[Term, ...] = ()  # live with the transient, listed after it
    logits: Term | None = None  # the host's logits, in the transient's place where larger
    output: tuple[Term, ...] = ()
    under: tuple[Term, ...] = ()  # below both phases (pipeline-parallel copies, the op-offload weight copy)

    def terms(self) -> tuple[Term, ...]:
        """Every term of the plan, in the order the evaluator reads them."""
        groups = (self.inputs, self.attention, self.ffn, self.after, self.output, self.under)
        extra = tuple(t for t in (self.fa_copies, self.logits) if t is not None)
        return tuple(t for g in groups for t in g) + extra


class Space(Protocol, Generic[V, B]):
    """Where the evaluator reads the terms: one context (`OneContext`) or arrays of contexts (`Curve`)."""

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


Flags = NDArray[np.bool_]


class Curve:
    """Bytes at each of many contexts: arrays of base and SWA cells per stream."""

    def __init__(self, nb: Cells, ns: Cells) -> None:
        self.nb, self.ns = nb, ns

    def of(self, term: Term) -> Cells:
        return term.over(self.nb, self.ns)

    def zero(self) -> Cells:
        return np.zeros_like(self.nb)

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


def device_parts(p: DevicePlan, s: Space[V, B]) -> list[tuple[str, V]]:
    """The device's buffer as (label, bytes) parts, in order; the parts of a phase or transient that is not the
    peak read 0 (at one context: left out by `evaluate_plan`)."""
    trans: list[tuple[str, V]] = _transient(p, s) if p.layer_phase else []
    if p.logits is not None:
        top = s.of(p.logits)
        if p.layer_phase:
            keep = s.ge(top, _total(trans, s))
            trans = [*_only(trans, s.no(keep), s), (p.logits.label, s.when(keep, top))]
        else:
            trans = [(p.logits.label, top)]
    layer = [*_read(p.inputs, s), *trans, *_read(p.after, s)]
    if p.output:
        out = _read(p.output, s)
        first = s.ge(_total(layer, s), _total(out, s))
        layer = [*_only(layer, first, s), *_only(out, s.no(first), s)]
    return [*layer, *_read(p.under, s)]


def _transient(p: DevicePlan, s: Space[V, B]) -> list[tuple[str, V]]:
    """The larger of the attention and the FFN (the FFN on a tie). The attention is named after the scores when
    one of its terms that has them is nonzero; CUDA's f16 copies inside it are a part of their own."""
    att, ffn = s.zero(), s.zero()
    scores = s.nonzero(s.zero())
    for t in p.attention:
        v = s.of(t)
        att = s.larger(att, v)
        if t.label == SCORES:
            scores = s.either(scores, s.nonzero(v))
    for t in p.ffn:
        ffn = s.larger(ffn, s.of(t))
    wins = s.gt(att, ffn)
    fa = s.of(p.fa_copies) if p.fa_copies is not None else s.zero()
    shown = s.sub(att, fa)
    return [
        (SCORES, s.when(s.both(wins, scores), shown)),
        (SCAN, s.when(s.both(wins, s.no(scores)), shown)),
        (FFN, s.when(s.no(wins), ffn)),
        (FA_COPIES, s.when(wins, fa)),
    ]


def _read(terms: tuple[Term, ...], s: Space[V, B]) -> list[tuple[str, V]]:
    return [(t.label, s.of(t)) for t in terms]


def _only(parts: list[tuple[str, V]], c: B, s: Space[V, B]) -> list[tuple[str, V]]:
    return [(label, s.when(c, v)) for label, v in parts]


def _total(parts: list[tuple[str, V]], s: Space[V, B]) -> V:
    out = s.zero()
    for _, v in parts:
        out = s.add(out, v)
    return out


def evaluate_plan(p: DevicePlan, nb: int, ns: int) -> ComputeBuffer:
    """The device's buffer at one context: its nonzero parts."""
    parts = device_parts(p, OneContext(nb, ns))
    return ComputeBuffer(p.device, tuple(ComputePart(label, b) for label, b in parts if b))


def total_array(p: DevicePlan, nb: Cells, ns: Cells) -> Cells:
    """The device's buffer at each of the contexts the arrays of cells give."""
    s = Curve(nb, ns)
    return _total(device_parts(p, s), s)
