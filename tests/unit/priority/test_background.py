"""The background worker of the weights (:mod:`airflow_gpu_dag.priority.background`), called directly: plans
and slow jobs run off the caller, once per key, and a failing or slow plan leaves the critical path."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

import airflow_gpu_dag.metrics as metrics
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.planner import planned_remaining
from airflow_gpu_dag.priority import background as module
from airflow_gpu_dag.priority.background import Background, PlanRequest
from tests.unit.graphs import gpu_graph

#: Generous bound on every wait for the worker thread (a loaded CI machine is slow, never this slow).
WAIT_S = 30.0


def _graph() -> TaskGraph:
    """``a`` (10 s, 1 GPU) gates ``b`` (100 s, all 8 GPUs); ``c`` (50 s, 1 GPU) is independent: the plan
    runs ``a`` and ``c`` first, so ``b`` starts at 50 and the run ends at 150 (the critical path says
    a: 110, c: 50)."""
    return gpu_graph({"a": (10.0, 1), "b": (100.0, 8), "c": (50.0, 1)}, [("a", "b")], dag_id="dag")


def _request(fingerprint: str = "fp") -> PlanRequest:
    """A plan of :func:`_graph` on 8 GPUs (policy, search budget and backfill set to non-defaults)."""
    return (fingerprint, _graph(), {"gpu": 8}, "reservation", 7, True)


def _until(condition: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


@dataclass
class Submission:
    """One plan handed to a planning process: the test completes its ``future`` (or never does)."""

    pool: FakePool
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: Future[Any]
    thread: str  # the thread that submitted it


class FakePool:
    """Stands for the planning subprocess: records its construction, each plan it is given (in
    ``planners``), the processes it terminates and its shutdowns."""

    def __init__(self, planners: Planners, **kwargs: Any) -> None:
        self.planners = planners
        self.kwargs = kwargs
        self.terminated: list[str] = []
        self.shutdowns: list[dict[str, bool]] = []
        self._processes = {1: SimpleNamespace(terminate=lambda: self.terminated.append("planner"))}

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        submission = Submission(self, fn, args, Future(), threading.current_thread().name)
        self.planners.submitted.put(submission)
        self.planners.futures.append(submission.future)
        return submission.future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self.shutdowns.append({"wait": wait, "cancel_futures": cancel_futures})


class Planners:
    """The FakePools Backgrounds made (in order), the plans given to them, and what they registered
    with ``atexit``."""

    def __init__(self) -> None:
        self.made: list[FakePool] = []
        self.submitted: queue.Queue[Submission] = queue.Queue()
        self.futures: list[Future[Any]] = []
        self.atexit: list[tuple[Callable[..., Any], dict[str, Any]]] = []

    def next(self) -> Submission:
        """The next plan handed to a planning process (waits for the worker thread to get there)."""
        return self.submitted.get(timeout=WAIT_S)


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> Iterator[Planners]:
    """Every planning subprocess a Background starts is a FakePool; nothing is registered with the real
    ``atexit``; a plan left unanswered is cancelled at the end (the worker thread does not wait on it)."""
    planners = Planners()

    def factory(**kwargs: Any) -> FakePool:
        planners.made.append(FakePool(planners, **kwargs))
        return planners.made[-1]

    monkeypatch.setattr(module, "ProcessPoolExecutor", factory)
    monkeypatch.setattr(
        module, "atexit", SimpleNamespace(register=lambda fn, **kw: planners.atexit.append((fn, kw)))
    )
    yield planners
    for future in planners.futures:
        future.cancel()


@pytest.fixture
def worker() -> Iterator[Background]:
    """A threaded Background, closed (and its thread ended) after the test."""
    background = Background(inline=False, label="test")
    yield background
    background.close()
    assert _until(lambda: not background.running), "the worker thread outlived the test"


def _holding(entered: threading.Event, release: threading.Event) -> Callable[[], None]:
    """A job that sets ``entered``, then holds the worker thread until ``release`` is set."""

    def hold() -> None:
        entered.set()
        release.wait(WAIT_S)

    return hold


@pytest.fixture
def gate(worker: Background) -> Iterator[threading.Event]:
    """Holds ``worker``'s thread in a first job until set (set at the end of the test in any case)."""
    entered, release = threading.Event(), threading.Event()
    worker.run("gate", _holding(entered, release))
    assert entered.wait(WAIT_S)
    yield release
    release.set()


