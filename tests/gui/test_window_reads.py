"""What a user reads and touches around the numbers: messages that stay, a wheel that scrolls, presets that come
back, nothing stale, the keyboard and the chart's labels (offscreen; the layout at each screen size is checked on a
real X display by test_screenshots.py)."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QLabel,
    QLineEdit,
    QScrollBar,
    QWidget,
)

from fitplan.core.base.units import fmt_ctx
from fitplan.gui.main_window import MainWindow
from fitplan.gui.panels.banner import MAX_HEIGHT
from fitplan.gui.panels.launch_controls import CONTEXT_GRID

from .conftest import GEMMA, LLAMA, NO_GPU, ONE_GPU, make_window, wait_settled

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
    wheel(w.centre_tabs.tabBar())
    assert (s.flash.currentIndex(), s.context_box.value()) == (flash, ctx)
    assert w.centre_tabs.currentIndex() == 0  # still the chart, not the launch tab
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
PRESET_FILTER = "llama-server preset (*.ini)"  # the save dialog's filters, as the user picks them
SCRIPT_FILTER = "Shell script (*.sh *.ps1 *.bat)"
MODELFILE_FILTER = "ollama Modelfile (Modelfile *.modelfile)"


def test_the_save_dialog_offers_these_filters() -> None:
    from fitplan.gui.configurations import SAVE_FILTERS, default_suffix

    assert SAVE_FILTERS.split(";;") == [PRESET_FILTER, SCRIPT_FILTER, MODELFILE_FILTER]
    # the dialog adds them itself (and so asks before replacing that file); a Modelfile keeps ollama's bare name
    assert [default_suffix(f, "powershell") for f in (PRESET_FILTER, SCRIPT_FILTER, MODELFILE_FILTER)] == [
        "ini",
        "ps1",
        "",
    ]


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


# -- 11. the chart reads cleanly ---------------------------------------------------------------------------------------
def test_a_drag_of_the_context_slider_lands_on_steps_a_user_can_hit(qtbot: Any, window: MainWindow) -> None:
    """Every position of the handle gives a context of the grid (..., 16K, 24K, 32K, 48K, ...): a drag of a few
    pixels moves one step, not from 32K to millions."""
    slider = window.settings.context_slider
    seen = set()
    for position in range(slider.minimum(), slider.maximum() + 1, 7):
        slider.setSliderPosition(position)
        n = window.settings.context_box.value()
        assert n in CONTEXT_GRID or n == window.settings.context_box.maximum()
        seen.add(n)
    assert {8192, 12288, 16384, 24576, 32768, 49152, 65536} <= seen


def test_the_dragged_context_line_says_what_the_field_says(qtbot: Any, window: MainWindow) -> None:
    line = window.chart.context_line
    line.setValue(math.log2(65156))  # a drag stops between two multiples of 256
    assert window.settings.context_box.value() == 65280
    assert line.label.format == fmt_ctx(65280)  # it said 65,156


def test_the_hover_readout_follows_a_change_of_setting(qtbot: Any, window: MainWindow) -> None:
    out = window.planner.outcome
    x = float(np.log2(out.curve.contexts[len(out.curve.contexts) // 2]))
    scene = window.chart.plot.getPlotItem().getViewBox().mapViewToScene(QPointF(x, 1.0))
    window.chart._hover(scene)
    before = window.chart.readout.text()
    assert before.startswith("At ")
    window.settings.cache_k.setCurrentText("q8_0")
    window.settings.cache_v.setCurrentText("q8_0")
    wait_settled(qtbot, window)
    after = window.chart.readout.text()
    assert after.startswith("At ") and after != before
    assert after == window.chart.readout_at(window.chart._hover_x)


def test_no_label_on_the_plot_but_the_context_line(window: MainWindow) -> None:
    """The largest context, the training length, the free memory and the margin are named beside the device box;
    the only label drawn on the plot is the chosen context's, above the free-memory line and the bands."""
    chart = window.chart
    labelled = [
        line
        for line in (chart.capacity, chart.margin_line, chart.max_line, chart.trained, chart.context_line)
        if getattr(line, "label", None) is not None
    ]
    assert labelled == [chart.context_line]
    marks = chart.marks_text()
    assert "fits up to" in marks and "free 22.0 GiB" in marks
    view = chart.plot.getPlotItem().getViewBox()
    top_of_bands = max(area.dataBounds(1)[1] or 0 for area in chart.areas.values() if area.isVisible())
    free_y = view.mapViewToScene(QPointF(0, chart.capacity.value())).y()
    bands_y = view.mapViewToScene(QPointF(0, top_of_bands)).y()
    label_bottom = chart.context_line.label.sceneBoundingRect().bottom()
    assert label_bottom <= min(free_y, bands_y) + 1  # drawn above the line and the bands


