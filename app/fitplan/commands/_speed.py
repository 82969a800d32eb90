"""Expected tokens per second, as `plan`, `estimate` and `quants` print it (`fitplan.core.speed.plan_speed`)."""

from __future__ import annotations

import argparse

from fitplan.core.base.devices import Machine
from fitplan.core.base.errors import FitplanError
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.base.numbers import real_or_none
from fitplan.core.model.profile import ModelProfile
from fitplan.core.speed import PlanSpeed, plan_speed

#: The fastest host RAM a number may say (GB/s): a bound on typos, above any machine's.
MAX_HOST_BANDWIDTH_GBS = 100000.0


def host_bandwidth_gbs(text: str) -> float:
    """`--host-bandwidth GB/s`: a positive number."""
    x = real_or_none(text.strip(), 0.0, MAX_HOST_BANDWIDTH_GBS)
    if x is None or x <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a bandwidth in GB/s (e.g. 89.6)")
    return x


#: The fastest generation a floor may ask for (t/s): a bound on typos.
MAX_TPS_FLOOR = 100000.0


def tps_floor(text: str) -> float:
    """`--min-tps T/S`: a positive number of generated tokens per second."""
    x = real_or_none(text.strip(), 0.0, MAX_TPS_FLOOR)
    if x is None or x <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of tokens per second (e.g. 20)")
    return x


def add_speed_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host-bandwidth",
        type=host_bandwidth_gbs,
        metavar="GB/s",
        help="host RAM bandwidth for the speed estimate (default: the memory modules' speed where readable, "
        "else a stated default for the platform)",
    )


def speed_of(
    profile: ModelProfile, machine: Machine, settings: LaunchSettings, args: argparse.Namespace
) -> PlanSpeed | None:
    """The plan's expected speed, None when it cannot be computed (said on the line instead)."""
    gbs = getattr(args, "host_bandwidth", None)
    try:
        return plan_speed(profile, machine, settings, host_bandwidth=gbs * 1e9 if gbs else None)
    except (FitplanError, ValueError, KeyError):
        return None


def speed_text(ps: PlanSpeed | None) -> str:
    """ "speed: generation 45 t/s (38-53), ...; prompt ... [class]" plus the assumptions on one line."""
    if ps is None:
        return "speed: not estimated for these settings"
    line = f"speed: {ps.summary()}"
    if ps.assumptions:
        line += "\n  assumed: " + "; ".join(ps.assumptions)
    return line


def speed_json(ps: PlanSpeed | None) -> dict[str, object] | None:
    return ps.as_json() if ps is not None else None
