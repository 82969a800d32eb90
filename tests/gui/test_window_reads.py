"""What a user reads and touches around the numbers: messages that stay, a wheel that scrolls, presets that come
back, nothing stale, the keyboard and the chart's labels (offscreen; the layout at each screen size is checked on a
real X display by test_screenshots.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QAbstractSlider, QAbstractSpinBox, QApplication, QComboBox, QScrollBar, QWidget

from fitplan.gui.configurations import MODELFILE_FILTER, PRESET_FILTER, SCRIPT_FILTER
from fitplan.gui.main_window import MainWindow
from fitplan.gui.panels.banner import MAX_HEIGHT

from .conftest import LLAMA, NO_GPU, ONE_GPU, make_window, wait_settled

pytestmark = [pytest.mark.gui]
ROOT = Path(__file__).resolve().parents[2]


def started(
    qtbot: Any, detection: Any, config: Path, model: Path | str | None = None, settle: bool = True
) -> MainWindow:
    w = make_window(qtbot, detection, config)
    assert isinstance(w, MainWindow)
    w.show()
    w.planner.start(str(model) if model else None)
    if settle:
        wait_settled(qtbot, w)
    return w


def rows_readable(window: MainWindow) -> bool:
    """Every message row of the list is as tall as its text needs, and the list shows them (or scrolls)."""
    banner = window.banner
    rows = banner._rows
    if not rows or not banner.isVisible():
        return False
    port = banner._scroll.viewport()
    whole = sum(r.height() for r in rows)
    for row in rows:
        label = row.label
        if label.height() < label.heightForWidth(label.width()):
            return False
    return port.height() >= min(MAX_HEIGHT, whole) - 4


# -- 1. messages stay --------------------------------------------------------------------------------------------------
def test_a_second_message_keeps_both_readable(qtbot: Any, private_config: Path) -> None:
    """No GPU (a note) and a file given on the command line that is not a GGUF (an error): both stay on screen, each
    as tall as its text (the list collapsed to 2 px, an empty window with no word of why)."""
    w = started(qtbot, NO_GPU, private_config, ROOT / "README.md", settle=False)
    qtbot.waitUntil(lambda: w.banner.has("open") and w.banner.has("hardware"), timeout=15000)
    qtbot.waitUntil(lambda: rows_readable(w), timeout=3000)
    assert w.banner.height() > 40  # it collapsed to 2 px
    for key in ("paste", "save", "draft"):
        w.banner.show_message("warning", f"a {key} message " + "that wraps to a second line " * 4, key=key)
    qtbot.waitUntil(lambda: rows_readable(w), timeout=3000)
    assert len(w.banner.messages()) == 5  # none dropped from view
    w.banner._rows[0].close_button.click()
    qtbot.waitUntil(lambda: len(w.banner.messages()) == 4 and rows_readable(w), timeout=3000)


# -- 4. the wheel scrolls ----------------------------------------------------------------------------------------------
def wheel(widget: QWidget, steps: int = -3) -> None:
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(
        centre,
        QPointF(widget.mapToGlobal(widget.rect().center())),
        QPoint(0, 0),
        QPoint(0, 120 * steps),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(widget, event)


def test_the_wheel_scrolls_the_settings_instead_of_changing_them(qtbot: Any, private_config: Path) -> None:
    w = started(qtbot, ONE_GPU, private_config, LLAMA)
    w.resize(1024, 640)
    wait_settled(qtbot, w)
    s = w.settings
    flash, ctx = s.flash.currentIndex(), s.context_box.value()
    bar = s.parentWidget()
    area = None
    while bar is not None and area is None:
        bar = bar.parentWidget()
        if bar is not None and hasattr(bar, "verticalScrollBar") and bar.verticalScrollBar().maximum() > 0:
            area = bar
    assert area is not None  # the settings column scrolls at 1024x640
    area.setFocus()
    before = area.verticalScrollBar().value()
    wheel(s.flash)
    wheel(s.context_box)
    wheel(s.context_slider)
    assert (s.flash.currentIndex(), s.context_box.value()) == (flash, ctx)
    assert area.verticalScrollBar().value() > before  # the column scrolled down
    # A focused control takes the wheel.
    s.slots.setFocus()
    qtbot.waitUntil(s.slots.hasFocus, timeout=2000)
    slots = s.slots.value()
    wheel(s.slots, 1)
    assert s.slots.value() == slots + 1


def test_no_value_control_takes_the_focus_from_the_wheel(qtbot: Any, window: MainWindow) -> None:
    controls = [
        c
        for c in window.findChildren(QWidget)
        if isinstance(c, (QAbstractSpinBox, QComboBox, QAbstractSlider)) and not isinstance(c, QScrollBar)
    ]
    assert len(controls) > 15
    assert [c for c in controls if c.focusPolicy() == Qt.FocusPolicy.WheelFocus] == []


# -- 5. presets round-trip ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("typed", "chosen", "saved"),
    [
        ("plan", PRESET_FILTER, "plan.ini"),
        ("plan", SCRIPT_FILTER, "plan.sh"),
        ("plan", MODELFILE_FILTER, "plan.modelfile"),
        ("plan.sh", PRESET_FILTER, "plan.sh"),  # the extension typed wins: no INI in a .sh
        ("plan.ini", SCRIPT_FILTER, "plan.ini"),
    ],
)
def test_a_saved_configuration_loads_back(
    qtbot: Any, window: MainWindow, tmp_path: Path, typed: str, chosen: str, saved: str
) -> None:
    window.settings.set_context(8192)
    wait_settled(qtbot, window)
    written = window.planner.configs.save_configuration(str(tmp_path / typed), chosen)
    assert written == str(tmp_path / saved) and sorted(p.name for p in tmp_path.iterdir()) == [saved]
    path = Path(written)
    text = path.read_text()
    if saved.endswith(".modelfile"):
        assert "num_ctx 8192" in text
        return
    assert text.startswith("[") == saved.endswith(".ini")  # an INI section, or a command line
    if saved.endswith(".sh"):
        assert text.startswith("#!/bin/sh\n") and os.access(path, os.X_OK)  # ./plan.sh runs
    window.settings.set_context(4096)
    wait_settled(qtbot, window)
    window.planner.configs.load_configuration(written)
    wait_settled(qtbot, window)
    assert window.settings.context_box.value() == 8192
    assert not window.banner.has("paste")


def test_a_preset_without_an_extension_loads_back(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    window.settings.set_context(8192)
    wait_settled(qtbot, window)
    written = window.planner.configs.save_configuration(str(tmp_path / "plan.ini"), PRESET_FILTER)
    bare = tmp_path / "plan"
    Path(written).rename(bare)  # saved by an older version, or renamed
    window.settings.set_context(4096)
    wait_settled(qtbot, window)
    window.planner.configs.load_configuration(str(bare))
    wait_settled(qtbot, window)
    assert window.settings.context_box.value() == 8192 and not window.banner.has("paste")


def test_kept_flags_left_out_of_a_preset_are_named(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    """As `fitplan command --preset` warns on stderr, the window says which kept flags the preset does not hold;
    the script keeps them."""
    window.planner.configs.paste_command(f"llama-server -m {LLAMA} -c 8192 --alias mine --jinja")
    wait_settled(qtbot, window)
    window.planner.configs.save_configuration(str(tmp_path / "plan.ini"), PRESET_FILTER)
    assert window.banner.has("save")
    said = next(m.text for m in window.banner.messages() if m.key == "save")
    assert "--alias mine" in said and "--jinja" in said and "not in the preset" in said
    assert "alias" not in (tmp_path / "plan.ini").read_text()
    window.planner.configs.save_configuration(str(tmp_path / "plan.sh"), SCRIPT_FILTER)
    assert "--alias mine" in (tmp_path / "plan.sh").read_text() and not window.banner.has("save")
