"""The window's "Plan a set of models": the open model and others beside it (an embedding model, a reranker), one
budget per device, memory kept for other programs on the first GPU, and the router preset and llama-swap text."""

from __future__ import annotations

from typing import Any

import pytest

from fitplan.core.base.devices import GIB
from fitplan.core.plan.multi import Status
from fitplan.gui.main_window import MainWindow

from .conftest import GEMMA, LLAMA, QWEN_MOE

pytestmark = [
    pytest.mark.gui,
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),  # the offscreen platform, when a dialog is shown
]


def _open(qtbot: Any, window: MainWindow, path: str) -> None:
    with qtbot.waitSignal(window.planner.model_loaded, timeout=15000):
        window.planner.open(path)
    qtbot.waitUntil(window.planner.settled, timeout=15000)


def test_a_second_model_joins_the_open_one_with_one_budget(qtbot: Any, window: MainWindow) -> None:
    _open(qtbot, window, str(LLAMA))
    dialog = window.plan_model_set()
    qtbot.addWidget(dialog)
    assert [e.source for e in dialog.entries] == [str(LLAMA)]
    dialog.source.setText(str(GEMMA))
    dialog.role.setCurrentText("embedding")
    dialog.add_from_field()
    dialog.start()
    qtbot.waitUntil(lambda: dialog.outcome is not None or "rror" in dialog.status.text(), timeout=60000)
    p = dialog.outcome
    assert p is not None, dialog.status.text()
    assert len(p.models) == 2 and p.models[1].settings.embedding and not p.models[0].settings.embedding
    gpu = p.budgets[0]
    assert gpu.used_bytes == sum(b for _, b in gpu.resident) + (gpu.swap[1] if gpu.swap else 0)
    # the budget: a column per device, a row per resident model, then the swap slot, kept, may use and left
    assert dialog.budgets.columnCount() == 1 + len(p.budgets)
    heads = [dialog.budgets.item(r, 0).text() for r in range(dialog.budgets.rowCount())]
    assert heads[-3:] == ["kept (margin, held)", "may use", "left"]
    assert heads[: len(p.resident)] == [m.name for m in p.resident]
    assert dialog.models.item(1, 1).text() == "embedding"
    assert "[" in dialog.launch.toPlainText() and "groups:" in dialog.launch.toPlainText()


def test_memory_kept_for_other_programs_leaves_the_set_less(qtbot: Any, window: MainWindow) -> None:
    _open(qtbot, window, str(QWEN_MOE))
    dialog = window.plan_model_set()
    qtbot.addWidget(dialog)
    dialog.add(str(LLAMA), "reranking")
    dialog.start()
    qtbot.waitUntil(lambda: dialog.outcome is not None, timeout=60000)
    free = dialog.outcome
    assert free is not None
    assert [dialog.keep_on.itemText(i) for i in range(dialog.keep_on.count())] == [
        "GPU0 (RTX 4090)",
        "host RAM",
    ]
    dialog.keep.setValue(8.0)
    dialog.keep_name.setText("ComfyUI")
    dialog.outcome = None
    dialog.start()
    qtbot.waitUntil(lambda: dialog.outcome is not None, timeout=60000)
    kept = dialog.outcome
    assert kept is not None
    assert kept.budgets[0].kept_bytes == free.budgets[0].kept_bytes + 8 * GIB
    assert "8192 MiB of GPU0 for ComfyUI" in dialog.status.text()
    assert kept.key <= free.key and kept.models[1].status in (Status.RESIDENT, Status.SWAPPED)
