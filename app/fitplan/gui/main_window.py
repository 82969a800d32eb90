"""The planner window: a composition root that builds the panels, lays them out and wires them to the planner."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, QEvent, QObject, QSize, Qt, QTimer
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDragLeaveEvent,
    QDropEvent,
    QGuiApplication,
    QKeySequence,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QFileDialog,
    QGroupBox,
    QLabel,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QStatusBar,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from fitplan import LLAMA_CPP_BUILD, LLAMA_CPP_COMMIT, __version__
from fitplan.core.base.devices import Machine
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.inputs.user_settings import UserSettings
from fitplan.gui.backend import Backend
from fitplan.gui.configurations import PRESET_FILTER, SAVE_FILTERS, default_suffix
from fitplan.gui.controller import Panels, Planner
from fitplan.gui.panels.activity import ActivityPanel
from fitplan.gui.panels.banner import MessageBanner
from fitplan.gui.panels.chart import ChartPanel
from fitplan.gui.panels.command_box import MIN_LINES, CommandPanel
from fitplan.gui.panels.device_bars import DeviceBarsPanel
from fitplan.gui.panels.hardware import HardwarePanel
from fitplan.gui.panels.launch_controls import SettingsPanel
from fitplan.gui.panels.models import ModelsPanel
from fitplan.gui.panels.server import ServerPanel
from fitplan.gui.panels.speed import SpeedPanel
from fitplan.gui.panels.summary import SummaryPanel
from fitplan.gui.panels.verdict import VerdictPanel
from fitplan.gui.wheel import install_wheel_guard

if TYPE_CHECKING:
    from fitplan.core.launch.launcher import LaunchPlan
    from fitplan.gui.panels.model_set import ModelSetDialog
    from fitplan.gui.panels.quants import QuantsDialog

#: Small enough for a 1024x640 screen once its panels and the title bar took their share.
MIN_SIZE = (960, 540)
DEFAULT_SIZE = (1280, 800)
COMPACT_HEIGHT = 720  # below this window height the command box shrinks to three lines
TITLE = "fitplan — will this model fit?"
DROP_STYLE = "QMainWindow#fitplan-window { border: 3px dashed palette(highlight); }"


def fitted_size(wanted: QSize, available: QSize) -> QSize:
    """`wanted`, shrunk to fit `available` (the screen less its panels, with room for the window frame)."""
    frame = QSize(16, 40)
    return QSize(
        max(MIN_SIZE[0], min(wanted.width(), available.width() - frame.width())),
        max(MIN_SIZE[1], min(wanted.height(), available.height() - frame.height())),
    )


def _group(title: str, widget: QWidget) -> QGroupBox:
    box = QGroupBox(title)
    layout = QVBoxLayout(box)
    layout.setContentsMargins(6, 6, 6, 6)
    layout.addWidget(widget)
    return box


def dropped_folders(local_paths: list[str]) -> list[str]:
    """Dropped folders: each joins the library (scanned for models)."""
    return [p for p in local_paths if Path(p).is_dir()]


def looks_like_command(text: str) -> bool:
    """Dropped or pasted text that is a llama-server command line rather than paths or URLs."""
    t = text.strip()
    return "llama-server" in t or "llama-cli" in t or (t.startswith("-") and " " in t)


def dropped_sources(urls: list[str], local_files: list[str]) -> list[str]:
    """What a drop opens: local .gguf files, and remote http(s) URLs ending in .gguf (order kept)."""
    out = [f for f in local_files if f.lower().endswith(".gguf")]
    out += [u for u in urls if u.startswith(("http://", "https://")) and ".gguf" in u.lower()]
    return out


class FitScrollArea(QScrollArea):
    """Gives its widget the whole viewport, and only when the viewport is shorter than the widget's minimum a
    vertical scroll bar. (widgetResizable would grow a column with word-wrapped labels to its preferred height.)"""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidgetResizable(False)
        self._refit = QTimer(self)
        self._refit.setSingleShot(True)
        self._refit.setInterval(0)
        self._refit.timeout.connect(self.fit_widget)
        self._fitted: dict[tuple[int, int, int, int], QSize] = {}  # the last few sizes found, by estimate

    def minimumSizeHint(self) -> QSize:
        widget = self.widget()
        width = max(widget.minimumSizeHint().width(), widget.minimumWidth()) if widget is not None else 0
        return QSize(width + self.verticalScrollBar().sizeHint().width(), 120)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.fit_widget()

    def watch(self) -> None:
        """Refit whenever the widget's layout changes (a message shown, a legend that wraps to two lines)."""
        widget = self.widget()
        if widget is not None:
            widget.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest and not self._refit.isActive():
            self._refit.start()
        return False

    def fit_widget(self) -> None:
        widget = self.widget()
        if widget is None:
            return
        room = self.contentsRect().size()
        need = max(widget.minimumSizeHint().height(), widget.minimumHeight())
        # A word-wrapped label's minimum is one line; at the width it has it may need more.
        labels = self._wrapped_labels()
        for label in labels:
            need += max(
                0,
                label.heightForWidth(label.width())
                - max(label.minimumSizeHint().height(), label.minimumHeight()),
            )
        key = (room.width(), room.height(), need, len(labels))
        if key in self._fitted:
            widget.resize(self._fitted[key])  # the same content in the same room: the size found before
            return
        for _ in range(8):
            width = room.width() - (
                self.verticalScrollBar().sizeHint().width() if need > room.height() else 0
            )
            widget.resize(width, max(room.height(), need))
            # The estimate above misses what the layout takes from the labels when it is short (it shrinks the
            # tallest parts first, the chart's as much as the verdict's) and the lines a label gains when a scroll
            # bar narrows it: grow by what is still cut until nothing is.
            layout = widget.layout()
            if layout is not None:
                layout.activate()
            short = sum(
                max(0, label.heightForWidth(label.width()) - label.height())
                for label in self._wrapped_labels()
            )
            if short == 0:
                break
            need = widget.height() + short
        # Remembered: a refit with the same estimate (the layout request this resize posts) keeps this size
        # instead of starting again from the estimate (which re-posted a request: a refit every few milliseconds);
        # a few, for the estimates with and without the scroll bar's width taken.
        self._fitted = {k: v for k, v in list(self._fitted.items())[-3:]}
        self._fitted[key] = widget.size()

    def _wrapped_labels(self) -> list[QLabel]:
        widget = self.widget()
        if widget is None:
            return []
        return [
            label
            for label in widget.findChildren(QLabel)
            if label.wordWrap() and label.isVisible() and label.width() > 0
        ]


