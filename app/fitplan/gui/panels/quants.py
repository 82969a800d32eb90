"""Compare quants: every model of a Hugging Face repository or a folder, one row each with a fit bar, the largest
context and the placement, best first; choosing one opens it in the planner.

The window only composes: the models come from `core.inputs.model_source.load_source_models` (headers only, the
remote header cache), each is planned by `Backend.plan` exactly as the planner would plan it when opened, and the
rows are ordered by `core.plan.ranking` (the rule `fitplan quants` uses).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from fitplan.core.base.devices import Machine
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.base.units import fmt_ctx, fmt_gib
from fitplan.core.inputs.model_source import load_source_models
from fitplan.core.plan import ranking
from fitplan.gui.backend import Backend, PlanOutcome, PlanRequest, VerdictLevel
from fitplan.gui.theme import verdict_colour
from fitplan.gui.workers import JobError, Jobs

COLUMNS = ("", "Quant", "Files", "Size", "Fit", "Largest context", "Placement")


@dataclass(frozen=True, slots=True)
class QuantView:
    """One row as shown."""

    name: str
    files: int
    size_bytes: int
    model_arg: str  # what the planner opens (a path, a URL, or hf.co/ORG/REPO:QUANT)
    level: str  # VerdictLevel, or "" when it could not be read
    fill: float  # the fullest device's share of what it may use, at the planned settings (0..1+)
    max_context: int
    placement: str  # the verdict sentence, or the error
    recommended: bool = False


def _fill(outcome: PlanOutcome) -> float:
    shares = [
        d.used_bytes / d.device.total_bytes
        for d in outcome.estimate.devices
        if d.device.total_bytes > 0 and d.terms
    ]
    return max(shares, default=0.0)


def compare(
    backend: Backend, source: str, settings: LaunchSettings, machine: Machine, margin_bytes: int
) -> tuple[str, list[QuantView]]:
    """(the source as named, its rows best first). Runs in a worker thread."""
    found = load_source_models(source)
    views: list[tuple[tuple[int, int, str], QuantView]] = []
    for m in found.models:
        e = m.entry
        if m.model is None:
            view = QuantView(e.name, len(e.files), e.size_bytes, "", "", 0.0, 0, m.error)
            views.append((ranking.rank_key(ranking.tier(None, False, 0, 0), e.size_bytes, e.name), view))
            continue
        model = backend.load(m.model.model_arg)
        mm = model.mmproj.path if model.mmproj is not None else None
        request = PlanRequest(
            0, model, replace(settings, mmproj_path=mm), machine, margin_bytes, with_curve=False
        )
        outcome = backend.plan(request)
        level = outcome.verdict.level
        fits = level != VerdictLevel.NO_FIT
        tier = ranking.tier(fits, level == VerdictLevel.FITS, outcome.max_context, model.profile.n_ctx_train)
        view = QuantView(
            e.name,
            len(e.files),
            e.size_bytes,
            model.source,
            level,
            _fill(outcome),
            outcome.max_context,
            outcome.verdict.text,
        )
        views.append((ranking.rank_key(tier, e.size_bytes, e.name), view))
    rows = [v for _, v in sorted(views, key=lambda kv: kv[0])]
    if rows and rows[0].level in (VerdictLevel.FITS, VerdictLevel.OFFLOAD):
        rows[0] = replace(rows[0], recommended=True)
    return found.source, rows


class QuantsDialog(QDialog):
    """Lists the models of a repository or folder; double-click (or "Open in planner") opens one."""

    open_requested = Signal(str)

    def __init__(
        self,
        backend: Backend,
        planning: Callable[[], tuple[LaunchSettings, Machine, int] | None],
        source: str = "",
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Compare quants")
        self.resize(860, 420)
        self.backend = backend
        self.planning = planning
        self.jobs = Jobs(parent=self)
        self.jobs.error.connect(self._failed)
        self.rows: list[QuantView] = []
        self.source = QLineEdit(source)
        self.source.setPlaceholderText(
            "ORG/REPO, hf.co/ORG/REPO, https://huggingface.co/ORG/REPO, or a folder"
        )
        self.source.returnPressed.connect(self.start)
        self.compare_button = QPushButton("Compare")
        self.compare_button.clicked.connect(self.start)
        self.status = QLabel("Only the headers are read: nothing is downloaded.")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)  # an error message is long: it wraps rather than widening the dialog
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.setTabKeyNavigation(False)  # Tab goes on to the buttons; the arrow keys move between rows
        self.table.horizontalHeader().setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.table.cellDoubleClicked.connect(lambda row, _col: self.choose(row))
        self.open_button = QPushButton("Open in planner")
        self.open_button.setEnabled(False)
        self.open_button.clicked.connect(lambda: self.choose(self.table.currentRow()))
        self.table.itemSelectionChanged.connect(self._selection_changed)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        top = QHBoxLayout()
        top.addWidget(self.source, 1)
        top.addWidget(self.compare_button)
        bottom = QHBoxLayout()
        rule = QLabel(ranking.RANK_RULE.split(". Recommended")[0] + ".")
        rule.setWordWrap(True)  # one line of it made the dialog 1223 px wide, past a 1024 px screen
        self.rule = rule
        bottom.addWidget(rule, 1)
        bottom.addWidget(self.open_button)
        bottom.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.status)
        layout.addWidget(self.table, 1)
        layout.addLayout(bottom)
        self.table.setHorizontalScrollMode(
            QTableWidget.ScrollMode.ScrollPerPixel
        )  # wide rows scroll, not the dialog
        screen = self.screen().availableGeometry() if self.screen() is not None else None
        if screen is not None:
            self.resize(min(self.width(), screen.width() - 32), min(self.height(), screen.height() - 64))

    def start(self) -> None:
        source = self.source.text().strip()
        plan_with = self.planning()
        if not source or plan_with is None:
            self.status.setText("Name a repository or a folder (and open any model first, for the hardware).")
            return
        settings, machine, margin = plan_with
        self.compare_button.setEnabled(False)
        self.status.setText(f"Reading the headers of {source}…")

        def work(_progress: Any) -> tuple[str, list[QuantView]]:
            return compare(self.backend, source, settings, machine, margin)

        self.jobs.start(f"Comparing {source}", work, self._done)

    def _done(self, result: tuple[str, list[QuantView]]) -> None:
        name, rows = result
        self.compare_button.setEnabled(True)
        self.status.setText(f"{name}: {len(rows)} model(s). Double-click one to open it in the planner.")
        self.show_rows(rows)

    def _failed(self, err: JobError) -> None:
        self.compare_button.setEnabled(True)
        self.status.setText(err.message)

    def show_rows(self, rows: list[QuantView]) -> None:
        self.rows = rows
        self.table.setRowCount(len(rows))
        for i, r in enumerate(rows):
            cells = ("★" if r.recommended else "", r.name, str(r.files), fmt_gib(r.size_bytes))
            for col, text in enumerate(cells):
                self.table.setItem(i, col, QTableWidgetItem(text))
            self.table.setCellWidget(i, 4, self._bar(r))
            ctx = fmt_ctx(r.max_context) if r.max_context else "—"
            self.table.setItem(i, 5, QTableWidgetItem(ctx))
            self.table.setItem(i, 6, QTableWidgetItem(r.placement))
        self.table.resizeColumnsToContents()
        if rows:
            self.table.selectRow(0)

    @staticmethod
    def _bar(r: QuantView) -> QProgressBar:
        bar = QProgressBar()
        bar.setRange(0, 100)
        bar.setValue(min(100, round(r.fill * 100)))
        bar.setFormat(
            {VerdictLevel.FITS: "fits", VerdictLevel.OFFLOAD: "offload", VerdictLevel.NO_FIT: "no"}.get(
                r.level, "error"
            )
        )
        if r.level:
            bar.setStyleSheet(f"QProgressBar::chunk {{ background: {verdict_colour(r.level).name()}; }}")
        return bar

    def _selection_changed(self) -> None:
        row = self.table.currentRow()
        self.open_button.setEnabled(0 <= row < len(self.rows) and bool(self.rows[row].model_arg))

    def choose(self, row: int) -> None:
        if 0 <= row < len(self.rows) and self.rows[row].model_arg:
            self.open_requested.emit(self.rows[row].model_arg)
            self.accept()
