"""Repairs of the authoring helpers: hidden dependencies over several paths, data-edge sensor names."""

from __future__ import annotations

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag import gpu_hints
from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.authoring import fix_hidden_dependencies
from airflow_gpu_dag.authoring.hidden import HiddenDependencyCycle
from airflow_gpu_dag.core.analysis.validation import find_hidden_dependencies, hidden_dependency_pairs
from airflow_gpu_dag.sensors import DatasetCompleteSensor
from tests.unit.authoring.conftest import edge_kinds


def _bash(task_id: str, inputs: tuple[str, ...] = (), outputs: tuple[str, ...] = ()) -> BashOperator:
    return BashOperator(
        task_id=task_id, bash_command="true", executor_config=gpu_hints(inputs=inputs, outputs=outputs)
    )


def _two_path_dag(dag_id: str) -> DAG:
    with DAG(dag_id, schedule=None) as dag:
        _bash("clean", outputs=("/lake/a", "/lake/b"))
        _bash("train", inputs=("/lake/a", "/lake/b"))
    return dag


def _left(dag: DAG) -> list[object]:
    graph, _ = build_task_graph(dag)
    return list(hidden_dependency_pairs(graph))


def test_sensor_mode_awaits_every_shared_path() -> None:
    dag = _two_path_dag("h_two")
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    assert [(f.writer, f.other, f.path, f.how) for f in fixes] == [
        ("clean", "train", "/lake/a", "sensor"),
        ("clean", "train", "/lake/b", "sensor"),
    ]
    added = [str(f.added) for f in fixes]
    assert added == ["wait_clean_for_train__lake_a", "wait_clean_for_train__lake_b"]
    for fix in fixes:
        sensor = dag.get_task(str(fix.added))
        assert isinstance(sensor, DatasetCompleteSensor) and sensor.path == fix.path
        assert "train" in sensor.downstream_task_ids
    # the sensors wait side by side, not one after the other
    assert dag.get_task(added[0]).upstream_task_ids == dag.get_task(added[1]).upstream_task_ids == set()
    assert dag.get_task("train").upstream_task_ids == set(added)
    assert _left(dag) == []


@pytest.mark.parametrize("mode", ["edge", "sensor"])
def test_second_call_is_a_no_op(mode: str) -> None:
    dag = _two_path_dag(f"h_again_{mode}")
    assert fix_hidden_dependencies(dag, mode=mode, timeout=60)
    tasks = set(dag.task_dict)
    edges = {t: set(dag.get_task(t).downstream_task_ids) for t in tasks}
    assert fix_hidden_dependencies(dag, mode=mode, timeout=60) == []
    assert set(dag.task_dict) == tasks
    assert {t: set(dag.get_task(t).downstream_task_ids) for t in tasks} == edges
    assert _left(dag) == []


def test_single_shared_path_keeps_its_sensor_id() -> None:
    with DAG("h_one", schedule=None) as dag:
        _bash("clean", outputs=("/lake/a", "/lake/other"))
        _bash("train", inputs=("/lake/a/part-0", "/lake/unrelated"))
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    assert [(f.path, f.added) for f in fixes] == [("/lake/a", "wait_clean_for_train")]
    assert fix_hidden_dependencies(dag, mode="sensor", timeout=60) == []


def test_path_left_unguarded_by_an_earlier_sensor_gets_its_own_id() -> None:
    # a DAG repaired by the old helper: a sensor (named after the pair) awaits only /lake/a
    with DAG("h_old", schedule=None) as dag:
        clean = _bash("clean", outputs=("/lake/a", "/lake/b"))
        train = _bash("train", inputs=("/lake/a", "/lake/b"))
        old = DatasetCompleteSensor(task_id="wait_clean_for_train", path="/lake/a", timeout=60)
        old >> train
    assert clean.downstream_task_ids == set()
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    assert [(f.path, f.added) for f in fixes] == [("/lake/b", "wait_clean_for_train__lake_b")]
    assert _left(dag) == []
    assert fix_hidden_dependencies(dag, mode="sensor", timeout=60) == []


