"""Verdict: one sentence and a colour."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from fitplan.gui.backend import Verdict, VerdictLevel
from fitplan.gui.theme import verdict_colour

if TYPE_CHECKING:
    from fitplan.core.estimate.accuracy import AccuracyBand
    from fitplan.core.plan.alternatives import Alternative

APPLY_SUFFIX = "  (apply)"
#: U+2060 WORD JOINER: no line break here (the text layout breaks after "/" and "-" inside a word: "~51 t/" over
#: "s", "-" over "ctv q8_0")
NO_BREAK = "\u2060"
EMPTY_TEXT = "Drop a .gguf here or pick one from your models to see whether it fits."
ERROR_LEVEL = "error"


class AlternativeRow(QLabel):
    """One "what would change it" row: its effect, word-wrapped to the panel's width, and for a change of flags an
    "(apply)" link that never wraps apart from itself (a button of one line was wider than the panel: its end,
    "(apply)", was cut to "(")."""

    applied = Signal(str)  # the alternative's flags

    def __init__(self, alternative: Alternative, parent: QWidget | None = None) -> None:
        from fitplan.core.plan.alternatives import DROP_DRAFT, UNPIN  # loaded with the plan that made the row

        self.change = alternative.change
        # a change of flags, dropping the draft model (no draft chosen) or a pin (its control back to auto); a
        # change of hardware is only shown
        self.applies = alternative.change.startswith(("-", DROP_DRAFT, UNPIN))
        self.plain = alternative.brief() + (APPLY_SUFFIX if self.applies else "")
        text = html.escape(unbroken_words(alternative.brief()))
        if self.applies:
            text += '&nbsp;&nbsp;<a href="apply">(apply)</a>'
        super().__init__(text, parent)
        self.setTextFormat(Qt.TextFormat.RichText)  # the alternative's words escaped; the link is ours
        self.setWordWrap(True)
        self.setEnabled(self.applies)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.LinksAccessibleByMouse | Qt.TextInteractionFlag.LinksAccessibleByKeyboard
        )
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus if self.applies else Qt.FocusPolicy.NoFocus)
        self.setAccessibleName(self.plain)
        speed = alternative.speed_words()
        self.setToolTip(
            (
                f"Apply {alternative.change} to the settings"
                if self.applies
                else "A change of hardware: shown, not applied"
            )
            + (f"\nExpected: {speed} (the speed model; docs/speed.md)" if speed else "")
        )
        self.linkActivated.connect(lambda _link: self.click())

    def click(self) -> None:
        """Apply the alternative's flags (what the link does)."""
        if self.applies:
            self.applied.emit(self.change)


def unbroken_words(text: str) -> str:
    """The text with no line break inside "t/s", "->" or a flag's leading dashes ("-ctk", "--objective"); a path
    still wraps at its slashes."""
    text = re.sub(r"(?<!\S)(-+)(?=\S)", lambda m: NO_BREAK.join(m.group(1)) + NO_BREAK, text)
    return text.replace("->", "-" + NO_BREAK + ">").replace("t/s", "t/" + NO_BREAK + "s")


