"""Plan a launch: the largest context that fits, and where the weights go.

Two entry points:

* `max_context_that_fits`: for fixed settings, the largest `-c` on llama.cpp's padded grid whose estimate keeps every
  device under its capacity minus a margin. The grid step is 256 cells per stream (`llama_context`: n_ctx is padded to
  256; without a unified KV cache each of the n_seq_max streams gets `PAD(n_ctx / n_seq_max, 256)` cells), so the step
  is 256 x n_stream (ik_llama.cpp without flash attention pads to 32: 32 x n_stream). Memory grows with the context,
  so a binary search over the grid finds the exact largest point: one step more does not fit. The search is capped
  at the model's training context (per stream). (`fitplan.core.estimate.curve.estimate_curve` gives the same numbers for many
  contexts at once, but one `estimate()` at a fixed placement reuses the cached weight placement and costs well under
  a millisecond, so the ~log2(grid) estimates of the search are cheaper than one curve: measured 2-12 ms against
  3-35 ms for 64-point curves, on 1-3 GPUs.)
* `plan`: the user pins what they care about (`Pins`); the solver picks the rest for speed, in this order:
  everything on the GPUs; then (MoE models) the expert tensors of the first layers to the CPU (`--n-cpu-moe`),
  layer by layer; then whole layers to the CPU (`-ngl`). With several GPUs the layers are split in proportion to
  each GPU's usable memory and then balanced layer by layer (`-ts`, as layer counts). The context is kept at least
  `MIN_PLAN_CTX` per sequence (or the pinned minimum) while choosing the placement, as llama.cpp's `--fit` lowers
  the context to `--fit-ctx` (4096) x n_stream before it moves layers; the largest context for the chosen placement
  is then reported.

The estimate itself is injected (`EstimateFn`): by default `fitplan.core.estimate.estimator.estimate`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fitplan.core.base.devices import MIB, Device, DeviceKind, Machine, Vendor
from fitplan.core.base.launch_settings import (
    NGL_ALL,
    NGL_AUTO,
    Engine,
    FlashAttn,
    LaunchSettings,
    MmprojPlacement,
    SplitMode,
    Tool,
)
from fitplan.core.base.results import Estimate
from fitplan.core.model.profile import ModelProfile, TensorRole

__all__ = [
    "CTX_PAD",
    "MIN_PLAN_CTX",
    "ContextFit",
    "DeviceUse",
    "EstimateFn",
    "MarginPolicy",
    "Pins",
    "Placement",
    "Plan",
    "Shortfall",
    "context_pad",
    "context_step",
    "default_estimate_fn",
    "device_label",
    "kv_streams",
    "max_context_that_fits",
    "plan",
]

#: llama_context pads n_ctx (per stream) to a multiple of 256.
CTX_PAD = 256
#: ik_llama.cpp pads it to 32 without flash attention.
IK_CTX_PAD_NO_FA = 32
#: The smallest context the placement search keeps (llama.cpp's `--fit-ctx` default).
MIN_PLAN_CTX = 4096
#: llama-server's slot count when `-np` is auto (server.cpp: n_parallel = 4 with a unified KV cache).
SERVER_AUTO_SLOTS = 4
#: LLAMA_MAX_SEQ
MAX_SEQ = 256


class EstimateFn(Protocol):
    """Anything that estimates one launch: `fitplan.core.estimate.estimator.estimate` with its extras bound."""

    def __call__(self, profile: ModelProfile, settings: LaunchSettings, machine: Machine, /) -> Estimate: ...


def default_estimate_fn(
    *, mmproj: ModelProfile | None = None, draft: ModelProfile | None = None, reserve_bytes: int | None = None
) -> EstimateFn:
    """The real estimator with the projector, draft model and runtime reserve bound."""
    from fitplan.core.estimate.estimator import estimate

    def fn(profile: ModelProfile, settings: LaunchSettings, machine: Machine, /) -> Estimate:
        return estimate(profile, settings, machine, mmproj=mmproj, draft=draft, reserve_bytes=reserve_bytes)

    return fn


# ---------------------------------------------------------------------------------------------------------------------
# Capacities and results
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MarginPolicy:
    """How much of each device a plan may use: capacity minus a margin.

    `gpu_margin_bytes` is llama.cpp's `--fit-target` (1024 MiB per device by default); `per_gpu_bytes` overrides it
    per GPU in order, like `-fitt a,b,c`. The host keeps `host_margin_bytes` free. `use_free` measures against
    each device's free memory (what `--fit` does), else against its total.
    """

    gpu_margin_bytes: int = 1024 * MIB
    use_free: bool = True
    host_margin_bytes: int = 1024 * MIB
    per_gpu_bytes: tuple[int, ...] = ()
    check_host: bool = True

    def margin(self, device: Device, gpu_index: int | None) -> int:
        if device.kind is DeviceKind.CPU or gpu_index is None:
            return self.host_margin_bytes
        if gpu_index < len(self.per_gpu_bytes):
            return self.per_gpu_bytes[gpu_index]
        return self.gpu_margin_bytes

    def capacity(self, device: Device, gpu_index: int | None) -> int:
        """The bytes a plan may use on `device`."""
        base = device.free_bytes if self.use_free else device.total_bytes
        return base - self.margin(device, gpu_index)


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """One device of an estimate against its capacity."""

    device: Device
    label: str
    used_bytes: int
    capacity_bytes: int
    checked: bool = True  # False: the host when MarginPolicy.check_host is off

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes

    @property
    def fits(self) -> bool:
        """Within capacity; a device that holds nothing always fits (its margin may exceed its free memory)."""
        return not self.checked or self.used_bytes == 0 or self.used_bytes <= self.capacity_bytes


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A device the plan overfills, and by how much."""

    label: str
    used_bytes: int
    capacity_bytes: int

    @property
    def over_bytes(self) -> int:
        return self.used_bytes - self.capacity_bytes

    def describe(self) -> str:
        return (
            f"{self.label} short by {_gib(self.over_bytes)} "
            f"(needs {_gib(self.used_bytes)}, may use {_gib(self.capacity_bytes)})"
        )


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


