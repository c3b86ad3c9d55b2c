"""The provider's metrics, sent through Airflow's own stats (StatsD, Datadog or OpenTelemetry, as
configured in ``[metrics]``). Every name and tag is listed in ``docs/metrics.md``.

Each function is one call site's worth of metrics and never raises: a metric must never break a
controller tick, a GPU lease or the scheduler's weight rule.

Which backend: the Task SDK's public stats API, ``airflow.sdk.observability.stats`` (what Airflow
names as the replacement of ``airflow.stats`` and its providers send through), configured from
``[metrics]`` once per process before the provider's first metric (:func:`configure`): the settings
Airflow's own backends read, so the metrics go where Airflow's go, in workers, the scheduler, the
api-server, the triggerer and the controller alike. No private Airflow module is imported
(tests/repo/test_public_airflow_api.py). A process that has not imported Airflow at all (a script
using :mod:`airflow_gpu_dag.gpu.lease` directly) sends nothing: a metric never loads Airflow.

Names: ``gpu_dag.<component>.<metric>`` with tags (OpenTelemetry, Datadog, StatsD with
``statsd_influxdb_enabled``). Plain StatsD has no tags, so per-pool and per-strategy metrics are
*also* sent under a name that ends with the tag value (``gpu_dag.watermark.pool_size.gpu_a100``),
as Airflow does for its own metrics, unless ``[metrics] legacy_names_on`` is false.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, ParamSpec

P = ParamSpec("P")
log = logging.getLogger(__name__)

__all__ = [
    "LEASE_GPU_SECONDS",
    "LEASE_RECLAIMS",
    "LEASE_WAIT",
    "METRICS",
    "PLAN_END_ERROR_MEDIAN",
    "PLAN_END_ERROR_TAIL",
    "PLAN_START_ERROR_MEDIAN",
    "PLAN_START_ERROR_TAIL",
    "PRIORITY_CACHE_HITS",
    "PRIORITY_CACHE_MISSES",
    "PRIORITY_PLAN_TIME",
    "SOURCE_STATUS_CODES",
    "WATERMARK_BACKFILL_SLOTS",
    "WATERMARK_CAPACITY",
    "WATERMARK_DECISIONS",
    "WATERMARK_FAIL_OPEN",
    "WATERMARK_POOL_SIZE",
    "WATERMARK_POOL_WRITES",
    "WATERMARK_POOL_WRITE_ERRORS",
    "WATERMARK_RESERVED_SLOTS",
    "WATERMARK_SOURCE_FAILED_INTERVALS",
    "WATERMARK_SOURCE_STATUS",
    "WATERMARK_TICKS",
    "WATERMARK_TICK_DURATION",
    "configure",
    "lease_used",
    "lease_waited",
    "plan_error",
    "priority_cache",
    "priority_plan_time",
    "watermark_decision",
    "watermark_fail_open",
    "watermark_pool",
    "watermark_pool_write",
    "watermark_tick",
]

WATERMARK_CAPACITY = "gpu_dag.watermark.capacity"
WATERMARK_POOL_SIZE = "gpu_dag.watermark.pool_size"
WATERMARK_RESERVED_SLOTS = "gpu_dag.watermark.reserved_slots"
WATERMARK_BACKFILL_SLOTS = "gpu_dag.watermark.backfill_slots"
WATERMARK_SOURCE_STATUS = "gpu_dag.watermark.source_status"
WATERMARK_SOURCE_FAILED_INTERVALS = "gpu_dag.watermark.source_failed_intervals"
WATERMARK_POOL_WRITES = "gpu_dag.watermark.pool_writes"
WATERMARK_POOL_WRITE_ERRORS = "gpu_dag.watermark.pool_write_errors"
WATERMARK_TICK_DURATION = "gpu_dag.watermark.tick_duration"
WATERMARK_TICKS = "gpu_dag.watermark.ticks"
WATERMARK_FAIL_OPEN = "gpu_dag.watermark.fail_open"
WATERMARK_DECISIONS = "gpu_dag.watermark.decisions"
LEASE_WAIT = "gpu_dag.lease.wait_time"
LEASE_RECLAIMS = "gpu_dag.lease.reclaims"
LEASE_GPU_SECONDS = "gpu_dag.lease.gpu_seconds"
PRIORITY_PLAN_TIME = "gpu_dag.priority.plan_time"
PLAN_START_ERROR_MEDIAN = "gpu_dag.plan.start_error_median"
PLAN_START_ERROR_TAIL = "gpu_dag.plan.start_error_tail"
PLAN_END_ERROR_MEDIAN = "gpu_dag.plan.end_error_median"
PLAN_END_ERROR_TAIL = "gpu_dag.plan.end_error_tail"
PRIORITY_CACHE_HITS = "gpu_dag.priority.cache_hits"
PRIORITY_CACHE_MISSES = "gpu_dag.priority.cache_misses"

#: name -> (kind, tags, meaning); docs/metrics.md is checked against it by tests/unit/test_metrics.py.
METRICS: Mapping[str, tuple[str, tuple[str, ...], str]] = {
    WATERMARK_CAPACITY: ("gauge", ("pool",), "the pool's watermark C after the fault ladder"),
    WATERMARK_POOL_SIZE: ("gauge", ("pool",), "the pool size decided this tick"),
    WATERMARK_RESERVED_SLOTS: ("gauge", ("pool",), "slots held for the reserved task (0: none)"),
    WATERMARK_BACKFILL_SLOTS: ("gauge", ("pool",), "slots opened beyond C - w for safe backfill"),
    WATERMARK_SOURCE_STATUS: ("gauge", ("pool", "status"), "0 ok, 1 stale (last good kept), 2 floor"),
    WATERMARK_SOURCE_FAILED_INTERVALS: ("gauge", ("pool",), "consecutive failed source reads"),
    WATERMARK_POOL_WRITES: ("counter", ("pool",), "pool size/description writes"),
    WATERMARK_POOL_WRITE_ERRORS: ("counter", ("pool",), "pool writes that failed"),
    WATERMARK_TICK_DURATION: ("timer", ("role",), "one controller tick, ms"),
    WATERMARK_TICKS: ("counter", ("role",), "ticks (role active or standby)"),
    WATERMARK_FAIL_OPEN: ("counter", ("pool", "by"), "pools written back to capacity (controller/watchdog)"),
    WATERMARK_DECISIONS: ("counter", ("pool", "code"), "pool decisions by reason code (per tick)"),
    LEASE_WAIT: ("timer", ("pool",), "from asking for GPUs on a host to holding them, ms"),
    LEASE_RECLAIMS: ("counter", ("pool",), "stale leases reclaimed (holder dead or silent)"),
    LEASE_GPU_SECONDS: ("counter", ("pool", "outcome"), "GPU-seconds of ended leases"),
    PRIORITY_PLAN_TIME: ("timer", ("strategy",), "planning one DAG version for the weight rule, ms"),
    PRIORITY_CACHE_HITS: ("counter", ("strategy",), "weights served from a cached plan"),
    PRIORITY_CACHE_MISSES: ("counter", ("strategy",), "weights that needed a new plan"),
    PLAN_START_ERROR_MEDIAN: ("gauge", ("dag_id",), "a finished run's median |actual - planned start|, s"),
    PLAN_START_ERROR_TAIL: ("gauge", ("dag_id",), "a finished run's p90 |actual - planned start|, s"),
    PLAN_END_ERROR_MEDIAN: ("gauge", ("dag_id",), "a finished run's median |actual - planned end|, s"),
    PLAN_END_ERROR_TAIL: ("gauge", ("dag_id",), "a finished run's p90 |actual - planned end|, s"),
}

#: ``source_status`` gauge values.
SOURCE_STATUS_CODES: Mapping[str, int] = {"ok": 0, "stale": 1, "floor": 2}

_INVALID = re.compile(r"[^a-zA-Z0-9_.-]")
_state: dict[str, Any] = {"pid": None, "stats": None, "legacy": True}


def _sdk_stats() -> ModuleType:
    # process boundary: importing this module never loads Airflow (a script using gpu.lease; see above)
    from airflow.sdk.observability import stats

    return stats


def configure(force: bool = False) -> None:
    """Configure the Task SDK's public stats from ``[metrics]`` for this process, once.

    Called before the first metric of a process (:func:`_stats`) and by ``airflow gpu-dag watermark``
    at start; ``force`` re-reads ``[metrics]`` (tests). The public API has no way to ask whether Airflow
    configured it already in this process, so it is configured from the same settings Airflow reads.
    """
    if not force and _state["pid"] == os.getpid():
        return
    try:
        # process boundary: only an Airflow process configures its stats (see _sdk_stats)
        from airflow.sdk.configuration import conf
        from airflow.sdk.observability.metrics.stats_utils import get_stats_factory  # process boundary

        stats = _sdk_stats()
        legacy = conf.getboolean("metrics", "legacy_names_on", fallback=True)
        stats.initialize(factory=get_stats_factory(), export_legacy_names=legacy)
        _state.update(pid=os.getpid(), stats=stats, legacy=legacy)
    except Exception:  # metrics are best effort
        log.warning("airflow-gpu-dag: metrics disabled (cannot configure Airflow's stats)", exc_info=True)
        _state.update(pid=os.getpid(), stats=None)


def _stats() -> Any:
    """The stats module to send through in this process (None: metrics off)."""
    if _state["pid"] == os.getpid():
        return _state["stats"]
    if "airflow" not in sys.modules:  # not an Airflow process (a script, a test): do not load Airflow
        return None
    configure()
    return _state["stats"]


def _suffix(value: object) -> str:
    return _INVALID.sub("_", str(value))[:100] or "_"


def _never_raises(function: Callable[P, None]) -> Callable[P, None]:
    """``function``, its exceptions logged at debug and swallowed: what it is given is computed on before
    :func:`_send` (a None duration, a NaN time) and must not break the caller either."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            function(*args, **kwargs)
        except Exception:
            log.debug("airflow-gpu-dag: metric %s not sent", function.__name__, exc_info=True)

    return wrapper


