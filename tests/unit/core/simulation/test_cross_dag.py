"""Tests of ``airflow_gpu_dag.core.simulation.cross_dag``: many DAG runs on shared pools (runs of one
DAG under two versions, a starving task too wide for its pool, start windows in a daylight-saving gap,
a request for a pool of no slots)."""

from __future__ import annotations

import math
import signal
from typing import Any

import pytest

from airflow_gpu_dag.core.analysis.weight_rules import downstream_weights
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.policy.objective import OBJECTIVES, ReservationGate, run_weights
from airflow_gpu_dag.core.simulation import cross_dag
from airflow_gpu_dag.core.simulation.cross_dag import (
    SIMULATION_EPOCH,
    believed_durations,
    cross_dag_priority,
    predict_runs,
)
from airflow_gpu_dag.core.simulation.simulator import SimulationResult


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


def test_cross_dag_keys_of_two_runs_of_one_dag_follow_each_runs_version() -> None:
    """Each run's keys come from the graph of the DAG version it was created under: the v1 run's due time
    is made of v1's minute of work, not of the v2 run's hours."""
    v1, v2 = _train(60.0, 1, False), _train(7200.0, 4, True)
    caps, objective = {"gpu": 4}, OBJECTIVES["balanced"]
    result = predict_runs([v1, v2], [0.0, 100.0], caps, objective)
    assert _weights(result, 0) == run_weights(v1, 0.0, caps, objective, SIMULATION_EPOCH)
    assert _weights(result, 1) == run_weights(v2, 100.0, caps, objective, SIMULATION_EPOCH)


def test_stock_weights_of_two_runs_of_one_dag_follow_each_runs_version() -> None:
    """Stock Airflow's ``downstream`` weights of each run come from its own version's graph (v2's ``fit``
    has two tasks downstream of it, v1's one)."""
    v1, v2 = _train(60.0, 1, False), _train(7200.0, 4, True)
    result = predict_runs([v2, v1], [0.0, 100.0], {"gpu": 4}, None)
    assert _weights(result, 0) == downstream_weights(v2)
    assert _weights(result, 1) == downstream_weights(v1)


def test_believed_durations_are_keyed_as_the_simulator_names_the_tasks() -> None:
    one = _train(60.0, 1, False)
    assert believed_durations([one]) == {"prep": 60.0, "fit": 60.0}
    assert believed_durations([]) == {}
    v1, v2 = _train(60.0, 1, False), _train(7200.0, 4, True)
    believed = believed_durations([v1, v2])
    assert believed == {
        "0:train/prep": 60.0,
        "0:train/fit": 60.0,
        "1:train/prep": 60.0,
        "1:train/fit": 7200.0,
        "1:train/eval": 60.0,
    }
    caps = {"gpu": 4}
    assert {t.task_id for t in predict_runs([one], [0.0], caps, None).schedule} == set(
        believed_durations([one])
    )
    assert {t.task_id for t in predict_runs([v1, v2], [0.0, 5.0], caps, None).schedule} == set(believed)


def test_a_trigger_count_that_does_not_match_the_runs_is_refused_with_the_counts() -> None:
    graph = _train(60.0, 1, False)
    with pytest.raises(ValueError, match=r"2 graphs, 1 trigger times and 2 estimated graphs: give one trig"):
        predict_runs([graph, graph], [0.0], {"gpu": 4}, OBJECTIVES["fair"])


def test_no_runs_predict_an_empty_schedule() -> None:
    for objective in (None, OBJECTIVES["fair"]):
        result = predict_runs([], [], {"gpu": 4}, objective)
        assert (result.makespan, list(result.schedule)) == (0.0, [])


def test_runs_last_their_own_durations_while_weights_follow_the_estimates() -> None:
    """``estimated`` is what the weights and the controller believe, not how long the tasks run."""
    actual, declared = _train(300.0, 2, True), _train(30.0, 2, True)
    caps, objective = {"gpu": 4}, OBJECTIVES["throughput"]
    for chosen in (None, objective):
        result = predict_runs([actual], [0.0], caps, chosen, estimated=[declared])
        assert {t.task_id: t.end - t.start for t in result.schedule} == {
            "prep": 60.0,
            "fit": 300.0,
            "eval": 60.0,
        }
    ours = predict_runs([actual], [0.0], caps, objective, estimated=[declared])
    assert {t.task_id: t.priority for t in ours.schedule} == run_weights(
        declared, 0.0, caps, objective, SIMULATION_EPOCH
    )


def test_whole_number_trigger_times_find_each_runs_estimated_graph() -> None:
    """Runs are matched to their estimated graphs by DAG id and trigger time: ``100`` and ``100.0``
    are one time."""
    v1, v2 = _train(60.0, 1, False), _train(7200.0, 4, True)
    caps, objective = {"gpu": 4}, OBJECTIVES["balanced"]
    declared = [_train(120.0, 1, False), _train(3600.0, 4, True)]
    result = predict_runs([v1, v2], [0, 100], caps, objective, estimated=declared)
    assert _weights(result, 1) == run_weights(declared[1], 100.0, caps, objective, SIMULATION_EPOCH)


