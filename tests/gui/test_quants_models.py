"""Compare quants on a folder of unrelated models (issue 24, class 12): each model is ranked among its own quants under
its own heading, sizes are the models' (not the header-only files'), and the quant and type of each file are shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fitplan.core.inputs.model_source import forget_loaded
from fitplan.gui.main_window import MainWindow
from fitplan.gui.panels.quants import QuantsDialog

from .conftest import EXAMPLES

pytestmark = [
    pytest.mark.gui,
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),  # the offscreen platform, when a dialog is shown
]


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    forget_loaded()
    yield
    forget_loaded()


def _compare(qtbot: Any, window: MainWindow, source: str) -> QuantsDialog:
    dialog = window.compare_quants(source)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: bool(dialog.rows) or "error" in dialog.status.text(), timeout=30000)
    return dialog


def test_the_bundled_examples_are_four_models_not_four_quants(qtbot: Any, window: MainWindow) -> None:
    dialog = _compare(qtbot, window, str(EXAMPLES))
    rows = dialog.rows
    assert len(rows) == 4 and len({r.model for r in rows}) == 4
    assert all(r.recommended for r in rows)  # each model's one quant is its own recommendation
    # no 0.0 GiB: the size is the model's, as its header says (the files on disk are header-only copies)
    sizes = [dialog.table.item(t, 3).text() for t in range(dialog.table.rowCount()) if dialog.view_at(t)]
    assert "0.0 GiB" not in sizes and "4.6 GiB" in sizes
    # each model under its own heading; a heading is not a quant to open
    headings = [t for t in range(dialog.table.rowCount()) if dialog.view_at(t) is None]
    assert len(headings) == 4 and dialog.table.rowCount() == 8
    texts = [dialog.table.item(t, 0).text() for t in headings]
    assert any(t.startswith("Llama 3.1 8B Instruct (llama, 32 layers") for t in texts)
    # the quant cell names its file
    t = next(t for t in range(dialog.table.rowCount()) if (v := dialog.view_at(t)) and "Llama" in v.model)
    assert dialog.table.item(t, 1).toolTip() == "Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    dialog.table.selectRow(headings[0])
    assert not dialog.open_button.isEnabled()
    with qtbot.waitSignal(window.planner.model_loaded, timeout=15000) as opened:
        dialog.choose(t)
    assert Path(opened.args[0].source).name == "Llama-3.1-8B-Instruct-Q4_K_M.gguf"


def test_a_header_type_other_than_the_file_name_is_shown() -> None:
    from fitplan.core.gguf.reader import open_model
    from fitplan.core.model.builder import build_profile
    from fitplan.core.plan.ranking import quant_label

    prof = build_profile(
        open_model(str(EXAMPLES / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"), allow_incomplete=True)
    )
    assert quant_label("Q4_K_M", prof) == "Q4_K_M"
    assert quant_label("Q4_K_XL", prof) == "Q4_K_XL (Q4_K_M)"  # the file's name and what its header says
