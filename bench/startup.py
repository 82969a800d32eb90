#!/usr/bin/env python3
"""Cold start of the planner window: process launch -> first painted window -> first estimate on screen.

Runs the window in a fresh interpreter (offscreen unless QT_QPA_PLATFORM says otherwise), with a private config
folder, opened on each bench model (bench/_models.py: a 61-layer 256-expert MLA MoE, a 1M-context hybrid, a
200k-vocabulary SWA model) and on the bundled 8B example, and, in the same run, a bare PySide6 + pyqtgraph window
(a plot and a slider) for the floor of this machine. Goal: a painted window within 1 s.

    python bench/startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 1.0

BARE = r"""
import sys, time, json
t_start = float(sys.argv[1])
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication, QSlider, QVBoxLayout, QWidget
import pyqtgraph as pg
app = QApplication([])
t_qt = time.time()
marks = {}

class Watch(QObject):
    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Paint and "painted" not in marks:
            marks["painted"] = time.time()
            QTimer.singleShot(0, app.quit)
        return False

watch = Watch()
app.installEventFilter(watch)
w = QWidget(); layout = QVBoxLayout(w); plot = pg.PlotWidget(); plot.plot([1, 2, 3], [1, 3, 2])
layout.addWidget(plot); layout.addWidget(QSlider()); w.resize(1280, 800); w.show()
QTimer.singleShot(20000, app.quit)
app.exec()
print(json.dumps({"imports_qt": t_qt - t_start, **{k: v - t_start for k, v in marks.items()}}))
"""

CHILD = r"""
import sys, time, json
t_start = float(sys.argv[1])
from PySide6.QtCore import QEvent, QObject, QTimer
from fitplan.gui.app import create_app, launch
app = create_app()
t_qt = time.time()
marks = {}

class Watch(QObject):
    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Paint and "painted" not in marks:
            marks["painted"] = time.time()
        return False

watch = Watch()
app.installEventFilter(watch)  # the first paint of any widget of the window
_, window = launch(sys.argv[2:3])

def shown(_outcome):
    if "estimate" not in marks:
        marks["estimate"] = time.time()
        window.chart.plot.repaint()
        marks["chart_painted"] = time.time()
        QTimer.singleShot(0, app.quit)

window.planner.outcome_shown.connect(shown)
QTimer.singleShot(20000, app.quit)
app.exec()
window.close()
print(json.dumps({"imports_qt": t_qt - t_start, **{k: v - t_start for k, v in marks.items()}}))
"""


def run_once(model: str | None) -> dict[str, float]:
    """One cold start: of the window on `model` ("" = the bundled example), or of the bare window (None)."""
    env = dict(os.environ)
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    env["FITPLAN_CONFIG_DIR"] = tempfile.mkdtemp(prefix="fitplan-bench-")
    env["PYTHONPATH"] = str(ROOT / "app") + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.time()
    argv = (
        [sys.executable, "-c", BARE, repr(t0)] if model is None else [sys.executable, "-c", CHILD, repr(t0)]
    )
    if model:
        argv.append(model)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and not done.stdout.strip():
        raise SystemExit(done.stderr[-2000:])
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    from _models import write_models

    models = write_models(Path(tempfile.mkdtemp(prefix="fitplan-models-")))
    cases: list[tuple[str, str | None]] = [("bare PySide6 + pyqtgraph", None), ("bundled 8B example", "")]
    cases += [(name, str(path)) for name, path in models.items()]
    worst = 0.0
    for label, model in cases:
        runs = [run_once(model) for _ in range(args.runs)]
        print(f"{label}:")
        for key, what in (
            ("imports_qt", "QApplication created"),
            ("painted", "window painted"),
            ("estimate", "first estimate shown"),
            ("chart_painted", "chart painted with it"),
        ):
            values = [r[key] for r in runs if key in r]
            if values:
                print(
                    f"  {what:>22}: median {statistics.median(values):.3f} s  (runs: "
                    + ", ".join(f"{v:.3f}" for v in values)
                    + ")"
                )
        if model is not None:
            worst = max(worst, statistics.median(r.get("painted", float("inf")) for r in runs))
    verdict = "meets" if worst <= GOAL_S else "MISSES"
    print(f"slowest cold start to a painted window {worst:.3f} s {verdict} the {GOAL_S} s goal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
