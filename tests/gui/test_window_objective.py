"""The window's objective ("Plan for:"): the longest context first lets the plan choose the context, as
`fitplan command --objective context` does, and the context set by hand comes back with the fastest placement."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fitplan import cli
from fitplan.core.base.devices import GIB, Device, DeviceKind, Vendor, host_device
from fitplan.core.plan.objective import Goal
from fitplan.gui.backend import Detection
from fitplan.gui.main_window import MainWindow

from .conftest import QWEN_MOE, make_window

pytestmark = [pytest.mark.gui]
TIMEOUT = 30000
#: one 12 GiB card: Qwen3-30B-A3B keeps experts on the CPU, and how many decides the context
CARD = Detection(
    (Device("RTX 4070", DeviceKind.GPU, 12 * GIB, 12 * GIB, Vendor.NVIDIA),), host_device(64 * GIB)
)


def settle(qtbot: Any, window: MainWindow) -> None:
    p = window.planner
    qtbot.waitUntil(lambda: not p._debounce.isActive() and p.settled(), timeout=TIMEOUT)


def words(window: MainWindow) -> list[str]:
    return window.command.text.toPlainText().replace("\\\n", " ").split()


def after(ws: list[str], flag: str) -> str:
    return ws[ws.index(flag) + 1]


@pytest.fixture
def qwen(qtbot: Any, private_config: Path) -> Iterator[MainWindow]:
    w = make_window(qtbot, CARD, private_config)
    w.show()
    w.planner.start(str(QWEN_MOE))
    settle(qtbot, w)
    yield w
    w.close()


def test_longest_context_first_in_the_window(
    qtbot: Any, qwen: MainWindow, capsys: pytest.CaptureFixture[str]
) -> None:
    s = qwen.settings
    assert s.goal() is Goal.PLACEMENT and s.objective.accessibleName() == "Plan objective"
    s.set_context(8192)
    settle(qtbot, qwen)
    assert after(words(qwen), "-c") == "8192"  # the fastest placement for the context set by hand
    s.objective.setCurrentIndex(s.objective.findData(Goal.CONTEXT.value))
    settle(qtbot, qwen)
    ws = words(qwen)
    capsys.readouterr()
    argv = [
        "command",
        str(QWEN_MOE),
        "--assume-gpu",
        "RTX 4070=12GiB",
        "--host-ram",
        "64GiB",
        "--shell",
        "sh",
    ]
    assert cli.main([*argv, "-np", after(ws, "-np"), "--objective", "context"]) == 0
    cli_words = capsys.readouterr().out.split()
    assert after(ws, "-c") == after(cli_words, "-c") != "8192"
    assert after(ws, "--n-cpu-moe") == after(cli_words, "--n-cpu-moe")
    assert s.context_box.value() == int(after(ws, "-c")) and not s.context_box.isEnabled()
    # back to the fastest placement (its "what would change it" row applies it): the hand-set context is back, and
    # so is the control
    button = next(b for b in qwen.verdict.alternative_buttons if b.plain.startswith("--objective placement"))
    assert button.isEnabled()
    button.click()
    settle(qtbot, qwen)
    assert s.goal() is Goal.PLACEMENT
    assert s.context_box.value() == 8192 and s.context_box.isEnabled()
    assert after(words(qwen), "-c") == "8192"


def test_a_speed_floor_in_the_window_plans_as_min_tps_does(
    qtbot: Any, qwen: MainWindow, capsys: pytest.CaptureFixture[str]
) -> None:
    """'At least: N t/s' is `--min-tps N` (issue 23 point 5): the same plan, and the rows of "what would change it"
    say how fast each change runs."""
    s = qwen.settings
    assert s.min_gen_tps() is None and s.min_tps.accessibleName() == "Generation speed floor"
    outcome = qwen.planner.outcome
    assert outcome is not None and outcome.speed is not None
    floor = int(outcome.speed.generation.tps) + 50  # out of reach: the plan says so
    s.min_tps.setValue(floor)
    settle(qtbot, qwen)
    assert s.min_gen_tps() == floor
    assert f"does not reach {floor} t/s generation" in qwen.verdict.label.text().lower().replace(",", "")
    # longest context first with a floor: the plan chooses the longest context that keeps it, as the CLI does
    s.min_tps.setValue(0)
    s.objective.setCurrentIndex(s.objective.findData(Goal.CONTEXT.value))
    settle(qtbot, qwen)
    free = qwen.planner.outcome
    assert free is not None and free.speed is not None
    s.min_tps.setValue(round((free.speed.generation.tps + free.speed.generation_full.tps) / 2))
    settle(qtbot, qwen)
    ws = words(qwen)
    capsys.readouterr()
    argv = [
        "command",
        str(QWEN_MOE),
        "--assume-gpu",
        "RTX 4070=12GiB",
        "--host-ram",
        "64GiB",
        "--shell",
        "sh",
    ]
    extra = ["-np", after(ws, "-np"), "--objective", "context", "--min-tps", str(s.min_tps.value())]
    assert cli.main([*argv, *extra]) == 0
    cli_words = capsys.readouterr().out.split()
    assert after(ws, "-c") == after(cli_words, "-c")
    assert int(after(ws, "-c")) < free.estimate.settings.n_ctx or int(after(ws, "-c")) < int(
        free.plan_settings.n_ctx if free.plan_settings else 0
    )
    assert after(ws, "--n-cpu-moe") == after(cli_words, "--n-cpu-moe")
    rows = qwen.verdict.alternative_buttons
    assert rows and any(
        b.plain.removesuffix("  (apply)").rstrip().endswith("t/s") or " t/s" in b.toolTip() for b in rows
    )
