"""OpenLineage (optional extra): a data edge shows producer -> dataset -> consumer, as the OpenLineage
provider's own extraction sees the tasks (in-process, no backend)."""

from __future__ import annotations

import builtins
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, TaskGroup, task

from airflow_gpu_dag.authoring import data_edge, dataset_path
from airflow_gpu_dag.authoring.data import lineage_dataset
from airflow_gpu_dag.operators.gpu import GpuBashOperator
from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor
from tests.unit.authoring.conftest import edge_kinds, edges

pytest.importorskip("airflow.providers.openlineage")


def _lineage(task_obj: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Inputs and outputs (namespace, name) the OpenLineage provider extracts for a finished task."""
    from airflow.providers.openlineage.extractors.manager import ExtractorManager
    from airflow.utils.state import TaskInstanceState

    ti = SimpleNamespace(
        task=task_obj, dag_id=task_obj.dag_id, task_id=task_obj.task_id, run_id="r1", map_index=-1
    )
    metadata = ExtractorManager().extract_metadata(
        SimpleNamespace(run_id="r1"), task_obj, TaskInstanceState.SUCCESS, ti
    )
    return (
        [(d.namespace, d.name) for d in metadata.inputs],
        [(d.namespace, d.name) for d in metadata.outputs],
    )


def test_data_edge_shows_producer_dataset_consumer_in_openlineage() -> None:
    with DAG("ol_edge", schedule=None):
        produce = GpuBashOperator(task_id="produce", bash_command="true", gpus=1)

        @task.gpu(gpus=1)
        def consume() -> None:
            pass

        consumer = consume()
        sensor = data_edge(
            produce,
            consumer,
            path="/lake/clean/{{ ds }}",
            asset=Asset("clean", uri="file:///lake/clean"),
            timeout=60,
        )
    dataset = ("file", "/lake/clean")
    assert _lineage(produce) == ([], [dataset])
    assert _lineage(consumer.operator) == ([dataset], [])
    assert _lineage(sensor) == ([dataset], [dataset])  # the sensor emits the asset's events


def test_data_edge_without_asset_uses_the_paths_static_part() -> None:
    with DAG("ol_path", schedule=None):
        produce = BashOperator(task_id="produce", bash_command="true")
        consume = BashOperator(task_id="consume", bash_command="true")
        data_edge(produce, consume, path="/lake/feats/{{ run_id }}", timeout=60)
        s3_produce = BashOperator(task_id="s3_produce", bash_command="true")
        s3_consume = BashOperator(task_id="s3_consume", bash_command="true")
        data_edge(s3_produce, s3_consume, path="s3://bucket/feats/{{ ds }}", timeout=60, task_id="wait_s3")
    assert _lineage(produce)[1] == [("file", "/lake/feats")]
    assert _lineage(consume)[0] == [("file", "/lake/feats")]
    assert _lineage(s3_produce)[1] == _lineage(s3_consume)[0] == [("s3://bucket", "feats")]


def test_data_edge_on_an_object_storage_path_with_a_connection() -> None:
    # str() of such a path is s3://lake@bucket/...: the lineage namespace was "s3://lake@bucket".
    from airflow.sdk import ObjectStoragePath

    with DAG("ol_osp", schedule=None):
        produce = BashOperator(task_id="produce", bash_command="true")
        consume = BashOperator(task_id="consume", bash_command="true")
        path = ObjectStoragePath("s3://bucket/feats/{{ ds }}", conn_id="lake")
        sensor = data_edge(produce, consume, path=path, timeout=60, task_id="wait_osp")
    assert _lineage(produce)[1] == _lineage(consume)[0] == [("s3://bucket", "feats")]
    assert (sensor.path, sensor.conn_id) == ("s3://bucket/feats/{{ ds }}", "lake")


def test_producer_outlet_is_not_an_airflow_asset() -> None:
    """An asset outlet on the producer would emit asset events before the data is known complete."""
    with DAG("ol_events", schedule=None):
        produce = BashOperator(task_id="produce", bash_command="true")
        consume = BashOperator(task_id="consume", bash_command="true")
        data_edge(produce, consume, path="/lake/x", asset=Asset("x", uri="file:///lake/x"), timeout=60)
    assert produce.outlets and not any(isinstance(o, Asset) for o in produce.outlets)


def test_without_the_provider_nothing_is_added(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_openlineage(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("airflow.providers.openlineage"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_openlineage)
    assert lineage_dataset("file:///lake/x") is None
    with DAG("ol_none", schedule=None):
        produce = BashOperator(task_id="produce", bash_command="true")
        consume = BashOperator(task_id="consume", bash_command="true")
        data_edge(produce, consume, path="/lake/x", timeout=60)
    assert (produce.outlets, consume.inlets) == ([], [])


@pytest.mark.usefixtures("_deferring")
def test_data_edge_inserts_labelled_sensor() -> None:
    with DAG("d", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train")
        asset = Asset("clean", uri="file:///lake/clean")
        wait = data_edge(prep, train, path="/lake/clean/{{ ds }}", asset=asset, timeout=60)
    assert wait.task_id == "wait_clean"
    assert isinstance(wait, DatasetCompleteSensor) and wait.deferrable
    assert edge_kinds(dag) == {("prep", "wait_clean"): "data", ("wait_clean", "train"): "data"}
    assert asset in wait.outlets
    assert str(wait.trigger_rule) in ("all_success", "TriggerRule.ALL_SUCCESS")
    assert dataset_path(wait) == "{{ ti.xcom_pull(task_ids='wait_clean')['path'] }}"


@pytest.mark.usefixtures("_deferring")
def test_data_edge_fallback_runs_after_producer_failure() -> None:
    with DAG("d2", schedule=None):
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train")
        wait = data_edge(
            prep, train, path="/x", asset=Asset("x", uri="file:///x"), timeout=5, fallback_to_last_good=True
        )
    assert wait.trigger_rule == "all_done"
    assert wait.producer_task_id == "prep"


@pytest.mark.usefixtures("_deferring")
def test_sensor_without_timeout_is_a_parse_error() -> None:
    with DAG("d3", schedule=None), pytest.raises(ValueError, match=r"task 'w'.*needs an explicit timeout"):
        DatasetCompleteSensor(task_id="w", path="/x")
    with DAG("d4", schedule=None), pytest.raises(ValueError, match=r"task 'c'.*positive"):
        CheckpointSensor(task_id="c", checkpoint_dir="/x", step=1, timeout=-1)
    with DAG("d5", schedule=None):
        a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
        with pytest.raises(ValueError, match=r"wait_x.*timeout"):
            data_edge(a, b, path="/data/x")
        with pytest.raises(ValueError, match=r"fallback_to_last_good needs asset="):
            data_edge(a, b, path="/data/y", timeout=1, fallback_to_last_good=True)
        with pytest.raises(ValueError, match=r"unknown completeness rule"):
            data_edge(a, b, path="/data/z", timeout=1, completeness="done")


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


def test_data_edge_from_a_task_group_wires_only_the_producer() -> None:
    with DAG("groups_data", schedule=None) as dag:
        with TaskGroup("prep"):
            clean = EmptyOperator(task_id="clean")
            EmptyOperator(task_id="stats")  # another leaf of the group
        with TaskGroup("fit"):
            train = EmptyOperator(task_id="train")
            EmptyOperator(task_id="probe")  # another root of the group
        wait = data_edge(clean, train, path="/lake/clean", timeout=60)
    assert edges(dag) == {("prep.clean", wait.task_id), (wait.task_id, "fit.train")}
    assert dag.edge_info["prep.clean"][wait.task_id] == {"label": "data"}
