"""The window's bugs found by walking through it as a user, one test each (offscreen)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QEvent, QMimeData, QObject, QPointF, QSize, Qt, QUrl
from PySide6.QtGui import QColor, QDragEnterEvent, QDropEvent, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QFileDialog

from fitplan.core.base.devices import GIB, Device, DeviceKind, Vendor, host_device
from fitplan.core.base.launch_settings import Engine
from fitplan.core.inputs.user_settings import HypotheticalDevice, UserSettings, save_user_settings
from fitplan.gui.backend import Detection, VerdictLevel
from fitplan.gui.main_window import MainWindow

from .conftest import GEMMA, LLAMA, NO_GPU, ONE_GPU, QWEN_MOE, make_window, wait_settled

pytestmark = [pytest.mark.gui]
TIMEOUT = 15000
#: An 8 GiB card (7.5 free) on a 16 GiB host (6 free): the 8B model fits at a short context, not at 128K.
SMALL = Detection(
    (Device("RTX 3050", DeviceKind.GPU, 8 * GIB, int(7.5 * GIB), Vendor.NVIDIA),),
    host_device(16 * GIB, 6 * GIB),
)


def started(qtbot: Any, detection: Detection, config: Path, model: Path | str | None = None) -> MainWindow:
    w = make_window(qtbot, detection, config)
    assert isinstance(w, MainWindow)
    w.show()
    w.planner.start(str(model) if model else None)
    wait_settled(qtbot, w)
    return w


def drop_urls(window: MainWindow, urls: list[QUrl]) -> None:
    mime = QMimeData()
    mime.setUrls(urls)
    window.dropEvent(
        QDropEvent(
            QPointF(50, 50),
            Qt.DropAction.CopyAction,
            mime,
            Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier,
        )
    )


# -- stale states ----------------------------------------------------------------------------------------------------
def test_an_invalid_combination_leaves_no_fits_chart_or_old_command(qtbot: Any, window: MainWindow) -> None:
    assert window.verdict.level == VerdictLevel.FITS
    window.settings.flash.setCurrentIndex(window.settings.flash.findData("off"))
    window.settings.cache_v.setCurrentText("q8_0")
    qtbot.waitUntil(lambda: window.banner.level == "error", timeout=TIMEOUT)
    assert window.verdict.level != VerdictLevel.FITS
    assert "Fits" not in window.verdict.label.text()
    assert window.command.text.toPlainText() == ""
    assert not any(area.isVisible() for area in window.chart.areas.values())
    window.settings.flash.setCurrentIndex(window.settings.flash.findData("on"))
    wait_settled(qtbot, window)
    assert window.verdict.level == VerdictLevel.FITS and "-fa on" in window.command.text.toPlainText()


def test_the_hover_readout_is_reset_when_the_model_changes(qtbot: Any, window: MainWindow) -> None:
    from fitplan.gui.panels.chart import HOVER_HINT

    window.chart.readout.setText(window.chart.readout_at(15.0))
    assert window.chart.readout.text().startswith("At ")
    with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
        window.planner.open(str(QWEN_MOE))
    assert window.chart.readout.text() == HOVER_HINT


def test_the_chart_returns_from_the_host_once_the_plan_fits_again(qtbot: Any, private_config: Path) -> None:
    w = started(qtbot, SMALL, private_config, LLAMA)
    w.settings.set_context(131072)
    out = wait_settled(qtbot, w)
    assert out.verdict.level == VerdictLevel.NO_FIT
    assert w.chart.device_box.currentText() == "Host"
    w.settings.set_context(4096)
    out = wait_settled(qtbot, w)
    assert out.verdict.level == VerdictLevel.FITS
    assert w.chart.device_box.currentText() == "RTX 3050"
    w.close()


def test_a_warning_about_the_previous_model_goes_with_it(qtbot: Any, window: MainWindow) -> None:
    with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
        window.planner.open(str(QWEN_MOE))
    window.settings.set_context(131072)
    wait_settled(qtbot, window)
    assert "training context" in window.banner.text()
    with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
        window.planner.open(str(LLAMA))
    wait_settled(qtbot, window)
    assert "training context" not in window.banner.text()


# -- messages --------------------------------------------------------------------------------------------------------
def test_messages_are_a_list_not_one_slot(qtbot: Any, private_config: Path) -> None:
    from fitplan.gui.app import build_window

    private_config.mkdir(parents=True)
    (private_config / "settings.json").write_text("{oops")
    w, _message = build_window(private_config, backend=_backend(NO_GPU))
    qtbot.addWidget(w)
    assert isinstance(w, MainWindow)
    w.show()
    w.planner.start(str(LLAMA))
    wait_settled(qtbot, w)
    text = w.banner.text()
    assert "damaged" in text and "No GPU detected" in text
    w.close()


def test_no_gpu_message_stays_away_while_hypothetical_gpus_are_planned(
    qtbot: Any, private_config: Path
) -> None:
    save_user_settings(
        UserSettings(hypothetical_devices=(HypotheticalDevice("24 GiB GPU", 24 * GIB),)), private_config
    )
    w = started(qtbot, NO_GPU, private_config, LLAMA)
    assert w.planner.outcome.estimate.devices[0].device.name == "24 GiB GPU"
    assert "No GPU detected" not in w.banner.text()
    w.close()


def _backend(detection: Detection) -> Any:
    from fitplan.gui.backend import Backend

    return Backend(probe=lambda: detection, library_places=lambda: ())


# -- chart -----------------------------------------------------------------------------------------------------------
def test_the_shaded_region_is_not_called_no_fit_at_the_training_length(
    qtbot: Any, private_config: Path
) -> None:
    big = Detection(
        (Device("RTX 6000", DeviceKind.GPU, 48 * GIB, 47 * GIB, Vendor.NVIDIA),),
        host_device(64 * GIB, 48 * GIB),
    )
    w = started(qtbot, big, private_config, QWEN_MOE)
    # Qwen3-30B-A3B was trained at 40K: that, not the 47 GiB free on the card, caps the largest context.
    assert w.planner.outcome.max_context == 40960
    region = w.chart.too_big
    assert not region.isVisible() or "no longer fits" not in region.toolTip()
    w.close()


def test_a_runtime_switch_to_a_dark_theme_darkens_the_chart(qtbot: Any, window: MainWindow) -> None:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    light = app.palette()
    dark = QPalette(light)
    for role, colour in (
        (QPalette.ColorRole.Window, "#2b2b2b"),
        (QPalette.ColorRole.WindowText, "#e0e0e0"),
        (QPalette.ColorRole.Base, "#1e1e1e"),
        (QPalette.ColorRole.Text, "#e0e0e0"),
    ):
        dark.setColor(role, QColor(colour))
    try:
        app.setPalette(dark)
        qtbot.waitUntil(
            lambda: window.chart.plot.backgroundBrush().color().lightness() < 128, timeout=TIMEOUT
        )
        label = window.chart.plot.getPlotItem().getAxis("bottom").label
        assert label.defaultTextColor().lightness() > 128
    finally:
        app.setPalette(light)


# -- models list -----------------------------------------------------------------------------------------------------
def test_sorting_by_size_sorts_by_bytes() -> None:
    from fitplan.gui.panels.models import ModelRow, ModelsPanel

    panel = ModelsPanel()
    panel.table.sortByColumn(3, Qt.SortOrder.AscendingOrder)
    for i, gib in enumerate((15.4, 17.3, 1.5, 4.6, 0.5, 2.0, 40.0)):
        panel.model.add(ModelRow(f"/m{i}.gguf", f"m{i}", "llama", "Q4_K_M", int(gib * GIB), 1))
    shown = [panel.proxy.index(r, 3).data() for r in range(panel.proxy.rowCount())]
    assert shown == ["0.5 GiB", "1.5 GiB", "2.0 GiB", "4.6 GiB", "15.4 GiB", "17.3 GiB", "40.0 GiB"]


def test_dropping_a_folder_adds_it_to_the_library(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copyfile(LLAMA, folder / "mine.gguf")
    drop_urls(window, [QUrl.fromLocalFile(str(folder))])
    qtbot.waitUntil(lambda: str(folder / "mine.gguf") in window.models.model.paths(), timeout=TIMEOUT)
    assert str(folder) in window.planner.user.folders


def test_dragging_over_the_window_highlights_it(window: MainWindow) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(LLAMA))])
    event = QDragEnterEvent(
        window.rect().center(),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    window.dragEnterEvent(event)
    assert event.isAccepted()
    assert window.findChild(type(window.verdict.label), "drop-hint").isVisible()
    window.dragLeaveEvent(None)  # type: ignore[arg-type]
    assert not window.findChild(type(window.verdict.label), "drop-hint").isVisible()


def test_three_dropped_files_all_get_a_fit_badge(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    paths = []
    for name, src in (("a.gguf", LLAMA), ("b.gguf", QWEN_MOE), ("c.gguf", LLAMA)):
        shutil.copyfile(src, tmp_path / name)
        paths.append(str(tmp_path / name))
    # The three headers arrive back to back (as when their reads finish together): each opened model's estimate
    # is superseded by the next one's, yet each must get its badge.
    planner = window.planner
    qtbot.waitUntil(
        lambda: not planner.library.badge_timer.isActive() and planner.jobs.running == 0, timeout=TIMEOUT
    )
    for model in [window.planner.backend.load(p) for p in paths]:
        window.planner._loaded(model)

    def badges() -> list[str]:
        rows = {r.path: r.fit for r in window.models.model._rows}
        return [rows.get(p, "") for p in paths]

    qtbot.waitUntil(lambda: all(badges()), timeout=TIMEOUT)
    assert all(b in (VerdictLevel.FITS, VerdictLevel.OFFLOAD, VerdictLevel.NO_FIT) for b in badges())


def test_opened_models_are_listed_again_after_a_restart(
    qtbot: Any, private_config: Path, tmp_path: Path
) -> None:
    mine = tmp_path / "opened-by-hand.gguf"
    shutil.copyfile(LLAMA, mine)
    w = started(qtbot, ONE_GPU, private_config, mine)
    with qtbot.waitSignal(w.planner.model_loaded, timeout=TIMEOUT):
        w.planner.open(str(GEMMA))
    wait_settled(qtbot, w)
    w.close()
    again = started(qtbot, ONE_GPU, private_config)
    qtbot.waitUntil(lambda: str(mine) in again.models.model.paths(), timeout=TIMEOUT)
    again.close()


def test_the_file_dialog_starts_in_the_last_models_folder(
    window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def fake(_parent: Any, _title: str, folder: str = "", _filter: str = "") -> tuple[str, str]:
        seen.append(folder)
        return "", ""

    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(fake))
    window.models.ask_open_file()
    assert seen == [str(LLAMA.parent)]


def test_the_window_title_names_the_model(window: MainWindow) -> None:
    assert "Llama 3.1 8B Instruct" in window.windowTitle()


# -- URL -------------------------------------------------------------------------------------------------------------
class HangingServer:
    """A loopback server that accepts connections and never answers; it closes them after `life_s` seconds."""

    def __init__(self, life_s: float = 20.0) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._deadline = time.monotonic() + life_s
        self._conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            try:
                conn, _ = self.sock.accept()
                self._conns.append(conn)
            except OSError:
                continue
        for c in self._conns:
            c.close()
        self.sock.close()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(5)


@pytest.fixture
def hanging() -> Any:
    server = HangingServer()
    yield server
    server.stop()


def test_a_url_read_shows_its_status_and_can_be_cancelled(
    qtbot: Any, window: MainWindow, hanging: Any
) -> None:
    url = f"http://127.0.0.1:{hanging.port}/model.gguf"
    window.planner.open(url)
    qtbot.wait(300)
    window.statusBar().showMessage("Found 1 GPU(s)", 4000)  # what other jobs say meanwhile
    assert "Reading the header" in window.activity.text()
    window.activity.cancel_button.click()
    assert window.activity.text() == ""
    assert window.planner.settled()
    assert window.banner.level != "error"


def test_quitting_during_a_hanging_url_read_is_prompt(qtbot: Any, private_config: Path, hanging: Any) -> None:
    w = started(qtbot, ONE_GPU, private_config, LLAMA)
    w.planner.open(f"http://127.0.0.1:{hanging.port}/model.gguf")
    qtbot.wait(300)
    t = time.monotonic()
    w.close()
    assert time.monotonic() - t < 1.0


# -- command line ----------------------------------------------------------------------------------------------------
def test_fitplan_model_opens_the_window_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import fitplan.gui.app as gui_app
    from fitplan.cli import main

    seen: list[list[str]] = []
    monkeypatch.setattr(gui_app, "main", lambda argv, prog="": seen.append(list(argv)) or 0)
    assert main([str(LLAMA)]) == 0
    assert seen == [[str(LLAMA)]]


def test_fitplan_gui_help_prints_help_and_opens_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    from fitplan.gui.app import main

    assert main(["--help"]) == 0
    assert "usage: fitplan-gui" in capsys.readouterr().out


def test_fitplan_gui_on_a_missing_file_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from fitplan.gui.app import main

    assert main(["/nonexistent.gguf"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "fitplan-gui: error: /nonexistent.gguf: no such file"


def test_a_missing_model_is_reported_not_replaced_by_the_example(qtbot: Any, private_config: Path) -> None:
    w = make_window(qtbot, ONE_GPU, private_config)
    assert isinstance(w, MainWindow)
    w.show()
    w.planner.start("/nonexistent.gguf")
    qtbot.waitUntil(lambda: w.planner.jobs.running == 0, timeout=TIMEOUT)
    assert w.planner.model is None
    assert "/nonexistent.gguf: no such file" in w.banner.text()
    w.close()


# -- controls --------------------------------------------------------------------------------------------------------
def test_the_margin_cannot_exceed_the_gpu(qtbot: Any, window: MainWindow) -> None:
    window.settings.margin.setValue(65536)
    out = wait_settled(qtbot, window)
    # 22 GiB free on the card: at most 22528 MiB can be kept free, never more than it has.
    assert window.settings.margin.value() <= 22528
    assert "-" not in out.verdict.text.split("may use")[-1][:3]


def test_context_slider_keyboard_steps_land_on_the_grid(qtbot: Any, window: MainWindow) -> None:
    slider = window.settings.context_slider
    window.settings.set_context(32768)
    slider.setFocus()
    qtbot.keyClick(slider, Qt.Key.Key_Right)
    assert window.settings.context_box.value() == 49152  # 32K -> 48K
    qtbot.keyClick(slider, Qt.Key.Key_Left)
    qtbot.keyClick(slider, Qt.Key.Key_Left)
    assert window.settings.context_box.value() == 24576  # 48K -> 32K -> 24K


def test_ik_llama_on_a_dense_model_exports_what_the_mla_control_shows(qtbot: Any, window: MainWindow) -> None:
    combo = window.settings.engine
    combo.setCurrentIndex(combo.findData(Engine.IK_LLAMA.value))
    wait_settled(qtbot, window)
    assert not window.settings.mla.isEnabled()
    shown = int(window.settings.mla.currentData())
    command = window.command.text.toPlainText()
    assert f"-mla {shown}" in command
    assert not window.settings.fmoe.isEnabled()  # a dense model has no experts to fuse


# -- verify ----------------------------------------------------------------------------------------------------------
def test_verify_summarises_and_compares_with_the_planned_gpus(
    qtbot: Any, window: MainWindow, tmp_path: Path
) -> None:
    build = tmp_path / "bin"
    build.mkdir()
    (build / "llama-server").write_text("")
    fake = build / "llama-fit-params"
    # A CUDA device line as llama-fit-params prints it (MiB: model, context, compute) and a stray log line.
    fake.write_text("#!/bin/sh\necho 'CUDA0 4403 4096 520'\necho 'load_tensors: raw log line' >&2\n")
    fake.chmod(0o755)
    window.planner.commands.set_llama_bin_dir(str(build))
    window.planner.commands.verify()
    qtbot.waitUntil(lambda: window.banner.has("verify"), timeout=60000)
    text = window.banner.text()
    assert "raw log line" not in text
    assert "RTX 4090" in text and "llama.cpp 9,019 MiB" in text  # 4403 + 4096 + 520


# -- small screens ---------------------------------------------------------------------------------------------------
def test_the_window_opens_within_a_small_screen() -> None:
    from fitplan.gui.main_window import fitted_size

    # A 1024x640 screen with a 32 px panel: the window and its frame must fit in 1024x608.
    size = fitted_size(QSize(1280, 800), QSize(1024, 608))
    assert size.width() <= 1024 - 16 and size.height() <= 608 - 40


def test_at_the_minimum_size_nothing_overlaps_the_plot(qtbot: Any, private_config: Path) -> None:
    two = Detection(
        (
            Device("RTX 3090", DeviceKind.GPU, 24 * GIB, 23 * GIB, Vendor.NVIDIA),
            Device("RTX 3090", DeviceKind.GPU, 24 * GIB, 23 * GIB, Vendor.NVIDIA),
        ),
        host_device(128 * GIB, 100 * GIB),
    )
    w = make_window(qtbot, two, private_config)
    assert isinstance(w, MainWindow)
    (build := private_config.parent / "bin").mkdir()
    (build / "llama-server").write_text("")
    w.planner.commands.set_llama_bin_dir(str(build))
    w.resize(w.minimumSize())
    w.show()
    w.planner.start(str(GEMMA))
    wait_settled(qtbot, w)
    qtbot.wait(50)
    chart = w.chart

    def box(widget: Any) -> Any:
        return widget.geometry().translated(
            widget.parentWidget().mapTo(w, widget.parentWidget().rect().topLeft())
        )

    plot, legend, readout = box(chart.plot), box(chart.legend), box(chart.readout)
    assert legend.top() >= plot.bottom() and readout.top() >= legend.bottom()
    axis = chart.plot.getPlotItem().getAxis("bottom")
    assert axis.isVisible() and axis.height() > 10
    assert chart.plot.height() >= 150
    verify = w.command.verify_button
    assert verify.isVisible() and verify.width() >= verify.sizeHint().width()
    assert w.rect().contains(box(verify))
    assert w.hardware.list.height() >= 2 * w.hardware.list.sizeHintForRow(0)
    w.close()


def test_model_text_is_never_rich_text(qtbot: Any, window: MainWindow) -> None:
    from PySide6.QtWidgets import QLabel

    labels = [
        *window.summary.values.values(),
        window.verdict.label,
        window.verdict.detail,
        window.chart.readout,
    ]
    assert all(label.textFormat() == Qt.TextFormat.PlainText for label in labels)
    assert all(isinstance(label, QLabel) for label in labels)
    tip = window.models.proxy.index(0, 0).data(Qt.ItemDataRole.ToolTipRole)
    assert "<b>" not in tip or "&lt;b&gt;" in tip


def test_clipboard_paste_of_a_command_sets_the_controls(qtbot: Any, window: MainWindow) -> None:
    QGuiApplication.clipboard().setText(f"llama-server -m {LLAMA} -c 8192 -ctk q8_0 -fa on --temp 0.7")
    window.actions_by_name["paste"].trigger()
    out = wait_settled(qtbot, window)
    assert window.settings.context_box.value() == 8192
    assert window.settings.cache_k.currentText() == "q8_0"
    assert out.estimate.settings.cache_type_k == "q8_0"
    command = window.command.text.toPlainText()
    assert "--temp 0.7" in command and "--temp" in window.banner.text()


def test_the_window_is_not_settled_while_a_refresh_is_about_to_start(qtbot: Any, window: MainWindow) -> None:
    """Tests and benches wait for `settled`: a pending estimate or badge refresh is work still to come."""
    assert window.planner.settled()
    window.planner.schedule_estimate()
    assert not window.planner.settled()
    qtbot.waitUntil(window.planner.settled, timeout=15000)
    window.planner.library.badge_timer.start()
    assert not window.planner.settled()
    qtbot.waitUntil(window.planner.settled, timeout=15000)


# -- start-up --------------------------------------------------------------------------------------------------------
def test_the_start_up_jobs_wait_for_the_first_paint(
    qtbot: Any, private_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPU detection, the library scan and the model's header start once the window has painted (they would
    compete with the first paint for the interpreter), and only once; a window that never paints (minimised)
    starts them after FIRST_PAINT_WAIT_MS."""
    import fitplan.gui.app as gui_app

    monkeypatch.setattr(gui_app, "FIRST_PAINT_WAIT_MS", 60000)  # this window paints long before
    w = make_window(qtbot, ONE_GPU, private_config)
    assert isinstance(w, MainWindow)
    calls: list[float] = []
    painted: list[float] = []

    class Watch(QObject):
        def eventFilter(self, obj: QObject, event: QEvent) -> bool:
            if event.type() == QEvent.Type.Paint and not painted:
                painted.append(time.monotonic())
            return False

    watch = Watch()
    w.installEventFilter(watch)
    gui_app.after_first_paint(w, lambda: calls.append(time.monotonic()))
    qtbot.wait(100)
    assert calls == []  # not shown yet: nothing started
    w.show()
    qtbot.waitUntil(lambda: len(calls) == 1, timeout=TIMEOUT)
    assert painted and calls[0] >= painted[0]
    w.update()
    qtbot.wait(50)
    assert len(calls) == 1  # a later paint does not start them again

    monkeypatch.setattr(gui_app, "FIRST_PAINT_WAIT_MS", 150)
    hidden = make_window(qtbot, ONE_GPU, private_config)
    late: list[float] = []
    t = time.monotonic()
    gui_app.after_first_paint(hidden, lambda: late.append(time.monotonic() - t))
    qtbot.waitUntil(lambda: len(late) == 1, timeout=TIMEOUT)
    assert late[0] >= 0.14
    painted.clear()
    hidden.installEventFilter(watch)
    hidden.show()  # its paint comes after the timer: nothing starts twice
    qtbot.waitUntil(lambda: bool(painted), timeout=TIMEOUT)
    qtbot.wait(100)
    assert len(late) == 1


