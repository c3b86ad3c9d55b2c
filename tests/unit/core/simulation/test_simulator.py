"""The discrete-event simulator: hand cases, the #29474 scenario, and properties (hypothesis)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import random
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mixes import actual_graphs, make_mix, triggers
from scale_dags import random_graph
from workloads import default_workloads_dir, load_workloads, ml_pipeline_workloads

from airflow_gpu_dag.core.analysis.bounds import lower_bound
from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX, INT32_MIN, clamp_int32, plan_order_weights
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning import justification
from airflow_gpu_dag.core.planning.justification import (
    UsageProfile,
    ordered_schedule,
    priority_serial_schedule,
)
from airflow_gpu_dag.core.planning.planner import predict
from airflow_gpu_dag.core.policy.admission import RunningTask
from airflow_gpu_dag.core.policy.objective import OBJECTIVES, ReservationGate, key_weight
from airflow_gpu_dag.core.simulation import simulator as simulator_module
from airflow_gpu_dag.core.simulation.cross_dag import SIMULATION_EPOCH, believed_durations, cross_dag_priority
from airflow_gpu_dag.core.simulation.simulator import (
    CapacityError,
    ControllerOptions,
    ScheduledTask,
    SimulationResult,
    SimulationTables,
    next_multiple,
    simulate,
)
from tests.scripts import load_script
from tests.unit import graphs
from tests.unit.graphs import gpu_graph

CAP = {"gpu": 8}


def gpu_graph_simulator(
    dag_id: str, tasks: dict[str, tuple[float, int]], edges: list[tuple[str, str]]
) -> TaskGraph:
    return graphs.gpu_graph(tasks, edges, dag_id)


def _stream_dag(n_small: int) -> TaskGraph:
    """#29474: an 8-GPU critical task turns ready at t=1 while 1-GPU tasks keep the pool busy."""
    tasks = {"prep": (1.0, 0), "wide": (60.0, 8), "after_wide": (600.0, 1)}
    edges = [("prep", "wide"), ("wide", "after_wide")]
    for i in range(n_small):
        tasks[f"s{i}"] = (30.0 + i % 7, 1)  # staggered: the pool never drains by itself
    g = gpu_graph_simulator("stream", tasks, edges)
    return g


@st.composite
def random_dags(draw: st.DrawFn) -> TaskGraph:
    return graphs.draw_task_graph(draw, "random", (1, 25), [0, 1, 1, 1, 2, 4, 8], 50)


@st.composite
def gpu_dags(draw: st.DrawFn) -> TaskGraph:
    n = draw(st.integers(2, 10))
    tasks = {
        f"t{i}": (float(draw(st.integers(1, 30))), draw(st.sampled_from([1, 1, 2, 3, 4]))) for i in range(n)
    }
    edges = [
        (f"t{j}", f"t{i}")
        for i in range(1, n)
        for j in draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True))
    ]
    return graphs.gpu_graph(tasks, edges)


@st.composite
def two_pool_dags(draw: st.DrawFn) -> TaskGraph:
    """Tasks in two capacity pools (``gpu``, ``gpu_b`` of 3 slots) and unlimited CPU tasks, any edges."""

    def pool(draw: st.DrawFn, gpus: int) -> str:
        return draw(st.sampled_from(["gpu", "gpu", "gpu_b"] if gpus <= 3 else ["gpu"]))

    return graphs.draw_task_graph(draw, "two_pools", (2, 18), [0, 1, 1, 2, 3, 4], 30, pool)


def test_chain_and_parallel_hand_case() -> None:
    g = gpu_graph_simulator(
        "hand", {"a": (10, 4), "b": (5, 4), "c": (5, 8), "d": (1, 0)}, [("a", "c"), ("b", "c")]
    )
    r = simulate(g, CAP, "stock")
    s = r.by_id()
    assert (s["a"].start, s["b"].start, s["c"].start, s["d"].start) == (0, 0, 10, 0)
    assert r.makespan == 15
    assert r.lower_bound == 15
    assert r.max_pool_usage["gpu"] == 8


def test_stock_uses_downstream_rule_and_airflow_weights() -> None:
    # x has 2 descendants (weight 3), y none (weight 1); one slot: x first under stock.
    g = gpu_graph_simulator(
        "w", {"y": (10, 1), "x": (1, 1), "x1": (1, 1), "x2": (1, 1)}, [("x", "x1"), ("x1", "x2")]
    )
    r = simulate(g, {"gpu": 1}, "stock")
    assert next(t.task_id for t in sorted(r.schedule, key=lambda t: t.start)) == "x"
    assert r.by_id()["x"].priority == 3 and r.by_id()["y"].priority == 1
    cp = simulate(g, {"gpu": 1}, "critical_path")
    assert next(t.task_id for t in sorted(cp.schedule, key=lambda t: t.start)) == "y"  # 10 > 3


def test_29474_wide_task_starved_by_stock_not_by_reservation() -> None:
    g = _stream_dag(160)
    # make the small tasks outrank the wide one under stock (more descendants): chain them in pairs
    for i in range(0, 160, 2):
        g.add_edge(f"s{i}", f"s{i + 1}")

    # put the wide task first with a higher weight under a custom priority, so stock admission
    # alone must skip it (it does not fit) while small tasks keep taking freed slots
    def weights(graph: TaskGraph) -> dict[str, int]:
        return {t: (100 if t in ("prep", "wide", "after_wide") else 1) for t in graph.nodes}

    greedy = simulate(g, CAP, "critical_path", priority=weights)
    reserved = simulate(g, CAP, "reservation", priority=weights)
    # stock admission: the wide task waits until every small task has been admitted
    smalls = [t for t in greedy.schedule if t.task_id.startswith("s")]
    assert greedy.by_id()["wide"].start >= max(t.start for t in smalls) > 500
    # reservation with lookahead: the controller sees at t=0 that "wide" is ready at t=1 (its upstream
    # "prep" runs 1 s) and lets no 30-s task take its slots: it starts the moment it is ready
    assert reserved.by_id()["wide"].start == 1.0
    # reservation without lookahead: it starts as soon as the first running tasks drain
    blind = simulate(g, CAP, "reservation", priority=weights, lookahead=False)
    assert blind.by_id()["wide"].start == 36.0  # the longest of the first 8 ends at 36
    assert reserved.makespan < blind.makespan < greedy.makespan
    assert reserved.max_pool_usage["gpu"] <= 8 and reserved.reservation_ticks > 0


