"""Settings: the llama-server options that change memory, each with a tooltip saying how."""

from __future__ import annotations

import math

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from fitplan.core.profile import ModelProfile
from fitplan.core.settings import KV_CACHE_TYPES, FlashAttn, MmprojPlacement
from fitplan.core.user_settings import ModelChoices

SLIDER_STEPS = 1000
CONTEXT_MIN = 256
CONTEXT_SNAP = 256
CONTEXT_MAX_DEFAULT = 131072


def snap_context(n: float) -> int:
    return max(CONTEXT_MIN, round(n / CONTEXT_SNAP) * CONTEXT_SNAP)


class LogContextSlider(QSlider):
    """A horizontal slider whose integer position maps to a context on a log2 scale, snapped to 256."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.setRange(0, SLIDER_STEPS)
        self.setPageStep(SLIDER_STEPS // 20)
        self._max = CONTEXT_MAX_DEFAULT

    def set_maximum_context(self, n: int) -> None:
        self._max = max(CONTEXT_MIN * 2, n)

    def context_at(self, position: int) -> int:
        lo, hi = math.log2(CONTEXT_MIN), math.log2(self._max)
        return min(self._max, snap_context(2 ** (lo + (hi - lo) * position / SLIDER_STEPS)))

    def position_of(self, n_ctx: int) -> int:
        lo, hi = math.log2(CONTEXT_MIN), math.log2(self._max)
        x = (math.log2(max(CONTEXT_MIN, min(n_ctx, self._max))) - lo) / (hi - lo)
        return round(x * SLIDER_STEPS)


class SettingsPanel(QWidget):
    changed = Signal()  # any setting changed (the window debounces before estimating)
    context_moved = Signal(int)  # the context control moved (immediate, for the chart's line)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._updating = False
        self.context_slider = LogContextSlider()
        self.context_slider.setToolTip(
            "Context length (-c), log scale, snapped to 256. The KV cache grows linearly with it; "
            "compute buffers grow too when flash attention is off."
        )
        self.context_box = QSpinBox(minimum=CONTEXT_MIN, maximum=CONTEXT_MAX_DEFAULT, singleStep=CONTEXT_SNAP)
        self.context_box.setGroupSeparatorShown(True)
        self.context_box.setKeyboardTracking(False)
        self.context_box.setToolTip("Exact context length (-c) in tokens, shared by all slots")
        self.cache_k = QComboBox()
        self.cache_v = QComboBox()
        for box in (self.cache_k, self.cache_v):
            box.addItems(list(KV_CACHE_TYPES))
        self.cache_k.setToolTip("K cache type (-ctk): bytes per cached key element; q8_0 about halves f16")
        self.cache_v.setToolTip(
            "V cache type (-ctv): bytes per cached value element; a quantized V needs flash attention"
        )
        self.slots = QSpinBox(minimum=1, maximum=64)
        self.slots.setToolTip(
            "Parallel slots (-np): the context is shared between them; more slots mean more output buffer "
            "and, for sliding-window and recurrent layers, more cache"
        )
        self.unified = QCheckBox("Unified KV cache")
        self.unified.setToolTip("One KV buffer shared by all slots (-kvu) instead of one stream per slot")
        self.mmproj = QComboBox()
        self.mmproj.addItem("on the GPU", MmprojPlacement.GPU.value)
        self.mmproj.addItem("on the CPU", MmprojPlacement.CPU.value)
        self.mmproj.addItem("not loaded", MmprojPlacement.NONE.value)
        self.mmproj.setToolTip(
            "Where the vision projector goes (--mmproj / --no-mmproj-offload): its weights and image compute "
            "buffer use that device's memory"
        )
        self.flash = QComboBox()
        for fa, label in ((FlashAttn.AUTO, "auto"), (FlashAttn.ON, "on"), (FlashAttn.OFF, "off")):
            self.flash.addItem(label, fa.value)
        self.flash.setToolTip(
            "Flash attention (-fa): off materialises the attention scores, a compute buffer that grows "
            "with context × micro-batch × heads"
        )
        self.gpu_layers = QSpinBox(minimum=-1, maximum=999)
        self.gpu_layers.setSpecialValueText("all (auto)")
        self.gpu_layers.setToolTip(
            "Layers on the GPU (-ngl): each layer not offloaded moves its weights and KV to RAM. "
            "all (auto): everything on the GPU if it fits, else as many layers as fit"
        )
        self.cpu_moe = QSpinBox(minimum=0, maximum=999)
        self.cpu_moe.setSpecialValueText("auto")
        self.cpu_moe.setToolTip(
            "Experts on CPU (--n-cpu-moe N): the expert weights of the first N layers stay in RAM; "
            "attention and KV stay on the GPU. auto: as few as needed to fit"
        )
        self.batch = QSpinBox(minimum=32, maximum=65536, singleStep=256)
        self.batch.setToolTip("Logical batch (-b): tokens per decode call; caps the micro-batch")
        self.ubatch = QSpinBox(minimum=32, maximum=65536, singleStep=128)
        self.ubatch.setToolTip("Micro-batch (-ub): compute buffers scale with it (activations, logits)")
        self.margin = QSpinBox(minimum=0, maximum=65536, singleStep=256, suffix=" MiB")
        self.margin.setToolTip("Headroom kept free on every GPU (like --fit-target): the plan must leave this much")

        ctx_row = QHBoxLayout()
        ctx_row.addWidget(self.context_slider, 1)
        ctx_row.addWidget(self.context_box)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        ctx_label = QLabel("&Context:")
        ctx_label.setBuddy(self.context_box)
        form.addRow(ctx_label, ctx_row)
        kv_row = QHBoxLayout()
        kv_row.addWidget(self.cache_k)
        kv_row.addWidget(self.cache_v)
        form.addRow("KV cache K / V:", kv_row)
        slot_row = QHBoxLayout()
        slot_row.addWidget(self.slots)
        slot_row.addWidget(self.unified)
        form.addRow("Slots:", slot_row)
        form.addRow("Flash attention:", self.flash)
        form.addRow("Projector:", self.mmproj)
        form.addRow("GPU layers:", self.gpu_layers)
        form.addRow("Experts on CPU:", self.cpu_moe)
        form.addRow("Margin:", self.margin)
        self.advanced = QCheckBox("Advanced: batch sizes")
        self.advanced.setToolTip("Show the batch and micro-batch sizes")
        self.advanced_box = QWidget()
        adv_form = QFormLayout(self.advanced_box)
        adv_form.setContentsMargins(0, 0, 0, 0)
        adv_form.addRow("Batch:", self.batch)
        adv_form.addRow("Micro-batch:", self.ubatch)
        self.advanced.toggled.connect(self.advanced_box.setVisible)
        self.advanced_box.setVisible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(form)
        layout.addWidget(self.advanced)
        layout.addWidget(self.advanced_box)
        self._form = form

        self.context_slider.valueChanged.connect(self._slider_moved)
        self.context_box.valueChanged.connect(self._box_changed)
        for combo in (self.cache_k, self.cache_v, self.mmproj, self.flash):
            combo.currentIndexChanged.connect(self._emit)
        for spin in (self.slots, self.gpu_layers, self.cpu_moe, self.batch, self.ubatch, self.margin):
            spin.valueChanged.connect(self._emit)
        self.unified.toggled.connect(self._emit)
        self.set_choices(ModelChoices())

    # -- model ---------------------------------------------------------------------------------------------------
    def set_model(self, profile: ModelProfile, has_projector: bool, choices: ModelChoices) -> None:
        self._updating = True
        top = max(CONTEXT_MAX_DEFAULT, profile.n_ctx_train)
        self.context_slider.set_maximum_context(top)
        self.context_box.setMaximum(top)
        self.gpu_layers.setMaximum(profile.n_layer + 1)
        self.cpu_moe.setMaximum(profile.n_layer)
        self.cpu_moe.setEnabled(profile.is_moe)
        label = self._form.labelForField(self.cpu_moe)
        if label is not None:
            label.setEnabled(profile.is_moe)
        self.mmproj.setEnabled(has_projector)
        self.mmproj.setToolTip(
            self.mmproj.toolTip() if has_projector else "No projector (mmproj) file was found next to this model"
        )
        self._updating = False
        self.set_choices(choices)

    def set_choices(self, c: ModelChoices) -> None:
        self._updating = True
        self.context_box.setValue(c.n_ctx)
        self.context_slider.setValue(self.context_slider.position_of(c.n_ctx))
        self.cache_k.setCurrentText(c.cache_type_k)
        self.cache_v.setCurrentText(c.cache_type_v)
        self.slots.setValue(c.n_parallel)
        self.unified.setChecked(c.kv_unified)
        self.mmproj.setCurrentIndex(max(0, self.mmproj.findData(c.mmproj)))
        self.flash.setCurrentIndex(max(0, self.flash.findData(c.flash_attn)))
        self.gpu_layers.setValue(c.n_gpu_layers)
        self.cpu_moe.setValue(c.n_cpu_moe)
        self.batch.setValue(c.n_batch)
        self.ubatch.setValue(c.n_ubatch)
        self.margin.setValue(c.margin_mib)
        self._updating = False

    def choices(self) -> ModelChoices:
        return ModelChoices(
            n_ctx=self.context_box.value(),
            cache_type_k=self.cache_k.currentText(),
            cache_type_v=self.cache_v.currentText(),
            n_parallel=self.slots.value(),
            kv_unified=self.unified.isChecked(),
            mmproj=str(self.mmproj.currentData()),
            flash_attn=str(self.flash.currentData()),
            n_gpu_layers=self.gpu_layers.value(),
            n_cpu_moe=self.cpu_moe.value() if self.cpu_moe.isEnabled() else 0,
            n_batch=self.batch.value(),
            n_ubatch=self.ubatch.value(),
            margin_mib=self.margin.value(),
        )

    # -- context -------------------------------------------------------------------------------------------------
    def set_context(self, n_ctx: int) -> None:
        """Set from elsewhere (the chart's line): update both controls, announce once."""
        n_ctx = snap_context(n_ctx)
        if n_ctx == self.context_box.value():
            return
        self._updating = True
        self.context_box.setValue(n_ctx)
        self.context_slider.setValue(self.context_slider.position_of(n_ctx))
        self._updating = False
        self.changed.emit()

    def _slider_moved(self, position: int) -> None:
        if self._updating:
            return
        n = self.context_slider.context_at(position)
        self._updating = True
        self.context_box.setValue(n)
        self._updating = False
        self.context_moved.emit(n)
        self.changed.emit()

    def _box_changed(self, n: int) -> None:
        if self._updating:
            return
        self._updating = True
        self.context_slider.setValue(self.context_slider.position_of(n))
        self._updating = False
        self.context_moved.emit(n)
        self.changed.emit()

    def _emit(self) -> None:
        if not self._updating:
            self.changed.emit()

    def focus_context(self) -> None:
        self.context_box.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.context_box.selectAll()
