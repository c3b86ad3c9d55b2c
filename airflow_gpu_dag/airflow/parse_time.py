"""The figures the cluster policy derives for every task when the dag-processor parses a DAG.

``get_weight`` runs inside the scheduler loop; analysing a DAG there costs O(V + E) (about 0.5 s for
5,000 tasks with a mapped one on a busy core). The provider's cluster policy already builds the DAG's
task graph in the dag-processor to validate it; :func:`annotate` writes, into each task's contract
(:class:`~airflow_gpu_dag.contract.Derived`, kept verbatim in the serialized DAG, ignored by executors),
the task's remaining critical path, the run's slot-seconds per pool, its descendants lead (the most
tasks downstream of any task with at most its remaining time, up to
:data:`~airflow_gpu_dag.core.policy.objective.MAX_DESCENDANTS_COUNTED`:
:func:`~airflow_gpu_dag.core.policy.objective.descendant_lead`) and the digest of the DAG version they
belong to (:func:`version_digest`). Mapped tasks count with their instances as the scheduler will
first weigh them: a literal ``expand()`` argument's length, else ``gpu_hints(map_length=N)``, else one.
The figures are independent of the pool capacities, so changing ``[gpu_dag] pools`` makes no new DAG
versions; the scheduler divides by the capacity it knows.

They are the provider's, never the author's: :func:`strip_derived` removes what a DAG file wrote
there (for every DAG), and :func:`read` gives them back to the weights, which use them only when their
digest is the DAG's (:func:`version_digest` of the serialized DAG) until the DAG object's own analysis,
made off the loop, is ready. Both give the same weights: they come from the same declared graph.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_gpu_dag.airflow.mapped import expand_dag_graph, is_mapped, literal_map_length
from airflow_gpu_dag.contract import (
    DERIVED_KEY,
    HINTS_KEY,
    LEGACY_DERIVED_KEY,
    Derived,
    read_derived,
)
from airflow_gpu_dag.contract import read as read_contract
from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.analysis.weight_rules import descendant_counts
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.mapping import task_of
from airflow_gpu_dag.core.policy.objective import MAX_DESCENDANTS_COUNTED, descendant_lead, slot_seconds

__all__ = ["ParseTimePath", "annotate", "read", "set_executor_config", "strip_derived", "version_digest"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ParseTimePath:
    """One task's parse-time figures: its remaining critical path (seconds), its run's slot-seconds per
    pool, the DAG version they belong to (:func:`version_digest`) and its descendants lead (None:
    figures written without it)."""

    remaining: float
    slot_seconds: Mapping[str, float]
    version: str = ""
    descendants: int | None = None


def _hints(task: Any) -> Mapping[str, Any]:
    config = getattr(task, "executor_config", None)
    hints = config.get(HINTS_KEY) if isinstance(config, Mapping) else None
    return hints if isinstance(hints, Mapping) else {}


def _text(value: object) -> str:
    """``value`` as stable text (dict keys sorted); an int too long to print (over 4,300 digits) by its
    size and low bits."""
    try:
        if value is None or type(value) in (int, float, str, bool):  # most values: repr is 10x faster
            return repr(value)
        return json.dumps(value, sort_keys=True, default=repr)
    except (ValueError, TypeError):  # a huge int, a dict with keys of mixed types
        if isinstance(value, int):
            return f"<int of {value.bit_length()} bits, {value % 2**64}>"
        return f"<{type(value).__name__}>"


def version_digest(dag: Any) -> str:
    """A digest of what the derived figures depend on, read from what survives serialization: task ids,
    edges, pools and pool slots, each task's estimate, GPU count, fallback rung and ``map_length`` as
    its contract holds them, and the literal ``expand()`` length of each mapped task. The same on the
    dag-processor's DAG (after the policy wrote the canonical contract) and the scheduler's serialized
    DAG. One pass of string formatting and one SHA-256: ``get_weight`` computes it once per DAG version
    before it trusts the figures (about 0.02 s of CPU for 5,000 tasks)."""
    tasks = dag.task_dict
    lines = [str(dag.dag_id)]
    append = lines.append
    for task_id in sorted(tasks):
        task = tasks[task_id]
        config = task.executor_config
        hints = config.get(HINTS_KEY) if type(config) is dict else None
        if type(hints) is not dict:
            hints = _hints(task)
        duration, gpus, down = hints.get("duration_s"), hints.get("gpus"), task.downstream_task_ids
        line = (  # task ids are [\w.-]+: a unit separator cannot be in one
            f"{task_id}\t{task.pool}\t{task.pool_slots}\t{chr(31).join(sorted(down)) if down else ''}\t"
            f"{duration if type(duration) is float else _text(duration)}\t"
            f"{gpus if type(gpus) is int and -(2**63) <= gpus < 2**63 else _text(gpus)}"
        )
        if "fallback" in hints or "map_length" in hints:
            line += f"\t{_text(hints.get('fallback'))}\t{_text(hints.get('map_length'))}"
        if _needs_expansion(task):
            line += f"\tmapped {literal_map_length(task)}"
        append(line)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]


def _needs_expansion(task: Any) -> bool:
    try:
        return bool(task.get_needs_expansion())  # SDK and serialized operators: an attribute
    except Exception:  # an unusual operator
        return is_mapped(task)


def set_executor_config(task: Any, config: dict[str, Any]) -> None:
    """Give ``task`` a new ``executor_config`` (a mapped task keeps it in its ``partial_kwargs``)."""
    partial = getattr(task, "partial_kwargs", None)
    if isinstance(partial, dict):
        partial["executor_config"] = config
    else:
        task.executor_config = config


def strip_derived(dag: Any) -> list[str]:
    """Remove the derived figures a DAG file wrote into its tasks' ``executor_config`` (the contract's
    ``derived`` and the version-1 key): only the policy writes them. Returns the tasks stripped."""
    stripped = []
    for task_id, task in dag.task_dict.items():
        config = getattr(task, "executor_config", None)
        if not isinstance(config, Mapping):
            continue
        hints = config.get(HINTS_KEY)
        forged_hints = isinstance(hints, Mapping) and DERIVED_KEY in hints
        if not forged_hints and LEGACY_DERIVED_KEY not in config:
            continue
        clean = {k: v for k, v in config.items() if k != LEGACY_DERIVED_KEY}
        if forged_hints and isinstance(hints, Mapping):
            clean[HINTS_KEY] = {k: v for k, v in hints.items() if k != DERIVED_KEY}
        set_executor_config(task, clean)  # a new dict: tasks may share one default executor_config
        stripped.append(task_id)
    return stripped


def annotate(dag: Any, graph: TaskGraph) -> int:
    """Write every task's contract in its canonical form with its :class:`~airflow_gpu_dag.contract.Derived`
    figures into its ``executor_config`` (the authoring DAG, validated, before it is serialized); ``graph``
    is the DAG's declared task graph. Mapped tasks are expanded as the scheduler expands them before
    any run. Returns the tasks annotated (0, and nothing derived written, for a graph that does not match
    the DAG's tasks or figures that are not finite)."""
    if set(graph.nodes) != set(dag.task_dict):
        return 0
    contracts = {task_id: read_contract(task.executor_config) for task_id, task in dag.task_dict.items()}
    for task_id, task in dag.task_dict.items():  # canonical first: the digest reads what is serialized
        set_executor_config(task, contracts[task_id].declared().to_executor_config(task.executor_config))
    digest = version_digest(dag)
    expanded = expand_dag_graph(dag, graph)
    remaining: dict[str, float] = {}
    descendants: dict[str, int] = {}
    timings = analyze(expanded).timings
    lead = descendant_lead(
        descendant_counts(expanded, MAX_DESCENDANTS_COUNTED), {n: t.remaining for n, t in timings.items()}
    )
    for node_id, timing in timings.items():
        task_id = task_of(expanded, node_id)
        remaining[task_id] = max(timing.remaining, remaining.get(task_id, 0.0))
        descendants[task_id] = max(lead[node_id], descendants.get(task_id, 0))
    seconds = {pool: float(value) for pool, value in sorted(slot_seconds(expanded).items())}
    if set(remaining) != set(dag.task_dict) or not all(
        math.isfinite(v) for v in (*remaining.values(), *seconds.values())
    ):
        return 0
    for task_id, task in dag.task_dict.items():
        derived = Derived(float(remaining[task_id]), seconds, digest, descendants[task_id])
        set_executor_config(
            task, contracts[task_id].with_derived(derived).to_executor_config(task.executor_config)
        )
    return len(dag.task_dict)


def read(task: Any) -> ParseTimePath | None:
    """The parse-time figures of ``task`` (a serialized operator), or None when it has none or they are
    malformed (the weights then analyse the DAG). Whether they belong to the task's DAG is the caller's
    check (:func:`version_digest`). Never raises."""
    derived = read_derived(getattr(task, "executor_config", None))
    if derived is None:
        return None
    return ParseTimePath(derived.remaining_s, dict(derived.slot_seconds), derived.digest, derived.descendants)
