"""Edge helpers: wiring, labels the graph view shows, parse-time errors, window arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset

from airflow_gpu_dag import gpu_hints
from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.authoring import (
    branch_edge,
    cleanup,
    data_affinity,
    data_edge,
    dataset_path,
    exclusive,
    exit_code_edge,
    fix_hidden_dependencies,
    pin_to_queue,
    share,
    stage_dependency,
    start_window,
    validation_edge,
)
from airflow_gpu_dag.authoring.hidden import HiddenDependencyCycle
from airflow_gpu_dag.core.analysis.validation import find_hidden_dependencies
from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor, StartWindowSensor, TimeWindow


@pytest.fixture(autouse=True)
def _deferring(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests exercise the deferring path: a deployment with a triggerer, which turns on
    ``[operators] default_deferrable`` (without it the sensors and gates wait in a worker)."""
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")


def _kinds(dag: DAG) -> dict[tuple[str, str], str | None]:
    graph, _ = build_task_graph(dag)
    return {(u, d): graph._down[u][d] for u in graph._down for d in graph._down[u]}


def test_data_edge_inserts_labelled_sensor() -> None:
    with DAG("d", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train")
        asset = Asset("clean", uri="file:///lake/clean")
        wait = data_edge(prep, train, path="/lake/clean/{{ ds }}", asset=asset, timeout=60)
    assert wait.task_id == "wait_clean"
    assert isinstance(wait, DatasetCompleteSensor) and wait.deferrable
    assert _kinds(dag) == {("prep", "wait_clean"): "data", ("wait_clean", "train"): "data"}
    assert asset in wait.outlets
    assert str(wait.trigger_rule) in ("all_success", "TriggerRule.ALL_SUCCESS")
    assert dataset_path(wait) == "{{ ti.xcom_pull(task_ids='wait_clean')['path'] }}"


def test_data_edge_fallback_runs_after_producer_failure() -> None:
    with DAG("d2", schedule=None):
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train")
        wait = data_edge(
            prep, train, path="/x", asset=Asset("x", uri="file:///x"), timeout=5, fallback_to_last_good=True
        )
    assert wait.trigger_rule == "all_done"
    assert wait.producer_task_id == "prep"


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


def test_exit_code_edge_sets_skip_codes_and_label() -> None:
    with DAG("c", schedule=None) as dag:
        train = BashOperator(task_id="train", bash_command="exit 0")
        ev = EmptyOperator(task_id="eval")
        exit_code_edge(train, ev, skip_on=[3, 4])
        with pytest.raises(ValueError, match=r"task 'eval'.*skip_on_exit_code"):
            exit_code_edge(ev, train)
        with pytest.raises(ValueError, match=r"exit codes 1..255"):
            exit_code_edge(train, ev, skip_on=0)
    assert train.skip_on_exit_code == [3, 4]
    assert _kinds(dag)[("train", "eval")] == "control"


def _converged(value: object) -> bool:
    return isinstance(value, dict) and float(value["loss"]) < 0.1


def test_validation_and_branch_edges() -> None:
    with DAG("v", schedule=None) as dag:
        train = EmptyOperator(task_id="train")
        ev = EmptyOperator(task_id="eval")
        gate = validation_edge(train, ev, check=_converged)
        deploy, retrain = EmptyOperator(task_id="deploy"), EmptyOperator(task_id="retrain")
        branch = branch_edge(ev, {"good": deploy, "bad": retrain}, choose=lambda v: "good")
        with pytest.raises(ValueError, match=r"on_invalid='maybe'"):
            validation_edge(train, ev, check=_converged, on_invalid="maybe", task_id="x")
    assert type(gate).__name__ == "ShortCircuitOperator" and gate.ignore_downstream_trigger_rules
    kinds = _kinds(dag)
    assert kinds[("train", "check_train")] == kinds[("check_train", "eval")] == "control"
    assert kinds[(branch.task_id, "deploy")] == "control"


def test_start_window_inserts_sensor_before_task() -> None:
    with DAG("w", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train")
        prep >> train
        sensor = start_window(train, opens="22:00", closes="06:00", on_missed="fail")
    assert isinstance(sensor, StartWindowSensor)
    assert _kinds(dag) == {("prep", "train__window"): None, ("train__window", "train"): "time"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"opens": "08:00", "closes": "08:00"}, "impossible start window.*never open"),
        ({"opens": "25:00", "closes": "08:00"}, "opens='25:00' is not a time of day"),
        ({"opens": "08:00", "closes": "09:00", "on_missed": "wait"}, "on_missed='wait' is not a policy"),
        ({"opens": "08:00", "closes": "09:00", "tz": "Mars/Base"}, "unknown timezone"),
    ],
)
def test_bad_windows_fail_at_parse_time(kwargs: dict, message: str) -> None:
    with DAG("bw", schedule=None):
        train = EmptyOperator(task_id="train")
        with pytest.raises(ValueError, match=r"DAG 'bw', task 'train': " + message):
            start_window(train, **kwargs)