def _send(kind: str, name: str, value: float, tags: Mapping[str, Any], per: str | None = None) -> None:
    """Send one metric (and its tag-in-name twin for plain StatsD); never raises. A value that is not a
    finite number is not sent: one NaN or infinite increment would spoil a counter for good."""
    try:
        if not math.isfinite(value):
            log.debug("airflow-gpu-dag: metric %s not sent: %r is not a finite number", name, value)
            return
        stats = _stats()
        if stats is None:
            return
        clean = {k: str(v) for k, v in tags.items()}
        names = [(name, clean)]
        if per is not None and _state["legacy"]:
            names.append((f"{name}.{_suffix(tags[per])}", {k: v for k, v in clean.items() if k != per}))
        for stat, stat_tags in names:
            if kind == "gauge":
                stats.gauge(stat, value, tags=stat_tags)
            elif kind == "timer":
                stats.timing(stat, value, tags=stat_tags)
            else:
                stats.incr(stat, value, tags=stat_tags)
    except Exception:
        log.debug("airflow-gpu-dag: metric %s not sent", name, exc_info=True)


# -- watermark controller ------------------------------------------------------------------------------
@_never_raises
def watermark_pool(
    pool: str,
    *,
    capacity: int,
    size: int | None,
    reserved_slots: int,
    backfill_slots: int,
    source_status: str,
    failed_intervals: int,
) -> None:
    """One pool's state after a tick (gauges tagged ``pool``); ``size`` None = left unchanged."""
    tags = {"pool": pool}
    _send("gauge", WATERMARK_CAPACITY, capacity, tags, "pool")
    if size is not None:
        _send("gauge", WATERMARK_POOL_SIZE, size, tags, "pool")
    _send("gauge", WATERMARK_RESERVED_SLOTS, reserved_slots, tags, "pool")
    _send("gauge", WATERMARK_BACKFILL_SLOTS, backfill_slots, tags, "pool")
    code = SOURCE_STATUS_CODES.get(source_status, 2)
    _send("gauge", WATERMARK_SOURCE_STATUS, code, {**tags, "status": source_status}, "pool")
    _send("gauge", WATERMARK_SOURCE_FAILED_INTERVALS, failed_intervals, tags, "pool")


