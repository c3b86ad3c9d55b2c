"""Hedging a plan against estimate errors: the worlds and the last choice among the best options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.hedging import final_choice, perturbed, worlds
from airflow_gpu_dag.core.planning.planner import packing_weights_plan
from tests.unit.graphs import gpu_graph

DIAMOND = gpu_graph(
    {"a": (10, 1), "b": (5, 8), "c": (20, 1), "d": (1, 1), "e": (3, 1)},
    [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
)


def learned(graph: TaskGraph, error: float) -> TaskGraph:
    """``graph`` as the provider builds it from learned durations with standard error ``error``."""
    copy = TaskGraph(graph.dag_id)
    for node in graph.nodes.values():
        copy.add_task(replace(node, attrs={**node.attrs, "learned_error": error}))
    for up, down, kind in graph.edges():
        copy.add_edge(up, down, kind)
    return copy


def test_worlds_are_seeded_and_tags_draw_apart() -> None:
    first = worlds(DIAMOND, 0.1, 3)
    assert [w.nodes["c"].duration for w in first] == [w.nodes["c"].duration for w in worlds(DIAMOND, 0.1, 3)]
    # the untagged worlds are the planner's scoring worlds as before: perturbed(graph, e, "<dag>:<k>")
    assert first[1].nodes["a"].duration == perturbed(DIAMOND, 0.1, "g:1").nodes["a"].duration
    fresh = worlds(DIAMOND, 0.1, 3, "final")
    assert {w.nodes["c"].duration for w in fresh}.isdisjoint({w.nodes["c"].duration for w in first})
    assert worlds(DIAMOND, 0.0, 3) == []
    # structure kept, only durations move
    assert set(fresh[0].edges()) == set(DIAMOND.edges()) and fresh[0].nodes["b"].gpus == 8


def test_final_choice_keeps_the_shortest_on_fresh_worlds_among_the_best_few() -> None:
    ranked: list[Mapping[str, int]] = [{"a": 1}, {"a": 2}, {"a": 1}, {"a": 3}, {"a": 4}]
    fresh_makespan = {1: 50.0, 2: 40.0, 3: 30.0, 4: 10.0}
    calls: list[int] = []

    def makespan_in(weights: Mapping[str, int], world: TaskGraph) -> float:
        calls.append(weights["a"])
        return fresh_makespan[weights["a"]] + world.nodes["a"].duration

    fresh = worlds(DIAMOND, 0.1, 2, "final")
    index, scores = final_choice(ranked, makespan_in, fresh, finalists=3)
    # the duplicate at index 2 is skipped; the 5th option (best on fresh worlds) is not a finalist
    assert sorted(scores) == [0, 1, 3] and index == 3
    assert sorted(set(calls)) == [1, 2, 3] and len(calls) == 3 * len(fresh)
    assert scores[3] == pytest.approx(30.0 + sum(w.nodes["a"].duration for w in fresh) / 2)


def test_final_choice_ties_go_to_the_better_ranked_and_no_worlds_keep_the_first() -> None:
    ranked: list[Mapping[str, int]] = [{"a": 1}, {"a": 2}]
    assert final_choice(ranked, lambda w, world: 7.0, worlds(DIAMOND, 0.1, 2))[0] == 0
    assert final_choice(ranked, lambda w, world: 1 / 0, []) == (0, {})
    assert final_choice([], lambda w, world: 1.0, worlds(DIAMOND, 0.1, 2)) == (0, {})


def test_learned_plans_are_chosen_on_fresh_worlds_declared_ones_are_not() -> None:
    caps = {"gpu": 8}
    graph = learned(DIAMOND, 0.05)
    plan = packing_weights_plan(graph, caps, "reservation")
    fresh = {label for label in plan.tried if label.endswith("(fresh worlds)")}
    assert fresh and len(fresh) <= 3
    # the winner is one of the finalists, and deterministic
    again = packing_weights_plan(graph, caps, "reservation")
    assert again.weights == plan.weights and again.tried == plan.tried
    skipped = packing_weights_plan(graph, caps, "reservation", final_worlds=0)
    assert not any(label.endswith("(fresh worlds)") for label in skipped.tried)
    # declared estimates carry no error: no worlds at all, no final comparison
    declared = packing_weights_plan(DIAMOND, caps, "reservation")
    assert not any(label.endswith("(fresh worlds)") for label in declared.tried)
