"""Makespan through the real Airflow scheduler: stock vs the provider, next to the simulator's prediction.

A scaled-down training workload (durations in seconds) runs twice on one real Airflow 3.3
(SQLite + LocalExecutor, :class:`airflow_gpu_dag.testing.AirflowCluster`), GPU pool ``gpu`` of
``--capacity`` slots:

* ``stock``: Airflow as shipped: ``downstream`` weight rule, pool size fixed at capacity.
* ``provider``: ``CriticalPathPriorityStrategy`` weights and the watermark controller (static capacity,
  reservation + safe backfill) ticking every ``--interval`` seconds, in-process.

The workload: ``prep`` (1 GPU) -> ``pretrain`` (all GPUs) -> ``finetune`` (1 GPU) -> ``evaluate``
(1 GPU), next to a sweep of ``--sweep`` 1-GPU trials, each followed by a CPU ``report``. Stock
Airflow lets the sweep take every freed GPU while ``pretrain`` waits (apache/airflow#29474).

Prediction: :func:`airflow_gpu_dag.core.simulation.simulator.simulate` on the same graph, ``stock`` and
``reservation`` (``critical_path`` priority, same controller interval), once with the declared
durations and once calibrated with what the real run showed: each task's measured run time plus the
scheduler's dispatch latency (median gap between a ``sweep`` trial's end and its ``report``'s start).

Plan error: each run's GPU tasks against the plan ``airflow gpu-dag explain`` and the live view draw
(:func:`~airflow_gpu_dag.core.simulation.live.plan_run`: the run simulated alone from its start on the
pool, with the run's real priority weights, the controller's interval for the provider and Airflow's
admission alone for stock), compared by :func:`~airflow_gpu_dag.core.simulation.live.compare_run`:
the median and p90 of |actual - planned| start and end
(:func:`~airflow_gpu_dag.core.simulation.live.error_summary`), planned once with the declared
durations and once with the calibrated ones above (what is left is mostly the scheduling error). The
last line is what the watermark controller sends as ``gpu_dag.plan.*`` for the provider's run
(:class:`~airflow_gpu_dag.watermark.plan_quality.PlanErrorReporter` over REST: explain's report, planned
with the durations learned from the DAG's successful tries).

    .venv/bin/python benchmarks/real_airflow_makespan.py            # ~4 minutes
    .venv/bin/python benchmarks/real_airflow_makespan.py --sweep 6  # shorter
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from controller_thread import controller_running
from workloads import graph_from_tasks

from airflow_gpu_dag.core.simulation.live import DoneTask, LiveTask, compare_run, error_summary, plan_run
from airflow_gpu_dag.core.simulation.simulator import simulate
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient, parse_time
from airflow_gpu_dag.settings import key_epoch
from airflow_gpu_dag.testing import AirflowCluster
from airflow_gpu_dag.watermark import task_instance_fields as fields
from airflow_gpu_dag.watermark.controller import reservation_gate
from airflow_gpu_dag.watermark.durations import ControllerHistory
from airflow_gpu_dag.watermark.plan_quality import PlanErrorReporter

POOL = "gpu"


def workload(sweep: int, capacity: int) -> list[dict[str, Any]]:
    """Tasks as ``{"id", "d" (s), "gpus", "parents"}``."""
    tasks: list[dict[str, Any]] = [
        {"id": "prep", "d": 3, "gpus": 1, "parents": []},
        {"id": "pretrain", "d": 12, "gpus": capacity, "parents": ["prep"]},
        {"id": "finetune", "d": 20, "gpus": 1, "parents": ["pretrain"]},
        {"id": "evaluate", "d": 6, "gpus": 1, "parents": ["finetune"]},
    ]
    for i in range(sweep):
        tasks.append({"id": f"sweep_{i}", "d": 6 + i % 3, "gpus": 1, "parents": []})
        tasks.append({"id": f"report_{i}", "d": 1, "gpus": 0, "parents": [f"sweep_{i}"]})
    return tasks


DAG_TEMPLATE = """
import datetime
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG
from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints

TASKS = {tasks!r}

for dag_id, rule in (("bench_stock", "downstream"), ("bench_provider", CRITICAL_PATH_WEIGHT_RULE)):
    with DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False,
             max_active_tasks=64, default_args={{"weight_rule": rule, "retries": 0}}) as dag:
        ops = {{}}
        for t in TASKS:
            gpu = t["gpus"] > 0
            ops[t["id"]] = BashOperator(
                task_id=t["id"], bash_command=f"sleep {{t['d']}}",
                pool="{pool}" if gpu else "default_pool", pool_slots=max(1, t["gpus"]),
                executor_config=gpu_hints(duration=t["d"], gpus=t["gpus"] or None),
            )
        for t in TASKS:
            for p in t["parents"]:
                ops[p] >> ops[t["id"]]
    globals()[dag_id] = dag
