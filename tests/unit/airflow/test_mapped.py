"""Mapped tasks with counts the planner got wrong: a task mapped over nothing was planned at the
default or learned duration (it runs no instance), and the controller's lookahead and the planner
expanded the same history to different numbers of instances (upper middle vs median rounded up)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task, task_group

from airflow_gpu_dag import gpu_hints
from airflow_gpu_dag.airflow import mapped
from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.airflow.history import learned_task_graph
from airflow_gpu_dag.airflow.mapped import (
    declared_map_length,
    expand_dag_graph,
    index_wise_pairs,
    is_mapped,
    literal_map_length,
    map_length_findings,
    map_lengths,
    mapped_task_ids,
)
from airflow_gpu_dag.core.analysis.estimates import EstimateSettings
from airflow_gpu_dag.core.model.findings import ERROR
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.mapping import typical_map_count
from airflow_gpu_dag.watermark.durations import ControllerHistory
from tests.unit.airflow.conftest import sweep_dag
from tests.unit.airflow_dags import serialized


def test_a_task_mapped_over_nothing_takes_no_time_declared_or_not() -> None:
    with DAG("zero_map", schedule=None) as dag:

        @task(executor_config=gpu_hints(gpus=1))  # no duration declared
        def undeclared(x: int) -> int:
            return x

        @task(executor_config=gpu_hints(gpus=1, duration="1h"))
        def declared(x: int) -> int:
            return x

        undeclared.expand(x=[])
        declared.expand(x=[])
    graph = learned_task_graph(dag, past_runs=False, default_duration=1800.0).graph
    for task_id in ("undeclared", "declared"):
        node = graph.nodes[task_id]
        assert (node.attrs.get("map_count"), node.duration) == (0, 0.0), task_id


def test_the_controller_and_the_planner_expand_a_history_alike() -> None:
    assert [typical_map_count(c) for c in ([2, 8], [3], [1, 2, 9], [])] == [5, 3, 2, None]

    class Client:
        def dag_tasks(self, dag_id: str) -> list[dict[str, Any]]:
            return [{"task_id": "shard", "is_mapped": True}]

        def map_counts(self, dag_id: str, task_id: str, runs: int) -> list[int]:
            return [2, 8]

        def task_history(self, *args: Any, **kwargs: Any) -> list[Any]:
            return []

    history = ControllerHistory(Client(), 600.0, EstimateSettings())
    assert history.map_count({"dag_id": "d", "task_id": "shard", "map_index": -1}) == 5  # was 8


@pytest.mark.parametrize("serialize", [False, True])
def test_map_lengths_from_literals_history_and_hint(serialize: bool) -> None:
    dag = sweep_dag()
    dag = serialized(dag) if serialize else dag
    assert set(mapped_task_ids(dag)) == {"trial", "evaluate", "unknown"}
    assert literal_map_length(dag.task_dict["trial"]) == 6
    assert literal_map_length(dag.task_dict["evaluate"]) is None
    counts, sources = map_lengths(dag)
    assert counts == {"trial": 6, "evaluate": 4, "unknown": None}
    assert sources == {"trial": "expand", "evaluate": "declared"}
    counts, sources = map_lengths(dag, {"evaluate": 7, "trial": 99, "unknown": 2})
    assert counts == {"trial": 6, "evaluate": 7, "unknown": 2}  # a literal wins over history
    assert sources == {"trial": "expand", "evaluate": "history", "unknown": "history"}


@pytest.mark.parametrize("serialize", [False, True])
def test_index_wise_edges_inside_a_mapped_task_group(serialize: bool) -> None:
    with DAG("grouped", schedule=None) as dag:

        @task(executor_config=gpu_hints(duration="10m"))
        def train(x: int) -> int:
            return x

        @task(executor_config=gpu_hints(duration="5m"))
        def score(x: int) -> int:
            return x

        @task_group
        def fold(x: int) -> None:
            score(train(x))

        fold.expand(x=[1, 2, 3])
    read = serialized(dag) if serialize else dag
    counts, _ = map_lengths(read)
    assert counts == {"fold.train": 3, "fold.score": 3}
    graph, _ = build_task_graph(read, expand_mapped=True)
    assert graph.upstream("fold.score[1]") == ["fold.train[1]"]


# -- fakes: just the attributes mapped.py reads from an operator, a mapped group and a DAG ---------------
class _Input:
    """An expand input: ``value`` is the dict of ``expand()`` arguments, or a list of ``expand_kwargs()``."""

    def __init__(self, value: Any) -> None:
        self.value = value


class ListOfDictsExpandInput(_Input):
    """Named as Airflow's, which is how ``mapped.py`` tells it from a dict of lists."""


