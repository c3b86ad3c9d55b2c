"""The critical path of a DAG, computed when the dag-processor parses it, carried to the scheduler.

The first ``get_weight`` call for a DAG object would otherwise analyse the whole DAG inside the
scheduler loop (O(V + E): about 50 ms for 2,000 tasks on an idle core, several times that on a busy
one). The provider's cluster policy already builds the DAG's task graph in the dag-processor to
validate it; :func:`annotate` adds, under :data:`PARSE_TIME_KEY` of each task's ``executor_config``
(kept verbatim in the serialized DAG, ignored by executors), the task's remaining critical path and
the run's slot-seconds per pool. Both are independent of the pool capacities, so changing
``[gpu_dag] pools`` does not make new DAG versions; the scheduler divides by the capacity it knows.

:func:`read` gives them back to the weights, which use them until the DAG object's own analysis,
made off the loop, is ready (same values: both come from the declared graph). DAGs with mapped tasks
are not annotated (their instances are weighed from the analysis), nor is anything whose value would
not be a finite number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.model.fingerprint import fingerprint
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.policy.objective import slot_seconds

__all__ = ["PARSE_TIME_KEY", "ParseTimePath", "annotate", "read"]

#: The ``executor_config`` key of the parse-time figures.
PARSE_TIME_KEY = "gpu_dag_critical_path"


@dataclass(frozen=True)
class ParseTimePath:
    """One task's parse-time figures: its remaining critical path (seconds), its run's slot-seconds per
    pool, and the DAG version they belong to (the digest of its declared graph, as the weights name it)."""

    remaining: float
    slot_seconds: Mapping[str, float]
    version: str = ""


def annotate(dag: Any, graph: TaskGraph) -> int:
    """Write every task's :class:`ParseTimePath` into its ``executor_config`` (the authoring DAG, before
    it is serialized); ``graph`` is the DAG's declared task graph. Returns the tasks annotated (0 for a
    DAG with mapped tasks or a graph that does not match the DAG's tasks)."""
    from airflow_gpu_dag.airflow.mapped import mapped_task_ids

    if mapped_task_ids(dag) or set(graph.nodes) != set(dag.task_dict):
        return 0
    remaining = {task_id: timing.remaining for task_id, timing in analyze(graph).timings.items()}
    seconds = {pool: float(value) for pool, value in sorted(slot_seconds(graph).items())}
    version = fingerprint(graph, {}, {})
    if not all(math.isfinite(v) for v in (*remaining.values(), *seconds.values())):
        return 0
    for task_id, task in dag.task_dict.items():
        config = task.executor_config if isinstance(task.executor_config, dict) else {}
        # a new dict: tasks may share one default executor_config object
        task.executor_config = {
            **config,
            PARSE_TIME_KEY: {
                "remaining_s": float(remaining[task_id]),
                "slot_seconds": dict(seconds),
                "version": version,
            },
        }
    return len(dag.task_dict)


def read(task: Any) -> ParseTimePath | None:
    """The parse-time figures of ``task`` (a serialized operator), or None when it has none or they are
    malformed (the weights then analyse the DAG). Never raises."""
    try:
        config = getattr(task, "executor_config", None)
        entry = config.get(PARSE_TIME_KEY) if isinstance(config, dict) else None
        if not isinstance(entry, dict):
            return None
        remaining = entry.get("remaining_s")
        seconds = entry.get("slot_seconds")
        if not _number(remaining) or not isinstance(seconds, dict):
            return None
        clean: dict[str, float] = {}
        for pool, value in seconds.items():
            if not isinstance(pool, str) or not _number(value):
                return None
            clean[pool] = float(value)
        if not all(math.isfinite(v) for v in (float(remaining), *clean.values())):
            return None
        version = entry.get("version", "")
        return ParseTimePath(float(remaining), clean, version if isinstance(version, str) else "")
    except Exception:
        return None


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
