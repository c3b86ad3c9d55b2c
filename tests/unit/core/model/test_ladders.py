"""A fallback rung too large for its pool is what a ladder is for, not a task that waits forever.

A DAG whose first rung needs more GPUs than ``[gpu_dag] pools`` gives imports with a warning (at parse
time and in ``lint``), the simulator plans the first rung that fits, and the watermark controller
leaves the rung to its watcher: failing it would end the ladder (a rung that failed is not one that
"did not start") and so the run."""

from __future__ import annotations

import datetime
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, TaskGroup

from airflow_gpu_dag.authoring import FallbackError, Rung, fallback_ladder
from airflow_gpu_dag.core.analysis.bounds import best_lower_bound
from airflow_gpu_dag.core.analysis.gpu_requests import RequestLimits, check_gpu_request
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode
from airflow_gpu_dag.core.model.ladders import as_rung_findings, can_fall_back, fit_ladders, unfit_rungs
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.core.simulation.simulator import CapacityError, simulate
from airflow_gpu_dag.operators import GpuPythonOperator
from airflow_gpu_dag.operators.gpu_spec import GpuTaskError
from airflow_gpu_dag.watermark.too_large import TooLargeWatch
from tests.unit.watermark.conftest import (
    FailingRest,
    Source,
    controller,
    ti,
)

H = 3600.0


def _rung(index: int, rungs: int = 2, start_within: float | None = 1200.0, **more: Any) -> dict[str, Any]:
    return {"ladder": "train", "index": index, "rungs": rungs, "start_within_s": start_within, **more}


def _ladder_graph(first_gpus: int = 2, last_gpus: int = 1) -> TaskGraph:
    """prep (10 min, CPU) -> rung big (1 h, assumed) | rung small (1.5 h, contingent) -> done."""
    g = TaskGraph("ladder")
    g.add("prep", 600)
    big = {**_rung(0), "rung": "big", "role": "assumed", "expected_duration": H}
    small = {**_rung(1), "rung": "small", "role": "contingent", "expected_duration": 1.5 * H}
    g.add_task(TaskNode("train.big", H, GpuRequest(first_gpus), "gpu", first_gpus, attrs={"fallback": big}))
    g.add_task(
        TaskNode(
            "train.small",
            0.0,
            GpuRequest(last_gpus),
            "gpu",
            last_gpus,
            attrs={"fallback": small, "contingent_duration": 1.5 * H},
        )
    )
    g.add("done", 0)
    g.add_edge("prep", "train.big")
    g.add_edge("train.big", "train.small")
    g.add_edge("train.small", "done")
    return g


def _gpu_rung(rung: Rung) -> GpuPythonOperator:
    return GpuPythonOperator(
        task_id=rung.name, python_callable=lambda: None, gpus=rung.gpus, duration=rung.duration
    )


def _rung_ti(task_id: str, fallback: dict[str, Any]) -> dict[str, Any]:
    task = ti(task_id, "scheduled", slots=2)
    task["executor_config"] = str({"gpu_dag": {"duration_s": 60.0, "gpus": 2, "fallback": fallback}})
    return task


def test_can_fall_back() -> None:
    assert can_fall_back(_rung(0))
    assert not can_fall_back(_rung(1))  # the last rung: nothing to fall back to
    assert not can_fall_back(_rung(0, start_within=None))  # nothing skips it
    assert can_fall_back(_rung(0, start_within=None, watched=True))
    assert not can_fall_back(_rung(0, watched=False))  # detects "not started" itself: not in a pool
    assert not can_fall_back(None) and not can_fall_back({"ladder": "x"})


def test_a_rung_that_can_fall_back_only_warns() -> None:
    limits = RequestLimits(pool_slots={"gpu_default": 1})
    found = list(check_gpu_request("d", "train.big", GpuRequest(2), "gpu_default", 2, limits))
    assert [f.severity for f in found] == ["error"]
    (warned,) = as_rung_findings(found, _rung(0))
    assert (warned.severity, warned.code) == ("warning", "rung-never-starts")
    assert "rung 1 of 2 of fallback ladder 'train'" in warned.message and "(1200s)" in warned.message
    assert "wait forever)" not in warned.message and warned.fix.startswith("drop the rung, or request")
    assert as_rung_findings(found, _rung(1)) == found  # the last rung stays an error


