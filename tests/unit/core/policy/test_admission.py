"""Airflow's pool admission rule (stock_admission)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.policy.admission import ReadyTask, stock_admission


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
