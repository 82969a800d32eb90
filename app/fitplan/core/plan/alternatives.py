"""What would change a plan: a few other pins or machines, each one planned again with the same estimator.

Every alternative is a full plan (`planner.plan`) of the changed request, with the same objective, so nothing is
suggested that the estimator did not check. When the plan fits, an alternative is listed when it gives more context
or keeps more of the weights on the GPUs (a pin dropped, the other goal of the objective); when it does not fit, when
it makes it fit. They are sorted the objective's way (`planner.plan_key`): the ones that fit first, then the best
plan by the plan's own objective.

`why_this_context` says in one line why a plan that puts the fastest placement first has the context it has, when
putting the context first would give more: a bigger card can take more layers and leave less room for the cache.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fitplan.core.base.devices import GIB, Device, Machine
from fitplan.core.base.errors import FitplanError
from fitplan.core.base.launch_settings import Engine
from fitplan.core.gguf.ggml_types import is_quantized_cache_type
from fitplan.core.model.profile import ModelProfile
from fitplan.core.plan.finer import nkvo_devices
from fitplan.core.plan.objective import Goal, Objective, SpeedOf, placement_key
from fitplan.core.plan.planner import Pins, Plan, plan, plan_key
from fitplan.core.plan.search import EstimateFn
from fitplan.core.plan.usage import MarginPolicy, device_label

__all__ = [
    "CARD_SIZES",
    "DROP_DRAFT",
    "OBJECTIVE_FLAG",
    "UNPIN",
    "Alternative",
    "what_would_change",
    "why_this_context",
]

#: how the CLI spells a goal (`--objective placement|context`)
OBJECTIVE_FLAG = "--objective"
#: how the change that drops the user's draft model (-md) begins; the window applies it by choosing no draft
DROP_DRAFT = "without the draft model"
#: how a change that drops one of the user's placement pins begins: "without -ngl"
UNPIN = "without "

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
    #: the speed model's tokens/s of the changed plan (`core.speed.plan_speed`: generation at an empty context,
    #: and a 512-token prompt); 0 when it does not fit or the speed cannot be estimated
    generation_tps: float = 0.0
    prompt_tps: float = 0.0
    #: with -nkvo: generation with the cache filled to the changed plan's context (the host reads all of it for
    #: every token, so the empty-context figure alone would flatter it); 0 otherwise
    generation_full_tps: float = 0.0

    def describe(self) -> str:
        return f"{self.change}: {self.effect}"

    def speed_words(self) -> str:
        """ "about 45 t/s generating, 1,200 t/s prompt" ("" without a speed)."""
        if self.generation_tps <= 0:
            return ""
        full = (
            f" ({_rate(self.generation_full_tps)} with the cache full)"
            if self.generation_full_tps > 0
            else ""
        )
        return f"about {_rate(self.generation_tps)} t/s generating{full}, {_rate(self.prompt_tps)} t/s prompt"

    def brief(self) -> str:
        """The change, its effect and its generation speed in a few words: "-np 1: context 40,960 -> 41,216, ~29
        t/s" (the window's rows; `speed_words` in full)."""
        tps = f", ~{_rate(self.generation_tps)} t/s" if self.generation_tps > 0 else ""
        if self.generation_full_tps > 0:
            tps += f" ({_rate(self.generation_full_tps)} with the cache full)"
        return self.describe() + tps


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.1f}"


def _speed(
    profile: ModelProfile, machine: Machine, alt: Plan, host_bandwidth: float | None
) -> tuple[float, float, float]:
    """(generation, prompt, generation with the cache full when the plan keeps it in host memory) tokens/s of a
    changed plan that fits, by the speed model; zeros otherwise."""
    if not alt.fits:
        return 0.0, 0.0, 0.0
    from fitplan.core.speed import plan_speed  # the speed tables load with the first alternative

    try:
        ps = plan_speed(profile, machine, alt.settings, host_bandwidth=host_bandwidth)
    except (FitplanError, ValueError, KeyError):
        return 0.0, 0.0, 0.0
    full = ps.generation_full.tps if alt.settings.no_kv_offload else 0.0
    return ps.generation.tps, ps.prompt.tps, full


@dataclass(frozen=True, slots=True)
class _Candidate:
    change: str
    pins: Pins
    machine: Machine
    objective: Objective | None = None  # None: the base plan's
    unless: str = ""  # skipped when the change named here is listed (the training length before double)


def _ctx(n: int) -> str:
    return f"{n:,}"