def test_the_simulator_plans_the_first_rung_that_fits() -> None:
    graph = _ladder_graph()
    as_planned = fit_ladders(graph, {"gpu": 2})  # the assumed rung fits: it stays assumed
    assert as_planned.nodes["train.big"] is graph.nodes["train.big"]
    assert as_planned.nodes["train.small"].gpu is None  # skipped when big runs: it never takes slots
    assert simulate(graph, {"gpu": 2}, policy="stock").makespan == pytest.approx(600 + H)
    fitted = fit_ladders(graph, {"gpu": 1})
    big, small = fitted.nodes["train.big"], fitted.nodes["train.small"]
    assert (big.duration, big.gpu, big.attrs["fallback"]["role"]) == (1200, None, "fell back")  # type: ignore[index]
    assert (small.duration, small.gpus, small.attrs["fallback"]["role"]) == (1.5 * H, 1, "assumed")  # type: ignore[index]
    assert graph.nodes["train.big"].gpus == 2  # the input graph is not modified
    # it waits its 20 minutes (holding nothing), then the 1-GPU rung runs its 1.5 h
    result = simulate(graph, {"gpu": 1}, policy="stock")
    assert result.makespan == pytest.approx(600 + 1200 + 1.5 * H)
    (unfit,) = unfit_rungs(graph, {"gpu": 1})
    assert (unfit.task_id, unfit.slots, unfit.capacity, unfit.assumed) == ("train.big", 2, 1, "train.small")
    assert "simulated as waiting its start_within (1200s), then train.small runs" in unfit.describe()


@pytest.mark.parametrize("policy", ["critical_path", "reservation"])
def test_the_packing_plan_plans_the_first_rung_that_fits_too(policy: str) -> None:
    # The planner scores schedules of the fitted graph (simulate fits ladders) against that graph, not
    # the original one, which gives KeyError 'train.small' or "2 slots can never fit a pool of
    # capacity 1" and leaves the DAG quietly on critical-path weights.
    from airflow_gpu_dag.core.planning.planner import packing_weights_plan, planned_remaining, predict

    graph = _ladder_graph()
    plan = packing_weights_plan(graph, {"gpu": 1}, policy)
    expected = 600 + 1200 + 1.5 * H  # prep, the big rung's wait (start_within), the small rung
    assert plan.makespan == pytest.approx(expected)
    assert simulate(graph, {"gpu": 1}, policy, priority="critical_path").makespan == pytest.approx(expected)
    assert set(plan.weights) == set(graph.nodes)
    remaining = planned_remaining(graph, {"gpu": 1}, policy)
    assert remaining["prep"] == pytest.approx(expected)
    assert remaining["train.small"] == pytest.approx(1.5 * H)
    assert predict(graph, {"gpu": 1}, policy, priority="packing").makespan == pytest.approx(expected)


def test_planned_remaining_times_end_where_the_planned_schedule_ends() -> None:
    # With learned durations the plan's makespan is a score averaged over perturbed worlds; the
    # remaining times were taken from it: a 5-s task got 4.54 s, others negative ones.
    from airflow_gpu_dag.core.planning.planner import packing_weights_plan, planned_remaining

    graph = TaskGraph("hedged")
    graph.add("a", 5.0, 1, pool="gpu")
    graph.add("b", 600.0, 2, pool="gpu")
    graph.add("c", 300.0, 1, pool="gpu")
    graph.add_edge("a", "c")
    for node in graph.nodes.values():
        node.attrs["learned_error"] = 0.2
    plan = packing_weights_plan(graph, {"gpu": 2}, "reservation")
    end = max(plan.schedule[t] + graph.nodes[t].duration for t in graph.nodes)
    remaining = planned_remaining(graph, {"gpu": 2}, "reservation")
    assert remaining == {t: pytest.approx(end - start) for t, start in plan.schedule.items()}
    assert all(remaining[t] >= graph.nodes[t].duration for t in graph.nodes)


