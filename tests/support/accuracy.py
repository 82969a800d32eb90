"""The error band tools/accuracy_report.py measures for one architecture and configuration class: its own
comparison of the estimate with each llama.cpp recording, independent of the data file the application reads."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from support.tools import load_tool


@dataclass(frozen=True, slots=True)
class RecordedBand:
    cases: int
    compute_min_pct: float  # as shown: one decimal
    compute_max_pct: float

    @property
    def range_text(self) -> str:
        return f"{self.compute_min_pct:+.1f}%..{self.compute_max_pct:+.1f}%"


@functools.cache
def _measured(architecture: str, backend: str = "cpu") -> tuple[Any, ...]:
    """The report's results for every recording of one architecture (the models of other architectures are not
    estimated)."""
    report = load_tool("tools/accuracy_report.py")
    out = []
    for path in report.fixture_files():
        data = json.loads(path.read_text())
        model = data["model"]
        header = (
            report.FIXTURES / model["header"]
            if model.get("header")
            else report._header_for(str(model["path_hint"]))
        )
        if report.load_profile(header).architecture != architecture:
            continue
        for case in data["cases"]:
            r = report.run_case(path.parent.name, str(model["name"]), header, case)
            if r.devices and not r.error and r.backend == backend:  # "cpu", or "cuda": the stand-ins
                out.append(r)
    return tuple(out)


def recorded_band(architecture: str, class_key: str, backend: str = "cpu") -> RecordedBand:
    """The band the report measures on the recordings of `architecture` in the class `class_key`, on the CPU
    recordings or ("cuda") the GPU stand-ins'."""
    rs = [r for r in _measured(architecture, backend) if r.config is not None and r.config.key == class_key]
    assert rs, f"no recording of {architecture} in {class_key}"
    lo = min(r.compute_rel for r in rs)
    hi = max(r.compute_rel for r in rs)
    return RecordedBand(len(rs), round(lo * 100, 1), round(hi * 100, 1))
