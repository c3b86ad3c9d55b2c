"""Makespan lower bounds (core.analysis.bounds): never above the true optimum, and tight where they should be.

The optimum of a small DAG is found exhaustively: the serial schedule generation scheme over every
topological order reaches every active schedule, and among those is an optimal one (for makespan with
renewable resources), so the best of them is the optimum."""

from __future__ import annotations

import itertools
import math
import signal
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.core.analysis import bounds
from airflow_gpu_dag.core.analysis.bounds import (
    best_lower_bound,
    dependency_lower_bound,
    lower_bound,
    overlap_bound,
    release_profile_bound,
    rounds_bound,
)
from airflow_gpu_dag.core.model.graph import CycleError, TaskGraph
from airflow_gpu_dag.core.planning.justification import serial_schedule
from airflow_gpu_dag.core.planning.planner import predict
from airflow_gpu_dag.core.simulation.simulator import simulate
from tests.unit.graphs import HOUR, fallen_back_ladder, gpu_graph, sized_and_unlimited_pools


def optimum(graph: TaskGraph, capacity: Mapping[str, int]) -> float:
    best = float("inf")
    tasks = list(graph.nodes)
    for order in itertools.permutations(tasks):
        position = {t: i for i, t in enumerate(order)}
        if any(position[u] > position[t] for t in tasks for u in graph.upstream(t)):
            continue
        start = serial_schedule(graph, capacity, order)
        best = min(best, max((start[t] + graph.nodes[t].duration for t in tasks), default=0.0))
    return best


@st.composite
def small_dags(draw: st.DrawFn) -> TaskGraph:
    n = draw(st.integers(1, 6))
    tasks = {f"t{i}": (draw(st.integers(0, 30)), draw(st.sampled_from([0, 1, 1, 2, 3, 4]))) for i in range(n)}
    edges = [
        (f"t{j}", f"t{i}")
        for i in range(1, n)
        for j in draw(st.lists(st.integers(0, i - 1), max_size=2, unique=True))
    ]
    return gpu_graph(tasks, edges)


@settings(max_examples=150, deadline=None)
@given(small_dags(), st.sampled_from([4, 5]))
def test_bounds_never_exceed_the_optimum(graph: TaskGraph, cap: int) -> None:
    caps = {"gpu": cap}
    best = optimum(graph, caps)
    tolerance = 1e-6 * max(1.0, best)
    assert release_profile_bound(graph, caps) <= best + tolerance
    assert overlap_bound(graph, caps) <= best + tolerance
    assert rounds_bound(graph, caps) <= best + tolerance
    combined = best_lower_bound(graph, caps)
    assert dependency_lower_bound(graph, caps) <= combined <= best + tolerance


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.sampled_from([1, 2, 4, 8])), min_size=1, max_size=40))
def test_bounds_never_exceed_a_simulated_schedule(shards: list[tuple[int, int]]) -> None:
    graph = gpu_graph({f"s{i}": shard for i, shard in enumerate(shards)}, [])
    graph.add("merge", 5, 1).pool = "gpu"
    for i in range(len(shards)):
        graph.add_edge(f"s{i}", "merge")
    for cap in (8, 16):
        made = min(
            predict(graph, {"gpu": cap}, p).makespan for p in ("stock", "critical_path", "reservation")
        )
        assert best_lower_bound(graph, {"gpu": cap}) <= made + 1e-6 * made


def test_overlap_bound_sees_that_one_rigid_task_must_wait() -> None:
    """Three independent 10-s single-GPU tasks on 2 GPUs: slot-seconds say 15 s, but each pair of them
    overlaps in any schedule shorter than 20 s, and all three cannot run at once."""
    graph = gpu_graph({"a": (10, 1), "b": (10, 1), "c": (10, 1)}, [])
    caps = {"gpu": 2}
    assert lower_bound(graph, caps) == 15
    assert abs(overlap_bound(graph, caps) - 20) < 1e-4
    assert abs(best_lower_bound(graph, caps) - optimum(graph, caps)) < 1e-4


def test_overlap_bound_counts_a_wide_phase_that_needs_more_than_the_pool() -> None:
    """A 34-GPU phase on 32 GPUs (the 1000genome shape): two single-GPU tasks wait a task length."""
    tasks = {f"i{k}": (50.0, 1) for k in range(18)} | {"w1": (50.0, 8), "w2": (50.0, 8)}
    graph = gpu_graph({**tasks, "merge": (30.0, 1)}, [(t, "merge") for t in tasks])
    caps = {"gpu": 32}
    assert lower_bound(graph, caps) == 80.0  # critical path
    assert abs(overlap_bound(graph, caps) - 130.0) < 1e-3  # 50 + 50 + 30
    assert simulate(graph, caps, "stock").makespan == 130.0


