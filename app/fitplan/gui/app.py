"""Entry point of the planner window: `fitplan` with no arguments, or `fitplan-gui [MODEL]`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from fitplan.core.base.files import expand_home
from fitplan.core.inputs.user_settings import load_user_settings

GUI_SWITCH_INTERVAL_S = 0.001
SIGNAL_POLL_MS = 250
FIRST_PAINT_WAIT_MS = 1000


def known_binding_problem() -> str | None:
    """A Qt binding release known to crash this interpreter, with what to install instead (None when fine).

    PySide6 6.12.0 releases one reference to True/None (and other shared objects) too many on every signal it
    emits. From Python 3.12 those objects are immortal and nothing happens; on Python 3.11 the interpreter aborts
    ("Fatal Python error: bool_dealloc") after a few thousand signals: seconds of dragging a slider.
    """
    import PySide6

    if sys.version_info < (3, 12) and PySide6.__version__ == "6.12.0":
        return (
            "PySide6 6.12.0 crashes Python 3.11 after a few thousand signals (a reference-counting bug in the "
            "binding): install PySide6-Essentials 6.11 (pip install 'PySide6-Essentials<6.12') or use Python 3.12+."
        )
    return None


def create_app(argv: Sequence[str] = ()) -> object:
    """The QApplication (created once), with HiDPI and system colours honoured."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QIcon
    from PySide6.QtWidgets import QApplication

    from fitplan import bundled

    existing = QApplication.instance()
    if existing is not None:
        return existing
    # The estimator thread is pure Python: hand the interpreter back to the GUI thread every millisecond (default
    # 5 ms) so input and painting never wait long behind a computation.
    sys.setswitchinterval(GUI_SWITCH_INTERVAL_S)
    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(Qt.HighDpiScaleFactorRoundingPolicy.PassThrough)
    app = QApplication(["fitplan", *argv])
    app.setApplicationName("fitplan")
    app.setOrganizationName("fitplan")
    app.setDesktopFileName(bundled.ICON_NAME)  # matches packaging/linux/<ICON_NAME>.desktop
    icon = QIcon()
    for size in (16, 24, 32, 48, 64, 128, 256):
        path = bundled.icon_png(size)
        if path.is_file():
            icon.addFile(str(path))
    app.setWindowIcon(icon)
    return app


def build_window(config_dir: Path | None = None, backend: object | None = None) -> tuple[object, str | None]:
    """The window and the message about set-aside settings (if any); shared by main(), benches and tests."""
    from fitplan.gui.backend import Backend
    from fitplan.gui.main_window import MainWindow

    loaded = load_user_settings(config_dir)
    window = MainWindow(backend if isinstance(backend, Backend) else Backend(), loaded.settings, config_dir)
    if loaded.message:
        window.banner.show_message("warning", loaded.message)
    problem = known_binding_problem()
    if problem:
        print(f"fitplan: warning: {problem}", file=sys.stderr)
        window.banner.show_message("warning", problem)
    return window, loaded.message


def launch(argv: Sequence[str] = ()) -> tuple[object, object]:
    """Create the application and show the window; model, GPU and scan jobs start once it has painted."""
    app = create_app(argv)
    from fitplan.gui.main_window import MainWindow

    window, _message = build_window()
    assert isinstance(window, MainWindow)
    initial = argv[0] if argv else None
    after_first_paint(window, lambda: window.planner.start(initial))
    window.show()
    return app, window


def after_first_paint(window: object, start: Callable[[], None]) -> None:
    """Call `start` once `window` has painted (or after FIRST_PAINT_WAIT_MS if it never does, e.g. minimised):
    the worker threads it starts would otherwise compete with the first paint for the interpreter."""
    from PySide6.QtCore import QEvent, QObject, QTimer
    from PySide6.QtWidgets import QWidget

    assert isinstance(window, QWidget)
    done = False

    def once() -> None:
        nonlocal done
        if not done:
            done = True
            window.removeEventFilter(watch)
            start()

    class _FirstPaint(QObject):
        def eventFilter(self, obj: QObject, event: QEvent) -> bool:
            if event.type() == QEvent.Type.Paint:
                QTimer.singleShot(0, self, once)  # after this paint has finished
            return False

    watch = _FirstPaint(window)
    window.installEventFilter(watch)
    QTimer.singleShot(FIRST_PAINT_WAIT_MS, watch, once)  # dropped with the window


def build_parser(prog: str = "fitplan-gui") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The fitplan window: will this GGUF model fit on my machine, with what context, and how do I "
        "launch it?",
        epilog="With no MODEL the window opens on the last model (or a bundled example). The command-line tools "
        "are `fitplan COMMAND` (fitplan --help).",
    )
    parser.add_argument(
        "model", nargs="?", metavar="MODEL", help="a .gguf file or an http(s) URL of one to open"
    )
    return parser


def model_problem(model: str) -> str | None:
    """Why MODEL cannot be opened, in one line (None when it can be tried): checked before any window opens."""
    if model.startswith(("http://", "https://")):
        return None
    path = Path(expand_home(model))
    if not path.exists():
        return f"{model}: no such file"
    if path.is_dir():
        return f"{model}: is a folder; give a .gguf file (or add the folder to the library from the window)"
    return None


def main(argv: Sequence[str] | None = None, prog: str = "fitplan-gui") -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog)
    try:
        parsed = parser.parse_args(raw)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else 2
    args: list[str] = []
    if parsed.model:
        problem = model_problem(parsed.model)
        if problem:
            print(f"{prog}: error: {problem}", file=sys.stderr)
            return 2
        args = [parsed.model]
    app, window = launch(args)
    import signal

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QWidget

    assert isinstance(app, QApplication) and isinstance(window, QWidget)
    # Ctrl+C in the terminal closes the window properly (settings saved); the timer lets Python see the signal.
    signal.signal(signal.SIGINT, lambda *_: window.close())
    wake = QTimer()
    wake.timeout.connect(lambda: None)
    wake.start(SIGNAL_POLL_MS)
    return int(app.exec())


if __name__ == "__main__":
    raise SystemExit(main())
