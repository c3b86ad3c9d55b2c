"""Repairs of the authoring helpers: hidden dependencies over several paths, data-edge sensor names."""

from __future__ import annotations

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, TaskGroup

from airflow_gpu_dag import gpu_hints
from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.authoring import data_edge, fix_hidden_dependencies
from airflow_gpu_dag.core.analysis.validation import hidden_dependency_pairs
from airflow_gpu_dag.sensors import DatasetCompleteSensor


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


# -- hidden dependencies ------------------------------------------------------------------------


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


# -- data_edge sensor names ---------------------------------------------------------------------


def test_data_edge_names_templated_paths_after_their_last_static_segment() -> None:
    with DAG("d_runs", schedule=None):
        prep, feat, train = (EmptyOperator(task_id=t) for t in ("prep", "feat", "train"))
        clean = data_edge(prep, feat, path="/lake/clean/{{ run_id }}", timeout=3600)
        features = data_edge(feat, train, path="/lake/features/{{ run_id }}/{{ ds_nodash }}", timeout=60)
        shards = data_edge(prep, train, path="s3://lake/shards/{{ ds }}", timeout=60)
    assert (clean.task_id, features.task_id, shards.task_id) == ("wait_clean", "wait_features", "wait_shards")
    assert clean.path == "/lake/clean/{{ run_id }}"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/lake/clean", "wait_clean"),
        ("/lake/clean/part_{{ ds }}", "wait_part__ds"),  # static text in the last segment: as before
        ("/lake/clean/", "wait_lake_clean"),
        ("{{ params.out }}", "wait_params_out"),  # nothing static at all: as before
    ],
)
def test_data_edge_keeps_names_of_static_last_segments(path: str, expected: str) -> None:
    with DAG("d_static", schedule=None):
        wait = data_edge(EmptyOperator(task_id="a"), EmptyOperator(task_id="b"), path=path, timeout=60)
    assert wait.task_id == expected


def test_data_edge_with_a_taken_name_says_how_to_fix_it() -> None:
    corpus = Asset("corpus", uri="file:///lake/corpus")
    with DAG("d_dup", schedule=None):
        prep, feat, train = (EmptyOperator(task_id=t) for t in ("prep", "feat", "train"))
        data_edge(prep, feat, path="/lake/a/{{ run_id }}", asset=corpus, timeout=60)
        with pytest.raises(ValueError) as err:
            data_edge(feat, train, path="/lake/b/{{ run_id }}", asset=corpus, timeout=60)
        message = str(err.value)
        assert message.startswith("DAG 'd_dup': data_edge('feat' -> 'train')")
        assert "'wait_corpus'" in message and "'prep'" in message
        assert "Fix: pass task_id=" in message and "asset=" in message
        # the suggested id works
        fixed = data_edge(feat, train, path="/lake/b/{{ run_id }}", asset=corpus, timeout=60, task_id="w2")
        assert fixed.task_id == "w2"
        # the same last static segment, once templated
        assert data_edge(prep, train, path="/other/a", timeout=60).task_id == "wait_a"
        with pytest.raises(ValueError, match=r"data_edge\('feat' -> 'train'\).*'wait_a' of '/other/a'"):
            data_edge(feat, train, path="/more/a/{{ ds }}", timeout=60)


def test_data_edge_in_a_task_group_reports_a_taken_name_too() -> None:
    with DAG("d_group", schedule=None), TaskGroup("g"):
        prep, train = EmptyOperator(task_id="prep"), EmptyOperator(task_id="train")
        assert data_edge(prep, train, path="/lake/x", timeout=60).task_id == "g.wait_x"
        with pytest.raises(ValueError, match=r"DAG 'd_group': data_edge\('g.prep' -> 'g.train'\)") as err:
            data_edge(prep, train, path="/lake/y/x", timeout=60)
    assert "already has the sensor 'g.wait_x' of '/lake/x'" in str(err.value)
    assert "Fix: pass task_id='wait_x_for_g_train'" in str(err.value)
