"""The estimator thread computes from the newest request only and drops stale answers; jobs report errors."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from fitplan.core.base.devices import Machine, host_device
from fitplan.core.base.errors import GGUFError
from fitplan.core.base.launch_settings import LaunchSettings
from fitplan.gui.backend import Backend, LoadedModel, PlanOutcome, PlanRequest, Verdict
from fitplan.gui.workers import Estimator, JobError, Jobs

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_level_fail("WARNING")]


class SlowBackend(Backend):
    """Takes 80 ms per plan and remembers which requests it computed."""

    def __init__(self) -> None:
        super().__init__(probe=lambda: pytest.fail("no probing"))
        self.computed: list[int] = []
        self.gui_thread = threading.get_ident()

    def plan(self, request: PlanRequest) -> PlanOutcome:
        assert threading.get_ident() != self.gui_thread  # never on the GUI thread
        self.computed.append(request.request_id)
        time.sleep(0.08)
        if request.settings.n_ctx < 0:
            raise GGUFError("bad request")
        return PlanOutcome(request.request_id, None, Verdict("fits", "ok"), 0, ())  # type: ignore[arg-type]


def _request(est: Estimator, n_ctx: int = 4096) -> PlanRequest:
    model: Any = LoadedModel("m.gguf", None)  # type: ignore[arg-type]
    return PlanRequest(est.next_id(), model, LaunchSettings(n_ctx=n_ctx), Machine((), host_device(1)))


def test_a_burst_of_requests_costs_two_computations_and_one_answer(qtbot: Any) -> None:
    backend = SlowBackend()
    est = Estimator(backend)
    results: list[int] = []
    est.result.connect(lambda o: results.append(o.request_id))
    for _ in range(10):
        est.submit(_request(est))
    qtbot.waitUntil(lambda: results == [10], timeout=5000)
    qtbot.wait(200)  # nothing else arrives later
    assert results == [10]
    # The first request may start before the others arrive; everything between is skipped.
    assert backend.computed[-1] == 10 and len(backend.computed) <= 2
    est.shutdown()


def test_errors_of_the_newest_request_come_back_as_signals(qtbot: Any) -> None:
    est = Estimator(SlowBackend())
    with qtbot.waitSignal(est.error, timeout=5000) as blocker:
        est.submit(_request(est, n_ctx=-1))
    err = blocker.args[0]
    assert isinstance(err, JobError) and err.expected and "bad request" in err.message
    est.shutdown()


def test_jobs_deliver_on_the_gui_thread_and_report_errors(qtbot: Any) -> None:
    jobs = Jobs()
    gui = threading.get_ident()
    seen: list[tuple[object, int]] = []
    progress: list[int] = []

    def work(report: Any) -> str:
        for i in range(3):
            report(i)
        return "done"

    jobs.start("work", work, lambda v: seen.append((v, threading.get_ident())), progress.append)
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)
    assert seen == [("done", gui)] and progress == [0, 1, 2]
    with qtbot.waitSignal(jobs.error, timeout=5000) as blocker:
        jobs.start("boom", lambda _r: 1 / 0, lambda _v: None)
    err = blocker.args[0]
    assert err.what == "boom" and not err.expected and "ZeroDivisionError" in err.message
    assert jobs.running == 0
    jobs.shutdown()
