"""Record what llama.cpp (commit 515e85511, build 11434) allocates, as JSON fixtures.

Runs `membreak` (tools/groundtruth/membreak.cpp, a dry run like common/fit.cpp that prints
llama_get_memory_breakdown in bytes) and `llama-server` over grids of models and settings, and writes one JSON file
per model and grid under tests/fixtures/llamacpp/<grid>/. The schema is described in tools/groundtruth/README.md.

Usage (after tools/groundtruth/build_llamacpp.sh BUILD_DIR):
    python tools/groundtruth/record.py --build BUILD_DIR --work /tmp/gt [--grids archs,sparse,placement,server]
    python tools/groundtruth/record.py --build BUILD_DIR --work /tmp/gt --grids quantkv   # grid f, not a default

Grid f (`quantkv/`): quantized K/V caches (q8_0, q4_0) with flash attention on a few smoke models
(`QUANTKV_MODELS`), contexts 512/2048/8192 x `-ub` 512/2048 x 1 slot / 4 slots without a unified cache, and f16
references; every run with `-t 1`. Without the test-llama-archs models in WORK/archs, each is rebuilt from its
header copy in the fixtures (the header padded with zeros to the recorded file size: a dry run never reads the
tensor data).

Grid g (`wide/`, `widearchs/`, `--grids wide`): a sample of the wider settings space (contexts 512 to 131072, 1 and 4
slots, unified cache on and off, K/V f16 / q8_0 / q4_0, flash attention on and off, `-ub` 512 / 2048, `--swa-full`)
for graph classes: DeepSeek-V3 (many experts with MLA), granite-4.0-h-tiny and LFM2-1.2B (sparse models), the smoke models of
the Mamba hybrids and LFM2 (`WIDE_SPARSE_MODELS`, `WIDE_ARCH_MODELS`); every run with `-t 1`.

Grid h (`newarchs/`, not a default): the smoke models of the newer architectures (`NEWARCHS_MODELS`) over a sampled
wide grid (`NEWARCHS_SAMPLE`: contexts 512..131072, 1 and 4 slots, unified or not, K/V f16/q8_0/q4_0, flash
attention on/off, `-ub` 512/2048), 20 settings each, rebuilt from their header copies like grid f:
    python tools/groundtruth/record.py --build BUILD_DIR --work /tmp/gt --grids newarchs [--only deepseek4-moe]

Grids i, j and k (not defaults): GPU-shaped devices without a GPU (membreak --standin, tools/groundtruth/standin):
ggml-cuda's (`--grids standin`), ggml-vulkan's and ggml-metal's (`--grids standin_vulkan,standin_metal`), and
llama-server on the CUDA stand-in loaded as a dynamic backend (`--grids standin_server`: projectors, a draft).
Grid j (`terms/`, `--grids terms`, not a default): the terms of llama-server beyond one model's weights, cache and
compute, on llama-3.1-8b: `--lora` adapters written by tools/groundtruth/make_lora.py (rank 16 F32 on the attention
projections, rank 64 F16 on every linear weight; CPU repacking on and off; 16 layers on an RPC device), the
compute buffer reserved again once the adapters are applied (the warm-up); `--kv-unified-per-slot` with and
without -c (llama-server's own sizing of the KV pool); YaRN context extension (`--rope-scaling yarn --rope-scale
--yarn-orig-ctx`, membreak dry runs beside the same contexts without it: the buffers, and llama.cpp's re-adjusted
training context); the projector's warm-up with `--image-max-tokens` (Qwen2.5-VL). `-t 2`; about 12 minutes on 2
cores (`--only qwen2.5-vl-7b` or `--only llama-3.1-8b` for one part).
`--grids mmproj_images` (not a default; needs FITPLAN_LLAMA_SRC for the headers): the projector's compute buffer
after one image of each size beyond its warm-up image (tools/groundtruth/mmproj_image.cpp; Qwen2.5-VL, Qwen2-VL,
Qwen3-VL and Mistral Small 3.1's Pixtral on the CPU, `--only mmproj-qwen3-vl-8b` for one;
the evaluation callback stops each graph after its first node, so the allocation is llama.cpp's and the arithmetic
is skipped); about 2 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))
import sparse_models

LLAMA_CPP = {"commit": "515e85511", "build": 11434}
SCHEMA_VERSION = 1
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "llamacpp"
MODELS_DIR = FIXTURES / "models"
HEADER_LIMIT = 300 * 1024

# ------------------------------------------------------------------------------------------------ log parsing

# The llama.cpp log lines of each allocation: one set of patterns, the app's (fitplan.core.launch.server_log).
from fitplan.core.launch.server_log import (  # noqa: E402
    RE_BREAKDOWN,
    RE_CLIP_COMPUTE,
    RE_CLIP_MODEL,
    RE_COMPUTE_BUF,
    RE_CREATING,
    RE_CTX_PARAM,
    RE_FA,
    RE_KV_BUF,
    RE_KV_SIZE,
    RE_MODEL_BUF,
    RE_OUTPUT,
    RE_RS_BUF,
    RE_RS_SIZE,
    RE_WORST,
)

# the record-only lines: layer placement and graph size
RE_OFFLOADED = re.compile(r"^load_tensors: offloaded (\d+)/(\d+) layers to GPU")
RE_LAYER_DEV = re.compile(r"^load_tensors: layer +(\d+) assigned to device (\S+), is_swa = (\d)")
RE_KV_LAYER_DEV = re.compile(r"^llama_kv_cache: layer +(\d+): dev = (\S+)")
RE_RS_LAYER_DEV = re.compile(r"^llama_memory_recurrent,? layer +(\d+): dev = (\S+)")
RE_GRAPH = re.compile(r"^sched_reserve: graph: nodes = (\d+), splits = (\d+)")
RE_LORA_BUF = re.compile(r"^llama_adapter_lora_init_impl: +(\S+) LoRA buffer size = +([\d.]+) MiB")
RE_YARN_TRAIN = re.compile(r"n_ctx_train adjusted to (\d+)")
RE_PER_SLOT = re.compile(
    r"--kv-unified-per-slot: sizing KV pool to n_parallel \* kv_unified_per_slot = .* = (\d+)"
)


def _compress_devs(devs: dict[int, str]) -> list[list[Any]]:
    """{layer: dev} -> [[first, last, dev], ...] runs."""
    runs: list[list[Any]] = []
    for il in sorted(devs):
        d = devs[il]
        if runs and runs[-1][2] == d and runs[-1][1] == il - 1:
            runs[-1][1] = il
        else:
            runs.append([il, il, d])
    return runs


def parse_log(lines: Iterable[str]) -> dict[str, Any]:
    kv: list[dict[str, Any]] = []
    rs: list[dict[str, Any]] = []
    out: dict[str, Any] = {"kv": kv, "rs": rs, "output": [], "ctx_params": {}, "log_buffers": []}
    pending_cache = "kv"
    layer_dev: dict[int, str] = {}
    layer_swa: dict[int, int] = {}
    kv_dev: list[dict[int, str]] = []
    rs_dev: dict[int, str] = {}
    for line in lines:
        line = line.rstrip()
        if m := RE_CREATING.match(line):
            label = m.group(1)
            pending_cache = {"non-SWA KV cache": "base", "SWA KV cache": "swa"}.get(label, label)
            kv_dev.append({})
            continue
        if m := RE_KV_LAYER_DEV.match(line):
            if not kv_dev:
                kv_dev.append({})
            kv_dev[-1][int(m.group(1))] = m.group(2)
            continue
        if m := RE_KV_SIZE.match(line):
            kv.append(
                {
                    "cache": pending_cache,
                    "size_mib": float(m.group(1)),
                    "cells": int(m.group(2)),
                    "layers": int(m.group(3)),
                    "seqs": int(m.group(4)),
                    "n_seq_max": int(m.group(5)),
                    "type_k": m.group(6),
                    "k_mib": float(m.group(7)),
                    "type_v": m.group(8),
                    "v_mib": float(m.group(9)),
                    "layer_devices": _compress_devs(kv_dev[-1]) if kv_dev else [],
                }
            )
            pending_cache = "kv"
            continue
        if m := RE_RS_LAYER_DEV.match(line):
            rs_dev[int(m.group(1))] = m.group(2)
            continue
        if m := RE_RS_SIZE.match(line):
            rs.append(
                {
                    "size_mib": float(m.group(1)),
                    "cells": int(m.group(2)),
                    "layers": int(m.group(3)),
                    "seqs": int(m.group(4)),
                    "rs_seq": int(m.group(5)),
                    "type_r": m.group(6),
                    "r_mib": float(m.group(7)),
                    "type_s": m.group(8),
                    "s_mib": float(m.group(9)),
                    "type_p": m.group(10),
                    "p_mib": float(m.group(11)) if m.group(11) else None,
                    "layer_devices": _compress_devs(rs_dev),
                }
            )
            continue
        if m := RE_OUTPUT.match(line):
            out["output"].append({"buffer_type": m.group(1), "mib": float(m.group(2))})
            continue
        if m := RE_CTX_PARAM.match(line):
            v = m.group(2)
            out["ctx_params"][m.group(1)] = (
                int(v) if v.isdigit() else {"true": True, "false": False}.get(v, v)
            )
            continue
        if m := RE_OFFLOADED.match(line):
            out["offloaded_layers"] = [int(m.group(1)), int(m.group(2))]
            continue
        if m := RE_LAYER_DEV.match(line):
            layer_dev[int(m.group(1))] = m.group(2)
            layer_swa[int(m.group(1))] = int(m.group(3))
            continue
        for rx, kind in (
            (RE_MODEL_BUF, "model"),
            (RE_COMPUTE_BUF, "compute"),
            (RE_KV_BUF, "kv"),
            (RE_RS_BUF, "rs"),
        ):
            if m := rx.match(line):
                out["log_buffers"].append({"kind": kind, "buffer_type": m.group(1), "mib": float(m.group(2))})
                break
        if m := RE_FA.search(line):
            # "enabled" / "disabled" when auto was resolved; "enabled" when llama.cpp forced it on
            out["flash_attn_resolved"] = "disabled" if m.group(1) and m.group(1) != "enabled" else "enabled"
        if m := RE_WORST.match(line):
            out["worst_case"] = {
                "n_tokens": int(m.group(1)),
                "n_seqs": int(m.group(2)),
                "n_outputs": int(m.group(3)),
            }
        if m := RE_GRAPH.match(line):
            out["graph"] = {"nodes": int(m.group(1)), "splits": int(m.group(2))}
            out.setdefault("graphs", []).append(out["graph"])
        if m := RE_LORA_BUF.match(line):
            out.setdefault("lora_buffers", []).append({"buffer_type": m.group(1), "mib": float(m.group(2))})
        if m := RE_YARN_TRAIN.search(line):
            out["n_ctx_train_adjusted"] = int(m.group(1))
        if m := RE_PER_SLOT.search(line):
            out["per_slot_n_ctx"] = int(m.group(1))
    out["layer_devices"] = _compress_devs(layer_dev)
    out["swa_layers"] = [il for il in sorted(layer_swa) if layer_swa[il]]
    return out


# ------------------------------------------------------------------------------------------------ runners


class Env:
    def __init__(self, build: Path, work: Path, membreak: Path | None = None) -> None:
        self.build = build
        self.bin = build / "bin"
        self.membreak = membreak or build / "bin" / "membreak"
        self.work = work
        self.env = dict(os.environ)
        self.env["LD_LIBRARY_PATH"] = str(self.bin) + os.pathsep + self.env.get("LD_LIBRARY_PATH", "")


def run_membreak(
    env: Env, model: Path, args: Sequence[str], server_defaults: bool = False, timeout: float = 300.0
) -> tuple[list[str], dict[str, Any] | None, str]:
    argv = (
        [str(env.membreak)]
        + (["--server-defaults"] if server_defaults else [])
        + ["-m", str(model)]
        + list(args)
    )
    p = subprocess.run(argv, capture_output=True, text=True, env=env.env, timeout=timeout, check=False)
    if p.returncode != 0:
        return argv, None, p.stderr[-2000:]
    return argv, json.loads(p.stdout), ""


def _display_argv(argv: Sequence[str], env: Env) -> list[str]:
    """Command line as recorded: binaries by name, model paths by file name."""
    out: list[str] = []
    for a in argv:
        if a.startswith(str(env.bin)) or a == str(env.membreak):
            a = os.path.basename(a)
        elif a.startswith(str(env.work)):
            a = "$MODELS/" + os.path.relpath(a, env.work)
        out.append(a)
    return out


def settings_from(args: Sequence[str], server_defaults: bool, resolved: dict[str, Any]) -> dict[str, Any]:
    """The requested settings, as the llama-server flags say (None = not given, the default applies)."""
    a = list(args)

    def val(*flags: str) -> str | None:
        for f in flags:
            if f in a:
                return a[a.index(f) + 1]
        return None

    def num(*flags: str) -> int | None:
        v = val(*flags)
        return int(v) if v is not None else None

    ts = val("-ts", "--tensor-split")
    overrides = [a[i + 1] for i, x in enumerate(a) if x in ("-ot", "--override-tensor")]
    kvu: bool | None = True if "-kvu" in a else (False if "-no-kvu" in a else None)
    return {
        "n_ctx": num("-c", "--ctx-size"),
        "n_parallel": num("-np", "--parallel"),
        "kv_unified": kvu,
        "type_k": val("-ctk", "--cache-type-k") or "f16",
        "type_v": val("-ctv", "--cache-type-v") or "f16",
        "flash_attn": val("-fa", "--flash-attn") or "auto",
        "n_batch": num("-b", "--batch-size"),
        "n_ubatch": num("-ub", "--ubatch-size"),
        "n_outputs_max": resolved.get("n_outputs_max_param"),
        "swa_full": "--swa-full" in a,
        "n_gpu_layers": val("-ngl", "--gpu-layers", "--n-gpu-layers"),
        "tensor_split": [float(x) for x in ts.split(",")] if ts else None,
        "overrides": overrides,
        "n_cpu_moe": num("-ncmoe", "--n-cpu-moe"),
        "cpu_moe": "-cmoe" in a or "--cpu-moe" in a,
        "devices": val("--rpc"),
        "device": val("-dev", "--device"),
        "split_mode": val("-sm", "--split-mode"),
        "main_gpu": num("-mg", "--main-gpu"),
        "kv_offload": not ("-nkvo" in a or "--no-kv-offload" in a),
        "repack": not ("-nr" in a or "--no-repack" in a),
        "server_defaults": server_defaults,
        "fit": False,
    }


def _error_text(stderr: str) -> str:
    """The library's own error lines (and membreak's verdict) from a failed run."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    keep = [
        ln
        for ln in lines
        if re.search(
            r"error|failed|exception|not supported|does not support|does not divide|requires", ln, re.I
        )
    ]
    return " | ".join(keep[-3:]) if keep else (lines[-1] if lines else "failed")


