"""Speed of a full context curve: every term on every device for 256 context lengths, on a large model.

Prints, per model:
  cold     first curve (weight placement included)
  warm     the same curve again (placement reused, as when the GUI drags a slider)
  estimate one estimate() call, for scale
  fit      one `llama-fit-params` dry run of the same model (if the binary and a sparse full-size model are
           available; the sparse file is written to a temp folder from the header copy in the fixtures), and
           the ratio fit / warm curve
and checks that the curve equals estimate() at every context (exit status 1 if not). Goal: < 10 ms per warm
curve.

    python bench/estimate_curve.py [--llama-bin DIR] [--runs 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "app"))

from fitplan.core.base.devices import GIB, Machine, assumed_gpu, host_device  # noqa: E402
from fitplan.core.base.launch_settings import LaunchSettings  # noqa: E402
from fitplan.core.base.results import TERM_ORDER  # noqa: E402
from fitplan.core.estimate.curve import estimate_curve  # noqa: E402
from fitplan.core.estimate.estimator import estimate  # noqa: E402
from fitplan.core.gguf.reader import read_header  # noqa: E402
from fitplan.core.model.builder import build_profile  # noqa: E402

SPARSE = REPO / "tests" / "fixtures" / "llamacpp" / "models" / "sparse"
MODELS = ("qwen3-next-80b-a3b", "gemma-3-27b", "llama-3.1-8b")
CONTEXTS = list(range(1024, 1024 + 256 * 1024, 1024))


def _best(fn, runs: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _fit_params_seconds(llama_bin: Path | None, header: Path) -> tuple[float | None, str]:
    exe = None
    if llama_bin is not None:
        cand = llama_bin / "llama-fit-params"
        exe = str(cand) if cand.exists() else None
    exe = exe or shutil.which("llama-fit-params")
    if exe is None:
        return None, "llama-fit-params not found (give --llama-bin DIR)"
    size = read_header(header, allow_incomplete=True).expected_file_size
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model.gguf"
        shutil.copyfile(header, model)
        with model.open("r+b") as f:
            f.truncate(size)  # sparse: the tensor data is a hole
        cmd = [exe, "-m", str(model), "-c", "32768", "-fitp", "on", "-lv", "1"]
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ})
        dt = time.perf_counter() - t
    if proc.returncode != 0:
        return None, f"llama-fit-params failed ({proc.returncode}): {proc.stderr.strip()[-200:]}"
    return dt, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bin", type=Path, default=Path("/work/llama/build/bin"))
    ap.add_argument("--runs", type=int, default=5)
    ns = ap.parse_args(argv)
    machine = Machine((assumed_gpu("GPU0", 24), assumed_gpu("GPU1", 24)), host_device(128 * GIB))
    settings = LaunchSettings(n_gpu_layers=30)
    ok = True
    for name in MODELS:
        header = SPARSE / f"{name}.header.gguf"
        if not header.exists():
            print(f"{name}: no header copy at {header}")
            continue
        profile = build_profile(read_header(header, allow_incomplete=True))
        t = time.perf_counter()
        curve = estimate_curve(profile, settings, machine, CONTEXTS)
        cold = time.perf_counter() - t
        warm = _best(lambda p=profile: estimate_curve(p, settings, machine, CONTEXTS), ns.runs)
        one = _best(
            lambda p=profile: estimate(p, dataclasses.replace(settings, n_ctx=32768), machine), ns.runs
        )
        mismatches = 0
        for i, c in enumerate(CONTEXTS):
            e = estimate(profile, dataclasses.replace(settings, n_ctx=c), machine)
            for d, de in enumerate(e.devices):
                for k, kind in enumerate(TERM_ORDER):
                    mismatches += int(curve.bytes[d, k, i] != de.bytes_of(kind))
        ok &= mismatches == 0
        fit, why = _fit_params_seconds(ns.llama_bin, header)
        terms = len(machine.all) * len(TERM_ORDER)
        print(
            f"{name}: {len(CONTEXTS)} contexts x {terms} device-terms: cold {cold * 1e3:.1f} ms, "
            f"warm {warm * 1e3:.2f} ms ({'ok' if warm < 0.010 else 'over the 10 ms goal'}), "
            f"estimate() {one * 1e3:.2f} ms; curve == estimate() at every context: "
            f"{'yes' if mismatches == 0 else f'NO ({mismatches} mismatches)'}"
        )
        if fit is not None:
            print(f"  llama-fit-params dry run: {fit * 1e3:.0f} ms = {fit / warm:.0f}x one warm curve")
        else:
            print(f"  llama-fit-params: {why}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
