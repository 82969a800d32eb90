"""The window's "Compare quants": a folder and a loopback Hub repository of quants, one row each, best first; the
chosen one opens in the planner (with llama-server's -hf for a Hub model). The window's URL field takes a Hub model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from fitplan.core.inputs.model_source import forget_loaded
from fitplan.core.plan import ranking
from fitplan.gui.backend import VerdictLevel
from fitplan.gui.main_window import MainWindow
from fitplan.gui.panels.quants import QuantsDialog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.hub import TEST_REPO, HubState, fake_hub

pytestmark = [
    pytest.mark.gui,
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),  # the offscreen platform, when a dialog is shown
]
REPO = TEST_REPO


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    forget_loaded()
    yield
    forget_loaded()


def _compare(qtbot: Any, window: MainWindow, source: str) -> QuantsDialog:
    dialog = window.compare_quants(source)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: bool(dialog.rows) or "error" in dialog.status.text(), timeout=30000)
    return dialog


def test_a_folder_of_quants(qtbot: Any, window: MainWindow, repo_dir: Path) -> None:
    dialog = _compare(qtbot, window, str(repo_dir))
    rows = dialog.rows
    assert {r.name for r in rows} == {"Q2_K", "Q3_K_M", "IQ4_XS", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "BF16"}
    assert dialog.table.rowCount() == 8 and rows[0].recommended and not any(r.recommended for r in rows[1:])
    # the window's machine has one 24 GiB GPU: every quant up to Q8_0 fits on it, and the ranking puts the largest
    # file that fits on the GPU first
    fits_on_gpu = [r for r in rows if r.level == VerdictLevel.FITS]
    assert rows[: len(fits_on_gpu)] == fits_on_gpu
    assert [r.size_bytes for r in fits_on_gpu] == sorted((r.size_bytes for r in fits_on_gpu), reverse=True)
    assert all(r.max_context > 0 for r in fits_on_gpu)
    with qtbot.waitSignal(window.planner.model_loaded, timeout=15000) as opened:
        dialog.choose(1)
    assert opened.args[0].source == rows[1].model_arg
    assert ranking.RANK_RULE.startswith("ranked: fits first")


def test_a_hub_repository_opens_with_hf(
    qtbot: Any, window: MainWindow, repo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = HubState()
    st.add(REPO, repo_dir)
    with fake_hub(st) as (endpoint, state):
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        dialog = _compare(qtbot, window, f"hf.co/{REPO}")
        assert len(dialog.rows) == 8 and state.cdn_bytes < 8 << 20
        with qtbot.waitSignal(window.planner.model_loaded, timeout=15000):
            dialog.choose(0)
        qtbot.waitUntil(window.planner.settled, timeout=15000)
    name = dialog.rows[0].name
    assert window.planner.model is not None and window.planner.model.source == f"hf.co/{REPO}:{name}"
    assert f"-hf {REPO}:{name}" in window.command.text.toPlainText()


def test_the_url_field_takes_a_hub_model(
    qtbot: Any, window: MainWindow, repo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = HubState()
    st.add(REPO, repo_dir)
    with fake_hub(st) as (endpoint, _):
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        with qtbot.waitSignal(window.planner.model_loaded, timeout=15000) as opened:
            window.models.open_requested.emit(f"{endpoint}/{REPO}/resolve/main/Q8_0/"
                                              "Qwen2.5-VL-7B-Instruct-Q8_0-00002-of-00002.gguf")  # fmt: skip
    model = opened.args[0]
    # the whole split set, not its first shard only; the repository's projector paired
    assert (
        model.source == f"hf.co/{REPO}:Q8_0"
        and model.profile.file_type == "Q8_0"
        and model.mmproj is not None
    )
    assert model.profile.weight_bytes > 7 << 30
