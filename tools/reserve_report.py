"""Print, per public memory-breakdown log, fitplan's runtime-reserve terms next to the log's "unaccounted" column.

Each log is one JSON file in tests/fixtures/public_logs/ (the address it came from, the build it states, the GPU,
the command when given, the table rows used). Where the log states the model and -ub, the file carries the matrix
shapes the pool term needs (`shapes`); otherwise the pool is left out and said so. The log's unaccounted memory also
holds whatever else runs on that GPU (a desktop, other processes), so it is an upper bound of what the reserve models.

    .venv/bin/python tools/reserve_report.py          (a Markdown table)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fitplan.core.base.devices import MIB, Device, DeviceKind, Vendor
from fitplan.core.memory.reserve import MatmulShapes, ReserveTerm, cuda_reserve_terms

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "fixtures" / "public_logs"


@dataclass(frozen=True, slots=True)
class Comparison:
    log: str  # the fixture's file name
    device: str
    terms: tuple[ReserveTerm, ...]
    unaccounted_mib: int  # the log's column

    @property
    def fitplan_mib(self) -> float:
        return sum(t.bytes for t in self.terms) / MIB

    @property
    def diff_mib(self) -> float:
        """fitplan's sum minus the log's unaccounted (negative: fitplan reserves less)."""
        return self.fitplan_mib - self.unaccounted_mib

    def term_mib(self, label: str) -> float | None:
        return next((t.bytes / MIB for t in self.terms if t.label == label), None)


def _device(row: dict[str, object]) -> Device:
    cc = row.get("compute_capability")
    detail = f"compute {cc[0]}.{cc[1]}" if isinstance(cc, list) else ""
    total = int(str(row["total"])) * MIB
    return Device(str(row["device"]), DeviceKind.GPU, total, total, Vendor.NVIDIA, detail=detail)


def comparisons(directory: Path = LOGS) -> list[Comparison]:
    out: list[Comparison] = []
    for path in sorted(directory.glob("*.json")):
        log = json.loads(path.read_text(encoding="utf-8"))
        shapes = MatmulShapes(**log["shapes"]) if log.get("shapes") else None
        for row in log["rows"]:
            terms = cuda_reserve_terms(_device(row), shapes)
            out.append(Comparison(path.name, str(row["device"]), terms, int(row["unaccounted"])))
    return out


def _mib(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}"


def main() -> None:
    print("| log | device | context | cuBLAS | pool | fitplan | unaccounted | fitplan - log |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for c in comparisons():
        print(
            f"| {c.log} | {c.device} | {_mib(c.term_mib('CUDA context'))} | {_mib(c.term_mib('cuBLAS workspace'))} "
            f"| {_mib(c.term_mib('CUDA pool'))} | {c.fitplan_mib:.0f} | {c.unaccounted_mib} "
            f"| {c.diff_mib:+.0f} MiB ({100 * c.diff_mib / c.unaccounted_mib:+.0f}%) |"
        )


if __name__ == "__main__":
    main()