class VerdictPanel(QFrame):
    #: the flags of an alternative the user chose to apply ("-ctk q8_0 -ctv q8_0")
    apply_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("verdict")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.label = QLabel(EMPTY_TEXT)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setWordWrap(True)
        font = self.label.font()
        font.setPointSizeF(font.pointSizeF() * 1.05)
        font.setBold(True)
        self.label.setFont(font)
        self.detail = QLabel("")
        self.detail.setTextFormat(Qt.TextFormat.PlainText)
        self.detail.setWordWrap(True)
        # The measured error band of the architecture and configuration class (`core.estimate.accuracy`).
        self.accuracy = QLabel("")
        self.accuracy.setObjectName("accuracy")
        self.accuracy.setTextFormat(Qt.TextFormat.PlainText)
        self.accuracy.setWordWrap(True)
        small = self.accuracy.font()
        small.setPointSizeF(small.pointSizeF() * 0.9)
        self.accuracy.setFont(small)
        self.accuracy.hide()
        layout = QVBoxLayout(self)
        # tighter than the default: the band's line takes no height the command row needs at the minimum size
        layout.setSpacing(3)
        layout.setContentsMargins(9, 6, 9, 6)
        layout.addWidget(self.label)
        layout.addWidget(self.detail)
        layout.addWidget(self.accuracy)
        self.alternatives_title = QLabel("What would change it:")
        self.alternatives_title.setTextFormat(Qt.TextFormat.PlainText)
        layout.addWidget(self.alternatives_title)
        self._alt_layout = QVBoxLayout()
        self._alt_layout.setSpacing(2)
        layout.addLayout(self._alt_layout)
        self.alternative_buttons: list[AlternativeRow] = []
        self.alternatives_title.hide()
        # "Planning…" in the top right corner while a new plan is coming: over the frame, taking no room of its own
        self.pending = QLabel("Planning…", self)
        self.pending.setObjectName("planning")
        self.pending.setTextFormat(Qt.TextFormat.PlainText)
        self.pending.setStyleSheet(
            "QLabel#planning { background: palette(window); color: palette(window-text); border-radius: 4px; "
            "padding: 1px 6px; font-style: italic; }"
        )
        self.pending.setAccessibleName("Planning")
        self.pending.hide()
        self.is_pending = False
        self.level = ""
        self._alternatives: tuple[Alternative, ...] = ()
        self._style = ""

    def set_verdict(self, verdict: Verdict, detail: str = "") -> None:
        self.level = verdict.level
        self.label.setText(verdict.text)
        self.detail.setText(detail)
        self.detail.setVisible(bool(detail))
        self.apply_theme()

    def set_pending(self, on: bool) -> None:
        """Show that the verdict on screen is the last plan's while the new one is computed (greyed, "Planning…")."""
        if on == self.is_pending:
            return
        self.is_pending = on
        self.label.setEnabled(not on)
        self.detail.setEnabled(not on)
        if on:
            self._place_pending()
            self.pending.raise_()
        self.pending.setVisible(on)

    def _place_pending(self) -> None:
        self.pending.adjustSize()
        self.pending.move(max(0, self.width() - self.pending.width() - 4), 3)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._place_pending()

    def set_accuracy(self, band: AccuracyBand | None) -> None:
        """How far the estimate was from llama.cpp on recorded configurations like this one."""
        self.accuracy.setText(band.text if band is not None else "")
        self.accuracy.setToolTip(band.tooltip if band is not None else "")
        self.accuracy.setVisible(band is not None)

    def set_alternatives(self, alternatives: Sequence[Alternative]) -> None:
        """One row per alternative, its effect as the estimator computed it; a flag change applies in one click,
        a hardware change (a bigger card, more RAM) is only shown."""
        if tuple(alternatives) == self._alternatives and len(self.alternative_buttons) == len(alternatives):
            return  # the same rows (a context drag rarely changes them): no widgets rebuilt
        self._alternatives = tuple(alternatives)
        for b in self.alternative_buttons:
            self._alt_layout.removeWidget(b)
            b.hide()
            b.deleteLater()
        self.alternative_buttons = []
        for alt in alternatives:
            row = AlternativeRow(alt)
            row.applied.connect(self.apply_requested)
            self._alt_layout.addWidget(row)
            self.alternative_buttons.append(row)
        self.alternatives_title.setVisible(bool(alternatives))

    def set_error(self, text: str) -> None:
        """No verdict: the settings cannot be estimated (the previous verdict must not stay on screen)."""
        self.level = ERROR_LEVEL
        self.label.setText(text)
        self.detail.setVisible(False)
        self.set_accuracy(None)
        self.set_alternatives(())
        self.setToolTip("")
        self.apply_theme()

    def apply_theme(self) -> None:
        """Colour for the current level in the current (light or dark) palette."""
        if not self.level:
            return
        colour = verdict_colour(VerdictLevel.NO_FIT if self.level == ERROR_LEVEL else self.level).name()
        style = f"QFrame#verdict {{ background: {colour}; border-radius: 6px; }}"
        if style != self._style:  # a new style sheet re-polishes the frame and its children
            self._style = style
            self.setStyleSheet(style)
