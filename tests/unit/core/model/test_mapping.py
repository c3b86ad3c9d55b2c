"""Mapped tasks expanded into their instances: N from literal expand() arguments, past runs or the
map_length hint; edges fan out and in; unknown N keeps one node. On authoring and serialized DAGs."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.mapping import (
    expand_mapped,
    expanded_id,
    node_for,
    task_of,
    typical_map_count,
    weights_by_task,
)


def test_expand_mapped_core() -> None:
    graph = TaskGraph.from_edges("g", {"a": 1, "m": 10, "n": 5, "z": 1}, [("a", "m"), ("m", "n"), ("n", "z")])
    expanded = expand_mapped(graph, {"m": 2, "n": 3})
    assert sorted(expanded.downstream("m[0]")) == ["n[0]", "n[1]", "n[2]"]  # every pair joined
    assert expanded.edge_count == 2 + 2 * 3 + 3
    assert analyze(expanded).makespan == analyze(graph).makespan
    pairs = expand_mapped(graph, {"m": 3, "n": 3}, index_wise={("m", "n")})
    assert pairs.downstream("m[2]") == ["n[2]"]
    empty = expand_mapped(graph, {"m": 0})
    assert empty.nodes["m"].duration == 0 and empty.downstream("a") == ["m"]
    with pytest.raises(ValueError, match="negative"):
        expand_mapped(graph, {"m": -1})


def test_node_for_and_weights_by_task() -> None:
    graph = expand_mapped(TaskGraph.from_edges("g", {"a": 1, "m": 10}, [("a", "m")]), {"m": 2})
    assert node_for(graph, "m", 1) == "m[1]" and node_for(graph, "a") == "a"
    assert node_for(graph, "m", 7) is None and node_for(graph, "zzz") is None
    assert weights_by_task(graph, {"a": 11, "m[0]": 10, "m[1]": 12}) == {"a": 11, "m": 12}


def test_a_task_mapped_over_nothing_holds_no_gpus_in_predictions() -> None:
    # Airflow skips a mapped task with 0 instances at once, so its node holds no GPUs: with its 4 GPUs
    # at duration 0 it would wait until all 4 are free together and hold back everything after it.
    from airflow_gpu_dag.core.simulation.simulator import simulate

    graph = TaskGraph("zero_map")
    graph.add("long", 3600.0, 1, pool="gpu")  # an unrelated 1-GPU job of an hour
    graph.add("split", 10.0)
    graph.add("train", 1800.0, 4, pool="gpu")  # mapped over split's (empty) output
    graph.add("report", 60.0)
    graph.add_edge("split", "train")
    graph.add_edge("train", "report")
    expanded = expand_mapped(graph, {"train": 0})
    node = expanded.nodes["train"]
    assert (node.duration, node.gpus, node.attrs["declared_duration"], node.attrs["map_count"]) == (
        0.0,
        0,
        1800.0,
        0,
    )
    for policy, priority in (("stock", None), ("critical_path", None), ("reservation", "critical_path")):
        report = simulate(expanded, {"gpu": 4}, policy, priority=priority).by_id()["report"]
        assert report.end == pytest.approx(70.0), policy


def _chain(kinds: tuple[str | None, str | None] = (None, None)) -> TaskGraph:
    """``a -> m -> z``, ``m`` a 2-GPU task of pool ``gpu``, the edges of ``kinds``."""
    graph = TaskGraph("chain", priority_rule="packing")
    graph.add("a", 1.0)
    graph.add("m", 10.0, 2, pool="gpu", attrs={"note": "kept"})
    graph.add("z", 1.0)
    graph.add_edge("a", "m", kinds[0])
    graph.add_edge("m", "z", kinds[1])
    return graph


def test_expanded_instances_take_the_tasks_place_in_the_graph_order() -> None:
    """Ties in priority are broken by graph order, so the instances must sit where the task was."""
    expanded = expand_mapped(_chain(), {"m": 3})
    assert list(expanded.nodes) == ["a", "m[0]", "m[1]", "m[2]", "z"]
    assert (expanded.dag_id, expanded.priority_rule) == ("chain", "packing")


def test_each_instance_is_a_copy_of_the_task_naming_its_task_and_index() -> None:
    expanded = expand_mapped(_chain(), {"m": 2}, sources={"m": "history"})
    for index in range(2):
        node = expanded.nodes[expanded_id("m", index)]
        assert (node.duration, node.gpus, node.pool) == (10.0, 2, "gpu")
        assert node.attrs == {
            "note": "kept",
            "mapped": True,
            "map_source": "history",
            "map_count": 2,
            "map_of": "m",
            "map_index": index,
        }
        assert task_of(expanded, node.task_id) == "m"
    assert task_of(expanded, "a") == "a"


def test_expanding_leaves_the_graph_it_was_given_as_it_was() -> None:
    graph = _chain()
    expand_mapped(graph, {"m": 4})
    expand_mapped(graph, {"m": 0})
    assert list(graph.nodes) == ["a", "m", "z"] and graph.edge_count == 2
    assert graph.nodes["m"].attrs == {"note": "kept"}
    assert (graph.nodes["m"].duration, graph.nodes["m"].gpus) == (10.0, 2)


def test_fan_out_and_fan_in_edges_keep_their_kind() -> None:
    expanded = expand_mapped(_chain(("data", "control")), {"m": 2})
    assert sorted(expanded.edges()) == [
        ("a", "m[0]", "data"),
        ("a", "m[1]", "data"),
        ("m[0]", "z", "control"),
        ("m[1]", "z", "control"),
    ]


def test_a_task_of_one_instance_becomes_instance_zero() -> None:
    """Airflow runs it as ``m`` with map index 0, not as an unmapped ``m``."""
    expanded = expand_mapped(_chain(), {"m": 1})
    assert list(expanded.nodes) == ["a", "m[0]", "z"]
    assert node_for(expanded, "m", 0) == "m[0]"


def test_a_task_of_unknown_count_stays_one_node_marked_mapped() -> None:
    expanded = expand_mapped(_chain(), {"m": None}, sources={"m": "declared"})
    node = expanded.nodes["m"]
    assert node.attrs == {"note": "kept", "mapped": True, "map_source": "declared"}
    assert "map_count" not in node.attrs and (node.duration, node.gpus) == (10.0, 2)
    assert expanded.downstream("a") == ["m"] and expanded.downstream("m") == ["z"]


def test_counts_of_tasks_the_graph_does_not_have_are_ignored() -> None:
    expanded = expand_mapped(_chain(), {"gone": 3})
    assert list(expanded.nodes) == ["a", "m", "z"] and expanded.edge_count == 2


def test_a_negative_count_is_refused_naming_the_dag_and_the_task() -> None:
    with pytest.raises(ValueError, match=r"DAG 'chain': mapped task 'm' has a negative count -2"):
        expand_mapped(_chain(), {"m": -2})


def test_index_wise_pairs_of_different_counts_are_joined_every_pair() -> None:
    """Instance by instance needs one N on both sides; otherwise no instance may lose its upstream."""
    graph = TaskGraph.from_edges("g", {"m": 1, "n": 1}, [("m", "n")])
    expanded = expand_mapped(graph, {"m": 2, "n": 3}, index_wise={("m", "n")})
    assert all(expanded.upstream(f"n[{i}]") == ["m[0]", "m[1]"] for i in range(3))


def test_index_wise_pairs_join_only_the_listed_edge() -> None:
    graph = TaskGraph.from_edges("g", {"m": 1, "n": 1, "o": 1}, [("m", "n"), ("n", "o")])
    expanded = expand_mapped(graph, {"m": 2, "n": 2, "o": 2}, index_wise={("m", "n")})
    assert expanded.upstream("n[1]") == ["m[1]"]
    assert expanded.upstream("o[1]") == ["n[0]", "n[1]"]


def test_a_task_mapped_over_nothing_keeps_a_declared_duration_it_already_had() -> None:
    graph = _chain()
    graph.nodes["m"].attrs["declared_duration"] = 99.0
    node = expand_mapped(graph, {"m": 0}).nodes["m"]
    assert (node.duration, node.attrs["declared_duration"]) == (0.0, 99.0)


def test_a_task_mapped_over_nothing_waits_for_no_pool_slot() -> None:
    """Airflow skips a mapped task with 0 instances at once. Its node takes ``pool=None,
    pool_slots=1``: one slot of ``default_pool``, so where that pool is sized and busy (an hour-long
    CPU task) the zero node, and everything after it, waits the hour."""
    from airflow_gpu_dag.core.model.graph import task_slots
    from airflow_gpu_dag.core.simulation.simulator import simulate

    graph = TaskGraph("zero_in_default")
    graph.add("long", 3600.0)  # a CPU task in default_pool
    graph.add("split", 10.0, pool="cpu")
    graph.add("train", 1800.0, 4, pool="gpu")
    graph.add("report", 60.0, pool="cpu")
    graph.add_edge("split", "train")
    graph.add_edge("train", "report")
    expanded = expand_mapped(graph, {"train": 0})
    assert task_slots(expanded.nodes["train"]) == 0
    report = simulate(expanded, {"gpu": 4, "default_pool": 1}, "stock").by_id()["report"]
    assert report.end == pytest.approx(70.0)


def test_an_instance_of_a_task_left_as_one_node_is_found_at_that_node() -> None:
    """A task whose N was unknown when planning runs as ``m`` map index 3 all the same."""
    graph = expand_mapped(_chain(), {"m": None})
    assert node_for(graph, "m", 3) == "m"
    assert node_for(graph, "m") == "m"


def test_an_expanded_task_has_no_node_of_its_own() -> None:
    graph = expand_mapped(_chain(), {"m": 2})
    assert node_for(graph, "m") is None and node_for(graph, "m", -1) is None


def test_weights_by_task_keeps_the_largest_whatever_the_order_and_passes_unknown_ids() -> None:
    graph = expand_mapped(_chain(), {"m": 3})
    assert weights_by_task(graph, {"m[0]": 9, "m[1]": 3, "m[2]": 5, "gone": 7}) == {"m": 9, "gone": 7}
    assert weights_by_task(graph, {"m[2]": -5, "m[0]": -9}) == {"m": -5}
    assert weights_by_task(graph, {}) == {}


def test_task_of_a_node_the_graph_does_not_have_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        task_of(_chain(), "m[0]")


def test_the_planned_count_of_runs_with_no_instances_is_none_of_them() -> None:
    assert typical_map_count([0, 0, 3]) == 0
    assert typical_map_count((4,)) == 4
    assert typical_map_count([1, 2, 3, 4]) == 3  # 2.5 rounded up