def test_the_critical_path_page_names_a_rung_it_planned_around() -> None:
    # The page's predicted schedule plans around the rung as `simulate` does; it says so too.
    from airflow_gpu_dag.core.planning.plan import build_plan
    from airflow_gpu_dag.plugins.critical_path_page.data import pool_views, predicted_schedules
    from airflow_gpu_dag.plugins.critical_path_page.page_html import render_page

    graph = _ladder_graph()
    views = pool_views(
        {"gpu": {"total": 1, "running": 0, "queued": 0, "open": 1}},
        {"gpu": "gpu-dag watermark: pool 1 of capacity 1"},
        {"gpu"},
    )
    schedules = predicted_schedules(graph, views)
    (line,) = schedules.unfit_rungs
    assert line.startswith("fallback ladder train: train.big needs 2 slots of pool 'gpu' (capacity 1)")
    assert schedules.results["stock"].makespan == pytest.approx(600 + 1200 + 1.5 * H)
    page = render_page(build_plan(graph), schedules, views, "s", "p")
    assert '<p class="unfit-rung">fallback ladder train: train.big needs 2 slots' in page
    roomy = pool_views({"gpu": {"total": 2, "running": 0, "queued": 0, "open": 2}}, {}, {"gpu"})
    assert predicted_schedules(graph, roomy).unfit_rungs == []


def test_a_rung_that_fell_back_by_plan_rung_holds_no_gpus_while_it_waits() -> None:
    """plan_rung='small': big only waits its 20 minutes (in its pool's queue, holding nothing) while
    another 2-GPU task runs; small starts when that task frees a GPU, at 1 h."""
    graph = _ladder_graph()
    big, small = graph.nodes["train.big"], graph.nodes["train.small"]
    graph.add_task(
        replace(big, duration=1200.0, attrs={"fallback": {**big.attrs["fallback"], "role": "fell back"}})
    )  # type: ignore[dict-item]
    small_fallback = {**small.attrs["fallback"], "role": "assumed"}  # type: ignore[dict-item]
    graph.add_task(replace(small, duration=1.5 * H, attrs={"fallback": small_fallback}))
    graph.add_task(TaskNode("other", H, GpuRequest(2), "gpu", 2))
    result = simulate(graph, {"gpu": 2}, policy="stock")
    assert fit_ladders(graph, {"gpu": 2}).nodes["train.big"].gpu is None
    assert result.by_id()["train.small"].start == pytest.approx(H)
    assert result.makespan == pytest.approx(2.5 * H)  # 2h50m when big held the 2 GPUs while it waited
    assert fit_ladders(_plain := TaskGraph("plain"), {"gpu": 2}) is _plain  # no ladder: the same graph


def test_a_ladder_no_rung_of_which_fits_is_still_refused() -> None:
    with pytest.raises(CapacityError, match="would wait forever"):
        simulate(_ladder_graph(first_gpus=4, last_gpus=2), {"gpu": 1}, policy="stock")
    assert unfit_rungs(_ladder_graph(4, 2), {"gpu": 1}) == []


def test_a_dag_with_a_rung_larger_than_its_pool_imports(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 1}')
    rungs = [
        Rung("two_gpus", gpus=2, start_within="20m", duration="1h"),
        Rung("one_gpu", gpus=1, duration="1h30m"),
    ]
    with caplog.at_level(logging.WARNING), DAG("ladder_parse", schedule=None):
        ladder = fallback_ladder("train", rungs, _gpu_rung)
    assert ladder.rung_tasks[0].pool_slots == 2
    assert "rung 1 of 2 of fallback ladder 'train' it never starts" in caplog.text
    # a rung nothing skips (watch=False) would wait for its pool forever: a clear error
    unwatched = [Rung("two_gpus", gpus=2, start_within="20m", watch=False), Rung("one_gpu", gpus=1)]
    with (
        pytest.raises(FallbackError, match=r"can never start .*set watch=True"),
        DAG("unwatched", schedule=None),
    ):
        fallback_ladder("train", unwatched, _gpu_rung)
    # outside a ladder (or as the last rung) the same request is still a parse-time error
    with pytest.raises(GpuTaskError, match="could never run"), DAG("plain", schedule=None):
        GpuPythonOperator(task_id="t", python_callable=lambda: None, gpus=2)
    with pytest.raises(GpuTaskError, match="could never run"), DAG("last", schedule=None):
        fallback_ladder(
            "train", [Rung("one_gpu", gpus=1, start_within="5m"), Rung("two_gpus", gpus=2)], _gpu_rung
        )


