"""Validation: every check names the DAG, the task and the fix."""

from __future__ import annotations

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import exclusive
from airflow_gpu_dag.core import GpuRequest, TaskGraph, TaskNode, ValidationPolicy, validate_graph
from airflow_gpu_dag.core.analysis.gpu_requests import InventorySummary, RequestLimits
from airflow_gpu_dag.core.analysis.validation import (
    GraphValidationError,
    HiddenDependency,
    ValidationReport,
    cycle_finding,
    find_hidden_dependencies,
    hidden_dependency_pairs,
    normalise_path,
    path_contains,
    paths_overlap,
)
from airflow_gpu_dag.core.model.findings import ERROR, WARNING, Finding
from airflow_gpu_dag.core.model.pools import MAX_POOL_NAME_LENGTH
from airflow_gpu_dag.operators.gpu import GpuBashOperator
from airflow_gpu_dag.operators.gpu_spec import GpuTaskError
from tests.unit.graphs import gpu_graph


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


# -- the report --------------------------------------------------------------------------------------
def test_an_empty_graph_validates_clean() -> None:
    """A DAG with no task (all tasks commented out) is valid, not a crash in the cycle or path checks."""
    report = validate_graph(TaskGraph("empty"), ValidationPolicy(pool_slots={}, max_gpus_per_host=1))
    assert report.dag_id == "empty" and report.findings == [] and report.ok
    assert hidden_dependency_pairs(TaskGraph("empty")) == []


def test_findings_the_reader_made_come_first_and_count_as_errors() -> None:
    """``extra`` (a malformed estimate the DAG reader could not parse) is kept in front of the graph's
    own findings, and an error among them makes the report fail."""
    bad = Finding(ERROR, "bad-estimate", "g", "train", "duration 'forty' cannot be parsed.", "set one.")
    graph = TaskGraph("g")
    graph.add_task(TaskNode("train", duration=60))
    report = validate_graph(graph, extra=[bad])
    assert report.findings == [bad, *report.warnings]
    assert _codes(report) == [("bad-estimate", "train"), ("granularity-too-fine", "train")]
    assert report.errors == [bad] and not report.ok


def test_errors_and_warnings_partition_the_findings() -> None:
    warning = Finding(WARNING, "missing-estimate", "d", "a", "m.", "f.")
    error = Finding(ERROR, "cycle", "d", "a", "m.", "f.")
    report = ValidationReport("d", [warning, error, warning])
    assert report.errors == [error]
    assert report.warnings == [warning, warning]
    assert not report.ok
    assert ValidationReport("d", [warning]).ok


def test_raise_for_errors_lists_every_error_and_no_warning() -> None:
    """The cluster policy raises this as the DAG's import error: each error on its own line, the
    warnings (logged separately) left out."""
    graph = TaskGraph("two")
    graph.add_task(TaskNode("a", duration=1200, gpu=GpuRequest(16), pool="gpu", pool_slots=16))
    graph.add_task(TaskNode("b", duration=1200, gpu=GpuRequest(1), pool="gpu_x", pool_slots=1))
    graph.add_task(TaskNode("c", duration=60))
    report = validate_graph(graph, ValidationPolicy(pool_slots={"gpu": 8}))
    with pytest.raises(GraphValidationError) as raised:
        report.raise_for_errors()
    assert isinstance(raised.value, ValueError)
    assert raised.value.findings == report.errors
    assert [(f.code, f.task_id) for f in raised.value.findings] == [
        ("impossible-request", "a"),
        ("unknown-pool", "b"),
    ]
    lines = str(raised.value).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("ERROR [impossible-request] DAG 'two', task 'a': ")
    assert lines[1].startswith("ERROR [unknown-pool] DAG 'two', task 'b': ")


def test_raise_for_errors_is_silent_when_there_are_only_warnings() -> None:
    graph = TaskGraph("w")
    graph.add_task(TaskNode("tiny", duration=60))
    report = validate_graph(graph)
    assert _codes(report) == [("granularity-too-fine", "tiny")]
    report.raise_for_errors()  # no exception: a warning does not stop a DAG


def test_the_policy_hands_its_limits_to_the_request_check() -> None:
    inventory = InventorySummary((("a100", 81920),), "static", "#0 a100 80GiB")
    policy = ValidationPolicy(
        pool_slots={"gpu": 8}, max_gpus_per_host=4, known_gpu_types=frozenset({"h100"}), inventory=inventory
    )
    assert policy.request_limits() == RequestLimits(
        pool_slots={"gpu": 8},
        max_gpus_per_host=4,
        inventory=inventory,
        known_gpu_types=frozenset({"h100"}),
    )
    assert policy.request_limits().gpu_types == frozenset({"a100"})  # the inventory wins


# -- every finding names the DAG, the task and the fix, with its documented severity -------------------
_FALLBACK = {"ladder": "train", "rungs": 2, "index": 0, "start_within_s": 300.0, "expected_duration": 3600.0}


