"""Mapped tasks with counts the planner got wrong: a task mapped over nothing was planned at the
default or learned duration (it runs no instance), and the controller's lookahead and the planner
expanded the same history to different numbers of instances (upper middle vs median rounded up)."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import DAG, task, task_group

from airflow_gpu_dag import gpu_hints
from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.airflow.history import learned_task_graph
from airflow_gpu_dag.airflow.mapped import literal_map_length, map_lengths, mapped_task_ids
from airflow_gpu_dag.core.analysis.estimates import EstimateSettings
from airflow_gpu_dag.core.model.mapping import typical_map_count
from airflow_gpu_dag.watermark.durations import ControllerHistory
from tests.unit.airflow.conftest import sweep_dag
from tests.unit.airflow_dags import serialized


def test_a_task_mapped_over_nothing_takes_no_time_declared_or_not() -> None:
    with DAG("zero_map", schedule=None) as dag:

        @task(executor_config=gpu_hints(gpus=1))  # no duration declared
        def undeclared(x: int) -> int:
            return x

        @task(executor_config=gpu_hints(gpus=1, duration="1h"))
        def declared(x: int) -> int:
            return x

        undeclared.expand(x=[])
        declared.expand(x=[])
    graph = learned_task_graph(dag, past_runs=False, default_duration=1800.0).graph
    for task_id in ("undeclared", "declared"):
        node = graph.nodes[task_id]
        assert (node.attrs.get("map_count"), node.duration) == (0, 0.0), task_id


def test_the_controller_and_the_planner_expand_a_history_alike() -> None:
    assert [typical_map_count(c) for c in ([2, 8], [3], [1, 2, 9], [])] == [5, 3, 2, None]

    class Client:
        def dag_tasks(self, dag_id: str) -> list[dict[str, Any]]:
            return [{"task_id": "shard", "is_mapped": True}]

        def map_counts(self, dag_id: str, task_id: str, runs: int) -> list[int]:
            return [2, 8]

        def task_history(self, *args: Any, **kwargs: Any) -> list[Any]:
            return []

    history = ControllerHistory(Client(), 600.0, EstimateSettings())
    assert history.map_count({"dag_id": "d", "task_id": "shard", "map_index": -1}) == 5  # was 8


@pytest.mark.parametrize("serialize", [False, True])
def test_map_lengths_from_literals_history_and_hint(serialize: bool) -> None:
    dag = sweep_dag()
    dag = serialized(dag) if serialize else dag
    assert set(mapped_task_ids(dag)) == {"trial", "evaluate", "unknown"}
    assert literal_map_length(dag.task_dict["trial"]) == 6
    assert literal_map_length(dag.task_dict["evaluate"]) is None
    counts, sources = map_lengths(dag)
    assert counts == {"trial": 6, "evaluate": 4, "unknown": None}
    assert sources == {"trial": "expand", "evaluate": "declared"}
    counts, sources = map_lengths(dag, {"evaluate": 7, "trial": 99, "unknown": 2})
    assert counts == {"trial": 6, "evaluate": 7, "unknown": 2}  # a literal wins over history
    assert sources == {"trial": "expand", "evaluate": "history", "unknown": "history"}


@pytest.mark.parametrize("serialize", [False, True])
def test_index_wise_edges_inside_a_mapped_task_group(serialize: bool) -> None:
    with DAG("grouped", schedule=None) as dag:

        @task(executor_config=gpu_hints(duration="10m"))
        def train(x: int) -> int:
            return x

        @task(executor_config=gpu_hints(duration="5m"))
        def score(x: int) -> int:
            return x

        @task_group
        def fold(x: int) -> None:
            score(train(x))

        fold.expand(x=[1, 2, 3])
    read = serialized(dag) if serialize else dag
    counts, _ = map_lengths(read)
    assert counts == {"fold.train": 3, "fold.score": 3}
    graph, _ = build_task_graph(read, expand_mapped=True)
    assert graph.upstream("fold.score[1]") == ["fold.train[1]"]
