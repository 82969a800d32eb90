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
UNREAD = "could not be read"


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
    model: str = (
        ""  # the model this is a quant of (`ranking.ModelIdentity.label`), or why it could not be read
    )
    file_names: tuple[str, ...] = ()


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
    views: list[tuple[ranking.ModelIdentity | None, tuple[int, int, str], QuantView]] = []
    for m in found.models:
        e = m.entry
        files = tuple(f.path for f in e.files)
        if m.model is None:
            view = QuantView(e.name, len(e.files), e.size_bytes, "", "", 0.0, 0, m.error, model=UNREAD)
            key = ranking.rank_key(ranking.tier(None, False, 0, 0), e.size_bytes, e.name)
            views.append((None, key, replace(view, file_names=files)))
            continue
        model = backend.load(m.model.model_arg)
        profile = m.model.profile
        # a folder's projector goes only with the model it belongs to (`_load_in_folder`)
        mm_source = m.model.mmproj_source
        mm = model.mmproj.path if model.mmproj is not None and mm_source is not None else None
        request = PlanRequest(
            0, model, replace(settings, mmproj_path=mm), machine, margin_bytes, with_curve=False
        )
        outcome = backend.plan(request)
        level = outcome.verdict.level
        fits = level != VerdictLevel.NO_FIT
        tier = ranking.tier(fits, level == VerdictLevel.FITS, outcome.max_context, profile.n_ctx_train)
        size = ranking.quant_size(profile, e.size_bytes)
        identity = ranking.identity_of(profile)
        view = QuantView(
            ranking.quant_label(e.name, profile),
            len(e.files),
            size,
            model.source,
            level,
            _fill(outcome),
            outcome.max_context,
            outcome.verdict.text,
            model=identity.label(),
            file_names=files,
        )
        views.append((identity, ranking.rank_key(tier, size, e.name), view))
    rows: list[QuantView] = []
    for group in ranking.group_by_model([ident for ident, _, _ in views]):
        ranked = [views[i][2] for i in sorted(group, key=lambda i: views[i][1])]
        if ranked[0].level in (VerdictLevel.FITS, VerdictLevel.OFFLOAD):
            ranked[0] = replace(ranked[0], recommended=True)
        rows += ranked
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
        self._view_of: list[
            int | None
        ] = []  # per table row: its position in `rows` (None: a model's heading)
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
        """One row per quant; when the source holds several models, each model's quants under its own heading
        (ranked among themselves, each model with its own recommendation)."""
        self.rows = rows
        models = list(dict.fromkeys(r.model for r in rows))
        headed = len(models) > 1
        self._view_of = []
        self.table.clearSpans()
        self.table.setRowCount(len(rows) + (len(models) if headed else 0))
        for model in models:
            group = [i for i, r in enumerate(rows) if r.model == model]
            if headed:
                self._heading(len(self._view_of), f"{model}: {len(group)} quant(s)")
                self._view_of.append(None)
            for i in group:
                self._fill(len(self._view_of), rows[i])
                self._view_of.append(i)
        self.table.resizeColumnsToContents()
        first = next((t for t, v in enumerate(self._view_of) if v is not None), None)
        if first is not None:
            self.table.selectRow(first)

    def _heading(self, t: int, text: str) -> None:
        item = QTableWidgetItem(text)
        item.setFlags(Qt.ItemFlag.ItemIsEnabled)  # not selectable: a model, not a file to open
        font = item.font()
        font.setBold(True)
        item.setFont(font)
        self.table.setItem(t, 0, item)
        self.table.setSpan(t, 0, 1, len(COLUMNS))

    def _fill(self, t: int, r: QuantView) -> None:
        cells = ("★" if r.recommended else "", r.name, str(r.files), fmt_gib(r.size_bytes))
        for col, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if r.file_names:
                item.setToolTip("\n".join(r.file_names))
            self.table.setItem(t, col, item)
        self.table.setCellWidget(t, 4, self._bar(r))
        ctx = fmt_ctx(r.max_context) if r.max_context else "—"
        self.table.setItem(t, 5, QTableWidgetItem(ctx))
        self.table.setItem(t, 6, QTableWidgetItem(r.placement))

    def view_at(self, table_row: int) -> QuantView | None:
        """The quant shown on a table row (None: a model's heading, or no row)."""
        if 0 <= table_row < len(self._view_of):
            i = self._view_of[table_row]
            return self.rows[i] if i is not None else None
        return None

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
        view = self.view_at(self.table.currentRow())
        self.open_button.setEnabled(view is not None and bool(view.model_arg))

    def choose(self, row: int) -> None:
        """Open the quant on table row `row`."""
        view = self.view_at(row)
        if view is not None and view.model_arg:
            self.open_requested.emit(view.model_arg)
            self.accept()