@pytest.mark.parametrize(
    ("code", "severity", "nodes", "policy"),
    [
        pytest.param(
            "impossible-request",
            ERROR,
            [TaskNode("t", 3600, gpu=GpuRequest(16), pool="gpu", pool_slots=16)],
            ValidationPolicy(pool_slots={"gpu": 8}),
            id="impossible-request",
        ),
        pytest.param(
            "unknown-pool",
            ERROR,
            [TaskNode("t", 3600, gpu=GpuRequest(1), pool="gpu_x", pool_slots=1)],
            ValidationPolicy(pool_slots={"gpu": 8}),
            id="unknown-pool",
        ),
        pytest.param(
            "unknown-gpu-type",
            ERROR,
            [TaskNode("t", 3600, gpu=GpuRequest(1, gpu_type="tpu"), pool="gpu_default")],
            ValidationPolicy(known_gpu_types=frozenset({"a100"})),
            id="unknown-gpu-type",
        ),
        pytest.param(
            "implausible-gpu-memory",
            ERROR,
            [TaskNode("t", 3600, gpu=GpuRequest(1, memory_mib=8000 * 1024 * 1024), pool="gpu_default")],
            ValidationPolicy(),
            id="implausible-gpu-memory",
        ),
        pytest.param(
            "pool-type-mismatch",
            ERROR,
            [TaskNode("t", 3600, gpu=GpuRequest(1, gpu_type="a100"), pool="gpu_h100")],
            ValidationPolicy(known_gpu_types=frozenset({"a100", "h100"})),
            id="pool-type-mismatch-known-type",
        ),
        pytest.param(
            "pool-type-mismatch",
            WARNING,
            [TaskNode("t", 3600, gpu=GpuRequest(1, gpu_type="a100"), pool="gpu_h100")],
            ValidationPolicy(),
            id="pool-type-mismatch-type-shaped-pool",
        ),
        pytest.param(
            "bad-pool-name",
            ERROR,
            [TaskNode("t", 3600, gpu=GpuRequest(1), pool="g" * 300)],
            ValidationPolicy(),
            id="bad-pool-name",
        ),
        pytest.param(
            "gpu-type-spelling",
            WARNING,
            [TaskNode("t", 3600, gpu=GpuRequest(1, gpu_type="a-100"), pool="gpu_a_100")],
            ValidationPolicy(),
            id="gpu-type-spelling",
        ),
        pytest.param(
            "gpu-in-default-pool",
            WARNING,
            [TaskNode("t", 3600, gpu=GpuRequest(2), pool="default_pool", pool_slots=2)],
            ValidationPolicy(),
            id="gpu-in-default-pool",
        ),
        pytest.param(
            "rung-never-starts",
            WARNING,
            [
                TaskNode(
                    "t", 300, gpu=GpuRequest(16), pool="gpu", pool_slots=16, attrs={"fallback": _FALLBACK}
                )
            ],
            ValidationPolicy(pool_slots={"gpu": 8}),
            id="rung-never-starts",
        ),
        pytest.param(
            "missing-estimate",
            WARNING,
            [TaskNode("t", 1800, gpu=GpuRequest(1), duration_declared=False)],
            ValidationPolicy(),
            id="missing-estimate",
        ),
        pytest.param("granularity-too-fine", WARNING, [TaskNode("t", 60)], ValidationPolicy(), id="fine"),
        pytest.param(
            "granularity-too-coarse", WARNING, [TaskNode("t", 3 * 3600)], ValidationPolicy(), id="coarse"
        ),
        pytest.param(
            "hidden-dependency",
            WARNING,
            [TaskNode("w", 1200, outputs=("/data/x",)), TaskNode("t", 1200, inputs=("/data/x",))],
            ValidationPolicy(),
            id="hidden-dependency",
        ),
    ],
)
def test_each_finding_names_the_dag_the_task_and_a_fix_with_its_documented_severity(
    code: str, severity: str, nodes: list[TaskNode], policy: ValidationPolicy
) -> None:
    """The severities are those of the lint codes table in docs/cli.md; a lint line or an import error
    must say where the problem is and what to do."""
    graph = TaskGraph("d")
    for node in nodes:
        graph.add_task(node)
    (finding,) = [f for f in validate_graph(graph, policy).findings if f.code == code]
    assert (finding.severity, finding.dag_id, finding.task_id) == (severity, "d", "t")
    assert str(finding).startswith(f"{severity.upper()} [{code}] DAG 'd', task 't': ")
    assert " Fix: " in str(finding) and len(finding.fix) > 10
    assert finding.to_dict()["code"] == code


# -- cycles ----------------------------------------------------------------------------------------------
def test_a_task_that_depends_on_itself_is_a_cycle_of_one() -> None:
    graph = TaskGraph("self")
    graph.add_task(TaskNode("a", duration=900))
    graph.add_edge("a", "a")
    (finding,) = validate_graph(graph).findings
    assert (finding.severity, finding.code, finding.task_id) == (ERROR, "cycle", "a")
    assert finding.message.startswith("dependency cycle a -> a. ")


