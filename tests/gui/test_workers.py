"""The estimator thread computes from the newest request only and drops stale answers; jobs report errors."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fitplan.core.base.devices import GIB, Device, DeviceKind, Machine, Vendor, host_device
from fitplan.core.base.errors import GGUFError
from fitplan.core.base.launch_settings import DraftSettings, LaunchSettings, TensorOverride
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


LLAMA = Path(__file__).resolve().parents[2] / "resources" / "examples" / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"
ONE_GPU = Machine(
    (Device("RTX 4090", DeviceKind.GPU, 24 * GIB, 22 * GIB, Vendor.NVIDIA),), host_device(64 * GIB, 48 * GIB)
)


def _same_outcome(a: PlanOutcome, b: PlanOutcome) -> None:
    """Field by field (the curve holds arrays, which `==` on the dataclass cannot compare)."""
    assert a.curve is not None and b.curve is not None
    assert np.array_equal(a.curve.contexts, b.curve.contexts) and np.array_equal(a.curve.bytes, b.curve.bytes)
    assert a.curve.devices == b.curve.devices
    assert replace(a, curve=None) == replace(b, curve=None)


def _answer(qtbot: Any, est: Estimator, request: PlanRequest) -> PlanOutcome:
    with qtbot.waitSignal(est.result, timeout=30000) as blocker:
        est.submit(request)
    outcome: PlanOutcome = blocker.args[0]
    return outcome


def test_the_stock_backend_estimates_in_a_child_process_with_the_same_answers(qtbot: Any) -> None:
    backend = Backend(probe=lambda: pytest.fail("no probing"))
    model = backend.load(str(LLAMA))
    est = Estimator(backend)
    assert est.in_process
    est.warm_up()
    qtbot.waitUntil(est._process.ready, timeout=30000)  # type: ignore[union-attr]  # answers from the child now
    for n_ctx in (4096, 131072):  # one that fits, one that needs more than the GPU has
        request = PlanRequest(est.next_id(), model, LaunchSettings(n_ctx=n_ctx), ONE_GPU)
        _same_outcome(_answer(qtbot, est, request), backend.plan(request))
    drafted = LaunchSettings(n_ctx=8192, draft=DraftSettings(str(LLAMA)))  # the draft model travels too
    request = PlanRequest(est.next_id(), model, drafted, ONE_GPU, draft=model.profile)
    _same_outcome(_answer(qtbot, est, request), backend.plan(request))
    with qtbot.waitSignal(est.error, timeout=30000) as blocker:  # an error in the child comes back as one
        bad = LaunchSettings(n_ctx=4096, tensor_overrides=(TensorOverride("ffn", "CUDA7"),))
        est.submit(PlanRequest(est.next_id(), model, bad, ONE_GPU))
    err = blocker.args[0]
    assert isinstance(err, JobError) and err.expected and "CUDA7" in err.message
    assert est.in_process
    est.shutdown()
    assert not est.in_process


def test_a_killed_child_is_started_again_and_a_missing_one_leaves_the_work_to_the_thread(
    qtbot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = Backend(probe=lambda: pytest.fail("no probing"))
    model = backend.load(str(LLAMA))
    est = Estimator(backend)
    request = PlanRequest(est.next_id(), model, LaunchSettings(n_ctx=8192), ONE_GPU)
    first = _answer(qtbot, est, request)
    child = est._process._proc  # type: ignore[union-attr]
    assert child is not None
    child.kill()
    child.wait()
    again = _answer(qtbot, est, replace(request, request_id=est.next_id()))
    assert est.in_process and est._process._proc is not child  # type: ignore[union-attr]
    _same_outcome(replace(again, request_id=first.request_id), first)
    est._process._proc.kill()  # type: ignore[union-attr]
    est._process._proc.wait()  # type: ignore[union-attr]
    monkeypatch.setattr("sys.executable", "/nonexistent/python")  # no child can start now
    third = _answer(qtbot, est, replace(request, request_id=est.next_id()))
    assert not est.in_process  # computed on the estimator thread
    _same_outcome(replace(third, request_id=first.request_id), first)
    est.shutdown()


def test_a_backend_with_its_own_plan_is_never_sent_to_the_child() -> None:
    est = Estimator(SlowBackend())
    assert not est.in_process  # SlowBackend.plan exists only in this process
    est.shutdown()


def test_where_pipes_cannot_be_polled_the_first_request_waits_for_the_child(
    qtbot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows' select() takes no pipes: the first request then waits for the child to be ready instead of being
    computed on the thread, and the answers are the same."""
    monkeypatch.setattr("fitplan.gui.plan_process.PIPES_SELECTABLE", False)
    polled: list[object] = []
    monkeypatch.setattr("select.select", lambda *a: polled.append(a) or pytest.fail("select() on a pipe"))
    backend = Backend(probe=lambda: pytest.fail("no probing"))
    model = backend.load(str(LLAMA))
    est = Estimator(backend)
    computed_here: list[int] = []
    monkeypatch.setattr(Backend, "plan", _counting(Backend.plan, computed_here))
    request = PlanRequest(est.next_id(), model, LaunchSettings(n_ctx=8192), ONE_GPU)
    outcome = _answer(qtbot, est, request)  # sent at once, before the child has said it is ready
    assert computed_here == [] and est.in_process and est._process._ready  # type: ignore[union-attr]
    assert polled == []
    _same_outcome(outcome, backend.plan(request))
    est.shutdown()


def _counting(plan: Any, calls: list[int]) -> Any:
    def counted(self: Backend, request: PlanRequest) -> PlanOutcome:
        calls.append(request.request_id)
        result: PlanOutcome = plan(self, request)
        return result

    return counted


def test_a_frozen_app_estimates_on_the_thread(qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A frozen app has no interpreter to start a child with: its estimates are computed on the estimator thread."""
    monkeypatch.setattr("sys.frozen", True, raising=False)
    backend = Backend(probe=lambda: pytest.fail("no probing"))
    model = backend.load(str(LLAMA))
    est = Estimator(backend)
    assert not est.in_process
    request = PlanRequest(est.next_id(), model, LaunchSettings(n_ctx=8192), ONE_GPU)
    _same_outcome(_answer(qtbot, est, request), backend.plan(request))
    est.shutdown()
