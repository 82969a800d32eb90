"""Fit the speed model's efficiency constants on published llama-bench results and report the held-out error.

Every row of tests/fixtures/speed/published.json is one published number (address, build, GPU, model, settings,
t/s). Before anything is fitted, each row is put in the held-out part or the fit part by a hash of its address and
its own fields (`held_out`), so the split never depends on the model. The constants are fitted on the fit part
only (medians of what each row implies, in `fit`), then every row is predicted with them; docs/speed.md reports
the error on the held-out part per class (full offload, partial -ngl, expert offload, multi-GPU) and kind
(prompt `pp`, generation `tg`), and `fitplan/data/speed_calibration.json` keeps the constants and the bands the
CLI and the window show (the 80th percentile of the held-out |ln(predicted / measured)| of the class).

Usage:
    python tools/speed_report.py            # print the tables
    python tools/speed_report.py --write    # also write docs/speed.md and fitplan/data/speed_calibration.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))

from fitplan.core.base.devices import GIB, Machine, Vendor, host_device  # noqa: E402
from fitplan.core.base.launch_settings import LaunchSettings  # noqa: E402
from fitplan.core.gguf.reader import read_header  # noqa: E402
from fitplan.core.hardware.catalog import assumed_devices  # noqa: E402
from fitplan.core.model.builder import build_profile  # noqa: E402
from fitplan.core.model.profile import ModelProfile  # noqa: E402
from fitplan.core.speed import speed_class  # noqa: E402
from fitplan.core.speed.figures import DEFAULT_HOST_BANDWIDTH, GB, MachineFigures, machine_figures  # noqa: E402
from fitplan.core.speed.model import (  # noqa: E402
    UNFITTED,
    Backend,
    BackendConstants,
    Calibration,
    Prediction,
    SpeedClass,
    predict,
)
from fitplan.core.speed.work import ModelWork, model_work  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "speed" / "published.json"
MODEL_DIRS = (
    ROOT / "tests" / "fixtures" / "speed" / "models",
    ROOT / "tests" / "fixtures" / "llamacpp" / "models" / "sparse",
)
DOC = ROOT / "docs" / "speed.md"
CALIBRATION = ROOT / "app" / "fitplan" / "data" / "speed_calibration.json"
#: A printed size of at least this many bytes per weight is an unquantized (F16/BF16/F32) model: the headers carry
#: one quantization mix, the size the table printed says which the row ran.
UNQUANTIZED_BYTES_PER_WEIGHT = 1.9
#: llama-bench's default -b (a row that states another carries "n_batch").
LLAMA_BENCH_N_BATCH = 2048
#: One row in three is held out (the first byte of the row's hash, modulo 3).
HOLD_OUT_MODULUS = 3
#: The band shown with a prediction: this quantile of the held-out |ln(predicted / measured)|.
BAND_QUANTILE = 0.8
#: The issue's targets on the held-out part: (kind, classes, tolerance, share of rows).
TARGETS = (
    ("tg", (SpeedClass.FULL,), 0.20, 0.70),
    ("tg", (SpeedClass.PARTIAL, SpeedClass.EXPERTS), 0.35, 0.60),
    ("pp", tuple(SpeedClass), 0.30, 0.60),
)


@dataclass(frozen=True)
class Row:
    index: int
    data: dict[str, object]

    def get(self, key: str) -> object:
        return self.data[key]

    @property
    def key(self) -> str:
        d = self.data
        key = "|".join(
            str(d[k]) for k in ("address", "gpu", "backend", "model_label", "test", "ngl", "n_cpu_moe")
        )
        n = int(str(d["n_gpus"]))
        return key if n <= 1 else f"{key}|{n} GPUs"  # one table often gives 1, 2, 4 ... cards of one kind

    @property
    def held_out(self) -> bool:
        return hashlib.sha256(self.key.encode()).digest()[0] % HOLD_OUT_MODULUS == 0

    @property
    def kind(self) -> str:
        return str(self.data["kind"])

    @property
    def tps(self) -> float:
        return float(str(self.data["tps"]))


@cache
def profile_of(name: str) -> ModelProfile:
    for d in MODEL_DIRS:
        p = d / f"{name}.header.gguf"
        if p.exists():
            return build_profile(read_header(p, allow_incomplete=True))
    raise FileNotFoundError(name)


def _int(x: object) -> int:
    return int(str(x))


def setup(row: Row) -> tuple[ModelWork, MachineFigures, tuple[Backend, ...], SpeedClass]:
    """The row's placement work, device figures and backends, as `plan_speed` computes them for a user's plan."""
    d = row.data
    profile = profile_of(str(d["model"]))
    if d.get("gpus"):  # different cards, in llama.cpp's order
        gpus = assumed_devices([str(g) for g in d["gpus"]])  # type: ignore[union-attr]
    else:
        n = _int(d["n_gpus"])
        gpus = assumed_devices([f"{n}x {d['gpu']}" if n > 1 else str(d["gpu"])])
    machine = Machine(gpus, host_device(1024 * GIB))
    settings = LaunchSettings(
        n_ctx=4096, n_gpu_layers=_int(d["ngl"]), n_cpu_moe=_int(d["n_cpu_moe"]), n_ubatch=_int(d["ubatch"])
    )
    work = model_work(profile, settings, machine)
    if d["size_gib"] is not None:
        size = float(str(d["size_gib"])) * GIB
        scale = size / profile.weight_bytes
        unquantized = size / sum(t.n_elements for t in profile.tensors) >= UNQUANTIZED_BYTES_PER_WEIGHT
        work = replace(
            work,
            devices=tuple(
                replace(
                    w,
                    dense_bytes=w.dense_bytes * scale,
                    expert_bytes=w.expert_bytes * scale,
                    dense_flops_16=w.dense_flops if unquantized else w.dense_flops_16,
                    expert_flops_16=w.expert_flops if unquantized else w.expert_flops_16,
                )
                for w in work.devices
            ),
        )
    host_bw = float(str(d["host_bandwidth_gbs"])) * GB if d["host_bandwidth_gbs"] is not None else None
    if host_bw is None:
        apple = gpus[0].vendor is Vendor.APPLE
        host_bw = None if apple else DEFAULT_HOST_BANDWIDTH["x86_64"]
    figs = machine_figures(machine, host_bw)
    backends = tuple(Backend(str(d["backend"])) for _ in gpus)
    return work, figs, backends, speed_class(work)


def run(row: Row, cal: Calibration) -> tuple[Prediction, SpeedClass]:
    work, figs, backends, cls = setup(row)
    d = row.data
    pred = predict(
        work,
        figs,
        backends,
        cal,
        depth=_int(d["depth"]),
        n_prompt=max(1, _int(d["n_prompt"])),
        n_ubatch=_int(d["ubatch"]),
        n_batch=_int(d.get("n_batch", LLAMA_BENCH_N_BATCH)),
    )
    return pred, cls


def _median(xs: list[float], default: float) -> float:
    return statistics.median(xs) if xs else default


def _fit_tg(rows: list[tuple[Row, Prediction]], tau_default: float) -> tuple[float, float]:
    """1/efficiency and microseconds per layer from full-offload generation rows: least squares on the relative
    error of t = a * bytes/bandwidth + layers * tau, with a >= 1 and tau >= 0. With fewer than three rows only `a`
    is fitted and tau is `tau_default` (CUDA's)."""
    if not rows:
        return 1.0, tau_default
    xs = [(p.breakdown.tg_gpu_bytes, p.breakdown.tg_gpu_layers * 1e-6, 1.0 / r.tps) for r, p in rows]
    if len(rows) >= 3:
        s11 = sum((x / t) ** 2 for x, _l, t in xs)
        s22 = sum((lay / t) ** 2 for _x, lay, t in xs)
        s12 = sum((x / t) * (lay / t) for x, lay, t in xs)
        b1 = sum(x / t for x, _l, t in xs)
        b2 = sum(lay / t for _x, lay, t in xs)
        det = s11 * s22 - s12 * s12
        if det > 0:
            a = (b1 * s22 - b2 * s12) / det
            tau = (s11 * b2 - s12 * b1) / det
            if a >= 1.0 and tau >= 0.0:
                return a, tau
        a = max(1.0, _median([t / x for x, _l, t in xs], 1.0))
        return a, 0.0
    a = max(1.0, _median([(t - lay * tau_default) / x for x, lay, t in xs], 1.0))
    return a, tau_default


def _fit_pp(rows: list[tuple[Row, Prediction]]) -> tuple[float, float, int]:
    """The prompt throughput shares (quantized weights, unquantized weights and attention) from full-offload
    prompt rows, and how many rows the second came from. The first is the median of what the rows whose FLOPs are
    mostly quantized imply for all their FLOPs; the second the median of what the mostly unquantized rows imply
    for their unquantized part once the quantized part is taken at the first share (0, the first share, with fewer
    than two such rows)."""

    def parts(p: Prediction) -> tuple[float, float, float]:
        bd = p.breakdown
        return bd.pp_gpu_flops, bd.pp_gpu_flops_16, bd.pp_fixed

    quant, unq = [], []
    for r, p in rows:
        q, h, fixed = parts(p)
        (unq if h > q else quant).append((1.0 / r.tps, q, h, fixed))
    pp_eff = min(1.0, _median([(q + h) / max(1e-12, t - fixed) for t, q, h, fixed in quant], 0.5))
    implied = [h / (t - fixed - q / pp_eff) for t, q, h, fixed in unq if t - fixed - q / pp_eff > 0]
    if len(implied) < 2:
        return pp_eff, 0.0, 0
    return pp_eff, min(1.0, statistics.median(implied)), len(implied)


def fit(rows: list[Row], log: list[str] | None = None) -> Calibration:
    """The constants, from the fit part only (each a median or a least-squares fit of what the rows imply).

    `log` receives one line per constant: how many fit rows it came from, or that it kept its default."""
    said: list[str] = log if log is not None else []
    fit_rows = [r for r in rows if not r.held_out]
    base = [(r, *run(r, UNFITTED)) for r in fit_rows]
    backends: dict[str, BackendConstants] = {}
    cuda_tau = 0.0
    for b in Backend:  # CUDA first: the other backends take its fixed time per layer when they have few rows
        tg = [
            (r, p)
            for r, p, c in base
            if c is SpeedClass.FULL and r.kind == "tg" and r.get("backend") == b.value
        ]
        pp = [
            (r, p)
            for r, p, c in base
            if c is SpeedClass.FULL and r.kind == "pp" and r.get("backend") == b.value
        ]
        if not tg and not pp:
            continue
        a, tau = _fit_tg(tg, cuda_tau)
        if b is Backend.CUDA:
            cuda_tau = tau
        pp_eff, pp_eff16, n16 = _fit_pp(pp)
        backends[b.value] = BackendConstants(
            round(1.0 / a, 4), round(tau, 3), round(pp_eff, 4), round(pp_eff16, 4)
        )
        own_tau = "its own" if len(tg) >= 3 or b is Backend.CUDA else "CUDA's"
        said.append(
            f"{b.value}: generation from {len(tg)} full-offload fit rows ({own_tau} time per layer), prompt from "
            f"{len(pp)}"
            + ("" if pp else " (default share 0.5)")
            + (f", of which {n16} with unquantized weights" if n16 else ", none with unquantized weights")
        )
    if "cuda" not in backends:
        backends["cuda"] = BackendConstants(1.0, 0.0, 1.0)
    cal = replace(UNFITTED, backends=backends)
    mixed = [(r, *run(r, cal)) for r in fit_rows]
    host_ratios = []
    link_ratios = []
    for r, p, c in mixed:
        if c not in (SpeedClass.PARTIAL, SpeedClass.EXPERTS):
            continue
        bd = p.breakdown
        if r.kind == "tg" and bd.tg_host_bytes > 0:
            gpu_part = 1.0 / p.generation_tps - bd.tg_host_bytes  # the host term at efficiency 1
            rest = 1.0 / r.tps - gpu_part
            if rest > 0:
                host_ratios.append(bd.tg_host_bytes / rest)
        if r.kind == "pp" and bd.pp_upload > 0:
            other = 1.0 / p.prompt_tps - bd.pp_upload
            rest = 1.0 / r.tps - other
            if rest > 0:
                link_ratios.append(bd.pp_upload / rest)
    said.append(f"host RAM share from {len(host_ratios)} partial or expert-offload generation fit rows")
    said.append(
        f"PCIe share from {len(link_ratios)} partial or expert-offload prompt fit rows"
        + ("" if link_ratios else " (default 0.7: no such fit row)")
        + (" (at most 1: the rows imply more than the link's peak)" if _median(link_ratios, 0.0) > 1 else "")
    )
    cal = replace(
        cal,
        host_efficiency=round(min(1.0, _median(host_ratios, 0.7)), 4),
        link_efficiency=round(min(1.0, _median(link_ratios, 0.7)), 4),
    )
    splits = []
    for r, p, c in ((r, *run(r, cal)) for r in fit_rows):
        if c is SpeedClass.MULTI and r.kind == "tg" and p.breakdown.boundaries:
            splits.append((1.0 / r.tps - 1.0 / p.generation_tps) / p.breakdown.boundaries * 1e6)
    said.append(f"time per device change from {len(splits)} multi-GPU generation fit rows (never below 0)")
    return replace(cal, split_us=round(max(0.0, _median(splits, 0.0)), 3))


@dataclass(frozen=True)
class Result:
    row: Row
    cls: SpeedClass
    predicted: float

    @property
    def ratio(self) -> float:
        return self.predicted / self.row.tps

    @property
    def error(self) -> float:
        return self.ratio - 1.0


def evaluate(rows: list[Row], cal: Calibration) -> list[Result]:
    out = []
    for r in rows:
        pred, cls = run(r, cal)
        out.append(Result(r, cls, pred.prompt_tps if r.kind == "pp" else pred.generation_tps))
    return out


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))
    return s[k]


