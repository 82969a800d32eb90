"""Hardware: detected GPUs and host RAM, hypothetical GPUs from the catalog, by size or as `--assume-gpu` takes
them ("2x RTX 3060", "H100 80GB", "NAME=SIZE", read by the core's parser), which to plan for."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QCompleter,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from fitplan.core.base.devices import GIB, Device, Machine
from fitplan.core.base.errors import FitplanError
from fitplan.core.hardware.catalog import CatalogChoice, parse_assumed_gpu
from fitplan.core.inputs.machine import hypothetical_gpu, planned_machine
from fitplan.core.inputs.user_settings import HypotheticalDevice
from fitplan.gui.backend import Detection

DEVICE_ROLE = Qt.ItemDataRole.UserRole + 1
LIST_MAX_ROWS = 5
CATALOG_MIN_CHARS = 14
SPEC_ROLE = Qt.ItemDataRole.UserRole + 2


def _describe(d: Device) -> str:
    tag = "  (hypothetical)" if d.hypothetical else ""
    if d.free_bytes == d.total_bytes:
        return f"{d.name}: {d.total_bytes / GIB:.1f} GiB{tag}"
    return f"{d.name}: {d.free_bytes / GIB:.1f} GiB free of {d.total_bytes / GIB:.1f} GiB{tag}"


class HardwarePanel(QWidget):
    devices_changed = Signal()

    def __init__(
        self, catalog: tuple[tuple[str, tuple[CatalogChoice, ...]], ...], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._detected: tuple[Device, ...] = ()
        self._host: Device | None = None
        self._items: list[Device] = []  # the device of each list row (rows carry their index)
        self.host_label = QLabel("System RAM: detecting…")
        self.host_label.setToolTip(
            "Host memory: holds the layers not offloaded, the embeddings and the output buffer"
        )
        self.host_ram = QDoubleSpinBox(suffix=" GiB", decimals=0, minimum=0.0, maximum=4096.0, value=0.0)
        self.host_ram.setSpecialValueText("as detected")
        self.host_ram.setToolTip(
            "System RAM to plan for (like --host-ram): a hypothetical machine's RAM, assumed entirely free; "
            "'as detected' plans for this machine's free RAM"
        )
        self.host_ram.valueChanged.connect(lambda _v: self.devices_changed.emit())
        self.list = QListWidget()
        self.list.setToolTip("Tick the GPUs to plan for. Hypothetical GPUs are assumed entirely free.")
        self.list.itemChanged.connect(lambda _item: self.devices_changed.emit())
        self.list.setUniformItemSizes(True)
        self.empty_hint = QLabel("No GPU detected: add a hypothetical one below to plan for it.")
        self.empty_hint.setWordWrap(True)

        self.catalog = self._catalog_box(catalog)
        self.add_catalog = QPushButton("Add")
        self.add_catalog.setToolTip("Add the chosen or typed GPU(s) as hypothetical devices")
        self.add_catalog.clicked.connect(self._add_from_catalog)
        self.spec_error = QLabel("")  # why a typed GPU could not be read (the core's one-line message)
        self.spec_error.setTextFormat(Qt.TextFormat.PlainText)
        self.spec_error.setWordWrap(True)
        self.spec_error.setStyleSheet("color: #D55E00;")
        self.spec_error.setVisible(False)
        self.size_box = QDoubleSpinBox(suffix=" GiB", decimals=1, minimum=1.0, maximum=1024.0, value=24.0)
        self.size_box.setToolTip("Memory of a hypothetical GPU of any size")
        self.add_size = QPushButton("Add by size")
        self.add_size.setToolTip("Add a hypothetical GPU with this much memory, entirely free")
        self.add_size.clicked.connect(self._add_by_size)
        self.remove = QPushButton("Remove")
        self.remove.setToolTip("Remove the selected hypothetical GPU")
        self.remove.clicked.connect(self._remove_selected)

        row1 = QHBoxLayout()
        row1.addWidget(self.catalog, 1)
        row1.addWidget(self.add_catalog)
        row2 = QHBoxLayout()
        row2.addWidget(self.size_box, 1)
        row2.addWidget(self.add_size)
        row2.addWidget(self.remove)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        host_row = QHBoxLayout()
        host_row.addWidget(QLabel("Plan for system RAM:"))
        host_row.addWidget(self.host_ram, 1)
        layout.addWidget(self.host_label)
        layout.addLayout(host_row)
        layout.addWidget(self.empty_hint)
        layout.addWidget(self.list)
        layout.addLayout(row1)
        layout.addWidget(self.spec_error)
        layout.addLayout(row2)

    def _catalog_box(self, catalog: tuple[tuple[str, tuple[CatalogChoice, ...]], ...]) -> QComboBox:
        """The catalog by vendor and market, each group under a heading that cannot be chosen; editable: typing
        searches the names, and what `--assume-gpu` takes ("2x RTX 3060", "H100 80GB", "NAME=SIZE") is added."""
        box = QComboBox()
        box.setEditable(True)
        box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        model = QStandardItemModel(box)
        for title, choices in catalog:
            heading = QStandardItem(f"— {title} —")
            heading.setEnabled(False)
            heading.setSelectable(False)
            font = heading.font()
            font.setBold(True)
            heading.setFont(font)
            model.appendRow(heading)
            for choice in choices:
                item = QStandardItem(choice.label)
                item.setData(choice.spec, SPEC_ROLE)
                model.appendRow(item)
        box.setModel(model)
        completer = QCompleter(model, box)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        completer.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
        box.setCompleter(completer)
        box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        box.setMinimumContentsLength(CATALOG_MIN_CHARS)
        box.setCurrentIndex(-1)  # the placeholder says what can be typed
        line = box.lineEdit()
        if line is not None:
            line.setPlaceholderText("Search, or type 2x RTX 3060, H100 80GB, NAME=24GiB")
            line.returnPressed.connect(self._add_from_catalog)
        box.setToolTip(
            "A GPU to plan for without having it: pick one from the catalog (type to search), or type what "
            "--assume-gpu takes: a name (RTX 4090), a count (2x RTX 3060), a memory configuration (H100 80GB), "
            "a size (24GiB) or NAME=SIZE (my card=11.5GiB)"
        )
        return box

    # -- state ---------------------------------------------------------------------------------------------------
    def set_detection(
        self,
        detection: Detection,
        hypothetical: tuple[HypotheticalDevice, ...] | None = None,
        planned: tuple[str, ...] | None = None,
    ) -> None:
        """Show the detected devices plus `hypothetical` ones (default: those shown now), ticking `planned`."""
        if hypothetical is None:
            hypothetical, planned = self.hypothetical(), self.planned_names()
        self._detected = detection.gpus
        self._host = detection.host
        if detection.host.total_bytes:
            self.host_label.setText(
                f"System RAM: {detection.host.free_bytes / GIB:.1f} GiB free of "
                f"{detection.host.total_bytes / GIB:.1f} GiB"
            )
        else:
            self.host_label.setText("System RAM: unknown")
        self._rebuild(hypothetical, planned)

    def set_hypothetical(
        self, devices: tuple[HypotheticalDevice, ...], planned: tuple[str, ...] | None
    ) -> None:
        self._rebuild(devices, planned)

    def _rebuild(self, hypothetical: tuple[HypotheticalDevice, ...], planned: tuple[str, ...] | None) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        self._items = []
        for d in self._detected:
            self._add_item(d, planned)
        for h in hypothetical:
            self._add_item(hypothetical_gpu(h.name, h.total_bytes, h.vendor, h.host_shared_bytes), planned)
        self.list.blockSignals(False)
        self.empty_hint.setVisible(self.list.count() == 0 and self._host is not None)
        self.list.setVisible(self.list.count() > 0)
        rows = min(LIST_MAX_ROWS, max(1, self.list.count()))
        row_height = self.list.sizeHintForRow(0) if self.list.count() else self.fontMetrics().height() + 4
        self.list.setFixedHeight(rows * row_height + 2 * self.list.frameWidth() + 2)
        self.devices_changed.emit()

    def _add_item(self, device: Device, planned: tuple[str, ...] | None) -> None:
        item = QListWidgetItem(_describe(device))
        item.setData(DEVICE_ROLE, len(self._items))
        self._items.append(device)
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        checked = planned is None or device.name in planned
        item.setCheckState(Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)
        self.list.addItem(item)

    def devices(self) -> list[tuple[Device, bool]]:
        out = []
        for i in range(self.list.count()):
            item = self.list.item(i)
            out.append((self._items[int(item.data(DEVICE_ROLE))], item.checkState() == Qt.CheckState.Checked))
        return out

    def host_ram_gib(self) -> int:
        """The system RAM to plan for, in GiB; 0: as detected."""
        return round(self.host_ram.value())

    def set_host_ram_gib(self, gib: int) -> None:
        """Restore a saved host RAM size without announcing a change (the devices are not known yet)."""
        self.host_ram.blockSignals(True)
        self.host_ram.setValue(max(0, min(gib, round(self.host_ram.maximum()))))
        self.host_ram.blockSignals(False)

    def hypothetical(self) -> tuple[HypotheticalDevice, ...]:
        return tuple(
            HypotheticalDevice(d.name, d.total_bytes, d.vendor.value, d.host_shared_bytes)
            for d, _on in self.devices()
            if d.hypothetical
        )

    def planned_names(self) -> tuple[str, ...] | None:
        devs = self.devices()
        if not devs:
            return None
        names = tuple(d.name for d, on in devs if on)
        return None if len(names) == len(devs) else names

    def machine(self) -> Machine | None:
        if self._host is None:
            return None
        gib = self.host_ram.value()
        return planned_machine(
            [d for d, on in self.devices() if on], self._host, int(gib * GIB) if gib > 0 else None
        )

    # -- actions -------------------------------------------------------------------------------------------------
    def _unique(self, name: str, more: tuple[HypotheticalDevice, ...] = ()) -> str:
        taken = {d.name for d, _on in self.devices()} | {h.name for h in more}
        if name not in taken:
            return name
        n = 2
        while f"{name} #{n}" in taken:
            n += 1
        return f"{name} #{n}"

    def add_hypothetical(
        self, name: str, total_bytes: int, vendor: str = "nvidia", count: int = 1, shared: int = 0
    ) -> None:
        """Add `count` hypothetical GPUs of this name and size (each told apart: "RTX 3060", "RTX 3060 #2"),
        `shared` bytes of each being host RAM (a unified-memory machine, an APU's GTT)."""
        h = self.hypothetical()
        planned = self.planned_names()
        for _ in range(count):
            h = (*h, HypotheticalDevice(self._unique(name, h), total_bytes, vendor, shared))
            if planned is not None:
                planned = (*planned, h[-1].name)
        self._rebuild(h, planned)

    def chosen_spec(self) -> str:
        """What the catalog box holds: the chosen entry's spec, or the text typed into it."""
        text = self.catalog.currentText().strip()
        index = self.catalog.findText(text, Qt.MatchFlag.MatchFixedString)
        spec = self.catalog.itemData(index, SPEC_ROLE) if index >= 0 else None
        return str(spec) if spec else text

    def add_spec(self, spec: str) -> bool:
        """Add the GPU(s) of an `--assume-gpu` spec, read by the core's parser; a spec it cannot read is said in
        one line under the box (nothing is added, the text stays to be corrected)."""
        try:
            gpu = parse_assumed_gpu(spec)
        except FitplanError as exc:
            self.spec_error.setText(str(exc))
            self.spec_error.setVisible(True)
            return False
        self.spec_error.setVisible(False)
        self.add_hypothetical(gpu.name, gpu.memory_bytes, gpu.vendor.value, gpu.count, gpu.shared_bytes)
        return True

    def _add_from_catalog(self) -> None:
        self.add_spec(self.chosen_spec())

    def _add_by_size(self) -> None:
        self.spec_error.setVisible(False)
        gib = self.size_box.value()
        self.add_hypothetical(f"{gib:g} GiB GPU", int(gib * GIB))

    def _remove_selected(self) -> None:
        item = self.list.currentItem()
        if item is None:
            return
        device = self._items[int(item.data(DEVICE_ROLE))]
        if not device.hypothetical:
            return
        remaining = tuple(h for h in self.hypothetical() if h.name != device.name)
        self._rebuild(remaining, self.planned_names())
