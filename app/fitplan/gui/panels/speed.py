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
        self.hide()

    def set_speed(self, speed: PlanSpeed | None) -> None:
        if speed is None:
            self.setText("")
            self.setToolTip("")
            self.hide()
            return
        self.setText(f"Expected speed: {speed.summary()}")
        lines = [
            f"Band: where 80% of held-out published llama-bench results of the class '{speed.speed_class.value}' "
            "fell (docs/speed.md).",
            *(f"{d.name}: {d.read_bytes / 1e9:.2f} GB read per token" for d in speed.devices),
            *(f"Assumed: {a}" for a in speed.assumptions),
        ]
        self.setToolTip("\n".join(lines))
        self.show()
