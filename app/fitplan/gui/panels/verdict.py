"""Verdict: one sentence and a colour."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from fitplan.gui.backend import Verdict, VerdictLevel
from fitplan.gui.theme import verdict_colour

EMPTY_TEXT = "Drop a .gguf here or pick one from your models to see whether it fits."
ERROR_LEVEL = "error"


class VerdictPanel(QFrame):
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
        layout = QVBoxLayout(self)
        layout.addWidget(self.label)
        layout.addWidget(self.detail)
        self.level = ""

    def set_verdict(self, verdict: Verdict, detail: str = "") -> None:
        self.level = verdict.level
        self.label.setText(verdict.text)
        self.detail.setText(detail)
        self.detail.setVisible(bool(detail))
        self.apply_theme()

    def set_error(self, text: str) -> None:
        """No verdict: the settings cannot be estimated (the previous verdict must not stay on screen)."""
        self.level = ERROR_LEVEL
        self.label.setText(text)
        self.detail.setVisible(False)
        self.setToolTip("")
        self.apply_theme()

    def apply_theme(self) -> None:
        """Colour for the current level in the current (light or dark) palette."""
        if not self.level:
            return
        colour = verdict_colour(VerdictLevel.NO_FIT if self.level == ERROR_LEVEL else self.level).name()
        self.setStyleSheet(f"QFrame#verdict {{ background: {colour}; border-radius: 6px; }}")