class _Group:
    def __init__(self, group_id: str, value: Any) -> None:
        self.group_id = group_id
        self._expand_input = _Input(value)


class _Task:
    def __init__(
        self,
        expand: Any = None,
        groups: Sequence[_Group] = (),
        hints: Mapping[str, Any] | None = None,
        downstream: Sequence[str] = (),
        mapped: bool = True,
    ) -> None:
        self._expand = expand
        self._groups = list(groups)
        self.executor_config = {"gpu_dag": dict(hints)} if hints is not None else None
        self.downstream_task_ids = set(downstream)
        self.mapped = mapped

    def get_needs_expansion(self) -> bool:
        return self.mapped

    def _get_specified_expand_input(self) -> Any:
        if isinstance(self._expand, Exception):
            raise self._expand
        return self._expand

    def iter_mapped_task_groups(self) -> Iterator[_Group]:
        return iter(self._groups)


class _Dag:
    def __init__(self, tasks: Mapping[str, Any], dag_id: str = "fake") -> None:
        self.dag_id = dag_id
        self.task_dict = dict(tasks)


def test_is_mapped_falls_back_to_the_flags_when_get_needs_expansion_fails() -> None:
    class Odd:
        is_mapped = True

        def get_needs_expansion(self) -> bool:
            raise RuntimeError("an unusual operator")

    class Private:
        _is_mapped = True

    assert is_mapped(Odd()) and is_mapped(Private())
    assert not is_mapped(object())
    assert not is_mapped(_Task(mapped=False))


@pytest.mark.parametrize(
    ("expand", "count"),
    [
        (_Input({"lr": [1, 2, 3], "batch": (32, 64)}), 6),
        (_Input({"x": [1, 2], "y": []}), 0),
        (_Input({"x": {"a": 1, "b": 2}}), 2),
        (_Input({"x": {1, 2, 3, 4}}), 4),
        (_Input({}), 0),
        (_Input({"x": [1, 2], "y": "text"}), None),
        (_Input({"x": b"bytes"}), None),
        (_Input({"x": object()}), None),
        (ListOfDictsExpandInput([{"x": 1}, {"x": 2}, {"x": 3}]), 3),
        (ListOfDictsExpandInput(object()), None),
        (None, None),
        (RuntimeError("cannot resolve"), None),
    ],
)
def test_literal_map_length_counts_only_literal_arguments(expand: Any, count: int | None) -> None:
    """A string is a literal to Python but one value to ``expand()``; an upstream's output (any other
    object) is known only at run time."""
    assert literal_map_length(_Task(expand)) == count


def test_a_task_inside_mapped_groups_multiplies_their_counts() -> None:
    outer, inner = _Group("outer", {"x": [1, 2]}), _Group("outer.inner", {"y": [1, 2, 3]})
    plain_in_groups = _Task(groups=[inner, outer])
    plain_in_groups._get_specified_expand_input = None  # type: ignore[assignment,method-assign]
    assert literal_map_length(plain_in_groups) == 6  # not mapped itself: the groups' instances
    assert literal_map_length(_Task(_Input({"z": [1, 2]}), groups=[inner, outer])) == 12
    assert literal_map_length(_Task(None, groups=[inner, outer])) is None
    assert literal_map_length(_Task(_Input({"z": [1]}), groups=[_Group("g", {"x": object()})])) is None


def test_a_task_whose_mapped_groups_cannot_be_listed_counts_its_own_instances() -> None:
    class Broken(_Task):
        def iter_mapped_task_groups(self) -> Iterator[_Group]:
            raise RuntimeError("no groups here")

    assert literal_map_length(Broken(_Input({"x": [1, 2]}))) == 2


@pytest.mark.parametrize("serialize", [False, True])
def test_literal_lengths_of_real_expansions(serialize: bool) -> None:
    with DAG("literals", schedule=None) as dag:

        @task
        def one(x: int, y: int = 0) -> int:
            return x

        @task
        def source() -> list[dict[str, int]]:
            return [{"x": 1}]

        one.override(task_id="nothing").expand(x=[])
        one.override(task_id="nothing_by_product").expand(x=[1, 2], y=[])
        one.override(task_id="by_dict").expand(x={"a": 1, "b": 2})
        one.override(task_id="kwargs").expand_kwargs([{"x": 1}, {"x": 2}, {"x": 3}])
        one.override(task_id="kwargs_at_run_time").expand_kwargs(source())
        one.override(task_id="partial").partial(y=1).expand(x=[1, 2, 3, 4])
        BashOperator.partial(task_id="bash").expand(bash_command=["true", "false"])

        @task_group
        def outer(x: int) -> None:
            @task_group
            def inner(y: int) -> None:
                one.override(task_id="b")(one.override(task_id="a")(y))

            inner.expand(y=[1, 2, 3])

        outer.expand(x=[1, 2])
    read = serialized(dag) if serialize else dag
    lengths = {t: literal_map_length(read.task_dict[t]) for t in mapped_task_ids(read)}
    assert lengths == {
        "nothing": 0,
        "nothing_by_product": 0,
        "by_dict": 2,
        "kwargs": 3,
        "kwargs_at_run_time": None,
        "partial": 4,
        "bash": 2,
        "outer.inner.a": 6,
        "outer.inner.b": 6,
    }
    assert index_wise_pairs(read, list(lengths)) == {("outer.inner.a", "outer.inner.b")}


