"""The one place messages are shown: a list of messages above the chart (errors, warnings, notes), newest first.

Each message has a key saying what it is about ("settings", "hardware", "model", "estimate", "job"...): a new message
with the same key replaces the old one, and `clear(key)` removes it when what it was about is gone (another model
opened, the estimate works again). Several messages stay readable at once; each can be dismissed. All text is shown
as plain text: it often quotes a model's header or a file name.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QScrollArea, QToolButton, QVBoxLayout, QWidget

from fitplan.gui.theme import is_dark

LEVEL_COLOURS = {  # (light, dark) backgrounds
    "error": ("#f7d3cc", "#5c2620"),
    "warning": ("#fbe8c8", "#5a4318"),
    "info": ("#d6e6f5", "#1e3a57"),
}
SEVERITY = {"error": 3, "warning": 2, "info": 1}
MAX_HISTORY = 100
MAX_HEIGHT = 132  # more messages than fit scroll (none is dropped), so the chart below keeps its room


@dataclass(frozen=True, slots=True)
class Message:
    key: str
    level: str
    text: str


class _MessageRow(QFrame):
    dismissed = Signal(str)

    def __init__(self, message: Message, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message = message
        self.setObjectName("message")
        self.label = QLabel(message.text)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        close = QToolButton()
        close.setText("✕")
        close.setToolTip("Dismiss this message")
        close.setAutoRaise(True)
        close.clicked.connect(lambda: self.dismissed.emit(message.key))
        self.close_button = close
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 2, 2, 2)
        layout.addWidget(self.label, 1)
        layout.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.apply_theme()

    def apply_theme(self) -> None:
        light, dark = LEVEL_COLOURS.get(self.message.level, LEVEL_COLOURS["info"])
        self.setStyleSheet(
            f"QFrame#message {{ background: {dark if is_dark() else light}; border-radius: 4px; }}"
        )


class MessageBanner(QFrame):
    """The message list. `level` is the most severe level shown ("" when empty)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self._messages: list[Message] = []  # newest first
        self._rows: list[_MessageRow] = []
        self.history: list[Message] = []
        inner = QWidget()
        self._inner = inner
        self._layout = QVBoxLayout(inner)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(2)
        self._scroll = QScrollArea()
        self._scroll.setWidget(inner)
        self._scroll.setWidgetResizable(True)
        self._scroll.setFrameShape(QFrame.Shape.NoFrame)
        self._scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 2)
        outer.addWidget(self._scroll)
        self.setVisible(False)

    # -- the list ------------------------------------------------------------------------------------------------
    def show_message(self, level: str, text: str, key: str = "") -> None:
        """Show `text`; it replaces the message with the same `key` (each message without a key is its own)."""
        key = key or f"note-{len(self.history)}"
        message = Message(key, level, text)
        self._messages = [message, *(m for m in self._messages if m.key != key)][:MAX_HISTORY]
        self.history = [message, *self.history][:MAX_HISTORY]
        self._rebuild()

    def clear(self, *keys: str) -> None:
        """Remove the messages with these keys (all messages when none is given)."""
        kept = [m for m in self._messages if keys and m.key not in keys]
        if len(kept) != len(self._messages):
            self._messages = kept
            self._rebuild()

    def hide(self) -> None:
        """Dismiss every message."""
        self.clear()

    def messages(self) -> list[Message]:
        return list(self._messages)

    def has(self, key: str) -> bool:
        return any(m.key == key for m in self._messages)

    @property
    def level(self) -> str:
        if not self._messages:
            return ""
        return max(self._messages, key=lambda m: SEVERITY.get(m.level, 0)).level

    def text(self) -> str:
        """Every message shown, newest first, one per line."""
        return "\n".join(m.text for m in self._messages)

    def _rebuild(self) -> None:
        for row in self._rows:
            self._layout.removeWidget(row)
            row.hide()  # at once: it is deleted only when the event loop comes round
            row.deleteLater()
        self._rows = []
        for message in self._messages:
            row = _MessageRow(message, self._inner)
            row.dismissed.connect(self.clear)
            self._layout.addWidget(row)
            # Shown now: a row added to a visible widget is shown only later, and a layout leaves hidden rows out
            # of its height (the list then collapsed to nothing when a second message came).
            row.setVisible(True)
            self._rows.append(row)
        self.setVisible(bool(self._messages))
        self._fit_height()

    def _fit_height(self) -> None:
        """As tall as the messages need at the width they have (word-wrapped), up to MAX_HEIGHT, then scrolling."""
        width = self._scroll.viewport().width() if self.isVisible() and self.width() > 0 else 0
        layout = self._layout
        if width > 0 and layout.hasHeightForWidth():
            need = layout.totalHeightForWidth(width)
        else:
            need = layout.totalSizeHint().height()
        height = min(MAX_HEIGHT, need) if self._messages else 0
        if self._scroll.height() != height or self._scroll.minimumHeight() != height:
            self._scroll.setFixedHeight(height)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_height()  # a narrower list wraps its messages to more lines

    def apply_theme(self) -> None:
        for row in self._rows:
            row.apply_theme()
