"""fitplan.core.engines.ik_kv_cache against what ik_llama.cpp really allocated.

The fixtures in tests/fixtures/ik_llama/ were recorded by tools/groundtruth/ik/record_ik.py with ik_llama.cpp
55d3c05bf (the tree vendored in the ik-llama-cpp-python 0.1.5 sdist): exact ggml_nbytes of every K/V cache tensor
of a context created on sparse DeepSeek-V2-Lite files, over -mla 0-3 x -fa on/off x f16/q8_0/q8_KV x 4k/32k.
The profile comes from the header-only copy of the same file, committed next to the fixture.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fitplan.core.base.errors import SettingsError
from fitplan.core.engines import EngineCachePart, ik_effective_mla_mode, ik_kv_cache, ik_pad_context
from support.models import TESTS, load_json, profile_at

FIXTURES = TESTS / "fixtures" / "ik_llama"
FIXTURE_FILES = sorted(FIXTURES.glob("*.json"))
MIB = 1 << 20

#: engines.ik_kv_cache part names by cache side
K_PARTS = {"K", "K (MLA latent)"}
V_PARTS = {"V", "V^T (MLA)"}


V_Q8KV_ABORT = (
    "-mla 0 with -ctv q8_KV: ik's V cache is one 1-D tensor of n_embd_v_gqa * kv_size elements (8 + 2048 * kv_size "
    "bytes, a single q8_KV row header), but the graph addresses V cells at ggml_row_size(q8_KV, n_embd_v_gqa) = "
    "8 + 2048 B each (src/llama-build-context.cpp, the V store view), which overruns the tensor: ik aborts at "
    "context creation (ggml.c GGML_ASSERT in the view bounds check); ik_kv_cache accepts the setting"
)
V_QUANT_NO_FA = (
    "ik refuses a quantized V cache without flash attention (common/common.cpp: 'Quantized V cache cannot be used "
    "without flash attention'); ik_kv_cache accepts the setting"
)


def _refusal_reason(case: dict[str, Any]) -> str:
    """Which of ik's two refusals the recorded error is (the explanations are the reasons fitplan gives)."""
    s = case["settings"]
    if s["flash_attn"] == "off":
        assert "Quantized V cache cannot be used without flash attention" in case["error"]
        return V_QUANT_NO_FA
    assert s["mla"] == 0 and s["type_v"] == "q8_KV" and "GGML_ASSERT" in case["error"]
    return V_Q8KV_ABORT


def _cases() -> list[Any]:
    out = []
    for path in FIXTURE_FILES:
        doc = load_json(path)
        model = doc["model"]["name"]
        for case in doc["cases"]:
            if "error" in case:
                continue
            out.append(pytest.param(doc["model"]["header"], case, id=f"{model}/{case['id']}"))
    return out


def _refusals() -> list[Any]:
    out = []
    for path in FIXTURE_FILES:
        doc = load_json(path)
        for case in doc["cases"]:
            if "error" in case:
                _refusal_reason(case)  # asserts the recorded error is one of the two known refusals
                out.append(
                    pytest.param(doc["model"]["header"], case, id=f"{doc['model']['name']}/{case['id']}")
                )
    return out


CASES = _cases()
REFUSALS = _refusals()


def test_fixtures_present() -> None:
    names = {load_json(p)["model"]["name"] for p in FIXTURE_FILES}
    assert {"deepseek-v2-lite", "deepseek-v2-lite-legacy"} <= names
    assert len(CASES) >= 2 * 46  # 48 grid cases per model, 2 of which ik aborts on (V cache q8_KV at -mla 0)


def _sides(parts: tuple[EngineCachePart, ...]) -> tuple[int, int]:
    assert {p.name for p in parts} <= K_PARTS | V_PARTS, [p.name for p in parts]
    k = sum(p.bytes for p in parts if p.name in K_PARTS)
    v = sum(p.bytes for p in parts if p.name in V_PARTS)
    return k, v


