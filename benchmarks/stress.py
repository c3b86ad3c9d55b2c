"""Stress: many concurrent DAG runs of GPU tasks through the real scheduler, PostgreSQL metadata DB.

What it does (the same code backs ``tests/integration/test_stress_real.py``):

1. starts a throwaway PostgreSQL (``scripts/postgres.sh``; ``--sqlite`` skips it);
2. boots Airflow (api-server, scheduler, dag-processor, LocalExecutor) on
   ``tests/integration/dags/stress/`` with the timing plugin of ``tests/integration/plugins/stress/``
   and one GPU pool ``stress_gpu``;
3. triggers ``--runs`` runs of ``stress_gpu`` at once (``--trigger-threads`` REST clients; each run
   is ``train`` (2 GPU slots) -> ``evaluate`` (1 GPU slot), tasks sleep ``--sleep`` seconds), and
   waits for all of them;
4. reports: run states, makespan, the pool's peak usage computed from task start/end times and as
   sampled over REST during the run, the cyclic DAG's import error, and the time the scheduler and
   api-server spent in the critical-path priority rule (every ``get_weight`` call is timed).

    .venv/bin/python benchmarks/stress.py [--runs 100] [--pool-slots 4] [--parallelism 8] [--sleep 1]
                                          [--sqlite] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import requests

from airflow_gpu_dag.testing import AirflowCluster

ROOT = Path(__file__).resolve().parents[1]
DAGS_FOLDER = ROOT / "tests" / "integration" / "dags" / "stress"
PLUGINS_FOLDER = ROOT / "tests" / "integration" / "plugins" / "stress"
POSTGRES_SCRIPT = ROOT / "scripts" / "postgres.sh"

DAG_ID = "stress_gpu"
CYCLE_DAG_FILE = "stress_cycle.py"
POOL = "stress_gpu"
TIMING_FILE_ENV = "GPU_DAG_STRESS_TIMING_FILE"
SLEEP_ENV = "GPU_DAG_STRESS_SLEEP_S"


# ---------------------------------------------------------------------------------------- PostgreSQL


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str]:
    """Start a PostgreSQL with ``scripts/postgres.sh``; yields its SQLAlchemy URL; stops and removes
    it on exit.

    :raises RuntimeError: the script failed (message has its output; install the server with
        ``sudo bash scripts/ci_system_deps.sh``).
    """
    proc = subprocess.run(
        ["bash", str(POSTGRES_SCRIPT), "start"], capture_output=True, text=True, timeout=180, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"scripts/postgres.sh start failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    values = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    data_dir, url = values["PGDATA_DIR"], values["DATABASE_URL"]
    try:
        yield url
    finally:
        subprocess.run(["bash", str(POSTGRES_SCRIPT), "stop", data_dir], timeout=120, check=False)


# ---------------------------------------------------------------------------------------- cluster


def stress_cluster(
    *,
    db_url: str | None,
    timing_file: Path,
    pool_slots: int = 4,
    parallelism: int = 8,
    sleep_s: float = 1.0,
) -> AirflowCluster:
    """An (unstarted) :class:`AirflowCluster` for the stress DAGs; ``db_url=None`` keeps SQLite."""
    env = {
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
        "AIRFLOW__GPU_DAG__POOLS": json.dumps({POOL: pool_slots}),
        "AIRFLOW__CORE__MAX_ACTIVE_RUNS_PER_DAG": "500",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "500",
        "AIRFLOW__SCHEDULER__MAX_DAGRUNS_TO_CREATE_PER_LOOP": "50",
        "AIRFLOW__SCHEDULER__MAX_DAGRUNS_PER_LOOP_TO_SCHEDULE": "100",
        # Tasks log little; keep the api-server/scheduler quiet so 2 cores go to the work.
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        TIMING_FILE_ENV: str(timing_file),
        SLEEP_ENV: str(sleep_s),
    }
    if db_url:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db_url
    return AirflowCluster(DAGS_FOLDER, pools={POOL: pool_slots}, env=env, parallelism=parallelism)


# ---------------------------------------------------------------------------------------- analysis


def _ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def pool_peak(task_instances: Sequence[dict[str, Any]], pool: str) -> tuple[int, float | None]:
    """Largest sum of ``pool_slots`` of task instances of ``pool`` running at the same instant,
    from their ``start_date``/``end_date``; returns ``(peak, when)``. An interval is half-open
    ``[start, end)``: a task ending at t and one starting at t do not overlap."""
    events: list[tuple[float, int]] = []
    for ti in task_instances:
        if ti.get("pool") != pool:
            continue
        start, end = _ts(ti.get("start_date")), _ts(ti.get("end_date"))
        if start is None:
            continue
        slots = int(ti.get("pool_slots") or 1)
        events.append((start, slots))
        events.append((end if end is not None else float("inf"), -slots))
    events.sort(key=lambda e: (e[0], e[1]))  # ends (-) before starts (+) at the same instant
    peak, current, when = 0, 0, None
    for at, delta in events:
        current += delta
        if current > peak:
            peak, when = current, at
    return peak, when


@dataclass
class TimingSummary:
    """``get_weight`` calls of the timed critical-path rule."""

    calls: int = 0
    cache_misses: int = 0
    total_s: float = 0.0
    mean_us: float = 0.0
    p95_us: float = 0.0
    max_us: float = 0.0
    miss_mean_us: float = 0.0
    hit_mean_us: float = 0.0
    by_component: dict[str, dict[str, float]] = field(default_factory=dict)


def read_timings(path: Path, pid_component: dict[int, str]) -> TimingSummary:
    """Sum up the lines ``pid seconds cache_hit task_id`` written by the timing plugin."""
    if not path.exists():
        return TimingSummary()
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            rows.append((int(parts[0]), float(parts[1]), parts[2] == "1"))
    if not rows:
        return TimingSummary()
    times = sorted(r[1] for r in rows)
    hits = [r[1] for r in rows if r[2]]
    misses = [r[1] for r in rows if not r[2]]
    by_component: dict[str, dict[str, float]] = {}
    for pid, seconds, _ in rows:
        comp = pid_component.get(pid, "other")
        agg = by_component.setdefault(comp, {"calls": 0, "total_s": 0.0})
        agg["calls"] += 1
        agg["total_s"] += seconds
    return TimingSummary(
        calls=len(rows),
        cache_misses=len(misses),
        total_s=sum(times),
        mean_us=statistics.fmean(times) * 1e6,
        p95_us=times[max(0, math.ceil(0.95 * len(times)) - 1)] * 1e6,  # nearest rank
        max_us=times[-1] * 1e6,
        miss_mean_us=statistics.fmean(misses) * 1e6 if misses else 0.0,
        hit_mean_us=statistics.fmean(hits) * 1e6 if hits else 0.0,
        by_component=by_component,
    )


@dataclass
class StressResult:
    """What one stress round saw."""

    runs: int
    run_states: dict[str, int]
    task_states: dict[str, int]
    task_instances: int
    pool_slots: int
    pool_peak_from_times: int
    pool_peak_sampled: int
    evaluates_before_last_train: int
    trigger_s: float
    makespan_s: float
    import_errors: dict[str, str]
    timings: TimingSummary
    database: str

    @property
    def all_succeeded(self) -> bool:
        return self.run_states == {"success": self.runs}


def _pid_components(cluster: AirflowCluster) -> dict[int, str]:
    out: dict[int, str] = {}
    for name, pid in cluster.pids.items():
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            out[pid] = name
            for child in root.children(recursive=True):
                out.setdefault(child.pid, name)
    return out


def list_pages(cluster: AirflowCluster, path: str, key: str, **params: Any) -> list[dict[str, Any]]:
    """Every item of a paged REST collection (``key`` in each page), 100 per request."""
    out: list[dict[str, Any]] = []
    while True:
        page = cluster.api("GET", path, params={"limit": 100, "offset": len(out), **params}).json()
        items = list(page.get(key) or [])
        out.extend(items)
        if not items or len(out) >= int(page.get("total_entries", 0)):
            return out


def trigger_many(cluster: AirflowCluster, dag_id: str, runs: int, threads: int = 4) -> list[str]:
    """Trigger ``runs`` runs of ``dag_id`` over REST from ``threads`` concurrent clients (each with
    its own HTTP session); returns the run ids in trigger order."""
    token = cluster.token()
    url = f"{cluster.api_url}/api/v2/dags/{dag_id}/dagRuns"
    local = threading.local()

    def one(i: int) -> str:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        body = {
            "logical_date": None,
            "conf": {"round": i},
            "dag_run_id": f"stress__{i:04d}__{uuid.uuid4().hex[:8]}",
        }
        resp = session.post(url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=120)
        if resp.status_code >= 400:
            raise RuntimeError(f"POST {url} -> {resp.status_code}: {resp.text[:500]}")
        return str(resp.json()["dag_run_id"])

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        return list(pool.map(one, range(runs)))


def run_stress(
    cluster: AirflowCluster,
    *,
    runs: int,
    timing_file: Path,
    timeout: float = 900.0,
    poll: float = 2.0,
    trigger_threads: int = 4,
) -> StressResult:
    """Trigger ``runs`` runs of the stress DAG at once on a started cluster and wait for all of them.

    :raises TimeoutError: runs still unfinished after ``timeout`` seconds (a deadlock or a stall);
        the message has the state counts and the scheduler log tail.
    """
    cluster.wait_for_dag(DAG_ID, timeout=300)
    pid_component = _pid_components(cluster)
    pool_slots = int(cluster.get_pool(POOL)["slots"])
    started = time.monotonic()
    run_ids = trigger_many(cluster, DAG_ID, runs, threads=trigger_threads)
    trigger_s = time.monotonic() - started
    deadline = started + timeout
    peak_sampled = 0
    while True:
        pool = cluster.get_pool(POOL)
        peak_sampled = max(peak_sampled, int(pool.get("occupied_slots") or 0))
        pid_component.update(_pid_components(cluster))
        dag_runs = [
            r
            for r in list_pages(cluster, f"/dags/{DAG_ID}/dagRuns", "dag_runs")
            if r["dag_run_id"] in run_ids
        ]
        states = [str(r["state"]) for r in dag_runs]
        if len(states) == runs and all(s in ("success", "failed") for s in states):
            break
        if time.monotonic() >= deadline:
            counts = {s: states.count(s) for s in set(states)}
            raise TimeoutError(
                f"{runs} runs of {DAG_ID} not finished after {timeout:.0f}s: {counts}\n"
                f"{cluster.log_tails(40)}"
            )
        time.sleep(poll)
    makespan_s = time.monotonic() - started
    tis = [
        ti
        for ti in list_pages(cluster, f"/dags/{DAG_ID}/dagRuns/~/taskInstances", "task_instances")
        if ti["dag_run_id"] in run_ids
    ]
    peak, _ = pool_peak(tis, POOL)
    train_starts = [_ts(t.get("start_date")) or 0.0 for t in tis if t["task_id"] == "train"]
    last_train = max(train_starts, default=0.0)
    early_evaluates = sum(
        1 for t in tis if t["task_id"] == "evaluate" and (_ts(t.get("start_date")) or 0.0) < last_train
    )
    errors = {
        Path(str(e.get("filename"))).name: str(e.get("stack_trace", ""))[-500:]
        for e in cluster.import_errors()
    }
    db_url = cluster.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    return StressResult(
        runs=runs,
        run_states={s: states.count(s) for s in set(states)},
        task_states={s: [str(t["state"]) for t in tis].count(s) for s in {str(t["state"]) for t in tis}},
        task_instances=len(tis),
        pool_slots=pool_slots,
        pool_peak_from_times=peak,
        pool_peak_sampled=peak_sampled,
        evaluates_before_last_train=early_evaluates,
        trigger_s=trigger_s,
        makespan_s=makespan_s,
        import_errors=errors,
        timings=read_timings(timing_file, pid_component),
        database=db_url.split("://", 1)[0],
    )


# ---------------------------------------------------------------------------------------- CLI


def format_report(result: StressResult) -> str:
    """A Markdown summary (what docs/benchmarks/stress.md records)."""
    t = result.timings
    run_header = (
        "| runs | tasks | pool slots | peak (times) | peak (sampled) | run states "
        "| makespan s | trigger s | DB |"
    )
    run_row = (
        f"| {result.runs} | {result.task_instances} | {result.pool_slots} | {result.pool_peak_from_times} "
        f"| {result.pool_peak_sampled} | {result.run_states} | {result.makespan_s:.1f} "
        f"| {result.trigger_s:.1f} | {result.database} |"
    )
    weight_header = (
        "| get_weight calls | cache misses | total ms | mean µs | p95 µs | max µs "
        "| miss mean µs | hit mean µs |"
    )
    weight_row = (
        f"| {t.calls} | {t.cache_misses} | {t.total_s * 1e3:.1f} | {t.mean_us:.0f} | {t.p95_us:.0f} "
        f"| {t.max_us:.0f} | {t.miss_mean_us:.0f} | {t.hit_mean_us:.0f} |"
    )
    order = (
        f"priority order: {result.evaluates_before_last_train} of {result.runs} evaluate tasks started "
        "before the last train task started (weights: train 4800, evaluate 1200)"
    )
    components = ", ".join(
        f"{c}: {int(v['calls'])} calls, {v['total_s'] * 1e3:.1f} ms" for c, v in t.by_component.items()
    )
    errors = ", ".join(f"{k}: {v.strip().splitlines()[-1]}" for k, v in result.import_errors.items())
    return "\n".join(
        [
            run_header,
            "|---|---|---|---|---|---|---|---|---|",
            run_row,
            "",
            weight_header,
            "|---|---|---|---|---|---|---|---|",
            weight_row,
            "",
            order,
            f"by component: {components}",
            f"import errors: {errors}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--pool-slots", type=int, default=4)
    parser.add_argument("--parallelism", type=int, default=8)
    parser.add_argument("--sleep", type=float, default=1.0, help="seconds each GPU task sleeps")
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--trigger-threads", type=int, default=4, help="concurrent REST clients triggering")
    parser.add_argument("--sqlite", action="store_true", help="use the harness's SQLite, not PostgreSQL")
    parser.add_argument("--json", type=Path, help="also write the result as JSON here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gpu-dag-stress-") as tmp, contextlib.ExitStack() as stack:
        timing_file = Path(tmp) / "get_weight.txt"
        db_url = None if args.sqlite else stack.enter_context(throwaway_postgres())
        cluster = stack.enter_context(
            stress_cluster(
                db_url=db_url,
                timing_file=timing_file,
                pool_slots=args.pool_slots,
                parallelism=args.parallelism,
                sleep_s=args.sleep,
            )
        )
        result = run_stress(
            cluster,
            runs=args.runs,
            timing_file=timing_file,
            timeout=args.timeout,
            trigger_threads=args.trigger_threads,
        )
    print(format_report(result))
    if args.json:
        args.json.write_text(json.dumps(asdict(result), indent=2, default=str))
    ok = result.all_succeeded and result.pool_peak_from_times <= result.pool_slots
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
