"""Validation: every check names the DAG, the task and the fix."""

from __future__ import annotations

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import exclusive
from airflow_gpu_dag.core import GpuRequest, TaskGraph, TaskNode, ValidationPolicy, validate_graph
from airflow_gpu_dag.core.analysis.validation import (
    GraphValidationError,
    find_hidden_dependencies,
    hidden_dependency_pairs,
)
from airflow_gpu_dag.core.model.pools import MAX_POOL_NAME_LENGTH
from airflow_gpu_dag.operators.gpu import GpuBashOperator
from airflow_gpu_dag.operators.gpu_spec import GpuTaskError


def _codes(report) -> list[tuple[str, str | None]]:  # type: ignore[no-untyped-def]
    return [(f.code, f.task_id) for f in report.findings]


def test_clean_graph_has_no_findings() -> None:
    graph = TaskGraph("ok")
    graph.add_task(TaskNode("prep", duration=1200))
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(4), pool="gpu", pool_slots=4))
    graph.add_edge("prep", "train")
    report = validate_graph(graph, ValidationPolicy(pool_slots={"gpu": 8}, max_gpus_per_host=8))
    assert report.findings == []
    assert report.ok
    report.raise_for_errors()


def test_cycle_error_names_cycle() -> None:
    graph = TaskGraph.from_edges("loop", {"a": 900, "b": 900}, [("a", "b"), ("b", "a")])
    report = validate_graph(graph)
    (finding,) = report.errors
    assert finding.code == "cycle"
    assert "a -> b -> a" in str(finding) and "DAG 'loop'" in str(finding)
    with pytest.raises(GraphValidationError, match="remove one edge"):
        report.raise_for_errors()


def test_impossible_and_unknown_pool() -> None:
    graph = TaskGraph("big")
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(16), pool="gpu", pool_slots=16))
    graph.add_task(TaskNode("eval", duration=1200, gpu=GpuRequest(1), pool="gpu_h100", pool_slots=1))
    report = validate_graph(graph, ValidationPolicy(pool_slots={"gpu": 8}, max_gpus_per_host=8))
    assert _codes(report) == [
        ("impossible-request", "train"),
        ("impossible-request", "train"),
        ("unknown-pool", "eval"),
    ]
    messages = [str(f) for f in report.errors]
    assert "only 8" in messages[0] and "request at most 8" in messages[0]
    assert "largest host has 8" in messages[1]
    assert "gpu_h100" in messages[2] and "airflow pools set gpu_h100" in messages[2]


def test_unknown_gpu_type() -> None:
    graph = TaskGraph("t")
    graph.add_task(TaskNode("x", duration=1200, gpu=GpuRequest(1, gpu_type="tpu")))
    report = validate_graph(graph, ValidationPolicy(known_gpu_types=frozenset({"a100"})))
    assert _codes(report) == [("unknown-gpu-type", "x")]


def test_estimate_warnings() -> None:
    graph = TaskGraph("g")
    graph.add_task(TaskNode("tiny", duration=60))
    graph.add_task(TaskNode("huge", duration=5 * 3600))
    graph.add_task(TaskNode("unknown", duration=1800, gpu=GpuRequest(1), duration_declared=False))
    graph.add_task(TaskNode("marker", duration=0))
    graph.add_task(TaskNode("fine", duration=3600))
    report = validate_graph(graph)
    assert report.ok
    assert _codes(report) == [
        ("granularity-too-fine", "tiny"),
        ("granularity-too-coarse", "huge"),
        ("missing-estimate", "unknown"),
    ]
    quiet = validate_graph(graph, ValidationPolicy(check_granularity=False))
    assert _codes(quiet) == [("missing-estimate", "unknown")]


