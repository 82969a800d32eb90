"""What the window benches check: an answer the window showed is the one `Backend.plan` gives for its request."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fitplan.core.base.devices import Machine
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.gui.backend import Backend, LoadedModel, PlanOutcome, PlanRequest


def same_outcome(a: PlanOutcome, b: PlanOutcome) -> str:
    """'' when `a` and `b` are the same answer, else what differs."""
    if (a.curve is None) != (b.curve is None):
        return "one has a curve, the other not"
    if a.curve is not None and b.curve is not None:
        if a.curve.devices != b.curve.devices or not np.array_equal(a.curve.contexts, b.curve.contexts):
            return "curve devices or contexts"
        if not np.array_equal(a.curve.bytes, b.curve.bytes):
            return "curve bytes"
    for name in (
        "estimate",
        "verdict",
        "max_context",
        "args",
        "plan_settings",
        "notes",
        "ollama",
        "alternatives",
    ):
        if getattr(a, name) != getattr(b, name):
            return name
    return "" if replace(a, curve=None) == replace(b, curve=None) else "outcome"


def against_reference(
    outcome: PlanOutcome, model: LoadedModel, settings: LaunchSettings, machine: Machine, margin_bytes: int
) -> str:
    """`outcome` (shown by the window) against `Backend.plan` of the same request computed in this process."""
    settings = replace(settings, n_ctx=outcome.estimate.settings.n_ctx)
    reference = Backend().plan(PlanRequest(outcome.request_id, model, settings, machine, margin_bytes))
    return same_outcome(outcome, reference)