@pytest.mark.parametrize(("header", "case"), CASES)
def test_ik_kv_cache_matches_recording(header: str, case: dict[str, Any]) -> None:
    profile = profile_at(FIXTURES / header)
    s, res, r = case["settings"], case["resolved"], case["results"]
    fa = s["flash_attn"] == "on"
    # the context ik sized the cache for
    assert ik_pad_context(s["n_ctx"], fa) == res["kv_size"]
    # the -mla mode ik ran with
    assert ik_effective_mla_mode(profile, s["mla"]) == res["mla_attn"]
    parts = ik_kv_cache(
        profile, res["kv_size"], mla_mode=s["mla"], flash_attn=fa, type_k=s["type_k"], type_v=s["type_v"]
    )
    k, v = _sides(parts)
    assert (k, v) == (r["k_bytes"], r["v_bytes"])
    # per layer too: every recorded layer tensor against the estimate for that layer
    per_layer = {i: b for p in parts if p.name in K_PARTS for i, b in p.per_layer}
    assert per_layer == dict.fromkeys(r["k"]["layers"], r["k"]["bytes_per_layer"])


@pytest.mark.parametrize(("header", "case"), REFUSALS)
def test_ik_refusals_rejected(header: str, case: dict[str, Any]) -> None:
    """Settings ik_llama.cpp refused (it exited before allocating): fitplan should refuse them too."""
    s = case["settings"]
    with pytest.raises(SettingsError):
        ik_kv_cache(
            profile_at(FIXTURES / header),
            ik_pad_context(s["n_ctx"], s["flash_attn"] == "on"),
            mla_mode=s["mla"],
            flash_attn=s["flash_attn"] == "on",
            type_k=s["type_k"],
            type_v=s["type_v"],
        )


# ------------------------------------------------------------------------------------------------ fixture sanity


def _mib2(n: int) -> float:
    return round(n / MIB, 2)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[p.stem for p in FIXTURE_FILES])
def test_fixture_consistent(path: Path) -> None:
    """Recorded exact bytes against the MiB ik logged in the same run, and the per-layer tensors against the sums."""
    doc = load_json(path)
    assert doc["schema"] == 1
    assert re.fullmatch(r"[0-9a-f]{40}", doc["ik_llama_cpp"]["commit"])
    profile = profile_at(FIXTURES / doc["model"]["header"])
    assert profile.architecture == "deepseek2"
    ids = [c["id"] for c in doc["cases"]]
    assert len(ids) == len(set(ids))
    for case in doc["cases"]:
        cid = case["id"]
        assert case["command"][0] == "ikkv"
        if "error" in case:
            assert "results" not in case
            continue
        r, res, s = case["results"], case["resolved"], case["settings"]
        assert res["flash_attn"] == (s["flash_attn"] == "on"), cid
        assert r["k"]["layers"] == list(range(profile.n_layer)), cid
        for side in ("k", "v"):
            t = r[side]
            if t is None:
                assert r[f"{side}_bytes"] == 0, cid
            else:
                assert t["bytes_per_layer"] * len(t["layers"]) == r[f"{side}_bytes"], cid
        # ik logs (float)bytes / (1024.0f * 1024.0f) with %7.2f
        line = r["kv_self"]
        total = r["k_bytes"] + r["v_bytes"]
        assert line["total_mib"] == pytest.approx(_mib2(total), abs=0.011), cid
        first = line["k_mib"] if "k_mib" in line else line["ckv_mib"]
        assert first == pytest.approx(_mib2(r["k_bytes"]), abs=0.011), cid
        # the backend buffer holds every cache tensor (each padded to the buffer alignment)
        assert len(r["kv_buffers"]) == len(r["kv_buffers_mib"]) == 1, cid
        buf = r["kv_buffers"][0]["bytes"]
        assert total <= buf < total + 2 * profile.n_layer * 64, cid
        assert r["kv_buffers_mib"][0]["mib"] == pytest.approx(_mib2(buf), abs=0.011), cid
        assert len(r["compute_buffers_mib"]) == 1, cid
