"""The window's speed line: the current plan's `core.speed.plan_speed`, the CLI's numbers."""

from __future__ import annotations

from typing import Any

import pytest

from fitplan.core.speed import plan_speed
from fitplan.gui.main_window import MainWindow
from fitplan.gui.panels.speed import SpeedPanel, compact_text, wordings

pytestmark = [pytest.mark.gui]


def test_the_window_shows_the_plans_speed(qtbot: Any, window: MainWindow) -> None:
    label = window.speed
    assert label.isVisible()
    outcome = window.planner.outcome
    assert outcome is not None and outcome.speed is not None
    model = window.planner.model
    assert model is not None
    expected = plan_speed(
        model.profile, window.hardware.machine(), outcome.plan_settings or outcome.estimate.settings
    )
    assert label.text() in wordings(expected)
    assert expected.summary() in label.toolTip() and "held-out" in label.toolTip()


def test_the_line_takes_the_longest_wording_the_room_beside_the_tabs_holds(
    qtbot: Any, window: MainWindow
) -> None:
    """Beside the chart's tabs the line shortens with the room (a row of its own pushed the command below the fold
    at 1024x640): the whole line where it fits, the generation rate alone where little room is left."""
    outcome = window.planner.outcome
    assert outcome is not None and outcome.speed is not None
    panel, words = window.speed, wordings(outcome.speed)
    panel.fit_room(10_000)
    assert panel.text() == words[0] == compact_text(outcome.speed)
    panel.fit_room(panel.fontMetrics().horizontalAdvance(words[2]) + 12)
    assert panel.text() == words[2]
    panel.fit_room(5)
    assert panel.text() == words[-1]
    assert panel.minimumSizeHint().width() == 0  # the column's minimum never grows with the line


def test_no_speed_hides_the_line(qtbot: Any) -> None:
    panel = SpeedPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.set_speed(None)
    assert not panel.isVisible() and panel.text() == ""
