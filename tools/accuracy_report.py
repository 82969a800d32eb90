"""Compare the estimator with every llama.cpp recording in tests/fixtures/llamacpp/ and write docs/accuracy.md.

Each recording (schema in tools/groundtruth/README.md) is a llama.cpp dry run of one model with one command line:
the bytes per buffer type and device of the model weights, the context (KV cache and recurrent state) and the
compute buffers. This module turns each case into fitplan settings (the same flags through `parse_flags`), runs
`estimate()` on the header-only model copy, and compares per device.

Usage:
    python tools/accuracy_report.py            # print the per-architecture table
    python tools/accuracy_report.py --write    # also write docs/accuracy.md and the bands the window and
                                               # `fitplan estimate` show (fitplan/data/accuracy_bands.json)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "llamacpp"
IK_FIXTURES = ROOT / "tests" / "fixtures" / "ik_llama"
#: The measured error bands the window and `fitplan estimate` show (`fitplan.core.estimate.accuracy`).
BANDS_PATH = ROOT / "app" / "fitplan" / "data" / "accuracy_bands.json"
sys.path.insert(0, str(ROOT / "app"))

from fitplan.core.base.devices import GIB, Device, DeviceKind, Machine, Vendor, host_device  # noqa: E402
from fitplan.core.base.errors import FitplanError  # noqa: E402
from fitplan.core.base.launch_settings import Engine, Tool  # noqa: E402
from fitplan.core.base.results import Estimate, TermKind  # noqa: E402
from fitplan.core.estimate.accuracy import ConfigClass, configuration_class  # noqa: E402
from fitplan.core.estimate.estimator import draft_estimate, estimate  # noqa: E402
from fitplan.core.gguf.reader import read_header  # noqa: E402
from fitplan.core.launch.flags import parse_flags  # noqa: E402
from fitplan.core.memory.weights import CpuFeatures  # noqa: E402
from fitplan.core.model.builder import build_profile  # noqa: E402
from fitplan.core.model.profile import ModelProfile  # noqa: E402

MIB = 1 << 20
#: The recordings were made on an x86-64 host with AVX2 and AVX-512 (CPU_REPACK then takes q4_0, q4_K, q2_K,
#: iq4_nl and mxfp4 weights).
RECORDING_CPU = CpuFeatures(avx2=True, avx512=True)
#: Compute targets: within 5% on >= 98% of cases (the issue asked for 90%), never more than 10% under.
COMPUTE_TOLERANCE = 0.05
COMPUTE_SHARE = 0.98
COMPUTE_MAX_UNDER = 0.10
TOTAL_MAX_UNDER = 0.02


@dataclass(frozen=True, slots=True)
class DeviceResult:
    name: str  # "Host", "RPC0", ...
    weights: tuple[int, int]  # (llama.cpp, estimate)
    context: tuple[int, int]
    compute: tuple[int, int]


#: Grids recorded with membreak's device-shaped stand-ins (tools/groundtruth/standin): GPU buffers sized by llama.cpp's
#: own scheduler and allocator as ggml-cuda (standin, standinarchs), ggml-vulkan (standin_vulkan) or ggml-metal
#: (standin_metal) answers them, and the backend whose figures each forms; every other grid is the "cpu" backend
#: (CPU buffers, and loopback RPC servers as extra devices).
STANDIN_BACKENDS = {
    "standin": "cuda",
    "standinarchs": "cuda",
    "standin_server": "cuda",
    "finer": "cuda",
    "standin_vulkan": "vulkan",
    "standin_metal": "metal",
}
STANDIN_GRIDS = frozenset(STANDIN_BACKENDS)
BACKENDS = ("cpu", "cuda", "vulkan", "metal")


@dataclass(frozen=True, slots=True)
class CaseResult:
    grid: str
    model: str
    architecture: str
    case: str
    devices: tuple[DeviceResult, ...] = ()
    error: str = ""  # the estimator failed
    expected_error: str = ""  # llama.cpp refused the settings (the estimate must refuse them too)
    mib_precision: bool = False  # the recording has MiB with two decimals (server logs), not bytes
    config: ConfigClass | None = None  # the configuration class of the estimated settings

    @property
    def key(self) -> str:
        return f"{self.grid}/{self.model}/{self.case}"

    @property
    def backend(self) -> str:
        return STANDIN_BACKENDS.get(self.grid, "cpu")

    def total(self, i: int) -> int:
        return sum(d.weights[i] + d.context[i] + d.compute[i] for d in self.devices)

    def compute_total(self, i: int) -> int:
        return sum(d.compute[i] for d in self.devices)

    @property
    def compute_rel(self) -> float:
        real = self.compute_total(0)
        return (self.compute_total(1) - real) / real if real else 0.0

    @property
    def total_rel(self) -> float:
        real = self.total(0)
        return (self.total(1) - real) / real if real else 0.0

    @property
    def weights_exact_mib(self) -> bool:
        return all(abs(d.weights[0] - d.weights[1]) < MIB for d in self.devices)

    @property
    def context_exact(self) -> bool:
        """Byte-exact, or to the log's precision (0.01 MiB) for server recordings."""
        tol = MIB // 100 if self.mib_precision else 0
        return all(abs(d.context[0] - d.context[1]) <= tol for d in self.devices)


#: grids checked by their own tests, not by this sweep: grid j's cases need inputs the sweep does not build (LoRA
#: adapters, an RPC device) and record llama-server's second compute reservation (tests/estimate/test_terms_recorded.py)
OWN_TEST_GRIDS = frozenset({"terms"})


def fixture_files() -> list[Path]:
    return sorted(p for p in FIXTURES.glob("*/*.json") if p.is_file() and p.parent.name not in OWN_TEST_GRIDS)


_PROFILES: dict[Path, ModelProfile] = {}


def load_profile(header: Path) -> ModelProfile:
    if header not in _PROFILES:
        _PROFILES[header] = build_profile(read_header(header, allow_incomplete=True))
    return _PROFILES[header]


def _machine(resolved: dict[str, object], rpc: tuple[str, ...] = ()) -> Machine:
    gpus: list[Device] = []
    devs = resolved.get("devices") or []
    assert isinstance(devs, list)
    if rpc:
        # Every --rpc server is a device; -dev / -sm none may have kept fewer in the recording.
        devs = [{"name": f"RPC{i}", "description": h} for i, h in enumerate(rpc)]
    for d in devs:
        assert isinstance(d, dict)
        # RPC servers on the recording host all report the host's memory: equal default splits.
        gpus.append(
            Device(
                name=str(d["name"]),
                kind=DeviceKind.GPU,
                total_bytes=64 * GIB,
                free_bytes=64 * GIB,
                vendor=Vendor.RPC,
                backend_name="",
                host=str(d.get("description", "")),
            )
        )
    return Machine(tuple(gpus), host_device(64 * GIB))


#: The stand-in kinds of membreak's `--standin` and the vendor fitplan plans them as.
#: fitplan plans ggml-vulkan for a GPU that is neither NVIDIA, AMD nor Apple (`gpu_backend`): Intel's.
STANDIN_VENDORS = {
    "cuda": (Vendor.NVIDIA, "CUDA"),
    "rocm": (Vendor.AMD, "ROCm"),
    "vulkan": (Vendor.INTEL, "Vulkan"),
    "metal": (Vendor.APPLE, "MTL"),
}


def standin_machine(spec: str) -> Machine:
    """The devices of a `--standin` recording (`cuda:24GiB:cc=89,...`), named as llama.cpp named them; a Vulkan
    device's `idx64=1` gives it 64-bit shader indexing (tools/groundtruth/standin/standin.cpp `parse_vulkan`)."""
    gpus: list[Device] = []
    counts: dict[str, int] = {}
    for one in spec.split(","):
        kind, size, *options = one.split(":")
        vendor, prefix = STANDIN_VENDORS[kind]
        total = int(float(size.removesuffix("GiB")) * GIB)
        i = counts.get(kind, 0)
        counts[kind] = i + 1
        gpus.append(
            Device(
                name=f"{prefix}{i}",
                kind=DeviceKind.GPU,
                total_bytes=total,
                free_bytes=total,
                vendor=vendor,
                backend_name=f"{prefix}{i}",
                shader_64bit_indexing=kind == "vulkan" and "idx64=1" in options,
            )
        )
    return Machine(tuple(gpus), host_device(64 * GIB))


#: The environment a recorded command ran with (llama-server on the dynamically loaded stand-in backend:
#: GGML_BACKEND_PATH=libggml-standin.so FITPLAN_STANDIN=cuda:24GiB llama-server ...).
STANDIN_ENV = "FITPLAN_STANDIN="


def _is_env(arg: str) -> bool:
    return arg.startswith(("GGML_BACKEND_PATH=", STANDIN_ENV))


def standin_spec(command: list[str]) -> str | None:
    for a in command:
        if a.startswith(STANDIN_ENV):
            return a.removeprefix(STANDIN_ENV)
    return command[command.index("--standin") + 1] if "--standin" in command else None


def settings_args(command: list[str]) -> tuple[list[str], bool]:
    """The llama-server flags of a recorded command line, and whether llama-server's own defaults apply."""
    command = [a for a in command if not _is_env(a)]
    args = list(command[1:])
    server = "--server-defaults" in args or command[0] == "llama-server"
    args = [a for a in args if a != "--server-defaults"]
    if "--standin" in args:
        i = args.index("--standin")
        del args[i : i + 2]
    if "-m" in args:
        i = args.index("-m")
        del args[i : i + 2]
    return args, server


def _header_for(path_arg: str) -> Path:
    """The header-only copy of a recorded model path ($MODELS/sparse/x.gguf or its .spm variant)."""
    rel = path_arg.replace("$MODELS/", "")
    rel = rel.removesuffix(".gguf").removesuffix(".spm")
    return FIXTURES / "models" / f"{rel}.header.gguf"


def _rpc_buffer_names(machine: Machine, rpc: tuple[str, ...]) -> Machine:
    """llama.cpp names an RPC buffer type `RPC<i>[host:port]`, with i the index of the server's device."""
    gpus = tuple(
        dataclasses.replace(g, backend_name=f"RPC0[{rpc[i]}]" if i < len(rpc) else g.backend_name)
        for i, g in enumerate(machine.gpus)
    )
    return Machine(gpus, machine.host)


def run_case(grid: str, model_name: str, header: Path, case: dict[str, object]) -> CaseResult:
    cmd = case["command"]
    assert isinstance(cmd, list)
    args, server = settings_args([str(a) for a in cmd])
    arch = ""
    try:
        profile = load_profile(header)
        arch = profile.architecture
        parsed = parse_flags(args)
        settings = dataclasses.replace(parsed.settings, tool=Tool.SERVER if server else Tool.FIT_PARAMS)
        mmproj = load_profile(_header_for(settings.mmproj_path)) if settings.mmproj_path else None
        dpath = settings.draft.model_path if settings.draft is not None else ""
        draft = load_profile(_header_for(dpath)) if dpath else None
        results = case.get("results")
        resolved = results.get("resolved", {}) if isinstance(results, dict) else {}
        assert isinstance(resolved, dict)
        spec = standin_spec([str(a) for a in cmd])
        machine = (
            standin_machine(spec)
            if spec
            else _rpc_buffer_names(_machine(resolved, parsed.rpc_servers), parsed.rpc_servers)
        )
        if "error" in case:
            try:
                estimate(profile, settings, machine, cpu=RECORDING_CPU)
            except FitplanError as exc:
                return CaseResult(
                    grid,
                    model_name,
                    arch,
                    str(case["id"]),
                    expected_error=str(case["error"]),
                    error=f"refused: {exc}",
                )
            return CaseResult(grid, model_name, arch, str(case["id"]), expected_error=str(case["error"]))
        est = estimate(profile, settings, machine, cpu=RECORDING_CPU, mmproj=mmproj, draft=draft)
    except FitplanError as exc:
        return CaseResult(grid, model_name, arch, str(case["id"]), error=f"{type(exc).__name__}: {exc}")
    assert isinstance(results, dict)
    config = configuration_class(profile, est)
    if "rows_mib" in results:
        devices = _compare_fit_params(results, est)
    elif "standin_alloc" in results:
        devices = _compare_standin_server(results, est, machine, draft)
    elif "buffers_mib" in results:
        devices = _compare_server(results, est)
    else:
        devices = _compare(results, est)
    return CaseResult(
        grid,
        model_name,
        arch,
        str(case["id"]),
        devices,
        mib_precision="buffers_mib" in results,
        config=config,
    )