"""


class Run:
    """One finished run: each task's (start, end), its task instances (REST) and the run's start."""

    def __init__(self, cluster: AirflowCluster, dag_id: str) -> None:
        run_id = cluster.trigger(dag_id)
        state = cluster.wait_for_run(dag_id, run_id, timeout=900)
        if state != "success":
            raise SystemExit(f"{dag_id} run {run_id} ended {state}")
        self.tis = cluster.task_instances(dag_id, run_id)
        self.times: dict[str, tuple[float, float]] = {}
        for ti in self.tis:
            start, end = parse_time(ti["start_date"]), parse_time(ti["end_date"])
            assert start is not None and end is not None
            self.times[ti["task_id"]] = (start, end)
        run_start = parse_time(cluster.get_run(dag_id, run_id).get("start_date"))
        self.origin = run_start if run_start is not None else min(s for s, _ in self.times.values())


def plan_error(
    run: Run,
    tasks: list[dict[str, Any]],
    capacity: int,
    interval: float,
    reservation: bool,
    durations: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The plan error of ``run``'s GPU tasks (:func:`error_summary`): the run planned alone from its
    start (:func:`plan_run`, as ``explain`` plans it) with ``durations`` (default: the declared ones)
    against what happened."""
    spec = {t["id"]: t for t in tasks}
    keys = {ti["task_id"]: fields.key(ti) for ti in run.tis}
    took = durations or {t["id"]: float(t["d"]) for t in tasks}
    planned = [
        LiveTask(
            keys[ti["task_id"]],
            "run",
            str(ti["pool"]),
            fields.slots(ti),
            fields.priority(ti),
            took[ti["task_id"]],
            "later",
            tuple(keys[p] for p in spec[ti["task_id"]]["parents"]),
            fields.order(ti),
        )
        for ti in run.tis
    ]
    caps = {POOL: capacity}
    gate = reservation_gate() if reservation else None
    plan = plan_run(run.origin, planned, caps, interval=interval, reservation=reservation, gate=gate)
    done = [
        DoneTask(
            t.key, t.pool, t.slots, t.priority, t.duration, *run.times[ti["task_id"]], t.upstream, t.order
        )
        for t, ti in zip(planned, run.tis, strict=True)
        if t.pool == POOL
    ]
    summary = error_summary(compare_run(run.origin, done, plan, caps))
    return json.loads(json.dumps(summary))  # a plain dict for --json


def _makespan(times: dict[str, tuple[float, float]]) -> float:
    return max(e for _, e in times.values()) - min(s for s, _ in times.values())


