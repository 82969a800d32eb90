"""The terms of grid j (tests/fixtures/llamacpp/terms/, tools/groundtruth/record.py --grids terms): what llama.cpp
allocated and decided, and what the estimator says for the same command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fitplan.commands.plan import load_profile
from fitplan.core.base.devices import MIB, Machine, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.base.results import TermKind
from fitplan.core.estimate.estimator import estimate
from fitplan.core.launch.flags import parse_flags
from fitplan.core.memory.context import trained_context
from support.models import TESTS

TERMS = TESTS / "fixtures" / "llamacpp" / "terms"
HEADER = str(TESTS / "fixtures" / "llamacpp" / "models" / "sparse" / "llama-3.1-8b.header.gguf")
#: flags of the recorder that are not the case's settings
_RUN_FLAGS = {"--host": 1, "--port": 1, "-lv": 1, "-t": 1, "-m": 1}


def cases(name: str) -> list[dict[str, Any]]:
    doc = json.loads((TERMS / f"{name}.json").read_text())
    assert doc["llama_cpp"]["commit"] == "515e85511"
    out = doc["cases"]
    assert isinstance(out, list) and out
    return out


def settings_of(case: dict[str, Any]) -> LaunchSettings:
    argv = list(case["command"][1:])
    kept: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in _RUN_FLAGS:
            i += 1 + _RUN_FLAGS[argv[i]]
            continue
        kept.append(argv[i])
        i += 1
    return parse_flags(kept).settings


@pytest.fixture(scope="module")
def profile() -> Any:
    return load_profile(HEADER, header_only=True)


def cpu_machine() -> Machine:
    return Machine((), host_device(64 << 30))


def test_yarn_sets_the_training_context_llama_cpp_adjusts_to(profile: Any) -> None:
    yarn = cases("llama-3.1-8b-yarn")
    assert len(yarn) == 5
    for c in yarn:
        s = settings_of(c)
        want = c["results"].get("n_ctx_train_adjusted", profile.n_ctx_train)
        assert trained_context(profile, s) == want, c["id"]
    assert {c["id"]: c["results"].get("n_ctx_train_adjusted") for c in yarn} == {
        "c65536": None,
        "c65536-yarn4-orig16384": 65536,
        "c262144": None,
        "c262144-yarn4": 262144,
        "c262144-yarn2-freq": 262144,
    }


def test_yarn_changes_no_buffer(profile: Any) -> None:
    by_id = {c["id"]: c["results"]["buffers"] for c in cases("llama-3.1-8b-yarn")}
    # recorded: the same bytes with and without the scaling
    assert by_id["c65536"] == by_id["c65536-yarn4-orig16384"]
    assert by_id["c262144"] == by_id["c262144-yarn4"] == by_id["c262144-yarn2-freq"]
    # estimated: the same too, and it says llama.cpp's training context
    plain = estimate(profile, settings_of(cases("llama-3.1-8b-yarn")[2]), cpu_machine())
    scaled = estimate(profile, settings_of(cases("llama-3.1-8b-yarn")[3]), cpu_machine())
    assert [d.used_bytes for d in plain.devices] == [d.used_bytes for d in scaled.devices]
    assert any("262144" in w for w in plain.warnings)  # above the 131072 it was trained for
    assert not any("above the model's training context" in w for w in scaled.warnings)
    assert any("262144-token training context" in a for a in scaled.assumptions)


@pytest.mark.parametrize("case_id", ["np4-kvups2048-nr", "np4-c4096-kvups2048-nr"])
def test_kv_unified_per_slot_sizes_the_pool_without_c(profile: Any, case_id: str) -> None:
    (c,) = [c for c in cases("llama-3.1-8b-server") if c["id"] == case_id]
    r = c["results"]
    est = estimate(profile, settings_of(c), cpu_machine())
    assert est.context.n_ctx == r["resolved"]["n_ctx"]  # 8192 = 4 x 2048 without -c; -c 4096 wins
    kv = [b["mib"] for b in r["buffers_mib"] if b["kind"] == "kv"]
    assert est.devices[-1].bytes_of(TermKind.KV) == round(sum(kv) * MIB)
    if "-c" not in c["command"]:
        assert r["per_slot_n_ctx"] == 8192


def test_recorded_files_are_where_the_tests_read_them() -> None:
    assert sorted(p.name for p in Path(TERMS).glob("*.json")) == [
        "llama-3.1-8b-server.json",
        "llama-3.1-8b-yarn.json",
    ]


def test_plan_runs_a_yarn_scaled_model_to_its_adjusted_training_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fitplan import cli

    base = ["plan", HEADER, "--header-only", "--assume-gpu", "A=80GiB", "--host-ram", "64GiB", "-np", "1"]
    base += ["-fa", "on", "--json"]
    assert cli.main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert cli.main([*base, "--rope-scaling", "yarn", "--rope-scale", "2", "--yarn-orig-ctx", "131072"]) == 0
    scaled = json.loads(capsys.readouterr().out)
    assert plain["context_cap"] == 131072 and scaled["context_cap"] == 262144
    assert scaled["n_ctx"] > plain["n_ctx"]
    assert "--rope-scaling yarn" in scaled["command"] and "--yarn-orig-ctx 131072" in scaled["command"]
