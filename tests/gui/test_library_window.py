"""The Models list is fed by the library scanner: examples, download places, added folders, skipped files."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from fitplan.core.inputs.user_settings import load_user_settings
from fitplan.core.library import LibraryRoot, RootKind
from fitplan.gui.backend import Backend
from fitplan.gui.main_window import MainWindow
from fitplan.gui.panels.models import PATH_ROLE

from .conftest import LLAMA, ONE_GPU, QWEN_MOE

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_level_fail("WARNING")]
TIMEOUT = 15000


def labels(window: MainWindow) -> dict[str, str]:
    model = window.models.model
    return {
        str(model.index(r, 0).data(PATH_ROLE)): str(model.index(r, 0).data()) for r in range(model.rowCount())
    }


def start(qtbot: Any, window: MainWindow) -> None:
    window.show()
    window.planner.start()
    qtbot.waitUntil(lambda: window.planner.settled(), timeout=TIMEOUT)


def test_download_places_join_the_examples(qtbot: Any, tmp_path: Path, private_config: Path) -> None:
    hub = tmp_path / "hub"
    snapshot = hub / "models--org--qwen" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    shutil.copy(QWEN_MOE, snapshot / "qwen-copy.gguf")
    backend = Backend(
        probe=lambda: ONE_GPU, library_places=lambda: (LibraryRoot(str(hub), RootKind.HUGGINGFACE),)
    )
    window = MainWindow(backend, load_user_settings(private_config).settings, private_config)
    qtbot.addWidget(window)
    start(qtbot, window)
    rows = labels(window)
    assert len(rows) == 5  # the four examples and the hub copy
    assert rows[str(snapshot / "qwen-copy.gguf")] == "Qwen3 30B A3B"  # not an example: no mark
    assert rows[str(LLAMA)] == "Llama 3.1 8B Instruct (example)"
    window.close()


def test_an_added_folder_reports_what_it_skipped(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(LLAMA, folder / "mine.gguf")
    # A download in progress, and a cut file without fitplan.header_only: the first 4096 bytes of the example.
    shutil.copy(LLAMA, folder / "next.gguf.part")
    (folder / "cut.gguf").write_bytes(LLAMA.read_bytes()[:4096])
    qtbot.waitUntil(lambda: window.planner.jobs.running == 0, timeout=TIMEOUT)
    window.planner.library.add_folder(str(folder))
    qtbot.waitUntil(
        lambda: str(folder / "mine.gguf") in labels(window) and window.planner.jobs.running == 0,
        timeout=TIMEOUT,
    )
    assert labels(window)[str(folder / "mine.gguf")] == "Llama 3.1 8B Instruct"
    assert window.banner.level == "warning"
    assert "Some files could not be used" in window.banner.text() and "(and 1 more)" in window.banner.text()
    reasons = {
        Path(e.split(": ", 1)[0]).name: e.split(": ", 1)[1] for e in window.planner.library.scan_errors
    }
    assert reasons["next.gguf.part"] == "partial download"
    assert reasons["cut.gguf"].startswith("not a readable GGUF file")  # cut inside its header
    assert str(folder) in window.planner.user.folders
