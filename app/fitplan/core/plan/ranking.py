"""Which of several models (the quants of one repository or folder) is the best choice for a machine.

One rule for the CLI (`fitplan quants`) and the window ("Compare quants"): fitting models first; among them, the ones
whose weights are all on the GPUs with a comfortable context (`COMFORT_CTX` tokens, or the training context if
shorter), then those on the GPUs with less context, then those that fit only with CPU offload; within a tier the
larger file first (the higher-precision quant). Models that do not fit follow, the smallest (closest to fitting)
first, then those that could not be read.
"""

from __future__ import annotations

__all__ = ["COMFORT_CTX", "RANK_RULE", "rank_key", "tier"]

#: The context a model needs to rank as comfortable (or its training context if shorter).
COMFORT_CTX = 8192
RANK_RULE = (
    f"ranked: fits first; then weights all on the GPUs with at least {COMFORT_CTX} tokens of context (or the "
    "training context if shorter); then the larger file (the higher-precision quant). Recommended: the first row."
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
