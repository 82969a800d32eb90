"""Fixtures for the window tests: offscreen Qt, a private config folder, a fake machine, the example models."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from fitplan.core.base.devices import GIB, Device, DeviceKind, Vendor, host_device
from fitplan.gui.backend import Backend, Detection

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "resources" / "examples"
LLAMA = EXAMPLES / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"
QWEN_MOE = EXAMPLES / "Qwen3-30B-A3B-Q4_K_M.gguf"
GEMMA = EXAMPLES / "gemma-3-12b-it-Q4_K_M.gguf"
DEEPSEEK = EXAMPLES / "DeepSeek-V2-Lite-Chat-Q4_K_M.gguf"

#: A 64 GiB host with 48 GiB free and no GPU: the machine of a laptop without a discrete card.
NO_GPU = Detection((), host_device(64 * GIB, 48 * GIB), ("NVIDIA: NVML library not found",))
#: The same host with one 24 GiB GPU, 22 GiB of it free.
ONE_GPU = Detection(
    (Device("RTX 4090", DeviceKind.GPU, 24 * GIB, 22 * GIB, Vendor.NVIDIA),),
    host_device(64 * GIB, 48 * GIB),
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the Qt tests on a binding release that aborts the interpreter (see known_binding_problem)."""
    from fitplan.gui.app import known_binding_problem

    problem = known_binding_problem()
    if problem is None:
        return
    skip = pytest.mark.skip(reason=problem)
    here = Path(__file__).parent
    for item in items:
        if item.get_closest_marker("gui") is not None and item.path.is_relative_to(here):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def private_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cfg = tmp_path / "config"
    monkeypatch.setenv("FITPLAN_CONFIG_DIR", str(cfg))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return cfg


def make_window(qtbot: object, detection: Detection, config: Path) -> object:
    from fitplan.core.inputs.user_settings import load_user_settings
    from fitplan.gui.main_window import MainWindow
    from fitplan.gui.theme import configure_pyqtgraph

    configure_pyqtgraph()
    # The library holds the bundled examples and the test's folders only, never the download places of this machine.
    backend = Backend(probe=lambda: detection, library_places=lambda: ())
    window = MainWindow(backend, load_user_settings(config).settings, config)
    qtbot.addWidget(window)  # type: ignore[attr-defined]
    return window


@pytest.fixture
def window(qtbot: object, private_config: Path) -> Iterator[object]:
    """The window on the 8B example with one 24 GiB GPU, after its first estimate arrived."""
    w = make_window(qtbot, ONE_GPU, private_config)
    w.show()  # type: ignore[attr-defined]
    w.planner.start()  # type: ignore[attr-defined]
    qtbot.waitUntil(w.planner.settled, timeout=15000)  # type: ignore[attr-defined]
    yield w
    w.close()


def wait_settled(qtbot: Any, window: Any, timeout: int = 15000) -> Any:
    """Wait until no change is pending and the newest request is answered; the outcome shown."""
    qtbot.waitUntil(
        lambda: not window.planner._debounce.isActive() and window.planner.settled(), timeout=timeout
    )
    return window.planner.outcome