def test_reservation_with_controller_interval_still_starts_wide_task() -> None:
    g = _stream_dag(60)

    def weights(graph: TaskGraph) -> dict[str, int]:
        return {t: (100 if t in ("prep", "wide", "after_wide") else 1) for t in graph.nodes}

    r = simulate(g, CAP, "reservation", controller_interval=45.0, priority=weights)
    start = r.by_id()["wide"].start
    # the controller ticks at 0, 45, 90, ...: at 0 it sees W pending (ready at 1) and keeps its slots
    # free; W is ready at 1 but the pool opens only at the tick at 45 (a pool size cannot be held for
    # one task between ticks): W starts within one interval of being ready with its slots free
    assert start == 45.0
    # without lookahead: it reserves at 45, the tasks running then have ended by 45 + 36, and the tick
    # at 90 gives the pool back: W starts within one interval of its slots draining, long before the
    # stream would have drained under stock admission
    blind = simulate(g, CAP, "reservation", controller_interval=45.0, priority=weights, lookahead=False)
    assert blind.by_id()["wide"].start == 90.0
    assert simulate(g, CAP, "critical_path", priority=weights).by_id()["wide"].start > 200
    assert r.max_pool_usage["gpu"] <= 8


def test_task_wider_than_pool_is_rejected_before_simulation() -> None:
    g = gpu_graph_simulator("too_wide", {"big": (10, 16), "ok": (1, 1)}, [])
    with pytest.raises(CapacityError, match=r"'too_wide'.*'big' needs 16 slots of pool 'gpu'.*capacity 8"):
        simulate(g, CAP)


def test_bad_policy_and_interval() -> None:
    g = gpu_graph_simulator("g", {"a": (1, 1)}, [])
    with pytest.raises(ValueError, match="unknown policy"):
        simulate(g, CAP, "fifo")
    for interval in (-1, math.nan, math.inf):  # a controller that never acts is refused too
        with pytest.raises(ValueError, match="controller_interval must be finite seconds >= 0"):
            simulate(g, CAP, controller_interval=interval)
    with pytest.raises(ValueError, match="unknown priority rule"):
        simulate(g, CAP, priority="nope")


def test_several_graphs_run_together_and_deterministic() -> None:
    a = gpu_graph_simulator("a", {"x": (10, 4), "y": (5, 4)}, [("x", "y")])
    b = gpu_graph_simulator("b", {"x": (10, 8)}, [])
    r1 = predict([a, b], CAP, "reservation")
    r2 = predict([a, b], CAP, "reservation")
    assert r1.schedule == r2.schedule
    assert len(r1.schedule) == 3 and r1.makespan == 25
    assert r1.lower_bound == lower_bound([a, b], CAP) == (10 * 4 + 5 * 4 + 10 * 8) / 8


def test_cpu_tasks_are_unlimited_unless_their_pool_has_capacity() -> None:
    g = gpu_graph_simulator("cpu", {f"c{i}": (10, 0) for i in range(5)}, [])
    assert simulate(g, CAP, "stock").makespan == 10
    assert simulate(g, {"default_pool": 2}, "stock").makespan == 30


@settings(max_examples=150, deadline=None)
@given(
    random_dags(),
    st.sampled_from(["stock", "critical_path", "reservation"]),
    st.sampled_from([0.0, 7.0]),
    st.sampled_from([8, 9, 16]),
)
def test_properties(graph: TaskGraph, policy: str, interval: float, cap: int) -> None:
    r = predict(graph, {"gpu": cap}, policy, controller_interval=interval)
    sched = r.by_id()
    assert set(sched) == set(graph.nodes)
    for up, down, _kind in graph.edges():
        assert sched[down].start >= sched[up].end  # dependencies
    events = sorted({t.start for t in r.schedule})
    for moment in events:  # never oversubscribed
        held = sum(t.slots for t in r.schedule if t.pool == "gpu" and t.start <= moment < t.end)
        assert held <= cap
    assert r.max_pool_usage["gpu"] <= cap
    assert r.makespan >= r.lower_bound - 1e-9
    for t in r.schedule:
        assert t.end - t.start == graph.nodes[t.task_id].duration


