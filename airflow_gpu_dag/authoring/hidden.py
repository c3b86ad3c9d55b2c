"""Fix hidden dependencies: tasks touching the same dataset path with no edge between them.

    from airflow_gpu_dag.authoring import fix_hidden_dependencies

    with DAG(...) as dag:
        ...  # tasks declaring gpu_hints(inputs=[...], outputs=[...])
    fix_hidden_dependencies(dag, mode="sensor", timeout=timedelta(hours=1))

``find_hidden_dependencies`` (the lint) reports a writer and a reader (or two writers) of
overlapping paths that are not ordered. This opt-in helper repairs each one, visibly:

- ``mode="edge"``: adds ``writer -data-> reader``.
- ``mode="sensor"``: adds a completeness sensor ``wait_<writer>_for_<reader>`` on the writer's path
  before the reader (``sensor -data-> reader``): the reader waits for a *complete* dataset but not for
  the writer task to end (useful when the writer keeps running). Two writers of one path always get
  an edge: a sensor cannot stop a write race.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow_gpu_dag.airflow.graph import build_task_graph
from airflow_gpu_dag.authoring._wiring import labelled
from airflow_gpu_dag.core.validation import HiddenDependency, hidden_dependency_pairs
from airflow_gpu_dag.sensors._common import RESUME_RACE_RETRIES, RESUME_RACE_RETRY_DELAY
from airflow_gpu_dag.sensors.dataset import DatasetCompleteSensor

__all__ = ["HiddenDependencyFix", "fix_hidden_dependencies"]

MODES = ("edge", "sensor")


@dataclass(frozen=True)
class HiddenDependencyFix:
    """One repair: ``how`` is ``"edge"`` or ``"sensor"``; ``added`` is the new task (sensor mode)."""

    writer: str
    other: str
    path: str
    how: str
    added: str | None = None


def _pairs(dag: Any) -> list[HiddenDependency]:
    """The hidden dependencies of ``dag``, in lint order."""
    graph, _ = build_task_graph(dag)
    return hidden_dependency_pairs(graph)


def fix_hidden_dependencies(
    dag: Any,
    mode: str = "edge",
    *,
    completeness: object = "marker",
    timeout: float | timedelta | None = None,
    poke_interval: float = 10.0,
) -> list[HiddenDependencyFix]:
    """Insert the missing edge or a completeness sensor for every hidden dependency; returns the fixes.

    :param mode: ``"edge"`` or ``"sensor"``.
    :param timeout: required in sensor mode (how long a reader may wait for the dataset).
    """
    if mode not in MODES:
        raise ValueError(
            f"DAG {dag.dag_id!r}: fix_hidden_dependencies(mode={mode!r}) is unknown; use 'edge' or 'sensor'."
        )
    fixes: list[HiddenDependencyFix] = []
    for dep in _pairs(dag):
        writer_id, other_id, path, other_writes = dep.writer, dep.other, dep.writer_path, dep.other_writes
        writer = dag.get_task(writer_id)
        other = dag.get_task(other_id)
        if mode == "edge" or other_writes:
            labelled(writer, other, "data")
            fixes.append(HiddenDependencyFix(writer_id, other_id, path, "edge"))
            continue
        sensor = DatasetCompleteSensor(
            task_id=f"wait_{writer_id}_for_{other_id}",
            path=path,
            completeness=completeness,
            timeout=timeout,
            poke_interval=poke_interval,
            dag=dag,
            retries=RESUME_RACE_RETRIES,
            retry_delay=RESUME_RACE_RETRY_DELAY,
        )
        sensor.doc_md = f"Hidden dependency: {other_id} reads {path} written by {writer_id}."
        for up_id in sorted(other.upstream_task_ids):
            dag.get_task(up_id) >> sensor
        labelled(sensor, other, "data")
        fixes.append(HiddenDependencyFix(writer_id, other_id, path, "sensor", sensor.task_id))
    return fixes
