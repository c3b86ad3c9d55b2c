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


def _graph_edges(dag: DAG) -> set[tuple[str, str]]:
    return {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}


def _race_and_reader_dag(dag_id: str) -> DAG:
    """``w1`` and ``w2`` both write ``/lake/x`` (always an edge, planned first: its path sorts first);
    ``r`` reads ``/lake/y``, which ``w3`` writes (a sensor in sensor mode)."""
    with DAG(dag_id, schedule=None) as dag:
        _bash("w1", outputs=("/lake/x",))
        _bash("w2", outputs=("/lake/x",))
        _bash("w3", outputs=("/lake/y",))
        _bash("r", inputs=("/lake/y",))
    return dag


@pytest.mark.parametrize("mode", ["edge", "sensor"])
def test_a_dag_without_declared_paths_needs_no_fix_and_no_timeout(mode: str) -> None:
    with DAG(f"h_plain_{mode}", schedule=None) as dag:
        EmptyOperator(task_id="a") >> EmptyOperator(task_id="b")
    with DAG(f"h_empty_{mode}", schedule=None) as empty:
        pass
    assert fix_hidden_dependencies(dag, mode=mode) == []
    assert fix_hidden_dependencies(empty, mode=mode) == []
    assert _graph_edges(dag) == {("a", "b")}


def test_an_edge_fix_adds_no_task_and_is_frozen() -> None:
    dag = _two_path_dag("h_edge_fix")
    fixes = fix_hidden_dependencies(dag, mode="edge")
    assert [(f.writer, f.other, f.how, f.added) for f in fixes] == [("clean", "train", "edge", None)]
    assert set(dag.task_dict) == {"clean", "train"}
    assert edge_kinds(dag) == {("clean", "train"): "data"}
    with pytest.raises(AttributeError):
        fixes[0].how = "sensor"  # type: ignore[misc]


@pytest.mark.parametrize("mode", ["Edge", "sensors", ""])
def test_an_unknown_mode_is_refused_naming_the_dag_and_both_modes(mode: str) -> None:
    dag = _two_path_dag("h_mode")
    with pytest.raises(ValueError, match=rf"DAG 'h_mode': fix_hidden_dependencies\(mode='{mode}'\).*'edge'"):
        fix_hidden_dependencies(dag, mode=mode, timeout=60)
    assert _graph_edges(dag) == set() and set(dag.task_dict) == {"clean", "train"}


def test_hidden_dependency_cycle_is_a_value_error_so_airflow_shows_an_import_error() -> None:
    assert issubclass(HiddenDependencyCycle, ValueError)


def test_the_sensor_gets_the_timeout_poke_interval_and_completeness_given() -> None:
    from datetime import timedelta

    with DAG("h_args", schedule=None) as dag:
        _bash("clean", outputs=("/lake/a/",))
        _bash("train", inputs=(" /lake/a/part-0 ",))
    fixes = fix_hidden_dependencies(
        dag, mode="sensor", timeout=timedelta(hours=1), poke_interval=5, completeness="manifest"
    )
    assert [(f.path, f.added) for f in fixes] == [("/lake/a", "wait_clean_for_train")]
    sensor = dag.get_task("wait_clean_for_train")
    assert (sensor.timeout, sensor.poke_interval) == (3600.0, 5.0)
    assert sensor.completeness["kind"] == "manifest"
    assert sensor.path == "/lake/a"  # normalised: no trailing slash
    assert sensor.doc_md == "Hidden dependency: train reads /lake/a written by clean."


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf")])
def test_a_timeout_that_is_not_a_positive_finite_number_changes_nothing(timeout: float) -> None:
    dag = _race_and_reader_dag(f"h_timeout_{timeout}".replace("-", "minus"))
    with pytest.raises(ValueError, match=r"timeout=.* must be a positive \(finite\) number"):
        fix_hidden_dependencies(dag, mode="sensor", timeout=timeout)
    assert _graph_edges(dag) == set() and len(dag.task_dict) == 4


def test_the_sensor_also_waits_for_the_readers_other_upstream_tasks() -> None:
    """The sensor takes the reader's place after its existing upstream tasks (they wait side by side)."""
    with DAG("h_prep", schedule=None) as dag:
        _bash("clean", outputs=("/lake/a",))
        train = _bash("train", inputs=("/lake/a",))
        EmptyOperator(task_id="prep") >> train
    fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    assert dag.get_task("wait_clean_for_train").upstream_task_ids == {"prep"}
    assert train.upstream_task_ids == {"prep", "wait_clean_for_train"}
    assert dag.get_task("clean").downstream_task_ids == set()  # the reader does not wait for the task
    dag.check_cycle()


def test_a_sensor_id_taken_by_another_task_gets_the_path_suffix() -> None:
    with DAG("h_taken", schedule=None) as dag:
        _bash("clean", outputs=("/lake/a",))
        _bash("train", inputs=("/lake/a",))
        EmptyOperator(task_id="wait_clean_for_train")
        EmptyOperator(task_id="wait_clean_for_train__lake_a")
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    assert [f.added for f in fixes] == ["wait_clean_for_train__lake_a_2"]
    assert isinstance(dag.get_task("wait_clean_for_train__lake_a_2"), DatasetCompleteSensor)