def test_makespan_benchmark_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The benchmark script runs end to end on a tiny file (never the full benchmark in tests)."""
    tasks = [{"id": "a", "d": 5, "gpus": 8, "parents": []}]
    tasks += [{"id": f"s{i}", "d": 3 + i, "gpus": 1, "parents": ["a"] if i % 2 else []} for i in range(10)]
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([{"name": "tiny/one", "tasks": tasks}]))
    module = load_script("benchmarks/makespan.py", "makespan_benchmark", register=False)
    assert module.main(["--workloads", str(path), "--capacities", "8", "--ml-count", "2"]) == 0
    out = capsys.readouterr().out
    assert "| wfinstances | 8 | packing+reservation |" in out
    assert "| ml_pipelines | 8 | stock | " in out


def test_reservation_prediction_follows_the_rule_the_graph_declares() -> None:
    from airflow_gpu_dag.core import TaskGraph as _Graph

    def build(rule: str | None) -> _Graph:
        g = _Graph("declared", priority_rule=rule)
        g.add("long", 100, 1)
        for i in range(4):
            g.add(f"short{i}", 10, 1)
            if i:
                g.add_edge(f"short{i - 1}", f"short{i}")
        return g

    declared = predict(build("critical_path"), {"gpu_default": 1}, policy="reservation")
    explicit = predict(build(None), {"gpu_default": 1}, policy="reservation", priority="critical_path")
    assert declared.priority_rule == "critical_path"
    assert declared.schedule == explicit.schedule
    assert predict(build(None), {"gpu_default": 1}, policy="reservation").priority_rule == "packing"
    with pytest.raises(ValueError, match="needs the planner"):  # the simulator alone cannot plan
        simulate(build(None), {"gpu_default": 1}, policy="reservation")
    # the stock policy never takes the declared rule: it predicts Airflow's own downstream rule
    assert predict(build("critical_path"), {"gpu_default": 1}, policy="stock").priority_rule == "downstream"


@settings(max_examples=200, deadline=None)
@given(gpu_dags(), st.sampled_from([4, 5, 6]), st.randoms(use_true_random=False), st.booleans())
def test_controller_follows_any_planned_schedule(
    graph: TaskGraph, cap: int, rnd: random.Random, backfill: bool
) -> None:
    """Plan-order weights of any schedule made by serial generation, run through Airflow's admission
    with the reservation controller (lookahead on, strict backfill), never end later than the plan.
    (EASY backfill may run a task past the shadow time on slots the plan gives to later tasks.)"""
    caps = {"gpu": cap}
    plan = priority_serial_schedule(graph, caps, {t: rnd.random() for t in graph.nodes})
    planned = max(plan[t] + graph.nodes[t].duration for t in plan)
    weights = plan_order_weights(graph, plan)
    result = simulate(
        graph, caps, "reservation", priority=lambda g: weights, backfill=backfill, strict_backfill=True
    )
    assert result.makespan <= planned + 1e-9


def test_without_lookahead_a_ready_task_jumps_ahead_of_the_plan() -> None:
    """t4 (planned at 58) is ready at 11; while t3 runs, t5 (planned at 51) waits for it. Without the
    lookahead the controller does not see t5 and t4 takes the slot, which delays t6 and t8."""
    tasks = {"t0": (21.0, 2), "t1": (11.0, 1), "t2": (12.0, 4), "t3": (18.0, 3), "t4": (27.0, 1)}
    tasks |= {"t5": (3.0, 3), "t6": (4.0, 3), "t7": (21.0, 1), "t8": (27.0, 2)}
    edges = [("t0", "t2"), ("t0", "t6"), ("t1", "t2"), ("t1", "t4"), ("t1", "t5"), ("t1", "t8")]
    edges += [("t2", "t6"), ("t3", "t5"), ("t3", "t6"), ("t5", "t7"), ("t6", "t8")]
    graph = graphs.gpu_graph(tasks, edges)
    plan = {"t0": 0.0, "t1": 0.0, "t2": 21.0, "t3": 33.0, "t5": 51.0, "t6": 54.0, "t7": 54.0}
    plan |= {"t4": 58.0, "t8": 58.0}
    weights = plan_order_weights(graph, plan)
    caps = {"gpu": 4}
    followed = simulate(graph, caps, "reservation", priority=lambda g: weights, backfill=False)
    blind = simulate(graph, caps, "reservation", priority=lambda g: weights, backfill=False, lookahead=False)
    assert followed.makespan == 85.0  # the plan
    assert blind.makespan == 91.0
    assert blind.by_id()["t4"].start == 33.0 and followed.by_id()["t4"].start == 58.0


@settings(max_examples=200, deadline=None)
@given(gpu_dags(), st.sampled_from([4, 5, 6]), st.randoms(use_true_random=False))
def test_ordered_schedule_is_what_the_controller_realizes(
    graph: TaskGraph, cap: int, rnd: random.Random
) -> None:
    """For any start order (upstream first), core.planning.justification.ordered_schedule, the planner's
    one-pass
    score of an order, equals the simulated controller + Airflow without backfill, and strict backfill
    never makes it later: the local search scores exactly what runs."""
    caps = {"gpu": cap}
    priority = {t: rnd.random() for t in graph.nodes}
    order: list[str] = []
    missing = {t: len(graph.upstream(t)) for t in graph.nodes}
    eligible = [t for t, count in missing.items() if count == 0]
    while eligible:
        eligible.sort(key=lambda t: -priority[t])
        task = eligible.pop(0)
        order.append(task)
        for down in graph.downstream(task):
            missing[down] -= 1
            if missing[down] == 0:
                eligible.append(down)
    start = ordered_schedule(graph, caps, order)
    planned = max(start[t] + graph.nodes[t].duration for t in start)
    weights = {t: len(order) - k for k, t in enumerate(order)}
    strict = simulate(graph, caps, "reservation", priority=lambda g: weights, backfill=False)
    assert abs(strict.makespan - planned) <= 1e-9 * max(1.0, planned)
    assert strict.by_id().keys() == start.keys()
    assert all(abs(strict.by_id()[t].start - start[t]) <= 1e-9 * max(1.0, planned) for t in start)
    backfilled = simulate(graph, caps, "reservation", priority=lambda g: weights, strict_backfill=True)
    assert backfilled.makespan <= planned + 1e-9 * max(1.0, planned)


@settings(max_examples=300, deadline=None)
@given(
    two_pool_dags(),
    st.randoms(use_true_random=False),
    st.sampled_from([0.0, 5.0]),
    st.sampled_from(["easy", "strict", "off"]),
    st.booleans(),
    st.booleans(),
)
def test_lazy_walk_decides_what_decide_pools_decides_over_every_waiting_task(
    graph: TaskGraph, rnd: random.Random, interval: float, backfill: str, lookahead: bool, noisy: bool
) -> None:
    """The simulator's ticks read each pool's waiting tasks lazily, only as far as the decision needs;
    at every tick its pool sizes equal decide_pools over every running, ready and pending task (what the
    watermark controller computes), with ties in priority, wrong estimates and two managed pools."""
    weights = {t: rnd.choice([1, 2, 3, 5, 8]) for t in graph.nodes}  # coarse: many ties
    estimates = {t: node.duration * rnd.choice([0.5, 1.0, 1.5]) for t, node in graph.nodes.items()}
    simulate(
        graph,
        {"gpu": 4, "gpu_b": 3},
        "reservation",
        controller_interval=interval,
        priority=lambda g: weights,
        backfill=backfill != "off",
        strict_backfill=backfill == "strict",
        lookahead=lookahead,
        estimates=estimates if noisy else None,
        verify_controller=True,
    )


def test_verify_controller_catches_a_walk_that_disagrees(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: with decide_pools made to answer differently, the simulator says so."""
    import dataclasses

    from airflow_gpu_dag.core.simulation import simulator as simulator_module

    real = simulator_module.decide_pools

    def off_by_one(*args: Any, **kwargs: Any) -> dict[str, Any]:
        decided = real(*args, **kwargs)
        return {p: dataclasses.replace(d, pool_size=d.pool_size + 1) for p, d in decided.items()}

    monkeypatch.setattr(simulator_module, "decide_pools", off_by_one)
    with pytest.raises(AssertionError, match="decide_pools over every waiting task decides"):
        predict(_stream_dag(6), {"gpu": 8}, "reservation", verify_controller=True)


def test_slots_a_pending_task_waits_for_stay_closed_between_ticks() -> None:
    """#29474 between two ticks: "prep" (1 GPU) runs, "wide" (4 GPUs, first in priority) waits for it,
    1-GPU tasks are ready. When "prep" ends at t=25 the next tick is at t=30; the pool must not hand the
    slot "prep" frees to a 600-s small task meanwhile (a pool of "what runs" would: Airflow gives free
    slots to what is scheduled, and "wide" is not yet)."""
    tasks = {"prep": (25.0, 1), "wide": (100.0, 4)} | {f"small{i}": (600.0, 1) for i in range(3)}
    graph = graphs.gpu_graph(tasks, [("prep", "wide")])
    weights = {"prep": 10, "wide": 9, "small0": 1, "small1": 1, "small2": 1}
    result = simulate(
        graph,
        {"gpu": 4},
        "reservation",
        controller_interval=10.0,
        priority=lambda g: weights,
        verify_controller=True,
    )
    by_id = result.by_id()
    assert by_id["wide"].start == 30.0  # the first tick after "prep" ended
    assert min(by_id[f"small{i}"].start for i in range(3)) == 130.0  # after "wide", nothing slipped in