def case_from_membreak(
    env: Env, case_id: str, model: Path, args: Sequence[str], server_defaults: bool = False
) -> dict[str, Any]:
    argv, data, err = run_membreak(env, model, args, server_defaults)
    rec_args = [x.replace(str(env.work), "$MODELS") for x in args]
    server_defaults = server_defaults or "--server-defaults" in args  # membreak reads it anywhere
    if data is None:
        return {
            "id": case_id,
            "command": _display_argv(argv, env),
            "settings": settings_from(rec_args, server_defaults, {}),
            "error": _error_text(err),
        }
    parsed = parse_log(data["log"])
    resolved = dict(data["resolved"])
    cp = parsed["ctx_params"]
    for k in ("n_outputs_max", "n_outputs_max_per_seq", "n_rs_seq"):
        if k in cp:
            resolved[k] = cp[k]
    if "flash_attn_resolved" in parsed:
        resolved["flash_attn_resolved"] = parsed["flash_attn_resolved"]
    if "offloaded_layers" in parsed:
        resolved["offloaded_layers"] = parsed["offloaded_layers"]
    resolved["devices"] = data["devices"]
    results = {
        "buffers": [
            {
                "device": b["device"],
                "buffer_type": b["buffer_type"],
                "is_host": b["is_host"],
                "model": b["model"],
                "context": b["context"],
                "compute": b["compute"],
            }
            for b in sorted(data["buffers"], key=lambda b: (b["device"] or "", b["buffer_type"]))
        ],
        "kv": parsed["kv"],
        "rs": parsed["rs"],
        "output_bytes": None,
        "output_mib": parsed["output"][0]["mib"] if parsed["output"] else None,
        "layer_devices": parsed["layer_devices"],
        "swa_layers": parsed["swa_layers"],
        "worst_case": parsed.get("worst_case"),
        "graph": parsed.get("graph"),
        "resolved": resolved,
    }
    if "n_ctx_train_adjusted" in parsed:
        results["n_ctx_train_adjusted"] = parsed["n_ctx_train_adjusted"]
    return {
        "id": case_id,
        "command": _display_argv(argv, env),
        "settings": settings_from(rec_args, server_defaults, resolved),
        "results": results,
    }


# ------------------------------------------------------------------------------------------------ files


def fixture_doc(tool: str, model: dict[str, Any], cases: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema": SCHEMA_VERSION, "llama_cpp": LLAMA_CPP, "tool": tool, "model": model, "cases": cases}


def _dump(obj: Any, indent: int = 0) -> str:
    """JSON with one line per small object (buffers, caches, settings rows) and nesting for the rest."""
    one = json.dumps(obj)
    if len(one) + indent <= 230 or not isinstance(obj, (dict, list)) or not obj:
        return one
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(k)}: {_dump(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + _dump(v, indent + 1) for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def write_fixture(grid: str, name: str, doc: dict[str, Any], started: float | None = None) -> Path:
    """Write the fixture and print how many of its cases llama.cpp accepted (and the time since `started`)."""
    path = FIXTURES / grid / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_dump(doc) + "\n")
    cases = doc["cases"]
    took = [f"{time.time() - started:.1f}s"] if started is not None else []
    print(grid, name, sum(1 for c in cases if "error" not in c), "/", len(cases), *took, flush=True)
    return path


def header_copy(src: Path, dst_name: str) -> str | None:
    """Copy the header (KV + tensor infos, up to the data offset) of ``src`` to the fixture models dir."""
    from gguf import GGUFReader

    r = GGUFReader(src)
    n = int(r.data_offset)
    if n > HEADER_LIMIT:
        return None
    dst = MODELS_DIR / dst_name
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as f:
        dst.write_bytes(f.read(n))
    return os.path.relpath(dst, FIXTURES)


# ------------------------------------------------------------------------------------------------ grids

ARCH_SETTINGS: list[tuple[str, list[str]]] = [
    ("c512-np1", ["-c", "512", "-np", "1"]),
    ("c1024-np2-nokvu", ["-c", "1024", "-np", "2", "-no-kvu"]),
    ("c512-np1-fa-off", ["-c", "512", "-np", "1", "-fa", "off"]),
]


def grid_archs(env: Env, only: list[str] | None) -> None:
    arch_dir = env.work / "archs"
    if not arch_dir.exists() or not any(arch_dir.glob("*.gguf")):
        arch_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [str(env.bin / "test-llama-archs"), "-o", str(arch_dir)],
            env=env.env,
            check=True,
            capture_output=True,
        )
    for gguf_path in sorted(arch_dir.glob("*.gguf")):
        name = gguf_path.stem
        if only and name not in only:
            continue
        cases = [case_from_membreak(env, cid, gguf_path, args) for cid, args in ARCH_SETTINGS]
        model = {
            "generator": "test-llama-archs -o DIR",
            "name": name,
            "config": None,
            "path_hint": f"archs/{gguf_path.name}",
            "file_bytes": gguf_path.stat().st_size,
            "header": header_copy(gguf_path, f"archs/{name}.header.gguf"),
        }
        write_fixture("archs", name, fixture_doc("membreak", model, cases))


# grid f. quantkv: quantized K/V caches with flash attention on the smoke models of a few architecture families,
# over contexts, micro-batches and slots (issue 16's first class; the archs grid has f16 caches only)
QUANTKV_MODELS = ["llama-dense", "llama-moe", "qwen3-dense", "mistral3-dense", "lfm2-dense", "lfm2moe-moe"]
#: other graph shapes, q8_0 only (iSWA, fused QKV, parallel attention/FFN, attention sinks, MLA)
QUANTKV_MORE_MODELS = [
    "gemma3-dense",
    "qwen2-dense",
    "phi3-dense",
    "command-r-dense",
    "gpt-oss-moe",
    "granite-dense",
    "deepseek2-moe",
]


def quantkv_settings(
    cache_types: Sequence[str] = ("q8_0", "q4_0"), f16: bool = True
) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for c in (512, 2048, 8192):
        for ub in (512, 2048):
            for ct in cache_types:
                for np_, kvu in ((1, None), (4, False)):
                    args = [
                        "-c",
                        str(c),
                        "-np",
                        str(np_),
                        "-fa",
                        "on",
                        "-b",
                        str(max(ub, 2048)),
                        "-ub",
                        str(ub),
                        "-ctk",
                        ct,
                        "-ctv",
                        ct,
                        "-t",
                        "1",
                    ]
                    if kvu is not None:
                        args.append("-no-kvu")
                    kid = f"c{c}-np{np_}" + ("" if kvu is None else "-nokvu") + f"-faon-ub{ub}-{ct}"
                    out.append((kid, args))
    # the same shapes with f16 caches, as the reference the quantized cases differ from
    for c in (512, 8192) if f16 else ():
        for ub in (512, 2048):
            out.append(
                (
                    f"c{c}-np1-faon-ub{ub}-f16",
                    ["-c", str(c), "-np", "1", "-fa", "on", "-b", "2048", "-ub", str(ub), "-t", "1"],
                )
            )
    return out


def arch_model(env: Env, name: str) -> Path:
    """A test-llama-archs model: the one in WORK/archs, else rebuilt from its header copy (the tensor data of a
    dry run is never read: the header padded with zeros to the recorded file size loads the same)."""
    path = env.work / "archs" / f"{name}.gguf"
    if path.exists():
        return path
    doc = json.loads((FIXTURES / "archs" / f"{name}.json").read_text())
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write((FIXTURES / doc["model"]["header"]).read_bytes())
        f.truncate(int(doc["model"]["file_bytes"]))
    return path


def smoke_model(name: str, path: Path) -> dict[str, Any]:
    """The fixture's model record of a `test-llama-archs` smoke model (its header is in models/archs/)."""
    return {
        "generator": "test-llama-archs -o DIR",
        "name": name,
        "config": None,
        "path_hint": f"archs/{path.name}",
        "file_bytes": path.stat().st_size,
        "header": f"models/archs/{name}.header.gguf",
    }


def _record_smoke(env: Env, grid: str, name: str, settings: Sequence[tuple[str, list[str]]]) -> None:
    """Record one smoke model over `settings` into `grid`'s fixture."""
    path = arch_model(env, name)
    t0 = time.time()
    cases = [case_from_membreak(env, cid, path, args) for cid, args in settings]
    write_fixture(grid, name, fixture_doc("membreak", smoke_model(name, path), cases), started=t0)


def grid_quantkv(env: Env, only: list[str] | None) -> None:
    for name in QUANTKV_MODELS + QUANTKV_MORE_MODELS:
        if only and name not in only:
            continue
        grid = quantkv_settings() if name in QUANTKV_MODELS else quantkv_settings(("q8_0",), f16=False)
        _record_smoke(env, "quantkv", name, grid)


