"""The watermark controller: a thin adapter between capacity sources, the REST API and the core.

Each tick (every ``interval`` seconds, 60 by default):

1. take/renew the lease (:mod:`.leader_lock`); a standby does nothing else;
2. read every pool's capacity through its source and fault ladder (:class:`.sources.CapacityTracker`);
3. read the pools' SCHEDULED, QUEUED and RUNNING task instances over REST, with priority weight,
   pool slots, and the ``executor_config["gpu_dag"]["duration_s"]`` estimate; for pools with
   ``lookahead`` also the task instances not scheduled yet whose upstream tasks have all started or are
   ready (their DAG's upstream lists and their run's task instances), with their expected ready time;
   if that read fails the tick goes on without lookahead and says so in the log;
4. ask :func:`airflow_gpu_dag.core.policy.reservation.decide_pools` for each pool's size;
5. write size + description with a full-body ``PATCH /api/v2/pools/{name}`` (create when missing).

Nothing needed for a correct decision lives only in memory: capacity comes from the sources, tasks
from REST, and the fault-ladder state (last good value, failed intervals) is written in the pool
description and read back by a controller that (re)starts or takes over the lease.

Failing open (:mod:`.pool_state`, :mod:`.lifecycle`, :mod:`.watchdog`): every write carries a claim
that lapses ``fail_open_after`` intervals later unless renewed; a clean stop writes the pools back to
their capacity, and the scheduler's watchdog does so for a controller that died or hung.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import airflow_gpu_dag.metrics as metrics
from airflow_gpu_dag.core.model.ladders import can_fall_back
from airflow_gpu_dag.core.model.resources import real_number
from airflow_gpu_dag.core.policy.admission import PendingTask, ReadyTask, RunningTask
from airflow_gpu_dag.core.policy.objective import ReservationGate
from airflow_gpu_dag.core.policy.reservation import PoolDecision, decide_pools
from airflow_gpu_dag.executor_config import fallback_hint
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.pool_claim.state import PoolState, needs_write, parse_pool_state, with_state
from airflow_gpu_dag.settings import default_duration_seconds, key_epoch, objective, stage_length
from airflow_gpu_dag.watermark import task_instance_fields
from airflow_gpu_dag.watermark.config import ConfigError, PoolSpec, WatermarkConfig
from airflow_gpu_dag.watermark.durations import ControllerHistory
from airflow_gpu_dag.watermark.leader_lock import (
    CombinedLeaderLock,
    FileLeaderLock,
    VariableLeaderLock,
    default_holder_id,
)
from airflow_gpu_dag.watermark.lifecycle import Preflight, preflight, release_pools
from airflow_gpu_dag.watermark.plan_quality import PlanErrorReporter
from airflow_gpu_dag.watermark.sources import CapacitySource, CapacityTracker, PoolCapacity, build_sources
from airflow_gpu_dag.watermark.stage_fit import StageFitWatch
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


def describe(
    capacity: PoolCapacity,
    decision: PoolDecision | None,
    size: int,
    claim: tuple[str, str, float] | None = None,
    interval: float | None = None,
) -> str:
    """The pool description: what the controller did, plus its state (machine-readable): the fault
    ladder, the capacity, ``claim`` = ``(lease group, holder, expires)`` (see :mod:`.pool_state`), the
    decision as data (its ``why``) and the controller's ``interval``."""
    parts = [
        f"gpu-dag watermark: pool {size} of capacity {capacity.gpus}",
        f"source {capacity.status}: {capacity.detail}",
    ]
    if decision is not None:
        parts.append(decision.reason)
    lease, holder, expires = claim if claim is not None else (None, None, None)
    state = PoolState(capacity.last_good, capacity.failures, capacity.gpus, lease, holder, expires)
    why = decision.why if decision is not None else None
    return with_state(" | ".join(parts), replace(state, source=capacity.source, interval=interval, why=why))


def parse_state(description: str | None) -> tuple[int | None, int] | None:
    """``(last_good, failures)`` from a description written by :func:`describe`, else None."""
    state = parse_pool_state(description)
    return None if state is None else (state.last_good, state.failures)


