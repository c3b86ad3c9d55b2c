"""Audit of the core's multi-DAG and admission logic: defects found on edge cases, each reproduced here
first (runs of one DAG under two versions, a starving task too wide for its pool, start windows in a
daylight-saving gap, a request for a pool of no slots)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_gpu_dag.core.analysis.gpu_requests import RequestLimits, check_gpu_request
from airflow_gpu_dag.core.analysis.weight_rules import downstream_weights
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.core.model.windows import parse_window, seconds_until_open
from airflow_gpu_dag.core.policy.admission import ReadyTask, RunningTask
from airflow_gpu_dag.core.policy.objective import OBJECTIVES, ReservationGate, key_weight, run_weights
from airflow_gpu_dag.core.policy.reservation import decide_pool, decide_pools
from airflow_gpu_dag.core.simulation.cross_dag import SIMULATION_EPOCH, predict_runs
from airflow_gpu_dag.core.simulation.simulator import SimulationResult

# -- predict_runs: every run weighed by its own graph ------------------------------------------------


def _train(fit_s: float, fit_gpus: int, with_eval: bool) -> TaskGraph:
    """Two versions of one DAG ``train``: v1 a short fit, v2 a long wide one and an evaluation after."""
    graph = TaskGraph("train")
    graph.add("prep", 60.0, 1, pool="gpu")
    graph.add("fit", fit_s, fit_gpus, pool="gpu")
    graph.add_edge("prep", "fit")
    if with_eval:
        graph.add("eval", 60.0, 1, pool="gpu")
        graph.add_edge("fit", "eval")
    return graph


def _weights(result: SimulationResult, run: int) -> dict[str, int]:
    return {
        t.task_id.split("/", 1)[1]: t.priority for t in result.schedule if t.task_id.startswith(f"{run}:")
    }


def test_cross_dag_keys_of_two_runs_of_one_dag_follow_each_runs_version() -> None:
    """Before: the believed graphs were keyed by DAG id, so the run created under v1 got the keys of v2
    (the last run's graph): its due time from v2's hours of work."""
    v1, v2 = _train(60.0, 1, False), _train(7200.0, 4, True)
    caps, objective = {"gpu": 4}, OBJECTIVES["balanced"]
    result = predict_runs([v1, v2], [0.0, 100.0], caps, objective)
    assert _weights(result, 0) == run_weights(v1, 0.0, caps, objective, SIMULATION_EPOCH)
    assert _weights(result, 1) == run_weights(v2, 100.0, caps, objective, SIMULATION_EPOCH)


def test_stock_weights_of_two_runs_of_one_dag_follow_each_runs_version() -> None:
    """Before: stock Airflow's ``downstream`` weights of the v2 run came from v1's graph (fit 1, not 2)."""
    v1, v2 = _train(60.0, 1, False), _train(7200.0, 4, True)
    result = predict_runs([v2, v1], [0.0, 100.0], {"gpu": 4}, None)
    assert _weights(result, 0) == downstream_weights(v2)
    assert _weights(result, 1) == downstream_weights(v1)


def test_estimated_graphs_are_matched_per_run() -> None:
    """``estimated`` pairs with ``graphs`` run by run; a length mismatch is an error, not a silent shift."""
    v1, v2 = _train(60.0, 1, False), _train(7200.0, 4, True)
    caps, objective = {"gpu": 4}, OBJECTIVES["balanced"]
    declared = [_train(120.0, 1, False), _train(3600.0, 4, True)]
    result = predict_runs([v1, v2], [0.0, 100.0], caps, objective, estimated=declared)
    assert _weights(result, 0) == run_weights(declared[0], 0.0, caps, objective, SIMULATION_EPOCH)
    assert _weights(result, 1) == run_weights(declared[1], 100.0, caps, objective, SIMULATION_EPOCH)
    with pytest.raises(ValueError, match="one estimated graph per run"):
        predict_runs([v1, v2], [0.0, 100.0], caps, objective, estimated=declared[:1])


# -- starving: only a task that can run in the pool ------------------------------------------------

EPOCH = 0.0
NOW = 1000.0


def _task(key: str, slots: int, at: float, duration: float, order: int, since: float) -> ReadyTask:
    return ReadyTask(key, "gpu", slots, key_weight(at, EPOCH), duration, (order,), run=key, since=since)


def test_a_task_wider_than_the_pool_does_not_override_the_reservation_gate() -> None:
    """An 8-GPU task kept waiting in a pool now of 4 (a host lost, ``too_large_action = keep``, a fallback
    rung) has waited past ``overdue``: before, as 'starving' it forced a reservation the gate refuses and
    closed the pool to 0, although Airflow can never run it there."""
    gate = ReservationGate(gap=3600.0, overdue=100.0, epoch=EPOCH)
    too_wide = _task("x", 8, 0.0, 50.0, 0, since=0.0)
    wide = _task("w", 4, 1000.0, 50.0, 1, since=990.0)
    small = _task("b", 1, 1010.0, 10.0, 2, since=990.0)
    running = [RunningTask("r", "gpu", 2, NOW + 100.0)]
    without = decide_pools(NOW, {"gpu": 4}, running, [wide, small], gate=gate)["gpu"]
    assert without.reserved_for is None and without.pool_size == 4
    decision = decide_pools(NOW, {"gpu": 4}, running, [too_wide, wide, small], gate=gate)["gpu"]
    assert (decision.reserved_for, decision.pool_size) == (None, 4), decision.reason


def test_a_task_wider_than_the_pool_does_not_stop_the_backfill() -> None:
    """With every wide head reserved for (gap 0), a short task that ends before the wide one could
    start is backfilled; before, the unrunnable 'starving' task stopped every backfill behind it."""
    gate = ReservationGate(gap=0.0, overdue=100.0, epoch=EPOCH)
    too_wide = _task("x", 8, 0.0, 50.0, 0, since=0.0)
    wide = _task("w", 4, 10.0, 50.0, 1, since=990.0)
    small = _task("b", 1, 20.0, 10.0, 2, since=990.0)
    running = [RunningTask("r", "gpu", 2, NOW + 100.0)]
    decision = decide_pools(NOW, {"gpu": 4}, running, [too_wide, wide, small], gate=gate)["gpu"]
    assert decision.reserved_for == "w"
    assert decision.backfill_tasks == ("b",) and decision.pool_size == 3, decision.reason
    # the same when a caller hands decide_pool that task as the starving one
    alone = decide_pool(NOW, "gpu", 4, running, [too_wide, wide, small], gate=gate, starving=too_wide)
    assert alone.backfill_tasks == ("b",) and alone.pool_size == 3, alone.reason


# -- start windows across a daylight-saving gap -----------------------------------------------------


def test_a_daily_window_partly_in_a_dst_gap_is_open_after_the_jump() -> None:
    """Berlin jumps from 02:00 to 03:00 on 2026-03-29. Before, 02:30 was read as 03:30 CEST, so a window
    from 02:30 to 03:30 was empty that night and its task missed; 03:00-03:30 CEST lies in it."""
    window = parse_window("02:30", "03:30", "Europe/Berlin")
    anchor = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)
    start, end = window.occurrence(anchor)
    assert (start.astimezone(UTC), end.astimezone(UTC)) == (
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
    )
    assert window.state(anchor, datetime(2026, 3, 29, 1, 10, tzinfo=UTC))[0] == "open"
    assert seconds_until_open(window, anchor) == 7200.0


def test_a_daily_window_the_clocks_skip_entirely_is_the_next_days() -> None:
    """02:00-03:00 in Berlin does not exist on 2026-03-29: the window that applies is the next night's,
    never an empty one that is 'missed' the moment it opens."""
    window = parse_window("02:00", "03:00", "Europe/Berlin")
    anchor = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)
    start, end = window.occurrence(anchor)
    assert start.astimezone(UTC) == datetime(2026, 3, 30, 0, 0, tzinfo=UTC)
    assert end.astimezone(UTC) == datetime(2026, 3, 30, 1, 0, tzinfo=UTC)
    assert window.state(anchor, datetime(2026, 3, 29, 1, 0, tzinfo=UTC))[0] == "before"


# -- a pool of no slots ------------------------------------------------------------------------------


def test_a_request_for_a_pool_of_no_slots_is_not_told_to_request_zero_gpus() -> None:
    """``[gpu_dag] pools`` accepts 0 slots; before, the fix read 'request at most 0 GPUs'."""
    limits = RequestLimits(pool_slots={"gpu_h100": 0})
    (finding,) = check_gpu_request("d", "train", GpuRequest(1, gpu_type="h100"), "gpu_h100", 1, limits)
    assert "at most 0" not in finding.fix
    assert "gpu_h100" in finding.fix and "slots" in finding.fix