def test_cycle_finding_names_the_first_task_and_airflows_own_message() -> None:
    finding = cycle_finding("d", ["x", "y", "z", "x"])
    assert (finding.severity, finding.code, finding.dag_id, finding.task_id) == (ERROR, "cycle", "d", "x")
    assert finding.message.startswith("dependency cycle x -> y -> z -> x. ")
    assert "'Cycle detected in Dag: d. Faulty task: ...'" in finding.message
    assert finding.fix.startswith("remove one edge of the cycle")
    assert "airflow gpu-dag lint" in finding.fix


def test_a_cyclic_graph_still_gets_its_resource_and_estimate_checks_but_no_path_check() -> None:
    """The other errors of a cyclic DAG are reported in the same lint run; the hidden-dependency check
    (which assumes an acyclic graph) is skipped, not looped forever."""
    graph = gpu_graph({"a": (60, 0), "b": (1200, 16)}, [("a", "b"), ("b", "a")], dag_id="loop")
    graph.nodes["a"].outputs = ("/data/x",)
    graph.nodes["b"].inputs = ("/data/x",)
    graph.add_task(TaskNode("c", duration=1200, inputs=("/data/x",)))  # unordered: would be reported
    report = validate_graph(graph, ValidationPolicy(max_gpus_per_host=8))
    assert _codes(report) == [
        ("cycle", "a"),
        ("impossible-request", "b"),
        ("granularity-too-fine", "a"),
    ]


# -- pools, hosts and the inventory ----------------------------------------------------------------------
def test_pools_are_not_checked_when_no_pool_sizes_are_known() -> None:
    """docs/cli.md: with neither ``[gpu_dag] pools`` nor ``--pool``, pools are not checked."""
    graph = TaskGraph("free")
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(64), pool="anything", pool_slots=64))
    assert validate_graph(graph, ValidationPolicy()).findings == []


def test_an_empty_pool_list_makes_every_gpu_pool_unknown() -> None:
    graph = TaskGraph("none")
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(1), pool="gpu_default", pool_slots=1))
    (finding,) = validate_graph(graph, ValidationPolicy(pool_slots={})).findings
    assert finding.code == "unknown-pool"
    assert finding.message == "pool 'gpu_default' does not exist (known pools: none)."
    assert finding.fix == (
        "create it (airflow pools set gpu_default <slots> '<description>') or use a known pool."
    )


def test_a_gpu_task_in_the_default_pool_is_warned_about_not_called_an_unknown_pool() -> None:
    graph = TaskGraph("dp")
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(2), pool="default_pool", pool_slots=2))
    report = validate_graph(graph, ValidationPolicy(pool_slots={"gpu_default": 8}))
    assert _codes(report) == [("gpu-in-default-pool", "train")]
    assert report.ok
    assert "pool_slots=2 (e.g. pool='gpu_default')" in report.findings[0].fix


def test_a_pool_of_no_slots_can_never_run_a_task() -> None:
    """``[gpu_dag] pools`` accepts 0 slots: a GPU task there waits forever, so it is an error whose fix
    is to give the pool slots (not to request at most 0 GPUs)."""
    graph = TaskGraph("zero")
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(1), pool="gpu", pool_slots=1))
    (finding,) = validate_graph(graph, ValidationPolicy(pool_slots={"gpu": 0})).findings
    assert (finding.severity, finding.code, finding.task_id) == (ERROR, "impossible-request", "train")
    assert finding.message.startswith("needs 1 GPUs but pool 'gpu' has only 0 in all, so it could never run")
    assert finding.fix.startswith("give pool 'gpu' slots (it has none")


def test_a_cpu_task_asking_more_slots_than_its_listed_pool_has_is_impossible() -> None:
    graph = TaskGraph("cpu")
    graph.add_task(TaskNode("extract", duration=1200, pool="etl", pool_slots=3))
    (finding,) = validate_graph(graph, ValidationPolicy(pool_slots={"etl": 2})).errors
    assert finding.code == "impossible-request"
    assert finding.message.startswith("needs 3 slots but pool 'etl' has only 2 in all")
    assert finding.fix == "request at most 2 slots, or grow pool 'etl'."


def test_a_request_exactly_the_size_of_the_pool_and_the_host_is_fine() -> None:
    graph = TaskGraph("edge")
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(8), pool="gpu", pool_slots=8))
    assert validate_graph(graph, ValidationPolicy(pool_slots={"gpu": 8}, max_gpus_per_host=8)).findings == []


def test_more_gpus_than_the_largest_host_is_an_error_even_without_pool_sizes() -> None:
    graph = TaskGraph("host")
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(9), pool="gpu", pool_slots=9))
    (finding,) = validate_graph(graph, ValidationPolicy(max_gpus_per_host=8)).findings
    assert finding.code == "impossible-request" and finding.is_error
    assert finding.message == "needs 9 GPUs but the largest host has 8 (gpu_dag.max_gpus_per_host)."
    assert finding.fix == "request at most 8 GPUs or split the task."


_FOUR_A100 = InventorySummary((("a100", 81920),) * 4, "static", "4x a100 80GiB")


