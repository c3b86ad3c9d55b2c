"""Chaos: many concurrent runs of the example pipelines while the controller, the scheduler, a GPU task,
the api-server and the capacity source fail (issue #14.3).

What it does (the same code backs ``tests/integration/test_chaos_real.py``, CI-sized):

1. starts a throwaway PostgreSQL (``scripts/postgres.sh``; ``--sqlite`` keeps the harness's SQLite) and
   boots Airflow (api-server, scheduler, dag-processor, triggerer, LocalExecutor) on copies of
   ``dags/llm_pipeline.py`` and ``dags/hparam_sweep.py``: GPU operators with device leases on a static
   8-GPU inventory (``[gpu_dag] inventory = 8xsim:80GiB``, ``lease_dir`` in a temporary folder),
   completeness sensors and budget gates (triggerer), fallback ladders, critical-path weights, one GPU
   pool ``gpu_default`` of 8 slots;
2. starts the watermark controller as its own process (``airflow gpu-dag watermark --config ...``): a
   ``file`` capacity source holding ``8``, reservation on, every ``--interval`` seconds;
3. triggers ``--llm`` runs of ``llm_pipeline`` and ``--sweeps`` runs of ``hparam_sweep`` at once over
   REST (each with its own dataset folder), and while they run injects, one after the other:

   - ``gpu_task``: ``kill -9`` of a running GPU task's process (the holder of a device lease): the task
     is retried, and the next allocation reclaims the lease (checked once the runs are over);
   - ``controller``: ``kill -9`` of the controller (while a reservation holds the pool below capacity,
     if one does within a minute), restarted ``--controller-down`` seconds later;
   - ``scheduler``: ``kill -9`` of the scheduler's main process; a few seconds later the rest of its
     process tree is killed (as a service manager does) and a new scheduler started
     (:mod:`airflow_gpu_dag.testing.faults`);
   - ``api_server``: the api-server stopped (SIGTERM) and started again;
   - ``capacity``: the capacity file removed for 1.5 intervals, then garbage for 1.5 intervals (three
     intervals of source outage), then restored;

4. waits for every run and reports: runs completed / expected, runs stuck, devices held twice (every pair
   of overlapping records on one device in the lease ledger ``usage.jsonl``, plus the lease table sampled
   every 0.5 s), the GPU pool's peak use from task-instance start/end times (all tries) against its 8
   slots, per fault the recovery time, for the controller kill how long the pool stayed below capacity,
   and the makespan against a fault-free round of the same workload (``--baseline``).

    .venv/bin/python benchmarks/chaos.py                    # 100 runs, fault-free round then chaos round
    .venv/bin/python benchmarks/chaos.py --rounds chaos --baseline-json base.json
    options: --llm N --sweeps N --faults controller,gpu_task,scheduler,api_server,capacity --sqlite
             --interval S --timeout S --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the repository's package
    sys.path.insert(0, str(ROOT))

from airflow_gpu_dag.testing import AirflowCluster, ClusterError  # noqa: E402
from airflow_gpu_dag.testing.faults import (  # noqa: E402
    dead_components,
    kill_component,
    reap_component,
    restart_component,
    start_component,
)

POOL = "gpu_default"
GPUS = 8
LEASE_VARIABLE = "gpu_dag_watermark_lease"
FAULTS = ("gpu_task", "controller", "scheduler", "api_server", "capacity")
TERMINAL = ("success", "failed")


def _stress() -> Any:
    """``benchmarks/stress.py`` (throwaway PostgreSQL, pool peak), loaded by path."""
    spec = importlib.util.spec_from_file_location(
        "gpu_dag_benchmark_stress", ROOT / "benchmarks" / "stress.py"
    )
    assert spec and spec.loader
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def _ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


# ---------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class ChaosSettings:
    """One chaos (or fault-free) round."""

    llm: int = 20
    sweeps: int = 80
    learning_rates: tuple[float, ...] = (0.1, 0.03)
    faults: tuple[str, ...] = FAULTS
    interval: float = 2.0
    controller_down: float = 15.0
    reservation_wait: float = 60.0
    scheduler_down: float = 5.0
    first_fault_after: float = 20.0
    between_faults: float = 10.0
    timeout: float = 3600.0
    trigger_spread: float = 0.0
    #: How many of the last runs planned wait, beyond their offsets, until the last fault begins, so
    #: that work is in flight through every fault however long the injections take (under load a
    #: restart can take minutes, and the runs triggered over ``trigger_spread`` may all be done).
    hold_for_last_fault: int = 0
    #: Retries of every task of the DAG copies (None: the examples' own, 1). The scheduler fault kills
    #: every running try and a long api-server outage may too: a try already retried once would fail
    #: its run, which says nothing about recovery.
    retries: int | None = None
    #: LocalExecutor slots. Above the number of concurrent LLM runs plus the GPUs: the fallback ladder's
    #: start-deadline sensor holds a slot while it waits (poke mode), and with as many of them running
    #: as there are slots the task it watches never gets one (see docs/benchmarks/chaos.md).
    parallelism: int = 32
    #: ``[gpu_dag] objective``: ``throughput`` reserves for every wide task that waits (``balanced``
    #: only for one 4 h more urgent than the others: never among 100 alike runs triggered together).
    objective: str = "throughput"
    sqlite: bool = False

    @property
    def runs(self) -> int:
        return self.llm + self.sweeps


# ---------------------------------------------------------------------------------------- the cluster


def chaos_env(work: Path, db_url: str | None, objective: str = "throughput") -> dict[str, str]:
    """The components' settings: static 8-GPU inventory, leases in ``work``, quick retries."""
    env = {
        "AIRFLOW__GPU_DAG__OBJECTIVE": objective,
        "AIRFLOW__GPU_DAG__INVENTORY": f"{GPUS}xsim:80GiB",
        "AIRFLOW__GPU_DAG__POOLS": json.dumps({POOL: GPUS}),
        "AIRFLOW__GPU_DAG__LEASE_DIR": str(work / "leases"),
        "AIRFLOW__GPU_DAG__LEASE_TTL": "30s",
        "AIRFLOW__GPU_DAG__LEASE_HEARTBEAT": "5s",
        "AIRFLOW__GPU_DAG__LEASE_POLL_INTERVAL": "1s",
        "AIRFLOW__GPU_DAG__LEASE_WAIT_TIMEOUT": "30m",
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
        "AIRFLOW__CORE__MAX_ACTIVE_RUNS_PER_DAG": "500",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "500",
        # a killed scheduler's queued tasks are adopted by the new one within a minute
        "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "60",
        # tasks that died with a killed scheduler's workers are failed (and retried) a minute later
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
    }
    if db_url:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db_url
    return env


