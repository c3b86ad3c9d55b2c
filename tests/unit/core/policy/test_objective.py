"""Cross-DAG keys (core.policy.objective), the reservation gate, and the simulator with trigger times."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX, critical_path_weights, downstream_weights
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.ladders import fit_ladders
from airflow_gpu_dag.core.policy.admission import PendingTask, ReadyTask, RunningTask
from airflow_gpu_dag.core.policy.objective import (
    DEFAULT_EPOCH,
    KEY_WEIGHT_FLOOR,
    MAX_DESCENDANTS_COUNTED,
    MAX_OVERDUE,
    MAX_STAGE_LENGTH,
    OBJECTIVES,
    STAGE_FIT,
    STAGE_LENGTH,
    Objective,
    ReservationGate,
    StarvingWatch,
    descendant_lead,
    fitted_stage_length,
    get_objective,
    key_of_weight,
    key_weight,
    longest_gpu_task,
    run_shape,
    run_weights,
    slot_seconds,
    stage_length_mismatch,
    stage_length_problem,
    stage_misfit,
    task_keys,
)
from airflow_gpu_dag.core.policy.reservation import decide_pools
from airflow_gpu_dag.core.simulation.cross_dag import predict_runs
from airflow_gpu_dag.core.simulation.simulator import simulate
from airflow_gpu_dag.log_once import LogOnce
from tests.unit.graphs import (
    draw_task_graph,
    fallen_back_ladder,
    gpu_graph,
)

HOUR = 3600.0


NOW = DEFAULT_EPOCH + 400 * 24 * HOUR  # some day in 2026


def _ready(key: str, slots: int, weight: int) -> ReadyTask:
    return ReadyTask(key, "gpu", slots, weight, 600.0, (0,))


def _waiting(key: str, slots: int, key_at: float, since: float | None, duration: float = 600.0) -> ReadyTask:
    return ReadyTask(key, "gpu", slots, key_weight(key_at), duration, (0,), since=since)


def test_unknown_objective_names_the_known_ones() -> None:
    assert get_objective(None).name == "fair"
    assert get_objective(" Latency ").name == "latency"
    with pytest.raises(ValueError, match=r"unknown objective 'fast'.*throughput, balanced, fair, latency"):
        get_objective("fast")


def test_keys_are_latest_starts_of_the_run_due_time() -> None:
    g = gpu_graph({"a": (600, 2), "b": (1200, 4), "c": (60, 0)}, [("a", "b"), ("b", "c")])
    shape = run_shape(g, {"gpu": 8})
    assert shape.work == (600 * 2 + 1200 * 4) / 8  # c holds no slot of the capacity pool
    objective = get_objective("balanced")
    keys = task_keys(shape, NOW, objective)
    due = NOW + objective.stretch * shape.work  # small work: the cap W + overdue does not bind
    c = objective.chain
    assert keys == {"a": due - c * 1860, "b": due - c * 1260, "c": due - c * 60}
    weights = run_weights(g, NOW, {"gpu": 8}, objective)
    assert all(KEY_WEIGHT_FLOOR <= w <= INT32_MAX for w in weights.values())
    assert key_of_weight(weights["a"]) == math.floor(keys["a"] - DEFAULT_EPOCH + 0.5) + DEFAULT_EPOCH


def test_a_wide_run_is_due_at_most_overdue_after_its_own_work() -> None:
    """Issue #41: ``due = T + s * W`` let a sweep of 56 GPU-hours on 8 GPUs (W = 7 h) be due 28 h after
    its trigger, overtaken by everything smaller triggered in that day; the cap makes it W + overdue."""
    trials = {f"trial_{i}": (2 * HOUR, 2) for i in range(14)}
    sweep = gpu_graph(trials, [], dag_id="sweep")
    objective = get_objective("balanced")
    shape = run_shape(sweep, {"gpu": 8})
    assert shape.work == 7 * HOUR and objective.stretch * shape.work > shape.work + objective.overdue
    keys = task_keys(shape, NOW, objective)
    assert keys["trial_0"] == NOW + 7 * HOUR + objective.overdue - objective.chain * 2 * HOUR
    # a small run does not get the cap: its due time is still s * W
    small = run_shape(gpu_graph({"eval": (1800, 1)}, [], dag_id="eval"), {"gpu": 8})
    assert objective.due_offset(small.work) == objective.stretch * small.work


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_run_triggered_later_than_the_bound_never_overtakes(data: st.DataObject) -> None:
    """The overtaking bound of docs/priority.md: a run Y triggered more than ``W_X + overdue + c * CP_Y +
    U * K`` after run X has no task ahead of any task of X, however small Y and however wide X; and every
    key is at least ``T - c * CP - U * K`` (what the wait bound's proof needs)."""
    objective = OBJECTIVES[data.draw(st.sampled_from(sorted(OBJECTIVES)))]
    caps = {"gpu": data.draw(st.sampled_from([1, 4, 8, 32]))}
    x = draw_task_graph(data.draw, "x", (1, 12), [0, 1, 2, 4], 20_000)
    y = draw_task_graph(data.draw, "y", (1, 6), [0, 1], 3_000)
    sx, sy = run_shape(x, caps), run_shape(y, caps)
    cp_y = max(sy.remaining.values())
    ahead = objective.chain * cp_y + objective.head_start
    later = NOW + sx.work + objective.overdue + ahead + data.draw(st.integers(1, 10**6))
    kx, ky = task_keys(sx, NOW, objective), task_keys(sy, later, objective)
    assert min(ky.values()) > max(kx.values())
    assert min(kx.values()) >= NOW - objective.chain * max(sx.remaining.values()) - objective.head_start


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("stretch", -1.0, "stretch -1.0 must be a finite number >= 0"),
        ("stretch", math.inf, "stretch inf must be a finite number >= 0"),
        ("chain", 0.0, "chain 0.0 must be in \\(0, 1\\]: 0 loses the critical-path order"),
        ("chain", 1.5, "above 1 a long run could overtake"),
        ("gap", -1.0, "reservation gap -1.0 must be >= 0"),
        ("overdue", math.inf, "reservation overdue inf must be finite"),
        ("overdue", MAX_OVERDUE + 1, "lets it wait without bound"),
        ("overdue", math.nan, "reservation overdue nan must be finite"),
    ],
)
def test_a_constant_that_would_let_a_run_wait_without_bound_is_refused_with_the_reason(
    field: str, value: float, reason: str
) -> None:
    constants = {"stretch": 4.0, "gap": HOUR, "overdue": 8 * HOUR, "chain": 0.5, field: value}
    with pytest.raises(ValueError, match=f"objective 'bad': .*{reason}"):
        Objective("bad", **constants)