def test_templated_window_is_checked_at_run_time_only() -> None:
    with DAG("tw", schedule=None):
        StartWindowSensor(task_id="s", opens="{{ dag_run.conf['opens'] }}", closes="23:00")


def _at(hour: int, minute: int = 0, day: int = 10) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


def test_window_occurrence_and_state() -> None:
    night = TimeWindow.parse("22:00", "06:00")
    assert night.wraps
    assert night.occurrence(_at(9)) == (_at(22), _at(6, day=11))
    assert night.occurrence(_at(3)) == (_at(22, day=9), _at(6))  # already inside last night's window
    assert night.state(_at(9), _at(12))[0] == "before"
    assert night.state(_at(9), _at(23))[0] == "open"
    assert night.state(_at(9), _at(7, day=11))[0] == "missed"
    day = TimeWindow.parse(time(9), "17:30")
    assert day.state(_at(8), _at(17, 30))[0] == "missed"
    assert day.state(_at(18), _at(18))[0] == "before"  # next day's window


def test_window_in_other_timezone() -> None:
    berlin = TimeWindow.parse("01:00", "02:00", "Europe/Berlin")
    start, end = berlin.occurrence(_at(12))
    assert start == datetime(2026, 11, 11, 0, 0, tzinfo=UTC) and end - start == timedelta(hours=1)


