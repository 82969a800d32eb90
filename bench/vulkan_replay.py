"""Cost of the whole-layer replay over Vulkan's chunks (`layer_replay`): a full context curve of DeepSeek-V3 on
two Vulkan-shaped 16 GiB GPUs (`-ts 3,1 -ub 2048`, flash attention), whose every context replays each GPU's layer
phase, against the same curve on two CUDA-shaped GPUs of the same size (no chunks, no replay), measured in the
same run. Prints cold (a new curve: the replays run) and warm (the same curve again: memoised) times and their
ratios to the baseline, and checks that the curve equals estimate() at a few contexts (exit status 1 if not).

    python bench/vulkan_replay.py [--runs 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "app"))

from fitplan.core.base.devices import GIB, Machine, Vendor, assumed_gpu, host_device  # noqa: E402
from fitplan.core.base.launch_settings import LaunchSettings  # noqa: E402
from fitplan.core.base.results import TERM_ORDER  # noqa: E402
from fitplan.core.estimate.curve import estimate_curve  # noqa: E402
from fitplan.core.estimate.estimator import estimate  # noqa: E402
from fitplan.core.gguf.reader import read_header  # noqa: E402
from fitplan.core.memory.compute.layer_replay import traced_replay  # noqa: E402
from fitplan.core.model.builder import build_profile  # noqa: E402

HEADER = REPO / "tests" / "fixtures" / "llamacpp" / "models" / "sparse" / "deepseek-v3.header.gguf"
CONTEXTS = tuple(range(1024, 1024 + 256 * 512, 512))


def _machine(vendor: Vendor, prefix: str) -> Machine:
    gpus = tuple(
        dataclasses.replace(assumed_gpu(f"GPU{i}", 16), vendor=vendor, backend_name=f"{prefix}{i}")
        for i in range(2)
    )
    return Machine(gpus, host_device(128 * GIB))


def _best(fn: Callable[[], object], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ns = ap.parse_args(argv)
    profile = build_profile(read_header(HEADER, allow_incomplete=True))
    settings = LaunchSettings(n_gpu_layers=999, n_batch=2048, n_ubatch=2048, tensor_split=(3.0, 1.0))
    ok = True
    times: dict[str, tuple[float, float]] = {}
    for name, machine in (
        ("cuda", _machine(Vendor.NVIDIA, "CUDA")),
        ("vulkan", _machine(Vendor.INTEL, "Vulkan")),
    ):
        traced_replay.cache_clear()
        t = time.perf_counter()
        curve = estimate_curve(profile, settings, machine, CONTEXTS)
        cold = time.perf_counter() - t
        warm = _best(lambda m=machine: estimate_curve(profile, settings, m, CONTEXTS), ns.runs)
        times[name] = (cold, warm)
        for i in (0, len(CONTEXTS) // 2, len(CONTEXTS) - 1):
            e = estimate(profile, dataclasses.replace(settings, n_ctx=CONTEXTS[i]), machine)
            for d, de in enumerate(e.devices):
                ok &= all(curve.bytes[d, k, i] == de.bytes_of(kind) for k, kind in enumerate(TERM_ORDER))
    (cc, cw), (vc, vw) = times["cuda"], times["vulkan"]
    print(f"DeepSeek-V3, two 16 GiB GPUs, -ts 3,1 -ub 2048, {len(CONTEXTS)} contexts")
    print(f"  CUDA-shaped (baseline): cold {cc * 1e3:.0f} ms, warm {cw * 1e3:.1f} ms")
    print(
        f"  Vulkan-shaped (replayed): cold {vc * 1e3:.0f} ms (x{vc / cc:.1f}), warm {vw * 1e3:.1f} ms (x{vw / cw:.1f})"
    )
    print(f"  curve == estimate(): {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
