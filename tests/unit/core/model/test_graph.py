"""Tests of ``airflow_gpu_dag.core.model.graph``: the task graph, its nodes, and a task's pool and slots."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from airflow_gpu_dag.core.model.graph import CycleError, TaskGraph, TaskNode, task_pool, task_slots
from airflow_gpu_dag.core.model.pools import DEFAULT_POOL
from airflow_gpu_dag.core.model.resources import GpuRequest
from tests.unit.graphs import gpu_graph


def _graph(tasks: str, edges: Sequence[tuple[str, str]] = (), dag_id: str = "d") -> TaskGraph:
    """Tasks named by the letters of ``tasks``, added in that order, each taking 1 s."""
    return TaskGraph.from_edges(dag_id, dict.fromkeys(tasks, 1.0), edges)


# -- TaskNode ------------------------------------------------------------------------------------------
def test_a_bare_node_is_a_declared_zero_second_cpu_task_in_no_pool() -> None:
    node = TaskNode("t")
    assert (node.duration, node.gpu, node.gpus) == (0.0, None, 0)
    assert (node.pool, node.pool_slots, node.retries, node.not_before) == (None, 1, 0, 0.0)
    assert (node.inputs, node.outputs, node.awaits, node.attrs) == ((), (), (), {})
    assert node.duration_declared is True


def test_nodes_do_not_share_their_attrs_dict() -> None:
    """``attrs`` is a per-node default: writing one node's must not show up in another's."""
    first, second = TaskNode("a"), TaskNode("b")
    first.attrs["map_of"] = "m"
    assert second.attrs == {}


def test_gpus_is_the_count_of_the_gpu_request() -> None:
    assert TaskNode("train", gpu=GpuRequest(4, memory_mib=40_000, gpu_type="a100")).gpus == 4


# -- building ------------------------------------------------------------------------------------------
def test_an_empty_graph_has_no_tasks_edges_sources_or_sinks() -> None:
    graph = TaskGraph()
    assert graph.dag_id == "dag" and graph.priority_rule is None
    assert (len(graph), list(graph), graph.edge_count, list(graph.edges())) == (0, [], 0, [])
    assert (graph.sources(), graph.sinks(), graph.topological_order(), graph.find_cycle()) == (
        [],
        [],
        [],
        None,
    )


def test_add_task_returns_the_node_and_indexes_it_by_its_task_id() -> None:
    graph = TaskGraph("d", priority_rule="packing")
    node = TaskNode("prep", duration=60.0)
    assert graph.add_task(node) is node
    assert graph.nodes == {"prep": node}
    assert "prep" in graph and "train" not in graph
    assert graph.priority_rule == "packing"


def test_membership_of_a_non_string_is_false_not_an_error() -> None:
    graph = _graph("a")
    assert 1 not in graph and None not in graph


def test_adding_a_task_again_replaces_the_node_but_keeps_its_edges_and_position() -> None:
    graph = _graph("abc", [("a", "b"), ("b", "c")])
    replacement = graph.add_task(TaskNode("b", duration=99.0))
    assert graph.nodes["b"] is replacement
    assert list(graph) == ["a", "b", "c"]
    assert (graph.upstream("b"), graph.downstream("b")) == (["a"], ["c"])
    assert graph.edge_count == 2


def test_add_with_gpus_makes_a_gpu_request_of_that_many_whole_gpus() -> None:
    graph = TaskGraph("d")
    train = graph.add("train", 3600.0, 8, pool="gpu", retries=2)
    assert train.gpu == GpuRequest(8)
    assert (train.duration, train.pool, train.retries) == (3600.0, "gpu", 2)


def test_add_with_no_gpus_makes_a_cpu_task() -> None:
    """``gpus=0`` means no GPU at all, not a request for zero GPUs (which GpuRequest refuses)."""
    assert TaskGraph("d").add("prep", 60.0).gpu is None
    assert TaskGraph("d").add("prep", 60.0, 0).gpu is None


@pytest.mark.parametrize(("upstream", "downstream", "unknown"), [("a", "x", "x"), ("x", "a", "x")])
def test_an_edge_to_an_unknown_task_names_the_dag_and_the_task(
    upstream: str, downstream: str, unknown: str
) -> None:
    graph = _graph("a", dag_id="etl")
    with pytest.raises(KeyError, match=f"DAG 'etl': edge refers to unknown task '{unknown}'"):
        graph.add_edge(upstream, downstream)


def test_a_refused_edge_leaves_the_graph_unchanged() -> None:
    graph = _graph("a")
    with pytest.raises(KeyError):
        graph.add_edge("a", "missing")
    assert graph.edge_count == 0 and graph.downstream("a") == [] and "missing" not in graph


def test_an_edge_added_twice_is_one_edge_with_the_last_kind() -> None:
    graph = _graph("ab")
    graph.add_edge("a", "b", "control")
    graph.add_edge("a", "b", "data")
    assert graph.edge_count == 1
    assert list(graph.edges()) == [("a", "b", "data")]
    assert (graph.downstream("a"), graph.upstream("b")) == (["b"], ["a"])


# -- reading -------------------------------------------------------------------------------------------
def test_iteration_follows_insertion_order_not_name_order() -> None:
    graph = _graph("cab")
    assert list(graph) == ["c", "a", "b"] and len(graph) == 3


def test_upstream_and_downstream_list_neighbours_in_edge_insertion_order() -> None:
    graph = _graph("abcd", [("a", "d"), ("c", "d"), ("b", "d"), ("a", "c"), ("a", "b")])
    assert graph.upstream("d") == ["a", "c", "b"]
    assert graph.downstream("a") == ["d", "c", "b"]
    assert graph.upstream("a") == [] and graph.downstream("d") == []


def test_upstream_returns_a_copy_that_cannot_change_the_graph() -> None:
    graph = _graph("ab", [("a", "b")])
    graph.upstream("b").append("x")
    graph.downstream("a").clear()
    assert (graph.upstream("b"), graph.downstream("a")) == (["a"], ["b"])


def test_edges_yield_each_edge_once_with_its_kind() -> None:
    graph = _graph("abc")
    graph.add_edge("a", "b", "data")
    graph.add_edge("b", "c")
    graph.add_edge("a", "c", "time")
    assert list(graph.edges()) == [("a", "b", "data"), ("a", "c", "time"), ("b", "c", None)]
    assert graph.edge_count == 3


def test_edge_kind_is_the_label_given_and_none_for_an_untyped_edge() -> None:
    graph = _graph("abc")
    graph.add_edge("a", "b", "cleanup")
    graph.add_edge("b", "c")
    assert graph.edge_kind("a", "b") == "cleanup"
    assert graph.edge_kind("b", "c") is None


def test_edge_kind_is_none_where_there_is_no_edge() -> None:
    """Neither direction of a missing edge is an error: ``b -> a`` was never added."""
    graph = _graph("ab", [("a", "b")])
    assert graph.edge_kind("b", "a") is None


def test_sources_and_sinks_include_an_isolated_task() -> None:
    graph = _graph("abcz", [("a", "b"), ("a", "c")])
    assert graph.sources() == ["a", "z"]
    assert graph.sinks() == ["b", "c", "z"]


@pytest.mark.parametrize("read", ["upstream", "downstream", "descendants", "ancestors"])
def test_reading_the_neighbours_of_an_unknown_task_raises_key_error(read: str) -> None:
    with pytest.raises(KeyError):
        getattr(_graph("a"), read)("missing")


# -- reachability --------------------------------------------------------------------------------------
def test_descendants_and_ancestors_follow_every_path_but_exclude_the_task() -> None:
    graph = _graph("abcdez", [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e")])
    assert graph.descendants("a") == {"b", "c", "d", "e"}
    assert graph.descendants("c") == {"d", "e"}
    assert graph.ancestors("e") == {"a", "b", "c", "d"}
    assert graph.ancestors("b") == {"a"}
    assert graph.descendants("e") == set() and graph.ancestors("a") == set()
    assert graph.descendants("z") == set() == graph.ancestors("z")


def test_a_task_on_a_cycle_is_its_own_descendant_and_ancestor() -> None:
    graph = _graph("abc", [("a", "b"), ("b", "a"), ("b", "c")])
    assert graph.descendants("a") == {"a", "b", "c"}
    assert graph.ancestors("a") == {"a", "b"}


# -- order ---------------------------------------------------------------------------------------------
def test_topological_order_puts_every_task_after_its_upstream_tasks() -> None:
    graph = _graph("edcba", [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")])
    assert graph.topological_order() == ["a", "b", "c", "d", "e"]


def test_topological_order_of_independent_tasks_is_insertion_order() -> None:
    assert _graph("qzam").topological_order() == ["q", "z", "a", "m"]


def test_topological_order_of_a_diamond_runs_the_join_after_both_branches() -> None:
    graph = _graph("adcb", [("a", "c"), ("a", "b"), ("b", "d"), ("c", "d")])
    assert graph.topological_order() == ["a", "c", "b", "d"]


def test_topological_order_puts_the_tasks_a_task_makes_ready_before_tasks_ready_earlier() -> None:
    """Ties are broken depth first: once ``a`` is done, ``c`` (which it released) goes before ``b``, ready
    since the start, so a chain stays together; the first ready tasks keep their insertion order."""
    graph = _graph("abc", [("a", "c")])
    assert graph.topological_order() == ["a", "c", "b"]
    assert _graph("abcd", [("a", "d"), ("a", "c")]).topological_order() == ["a", "d", "c", "b"]


def test_topological_order_refuses_a_cycle_naming_its_tasks_and_the_fix() -> None:
    graph = _graph("abcd", [("a", "b"), ("b", "c"), ("c", "b"), ("c", "d")], dag_id="loop")
    with pytest.raises(CycleError) as err:
        graph.topological_order()
    assert err.value.dag_id == "loop"
    assert err.value.cycle == ["b", "c", "b"]
    assert str(err.value) == (
        "DAG 'loop' has a dependency cycle: b -> c -> b. Remove one of these edges so the graph is acyclic."
    )


def test_a_cycle_error_is_a_value_error() -> None:
    """Callers that catch ValueError for a bad DAG also catch a cycle."""
    with pytest.raises(ValueError, match="a -> b -> a"):
        _graph("ab", [("a", "b"), ("b", "a")]).topological_order()


def test_find_cycle_is_none_for_an_acyclic_graph_with_shared_descendants() -> None:
    """A diamond reaches ``d`` twice; a task seen twice is not a cycle."""
    assert _graph("abcd", [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]).find_cycle() is None


def test_find_cycle_returns_the_cycle_with_its_first_task_repeated_at_the_end() -> None:
    graph = _graph("abcd", [("a", "b"), ("b", "c"), ("c", "d"), ("d", "b")])
    assert graph.find_cycle() == ["b", "c", "d", "b"]


def test_a_self_loop_is_a_cycle_of_one_task() -> None:
    graph = _graph("ab", [("a", "b"), ("b", "b")], dag_id="self")
    assert graph.find_cycle() == ["b", "b"]
    with pytest.raises(CycleError, match="DAG 'self' has a dependency cycle: b -> b\\."):
        graph.topological_order()


def test_find_cycle_finds_a_cycle_not_reachable_from_the_first_task() -> None:
    graph = _graph("axy", [("x", "y"), ("y", "x")])
    assert graph.find_cycle() == ["x", "y", "x"]


# -- with_nodes ----------------------------------------------------------------------------------------
def test_with_nodes_and_nothing_changed_is_the_same_graph() -> None:
    graph = _graph("ab", [("a", "b")])
    assert graph.with_nodes({}) is graph


def test_with_nodes_puts_the_changed_nodes_in_a_copy_with_the_same_edges_and_rule() -> None:
    graph = TaskGraph("d", priority_rule="critical_path")
    for task_id in "abc":
        graph.add(task_id, 10.0)
    graph.add_edge("a", "b", "data")
    graph.add_edge("b", "c")
    faster = TaskNode("b", duration=1.0)
    copy = graph.with_nodes({"b": faster})
    assert copy is not graph
    assert (copy.dag_id, copy.priority_rule) == ("d", "critical_path")
    assert list(copy) == ["a", "b", "c"]
    assert copy.nodes["b"] is faster
    assert copy.nodes["a"] is graph.nodes["a"] and copy.nodes["c"] is graph.nodes["c"]
    assert list(copy.edges()) == [("a", "b", "data"), ("b", "c", None)]


def test_with_nodes_never_modifies_the_original_graph() -> None:
    graph = _graph("ab", [("a", "b")])
    original_b = graph.nodes["b"]
    copy = graph.with_nodes({"b": TaskNode("b", duration=5.0)})
    copy.add("c")
    copy.add_edge("b", "c")
    assert graph.nodes["b"] is original_b and graph.nodes["b"].duration == 1.0
    assert list(graph) == ["a", "b"] and list(graph.edges()) == [("a", "b", None)]
    assert graph.downstream("b") == []


def test_with_nodes_keeps_the_order_of_each_tasks_upstream_and_downstream_tasks() -> None:
    """'Insertion order is kept everywhere': a plan made from the copy (``TaskPlan.upstream``) lists a
    task's upstream tasks as the original's does."""
    graph = _graph("abc", [("b", "c"), ("a", "c")])
    copy = graph.with_nodes({"a": TaskNode("a", duration=2.0)})
    assert copy.upstream("c") == graph.upstream("c") == ["b", "a"]
    assert list(copy.edges()) == list(graph.edges())
    copy.add_edge("a", "b")  # the copy's adjacency is its own
    assert graph.downstream("a") == ["c"] and copy.downstream("a") == ["c", "b"]


# -- from_edges ----------------------------------------------------------------------------------------
def test_from_edges_builds_tasks_in_dict_order_with_their_durations_gpus_and_edges() -> None:
    graph = TaskGraph.from_edges(
        "wf",
        {"prep": 60.0, "train": 3600.0, "eval": 600.0},
        [("prep", "train"), ("train", "eval")],
        {"train": 4},
    )
    assert graph.dag_id == "wf" and graph.priority_rule is None
    assert list(graph) == ["prep", "train", "eval"]
    assert {t: n.duration for t, n in graph.nodes.items()} == {"prep": 60.0, "train": 3600.0, "eval": 600.0}
    assert {t: n.gpus for t, n in graph.nodes.items()} == {"prep": 0, "train": 4, "eval": 0}
    assert graph.nodes["prep"].gpu is None
    assert list(graph.edges()) == [("prep", "train", None), ("train", "eval", None)]


def test_from_edges_refuses_an_edge_to_a_task_without_a_duration() -> None:
    with pytest.raises(KeyError, match="DAG 'wf': edge refers to unknown task 'ghost'"):
        TaskGraph.from_edges("wf", {"prep": 60.0}, [("prep", "ghost")])


# -- task_pool and task_slots ----------------------------------------------------------------------------
def test_a_task_without_a_pool_uses_airflows_default_pool() -> None:
    assert task_pool(TaskNode("t")) == DEFAULT_POOL == "default_pool"
    assert task_pool(TaskNode("t", pool="")) == DEFAULT_POOL


def test_a_task_with_a_pool_uses_it() -> None:
    assert task_pool(TaskNode("t", pool="gpu_h100")) == "gpu_h100"


def test_a_gpu_task_holds_one_slot_per_gpu_whatever_its_pool_slots() -> None:
    assert task_slots(TaskNode("t", gpu=GpuRequest(4), pool_slots=1)) == 4
    assert task_slots(TaskNode("t", gpu=GpuRequest(2), pool_slots=8)) == 2


@pytest.mark.parametrize(("pool_slots", "slots"), [(1, 1), (3, 3), (0, 0), (-2, 0)])
def test_a_cpu_task_holds_its_pool_slots_never_negative(pool_slots: int, slots: int) -> None:
    assert task_slots(TaskNode("t", pool_slots=pool_slots)) == slots


def test_task_slots_and_pool_of_the_shared_gpu_graph_helper() -> None:
    """The helper graphs' GPU tasks hold their GPUs in pool ``gpu``; their CPU tasks use the default pool."""
    graph = gpu_graph({"prep": (60.0, 0), "train": (3600.0, 4)}, [("prep", "train")])
    assert [(task_pool(n), task_slots(n)) for n in graph.nodes.values()] == [(DEFAULT_POOL, 1), ("gpu", 4)]