def test_release_profile_bound_counts_idle_gpus_before_work_is_released() -> None:
    """A long split releases most of the work late: the pool idles before, whatever the schedule."""
    tasks = {"split": (40.0, 1), "early": (10.0, 1)}
    tasks |= {f"m{k}": (10.0, 1) for k in range(8)}
    edges = [("split", f"m{k}") for k in range(8)]
    graph = gpu_graph(tasks, edges)
    caps = {"gpu": 4}
    # slot-seconds / capacity = 32.5, critical path 50; the 8 maps need 80 slot-seconds after t=40
    assert release_profile_bound(graph, caps) == best_lower_bound(graph, caps) == 60.0
    # a schedule reaches it, so the bound is the optimum (the exhaustive search over 10! orders took
    # 24 s of CI for the same answer)
    start = serial_schedule(graph, caps, ["split", "early", *(f"m{k}" for k in range(8))])
    assert max(start[t] + graph.nodes[t].duration for t in graph.nodes) == 60.0


def test_rounds_bound_counts_whole_rounds_of_equal_shards() -> None:
    """70 GPUs' worth of 9-s shards on 32 GPUs between a 1-s split and a 1-s merge (the BLAST shape):
    slot-seconds say 21.7 s, but no GPU fits three shards in less than 27 s."""
    shards = {f"n{k}": (9.0, 1) for k in range(34)} | {f"w{k}": (9.0, 4 if k < 3 else 8) for k in range(6)}
    edges = [("split", s) for s in shards] + [(s, "merge") for s in shards]
    graph = gpu_graph({"split": (1.0, 1), **shards, "merge": (1.0, 1)}, edges)
    caps = {"gpu": 32}
    assert lower_bound(graph, caps) < 22.0
    assert rounds_bound(graph, caps) == 29.0  # 1 + 3 x 9 + 1
    assert predict(graph, caps, "reservation").makespan == 29.0  # and a schedule reaches it


def test_bounds_of_a_dag_without_pool_tasks_are_zero() -> None:
    graph = gpu_graph({"cpu": (10, 0)}, [])
    assert release_profile_bound(graph, {"gpu": 4}) == 0.0
    assert overlap_bound(graph, {"gpu": 4}) == 0.0
    assert rounds_bound(graph, {"gpu": 4}) == 0.0
    assert best_lower_bound(graph, {"gpu": 4}) == 10.0


# -- 2. the lower bounds of a DAG with a fallback ladder --------------------------------------------------
def test_the_bounds_of_a_ladder_hold_for_the_schedule_the_simulator_makes() -> None:
    """Three 8-GPU tasks of 2 h run one after another on 8 GPUs; the rung that fell back waits 2 h
    holding nothing, the 10-minute rung after it squeezes in: 6h10m. No bound may count the 8 GPUs x 2 h
    of the wait: that gives 8h01m, a lower bound above a makespan the simulator achieves."""
    graph = fallen_back_ladder(wait=2 * HOUR, small=600.0, others=3)
    caps = {"gpu": 8}
    made = min(predict(graph, caps, policy).makespan for policy in ("stock", "critical_path", "reservation"))
    assert made == pytest.approx(6 * HOUR + 600)
    for bound in (
        lower_bound,
        dependency_lower_bound,
        release_profile_bound,
        overlap_bound,
        rounds_bound,
        best_lower_bound,
    ):
        assert bound(graph, caps) <= made + 1e-6 * made, bound.__name__
    assert best_lower_bound(graph, caps) == pytest.approx(6 * HOUR + 75)  # (3 x 8 x 2 h + 600) / 8


# -- 3. edges of the input: empty graphs, pools without capacity, bad numbers --------------------------
ALL_BOUNDS = (
    lower_bound,
    dependency_lower_bound,
    release_profile_bound,
    overlap_bound,
    rounds_bound,
    best_lower_bound,
)