@dataclass(frozen=True, slots=True)
class Pins:
    """The user's fixed choices. None = let the planner choose (or keep llama-server's default).

    `base` carries every other setting unchanged (flash attention, batch sizes, paths, draft, devices, the engine
    and its own fields ...): the plan only sets the context, the placement (-ngl, --n-cpu-moe, -ts) and --fit off.
    """

    base: LaunchSettings = field(default_factory=LaunchSettings)
    n_ctx: int | None = None  # -c (0 = the training context)
    min_ctx: int | None = None  # "context at least N" tokens per sequence (x n_stream if not unified)
    n_parallel: int | None = None  # -np
    kv_unified: bool | None = None  # -kvu / -no-kvu
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    n_gpu_layers: int | None = None  # -ngl (N, NGL_ALL)
    tensor_split: tuple[float, ...] | None = None  # -ts
    n_cpu_moe: int | None = None  # --n-cpu-moe
    mmproj: MmprojPlacement | None = None
    all_weights_on_gpu: bool = False  # "keep all weights on GPU": never move experts or layers to the CPU
    no_kv_offload: bool | None = None  # -nkvo: the KV cache stays in host memory (the solver never picks it)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the weights go, in llama-server terms, plus the same in words."""

    n_gpu_layers: int  # offloaded layer indices, output layer included (0..n_layer_all+1)
    n_cpu_moe: int  # --n-cpu-moe N
    tensor_split: tuple[int, ...]  # layers per GPU (empty: one GPU or none)
    cpu_layers: int  # trunk layers entirely on the CPU
    cpu_expert_layers: int  # MoE layers whose experts are on the CPU (among the GPU layers)
    description: str


@dataclass(frozen=True, slots=True)
class Plan:
    settings: LaunchSettings  # ready for `command.plan_to_args`
    estimate: Estimate | None  # at the planned context
    context: ContextFit
    placement: Placement
    fits: bool
    binding: str  # the constraint that decided the plan, in words
    notes: tuple[str, ...]
    shortfalls: tuple[Shortfall, ...]  # when the pins cannot fit: what is short on which device
    evaluations: int


# ---------------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------------


