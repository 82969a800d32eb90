"""Header-read speed on the biggest real vocabulary headers (Gemma-4: 262k tokens + 515k merges; Qwen3.5: 152k).

Times, per file:
  cold    read_header in a fresh Python process (no cache; module import timed separately), best of N processes
  cache   cached_read_header from a warm on-disk cache (in process, and in a fresh process)
  gguf-py gguf.GGUFReader on the same file (what the project would use without its own reader)
  node    node-llama-cpp's readGgufFileInfo (if `node`/`npm` exist: installed with --ignore-scripts into a temp
          folder outside the repo; skipped with a message otherwise)
and checks that the fast reader's answer equals gguf-py's on each timed file (exits non-zero if not).

Goals: cold < 100 ms for the 262k header, >= 100x faster than gguf-py, >= 5x faster than node-llama-cpp, < 5 ms
from the cache.

    python bench/header_read.py [--runs 5] [--no-node] [FILE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAMES = ("ggml-vocab-gemma-4.gguf", "ggml-vocab-qwen35.gguf")
NODE_DIR = Path(tempfile.gettempdir()) / "fitplan-bench-node"

COLD_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
from fitplan.core.gguf.reader import read_header
t1 = time.perf_counter()
h = read_header(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "read_s": t2 - t1, "bytes": h.header_bytes_read}))
"""

CACHE_SCRIPT = r"""
import json, sys, time
from fitplan.core.gguf.header_cache import ProfileCache, cached_read_header
c = ProfileCache(sys.argv[2])
t0 = time.perf_counter()
h = cached_read_header(sys.argv[1], cache=c)
print(json.dumps({"read_s": time.perf_counter() - t0}))
"""

NODE_SCRIPT = r"""
import {readGgufFileInfo} from "node-llama-cpp";
const path = process.argv[2];
const times = [];
for (let i = 0; i < Number(process.argv[3]); i++) {
    const t0 = performance.now();
    const info = await readGgufFileInfo(path, {readTensorInfo: true});
    times.push((performance.now() - t0) / 1000);
    if (i === 0 && !info.metadata) throw new Error("no metadata");
}
console.log(JSON.stringify({first_s: times[0], best_s: Math.min(...times)}));
"""


def find_files(args: list[str]) -> list[Path]:
    if args:
        return [Path(a) for a in args]
    folders = [
        Path(os.environ.get("FITPLAN_REAL_GGUFS", REPO / ".cache" / "real-ggufs")),
        Path(os.environ.get("FITPLAN_LLAMA_SRC", "/nonexistent")) / "models",
    ]
    out = []
    for name in NAMES:
        for folder in folders:
            if (folder / name).is_file():
                out.append(folder / name)
                break
        else:
            print(f"{name}: not found in {[str(f) for f in folders]} (run tools/fetch_real_ggufs.py)")
    return out