def _floor_mib(n: int) -> int:
    return n // MIB * MIB


def _compare_fit_params(results: dict[str, object], est: Estimate) -> tuple[DeviceResult, ...]:
    """llama-fit-params stdout: whole MiB (rounded down) per device; its Host row leaves CPU_REPACK out."""
    rows = results["rows_mib"]
    assert isinstance(rows, list)
    real = {str(r["device"]): r for r in rows}
    out: list[DeviceResult] = []
    for de in est.devices:
        host = de.device.kind is DeviceKind.CPU
        name = "Host" if host else de.device.name
        r = real.get(name)
        if r is None:
            continue
        weights = de.bytes_of(TermKind.WEIGHTS)
        if host:
            weights -= sum(
                t.bytes for t in de.terms if t.kind is TermKind.WEIGHTS and t.label == "CPU_REPACK"
            )
        out.append(
            DeviceResult(
                name,
                (int(r["model"]) * MIB, _floor_mib(weights)),
                (
                    int(r["context"]) * MIB,
                    _floor_mib(de.bytes_of(TermKind.KV) + de.bytes_of(TermKind.RECURRENT)),
                ),
                (int(r["compute"]) * MIB, _floor_mib(de.bytes_of(TermKind.COMPUTE))),
            )
        )
    return tuple(out)


def _round_mib(n: int) -> int:
    """A byte count as llama-server's log prints it (MiB with two decimals), back in bytes."""
    return round(round(n / MIB, 2) * MIB)


def _compare_server(results: dict[str, object], est: Estimate) -> tuple[DeviceResult, ...]:
    """llama-server logs (MiB, two decimals, CPU only): model, KV and compute buffers, output and mmproj."""
    real = {"model": 0.0, "kv": 0.0, "rs": 0.0, "compute": 0.0, "output": 0.0}
    bufs = results["buffers_mib"]
    assert isinstance(bufs, list)
    for b in bufs:
        real[str(b["kind"])] += float(b["mib"])
    mm = results.get("mmproj_buffers_mib") or []
    assert isinstance(mm, list)
    host = est.devices[-1]
    out = [
        DeviceResult(
            "Host",
            (round(real["model"] * MIB), _round_mib(host.bytes_of(TermKind.WEIGHTS))),
            (
                round((real["kv"] + real["rs"]) * MIB),
                _round_mib(host.bytes_of(TermKind.KV) + host.bytes_of(TermKind.RECURRENT)),
            ),
            (round(real["compute"] * MIB), _round_mib(host.bytes_of(TermKind.COMPUTE))),
        )
    ]
    if mm:
        mw = sum(float(b["mib"]) for b in mm if b["kind"] == "model")
        mc = sum(float(b["mib"]) for b in mm if b["kind"] == "compute")
        terms = [t for t in host.terms if t.kind is TermKind.MMPROJ]
        ew = sum(t.bytes for t in terms if t.label == "mmproj weights")
        ec = sum(t.bytes for t in terms if t.label == "mmproj compute")
        out.append(
            DeviceResult(
                "mmproj", (round(mw * MIB), _round_mib(ew)), (0, 0), (round(mc * MIB), _round_mib(ec))
            )
        )
    return tuple(out)


def _log_device(buffer_type: object) -> str:
    """The device a logged buffer type is memory of: the GPU's own ("CUDA0"), else the host (CPU, CPU_Mapped,
    CPU_REPACK, the pinned CUDA_Host)."""
    bt = str(buffer_type or "CPU")
    return "Host" if bt.startswith("CPU") or bt.endswith("_Host") else bt


def _compare_standin_server(
    results: dict[str, object], est: Estimate, machine: Machine, draft: ModelProfile | None
) -> tuple[DeviceResult, ...]:
    """llama-server on a CUDA-shaped stand-in (its log, MiB with two decimals): per device the text model's model,
    KV and compute buffers; then per device the projector's weights and warm-up compute (clip's log: the weights
    on the device clip computes on) and the draft model's buffers (its own estimate, `draft_estimate`, which the
    target's estimate counts as one draft term per device)."""
    cols = {"model": 0, "kv": 1, "rs": 1, "compute": 2}
    real: dict[str, list[float]] = {}
    bufs = results["buffers_mib"]
    assert isinstance(bufs, list)
    for b in bufs:
        real.setdefault(_log_device(b["buffer_type"]), [0.0, 0.0, 0.0])[cols[str(b["kind"])]] += float(
            b["mib"]
        )
    out: list[DeviceResult] = []
    for de in est.devices:
        name = "Host" if de.device.kind is DeviceKind.CPU else de.device.name
        r = real.get(name, [0.0, 0.0, 0.0])
        out.append(
            DeviceResult(
                name,
                (round(r[0] * MIB), _round_mib(de.bytes_of(TermKind.WEIGHTS))),
                (round(r[1] * MIB), _round_mib(de.bytes_of(TermKind.KV) + de.bytes_of(TermKind.RECURRENT))),
                (round(r[2] * MIB), _round_mib(de.bytes_of(TermKind.COMPUTE))),
            )
        )
    mm = results.get("mmproj_buffers_mib") or []
    assert isinstance(mm, list)
    if mm:
        computes = [b for b in mm if b["kind"] == "compute"]
        on = next(
            (_log_device(b["buffer_type"]) for b in computes if _log_device(b["buffer_type"]) != "Host"),
            "Host",
        )
        for de in est.devices:
            name = "Host" if de.device.kind is DeviceKind.CPU else de.device.name
            w = sum(float(b["mib"]) for b in mm if b["kind"] == "model") if name == on else 0.0
            c = sum(float(b["mib"]) for b in computes if _log_device(b["buffer_type"]) == name)
            terms = [t for t in de.terms if t.kind is TermKind.MMPROJ]
            ew = sum(t.bytes for t in terms if t.label == "mmproj weights")
            ec = sum(t.bytes for t in terms if t.label == "mmproj compute")
            out.append(
                DeviceResult(
                    f"mmproj {name}",
                    (round(w * MIB), _round_mib(ew)),
                    (0, 0),
                    (round(c * MIB), _round_mib(ec)),
                )
            )
    dbufs = results.get("draft_buffers_mib") or []
    assert isinstance(dbufs, list)
    if dbufs and draft is not None:
        dreal: dict[str, list[float]] = {}
        for b in dbufs:
            acc = dreal.setdefault(_log_device(b["buffer_type"]), [0.0, 0.0, 0.0])
            acc[cols[str(b["kind"])]] += float(b["mib"])
        sub = draft_estimate(draft, est.settings, machine, est.context.n_ctx, RECORDING_CPU)
        for de in sub.devices:
            name = "Host" if de.device.kind is DeviceKind.CPU else de.device.name
            r = dreal.get(name, [0.0, 0.0, 0.0])
            out.append(
                DeviceResult(
                    f"draft {name}",
                    (round(r[0] * MIB), _round_mib(de.bytes_of(TermKind.WEIGHTS))),
                    (
                        round(r[1] * MIB),
                        _round_mib(de.bytes_of(TermKind.KV) + de.bytes_of(TermKind.RECURRENT)),
                    ),
                    (round(r[2] * MIB), _round_mib(de.bytes_of(TermKind.COMPUTE))),
                )
            )
    return tuple(out)


def _compare(results: dict[str, object], est: Estimate) -> tuple[DeviceResult, ...]:
    real: dict[str, list[int]] = {}
    buffers = results["buffers"]
    assert isinstance(buffers, list)
    for b in buffers:
        dev = b["device"]
        # a GPU's pinned host buffer type (CUDA_Host) names the GPU as its device, but it is host memory
        name = "Host" if dev in (None, "CPU") or (b.get("is_host") and dev is not None) else str(dev)
        acc = real.setdefault(name, [0, 0, 0])
        acc[0] += int(b["model"])
        acc[1] += int(b["context"])
        acc[2] += int(b["compute"])
    out: list[DeviceResult] = []
    for i, de in enumerate(est.devices):
        name = "Host" if de.device.kind is DeviceKind.CPU else de.device.name
        r = real.get(name, [0, 0, 0])
        del i
        out.append(
            DeviceResult(
                name,
                (r[0], de.bytes_of(TermKind.WEIGHTS)),
                (r[1], de.bytes_of(TermKind.KV) + de.bytes_of(TermKind.RECURRENT)),
                (r[2], de.bytes_of(TermKind.COMPUTE)),
            )
        )
    return tuple(out)


#: Grids of the architecture smoke models of `test-llama-archs` (hidden size 128-512, vocabulary 128): `archs`,
#: `quantkv` (quantized K/V caches with flash attention), `widearchs` (the wider settings sample of some graph
#: classes) and `newarchs` (the newer architectures over a sampled wide grid); the other grids hold published
#: shapes.
SMOKE_GRIDS = frozenset({"archs", "quantkv", "widearchs", "newarchs", "standinarchs"})
_QUANT_FREE_CACHE_TYPES = frozenset({"f16", "bf16", "f32"})


def config_class(settings: dict[str, object]) -> str:
    """The configuration class of a recording: cache types, flash attention and micro-batch ("K/V quantized, FA
    on, ub 2048")."""
    quant = any(str(settings.get(k) or "f16") not in _QUANT_FREE_CACHE_TYPES for k in ("type_k", "type_v"))
    fa = str(settings.get("flash_attn") or "auto")
    ub = settings.get("n_ubatch")
    ub_text = f"ub {ub}" if isinstance(ub, int) and ub > 512 else "ub 512"
    return f"K/V {'quantized' if quant else 'f16'}, FA {fa}, {ub_text}"


def all_results() -> Iterator[CaseResult]:
    for path in fixture_files():
        data = json.loads(path.read_text())
        model = data["model"]
        header = FIXTURES / model["header"] if model.get("header") else _header_for(str(model["path_hint"]))
        for case in data["cases"]:
            yield run_case(path.parent.name, str(model["name"]), header, case)


@dataclass(frozen=True, slots=True)
class Summary:
    results: tuple[CaseResult, ...]

    def on(self, backend: str) -> Summary:
        """The results of one backend's recordings (`BACKENDS`)."""
        return Summary(tuple(r for r in self.results if r.backend == backend))

    @property
    def measured(self) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.results if r.devices and not r.error)

    @property
    def errors(self) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.results if r.error and not r.expected_error)

    @property
    def compute_misses(self) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.measured if abs(r.compute_rel) > COMPUTE_TOLERANCE)

    @property
    def compute_far_under(self) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.measured if r.compute_rel < -COMPUTE_MAX_UNDER)

    @property
    def compute_share_ok(self) -> float:
        m = self.measured
        return 1.0 - len(self.compute_misses) / len(m) if m else 0.0

    @property
    def weights_misses(self) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.measured if not r.weights_exact_mib)

    @property
    def context_misses(self) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.measured if not r.context_exact)

    @property
    def total_far_under(self) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.measured if r.total_rel < -TOTAL_MAX_UNDER)


def summarize() -> Summary:
    return Summary(tuple(all_results()))


