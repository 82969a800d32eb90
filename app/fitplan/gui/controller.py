"""The planner's state and flow: which model, which devices, which settings; requests out, results in.

Panels never talk to the backend; they emit signals that land here, and this object updates them. Blocking work
goes to the estimator thread or the job pool; every error ends in `show_error`. Three controllers hold the rest by
concern: `library` (the Models panel: library, scans, fit badges), `configs` (commands and presets in, configurations
out) and `commands` (the Command panel and verify). Every rule comes from the core.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QFileSystemWatcher, QObject, QTimer, Signal, Slot
from PySide6.QtWidgets import QStatusBar

from fitplan.core.base.devices import GIB, MIB, Machine
from fitplan.core.base.errors import FitplanError
from fitplan.core.base.files import expand_home
from fitplan.core.base.launch_settings import Engine, MmprojPlacement
from fitplan.core.base.units import fmt_ctx
from fitplan.core.inputs.user_settings import (
    UserSettings,
    save_user_settings,
    with_unheld,
)
from fitplan.gui.backend import (
    EXAMPLE_MODEL,
    WINDOW_PINS,
    Backend,
    CurveData,
    Detection,
    LoadedModel,
    PlanOutcome,
    PlanRequest,
    VerdictLevel,
    examples_dir,
    pins_for_goal,
)
from fitplan.gui.command_controller import CommandController
from fitplan.gui.configurations import Configurations
from fitplan.gui.library_controller import LibraryController, default_choices_of, is_url
from fitplan.gui.panels.activity import ActivityPanel
from fitplan.gui.panels.banner import MessageBanner
from fitplan.gui.panels.chart import ChartPanel
from fitplan.gui.panels.command_box import CommandPanel
from fitplan.gui.panels.device_bars import DeviceBarsPanel
from fitplan.gui.panels.hardware import HardwarePanel
from fitplan.gui.panels.launch_controls import SettingsPanel
from fitplan.gui.panels.models import ModelsPanel
from fitplan.gui.panels.summary import SummaryPanel
from fitplan.gui.panels.verdict import VerdictPanel
from fitplan.gui.workers import Estimator, JobError, Jobs, describe

if TYPE_CHECKING:
    from fitplan.core.model.profile import ModelProfile


#: Settings changes are coalesced for this long before an estimate is requested (the chart line moves at once).
DEBOUNCE_MS = 30
MAX_WAIT_MS = 150
SAVE_DELAY_MS = 2000  # the settings are saved this long after the last change (and when the window closes)
PLANNING_SIGN_MS = 250  # a plan that takes longer than this shows "Planning…" over the verdict it replaces


def device_names(machine: Machine | None) -> list[tuple[str, str]]:
    """The planned GPUs as `-dev` names them (llama.cpp's device name: `CUDA0`, `Vulkan1`), each described."""
    from fitplan.core.memory.weights import gpu_backend

    gpus = machine.gpus if machine is not None else ()
    return [
        (gpu_backend(d, i).buffer_type, f"{d.name} ({d.total_bytes / GIB:.0f} GiB)")
        for i, d in enumerate(gpus)
    ]


@dataclass
class Panels:
    models: ModelsPanel
    summary: SummaryPanel
    hardware: HardwarePanel
    settings: SettingsPanel
    chart: ChartPanel
    verdict: VerdictPanel
    devices: DeviceBarsPanel
    command: CommandPanel
    banner: MessageBanner
    status: QStatusBar
    activity: ActivityPanel


def message_key(what: str) -> str:
    """Which message a failed job's error replaces: one per kind of work."""
    if what == "Estimate":
        return "estimate-error"
    if what.startswith("Opening"):
        return "open"
    return what.lower().split(" ")[0]


class _UrlBridge(QObject):
    """Carries a URL read's result from its daemon thread back to the GUI thread (queued)."""

    done = Signal(int, object)
    failed = Signal(int, object)


class Planner(QObject):
    model_loaded = Signal(object)  # LoadedModel
    outcome_shown = Signal(object)  # PlanOutcome
    hardware_ready = Signal()

    def __init__(
        self,
        backend: Backend,
        panels: Panels,
        user: UserSettings,
        config_dir: Path | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.backend = backend
        self.p = panels
        self.user = user
        self.config_dir = config_dir
        self.model: LoadedModel | None = None
        self.detection: Detection | None = None
        self.outcome: PlanOutcome | None = None
        self.estimate_failed = (
            False  # the newest request ended in an error (nothing of the last outcome is shown)
        )
        self.estimator = Estimator(backend, self)
        self.jobs = Jobs(parent=self)
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self.request_estimate)
        self._pending_since: float | None = None  # when the first change of the current burst came in
        self._save_timer = QTimer(self)
        self._save_timer.setSingleShot(True)
        self._save_timer.setInterval(SAVE_DELAY_MS)
        self._save_timer.timeout.connect(self.save_settings)
        self._planning_sign = QTimer(self)
        self._planning_sign.setSingleShot(True)
        self._planning_sign.setInterval(PLANNING_SIGN_MS)
        self._planning_sign.timeout.connect(self._show_planning)
        # the open model's file: deleted or moved while open, it is no longer planned (nor written in the command)
        self._model_watch = QFileSystemWatcher(self)
        self._model_watch.fileChanged.connect(self._model_file_changed)
        self._local_file = (
            ""  # the open model's file when it was read from this machine (not a URL or Hub model)
        )
        self._draft_source = ""  # the draft model (-md) whose profile is read or being read
        self._draft_profile: ModelProfile | None = None
        self._draft_token = 0  # the draft read whose answer is awaited (0: none)
        # the example opened because the last model could not be read: it does not become the last model
        self._stand_in = ""
        self._url_token = 0  # the URL read whose answer is awaited (0: none)
        self._url_failed_hook: Callable[[JobError], None] | None = None
        self._url_bridge = _UrlBridge(self)
        self._url_bridge.done.connect(self._url_done)
        self._url_bridge.failed.connect(self._url_failed)

        self.library = LibraryController(self)  # the Models panel: the library, scans, badges
        self.configs = Configurations(self)  # commands and presets in, configurations out
        self.commands = CommandController(self)  # the Command panel: the command, copy, verify

        p = panels
        p.models.open_requested.connect(self.open)
        p.verdict.apply_requested.connect(self.configs.apply_alternative)
        p.models.folder_added.connect(self.library.add_folder)
        p.hardware.devices_changed.connect(self._devices_changed)
        p.settings.changed.connect(self.schedule_estimate)
        p.settings.context_moved.connect(p.chart.set_context)
        p.chart.context_dragged.connect(p.settings.set_context)
        p.command.shell_changed.connect(self.commands.shell_changed)
        p.command.verify_requested.connect(self.commands.verify)
        self.estimator.result.connect(self._show_outcome)
        self.estimator.error.connect(self.show_error)
        self.jobs.error.connect(self.show_error)

        p.models.set_recent(user.recent_files)
        p.hardware.set_host_ram_gib(user.host_ram_gib)
        p.settings.set_devices(user.launch_devices)
        p.command.set_shell(user.shell)

    # -- start ---------------------------------------------------------------------------------------------------
    def start(self, initial: str | None = None) -> None:
        """Detect GPUs, scan the library, restore the models opened before, and open `initial` (a path or URL
        given on the command line; a missing one is reported, not replaced by the example), else the last model,
        else the bundled example."""
        from fitplan.core.inputs.model_source import (
            is_remote_source,  # the Hub code loads after the first paint
        )

        self.estimator.warm_up()
        self.p.chart.build()  # pyqtgraph loads now, while the model's header is read and the first estimate runs
        self.p.status.showMessage("Detecting GPUs…")
        self.jobs.start("GPU detection", lambda _progress: self.backend.detect(), self._detected)
        self.library.scan_library(self.backend.library_roots(self.user.folders), announce=False)
        self.library.restore_opened()
        if initial:
            if is_remote_source(initial) or Path(expand_home(initial)).is_file():
                self.open(initial)
            else:
                self.p.banner.show_message("error", f"{initial}: no such file", key="open")
            return
        first = self.user.last_model
        if first and is_remote_source(first):
            self.open(first, failed=lambda err: self._reopen_failed(first, err))
            return
        if not first or not Path(first).is_file():
            first = self._example()
        if first:
            self.open(first)

    @staticmethod
    def _example() -> str:
        ex = examples_dir()
        return str(ex / EXAMPLE_MODEL) if ex else ""

    def _reopen_failed(self, source: str, err: JobError) -> None:
        """The last session's model is on the network and could not be read: say so, show the example meanwhile,
        and keep the model as the one to reopen next time."""
        example = self._example()
        instead = "the bundled example is shown instead" if example else "open a model to plan for"
        self.p.banner.show_message(
            "warning",
            f"Could not reopen {source} (offline?): {err.message}; {instead}. It is tried again next time.",
            key="reopen",
        )
        self.p.status.showMessage(f"{err.what} failed", 5000)
        if example:
            self._stand_in = example
            self.open(example)

    def settled(self) -> bool:
        """No job running or about to start, and the newest request answered (tests and benches wait for this)."""
        out = self.outcome
        if (
            self.jobs.running
            or self._url_token
            or self._debounce.isActive()
            or self.library.badge_timer.isActive()
        ):
            return False
        if self.estimate_failed:
            return True
        return out is not None and out.request_id == self.estimator.latest_id

    def shutdown(self) -> None:
        self._debounce.stop()
        self.library.badge_timer.stop()
        self._save_timer.stop()
        self._url_token = 0  # a URL read still hanging is a daemon thread: nobody waits for it
        self.estimator.shutdown()
        self.jobs.shutdown()

    # -- models --------------------------------------------------------------------------------------------------
    def open(self, source: str, failed: Callable[[JobError], None] | None = None) -> None:
        """Open a path, URL or Hub reference; `failed` (default: the message list) hears why it could not be."""
        source = source.strip()
        if is_url(source):
            self._open_url(source, failed)
            return
        name = Path(source).name
        what = f"Opening {name}"
        self.p.status.showMessage(f"Reading the header of {name}…", 5000)
        if failed is None:
            self.jobs.start(what, lambda _progress: self.backend.load(source), self._loaded)
            return

        def work(_progress: Any) -> LoadedModel | JobError:
            try:
                return self.backend.load(source)
            except Exception as exc:  # noqa: BLE001 - handed to `failed`, like every job's failure to show_error
                return describe(what, exc)

        def done(result: LoadedModel | JobError) -> None:
            if isinstance(result, JobError):
                failed(result)
            else:
                self._loaded(result)

        self.jobs.start(what, work, done)

    def _open_url(self, url: str, failed: Callable[[JobError], None] | None = None) -> None:
        """Read a header over the network on a daemon thread: Cancel (or quitting) never waits for the server."""
        self._url_token += 1
        self._url_failed_hook = failed
        token, bridge, backend = self._url_token, self._url_bridge, self.backend

        def work() -> None:
            try:
                model = backend.load(url)
            except Exception as exc:  # noqa: BLE001 - shown by show_error, like every job's failure
                result: object = describe(f"Opening {url}", exc)
                signal = bridge.failed
            else:
                result, signal = model, bridge.done
            with contextlib.suppress(RuntimeError):  # the window is gone
                signal.emit(token, result)

        self.p.activity.start(f"Reading the header of {url}…", self.cancel_open)
        threading.Thread(target=work, name="fitplan-url", daemon=True).start()

    def cancel_open(self) -> None:
        """Stop waiting for the URL being read (its answer, if it ever comes, is dropped)."""
        if self._url_token:
            self._url_token = 0
            self.p.activity.stop()
            self.p.status.showMessage("Stopped reading the URL", 4000)

    @Slot(int, object)
    def _url_done(self, token: int, model: LoadedModel) -> None:
        if token == self._url_token:
            self._url_token = 0
            self.p.activity.stop()
            self._loaded(model)

    @Slot(int, object)
    def _url_failed(self, token: int, err: JobError) -> None:
        if token == self._url_token:
            self._url_token = 0
            self.p.activity.stop()
            (self._url_failed_hook or self.show_error)(err)

    def _loaded(self, model: LoadedModel) -> None:
        self.model = model
        p = self.p
        self.library.add(model)
        p.models.add_model(model)
        p.models.select(model.source)
        if not is_url(model.source):
            p.models.set_start_folder(str(Path(model.source).parent))
            p.settings.draft_folder = str(Path(model.source).parent)  # a draft is often next to its model
        p.summary.set_model(model)
        p.settings.forget_plan()  # the previous model's plan says nothing about this one
        choices = self.user.model_choices.get(model.source)
        if choices is None:
            choices = default_choices_of(model)
        p.settings.set_model(model.profile, model.mmproj is not None, choices)
        p.chart.set_context(choices.n_ctx)
        p.chart.reset_hover()
        stand_in, self._stand_in = self._stand_in, ""
        if model.source != stand_in:  # the stand-in for a model that could not be reopened is not remembered
            self.user = self.user.with_recent(model.source)
        p.models.set_recent(self.user.recent_files)
        self.library.offer_drafts()
        p.status.showMessage(f"Opened {model.profile.name}", 4000)
        self._watch_model_file(opened=True)
        # What was said about the previous model (its warnings, its estimate, a failed open) is gone with it.
        p.banner.clear("model", "estimate", "estimate-error", "open")
        if model.warnings:
            p.banner.show_message("warning", " ".join(model.warnings), key="model")
        self.model_loaded.emit(model)
        self.request_estimate()
        self.library.badge_timer.start()  # every model opened gets its badge, not only the last of a burst

    # -- hardware ------------------------------------------------------------------------------------------------
    def _detected(self, detection: Detection) -> None:
        self.detection = detection
        self.p.hardware.set_detection(detection, self.user.hypothetical_devices, self.user.planned_devices)
        gpus = len(detection.gpus)
        self.p.status.showMessage(f"Found {gpus} GPU(s)", 4000)
        machine = self.p.hardware.machine()
        if not detection.gpus and (machine is None or not machine.gpus):
            why = f" ({detection.problems[0]})" if detection.problems else ""
            self.p.banner.show_message(
                "info",
                f"No GPU detected{why}. Planning for system RAM only; add a hypothetical GPU under Hardware "
                "to plan for one.",
                key="hardware",
            )
        self.hardware_ready.emit()
        self.request_estimate()
        if self.library.scans_done:
            self.library.refresh_badges()  # the scan ended first: its models wait for the hardware

    def _devices_changed(self) -> None:
        hw = self.p.hardware
        self.user = replace(
            self.user,
            hypothetical_devices=hw.hypothetical(),
            planned_devices=hw.planned_names(),
            host_ram_gib=hw.host_ram_gib(),
        )
        machine = hw.machine()
        self.p.settings.set_device_names(device_names(machine))
        if machine is not None and machine.gpus:
            self.p.banner.clear("hardware")
        self.p.settings.set_margin_limit(machine)
        self.p.chart.reset_hover()
        self.schedule_estimate()
        self.library.badge_timer.start()

    # -- estimates -----------------------------------------------------------------------------------------------
    def current_request(self) -> PlanRequest | None:
        machine = self.p.hardware.machine()
        if self.model is None or machine is None:
            return None
        choices = self.p.settings.choices()
        devices = self.p.settings.devices()
        self.user = replace(self.user.with_choices(self.model.source, choices), launch_devices=devices)
        mm = self.model.mmproj.path if self.model.mmproj is not None else None
        settings = replace(choices.to_launch_settings(mm), devices=self.p.settings.launch_devices())
        settings = with_unheld(settings, self.configs.unheld)
        draft = self._draft_profile if settings.draft is not None else None
        return PlanRequest(
            self.estimator.next_id(),
            self.model,
            settings,
            machine,
            choices.margin_mib * MIB,
            draft=draft,
            pinned=pins_for_goal(self.p.settings.goal(), WINDOW_PINS | self.configs.unheld_pins),
            goal=self.p.settings.goal(),
            min_tps=self.p.settings.min_gen_tps(),
            detected=self.detection.detected if self.detection is not None else (),
        )

    def schedule_estimate(self) -> None:
        """Coalesce a burst of changes; during a long drag still estimate every MAX_WAIT_MS."""
        now = time.monotonic()
        if self._pending_since is None:
            self._pending_since = now
        if (now - self._pending_since) * 1000 >= MAX_WAIT_MS:
            self._debounce.stop()
            self.request_estimate()
        else:
            self._debounce.start()

    def request_estimate(self) -> None:
        self._pending_since = None
        self.save_soon()
        self._show_missing_devices()
        if self._model_gone():
            return
        if self._read_draft():
            return  # estimated once the draft model's header is read
        request = self.current_request()
        if request is not None:
            self.estimate_failed = False
            self.estimator.submit(request)
            self._planning_sign.start()

    def _show_planning(self) -> None:
        """The newest request is still being planned: the verdict, chart and command on screen are the last plan's."""
        waiting = self.outcome is None or self.outcome.request_id != self.estimator.latest_id
        self.p.verdict.set_pending(waiting and not self.estimate_failed and self.model is not None)

    def _planned(self) -> None:
        self._planning_sign.stop()
        self.p.verdict.set_pending(False)

    # -- the open model's file -----------------------------------------------------------------------------------
    def _watch_model_file(self, opened: bool = False) -> None:
        """Watch the open model's file; `opened`: a model was just opened (was it read from a local file?)."""
        if opened:
            model = self.model
            self._local_file = model.source if model is not None and Path(model.source).is_file() else ""
        watched = self._model_watch.files()
        if watched:
            self._model_watch.removePaths(watched)
        if self._local_file and Path(self._local_file).is_file():
            self._model_watch.addPath(self._local_file)

    def _model_file_changed(self, path: str) -> None:
        if path == self._local_file and not Path(path).is_file():
            self.request_estimate()  # says it is gone and plans nothing

    def _model_gone(self) -> bool:
        """The open model's file was deleted or moved: nothing is planned for it (its last plan leaves the screen),
        until it is back or another model is opened."""
        model = self.model
        if model is None or not self._local_file or Path(self._local_file).is_file():
            if self.p.banner.has("model-gone"):
                self.p.banner.clear("model-gone")
                self._watch_model_file()
            return False
        self.estimator.next_id()  # an answer still on its way is for a file that is gone
        self._planned()
        self.p.banner.show_message(
            "error",
            f"{model.source} is gone (deleted or moved while open): nothing is planned for it. Open it again "
            "from where it is now.",
            key="model-gone",
        )
        self._show_no_estimate(f"No estimate: {Path(model.source).name} is gone")
        return True

    def _show_missing_devices(self) -> None:
        missing = self.p.settings.missing_devices() if self.p.settings.launch_devices() else ()
        if missing:
            self.p.banner.show_message(
                "warning",
                f"-dev names {', '.join(missing)}, not among the planned GPUs: llama-server would stop with "
                "'invalid device'. Choose the devices again under Settings, or add the GPU under Hardware.",
                key="devices",
            )
        else:
            self.p.banner.clear("devices")

    # -- the draft model -----------------------------------------------------------------------------------------
    def _read_draft(self) -> bool:
        """Read the header of the chosen draft model (-md) off the GUI thread when it changed; True while it is
        being read."""
        path = (
            self.p.settings.choices().draft_model
            if self.p.settings.current_engine() is not Engine.OLLAMA
            else ""
        )
        if path == self._draft_source:
            return bool(self._draft_token)
        self._draft_source, self._draft_profile = path, None
        self.p.banner.clear("draft")
        if not path:
            self._draft_token = 0
            return False
        self._draft_token += 1
        token, backend = self._draft_token, self.backend

        def work(_progress: Any) -> ModelProfile | str:
            try:
                return backend.load(path).profile
            except Exception as exc:  # noqa: BLE001 - any failure is said, and the estimates go on without it
                return describe("", exc).message

        self.jobs.start(
            f"Reading the draft model {Path(path).name}", work, lambda r: self._draft_read(token, path, r)
        )
        return True

    def _draft_read(self, token: int, path: str, result: ModelProfile | str) -> None:
        if token != self._draft_token:
            return  # another draft was chosen since
        self._draft_token = 0
        if isinstance(result, str):
            self.p.banner.show_message(
                "error",
                f"Draft model {path}: {result}. The estimate leaves it out; the command still names it.",
                key="draft",
            )
        else:
            self._draft_profile = result
        self.request_estimate()

    def _show_outcome(self, outcome: PlanOutcome) -> None:
        self.outcome = outcome
        self.estimate_failed = False
        self._planned()
        p = self.p
        p.banner.clear("estimate-error")
        if outcome.curve is not None:
            trained = self.model.profile.n_ctx_train if self.model is not None else 0
            p.chart.set_curve(outcome.curve, outcome.margins, outcome.max_context, trained, outcome.held)
            if outcome.verdict.level == VerdictLevel.NO_FIT and outcome.verdict.most_short is not None:
                p.chart.select_device(outcome.verdict.most_short, automatic=True)
            else:
                p.chart.restore_device()  # back to the device the user chose once the plan fits again
                self._chart_a_used_device(outcome.curve)
        p.chart.set_context(outcome.estimate.settings.n_ctx)
        p.devices.set_estimate(outcome.estimate, outcome.margins, outcome.held)
        self._show_plan_in_controls(outcome)
        if p.settings.context_is_automatic():
            p.settings.show_context(outcome.estimate.settings.n_ctx)
        p.verdict.set_verdict(outcome.verdict, " ".join(outcome.notes))
        p.verdict.set_alternatives(outcome.alternatives)
        p.verdict.setToolTip(
            "Assumptions behind this estimate:\n• " + "\n• ".join(outcome.estimate.assumptions)
            if outcome.estimate.assumptions
            else ""
        )
        self.commands.show(outcome, p.command.current_shell())
        if self.model is not None:
            p.models.set_fit(self.model.source, outcome.verdict.level)
        if outcome.estimate.warnings:
            p.banner.show_message("warning", " ".join(outcome.estimate.warnings), key="estimate")
        else:
            p.banner.clear("estimate")
        fits = f"fits up to {fmt_ctx(outcome.max_context)}" if outcome.max_context else "does not fit"
        p.status.showMessage(f"Estimate updated: {fits}", 3000)
        self.outcome_shown.emit(outcome)

    def _show_plan_in_controls(self, outcome: PlanOutcome) -> None:
        """The controls left on auto show what the plan chose (-ngl, --n-cpu-moe, the projector's device)."""
        from fitplan.core.estimate.estimator import mmproj_on_gpu
        from fitplan.core.memory.weights import active_gpu_positions

        planned = outcome.plan_settings
        machine = self.p.hardware.machine()
        if planned is None or machine is None:
            self.p.settings.forget_plan()
            return
        try:
            gpus = len(active_gpu_positions(planned, machine))
        except FitplanError:  # -dev names a GPU the machine lacks: said in the message list already
            gpus = 0
        self.p.settings.show_plan(planned, mmproj_on_gpu(MmprojPlacement.GPU, gpus))

    def _chart_a_used_device(self, curve: CurveData) -> None:
        """A device left out by -dev holds nothing: the chart shows the first one that holds something."""
        used = [i for i in range(len(curve.devices)) if curve.bytes[i].any()]
        if used and self.p.chart.device_box.currentIndex() not in used:
            self.p.chart.select_device(used[0], automatic=True)

    def show_error(self, err: JobError) -> None:
        key = message_key(err.what)
        self.p.banner.show_message("error", f"{err.what}: {err.message}", key=key)
        self.p.status.showMessage(f"{err.what} failed", 5000)
        if key == "open":  # the row clicked could not be opened: the highlight goes back to the open model
            self.p.models.select(self.model.source if self.model is not None else "")
        if key == "estimate-error":
            self._planned()
            self._show_no_estimate(f"No estimate: {err.message}")

    def _show_no_estimate(self, text: str) -> None:
        """Nothing of the last good estimate stays on screen as if it held for these settings."""
        self.estimate_failed = True
        self.p.verdict.set_error(text)
        self.p.chart.clear()
        self.p.devices.clear()
        self.p.settings.forget_plan()
        self.p.command.set_command("")
        self.p.command.set_verify_available(False)

    # -- persistence ---------------------------------------------------------------------------------------------
    def save_soon(self) -> None:
        """Save the settings once the changes stop (a crash or a killed session keeps what was chosen)."""
        self._save_timer.start()

    def save(self, geometry: str, state: str) -> None:
        self.user = replace(self.user, window_geometry=geometry, window_state=state)
        self.save_settings()

    def save_settings(self) -> bool:
        """Write the settings now. A folder that cannot be written is said in the message list (the window goes on
        with the settings in memory); the message goes once a save works again."""
        self._save_timer.stop()
        if self.model is not None:
            self.user = self.user.with_choices(self.model.source, self.p.settings.choices())
        self.user = replace(self.user, launch_devices=self.p.settings.devices())
        try:
            save_user_settings(self.user, self.config_dir)
        except OSError as exc:
            text = str(exc)
            self.p.banner.show_message("error", text[:1].upper() + text[1:], key="settings-save")
            self.p.status.showMessage("Could not save settings", 5000)
            return False
        self.p.banner.clear("settings-save")
        return True
