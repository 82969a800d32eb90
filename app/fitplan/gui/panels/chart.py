"""Chart: memory against context for one device, stacked by term, with capacity, margin and the chosen context.

The plot is built by `build()`, once: pyqtgraph is imported then, after the window's first paint (the window opens
without waiting for it; until then an empty frame of the plot's size holds its place). Every plot item is created
there; updates only call `setData` / `setValue` / `setRegion`. The x axis is log2(context) with ticks labelled in
tokens (4K, 32K, 128K...).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QComboBox, QFrame, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from fitplan.core.base.devices import GIB
from fitplan.core.base.results import TERM_ORDER, TermKind
from fitplan.core.base.units import fmt_ctx
from fitplan.gui.backend import CurveData, term_label
from fitplan.gui.naming import device_names
from fitplan.gui.panels.launch_controls import snap_context
from fitplan.gui.theme import (
    CAPACITY_COLOUR,
    CONTEXT_LINE_COLOUR,
    MARGIN_COLOUR,
    TERM_COLOURS,
    background,
    background_fill,
    foreground,
)

if TYPE_CHECKING:
    import pyqtgraph as pg

    from fitplan.core.plan.held import DeviceHeld

X_PAD = 0.5  # log2 units right of the last context, so its tick label fits
Y_HEADROOM = 1.15  # room above the capacity line for the context line's label
HOVER_HINT = "Hover over the chart to read every part of the memory at that context."
MAX_LINE_COLOUR = "#009E73"
TRAINED_COLOUR = "#999999"
DEVICE_BOX_CHARS = 14
PLOT_MIN_HEIGHT = 136
TICK_CONTEXTS = (256, 1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)
MAJOR_TICKS = (1024, 4096, 32768, 131072, 1048576)


def _ticks(lo: float, hi: float) -> list[list[tuple[float, str]]]:
    major = [(math.log2(c), fmt_ctx(c)) for c in MAJOR_TICKS if lo - 0.01 <= math.log2(c) <= hi + 0.01]
    minor = [
        (math.log2(c), fmt_ctx(c)) for c in TICK_CONTEXTS if c not in MAJOR_TICKS and lo <= math.log2(c) <= hi
    ]
    return [major, minor]


def legend_html(kinds: list[TermKind]) -> str:
    """Coloured squares and names, in stacking order (bottom band first); lines break between entries only."""
    return "&nbsp;&nbsp; ".join(
        f'<span style="color:{TERM_COLOURS[k]}; font-size:large">&#9632;</span>&nbsp;'
        + term_label(k).replace(" ", "&nbsp;")
        for k in kinds
    )


def marks_html(marks: list[tuple[str, str, str]]) -> str:
    """The chart's lines named beside the device box, each after a sample of its colour and dash (no label on the
    plot collides with the bands, the other lines or each other): (colour, glyph, text) in reading order."""
    return "&nbsp;&nbsp; ".join(
        f'<span style="color:{colour}; font-weight:bold">{glyph}</span>&nbsp;' + text.replace(" ", "&nbsp;")
        for colour, glyph, text in marks
    )


def same_curve(a: CurveData, b: CurveData) -> bool:
    """The same memory at the same contexts on the same devices (a new answer for another chosen context)."""
    return a is b or (
        a.devices == b.devices and np.array_equal(a.contexts, b.contexts) and np.array_equal(a.bytes, b.bytes)
    )


class ChartPanel(QWidget):
    context_dragged = Signal(int)  # the user dragged the vertical context line
    device_changed = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._curve: CurveData | None = None
        self._margins: tuple[int, ...] = ()
        self._held: tuple[DeviceHeld, ...] = ()  # each device by owner (`held_memory`)
        self._x = np.zeros(0)
        self._device = 0
        self._setting_context = False
        self._max_context = 0
        self._n_ctx_train = 0
        self._legend_kinds: tuple[TermKind, ...] = ()
        self._drawn: tuple[int, tuple[int, ...], int] | None = (
            None  # (device, margins, training context) shown
        )
        self._ticks: list[list[tuple[float, str]]] = []
        self._user_device = 0  # the device the user picked; a no-fit result may show another for a while

        self.device_box = QComboBox()
        self.device_box.setToolTip("Which device's memory the chart shows")
        # narrow enough to leave the lines' names beside it room (a long card name is elided; the list shows it all)
        self.device_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.device_box.setMinimumContentsLength(DEVICE_BOX_CHARS)
        self.device_box.currentIndexChanged.connect(self._device_chosen)
        self.device_box.activated.connect(self._user_chose)
        self.readout = QLabel(HOVER_HINT)
        self.readout.setTextFormat(Qt.TextFormat.PlainText)
        self.readout.setWordWrap(True)
        self.readout.setMinimumHeight(self.readout.fontMetrics().height() * 2)
        self._context = 0  # the chosen context, shown by the context line once the plot is built
        self._placeholder: QFrame | None = QFrame()  # the plot's place until `build()`
        self._placeholder.setMinimumHeight(PLOT_MIN_HEIGHT)
        self._placeholder.setAutoFillBackground(True)
        self._placeholder.setBackgroundRole(QPalette.ColorRole.Base)
        self._hover_x: float | None = None  # where the pointer last read the chart (log2 context)
        self.marks = QLabel("")
        self.marks.setTextFormat(Qt.TextFormat.RichText)  # our own markup: numbers and colours only
        self.marks.setWordWrap(True)
        small = self.marks.font()
        small.setPointSizeF(small.pointSizeF() * 0.9)
        self.marks.setFont(small)
        self.marks.setToolTip(
            "The lines on the chart: the largest context that fits, the training length, the free memory of this "
            "device and the margin the plan keeps free on it"
        )
        self.legend = QLabel("")
        self.legend.setTextFormat(Qt.TextFormat.RichText)  # our own markup: term names and colours only
        self.legend.setWordWrap(True)
        self.legend.setToolTip(
            "Each coloured band is one part of the memory llama.cpp allocates on this device"
        )

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(QLabel("Device:"))
        top.addWidget(self.device_box)
        top.addWidget(self.marks, 1)  # beside the device: the lines it draws cost the plot no height
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self._placeholder, 1)
        layout.addWidget(self.legend)
        layout.addWidget(self.readout)
        self._layout = layout

        hints = QGuiApplication.styleHints()
        if hints is not None:
            hints.colorSchemeChanged.connect(self._scheme_changed)

    @property
    def built(self) -> bool:
        return self._placeholder is None

    def build(self) -> None:
        """Import pyqtgraph and build the plot in the placeholder's place (once; later calls return at once), then
        show what the panel was given meanwhile."""
        if self._placeholder is None:
            return
        global pg
        import pyqtgraph as pg

        from fitplan.gui.theme import configure_pyqtgraph

        configure_pyqtgraph()
        self.plot = pg.PlotWidget()
        self.plot.setMinimumHeight(PLOT_MIN_HEIGHT)
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        item = self.plot.getPlotItem()
        item.setLabel("left", "GiB")
        item.setLabel("bottom", "context (tokens)")
        item.showGrid(x=True, y=True, alpha=0.15)
        self._add_plot_items()
        self.context_line.sigPositionChanged.connect(self._line_moved)
        self.plot.scene().sigMouseMoved.connect(self._hover)
        self.plot.setAccessibleName("Memory by context chart")
        self._layout.replaceWidget(self._placeholder, self.plot)
        self._placeholder.deleteLater()
        self._placeholder = None
        self.apply_theme()
        self.clear_marks()
        if self._context:
            self.set_context(self._context)
        self._redraw()

    def _add_plot_items(self) -> None:
        """The stacked term areas, the capacity, margin, largest-context, chosen-context and training lines, and the
        region past the largest context that fits."""
        # Stacked areas: each term's item fills from 0 to the cumulative top; lower terms are drawn above.
        self.areas: dict[TermKind, pg.PlotDataItem] = {}
        for z, kind in enumerate(TERM_ORDER):
            colour = QColor(TERM_COLOURS[kind])
            fill = QColor(colour)  # opaque: the bands overlap, each drawn from 0 up to its cumulative top
            area = pg.PlotDataItem(
                [0.0],
                [0.0],
                pen=pg.mkPen(colour, width=1),
                fillLevel=0.0,
                fillBrush=pg.mkBrush(fill),
                antialias=False,
            )
            area.setZValue(-z)
            self.plot.addItem(area)
            self.areas[kind] = area
        self.capacity = pg.InfiniteLine(
            angle=0,
            pen=pg.mkPen(CAPACITY_COLOUR, width=2),
        )
        self.capacity.setToolTip("The free memory of this device")
        self.margin_line = pg.InfiniteLine(
            angle=0,
            pen=pg.mkPen(MARGIN_COLOUR, width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
        )
        self.margin_line.setToolTip(
            "The margin the plan keeps free on this device (GPU or host RAM): it must stay under this line"
        )
        self.max_line = pg.InfiniteLine(
            angle=90,
            pen=pg.mkPen(MAX_LINE_COLOUR, width=2, style=pg.QtCore.Qt.PenStyle.DotLine),
        )
        self.max_line.setToolTip("The largest context that fits the planned devices with the margin")
        self.context_line = pg.InfiniteLine(
            angle=90,
            movable=True,
            pen=pg.mkPen(CONTEXT_LINE_COLOUR, width=2),
            hoverPen=pg.mkPen(CONTEXT_LINE_COLOUR, width=4),
            label="",
            # the only label on the plot: in the strip above the free-memory line, on a background of its own
            labelOpts={"position": 0.96, "color": CONTEXT_LINE_COLOUR, "fill": background_fill()},
        )
        self.context_line.setToolTip("The chosen context: drag to change it")
        self.trained = pg.InfiniteLine(
            angle=90,
            pen=pg.mkPen(TRAINED_COLOUR, width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
        )
        self.trained.setToolTip("The model's training context: longer contexts may degrade quality")
        self.plot.addItem(self.trained, ignoreBounds=True)
        self.too_big = pg.LinearRegionItem(
            values=(20, 21),
            movable=False,
            brush=pg.mkBrush(QColor(213, 94, 0, 45)),
            pen=pg.mkPen(None),
        )
        self.too_big.setZValue(5)
        for line in (self.capacity, self.margin_line, self.max_line):
            self.plot.addItem(line, ignoreBounds=True)
        self.plot.addItem(self.too_big, ignoreBounds=True)
        self.plot.addItem(self.context_line, ignoreBounds=True)

    def _scheme_changed(self, _scheme: object) -> None:
        self.apply_theme()

    def apply_theme(self) -> None:
        """Background, axis and label colours from the current palette (light or dark)."""
        if self._legend_kinds:
            self.legend.setText(legend_html(list(self._legend_kinds)))
        if not self.built:
            return  # the placeholder follows the palette by itself
        fg = foreground()
        pen = pg.mkPen(fg)
        self.plot.setBackground(background())
        item = self.plot.getPlotItem()
        for name, text in (("left", "GiB"), ("bottom", "context (tokens)")):
            axis = item.getAxis(name)
            axis.setPen(pen)
            axis.setTextPen(pen)
            axis.setLabel(text, color=fg.name())
            axis.label.setDefaultTextColor(fg)
        self.context_line.label.fill = pg.mkBrush(background_fill())
        self._write_marks()

    def is_dark_chart(self) -> bool:
        """Whether the chart is drawn on a dark background (tests check it follows the theme)."""
        self.build()
        return bool(self.plot.backgroundBrush().color().lightness() < 128)

    def clear(self) -> None:
        """Nothing to show (the settings are invalid): every band and marker goes, the device list stays."""
        self._curve = None
        self._drawn = None
        self.clear_marks()
        self.reset_hover()
        self._write_marks()

    def clear_marks(self) -> None:
        """Every band and marker hidden (nothing drawn yet, or nothing to show)."""
        if not self.built:
            return
        for area in self.areas.values():
            area.setVisible(False)
        for line in (self.capacity, self.margin_line, self.max_line, self.too_big, self.trained):
            line.setVisible(False)

    def has_data(self) -> bool:
        return self._curve is not None

    def reset_hover(self) -> None:
        self._hover_x = None
        self.readout.setText(HOVER_HINT)

    # -- data ----------------------------------------------------------------------------------------------------
    def set_curve(
        self,
        curve: CurveData,
        margins: tuple[int, ...],
        max_context: int,
        n_ctx_train: int = 0,
        held: tuple[DeviceHeld, ...] = (),
    ) -> None:
        """`margins`: the bytes the plan keeps free on each device of the curve (the core's `kept_free`); `held`:
        each device by owner (the core's `held_memory`): what other programs hold is named beside the free line."""
        self._held = held
        names = device_names(curve.devices)
        if names != [self.device_box.itemText(i) for i in range(self.device_box.count())]:
            self.device_box.blockSignals(True)
            self.device_box.clear()
            self.device_box.addItems(names)
            self._device = min(self._device, len(names) - 1)
            self.device_box.setCurrentIndex(self._device)
            self.device_box.blockSignals(False)
        unchanged = (
            self._curve is not None
            and self._drawn == (self._device, margins, n_ctx_train)
            and same_curve(self._curve, curve)
        )
        self._curve = curve
        self._margins = margins
        self._n_ctx_train = n_ctx_train
        if unchanged:  # a context drag: the bands stay, only the largest-context marks may move
            if max_context != self._max_context:
                self._max_context = max_context
                if self.built:
                    self._mark_max_context(float(self._x[0]), float(self._x[-1]))
            elif self.built:
                self._write_marks()  # who holds the memory may have changed
            return
        self._x = np.log2(curve.contexts.astype(np.float64))
        self._max_context = max_context
        self._redraw()

    def _redraw(self) -> None:
        curve = self._curve
        if curve is None or not len(self._x) or not self.built:
            return
        d = self._device
        self._drawn = (d, self._margins, self._n_ctx_train)
        cumulative = np.zeros(len(self._x))
        shown = []
        for t, kind in enumerate(TERM_ORDER):
            cumulative = cumulative + curve.bytes[d, t] / GIB
            visible = bool(curve.bytes[d, t].any())
            if visible or self.areas[kind].isVisible():
                self.areas[kind].setData(self._x, cumulative.copy())
            self.areas[kind].setVisible(visible)
            if visible:
                shown.append(kind)
        if tuple(shown) != self._legend_kinds:
            self.legend.setText(legend_html(shown))
            self._legend_kinds = tuple(shown)
        device = curve.devices[d]
        free = device.free_bytes / GIB
        self.capacity.setVisible(True)
        self.capacity.setValue(free)
        margin = self._margins[d] if d < len(self._margins) else 0
        self.margin_line.setValue(max(0.0, (device.free_bytes - margin) / GIB))
        self.margin_line.setVisible(margin > 0)
        lo, hi = float(self._x[0]), float(self._x[-1])
        item = self.plot.getPlotItem()
        item.setXRange(lo, hi + X_PAD, padding=0.0)
        item.setYRange(0, max(free, float(cumulative.max())) * Y_HEADROOM, padding=0.0)
        ticks = _ticks(lo, hi)
        if ticks != self._ticks:
            item.getAxis("bottom").setTicks(ticks)
            self._ticks = ticks
        trained = math.log2(self._n_ctx_train) if self._n_ctx_train > 0 else hi + 1
        self.trained.setVisible(trained < hi)
        self.trained.setValue(trained)
        self._mark_max_context(lo, hi)
        if self._hover_x is not None:  # the readout follows the new memory at the same place
            self.readout.setText(self.readout_at(self._hover_x))

    def _mark_max_context(self, lo: float, hi: float) -> None:
        """The largest context that fits as a labelled line; past it, shading where memory runs out. When the
        training length is what stops it, memory is not the limit there: no shading, the line says so."""
        top = self._max_context
        by_training = top > 0 and self._n_ctx_train > 0 and top >= self._n_ctx_train
        start = math.log2(top) if top else lo
        self.max_line.setVisible(bool(top))
        if top:
            self.max_line.setValue(start)
        self._write_marks()
        self.too_big.setRegion((start, hi))
        self.too_big.setVisible(start < hi and not by_training)
        if top:
            self.too_big.setToolTip(f"Past {fmt_ctx(top)} the plan no longer fits in the planned memory")
        else:
            self.too_big.setToolTip("No context fits in the planned memory")

    def marks_text(self) -> str:
        """What the names of the lines beside the device box say, without its markup."""
        return re.sub(r"<[^>]*>", "", self.marks.text()).replace("&nbsp;", " ")

    def _write_marks(self) -> None:
        curve, d = self._curve, self._device
        if curve is None:
            self.marks.setText("")
            return
        top, trained = self._max_context, self._n_ctx_train
        marks = []
        if top:
            by_training = trained > 0 and top >= trained
            marks.append(
                (MAX_LINE_COLOUR, "┊", f"fits up to {fmt_ctx(top)}" + (" (trained)" if by_training else ""))
            )
        else:
            marks.append((MAX_LINE_COLOUR, "┊", "no context fits"))
        if self.trained.isVisible() and not (top and top >= trained):  # not when it is the line that fits
            marks.append((TRAINED_COLOUR, "┆", f"trained {fmt_ctx(trained)}"))
        device = curve.devices[d]
        marks.append((CAPACITY_COLOUR, "━", f"free {device.free_bytes / GIB:.1f} GiB"))
        # who holds the rest of the device (the bars draw it; the marks stay short enough for a 1024 px window)
        owners = self._held[d] if d < len(self._held) else None
        held = owners is not None and owners.use_free and owners.others_bytes > 0
        self.marks.setToolTip(
            f"free {device.free_bytes / GIB:.1f} of {device.total_bytes / GIB:.1f} GiB; "
            + "\n".join(owners.others_lines())
            if owners is not None and held
            else ""
        )
        if self.margin_line.isVisible():
            margin = self._margins[d] if d < len(self._margins) else 0
            marks.append((MARGIN_COLOUR, "╌", f"margin {margin / GIB:.1f} GiB"))
        self.marks.setText(marks_html(marks))

    def set_context(self, n_ctx: int) -> None:
        self._context = n_ctx
        if not self.built:
            return
        self._setting_context = True
        self.context_line.setValue(math.log2(max(1, n_ctx)))
        self.context_line.label.setFormat(fmt_ctx(n_ctx))
        self._setting_context = False

    def _line_moved(self) -> None:
        # the context the field will show (snapped as the settings snap it), so the label and the field agree
        n = snap_context(2 ** float(self.context_line.value()))
        self.context_line.label.setFormat(fmt_ctx(n))
        if not self._setting_context:
            self.context_dragged.emit(n)

    def _device_chosen(self, index: int) -> None:
        if index >= 0:
            self._device = index
            self._redraw()
            self.device_changed.emit(index)

    def _user_chose(self, index: int) -> None:
        self._user_device = index

    def select_device(self, index: int, automatic: bool = False) -> None:
        """Show device `index`; `automatic`: the window chose it (a no-fit result shows the overfull device), and
        `restore_device` goes back to the user's choice."""
        if 0 <= index < self.device_box.count():
            if not automatic:
                self._user_device = index
            self.device_box.setCurrentIndex(index)

    def restore_device(self) -> None:
        index = min(self._user_device, self.device_box.count() - 1)
        if index >= 0 and index != self.device_box.currentIndex():
            self.device_box.setCurrentIndex(index)

    # -- hover ---------------------------------------------------------------------------------------------------
    def readout_at(self, x: float) -> str:
        curve = self._curve
        if curve is None or not len(self._x):
            return ""
        i = int(np.argmin(np.abs(self._x - x)))
        d = self._device
        parts = [
            f"{term_label(kind)} {curve.bytes[d, t, i] / GIB:.2f}"
            for t, kind in enumerate(TERM_ORDER)
            if curve.bytes[d, t, i]
        ]
        total = curve.bytes[d, :, i].sum() / GIB
        return (
            f"At {fmt_ctx(int(curve.contexts[i]))}: total {total:.2f} GiB = " + " + ".join(parts) + " (GiB)"
        )

    def _hover(self, pos: QPointF) -> None:
        vb = self.plot.getPlotItem().getViewBox()
        if not self.plot.sceneBoundingRect().contains(pos):
            return
        x = vb.mapSceneToView(pos).x()
        self._hover_x = x
        self.readout.setText(self.readout_at(x))
