"""Mapped tasks expanded into their instances: N from literal expand() arguments, past runs or the
map_length hint; edges fan out and in; unknown N keeps one node. On authoring and serialized DAGs."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task, task_group

from airflow_gpu_dag import gpu_hints
from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.airflow.mapped import literal_map_length, map_lengths, mapped_task_ids
from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.mapping import expand_mapped, expanded_id, node_for, task_of, weights_by_task
from airflow_gpu_dag.core.planning.plan import build_plan


def _serialized(dag: Any) -> Any:
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def _sweep_dag() -> DAG:
    with DAG("sweep", schedule=None) as dag:
        prep = BashOperator(task_id="prep", bash_command="true", executor_config=gpu_hints(duration="10m"))

        @task(executor_config=gpu_hints(duration="1h", gpus=1))
        def trial(lr: float, batch: int) -> float:
            return lr * batch

        @task(executor_config=gpu_hints(duration="5m"))
        def configs() -> list[int]:
            return [1, 2, 3]

        @task(executor_config=gpu_hints(duration="20m", map_length=4))
        def evaluate(x: int) -> int:
            return x

        @task(executor_config=gpu_hints(duration="20m"))
        def unknown(x: int) -> int:
            return x

        @task(executor_config=gpu_hints(duration="5m"))
        def select(scores: Any) -> None:
            return None

        trials = trial.expand(lr=[0.1, 0.01, 0.001], batch=[32, 64])  # 3 x 2 = 6 instances
        cfg = configs()
        evals = evaluate.expand(x=cfg)
        others = unknown.expand(x=cfg)
        prep >> trials >> select(trials)
        prep >> cfg
        evals >> select.override(task_id="select_evals")(evals)
        others >> select.override(task_id="select_others")(others)
    return dag


@pytest.mark.parametrize("serialize", [False, True])
def test_map_lengths_from_literals_history_and_hint(serialize: bool) -> None:
    dag = _sweep_dag()
    dag = _serialized(dag) if serialize else dag
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
def test_build_task_graph_expands_mapped_tasks(serialize: bool) -> None:
    dag = _sweep_dag()
    dag = _serialized(dag) if serialize else dag
    flat, _ = build_task_graph(dag)
    assert "trial" in flat.nodes and "trial[0]" not in flat.nodes  # off by default
    graph, findings = build_task_graph(dag, expand_mapped=True)
    assert findings == []
    trials = [expanded_id("trial", i) for i in range(6)]
    assert all(t in graph.nodes for t in trials) and "trial" not in graph.nodes
    node = graph.nodes["trial[4]"]
    assert node.attrs["map_of"] == "trial" and node.attrs["map_index"] == 4
    assert node.attrs["map_source"] == "expand" and node.gpus == 1 and node.duration == 3600
    assert task_of(graph, "trial[4]") == "trial"
    for t in trials:  # fan-out from prep, fan-in to select
        assert graph.upstream(t) == ["prep"] and graph.downstream(t) == ["select"]
    assert sorted(graph.upstream("select")) == sorted(trials)
    assert [f"evaluate[{i}]" for i in range(4)] == [t for t in graph.nodes if t.startswith("evaluate")]
    assert graph.nodes["unknown"].attrs["mapped"] is True and "map_of" not in graph.nodes["unknown"].attrs
    plan = build_plan(graph)
    assert plan.total_gpu_hours == pytest.approx(6.0)  # six 1-GPU trials of an hour


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
    read = _serialized(dag) if serialize else dag
    counts, _ = map_lengths(read)
    assert counts == {"fold.train": 3, "fold.score": 3}
    graph, _ = build_task_graph(read, expand_mapped=True)
    assert graph.upstream("fold.score[1]") == ["fold.train[1]"]


def test_bad_map_length_hint_is_an_error_naming_the_task() -> None:
    with DAG("bad_hint", schedule=None) as dag:
        BashOperator(task_id="plain", bash_command="true", executor_config=gpu_hints(map_length=3))

        @task(executor_config=gpu_hints(map_length="many"))
        def each(x: int) -> int:
            return x

        each.expand(x=[1])
    _, findings = build_task_graph(dag)
    assert {(f.code, f.task_id) for f in findings} == {
        ("bad-map-length", "plain"),
        ("bad-map-length", "each"),
    }
    assert "not a mapped task" in next(f.message for f in findings if f.task_id == "plain")


def test_map_length_above_airflows_max_map_length_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # Airflow fails the upstream task that pushes more than [core] max_map_length values: such a
    # task could never expand, and planning 100,000 instances would only stall the command.
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", "8")

    def dag_with(length: int) -> DAG:
        with DAG("long_map", schedule=None) as dag:

            @task(executor_config=gpu_hints(duration="1m"))
            def items() -> list[int]:
                return []

            @task(executor_config=gpu_hints(duration="10m", map_length=length))
            def each(x: int) -> int:
                return x

            each.expand(x=items())
        return dag

    graph, findings = build_task_graph(dag_with(8), expand_mapped=True)
    assert not findings and len([t for t in graph.nodes if t.startswith("each[")]) == 8
    graph, findings = build_task_graph(dag_with(9), expand_mapped=True)
    assert [(f.code, f.task_id) for f in findings] == [("bad-map-length", "each")]
    assert "[core] max_map_length (8)" in findings[0].message and "at most 8" in findings[0].fix
    assert "each" in graph.nodes and graph.nodes["each"].attrs.get("mapped")  # not expanded: one node


def test_expand_mapped_core() -> None:
    graph = TaskGraph.from_edges("g", {"a": 1, "m": 10, "n": 5, "z": 1}, [("a", "m"), ("m", "n"), ("n", "z")])
    expanded = expand_mapped(graph, {"m": 2, "n": 3})
    assert sorted(expanded.downstream("m[0]")) == ["n[0]", "n[1]", "n[2]"]  # every pair joined
    assert expanded.edge_count == 2 + 2 * 3 + 3
    assert analyze(expanded).makespan == analyze(graph).makespan
    pairs = expand_mapped(graph, {"m": 3, "n": 3}, index_wise={("m", "n")})
    assert pairs.downstream("m[2]") == ["n[2]"]
    empty = expand_mapped(graph, {"m": 0})
    assert empty.nodes["m"].duration == 0 and empty.downstream("a") == ["m"]
    with pytest.raises(ValueError, match="negative"):
        expand_mapped(graph, {"m": -1})


def test_node_for_and_weights_by_task() -> None:
    graph = expand_mapped(TaskGraph.from_edges("g", {"a": 1, "m": 10}, [("a", "m")]), {"m": 2})
    assert node_for(graph, "m", 1) == "m[1]" and node_for(graph, "a") == "a"
    assert node_for(graph, "m", 7) is None and node_for(graph, "zzz") is None
    assert weights_by_task(graph, {"a": 11, "m[0]": 10, "m[1]": 12}) == {"a": 11, "m": 12}


def test_a_task_mapped_over_nothing_holds_no_gpus_in_predictions() -> None:
    # Airflow skips a mapped task with 0 instances at once. Before, its node kept its 4 GPUs at
    # duration 0: it waited until all 4 were free together and held back everything after it.
    from airflow_gpu_dag.core.simulation.simulator import simulate

    graph = TaskGraph("zero_map")
    graph.add("long", 3600.0, 1, pool="gpu")  # an unrelated 1-GPU job of an hour
    graph.add("split", 10.0)
    graph.add("train", 1800.0, 4, pool="gpu")  # mapped over split's (empty) output
    graph.add("report", 60.0)
    graph.add_edge("split", "train")
    graph.add_edge("train", "report")
    expanded = expand_mapped(graph, {"train": 0})
    node = expanded.nodes["train"]
    assert (node.duration, node.gpus, node.attrs["declared_duration"], node.attrs["map_count"]) == (
        0.0,
        0,
        1800.0,
        0,
    )
    for policy, priority in (("stock", None), ("critical_path", None), ("reservation", "critical_path")):
        report = simulate(expanded, {"gpu": 4}, policy, priority=priority).by_id()["report"]
        assert report.end == pytest.approx(70.0), policy
