"""The planner window: a composition root that builds the panels, lays them out and wires them to the planner."""

from __future__ import annotations

import itertools
from pathlib import Path

from PySide6.QtCore import QByteArray, QEvent, Qt
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QGroupBox,
    QMainWindow,
    QScrollArea,
    QSplitter,
    QStatusBar,
    QVBoxLayout,
    QWidget,
)

from fitplan.core.base.devices import Machine
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.inputs.user_settings import UserSettings
from fitplan.gui.backend import Backend
from fitplan.gui.controller import Panels, Planner
from fitplan.gui.panels.banner import MessageBanner
from fitplan.gui.panels.chart import ChartPanel
from fitplan.gui.panels.command_box import MIN_LINES, CommandPanel
from fitplan.gui.panels.hardware import HardwarePanel
from fitplan.gui.panels.launch_controls import SettingsPanel
from fitplan.gui.panels.models import ModelsPanel
from fitplan.gui.panels.quants import QuantsDialog
from fitplan.gui.panels.summary import SummaryPanel
from fitplan.gui.panels.verdict import VerdictPanel

MIN_SIZE = (1024, 640)
DEFAULT_SIZE = (1280, 800)


def _group(title: str, widget: QWidget) -> QGroupBox:
    box = QGroupBox(title)
    layout = QVBoxLayout(box)
    layout.setContentsMargins(6, 6, 6, 6)
    layout.addWidget(widget)
    return box


def dropped_sources(urls: list[str], local_files: list[str]) -> list[str]:
    """What a drop opens: local .gguf files, and remote http(s) URLs ending in .gguf (order kept)."""
    out = [f for f in local_files if f.lower().endswith(".gguf")]
    out += [u for u in urls if u.startswith(("http://", "https://")) and ".gguf" in u.lower()]
    return out


