"""`--objective placement|context` on `plan` and `command`: the same planner objective as the window's "Plan for:",
and the one line that says why a plan has the context it has."""

from __future__ import annotations

import json

import pytest

from fitplan import cli
from fitplan.commands.plan import detect_machine, load_profile
from fitplan.core.plan.objective import Goal, Objective
from fitplan.core.plan.planner import Pins, plan
from support.models import TESTS

GPT_OSS = str(TESTS / "fixtures" / "llamacpp" / "models" / "sparse" / "gpt-oss-120b.header.gguf")
#: gpt-oss-120b on an 18 GiB card: 27 expert layers on the CPU leave 5,120 tokens; context first reaches 131,072
HW = ["--header-only", "--host-ram", "96GiB", "--assume-gpu", "18GiB"]


@pytest.fixture(autouse=True)
def _no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_plan_objective_context_is_the_planners(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", GPT_OSS, *HW, "--objective", "context", "--json")
    assert code == 0
    doc = json.loads(out)
    expected = plan(
        load_profile(GPT_OSS, header_only=True),
        detect_machine(["18GiB"], "96GiB"),
        Pins(),
        objective=Objective(Goal.CONTEXT),
    )
    assert doc["objective"] == "context"
    assert (doc["n_ctx"], doc["placement"]["description"]) == (131072, "30 expert layers on CPU")
    assert doc["n_ctx"] == expected.settings.n_ctx
    assert doc["why"] == ""
    assert any(a["change"] == "--objective placement" for a in doc["alternatives"])
    code, out, _ = run(capsys, "command", GPT_OSS, *HW, "--objective", "context", "--shell", "sh")
    words = out.split()
    assert code == 0 and words[words.index("-c") + 1] == "131072"


def test_plan_says_why_the_context_is_short(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", GPT_OSS, *HW)
    assert code == 0
    lines = out.splitlines()
    assert (
        "objective: fastest placement first (the most weights on the GPUs), then the longest context" in lines
    )
    (why,) = [ln for ln in lines if ln.startswith("why this context: ")]
    assert "room for 5,120 tokens" in why and "--objective context gives 131,072" in why
    code, out, _ = run(capsys, "plan", GPT_OSS, *HW, "--json")
    assert json.loads(out)["why"] == why.removeprefix("why this context: ")


def test_a_bad_objective_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", GPT_OSS, *HW, "--objective", "fast")
    assert code == 2
    assert "--objective: invalid choice: 'fast'" in err


RTX4090 = ["--header-only", "--host-ram", "96GiB", "--assume-gpu", "RTX 4090"]


def _generation_at(n_ctx: int, settings_doc: dict[str, object]) -> float:
    """The speed model's generation at `n_ctx` for the plan's placement (the floor's own measure)."""
    import dataclasses

    from fitplan.core.speed import plan_speed

    profile = load_profile(GPT_OSS, header_only=True)
    machine = detect_machine(["RTX 4090"], "96GiB")
    base = plan(profile, machine, Pins()).settings
    settings = dataclasses.replace(base, n_ctx=n_ctx, n_cpu_moe=int(str(settings_doc["n_cpu_moe"])))
    return plan_speed(profile, machine, settings).generation_full.tps


@pytest.mark.parametrize("goal", ["placement", "context"])
def test_min_tps_keeps_the_floor_at_the_planned_context(
    capsys: pytest.CaptureFixture[str], goal: str
) -> None:
    """`--min-tps`: the planned context keeps the generation floor, one step of llama.cpp's context grid more does
    not, and the plan without the floor has a longer context (gpt-oss-120b, an RTX 4090 and 96 GiB: 24 expert
    layers on the CPU and about 24 t/s; the KV cache read per token lowers it as the context grows)."""
    code, out, _ = run(capsys, "plan", GPT_OSS, *RTX4090, "--objective", goal, "--json")
    free = json.loads(out)
    floor = 0.5 * (free["speed"]["generation"]["tps"] + free["speed"]["generation_at_context"]["tps"])
    code, out, _ = run(
        capsys, "plan", GPT_OSS, *RTX4090, "--objective", goal, "--min-tps", str(floor), "--json"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["speed"]["generation_at_context"]["tps"] >= floor
    assert doc["n_ctx"] < free["n_ctx"]
    if goal == "placement":
        # the placement comes first: at it, one more step of context would break the floor (context first may
        # need another placement for that step, so the boundary is the planner's search there)
        assert _generation_at(doc["n_ctx"] + doc["context_step"], doc["placement"]) < floor


def test_min_tps_out_of_reach_does_not_fit_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", GPT_OSS, *RTX4090, "--min-tps", "500")
    assert code == 1
    assert "does not reach 500 t/s generation" in out


@pytest.mark.parametrize("bad", ["0", "-3", "fast", "1e9"])
def test_min_tps_refuses_a_bad_value_in_one_line(capsys: pytest.CaptureFixture[str], bad: str) -> None:
    code, _, err = run(capsys, "plan", GPT_OSS, *RTX4090, "--min-tps", bad)
    assert code == 2
    assert "--min-tps" in err and "tokens per second" in err
