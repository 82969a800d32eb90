"""Server: launch the plan's llama-server, stream its log, and show what it allocated beside the estimate.

The launch itself is the core's (`fitplan.core.launch.launcher`, the same sequence as `fitplan launch`); starting,
waiting for the load and stopping run on pool threads, log lines arrive through a queued signal. One server at a
time: Launch is off while one runs; closing the window stops it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFontDatabase, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from fitplan import __version__
from fitplan.core.base.results import TermKind
from fitplan.core.base.units import MIB
from fitplan.gui.workers import JobError, Jobs

if TYPE_CHECKING:  # the launch code loads with the first launch, not before the window paints
    from fitplan.core.launch.launch_check import LaunchCheck
    from fitplan.core.launch.launcher import Launcher, LaunchPlan, LaunchReport

#: Lines the log pane keeps (the oldest go first).
LOG_LINES = 5000
#: The check's columns (MiB); the verdict first, so that it shows in a narrow window.
COLUMNS = ("", "Term", "Estimate", "Allocated", "Diff.", "Band", "Device")
PANE_LINES = 5  # the log and the check are at least this many lines tall
TERM_COLORS = {
    TermKind.WEIGHTS: "#4e79a7",
    TermKind.KV: "#f28e2b",
    TermKind.RECURRENT: "#e15759",
    TermKind.OUTPUT: "#76b7b2",
    TermKind.COMPUTE: "#59a14f",
    TermKind.MMPROJ: "#b07aa1",
}


def _mib(n: int) -> str:
    return f"{n / MIB:.2f}"


class CheckBars(QWidget):
    """Per device, the estimated terms as light stacked bars with the allocated ones drawn over them, darker and
    thinner: where the dark bar stops short of or runs past its light one, the estimate was off."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.check: LaunchCheck | None = None
        self.setMinimumHeight(40)
        self.setToolTip(
            "Light: the estimate. Dark, over it: what llama.cpp allocated. Blue weights, orange K/V cache, red "
            "recurrent state, teal output, green compute, purple projector."
        )

    def set_check(self, check: LaunchCheck | None) -> None:
        self.check = check
        rows = len(check.devices) if check is not None else 1
        self.setMinimumHeight(12 + 26 * rows)
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(300, self.minimumHeight())

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        text = self.palette().color(QPalette.ColorRole.WindowText)
        check = self.check
        if check is None or not check.devices:
            p.setPen(text)
            p.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "No check yet: launch the plan.")
            return
        label_w = 70
        width = max(10, self.width() - label_w - 8)
        top = max(max(d.estimate_bytes - d.reserve_bytes, d.allocated_bytes) for d in check.devices) or 1
        for row, d in enumerate(check.devices):
            y = 6 + 26 * row
            p.setPen(text)
            p.drawText(QRectF(0, y, label_w - 4, 20), Qt.AlignmentFlag.AlignVCenter, d.device)
            for est, tall, inset, alpha in ((True, 20.0, 0.0, 90), (False, 10.0, 5.0, 255)):
                x = float(label_w)
                for t in d.terms:
                    n = t.estimate_bytes if est else t.allocated_bytes
                    w = width * n / top
                    color = QColor(TERM_COLORS.get(t.term, "#999999"))
                    color.setAlpha(alpha)
                    p.fillRect(QRectF(x, y + inset, w, tall), color)
                    x += w