# -- plans ------------------------------------------------------------------------------------------
def test_an_inline_plan_is_made_at_once_and_kept_by_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    """``inline``: the plan is made in the caller from the request's graph, capacities, policy, search
    budget and backfill; asked again, it is served from memory (no second plan) and timed once."""
    calls: list[tuple[Any, ...]] = []
    timed: list[tuple[bool, str]] = []

    def planner(*args: Any) -> dict[str, float]:
        calls.append(args)
        return {"a": 150.0, "b": 100.0, "c": 150.0}

    monkeypatch.setattr(module, "planned_remaining", planner)
    monkeypatch.setattr(metrics, "priority_plan_time", lambda s, label: timed.append((s >= 0, label)))
    background = Background(inline=True, label="critical_path")
    request = _request()
    assert background.plan(request) == {"a": 150.0, "b": 100.0, "c": 150.0}
    assert calls == [(request[1], {"gpu": 8}, "reservation", 7, True)]
    assert background.plan(request) == {"a": 150.0, "b": 100.0, "c": 150.0}
    assert len(calls) == 1 and len(background.plan_seconds) == 1
    assert timed == [(True, "critical_path")]
    known = background.known_plans()
    assert known == {"fp": {"a": 150.0, "b": 100.0, "c": 150.0}}
    background.plan(_request("other"))
    assert list(known) == ["fp"] and list(background.known_plans()) == ["fp", "other"]  # a snapshot
    assert not background.running and not background.is_worker()  # no thread when inline


