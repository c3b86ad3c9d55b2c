"""apache/airflow#29474 with the real scheduler: starved without the controller, served with it.

One boot; two runs of the same DAG (see ``dags/watermark/wm_starvation.py``), at the same time, each
in its own 4-slot pool: ``wm_starvation_stock`` with stock Airflow (pool ``gpu_stock``, nothing manages
it) and ``wm_starvation`` with the watermark controller running in-process every ``INTERVAL`` seconds
(pool ``gpu``, static capacity 4, reservation on; it manages that pool only). Everything is read back
from the task instances' start/end dates.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_gpu_dag.hooks.rest_client import AirflowRestClient, parse_time
from airflow_gpu_dag.testing import AirflowCluster
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController

pytestmark = pytest.mark.airflow_real

AIRFLOW_DAGS = "watermark"
AIRFLOW_POOLS = {"gpu": 4, "gpu_stock": 4}
AIRFLOW_ENV = {"AIRFLOW__CORE__PARALLELISM": "12"}  # both runs' tasks at once, and their prep
CAPACITY = 4
INTERVAL = 2.0
DAG_ID = "wm_starvation"  # in pool gpu, with the controller
STOCK_DAG_ID = "wm_starvation_stock"  # in pool gpu_stock, stock Airflow


def _times(tis: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    out = {}
    for ti in tis:
        start, end = parse_time(ti.get("start_date")), parse_time(ti.get("end_date"))
        assert start is not None and end is not None, f"{ti['task_id']} did not run: {ti.get('state')}"
        out[ti["task_id"]] = (start, end)
    return out


def _peak_gpu_slots(tis: list[dict[str, Any]], pool: str) -> int:
    """Largest sum of pool_slots of ``pool``'s tasks running at the same instant."""
    events = []
    for ti in tis:
        if ti["pool"] != pool:
            continue
        start, end = parse_time(ti["start_date"]), parse_time(ti["end_date"])
        assert start is not None and end is not None
        events += [(start, 1, ti["pool_slots"]), (end, 0, -ti["pool_slots"])]  # ends sort before starts
    peak = used = 0
    for _, _, delta in sorted(events):
        used += delta
        peak = max(peak, used)
    return peak


def _finish(cluster: AirflowCluster, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    assert cluster.wait_for_run(dag_id, run_id, timeout=400) == "success"
    return cluster.task_instances(dag_id, run_id)


@pytest.fixture(scope="module")
def runs(airflow_cluster: AirflowCluster) -> Iterator[dict[str, Any]]:
    """Both runs triggered together, the controller (managing pool ``gpu``) running until the module
    ends; yields the cluster, the run ids and the controller's decisions (appended at every tick)."""
    cluster = airflow_cluster
    cluster.wait_for_dags([DAG_ID, STOCK_DAG_ID])
    cluster.set_pool("gpu", CAPACITY)
    cluster.set_pool("gpu_stock", CAPACITY)
    config = parse_config(
        {
            "interval": INTERVAL,
            "pools": {"gpu": {"source": CAPACITY}},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    client = AirflowRestClient(cluster.api_url, cluster.USERNAME, cluster.PASSWORD)
    controller = WatermarkController(config, client, default_duration=5.0)
    decisions: list[Any] = []
    tick = controller.tick

    def recording_tick() -> list[Any]:
        outcomes = tick()
        decisions.extend(o.decision for o in outcomes if o.decision is not None)
        return outcomes

    controller.tick = recording_tick  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        run_ids = {dag_id: cluster.trigger(dag_id) for dag_id in (STOCK_DAG_ID, DAG_ID)}
        yield {"cluster": cluster, "run_ids": run_ids, "decisions": decisions}
    finally:
        stop.set()
        thread.join(30)
        client.close()


def test_stock_airflow_starves_the_wide_task(runs: dict[str, Any]) -> None:
    cluster = runs["cluster"]
    tis = _finish(cluster, STOCK_DAG_ID, runs["run_ids"][STOCK_DAG_ID])
    times = _times(tis)
    ready = times["prep"][1]
    for task_id, (start, end) in sorted(times.items(), key=lambda item: item[1]):
        print(f"  {task_id:12s} {start - ready:7.1f} {end - ready:7.1f}")
    wide_start = times["wide"][0]
    overtaking = sorted(t for t, (s, _) in times.items() if t.startswith("small") and ready < s < wide_start)
    print(f"\nstock: wide waited {wide_start - ready:.1f}s after becoming ready; overtaken by {overtaking}")
    # lower-priority 1-slot tasks kept taking the freed slots while the priority-100 task waited
    assert len(overtaking) >= 3, overtaking
    assert _peak_gpu_slots(tis, "gpu_stock") <= CAPACITY
    # nothing managed this pool: it stayed at its capacity, as stock Airflow leaves it
    pool = cluster.get_pool("gpu_stock")
    assert pool["slots"] == CAPACITY and "gpu-dag" not in (pool.get("description") or "")


def test_controller_reserves_slots_for_the_wide_task(runs: dict[str, Any]) -> None:
    cluster, decisions = runs["cluster"], runs["decisions"]
    tis = _finish(cluster, DAG_ID, runs["run_ids"][DAG_ID])
    times = _times(tis)
    wide_start = times["wide"][0]
    origin = times["prep"][1]
    for task_id, (start, end) in sorted(times.items(), key=lambda item: item[1]):
        print(f"  {task_id:12s} {start - origin:7.1f} {end - origin:7.1f}")
    smalls = {t: se for t, se in times.items() if t.startswith("small")}
    # the slots the wide task needed drained when the last small task running before it ended
    drained = max((end for start, end in smalls.values() if start < wide_start), default=origin)
    started_after = sorted(t for t, (s, _) in smalls.items() if s >= wide_start)
    sneaked_in = sorted(t for t, (s, _) in smalls.items() if drained < s < wide_start)
    print(
        f"\ncontroller: wide ready at +0, slots drained at +{drained - times['prep'][1]:.1f}s, "
        f"wide started {wide_start - drained:.1f}s after the drain "
        f"(interval {INTERVAL}s + scheduler latency); "
        f"{len(started_after)} small tasks ran after it"
    )
    # lookahead (on by default): while prep ran, the controller already held slots for "wide", read
    # from the real REST API (the DAG's upstream lists and the run's task instances)
    ahead = [d for d in decisions if d.lookahead and d.reserved_for and "/wide/" in d.reserved_for]
    print(f"lookahead decisions for wide: {len(ahead)}; e.g. {ahead[0].reason if ahead else None}")
    assert ahead, [d.reason for d in decisions]
    # the wide task did not wait for the stream: the rest of the stream ran after it
    assert len(started_after) >= 3, started_after
    # nothing took the drained slots before the wide task got them
    assert not sneaked_in, sneaked_in
    # and the pool never held more than the watermark
    assert _peak_gpu_slots(tis, "gpu") <= CAPACITY
    pool = cluster.get_pool("gpu")
    assert pool["slots"] == CAPACITY and "gpu-dag watermark" in (pool.get("description") or "")
