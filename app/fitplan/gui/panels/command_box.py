"""Command: the launch command for the current plan, per shell, with a copy button.

llama.cpp, ik_llama.cpp and beellama.cpp get their llama-server line (each in its own flag spelling); ollama gets the
environment of its server, a Modelfile and the `ollama create` command.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication, QTextOption
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from fitplan.core.base.launch_settings import Engine
from fitplan.core.inputs.user_settings import SHELLS

SHELL_LABELS = {"sh": "bash / zsh", "powershell": "PowerShell", "cmd": "cmd.exe"}
MIN_LINES = 7  # the text is as tall as what it shows, within these bounds (the chart above takes the rest)
MAX_LINES = 12
SMALL_LINES = 3


class CommandPanel(QWidget):
    shell_changed = Signal(str)
    verify_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.compact = False  # a short window: the text keeps only SMALL_LINES
        self._lines = MIN_LINES
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        # A long path wraps (anywhere, it has no blanks) instead of running out of the box: nothing of the command
        # is hidden at any window size, and no horizontal scroll bar takes a line's height. Copy takes the text.
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.text.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setPlaceholderText("The llama-server command for the plan appears here.")
        self.text.setToolTip("The llama-server command line that launches this plan")
        self.shell = QComboBox()
        for key in SHELLS:
            self.shell.addItem(SHELL_LABELS[key], key)
        self.shell.setToolTip("Quote the command for this shell")
        self.shell.currentIndexChanged.connect(lambda _i: self.shell_changed.emit(self.current_shell()))
        self.copy_button = QPushButton("Copy command")
        self.copy_button.setToolTip("Copy the command to the clipboard (Ctrl+Shift+C)")
        self.copy_button.clicked.connect(self.copy)
        self.verify_button = QPushButton("Verify with llama.cpp")
        self.verify_button.setToolTip(
            "Run llama-fit-params from your llama.cpp build with these settings and compare"
        )
        self.verify_button.clicked.connect(self.verify_requested.emit)
        self.verify_button.setVisible(False)
        self.copied = QLabel("")
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        self.shell_label = QLabel("Shell:")
        row.addWidget(self.shell_label)
        row.addWidget(self.shell)
        row.addStretch(1)
        row.addWidget(self.copied)
        row.addWidget(self.verify_button)
        row.addWidget(self.copy_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.text)

    def set_visible_lines(self, lines: int) -> None:
        """Make the text `lines` lines tall; in a compact window SMALL_LINES, and it scrolls, so the chart above
        keeps its room."""
        self._lines = lines
        spacing = self.text.fontMetrics().lineSpacing()
        extra = 2 * self.text.frameWidth() + 8
        self.text.setFixedHeight(spacing * (SMALL_LINES if self.compact else lines) + extra)

    def set_compact(self, compact: bool) -> None:
        if compact != self.compact:
            self.compact = compact
            self.set_visible_lines(self._lines)

    def row_width(self) -> int:
        """The width the button row needs with every button shown (Verify appears once a build is set)."""
        widgets = (self.shell_label, self.shell, self.verify_button, self.copy_button)
        return sum(w.sizeHint().width() for w in widgets) + 6 * (len(widgets) + 1)

    def current_shell(self) -> str:
        return str(self.shell.currentData())

    def set_shell(self, shell: str) -> None:
        i = self.shell.findData(shell)
        if i >= 0:
            self.shell.setCurrentIndex(i)

    def set_command(self, text: str, engine: Engine = Engine.LLAMA_CPP) -> None:
        if text != self.text.toPlainText():  # a context drag mostly rewrites only -c: the same text stays put
            self.text.setPlainText(text)
        self.copied.setText("")
        self.set_visible_lines(min(MAX_LINES, max(MIN_LINES, self._shown_lines(text))))
        if engine is Engine.OLLAMA:
            self.text.setToolTip(
                "ollama: the server's environment variables (OLLAMA_*), the Modelfile (PARAMETER num_ctx, num_gpu) "
                "and the commands that create and run the model with them"
            )
        else:
            self.text.setToolTip(f"The llama-server command line ({engine.value}) that launches this plan")

    def _shown_lines(self, text: str) -> int:
        """How many lines the text takes in the box, a long line (a path) wrapped at the box's width."""
        advance = max(1, self.text.fontMetrics().horizontalAdvance("m"))
        per_line = max(20, (self.text.viewport().width() - 8) // advance)
        return sum(max(1, -(-len(line) // per_line)) for line in text.splitlines())

    def set_verify_available(self, available: bool) -> None:
        self.verify_button.setVisible(available)

    def copy(self) -> None:
        text = self.text.toPlainText()
        if text:
            QGuiApplication.clipboard().setText(text)
            self.copied.setText("Copied.")
