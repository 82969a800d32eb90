"""The window's estimates computed in a child interpreter, so they never take the GUI thread's interpreter lock.

The estimator is pure Python: on a thread of the window's process it holds the one interpreter lock while it runs,
and every paint, slider move and pyqtgraph callback of the GUI thread waits its turn behind it. In a child process
it runs on another core and the window only waits for the answer on a pipe (which releases the lock).

The child runs `Backend.plan`, the same function the window would call on a thread, on the same inputs (sent
pickled): the answers are the same. Each model (and draft model) is sent once; a request then travels without
them, naming them by token. This module imports no Qt: the child needs none of it.

    parent -> child   ("model", token, LoadedModel or ModelProfile) | ("forget", token)
                      | ("plan", model token, draft token or 0, the PlanRequest without its model and draft)
    child -> parent   ("ready", None) once it has imported the estimator; ("ok", PlanOutcome) | ("error", JobError)

Until the child says it is ready (it is still starting: the first estimate after the window opens), a request is
computed on the estimator thread instead, so the first answer does not wait for a second interpreter to start.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from fitplan.core.base.errors import FitplanError

if TYPE_CHECKING:
    from fitplan.gui.backend import Backend, PlanOutcome, PlanRequest

PROTOCOL = pickle.HIGHEST_PROTOCOL
#: Models the child keeps (the newest sent); an older one is sent again if a request needs it.
KEEP_MODELS = 8
CHILD_CODE = "from fitplan.gui.plan_process import serve; serve()"
#: How much lower the child's scheduling priority is than the window's (POSIX nice increment).
CHILD_NICENESS = 10
#: Whether select() can poll the child's pipe without waiting (not on Windows, where it takes sockets only): where
#: it cannot, the first request waits for the child to say it is ready, on the estimator thread.
PIPES_SELECTABLE = sys.platform != "win32"


@dataclass(frozen=True, slots=True)
class JobError:
    """A failure to show the user: what was being done, and the message."""

    what: str
    message: str
    request_id: int = 0
    expected: bool = True  # a FitplanError (bad file, bad setting) rather than a bug


def describe(what: str, exc: BaseException, request_id: int = 0) -> JobError:
    if isinstance(exc, FitplanError):
        return JobError(what, str(exc), request_id, True)
    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return JobError(what, f"unexpected error: {detail}", request_id, False)


class ChildGone(Exception):
    """The child process is gone (killed, crashed, or never started): plan on the calling thread instead."""


class NotReady(Exception):
    """The child is still starting: plan this request on the calling thread."""


def process_available() -> bool:
    """A child interpreter can be started: a source or pip install (a frozen app has no `python -c`)."""
    return not getattr(sys, "frozen", False) and bool(sys.executable)


class PlanProcess:
    """The parent's handle: `plan()` blocks the calling (worker) thread, never the GUI thread, until the answer.

    One request at a time; the child is started on the first request and killed by `close()` (which also wakes a
    `plan()` waiting for it, with ChildGone)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._tokens: dict[int, tuple[int, object]] = {}  # id(model) -> (token, the model, kept alive)
        self._next_token = 0
        self._ready = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._kill()  # a child that died since the last request: its pipes are closed, a new one starts
        self._ready = False
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])  # the folder holding the fitplan package
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        # below the window's priority: on a machine with few cores the window's thread gets a core first
        flags = (
            getattr(subprocess, "CREATE_NO_WINDOW", 0) | getattr(subprocess, "BELOW_NORMAL_PRIORITY_CLASS", 0)
            if sys.platform == "win32"
            else 0
        )
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", CHILD_CODE],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                creationflags=flags,
            )
        except OSError as exc:
            raise ChildGone(str(exc)) from exc
        if hasattr(os, "setpriority"):
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, self._proc.pid, CHILD_NICENESS)
        return self._proc

    def start(self) -> None:
        """Start the child now (it imports the estimator while the window loads the model); a no-op when it runs,
        is busy, or cannot start (the first request then tries again, or the thread computes)."""
        if self._closed or not self._lock.acquire(blocking=False):
            return
        try:
            self._start()
        except ChildGone:
            pass
        finally:
            self._lock.release()

    def _token(self, proc: subprocess.Popen[bytes], model: object) -> int:
        """The child's name for `model`, sending it first if the child does not hold it."""
        known = self._tokens.get(id(model))
        if known is not None and known[1] is model:
            return known[0]
        self._next_token += 1
        token = self._next_token
        _send(proc, ("model", token, model))
        self._tokens[id(model)] = (token, model)
        while len(self._tokens) > KEEP_MODELS:
            oldest = next(iter(self._tokens))
            _send(proc, ("forget", self._tokens.pop(oldest)[0]))
        return token

    def plan(self, request: PlanRequest) -> PlanOutcome | JobError:
        """The outcome of `request` as `Backend.plan` gives it, or the error it raised (as a JobError)."""
        with self._lock:
            if self._closed:
                raise ChildGone("closed")
            proc = self._start()
            try:
                if not self._ready and not self._poll_ready(proc):
                    raise NotReady
                token = self._token(proc, request.model)
                draft = self._token(proc, request.draft) if request.draft is not None else 0
                bare = replace(request, model=None, draft=None)  # type: ignore[arg-type]
                _send(proc, ("plan", token, draft, bare))
                assert proc.stdout is not None
                kind, value = pickle.load(proc.stdout)
            except (OSError, EOFError, pickle.PickleError, ValueError, AttributeError) as exc:
                self._kill()
                raise ChildGone(str(exc) or type(exc).__name__) from exc
        if kind == "error":
            assert isinstance(value, JobError)
            return value
        result: PlanOutcome = value
        return result

    def ready(self) -> bool:
        """Whether requests now go to the child (False while it starts, or while a request is in flight)."""
        if self._ready:
            return True
        if self._closed or self._proc is None or not self._lock.acquire(blocking=False):
            return False
        try:
            return self._poll_ready(self._proc)
        except (OSError, EOFError, pickle.PickleError, ValueError, AttributeError):
            return False
        finally:
            self._lock.release()

    def _poll_ready(self, proc: subprocess.Popen[bytes]) -> bool:
        """Whether the child has said it is ready (reads its message if it has; never waits where the pipe can be
        polled, else waits for the message)."""
        assert proc.stdout is not None
        if PIPES_SELECTABLE:
            readable, _, _ = select.select([proc.stdout], [], [], 0)
            if not readable:
                return False
        kind, _ = pickle.load(proc.stdout)
        self._ready = kind == "ready"
        return self._ready

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        self._tokens.clear()
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        proc.wait()

    def close(self) -> None:
        """Stop the child now (from any thread): a `plan()` waiting on it returns at once with ChildGone."""
        self._closed = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()  # the waiting reader sees the pipe close; it reaps the process
        if self._lock.acquire(blocking=False):
            try:
                self._kill()
            finally:
                self._lock.release()


