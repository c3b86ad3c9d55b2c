"""Durations learned from past runs (core.analysis.estimates): robust to bad history, the prior, the
conditional
remaining time, and a graph planned with the estimates."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.analysis.estimates import (
    MAX_PLANNING_ERROR,
    MIN_RUN_SECONDS,
    OVERRUN_FRACTION,
    DurationEstimate,
    EstimateSettings,
    RunSample,
    estimate_duration,
    estimate_durations,
    planning_error,
    quantile,
    with_estimates,
)
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode


def runs(*durations: float, state: str = "success", start: float = 1_000.0) -> list[RunSample]:
    """Tries ending one after another (the last given is the most recent)."""
    samples = []
    t = start
    for d in durations:
        samples.append(RunSample(d, state, t, t + d))
        t += d + 10
    return samples


# -- graphs --------------------------------------------------------------------------------------
def _graph() -> TaskGraph:
    graph = TaskGraph("g", priority_rule="critical_path")
    graph.add("prep", 100)
    graph.add_task(TaskNode("train[0]", 200, attrs={"map_of": "train", "map_index": 0}))
    graph.add_task(TaskNode("train[1]", 200, attrs={"map_of": "train", "map_index": 1}))
    graph.add_task(TaskNode("sensor", 0.0))  # declared 0: a marker the plan must not pad
    graph.add_task(TaskNode("rung2", 0.0, attrs={"contingent_duration": 300.0}))
    graph.add_task(TaskNode("report", 1800.0, duration_declared=False))
    for up, down in [
        ("prep", "train[0]"),
        ("prep", "train[1]"),
        ("train[0]", "sensor"),
        ("train[1]", "sensor"),
    ]:
        graph.add_edge(up, down, "data")
    graph.add_edge("sensor", "rung2")
    graph.add_edge("rung2", "report")
    return graph


def test_geometric_mean_of_recent_successful_tries() -> None:
    est = estimate_duration("train", runs(100, 110, 90, 105, 95), declared=None, fallback=1800)
    assert est.source == "learned" and est.runs == 5
    assert est.learned == pytest.approx(math.exp(sum(math.log(d) for d in (100, 110, 90, 105, 95)) / 5))
    assert est.duration == est.learned
    assert 105 <= est.high <= 110  # the 0.9 quantile of the tries


def test_declared_prior_barely_moves_consistent_history() -> None:
    est = estimate_duration("train", runs(100, 101, 99, 100, 100), declared=130, fallback=1800)
    assert est.learned == pytest.approx(100, rel=0.01)
    assert est.ratio == pytest.approx(100 / 130, rel=0.01)


def test_prior_holds_against_two_scattered_tries() -> None:
    est = estimate_duration(
        "t", runs(50, 200), declared=100, fallback=0, settings=EstimateSettings(min_runs=2)
    )
    assert est.learned is not None
    # the geometric mean of the tries is 100 as well; with the prior the estimate stays near 100
    assert 80 < est.learned < 125


def test_a_plainly_wrong_declaration_is_not_averaged_in() -> None:
    """Declared 1 hour, three scattered tries of 2-4 s (a loaded worker): the estimate is the tries'
    (seen on a real Airflow: a normal prior would have said 7 s)."""
    est = estimate_duration("t", runs(2.705, 2.298, 3.776), declared=3600, fallback=3600)
    assert est.learned == pytest.approx((2.705 * 2.298 * 3.776) ** (1 / 3))
    near = estimate_duration("t", runs(2.705, 2.298, 3.776), declared=4, fallback=4)
    assert 2.9 < near.learned < 4  # a plausible declaration still counts a little


def test_below_min_runs_the_declared_estimate_is_used() -> None:
    est = estimate_duration("t", runs(40, 41), declared=100, fallback=1800)
    assert est.learned is None and est.source == "declared" and est.duration == 100
    assert est.runs == 2
    undeclared = estimate_duration("t", [], declared=None, fallback=1800)
    assert undeclared.source == "default" and undeclared.duration == 1800


def test_learning_off_uses_the_declared_estimate() -> None:
    est = estimate_duration("t", runs(10, 10, 10, 10), 100, 0, EstimateSettings(enabled=False))
    assert est.learned is None and est.duration == 100 and est.note == "learning is off"


def test_failed_zero_length_and_skewed_tries_do_not_poison() -> None:
    good = runs(100, 102, 98, 101)
    bad = [
        *runs(5, 3, state="failed"),  # failed tries: shorter than the real work
        RunSample(0.0, "success", 5_000, 5_000),  # zero-length (a no-op run)
        RunSample(0.05, "success", 6_000, 6_000.05),
        RunSample(None, "success", 7_000, 6_000),  # end before start: clock skew
        RunSample(-40.0, "success"),
        RunSample(float("nan"), "success"),
        RunSample(100, "up_for_retry"),
    ]
    est = estimate_duration("t", good + bad, declared=None, fallback=0)
    assert est.learned == pytest.approx(100.5, rel=0.01)
    assert est.runs == 4
    assert est.dropped == {"not_success": 3, "zero_length": 2, "clock_skew": 2, "no_duration": 1}


def test_a_handful_of_outliers_are_dropped_from_the_quantile() -> None:
    rng = random.Random(1)
    normal = [100 * math.exp(rng.gauss(0, 0.05)) for _ in range(17)]
    est = estimate_duration("t", runs(*normal, 3000, 2, 5000), declared=None, fallback=0)
    assert est.dropped.get("outlier") == 3
    assert est.learned == pytest.approx(100, rel=0.05)
    assert est.high is not None and est.high < 120


@pytest.mark.parametrize("new", [3, 5, 9, 10, 11])
@pytest.mark.parametrize("new_duration", [3000.0, 120.0])
def test_a_change_of_level_is_followed_not_dropped_as_outliers(new: int, new_duration: float) -> None:
    # 20 tries at 600 s, then the task changes (new data, a new model): the newest `new` tries take
    # `new_duration`. They are the task's new level, not outliers to drop until they fill half the window
    # (10 runs at the default window of 20), and the new declaration agrees with them.
    samples = [RunSample(new_duration, end=1000.0 + i) for i in range(new)]
    samples += [RunSample(600.0, end=float(i)) for i in range(20)]
    estimate = estimate_duration("train", samples, declared=new_duration, fallback=600.0)
    assert estimate.learned == pytest.approx(new_duration) and estimate.runs == new
    assert estimate.dropped == {"before_change": 20 - new}


def test_one_or_two_slow_tries_are_still_outliers_not_a_change() -> None:
    samples = [RunSample(30000.0, end=1000.0 + i) for i in range(2)]
    samples += [RunSample(600.0, end=float(i)) for i in range(10)]
    estimate = estimate_duration("train", samples, declared=600.0, fallback=600.0)
    assert estimate.learned == pytest.approx(600.0) and estimate.dropped == {"outlier": 2}


@pytest.mark.parametrize("durations", [[600.0, 600.0, 900.0], [600.0, 610.0, 900.0], [3.0, 3.0, 5.0]])
def test_a_try_1_5x_off_among_three_is_not_an_outlier(durations: list[float]) -> None:
    # Two similar tries made the spread ~0: the third, 1.5x away, was an outlier, fewer than min_runs
    # were left and the plan went back to a declaration every try disagreed with.
    estimate = estimate_duration("train", runs(*durations), declared=3600.0, fallback=3600.0)
    assert estimate.runs == 3 and not estimate.dropped
    assert min(durations) <= estimate.learned <= max(durations)  # type: ignore[operator]


def test_a_100x_try_among_three_is_still_an_outlier() -> None:
    estimate = estimate_duration("train", runs(600.0, 610.0, 60000.0), declared=3600.0, fallback=3600.0)
    assert estimate.dropped == {"outlier": 1} and estimate.learned is None  # 2 < min_runs: declared


def test_window_keeps_the_most_recent_tries() -> None:
    old = runs(*([500] * 10), start=0)
    new = runs(*([100] * 5), start=100_000)
    est = estimate_duration("t", new + old, None, 0, EstimateSettings(window=5))
    assert est.learned == pytest.approx(100) and est.runs == 5


def test_given_order_counts_when_times_are_unknown() -> None:
    samples = [RunSample(100), RunSample(100), RunSample(100), RunSample(900), RunSample(900)]
    est = estimate_duration("t", samples, None, 0, EstimateSettings(window=3))
    assert est.learned == pytest.approx(100)


def test_expected_remaining_is_conditional_on_elapsed_time() -> None:
    est = estimate_duration("t", runs(60, 100, 100, 100, 140), declared=None, fallback=0)
    assert est.expected_remaining(0) == pytest.approx(100)
    # after 80 s the 60-s tries are ruled out: the median of the longer ones is 100
    assert est.expected_remaining(80) == pytest.approx(20)
    # after 120 s only the 140-s try is longer
    assert est.expected_remaining(120) == pytest.approx(20)
    # overrun of everything known: a tenth of the estimate more
    assert est.expected_remaining(500) == pytest.approx(OVERRUN_FRACTION * est.duration)
    declared_only = DurationEstimate("t", 100.0, 100.0)
    assert declared_only.expected_remaining(30) == 70
    assert declared_only.expected_remaining(300) == pytest.approx(10)


def test_off_by_flags_both_directions_and_missing_declarations() -> None:
    assert DurationEstimate("t", 100.0, 100.0, learned=200.0).off_by(1.5)
    assert DurationEstimate("t", 100.0, 100.0, learned=50.0).off_by(1.5)
    assert not DurationEstimate("t", 100.0, 100.0, learned=140.0).off_by(1.5)
    assert DurationEstimate("t", None, 1800.0, learned=140.0).off_by(1.5)
    assert not DurationEstimate("t", 100.0, 100.0).off_by(1.5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window": 0},
        {"quantile": 1.0},
        {"quantile": 0.0},
        {"quantile": float("nan")},
        {"min_runs": 0},
        {"flag_factor": 1.0},
        {"flag_factor": float("nan")},  # would flag nothing and print "off by more than nanx"
        {"flag_factor": float("inf")},
    ],
)
def test_settings_are_checked(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="learned_"):
        EstimateSettings(**kwargs)  # type: ignore[arg-type]


def test_quantile_interpolates() -> None:
    assert quantile([1, 2, 3, 4], 0.5) == 2.5
    assert quantile([7], 0.9) == 7
    with pytest.raises(ValueError):
        quantile([], 0.5)


@settings(max_examples=60, deadline=None)
@given(
    truth=st.floats(min_value=5, max_value=1e5),
    noise=st.lists(st.floats(min_value=-0.1, max_value=0.1), min_size=5, max_size=30),
    garbage=st.lists(
        st.tuples(
            st.sampled_from(["failed", "success", "skipped"]), st.floats(min_value=-1e3, max_value=0.9)
        ),
        max_size=10,
    ),
    outliers=st.lists(st.floats(min_value=20, max_value=1000), max_size=2),
)
def test_property_bad_history_never_moves_the_estimate_far(
    truth: float, noise: list[float], garbage: list[tuple[str, float]], outliers: list[float]
) -> None:
    """However the good tries (within +/- 10 % of the truth) are mixed with failed, zero-length or
    negative tries and up to two outliers (x20-x1000), the estimate stays within 10 % of the truth."""
    samples = [RunSample(truth * (1 + e)) for e in noise]
    samples += [RunSample(d if state != "failed" else truth / 3, state) for state, d in garbage]
    samples += [RunSample(truth * f) for f in outliers]
    est = estimate_duration(
        "t", samples, declared=truth * 1.3, fallback=0, settings=EstimateSettings(window=50)
    )
    assert est.learned is not None
    assert truth * 0.9 <= est.learned <= truth * 1.1


def test_estimate_durations_and_with_estimates() -> None:
    graph = _graph()
    history = {
        "prep": runs(50, 50, 50),
        "train": runs(400, 410, 390, 400),
        "sensor": runs(600, 600, 600),
        "rung2": runs(30, 30, 30),
        "report": runs(60, 60, 60),
    }
    estimates = estimate_durations(graph, history, note="")
    assert set(estimates) == {"prep", "train", "sensor", "rung2", "report"}
    assert estimates["report"].declared is None and estimates["report"].fallback == 1800
    assert estimates["rung2"].declared == 300
    learned = with_estimates(graph, estimates)
    assert learned.priority_rule == "critical_path"
    assert learned.nodes["prep"].duration == pytest.approx(50, rel=0.02)
    assert learned.nodes["prep"].attrs["declared_duration"] == 100
    assert learned.nodes["train[1]"].duration == pytest.approx(400, rel=0.02)
    assert learned.nodes["train[1]"].attrs["duration_source"] == "learned"
    assert (
        learned.nodes["sensor"].duration == 0.0
        and learned.nodes["sensor"].attrs["duration_source"] == "declared"
    )
    assert learned.nodes["rung2"].duration == 0.0
    assert learned.nodes["rung2"].attrs["contingent_duration"] == pytest.approx(30, rel=0.1)
    assert learned.nodes["report"].duration == pytest.approx(60)
    assert list(learned.edges()) == list(graph.edges())
    assert graph.nodes["prep"].duration == 100  # the input is not changed
    again = with_estimates(learned, estimate_durations(learned, {}))
    assert again.nodes["prep"].duration == 100  # the declared value survives a second pass


def test_a_note_marks_every_estimate() -> None:
    estimates = estimate_durations(_graph(), {}, note="history unreadable (boom)")
    assert {e.note for e in estimates.values()} == {"history unreadable (boom)"}
    assert estimates["prep"].duration == 100


def test_min_run_seconds_is_the_zero_length_threshold() -> None:
    est = estimate_duration("t", runs(MIN_RUN_SECONDS, MIN_RUN_SECONDS, MIN_RUN_SECONDS), None, 0)
    assert est.learned == pytest.approx(MIN_RUN_SECONDS)


def test_learned_error_is_the_standard_error_and_the_planner_hedges_by_it() -> None:
    tight = estimate_duration("t", runs(400, 420, 380, 410, 390), declared=400.0, fallback=400.0)
    assert tight.learned is not None and tight.spread is not None and tight.runs == 5
    assert tight.error == pytest.approx(tight.spread / math.sqrt(5))
    loose = estimate_duration("t", runs(100, 200, 150), declared=150.0, fallback=150.0)
    assert loose.error is not None and loose.error > tight.error  # fewer, more scattered tries
    assert estimate_duration("t", runs(100), declared=150.0, fallback=150.0).error is None  # not learned

    graph = _graph()
    assert planning_error(graph) == 0.0  # declared estimates: how far off they are is unknown
    history = {
        "prep": runs(50, 52, 49, 51, 50),
        "train": runs(400, 440, 360, 420, 380),
        "report": runs(60, 90),
    }
    estimates = estimate_durations(graph, history)
    learned = with_estimates(graph, estimates)
    errors = {t: n.attrs.get("learned_error") for t, n in learned.nodes.items()}
    assert errors["prep"] == pytest.approx(estimates["prep"].error)
    assert errors["train[0]"] == errors["train[1]"] == pytest.approx(estimates["train"].error)
    assert errors["report"] is None and errors["sensor"] is None  # too few tries / nothing learned
    learned_tasks = [e for e in errors.values() if e is not None]  # prep and the mapped train's instances
    assert planning_error(learned) == pytest.approx(sorted(learned_tasks)[len(learned_tasks) // 2])
    assert 0 < planning_error(learned) < 0.1

    wild = TaskGraph("wild")
    wild.add_task(TaskNode("a", 10.0, attrs={"learned_error": 5.0}))
    wild.add_task(TaskNode("b", 10.0, attrs={"learned_error": float("nan")}))
    assert planning_error(wild) == MAX_PLANNING_ERROR


def test_a_rung_that_fell_back_keeps_its_wait_and_learns_its_own_estimate() -> None:
    # A rung before the planned one is planned as its start_within wait (20 min), with history or not;
    # its declared estimate is its expected run (2 h), not that wait, so its 2 h runs do not flag it as
    # off.
    graph = TaskGraph("ladder")
    fallback = {"ladder": "train", "rung": "big", "role": "fell back", "start_within_s": 1200.0}
    graph.add_task(
        TaskNode("train.big", 1200.0, attrs={"fallback": {**fallback, "expected_duration": 7200.0}})
    )
    estimates = estimate_durations(graph, {"train.big": runs(7200.0, 7100.0, 7300.0)})
    estimate = estimates["train.big"]
    assert estimate.declared == 7200.0 and not estimate.off_by(1.5)
    planned = with_estimates(graph, estimates).nodes["train.big"]
    assert planned.duration == 1200.0
    assert planned.attrs["fallback"]["expected_duration"] == pytest.approx(7200.0, rel=0.02)


def runs_oldest_first(*durations: float) -> list[RunSample]:
    """Tries ending one after another (the last given is the most recent)."""
    samples = []
    t = 1_000.0
    for d in durations:
        samples.append(RunSample(d, "success", t, t + d))
        t += d + 10
    return samples


@pytest.mark.parametrize("spike_at", [0, 2, 4])
def test_a_change_of_level_with_one_spike_among_the_new_tries_is_followed(spike_at: int) -> None:
    # 10 tries at 100 s, then the task takes 400 s (5 tries) and one new try hit a bad night (4000 s).
    # One spike must not veto the change: dropping all six new tries as outliers would learn 100 s.
    new = [400.0] * 5
    new.insert(spike_at, 4000.0)
    estimate = estimate_duration(
        "train", runs_oldest_first(*[100.0] * 10, *reversed(new)), declared=None, fallback=60
    )
    assert estimate.learned == pytest.approx(400.0)
    assert estimate.dropped == {"before_change": 10, "outlier": 1}


@pytest.mark.parametrize("newest", [[400.0, 400.0, 4000.0], [400.0, 4000.0, 40000.0], [4000.0, 400.0]])
def test_fewer_than_three_agreeing_new_tries_are_still_not_a_change(newest: list[float]) -> None:
    estimate = estimate_duration(
        "train", runs_oldest_first(*[100.0] * 10, *newest), declared=None, fallback=60
    )
    assert estimate.learned == pytest.approx(100.0)
    assert "before_change" not in estimate.dropped


@settings(max_examples=150, deadline=None)
@given(
    old=st.lists(st.floats(0.9, 1.1), min_size=4, max_size=12),
    new=st.lists(st.floats(0.9, 1.1), min_size=4, max_size=7),
    factor=st.floats(4.0, 50.0),
    spike=st.floats(8.0, 1000.0),
    spike_at=st.integers(0, 7),
    up=st.booleans(),
)
def test_property_one_spike_does_not_veto_a_change_of_level(
    old: list[float], new: list[float], factor: float, spike: float, spike_at: int, up: bool
) -> None:
    level = 100.0 * (factor if up else 1 / factor)
    newest = [level * x for x in new]  # oldest first
    newest.insert(min(spike_at, len(newest)), level * (spike if up else 1 / spike))  # beyond, same side
    history = runs_oldest_first(*[100.0 * x for x in old], *newest)
    estimate = estimate_duration("train", history, declared=None, fallback=60)
    assert estimate.learned is not None
    assert level * 0.899 <= estimate.learned <= level * 1.101


# -- 4. an outlier limit that drops every try --------------------------------------------------------------
@pytest.mark.parametrize("mads", [float("nan"), 0.0, -1.0, float("inf")])
def test_estimate_settings_refuse_an_outlier_limit_that_is_not_a_positive_number(mads: float) -> None:
    with pytest.raises(ValueError, match="outlier_mads must be a finite number > 0"):
        EstimateSettings(outlier_mads=mads)


def test_a_positive_outlier_limit_still_learns() -> None:
    tries = [RunSample(d) for d in (100.0, 101.0, 102.0, 99.0)]
    assert estimate_duration("t", tries, None, 60.0, EstimateSettings(outlier_mads=1.0)).learned == (
        pytest.approx(100.5, rel=0.01)
    )