def bands(results: list[Result]) -> dict[str, float]:
    """Per class and kind, the held-out quantile of |ln ratio|; "all/kind" over every held-out row of the kind."""
    held = [x for x in results if x.row.held_out]
    out: dict[str, float] = {}
    for kind in ("tg", "pp"):
        allk = [abs(math.log(x.ratio)) for x in held if x.row.kind == kind]
        out[f"all/{kind}"] = round(_quantile(allk, BAND_QUANTILE), 4)
        for cls in SpeedClass:
            xs = [abs(math.log(x.ratio)) for x in held if x.row.kind == kind and x.cls is cls]
            if len(xs) >= 3:
                out[f"{cls.value}/{kind}"] = round(_quantile(xs, BAND_QUANTILE), 4)
    return out


def target_lines(results: list[Result]) -> list[str]:
    held = [x for x in results if x.row.held_out]
    lines = []
    for kind, classes, tol, share in TARGETS:
        xs = [x for x in held if x.row.kind == kind and x.cls in classes]
        within = sum(1 for x in xs if abs(x.error) <= tol)
        got = within / len(xs) if xs else float("nan")
        names = ", ".join(c.value for c in classes) if len(classes) < len(SpeedClass) else "every class"
        verdict = "met" if xs and got >= share else ("no held-out rows" if not xs else "not met")
        lines.append(
            f"| {kind} | {names} | within {tol:.0%} on {share:.0%} | {within} of {len(xs)} "
            f"({got:.0%}) | {verdict} |"
            if xs
            else f"| {kind} | {names} | within {tol:.0%} on {share:.0%} | 0 of 0 | {verdict} |"
        )
    return lines