def test_the_window_paints_before_the_estimator_and_the_gguf_tables_are_imported(tmp_path: Path) -> None:
    """What the first paint waits for is only the window: the GGUF tables, the model profile, the estimator, the
    planner and pyqtgraph (the chart's plot) load afterwards, with the first model (each costs the cold start tens of
    milliseconds, pyqtgraph a quarter of a second)."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import sys, json\n"
        "from fitplan.gui.app import create_app, build_window\n"
        "app = create_app()\n"
        "window, _ = build_window()\n"
        "window.show(); app.processEvents()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "FITPLAN_CONFIG_DIR": str(tmp_path / "cfg")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "app")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "fitplan.gui.main_window" in modules  # the window was built
    late = {
        "gguf",
        "yaml",
        "fitplan.core.gguf.ggml_types",
        "fitplan.core.model.profile",
        "fitplan.core.model.archs",
        "fitplan.core.engines",
        "fitplan.core.estimate.accuracy",
        "fitplan.core.memory.compute",
        "fitplan.core.plan.planner",
        "pyqtgraph",
    }
    assert not late & modules, sorted(late & modules)


def test_the_chart_plot_is_built_once_the_window_starts_and_keeps_what_it_was_given(
    qtbot: Any, private_config: Path
) -> None:
    """Before the start-up jobs the chart holds an empty frame (pyqtgraph is not imported yet); the plot built
    then shows the context it was given meanwhile, and building again changes nothing."""
    import math

    w = make_window(qtbot, ONE_GPU, private_config)
    assert isinstance(w, MainWindow)
    w.show()
    assert not w.chart.built
    w.chart.set_context(8192)
    w.chart.apply_theme()  # a theme switch before the plot exists
    w.planner.start()
    assert w.chart.built and w.chart.plot.accessibleName() == "Memory by context chart"
    assert math.isclose(w.chart.context_line.value(), 13.0)
    plot = w.chart.plot
    w.chart.build()
    assert w.chart.plot is plot
    wait_settled(qtbot, w)
    assert w.chart.has_data() and any(a.isVisible() for a in w.chart.areas.values())
