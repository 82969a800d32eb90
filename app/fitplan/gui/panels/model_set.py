"""Plan a set of models: the open model and others (an embedding model, a reranker ...) that run beside it, with
one budget per device, memory kept for other programs, and the router preset and llama-swap configuration.

The window only composes: each model is read by `Backend.load` (the one loader), its role is a llama-server flag
read by `core.launch.flags.parse_flags` (`--embedding`, `--reranking`), the set is planned by
`core.plan.multi.plan_set` on a pool thread, and the launch text comes from `core.launch.set_launch`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from fitplan.core.base.devices import GIB, Machine
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.base.units import fmt_gib
from fitplan.core.launch.flags import parse_flags
from fitplan.core.launch.set_launch import llama_swap_yaml, router_command, router_preset
from fitplan.core.plan.multi import MultiModel, MultiPlan, MultiRequest, Status, plan_set
from fitplan.core.plan.pins import pins_from_settings
from fitplan.core.plan.planner import Pins
from fitplan.core.plan.search import default_estimate_fn
from fitplan.core.plan.usage import MarginPolicy, Reserve, device_label
from fitplan.gui.backend import Backend
from fitplan.gui.workers import JobError, Jobs

__all__ = ["ROLE_FLAGS", "ModelSetDialog", "SetEntry", "plan_entries"]

#: a model's role in the set, as the llama-server flags that give it
ROLE_FLAGS: dict[str, tuple[str, ...]] = {
    "chat": (),
    "embedding": ("--embedding",),
    "reranking": ("--reranking",),
}
MODEL_COLUMNS = ("Model", "Role", "Status", "Context", "Placement")
BUDGET_COLUMNS = ("Budget", "")  # then one column per device


@dataclasses.dataclass(frozen=True, slots=True)
class SetEntry:
    source: str  # a path, URL or Hub reference, as the window opens it
    role: str  # a key of ROLE_FLAGS


def plan_entries(
    backend: Backend,
    entries: list[SetEntry],
    first_settings: LaunchSettings,
    machine: Machine,
    margin: MarginPolicy,
) -> MultiPlan:
    """The set plan of `entries` (the first with the window's own settings). Runs on a pool thread."""
    models: list[MultiModel] = []
    taken: set[str] = set()
    for i, e in enumerate(entries):
        loaded = backend.load(e.source)
        flags = parse_flags(list(ROLE_FLAGS[e.role])).settings
        if i == 0:
            own = dataclasses.replace(first_settings, embedding=flags.embedding, reranking=flags.reranking)
            pins = pins_from_settings(own, frozenset())
        else:
            pins = Pins(base=flags)
        name = e.source.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".gguf") or "model"
        stem, n = name, 2
        while name in taken:
            name, n = f"{stem}-{n}", n + 1
        taken.add(name)
        fn = default_estimate_fn(mmproj=loaded.mmproj if i == 0 else None)
        models.append(MultiModel(name, loaded.profile, pins, fn, loaded.source))
    return plan_set(MultiRequest(tuple(models), machine, margin))


