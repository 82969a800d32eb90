"""Model summary: what the header says, in words."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QFormLayout, QLabel, QWidget

from fitplan.core.base.devices import GIB
from fitplan.core.base.units import fmt_ctx
from fitplan.gui.backend import LoadedModel, layer_makeup

if TYPE_CHECKING:
    from fitplan.core.model.profile import ModelProfile


def model_bytes(p: ModelProfile) -> int:
    """The model's size on disk; a header-only example declares its tensor data without carrying it."""
    return max(p.file_size, p.weight_bytes)


def file_size_text(p: ModelProfile) -> str:
    text = f"{model_bytes(p) / GIB:.2f} GiB"
    if p.file_size < p.weight_bytes:
        text += " (header-only example: tensor data declared, not present)"
    return text


class SummaryPanel(QWidget):
    FIELDS = (
        "Model",
        "Architecture",
        "Parameters",
        "File size",
        "Quant mix",
        "Trained context",
        "Layers",
        "Projector",
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QFormLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.values: dict[str, QLabel] = {}
        for name in self.FIELDS:
            label = QLabel("—")
            label.setTextFormat(
                Qt.TextFormat.PlainText
            )  # header text from a stranger's file: never rich text
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.values[name] = label
            layout.addRow(name + ":", label)

    def set_model(self, model: LoadedModel) -> None:
        p = model.profile
        arch = p.architecture
        if not p.verified_architecture:
            arch += "  (unverified architecture: estimate from generic keys)"
        mix_total = sum(n for _t, n in p.quant_mix) or 1
        mix = ", ".join(f"{t} {100 * n / mix_total:.0f}%" for t, n in p.quant_mix[:4] if n * 100 >= mix_total)
        if model.mmproj is not None:
            proj = f"yes, {model.mmproj.weight_bytes / GIB:.2f} GiB ({model.mmproj.path.rsplit('/', 1)[-1]})"
        elif model.mmproj_note:
            proj = f"none ({model.mmproj_note})"
        else:
            proj = "none found next to the model"
        values = {
            "Model": p.name,
            "Architecture": arch,
            "Parameters": f"{p.n_params / 1e9:.2f} B",
            "File size": file_size_text(p),
            "Quant mix": f"{p.file_type}: {mix}" if mix else p.file_type,
            "Trained context": fmt_ctx(p.n_ctx_train),
            "Layers": layer_makeup(p),
            "Projector": proj,
        }
        for name, text in values.items():
            self.values[name].setText(text)
        self._fit_height()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_height()

    def _fit_height(self) -> None:
        """At least the height the word-wrapped rows need at this width: the scroll area around the panel sizes it
        by its size hints, which do not follow the wrapping, so another model's longer texts (a new model, a pasted
        command's) would be cut until the next resize."""
        layout = self.layout()
        need = layout.heightForWidth(self.width()) if layout is not None else -1
        if need > 0 and need != self.minimumHeight():
            self.setMinimumHeight(need)
