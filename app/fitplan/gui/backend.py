"""The one facade the window talks to: models, hardware, estimates, plans and command lines. No Qt here.

Every call is blocking and is made from a worker thread (`fitplan.gui.workers`). The heavier core modules (reader,
estimator, planner, curve, hardware probes) are imported on first use, in that thread, so the window paints first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fitplan.core.base.devices import MIB, Device, Machine
from fitplan.core.base.errors import GGUFError
from fitplan.core.base.files import expand_home
from fitplan.core.base.launch_settings import Engine, LaunchSettings, MmprojPlacement
from fitplan.core.base.results import Estimate, TermKind
from fitplan.core.library.model import LibraryModel, LibraryRoot, RootKind, SkippedFile
from fitplan.core.plan.objective import Goal, Objective
from fitplan.core.plan.verdict import FitLevel

if TYPE_CHECKING:
    from fitplan.core.estimate.accuracy import AccuracyBand
    from fitplan.core.hardware.catalog import CatalogChoice
    from fitplan.core.hardware.probe import DetectedGpu
    from fitplan.core.library.scanner import LibraryScanner
    from fitplan.core.model.lora import LoraAdapter
    from fitplan.core.model.profile import ModelProfile
    from fitplan.core.plan.alternatives import Alternative
    from fitplan.core.plan.held import DeviceHeld
    from fitplan.core.speed import PlanSpeed

#: The model the window opens when the user has none: a header-only example (resources/examples).
EXAMPLE_MODEL = "Llama-3.1-8B-Instruct-Q4_K_M.gguf"

#: The settings the window's controls pin (the flag keys of `fitplan.core.launch.command_line.given_keys`).
WINDOW_PINS = frozenset(
    {"n_ctx", "n_parallel", "kv_unified", "cache_type_k", "cache_type_v", "n_gpu_layers", "mmproj_offload"}
)


def pins_for_goal(goal: Goal, pinned: frozenset[str]) -> frozenset[str]:
    """The window's pins for a goal: with the longest context first, the context is the plan's to choose."""
    return pinned - {"n_ctx"} if goal is Goal.CONTEXT else pinned


#: Contexts the chart samples (log-spaced, multiples of 256).
CURVE_POINTS = 72
MIN_CONTEXT = 256
CONTEXT_STEP = 256


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
    #: the GPUs as probed, with the processes holding their memory where the driver tells it
    detected: tuple[DetectedGpu, ...] = ()


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
    """How the plan fits, for the verdict colour and the library's fit badge (the core's `FitLevel`)."""

    FITS = FitLevel.FITS.value
    OFFLOAD = FitLevel.OFFLOAD.value
    NO_FIT = FitLevel.NO_FIT.value


@dataclass(frozen=True, slots=True)
class Verdict:
    """The core's verdict in words (`fitplan.core.plan.summary.verdict_words`), its level as the window's string."""

    level: str
    text: str
    binding: str = ""  # the device whose memory limits the plan
    #: when it does not fit: the device short by the most after its margin (its position in the estimate)
    most_short: int | None = None


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """Everything one estimate needs; the window sends a new one on every change and keeps only the newest."""

    request_id: int
    model: LoadedModel
    settings: LaunchSettings
    machine: Machine
    margin_bytes: int = 1024 * MIB
    with_curve: bool = True
    draft: ModelProfile | None = None  # the profile of settings.draft's model (-md), once read
    #: the flag keys the plan keeps as set (`pins_from_settings`): every control of the window, and the flags of a
    #: command or preset that no control holds; --n-cpu-moe is a pin when it is not 0
    pinned: frozenset[str] = WINDOW_PINS
    goal: Goal = Goal.PLACEMENT  # what the plan puts first (`fitplan.core.plan.objective`)
    min_tps: float | None = None  # the generation-speed floor (`Objective.min_gen_tps`), None without one
    #: the probed GPUs with their processes (`Detection.detected`): who holds the memory the plan cannot use
    detected: tuple[DetectedGpu, ...] = ()


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
    ollama: OllamaSetup | None = (
        None  # engine ollama: its environment and Modelfile instead of a command line
    )
    alternatives: tuple[Alternative, ...] = ()  # what would change the plan, each checked by the estimator
    accuracy: AccuracyBand | None = (
        None  # the measured error band of this architecture and configuration class
    )
    #: the bytes the plan keeps free on each device of the estimate (the core's `MarginPolicy.kept_free`)
    margins: tuple[int, ...] = ()
    #: the plan's expected prompt and generation t/s (`core.speed.plan_speed`), None when it does not fit
    speed: PlanSpeed | None = None
    #: each device of the estimate by owner: other programs (by process where the driver tells it), the margin
    #: (the core's `held_memory`)
    held: tuple[DeviceHeld, ...] = ()


@dataclass(frozen=True, slots=True)
class OllamaSetup:
    """What makes ollama run the plan: `ollama serve` with `environment`, a model created from `modelfile`."""

    environment: tuple[tuple[str, str], ...]
    modelfile: str
    create_argv: tuple[str, ...]


def layer_makeup(profile: ModelProfile) -> str:
    """'48 layers: 12 full attention, 36 linear attention' in the user's words."""
    from fitplan.core.model.profile import LayerKind

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


