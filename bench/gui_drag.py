#!/usr/bin/env python3
"""Drag the context slider across its range over a large model and measure how the window keeps up (offscreen).

Figures printed:
* longest GUI-thread stall: the largest gap between ticks of a 5 ms heartbeat timer, minus 5 ms, while dragging;
* input -> repainted chart: from each slider move to the next paint of the chart whose context line is there;
* input -> estimate on screen: from the last move of a burst to the outcome of that exact context being shown.
Goals: no stall over 50 ms; chart repainted within 50 ms of each input.

    python bench/gui_drag.py [--model PATH] [--steps N] [--engine llama.cpp|ik_llama.cpp|beellama|ollama]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "app"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["FITPLAN_CONFIG_DIR"] = tempfile.mkdtemp(prefix="fitplan-drag-")

from PySide6.QtCore import QEvent, QObject, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from fitplan.core.base.devices import GIB, Device, DeviceKind, Vendor, host_device  # noqa: E402
from fitplan.core.base.launch_settings import Engine  # noqa: E402
from fitplan.core.inputs.user_settings import UserSettings  # noqa: E402
from fitplan.gui.app import configure_pyqtgraph, create_app  # noqa: E402
from fitplan.gui.backend import Backend, Detection  # noqa: E402
from fitplan.gui.main_window import MainWindow  # noqa: E402

HEARTBEAT_MS = 5
STEP_MS = 16  # a 60 Hz pointer
GOAL_MS = 50.0
DEFAULT_MODEL = ROOT / "resources" / "examples" / "Qwen3-30B-A3B-Q4_K_M.gguf"
MACHINE = Detection(
    (Device("RTX 4090", DeviceKind.GPU, 24 * GIB, 22 * GIB, Vendor.NVIDIA),
     Device("RTX 3090", DeviceKind.GPU, 24 * GIB, 23 * GIB, Vendor.NVIDIA)),
    host_device(64 * GIB, 48 * GIB),
)


class PaintWatch(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.paints: list[float] = []

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.paints.append(time.perf_counter())
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--engine", default=Engine.LLAMA_CPP.value, choices=[e.value for e in Engine])
    args = parser.parse_args()

    app = create_app()
    assert isinstance(app, QApplication)
    configure_pyqtgraph()
    # The library: the bundled examples only, so the figures do not depend on this machine's download folders.
    window = MainWindow(Backend(probe=lambda: MACHINE, library_places=lambda: ()), UserSettings(), None)
    window.resize(1280, 800)
    window.show()
    window.planner.start(args.model)

    def wait() -> bool:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            app.processEvents()
            if window.planner.settled() and not window.planner._debounce.isActive():
                return True
            time.sleep(0.005)
        return False

    ok_start = wait()
    if ok_start and args.engine != Engine.LLAMA_CPP.value:
        window.settings.engine.setCurrentIndex(window.settings.engine.findData(args.engine))
        ok_start = wait()
    if not ok_start:
        print("the first estimate did not arrive", file=sys.stderr)
        return 1

    watch = PaintWatch()
    window.chart.plot.viewport().installEventFilter(watch)
    slider = window.settings.context_slider
    positions = [
        int(200 + 700 * (0.5 - 0.5 * math.cos(2 * math.pi * i / args.steps))) for i in range(args.steps)
    ]
    inputs: list[tuple[float, int]] = []
    beats: list[float] = []
    outcomes: list[tuple[float, int]] = []
    window.planner.outcome_shown.connect(
        lambda o: outcomes.append((time.perf_counter(), o.estimate.settings.n_ctx))
    )

    heartbeat = QTimer()
    heartbeat.setInterval(HEARTBEAT_MS)
    heartbeat.timeout.connect(lambda: beats.append(time.perf_counter()))
    stepper = QTimer()
    stepper.setInterval(STEP_MS)
    index = iter(range(len(positions)))

    def step() -> None:
        i = next(index, None)
        if i is None:
            stepper.stop()
            QTimer.singleShot(1500, app.quit)  # let the last estimate land
            return
        inputs.append((time.perf_counter(), slider.context_at(positions[i])))
        slider.setValue(positions[i])

    stepper.timeout.connect(step)
    heartbeat.start()
    stepper.start()
    app.exec()
    heartbeat.stop()

    drag_end = inputs[-1][0]
    gaps = [(b - a) * 1000 - HEARTBEAT_MS for a, b in itertools.pairwise(beats) if a <= drag_end]
    latencies = []
    moved = [(t, c) for k, (t, c) in enumerate(inputs) if k == 0 or c != inputs[k - 1][1]]
    for t_in, _ctx in moved:  # an input that leaves the context unchanged has nothing to repaint
        after = [p for p in watch.paints if p >= t_in]
        if after:
            latencies.append((after[0] - t_in) * 1000)
    last_t, last_ctx = inputs[-1]
    final = [t for t, ctx in outcomes if ctx == last_ctx and t >= last_t]
    line_ok = abs(window.chart.context_line.value() - math.log2(last_ctx)) < 1e-9

    def stats(values: list[float]) -> str:
        if not values:
            return "n/a"
        p95 = sorted(values)[int(0.95 * (len(values) - 1))]
        return f"median {statistics.median(values):.1f} ms, p95 {p95:.1f} ms, max {max(values):.1f} ms"

    print(f"model: {Path(args.model).name} ({args.engine}), {len(inputs)} slider moves at {1000 // STEP_MS} Hz, "
          "2 GPUs + host")
    print(f"GUI thread stalls (heartbeat {HEARTBEAT_MS} ms): {stats(gaps)}")
    print(f"input -> repainted chart: {stats(latencies)} ({len(latencies)}/{len(moved)} context changes painted)")
    print(f"estimates shown while dragging: {sum(1 for t, _ in outcomes if t <= drag_end)}")
    if final:
        print(f"last input -> its estimate on screen: {(final[0] - last_t) * 1000:.1f} ms")
    print(f"chart line at the last input's context: {'yes' if line_ok else 'NO'}")
    worst_stall = max(gaps, default=0.0)
    if gaps:
        k = gaps.index(worst_stall)
        print(f"longest stall began {(beats[k] - inputs[0][0]) * 1000:.0f} ms after the first input")
    worst_paint = max(latencies, default=float("inf"))
    ok = worst_stall <= GOAL_MS and worst_paint <= GOAL_MS
    print(f"goals (stall <= {GOAL_MS:.0f} ms, repaint <= {GOAL_MS:.0f} ms): {'met' if ok else 'NOT met'}")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
