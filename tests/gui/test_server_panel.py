"""The window's Launch and check tab: launch the shown plan (a stand-in llama-server replaying a real recorded log),
the log streams in, the comparison shows llama.cpp's buffers, Stop, Save check, a failure in one line, and closing
the window stops the server."""

from __future__ import annotations

import json
import stat
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fitplan.core.inputs.user_settings import UserSettings
from fitplan.core.launch.launch_check import load_check
from fitplan.core.launch.server_log import parse_server_log
from fitplan.gui.backend import Backend
from fitplan.gui.main_window import MainWindow
from support.models import TESTS

from .conftest import LLAMA, NO_GPU

pytestmark = [pytest.mark.gui]

LAUNCH = TESTS / "fixtures" / "launch"
FAKE = TESTS / "support" / "fake_llama_server.py"


def fake_bin(tmp_path: Path, case: str) -> Path:
    d = tmp_path / f"bin-{case}"
    d.mkdir()
    exe = d / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "{LAUNCH / (case + ".json")}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return d


def open_window(qtbot: Any, config: Path, bin_dir: Path) -> MainWindow:
    from fitplan.gui.theme import configure_pyqtgraph

    configure_pyqtgraph()
    backend = Backend(probe=lambda: NO_GPU, library_places=lambda: ())
    w = MainWindow(backend, replace(UserSettings(), llama_bin_dir=str(bin_dir)), config)
    qtbot.addWidget(w)
    w.show()
    w.planner.start(str(LLAMA))
    qtbot.waitUntil(w.planner.settled, timeout=15000)
    return w


def test_launch_streams_the_log_compares_stops_and_saves(
    qtbot: Any, tmp_path: Path, private_config: Path
) -> None:
    w = open_window(qtbot, private_config, fake_bin(tmp_path, "loaded"))
    s = w.server
    w.actions_by_name["launch"].trigger()
    assert w.centre_tabs.currentWidget() is s  # the tab comes forward
    assert not s.launch_button.isEnabled()  # one server at a time
    qtbot.waitUntil(lambda: s.report is not None, timeout=30000)
    rec = json.loads((LAUNCH / "loaded.json").read_text())
    # the log streams from the server's pipe: its last lines may follow the check by an event-loop turn
    qtbot.waitUntil(lambda: all(line in s.log.toPlainText() for line in rec["load"][-3:]), timeout=10000)
    assert s.status.text().startswith("Running on http://127.0.0.1:")
    # the table holds llama.cpp's buffers as the log printed them
    allocated = {s.table.item(r, 1).text(): s.table.item(r, 3).text() for r in range(s.table.rowCount())}
    log = parse_server_log(rec["load"])
    kv = next(b for b in log.buffers if b.kind.value == "kv")
    assert allocated["kv"] == f"{kv.mib:.2f}" and {"weights", "kv", "output", "compute"} <= set(allocated)
    assert s.bars.check is not None
    s.stop()
    qtbot.waitUntil(lambda: s.status.text() == "Stopped.", timeout=30000)
    assert s.launch_button.isEnabled() and not s.running
    out = tmp_path / "check.json"
    s.save(str(out))
    back = load_check(out)
    assert back.log.breakdown and back.command[0] == "llama-server"


def test_a_failed_launch_says_why_in_one_line(qtbot: Any, tmp_path: Path, private_config: Path) -> None:
    w = open_window(qtbot, private_config, fake_bin(tmp_path, "oom"))
    s = w.server
    s.launch()
    qtbot.waitUntil(lambda: s.status.text().startswith("Failed:"), timeout=30000)
    assert "out of memory" in s.status.text() and "\n" not in s.status.text()
    assert s.launch_button.isEnabled() and not s.save_button.isEnabled()


def test_no_binary_is_one_line_and_nothing_starts(qtbot: Any, tmp_path: Path, private_config: Path) -> None:
    w = open_window(qtbot, private_config, tmp_path / "nowhere")
    w.server.launch()
    assert "no llama-server at" in w.server.status.text()
    assert w.server.launcher is None and w.server.launch_button.isEnabled()


def test_closing_the_window_stops_the_server(qtbot: Any, tmp_path: Path, private_config: Path) -> None:
    w = open_window(qtbot, private_config, fake_bin(tmp_path, "loaded"))
    w.server.launch()
    qtbot.waitUntil(lambda: w.server.report is not None, timeout=30000)
    run = w.server.launcher.run if w.server.launcher is not None else None
    assert run is not None and run.running
    w.close()
    assert not run.running


def test_the_check_names_the_model_it_was_made_for(qtbot: Any, tmp_path: Path, private_config: Path) -> None:
    """Another model opened after a launch: the check still on the tab says which model it is of."""
    w = open_window(qtbot, private_config, fake_bin(tmp_path, "loaded"))
    s = w.server
    w.actions_by_name["launch"].trigger()
    qtbot.waitUntil(lambda: s.report is not None, timeout=30000)
    assert s.summary.text().splitlines()[0] == f"Launched: {LLAMA.name}"
    s.stop()
    qtbot.waitUntil(lambda: not s.running, timeout=30000)
    other = next(p for p in LLAMA.parent.glob("*.gguf") if p.name != LLAMA.name and "mmproj" not in p.name)
    w.planner.open(str(other))
    qtbot.waitUntil(w.planner.settled, timeout=15000)
    assert s.summary.text().splitlines()[0] == f"Launched: {LLAMA.name}"


def test_a_second_launch_while_the_first_starts_is_refused_and_stop_stays(
    qtbot: Any, tmp_path: Path, private_config: Path
) -> None:
    """The menu's Launch twice in a row (its action does not wait for the button): the first server keeps its Stop."""
    w = open_window(qtbot, private_config, fake_bin(tmp_path, "loaded"))
    s = w.server
    w.actions_by_name["launch"].trigger()
    first = s.launcher
    w.actions_by_name["launch"].trigger()
    assert s.launcher is first
    assert s.status.text() == "llama-server is already running: stop it first."
    qtbot.waitUntil(lambda: s.report is not None, timeout=30000)
    assert s.running and s.stop_button.isEnabled()
    s.stop()
    qtbot.waitUntil(lambda: not s.running, timeout=30000)
