"""What one DAG version contributes to its weights (:mod:`airflow_gpu_dag.priority.basis`), called
directly: the graph, capacities, fingerprint and critical-path shape of a DAG object, and the node a
task instance is weighed by."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task

from airflow_gpu_dag import gpu_hints
from airflow_gpu_dag.airflow.parse_time import version_digest
from airflow_gpu_dag.core.policy.objective import run_shape
from airflow_gpu_dag.log_once import LogOnce
from airflow_gpu_dag.priority import basis as module
from airflow_gpu_dag.priority.basis import build_basis, fingerprint, node_id
from tests.unit.airflow_dags import serialized
from tests.unit.graphs import gpu_graph

SETTINGS = {"rule": "packing", "policy": "reservation"}


def _sweep() -> DAG:
    """``prep`` (10 min, 2 GPUs) >> ``trial`` mapped over 2 literals (1 h, 1 GPU each) >> ``report``
    (5 min, no GPU); the GPU tasks in pool ``gpu``."""
    with DAG("sweep", schedule=None) as dag:
        prep = BashOperator(
            task_id="prep",
            bash_command="true",
            pool="gpu",
            pool_slots=2,
            executor_config=gpu_hints(duration="10m", gpus=2),
        )

        @task(executor_config=gpu_hints(duration="1h", gpus=1), pool="gpu")
        def trial(lr: float) -> float:
            return lr

        report = BashOperator(task_id="report", bash_command="true", executor_config=gpu_hints(duration="5m"))
        prep >> trial.expand(lr=[0.1, 0.01]) >> report
    return dag


# -- node_id ---------------------------------------------------------------------------------------
def test_node_id_prefers_the_expanded_instance_and_ignores_a_map_index_of_a_plain_task() -> None:
    """(test_learned.py covers an instance beyond the expected count.) A plain task asked for with a
    map index (an unexpanded mapped task) is the task itself; a map index of None is no index."""
    nodes = {"sweep": 1, "sweep[0]": 1, "sweep[2]": 1, "select": 1}
    assert node_id(nodes, "sweep", 2) == "sweep[2]"
    assert node_id(nodes, "sweep", 1) == "sweep"  # no node sweep[1]: the task's own node comes first
    assert node_id(nodes, "select", 3) == "select"
    assert node_id(nodes, "select", None) == "select"  # type: ignore[arg-type]
    assert node_id(nodes, "other", -1) is None


# -- build_basis -----------------------------------------------------------------------------------
@pytest.mark.parametrize("reader", ["dag", "serialized"], ids=["authoring", "scheduler"])
def test_the_basis_of_a_dag_is_its_critical_path_with_literal_mapped_tasks_expanded(reader: str) -> None:
    """From the DAG object alone: one node per literal ``expand()`` argument, remaining critical path
    per node, work = GPU slot-seconds over the pool capacity (pools of capacity 0 or less dropped), the
    fingerprint of graph, capacities and settings, the version digest; not yet planned or learned."""
    dag = _sweep() if reader == "dag" else serialized(_sweep())
    basis = build_basis(dag, {"gpu": 4, "cpu": 0, "old": -1}, SETTINGS)
    assert basis.dag_id == "sweep" and basis.capacity == {"gpu": 4}
    assert set(basis.graph.nodes) == {"prep", "trial[0]", "trial[1]", "report"}
    assert basis.shape.remaining == {"prep": 4500.0, "trial[0]": 3900.0, "trial[1]": 3900.0, "report": 300.0}
    assert basis.shape.work == (600 * 2 + 2 * 3600 * 1) / 4
    assert basis.shape is basis.critical and not basis.planned
    assert basis.fingerprint == fingerprint(basis.graph, {"gpu": 4}, SETTINGS)
    assert basis.version == version_digest(dag) and basis.version
    assert basis.learned_at is None and not basis.from_history and basis.notes == []
    assert "descendant_lead" in vars(basis.shape)  # made now, not by the first weight


def test_the_fingerprint_changes_with_capacities_and_settings_only() -> None:
    """A plan is reused only where nothing it depends on changed: a pool of capacity 0 changes nothing
    (it is dropped), another capacity or planner setting does."""
    same = build_basis(_sweep(), {"gpu": 4}, SETTINGS).fingerprint
    assert build_basis(_sweep(), {"gpu": 4, "cpu": 0}, SETTINGS).fingerprint == same
    assert build_basis(_sweep(), {"gpu": 8}, SETTINGS).fingerprint != same
    assert build_basis(_sweep(), {"gpu": 4}, {**SETTINGS, "policy": "easy"}).fingerprint != same


def test_a_given_graph_is_used_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """The learned-durations path: the graph, when it was read and its DAG version are taken as given;
    the DAG object is not read again."""

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("read the DAG object though a graph was given")

    monkeypatch.setattr(module, "build_task_graph", never)
    monkeypatch.setattr(module, "version_digest", never)
    graph = gpu_graph({"load": (60.0, 0), "train": (1200.0, 4)}, [("load", "train")], dag_id="learned")
    basis = build_basis(object(), {"gpu": 8}, SETTINGS, graph=graph, learned_at=123.5, version="v7")
    assert basis.graph is graph and basis.dag_id == "learned"
    assert basis.version == "v7" and basis.learned_at == 123.5
    assert basis.shape.remaining == {"load": 1260.0, "train": 1200.0}
    assert basis.shape.work == 1200 * 4 / 8
    assert basis.shape.descendant_lead == {"load": 1, "train": 0}


def test_a_malformed_hint_is_weighed_by_default_and_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A DAG parsed without the cluster policy may carry an error finding: the basis is still made (the
    task weighed with the default estimate), the finding is a warning the first time, debug after (a
    basis is rebuilt whenever capacities change)."""
    monkeypatch.setattr(module, "_logged", LogOnce(module.log))
    with DAG("bad", schedule=None) as dag:
        BashOperator(task_id="late", bash_command="true", executor_config={"gpu_dag": {"duration_s": "soon"}})
    with caplog.at_level(logging.DEBUG, logger=module.log.name):
        first = build_basis(dag, {}, SETTINGS)
        build_basis(dag, {"gpu": 2}, SETTINGS)
    assert first.graph.nodes["late"].attrs.get("duration_default") == "deployment"
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == module.log.name]
    assert [level for level, _ in said] == [logging.WARNING, logging.DEBUG]
    assert all("[bad-estimate] DAG 'bad', task 'late'" in message for _, message in said)
    assert said[0][1].endswith("(weighed with the default estimate or request)")


