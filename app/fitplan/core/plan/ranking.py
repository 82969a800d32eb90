"""Which of several models (the quants of one repository or folder) is the best choice for a machine.

Quants are compared only with quants of the same model: the models of a source are grouped by what their headers
say they are (`ModelIdentity`), and each group is ranked on its own, with its own recommendation.

One rule for the CLI (`fitplan quants`) and the window ("Compare quants"): fitting models first; among them, the ones
whose weights are all on the GPUs with a comfortable context (`COMFORT_CTX` tokens, or the training context if
shorter), then those on the GPUs with less context, then those that fit only with CPU offload; within a tier the
larger file first (the higher-precision quant). Models that do not fit follow, the smallest (closest to fitting)
first, then those that could not be read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fitplan.core.model.profile import ModelProfile

__all__ = [
    "COMFORT_CTX",
    "RANK_RULE",
    "ModelIdentity",
    "group_by_model",
    "identity_of",
    "quant_label",
    "quant_size",
    "rank_key",
    "tier",
]

#: The context a model needs to rank as comfortable (or its training context if shorter).
COMFORT_CTX = 8192
RANK_RULE = (
    f"ranked: fits first; then weights all on the GPUs with at least {COMFORT_CTX} tokens of context (or the "
    "training context if shorter); then the larger file (the higher-precision quant); each model on its own. "
    "Recommended: the first row of each model."
)


def tier(fits: bool | None, all_on_gpu: bool, n_ctx: int, training_ctx: int) -> int:
    """0 on the GPUs with a comfortable context, 1 on the GPUs with less, 2 with offload, 3 does not fit, 4 unread
    (`fits` None)."""
    if fits is None:
        return 4
    if not fits:
        return 3
    if not all_on_gpu:
        return 2
    return 0 if n_ctx >= min(COMFORT_CTX, training_ctx or COMFORT_CTX) else 1


def rank_key(t: int, size_bytes: int, name: str) -> tuple[int, int, str]:
    """Sort key, best first: the tier, then the larger file (the smaller one among those that do not fit)."""
    return (t, size_bytes if t >= 3 else -size_bytes, name)


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    """What the quants of one model share in their headers (llama-quantize keeps the name and every shape): the
    model's name, its architecture and its dimensions. Two models that differ in any of them are not quants of one
    another, whatever their file names say."""

    name: str  # general.name, case-folded ("" when the header has none)
    architecture: str
    n_layer: int
    n_embd: int
    n_vocab: int
    n_expert: int
    shown_name: str = field(default="", compare=False)  # general.name as the header spells it

    def label(self) -> str:
        """The model for people: its name and its shape."""
        shape = f"{self.architecture}, {self.n_layer} layers, {self.n_embd} wide"
        name = self.shown_name or self.name
        return f"{name} ({shape})" if name else shape


def identity_of(profile: ModelProfile) -> ModelIdentity:
    name = " ".join(profile.name.split())
    return ModelIdentity(
        name.casefold(),
        profile.architecture,
        profile.n_layer,
        profile.n_embd,
        profile.n_vocab,
        profile.moe.n_expert if profile.moe is not None else 0,
        name,
    )


def group_by_model(identities: Sequence[ModelIdentity | None]) -> tuple[tuple[int, ...], ...]:
    """The positions of `identities` grouped by model, groups in the order their first member comes; the models that
    could not be read (None) form the last group."""
    groups: dict[ModelIdentity | None, list[int]] = {}
    for i, ident in enumerate(identities):
        groups.setdefault(ident, []).append(i)
    unread = groups.pop(None, None)
    return (*(tuple(g) for g in groups.values()), *((tuple(unread),) if unread else ()))


def quant_size(profile: ModelProfile | None, listed_bytes: int) -> int:
    """The size a quant is shown and ranked by: the bytes its header says the model's files hold (a header-only or
    partial copy measures as the model it describes), else the size of the files as listed."""
    return profile.file_size if profile is not None and profile.file_size > 0 else listed_bytes


def quant_label(name: str, profile: ModelProfile | None) -> str:
    """A row's quant: the name its file gives, with the header's file type where that says something else."""
    file_type = profile.file_type if profile is not None else ""
    if not file_type or file_type.upper() == name.upper():
        return name
    return f"{name} ({file_type})" if name else file_type