class ModelSetDialog(QDialog):
    """The models of a set (the open one first), their roles, memory held for another program on one device, and
    the set's plan: what stays resident, what swaps, each device's budget, and how to launch it."""

    def __init__(
        self,
        backend: Backend,
        planning: Callable[[], tuple[LaunchSettings, Machine, int] | None],
        first: str = "",
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Plan a set of models")
        self.resize(900, 560)
        self.backend = backend
        self.planning = planning
        self.entries: list[SetEntry] = [SetEntry(first, "chat")] if first else []
        self.outcome: MultiPlan | None = None
        self.jobs = Jobs(parent=self)
        self.jobs.error.connect(self._failed)
        self.source = QLineEdit()
        self.source.setPlaceholderText("a .gguf path, a URL or hf.co/ORG/REPO:QUANT to add to the set")
        self.source.returnPressed.connect(self.add_from_field)
        self.role = QComboBox()
        self.role.addItems(list(ROLE_FLAGS))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        add = QPushButton("Add")
        add.clicked.connect(self.add_from_field)
        self.keep = QDoubleSpinBox(minimum=0.0, maximum=1024.0, singleStep=0.5, suffix=" GiB")
        self.keep.setToolTip(
            "Memory held for another program (a desktop, a browser, ComfyUI) on the device chosen"
        )
        self.keep_name = QLineEdit("other programs")
        self.keep_on = QComboBox()  # the device the held memory is on: the machine's GPUs, then host RAM
        self._fill_devices()
        self.plan_button = QPushButton("Plan set")
        self.plan_button.clicked.connect(self.start)
        self.status = QLabel("Add the models that run beside the open one, then Plan set.")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        self.models = self._table(MODEL_COLUMNS)
        self.budgets = self._table(BUDGET_COLUMNS)
        self.launch = QPlainTextEdit()
        self.launch.setReadOnly(True)
        self.launch.setPlaceholderText("The router preset and the llama-swap configuration appear here.")
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        top = QHBoxLayout()
        top.addWidget(self.source, 1)
        top.addWidget(self.role)
        top.addWidget(browse)
        top.addWidget(add)
        keep = QHBoxLayout()
        keep.addWidget(QLabel("Hold"))
        keep.addWidget(self.keep)
        keep.addWidget(QLabel("on"))
        keep.addWidget(self.keep_on)
        keep.addWidget(QLabel("for"))
        keep.addWidget(self.keep_name, 1)
        keep.addWidget(self.plan_button)
        bottom = QHBoxLayout()
        bottom.addStretch(1)
        bottom.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(keep)
        layout.addWidget(self.status)
        layout.addWidget(self.models, 2)
        layout.addWidget(self.budgets, 3)
        layout.addWidget(self.launch, 2)
        layout.addLayout(bottom)
        self._show_entries()

    @staticmethod
    def _table(columns: tuple[str, ...]) -> QTableWidget:
        t = QTableWidget(0, len(columns))
        t.setHorizontalHeaderLabels(list(columns))
        t.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        t.verticalHeader().setVisible(False)
        # compact rows, so that the budget shows whole
        t.verticalHeader().setDefaultSectionSize(t.fontMetrics().height() + 8)
        t.horizontalHeader().setSectionResizeMode(len(columns) - 1, QHeaderView.ResizeMode.Stretch)
        return t

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Add a model", "", "GGUF models (*.gguf)")
        if path:
            self.source.setText(path)
            self.add_from_field()

    def add(self, source: str, role: str = "chat") -> None:
        """Adds a model to the set (what Add does with the field and the role chosen)."""
        if role not in ROLE_FLAGS:
            raise ValueError(f"unknown role {role!r}")
        self.entries.append(SetEntry(source, role))
        self.outcome = None
        self._show_entries()

    def add_from_field(self) -> None:
        text = self.source.text().strip()
        if not text:
            self.status.setText("Name a model file, URL or Hub reference to add.")
            return
        self.add(text, self.role.currentText())
        self.source.clear()

    def _show_entries(self) -> None:
        rows = self.entries
        self.models.setRowCount(len(rows))
        for i, e in enumerate(rows):
            name = e.source.replace("\\", "/").rsplit("/", 1)[-1]
            for col, text in enumerate((name, e.role, "", "", "")):
                self.models.setItem(i, col, QTableWidgetItem(text))
        self.models.resizeColumnsToContents()
        self.plan_button.setEnabled(len(rows) >= 1)

    def _fill_devices(self) -> None:
        plan_with = self.planning()
        gpus = plan_with[1].gpus if plan_with is not None else ()
        for i, d in enumerate(gpus):
            self.keep_on.addItem(device_label(d, i), i)
        self.keep_on.addItem("host RAM", -1)

    def margin(self, base_bytes: int, machine: Machine) -> MarginPolicy:
        """The window's margin per GPU, and the memory held for another program on the device chosen."""
        reserves: tuple[Reserve, ...] = ()
        index = self.keep_on.currentData()
        if self.keep.value() > 0 and isinstance(index, int) and index < len(machine.gpus):
            name = self.keep_name.text().strip() or "other programs"
            reserves = (Reserve(index if index >= 0 else None, int(self.keep.value() * GIB), name),)
        return MarginPolicy(gpu_margin_bytes=base_bytes, reserves=reserves)

    def start(self) -> None:
        plan_with = self.planning()
        if not self.entries or plan_with is None:
            self.status.setText("Open a model in the window first: the set is planned on its machine.")
            return
        settings, machine, margin_bytes = plan_with
        entries = list(self.entries)
        margin = self.margin(margin_bytes, machine)
        self.plan_button.setEnabled(False)
        self.status.setText(f"Planning {len(entries)} models together…")

        def work(_progress: Any) -> MultiPlan:
            return plan_entries(self.backend, entries, settings, machine, margin)

        self.jobs.start("Planning the set", work, self._done)

    def _done(self, p: MultiPlan) -> None:
        self.plan_button.setEnabled(True)
        self.outcome = p
        if p.unfit:
            head = f"{len(p.unfit)} model(s) do not fit this machine even alone."
        elif p.swapped:
            head = f"{len(p.resident)} resident, {len(p.swapped)} loaded in turn (one at a time)."
        else:
            head = f"All {len(p.models)} models stay resident together."
        self.status.setText(f"{head} Margins: {p.margin.describe()}.")
        self.models.setRowCount(len(p.models))
        for i, m in enumerate(p.models):
            role = self.entries[i].role if i < len(self.entries) else ""
            cells = (m.name, role, m.status, str(m.settings.n_ctx), m.placement.description)
            for col, text in enumerate(cells):
                self.models.setItem(i, col, QTableWidgetItem(text))
        self.models.resizeColumnsToContents()
        self.show_budgets(p)
        router = " ".join(router_command(p, "router.ini"))
        self.launch.setPlainText(
            f"# {router}\n# router.ini\n{router_preset(p)}\n# llama-swap config.yaml\n{llama_swap_yaml(p)}"
        )

    def show_budgets(self, p: MultiPlan) -> None:
        """One column per device; a row per model (what it holds there), the swap slot, what is kept, what the set
        may use and what is left."""
        rows: list[tuple[str, list[str]]] = []
        for m in p.models:
            if m.status == Status.RESIDENT:
                rows.append((m.name, [fmt_gib(b) if b else "—" for b in m.use]))
        if p.swapped:
            rows.append(("swap slot (largest)", [fmt_gib(b.swap[1]) if b.swap else "—" for b in p.budgets]))
        rows.append(("kept (margin, held)", [fmt_gib(b.kept_bytes) for b in p.budgets]))
        rows.append(
            ("may use", [fmt_gib(b.capacity_bytes) if b.checked else "not checked" for b in p.budgets])
        )
        rows.append(("left", [fmt_gib(b.headroom_bytes) + ("" if b.fits else " OVER") for b in p.budgets]))
        self.budgets.setColumnCount(1 + len(p.budgets))
        self.budgets.setHorizontalHeaderLabels(["", *(b.label for b in p.budgets)])
        self.budgets.setRowCount(len(rows))
        for i, (head, cells) in enumerate(rows):
            for col, text in enumerate((head, *cells)):
                item = QTableWidgetItem(text)
                if col:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.budgets.setItem(i, col, item)
        self.budgets.resizeColumnsToContents()

    def _failed(self, err: JobError) -> None:
        self.plan_button.setEnabled(True)
        self.status.setText(err.message)