def test_more_gpus_than_the_inventory_host_has_is_an_error() -> None:
    graph = TaskGraph("inv")
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(8), pool="gpu_default", pool_slots=8))
    (finding,) = validate_graph(graph, ValidationPolicy(inventory=_FOUR_A100)).findings
    assert (finding.code, finding.task_id, finding.is_error) == ("impossible-request", "train", True)
    assert "the static inventory has only 4 GPU(s) of that kind (4x a100 80GiB;" in finding.message
    assert finding.fix.startswith("request fewer GPUs or less memory, or correct [gpu_dag] inventory")


def test_more_memory_per_gpu_than_the_inventory_gpus_have_is_an_error() -> None:
    graph = TaskGraph("mem")
    big = GpuRequest(1, memory_mib=120 * 1024)
    graph.add_task(TaskNode("train", duration=3600, gpu=big, pool="gpu_default", pool_slots=1))
    (finding,) = validate_graph(graph, ValidationPolicy(inventory=_FOUR_A100)).findings
    assert finding.code == "impossible-request"
    assert "has only 0 GPU(s) with 120GiB of that kind" in finding.message


def test_a_gpu_type_unknown_to_the_inventory_names_the_known_types_and_where_they_come_from() -> None:
    nvml = InventorySummary((("a100", 81920),) * 4, "nvml", "4x a100 80GiB")
    graph = TaskGraph("type")
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(1, gpu_type="h100"), pool="gpu_default"))
    (finding,) = validate_graph(graph, ValidationPolicy(inventory=nvml)).findings
    assert (finding.code, finding.is_error) == ("unknown-gpu-type", True)
    assert finding.message.startswith("GPU type 'h100' is not in the inventory (known types: a100; ")
    assert "inventory_source = nvml" in finding.message
    assert "set [gpu_dag] inventory_source = auto" in finding.fix


def test_a_gpu_type_is_matched_to_the_inventory_whatever_its_case() -> None:
    graph = TaskGraph("case")
    graph.add_task(TaskNode("train", duration=3600, gpu=GpuRequest(4, gpu_type="A100"), pool="gpu_a100"))
    policy = ValidationPolicy(inventory=_FOUR_A100, known_gpu_types=frozenset({"h100"}))
    assert validate_graph(graph, policy).findings == []


def test_the_last_rung_of_a_ladder_that_never_fits_is_an_error_not_a_warning() -> None:
    """A rung that can fall back only waits its ``start_within``; the last rung has no next one and
    would wait forever."""
    graph = TaskGraph("ladder")
    last = {**_FALLBACK, "index": 1}
    graph.add_task(
        TaskNode(
            "train.big", 300, gpu=GpuRequest(16), pool="gpu", pool_slots=16, attrs={"fallback": _FALLBACK}
        )
    )
    graph.add_task(
        TaskNode("train.last", 3600, gpu=GpuRequest(16), pool="gpu", pool_slots=16, attrs={"fallback": last})
    )
    report = validate_graph(graph, ValidationPolicy(pool_slots={"gpu": 8}))
    assert [(f.severity, f.code, f.task_id) for f in report.findings] == [
        (WARNING, "rung-never-starts", "train.big"),
        (ERROR, "impossible-request", "train.last"),
    ]
    big = report.findings[0]
    assert "As rung 1 of 2 of fallback ladder 'train'" in big.message and "(300s)" in big.message
    assert big.fix == "drop the rung, or request at most 8 GPUs, or grow pool 'gpu'."


# -- estimates -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("seconds", "code"), [(599, "granularity-too-fine"), (7201, "granularity-too-coarse")]
)
def test_granularity_warns_just_outside_ten_minutes_to_two_hours(seconds: float, code: str) -> None:
    graph = TaskGraph("bounds")
    graph.add_task(TaskNode("t", duration=seconds))
    assert _codes(validate_graph(graph)) == [(code, "t")]


@pytest.mark.parametrize("seconds", [600, 7200])
def test_granularity_accepts_exactly_ten_minutes_and_two_hours(seconds: float) -> None:
    graph = TaskGraph("bounds")
    graph.add_task(TaskNode("t", duration=seconds))
    assert validate_graph(graph).findings == []


def test_granularity_messages_give_the_estimate_and_the_bound() -> None:
    graph = TaskGraph("msg")
    graph.add_task(TaskNode("tiny", duration=90))
    graph.add_task(TaskNode("month", duration=30 * 86400))  # huge, but a valid estimate
    fine, coarse = validate_graph(graph).findings
    assert fine.message == "estimated 1m30s, under 10m: scheduling overhead dominates."
    assert fine.fix == "merge it with a neighbouring step."
    assert coarse.message == "estimated 720h00m, over 2h00m: the scheduler loses flexibility."
    assert coarse.fix.startswith("split it into atomic steps")
    assert not fine.is_error and not coarse.is_error


def test_granularity_follows_the_policys_bounds() -> None:
    graph = TaskGraph("custom")
    graph.add_task(TaskNode("a", duration=30))
    graph.add_task(TaskNode("b", duration=300))
    graph.add_task(TaskNode("c", duration=1200))
    report = validate_graph(graph, ValidationPolicy(min_task_seconds=60, max_task_seconds=600))
    assert _codes(report) == [("granularity-too-fine", "a"), ("granularity-too-coarse", "c")]
    assert report.findings[1].message.startswith("estimated 20m, over 10m:")


