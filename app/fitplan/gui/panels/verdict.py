"""Verdict: one sentence and a colour."""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from fitplan.gui.backend import Verdict
from fitplan.gui.theme import verdict_colour


class VerdictPanel(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("verdict")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.label = QLabel("Open a model to see whether it fits.")
        self.label.setWordWrap(True)
        font = self.label.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        font.setBold(True)
        self.label.setFont(font)
        self.detail = QLabel("")
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

    def apply_theme(self) -> None:
        """Colour for the current level in the current (light or dark) palette."""
        if not self.level:
            return
        colour = verdict_colour(self.level).name()
        self.setStyleSheet(f"QFrame#verdict {{ background: {colour}; border-radius: 6px; }}")
