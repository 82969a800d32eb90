"""The planner's state and flow: which model, which devices, which settings; requests out, results in.

Panels never talk to the backend; they emit signals that land here, and this object updates them. Blocking work
goes to the estimator thread or the job pool; every error ends in `show_error`.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QStatusBar

from fitplan.core.devices import MIB
from fitplan.core.errors import FitplanError, GGUFError
from fitplan.core.user_settings import ModelChoices, UserSettings, save_user_settings
from fitplan.gui.backend import (
    Backend,
    Detection,
    LoadedModel,
    PlanOutcome,
    PlanRequest,
    VerdictLevel,
    fmt_ctx,
)
from fitplan.gui.panels.banner import MessageBanner
from fitplan.gui.panels.chart import ChartPanel
from fitplan.gui.panels.command import CommandPanel
from fitplan.gui.panels.hardware import HardwarePanel
from fitplan.gui.panels.models import ModelsPanel
from fitplan.gui.panels.settings import SettingsPanel
from fitplan.gui.panels.summary import SummaryPanel
from fitplan.gui.panels.verdict import VerdictPanel
from fitplan.gui.workers import Estimator, JobError, Jobs

#: Settings changes are coalesced for this long before an estimate is requested (the chart line moves at once).
DEBOUNCE_MS = 30
MAX_WAIT_MS = 150
BADGE_DELAY_MS = 400  # fit badges of the whole library are refreshed once the hardware stops changing
DEFAULT_CONTEXT = 32768
EXAMPLE_MODEL = "Llama-3.1-8B-Instruct-Q4_K_M.gguf"


def examples_dir() -> Path | None:
    """The bundled header-only example models (package data, or a source checkout's resources/examples)."""
    here = Path(__file__).resolve()
    candidates = [here.parents[3] / "resources" / "examples"]
    try:
        from fitplan import bundled
    except ImportError:
        pass
    else:
        candidates.insert(0, bundled.examples_dir())
    for candidate in candidates:
        if (candidate / EXAMPLE_MODEL).is_file():
            return candidate
    return None


def most_overfull(outcome: PlanOutcome) -> int:
    """Index of the device that is most over its free memory in the outcome's estimate (what to show first)."""
    devices = outcome.estimate.devices
    return max(range(len(devices)), key=lambda i: devices[i].used_bytes - devices[i].device.free_bytes)


@dataclass
class Panels:
    models: ModelsPanel
    summary: SummaryPanel
    hardware: HardwarePanel
    settings: SettingsPanel
    chart: ChartPanel
    verdict: VerdictPanel
    command: CommandPanel
    banner: MessageBanner
    status: QStatusBar


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
        self.estimator = Estimator(backend, self)
        self.jobs = Jobs(parent=self)
        self._scan_errors: list[str] = []
        self.library: dict[str, LoadedModel] = {}  # every model in the list, by path or URL
        self._badge_generation = 0
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self.request_estimate)
        self._pending_since: float | None = None  # when the first change of the current burst came in
        self._badge_timer = QTimer(self)
        self._badge_timer.setSingleShot(True)
        self._badge_timer.setInterval(BADGE_DELAY_MS)
        self._badge_timer.timeout.connect(self.refresh_badges)

        p = panels
        p.models.open_requested.connect(self.open)
        p.models.folder_added.connect(self.add_folder)
        p.hardware.devices_changed.connect(self._devices_changed)
        p.settings.changed.connect(self.schedule_estimate)
        p.settings.context_moved.connect(p.chart.set_context)
        p.chart.context_dragged.connect(p.settings.set_context)
        p.command.shell_changed.connect(self._shell_changed)
        p.command.verify_requested.connect(self.verify)
        self.estimator.result.connect(self._show_outcome)
        self.estimator.error.connect(self.show_error)
        self.jobs.error.connect(self.show_error)

        p.models.set_recent(user.recent_files)
        p.command.set_shell(user.shell)
        p.command.set_verify_available(backend.llama_server_in(user.llama_bin_dir) is not None)

    # -- start ---------------------------------------------------------------------------------------------------
    def start(self, initial: str | None = None) -> None:
        self.p.status.showMessage("Detecting GPUs…")
        self.jobs.start("GPU detection", lambda _progress: self.backend.detect(), self._detected)
        for folder in self.user.folders:
            self.add_folder(folder, remember=False)
        first = initial or self.user.last_model
        if not first or (not first.startswith(("http://", "https://")) and not Path(first).is_file()):
            ex = examples_dir()
            first = str(ex / EXAMPLE_MODEL) if ex else ""
        if first:
            self.open(first)

    def settled(self) -> bool:
        """No job running and the newest request answered (tests and benches wait for this)."""
        out = self.outcome
        return self.jobs.running == 0 and out is not None and out.request_id == self.estimator.latest_id

    def shutdown(self) -> None:
        self._debounce.stop()
        self._badge_timer.stop()
        self.estimator.shutdown()
        self.jobs.shutdown()

    # -- models --------------------------------------------------------------------------------------------------
    def open(self, source: str) -> None:
        self.p.status.showMessage(f"Reading the header of {source}…")
        name = source if source.startswith(("http://", "https://")) else Path(source).name
        self.jobs.start(f"Opening {name}", lambda _progress: self.backend.load(source), self._loaded)

    def _loaded(self, model: LoadedModel) -> None:
        self.model = model
        p = self.p
        self.library[model.source] = model
        p.models.add_model(model)
        p.models.select(model.source)
        p.summary.set_model(model)
        choices = self.user.model_choices.get(model.source)
        if choices is None:
            choices = ModelChoices(n_ctx=min(DEFAULT_CONTEXT, max(256, model.profile.n_ctx_train)))
        p.settings.set_model(model.profile, model.mmproj is not None, choices)
        p.chart.set_context(choices.n_ctx)
        self.user = self.user.with_recent(model.source)
        p.models.set_recent(self.user.recent_files)
        p.status.showMessage(f"Opened {model.profile.name}", 4000)
        if model.warnings:
            p.banner.show_message("warning", " ".join(model.warnings))
        elif p.banner.level == "error":
            p.banner.hide()
        self.model_loaded.emit(model)
        self.request_estimate()

    def add_folder(self, folder: str, remember: bool = True) -> None:
        if remember and folder not in self.user.folders:
            self.user = replace(self.user, folders=(*self.user.folders, folder))
        flag = self.jobs.cancel_flag()
        self._scan_errors = []

        def scan(progress: Any) -> int:
            n = 0
            for item in self.backend.scan(folder, flag.is_set):
                progress(item)
                n += 1
            return n

        self.p.status.showMessage(f"Scanning {folder}…")
        self.jobs.start(f"Scanning {folder}", scan, lambda n: self._scan_done(folder, n), self._scanned)

    def _scanned(self, item: LoadedModel | GGUFError) -> None:
        if isinstance(item, LoadedModel):
            self.library.setdefault(item.source, item)
            self.p.models.add_model(item)
        else:
            self._scan_errors.append(str(item))

    def _scan_done(self, folder: str, n: int) -> None:
        self.p.status.showMessage(f"Scanned {folder}: {n} file(s)", 5000)
        self.refresh_badges()
        if self._scan_errors:
            more = f" (and {len(self._scan_errors) - 1} more)" if len(self._scan_errors) > 1 else ""
            self.p.banner.show_message("warning", f"Some files could not be read: {self._scan_errors[0]}{more}")

    # -- hardware ------------------------------------------------------------------------------------------------
    def _detected(self, detection: Detection) -> None:
        self.detection = detection
        self.p.hardware.set_detection(detection, self.user.hypothetical_devices, self.user.planned_devices)
        gpus = len(detection.gpus)
        self.p.status.showMessage(f"Found {gpus} GPU(s)", 4000)
        if not detection.gpus:
            why = f" ({detection.problems[0]})" if detection.problems else ""
            self.p.banner.show_message(
                "info",
                f"No GPU detected{why}. Planning for system RAM only; add a hypothetical GPU under Hardware "
                "to plan for one.",
            )
        self.hardware_ready.emit()
        self.request_estimate()

    def _devices_changed(self) -> None:
        hw = self.p.hardware
        self.user = replace(self.user, hypothetical_devices=hw.hypothetical(), planned_devices=hw.planned_names())
        self.schedule_estimate()
        self._badge_timer.start()

    # -- estimates -----------------------------------------------------------------------------------------------
    def current_request(self) -> PlanRequest | None:
        machine = self.p.hardware.machine()
        if self.model is None or machine is None:
            return None
        choices = self.p.settings.choices()
        self.user = self.user.with_choices(self.model.source, choices)
        mm = self.model.mmproj.path if self.model.mmproj is not None else None
        return PlanRequest(
            self.estimator.next_id(), self.model, choices.to_launch_settings(mm), machine, choices.margin_mib * MIB
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
        request = self.current_request()
        if request is not None:
            self.estimator.submit(request)

    def refresh_badges(self) -> None:
        """Estimate, off the GUI thread, whether each library model fits the planned devices (its saved settings)."""
        machine = self.p.hardware.machine()
        if machine is None or not self.library:
            return
        self._badge_generation += 1
        generation = self._badge_generation
        jobs = []
        for source, model in self.library.items():
            choices = self.user.model_choices.get(source) or ModelChoices(
                n_ctx=min(DEFAULT_CONTEXT, max(256, model.profile.n_ctx_train))
            )
            mm = model.mmproj.path if model.mmproj is not None else None
            jobs.append(PlanRequest(0, model, choices.to_launch_settings(mm), machine, choices.margin_mib * MIB,
                                    with_curve=False))

        def work(_progress: Any) -> dict[str, str]:
            levels = {}
            for request in jobs:
                try:
                    levels[request.model.source] = self.backend.fit_level(request)
                except FitplanError:
                    levels[request.model.source] = ""
            return levels

        self.jobs.start("Fit badges", work, lambda levels: self._badges(generation, levels))

    def _badges(self, generation: int, levels: dict[str, str]) -> None:
        if generation != self._badge_generation:
            return  # the hardware changed since: a newer refresh is on its way
        for source, level in levels.items():
            self.p.models.set_fit(source, level)

    def _show_outcome(self, outcome: PlanOutcome) -> None:
        self.outcome = outcome
        p = self.p
        if outcome.curve is not None:
            trained = self.model.profile.n_ctx_train if self.model is not None else 0
            p.chart.set_curve(outcome.curve, self.p.settings.choices().margin_mib * MIB, outcome.max_context, trained)
            if outcome.verdict.level == VerdictLevel.NO_FIT:
                p.chart.select_device(most_overfull(outcome))
        p.chart.set_context(outcome.estimate.settings.n_ctx)
        p.verdict.set_verdict(outcome.verdict, " ".join(outcome.notes))
        p.verdict.setToolTip("Assumptions behind this estimate:\n• " + "\n• ".join(outcome.estimate.assumptions)
                             if outcome.estimate.assumptions else "")
        p.command.set_command(self.backend.render_command(outcome.args, p.command.current_shell()))
        if self.model is not None:
            p.models.set_fit(self.model.source, outcome.verdict.level)
        if outcome.estimate.warnings:
            p.banner.show_message("warning", " ".join(outcome.estimate.warnings))
        elif p.banner.level in ("error", "warning") and p.banner.isVisible() and "Estimate" in p.banner.text():
            p.banner.hide()
        fits = f"fits up to {fmt_ctx(outcome.max_context)}" if outcome.max_context else "does not fit"
        p.status.showMessage(f"Estimate updated: {fits}", 3000)
        self.outcome_shown.emit(outcome)

    def show_error(self, err: JobError) -> None:
        self.p.banner.show_message("error", f"{err.what}: {err.message}")
        self.p.status.showMessage(f"{err.what} failed", 5000)

    # -- command -------------------------------------------------------------------------------------------------
    def _shell_changed(self, shell: str) -> None:
        self.user = replace(self.user, shell=shell)
        if self.outcome is not None:
            self.p.command.set_command(self.backend.render_command(self.outcome.args, shell))

    def copy_command(self) -> None:
        self.p.command.copy()
        self.p.status.showMessage("Command copied to the clipboard", 3000)

    def set_llama_bin_dir(self, folder: str) -> None:
        self.user = replace(self.user, llama_bin_dir=folder)
        found = self.backend.llama_server_in(folder) is not None
        self.p.command.set_verify_available(found)
        if not found:
            self.p.banner.show_message("warning", f"No llama-server in {folder}; verification stays off.")

    def verify(self) -> None:
        if self.outcome is None:
            return
        server = self.backend.llama_server_in(self.user.llama_bin_dir)
        if server is None:
            return
        fit = Path(server).with_name(Path(server).name.replace("llama-server", "llama-fit-params"))
        argv = [str(fit), *self.outcome.args[1:]]

        def run(_progress: Any) -> str:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
            return (done.stdout + done.stderr)[-4000:]

        self.p.status.showMessage("Running llama-fit-params…")
        self.jobs.start("Verify with llama.cpp", run, self._verified)

    def _verified(self, output: str) -> None:
        tail = "\n".join(output.strip().splitlines()[-6:])
        self.p.banner.show_message("info", f"llama-fit-params says:\n{tail}")

    # -- persistence ---------------------------------------------------------------------------------------------
    def save(self, geometry: str, state: str) -> None:
        if self.model is not None:
            self.user = self.user.with_choices(self.model.source, self.p.settings.choices())
        self.user = replace(self.user, window_geometry=geometry, window_state=state)
        try:
            save_user_settings(self.user, self.config_dir)
        except OSError as exc:
            self.p.status.showMessage(f"Could not save settings: {exc}", 5000)
