"""The one place messages are shown: a banner above the chart (errors, warnings) mirrored in the status bar."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QWidget

from fitplan.gui.theme import is_dark

LEVEL_COLOURS = {  # (light, dark) backgrounds
    "error": ("#f7d3cc", "#5c2620"),
    "warning": ("#fbe8c8", "#5a4318"),
    "info": ("#d6e6f5", "#1e3a57"),
}


class MessageBanner(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self.label = QLabel("")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.close_button = QToolButton()
        self.close_button.setText("✕")
        self.close_button.setToolTip("Dismiss this message")
        self.close_button.setAutoRaise(True)
        self.close_button.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        self.level = ""
        self.hide()

    def show_message(self, level: str, text: str) -> None:
        self.level = level
        self.apply_theme()
        self.label.setText(text)
        self.show()

    def apply_theme(self) -> None:
        light, dark = LEVEL_COLOURS.get(self.level, LEVEL_COLOURS["info"])
        self.setStyleSheet(f"QFrame#banner {{ background: {dark if is_dark() else light}; border-radius: 4px; }}")

    def text(self) -> str:
        return self.label.text() if self.isVisible() else ""