class MainWindow(QMainWindow):
    def __init__(self, backend: Backend, user: UserSettings, config_dir: Path | None = None) -> None:
        super().__init__()
        self.setWindowTitle("fitplan — will this model fit?")
        self.setMinimumSize(*MIN_SIZE)
        self.resize(*DEFAULT_SIZE)
        self.setAcceptDrops(True)

        self.models = ModelsPanel()
        self.summary = SummaryPanel()
        self.hardware = HardwarePanel(backend.catalog())
        self.settings = SettingsPanel()
        self.chart = ChartPanel()
        self.verdict = VerdictPanel()
        self.command = CommandPanel()
        self.banner = MessageBanner()
        self.setStatusBar(QStatusBar())

        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(_group("Models", self.models))
        summary_scroll = QScrollArea()
        summary_scroll.setWidget(self.summary)
        summary_scroll.setWidgetResizable(True)
        summary_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        summary_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        left.addWidget(_group("Model", summary_scroll))
        left.setStretchFactor(0, 1)  # the model list takes what the summary does not need
        left.setStretchFactor(1, 0)
        left.setChildrenCollapsible(False)

        centre = QWidget()
        centre_layout = QVBoxLayout(centre)
        centre_layout.setContentsMargins(0, 0, 0, 0)
        centre_layout.addWidget(self.banner)
        centre_layout.addWidget(self.verdict)
        centre_layout.addWidget(_group("Memory by context", self.chart), 1)
        centre_layout.addWidget(_group("Command", self.command))
        self.command.set_visible_lines(MIN_LINES)

        right_inner = QWidget()
        right_layout = QVBoxLayout(right_inner)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(_group("Hardware", self.hardware))
        right_layout.addWidget(_group("Settings", self.settings))
        right_layout.addStretch(1)
        right = QScrollArea()
        right.setWidget(right_inner)
        right.setWidgetResizable(True)
        right.setFrameShape(QScrollArea.Shape.NoFrame)
        right.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # Wide enough for the controls of every engine (each shows its own rows).
        extra = max(0, self.settings.engine_rows_width() - self.settings.minimumSizeHint().width())
        right.setMinimumWidth(
            right_inner.minimumSizeHint().width() + extra + right.verticalScrollBar().sizeHint().width() + 4
        )

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("main-splitter")
        self.splitter.addWidget(left)
        self.splitter.addWidget(centre)
        self.splitter.addWidget(right)
        # Narrower windows take from the model list and the chart alike; the settings column keeps its width.
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setStretchFactor(2, 0)
        self.splitter.setSizes([410, 540, 330])
        left.setSizes([430, 330])  # the summary (about 11 rows) without scrolling at the default size
        self.splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.splitter)

        self.planner = Planner(
            backend,
            Panels(self.models, self.summary, self.hardware, self.settings, self.chart, self.verdict, self.command,
                   self.banner, self.statusBar()),
            user,
            config_dir,
            self,
        )
        self._build_menus()
        self._set_tab_order()
        for widget, name in (
            (self.verdict, "Verdict"), (self.chart.plot, "Memory by context chart"), (self.command.text, "Command"),
            (self.models.table, "Models"), (self.hardware.list, "Devices to plan for"), (self.banner, "Message"),
        ):
            widget.setAccessibleName(name)
        if user.window_geometry:
            self.restoreGeometry(QByteArray.fromBase64(user.window_geometry.encode()))
        if user.window_state:
            self.restoreState(QByteArray.fromBase64(user.window_state.encode()))

    def _build_menus(self) -> None:
        menu = self.menuBar().addMenu("&File")
        open_action = QAction("&Open model…", self, shortcut=QKeySequence(QKeySequence.StandardKey.Open))
        open_action.triggered.connect(self.models.ask_open_file)
        url_action = QAction("Open &URL…", self)
        url_action.triggered.connect(self.models.ask_open_url)
        folder_action = QAction("Add &folder…", self)
        folder_action.triggered.connect(self.models.ask_add_folder)
        quants_action = QAction("Compare &quants…", self)
        quants_action.triggered.connect(self.compare_quants)
        bin_action = QAction("Set llama.cpp &build folder…", self)
        bin_action.triggered.connect(self._ask_llama_dir)
        quit_action = QAction("&Quit", self, shortcut=QKeySequence(QKeySequence.StandardKey.Quit))
        quit_action.triggered.connect(self.close)
        for a in (open_action, url_action, folder_action, quants_action, bin_action, quit_action):
            menu.addAction(a)
        plan = self.menuBar().addMenu("&Plan")
        copy_action = QAction("&Copy command", self, shortcut=QKeySequence("Ctrl+Shift+C"))
        copy_action.triggered.connect(self.planner.copy_command)
        ctx_action = QAction("Focus &context", self, shortcut=QKeySequence("Ctrl+L"))
        ctx_action.triggered.connect(self.settings.focus_context)
        for a in (copy_action, ctx_action):
            plan.addAction(a)
            self.addAction(a)
        self.addAction(open_action)
        self.actions_by_name = {
            "open": open_action, "copy": copy_action, "context": ctx_action, "quants": quants_action,
        }  # fmt: skip

    def compare_quants(self, source: str = "") -> QuantsDialog:
        """The Compare quants dialog, for `source` (default: the folder of the open local model)."""
        model = self.planner.model
        if not source and model is not None and Path(model.source).is_file():
            source = str(Path(model.source).parent)

        def planning() -> tuple[LaunchSettings, Machine, int] | None:
            req = self.planner.current_request()
            return None if req is None else (req.settings, req.machine, req.margin_bytes)

        dialog = QuantsDialog(self.planner.backend, planning, source, self)
        dialog.open_requested.connect(self.planner.open)
        dialog.show()
        if source:
            dialog.start()
        return dialog

    def _set_tab_order(self) -> None:
        m, s, c = self.models, self.settings, self.command
        chain: list[QWidget] = [
            m.open_button, m.url_button, m.folder_button, m.recent_button, m.filter_box, m.table,
            s.engine, s.context_slider, s.context_box, s.ollama_auto, s.cache_k, s.cache_v, s.slots, s.unified,
            s.flash, s.mmproj, s.gpu_layers, s.cpu_moe, s.mla, s.amb, s.fmoe, s.rtr, s.tail_tokens, s.tail_type,
            s.overhead, s.margin, s.advanced,
            self.hardware.list, self.hardware.catalog, self.hardware.add_catalog, self.hardware.size_box,
            self.hardware.add_size, self.hardware.remove,
            self.chart.device_box, c.shell, c.copy_button, c.text,
        ]
        for a, b in itertools.pairwise(chain):
            self.setTabOrder(a, b)

    def _ask_llama_dir(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "llama.cpp build folder (with llama-server)")
        if folder:
            self.planner.set_llama_bin_dir(folder)

    # -- drag and drop -------------------------------------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if self._sources(event):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        sources = self._sources(event)
        if not sources:
            return
        event.acceptProposedAction()
        for source in sources:
            self.planner.open(source)

    @staticmethod
    def _sources(event: QDragEnterEvent | QDropEvent) -> list[str]:
        mime = event.mimeData()
        local = [u.toLocalFile() for u in mime.urls() if u.isLocalFile()]
        remote = [u.toString() for u in mime.urls() if not u.isLocalFile()]
        if not mime.hasUrls() and mime.hasText():
            remote = [line.strip() for line in mime.text().splitlines() if line.strip()]
        return dropped_sources(remote, local)

    # -- theme ---------------------------------------------------------------------------------------------------
    def changeEvent(self, event: QEvent) -> None:
        """Follow a switch of the system's light/dark theme while running."""
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.verdict.apply_theme()
            self.banner.apply_theme()
            self.chart.apply_theme()
        super().changeEvent(event)

    # -- lifetime ------------------------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        geometry = bytes(self.saveGeometry().toBase64().data()).decode()
        state = bytes(self.saveState().toBase64().data()).decode()
        self.planner.save(geometry, state)
        self.planner.shutdown()
        super().closeEvent(event)