def run_py(script: str, *argv: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "app"))
    out = subprocess.run(
        [sys.executable, "-c", script, *argv], check=True, capture_output=True, text=True, env=env
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def node_ready() -> str | None:
    """None when node-llama-cpp is importable from NODE_DIR (installing it if needed), else why not."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        return "node/npm not found"
    if not (NODE_DIR / "node_modules" / "node-llama-cpp").is_dir():
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        (NODE_DIR / "package.json").write_text('{"name": "fitplan-bench", "private": true, "type": "module"}')
        print(f"installing node-llama-cpp into {NODE_DIR} (npm --ignore-scripts) ...")
        r = subprocess.run(
            [npm, "install", "--ignore-scripts", "--no-audit", "--no-fund", "node-llama-cpp"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            return "npm install node-llama-cpp failed: " + r.stderr.strip().splitlines()[-1:][0]
    (NODE_DIR / "bench.mjs").write_text(NODE_SCRIPT)
    return None


def run_node(path: Path, runs: int) -> dict[str, float]:
    out = subprocess.run(
        ["node", "bench.mjs", str(path), str(runs)], cwd=NODE_DIR, check=True, capture_output=True, text=True
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def ms(s: float) -> str:
    return f"{s * 1e3:8.2f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-node", action="store_true")
    ap.add_argument("--no-gguf-py", action="store_true", help="skip the (slow) gguf-py timing and check")
    args = ap.parse_args()

    sys.path.insert(0, str(REPO / "app"))
    from fitplan.core.gguf.header_cache import ProfileCache, cached_read_header
    from fitplan.core.gguf.reader import diff_against_gguf_py, read_header

    files = find_files(args.files)
    if not files:
        return 2
    why_no_node = "disabled (--no-node)" if args.no_node else node_ready()
    failures = 0
    for path in files:
        h = read_header(path)
        tokens = h.metadata.get("tokenizer.ggml.tokens")
        n_tok = getattr(tokens, "length", 0)
        print(
            f"\n{path.name}: {path.stat().st_size / 1e6:.1f} MB header, {n_tok} tokens, {len(h.metadata)} keys"
        )

        cold = [run_py(COLD_SCRIPT, str(path)) for _ in range(args.runs)]
        cold_read = min(c["read_s"] for c in cold)
        print(
            f"  cold read_header (fresh process)  best {ms(cold_read)}  median "
            f"{ms(statistics.median(c['read_s'] for c in cold))}  (import {ms(min(c['import_s'] for c in cold))})"
        )

        repeat = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            read_header(path)
            repeat.append(time.perf_counter() - t0)
        ours_best = min(repeat)
        print(f"  read_header repeated in process   best {ms(ours_best)}  (no cache)")

        with tempfile.TemporaryDirectory(prefix="fitplan-bench-cache-") as cdir:
            cache = ProfileCache(cdir)
            cached_read_header(path, cache=cache)
            warm = []
            for _ in range(20):
                t0 = time.perf_counter()
                cached_read_header(path, cache=cache)
                warm.append(time.perf_counter() - t0)
            fresh_cache = min(run_py(CACHE_SCRIPT, str(path), cdir)["read_s"] for _ in range(args.runs))
        cache_s = min(warm)
        print(f"  from cache (in process)           best {ms(cache_s)}")
        print(f"  from cache (fresh process)        best {ms(fresh_cache)}")

        if not args.no_gguf_py:
            from gguf import GGUFReader

            t0 = time.perf_counter()
            GGUFReader(path)
            ref_s = time.perf_counter() - t0
            print(
                f"  gguf-py GGUFReader                     {ms(ref_s)}   GGUFReader/ours = {ref_s / cold_read:7.1f}x"
            )
            diffs = diff_against_gguf_py(path, h)
            if diffs:
                failures += 1
                print("  MISMATCH with gguf-py:", *diffs[:10], sep="\n    ")
            else:
                print("  same answer as gguf-py: yes (every key, type, value/length, tensor)")

        if why_no_node is None:
            try:
                node = run_node(path, max(3, args.runs))
                print(
                    f"  node-llama-cpp readGgufFileInfo   first {ms(node['first_s'])}  best {ms(node['best_s'])}"
                    f"   node/ours = {node['first_s'] / cold_read:5.1f}x (first call vs cold),"
                    f" {node['best_s'] / ours_best:5.1f}x (best vs best)"
                )
            except subprocess.CalledProcessError as e:
                print(f"  node-llama-cpp: failed: {(e.stderr or '').strip().splitlines()[-1:]}")
        else:
            print(f"  node-llama-cpp: skipped ({why_no_node})")
        goals = [
            f"cold<100ms: {'ok' if cold_read < 0.1 else 'MISSED'}",
            f"cache<5ms: {'ok' if cache_s < 0.005 else 'MISSED'}",
        ]
        print("  goals:", ", ".join(goals))
    if failures:
        print(f"\n{failures} file(s) disagree with gguf-py")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
