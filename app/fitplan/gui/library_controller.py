"""The Models panel's controller: the library (every model listed, by path or URL), folder scans, the models of
earlier sessions, the draft models offered, and the fit badge of each model."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer

from fitplan.core.base.devices import MIB
from fitplan.core.base.errors import FitplanError
from fitplan.core.base.launch_settings import Engine, LaunchSettings
from fitplan.core.inputs.user_settings import ModelChoices, default_choices
from fitplan.core.library.model import LibraryModel, LibraryRoot, RootKind, SkippedFile
from fitplan.gui.backend import LoadedModel, PlanRequest

if TYPE_CHECKING:
    from fitplan.core.model.profile import ModelProfile
    from fitplan.gui.controller import Planner

BADGE_DELAY_MS = 400  # fit badges of the whole library are refreshed once the hardware stops changing


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def default_choices_of(model: LoadedModel) -> ModelChoices:
    """The choices of a model opened for the first time (the core's default context, capped by its training)."""
    return default_choices(model.profile.n_ctx_train)


class LibraryController(QObject):
    """The library's state (`models`, the scans, the badges) and the work that fills it, off the GUI thread."""

    def __init__(self, planner: Planner) -> None:
        super().__init__(planner)
        self.planner = planner
        self.p = planner.p
        self.models: dict[str, LoadedModel | LibraryModel] = {}  # every model in the list, by path or URL
        self.scan_errors: list[str] = []
        self.scans_done = 0
        self._badge_generation = 0
        self.badge_timer = QTimer(self)
        self.badge_timer.setSingleShot(True)
        self.badge_timer.setInterval(BADGE_DELAY_MS)
        self.badge_timer.timeout.connect(self.refresh_badges)

    def add(self, model: LoadedModel) -> None:
        """An opened model joins (or replaces its scanned entry in) the library."""
        self.models[model.source] = model

    def restore_opened(self) -> None:
        """The models opened by file, drop or URL in earlier sessions join the list again (URLs unread until
        clicked: reading them needs the network)."""
        from fitplan.core.inputs.model_source import is_remote_source

        local = [p for p in self.planner.user.recent_files if not is_remote_source(p) and Path(p).is_file()]
        for url in (p for p in self.planner.user.recent_files if is_remote_source(p)):
            self.p.models.add_placeholder(url)
        if not local:
            return

        def work(_progress: Any) -> list[LoadedModel]:
            out: list[LoadedModel] = []
            for path in local:
                try:
                    out.append(self.planner.backend.load(path))
                except FitplanError:
                    continue  # gone bad since: it simply is not listed
            return out

        self.planner.jobs.start("Restoring models", work, self._restored)

    def _restored(self, models: list[LoadedModel]) -> None:
        for model in models:
            if model.source not in self.models:
                self.models[model.source] = model
            self.p.models.add_model(model)
        self.offer_drafts()
        self.badge_timer.start()

    def offer_drafts(self) -> None:
        """The library's local models, smallest first, are the draft models the Settings panel offers."""
        rows: list[tuple[int, str, str]] = []
        for source, entry in self.models.items():
            if is_url(source) or not Path(source).is_file():
                continue
            if isinstance(entry, LibraryModel):
                size, label = entry.expected_size or entry.file_size, entry.display_name
            else:
                size, label = entry.profile.weight_bytes, Path(source).name
            rows.append((size, label, source))
        self.p.settings.set_draft_candidates([(label, source) for _size, label, source in sorted(rows)])

    def add_folder(self, folder: str, remember: bool = True) -> None:
        if remember and folder not in self.planner.user.folders:
            self.planner.user = replace(self.planner.user, folders=(*self.planner.user.folders, folder))
            self.planner.save_soon()
        self.scan_library((LibraryRoot(folder, RootKind.FOLDER),), announce=True)

    def scan_library(self, roots: tuple[LibraryRoot, ...], announce: bool) -> None:
        """Scan `roots` off the GUI thread; each model joins the list as its folder is done. `announce`: the user
        asked for this scan, so files that could not be used are reported in the banner (else in the status bar)."""
        flag = self.planner.jobs.cancel_flag()
        errors: list[str] = []
        label = roots[0].path if len(roots) == 1 else "the model library"

        def scan(progress: Any) -> int:
            n = 0
            for item in self.planner.backend.scan_library(roots, flag):
                progress(item)
                n += isinstance(item, LibraryModel)
            return n

        def scanned(item: LibraryModel | SkippedFile) -> None:
            if isinstance(item, LibraryModel):
                if item.path not in self.models:
                    self.models[item.path] = item
                self.p.models.add_entry(item)
            else:
                errors.append(f"{item.path}: {item.reason}")

        self.p.status.showMessage(f"Scanning {label}…")
        self.planner.jobs.start(
            f"Scanning {label}", scan, lambda n: self._scan_done(label, n, errors, announce), scanned
        )

    def _scan_done(self, label: str, n: int, errors: list[str], announce: bool) -> None:
        self.scan_errors = errors
        self.scans_done += 1
        self.offer_drafts()
        skipped = f", {len(errors)} file(s) skipped" if errors else ""
        self.p.status.showMessage(f"Scanned {label}: {n} model(s){skipped}", 5000)
        self.refresh_badges()
        if errors and announce:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            self.p.banner.show_message(
                "warning", f"Some files could not be used: {errors[0]}{more}", key="scan"
            )

    def refresh_badges(self) -> None:
        """Estimate, off the GUI thread, whether each library model fits the planned devices (its saved settings).
        Models the scan found but nobody opened yet have their header read first."""
        machine = self.p.hardware.machine()
        if machine is None or not self.models:
            return
        self._badge_generation += 1
        generation = self._badge_generation
        entries = list(self.models.items())
        choices = {source: self.planner.user.model_choices.get(source) for source, _ in entries}
        margin = {source: (c or ModelChoices()).margin_mib * MIB for source, c in choices.items()}
        devices = self.planner.user.launch_devices

        def work(_progress: Any) -> tuple[dict[str, str], dict[str, LoadedModel]]:
            levels: dict[str, str] = {}
            loaded: dict[str, LoadedModel] = {}
            for source, entry in entries:
                try:
                    model = entry if isinstance(entry, LoadedModel) else self.planner.backend.load(source)
                    if not isinstance(entry, LoadedModel):
                        loaded[source] = model
                    c = choices[source] or default_choices_of(model)
                    mm = model.mmproj.path if model.mmproj is not None else None
                    settings = c.to_launch_settings(mm)
                    if settings.engine is not Engine.OLLAMA:
                        settings = replace(settings, devices=devices)
                    draft = self._draft_of(settings)
                    request = PlanRequest(
                        0, model, settings, machine, margin[source], with_curve=False, draft=draft
                    )
                    levels[source] = self.planner.backend.fit_level(request)
                except FitplanError:
                    levels[source] = ""
            return levels, loaded

        self.planner.jobs.start("Fit badges", work, lambda result: self._badges(generation, *result))

    def _draft_of(self, settings: LaunchSettings) -> ModelProfile | None:
        """The draft model's profile for a badge (a draft that cannot be read is left out, as in the plan)."""
        if settings.draft is None:
            return None
        try:
            return self.planner.backend.load(settings.draft.model_path).profile
        except FitplanError:
            return None

    def _badges(self, generation: int, levels: dict[str, str], loaded: dict[str, LoadedModel]) -> None:
        for source, model in loaded.items():
            if not isinstance(self.models.get(source), LoadedModel):
                self.models[source] = model
        if generation != self._badge_generation:
            return  # the hardware changed since: a newer refresh is on its way
        for source, level in levels.items():
            self.p.models.set_fit(source, level)