@_never_raises
def watermark_pool_write(pool: str, ok: bool) -> None:
    """A pool write (size/description) was attempted: counted in ``pool_writes`` or ``pool_write_errors``."""
    _send("counter", WATERMARK_POOL_WRITES if ok else WATERMARK_POOL_WRITE_ERRORS, 1, {"pool": pool}, "pool")


@_never_raises
def watermark_tick(seconds: float, active: bool) -> None:
    """A tick ended after ``seconds`` (timer in ms, and the ``ticks`` counter), tagged ``role``."""
    role = {"role": "active" if active else "standby"}
    _send("timer", WATERMARK_TICK_DURATION, seconds * 1000.0, role, "role")
    _send("counter", WATERMARK_TICKS, 1, role, "role")


@_never_raises
def watermark_decision(pool: str, code: str) -> None:
    """One tick's decision for ``pool`` had reason ``code`` (``core.policy.reasons.CODES``): counted per
    pool and code, so a dashboard shows how often each pool reserves, starves, or is idle."""
    _send("counter", WATERMARK_DECISIONS, 1, {"pool": pool, "code": code}, "pool")


@_never_raises
def watermark_fail_open(pool: str, by: str) -> None:
    """A pool was written back to its capacity by ``by`` (``controller`` on a clean stop, ``watchdog``)."""
    _send("counter", WATERMARK_FAIL_OPEN, 1, {"pool": pool, "by": by}, "pool")


