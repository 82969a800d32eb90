"""The window's speed line: the current plan's `core.speed.plan_speed`, the CLI's numbers."""

from __future__ import annotations

from typing import Any

import pytest

from fitplan.core.speed import plan_speed
from fitplan.gui.main_window import MainWindow
from fitplan.gui.panels.speed import SpeedPanel, compact_text

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
    assert label.text() == compact_text(expected)
    assert "held-out" in label.toolTip()


def test_no_speed_hides_the_line(qtbot: Any) -> None:
    panel = SpeedPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.set_speed(None)
    assert not panel.isVisible() and panel.text() == ""