@contextmanager
def hang_guard(seconds: int = 3) -> Iterator[None]:
    """Raises ``TimeoutError`` in a call that does not return: a guard against a hang, not a speed figure."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_every_bound_of_an_empty_dag_is_zero() -> None:
    for bound in ALL_BOUNDS:
        assert bound(TaskGraph("empty"), {"gpu": 4}) == 0.0, bound.__name__
    assert lower_bound([], {"gpu": 4}) == 0.0


def test_pools_of_no_capacity_and_pools_not_named_add_nothing_and_divide_by_nothing() -> None:
    """A pool not in ``capacity`` is unlimited; one of 0 (or fewer) slots is skipped, not divided by."""
    graph = gpu_graph({"a": (10, 2), "b": (10, 2)}, [])
    for caps in ({}, {"gpu": 0}, {"gpu": -4}, {"other": 1}):
        for bound in (release_profile_bound, overlap_bound, rounds_bound):
            assert bound(graph, caps) == 0.0, (bound.__name__, caps)
        assert best_lower_bound(graph, caps) == 10.0  # the critical path alone


def test_an_unlimited_pools_tasks_do_not_count_against_a_sized_one() -> None:
    """Three 4-GPU tasks of 10 s in ``gpu`` of 4 GPUs run one after another: 30 s; ``tpu`` (no capacity
    named) runs its tasks at once, so its tasks change nothing."""
    graph = sized_and_unlimited_pools()
    caps = {"gpu": 4}
    assert best_lower_bound(graph, caps) == pytest.approx(30.0)
    assert rounds_bound(graph, caps) == 30.0
    assert lower_bound(graph, caps) == 30.0


def test_each_pool_is_bounded_on_its_own_capacity() -> None:
    """Two 10-s tasks on a 1-slot pool take 20 s whatever the other, wider pool does."""
    graph = TaskGraph("pools")
    graph.add("a1", 10.0, 1, pool="narrow")
    graph.add("a2", 10.0, 1, pool="narrow")
    graph.add("b1", 10.0, 1, pool="wide")
    graph.add("b2", 10.0, 1, pool="wide")
    caps = {"narrow": 1, "wide": 2}
    assert rounds_bound(graph, caps) == 20.0
    assert best_lower_bound(graph, caps) == 20.0
    assert best_lower_bound(graph, {"narrow": 2, "wide": 2}) == 10.0


def test_lower_bound_of_several_graphs_sums_their_work_and_takes_the_longest_path() -> None:
    one = gpu_graph({"a": (10, 4)}, [], dag_id="one")
    two = gpu_graph({"b": (10, 4), "c": (25, 0)}, [("b", "c")], dag_id="two")
    assert lower_bound([one, two], {"gpu": 4}) == 35.0  # the path b -> c
    assert lower_bound([one, two], {"gpu": 2}) == 40.0  # 80 GPU-seconds on 2 GPUs


def test_tasks_of_no_time_or_no_slots_take_nothing_from_the_pool() -> None:
    tasks = {f"z{k}": (0.0, 4) for k in range(50)} | {f"c{k}": (30.0, 0) for k in range(50)}
    graph = gpu_graph(tasks, [])
    for bound in (release_profile_bound, overlap_bound, rounds_bound):
        assert bound(graph, {"gpu": 4}) == 0.0, bound.__name__
    assert best_lower_bound(graph, {"gpu": 4}) == 30.0


def test_the_dependency_bound_counts_a_serial_tail_after_a_wide_phase_and_a_head_before_it() -> None:
    """Eight 10-s GPU tasks on 4 GPUs take 20 s; a 100-s task after them (or before them) follows
    those 20 s: 120 s, where the critical path says 110."""
    shards = {f"s{k}": (10.0, 1) for k in range(8)}
    tail = gpu_graph({**shards, "tail": (100.0, 0)}, [(s, "tail") for s in shards])
    head = gpu_graph({"head": (100.0, 0), **shards}, [("head", s) for s in shards])
    for graph in (tail, head):
        assert lower_bound(graph, {"gpu": 4}) == 110.0
        assert dependency_lower_bound(graph, {"gpu": 4}) == 120.0
        assert best_lower_bound(graph, {"gpu": 4}) == 120.0


def test_the_best_bound_is_the_largest_of_the_others() -> None:
    shapes = [
        gpu_graph({"a": (10, 1), "b": (10, 1), "c": (10, 1)}, []),
        gpu_graph({"split": (40, 1), "early": (10, 1), **{f"m{k}": (10, 1) for k in range(8)}}, []),
        fallen_back_ladder(wait=2 * HOUR, small=600.0, others=2),
        sized_and_unlimited_pools(),
    ]
    for graph in shapes:
        caps = {"gpu": 2}
        values = [bound(graph, caps) for bound in ALL_BOUNDS[:-1]]
        assert best_lower_bound(graph, caps) == pytest.approx(max(values))


def test_the_bounds_change_neither_the_graph_nor_the_capacity_and_repeat_exactly() -> None:
    graph = fallen_back_ladder(wait=2 * HOUR, small=600.0, others=3)
    before = {t: (n.duration, n.gpus, n.pool, repr(n.attrs)) for t, n in graph.nodes.items()}
    edges = sorted(graph.edges())
    caps = {"gpu": 8}
    first = [bound(graph, caps) for bound in ALL_BOUNDS]
    assert [bound(graph, caps) for bound in ALL_BOUNDS] == first
    assert {t: (n.duration, n.gpus, n.pool, repr(n.attrs)) for t, n in graph.nodes.items()} == before
    assert sorted(graph.edges()) == edges and caps == {"gpu": 8}


def test_a_dependency_cycle_is_refused_naming_the_dag() -> None:
    graph = gpu_graph({"a": (10, 1), "b": (5, 1)}, [("a", "b"), ("b", "a")], dag_id="loop")
    for bound in ALL_BOUNDS:
        with pytest.raises(CycleError, match="DAG 'loop' has a dependency cycle"):
            bound(graph, {"gpu": 4})


def test_the_release_profile_stays_valid_and_keeps_all_tasks_when_thresholds_are_thinned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """300 10-s GPU tasks, each followed by a CPU task of its own few milliseconds: 300 distinct tails,
    more than the thresholds tried. Fewer thresholds may only lower the bound, and the set of every task
    (the least tail, 1 ms) is always tried: all the work / capacity (300 s) + that tail."""
    tasks = {f"g{k}": (10.0, 1) for k in range(300)} | {f"c{k}": ((k + 1) / 1000, 0) for k in range(300)}
    graph = gpu_graph(tasks, [(f"g{k}", f"c{k}") for k in range(300)])
    caps = {"gpu": 10}
    full = release_profile_bound(graph, caps)
    monkeypatch.setattr(bounds, "PROFILE_THRESHOLDS", 3)
    thinned = release_profile_bound(graph, caps)
    assert 300.001 - 1e-9 <= thinned <= full


def test_a_looser_overlap_tolerance_never_overstates_the_bound() -> None:
    graph = gpu_graph({"a": (10, 1), "b": (10, 1), "c": (10, 1)}, [])
    tight = overlap_bound(graph, {"gpu": 2}, tolerance=1e-9)
    loose = overlap_bound(graph, {"gpu": 2}, tolerance=0.1)
    assert tight == pytest.approx(20.0, rel=1e-8)
    assert 20.0 * 0.9 - 1e-9 <= loose <= tight


def test_huge_durations_give_finite_bounds() -> None:
    graph = gpu_graph({"a": (1e300, 1), "b": (1e300, 1), "c": (1e300, 1)}, [])
    assert best_lower_bound(graph, {"gpu": 2}) == pytest.approx(2e300)


@pytest.mark.parametrize("tolerance", [0.0, -1e-6])
def test_an_exact_or_negative_overlap_tolerance_is_answered_not_hung(tolerance: float) -> None:
    """Bisection stops when ``high - low <= tolerance * high``; with 0 it needs ``low == high``, which
    two adjacent floats never reach (the midpoint is one of them). Either the exact bound or a refusal
    naming the tolerance."""
    graph = gpu_graph({"a": (10, 1), "b": (10, 1), "c": (10, 1)}, [])
    with hang_guard():
        try:
            value = overlap_bound(graph, {"gpu": 2}, tolerance=tolerance)
        except ValueError as err:
            assert "tolerance" in str(err)
        else:
            assert value == pytest.approx(20.0)


def test_a_nan_duration_is_refused_naming_the_task_not_hung() -> None:
    """A NaN duration (a workload file, a learned estimate gone wrong) makes ``_forced_overlap`` true for
    every makespan, so the overlap bisection never ends; the other bounds give NaN or inf."""
    graph = gpu_graph({"a": (math.nan, 1), "b": (5.0, 1)}, [], dag_id="bad")
    with hang_guard(), pytest.raises(ValueError, match="'a'"):
        best_lower_bound(graph, {"gpu": 4})
