"""Speed: the current plan's expected generation and prompt rates (read-only, one line in the corner of the chart's
tabs: the longest wording that fits the room there; the bands, the devices and the assumptions in the tooltip)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtWidgets import QLabel, QTabWidget, QWidget

if TYPE_CHECKING:
    from fitplan.core.speed import PlanSpeed


class SpeedPanel(QLabel):
    """`core.speed.plan_speed`'s result in words; the tooltip says the class, the devices and the assumptions."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setObjectName("speed")
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setContentsMargins(6, 0, 6, 0)
        self.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        small = self.font()
        small.setPointSizeF(small.pointSizeF() * 0.9)
        self.setFont(small)
        self._wordings: tuple[str, ...] = ()
        self._room = 0
        self._tabs: QTabWidget | None = None
        self.hide()

    def minimumSizeHint(self) -> QSize:
        """No width of its own: the tab widget's minimum (the column's) must not grow with the line, which
        picks a shorter wording instead (`fit_room`)."""
        return QSize(0, super().minimumSizeHint().height())

    def follow(self, tabs: QTabWidget) -> None:
        """Sit beside `tabs`' tab bar: the room there, as the window resizes, picks the wording."""
        self._tabs = tabs
        tabs.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        tabs = self._tabs
        if watched is tabs and tabs is not None and event.type() == QEvent.Type.Resize:
            self.fit_room(tabs.width() - tabs.tabBar().sizeHint().width() - 8)
        return False

    def fit_room(self, width: int) -> None:
        """Show the longest wording that fits `width` pixels (the room beside the tabs)."""
        self._room = width
        self._show_fitting()

    def _show_fitting(self) -> None:
        if not self._wordings:
            return
        margins = self.contentsMargins().left() + self.contentsMargins().right()
        fm = self.fontMetrics()
        fitting = [w for w in self._wordings if fm.horizontalAdvance(w) + margins <= self._room]
        text = fitting[0] if fitting else self._wordings[-1]
        if text != self.text():
            self.setText(text)
            self.updateGeometry()

    def set_speed(self, speed: PlanSpeed | None) -> None:
        if speed is None:
            self._wordings = ()
            self.setText("")
            self.setToolTip("")
            self.hide()
            return
        self._wordings = wordings(speed)
        self.setText(self._wordings[0])
        self._show_fitting()
        lines = [
            speed.summary(),
            f"Band: where 80% of held-out published llama-bench results of the class '{speed.speed_class.value}' "
            "fell (docs/speed.md).",
            *(f"{d.name}: {d.read_bytes / 1e9:.2f} GB read per token" for d in speed.devices),
            *(f"Assumed: {a}" for a in speed.assumptions),
        ]
        self.setToolTip("\n".join(lines))
        self.show()


def _rate(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def _tokens(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def wordings(speed: PlanSpeed) -> tuple[str, ...]:
    """The line from the longest to the shortest: the room beside the tabs picks one."""
    g, p = speed.generation, speed.prompt
    return (
        compact_text(speed),
        f"Speed: {_rate(g.tps)} t/s generating, {_rate(p.tps)} t/s prompt",
        f"{_rate(g.tps)} t/s gen., {_rate(p.tps)} t/s prompt",
        f"{_rate(g.tps)} t/s gen.",
    )


def compact_text(speed: PlanSpeed) -> str:
    """One short line: "Speed: 136 t/s generating (100-186), 75 at 32K; prompt 7087 t/s" (bands in the tooltip)."""
    g, p = speed.generation, speed.prompt
    full = f", {_rate(speed.generation_full.tps)} at {_tokens(speed.n_ctx)}" if speed.n_ctx else ""
    return (
        f"Speed: {_rate(g.tps)} t/s generating ({_rate(g.low)}-{_rate(g.high)}){full}; "
        f"prompt {_rate(p.tps)} t/s"
    )
