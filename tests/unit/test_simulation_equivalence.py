"""The simulator's fast way gives the schedule of its reference way, start for start.

The fast way skips the controller ticks whose decision cannot differ from the last one (nothing started,
ended or turned ready since, and no threshold of the decision crossed: a pending task's expected ready
time, a running task's expected end, a key or a wait passing ``overdue``, the next tick passing a shadow
time) and reads a pool's ready tasks through lists by slot count. The reference
(``simulate(..., _every_tick=True)``) decides at every tick and walks every waiting task, as the simulator
always did. Compared here over the benchmark workloads (``benchmarks/workloads.py``: generated ML
pipelines and, when ``../shared/workloads`` is there, WfCommons instances; the many-DAG mixes of
``benchmarks/mixes.py``; the random DAGs of ``benchmarks/scale_dags.py``) at controller intervals 0, 2
and 60 s, and on random graphs (hypothesis).

Likewise the planner's usage profile finds the earliest start by jumping over the time ranges where a
pool is too full (:meth:`UsageProfile.earliest`); its reference walks every step of the profile
(:meth:`UsageProfile.earliest_by_steps`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mixes import actual_graphs, make_mix, triggers
from scale_dags import random_graph
from workloads import default_workloads_dir, load_workloads, ml_pipeline_workloads

from airflow_gpu_dag.core.analysis.weight_rules import plan_order_weights
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning import justification
from airflow_gpu_dag.core.planning.justification import UsageProfile
from airflow_gpu_dag.core.policy.objective import OBJECTIVES, ReservationGate, key_weight
from airflow_gpu_dag.core.simulation import simulator as simulator_module
from airflow_gpu_dag.core.simulation.cross_dag import SIMULATION_EPOCH, believed_durations, cross_dag_priority
from airflow_gpu_dag.core.simulation.simulator import SimulationResult, simulate
from tests.unit import graphs

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


@pytest.mark.parametrize(
    ("interval", "variant", "errors"),
    [(60.0, "A", 0.0), (60.0, "A", -0.3), (60.0, "B", 0.3), (2.0, "A", 0.0), (2.0, "A", -0.3)],
)
def test_many_dag_mixes(interval: float, variant: str, errors: float) -> None:
    """Runs triggered over time, the objective's gate, and durations off their estimates (a running task
    past its expected end is the case where a decision moves with every tick)."""
    for seed in (0, 1) if interval != 2.0 else (0,):
        options = mix_simulation(seed, variant, errors, "balanced")
        graph = options.pop("graph")
        same_as_reference(graph, {"gpu": 8}, interval, **options)


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


@st.composite
def two_pool_dags(draw: st.DrawFn) -> TaskGraph:
    def pool(draw: st.DrawFn, gpus: int) -> str:
        return draw(st.sampled_from(["gpu", "gpu", "gpu_b"] if gpus <= 3 else ["gpu"]))

    graph = graphs.draw_task_graph(draw, "eq", (2, 22), [0, 1, 1, 2, 3, 4], 40, pool)
    for node in graph.nodes.values():  # some tasks wait for a start window
        node.not_before = float(draw(st.sampled_from([0, 0, 0, 5, 33])))
    return graph


@settings(max_examples=150, deadline=None)
@given(
    two_pool_dags(),
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
