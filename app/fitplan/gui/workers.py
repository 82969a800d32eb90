"""Work off the GUI thread: one long-lived estimator on a QThread, and one-shot jobs on the QThreadPool.

The estimator always computes from the newest request: the GUI thread drops each request into a one-slot mailbox
(under a lock) and pokes the worker with a queued signal; when the worker wakes it takes whatever is newest, so a
burst of slider moves costs one computation, not one per move. Results carry the request id back; the window keeps
only the result of its newest request. Errors travel as signals; nothing is swallowed.

The estimator thread hands the computation itself to a child process (`plan_process`) and waits for the answer
there, so the pure-Python estimate never competes with painting for the interpreter lock; where no child can run
(a frozen app, a backend with its own `plan`) or the child is gone, the thread computes it itself.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QThread, QThreadPool, Signal, Slot

from fitplan.gui.backend import Backend, PlanOutcome, PlanRequest
from fitplan.gui.plan_process import (
    ChildGone,
    JobError,
    NotReady,
    PlanProcess,
    describe,
    process_available,
)

__all__ = ["Estimator", "EstimatorWorker", "JobError", "Jobs", "describe", "run_job"]


def uses_process(backend: Backend) -> bool:
    """Whether `backend`'s estimates can run in the child: its `plan` is the stock one (the child has no other)."""
    return type(backend).plan is Backend.plan and process_available()


class EstimatorWorker(QObject):
    """Lives on its own QThread; `wake` is connected with a queued connection from the GUI thread."""

    finished = Signal(object)  # PlanOutcome
    failed = Signal(object)  # JobError

    def __init__(self, backend: Backend, process: PlanProcess | None = None) -> None:
        super().__init__()
        self._backend = backend
        self._process = process
        self._lock = threading.Lock()
        self._pending: PlanRequest | None = None

    def post(self, request: PlanRequest) -> None:
        """Called from the GUI thread: replace whatever is waiting with `request`."""
        with self._lock:
            self._pending = request

    def _plan(self, request: PlanRequest) -> PlanOutcome | JobError | None:
        """In the child when there is one (None: it was stopped for shutdown), else on this thread."""
        process = self._process
        if process is not None:
            try:
                return process.plan(request)
            except NotReady:
                pass  # still starting: this one is computed here
            except ChildGone:
                if process.closed:
                    return None  # the window is closing: nobody waits for this answer
                self._process = None  # gone for good: from now on this thread computes
        return self._backend.plan(request)

    @Slot()
    def wake(self) -> None:
        with self._lock:
            request, self._pending = self._pending, None
        if request is None:
            return  # an earlier wake already took the newest request
        try:
            outcome = self._plan(request)
        except Exception as exc:  # noqa: BLE001 - shown to the user by the one error sink
            self.failed.emit(describe("Estimate", exc, request.request_id))
            return
        if isinstance(outcome, JobError):
            self.failed.emit(outcome)
        elif outcome is not None:
            self.finished.emit(outcome)


def _shutdown_if_alive(ref: weakref.ref[Estimator]) -> None:
    estimator = ref()
    if estimator is not None:
        estimator.shutdown()


