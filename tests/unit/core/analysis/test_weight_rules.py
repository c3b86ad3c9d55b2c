"""Priority rules (downstream, critical path, width-aware, work), the packing planner, justification,
and the PackingPriorityStrategy wrapper."""

from __future__ import annotations

import math

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