@dataclass(frozen=True)
class PoolOutcome:
    """What one tick did to one pool."""

    pool: str
    capacity: PoolCapacity
    decision: PoolDecision | None
    size: int | None
    written: bool
    error: str | None = None
    previous: int | None = None
    would_write: bool = False


def _run(ti: Mapping[str, Any]) -> str:
    return f"{ti.get('dag_id')}/{ti.get('dag_run_id')}"


def _key(ti: Mapping[str, Any]) -> str:
    return task_instance_fields.key(ti)


class WatermarkController:
    """Keeps GPU pools at their watermark and applies reservation decisions.

    :param config: pools and their settings.
    :param client: the REST client (see :class:`airflow_gpu_dag.hooks.rest_client.AirflowRestClient`).
    :param sources: capacity source per pool; by default built from the config.
    :param leader_lock: who may act; None = always active (tests, single controller by construction).
    :param default_duration: estimate (s) for tasks without a ``duration_s`` hint; default from
        ``[gpu_dag] default_duration``.
    :param clock: epoch seconds (same clock as task instance start dates).
    :param holder: this process's id in leases and pool claims (default ``host:pid:random``).
    :param dry_run: decide and report, write nothing (no pool, no claim).
    :raises ConfigError: a source's options cannot build it (the message names the pool).
    """

    def __init__(
        self,
        config: WatermarkConfig,
        client: AirflowRestClient,
        sources: Mapping[str, CapacitySource] | None = None,
        leader_lock: CombinedLeaderLock | None = None,
        default_duration: float | None = None,
        clock: Callable[[], float] = time.time,
        holder: str | None = None,
        dry_run: bool = False,
    ) -> None:
        self.config = config
        self.client = client
        self.leader_lock = leader_lock
        self._clock = clock
        self.holder = holder or default_holder_id()
        self.group = config.lease_group()
        self.dry_run = dry_run

        if default_duration is None:
            default_duration = default_duration_seconds()
        if not 0 <= real_number(default_duration) < math.inf:  # NaN too
            raise ValueError(
                f"default_duration={default_duration!r} must be a finite number of seconds >= 0, e.g. 1800"
            )
        self.default_duration = float(default_duration)

        #: the cross-DAG objective's reservation gate ([gpu_dag] objective; None: reserve for every head)
        self.gate = reservation_gate()
        # durations learned from past runs, mapped-task counts (over REST, cached)
        self.history = ControllerHistory(client, self.default_duration)
        # a task too large for any host is never pending forever (watermark/too_large.py)
        self.too_large = TooLargeWatch(client, dry_run=dry_run)
        # whether [gpu_dag] stage_length fits the tasks that really wait here (watermark/stage_fit.py)
        self.stage_fit = StageFitWatch(stage_length())

        # each pool's source: the one given (tests), else built from the config (build_sources)
        given = dict(sources or {})
        built = build_sources([spec for spec in config.pools if spec.name not in given], client)
        by_pool = {**built, **given}
        self.trackers = {spec.name: CapacityTracker(spec, by_pool[spec.name]) for spec in config.pools}
        self.specs: dict[str, PoolSpec] = {spec.name: spec for spec in config.pools}
        # the plan error of each run that finishes in these pools, sent once (watermark/plan_quality.py)
        self.plan_errors = PlanErrorReporter(
            client,
            self.specs,
            history=self.history,
            gate=self.gate,
            epoch=key_epoch(),
            clock=clock,
            budget=config.interval / 4,
        )

        self.active = False
        self.ticks = 0
        self.released: list[str] = []

    # -- start and stop ---------------------------------------------------------------------------
    def preflight(self) -> Preflight:
        """Before the first tick: refuse pools another controller group manages, create missing pools
        (see :func:`.lifecycle.preflight`; nothing is written in a dry run)."""
        return preflight(
            self.client,
            self.specs,
            self.group,
            self._clock(),
            dry_run=self.dry_run,
            holder=self.holder,
            claim_for=self.config.fail_open_window(),
        )

    def release(self, reason: str) -> list[str]:
        """Fail open: write the pools this controller claimed back to their capacity."""
        if self.dry_run:
            return []
        return release_pools(self.client, self.specs, self.holder, reason, self._clock())

    def shutdown(self, reason: str = "stopped") -> None:
        """Clean stop: fail open (when active), then give up the lease."""
        try:
            if self.active:
                self.released = self.release(reason)
                self.active = False
        finally:
            if self.leader_lock is not None:
                self.leader_lock.release()

    # -- state recovery ---------------------------------------------------------------------------
    def _restore(self, pools: Mapping[str, dict[str, Any] | None]) -> None:
        for name, tracker in self.trackers.items():
            pool = pools.get(name)
            state = parse_pool_state(pool.get("description") if isinstance(pool, dict) else None)
            if state is not None and tracker.restore(state.last_good, state.failures, state.source):
                log.info(
                    "pool %s: restored last good %s, %d failed intervals",
                    name,
                    state.last_good,
                    state.failures,
                )

    # -- task instances ---------------------------------------------------------------------------
    def _tasks(self, now: float) -> tuple[list[RunningTask], list[ReadyTask]]:
        deferred_pools = [s.name for s in self.config.pools if s.include_deferred]
        states = READY_STATES + HOLDING_STATES + (("deferred",) if deferred_pools else ())
        running: list[RunningTask] = []
        ready: list[ReadyTask] = []
        skipped = 0
        for ti in self.client.task_instances(list(self.specs), states):
            try:
                pool, state = str(ti.get("pool")), str(ti.get("state"))
                if pool not in self.specs or state not in states:  # an answer the filter did not narrow
                    continue
                if state == "deferred" and pool not in deferred_pools:
                    continue
                slots = task_instance_fields.slots(ti)
                if state == "scheduled":
                    priority = task_instance_fields.priority(ti)
                    ready.append(
                        ReadyTask(
                            _key(ti),
                            pool,
                            slots,
                            priority,
                            self._duration(ti),
                            task_instance_fields.order(ti),
                            run=_run(ti),
                            falls_back=can_fall_back(fallback_hint(ti.get("executor_config"))),
                            since=task_instance_fields.scheduled_time(ti),
                        )
                    )
                else:
                    running.append(RunningTask(_key(ti), pool, slots, self.history.expected_end(ti, now)))
            except Exception:  # one unreadable task instance must not cost the tick
                skipped += 1
        if skipped:
            log.warning("skipped %d unreadable task instance(s) in the REST answer", skipped)
        return running, ready

    def _duration(self, ti: Mapping[str, Any]) -> float:
        """A task instance's estimated duration: learned from past runs, else its hint, else the default."""
        return self.history.duration(ti)

    def _pending(self, now: float) -> list[PendingTask]:
        """Lookahead: task instances of the lookahead pools not scheduled yet whose upstream tasks have
        all started or are ready (:class:`~airflow_gpu_dag.core.policy.admission.PendingTask`).

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
            if not isinstance(ti, Mapping):
                continue
            dag_id, run_id, pool = str(ti.get("dag_id")), str(ti.get("dag_run_id")), str(ti.get("pool"))
            if dag_id not in upstream_of:
                upstream_of[dag_id] = self.client.upstream_task_ids(dag_id)
            if (dag_id, run_id) not in runs:
                by_task: dict[str, list[dict[str, Any]]] = {}
                for other in self.client.run_task_instances(dag_id, run_id):
                    if isinstance(other, Mapping):  # a null in the answer must not cost the lookahead
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
            task = PendingTask(
                _key(ti),
                pool,
                task_instance_fields.slots(ti),
                task_instance_fields.priority(ti),
                self._duration(ti),
                task_instance_fields.order(ti),
                max(ends),
                tuple(after),
                run=_run(ti),
            )
            pending.extend(self.history.instances(ti, task))  # a mapped task: its N instances
        return pending

    # -- one tick ---------------------------------------------------------------------------------
    def tick(self) -> list[PoolOutcome]:
        """Run one control step; returns what it did per pool (empty while standing by).

        REST and source failures are logged and reported in the outcomes, never raised.
        """
        started = time.monotonic()
        outcomes: list[PoolOutcome] = []
        try:
            outcomes = self._tick()
        finally:
            if not self.dry_run:
                _report(outcomes, time.monotonic() - started, self.active)
        if self.active and not self.dry_run:  # after the pools are written: it never delays a decision
            self.plan_errors.check()
        return outcomes

    def _tick(self) -> list[PoolOutcome]:
        self.ticks += 1
        if self.leader_lock is not None and not self.leader_lock.acquire():
            if self.active:
                log.warning("lost the controller lease (%s); standing by", self.leader_lock.describe())
                self.active = False
                self.release("lost its lease")
            else:
                log.info("standing by: another controller is active (%s)", self.leader_lock.describe())
            return []
        try:
            current = {name: self.client.get_pool(name) for name in self.specs}
        except Exception as err:
            log.error("cannot read the pools (%s); pool sizes left unchanged this tick", err)
            return [
                PoolOutcome(n, t.read(), None, None, False, f"pools: {err}") for n, t in self.trackers.items()
            ]
        if not self.active:
            self._restore(current)
            self.active = True
        capacities = {name: tracker.read() for name, tracker in self.trackers.items()}
        now = self._clock()  # after the sources: reading them can take up to their timeouts
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
        self.stage_fit.observe(now, [*ready, *pending])

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
                        gate=self.gate,
                    )
                )

        return [
            self._write(name, capacity, decisions.get(name), current.get(name), now)
            for name, capacity in capacities.items()
        ]

    def _write(
        self,
        name: str,
        capacity: PoolCapacity,
        decision: PoolDecision | None,
        pool: dict[str, Any] | None,
        now: float,
    ) -> PoolOutcome:
        """Write one pool's size and description (with a renewed claim) when something changed."""
        spec = self.specs[name]
        size = decision.pool_size if decision is not None else capacity.gpus
        now = max(now, self._clock())  # the claim runs from the write, not from the tick's start
        other = self._claimed_by_another_group(name, pool, now)
        if other is not None:
            return PoolOutcome(name, capacity, decision, None, False, other)
        claim = (self.group, self.holder, now + self.config.fail_open_window())
        text = describe(capacity, decision, size, claim, self.config.interval)
        description = self.too_large.annotate(name, text)
        slots = pool.get("slots") if isinstance(pool, dict) else None
        previous = slots if isinstance(slots, int) and not isinstance(slots, bool) else None
        current = pool if isinstance(pool, dict) else None
        interval, wait = self.config.interval, self.config.source_wait()
        if not needs_write(current, size, description, spec.include_deferred, now, interval, wait):
            return PoolOutcome(name, capacity, decision, size, False, previous=previous)
        if self.dry_run:
            return PoolOutcome(name, capacity, decision, size, False, previous=previous, would_write=True)
        if self.leader_lock is not None and not self.leader_lock.may_write():
            log.warning("pool %s: not written, the controller lease ran out during this tick", name)
            return PoolOutcome(name, capacity, decision, size, False, "lease ran out", previous=previous)
        try:
            self.client.set_pool(name, size, description, include_deferred=spec.include_deferred)
        except Exception as err:
            log.error("pool %s: cannot write size %d (%s)", name, size, err)
            metrics.watermark_pool_write(name, ok=False)
            return PoolOutcome(name, capacity, decision, size, False, str(err), previous=previous)
        metrics.watermark_pool_write(name, ok=True)
        if previous == size:
            log.info("pool %s: %d slots, description updated (%s)", name, size, description)
        else:
            log.info("pool %s: %s -> %d slots (%s)", name, previous, size, description)
        return PoolOutcome(name, capacity, decision, size, True, previous=previous)

    def _claimed_by_another_group(self, name: str, pool: Any, now: float) -> str | None:
        """Why not to write ``pool``: another controller group's live claim (it took the pool over while
        this one was frozen, or both started at once); two groups would flip it between their sizes."""
        state = parse_pool_state(pool.get("description")) if isinstance(pool, dict) else None
        if state is None or state.lease in (None, self.group) or not state.claimed(now):
            return None
        message = (
            f"pool {name} is managed by another watermark controller ({state.lease}, controller "
            f"{state.holder}); this one ({self.group}) leaves it alone while that claim holds. Fix: manage "
            "each pool from one controller configuration, or give both the same lease (lease.variable)"
        )
        log.error("%s", message)
        return message

    def run(
        self,
        stop: threading.Event | None = None,
        max_ticks: int | None = None,
        on_tick: Callable[[list[PoolOutcome]], None] | None = None,
    ) -> None:
        """Tick every ``config.interval`` seconds until ``stop`` is set (or ``max_ticks`` ran), then
        stop cleanly (:meth:`shutdown`: the pools go back to their capacity). ``on_tick`` is called
        after each completed tick (the heartbeat)."""
        stop = stop or threading.Event()
        done = 0
        try:
            while not stop.is_set() and (max_ticks is None or done < max_ticks):
                started = time.monotonic()
                try:
                    outcomes = self.tick()
                    if on_tick is not None:
                        on_tick(outcomes)
                except Exception:  # never die: the next tick re-derives everything
                    log.exception("watermark tick failed")
                done += 1
                if max_ticks is not None and done >= max_ticks:
                    return
                stop.wait(max(0.0, self.config.interval - (time.monotonic() - started)))
        finally:
            self.shutdown("stopped")


