"""Airflow's pool admission rule (stock_admission)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.policy.admission import ReadyTask, admission_order, stock_admission


def t(
    key: str, slots: int, priority: int, pool: str = "gpu", duration: float = 10.0, order: int = 0
) -> ReadyTask:
    return ReadyTask(key, pool, slots, priority, duration, (order,))


def test_priority_order_then_order_tuple() -> None:
    ready = [t("low", 1, 1), t("high", 1, 9), t("mid_b", 1, 5, order=2), t("mid_a", 1, 5, order=1)]
    assert [x.key for x in stock_admission(ready, {"gpu": 10})] == ["high", "mid_a", "mid_b", "low"]


def test_wide_task_skipped_and_smaller_lower_priority_tasks_backfill() -> None:
    # apache/airflow#29474: the 8-slot task does not fit 3 open slots; the 1-slot ones are queued.
    ready = [t("wide", 8, 100), *(t(f"small{i}", 1, 1, order=i) for i in range(5))]
    admitted = [x.key for x in stock_admission(ready, {"gpu": 3})]
    assert admitted == ["small0", "small1", "small2"]


def test_task_larger_than_pool_total_never_admitted() -> None:
    ready = [t("huge", 9, 100), t("ok", 2, 1)]
    assert [x.key for x in stock_admission(ready, {"gpu": 20}, {"gpu": 8})] == ["ok"]


def test_negative_open_slots_admit_nothing_and_unknown_pool_is_unlimited() -> None:
    ready = [t("a", 1, 5), t("cpu", 3, 1, pool="default_pool")]
    assert [x.key for x in stock_admission(ready, {"gpu": -2})] == ["cpu"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 8), st.integers(0, 5), st.sampled_from(["a", "b"])), max_size=30),
    st.integers(-3, 16),
    st.integers(-3, 16),
)
def test_never_oversubscribes_and_is_greedy(
    tasks: list[tuple[int, int, str]], open_a: int, open_b: int
) -> None:
    ready = [t(f"t{i}", s, p, pool=pool, order=i) for i, (s, p, pool) in enumerate(tasks)]
    opens = {"a": open_a, "b": open_b}
    admitted = stock_admission(ready, opens)
    for pool, open_slots in opens.items():
        took = sum(x.slots for x in admitted if x.pool == pool)
        assert took <= max(open_slots, 0)
        # greedy: every task that was skipped did not fit what was left when its turn came
        left = open_slots
        chosen = {x.key for x in admitted}
        for x in sorted((r for r in ready if r.pool == pool), key=lambda r: (-r.priority, r.order)):
            if x.key in chosen:
                left -= x.slots
            else:
                assert x.slots > left


def test_the_sort_key_is_highest_priority_then_order_then_key() -> None:
    assert admission_order(t("k", 3, 7, order=2)) == (-7, (2,), "k")
    same = [t("b", 1, 5), t("a", 1, 5), t("c", 1, 5)]  # equal priority and order: the key decides
    assert [x.key for x in stock_admission(same, {"gpu": 10})] == ["a", "b", "c"]


def test_int32_extreme_priorities_sort_like_any_other() -> None:
    ready = [t("low", 1, -(2**31)), t("zero", 1, 0), t("high", 1, 2**31 - 1)]
    assert [x.key for x in stock_admission(ready, {"gpu": 3})] == ["high", "zero", "low"]


def test_presorted_input_is_taken_in_the_order_given() -> None:
    """``presorted`` skips the sort: the caller's order is what the greedy walk follows."""
    ready = [t("low", 2, 1), t("high", 2, 9)]
    assert [x.key for x in stock_admission(ready, {"gpu": 2}, presorted=True)] == ["low"]
    assert [x.key for x in stock_admission(ready, {"gpu": 2})] == ["high"]


def test_a_generator_of_ready_tasks_is_read_like_a_list() -> None:
    ready = [t("a", 2, 3), t("b", 1, 2), t("c", 2, 1)]
    assert stock_admission(iter(ready), {"gpu": 3}) == stock_admission(ready, {"gpu": 3})
    assert stock_admission((x for x in ready), {"gpu": 3}, presorted=True) == ready[:2]


def test_nothing_ready_admits_nothing() -> None:
    assert stock_admission([], {"gpu": 4}, {"gpu": 4}) == []
    assert stock_admission([], {}) == []


def test_the_callers_open_slots_are_not_modified() -> None:
    opens = {"gpu": 3}
    stock_admission([t("a", 2, 1), t("b", 1, 1)], opens)
    assert opens == {"gpu": 3}


def test_a_task_that_takes_the_last_open_slots_starves_the_rest_of_its_pool() -> None:
    """Once a pool's open slots reach 0 every later task of it is skipped, a 0-slot one too (Airflow's
    "starved pool" check comes before the slots check)."""
    ready = [t("exact", 3, 9), t("one", 1, 5), t("zero", 0, 1)]
    assert [x.key for x in stock_admission(ready, {"gpu": 3}, {"gpu": 3})] == ["exact"]


def test_a_task_needing_exactly_its_pools_total_is_admitted() -> None:
    ready = [t("whole", 8, 1)]
    assert stock_admission(ready, {"gpu": 8}, {"gpu": 8}) == ready


def test_only_open_slots_limit_a_pool_missing_from_the_totals() -> None:
    ready = [t("wide", 6, 2), t("small", 1, 1)]
    assert [x.key for x in stock_admission(ready, {"gpu": 7}, {"other": 1})] == ["wide", "small"]


def test_pools_are_admitted_independently_in_one_priority_order() -> None:
    ready = [t("a_wide", 4, 9, pool="a"), t("b_one", 1, 8, pool="b"), t("a_one", 1, 7, pool="a")]
    admitted = stock_admission(ready, {"a": 2, "b": 0})
    assert [x.key for x in admitted] == ["a_one"]
    admitted = stock_admission(ready, {"a": 5, "b": 1})
    assert [x.key for x in admitted] == ["a_wide", "b_one", "a_one"]


def test_the_admitted_tasks_are_the_callers_objects() -> None:
    ready = [t("a", 1, 1)]
    assert stock_admission(ready, {"gpu": 1})[0] is ready[0]


def test_unicode_pool_names_and_keys_are_admitted_like_ascii_ones() -> None:
    ready = [t("tâche-✓", 2, 5, pool="gpü-池"), t("zweite", 2, 4, pool="gpü-池")]
    assert [x.key for x in stock_admission(ready, {"gpü-池": 2})] == ["tâche-✓"]


def test_a_task_wider_than_its_pools_total_is_never_admitted_though_open_slots_omit_the_pool() -> None:
    """The docstring: "a task needing more than its pool's total is never admitted"; a pool missing from
    ``open_slots`` is unlimited only as to its open slots, not its total."""
    ready = [t("huge", 9, 5), t("ok", 2, 1)]
    assert [x.key for x in stock_admission(ready, {}, {"gpu": 8})] == ["ok"]
