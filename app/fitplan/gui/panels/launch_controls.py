"""Settings: the options that change memory, each with a tooltip saying how, for the chosen engine.

The engine (mainline llama.cpp, ik_llama.cpp, beellama.cpp, ollama) decides which controls exist: the KV cache types
follow `fitplan.core.engines.cache_types`, controls an engine does not have are hidden, and its own appear.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractSlider,
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QSizePolicy,
    QSlider,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from fitplan.core.base.devices import MIB, Machine
from fitplan.core.base.launch_settings import Engine, FlashAttn, LaunchSettings, MmprojPlacement
from fitplan.core.inputs.user_settings import KV_TAIL_TYPES, ModelChoices, engine_cache_types
from fitplan.core.plan.objective import GOAL_WORDS, Goal

if TYPE_CHECKING:
    from fitplan.core.model.profile import ModelProfile


SLIDER_STEPS = 1000
CONTEXT_MIN = 256
CONTEXT_SNAP = 256
CONTEXT_MAX_DEFAULT = 131072
#: The margin never exceeds this (no GPU planned), nor a planned GPU's free memory.
MARGIN_MAX_MIB = 16384
#: Keyboard and wheel steps of the context slider land on these contexts: 256 x 2^k and 384 x 2^k
#: (..., 16K, 24K, 32K, 48K, 64K, ...), each a multiple of 256 (every engine's context padding).
CONTEXT_GRID = tuple(sorted({256 << k for k in range(0, 15)} | {384 << k for k in range(0, 14)}))

ENGINE_LABELS = {
    Engine.LLAMA_CPP: "llama.cpp",
    Engine.IK_LLAMA: "ik_llama.cpp",
    Engine.BEELLAMA: "beellama.cpp",
    Engine.OLLAMA: "ollama",
}
MLA_MODES = {
    0: "0: full K and V",
    1: "1: latent + V copy",
    2: "2: latent",
    3: "3: latent (default)",
}


def devices_text(selection: tuple[str, ...] | None) -> str:
    """The device control's caption: what `-dev` says."""
    if selection is None:
        return "all GPUs"
    if not selection:
        return "none (CPU only)"
    return ", ".join(selection)


def snap_context(n: float) -> int:
    return max(CONTEXT_MIN, round(n / CONTEXT_SNAP) * CONTEXT_SNAP)


def grid_step(n: int, up: bool, steps: int = 1) -> int:
    """The context `steps` grid points above (or below) `n` on CONTEXT_GRID."""
    for _ in range(steps):
        if up:
            n = next((g for g in CONTEXT_GRID if g > n), CONTEXT_GRID[-1])
        else:
            n = next((g for g in reversed(CONTEXT_GRID) if g < n), CONTEXT_GRID[0])
    return n


