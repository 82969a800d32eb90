"""What a walk through the window at 1024x640 found: the verdict's "what would change it" rows of several lines
were cut (the centre column was sized for their one-line minimum, and the layout took the rest from the verdict),
a row wrapped inside "t/s", the row that drops the draft model could not be applied and the -nkvo row's "(14 full)"
did not say what was full."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QLabel

from fitplan.core.base.devices import GIB, Device, DeviceKind, Vendor, host_device
from fitplan.core.plan.alternatives import Alternative
from fitplan.gui.backend import Detection
from fitplan.gui.main_window import MainWindow
from fitplan.gui.panels.verdict import NO_BREAK, AlternativeRow

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


def _lines(row: QLabel, width: int) -> list[str]:
    doc = QTextDocument()
    doc.setDefaultFont(row.font())
    doc.setDocumentMargin(0)
    doc.setHtml(row.text())
    doc.setTextWidth(width)
    doc.size()  # laid out
    block, out = doc.begin(), []
    while block.isValid():
        layout, text = block.layout(), block.text()
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            out.append(text[line.textStart() : line.textStart() + line.textLength()].replace(NO_BREAK, ""))
        block = block.next()
    return out


def test_a_row_wraps_only_between_words(qtbot: Any) -> None:
    """At 1024x640 the -c row ended "~51 t/" with "s  (apply)" on the next line: "t/s", "->" and a flag's dashes
    never end a line; a path may still wrap at its slashes."""
    alt = Alternative(
        "-ctk q8_0 -ctv q8_0",
        "context 32,768 -> 131,072 (4 of 32 layers on CPU)",
        True,
        131072,
        "4 of 32 layers on CPU",
        28,
        51.0,
        1200.0,
    )
    row = AlternativeRow(alt)
    qtbot.addWidget(row)
    assert (
        row.plain
        == "-ctk q8_0 -ctv q8_0: context 32,768 -> 131,072 (4 of 32 layers on CPU), ~51 t/s  (apply)"
    )
    cut = {
        line.rstrip()[-12:]
        for width in range(60, 600)
        for line in _lines(row, width)[:-1]
        if line.rstrip().endswith(("t/", "-", "--"))
    }
    assert cut == set()
    assert "".join(_lines(row, 100)).replace("\xa0", " ") == row.plain


def test_the_next_card_is_an_8_gib_card(qtbot: Any, private_config: Path) -> None:
    """The 8B example on a 6 GiB card at 64K: the bigger card offered reads "an 8 GiB card", not "a 8 GiB card"."""
    six = Detection(
        (Device("RTX 2060", DeviceKind.GPU, 6 * GIB, 6 * GIB, Vendor.NVIDIA),),
        host_device(64 * GIB, 48 * GIB),
    )
    w: MainWindow = make_window(qtbot, six, private_config)  # type: ignore[assignment]
    w.show()
    w.planner.start(str(LLAMA))
    wait_settled(qtbot, w)
    w.settings.set_context(65536)
    wait_settled(qtbot, w)
    qtbot.waitUntil(lambda: bool(w.verdict.alternative_buttons), timeout=15000)
    cards = [r.plain for r in w.verdict.alternative_buttons if "GiB card" in r.change]
    assert cards and cards[0].startswith("an 8 GiB card: "), cards
    w.close()


def test_image_tokens_follow_the_projector_choice(qtbot: Any, private_config: Path) -> None:
    """With the projector "not loaded" the Image tokens control was still live; it greys, keeping its value."""
    w: MainWindow = make_window(qtbot, CARD_8, private_config)  # type: ignore[assignment]
    w.show()
    w.planner.start(str(GEMMA))
    wait_settled(qtbot, w)
    s = w.settings
    s.image_tokens.setValue(512)
    wait_settled(qtbot, w)
    assert s.image_tokens.isEnabled()
    s.mmproj.setCurrentIndex(s.mmproj.findData("none"))
    wait_settled(qtbot, w)
    label = s._form.labelForField(s.image_tokens)
    assert not s.image_tokens.isEnabled() and label is not None and not label.isEnabled()
    s.mmproj.setCurrentIndex(s.mmproj.findData("cpu"))
    wait_settled(qtbot, w)
    assert s.image_tokens.isEnabled() and s.image_tokens.value() == 512
    w.planner.open(str(LLAMA))  # no projector: greyed
    wait_settled(qtbot, w)
    assert not s.image_tokens.isEnabled()
    w.close()


def test_the_row_without_a_pin_applies(qtbot: Any, private_config: Path) -> None:
    """The 8B example with -ngl 33 on a 5.5 GiB card does not fit; "without -ngl" fits, and one click sets GPU
    layers back to auto (it was greyed, not applicable)."""
    card = Detection(
        (Device("RTX 2060", DeviceKind.GPU, int(5.5 * GIB), int(5.5 * GIB), Vendor.NVIDIA),),
        host_device(32 * GIB, 28 * GIB),
    )
    w: MainWindow = make_window(qtbot, card, private_config)  # type: ignore[assignment]
    w.show()
    w.planner.start(str(LLAMA))
    wait_settled(qtbot, w)
    w.settings.gpu_layers.setValue(33)
    out = wait_settled(qtbot, w)
    assert out.max_context == 0  # every layer on a 5.5 GiB card: no context fits
    qtbot.waitUntil(
        lambda: any(r.change == "without -ngl" for r in w.verdict.alternative_buttons), timeout=15000
    )
    row = next(r for r in w.verdict.alternative_buttons if r.change == "without -ngl")
    assert row.isEnabled() and row.plain.endswith("(apply)")
    row.click()
    out = wait_settled(qtbot, w)
    assert w.settings.gpu_layers.value() == -1 and w.settings.gpu_layers.is_auto()
    assert out.max_context > 0 and out.plan_settings is not None and 0 < out.plan_settings.n_gpu_layers < 33
    w.close()


def test_the_column_is_not_refitted_while_nothing_changes(qtbot: Any, private_config: Path) -> None:
    """Growing the column until no row is cut must settle: a refit that resized again from its first estimate
    posted a new layout request each time (a refit every few milliseconds, for as long as the window was open)."""
    from fitplan.gui.main_window import FitScrollArea

    w = _with_draft(qtbot, private_config, (1024, 640))
    qtbot.waitUntil(lambda: len(w.verdict.alternative_buttons) >= 3, timeout=15000)
    qtbot.wait(200)
    area = next(a for a in w.findChildren(FitScrollArea) if a.widget() is w.verdict.parentWidget())
    calls = []
    fit = area.fit_widget
    area.fit_widget = lambda: (calls.append(1), fit())[1]  # type: ignore[method-assign]
    area._refit.timeout.disconnect()
    area._refit.timeout.connect(area.fit_widget)
    qtbot.wait(500)
    assert calls == [] and _cut(w) == []
    w.close()


def test_host_ram_is_the_limit_in_plain_words(qtbot: Any, private_config: Path) -> None:
    """The plan on the CPU only: the verdict said "host RAM memory is the limit"."""
    w = _with_draft(qtbot, private_config, (1280, 800))
    verdict = w.verdict.label.text()
    assert "host RAM is the limit" in verdict and "RAM memory" not in verdict, verdict
    w.close()


def test_the_model_summary_is_whole_after_a_longer_one_at_the_same_width(qtbot: Any) -> None:
    """A sequence: a model whose summary is short, then, without a resize, one whose rows wrap to more lines (a
    new model, or the one a pasted command names). Each word-wrapped value gets the height its text needs in the
    narrow column; before, the scroll area kept the first model's height and cut the longer texts."""
    from PySide6.QtWidgets import QScrollArea

    from fitplan.gui.backend import LoadedModel
    from fitplan.gui.panels.summary import SummaryPanel
    from support.models import profile_at

    panel = SummaryPanel()
    area = QScrollArea()
    area.setWidget(panel)
    area.setWidgetResizable(True)
    area.resize(190, 300)
    qtbot.addWidget(area)
    area.show()
    short = profile_at(GEMMA)
    panel.set_model(LoadedModel(str(GEMMA), short))
    qtbot.wait(50)
    panel.set_model(LoadedModel(str(LLAMA), profile_at(LLAMA), mmproj_note="x " * 40))
    qtbot.wait(50)
    cut = [
        (name, label.height(), label.heightForWidth(label.width()))
        for name, label in panel.values.items()
        if label.height() < label.heightForWidth(label.width())
    ]
    assert not cut, cut