def _captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Replaces the simulator inside ``cross_dag``: the arguments it is called with."""
    calls: dict[str, Any] = {}

    def fake(graphs: Any, capacity: Any, policy: str, interval: float = 0.0, **kwargs: Any) -> str:
        calls.update(kwargs, graphs=graphs, capacity=capacity, policy=policy, interval=interval)
        return "result"

    monkeypatch.setattr(cross_dag, "simulate", fake)
    return calls


def test_stock_prediction_simulates_stock_airflow_without_a_controller_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _captured(monkeypatch)
    graph = _train(60.0, 1, False)
    assert predict_runs([graph], [0.0], {"gpu": 4}, None) == "result"
    assert calls["policy"] == "stock" and "gate" not in calls
    assert calls["run_priority"](graph, 0.0) == downstream_weights(graph)
    assert calls["estimates"] == {"prep": 60.0, "fit": 60.0}


@pytest.mark.parametrize("gate", [True, False, None, "explicit"])
def test_the_reservation_gate_is_the_objectives_an_explicit_one_or_none(
    monkeypatch: pytest.MonkeyPatch, gate: Any
) -> None:
    calls = _captured(monkeypatch)
    objective = OBJECTIVES["balanced"]
    explicit = ReservationGate(123.0, 456.0, SIMULATION_EPOCH)
    given = explicit if gate == "explicit" else gate
    predict_runs([_train(60.0, 1, False)], [0.0], {"gpu": 4}, objective, interval=30.0, gate=given)
    assert (calls["policy"], calls["interval"]) == ("reservation", 30.0)
    expected = {
        True: ReservationGate.for_objective(objective, SIMULATION_EPOCH),
        False: None,
        None: None,
        "explicit": explicit,
    }[gate]
    assert calls["gate"] == expected


def test_cross_dag_priority_weighs_a_dag_by_its_estimated_graph_or_else_its_own() -> None:
    caps, objective = {"gpu": 4}, OBJECTIVES["fair"]
    run, declared, other = _train(60.0, 1, False), _train(3600.0, 1, False), TaskGraph("other")
    other.add("solo", 600.0, 2, pool="gpu")
    weights = cross_dag_priority({"train": declared}, caps, objective)
    assert weights(run, 50.0) == run_weights(declared, 50.0, caps, objective, SIMULATION_EPOCH)
    assert weights(other, 50.0) == run_weights(other, 50.0, caps, objective, SIMULATION_EPOCH)
    assert weights.__name__ == "cross-DAG fair"


def test_cross_dag_priority_computes_each_believed_graphs_shape_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per run only the trigger changes: a run triggered later is that much less urgent."""
    shapes: list[TaskGraph] = []
    real = cross_dag.run_shape

    def counting(graph: TaskGraph, *args: Any) -> Any:
        shapes.append(graph)
        return real(graph, *args)

    monkeypatch.setattr(cross_dag, "run_shape", counting)
    graph = _train(600.0, 2, True)
    weights = cross_dag_priority(lambda g, t: graph, {"gpu": 4}, OBJECTIVES["throughput"])
    first, later = weights(graph, 0.0), weights(graph, 900.0)
    weights(_train(1.0, 1, False), 0.0)  # another run of the same believed graph
    assert shapes == [graph]
    assert {t: first[t] - later[t] for t in first} == dict.fromkeys(first, 900)


def test_cross_dag_priority_takes_a_plans_remaining_times_per_dag() -> None:
    caps, objective = {"gpu": 4}, OBJECTIVES["throughput"]
    graph = _train(600.0, 2, False)
    plan = {"prep": 5000.0, "fit": 4000.0}
    weights = cross_dag_priority({}, caps, objective, remaining={"train": plan})
    assert weights(graph, 0.0) == run_weights(graph, 0.0, caps, objective, SIMULATION_EPOCH, plan)
    assert weights(graph, 0.0) != run_weights(graph, 0.0, caps, objective, SIMULATION_EPOCH)


def test_a_plan_with_a_nan_remaining_time_is_refused_not_hung() -> None:
    """``objective.descendant_lead`` groups equal remaining times with ``==``; NaN equals nothing, so the
    loop never advances. A plan is read back from the store; a NaN in it must be an error naming the DAG,
    not a scheduler that spins (guarded by an alarm: the hang, not a speed figure)."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("predict_runs did not return in 3 s")

    graph = _train(600.0, 2, True)
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(3)
    try:
        with pytest.raises(ValueError, match="train"):
            predict_runs(
                [graph],
                [0.0],
                {"gpu": 4},
                OBJECTIVES["fair"],
                remaining={"train": {"prep": math.nan, "fit": 600.0, "eval": 60.0}},
            )
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