def test_a_failing_plan_is_logged_once_and_not_retried(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A plan is an optimization: a failing one leaves None (the critical path) for that fingerprint,
    with one warning naming the DAG and the error, and is not tried again per call."""
    calls: list[object] = []

    def broken(*args: Any) -> dict[str, float]:
        calls.append(args)
        raise ValueError("task 'b' is wider than pool 'gpu'")

    monkeypatch.setattr(module, "planned_remaining", broken)
    background = Background(inline=True)
    with caplog.at_level(logging.WARNING, logger=module.log.name):
        assert background.plan(_request()) is None
        assert background.plan(_request()) is None
    assert len(calls) == 1 and background.known_plans() == {"fp": None}
    warnings = [r.getMessage() for r in caplog.records if r.name == module.log.name]
    assert warnings == [
        "airflow-gpu-dag: no packing plan for DAG 'dag' (ValueError: task 'b' is wider than pool 'gpu'); "
        "it keeps critical-path weights"
    ]


def test_the_least_recently_used_plan_is_dropped_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond MAX_PLANS the plan asked for least recently goes, not the one made first."""
    monkeypatch.setattr(module, "MAX_PLANS", 2)
    monkeypatch.setattr(module, "planned_remaining", lambda graph, *args: {"a": float(len(graph))})
    background = Background(inline=True)
    background.plan(_request("old"))
    background.plan(_request("middle"))
    background.plan(_request("old"))  # used again: now the most recent
    background.plan(_request("new"))
    assert list(background.known_plans()) == ["old", "new"]


def test_a_plan_in_the_background_never_blocks_and_is_requested_once(
    worker: Background, pools: Planners
) -> None:
    """Until the subprocess answers, every call returns None at once and no second plan is queued; the
    worker thread hands the plan to one low-priority spawned process and the next call gets it."""
    worker.nice = 7
    request = _request()
    assert worker.plan(request) is None  # returns while the plan is not made
    plan = pools.next()
    assert worker.plan(request) is None  # pending: not queued again
    assert plan.fn is planned_remaining and plan.args == (request[1], {"gpu": 8}, "reservation", 7, True)
    assert plan.thread == "gpu-dag-weights"
    kwargs = plan.pool.kwargs
    assert kwargs["max_workers"] == 1 and kwargs["mp_context"].get_start_method() == "spawn"
    assert kwargs["initializer"] is module._lower_priority and kwargs["initargs"] == (7,)
    assert pools.atexit == [(plan.pool.shutdown, {"wait": False, "cancel_futures": True})]
    plan.future.set_result({"a": 150.0, "b": 100.0, "c": 150.0})
    assert worker.wait_idle(WAIT_S)
    assert worker.plan(request) == {"a": 150.0, "b": 100.0, "c": 150.0}
    assert pools.submitted.empty() and pools.made == [plan.pool] and plan.pool.shutdowns == []


@pytest.mark.parametrize("failure", ["timeout", "error"])
def test_a_slow_or_failing_plan_in_the_background_drops_its_process(
    worker: Background, pools: Planners, caplog: pytest.LogCaptureFixture, failure: str
) -> None:
    """A plan past ``plan_timeout`` (or raising in the subprocess) is given up: None for its
    fingerprint, and the planning process is terminated (a timed-out plan would keep computing); the
    next plan starts a fresh one."""
    worker.plan_timeout = 0.01  # the future below never completes unless told: always past it
    with caplog.at_level(logging.WARNING, logger=module.log.name):
        assert worker.plan(_request("slow")) is None
        slow = pools.next()
        if failure == "error":
            slow.future.set_exception(MemoryError("planner ran out of memory"))
        assert worker.wait_idle(WAIT_S)
    assert worker.plan(_request("slow")) is None and worker.known_plans() == {"slow": None}
    assert slow.pool.terminated == ["planner"]
    assert slow.pool.shutdowns == [{"wait": False, "cancel_futures": True}]
    expected = "MemoryError: planner ran out of memory" if failure == "error" else "TimeoutError"
    assert expected in caplog.text and "no packing plan for DAG 'dag'" in caplog.text
    assert worker.plan(_request("next")) is None
    following = pools.next()
    assert following.pool is not slow.pool and len(pools.made) == 2  # a new planning process
    following.future.set_result({"a": 1.0})
    assert worker.wait_idle(WAIT_S) and worker.plan(_request("next")) == {"a": 1.0}


def test_a_real_plan_in_the_spawned_subprocess_is_the_inline_plan(worker: Background) -> None:
    """End to end through a real spawned planning process: the same remaining times as the planner
    called inline (the packed schedule, not the critical path)."""
    worker.nice = 1
    graph = _graph()
    request: PlanRequest = ("real", graph, {"gpu": 8}, "reservation", 0, False)
    worker.plan(request)
    assert worker.wait_idle(120)
    assert worker.plan(request) == {"a": 150.0, "b": 100.0, "c": 150.0}
    assert planned_remaining(graph, {"gpu": 8}) == {"a": 150.0, "b": 100.0, "c": 150.0}


# -- any slow job ----------------------------------------------------------------------------------
def test_run_runs_a_job_once_per_key_in_the_worker_thread(worker: Background, gate: threading.Event) -> None:
    """A job with the same key still queued is dropped; once it ran, the key may run again. Inside the
    job ``is_worker`` is True, in the caller False; ``wait_idle`` is False while a job runs."""
    seen: list[tuple[str, bool]] = []

    def job() -> None:
        seen.append((threading.current_thread().name, worker.is_worker()))

    worker.run("refresh", job)
    worker.run("refresh", job)  # still queued behind the gate: dropped
    assert worker.running and not worker.is_worker()
    assert not worker.wait_idle(0.05)  # the gate holds the worker
    gate.set()
    assert worker.wait_idle(WAIT_S)
    assert seen == [("gpu-dag-weights", True)]
    worker.run("refresh", job)
    assert worker.wait_idle(WAIT_S)
    assert seen == [("gpu-dag-weights", True)] * 2


def test_a_failing_job_is_logged_and_the_worker_keeps_running(
    worker: Background, caplog: pytest.LogCaptureFixture
) -> None:
    """A job that raises is logged with its key; the jobs after it still run, and its key is free."""
    done = threading.Event()

    def broken() -> None:
        raise RuntimeError("database is locked")

    with caplog.at_level(logging.ERROR, logger=module.log.name):
        worker.run("learned:1", broken)
        worker.run("after", done.set)
        assert done.wait(WAIT_S) and worker.wait_idle(WAIT_S)
    assert "background job learned:1 failed" in caplog.text and "database is locked" in caplog.text
    assert worker.running
    worker.run("learned:1", done.clear)  # not left pending: it runs again
    assert worker.wait_idle(WAIT_S) and not done.is_set()


def test_an_inline_background_runs_jobs_in_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    """``inline=True`` (tests): the job has run when ``run`` returns, in the calling thread; a failing
    job is logged, not raised; no thread is ever started."""
    background = Background(inline=True)
    threads: list[str] = []
    background.run("job", lambda: threads.append(threading.current_thread().name))
    assert threads == [threading.current_thread().name]

    def broken() -> None:
        raise ZeroDivisionError("division by zero")

    with caplog.at_level(logging.ERROR, logger=module.log.name):
        background.run("broken", broken)
    assert "background job broken failed" in caplog.text
    assert not background.running and background.wait_idle(WAIT_S)


# -- close -----------------------------------------------------------------------------------------
def test_close_finishes_the_queued_jobs_then_ends_the_worker_and_its_process(
    worker: Background, pools: Planners
) -> None:
    """``close`` returns at once (here while the worker is held in a job); the jobs queued before it
    still run, then the thread ends and the planning process is shut down; nothing starts it again."""
    assert worker.plan(_request()) is None
    plan = pools.next()
    plan.future.set_result({"a": 1.0})
    assert worker.wait_idle(WAIT_S)  # a planning process exists now
    entered, release, done = threading.Event(), threading.Event(), []
    worker.run("held", _holding(entered, release))
    worker.run("queued", lambda: done.append("queued"))
    assert entered.wait(WAIT_S)
    try:
        worker.close()  # returns though the worker is held
        assert worker.running and done == [] and plan.pool.shutdowns == []
    finally:
        release.set()
    assert _until(lambda: not worker.running)
    assert done == ["queued"] and plan.pool.shutdowns == [{"wait": False, "cancel_futures": True}]
    worker.close()  # a second close: nothing more
    worker.run("late", lambda: done.append("late"))  # replaced: no thread is started again
    assert not worker.running and done == ["queued"] and len(plan.pool.shutdowns) == 1


def test_close_of_a_background_that_never_ran_starts_nothing() -> None:
    """Closed before any job: the jobs and plans asked for later start no thread (the object was
    replaced); a plan stays None."""
    background = Background(inline=False)
    background.close()
    background.run("late", lambda: None)
    assert background.plan(_request()) is None
    assert not background.running and background.known_plans() == {}


def test_a_job_given_after_close_is_dropped_and_its_key_freed(worker: Background) -> None:
    """The worker stops at the close mark, queued before any later job: such a job is dropped (the object
    that replaced this one does the work), never left pending, so ``wait_idle`` still returns."""
    entered, release, ran = threading.Event(), threading.Event(), threading.Event()
    worker.run("held", _holding(entered, release))
    assert entered.wait(WAIT_S)
    try:
        worker.close()
        worker.run("late", ran.set)  # the worker is still draining (held in a job)
    finally:
        release.set()
    assert _until(lambda: not worker.running)
    assert not ran.is_set() and worker.wait_idle(1)


def test_wait_idle_with_no_time_to_wait_still_says_idle() -> None:
    background = Background(inline=False)
    assert background.wait_idle(0)


# -- the planning subprocess's priority ------------------------------------------------------------
def test_the_planning_process_lowers_its_priority_where_it_can(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_lower_priority`` (the subprocess initializer): ``os.nice(n)`` for n > 0, nothing for 0; a
    refusal (OSError) or a platform without ``os.nice`` leaves the priority as it is, never raising."""
    calls: list[int] = []
    monkeypatch.setattr(module.os, "nice", calls.append)
    module._lower_priority(0)
    module._lower_priority(5)
    assert calls == [5]

    def refused(increment: int) -> int:
        raise PermissionError("not permitted")

    monkeypatch.setattr(module.os, "nice", refused)
    module._lower_priority(19)
    monkeypatch.delattr(module.os, "nice")
    module._lower_priority(19)