def test_pending_tasks_waiting_on_another_pool_are_not_rebuilt_every_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The critical-path page's reservation prediction of a DAG with a 1,024-instance mapped task group took
    15 s (512: 3.5 s): every pending ``score[i]`` (its ``train[i]`` still waiting for a GPU) was
    built anew at each of the ~1.4 x N controller ticks, though the walk skips such a task. Now one of them
    is built per tick; the schedule is the one the controller over every waiting task decides."""
    from airflow_gpu_dag.core.simulation import simulator

    built: list[str] = []
    original = simulator._Simulation._pending_task

    def counting(self: Any, uid: str, pool: str, now: float) -> Any:
        built.append(uid)
        return original(self, uid, pool, now)

    monkeypatch.setattr(simulator._Simulation, "_pending_task", counting)
    graph = load_script("benchmarks/plan_speed.py", "plan_speed", register=False).mapped_group(300)
    capacity = {"gpu_default": 8, "cpu": 2}
    result = simulate(graph, capacity, policy="reservation", verify_controller=True)
    full_reads = len(
        built
    )  # verify_controller builds every pending task at every tick, as the controller does
    built.clear()
    assert simulate(graph, capacity, policy="reservation").schedule == result.schedule
    assert len(built) < 3 * len(graph), (len(built), full_reads)  # was 8,838 here
    assert full_reads > 20 * len(graph)


# -- The simulator's fast way gives the schedule of its reference way, start for start.


INTERVALS = (0.0, 2.0, 60.0)


#: At a 2-s interval the reference decides every 2 s of simulated time: smaller workloads there.
SMALL = {0.0: 1.0, 2.0: 0.25, 60.0: 1.0}


def same_as_reference(
    graph: TaskGraph | Sequence[TaskGraph], capacity: dict[str, int], interval: float, **options: Any
) -> SimulationResult:
    """Simulate both ways; every task's start and end, the pool usage and the tick counts must agree."""
    fast = simulate(graph, capacity, "reservation", interval, **options)
    reference = simulate(graph, capacity, "reservation", interval, _every_tick=True, **options)
    assert [(t.task_id, t.start, t.end) for t in fast.schedule] == [
        (t.task_id, t.start, t.end) for t in reference.schedule
    ]
    assert fast.max_pool_usage == reference.max_pool_usage
    assert (fast.controller_ticks, fast.reservation_ticks) == (
        reference.controller_ticks,
        reference.reservation_ticks,
    )
    return fast


def planned_weights(graph: TaskGraph, capacity: dict[str, int]) -> dict[str, int]:
    """Plan-order weights of the greedy critical-path schedule: the controller then reserves for pending
    tasks (lookahead), the case whose decisions depend on the next tick."""
    greedy = simulate(graph, capacity, "critical_path", priority="critical_path")
    return plan_order_weights(graph, {t.task_id: t.start for t in greedy.schedule})


def mix_simulation(seed: int, variant: str, errors: float, objective: str) -> dict[str, Any]:
    """The arguments of a many-DAG mix as :func:`~airflow_gpu_dag.core.simulation.cross_dag.predict_runs`
    simulates it (cross-DAG keys, the objective's gate), tasks running ``errors`` off their estimates."""
    runs = make_mix(seed, variant)
    estimated = [r.graph for r in runs]
    actual = actual_graphs(runs, errors, seed, variant)
    times = triggers(runs, 8, "spread", seed, variant)
    by_run = {(g.dag_id, t): b for g, t, b in reversed(list(zip(actual, times, estimated, strict=True)))}
    chosen = OBJECTIVES[objective]
    return {
        "graph": actual,
        "triggers": times,
        "estimates": believed_durations(estimated),
        "run_priority": cross_dag_priority(
            lambda g, t: by_run.get((g.dag_id, t), g), {"gpu": 8}, chosen, SIMULATION_EPOCH
        ),
        "gate": ReservationGate.for_objective(chosen, SIMULATION_EPOCH),
    }


def _aging(overdue: float) -> tuple[list[TaskGraph], dict[str, Any]]:
    """Two runs on 8 GPUs whose decisions change while nothing starts or ends: ``long`` holds 6 GPUs for
    10 h, ``wide`` (4 GPUs) waits, and small tasks of a later run come and go each 3 h. ``wide``'s key
    passes ``overdue`` and it starts starving between two of their events."""
    first = graphs.gpu_graph({"long": (36000.0, 6), "wide": (3600.0, 4)}, [], "first")
    second = graphs.gpu_graph({f"s{i}": (10800.0, 1) for i in range(8)}, [], "second")
    keys = {"long": 0.0, "wide": 0.0, **{f"s{i}": 1000.0 + i for i in range(8)}}
    gate = ReservationGate(gap=4 * 3600.0, overdue=overdue, epoch=SIMULATION_EPOCH)
    return [first, second], {
        "triggers": [0.0, 0.0],
        "run_priority": lambda g, t: {task: key_weight(keys[task], SIMULATION_EPOCH) for task in g.nodes},
        "gate": gate,
    }


@st.composite
def two_pool_dags_simulation_equivalence(draw: st.DrawFn) -> TaskGraph:
    def pool(draw: st.DrawFn, gpus: int) -> str:
        return draw(st.sampled_from(["gpu", "gpu", "gpu_b"] if gpus <= 3 else ["gpu"]))

    graph = graphs.draw_task_graph(draw, "eq", (2, 22), [0, 1, 1, 2, 3, 4], 40, pool)
    for node in graph.nodes.values():  # some tasks wait for a start window
        node.not_before = float(draw(st.sampled_from([0, 0, 0, 5, 33])))
    return graph


@pytest.mark.parametrize("interval", INTERVALS)
def test_ml_pipelines(interval: float) -> None:
    for workload in ml_pipeline_workloads(int(4 * SMALL[interval]), seed=3):
        graph = workload.graph
        for cap in (8, 16) if interval != 2.0 else (16,):
            capacity = {"gpu": cap}
            weights = planned_weights(graph, capacity)
            same_as_reference(graph, capacity, interval, priority="critical_path")
            same_as_reference(
                graph, capacity, interval, priority=lambda g, w=weights: w, strict_backfill=True
            )


@pytest.mark.parametrize("interval", INTERVALS)
def test_wfcommons_instances(interval: float) -> None:
    path = default_workloads_dir() / "wfinstances_dev.json"
    if not path.exists():
        pytest.skip("no ../shared/workloads/wfinstances_dev.json")
    small = sorted(load_workloads(path), key=lambda w: len(w.graph))[:: 7 if interval != 2.0 else 4][:6]
    small = [w for w in small if len(w.graph) <= 120]
    assert small
    for workload in small:
        capacity = {"gpu": 8}
        weights = planned_weights(workload.graph, capacity)
        same_as_reference(workload.graph, capacity, interval, priority=lambda g, w=weights: w)
        same_as_reference(workload.graph, capacity, interval, priority="downstream", backfill=False)


