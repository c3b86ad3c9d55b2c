"""Priority rules (downstream, critical path, width-aware, work), the packing planner, justification,
and the PackingPriorityStrategy wrapper."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.analysis.weight_rules import (
    INT32_MAX,
    INT32_MIN,
    RuleUse,
    clamp_int32,
    critical_path_weights,
    descendant_counts,
    downstream_weights,
    incomparable_rules,
    plan_order_weights,
    resolve_priority,
    width_aware_weights,
    work_weights,
)
from airflow_gpu_dag.core.model.graph import CycleError, TaskGraph
from tests.unit.graphs import draw_task_graph, gpu_graph

DIAMOND = gpu_graph(
    {"a": (10, 1), "b": (5, 8), "c": (20, 1), "d": (1, 1), "e": (3, 1)},
    [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
)


def test_downstream_is_airflows_rule() -> None:
    assert downstream_weights(DIAMOND) == {"a": 4, "b": 2, "c": 2, "d": 1, "e": 1}


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_descendant_counts_are_stocks_weight_less_one_capped(data: st.DataObject) -> None:
    """What ``fair``'s key counts: Airflow's ``downstream`` weight less the task itself, up to the cap,
    computed without the exact count (which is O(V x E))."""
    graph = draw_task_graph(data.draw, "d", (1, 30), [0, 1], 10)
    cap = data.draw(st.integers(0, 40))
    exact = downstream_weights(graph)
    assert descendant_counts(graph, cap) == {t: min(w - 1, cap) for t, w in exact.items()}


def test_descendant_counts_stop_at_the_cap_on_a_wide_fan_out() -> None:
    fan = gpu_graph({"root": (1, 0), **{f"leaf{i}": (1, 0) for i in range(500)}}, [])
    for i in range(500):
        fan.add_edge("root", f"leaf{i}")
    counts = descendant_counts(fan, 64)
    assert counts["root"] == 64 and counts["leaf7"] == 0
    assert descendant_counts(DIAMOND, 2) == {"a": 2, "b": 1, "c": 1, "d": 0, "e": 0}


def test_critical_path_weights_are_remaining_seconds() -> None:
    assert critical_path_weights(DIAMOND) == {"a": 31, "b": 6, "c": 21, "d": 1, "e": 3}


def test_width_aware_charges_a_drain_to_wide_tasks_only() -> None:
    w = width_aware_weights(DIAMOND, {"gpu": 8})
    # slot-weighted mean duration of the pool: (10+40+20+1+3)/(1+8+1+1+1) = 74/12; b pays it in full
    mean = 74 / 12
    assert w["b"] == round((5 + mean + 1) * 10)
    assert w["c"] == 210 and w["d"] == 10 and w["e"] == 30
    # with only 1-slot tasks it orders exactly like the critical path
    narrow = gpu_graph({"x": (3, 1), "y": (7, 1), "z": (2, 1)}, [("x", "z")])
    cp = critical_path_weights(narrow)
    wa = width_aware_weights(narrow, {"gpu": 4})
    assert sorted(narrow.nodes, key=cp.__getitem__) == sorted(narrow.nodes, key=wa.__getitem__)


def test_work_weights_count_what_a_task_unlocks() -> None:
    w = work_weights(DIAMOND, {"gpu": 8})
    # a unlocks everything but e: (10 + 40 + 20 + 1) / 8 = 8.875 s
    assert w["a"] == round(71 / 8 * 10)
    assert w["e"] == round(3 / 8 * 10)


def test_resolve_priority_errors() -> None:
    with pytest.raises(ValueError, match="needs the pool capacities"):
        resolve_priority("width_aware")
    with pytest.raises(ValueError, match="unknown priority rule 'x'"):
        resolve_priority("x")


def test_plan_order_weights_follow_the_plan() -> None:
    w = plan_order_weights(DIAMOND, {"a": 0, "e": 0, "c": 10, "b": 30, "d": 35})
    assert w == {"a": 5, "e": 4, "c": 3, "b": 2, "d": 1}


np = pytest.importorskip("numpy")


def test_clamp_int32_clamps_infinities() -> None:
    assert clamp_int32(math.inf) == INT32_MAX
    assert clamp_int32(-math.inf) == INT32_MIN
    assert clamp_int32(np.float32("inf")) == INT32_MAX
    assert clamp_int32(10**400) == INT32_MAX and clamp_int32(2**31 - 1.4) == INT32_MAX
    with pytest.raises(ValueError):
        clamp_int32(math.nan)


# -- DAGs whose weights do not compare with the cross-DAG keys of DAGs sharing their GPU pools ------------
def test_a_dag_on_a_stock_rule_sharing_a_gpu_pool_with_cross_dag_keys_is_named() -> None:
    uses = [
        RuleUse("keyed_a", "gpu_default", "CriticalPathPriorityStrategy", cross_dag=True, gpu=True),
        RuleUse("keyed_b", "gpu_a100", "PackingPriorityStrategy", cross_dag=True, gpu=True),
        RuleUse("stock", "gpu_default", "downstream", cross_dag=False),
        RuleUse("stock", "gpu_a100", "upstream", cross_dag=False),
        RuleUse("stock", "default_pool", "downstream", cross_dag=False),
        RuleUse("alone", "gpu_h100", "downstream", cross_dag=False, gpu=True),  # no keyed DAG in its pool
        RuleUse("cpu_only", "default_pool", "downstream", cross_dag=False),  # default_pool: every DAG's
        RuleUse("keyed_a", "default_pool", "CriticalPathPriorityStrategy", cross_dag=True),
        RuleUse("team_pool", "team_x", "absolute", cross_dag=False),  # a GPU pool: a keyed GPU task in it
        RuleUse("keyed_b", "team_x", "PackingPriorityStrategy", cross_dag=True, gpu=True),
    ]
    found = incomparable_rules(uses)
    assert [(f.dag_id, f.rules, f.pools, f.shared_with) for f in found] == [
        ("stock", ("downstream", "upstream"), ("gpu_a100", "gpu_default"), ("keyed_a", "keyed_b")),
        ("team_pool", ("absolute",), ("team_x",), ("keyed_b",)),
    ]
    described = found[0].describe()
    assert described.startswith("DAG 'stock' uses weight rule 'downstream', 'upstream' in GPU pool(s) ")
    assert "gpu_a100, gpu_default, which DAG(s) 'keyed_a', 'keyed_b' use with cross-DAG keys" in described
    assert incomparable_rules([u for u in uses if u.cross_dag]) == []


# -- every rule on the graphs a user can hand it ----------------------------------------------------------
def _rules() -> list[tuple[str, Any]]:
    return [
        ("downstream", downstream_weights),
        ("critical_path", critical_path_weights),
        ("width_aware", lambda g: width_aware_weights(g, {"gpu": 8})),
        ("work", lambda g: work_weights(g, {"gpu": 8})),
    ]


def test_every_rule_gives_an_empty_dag_no_weights() -> None:
    empty = TaskGraph("empty")
    for name, rule in _rules():
        assert rule(empty) == {}, name
    assert descendant_counts(empty, 5) == {} and plan_order_weights(empty, {}) == {}


def test_every_rule_refuses_a_cycle_naming_it() -> None:
    cyclic = gpu_graph({"a": (1, 1), "b": (1, 1)}, [("a", "b"), ("b", "a")], dag_id="loop")
    for _name, rule in _rules():
        with pytest.raises(CycleError, match=r"DAG 'loop' has a dependency cycle: .*Remove one"):
            rule(cyclic)


def test_every_rule_weighs_every_task_with_an_int32() -> None:
    for name, rule in _rules():
        weights = rule(DIAMOND)
        assert set(weights) == set(DIAMOND.nodes), name
        assert all(type(w) is int and INT32_MIN <= w <= INT32_MAX for w in weights.values()), name


def test_a_duration_too_long_for_int32_clamps_to_the_bound() -> None:
    """Ten years in tenths of a second is past int32: the weight is the bound, not a number Airflow's
    column cannot store (in whole seconds it still fits)."""
    decade = 10 * 365 * 86400
    huge = gpu_graph({"long": (float(decade), 2), "after": (1, 1)}, [("long", "after")])
    assert critical_path_weights(huge)["long"] == decade + 1
    assert width_aware_weights(huge, {"gpu": 8})["long"] == INT32_MAX
    assert work_weights(huge, {"gpu": 1})["long"] == INT32_MAX
    assert work_weights(huge, {"gpu": 1})["after"] == 10


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (INT32_MAX, INT32_MAX),
        (INT32_MAX + 1, INT32_MAX),
        (INT32_MIN, INT32_MIN),
        (-(2**40), INT32_MIN),
        (0.4, 0),
    ],
)
def test_clamp_int32_keeps_the_bounds_and_rounds(value: float, expected: int) -> None:
    assert clamp_int32(value) == expected


def test_descendant_counts_with_a_cap_of_zero_or_less_are_zero() -> None:
    assert descendant_counts(DIAMOND, 0) == dict.fromkeys(DIAMOND.nodes, 0)
    assert descendant_counts(DIAMOND, -3) == dict.fromkeys(DIAMOND.nodes, 0)


def test_a_descendant_reached_along_two_paths_counts_once() -> None:
    assert descendant_counts(DIAMOND, 100)["a"] == 3
    assert work_weights(DIAMOND, {"gpu": 1})["a"] == ((10 + 5 * 8 + 20 + 1) * 10)


# -- width_aware ------------------------------------------------------------------------------------------
def test_width_aware_is_the_critical_path_in_tenths_when_the_pool_has_one_slot() -> None:
    """``(w - 1) / (C - 1)`` has no meaning for C = 1: no drain is charged (no division by zero)."""
    assert width_aware_weights(DIAMOND, {"gpu": 1}) == {
        t: w * 10 for t, w in critical_path_weights(DIAMOND).items()
    }


def test_width_aware_charges_a_task_wider_than_its_pool_the_whole_drain_only() -> None:
    graph = gpu_graph({"wide": (10, 16), "narrow": (10, 1)}, [])
    mean = (10 * 16 + 10 * 1) / 17
    assert width_aware_weights(graph, {"gpu": 4})["wide"] == round((10 + mean) * 10)  # (min(16, 4)-1)/(4-1)


def test_width_aware_charges_nothing_in_a_pool_without_a_capacity() -> None:
    assert width_aware_weights(DIAMOND, {"other": 8}) == {
        t: w * 10 for t, w in critical_path_weights(DIAMOND).items()
    }


def test_width_aware_uses_each_pools_own_mean() -> None:
    graph = TaskGraph("two")
    graph.add("a_wide", 10.0, 4, pool="pa")
    graph.add("a_long", 90.0, 1, pool="pa")
    graph.add("b_wide", 10.0, 4, pool="pb")
    weights = width_aware_weights(graph, {"pa": 4, "pb": 4})
    assert weights["a_wide"] == round((10 + (10 * 4 + 90) / 5) * 10)
    assert weights["b_wide"] == ((10 + 10) * 10)


# -- work ----------------------------------------------------------------------------------------------
def test_work_in_a_pool_of_no_or_unknown_capacity_counts_nothing() -> None:
    graph = TaskGraph("w")
    graph.add("gpu_task", 10.0, 2, pool="gpu")
    graph.add("cpu_task", 30.0, 0, pool="cpu")
    graph.add("free_task", 30.0, 0)
    graph.add_edge("gpu_task", "cpu_task")
    graph.add_edge("cpu_task", "free_task")
    assert work_weights(graph, {"gpu": 4, "cpu": 0}) == {"gpu_task": 50, "cpu_task": 0, "free_task": 0}
    assert work_weights(graph, {"gpu": 4, "cpu": 2})["gpu_task"] == 50 + 150


# -- resolve_priority ---------------------------------------------------------------------------------------
def test_resolve_priority_passes_a_callable_through_and_looks_names_up() -> None:
    def mine(graph: TaskGraph) -> dict[str, int]:
        return dict.fromkeys(graph.nodes, 7)

    assert resolve_priority(mine) is mine
    assert resolve_priority("downstream") is downstream_weights
    assert resolve_priority("critical_path", {"gpu": 1}) is critical_path_weights


def test_a_capacity_rule_is_bound_to_a_copy_of_the_capacities_and_named() -> None:
    capacity = {"gpu": 8}
    rule = resolve_priority("work", capacity)
    capacity["gpu"] = 1  # the caller's dict changes afterwards: the rule keeps what it was given
    assert rule(DIAMOND) == work_weights(DIAMOND, {"gpu": 8})
    assert rule.__name__ == "work"
    assert resolve_priority("width_aware", {"gpu": 8})(DIAMOND) == width_aware_weights(DIAMOND, {"gpu": 8})


def test_an_unknown_rule_name_lists_the_names_it_could_have_been() -> None:
    with pytest.raises(ValueError) as caught:
        resolve_priority("Critical_Path")
    assert "'Critical_Path'" in str(caught.value)
    assert "critical_path, downstream, width_aware, work" in str(caught.value)
    assert "'packing' through airflow_gpu_dag.core.planning.planner.resolve_rule" in str(caught.value)


def test_asking_for_packing_here_points_to_the_planner() -> None:
    """The module docstring: packing needs the simulator (``planner.resolve_rule``); its error must say
    so rather than call a documented rule unknown."""
    with pytest.raises(ValueError) as caught:
        resolve_priority("packing", {"gpu": 8})
    assert "unknown" not in str(caught.value) and "resolve_rule" in str(caught.value)


def test_a_rule_that_is_neither_a_name_nor_a_callable_gets_the_rule_error() -> None:
    with pytest.raises(ValueError, match="unknown priority rule"):
        resolve_priority(["downstream"])  # type: ignore[arg-type]


# -- plan order --------------------------------------------------------------------------------------
def test_plan_order_ties_go_by_graph_order_not_by_the_order_of_the_plan() -> None:
    graph = TaskGraph("ties")
    graph.add("late_in_dict", 1.0)
    graph.add("first_in_graph", 1.0)
    graph.add("child", 1.0)
    graph.add_edge("late_in_dict", "child")
    # topological order: late_in_dict, child, first_in_graph
    weights = plan_order_weights(graph, {"first_in_graph": 0.0, "child": 0.0, "late_in_dict": 0.0})
    assert weights == {"late_in_dict": 3, "child": 2, "first_in_graph": 1}


def test_plan_order_weighs_only_the_planned_tasks_from_one() -> None:
    weights = plan_order_weights(DIAMOND, {"d": 50.0, "a": -5.0})
    assert weights == {"a": 2, "d": 1}


# -- incomparable rules ---------------------------------------------------------------------------------
def test_no_uses_name_no_dag() -> None:
    assert incomparable_rules([]) == []
    assert incomparable_rules(iter([RuleUse("a", "gpu_x", "downstream", cross_dag=False)])) == []


def test_a_dag_keyed_in_one_gpu_pool_and_stock_in_another_is_named_for_the_stock_pool_only() -> None:
    uses = [
        RuleUse("mixed", "gpu_a100", "CriticalPathPriorityStrategy", cross_dag=True),
        RuleUse("mixed", "gpu_h100", "downstream", cross_dag=False),
        RuleUse("keyed", "gpu_h100", "PackingPriorityStrategy", cross_dag=True),
        RuleUse("keyed", "gpu_a100", "PackingPriorityStrategy", cross_dag=True),
    ]
    (found,) = incomparable_rules(uses)
    assert (found.dag_id, found.rules, found.pools, found.shared_with) == (
        "mixed",
        ("downstream",),
        ("gpu_h100",),
        ("keyed",),
    )


def test_a_dag_is_not_incomparable_with_itself() -> None:
    uses = [
        RuleUse("self", "gpu_a100", "CriticalPathPriorityStrategy", cross_dag=True),
        RuleUse("self", "gpu_a100", "downstream", cross_dag=False),
    ]
    assert incomparable_rules(uses) == []


def test_gpu_tasks_in_default_pool_never_make_it_a_gpu_pool() -> None:
    uses = [
        RuleUse("keyed", "default_pool", "CriticalPathPriorityStrategy", cross_dag=True, gpu=True),
        RuleUse("stock", "default_pool", "downstream", cross_dag=False, gpu=True),
    ]
    assert incomparable_rules(uses) == []


def test_a_pool_named_only_the_gpu_prefix_is_not_a_gpu_pool() -> None:
    uses = [
        RuleUse("keyed", "gpu_", "CriticalPathPriorityStrategy", cross_dag=True),
        RuleUse("stock", "gpu_", "downstream", cross_dag=False),
    ]
    assert incomparable_rules(uses) == []


def test_the_description_names_five_sharing_dags_and_counts_the_rest() -> None:
    uses = [RuleUse(f"k{i}", "gpu_a100", "CriticalPathPriorityStrategy", cross_dag=True) for i in range(7)]
    uses.append(RuleUse("stock", "gpu_a100", "downstream", cross_dag=False))
    (found,) = incomparable_rules(uses)
    assert found.shared_with == tuple(f"k{i}" for i in range(7))
    text = found.describe()
    assert "'k0', 'k1', 'k2', 'k3', 'k4' and 2 more use with cross-DAG keys" in text
    assert "'k5'" not in text