def _gib(n: int) -> str:
    """Bytes for people: MiB below 10 GiB (precise enough to act on), GiB above."""
    if abs(n) >= 10 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    return f"{n / MIB:.0f} MiB"


def device_label(device: Device, gpu_index: int | None) -> str:
    """How plans name a device: llama.cpp's name when known ("CUDA0", "RPC0[host:port]"), else GPUi (name)."""
    if device.kind is DeviceKind.CPU or gpu_index is None:
        return "host RAM"
    if device.backend_name and (device.vendor is Vendor.RPC or not device.hypothetical):
        return device.backend_name
    return f"GPU{gpu_index} ({device.name})" if device.name else f"GPU{gpu_index}"


def kv_streams(settings: LaunchSettings) -> int:
    """KV streams llama.cpp allocates: 1 with a unified cache, else one per sequence (n_seq_max)."""
    n_par = settings.n_parallel
    if settings.tool is Tool.SERVER and n_par < 0:
        return 1  # -np auto: 4 slots sharing one unified cache (overrides -no-kvu)
    n_seq = max(1, min(n_par, MAX_SEQ))
    unified = settings.kv_unified
    if unified is None:
        unified = False  # the server's default with an explicit -np, and common_params' default elsewhere
    return 1 if unified else n_seq


def context_pad(settings: LaunchSettings, profile: ModelProfile | None = None) -> int:
    """Cells per stream n_ctx is padded to: 256, or 32 for ik_llama.cpp without flash attention (which needs the
    profile to resolve "auto"; without one, only an explicit -fa off counts)."""
    if settings.engine is not Engine.IK_LLAMA:
        return CTX_PAD
    if profile is None:
        flash = settings.flash_attn is not FlashAttn.OFF
    else:
        from fitplan.core.engines import resolve_flash_attn

        flash = resolve_flash_attn(profile, settings)
    return CTX_PAD if flash else IK_CTX_PAD_NO_FA


def context_step(settings: LaunchSettings, profile: ModelProfile | None = None) -> int:
    return context_pad(settings, profile) * kv_streams(settings)