def test_two_paths_that_read_as_the_same_id_get_distinct_sensor_ids() -> None:
    """``/lake/a-b`` and ``/lake/a_b`` both read as ``lake_a_b``; two long paths share their last 60
    characters: each sensor still gets an id of its own."""
    tail = "/x" * 40
    paths = ("/lake/a-b", "/lake/a_b", "/one" + tail, "/two" + tail)
    with DAG("h_same_id", schedule=None) as dag:
        _bash("clean", outputs=paths)
        _bash("train", inputs=paths)
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    added = [str(f.added) for f in fixes]
    assert len(fixes) == 4 and len(set(added)) == 4
    assert {f.path for f in fixes} == set(paths)
    assert all(dag.get_task(a).path == f.path for a, f in zip(added, fixes, strict=True))
    assert _left(dag) == []


def test_unicode_and_url_paths_give_valid_sensor_ids() -> None:
    import re

    paths = ("/lake/données", "/lake/日本", "s3://bucket/clean")
    with DAG("h_unicode", schedule=None) as dag:
        _bash("clean", outputs=paths)
        _bash("train", inputs=paths)
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    added = [str(f.added) for f in fixes]
    assert len(set(added)) == 3
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", a) for a in added), added
    assert "wait_clean_for_train__s3_bucket_clean" in added


def test_a_writer_of_the_root_path_is_repaired_with_a_sensor_on_root() -> None:
    with DAG("h_root", schedule=None) as dag:
        _bash("clean", outputs=("/",))
        _bash("train", inputs=("/lake",))
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    assert [(f.path, f.added) for f in fixes] == [("/", "wait_clean_for_train")]
    assert _left(dag) == []


@pytest.mark.parametrize("mode", ["edge", "sensor"])
def test_a_pair_ordered_by_earlier_edge_repairs_gets_no_edge_of_its_own(mode: str) -> None:
    """``w -> m`` and ``m -> r`` (planned first, ``/a`` sorts first) order ``w`` before ``r``: no
    direct edge. A sensor does not order its writer, so sensor mode still guards ``r`` on ``/z``."""
    with DAG(f"h_ordered_{mode}", schedule=None) as dag:
        _bash("w", outputs=("/z",))
        _bash("m", inputs=("/z",), outputs=("/a",))
        _bash("r", inputs=("/a", "/z"))
    fixes = fix_hidden_dependencies(dag, mode=mode, timeout=60)
    by_pair = {(f.writer, f.other): f.how for f in fixes}
    if mode == "edge":
        assert by_pair == {("m", "r"): "edge", ("w", "m"): "edge", ("w", "r"): "ordered"}
        assert _graph_edges(dag) == {("w", "m"), ("m", "r")}
    else:
        assert by_pair == {("m", "r"): "sensor", ("w", "m"): "sensor", ("w", "r"): "sensor"}
    assert _left(dag) == []
    assert fix_hidden_dependencies(dag, mode=mode, timeout=60) == []


def test_a_cycle_refusal_names_the_shared_path_and_the_fix() -> None:
    with DAG("h_cycle_msg", schedule=None) as dag:
        _bash("a", inputs=("/lake/r",), outputs=("/lake/p",))
        _bash("b", inputs=("/lake/p",), outputs=("/lake/r",))
    with pytest.raises(HiddenDependencyCycle) as err:
        fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    message = str(err.value)
    assert message.startswith("DAG 'h_cycle_msg': cannot fix the hidden dependency between")
    assert "/lake/" in message and "Fix: decide the order yourself" in message
    assert _graph_edges(dag) == set() and set(dag.task_dict) == {"a", "b"}


def test_a_bad_completeness_rule_is_refused_before_any_repair_is_made() -> None:
    """The module promises nothing is changed unless every repair can be made."""
    dag = _race_and_reader_dag("h_bad_rule")
    with pytest.raises(ValueError, match="unknown completeness rule 'bogus'"):
        fix_hidden_dependencies(dag, mode="sensor", timeout=60, completeness="bogus")
    assert _graph_edges(dag) == set() and len(dag.task_dict) == 4


@pytest.mark.parametrize("poke_interval", [0, float("nan")])
def test_a_bad_poke_interval_is_refused_before_any_repair_is_made(poke_interval: float) -> None:
    dag = _race_and_reader_dag(f"h_bad_poke_{poke_interval}")
    with pytest.raises(ValueError, match=r"poke_interval=.* is not a finite number"):
        fix_hidden_dependencies(dag, mode="sensor", timeout=60, poke_interval=poke_interval)
    assert _graph_edges(dag) == set() and len(dag.task_dict) == 4


def test_a_missing_timeout_is_refused_naming_the_dag_and_the_sensor() -> None:
    dag = _two_path_dag("h_no_timeout")
    with pytest.raises(ValueError, match=r"DAG 'h_no_timeout', task 'wait_clean_for_train__lake_a'.*timeout"):
        fix_hidden_dependencies(dag, mode="sensor")


def test_a_sensor_id_too_long_for_airflow_is_cut_to_a_stable_id_that_fits() -> None:
    """Two task ids of 125 characters (deep task groups) give ``wait_<writer>_for_<reader>`` of 260,
    over Airflow's 250: the sensor gets its start and a digest of the whole, the same at every parse."""
    writer, reader = "c" * 125, "t" * 125
    ids = []
    for _ in range(2):
        with DAG("h_long_ids", schedule=None) as dag:
            _bash(writer, outputs=("/p",))
            _bash(reader, inputs=("/p",))
        (fix,) = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
        assert fix.added in dag.task_dict and len(str(fix.added)) <= 250
        assert str(fix.added).startswith(f"wait_{writer}_for_t")
        ids.append(fix.added)
    assert ids[0] == ids[1]
