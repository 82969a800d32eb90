#!/usr/bin/env python3
"""Cold start of the planner window: process launch -> first painted window -> first estimate on screen.

Runs the window in a fresh interpreter (offscreen unless QT_QPA_PLATFORM says otherwise), with a private config
folder, opened on each bench model (bench/_models.py: a 61-layer 256-expert MLA MoE, a 1M-context hybrid, a
200k-vocabulary SWA model) and on the bundled 8B example, and, in the same run, a bare PySide6 + pyqtgraph window
(a plot and a slider) for the floor of this machine, each figure also as a ratio to the bare window's. Goal: a
painted window within 1 s. Check: the first estimate each window showed (computed in its estimate process) is
compared with `Backend.plan` of the same request computed here; a difference fails the bench. fitplan's own
bytecode is compiled first, as pip compiles an installed package's (its dependencies start from theirs);
`--from-source` measures a start that compiles it.

    python bench/startup.py [--runs N] [--from-source]
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

def shown(outcome):
    if "estimate" not in marks:
        marks["estimate"] = time.time()
        window.chart.plot.repaint()
        marks["chart_painted"] = time.time()
        request = window.planner.current_request()
        if request is not None and len(sys.argv) > 3:
            import pickle
            with open(sys.argv[3], "wb") as f:
                pickle.dump((outcome, window.planner.model, request.settings, request.machine,
                             request.margin_bytes), f)
        QTimer.singleShot(0, app.quit)

window.planner.outcome_shown.connect(shown)
QTimer.singleShot(20000, app.quit)
app.exec()
window.close()
print(json.dumps({"imports_qt": t_qt - t_start, **{k: v - t_start for k, v in marks.items()}}))
"""


def run_once(model: str | None, answer: Path | None = None) -> dict[str, float]:
    """One cold start: of the window on `model` ("" = the bundled example), or of the bare window (None); the
    first estimate and its request are written to `answer` when given."""
    env = dict(os.environ)
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    env["FITPLAN_CONFIG_DIR"] = tempfile.mkdtemp(prefix="fitplan-bench-")
    env["PYTHONPATH"] = str(ROOT / "app") + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.time()
    argv = (
        [sys.executable, "-c", BARE, repr(t0)] if model is None else [sys.executable, "-c", CHILD, repr(t0)]
    )
    if model is not None:
        argv.append(model)
        if answer is not None:
            argv.append(str(answer))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and not done.stdout.strip():
        raise SystemExit(done.stderr[-2000:])
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--from-source",
        action="store_true",
        help="leave fitplan's modules uncompiled (by default their bytecode is compiled first, as pip does when it "
        "installs a package: the dependencies, bare window included, start from their compiled bytecode)",
    )
    args = parser.parse_args()
    if not args.from_source:
        # PYTHONDONTWRITEBYTECODE (set on some machines) keeps imports from caching bytecode, so every start would
        # compile fitplan from source while its dependencies load theirs: compile it once, as an install does.
        import compileall

        compileall.compile_dir(ROOT / "app" / "fitplan", quiet=1)
        print("fitplan's bytecode compiled first (as installed); --from-source to start from the sources")
    sys.path.insert(0, str(ROOT / "bench"))
    from _models import write_models

    models = write_models(Path(tempfile.mkdtemp(prefix="fitplan-models-")))
    cases: list[tuple[str, str | None]] = [("bare PySide6 + pyqtgraph", None), ("bundled 8B example", "")]
    cases += [(name, str(path)) for name, path in models.items()]
    worst = 0.0
    failed = False
    answers = Path(tempfile.mkdtemp(prefix="fitplan-answers-"))
    floor: dict[str, float] = {}
    for label, model in cases:
        answer = answers / f"{len(floor)}.pickle"
        runs = [run_once(model, answer if i == 0 else None) for i in range(args.runs)]
        print(f"{label}:")
        for key, what in (
            ("imports_qt", "QApplication created"),
            ("painted", "window painted"),
            ("estimate", "first estimate shown"),
            ("chart_painted", "chart painted with it"),
        ):
            values = [r[key] for r in runs if key in r]
            if values:
                median = statistics.median(values)
                if model is None:
                    floor[key] = median
                ratio = f"  x{median / floor[key]:.2f} bare" if model is not None and key in floor else ""
                print(
                    f"  {what:>22}: median {median:.3f} s{ratio}  (runs: "
                    + ", ".join(f"{v:.3f}" for v in values)
                    + ")"
                )
        if model is not None:
            worst = max(worst, statistics.median(r.get("painted", float("inf")) for r in runs))
            found = check(answer)
            print(f"  {'check':>22}: " + (f"DIFFERS from Backend.plan: {found}" if found else "same answer"))
            failed = failed or bool(found)
    verdict = "meets" if worst <= GOAL_S else "MISSES"
    bare = floor.get("painted", 0.0)
    print(
        f"slowest cold start to a painted window {worst:.3f} s {verdict} the {GOAL_S} s goal "
        f"(bare window {bare:.3f} s, x{worst / bare if bare else float('nan'):.2f})"
    )
    return 1 if failed else 0


def check(answer: Path) -> str:
    """The first estimate a window showed against `Backend.plan` of its request here ('' when the same)."""
    import pickle

    if not answer.is_file():
        return "no estimate was written"
    sys.path.insert(0, str(ROOT / "app"))
    from _check import against_reference

    with answer.open("rb") as f:
        outcome, model, settings, machine, margin = pickle.load(f)
    return against_reference(outcome, model, settings, machine, margin)


if __name__ == "__main__":
    raise SystemExit(main())