class Estimator(QObject):
    """The GUI-side handle: `submit()` a request, get `result` for the newest one only."""

    result = Signal(object)  # PlanOutcome of the newest request
    error = Signal(object)  # JobError
    _wake = Signal()

    def __init__(self, backend: Backend, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread = QThread()
        self._thread.setObjectName("fitplan-estimator")
        self._process = PlanProcess() if uses_process(backend) else None
        self._worker = EstimatorWorker(backend, self._process)
        self._worker.moveToThread(self._thread)
        self._wake.connect(self._worker.wake)  # cross-thread: queued
        self._worker.finished.connect(self._on_finished)
        self._worker.failed.connect(self._on_failed)
        self._latest = 0
        self._thread.start()
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.shutdown)  # never leave the thread running past the event loop
        ref = weakref.ref(self)
        atexit.register(_shutdown_if_alive, ref)  # scripts that never run exec()

    @property
    def latest_id(self) -> int:
        return self._latest

    def next_id(self) -> int:
        self._latest += 1
        return self._latest

    def submit(self, request: PlanRequest) -> None:
        self._latest = max(self._latest, request.request_id)
        self._worker.post(request)
        self._wake.emit()

    @Slot(object)
    def _on_finished(self, outcome: PlanOutcome) -> None:
        if outcome.request_id == self._latest:
            self.result.emit(outcome)

    @Slot(object)
    def _on_failed(self, err: JobError) -> None:
        if err.request_id == self._latest:
            self.error.emit(err)

    def warm_up(self) -> None:
        """Start the estimate process ahead of the first request (after the window has painted)."""
        if self._process is not None:
            self._process.start()

    @property
    def in_process(self) -> bool:
        """Whether estimates are computed in the child process (tests and benches check both paths)."""
        process = self._worker._process
        return process is not None and not process.closed

    def shutdown(self) -> None:
        if self._process is not None:
            self._process.close()  # a computation in flight ends now; the thread then quits at once
        try:
            running = self._thread.isRunning()
        except RuntimeError:  # the C++ thread object is already gone
            return
        if running:
            self._thread.quit()
            self._thread.wait(5000)


class _JobSignals(QObject):
    done = Signal(int, object)
    failed = Signal(int, object)
    progress = Signal(int, object)


def run_job(
    token: int,
    what: str,
    fn: Callable[[Callable[[Any], None]], Any],
    signals: _JobSignals,
    stop: threading.Event,
) -> None:
    """The body of a one-shot job, on a pool thread: results and errors leave only as signals."""

    def progress(item: object) -> None:
        if not stop.is_set():
            signals.progress.emit(token, item)

    try:
        value = fn(progress)
    except Exception as exc:  # noqa: BLE001 - shown to the user by the one error sink
        if not stop.is_set():
            signals.failed.emit(token, describe(what, exc))
        return
    if not stop.is_set():  # after shutdown nobody is listening (the window may be gone)
        signals.done.emit(token, value)


@dataclass
class _Callbacks:
    on_done: Callable[[Any], None]
    on_progress: Callable[[Any], None] | None


class Jobs(QObject):
    """Starts one-shot jobs; their results come back on the GUI thread (queued into this object's slots)."""

    error = Signal(object)  # JobError, for the one place that shows errors

    def __init__(self, pool: QThreadPool | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = pool or QThreadPool.globalInstance()
        self._signals = _JobSignals()
        self._signals.done.connect(self._on_done)
        self._signals.failed.connect(self._on_failed)
        self._signals.progress.connect(self._on_progress)
        self._callbacks: dict[int, _Callbacks] = {}
        self._next = 0
        self._cancel_flags: list[threading.Event] = []
        self._stopped = threading.Event()

    @property
    def running(self) -> int:
        return len(self._callbacks)

    def start(
        self,
        what: str,
        fn: Callable[[Callable[[Any], None]], Any],
        on_done: Callable[[Any], None],
        on_progress: Callable[[Any], None] | None = None,
    ) -> None:
        if self._stopped.is_set():
            return
        self._next += 1
        self._callbacks[self._next] = _Callbacks(on_done, on_progress)
        token, signals, stop = self._next, self._signals, self._stopped
        self._pool.start(lambda: run_job(token, what, fn, signals, stop))

    @Slot(int, object)
    def _on_done(self, token: int, value: object) -> None:
        cb = self._callbacks.pop(token, None)
        if cb is not None:
            cb.on_done(value)

    @Slot(int, object)
    def _on_failed(self, token: int, err: object) -> None:
        self._callbacks.pop(token, None)
        self.error.emit(err)

    @Slot(int, object)
    def _on_progress(self, token: int, item: object) -> None:
        cb = self._callbacks.get(token)
        if cb is not None and cb.on_progress is not None:
            cb.on_progress(item)

    def cancel_flag(self) -> threading.Event:
        flag = threading.Event()
        self._cancel_flags.append(flag)
        return flag

    def shutdown(self) -> None:
        """Cancel scans, stop delivering results, wait for running jobs (they finish quietly)."""
        self._stopped.set()
        for flag in self._cancel_flags:
            flag.set()
        self._pool.waitForDone(5000)
        self._callbacks.clear()
