"""The fail-open watchdog: runs inside the Airflow **scheduler** and writes a GPU pool back to its
capacity once the watermark controller that shrank it has stopped renewing its claim.

Why there: a pool only matters while a scheduler runs, and every Airflow deployment runs one (with
database access, so no credentials are needed). The provider's plugin registers this module as a
listener; Airflow calls :func:`on_starting` in every job process and the watchdog thread starts only
in the scheduler's (HA schedulers each run one: the write is a compare-and-swap, so they never
conflict with each other or with a controller that comes back). Cost: every
``[gpu_dag] watermark_watchdog_interval`` seconds (default 10; 0 turns it off) one ``SELECT`` of the
pools whose description holds a controller state, and a write only when a claim has lapsed while the
pool is not at its capacity.

A claim lapses ``fail_open_after`` intervals after the controller's last write (see
:mod:`.state`), so a pool that a killed, frozen or credential-less controller left shrunk is
open again at most ``fail_open_after x interval + watermark_watchdog_interval`` seconds later (plus
the clock skew between the controller's host and the scheduler's).

A pool whose controller created it and died before its first tick has no capacity to open to (its
GPUs were never measured): the watchdog keeps its size, drops the lapsed claim and says so in the
description and the scheduler's log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pluggy import HookimplMarker
from sqlalchemy import select, update

import airflow_gpu_dag.metrics as metrics
from airflow_gpu_dag.pool_claim.state import (
    MAX_CLAIM,
    PoolState,
    iso_time,
    parse_pool_state,
    unsized_description,
    with_state,
)
from airflow_gpu_dag.settings import watermark_watchdog_interval

log = logging.getLogger(__name__)

#: Airflow's listener marker (the same as ``airflow.listeners.hookimpl``, without importing Airflow core:
#: this module is loaded with the plugin in every process, workers included).
hookimpl = HookimplMarker("airflow")

__all__ = [
    "PoolWatchdog",
    "Restore",
    "before_stopping",
    "expired_pools",
    "failed_open_description",
    "on_starting",
    "restore_expired",
]


@dataclass(frozen=True)
class Restore:
    """A pool whose claim lapsed while it was below its capacity (``capacity``: the size written), or
    one whose capacity is unknown (``state.capacity`` None: its size is kept, see :attr:`unsized`)."""

    pool: str
    slots: int
    capacity: int
    state: PoolState
    old_description: str
    new_description: str

    @property
    def unsized(self) -> bool:
        """The controller stopped before it measured the pool: the size stays, the claim goes."""
        return self.state.capacity is None


def failed_open_description(state: PoolState, now: float) -> str:
    """The description the watchdog writes: what happened, and the state without the claim."""
    capacity = state.capacity if state.capacity is not None else 0
    text = (
        f"gpu-dag watermark: pool {capacity} of capacity {capacity} | failed open by the scheduler's "
        f"watchdog at {iso_time(now)}: {_why_lapsed(state, now)}"
    )
    return with_state(text, state.unclaimed())


def _why_lapsed(state: PoolState, now: float) -> str:
    """Why a lapsed claim is no controller's: not renewed in time, or expiring further ahead than any
    controller writes one (an edited or corrupted description)."""
    controller = f"watermark controller of {state.lease or '?'} ({state.holder or '?'})"
    if state.expires is None:
        return f"no {controller} renewed its claim, which lapsed at ?"
    if state.expires > now:
        return (
            f"the claim of the {controller} expires at {iso_time(state.expires)}, further ahead than any "
            f"controller claims a pool ({MAX_CLAIM / 86400:g} days), so it is not a live one"
        )
    return f"no {controller} renewed its claim, which lapsed at {iso_time(state.expires)}"


def expired_pools(pools: Iterable[tuple[Any, Any, Any]], now: float) -> list[Restore]:
    """The pools of ``(name, slots, description)`` whose claim has lapsed at ``now``: those below their
    capacity (written back to it) and those whose capacity is unknown (claim dropped, size kept)."""
    found = []
    for name, slots, description in pools:
        state = parse_pool_state(description)
        if state is None or not state.lapsed(now):
            continue
        if isinstance(slots, bool) or not isinstance(slots, int):
            continue
        if state.capacity is None:
            event = f"found by the scheduler's watchdog at {iso_time(now)}: {_why_lapsed(state, now)}"
            found.append(
                Restore(
                    str(name),
                    slots,
                    slots,
                    state,
                    str(description),
                    unsized_description(name, slots, state, event),
                )
            )
            continue
        if slots >= state.capacity or slots < 0:  # open already (-1: unlimited): never shrunk here
            continue
        found.append(
            Restore(
                str(name), slots, state.capacity, state, str(description), failed_open_description(state, now)
            )
        )
    return found


def restore_expired(now: float | None = None) -> list[Restore]:
    """Write back every lapsed pool (database access: runs in the scheduler). A pool is written only
    if its size and description are still those read (compare-and-swap), so a controller that wrote
    in between wins."""
    # process boundary: the plugin loads this module in every process, workers too; the ORM only here
    from airflow.models.pool import Pool  # process boundary: the scheduler's ORM
    from airflow.utils.session import create_session

    now = time.time() if now is None else now
    done = []
    with create_session() as session:
        rows = session.execute(
            select(Pool.pool, Pool.slots, Pool.description).where(Pool.description.like("%gpu-dag-state%"))
        ).all()
        for restore in expired_pools(((r[0], r[1], r[2]) for r in rows), now):
            result: Any = session.execute(
                update(Pool)
                .where(
                    Pool.pool == restore.pool,
                    Pool.slots == restore.slots,
                    Pool.description == restore.old_description,
                )
                .values(slots=restore.capacity, description=restore.new_description)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:
                continue
            done.append(restore)
            if restore.unsized:
                log.warning(
                    "gpu-dag watchdog: pool %s stays at %d slots: the watermark controller (%s, %s) that "
                    "created it stopped before it measured the pool's GPUs (claim lapsed %.0fs ago); start "
                    "the controller or size the pool by hand",
                    restore.pool,
                    restore.slots,
                    restore.state.lease,
                    restore.state.holder,
                    now - (restore.state.expires or now),
                )
                continue
            log.warning(
                "gpu-dag watchdog: pool %s failed open %d -> %d slots: the watermark controller's claim "
                "(%s, %s) lapsed %.0fs ago",
                restore.pool,
                restore.slots,
                restore.capacity,
                restore.state.lease,
                restore.state.holder,
                now - (restore.state.expires or now),
            )
    for restore in done:
        if not restore.unsized:
            metrics.watermark_fail_open(restore.pool, "watchdog")
    return done


class PoolWatchdog(threading.Thread):
    """Calls :func:`restore_expired` every ``period`` seconds until stopped (daemon thread).

    With ``job``, it first waits until Airflow has set the job's type and runs only in a scheduler.
    """

    def __init__(self, period: float, job: Any = None) -> None:
        super().__init__(name="gpu-dag-pool-watchdog", daemon=True)
        self.period = float(period)
        self.job = job
        self.stopped = threading.Event()
        self.restored: list[Restore] = []

    def stop(self) -> None:
        """Stop after the current check."""
        self.stopped.set()

    def _in_scheduler(self) -> bool:
        deadline = time.monotonic() + 60.0
        while not self.stopped.is_set() and time.monotonic() < deadline:
            job_type = getattr(self.job, "job_type", None)
            if job_type:
                return str(job_type) == "SchedulerJob"
            self.stopped.wait(0.2)
        return False

    def run(self) -> None:
        if self.job is not None and not self._in_scheduler():
            return
        log.info("gpu-dag watchdog: fail-open check of GPU pools every %gs", self.period)
        failures = 0
        while not self.stopped.wait(self.period):
            try:
                self.restored.extend(restore_expired())
                failures = 0
            except Exception:  # never break the scheduler; say so once per outage
                failures += 1
                if failures == 1:
                    log.exception("gpu-dag watchdog: cannot check the GPU pools; retrying")


_running: dict[str, PoolWatchdog] = {}


@hookimpl
def on_starting(component: Any) -> None:
    """Airflow listener: start the watchdog in a scheduler job process (nothing elsewhere)."""
    if type(component).__name__ != "Job" or "watchdog" in _running:
        return
    try:
        period = watermark_watchdog_interval()
        if period <= 0:
            return
        watchdog = PoolWatchdog(period, component)
        _running["watchdog"] = watchdog
        watchdog.start()
    except Exception:
        log.exception("gpu-dag watchdog: not started")


@hookimpl
def before_stopping(component: Any) -> None:
    """Airflow listener: stop the watchdog with its job."""
    watchdog = _running.pop("watchdog", None)
    if watchdog is not None:
        watchdog.stop()
