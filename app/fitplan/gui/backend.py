"""The one facade the window talks to: models, hardware, estimates, plans and command lines. No Qt here.

Every call is blocking and is made from a worker thread (`fitplan.gui.workers`). Core modules are imported lazily;
where one is missing the rough stand-in in `fitplan.gui.fallback` is used and the estimate says so.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from fitplan.core.devices import GIB, MIB, Device, DeviceKind, Machine, Vendor, host_device
from fitplan.core.errors import FitplanError, GGUFError, IncompleteModelError, SettingsError
from fitplan.core.estimate import TERM_ORDER, Estimate, TermKind
from fitplan.core.profile import LayerKind, ModelProfile
from fitplan.core.settings import NGL_AUTO, FlashAttn, LaunchSettings, MmprojPlacement
from fitplan.gui import fallback

#: Metadata key of the header-only example models (tools/make_examples.py): no tensor data follows the header.
HEADER_ONLY_KEY = "fitplan.header_only"

#: Contexts the chart samples (log-spaced, multiples of 256).
CURVE_POINTS = 72
MIN_CONTEXT = 256
CONTEXT_STEP = 256

#: GPUs offered in "add a hypothetical GPU" when the hardware catalog is not installed (memory as sold).
FALLBACK_CATALOG: tuple[tuple[str, float, Vendor], ...] = (
    ("RTX 3060 12GB", 12, Vendor.NVIDIA),
    ("RTX 4060 Ti 16GB", 16, Vendor.NVIDIA),
    ("RTX 3090", 24, Vendor.NVIDIA),
    ("RTX 4090", 24, Vendor.NVIDIA),
    ("RTX 5090", 32, Vendor.NVIDIA),
    ("RTX A6000", 48, Vendor.NVIDIA),
    ("A100 80GB", 80, Vendor.NVIDIA),
    ("H100 80GB", 80, Vendor.NVIDIA),
    ("RX 7900 XTX", 24, Vendor.AMD),
    ("MI300X", 192, Vendor.AMD),
)


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            return None
        raise


@dataclass(frozen=True, slots=True)
class LoadedModel:
    source: str
    profile: ModelProfile
    mmproj: ModelProfile | None = None
    warnings: tuple[str, ...] = ()
    mmproj_note: str = ""  # why a projector found next to the model was not paired with it


@dataclass(frozen=True, slots=True)
class Detection:
    gpus: tuple[Device, ...]
    host: Device
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CurveData:
    """Bytes per device, per term (TERM_ORDER), per sampled context: `bytes[d, t, c]`."""

    contexts: np.ndarray  # int64, shape (C,)
    devices: tuple[Device, ...]
    bytes: np.ndarray  # int64, shape (D, len(TERM_ORDER), C)

    def totals(self, device: int) -> np.ndarray:
        result: np.ndarray = self.bytes[device].sum(axis=0)
        return result


class VerdictLevel:
    FITS = "fits"
    OFFLOAD = "offload"
    NO_FIT = "no_fit"


@dataclass(frozen=True, slots=True)
class Verdict:
    level: str
    text: str
    binding: str = ""  # the device whose memory limits the plan


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """Everything one estimate needs; the window sends a new one on every change and keeps only the newest."""

    request_id: int
    model: LoadedModel
    settings: LaunchSettings
    machine: Machine
    margin_bytes: int = 1024 * MIB
    with_curve: bool = True


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    request_id: int
    estimate: Estimate
    verdict: Verdict
    max_context: int  # largest context (multiple of 256) that fits the planned devices, 0 if none
    args: tuple[str, ...]
    curve: CurveData | None = None
    plan_settings: LaunchSettings | None = None  # the settings the command line launches (after offload)
    notes: tuple[str, ...] = field(default=())


def fmt_gib(n: int | float) -> str:
    return f"{n / GIB:.1f} GiB"


def fmt_ctx(n: int) -> str:
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    return f"{n:,}"


def layer_makeup(profile: ModelProfile) -> str:
    """'48 layers: 12 full attention, 36 linear attention' in the user's words."""
    words = {
        LayerKind.FULL: "full attention",
        LayerKind.SWA: "sliding-window attention",
        LayerKind.MLA: "latent attention (MLA)",
        LayerKind.RECURRENT: "linear attention / recurrent",
        LayerKind.HYBRID: "hybrid attention + recurrent",
        LayerKind.SHARED: "shared-KV attention",
        LayerKind.NONE: "without attention memory",
        LayerKind.NEXTN: "next-token prediction (MTP)",
    }
    counts: dict[LayerKind, int] = {}
    for layer in profile.layers:
        counts[layer.kind] = counts.get(layer.kind, 0) + 1
    parts = [f"{n} {words[k]}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    moe = profile.moe
    tail = f"; {moe.n_expert} experts, {moe.n_expert_used} used per token" if moe and moe.n_expert else ""
    return f"{len(profile.layers)} layers: " + ", ".join(parts) + tail


class Backend:
    """Blocking operations behind one interface; tests pass fakes for the probe and the clock-free parts."""

    def __init__(self, probe: Callable[[], Detection] | None = None, *, use_core: bool = True) -> None:
        self._probe = probe or self._probe_system
        self._use_core = use_core  # False: the rough stand-ins only (development of the window itself)
        self._curve_cache: tuple[object, CurveData] | None = None  # used by the estimator thread only

    def _core(self, name: str) -> ModuleType | None:
        return _module(name) if self._use_core else None

    # -- models --------------------------------------------------------------------------------------------------
    def load(self, source: str) -> LoadedModel:
        source = source.strip()
        if source.startswith(("http://", "https://")):
            return self._load_remote(source)
        path = Path(source).expanduser()
        if not path.is_file():
            raise GGUFError("no such file", None, str(path))
        files = self._open_local(str(path))
        profile = self._build_profile(files)
        if profile.is_mmproj:
            raise GGUFError("this is a multimodal projector (mmproj); open the language model it belongs to", None,
                            str(path))
        warnings = list(profile.warnings)
        mm = None
        note = ""
        if files.mmproj is not None:
            width = files.mmproj.get_int("clip.vision.projection_dim", 0)
            if width and profile.n_embd and width != profile.n_embd:
                # The projector found next to the model feeds another model: leave it out of the plan.
                note = (f"{Path(files.mmproj.source).name} is next to it but projects to {width}-wide "
                        f"embeddings, not this model's {profile.n_embd}")
            else:
                mm = self._build_profile(files.mmproj)
        if not profile.verified_architecture and not any(profile.architecture in w for w in warnings):
            warnings.append(f"Unverified architecture '{profile.architecture}': memory estimated from generic keys.")
        return LoadedModel(str(path), profile, mm, tuple(warnings), note)

    def _open_local(self, path: str) -> Any:
        reader = self._core("fitplan.core.gguf_reader")
        if reader is None:
            return fallback.open_model(path)
        try:
            return reader.open_model(path)
        except IncompleteModelError as exc:
            # A header-only example (fitplan.header_only = true, see tools/make_examples.py) is complete by
            # declaration; any other short file is an interrupted download and the error stands.
            header = getattr(exc, "header", None)
            if header is None or header.metadata.get(HEADER_ONLY_KEY) is not True:
                raise
            return reader.open_model(path, allow_incomplete=True)

    def _load_remote(self, url: str) -> LoadedModel:
        remote = self._core("fitplan.core.remote")
        if remote is None:
            raise GGUFError("reading models from a URL needs fitplan's remote reader, which is not installed",
                            None, url)
        try:
            header = remote.read_remote_header(url)
        except FitplanError:
            raise
        except OSError as exc:
            raise GGUFError(f"could not reach the server: {exc}", None, url) from exc
        profile = self._build_profile(header)
        return LoadedModel(url, profile, None, profile.warnings)

    def _build_profile(self, files: Any) -> ModelProfile:
        builder = self._core("fitplan.core.profile_builder")
        if builder is None:
            return fallback.build_profile(files)
        profile: ModelProfile = builder.build_profile(files)
        return profile

    def scan(self, folder: str, cancelled: Callable[[], bool]) -> Iterator[LoadedModel | GGUFError]:
        """Every model under `folder` (projectors and later shards skipped), errors as items, stops on cancel."""
        for root, _dirs, names in os.walk(folder):
            for name in sorted(names):
                if cancelled():
                    return
                low = name.lower()
                if not low.endswith(".gguf") or "mmproj" in low or ("-of-" in low and "-00001-of-" not in low):
                    continue
                try:
                    yield self.load(os.path.join(root, name))
                except GGUFError as exc:
                    yield exc
                except FitplanError as exc:
                    yield GGUFError(str(exc), None, os.path.join(root, name))

    # -- hardware ------------------------------------------------------------------------------------------------
    def detect(self) -> Detection:
        return self._probe()

    @staticmethod
    def _probe_system() -> Detection:
        probe_mod = _module("fitplan.core.hardware.probe")
        if probe_mod is not None:
            probes: list[Any] = []
            for mod_name, cls_name, args in (
                ("fitplan.core.hardware.nvidia", "NvmlProbe", (dict(os.environ),)),
                ("fitplan.core.hardware.amd", "AmdSysfsProbe", ()),
                ("fitplan.core.hardware.apple", "AppleSiliconProbe", ()),
                ("fitplan.core.hardware.host", "HostMemoryProbe", ()),
            ):
                mod = _module(mod_name)
                if mod is not None and hasattr(mod, cls_name):
                    probes.append(getattr(mod, cls_name)(*args))
            result = probe_mod.run_probes(probes)
            machine = probe_mod.machine_from(result)
            return Detection(machine.gpus, machine.host, tuple(result.problems))
        pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        total = pages * os.sysconf("SC_PAGE_SIZE") if pages else 0
        return Detection((), host_device(total), ("GPU detection is not installed",))

    @staticmethod
    def catalog() -> tuple[tuple[str, int, Vendor], ...]:
        """GPUs to offer as hypothetical devices: consumer cards first, bigger memory first."""
        cat = _module("fitplan.core.hardware.catalog")
        if cat is None:
            return tuple((n, int(g * GIB), v) for n, g, v in FALLBACK_CATALOG)
        order = {"consumer": 0, "workstation": 1, "datacenter": 2, "apple": 3}
        rows: list[tuple[int, float, str, Vendor]] = []
        for gpu in cat.load_catalog().gpus:
            sizes = gpu.memory_gib
            for gib in sizes:
                name = gpu.name if len(sizes) == 1 else f"{gpu.name} {gib:g}GB"
                rows.append((order.get(gpu.segment, 4), -gib, name, gpu.vendor))
        rows.sort()
        return tuple((name, int(-neg * GIB), vendor) for _seg, neg, name, vendor in rows)

    # -- estimates -----------------------------------------------------------------------------------------------
    @staticmethod
    def _check_settings(settings: LaunchSettings) -> None:
        if settings.cache_type_v not in ("f16", "f32", "bf16") and settings.flash_attn is FlashAttn.OFF:
            raise SettingsError(
                f"A quantized V cache ({settings.cache_type_v}) needs flash attention; llama.cpp refuses it with "
                "flash attention off. Turn flash attention on (or auto), or use an f16 V cache."
            )

    def estimate(self, model: LoadedModel, settings: LaunchSettings, machine: Machine) -> Estimate:
        self._check_settings(settings)
        est_mod = self._core("fitplan.core.estimator")
        mmproj = self._mmproj_for(model, settings)
        if est_mod is None:
            return fallback.estimate(model.profile, settings, machine, mmproj=mmproj)
        result: Estimate = est_mod.estimate(model.profile, settings, machine, mmproj=mmproj)
        return result

    @staticmethod
    def _mmproj_for(model: LoadedModel, settings: LaunchSettings) -> ModelProfile | None:
        """The projector only when it is loaded: "not loaded" keeps it out of every device."""
        if settings.mmproj is MmprojPlacement.NONE or not settings.mmproj_path:
            return None
        return model.mmproj

    def curve(self, model: LoadedModel, settings: LaunchSettings, machine: Machine) -> CurveData:
        """Memory at CURVE_POINTS contexts. It does not depend on the chosen context, so while only the context
        changes (a slider drag) the last curve is reused."""
        top = max(131072, model.profile.n_ctx_train, settings.n_ctx)
        key = (model.source, id(model.profile), replace(settings, n_ctx=0), machine, top)
        if self._curve_cache is not None and self._curve_cache[0] == key:
            return self._curve_cache[1]
        curve = self._compute_curve(model, settings, machine, top)
        self._curve_cache = (key, curve)
        return curve

    def _compute_curve(self, model: LoadedModel, settings: LaunchSettings, machine: Machine, top: int) -> CurveData:
        grid = self.curve_contexts(top)
        curve_mod = self._core("fitplan.core.curve")
        if curve_mod is not None:
            self._check_settings(settings)
            c = curve_mod.estimate_curve(
                model.profile, settings, machine, [int(n) for n in grid], mmproj=self._mmproj_for(model, settings)
            )
            return CurveData(np.asarray(c.contexts, dtype=np.int64), tuple(c.devices), np.asarray(c.bytes))
        return self._curve_by_estimates(model, settings, machine, grid)

    @staticmethod
    def curve_contexts(top: int) -> np.ndarray:
        """CURVE_POINTS log-spaced contexts from MIN_CONTEXT to `top`, multiples of CONTEXT_STEP."""
        grid = np.unique((np.geomspace(MIN_CONTEXT, top, CURVE_POINTS) // CONTEXT_STEP * CONTEXT_STEP).astype(np.int64))
        result: np.ndarray = grid[grid >= MIN_CONTEXT]
        return result

    def _curve_by_estimates(
        self, model: LoadedModel, settings: LaunchSettings, machine: Machine, grid: np.ndarray
    ) -> CurveData:
        devices = machine.all
        data = np.zeros((len(devices), len(TERM_ORDER), len(grid)), dtype=np.int64)
        for c, n_ctx in enumerate(grid):
            est = self.estimate(model, replace(settings, n_ctx=int(n_ctx)), machine)
            for d, dev_est in enumerate(est.devices[: len(devices)]):
                for t, kind in enumerate(TERM_ORDER):
                    data[d, t, c] = dev_est.bytes_of(kind)
        return CurveData(grid, devices, data)

    def max_context(self, model: LoadedModel, settings: LaunchSettings, machine: Machine, margin: int) -> int:
        """Largest multiple of 256 (up to the training context, at least 256) that fits, 0 if even 256 does not."""

        def fits(n: int) -> bool:
            return _fits(self.estimate(model, replace(settings, n_ctx=n), machine), margin)

        hi = max(model.profile.n_ctx_train, MIN_CONTEXT) // CONTEXT_STEP
        if not fits(MIN_CONTEXT):
            return 0
        if fits(hi * CONTEXT_STEP):
            return hi * CONTEXT_STEP
        lo = 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid * CONTEXT_STEP):
                lo = mid
            else:
                hi = mid
        return lo * CONTEXT_STEP

    def plan(self, request: PlanRequest) -> PlanOutcome:
        """The estimate at the chosen settings, the placement that fits them, the largest context, the command."""
        model, settings, machine = request.model, request.settings, request.machine
        self._check_settings(settings)
        planner = self._core("fitplan.core.planner")
        if planner is None:
            return self._plan_fallback(request)
        margin = planner.MarginPolicy(gpu_margin_bytes=request.margin_bytes)
        mmproj = self._mmproj_for(model, settings)
        fn = planner.default_estimate_fn(mmproj=mmproj)
        pins = planner.Pins(
            base=settings,
            n_ctx=settings.n_ctx,
            n_parallel=settings.n_parallel,
            kv_unified=settings.kv_unified,
            cache_type_k=settings.cache_type_k,
            cache_type_v=settings.cache_type_v,
            n_gpu_layers=None if settings.n_gpu_layers == NGL_AUTO else settings.n_gpu_layers,
            n_cpu_moe=settings.n_cpu_moe or None,
            mmproj=settings.mmproj,
        )
        plan = planner.plan(model.profile, machine, pins, margin=margin, mmproj=mmproj)
        plan_settings: LaunchSettings = plan.settings
        est: Estimate = plan.estimate if plan.estimate is not None else self.estimate(model, settings, machine)
        fit = planner.max_context_that_fits(model.profile, plan_settings, machine, margin, fn)
        max_ctx = int(fit.n_ctx)
        placement = plan.placement
        if not plan.fits:
            shorts = "; ".join(s.describe() for s in plan.shortfalls)
            label = plan.shortfalls[0].label if plan.shortfalls else ""
            verdict = Verdict(VerdictLevel.NO_FIT, f"Does not fit at {fmt_ctx(settings.n_ctx)} context: {shorts}.",
                              label)
        elif machine.gpus and (placement.cpu_layers or placement.cpu_expert_layers):
            verdict = Verdict(VerdictLevel.OFFLOAD, f"Fits only with {placement.description}.", fit.binding_label)
        else:
            checked = [u for u in plan.context.usage if u.checked]
            gpus = [u for u in checked if u.device.kind is DeviceKind.GPU] or checked
            tight = min(gpus, key=lambda u: u.headroom_bytes)
            where = tight.label if machine.gpus else "system RAM (CPU only)"
            verdict = Verdict(
                VerdictLevel.FITS,
                f"Fits: {fmt_gib(tight.headroom_bytes)} to spare on {where} after the margin.",
                tight.label,
            )
        if plan.fits and max_ctx:
            limit = "the model's training length" if fit.capped_by_training else f"{fit.binding_label} memory"
            verdict = replace(verdict, text=f"{verdict.text} Up to {fmt_ctx(max_ctx)} context fits ({limit}).")
        curve = self.curve(model, plan_settings, machine) if request.with_curve else None
        args = self.command_args(model, plan_settings, machine)
        return PlanOutcome(request.request_id, est, verdict, max_ctx, tuple(args), curve, plan_settings,
                           tuple(plan.notes))

    def fit_level(self, request: PlanRequest) -> str:
        """Only the verdict level (for the library's fit badges); never uses the estimator thread's curve cache."""
        return self.plan(replace(request, with_curve=False)).verdict.level

    def _plan_fallback(self, request: PlanRequest) -> PlanOutcome:
        model, settings, machine, margin = request.model, request.settings, request.machine, request.margin_bytes
        est = self.estimate(model, settings, machine)
        plan_settings = settings
        verdict = _verdict_fits(est, margin)
        if verdict is None:
            plan_settings, verdict = self._offload_verdict(model, settings, machine, margin, est)
        max_ctx = self.max_context(model, plan_settings, machine, margin)
        if verdict.level == VerdictLevel.FITS and max_ctx:
            verdict = replace(verdict, text=f"{verdict.text} Up to {fmt_ctx(max_ctx)} context fits.")
        curve = self.curve(model, plan_settings, machine) if request.with_curve else None
        args = tuple(self.command_args(model, plan_settings, machine))
        return PlanOutcome(request.request_id, est, verdict, max_ctx, args, curve, plan_settings)

    def _offload_verdict(
        self, model: LoadedModel, settings: LaunchSettings, machine: Machine, margin: int, est: Estimate
    ) -> tuple[LaunchSettings, Verdict]:
        short = _shortfall(est, margin)
        no_fit = Verdict(
            VerdictLevel.NO_FIT,
            f"Does not fit: short by {fmt_gib(short[1])} on {short[0]}.",
            short[0],
        )
        if not machine.gpus:
            return settings, no_fit
        profile = model.profile
        if profile.is_moe and settings.n_gpu_layers == NGL_AUTO:
            n = profile.n_layer
            if _fits(self.estimate(model, replace(settings, n_cpu_moe=n), machine), margin):
                lo, hi = 0, n  # fits with hi, not with lo
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if _fits(self.estimate(model, replace(settings, n_cpu_moe=mid), machine), margin):
                        hi = mid
                    else:
                        lo = mid
                s = replace(settings, n_cpu_moe=hi)
                text = f"Fits only with the experts of {hi} layers on the CPU (--n-cpu-moe {hi})."
                return s, Verdict(VerdictLevel.OFFLOAD, text, short[0])
        total = profile.n_layer + 1
        if _fits(self.estimate(model, replace(settings, n_gpu_layers=0), machine), margin):
            lo, hi = 0, total  # fits with lo GPU layers, not with hi
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _fits(self.estimate(model, replace(settings, n_gpu_layers=mid), machine), margin):
                    lo = mid
                else:
                    hi = mid
            s = replace(settings, n_gpu_layers=lo)
            on_cpu = total - lo
            text = f"Fits only with {on_cpu} of {total} layers on the CPU (-ngl {lo}); {short[0]} is the limit."
            return s, Verdict(VerdictLevel.OFFLOAD, text, short[0])
        return settings, no_fit

    # -- command -------------------------------------------------------------------------------------------------
    def command_args(self, model: LoadedModel, settings: LaunchSettings, machine: Machine) -> list[str]:
        command = self._core("fitplan.core.command")
        if command is None:
            return fallback.command_args(model.profile, settings)
        return list(command.plan_to_args(settings, model.source))

    @staticmethod
    def render_command(args: tuple[str, ...], shell: str) -> str:
        shell_mod = _module("fitplan.core.shell")
        if shell_mod is not None:
            text: str = shell_mod.join(list(args), shell, multiline=True)
            return text
        import shlex

        return " ".join(shlex.quote(a) for a in args)

    @staticmethod
    def llama_server_in(bin_dir: str) -> str | None:
        if not bin_dir:
            return None
        for name in ("llama-server", "llama-server.exe"):
            p = Path(bin_dir) / name
            if p.is_file():
                return str(p)
        return None


def _cap(device: Device, margin: int) -> int:
    return device.free_bytes - (margin if device.kind is DeviceKind.GPU else 0)


def _fits(est: Estimate, margin: int) -> bool:
    return all(d.used_bytes <= _cap(d.device, margin) for d in est.devices if d.device.total_bytes > 0)


def _shortfall(est: Estimate, margin: int) -> tuple[str, int]:
    worst = max(est.devices, key=lambda d: d.used_bytes - _cap(d.device, margin))
    return worst.device.name, worst.used_bytes - _cap(worst.device, margin)


def _verdict_fits(est: Estimate, margin: int) -> Verdict | None:
    if not _fits(est, margin):
        return None
    pools = [d for d in est.devices if d.device.total_bytes > 0]
    gpus = [d for d in pools if d.device.kind is DeviceKind.GPU]
    tightest = min(gpus or pools, key=lambda d: _cap(d.device, margin) - d.used_bytes)
    spare = _cap(tightest.device, margin) - tightest.used_bytes
    where = tightest.device.name if gpus else "system RAM (CPU only)"
    text = f"Fits: {fmt_gib(spare)} to spare on {where} after the margin."
    return Verdict(VerdictLevel.FITS, text, tightest.device.name)


def term_label(kind: TermKind) -> str:
    return {
        TermKind.WEIGHTS: "Weights",
        TermKind.KV: "KV cache",
        TermKind.RECURRENT: "Recurrent state",
        TermKind.COMPUTE: "Compute buffers",
        TermKind.OUTPUT: "Output buffer",
        TermKind.MMPROJ: "Projector (mmproj)",
        TermKind.DRAFT: "Draft model",
        TermKind.RESERVE: "Runtime reserve",
    }[kind]
