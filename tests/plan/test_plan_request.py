"""One plan request type for every front end (issue 22 point 1): the command line and the window ask the core a
`PlanQuery` and read a `PlanAnswer` (`core.plan.request`); neither calls the planner, the alternatives or the speed
model on its own."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from fitplan import cli
from fitplan.commands.plan import detect_machine, load_profile
from fitplan.core.plan.objective import Goal, Objective
from fitplan.core.plan.request import PlanQuery, answer
from support.models import TESTS

APP = Path(__file__).resolve().parents[2] / "app" / "fitplan"
GPT_OSS = str(TESTS / "fixtures" / "llamacpp" / "models" / "sparse" / "gpt-oss-120b.header.gguf")
#: what only `core.plan.request` may call for a front end
PLANNING = {"plan", "what_would_change", "why_this_context", "plan_speed", "model_speed_of"}
#: the core modules a front end could call them through (`planner.plan`); the window's own `Backend.plan` is not
CORE = {"planner", "alternatives", "speed", "objective"}


def _calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            f = node.func
            # a function called by its name, or through its core module (`planner.plan`)
            module_attr = (
                isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in CORE
            )
            name = f.id if isinstance(f, ast.Name) else f.attr if module_attr else ""  # type: ignore[union-attr]
            if name in PLANNING:
                found.append(f"{path.relative_to(APP).as_posix()}:{node.lineno}: {name}()")
    return found


def test_front_ends_ask_the_core_one_query_type() -> None:
    found: list[str] = []
    for folder in ("commands", "gui"):
        for path in sorted((APP / folder).rglob("*.py")):
            found += _calls(path)
    # a set plan plans each model's speed at its placement in the set (`commands/_speed.speed_of` is the CLI's
    # one wrapper of plan_speed, used for estimates and sets, which are no PlanQuery)
    allowed = {"commands/_speed.py"}
    assert [f for f in found if f.split(":")[0] not in allowed] == []


@pytest.mark.parametrize("goal", ["placement", "context"])
def test_the_command_line_prints_the_answer_to_its_query(
    capsys: pytest.CaptureFixture[str], goal: str
) -> None:
    hw = ["--header-only", "--host-ram", "96GiB", "--assume-gpu", "RTX 4090"]
    assert cli.main(["plan", GPT_OSS, *hw, "--objective", goal, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    q = PlanQuery(
        load_profile(GPT_OSS, header_only=True),
        detect_machine(["RTX 4090"], "96GiB"),
        objective=Objective(Goal(goal)),
    )
    got = answer(q)
    assert doc["n_ctx"] == got.plan.settings.n_ctx
    assert doc["placement"]["n_cpu_moe"] == got.plan.placement.n_cpu_moe
    assert [a["change"] for a in doc["alternatives"]] == [a.change for a in got.alternatives]
    assert got.speed is not None and doc["speed"]["generation"]["tps"] == round(got.speed.generation.tps, 2)
    assert doc["why"] == got.why