def test_a_task_estimated_at_zero_seconds_is_not_too_fine_whatever_it_runs_on() -> None:
    """A 0 estimate is a marker (a sensor, a branch): no scheduling overhead to warn about."""
    graph = TaskGraph("zero")
    graph.add_task(TaskNode("gpu_marker", duration=0, gpu=GpuRequest(1), pool="gpu", pool_slots=1))
    graph.add_task(TaskNode("cpu_marker", duration=0))
    assert validate_graph(graph).findings == []


def test_a_task_without_an_estimate_is_not_judged_on_its_assumed_duration() -> None:
    """Its default is no estimate of the author's: only ``missing-estimate``, not a granularity warning."""
    graph = TaskGraph("assumed")
    graph.add_task(TaskNode("gpu", duration=5 * 3600, gpu=GpuRequest(1), duration_declared=False))
    graph.add_task(TaskNode("cpu", duration=60, duration_declared=False))
    assert _codes(validate_graph(graph)) == [("missing-estimate", "gpu")]


def test_a_missing_estimate_names_the_default_it_assumes() -> None:
    graph = TaskGraph("defaults")
    graph.add_task(
        TaskNode(
            "dag",
            duration=1200,
            gpu=GpuRequest(1),
            duration_declared=False,
            attrs={"duration_default": "dag"},
        )
    )
    graph.add_task(TaskNode("bare", duration=5400, gpu=GpuRequest(1), duration_declared=False))
    messages = {f.task_id: f.message for f in validate_graph(graph).findings}
    assert messages == {
        "dag": "no duration estimate; assuming 20m, the DAG's gpu_dag_default_duration.",
        "bare": "no duration estimate; assuming 1h30m.",
    }


def test_strict_estimates_warn_about_a_cpu_task_only_without_a_dag_default() -> None:
    """``lint --strict``: a CPU task whose DAG sets ``gpu_dag_default_duration`` has an estimate the
    author chose; one falling back on the deployment default (or none) is named."""
    graph = TaskGraph("strict")
    graph.add_task(TaskNode("dag", duration=1200, duration_declared=False, attrs={"duration_default": "dag"}))
    graph.add_task(TaskNode("bare", duration=1200, duration_declared=False))
    graph.add_task(TaskNode("declared", duration=1200))
    policy = ValidationPolicy(cpu_estimates=True)
    assert _codes(validate_graph(graph, policy)) == [("missing-estimate", "bare")]


def test_a_gpu_teardown_without_an_estimate_is_not_warned_about() -> None:
    graph = TaskGraph("teardown")
    graph.add_task(
        TaskNode(
            "release",
            duration=0,
            gpu=GpuRequest(1),
            duration_declared=False,
            attrs={"duration_default": "teardown"},
        )
    )
    assert validate_graph(graph, ValidationPolicy(cpu_estimates=True)).findings == []


def test_a_skipped_rung_is_judged_on_its_own_estimate_not_the_zero_the_plan_counts() -> None:
    graph = TaskGraph("rungs")
    skipped = {**_FALLBACK, "role": "contingent", "expected_duration": 5 * 3600.0}
    waited = {**_FALLBACK, "role": "fell back", "expected_duration": 3600.0}
    graph.add_task(TaskNode("train.skipped", duration=0.0, attrs={"fallback": skipped}))
    graph.add_task(TaskNode("train.waited", duration=300.0, attrs={"fallback": waited}))
    (finding,) = validate_graph(graph).findings
    assert (finding.code, finding.task_id) == ("granularity-too-coarse", "train.skipped")
    assert finding.message.startswith("estimated 5h00m, over 2h00m")


# -- hidden dependencies ---------------------------------------------------------------------------------
def test_a_hidden_dependency_says_who_reads_what_who_writes_it_and_the_edge_to_add() -> None:
    graph = TaskGraph("lake")
    graph.add_task(TaskNode("clean", duration=1200, outputs=("s3://lake/clean/",)))
    graph.add_task(TaskNode("train", duration=1200, inputs=(" s3://lake/clean/shard-1 ",)))
    (finding,) = validate_graph(graph).findings
    assert (finding.severity, finding.code, finding.dag_id, finding.task_id) == (
        WARNING,
        "hidden-dependency",
        "lake",
        "train",
    )
    assert finding.message == (
        "'train' reads 's3://lake/clean/shard-1', which overlaps 's3://lake/clean' written by 'clean', "
        "with no dependency between the two tasks."
    )
    assert finding.fix.startswith("add the edge clean >> train, or a completeness sensor on the dataset")
    assert hidden_dependency_pairs(graph) == [
        HiddenDependency("clean", "s3://lake/clean", "train", "s3://lake/clean/shard-1", False)
    ]


