"""Launch a plan and check it: the one sequence `fitplan launch` and the window's Launch button both run.

`Launcher(plan, binary)`: `start()` asks the build its version and starts the planned command (`server_process`),
writing every log line to a log file as it comes; `wait()` returns a `LaunchReport` once the model is loaded (with
the comparison, `launch_check.compare`, and the process's real memory, `hardware.usage`) or the launch failed (the
failure in one line); `stop()` stops the server and reports again with the memory breakdown it printed at exit;
`document()` is the check as a recording, for `--save-check`.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from fitplan.core.base.errors import FitplanError
from fitplan.core.base.results import Estimate
from fitplan.core.estimate.accuracy import AccuracyBand
from fitplan.core.hardware.usage import ProcessUse, process_use
from fitplan.core.launch.launch_check import LaunchCheck, check_document, compare, failure_line
from fitplan.core.launch.server_log import BuildInfo, ServerFailure
from fitplan.core.launch.server_process import LaunchResult, ServerRun, launch_argv, server_version


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """What to launch and what it was estimated to allocate."""

    argv: tuple[str, ...]  # the planned command (its program is replaced by the binary run)
    estimate: Estimate
    band: AccuracyBand | None
    model: str  # the model file, as given
    file_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class LaunchReport:
    """Where a launch stands: the process's result, and once loaded the comparison."""

    result: LaunchResult
    build: BuildInfo
    check: LaunchCheck | None  # None until loaded (or when it failed)
    usage: tuple[ProcessUse, ...]
    log_file: Path | None

    @property
    def failure(self) -> ServerFailure | None:
        return self.result.failure

    @property
    def running(self) -> bool:
        return self.result.returncode is None


def new_log_file() -> Path:
    """A new file for one launch's log, kept after the launch (a failed one points the user to it)."""
    fd, name = tempfile.mkstemp(prefix="fitplan-launch-", suffix=".log")
    os.close(fd)
    return Path(name)


class Launcher:
    """One launch of a plan. Not reusable: a new launch is a new `Launcher`."""

    def __init__(
        self,
        plan: LaunchPlan,
        binary: str,
        on_line: Callable[[str], None] | None = None,
        log_file: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.plan = plan
        self.binary = binary
        self.argv = launch_argv(plan.argv, binary)
        self.log_file = log_file
        self._on_line = on_line
        self._log: IO[str] | None = None
        self._log_lock = threading.Lock()
        self.build = BuildInfo(None, "", "")
        self.run = ServerRun(self.argv, self._line, env)
        self._usage: tuple[ProcessUse, ...] = ()

    def _line(self, line: str) -> None:
        with self._log_lock:
            if self._log is not None:
                self._log.write(line + "\n")
                self._log.flush()
        if self._on_line is not None:
            self._on_line(line)

    def start(self) -> None:
        self.build = server_version(self.binary)
        if self.log_file is not None:
            try:
                self._log = self.log_file.open("w", encoding="utf-8")
            except OSError as exc:
                raise FitplanError(f"cannot write the log to {self.log_file}: {exc.strerror or exc}") from exc
        try:
            self.run.start()
        except FitplanError:
            self._close_log()
            raise

    def _report(self, result: LaunchResult) -> LaunchReport:
        check = None
        if result.log.loaded:
            check = compare(self.plan.estimate, result.log, self.plan.band, self._usage)
        return LaunchReport(result, self.build, check, self._usage, self.log_file)

    def wait(self, timeout: float = 600.0) -> LaunchReport:
        result = self.run.wait(timeout)
        if result.returncode is not None:
            self._close_log()  # it exited: every line is in
        if result.loaded:
            self._usage = process_use(result.pid)
        return self._report(result)

    def stop(self) -> LaunchReport:
        """Stop the server; the report keeps the comparison made while it ran and adds the exit's breakdown."""
        if not self.run.started:
            raise FitplanError("the server was not started")
        was_loaded = self.run.result().loaded
        self.run.stop()
        self._close_log()
        result = self.run.result()
        if was_loaded and result.log.failure is not None:
            # stopping is not a failure: the exit code of a stopped server says nothing of the load
            result = replace(result, log=replace(result.log, failure=None, loaded=True))
        return self._report(result)

    def close(self, grace: float = 5.0) -> None:
        """Stop the server if it still runs and close the log, whatever state the launch is in (on exit)."""
        self.run.stop(grace=grace)
        self._close_log()

    def _close_log(self) -> None:
        with self._log_lock:
            if self._log is not None:
                self._log.close()
                self._log = None

    def failure_text(self, report: LaunchReport) -> str:
        f = report.failure
        if f is None:
            return ""
        return failure_line(f, self.plan.estimate)

    def document(self, report: LaunchReport, fitplan_version: str = "") -> dict[str, Any]:
        if report.check is None:
            raise FitplanError("nothing to save: the model was not loaded")
        return check_document(
            report.check,
            report.result.log,
            report.build,
            self.argv,
            self.plan.model,
            self.plan.file_bytes,
            fitplan_version,
        )