def examples_dir() -> Path | None:
    """The bundled header-only example models (package data, or a source checkout's resources/examples)."""
    from fitplan import bundled

    candidates = [bundled.examples_dir(), Path(__file__).resolve().parents[3] / "resources" / "examples"]
    for candidate in candidates:
        if (candidate / EXAMPLE_MODEL).is_file():
            return candidate
    return None


class Backend:
    """Blocking operations behind one interface; tests pass fakes for the probe and the library's default places."""

    def __init__(
        self,
        probe: Callable[[], Detection] | None = None,
        library_places: Callable[[], tuple[LibraryRoot, ...]] | None = None,
    ) -> None:
        self._probe = probe or self._probe_system
        self._library_places = library_places
        self._curve_cache: tuple[object, CurveData] | None = None  # used by the estimator thread only
        self._scanner: LibraryScanner | None = None
        self._scan_lock = threading.Lock()  # one scan at a time: they share the scanner's on-disk index

    # -- models --------------------------------------------------------------------------------------------------
    def load(self, source: str) -> LoadedModel:
        """A model by path, URL or Hub reference (`hf.co/ORG/REPO:QUANT`), through the one loader the CLI uses."""
        from fitplan.core.inputs import model_source

        source = source.strip()
        m = model_source.load_model(source, find_mmproj=True)
        profile = m.profile
        if profile.is_mmproj:
            raise GGUFError(
                "this is a multimodal projector (mmproj); open the language model it belongs to",
                None,
                m.model_arg,
            )
        # an unknown architecture is already a warning of the profile's (the builder says it once)
        return LoadedModel(m.model_arg, profile, m.mmproj, profile.warnings, m.mmproj_note)

    # -- library ------------------------------------------------------------------------------------------------
    def library_roots(self, folders: tuple[str, ...]) -> tuple[LibraryRoot, ...]:
        """The bundled examples, the user's folders, then the usual download places (Hugging Face, llama.cpp,
        LM Studio, ollama; absent ones are skipped by the scan)."""
        from fitplan.core.library import dedupe_roots, default_roots

        roots: list[LibraryRoot] = []
        examples = examples_dir()
        if examples is not None:
            roots.append(LibraryRoot(str(examples), RootKind.EXAMPLES))
        roots += [LibraryRoot(expand_home(f), RootKind.FOLDER) for f in folders]
        roots += (self._library_places or default_roots)()
        return dedupe_roots(roots)

    def scan_library(
        self, roots: tuple[LibraryRoot, ...], cancel: threading.Event
    ) -> Iterator[LibraryModel | SkippedFile]:
        """Models (split sets as one, projectors attached) and skipped files as each folder is done; unchanged
        files are answered from the scan index without reading their header. Stops soon after `cancel` is set."""
        from fitplan.core.library import JsonScanIndex, LibraryScanner, default_index_path

        with self._scan_lock:
            if self._scanner is None:
                self._scanner = LibraryScanner(index=JsonScanIndex(default_index_path()))
            yield from self._scanner.iter_scan(roots, cancel)

    # -- hardware ------------------------------------------------------------------------------------------------
    def detect(self) -> Detection:
        return self._probe()

    @staticmethod
    def _probe_system() -> Detection:
        from fitplan.core.hardware import detect_hardware, machine_from

        result = detect_hardware()
        machine = machine_from(result)
        return Detection(machine.gpus, machine.host, tuple(result.problems), tuple(result.gpus))

    @staticmethod
    def catalog() -> tuple[tuple[str, tuple[CatalogChoice, ...]], ...]:
        """GPUs to offer as hypothetical devices, grouped by vendor and market (`catalog_groups`)."""
        from fitplan.core.hardware.catalog import catalog_groups

        return catalog_groups()

    # -- estimates -----------------------------------------------------------------------------------------------
    def estimate(
        self,
        model: LoadedModel,
        settings: LaunchSettings,
        machine: Machine,
        draft: ModelProfile | None = None,
    ) -> Estimate:
        from fitplan.core.estimate.estimator import estimate

        mmproj = self._mmproj_for(model, settings)
        loras, _unread = self._loras(settings)
        return estimate(model.profile, settings, machine, mmproj=mmproj, draft=draft, loras=loras)

    @staticmethod
    def _loras(settings: LaunchSettings) -> tuple[tuple[LoraAdapter, ...], tuple[str, ...]]:
        """The LoRA adapters of the settings, and a line for adapters that cannot be read: the window keeps
        planning without them and says so (the CLI refuses the command)."""
        from fitplan.core.inputs.model_source import load_loras
        from fitplan.core.model.lora import LoraError

        try:
            return load_loras(settings), ()
        except LoraError as exc:
            return (), (f"{exc}: the adapters are not counted in this plan.",)

    @staticmethod
    def _mmproj_for(model: LoadedModel, settings: LaunchSettings) -> ModelProfile | None:
        """The projector only when it is loaded: "not loaded" keeps it out of every device."""
        if settings.mmproj is MmprojPlacement.NONE or not settings.mmproj_path:
            return None
        return model.mmproj

    def curve(
        self,
        model: LoadedModel,
        settings: LaunchSettings,
        machine: Machine,
        draft: ModelProfile | None = None,
    ) -> CurveData:
        """Memory at CURVE_POINTS contexts. It does not depend on the chosen context, so while only the context
        changes (a slider drag) the last curve is reused."""
        from fitplan.core.estimate.curve import estimate_curve

        top = max(131072, model.profile.n_ctx_train, settings.n_ctx)
        key = (model.source, id(model.profile), id(draft), replace(settings, n_ctx=0), machine, top)
        if self._curve_cache is not None and self._curve_cache[0] == key:
            return self._curve_cache[1]
        grid = self.curve_contexts(top)
        mmproj = self._mmproj_for(model, settings)
        c = estimate_curve(
            model.profile,
            settings,
            machine,
            [int(n) for n in grid],
            mmproj=mmproj,
            draft=draft,
            loras=self._loras(settings)[0],
        )
        curve = CurveData(np.asarray(c.contexts, dtype=np.int64), tuple(c.devices), np.asarray(c.bytes))
        self._curve_cache = (key, curve)
        return curve

    @staticmethod
    def curve_contexts(top: int) -> np.ndarray:
        """CURVE_POINTS log-spaced contexts from MIN_CONTEXT to `top`, multiples of CONTEXT_STEP."""
        raw = np.geomspace(MIN_CONTEXT, top, CURVE_POINTS) // CONTEXT_STEP * CONTEXT_STEP
        grid = np.unique(raw.astype(np.int64))
        result: np.ndarray = grid[grid >= MIN_CONTEXT]
        return result

    def plan(self, request: PlanRequest) -> PlanOutcome:
        """The estimate at the chosen settings, the placement that fits them, the largest context, the command."""
        from fitplan.core.estimate.accuracy import accuracy_band
        from fitplan.core.plan import planner
        from fitplan.core.plan.held import held_memory
        from fitplan.core.plan.pins import ollama_auto_context, pins_from_settings
        from fitplan.core.plan.pool import memory_notes
        from fitplan.core.plan.request import PlanQuery, answer
        from fitplan.core.plan.search import default_estimate_fn
        from fitplan.core.plan.summary import verdict_words

        model, settings, machine = request.model, request.settings, request.machine
        notes: list[str] = []
        export_settings = settings
        resolved = ollama_auto_context(model.profile, settings, machine)
        if resolved is not None:  # plan at ollama's own context, export without pinning it
            settings, note = resolved
            notes.append(note)
        margin = planner.MarginPolicy(gpu_margin_bytes=request.margin_bytes)
        mmproj = self._mmproj_for(model, settings)
        given = request.pinned | ({"n_cpu_moe"} if settings.n_cpu_moe else set())
        pins = pins_from_settings(settings, frozenset(given))
        draft = request.draft if settings.draft is not None else None
        loras, unread = self._loras(settings)
        notes.extend(unread)
        estimate_fn = default_estimate_fn(mmproj=mmproj, draft=draft, loras=loras)
        query = PlanQuery(
            model.profile, machine, pins, Objective(request.goal, request.min_tps), margin, estimate_fn
        )
        # the alternatives re-plan a few times: only for the shown plan, not for badges or while dragging
        got = answer(query, alternatives=request.with_curve)
        plan, alternatives = got.plan, got.alternatives
        why = tuple(f"why this context: {w}" for w in (got.why,) if w)
        plan_settings: LaunchSettings = plan.settings
        est: Estimate = (
            plan.estimate if plan.estimate is not None else self.estimate(model, settings, machine, draft)
        )
        # with the longest context first, the plan chose the context
        shown_ctx = plan.settings.n_ctx if request.goal is Goal.CONTEXT else settings.n_ctx
        words = verdict_words(plan, planner.plan_verdict(plan, machine), shown_ctx, bool(machine.gpus))
        verdict = Verdict(words.level.value, words.text, words.binding, words.most_short)
        max_ctx = plan.largest.n_ctx if plan.fits and plan.largest is not None else 0
        curve = self.curve(model, plan_settings, machine, draft) if request.with_curve else None
        args = self.command_args(model, plan_settings)
        ollama = None
        if settings.engine is Engine.OLLAMA:
            auto = export_settings.n_ctx <= 0
            ollama = self.ollama_setup(model, replace(plan_settings, n_ctx=0) if auto else plan_settings)
        return PlanOutcome(
            request.request_id,
            est,
            verdict,
            max_ctx,
            args,
            curve,
            plan_settings,
            (*notes, *memory_notes(plan.context.usage), *plan.notes, *why),
            ollama,
            alternatives,
            accuracy_band(model.profile, est),
            margin.kept_free(machine),
            got.speed,
            held_memory(machine, request.detected, margin),
        )

    def fit_level(self, request: PlanRequest) -> str:
        """Only the verdict level (for the library's fit badges); never touches the estimator thread's curve cache."""
        return self.plan(replace(request, with_curve=False)).verdict.level

    # -- command -------------------------------------------------------------------------------------------------
    @staticmethod
    def command_args(model: LoadedModel, settings: LaunchSettings) -> tuple[str, ...]:
        """The llama-server argv (a model given by URL is passed as `-mu URL`)."""
        from fitplan.core.launch.command_line import plan_to_args

        return plan_to_args(settings, model.source)

    @staticmethod
    def ollama_setup(model: LoadedModel, settings: LaunchSettings) -> OllamaSetup:
        from fitplan.core.launch.command_line import ollama_export

        export = ollama_export(settings, model.source)
        return OllamaSetup(export.environment, export.modelfile, export.create_argv())

    @staticmethod
    def render_command(args: tuple[str, ...], shell: str) -> str:
        from fitplan.core.launch.shell import join

        return join(list(args), shell, multiline=True)

    @staticmethod
    def render_ollama(setup: OllamaSetup, shell: str) -> str:
        """The environment of the ollama server as the shell sets it, a command that writes the Modelfile, and the
        commands that create and run the model."""
        from fitplan.core.launch.command_line import env_lines
        from fitplan.core.launch.shell import file_writing_lines, join

        remark = "REM" if shell == "cmd" else "#"
        lines = [f"{remark} Environment of the ollama server (ollama serve, or its service):"]
        env = env_lines(setup.environment, shell)
        lines.append(env if env else f"{remark}   (none needed: ollama's defaults)")
        lines += file_writing_lines("Modelfile", setup.modelfile.rstrip("\n").splitlines(), shell)
        lines.append(join(list(setup.create_argv), shell))
        lines.append(join(["ollama", "run", setup.create_argv[2]], shell))
        return "\n".join(lines)

    @staticmethod
    def verify(model: LoadedModel, args: Sequence[str], machine: Machine, bin_dir: str) -> str:
        """llama-fit-params' dry run of a plan's flags next to the estimate for `machine`, in one sentence (the
        comparison of `fitplan verify`). Raises FitplanError when it cannot run."""
        from fitplan.core.base.errors import FitplanError
        from fitplan.core.inputs.model_source import load_model
        from fitplan.core.launch.fit_params import BINARY, compare, find_binary, summary

        exe = find_binary(Path(bin_dir))
        if exe is None:
            raise FitplanError(f"{BINARY} not found in {bin_dir}: it is built with llama.cpp")
        loaded = load_model(model.source, header_only=True)
        return summary(compare(exe, loaded.profile, loaded.files, args, machine, timeout=600).rows)

    @staticmethod
    def llama_server_in(bin_dir: str) -> str | None:
        if not bin_dir:
            return None
        for name in ("llama-server", "llama-server.exe"):
            p = Path(bin_dir) / name
            if p.is_file():
                return str(p)
        return None


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