def _report(outcomes: list[PoolOutcome], seconds: float, active: bool) -> None:
    """Metrics of one tick: its duration and role, and each pool's state (docs/metrics.md)."""
    metrics.watermark_tick(seconds, active)
    for outcome in outcomes:
        decision = outcome.decision
        reserving = decision is not None and decision.reserved_for is not None
        if decision is not None and decision.why is not None:
            metrics.watermark_decision(outcome.pool, decision.why.code)
        metrics.watermark_pool(
            outcome.pool,
            capacity=outcome.capacity.gpus,
            size=outcome.size,
            reserved_slots=decision.reserved_slots if decision is not None and reserving else 0,
            backfill_slots=decision.backfill_slots if decision is not None and reserving else 0,
            source_status=outcome.capacity.status,
            failed_intervals=outcome.capacity.failures,
        )


def build_controller(
    config: WatermarkConfig,
    client: AirflowRestClient,
    holder: str | None = None,
    sources: Mapping[str, CapacitySource] | None = None,
    clock: Callable[[], float] = time.time,
    dry_run: bool = False,
) -> WatermarkController:
    """A controller with the lease the config asks for (host lock file and/or Variable lease); a dry
    run takes no lease (it writes nothing)."""
    holder = holder or default_holder_id()
    file_lock = FileLeaderLock(config.lease.lock_file) if config.lease.lock_file else None
    problem = file_lock.check() if file_lock is not None and not dry_run else None
    if problem:  # before the start-up check creates any pool: nothing would ever size it
        raise ConfigError(
            f"lease.lock_file {config.lease.lock_file}: cannot be opened ({problem}); give a path this "
            "user can create, or lock_file: null (then use lease.variable for one active controller)"
        )
    variable = (
        VariableLeaderLock(client, config.lease.variable, holder, config.lease_ttl(), clock)
        if config.lease.variable
        else None
    )
    leader_lock = CombinedLeaderLock(file_lock, variable) if (file_lock or variable) and not dry_run else None
    return WatermarkController(
        config, client, sources=sources, leader_lock=leader_lock, clock=clock, holder=holder, dry_run=dry_run
    )


def reservation_gate() -> ReservationGate | None:
    """The gate of ``[gpu_dag] objective`` with ``[gpu_dag] key_epoch`` (the priority strategy's keys)."""
    return ReservationGate.for_objective(objective(), key_epoch())
