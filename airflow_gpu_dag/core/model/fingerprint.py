"""A digest of what a plan of a task graph depends on, and of a DAG version's declared graph."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from airflow_gpu_dag.core.model.graph import TaskGraph, task_pool, task_slots

__all__ = ["fingerprint"]

#: The attrs of a fallback rung a plan depends on beyond its duration and pool: which rung is assumed,
#: how long a rung waits before its ladder falls back, the estimate of a rung that counts 0 until
#: :func:`~airflow_gpu_dag.core.model.ladders.fit_ladders` assumes it.
_LADDER_ATTRS = ("fallback", "contingent_duration")


def fingerprint(graph: TaskGraph, capacity: Mapping[str, int], extra: Mapping[str, Any]) -> str:
    """A digest of what a plan of ``graph`` depends on: a new DAG version with the same tasks, edges,
    estimates and pools (and the same capacities and settings ``extra``) reuses the plan. Independent
    of the order tasks and edges were added in (the dag-processor's DAG and the scheduler's serialized
    one list them differently); ``fingerprint(graph, {}, {})`` names a DAG version's declared graph. A
    fallback rung's ladder hints count too: with a pool too small for the assumed rung, the plan runs a
    later rung for its own estimate and the ones before it wait their ``start_within``."""
    digest = hashlib.sha256()
    digest.update(json.dumps([graph.dag_id, sorted(capacity.items()), sorted(extra.items())]).encode())
    for task_id in sorted(graph.nodes):
        node = graph.nodes[task_id]
        digest.update(f"\n{task_id}\t{node.duration!r}\t{task_pool(node)}\t{task_slots(node)}".encode())
        ladder = {key: node.attrs[key] for key in _LADDER_ATTRS if key in node.attrs}
        if ladder:  # a fallback rung: what the plan counts for it when its pool is too small for another
            digest.update(f"\t{json.dumps(ladder, sort_keys=True, default=repr)}".encode())
    for up, down in sorted((up, down) for up, down, _kind in graph.edges()):
        digest.update(f"\n{up}>{down}".encode())
    return digest.hexdigest()[:32]
