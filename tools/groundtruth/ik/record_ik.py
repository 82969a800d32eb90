"""Record what ik_llama.cpp allocates for its KV cache, as JSON fixtures in tests/fixtures/ik_llama/.

ik_llama.cpp comes from the `ik-llama-cpp-python==0.1.5` sdist on PyPI, which vendors the ik_llama.cpp tree
without git metadata. Its src/, common/, include/, ggml/src/ and ggml/include/ files are byte-identical (git blob
hashes) to ik_llama.cpp commit 55d3c05bf7b377deaa5dc84d255d9740a345a206 (2026-04-13, main) — see README.md.

Runs `ikkv` (tools/groundtruth/ik/ikkv.cpp: load the model, create a context, print the KV cache tensors in exact
bytes and the log, exit without evaluating anything) over a grid of -mla x -fa x cache types x context sizes on sparse
DeepSeek-V2-Lite files in both GGUF layouts (mainline MLA layout from tools/groundtruth/sparse_models.py, legacy
layout from ik_models.py), and writes one JSON file per model.

Usage (after tools/groundtruth/ik/build_ik.sh OUT_DIR):
    python tools/groundtruth/ik/record_ik.py --build OUT_DIR/build --work /tmp/ik-gt
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import sparse_models  # noqa: E402

sys.path.insert(0, str(HERE))
import ik_models  # noqa: E402

REPO = HERE.parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "ik_llama"
SCHEMA_VERSION = 1
IK_LLAMA = {
    "commit": "55d3c05bf7b377deaa5dc84d255d9740a345a206",
    "date": "2026-04-13",
    "source": "ik-llama-cpp-python==0.1.5 sdist (PyPI), vendor/ik_llama.cpp",
    "identified_by": "git blob hashes of every file under src/, common/, include/, ggml/src/, ggml/include/ "
    "present in both trees (750 files) equal those of this commit",
}
MARKER = "@@IKKV-JSON@@"

RE_KV_SELF = re.compile(
    r"KV self size += +([\d.]+) MiB, (?:K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB"
    r"|c\^KV \((\w+)\): +([\d.]+) MiB, kv\^T(?: \((\w+)\): +([\d.]+) MiB|: not used))"
)
RE_KV_BUF = re.compile(r"llama_kv_cache_init: +(\S+) KV buffer size = +([\d.]+) MiB")
RE_OUTPUT = re.compile(r": +(\S+) +output buffer size = +([\d.]+) MiB")
RE_COMPUTE = re.compile(r": +(\S+) compute buffer size = +([\d.]+) MiB")
RE_KEEP = re.compile(
    r"KV self size|KV buffer size|compute buffer size|output buffer size|mla_attn|flash_attn|"
    r"n_ctx|n_batch|n_ubatch|MLA|wkv_b|wk_b|Adjusted|attn_max_b|error|failed",
    re.IGNORECASE,
)


def parse_log(lines: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"kv_self": None, "kv_buffers_mib": [], "output_mib": [], "compute_buffers_mib": []}
    for line in lines:
        if m := RE_KV_SELF.search(line):
            g = m.groups()
            if g[1] is not None:
                out["kv_self"] = {
                    "total_mib": float(g[0]),
                    "k_type": g[1],
                    "k_mib": float(g[2]),
                    "v_type": g[3],
                    "v_mib": float(g[4]),
                }
            else:
                out["kv_self"] = {
                    "total_mib": float(g[0]),
                    "ckv_type": g[5],
                    "ckv_mib": float(g[6]),
                    "kvt_type": g[7],
                    "kvt_mib": float(g[8]) if g[8] is not None else None,
                }
        elif m := RE_KV_BUF.search(line):
            out["kv_buffers_mib"].append({"buffer_type": m.group(1), "mib": float(m.group(2))})
        elif m := RE_OUTPUT.search(line):
            out["output_mib"].append({"buffer_type": m.group(1), "mib": float(m.group(2))})
        elif m := RE_COMPUTE.search(line):
            out["compute_buffers_mib"].append({"buffer_type": m.group(1), "mib": float(m.group(2))})
    return out


def _summarize(tensors: list[dict[str, Any]]) -> dict[str, Any] | None:
    """All layers of a model here carry the same tensor: store one and the layer count (else every tensor)."""
    if not tensors:
        return None
    first = tensors[0]
    same = all(
        t["type"] == first["type"] and t["ne"] == first["ne"] and t["bytes"] == first["bytes"]
        for t in tensors
    )
    if not same:
        return {"layers": [t["layer"] for t in tensors], "tensors": tensors}
    return {
        "layers": [t["layer"] for t in tensors],
        "type": first["type"],
        "ne": first["ne"],
        "bytes_per_layer": first["bytes"],
    }


RE_FAILURE = re.compile(r"GGML_ASSERT|GGML_ABORT|what\(\)|error|failed", re.IGNORECASE)


def _failure(proc: subprocess.CompletedProcess[str]) -> str:
    """The lines that say why ik stopped (an abort prints a backtrace after them), with host paths cut."""
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines()]
    keep = [
        re.sub(r"\S*/vendor/ik_llama\.cpp/", "", ln)
        for ln in lines
        if RE_FAILURE.search(ln) and not ln.startswith("#")
    ]
    return f"exit {proc.returncode}: " + " | ".join(keep[-3:])


def run_case(ikkv: Path, model: Path, args: list[str], threads: int) -> dict[str, Any]:
    argv = [str(ikkv), "-m", str(model), "-t", str(threads), *args]
    t0 = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if MARKER not in proc.stdout:
        return {"error": _failure(proc)}
    pre, _, js = proc.stdout.partition(MARKER)
    data = json.loads(js)
    log: list[str] = data["log"]
    stdout_notes = [ln for ln in pre.splitlines() if ln.strip()]
    kept = [ln for ln in log + stdout_notes if RE_KEEP.search(ln)]
    if not data["ok"]:
        errs = [ln for ln in log + proc.stderr.splitlines() if re.search(r"error|failed", ln, re.IGNORECASE)]
        return {"error": " | ".join(errs) or f"ikkv exited with {proc.returncode}", "log": kept}
    parsed = parse_log(log)
    print(f"    {time.time() - t0:.1f} s", file=sys.stderr)
    return {
        "resolved": data["resolved"],
        "results": {
            "k_bytes": data["k_bytes"],
            "v_bytes": data["v_bytes"],
            "k": _summarize(data["k"]),
            "v": _summarize(data["v"]),
            "kv_buffers": data["kv_buffers"],
            **parsed,
        },
        "log": kept,
    }


def grid() -> list[tuple[str, dict[str, Any], list[str]]]:
    """(id, settings, argv) for every case. V must stay f16 without FA (ik: "V cache quantization requires
    flash_attn"), so FA-off cases quantize K only; FA-on cases quantize both."""
    cases = []
    for n_ctx in (4096, 32768):
        for mla in (0, 1, 2, 3):
            for fa in ("on", "off"):
                for ctk in ("f16", "q8_0", "q8_KV"):
                    ctv = ctk if fa == "on" else "f16"
                    cid = f"c{n_ctx}-mla{mla}-fa{fa}-k{ctk}-v{ctv}"
                    settings = {"n_ctx": n_ctx, "mla": mla, "flash_attn": fa, "type_k": ctk, "type_v": ctv}
                    argv = ["-c", str(n_ctx), "-mla", str(mla), "-fa", fa, "-ctk", ctk, "-ctv", ctv]
                    cases.append((cid, settings, argv))
    # -amb (attention max batch, MiB): the head chunking of the scores (-fa off) and of the decompressed MLA
    # product (-mla 2/3, -fa on); the compute buffer is what changes
    for mla, fa, ctk, amb in (
        (0, "off", "f16", 256),
        (1, "off", "f16", 256),
        (3, "off", "f16", 256),
        (3, "off", "f16", 100),
        (3, "on", "f16", 128),
        (3, "on", "q8_0", 256),
        (3, "on", "q8_KV", 256),
        (2, "on", "f16", 64),
    ):
        ctv = ctk if fa == "on" else "f16"
        cid = f"c32768-mla{mla}-fa{fa}-k{ctk}-v{ctv}-amb{amb}"
        settings = {"n_ctx": 32768, "mla": mla, "flash_attn": fa, "type_k": ctk, "type_v": ctv, "amb": amb}
        argv = ["-c", "32768", "-mla", str(mla), "-fa", fa, "-ctk", ctk, "-ctv", ctv, "-amb", str(amb)]
        cases.append((cid, settings, argv))
    # the refusal itself, once
    cases.append(
        (
            "c4096-mla0-faoff-kq8_0-vq8_0",
            {"n_ctx": 4096, "mla": 0, "flash_attn": "off", "type_k": "q8_0", "type_v": "q8_0"},
            ["-c", "4096", "-mla", "0", "-fa", "off", "-ctk", "q8_0", "-ctv", "q8_0"],
        )
    )
    return cases


def _models() -> dict[str, dict[str, Any]]:
    """name -> how to write it (full sparse file and header-only copy) and what to record about its origin."""
    dsv2 = "deepseek-v2-lite"
    return {
        dsv2: {
            "write": lambda d, header_only: sparse_models.generate(dsv2, d, header_only=header_only),
            "generator": "tools/groundtruth/sparse_models.py",
            "config": sparse_models.CONFIGS[dsv2],
            "layout": "mainline MLA GGUF: head_count_kv 1, key_length 576, value_length 512, key_length_mla 192, "
            "value_length_mla 128, attn_k_b/attn_v_b",
        },
        ik_models.LEGACY: {
            "write": lambda d, header_only: ik_models.generate(d, header_only=header_only),
            "generator": "tools/groundtruth/ik/ik_models.py",
            "config": sparse_models.CONFIGS[dsv2],
            "layout": "legacy GGUF: head_count_kv 16, key_length 192, value_length 128, no *_mla keys, attn_kv_b",
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, required=True, help="build dir of build_ik.sh (has bin/ikkv)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/ik-gt"), help="scratch dir for the sparse models")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", nargs="*", default=None, help="model names (default: all)")
    ap.add_argument("--only", nargs="*", default=None, help="case ids to run (default: all)")
    args = ap.parse_args(argv)

    ikkv = args.build / "bin" / "ikkv"
    args.work.mkdir(parents=True, exist_ok=True)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, info in _models().items():
        if args.models and name not in args.models:
            continue
        model = info["write"](args.work, False)
        header = info["write"](FIXTURES, True)
        out_path = FIXTURES / f"{name}.json"
        old: dict[str, Any] = json.loads(out_path.read_text()) if out_path.exists() else {}
        old_cases = {c["id"]: c for c in old.get("cases", [])}
        cases = []
        for cid, settings, cargv in grid():
            if args.only and cid not in args.only:
                if cid in old_cases:
                    cases.append(old_cases[cid])
                continue
            print(name, cid, file=sys.stderr)
            rec = run_case(ikkv, model, cargv, args.threads)
            cases.append(
                {
                    "id": cid,
                    "command": ["ikkv", "-m", f"$MODELS/{model.name}", "-t", str(args.threads), *cargv],
                    "settings": settings,
                    **rec,
                }
            )
        doc = {
            "schema": SCHEMA_VERSION,
            "ik_llama_cpp": IK_LLAMA,
            "tool": "ikkv",
            "model": {
                "generator": info["generator"],
                "name": name,
                "layout": info["layout"],
                "config": info["config"],
                "path_hint": model.name,
                "file_bytes": model.stat().st_size,
                "header": header.name,
                "header_vocab": "none",
            },
            "cases": cases,
        }
        out_path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {out_path} ({len(cases)} cases)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