# -- GPU leases ---------------------------------------------------------------------------------------
@_never_raises
def lease_waited(seconds: float, pool: str | None) -> None:
    """A lease was granted ``seconds`` after it was asked for (timer, ms)."""
    _send("timer", LEASE_WAIT, max(0.0, seconds) * 1000.0, {"pool": pool or "none"}, "pool")


@_never_raises
def lease_used(devices: int, start: float, end: float, outcome: str, pool: str | None) -> None:
    """A lease ended (released or reclaimed): its GPU-seconds; a reclaim is also counted."""
    tags = {"pool": pool or "none", "outcome": outcome}
    gpu_seconds = max(0.0, float(end) - float(start)) * max(0, int(devices))
    _send("counter", LEASE_GPU_SECONDS, round(gpu_seconds, 3), tags, "pool")
    if outcome == "reclaimed":
        _send("counter", LEASE_RECLAIMS, 1, {"pool": pool or "none"}, "pool")


# -- plan against what happened ----------------------------------------------------------------------
@_never_raises
def plan_error(dag_id: str, start: Mapping[str, float | None], end: Mapping[str, float | None]) -> None:
    """How far a finished run of ``dag_id`` was from its plan: the median and p90 of the absolute start and
    end errors over its GPU tasks, in seconds (gauges tagged ``dag_id``; a None value is not sent). Sent
    by the watermark controller once per run that finishes in its pools
    (:mod:`airflow_gpu_dag.watermark.plan_quality`) and by ``airflow gpu-dag explain``."""
    for name, value in (
        (PLAN_START_ERROR_MEDIAN, start.get("median")),
        (PLAN_START_ERROR_TAIL, start.get("p90")),
        (PLAN_END_ERROR_MEDIAN, end.get("median")),
        (PLAN_END_ERROR_TAIL, end.get("p90")),
    ):
        if value is not None:
            _send("gauge", name, float(value), {"dag_id": dag_id}, "dag_id")


# -- priority strategy --------------------------------------------------------------------------------
@_never_raises
def priority_plan_time(seconds: float, strategy: str) -> None:
    """Planning one DAG version took ``seconds`` (timer, ms), tagged ``strategy`` (e.g. ``packing``)."""
    _send("timer", PRIORITY_PLAN_TIME, seconds * 1000.0, {"strategy": strategy}, "strategy")


#: ``get_weight`` runs once per task instance inside the scheduler loop: its cache counters are added up
#: in memory and sent at most this often (seconds), not as one StatsD packet per call.
PRIORITY_CACHE_FLUSH_S = 10.0
_cache_counts: dict[tuple[str, str], int] = {}
_cache_lock = threading.Lock()
_cache_flushed = [time.monotonic()]


@_never_raises
def priority_cache(hit: bool, strategy: str) -> None:
    """A weight was served from a cached plan (``hit``) or needed a new one. Counted in memory; a miss
    (rare: a new DAG version) sends the counts at once, hits at most every :data:`PRIORITY_CACHE_FLUSH_S`."""
    name = PRIORITY_CACHE_HITS if hit else PRIORITY_CACHE_MISSES
    now = time.monotonic()
    with _cache_lock:
        _cache_counts[(name, strategy)] = _cache_counts.get((name, strategy), 0) + 1
        due = not hit or now - _cache_flushed[0] >= PRIORITY_CACHE_FLUSH_S
    if due:
        flush_priority_cache()


def flush_priority_cache() -> None:
    """Send the cache counts added up since the last flush (also at exit)."""
    with _cache_lock:
        counts = dict(_cache_counts)
        _cache_counts.clear()
        _cache_flushed[0] = time.monotonic()
    for (name, strategy), count in sorted(counts.items()):
        _send("counter", name, count, {"strategy": strategy}, "strategy")


atexit.register(flush_priority_cache)
