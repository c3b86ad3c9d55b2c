"""Tests of ``airflow_gpu_dag.core.simulation.cross_dag``: many DAG runs on shared pools (runs of one
DAG under two versions, a starving task too wide for its pool, start windows in a daylight-saving gap,
a request for a pool of no slots)."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.core.analysis.weight_rules import downstream_weights
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.policy.objective import OBJECTIVES, run_weights
from airflow_gpu_dag.core.simulation.cross_dag import SIMULATION_EPOCH, predict_runs
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