@pytest.mark.parametrize("interval", INTERVALS)
def test_random_scale_dags(interval: float) -> None:
    """The planner benchmark's DAGs (1-8 GPUs, 10 min-2 h, up to 2 of the 30 tasks before), small."""
    graph = random_graph(int(80 * SMALL[interval]) if interval != 2.0 else 12, seed=1)
    capacity = {"gpu": 8}
    weights = planned_weights(graph, capacity)
    for options in ({}, {"strict_backfill": True}, {"lookahead": False}, {"backfill": False}):
        same_as_reference(graph, capacity, interval, priority=lambda g, w=weights: w, **options)
    same_as_reference(graph, capacity, interval, priority="critical_path")


@pytest.mark.parametrize(
    ("interval", "variant", "errors"),
    [
        (0.0, "A", 0.0),
        (0.0, "B", 0.3),
        (60.0, "A", 0.0),
        (60.0, "A", -0.3),
        (60.0, "B", 0.3),
        (2.0, "A", 0.0),
        (2.0, "A", -0.3),
    ],
)
def test_many_dag_mixes(interval: float, variant: str, errors: float) -> None:
    """Runs triggered over time, the objective's gate, and durations off their estimates (a running task
    past its expected end is the case where a decision moves with every tick)."""
    for seed in (0, 1) if interval != 2.0 else (0,):
        options = mix_simulation(seed, variant, errors, "balanced")
        graph = options.pop("graph")
        same_as_reference(graph, {"gpu": 8}, interval, **options)


@pytest.mark.parametrize("overdue", [1800.0, 5000.0, 7199.0])
@pytest.mark.parametrize("interval", (2.0, 60.0))
def test_a_key_and_a_wait_passing_overdue_between_events(overdue: float, interval: float) -> None:
    runs, options = _aging(overdue)
    result = same_as_reference(runs, {"gpu": 8}, interval, **options)
    # the decision did change while nothing happened: not reserving at first, reserving later
    assert 0 < result.reservation_ticks < result.controller_ticks


def test_ticks_that_change_nothing_are_not_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 10-hour wait at a 2-s interval is 18,000 ticks; the fast way decides a handful of them."""
    calls = {"n": 0}
    real = simulator_module.decide_pool

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(simulator_module, "decide_pool", counting)
    runs, options = _aging(1800.0)
    result = simulate(runs, {"gpu": 8}, "reservation", 2.0, **options)
    assert result.controller_ticks > 18_000
    assert calls["n"] < 100
    calls["n"] = 0
    simulate(runs, {"gpu": 8}, "reservation", 2.0, _every_tick=True, **options)
    assert calls["n"] >= 18_000


@settings(max_examples=150, deadline=None)
@given(
    two_pool_dags_simulation_equivalence(),
    st.randoms(use_true_random=False),
    st.sampled_from([0.0, 2.0, 3.0, 7.0, 60.0]),
    st.sampled_from(["easy", "strict", "off"]),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, 0.0, 30.0, 90.0]),
)
def test_random_graphs(
    graph: TaskGraph,
    rnd: random.Random,
    interval: float,
    backfill: str,
    lookahead: bool,
    noisy: bool,
    overdue: float | None,
) -> None:
    """Ties in priority, wrong estimates, two managed pools, start windows, a gate with keys as weights
    that reach ``overdue`` within the run; also checked at every tick against decide_pools over every
    waiting task (``verify_controller``), skipped ticks included."""
    if overdue is None:
        weights = {t: rnd.choice([1, 2, 3, 5, 8]) for t in graph.nodes}  # coarse: many ties
        gate = None
    else:
        weights = {t: key_weight(rnd.choice([0.0, 10.0, 40.0]), SIMULATION_EPOCH) for t in graph.nodes}
        gate = ReservationGate(gap=rnd.choice([0.0, 20.0]), overdue=overdue, epoch=SIMULATION_EPOCH)
    estimates = {t: node.duration * rnd.choice([0.5, 1.0, 1.5]) for t, node in graph.nodes.items()}
    options: dict[str, Any] = {
        "priority": lambda g: weights,
        "backfill": backfill != "off",
        "strict_backfill": backfill == "strict",
        "lookahead": lookahead,
        "estimates": estimates if noisy else None,
        "gate": gate,
    }
    same_as_reference(graph, {"gpu": 4, "gpu_b": 3}, interval, **options)
    simulate(graph, {"gpu": 4, "gpu_b": 3}, "reservation", interval, verify_controller=True, **options)


@settings(max_examples=300, deadline=None)
@example(1, [(3.0, 1.0, 1), (3.0, 1e-190, 1)])  # 3 + 1e-190 rounds to 3: an empty window fits at 3
@example(2, [(0.0, 4.0, 1), (1.0, 4.0, 1), (2.0, 1.0, 2), (2.5, 1e-300, 1)])
@given(
    st.integers(1, 12),
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 3.0, 7.5, 20.0, 41.0]) | st.floats(0, 60),
            st.sampled_from([0.0, 1.0, 2.5, 10.0, math.inf, math.nan]) | st.floats(0, 30),
            st.integers(-1, 13),
        ),
        max_size=60,
    ),
)
def test_usage_profile_jumps_where_the_walk_over_steps_goes(
    capacity: int, placements: list[tuple[float, float, int]]
) -> None:
    """Placing tasks one by one (as a serial schedule does), the earliest start found through the full
    ranges is the one the walk over every step finds, a task too wide for the pool refused alike."""

    def outcome(find: Any, *args: float) -> object:
        try:
            return find(*args)
        except ValueError as error:
            return str(error)

    profile = UsageProfile(capacity)
    for not_before, duration, slots in placements:
        start = outcome(profile.earliest, not_before, duration, slots)
        assert start == outcome(profile.earliest_by_steps, not_before, duration, slots)
        if isinstance(start, float) and math.isfinite(duration):
            profile.add(start, start + duration, slots)


def test_plans_through_the_profile_are_the_plans_through_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Justified and serial schedules of benchmark workloads come out the same either way."""
    workloads = [w.graph for w in ml_pipeline_workloads(2, seed=5)] + [random_graph(150, seed=2)]

    def schedules() -> list[object]:
        out: list[object] = []
        for graph in workloads:
            capacity = {"gpu": 8}
            greedy = simulate(graph, capacity, "critical_path", priority="critical_path")
            out.append(justification.justify(graph, capacity, {t.task_id: t.start for t in greedy.schedule}))
            priority = {t: float(len(graph.downstream(t))) for t in graph.nodes}
            out.append(justification.priority_serial_schedule(graph, capacity, priority))
        return out

    fast = schedules()
    monkeypatch.setattr(UsageProfile, "earliest", UsageProfile.earliest_by_steps)
    assert schedules() == fast


