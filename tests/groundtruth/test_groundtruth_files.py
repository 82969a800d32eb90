"""Validate the llama.cpp ground-truth fixtures (tests/fixtures/llamacpp, written by tools/groundtruth/record.py).

Checks the schema of every fixture file, that the header-only GGUF copies they reference exist and parse with
gguf.GGUFReader, that the sparse-model generator still writes byte-identical headers, and that each recorded
case is internally consistent (breakdown bytes against the MiB the library logged for the same run).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gguf import GGUFReader
from support.models import REPO
from support.tools import load_tool

FIXTURES = REPO / "tests" / "fixtures" / "llamacpp"
GRIDS = ("archs", "sparse", "placement", "server", "fitparams", "quantkv", "wide", "widearchs", "newarchs")
FIXTURE_FILES = sorted(p for g in GRIDS for p in (FIXTURES / g).glob("*.json"))
MIB = 1 << 20


def _load_sparse_models() -> ModuleType:
    return load_tool("tools/groundtruth/sparse_models.py")


def _load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def _ids(paths: list[Path]) -> list[str]:
    return [f"{p.parent.name}/{p.stem}" for p in paths]


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


SETTINGS_KEYS: dict[str, tuple[type, ...]] = {
    "n_ctx": (int, type(None)),
    "n_parallel": (int, type(None)),
    "kv_unified": (bool, type(None)),
    "type_k": (str,),
    "type_v": (str,),
    "flash_attn": (str,),
    "n_batch": (int, type(None)),
    "n_ubatch": (int, type(None)),
    "n_outputs_max": (int, type(None)),
    "swa_full": (bool,),
    "n_gpu_layers": (str, type(None)),
    "tensor_split": (list, type(None)),
    "overrides": (list,),
    "n_cpu_moe": (int, type(None)),
    "cpu_moe": (bool,),
    "devices": (str, type(None)),
    "device": (str, type(None)),
    "split_mode": (str, type(None)),
    "main_gpu": (int, type(None)),
    "kv_offload": (bool,),
    "repack": (bool,),
    "server_defaults": (bool,),
    "fit": (bool,),
}

KV_KEYS = {
    "cache": str,
    "size_mib": float,
    "cells": int,
    "layers": int,
    "seqs": int,
    "n_seq_max": int,
    "type_k": str,
    "k_mib": float,
    "type_v": str,
    "v_mib": float,
    "layer_devices": list,
}
RS_KEYS = {
    "size_mib": float,
    "cells": int,
    "layers": int,
    "seqs": int,
    "rs_seq": int,
    "type_r": str,
    "r_mib": float,
    "type_s": str,
    "s_mib": float,
    "layer_devices": list,
}


def test_fixtures_exist() -> None:
    grids = {p.parent.name for p in FIXTURE_FILES}
    assert {"archs", "sparse", "placement"} <= grids
    assert len(list((FIXTURES / "archs").glob("*.json"))) >= 100


def _check_kv_rs(results: dict[str, Any]) -> None:
    for kv in results["kv"]:
        for k, t in KV_KEYS.items():
            assert isinstance(kv[k], t if t is not float else (int, float)), (k, kv)
        assert kv["cache"]
        assert kv["cells"] > 0 and kv["layers"] >= 0
    for rs in results["rs"]:
        for k, t in RS_KEYS.items():
            assert isinstance(rs[k], t if t is not float else (int, float)), (k, rs)


def _check_membreak_results(case: dict[str, Any]) -> None:
    r = case["results"]
    assert isinstance(r["buffers"], list) and r["buffers"]
    for b in r["buffers"]:
        assert set(b) == {"device", "buffer_type", "is_host", "model", "context", "compute"}
        assert isinstance(b["device"], (str, type(None)))
        assert isinstance(b["buffer_type"], str) and b["buffer_type"]
        assert isinstance(b["is_host"], bool)
        for k in ("model", "context", "compute"):
            assert _is_int(b[k]) and b[k] >= 0
    assert any(b["buffer_type"] == "CPU" and b["is_host"] for b in r["buffers"])
    _check_kv_rs(r)
    assert r["output_bytes"] is None or _is_int(r["output_bytes"])
    assert r["output_mib"] is None or isinstance(r["output_mib"], (int, float))
    res = r["resolved"]
    for k in (
        "n_ctx",
        "n_ctx_seq",
        "n_seq_max",
        "n_batch",
        "n_ubatch",
        "n_outputs_max",
        "n_vocab",
        "n_layer",
        "n_ctx_train",
        "model_size",
    ):
        assert _is_int(res[k]), k
    assert isinstance(res["devices"], list)
    s = case["settings"]
    if s["n_ctx"] is not None and s["n_ctx"] > 0:
        assert res["n_ctx"] >= s["n_ctx"]
    if s["n_parallel"] is not None:
        assert res["n_seq_max"] == s["n_parallel"]
    # the context bucket of the breakdown is the KV + RS caches that the library logged (in MiB, 2 decimals)
    context_mib = sum(b["context"] for b in r["buffers"]) / MIB
    logged_mib = sum(kv["size_mib"] for kv in r["kv"]) + sum(rs["size_mib"] for rs in r["rs"])
    tol = 0.005 * (len(r["kv"]) + len(r["rs"])) + 1e-9
    assert logged_mib <= context_mib + tol, (context_mib, logged_mib)
    if all(kv["cache"] in ("kv", "base", "swa") for kv in r["kv"]):
        # only special caches (e.g. DeepSeek-V4's raw/compressed state) hold memory that no size line reports
        assert abs(context_mib - logged_mib) <= tol, (context_mib, logged_mib)
    # a dry run allocates no less than the sum of the tensor sizes (padding, duplicated tied output)
    assert sum(b["model"] for b in r["buffers"]) >= res["model_size"]


def _check_server_results(case: dict[str, Any]) -> None:
    r = case["results"]
    assert isinstance(r["buffers_mib"], list) and r["buffers_mib"]
    for b in r["buffers_mib"]:
        assert b["kind"] in ("model", "kv", "rs", "compute")
        assert isinstance(b["buffer_type"], str) and isinstance(b["mib"], (int, float))
    _check_kv_rs(r)
    assert isinstance(r["mmproj_buffers_mib"], list)
    assert isinstance(r["breakdown_mib"], list)
    assert _is_int(r["resolved"]["n_ctx"]) and _is_int(r["resolved"]["n_seq_max"])


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=_ids(FIXTURE_FILES))
def test_fixture_schema(path: Path) -> None:
    doc = _load(path)
    assert doc["schema"] == 1
    assert doc["llama_cpp"] == {"commit": "515e85511", "build": 11434}
    assert doc["tool"] in ("membreak", "llama-server", "llama-fit-params")
    model = doc["model"]
    assert isinstance(model["generator"], str) and model["generator"]
    assert model["name"] == path.stem
    assert isinstance(model["config"], (dict, type(None)))
    assert isinstance(model["path_hint"], str)
    assert _is_int(model["file_bytes"]) and model["file_bytes"] > 0
    assert isinstance(model["header"], (str, type(None)))
    cases = doc["cases"]
    assert isinstance(cases, list) and cases
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids))
    n_ok = 0
    for case in cases:
        cmd = case["command"]
        assert isinstance(cmd, list) and all(isinstance(a, str) for a in cmd)
        assert cmd[0] == doc["tool"]
        settings = case["settings"]
        assert set(settings) == set(SETTINGS_KEYS), set(settings) ^ set(SETTINGS_KEYS)
        for k, types in SETTINGS_KEYS.items():
            assert isinstance(settings[k], types), (k, settings[k])
        if "error" in case:
            assert isinstance(case["error"], str) and case["error"]
            assert "results" not in case
            continue
        n_ok += 1
        if doc["tool"] == "membreak":
            _check_membreak_results(case)
        elif doc["tool"] == "llama-server":
            _check_server_results(case)
        else:
            rows = case["results"]["rows_mib"]
            assert rows and rows[-1]["device"] == "Host"
            for row in rows:
                assert set(row) == {"device", "model", "context", "compute"}
                assert all(_is_int(row[k]) and row[k] >= 0 for k in ("model", "context", "compute"))
    assert n_ok >= 1


def _expand_header(header: Path, file_bytes: int, tmp_path: Path) -> Path:
    """The header-only copy, extended (sparse) to the full file size so that GGUFReader can map the tensors."""
    if sys.platform == "win32":
        pytest.skip("extending to a sparse file of the model's size needs a POSIX file system")
    dst = tmp_path / header.name
    shutil.copyfile(header, dst)
    os.truncate(dst, file_bytes)
    return dst


def _headers() -> list[tuple[Path, str, int, str]]:
    """(header path, model name, full file size, generator) for every header-only copy a fixture references.

    Models recorded with a real-length vocabulary (config.vocab = "spm") reference the header of their
    vocab="none" variant, whose full size is recorded by the fixtures of that variant.
    """
    seen: dict[str, tuple[Path, str, int, str]] = {}
    for p in FIXTURE_FILES:
        doc = _load(p)
        m = doc["model"]
        refs = [m]
        refs += [c["mmproj"] for c in doc["cases"] if "mmproj" in c]
        for ref in refs:
            cfg = ref.get("config") or {}
            if ref["header"] and ref["header"] not in seen and cfg.get("vocab", "none") == "none":
                seen[ref["header"]] = (
                    FIXTURES / ref["header"],
                    ref["name"],
                    ref["file_bytes"],
                    ref["generator"],
                )
    return sorted(seen.values())


HEADERS = _headers()


def test_every_fixture_has_a_header() -> None:
    known = {str(h[0]) for h in HEADERS}
    for p in FIXTURE_FILES:
        m = _load(p)["model"]
        assert m["header"], p
        assert str(FIXTURES / m["header"]) in known, (p, m["header"])


@pytest.mark.parametrize("entry", HEADERS, ids=[h[0].name for h in HEADERS])
def test_header_parses(entry: tuple[Path, str, int, str], tmp_path: Path) -> None:
    header, _name, file_bytes, _gen = entry
    assert header.is_file()
    assert header.stat().st_size <= 300 * 1024
    r = GGUFReader(_expand_header(header, file_bytes, tmp_path))
    arch = r.fields["general.architecture"].contents()
    assert isinstance(arch, str) and arch
    assert len(r.tensors) > 0
    end = max(int(t.data_offset) + int(t.n_bytes) for t in r.tensors)
    assert end <= file_bytes


def test_sparse_headers_are_reproducible(tmp_path: Path) -> None:
    sm = _load_sparse_models()
    sparse = [h for h in HEADERS if h[3] == "tools/groundtruth/sparse_models.py"]
    assert len(sparse) >= 8
    for header, name, file_bytes, _gen in sparse:
        out, layout = sm.generate_with_layout(name, tmp_path, header_only=True)
        assert out.read_bytes() == header.read_bytes(), name
        assert layout["full_bytes"] == file_bytes, name


def test_sparse_config_table_is_complete() -> None:
    sm = _load_sparse_models()
    assert set(sm.BUILDERS) == set(sm.CONFIGS)
    for name, cfg in sm.CONFIGS.items():
        assert isinstance(cfg["source"], str) and "config" in cfg["source"], name
        assert cfg["vocab_size"] > 0 and cfg["hidden_size"] > 0 and cfg["num_hidden_layers"] > 0


def test_sparse_gemma3_header_matches_published_shapes(tmp_path: Path) -> None:
    """Gemma-3-27B: 62 layers, K/V 16 heads x 128, vocab 262208 x 5376, tied output (no output.weight)."""
    header = FIXTURES / "models" / "sparse" / "gemma-3-27b.header.gguf"
    doc = _load(FIXTURES / "sparse" / "gemma-3-27b.json")
    r = GGUFReader(_expand_header(header, doc["model"]["file_bytes"], tmp_path))
    tensors = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    assert tensors["token_embd.weight"] == [5376, 262208]
    assert "output.weight" not in tensors
    assert tensors["blk.61.attn_k.weight"] == [5376, 16 * 128]
    assert "blk.62.attn_k.weight" not in tensors
    assert r.fields["gemma3.attention.sliding_window"].contents() == 1024


def test_sparse_lfm2_header_matches_published_shapes(tmp_path: Path) -> None:
    """LFM2-1.2B: 16 layers, attention (K/V 8 heads x 64) on layers 2, 5, 8, 10, 12 and 14, short convolutions
    (L_cache 3) elsewhere, the FFN 8192 wide (block_ff_dim 12288 auto-adjusted), vocab 65536 x 2048, tied output."""
    header = FIXTURES / "models" / "sparse" / "lfm2-1.2b.header.gguf"
    doc = _load(FIXTURES / "wide" / "lfm2-1.2b.json")
    r = GGUFReader(_expand_header(header, doc["model"]["file_bytes"], tmp_path))
    tensors = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    assert tensors["token_embd.weight"] == [2048, 65536]
    assert "output.weight" not in tensors and tensors["token_embd_norm.weight"] == [2048]
    assert tensors["blk.0.ffn_up.weight"] == [2048, 8192]
    assert tensors["blk.2.attn_k.weight"] == [2048, 8 * 64]
    assert tensors["blk.0.shortconv.in_proj.weight"] == [2048, 3 * 2048]
    assert tensors["blk.0.shortconv.conv.weight"] == [3, 2048]
    assert "blk.0.attn_k.weight" not in tensors and "blk.2.shortconv.conv.weight" not in tensors
    kv = [int(x) for x in r.fields["lfm2.attention.head_count_kv"].contents()]
    assert [il for il, n in enumerate(kv) if n] == [2, 5, 8, 10, 12, 14] and len(kv) == 16
    # llama.cpp read the same: 6 attention layers in the KV cache, the other 10 in the recurrent state
    res = doc["cases"][0]["results"]
    assert res["kv"][0]["layers"] == 6 and res["resolved"]["n_layer"] == 16


def _case(grid: str, model: str, case_id: str) -> dict[str, Any]:
    doc = _load(FIXTURES / grid / f"{model}.json")
    for case in doc["cases"]:
        if case["id"] == case_id:
            assert isinstance(case, dict) and "results" in case, case.get("error")
            return case
    raise AssertionError(f"no case {case_id} in {grid}/{model}")


def _context_bytes(case: dict[str, Any]) -> int:
    return sum(b["context"] for b in case["results"]["buffers"])


def test_recorded_kv_matches_hand_derivation() -> None:
    """Spot checks of the recordings against the KV formula (src/llama-kv-cache.cpp: cells x layers x row bytes)."""
    # Llama-3.1-8B, c=32768, f16: 32 layers x 32768 cells x (K+V = 2 x 8 heads x 128 x 2 B) = 4 GiB
    assert _context_bytes(_case("sparse", "llama-3.1-8b", "c32768-np1-faon")) == 32 * 32768 * 2 * 8 * 128 * 2
    # Gemma-3-27B, c=32768: 10 full layers x 32768 cells + 52 SWA layers x PAD(1024 + 512, 256) = 1536 cells,
    # each cell 2 x 16 heads x 128 x 2 B = 8192 B per layer
    case = _case("sparse", "gemma-3-27b", "c32768-np1-faon")
    assert _context_bytes(case) == (10 * 32768 + 52 * 1536) * 8192
    assert [(kv["cache"], kv["cells"], kv["layers"]) for kv in case["results"]["kv"]] == [
        ("base", 32768, 10),
        ("swa", 1536, 52),
    ]
    # DeepSeek-V2-Lite (MLA), c=32768, f16: 27 layers x 32768 cells x 576 x 2 B, no V cache
    assert _context_bytes(_case("sparse", "deepseek-v2-lite", "c32768-np1-faon")) == 27 * 32768 * 576 * 2
    # -np 4 without a unified cache: 4 streams of c/4 cells; same total for a plain model
    case = _case("sparse", "llama-3.1-8b", "c32768-np4-nokvu-faon")
    assert case["results"]["kv"][0]["cells"] == 8192 and case["results"]["kv"][0]["seqs"] == 4
    assert _context_bytes(case) == 32 * 32768 * 2 * 8 * 128 * 2


def test_recorded_server_defaults() -> None:
    """llama-server without -np: 4 slots, unified KV, 4 outputs reserved (membreak --server-defaults agrees)."""
    res = _case("sparse", "llama-3.1-8b", "server-defaults-c4096")["results"]["resolved"]
    assert (res["n_seq_max"], res["kv_unified"], res["n_outputs_max"]) == (4, True, 4)
    server = _case("server", "llama-3.1-8b", "server-defaults-c4096")["results"]
    assert (server["resolved"]["n_seq_max"], server["resolved"]["n_outputs_max"]) == (4, 4)
    # logits buffer: n_vocab 128256 x 4 outputs x 4 B = 1.957 MiB, logged with 2 decimals
    assert server["output_mib"] == round(128256 * 4 * 4 / MIB, 2)


FITP_FILES = sorted((FIXTURES / "fitparams").glob("*.json"))


@pytest.mark.parametrize("path", FITP_FILES, ids=_ids(FITP_FILES))
def test_membreak_agrees_with_llama_fit_params(path: Path) -> None:
    """membreak's byte breakdown, summed like common/fit.cpp does and floored to MiB, is what llama-fit-params
    printed for the same settings: Host = the is_host buffer types, a device row = its non-host buffer types
    (CPU_REPACK belongs to no model device and is in neither)."""
    compared = 0
    for case in _load(path)["cases"]:
        if "error" in case:
            continue
        grid_model, case_id = case["membreak_case"].split("#")
        grid, model = grid_model.split("/")
        buffers = _case(grid, model, case_id)["results"]["buffers"]
        for row in case["results"]["rows_mib"]:
            if row["device"] == "Host":
                mine = [b for b in buffers if b["is_host"]]
            else:
                mine = [b for b in buffers if b["device"] == row["device"] and not b["is_host"]]
            for k in ("model", "context", "compute"):
                assert sum(b[k] for b in mine) // MIB == row[k], (case["id"], row, k)
        compared += 1
    assert compared >= 3


def test_output_buffer_holds_the_logits_of_n_seq_max_rows() -> None:
    """The host output buffer reserved at context creation: n_vocab x n_seq_max x 4 B of logits
    (src/llama-context.cpp: output_reserve(n_seq_max)); logged in MiB with 2 decimals."""
    n = 0
    for p in FIXTURE_FILES:
        doc = _load(p)
        for case in doc["cases"]:
            if "results" not in case or doc["tool"] == "llama-fit-params":
                continue
            r = case["results"]
            if doc["tool"] == "membreak":
                n_vocab, n_seq = r["resolved"]["n_vocab"], r["resolved"]["n_seq_max"]
            else:
                n_vocab, n_seq = doc["model"]["config"]["vocab_size"], r["resolved"]["n_seq_max"]
            assert r["output_mib"] == round(n_vocab * n_seq * 4 / MIB, 2), (p.name, case["id"])
            n += 1
    assert n > 800
