"""All devices at a glance: for each planned device one bar, "used / capacity", split by memory term.

The bar's full width is the device's free memory; the dashed tick is the margin the plan keeps free on it (each GPU's
and the host's, as the planner applies them); a device over its capacity gets a red outline and its text says by how
much. On a machine whose GPU allocates from host RAM (unified memory, an APU's GTT) the host's bar also shows, hatched,
the part of its RAM the GPU takes: one pool, counted once.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QWidget

from fitplan.core.base.devices import GIB, DeviceKind
from fitplan.core.base.results import TERM_ORDER, DeviceEstimate, Estimate, TermKind
from fitplan.gui.backend import term_label
from fitplan.gui.naming import device_names
from fitplan.gui.theme import CAPACITY_COLOUR, MARGIN_COLOUR, TERM_COLOURS, foreground

BAR_HEIGHT = 14
OVER_COLOUR = "#D55E00"


class _Bar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.parts: list[tuple[TermKind, int]] = []
        self.shared = 0  # host RAM the GPUs take (drawn hatched after the parts)
        self.capacity = 1
        self.margin = 0
        self.setMinimumWidth(60)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(160, BAR_HEIGHT)

    def minimumSizeHint(self) -> QSize:
        return QSize(60, BAR_HEIGHT)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        rect = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        used = sum(n for _k, n in self.parts) + self.shared
        total = max(self.capacity, used, 1)
        x = rect.left()
        for kind, n in self.parts:
            w = rect.width() * n / total
            painter.fillRect(QRectF(x, rect.top(), w, rect.height()), QColor(TERM_COLOURS[kind]))
            x += w
        if self.shared > 0:
            w = rect.width() * self.shared / total
            painter.fillRect(
                QRectF(x, rect.top(), w, rect.height()),
                QBrush(QColor(foreground()), Qt.BrushStyle.BDiagPattern),
            )
        over = used > self.capacity
        painter.setPen(QPen(QColor(OVER_COLOUR if over else foreground()), 2 if over else 1))
        painter.drawRect(rect)
        if self.capacity < total:  # the capacity inside an overfull bar
            cx = rect.left() + rect.width() * self.capacity / total
            painter.setPen(QPen(QColor(CAPACITY_COLOUR), 2))
            painter.drawLine(int(cx), int(rect.top()), int(cx), int(rect.bottom()))
        if self.margin > 0:
            mx = rect.left() + rect.width() * max(0, self.capacity - self.margin) / total
            painter.setPen(QPen(QColor(MARGIN_COLOUR), 1, Qt.PenStyle.DashLine))
            painter.drawLine(int(mx), int(rect.top()), int(mx), int(rect.bottom()))
        painter.end()


class DeviceBarsPanel(QWidget):
    """One row per device of the estimate: name, bar, "used / capacity GiB"."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setHorizontalSpacing(6)
        self._grid.setVerticalSpacing(2)
        self._grid.setColumnStretch(1, 1)
        self.rows: list[tuple[QLabel, _Bar, QLabel]] = []
        self.empty = QLabel("The memory of each device appears here once a model is open.")
        self.empty.setTextFormat(Qt.TextFormat.PlainText)
        self.empty.setWordWrap(True)
        self._grid.addWidget(self.empty, 0, 0, 1, 3)

    def clear(self) -> None:
        for name, bar, text in self.rows:
            for w in (name, bar, text):
                w.setVisible(False)
        self.empty.setVisible(True)

    def _row(self, i: int) -> tuple[QLabel, _Bar, QLabel]:
        while len(self.rows) <= i:
            name, bar, text = QLabel(), _Bar(), QLabel()
            for label in (name, text):
                label.setTextFormat(Qt.TextFormat.PlainText)
            # A long card name ("GeForce RTX 4070 Ti SUPER (GPU1)") wraps instead of widening the settings column
            # past the window.
            name.setWordWrap(True)
            text.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            n = len(self.rows) + 1
            self._grid.addWidget(name, n, 0)
            self._grid.addWidget(bar, n, 1)
            self._grid.addWidget(text, n, 2)
            self.rows.append((name, bar, text))
        return self.rows[i]

    def set_estimate(self, estimate: Estimate, margins: tuple[int, ...]) -> None:
        """`margins`: the bytes the plan keeps free on each device of the estimate (the core's `kept_free`)."""
        names = device_names([d.device for d in estimate.devices])
        labels = {id(d): n for d, n in zip(estimate.devices, names, strict=True)}
        # Every device the plan uses has its bar, a GPU given no layers too; a GPU left out by -dev has none.
        from fitplan.core.plan.usage import planned_positions

        shown = [
            (estimate.devices[i], margins[i] if i < len(margins) else 0) for i in planned_positions(estimate)
        ]
        self.empty.setVisible(not shown)
        shared = estimate.gpu_host_share_bytes
        for i, (de, margin) in enumerate(shown):
            name, bar, text = self._row(i)
            host_share = shared if de.device.kind is DeviceKind.CPU else 0
            self._fill(de, labels[id(de)], margin, name, bar, text, host_share)
        for name, bar, text in self.rows[len(shown) :]:
            for w in (name, bar, text):
                w.setVisible(False)

    @staticmethod
    def _fill(
        de: DeviceEstimate, label: str, margin: int, name: QLabel, bar: _Bar, text: QLabel, shared: int = 0
    ) -> None:
        bar.parts = [(k, de.bytes_of(k)) for k in TERM_ORDER if de.bytes_of(k) > 0]
        bar.shared = shared
        bar.capacity = de.device.free_bytes
        bar.margin = margin
        used, cap = de.used_bytes + shared, de.device.free_bytes
        name.setText(label)
        empty = not de.terms and de.device.kind is not DeviceKind.CPU
        state = " over" if used > cap else (", holds nothing" if empty else "")
        text.setText(f"{used / GIB:.1f} / {cap / GIB:.1f} GiB{state}")
        lines = [f"{label}: {used / GIB:.2f} GiB of {cap / GIB:.2f} GiB free"]
        if empty:
            lines.append("  the plan gives it no layers: it holds nothing")
        lines += [f"  {term_label(k)}: {n / GIB:.2f} GiB" for k, n in bar.parts]
        if shared:
            lines.append(f"  taken by the GPUs (shared memory, one pool): {shared / GIB:.2f} GiB (hatched)")
        if margin:
            lines.append(f"  margin kept free: {margin / GIB:.2f} GiB (dashed)")
        tip = "\n".join(lines)
        for w in (name, bar, text):
            w.setToolTip(tip)
            w.setVisible(True)
        bar.update()