def _peak(times: dict[str, tuple[float, float]], tasks: list[dict[str, Any]]) -> int:
    slots = {t["id"]: t["gpus"] for t in tasks}
    events = sorted(
        (t, 1 if kind else 0, d)
        for k, (s, e) in times.items()
        if slots[k]
        for t, kind, d in ((s, True, slots[k]), (e, False, -slots[k]))
    )
    used = peak = 0
    for _, _, delta in events:
        used += delta
        peak = max(peak, used)
    return peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sweep", type=int, default=12, help="1-GPU sweep trials (default 12)")
    parser.add_argument("--capacity", type=int, default=4, help="GPU pool capacity (default 4)")
    parser.add_argument("--interval", type=float, default=2.0, help="controller interval, s (default 2)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    tasks = workload(args.sweep, args.capacity)
    graph = graph_from_tasks("bench", tasks, gpu_pool=POOL)
    caps = {POOL: args.capacity}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu-dag-bench-") as folder:
        Path(folder, "bench.py").write_text(DAG_TEMPLATE.format(tasks=tasks, pool=POOL))
        with AirflowCluster(folder, pools=caps, parallelism=max(8, args.capacity + 4)) as cluster:
            cluster.wait_for_dags(["bench_stock", "bench_provider"])
            stock_run = Run(cluster, "bench_stock")
            with controller_running(cluster, POOL, args.capacity, args.interval) as controller:
                client = AirflowRestClient(cluster.api_url, cluster.USERNAME, cluster.PASSWORD)
                try:
                    # what the controller sends as gpu_dag.plan.* (explain's report, learned durations)
                    metric = PlanErrorReporter(
                        client,
                        [POOL],
                        history=ControllerHistory(client, controller.default_duration),
                        gate=controller.gate,
                        epoch=key_epoch(),
                    )
                    metric.check()
                    provider_run = Run(cluster, "bench_provider")
                    metric.check()
                finally:
                    client.close()
    stock, provider = stock_run.times, provider_run.times
    sent = [error for dag_id, _run, error in metric.sent if dag_id == "bench_provider"]

    # calibration: measured run time per task (mean of both runs) + dispatch latency
    gaps = [stock[f"report_{i}"][0] - stock[f"sweep_{i}"][1] for i in range(args.sweep)]
    gaps += [provider[f"report_{i}"][0] - provider[f"sweep_{i}"][1] for i in range(args.sweep)]
    latency = statistics.median(gaps)
    measured = [
        {
            **t,
            "d": statistics.fmean([run[t["id"]][1] - run[t["id"]][0] for run in (stock, provider)]) + latency,
        }
        for t in tasks
    ]
    calibrated = graph_from_tasks("bench_calibrated", measured, gpu_pool=POOL)
    calibrated_d = {t["id"]: float(t["d"]) for t in measured}
    errors = {
        f"{name}_{which}": plan_error(run, tasks, args.capacity, args.interval, name == "provider", durations)
        for name, run in (("stock", stock_run), ("provider", provider_run))
        for which, durations in (("declared", None), ("calibrated", calibrated_d))
    }

    def predict(g: Any) -> tuple[float, float]:
        s = simulate(g, caps, "stock").makespan
        p = simulate(
            g, caps, "reservation", controller_interval=args.interval, priority="critical_path"
        ).makespan
        return s, p

    declared_stock, declared_provider = predict(graph)
    calib_stock, calib_provider = predict(calibrated)
    real_stock, real_provider = _makespan(stock), _makespan(provider)
    figures = {
        "sweep": args.sweep,
        "capacity": args.capacity,
        "interval_s": args.interval,
        "dispatch_latency_s": round(latency, 2),
        "real": {"stock": round(real_stock, 1), "provider": round(real_provider, 1)},
        "predicted_declared": {"stock": declared_stock, "provider": declared_provider},
        "predicted_calibrated": {"stock": round(calib_stock, 1), "provider": round(calib_provider, 1)},
        "pretrain_wait_s": {
            "stock": round(stock["pretrain"][0] - stock["prep"][1], 1),
            "provider": round(provider["pretrain"][0] - provider["prep"][1], 1),
        },
        "peak_gpu_slots": {"stock": _peak(stock, tasks), "provider": _peak(provider, tasks)},
        "plan_error_s": errors,
        "plan_error_metric_s": sent[0] if sent else None,
        "wall_s": round(time.monotonic() - started, 1),
        "timelines": {
            name: {
                k: [
                    round(s - min(v[0] for v in run.values()), 1),
                    round(e - min(v[0] for v in run.values()), 1),
                ]
                for k, (s, e) in sorted(run.items(), key=lambda item: item[1])
            }
            for name, run in (("stock", stock), ("provider", provider))
        },
    }
    print(f"workload: {len(tasks)} tasks, pool {POOL}={args.capacity}, controller every {args.interval:g}s")
    print(f"{'':24s}{'stock':>10s}{'provider':>10s}{'change':>9s}")
    for label, (s, p) in (
        ("real Airflow", (real_stock, real_provider)),
        ("simulated (declared)", (declared_stock, declared_provider)),
        ("simulated (calibrated)", (calib_stock, calib_provider)),
    ):
        print(f"{label:24s}{s:9.1f}s{p:9.1f}s{(p - s) / s:+9.1%}")
    print(
        f"pretrain waited after prep: stock {figures['pretrain_wait_s']['stock']}s, "
        f"provider {figures['pretrain_wait_s']['provider']}s; dispatch latency {latency:.1f}s; "
        f"peak GPU slots {figures['peak_gpu_slots']} (capacity {args.capacity})"
    )
    print("plan error over the GPU tasks, |actual - planned| (s): start median / p90, end median / p90")
    for label, summary in errors.items():
        start, end = summary["start_error_s"], summary["end_error_s"]
        print(
            f"  {label:20s} start {start['median']:5.1f} / {start['p90']:5.1f}   "
            f"end {end['median']:5.1f} / {end['p90']:5.1f}   ({summary['tasks']} tasks)"
        )
    if sent:
        start, end = sent[0]["start_error_s"], sent[0]["end_error_s"]
        print(
            f"  {'provider, the metric':20s} start {start['median']:5.1f} / {start['p90']:5.1f}   "
            f"end {end['median']:5.1f} / {end['p90']:5.1f}   ({sent[0]['tasks']} tasks; gpu_dag.plan.*)"
        )
    else:
        print("  the controller's plan-error check measured no run of bench_provider")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
