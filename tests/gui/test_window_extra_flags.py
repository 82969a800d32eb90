"""Nothing leaks between models (issue 24, class 3): flags kept from a pasted command belong to the model they came
with, are shown and editable under Settings, and can be cleared."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from fitplan.gui.main_window import MainWindow

from .conftest import LLAMA, QWEN_MOE, wait_settled

pytestmark = [pytest.mark.gui]
TIMEOUT = 20000
KEPT = "--alias chat --chat-template-file t.jinja --reasoning-format none --host 0.0.0.0 --port 8081 --jinja"


def command(window: MainWindow) -> str:
    return window.command.text.toPlainText()


def test_flags_kept_from_a_paste_stay_with_their_model(qtbot: Any, window: MainWindow) -> None:
    window.planner.configs.paste_command(f"llama-server -m {LLAMA} -c 8192 {KEPT} --no-op-offload")
    out = wait_settled(qtbot, window)
    for flag in ("--alias", "--chat-template-file", "--reasoning-format", "--host", "--port", "--jinja"):
        assert flag in command(window).split()
    assert not out.plan_settings.op_offload  # a flag no control holds, planned
    # another model opened afterwards gets none of them
    with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
        window.planner.open(str(QWEN_MOE))
    out = wait_settled(qtbot, window)
    for flag in ("--alias", "--port", "--jinja", "--no-op-offload"):
        assert flag not in command(window).split()
    assert out.plan_settings.op_offload
    s = window.settings
    assert s.extra_flags.text() == ""
    # back to the first model: its flags are its own again
    with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
        window.planner.open(str(LLAMA))
    wait_settled(qtbot, window)
    assert "--alias" in command(window).split()
    assert s.extra_flags.text() == f"--no-op-offload {KEPT}"  # shown and editable in the settings


def test_extra_flags_are_edited_and_cleared(qtbot: Any, window: MainWindow) -> None:
    s = window.settings
    s.extra_flags.setText("--alias 'my chat' -nr")
    s.extra_flags.editingFinished.emit()
    out = wait_settled(qtbot, window)
    assert "--alias" in command(window) and "my chat" in command(window)
    assert not out.plan_settings.repack  # -nr is planned
    # a flag a control holds is refused with the core's one-line message; the text stays, the plan keeps the last
    s.extra_flags.setText("--alias 'my chat' -c 4096")
    s.extra_flags.editingFinished.emit()
    wait_settled(qtbot, window)
    assert (
        s.extra_error.isVisible() and s.extra_error.text() == "-c: set with the controls, not as extra flags"
    )
    assert s.extra_flags.text() == "--alias 'my chat' -c 4096"
    assert s.extra_args() == ("--alias", "my chat", "-nr")
    # the clear button empties them: nothing kept
    s.extra_flags.clear()
    out = wait_settled(qtbot, window)
    assert s.extra_args() == () and "--alias" not in command(window) and out.plan_settings.repack
    assert not s.extra_error.isVisible()


def test_a_pasted_command_for_another_model_gives_its_flags_to_that_model(
    qtbot: Any, window: MainWindow, tmp_path: Path
) -> None:
    other = tmp_path / "other.gguf"
    shutil.copyfile(LLAMA, other)
    opened = window.planner.model
    assert opened is not None
    with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
        window.planner.configs.paste_command(f"llama-server -m {other} --alias other --jinja")
    wait_settled(qtbot, window)
    assert window.settings.extra_args() == ("--alias", "other", "--jinja")
    with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
        window.planner.open(opened.source)
    wait_settled(qtbot, window)
    assert window.settings.extra_args() == ()  # the model open when it was pasted did not take them
    assert "--alias" not in command(window)