def test_lint_and_simulate_a_ladder_larger_than_the_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.cli.conftest import run_cli, run_json

    monkeypatch.setattr("airflow_gpu_dag.airflow.history.read_history", lambda *a, **k: {})
    (tmp_path / "ladder.py").write_text(
        "from airflow.sdk import DAG\n"
        "from airflow_gpu_dag.authoring import Rung, fallback_ladder\n"
        "from airflow_gpu_dag.operators import GpuPythonOperator\n"
        "def rung(r):\n"
        "    return GpuPythonOperator(\n"
        "        task_id=r.name, python_callable=print, gpus=r.gpus, duration=r.duration\n"
        "    )\n"
        "with DAG('ladder_cli', schedule=None):\n"
        "    fallback_ladder('train', [Rung('two_gpus', gpus=2, start_within='20m', duration='1h'),\n"
        "                              Rung('one_gpu', gpus=1, duration='1h30m')], rung)\n"
    )
    assert run_cli("lint", str(tmp_path), "--pool", "gpu_default=1", "--output", "plain") == 0
    out = capsys.readouterr().out
    assert "rung-never-starts" in out and "import-error" not in out
    argv = (
        "simulate",
        "ladder_cli",
        "--file",
        str(tmp_path),
        "--capacity",
        "gpu_default=1",
        "--declared-only",
    )
    code, result = run_json(capsys, *argv)
    assert code == 0 and result["results"]["stock"]["makespan"] == pytest.approx(1200 + 1.5 * H)
    assert result["unfit_rungs"] == [
        "fallback ladder train: train.two_gpus needs 2 slots of pool 'gpu_default' (capacity 1), so it never "
        "starts: simulated as waiting its start_within (1200s), then train.one_gpu runs"
    ]


def test_the_controller_leaves_a_rung_too_large_for_the_live_capacity_to_its_ladder() -> None:
    """Live capacity 1 (a GPU died): the 2-GPU first rung is flagged, never failed (failing it would
    end the ladder); a plain 2-GPU task and a last rung are failed as before."""
    rest = FailingRest()
    rest.tis = [
        _rung_ti("train.two_gpus", {**_rung(0), "watched": True}),
        _rung_ti("other.last", _rung(1)),
        ti("plain", "scheduled", slots=2),
    ]
    ctl = controller(rest, Source(1))
    ctl.too_large = TooLargeWatch(rest, intervals=2, action="fail", max_gpus_per_host=None)
    for _ in range(4):
        ctl.tick()
    assert sorted(task for _, _, task, *_ in rest.failed) == ["other.last", "plain"]
    description = rest.pools["gpu"]["description"]
    assert "d.train.two_gpus (run r) needs 2 > 1 (a fallback rung: left to its ladder)" in description
    assert rest.tis[0]["state"] == "scheduled"


def test_a_graph_without_ladders_keeps_its_bounds() -> None:
    graph = TaskGraph("plain")
    graph.add("a", 100.0, 4, pool="gpu")
    graph.add("b", 50.0, 4, pool="gpu")
    graph.add("c", 30.0, 2, pool="gpu")
    graph.add_edge("a", "c")
    assert fit_ladders(graph, {"gpu": 4}) is graph
    assert best_lower_bound(graph, {"gpu": 4}) == pytest.approx(165.0)  # (400 + 200 + 60) / 4


RUNGS = [
    Rung("big", gpus=2, start_within="20m", duration="1h"),
    Rung("small", gpus=1, start_within="20m", duration="2h"),
]


def _dag(dag_id: str = "fba", **kwargs: Any) -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1), **kwargs)


def _py(rung: Rung, **kwargs: Any) -> PythonOperator:
    return PythonOperator(task_id=rung.name, python_callable=lambda: rung.name, **kwargs)


def test_same_named_ladders_in_different_groups_are_planned_apart():
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.core.model.ladders import fit_ladders, unfit_rungs

    with _dag() as dag:
        for lang in ("en", "de"):
            with TaskGroup(lang):
                fallback_ladder("train", RUNGS, _py)
    assert dag.task_dict["de.train.big"].executor_config["gpu_dag"]["fallback"]["ladder"] == "de.train"
    graph, _ = build_task_graph(dag)
    fitted = fit_ladders(graph, {"gpu_default": 1})  # no 2-GPU rung fits: both ladders run "small"
    roles = {
        t: fitted.nodes[t].attrs["fallback"]["role"]
        for t in fitted.nodes
        if "fallback" in fitted.nodes[t].attrs
    }
    assert roles == {
        "en.train.big": "fell back",
        "en.train.small": "assumed",
        "de.train.big": "fell back",
        "de.train.small": "assumed",
    }
    assert fitted.nodes["de.train.small"].duration == 2 * 3600
    unfit = {u.task_id: u.assumed for u in unfit_rungs(graph, {"gpu_default": 1})}
    assert unfit == {"en.train.big": "en.train.small", "de.train.big": "de.train.small"}