def test_every_shipped_objective_and_its_extremes_are_accepted() -> None:
    for objective in OBJECTIVES.values():  # (constructing them validated them: they are importable)
        assert 0 < objective.chain <= 1 and 0 <= objective.overdue <= MAX_OVERDUE
    Objective("edges", stretch=0.0, gap=math.inf, overdue=MAX_OVERDUE, chain=1.0)  # never reserve: bounded


def test_key_weight_round_trip_and_stock_weights_are_not_keys() -> None:
    for key in (DEFAULT_EPOCH, NOW, NOW + 12_345.4):
        assert abs(key_of_weight(key_weight(key)) - key) <= 0.5  # type: ignore[operator]
    assert key_of_weight(42) is None
    assert key_weight(math.nan) == 1
    assert key_weight(DEFAULT_EPOCH - 10**12) == INT32_MAX  # clamped, never overflows the column


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_within_one_run_the_key_order_is_the_critical_path_order(data: st.DataObject) -> None:
    """Every objective, ``fair``'s descendants term included (its lead never decreases along the
    critical path)."""
    g = draw_task_graph(data.draw, "k", (1, 14), [0, 1, 2, 4], 40)
    objective = OBJECTIVES[data.draw(st.sampled_from(sorted(OBJECTIVES)))]
    trigger = NOW + data.draw(st.integers(0, 10**6))
    weights = run_weights(g, trigger, {"gpu": 8}, objective)
    cp = critical_path_weights(g)
    for a in g.nodes:
        for b in g.nodes:
            if cp[a] > cp[b]:
                assert weights[a] >= weights[b]


def test_the_descendant_lead_keeps_the_critical_path_first_within_a_run() -> None:
    """Stock Airflow runs ``b1`` (three tasks below it, 40 minutes of work) before ``a1`` (a 3-hour leaf,
    the critical path). ``fair`` moves a task by the most descendants of any task of its run with at most
    its remaining time, so ``a1`` keeps its place ahead of ``b1`` while the run as a whole moves ahead
    of other runs by the count of its early stages."""
    g = gpu_graph(
        {"a1": (10800, 1), "b1": (600, 1), "b2": (600, 1), "b3": (600, 1), "b4": (600, 1), "c1": (3000, 1)},
        [("b1", "b2"), ("b2", "b3"), ("b3", "b4")],
    )
    shape = run_shape(g, {"gpu": 1})
    assert shape.descendants == {"a1": 0, "b1": 3, "b2": 2, "b3": 1, "b4": 0, "c1": 0}
    assert shape.descendant_lead == {"a1": 3, "b1": 3, "b2": 2, "b3": 1, "b4": 0, "c1": 3}
    keys = task_keys(shape, NOW, get_objective("fair"))
    assert sorted(keys, key=keys.__getitem__) == ["a1", "c1", "b1", "b2", "b3", "b4"]  # the critical path
    # equal remaining times share the larger count
    assert descendant_lead({"x": 2, "y": 5}, {"x": 60.0, "y": 60.0, "z": 10.0}) == {"x": 5, "y": 5, "z": 0}


def test_fair_moves_a_task_earlier_by_its_descendants_up_to_the_cap() -> None:
    """``fair``'s key: ``- U * min(lead, K)`` on top of balanced's terms, so a pipeline's first
    stage (many tasks below it) goes ahead of a run triggered hours after it, as in stock Airflow; the
    count stops at ``K`` and the shape keeps it up to MAX_DESCENDANTS_COUNTED."""
    fair = get_objective("fair")
    assert (fair.descendant_unit, fair.descendant_cap, fair.head_start) == (6 * HOUR, 24, 144 * HOUR)
    chain = {f"s{i}": (600.0, 1) for i in range(70)}
    g = gpu_graph(chain, [(f"s{i}", f"s{i + 1}") for i in range(69)], dag_id="long")
    shape = run_shape(g, {"gpu": 8})
    assert shape.descendants["s0"] == MAX_DESCENDANTS_COUNTED and shape.descendants["s60"] == 9
    keys = task_keys(shape, NOW, fair)
    due = NOW + fair.due_offset(shape.work)
    assert keys["s0"] == due - fair.chain * 70 * 600 - 24 * 6 * HOUR  # capped at 24
    assert keys["s60"] == due - fair.chain * 10 * 600 - 9 * 6 * HOUR
    assert keys["s69"] == due - fair.chain * 600  # a sink: no descendants
    assert fair.key(NOW, 0.0, 0.0, 5) == NOW - 30 * HOUR
    assert get_objective("balanced").key(NOW, 0.0, 0.0, 5) == NOW  # no term without a unit


