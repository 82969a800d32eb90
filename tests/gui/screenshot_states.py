"""Open the window in its main states on a real X display and save a PNG of each, with layout checks.

Run by tests/gui/test_screenshots.py under Xvfb (QT_QPA_PLATFORM=xcb):

    python tests/gui/screenshot_states.py OUT_DIR

Writes OUT_DIR/<state>.png and OUT_DIR/report.json: per state, the window size, the grey-level standard deviation of
the picture (a blank window is ~0) and the visible widgets that are clipped (outside the window, or squeezed below
their minimum size hint).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage, QPalette
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QLabel,
    QLineEdit,
    QScrollArea,
    QSpinBox,
    QWidget,
)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "app"))

from fitplan.core.base.devices import GIB, MIB, Device, DeviceKind, Vendor, host_device  # noqa: E402
from fitplan.core.base.launch_settings import Engine  # noqa: E402
from fitplan.core.hardware.probe import DetectedGpu, GpuProcess  # noqa: E402
from fitplan.core.inputs.user_settings import UserSettings  # noqa: E402
from fitplan.gui.app import create_app  # noqa: E402
from fitplan.gui.backend import Backend, Detection  # noqa: E402
from fitplan.gui.main_window import MainWindow  # noqa: E402
from fitplan.gui.theme import configure_pyqtgraph  # noqa: E402

EXAMPLES = ROOT / "resources" / "examples"
LLAMA = EXAMPLES / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"
QWEN = EXAMPLES / "Qwen3-30B-A3B-Q4_K_M.gguf"
GEMMA = EXAMPLES / "gemma-3-12b-it-Q4_K_M.gguf"
DEEPSEEK = EXAMPLES / "DeepSeek-V2-Lite-Chat-Q4_K_M.gguf"


def gpu(name: str, gib: float, free_gib: float | None = None) -> Device:
    free = gib if free_gib is None else free_gib
    return Device(name, DeviceKind.GPU, int(gib * GIB), int(free * GIB), Vendor.NVIDIA)


DESKTOP = Detection((gpu("RTX 4090", 24, 22.5),), host_device(64 * GIB, 52 * GIB))
SMALL_GPU = Detection((gpu("RTX 4070", 12, 11.2),), host_device(64 * GIB, 52 * GIB))
TOO_SMALL = Detection((gpu("RTX 3050", 8, 7.5),), host_device(16 * GIB, 6 * GIB))
TWO_GPUS = Detection(
    (gpu("RTX 3090", 24, 23.2), gpu("RTX 3090", 24, 23.4)), host_device(128 * GIB, 100 * GIB)
)
#: the card that also drives the desktop, a browser and ComfyUI: NVML lists who holds its 3.9 GiB
_SHARED_CARD = gpu("RTX 4090", 24, 20.1)
SHARED_CARD = Detection(
    (_SHARED_CARD,),
    host_device(64 * GIB, 41 * GIB),
    (),
    (
        DetectedGpu(
            _SHARED_CARD,
            "GPU-0",
            0,
            used_bytes=_SHARED_CARD.total_bytes - _SHARED_CARD.free_bytes,
            processes=(
                GpuProcess(1432, "Xorg", 612 * MIB, "graphics"),
                GpuProcess(4242, "firefox", 1230 * MIB, "graphics"),
                GpuProcess(5120, "python3", 1610 * MIB, "compute"),
            ),
        ),
    ),
)


def dark_palette() -> QPalette:
    p = QPalette()
    roles = QPalette.ColorRole
    for role, colour in (
        (roles.Window, "#2b2b2b"),
        (roles.WindowText, "#e6e6e6"),
        (roles.Base, "#1e1e1e"),
        (roles.AlternateBase, "#2f2f2f"),
        (roles.Text, "#e6e6e6"),
        (roles.Button, "#353535"),
        (roles.ButtonText, "#e6e6e6"),
        (roles.Highlight, "#2a6bb3"),
        (roles.HighlightedText, "#ffffff"),
        (roles.ToolTipBase, "#3a3a3a"),
        (roles.ToolTipText, "#e6e6e6"),
        (roles.PlaceholderText, "#9a9a9a"),
    ):
        p.setColor(role, QColor(colour))
    for role in (roles.WindowText, roles.Text, roles.ButtonText):  # a desktop theme greys disabled controls
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor("#7f7f7f"))
    return p


def settle(app: QApplication, window: MainWindow, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        app.processEvents()
        if window.planner.settled() and not window.planner._debounce.isActive():
            break
        time.sleep(0.01)
    for _ in range(5):  # let layouts and repaints finish
        app.processEvents()
        time.sleep(0.02)


def clipped_widgets(window: QWidget) -> list[str]:
    """Visible leaf controls that stick out of the window or are narrower/shorter than their minimum hint, and
    word-wrapped labels shorter than their text needs at their width (a verdict's last line cut off)."""
    out = []
    win = window.rect()
    for w in window.findChildren(QWidget):
        if not w.isVisible() or not isinstance(w, (QAbstractButton, QLabel, QComboBox, QLineEdit, QSpinBox)):
            continue
        if isinstance(w, QLabel) and w.wordWrap() and w.text():
            if w.height() + 1 < w.heightForWidth(w.width()):
                out.append(
                    f"QLabel({_text_of(w)!r}) cut to {w.height()} px of the {w.heightForWidth(w.width())} its text needs"
                )
            continue
        if isinstance(w, QLabel) and not w.text():
            continue
        if isinstance(w, QLineEdit) and isinstance(w.parentWidget(), (QAbstractSpinBox, QComboBox)):
            continue  # the editor inside a spin box or combo box: its parent is checked
        area = _scroll_area_of(w)
        top_left = w.mapTo(window, w.rect().topLeft())
        bottom_right = w.mapTo(window, w.rect().bottomRight())
        hint = w.minimumSizeHint()
        name = f"{type(w).__name__}({_text_of(w)!r})"
        if area is not None:
            # Inside a scroll area: may scroll vertically, must fit the viewport's width.
            port = area.viewport()
            left = w.mapTo(port, w.rect().topLeft()).x()
            right = w.mapTo(port, w.rect().bottomRight()).x()
            if left < 0 or right >= port.width():
                out.append(f"{name} cut off at the side of its scroll area")
            elif w.width() + 1 < hint.width():
                out.append(f"{name} squeezed to {w.width()} px wide < {hint.width()}")
        elif not (win.contains(top_left) and win.contains(bottom_right)):
            out.append(f"{name} outside the window")
        elif w.width() + 1 < hint.width() or w.height() + 1 < hint.height():
            out.append(f"{name} squeezed to {w.width()}x{w.height()} < {hint.width()}x{hint.height()}")
    return out


def not_in_view(window: MainWindow) -> list[str]:
    """What a user must see without scrolling, when it is not all on screen: the verdict, the command and its
    buttons, the settings column's width (nothing of it outside the window)."""
    out = []
    for name, w, whole in (
        ("verdict", window.verdict.label, True),
        ("command", window.command.text, True),
        ("copy button", window.command.copy_button, True),
        ("settings", window.settings, False),  # its column scrolls down, never sideways
        ("hardware", window.hardware, False),
    ):
        seen = w.visibleRegion().boundingRect()
        short = seen.height() < w.height() - 1 if whole else False
        if w.isVisible() and (short or seen.width() < w.width() - 1):
            out.append(f"{name}: {seen.width()}x{seen.height()} of {w.width()}x{w.height()} in view")
    for i, row in enumerate(
        window.banner._rows
    ):  # every message whole on screen (the list may scroll past 4)
        seen = row.visibleRegion().boundingRect()
        if i < 4 and (seen.height() < row.height() - 1 or seen.width() < row.width() - 1):
            out.append(
                f"message {i + 1}: {seen.width()}x{seen.height()} of {row.width()}x{row.height()} in view"
            )
    return out


def _scroll_area_of(w: QWidget) -> QScrollArea | None:
    p = w.parentWidget()
    while p is not None:
        if isinstance(p, QScrollArea):
            return p
        p = p.parentWidget()
    return None


def _text_of(w: QWidget) -> str:
    for attr in ("text", "currentText"):
        fn = getattr(w, attr, None)
        if callable(fn):
            value = fn()
            if isinstance(value, str):
                return value[:30]
    return ""


def grey_std(image: QImage) -> float:
    img = image.convertToFormat(QImage.Format.Format_Grayscale8)
    ptr = img.constBits()
    arr = np.frombuffer(ptr, dtype=np.uint8, count=img.bytesPerLine() * img.height())
    return float(arr.reshape(img.height(), img.bytesPerLine())[:, : img.width()].std())


def shoot(
    app: QApplication,
    out: Path,
    name: str,
    detection: Detection,
    model: Path | str,
    size: tuple[int, int] = (1280, 800),
    prepare: Callable[[MainWindow], None] | None = None,
) -> dict[str, object]:
    config = Path(tempfile.mkdtemp(prefix="fitplan-shot-"))
    # The library: the bundled examples only (never the download folders of the machine taking the pictures).
    window = MainWindow(Backend(probe=lambda: detection, library_places=lambda: ()), UserSettings(), config)
    window.resize(*size)
    window.show()
    window.planner.start(str(model))
    settle(app, window)
    if prepare is not None:
        prepare(window)
        settle(app, window)
    image = window.grab().toImage()
    path = out / f"{name}.png"
    image.save(str(path))
    result: dict[str, object] = {
        "file": path.name,
        "size": [window.width(), window.height()],
        "grey_std": grey_std(image),
        "clipped": clipped_widgets(window),
        "verdict": window.verdict.label.text(),
        "banner": window.banner.text(),
        "command": window.command.text.toPlainText(),
        "not_in_view": not_in_view(window),
        "list_name_width": window.models.table.columnWidth(0),
        "alternatives": [row.plain for row in window.verdict.alternative_buttons],
    }
    window.close()
    window.deleteLater()
    app.processEvents()
    return result


def engine(name: Engine, then: Callable[[MainWindow], None] | None = None) -> Callable[[MainWindow], None]:
    """A `prepare` step: pick the engine in the Settings panel, then apply `then` once its estimate is in."""

    def prepare(window: MainWindow) -> None:
        combo = window.settings.engine
        combo.setCurrentIndex(combo.findData(name.value))
        if then is not None:
            app = QApplication.instance()
            assert isinstance(app, QApplication)
            settle(app, window)
            then(window)

    return prepare


def kvarn4(window: MainWindow) -> None:
    window.settings.cache_k.setCurrentText("kvarn4")
    window.settings.cache_v.setCurrentText("kvarn4")


def ollama_two_slots(window: MainWindow) -> None:
    window.settings.slots.setValue(2)
    window.settings.cache_k.setCurrentText("q8_0")
    window.settings.overhead.setValue(512)


def devices_and_draft(window: MainWindow) -> None:
    """Only the second card (-dev CUDA1), the 8B model as its own draft (-md) with -ngld 20, the draft rows in view."""
    s = window.settings
    next(a for a in s.device_actions() if a.text().startswith("CUDA0")).trigger()
    s.choose_draft(str(LLAMA))
    s.draft_ngl.setValue(20)
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    settle(app, window)  # the draft rows are laid out
    area = _scroll_area_of(s)
    if area is not None:
        area.ensureWidgetVisible(s.draft_cache_k, 10, 10)


#: An 8 GiB card: the 12B example with the 8B as its draft keeps layers on the CPU; -nkvo and dropping the draft
#: are offered in rows of two and three lines
CARD_8 = Detection((gpu("RTX 4060", 8),), host_device(32 * GIB, 28 * GIB))


def draft_on_a_small_card(window: MainWindow) -> None:
    window.settings.choose_draft(str(LLAMA))


TWO_3060 = Detection((gpu("RTX 3060", 12, 11.5), gpu("RTX 3060", 12, 11.5)), host_device(64 * GIB, 52 * GIB))
NO_GPU = Detection((), host_device(64 * GIB, 48 * GIB), ("NVIDIA: NVML library not found",))
#: The three screens a user has in mind (the window filling each, less its title bar and a panel).
SIZES = {"1024": (1024, 640), "1280": (1280, 800), "1920": (1920, 1080)}
LONG_PASTE = (
    f"llama-server -m {LLAMA} -c 16384 --alias my-very-long-alias-name --chat-template-file "
    "/home/user/templates/a-very-long-template-name.jinja --reasoning-format deepseek --host 0.0.0.0 --port 8081 "
    "--jinja -ot 'blk\\.(1|2|3)\\.ffn_.*=CPU'"
)


def long_paste(window: MainWindow) -> None:
    """A pasted command with flags kept in the command: two messages above the verdict, a long command."""
    window.planner.configs.paste_command(LONG_PASTE)


def two_more_gpus(window: MainWindow) -> None:
    """Two cards of the catalog's longest name added: their bars are named with (GPU1), (GPU2)."""
    hw = window.hardware
    longest = max(range(hw.catalog.count()), key=lambda i: len(hw.catalog.itemText(i)))
    hw.catalog.setCurrentIndex(longest)
    hw.add_catalog.click()
    hw.add_catalog.click()


def not_a_gguf(window: MainWindow) -> None:
    window.planner.open(str(ROOT / "README.md"))


def wheel_check(app: QApplication) -> dict[str, object]:
    """Turn the wheel over the flash attention box and the context slider of a 1024x640 window without clicking
    them: the values stay, the settings column scrolls."""
    from PySide6.QtCore import QPoint, QPointF
    from PySide6.QtGui import QWheelEvent

    config = Path(tempfile.mkdtemp(prefix="fitplan-shot-"))
    window = MainWindow(Backend(probe=lambda: DESKTOP, library_places=lambda: ()), UserSettings(), config)
    window.resize(*SIZES["1024"])
    window.show()
    window.planner.start(str(LLAMA))
    settle(app, window)
    s = window.settings
    area = _scroll_area_of(s)
    assert area is not None
    before = (s.flash.currentText(), s.context_box.value(), area.verticalScrollBar().value())
    for target in (s.flash, s.context_slider, s.context_box):
        centre = QPointF(target.rect().center())
        event = QWheelEvent(
            centre,
            QPointF(target.mapToGlobal(target.rect().center())),
            QPoint(0, 0),
            QPoint(0, -240),
            Qt.MouseButton.NoButton,
            Qt.KeyboardModifier.NoModifier,
            Qt.ScrollPhase.NoScrollPhase,
            False,
        )
        QApplication.sendEvent(target, event)
        app.processEvents()
    settle(app, window)
    after = (s.flash.currentText(), s.context_box.value(), area.verticalScrollBar().value())
    window.close()
    window.deleteLater()
    app.processEvents()
    return {"values_kept": before[:2] == after[:2], "scrolled_by": after[2] - before[2]}


def shoot_quants(app: QApplication, out: Path, size: tuple[int, int]) -> dict[str, object]:
    """The Compare quants dialog over the bundled examples, from a window of `size`."""
    config = Path(tempfile.mkdtemp(prefix="fitplan-shot-"))
    window = MainWindow(Backend(probe=lambda: DESKTOP, library_places=lambda: ()), UserSettings(), config)
    window.resize(*size)
    window.show()
    window.planner.start(str(LLAMA))
    settle(app, window)
    dialog = window.compare_quants(str(EXAMPLES))
    end = time.monotonic() + 30
    while not dialog.rows and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)
    for _ in range(5):
        app.processEvents()
        time.sleep(0.02)
    image = dialog.grab().toImage()
    image.save(str(out / "quants-1024.png"))
    result: dict[str, object] = {
        "file": "quants-1024.png",
        "size": [dialog.width(), dialog.height()],
        "minimum_width": dialog.minimumSizeHint().width(),
        "rows": len(dialog.rows),
        "grey_std": grey_std(image),
        "clipped": clipped_widgets(dialog),
    }
    dialog.close()
    window.close()
    window.deleteLater()
    app.processEvents()
    return result


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    dark = "--dark" in argv
    app = create_app()
    assert isinstance(app, QApplication)
    if dark:
        # What a dark desktop theme hands Qt: Fusion with a dark palette (Xvfb has no platform theme to ask).
        app.setStyle("Fusion")
        app.styleHints().setColorScheme(Qt.ColorScheme.Dark)
        app.setPalette(dark_palette())
    configure_pyqtgraph()
    os.environ.setdefault("FITPLAN_CONFIG_DIR", tempfile.mkdtemp(prefix="fitplan-shot-cfg-"))
    report: dict[str, object] = {}
    states: list[tuple[str, Detection, Path | str, tuple[int, int], Callable[[MainWindow], None] | None]] = [
        ("main", DESKTOP, LLAMA, (1280, 800), None),
        ("moe-partial-offload", SMALL_GPU, QWEN, (1280, 800), None),
        ("does-not-fit", TOO_SMALL, QWEN, (1280, 800), None),
        ("vision-two-gpus", TWO_GPUS, GEMMA, (1280, 800), None),
        ("mla-minimum-size", DESKTOP, DEEPSEEK, (1024, 640), None),
        ("error-banner", DESKTOP, LLAMA, (1280, 800), lambda w: w.planner.open(str(ROOT / "README.md"))),
        ("deepseek-llamacpp", DESKTOP, DEEPSEEK, (1280, 800), None),
        ("deepseek-ik-mla3", DESKTOP, DEEPSEEK, (1280, 800), engine(Engine.IK_LLAMA)),
        ("beellama-kvarn4", DESKTOP, LLAMA, (1280, 800), engine(Engine.BEELLAMA, kvarn4)),
        ("ollama", DESKTOP, LLAMA, (1280, 800), engine(Engine.OLLAMA, ollama_two_slots)),
        ("devices-and-draft", TWO_GPUS, LLAMA, (1024, 640), devices_and_draft),
        ("messages-no-gpu-1024", NO_GPU, LLAMA, SIZES["1024"], not_a_gguf),
        ("two-3060-qwen-1280", TWO_3060, QWEN, SIZES["1280"], None),
        ("two-3060-qwen-1024", TWO_3060, QWEN, SIZES["1024"], None),
        ("long-paste-1280", DESKTOP, LLAMA, SIZES["1280"], long_paste),
        ("long-paste-1024", DESKTOP, LLAMA, SIZES["1024"], long_paste),
        ("more-gpus-1024", SMALL_GPU, QWEN, SIZES["1024"], two_more_gpus),
        ("held-by-others-1280", SHARED_CARD, LLAMA, SIZES["1280"], None),
        ("held-by-others-1024", SHARED_CARD, LLAMA, SIZES["1024"], None),
        ("many-rows-1280", CARD_8, GEMMA, SIZES["1280"], draft_on_a_small_card),
        ("many-rows-1024", CARD_8, GEMMA, SIZES["1024"], draft_on_a_small_card),
    ]
    states += [(f"main-{key}", DESKTOP, DEEPSEEK, size, None) for key, size in SIZES.items()]
    if dark:
        states = [
            ("main-dark", DESKTOP, LLAMA, (1280, 800), None),
            ("devices-and-draft-dark", TWO_GPUS, LLAMA, (1280, 800), devices_and_draft),
            *[(f"main-{key}-dark", DESKTOP, DEEPSEEK, size, None) for key, size in SIZES.items()],
            ("long-paste-1024-dark", DESKTOP, LLAMA, SIZES["1024"], long_paste),
        ]
    for name, det, model, size, prepare in states:
        report[name] = shoot(app, out, name, det, model, size, prepare)
    if not dark:
        report["quants-1024"] = shoot_quants(app, out, SIZES["1024"])
        report["wheel-1024"] = wheel_check(app)
    (out / ("report-dark.json" if dark else "report.json")).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
