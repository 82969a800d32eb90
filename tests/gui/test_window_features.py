"""What users of LM Studio and koboldcpp look for in the window: device bars, paste/save/load, the missing controls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt
from PySide6.QtGui import QDropEvent

from fitplan import LLAMA_CPP_COMMIT, __version__
from fitplan.core.base.devices import GIB
from fitplan.core.base.units import fmt_ctx
from fitplan.gui.main_window import MainWindow
from support.accuracy import recorded_band

from .conftest import LLAMA, wait_settled

pytestmark = [pytest.mark.gui]
TIMEOUT = 15000


def test_every_device_has_a_used_of_capacity_bar(window: MainWindow) -> None:
    names = [name.text() for name, _bar, _text in window.devices.rows if name.isVisible()]
    assert names == ["RTX 4090", "Host"]
    gpu_text = window.devices.rows[0][2].text()
    used = window.planner.outcome.estimate.devices[0].used_bytes / GIB
    assert gpu_text == f"{used:.1f} / 22.0 GiB"  # the card has 22 GiB free


def test_the_chart_marks_the_largest_context_that_fits(window: MainWindow) -> None:
    top = window.planner.outcome.max_context
    assert window.chart.max_line.isVisible()
    assert top > 0 and f"fits up to {fmt_ctx(top)}" in window.chart.marks_text()


def test_about_names_the_version_and_the_llama_cpp_commit(window: MainWindow) -> None:
    text = window.about_text()
    assert __version__ in text and LLAMA_CPP_COMMIT in text


def test_dropping_a_command_sets_the_controls(qtbot: Any, window: MainWindow) -> None:
    mime = QMimeData()
    mime.setText(f"llama-server -m {LLAMA} -c 16384 -np 2 --lora extra.gguf")
    window.dropEvent(
        QDropEvent(
            QPointF(5, 5),
            Qt.DropAction.CopyAction,
            mime,
            Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier,
        )
    )
    out = wait_settled(qtbot, window)
    assert out.estimate.settings.n_parallel == 2 and window.settings.context_box.value() == 16384
    assert "--lora extra.gguf" in window.command.text.toPlainText()
    assert "--lora" in window.banner.text()
    # the adapter is planned (no control holds it); one that cannot be read is named, and the plan goes on
    assert out.estimate.settings.lora == ("extra.gguf",)
    assert any("extra.gguf" in n and "not counted" in n for n in out.notes)


def test_gpu_layers_as_n_of_m(qtbot: Any, window: MainWindow) -> None:
    s = window.settings
    assert s.gpu_layers_slider.maximum() == 33  # 32 layers and the output layer
    assert s.gpu_layers_of.text() == "auto: 33 of 33 layers on the GPU"
    s.gpu_layers_slider.setValue(20)
    out = wait_settled(qtbot, window)
    assert s.gpu_layers.value() == 20 and s.gpu_layers_of.text() == "20 of 33 layers on the GPU"
    assert out.estimate.settings.n_gpu_layers == 20


def test_kv_cache_in_system_ram(qtbot: Any, window: MainWindow) -> None:
    window.settings.no_kv_offload.setChecked(True)
    out = wait_settled(qtbot, window)
    assert out.estimate.settings.no_kv_offload
    assert "-nkvo" in window.command.text.toPlainText()


def test_host_ram_of_a_hypothetical_machine(qtbot: Any, window: MainWindow) -> None:
    window.hardware.host_ram.setValue(8)
    out = wait_settled(qtbot, window)
    host = out.estimate.devices[-1].device
    assert host.total_bytes == 8 * GIB and host.free_bytes == 8 * GIB


@pytest.mark.parametrize("name", ["plan.ini", "plan.sh", "Modelfile"])
def test_save_and_load_a_configuration(qtbot: Any, window: MainWindow, tmp_path: Path, name: str) -> None:
    window.settings.set_context(8192)
    wait_settled(qtbot, window)
    path = tmp_path / name
    window.planner.configs.save_configuration(str(path))
    text = path.read_text()
    if name == "Modelfile":
        assert "num_ctx 8192" in text
        return
    assert "8192" in text
    window.settings.set_context(4096)
    wait_settled(qtbot, window)
    window.planner.configs.load_configuration(str(path))
    wait_settled(qtbot, window)
    assert window.settings.context_box.value() == 8192


def test_the_alternatives_are_listed_and_apply_in_one_click(qtbot: Any, window: MainWindow) -> None:
    """The planner's "what would change it" rows are in the verdict panel, each with the effect the estimator
    computed; a flag change applies to the controls in one click, and the plan follows."""
    outcome = window.planner.outcome
    assert outcome.alternatives, (
        "the 8B example on one card has alternatives (a different cache type, -np 1, ...)"
    )
    buttons = window.verdict.alternative_buttons
    assert [b.plain.removesuffix("  (apply)") for b in buttons] == [a.brief() for a in outcome.alternatives]
    flag_rows = [
        (a, b) for a, b in zip(outcome.alternatives, buttons, strict=True) if a.change.startswith("-")
    ]
    assert flag_rows, [a.change for a in outcome.alternatives]
    alt, button = flag_rows[0]
    before = window.settings.choices()
    button.click()
    after = wait_settled(qtbot, window)
    assert window.settings.choices() != before
    # the applied change is in the settings the new plan was made with
    words = alt.change.split()
    values = dict(zip(words[::2], words[1::2], strict=True))
    s = after.estimate.settings
    read = {"-ctk": s.cache_type_k, "-ctv": s.cache_type_v, "-np": str(s.n_parallel), "-c": str(s.n_ctx)}
    assert {k: read[k] for k in values} == values


def test_the_verdict_shows_the_measured_error_band(qtbot: Any, window: MainWindow) -> None:
    """The 8B example on one 24 GiB NVIDIA GPU (every layer on it, f16 cache, flash attention resolved on): the
    band of llama's recordings on the CUDA-shaped stand-ins in that class, with the figures the accuracy report
    measures, and how it was measured."""
    label = window.verdict.accuracy
    expected = recorded_band("llama", "fa-on/kv-f16/one-device", "cuda")
    assert label.isVisible()
    assert label.text().startswith(
        f"compute: within {expected.range_text} on {expected.cases} recorded configurations of llama "
        "on CUDA/ROCm stand-ins (flash attention on, f16 cache, one device)"
    )
    assert "515e85511" in label.toolTip() and "stand-in" in label.toolTip()
    window.settings.cache_k.setCurrentText("q8_0")
    window.settings.cache_v.setCurrentText("q8_0")
    wait_settled(qtbot, window)
    quantized = recorded_band("llama", "fa-on/kv-quantized/one-device", "cuda")
    assert f"within {quantized.range_text} on {quantized.cases} recorded" in label.text()
    assert "quantized cache" in label.text()
    window.verdict.set_error("the settings cannot be estimated")
    assert not label.isVisible()
