"""OpenLineage (optional extra): a data edge shows producer -> dataset -> consumer, as the OpenLineage
provider's own extraction sees the tasks (in-process, no backend)."""

from __future__ import annotations

import builtins
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Asset, task

from airflow_gpu_dag.authoring import data_edge
from airflow_gpu_dag.authoring.data import lineage_dataset
from airflow_gpu_dag.operators.gpu import GpuBashOperator

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
