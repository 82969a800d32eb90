"""A real card against the device-shaped stand-in: the kit's `standin` grid beside tests/fixtures/llamacpp/standin.

The kit (`record_cuda.py --grid standin`) runs every recorded one-card stand-in case on the real CUDA build with the
same flags; this prints, per case and buffer type, the bytes the real card's dry run reported and the stand-in's,
and the cases whose compute differs by more than `--tolerance`. A difference is a rule the stand-in does not copy
(or copies from another compute capability: the stand-in cases are recorded at cc 8.9 unless their id says
otherwise).

Usage:
    python3 tools/groundtruth/cuda/compare_standin.py KIT_DIR/fixtures/cuda.json [--tolerance 0.01]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
STANDIN = REPO / "tests" / "fixtures" / "llamacpp" / "standin"
MIB = 1024 * 1024


def _totals(results: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    """Per device (host buffer types under "Host"): model, context and compute bytes."""
    out: dict[str, list[int]] = {}
    for b in results["buffers"]:
        dev = "Host" if b["is_host"] or b["device"] in (None, "CPU") else str(b["device"])
        acc = out.setdefault(dev, [0, 0, 0])
        acc[0] += int(b["model"])
        acc[1] += int(b["context"])
        acc[2] += int(b["compute"])
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def compare(kit: dict[str, Any], tolerance: float) -> tuple[list[str], int, int]:
    """Lines to print, the cases compared and the cases over the tolerance."""
    lines: list[str] = []
    compared = over = 0
    standin: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(STANDIN.glob("*.json")):
        doc = json.loads(path.read_text())
        for case in doc["cases"]:
            if "results" in case:
                standin[(str(doc["model"]["name"]), str(case["id"]))] = case["results"]
    for case in kit["cases"]:
        if case.get("kind") != "dryrun" or "results" not in case:
            continue
        ref = standin.get((str(case["model"]), str(case["id"])))
        if ref is None:
            continue
        compared += 1
        real, mine = _totals(case["results"]), _totals(ref)
        worst = 0.0
        cells = []
        for dev in sorted(set(real) | set(mine)):
            r, m = real.get(dev, (0, 0, 0)), mine.get(dev, (0, 0, 0))
            rel = (m[2] - r[2]) / r[2] if r[2] else 0.0
            worst = max(worst, abs(rel))
            cells.append(
                f"{dev}: W {r[0] / MIB:.2f}/{m[0] / MIB:.2f} KV {r[1] / MIB:.2f}/{m[1] / MIB:.2f} "
                f"C {r[2] / MIB:.2f}/{m[2] / MIB:.2f}"
            )
        flag = "!!" if worst > tolerance else "  "
        over += worst > tolerance
        lines.append(f"{flag} {case['model']}/{case['id']}: " + "; ".join(cells))
    return lines, compared, over


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kit", type=Path, help="the kit's fixture (record_cuda.py --grid standin)")
    ap.add_argument("--tolerance", type=float, default=0.01, help="compute difference to flag (default 1%%)")
    a = ap.parse_args(argv)
    lines, compared, over = compare(json.loads(a.kit.read_text()), a.tolerance)
    print("\n".join(lines))
    print(
        f"{compared} cases compared (real / stand-in, MiB); {over} with compute more than {a.tolerance:.0%} apart"
    )
    return 0 if compared else 2


if __name__ == "__main__":
    sys.exit(main())
