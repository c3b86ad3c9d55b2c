"""Predictions from a live state and a finished run against its plan (``core/simulation/live.py``), on small
hand-built states whose answer is worked out in each test: what holds slots ends after what it still
needs, what waits starts when enough slots free, the controller's reservations and ticks, the delay of a
finished task split by cause, and the nearest-rank error summary."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.core.policy.objective import ReservationGate, key_weight
from airflow_gpu_dag.core.simulation.live import (
    CAUSES,
    DoneTask,
    LiveTask,
    PoolUse,
    Predicted,
    TaskComparison,
    compare_run,
    error_summary,
    plan_run,
    predict_live,
    quantile,
    wait_causes,
)

NOW = 1_000_000.0
GPU4 = {"gpu": 4}


def since_now(predicted: dict[str, Predicted]) -> dict[str, tuple[float, float]]:
    """Each prediction as (start, end) in seconds from ``NOW``."""
    return {key: (p.start - NOW, p.end - NOW) for key, p in predicted.items()}


def wide_behind_a_holder() -> list[LiveTask]:
    """2 of 4 slots held for 42 s more; 'W' (4 slots, the highest weight, 33 s) waits; behind it 's' (1 slot,
    100 s) and 'q' (1 slot, 20 s), each of its own run."""
    return [
        LiveTask("h", "rh", "gpu", 2, 5, 42.0, "holding"),
        LiveTask("W", "ra", "gpu", 4, 100, 33.0, "waiting"),
        LiveTask("s", "rb", "gpu", 1, 1, 100.0, "waiting"),
        LiveTask("q", "rc", "gpu", 1, 1, 20.0, "waiting"),
    ]


# -- predict_live: holding, waiting, later ---------------------------------------------------------------
def test_a_task_holding_slots_is_predicted_to_end_after_what_it_still_needs() -> None:
    """``duration`` of a holding task is what it still needs from now, with or without a controller."""
    holding = [LiveTask("h", "r", "gpu", 2, 5, 30.0, "holding")]
    assert since_now(predict_live(NOW, holding, GPU4, reservation=False)) == {"h": (0.0, 30.0)}
    ticking = predict_live(NOW, holding, GPU4, interval=10.0, last_tick=NOW - 3)
    assert ticking["h"].end == NOW + 30.0


def test_a_waiting_task_starts_only_when_enough_slots_are_free() -> None:
    """3 slots are needed: when 'a' ends at +10 only 2 of 4 are free, so 'x' waits for 'b' to end at +40."""
    tasks = [
        LiveTask("a", "r1", "gpu", 2, 5, 10.0, "holding"),
        LiveTask("b", "r2", "gpu", 2, 5, 40.0, "holding"),
        LiveTask("x", "r3", "gpu", 3, 50, 5.0, "waiting"),
    ]
    assert since_now(predict_live(NOW, tasks, GPU4, reservation=False))["x"] == (40.0, 45.0)
    assert since_now(predict_live(NOW, tasks, GPU4, interval=10.0, last_tick=NOW))["x"] == (40.0, 45.0)


def test_a_higher_weight_waiting_task_goes_first_and_equal_weights_follow_order() -> None:
    one_slot = {"gpu": 1}
    by_weight = [
        LiveTask("lo", "r1", "gpu", 1, 1, 10.0, "waiting"),
        LiveTask("hi", "r2", "gpu", 1, 9, 10.0, "waiting"),
    ]
    assert since_now(predict_live(NOW, by_weight, one_slot, reservation=False)) == {
        "hi": (0.0, 10.0),
        "lo": (10.0, 20.0),
    }
    # same weight: Airflow's tie-break (logical date, map index), not the list's order nor the key's
    by_order = [
        LiveTask("a", "r1", "gpu", 1, 5, 10.0, "waiting", order=(2,)),
        LiveTask("b", "r2", "gpu", 1, 5, 10.0, "waiting", order=(1,)),
    ]
    assert since_now(predict_live(NOW, by_order, one_slot, reservation=False)) == {
        "a": (10.0, 20.0),
        "b": (0.0, 10.0),
    }


def test_a_task_holding_slots_keeps_them_against_a_higher_weight_waiting_task() -> None:
    """It already holds them: the waiting task of weight 100 starts when the holder of weight 1 ends."""
    tasks = [
        LiveTask("w", "r2", "gpu", 2, 100, 10.0, "waiting"),
        LiveTask("h", "r1", "gpu", 2, 1, 30.0, "holding"),
    ]
    assert since_now(predict_live(NOW, tasks, {"gpu": 2}, reservation=False)) == {
        "h": (0.0, 30.0),
        "w": (30.0, 40.0),
    }


def test_a_later_task_starts_when_its_upstream_ends_and_ignores_upstream_already_finished() -> None:
    """``upstream`` names unfinished tasks: a key not among the live tasks has ended and holds none back."""
    tasks = [
        LiveTask("u", "r", "gpu", 1, 5, 20.0, "waiting"),
        LiveTask("d", "r", "gpu", 1, 5, 10.0, "later", ("u",)),
        LiveTask("e", "r", "gpu", 1, 5, 7.0, "later", ("finished",)),
    ]
    assert since_now(predict_live(NOW, tasks, GPU4, reservation=False)) == {
        "u": (0.0, 20.0),
        "d": (20.0, 30.0),
        "e": (0.0, 7.0),
    }
    after_holder = [
        LiveTask("u", "r", "gpu", 1, 5, 20.0, "holding"),
        LiveTask("d", "r", "gpu", 1, 5, 10.0, "later", ("u",)),
    ]
    assert since_now(predict_live(NOW, after_holder, GPU4, reservation=False))["d"] == (20.0, 30.0)


def test_a_pool_not_named_in_capacity_is_unlimited() -> None:
    tasks = [
        LiveTask("c1", "r", "cpu", 100, 1, 5.0, "waiting"),
        LiveTask("c2", "r", "cpu", 100, 1, 6.0, "waiting"),
    ]
    assert since_now(predict_live(NOW, tasks, GPU4, reservation=False)) == {
        "c1": (0.0, 5.0),
        "c2": (0.0, 6.0),
    }


def test_a_task_larger_than_its_pool_and_everything_after_it_are_left_out() -> None:
    tasks = [
        LiveTask("big", "r", "gpu", 5, 5, 10.0, "waiting"),
        LiveTask("after", "r", "gpu", 1, 5, 10.0, "later", ("big",)),
        LiveTask("after_after", "r", "gpu", 1, 5, 10.0, "later", ("after",)),
        LiveTask("ok", "r", "gpu", 1, 5, 10.0, "waiting"),
    ]
    assert since_now(predict_live(NOW, tasks, GPU4)) == {"ok": (0.0, 10.0)}
    assert predict_live(NOW, [], GPU4) == {}


# -- predict_live: the watermark controller --------------------------------------------------------------
def test_the_controller_holds_slots_for_a_wide_task_and_backfills_only_work_that_ends_before_it() -> None:
    """'W' can start when 'h' ends at +42, at the controller's next tick (+50: ticks every 10 s from now).
    'q' (ends at +20) is safe backfill; 's' (100 s) would delay 'W', so it starts when 'W' ends. Airflow
    alone hands both free slots to 's' and 'q', and 'W' waits for 's' to end at +100."""
    tasks = wide_behind_a_holder()
    controlled = since_now(predict_live(NOW, tasks, GPU4, interval=10.0, last_tick=NOW))
    assert set(controlled) == {"h", "W", "s", "q"}  # the keys of four runs come back as given
    assert (controlled["q"], controlled["W"], controlled["s"]) == ((0.0, 20.0), (50.0, 83.0), (83.0, 183.0))
    stock = since_now(predict_live(NOW, tasks, GPU4, reservation=False))
    assert (stock["q"], stock["s"], stock["W"]) == ((0.0, 20.0), (0.0, 100.0), (100.0, 133.0))
    # interval 0: the controller decides at every event, so 'W' starts the moment 'h' ends
    every_event = since_now(predict_live(NOW, tasks, GPU4))
    assert (every_event["W"], every_event["s"]) == ((42.0, 75.0), (75.0, 175.0))


@pytest.mark.parametrize(
    ("last_tick", "wide_start"),
    [
        (NOW - 3, 47.0),  # ticks at now - 3 + 10k: the first after +42 is +47
        (NOW - 1003, 47.0),  # the same ticks, counted from a tick 100 intervals earlier
        (None, 50.0),  # unknown: the simulated ticks start at now
    ],
)
def test_the_wide_task_starts_at_the_first_controller_tick_after_the_slots_free(
    last_tick: float | None, wide_start: float
) -> None:
    predicted = since_now(predict_live(NOW, wide_behind_a_holder(), GPU4, interval=10.0, last_tick=last_tick))
    assert predicted["W"] == (wide_start, wide_start + 33.0)
    assert predicted["h"][1] == 42.0


def test_a_waiting_task_the_simulation_starts_before_now_is_predicted_to_start_now() -> None:
    """Slots are free at the controller's latest tick (7 s ago), when the simulation starts it; it is still
    waiting now, so it is predicted to start now and run its whole 10 s."""
    waiting = [LiveTask("w", "r", "gpu", 1, 5, 10.0, "waiting")]
    assert since_now(predict_live(NOW, waiting, GPU4, interval=10.0, last_tick=NOW - 7)) == {"w": (0.0, 10.0)}


def test_a_later_task_is_never_predicted_to_start_before_its_upstream_ends() -> None:
    """'w' starts at the controller's latest tick in the simulation (now - 7) and ends at now + 3; it is
    predicted [now, now + 10]. 'd' after it, on the same 1-slot pool, starts at now + 10 at the earliest."""
    tasks = [
        LiveTask("w", "r", "gpu", 1, 5, 10.0, "waiting"),
        LiveTask("d", "r", "gpu", 1, 5, 5.0, "later", ("w",)),
    ]
    predicted = predict_live(NOW, tasks, {"gpu": 1}, interval=10.0, last_tick=NOW - 7)
    assert predicted["w"].end == NOW + 10.0
    assert (predicted["d"].start, predicted["d"].end) == (NOW + 10.0, NOW + 15.0)


def test_a_gate_that_finds_the_wide_task_not_urgent_enough_leaves_airflows_admission() -> None:
    """'W''s key is 100 s earlier than that of 's' (another run). With a gap of 3600 s that is not urgent
    enough: Airflow's admission gives 's' a free slot now and 'W' waits until 's' ends at +100. With a gap of
    50 s the controller reserves for 'W' (+50, the tick after 'h' ends) and 's' starts after it."""
    tasks = [
        LiveTask("h", "rh", "gpu", 2, 5, 42.0, "holding"),
        LiveTask("W", "ra", "gpu", 4, key_weight(100.0, 0.0), 30.0, "waiting"),
        LiveTask("s", "rb", "gpu", 1, key_weight(200.0, 0.0), 100.0, "waiting"),
    ]

    def predicted(gap: float) -> dict[str, tuple[float, float]]:
        gate = ReservationGate(gap=gap, overdue=1e6, epoch=0.0)
        return since_now(predict_live(NOW, tasks, GPU4, interval=10.0, last_tick=NOW, gate=gate))

    lenient = predicted(3600.0)
    assert (lenient["s"], lenient["W"]) == ((0.0, 100.0), (100.0, 130.0))
    urgent = predicted(50.0)
    assert (urgent["W"], urgent["s"]) == ((50.0, 80.0), (80.0, 180.0))


# -- plan_run ----------------------------------------------------------------------------------------------
def test_plan_run_simulates_the_tasks_as_one_run_not_started_from_its_origin() -> None:
    """Their runs and states are ignored: 'a' (given as holding, of run x) runs its whole estimate from the
    origin, and 'b' (of run y) after it, as its upstream."""
    tasks = [
        LiveTask("a", "x", "gpu", 1, 5, 10.0, "holding"),
        LiveTask("b", "y", "gpu", 1, 5, 10.0, "waiting", ("a",)),
    ]
    assert plan_run(500.0, tasks, {"gpu": 2}) == {
        "a": Predicted("a", 500.0, 510.0),
        "b": Predicted("b", 510.0, 520.0),
    }


def test_the_plan_holds_slots_for_a_wide_task_about_to_turn_ready() -> None:
    """'w' (2 of 2 slots) turns ready when 'b' ends at 3. The controller keeps the other slot from 'a' (10 s)
    and 'c' (30 s), which would delay it: 'w' runs 3-13, then both. Airflow alone starts 'a' at 0 and
    'c' at 3, and 'w' waits until 33."""
    tasks = [
        LiveTask("a", "r", "gpu", 1, 1, 10.0, "later"),
        LiveTask("w", "r", "gpu", 2, 9, 10.0, "later", ("b",)),
        LiveTask("b", "r", "gpu", 1, 9, 3.0, "later"),
        LiveTask("c", "r", "gpu", 1, 1, 30.0, "later"),
    ]
    reserved = {k: (p.start, p.end) for k, p in plan_run(0.0, tasks, {"gpu": 2}).items()}
    assert reserved == {"b": (0.0, 3.0), "w": (3.0, 13.0), "a": (13.0, 23.0), "c": (13.0, 43.0)}
    stock = {k: (p.start, p.end) for k, p in plan_run(0.0, tasks, {"gpu": 2}, reservation=False).items()}
    assert stock == {"a": (0.0, 10.0), "b": (0.0, 3.0), "c": (3.0, 33.0), "w": (33.0, 43.0)}


def test_the_plans_controller_ticks_from_the_origin() -> None:
    """Ticks at 500 + 7k. 'b' starts the moment 'a' ends (510); 'c' needs the whole pool, which stays held
    for it when 'b' ends at 520 until the next tick, 521."""
    tasks = [
        LiveTask("a", "r", "gpu", 2, 5, 10.0, "later"),
        LiveTask("b", "r", "gpu", 1, 5, 10.0, "later", ("a",)),
        LiveTask("c", "r", "gpu", 2, 1, 5.0, "later", ("a",)),
    ]
    plan = plan_run(500.0, tasks, {"gpu": 2}, interval=7.0)
    assert {k: (p.start, p.end) for k, p in plan.items()} == {
        "a": (500.0, 510.0),
        "b": (510.0, 520.0),
        "c": (521.0, 526.0),
    }


# -- wait_causes -------------------------------------------------------------------------------------------
def test_wait_causes_cut_the_wait_at_each_change_of_the_pool() -> None:
    """'me' (1 of 2 slots, weight 5) is ready at 10 and starts at 40. 10-20: 'full' holds both slots; 20-25:
    a slot is free and 'fits' (weight 9) waits but could start beside it: the scheduler; 25-35: 'hi'
    (weight 9, 2 slots) waits and could not: a reservation; 35-40: 'hi' holds both slots."""
    me = DoneTask("me", "gpu", 1, 5, 30.0, start=40.0, end=70.0)
    pool = [
        PoolUse("full", "gpu", 2, 1, 0.0, 20.0),
        PoolUse("hi", "gpu", 2, 9, 35.0, 50.0, waiting_since=25.0),
        PoolUse("fits", "gpu", 1, 9, None, None, waiting_since=20.0),
    ]
    assert wait_causes(me, 10.0, 2, pool) == {
        "waited_for_slots": 15.0,
        "waited_for_reservation": 10.0,
        "scheduler": 5.0,
    }
    # an unlimited pool is never full and nothing there waits for slots held for it
    assert wait_causes(me, 10.0, None, pool) == {
        "waited_for_slots": 0.0,
        "waited_for_reservation": 0.0,
        "scheduler": 30.0,
    }
    assert wait_causes(me, 40.0, 2, pool) == {
        "waited_for_slots": 0.0,
        "waited_for_reservation": 0.0,
        "scheduler": 0.0,
    }


# -- compare_run -------------------------------------------------------------------------------------------
def test_compare_run_splits_a_late_start_into_upstream_late_and_the_pools_wait_causes() -> None:
    """Planned: 'a' 0-10, 'b' after it 10-20 (2 slots). 'a' ran 15 s (5 longer). 'b', ready at 15 (5 late),
    started at 25: 15-20 'x' held both slots, 20-22 'y' (weight 50, waiting since 12) was held for, 22-24
    'y' ran, 24-25 the scheduler. Its start error, 15 s, is the sum of its causes."""
    plan = plan_run(
        0.0,
        [
            LiveTask("a", "r", "gpu", 1, 5, 10.0, "later"),
            LiveTask("b", "r", "gpu", 1, 5, 10.0, "later", ("a",)),
        ],
        {"gpu": 2},
    )
    done = [
        DoneTask("a", "gpu", 1, 5, 10.0, 0.0, 15.0),
        DoneTask("b", "gpu", 1, 5, 10.0, 25.0, 35.0, ("a",)),
    ]
    pools = {
        "gpu": [
            PoolUse("a", "gpu", 1, 5, 0.0, 15.0),
            PoolUse("b", "gpu", 1, 5, 25.0, 35.0, waiting_since=15.0),
            PoolUse("x", "gpu", 2, 9, 10.0, 20.0),
            PoolUse("y", "gpu", 2, 50, 22.0, 24.0, waiting_since=12.0),
        ]
    }
    a, b = compare_run(0.0, done, plan, {"gpu": 2}, pools)
    assert (a.key, a.start_error, a.end_error) == ("a", 0.0, 5.0)
    assert a.causes == {
        "upstream_late": 0.0,
        "ran_longer": 5.0,
        "waited_for_slots": 0.0,
        "waited_for_reservation": 0.0,
        "scheduler": 0.0,
    }
    assert a.main_cause == "ran_longer"
    assert (b.key, b.planned_start, b.planned_end, b.start_error, b.end_error) == (
        "b",
        10.0,
        20.0,
        15.0,
        15.0,
    )
    assert b.causes == {
        "upstream_late": 5.0,
        "ran_longer": 0.0,
        "waited_for_slots": 7.0,
        "waited_for_reservation": 2.0,
        "scheduler": 1.0,
    }
    assert sum(v for k, v in b.causes.items() if k != "ran_longer") == b.start_error
    assert b.main_cause == "waited_for_slots"
    assert set(b.causes) == set(CAUSES)  # every cause reported is one CAUSES explains


def test_the_wait_the_plan_had_is_no_delay_and_the_rest_is_split_in_proportion() -> None:
    """On 1 slot 'q' was planned to wait 10 s for 'p'; it waited 30 (20 for slots: 'p', then 'z' of another
    DAG; 10 for the scheduler). The 20 s beyond the plan split 2:1 between slots and the scheduler."""
    tasks = [LiveTask("p", "r", "gpu", 1, 5, 10.0, "later"), LiveTask("q", "r", "gpu", 1, 1, 10.0, "later")]
    plan = plan_run(0.0, tasks, {"gpu": 1})
    assert (plan["q"].start, plan["q"].end) == (10.0, 20.0)
    done = [DoneTask("p", "gpu", 1, 5, 10.0, 0.0, 10.0), DoneTask("q", "gpu", 1, 1, 10.0, 30.0, 40.0)]
    pools = {
        "gpu": [
            PoolUse("p", "gpu", 1, 5, 0.0, 10.0),
            PoolUse("z", "gpu", 1, 3, 10.0, 20.0),
            PoolUse("q", "gpu", 1, 1, 30.0, 40.0, waiting_since=0.0),
        ]
    }
    q = compare_run(0.0, done, plan, {"gpu": 1}, pools)[1]
    assert q.start_error == 20.0
    assert q.causes == {
        "upstream_late": 0.0,
        "ran_longer": 0.0,
        "waited_for_slots": pytest.approx(40.0 / 3),
        "waited_for_reservation": 0.0,
        "scheduler": pytest.approx(20.0 / 3),
    }
    assert sum(q.causes.values()) == pytest.approx(q.start_error)


def test_a_task_ahead_of_plan_has_no_cause_and_one_the_plan_does_not_place_is_left_out() -> None:
    """'b' starts 2 s early because 'a' ended early and ran 0.5 s shorter than planned: nothing delayed it.
    'big' (3 slots of 2) is not in the plan, so it is not compared."""
    tasks = [
        LiveTask("a", "r", "gpu", 1, 5, 10.0, "later"),
        LiveTask("b", "r", "gpu", 1, 5, 10.0, "later", ("a",)),
        LiveTask("big", "r", "gpu", 3, 5, 10.0, "later"),
    ]
    plan = plan_run(0.0, tasks, {"gpu": 2})
    assert set(plan) == {"a", "b"}
    done = [
        DoneTask("a", "gpu", 1, 5, 10.0, 0.0, 8.0),
        DoneTask("b", "gpu", 1, 5, 10.0, 8.0, 17.5, ("a",)),
        DoneTask("big", "gpu", 3, 5, 10.0, 0.0, 10.0),
    ]
    comparisons = compare_run(0.0, done, plan, {"gpu": 2})
    assert [c.key for c in comparisons] == ["a", "b"]
    b = comparisons[1]
    assert (b.start_error, b.end_error) == (-2.0, -2.5)
    assert set(b.causes.values()) == {0.0} and b.main_cause is None


def test_the_main_cause_is_the_largest_one_of_a_second_or_more() -> None:
    def comparison(**causes: float) -> TaskComparison:
        return TaskComparison("t", 0.0, 10.0, 0.0, 10.0, causes)

    assert comparison(upstream_late=3.0, waited_for_slots=4.0, scheduler=1.0).main_cause == "waited_for_slots"
    assert comparison(scheduler=0.9, upstream_late=0.5).main_cause is None
    assert comparison().main_cause is None


# -- quantile, error_summary -------------------------------------------------------------------------------
def test_quantile_is_by_nearest_rank_of_the_sorted_values() -> None:
    values = [7.0, 3.0, 10.0, 1.0, 9.0, 2.0, 8.0, 5.0, 4.0, 6.0]
    assert (quantile(values, 0.5), quantile(values, 0.9), quantile(values, 1.0)) == (5.0, 9.0, 10.0)
    assert quantile(values, 0.1) == 1.0
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.0  # rank ceil(2) of 4: the lower middle value
    assert quantile([7.0], 0.9) == 7.0
    assert quantile([], 0.5) is None


def test_error_summary_is_the_median_and_p90_of_the_absolute_start_and_end_errors() -> None:
    """Early and late count alike: start errors -3, 1, 2, -10, 5 are 1, 2, 3, 5, 10 in size."""
    errors = [(-3.0, 4.0), (1.0, -1.0), (2.0, 0.0), (-10.0, 20.0), (5.0, -6.0)]
    comparisons = [
        TaskComparison(str(i), 100.0, 200.0, 100.0 + start, 200.0 + end)
        for i, (start, end) in enumerate(errors)
    ]
    assert error_summary(comparisons) == {
        "tasks": 5,
        "start_error_s": {"median": 3.0, "p90": 10.0},
        "end_error_s": {"median": 4.0, "p90": 20.0},
    }
    assert error_summary([]) == {
        "tasks": 0,
        "start_error_s": {"median": None, "p90": None},
        "end_error_s": {"median": None, "p90": None},
    }
