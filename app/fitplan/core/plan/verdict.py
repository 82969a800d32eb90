"""The one verdict: does an estimate (or a plan) fit, with which margins, and how many slots it was made for.

`plan`, `estimate`, `scan` and the window's verdict and library badge all take their answer from here:

* `fits`: every device within its capacity minus the margins of the `MarginPolicy` (the answer the exit codes,
  badges and colours follow);
* `fits_card`: every device within its memory with no margin at all (free memory, or total with `use_free` off);
* `level`: FITS, OFFLOAD (fits only with weights on the CPU while a GPU is there) or NO_FIT.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from fitplan.core.base.devices import Machine
from fitplan.core.base.launch_settings import SERVER_AUTO_PARALLEL
from fitplan.core.base.results import Estimate
from fitplan.core.plan.pool import pooled_usage
from fitplan.core.plan.usage import DeviceUse, MarginPolicy, Shortfall, fits, shortfalls

__all__ = ["FitLevel", "Verdict", "judge", "slots_text"]


class FitLevel(StrEnum):
    FITS = "fits"
    OFFLOAD = "offload"  # fits only with part of the weights on the CPU
    NO_FIT = "no_fit"


@dataclass(frozen=True, slots=True)
class Verdict:
    level: FitLevel
    fits: bool  # within the margins
    fits_card: bool  # within each device's memory, no margin
    margin: MarginPolicy
    usage: tuple[DeviceUse, ...]  # against the capacities minus the margins
    shortfalls: tuple[Shortfall, ...]  # devices over capacity minus margin
    tightest: DeviceUse | None  # the checked GPU (else the host) with the least headroom
    n_seq: int  # slots (sequences) the estimate was made for
    kv_unified: bool
    card_usage: tuple[
        DeviceUse, ...
    ] = ()  # against each device's memory, no margin (what `fits_card` judges)

    @property
    def headline(self) -> str:
        if self.fits:
            return "fits with weights on the CPU" if self.level is FitLevel.OFFLOAD else "fits"
        if self.fits_card:
            return "fits the card, not with the margin"
        return "does not fit"

    def margin_text(self) -> str:
        return self.margin.describe()

    def slots_text(self, *, name_default: bool = False) -> str:
        return slots_text(self.n_seq, self.kv_unified, name_default=name_default)


def slots_text(n_seq: int, kv_unified: bool, *, name_default: bool = False) -> str:
    """The slot count where results are shown: the window plans 1 slot by default, llama-server 4 unified (with
    `name_default`, that case says so)."""
    if n_seq == 1:
        return "1 slot"
    if not kv_unified:
        return f"{n_seq} slots, one KV cache each"
    server_default = name_default and n_seq == SERVER_AUTO_PARALLEL
    return f"{n_seq} slots sharing one KV cache" + (" (llama-server's -np auto)" if server_default else "")


def judge(est: Estimate, machine: Machine, margin: MarginPolicy, *, weights_on_cpu: bool = False) -> Verdict:
    """The verdict on one estimate. `weights_on_cpu`: the placement keeps weights off the GPUs (OFFLOAD when a
    GPU is there and it fits)."""
    usage = pooled_usage(est, machine, margin)
    bare = dataclasses.replace(margin, gpu_margin_bytes=0, host_margin_bytes=0, per_gpu_bytes=())
    ok = fits(usage)
    card_usage = pooled_usage(est, machine, bare)
    card = fits(card_usage)
    level = FitLevel.NO_FIT
    if ok:
        level = FitLevel.OFFLOAD if weights_on_cpu and machine.gpus else FitLevel.FITS
    checked = [u for u in usage if u.checked]
    # the tightest GPU among those holding something: a GPU given no layers (or left out by -dev) is not the limit
    gpus = [u for u in checked if u.gpu_index is not None]
    gpus = [u for u in gpus if u.used_bytes > 0] or gpus or checked
    tightest = min(gpus, key=lambda u: u.headroom_bytes) if gpus else None
    ctx = est.context
    return Verdict(
        level, ok, card, margin, usage, shortfalls(usage), tightest, ctx.n_seq_max, ctx.kv_unified, card_usage
    )
