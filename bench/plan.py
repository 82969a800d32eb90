"""Speed of a full plan (placement and largest context) for a 671B-parameter MLA MoE over 8 GPUs, against the
exhaustive search of the same space with the same estimator.

The model is DeepSeek-V3's published configuration (61 layers, 3 dense then 58 with 256 routed experts, MLA), a
sparse header written by `tools/groundtruth/sparse_models.py`'s DeepSeek-V2 builder with those values. Two machines:
8 x 80 GiB (everything fits on the GPUs) and 8 x 48 GiB with 256 GiB of host RAM (experts must go to the CPU).

Prints, per machine:
  cold        the first plan (weight placements computed)
  warm        the best of --runs more plans of the same inputs (the process, the header and the last placements warm)
  exhaustive  the oracle over every -ngl and --n-cpu-moe, with the split pinned to the one the planner chose
              (the splits of 62 offloaded indices over 8 GPUs are too many to enumerate), and the planner on the
              same pinned inputs: both must give the same answer (exit status 1 if not)
and the ratio exhaustive / warm. Goal: warm under 100 ms.

    python bench/plan.py [--runs 3] [--no-exhaustive]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "app"))
sys.path.insert(0, str(REPO / "tests"))

from fitplan.core.base.devices import GIB, Machine, assumed_gpu, host_device  # noqa: E402
from fitplan.core.plan.oracle import exhaustive_plan  # noqa: E402
from fitplan.core.plan.planner import Pins, Plan, plan  # noqa: E402
from support.plan_models import deepseek_v3  # noqa: E402

MACHINES = {
    "8 x 80 GiB, 512 GiB host": (80, 512),
    "8 x 48 GiB, 256 GiB host": (48, 256),
}


def _machine(gib: int, host_gib: int) -> Machine:
    return Machine(tuple(assumed_gpu(f"GPU{i}", gib) for i in range(8)), host_device(host_gib * GIB))


def _answer(p: Plan) -> tuple[bool, int, int, int]:
    return (p.fits, p.placement.n_gpu_layers, p.placement.n_cpu_moe, p.settings.n_ctx)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-exhaustive", action="store_true")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    prof = deepseek_v3()
    print(
        f"model: {prof.architecture}, {prof.n_params / 1e9:.0f}B parameters, {prof.n_layer} layers, "
        f"{prof.weight_bytes / GIB:.1f} GiB of weights (header written and read in {time.perf_counter() - t:.2f} s)"
    )
    ok = True
    for label, (gib, host) in MACHINES.items():
        m = _machine(gib, host)
        t = time.perf_counter()
        p = plan(prof, m)
        cold = time.perf_counter() - t
        warm = float("inf")
        for _ in range(args.runs):
            t = time.perf_counter()
            again = plan(prof, m)
            warm = min(warm, time.perf_counter() - t)
            ok &= again == p
        print(
            f"\n{label}: {'fits' if p.fits else 'does not fit'}, -c {p.settings.n_ctx}, {p.placement.description}"
        )
        print(f"  cold {cold * 1e3:.0f} ms, warm {warm * 1e3:.0f} ms ({p.evaluations} estimates)")
        if args.no_exhaustive or not p.fits:
            continue
        pins = Pins(tensor_split=tuple(float(x) for x in p.placement.tensor_split))
        t = time.perf_counter()
        pinned = plan(prof, m, pins)
        t_plan = time.perf_counter() - t
        t = time.perf_counter()
        o = exhaustive_plan(prof, m, pins)
        t_ex = time.perf_counter() - t
        o_answer = (o.fits, o.point.ngl if o.point else 0, o.point.ncmoe if o.point else 0, o.n_ctx)
        o_answer = (o_answer[0], min(o_answer[1], prof.n_layer_all + 1), o_answer[2], o_answer[3])
        same = _answer(pinned) == o_answer
        ok &= same
        print(
            f"  with -ts pinned to that split: planner {t_plan * 1e3:.0f} ms, exhaustive {t_ex:.1f} s over "
            f"{o.points} points ({o.evaluations} estimates): ratio {t_ex / max(t_plan, 1e-9):.0f}x; "
            f"same answer: {'yes' if same else f'NO ({_answer(pinned)} vs {o_answer})'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
