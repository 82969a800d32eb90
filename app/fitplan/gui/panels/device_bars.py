"""All devices at a glance: for each planned device one bar, "used / capacity", split by memory term.

The bar's full width is the device's memory: what other programs hold now first (grey, hatched; by process in the
tooltip and the line under the bar, where the driver tells it: the core's `held_memory`), then the plan's terms over
the free memory; the dashed tick is the margin the plan keeps free on it (each GPU's and the host's, as the planner
applies them); a device over its capacity gets a red outline and its text says by how much. On a machine whose GPU allocates from host RAM (unified memory, an APU's GTT) the host's bar also shows, hatched,
the part of its RAM the GPU takes: one pool, counted once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QWidget

from fitplan.core.base.devices import GIB, DeviceKind
from fitplan.core.base.results import TERM_ORDER, DeviceEstimate, Estimate, TermKind
from fitplan.gui.backend import term_label
from fitplan.gui.naming import device_names
from fitplan.gui.theme import CAPACITY_COLOUR, MARGIN_COLOUR, OTHERS_COLOUR, TERM_COLOURS, foreground

if TYPE_CHECKING:
    from fitplan.core.plan.held import DeviceHeld

BAR_HEIGHT = 14
OVER_COLOUR = "#D55E00"


class _Bar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.parts: list[tuple[TermKind, int]] = []
        self.shared = 0  # host RAM the GPUs take (drawn hatched after the parts)
        self.capacity = 1
        self.margin = 0
        self.others = 0  # held by other programs now: drawn first, outside the free memory
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
        total = self.others + max(self.capacity, used, 1)
        x = rect.left()
        if self.others > 0:
            w = rect.width() * self.others / total
            painter.fillRect(QRectF(x, rect.top(), w, rect.height()), QColor(OTHERS_COLOUR))
            painter.fillRect(
                QRectF(x, rect.top(), w, rect.height()),
                QBrush(QColor(foreground()), Qt.BrushStyle.FDiagPattern),
            )
            x += w
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
        if self.others + self.capacity < total:  # the capacity inside an overfull bar
            cx = rect.left() + rect.width() * (self.others + self.capacity) / total
            painter.setPen(QPen(QColor(CAPACITY_COLOUR), 2))
            painter.drawLine(int(cx), int(rect.top()), int(cx), int(rect.bottom()))
        if self.margin > 0:
            mx = rect.left() + rect.width() * (self.others + max(0, self.capacity - self.margin)) / total
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
        self.held: list[QLabel] = []  # under each bar: who holds the memory the plan cannot use
        self.empty = QLabel("The memory of each device appears here once a model is open.")
        self.empty.setTextFormat(Qt.TextFormat.PlainText)
        self.empty.setWordWrap(True)
        self._grid.addWidget(self.empty, 0, 0, 1, 3)

    def clear(self) -> None:
        for name, bar, text in self.rows:
            for w in (name, bar, text):
                w.setVisible(False)
        for label in self.held:
            label.setVisible(False)
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
            n = 2 * len(self.rows) + 1
            self._grid.addWidget(name, n, 0)
            self._grid.addWidget(bar, n, 1)
            self._grid.addWidget(text, n, 2)
            held = QLabel()
            held.setTextFormat(Qt.TextFormat.PlainText)
            held.setWordWrap(True)
            held.setVisible(False)
            font = held.font()
            font.setPointSizeF(font.pointSizeF() * 0.9)
            held.setFont(font)
            self._grid.addWidget(held, n + 1, 1, 1, 2)
            self.rows.append((name, bar, text))
            self.held.append(held)
        return self.rows[i]

    def set_estimate(
        self, estimate: Estimate, margins: tuple[int, ...], held: tuple[DeviceHeld, ...] = ()
    ) -> None:
        """`margins`: the bytes the plan keeps free on each device of the estimate (the core's `kept_free`);
        `held`: each device by owner (the core's `held_memory`, same positions), () when not known."""
        names = device_names([d.device for d in estimate.devices])
        labels = {id(d): n for d, n in zip(estimate.devices, names, strict=True)}
        # Every device the plan uses has its bar, a GPU given no layers too; a GPU left out by -dev has none.
        from fitplan.core.plan.usage import planned_positions

        shown = [
            (estimate.devices[i], margins[i] if i < len(margins) else 0, held[i] if i < len(held) else None)
            for i in planned_positions(estimate)
        ]
        self.empty.setVisible(not shown)
        shared = estimate.gpu_host_share_bytes
        for i, (de, margin, owners) in enumerate(shown):
            name, bar, text = self._row(i)
            host_share = shared if de.device.kind is DeviceKind.CPU else 0
            self._fill(de, labels[id(de)], margin, name, bar, text, host_share)
            self._fill_held(owners, bar, self.held[i], (name, bar, text))
        for (name, bar, text), label in zip(self.rows[len(shown) :], self.held[len(shown) :], strict=True):
            for w in (name, bar, text, label):
                w.setVisible(False)

    @staticmethod
    def _fill_held(owners: DeviceHeld | None, bar: _Bar, label: QLabel, row: tuple[QWidget, ...]) -> None:
        """What other programs hold on the device, drawn before the free memory (grey, hatched) and in the tooltip;
        named under the bar where the driver lists the processes."""
        others = owners.others_bytes if owners is not None and owners.use_free else 0
        bar.others = others
        named = [h for h in owners.holders if h.pid] if owners is not None and others else []
        label.setVisible(bool(named))
        if owners is None or not others:
            return
        if named:
            rest = [h for h in owners.holders if not h.pid]
            who = [
                f"{h.name or h.label} {h.bytes / GIB:.1f}" if h.bytes is not None else h.label for h in named
            ]
            who += [f"{h.name} {(h.bytes or 0) / GIB:.1f}" for h in rest]
            label.setText(f"others hold {others / GIB:.1f} GiB: " + ", ".join(who))
        extra = "\n".join(f"  {line}" for line in owners.others_lines())
        for w in (*row, label):
            w.setToolTip(f"{w.toolTip()}\n{extra}")
        bar.update()

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
