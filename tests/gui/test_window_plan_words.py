"""The window says what the plan does: controls left on auto show the value the plan chose (issue 24, class 2),
and the projector, the device bars and the verdict agree with the plan (class 8)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QStandardItemModel

from fitplan.core.base.devices import GIB, Device, DeviceKind, Vendor, host_device
from fitplan.core.base.launch_settings import MmprojPlacement
from fitplan.gui.backend import Detection
from fitplan.gui.main_window import MainWindow

from .conftest import GEMMA, LLAMA, NO_GPU, QWEN_MOE, make_window, wait_settled

pytestmark = [pytest.mark.gui]

#: One 6 GiB card: the 8B model at its default context keeps some layers on the CPU, the 30B MoE its experts.
SMALL_GPU = Detection(
    (Device("RTX 2060", DeviceKind.GPU, 6 * GIB, 6 * GIB, Vendor.NVIDIA),), host_device(64 * GIB, 48 * GIB)
)


def _open(qtbot: Any, detection: Detection, config: Path, model: Path) -> MainWindow:
    w: MainWindow = make_window(qtbot, detection, config)  # type: ignore[assignment]
    w.show()
    w.planner.start(str(model))
    wait_settled(qtbot, w)
    return w


@pytest.fixture
def small(qtbot: Any, private_config: Path) -> Iterator[MainWindow]:
    w = _open(qtbot, SMALL_GPU, private_config, LLAMA)
    yield w
    w.close()


def command_value(window: MainWindow, flag: str) -> str | None:
    words = window.command.text.toPlainText().replace("\\\n", " ").split()
    return words[words.index(flag) + 1] if flag in words else None


def test_gpu_layers_on_auto_show_the_layers_the_plan_offloads(qtbot: Any, small: MainWindow) -> None:
    s = small.settings
    small.settings.set_context(65536)  # more than 6 GiB with every layer: the plan keeps layers on the CPU
    out = wait_settled(qtbot, small)
    ngl = out.plan_settings.n_gpu_layers
    assert 0 < ngl < 33 and command_value(small, "-ngl") == str(ngl)
    assert s.gpu_layers.value() == -1  # still auto: the user set nothing
    assert s.gpu_layers.text() == f"auto: {ngl}"
    assert s.gpu_layers_of.text() == f"auto: {ngl} of 33 layers on the GPU"
    assert s.gpu_layers_slider.value() == ngl
    # the user takes over from the plan's value: one step up is one more layer than the plan chose
    s.gpu_layers.stepBy(1)
    out = wait_settled(qtbot, small)
    assert s.gpu_layers.value() == ngl + 1 and out.estimate.settings.n_gpu_layers == ngl + 1
    assert s.gpu_layers_of.text() == f"{ngl + 1} of 33 layers on the GPU"
    # back to auto: the plan's value is shown again
    s.gpu_layers.setValue(-1)
    wait_settled(qtbot, small)
    assert s.gpu_layers.text() == f"auto: {ngl}"


def test_experts_on_cpu_on_auto_show_the_plans_n_cpu_moe(qtbot: Any, private_config: Path) -> None:
    w = _open(qtbot, SMALL_GPU, private_config, QWEN_MOE)
    try:
        out = wait_settled(qtbot, w)
        ncmoe = out.plan_settings.n_cpu_moe
        assert ncmoe > 0 and command_value(w, "--n-cpu-moe") == str(ncmoe)
        s = w.settings
        assert s.cpu_moe.value() == 0 and s.cpu_moe.text() == f"auto: {ncmoe}"
        s.cpu_moe.stepBy(-1)  # taking over from the plan: one expert layer fewer on the CPU
        wait_settled(qtbot, w)
        assert s.cpu_moe.value() == ncmoe - 1
        assert command_value(w, "--n-cpu-moe") == str(ncmoe - 1)
    finally:
        w.close()


def test_with_no_gpu_the_controls_say_nothing_is_offloaded(qtbot: Any, private_config: Path) -> None:
    w = _open(qtbot, NO_GPU, private_config, GEMMA)
    try:
        s = w.settings
        assert command_value(w, "-ngl") == "0"
        assert s.gpu_layers.text() == "auto: 0"
        assert s.gpu_layers_of.text() == "auto: 0 of 49 layers (no GPU planned)"
        # the projector cannot be put on a GPU that is not there, and the choice made before says where it goes
        assert s.mmproj.isEnabled()
        model = s.mmproj.model()
        assert isinstance(model, QStandardItemModel)
        gpu = s.mmproj.findData(MmprojPlacement.GPU.value)
        assert not model.item(gpu).isEnabled()
        assert s.mmproj.currentIndex() == gpu  # the user's choice is kept for when a GPU is planned
        assert s.mmproj.currentText() == "on the CPU (no GPU)"
    finally:
        w.close()


def test_a_gpu_given_no_layers_keeps_its_bar(qtbot: Any, private_config: Path) -> None:
    """Two cards, -ts 1,0: the second card holds no layer, and the verdict still counts it: it keeps its bar."""
    two = Detection(
        (
            Device("RTX 4090", DeviceKind.GPU, 24 * GIB, 24 * GIB, Vendor.NVIDIA),
            Device("RTX 3060", DeviceKind.GPU, 12 * GIB, 12 * GIB, Vendor.NVIDIA),
        ),
        host_device(64 * GIB, 48 * GIB),
    )
    w = _open(qtbot, two, private_config, LLAMA)
    try:
        w.planner.configs.paste_command(f"llama-server -m {LLAMA} -ts 1,0")  # every layer on the first card
        out = wait_settled(qtbot, w)
        assert len(out.estimate.devices) == 3 and out.estimate.settings.devices is None
        assert not out.estimate.devices[1].terms  # the second card holds nothing
        names = [name.text() for name, _bar, _text in w.devices.rows if name.isVisible()]
        assert names == ["RTX 4090", "RTX 3060", "Host"]
        texts = [text.text() for _n, _b, text in w.devices.rows if text.isVisible()]
        assert texts[1] == "0.0 / 12.0 GiB, holds nothing"
        assert "to spare on GPU0 (RTX 4090)" in w.verdict.label.text()  # the card that holds the model
    finally:
        w.close()