# -- DagBasis --------------------------------------------------------------------------------------
def test_a_basis_answers_for_task_instances_from_its_current_shape() -> None:
    """``remaining`` and ``descendant_lead`` of a task instance: its expanded node (an instance beyond
    the expected count as the first), None / 0 for a task not in the graph; read from ``shape``, so a
    ready plan replaces the critical path."""
    basis = build_basis(_sweep(), {"gpu": 4}, SETTINGS)
    assert basis.remaining("prep") == 4500.0 and basis.descendant_lead("prep") == 3
    assert basis.remaining("trial", 1) == 3900.0 and basis.descendant_lead("trial", 1) == 1
    assert basis.remaining("trial", 9) == 3900.0
    assert basis.remaining("gone") is None and basis.descendant_lead("gone") == 0
    assert basis.descendant_lead("report") == 0
    planned = {"prep": 5000.0, "trial[0]": 4400.0, "trial[1]": 200.0, "report": 300.0}
    basis = dataclasses.replace(basis, shape=run_shape(basis.graph, basis.capacity, planned), planned=True)
    assert basis.remaining("trial", 1) == 200.0 and basis.remaining("trial", 0) == 4400.0
    assert basis.descendant_lead("report") == 1  # trial[1] (1 below it) now has less remaining
    assert basis.critical.remaining["trial[1]"] == 3900.0  # the critical path is kept