@pytest.mark.parametrize(
    ("constants", "reason"),
    [
        ({"descendant_unit": -1.0, "descendant_cap": 4}, "descendant unit -1.0 must be a finite number"),
        ({"descendant_unit": math.inf, "descendant_cap": 4}, "descendant unit inf must be a finite"),
        ({"descendant_unit": HOUR, "descendant_cap": MAX_DESCENDANTS_COUNTED + 1}, "descendant cap 65"),
        ({"descendant_unit": HOUR, "descendant_cap": 2.5}, "must be a whole number"),
        ({"descendant_unit": 24 * HOUR, "descendant_cap": 31}, "a wait without bound to those runs"),
        ({"reserve_overdue": MAX_OVERDUE * 2}, "reservation overdue 5184000.0 must be finite"),
        ({"reserve_overdue": math.nan}, "reservation overdue nan must be finite"),
    ],
)
def test_a_descendants_term_or_gate_overdue_without_bound_is_refused(constants: dict, reason: str) -> None:
    with pytest.raises(ValueError, match=f"objective 'bad': .*{reason}"):
        Objective("bad", stretch=4.0, gap=HOUR, overdue=8 * HOUR, chain=0.5, **constants)


def test_fairs_gate_counts_overdue_from_the_ready_time_only() -> None:
    """``fair``'s keys lie up to 144 h before the trigger: a gate that held for a head ``overdue`` past
    its key would hold for every head at once. Its gate holds for the 96-h key gap, when no other run
    waits, or for a task that has waited 36 h since it turned ready."""
    gate = ReservationGate.for_objective(get_objective("fair"))
    assert gate == ReservationGate(96 * HOUR, 36 * HOUR, DEFAULT_EPOCH, past_key_holds=False)
    running = [RunningTask("busy", "gpu", 6, NOW + 3600)]
    wide = _waiting("wide", 4, NOW - 100 * HOUR, NOW - HOUR)  # 100 h past its key, ready an hour ago
    close = _waiting("eval", 1, NOW - 90 * HOUR, NOW - HOUR)
    d = decide_pools(NOW, {"gpu": 8}, running, [wide, close], gate=gate)["gpu"]
    assert d.reserved_for is None and d.pool_size == 8
    assert "held for once it has waited 129600s since it turned ready" in d.reason
    starving = _waiting("wide", 4, NOW - 100 * HOUR, NOW - 37 * HOUR)
    d = decide_pools(NOW, {"gpu": 8}, running, [starving, close], gate=gate)["gpu"]
    assert d.reserved_for == "wide" and "starving" in d.reason
    far = _waiting("eval", 1, NOW - 3 * HOUR, NOW - HOUR)  # 97 h later: the gap
    assert decide_pools(NOW, {"gpu": 8}, running, [wide, far], gate=gate)["gpu"].reserved_for == "wide"


def test_small_runs_triggered_together_go_first_and_later_runs_age() -> None:
    pipeline = gpu_graph(
        {"pretrain": (6 * HOUR, 8), "sft": (2 * HOUR, 4)}, [("pretrain", "sft")], dag_id="pipeline"
    )
    evaluation = gpu_graph({"eval": (1800, 1)}, [], dag_id="eval")
    objective = get_objective("balanced")
    caps = {"gpu": 8}
    p = run_weights(pipeline, NOW, caps, objective)
    e_now = run_weights(evaluation, NOW, caps, objective)
    assert e_now["eval"] > p["pretrain"]  # triggered at the same time: the small run first
    # an evaluation triggered long enough after the pipeline's key does not overtake it
    late = NOW + objective.stretch * run_shape(pipeline, caps).work
    assert run_weights(evaluation, late, caps, objective)["eval"] < p["pretrain"]


def test_gate_holds_slots_only_for_a_clearly_more_urgent_or_overdue_head() -> None:
    gate = ReservationGate(gap=4 * HOUR, overdue=8 * HOUR)
    running = [RunningTask("busy", "gpu", 6, NOW + 3600)]
    head_key = NOW - HOUR  # one hour past its key
    wide = _ready("wide", 4, key_weight(head_key))
    # the next waiting task is due only one hour after it: not worth idling slots for
    close = _ready("eval", 1, key_weight(head_key + HOUR))
    d = decide_pools(NOW, {"gpu": 8}, running, [wide, close], gate=gate)["gpu"]
    assert d.pool_size == 8 and d.reserved_for is None and "not urgent enough" in d.reason
    # 5 hours apart: reserve
    far = _ready("eval", 1, key_weight(head_key + 5 * HOUR))
    d = decide_pools(NOW, {"gpu": 8}, running, [wide, far], gate=gate)["gpu"]
    assert d.reserved_for == "wide"
    # overdue by more than 8 hours: reserve whatever waits behind it
    old = _ready("wide", 4, key_weight(NOW - 9 * HOUR))
    behind = _ready("eval", 1, key_weight(NOW - 9 * HOUR + 60))
    d = decide_pools(NOW, {"gpu": 8}, running, [old, behind], gate=gate)
    assert d["gpu"].reserved_for == "wide" and "overdue" in d["gpu"].reason
    # a head on a stock weight, or nothing else waiting: reserved for as always
    stock = _ready("stock_wide", 4, 100)
    assert (
        decide_pools(NOW, {"gpu": 8}, running, [stock, close], gate=gate)["gpu"].reserved_for == "stock_wide"
    )
    assert decide_pools(NOW, {"gpu": 8}, running, [wide], gate=gate)["gpu"].reserved_for == "wide"
    # a competitor on a stock weight is less urgent than any key
    assert decide_pools(NOW, {"gpu": 8}, running, [wide, _ready("s", 1, 7)], gate=gate)["gpu"].reserved_for


