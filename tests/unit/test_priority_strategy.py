"""The critical-path priority strategy on serialized DAGs, as the scheduler sees them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, TaskGroup, task
from airflow.serialization.serialized_objects import DagSerialization

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.core.rules import INT32_MAX
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, clamp_weight


def _serialized(dag: DAG) -> Any:
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def _weight(sdag: Any, task_id: str) -> int:
    ti = SimpleNamespace(task=sdag.task_dict[task_id], task_id=task_id)
    return CriticalPathPriorityStrategy().get_weight(ti)  # type: ignore[arg-type]


def _bash(task_id: str, duration: str, **kwargs: Any) -> BashOperator:
    return BashOperator(
        task_id=task_id, bash_command="true", executor_config=gpu_hints(duration=duration), **kwargs
    )


def test_weights_are_remaining_critical_path_seconds() -> None:
    with DAG("cp", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        load = _bash("load", "10m")
        train = _bash("train", "1h")
        eval_ = _bash("eval", "20m")
        side = _bash("side", "5m")
        load >> train >> eval_
        load >> side
    sdag = _serialized(dag)
    assert {t: _weight(sdag, t) for t in sdag.task_dict} == {
        "load": 600 + 3600 + 1200,
        "train": 3600 + 1200,
        "eval": 1200,
        "side": 300,
    }


def test_task_group_mapped_and_setup_teardown() -> None:
    with DAG("shapes", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        setup = _bash("create_cluster", "5m").as_setup()
        with TaskGroup("prep"):
            clean = _bash("clean", "20m")

        @task(executor_config=gpu_hints(duration="30m", gpus=1))
        def sweep(lr: float) -> float:
            return lr

        swept = sweep.expand(lr=[0.1, 0.01])
        teardown = _bash("delete_cluster", "5m").as_teardown(setups=setup)
        setup >> clean >> swept >> teardown
    sdag = _serialized(dag)
    assert set(sdag.task_dict) == {"create_cluster", "prep.clean", "sweep", "delete_cluster"}
    assert _weight(sdag, "sweep") == 1800 + 300
    assert _weight(sdag, "prep.clean") == 1200 + 1800 + 300
    assert _weight(sdag, "create_cluster") == 300 + 1200 + 1800 + 300


def test_never_raises_and_falls_back_to_priority_weight() -> None:
    def broken_dag() -> Any:
        raise RuntimeError("boom")

    ti = SimpleNamespace(
        task=SimpleNamespace(get_dag=broken_dag, priority_weight=7, task_id="x"), task_id="x"
    )
    assert CriticalPathPriorityStrategy().get_weight(ti) == 7  # type: ignore[arg-type]
    no_dag = SimpleNamespace(
        task=SimpleNamespace(get_dag=lambda: None, priority_weight=3, task_id="y"), task_id="y"
    )
    assert CriticalPathPriorityStrategy().get_weight(no_dag) == 3  # type: ignore[arg-type]
    nothing = SimpleNamespace(task=None, task_id="z")
    assert CriticalPathPriorityStrategy().get_weight(nothing) == 1  # type: ignore[arg-type]


def test_cyclic_or_malformed_dag_does_not_raise() -> None:
    class FakeTask:
        def __init__(self, task_id: str, downstream: set[str], config: Any) -> None:
            self.task_id = task_id
            self.downstream_task_ids = downstream
            self.executor_config = config
            self.priority_weight = 5
            self.pool = "default_pool"
            self.pool_slots = 1
            self.retries = 0

        def get_dag(self) -> Any:
            return dag

    dag = SimpleNamespace(dag_id="bad", task_dict={})
    dag.task_dict = {
        "a": FakeTask("a", {"b"}, {"gpu_dag": {"duration_s": "soon"}}),
        "b": FakeTask("b", {"a"}, None),
    }
    ti = SimpleNamespace(task=dag.task_dict["a"], task_id="a")
    assert CriticalPathPriorityStrategy().get_weight(ti) == 5  # type: ignore[arg-type]


def test_clamp_to_int32() -> None:
    assert clamp_weight(1e20) == INT32_MAX
    assert clamp_weight(-1e20) == -(2**31)
    assert clamp_weight(12.6) == 13


def test_huge_estimates_are_clamped() -> None:
    with DAG("huge", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        _bash("a", "100000d") >> _bash("b", "100000d")
    assert _weight(_serialized(dag), "a") == INT32_MAX


def test_analysis_cached_per_dag_object(monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow_gpu_dag.priority_strategy as module

    calls: list[str] = []
    real = module._critical_path_weights

    def counting(dag: Any) -> dict[str, int]:
        calls.append(dag.dag_id)
        return real(dag)

    monkeypatch.setattr(module.CriticalPathPriorityStrategy, "_cache", module._CachedDagWeights(counting))
    with DAG("cache", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        prev = _bash("t0", "10m")
        for i in range(1, 50):
            cur = _bash(f"t{i}", "10m")
            prev >> cur
            prev = cur
    first = _serialized(dag)
    for task_id in first.task_dict:
        _weight(first, task_id)
    assert calls == ["cache"]
    second = _serialized(dag)  # a new serialized version is a new object: analysed again
    _weight(second, "t0")
    assert calls == ["cache", "cache"]


def test_graph_records_the_provider_rule_the_dag_uses() -> None:
    from airflow_gpu_dag import PACKING_WEIGHT_RULE
    from airflow_gpu_dag.airflow.graph import build_task_graph

    with DAG("cp_rule", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as cp_dag:
        _bash("a", "10m")
    with DAG("packing_rule", default_args={"weight_rule": PACKING_WEIGHT_RULE}) as packing_dag:
        _bash("a", "10m")
    with DAG("stock_rule") as stock_dag:
        _bash("a", "10m")
    for dag, expected in ((cp_dag, "critical_path"), (packing_dag, "packing"), (stock_dag, None)):
        assert build_task_graph(dag)[0].priority_rule == expected  # authoring DAG: class-path string
        assert build_task_graph(_serialized(dag))[0].priority_rule == expected  # scheduler: instance


def test_edge_labels_across_task_groups_become_edge_kinds() -> None:
    from airflow.sdk import Label

    from airflow_gpu_dag.airflow.graph import build_task_graph

    with DAG("labels") as dag:
        with TaskGroup("pretrain") as pretrain:
            _bash("train", "1h") >> _bash("evaluate", "10m")
        check = _bash("check", "5m")
        prep = _bash("prep", "10m")
        pretrain >> Label("control") >> check
        prep >> Label("data") >> pretrain
    for reader in (dag, _serialized(dag)):
        graph, _ = build_task_graph(reader)
        assert graph.edge_kind("pretrain.evaluate", "check") == "control"
        assert graph.edge_kind("prep", "pretrain.train") == "data"
        assert graph.edge_kind("pretrain.train", "pretrain.evaluate") is None


def test_the_weight_rule_constants_name_the_strategy_classes() -> None:
    """The constants DAG files use are the class paths stored in serialized DAGs."""
    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE
    from airflow_gpu_dag.priority_strategy import PackingPriorityStrategy

    for constant, cls in (
        (CRITICAL_PATH_WEIGHT_RULE, CriticalPathPriorityStrategy),
        (PACKING_WEIGHT_RULE, PackingPriorityStrategy),
    ):
        assert constant == f"{cls.__module__}.{cls.__qualname__}"
