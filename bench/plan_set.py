"""Speed of a set plan (`fitplan.core.plan.multi.plan_set`) against the exhaustive search of the same sets with the
same estimates (`multi_oracle.exhaustive_multi`), and on a set of full-size models.

Small sets: three depth-truncated realistic models (dense, MoE, dense with SWA; `support.plan_models.small_model`)
on a 4.5 GiB GPU with 8 GiB of host RAM and on a 9 GiB GPU with 64 GiB: the planner and the exhaustive search must
give the same key (exit status 1 if not); prints both times and the ratio exhaustive / planner, the chains'
estimates computed once and shared.

Full size: four 30B-class MoEs (Qwen3-30B-A3B three times, gpt-oss-20b; published shapes, sparse headers) on one
24 GiB GPU with 24, 40 and 56 GiB of host RAM: the time of the whole plan (estimates included) and of the search
alone, with the statuses.

    python bench/plan_set.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "app"))
sys.path.insert(0, str(REPO / "tests"))

import fitplan.core.plan.multi as multi  # noqa: E402
from fitplan.core.base.devices import GIB, Machine, assumed_gpu, host_device  # noqa: E402
from fitplan.core.plan.multi import MultiModel, MultiRequest, plan_set  # noqa: E402
from fitplan.core.plan.multi_oracle import exhaustive_multi  # noqa: E402
from support.plan_models import generated, small_model  # noqa: E402


def _timed(fn, *args):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t


def small() -> int:
    bad = 0
    models = tuple(MultiModel(k, small_model(k)) for k in ("dense", "moe", "dense-swa"))
    for gpu, host in ((4.5, 8), (9.0, 64)):
        req = MultiRequest(models, Machine((assumed_gpu("G", gpu),), host_device(host * GIB)))
        chains = multi.chains_of(req)
        real = multi.chains_of
        multi.chains_of = lambda _r, c=chains: c  # type: ignore[misc]
        try:
            p, t_plan = _timed(plan_set, req)
            o, t_ex = _timed(exhaustive_multi, req)
        finally:
            multi.chains_of = real
        same = p.key == o.key
        bad += not same
        print(
            f"small set on {gpu:g} GiB + {host} GiB: planner {t_plan * 1000:.1f} ms, exhaustive {t_ex * 1000:.1f} ms "
            f"({o.combinations} combinations), ratio {t_ex / t_plan:.0f}x, same answer: {same}"
        )
    return bad


def full_size() -> None:
    qwen = generated("qwen3-30b-a3b", {}, "qwen3-30b-a3b")
    oss = generated("gpt-oss-20b", {}, "gpt-oss-20b")
    models = tuple(MultiModel(f"m{i}", p) for i, p in enumerate((qwen, qwen, oss, qwen)))
    for host in (24, 40, 56):
        req = MultiRequest(models, Machine((assumed_gpu("RTX 4090", 24),), host_device(host * GIB)))
        chains, t_chains = _timed(multi.chains_of, req)
        real = multi.chains_of
        multi.chains_of = lambda _r, c=chains: c  # type: ignore[misc]
        try:
            p, t_search = _timed(plan_set, req)
        finally:
            multi.chains_of = real
        print(
            f"4 MoEs on 24 GiB + {host} GiB: estimates {t_chains:.2f} s ({sum(len(c.vecs) for c in chains)}), "
            f"search {t_search:.2f} s: {[m.status for m in p.models]}"
        )


def main() -> int:
    bad = small()
    full_size()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