class ServerPanel(QWidget):
    """Launch / Stop / Save check, the server's log, and the check (a table and the bars)."""

    line_received = Signal(str)
    state_changed = Signal(str)  # "running", "stopped", "failed"

    def __init__(
        self,
        plan_source: Callable[[], LaunchPlan | None],
        binary_source: Callable[[], str],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.plan_source = plan_source
        self.binary_source = binary_source
        self.launcher: Launcher | None = None
        self.report: LaunchReport | None = None
        self._launched = ""  # the model file of the last launch
        self._starting = False  # a launch's start job is under way
        self.jobs = Jobs(parent=self)
        self.jobs.error.connect(self._job_failed)
        self.line_received.connect(self._append)

        self.launch_button = QPushButton("Launch")
        self.launch_button.setToolTip(
            "Start llama-server with this command, wait until the model is loaded, and compare what it allocated "
            "with the estimate"
        )
        self.launch_button.clicked.connect(self.launch)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the server (it prints its memory breakdown as it exits)")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setEnabled(False)
        self.save_button = QPushButton("Save check…")
        self.save_button.setToolTip(
            "Write the comparison, the build, the devices and the buffer lines as JSON"
        )
        self.save_button.clicked.connect(self.ask_save)
        self.save_button.setEnabled(False)
        self.status = QLabel("Not running.")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        for b in (self.launch_button, self.stop_button, self.save_button):
            row.addWidget(b)
        row.addWidget(self.status, 1)

        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(LOG_LINES)
        self.log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.log.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.log.setPlaceholderText("llama-server's log appears here once launched.")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.bars = CheckBars()
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        check_page = QWidget()
        check_layout = QVBoxLayout(check_page)
        check_layout.setContentsMargins(2, 2, 2, 2)
        check_layout.addWidget(self.summary)
        check_layout.addWidget(self.bars)
        check_layout.addWidget(self.table, 1)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.log, "Log")
        self.tabs.addTab(check_page, "Check")
        spacing = self.log.fontMetrics().lineSpacing()
        self.tabs.setMinimumHeight(spacing * PANE_LINES)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(row)
        layout.addWidget(self.tabs, 1)

    # -- launch ------------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.launcher is not None and self.launcher.run.running

    def launch(self) -> None:
        # a launch still starting on the pool counts as running: a second one (the menu's action twice) would
        # replace the panel's launcher and leave the first server without its Stop
        if self.running or self._starting:
            self._set_status("llama-server is already running: stop it first.")
            return
        plan = self.plan_source()
        if plan is None:
            self._set_status("Nothing to launch: open a model with llama.cpp as the engine.")
            return
        try:
            binary = self.binary_source()
        except Exception as exc:  # noqa: BLE001 - a FitplanError: shown in one line
            self._set_status(str(exc))
            return
        from fitplan.core.launch.launcher import Launcher, new_log_file

        self.log.clear()
        self.report = None
        self._show_check(None)
        self._launched = Path(plan.model).name  # the check below names it: another model may be open by then
        self.tabs.setCurrentIndex(0)
        self.reveal()
        log_file = new_log_file()
        launcher = Launcher(plan, binary, self.line_received.emit, log_file)
        self.launcher = launcher
        self.launch_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.save_button.setEnabled(False)
        self._set_status(f"Starting {Path(binary).name}…")
        self._starting = True
        self.log.appendPlainText("$ " + " ".join(launcher.argv))

        def run(_progress: Any) -> LaunchReport:
            launcher.start()
            return launcher.wait()

        self.jobs.start("Launch llama-server", run, lambda r: self._loaded(launcher, r))

    def reveal(self) -> None:
        """Bring the panel forward: the tab that holds it, the part of a scrolled column it is in."""
        child: QWidget = self
        parent = self.parentWidget()
        while parent is not None:
            if isinstance(parent, QTabWidget):
                for i in range(parent.count()):
                    page = parent.widget(i)
                    if page is not None and (page is self or page.isAncestorOf(self)):
                        parent.setCurrentIndex(i)
            elif isinstance(parent, QScrollArea):
                parent.ensureWidgetVisible(child)
            child, parent = parent, parent.parentWidget()

    def _loaded(self, launcher: Launcher, report: LaunchReport) -> None:
        if launcher is not self.launcher:
            return
        self._starting = False
        self.report = report
        if report.check is None:
            self._finished(launcher, report)
            return
        self._show_check(report.check)
        self.tabs.setCurrentIndex(1)
        self.save_button.setEnabled(True)
        where = report.result.log.listening or "its port"
        verdict = "every term within the band" if report.check.all_within else "some terms outside the band"
        self._set_status(f"Running on {where} (pid {report.result.pid}): {verdict}.")
        self.state_changed.emit("running")

    def _finished(self, launcher: Launcher, report: LaunchReport) -> None:
        """A launch that failed: stop what is left, say why in one line, keep the log."""
        self.jobs.start("Stop llama-server", lambda _p: launcher.stop(), lambda _r: None)
        self.launch_button.setEnabled(True)
        self.stop_button.setEnabled(False)
        self._set_status(f"Failed: {launcher.failure_text(report)} (log: {report.log_file})")
        self.state_changed.emit("failed")

    def stop(self) -> None:
        launcher = self.launcher
        if launcher is None:
            return
        self.stop_button.setEnabled(False)
        self._set_status("Stopping…")
        self.jobs.start("Stop llama-server", lambda _p: launcher.stop(), lambda r: self._stopped(launcher, r))

    def _stopped(self, launcher: Launcher, report: LaunchReport) -> None:
        if launcher is not self.launcher:
            return
        self.launch_button.setEnabled(True)
        self.stop_button.setEnabled(False)
        if report.check is not None:
            self.report = report
            self._show_check(report.check)
            self.save_button.setEnabled(True)
        self._set_status("Stopped.")
        self.state_changed.emit("stopped")

    def _job_failed(self, err: JobError) -> None:
        self._starting = False
        self.launch_button.setEnabled(True)
        self.stop_button.setEnabled(self.running)
        self._set_status(err.message)
        self.state_changed.emit("failed")

    def shutdown(self) -> None:
        """The window closes: the server does not outlive it."""
        if self.launcher is not None:
            self.launcher.close()
        self.jobs.shutdown()

    # -- showing -----------------------------------------------------------------------------------------------
    def _append(self, line: str) -> None:
        self.log.appendPlainText(line)

    def _set_status(self, text: str) -> None:
        self.status.setText(text)
        self.status.setToolTip(text)

    def _show_check(self, check: LaunchCheck | None) -> None:
        self.bars.set_check(check)
        self.table.setRowCount(0)
        if check is None:
            self.summary.setText("")
            return
        for d in check.devices:
            for t in d.terms:
                r = self.table.rowCount()
                self.table.insertRow(r)
                mark = {True: "✓", False: "✗", None: "–"}[t.within]
                band = t.tolerance.text if t.tolerance else "none claimed"
                cells = [mark, t.name, _mib(t.estimate_bytes), _mib(t.allocated_bytes),
                         f"{t.difference_bytes / MIB:+.2f}", band, d.device]  # fmt: skip
                for c, text in enumerate(cells):
                    item = QTableWidgetItem(text)
                    if 2 <= c <= 4:
                        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                    if c == 0:
                        item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                        item.setToolTip(
                            {True: "within the band the estimate claimed", False: "outside the band the "
                             "estimate claimed", None: "no band claimed for this term"}[t.within]
                        )  # fmt: skip
                    if t.within is False and c in (0, 5):
                        item.setForeground(QColor("#c0392b"))
                    self.table.setItem(r, c, item)
        lines = [f"Launched: {self._launched}", check.band_text]
        lines += [d.usage_text() for d in check.devices if d.usage_text()]
        self.summary.setText("\n".join(lines))

    # -- saving ------------------------------------------------------------------------------------------------
    def ask_save(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the check", "fitplan-check.json", "JSON (*.json)")
        if path:
            self.save(path)

    def save(self, path: str) -> None:
        if self.launcher is None or self.report is None or self.report.check is None:
            return
        from fitplan.core.launch.launch_check import save_check

        try:
            save_check(path, self.launcher.document(self.report, __version__))
        except Exception as exc:  # noqa: BLE001 - a FitplanError: shown in one line
            self._set_status(str(exc))
            return
        self._set_status(f"Check saved to {path}.")
