"""Start llama-server, stream its log, wait until the model is loaded or the launch failed, stop it.

The server is the user's: it runs in a process group of its own (a new session on POSIX, a new process group on
Windows), so fitplan stops it and everything it started with one signal; one server per fitplan process at a time
(`start` refuses a second while one runs); whatever is still running when fitplan exits is stopped (`atexit`).
Its stdout and stderr go to one pipe, read by a thread that keeps every line and hands each to `on_line`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from fitplan.core.base.errors import FitplanError
from fitplan.core.base.files import expand_home
from fitplan.core.launch.server_log import (
    LOG_VERBOSITY,
    BuildInfo,
    FailureKind,
    ServerFailure,
    ServerLog,
    failure_in,
    listening_in,
    loaded_in,
    needs_verbosity,
    parse_server_log,
    parse_version,
    strip_prefix,
)

#: The program fitplan launches.
SERVER = "llama-server"
#: Seconds to wait, once the model is loaded, for the line that says where the server listens.
LISTEN_WAIT_S = 2.0
#: Seconds a stopped server gets to exit (it prints its memory breakdown) before it is killed.
STOP_GRACE_S = 15.0

_lock = threading.Lock()
_active: ServerRun | None = None


class LaunchError(FitplanError):
    """The server could not be started (no binary, one already running)."""


def find_server(given: str | Path | None = None) -> str:
    """The llama-server to run: `given` (the binary or its folder), else the one on PATH."""
    if given:
        p = Path(expand_home(given))
        cand = (
            next((p / n for n in (SERVER, SERVER + ".exe") if (p / n).exists()), p / SERVER)
            if p.is_dir()
            else p
        )
        if cand.is_dir() or not cand.exists():
            raise LaunchError(f"no {SERVER} at {cand}: give the llama.cpp build's bin folder or the binary")
        if not os.access(cand, os.X_OK):
            raise LaunchError(f"{cand} is not executable")
        return str(cand)
    found = shutil.which(SERVER)
    if found is None:
        raise LaunchError(
            f"{SERVER} not found on PATH: give its folder with --llama-bin DIR (built with llama.cpp: "
            f"cmake --build build --target {SERVER})"
        )
    return found


def server_version(binary: str, timeout: float = 30.0) -> BuildInfo:
    """`llama-server --version`."""
    try:
        done = subprocess.run(
            [binary, "--version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"could not run {binary} --version: {exc}") from exc
    return parse_version(done.stdout + "\n" + done.stderr)


def launch_argv(argv: Sequence[str], binary: str) -> tuple[str, ...]:
    """The command as run: the planned command with `binary` as its program, and `-lv 4` where the command's
    verbosity would hide the buffer lines."""
    words = (binary, *argv[1:])
    if needs_verbosity(words[1:]):
        words = (*words, "-lv", str(LOG_VERBOSITY))
    return words


@dataclass(frozen=True, slots=True)
class LaunchResult:
    """Where a launch stands after `ServerRun.wait`: loaded (the server runs), or failed with the reason."""

    argv: tuple[str, ...]
    log: ServerLog
    lines: tuple[str, ...]
    pid: int
    returncode: int | None  # None while it runs
    seconds: float

    @property
    def loaded(self) -> bool:
        return self.log.loaded and self.returncode is None

    @property
    def failure(self) -> ServerFailure | None:
        return self.log.failure


def _exit_failure(code: int, lines: Sequence[str]) -> ServerFailure:
    last = next((strip_prefix(x).strip() for x in reversed(lines) if x.strip()), "")
    if code < 0:
        try:
            how = f"signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"signal {-code}"
    else:
        how = f"exit code {code}"
    tail = f"; its last line: {last}" if last else ""
    return ServerFailure(FailureKind.CRASH, f"llama-server stopped ({how}) before the model was loaded{tail}")


class ServerRun:
    """One llama-server process. `start()`, then `wait()` until loaded or failed, `stop()` when done."""

    def __init__(
        self,
        argv: Sequence[str],
        on_line: Callable[[str], None] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.argv = tuple(argv)
        self.on_line = on_line
        self.env = env
        self._lines: list[str] = []
        self._lines_lock = threading.Lock()
        self._settled = threading.Event()  # loaded, failed or exited
        self._listening = threading.Event()  # the line after "model loaded": where it listens
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._started = 0.0
        self._failed = False

    # -- life --------------------------------------------------------------------------------------------------
    def start(self) -> None:
        global _active
        with _lock:
            if _active is not None and _active.running:
                raise LaunchError(
                    f"llama-server is already running (pid {_active.pid}, started by fitplan): stop it first"
                )
            kw: dict[str, object] = {}
            if sys.platform == "win32":
                kw["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP  # type: ignore[attr-defined]
            else:
                kw["start_new_session"] = True
            try:
                self._proc = subprocess.Popen(  # type: ignore[call-overload]
                    list(self.argv),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    bufsize=1,
                    env=self.env,
                    **kw,
                )
            except OSError as exc:
                raise LaunchError(f"could not start {self.argv[0]}: {exc.strerror or exc}") from exc
            self._started = time.monotonic()
            _active = self
        self._reader = threading.Thread(target=self._read, name="llama-server log", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\r\n")
            with self._lines_lock:
                self._lines.append(line)
            if self.on_line is not None:
                self.on_line(line)
            plain = strip_prefix(line)
            if failure_in(plain) is not None:
                self._failed = True
                self._settled.set()
            elif loaded_in(plain):
                self._settled.set()
            if listening_in(plain):
                self._listening.set()
        proc.stdout.close()
        proc.wait()
        self._settled.set()
        self._listening.set()

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc is not None else 0

    @property
    def started(self) -> bool:
        return self._proc is not None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def lines(self) -> tuple[str, ...]:
        with self._lines_lock:
            return tuple(self._lines)

    def wait(self, timeout: float = 600.0) -> LaunchResult:
        """Wait until the model is loaded, the launch failed or the server exited (or `timeout` passed)."""
        if self._proc is None:
            raise LaunchError("the server was not started")
        done = self._settled.wait(timeout)
        if done and not self._failed:
            self._listening.wait(LISTEN_WAIT_S)  # llama-server prints its address just after "model loaded"
        if self._failed:
            # llama.cpp prints the cause first, then unwinds: let it finish its lines and exit
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
            self._join_reader(5)
        result = self.result()
        if not done and result.failure is None:
            log = parse_server_log(result.lines)
            timeout_failure = ServerFailure(
                FailureKind.TIMEOUT, f"llama-server did not finish loading in {timeout:.0f} s"
            )
            return LaunchResult(
                result.argv,
                _with_failure(log, timeout_failure),
                result.lines,
                result.pid,
                result.returncode,
                result.seconds,
            )
        return result

    def result(self) -> LaunchResult:
        """What the log says so far."""
        if self._proc is None:
            raise LaunchError("the server was not started")
        lines = self.lines
        code = self._proc.poll()
        if code is not None:
            self._join_reader(5)
            lines = self.lines
        log = parse_server_log(lines)
        if code is not None and log.failure is None and (code != 0 or not log.loaded):
            log = _with_failure(log, _exit_failure(code, lines))
        return LaunchResult(self.argv, log, lines, self.pid, code, time.monotonic() - self._started)

    def _join_reader(self, timeout: float) -> None:
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout)

    def stop(self, grace: float = STOP_GRACE_S) -> int | None:
        """Stop the server's process group (SIGTERM, then SIGKILL after `grace` seconds) and read its last lines
        (the memory breakdown it prints at exit). Returns its exit code."""
        global _active
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            _signal_group(proc, terminate=True)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(proc, terminate=False)
                proc.wait(timeout=grace)
        self._join_reader(grace)
        with _lock:
            if _active is self:
                _active = None
        return proc.returncode


def _with_failure(log: ServerLog, failure: ServerFailure) -> ServerLog:
    return replace(log, failure=failure, loaded=False)


def _signal_group(proc: subprocess.Popen[str], terminate: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        if sys.platform == "win32":
            if terminate:
                proc.send_signal(signal.CTRL_BREAK_EVENT)  # type: ignore[attr-defined]
            else:
                proc.kill()
            return
        os.killpg(proc.pid, signal.SIGTERM if terminate else signal.SIGKILL)


def active_server() -> ServerRun | None:
    """The server this fitplan process started and has not stopped, if it still runs."""
    with _lock:
        return _active if _active is not None and _active.running else None


@atexit.register
def _stop_on_exit() -> None:
    run = _active
    if run is not None:
        run.stop(grace=5.0)
