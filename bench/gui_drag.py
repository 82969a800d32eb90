#!/usr/bin/env python3
"""Drag the context slider across its range over the largest realistic models and measure how the window keeps up,
against a bare PySide6 + pyqtgraph window (a slider and a plot of the same size) dragged the same way in the same run.

Models (written by bench/_models.py): a 61-layer 256-expert MLA MoE (DeepSeek-V3's shape), a 1M-context hybrid
(granite-4.0-h-tiny at 1,048,576 tokens), a 200k-vocabulary SWA model (gpt-oss-20b); three GPUs and a host.

Figures per window:
* GUI-thread stalls: the gaps between ticks of a 5 ms heartbeat timer, minus 5 ms, while dragging;
* input -> repainted chart: from each slider move that moves the chart's line to the next paint of the plot (a move
  that lands on the same context, snapped to 256, changes nothing to paint);
* last input -> its estimate on screen (fitplan only).
Goal: no stall over 16 ms (one frame at 60 Hz). On a loaded machine the bare window's own figures are the floor;
each figure is also given as a ratio to the bare window's.
Check: the last estimate the window showed (computed in the estimate process) is compared, field by field, with
`Backend.plan` of the same request computed here; a difference fails the bench.

    python bench/gui_drag.py [--steps N] [--engine llama.cpp|ik_llama.cpp|beellama|ollama] [--model PATH ...]
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "app"))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["FITPLAN_CONFIG_DIR"] = tempfile.mkdtemp(prefix="fitplan-drag-")

import numpy as np  # noqa: E402
import pyqtgraph as pg  # noqa: E402
from _check import against_reference  # noqa: E402
from _models import write_models  # noqa: E402
from PySide6.QtCore import QEvent, QObject, Qt, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QSlider, QVBoxLayout, QWidget  # noqa: E402

from fitplan.core.base.devices import GIB, Device, DeviceKind, Vendor, host_device  # noqa: E402
from fitplan.core.base.launch_settings import Engine  # noqa: E402
from fitplan.core.inputs.user_settings import UserSettings  # noqa: E402
from fitplan.gui.app import create_app  # noqa: E402
from fitplan.gui.backend import Backend, Detection, PlanOutcome  # noqa: E402
from fitplan.gui.main_window import MainWindow  # noqa: E402
from fitplan.gui.theme import configure_pyqtgraph  # noqa: E402

HEARTBEAT_MS = 5
STEP_MS = 16  # a 60 Hz pointer
GOAL_MS = 16.0
MACHINE = Detection(
    (
        Device("RTX 4090", DeviceKind.GPU, 24 * GIB, 22 * GIB, Vendor.NVIDIA),
        Device("RTX 3090", DeviceKind.GPU, 24 * GIB, 23 * GIB, Vendor.NVIDIA),
        Device("RTX 3090 #2", DeviceKind.GPU, 24 * GIB, 23 * GIB, Vendor.NVIDIA),
    ),
    host_device(256 * GIB, 200 * GIB),
)


class PaintWatch(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.paints: list[float] = []

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.paints.append(time.perf_counter())
        return False


@dataclass
class Drag:
    stalls: list[float] = field(default_factory=list)
    repaints: list[float] = field(default_factory=list)
    inputs: list[float] = field(default_factory=list)


def drag(
    app: QApplication, slider: QSlider, plot: QWidget, steps: int, shown: Callable[[], object] = lambda: None
) -> Drag:
    """Move `slider` back and forth at 60 Hz; heartbeat gaps and input-to-paint delays of `plot` (for the inputs
    that change `shown()`, what the plot shows of the slider)."""
    watch = PaintWatch()
    plot.installEventFilter(watch)
    positions = [int(200 + 700 * (0.5 - 0.5 * math.cos(2 * math.pi * i / steps))) for i in range(steps)]
    result = Drag()
    beats: list[float] = []
    heartbeat = QTimer()
    heartbeat.setTimerType(Qt.TimerType.PreciseTimer)
    heartbeat.setInterval(HEARTBEAT_MS)
    heartbeat.timeout.connect(lambda: beats.append(time.perf_counter()))
    stepper = QTimer()
    stepper.setTimerType(Qt.TimerType.PreciseTimer)
    stepper.setInterval(STEP_MS)
    index = iter(range(len(positions)))
    moved: list[float] = []

    def step() -> None:
        i = next(index, None)
        if i is None:
            stepper.stop()
            QTimer.singleShot(1500, app.quit)  # let the last estimate land
            return
        t, before = time.perf_counter(), shown()
        result.inputs.append(t)
        slider.setValue(positions[i])
        if shown() != before or before is None:
            moved.append(t)

    stepper.timeout.connect(step)
    heartbeat.start()
    stepper.start()
    app.exec()
    heartbeat.stop()
    plot.removeEventFilter(watch)
    end = result.inputs[-1]
    result.stalls = [(b - a) * 1000 - HEARTBEAT_MS for a, b in itertools.pairwise(beats) if a <= end]
    for t in moved:
        after = [p for p in watch.paints if p >= t]
        if after:
            result.repaints.append((after[0] - t) * 1000)
    return result


def p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * (len(values) - 1))]


def stats(values: list[float], bare: list[float] | None = None) -> str:
    if not values:
        return "n/a"
    text = f"median {statistics.median(values):.1f} ms, p95 {p95(values):.1f} ms, max {max(values):.1f} ms"
    if bare:
        text += f" (x{p95(values) / max(p95(bare), 0.1):.2f} / x{max(values) / max(max(bare), 0.1):.2f} bare)"
    return text


def check(window: MainWindow, outcome: PlanOutcome) -> str:
    """The shown `outcome` against `Backend.plan` of its request, computed in this process ('' when equal)."""
    request = window.planner.current_request()
    if request is None or window.planner.model is None:
        return "no request"
    return against_reference(
        outcome, window.planner.model, request.settings, request.machine, request.margin_bytes
    )


def bare_window() -> tuple[QWidget, QSlider, QWidget]:
    """PySide6 + pyqtgraph alone: a slider moving a line over eight filled curves, no estimating."""
    w = QWidget()
    layout = QVBoxLayout(w)
    plot = pg.PlotWidget()
    x = np.linspace(8, 20, 72)
    curves = [
        plot.plot(
            x, np.full_like(x, k + 1.0), fillLevel=0, brush=pg.mkBrush(40 * k, 100, 200), antialias=False
        )
        for k in range(8)
    ]  # as the chart draws its bands
    line = pg.InfiniteLine(angle=90, movable=True)
    plot.addItem(line)
    slider = QSlider(Qt.Orientation.Horizontal)
    slider.setRange(0, 1000)

    def moved(v: int) -> None:
        line.setValue(8 + 12 * v / 1000)
        for k, c in enumerate(curves):
            c.setData(x, np.full_like(x, k + 1.0) + v / 1000)

    slider.valueChanged.connect(moved)
    layout.addWidget(plot)
    layout.addWidget(slider)
    w.resize(1280, 800)
    return w, slider, plot.viewport()


def settle(app: QApplication, window: MainWindow) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        app.processEvents()
        if window.planner.settled() and not window.planner._debounce.isActive():
            return True
        time.sleep(0.005)
    return False


def drag_model(
    app: QApplication, model: Path, engine: str, steps: int
) -> tuple[Drag, float | None, str, bool] | None:
    """The drag figures, the last input's delay to its estimate, the check's finding ('' = same answer), and
    whether the estimates were computed in the estimate process."""
    window = MainWindow(Backend(probe=lambda: MACHINE, library_places=lambda: ()), UserSettings(), None)
    window.resize(1280, 800)
    window.show()
    window.planner.start(str(model))
    ok = settle(app, window)
    if ok and engine != Engine.LLAMA_CPP.value:
        window.settings.engine.setCurrentIndex(window.settings.engine.findData(engine))
        ok = settle(app, window)
    if not ok:
        window.close()
        return None
    shown: list[tuple[float, int]] = []
    in_process = [window.planner.estimator.in_process]  # when each estimate arrived (the drag's end stops it)

    def arrived(o: PlanOutcome) -> None:
        shown.append((time.perf_counter(), o.estimate.settings.n_ctx))
        in_process.append(window.planner.estimator.in_process)

    window.planner.outcome_shown.connect(arrived)
    line = window.chart.context_line
    result = drag(app, window.settings.context_slider, window.chart.plot.viewport(), steps, line.value)
    last_ctx = window.settings.context_box.value()
    final = [t for t, c in shown if c == last_ctx and t >= result.inputs[-1]]
    outcome = window.planner.outcome
    found = check(window, outcome) if outcome is not None else "no estimate shown"
    window.close()
    window.deleteLater()
    app.processEvents()
    return result, ((final[0] - result.inputs[-1]) * 1000 if final else None), found, all(in_process)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", action="append", default=[], help="drag over this model instead (repeatable)"
    )
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--engine", default=Engine.LLAMA_CPP.value, choices=[e.value for e in Engine])
    args = parser.parse_args()

    app = create_app()
    assert isinstance(app, QApplication)
    configure_pyqtgraph()
    models = [Path(m) for m in args.model] or list(
        write_models(Path(tempfile.mkdtemp(prefix="fitplan-models-"))).values()
    )
    bare, slider, plot = bare_window()
    bare.show()
    base = drag(app, slider, plot, args.steps)
    bare.close()
    print(f"{args.steps} slider moves at {1000 // STEP_MS} Hz, 3 GPUs + host, engine {args.engine}")
    print(f"{'bare PySide6 + pyqtgraph':>26}: stalls {stats(base.stalls)}; repaint {stats(base.repaints)}")
    worst = 0.0
    failed = False
    for model in models:
        got = drag_model(app, model, args.engine, args.steps)
        if got is None:
            print(f"{model.name:>26}: the first estimate did not arrive")
            return 1
        result, last, found, in_process = got
        worst = max(worst, max(result.stalls, default=0.0))
        tail = f"; last input -> its estimate {last:.0f} ms" if last is not None else ""
        print(
            f"{model.stem:>26}: stalls {stats(result.stalls, base.stalls)}; "
            f"repaint {stats(result.repaints, base.repaints)}{tail}"
        )
        where = "estimate process" if in_process else "estimator thread"
        print(
            f"{'':>26}  check ({where}): "
            + (f"DIFFERS from Backend.plan: {found}" if found else "same answer")
        )
        failed = failed or bool(found)
    floor = max(base.stalls, default=0.0)
    verdict = "met" if worst <= GOAL_MS else ("NOT met" if worst > floor else "not met, as the bare window")
    print(
        f"goal: no GUI-thread stall over {GOAL_MS:.0f} ms: {verdict} (worst {worst:.1f} ms, bare {floor:.1f} ms, "
        f"x{worst / max(floor, 0.1):.2f})"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
