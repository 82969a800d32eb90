"""Configurations in and out: a pasted or dropped command, a preset (INI) or script loaded, a "what would change it"
row applied, and the plan saved as a preset, a script or an ollama Modelfile. Every flag is read by the core."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from fitplan.core.base.errors import FitplanError
from fitplan.core.base.files import expand_home
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.core.inputs.user_settings import (
    ExtraFlags,
    choices_from_settings,
    read_extra_flags,
    unheld_flags,
)

if TYPE_CHECKING:
    from fitplan.gui.controller import Planner

MAX_CONFIG_CHARS = 200_000

#: The save dialog's filters: the chosen one decides what a name without a known extension is saved as.
PRESET_FILTER = "llama-server preset (*.ini)"
SCRIPT_FILTER = "Shell script (*.sh *.ps1 *.bat)"
MODELFILE_FILTER = "ollama Modelfile (Modelfile *.modelfile)"
SAVE_FILTERS = ";;".join((PRESET_FILTER, SCRIPT_FILTER, MODELFILE_FILTER))
SCRIPT_SUFFIX = {"sh": ".sh", "powershell": ".ps1", "cmd": ".bat"}
SHELL_OF_SUFFIX = {".sh": "sh", ".ps1": "powershell", ".bat": "cmd", ".cmd": "cmd"}


@dataclass(frozen=True, slots=True)
class SaveTarget:
    """Where a configuration is written and as what: "preset" (INI), "script" (for `shell`) or "modelfile"."""

    path: str
    kind: str
    shell: str = ""


def save_target(path: str, chosen_filter: str, shell: str) -> SaveTarget:
    """What a name typed in the save dialog is written as. A known extension decides (an INI is never written into
    a .sh, a script never into a .ini); a name without one takes the chosen filter's kind and extension (the
    current shell's for a script), so that the file loads back."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".ini":
        return SaveTarget(path, "preset")
    if suffix in SHELL_OF_SUFFIX:
        return SaveTarget(path, "script", SHELL_OF_SUFFIX[suffix])
    if p.name == "Modelfile" or suffix == ".modelfile":
        return SaveTarget(path, "modelfile")
    if chosen_filter == MODELFILE_FILTER:
        return SaveTarget(path + ".modelfile", "modelfile")
    if chosen_filter == SCRIPT_FILTER:
        return SaveTarget(path + SCRIPT_SUFFIX.get(shell, ".sh"), "script", shell)
    return SaveTarget(path + ".ini", "preset")


def default_suffix(chosen_filter: str, shell: str) -> str:
    """The extension the save dialog adds to a name typed without one, for the chosen filter ("" for a Modelfile:
    ollama's own name for it has none)."""
    if chosen_filter == MODELFILE_FILTER:
        return ""
    return Path(save_target("name", chosen_filter, shell).path).suffix.removeprefix(".")


def looks_like_preset(text: str) -> bool:
    """INI text (its first line that is not blank or a comment opens a [section]) rather than a command line."""
    for line in text.splitlines():
        t = line.strip()
        if t and not t.startswith((";", "#")):
            return t.startswith("[")
    return False


def make_executable(path: str) -> None:
    """chmod +x for whoever may read the file (a saved script runs as ./name.sh)."""
    mode = os.stat(path).st_mode
    os.chmod(path, mode | ((mode & 0o444) >> 2))


def kept_flags(ignored: tuple[str, ...], unmodelled: tuple[str, ...]) -> tuple[str, ...]:
    """The pasted flags the plan's command does not write itself (those without a memory effect, and those whose
    effect fitplan does not model), each with its value, as argv words."""
    out: list[str] = []
    for entry in (*unmodelled, *ignored):
        flag, _, value = entry.partition(" ")
        out += [flag, value] if value else [flag]
    return tuple(out)