def test_an_indirect_path_either_way_orders_writer_and_reader() -> None:
    """Neither a reader downstream of the writer through another task, nor one that runs before the
    writer (it reads the previous data), is a hidden dependency."""
    graph = TaskGraph("order")
    graph.add_task(TaskNode("write", duration=1200, outputs=("/d/x",)))
    graph.add_task(TaskNode("middle", duration=1200))
    graph.add_task(TaskNode("after", duration=1200, inputs=("/d/x",)))
    graph.add_task(TaskNode("before", duration=1200, inputs=("/d/x/part",)))
    graph.add_edge("write", "middle")
    graph.add_edge("middle", "after")
    graph.add_edge("before", "write")
    assert hidden_dependency_pairs(graph) == []


def test_a_pair_sharing_several_paths_is_reported_once() -> None:
    graph = TaskGraph("once")
    graph.add_task(TaskNode("w", duration=1200, outputs=("/a", "/b")))
    graph.add_task(TaskNode("r", duration=1200, inputs=("/a", "/b/c")))
    assert [(d.writer, d.other) for d in hidden_dependency_pairs(graph)] == [("w", "r")]


def test_a_writer_of_the_root_overlaps_every_path() -> None:
    graph = TaskGraph("root")
    graph.add_task(TaskNode("wipe", duration=1200, outputs=("/",)))
    graph.add_task(TaskNode("read", duration=1200, inputs=("/data/x",)))
    graph.add_task(TaskNode("sibling", duration=1200, inputs=("/datax",)))
    pairs = {(d.writer, d.writer_path, d.other) for d in hidden_dependency_pairs(graph)}
    assert pairs == {("wipe", "/", "read"), ("wipe", "/", "sibling")}


def test_a_reader_that_awaits_the_dataset_itself_is_guarded() -> None:
    graph = TaskGraph("self_guard")
    graph.add_task(TaskNode("write", duration=1200, outputs=("/lake/clean",)))
    graph.add_task(TaskNode("read", duration=1200, inputs=("/lake/clean/p0",), awaits=("/lake/clean",)))
    assert find_hidden_dependencies(graph) == []


def test_a_task_that_reads_and_writes_one_path_does_not_conflict_with_itself() -> None:
    graph = TaskGraph("inplace")
    graph.add_task(TaskNode("update", duration=1200, inputs=("/d/x",), outputs=("/d/x",)))
    assert find_hidden_dependencies(graph) == []


# -- defects a review found --------------------------------------------------------------------------------
def test_the_pool_of_an_unknown_gpu_type_is_not_also_an_unknown_pool() -> None:
    """docs/cli.md: for ``unknown-gpu-type`` 'its pool gpu_<type> is then not also reported as
    unknown-pool' (the type is the mistake; creating the pool would not help)."""
    graph = TaskGraph("u")
    graph.add_task(TaskNode("t", duration=3600, gpu=GpuRequest(1, gpu_type="tpu"), pool="gpu_tpu"))
    policy = ValidationPolicy(pool_slots={"gpu_default": 8}, known_gpu_types=frozenset({"a100"}))
    assert _codes(validate_graph(graph, policy)) == [("unknown-gpu-type", "t")]


def test_an_infinite_estimate_is_an_error_finding_not_a_crash() -> None:
    """``validate_graph`` is the pure core's entry point; a graph built outside the DAG reader (which
    refuses it) with an infinite estimate should be refused with a finding, not an exception."""
    graph = TaskGraph("inf")
    graph.add_task(TaskNode("t", duration=float("inf")))
    report = validate_graph(graph)
    assert [(f.code, f.is_error) for f in report.findings] == [("bad-estimate", True)]


def test_a_too_fine_warning_never_says_the_estimate_equals_the_bound() -> None:
    graph = TaskGraph("round")
    graph.add_task(TaskNode("t", duration=599.6))
    messages = [f.message for f in validate_graph(graph).findings]
    assert not any(m.startswith("estimated 10m, under 10m") for m in messages), messages


def test_awaiting_another_part_of_a_dataset_does_not_guard_the_part_read() -> None:
    """A completeness sensor on ``/lake/clean/p1`` says nothing about ``/lake/clean/p0``, which the
    reader reads while the writer of ``/lake/clean`` may still be writing it."""
    graph = TaskGraph("parts")
    graph.add_task(TaskNode("write", duration=1200, outputs=("/lake/clean",)))
    graph.add_task(TaskNode("wait_p1", duration=0, awaits=("/lake/clean/p1",)))
    graph.add_task(TaskNode("read_p0", duration=1200, inputs=("/lake/clean/p0",)))
    graph.add_edge("wait_p1", "read_p0")
    assert [f.task_id for f in find_hidden_dependencies(graph)] == ["read_p0"]


# -- more edge cases ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("duration", [float("nan"), float("-inf"), -1.0, -0.001])
def test_a_non_finite_or_negative_estimate_is_a_bad_estimate_naming_dag_task_and_fix(duration: float) -> None:
    graph = TaskGraph("broken")
    graph.add_task(TaskNode("train", duration=duration, gpu=GpuRequest(1), pool="gpu"))
    report = validate_graph(graph, ValidationPolicy(pool_slots={"gpu": 8}))
    (finding,) = report.findings
    assert (finding.severity, finding.code, finding.dag_id, finding.task_id) == (
        ERROR,
        "bad-estimate",
        "broken",
        "train",
    )
    assert finding.message == f"estimate {duration!r} is not a duration."
    assert "duration='2h'" in finding.fix
    assert not report.ok