# grid h. newarchs: the smoke models of the newer architectures (compressed or indexed attention, hyper-connections,
# Mamba hybrids with MoE, SWA MoE) over a sampled wide grid: context 512..131072, 1 and 4 slots (unified or not),
# K/V f16/q8_0/q4_0, flash attention on/off, -ub 512/2048 (the archs grid has three settings per model)
NEWARCHS_MODELS = [
    "deepseek4-moe",
    "glm5-next-moe",
    "jais-dense",
    "minimax-m3-moe",
    "qwen4exp-moe",
    "deepseek32-moe",
    "glm-dsa-moe",
    "hy_v4-moe",
    "dots3note-moe",
    "cohere2moe-moe",
    "plamo2-dense",
    "nemotron_h_moe-dense",
    "exaone-moe-moe",
    "laguna-moe",
    "afmoe-moe",
]

#: (context, slots, unified, cache type, flash attention, ubatch): a sample of the product that takes every value
#: of each axis and pairs the long contexts with both attention paths; quantized caches only with flash attention
#: (llama.cpp refuses a quantized V cache without it)
NEWARCHS_SAMPLE: list[tuple[int, int, bool | None, str, str, int]] = [
    (512, 1, None, "f16", "on", 512),
    (512, 1, None, "f16", "off", 512),
    (2048, 1, None, "f16", "on", 2048),
    (2048, 1, None, "f16", "off", 2048),
    (2048, 1, None, "q8_0", "on", 512),
    (8192, 1, None, "f16", "on", 512),
    (8192, 1, None, "f16", "off", 512),
    (8192, 4, False, "f16", "on", 512),
    (8192, 4, False, "f16", "off", 2048),
    (8192, 4, False, "q8_0", "on", 2048),
    (8192, 1, None, "q4_0", "on", 512),
    (32768, 1, None, "f16", "on", 2048),
    (32768, 1, None, "f16", "off", 512),
    (32768, 4, True, "f16", "on", 512),
    (32768, 4, True, "f16", "off", 512),
    (32768, 1, None, "q8_0", "on", 512),
    (32768, 4, True, "q4_0", "on", 2048),
    (131072, 1, None, "f16", "on", 512),
    (131072, 1, None, "f16", "off", 512),
    (131072, 1, None, "q4_0", "on", 512),
]


def newarchs_settings() -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for c, np_, kvu, ct, fa, ub in NEWARCHS_SAMPLE:
        args = ["-c", str(c), "-np", str(np_), "-fa", fa, "-b", "2048", "-ub", str(ub), "-t", "1"]
        if kvu is not None:
            args.append("-kvu" if kvu else "-no-kvu")
        if ct != "f16":
            args += ["-ctk", ct, "-ctv", ct]
        kid = (
            f"c{c}-np{np_}" + ("" if kvu is None else ("-kvu" if kvu else "-nokvu")) + f"-fa{fa}-ub{ub}-{ct}"
        )
        out.append((kid, args))
    return out


def grid_newarchs(env: Env, only: list[str] | None) -> None:
    for name in NEWARCHS_MODELS:
        if only and name not in only:
            continue
        _record_smoke(env, "newarchs", name, newarchs_settings())


def sparse_model(env: Env, name: str, vocab: str = "none") -> tuple[Path, dict[str, Any]]:
    out = env.work / "sparse"
    path = sparse_models.generate(name, out, vocab=vocab)
    # the header-only copy is always the vocab="none" variant (real-length token arrays would make it megabytes);
    # with vocab="spm" the model differs from it only in the tokenizer.ggml.* keys
    hdr = sparse_models.generate(name, MODELS_DIR / "sparse", header_only=True)
    model = {
        "generator": "tools/groundtruth/sparse_models.py",
        "name": name,
        "config": {"vocab": vocab, **sparse_models.CONFIGS[name]},
        "path_hint": os.path.relpath(path, env.work),
        "file_bytes": path.stat().st_size,
        "header": os.path.relpath(hdr, FIXTURES),
        "header_vocab": "none",
    }
    return path, model


SWA_MODELS = {"gemma-3-27b", "gpt-oss-20b", "gpt-oss-120b", "llama-4-scout-17b-16e"}


def sparse_settings(name: str, n_ctx_train: int) -> list[tuple[str, list[str], bool]]:
    """(id, args, server_defaults) for grid b."""
    out: list[tuple[str, list[str], bool]] = []
    ctxs = sorted({4096, 32768, n_ctx_train})
    for c in ctxs:
        for np_, kvu in ((1, None), (4, True), (4, False)):
            for fa in ("on", "off"):
                args = ["-c", str(c), "-np", str(np_), "-fa", fa]
                if kvu is not None:
                    args.append("-kvu" if kvu else "-no-kvu")
                kid = f"c{c}-np{np_}" + ("" if kvu is None else ("-kvu" if kvu else "-nokvu")) + f"-fa{fa}"
                out.append((kid, args, False))
    for c in (4096, 32768):
        for ct in ("q8_0", "q4_0"):
            for np_ in (1, 4):
                args = ["-c", str(c), "-np", str(np_), "-kvu", "-fa", "on", "-ctk", ct, "-ctv", ct]
                out.append((f"c{c}-np{np_}-kvu-faon-{ct}", args, False))
        out.append(
            (
                f"c{c}-np1-faon-ctk-q8_0-ctv-f16",
                ["-c", str(c), "-np", "1", "-fa", "on", "-ctk", "q8_0"],
                False,
            )
        )
    for c in (4096, 32768):
        for fa in ("on", "off"):
            out.append(
                (
                    f"c{c}-np1-fa{fa}-ub2048",
                    ["-c", str(c), "-np", "1", "-fa", fa, "-b", "2048", "-ub", "2048"],
                    False,
                )
            )
    out.append(
        (
            "c4096-np1-faon-b4096-ub4096",
            ["-c", "4096", "-np", "1", "-fa", "on", "-b", "4096", "-ub", "4096"],
            False,
        )
    )
    # quantized V cache without flash attention (off: refused or overridden; auto: resolved)
    for fa in ("off", "auto"):
        out.append(
            (
                f"c4096-np1-fa{fa}-q8_0",
                ["-c", "4096", "-np", "1", "-fa", fa, "-ctk", "q8_0", "-ctv", "q8_0"],
                False,
            )
        )
    # no CPU repacking: every weight in the plain CPU buffer
    out.append(("c4096-np1-faon-norepack", ["-c", "4096", "-np", "1", "-fa", "on", "-nr"], False))
    if name in SWA_MODELS:
        for c in (4096, 32768):
            for np_, kvu in ((1, None), (4, True), (4, False)):
                args = ["-c", str(c), "-np", str(np_), "-fa", "on", "--swa-full"]
                if kvu is not None:
                    args.append("-kvu" if kvu else "-no-kvu")
                kid = (
                    f"c{c}-np{np_}" + ("" if kvu is None else ("-kvu" if kvu else "-nokvu")) + "-faon-swafull"
                )
                out.append((kid, args, False))
    # llama-server defaults: -np auto (4 slots, unified KV), n_outputs_max from the server's output limits
    for c in (4096, 32768):
        out.append((f"server-defaults-c{c}", ["-c", str(c)], True))
    return out


def grid_sparse(env: Env, only: list[str] | None) -> None:
    for name in sparse_models.BUILDERS:
        if only and name not in only:
            continue
        path, model = sparse_model(env, name)
        ctx_train = sparse_models.CONFIGS[name]["max_position_embeddings"]
        assert isinstance(ctx_train, int)
        cases = []
        t0 = time.time()
        for cid, args, sd in sparse_settings(name, ctx_train):
            cases.append(case_from_membreak(env, cid, path, args, server_defaults=sd))
        write_fixture("sparse", name, fixture_doc("membreak", model, cases), started=t0)


# grid g. wide: graph classes over a wider sample of settings (contexts 512..131072, 1 and 4 slots, unified KV on
# and off, K/V f16 / q8_0 / q4_0, flash attention on and off, -ub 512 / 2048, --swa-full), sampled so that each
# model keeps a few dozen cases: realistic sparse models (WIDE_SPARSE_MODELS, fixtures in wide/) and smoke models
# of test-llama-archs (WIDE_ARCH_MODELS, fixtures in widearchs/, rebuilt from their header copies when needed)
WIDE_SPARSE_MODELS = ["deepseek-v3", "granite-4.0-h-tiny", "lfm2-1.2b"]
WIDE_ARCH_MODELS = [
    "jamba-dense",
    "granitehybrid-dense",
    "nemotron_h-dense",
    "lfm2-dense",
    "glm5-next-moe",
    "qwen35-dense",
    "qwen35moe-moe",
    "cohere2-dense",
    "gemma2-dense",
    "gemma3-dense",
]
WIDE_CONTEXTS = (512, 4096, 32768, 131072)


def wide_settings(swa: bool) -> list[tuple[str, list[str]]]:
    """(id, args) of grid g: per context, f16 caches with 1 slot (FA on and off), 4 slots with a unified cache
    (FA on) and without (FA off), q8_0 with 1 slot and q4_0 with 4 separate slots (FA on), `-ub 2048` with 1 slot
    (FA on and off); `--swa-full` with 4 unified slots for models with sliding-window layers."""
    out: list[tuple[str, list[str]]] = []
    for c in WIDE_CONTEXTS:
        rows: list[tuple[int, bool | None, str, str, int]] = [
            (1, None, "on", "f16", 512),
            (1, None, "off", "f16", 512),
            (4, True, "on", "f16", 512),
            (4, False, "off", "f16", 512),
            (1, None, "on", "q8_0", 512),
            (4, False, "on", "q4_0", 512),
        ]
        if c > 512:
            rows += [(1, None, "on", "f16", 2048), (1, None, "off", "f16", 2048)]
        for np_, kvu, fa, ct, ub in rows:
            args = ["-c", str(c), "-np", str(np_), "-fa", fa, "-t", "1"]
            if kvu is not None:
                args.append("-kvu" if kvu else "-no-kvu")
            if ct != "f16":
                args += ["-ctk", ct, "-ctv", ct]
            if ub != 512:
                args += ["-b", str(ub), "-ub", str(ub)]
            kid = f"c{c}-np{np_}" + ("" if kvu is None else ("-kvu" if kvu else "-nokvu")) + f"-fa{fa}"
            kid += ("" if ct == "f16" else f"-{ct}") + ("" if ub == 512 else f"-ub{ub}")
            out.append((kid, args))
        if swa and c > 512:
            out.append(
                (
                    f"c{c}-np4-kvu-faon-swafull",
                    ["-c", str(c), "-np", "4", "-fa", "on", "-t", "1", "-kvu", "--swa-full"],
                )
            )
    return out


def _record_wide(env: Env, grid: str, name: str, path: Path, model: dict[str, Any], swa: bool) -> None:
    t0 = time.time()
    cases = [case_from_membreak(env, cid, path, args) for cid, args in wide_settings(swa)]
    write_fixture(grid, name, fixture_doc("membreak", model, cases), started=t0)