class LogContextSlider(QSlider):
    """A horizontal slider whose integer position maps to a context on a log2 scale, snapped to 256."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.setRange(0, SLIDER_STEPS)
        self.setPageStep(SLIDER_STEPS // 20)
        self._max = CONTEXT_MAX_DEFAULT
        self._exact: tuple[int, int] | None = None  # (position, context) of the last keyboard step
        self.actionTriggered.connect(self._action)

    def _action(self, action: int) -> None:
        """Arrow keys, page keys and the wheel step along CONTEXT_GRID instead of by slider positions."""
        a = QAbstractSlider.SliderAction
        steps = {
            a.SliderSingleStepAdd: 1,
            a.SliderSingleStepSub: -1,
            a.SliderPageStepAdd: 2,
            a.SliderPageStepSub: -2,
        }.get(a(action))
        if steps is None:
            self._exact = None
            return
        n = grid_step(self.nearest_grid(), steps > 0, abs(steps))
        n = max(CONTEXT_MIN, min(n, self._max))
        position = self.position_of(n)
        self._exact = (position, n)
        self.setSliderPosition(position)

    def nearest_grid(self) -> int:
        """The context under the handle, read as the grid point it stands on when it stands on one."""
        n = self.context_at(self.value())
        g = min(CONTEXT_GRID, key=lambda c: abs(math.log2(c) - math.log2(n)))
        return g if abs(math.log2(g) - math.log2(n)) < 0.02 else n

    def take_context(self, position: int) -> int:
        """The context for `position`: the keyboard step's exact grid point, else the grid point nearest the
        log-scale context there (a drag lands on 16K, 24K, 32K, 48K ... that a user can hit; the field takes any
        multiple of 256)."""
        exact, self._exact = self._exact, None
        if exact is not None and exact[0] == position:
            return exact[1]
        return self.grid_context_at(position)

    def grid_context_at(self, position: int) -> int:
        """The CONTEXT_GRID point (or the slider's maximum) nearest, on the log scale, to the context at
        `position`."""
        n = self.context_at(position)
        points = [g for g in CONTEXT_GRID if g < self._max] + [self._max]
        return min(points, key=lambda c: abs(math.log2(c) - math.log2(n)))

    def set_maximum_context(self, n: int) -> None:
        self._max = max(CONTEXT_MIN * 2, n)

    def context_at(self, position: int) -> int:
        lo, hi = math.log2(CONTEXT_MIN), math.log2(self._max)
        return min(self._max, snap_context(2 ** (lo + (hi - lo) * position / SLIDER_STEPS)))

    def position_of(self, n_ctx: int) -> int:
        lo, hi = math.log2(CONTEXT_MIN), math.log2(self._max)
        x = (math.log2(max(CONTEXT_MIN, min(n_ctx, self._max))) - lo) / (hi - lo)
        return round(x * SLIDER_STEPS)


class PlannedSpinBox(QSpinBox):
    """A spin box whose lowest value means "auto: the plan decides". In auto it shows the value the plan chose
    ("auto: 25"), and a step takes over from that value (up from 25 is 26, not the first value above auto)."""

    def __init__(self, minimum: int, maximum: int, auto_text: str = "auto") -> None:
        super().__init__(minimum=minimum, maximum=maximum)
        self._auto_text = auto_text
        self.planned: int | None = None  # the value the plan chose while in auto (None: no plan yet)
        self.setSpecialValueText(f"{auto_text}: {maximum}")  # wide enough for every value a plan shows
        self.setMinimumWidth(self.sizeHint().width())
        self.setSpecialValueText(auto_text)

    def is_auto(self) -> bool:
        return self.value() == self.minimum()

    def show_planned(self, value: int | None) -> None:
        """The plan chose `value`; None: no plan to show."""
        self.planned = value
        self.setSpecialValueText(self._auto_text if value is None else f"{self._auto_text}: {value}")

    def stepBy(self, steps: int) -> None:
        if self.is_auto() and self.planned is not None:
            self.setValue(max(self.minimum(), min(self.maximum(), self.planned + steps)))
            return
        super().stepBy(steps)

    def stepEnabled(self) -> QAbstractSpinBox.StepEnabledFlag:
        if self.is_auto() and self.planned is not None and self.isEnabled():
            flag = QAbstractSpinBox.StepEnabledFlag
            return flag.StepUpEnabled | flag.StepDownEnabled
        return super().stepEnabled()


class SettingsPanel(QWidget):
    changed = Signal()  # any setting changed (the window debounces before estimating)
    context_moved = Signal(int)  # the context control moved (immediate, for the chart's line)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._updating = False
        self._engine = Engine.LLAMA_CPP
        self._is_mla = False
        self._plan_has_gpu = True  # the last plan shown had a GPU to place layers on
        self._extra: tuple[str, ...] = ()  # the open model's extra flags (ModelChoices.extra_args)
        self._device_names: tuple[tuple[str, str], ...] = ()  # (llama.cpp name, description) of each GPU
        self._devices: tuple[str, ...] | None = None  # -dev: None = all GPUs, () = none
        self.draft_folder = ""  # where the draft model dialog starts
        self._make_draft_controls()
        self._make_controls()
        self._make_fork_controls()
        self._lay_out()
        self._connect()
        self._apply_engine(Engine.LLAMA_CPP)
        self.set_choices(ModelChoices())
        self._show_devices()

    def _make_controls(self) -> None:
        """The controls every engine has (context, caches, slots, placement, batches, margin)."""
        self.engine = QComboBox()
        for engine, label in ENGINE_LABELS.items():
            self.engine.addItem(label, engine.value)
        self.engine.setToolTip(
            "Which program runs the model. Each lays out its KV cache differently: ik_llama.cpp keeps one latent "
            "row per token for MLA models (-mla), beellama.cpp adds KVarN caches (kvarn2-kvarn8), ollama runs "
            "llama.cpp with one slot and its own context default. Controls the engine lacks are hidden."
        )
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
        self._fill_cache_types(Engine.LLAMA_CPP)
        self.slots = QSpinBox(minimum=1, maximum=64)
        self.unified = QCheckBox("Unified KV cache")
        self.unified.setToolTip("One KV buffer shared by all slots (-kvu) instead of one stream per slot")
        self.mmproj = QComboBox()
        self.mmproj.addItem("on the GPU", MmprojPlacement.GPU.value)
        self.mmproj.addItem("on the CPU", MmprojPlacement.CPU.value)
        self.mmproj.addItem("not loaded", MmprojPlacement.NONE.value)
        self._mmproj_tip = (
            "Where the vision projector goes (--mmproj / --no-mmproj-offload): its weights and image compute "
            "buffer use that device's memory. A projector that takes images of any size (Qwen-VL) grows that "
            "buffer for the largest image it accepts; Image tokens below lowers it"
        )
        self.mmproj.setToolTip(self._mmproj_tip)
        # --image-max-tokens: 0 shows "auto" (the projector's own limit, -1 in the settings)
        self.image_tokens = QSpinBox(minimum=0, maximum=65536, singleStep=256)
        self.image_tokens.setSpecialValueText("auto")
        self.image_tokens.setKeyboardTracking(False)
        self._image_tip = (
            "Largest image (--image-max-tokens): a projector that takes images of any size (Qwen-VL) grows its "
            "compute buffer to its largest image, 4096 tokens by default; fewer tokens, less memory and detail. "
            "auto: the projector's own limit"
        )
        self.image_tokens.setToolTip(self._image_tip)
        self.flash = QComboBox()
        for fa, label in ((FlashAttn.AUTO, "auto"), (FlashAttn.ON, "on"), (FlashAttn.OFF, "off")):
            self.flash.addItem(label, fa.value)
        self.gpu_layers = PlannedSpinBox(-1, 999)
        # The same choice as "N of M" on a slider: the far right is every layer (auto), the far left none.
        self.gpu_layers_slider = QSlider(Qt.Orientation.Horizontal)
        self.gpu_layers_slider.setRange(0, 33)
        self.gpu_layers_slider.setToolTip("Layers on the GPU (-ngl): drag left to keep layers in system RAM")
        self.gpu_layers_of = QLabel("")
        self.gpu_layers_of.setTextFormat(Qt.TextFormat.PlainText)
        self.no_kv_offload = QCheckBox("KV cache in system RAM (-nkvo)")
        self.no_kv_offload.setToolTip(
            "-nkvo: the KV cache of every layer stays in system RAM instead of following its layer to the GPU; "
            "GPU memory is freed, attention reads the cache over the bus"
        )
        self.cpu_moe = PlannedSpinBox(0, 999)
        self.cpu_moe.setToolTip(
            "Experts on CPU (--n-cpu-moe N): the expert weights of the first N layers stay in RAM; "
            "attention and KV stay on the GPU. auto: as few as needed to fit (shown: what the plan chose; step "
            "from there to take over)"
        )
        self.batch = QSpinBox(minimum=32, maximum=65536, singleStep=256)
        self.ubatch = QSpinBox(minimum=32, maximum=65536, singleStep=128)
        self.ubatch.setToolTip("Micro-batch (-ub): compute buffers scale with it (activations, logits)")
        self.objective = QComboBox()
        self.objective.addItem("fastest placement", Goal.PLACEMENT.value)
        self.objective.addItem("longest context", Goal.CONTEXT.value)
        self.objective.setAccessibleName("Plan objective")
        self.objective.setToolTip(
            "What the plan puts first (--objective). Fastest placement: the context you set, with the most weights "
            "on the GPUs. Longest context: the "
            + GOAL_WORDS[Goal.CONTEXT]
            + " (the context control shows it)"
        )
        self._manual_ctx: int | None = None  # the context set by hand, kept while the plan chooses it
        # the generation-speed floor (--min-tps): 0 is none
        self.min_tps = QSpinBox(minimum=0, maximum=10000, singleStep=5, suffix=" t/s")
        self.min_tps.setSpecialValueText("no floor")
        self.min_tps.setAccessibleName("Generation speed floor")
        self.min_tps.setToolTip(
            "Keep at least this many generated tokens per second at the planned context (--min-tps), by the speed "
            "model's estimate: the plan shortens the context, or says it cannot, to keep it"
        )
        self.extra_flags = QLineEdit()
        self.extra_flags.setPlaceholderText("none")
        self.extra_flags.setClearButtonEnabled(True)
        self.extra_flags.setToolTip(
            "Flags no control here holds, kept from a command or preset pasted for this model (they belong to it: "
            "another model does not get them). Those that change memory as fitplan models them are planned "
            "(--no-op-offload, -ot ...); the others go into the command as given (--alias, --jinja, --port ...). "
            "Edit them, or clear them with the button at the right."
        )
        self.extra_error = QLabel("")  # why the extra flags cannot be read (the core's one-line message)
        self.extra_error.setTextFormat(Qt.TextFormat.PlainText)
        self.extra_error.setWordWrap(True)
        self.extra_error.setStyleSheet("color: #D55E00;")
        self.margin = QSpinBox(minimum=0, maximum=MARGIN_MAX_MIB, singleStep=256, suffix=" MiB")
        self.margin.setToolTip(
            "Headroom kept free on every GPU (like --fit-target): the plan must leave this much"
        )

    def _make_draft_controls(self) -> None:
        """The devices llama-server uses (-dev) and a draft model for speculative decoding (-md, -ngld, -ctkd)."""
        self.devices_button = QPushButton()
        self.devices_button.setStyleSheet("text-align: left; padding: 3px 6px;")  # read like the combo boxes
        self.devices_button.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.devices_menu = QMenu(self.devices_button)
        self.devices_button.setMenu(self.devices_menu)
        self.devices_menu.aboutToShow.connect(self.device_actions)
        self.devices_button.setToolTip(
            "Devices llama-server uses (-dev): every GPU of the plan (no -dev), some of them (-dev CUDA0,CUDA1), or "
            "none (-dev none: weights, KV cache and compute stay in system RAM). A GPU left out holds nothing."
        )
        self.draft = QComboBox()
        self.draft.addItem("none", "")
        self.draft.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.draft.setMinimumContentsLength(8)
        self._draft_tip = (
            "Draft model for speculative decoding (-md): a small model of the same vocabulary. Its weights, its own "
            "KV cache at the same context and its compute buffers are loaded next to the main model's."
        )
        self.draft.setToolTip(self._draft_tip)
        self.draft_browse = QToolButton()
        self.draft_browse.setText("…")
        self.draft_browse.setToolTip("Choose a draft model file (.gguf)")
        self.draft_ngl = QSpinBox(minimum=-1, maximum=999)
        self.draft_ngl.setSpecialValueText("all (auto)")
        self.draft_ngl.setToolTip(
            "Draft layers on the GPU (-ngld): all (auto) offloads every layer of the draft model"
        )
        self.draft_cache_k = QComboBox()
        self.draft_cache_v = QComboBox()
        self.draft_cache_k.setToolTip("Draft K cache type (-ctkd): bytes per cached key element of the draft")
        self.draft_cache_v.setToolTip(
            "Draft V cache type (-ctvd): bytes per cached value element of the draft"
        )

    def _make_fork_controls(self) -> None:
        """The controls of one engine only: ik_llama.cpp's, beellama.cpp's, ollama's."""
        # ik_llama.cpp
        self.mla = QComboBox()
        for mode, label in MLA_MODES.items():
            self.mla.addItem(label, mode)
        self.amb = QSpinBox(minimum=0, maximum=65536, singleStep=128, suffix=" MiB")
        self.amb.setSpecialValueText("no cap")
        self.amb.setToolTip(
            "Attention batch cap (-amb N): ik_llama.cpp splits the attention heads so that one step's "
            "intermediate (KQ, or the decompressed MLA heads) stays under N MiB, shrinking that compute buffer. "
            "Values under 128 count as 128; no cap: the whole intermediate at once."
        )
        self.fmoe = QCheckBox("Fused MoE (-fmoe)")
        self.fmoe.setToolTip(
            "Fused expert matmuls (-fmoe, on by default; -no-fmoe turns it off): the up/gate/down products of "
            "the experts run as one op, so their intermediate results need no separate compute buffers"
        )
        self.rtr = QCheckBox("Repack at load (-rtr)")
        self.rtr.setToolTip(
            "Run-time repack (-rtr): weights are repacked for the CPU while loading, so they are copied into "
            "anonymous RAM instead of being memory-mapped from the file (the file's pages are no longer shared)"
        )
        # beellama.cpp
        self.tail_tokens = QSpinBox(minimum=0, maximum=1 << 20, singleStep=128)
        self.tail_tokens.setSpecialValueText("default")
        self.tail_tokens.setToolTip(
            "KV tail tokens (--kv-tail-tokens N): the newest N tokens of each sequence are also kept exactly in "
            "the tail type, N × K/V width × 2 bytes per layer and slot, fixed (not growing with the context). "
            "default: KVarN caches keep their intrinsic 128-token tail, standard caches none."
        )
        self.tail_type = QComboBox()
        for t in KV_TAIL_TYPES:
            self.tail_type.addItem(t or "default", t)
        self.tail_type.setToolTip(
            "Tail type (--kv-tail-type): element type of the exact tail; f32 doubles its bytes. "
            "default: f16 for KVarN caches, bf16 for standard ones."
        )
        # ollama
        self.ollama_auto = QCheckBox("Automatic (VRAM tier)")
        self.ollama_auto.setToolTip(
            "No num_ctx: ollama sets the context from the GPUs' total memory (4K under 23 GiB, 32K from 23 GiB, "
            "256K from 47 GiB, capped at the training length), and the KV cache follows it"
        )
        self.overhead = QSpinBox(minimum=0, maximum=1 << 20, singleStep=256, suffix=" MiB")
        self.overhead.setToolTip(
            "OLLAMA_GPU_OVERHEAD: memory ollama keeps free on every GPU; it also lowers the VRAM total that "
            "picks the automatic num_ctx"
        )

    def _lay_out(self) -> None:
        ctx_row = QHBoxLayout()
        ctx_row.addWidget(self.context_slider, 1)
        ctx_row.addWidget(self.context_box)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.addRow("Engine:", self.engine)
        ctx_label = QLabel("&Context:")
        ctx_label.setBuddy(self.context_box)
        form.addRow(ctx_label, ctx_row)
        form.addRow("", self.ollama_auto)
        kv_row = QHBoxLayout()
        kv_row.addWidget(self.cache_k)
        kv_row.addWidget(self.cache_v)
        self.kv_label = QLabel("KV cache K / V:")
        form.addRow(self.kv_label, kv_row)
        slot_row = QHBoxLayout()
        slot_row.addWidget(self.slots)
        slot_row.addWidget(self.unified)
        self.slots_label = QLabel("Slots:")
        form.addRow(self.slots_label, slot_row)
        form.addRow("Flash attention:", self.flash)
        form.addRow("Projector:", self.mmproj)
        form.addRow("Image tokens:", self.image_tokens)
        ngl_row = QHBoxLayout()
        ngl_row.addWidget(self.gpu_layers_slider, 1)
        ngl_row.addWidget(self.gpu_layers)
        form.addRow("GPU layers:", ngl_row)
        form.addRow("", self.gpu_layers_of)
        form.addRow("Devices (-dev):", self.devices_button)
        form.addRow("", self.no_kv_offload)
        form.addRow("Experts on CPU:", self.cpu_moe)
        form.addRow("MLA mode (-mla):", self.mla)
        form.addRow("Attention cap:", self.amb)
        form.addRow("", self.fmoe)
        form.addRow("", self.rtr)
        form.addRow("KV tail tokens:", self.tail_tokens)
        form.addRow("Tail type:", self.tail_type)
        form.addRow("GPU overhead:", self.overhead)
        draft_row = QHBoxLayout()
        draft_row.addWidget(self.draft, 1)
        draft_row.addWidget(self.draft_browse)
        self._draft_row = draft_row
        form.addRow("Draft model:", draft_row)
        form.addRow("Draft GPU layers:", self.draft_ngl)
        draft_kv = QHBoxLayout()
        draft_kv.addWidget(self.draft_cache_k)
        draft_kv.addWidget(self.draft_cache_v)
        self._draft_kv_row = draft_kv
        form.addRow("Draft KV K / V:", draft_kv)
        form.addRow("Plan for:", self.objective)
        form.addRow("At least:", self.min_tps)
        form.addRow("Margin:", self.margin)
        form.addRow("Extra flags:", self.extra_flags)
        form.addRow("", self.extra_error)
        self.advanced = QCheckBox("Advanced: batch sizes")
        self.advanced.setToolTip("Show the batch and micro-batch sizes")
        self.advanced_box = QWidget()
        adv_form = QFormLayout(self.advanced_box)
        adv_form.setContentsMargins(0, 0, 0, 0)
        self.batch_label = QLabel("Batch:")
        adv_form.addRow(self.batch_label, self.batch)
        adv_form.addRow("Micro-batch:", self.ubatch)
        self._adv_form = adv_form
        self.advanced.toggled.connect(self.advanced_box.setVisible)
        self.advanced_box.setVisible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(form)
        layout.addWidget(self.advanced)
        layout.addWidget(self.advanced_box)
        self._form = form

    def _connect(self) -> None:
        self.context_slider.valueChanged.connect(self._slider_moved)
        self.context_slider.sliderReleased.connect(self._slider_released)
        self.context_box.valueChanged.connect(self._box_changed)
        self.engine.currentIndexChanged.connect(self._engine_changed)
        for combo in (
            self.cache_k,
            self.cache_v,
            self.mmproj,
            self.flash,
            self.mla,
            self.tail_type,
            self.draft_cache_k,
            self.draft_cache_v,
        ):
            combo.currentIndexChanged.connect(self._emit)
        self.objective.currentIndexChanged.connect(self._objective_changed)
        self.draft.currentIndexChanged.connect(self._draft_changed)
        self.mmproj.currentIndexChanged.connect(self._show_image_tokens)
        self.draft_browse.clicked.connect(self.ask_draft_file)
        for spin in (
            self.slots,
            self.image_tokens,
            self.gpu_layers,
            self.cpu_moe,
            self.batch,
            self.ubatch,
            self.margin,
            self.amb,
            self.tail_tokens,
            self.overhead,
            self.draft_ngl,
            self.min_tps,
        ):
            spin.valueChanged.connect(self._emit)
        for box in (self.unified, self.fmoe, self.rtr, self.no_kv_offload):
            box.toggled.connect(self._emit)
        self.extra_flags.editingFinished.connect(self._extra_edited)
        self.extra_flags.textChanged.connect(self._extra_cleared)
        self.gpu_layers_slider.valueChanged.connect(self._ngl_slider_moved)
        self.gpu_layers.valueChanged.connect(self._show_ngl)
        self.ollama_auto.toggled.connect(self._ollama_auto_toggled)

    def goal(self) -> Goal:
        """What the plan puts first (the window's --objective)."""
        return Goal(str(self.objective.currentData()))

    def min_gen_tps(self) -> float | None:
        """The generation-speed floor (the window's --min-tps), None without one."""
        return float(self.min_tps.value()) if self.min_tps.value() > 0 else None

    def set_goal(self, goal: str) -> None:
        """Choose what the plan puts first (a `Goal` value); an unknown one changes nothing."""
        index = self.objective.findData(goal)
        if index >= 0:
            self.objective.setCurrentIndex(index)

    def _objective_changed(self) -> None:
        """Longest context first: the plan chooses the context (the control shows it); back to the fastest
        placement, the context set by hand comes back."""
        if self.goal() is Goal.CONTEXT:
            self._manual_ctx = self.context_box.value()
        elif self._manual_ctx is not None:
            self.show_context(self._manual_ctx)
            self._manual_ctx = None
        self._set_context_enabled()
        self._emit()

    # -- engine --------------------------------------------------------------------------------------------------
    def current_engine(self) -> Engine:
        return self._engine

    def _fill_cache_types(self, engine: Engine) -> None:
        types = engine_cache_types(engine)
        for box in (self.cache_k, self.cache_v, self.draft_cache_k, self.draft_cache_v):
            keep = box.currentText()
            box.blockSignals(True)
            box.clear()
            box.addItems(list(types))
            box.setCurrentText(keep if keep in types else "f16")
            box.blockSignals(False)

    def _engine_changed(self) -> None:
        engine = Engine(str(self.engine.currentData()))
        if self._updating or engine is self._engine:
            return  # set_choices applies the engine itself
        from fitplan.core.engines import engine_base_settings  # the GGUF tables load after the first paint

        was_ollama = self._engine is Engine.OLLAMA
        self._updating = True
        self._apply_engine(engine)
        # ollama passes its num_batch as -b and -ub; each engine starts from its own default batch.
        server_batch = engine_base_settings(Engine.LLAMA_CPP).n_batch
        ollama_batch = engine_base_settings(Engine.OLLAMA).n_batch
        if engine is Engine.OLLAMA and self.batch.value() == server_batch:
            self.batch.setValue(ollama_batch)
        elif was_ollama and self.batch.value() == ollama_batch:
            self.batch.setValue(server_batch)
        self._check_extra(self._extra)  # a fork's own flag is not the other engines'
        self._updating = False
        self.changed.emit()

    def engine_rows_width(self) -> int:
        """The widest this panel needs to be over all engines (the window sizes its settings column by it)."""
        current = self._engine
        widest = 0
        for engine in Engine:
            self._apply_engine(
                engine, fill_types=False
            )  # the type names are no wider than mainline's "iq4_nl"
            widest = max(widest, self.minimumSizeHint().width())
        self._apply_engine(current, fill_types=False)
        return widest

    def _apply_engine(self, engine: Engine, fill_types: bool = True) -> None:
        """Show the engine's controls, hide the others, and word the shared ones as the engine spells them."""
        self._engine = engine
        ik, bee, ollama = engine is Engine.IK_LLAMA, engine is Engine.BEELLAMA, engine is Engine.OLLAMA
        if fill_types:
            self._fill_cache_types(engine)
        form = self._form
        form.setRowVisible(self.ollama_auto, ollama)
        form.setRowVisible(self.overhead, ollama)
        form.setRowVisible(self.cpu_moe, not ollama)
        form.setRowVisible(self.no_kv_offload, not ollama)
        form.setRowVisible(self.devices_button, not ollama)
        form.setRowVisible(self._draft_row, not ollama)
        self._show_draft_rows()
        form.setRowVisible(self.mla, ik)
        form.setRowVisible(self.amb, ik)
        form.setRowVisible(self.fmoe, ik)
        form.setRowVisible(self.rtr, ik)
        form.setRowVisible(self.tail_tokens, bee)
        form.setRowVisible(self.tail_type, bee)
        self._adv_form.setRowVisible(self.ubatch, not ollama)
        self.cache_v.setVisible(not ollama)
        self.unified.setVisible(not ollama)
        self.kv_label.setText("KV cache type:" if ollama else "KV cache K / V:")
        self.slots_label.setText("Parallel:" if ollama else "Slots:")
        self.batch_label.setText("num_batch:" if ollama else "Batch:")
        self._set_context_enabled()
        self._word_tooltips(engine)

    def _word_tooltips(self, engine: Engine) -> None:
        ollama = engine is Engine.OLLAMA
        kvarn = (
            " beellama.cpp's kvarn2-kvarn8 store 2-8 bits per element in 128-token groups plus a small exact tail "
            "and staging buffers."
            if engine is Engine.BEELLAMA
            else ""
        )
        if ollama:
            self.cache_k.setToolTip(
                "OLLAMA_KV_CACHE_TYPE: one type for K and V; q8_0 about halves the f16 cache, q4_0 quarters it. "
                "A quantized cache needs flash attention."
            )
            self.slots.setToolTip(
                "OLLAMA_NUM_PARALLEL: requests served at once. ollama gives llama-server num_ctx × this as -c, "
                "so the KV cache grows with it; the cache is not unified."
            )
            self.context_box.setToolTip(
                "Context of all parallel slots together (-c). ollama's num_ctx (PARAMETER num_ctx / "
                "OLLAMA_CONTEXT_LENGTH) is this divided by OLLAMA_NUM_PARALLEL."
            )
            self.flash.setToolTip(
                "OLLAMA_FLASH_ATTENTION: off materialises the attention scores, a compute buffer that grows with "
                "context × batch × heads; auto leaves it to ollama"
            )
            self.gpu_layers.setToolTip(
                "PARAMETER num_gpu: layers on the GPU; each layer left out moves its weights and KV to RAM. "
                "auto: ollama fits as many as it can (shown: what the plan chose; step from there to take over)"
            )
            self.batch.setToolTip(
                "PARAMETER num_batch: ollama passes it as -b and -ub; compute buffers scale with it"
            )
        else:
            self.cache_k.setToolTip(
                "K cache type (-ctk): bytes per cached key element; q8_0 about halves f16." + kvarn
            )
            self.cache_v.setToolTip(
                "V cache type (-ctv): bytes per cached value element; a quantized V needs flash attention."
                + kvarn
            )
            self.slots.setToolTip(
                "Parallel slots (-np): the context is shared between them; more slots mean more output buffer "
                "and, for sliding-window and recurrent layers, more cache"
            )
            self.context_box.setToolTip("Exact context length (-c) in tokens, shared by all slots")
            self.flash.setToolTip(
                "Flash attention (-fa): off materialises the attention scores, a compute buffer that grows "
                "with context × micro-batch × heads"
                + ("; ik_llama.cpp turns it on by default" if engine is Engine.IK_LLAMA else "")
            )
            self.gpu_layers.setToolTip(
                "Layers on the GPU (-ngl): each layer not offloaded moves its weights and KV to RAM. "
                "auto: everything on the GPU if it fits, else as many layers as fit (shown: what the plan chose; "
                "step from there to take over)"
            )
            self.batch.setToolTip("Logical batch (-b): tokens per decode call; caps the micro-batch")
        self._word_mla_tooltip()

    def _word_mla_tooltip(self) -> None:
        if self._is_mla:
            self.mla.setToolTip(
                "-mla: how ik_llama.cpp caches multi-head latent attention. 1-3 keep one compressed latent row "
                "(kv_lora_rank + rope dims) per token and layer instead of every head's K and V, a fraction of the "
                "KV cache; 1 without flash attention adds a transposed V copy; 0 caches full K and V heads."
            )
        else:
            self.mla.setToolTip(
                "-mla applies to multi-head latent attention models only; this one runs as -mla 0"
            )
        self.mla.setEnabled(self._is_mla)
        if not self._is_mla:
            self.mla.setCurrentIndex(max(0, self.mla.findData(0)))

    def _ollama_auto_toggled(self) -> None:
        self._set_context_enabled()
        self._emit()

    def _set_context_enabled(self) -> None:
        auto = self.context_is_automatic()
        self.context_slider.setEnabled(not auto)
        self.context_box.setEnabled(not auto)

    # -- model ---------------------------------------------------------------------------------------------------
    def set_model(self, profile: ModelProfile, has_projector: bool, choices: ModelChoices) -> None:
        self._updating = True
        top = max(CONTEXT_MAX_DEFAULT, profile.n_ctx_train)
        self.context_slider.set_maximum_context(top)
        self.context_box.setMaximum(top)
        self.gpu_layers.setMaximum(profile.n_layer + 1)
        self.gpu_layers_slider.setMaximum(profile.n_layer + 1)  # the repeating layers and the output layer
        self.cpu_moe.setMaximum(profile.n_layer)
        self.cpu_moe.setEnabled(profile.is_moe)
        label = self._form.labelForField(self.cpu_moe)
        if label is not None:
            label.setEnabled(profile.is_moe)
        self.mmproj.setEnabled(has_projector)
        self._show_image_tokens()
        self.mmproj.setToolTip(
            self._mmproj_tip if has_projector else "No projector (mmproj) file was found next to this model"
        )
        from fitplan.core.engines import ik_is_mla  # the model is read: the core is loaded

        self._is_mla = ik_is_mla(profile)  # ik_llama.cpp's own rule, as its estimate uses it
        self._word_mla_tooltip()
        self.fmoe.setEnabled(profile.is_moe)  # fused expert matmuls: nothing to fuse without experts
        self._updating = False
        self.set_choices(choices)

    def set_choices(self, c: ModelChoices) -> None:
        self._updating = True
        engine = Engine(c.engine)
        self.engine.setCurrentIndex(max(0, self.engine.findData(engine.value)))
        self._apply_engine(engine)
        self.context_box.setValue(c.n_ctx)
        self.context_slider.setValue(self.context_slider.position_of(c.n_ctx))
        self.cache_k.setCurrentText(c.cache_type_k)
        self.cache_v.setCurrentText(c.cache_type_v)
        self.slots.setValue(c.n_parallel)
        self.unified.setChecked(c.kv_unified)
        self.mmproj.setCurrentIndex(max(0, self.mmproj.findData(c.mmproj)))
        self.image_tokens.setValue(max(0, c.image_max_tokens))
        self.flash.setCurrentIndex(max(0, self.flash.findData(c.flash_attn)))
        self.gpu_layers.setValue(c.n_gpu_layers)
        self._show_ngl(c.n_gpu_layers)
        self.cpu_moe.setValue(c.n_cpu_moe)
        self.batch.setValue(c.n_batch)
        self.ubatch.setValue(c.n_ubatch)
        self.margin.setValue(c.margin_mib)
        self.mla.setCurrentIndex(max(0, self.mla.findData(c.mla_mode if self._is_mla else 0)))
        self.amb.setValue(c.attn_max_batch_mib)
        self.fmoe.setChecked(c.fused_moe)
        self.rtr.setChecked(c.run_time_repack)
        self.tail_tokens.setValue(c.kv_tail_tokens)
        self.tail_type.setCurrentIndex(max(0, self.tail_type.findData(c.kv_tail_type)))
        self.ollama_auto.setChecked(c.ollama_auto_ctx)
        self.overhead.setValue(c.gpu_overhead_mib)
        self.no_kv_offload.setChecked(c.no_kv_offload)
        self._select_draft(c.draft_model)
        self.draft_ngl.setValue(max(-1, c.draft_n_gpu_layers))
        self.draft_cache_k.setCurrentText(c.draft_cache_type_k)
        self.draft_cache_v.setCurrentText(c.draft_cache_type_v)
        self._show_draft_rows()
        self._set_context_enabled()
        self._show_extra(c.extra_args)
        self._updating = False

    def choices(self) -> ModelChoices:
        engine = self._engine
        ollama = engine is Engine.OLLAMA
        return ModelChoices(
            n_ctx=self.context_box.value(),
            cache_type_k=self.cache_k.currentText(),
            cache_type_v=self.cache_k.currentText() if ollama else self.cache_v.currentText(),
            n_parallel=self.slots.value(),
            kv_unified=self.unified.isChecked() and not ollama,
            mmproj=str(self.mmproj.currentData()),
            image_max_tokens=self.image_tokens.value() or -1,
            flash_attn=str(self.flash.currentData()),
            n_gpu_layers=self.gpu_layers.value(),
            n_cpu_moe=self.cpu_moe.value() if self.cpu_moe.isEnabled() and not ollama else 0,
            n_batch=self.batch.value(),
            n_ubatch=self.batch.value() if ollama else self.ubatch.value(),
            margin_mib=self.margin.value(),
            engine=engine.value,
            mla_mode=int(self.mla.currentData()) if self._is_mla else 0,  # what the disabled control shows
            attn_max_batch_mib=self.amb.value(),
            fused_moe=self.fmoe.isChecked(),
            run_time_repack=self.rtr.isChecked(),
            kv_tail_tokens=self.tail_tokens.value(),
            kv_tail_type=str(self.tail_type.currentData()),
            ollama_auto_ctx=self.ollama_auto.isChecked(),
            gpu_overhead_mib=self.overhead.value(),
            no_kv_offload=self.no_kv_offload.isChecked(),
            draft_model=self.draft_path(),
            draft_n_gpu_layers=self.draft_ngl.value(),
            draft_cache_type_k=self.draft_cache_k.currentText(),
            draft_cache_type_v=self.draft_cache_v.currentText(),
            extra_args=self._extra,
        )

    # -- extra flags (kept from a pasted command or preset, per model) -------------------------------------------
    def extra_args(self) -> tuple[str, ...]:
        """The open model's extra flags as argv words (the last that could be read)."""
        return self._extra

    def _show_extra(self, words: tuple[str, ...]) -> None:
        self._extra = tuple(words)
        self.extra_flags.blockSignals(True)
        self.extra_flags.setText(shlex.join(words))
        self.extra_flags.blockSignals(False)
        self._check_extra(self._extra)

    def _check_extra(self, words: tuple[str, ...]) -> bool:
        """Read by the core for the chosen engine; what cannot be read is said under the field."""
        from fitplan.core.base.errors import FitplanError
        from fitplan.core.inputs.user_settings import read_extra_flags

        try:
            read_extra_flags(words, self._engine)
        except FitplanError as exc:
            self.extra_error.setText(str(exc))
            self.extra_error.setVisible(True)
            return False
        self.extra_error.setVisible(False)
        return True

    def _extra_edited(self) -> None:
        """The field was edited: the words it holds replace the model's extra flags once they can be read; until
        then the text stays as typed, with the reason under it, and the plan keeps the last flags read."""
        try:
            words = tuple(shlex.split(self.extra_flags.text()))
        except ValueError as exc:  # an unclosed quote
            self.extra_error.setText(f"Extra flags: {exc}")
            self.extra_error.setVisible(True)
            return
        if words == self._extra or not self._check_extra(words):
            return
        self._extra = words
        self._emit()

    def _extra_cleared(self, text: str) -> None:
        if not text:  # the clear button (or the last character deleted): no extra flags
            self._extra_edited()

    def _ngl_slider_moved(self, n: int) -> None:
        """The slider's far right is every layer (auto while the plan puts them all on the GPU); elsewhere
        exactly N layers. Moving it in auto takes over from the plan's value."""
        top = self.gpu_layers_slider.maximum()
        planned = self.gpu_layers.planned if self.gpu_layers.is_auto() else None
        value = -1 if n >= top and (planned is None or planned >= top) else n
        if value != self.gpu_layers.value():
            self.gpu_layers.setValue(value)

    def _show_ngl(self, value: int) -> None:
        """The slider and the "N of M" line: the value set, or in auto the value the plan chose."""
        top = self.gpu_layers_slider.maximum()
        planned = self.gpu_layers.planned if value < 0 else None
        n = top if value < 0 and planned is None else min(planned if planned is not None else value, top)
        self.gpu_layers_slider.blockSignals(True)
        self.gpu_layers_slider.setValue(n)
        self.gpu_layers_slider.blockSignals(False)
        if value >= 0:
            shown = f"{n} of {top} layers on the GPU"
        elif planned is None:
            shown = f"auto: up to {top} of {top} layers on the GPU"
        else:
            where = "on the GPU" if self._plan_has_gpu else "(no GPU planned)"
            shown = f"auto: {n} of {top} layers {where}"
        self.gpu_layers_of.setText(shown)

    def show_plan(self, planned: LaunchSettings, has_gpu: bool) -> None:
        """What the plan chose for the controls left on auto: -ngl ("auto: 4 of 33"), --n-cpu-moe ("auto: 25"),
        and where the projector really goes (no GPU: the CPU, whatever was chosen)."""
        top = self.gpu_layers_slider.maximum()
        ngl = planned.n_gpu_layers
        layers = top if ngl < 0 else min(ngl, top)  # NGL_ALL: every layer, the output layer included
        self._plan_has_gpu = has_gpu
        self.gpu_layers.show_planned(layers)
        self._show_ngl(self.gpu_layers.value())
        moe = self.cpu_moe.isEnabled() and self._engine is not Engine.OLLAMA
        self.cpu_moe.show_planned(planned.n_cpu_moe if moe else None)
        self._show_mmproj_gpu(has_gpu)

    def unpin(self, flag: str) -> bool:
        """The control that holds this placement flag back to auto ("without -ngl"); False when none holds it."""
        box = {"-ngl": self.gpu_layers, "--n-cpu-moe": self.cpu_moe}.get(flag)
        if box is None or not box.isEnabled():
            return False
        box.setValue(box.minimum())  # a planned spin box's lowest value is auto
        return True

    def _show_image_tokens(self) -> None:
        """Image tokens apply to a projector that is loaded: greyed without one or with "not loaded" (the value
        stays for when it is loaded again)."""
        on = self.mmproj.isEnabled() and self.mmproj.currentData() != MmprojPlacement.NONE.value
        self.image_tokens.setEnabled(on)
        label = self._form.labelForField(self.image_tokens)
        if label is not None:
            label.setEnabled(on)

    def forget_plan(self) -> None:
        """No plan holds for the controls now (another model): auto shows plain "auto" until the next one."""
        self.gpu_layers.show_planned(None)
        self.cpu_moe.show_planned(None)
        self._show_ngl(self.gpu_layers.value())

    def _show_mmproj_gpu(self, has_gpu: bool) -> None:
        """With no GPU planned, "on the GPU" cannot be chosen, and, chosen before, it says where the projector goes
        (the estimator's `mmproj_on_gpu` rule); the choice stays for when a GPU is planned again."""
        from PySide6.QtGui import QStandardItemModel

        model = self.mmproj.model()
        index = self.mmproj.findData(MmprojPlacement.GPU.value)
        if index < 0 or not isinstance(model, QStandardItemModel):
            return
        item = model.item(index)
        item.setEnabled(has_gpu)
        item.setText("on the GPU" if has_gpu else "on the CPU (no GPU)")

    def kv_offload_off(self) -> bool:
        """-nkvo as the launch settings have it (ollama has no such setting)."""
        return self.no_kv_offload.isChecked() and self._engine is not Engine.OLLAMA

    # -- devices (-dev) ------------------------------------------------------------------------------------------
    def set_device_names(self, names: Sequence[tuple[str, str]]) -> None:
        """The planned machine's GPUs as llama.cpp names them (`CUDA0`) with a description each."""
        self._device_names = tuple(names)
        self._show_devices()

    def devices(self) -> tuple[str, ...] | None:
        """-dev as chosen: None = every GPU (no -dev), () = none (CPU only), else these llama.cpp device names."""
        return self._devices

    def launch_devices(self) -> tuple[str, ...] | None:
        """-dev as the launch settings have it (ollama picks its devices itself)."""
        return None if self._engine is Engine.OLLAMA else self._devices

    def missing_devices(self) -> tuple[str, ...]:
        """The chosen device names that are not among the planned GPUs."""
        known = {name for name, _ in self._device_names}
        return tuple(d for d in self._devices or () if d not in known)

    def set_devices(self, selection: tuple[str, ...] | None) -> None:
        """Show a selection (saved, or read from a command) without announcing a change."""
        self._devices = None if selection is None else tuple(dict.fromkeys(selection))
        self._show_devices()

    def choose_devices(self, selection: tuple[str, ...] | None) -> None:
        """The user's choice in the device menu: shown and announced."""
        self.set_devices(selection)
        self.changed.emit()

    def _toggle_device(self, name: str, on: bool) -> None:
        known = [n for n, _ in self._device_names]
        current = list(known if self._devices is None else self._devices)
        if on and name not in current:
            current.append(name)
        elif not on:
            current = [n for n in current if n != name]
        order = {n: i for i, n in enumerate(known)}
        self.choose_devices(tuple(sorted(current, key=lambda n: order.get(n, len(order)))))

    def _show_devices(self) -> None:
        missing = self.missing_devices()
        note = f"  (not planned: {', '.join(missing)})" if missing else ""
        self.devices_button.setText(devices_text(self._devices) + note)

    def device_actions(self) -> list[QAction]:
        """The device menu, built for the selection of now (it is rebuilt each time it opens)."""
        sel = self._devices
        menu = self.devices_menu
        menu.clear()
        every = menu.addAction("All GPUs (no -dev)")
        every.setCheckable(True)
        every.setChecked(sel is None)
        every.triggered.connect(lambda: self.choose_devices(None))
        menu.addSeparator()
        rows = [*self._device_names, *((n, "not among the planned GPUs") for n in self.missing_devices())]
        for name, description in rows:
            action = menu.addAction(f"{name}: {description}" if description else name)
            action.setCheckable(True)
            action.setChecked(sel is None or name in sel)
            action.toggled.connect(partial(self._toggle_device, name))
        menu.addSeparator()
        none = menu.addAction("None: CPU only (-dev none)")
        none.setCheckable(True)
        none.setChecked(sel == ())
        none.triggered.connect(lambda: self.choose_devices(()))
        return [a for a in menu.actions() if not a.isSeparator()]

    # -- draft model (-md) ---------------------------------------------------------------------------------------
    def draft_path(self) -> str:
        return str(self.draft.currentData() or "")

    def set_draft_candidates(self, models: Sequence[tuple[str, str]]) -> None:
        """Offer these (label, path) models of the library as draft models; the chosen one stays chosen."""
        keep = self.draft_path()
        self.draft.blockSignals(True)
        self.draft.clear()
        self.draft.addItem("none", "")
        for label, path in models:
            self.draft.addItem(label, path)
            self.draft.setItemData(self.draft.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
        self._select_draft(keep)
        self.draft.blockSignals(False)

    def _select_draft(self, path: str) -> None:
        index = self.draft.findData(path)
        if index < 0:
            self.draft.addItem(Path(path).name or path, path)
            index = self.draft.count() - 1
            self.draft.setItemData(index, path, Qt.ItemDataRole.ToolTipRole)
        self.draft.setCurrentIndex(index)

    def choose_draft(self, path: str) -> None:
        """A draft model picked by file: listed if new, chosen, announced."""
        self._select_draft(path)  # the combo announces the change

    def ask_draft_file(self) -> None:
        start = str(Path(self.draft_path()).parent) if self.draft_path() else self.draft_folder
        path, _ = QFileDialog.getOpenFileName(
            self, "Choose a draft model", start, "GGUF models (*.gguf);;All files (*)"
        )
        if path:
            self.choose_draft(path)

    def _draft_changed(self) -> None:
        self._show_draft_rows()
        self._emit()

    def _show_draft_rows(self) -> None:
        on = bool(self.draft_path()) and self._engine is not Engine.OLLAMA
        self._form.setRowVisible(self.draft_ngl, on)
        self._form.setRowVisible(self._draft_kv_row, on)
        self.draft.setToolTip(self._draft_tip + (f"\n\n{self.draft_path()}" if self.draft_path() else ""))

    def set_margin_limit(self, machine: Machine | None) -> None:
        """The margin cannot exceed the free memory of the smallest planned GPU (it is kept free on each)."""
        gpus = machine.gpus if machine is not None else ()
        top = min((g.free_bytes // MIB for g in gpus), default=MARGIN_MAX_MIB)
        self.margin.setMaximum(max(0, min(MARGIN_MAX_MIB, top // 256 * 256)))

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

    def show_context(self, n_ctx: int) -> None:
        """Show a context the engine chose (ollama's automatic num_ctx) without announcing a change."""
        self._updating = True
        self.context_box.setValue(n_ctx)
        self.context_slider.setValue(self.context_slider.position_of(n_ctx))
        self._updating = False

    def context_is_automatic(self) -> bool:
        """The plan chooses the context: ollama's automatic num_ctx, or the longest context first."""
        return (self._engine is Engine.OLLAMA and self.ollama_auto.isChecked()) or self.goal() is Goal.CONTEXT

    def _slider_moved(self, position: int) -> None:
        if self._updating:
            return
        n = self.context_slider.take_context(position)
        self._updating = True
        self.context_box.setValue(n)
        self._updating = False
        self.context_moved.emit(n)
        self.changed.emit()

    def _slider_released(self) -> None:
        """The handle comes to rest on the grid point the drag chose (the field's context)."""
        self._updating = True
        self.context_slider.setValue(self.context_slider.position_of(self.context_box.value()))
        self._updating = False

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