def test_a_bad_estimate_without_a_declared_duration_is_not_also_a_missing_estimate() -> None:
    graph = TaskGraph("broken")
    graph.add_task(TaskNode("t", duration=float("nan"), gpu=GpuRequest(1), duration_declared=False))
    assert _codes(validate_graph(graph)) == [("bad-estimate", "t")]


def test_a_rung_with_a_non_finite_estimate_of_its_own_is_a_bad_estimate() -> None:
    graph = TaskGraph("rungs")
    rung = {**_FALLBACK, "role": "contingent", "expected_duration": float("nan")}
    graph.add_task(TaskNode("train.big", duration=0.0, attrs={"fallback": rung}))
    assert _codes(validate_graph(graph)) == [("bad-estimate", "train.big")]


def test_a_rung_with_a_non_numeric_estimate_is_a_bad_estimate_not_a_crash() -> None:
    """The check says a graph built without the DAG reader 'gets the same error, not a crash'."""
    graph = TaskGraph("rungs")
    rung = {**_FALLBACK, "role": "contingent", "expected_duration": "2h"}
    graph.add_task(TaskNode("train.big", duration=0.0, attrs={"fallback": rung}))
    assert _codes(validate_graph(graph)) == [("bad-estimate", "train.big")]


def test_an_estimate_over_366_days_is_a_bad_estimate() -> None:
    """docs/cli.md: ``bad-estimate`` is 'an estimate over 366 days (a typo or the wrong unit)'; the DAG
    reader refuses it, and a graph built another way should get the same error."""
    graph = TaskGraph("typo")
    graph.add_task(TaskNode("train", duration=400 * 86400.0))
    assert [(f.code, f.is_error) for f in validate_graph(graph).findings] == [("bad-estimate", True)]


@pytest.mark.parametrize("seconds", [7201, 7230, 7259.4])
def test_a_too_coarse_warning_never_says_the_estimate_equals_the_bound(seconds: float) -> None:
    """The check compares 'as printed', so that a warning never contradicts itself; over an hour the
    printed estimate drops its seconds, so 2 h 30 s reads as the 2 h bound."""
    graph = TaskGraph("round")
    graph.add_task(TaskNode("t", duration=seconds))
    (finding,) = validate_graph(graph).findings
    assert finding.code == "granularity-too-coarse"
    assert not finding.message.startswith("estimated 2h00m, over 2h00m"), finding.message


def test_granularity_is_judged_on_the_estimate_rounded_to_whole_seconds() -> None:
    """599.5 s prints as 10m and is not too fine; 7200.4 s prints as 2h00m and is not too coarse."""
    graph = TaskGraph("round")
    graph.add_task(TaskNode("a", duration=599.5))
    graph.add_task(TaskNode("b", duration=7200.4))
    assert validate_graph(graph).findings == []


def test_no_granularity_turns_off_only_the_granularity_warnings() -> None:
    graph = TaskGraph("coarse")
    graph.add_task(TaskNode("tiny", duration=5))
    graph.add_task(TaskNode("huge", duration=86400))
    graph.add_task(TaskNode("bare", duration=1200, gpu=GpuRequest(1), duration_declared=False))
    graph.add_task(TaskNode("broken", duration=-5))
    report = validate_graph(graph, ValidationPolicy(check_granularity=False))
    assert _codes(report) == [("missing-estimate", "bare"), ("bad-estimate", "broken")]


def test_a_huge_but_finite_estimate_is_reported_without_overflow() -> None:
    graph = TaskGraph("huge")
    graph.add_task(TaskNode("t", duration=1e300))
    (finding,) = [f for f in validate_graph(graph).findings if f.task_id == "t"]
    assert (finding.code, finding.message) == (
        "bad-estimate",
        "estimate 1e+300 s is over 366 days (a typo or the wrong unit?).",
    )


def test_a_missing_estimate_assumed_from_the_deployment_default_says_so() -> None:
    graph = TaskGraph("deployment")
    attrs: dict[str, object] = {"duration_default": "deployment"}
    graph.add_task(TaskNode("gpu", duration=1800, gpu=GpuRequest(1), duration_declared=False, attrs=attrs))
    graph.add_task(TaskNode("cpu", duration=1800, duration_declared=False, attrs=dict(attrs)))
    plain = validate_graph(graph)
    assert [(f.task_id, f.message) for f in plain.findings] == [
        ("gpu", "no duration estimate; assuming 30m, [gpu_dag] default_duration.")
    ]
    assert "gpu_hints(duration=" in plain.findings[0].fix
    strict = validate_graph(graph, ValidationPolicy(cpu_estimates=True))
    assert _codes(strict) == [("missing-estimate", "gpu"), ("missing-estimate", "cpu")]


