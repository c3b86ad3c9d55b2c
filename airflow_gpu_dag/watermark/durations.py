"""Learned durations and map counts for the watermark controller, over REST (it has no database).

The controller needs, for every task instance it sees: how long a waiting task will run, when a
running one will end given how long it has already run, and how many instances a mapped task about to
be expanded will have. :class:`ControllerHistory` answers from the task's recent successful tries
(``GET /dags/{dag}/dagRuns/~/taskInstances?task_id=...&state=success&order_by=-end_date``), estimated
by :func:`airflow_gpu_dag.core.analysis.estimates.estimate_duration` with the task instance's declared
``duration_s`` hint as the prior (``[gpu_dag] default_duration`` when it declares none). Each task's
history is read at most once per ``refresh`` seconds (10 minutes by default); a failed read falls
back to the declared duration for that period and is logged once per message, never per task.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from airflow_gpu_dag.core.analysis.estimates import (
    DurationEstimate,
    EstimateSettings,
    RunSample,
    estimate_duration,
)
from airflow_gpu_dag.core.model.mapping import typical_map_count
from airflow_gpu_dag.core.policy.admission import PendingTask
from airflow_gpu_dag.executor_config import duration_hint, map_length_hint
from airflow_gpu_dag.hooks.rest_client import parse_time
from airflow_gpu_dag.log_once import LogOnce
from airflow_gpu_dag.settings import estimate_settings
from airflow_gpu_dag.watermark.task_instance_fields import as_int

#: The largest map index read from a task instance (Airflow's column is an int); a malformed one is -1.
MAX_MAP_INDEX = 2**31 - 1

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_REFRESH", "ControllerHistory"]

#: Seconds a task's learned duration (and a mapped task's count) is kept before it is read again.
DEFAULT_REFRESH = 600.0
_MAP_COUNT_RUNS = 5


class ControllerHistory:
    """Durations learned from past runs and mapped-task counts, for the controller, cached.

    :param client: the controller's REST client (``task_history``, ``dag_tasks``, ``map_counts``).
    :param default_duration: seconds assumed for a task that declares no estimate.
    :param settings: how to learn (default: ``[gpu_dag] learned_*``).
    """

    def __init__(
        self,
        client: Any,
        default_duration: float,
        settings: EstimateSettings | None = None,
        refresh: float = DEFAULT_REFRESH,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if settings is None:
            settings = estimate_settings()
        self.client = client
        self.default_duration = float(default_duration)
        self.settings = settings
        self.refresh = refresh
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: dict[tuple[str, str], tuple[float, list[RunSample]]] = {}
        self._mapped: dict[str, tuple[float, set[str]]] = {}
        self._counts: dict[tuple[str, str], tuple[float, int | None]] = {}
        self._warned = LogOnce(log)

    # -- reading, cached ----------------------------------------------------------------------------
    def _once(self, message: str) -> None:
        self._warned.warning(message, "%s", message)

    def _fresh(self, cache: Mapping[Any, tuple[float, Any]], key: Any) -> bool:
        entry = cache.get(key)
        return entry is not None and self._clock() - entry[0] < self.refresh

    def _history(self, dag_id: str, task_id: str) -> list[RunSample]:
        key = (dag_id, task_id)
        with self._lock:
            if self._fresh(self._samples, key):
                return self._samples[key][1]
        try:
            rows = self.client.task_history(dag_id, task_id, limit=2 * self.settings.window + 2)
            samples = [
                RunSample(
                    float(row["duration"]) if row.get("duration") is not None else None,
                    str(row.get("state")),
                    parse_time(row.get("start_date")),
                    parse_time(row.get("end_date")),
                    as_int(row.get("map_index"), -1, -1, MAX_MAP_INDEX),
                    row.get("dag_run_id"),
                )
                for row in rows
            ]
        except Exception as err:
            self._once(  # once per message, not per task
                f"watermark: cannot read task run history over REST ({type(err).__name__}: {err}); "
                "using the declared durations until it can be read"
            )
            samples = []
        with self._lock:
            self._samples[key] = (self._clock(), samples)
        return samples

    def estimate(self, ti: Mapping[str, Any]) -> DurationEstimate:
        """The estimate of a task instance (REST dict): its history, its ``duration_s`` hint as prior."""
        declared = duration_hint(ti.get("executor_config"))
        task_id = str(ti.get("task_id"))
        if not self.settings.enabled:
            return DurationEstimate(
                task_id, declared, declared if declared is not None else self.default_duration
            )
        samples = self._history(str(ti.get("dag_id")), task_id)
        return estimate_duration(task_id, samples, declared, self.default_duration, self.settings)

    # -- what the controller asks -------------------------------------------------------------------
    def duration(self, ti: Mapping[str, Any]) -> float:
        """Seconds a task instance that has not started will run."""
        return self.estimate(ti).duration

    def expected_end(self, ti: Mapping[str, Any], now: float) -> float:
        """When a running (or queued) task instance is expected to end: ``now`` plus what it still
        needs given how long it has run (the start date; not started yet: its whole duration)."""
        estimate = self.estimate(ti)
        start = parse_time(ti.get("start_date"))
        if start is None:
            return now + estimate.duration
        return now + estimate.expected_remaining(now - start)

    def _mapped_tasks(self, dag_id: str) -> set[str]:
        with self._lock:
            if self._fresh(self._mapped, dag_id):
                return self._mapped[dag_id][1]
        try:
            mapped = {str(t["task_id"]) for t in self.client.dag_tasks(dag_id) if t.get("is_mapped")}
        except Exception as err:
            self._once(f"watermark: cannot read the tasks of DAG {dag_id} ({type(err).__name__}: {err})")
            mapped = set()
        with self._lock:
            self._mapped[dag_id] = (self._clock(), mapped)
        return mapped

    def map_count(self, ti: Mapping[str, Any]) -> int | None:
        """Instances a not yet expanded mapped task instance (``map_index`` -1) will have: the median
        of its latest runs' counts, else its ``map_length`` hint; None when unknown or not mapped."""
        dag_id, task_id = str(ti.get("dag_id")), str(ti.get("task_id"))
        if as_int(ti.get("map_index"), -1, -1, MAX_MAP_INDEX) != -1 or task_id not in self._mapped_tasks(
            dag_id
        ):
            return None
        key = (dag_id, task_id)
        with self._lock:
            if self._fresh(self._counts, key):
                return self._counts[key][1]
        count: int | None = None
        try:
            count = typical_map_count(list(self.client.map_counts(dag_id, task_id, _MAP_COUNT_RUNS)))
        except Exception as err:
            self._once(f"watermark: cannot read mapped task counts over REST ({type(err).__name__}: {err})")
        if count is None:
            count = map_length_hint(ti.get("executor_config"))
        with self._lock:
            self._counts[key] = (self._clock(), count)
        return count

    def instances(self, ti: Mapping[str, Any], pending: PendingTask) -> list[PendingTask]:
        """``pending`` as the N task instances a not yet expanded mapped task will become (keys
        ``dag/run/task/i``), so the lookahead sees N tasks competing for the pool; else ``[pending]``."""
        count = self.map_count(ti)
        if count is None or count < 1:
            return [pending]
        base = pending.key.rsplit("/", 1)[0]
        return [
            replace(pending, key=f"{base}/{index}", order=(*pending.order[:1], index))
            for index in range(count)
        ]