class Configurations(QObject):
    """The flags a command or preset set beyond the controls: kept in the command, or planned (no control)."""

    paste_failed = Signal(str)

    def __init__(self, planner: Planner) -> None:
        super().__init__(planner)
        self.planner = planner
        self.p = planner.p
        self._extra: tuple[tuple[str, ...], str, ExtraFlags] = ((), "", ExtraFlags())  # the last one read

    # The flags a command or preset set that no control holds belong to the open model: its choices carry them
    # (Settings › Extra flags, editable), so another model opened does not inherit them.
    def extra(self) -> ExtraFlags:
        """The open model's extra flags as the core reads them (none while they cannot be read: the field says
        why)."""
        words, engine = self.p.settings.extra_args(), self.p.settings.current_engine()
        if self._extra[:2] != (words, engine.value):
            try:
                flags = read_extra_flags(words, engine)
            except FitplanError:
                flags = ExtraFlags()
            self._extra = (words, engine.value, flags)
        return self._extra[2]

    @property
    def kept_args(self) -> tuple[str, ...]:
        """The open model's flags the plan's command does not write itself (written as given)."""
        return self.extra().kept

    @property
    def unheld(self) -> tuple[str, ...]:
        """The open model's flags no control holds that fitplan plans (--no-op-offload, -nr, -ot ...)."""
        return self.extra().planned

    @property
    def unheld_pins(self) -> frozenset[str]:
        """The settings those flags pin."""
        return self.extra().pins

    def apply_alternative(self, change: str) -> None:
        """One click on a "what would change it" row: its flags are applied to the current settings (the other
        objective goes to "Plan for:")."""
        from fitplan.core.launch.flags import parse_flags
        from fitplan.core.plan.alternatives import DROP_DRAFT, OBJECTIVE_FLAG, UNPIN

        req = self.planner.current_request()
        if req is None:
            return
        if change.startswith(DROP_DRAFT):
            self.p.settings.choose_draft("")  # "none" in the draft list: the plan follows the control
            self.p.status.showMessage("Applied: no draft model", 4000)
            return
        if change.startswith(UNPIN):
            flag = change.removeprefix(UNPIN)
            if self.p.settings.unpin(flag):
                self.p.status.showMessage(f"Applied: {flag} back to auto", 4000)
            else:
                self.p.banner.show_message(
                    "error", f"{flag} is not set by a control: remove it from Extra flags", key="alternative"
                )
            return
        if change.startswith(OBJECTIVE_FLAG + " "):
            self.p.settings.set_goal(change.removeprefix(OBJECTIVE_FLAG + " "))
            self.p.status.showMessage(f"Applied {change}", 4000)
            return
        try:
            parsed = parse_flags(change.split(), base=req.settings)
        except FitplanError as exc:
            self.p.banner.show_message("error", f"{change}: {exc}", key="alternative")
            return
        self.p.settings.set_choices(choices_from_settings(parsed.settings, self.p.settings.choices()))
        self.planner.schedule_estimate()
        self.p.status.showMessage(f"Applied {change}", 4000)

    def paste_command(self, text: str) -> None:
        """Set every control from a llama-server command line (pasted, dropped or loaded from a script). Flags
        fitplan does not model are kept in the command and named; a model given with -m is opened."""
        from fitplan.core.launch.command_line import import_command

        try:
            imported = import_command(text, engine=self.p.settings.current_engine())
        except FitplanError as exc:
            self.p.banner.show_message("error", f"Paste: {exc}", key="paste")
            self.paste_failed.emit(str(exc))
            return
        self._take_flags(imported.settings, imported.model_path, imported.ignored, imported.unmodelled)
        self.p.status.showMessage("Settings taken from the pasted command", 4000)

    def load_preset(self, text: str) -> None:
        """Set every control from a llama-server preset (INI), read by the core's preset reader as llama-server
        reads it: the section of the open model if the preset has one, else its first."""
        from fitplan.core.launch.command_line import (
            PRESET_GLOBAL_SECTION,
            preset_section_args,
            read_preset_ini,
        )
        from fitplan.core.launch.flags import parse_flags

        try:
            names = [n for n in read_preset_ini(text) if n != PRESET_GLOBAL_SECTION]
            if not names:
                raise FitplanError("the preset has no section")
            name = names[0]
            if self.planner.model is not None:
                stem = Path(self.planner.model.source).stem
                name = next((n for n in names if n == stem), name)
            parsed = parse_flags(preset_section_args(text, name)[1], engine=self.p.settings.current_engine())
        except FitplanError as exc:
            self.p.banner.show_message("error", f"Preset: {exc}", key="paste")
            self.paste_failed.emit(str(exc))
            return
        self._take_flags(parsed.settings, parsed.model_path, parsed.ignored, parsed.unmodelled)
        more = f" (of {len(names)} sections)" if len(names) > 1 else ""
        self.p.status.showMessage(f"Settings taken from the preset's [{name}]{more}", 4000)

    def _take_flags(
        self,
        settings: LaunchSettings,
        model: str | None,
        ignored: tuple[str, ...],
        unmodelled: tuple[str, ...],
    ) -> None:
        """The controls set from flags read by the core (a pasted command or a preset section)."""
        self.p.banner.clear("paste")
        current = self.p.settings.choices()
        unheld = unheld_flags(settings)
        extra = (*unheld, *kept_flags(ignored, unmodelled))
        choices = replace(choices_from_settings(settings, current), extra_args=extra)
        if model and (
            self.planner.model is None or Path(expand_home(model)) != Path(self.planner.model.source)
        ):
            if Path(expand_home(model)).is_file():
                self.planner.user = self.planner.user.with_choices(str(Path(expand_home(model))), choices)
                self.planner.open(str(Path(expand_home(model))))
                choices = replace(choices, extra_args=current.extra_args)  # the open model keeps its own
            else:
                self.p.banner.show_message(
                    "warning",
                    f"The pasted command's model {model} is not on this "
                    "machine; its settings apply to the open model.",
                    key="paste-model",
                )
        self.p.settings.set_choices(choices)
        self.p.settings.set_devices(settings.devices)
        self.planner.schedule_estimate()
        owner = model or (self.planner.model.source if self.planner.model is not None else "")
        where = f"for {Path(owner).name or 'this model'}; edit or clear them under Settings, Extra flags"
        if unmodelled or ignored:
            names = ", ".join(e.partition(" ")[0] for e in (*unmodelled, *ignored))
            self.p.banner.show_message(
                "info", f"Kept in the command, not in the estimate ({where}): {names}", key="paste-kept"
            )
        else:
            self.p.banner.clear("paste-kept")
        if unheld:
            names = ", ".join(dict.fromkeys(w for w in unheld if w.startswith("-")))
            self.p.banner.show_message(
                "info", f"Planned and kept in the command ({where}): {names}", key="paste-unheld"
            )
        else:
            self.p.banner.clear("paste-unheld")

    def save_configuration(self, path: str, chosen_filter: str = "") -> str:
        """The plan as a llama-server preset (.ini), a script for its shell, or an ollama Modelfile: written to the
        path `save_target` makes of the name and filter; returns that path ("" when nothing was written)."""
        from fitplan.core.launch.command_line import ollama_export, to_preset_ini

        out = self.planner.outcome
        if out is None or self.planner.model is None or out.plan_settings is None:
            self.p.banner.show_message("warning", "Nothing to save yet: open a model first.", key="save")
            return ""
        target = save_target(path, chosen_filter, self.p.command.current_shell())
        name = Path(target.path).name
        source = self.planner.model.source
        try:
            if target.kind == "preset":
                text = to_preset_ini(out.plan_settings, Path(source).stem or "model", source)
            elif target.kind == "modelfile":
                text = ollama_export(out.plan_settings, source).modelfile
            else:
                body = self.planner.backend.render_command((*out.args, *self.kept_args), target.shell)
                text = ("#!/bin/sh\n" if target.shell == "sh" else "") + body + "\n"
            Path(target.path).write_text(text, encoding="utf-8")
            if target.kind == "script":
                make_executable(target.path)
        except (FitplanError, OSError) as exc:
            self.p.banner.show_message("error", f"Could not save {name}: {exc}", key="save")
            return ""
        if target.kind != "script" and self.kept_args:
            # as `fitplan command --preset` warns: the kept flags are llama-server's command-line flags only
            self.p.banner.show_message(
                "warning",
                f"Saved {name} without the kept flags (kept in the command, not in the "
                f"{'preset' if target.kind == 'preset' else 'Modelfile'}): {' '.join(self.kept_args)}",
                key="save",
            )
        else:
            self.p.banner.clear("save")
        self.p.status.showMessage(f"Saved {target.path}", 4000)
        return target.path

    def load_configuration(self, path: str) -> None:
        """A saved script or preset: its command (or preset section) sets the controls."""
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")[:MAX_CONFIG_CHARS]
        except OSError as exc:
            self.p.banner.show_message("error", f"Could not read {path}: {exc.strerror or exc}", key="paste")
            return
        if Path(path).suffix.lower() == ".ini" or looks_like_preset(text):
            self.load_preset(text)
        else:
            self.paste_command(text)