def test_starving_is_measured_from_the_ready_time_or_the_key_whichever_is_later() -> None:
    gate = ReservationGate(gap=4 * HOUR, overdue=8 * HOUR)
    # key 10 h ago but ready only an hour ago (a long pipeline's task): not starving
    assert gate.starving(NOW, [_waiting("late", 4, NOW - 10 * HOUR, NOW - HOUR)]) is None
    # ready 9 h ago, key 10 h ago: starving; ready 9 h ago but key 7 h ago: not yet
    old = _waiting("old", 1, NOW - 10 * HOUR, NOW - 9 * HOUR)
    assert gate.starving(NOW, [old]) == old
    assert gate.starving(NOW, [_waiting("young", 1, NOW - 7 * HOUR, NOW - 9 * HOUR)]) is None
    # the one waiting since longest wins; unknown ready time, stock weight or pending: never starving
    older = _waiting("older", 1, NOW - 12 * HOUR, NOW - 11 * HOUR)
    assert gate.starving(NOW, [old, older]) == older
    unknown = _waiting("unknown", 1, NOW - 12 * HOUR, None)
    stock = ReadyTask("stock", "gpu", 1, 5, 600.0, (0,), since=NOW - 20 * HOUR)
    pending = PendingTask(
        "pending", "gpu", 1, key_weight(NOW - 12 * HOUR), 600.0, (0,), NOW, since=NOW - 20 * HOUR
    )
    assert gate.starving(NOW, [unknown, stock, pending]) is None


def test_starving_watch_is_the_gates_choice_kept_as_tasks_turn_ready_and_start() -> None:
    """The first starving task in admission order (not the one waiting longest): backfill stops ahead of
    every starving task. The simulator's incremental copy agrees with the gate over a list."""
    gate = ReservationGate(gap=4 * HOUR, overdue=8 * HOUR)
    longest = _waiting("longest", 1, NOW - 11 * HOUR, NOW - 11 * HOUR)  # later key, waiting longest
    first = _waiting("first", 1, NOW - 12 * HOUR, NOW - 9 * HOUR)  # earlier key: ahead in the order
    young = _waiting("young", 1, NOW - 13 * HOUR, NOW - HOUR)  # earliest key, ready an hour ago
    watch = StarvingWatch(gate)
    for task in (longest, first, young):
        watch.add(task)
    assert (
        watch.first(NOW - 2.5 * HOUR, set())
        == longest
        == gate.starving(NOW - 2.5 * HOUR, [longest, first, young])
    )
    assert watch.first(NOW, set()) == first == gate.starving(NOW, [longest, first, young])
    assert watch.first(NOW, {"first"}) == longest == gate.starving(NOW, [longest, young])
    assert watch.first(NOW, {"first", "longest"}) is None
    assert watch.first(NOW + 7 * HOUR, {"first", "longest"}) == young


def test_a_starving_task_stops_backfill_of_later_work() -> None:
    """The leak between ticks: a backfilled or freed slot goes to later work. While a task starves only
    work ahead of it is backfilled, and with nothing starting the pool closes to min(used, C - w)."""
    gate = ReservationGate(gap=4 * HOUR, overdue=8 * HOUR)
    running = [RunningTask("busy", "gpu", 3, NOW + 2 * HOUR)]
    head = _waiting("wide", 4, NOW - 10 * HOUR, NOW - 60)  # overdue past its key: always held for
    # behind it: a 2-GPU task ready for 7 h (its key 9 h ago; it does not fit), and a 60-s task
    waiting_long = _waiting("waiting", 2, NOW - 9 * HOUR, NOW - 7 * HOUR, duration=3600.0)
    quick = ReadyTask("quick", "gpu", 1, key_weight(NOW), 60.0, (0,), run="other", since=NOW)
    d = decide_pools(NOW, {"gpu": 4}, running, [head, waiting_long, quick], gate=gate)["gpu"]
    assert d.reserved_for == "wide" and d.backfill_tasks == ("quick",) and d.pool_size == 4
    # an hour later the 2-GPU task has waited 8 h since it turned ready: "quick" (behind it) is not
    # backfilled, and the pool closes to min(used, C - w) = 0 until "wide" fits
    later = NOW + HOUR
    d = decide_pools(later, {"gpu": 4}, running, [head, waiting_long, quick], gate=gate)["gpu"]
    assert d.reserved_for == "wide" and d.backfill_tasks == () and d.pool_size == 0
    assert "waiting starving (28800s waited): nothing behind it backfilled" in d.reason
    # work ahead of the starving task is still backfilled
    ahead = ReadyTask("ahead", "gpu", 1, key_weight(NOW - 9.5 * HOUR), 60.0, (0,), since=later)
    d = decide_pools(later, {"gpu": 4}, running, [head, ahead, waiting_long, quick], gate=gate)["gpu"]
    assert d.backfill_tasks == ("ahead",) and d.pool_size == 4


def test_gate_applies_to_pending_heads_too() -> None:
    gate = ReservationGate(gap=4 * HOUR, overdue=8 * HOUR)
    soon = PendingTask("next", "gpu", 4, key_weight(NOW - HOUR), 3600.0, (0,), ready_at=NOW + 60)
    close = _ready("eval", 1, key_weight(NOW))
    d = decide_pools(
        NOW, {"gpu": 8}, [RunningTask("up", "gpu", 1, NOW + 60)], [close], pending=[soon], gate=gate
    )
    assert d["gpu"].reserved_for is None and d["gpu"].pool_size == 8


