"""User journeys through the planner window, offscreen: open, drop, drag, change settings, add a GPU, copy, errors."""

from __future__ import annotations

import http.server
import json
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent, QGuiApplication
from PySide6.QtWidgets import QApplication

from fitplan.core.base.devices import GIB
from fitplan.core.base.results import TermKind
from fitplan.gui.backend import VerdictLevel
from fitplan.gui.main_window import MainWindow, dropped_sources
from gguf import GGUFWriter

from .conftest import DEEPSEEK, GEMMA, LLAMA, NO_GPU, QWEN_MOE, make_window

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_level_fail("WARNING")]
TIMEOUT = 15000


def drop(window: MainWindow, paths: list[str]) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(p) if not p.startswith("http") else QUrl(p) for p in paths])
    event = QDropEvent(
        QPointF(50, 50),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    window.dropEvent(event)


def wait_settled(qtbot: Any, window: MainWindow) -> Any:
    """Wait until the newest request has its answer on screen; return that outcome."""
    qtbot.waitUntil(
        lambda: not window.planner._debounce.isActive() and window.planner.settled(), timeout=TIMEOUT
    )
    return window.planner.outcome


def test_opens_on_the_example_model_when_the_user_has_none(window: MainWindow) -> None:
    assert window.summary.values["Model"].text() == "Llama 3.1 8B Instruct"
    assert window.summary.values["Layers"].text() == "32 layers: 32 full attention"
    assert window.summary.values["Trained context"].text() == "128K"
    assert window.planner.outcome is not None
    assert window.verdict.level in (VerdictLevel.FITS, VerdictLevel.OFFLOAD, VerdictLevel.NO_FIT)
    command = window.command.text.toPlainText()
    assert command.startswith("llama-server")
    assert str(LLAMA) in command
    assert "32768" in command
    # Not a MoE and no projector: those controls are off.
    assert not window.settings.cpu_moe.isEnabled()
    assert not window.settings.mmproj.isEnabled()


def test_drop_a_model_opens_it_and_several_are_all_added(qtbot: Any, window: MainWindow) -> None:
    with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
        drop(window, [str(QWEN_MOE)])
    assert window.summary.values["Architecture"].text() == "qwen3moe"
    assert "128 experts, 8 used per token" in window.summary.values["Layers"].text()
    assert window.settings.cpu_moe.isEnabled()
    with qtbot.waitSignals([window.planner.model_loaded, window.planner.model_loaded], timeout=TIMEOUT):
        drop(window, [str(GEMMA), str(DEEPSEEK)])
    paths = set(window.models.model.paths())
    assert {str(LLAMA), str(QWEN_MOE), str(GEMMA), str(DEEPSEEK)} <= paths


def test_drop_filters_what_it_can_open() -> None:
    assert dropped_sources(
        ["https://h/x.gguf", "ftp://h/y.gguf", "https://h/readme"], ["/a.gguf", "/b.txt"]
    ) == [
        "/a.gguf",
        "https://h/x.gguf",
    ]


def test_vision_model_pairs_its_projector_and_puts_it_in_the_command(qtbot: Any, window: MainWindow) -> None:
    with qtbot.waitSignal(
        window.planner.outcome_shown, timeout=TIMEOUT, check_params_cb=lambda o: "--mmproj" in o.args
    ):
        window.planner.open(str(GEMMA))
    assert window.settings.mmproj.isEnabled()
    assert window.summary.values["Projector"].text().startswith("yes")
    out = window.planner.outcome
    assert out is not None
    assert out.estimate.devices[0].bytes_of(TermKind.MMPROJ) > 0
    # Projector not loaded: gone from the command and from the estimate.
    window.settings.mmproj.setCurrentIndex(window.settings.mmproj.findData("none"))
    out = wait_settled(qtbot, window)
    assert "--mmproj" not in out.args
    assert all(d.bytes_of(TermKind.MMPROJ) == 0 for d in out.estimate.devices)


def test_context_slider_moves_the_chart_line_at_once_and_the_command_after(
    qtbot: Any, window: MainWindow
) -> None:
    slider = window.settings.context_slider
    target = slider.position_of(8192)
    slider.setValue(target)
    # The line follows the input before any estimate comes back.
    assert window.chart.context_line.value() == pytest.approx(13.0)  # log2(8192)
    assert window.settings.context_box.value() == 8192
    out = wait_settled(qtbot, window)
    assert out.estimate.settings.n_ctx == 8192
    assert "8192" in window.command.text.toPlainText()


def test_hover_readout_names_every_term_at_the_pointer(window: MainWindow) -> None:
    out = window.planner.outcome
    assert out is not None and out.curve is not None
    i = len(out.curve.contexts) // 2
    text = window.chart.readout_at(float(np.log2(out.curve.contexts[i])))
    total = out.curve.bytes[0, :, i].sum() / GIB
    assert text.startswith("At ") and f"total {total:.2f} GiB" in text
    assert "Weights" in text and "KV cache" in text


def test_dragging_the_chart_line_sets_the_context(qtbot: Any, window: MainWindow) -> None:
    window.chart.context_line.setValue(16.0)  # what a drag does: log2(65536)
    assert window.settings.context_box.value() == 65536
    assert wait_settled(qtbot, window).estimate.settings.n_ctx == 65536


def test_exact_context_box_and_ctrl_l(qtbot: Any, window: MainWindow) -> None:
    window.activateWindow()
    window.actions_by_name["context"].trigger()
    assert window.settings.context_box.hasFocus() or QApplication.focusWidget() is not None
    window.settings.context_box.setValue(12544)  # 49 x 256
    assert wait_settled(qtbot, window).estimate.settings.n_ctx == 12544


def test_q8_kv_cache_costs_17_32_of_f16(qtbot: Any, window: MainWindow) -> None:
    before = window.planner.outcome
    kv_f16 = sum(d.bytes_of(TermKind.KV) for d in before.estimate.devices)
    window.settings.flash.setCurrentIndex(window.settings.flash.findData("on"))
    window.settings.cache_k.setCurrentText("q8_0")
    window.settings.cache_v.setCurrentText("q8_0")
    assert wait_settled(qtbot, window).estimate.settings.cache_type_v == "q8_0"
    kv_q8 = sum(d.bytes_of(TermKind.KV) for d in window.planner.outcome.estimate.devices)
    # q8_0 stores 32 elements in 34 bytes, f16 in 64: the cache shrinks to 34/64 = 17/32.
    assert kv_q8 * 32 == kv_f16 * 17
    assert "q8_0" in window.command.text.toPlainText()


def test_quantized_v_without_flash_attention_is_explained(qtbot: Any, window: MainWindow) -> None:
    window.settings.flash.setCurrentIndex(window.settings.flash.findData("off"))
    qtbot.waitUntil(
        lambda: window.planner.outcome.estimate.settings.flash_attn.value == "off", timeout=TIMEOUT
    )
    window.settings.cache_v.setCurrentText("q8_0")
    qtbot.waitUntil(lambda: window.banner.isVisible() and window.banner.level == "error", timeout=TIMEOUT)
    assert "flash attention" in window.banner.text()
    window.settings.flash.setCurrentIndex(window.settings.flash.findData("on"))
    wait_settled(qtbot, window)
    assert not window.banner.isVisible()


def test_add_a_hypothetical_gpu_plans_for_it(qtbot: Any, private_config: Path) -> None:
    w = make_window(qtbot, NO_GPU, private_config)
    w.show()
    w.planner.start(str(LLAMA))
    wait_settled(qtbot, w)
    assert w.banner.level == "info" and "No GPU detected" in w.banner.text()
    assert [de.device.kind.value for de in w.planner.outcome.estimate.devices] == ["cpu"]
    w.hardware.size_box.setValue(12.0)
    w.hardware.add_size.click()
    wait_settled(qtbot, w)
    devices = [de.device for de in w.planner.outcome.estimate.devices]
    assert [d.name for d in devices] == ["12 GiB GPU", "Host"]
    assert devices[0].total_bytes == 12 * GIB and devices[0].hypothetical
    assert w.chart.device_box.count() == 2
    # Unticking it plans for the host only again.
    w.hardware.list.item(0).setCheckState(Qt.CheckState.Unchecked)
    wait_settled(qtbot, w)
    assert [de.device.name for de in w.planner.outcome.estimate.devices] == ["Host"]
    w.close()
    saved = json.loads((private_config / "settings.json").read_text())
    assert saved["hypothetical_devices"] == [
        {"name": "12 GiB GPU", "total_bytes": 12 * GIB, "vendor": "nvidia"}
    ]
    assert saved["planned_devices"] == []
    assert saved["recent_files"][0] == str(LLAMA)
    # Next start: the hypothetical GPU is back, still unticked.
    again = make_window(qtbot, NO_GPU, private_config)
    again.show()
    again.planner.start()
    wait_settled(qtbot, again)
    assert [(d.name, on) for d, on in again.hardware.devices()] == [("12 GiB GPU", False)]
    assert [de.device.name for de in again.planner.outcome.estimate.devices] == ["Host"]
    again.close()


def test_copy_command_shortcut(window: MainWindow) -> None:
    QGuiApplication.clipboard().clear()
    window.actions_by_name["copy"].trigger()
    assert QGuiApplication.clipboard().text() == window.command.text.toPlainText() != ""


def test_shell_choice_requotes_the_command(qtbot: Any, window: MainWindow) -> None:
    window.command.set_shell("powershell")
    ps = window.command.text.toPlainText()
    assert "`\n" in ps  # PowerShell line continuation
    window.command.set_shell("sh")
    assert "\\\n" in window.command.text.toPlainText()


def test_broken_file_shows_a_message_and_keeps_the_model(
    qtbot: Any, window: MainWindow, tmp_path: Path
) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    drop(window, [str(bad)])
    qtbot.waitUntil(lambda: window.banner.level == "error" and window.banner.isVisible(), timeout=TIMEOUT)
    assert "broken.gguf" in window.banner.text()
    assert window.summary.values["Model"].text() == "Llama 3.1 8B Instruct"
    assert window.planner.model is not None and window.planner.model.source == str(LLAMA)


def test_not_a_gguf_at_all(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    bad = tmp_path / "notes.gguf"
    bad.write_text("hello")
    window.planner.open(str(bad))
    qtbot.waitUntil(lambda: window.banner.level == "error" and window.banner.isVisible(), timeout=TIMEOUT)
    assert "notes.gguf" in window.banner.text()


def test_unknown_architecture_is_flagged(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    path = tmp_path / "mystery.gguf"
    w = GGUFWriter(path, "mysterynet")
    w.add_block_count(2)
    w.add_context_length(4096)
    w.add_embedding_length(256)
    w.add_feed_forward_length(512)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    import numpy as np

    w.add_tensor("token_embd.weight", np.zeros((1000, 256), dtype=np.float32))
    for i in range(2):
        for name, shape in (("attn_q", (256, 256)), ("attn_k", (256, 256)), ("attn_v", (256, 256))):
            w.add_tensor(f"blk.{i}.{name}.weight", np.zeros(shape, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    window.planner.open(str(path))
    qtbot.waitUntil(lambda: window.banner.isVisible() and window.banner.level == "warning", timeout=TIMEOUT)
    assert "mysterynet" in window.banner.text()
    assert "unverified architecture" in window.summary.values["Architecture"].text()
    # The app keeps working: the estimate for it arrives.
    wait_settled(qtbot, window)
    assert window.planner.outcome.estimate.settings.n_ctx == 4096  # min(32768, trained 4096)


def test_unreachable_url_shows_a_message(qtbot: Any, window: MainWindow) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    window.planner.open(f"http://127.0.0.1:{port}/model.gguf")
    qtbot.waitUntil(lambda: window.banner.level == "error" and window.banner.isVisible(), timeout=TIMEOUT)
    assert "127.0.0.1" in window.banner.text()
    assert window.planner.model is not None and window.planner.model.source == str(LLAMA)


class _RangeServer(http.server.BaseHTTPRequestHandler):
    """Serves the example folder with HTTP byte ranges, as model hosts do."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = LLAMA.parent / self.path.lstrip("/")
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        m = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m is None:
            self.send_error(416)
            return
        first = int(m.group(1))
        last = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
        chunk = data[first : last + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
        self.send_header("Content-Length", str(len(chunk)))
        self.end_headers()
        self.wfile.write(chunk)


def test_open_a_model_by_url(qtbot: Any, window: MainWindow) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RangeServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{DEEPSEEK.name}"
        with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
            drop(window, [url])
        assert window.summary.values["Model"].text() == "DeepSeek V2 Lite Chat"
        assert url in window.models.model.paths()
        assert window.planner.user.recent_files[0] == url
        # llama-server takes a URL with -mu (--model-url) and downloads it; -m takes a local path only.
        wait_settled(qtbot, window)
        args = window.planner.outcome.args
        assert args[args.index("-mu") + 1] == url
        assert "-m" not in args
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_filter_box_filters_the_library(qtbot: Any, window: MainWindow) -> None:
    with qtbot.waitSignal(window.planner.model_loaded, timeout=TIMEOUT):
        window.planner.open(str(QWEN_MOE))
    assert window.models.proxy.rowCount() == 4  # the four bundled examples; opening one adds no row
    qtbot.keyClicks(window.models.filter_box, "qwen3")
    assert window.models.proxy.rowCount() == 1


def test_folder_scan_adds_every_model_with_a_fit_badge(qtbot: Any, window: MainWindow) -> None:
    from fitplan.gui.panels.models import FIT_BADGES

    qtbot.waitUntil(lambda: window.planner.jobs.running == 0, timeout=TIMEOUT)
    window.planner.library.add_folder(str(LLAMA.parent))
    qtbot.waitUntil(
        lambda: window.models.model.rowCount() >= 4 and window.planner.jobs.running == 0, timeout=TIMEOUT
    )
    names = {Path(p).name for p in window.models.model.paths()}
    assert not any("mmproj" in n for n in names)
    assert str(LLAMA.parent) in window.planner.user.folders
    model = window.models.model
    badges = {
        model.index(r, 0).data(Qt.ItemDataRole.UserRole + 2): model.index(r, 5).data()
        for r in range(model.rowCount())
    }
    assert set(badges.values()) <= {
        FIT_BADGES[VerdictLevel.FITS],
        FIT_BADGES[VerdictLevel.OFFLOAD],
        FIT_BADGES[VerdictLevel.NO_FIT],
    }
    # Llama-3.1-8B at 32K: 4.6 GiB of weights + 4 GiB of f16 KV cache, well inside 22 GiB free.
    assert badges[str(LLAMA)] == FIT_BADGES[VerdictLevel.FITS]


def test_window_remembers_settings_per_model(qtbot: Any, private_config: Path) -> None:
    w = make_window(qtbot, NO_GPU, private_config)
    w.show()
    w.planner.start(str(LLAMA))
    wait_settled(qtbot, w)
    w.settings.context_box.setValue(4096)
    w.close()  # before the debounced estimate: the choice must still be saved
    again = make_window(qtbot, NO_GPU, private_config)
    again.show()
    again.planner.start()
    wait_settled(qtbot, again)
    assert again.settings.context_box.value() == 4096
    assert again.planner.model.source == str(LLAMA)
    again.close()


def test_corrupt_saved_settings_do_not_stop_the_window(qtbot: Any, private_config: Path) -> None:
    from fitplan.gui.app import build_window

    private_config.mkdir(parents=True)
    (private_config / "settings.json").write_text("{oops")
    w, message = build_window(private_config)
    qtbot.addWidget(w)
    assert message is not None and "damaged" in message
    assert w.banner.level == "warning"
    w.close()


def test_minimum_size_and_tab_order(window: MainWindow) -> None:
    # Fits a 1024x640 screen with its panels and the window frame (the small screen).
    assert (window.minimumSize().width(), window.minimumSize().height()) == (960, 540)
    chain = []
    widget = window.models.open_button
    for _ in range(12):
        chain.append(widget)
        widget = widget.nextInFocusChain()
    assert window.models.filter_box in chain and window.models.table in chain
    assert window.settings.context_slider.nextInFocusChain() is window.settings.context_box


def test_an_interrupted_download_is_not_mistaken_for_an_example(
    qtbot: Any, window: MainWindow, tmp_path: Path
) -> None:
    # The same header without the header-only flag: the file now lacks 4.6 GiB of declared tensor data.
    data = LLAMA.read_bytes().replace(b"fitplan.header_only", b"fitplan.header_xxxx")
    partial = tmp_path / "partial.gguf"
    partial.write_bytes(data)
    window.planner.open(str(partial))
    qtbot.waitUntil(lambda: window.banner.level == "error" and window.banner.isVisible(), timeout=TIMEOUT)
    assert "incomplete download" in window.banner.text()


def test_follows_a_switch_to_a_dark_theme(qtbot: Any, window: MainWindow) -> None:
    from PySide6.QtGui import QColor, QPalette

    from fitplan.gui.theme import VERDICT_COLOURS

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    light_palette = app.palette()
    level = window.verdict.level
    assert VERDICT_COLOURS[level][0] in window.verdict.styleSheet()
    dark = QPalette(light_palette)
    dark.setColor(QPalette.ColorRole.Window, QColor("#202020"))
    dark.setColor(QPalette.ColorRole.WindowText, QColor("#e0e0e0"))
    try:
        app.setPalette(dark)
        qtbot.waitUntil(lambda: VERDICT_COLOURS[level][1] in window.verdict.styleSheet(), timeout=TIMEOUT)
        axis = window.chart.plot.getPlotItem().getAxis("bottom")
        assert axis.textPen().color().name() == "#e0e0e0"
    finally:
        app.setPalette(light_palette)


def test_verify_button_only_with_a_local_llama_cpp_build(
    qtbot: Any, window: MainWindow, tmp_path: Path
) -> None:
    assert window.command.verify_button.isHidden()
    empty = tmp_path / "empty"
    empty.mkdir()
    window.planner.commands.set_llama_bin_dir(str(empty))
    assert window.command.verify_button.isHidden()
    assert window.banner.level == "warning" and "llama-server" in window.banner.text()
    build = tmp_path / "bin"
    build.mkdir()
    (build / "llama-server").write_text("")
    window.planner.commands.set_llama_bin_dir(str(build))
    assert not window.command.verify_button.isHidden()
    assert window.planner.user.llama_bin_dir == str(build)


def test_the_projector_row_sets_the_largest_image(qtbot: Any, window: MainWindow) -> None:
    """--image-max-tokens has its control beside the projector: written into the command, in the plan's
    settings, off (disabled) without a projector, "auto" leaves it out."""
    assert not window.settings.image_tokens.isEnabled()  # the 8B example has no projector
    with qtbot.waitSignal(
        window.planner.outcome_shown, timeout=TIMEOUT, check_params_cb=lambda o: "--mmproj" in o.args
    ):
        window.planner.open(str(GEMMA))
    s = window.settings
    assert s.image_tokens.isEnabled() and s.image_tokens.text() == "auto"
    assert "--image-max-tokens" not in window.planner.outcome.args
    s.image_tokens.setValue(1024)
    out = wait_settled(qtbot, window)
    i = out.args.index("--image-max-tokens")
    assert out.args[i + 1] == "1024" and out.plan_settings.image_max_tokens == 1024
    s.image_tokens.setValue(0)
    out = wait_settled(qtbot, window)
    assert "--image-max-tokens" not in out.args and out.plan_settings.image_max_tokens == -1
