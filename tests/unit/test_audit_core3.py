"""Audit of the planning core (third pass): defects found on edge cases, each reproduced here first.

1. A fallback rung the plan has fall back (``plan_rung``) only waits its ``start_within``, holding no
   GPU, yet ``objective.slot_seconds`` counted it as GPU work: a run's ``W`` (and so its due time and
   every cross-DAG key) grew by the rung's GPUs times its wait.
2. The makespan lower bounds of ``core.analysis.bounds`` counted the same rung as holding its slots, and so
   could lie above a makespan the simulator achieves.
3. ``planner.planned_remaining`` of a packing DAG none of whose tasks holds slots of a pool in the
   capacity planned on unlimited pools: every task's "remaining" became the makespan minus its
   earliest start instead of the critical path its docstring (and docs/priority.md) promises.
4. ``EstimateSettings`` accepted an ``outlier_mads`` of NaN, 0 or less, which silently turns (nearly)
   every past try into an outlier, so no task ever learned a duration.
"""

from __future__ import annotations

import pytest

from airflow_gpu_dag.core.analysis.bounds import (
    best_lower_bound,
    dependency_lower_bound,
    lower_bound,
    overlap_bound,
    release_profile_bound,
    rounds_bound,
)
from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.analysis.estimates import EstimateSettings, RunSample, estimate_duration
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.ladders import fit_ladders
from airflow_gpu_dag.core.planning.planner import planned_remaining, predict
from airflow_gpu_dag.core.policy.objective import run_shape, slot_seconds

H = 3600.0


def _ladder(wait: float, small: float, others: int = 0) -> TaskGraph:
    """Rung ``eight`` (8 GPUs) fell back after waiting ``wait`` s; rung ``one`` (1 GPU, ``small`` s) is
    the one the plan assumes (``plan_rung``); ``others`` independent 8-GPU tasks of 2 h next to them."""
    graph = TaskGraph("ladder")
    rung = {"ladder": "train", "rungs": 2, "start_within_s": wait}
    eight = {**rung, "rung": "eight", "index": 0, "role": "fell back", "expected_duration": H}
    one = {**rung, "rung": "one", "index": 1, "role": "assumed", "expected_duration": small}
    graph.add("train.eight", wait, 8, pool="gpu", attrs={"fallback": eight})
    graph.add("train.one", small, 1, pool="gpu", attrs={"fallback": one})
    graph.add_edge("train.eight", "train.one")
    for i in range(others):
        graph.add(f"other{i}", 2 * H, 8, pool="gpu")
    return graph


# -- 1. a rung that fell back adds no GPU work to its run ---------------------------------------------------
def test_a_rung_the_plan_falls_back_from_adds_no_gpu_work() -> None:
    graph = _ladder(wait=2 * H, small=3 * H)
    assert slot_seconds(graph) == {"gpu": 3 * H}  # before: 8 x 2 h more for the rung that only waited
    assert run_shape(graph, {"gpu": 8}).work == pytest.approx(3 * H / 8)  # before: 8550 s, not 1350 s
    # the same W as the graph the simulator runs (where the rung holds no GPU)
    assert run_shape(fit_ladders(graph, {"gpu": 8}), {"gpu": 8}).work == pytest.approx(3 * H / 8)


def test_a_ladder_dag_with_plan_rung_is_weighed_by_the_gpu_work_it_does() -> None:
    from airflow.sdk import DAG

    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.authoring import Rung, fallback_ladder
    from airflow_gpu_dag.operators import GpuPythonOperator

    def rung_task(rung: Rung) -> GpuPythonOperator:
        return GpuPythonOperator(
            task_id=rung.name, python_callable=lambda: None, gpus=rung.gpus or 1, duration=rung.duration
        )

    rungs = [Rung("eight", gpus=8, start_within="2h", duration="1h"), Rung("one", gpus=1, duration="3h")]
    with DAG("ladder_work", schedule=None) as dag:
        fallback_ladder("train", rungs, rung_task, plan_rung="one")
    graph, _findings = build_task_graph(dag)
    assert graph.nodes["train.eight"].attrs["fallback"]["role"] == "fell back"  # type: ignore[index]
    assert run_shape(graph, {"gpu_default": 8}).work == pytest.approx(3 * H / 8)


# -- 2. the lower bounds of a DAG with a fallback ladder --------------------------------------------------
def test_the_bounds_of_a_ladder_hold_for_the_schedule_the_simulator_makes() -> None:
    """Three 8-GPU tasks of 2 h run one after another on 8 GPUs; the rung that fell back waits 2 h
    holding nothing, the 10-minute rung after it squeezes in: 6h10m. Before, every bound counted the
    8 GPUs x 2 h of the wait: 8h01m, a bound above an achieved makespan."""
    graph = _ladder(wait=2 * H, small=600.0, others=3)
    caps = {"gpu": 8}
    made = min(predict(graph, caps, policy).makespan for policy in ("stock", "critical_path", "reservation"))
    assert made == pytest.approx(6 * H + 600)
    for bound in (
        lower_bound,
        dependency_lower_bound,
        release_profile_bound,
        overlap_bound,
        rounds_bound,
        best_lower_bound,
    ):
        assert bound(graph, caps) <= made + 1e-6 * made, bound.__name__
    assert best_lower_bound(graph, caps) == pytest.approx(6 * H + 75)  # (3 x 8 x 2 h + 600) / 8


def test_a_graph_without_ladders_keeps_its_bounds() -> None:
    graph = TaskGraph("plain")
    graph.add("a", 100.0, 4, pool="gpu")
    graph.add("b", 50.0, 4, pool="gpu")
    graph.add("c", 30.0, 2, pool="gpu")
    graph.add_edge("a", "c")
    assert fit_ladders(graph, {"gpu": 4}) is graph
    assert best_lower_bound(graph, {"gpu": 4}) == pytest.approx(165.0)  # (400 + 200 + 60) / 4


# -- 3. planned remaining times of a DAG with nothing to plan against ----------------------------------------
def test_planned_remaining_without_a_capacity_pool_is_the_critical_path() -> None:
    """The DAG's GPUs are in pool ``gpu_h100``; ``[gpu_dag] pools`` sizes only ``gpu_a100``. Before, the
    plan on unlimited pools started both chains at 0, so the 1-minute task got the remaining time of
    the 1-hour chain (60 min) and the same key as its head."""
    graph = TaskGraph("h100_only")
    graph.add("long", H, 4, pool="gpu_h100")
    graph.add("after", H, 4, pool="gpu_h100")
    graph.add("short", 60.0, 1, pool="gpu_h100")
    graph.add_edge("long", "after")
    remaining = planned_remaining(graph, {"gpu_a100": 8})
    assert remaining == {t: timing.remaining for t, timing in analyze(graph).timings.items()}
    assert remaining["short"] == pytest.approx(60.0)  # before: 7200
    assert planned_remaining(TaskGraph("empty"), {"gpu_a100": 8}) == {}


def test_planned_remaining_still_plans_a_dag_in_a_capacity_pool() -> None:
    graph = TaskGraph("h100")
    graph.add("long", H, 4, pool="gpu_h100")
    graph.add("short", 60.0, 1, pool="gpu_h100")
    remaining = planned_remaining(graph, {"gpu_h100": 4})
    assert remaining == {"long": pytest.approx(H + 60.0), "short": pytest.approx(60.0)}


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
