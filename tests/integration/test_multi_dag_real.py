"""Many DAGs on one GPU pool through the real scheduler: the cross-DAG keys, the controller with the
objective's reservation gate, and the anti-starvation bound of docs/priority.md.

One boot. A pipeline whose ``wide`` task needs the whole 4-GPU pool, a stream of 1-GPU evaluation DAGs
triggered every second behind it, and, once the controller is reserving for ``wide``, a small probe
DAG. The objective is the default, ``fair``, its times scaled to these seconds-long tasks (gap 10 s, a
task reserved for once it has waited 30 s since it turned ready, 5 s per task of descendant lead; docs:
set them to a few typical training durations). Checked from the task instances the REST API returns:

* every run succeeds, the pool never holds more than 4 GPUs;
* ``wide`` is not starved by the stream: it starts within its bound
  ``max(0, key - ready) + overdue + (|A| + 1) * (D + 2 * interval)``, ``A`` the task instances with an
  earlier key still waiting when it turned ready, ``D`` the longest task;
* the probe, triggered while the reservation was pending, completes within its own bound;
* every task instance's ``scheduled_when``, the ready time the controller measures starving from, is
  set and lies between its upstream task's end and its own start.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_gpu_dag.core.policy.objective import ReservationGate, key_of_weight
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient, parse_time
from airflow_gpu_dag.testing import AirflowCluster
from airflow_gpu_dag.watermark import task_instance_fields
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController

pytestmark = pytest.mark.airflow_real

POOL = "gpu_multi"
CAPACITY = 4
INTERVAL = 2.0
GAP, OVERDUE, DESCENDANT_UNIT = 10.0, 30.0, 5.0
LONGEST = 8.0  # the longest task (a stream evaluation)
STREAM = 8
#: scheduler and executor latency on a loaded CI machine, added to every bound
SLACK = 30.0
#: a task process's start and finish on a loaded CI machine: what a slot is held beyond the sleep
TASK_OVERHEAD = 5.0
SETTINGS = {
    "AIRFLOW__GPU_DAG__POOLS": f'{{"{POOL}": {CAPACITY}}}',
    "AIRFLOW__GPU_DAG__OBJECTIVE": "fair",
    "AIRFLOW__GPU_DAG__RESERVATION_GAP": f"{GAP:g}s",
    "AIRFLOW__GPU_DAG__RESERVATION_OVERDUE": f"{OVERDUE:g}s",
    "AIRFLOW__GPU_DAG__DESCENDANT_UNIT": f"{DESCENDANT_UNIT:g}s",
}
AIRFLOW_DAGS = "multi_dag"
AIRFLOW_POOLS = {POOL: CAPACITY}
AIRFLOW_ENV = SETTINGS


RESERVING = f"reserving {CAPACITY} slots for md_pipeline/"


class _RecordingClient(AirflowRestClient):
    """The controller's REST client, keeping every pool description it writes (a thread appends, the
    fixture reads: list appends are atomic)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.descriptions: list[str] = []

    def set_pool(
        self, name: str, slots: int, description: str, include_deferred: bool = False
    ) -> dict[str, Any]:
        written = super().set_pool(name, slots, description, include_deferred)
        if name == POOL:
            self.descriptions.append(description)
        return written


def _span(ti: dict[str, Any]) -> tuple[float, float]:
    start, end = parse_time(ti.get("start_date")), parse_time(ti.get("end_date"))
    assert start is not None and end is not None, f"{ti['dag_id']}.{ti['task_id']} did not run: {ti['state']}"
    return start, end