class MainWindow(QMainWindow):
    def __init__(self, backend: Backend, user: UserSettings, config_dir: Path | None = None) -> None:
        super().__init__()
        self.setObjectName("fitplan-window")
        self.setWindowTitle(TITLE)
        self.setMinimumSize(*MIN_SIZE)
        screen = QGuiApplication.primaryScreen()
        available = screen.availableSize() if screen is not None else QSize(*DEFAULT_SIZE)
        self.resize(fitted_size(QSize(*DEFAULT_SIZE), available))
        self.setAcceptDrops(True)
        self.drop_hint = QLabel("Drop to open: .gguf files, URLs, folders or a llama-server command")
        self.drop_hint.setObjectName("drop-hint")
        self.drop_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.drop_hint.setVisible(False)

        self.models = ModelsPanel()
        self.summary = SummaryPanel()
        self.hardware = HardwarePanel(backend.catalog())
        self.settings = SettingsPanel()
        self.chart = ChartPanel()
        self.verdict = VerdictPanel()
        self.speed = SpeedPanel()
        self.devices = DeviceBarsPanel()
        self.command = CommandPanel()
        self.server = ServerPanel(self._launch_plan, self._llama_server)
        self.banner = MessageBanner()
        self.activity = ActivityPanel()
        self.setStatusBar(QStatusBar())
        self.statusBar().addPermanentWidget(self.activity)

        self._lay_out()
        install_wheel_guard(self)  # the wheel scrolls the columns; it changes only the focused control

        self.planner = Planner(
            backend,
            Panels(
                self.models,
                self.summary,
                self.hardware,
                self.settings,
                self.chart,
                self.verdict,
                self.devices,
                self.command,
                self.banner,
                self.statusBar(),
                self.activity,
            ),
            user,
            config_dir,
            self,
        )
        self._build_menus()
        self._set_tab_order()
        self.planner.model_loaded.connect(self._name_in_title)
        self.planner.outcome_shown.connect(lambda o: self.verdict.set_accuracy(o.accuracy))
        self.planner.outcome_shown.connect(lambda o: self.speed.set_speed(o.speed))
        self._name_controls()
        if user.window_geometry:
            self.restoreGeometry(QByteArray.fromBase64(user.window_geometry.encode()))
            self.resize(fitted_size(self.size(), available))  # saved on a bigger screen
        if user.window_state:
            self.restoreState(QByteArray.fromBase64(user.window_state.encode()))

    def _lay_out(self) -> None:
        """Three columns: the models and the summary; the verdict, chart and command; hardware and settings."""
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
        # The chart and the launch of the plan share the room: Launch (Ctrl+R) brings its tab forward.
        self.centre_tabs = QTabWidget()
        self.centre_tabs.setDocumentMode(True)  # no frame: the chart keeps the height it had in its group box
        self.centre_tabs.addTab(self.chart, "Memory by context")
        self.centre_tabs.addTab(self.server, "Launch and check")
        # the plan's speed in the room beside the tabs (a row of its own pushed the command below the fold at
        # 1024x640); the wording shortens with that room
        self.centre_tabs.setCornerWidget(self.speed, Qt.Corner.TopRightCorner)
        self.speed.follow(self.centre_tabs)
        centre_layout.addWidget(self.centre_tabs, 1)
        centre_layout.addWidget(_group("Command", self.command))
        self.command.set_visible_lines(MIN_LINES)
        # The command row (shell, Verify, Copy) is never clipped: the model list gives way first.
        centre.setMinimumWidth(self.command.row_width() + 20)
        self.drop_hint.setParent(centre)
        # Below the height the column needs it scrolls instead of letting the legend and readout overlap the plot.
        centre_scroll = FitScrollArea()
        centre_scroll.setWidget(centre)
        centre_scroll.watch()

        right_inner = QWidget()
        right_layout = QVBoxLayout(right_inner)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(_group("Hardware", self.hardware))
        right_layout.addWidget(_group("Memory per device", self.devices))
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
        self.splitter.addWidget(centre_scroll)
        self.splitter.addWidget(right)
        # Narrower windows take from the model list and the chart alike; the settings column keeps its width.
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setStretchFactor(2, 0)
        self.splitter.setSizes([410, 540, 330] if self.width() >= DEFAULT_SIZE[0] else [250, 420, 330])
        left.setSizes([430, 330])  # the summary (about 11 rows) without scrolling at the default size
        self.splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.splitter)

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
        set_action = QAction("Plan a s&et of models…", self)
        set_action.triggered.connect(lambda: self.plan_model_set())
        save_action = QAction(
            "&Save configuration as…", self, shortcut=QKeySequence(QKeySequence.StandardKey.Save)
        )
        save_action.triggered.connect(self._ask_save_configuration)
        load_action = QAction("&Load configuration…", self)
        load_action.triggered.connect(self._ask_load_configuration)
        bin_action = QAction("Set llama.cpp &build folder…", self)
        bin_action.triggered.connect(self._ask_llama_dir)
        quit_action = QAction("&Quit", self, shortcut=QKeySequence(QKeySequence.StandardKey.Quit))
        quit_action.triggered.connect(self.close)
        for a in (
            open_action,
            url_action,
            folder_action,
            quants_action,
            set_action,
            save_action,
            load_action,
            bin_action,
            quit_action,
        ):
            menu.addAction(a)
        edit = self.menuBar().addMenu("&Edit")
        paste_action = QAction(
            "&Paste llama-server command", self, shortcut=QKeySequence(QKeySequence.StandardKey.Paste)
        )
        paste_action.setToolTip("Set every control from a llama-server command on the clipboard")
        paste_action.triggered.connect(self.paste_command)
        edit.addAction(paste_action)
        plan = self.menuBar().addMenu("&Plan")
        copy_action = QAction("&Copy command", self, shortcut=QKeySequence("Ctrl+Shift+C"))
        copy_action.triggered.connect(self.planner.commands.copy_command)
        ctx_action = QAction("Focus &context", self, shortcut=QKeySequence("Ctrl+L"))
        ctx_action.triggered.connect(self.settings.focus_context)
        launch_action = QAction("&Launch llama-server", self, shortcut=QKeySequence("Ctrl+R"))
        launch_action.triggered.connect(self.server.launch)
        for a in (copy_action, ctx_action, launch_action):
            plan.addAction(a)
            self.addAction(a)
        help_menu = self.menuBar().addMenu("&Help")
        about_action = QAction("&About fitplan", self)
        about_action.triggered.connect(self._about)
        help_menu.addAction(about_action)
        self.addAction(open_action)
        self.actions_by_name = {
            "open": open_action,
            "copy": copy_action,
            "context": ctx_action,
            "paste": paste_action,
            "about": about_action,
            "save": save_action,
            "load": load_action,
            "quit": quit_action,
            "quants": quants_action,
            "set": set_action,
            "launch": launch_action,
        }

    def compare_quants(self, source: str = "") -> QuantsDialog:
        """The Compare quants dialog, for `source` (default: the folder of the open local model)."""
        # the Hub and ranking code load when the dialog is first asked for, not before the window paints
        from fitplan.gui.panels.quants import QuantsDialog

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

    def plan_model_set(self) -> ModelSetDialog:
        """The set dialog: the open model first, then the models that run beside it (`panels.model_set`)."""
        from fitplan.gui.panels.model_set import ModelSetDialog

        model = self.planner.model

        def planning() -> tuple[LaunchSettings, Machine, int] | None:
            req = self.planner.current_request()
            return None if req is None else (req.settings, req.machine, req.margin_bytes)

        dialog = ModelSetDialog(
            self.planner.backend, planning, model.source if model is not None else "", self
        )
        dialog.show()
        return dialog

    @staticmethod
    def about_text() -> str:
        return (
            f"fitplan {__version__}\n\nWill this GGUF model fit on my machine, with what context, and how do I "
            f"launch it?\n\nEstimates llama.cpp at commit {LLAMA_CPP_COMMIT} (build {LLAMA_CPP_BUILD})."
        )

    def _about(self) -> None:
        box = QMessageBox(
            QMessageBox.Icon.Information,
            "About fitplan",
            self.about_text(),
            QMessageBox.StandardButton.Ok,
            self,
        )
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.exec()

    def _name_in_title(self, model: object) -> None:
        name = getattr(getattr(model, "profile", None), "name", "") or ""
        # The name comes from the file's header: control characters and line breaks are left out.
        clean = "".join(ch for ch in name if ch.isprintable())[:120]
        self.setWindowTitle(f"{clean} — fitplan" if clean else TITLE)

    def paste_command(self) -> None:
        """Edit > Paste (Ctrl+V outside a text field): a llama-server command from the clipboard sets the controls."""
        focus = QGuiApplication.focusObject()
        if (focus is not None and focus.inherits("QLineEdit")) or (
            focus is not None and focus.inherits("QAbstractSpinBox")
        ):
            focus.paste()  # type: ignore[attr-defined]
            return
        clipboard = QGuiApplication.clipboard()
        self.planner.configs.paste_command(clipboard.text() if clipboard is not None else "")

    def _ask_save_configuration(self) -> None:
        dialog = QFileDialog(self, "Save the configuration", self.models.start_folder, SAVE_FILTERS)
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        shell = self.command.current_shell()

        def suffix_for(chosen: str) -> None:
            # the dialog adds the chosen kind's extension itself, so it asks before replacing that file
            dialog.setDefaultSuffix(default_suffix(chosen, shell))

        suffix_for(PRESET_FILTER)
        dialog.filterSelected.connect(suffix_for)
        if dialog.exec() and dialog.selectedFiles():
            self.planner.configs.save_configuration(dialog.selectedFiles()[0], dialog.selectedNameFilter())

    def _ask_load_configuration(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            "Load a configuration",
            self.models.start_folder,
            "llama-server presets and scripts (*.ini *.sh *.ps1 *.bat *.cmd *.txt);;All files (*)",
        )
        if path:
            self.planner.configs.load_configuration(path)

    def _name_controls(self) -> None:
        """What a screen reader calls each control that no form label names (a row of two controls, a control
        without a label, a combo box that would be read by its value, such as "f16")."""
        s, hw = self.settings, self.hardware
        for widget, name in (
            (self.verdict, "Verdict"),
            (self.command.text, "Command"),
            (self.command.shell, "Shell"),
            (self.models.table, "Models"),
            (self.models.filter_box, "Filter models"),
            (self.hardware.list, "Devices to plan for"),
            (self.banner, "Message"),
            (self.chart.device_box, "Device shown in the chart"),
            (s.context_slider, "Context slider"),
            (s.context_box, "Context in tokens"),
            (s.cache_k, "K cache type"),
            (s.cache_v, "V cache type"),
            (s.slots, "Slots"),
            (s.gpu_layers_slider, "GPU layers slider"),
            (s.gpu_layers, "GPU layers"),
            (s.devices_button, "Devices (-dev)"),
            (s.draft, "Draft model"),
            (s.draft_browse, "Choose a draft model file"),
            (s.draft_ngl, "Draft GPU layers"),
            (s.draft_cache_k, "Draft K cache type"),
            (s.draft_cache_v, "Draft V cache type"),
            (hw.host_ram, "System RAM to plan for"),
            (hw.catalog, "GPU catalog"),
            (hw.add_catalog, "Add the catalog GPU"),
            (hw.size_box, "GPU size"),
            (hw.add_size, "Add a GPU of this size"),
            (hw.remove, "Remove the selected GPU"),
        ):
            widget.setAccessibleName(name)

    def _set_tab_order(self) -> None:
        m, s, c = self.models, self.settings, self.command
        chain: list[QWidget] = [
            m.open_button,
            m.url_button,
            m.folder_button,
            m.recent_button,
            m.filter_box,
            m.table,
            s.engine,
            s.context_slider,
            s.context_box,
            s.ollama_auto,
            s.cache_k,
            s.cache_v,
            s.slots,
            s.unified,
            s.flash,
            s.mmproj,
            s.image_tokens,
            s.gpu_layers_slider,
            s.gpu_layers,
            s.devices_button,
            s.no_kv_offload,
            s.cpu_moe,
            s.mla,
            s.amb,
            s.fmoe,
            s.rtr,
            s.tail_tokens,
            s.tail_type,
            s.overhead,
            s.draft,
            s.draft_browse,
            s.draft_ngl,
            s.draft_cache_k,
            s.draft_cache_v,
            s.margin,
            s.advanced,
            self.hardware.list,
            self.hardware.catalog,
            self.hardware.add_catalog,
            self.hardware.size_box,
            self.hardware.add_size,
            self.hardware.remove,
            self.chart.device_box,
            c.shell,
            c.copy_button,
            c.text,
        ]
        for a, b in itertools.pairwise(chain):
            self.setTabOrder(a, b)

    def _ask_llama_dir(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "llama.cpp build folder (with llama-server)")
        if folder:
            self.planner.commands.set_llama_bin_dir(folder)

    # -- launch ------------------------------------------------------------------------------------------------
    def _launch_plan(self) -> LaunchPlan | None:
        """The shown plan's llama-server command and estimate (None for ollama, or before an estimate)."""
        from fitplan.core.launch.launcher import LaunchPlan

        o, model = self.planner.outcome, self.planner.model
        if o is None or model is None or o.ollama is not None or self.planner.estimate_failed:
            return None
        return LaunchPlan((*o.args, *self.planner.configs.kept_args), o.estimate, o.accuracy, model.source)

    def _llama_server(self) -> str:
        from fitplan.core.launch.server_process import find_server

        return find_server(self.planner.user.llama_bin_dir or None)

    # -- drag and drop -------------------------------------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        mime = event.mimeData()
        if (
            self._sources(event)
            or dropped_folders(self._local(event))
            or (not mime.hasUrls() and mime.hasText() and looks_like_command(mime.text()))
        ):
            event.acceptProposedAction()
            self._show_drop_hint(True)

    def dragLeaveEvent(self, event: QDragLeaveEvent) -> None:
        self._show_drop_hint(False)
        super().dragLeaveEvent(event)

    def _show_drop_hint(self, on: bool) -> None:
        self.setStyleSheet(DROP_STYLE if on else "")
        parent = self.drop_hint.parentWidget()
        if on and parent is not None:
            self.drop_hint.setGeometry(parent.rect())
            self.drop_hint.setStyleSheet(
                "QLabel#drop-hint { background: palette(highlight); color: palette(highlighted-text); "
                "font-size: 16pt; border-radius: 8px; }"
            )
            self.drop_hint.raise_()
        self.drop_hint.setVisible(on)

    def drop_hint_shown(self) -> bool:
        return self.drop_hint.isVisible()

    def dropEvent(self, event: QDropEvent) -> None:
        self._show_drop_hint(False)
        mime = event.mimeData()
        if not mime.hasUrls() and mime.hasText() and looks_like_command(mime.text()):
            event.acceptProposedAction()
            self.planner.configs.paste_command(mime.text())
            return
        sources = self._sources(event)
        folders = dropped_folders(self._local(event))
        if not sources and not folders:
            return
        event.acceptProposedAction()
        for folder in folders:
            self.planner.library.add_folder(folder)
        for source in sources:
            self.planner.open(source)

    @staticmethod
    def _local(event: QDragEnterEvent | QDropEvent) -> list[str]:
        return [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]

    @staticmethod
    def _sources(event: QDragEnterEvent | QDropEvent) -> list[str]:
        mime = event.mimeData()
        local = [u.toLocalFile() for u in mime.urls() if u.isLocalFile()]
        remote = [u.toString() for u in mime.urls() if not u.isLocalFile()]
        if not mime.hasUrls() and mime.hasText():
            remote = [line.strip() for line in mime.text().splitlines() if line.strip()]
        return dropped_sources(remote, local)

    def resizeEvent(self, event: QResizeEvent) -> None:
        """A short window keeps the command to a few lines and gives the chart the height."""
        self.command.set_compact(event.size().height() < COMPACT_HEIGHT)
        super().resizeEvent(event)

    # -- theme ---------------------------------------------------------------------------------------------------
    def changeEvent(self, event: QEvent) -> None:
        """Follow a switch of the system's light/dark theme while running."""
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.verdict.apply_theme()
            self.banner.apply_theme()
            self.chart.apply_theme()
            self.devices.update()
        super().changeEvent(event)

    # -- lifetime ------------------------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        geometry = bytes(self.saveGeometry().toBase64().data()).decode()
        state = bytes(self.saveState().toBase64().data()).decode()
        self.planner.save(geometry, state)
        self.planner.shutdown()
        self.server.shutdown()
        super().closeEvent(event)