def test_throughput_reserves_for_every_wide_head() -> None:
    gate = ReservationGate.for_objective(get_objective("throughput"))
    assert gate == ReservationGate(0.0, 8 * HOUR, DEFAULT_EPOCH)
    wide = _ready("wide", 4, key_weight(NOW - HOUR))
    close = _ready("eval", 1, key_weight(NOW - HOUR + 60))  # due a minute later: balanced would not hold
    running = [RunningTask("busy", "gpu", 6, NOW + 3600)]
    assert decide_pools(NOW, {"gpu": 8}, running, [wide, close], gate=gate)["gpu"].reserved_for == "wide"
    assert ReservationGate.for_objective(get_objective("balanced"), 5.0) == ReservationGate(
        8 * HOUR, 12 * HOUR, 5.0
    )


def test_runs_start_at_their_trigger_and_report_completion() -> None:
    a = gpu_graph({"x": (100, 4), "y": (50, 4)}, [("x", "y")], dag_id="a")
    b = gpu_graph({"z": (30, 8)}, [], dag_id="b")
    r = simulate([a, b], {"gpu": 8}, "stock", triggers=[0.0, 120.0])
    by_id = r.by_id()
    assert by_id["1:b/z"].start >= 120.0  # not before its run exists
    assert [(run.dag_id, run.trigger) for run in r.runs] == [("a", 0.0), ("b", 120.0)]
    assert r.runs[0].completion == 150.0 and r.runs[1].completion == by_id["1:b/z"].end - 120.0
    assert r.mean_completion == (r.runs[0].completion + r.runs[1].completion) / 2
    assert r.completion_quantile(0.95) == max(run.completion for run in r.runs)
    with pytest.raises(ValueError, match="triggers"):
        simulate([a, b], {"gpu": 8}, "stock", triggers=[0.0])
    with pytest.raises(ValueError, match="triggers"):
        simulate([a, b], {"gpu": 8}, "stock", triggers=[0.0, -1.0])


def test_one_dag_alone_is_the_same_schedule_shifted_by_its_trigger() -> None:
    g = gpu_graph({"a": (10, 2), "b": (20, 8), "c": (5, 1), "d": (7, 1)}, [("a", "b"), ("a", "c")])
    base = simulate(g, {"gpu": 8}, "critical_path", priority="critical_path")
    shifted = simulate(g, {"gpu": 8}, "critical_path", priority="critical_path", triggers=[500.0])
    assert [(t.task_id, t.start + 500.0) for t in base.schedule] == [
        (t.task_id, t.start) for t in shifted.schedule
    ]


def test_a_task_waits_for_its_not_before_after_the_trigger() -> None:
    g = gpu_graph({"a": (10, 1), "late": (5, 1)}, [])
    g.nodes["late"].not_before = 100.0  # type: ignore[attr-defined]
    r = simulate(g, {"gpu": 8}, "stock", triggers=[50.0]).by_id()
    assert r["a"].start == 50.0 and r["late"].start == 150.0


def test_run_priority_sees_each_run_with_its_trigger_and_ties_go_to_the_earlier_run() -> None:
    first = gpu_graph({"t": (100, 8)}, [], dag_id="first")
    second = gpu_graph({"t": (100, 8)}, [], dag_id="second")
    seen = []

    def same_weight(graph: TaskGraph, trigger: float) -> dict[str, int]:
        seen.append((graph.dag_id, trigger))
        return dict.fromkeys(graph.nodes, 1)

    # listed second-first, but triggered later: the earlier trigger wins the tie (Airflow: logical date)
    r = simulate([second, first], {"gpu": 8}, "stock", triggers=[10.0, 0.0], run_priority=same_weight)
    assert sorted(seen) == [("first", 0.0), ("second", 10.0)]
    assert r.by_id()["1:first/t"].start == 0.0 and r.by_id()["0:second/t"].start == 100.0


def test_the_lazy_walk_with_a_gate_decides_what_decide_pools_decides() -> None:
    """The simulator's ticks and decide_pools over every waiting task agree with the gate on, across many
    runs with trigger times (verify_controller raises on any difference)."""
    caps = {"gpu": 8}
    graphs = []
    for i in range(12):
        g = gpu_graph(
            {"prep": (300 + 40 * i, 1), "wide": (1200, 4 + (i % 2) * 4), "eval": (200, 1)},
            [("prep", "wide"), ("wide", "eval")] if i % 3 else [],
        )
        g.dag_id = f"run{i}"
        graphs.append(g)
    objective = get_objective("balanced")
    epoch = -10_000_000.0

    def keys(graph: TaskGraph, trigger: float) -> dict[str, int]:
        return run_weights(graph, trigger, caps, objective, epoch)

    for overdue, interval in ((1800.0, 0.0), (1800.0, 60.0), (300.0, 60.0)):  # 300 s: tasks starve
        gate = ReservationGate(gap=600.0, overdue=overdue, epoch=epoch)
        r = simulate(
            graphs,
            caps,
            "reservation",
            interval,
            run_priority=keys,
            gate=gate,
            triggers=[150.0 * i for i in range(12)],
            verify_controller=True,
        )
        assert len(r.schedule) == 36