def test_cpu_tasks_and_teardowns_without_an_estimate_are_not_warned_about_by_default() -> None:
    """Only a GPU task without an estimate is a ``missing-estimate`` warning by default: a CPU task or a
    teardown without one is named only under ``lint --strict``, which would otherwise fail on each."""
    graph = TaskGraph("g")
    graph.add_task(TaskNode("gpu", duration=1800, gpu=GpuRequest(1), duration_declared=False))
    graph.add_task(
        TaskNode("cpu", duration=1800, duration_declared=False, attrs={"duration_default": "deployment"})
    )
    graph.add_task(
        TaskNode("dag_default", duration=600, duration_declared=False, attrs={"duration_default": "dag"})
    )
    graph.add_task(
        TaskNode("teardown", duration=0, duration_declared=False, attrs={"duration_default": "teardown"})
    )
    policy = ValidationPolicy(check_granularity=False)
    assert _codes(validate_graph(graph, policy)) == [("missing-estimate", "gpu")]
    strict = validate_graph(graph, ValidationPolicy(check_granularity=False, cpu_estimates=True))
    assert _codes(strict) == [("missing-estimate", "gpu"), ("missing-estimate", "cpu")]
    (cpu,) = [f for f in strict.findings if f.task_id == "cpu"]
    assert cpu.message == "no duration estimate; assuming 30m, [gpu_dag] default_duration."
    assert "gpu_dag_default_duration" in cpu.fix


def test_hidden_dependencies() -> None:
    graph = TaskGraph("data")
    graph.add_task(TaskNode("clean", duration=1200, outputs=("s3://lake/clean/",)))
    graph.add_task(TaskNode("train", duration=1200, inputs=("s3://lake/clean/shard-1",)))
    graph.add_task(TaskNode("stats", duration=1200, inputs=("s3://lake/clean",)))
    graph.add_task(TaskNode("other", duration=1200, inputs=("s3://lake/clean-v2",)))
    graph.add_task(TaskNode("reader2", duration=1200, inputs=("s3://lake/clean/shard-1",)))
    graph.add_edge("clean", "stats")
    findings = find_hidden_dependencies(graph)
    # train and reader2 read inside what clean writes, unordered; stats is ordered; other is a different path;
    # two readers of the same path are not a conflict.
    assert sorted(f.task_id for f in findings) == ["reader2", "train"]
    assert all("clean >> " in f.fix for f in findings)


def test_two_unordered_writers() -> None:
    graph = TaskGraph("w")
    graph.add_task(TaskNode("a", duration=1200, outputs=("/data/ckpt",)))
    graph.add_task(TaskNode("b", duration=1200, outputs=("/data/ckpt/epoch1",)))
    (finding,) = find_hidden_dependencies(graph)
    assert "also writes" in finding.message
    graph.add_edge("a", "b")
    assert find_hidden_dependencies(graph) == []


def test_completeness_sensor_upstream_guards_the_reader() -> None:
    graph = TaskGraph("guard")
    graph.add_task(TaskNode("write", duration=1200, outputs=("/lake/clean",)))
    graph.add_task(TaskNode("wait", duration=0, awaits=("/lake/clean/",)))
    graph.add_task(TaskNode("read", duration=1200, inputs=("/lake/clean/part-0",)))
    graph.add_task(TaskNode("unguarded", duration=1200, inputs=("/lake/clean",)))
    graph.add_edge("wait", "read")
    (finding,) = find_hidden_dependencies(graph)
    assert finding.task_id == "unguarded"
    # a second writer is still a race: awaiting completeness does not order writes
    graph.add_task(TaskNode("rewrite", duration=1200, outputs=("/lake/clean",)))
    graph.add_edge("wait", "rewrite")
    pairs = {(d.writer, d.other, d.other_writes) for d in hidden_dependency_pairs(graph)}
    assert pairs == {
        ("write", "unguarded", False),
        ("rewrite", "unguarded", False),
        ("rewrite", "write", True),
    }


def test_the_pool_of_a_cpu_task_is_not_checked_against_the_gpu_pools() -> None:
    # the known pools are GPU pools ([gpu_dag] pools, lint --pool): before, a CPU task on an existing
    # Airflow pool 'etl' was an unknown-pool error, an import error under the cluster policy
    graph = TaskGraph("mixed")
    graph.add_task(TaskNode("extract", duration=600, pool="etl"))
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(2), pool="gpu_h100", pool_slots=2))
    report = validate_graph(graph, ValidationPolicy(pool_slots={"gpu_default": 8}))
    assert _codes(report) == [("unknown-pool", "train")]