# -- 10. keyboard and screen readers -----------------------------------------------------------------------------------
def spoken_name(widget: QWidget) -> str:
    """The name a screen reader gives the control: its own accessible name, else the label that names it (a form
    row's label: Qt reports it as the control's label relation; a combo box's own name is its value on Linux)."""
    if widget.accessibleName():
        return widget.accessibleName()
    window = widget.window()
    for label in window.findChildren(QLabel):
        if label.buddy() is widget and label.text().strip():
            return label.text().replace("&", "")
    return ""


def test_every_control_has_a_name_that_is_not_its_value(window: MainWindow) -> None:
    s = window.settings
    window.settings.choose_draft(str(LLAMA))  # the draft rows shown
    controls = [
        c
        for c in window.findChildren(QWidget)
        if c.isVisibleTo(window)
        and isinstance(c, (QAbstractSpinBox, QComboBox, QAbstractSlider, QLineEdit, QAbstractButton))
        and not isinstance(c, QScrollBar)
        and not isinstance(c.parentWidget(), (QAbstractSpinBox, QComboBox))  # the editor inside one
        and c.focusPolicy() != Qt.FocusPolicy.NoFocus
    ]
    assert {s.slots, s.gpu_layers, s.context_slider, s.cache_k, s.draft_ngl, window.hardware.size_box} <= set(
        controls
    )
    unnamed = [
        f"{type(c).__name__}({c.toolTip()[:40]!r})"
        for c in controls
        if not (spoken_name(c) or (isinstance(c, QAbstractButton) and c.text().strip("…. ")))
    ]
    assert unnamed == []
    assert spoken_name(s.cache_k) != "f16" and spoken_name(s.cache_v) != "f16"


def test_tab_leaves_the_models_table_in_one_press(qtbot: Any, window: MainWindow) -> None:
    window.activateWindow()
    table = window.models.table
    table.setFocus()
    qtbot.waitUntil(table.hasFocus, timeout=2000)
    QTest.keyClick(table, Qt.Key.Key_Tab)
    assert QApplication.focusWidget() is window.settings.engine
    table.setFocus()
    QTest.keyClick(table, Qt.Key.Key_Down)  # the arrow keys still move between rows
    assert table.hasFocus()


# -- 7. nothing stale --------------------------------------------------------------------------------------------------
def test_a_plan_on_its_way_is_announced(qtbot: Any, window: MainWindow) -> None:
    verdict = window.verdict
    window.settings.set_context(16384)
    window.planner.request_estimate()
    window.planner._planning_sign.timeout.emit()  # the plan takes longer than PLANNING_SIGN_MS
    assert verdict.is_pending and verdict.pending.isVisible() and verdict.pending.text() == "Planning…"
    assert not verdict.label.isEnabled()  # the old verdict is greyed
    pending = verdict.pending.geometry()
    assert verdict.rect().contains(pending)  # in the frame's corner, on screen
    wait_settled(qtbot, window)
    assert not verdict.is_pending and not verdict.pending.isVisible() and verdict.label.isEnabled()


def test_the_list_highlight_follows_the_open_model(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    models = window.models
    assert models.selected_path() == str(LLAMA)
    models.filter_box.setText("qwen")  # the open model is filtered out: no other row looks open
    qtbot.waitUntil(lambda: models.selected_path() == "", timeout=2000)
    window.planner.open(str(GEMMA))
    wait_settled(qtbot, window)
    models.filter_box.setText("")
    qtbot.waitUntil(lambda: models.selected_path() == str(GEMMA), timeout=2000)
    # A row clicked that cannot be opened: the highlight goes back to the model still open.
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF")
    window.planner.open(str(broken))
    qtbot.waitUntil(lambda: window.banner.has("open"), timeout=15000)
    models.select(str(broken))  # as the click highlighted it
    window.planner.open(str(broken))
    qtbot.waitUntil(lambda: models.selected_path() == str(GEMMA), timeout=15000)


def test_a_model_file_deleted_while_open_is_no_longer_planned(
    qtbot: Any, private_config: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy.gguf"
    shutil.copy(LLAMA, copy)
    w = started(qtbot, ONE_GPU, private_config, copy)
    assert str(copy) in w.command.text.toPlainText()
    copy.unlink()
    qtbot.waitUntil(lambda: w.banner.has("model-gone"), timeout=5000)  # noticed without touching anything
    assert w.command.text.toPlainText() == "" and "gone" in w.verdict.label.text()
    assert w.server.plan_source() is None  # nothing to launch
    w.settings.set_context(8192)  # a change of setting plans nothing for it either
    wait_settled(qtbot, w)
    assert w.command.text.toPlainText() == "" and w.banner.has("model-gone")
    shutil.copy(LLAMA, copy)  # back where it was
    w.settings.set_context(4096)
    wait_settled(qtbot, w)
    assert not w.banner.has("model-gone") and str(copy) in w.command.text.toPlainText()
