"""Audit of the Airflow adapters (DAG -> task graph) and the GPU declaration checks: each test
reproduces a defect found in ``airflow/dag_reader.py`` or ``operators/gpu_spec.py`` (no Airflow services)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Label, TaskGroup

from airflow_gpu_dag import gpu_hints
from airflow_gpu_dag.airflow.dag_reader import build_task_graph, plan_dag
from airflow_gpu_dag.operators.gpu_spec import GpuTaskError, resolve_gpu_task


def _serialized(dag: Any) -> Any:
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def _op(task_id: str, **hints: Any) -> EmptyOperator:
    return EmptyOperator(task_id=task_id, executor_config=gpu_hints(duration="10m", **hints))


# -- edge labels on task groups that do not prefix their tasks' ids ---------------------------------


def test_a_label_on_an_edge_leaving_an_unprefixed_task_group_becomes_the_edge_kind() -> None:
    # Before: the enclosing groups were guessed from the task id ("g.b" -> "g"); a group made with
    # prefix_group_id=False leaves its tasks' ids bare, so the label Airflow keeps on
    # "g1.downstream_join_id" was never found and the edge lost its kind (DAG and serialized DAG).
    with DAG("unprefixed", schedule=None) as dag:
        a = _op("a")
        with TaskGroup("g0"), TaskGroup("g1", prefix_group_id=False) as g1:
            _op("b")
        with TaskGroup("g2", prefix_group_id=False) as g2:
            _op("d")
        c = _op("c")
        a >> Label("data") >> g1 >> Label("control") >> c
        g1 >> Label("time") >> g2
    assert set(dag.task_dict) == {"a", "b", "c", "d"}
    for reader in (dag, _serialized(dag)):
        graph, _ = build_task_graph(reader)
        assert graph.edge_kind("a", "b") == "data"
        assert graph.edge_kind("b", "c") == "control"
        assert graph.edge_kind("b", "d") == "time"


def test_labels_of_prefixed_groups_nested_three_deep_still_become_edge_kinds() -> None:
    with DAG("nested3", schedule=None) as dag:
        a = _op("a")
        with TaskGroup("x") as x, TaskGroup("y"), TaskGroup("z"):
            _op("b")
        c = _op("c")
        a >> Label("data") >> x >> Label("control") >> c
    for reader in (dag, _serialized(dag)):
        graph, _ = build_task_graph(reader)
        assert graph.edge_kind("a", "x.y.z.b") == "data"
        assert graph.edge_kind("x.y.z.b", "c") == "control"


# -- a malformed start_within of a fallback rung ----------------------------------------------------


def _rung_hints(start_within: object) -> dict[str, Any]:
    fallback = {
        "ladder": "train",
        "rung": "big",
        "index": 0,
        "rungs": 2,
        "assumed_index": 1,  # the plan assumes the second rung: this one "fell back" (waits start_within)
        "assumed_rung": "small",
        "start_within_s": start_within,
        "watched": True,
    }
    return {"gpu_dag": {"duration_s": 3600.0, "fallback": fallback}}


@pytest.mark.parametrize("start_within", ["20m", math.nan, -5.0, math.inf, True, [1200]])
def test_a_malformed_start_within_hint_is_an_error_naming_the_task(start_within: object) -> None:
    # Before: the rung's planned duration was float(start_within_s): "20m" or a list crashed the whole
    # graph read (policy, page, weights) with a bare ValueError/TypeError; NaN, a negative number, inf
    # or True were planned silently as the rung's duration.
    with DAG("bad_rung", schedule=None) as dag:
        EmptyOperator(task_id="big", executor_config=_rung_hints(start_within))
    graph, findings = build_task_graph(dag)
    node = graph.nodes["big"]
    assert node.duration == 0.0
    fallback: Any = node.attrs["fallback"]
    assert fallback["start_within_s"] is None  # (the ladder code does float() on it)
    assert [(f.code, f.dag_id, f.task_id) for f in findings] == [("bad-hint", "bad_rung", "big")]
    assert "start_within_s" in findings[0].message and "fallback_ladder" in findings[0].fix
    assert plan_dag(dag).makespan == 0.0


def test_a_valid_start_within_hint_is_planned_as_the_wait() -> None:
    with DAG("good_rung", schedule=None) as dag:
        EmptyOperator(task_id="big", executor_config=_rung_hints(1200))
    graph, findings = build_task_graph(dag)
    assert graph.nodes["big"].duration == 1200.0 and findings == []
    fallback: Any = graph.nodes["big"].attrs["fallback"]
    assert fallback["start_within_s"] == 1200.0


# -- GPU declaration errors: the fix for the argument that is wrong, and the task named ---------------


@pytest.fixture
def static_inventory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "4xa100:80GiB")
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)


@pytest.mark.usefixtures("static_inventory")
@pytest.mark.parametrize(
    ("kwargs", "fix"),
    [
        ({"gpus": 0}, "Fix: pass gpus="),
        ({"gpus": 1, "gpu_memory": "eighty"}, "Fix: pass gpu_memory like"),
        ({"gpus": 1, "gpu_type": ["a100", "h100"]}, "Fix: pass gpu_type as one GPU type name"),
        ({"gpus": 1, "gpu_type": "--"}, "Fix: pass gpu_type as one GPU type name"),
    ],
)
def test_a_bad_gpu_request_gets_the_fix_for_the_wrong_argument(kwargs: dict[str, Any], fix: str) -> None:
    # Before: every unparsable request said "Fix: pass gpus=<whole number >= 1> and gpu_memory like
    # '80GiB'", also for a bad gpu_type (where gpus and memory were fine).
    with pytest.raises(GpuTaskError) as err:
        resolve_gpu_task("train", dag_id="finetune", **kwargs)
    assert str(err.value).startswith("GPU task 'train' in DAG 'finetune': ")
    assert fix in str(err.value)


def test_bad_gpu_hints_get_the_fix_for_the_wrong_hint() -> None:
    with DAG("bad_hint_type", schedule=None) as dag:
        EmptyOperator(task_id="t", executor_config=gpu_hints(gpus=1, gpu_type=["a100", "h100"]))  # type: ignore[arg-type]
        EmptyOperator(task_id="m", executor_config=gpu_hints(gpus=1, gpu_memory="eighty"))
        EmptyOperator(task_id="n", executor_config=gpu_hints(gpus=0))
    _, findings = build_task_graph(dag)
    fixes = {f.task_id: f.fix for f in findings if f.code == "bad-gpu-request"}
    assert "gpu_type=" in fixes["t"] and "gpus=" not in fixes["t"]
    assert "gpu_memory=" in fixes["m"]
    assert "gpus=" in fixes["n"]


def test_an_invalid_inventory_configuration_is_one_logged_error_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An error of the deployment's configuration, not of the DAG: it must not fail every DAG file with a
    # GPU task (lint and the watermark controller refuse it); the declaration is checked without it.
    import logging

    from airflow_gpu_dag import settings
    from airflow_gpu_dag.log_once import LogOnce

    monkeypatch.setattr(settings, "_config_errors", LogOnce(settings.log, level=logging.ERROR))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "4xa100:eighty")
    with caplog.at_level(logging.WARNING):
        assert resolve_gpu_task("train", dag_id="finetune", gpus=1).pool_slots == 1
    (message,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "'eighty'" in message and "[gpu_dag] inventory" in message