def test_stock_policy_with_run_priority_is_stocks_downstream_rule() -> None:
    g = gpu_graph({"a": (10, 2), "b": (20, 8)}, [("a", "b")])
    by_rule = simulate(g, {"gpu": 8}, "stock")
    by_run = simulate(g, {"gpu": 8}, "stock", run_priority=lambda graph, t: downstream_weights(graph))
    assert by_rule.schedule == by_run.schedule
    assert analyze(g).makespan == by_run.makespan


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        (None, DEFAULT_EPOCH),
        ("1700000000", 1_700_000_000.0),
        ("2024-01-01", 1_704_067_200.0),
        ("2024-01-01T00:00:00Z", 1_704_067_200.0),
        ("soon", DEFAULT_EPOCH),
        ("nan", DEFAULT_EPOCH),  # every key would be NaN: every weight the floor
        ("inf", DEFAULT_EPOCH),
    ],
)
def test_key_epoch_setting(monkeypatch: pytest.MonkeyPatch, configured: str | None, expected: float) -> None:
    from airflow_gpu_dag import settings as gpu_settings

    if configured is None:
        monkeypatch.delenv("AIRFLOW__GPU_DAG__KEY_EPOCH", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW__GPU_DAG__KEY_EPOCH", configured)
    monkeypatch.setattr(gpu_settings, "_warned", LogOnce(gpu_settings.log))
    assert gpu_settings.key_epoch() == expected


# -- The wait bound of the cross-DAG policy (docs/priority.md, "Nothing waits without bound"), checked on


EPOCH = -10_000_000.0


def _mix(rng: random.Random, capacity: int) -> tuple[list[TaskGraph], list[float]]:
    """4-30 runs of 1-3 chained tasks, 1 GPU to the whole pool (or CPU), 3 s to about an hour each,
    triggered over the first 100 minutes."""
    graphs, triggers = [], []
    for r in range(rng.randint(4, 30)):
        n = rng.randint(1, 3)
        tasks = {}
        for i in range(n):
            gpus = rng.choice([0, 1, 1, 1, 2, capacity, rng.randint(1, capacity)])
            tasks[f"t{i}"] = (float(round(10 ** rng.uniform(0.5, 3.5))), gpus)
        graphs.append(gpu_graph(tasks, [(f"t{i}", f"t{i + 1}") for i in range(n - 1)], dag_id=f"r{r}"))
        triggers.append(float(round(rng.uniform(0, 6000))))
    return graphs, triggers


@pytest.mark.parametrize("seed", range(24))
def test_every_gpu_task_starts_within_the_wait_bound(seed: int) -> None:
    rng = random.Random(seed)
    capacity = rng.choice([2, 4, 8])
    caps = {"gpu": capacity}
    objective = get_objective(rng.choice(["throughput", "balanced", "fair", "latency"]))
    graphs, triggers = _mix(rng, capacity)
    gap = 0.0 if objective.name == "throughput" else rng.choice([300.0, 600.0, 3600.0])
    overdue = rng.choice([120.0, 600.0, 1800.0])
    interval = rng.choice([0.0, 10.0, 30.0, 60.0, 120.0])
    gate = ReservationGate(gap, overdue, EPOCH, past_key_holds=objective.head_start == 0)
    result = simulate(
        graphs,
        caps,
        "reservation",
        interval,
        run_priority=lambda g, t: run_weights(g, t, caps, objective, EPOCH),
        gate=gate,
        triggers=triggers,
        verify_controller=True,
    )
    pool = [s for s in result.schedule if s.pool == "gpu"]
    longest = max((s.end - s.start for s in pool), default=0.0)
    for task in pool:
        key = key_of_weight(task.priority, EPOCH)
        assert key is not None
        ahead = sum(1 for other in pool if other.priority >= task.priority) - 1  # earlier keys (and ties)
        bound = gate.wait_bound(key, task.ready, ahead, longest, interval)
        assert task.wait <= bound, (
            f"{task.task_id} waited {task.wait:.0f}s > bound {bound:.0f}s "
            f"(|A|={ahead}, D={longest:.0f}s, Δ={interval:g}s, C={capacity}, {objective.name})"
        )


# -- 1. a rung that fell back adds no GPU work to its run ---------------------------------------------------
def test_a_rung_the_plan_falls_back_from_adds_no_gpu_work() -> None:
    graph = fallen_back_ladder(wait=2 * HOUR, small=3 * HOUR)
    assert slot_seconds(graph) == {"gpu": 3 * HOUR}  # not 8 x 2 h more for the rung that only waited
    assert run_shape(graph, {"gpu": 8}).work == pytest.approx(3 * HOUR / 8)  # 1350 s, not 8550 s
    # the same W as the graph the simulator runs (where the rung holds no GPU)
    assert run_shape(fit_ladders(graph, {"gpu": 8}), {"gpu": 8}).work == pytest.approx(3 * HOUR / 8)


def test_balanced_gate_holds_for_a_stage_more_urgent_and_overdue_later() -> None:
    """docs/priority.md, "Why these constants": balanced holds slots for a wide task only when it is a
    long training stage (8 h) more urgent than the next waiting work, and reserves for a task that has
    waited 12 h whatever the gap says: the overdue horizon lies beyond the gap (8 h and 8 h let sweeps
    wait 1.055x stock), and latency shares the gate."""
    balanced, latency = get_objective("balanced"), get_objective("latency")
    assert (balanced.gap, balanced.overdue) == (8 * HOUR, 12 * HOUR)
    assert balanced.overdue > balanced.gap and (latency.gap, latency.overdue) == (
        balanced.gap,
        balanced.overdue,
    )
    assert get_objective("throughput").always_reserves and get_objective("throughput").overdue == 8 * HOUR


# -- the stage length ---------------------------------------------------------------------------------------
def test_for_stage_scales_the_times_and_keeps_the_unitless_constants() -> None:
    fair = OBJECTIVES["fair"]
    assert STAGE_LENGTH == 6 * HOUR and fair.for_stage(STAGE_LENGTH) is fair
    assert (fair.descendant_unit, fair.overdue, fair.gap, fair.gate_overdue) == (
        STAGE_LENGTH,
        2 * STAGE_LENGTH,
        16 * STAGE_LENGTH,
        6 * STAGE_LENGTH,
    )
    short = fair.for_stage(20 * 60.0)
    assert (short.descendant_unit, short.overdue, short.gap, short.gate_overdue) == (
        1200.0,
        2400.0,
        19200.0,
        7200.0,
    )
    assert (short.stretch, short.chain, short.descendant_cap, short.name) == (5.0, 0.5, 24, "fair")
    assert short.stage_length == 1200.0 and short.for_stage(STAGE_LENGTH) == fair  # from its own stage
    throughput = OBJECTIVES["throughput"].for_stage(3 * HOUR)
    assert (throughput.gap, throughput.overdue, throughput.reserve_overdue) == (0.0, 4 * HOUR, None)
    for bad in (0.0, -HOUR, math.inf, math.nan):
        with pytest.raises(ValueError, match=r"stage length .* must be a positive number of seconds"):
            fair.for_stage(bad)
        with pytest.raises(ValueError, match=r"stage length .* must be a positive number of seconds"):
            Objective("bad", stretch=4.0, gap=HOUR, overdue=8 * HOUR, chain=0.5, stage_length=bad)
    with pytest.raises(ValueError, match="a wait without bound to those runs"):
        fair.for_stage(31 * HOUR)  # 24 stages of lead over 30 days
    assert fair.for_stage(30 * HOUR).head_start == MAX_OVERDUE


def test_a_longest_gpu_task_within_a_sixth_to_three_stages_fits_the_stage_length() -> None:
    """The benchmark's mixes have their longest GPU task at 0.3-1.3 stages; a sixth or three stages is
    still taken to fit, beyond is another time scale, said with its direction and factor."""
    assert STAGE_FIT == (1 / 6, 3.0)
    for longest in (STAGE_LENGTH / 6, 0.3 * STAGE_LENGTH, STAGE_LENGTH, 3 * STAGE_LENGTH):
        assert stage_length_mismatch(STAGE_LENGTH, longest) is None
    short = stage_length_mismatch(STAGE_LENGTH, 6 * 60.0)  # 6-minute tasks keyed for 6-h stages
    assert short is not None and "0.0167 stages (under 0.167)" in short and "about 60x too long" in short
    long = stage_length_mismatch(20 * 60.0, 80 * 60.0)
    assert long is not None and "4 stages (over 3)" in long and "about 4x too short" in long
    for length, longest in ((0.0, HOUR), (HOUR, 0.0), (math.nan, HOUR), (HOUR, math.inf)):
        assert stage_length_mismatch(length, longest) is None  # nothing measured: nothing to say


def test_the_longest_stage_length_is_where_fairs_lead_reaches_thirty_days() -> None:
    """:data:`MAX_STAGE_LENGTH` is derived from the objectives, not written down: every objective takes
    it, and a second more is refused (fair's 24 stages of lead over 30 days)."""
    assert MAX_STAGE_LENGTH == 30 * HOUR
    assert stage_length_problem(MAX_STAGE_LENGTH) is None
    assert stage_length_problem(MAX_STAGE_LENGTH + 1.0) == (
        "a stage length of 108001 s is over the longest allowed, 30h: 'fair' counts up to 24 stages of "
        "lead, which must stay within 30 days (a run's first tasks would otherwise go ahead of every run "
        "triggered up to that long after it, a wait without bound to those runs); give at most 30h"
    )
    for bad in (0.0, -1.0, math.nan, math.inf):
        expected = f"a stage length must be a positive number of seconds, not {bad!r}"
        assert stage_length_problem(bad) == expected


def test_the_fitted_stage_length_keeps_a_stage_that_fits_and_takes_the_longest_task_otherwise() -> None:
    """What lint and simulate advise: nothing moves while the longest GPU task fits the stage (so a pool
    at the benchmark's scale keeps its figures); outside, one stage is that task, at most the longest
    stage length the objectives accept."""
    for longest in (STAGE_LENGTH / 6, HOUR, 5 * HOUR, 3 * STAGE_LENGTH):
        assert fitted_stage_length(STAGE_LENGTH, longest) == STAGE_LENGTH
    assert fitted_stage_length(STAGE_LENGTH, 12 * 60.0) == 12 * 60.0  # minutes-long tasks
    assert fitted_stage_length(20 * 60.0, 2 * HOUR) == 2 * HOUR  # 6 stages of 20 min
    assert fitted_stage_length(HOUR, 40 * HOUR) == MAX_STAGE_LENGTH  # past the longest stage accepted
    for length, longest in ((STAGE_LENGTH, 0.0), (STAGE_LENGTH, math.nan)):
        assert fitted_stage_length(length, longest) == length  # nothing measured: nothing moves
    for longest in (60.0, 30 * 60.0, 2 * STAGE_LENGTH, 25 * HOUR):
        fitted = fitted_stage_length(STAGE_LENGTH, longest)
        assert stage_length_problem(fitted) is None and stage_length_mismatch(fitted, longest) is None


def test_a_stage_misfit_names_the_longest_gpu_task_the_problem_and_the_stage_to_try() -> None:
    """What lint and simulate report: nothing while the longest GPU task fits the stages, else where it
    is, the mismatch's words and the fitted stage length."""
    graphs = {
        "quick": TaskGraph.from_edges(
            "quick", {"score": 720.0, "report": 240.0}, [], {"score": 1, "report": 1}
        )
    }
    assert stage_misfit(graphs, 20 * 60.0) is None
    assert stage_misfit({}, STAGE_LENGTH) is None
    misfit = stage_misfit(graphs, STAGE_LENGTH)
    assert misfit is not None
    assert (misfit.duration, misfit.dag_id, misfit.task_id, misfit.advised) == (
        720.0,
        "quick",
        "score",
        720.0,
    )
    assert misfit.problem == stage_length_mismatch(STAGE_LENGTH, 720.0)


def test_the_longest_gpu_task_counts_only_gpu_tasks_with_a_declared_estimate() -> None:
    """A CPU task or a GPU task whose estimate is a filled-in default says nothing about the pool's time
    scale; of equal tasks the first DAG in id order is named."""
    cpu = gpu_graph({"load": (9 * HOUR, 0), "score": (HOUR, 1)}, [("load", "score")], "b_eval")
    guessed = gpu_graph({"train": (HOUR, 2)}, [], "a_guess")
    guessed.add("long", 8 * HOUR, 4, duration_declared=False)
    assert longest_gpu_task({"b_eval": cpu, "a_guess": guessed}) == (HOUR, "a_guess", "train")
    assert longest_gpu_task({"cpu": gpu_graph({"load": (HOUR, 0)}, [], "cpu")}) is None
    assert longest_gpu_task({}) is None


def _stage_mix(f: float, seed: int) -> tuple[list[TaskGraph], list[float]]:
    """A pipeline (a chain of 1-4-GPU stages), a sweep of 2-GPU trials and eight evaluations triggered over
    six hours, every duration and trigger times ``f``."""
    rng = random.Random(seed)
    chain = {f"s{i}": (f * rng.randint(1800, 4 * 3600), rng.choice((1, 2, 4))) for i in range(6)}
    graphs = [gpu_graph(chain, [(f"s{i}", f"s{i + 1}") for i in range(5)], "pipeline")]
    trials = {f"t{i}": (f * rng.randint(1200, 3600), 2) for i in range(6)}
    graphs.append(gpu_graph({"prep": (f * 600, 0), **trials}, [("prep", t) for t in trials], "sweep"))
    graphs += [gpu_graph({"e": (f * rng.randint(300, 3600), 1)}, [], f"eval{i}") for i in range(8)]
    return graphs, [0.0, f * 1800.0] + [f * rng.randint(0, 6 * 3600) for _ in range(8)]


@pytest.mark.parametrize("name", ["fair", "balanced"])
@pytest.mark.parametrize("f", [0.25, 4.0])
def test_at_its_stage_length_an_objective_keys_a_pool_f_times_slower_f_times_later(
    name: str, f: float
) -> None:
    """Every term of a key is a time (trigger, work, remaining, the unit per descendant, the due cap) or a
    count: a pool whose every duration and trigger is ``f`` times another's, keyed at ``f`` times the
    stage length, gets exactly ``f`` times the keys, so the same order."""
    graphs, triggers = _stage_mix(1.0, 3)
    scaled, later = _stage_mix(f, 3)
    objective = OBJECTIVES[name]
    for g, t, h, u in zip(graphs, triggers, scaled, later, strict=True):
        keys = task_keys(run_shape(g, {"gpu": 4}), t, objective)
        ours = task_keys(run_shape(h, {"gpu": 4}), u, objective.for_stage(f * STAGE_LENGTH))
        assert ours == pytest.approx({k: f * v for k, v in keys.items()}, rel=1e-12, abs=1e-6)


def test_without_the_stage_length_the_order_across_runs_depends_on_the_time_scale() -> None:
    """Why the setting exists: a 2-task chain triggered 6 h after a 1-h evaluation goes after it with
    6-h stages (its key 0.25 h, the evaluation's 0.125 h); the same DAGs a quarter as long, keyed with the
    6-h constants, put the chain first (its lead of one task still moves it 6 h), while at a 1.5-h stage
    length the keys are a quarter of the first ones and the evaluation goes first again."""
    fair = OBJECTIVES["fair"]

    def keys(f: float, objective: Objective) -> tuple[float, float]:
        chain = gpu_graph({"a0": (f * HOUR, 1), "a1": (f * HOUR, 1)}, [("a0", "a1")], "chain")
        evaluation = gpu_graph({"e": (f * HOUR, 1)}, [], "eval")
        first = task_keys(run_shape(chain, {"gpu": 8}), f * 6 * HOUR, objective)["a0"]
        return first, task_keys(run_shape(evaluation, {"gpu": 8}), 0.0, objective)["e"]

    assert keys(1.0, fair) == pytest.approx((0.25 * HOUR, 0.125 * HOUR))
    chain, evaluation = keys(0.25, fair)
    assert chain < evaluation  # the order flipped
    assert keys(0.25, fair.for_stage(1.5 * HOUR)) == pytest.approx((0.0625 * HOUR, 0.03125 * HOUR))


@pytest.mark.parametrize("f", [0.5, 2.0])
@pytest.mark.parametrize("seed", [3, 5])
def test_a_pool_f_times_slower_at_f_times_the_stage_length_is_scheduled_f_times_later(
    f: float, seed: int
) -> None:
    """The whole policy, keys, gate and controller (its interval scaled too), in the simulator: every task
    of the slower pool starts exactly ``f`` times later."""
    base = predict_runs(*_stage_mix(1.0, seed), {"gpu": 4}, OBJECTIVES["fair"], 60.0)
    slow = predict_runs(
        *_stage_mix(f, seed), {"gpu": 4}, OBJECTIVES["fair"].for_stage(f * STAGE_LENGTH), 60.0 * f
    )
    starts = {t.task_id: t.start for t in base.schedule}
    assert {t.task_id: t.start for t in slow.schedule} == pytest.approx(
        {k: f * v for k, v in starts.items()}, abs=1e-6
    )