# -- The simulated controller's clock: the next tick is always after now.


@pytest.fixture
def deadline() -> Iterator[None]:
    def stop(*_: object) -> None:
        raise TimeoutError("simulate() did not return: the controller clock stood still")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(30)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("interval", [0.1, 0.3, 0.7, 1.1, 1.3, 2.5, 59.9, 60.0])
def test_the_next_tick_is_the_first_grid_point_after_now(interval: float) -> None:
    for k in range(0, 2000):
        for now in (k * interval, math.nextafter(k * interval, math.inf), (k + 0.5) * interval):
            tick = next_multiple(now, interval)
            assert tick > now, (interval, k, now)
            assert tick - interval <= now + 1e-9 * max(1.0, now), (interval, k, now)
    assert ControllerOptions(0.0, True, True, False, False).next_decision(5.0) is None
    assert ControllerOptions(0.7, True, True, False, False).next_decision(3 * 0.7) > 3 * 0.7


@pytest.mark.parametrize("interval", [0.1, 0.3, 0.7, 1.1, 59.9])
def test_simulate_ends_with_a_fractional_controller_interval(interval: float, deadline: None) -> None:
    graph = TaskGraph("fractional")
    graph.add("long", 10.0, 1, pool="gpu")  # holds 1 of 2 GPUs
    graph.add("wide", 1.0, 2, pool="gpu")  # waits for both, so the controller keeps ticking
    result = simulate(
        graph, {"gpu": 2}, "reservation", controller_interval=interval, priority="critical_path"
    )
    assert result.makespan >= 11.0
    assert {t.task_id for t in result.schedule} == {"long", "wide"}


def test_a_priority_callable_may_put_a_task_first_with_an_infinite_weight() -> None:
    g = TaskGraph.from_edges("d", {"a": 600.0, "b": 1800.0, "c": 60.0}, [])
    result = simulate(
        g, {"default_pool": 1}, "critical_path", priority=lambda _: {"a": 1, "b": math.inf, "c": -math.inf}
    )
    assert [t.task_id for t in sorted(result.schedule, key=lambda t: t.start)] == ["b", "a", "c"]
    assert result.by_id()["b"].priority == INT32_MAX


def test_weights_are_clamped_to_int32_whatever_their_type() -> None:
    # an int32 weight is taken as it is; any other is rounded and clamped
    g = TaskGraph.from_edges("d", {t: 60.0 for t in "abcdef"}, [])
    weights = {"a": 7, "b": 2**40, "c": -(2**40), "d": 2.6, "e": True, "f": INT32_MAX}
    result = simulate(g, {"default_pool": 1}, "critical_path", priority=lambda _: weights)
    got = {t.task_id: t.priority for t in result.schedule}
    assert got == {t: clamp_int32(w) for t, w in weights.items()}
    assert got == {"a": 7, "b": INT32_MAX, "c": INT32_MIN, "d": 3, "e": 1, "f": INT32_MAX}
    assert all(type(p) is int for p in got.values())