def _bigger(d: Device, gib: int) -> Device:
    total = gib * GIB
    used = d.total_bytes - d.free_bytes
    return dataclasses.replace(d, total_bytes=total, free_bytes=max(0, total - used))


def _machine_candidates(machine: Machine, pins: Pins, base: Plan) -> list[_Candidate]:
    out: list[_Candidate] = []
    gpus = machine.gpus
    if gpus and all(d.total_bytes > 0 for d in gpus):
        now = max(d.total_bytes for d in gpus) / GIB
        size = next((s for s in CARD_SIZES if s > now + 0.5), None)
        if size is not None:
            article = "an" if str(size).startswith("8") else "a"  # "an 8 GiB card", "an 80 GiB card"
            what = f"{article} {size} GiB card" if len(gpus) == 1 else f"{len(gpus)} x {size} GiB cards"
            out.append(_Candidate(what, pins, Machine(tuple(_bigger(d, size) for d in gpus), machine.host)))
    host = machine.host
    if host.total_bytes > 0:
        extra = _more_host_ram(base, machine)
        more = dataclasses.replace(
            host, total_bytes=host.total_bytes + extra, free_bytes=host.free_bytes + extra
        )
        out.append(_Candidate(f"{extra // GIB} GiB more host RAM", pins, Machine(gpus, more)))
    return out


