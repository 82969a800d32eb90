"""Models panel: the library list (name, architecture, quant, size, params, fit), a filter, and ways to open more.

The list holds the bundled header-only examples (marked "example"), the models of the user's folders and of the
usual download places (found by `fitplan.core.library`), and every model opened by path or URL.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QSize,
    QSortFilterProxyModel,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QAction, QFont, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QGridLayout,
    QHeaderView,
    QInputDialog,
    QLineEdit,
    QMenu,
    QPushButton,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from fitplan.core.library.model import LibraryModel, RootKind
from fitplan.gui.backend import LoadedModel, VerdictLevel
from fitplan.gui.theme import plain_tip

NAME_MIN_WIDTH = 120
NARROW_WIDTH = 520  # below this the panel shows name, quant, size and fit only
VERY_NARROW_WIDTH = 280  # below this the quant and size columns go too, so names stay readable
QUANT_COLUMN = 2
SIZE_COLUMN = 3
BUTTONS_TWO_ROWS_WIDTH = 360  # below this the four buttons take two rows
OPTIONAL_COLUMNS = (1, 4)  # Arch, Params
SORT_ROLE = Qt.ItemDataRole.UserRole + 1
PATH_ROLE = Qt.ItemDataRole.UserRole + 2
FIT_BADGES = {VerdictLevel.FITS: "✔", VerdictLevel.OFFLOAD: "◐", VerdictLevel.NO_FIT: "✘", "": ""}
FIT_WORDS = {
    VerdictLevel.FITS: "fits on the planned devices",
    VerdictLevel.OFFLOAD: "fits only with part of it on the CPU",
    VerdictLevel.NO_FIT: "does not fit",
    "": "not estimated yet (open it to estimate)",
}


@dataclass(frozen=True, slots=True)
class ModelRow:
    path: str
    name: str
    arch: str
    quant: str
    size: int
    params: int
    fit: str = ""  # a VerdictLevel, "" when not estimated yet
    example: bool = False  # a bundled header-only example
    projector: bool = False  # a vision projector goes with it
    placeholder: bool = False  # a URL opened in an earlier session, not read again yet

    @staticmethod
    def of(model: LoadedModel) -> ModelRow:
        p = model.profile
        return ModelRow(
            model.source,
            p.name,
            p.architecture,
            p.file_type,
            max(p.file_size, p.weight_bytes),
            p.n_params,
            projector=model.mmproj is not None,
        )

    @staticmethod
    def of_entry(entry: LibraryModel) -> ModelRow:
        size = entry.expected_size if entry.header_only else entry.file_size
        return ModelRow(
            entry.path,
            entry.name or entry.display_name,
            entry.architecture,
            entry.file_type,
            size,
            entry.n_params,
            example=entry.root_kind is RootKind.EXAMPLES,
            projector=entry.mmproj_path is not None,
        )

    @property
    def label(self) -> str:
        """The name as the list shows it: "+ vision" for a model with its projector, "(example)" for a bundled example."""
        return self.name + (" + vision" if self.projector else "") + (" (example)" if self.example else "")


class ModelTableModel(QAbstractTableModel):
    HEADERS = ("Name", "Arch", "Quant", "Size", "Params", "Fit")
    ALIGN_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def __init__(self) -> None:
        super().__init__()
        self._rows: list[ModelRow] = []

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.HEADERS)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> object:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.HEADERS[section]
        return None

    def data(
        self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole
    ) -> object:
        if not index.isValid():
            return None
        row = self._rows[index.row()]
        col = index.column()
        if role == PATH_ROLE:
            return row.path
        if role == Qt.ItemDataRole.ToolTipRole:
            extra = (
                "\nHeader-only example bundled with fitplan (no weights, real memory figures)"
                if row.example
                else ""
            )
            pair = "\nwith its vision projector (mmproj)" if row.projector else ""
            if row.placeholder:
                return plain_tip(f"{row.path}\nopened before; click to read its header again")
            return plain_tip(
                f"{row.name}\n{row.arch}, {row.params / 1e9:.1f}B parameters, {row.quant}{pair}\n"
                f"{row.path}\n{FIT_WORDS.get(row.fit, '')}{extra}"
            )
        if role == Qt.ItemDataRole.FontRole and row.example and col == 0:
            font = QFont()
            font.setItalic(True)
            return font
        if role == SORT_ROLE:
            # Numbers as floats: Qt compares an int and a 64-bit int (sizes over 2 GiB) of two rows as text.
            return (row.label.lower(), row.arch, row.quant, float(row.size), float(row.params), row.fit)[col]
        if role == Qt.ItemDataRole.DisplayRole:
            if row.placeholder and col in (3, 4):
                return ""
            if col == 3:
                return f"{row.size / (1 << 30):.1f} GiB"
            if col == 4:
                return f"{row.params / 1e9:.1f}B"
            return (row.label, row.arch, row.quant, "", "", FIT_BADGES.get(row.fit, ""))[col]
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (3, 4, 5):
            return self.ALIGN_RIGHT
        return None

    def add(self, row: ModelRow) -> None:
        for i, existing in enumerate(self._rows):
            if existing.path == row.path:
                # what the scan knew (an example, its projector) and the last fit badge stay
                self._rows[i] = replace(
                    row,
                    example=existing.example or row.example,
                    projector=existing.projector or row.projector,
                    fit=row.fit or existing.fit,
                )
                self.dataChanged.emit(self.index(i, 0), self.index(i, len(self.HEADERS) - 1))
                return
        self.beginInsertRows(QModelIndex(), len(self._rows), len(self._rows))
        self._rows.append(row)
        self.endInsertRows()

    def set_fit(self, path: str, fit: str) -> None:
        for i, existing in enumerate(self._rows):
            if existing.path == path and existing.fit != fit:
                self._rows[i] = replace(existing, fit=fit)
                self.dataChanged.emit(self.index(i, 5), self.index(i, 5))

    def paths(self) -> list[str]:
        return [r.path for r in self._rows]


class ModelsPanel(QWidget):
    open_requested = Signal(str)  # a path or URL
    folder_added = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = ModelTableModel()
        self.start_folder = ""
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setSortRole(SORT_ROLE)
        self.proxy.setFilterKeyColumn(-1)
        self.proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)

        self.filter_box = QLineEdit(placeholderText="Filter models")
        self.filter_box.setClearButtonEnabled(True)
        self.filter_box.setToolTip("Show only models whose name, architecture or quant contains this text")
        self.filter_box.textChanged.connect(self.proxy.setFilterFixedString)

        self.open_button = QPushButton("Open…")
        self.open_button.setToolTip("Open a .gguf file (Ctrl+O). Split models: open the first shard.")
        self.open_button.clicked.connect(self.ask_open_file)
        self.url_button = QPushButton("URL…")
        self.url_button.setToolTip("Read a model's header from a URL (only the header is downloaded)")
        self.url_button.clicked.connect(self.ask_open_url)
        self.folder_button = QPushButton("Add folder…")
        self.folder_button.setToolTip("Scan a folder (and its subfolders) for .gguf models")
        self.folder_button.clicked.connect(self.ask_add_folder)
        self.recent_button = QToolButton()
        self.recent_button.setText("Recent")
        self.recent_button.setToolTip("Models you opened recently")
        self.recent_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.recent_menu = QMenu(self)
        self.recent_button.setMenu(self.recent_menu)

        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(False)
        self.table.setTabKeyNavigation(False)  # Tab leaves the table (the arrow keys move within it)
        header = self.table.horizontalHeader()
        for col in range(1, len(ModelTableModel.HEADERS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setMinimumSectionSize(NAME_MIN_WIDTH // 4)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.table.activated.connect(self._activated)
        self.table.clicked.connect(self._activated)
        # The highlight follows the open model: a filter, a sort or new rows put it back on its row (or on none).
        self._open_path = ""
        self._reselect = QTimer(self)
        self._reselect.setSingleShot(True)
        self._reselect.setInterval(0)
        self._reselect.timeout.connect(self._show_open)
        for signal in (
            self.proxy.layoutChanged,
            self.proxy.rowsInserted,
            self.proxy.rowsRemoved,
            self.proxy.modelReset,
        ):
            signal.connect(self._reselect.start)

        buttons = QGridLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        self._buttons = buttons
        self._two_rows: bool | None = None
        self._place_buttons(two_rows=False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(buttons)
        layout.addWidget(self.filter_box)
        layout.addWidget(self.table)

    def _place_buttons(self, two_rows: bool) -> None:
        if two_rows == self._two_rows:
            return
        self._two_rows = two_rows
        for i, b in enumerate((self.open_button, self.url_button, self.folder_button, self.recent_button)):
            self._buttons.removeWidget(b)
            self._buttons.addWidget(b, i // 2 if two_rows else 0, i % 2 if two_rows else i)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), BUTTONS_TWO_ROWS_WIDTH // 2), hint.height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Narrow: hide the architecture and parameter columns (both stay in the tooltip and the summary) and put
        the buttons on two rows."""
        narrow = event.size().width() < NARROW_WIDTH
        for col in OPTIONAL_COLUMNS:
            self.table.setColumnHidden(col, narrow)
        for col in (QUANT_COLUMN, SIZE_COLUMN):  # both in the tooltip and the summary too
            self.table.setColumnHidden(col, event.size().width() < VERY_NARROW_WIDTH)
        self._place_buttons(event.size().width() < BUTTONS_TWO_ROWS_WIDTH)
        super().resizeEvent(event)

    def add_model(self, model: LoadedModel) -> None:
        self.model.add(ModelRow.of(model))

    def add_entry(self, entry: LibraryModel) -> None:
        self.model.add(ModelRow.of_entry(entry))

    def add_placeholder(self, url: str) -> None:
        """A model opened by URL in an earlier session: listed by its file name until it is clicked."""
        if url not in self.model.paths():
            name = url.rstrip("/").rsplit("/", 1)[-1]
            self.model.add(ModelRow(url, name, "", "", 0, 0, placeholder=True))

    def set_fit(self, path: str, level: str) -> None:
        self.model.set_fit(path, level)

    def set_start_folder(self, folder: str) -> None:
        """Where File > Open starts: the folder of the last model opened."""
        self.start_folder = folder

    def select(self, path: str) -> None:
        """Highlight the open model's row (`path`; "" when no model is open), now and after every filter or sort."""
        self._open_path = path
        self._show_open()

    def selected_path(self) -> str:
        rows = self.table.selectionModel().selectedRows()
        path = rows[0].data(PATH_ROLE) if rows else ""
        return path if isinstance(path, str) else ""

    def _show_open(self) -> None:
        for row in range(self.proxy.rowCount()):
            idx = self.proxy.index(row, 0)
            if self._open_path and idx.data(PATH_ROLE) == self._open_path:
                if self.selected_path() != self._open_path:
                    self.table.selectRow(row)
                self.table.scrollTo(idx)
                return
        self.table.selectionModel().clearSelection()  # the open model is filtered out: no other row looks open

    def set_recent(self, paths: tuple[str, ...]) -> None:
        self.recent_menu.clear()
        for p in paths:
            action = QAction(p, self.recent_menu)
            action.triggered.connect(lambda _checked=False, path=p: self.open_requested.emit(path))
            self.recent_menu.addAction(action)
        self.recent_button.setEnabled(bool(paths))

    def _activated(self, index: QModelIndex) -> None:
        path = index.data(PATH_ROLE)
        if isinstance(path, str):
            self.open_requested.emit(path)

    def ask_open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open a GGUF model", self.start_folder, "GGUF models (*.gguf);;All files (*)"
        )
        if path:
            self.open_requested.emit(path)

    def ask_open_url(self) -> None:
        url, ok = QInputDialog.getText(self, "Open a model by URL", "URL of a .gguf file (https://…):")
        if ok and url.strip():
            self.open_requested.emit(url.strip())

    def ask_add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of models", self.start_folder)
        if folder:
            self.folder_added.emit(folder)
