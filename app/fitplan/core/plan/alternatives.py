"""What would change a plan: a few other pins or machines, each one planned again with the same estimator.

Every alternative is a full plan (`planner.plan`) of the changed request, so nothing is suggested that the
estimator did not check. When the plan fits they are sorted by how much context they add, then by how many layers
they bring back to the GPUs; when it does not fit, the ones that make it fit come first.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fitplan.core.base.devices import GIB, Device, Machine
from fitplan.core.base.errors import FitplanError
from fitplan.core.gguf.ggml_types import is_quantized_cache_type
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.planner import Pins, Plan, plan
from fitplan.core.plan.search import EstimateFn
from fitplan.core.plan.usage import MarginPolicy

__all__ = ["CARD_SIZES", "Alternative", "what_would_change"]

#: GPU sizes people buy (GiB): "a 32 GiB card" is the next one up
CARD_SIZES = (8, 12, 16, 24, 32, 48, 80, 96, 141)


@dataclass(frozen=True, slots=True)
class Alternative:
    """One change and its effect, both in words, with what the changed plan reaches."""

    change: str  # "-ctk q8_0 -ctv q8_0", "-np 1", "a 32 GiB card", "32 GiB more host RAM"
    effect: str  # "context 45,824 -> 87,552", "fits at 32,768 (4 expert layers on CPU)"
    fits: bool
    n_ctx: int  # the context the changed plan reaches (0 when it does not fit)
    placement: str  # the changed plan's placement in words
    gpu_layers: int  # the changed plan's offloaded layer indices

    def describe(self) -> str:
        return f"{self.change}: {self.effect}"


@dataclass(frozen=True, slots=True)
class _Candidate:
    change: str
    pins: Pins
    machine: Machine


def _ctx(n: int) -> str:
    return f"{n:,}"


def _bigger(d: Device, gib: int) -> Device:
    total = gib * GIB
    used = d.total_bytes - d.free_bytes
    return dataclasses.replace(d, total_bytes=total, free_bytes=max(0, total - used))


def _machine_candidates(machine: Machine, pins: Pins) -> list[_Candidate]:
    out: list[_Candidate] = []
    gpus = machine.gpus
    if gpus and all(d.total_bytes > 0 for d in gpus):
        now = max(d.total_bytes for d in gpus) / GIB
        size = next((s for s in CARD_SIZES if s > now + 0.5), None)
        if size is not None:
            what = f"a {size} GiB card" if len(gpus) == 1 else f"{len(gpus)} x {size} GiB cards"
            out.append(_Candidate(what, pins, Machine(tuple(_bigger(d, size) for d in gpus), machine.host)))
    host = machine.host
    if host.total_bytes > 0:
        extra = max(16 * GIB, host.total_bytes // 2 // GIB * GIB)
        more = dataclasses.replace(
            host, total_bytes=host.total_bytes + extra, free_bytes=host.free_bytes + extra
        )
        out.append(_Candidate(f"{extra // GIB} GiB more host RAM", pins, Machine(gpus, more)))
    return out


def _pin_candidates(profile: ModelProfile, base: Plan, pins: Pins, machine: Machine) -> list[_Candidate]:
    s = base.settings
    out: list[_Candidate] = []
    if (
        pins.cache_type_k is None
        and pins.cache_type_v is None
        and not is_quantized_cache_type(s.cache_type_k)
    ):
        q8 = dataclasses.replace(pins, cache_type_k="q8_0", cache_type_v="q8_0")
        out.append(_Candidate("-ctk q8_0 -ctv q8_0", q8, machine))
    if pins.n_parallel is None or pins.n_parallel != 1:
        out.append(_Candidate("-np 1", dataclasses.replace(pins, n_parallel=1, kv_unified=None), machine))
    cap = base.context.cap
    if base.fits and base.settings.n_ctx < cap:
        # a larger context, and what it costs in placement (pinned or not)
        bigger = min(cap, 2 * base.settings.n_ctx)
        out.append(_Candidate(f"-c {bigger}", dataclasses.replace(pins, n_ctx=bigger), machine))
    if not base.fits and pins.n_ctx is not None and pins.n_ctx > 4096:
        half = max(4096, pins.n_ctx // 2 // 256 * 256)
        out.append(_Candidate(f"-c {half}", dataclasses.replace(pins, n_ctx=half), machine))
    moe = any(ly.is_moe for ly in profile.layers)
    if moe and pins.n_cpu_moe is None and not pins.all_weights_on_gpu and machine.gpus:
        n = base.placement.n_cpu_moe + max(2, profile.n_layer_all // 8)
        if n <= profile.n_layer_all:
            out.append(_Candidate(f"--n-cpu-moe {n}", dataclasses.replace(pins, n_cpu_moe=n), machine))
    out.extend(_unpinned(pins, machine))
    return out


def _unpinned(pins: Pins, machine: Machine) -> list[_Candidate]:
    """Each placement pin the user set, dropped."""
    drops: list[tuple[str, object, object]] = [
        ("-ngl", pins.n_gpu_layers, {"n_gpu_layers": None}),
        ("--n-cpu-moe", pins.n_cpu_moe, {"n_cpu_moe": None}),
        ("-ts", pins.tensor_split, {"tensor_split": None}),
        ("--all-on-gpu", pins.all_weights_on_gpu or None, {"all_weights_on_gpu": False}),
    ]
    return [
        _Candidate(f"without {flag}", dataclasses.replace(pins, **changes), machine)  # type: ignore[arg-type]
        for flag, value, changes in drops
        if value is not None
    ]


def _effect(base: Plan, alt: Plan) -> str:
    where = (
        f" ({alt.placement.description})" if alt.placement.description != base.placement.description else ""
    )
    if not base.fits:
        return f"fits at {_ctx(alt.settings.n_ctx)}{where}"
    if alt.settings.n_ctx != base.settings.n_ctx:
        return f"context {_ctx(base.settings.n_ctx)} -> {_ctx(alt.settings.n_ctx)}{where}"
    return f"{alt.placement.description} instead of {base.placement.description}"


def _rank(base: Plan, alt: Alternative) -> tuple[int, int, int]:
    return (int(alt.fits), alt.n_ctx - (base.settings.n_ctx if base.fits else 0), alt.gpu_layers)


def what_would_change(
    profile: ModelProfile,
    machine: Machine,
    pins: Pins,
    base: Plan,
    *,
    margin: MarginPolicy | None = None,
    estimate_fn: EstimateFn | None = None,
    limit: int = 5,
) -> tuple[Alternative, ...]:
    """At most `limit` alternatives to `base` (the plan of `pins` on `machine`) that change its outcome, each
    planned again, best first."""
    out: list[Alternative] = []
    for c in (*_pin_candidates(profile, base, pins, machine), *_machine_candidates(machine, pins)):
        try:
            alt = plan(profile, c.machine, c.pins, margin=margin or base.margin, estimate_fn=estimate_fn)
        except FitplanError:
            continue  # the estimator refuses this combination (e.g. a quantized V cache without flash attention)
        if not alt.fits:
            continue
        same = (alt.settings.n_ctx, alt.placement.description) == (
            base.settings.n_ctx,
            base.placement.description,
        )
        if base.fits and (same or alt.settings.n_ctx <= base.settings.n_ctx):
            continue  # a plan that fits changes only for more context
        out.append(
            Alternative(
                c.change,
                _effect(base, alt),
                alt.fits,
                alt.settings.n_ctx,
                alt.placement.description,
                alt.placement.n_gpu_layers,
            )
        )
    out.sort(key=lambda a: _rank(base, a), reverse=True)
    return tuple(out[:limit])
