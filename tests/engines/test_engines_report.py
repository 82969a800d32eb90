"""tools/engines_report.py: every published fork number next to fitplan's, within the published precision."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from support.models import REPO
from support.tools import load_tool

ROOT = REPO


def _tool() -> ModuleType:
    return load_tool("tools/engines_report.py")


REPORT = _tool()
ROWS = REPORT.rows()


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}: {r[1]}" for r in ROWS])
def test_published_number_is_reproduced(row: Any) -> None:
    _source, what, published, fn, _path = row
    got = fn()
    pub = float(published.lstrip("~"))
    if "old arena" in what:
        # beellama's README ladder predates the current tail layout: its arena of roundup(N + ub, 256) rows and 2
        # stage groups ran "24-32 MiB high" (beellama's published records); today's layout gives 23.94 MiB less here. Only the
        # direction and the bound are asserted: the old arena is not modelled.
        assert 0 < pub - got <= 32
    elif published.startswith("~"):
        assert abs(got - pub) < 1.5  # "about 131" reported, the formula gives 130.0
    else:
        # published MiB are printed with 0 or 2 decimals: within the rounding of the last digit given
        decimals = len(published.partition(".")[2])
        assert abs(got - pub) < (1.0 if decimals == 0 else 0.01)


def test_report_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert REPORT.main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + len(ROWS) and lines[0].startswith("| source |")