def ik_results() -> tuple[CaseResult, ...]:
    """The ik_llama.cpp recordings (tests/fixtures/ik_llama/: one CPU context per case, its K/V cache tensors in
    bytes and its compute buffer in MiB with two decimals; no weights) compared with the estimate."""
    out: list[CaseResult] = []
    host = Machine((), host_device(64 * GIB))
    for path in sorted(IK_FIXTURES.glob("*.json")):
        data = json.loads(path.read_text())
        profile = load_profile(IK_FIXTURES / data["model"]["header"])
        for case in data["cases"]:
            if "error" in case:
                continue
            args, _ = settings_args([str(a) for a in case["command"]])
            settings = parse_flags(args, engine=Engine.IK_LLAMA).settings
            n_seq = int(case["resolved"]["n_seq_max"])
            est = estimate(profile, dataclasses.replace(settings, n_parallel=n_seq), host, cpu=RECORDING_CPU)
            res = case["results"]
            compute = sum(float(b["mib"]) for b in res["compute_buffers_mib"])
            mine = est.devices[-1]
            dev = DeviceResult(
                "Host",
                (0, 0),
                (int(res["k_bytes"]) + int(res["v_bytes"]), mine.bytes_of(TermKind.KV)),
                (round(compute * MIB), _round_mib(mine.bytes_of(TermKind.COMPUTE))),
            )
            config = configuration_class(profile, est)
            out.append(
                CaseResult("ik_llama", str(data["model"]["name"]), profile.architecture, str(case["id"]), (dev,),
                           config=config)
            )  # fmt: skip
    return tuple(out)


MAINLINE_MEASUREMENT = (
    "llama.cpp 515e85511 (build 11434) dry runs on a CPU build, loopback RPC servers as extra devices "
    "(every recording in tests/fixtures/llamacpp)"
)
STANDIN_MEASUREMENT = (
    "llama.cpp 515e85511 (build 11434) dry runs on CUDA-shaped stand-in devices: its own scheduler and allocator "
    "size every GPU buffer as ggml-cuda answers them, no kernel runs (tests/fixtures/llamacpp/standin*)"
)
VULKAN_MEASUREMENT = (
    "llama.cpp 515e85511 (build 11434) dry runs on Vulkan-shaped stand-in devices (16 GiB: 64-byte offsets, 1 GiB "
    "buffers, 4 GiB storage range): its own scheduler and allocator size every buffer as ggml-vulkan answers them, "
    "no kernel runs (tests/fixtures/llamacpp/standin_vulkan)"
)
METAL_MEASUREMENT = (
    "llama.cpp 515e85511 (build 11434) dry runs on a Metal-shaped stand-in device (64 GiB of unified memory): its "
    "own scheduler and allocator size every buffer as ggml-metal answers them, no kernel runs "
    "(tests/fixtures/llamacpp/standin_metal)"
)
#: The measurement behind each GPU backend's figures.
BACKEND_MEASUREMENTS = {"cuda": STANDIN_MEASUREMENT, "vulkan": VULKAN_MEASUREMENT, "metal": METAL_MEASUREMENT}
IK_MEASUREMENT = "ik_llama.cpp 55d3c05bf contexts on the CPU (tests/fixtures/ik_llama)"
FORK_NOTES = {
    "beellama": "its cache sizes are compared with beellama.cpp's published figures (tools/engines_report.py), "
    "not with recorded runs",
    "ollama": "ollama runs its own vendored llama.cpp, not 515e85511, and no run of it is recorded",
}


def band_figures(rs: list[CaseResult], weights: bool = True) -> dict[str, object]:
    """One band of the data file; the percentages rounded as they are shown (one decimal)."""
    doc: dict[str, object] = {
        "cases": len(rs),
        "compute_min_pct": round(min(r.compute_rel for r in rs) * 100, 1),
        "compute_max_pct": round(max(r.compute_rel for r in rs) * 100, 1),
        "kv_exact": sum(r.context_exact for r in rs),
    }
    if weights:
        doc["weights_exact"] = sum(r.weights_exact_mib for r in rs)
    return doc


def _bands(results: tuple[CaseResult, ...], weights: bool) -> dict[str, dict[str, dict[str, object]]]:
    groups: dict[str, dict[str, list[CaseResult]]] = {}
    for r in results:
        assert r.config is not None
        groups.setdefault(r.architecture or r.model, {}).setdefault(r.config.key, []).append(r)
    return {a: {k: band_figures(rs, weights) for k, rs in c.items()} for a, c in groups.items()}


def _engine_bands(s: Summary, measurement: str) -> dict[str, object]:
    every: dict[str, list[CaseResult]] = {}
    for r in s.measured:
        assert r.config is not None
        every.setdefault(r.config.key, []).append(r)
    return {
        "measurement": measurement,
        "architectures": _bands(s.measured, weights=True),
        "all": {k: band_figures(rs) for k, rs in every.items()},
    }


def bands_document(s: Summary, ik: tuple[CaseResult, ...]) -> dict[str, object]:
    """The measured error bands per engine, architecture and configuration class
    (`fitplan.core.estimate.accuracy`): llama.cpp's with a band across all architectures for the others, from
    the CPU recordings and, for plans on CUDA or ROCm GPUs, from the stand-in recordings; ik_llama.cpp's for the
    architectures it was recorded with only."""
    return {
        "generated_by": "python tools/accuracy_report.py --write",
        "engines": {
            Engine.LLAMA_CPP.value: {
                **_engine_bands(s.on("cpu"), MAINLINE_MEASUREMENT),
                "backends": {
                    b: _engine_bands(s.on(b), m) for b, m in BACKEND_MEASUREMENTS.items() if s.on(b).measured
                },
            },
            Engine.IK_LLAMA.value: {
                "measurement": IK_MEASUREMENT,
                "architectures": _bands(ik, weights=False),
            },
            **{name: {"note": note} for name, note in FORK_NOTES.items()},
        },
    }


def bands_json(s: Summary, ik: tuple[CaseResult, ...]) -> str:
    """The data file's text: sorted keys, so that the same recordings give the same bytes."""
    return json.dumps(bands_document(s, ik), indent=1, sort_keys=True) + "\n"


