"""`fitplan quants` on a 12-file repository served by a loopback Hub (tests/support/hub.py), cold and from the cache.

The repository: Qwen2.5-VL-7B (the fixture header) as six single-file quants, Q8_0 in 2 shards, BF16 in 3 and a
projector (12 GGUF files, ~47 GiB declared), plus 3 non-GGUF files. For each pass it prints the bytes the CDN sent
against the files' total and the time to list the repository and read every header (`commands.quants.gather`),
then the time to plan the rows; and it checks that each row equals `fitplan plan --json` on the same local file.

Goals: cold under 1% of the bytes and under 2 s; warm (a new `fitplan quants`, the on-disk cache kept) no byte of
any file and under 50 ms.

    python bench/quants.py [--runs 5] [--jobs 4]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))

from support.hub import HubState, fake_hub, flags_without_model, quant_repo  # noqa: E402

REPO = "bench/Qwen2.5-VL-7B-Instruct-GGUF"
MACHINE = ["--assume-gpu", "12GiB", "--host-ram", "32GiB"]


def cli_json(argv: list[str]) -> dict[str, object]:
    from fitplan.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(argv)
    doc: dict[str, object] = json.loads(buf.getvalue())
    return doc


def check_rows(folder: Path) -> tuple[int, list[str]]:
    """Each row of `fitplan quants --json` against `fitplan plan --json` on its local file: (rows, mismatches)."""
    doc = cli_json(["quants", REPO, *MACHINE, "--json"])
    rows = doc["quants"]
    assert isinstance(rows, list)
    bad: list[str] = []
    for r in rows:
        plan = cli_json(
            [
                "plan",
                str(folder / r["files"][0]),
                "--mmproj-file",
                str(folder / "mmproj-F16.gguf"),
                *MACHINE,
                "--json",
            ]
        )
        got = (r["fits"], r["n_ctx"], r["placement"], flags_without_model(r["argv"]))
        want = (plan["fits"], plan["n_ctx"] if plan["fits"] else 0, plan["placement"]["description"],  # type: ignore[index]
                flags_without_model(plan["argv"]))  # type: ignore[arg-type]  # fmt: skip
        if got != want:
            bad.append(f"{r['name']}: quants {got} != plan {want}")
    return len(rows), bad


def one_pass(state: HubState, jobs: int) -> tuple[float, int, int, float]:
    """(seconds to list and read the headers, CDN bytes, Hub requests, seconds to plan the rows)."""
    from fitplan.commands import quants
    from fitplan.commands.plan import detect_machine
    from fitplan.core.inputs.model_source import forget_loaded

    forget_loaded()  # a new `fitplan quants`: nothing in memory, the on-disk cache as it is
    with state.lock:
        state.cdn_bytes = 0
        state.hub_log.clear()
    t0 = time.perf_counter()
    g = quants.gather(REPO, None, jobs)
    t1 = time.perf_counter()
    assert all(not r.error for r in g.rows), [r.error for r in g.rows]
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    quants.register(sub)
    args, extra = parser.parse_known_args(["quants", REPO, *MACHINE])
    t2 = time.perf_counter()
    quants.plan_rows(g, args, extra, detect_machine(args.assume_gpu, args.host_ram))
    t3 = time.perf_counter()
    return t1 - t0, state.cdn_bytes, len(state.hub_log), t3 - t2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=4)
    opts = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fitplan-bench-quants-"))
    os.environ["FITPLAN_CACHE_DIR"] = str(tmp / "cache")
    os.environ.pop("HF_TOKEN", None)
    folder = quant_repo(tmp / "repo")
    st = HubState()
    st.add(REPO, folder)
    gguf = {p: f for p, f in st.repos[REPO].items() if p.endswith(".gguf")}
    total = sum(f.size for f in gguf.values())
    with fake_hub(st) as (endpoint, state):
        os.environ["HF_ENDPOINT"] = endpoint
        from fitplan.core.gguf.remote_cache import RemoteHeaderCache

        cold = []
        for _ in range(opts.runs):
            RemoteHeaderCache().clear()
            cold.append(one_pass(state, opts.jobs))
        warm = [one_pass(state, opts.jobs) for _ in range(opts.runs)]
        n_rows, bad = check_rows(folder)
    print(
        f"repository: {len(gguf)} GGUF files ({len(st.repos[REPO])} in all), {total / 2**30:.2f} GiB declared"
    )
    ok = not bad
    for label, runs, byte_goal, time_goal in (("cold", cold, total / 100, 2.0), ("warm", warm, 0, 0.050)):
        t = statistics.median(r[0] for r in runs)
        b = runs[0][1]
        plan_s = statistics.median(r[3] for r in runs)
        met = b <= byte_goal and t < time_goal
        ok = ok and met
        print(
            f"{label}: read {b:,} of {total:,} bytes ({100 * b / total:.4f}%), {runs[0][2]} Hub request(s); "
            f"list + headers {t * 1000:.1f} ms (median of {len(runs)}); planning the rows {plan_s * 1000:.0f} ms"
            f"  [{'goal met' if met else 'GOAL MISSED'}]"
        )
    print(f"rows equal to `fitplan plan` on the same file: {n_rows - len(bad)} of {n_rows}")
    for line in bad:
        print("  " + line)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