def test_an_unknown_pool_names_the_known_pools_sorted_and_quotes_a_unicode_name() -> None:
    graph = TaskGraph("ünï")
    graph.add_task(TaskNode("trâin", duration=1200, gpu=GpuRequest(1), pool="gpu pool ü"))
    report = validate_graph(graph, ValidationPolicy(pool_slots={"gpu_b": 8, "gpu_a": 4}))
    (finding,) = report.errors
    assert (finding.code, finding.dag_id, finding.task_id) == ("unknown-pool", "ünï", "trâin")
    assert finding.message == "pool 'gpu pool ü' does not exist (known pools: gpu_a, gpu_b)."
    assert finding.fix.startswith("create it (airflow pools set 'gpu pool ü' <slots>")


def test_extra_findings_may_be_any_iterable() -> None:
    graph = TaskGraph("extra")
    graph.add_task(TaskNode("t", duration=1200))
    extra = Finding(ERROR, "bad-gpu-request", "extra", "t", "cannot parse.", "fix it.")
    report = validate_graph(graph, extra=(f for f in [extra]))
    assert report.findings == [extra]
    with pytest.raises(ValueError, match=r"cannot parse") as err:
        report.raise_for_errors()
    assert isinstance(err.value, GraphValidationError) and err.value.findings == [extra]


def test_paths_are_compared_by_whole_components() -> None:
    assert path_contains("/a", "/a") and path_contains("/a", "/a/b") and path_contains("/a/", "/a/b")
    assert not path_contains("/a", "/ab") and not path_contains("/a/b", "/a")
    assert paths_overlap("/a/b", "/a") and paths_overlap("/a", "/a/b")
    assert not paths_overlap("/ab", "/a") and not paths_overlap("/a/x", "/a/y")
    assert normalise_path("  /data/x//  ") == "/data/x" and normalise_path("///") == "/"


def test_a_sibling_sorting_between_a_path_and_its_children_does_not_hide_the_children() -> None:
    """``/d/a-b`` and ``/d/a.txt`` sort between ``/d/a`` and ``/d/a/x``: the scan must go on past them."""
    graph = TaskGraph("sorted")
    graph.add_task(TaskNode("write", duration=1200, outputs=("/d/a",)))
    graph.add_task(TaskNode("dash", duration=1200, inputs=("/d/a-b",)))
    graph.add_task(TaskNode("dot", duration=1200, inputs=("/d/a.txt",)))
    graph.add_task(TaskNode("read", duration=1200, inputs=("/d/a/x",)))
    assert [(d.writer, d.other) for d in hidden_dependency_pairs(graph)] == [("write", "read")]


def test_two_unordered_writers_are_never_guarded_by_a_completeness_sensor() -> None:
    """A sensor orders a reader after complete data; two writers still race."""
    graph = TaskGraph("race")
    graph.add_task(TaskNode("w1", duration=1200, outputs=("/lake/x",)))
    graph.add_task(TaskNode("w2", duration=1200, outputs=("/lake/x/p",), awaits=("/lake/x",)))
    (finding,) = find_hidden_dependencies(graph)
    assert finding.task_id == "w2"
    assert finding.message.startswith(
        "'w2' also writes '/lake/x/p', which overlaps '/lake/x' written by 'w1'"
    )
    assert finding.fix.startswith("add the edge w1 >> w2")


def test_a_sensor_upstream_of_the_writer_only_does_not_guard_the_reader() -> None:
    graph = TaskGraph("wrong_side")
    graph.add_task(TaskNode("wait", duration=0, awaits=("/lake/x",)))
    graph.add_task(TaskNode("write", duration=1200, outputs=("/lake/x",)))
    graph.add_task(TaskNode("read", duration=1200, inputs=("/lake/x",)))
    graph.add_edge("wait", "write")
    assert [(d.writer, d.other) for d in hidden_dependency_pairs(graph)] == [("write", "read")]


def test_hidden_dependencies_with_unicode_task_ids_and_paths() -> None:
    graph = TaskGraph("数据")
    graph.add_task(TaskNode("写入", duration=1200, outputs=("/データ/ü/",)))
    graph.add_task(TaskNode("读取", duration=1200, inputs=("/データ/ü/part-0",)))
    (finding,) = find_hidden_dependencies(graph)
    assert (finding.dag_id, finding.task_id) == ("数据", "读取")
    assert "'/データ/ü' written by '写入'" in finding.message
    assert finding.fix.startswith("add the edge 写入 >> 读取")


def test_a_graph_without_any_paths_has_no_hidden_dependencies() -> None:
    graph = TaskGraph("nopaths")
    graph.add_task(TaskNode("a", duration=1200))
    graph.add_task(TaskNode("b", duration=1200, awaits=("/x",)))
    assert hidden_dependency_pairs(graph) == [] and hidden_dependency_pairs(TaskGraph("empty")) == []


def test_two_readers_of_one_path_are_not_a_hidden_dependency() -> None:
    graph = TaskGraph("readers")
    graph.add_task(TaskNode("r1", duration=1200, inputs=("/x",)))
    graph.add_task(TaskNode("r2", duration=1200, inputs=("/x/y",)))
    assert hidden_dependency_pairs(graph) == []