def chaos_cluster(work: Path, settings: ChaosSettings, db_url: str | None) -> AirflowCluster:
    """An (unstarted) cluster on copies of the example DAGs."""
    dags = work / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    for name in ("llm_pipeline.py", "hparam_sweep.py"):
        source = (ROOT / "dags" / name).read_text()
        if settings.retries is not None:
            own = '"retries": 1}'
            if source.count(own) != 1:
                raise RuntimeError(f"dags/{name}: expected one {own!r} in default_args to replace")
            source = source.replace(own, f'"retries": {int(settings.retries)}}}')
        (dags / name).write_text(source)
    return AirflowCluster(
        dags,
        pools={POOL: GPUS},
        env=chaos_env(work, db_url, settings.objective),
        triggerer=True,
        parallelism=settings.parallelism,
        boot_timeout=600,
    )


class Controller:
    """``airflow gpu-dag watermark --config FILE`` as its own process (its own session), logging to
    ``log``; ``kill()`` is ``kill -9``."""

    def __init__(self, cluster: AirflowCluster, work: Path, interval: float) -> None:
        self.cluster = cluster
        self.capacity_file = work / "capacity"
        self.capacity_file.write_text(str(GPUS))
        self.config = work / "watermark.yaml"
        self.config.write_text(
            f"interval: {interval}\n"
            f"lease: {{lock_file: {work / 'watermark.lock'}, variable: {LEASE_VARIABLE}}}\n"
            "pools:\n"
            f"  {POOL}:\n"
            f"    source: {{type: file, path: {self.capacity_file}}}\n"
            "    floor: 0\n"
            # an outage of three intervals can span four reads (phase): keep the last good value for four
            "    stale_intervals: 4\n"
            "    reservation: true\n"
        )
        self.log = cluster.home / "controller.log"  # kept with the component logs (AIRFLOW_GPU_DAG_KEEP_HOME)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = dict(cluster.env)
        host = cluster.api_url.split("://", 1)[1]
        self.env["AIRFLOW_CONN_GPU_DAG_API"] = f"http://{cluster.USERNAME}:{cluster.PASSWORD}@{host}"

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.procs[-1] if self.procs else None

    def start(self) -> None:
        airflow = str(Path(sys.executable).parent / "airflow")
        with open(self.log, "ab") as log:
            self.procs.append(
                subprocess.Popen(
                    [airflow, "gpu-dag", "watermark", "--config", str(self.config)],
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def kill(self) -> int:
        proc = self.proc
        assert proc is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        return proc.pid

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)

    def holder(self) -> str | None:
        """The holder of the controller lease Variable (None when unreadable)."""
        resp = self.cluster.api("GET", f"/variables/{LEASE_VARIABLE}", check=False)
        if resp.status_code != 200:
            return None
        with contextlib.suppress(ValueError, TypeError):
            return str(json.loads(resp.json()["value"]).get("holder"))
        return None


# ---------------------------------------------------------------------------------------- sampling


@dataclass
class Samples:
    """What the sampler saw every ``period`` seconds: the pool and the lease table."""

    pool: list[tuple[float, int | None, str]] = field(default_factory=list)  # (time, slots, description)
    leases: list[tuple[float, dict[str, list[int]]]] = field(default_factory=list)  # lease id -> devices


class Sampler:
    """A thread sampling ``GET /pools/gpu_default`` and ``leases.json`` until stopped."""

    def __init__(self, cluster: AirflowCluster, lease_dir: Path, period: float = 0.5) -> None:
        self.cluster, self.table, self.period = cluster, lease_dir / "leases.json", period
        self.samples = Samples()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            try:
                resp = self.cluster.api("GET", f"/pools/{POOL}", check=False, timeout=5.0)
                body = resp.json() if resp.status_code == 200 else {}
                self.samples.pool.append((now, body.get("slots"), str(body.get("description") or "")))
            except Exception:  # api-server down: a gap
                self.samples.pool.append((now, None, ""))
            with contextlib.suppress(OSError, ValueError):
                table = json.loads(self.table.read_text())
                self.samples.leases.append(
                    (now, {k: list(v.get("devices", ())) for k, v in table.get("leases", {}).items()})
                )
            self._stop.wait(self.period)

    def slots_at(self, after: float) -> list[tuple[float, int | None, str]]:
        return [s for s in list(self.samples.pool) if s[0] >= after]


# ---------------------------------------------------------------------------------------- analysis


def ledger_overlaps(records: Sequence[Mapping[str, Any]]) -> list[tuple[int, str, str]]:
    """``(device, lease_a, lease_b)`` for every two usage records of different leases that hold the same
    device at the same time (half-open intervals ``[start, end)``)."""
    by_device: dict[int, list[tuple[float, float, str]]] = {}
    for record in records:
        for device in record.get("devices", ()):
            by_device.setdefault(int(device), []).append(
                (float(record["start"]), float(record["end"]), str(record.get("lease_id")))
            )
    out = []
    for device, spans in sorted(by_device.items()):
        spans.sort()
        for i, (start, end, lease) in enumerate(spans):
            for other_start, _other_end, other in spans[i + 1 :]:
                if other_start >= end:
                    break
                if other != lease and start < end:
                    out.append((device, lease, other))
    return out


def table_overlaps(snapshots: Sequence[tuple[float, Mapping[str, Sequence[int]]]]) -> list[tuple[float, int]]:
    """``(time, device)`` for every sampled lease table where a device is in two leases."""
    out = []
    for at, leases in snapshots:
        seen: dict[int, str] = {}
        for lease, devices in leases.items():
            for device in devices:
                if device in seen and seen[device] != lease:
                    out.append((at, int(device)))
                seen[int(device)] = lease
    return out


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """Every whole line of ``usage.jsonl`` (a line torn by a crash is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def shut_time(samples: Sequence[tuple[float, int | None, str]], since: float, capacity: int) -> float | None:
    """Seconds from ``since`` until the first sample at ``capacity`` (None: never back in the samples)."""
    for at, slots, _ in samples:
        if at >= since and slots is not None and slots >= capacity:
            return at - since
    return None


# ---------------------------------------------------------------------------------------- faults


@dataclass
class FaultReport:
    """One injected fault: when, how long until the system recovered, and what was seen."""

    fault: str
    at: float
    recovery_s: float | None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    """What the faults act on."""

    cluster: AirflowCluster
    controller: Controller
    sampler: Sampler
    settings: ChaosSettings
    lease_dir: Path
    runs: list[tuple[str, str]]


def _wait(predicate: Callable[[], Any], timeout: float, poll: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(poll)
    return None


def fault_controller(ctx: Context) -> FaultReport:
    """kill -9 of the controller while (if within ``reservation_wait`` s) a reservation holds the pool
    below capacity;
    restarted ``controller_down`` s later. Recovery: the restarted controller holds the lease again."""
    below = _wait(
        lambda: (s := ctx.cluster.get_pool(POOL)) and s["slots"] < GPUS and s,
        timeout=ctx.settings.reservation_wait,
    )
    before = ctx.controller.holder()
    at = time.time()
    slots_at_kill = int(ctx.cluster.get_pool(POOL)["slots"])
    ctx.controller.kill()
    time.sleep(ctx.settings.controller_down)
    ctx.controller.start()
    # a CLI boot and a first tick: seconds when idle, minutes on a loaded machine
    active = _wait(lambda: (h := ctx.controller.holder()) and h != before and h, timeout=300)
    recovered = time.time() if active else None
    time.sleep(2 * ctx.settings.interval)
    shut = shut_time(ctx.sampler.slots_at(at), at, GPUS)
    return FaultReport(
        "controller",
        at,
        None if recovered is None else recovered - at,
        {
            "reservation_active_at_kill": bool(below),
            "pool_slots_at_kill": slots_at_kill,
            "pool_below_capacity_after_kill_s": shut,
            "controller_down_s": ctx.settings.controller_down,
        },
    )


def _task_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """The task instance a lease belongs to: (dag_id, run_id, task_id, map_index)."""
    owner = record.get("owner") or {}
    return tuple(owner.get(k) for k in ("dag_id", "run_id", "task_id", "map_index"))


def _live_gpu_lease(
    lease_dir: Path, hit: Collection[tuple[Any, ...]] = ()
) -> tuple[str, dict[str, Any]] | None:
    """The youngest lease (most of its task still to run) whose holder process is alive, held by the
    first try of a task instance not in ``hit``. The example DAGs retry a task once, so a kill of a retry,
    or a second kill of the same task, would fail its run rather than test recovery."""
    live: list[tuple[float, str, dict[str, Any]]] = []
    with contextlib.suppress(OSError, ValueError, TypeError):
        table = json.loads((lease_dir / "leases.json").read_text())
        for lease_id, record in table.get("leases", {}).items():
            pid = int((record.get("holder") or {}).get("pid") or 0)
            first_try = int((record.get("owner") or {}).get("try_number") or 1) == 1
            if first_try and _task_key(record) not in hit and pid and Path(f"/proc/{pid}").exists():
                live.append((float(record.get("acquired_at") or 0.0), lease_id, record))
    if not live:
        return None
    _, lease_id, record = max(live, key=lambda item: item[0])
    return lease_id, record


def _lease_records(ctx: Context, lease_id: str) -> list[dict[str, Any]]:
    """The usage-ledger records of one lease, oldest first."""
    return [r for r in read_ledger(ctx.lease_dir / "usage.jsonl") if r.get("lease_id") == lease_id]


#: How many leases the GPU-task fault may try before one is killed while it still holds its lease.
GPU_TASK_ATTEMPTS = 3


def fault_gpu_task(ctx: Context) -> FaultReport:
    """kill -9 of the process holding a device lease (a running GPU task). Checked once the runs are over
    (:func:`check_gpu_task`): the task ran again, and the killed lease was reclaimed."""
    # A task can release its lease between the read of the table and the kill (its work done, the
    # process not yet gone): the kill then misses the lease (the ledger says "success", written by the
    # holder itself). Such a miss is recorded and another lease is taken, of another task instance: the
    # missed kill may still have ended its try (killed before it reported success), and a second kill
    # of its retry would fail the run (a CI run saw exactly that).
    missed: list[str] = []
    hit: set[tuple[Any, ...]] = set()
    for _attempt in range(GPU_TASK_ATTEMPTS):
        found = _wait(lambda: _live_gpu_lease(ctx.lease_dir, hit), timeout=300, poll=0.2)
        if not found:
            return FaultReport("gpu_task", time.time(), None, {"error": "no running GPU task within 300 s"})
        lease_id, record = found
        pid = int(record["holder"]["pid"])
        at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)  # a write the holder was in the middle of lands before the ledger is read
        released_by_holder = any(r.get("outcome") != "reclaimed" for r in _lease_records(ctx, lease_id))
        if not released_by_holder:
            break
        missed.append(lease_id)
        hit.add(_task_key(record))
    owner = record.get("owner") or {}
    return FaultReport(
        "gpu_task",
        at,
        None,
        {
            "task": [owner.get(k) for k in ("dag_id", "run_id", "task_id", "map_index")],
            "killed_try": int(owner.get("try_number") or 1),
            "pid": pid,
            "devices": record.get("devices"),
            "lease_id": lease_id,
            "missed_leases": missed,
        },
    )


def check_gpu_task(ctx: Context, report: FaultReport) -> None:
    """After the runs: the killed task's next try (state, when it started: the recovery time) and the
    ledger record of the killed lease (``reclaimed``, with the reason)."""
    if "task" not in report.detail:
        return
    dag_id, run_id, task_id, map_index = report.detail["task"]
    path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
    if int(map_index if map_index is not None else -1) >= 0:
        path += f"/{map_index}"
    resp = ctx.cluster.api("GET", path, check=False)
    ti = resp.json() if resp.status_code == 200 else {}
    if int(ti.get("try_number") or 0) > report.detail["killed_try"]:
        report.detail["next_try"] = {"try_number": ti.get("try_number"), "state": ti.get("state")}
        started = _ts(ti.get("start_date"))
        report.recovery_s = None if started is None else started - report.at
    records = _lease_records(ctx, report.detail["lease_id"])
    report.detail["lease_outcome"] = records[0].get("outcome") if records else None
    report.detail["reclaim_reason"] = records[0].get("reclaim_reason") if records else None


def fault_scheduler(ctx: Context) -> FaultReport:
    """kill -9 of the scheduler's main process; ``scheduler_down`` s later what is left of its process
    tree (its LocalExecutor workers and the tasks they run) is killed, as a service manager or container
    runtime does before a restart, and a new scheduler starts. Recovery: the new scheduler heartbeats.
    The tasks that died with the workers are failed by the new scheduler once their heartbeat is
    ``task_instance_heartbeat_timeout`` old, and retried."""
    at = time.time()
    kill_component(ctx.cluster, "scheduler")
    time.sleep(ctx.settings.scheduler_down)
    reaped = reap_component(ctx.cluster, "scheduler")
    start_component(ctx.cluster, "scheduler", timeout=600)
    return FaultReport(
        "scheduler", at, time.time() - at, {"down_s": ctx.settings.scheduler_down, "processes_reaped": reaped}
    )


def fault_api_server(ctx: Context) -> FaultReport:
    """The api-server stopped (SIGTERM) and started again. Recovery: it answers, Execution API warm."""
    at = time.time()
    took = restart_component(ctx.cluster, "api-server", sig=signal.SIGTERM, group=True, timeout=600)
    ctx.cluster.token(refresh=True)
    return FaultReport("api_server", at, took, {})


def fault_capacity(ctx: Context) -> FaultReport:
    """Three intervals without a capacity reading: the file removed, then garbage, then restored.
    Recovery: the pool description says the source is ok again."""
    interval = ctx.settings.interval
    capacity = ctx.controller.capacity_file
    at = time.time()
    capacity.unlink()
    time.sleep(1.5 * interval)
    capacity.write_text("not a number")
    time.sleep(1.5 * interval)
    capacity.write_text(str(GPUS))
    restored = time.time()
    ok = _wait(
        lambda: [s for s in ctx.sampler.slots_at(restored) if "source ok" in s[2]],
        timeout=max(30 * interval, 300.0),
    )
    # the outage as sampled: up to the first sample that says the source is ok again (on a loaded
    # machine a tick, or the sample that sees it, can come more than an interval after the restore)
    until = ok[0][0] if ok else restored + interval
    during = [s for s in ctx.sampler.slots_at(at) if s[0] < until]
    slots = [s[1] for s in during if s[1] is not None]
    return FaultReport(
        "capacity",
        at,
        None if not ok else ok[0][0] - at,
        {
            "outage_s": restored - at,
            "pool_min_during_outage": min(slots, default=None),
            "stale_seen": any("source stale" in s[2] for s in during),
            "floor_seen": any("source floor" in s[2] for s in during),
            "descriptions": sorted({s[2].split(" [gpu-dag-state")[0] for s in during if s[2]})[:6],
        },
    )


#: What is checked of a fault once the runs are over.
CHECKS: dict[str, Callable[[Context, FaultReport], None]] = {"gpu_task": check_gpu_task}

FAULT_FUNCTIONS: dict[str, Callable[[Context], FaultReport]] = {
    "controller": fault_controller,
    "gpu_task": fault_gpu_task,
    "scheduler": fault_scheduler,
    "api_server": fault_api_server,
    "capacity": fault_capacity,
}


# ---------------------------------------------------------------------------------------- one round


@dataclass
class ChaosResult:
    """What one round saw."""

    faults_injected: list[str]
    runs_expected: int
    run_states: dict[str, int]
    runs_stuck: list[str]
    task_states: dict[str, int]
    devices_held_twice: int
    ledger_overlaps: list[tuple[int, str, str]]
    table_overlaps: int
    ledger_records: int
    reclaimed_leases: int
    pool_peak: int
    pool_capacity: int
    makespan_s: float
    started_at: float
    failed_tries: list[str]
    reports: list[FaultReport]
    database: str
    load_avg: tuple[float, float, float]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def completed(self) -> int:
        return self.run_states.get("success", 0)


@dataclass(frozen=True)
class PlannedRun:
    """A run to trigger: its DAG, run id (fixed up front, so a retried trigger cannot make a second run),
    conf and when (seconds after the first trigger)."""

    dag_id: str
    run_id: str
    conf: dict[str, Any]
    offset: float


def plan_runs(settings: ChaosSettings, data: Path, now: datetime | None = None) -> list[PlannedRun]:
    """The runs of ``settings``: the LLM pipelines spread evenly among the sweeps, each with its own
    dataset folder under ``data``, triggered evenly over ``settings.trigger_spread`` seconds (0: at once).
    Run ids are ``manual__<time>`` like Airflow's own, so the weights see the trigger time."""
    base = now or datetime.now(UTC)
    runs = []
    for n in range(settings.runs):
        llm = (n + 1) * settings.llm // settings.runs > n * settings.llm // settings.runs
        dag_id = "llm_pipeline" if llm else "hparam_sweep"
        conf: dict[str, Any] = {"model_size": "tiny", "gpus": 2, "dataset_path": str(data / f"run_{n:03d}")}
        if not llm:
            conf.update({"learning_rates": list(settings.learning_rates), "epochs": 50, "gpus": 1})
        offset = settings.trigger_spread * n / max(1, settings.runs - 1) if settings.trigger_spread else 0.0
        run_id = f"manual__{(base + timedelta(seconds=offset, microseconds=n)).isoformat()}"
        runs.append(PlannedRun(dag_id, run_id, conf, offset))
    return runs


class Trigger:
    """Triggers planned runs over REST at their offsets in a thread; a trigger that fails (api-server
    down) is retried every 2 s, and a 409 (the run exists: an earlier try got through) counts as done.
    The last ``hold`` runs also wait for :attr:`release` (set by the caller)."""

    def __init__(self, cluster: AirflowCluster, planned: Sequence[PlannedRun], hold: int = 0) -> None:
        self.cluster, self.planned = cluster, list(planned)
        self.held = max(0, len(self.planned) - max(0, hold))  # index of the first held run
        self.release = threading.Event()
        self.triggered: list[tuple[str, str]] = []
        self.retries = 0
        self._thread = threading.Thread(target=self._run, name="chaos-trigger", daemon=True)

    def start(self) -> Trigger:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> list[tuple[str, str]]:
        self._thread.join(timeout)
        return list(self.triggered)

    def _run(self) -> None:
        t0 = time.monotonic()
        for n, run in enumerate(self.planned):
            delay = t0 + run.offset - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if n >= self.held:
                self.release.wait()
            while True:
                body = {"logical_date": None, "conf": run.conf, "dag_run_id": run.run_id}
                try:
                    resp = self.cluster.api("POST", f"/dags/{run.dag_id}/dagRuns", json=body, check=False)
                    if resp.status_code < 400 or resp.status_code == 409:
                        break
                except ClusterError:
                    pass
                self.retries += 1
                time.sleep(2)
            self.triggered.append((run.dag_id, run.run_id))


def _all_tries(cluster: AirflowCluster, runs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Every try of every task instance of ``runs`` (the latest from the run's task instances, earlier
    ones from ``.../tries`` for the task instances tried more than once)."""
    tis = [ti for dag_id, run_id in runs for ti in cluster.task_instances(dag_id, run_id)]
    out = list(tis)
    for ti in tis:
        if int(ti.get("try_number") or 1) > 1:
            path = f"/dags/{ti['dag_id']}/dagRuns/{ti['dag_run_id']}/taskInstances/{ti['task_id']}"
            if int(ti.get("map_index", -1)) >= 0:
                path += f"/{ti['map_index']}"
            resp = cluster.api("GET", path + "/tries", check=False)
            if resp.status_code == 200:
                latest = int(ti.get("try_number") or 1)
                out.extend(t for t in resp.json().get("task_instances", []) if int(t["try_number"]) < latest)
    return out


def wait_for_runs(
    cluster: AirflowCluster, runs: Sequence[tuple[str, str]], deadline: float
) -> dict[str, str]:
    """Poll until every run is terminal or ``deadline`` (monotonic); returns run -> state."""
    states: dict[str, str] = {}
    while True:
        for dag_id, run_id in runs:
            if states.get(run_id) in TERMINAL:
                continue
            with contextlib.suppress(ClusterError):
                states[run_id] = str(cluster.get_run(dag_id, run_id).get("state"))
        if all(states.get(r) in TERMINAL for _, r in runs) or time.monotonic() > deadline:
            return states
        dead = dead_components(cluster)
        if dead:  # nothing restarts it: the runs would wait for ever
            raise ClusterError(f"components exited on their own: {dead}\n{cluster.log_tails(60)}")
        time.sleep(3)


def run_round(
    settings: ChaosSettings, work: Path, db_url: str | None, log: Callable[[str], None] = print
) -> ChaosResult:
    """Boot, start the controller, trigger, inject ``settings.faults``, wait, analyse (see the module
    docstring). ``work`` is an empty folder for DAGs, data, leases and logs."""
    stress = _stress()
    lease_dir = work / "leases"
    with chaos_cluster(work, settings, db_url) as cluster:
        controller = Controller(cluster, work, settings.interval)
        try:
            cluster.wait_for_dags(["llm_pipeline", "hparam_sweep"], timeout=600)
            controller.start()
            with Sampler(cluster, lease_dir) as sampler:
                started = time.monotonic()
                t0 = time.time()
                planned = plan_runs(settings, work / "data")
                trigger = Trigger(cluster, planned, hold=settings.hold_for_last_fault).start()
                runs = [(p.dag_id, p.run_id) for p in planned]
                ctx = Context(cluster, controller, sampler, settings, lease_dir, runs)
                reports = []
                time.sleep(settings.first_fault_after)
                released = started
                for n, name in enumerate(settings.faults):
                    if n == len(settings.faults) - 1:
                        trigger.release.set()
                        released = time.monotonic()
                    report = FAULT_FUNCTIONS[name](ctx)
                    log(f"fault {name}: recovery {report.recovery_s} s, {report.detail}")
                    reports.append(report)
                    time.sleep(settings.between_faults)
                trigger.release.set()  # already set unless there were no faults
                triggered = trigger.join(timeout=settings.trigger_spread + 600)
                log(f"triggered {len(triggered)} runs ({trigger.retries} retried triggers)")
                # a held run has the whole timeout from its release
                states = wait_for_runs(
                    cluster, runs, (released if settings.hold_for_last_fault else started) + settings.timeout
                )
                for report in reports:
                    CHECKS.get(report.fault, lambda _c, _r: None)(ctx, report)
                tis = _all_tries(cluster, runs)
            ends = [_ts(cluster.get_run(d, r).get("end_date")) for d, r in runs if states.get(r) in TERMINAL]
            makespan = max((e for e in ends if e), default=time.time()) - t0
            stuck = [r for _, r in runs if states.get(r) not in TERMINAL]
            if stuck:
                log(f"runs stuck: {stuck}\n{cluster.log_tails(60)}")
            ledger = read_ledger(lease_dir / "usage.jsonl")
            overlaps = ledger_overlaps(ledger)
            sampled = table_overlaps(sampler.samples.leases)
            peak, _ = stress.pool_peak(tis, POOL)
            database = cluster.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].split("://", 1)[0]
        finally:
            controller.stop()
    run_states: dict[str, int] = {}
    for state in states.values():
        run_states[state] = run_states.get(state, 0) + 1
    task_states: dict[str, int] = {}
    for ti in tis:
        key = str(ti.get("state"))
        task_states[key] = task_states.get(key, 0) + 1
    return ChaosResult(
        faults_injected=list(settings.faults),
        runs_expected=settings.runs,
        run_states=run_states,
        runs_stuck=stuck,
        task_states=task_states,
        devices_held_twice=len({(d, *sorted((a, b))) for d, a, b in overlaps}) + len(sampled),
        ledger_overlaps=overlaps,
        table_overlaps=len(sampled),
        ledger_records=len(ledger),
        reclaimed_leases=sum(1 for r in ledger if r.get("outcome") == "reclaimed"),
        pool_peak=peak,
        pool_capacity=GPUS,
        makespan_s=makespan,
        started_at=t0,
        failed_tries=sorted(
            f"{ti['dag_id']}/{ti['dag_run_id']}/{ti['task_id']}[{ti.get('map_index', -1)}] "
            f"try {ti.get('try_number')}"
            for ti in tis
            if ti.get("state") == "failed"
        ),
        reports=reports,
        database=database,
        load_avg=os.getloadavg(),
        settings=asdict(settings),
    )


@contextlib.contextmanager
def database(sqlite: bool) -> Iterator[str | None]:
    """A throwaway PostgreSQL URL (None with ``sqlite``: the harness's SQLite)."""
    if sqlite:
        yield None
        return
    with _stress().throwaway_postgres() as url:
        yield url


# ---------------------------------------------------------------------------------------- report


def format_report(result: ChaosResult, baseline: ChaosResult | None = None) -> str:
    """A Markdown summary (what docs/benchmarks/chaos.md records)."""
    extra = ""
    if baseline is not None and baseline.makespan_s > 0:
        extra = (
            f" | {baseline.makespan_s:.0f} s | {result.makespan_s - baseline.makespan_s:+.0f} s "
            f"({(result.makespan_s / baseline.makespan_s - 1) * 100:+.0f} %)"
        )
    lines = [
        "| runs completed / expected | runs stuck | devices held twice | pool peak / capacity | makespan"
        + (" | fault-free makespan | extra makespan |" if baseline else " |"),
        "|---|---|---|---|---|" + ("---|---|" if baseline else ""),
        f"| {result.completed} / {result.runs_expected} | {len(result.runs_stuck)} "
        f"| {result.devices_held_twice} | {result.pool_peak} / {result.pool_capacity} "
        f"| {result.makespan_s:.0f} s{extra} |",
        "",
        "| fault | recovery | detail |",
        "|---|---|---|",
    ]
    for report in result.reports:
        recovery = "n/a" if report.recovery_s is None else f"{report.recovery_s:.1f} s"
        detail = ", ".join(f"{k}={v}" for k, v in report.detail.items())
        lines.append(f"| {report.fault} | {recovery} | {detail} |")
    lines += [
        "",
        f"run states {result.run_states}; task instance tries {result.task_states}; ledger: "
        f"{result.ledger_records} records, {result.reclaimed_leases} reclaimed, "
        f"{len(result.ledger_overlaps)} overlapping pairs; lease table samples with a device in two "
        f"leases: {result.table_overlaps}; failed tries (retried): {result.failed_tries}; "
        f"{result.database}; load average {', '.join(f'{x:.1f}' for x in result.load_avg)}; settings "
        f"{ {k: result.settings.get(k) for k in ('llm', 'sweeps', 'parallelism', 'objective', 'interval')} }",
    ]
    return "\n".join(lines)


def _result_from_json(data: Mapping[str, Any]) -> ChaosResult:
    values = dict(data)
    values["reports"] = [FaultReport(**r) for r in values.get("reports", [])]
    values["ledger_overlaps"] = [tuple(o) for o in values.get("ledger_overlaps", [])]
    values["load_avg"] = tuple(values.get("load_avg", (0.0, 0.0, 0.0)))
    return ChaosResult(**values)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llm", type=int, default=20, help="runs of llm_pipeline")
    parser.add_argument("--sweeps", type=int, default=80, help="runs of hparam_sweep (2 trials each)")
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--interval", type=float, default=2.0, help="controller interval, s")
    parser.add_argument("--parallelism", type=int, default=32, help="LocalExecutor slots")
    parser.add_argument("--objective", default="throughput", help="[gpu_dag] objective")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--rounds", choices=("both", "chaos", "baseline"), default="both")
    parser.add_argument("--baseline-json", type=Path, help="a fault-free round's JSON to compare with")
    parser.add_argument(
        "--trigger-spread",
        type=float,
        default=0.0,
        help="trigger the runs over this many seconds (0: at once)",
    )
    parser.add_argument(
        "--hold-for-last-fault",
        type=int,
        default=0,
        help="the last N runs wait until the last fault begins (work in flight through every fault)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=None,
        help="retries of every task of the DAG copies (default: theirs, 1)",
    )
    parser.add_argument("--sqlite", action="store_true", help="the harness's SQLite instead of PostgreSQL")
    parser.add_argument("--json", type=Path, help="write the (last) round's result as JSON here")
    args = parser.parse_args(argv)
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        parser.error(f"unknown fault(s) {unknown}; choose from {list(FAULTS)}")
    settings = ChaosSettings(
        llm=args.llm,
        sweeps=args.sweeps,
        faults=faults,
        interval=args.interval,
        timeout=args.timeout,
        sqlite=args.sqlite,
        parallelism=args.parallelism,
        objective=args.objective,
        trigger_spread=args.trigger_spread,
        hold_for_last_fault=args.hold_for_last_fault,
        retries=args.retries,
    )
    baseline = _result_from_json(json.loads(args.baseline_json.read_text())) if args.baseline_json else None
    results = []
    rounds = {"both": ("baseline", "chaos"), "chaos": ("chaos",), "baseline": ("baseline",)}[args.rounds]
    for name in rounds:
        chosen = settings if name == "chaos" else ChaosSettings(**{**asdict(settings), "faults": ()})
        with (
            tempfile.TemporaryDirectory(prefix=f"gpu-dag-chaos-{name}-") as tmp,
            database(args.sqlite) as url,
        ):
            print(f"[{name}] {chosen.runs} runs, faults {list(chosen.faults)}", file=sys.stderr, flush=True)
            result = run_round(chosen, Path(tmp), url, log=lambda m: print(m, file=sys.stderr, flush=True))
        if name == "baseline":
            baseline = result
        results.append(result)
        print(f"## {name}\n\n{format_report(result, baseline if name == 'chaos' else None)}\n", flush=True)
    if args.json:
        args.json.write_text(json.dumps(asdict(results[-1]), indent=2, default=str))
    last = results[-1]
    ok = last.completed == last.runs_expected and last.devices_held_twice == 0 and last.pool_peak <= GPUS
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
