"""Speed: the current plan's expected generation and prompt rates with their bands (read-only, one line)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

if TYPE_CHECKING:
    from fitplan.core.speed import PlanSpeed


class SpeedPanel(QLabel):
    """`core.speed.plan_speed`'s result in words; the tooltip says the class, the devices and the assumptions."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setObjectName("speed")
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setWordWrap(True)
        self.setContentsMargins(9, 0, 9, 0)
        small = self.font()
        small.setPointSizeF(small.pointSizeF() * 0.9)
        self.setFont(small)
        self.hide()

    def set_speed(self, speed: PlanSpeed | None) -> None:
        if speed is None:
            self.setText("")
            self.setToolTip("")
            self.hide()
            return
        self.setText(compact_text(speed))
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


def compact_text(speed: PlanSpeed) -> str:
    """One short line: "Speed: 136 t/s generating (100-186), 75 at 32K; prompt 7087 t/s" (bands in the tooltip)."""
    g, p = speed.generation, speed.prompt
    full = f", {_rate(speed.generation_full.tps)} at {_tokens(speed.n_ctx)}" if speed.n_ctx else ""
    return (
        f"Speed: {_rate(g.tps)} t/s generating ({_rate(g.low)}-{_rate(g.high)}){full}; "
        f"prompt {_rate(p.tps)} t/s"
    )
