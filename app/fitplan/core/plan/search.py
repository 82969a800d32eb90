"""The largest context on llama.cpp's grid for fixed placement settings, with memoised estimates.

The grid is `engines.context_grid`: 256 cells per stream (32 for ik_llama.cpp without flash attention), one
stream with a unified cache, else one per sequence. Memory grows with the context, so a binary search over the grid
finds the exact largest point: one step more does not fit. The search is capped at the model's training context
(per stream). One `estimate()` at a fixed placement reuses the cached weight placement and costs about a
millisecond, so the ~log2(grid) estimates of the search are cheaper than one curve.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from fitplan.core.base.devices import Machine
from fitplan.core.base.launch_settings import FlashAttn, LaunchSettings
from fitplan.core.base.results import Estimate
from fitplan.core.engines import context_grid
from fitplan.core.engines import context_pad as engine_context_pad
from fitplan.core.estimate.estimator import estimate
from fitplan.core.memory.context import sequence_layout, trained_context
from fitplan.core.model.lora import LoraAdapter
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.pool import pooled_usage
from fitplan.core.plan.usage import DeviceUse, MarginPolicy, Shortfall, fits, shortfalls

__all__ = [
    "ContextFit",
    "EstimateFn",
    "Evaluator",
    "context_fit",
    "context_pad",
    "context_step",
    "default_estimate_fn",
    "kv_streams",
    "largest_true",
    "smallest_true",
    "smallest_true_from",
    "training_cap",
]


class EstimateFn(Protocol):
    """Anything that estimates one launch: `fitplan.core.estimate.estimator.estimate` with its extras bound."""

    def __call__(self, profile: ModelProfile, settings: LaunchSettings, machine: Machine, /) -> Estimate: ...


def default_estimate_fn(
    *,
    mmproj: ModelProfile | None = None,
    draft: ModelProfile | None = None,
    reserve_bytes: int | None = None,
    loras: Sequence[LoraAdapter] = (),
) -> EstimateFn:
    """The real estimator with the projector, draft model, runtime reserve and LoRA adapters bound."""

    def fn(profile: ModelProfile, settings: LaunchSettings, machine: Machine, /) -> Estimate:
        return estimate(
            profile, settings, machine, mmproj=mmproj, draft=draft, reserve_bytes=reserve_bytes, loras=loras
        )

    return fn


def kv_streams(settings: LaunchSettings) -> int:
    """KV streams llama.cpp allocates: 1 with a unified cache, else one per sequence (`sequence_layout`, which
    raises for more sequences than llama.cpp allows)."""
    n_seq, unified = sequence_layout(settings)
    return 1 if unified else n_seq


def context_pad(settings: LaunchSettings, profile: ModelProfile | None = None) -> int:
    """Cells per stream n_ctx is padded to (the engine's `context_pad`); without a profile to resolve flash attention
    "auto", only an explicit -fa off counts."""
    if profile is not None:
        return context_grid(profile, settings).pad
    return engine_context_pad(settings, settings.flash_attn is not FlashAttn.OFF)


def context_step(settings: LaunchSettings, profile: ModelProfile | None = None) -> int:
    return context_pad(settings, profile) * kv_streams(settings)


def training_cap(profile: ModelProfile, settings: LaunchSettings) -> int:
    """The largest grid context within the training length per stream (at least one step)."""
    return context_grid(profile, settings).training_cap(trained_context(profile, settings))


@dataclass(frozen=True, slots=True)
class ContextFit:
    """The largest context that fits, for fixed placement settings."""

    n_ctx: int  # the largest fitting -c on the grid; 0 when not even one step fits
    step: int  # grid step: 256 (32 for ik_llama.cpp without flash attention) x n_stream
    cap: int  # the largest context searched: the training context (per stream) on the grid
    capped_by_training: bool  # the cap itself fits: more memory would not raise the context
    estimate: Estimate | None  # at n_ctx, or at one step when nothing fits
    next_estimate: Estimate | None  # at n_ctx + step (None when capped): shows what overflows
    usage: tuple[DeviceUse, ...]  # of `estimate`
    binding_label: str  # the device that overflows one step further (or the one short when nothing fits)
    shortfalls: tuple[Shortfall, ...]  # when nothing fits: every device over its capacity at one step
    evaluations: int  # estimates computed

    @property
    def fits(self) -> bool:
        return self.n_ctx > 0

    def describe(self) -> str:
        if not self.fits:
            return "no context fits: " + "; ".join(s.describe() for s in self.shortfalls)
        if self.capped_by_training:
            return f"context {self.n_ctx} capped at the model's training length"
        return f"context {self.n_ctx} limited by {self.binding_label} memory"


class Evaluator:
    """Memoised estimates and usages for one model on one machine."""

    def __init__(self, profile: ModelProfile, machine: Machine, margin: MarginPolicy, fn: EstimateFn) -> None:
        self.profile = profile
        self.machine = machine
        self.margin = margin
        self.fn = fn
        self.cache: dict[LaunchSettings, tuple[Estimate, tuple[DeviceUse, ...]]] = {}
        self.evaluations = 0

    def __call__(self, settings: LaunchSettings) -> tuple[Estimate, tuple[DeviceUse, ...]]:
        hit = self.cache.get(settings)
        if hit is None:
            est = self.fn(self.profile, settings, self.machine)
            self.evaluations += 1
            hit = (est, pooled_usage(est, self.machine, self.margin))
            self.cache[settings] = hit
        return hit

    def fits(self, settings: LaunchSettings) -> bool:
        return fits(self(settings)[1])


def largest_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int | None:
    """The largest x in [lo, hi] with pred(x), for pred true then false (monotone); None if pred(lo) is false."""
    if lo > hi or not pred(lo):
        return None
    if pred(hi):
        return hi
    return _bisect(lo, hi, pred)


def smallest_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int | None:
    """The smallest x in [lo, hi] with pred(x), for pred false then true (monotone); None if pred(hi) is false."""
    if lo > hi or not pred(hi):
        return None
    if pred(lo):
        return lo
    return _bisect(hi, lo, pred)


def smallest_true_from(guess: int, lo: int, hi: int, pred: Callable[[int], bool]) -> int | None:
    """`smallest_true` for a pred that is false then true on [lo, hi], starting from a guess of the answer and
    galloping away from it (1, 2, 4 ... steps) before bisecting: a few calls when the guess is close."""
    if lo > hi:
        return None
    g = min(max(guess, lo), hi)
    if pred(g):
        good, step = g, 1
        while good > lo:
            cand = max(lo, good - step)
            if not pred(cand):
                return _bisect(good, cand, pred)
            good, step = cand, step * 2
        return good
    bad, step = g, 1
    while bad < hi:
        cand = min(hi, bad + step)
        if pred(cand):
            return _bisect(cand, bad, pred)
        bad, step = cand, step * 2
    return None


def _bisect(good: int, bad: int, pred: Callable[[int], bool]) -> int:
    """The x next to the boundary on `good`'s side, for pred(good) true and pred(bad) false (either order)."""
    while abs(bad - good) > 1:
        mid = (good + bad) // 2
        if pred(mid):
            good = mid
        else:
            bad = mid
    return good


def context_fit(ev: Evaluator, settings: LaunchSettings, *, min_ctx: int = 0) -> ContextFit:
    """The largest context on the grid of `settings` (whose n_ctx is ignored) at least `min_ctx` that fits."""
    grid = context_grid(ev.profile, settings)
    step = grid.step
    cap = grid.training_cap(trained_context(ev.profile, settings))
    k_max = max(1, cap // step)
    k_min = max(1, math.ceil(min_ctx / step)) if min_ctx > 0 else 1
    start = ev.evaluations

    def at(k: int) -> LaunchSettings:
        return dataclasses.replace(settings, n_ctx=k * step)

    best = largest_true(k_min, k_max, lambda k: ev.fits(at(k))) if k_min <= k_max else None
    if best is None:
        est, usage = ev(at(min(k_min, k_max)))
        shorts = shortfalls(usage)
        label = shorts[0].label if shorts else ""
        return ContextFit(0, step, cap, False, est, None, usage, label, shorts, ev.evaluations - start)
    est, usage = ev(at(best))
    capped = best == k_max
    next_est: Estimate | None = None
    binding = ""
    if not capped:
        next_est, next_usage = ev(at(best + 1))
        over = shortfalls(next_usage)
        binding = over[0].label if over else ""
    return ContextFit(
        best * step, step, cap, capped, est, next_est, usage, binding, (), ev.evaluations - start
    )
