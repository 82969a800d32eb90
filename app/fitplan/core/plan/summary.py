"""The verdict in words: the sentence the window shows and `plan --json` carries, the slots it was made for, and the
device to look at first. One wording for every front end."""

from __future__ import annotations

from dataclasses import dataclass

from fitplan.core.base.launch_settings import SERVER_AUTO_PARALLEL, Engine
from fitplan.core.base.units import fmt_ctx, fmt_gib
from fitplan.core.engines.ollama import OLLAMA_DEFAULT_PARALLEL
from fitplan.core.plan.planner import Plan
from fitplan.core.plan.usage import Shortfall
from fitplan.core.plan.verdict import FitLevel, Verdict, slots_text

__all__ = ["VerdictWords", "is_server_default_slots", "shortfalls_of", "slots_words", "verdict_words"]


@dataclass(frozen=True, slots=True)
class VerdictWords:
    """The verdict as one sentence, the device that limits the plan, and (when it does not fit) the position of the
    device short by the most in the estimate's device list."""

    level: FitLevel
    text: str
    binding: str = ""
    most_short: int | None = None


def is_server_default_slots(v: Verdict) -> bool:
    """The slots are llama-server's `-np auto`: 4 sequences sharing one unified KV cache."""
    return v.n_seq == SERVER_AUTO_PARALLEL and v.kv_unified


def slots_words(v: Verdict) -> str:
    """The slots the verdict was made for, saying when they are llama-server's default."""
    return slots_text(v.n_seq, v.kv_unified) + (
        " (llama-server's -np auto)" if is_server_default_slots(v) else ""
    )


def shortfalls_of(plan: Plan, v: Verdict) -> tuple[Shortfall, ...]:
    """What is short where: the plan's own shortfalls (its pins could not be met), else the verdict's."""
    return plan.shortfalls or v.shortfalls


def _most_short(v: Verdict, shorts: tuple[Shortfall, ...]) -> int | None:
    if not shorts:
        return None
    worst = max(shorts, key=lambda s: s.over_bytes)
    return next((i for i, u in enumerate(v.usage) if u.label == worst.label), None)


def _slots_sentence(v: Verdict, engine: Engine) -> str:
    """The slots planned for, and the default of the program that runs the model when they differ from it:
    llama-server's `-np auto` (4 sequences, one unified cache), or ollama's OLLAMA_NUM_PARALLEL (1)."""
    planned = f" Planned for {slots_text(v.n_seq, v.kv_unified)}"
    if engine is Engine.OLLAMA:
        default = (
            ""
            if v.n_seq == OLLAMA_DEFAULT_PARALLEL
            else f" (ollama's default: {slots_text(OLLAMA_DEFAULT_PARALLEL, False)})"
        )
    elif is_server_default_slots(v):
        default = ""
    else:
        default = f" (llama-server's default: {slots_text(SERVER_AUTO_PARALLEL, True)})"
    return f"{planned}{default}."


def verdict_words(plan: Plan, v: Verdict, n_ctx: int, has_gpu: bool) -> VerdictWords:
    """The verdict on a plan at context `n_ctx` in one sentence, with its margins' outcome and slots."""
    slots = _slots_sentence(v, plan.settings.engine)
    if v.level is FitLevel.NO_FIT:
        shorts = shortfalls_of(plan, v)
        # no device short of memory: a floor the memory allows is not reached (the speed floor, in the plan's words)
        text = "; ".join(s.describe() for s in shorts) or plan.binding
        label = shorts[0].label if shorts else ""
        return VerdictWords(
            FitLevel.NO_FIT,
            f"Does not fit at {fmt_ctx(n_ctx)} context: {text}.{slots}",
            label,
            _most_short(v, shorts),
        )
    largest = plan.largest
    more = ""
    if largest is not None and largest.fits:
        if largest.capped_by_training:
            more = f" Up to {fmt_ctx(largest.n_ctx)} context fits (the model's training length)."
        else:
            more = f" Up to {fmt_ctx(largest.n_ctx)} context fits; {_memory_of(largest.binding_label)} is the limit."
    if v.level is FitLevel.OFFLOAD:
        binding = largest.binding_label if largest is not None else ""
        # weights the user's pins keep on the CPU are not what the machine needs ("without --n-cpu-moe" says
        # what dropping the pin gives)
        head = (
            f"Fits with {plan.placement.description}, as {plan.pinned_offload} asks"
            if plan.pinned_offload
            else f"Fits only with {plan.placement.description}"
        )
        return VerdictWords(FitLevel.OFFLOAD, f"{head}.{more}{slots}", binding)
    tight = v.tightest
    where = (tight.label if has_gpu else "system RAM (CPU only)") if tight is not None else ""
    spare = fmt_gib(tight.headroom_bytes if tight is not None else 0)
    return VerdictWords(
        FitLevel.FITS,
        f"Fits: {spare} to spare on {where} after the margin.{more}{slots}",
        tight.label if tight is not None else "",
    )


def _memory_of(label: str) -> str:
    """ "GPU0 (RTX 4090) memory", "host RAM" (not "host RAM memory")."""
    return label if label.endswith("RAM") else f"{label} memory"
