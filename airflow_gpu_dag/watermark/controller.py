"""The watermark controller: a thin adapter between capacity sources, the REST API and the core.

Each tick (every ``interval`` seconds, 60 by default):

1. take/renew the lease (:mod:`.leader_lock`); a standby does nothing else;
2. read every pool's capacity through its source and fault ladder (:class:`.sources.CapacityTracker`);
3. read the pools' SCHEDULED, QUEUED and RUNNING task instances over REST, with priority weight,
   pool slots, and the ``executor_config["gpu_dag"]["duration_s"]`` estimate; for pools with
   ``lookahead`` also the task instances not scheduled yet whose upstream tasks have all started or are
   ready (their DAG's upstream lists and their run's task instances), with their expected ready time;
   if that read fails the tick goes on without lookahead and says so in the log;
4. ask :func:`airflow_gpu_dag.core.reservation.decide_pools` for each pool's size;
5. write size + description with a full-body ``PATCH /api/v2/pools/{name}`` (create when missing).

Nothing needed for a correct decision lives only in memory: capacity comes from the sources, tasks
from REST, and the fault-ladder state (last good value, failed intervals) is written in the pool
description and read back by a controller that (re)starts or takes over the lease.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_gpu_dag.core.admission import PendingTask, ReadyTask, RunningTask
from airflow_gpu_dag.core.reservation import PoolDecision, decide_pools
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.watermark.config import PoolSpec, WatermarkConfig
from airflow_gpu_dag.watermark.durations import ControllerHistory
from airflow_gpu_dag.watermark.leader_lock import (
    CombinedLeaderLock,
    FileLeaderLock,
    VariableLeaderLock,
    default_holder_id,
)
from airflow_gpu_dag.watermark.sources import CapacitySource, CapacityTracker, PoolCapacity, build_source
from airflow_gpu_dag.watermark.too_large import TooLargeWatch

log = logging.getLogger(__name__)

__all__ = [
    "PoolOutcome",
    "WatermarkController",
    "build_controller",
    "describe",
    "parse_state",
]

READY_STATES = ("scheduled",)
HOLDING_STATES = ("queued", "running")
ENDED_STATES = ("success", "failed", "skipped", "upstream_failed", "removed")
_STATE = re.compile(r"\[gpu-dag-state (\{.*?\})\]")


def describe(capacity: PoolCapacity, decision: PoolDecision | None, size: int) -> str:
    """The pool description: what the controller did, plus its fault-ladder state (machine-readable)."""
    parts = [
        f"gpu-dag watermark: pool {size} of capacity {capacity.gpus}",
        f"source {capacity.status}: {capacity.detail}",
    ]
    if decision is not None:
        parts.append(decision.reason)
    state = json.dumps(
        {"last_good": capacity.last_good, "failures": capacity.failures}, separators=(",", ":")
    )
    return " | ".join(parts) + f" [gpu-dag-state {state}]"


def parse_state(description: str | None) -> tuple[int | None, int] | None:
    """``(last_good, failures)`` from a description written by :func:`describe`, else None."""
    if not description:
        return None
    match = _STATE.search(description)
    if not match:
        return None
    try:
        state = json.loads(match.group(1))
        last_good = state.get("last_good")
        return (int(last_good) if last_good is not None else None), int(state.get("failures", 0))
    except (ValueError, TypeError, AttributeError):
        return None


@dataclass(frozen=True)
class PoolOutcome:
    """What one tick did to one pool."""

    pool: str
    capacity: PoolCapacity
    decision: PoolDecision | None
    size: int | None
    written: bool
    error: str | None = None


def _key(ti: Mapping[str, Any]) -> str:
    return f"{ti.get('dag_id')}/{ti.get('dag_run_id')}/{ti.get('task_id')}/{ti.get('map_index', -1)}"


class WatermarkController:
    """Keeps GPU pools at their watermark and applies reservation decisions.

    :param config: pools and their settings.
    :param client: the REST client (see :class:`airflow_gpu_dag.hooks.rest_client.AirflowRestClient`).
    :param sources: capacity source per pool; by default built from the config.
    :param leader_lock: who may act; None = always active (tests, single controller by construction).
    :param default_duration: estimate (s) for tasks without a ``duration_s`` hint; default from
        ``[gpu_dag] default_duration``.
    :param clock: epoch seconds (same clock as task instance start dates).
    """

    def __init__(
        self,
        config: WatermarkConfig,
        client: AirflowRestClient,
        sources: Mapping[str, CapacitySource] | None = None,
        leader_lock: CombinedLeaderLock | None = None,
        default_duration: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.client = client
        self.leader_lock = leader_lock
        self._clock = clock
        if default_duration is None:
            from airflow_gpu_dag.settings import default_duration_seconds

            default_duration = default_duration_seconds()
        self.default_duration = float(default_duration)
        # durations learned from past runs, mapped-task counts (over REST, cached)
        self.history = ControllerHistory(client, self.default_duration)
        self.too_large = TooLargeWatch(client)  # never pending forever (watermark/too_large.py)
        given = dict(sources or {})
        self.trackers: dict[str, CapacityTracker] = {
            spec.name: CapacityTracker(spec, given.get(spec.name) or build_source(spec.source, client))
            for spec in config.pools
        }
        self.specs: dict[str, PoolSpec] = {spec.name: spec for spec in config.pools}
        self.active = False
        self.ticks = 0

    # -- state recovery ---------------------------------------------------------------------------
    def _restore(self, pools: Mapping[str, dict[str, Any] | None]) -> None:
        for name, tracker in self.trackers.items():
            pool = pools.get(name)
            state = parse_state(pool.get("description") if pool else None)
            if state is not None:
                tracker.restore(*state)
                log.info("pool %s: restored last good %s, %d failed intervals", name, state[0], state[1])

    # -- task instances ---------------------------------------------------------------------------
    def _tasks(self, now: float) -> tuple[list[RunningTask], list[ReadyTask]]:
        deferred_pools = [s.name for s in self.config.pools if s.include_deferred]
        states = READY_STATES + HOLDING_STATES + (("deferred",) if deferred_pools else ())
        running: list[RunningTask] = []
        ready: list[ReadyTask] = []
        for ti in self.client.task_instances(list(self.specs), states):
            pool, state = str(ti.get("pool")), str(ti.get("state"))
            if state == "deferred" and pool not in deferred_pools:
                continue
            slots = int(ti.get("pool_slots") or 1)
            duration = self._duration(ti)
            if state == "scheduled":
                order = (
                    str(ti.get("logical_date") or ti.get("run_after") or ""),
                    int(ti.get("map_index", -1)),
                )
                ready.append(
                    ReadyTask(_key(ti), pool, slots, int(ti.get("priority_weight") or 0), duration, order)
                )
            else:
                running.append(RunningTask(_key(ti), pool, slots, self.history.expected_end(ti, now)))
        return running, ready

    def _duration(self, ti: Mapping[str, Any]) -> float:
        return self.history.duration(ti)

    def _pending(self, now: float) -> list[PendingTask]:
        """Lookahead: task instances of the lookahead pools not scheduled yet whose upstream tasks have
        all started or are ready (:class:`~airflow_gpu_dag.core.admission.PendingTask`).

        An upstream task that has ended counts as ending now; one running or queued ends at its start
        plus its duration hint; one SCHEDULED in the same pool goes into ``after``; one SCHEDULED in an
        unmanaged pool starts now. Anything else (not scheduled yet, up for retry, waiting in another
        managed pool) means the task is not pending yet.
        """
        pools = [s.name for s in self.config.pools if s.reservation and s.lookahead]
        if not pools:
            return []
        candidates = self.client.task_instances(pools, ("no_status",))
        pending: list[PendingTask] = []
        upstream_of: dict[str, dict[str, list[str]]] = {}
        runs: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
        for ti in candidates:
            dag_id, run_id, pool = str(ti.get("dag_id")), str(ti.get("dag_run_id")), str(ti.get("pool"))
            if dag_id not in upstream_of:
                upstream_of[dag_id] = self.client.upstream_task_ids(dag_id)
            if (dag_id, run_id) not in runs:
                by_task: dict[str, list[dict[str, Any]]] = {}
                for other in self.client.run_task_instances(dag_id, run_id):
                    by_task.setdefault(str(other.get("task_id")), []).append(other)
                runs[(dag_id, run_id)] = by_task
            ends = [now]
            after: list[str] = []
            known = True
            for up_id in upstream_of[dag_id].get(str(ti.get("task_id")), []):
                for up in runs[(dag_id, run_id)].get(up_id, []):
                    state = up.get("state")
                    if state in ENDED_STATES:
                        continue
                    if state in HOLDING_STATES or state == "deferred":
                        ends.append(self.history.expected_end(up, now))
                    elif state == "scheduled" and str(up.get("pool")) == pool:
                        after.append(_key(up))
                    elif state == "scheduled" and str(up.get("pool")) not in self.specs:
                        ends.append(now + self._duration(up))
                    else:
                        known = False
            if not known:
                continue
            order = (str(ti.get("logical_date") or ti.get("run_after") or ""), int(ti.get("map_index", -1)))
            task = PendingTask(
                _key(ti),
                pool,
                int(ti.get("pool_slots") or 1),
                int(ti.get("priority_weight") or 0),
                self._duration(ti),
                order,
                max(ends),
                tuple(after),
            )
            pending.extend(self.history.instances(ti, task))  # a mapped task: its N instances
        return pending

    # -- one tick ---------------------------------------------------------------------------------
    def tick(self) -> list[PoolOutcome]:
        """Run one control step; returns what it did per pool (empty while standing by)."""
        self.ticks += 1
        if self.leader_lock is not None and not self.leader_lock.acquire():
            if self.active:
                log.warning("lost the controller lease (%s); standing by", self.leader_lock.describe())
            else:
                log.info("standing by: another controller is active (%s)", self.leader_lock.describe())
            self.active = False
            return []
        current = {name: self.client.get_pool(name) for name in self.specs}
        if not self.active:
            self._restore(current)
            self.active = True
        now = self._clock()
        capacities = {name: tracker.read() for name, tracker in self.trackers.items()}
        try:
            running, ready = self._tasks(now)
        except Exception as err:
            log.error("cannot read task instances (%s); pool sizes left unchanged this tick", err)
            return [
                PoolOutcome(n, c, None, None, False, f"task instances: {err}") for n, c in capacities.items()
            ]

        ready = self.too_large.check(capacities, ready)
        try:
            pending = self._pending(now)
        except Exception as err:
            log.warning("cannot read the tasks about to be ready (%s); reserving for ready tasks only", err)
            pending = []

        decisions: dict[str, PoolDecision] = {}
        for backfill, strict in ((True, False), (True, True), (False, False)):
            group = {
                n: c.gpus
                for n, c in capacities.items()
                if self.specs[n].reservation
                and self.specs[n].backfill is backfill
                and (self.specs[n].strict_backfill is strict or not backfill)
            }
            if group:
                ahead = [p for p in pending if p.pool in group]
                decisions.update(
                    decide_pools(
                        now,
                        group,
                        running,
                        ready,
                        backfill=backfill,
                        pending=ahead,
                        strict_backfill=strict,
                        next_decision=now + self.config.interval,
                    )
                )

        outcomes = []
        for name, capacity in capacities.items():
            spec = self.specs[name]
            decision = decisions.get(name)
            size = decision.pool_size if decision is not None else capacity.gpus
            description = self.too_large.annotate(name, describe(capacity, decision, size))
            pool = current.get(name)
            if pool and int(pool.get("slots", -2)) == size and pool.get("description") == description:
                outcomes.append(PoolOutcome(name, capacity, decision, size, False))
                continue
            try:
                self.client.set_pool(name, size, description, include_deferred=spec.include_deferred)
            except Exception as err:
                log.error("pool %s: cannot write size %d (%s)", name, size, err)
                outcomes.append(PoolOutcome(name, capacity, decision, size, False, str(err)))
                continue
            previous = pool.get("slots") if pool else None
            if previous == size:
                log.info("pool %s: %d slots, description updated (%s)", name, size, description)
            else:
                log.info("pool %s: %s -> %d slots (%s)", name, previous, size, description)
            outcomes.append(PoolOutcome(name, capacity, decision, size, True))
        return outcomes

    def run(self, stop: threading.Event | None = None, max_ticks: int | None = None) -> None:
        """Tick every ``config.interval`` seconds until ``stop`` is set (or ``max_ticks`` ran)."""
        stop = stop or threading.Event()
        done = 0
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    self.tick()
                except Exception:  # never die: the next tick re-derives everything
                    log.exception("watermark tick failed")
                done += 1
                if max_ticks is not None and done >= max_ticks:
                    return
                stop.wait(max(0.0, self.config.interval - (time.monotonic() - started)))
        finally:
            if self.leader_lock is not None:
                self.leader_lock.release()


def build_controller(
    config: WatermarkConfig,
    client: AirflowRestClient,
    holder: str | None = None,
    sources: Mapping[str, CapacitySource] | None = None,
    clock: Callable[[], float] = time.time,
) -> WatermarkController:
    """A controller with the lease the config asks for (host lock file and/or Variable lease)."""
    file_lock = FileLeaderLock(config.lease.lock_file) if config.lease.lock_file else None
    variable = (
        VariableLeaderLock(
            client, config.lease.variable, holder or default_holder_id(), config.lease_ttl(), clock
        )
        if config.lease.variable
        else None
    )
    leader_lock = CombinedLeaderLock(file_lock, variable) if (file_lock or variable) else None
    return WatermarkController(config, client, sources=sources, leader_lock=leader_lock, clock=clock)
