"""The pure parts of ``benchmarks/scheduler_loop.py`` (the benchmark itself boots Airflow three times and
is run by hand; docs/benchmarks/scheduler_loop.md): statistics, the StatsD listener, the generated DAG
files (real Airflow DAGs: parsed here, with the asset schedule and the weight rule the round asks for),
re-versioning and the readers of the timing file and the scheduler log."""

from __future__ import annotations

import math
import socket
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script


def _load() -> ModuleType:
    return load_script("benchmarks/scheduler_loop.py", "gpu_dag_benchmark_scheduler_loop")


loop = _load()


def test_spread_is_nearest_rank() -> None:
    spread = loop.Spread.of([float(v) for v in range(1, 101)])
    assert (spread.n, spread.p50, spread.p99, spread.max) == (100, 50.0, 99.0, 100.0)
    assert loop.Spread.of([3.0, math.nan]).p99 == 3.0
    assert math.isnan(loop.Spread.of([]).p50)
    assert loop.ratio(12.0, 10.0) == pytest.approx(1.2)
    assert math.isnan(loop.ratio(1.0, 0.0))


def test_parse_statsd_lines() -> None:
    packet = "airflow.scheduler.scheduler_loop_duration:12.5|ms\nairflow.x:1|c|@0.5\nbroken\nbad:abc|g"
    assert loop.parse_statsd(packet) == [
        ("airflow.scheduler.scheduler_loop_duration", 12.5, "ms"),
        ("airflow.x", 1.0, "c"),
    ]


def test_statsd_listener_keeps_the_loop_metric() -> None:
    with loop.StatsdListener([loop.LOOP_METRIC]) as listener:
        since = time.time()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(
                b"airflow.scheduler.scheduler_loop_duration:42|ms\nairflow.other:1|c",
                ("127.0.0.1", listener.port),
            )
        deadline = time.monotonic() + 10
        while not listener.values(loop.LOOP_METRIC, since, time.time()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listener.values(loop.LOOP_METRIC, since, time.time()) == [42.0]


def test_two_hundred_dags_some_large() -> None:
    specs = loop.dag_specs(200, 5)
    assert len(specs) == len({s.dag_id for s in specs}) == 200
    assert sorted(s.tasks for s in specs if s.dag_id.startswith("large_")) == [1000, 1000, 1200, 1500, 2000]
    assert all(5 <= s.tasks <= 300 for s in specs if s.dag_id.startswith("dag_"))
    rewritten = loop.reversioned_files(specs)
    assert len([f for f in rewritten if f.startswith("large_")]) == 2
    order = loop.trigger_order(specs, rewritten)
    assert sorted(order) == sorted(s.dag_id for s in specs)  # every DAG triggered once
    again = {s.dag_id for s in specs if s.file in rewritten}
    assert sum(1 for d in order[-len(again) :] if d in again) >= len(again) // 2  # most after the rewrite


def test_generated_files_are_airflow_dags_and_a_new_version_differs(tmp_path: Path) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE

    specs = [loop.DagSpec("dag_a", 12, 1, "g.py"), loop.DagSpec("dag_b", 6, 2, "g.py")]
    dags = {}
    for version in (0, 1):
        namespace: dict[str, object] = {}
        exec(compile(loop.render_file(specs, CRITICAL_PATH_WEIGHT_RULE, version), "g.py", "exec"), namespace)
        dags[version] = namespace["dag_a"]
    first, second = dags[0], dags[1]
    assert len(first.task_dict) == 12 and len(second.task_dict) == 13  # type: ignore[attr-defined]
    assert first.task_dict["start"].pool == "default_pool"  # type: ignore[attr-defined]
    gpu = [t for t in first.task_dict.values() if t.task_id != "start"]  # type: ignore[attr-defined]
    assert {t.pool for t in gpu} == {loop.POOL} and all(t.upstream_task_ids for t in gpu)
    assert all(t.weight_rule == CRITICAL_PATH_WEIGHT_RULE for t in gpu)
    condition = first.timetable.asset_condition  # type: ignore[attr-defined]
    assert [asset.name for asset in condition.objects] == ["bench://dag_a"]  # run by its own asset
    # the rewrite changes what the dag-processor serializes (a new DAG version)
    assert DagSerialization.to_dict(first) != DagSerialization.to_dict(second)
    loop.write_dags(tmp_path, specs, CRITICAL_PATH_WEIGHT_RULE, {"g.py": 1})
    assert "VERSION = 1" in (tmp_path / "g.py").read_text()


def test_timing_file_and_planner_log_readers(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text(
        "10 1700000000.123 packing 0.000200 dag_a t1\ngarbage\n11 1700000001.0 stock 0.5 dag_b start\n"
    )
    calls = loop.read_weight_calls(path)
    assert [(c.pid, c.rule, c.seconds, c.task_id) for c in calls] == [
        (10, "packing", 0.0002, "t1"),
        (11, "stock", 0.5, "start"),
    ]
    assert loop.read_weight_calls(tmp_path / "missing") == []
    log = "x [info] airflow-gpu-dag: planned DAG 'large_00' (1001 tasks) in 3.25s [airflow_gpu_dag...]"
    assert loop.planned_dags(log) == [("large_00", 1001, 3.25)]


def test_report_puts_the_rules_side_by_side() -> None:
    def result(rule: str, loop_p99: float) -> object:
        spread = loop.Spread(10, 1.0, loop_p99, loop_p99 * 2)
        return loop.RoundResult(
            rule=rule,
            dags=200,
            tasks=15000,
            window_s=150.0,
            loop_ms=spread,
            first_queued_ms=spread,
            get_weight_ms=spread,
            get_weight_scheduler_ms=spread,
            get_weight_calls_by_component={"scheduler": 5},
            get_weight_over_50ms=[("large_00", "start", 60.0)],
            runs_triggered=200,
            runs_queued=199,
            rewritten_reparsed=22,
            new_versions=5,
            plans=3,
            plan_max_s=1.5,
            load_avg=(1.0, 1.0, 1.0),
            database="postgresql+psycopg2",
        )

    report = loop.format_report([result("stock", 100.0), result("packing", 110.0)])
    assert "| metric | stock | packing | packing / stock (p99) |" in report
    assert "1.10x" in report
    assert "1 over 50 ms (large_00 60)" in report


def test_large_dags_have_a_mapped_task_and_keep_their_size() -> None:
    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE
    from airflow_gpu_dag.airflow.mapped import mapped_task_ids

    specs = [loop.DagSpec("large_x", 40, 3, "l.py")]
    for version in (0, 1):
        namespace: dict[str, object] = {}
        source = loop.render_file(specs, CRITICAL_PATH_WEIGHT_RULE, version, mapped_from=40)
        exec(compile(source, "l.py", "exec"), namespace)
        dag = namespace["large_x"]
        assert mapped_task_ids(dag) == ["shard"]
        assert len(dag.task_dict) == 40 + version  # type: ignore[attr-defined]  # what _reversioned counts


def test_first_weight_costs_no_analysis_in_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "true")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"bench_gpu": 4}')
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "false")
    results = loop.first_weight_costs(tasks=60, repeats=1)
    assert [(r.mapped, r.analysed_inline, len(r.first), len(r.same_version)) for r in results] == [
        (False, 0, 1, 1),
        (True, 0, 1, 1),
    ]
    table = loop.format_first_weights(results)
    assert "| 60 tasks, one mapped |" in table and "0 of 2 calls" in table
