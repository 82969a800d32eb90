"""The window takes its rules from the core: presets read by the core's reader, ik's MLA rule, the planner's margins.

Each of these was a copy of its own in the window that gave another answer than the command line.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from fitplan.core.base.devices import MIB
from fitplan.core.base.launch_settings import Engine, MmprojPlacement
from fitplan.core.engines import ik_is_mla
from fitplan.core.inputs.user_settings import ModelChoices
from fitplan.core.launch.command_line import to_preset_ini
from fitplan.core.launch.flags import parse_flags
from fitplan.core.model.builder import build_profile
from fitplan.core.plan.usage import MarginPolicy
from fitplan.gui.main_window import MainWindow
from support.headers import dense, make_header

from .conftest import LLAMA, wait_settled

pytestmark = [pytest.mark.gui]
TIMEOUT = 15000


def load_preset(qtbot: Any, window: MainWindow, path: Path, text: str) -> Any:
    path.write_text(text, encoding="utf-8")
    window.planner.configs.load_configuration(str(path))
    return wait_settled(qtbot, window)


# -- presets ---------------------------------------------------------------------------------------------------------
def test_a_preset_plans_the_launch_the_command_line_wrote(
    qtbot: Any, window: MainWindow, tmp_path: Path
) -> None:
    """`fitplan command --preset` of a launch with the offloads off: the window loads it back with all of them off,
    the ones it has no control for included, and its command says so."""
    flags = "-c 8192 -nkvo --no-op-offload -nr"
    settings = parse_flags(flags.split()).settings
    out = load_preset(qtbot, window, tmp_path / "p.ini", to_preset_ini(settings, LLAMA.stem, str(LLAMA)))
    planned = out.plan_settings
    assert (planned.n_ctx, planned.no_kv_offload, planned.op_offload, planned.repack) == (
        8192,
        True,
        False,
        False,
    )
    command = window.command.text.toPlainText()
    for flag in ("-nkvo", "--no-op-offload", "-nr"):
        assert flag in command.split()
    assert "--no-op-offload" in window.banner.text()


def test_a_preset_is_read_as_llama_server_reads_it(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    """A path with blanks, a quote and a backslash; keys after an inline comment; a Windows line end; every false."""
    folder = tmp_path / "my models' \\ dir"
    folder.mkdir()
    model = folder / "llama 8b.gguf"
    shutil.copyfile(LLAMA, model)
    text = (
        "; written by hand\r\n"
        f"[{model.stem}]\r\n"
        f"model = {model} ; the example\r\n"
        "ctx-size = 4096 ; a small context\r\n"
        "parallel = 2\r\n"
        "kv-offload = false\r\n"
        "mmproj-offload = false\r\n"
        "temp = 0.7\r\n"
    )
    with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
        (tmp_path / "p.ini").write_text(text, encoding="utf-8", newline="")
        window.planner.configs.load_configuration(str(tmp_path / "p.ini"))
    out = wait_settled(qtbot, window)
    assert window.planner.model is not None and window.planner.model.source == str(model)
    s = out.estimate.settings
    assert (s.n_ctx, s.n_parallel, s.no_kv_offload) == (4096, 2, True)
    assert window.settings.choices().mmproj == MmprojPlacement.CPU.value
    assert "--temp 0.7" in window.command.text.toPlainText()


def test_a_preset_the_core_refuses_is_one_line_and_nothing_changes(
    qtbot: Any, window: MainWindow, tmp_path: Path
) -> None:
    before = window.settings.choices()
    load_preset(qtbot, window, tmp_path / "p.ini", "[m]\nkv-offload = FALSE\n")
    assert "Preset: preset key kv-offload: expected true or false" in window.banner.text()
    assert window.settings.choices() == before


# -- ik_llama.cpp's MLA mode --------------------------------------------------------------------------------------
def test_the_mla_control_follows_ik_own_rule_for_a_legacy_deepseek(window: MainWindow) -> None:
    """A DeepSeek-V2 GGUF written before the MLA keys (no key_length_mla): mainline runs it as plain attention,
    ik_llama.cpp as MLA. The window offers -mla and sends the chosen mode, not -mla 0."""
    meta = dense(3, n_head=16, n_head_kv=16, head=128)
    meta.update({"attention.kv_lora_rank": 512, "rope.dimension_count": 64})
    meta.update({"attention.key_length": 192, "attention.value_length": 128})
    profile = build_profile(make_header("deepseek2", meta))
    assert not profile.is_mla and ik_is_mla(profile)  # the two rules differ for this file
    s = window.settings
    s.set_model(profile, False, ModelChoices(engine=Engine.IK_LLAMA.value, mla_mode=3))
    assert s.mla.isEnabled()
    assert s.choices().mla_mode == 3


# -- margins ---------------------------------------------------------------------------------------------------------
def test_the_margins_drawn_are_the_ones_the_plan_applied(qtbot: Any, window: MainWindow) -> None:
    """The planner keeps 1 GiB of host RAM free beside each GPU's margin: the bars and the chart draw both."""
    window.settings.margin.setValue(512)
    out = wait_settled(qtbot, window)
    host_margin = MarginPolicy().host_margin_bytes
    assert out.margins == (512 * MIB, host_margin)
    bars = [bar for _name, bar, _text in window.devices.rows if bar.isVisible()]
    assert [bar.margin for bar in bars] == [512 * MIB, host_margin]
    host = len(out.curve.devices) - 1
    window.chart.select_device(host)
    host_free = out.curve.devices[host].free_bytes
    assert window.chart.margin_line.isVisible()
    assert window.chart.margin_line.value() == pytest.approx((host_free - host_margin) / (1 << 30))