def test_reader_that_also_writes_a_shared_path_gets_an_edge() -> None:
    # train reads /lake/a and writes /lake/b, which clean writes too: a sensor cannot stop that race
    with DAG("h_race", schedule=None) as dag:
        _bash("clean", outputs=("/lake/a", "/lake/b"))
        _bash("train", inputs=("/lake/a",), outputs=("/lake/b",))
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    assert [(f.writer, f.other, f.how) for f in fixes] == [("clean", "train", "edge")]
    assert "train" in dag.get_task("clean").downstream_task_ids
    assert _left(dag) == []
    assert fix_hidden_dependencies(dag, mode="sensor", timeout=60) == []


def _hidden_dag(dag_id: str) -> DAG:
    with DAG(dag_id, schedule=None) as dag:
        EmptyOperator(task_id="clean", executor_config=gpu_hints(outputs=["/lake/clean"]))
        EmptyOperator(task_id="train", executor_config=gpu_hints(inputs=["/lake/clean/part-0"]))
        EmptyOperator(task_id="stats", executor_config=gpu_hints(outputs=["/lake/clean"]))
    return dag


def _cyclic_hidden_dag(dag_id: str) -> DAG:
    """a writes P (read by b), b writes Q (read by c), c writes R (read by a): no edges at all, and the
    three repairs together would be a -> b -> c -> a."""
    with DAG(dag_id, schedule=None) as dag:
        EmptyOperator(task_id="a", executor_config=gpu_hints(outputs=["/p"], inputs=["/r"]))
        EmptyOperator(task_id="b", executor_config=gpu_hints(outputs=["/q"], inputs=["/p"]))
        EmptyOperator(task_id="c", executor_config=gpu_hints(outputs=["/r"], inputs=["/q"]))
    return dag


@pytest.mark.usefixtures("_deferring")
def test_fix_hidden_dependencies_edge_mode() -> None:
    dag = _hidden_dag("h1")
    graph, _ = build_task_graph(dag)
    assert len(find_hidden_dependencies(graph)) == 3
    fixes = fix_hidden_dependencies(dag, mode="edge")
    assert {(f.writer, f.other, f.how) for f in fixes} >= {("clean", "train", "edge")}
    graph, _ = build_task_graph(dag)
    assert find_hidden_dependencies(graph) == []
    assert edge_kinds(dag)[("clean", "train")] == "data"


@pytest.mark.usefixtures("_deferring")
def test_fix_hidden_dependencies_sensor_mode() -> None:
    dag = _hidden_dag("h2")
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    by_other = {(f.writer, f.other): f for f in fixes}
    reader_fix = next(f for f in fixes if f.other == "train")
    assert reader_fix.how == "sensor" and reader_fix.path == "/lake/clean"
    sensor = dag.get_task(reader_fix.added)
    assert isinstance(sensor, DatasetCompleteSensor) and sensor.path == "/lake/clean"
    assert edge_kinds(dag)[(reader_fix.added, "train")] == "data"
    # the sensor declares what it awaits, so the lint sees the reader as ordered after complete data
    graph, _ = build_task_graph(dag)
    assert graph.nodes[reader_fix.added].awaits == ("/lake/clean",)
    assert find_hidden_dependencies(graph) == []
    # two writers always get an edge
    assert any(f.how == "edge" for f in by_other.values())
    with pytest.raises(ValueError, match=r"mode='fence'"):
        fix_hidden_dependencies(dag, mode="fence")
    with pytest.raises(ValueError, match=r"timeout"):
        fix_hidden_dependencies(_hidden_dag("h3"), mode="sensor")


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("mode", ["edge", "sensor"])
def test_fix_hidden_dependencies_never_closes_a_cycle(mode: str) -> None:
    dag = _cyclic_hidden_dag(f"cyc_{mode}")
    before = {t: set(dag.get_task(t).downstream_task_ids) for t in dag.task_dict}
    with pytest.raises(HiddenDependencyCycle) as err:
        fix_hidden_dependencies(dag, mode=mode, timeout=60)
    message = str(err.value)
    assert f"DAG 'cyc_{mode}': cannot fix the hidden dependency between" in message
    assert "would close the cycle" in message and "Fix: decide the order yourself" in message
    cycle = message.split("close the cycle ", 1)[1].split(" (", 1)[0].split(" -> ")
    assert cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}  # the whole cycle
    # refused before anything changed: no edge, no sensor
    assert set(dag.task_dict) == {"a", "b", "c"}
    assert {t: set(dag.get_task(t).downstream_task_ids) for t in dag.task_dict} == before
    dag.check_cycle()


