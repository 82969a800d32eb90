"""How fast a plan runs: expected prompt and generation tokens per second, with the band measured on held-out
published llama-bench results (docs/speed.md, `tools/speed_report.py`).

`plan_speed` is the one entry point every surface uses (`plan`, `estimate`, `quants`, the window, and a planner
objective with a speed floor)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fitplan.core.base.devices import Machine, Vendor
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.memory.weights import active_gpu_positions
from fitplan.core.model.profile import ModelProfile
from fitplan.core.speed.figures import MachineFigures, machine_figures
from fitplan.core.speed.model import (
    Backend,
    Calibration,
    DeviceTime,
    SpeedClass,
    backend_of,
    load_calibration,
    predict,
)
from fitplan.core.speed.work import ModelWork, model_work

__all__ = ["PlanSpeed", "SpeedBand", "SpeedClass", "plan_speed", "speed_class"]

#: The prompt length prompt t/s is given for (llama-bench's pp512).
PROMPT_TOKENS = 512


@dataclass(frozen=True, slots=True)
class SpeedBand:
    """A predicted rate and the range the held-out published results put the real one in (80% of them)."""

    tps: float
    low: float
    high: float

    def text(self) -> str:
        return f"{_fmt(self.tps)} t/s ({_fmt(self.low)}-{_fmt(self.high)})"


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


@dataclass(frozen=True, slots=True)
class PlanSpeed:
    """Expected speed of one plan.

    `generation` is at an empty context (as llama-bench's tg128), `generation_full` with the KV cache filled to the
    plan's context, `prompt` for a 512-token prompt in batches of the plan's `-ub`. `speed_class` says which
    held-out error band applies; `devices` the share of a generated token's time per device."""

    generation: SpeedBand
    generation_full: SpeedBand
    prompt: SpeedBand
    speed_class: SpeedClass
    n_ctx: int
    devices: tuple[DeviceTime, ...]
    assumptions: tuple[str, ...]

    def summary(self) -> str:
        """One line: "generation 45 t/s (38-53), 31 t/s at 32768 tokens; prompt 1200 t/s (900-1600)"."""
        full = f", {_fmt(self.generation_full.tps)} t/s at {self.n_ctx} tokens" if self.n_ctx else ""
        return f"generation {self.generation.text()}{full}; prompt {self.prompt.text()} [{self.speed_class.value}]"

    def as_json(self) -> dict[str, object]:
        def band(b: SpeedBand) -> dict[str, float]:
            return {"tps": round(b.tps, 2), "low": round(b.low, 2), "high": round(b.high, 2)}

        return {
            "generation": band(self.generation),
            "generation_at_context": band(self.generation_full),
            "prompt": band(self.prompt),
            "class": self.speed_class.value,
            "n_ctx": self.n_ctx,
            "devices": [{"name": d.name, "read_bytes_per_token": int(d.read_bytes)} for d in self.devices],
            "assumptions": list(self.assumptions),
        }


def speed_class(work: ModelWork) -> SpeedClass:
    """Which published-result class a placement belongs to (the band shown with it is that class's)."""
    gpus_with_weights = [w for w in work.gpus if w.dense_bytes + w.expert_bytes > 0]
    if not work.gpus:
        return SpeedClass.CPU
    h = work.host
    if h.n_layers > 0:
        return SpeedClass.PARTIAL
    if h.expert_bytes > 0:
        return SpeedClass.EXPERTS
    if len(gpus_with_weights) > 1:
        return SpeedClass.MULTI
    return SpeedClass.FULL


def _band(tps: float, q: float) -> SpeedBand:
    return SpeedBand(tps, tps * math.exp(-q), tps * math.exp(q))


def plan_speed(
    profile: ModelProfile,
    machine: Machine,
    settings: LaunchSettings,
    *,
    host_bandwidth: float | None = None,
    figures: MachineFigures | None = None,
    calibration: Calibration | None = None,
) -> PlanSpeed:
    """Expected generation and prompt t/s of `profile` launched with `settings` on `machine`.

    `settings` is a plan's (`Plan.settings`) or any estimate's: the placement is the estimator's own
    (`place_weights`), the context `settings.n_ctx` (0: the model's training length) and the batch `n_ubatch`.
    `host_bandwidth` (bytes/s) overrides the host RAM's assumed bandwidth. A speed floor ("at least 20 t/s") is
    `plan_speed(...).generation.tps >= 20`; the band's `low` is the cautious reading."""
    work = model_work(profile, settings, machine)
    figs_all = figures if figures is not None else machine_figures(machine, host_bandwidth)
    positions = active_gpu_positions(settings, machine)
    figs = MachineFigures(tuple(figs_all.gpus[i] for i in positions), figs_all.host, figs_all.assumptions)
    backends = tuple(backend_of(machine.gpus[i].vendor) for i in positions)
    cal = calibration if calibration is not None else load_calibration()
    n_ctx = settings.n_ctx or profile.n_ctx_train
    start = predict(
        work,
        figs,
        backends,
        cal,
        depth=0,
        n_prompt=PROMPT_TOKENS,
        n_ubatch=settings.n_ubatch,
        n_batch=settings.n_batch,
    )
    full = predict(
        work,
        figs,
        backends,
        cal,
        depth=n_ctx,
        n_prompt=PROMPT_TOKENS,
        n_ubatch=settings.n_ubatch,
        n_batch=settings.n_batch,
    )
    cls = speed_class(work)
    notes = list(figs.assumptions)
    if settings.split_mode.value in ("row", "tensor") and len(positions) > 1:
        notes.append(f"-sm {settings.split_mode.value} is computed as layer split")
    if any(machine.gpus[i].vendor is Vendor.RPC for i in positions):
        notes.append("RPC devices are computed as local GPUs: the network between the hosts is not modelled")
    if any(b is not Backend.CUDA for b in backends):
        notes.append("non-CUDA backends have few published results: their band is wider")
    return PlanSpeed(
        generation=_band(start.generation_tps, cal.band(cls, "tg")),
        generation_full=_band(full.generation_tps, cal.band(cls, "tg")),
        prompt=_band(start.prompt_tps, cal.band(cls, "pp")),
        speed_class=cls,
        n_ctx=n_ctx,
        devices=start.devices,
        assumptions=tuple(notes),
    )
