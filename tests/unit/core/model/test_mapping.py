"""Mapped tasks expanded into their instances: N from literal expand() arguments, past runs or the
map_length hint; edges fan out and in; unknown N keeps one node. On authoring and serialized DAGs."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.mapping import expand_mapped, node_for, weights_by_task


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
