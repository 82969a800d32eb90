"""The Command panel's controller: the plan's command for the chosen shell, copying it, and verifying it with
llama.cpp's own dry run (llama-fit-params)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject

from fitplan.core.base.errors import FitplanError
from fitplan.core.base.launch_settings import Engine
from fitplan.gui.backend import PlanOutcome

if TYPE_CHECKING:
    from fitplan.gui.controller import Planner


class CommandController(QObject):
    """Shows the shown plan's command (or ollama's setup) and runs the verification; state: where llama-server is."""

    def __init__(self, planner: Planner) -> None:
        super().__init__(planner)
        self.planner = planner
        self.p = planner.p
        self._llama_server = planner.backend.llama_server_in(planner.user.llama_bin_dir)
        self.p.command.set_verify_available(self._llama_server is not None)

    def shell_changed(self, shell: str) -> None:
        self.planner.user = replace(self.planner.user, shell=shell)
        self.planner.save_soon()
        if self.planner.outcome is not None:
            self.show(self.planner.outcome, shell)

    def show(self, outcome: PlanOutcome, shell: str) -> None:
        """The llama-server line, or for ollama its environment, Modelfile and create command."""
        engine = outcome.plan_settings.engine if outcome.plan_settings is not None else Engine.LLAMA_CPP
        try:
            if outcome.ollama is not None:
                text = self.planner.backend.render_ollama(outcome.ollama, shell)
            else:
                text = self.planner.backend.render_command(
                    (*outcome.args, *self.planner.configs.kept_args), shell
                )
        except FitplanError as exc:
            text = ""
            self.p.banner.show_message(
                "warning", f"The command cannot be written for this shell: {exc}", key="command"
            )
        else:
            self.p.banner.clear("command")
        self.p.command.set_command(text, engine)
        # llama-fit-params verifies mainline llama.cpp's allocation only.
        self.p.command.set_verify_available(self._llama_server is not None and engine is Engine.LLAMA_CPP)

    def copy_command(self) -> None:
        self.p.command.copy()
        self.p.status.showMessage("Command copied to the clipboard", 3000)

    def set_llama_bin_dir(self, folder: str) -> None:
        self.planner.user = replace(self.planner.user, llama_bin_dir=folder)
        self.planner.save_soon()
        self._llama_server = self.planner.backend.llama_server_in(folder)
        found = self._llama_server is not None
        self.p.command.set_verify_available(found)
        if not found:
            self.p.banner.show_message(
                "warning", f"No llama-server in {folder}; verification stays off.", key="llama-bin"
            )
        else:
            self.p.banner.clear("llama-bin")

    def verify(self) -> None:
        """llama-fit-params' dry run of the shown plan next to its estimate for the planned devices (not whatever
        this machine has), off the GUI thread, through the same comparison as `fitplan verify`."""
        outcome, machine, model = self.planner.outcome, self.p.hardware.machine(), self.planner.model
        if outcome is None or machine is None or model is None or not self.planner.user.llama_bin_dir:
            return
        hypothetical = [d.name for d, on in self.p.hardware.devices() if on and d.hypothetical]
        folder, args = self.planner.user.llama_bin_dir, outcome.args[1:]

        def run(_progress: Any) -> str:
            return self.planner.backend.verify(model, args, machine, folder)

        self.p.activity.start("Running llama-fit-params…", None)
        self.planner.jobs.start("Verify with llama.cpp", run, lambda text: self._verified(text, hypothetical))

    def _verified(self, text: str, hypothetical: list[str]) -> None:
        self.p.activity.stop()
        if hypothetical:
            text += (
                f" llama-fit-params measured this machine's devices, not the hypothetical "
                f"{', '.join(hypothetical)}: compare per device with care."
            )
        self.p.banner.show_message("info", text, key="verify")
