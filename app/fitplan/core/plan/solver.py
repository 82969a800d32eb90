"""The placement search: the best point by `objective.placement_key` (the most layers on the GPUs, then the fewest
expert bytes off them), visited in that key's order.

GPU memory falls and host memory rises as layers (lower -ngl) or experts (higher --n-cpu-moe) leave the GPUs, so:

* with --n-cpu-moe fixed (dense models, or pinned), the largest -ngl whose GPUs fit is found by bisection; if the
  host is short there, every placement with fewer layers on the GPUs is shorter still: nothing fits;
* with --n-cpu-moe free (MoE), for each -ngl from the largest one whose GPUs can fit at all downwards, the smallest
  --n-cpu-moe whose GPUs fit (bisection); the first -ngl where the host fits there too is the answer (the most
  layers on the GPUs, then the fewest expert bytes off them); where no expert can come back (--n-cpu-moe at its
  lowest) and the host is short, fewer layers on the GPUs only add to the host: nothing fits.

With several GPUs and no -ts pin each point's split is balanced layer by layer (`Solver.balance`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fitplan.core.base.launch_settings import NGL_ALL, LaunchSettings, SplitMode
from fitplan.core.base.results import Estimate, TermKind
from fitplan.core.memory.weights import output_device, split_fractions
from fitplan.core.plan.objective import point_key
from fitplan.core.plan.search import Evaluator, largest_true, smallest_true_from
from fitplan.core.plan.space import Finer, PlacementSpace, proportional_split
from fitplan.core.plan.usage import DeviceUse

__all__ = ["Check", "Point", "Solver"]


@dataclass(frozen=True, slots=True)
class Point:
    """One point of the placement space."""

    ngl: int
    ncmoe: int
    split: tuple[int, ...] | None  # layers per GPU (None: one GPU, or -ts pinned)
    finer: Finer | None = None  # a partial layer or -nkvo (`space.Finer`)


@dataclass(frozen=True, slots=True)
class Check:
    """A point evaluated at one context."""

    point: Point
    gpus_fit: bool
    host_fits: bool

    @property
    def fits(self) -> bool:
        return self.gpus_fit and self.host_fits


def _largest_gpu_fit(lo: int, hi: int, pred: Callable[[int], bool], edge: int | None = None) -> int | None:
    """The largest -ngl in [lo, hi] whose GPUs fit. Fewer layers on the GPUs take memory off them, except that
    with -ngl below all a GPU that holds no layer still gets a compute buffer (the CPU layers' matrix products are
    offloaded to it), and at -ngl 0 the first GPU copies the output matrix in for the logits (from 32 outputs),
    more than it holds at -ngl 1 with the output layer on another GPU: when even `lo` does not fit, the points are
    tried from the top down instead of bisected. (Below 32 outputs nothing is copied and -ngl 0 is the cheapest
    point: the planner weighs it against -dev none, `planner._cpu_may_win`.)

    `edge` (`Solver.output_settled`): the -ngl from which the output layer stays on the last GPU. Below it the
    output layer (its weights and the logits) sits on an earlier GPU, which then holds more than with one layer
    more (two GPUs, `-ts 1,1`: at -ngl 1 the output layer on the first GPU, at -ngl 2 on the second), and the
    first GPU runs the host layers' attention over copies of their cache wherever the output is: the bisection
    runs from the edge up, and the points below it are tried from the edge down."""
    if pred(hi):
        return hi
    start = lo if edge is None else min(max(edge, lo), hi)
    if start < hi and pred(start):
        return largest_true(start, hi, pred)
    if start > lo:
        return next((g for g in range(start - 1, lo - 1, -1) if pred(g)), None)
    return next((g for g in range(hi - 1, lo, -1) if pred(g)), None)


#: the terms that move with their layer from GPU to GPU without changing size
_CONSERVED = (TermKind.WEIGHTS, TermKind.KV, TermKind.RECURRENT)


def _gpus_fit(usage: Sequence[DeviceUse]) -> bool:
    return all(u.fits for u in usage if u.gpu_index is not None)


def _host_fits(usage: Sequence[DeviceUse]) -> bool:
    return all(u.fits for u in usage if u.gpu_index is None)


class Solver:
    def __init__(
        self,
        ev: Evaluator,
        base: LaunchSettings,
        space: PlacementSpace,
        *,
        tensor_split: tuple[float, ...] | None,
    ) -> None:
        self.ev = ev
        self.base = base
        self.space = space
        self.pinned_split = tensor_split
        self.gpus = ev.machine.gpus
        self.L = space.L
        self.caps = [ev.margin.capacity(d, i) for i, d in enumerate(self.gpus)]
        self.split_free = (
            len(self.gpus) > 1
            and tensor_split is None
            and base.split_mode is SplitMode.LAYER
            and base.devices is None
        )
        self.balanced: dict[tuple[int, int], tuple[int, ...]] = {}  # (ngl, ncmoe) -> balanced split

    def settings(self, p: Point, n_ctx: int) -> LaunchSettings:
        ts: tuple[float, ...]
        if self.pinned_split is not None:
            ts = self.pinned_split
        elif p.split is not None and len(self.gpus) > 1 and sum(p.split) > 0:
            ts = tuple(float(x) for x in p.split)
        else:
            ts = ()
        s = dataclasses.replace(
            self.base,
            n_ctx=n_ctx,
            n_gpu_layers=NGL_ALL if p.ngl >= self.L + 1 else p.ngl,
            n_cpu_moe=p.ncmoe,
            tensor_split=ts,
        )
        if p.finer is None:
            return s
        return dataclasses.replace(
            s,
            tensor_overrides=(*s.tensor_overrides, *p.finer.overrides(self.space, p.ngl)),
            no_kv_offload=s.no_kv_offload or p.finer.no_kv_offload,
        )

    def usage(self, p: Point, n_ctx: int) -> tuple[DeviceUse, ...]:
        return self.ev(self.settings(p, n_ctx))[1]

    def output_settled(self, lo: int, hi: int) -> int:
        """The smallest -ngl in [lo, hi] from which the output layer is on the last GPU at every larger -ngl under a
        pinned split (`_largest_gpu_fit`); `lo` with one GPU (the output layer is always on it) and with a free
        split, where the balancing moves layers off a GPU that does not fit (and starts from the balanced split
        of the nearest point tried, so the order of the points stays the bisection's)."""
        n = len(self.gpus)
        if n < 2 or self.pinned_split is None or self.base.split_mode is not SplitMode.LAYER:
            return lo
        if self.base.devices is not None:
            return lo
        fractions = split_fractions(dataclasses.replace(self.base, tensor_split=self.pinned_split), self.gpus)
        edge = hi
        for g in range(hi, max(lo, 1) - 1, -1):
            if output_device(self.L, g, fractions) != n - 1:
                break
            edge = g
        return edge

    def initial_split(self, ngl: int) -> tuple[int, ...] | None:
        if not self.split_free:
            return None
        return proportional_split(min(ngl, self.L + 1), self.caps)

    def _heads(
        self, ngl: int, ncmoe: int, counts: Sequence[int], n_ctx: int, finer: Finer | None = None
    ) -> list[int]:
        usage = self.usage(Point(ngl, ncmoe, tuple(counts), finer), n_ctx)
        return [u.headroom_bytes for u in usage[: len(self.gpus)]]

    def balance(
        self,
        ngl: int,
        ncmoe: int,
        split: tuple[int, ...] | None,
        n_ctx: int,
        finer: Finer | None = None,
    ) -> tuple[int, ...] | None:
        """Move layers from the GPU with the least headroom to the one with the most while the headrooms, smallest
        first, grow (compared in order, so that of two equally tight GPUs one can be relieved first); stop where
        moving one more layer no longer helps. When one layer helps, the headroom it shifts
        predicts how many layers would even out the two GPUs; that jump is tried once and kept when it leaves
        more headroom on the tightest GPU than the single move. `finer`: the point's partial layer or -nkvo."""
        if split is None or not self.split_free:
            return split
        counts = list(split)
        n_gpu = len(self.gpus)
        cur = self._heads(ngl, ncmoe, counts, n_ctx, finer)
        for _ in range(4):  # jump to the split the layer sizes predict, then walk from there
            pred = self._predicted_split(ngl, ncmoe, counts, n_ctx, finer)
            if pred is None or pred == counts:
                break
            heads = self._heads(ngl, ncmoe, pred, n_ctx, finer)
            if sorted(heads) <= sorted(cur):
                break
            counts, cur = pred, heads
        for _ in range(4 * (self.L + 1)):
            lo = min(range(n_gpu), key=lambda i: cur[i])
            if counts[lo] == 0:
                break
            step = self._relieve(ngl, ncmoe, counts, cur, lo, n_ctx, finer)
            if step is None:
                break
            counts, cur = step
        return tuple(counts)

    def _layer_costs(
        self, ngl: int, ncmoe: int, counts: list[int], n_ctx: int, finer: Finer | None = None
    ) -> tuple[list[int], list[int]]:
        """Per offloaded layer index, the bytes it brings to its GPU (its weights, less the experts --n-cpu-moe
        keeps on the CPU, plus an even share of what the estimate adds: KV cache, recurrent state, row padding);
        per GPU, what it uses besides its layers (compute buffers, reserve). From one estimate at `counts`. A
        partial layer (`finer`) brings its first layer less the FFN tensors it keeps on the host."""
        est = self.ev(self.settings(Point(ngl, ncmoe, tuple(counts), finer), n_ctx))[0]
        first = self.space.first_gpu_layer(ngl)
        base = [
            self.space.layer_bytes[il] - (self.space.expert_bytes[il] if il < ncmoe else 0)
            for il in range(first, self.L + 1)
        ]
        if finer is not None and finer.ffn_cpu and base:
            base[0] -= self.space.partial_bytes(first, finer.ffn_cpu)
        n = len(self.gpus)
        conserved = [sum(de.bytes_of(k) for k in _CONSERVED) for de in est.devices[:n]]
        extra = (sum(conserved) - sum(base)) // max(1, len(base))
        costs = [b + extra for b in base]
        fixed = [de.used_bytes - c for de, c in zip(est.devices[:n], conserved, strict=True)]
        seen = [f for f, k in zip(fixed, counts, strict=True) if k > 0]
        top = max(seen) if seen else 0
        return costs, [f if k > 0 else top for f, k in zip(fixed, counts, strict=True)]

    def _predicted_split(
        self, ngl: int, ncmoe: int, counts: list[int], n_ctx: int, finer: Finer | None = None
    ) -> list[int] | None:
        """The split that maximises the smallest predicted headroom (bisection on the headroom, each GPU in order
        taking the layers that keep it above; an empty GPU keeps all of its capacity)."""
        costs, fixed = self._layer_costs(ngl, ncmoe, counts, n_ctx, finer)

        def fill(h: int) -> list[int] | None:
            out: list[int] = []
            i = 0
            for g, cap in enumerate(self.caps):
                last = g == len(self.caps) - 1
                budget = cap - h - fixed[g]
                used = 0
                k = 0
                while i + k < len(costs) and (last or used + costs[i + k] <= budget):
                    used += costs[i + k]
                    k += 1
                if (k > 0 and used > budget) or (k == 0 and cap < h):
                    return None
                out.append(k)
                i += k
            return out

        lo, hi = -(1 << 42), max(self.caps)
        if fill(lo) is None:
            return None
        while hi - lo > 1 << 20:  # to a MiB: the prediction is not finer than that
            mid = (lo + hi) // 2
            if fill(mid) is None:
                hi = mid
            else:
                lo = mid
        return fill(lo)

    def _relieve(
        self,
        ngl: int,
        ncmoe: int,
        counts: list[int],
        cur: list[int],
        lo: int,
        n_ctx: int,
        finer: Finer | None = None,
    ) -> tuple[list[int], list[int]] | None:
        """One layer (or the predicted jump) from GPU `lo` to the GPU with the most headroom where that helps;
        a GPU without layers may look roomy but takes its compute buffer with the first layer, so the roomiest GPU
        that holds layers is tried first, then the roomiest empty one."""
        others = sorted((i for i in range(len(cur)) if i != lo), key=lambda i: -cur[i])
        with_layers = [i for i in others if counts[i] > 0][:1]
        empty = [i for i in others if counts[i] == 0][:1]
        for hi in with_layers + empty:
            trial = list(counts)
            trial[lo] -= 1
            trial[hi] += 1
            new = self._heads(ngl, ncmoe, trial, n_ctx, finer)
            if sorted(new) <= sorted(cur):  # the smallest headroom, then the next smallest ...: no better
                continue
            far = self._jump(ngl, ncmoe, counts, (cur, new), (lo, hi), n_ctx, finer)
            if far is not None and sorted(far[1]) > sorted(new):
                return far
            return trial, new
        return None

    def _jump(
        self,
        ngl: int,
        ncmoe: int,
        counts: list[int],
        heads: tuple[list[int], list[int]],
        moved: tuple[int, int],
        n_ctx: int,
        finer: Finer | None,
    ) -> tuple[list[int], list[int]] | None:
        """The predicted jump of `_relieve`: the headrooms before and after one layer (`heads`) moved from GPU
        `lo` to GPU `hi` (`moved`) predict how many layers even out the two."""
        cur, new = heads
        lo, hi = moved
        gain, loss = new[lo] - cur[lo], cur[hi] - new[hi]  # what one layer gives `lo` and takes from `hi`
        if gain <= 0 or loss < 0:
            return None
        others = [cur[i] for i in range(len(cur)) if i not in (lo, hi)]
        jump = (cur[hi] - cur[lo]) // (gain + loss)
        if others:
            jump = min(jump, (min(others) - cur[lo]) // gain)
        jump = min(jump, counts[lo])
        if jump <= 1:
            return None
        far = list(counts)
        far[lo] -= jump
        far[hi] += jump
        return far, self._heads(ngl, ncmoe, far, n_ctx, finer)

    def start_split(self, ngl: int, ncmoe: int) -> tuple[int, ...] | None:
        """Where balancing starts: the balanced split of the nearest placement already tried, else the split by
        capacity. Layers added or removed go to or come from the first GPUs, as -ngl offloads from the back."""
        if not self.split_free or not self.balanced:
            return self.initial_split(ngl)
        g, n = min(self.balanced, key=lambda k: (abs(k[0] - ngl), abs(k[1] - ncmoe), k))
        counts = list(self.balanced[(g, n)])
        diff = min(ngl, self.L + 1) - sum(counts)
        if diff > 0:
            counts[0] += diff
        for i in range(len(counts)):
            if diff >= 0:
                break
            take = min(counts[i], -diff)
            counts[i] -= take
            diff += take
        return tuple(counts)

    def _hopeless(self, est: Estimate) -> bool:
        """No split can fit: the weights, KV cache and recurrent state on the GPUs (the same bytes whichever GPU
        holds each layer) exceed what all the GPUs together may use (every other term only adds to that)."""
        n = len(self.gpus)
        moved = sum(de.bytes_of(k) for de in est.devices[:n] for k in _CONSERVED)
        return moved > sum(max(0, c) for c in self.caps)

    def check(self, ngl: int, ncmoe: int, n_ctx: int, finer: Finer | None = None) -> Check:
        """The point (ngl, ncmoe) at `n_ctx`, with its split balanced when the first split does not fit. A finer
        point (`finer`) starts from the nearest whole-layer split and does not become one to start from."""
        split = self.start_split(ngl, ncmoe)
        est, usage = self.ev(self.settings(Point(ngl, ncmoe, split, finer), n_ctx))
        if not _gpus_fit(usage) and split is not None and self.split_free and not self._hopeless(est):
            split = self.balance(ngl, ncmoe, split, n_ctx, finer) or split
            if finer is None:
                self.balanced[(ngl, ncmoe)] = split
            usage = self.usage(Point(ngl, ncmoe, split, finer), n_ctx)
        return Check(Point(ngl, ncmoe, split, finer), _gpus_fit(usage), _host_fits(usage))

    # -- the search -------------------------------------------------------------------------------------------

    def search(
        self, ngl_choices: tuple[int, int], ncmoe_choices: tuple[int, int], n_ctx: int
    ) -> tuple[list[Check], Check]:
        """The feasible points that are best by the objective's placement criteria (ties included), and the last
        point tried (what to report when nothing fits). `*_choices` are inclusive ranges; a pin is a range of one value."""
        lo_n, hi_n = ncmoe_choices
        if lo_n == hi_n:
            return self._search_layers(ngl_choices, lo_n, n_ctx)
        return self._search_moe(ngl_choices, ncmoe_choices, n_ctx)

    def _search_layers(
        self, ngl_choices: tuple[int, int], ncmoe: int, n_ctx: int
    ) -> tuple[list[Check], Check]:
        lo, hi = ngl_choices
        seen: dict[int, Check] = {}

        def gpus_ok(g: int) -> bool:
            seen[g] = self.check(g, ncmoe, n_ctx)
            return seen[g].gpus_fit

        best = _largest_gpu_fit(lo, hi, gpus_ok, self.output_settled(lo, hi))
        if best is None:
            return [], seen[lo]
        chosen = seen[best]
        return ([chosen] if chosen.host_fits else []), chosen

    def _search_moe(
        self, ngl_choices: tuple[int, int], ncmoe_choices: tuple[int, int], n_ctx: int
    ) -> tuple[list[Check], Check]:
        lo_g, hi_g = ngl_choices
        lo_n, hi_n = ncmoe_choices
        first = self.check(hi_g, lo_n, n_ctx)
        if first.fits:  # everything the pins allow on the GPUs: nothing can be better
            return self._with_noop(first, hi_n, n_ctx), first
        # the largest -ngl whose GPUs can fit at all (every expert that can go to the CPU there)
        top = _largest_gpu_fit(
            lo_g, hi_g, lambda g: self.check(g, hi_n, n_ctx).gpus_fit, self.output_settled(lo_g, hi_g)
        )
        if top is None:
            return [], self.check(lo_g, hi_n, n_ctx)
        last = self.check(top, hi_n, n_ctx)
        report: Check | None = None  # the best placement whose GPUs fit: what a short host is reported at
        for ngl in range(top, lo_g - 1, -1):
            seen: dict[int, Check] = {}

            def gpus_ok(n: int, g: int = ngl, memo: dict[int, Check] = seen) -> bool:
                memo[n] = self.check(g, n, n_ctx)
                return memo[n].gpus_fit

            n_min = smallest_true_from(self._guess_ncmoe(ngl, lo_n, hi_n, n_ctx), lo_n, hi_n, gpus_ok)
            if n_min is None:
                continue
            last = seen[n_min]
            if not last.host_fits:
                report = report or last
                if n_min == lo_n:
                    break  # no expert to bring back: fewer layers on the GPUs only add to the host
                continue
            return self._with_noop(last, hi_n, n_ctx), last
        return [], report or last

    def _guess_ncmoe(self, ngl: int, lo_n: int, hi_n: int, n_ctx: int) -> int:
        """Where the smallest --n-cpu-moe that fits probably is: enough expert bytes off the GPUs to cover what they
        are over at `lo_n` (from one estimate, usually already made)."""
        usage = self.usage(Point(ngl, lo_n, self.start_split(ngl, lo_n)), n_ctx)
        over = sum(u.used_bytes for u in usage if u.gpu_index is not None) - sum(max(0, c) for c in self.caps)
        first = self.space.first_gpu_layer(ngl)
        n = lo_n
        while over > 0 and n < hi_n:
            if n >= first:
                over -= self.space.expert_bytes[n]
            n += 1
        return n

    def _with_noop(self, c: Check, hi_n: int, n_ctx: int) -> list[Check]:
        """`c`, and with several GPUs the same point with one more --n-cpu-moe when that moves no expert (no
        pipeline parallelism: smaller compute buffers, so maybe a larger context; the planner compares them)."""
        p = c.point
        space = self.space
        if len(self.gpus) < 2 or p.ncmoe >= hi_n or p.ncmoe > 0:
            return [c]
        if point_key(space, p.ngl, p.ncmoe + 1, True) != point_key(space, p.ngl, p.ncmoe, True):
            return [c]
        extra = self.check(p.ngl, p.ncmoe + 1, n_ctx)
        return [c, extra] if extra.fits else [c]
