"""The terms of grid j (tests/fixtures/llamacpp/terms/, tools/groundtruth/record.py --grids terms): what llama.cpp
allocated and decided, and what the estimator says for the same command."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from fitplan.commands.plan import load_profile
from fitplan.core.base.devices import MIB, Device, DeviceKind, Machine, Vendor, host_device
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.base.results import TermKind
from fitplan.core.estimate.estimator import estimate
from fitplan.core.inputs.model_source import load_loras
from fitplan.core.launch.flags import ParsedFlags, parse_flags
from fitplan.core.memory.context import trained_context
from fitplan.core.model.lora import LoraError
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


def parsed_of(case: dict[str, Any]) -> ParsedFlags:
    argv = list(case["command"][1:])
    kept: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in _RUN_FLAGS:
            i += 1 + _RUN_FLAGS[argv[i]]
            continue
        kept.append(argv[i])
        i += 1
    return parse_flags(kept)


def settings_of(case: dict[str, Any]) -> LaunchSettings:
    return parsed_of(case).settings


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
        "mmproj-mistral-small-3.1-24b-images.json",  # tests/estimate/test_mmproj_images.py
        "mmproj-qwen2-vl-7b-images.json",  # tests/estimate/test_mmproj_images.py
        "mmproj-qwen2.5-vl-7b-images.json",  # tests/estimate/test_mmproj_images.py
        "mmproj-qwen3-vl-8b-images.json",  # tests/estimate/test_mmproj_images.py
        "qwen2.5-vl-7b-mmproj.json",  # tests/estimate/test_mmproj_images.py
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


# -- LoRA adapters -------------------------------------------------------------------------------------------------

LORA_HEADERS = TESTS / "fixtures" / "llamacpp"


def _lora_case_settings(c: dict[str, Any]) -> LaunchSettings:
    """The case's settings with each adapter path pointing at the adapter's header copy (tensor infos only)."""
    s = settings_of(c)
    heads = {name: str(LORA_HEADERS / v["header"]) for name, v in c["loras"].items()}

    def real(item: str) -> str:
        for name, head in heads.items():
            item = item.replace(f"$MODELS/llama-3.1-8b-{name}.gguf", head)
        return item

    return dataclasses.replace(
        s, lora=tuple(real(x) for x in s.lora), lora_scaled=tuple(real(x) for x in s.lora_scaled)
    )


def _rpc_machine() -> Machine:
    rpc = Device(
        "RPC0",
        DeviceKind.GPU,
        64 << 30,
        64 << 30,
        Vendor.RPC,
        backend_name="RPC0[127.0.0.1:P1]",
        host="127.0.0.1:P1",
    )
    return Machine((rpc,), host_device(64 << 30))


def _lora_bytes(est: Any) -> list[int]:
    return [sum(t.bytes for t in d.terms if t.label == "LoRA") for d in est.devices]


@pytest.mark.parametrize(
    "case_id",
    [
        "np1-c4096-nr-lora-r16-attn-f32",
        "np1-c4096-lora-r16-attn-f32",
        "np1-c4096-nr-lora-r64-all-f16",
        "np1-c4096-nr-lora-both",
        "np1-c4096-nr-ngl16-rpc-lora-r16-attn-f32",
    ],
)
def test_lora_buffers_follow_their_base_weights(profile: Any, case_id: str) -> None:
    (c,) = [c for c in cases("llama-3.1-8b-server") if c["id"] == case_id]
    r = c["results"]
    settings = _lora_case_settings(c)
    rpc = "--rpc" in c["command"]
    machine = _rpc_machine() if rpc else cpu_machine()
    loras = load_loras(settings)
    est = estimate(profile, settings, machine, loras=loras)
    recorded: dict[str, float] = {}
    for b in r["lora_buffers"]:
        where = "rpc" if b["buffer_type"].startswith("RPC") else "host"
        recorded[where] = recorded.get(where, 0.0) + b["mib"]
    got = _lora_bytes(est)
    want = ([round(recorded.get("rpc", 0.0) * MIB)] if rpc else []) + [round(recorded["host"] * MIB)]
    # the log prints MiB with two decimals: within 0.005 MiB per buffer
    tolerance = 0.005 * MIB * len(r["lora_buffers"])
    assert all(abs(g - w) <= tolerance for g, w in zip(got, want, strict=True)), (got, want)
    # the compute buffer reserved again once the adapters are applied is the size it was without them
    computes = [b["mib"] for b in r["buffers_mib"] if b["kind"] == "compute"]
    assert len(computes) == 2 * len(set(computes))
    plain = estimate(profile, dataclasses.replace(settings, lora=(), lora_scaled=()), machine)
    assert [d.bytes_of(TermKind.COMPUTE) for d in plain.devices] == [
        d.bytes_of(TermKind.COMPUTE) for d in est.devices
    ]


def test_lora_for_another_model_is_one_clear_error(profile: Any) -> None:
    head = str(LORA_HEADERS / "models" / "lora" / "llama-3.1-8b-lora-r16-attn-f32.header.gguf")
    sparse = TESTS / "fixtures" / "llamacpp" / "models" / "sparse"
    loras = load_loras(LaunchSettings(lora=(head,)))
    wider = load_profile(str(sparse / "qwen3-30b-a3b.header.gguf"), True)  # 2048 wide: other shapes
    fewer = load_profile(str(sparse / "lfm2-1.2b.header.gguf"), True)  # no blk.N.attn_q in every layer
    settings = LaunchSettings(n_ctx=4096, n_parallel=1)
    with pytest.raises(LoraError, match="has another shape"):
        estimate(wider, settings, cpu_machine(), loras=loras)
    with pytest.raises(LoraError, match="is not a weight of this model"):
        estimate(fewer, settings, cpu_machine(), loras=loras)
    with pytest.raises(LoraError, match="not a LoRA adapter"):
        load_loras(LaunchSettings(lora=(HEADER,)))
    with pytest.raises(LoraError, match=r"^--lora: /nonexistent/adapter\.gguf: cannot open"):
        load_loras(LaunchSettings(lora=("/nonexistent/adapter.gguf",)))


def test_plan_and_command_carry_the_adapter(capsys: pytest.CaptureFixture[str]) -> None:
    from fitplan import cli

    head = str(LORA_HEADERS / "models" / "lora" / "llama-3.1-8b-lora-r64-all-f16.header.gguf")
    base = [
        "plan",
        HEADER,
        "--header-only",
        "--assume-gpu",
        "A=8GiB",
        "--host-ram",
        "64GiB",
        "-np",
        "1",
        "--json",
    ]
    assert cli.main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert cli.main([*base, "--lora-scaled", f"{head}:0.5"]) == 0
    with_lora = json.loads(capsys.readouterr().out)
    assert f"--lora-scaled {head}:0.5" in with_lora["command"]
    assert with_lora["unmodelled_flags"] == []
    # 320 MiB of adapter on an 8 GiB card: less context fits
    assert with_lora["n_ctx"] < plain["n_ctx"]
