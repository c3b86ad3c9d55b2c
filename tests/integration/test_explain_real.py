"""``airflow gpu-dag explain`` against the real scheduler and a running watermark controller.

One boot (``dags/explain/ex_dags.py``). ``ex_train``'s 4-GPU ``wide`` turns ready while a 3-GPU task
holds the 4-GPU pool ``gpu_ex``: the controller (in-process, every ``INTERVAL`` seconds) holds the slots
for it. ``ex_small`` is then triggered; its 20-s evaluation cannot be backfilled and waits. ``explain``
is read over the real REST API every second while it waits: every answer must say it waits for the
reservation of ``wide``, and the latest one must predict its start within one controller interval of
when the scheduler really starts it. (The first answers cannot be held to that on a loaded machine: a
20-s sleep there takes 25 to 45 s from the task's start date to its end, which no estimate knows; the
test prints their errors too.) Once both runs
have finished, ``airflow gpu-dag explain -o json`` (the CLI, in a subprocess) holds the run against its
plan. A failure prints the scheduler's view: every task instance's start and end.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_gpu_dag.cli.explain_report import build_report
from airflow_gpu_dag.core.policy.objective import ReservationGate, get_objective
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient, parse_time
from airflow_gpu_dag.pool_claim.state import parse_pool_state
from airflow_gpu_dag.testing import AirflowCluster
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController
from airflow_gpu_dag.watermark.durations import ControllerHistory

pytestmark = pytest.mark.airflow_real

POOL = "gpu_ex"
CAPACITY = 4
INTERVAL = 5.0
SETTINGS = {
    "AIRFLOW__GPU_DAG__POOLS": f'{{"{POOL}": {CAPACITY}}}',
    # every wide head is reserved for (no gate): the test is about explaining a reservation
    "AIRFLOW__GPU_DAG__OBJECTIVE": "throughput",
}
AIRFLOW_DAGS = "explain"
AIRFLOW_POOLS = {POOL: CAPACITY}
AIRFLOW_ENV = SETTINGS


def _scheduler_view(cluster: AirflowCluster, runs: dict[str, str], origin: float) -> str:
    rows = []
    tis = [ti for dag, run in runs.items() for ti in cluster.task_instances(dag, run)]
    for ti in sorted(tis, key=lambda t: parse_time(t.get("start_date")) or float("inf")):
        start, end = parse_time(ti.get("start_date")), parse_time(ti.get("end_date"))
        rows.append(
            f"  {ti['dag_id']:9s} {ti['task_id']:9s} slots={ti['pool_slots']} weight={ti['priority_weight']} "
            f"scheduled={(parse_time(ti.get('scheduled_when')) or origin) - origin:6.1f} "
            f"start={(start or origin) - origin:6.1f} end={(end or origin) - origin:6.1f} {ti['state']}"
        )
    return "\n".join(rows)


def _wait(what: str, check: Any, timeout: float, view: Any) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"{what} did not happen within {timeout:.0f}s:\n{view()}")


@pytest.fixture(scope="module")
def explained(airflow_cluster: AirflowCluster) -> Iterator[dict[str, Any]]:
    cluster = airflow_cluster
    cluster.wait_for_dags(["ex_train", "ex_small"], timeout=300)
    saved = {k: os.environ.get(k) for k in SETTINGS}
    os.environ.update(SETTINGS)  # the in-process controller reads the same objective as the scheduler
    config = parse_config(
        {
            "interval": INTERVAL,
            "pools": {POOL: {"source": CAPACITY}},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    client = AirflowRestClient(cluster.api_url, cluster.USERNAME, cluster.PASSWORD)
    controller = WatermarkController(config, client, default_duration=30.0)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    runs: dict[str, str] = {}
    origin = time.time()
    view = lambda: _scheduler_view(cluster, runs, origin)  # noqa: E731
    try:
        runs["ex_train"] = cluster.trigger("ex_train")

        def reserving_for_ready_wide() -> bool:
            """The controller holds the slots for 'wide', decided once it was ready (while it was only
            about to be, with nothing else waiting, the pool stays open)."""
            pool = cluster.get_pool(POOL)
            state = parse_pool_state(pool.get("description"))
            why = state.why if state is not None else None
            return bool(
                why is not None
                and why.code == "reserving"
                and why.task is not None
                and "/wide/" in why.task
                and not why.lookahead
                and pool.get("slots") == 0
            )

        _wait("the controller reserving for a ready 'wide'", reserving_for_ready_wide, 300, view)
        runs["ex_small"] = cluster.trigger("ex_small")

        def evaluate_scheduled() -> dict[str, Any] | None:
            tis = cluster.task_instances("ex_small", runs["ex_small"])
            return next((ti for ti in tis if ti["state"] == "scheduled"), None)

        _wait("ex_small's evaluate scheduled", evaluate_scheduled, 120, view)
        history = ControllerHistory(client, 30.0)
        gate = ReservationGate.for_objective(get_objective("throughput"))
        reports: list[dict[str, Any]] = []
        took = 0.0
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            asked = time.time()
            report = build_report(client, "ex_small", runs["ex_small"], history=history, gate=gate)
            took = max(took, time.time() - asked)
            [task] = [t for t in report["tasks"] if t["task_id"] == "evaluate"]
            if task["state"] != "scheduled":
                break
            reports.append(report)
            time.sleep(1.0)
        states = {dag: cluster.wait_for_run(dag, run, timeout=400) for dag, run in runs.items()}
        final = view()
    finally:
        stop.set()
        thread.join(60)
        client.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    yield {"reports": reports, "took": took, "runs": runs, "states": states, "view": final, "origin": origin}


def test_a_task_behind_a_reservation_is_explained_and_its_start_predicted(
    explained: dict[str, Any], airflow_cluster: AirflowCluster
) -> None:
    reports, view, origin = explained["reports"], explained["view"], explained["origin"]
    print(f"\n{len(reports)} answers while it waited, the slowest in {explained['took']:.2f}s\n{view}")
    assert set(explained["states"].values()) == {"success"}, view
    assert reports, f"ex_small's evaluate never waited:\n{view}"
    tis = airflow_cluster.task_instances("ex_small", explained["runs"]["ex_small"])
    actual = parse_time(next(ti for ti in tis if ti["task_id"] == "evaluate")["start_date"])
    assert actual is not None, view
    wide = f"ex_train/{explained['runs']['ex_train']}/wide/-1"
    errors = []
    for report in reports:
        assert report["controller"][POOL]["status"] == "running", report["controller"]
        [task] = [t for t in report["tasks"] if t["task_id"] == "evaluate"]
        errors.append((report["now"] - origin, actual - task["predicted_start"], task["reason"]["code"]))
    print(
        "answered at, error of the predicted start, reason: "
        + ", ".join(f"+{a:.1f}s {e:+.1f}s {c}" for a, e, c in errors)
    )
    [task] = [t for t in reports[0]["tasks"] if t["task_id"] == "evaluate"]
    print(json.dumps(task, indent=1, default=str))
    assert task["reason"]["code"] == "waiting-for-reservation", (task["reason"], view)
    assert wide in task["reason"]["text"] and [a["task"] for a in task["ahead"]] == [wide], task
    assert task["rank"] == 2, task
    # while 'wide' waits, the evaluation waits for its reservation; once 'wide' runs, for its slots
    for report in reports:
        [task] = [t for t in report["tasks"] if t["task_id"] == "evaluate"]
        assert task["reason"]["code"] in ("waiting-for-reservation", "waiting-for-slots", "next-slot"), task
    [last] = [t for t in reports[-1]["tasks"] if t["task_id"] == "evaluate"]
    error = actual - last["predicted_start"]
    print(
        f"evaluate: last predicted start +{last['predicted_start'] - origin:.1f}s, actual "
        f"+{actual - origin:.1f}s, error {error:+.1f}s (one controller interval: {INTERVAL:g}s)"
    )
    assert abs(error) <= INTERVAL, view


def test_the_cli_holds_the_finished_run_against_its_plan(
    explained: dict[str, Any], airflow_cluster: AirflowCluster
) -> None:
    run_id = explained["runs"]["ex_small"]
    url = airflow_cluster.api_url.split("://", 1)[1]
    env = {
        **airflow_cluster.env,
        "AIRFLOW_CONN_GPU_DAG_API": f"gpu-dag-api://{airflow_cluster.USERNAME}:{airflow_cluster.PASSWORD}@{url}",
    }
    result = subprocess.run(
        [airflow_cluster._airflow_bin(), "gpu-dag", "explain", "ex_small", run_id, "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    [task] = report["tasks"]
    print(f"\n{json.dumps(task, indent=1)}\nplan_error: {report['plan_error']}")
    assert task["state"] == "success" and report["plan_error"]["tasks"] == 1
    # planned alone from the run's start, it would have started at once: it waited while the slots were
    # held for 'wide', then while 'wide' held them all
    assert task["start_error_s"] > 10 and task["causes"]["waited_for_reservation"] > 3, task
    assert task["main_cause"] in ("waited_for_reservation", "waited_for_slots"), task
    missing = subprocess.run(
        [airflow_cluster._airflow_bin(), "gpu-dag", "explain", "ex_nope"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert missing.returncode == 3 and "does not exist" in missing.stderr, missing.stderr[-2000:]