def test_stage_dependency_waits_on_checkpoint_not_on_task() -> None:
    with DAG("s", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train")
        ev = EmptyOperator(task_id="eval")
        prep >> train
        sensor = stage_dependency(train, ev, checkpoint_dir="/ckpt", step=100, timeout=600)
    assert sensor.task_id == "wait_train_ckpt_100"
    kinds = _kinds(dag)
    assert ("train", "eval") not in kinds
    assert kinds[("wait_train_ckpt_100", "eval")] == "time"
    assert ("prep", "wait_train_ckpt_100") in kinds
    with DAG("s2", schedule=None):
        a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
        a >> b
        with pytest.raises(ValueError, match=r"remove a >> b"):
            stage_dependency(a, b, checkpoint_dir="/c", step=1, timeout=1)
        with pytest.raises(ValueError, match=r"stable sizes"):
            CheckpointSensor(task_id="cs", checkpoint_dir="/c", step=1, timeout=1, completeness="stable")


def test_cleanup_is_a_teardown() -> None:
    with DAG("cl", schedule=None) as dag:
        alloc = EmptyOperator(task_id="alloc")
        train = EmptyOperator(task_id="train")
        free = EmptyOperator(task_id="free")
        alloc >> train
        cleanup(free, after=train, setups=alloc)
    assert free.is_teardown and alloc.is_setup
    assert free.trigger_rule == "all_done_setup_success"
    assert not free.on_failure_fail_dagrun
    assert _kinds(dag)[("train", "free")] == "cleanup"


def test_resource_helpers() -> None:
    with DAG("r", schedule=None):
        a, b, c = (EmptyOperator(task_id=t) for t in "abc")
        exclusive([a, b], pool="gpu_node1", pool_size=8)
        assert (a.pool, a.pool_slots, b.pool_slots) == ("gpu_node1", 8, 8)
        assert share({a: 0.5, b: 0.25, c: 0.25}, pool="gpu", pool_size=8) == {"a": 4, "b": 2, "c": 2}
        with pytest.raises(ValueError, match=r"sum to 1.5"):
            share({a: 0.5, b: 1.0}, pool="gpu", pool_size=8)
        with pytest.raises(ValueError, match=r"task 'a': share 0"):
            share({a: 0}, pool="gpu", pool_size=8)
        with pytest.raises(ValueError, match=r"pool_size=0"):
            exclusive([a, b], pool="gpu", pool_size=0)
        assert pin_to_queue(c, "host-gpu01", pool="gpu01_cpu").queue == "host-gpu01"
        assert c.pool == "gpu01_cpu"
        assert (
            data_affinity(b, "/mnt/gpu02/corpus/x", {"/mnt/gpu01": "h1", "/mnt/gpu02": "h2"}, pool="p2")
            == "h2"
        )
        assert (b.queue, b.pool) == ("h2", "p2")
        with pytest.raises(ValueError, match=r"no location holds '/srv/x'"):
            data_affinity(b, "/srv/x", {"/mnt": "h"})


def _hidden_dag(dag_id: str) -> DAG:
    with DAG(dag_id, schedule=None) as dag:
        EmptyOperator(task_id="clean", executor_config=gpu_hints(outputs=["/lake/clean"]))
        EmptyOperator(task_id="train", executor_config=gpu_hints(inputs=["/lake/clean/part-0"]))
        EmptyOperator(task_id="stats", executor_config=gpu_hints(outputs=["/lake/clean"]))
    return dag


def test_fix_hidden_dependencies_edge_mode() -> None:
    dag = _hidden_dag("h1")
    graph, _ = build_task_graph(dag)
    assert len(find_hidden_dependencies(graph)) == 3
    fixes = fix_hidden_dependencies(dag, mode="edge")
    assert {(f.writer, f.other, f.how) for f in fixes} >= {("clean", "train", "edge")}
    graph, _ = build_task_graph(dag)
    assert find_hidden_dependencies(graph) == []
    assert _kinds(dag)[("clean", "train")] == "data"


def test_fix_hidden_dependencies_sensor_mode() -> None:
    dag = _hidden_dag("h2")
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    by_other = {(f.writer, f.other): f for f in fixes}
    reader_fix = next(f for f in fixes if f.other == "train")
    assert reader_fix.how == "sensor" and reader_fix.path == "/lake/clean"
    sensor = dag.get_task(reader_fix.added)
    assert isinstance(sensor, DatasetCompleteSensor) and sensor.path == "/lake/clean"
    assert _kinds(dag)[(reader_fix.added, "train")] == "data"
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


def _cyclic_hidden_dag(dag_id: str) -> DAG:
    """a writes P (read by b), b writes Q (read by c), c writes R (read by a): no edges at all, and the
    three repairs together would be a -> b -> c -> a."""
    with DAG(dag_id, schedule=None) as dag:
        EmptyOperator(task_id="a", executor_config=gpu_hints(outputs=["/p"], inputs=["/r"]))
        EmptyOperator(task_id="b", executor_config=gpu_hints(outputs=["/q"], inputs=["/p"]))
        EmptyOperator(task_id="c", executor_config=gpu_hints(outputs=["/r"], inputs=["/q"]))
    return dag


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


def test_sensor_mode_without_timeout_changes_nothing() -> None:
    dag = _hidden_dag("h4")
    with pytest.raises(ValueError, match=r"timeout"):
        fix_hidden_dependencies(dag, mode="sensor")
    assert all(not dag.get_task(t).downstream_task_ids for t in dag.task_dict)


def test_wiring_tasks_declare_a_zero_estimate() -> None:
    """Sensors, gates and branches added by the helpers must not pad the plan with the default estimate."""
    from airflow_gpu_dag.authoring import budget_gate
    from airflow_gpu_dag.core.analysis.validation import validate_graph

    with DAG("wired", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep", executor_config=gpu_hints(duration="20m"))
        train = EmptyOperator(task_id="train", pool="gpu_default", executor_config=gpu_hints(duration="1h"))
        evaluate = EmptyOperator(task_id="evaluate", executor_config=gpu_hints(duration="15m"))
        data_edge(prep, train, path="/lake/clean", timeout=60)
        validation_edge(train, evaluate, check=lambda value: True)
        start_window(evaluate, opens="22:00", closes="06:00")
        budget_gate(train, gpu_hours_per_pool_day=10)
    graph, findings = build_task_graph(dag)
    added = set(graph.nodes) - {"prep", "train", "evaluate"}
    assert len(added) == 4
    assert all(graph.nodes[t].duration == 0 and graph.nodes[t].duration_declared for t in added)
    report = validate_graph(graph, extra=findings)
    assert [f for f in report.findings if f.code == "missing-estimate"] == []


def test_deferring_tasks_get_one_quick_retry_for_the_resume_race() -> None:
    """apache/airflow#72716: a trigger that fires at once can have the resumed try failed as a "state
    mismatch"; every deferring task the helpers add retries at least once, quickly (5 s, whatever
    default_args say), and as often as the DAG's default_args ask (tests/unit/test_sensor_retries.py)."""
    from airflow_gpu_dag.authoring import budget_gate

    slow = {"retries": 4, "retry_delay": timedelta(minutes=10)}
    with DAG("race", schedule=None, default_args=slow) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train", pool="gpu_default")
        evaluate = EmptyOperator(task_id="evaluate")
        prep >> train
        added = [
            data_edge(prep, evaluate, path="/lake/clean", timeout=60),
            stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=2, timeout=60),
            start_window(train, opens="22:00", closes="06:00"),
            budget_gate(train, gpu_hours_per_pool_day=10),
        ]
    for task in added:
        assert (task.retries, task.retry_delay) == (4, timedelta(seconds=5)), task.task_id
    assert (dag.get_task("train").retries, dag.get_task("prep").retry_delay) == (4, timedelta(minutes=10))
    # built directly, a sensor takes the same default and the author's own values win
    with DAG("direct", schedule=None):
        plain = CheckpointSensor(task_id="plain", checkpoint_dir="/c", step=1, timeout=60)
        mine = DatasetCompleteSensor(task_id="mine", path="/p", timeout=60, retries=0)
        window = StartWindowSensor(task_id="window", opens="22:00", closes="06:00", retries=3)
    assert (plain.retries, plain.retry_delay) == (1, timedelta(seconds=5))
    assert (mine.retries, window.retries) == (0, 3)