def grid_wide(env: Env, only: list[str] | None) -> None:
    for name in WIDE_SPARSE_MODELS:
        if only and name not in only:
            continue
        path, model = sparse_model(env, name)
        _record_wide(env, "wide", name, path, model, swa=name in SWA_MODELS)
    for name in WIDE_ARCH_MODELS:
        if only and name not in only:
            continue
        path = arch_model(env, name)
        doc = json.loads((FIXTURES / "archs" / f"{name}.json").read_text())
        swa = bool(doc["cases"][0].get("results", {}).get("swa_layers"))
        _record_wide(env, "widearchs", name, path, smoke_model(name, path), swa=swa)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RpcServers:
    def __init__(self, env: Env, n: int = 2) -> None:
        self.env = env
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ports: list[int] = []

    def __enter__(self) -> RpcServers:
        for _ in range(self.n):
            port = free_port()
            p = subprocess.Popen(
                [str(self.env.bin / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port)],
                env=self.env.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self.procs.append(p)
            self.ports.append(port)
        for port in self.ports:
            deadline = time.time() + 30
            while time.time() < deadline:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    time.sleep(0.2)
        return self

    @property
    def endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


PLACEMENT_MODELS = [
    "llama-3.1-8b",
    "qwen3-30b-a3b",
    "gemma-3-27b",
    "gpt-oss-20b",
    "qwen3-next-80b-a3b",
    "deepseek-v2-lite",
    "granite-4.0-h-tiny",
    "llama-4-scout-17b-16e",
]


def placement_settings(name: str, n_layer: int, moe: bool) -> list[tuple[str, list[str]]]:
    base = ["-c", "8192", "-np", "1", "-fa", "on"]
    out: list[tuple[str, list[str]]] = []
    for ngl in sorted({0, 1, n_layer // 2, n_layer, n_layer + 1}):
        out.append((f"ngl{ngl}", [*base, "-ngl", str(ngl)]))
    out.append(("ngl-all-ts1,1", [*base, "-ngl", "999", "-ts", "1,1"]))
    out.append(("ngl-all-ts3,1", [*base, "-ngl", "999", "-ts", "3,1"]))
    out.append((f"ngl{n_layer // 2}-ts3,1", [*base, "-ngl", str(n_layer // 2), "-ts", "3,1"]))
    out.append(("ngl-all-ts1,0", [*base, "-ngl", "999", "-ts", "1,0"]))
    out.append(("ngl-all-np4-kvu-c32768", ["-c", "32768", "-np", "4", "-kvu", "-fa", "on", "-ngl", "999"]))
    out.append(("ngl-all-fa-off", ["-c", "8192", "-np", "1", "-fa", "off", "-ngl", "999"]))
    if moe:
        out.append(("ngl-all-cmoe", [*base, "-ngl", "999", "-cmoe"]))
        for n in (1, n_layer // 2, n_layer):
            out.append((f"ngl-all-ncmoe{n}", [*base, "-ngl", "999", "-ncmoe", str(n)]))
        out.append(("ngl-all-ot-exps-cpu", [*base, "-ngl", "999", "-ot", r"\.ffn_(up|down|gate)_exps=CPU"]))
    else:
        out.append(("ngl-all-ot-ffn-cpu", [*base, "-ngl", "999", "-ot", r"\.ffn_(up|down|gate)\.=CPU"]))
    out.append(("ngl-all-nkvo", [*base, "-ngl", "999", "-nkvo"]))
    out.append(("ngl-all-sm-none-mg1", [*base, "-ngl", "999", "-sm", "none", "-mg", "1"]))
    out.append(("ngl-all-dev-rpc1", [*base, "-ngl", "999", "-dev", "RPC1"]))
    out.append(("ngl-all-ot-blk0-rpc1", [*base, "-ngl", "999", "-ot", r"blk\.0\.=RPC1_BUFT"]))
    return out


def grid_placement(env: Env, only: list[str] | None) -> None:
    with RpcServers(env, 2) as rpc:
        for name in PLACEMENT_MODELS:
            if only and name not in only:
                continue
            path, model = sparse_model(env, name)
            n_layer, moe = _layers_and_moe(name)
            cases = []
            t0 = time.time()
            for cid, args in placement_settings(name, n_layer, moe):
                args = [a.replace("RPC1_BUFT", f"RPC0[127.0.0.1:{rpc.ports[1]}]") for a in args]
                case = case_from_membreak(env, cid, path, ["--rpc", rpc.endpoints, *args])
                # the ports change from run to run: record them symbolically (P1, P2)
                text = json.dumps(case)
                for i, port in enumerate(rpc.ports):
                    text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:P{i + 1}")
                case = json.loads(text)
                case["settings"]["devices"] = "rpc:127.0.0.1:P1,127.0.0.1:P2"
                cases.append(case)
            write_fixture("placement", name, fixture_doc("membreak", model, cases), started=t0)


# grid i. standin (`--grids standin`): GPU-shaped devices without a GPU. membreak registers device-shaped stand-ins
# (standin/standin.cpp: ggml-cuda's buffer type, alignment, allocation sizes, supported and offloaded ops, pinned host
# buffers and events, no kernels) and llama.cpp's own scheduler and allocator size every buffer as on that device.
# Fixtures in standin/ (published-shape sparse models) and standinarchs/ (the architecture smoke models).
STANDIN_MODELS = [
    "llama-3.1-8b",
    "qwen3-30b-a3b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "deepseek-v3",
    "gemma-3-27b",
    "deepseek-v2-lite",
    "qwen3-next-80b-a3b",
    "granite-4.0-h-tiny",
    "llama-4-scout-17b-16e",
]
#: The devices of a case: one 24 GiB Ada card (compute capability 8.9) unless the case says otherwise.
CUDA_24 = "cuda:24GiB:cc=89"


def standin_settings(
    n_layer: int, moe: bool, recurrent: bool = False, mla: bool = False
) -> list[tuple[str, str, list[str]]]:
    """(id, device spec, args) of grid i: full offload over context, flash attention, -ub and cache types; partial
    -ngl; experts on the host (-ncmoe, -cmoe, -ot) at -ub 512 and 2048, with and without op offload; -nkvo (for a
    model with recurrent layers also without flash attention, at -ub 2048 and with two slots: the recurrent states
    copied in from host memory); two and four devices (pipeline parallelism, -ts); other compute capabilities and
    an RDNA3 card for the flash-attention kernels that copy a quantized cache to f16."""
    half = n_layer // 2
    two, four = ",".join([CUDA_24] * 2), ",".join([CUDA_24] * 4)
    out: list[tuple[str, str, list[str]]] = []

    def add(cid: str, spec: str, *args: str) -> None:
        out.append(
            (cid, spec, ["-ngl", "999", "-np", "1", *args] if "-ngl" not in args else ["-np", "1", *args])
        )

    for c in (4096, 32768):
        for fa in ("on", "off"):
            add(f"c{c}-fa{fa}", CUDA_24, "-c", str(c), "-fa", fa)
            add(f"c{c}-fa{fa}-ub2048", CUDA_24, "-c", str(c), "-fa", fa, "-b", "2048", "-ub", "2048")
        add(f"c{c}-faon-q8_0", CUDA_24, "-c", str(c), "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0")
        add(f"c{c}-faon-q4_0-ub2048", CUDA_24, "-c", str(c), "-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0",
            "-b", "2048", "-ub", "2048")  # fmt: skip
    out.append(
        ("c16384-np4-nokvu-faon", CUDA_24, ["-ngl", "999", "-c", "16384", "-np", "4", "-no-kvu", "-fa", "on"])
    )
    add("c8192-faon-nkvo", CUDA_24, "-c", "8192", "-fa", "on", "-nkvo")
    if recurrent:
        add("c8192-faoff-nkvo", CUDA_24, "-c", "8192", "-fa", "off", "-nkvo")
        add(
            "c8192-faon-nkvo-ub2048", CUDA_24, "-c", "8192", "-fa", "on", "-nkvo", "-b", "2048", "-ub", "2048"
        )
        out.append(
            ("c8192-np2-faon-nkvo", CUDA_24, ["-ngl", "999", "-np", "2", "-c", "8192", "-fa", "on", "-nkvo"])
        )
    for ngl in (0, half):
        add(f"c8192-faon-ngl{ngl}", CUDA_24, "-c", "8192", "-fa", "on", "-ngl", str(ngl))
        add(f"c8192-faon-ngl{ngl}-ub2048", CUDA_24, "-c", "8192", "-fa", "on", "-ngl", str(ngl), "-b", "2048",
            "-ub", "2048")  # fmt: skip
    add(
        f"c8192-faon-ngl{half}-noopoffload",
        CUDA_24,
        "-c",
        "8192",
        "-fa",
        "on",
        "-ngl",
        str(half),
        "--no-op-offload",
    )
    if moe:
        for ub in (512, 2048):
            for fa in ("on", "off"):
                add(
                    f"c8192-fa{fa}-cmoe-ub{ub}",
                    CUDA_24,
                    "-c",
                    "8192",
                    "-fa",
                    fa,
                    "-cmoe",
                    "-b",
                    str(ub),
                    "-ub",
                    str(ub),
                )
            add(f"c8192-faon-ncmoe{half}-ub{ub}", CUDA_24, "-c", "8192", "-fa", "on", "-ncmoe", str(half), "-b",
                str(ub), "-ub", str(ub))  # fmt: skip
            add(f"c32768-faon-q8_0-cmoe-ub{ub}", CUDA_24, "-c", "32768", "-fa", "on", "-ctk", "q8_0", "-ctv",
                "q8_0", "-cmoe", "-b", str(ub), "-ub", str(ub))  # fmt: skip
        add(
            "c8192-faon-ot-exps-cpu",
            CUDA_24,
            "-c",
            "8192",
            "-fa",
            "on",
            "-ot",
            r"\.ffn_(up|down|gate)_exps=CPU",
        )
        add("c8192-faon-cmoe-noopoffload", CUDA_24, "-c", "8192", "-fa", "on", "-cmoe", "--no-op-offload")
        add(f"2dev-c8192-faon-ncmoe{half}", two, "-c", "8192", "-fa", "on", "-ncmoe", str(half))
    else:
        add("c8192-faon-ot-ffn-cpu", CUDA_24, "-c", "8192", "-fa", "on", "-ot", r"\.ffn_(up|down|gate)\.=CPU")
    add("2dev-c8192-faon", two, "-c", "8192", "-fa", "on")
    add(
        "2dev-c8192-faon-ts3,1-ub2048",
        two,
        "-c",
        "8192",
        "-fa",
        "on",
        "-ts",
        "3,1",
        "-b",
        "2048",
        "-ub",
        "2048",
    )
    add("2dev-c8192-faon-sm-none", two, "-c", "8192", "-fa", "on", "-sm", "none")
    add(f"2dev-c8192-faon-ngl{half}", two, "-c", "8192", "-fa", "on", "-ngl", str(half))
    add("4dev-c32768-faon", four, "-c", "32768", "-fa", "on")
    for cc in ("70", "75", "86"):
        add(
            f"cc{cc}-c8192-faon-q8_0",
            f"cuda:24GiB:cc={cc}",
            "-c",
            "8192",
            "-fa",
            "on",
            "-ctk",
            "q8_0",
            "-ctv",
            "q8_0",
        )
    add("rocm-gfx1100-c8192-faon", "rocm:24GiB:arch=gfx1100", "-c", "8192", "-fa", "on")
    add("rocm-gfx1100-c8192-faon-q8_0", "rocm:24GiB:arch=gfx1100", "-c", "8192", "-fa", "on", "-ctk", "q8_0",
        "-ctv", "q8_0")  # fmt: skip
    if moe:
        add("rocm-gfx1100-c8192-faon-cmoe", "rocm:24GiB:arch=gfx1100", "-c", "8192", "-fa", "on", "-cmoe")
    # llama-server's own reserve (one output row, `--server-defaults`): the layer phase, not the logits, sets the
    # first GPU's buffer at a partial -ngl, where it runs the host layers' attention over copies of their cache
    for ngl in (0, half):
        for c in (4096, 32768):
            add(f"c{c}-faon-ngl{ngl}-server", CUDA_24, "--server-defaults", "-c", str(c), "-fa", "on", "-ngl",
                str(ngl))  # fmt: skip
    add(f"2dev-c32768-faon-ngl{half}-server", two, "--server-defaults", "-c", "32768", "-fa", "on", "-ngl",
        str(half))  # fmt: skip
    if mla:
        # -nkvo with MLA: the first GPU's attention over copies of the compressed cache (K the cache's view, V a
        # view of its first kv_lora_rank dims), with one output row and over two GPUs
        add("c32768-faon-nkvo-server", CUDA_24, "--server-defaults", "-c", "32768", "-fa", "on", "-nkvo")
        add(f"c32768-faon-ngl{half}-nkvo-server", CUDA_24, "--server-defaults", "-c", "32768", "-fa", "on", "-ngl",
            str(half), "-nkvo")  # fmt: skip
        add("2dev-c32768-faon-nkvo", two, "-c", "32768", "-fa", "on", "-nkvo")
        # the second host layer's K copy a query-matrix copy higher, its V copy above the mask
        add(
            "c131072-faon-ngl0-server", CUDA_24, "--server-defaults", "-c", "131072", "-fa", "on", "-ngl", "0"
        )
        # quantized caches: the f16 copies of both copied views in the attention's output
        add("c32768-faon-q8_0-ngl0-server", CUDA_24, "--server-defaults", "-c", "32768", "-fa", "on", "-ctk",
            "q8_0", "-ctv", "q8_0", "-ngl", "0")  # fmt: skip
        add("c131072-faon-q4_0-nkvo-server", CUDA_24, "--server-defaults", "-c", "131072", "-fa", "on", "-ctk",
            "q4_0", "-ctv", "q4_0", "-nkvo")  # fmt: skip
        # the GPU layers' FFN outputs around the mask at -ub 2048
        add("2dev-c32768-faon-nkvo-ub2048-server", two, "--server-defaults", "-c", "32768", "-fa", "on", "-nkvo",
            "-b", "2048", "-ub", "2048")  # fmt: skip
    if moe:
        # the experts in host memory as llama-server reserves them (24 GiB card, -ub 512 and 2048)
        for ub in (512, 2048):
            add(f"c32768-faon-cmoe-ub{ub}-server", CUDA_24, "--server-defaults", "-c", "32768", "-fa", "on",
                "-cmoe", "-b", str(ub), "-ub", str(ub))  # fmt: skip
    if mla:
        # a later layer's copies where the free blocks the first left decide (q8_0 caches; two sequences; a later
        # GPU at 131072 cells)
        add("c32768-faon-q8_0-nkvo-server", CUDA_24, "--server-defaults", "-c", "32768", "-fa", "on", "-ctk",
            "q8_0", "-ctv", "q8_0", "-nkvo")  # fmt: skip
        out.append(("c65536-np2-faon-nkvo-server", CUDA_24, ["-ngl", "999", "-np", "2", "--server-defaults", "-c",
                    "65536", "-fa", "on", "-nkvo"]))  # fmt: skip
        add("2dev-c131072-faon-nkvo-server", two, "--server-defaults", "-c", "131072", "-fa", "on", "-nkvo")
    return out


STANDIN_ARCH_SETTINGS: list[tuple[str, str, list[str]]] = [
    ("c512-np1", CUDA_24, ["-ngl", "999", "-c", "512", "-np", "1"]),
    ("c1024-np2-nokvu", CUDA_24, ["-ngl", "999", "-c", "1024", "-np", "2", "-no-kvu"]),
    ("c512-np1-faoff", CUDA_24, ["-ngl", "999", "-c", "512", "-np", "1", "-fa", "off"]),
    (
        "c2048-np1-faon-q8_0",
        CUDA_24,
        ["-ngl", "999", "-c", "2048", "-np", "1", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"],
    ),
    ("2dev-c1024-np1", ",".join([CUDA_24] * 2), ["-ngl", "999", "-c", "1024", "-np", "1"]),
]


def _standin_cases(
    env: Env, path: Path, settings: Sequence[tuple[str, str, list[str]]]
) -> list[dict[str, Any]]:
    return [
        case_from_membreak(env, cid, path, ["--standin", spec, "-t", "1", *args])
        for cid, spec, args in settings
    ]


def _layers_and_moe(name: str) -> tuple[int, bool]:
    """A sparse model's layer count and whether it has experts (its published configuration)."""
    cfg = sparse_models.CONFIGS[name]
    n_layer = cfg["num_hidden_layers"]
    assert isinstance(n_layer, int)
    return n_layer, any(k in cfg for k in ("num_experts", "num_local_experts", "n_routed_experts"))


def _recurrent(name: str) -> bool:
    """Whether a sparse model has recurrent layers (Mamba or a gated delta net; its published configuration)."""
    cfg = sparse_models.CONFIGS[name]
    return any(k in cfg for k in ("mamba_d_state", "linear_num_value_heads"))


def _mla(name: str) -> bool:
    """Whether a sparse model's attention is MLA (a compressed KV cache; its published configuration)."""
    return "kv_lora_rank" in sparse_models.CONFIGS[name]


def grid_standin(env: Env, only: list[str] | None) -> None:
    for name in STANDIN_MODELS:
        if only and name not in only:
            continue
        path, model = sparse_model(env, name)
        n_layer, moe = _layers_and_moe(name)
        t0 = time.time()
        cases = _standin_cases(env, path, standin_settings(n_layer, moe, _recurrent(name), _mla(name)))
        write_fixture("standin", name, fixture_doc("membreak", model, cases), started=t0)
    for doc_path in sorted((FIXTURES / "archs").glob("*.json")):
        name = doc_path.stem
        if only and name not in only:
            continue
        path = arch_model(env, name)
        t0 = time.time()
        cases = _standin_cases(env, path, STANDIN_ARCH_SETTINGS)
        write_fixture(
            "standinarchs", name, fixture_doc("membreak", smoke_model(name, path), cases), started=t0
        )


# grid l. finer (`--grids finer`): placements finer than whole layers on the CUDA stand-in, for the planner's finer
# options (fitplan.core.plan.space): the first offloaded layer of a dense model with its FFN tensors in host memory,
# as common/fit.cpp's LAYER_FRACTION_ATTN / _UP / _GATE patterns name them; the KV cache in host memory (-nkvo) with
# every layer or half of them on the GPU. Fixtures in finer/, checked by tests/estimate/test_finer_recorded.py.
FINER_MODELS = ["llama-3.1-8b", "gemma-3-27b"]
#: common/fit.cpp:get_overflow_pattern, what stays on the GPU of the partial layer: attention only, + ffn_up,
#: + ffn_gate (ffn_down, the largest, goes first)
FINER_FRACTIONS = {
    "attn": r"blk\.{il}\.ffn_(gate|up|gate_up|down).*",
    "up": r"blk\.{il}\.ffn_(gate|gate_up|down).*",
    "gate": r"blk\.{il}\.ffn_down.*",
}


def finer_settings(n_layer: int) -> list[tuple[str, str, list[str]]]:
    """(id, device spec, args) of grid l: -ngl N+1 with the FFN tensors of layer L-N on the CPU (the partial layer
    after N whole ones, output layer included) for N = 0 (the output layer only), L/2 and L (the first block), at
    -ub 512 and 2048; -nkvo at full offload (4096, 32768 cells, -ub 2048), at -ngl L/2 and with a partial layer;
    on two devices split in layers (-ts): the partial layer after L/2 whole ones, -nkvo at full offload and at L/2;
    the cache in host memory over the cells (-nkvo at 4096 to 131072 cells, two devices without flash attention and
    with a q8_0 cache, -ngl L/2 at 32768 cells with and without -nkvo)."""
    half = n_layer // 2
    out: list[tuple[str, str, list[str]]] = []
    base = ["-np", "1", "-c", "8192", "-fa", "on"]
    for n_whole in (half, n_layer):
        il = n_layer - n_whole
        for frac, pattern in FINER_FRACTIONS.items():
            ot = ["-ot", pattern.format(il=il) + "=CPU"]
            ngl = ["-ngl", str(n_whole + 1)]
            out.append((f"ngl{n_whole + 1}-part{il}-{frac}", CUDA_24, [*ngl, *base, *ot]))
            if frac != "up":
                ub = ["-b", "2048", "-ub", "2048"]
                out.append((f"ngl{n_whole + 1}-part{il}-{frac}-ub2048", CUDA_24, [*ngl, *base, *ot, *ub]))
    for ub in (512, 2048):
        out.append((f"ngl{half}-ub{ub}", CUDA_24, ["-ngl", str(half), *base, "-b", str(ub), "-ub", str(ub)]))
    for c in (4096, 32768):
        out.append((f"nkvo-c{c}", CUDA_24, ["-ngl", "999", "-np", "1", "-c", str(c), "-fa", "on", "-nkvo"]))
    out.append(("nkvo-c8192-ub2048", CUDA_24, ["-ngl", "999", *base, "-nkvo", "-b", "2048", "-ub", "2048"]))
    out.append(("nkvo-c8192-q8_0", CUDA_24, ["-ngl", "999", *base, "-nkvo", "-ctk", "q8_0", "-ctv", "q8_0"]))
    out.append(
        ("nkvo-c8192-faoff", CUDA_24, ["-ngl", "999", "-np", "1", "-c", "8192", "-fa", "off", "-nkvo"])
    )
    out.append((f"nkvo-ngl{half}", CUDA_24, ["-ngl", str(half), *base, "-nkvo"]))
    gate = FINER_FRACTIONS["gate"].format(il=n_layer - half) + "=CPU"
    out.append((f"nkvo-ngl{half + 1}-part{n_layer - half}-gate", CUDA_24, ["-ngl", str(half + 1), *base, "-nkvo",
                "-ot", gate]))  # fmt: skip
    # two devices with a layer split (-ts in layers, as the planner writes it for a free split): a partial layer at
    # the first offloaded index (on the first device), and -nkvo with the cache of each device's layers on the host
    two = ",".join([CUDA_24] * 2)
    part = n_layer - half
    for frac in ("attn", "gate"):
        ot = ["-ot", FINER_FRACTIONS[frac].format(il=part) + "=CPU"]
        ts = ["-ts", f"{(half + 1) // 2},{half + 1 - (half + 1) // 2}"]
        out.append((f"2dev-ngl{half + 1}-part{part}-{frac}", two, ["-ngl", str(half + 1), *base, *ts, *ot]))
    ts = ["-ts", f"{n_layer // 2 + 1},{n_layer - n_layer // 2}"]
    out.append(("2dev-nkvo-c8192", two, ["-ngl", "999", *base, *ts, "-nkvo"]))
    out.append((f"2dev-nkvo-ngl{half}", two, ["-ngl", str(half), *base, "-ts", f"{half // 2},{half - half // 2}",
                "-nkvo"]))  # fmt: skip
    # the first GPU's flash attention over a cache in host memory (the K/V views and the mask copied in at each
    # layer's split, `PlanBuilder._host_cache_attention`): over the cells, without flash attention, with a quantized
    # cache, host layers (-ngl L/2) with their cache on the host, and one device past the logits (65536, 131072)
    big = ["-np", "1", "-c", "32768", "-fa", "on"]
    for c in (4096, 32768):
        out.append(
            (f"2dev-nkvo-c{c}", two, ["-ngl", "999", "-np", "1", "-c", str(c), "-fa", "on", *ts, "-nkvo"])
        )
    out.append(
        ("2dev-nkvo-c8192-faoff", two, ["-ngl", "999", "-np", "1", "-c", "8192", "-fa", "off", *ts, "-nkvo"])
    )
    out.append(
        ("2dev-nkvo-c8192-q8_0", two, ["-ngl", "999", *base, *ts, "-nkvo", "-ctk", "q8_0", "-ctv", "q8_0"])
    )
    half_ts = ["-ts", f"{half // 2},{half - half // 2}"]
    out.append((f"2dev-ngl{half}-c32768", two, ["-ngl", str(half), *big, *half_ts]))
    out.append((f"2dev-nkvo-ngl{half}-c32768", two, ["-ngl", str(half), *big, *half_ts, "-nkvo"]))
    for c in (65536, 131072):
        out.append((f"nkvo-c{c}", CUDA_24, ["-ngl", "999", "-np", "1", "-c", str(c), "-fa", "on", "-nkvo"]))
    return out


def grid_finer(env: Env, only: list[str] | None) -> None:
    for name in FINER_MODELS:
        if only and name not in only:
            continue
        path, model = sparse_model(env, name)
        n_layer, _ = _layers_and_moe(name)
        t0 = time.time()
        cases = _standin_cases(env, path, finer_settings(n_layer))
        write_fixture("finer", name, fixture_doc("membreak", model, cases), started=t0)


# grid j. standin_vulkan / standin_metal (`--grids standin_vulkan,standin_metal`): the same published-shape models on
# Vulkan- and Metal-shaped stand-ins (standin.cpp: ggml-vulkan's 1 GiB buffers, storage-range limit and pinned
# Vulkan_Host buffer; ggml-metal's 32-byte alignment, its flash-attention and MUL_MAT_ID allocation extras and no
# host buffer). A small grid: full offload at 4096 / 32768 cells with flash attention on and off at -ub 512 and 2048,
# a q8_0 cache, half the layers, the experts (or the FFNs) in host memory; two Vulkan devices; Metal at 131072 cells.
STANDIN_BACKEND_MODELS = [
    "llama-3.1-8b",
    "qwen3-30b-a3b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "deepseek-v3",
    "gemma-3-27b",
]
#: Vulkan only: DeepSeek-V2-Lite, an absorbed-MLA model whose logits at `-ub 4096` (1600 MiB) are larger than a
#: chunk, next to its layer phase over chunks (`c4096-faon-ub4096`).
STANDIN_VULKAN_EXTRA_MODELS = ["deepseek-v2-lite"]
#: One 16 GiB Vulkan card with the stand-in's default limits (64-byte offsets, 4 GiB allocations and storage range).
VULKAN_16 = "vulkan:16GiB"
#: An Apple Silicon GPU with a 64 GiB working set.
METAL_64 = "metal:64GiB"


def standin_backend_settings(
    spec: str, n_layer: int, moe: bool, wide_ub: bool = False
) -> list[tuple[str, str, list[str]]]:
    """(id, device spec, args) of grid j for one device kind (`spec`: VULKAN_16 or METAL_64); `wide_ub`: also
    `-ub 4096` at 4096 cells with flash attention (`STANDIN_VULKAN_EXTRA_MODELS`)."""
    half = n_layer // 2
    out: list[tuple[str, str, list[str]]] = []

    def add(cid: str, dev: str, *args: str) -> None:
        base = ["-np", "1"] if "-ngl" in args else ["-ngl", "999", "-np", "1"]
        out.append((cid, dev, [*base, *args]))

    for c in (4096, 32768):
        for fa in ("on", "off"):
            for ub in (512, 2048):
                add(f"c{c}-fa{fa}-ub{ub}", spec, "-c", str(c), "-fa", fa, "-b", str(ub), "-ub", str(ub))
    if wide_ub:
        add("c4096-faon-ub4096", spec, "-c", "4096", "-fa", "on", "-b", "4096", "-ub", "4096")
    add("c32768-faon-q8_0", spec, "-c", "32768", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0")
    add(f"c8192-faon-ngl{half}", spec, "-c", "8192", "-fa", "on", "-ngl", str(half))
    for ub in (512, 2048):
        if moe:
            add(
                f"c8192-faon-cmoe-ub{ub}",
                spec,
                "-c",
                "8192",
                "-fa",
                "on",
                "-cmoe",
                "-b",
                str(ub),
                "-ub",
                str(ub),
            )
        else:
            add(f"c8192-faon-ot-ffn-cpu-ub{ub}", spec, "-c", "8192", "-fa", "on", "-ot", r"\.ffn_(up|down|gate)\.=CPU",
                "-b", str(ub), "-ub", str(ub))  # fmt: skip
    if spec.startswith("vulkan"):
        two = ",".join([spec] * 2)
        add("2dev-c8192-faon", two, "-c", "8192", "-fa", "on")
        add(
            "2dev-c8192-faon-ts3,1-ub2048",
            two,
            "-c",
            "8192",
            "-fa",
            "on",
            "-ts",
            "3,1",
            "-b",
            "2048",
            "-ub",
            "2048",
        )
        # llama-server's own reserve (one output row per sequence) over the same split
        add(
            "2dev-c8192-faon-ts3,1-ub2048-server",
            two,
            "--server-defaults",
            "-c",
            "8192",
            "-fa",
            "on",
            "-ts",
            "3,1",
            "-b",
            "2048",
            "-ub",
            "2048",
        )
        # 64-bit shader indexing lifts the storage-range limit (the 4 GiB buffer limit stays)
        add(
            "idx64-c32768-faoff-ub2048",
            spec + ":idx64=1",
            "-c",
            "32768",
            "-fa",
            "off",
            "-b",
            "2048",
            "-ub",
            "2048",
        )
    else:
        add("c131072-faon", spec, "-c", "131072", "-fa", "on")
    return out


def standin_grid_models(grid: str) -> list[str]:
    """The models of a stand-in grid of grid j."""
    return STANDIN_BACKEND_MODELS + (STANDIN_VULKAN_EXTRA_MODELS if grid == "standin_vulkan" else [])


def _grid_standin_backend(env: Env, only: list[str] | None, grid: str, spec: str) -> None:
    for name in standin_grid_models(grid):
        if only and name not in only:
            continue
        path, model = sparse_model(env, name)
        n_layer, moe = _layers_and_moe(name)
        t0 = time.time()
        wide = name in STANDIN_VULKAN_EXTRA_MODELS
        cases = _standin_cases(env, path, standin_backend_settings(spec, n_layer, moe, wide))
        write_fixture(grid, name, fixture_doc("membreak", model, cases), started=t0)


def grid_standin_vulkan(env: Env, only: list[str] | None) -> None:
    _grid_standin_backend(env, only, "standin_vulkan", VULKAN_16)


def grid_standin_metal(env: Env, only: list[str] | None) -> None:
    _grid_standin_backend(env, only, "standin_metal", METAL_64)


# ------------------------------------------------------------------------------------------------ server grid

SERVER_DONE = re.compile(r"server is listening|main: model loaded|starting the main loop|all slots are idle")


def run_server(
    env: Env, model: Path, args: Sequence[str], timeout: float = 600.0
) -> tuple[list[str], list[str]]:
    port = free_port()
    argv = [
        str(env.bin / "llama-server"),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-lv",
        "4",
        "-t",
        "2",
        *list(args),
    ]
    p = subprocess.Popen(argv, env=env.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    deadline = time.time() + timeout
    assert p.stdout is not None
    try:
        for line in p.stdout:
            lines.append(line.rstrip("\n"))
            if SERVER_DONE.search(line) or time.time() > deadline:
                break
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            rest, _ = p.communicate(timeout=20)
            lines.extend(rest.splitlines())
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
    return argv, lines


RE_SRV_PREFIX = re.compile(r"^\S+ [A-Z] ")  # common log prefix "0.00.123.456 I "


def case_from_server(env: Env, case_id: str, model: Path, args: Sequence[str]) -> dict[str, Any]:
    argv, raw = run_server(env, model, args)
    return _server_case_from_lines(env, case_id, argv, raw, args)


def _server_case_from_lines(
    env: Env, case_id: str, argv: list[str], raw: list[str], args: Sequence[str]
) -> dict[str, Any]:
    lines = [RE_SRV_PREFIX.sub("", ln) for ln in raw]
    parsed = parse_log(lines)
    clip: list[dict[str, Any]] = []
    breakdown: list[dict[str, Any]] = []
    for ln in lines:
        if m := RE_CLIP_MODEL.match(ln):
            clip.append({"kind": "model", "buffer_type": None, "mib": float(m.group(1))})
        elif m := RE_CLIP_COMPUTE.match(ln):
            clip.append({"kind": "compute", "buffer_type": m.group(1), "mib": float(m.group(2))})
        elif m := RE_BREAKDOWN.match(ln):
            breakdown.append(
                {"row": m.group(1), "values_mib": [int(x) for x in re.findall(r"\d+", m.group(2))]}
            )
    cp = parsed["ctx_params"]
    resolved = {
        k: cp[k]
        for k in (
            "n_ctx",
            "n_ctx_seq",
            "n_seq_max",
            "n_batch",
            "n_ubatch",
            "n_outputs_max",
            "n_outputs_max_per_seq",
            "kv_unified",
            "flash_attn",
            "n_rs_seq",
        )
        if k in cp
    }
    if "flash_attn_resolved" in parsed:
        resolved["flash_attn_resolved"] = parsed["flash_attn_resolved"]
    rec_args = [x.replace(str(env.work), "$MODELS") for x in args]
    ok = bool(parsed["log_buffers"])
    results = {
        "buffers_mib": parsed["log_buffers"],
        "kv": parsed["kv"],
        "rs": parsed["rs"],
        "output_bytes": None,
        "output_mib": parsed["output"][0]["mib"] if parsed["output"] else None,
        "mmproj_buffers_mib": clip,
        "breakdown_mib": breakdown,
        "worst_case": parsed.get("worst_case"),
        "resolved": resolved,
    }
    for key in ("lora_buffers", "graphs", "per_slot_n_ctx"):
        if key in parsed:
            results[key] = parsed[key]
    case: dict[str, Any] = {
        "id": case_id,
        "command": _display_argv(argv, env),
        "settings": settings_from(rec_args, "-np" not in args, resolved),
        "results": results,
    }
    case["command"] = [
        x if not x.isdigit() or i == 0 or case["command"][i - 1] != "--port" else "PORT"
        for i, x in enumerate(case["command"])
    ]
    if not ok:
        case["error"] = "no buffer lines in the server log: " + " | ".join(raw[-3:])
    return case


# (text model, mmproj or None, case id, extra args). -nr (no CPU repacking) and mmap keep the real allocations small;
# --no-warmup is left out where an mmproj is loaded, since clip reserves its compute buffer during the warmup.
SERVER_CASES: list[tuple[str, str | None, str, list[str]]] = [
    ("llama-3.1-8b", None, "server-defaults-c4096", ["-c", "4096", "-fit", "off", "-nr", "--no-warmup"]),
    ("llama-3.1-8b", None, "server-defaults-c16384", ["-c", "16384", "-fit", "off", "-nr", "--no-warmup"]),
    ("llama-3.1-8b", None, "np1-c4096", ["-c", "4096", "-np", "1", "-fit", "off", "-nr", "--no-warmup"]),
    (
        "llama-3.1-8b",
        None,
        "np4-nokvu-c8192",
        ["-c", "8192", "-np", "4", "-no-kvu", "-fit", "off", "-nr", "--no-warmup"],
    ),
    (
        "llama-3.1-8b",
        "mmproj-llava-llama-3-8b",
        "mmproj-server-defaults-c4096",
        ["-c", "4096", "-fit", "off", "-nr"],
    ),
    (
        "granite-4.0-h-tiny",
        None,
        "server-defaults-c4096",
        ["-c", "4096", "-fit", "off", "-nr", "--no-warmup"],
    ),
    (
        "qwen2.5-vl-7b",
        "mmproj-qwen2.5-vl-7b",
        "mmproj-server-defaults-c4096",
        ["-c", "4096", "-fit", "off", "-nr"],
    ),
    (
        "gemma-3-27b",
        "mmproj-gemma-3-27b",
        "mmproj-server-defaults-c4096",
        ["-c", "4096", "-fit", "off", "-nr"],
    ),
]


def grid_server(env: Env, only: list[str] | None) -> None:
    by_model: dict[str, list[tuple[str | None, str, list[str]]]] = {}
    for name, mmproj, cid, args in SERVER_CASES:
        by_model.setdefault(name, []).append((mmproj, cid, args))
    for name, cases_spec in by_model.items():
        if only and name not in only:
            continue
        path, model = sparse_model(env, name, vocab="spm")
        cases = []
        for mmproj, cid, args in cases_spec:
            extra = list(args)
            if mmproj:
                mm_path = sparse_models.generate(mmproj, env.work / "sparse")
                hdr = sparse_models.generate(mmproj, MODELS_DIR / "sparse", header_only=True)
                extra = ["--mmproj", str(mm_path), *extra]
            t0 = time.time()
            case = case_from_server(env, cid, path, extra)
            if mmproj:
                case["mmproj"] = {
                    "generator": "tools/groundtruth/sparse_models.py",
                    "name": mmproj,
                    "config": sparse_models.MMPROJ_CONFIGS[mmproj],
                    "file_bytes": mm_path.stat().st_size,
                    "header": os.path.relpath(hdr, FIXTURES),
                }
            cases.append(case)
            print("server", name, cid, "error" not in case, f"{time.time() - t0:.1f}s", flush=True)
        write_fixture("server", name, fixture_doc("llama-server", model, cases))


# grid k. standin_server (`--grids standin_server`): llama-server itself on a CUDA-shaped stand-in, loaded as a
# dynamic ggml backend (standin/standin_dl.cpp, BUILD/bin/libggml-standin.so through GGML_BACKEND_PATH, the devices in
# FITPLAN_STANDIN): the projector on the GPU (clip's warm-up reserve) and a draft model, whose buffers llama-server
# allocates beside the target's. The server's log gives every buffer in MiB (two decimals); the stand-in prints every
# device buffer it allocated in bytes at exit ("standin: alloc CUDA0 <bytes>"). The text model's warm-up decode fails
# on the stand-in (it cannot compute) and the server goes on; a draft model is then reported unsupported after its
# buffers were allocated and logged.
STANDIN_SERVER_SPEC = "cuda:24GiB"
#: (text model, mmproj or None, draft or None, case id, extra args)
STANDIN_SERVER_CASES: list[tuple[str, str | None, str | None, str, list[str]]] = [
    ("llama-3.1-8b", "mmproj-llava-llama-3-8b", None, "mmproj-c4096", ["-c", "4096"]),
    (
        "llama-3.1-8b",
        "mmproj-llava-llama-3-8b",
        None,
        "mmproj-cpu-c4096",
        ["-c", "4096", "--no-mmproj-offload"],
    ),
    ("llama-3.1-8b", "mmproj-llava-llama-3-8b", None, "mmproj-faoff-c4096", ["-c", "4096", "-fa", "off"]),
    ("gemma-3-27b", "mmproj-gemma-3-27b", None, "mmproj-c4096", ["-c", "4096"]),
    ("qwen2.5-vl-7b", "mmproj-qwen2.5-vl-7b", None, "mmproj-c4096", ["-c", "4096"]),
    (
        "qwen3-30b-a3b",
        None,
        "qwen3-8b",
        "draft-np1-c4096",
        ["-c", "4096", "-np", "1", "-fa", "on", "--no-warmup"],
    ),
    (
        "qwen3-30b-a3b",
        None,
        "qwen3-8b",
        "draft-ngld0-np1-c4096",
        ["-c", "4096", "-np", "1", "-fa", "on", "--no-warmup", "-ngld", "0"],
    ),
    # the same launch without the draft: what dropping it frees (the planner's "without the draft model")
    (
        "qwen3-30b-a3b",
        None,
        None,
        "nodraft-np1-c4096",
        ["-c", "4096", "-np", "1", "-fa", "on", "--no-warmup"],
    ),
]
RE_STANDIN_ALLOC = re.compile(r"^standin: alloc (\S+) (\d+)$")
DRAFT_START = "loading draft model"


def _standin_server_case(
    env: Env, cid: str, path: Path, mmproj: str | None, draft: str | None, args: list[str]
) -> dict[str, Any]:
    extra = ["-dev", "CUDA0", "-ngl", "999", "-fit", "off", "-nr", *args]
    info: dict[str, Any] = {}
    if mmproj:
        mm_path = sparse_models.generate(mmproj, env.work / "sparse")
        hdr = sparse_models.generate(mmproj, MODELS_DIR / "sparse", header_only=True)
        extra = ["--mmproj", str(mm_path), *extra]
        info["mmproj"] = {
            "generator": "tools/groundtruth/sparse_models.py",
            "name": mmproj,
            "config": sparse_models.MMPROJ_CONFIGS[mmproj],
            "file_bytes": mm_path.stat().st_size,
            "header": os.path.relpath(hdr, FIXTURES),
        }
    if draft:
        d_path, d_model = sparse_model(env, draft, vocab="spm")
        extra = ["-md", str(d_path), "-devd", "CUDA0", *extra]
        if "-ngld" not in extra:
            extra += ["-ngld", "999"]
        info["draft"] = d_model
    dl = Env(env.build, env.work, env.membreak)
    dl.env["GGML_BACKEND_PATH"] = str(env.bin / "libggml-standin.so")
    dl.env["FITPLAN_STANDIN"] = STANDIN_SERVER_SPEC
    argv, raw = run_server(dl, path, extra)
    allocs = [
        {"buffer_type": m.group(1), "bytes": int(m.group(2))}
        for ln in raw
        if (m := RE_STANDIN_ALLOC.match(ln))
    ]
    cut = next((i for i, ln in enumerate(raw) if DRAFT_START in ln), len(raw))
    case = _server_case_from_lines(env, cid, argv, raw[:cut], extra)
    if draft:
        d_lines = [RE_SRV_PREFIX.sub("", ln) for ln in raw[cut:]]
        case["results"]["draft_buffers_mib"] = parse_log(d_lines)["log_buffers"]
    case["results"]["standin_alloc"] = allocs
    case["command"] = [
        "GGML_BACKEND_PATH=libggml-standin.so",
        f"FITPLAN_STANDIN={STANDIN_SERVER_SPEC}",
        *case["command"],
    ]
    case.update(info)
    return case


def grid_standin_server(env: Env, only: list[str] | None) -> None:
    if not (env.bin / "libggml-standin.so").exists():
        raise SystemExit(
            f"{env.bin / 'libggml-standin.so'} is missing: run tools/groundtruth/build_llamacpp.sh"
        )
    by_model: dict[str, list[tuple[str | None, str | None, str, list[str]]]] = {}
    for name, mmproj, draft, cid, args in STANDIN_SERVER_CASES:
        by_model.setdefault(name, []).append((mmproj, draft, cid, args))
    for name, specs in by_model.items():
        if only and name not in only:
            continue
        path, model = sparse_model(env, name, vocab="spm")
        cases = []
        for mmproj, draft, cid, args in specs:
            t0 = time.time()
            case = _standin_server_case(env, cid, path, mmproj, draft, args)
            cases.append(case)
            print("standin_server", name, cid, "error" not in case, f"{time.time() - t0:.1f}s", flush=True)
        write_fixture("standin_server", name, fixture_doc("llama-server", model, cases))


# ------------------------------------------------------------------------------------------------ fit-params grid
# llama-fit-params -fitp on prints, per device, the dry-run breakdown in MiB (integer division). The same settings
# as some membreak cases, so the tests can check membreak against the official tool.

FITP_SPARSE_IDS = ["c4096-np1-faon", "c32768-np1-faoff", "c32768-np4-nokvu-faon", "c4096-np1-faon-ub2048"]
FITP_PLACEMENT: dict[str, list[str]] = {
    "llama-3.1-8b": ["ngl16", "ngl-all-ts3,1", "ngl-all-ot-ffn-cpu"],
    "qwen3-30b-a3b": ["ngl24", "ngl-all-ncmoe24", "ngl-all-cmoe"],
    "gemma-3-27b": ["ngl31", "ngl-all-ts1,1"],
}
RE_FITP_ROW = re.compile(r"^(\S+) (\d+) (\d+) (\d+)\s*$")


def run_fit_params(env: Env, model: Path, args: Sequence[str]) -> tuple[list[str], list[dict[str, Any]], str]:
    # llama-fit-params has no -kvu/-no-kvu flag; its KV cache is never unified (the same as -no-kvu)
    assert "-kvu" not in args
    args = [a for a in args if a != "-no-kvu"]
    argv = [str(env.bin / "llama-fit-params"), "-m", str(model), *args, "-fitp", "on"]
    p = subprocess.run(argv, capture_output=True, text=True, env=env.env, timeout=300, check=False)
    rows = []
    for ln in p.stdout.splitlines():
        if m := RE_FITP_ROW.match(ln):
            rows.append(
                {
                    "device": m.group(1),
                    "model": int(m.group(2)),
                    "context": int(m.group(3)),
                    "compute": int(m.group(4)),
                }
            )
    err = "" if p.returncode == 0 and rows else (p.stderr.strip().splitlines() or ["failed"])[-1]
    return argv, rows, err


def _fitp_case(
    env: Env, grid: str, name: str, cid: str, path: Path, args: list[str], rpc: RpcServers | None
) -> dict[str, Any]:
    argv, rows, err = run_fit_params(env, path, args)
    case: dict[str, Any] = {
        "id": f"{grid}-{cid}",
        "command": _display_argv(argv, env),
        "settings": settings_from([x.replace(str(env.work), "$MODELS") for x in args], False, {}),
        "membreak_case": f"{grid}/{name}#{cid}",
    }
    if err:
        case["error"] = err
    else:
        case["results"] = {"rows_mib": rows}
    if rpc is not None:
        text = json.dumps(case)
        for i, port in enumerate(rpc.ports):
            text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:P{i + 1}")
        case = json.loads(text)
        case["settings"]["devices"] = "rpc:127.0.0.1:P1,127.0.0.1:P2"
    return case


def grid_fitparams(env: Env, only: list[str] | None) -> None:
    per_model: dict[str, list[dict[str, Any]]] = {}
    models: dict[str, tuple[Path, dict[str, Any]]] = {}
    for name in sparse_models.BUILDERS:
        if only and name not in only:
            continue
        models[name] = sparse_model(env, name)
        ctx_train = sparse_models.CONFIGS[name]["max_position_embeddings"]
        assert isinstance(ctx_train, int)
        settings = {cid: args for cid, args, _sd in sparse_settings(name, ctx_train)}
        for cid in FITP_SPARSE_IDS:
            per_model.setdefault(name, []).append(
                _fitp_case(env, "sparse", name, cid, models[name][0], settings[cid], None)
            )
    with RpcServers(env, 2) as rpc:
        for name, ids in FITP_PLACEMENT.items():
            if only and name not in only:
                continue
            cfg = sparse_models.CONFIGS[name]
            n_layer = cfg["num_hidden_layers"]
            assert isinstance(n_layer, int)
            moe = any(k in cfg for k in ("num_experts", "num_local_experts", "n_routed_experts"))
            settings = dict(placement_settings(name, n_layer, moe))
            for cid in ids:
                args = ["--rpc", rpc.endpoints, *settings[cid]]
                per_model.setdefault(name, []).append(
                    _fitp_case(env, "placement", name, cid, models[name][0], args, rpc)
                )
    for name, cases in per_model.items():
        write_fixture("fitparams", name, fixture_doc("llama-fit-params", models[name][1], cases))


# ------------------------------------------------------------------------------------------------ grid j: terms

TERMS_MODEL = "llama-3.1-8b"
#: (file name, rank, targets, type) of the adapters make_lora.py writes for the terms grid
TERMS_LORAS: dict[str, tuple[int, tuple[str, ...], str]] = {
    "lora-r16-attn-f32": (16, ("attn_q", "attn_k", "attn_v", "attn_output"), "f32"),
    "lora-r64-all-f16": (
        64,
        ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"),
        "f16",
    ),
}
_SRV = ["-c", "4096", "-np", "1", "-fit", "off"]
#: (case id, arguments); LORA:<name> is the adapter's path, RPC the endpoint of one rpc-server
TERMS_SERVER_CASES: list[tuple[str, list[str]]] = [
    ("np1-c4096-nr", [*_SRV, "-nr"]),
    ("np1-c4096-nr-lora-r16-attn-f32", [*_SRV, "-nr", "--lora", "LORA:lora-r16-attn-f32"]),
    ("np1-c4096-lora-r16-attn-f32", [*_SRV, "--lora", "LORA:lora-r16-attn-f32"]),
    ("np1-c4096-nr-lora-r64-all-f16", [*_SRV, "-nr", "--lora-scaled", "LORA:lora-r64-all-f16:0.5"]),
    (
        "np1-c4096-nr-lora-both",
        [*_SRV, "-nr", "--lora", "LORA:lora-r16-attn-f32,LORA:lora-r64-all-f16"],
    ),
    (
        "np1-c4096-nr-ngl16-rpc-lora-r16-attn-f32",
        [*_SRV, "-nr", "--rpc", "RPC", "-ngl", "16", "--lora", "LORA:lora-r16-attn-f32"],
    ),
    ("np4-kvups2048-nr", ["-np", "4", "--kv-unified-per-slot", "2048", "-fit", "off", "-nr", "--no-warmup"]),
    (
        "np4-c4096-kvups2048-nr",
        ["-np", "4", "-c", "4096", "--kv-unified-per-slot", "2048", "-fit", "off", "-nr", "--no-warmup"],
    ),
]
#: membreak dry runs: YaRN beside the same context without it
TERMS_YARN_CASES: list[tuple[str, list[str]]] = [
    ("c65536", ["-c", "65536", "-np", "1", "-fa", "on"]),
    (
        "c65536-yarn4-orig16384",
        [
            "-c",
            "65536",
            "-np",
            "1",
            "-fa",
            "on",
            "--rope-scaling",
            "yarn",
            "--rope-scale",
            "4",
            "--yarn-orig-ctx",
            "16384",
        ],
    ),
    ("c262144", ["-c", "262144", "-np", "1", "-fa", "on"]),
    (
        "c262144-yarn4",
        [
            "-c",
            "262144",
            "-np",
            "1",
            "-fa",
            "on",
            "--rope-scaling",
            "yarn",
            "--rope-scale",
            "4",
            "--yarn-orig-ctx",
            "65536",
        ],
    ),
    (
        "c262144-yarn2-freq",
        ["-c", "262144", "-np", "1", "-fa", "on", "--rope-scaling", "yarn", "--rope-freq-scale", "0.5"],
    ),
]


def _lora_files(env: Env, base: Path) -> dict[str, Path]:
    import make_lora

    out: dict[str, Path] = {}
    for name, (rank, targets, dtype) in TERMS_LORAS.items():
        path = env.work / f"{TERMS_MODEL}-{name}.gguf"
        if not path.exists():
            make_lora.write_lora(base, path, rank, targets, dtype, 32.0)
        out[name] = path
    return out


#: the projector's warm-up image with --image-max-tokens (Qwen2.5-VL: 46 x 46 merged tokens unless fewer are allowed)
TERMS_MMPROJ = ("qwen2.5-vl-7b", "mmproj-qwen2.5-vl-7b")
TERMS_MMPROJ_CASES: list[tuple[str, list[str]]] = [
    ("mmproj-np1-c4096", ["-c", "4096", "-np", "1", "-fit", "off", "-nr"]),
    (
        "mmproj-np1-c4096-imt1024",
        ["-c", "4096", "-np", "1", "-fit", "off", "-nr", "--image-max-tokens", "1024"],
    ),
    (
        "mmproj-np1-c4096-imt256",
        ["-c", "4096", "-np", "1", "-fit", "off", "-nr", "--image-max-tokens", "256"],
    ),
    (
        "mmproj-np1-c4096-imt8192",
        ["-c", "4096", "-np", "1", "-fit", "off", "-nr", "--image-max-tokens", "8192"],
    ),
]


def _terms_mmproj(env: Env) -> None:
    name, mmproj = TERMS_MMPROJ
    path, model = sparse_model(env, name, vocab="spm")
    mm_path = sparse_models.generate(mmproj, env.work / "sparse")
    hdr = sparse_models.generate(mmproj, MODELS_DIR / "sparse", header_only=True)
    cases: list[dict[str, Any]] = []
    for cid, args in TERMS_MMPROJ_CASES:
        t0 = time.time()
        case = case_from_server(env, cid, path, ["--mmproj", str(mm_path), *args])
        case["mmproj"] = {
            "generator": "tools/groundtruth/sparse_models.py",
            "name": mmproj,
            "config": sparse_models.MMPROJ_CONFIGS[mmproj],
            "file_bytes": mm_path.stat().st_size,
            "header": os.path.relpath(hdr, FIXTURES),
        }
        cases.append(case)
        print("terms", name, cid, "error" not in case, f"{time.time() - t0:.1f}s", flush=True)
    write_fixture("terms", f"{name}-mmproj", fixture_doc("llama-server", model, cases))


def grid_terms(env: Env, only: list[str] | None) -> None:
    if not only or TERMS_MMPROJ[0] in only:
        _terms_mmproj(env)
    if only and TERMS_MODEL not in only:
        return
    path, model = sparse_model(env, TERMS_MODEL, vocab="spm")
    loras = _lora_files(env, path)
    cases: list[dict[str, Any]] = []
    with RpcServers(env, 1) as rpc:
        for cid, args in TERMS_SERVER_CASES:
            real: list[str] = []
            for a in args:
                for name, p in loras.items():
                    a = a.replace(f"LORA:{name}", str(p))
                real.append(rpc.endpoints if a == "RPC" else a)
            t0 = time.time()
            case = case_from_server(env, cid, path, real)
            text = json.dumps(case).replace(rpc.endpoints, "127.0.0.1:P1")
            case = json.loads(text)
            case["loras"] = {
                name: {
                    "generator": "tools/groundtruth/make_lora.py",
                    "rank": r,
                    "targets": list(t),
                    "type": d,
                    "file_bytes": loras[name].stat().st_size,
                    "header": header_copy(loras[name], f"lora/{TERMS_MODEL}-{name}.header.gguf"),
                }
                for name, (r, t, d) in TERMS_LORAS.items()
                if any(f"LORA:{name}" in a for a in args)
            }
            cases.append(case)
            print("terms", cid, "error" not in case, f"{time.time() - t0:.1f}s", flush=True)
    write_fixture("terms", f"{TERMS_MODEL}-server", fixture_doc("llama-server", model, cases))
    yarn: list[dict[str, Any]] = []
    for cid, args in TERMS_YARN_CASES:
        case = case_from_membreak(env, cid, path, args)
        yarn.append(case)
    write_fixture("terms", f"{TERMS_MODEL}-yarn", fixture_doc("membreak", model, yarn))


#: the projector's compute buffer after one image of each size, beyond the warm-up image (mmproj_image.cpp): squares
#: of 4 to 64 merged tokens a side and wide images, flash attention auto (enabled on the CPU) with a 4 x 4 token
#: warm-up (--image-max-tokens 16), so that each image's own graph sets the buffer; off for a few sizes; and the
#: default warm-up (46 x 46) followed by an image of the projector's largest size.
def _mmproj_image_cases(unit: int) -> list[tuple[str, int, int, list[tuple[int, int]]]]:
    """The cases for a projector whose merged token is `unit` pixels a side (patch size x spatial merge)."""
    return [
        *[
            (f"fa-auto-{k}x{k}", -1, 16, [(unit * k, unit * k)])
            for k in (4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 46, 52, 56, 60, 64)
        ],
        ("fa-auto-128x32", -1, 16, [(unit * 128, unit * 32)]),
        ("fa-auto-72x52", -1, 16, [(unit * 72, unit * 52)]),
        ("fa-auto-64x128", -1, 16, [(unit * 64, unit * 128)]),
        *[(f"fa-off-{k}x{k}", 0, 16, [(unit * k, unit * k)]) for k in (16, 32, 40, 46, 52, 64)],
        ("fa-auto-default-warmup-then-64x64", -1, -1, [(unit * 16, unit * 16), (unit * 64, unit * 64)]),
    ]


#: the projectors recorded (`--only` picks among them) and the pixels a side of one merged token
MMPROJ_IMAGE_PROJECTORS: dict[str, int] = {
    "mmproj-qwen2.5-vl-7b": 28,
    "mmproj-qwen2-vl-7b": 28,
    "mmproj-qwen3-vl-8b": 32,
    "mmproj-mistral-small-3.1-24b": 28,
}


def _mmproj_image_tool(env: Env, src: Path) -> Path:
    """Build tools/groundtruth/mmproj_image.cpp against the build's libmtmd (the headers of `src`)."""
    out = env.work / "mmproj_image"
    inc = [f"-I{src / d}" for d in ("include", "ggml/include", "tools/mtmd")]
    subprocess.run(
        ["g++", "-O1", "-std=c++17", str(Path(__file__).with_name("mmproj_image.cpp")), *inc, f"-L{env.bin}",
         "-lmtmd", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{env.bin}", "-o", str(out)],
        check=True,
    )  # fmt: skip
    return out


def grid_mmproj_images(env: Env, only: list[str] | None) -> None:
    """The projector's compute after an image larger (or smaller) than the warm-up one, per image size."""
    src = os.environ.get("FITPLAN_LLAMA_SRC")
    if not src:
        print("mmproj_images needs FITPLAN_LLAMA_SRC (the llama.cpp source of the build)", file=sys.stderr)
        return
    tool = _mmproj_image_tool(env, Path(src))
    for mmproj, unit in MMPROJ_IMAGE_PROJECTORS.items():
        if only and mmproj not in only:
            continue
        _record_mmproj_images(env, tool, mmproj, _mmproj_image_cases(unit))


def _record_mmproj_images(
    env: Env, tool: Path, mmproj: str, spec: list[tuple[str, int, int, list[tuple[int, int]]]]
) -> None:
    mm_path = sparse_models.generate(mmproj, env.work / "sparse")
    hdr = sparse_models.generate(mmproj, MODELS_DIR / "sparse", header_only=True)
    cases: list[dict[str, Any]] = []
    for cid, fa, imt, sizes in spec:
        argv = [str(tool), str(mm_path), str(fa), str(imt), *[str(v) for wh in sizes for v in wh]]
        p = subprocess.run(argv, capture_output=True, text=True, env=env.env, timeout=600, check=False)
        images = [
            {"width": int(m.group(1)), "height": int(m.group(2)), "compute_bytes": int(m.group(4))}
            for m in re.finditer(r"^image (\d+) x (\d+) ok=(\d) compute_bytes (\d+)$", p.stdout, re.M)
        ]
        log = p.stdout + p.stderr
        warm = re.search(r"^reserve_compute_meta:\s+CPU compute buffer size =\s+([\d.]+) MiB", log, re.M)
        case: dict[str, Any] = {
            "id": cid,
            "command": [
                "mmproj_image",
                f"$MODELS/sparse/{mmproj}.gguf",
                str(fa),
                str(imt),
                *[str(v) for wh in sizes for v in wh],
            ],
            "settings": {"flash_attn": {-1: "auto", 0: "off", 1: "on"}[fa], "image_max_tokens": imt},
            "results": {"warmup_compute_mib": float(warm.group(1)) if warm else None, "images": images},
        }
        if p.returncode != 0 or len(images) != len(sizes):
            case["error"] = p.stderr[-2000:]
        cases.append(case)
        print("mmproj_images", cid, "error" not in case, flush=True)
    model = {
        "generator": "tools/groundtruth/sparse_models.py",
        "name": mmproj,
        "config": sparse_models.MMPROJ_CONFIGS[mmproj],
        "file_bytes": mm_path.stat().st_size,
        "header": os.path.relpath(hdr, FIXTURES),
    }
    write_fixture("terms", f"{mmproj}-images", fixture_doc("mmproj_image", model, cases))


GRIDS = {
    "archs": grid_archs,
    "sparse": grid_sparse,
    "placement": grid_placement,
    "server": grid_server,
    "fitparams": grid_fitparams,
    "quantkv": grid_quantkv,
    "wide": grid_wide,
    "newarchs": grid_newarchs,
    "standin": grid_standin,
    "standin_vulkan": grid_standin_vulkan,
    "standin_metal": grid_standin_metal,
    "standin_server": grid_standin_server,
    "terms": grid_terms,
    "mmproj_images": grid_mmproj_images,
    "finer": grid_finer,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, required=True, help="llama.cpp build dir (bin/ has the binaries)")
    ap.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/fitplan-groundtruth"),
        help="scratch dir for generated models (sparse files)",
    )
    ap.add_argument(
        "--membreak", type=Path, default=None, help="membreak binary (default: BUILD/bin/membreak)"
    )
    ap.add_argument(
        "--grids",
        default="archs,sparse,placement,server,fitparams",
        help="comma-separated grids: "
        + ",".join(GRIDS)
        + " (quantkv, wide, newarchs, the standin grids and terms are not in the default)",
    )
    ap.add_argument("--only", nargs="*", default=None, help="model names to (re)record")
    args = ap.parse_args(argv)
    env = Env(args.build.resolve(), args.work.resolve(), args.membreak.resolve() if args.membreak else None)
    env.work.mkdir(parents=True, exist_ok=True)
    if not env.membreak.exists():
        print(f"{env.membreak} is missing: run tools/groundtruth/build_llamacpp.sh first", file=sys.stderr)
        return 2
    for g in args.grids.split(","):
        GRIDS[g](env, args.only)
    shutil.rmtree(env.work / "tmp", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