@contextmanager
def fails_after(seconds: int) -> Iterator[None]:
    """Fail with ``TimeoutError`` after ``seconds`` instead of hanging (a simulation whose event loop
    never ends)."""

    def expired(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("duration", [math.nan, math.inf, -5.0])
@pytest.mark.parametrize("policy", ["stock", "reservation"])
def test_simulate_refuses_a_duration_that_is_not_finite_seconds(duration: float, policy: str) -> None:
    # NaN would make the event loop wait forever for a task that never ends, a negative duration a task
    # that ends before it starts, and inf an infinite makespan
    graph = TaskGraph("train")
    graph.add("prep", 5, 1).pool = "gpu"
    graph.add("fit", duration, 2).pool = "gpu"
    graph.add_edge("prep", "fit")
    with (
        fails_after(5),
        pytest.raises(ValueError, match=r"DAG 'train', task 'fit': duration .* not finite"),
    ):
        simulate(graph, {"gpu": 2}, policy, priority="critical_path")


def test_simulator_controller_sees_estimates_not_actual_durations() -> None:
    """The controller sizes backfill from estimates. `long` (4 GPUs) really runs 10 s; the 8-GPU task
    turns ready at t=1 with four 20-s fillers. Believed exactly, nothing can backfill (the fillers would
    end after t=10) and `wide` starts at 10; believed to run 100 s, the fillers look safe, take the
    free slots, and `wide` starts only when they end at 21."""
    tasks = {"long": (10.0, 4), "prep": (1.0, 0), "wide": (5.0, 8)}
    edges = [("prep", "wide")]
    for i in range(4):
        tasks[f"fill{i}"] = (20.0, 1)
        edges.append(("prep", f"fill{i}"))
    g = gpu_graph(tasks, edges)

    def weights(graph: TaskGraph) -> dict[str, int]:
        return {t: 9 if t in ("long", "prep") else 8 if t == "wide" else 1 for t in graph.nodes}

    exact = simulate(g, {"gpu": 8}, "reservation", priority=weights)
    wrong = simulate(g, {"gpu": 8}, "reservation", priority=weights, estimates={"long": 100.0})
    assert exact.by_id()["wide"].start == 10.0
    assert wrong.by_id()["wide"].start == 21.0
    assert wrong.max_pool_usage["gpu"] <= 8 and exact.max_pool_usage["gpu"] <= 8


def _everything(result: SimulationResult) -> tuple[object, ...]:
    return (
        result.schedule,
        result.makespan,
        result.controller_ticks,
        result.reservation_ticks,
        result.max_pool_usage,
        result.runs,
        result.priority_rule,
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(two_pool_dags_simulation_equivalence(), min_size=1, max_size=2),
    st.randoms(use_true_random=False),
    st.sampled_from([0.0, 2.0, 60.0]),
)
def test_tables_built_once_simulate_what_tables_built_per_call_simulate(
    dags: list[TaskGraph], rnd: random.Random, interval: float
) -> None:
    """The planner builds the simulator's tables of a graph once for its many simulations
    (``_tables``): each simulation through them is the simulation without them, and none changes them
    for the next (policies, weights, estimates, triggers and intervals vary between them)."""
    caps = {"gpu": 4, "gpu_b": 3}
    graph: TaskGraph | list[TaskGraph] = dags[0] if len(dags) == 1 else dags
    triggers = [float(rnd.choice([0, 0, 5, 40])) for _ in dags]
    tables = SimulationTables.build(graph, caps, triggers)
    before = {
        name: copy.deepcopy(value)
        for name, value in vars(tables).items()
        if name not in ("sources", "graphs")
    }
    for policy in ("reservation", "critical_path", "reservation", "stock"):
        weights = {t: rnd.choice([1, 2, 3, 5, 8]) for g in dags for t in g.nodes}
        estimates = {k: d * rnd.choice([0.5, 1.0, 1.5]) for k, d in tables.durations.items()}
        options: dict[str, Any] = {
            "priority": (lambda g, chosen=weights: chosen) if policy != "stock" else None,
            "estimates": rnd.choice([None, estimates]),
            "triggers": triggers,
        }
        fresh = simulate(graph, caps, policy, interval, **options)
        assert _everything(simulate(graph, caps, policy, interval, _tables=tables, **options)) == _everything(
            fresh
        )
    assert {name: value for name, value in vars(tables).items() if name in before} == before
    with pytest.raises(ValueError, match="_tables"):
        simulate(graph, {"gpu": 4, "gpu_b": 2}, "reservation", interval, triggers=triggers, _tables=tables)
    with pytest.raises(ValueError, match="_tables"):
        simulate(copy.copy(dags[0]), caps, "reservation", interval, triggers=triggers[:1], _tables=tables)


def test_a_scheduled_task_built_without_the_dataclass_init_is_the_same() -> None:
    # the simulator builds its ScheduledTask without the frozen dataclass's __init__ (_scheduled)
    values = ("t1", 3.0, 9.5, 2, "gpu", 7, 1.0)
    fast, built = simulator_module._scheduled(*values), ScheduledTask(*values)
    assert (
        fast == built
        and hash(fast) == hash(built)
        and repr(fast) == repr(built)
        and vars(fast) == vars(built)
    )
    assert [f.name for f in dataclasses.fields(ScheduledTask)] == list(vars(fast)) and fast.wait == 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.start = 0.0  # type: ignore[misc]


def test_a_running_task_built_without_the_dataclass_init_is_the_same() -> None:
    # the simulator builds the RunningTask of a started task without the frozen dataclass's __init__
    values = ("t1", "gpu", 2, 9.5)
    fast, built = simulator_module._running(*values), RunningTask(*values)
    assert fast == built and hash(fast) == hash(built) and repr(fast) == repr(built)
    assert [f.name for f in dataclasses.fields(RunningTask)] == list(vars(fast)) == list(vars(built))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.slots = 0  # type: ignore[misc]


@pytest.mark.parametrize("policy", ["stock", "critical_path", "reservation"])
def test_an_empty_graph_simulates_to_nothing_with_a_ratio_of_one(policy: str) -> None:
    result = simulate(TaskGraph("empty"), {"gpu": 4}, policy, 5.0, priority="critical_path")
    assert (result.makespan, result.lower_bound, result.ratio, result.schedule) == (0.0, 0.0, 1.0, [])
    assert result.runs == [simulator_module.RunResult("empty", 0.0, 0.0)]
    assert result.mean_completion == 0.0 and result.max_wait() == 0.0
    assert json.loads(json.dumps(result.to_dict()))["schedule"] == []


def test_no_graph_at_all_is_an_empty_simulation() -> None:
    result = simulate([], {"gpu": 4}, "stock")
    assert (result.makespan, result.runs, result.ratio, result.completion_quantile(0.9)) == (
        0.0,
        [],
        1.0,
        0.0,
    )


@pytest.mark.parametrize("times", [[math.nan], [math.inf], [-1.0], [1.0, 2.0], []])
def test_triggers_that_are_not_one_finite_time_per_graph_are_refused(times: list[float]) -> None:
    graph = gpu_graph({"a": (10.0, 1)}, [], "trig")
    with pytest.raises(ValueError, match=r"triggers: one time >= 0 per graph \(1\)"):
        simulate(graph, CAP, "stock", triggers=times)


def test_a_capacity_error_names_five_tasks_counts_the_rest_and_says_the_fix() -> None:
    graph = gpu_graph({f"w{i}": (1.0, 4) for i in range(8)}, [], "wide")
    with pytest.raises(CapacityError) as caught:
        simulate(graph, {"gpu": 2}, "stock")
    message = str(caught.value)
    assert message.count("DAG 'wide', task 'w") == 5 and "'w4' needs 4 slots of pool 'gpu'" in message
    assert "and 3 more" in message and "request fewer GPUs or give the pool more capacity" in message
    assert isinstance(caught.value, ValueError)


def test_a_task_of_an_unnamed_pool_is_unlimited_however_wide() -> None:
    graph = gpu_graph({"huge": (10.0, 64), "other": (10.0, 64)}, [], "free")
    result = simulate(graph, {"tpu": 1}, "stock")
    assert [t.start for t in result.schedule] == [0.0, 0.0] and result.max_pool_usage == {"tpu": 0}


@pytest.mark.parametrize(("policy", "interval"), [("stock", 0.0), ("reservation", 0.0), ("reservation", 5.0)])
def test_a_zero_slot_task_starts_at_once_even_in_a_full_pool(policy: str, interval: float) -> None:
    """A task mapped over nothing holds no slot: Airflow skips it at once, whatever its pool's state."""
    graph = TaskGraph("zero")
    graph.add("hog", 50.0, 2, pool="gpu")
    graph.add("nothing", 5.0, 0, pool="gpu", pool_slots=0)
    graph.add("after", 1.0, 2, pool="gpu")
    graph.add_edge("nothing", "after")
    result = simulate(graph, {"gpu": 2}, policy, interval, priority="critical_path")
    got = {t.task_id: (t.start, t.slots) for t in result.schedule}
    assert got == {"hog": (0.0, 2), "nothing": (0.0, 0), "after": (50.0, 2)}
    assert result.max_pool_usage["gpu"] == 2


def test_a_start_window_counts_from_the_runs_trigger() -> None:
    graph = TaskGraph("later")
    graph.add("a", 10.0, 1, pool="gpu").not_before = 30.0
    result = simulate(graph, CAP, "stock", triggers=[5.0])
    only = result.schedule[0]
    assert (only.ready, only.start, only.end) == (35.0, 35.0, 45.0)
    assert result.runs[0].completion == 40.0


def test_a_priority_tie_goes_to_the_earlier_trigger_then_to_graph_order() -> None:
    """Both runs' tasks turn ready at t=5 with equal weights: Airflow breaks the tie by logical date."""
    first, second = TaskGraph("first"), TaskGraph("second")
    first.add("x", 10.0, 1, pool="gpu")
    second.add("x", 10.0, 1, pool="gpu").not_before = 5.0
    result = simulate([first, second], {"gpu": 1}, "stock", triggers=[5.0, 0.0])
    assert [(t.task_id, t.start) for t in result.schedule] == [("1:second/x", 5.0), ("0:first/x", 15.0)]
    assert [(r.dag_id, r.trigger, r.end) for r in result.runs] == [
        ("first", 5.0, 25.0),
        ("second", 0.0, 15.0),
    ]
    same = simulate([first, second], {"gpu": 1}, "stock", triggers=[5.0, 5.0])
    assert [(t.task_id, t.start) for t in same.schedule] == [("0:first/x", 5.0), ("1:second/x", 15.0)]


def test_completion_quantiles_are_nearest_rank_and_clamped_to_the_runs() -> None:
    runs = [
        simulator_module.RunResult(d, t, e) for d, t, e in [("a", 0.0, 10.0), ("b", 5.0, 7.0), ("c", 0, 4)]
    ]
    result = SimulationResult("stock", 10.0, [], 10.0, runs=runs)  # completions 10, 2, 4
    assert [result.completion_quantile(q) for q in (0.01, 0.34, 0.67, 1.0)] == [2.0, 4.0, 10.0, 10.0]
    assert result.completion_quantile(5.0) == 10.0 and result.completion_quantile(0.0) == 2.0
    assert result.mean_completion == pytest.approx(16.0 / 3)


def test_max_wait_counts_only_tasks_holding_at_least_min_slots() -> None:
    schedule = [
        ScheduledTask("narrow", 50.0, 60.0, 1, "gpu", 1, 0.0),
        ScheduledTask("wide", 20, 30, 8, "gpu", 1, 5),
    ]
    result = SimulationResult("stock", 60.0, schedule, 60.0)
    assert (result.max_wait(), result.max_wait(2), result.max_wait(9)) == (50.0, 15.0, 0.0)


def test_unicode_ids_simulate_and_serialize() -> None:
    graph = TaskGraph("dåg-🚀")
    graph.add("träin-✓", 10.0, 2, pool="gpü")
    graph.add("évál", 10.0, 2, pool="gpü")
    graph.add_edge("träin-✓", "évál")
    result = simulate(graph, {"gpü": 2}, "reservation", 5.0, priority="critical_path")
    assert [(t.task_id, t.start) for t in result.schedule] == [("träin-✓", 0.0), ("évál", 10.0)]
    assert json.loads(json.dumps(result.to_dict()))["schedule"][1]["pool"] == "gpü"
    assert result.runs[0].dag_id == "dåg-🚀"


def test_the_reservation_policy_predicts_with_the_rule_every_graph_declares_else_packing() -> None:
    agree = [TaskGraph("a", priority_rule="critical_path"), TaskGraph("b", priority_rule="critical_path")]
    differ = [TaskGraph("a", priority_rule="critical_path"), TaskGraph("b", priority_rule="downstream")]
    partly = [TaskGraph("a", priority_rule="critical_path"), TaskGraph("b")]
    assert simulator_module.default_rule("reservation", agree) == "critical_path"
    assert simulator_module.default_rule("reservation", differ) == "packing"
    assert simulator_module.default_rule("reservation", partly) == "packing"
    assert simulator_module.default_rule("stock", agree) == "downstream"
    assert simulator_module.default_rule("critical_path", agree[0]) == "critical_path"


def test_estimates_of_several_graphs_are_keyed_by_run_index_and_dag_id() -> None:
    """As in ``test_simulator_controller_sees_estimates_not_actual_durations``, with a second graph: the
    controller believes ``long`` runs 100 s only under its key ``0:g/long``."""
    tasks = {"long": (10.0, 4), "prep": (1.0, 0), "wide": (5.0, 8)}
    edges = [("prep", "wide")]
    for i in range(4):
        tasks[f"fill{i}"] = (20.0, 1)
        edges.append(("prep", f"fill{i}"))
    graphs_ = [gpu_graph(tasks, edges), TaskGraph("empty")]

    def weights(graph: TaskGraph) -> dict[str, int]:
        return {t: 9 if t in ("long", "prep") else 8 if t == "wide" else 1 for t in graph.nodes}

    def wide_start(estimates: dict[str, float] | None) -> float:
        result = simulate(graphs_, {"gpu": 8}, "reservation", priority=weights, estimates=estimates)
        return result.by_id()["0:g/wide"].start

    assert wide_start(None) == 10.0
    assert wide_start({"long": 100.0}) == 10.0  # a bare task id names no task of several graphs
    assert wide_start({"0:g/long": 100.0}) == 21.0


def test_a_task_of_a_huge_duration_with_hourly_ticks_ends_and_waits_for_the_next_tick() -> None:
    graph = TaskGraph("huge")
    graph.add("long", 1e15, 1, pool="gpu")
    graph.add("wide", 1.0, 2, pool="gpu")
    graph.add("tiny", 1e-9, 1, pool="gpu")
    with fails_after(20):
        result = simulate(graph, {"gpu": 2}, "reservation", 3600.0, priority="critical_path")
    wide = result.by_id()["wide"]
    assert wide.start == next_multiple(1e15, 3600.0) and result.makespan == wide.end
    assert result.controller_ticks >= 1e15 / 3600.0


@pytest.mark.parametrize("capacity", [math.nan, math.inf])
def test_a_capacity_that_is_not_a_number_of_slots_is_refused_naming_the_pool(capacity: float) -> None:
    graph = gpu_graph({"a": (10.0, 1)}, [], "cap")
    with pytest.raises(ValueError, match="'gpu'"):
        simulate(graph, {"gpu": capacity}, "stock")  # type: ignore[dict-item]


def test_a_nan_estimate_is_refused_or_predicted_as_the_controller_decides() -> None:
    """``t1`` (3 GPUs, estimate NaN) runs with ``t2``; ``t3`` (4 GPUs) waits on ``t1``, ``t0`` (4 GPUs) is
    ready. Either the NaN estimate is refused naming the task (as a NaN duration is), or the simulated
    controller decides what ``decide_pools`` over every waiting task decides (``verify_controller``)."""
    graph = gpu_graph({"t0": (20.0, 4), "t1": (10.0, 3), "t2": (5.0, 1), "t3": (10.0, 4)}, [("t1", "t3")])
    weights = {"t0": 2, "t1": 3, "t2": 3, "t3": 3}
    try:
        simulate(
            graph,
            {"gpu": 4},
            "reservation",
            priority=lambda _g: weights,
            estimates={"t1": math.nan},
            verify_controller=True,
        )
    except ValueError as err:
        assert "'t1'" in str(err)
