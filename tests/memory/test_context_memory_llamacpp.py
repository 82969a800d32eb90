"""KV cache, recurrent state, resolved context and output buffer against every case llama.cpp recorded.

The fixtures under tests/fixtures/llamacpp/ were recorded from llama.cpp 515e85511 (tools/groundtruth/record.py, the
`membreak` dry run). Each case gives the per-cache `size = ...` log values (MiB with 2 decimals), the exact bytes of
the "context" bucket per buffer type, the resolved context and the output buffer. The profile is built from the
header-only copy of the model the fixture names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fitplan.core.base.errors import SettingsError
from fitplan.core.base.launch_settings import FlashAttn, LaunchSettings, Tool
from fitplan.core.base.results import TermKind
from fitplan.core.gguf.reader import read_header
from fitplan.core.memory.context import (
    CacheAllocation,
    context_caches,
    output_buffer_bytes,
    resolve_context,
)
from fitplan.core.model.builder import build_profile
from fitplan.core.model.profile import ModelProfile
from support.models import TESTS

FIXTURES = TESTS / "fixtures" / "llamacpp"
MIB = 1 << 20
CPU_ALIGNMENT = 32  # ggml/src/ggml-impl.h TENSOR_ALIGNMENT: the fixtures are CPU runs


def _fixture_files() -> list[Path]:
    return sorted(p for grid in ("archs", "sparse", "placement") for p in (FIXTURES / grid).glob("*.json"))


def _settings(s: dict[str, Any]) -> LaunchSettings:
    server = bool(s.get("server_defaults"))
    return LaunchSettings(
        n_ctx=s["n_ctx"] or 0,
        n_parallel=-1 if server and s.get("n_parallel") is None else (s.get("n_parallel") or 1),
        kv_unified=s.get("kv_unified"),
        cache_type_k=s.get("type_k") or "f16",
        cache_type_v=s.get("type_v") or "f16",
        flash_attn=FlashAttn(s.get("flash_attn") or "auto"),
        n_batch=s.get("n_batch") or 2048,
        n_ubatch=s.get("n_ubatch") or 512,
        swa_full=bool(s.get("swa_full")),
        tool=Tool.SERVER if server else Tool.FIT_PARAMS,
    )


_PROFILES: dict[str, ModelProfile] = {}


def _profile(fixture: dict[str, Any]) -> ModelProfile:
    rel = fixture["model"]["header"]
    if rel not in _PROFILES:
        _PROFILES[rel] = build_profile(read_header(FIXTURES / rel, allow_incomplete=True))
    return _PROFILES[rel]


def _close(mine_bytes: int, logged_mib: float) -> bool:
    # llama.cpp prints (float)bytes / MiB with "%.2f"
    return abs(mine_bytes / MIB - logged_mib) <= 0.005 + 1e-9


def _compare_case(profile: ModelProfile, case: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    settings = _settings(case["settings"])
    if "error" in case:
        try:
            resolve_context(profile, settings)
        except SettingsError:
            return []
        return [f"llama.cpp refused ({case['error']}) but fitplan accepted the settings"]
    res = case["results"]
    ctx = resolve_context(profile, settings)
    want = res["resolved"]
    for field in ("n_ctx", "n_ctx_seq", "n_seq_max", "n_batch", "n_ubatch", "n_outputs_max", "n_rs_seq"):
        if getattr(ctx, field) != want[field]:
            problems.append(f"{field}: fitplan {getattr(ctx, field)}, llama.cpp {want[field]}")
    caches = context_caches(profile, ctx, settings)
    kv: list[CacheAllocation] = [c for c in caches if c.kind is TermKind.KV]
    rs: list[CacheAllocation] = [c for c in caches if c.name == "llama_memory_recurrent"]
    got_kv = [(c.cells, c.n_layers) for c in kv]
    want_kv = [(k["cells"], k["layers"]) for k in res["kv"]]
    if got_kv != want_kv:
        problems.append(f"KV caches (cells, layers): fitplan {got_kv}, llama.cpp {want_kv}")
    else:
        for c, k in zip(kv, res["kv"], strict=True):
            if not (_close(c.k_bytes, k["k_mib"]) and _close(c.v_bytes, k["v_mib"])):
                problems.append(
                    f"{c.name}: K {c.k_bytes / MIB:.3f} / V {c.v_bytes / MIB:.3f} MiB, "
                    f"llama.cpp K {k['k_mib']} / V {k['v_mib']} MiB"
                )
    got_rs = [(c.cells, round(c.k_bytes / MIB, 2), round(c.v_bytes / MIB, 2)) for c in rs]
    want_rs = [(r["cells"] * (1 + r["rs_seq"]), r["r_mib"], r["s_mib"]) for r in res["rs"]]
    if len(got_rs) != len(want_rs) or any(
        g[0] != w[0] or not _close(c.k_bytes, w[1]) or not _close(c.v_bytes, w[2])
        for g, w, c in zip(got_rs, want_rs, rs, strict=False)
    ):
        problems.append(f"recurrent state (rows, R MiB, S MiB): fitplan {got_rs}, llama.cpp {want_rs}")
    # exact bytes: the "context" bucket of the memory breakdown, summed over buffer types
    want_bytes = sum(b["context"] for b in res["buffers"])
    got_bytes = sum(c.buffer_bytes(CPU_ALIGNMENT) for c in caches)
    if got_bytes != want_bytes:
        problems.append(f"context bytes: fitplan {got_bytes}, llama.cpp {want_bytes}")
    out_bytes = output_buffer_bytes(profile, ctx)
    if res.get("output_bytes") is not None:
        if out_bytes != res["output_bytes"]:
            problems.append(f"output buffer: fitplan {out_bytes}, llama.cpp {res['output_bytes']}")
    elif res.get("output_mib") is not None and not _close(out_bytes, res["output_mib"]):
        problems.append(
            f"output buffer: fitplan {out_bytes / MIB:.3f} MiB, llama.cpp {res['output_mib']} MiB"
        )
    return problems


def _params() -> list[Any]:
    return [pytest.param(path, id=f"{path.parent.name}/{path.stem}") for path in _fixture_files()]


def test_fixtures_present() -> None:
    assert len(_fixture_files()) >= 100


@pytest.mark.parametrize("path", _params())
def test_context_memory_matches_llamacpp(path: Path) -> None:
    fixture = json.loads(path.read_text())
    profile = _profile(fixture)
    failures: list[str] = []
    for case in fixture["cases"]:
        for p in _compare_case(profile, case):
            failures.append(f"{case['id']}: {p}")
    assert not failures, "\n".join(failures[:20])