def markdown(every: Summary) -> str:
    s = every.on("cpu")
    lines = [
        "# Accuracy against llama.cpp",
        "",
        "Generated by `python tools/accuracy_report.py --write` from every recording in `tests/fixtures/llamacpp/`",
        "(llama.cpp 515e85511, build 11434, CPU build with loopback RPC servers as extra devices; the GPU recordings",
        "on device-shaped stand-ins have their own section below).",
        "`tests/estimate/test_accuracy.py` asserts the same targets. The same run writes",
        "`app/fitplan/data/accuracy_bands.json`: the compute error range per architecture and configuration class",
        "(`fitplan.core.estimate.accuracy.configuration_class`: flash attention on or off, f16 or quantized K/V cache,",
        "one device or a split), which the window and `fitplan estimate` show next to the estimate.",
        "",
        *_target_lines(s),
        "",
        "## Per architecture",
        "",
        "| grid | architecture | cases | weights exact | KV exact | compute within 5% | compute error range |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += _group_rows(s, lambda r: r.architecture or r.model)
    lines += [
        "",
        "## Per configuration class",
        "",
        "| configuration | cases | compute within 5% | worst under | worst over | totals > 2% under |",
        "|---|---|---|---|---|---|",
    ]
    lines += _class_rows(s, totals=True)
    if s.errors:
        lines += ["", "## Estimator errors", ""]
        lines += [f"* `{r.key}`: {r.error}" for r in s.errors]
    lines += gpu_markdown(every.on("cuda"))
    for backend in ("vulkan", "metal"):
        lines += backend_markdown(every.on(backend), backend)
    lines += ["", "## What is modelled and what is assumed", "", MODEL_NOTES]
    return "\n".join(lines) + "\n"


def _target_lines(s: Summary) -> list[str]:
    return [
        f"* cases compared: {len(s.measured)}; estimator errors: {len(s.errors)}",
        f"* weights exact to the MiB on every device: {len(s.measured) - len(s.weights_misses)}/{len(s.measured)}",
        f"* KV + recurrent state byte-exact on every device: {len(s.measured) - len(s.context_misses)}/"
        f"{len(s.measured)}",
        f"* compute within {COMPUTE_TOLERANCE:.0%}: {s.compute_share_ok:.1%} of cases "
        f"(target {COMPUTE_SHARE:.0%}); more than {COMPUTE_MAX_UNDER:.0%} under: {len(s.compute_far_under)}",
        f"* totals more than {TOTAL_MAX_UNDER:.0%} under: {len(s.total_far_under)}",
    ]


def _group_rows(s: Summary, name: Callable[[CaseResult], str]) -> list[str]:
    """One table row per grid and model (or architecture): cases, exact weights and caches, compute."""
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    for r in s.measured:
        groups.setdefault((r.grid, name(r)), []).append(r)
    lines = []
    for (grid, label), rs in sorted(groups.items()):
        w = sum(r.weights_exact_mib for r in rs)
        k = sum(r.context_exact for r in rs)
        c = sum(abs(r.compute_rel) <= COMPUTE_TOLERANCE for r in rs)
        lo = min(r.compute_rel for r in rs)
        hi = max(r.compute_rel for r in rs)
        lines.append(f"| {grid} | {label} | {len(rs)} | {w} | {k} | {c} | {lo:+.1%} .. {hi:+.1%} |")
    return lines


def _class_rows(s: Summary, totals: bool) -> list[str]:
    """One table row per configuration class: compute within 5%, the worst errors (and totals under)."""
    by_config: dict[str, list[CaseResult]] = {}
    for r in s.measured:
        by_config.setdefault(r.config.label if r.config else "", []).append(r)
    lines = []
    for config, rs in sorted(by_config.items()):
        c = sum(abs(r.compute_rel) <= COMPUTE_TOLERANCE for r in rs)
        lo = min(r.compute_rel for r in rs)
        hi = max(r.compute_rel for r in rs)
        row = f"| {config} | {len(rs)} | {c} ({c / len(rs):.1%}) | {lo:+.1%} | {hi:+.1%} |"
        if totals:
            row += f" {sum(r.total_rel < -TOTAL_MAX_UNDER for r in rs)} |"
        lines.append(row)
    return lines


def gpu_markdown(s: Summary) -> list[str]:
    """The CUDA section: the recordings on device-shaped stand-ins, per grid and model and per class."""
    if not s.measured:
        return []
    lines = [
        "",
        "## CUDA and ROCm (device-shaped stand-ins)",
        "",
        "The `standin` and `standinarchs` grids: llama.cpp 515e85511's own scheduler and allocator on devices that",
        "answer them as ggml-cuda does (`tools/groundtruth/standin/standin.cpp`: the CUDA buffer type's 128-byte",
        "alignment and padded quantized rows, the flash-attention kernel's f16 copies of a quantized cache, the",
        "supported and offloaded ops, the pinned host buffer, events), one to four 24 GiB cards of compute",
        "capability 7.0-8.9 and an RDNA3 card (ggml-cuda built for HIP). No kernel runs, so what only a running GPU",
        "allocates (the CUDA context, cuBLAS workspaces, the pool) is not in these figures: that is the runtime",
        "reserve. Expected = llama.cpp's, estimated = fitplan's. The `standin_server` grid runs llama-server itself on",
        "the stand-in (loaded as a dynamic backend, `libggml-standin.so`) with a projector on the GPU or a draft model:",
        "its log's buffers in MiB, the projector's and the draft's rows named `mmproj <device>` and `draft <device>`.",
        "",
        *_target_lines(s),
        "",
        "| grid | model | cases | weights exact | KV exact | compute within 5% | compute error range |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += _group_rows(s, lambda r: r.model if r.grid == "standin" else r.architecture or r.model)
    lines += [
        "",
        "| configuration | cases | compute within 5% | worst under | worst over |",
        "|---|---|---|---|---|",
    ]
    lines += _class_rows(s, totals=False)
    lines += ["", "Cases more than 10% under:", ""]
    lines += [f"* `{r.key}` {r.compute_rel:+.1%}" for r in s.compute_far_under] or ["* none"]
    lines += ["", GPU_NOTES]
    return lines


#: The Vulkan and Metal sections: title, what the stand-in answers, and what the comparison shows.
BACKEND_SECTIONS = {
    "vulkan": (
        "Vulkan (device-shaped stand-ins)",
        """The `standin_vulkan` grid: llama.cpp 515e85511's own scheduler and allocator on devices that answer them as
ggml-vulkan does (`tools/groundtruth/standin/standin.cpp`, `--standin vulkan:16GiB`: the buffer type's
minStorageBufferOffsetAlignment, 64 bytes here, and no row padding; its maximum buffer size, the 1 GiB
suballocation block, which makes ggml-alloc split weights into buffers and the compute buffer into chunks; the
pinned `Vulkan_Host` buffer; `supports_op` with its size limit: an op whose tensor is larger than the 4 GiB
maxStorageBufferRange or buffer size runs on the CPU; `offload_op` from 32 tokens), one and two 16 GiB cards.
fitplan plans a GPU with ggml-vulkan's rules when it is neither NVIDIA, AMD nor Apple (Intel): an NVIDIA or AMD
card on a Vulkan build is planned with ggml-cuda's rules. Weights and caches are exact (64-byte alignment, no row
padding); the compute model has the effects of the buffer type's limits (`DevicePlan.max_chunk`,
`terms.Chunks`):""",
        """* **1 GiB chunks.** ggml-alloc's compute buffer on a Vulkan device is made of chunks of at most 1 GiB
  (`ggml_dyn_tallocr`, `max_size` = `ggml_backend_vk_buffer_type_get_max_size`): a tensor that does not fit in
  what is left of any chunk opens a new one, and the buffer is the sum of the chunks. At `-ub 2048` the logits
  (2048 x 128256 x 4 B = 1002 MiB for llama-3.1-8b, 1187 MiB for Qwen3's vocabulary) do not fit above what lies
  under them, so they take a chunk of their own: the buffer is the larger of the layer phase and what is under
  the logits, plus the logits (llama-3.1-8b c4096 FA on: 1482.1 MiB recorded, 1146.0 estimated before, 1514.0
  now). KQ scores that do not fit in a chunk next to a block open one of their own; once freed, that chunk is the
  only one with room below its end, so when the FFN finds no space in the first chunk it goes there and the
  layer's output stays in it: the next layer's scores open another chunk, and the scores count twice (the
  allocator's trace, llama-3.1-8b at 32768 cells and `-ub 512` without flash attention: `kq-0` in chunk 1,
  `ffn_out-0` at offset 0 of chunk 1, `kq-1` in chunk 2; 4204 MiB recorded, 2164 estimated before, 4212 now).
  Where a smaller layer shape's live set leaves the FFN room in the first chunk (gemma-3-27b's sliding-window
  layers), the scores count once. With two caches the layers' scores take chunks in graph order, each into the
  chunk ggml-alloc picks (the free end it fills best without growing, else the least growth) or a new one
  (`Chunks.score_chunks`): gpt-oss at 4096 cells and `-ub 2048` without flash attention, `kq-0` (sliding window,
  1152 MiB) opens chunk 1, `kq-1` (full, 2048 MiB) chunk 2 where the later scores fit (3420 MiB recorded, 4284
  estimated before, 3392 now); the FFN's hold on a chunk ends at a layer whose scores stay in the first chunk or
  run on the host (gpt-oss at 32768 cells: 2911 MiB recorded, 4287 before, 3139 now; gemma-3-27b at 4096 cells:
  4245 recorded, 3393 before, 4161 now).
* **Expert copies larger than a chunk.** With op offload the GPU copies in each host matrix it multiplies by, one
  at a time; a copy larger than a chunk fits in none and opens a chunk of its own sized to it
  (`ggml_dyn_tallocr_new_chunk`), which the next copies of that size reuse (`_own_chunk_copies`): DeepSeek-V3
  with `-cmoe`, chunk 1 of 2016 MiB for gate's and up's copies, chunk 2 of 2940 MiB for down's, the rest of the
  graph in chunk 0 (5356 MiB recorded, 3162 estimated before, 5356 now; -ngl 30 and `-ub 2048` alike).
* **A layer phase larger than a chunk** with no tensor that opens one by itself: DeepSeek-V3's absorbed query at
  `-ub 2048`, whose parts fill the first chunk (q, q_nope_absorbed, q_pe) until Qcur opens the next, where the
  logits grow once the attention is freed. Where a layer's tensors go depends on the free blocks the layers
  before it left (the residual each layer leaves where its FFN output landed, the experts' outputs, the router's
  small tensors), so with flash attention and every layer's FFN on the device the device's whole layer phase is
  replayed, layer after layer from what lies in the first chunk when its first layer starts (the
  pipeline-parallel copies too), then the output phase (the last layer's output rows, the logits), over chunks
  and in one buffer (`layer_replay.replay_layers`; a run of same-shaped layers stops once a layer leaves the
  allocator as it found it). The difference is what the chunks add (`terms.ChunkSpill`, the logits' chunk
  included: the device's phases are otherwise counted as in one buffer), and the replay over chunks is a floor
  on the device's terms: what it holds beyond them are the free blocks the layers leave between the tensors
  they carry (`terms.ReplayedBuffer`, `DevicePlan.replayed`; DeepSeek-V3 over two devices in one buffer: the
  peak at layer 2's Qcur with layer 1's output above a 120 MiB hole, 2432 MiB recorded, 2368 from the other
  terms). DeepSeek-V3: 2018 MiB recorded at 4096 cells, 1954 estimated with the first layer's attention
  replayed alone, 2018 now; 2194 at 32768 cells, 2130 before, 2194 now; over two devices with `-ts 3,1`, where
  the later layers' query parts spread over four chunks (Vulkan0: 976, 704, 632 and 576 MiB), 2888 and 2998 MiB
  recorded, 2368 and 2522 before (15% under), 2888 and 2998 now, and with llama-server's reserve (one output
  row) 2888 and 2564, 2368 and 2088 before. DeepSeek-V2-Lite with `-ts 3,1`: the pipeline-parallel copies under
  the 800 MiB logits send them to a chunk of their own, which the output phase's own-chunk rule missed (Vulkan1
  1412 MiB recorded, 1072 before, 1412 now); its 1600 MiB logits at `-ub 4096` take a chunk of their own once
  (2273 MiB recorded and estimated). Left: without flash attention, with the experts' copies in chunks of their
  own or a layer's FFN elsewhere, the first layer's attention is still replayed alone (DeepSeek-V3 at 32768 cells
  without flash attention: 2002 MiB recorded on the GPU, 2258 estimated; DeepSeek-V2-Lite there, with its scores
  on the host: 864 recorded, 1376 estimated, +9.5% in all, not traced); the same fragmentation on the CUDA
  stand-in, which has no replay (DeepSeek-V3 `-ts 3,1`: CUDA0 2432 MiB recorded, 2368 estimated).
* **64-bit shader indexing is a device property.** DeepSeek-V2-Lite's KQ scores at 32768 cells and `-ub 2048`
  are exactly 4 GiB: a device with VK_EXT_shader_64bit_indexing takes them (`supports_op`: up to
  `max_buffer_size`), one without refuses them (maxStorageBufferRange, 4 GiB - 1). `Device.shader_64bit_indexing`
  says which (the stand-in's `idx64=1`); fitplan detects no Vulkan extension and plans a real GPU without it, the
  lower limit (the extension was released in late 2025, and the public sources searched show no Intel driver,
  Mesa ANV or Windows, exposing it). On the device the scores count twice: gate and up (85.5 MiB each) exceed the space Qcur
  leaves in chunk 0, `ffn_up-0` goes into the first scores' freed chunk, the layer's output follows it there and
  the next layer's scores open another chunk (the allocator's trace: 8672 MiB recorded, 1376.5 estimated with the
  scores on the host, 34% under; 8672 now). At `-ub 512` V's MLA copy lies above Qcur and its freed space holds the
  FFN: the 1 GiB scores count once (1176 MiB).
* **Tensors above the storage range run on the host.** Without 64-bit shader indexing a tensor above
  maxStorageBufferRange (4 GiB) or the buffer size (4 GiB here: the `idx64` recordings keep the buffer limit) is
  refused by `supports_op`, so at 32768 cells and `-ub 2048` without flash attention the 8 GiB KQ scores and
  their softmax run on the host, with copies of the K and V views (`terms.HostScores`): llama-3.1-8b's host
  8656 MiB recorded, 8720 estimated (400 before, with the scores on the GPU). The GPU's buffer there is still
  over (1770 MiB for 1482: its mask copy, which the host's softmax reads, is counted on it). The host copies Q
  in too, a whole `[n_head x head_k, n_tok]` f32 (`CPU#Qcur-0`): small for llama-3.1-8b (32 MiB), 576 MiB for
  DeepSeek-V3's absorbed query (its host at 4096 cells: 4816 MiB recorded, 4357 estimated before, 4933 now).""",
    ),
    "metal": (
        "Metal (device-shaped stand-in)",
        """The `standin_metal` grid: llama.cpp 515e85511's own scheduler and allocator on a device that answers them
as ggml-metal does (`tools/groundtruth/standin/standin.cpp`, `--standin metal:64GiB`: the 32-byte alignment, the
allocation extras of `ggml_backend_metal_buffer_type_get_alloc_size` for MUL_MAT_ID, FLASH_ATTN_EXT, ARGSORT and
TOP_K, no host buffer type, so host weights and compute stay in CPU buffers, `supports_op` of an Apple7+ GPU,
`offload_op` for matrix multiplications only), one 64 GiB device. The host side is the recording host's CPU
(x86-64 AVX2/AVX-512 repacking), not an Apple CPU's. Weights and caches are exact; the compute model has Metal's
rules:""",
        """* **Flash attention's scratch is always reserved** on Metal (`ggml_metal_op_flash_attn_ext_extra_*`:
  "always reserve the temp buffer to avoid graph reallocations"): each FLASH_ATTN_EXT output is larger by the
  f16 size of its K and V views (one view when V is a view of K), a padding block of 64 cells, the block mask and
  the workgroup results, `4 x min(n_tok, 32) x n_head x 32 x (d_v + 2)` bytes (`PlanBuilder.metal_fa_scratch`;
  in the absorbed-MLA replay for DeepSeek). llama-3.1-8b at 131072 cells: 706.5 MiB recorded, 410.5 estimated
  before, within 1% now; DeepSeek-V3 at 4096 cells (128 heads of 512: 257 MiB of workgroup results): 785.7
  recorded, 410 before, 799.7 now.
* **Op offload of matrix multiplications.** `ggml_backend_metal_device_offload_op` offloads MUL_MAT and
  MUL_MAT_ID from 32 tokens, not the other ops of a host layer. With experts in host memory, the expert matrices
  in a host buffer (not repacked for the CPU: a CPU_REPACK buffer is not a host buffer, so its multiplications
  stay) are copied into the GPU's buffer one at a time and the experts run there (`matmul_offload`; DeepSeek-V3
  `-cmoe`: 3212.5 MiB recorded, 808 before, 3194 now). A host layer's down matrix in a host buffer (Q6_K in the
  K-quant mixes, not repacked) is multiplied on the GPU too, and the scheduler's upward expansion gives the GPU
  the GLU that feeds it: the host keeps gate's and up's outputs only (`_host_glu_offloaded`; llama-3.1-8b
  `-ngl 16`: host 104 MiB recorded, 132 estimated before, 104 now; `-ot ffn=CPU` and Qwen3-30B-A3B alike), and
  the GPU holds the GLU output, the down matrix's copy and the down output. An absorbed-MLA host layer whose
  `attn_k_b` is not repacked runs its attention on the GPU (`_host_mla_offloaded`): DeepSeek-V3 with half its
  layers on the host, 3189 MiB recorded on MTL0 (766 before, 3120 now) and 150 on the host (414 before, 150
  now).""",
    ),
}


def backend_markdown(s: Summary, backend: str) -> list[str]:
    """The Vulkan or Metal section: the recordings on that backend's stand-ins, per model and per class."""
    if not s.measured:
        return []
    title, intro, notes = BACKEND_SECTIONS[backend]
    lines = ["", f"## {title}", "", intro, "", *_target_lines(s), ""]
    lines += [
        "| grid | model | cases | weights exact | KV exact | compute within 5% | compute error range |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += _group_rows(s, lambda r: r.model)
    lines += [
        "",
        "| configuration | cases | compute within 5% | worst under | worst over |",
        "|---|---|---|---|---|",
    ]
    lines += _class_rows(s, totals=False)
    lines += ["", "Cases more than 5% off:", ""]
    lines += [f"* `{r.key}` {r.compute_rel:+.1%}" for r in s.compute_misses] or ["* none"]
    lines += ["", notes]
    return lines


GPU_NOTES = """What the stand-in recordings changed in the model (each read from the allocator's list of live tensors at every
new peak, `GGML_ALLOCATOR_DEBUG`):

* **Op offload copies are transient.** With a weight in host memory and a micro-batch of 32 tokens or more the
  scheduler gives its multiplication to the first GPU and copies the weight in at the start of a split of its
  own, freed after that multiplication (`ggml_backend_sched_split_graph`). The copies follow each other through
  one space: gate's, then up's in gate's place, then down's above the GLU output (`offloaded_ffn_peak`), instead
  of a copy of every FFN matrix of a layer on top of everything (up to 132% over on DeepSeek-V3 with `-cmoe`,
  up to 220% on gpt-oss-120b). The ops between follow the weights to the GPU, so a host layer's activations,
  its K/V views and the output layer's logits (with the output matrix's copy) are on the first GPU and the host
  keeps only the graph inputs (`-ngl 0` and partial `-ngl`).
* **The first GPU's FFN phase has four block spaces.** The scheduler's copies of the embeddings inputs are
  freed once the first layer's input is built and the attention output sits between the freed blocks: the FFN
  phase has one block space fewer than the attention's and the FFN norm's hole is one block (the allocator's
  list, llama-3.1-8b at 4096 cells: 120.01 MiB; `PlanBuilder._split_first`). With llama-server's small output
  count that phase is the peak: every text model's and the draft's GPU buffer with flash attention is now what
  llama.cpp logged (llama-3.1-8b 120.0 MiB recorded, 128.0 estimated before), and the architecture smoke models
  gain most (`standinarchs`: 294 -> 365 of 638 within 5%).
* **The output matrix's copy is in the output phase.** With the output layer on the host it is copied in at the
  start of the output layer's split, after every layer: it sits under the logits only, not under the layers'
  phase too (`-ngl 0`: gpt-oss-120b 1002.1 MiB recorded, 1206.6 estimated before, +0.5% now; DeepSeek-V3 +23.0%
  before, +0.4% now; Qwen3-Next +30.1% before, -0.7% now), and below 32 outputs it is not made at all (the
  draft below). So the first GPU can hold less at `-ngl 0` than at `-ngl 1` (where the output layer's weights
  come in) or more (from 32 outputs, when `-ngl 1` puts the output layer on another GPU): the planner tries the
  points above `-ngl 0` when it does not fit and weighs `-ngl 0` against leaving the GPUs out (`-dev none`), and
  its oracle scenarios have both cases (`tests/plan/test_plan_oracle.py`).
* **A mask first read after a copied down matrix** is allocated with that copy, right above it, and stays until
  its last reader: Qwen3-Next's first attention layer after its delta-net layers, Llama-4-Scout's full-attention
  layer after its chunked ones (`_late_masks`). On the first GPU the FFN norm's hole is one block
  (`ffn_norm_hole`): a larger GLU output splits the space under the mask and the next down copy goes above it,
  and llama4's router-weighted input under gate and up is part of the copies' replay; a mask that fits in the
  hole goes there instead (llama-server's reserve at 32768 cells, `-cmoe -ub 512`: Llama-4-Scout -41.2% -> +0.8%,
  granite-4.0-h-tiny -10.6% -> +1.7%; granite over two GPUs with `-ncmoe 20` -5.0% -> +0.8%).
* **The first GPU's output phase** keeps the graph inputs it copied at the start (masks, V's indices, positions,
  output ids) under the logits, with four blocks (before: five blocks, which matched only where the mask happened
  to be one block; up to 9.5% under at 32768 cells).
* **Padded cache rows.** A quantized K cache whose row is not a multiple of 512 elements (DeepSeek's 576-wide MLA
  rows) gets one padded row per tensor, then the tensor is padded to 128 bytes.
* **MLA's V is a view of K**: the flash-attention kernel's f16 copy of a quantized cache is one copy, not two.
* **Flash attention "auto" follows the devices.** llama.cpp reserves a one-token graph with flash attention and
  turns it off when a layer's attention is not placed on that layer's device (`resolve_fused_ops`): ggml-cuda
  refuses K/V head sizes outside its kernels, and the 576/512 MLA row with a single query head (its grouped
  kernels need two heads per K/V head at least; DeepSeek-V3's 128 run). The estimate resolves "auto" the same
  way for the layers on a CUDA or ROCm GPU (`device_flash_attn`): all 30 recorded "disabled" of the smoke
  models and 351 "enabled" agree, and the MLA smoke models, 12-60% under before (f16 masks, no KQ scores),
  are within 5% but for the cases below.
* **A pipeline-parallel GPU with only the output layer** reads one block from the previous GPU, the weightless
  output norm (the scheduler runs an op without a weight on its neighbour's device), not two; the output ids go
  to the last layer's GPU; without an output norm weight (olmo) only the logits are computed there. The two-GPU
  smoke cases: 102 of 120 had 2 MiB too much on the second GPU.
* **CUDA's f16 copies of a quantized cache are the flash-attention output's own allocation**
  (`ggml_cuda_flash_attn_ext_get_alloc_size`), made once K and V are stored and freed: the live set is Q, the
  output and the copies, not the projections under the copies; on the first GPU Q sits in a freed one-block
  hole (`_fa_op_live`). An FFN that runs beside the attention (command-r, falcon, arctic's MoE branch) is
  allocated above the waiting output with its copies. The smoke models at c2048 with q8_0 caches: 68 of 128
  missed, 10 do (most were 1-2 MiB over, arctic 16.5% under); Qwen3-Next with `-cmoe` at 32768 cells +7.2% ->
  +0.5%; DeepSeek-V3's absorbed MLA, whose replayed peak is larger than the op's live set, exact with q8_0 and
  q4_0 caches (3-10% over before: its 36 MiB copy at 32768 cells was added on top). Where ggml-cuda refuses the
  shape (`-fa on` with the MLA smoke models) the copies stay added, as before.
* **The first GPU's attention phase has one block space fewer too**, as its FFN phase: the ungated smoke models
  and DeepSeek-V3's recordings with f16 caches at 4096 and 32768 cells on one GPU (CUDA and Metal; Vulkan at
  `-ub 512`) are exact (14 MiB over before, 56 MiB at `-ub 2048`). Not applied to recurrent blocks,
  MiniMax-M3's block-sparse mask, skip connections and graphs without the mixed batch, which were not measured
  that way. A Mamba-1 block there puts its conv output in the two-block hole the mixed batch's freed copies
  leave (`mamba1_first_gpu`: the mamba smoke model's one-GPU cases exact, 11% over before).
* **Learned position rows** (gpt2, starcoder, mpt): the position rows' get_rows is a host op between the token
  rows and the first layer, so the host sets the mixed batch's rows and computes the position rows (one block
  more there) and the first GPU reads two blocks, not the mixed batch's three: every stand-in recording of the
  three smoke models exact (before 9-17% over on the GPU). A graph without the mixed batch (cogvlm) has one
  embeddings input and one token-rows output on the host.
* **Graph inputs are the host's** where the GPUs run the layers that read them, and a pipeline-parallel GPU
  holds four copies: MiniMax-01's lightning decay input, glm5-next's and qwen4exp's k-pool selection inputs,
  DeepSeek-V4's compressed-attention masks, MiniMax-M3's block-sparse inputs (the host was 0.7-11 MiB under in
  every case of those smoke models; glm5-next over two GPUs -30.4% -> -0.3%, MiniMax-01 -34.4% -> -2.6%).
* **A projector on the GPU** (llama-server on the stand-in, `standin_server`): clip's warm-up buffer on the GPU is
  the CPU-only run's, and the graph inputs (the raw image, positions, Qwen2.5-VL's f32 window mask) stay in the
  host's CPU buffer, which the scheduler fills and copies over (`mmproj_graph_inputs`: LLaVA 1.30 MiB, Gemma 3
  9.19 MiB, Qwen2.5-VL 292.41 MiB, before not counted). The projector's weights are exact with the 128-byte
  alignment.
* **A draft model** (Qwen3-8B for Qwen3-30B-A3B, `-md`): its weights and cache are exact on the GPU and with
  `-ngld 0` on the host, and so is its compute: with `-ngld 0` the draft context's few outputs are below
  ggml-cuda's op-offload batch of 32 (`get_op_batch_size`: a MUL_MAT's result rows), so its output
  multiplication stays on the host and no output matrix is copied to the GPU (119.0 MiB recorded, 605.9
  estimated before, 119.0 now).

* **Recurrent states in host memory** (`-nkvo`, or a host share of the layers with op offload): the copy of the
  conv state's last columns back into the cache runs where the cache is, so the host copies in its source, a
  strided view of the whole conv input (`ggml_nbytes` of the view). Mamba-2 layers whose weights are on the host
  also run their scan there: its output is one row (`ggml_ssm_scan` is 1-D), below ggml-cuda's op-offload batch,
  so it stays with `ssm_a`, and the host copies in x, B and C (views of the conv output) and holds the scan
  output (`mamba2_host_state_copies`; granite-4.0-h-tiny's host 20.0 -> 29.6 MiB with `-nkvo`, 20.0 -> 50.0 with
  `-ngl 0`/`-ngl 20`, each as recorded). A gated delta net's op is offloaded; only the conv copy is the host's
  (`gdn_host_conv_copy`; Qwen3-Next-80B-A3B 24.0 -> 32.1 MiB as recorded).
* **Masks copied at a later split.** The first GPU's copies of the graph inputs stay under the logits only when its
  first split reads them; a hybrid whose first attention layer comes after layers with host-resident weights
  (experts on the host, op-offloaded layers) copies the mask in at a later split, and the allocator frees it
  after its last reader (granite-4.0-h-tiny with a q8_0 cache at 32768 cells and `-cmoe`: +12.7% -> +1.2%,
  Qwen3-Next +8.9% -> +1.1%; `_masks_in_later_split`).
* **Recurrent blocks on the first GPU** (smoke models): the scheduler's freed copies of the embeddings inputs
  leave a two-block hole under the layer input's blocks. A Mamba model without attention: two blocks replayed
  over it, the next block's conv rows (gathered right after the scan) splitting the first one's freed space
  (`mamba_first_gpu`; mamba +11.3% -> exact, mamba2 exact); a Mamba block after an attention layer with an FFN:
  the hole and the masks' space one free block (granitehybrid +4.1..+19.2% -> exact); jamba's residual kept in
  the embeddings' copy between them (+5.0..+13.3% -> exact); falcon-h1's parallel attention output and z's copy
  in the hole (+8.4..+11.9% -> exact); a gated delta net's input norm and state read in the hole's two blocks
  (qwen35 +6.0% -> exact).
* **Mamba states in host memory on the GPU** (`-nkvo`, one slot): a Mamba block's scan reads the ubatch's states
  through its own getter, so the gather of the other states skips the first one and has no row with one slot
  (llama-graph.cpp `build_rs`, `s_copy_tail`): a zero-byte tensor, placed at the end of the free block the state's
  copy from the host then frees and merges into, and freed as a zero-size block inside it
  (`ggml_dyn_tallocr_free_bytes`). The next allocation from that free block moves its start past the zero block,
  the free list is out of order from then on and a freed tensor merges only with its neighbours in the list: the
  freed space stops merging into the free end, where the logits go. The free end stays within the layer phase, so
  the logits are counted on top of the layer phase without its scores (the scores are taken from the free end and
  merge back; `_unmerged_free_end`, `DevicePlan.output_above_layer`). granite-4.0-h-tiny, GPU buffer: -13.1% ->
  +1.5% with flash attention (the trace's free end at 52.50 MiB from layer 35's down outputs on, everything from
  21.00 MiB up free), -10.5% -> +4.4% at `-ub 2048`, -6.0% -> +8.0% without flash attention (the free end at
  46.50 MiB, the bound 66.0). With two slots the gather has a row and the list stays in order (unchanged, +3.0%);
  a gated delta net's gather reads every state (Qwen3-Next-80B-A3B with `-nkvo`: +0.7..+2.3%). The Mamba-1/2
  smoke models' lists go out of order the same way with `-nkvo` (not recorded; the rule applies to them too).
* **Where the attention output lands** on the first GPU (smoke models): without a cache V's projection takes K's
  freed projection and its copy (contiguous, or the f16 cast flash attention reads) the freed attention norm's
  block, so only Q and the roped K stand on top; with the casts, plamo3's Q norm (a new tensor from a view of the
  fused QKV output) or muse-glimmer's attention gate (read from the attention norm after the attention) the
  attention norm's block is taken through the attention, the output projection lands at the bottom and the FFN
  norm's hole is two blocks (`attn_out_below`; dream, llada, plamo3, muse-glimmer +5.5..+11.4% -> exact, and the
  diffusion models' CPU recordings without flash attention +7.6% -> exact). LFM2 adds the residual into the
  copied embeddings' block, which stays between the freed blocks and the mask (lfm2moe +5.2% -> exact, lfm2
  -3.5% -> exact); MiniCPM3's normed latent takes the mixed batch's two freed blocks and the decompressed K and V
  stand on top (+6.8% -> exact); bailingmoe3's MLA layers build deepseek2's absorbed query and are replayed the
  same way (+8.4..+15.2% -> +3.2%).
* **Only the first split's masks stay under the logits.** A sliding-window first layer reads its mask in the
  first split; the full-attention mask comes with a later split after the expert copies and is freed after its
  last reader (gpt-oss-20b/120b and Llama-4-Scout with `-cmoe`, q8_0 caches at 32768 cells: +6.1..+6.8% -> exact,
  and every f16 `-cmoe` case exact, 1.6-1.8% over before; `_late_mask_groups`). A rotated attention output (q8_0
  caches) keeps one block of the FFN norm's hole, so Llama-4-Scout's 16 MiB GLU output takes layer 2's freed down
  copy's space and layer 3's 525 MiB down copy goes above the full-attention mask (-41.1% -> +0.8%).
* **Hyper-connection output heads on a GPU with only the output layer** (pipeline parallelism): hy_v4 reads the
  streams' norm and one view of each stream (each spanning the streams), qwen4exp the grouped norm, with the
  head's live set above them (`hc_head`; hy_v4 -19.1% -> +1.2%, qwen4exp -12.3% -> +0.7%). mistral4's experts'
  down product asks for f32 precision, which ggml-cuda refuses: the host runs it, with four copies of the down
  weights, the GLU output and the ids there and of the product on the GPU (`host_expert_down`; -17.6% -> -0.7%).
  falcon-h1's flash-attention output waits for the SSM beside it with CUDA's f16 copies of a q8_0 cache inside
  its allocation (-11.3% -> exact). kimi-k3's final residual mix runs its weightless norms on a GPU with only the output layer, interleaved with
  the last layer's tail: the residual stack, its norm, the last output, its norm and the last latent MoE output
  there, that output's norm back on the first GPU (`res_stack_head`; -17.3% -> +0.1%). hrm_text's later stack
  passes reuse the first passes' weights, so over two GPUs its alias slots split between the slot's GPU and the
  weights' (23 splits): eight blocks per alias slot copied in on the slot's GPU, six on the weights' GPU, four
  times each (`HRM_ALIAS_INPUTS_CACHE`/`_WEIGHTS`; -60.7% -> +4.1%, an upper bound on the slots' GPU, +9%).
* **Attention over a cache in host memory on the GPU** (`-nkvo`): the scheduler skips FLASH_ATTN_EXT when it
  places ops by their weights (ggml-backend.cpp `ggml_backend_sched_backend_id_from_cur`), so the attention runs
  on the GPU that holds Q, with the cache's K and V views and the mask copied in at the layer's split; the mask
  stays there to the last layer, and the FFN goes above it when the freed views' space does not hold it. Each
  cache's first layer on a GPU and the next one are replayed with the allocator's best fit (`HostCacheAttention`;
  the second host layer whole, without a Q norm: its Q product above the mask, its residual in V's freed block
  above it, its FFN one block higher, llama-3.1-8b with llama-server's reserve at 4096 cells -4.6% -> exact; the
  first layer of a GPU's second cache its residual above its output matrix's copy in Q's freed block, the FFN
  above both, gemma-3-27b's layer 5 at `-ngl 31` -2.5% -> exact;
  llama-3.1-8b over two GPUs: -7.2% -> exact at 8192 cells, -17.3% -> -1.5% at 32768, -12.1% -> -1.3% at
  `-ngl 16`, 32768 cells; one GPU at 65536 and 131072 cells -17.0% -> exact; gemma-3-27b's first full-attention
  layer -19.7% -> -1.1%; a later layer whose Q lands higher puts its V copy above the mask (gemma-3-27b with
  `-ngl 31`: the first GPU layer's normed Q one Q above host layer 5's, -14.3% -> exact); without flash attention,
  K's and V's copies beside the scores and no V indices on the GPU, -7.3% -> exact). A host layer there (op
  offload) has its FFN's copies and products replayed over the freed views (the expert copy right above the mask,
  the products in K's and V's space), and its Q where the Q matrix's copy puts it: a Q bias or norm makes a second
  Q, in the copy's freed space where it fits, else above the product, and qwen3-next's gated product stays live
  under it (llama-server's reserve at `-ngl 0` and 32768 cells: gpt-oss-20b +14.7%, gpt-oss-120b +6.5%,
  qwen3-30b-a3b +9.3%, qwen3-next-80b-a3b +5.4% -> exact, the same at the partial `-ngl` and over two GPUs).
  With MLA the cache holds the compressed KV and the absorbed attention reads K as its view and V as a view of its
  first kv_lora_rank dims:
  both views' copies and the mask go above the absorbed query's Qcur, and a host layer's expert copies above the
  mask left there (`MlaHostCache`; DeepSeek-V2-Lite with llama-server's reserve at `-ngl 0` and `-ngl 13`, 32768
  cells: 279.5 MiB estimated before, 347.0 recorded and now, -17.1% -> exact; with `-nkvo` -38.4% -> exact, over
  two GPUs -18.0% -> exact; DeepSeek-V3 at `-ngl 0` -1.7% -> exact, with `-nkvo` -21.1% -> exact, over two GPUs,
  where the second copies its layer input in at the attention's split and the 128 MiB attention output goes
  above Qcur, -22.5% -> exact; at 131072 cells and `-ngl 0` the second host layer's query-matrix copy lifts its
  K copy, and its V copy goes above the mask: DeepSeek-V2-Lite -31.6% -> exact, DeepSeek-V3 -8.6% -> -0.1%; with
  a quantized cache the attention's output holds the f16 copies of both copied views, V's copy no longer a view
  of K's: q4_0 with `-nkvo` at 131072 cells, DeepSeek-V2-Lite -67.8% -> exact, q8_0 at `-ngl 0` -4.3% -> exact;
  a GPU layer's FFN outputs replayed around the mask, over two GPUs with `-nkvo` at `-ub 2048` -32.4% -> exact;
  the GPU's second layer's query, copies and attention output replayed over what the first left, DeepSeek-V3 with
  `-nkvo` and two sequences at 65536 cells, its K copy in the block q_nope_absorbed freed above the mask, -15.6% ->
  exact; on a later GPU the next layer's norm and input above the freed copy of the split's input, DeepSeek-V3
  over two GPUs with `-nkvo` at 131072 cells -6.8% -> exact, at `-ub 2048` -2.0% -> -0.5%).
  The output phase after host layers (`PlanBuilder._host_first_layer`, `_after_host_ffn`): with op offload the
  last shared-expert layer's experts' sum goes above its down outputs, which stay under the logits
  (DeepSeek-V2-Lite at `-ngl 13 -ub 2048`, -9.0% -> exact); without it the layers' outputs stay in the lowest
  blocks and the sum takes a freed one (`--no-op-offload`, +9.4% -> exact), and Llama-4-Scout's input-weighting
  MoE leaves its two lowest blocks, the router's outputs, the down outputs and their sum under the logits
  (`-ngl 24 --no-op-offload`, -5.4% -> exact); on a later GPU its one expert's sum takes the previous layer's
  freed output block, a block above the lowest (the second GPU at `-ngl 24`, -2.4% -> exact on that GPU).

Left: on a second GPU with only the output layer the
norm output an MTP graph keeps before the output ids (`h_nextn`); host layers
at 4096 cells with llama-server's reserve of one output row on gemma-3-27b at `-ngl 0` (-3.9%: layer 5's residual
above its output matrix's copy is replayed, 210.3 MiB, but the later layers are not: layer 60, after the
full-attention mask is freed, sits one block higher, 220.8 MiB; only a replay of every layer from the first would
place it); q8_0 caches with
`-nkvo` over two GPUs (+2.0%: the rotated caches' inputs put the mask in the freed blocks, below the FFN); `-fa on` where ggml-cuda refuses the
shape (the MLA smoke models with a q8_0 cache: the flash-attention op runs on the host with its inputs copied
there, so the GPU's and the host's parts are swapped, the totals within 5%); mistral4's down product on the host
without pipeline parallelism (-3.4%); MiniMax-M3's block-sparse inputs on a pipeline-parallel GPU (not counted as never-freed copies
there); the layer phase of granite-4.0-h-tiny with `-nkvo` (RPC0 of the two-RPC placement recording: 59.0 MiB counted,
66.6 recorded; on one stand-in card the out-of-order list sends layer 2's 18 MiB down outputs above two free
blocks of 17.6 MiB each, a 66.63 MiB peak where 56.1 is counted, under the logits there; only a replay of the
whole graph's allocations would place them); MLA's copies of a host cache without flash attention (not recorded, not replayed),
with q8_0 caches and `-nkvo` (DeepSeek-V3 at 32768 cells: 637.1 MiB recorded, 623.1 counted, -1.9%, 588.0 before
the second layer's attention output was replayed; layer 0's FFN output lands above the mask and lifts layer 1's
query, not replayed);
DeepSeek-V3's second GPU at `-ngl 30` over two GPUs with llama-server's reserve (410.0 MiB recorded, 396.0
counted, -3.4% there, not traced); Llama-4-Scout with `--no-op-offload` and `-cmoe` (-1.9%: the last
MoE output's copy back from the host stays under the logits); Llama-4-Scout's last GPU with pipeline parallelism
(-4.4% to -5.2% on that GPU, three blocks under the logits not counted, not traced); cogvlm with q8_0 caches (-9.3%), cohere2 and talkie with q8_0 caches (+12.0%, +8.9%); MiniMax-01 and MiniMax-M3 with two sequences
(-8.8%, -5.9%).
Not reproduced by the stand-in: the alloc dependencies ggml-cuda's `graph_optimize` adds for fused MoE routing
and shared experts, and `-sm row`. Vulkan and Metal have their own stand-ins and sections below; their GPUs are
planned with the same compute model and shown their own stand-ins' band.
"""


MODEL_NOTES = """\
* **Weights**: per tensor, llama.cpp's placement rules (layer index space with the output layer at L, `-ngl` from
  the back, cumulative `-ts` split with upper_bound, input embeddings on the host, tied output embedding duplicated,
  NextN blocks skipped, `-ot`/`-ncmoe`/`-cmoe` overrides, CPU_REPACK in builds without a GPU host buffer), each
  tensor padded to its buffer's alignment. CUDA's 128-byte alignment and per-tensor ne0 % 512 padding of quantized
  tensors (weights, and the K/V cache rows) are exact on the CUDA-shaped stand-in recordings.
* **KV / recurrent**: `fitplan.core.memory.context`.
* **Compute**: the peak live set of the reserved prompt-processing graph, named tensor by tensor
  (`fitplan.core.memory.compute`), with the allocator's reuse rules: graph inputs (masks, V's row indices) are freed after
  the last layer that reads them and the next FFN's first intermediate takes their space when it fits; the experts'
  down outputs take the space of gate and up; a Mamba-2 scan output takes the conv input's space. Where the layout depends on which
  freed block a tensor fits, the allocations are replayed through the allocator's best fit (`ggml_dyn_tallocr_alloc`):
  DeepSeek-V2/V3's absorbed MLA query (q, q_nope_absorbed, q_pe, then Qcur above them, K's compressed KV, the
  flash-attention output in the freed space; without flash attention the KQ scores above Qcur unless they fit the
  space below it: DeepSeek-V3 at `-ub 512` 336 MiB above the blocks, byte-exact over the `wide` sample, where
  counting Q, q_nope_absorbed and the output together was 12-16% over) and the Mamba-1/2 blocks after a device's
  last attention layer, over the freed masks and the token rows' block (the granitehybrid smoke model at c4096:
  zxBCdt inside the freed 4 MiB mask, 10.53 MiB byte-exact; before, up to 52% over). Graphs beyond
  plain attention have their own named terms, each read from a peak list: a gated delta net's layer (Qwen3-Next,
  Qwen3.5: the convolution output, Q and K repeated to the value heads, the state and the fused op's output with
  the new state: 44.12 MiB on Qwen3-Next-80B-A3B at `-ub 512`), MiniMax-01's lightning attention (the fused QKV,
  the inter-block product, the intra-block scores and their decay input), Kimi's MLA (the compressed KV, its normed
  latent, the absorbed Q and K at K's concatenation, above the space the query and q_nope_absorbed freed when Q was
  concatenated, which takes what fits of the three), MiniCPM3's compressed KV, the indexer queries of DeepSeek-V4,
  qwen4exp and glm5-next (two `[n_indexer_head x key_length, n_tok]` tensors, one on glm5-next) and the
  hyper-connection residual streams `[n_embd x hc, n_tok]` (one on hy_v4, two on qwen4exp and glm5-next, one
  under glm5-next's first layer without flash attention, three at DeepSeek-V4's indexer peak), DeepSeek-V4's compressed attention (`build_inp_dsv4`'s CSA, HCA and indexer
  masks, the zero-filled top-k leaf, the lightning indexer's score and top-k over the CSA cells, the layer's
  scores under it without flash attention), the lightning indexer's score and top-k of the DSA models at long
  contexts, MiniMax-M3's block-sparse mask per stream (`bmc`, its transposed copy and the f32 copy of the FA
  mask, with `llm_graph_input_msa`'s inputs) and the k-pool selection of qwen4exp and glm5-next
  (`build_inp_kpool`'s inputs, `gather_mask` on glm5-next, the score and top-k over the pools, the selected cells
  and the `[n_sel, n_tok]` tensors of the scatter index chain). Where a block waits for the FFN (the attention output of parallel attention/FFN blocks) it takes one
  block of the FFN norm's hole, and so does talkie's skip block; the cacheless diffusion models (dream, llada)
  have their mask between the two freed blocks, so no two-block hole. A quantized K or V cache (head size a
  multiple of 64) is rotated (`llama-kv-cache.cpp`, `attn_rot_k/v`; `llama_mul_mat_hadamard` in
  `llm_graph_context::build_attn`): the rotation matrices `attn_inp_k_rot` `[n_rot_k, n_rot_k]` and
  `attn_inp_v_rot` `[64, 64]` f32 are graph inputs of the whole graph, and the rotation of the attention output
  by V's matrix adds one block-sized tensor to the output chain, which leaves one block of the FFN norm's hole
  (the `quantkv` recordings: llama, qwen3, mistral3, qwen2, phi3 and granite smoke models byte-exact at every
  context, micro-batch and slot count, gemma3 and gpt-oss within 0.2%; before, up to 17% under); with parallel
  attention and FFN (command-r) the waiting attention output goes above the blocks instead. K-only (MLA) caches
  and LFM2's hybrid iSWA memory build no rotation inputs. The FFN intermediates of a layer whose mask is freed go
  into the freed space while they fit there (the best-fit free block of `ggml_dyn_tallocr_alloc`): all of them
  after the last attention layer at long contexts, LFM2's short-conv layers for instance (lfm2moe smoke model at
  c8192: 17% over before, byte-exact now), or gate and up but not the GLU output (gemma3 at `-ub 2048`). On the
  host that runs the last layer the logits go into a freed mask when they fit there (LFM2-1.2B, vocabulary 65536,
  at 131072 cells with flash attention: the 128 MiB logits in the 128 MiB f16 mask, the peak at the first
  layer's FFN; byte-exact, before 40.8% over; Llama-4-Scout at 10M cells, before up to 12.6% over). With
  the routed experts on the host, the host's buffer, the GPU's shared expert or
  the experts' copied-back outputs, and the hole those leave under a GPU's mask are named too. The terms were
  checked on representative cases against the allocator's own list of the live tensors at every new peak: build
  `ggml-base` alone with `-DCMAKE_C_FLAGS=-DGGML_ALLOCATOR_DEBUG` (`cmake --build B --target ggml-base`) and run
  `membreak` with that library first on `LD_LIBRARY_PATH`; the `max_size[..]` lines of its log name each tensor
  with its offset. Pipeline parallelism is derived from `ggml-backend.cpp`: four copies
  (`GGML_SCHED_MAX_COPIES`) of every graph input on the host and of every split input on each GPU (masks, row
  indices, positions, the hidden state handed over: three blocks on the first GPU, two on the others), never freed,
  below the rest of the graph; it is byte-exact on the two-server recordings and matches a three-server run. The
  CUDA-only parts (flash-attention f16 copies of quantized K/V, op-offload weight copies into the first GPU's compute
  buffer) are measured on the CUDA-shaped stand-ins (the CUDA section below). ik_llama.cpp's `-amb` caps the attention intermediate
  (`fitplan.core.engines.ik_attention_intermediate_bytes`) in place of mainline's KQ term.
* **Runtime reserve** (`fitplan.core.memory.reserve`): what no dry run sees, per CUDA GPU as named terms derived
  from ggml-cuda (the cuBLAS workspace, the pool at the plan's micro-batch) and an assumed CUDA context
  (`docs/runtime-reserve.md`, with the one public log it was compared with); a flat assumption on other backends.
* **mmproj** compute (`fitplan.core.estimate.estimator.mmproj_compute`): the warm-up image's graph (tools/mtmd/clip.cpp)
  named tensor by tensor for three projectors, byte-exact with and without flash attention: LLaVA's MLP projector
  (graph inputs, then four blocks and an FFN intermediate, or the projector's input and two projection-wide
  activations), Gemma 3's SigLIP tower (three blocks and an FFN intermediate) and Qwen2.5-VL (warm-up image of
  46 x 46 merged tokens, 8464 patches: the inputs with the f32 window mask, four blocks, the mask's f16 copy and
  an FFN intermediate: 704.79 MiB). Measured by loading the projector through libmtmd (`mtmd_init_from_file` with
  warm-up, next to a vocab-only text model) with the GGML_ALLOCATOR_DEBUG `ggml-base`. Qwen2-VL and Qwen3-VL
  (`qwen2vl_graph_bytes`, `qwen3vl_graph_bytes`) are named the same way from the allocator's lists of
  `tools/groundtruth/mmproj_image.cpp` runs: Qwen2-VL the inputs and the larger of a block's attention (`5E`,
  plus the scores without flash attention) and FFN (`2E + F`); Qwen3-VL keeps the outputs of its deepstack blocks
  live through the later blocks (its graph runs the deepstack mergers last), so a late block holds `(k + 6)E` or
  `(k + 2)E + F`, and the deepstack mergers' concatenations, replayed with the allocator's best fit, go on top
  (the peak for Qwen3-VL-8B). Warm-up (46 x 46 tokens): Qwen2-VL-7B 267.08 MiB, Qwen3-VL-8B 372.08 MiB, exact
  (the shapes-only approximation said 390.94 and 359.55). Pixtral (Mistral Small 3.1, `pixtral_graph_bytes`):
  with flash attention the blocks are replayed with the allocator's best fit (the freed raw image and the holes
  the attention leaves decide where each tensor goes; three FFN intermediates live at once), without it
  `5E + KQ`; warm-up 16 x 16 tokens, 64.62 MiB, exact. Other projectors keep an approximation from the tensor
  shapes (raw image, one block or the projector); the estimate says so in its assumptions. `--image-max-tokens`
  shrinks a Qwen-VL warm-up image (recorded: 292.13 MiB at 1024 tokens, exact). An image larger than the warm-up
  one grows the buffer at run time (`mmproj_image_growth`, its own term "mmproj images"), recorded with
  `tools/groundtruth/mmproj_image.cpp` at 64 to 32768 patches: Qwen2.5-VL's graph with flash attention is
  replayed block by block with the allocator's best fit (the f32 window mask's space holds as many of a block's
  three FFN intermediates as fit; under 784 tokens other holes take more, where the former closed rule was 7-20%
  over), without it `5E + KQ`: byte-exact at every size. Qwen2-VL's, Qwen3-VL's and Pixtral's are byte-exact at
  every recorded size (Pixtral: square images, a wide one differs by its [IMG_BREAK]
  rows; without flash attention from 1024 patches; at a 64-patch warm-up, 4 x 4 tokens, Qwen2-VL's is 13%
  under, Qwen3-VL's 8% over, Pixtral's 3% over). The default limit, 4096 tokens, takes 1893.0 MiB (Qwen2.5-VL),
  517.0 MiB (Qwen2-VL), 720.3 MiB (Qwen3-VL); Pixtral's 1024 tokens 257.8 MiB. llama-server caps an image at
  half the ubatch when the text model takes the prompt in one ubatch (non-causal attention), and the estimate
  follows it. Kimi-VL, GLM-4.xV, LFM2-VL, InternVL and the other dynamic-resolution projectors keep the warm-up
  and say so.

## Known gaps (compute)

The targets: compute within 5% on at least 98% of the recordings (met; the issue asked for 90%), never more than
10% under (met), totals never more than 2% under (met). By family:

* **Mamba hybrids with several sequences** (the granitehybrid, nemotron_h and jamba smoke models, `widearchs`
  grid): with flash attention on the host the last attention layer's tail and the Mamba block after it are
  replayed through the allocator from the attention output on, over the freed graph inputs (split by V's
  rotation with a quantized V cache): the conv states' rows and the output projection in the freed masks' space,
  the FFN's down projection there only while a block of its size is left (one slot; with two or four the conv
  rows leave too little and it goes on top), the scan, the gather of the other slots' states, a separate x D
  and the gated output's norm (granitehybrid, nemotron_h and nemotron_h_moe: every flash-attention recording
  within 0.05%, before granitehybrid c1024 with two slots and c512 with four 4.7% under, granitehybrid and
  nemotron_h c512 with four slots and q4_0 caches 9.2% under). Without flash attention the FFN intermediates
  stay on top at c512 with four separate slots (granitehybrid 10% over). Jamba's Mamba-1 block is replayed in
  its graph order over the inputs its attention layer freed, with and without flash attention: the conv states'
  rows gathered inside the attention layer (in the smallest free block then: the freed inputs, the mask's block
  beside V's live rotation with a quantized V cache, or the freed `kqv` block without flash attention), the
  block's input norm, then xz, the conv input and output, x_db, the scan's sources in `ggml_ssm_scan`'s order
  (dt's norm and projection, B's and C's norms), the scan output (the scan reads the ubatch's states from the
  cache: no gathered copy), the other slots' states, z's copy, x D and y + x D in the conv output's place, the
  gated output and the output projection (with flash attention every jamba recording within 0.05%, before up
  to 23.3% over with q8_0/q4_0 caches, several slots or `-ub 2048`; a GPU running these layers gets the same
  replay, which no recording checks). Without flash attention the attention
  layer's Q goes into the freed mixed batch's rows under the KQ scores, which the attention term puts on top
  (+0.1..+1.8%; c4096 with four separate slots, where the Mamba block stays below the scores, 5.3% over, before
  10.5%). The pure Mamba-1 smoke model (no attention layer): x_db goes into the space the mixed batch's token
  rows, tokens and slots leave (0.504 MiB in 0.506; -0.2..-0.1%, before +6.1..+6.4%). plamo2's own Mamba block is
  replayed in its graph order, the scan's sources in `ggml_ssm_scan`'s order, x D a tensor of its own and the
  other slots' states gathered after the scan (byte-exact at every recorded setting, before 3.2% under without
  flash attention, with q8_0 caches at `-ub 512` and with four slots at `-ub 2048`). A gated delta net's state
  read from the cache lies in a freed block of the layer input's size when it fits one (Qwen3-Next's trace: every
  layer's 2 MiB state in a freed 4 MiB block): qwen35 with four slots 6.6-7.8% over before, now every qwen35
  recording within 0.1%. Left on the host without flash attention: granitehybrid at c512 with four separate slots
  (10.4% over) and jamba at c4096 with four separate slots (5.3% over): where the attention layer's output lands
  (the freed masks' space or the embeddings' block) follows the FFN's placement around the per-stream scores,
  which the replay does not simulate.
* **LFM2**: LFM2-1.2B at its published size (`wide` grid: 30 settings, contexts 512-131072) is byte-exact in
  weights, context and compute at every setting. The lfm2 smoke model is byte-exact with flash attention at
  every context (the residual added into the layer input leaves a one-block FFN hole; the freed token rows join
  the freed mask from the first layer on); without flash attention, c512 with four separate slots is 10% over.
* **Sparse and compressed attention of the newer architectures** (smoke models, `archs` grid and the `newarchs`
  grid: 20 settings each, contexts 512-131072, 1 and 4 slots, unified or not, K/V f16/q8_0/q4_0, flash attention
  on/off, `-ub` 512/2048), each term read from the allocator's peak lists: DeepSeek-V4's compressed attention
  (the CSA, HCA and indexer masks, the top-k zeros, the indexer's score and top-k, the scores under it without
  flash attention: -1.6..+1.2%, before -95..-14.6%), the DSA indexer's score and top-k at long contexts and the
  layer's scores under it without flash attention (deepseek32, glm-dsa, dots3note, hy_v4: -0.0..+1.2%, before
  -47..0%), MiniMax-M3's block-sparse mask per stream (0..+3.3%, before -88.6..0%), the k-pool selection of
  qwen4exp and glm5-next (`build_inp_kpool`'s inputs, the score, top-k, selected cells and the `[n_sel, n_tok]`
  tensors of the scatter index chain; without flash attention qwen4exp's layer is replayed through the
  allocator, from the indexer query to the selection mask, `src/models/qwen4exp.cpp` `build_qsa_sel`: the
  scores `kq` before the chain, the tail making the chain's tensors a little larger than the selected cells'
  freed block, `top_score` below the layer when the inputs read by then leave it room; qwen4exp -1.0..+1.0%,
  before -8.9..+5.5%; glm5-next's first layer likewise from `q_resid` to the selection mask,
  `src/models/glm5-next.cpp` `build_dsa_layer` and `build_kpool_select`, over what the allocator's lists have
  under it there: one residual stream, `hc_init`, where later layers count two, the pooled key's zero seed and
  the fill seeds of the zeros and of `mask_all`, with V's contiguous copy replayed in the layer, in the two
  freed token-row blocks when it fits, else in a block the layer freed: without flash attention -0.6..+0.1%,
  before -6.8..+2.5%; glm5-next -1.9..+4.2%, before -95% at long contexts), jais's second-layer QKV above a gated FFN (exact), cohere2moe's fused gate-and-up experts in the
  freed masks, which the caches' rotation inputs split in two with quantized caches (-0.1..+4.0%, before up to
  +37.3%). glm5-next with flash attention: the f32 cast of the selection goes above the selected cells when it
  and the f16 zeros do not fit the block the top-k's two freed tensors and the selected cells leave
  (`cast_above`), a block that holds `q_resid`'s 4 MiB too where `q_resid` did not fit the hole the graph inputs
  read by the indexer's cache row leave lower down (the zero seed, K's row indices, `new_pool_idxs` and
  `new_pool_rep`: 1.004 MiB at 131072 cells and `-ub 512`, where the 1 MiB `q_resid` fits and the cast goes on
  top; 1.77 MiB at `-ub 2048`, where the cast fits the block with the 4 MiB the zeros leave beside it):
  c131072 at `-ub 2048` +24.1% -> -0.0% and c32768 with four slots at `-ub 2048` +26.5% -> -0.0% (the
  allocator's traces: the cast `node_73 (copy)` at 2188.51 and 1804.32 MiB, under the peak). Modelled from the
  allocator's peaks: nemotron_h_moe's Mamba block after its attention-only layer with
  flash attention, over one freed block (the token rows' block and the masks, with the conv states' rows and the
  attention layer's output at its bottom: the conv output in the freed 2 MiB mask at 2048 cells, exact, before
  21% over; with q8_0 caches the trace puts the layer's output in the FFN norm's hole and the conv input in the
  freed space instead, for the same peak; with flash attention now replayed from the attention output, see the
  Mamba hybrids above), and cogvlm, which builds no mixed-batch inputs (`llm_arch_supports_mixed_batch`): three blocks in the
  layer phase and a one-block FFN hole (+0.1..+0.2%, before +6..+13%); afmoe, whose attention output is
  normalized before the residual is added, so the FFN input waits in one of the FFN norm's two blocks and the GLU
  output of its dense first layer goes on top (`-ub 512` with flash attention from 8192 cells: -0.1%, before 0.4-4.0% under); plamo2's
  fused QKV with quantized caches: V's rotated copy above the projection, which `build_attn` keeps live for K
  (flash attention from 8192 cells: -0.0%, before 0.4-4.0% under).
* **Experts on the host** (`-cmoe`, `-ncmoe`, `-ot exps=CPU` over two RPC devices): modelled from the allocator's
  peaks on Qwen3-Next-80B-A3B, Llama-4-Scout and qwen3-30b-a3b: the host running only experts (the embeddings
  input and a one-block hole, the masks, the router's copied argsort `[n_expert, n_tok]` i32, the experts'
  intermediates; llama4's router-weighted input copy is freed before the GLU output: byte-exact on all six
  models); on the first GPU, four block-sized spaces with the shared expert over the experts' sum, or without a
  shared expert the down outputs copied back for the weighted sum (`-cmoe` byte-exact on Llama-4-Scout,
  qwen3-30b-a3b, gpt-oss-20b); and the hole under a GPU's mask when the mask is copied in the same split as a
  layer's copied-back down outputs `[n_embd, n_used, n_tok]` (Qwen3-Next: the delta-net layer's 10 MiB output goes
  above the mask, 78.00 MiB byte-exact; `-ncmoe 1`: layer 1's down outputs, 108.00 MiB). Left on the first GPU:
  the partial splits (qwen3-30b-a3b `-ncmoe 24`: 84.01 MiB for 92.01; gpt-oss-20b `-ncmoe 12`: 104.38 for 90.76;
  Llama-4-Scout `-ncmoe 1`: 124.01 for 114.02), granite-4.0-h-tiny (56.14 for 61.54) and deepseek-v2-lite (92.13
  for 88.13); a later GPU is counted with its two blocks (no trace of its experts-elsewhere phase).
* **DSA indexers** (deepseek32, glm-dsa, dots3note, hy_v4: -0.0..+1.2% on both grids): the top-k masks'
  zero-filled `[1, min(n_kv, top_k), n_tok]` f32 leaves (one per full-attention layer, allocated up front;
  `attention.indexer.top_k`, 4 MiB per layer on a real DeepSeek-V3.2 at `-ub 512`), at the indexer's peak the
  space the query `q` and `q_nope_absorbed` freed below Qcur (1.375 MiB on the smoke models; the indexer queries
  go into it when they fit), the indexer cache's rotation input `attn_inp_k_rot`, and at long contexts the score
  `[n_kv, n_tok]` f32 and the top-k `[min(n_kv, top_k), n_tok]` i32 above the freed queries (one where the query
  is rotated into a third tensor, both on hy_v4, which skips the rotation); without flash attention the layer's
  scores `kq` stay live under the indexer. Left: without flash attention 0.5 MiB not traced.
* **Output GPU after a MoE layer**: modelled where the allocator's traces were read: a later GPU whose last layer is
  a MoE with a shared expert whose down outputs fit into gate and up (deepseek-v2-lite: the FFN input and norm,
  the router's tensors and the down outputs stay under the logits, byte-exact), and a GPU that holds only the
  output layer after a MoE without shared expert (qwen3-30b-a3b, gpt-oss-20b `-ngl 1`: the down outputs are copied
  there for the experts' sum), and granite-4.0-h-tiny's output GPU on RPC splits (-0.7..+0.4%; with `-nkvo` the
  output GPU 246.0 MiB counted against 242.5 with the logits above its layer phase, see Mamba states in host memory,
  the first GPU 59.0 against 66.6, 1.2% under in all; before 8.8-17.9% under). Not modelled: deepseek-v2-lite with `-ot blk.0=RPC1` (6.8%
  over). In the granite splits the allocator's free list (traced with a `ggml-alloc.c`
  that prints it at every allocation) holds zero-byte blocks: the Mamba layers free zero-byte tensors (the empty
  `rs_s_copy` view of the extra recurrent states, a zero-byte node after the scan), and `ggml_dyn_tallocr_free_bytes`
  inserts them as blocks; once an allocation moves the offset of the block before one past it, the list is out of
  order and a freed region no longer merges into the buffer's free end. The last layer's freed down outputs then
  stay a separate block and the logits go above them: above the FFN input, the norm, a one-block hole, gate, up,
  GLU output and the down outputs (`-ngl 20`: 45.04 MiB under the 196 MiB logits), except where the layer set
  leaves no such block (`-ngl 20 -ts 3,1`: 9.29 MiB). The peak lists show this wherever the output GPU runs a
  Mamba layer ahead of an attention layer (layers 30-39, 33-39, 20-39: the logits at 45.04 MiB, with the experts on
  the host above the copied-back down outputs at 27.04 MiB), and the logits next to the blocks where its first layer
  is the attention layer or it runs none (35-39, 37-39: 9.29 MiB, one block more than counted); that rule is what
  the estimate counts (`mamba2_split_below_logits`), not a replay of the free list.
* **ik_llama.cpp** (not in the table: `tests/fixtures/ik_llama/` records deepseek-v2-lite's compute buffer too):
  the mainline structure is 10-24% over where the logits dominate (ik keeps one block next to them, not five) and
  15-27% under with `-mla 2/3 -fa on` at 32k cells (64-69% for the legacy-key file, which the estimate does not
  treat as MLA here): ik's decompressed K/V products beyond the `-amb`-chunked one. No recording has `-amb` set.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--write", action="store_true", help="write docs/accuracy.md and app/fitplan/data/accuracy_bands.json"
    )
    ap.add_argument("--misses", action="store_true", help="list every case that misses a target")
    ns = ap.parse_args(argv)
    s = summarize()
    text = markdown(s)
    print(text)
    if ns.misses:
        for r in s.measured:
            if abs(r.compute_rel) > COMPUTE_TOLERANCE or not r.weights_exact_mib or not r.context_exact:
                detail = "; ".join(
                    f"{d.name}: W {d.weights[0] / MIB:.2f}/{d.weights[1] / MIB:.2f} "
                    f"KV {d.context[0] / MIB:.2f}/{d.context[1] / MIB:.2f} "
                    f"C {d.compute[0] / MIB:.2f}/{d.compute[1] / MIB:.2f}"
                    for d in r.devices
                )
                print(f"{r.key} [{r.architecture}] compute {r.compute_rel:+.1%}: {detail}")
    if ns.write:
        (ROOT / "docs").mkdir(exist_ok=True)
        (ROOT / "docs" / "accuracy.md").write_text(text)
        BANDS_PATH.write_text(bands_json(s, ik_results()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