@pytest.mark.usefixtures("_deferring")
def test_fix_hidden_dependencies_leaves_ordered_pairs_and_refuses_mutual_readers() -> None:
    with DAG("rev", schedule=None) as dag:
        read = EmptyOperator(task_id="read", executor_config=gpu_hints(inputs=["/lake/x"]))
        mid = EmptyOperator(task_id="mid")
        write = EmptyOperator(task_id="write", executor_config=gpu_hints(outputs=["/lake/x"]))
        read >> mid
        EmptyOperator(task_id="other") >> write
    # read and write are not ordered yet; add the back edge the user's DAG implies later
    mid >> write
    assert fix_hidden_dependencies(dag) == []  # ordered (reader first): the lint does not report it
    with DAG("mutual", schedule=None) as dag2:
        EmptyOperator(task_id="x", executor_config=gpu_hints(outputs=["/a"], inputs=["/b"]))
        EmptyOperator(task_id="y", executor_config=gpu_hints(outputs=["/b"], inputs=["/a"]))
    with pytest.raises(HiddenDependencyCycle, match=r"'x' also reads '/b', which 'y' writes to '/b'"):
        fix_hidden_dependencies(dag2)


@pytest.mark.usefixtures("_deferring")
def test_fix_hidden_dependencies_orders_two_writers_without_a_cycle() -> None:
    with DAG("ww", schedule=None) as dag:
        w1 = EmptyOperator(task_id="w1", executor_config=gpu_hints(outputs=["/lake/x"]))
        r = EmptyOperator(task_id="r", executor_config=gpu_hints(inputs=["/lake/y"]))
        w2 = EmptyOperator(task_id="w2", executor_config=gpu_hints(outputs=["/lake/x", "/lake/y"]))
    fixes = fix_hidden_dependencies(dag)
    dag.check_cycle()
    assert {(f.writer, f.other) for f in fixes if f.how == "edge"} >= {("w2", "r")}
    assert "w2" in w1.downstream_task_ids or "w1" in w2.downstream_task_ids
    assert r.upstream_task_ids == {"w2"}
    graph, _ = build_task_graph(dag)
    assert find_hidden_dependencies(graph) == []


@pytest.mark.usefixtures("_deferring")
def test_sensor_mode_without_timeout_changes_nothing() -> None:
    dag = _hidden_dag("h4")
    with pytest.raises(ValueError, match=r"timeout"):
        fix_hidden_dependencies(dag, mode="sensor")
    assert all(not dag.get_task(t).downstream_task_ids for t in dag.task_dict)


def test_sensor_mode_still_orders_two_writers_of_one_path() -> None:
    # w1 and w2 write /lake/p, reader reads it, reader >> w2. The sensor for (w1, reader) does not
    # order w1 before anything; before, the planning copy's w1 -> reader edge made (w1, w2) look
    # ordered, no edge was added, and the two writers still raced (lint warned after the fix).
    from airflow.providers.standard.operators.bash import BashOperator

    from airflow_gpu_dag import gpu_hints
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.authoring import fix_hidden_dependencies
    from airflow_gpu_dag.core.analysis.validation import hidden_dependency_pairs

    def bash(task_id: str, inputs: tuple[str, ...] = (), outputs: tuple[str, ...] = ()) -> BashOperator:
        return BashOperator(
            task_id=task_id, bash_command="true", executor_config=gpu_hints(inputs=inputs, outputs=outputs)
        )

    with DAG("race", schedule=None) as dag:
        w1 = bash("w1", outputs=("/lake/p",))
        reader = bash("reader", inputs=("/lake/p",))
        w2 = bash("w2", outputs=("/lake/p",))
        reader >> w2
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    graph, _ = build_task_graph(dag)
    assert "w2" in graph.descendants("w1") or "w1" in graph.descendants("w2"), fixes
    assert [(f.writer, f.other) for f in fixes if f.how == "edge"] == [("w1", "w2")]
    assert hidden_dependency_pairs(graph) == []  # nothing left racing
    assert w1.downstream_task_ids >= {"w2"}
