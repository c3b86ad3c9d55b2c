"""Slow work for the weights, off the scheduler loop: packing plans and learned durations.

``get_weight`` runs inside the scheduler loop (and the api-server's trigger endpoint); it must never wait
on a plan (seconds for 1,000 tasks) or on a database read of past runs. :class:`Background` runs that
work in one daemon thread per process, the planning itself in a subprocess (so the scheduler keeps the
GIL), and hands back results by key; until a result is ready the weights use the critical path with the
declared estimates (same unit, so nothing jumps when the plan arrives). A failing or slow plan is
logged once and not retried for that DAG version. With ``[gpu_dag] plan_in_background = false`` the
work runs inline (tests). The subprocess runs at ``[gpu_dag] planner_nice`` (default 19): the kernel
gives the scheduler the CPU first, so a busy machine delays plans, never the scheduler loop.
:meth:`Background.close` ends the thread and the subprocess once the queued jobs are done (the weights
call it when new settings replace the object).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import airflow_gpu_dag.metrics as metrics
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.planner import planned_remaining

log = logging.getLogger(__name__)

__all__ = ["Background", "PlanRequest"]

#: A plan that takes longer than this is given up (the DAG keeps its critical-path weights).
PLAN_TIMEOUT_S = 300.0
#: Plans kept per process (by fingerprint).
MAX_PLANS = 512

#: The key of the job that ends the worker (:meth:`Background.close`).
_CLOSE = "\0close"

PlanRequest = tuple[str, TaskGraph, dict[str, int], str, int, bool]  # fingerprint, graph, caps, policy, ...


class Background:
    """One worker thread; ``inline=True`` runs every job in the caller instead (deterministic tests)."""

    def __init__(
        self,
        inline: bool = False,
        plan_timeout: float = PLAN_TIMEOUT_S,
        label: str = "packing",
        nice: int = 0,
    ) -> None:
        self.inline = inline
        self.nice = nice  # nice level of the planning subprocess (0: the caller's priority)
        self.label = label
        self.plan_timeout = plan_timeout
        self._lock = threading.Lock()
        self._plans: OrderedDict[str, dict[str, float] | None] = OrderedDict()  # None: failed
        self._pending: set[str] = set()
        self._jobs: queue.Queue[tuple[str, Callable[[], None]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._closed = False
        #: how long each of the last MAX_PLANS plans took (metrics, tests); bounded: plans never stop
        self.plan_seconds: deque[float] = deque(maxlen=MAX_PLANS)

    # -- plans ----------------------------------------------------------------------------------
    def plan(self, request: PlanRequest) -> dict[str, float] | None:
        """The planned remaining times of ``request``'s fingerprint when ready, else None (and the plan
        is scheduled). Never blocks unless ``inline``."""
        fingerprint = request[0]
        with self._lock:
            if fingerprint in self._plans:
                self._plans.move_to_end(fingerprint)
                return self._plans[fingerprint]
            if fingerprint in self._pending:
                return None
            self._pending.add(fingerprint)
        self._submit(fingerprint, lambda: self._make_plan(request))
        with self._lock:
            return self._plans.get(fingerprint)

    def _make_plan(self, request: PlanRequest) -> None:
        fingerprint, graph, capacity, policy, search, strict = request
        started = time.monotonic()
        result: dict[str, float] | None
        try:
            if self.inline:
                result = planned_remaining(graph, capacity, policy, search, strict)
            else:
                future: Future[dict[str, float]] = self._executor().submit(
                    planned_remaining, graph, capacity, policy, search, strict
                )
                result = future.result(timeout=self.plan_timeout)
        except Exception as err:  # a plan is an optimization: keep the critical path
            log.warning(
                "airflow-gpu-dag: no packing plan for DAG %r (%s: %s); it keeps critical-path weights",
                graph.dag_id,
                type(err).__name__,
                err,
            )
            result = None
            if not self.inline:
                self._reset_executor()
        elapsed = time.monotonic() - started
        with self._lock:
            self.plan_seconds.append(elapsed)
            self._plans[fingerprint] = result
            self._pending.discard(fingerprint)
            while len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)
        metrics.priority_plan_time(elapsed, self.label)
        if result is not None:
            log.info("airflow-gpu-dag: planned DAG %r (%d tasks) in %.2fs", graph.dag_id, len(graph), elapsed)

    # -- any slow job ---------------------------------------------------------------------------
    def run(self, key: str, job: Callable[[], None]) -> None:
        """Run ``job`` in the worker thread once (a job with the same ``key`` still queued is dropped)."""
        with self._lock:
            if key in self._pending:
                return
            self._pending.add(key)

        def wrapped() -> None:
            try:
                job()
            except Exception:
                log.exception("airflow-gpu-dag: background job %s failed", key)
            finally:
                with self._lock:
                    self._pending.discard(key)

        self._submit(key, wrapped)

    def _submit(self, key: str, job: Callable[[], None]) -> None:
        if self.inline:
            job()
            return
        with self._lock:
            if self._closed:
                # replaced: the worker stops at the close mark queued before this job, so the job is
                # dropped (the object that replaced this one does the work) and its key freed
                self._pending.discard(key)
                return
            self._jobs.put((key, job))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="gpu-dag-weights", daemon=True)
                self._thread.start()

    def is_worker(self) -> bool:
        """True when called from this object's worker thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def _work(self) -> None:
        while True:
            key, job = self._jobs.get()
            if key == _CLOSE:
                self._reset_executor()
                return
            try:
                job()
            except Exception:  # never let the worker die
                log.exception("airflow-gpu-dag: background job failed")

    def close(self) -> None:
        """Let the worker thread finish the queued jobs, then end it and its planning subprocess; no
        thread is started again (the object was replaced). Returns at once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            running = self._thread is not None and self._thread.is_alive()
        if running:
            self._jobs.put((_CLOSE, lambda: None))
        else:
            self._reset_executor()

    @property
    def running(self) -> bool:
        """Whether the worker thread is alive (tests)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until no job is queued or running (tests, benchmarks); True when idle."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._pending and self._jobs.empty():
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    # -- the planning subprocess ----------------------------------------------------------------
    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_lower_priority,
                    initargs=(self.nice,),
                )
                atexit.register(self._pool.shutdown, wait=False, cancel_futures=True)
            return self._pool

    def _reset_executor(self) -> None:
        """Drop the planning process (a timed-out plan would otherwise keep computing)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
            pool.shutdown(wait=False, cancel_futures=True)

    def known_plans(self) -> Mapping[str, Any]:
        with self._lock:
            return dict(self._plans)


def _lower_priority(nice: int) -> None:
    """Initializer of the planning subprocess: lower its CPU priority by ``nice`` (0: unchanged)."""
    if nice > 0:
        with contextlib.suppress(OSError, AttributeError):  # AttributeError: no os.nice on Windows
            os.nice(nice)
