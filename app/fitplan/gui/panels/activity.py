"""What the window is waiting for (a header read over the network, llama-fit-params), with a Cancel button.

It sits in the status bar as a permanent widget, so the status messages of other jobs never hide it.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QWidget

MAX_CHARS = 70  # a long URL is cut in the middle; the whole text is in the tooltip


def _middle_cut(text: str, n: int = MAX_CHARS) -> str:
    return text if len(text) <= n else text[: n // 2 - 1] + "…" + text[-(n // 2) :]


class ActivityPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = QLabel("")
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop waiting for this")
        self.cancel_button.clicked.connect(self._cancel)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label)
        layout.addWidget(self.cancel_button)
        self._on_cancel: Callable[[], None] | None = None
        self.setVisible(False)

    def start(self, text: str, on_cancel: Callable[[], None] | None) -> None:
        """Show `text` until `stop()`; with `on_cancel`, a Cancel button calls it."""
        self.label.setText(_middle_cut(text))
        self.label.setToolTip(text)
        self._on_cancel = on_cancel
        self.cancel_button.setVisible(on_cancel is not None)
        self.setVisible(True)

    def stop(self) -> None:
        self._on_cancel = None
        self.label.setText("")
        self.setVisible(False)

    def text(self) -> str:
        return self.label.toolTip() if self.isVisible() else ""

    def _cancel(self) -> None:
        if self._on_cancel is not None:
            self._on_cancel()