def training_cap(profile: ModelProfile, settings: LaunchSettings) -> int:
    """The largest grid context within the training length per stream (at least one step)."""
    pad = context_pad(settings, profile)
    per_stream = (profile.n_ctx_train // pad) * pad if profile.n_ctx_train > 0 else 0
    return max(pad, per_stream) * kv_streams(settings)


def _usage(est: Estimate, machine: Machine, margin: MarginPolicy) -> tuple[DeviceUse, ...]:
    gpu_index = {id(d): i for i, d in enumerate(machine.gpus)}
    out: list[DeviceUse] = []
    for de in est.devices:
        d = de.device
        gi = None if d.kind is DeviceKind.CPU else gpu_index.get(id(d))
        if gi is None and d.kind is not DeviceKind.CPU:
            gi = next((i for i, g in enumerate(machine.gpus) if g == d), None)
        checked = margin.check_host or d.kind is not DeviceKind.CPU
        out.append(DeviceUse(d, device_label(d, gi), de.used_bytes, margin.capacity(d, gi), checked))
    return tuple(out)


def _fits(usage: Sequence[DeviceUse]) -> bool:
    return all(u.fits for u in usage)


def _shortfalls(usage: Sequence[DeviceUse]) -> tuple[Shortfall, ...]:
    over = [u for u in usage if not u.fits]
    over.sort(key=lambda u: u.capacity_bytes - u.used_bytes)
    return tuple(Shortfall(u.label, u.used_bytes, u.capacity_bytes) for u in over)


class _Evaluator:
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
            hit = (est, _usage(est, self.machine, self.margin))
            self.cache[settings] = hit
        return hit

    def fits(self, settings: LaunchSettings) -> bool:
        return _fits(self(settings)[1])


def _largest_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int | None:
    """The largest x in [lo, hi] with pred(x), for pred true then false (monotone); None if pred(lo) is false."""
    if lo > hi or not pred(lo):
        return None
    if pred(hi):
        return hi
    return _bisect(lo, hi, pred)


def _smallest_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int | None:
    """The smallest x in [lo, hi] with pred(x), for pred false then true (monotone); None if pred(hi) is false."""
    if lo > hi or not pred(hi):
        return None
    if pred(lo):
        return lo
    return _bisect(hi, lo, pred)


def _bisect(good: int, bad: int, pred: Callable[[int], bool]) -> int:
    """The x next to the boundary on `good`'s side, for pred(good) true and pred(bad) false (either order)."""
    while abs(bad - good) > 1:
        mid = (good + bad) // 2
        if pred(mid):
            good = mid
        else:
            bad = mid
    return good


# ---------------------------------------------------------------------------------------------------------------------
# Largest context
# ---------------------------------------------------------------------------------------------------------------------


def _context_fit(ev: _Evaluator, settings: LaunchSettings, *, min_ctx: int = 0) -> ContextFit:
    step = context_step(settings, ev.profile)
    cap = training_cap(ev.profile, settings)
    k_max = max(1, cap // step)
    k_min = max(1, math.ceil(min_ctx / step)) if min_ctx > 0 else 1
    start = ev.evaluations

    def at(k: int) -> LaunchSettings:
        return dataclasses.replace(settings, n_ctx=k * step)

    best = _largest_true(k_min, k_max, lambda k: ev.fits(at(k))) if k_min <= k_max else None
    if best is None:
        k = min(k_min, k_max)
        est, usage = ev(at(k))
        shorts = _shortfalls(usage)
        return ContextFit(
            n_ctx=0,
            step=step,
            cap=cap,
            capped_by_training=False,
            estimate=est,
            next_estimate=None,
            usage=usage,
            binding_label=shorts[0].label if shorts else "",
            shortfalls=shorts,
            evaluations=ev.evaluations - start,
        )
    est, usage = ev(at(best))
    capped = best == k_max
    next_est: Estimate | None = None
    binding = ""
    if not capped:
        next_est, next_usage = ev(at(best + 1))
        over = _shortfalls(next_usage)
        binding = over[0].label if over else ""
    return ContextFit(
        n_ctx=best * step,
        step=step,
        cap=cap,
        capped_by_training=capped,
        estimate=est,
        next_estimate=next_est,
        usage=usage,
        binding_label=binding,
        shortfalls=(),
        evaluations=ev.evaluations - start,
    )


def max_context_that_fits(
    profile: ModelProfile,
    settings: LaunchSettings,
    machine: Machine,
    margin: MarginPolicy | None = None,
    estimate_fn: EstimateFn | None = None,
) -> ContextFit:
    """The largest context on llama.cpp's padded grid that fits with `settings` (whose `n_ctx` is ignored)."""
    ev = _Evaluator(profile, machine, margin or MarginPolicy(), estimate_fn or default_estimate_fn())
    return _context_fit(ev, settings)


# ---------------------------------------------------------------------------------------------------------------------
# Placement
# ---------------------------------------------------------------------------------------------------------------------


def _moe_layer_flags(profile: ModelProfile) -> tuple[bool, ...]:
    """Per trunk layer: does it hold routed expert tensors (what --n-cpu-moe moves)?"""
    has = [False] * profile.n_layer_all
    for t in profile.tensors:
        if t.role is TensorRole.EXPERTS and t.layer is not None and 0 <= t.layer < profile.n_layer_all:
            has[t.layer] = True
    if not any(has):
        for layer in profile.layers:
            if layer.is_moe and 0 <= layer.index < profile.n_layer_all:
                has[layer.index] = True
    return tuple(has)


def _proportional_split(n_layers: int, capacities: Sequence[int]) -> tuple[int, ...]:
    """`n_layers` offloaded indices split in proportion to each GPU's capacity (largest remainder)."""
    caps = [max(0, c) for c in capacities]
    total = sum(caps)
    if total <= 0:
        caps = [1] * len(caps)
        total = len(caps)
    exact = [n_layers * c / total for c in caps]
    counts = [int(x) for x in exact]
    rest = n_layers - sum(counts)
    order = sorted(range(len(caps)), key=lambda i: (exact[i] - counts[i], caps[i]), reverse=True)
    for i in order[:rest]:
        counts[i] += 1
    return tuple(counts)


class _Solver:
    def __init__(self, ev: _Evaluator, base: LaunchSettings, pins: Pins, min_ctx: int) -> None:
        self.ev = ev
        self.base = base
        self.pins = pins
        self.min_ctx = min_ctx
        self.profile = ev.profile
        self.gpus = ev.machine.gpus
        self.L = ev.profile.n_layer_all
        self.caps = [ev.margin.capacity(d, i) for i, d in enumerate(self.gpus)]
        self.split_free = (
            len(self.gpus) > 1
            and pins.tensor_split is None
            and base.split_mode is SplitMode.LAYER
            and base.devices is None
        )
        self.balanced: dict[tuple[int, int], tuple[int, ...]] = {}  # (ngl, ncmoe) -> balanced split

    def settings(self, ngl: int, ncmoe: int, split: tuple[int, ...] | None, n_ctx: int) -> LaunchSettings:
        ts: tuple[float, ...]
        if self.pins.tensor_split is not None:
            ts = self.pins.tensor_split
        elif split is not None and len(self.gpus) > 1:
            ts = tuple(float(x) for x in split)
        else:
            ts = ()
        return dataclasses.replace(
            self.base,
            n_ctx=n_ctx,
            n_gpu_layers=NGL_ALL if ngl >= self.L + 1 else ngl,
            n_cpu_moe=ncmoe,
            tensor_split=ts,
        )

    def initial_split(self, ngl: int) -> tuple[int, ...] | None:
        if not self.split_free:
            return None
        return _proportional_split(min(ngl, self.L + 1), self.caps)

    def balance(
        self, ngl: int, ncmoe: int, split: tuple[int, ...] | None, n_ctx: int
    ) -> tuple[int, ...] | None:
        """Move layers from the GPU with the least headroom to the one with the most while the smallest headroom
        grows; stop where moving one more layer no longer helps.

        When one layer helps, the headroom it shifts predicts how many layers would even out the two GPUs; that
        jump is tried once and kept when it leaves more headroom on the tightest GPU than the single move (a
        few estimates instead of one per layer when the split starts far from its balance)."""
        if split is None or not self.split_free:
            return split
        counts = list(split)
        n_gpu = len(self.gpus)

        def heads(c: Sequence[int]) -> list[int]:
            usage = self.ev(self.settings(ngl, ncmoe, tuple(c), n_ctx))[1]
            return [u.headroom_bytes for u in usage[:n_gpu]]

        cur = heads(counts)
        for _ in range(4 * (self.L + 1)):
            lo = min(range(n_gpu), key=lambda i: cur[i])
            hi = max(range(n_gpu), key=lambda i: cur[i])
            if lo == hi or counts[lo] == 0:
                break
            trial = list(counts)
            trial[lo] -= 1
            trial[hi] += 1
            new = heads(trial)
            if min(new) <= min(cur):
                break
            gain, loss = new[lo] - cur[lo], cur[hi] - new[hi]  # what one layer gives `lo` and takes from `hi`
            if gain > 0 and loss >= 0:
                # d layers (if each weighs like this one): lo's headroom rises to hi's, or to the next tightest GPU
                others = [cur[i] for i in range(n_gpu) if i not in (lo, hi)]
                jump = (cur[hi] - cur[lo]) // (gain + loss)
                if others:
                    jump = min(jump, (min(others) - cur[lo]) // gain)
                jump = min(jump, counts[lo])
                if jump > 1:
                    far = list(counts)
                    far[lo] -= jump
                    far[hi] += jump
                    far_heads = heads(far)
                    if min(far_heads) > min(new):
                        trial, new = far, far_heads
            counts, cur = trial, new
        return tuple(counts)

    def start_split(self, ngl: int, ncmoe: int) -> tuple[int, ...] | None:
        """Where balancing starts: the balanced split of the nearest placement already tried (moving a few experts
        or layers shifts the balance by a few layers), else the split by capacity. Layers added or removed go to
        or come from the first GPUs, as -ngl offloads from the back."""
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

    def fits(self, ngl: int, ncmoe: int, n_ctx: int) -> tuple[bool, tuple[int, ...] | None]:
        split = self.start_split(ngl, ncmoe)
        if self.ev.fits(self.settings(ngl, ncmoe, split, n_ctx)):
            return True, split
        if split is not None and self.split_free:
            balanced = self.balance(ngl, ncmoe, split, n_ctx) or split
            self.balanced[(ngl, ncmoe)] = balanced
            if self.ev.fits(self.settings(ngl, ncmoe, balanced, n_ctx)):
                return True, balanced
            return False, balanced
        return False, split


def _describe_placement(
    profile: ModelProfile, ngl: int, ncmoe: int, split: tuple[int, ...], n_gpus: int
) -> Placement:
    L = profile.n_layer_all
    act = min(ngl, L + 1)
    cpu_layers = min(profile.n_layer, max(0, L + 1 - act))
    moe_flags = _moe_layer_flags(profile)
    cpu_expert_layers = sum(1 for i in range(min(ncmoe, L)) if moe_flags[i] and i >= cpu_layers)
    parts: list[str] = []
    if n_gpus == 0:
        parts.append("everything on the CPU (no GPU)")
    elif act >= L + 1 and cpu_expert_layers == 0:
        parts.append("all layers on the GPU" + ("s" if n_gpus > 1 else ""))
    else:
        if cpu_expert_layers:
            parts.append(f"{cpu_expert_layers} expert layer{'s' if cpu_expert_layers != 1 else ''} on CPU")
        if cpu_layers:
            parts.append(f"{cpu_layers} of {profile.n_layer} layers on CPU")
        if act == 0:
            parts.append("nothing offloaded")
    if len(split) > 1:
        parts.append("split " + ":".join(str(x) for x in split) + " layers across GPUs")
    return Placement(
        n_gpu_layers=act if n_gpus else 0,
        n_cpu_moe=ncmoe,
        tensor_split=split,
        cpu_layers=cpu_layers if n_gpus else profile.n_layer,
        cpu_expert_layers=cpu_expert_layers,
        description=", ".join(parts),
    )


#: the Pins fields that, when set, are copied into the LaunchSettings field of the same name
_PINNED_SETTINGS = (
    "n_parallel",
    "kv_unified",
    "cache_type_k",
    "cache_type_v",
    "mmproj",
    "no_kv_offload",
    "tensor_split",
    "n_cpu_moe",
)


def _base_settings(pins: Pins) -> LaunchSettings:
    s = pins.base
    changes: dict[str, object] = {"fit": False}
    for name in _PINNED_SETTINGS:
        value = getattr(pins, name)
        if value is not None:
            changes[name] = value
    return dataclasses.replace(s, **changes)  # type: ignore[arg-type]


def _resolve_ngl(ngl: int, profile: ModelProfile) -> int:
    if ngl in (NGL_ALL, NGL_AUTO) or ngl < 0:
        return profile.n_layer_all + 1
    return min(ngl, profile.n_layer_all + 1)


def plan(
    profile: ModelProfile,
    machine: Machine,
    pins: Pins | None = None,
    *,
    margin: MarginPolicy | None = None,
    estimate_fn: EstimateFn | None = None,
    mmproj: ModelProfile | None = None,
    draft: ModelProfile | None = None,
    reserve_bytes: int | None = None,
) -> Plan:
    """Choose the fastest placement that fits the pins, then the largest context for it."""
    pins = pins or Pins()
    margin = margin or MarginPolicy()
    fn = estimate_fn or default_estimate_fn(mmproj=mmproj, draft=draft, reserve_bytes=reserve_bytes)
    ev = _Evaluator(profile, machine, margin, fn)
    base = _base_settings(pins)
    notes: list[str] = []
    est: Estimate | None

    step = context_step(base, profile)
    cap = training_cap(profile, base)
    if pins.n_ctx is not None:
        pinned_ctx = pins.n_ctx if pins.n_ctx > 0 else profile.n_ctx_train
        need_ctx = pinned_ctx
    else:
        pinned_ctx = None
        streams = kv_streams(base)
        want = pins.min_ctx if pins.min_ctx is not None else min(MIN_PLAN_CTX, cap // streams)
        need_ctx = max(1, math.ceil(want / CTX_PAD)) * CTX_PAD * streams  # per sequence, as --fit-ctx
        if need_ctx > cap:
            notes.append(
                f"the minimum context {want} is above the model's training length {profile.n_ctx_train}: "
                f"planned for at most {cap}"
            )
            need_ctx = cap

    solver = _Solver(ev, base, pins, need_ctx)
    L = profile.n_layer_all
    has_gpu = (
        bool(machine.gpus)
        and base.devices != ()
        and not (base.split_mode is SplitMode.NONE and base.main_gpu < 0)
    )
    moe_flags = _moe_layer_flags(profile)
    moe_layers = [i for i, f in enumerate(moe_flags) if f]
    is_moe = bool(moe_layers)

    # Candidate placements in the order of speed, each as (ngl, ncmoe).
    chosen: tuple[int, int, tuple[int, ...] | None] | None = None
    last_tried: tuple[int, int, tuple[int, ...] | None]
    ngl_pinned = pins.n_gpu_layers is not None
    ncmoe_pinned = pins.n_cpu_moe is not None or base.cpu_moe  # --cpu-moe: every expert already on the CPU

    if not has_gpu:
        ngl0 = 0
        ok, split = solver.fits(ngl0, base.n_cpu_moe, need_ctx)
        last_tried = (ngl0, base.n_cpu_moe, split)
        if ok:
            chosen = last_tried
    else:
        ngl_full = _resolve_ngl(pins.n_gpu_layers, profile) if pins.n_gpu_layers is not None else L + 1
        ncmoe0 = pins.n_cpu_moe if pins.n_cpu_moe is not None else 0
        ok, split = solver.fits(ngl_full, ncmoe0, need_ctx)
        last_tried = (ngl_full, ncmoe0, split)
        if ok:
            chosen = last_tried
        elif not pins.all_weights_on_gpu:
            # 2. MoE: experts of the first layers to the CPU, layer by layer. From 1: below the first MoE layer
            # --n-cpu-moe moves no expert, but any tensor override turns off pipeline parallelism (llama_context),
            # which makes the compute buffers of several GPUs smaller: less lost than moving experts.
            if is_moe and not ncmoe_pinned:
                lo = 1
                hi = moe_layers[-1] + 1
                found: dict[int, tuple[int, ...] | None] = {}

                def moe_ok(n: int) -> bool:
                    good, sp = solver.fits(ngl_full, n, need_ctx)
                    found[n] = sp
                    return good

                best = _smallest_true(lo, hi, moe_ok)
                last_tried = (ngl_full, hi, found.get(hi))
                if best is not None:
                    chosen = (ngl_full, best, found[best])
            # 3. Whole layers to the CPU (from the front, as -ngl offloads from the back).
            if chosen is None and not ngl_pinned:
                ncmoe_cpu = (moe_layers[-1] + 1) if (is_moe and not ncmoe_pinned) else ncmoe0
                found_l: dict[int, tuple[int, ...] | None] = {}

                def layers_ok(n: int) -> bool:
                    good, sp = solver.fits(n, ncmoe_cpu, need_ctx)
                    found_l[n] = sp
                    return good

                best_ngl = _largest_true(0, L, layers_ok)
                last_tried = (0, ncmoe_cpu, found_l.get(0))
                if best_ngl is not None:
                    chosen = (best_ngl, ncmoe_cpu, found_l[best_ngl])
                    # Put experts of the remaining GPU layers back on the GPU while it still fits.
                    if is_moe and not ncmoe_pinned and best_ngl > 0:
                        first_gpu_layer = max(0, L + 1 - best_ngl)
                        found_m: dict[int, tuple[int, ...] | None] = {}

                        def back_ok(n: int) -> bool:
                            good, sp = solver.fits(best_ngl, n, need_ctx)
                            found_m[n] = sp
                            return good

                        back = _smallest_true(min(first_gpu_layer, ncmoe_cpu), ncmoe_cpu, back_ok)
                        if back is not None:
                            chosen = (best_ngl, back, found_m[back])
                    # Experts of layers that are on the CPU anyway need no --n-cpu-moe.
                    if is_moe and not ncmoe_pinned and chosen[1] <= max(0, L + 1 - best_ngl):
                        chosen = (chosen[0], 0, chosen[2])

    if chosen is None:
        ngl_t, ncmoe_t, split_t = last_tried
        s = solver.settings(ngl_t, ncmoe_t, split_t, need_ctx)
        est, usage = ev(s)
        shorts = _shortfalls(usage)
        placement = _describe_placement(
            profile, ngl_t if has_gpu else 0, ncmoe_t, split_t or (), len(machine.gpus)
        )
        what = f"-c {need_ctx}" if pinned_ctx is not None else f"the minimum context {need_ctx}"
        lead = "does not fit"
        if pins.all_weights_on_gpu:
            lead = "does not fit with all weights on the GPU"
        binding = f"{lead} at {what}: " + "; ".join(sh.describe() for sh in shorts)
        cf = ContextFit(0, step, cap, False, est, None, usage, shorts[0].label if shorts else "", shorts, 0)
        return Plan(
            settings=s,
            estimate=est,
            context=cf,
            placement=placement,
            fits=False,
            binding=binding,
            notes=tuple(notes),
            shortfalls=shorts,
            evaluations=ev.evaluations,
        )

    ngl_c, ncmoe_c, split_c = chosen
    if pinned_ctx is not None:
        s = solver.settings(ngl_c, ncmoe_c, split_c, pinned_ctx)
        if split_c is not None:
            split_c = solver.balance(ngl_c, ncmoe_c, split_c, pinned_ctx)
            s = solver.settings(ngl_c, ncmoe_c, split_c, pinned_ctx)
        est, usage = ev(s)
        cf = ContextFit(pinned_ctx, step, cap, False, est, None, usage, "", (), 0)
    else:
        s = solver.settings(ngl_c, ncmoe_c, split_c, 0)
        cf = _context_fit(ev, s, min_ctx=need_ctx)
        # Rebalance the split for the context found, then search again.
        if split_c is not None and cf.fits:
            better = solver.balance(ngl_c, ncmoe_c, split_c, cf.n_ctx)
            if better != split_c:
                s2 = solver.settings(ngl_c, ncmoe_c, better, 0)
                cf2 = _context_fit(ev, s2, min_ctx=need_ctx)
                if cf2.n_ctx >= cf.n_ctx:
                    split_c, s, cf = better, s2, cf2
        s = dataclasses.replace(s, n_ctx=cf.n_ctx)
        est = cf.estimate
    placement = _describe_placement(
        profile, ngl_c if has_gpu else 0, ncmoe_c, split_c or (), len(machine.gpus) if has_gpu else 0
    )

    # The binding constraint, in words.
    reasons: list[str] = []
    if placement.cpu_expert_layers or placement.cpu_layers:
        if placement.cpu_expert_layers:
            n = placement.cpu_expert_layers
            reasons.append(f"{n} expert layer{'s' if n != 1 else ''} on CPU")
        if placement.cpu_layers and has_gpu:
            reasons.append(f"{placement.cpu_layers} of {profile.n_layer} layers on CPU")
    if pinned_ctx is not None:
        reasons.insert(0, f"context pinned at {pinned_ctx}")
    elif cf.capped_by_training:
        reasons.insert(0, f"context capped at the model's training length ({profile.n_ctx_train})")
    else:
        reasons.insert(0, f"context limited by {cf.binding_label} memory")
    if not has_gpu:
        notes.append("no GPU: everything runs on the CPU")
    if has_gpu and is_moe and not ncmoe_pinned and 0 < ncmoe_c <= moe_layers[0]:
        notes.append(
            f"--n-cpu-moe {ncmoe_c} moves no expert tensor (the first MoE layer is {moe_layers[0]}) but, as any "
            "tensor override, turns off pipeline parallelism: smaller compute buffers on the GPUs, slower prompt "
            "processing"
        )
    if pins.n_ctx is None and (placement.cpu_layers or placement.cpu_expert_layers) and has_gpu:
        notes.append(
            f"placement chosen to keep at least {need_ctx} tokens of context; a smaller context could keep more "
            "on the GPU"
        )
    return Plan(
        settings=s,
        estimate=est,
        context=cf,
        placement=placement,
        fits=True,
        binding="; ".join(reasons),
        notes=tuple(notes),
        shortfalls=(),
        evaluations=ev.evaluations,
    )
