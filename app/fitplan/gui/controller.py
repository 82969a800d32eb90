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

from fitplan.core.base.devices import MIB
from fitplan.core.base.errors import FitplanError
from fitplan.core.base.launch_settings import Engine
from fitplan.core.inputs.user_settings import ModelChoices, UserSettings, save_user_settings
from fitplan.core.library.model import LibraryModel, LibraryRoot, RootKind, SkippedFile
from fitplan.gui.backend import (
    EXAMPLE_MODEL,
    Backend,
    Detection,
    LoadedModel,
    PlanOutcome,
    PlanRequest,
    VerdictLevel,
    examples_dir,
    fmt_ctx,
)
from fitplan.gui.panels.banner import MessageBanner
from fitplan.gui.panels.chart import ChartPanel
from fitplan.gui.panels.command_box import CommandPanel
from fitplan.gui.panels.hardware import HardwarePanel
from fitplan.gui.panels.launch_controls import SettingsPanel
from fitplan.gui.panels.models import ModelsPanel
from fitplan.gui.panels.summary import SummaryPanel
from fitplan.gui.panels.verdict import VerdictPanel
from fitplan.gui.workers import Estimator, JobError, Jobs

#: Settings changes are coalesced for this long before an estimate is requested (the chart line moves at once).
DEBOUNCE_MS = 30
MAX_WAIT_MS = 150
BADGE_DELAY_MS = 400  # fit badges of the whole library are refreshed once the hardware stops changing
DEFAULT_CONTEXT = 32768


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
        self._scans_done = 0
        self.library: dict[str, LoadedModel | LibraryModel] = {}  # every model in the list, by path or URL
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
        self._llama_server = backend.llama_server_in(user.llama_bin_dir)
        p.command.set_verify_available(self._llama_server is not None)

    # -- start ---------------------------------------------------------------------------------------------------
    def start(self, initial: str | None = None) -> None:
        self.p.status.showMessage("Detecting GPUs…")
        self.jobs.start("GPU detection", lambda _progress: self.backend.detect(), self._detected)
        self.scan_library(self.backend.library_roots(self.user.folders), announce=False)
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
            choices = self.default_choices(model)
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
        self.scan_library((LibraryRoot(folder, RootKind.FOLDER),), announce=True)

    def scan_library(self, roots: tuple[LibraryRoot, ...], announce: bool) -> None:
        """Scan `roots` off the GUI thread; each model joins the list as its folder is done. `announce`: the user
        asked for this scan, so files that could not be used are reported in the banner (else in the status bar)."""
        flag = self.jobs.cancel_flag()
        errors: list[str] = []
        label = roots[0].path if len(roots) == 1 else "the model library"

        def scan(progress: Any) -> int:
            n = 0
            for item in self.backend.scan_library(roots, flag):
                progress(item)
                n += isinstance(item, LibraryModel)
            return n

        def scanned(item: LibraryModel | SkippedFile) -> None:
            if isinstance(item, LibraryModel):
                if item.path not in self.library:
                    self.library[item.path] = item
                self.p.models.add_entry(item)
            else:
                errors.append(f"{item.path}: {item.reason}")

        self.p.status.showMessage(f"Scanning {label}…")
        self.jobs.start(f"Scanning {label}", scan, lambda n: self._scan_done(label, n, errors, announce), scanned)

    def _scan_done(self, label: str, n: int, errors: list[str], announce: bool) -> None:
        self._scan_errors = errors
        self._scans_done += 1
        skipped = f", {len(errors)} file(s) skipped" if errors else ""
        self.p.status.showMessage(f"Scanned {label}: {n} model(s){skipped}", 5000)
        self.refresh_badges()
        if errors and announce:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            self.p.banner.show_message("warning", f"Some files could not be used: {errors[0]}{more}")

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
        if self._scans_done:
            self.refresh_badges()  # the scan ended first: its models wait for the hardware

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
        """Estimate, off the GUI thread, whether each library model fits the planned devices (its saved settings).
        Models the scan found but nobody opened yet have their header read first."""
        machine = self.p.hardware.machine()
        if machine is None or not self.library:
            return
        self._badge_generation += 1
        generation = self._badge_generation
        entries = list(self.library.items())
        choices = {source: self.user.model_choices.get(source) for source, _ in entries}
        margin = {source: (c or ModelChoices()).margin_mib * MIB for source, c in choices.items()}

        def work(_progress: Any) -> tuple[dict[str, str], dict[str, LoadedModel]]:
            levels: dict[str, str] = {}
            loaded: dict[str, LoadedModel] = {}
            for source, entry in entries:
                try:
                    model = entry if isinstance(entry, LoadedModel) else self.backend.load(source)
                    if not isinstance(entry, LoadedModel):
                        loaded[source] = model
                    c = choices[source] or self.default_choices(model)
                    mm = model.mmproj.path if model.mmproj is not None else None
                    request = PlanRequest(0, model, c.to_launch_settings(mm), machine, margin[source],
                                          with_curve=False)
                    levels[source] = self.backend.fit_level(request)
                except FitplanError:
                    levels[source] = ""
            return levels, loaded

        self.jobs.start("Fit badges", work, lambda result: self._badges(generation, *result))

    @staticmethod
    def default_choices(model: LoadedModel) -> ModelChoices:
        return ModelChoices(n_ctx=min(DEFAULT_CONTEXT, max(256, model.profile.n_ctx_train)))

    def _badges(self, generation: int, levels: dict[str, str], loaded: dict[str, LoadedModel]) -> None:
        for source, model in loaded.items():
            if not isinstance(self.library.get(source), LoadedModel):
                self.library[source] = model
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
        if p.settings.context_is_automatic():
            p.settings.show_context(outcome.estimate.settings.n_ctx)
        p.verdict.set_verdict(outcome.verdict, " ".join(outcome.notes))
        p.verdict.setToolTip("Assumptions behind this estimate:\n• " + "\n• ".join(outcome.estimate.assumptions)
                             if outcome.estimate.assumptions else "")
        self._show_command(outcome, p.command.current_shell())
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
            self._show_command(self.outcome, shell)

    def _show_command(self, outcome: PlanOutcome, shell: str) -> None:
        """The llama-server line, or for ollama its environment, Modelfile and create command."""
        engine = outcome.plan_settings.engine if outcome.plan_settings is not None else Engine.LLAMA_CPP
        try:
            if outcome.ollama is not None:
                text = self.backend.render_ollama(outcome.ollama, shell)
            else:
                text = self.backend.render_command(outcome.args, shell)
        except FitplanError as exc:
            text = ""
            self.p.banner.show_message("warning", f"The command cannot be written for this shell: {exc}")
        self.p.command.set_command(text, engine)
        # llama-fit-params verifies mainline llama.cpp's allocation only.
        self.p.command.set_verify_available(self._llama_server is not None and engine is Engine.LLAMA_CPP)

    def copy_command(self) -> None:
        self.p.command.copy()
        self.p.status.showMessage("Command copied to the clipboard", 3000)

    def set_llama_bin_dir(self, folder: str) -> None:
        self.user = replace(self.user, llama_bin_dir=folder)
        self._llama_server = self.backend.llama_server_in(folder)
        found = self._llama_server is not None
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
