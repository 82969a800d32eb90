"""What a walk through the window at 1024x640 found: the verdict's "what would change it" rows of several lines
were cut (the centre column was sized for their one-line minimum, and the layout took the rest from the verdict),
and the row that drops the draft model could not be applied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QLabel

from fitplan.core.base.devices import GIB, Device, DeviceKind, Vendor, host_device
from fitplan.gui.backend import Detection
from fitplan.gui.main_window import MainWindow

from .conftest import GEMMA, LLAMA, make_window, wait_settled

pytestmark = [pytest.mark.gui]

#: An 8 GiB card: the 12B model with the 8B as its draft keeps layers on the CPU; -nkvo and dropping the draft
#: are offered, in rows of two and three lines at 1024x640.
CARD_8 = Detection(
    (Device("RTX 4060", DeviceKind.GPU, 8 * GIB, 8 * GIB, Vendor.NVIDIA),), host_device(32 * GIB, 28 * GIB)
)


def _with_draft(qtbot: Any, config: Path, size: tuple[int, int]) -> MainWindow:
    w: MainWindow = make_window(qtbot, CARD_8, config)  # type: ignore[assignment]
    w.resize(*size)
    w.show()
    w.planner.start(str(GEMMA))
    wait_settled(qtbot, w)
    w.settings.choose_draft(str(LLAMA))
    wait_settled(qtbot, w)
    return w


def _cut(w: MainWindow) -> list[str]:
    """The verdict panel's word-wrapped labels shorter than their text needs at their width."""
    return [
        f"{label.text()[:40]!r}: {label.height()} of {label.heightForWidth(label.width())} px"
        for label in w.verdict.findChildren(QLabel)
        if label.isVisible() and label.wordWrap() and label.height() < label.heightForWidth(label.width())
    ]


@pytest.mark.parametrize("size", [(1024, 640), (1280, 800)])
def test_rows_of_several_lines_are_whole(qtbot: Any, private_config: Path, size: tuple[int, int]) -> None:
    w = _with_draft(qtbot, private_config, size)
    qtbot.waitUntil(lambda: len(w.verdict.alternative_buttons) >= 3, timeout=15000)
    rows = w.verdict.alternative_buttons
    assert any(r.change == "-nkvo" for r in rows) and any("draft" in r.change for r in rows)
    assert max(r.heightForWidth(r.width()) for r in rows) > 2 * w.verdict.alternatives_title.height()
    qtbot.wait(50)  # the column's refit after the rows arrived
    assert _cut(w) == []
    w.close()


def test_the_row_without_the_draft_model_applies(qtbot: Any, private_config: Path) -> None:
    w = _with_draft(qtbot, private_config, (1280, 800))
    qtbot.waitUntil(lambda: any("draft" in r.change for r in w.verdict.alternative_buttons), timeout=15000)
    row = next(r for r in w.verdict.alternative_buttons if "draft" in r.change)
    assert row.isEnabled() and row.plain.endswith("(apply)")
    row.click()
    out = wait_settled(qtbot, w)
    assert w.settings.draft_path() == "" and w.settings.draft.currentText() == "none"
    assert out.estimate.settings.draft is None and "-md" not in w.command.text.toPlainText()
    assert not any("draft" in r.change for r in w.verdict.alternative_buttons)
    w.close()


def test_the_speed_with_the_cache_full_says_so(qtbot: Any, private_config: Path) -> None:
    """The -nkvo row's second speed is with the cache full (the host reads all of it per token), in those words."""
    w = _with_draft(qtbot, private_config, (1280, 800))
    qtbot.waitUntil(lambda: any(r.change == "-nkvo" for r in w.verdict.alternative_buttons), timeout=15000)
    row = next(r for r in w.verdict.alternative_buttons if r.change == "-nkvo")
    assert " with the cache full)" in row.plain and " full)" not in row.plain.replace(
        " with the cache full)", ""
    )
    w.close()