def test_a_declared_map_length_counts_up_to_airflows_max_map_length(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapped, "max_map_length", lambda: 8)
    assert declared_map_length(_Task(hints={"map_length": 8})) == 8
    assert declared_map_length(_Task(hints={"map_length": 0})) == 0
    assert declared_map_length(_Task(hints={"map_length": 9})) is None
    assert declared_map_length(_Task(hints={})) is None
    assert declared_map_length(_Task()) is None


def test_map_length_findings_name_the_dag_the_task_the_limit_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mapped, "max_map_length", lambda: 8)
    tasks = {
        "too_long": _Task(hints={"map_length": 9}),
        "not_mapped": _Task(hints={"map_length": 2}, mapped=False),
        "fine": _Task(hints={"map_length": 8}),
        "undeclared": _Task(hints={"gpus": 1}),
        "no_config": _Task(),
    }
    findings = map_length_findings("sweep", tasks)
    assert [(f.severity, f.code, f.dag_id, f.task_id) for f in findings] == [
        (ERROR, "bad-map-length", "sweep", "too_long"),
        (ERROR, "bad-map-length", "sweep", "not_mapped"),
    ]
    too_long, not_mapped = findings
    assert "map_length 9" in too_long.message and "max_map_length (8)" in too_long.message
    assert "at most 8 instances" in too_long.fix
    assert "not a mapped task" in not_mapped.message and ".expand()" in not_mapped.fix


def test_a_map_length_over_the_limit_leaves_the_count_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """The task could never expand to it; planning with it would be planning a failure."""
    monkeypatch.setattr(mapped, "max_map_length", lambda: 8)
    dag = _Dag({"shard": _Task(None, hints={"map_length": 9})})
    assert map_lengths(dag) == ({"shard": None}, {})
    assert map_lengths(dag, {"shard": 3}) == ({"shard": 3}, {"shard": "history"})


def test_history_of_a_task_that_is_not_mapped_is_ignored() -> None:
    dag = _Dag({"plain": _Task(mapped=False), "shard": _Task(_Input({"x": [1, 2]}))})
    assert map_lengths(dag, {"plain": 4, "gone": 2}) == ({"shard": 2}, {"shard": "expand"})


def test_index_wise_pairs_join_only_tasks_of_one_mapped_group() -> None:
    fold, other = _Group("fold", {"x": [1, 2]}), _Group("other", {"x": [1, 2]})
    dag = _Dag(
        {
            "fold.train": _Task(groups=[fold], downstream=["fold.score", "other.score", "report"]),
            "fold.score": _Task(groups=[fold]),
            "other.score": _Task(groups=[other]),
            "loose": _Task(_Input({"x": [1, 2]}), downstream=["alone"]),
            "alone": _Task(_Input({"x": [1, 2]})),
            "report": _Task(mapped=False),
        }
    )
    assert index_wise_pairs(dag, ["fold.train", "fold.score", "other.score", "loose", "alone"]) == {
        ("fold.train", "fold.score")
    }


def test_a_dag_without_mapped_tasks_keeps_its_graph_object() -> None:
    graph = TaskGraph.from_edges("plain", {"a": 1.0}, [])
    assert expand_dag_graph(_Dag({"a": _Task(mapped=False)}), graph) is graph


def test_expand_dag_graph_records_where_each_count_came_from() -> None:
    dag = _Dag({"prep": _Task(mapped=False, downstream=["shard"]), "shard": _Task(_Input({"x": [1, 2]}))})
    graph = TaskGraph.from_edges("fake", {"prep": 1.0, "shard": 5.0}, [("prep", "shard")])
    expanded = expand_dag_graph(dag, graph)
    assert expanded.downstream("prep") == ["shard[0]", "shard[1]"]
    assert expanded.nodes["shard[1]"].attrs["map_source"] == "expand"
    assert list(graph.nodes) == ["prep", "shard"]