def _send(proc: subprocess.Popen[bytes], message: tuple[Any, ...]) -> None:
    assert proc.stdin is not None
    pickle.dump(message, proc.stdin, protocol=PROTOCOL)
    proc.stdin.flush()


def _no_probe() -> Any:
    raise RuntimeError("the estimate process does not detect hardware")


def answer(backend: Backend, models: dict[int, Any], message: tuple[Any, ...]) -> tuple[str, Any] | None:
    """The child's reply to one message (None for those that need none)."""
    kind = message[0]
    if kind == "model":
        models[message[1]] = message[2]
        return None
    if kind == "forget":
        models.pop(message[1], None)
        return None
    _kind, token, draft, bare = message
    request: PlanRequest = replace(bare, model=models[token], draft=models[draft] if draft else None)
    try:
        return "ok", backend.plan(request)
    except Exception as exc:  # noqa: BLE001 - sent to the window, shown by its one error sink
        return "error", describe("Estimate", exc, request.request_id)


def warm_up() -> None:
    """Import what the first estimate needs before it is asked for (the window is loading the model meanwhile)."""
    import fitplan.core.estimate.curve
    import fitplan.core.launch.command_line
    import fitplan.core.plan.alternatives
    import fitplan.core.plan.planner  # noqa: F401


def serve(inp: IO[bytes] | None = None, out: IO[bytes] | None = None) -> None:
    """The child's loop: read a message, answer it; stop when the window closes the pipe."""
    from fitplan.gui.backend import Backend

    inp = inp or sys.stdin.buffer
    out = out or sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but answers goes down the pipe
    backend = Backend(probe=_no_probe, library_places=lambda: ())
    warm_up()
    pickle.dump(("ready", None), out, protocol=PROTOCOL)
    out.flush()
    models: dict[int, Any] = {}
    while True:
        try:
            message = pickle.load(inp)
        except EOFError:
            return
        reply = answer(backend, models, message)
        if reply is not None:
            pickle.dump(reply, out, protocol=PROTOCOL)
            out.flush()
