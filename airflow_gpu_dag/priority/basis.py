"""What one DAG version contributes to its task instances' weights, computed once per DAG object.

A :class:`DagBasis` holds the DAG's task graph (read from the serialized DAG the scheduler runs), a
fingerprint of everything a plan depends on (tasks, edges, estimates, pools, capacities, settings), and
the :class:`~airflow_gpu_dag.core.policy.objective.RunShape` the keys are made of: per task the remaining time
(critical path, or the packing plan's planned end - planned start once a plan is ready) and the run's
GPU work over the pool capacity. The critical-path shape is O(V + E): made
in the background thread when the DAG carries the figures the cluster policy derived
(:mod:`airflow_gpu_dag.airflow.parse_time`), else inline; plans and learned durations are made off the
scheduler loop (:mod:`.background`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.airflow.parse_time import version_digest
from airflow_gpu_dag.core.model.fingerprint import fingerprint
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.policy.objective import RunShape, run_shape
from airflow_gpu_dag.log_once import LogOnce

__all__ = ["DagBasis", "build_basis", "fingerprint", "node_id"]

log = logging.getLogger(__name__)
#: Findings already logged (a basis is rebuilt when capacities change: say each problem once).
_logged = LogOnce(log)


def node_id(basis_nodes: Mapping[str, Any], task_id: str, map_index: int) -> str | None:
    """The graph node of a task instance: ``task[i]`` for an expanded mapped task, else the task; an
    instance beyond the expected count (``task[7]`` of an expected 4) is weighed as the first one."""
    if map_index is not None and map_index >= 0:
        expanded = f"{task_id}[{map_index}]"
        if expanded in basis_nodes:
            return expanded
    if task_id in basis_nodes:
        return task_id
    first = f"{task_id}[0]"
    return first if first in basis_nodes else None


@dataclass
class DagBasis:
    """See the module docstring. ``shape`` is what weights use now: the planned shape once the plan of
    this fingerprint is ready (``planned``), else the critical-path shape."""

    dag_id: str
    graph: TaskGraph
    capacity: dict[str, int]
    fingerprint: str
    critical: RunShape
    shape: RunShape
    planned: bool = False
    version: str = ""  # the DAG version: parse_time.version_digest (learned durations are kept by it)
    learned_at: float | None = None  # when its learned durations were read (None: declared estimates)
    from_history: bool = False  # its graph has durations or map counts learned from past runs
    notes: list[str] = field(default_factory=list)
    #: the planner settings it was made with (part of ``fingerprint``): a basis is reused only for them
    planner: dict[str, Any] = field(default_factory=dict)

    def remaining(self, task_id: str, map_index: int = -1) -> float | None:
        node = node_id(self.shape.remaining, task_id, map_index)
        return None if node is None else self.shape.remaining[node]

    def descendant_lead(self, task_id: str, map_index: int = -1) -> int:
        """The descendants lead of the task instance's node (``fair``'s term,
        :attr:`~airflow_gpu_dag.core.policy.objective.RunShape.descendant_lead`; 0 when it is not in
        the graph)."""
        node = node_id(self.shape.remaining, task_id, map_index)
        return 0 if node is None else self.shape.descendant_lead.get(node, 0)


def build_basis(
    dag: Any,
    capacity: Mapping[str, int],
    settings: Mapping[str, Any],
    graph: TaskGraph | None = None,
    learned_at: float | None = None,
    version: str = "",
) -> DagBasis:
    """The critical-path basis of an Airflow DAG object: of ``graph`` when given (its graph with learned
    durations, :mod:`.learned`, read at ``learned_at``, for DAG version ``version``), else of the
    declared graph, mapped tasks expanded where their number is known without the database (literal
    ``expand()`` arguments, ``map_length``)."""
    if graph is None:
        graph, findings = build_task_graph(dag, expand_mapped=True)
        version = version_digest(dag)  # what the policy's derived figures name the version by
        for finding in findings:  # the cluster policy refuses these; a DAG parsed without it gets here
            if finding.is_error:
                message = "airflow-gpu-dag: %s (weighed with the default estimate or request)"
                _logged.warning(str(finding), message, finding)
    caps = {p: c for p, c in capacity.items() if c > 0}
    shape = run_shape(graph, caps)
    _ = shape.descendant_lead  # (cached: made here, off the scheduler loop, not by the first weight)
    return DagBasis(
        dag_id=graph.dag_id,
        graph=graph,
        capacity=caps,
        fingerprint=fingerprint(graph, caps, settings),
        critical=shape,
        shape=shape,
        version=version,
        learned_at=learned_at,
        planner=dict(settings),
    )
