#!/usr/bin/env python3
"""Cold start of the planner window: process launch -> first painted window -> first estimate on screen.

Runs the window in a fresh interpreter (offscreen unless QT_QPA_PLATFORM says otherwise), with a private config
folder so it opens on the bundled 8B example, and prints the times. Goal: a painted window within 1.5 s.

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
GOAL_S = 1.5

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
_, window = launch()

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


def run_once() -> dict[str, float]:
    env = dict(os.environ)
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    env["FITPLAN_CONFIG_DIR"] = tempfile.mkdtemp(prefix="fitplan-bench-")
    env["PYTHONPATH"] = str(ROOT / "app") + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.time()
    done = subprocess.run([sys.executable, "-c", CHILD, repr(t0)], env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and not done.stdout.strip():
        raise SystemExit(done.stderr[-2000:])
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [run_once() for _ in range(args.runs)]
    for key, label in (
        ("imports_qt", "QApplication created"),
        ("painted", "window painted"),
        ("estimate", "first estimate shown"),
        ("chart_painted", "chart painted with it"),
    ):
        values = [r[key] for r in runs if key in r]
        if values:
            print(f"{label:>24}: median {statistics.median(values):.3f} s  (runs: "
                  + ", ".join(f"{v:.3f}" for v in values) + ")")
    painted = statistics.median(r.get("painted", float("inf")) for r in runs)
    verdict = "meets" if painted <= GOAL_S else "MISSES"
    print(f"cold start to a painted window {painted:.3f} s {verdict} the {GOAL_S} s goal")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