@pytest.fixture(scope="module")
def mix(airflow_cluster: AirflowCluster) -> Iterator[dict[str, Any]]:
    cluster = airflow_cluster
    dag_ids = ["md_pipeline", "md_probe", *(f"md_stream_{k}" for k in range(STREAM))]
    cluster.wait_for_dags(dag_ids, timeout=300)
    saved = {k: os.environ.get(k) for k in SETTINGS}
    os.environ.update(SETTINGS)  # the in-process controller reads the same gate as the scheduler's keys
    config = parse_config(
        {
            "interval": INTERVAL,
            "pools": {POOL: {"source": CAPACITY}},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    client = _RecordingClient(cluster.api_url, cluster.USERNAME, cluster.PASSWORD)
    controller = WatermarkController(config, client, default_duration=5.0)
    assert controller.gate is not None and controller.gate.gap == GAP and not controller.gate.past_key_holds
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    runs: dict[str, str] = {}
    triggered: dict[str, float] = {}
    descriptions = client.descriptions  # every description the controller wrote, none missed by sampling
    try:
        triggered["md_pipeline"] = time.time()
        runs["md_pipeline"] = cluster.trigger("md_pipeline")
        for k in range(STREAM):
            time.sleep(1.0)
            triggered[f"md_stream_{k}"] = time.time()
            runs[f"md_stream_{k}"] = cluster.trigger(f"md_stream_{k}")
        # The controller reserves for `wide` (pending or ready). On a loaded CI machine the runs can sit
        # queued for minutes before `prep` starts: wait until the reservation is written or `wide` has
        # started (then the reservation was missed and the test below says so), not a fixed time.
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not any(RESERVING in d for d in descriptions):
            pipeline = cluster.task_instances("md_pipeline", runs["md_pipeline"])
            wide = next((ti for ti in pipeline if ti["task_id"] == "wide"), None)
            if wide is not None and wide.get("start_date"):
                break
            time.sleep(0.5)
        triggered["md_probe"] = time.time()
        runs["md_probe"] = cluster.trigger("md_probe")
        states = {dag: cluster.wait_for_run(dag, run, timeout=400) for dag, run in runs.items()}
        tis = [ti for dag, run in runs.items() for ti in cluster.task_instances(dag, run)]
    finally:
        stop.set()
        thread.join(30)
        client.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    yield {"states": states, "tis": tis, "triggered": triggered, "descriptions": descriptions}


def _scheduler_view(tis: list[dict[str, Any]], origin: float) -> str:
    rows = []
    for ti in sorted(tis, key=lambda t: parse_time(t.get("start_date")) or 0.0):
        start, end = parse_time(ti.get("start_date")), parse_time(ti.get("end_date"))
        where = f"{ti['dag_id']:14s} {ti['task_id']:9s} slots={ti['pool_slots']}"
        rows.append(
            f"  {where} weight={ti['priority_weight']} start={(start or origin) - origin:6.1f} "
            f"end={(end or origin) - origin:6.1f} {ti['state']}"
        )
    return "\n".join(rows)


def _bound(tis: list[dict[str, Any]], task: dict[str, Any], ready: float) -> float:
    """``max(0, key - ready) + overdue + (|A| + 1) * (D + 2 * interval)``, ``A`` the task instances with
    an earlier key (higher weight) not started yet at ``ready``."""
    ahead = [
        ti
        for ti in tis
        if ti is not task and ti["priority_weight"] > task["priority_weight"] and _span(ti)[0] > ready
    ]
    key = key_of_weight(task["priority_weight"])
    assert key is not None, task
    gate = ReservationGate(GAP, OVERDUE, past_key_holds=False)  # fair's gate: overdue from the ready time
    return gate.wait_bound(key, ready, len(ahead), LONGEST + TASK_OVERHEAD, INTERVAL) + SLACK


def test_every_run_succeeds_and_the_pool_is_never_oversubscribed(mix: dict[str, Any]) -> None:
    origin = mix["triggered"]["md_pipeline"]
    assert set(mix["states"].values()) == {"success"}, _scheduler_view(mix["tis"], origin)
    events = []
    for ti in mix["tis"]:
        start, end = _span(ti)
        events += [(start, 1, ti["pool_slots"]), (end, 0, -ti["pool_slots"])]
    used = peak = 0
    for _moment, _kind, delta in sorted(events):
        used += delta
        peak = max(peak, used)
    assert peak <= CAPACITY, _scheduler_view(mix["tis"], origin)


def test_weights_are_keys_and_the_stream_ages(mix: dict[str, Any]) -> None:
    """Every weight is a cross-DAG key; later evaluations of the stream have later keys."""
    weights = {(ti["dag_id"], ti["task_id"]): ti["priority_weight"] for ti in mix["tis"]}
    assert all(key_of_weight(w) is not None for w in weights.values()), weights
    stream = [weights[(f"md_stream_{k}", "evaluate")] for k in range(STREAM)]
    assert stream == sorted(stream, reverse=True), stream


def test_the_wide_task_is_not_starved_by_the_stream(mix: dict[str, Any]) -> None:
    tis = mix["tis"]
    by = {(ti["dag_id"], ti["task_id"]): ti for ti in tis}
    origin = mix["triggered"]["md_pipeline"]
    ready = _span(by[("md_pipeline", "prep")])[1]
    waited = _span(by[("md_pipeline", "wide")])[0] - ready
    bound = _bound(tis, by[("md_pipeline", "wide")], ready)
    print(f"\nwide waited {waited:.1f}s after prep ended; bound {bound:.1f}s")
    print(_scheduler_view(tis, origin))
    assert waited <= bound, _scheduler_view(tis, origin)
    assert any(RESERVING in d for d in mix["descriptions"]), mix["descriptions"][-3:]


def test_a_small_dag_triggered_while_the_reservation_is_pending_completes_within_the_bound(
    mix: dict[str, Any],
) -> None:
    tis = mix["tis"]
    probe = next(ti for ti in tis if ti["dag_id"] == "md_probe")
    at = mix["triggered"]["md_probe"]
    completion = _span(probe)[1] - at
    bound = _bound(tis, probe, at) + 2.0  # + its own 2 s
    origin = mix["triggered"]["md_pipeline"]
    print(f"\nprobe completed {completion:.1f}s after its trigger; bound {bound:.1f}s")
    assert completion <= bound, _scheduler_view(tis, origin)


def test_scheduled_when_is_the_ready_time_the_controller_reads(mix: dict[str, Any]) -> None:
    """The controller measures starving from ``scheduled_when`` (Airflow 3's ``scheduled_dttm``): the
    REST API returns it for every task instance, after its upstream task ended and before it started."""
    tis = mix["tis"]
    by = {(ti["dag_id"], ti["task_id"]): ti for ti in tis}
    origin = mix["triggered"]["md_pipeline"]
    for ti in tis:
        scheduled = task_instance_fields.scheduled_time(ti)
        assert scheduled is not None, f"{ti['dag_id']}.{ti['task_id']}: {ti.get('scheduled_when')!r}"
        assert scheduled <= _span(ti)[0] + 0.5, _scheduler_view(tis, origin)
    wide = task_instance_fields.scheduled_time(by[("md_pipeline", "wide")])
    assert wide is not None and wide >= _span(by[("md_pipeline", "prep")])[1] - 0.5