def test_unknown_pool_fix_is_a_command_that_runs_as_written() -> None:
    """A pool name with a space was pasted unquoted into ``airflow pools set``."""
    graph = TaskGraph("spaces")
    graph.add_task(TaskNode("train", duration=60, gpu=GpuRequest(1), pool="gpu pool", pool_slots=1))
    (finding,) = validate_graph(graph, ValidationPolicy(pool_slots={"gpu_default": 8})).errors
    assert finding.code == "unknown-pool" and "airflow pools set 'gpu pool' <slots>" in finding.fix


def test_granularity_of_a_fallback_rung_is_judged_on_its_own_estimate() -> None:
    # Each rung is judged on its own estimate, not on what the plan counts: a 1-hour rung that falls back
    # (plan_rung) counts only its start_within (5 min) but is not too fine; a skipped rung (0) is checked.
    from airflow.sdk import DAG

    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.authoring import Rung, fallback_ladder
    from airflow_gpu_dag.operators import GpuPythonOperator

    def rung(r: Rung) -> GpuPythonOperator:
        return GpuPythonOperator(task_id=r.name, python_callable=print, gpus=r.gpus, duration=r.duration)

    with DAG("gran", schedule=None) as dag:
        fallback_ladder(
            "train",
            [
                Rung("big", gpus=4, start_within="5m", duration="1h"),
                Rung("tiny", gpus=2, start_within="5m", duration="2m"),
                Rung("small", gpus=1, duration="1h30m"),
            ],
            rung,
            plan_rung="small",
        )
    graph, extra = build_task_graph(dag)
    found = {(f.code, f.task_id) for f in validate_graph(graph, extra=extra).findings}
    assert ("granularity-too-fine", "train.big") not in found
    assert ("granularity-too-fine", "train.tiny") in found  # its own 2 minutes


def test_a_rung_without_an_estimate_is_said_to_assume_the_default() -> None:
    # The message gives the rung's own assumed duration, not what the plan counts for it (the
    # start_within wait, or 0 s for a skipped rung).
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.authoring import Rung, fallback_ladder

    with DAG("ladder_default", schedule=None) as dag:
        fallback_ladder(
            "train",
            [Rung("big", gpus=2, start_within="20m"), Rung("mid", gpus=1, start_within="20m"), Rung("small")],
            lambda r: BashOperator(task_id=r.name, bash_command="true"),
            plan_rung="mid",
        )
    graph, extra = build_task_graph(dag, default_duration=1800.0)
    messages = {
        f.task_id: f.message
        for f in validate_graph(graph, extra=extra).findings
        if f.code == "missing-estimate"
    }
    assert set(messages) == {"train.big", "train.mid"}  # the last rung asks for no GPU: a CPU task
    assert all(
        m == "no duration estimate; assuming 30m, [gpu_dag] default_duration." for m in messages.values()
    )


@pytest.fixture
def _no_configured_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    for option in ("POOLS", "MAX_GPUS_PER_HOST", "INVENTORY", "INVENTORY_SOURCE"):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{option}", raising=False)


@pytest.mark.usefixtures("_no_configured_limits")
def test_a_pool_name_longer_than_airflow_stores_is_refused() -> None:
    long = "p" * (MAX_POOL_NAME_LENGTH + 1)
    graph = TaskGraph("long")
    graph.add_task(TaskNode("cpu", duration=900, pool=long))
    (error,) = [f for f in validate_graph(graph, ValidationPolicy()).findings if f.code == "bad-pool-name"]
    assert error.is_error and "257 characters" in error.message and "256" in error.message
    with pytest.raises(GpuTaskError, match="257 characters"), DAG("long_op", schedule=None):
        GpuBashOperator(task_id="t", bash_command="true", pool=long)
    too_long = "characters; Airflow stores at most 256"
    with pytest.raises(GpuTaskError, match=too_long), DAG("long_type", schedule=None):
        GpuBashOperator(task_id="t", bash_command="true", gpu_type="a" * 260)  # its pool: gpu_aaa...
    with DAG("long_excl", schedule=None):
        tasks = [EmptyOperator(task_id=f"t{i}") for i in range(2)]
    with pytest.raises(ValueError, match="257 characters"):
        exclusive(tasks, pool=long, pool_size=2)