def class_table(results: list[Result], held_out: bool) -> list[str]:
    part = [x for x in results if x.row.held_out == held_out]
    lines = [
        "| class | kind | rows | median error | within 20% | within 35% | 80% of rows within |",
        "|---|---|---|---|---|---|---|",
    ]
    for cls in SpeedClass:
        for kind in ("tg", "pp"):
            xs = [x for x in part if x.cls is cls and x.row.kind == kind]
            if not xs:
                lines.append(f"| {cls.value} | {kind} | 0 | - | - | - | - |")
                continue
            med = statistics.median(x.error for x in xs)
            w20 = sum(1 for x in xs if abs(x.error) <= 0.20)
            w35 = sum(1 for x in xs if abs(x.error) <= 0.35)
            q = _quantile([abs(math.log(x.ratio)) for x in xs], BAND_QUANTILE)
            lines.append(
                f"| {cls.value} | {kind} | {len(xs)} | {med:+.0%} | {w20} | {w35} | x/{math.exp(q):.2f} to x{math.exp(q):.2f} |"
            )
    return lines


def row_table(results: list[Result]) -> list[str]:
    lines = [
        "| part | GPU | backend | model | settings | test | published t/s | predicted | error | source |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in results:
        d = x.row.data
        settings = (
            f"-ngl {d['ngl']}"
            + (f" -ncmoe {d['n_cpu_moe']}" if d["n_cpu_moe"] else "")
            + f" -ub {d['ubatch']}"
        )
        part = "held out" if x.row.held_out else "fit"
        lines.append(
            f"| {part} | {' + '.join(map(str, d.get('gpus') or [d['gpu']]))} | {d['backend']} | {d['model_label']} | {settings} | {d['test']} | {x.row.tps:g} | "
            f"{x.predicted:.1f} | {x.error:+.0%} | {d['address']} |"
        )
    return lines


def constants_lines(cal: Calibration, log: list[str]) -> list[str]:
    lines = [
        "| backend | bandwidth share (tg) | fixed per layer (tg) | FP16 throughput share (pp, quantized weights) "
        "| the same, unquantized weights and attention |",
        "|---|---|---|---|---|",
    ]
    for name, k in sorted(cal.backends.items()):
        lines.append(
            f"| {name} | {k.tg_efficiency:.2f} | {k.layer_us:.1f} us | {k.pp_efficiency:.2f} | {k.pp_share_16:.2f} |"
        )
    lines.append("")
    lines.append(
        f"Host RAM bandwidth share at generation: {cal.host_efficiency:.2f}; PCIe share of the prompt-batch weight "
        f"uploads: {cal.link_efficiency:.2f}; per device change of the layer chain: {cal.split_us:.0f} us."
    )
    lines.append("")
    lines += [f"- {line}" for line in log]
    return lines


def load_rows() -> list[Row]:
    doc = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return [Row(i, r) for i, r in enumerate(doc["rows"])]


def render(rows: list[Row], cal: Calibration, results: list[Result], log: list[str]) -> str:
    held = sum(1 for r in rows if r.held_out)
    parts = [
        "# How fast a plan runs: the speed model and its error",
        "",
        "<!-- generated by tools/speed_report.py --write; do not edit -->",
        "",
        "fitplan predicts, for every plan, the generation rate (tokens per second, at an empty context and at the "
        "plan's context) and the prompt rate (a 512-token prompt). The model is in `app/fitplan/core/speed/`: a "
        "generated token reads every weight a device holds (routed experts: `n_expert_used / n_expert` of them) "
        "and its KV cache at the depth reached (a sliding-window layer: at most its window), at a share of the device's peak memory bandwidth, plus a fixed "
        "time per layer; a prompt batch is computed at a share of the GPU's FP16 throughput (one share for quantized weights, "
        "which llama.cpp multiplies with its own kernels, one for unquantized weights and the attention, a float "
        "GEMM), and the weights left "
        "on the host are copied to the first GPU once per batch of 32 or more tokens (of the routed experts, the ones "
        "some token of the batch selects). Layer-split GPUs that hold every layer pipeline the micro-batches of one "
        "call (`llama-context.cpp`'s pipeline parallelism): a call of k micro-batches takes the sum of the GPUs' "
        "times plus k - 1 times the slowest one. The hardware figures are "
        "the vendors' (`app/fitplan/data/gpu_speed.json`, each with its source) or the driver's (NVML's bus width "
        "and memory clock; amdgpu's top memory clock with the catalog's bus width), and the "
        "host's RAM bandwidth is stated with every result (`--host-bandwidth` sets it).",
        "",
        f"The shares are fitted on published llama-bench results ({len(rows)} rows in "
        "`tests/fixtures/speed/published.json`, each with its address). One row in three is held out by a hash "
        "of its address and fields (the GPU count of a multi-GPU row among them) before anything is fitted "
        f"({held} held out); the tables below are the error "
        "on the held-out rows, which were never used for fitting. The band the CLI and the window show with a "
        "prediction is the range that holds 80% of the held-out rows of its class.",
        "",
        "## Targets (held-out rows)",
        "",
        "| kind | class | target | reached | verdict |",
        "|---|---|---|---|---|",
        *target_lines(results),
        "",
        "## Error per class, held-out rows",
        "",
        *class_table(results, True),
        "",
        "## Error per class, fit rows (for comparison)",
        "",
        *class_table(results, False),
        "",
        "## Fitted constants",
        "",
        *constants_lines(cal, log),
        "",
        "## What is not modelled",
        "",
        "- Row and tensor split (`-sm row`, `-sm tensor`) are computed as layer split. Few published multi-GPU "
        "rows name their GPUs; a class with fewer than three held-out rows shows the band of all held-out rows "
        "of its kind.",
        "- CPU-only plans use a stated host throughput (0.9 TFLOPS) for prompts; no CPU-only row is fitted.",
        "- Threads: the host term assumes enough threads to reach its bandwidth share.",
        "- Prompts with every layer on the host (`-ngl 0`): the attention runs on the CPU next to its KV cache; the "
        "one published row is far off (see the table), the CPU attention rate is not fitted.",
        "- Few published partial `-ngl` and expert-offload rows name their GPU, host RAM and settings: their bands "
        "come from few held-out rows (or all held-out rows of the kind). Rows of models whose layout has no header "
        "here (many recent expert-offload posts run Qwen3.5/3.6 35B-A3B) are not used.",
        "- ROCm and Vulkan have no published unquantized-weight prompt row: they use their quantized share for "
        "unquantized weights and the attention; ROCm's generation takes CUDA's time per layer (two fit rows).",
        "",
        "## Every row",
        "",
        *row_table(results),
        "",
    ]
    return "\n".join(parts)


def calibration_doc(cal: Calibration, results: list[Result]) -> str:
    doc = {
        "schema": 1,
        "about": "Written by tools/speed_report.py --write from tests/fixtures/speed/published.json: the speed "
        "model's fitted constants (fit rows only) and, per class and kind, the 80th percentile of the held-out "
        "|ln(predicted / measured)| (the band shown with a prediction).",
        "constants": {
            "backends": {
                k: {
                    "tg_efficiency": v.tg_efficiency,
                    "layer_us": v.layer_us,
                    "pp_efficiency": v.pp_efficiency,
                    "pp_efficiency_16": v.pp_efficiency_16,
                }
                for k, v in sorted(cal.backends.items())
            },
            "host_efficiency": cal.host_efficiency,
            "link_efficiency": cal.link_efficiency,
            "split_us": cal.split_us,
            "host_layer_us": cal.host_layer_us,
        },
        "bands": bands(results),
        "rows": {
            "fit": sum(1 for x in results if not x.row.held_out),
            "held_out": sum(1 for x in results if x.row.held_out),
        },
    }
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def generate() -> tuple[str, str, list[Result]]:
    rows = load_rows()
    log: list[str] = []
    cal = fit(rows, log)
    results = evaluate(rows, cal)
    return render(rows, cal, results, log), calibration_doc(cal, results), results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    doc, cal, _ = generate()
    print(doc)
    if args.write:
        DOC.write_text(doc, encoding="utf-8")
        CALIBRATION.write_text(cal, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