def _more_host_ram(base: Plan, machine: Machine) -> int:
    """What the host's shortfall at the plan's placement needs (whole GiB), when the host is short; else a step for
    more context (16 GiB or half of what there is)."""
    host = device_label(machine.host, None)
    short = sum(s.over_bytes for s in base.shortfalls if s.label == host)
    if not base.fits and short > 0:
        return -(-short // GIB) * GIB
    return max(16 * GIB, machine.host.total_bytes // 2 // GIB * GIB)


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
        # a larger context, and what it costs in placement (pinned or not): the training length, else double
        out.append(_Candidate(f"-c {cap}", dataclasses.replace(pins, n_ctx=cap), machine))
        bigger = min(cap, 2 * base.settings.n_ctx)
        if bigger < cap:
            pinned = dataclasses.replace(pins, n_ctx=bigger)
            out.append(_Candidate(f"-c {bigger}", pinned, machine, unless=f"-c {cap}"))
    if not base.fits and pins.n_ctx is not None and pins.n_ctx > 4096:
        half = max(4096, pins.n_ctx // 2 // 256 * 256)
        out.append(_Candidate(f"-c {half}", dataclasses.replace(pins, n_ctx=half), machine))
    moe = any(ly.is_moe for ly in profile.layers)
    if moe and pins.n_cpu_moe is None and not pins.all_weights_on_gpu and machine.gpus:
        n = base.placement.n_cpu_moe + max(2, profile.n_layer_all // 8)
        if n <= profile.n_layer_all:
            out.append(_Candidate(f"--n-cpu-moe {n}", dataclasses.replace(pins, n_cpu_moe=n), machine))
    out.extend(_finer_candidates(base, pins, machine))
    out.extend(_unpinned(pins, machine))
    return out


def _finer_candidates(base: Plan, pins: Pins, machine: Machine) -> list[_Candidate]:
    """-nkvo (every layer on the GPU, the cache in host memory) where the plan keeps layers on the CPU or does
    not fit, on the GPUs the planner chooses it on (`finer.nkvo_devices`), and the plan without the draft model the
    user gave (its weights, cache and compute freed)."""
    s = base.settings
    out: list[_Candidate] = []
    # layers on the CPU (whole or in part): -nkvo can bring them back; experts on the CPU it leaves there
    on_cpu = base.placement.cpu_layers or base.placement.finer.ffn_cpu
    if (
        nkvo_devices(machine.gpus)
        and pins.no_kv_offload is None
        and not s.no_kv_offload
        and s.engine is Engine.LLAMA_CPP
        and (on_cpu or not base.fits)
    ):
        out.append(_Candidate("-nkvo", dataclasses.replace(pins, no_kv_offload=True), machine))
    if pins.base.draft is not None:
        no_draft = dataclasses.replace(pins, base=dataclasses.replace(pins.base, draft=None))
        out.append(_Candidate(f"{DROP_DRAFT} (-md {pins.base.draft.model_path})", no_draft, machine))
    return out


def _goal_candidate(base: Plan, pins: Pins, machine: Machine) -> _Candidate:
    """The other goal of the objective, with the same pins and floors."""
    other = Goal.CONTEXT if base.objective.goal is Goal.PLACEMENT else Goal.PLACEMENT
    objective = dataclasses.replace(base.objective, goal=other)
    return _Candidate(f"{OBJECTIVE_FLAG} {other.value}", pins, machine, objective)


def _unpinned(pins: Pins, machine: Machine) -> list[_Candidate]:
    """Each placement pin the user set, dropped."""
    drops: list[tuple[str, object, object]] = [
        ("-ngl", pins.n_gpu_layers, {"n_gpu_layers": None}),
        ("--n-cpu-moe", pins.n_cpu_moe, {"n_cpu_moe": None}),
        ("-ts", pins.tensor_split, {"tensor_split": None}),
        ("--all-on-gpu", pins.all_weights_on_gpu or None, {"all_weights_on_gpu": False}),
    ]
    return [
        _Candidate(f"{UNPIN}{flag}", dataclasses.replace(pins, **changes), machine)  # type: ignore[arg-type]
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


def _improves(base: Plan, alt: Plan) -> bool:
    """A change worth listing: it makes the plan fit, or gives more context, or keeps more on the GPUs."""
    if not alt.fits:
        return False
    if not base.fits:
        return True
    if (alt.settings.n_ctx, alt.placement.description) == (base.settings.n_ctx, base.placement.description):
        return False
    more_gpu = placement_key(alt.placement.objective_layers, alt.placement.off_gpu_bytes) > placement_key(
        base.placement.objective_layers, base.placement.off_gpu_bytes
    )
    return alt.settings.n_ctx > base.settings.n_ctx or more_gpu


def what_would_change(
    profile: ModelProfile,
    machine: Machine,
    pins: Pins,
    base: Plan,
    *,
    margin: MarginPolicy | None = None,
    estimate_fn: EstimateFn | None = None,
    speed_of: SpeedOf | None = None,
    limit: int = 5,
    host_bandwidth: float | None = None,
) -> tuple[Alternative, ...]:
    """At most `limit` alternatives to `base` (the plan of `pins` on `machine`) that change its outcome, each
    planned again with `base`'s objective (`speed_of`: for its speed floor), best first by that objective, each
    with its expected speed (`host_bandwidth`: the host RAM's, bytes/s, None for the detected one)."""
    found: list[tuple[Plan, _Candidate]] = []
    # ollama takes no llama-server flags (its own settings are environment variables and a Modelfile): only a
    # change of machine is offered there
    flags = base.settings.engine is not Engine.OLLAMA
    candidates = (
        *(_pin_candidates(profile, base, pins, machine) if flags else ()),
        *((_goal_candidate(base, pins, machine),) if flags else ()),
        *_machine_candidates(machine, pins, base),
    )
    for c in candidates:
        if c.unless and any(f.change == c.unless for _, f in found):
            continue
        objective = c.objective or base.objective
        try:
            alt = plan(
                profile,
                c.machine,
                c.pins,
                objective=objective,
                speed_of=speed_of,
                margin=margin or base.margin,
                estimate_fn=estimate_fn,
            )
        except FitplanError:
            continue  # the estimator refuses this combination (e.g. a quantized V cache without flash attention)
        if _improves(base, alt):
            found.append((alt, c))
    # the base's objective ranks them all (an alternative of the other goal is ranked as the base would rank it)
    found.sort(key=lambda t: plan_key(dataclasses.replace(t[0], objective=base.objective)), reverse=True)
    out = [
        Alternative(
            c.change,
            _effect(base, alt),
            alt.fits,
            alt.settings.n_ctx,
            alt.placement.description,
            alt.placement.n_gpu_layers,
            *_speed(profile, c.machine, alt, host_bandwidth),
        )
        for alt, c in found[:limit]
    ]
    return tuple(out)


def why_this_context(base: Plan, alternatives: tuple[Alternative, ...]) -> str:
    """One line, when the fastest placement first leaves a shorter context than the context first would: why (a
    bigger card takes more of the weights, and its memory goes to them instead of the cache). Empty otherwise."""
    if not base.fits or base.objective.goal is not Goal.PLACEMENT or base.context.capped_by_training:
        return ""
    if base.context_pinned:
        return ""  # the context is the user's
    other = f"{OBJECTIVE_FLAG} {Goal.CONTEXT.value}"
    alt = next((a for a in alternatives if a.change == other and a.n_ctx > base.settings.n_ctx), None)
    if alt is None:
        return ""
    return (
        f"the fastest placement comes first ({base.placement.description}): the weights it keeps on the GPU leave "
        f"room for {_ctx(base.settings.n_ctx)} tokens; {other} gives {_ctx(alt.n_ctx)} with {alt.placement}"
    )
