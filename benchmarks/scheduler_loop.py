"""Does the scheduler wait on us? 200 DAGs on a real scheduler, Airflow's stock weight rule vs ours.

Issue #14.2: no ``get_weight`` call may keep the scheduler loop busy; plans are made off the loop. This
benchmark runs the same workload three times on a real Airflow 3.3 (api-server, scheduler, dag-processor,
LocalExecutor, PostgreSQL by default), once per weight rule:

- ``stock``: Airflow's default ``downstream`` rule;
- ``critical_path``: ``CRITICAL_PATH_WEIGHT_RULE``;
- ``packing``: ``PACKING_WEIGHT_RULE`` with ``[gpu_dag] pools`` set, so every new DAG version is planned
  in the background (a thread and a subprocess of the scheduler at ``[gpu_dag] planner_nice``, 19), as
  shipped;
- ``packing_nice0`` (opt-in, for comparison): the same with ``planner_nice = 0`` (the planning
  subprocess at the scheduler's own priority, as before the setting existed).

The workload: ``--dags`` DAGs (default 200) written into a temporary DAG folder, most of 5-300 tasks and
``--large`` of 1,000-2,500 tasks (a root ``start`` task in ``default_pool``, then a layered graph of GPU
tasks in the 4-slot pool ``bench_gpu``; the large ones also have a mapped task of four GPU shards).
Every DAG is scheduled on its own asset, so its run is created by the **scheduler** (runs triggered over
REST get their weights in the api-server instead); the benchmark
posts one asset event per DAG, spread evenly over ``--window`` seconds, and a third of the way through
rewrites the files of some DAGs (two large ones among them: one task more, other estimates) so the
dag-processor makes new versions while runs are being created.

Measured, each as p50 / p99 / max, per round:

- **scheduler loop duration**: Airflow's own ``scheduler.scheduler_loop_duration`` timer, received by a
  StatsD listener on 127.0.0.1 (``[metrics] statsd_on = True``; Airflow's StatsD logger needs the
  ``statsd`` package), every loop from the first asset event to the end of the drain;
- **trigger to first task queued**: asset event timestamp -> ``queued_when`` of the run's ``start`` task;
- **time in get_weight**: every call timed by ``benchmarks/plugins/scheduler_loop/timed_weights.py``
  (the stock rule is timed the same way).

and the ratio ours / stock at p99 (target: within 1.2x; ``get_weight`` p99 at most about 50 ms).

``--first-weight`` starts no Airflow: it times, in this process, the first ``get_weight`` of new versions
of one generated DAG (``--first-weight-tasks``, default 5,000) without a mapped task and with one, parsed
through the provider's cluster policy and serialized as the dag-processor does, and of a second object of
each version (an api-server loads one per request), and counts the calls that analysed the DAG in the
calling thread (issue #40: none may).

    .venv/bin/python benchmarks/scheduler_loop.py            # about 15 minutes on 2 cores, PostgreSQL
    .venv/bin/python benchmarks/scheduler_loop.py --quick    # smoke test: 40 DAGs, a 45 s window
    .venv/bin/python benchmarks/scheduler_loop.py --first-weight   # the first get_weight of a new version
    options: --dags N --large N --window S --rules stock,critical_path,packing[,packing_nice0] --sqlite
             --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import random
import re
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the repository's package and benchmarks/stress.py
    sys.path.insert(0, str(ROOT))

from airflow_gpu_dag.testing import AirflowCluster  # noqa: E402

PLUGINS_FOLDER = ROOT / "benchmarks" / "plugins" / "scheduler_loop"
TIMING_FILE_ENV = "GPU_DAG_BENCH_TIMING_FILE"
POOL = "bench_gpu"
POOL_SLOTS = 4
LOOP_METRIC = "scheduler.scheduler_loop_duration"
RULES = {
    "stock": "timed_weights.TimedDownstreamWeight",
    "critical_path": "timed_weights.TimedCriticalPathWeight",
    "packing": "timed_weights.TimedPackingWeight",
    "packing_nice0": "timed_weights.TimedPackingWeight",
}
#: Extra settings of a round: ``packing_nice0`` plans at the scheduler's own CPU priority.
ROUND_ENV = {"packing_nice0": {"AIRFLOW__GPU_DAG__PLANNER_NICE": "0"}}
LARGE_SIZES = (1000, 1500, 1000, 2000, 1200, 2500, 1000, 1800)


# ---------------------------------------------------------------------------------------- statistics


@dataclass
class Spread:
    """p50 / p99 / max of a sample (nearest rank), and its size."""

    n: int = 0
    p50: float = math.nan
    p99: float = math.nan
    max: float = math.nan

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        ordered = sorted(v for v in values if math.isfinite(v))
        if not ordered:
            return cls()

        def rank(q: float) -> float:
            return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

        return cls(len(ordered), rank(0.50), rank(0.99), ordered[-1])


def ratio(ours: float, stock: float) -> float:
    """``ours / stock`` (nan when either is unknown or stock is 0)."""
    if not (math.isfinite(ours) and math.isfinite(stock)) or stock == 0:
        return math.nan
    return ours / stock


# ---------------------------------------------------------------------------------------- StatsD


def parse_statsd(packet: str) -> list[tuple[str, float, str]]:
    """``name:value|type`` lines of a StatsD packet (sample rates and tags ignored); bad lines skipped."""
    out = []
    for line in packet.splitlines():
        name, _, rest = line.strip().partition(":")
        value, _, kind = rest.partition("|")
        try:
            out.append((name, float(value), kind.split("|")[0]))
        except ValueError:
            continue
    return out


class StatsdListener:
    """A UDP StatsD sink on 127.0.0.1 keeping ``(received_at, value)`` of the metrics whose name ends
    with one of ``names``."""

    def __init__(self, names: Sequence[str] = (LOOP_METRIC,)) -> None:
        self.names = tuple(names)
        self.samples: dict[str, list[tuple[float, float]]] = {n: [] for n in self.names}
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="statsd-listener", daemon=True)

    def __enter__(self) -> StatsdListener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            now = time.time()
            for name, value, _kind in parse_statsd(data.decode(errors="replace")):
                for wanted in self.names:
                    if name.endswith(wanted):
                        self.samples[wanted].append((now, value))

    def values(self, name: str, since: float, until: float) -> list[float]:
        return [v for at, v in list(self.samples[name]) if since <= at <= until]


# ---------------------------------------------------------------------------------------- DAG files


@dataclass(frozen=True)
class DagSpec:
    """One generated DAG: its id, size, layout seed and the file it is written to."""

    dag_id: str
    tasks: int
    seed: int
    file: str


def dag_specs(n_dags: int, n_large: int, seed: int = 14) -> list[DagSpec]:
    """``n_dags`` DAGs: ``n_large`` of 1,000-2,500 tasks (one per file), the others of 5-300 tasks (60 %
    5-20, 30 % 20-100, 10 % 100-300), ten per file."""
    rng = random.Random(seed)
    specs = [
        DagSpec(
            f"large_{i:02d}", LARGE_SIZES[i % len(LARGE_SIZES)], rng.randrange(10**6), f"large_{i:02d}.py"
        )
        for i in range(n_large)
    ]
    for i in range(n_dags - n_large):
        draw = rng.random()
        size = (
            rng.randint(5, 20)
            if draw < 0.6
            else rng.randint(20, 100)
            if draw < 0.9
            else rng.randint(100, 300)
        )
        specs.append(DagSpec(f"dag_{i:03d}", size, rng.randrange(10**6), f"group_{i // 10:02d}.py"))
    return specs


DAG_FILE = '''"""Generated by benchmarks/scheduler_loop.py (version {version}): {count} DAGs on assets."""

from __future__ import annotations

import random

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Asset

from airflow_gpu_dag import gpu_hints

WEIGHT_RULE = {rule!r}
VERSION = {version}
SPECS = {specs!r}
MAPPED_FROM = {mapped_from!r}  # DAGs of at least this many tasks get a mapped task (four shards)


def build(dag_id: str, tasks: int, seed: int) -> DAG:
    rng = random.Random(seed)
    width = max(2, int(tasks**0.5))
    with DAG(
        dag_id,
        schedule=[Asset(f"bench://{{dag_id}}")],
        catchup=False,
        max_active_tasks=10_000,
        default_args={{"weight_rule": WEIGHT_RULE, "retries": 0}},
        tags=["scheduler-loop-benchmark"],
    ) as dag:
        start = BashOperator(task_id="start", bash_command="true", executor_config=gpu_hints(duration=0))
        layers, made = [[start]], 1
        mapped = tasks >= MAPPED_FROM
        # a new version has one task more; the mapped task is one of the DAG's tasks
        total = tasks + (1 if VERSION else 0) - (1 if mapped else 0)
        while made < total:
            layer = []
            for _ in range(min(width, total - made)):
                gpus = rng.choice((1, 1, 2))
                task = BashOperator(
                    task_id=f"t{{made}}",
                    bash_command="sleep 20",
                    pool={pool!r},
                    pool_slots=gpus,
                    executor_config=gpu_hints(duration=rng.randint(600, 7200) + 60 * VERSION, gpus=gpus),
                )
                for up in rng.sample(layers[-1], min(len(layers[-1]), rng.randint(1, 3))):
                    up >> task
                layer.append(task)
                made += 1
            layers.append(layer)
        if mapped:  # one mapped task: four GPU shards after the root
            shards = BashOperator.partial(
                task_id="shard",
                pool={pool!r},
                executor_config=gpu_hints(duration=900 + 60 * VERSION, gpus=1),
            ).expand(bash_command=["sleep 20"] * 4)
            start >> shards
    return dag


for _dag_id, _tasks, _seed in SPECS:
    globals()[_dag_id] = build(_dag_id, _tasks, _seed)
'''


#: The generated DAGs of at least this many tasks (the large ones) have a mapped task.
MAPPED_FROM = 1000


def render_file(
    specs: Sequence[DagSpec], rule: str, version: int = 0, mapped_from: int | None = MAPPED_FROM
) -> str:
    """The Python source of one DAG file holding ``specs`` (``mapped_from``: the DAGs of at least that
    many tasks get a mapped task; None: none does)."""
    rows = [(s.dag_id, s.tasks, s.seed) for s in specs]
    return DAG_FILE.format(
        version=version,
        count=len(rows),
        rule=rule,
        specs=rows,
        pool=POOL,
        mapped_from=mapped_from if mapped_from is not None else 10**9,
    )


def write_dags(
    folder: Path, specs: Sequence[DagSpec], rule: str, versions: dict[str, int] | None = None
) -> None:
    """Write every file of ``specs`` (``versions``: file name -> version, default 0)."""
    by_file: dict[str, list[DagSpec]] = {}
    for spec in specs:
        by_file.setdefault(spec.file, []).append(spec)
    for name, members in by_file.items():
        (folder / name).write_text(render_file(members, rule, (versions or {}).get(name, 0)))


def reversioned_files(specs: Sequence[DagSpec]) -> list[str]:
    """The files rewritten during the window: two large DAGs and two files of small ones (about 10 %)."""
    large = sorted({s.file for s in specs if s.dag_id.startswith("large_")})[:2]
    groups = sorted({s.file for s in specs if s.dag_id.startswith("dag_")})
    return large + groups[1:3]


def trigger_order(specs: Sequence[DagSpec], rewritten: Sequence[str], seed: int = 7) -> list[str]:
    """The order the DAGs' asset events are posted in: shuffled, except that most re-versioned DAGs come
    in the last third (after their new version is parsed) and a few in the first (their running runs get
    the new version)."""
    rng = random.Random(seed)
    again = [s.dag_id for s in specs if s.file in rewritten]
    rest = [s.dag_id for s in specs if s.file not in rewritten]
    rng.shuffle(rest)
    early, late = again[: max(1, len(again) // 4)], again[max(1, len(again) // 4) :]
    cut = len(rest) // 3
    return early + rest[:cut] + rest[cut:] + late


# ---------------------------------------------------------------------------------------- timings


@dataclass(frozen=True)
class WeightCall:
    pid: int
    at: float
    rule: str
    seconds: float
    dag_id: str
    task_id: str


def read_weight_calls(path: Path) -> list[WeightCall]:
    """The lines the timing plugin wrote (bad lines skipped)."""
    if not path.exists():
        return []
    calls = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 6:
            with contextlib.suppress(ValueError):
                calls.append(
                    WeightCall(int(parts[0]), float(parts[1]), parts[2], float(parts[3]), *parts[4:])
                )
    return calls


_PLANNED = re.compile(r"planned DAG '(?P<dag>[^']+)' \((?P<tasks>\d+) tasks\) in (?P<s>[\d.]+)s")


def planned_dags(scheduler_log: str) -> list[tuple[str, int, float]]:
    """``(dag_id, tasks, seconds)`` of the packing plans the scheduler's background planner logged."""
    return [(m["dag"], int(m["tasks"]), float(m["s"])) for m in _PLANNED.finditer(scheduler_log)]


def _ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


# ---------------------------------------------------------------------------------------- one round


@dataclass
class RoundResult:
    """What one round (one weight rule) measured; durations in milliseconds."""

    rule: str
    dags: int
    tasks: int
    window_s: float
    loop_ms: Spread
    first_queued_ms: Spread
    get_weight_ms: Spread
    get_weight_scheduler_ms: Spread
    get_weight_calls_by_component: dict[str, int]
    get_weight_over_50ms: list[tuple[str, str, float]]  # (dag_id, task_id, ms) of the calls over 50 ms
    runs_triggered: int
    runs_queued: int
    rewritten_reparsed: int
    new_versions: int
    plans: int
    plan_max_s: float
    load_avg: tuple[float, float, float]
    database: str
    notes: list[str] = field(default_factory=list)


def _wait_parsed(cluster: AirflowCluster, specs: Sequence[DagSpec], timeout: float) -> dict[str, int]:
    """Wait until every DAG is serialized and its asset exists; returns asset name -> asset id (Airflow
    normalises the URI, ``bench://x`` -> ``bench://x/``; the name stays as written)."""
    deadline = time.monotonic() + timeout
    wanted = {f"bench://{s.dag_id}" for s in specs}
    while True:
        dags = cluster.api("GET", "/dags", params={"limit": 1}).json().get("total_entries", 0)
        assets = {a["name"]: int(a["id"]) for a in _stress().list_pages(cluster, "/assets", "assets")}
        if dags >= len(specs) and wanted <= set(assets):
            return assets
        if time.monotonic() > deadline:
            errors = [e.get("filename") for e in cluster.import_errors()]
            raise TimeoutError(
                f"{dags}/{len(specs)} DAGs parsed, {len(wanted & set(assets))} assets after {timeout:.0f}s; "
                f"import errors: {errors}\n{cluster.log_tails(20)}"
            )
        time.sleep(3)


def bench_cluster(
    folder: Path, rule: str, timing_file: Path, statsd_port: int, db_url: str | None
) -> AirflowCluster:
    """An (unstarted) cluster for one round."""
    env = {
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
        "AIRFLOW__GPU_DAG__POOLS": json.dumps({POOL: POOL_SLOTS}),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "10000",
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd_port),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        # parse every file once, then only the files rewritten (sorted by modification time)
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
        "AIRFLOW__DAG_PROCESSOR__FILE_PARSING_SORT_MODE": "modified_time",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "2",
        "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "600",
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600",
        TIMING_FILE_ENV: str(timing_file),
        **ROUND_ENV.get(rule, {}),
    }
    if db_url:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db_url
    return AirflowCluster(folder, pools={POOL: POOL_SLOTS}, env=env, parallelism=16, boot_timeout=600)


def run_round(
    rule: str,
    specs: Sequence[DagSpec],
    *,
    window: float,
    db_url: str | None,
    drain: float = 60.0,
    parse_timeout: float = 900.0,
) -> RoundResult:
    """Boot a cluster on the DAGs written for ``rule``, post the asset events over ``window`` seconds,
    rewrite some files a third of the way in, drain, and measure (see the module docstring)."""
    with (
        tempfile.TemporaryDirectory(prefix=f"gpu-dag-loop-{rule}-") as tmp,
        StatsdListener([LOOP_METRIC]) as statsd,
    ):
        folder = Path(tmp) / "dags"
        folder.mkdir()
        timing_file = Path(tmp) / "get_weight.txt"
        write_dags(folder, specs, RULES[rule])
        rewritten = reversioned_files(specs)
        order = trigger_order(specs, rewritten)
        with bench_cluster(folder, rule, timing_file, statsd.port, db_url) as cluster:
            assets = _wait_parsed(cluster, specs, parse_timeout)
            components = _stress()._pid_components(cluster)
            events: dict[str, float] = {}
            t0 = time.time()
            step = window / max(1, len(order))
            rewrote = False
            for i, dag_id in enumerate(order):
                if not rewrote and i >= len(order) // 3:
                    write_dags(
                        folder,
                        [s for s in specs if s.file in rewritten],
                        RULES[rule],
                        dict.fromkeys(rewritten, 1),
                    )
                    rewrote = True
                delay = t0 + i * step - time.time()
                if delay > 0:
                    time.sleep(delay)
                body = cluster.api(
                    "POST", "/assets/events", json={"asset_id": assets[f"bench://{dag_id}"]}
                ).json()
                events[dag_id] = _ts(body.get("timestamp")) or time.time()
                components.update(_stress()._pid_components(cluster))
            first_queued = _drain(cluster, events, drain)
            t_end = time.time()
            components.update(_stress()._pid_components(cluster))
            reparsed, new_versions = _reversioned(cluster, [s for s in specs if s.file in rewritten])
            plans = planned_dags(cluster.read_log("scheduler"))
            database = cluster.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].split("://", 1)[0]
        loop = statsd.values(LOOP_METRIC, t0, t_end)
        calls = read_weight_calls(timing_file)  # this round's rule only (a fresh file per round)
        by_component: dict[str, int] = {}
        for call in calls:
            name = components.get(call.pid, "other")
            by_component[name] = by_component.get(name, 0) + 1
        notes = []
        if not loop:
            notes.append("no scheduler_loop_duration metric received (is the statsd package installed?)")
        return RoundResult(
            rule=rule,
            dags=len(specs),
            tasks=sum(s.tasks for s in specs),
            window_s=window,
            loop_ms=Spread.of(loop),
            first_queued_ms=Spread.of([v * 1e3 for v in first_queued.values()]),
            get_weight_ms=Spread.of([c.seconds * 1e3 for c in calls]),
            get_weight_scheduler_ms=Spread.of(
                [c.seconds * 1e3 for c in calls if components.get(c.pid) == "scheduler"]
            ),
            get_weight_calls_by_component=by_component,
            get_weight_over_50ms=[
                (c.dag_id, c.task_id, round(c.seconds * 1e3, 1)) for c in calls if c.seconds > 0.05
            ],
            runs_triggered=len(events),
            runs_queued=len(first_queued),
            rewritten_reparsed=reparsed,
            new_versions=new_versions,
            plans=len(plans),
            plan_max_s=max((p[2] for p in plans), default=0.0),
            load_avg=psutil.getloadavg(),
            database=database,
            notes=notes,
        )


def _reversioned(cluster: AirflowCluster, specs: Sequence[DagSpec]) -> tuple[int, int]:
    """Of the rewritten DAGs: how many the dag-processor parsed again (one task more), and how many got a
    new DAG version (Airflow updates a version that has no runs yet in place instead)."""
    reparsed = versions = 0
    for spec in specs:
        tasks = cluster.api("GET", f"/dags/{spec.dag_id}/tasks").json().get("total_entries", 0)
        reparsed += int(tasks) == spec.tasks + 1
        found = cluster.api("GET", f"/dags/{spec.dag_id}/dagVersions", params={"limit": 1}).json()
        versions += int(found.get("total_entries", 0)) > 1
    return reparsed, versions


def _drain(cluster: AirflowCluster, events: dict[str, float], timeout: float) -> dict[str, float]:
    """Wait (at most ``timeout`` s) until every triggered DAG's run has its ``start`` task queued; returns
    DAG id -> seconds from the asset event to that task's ``queued_when``."""
    deadline = time.monotonic() + timeout
    found: dict[str, float] = {}
    while True:
        runs = _stress().list_pages(cluster, "/dags/~/dagRuns", "dag_runs", run_type="asset_triggered")
        for run in runs:
            dag_id = run["dag_id"]
            if dag_id in found or dag_id not in events:
                continue
            resp = cluster.api(
                "GET", f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}/taskInstances/start", check=False
            )
            queued = _ts(resp.json().get("queued_when")) if resp.status_code == 200 else None
            if queued is not None:
                found[dag_id] = queued - events[dag_id]
        if len(found) == len(events) or time.monotonic() > deadline:
            return found
        time.sleep(3)


# ---------------------------------------------------------------------------------------- report


def _fmt(value: float, digits: int = 1) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:,.{digits}f}"


def format_report(results: Sequence[RoundResult]) -> str:
    """A Markdown table, rules side by side, ratios ours / stock at p99."""
    stock = next((r for r in results if r.rule == "stock"), None)
    ours = [r for r in results if r.rule != "stock"]
    header = (
        "| metric | "
        + " | ".join(r.rule for r in results)
        + "".join(f" | {r.rule} / stock (p99)" for r in ours if stock)
    )
    lines = [header + " |", "|---" * (1 + len(results) + (len(ours) if stock else 0)) + "|"]
    metrics = [
        ("scheduler loop, ms", "loop_ms"),
        ("trigger -> first task queued, ms", "first_queued_ms"),
        ("get_weight per call (all processes), ms", "get_weight_ms"),
        ("get_weight per call (scheduler), ms", "get_weight_scheduler_ms"),
    ]
    for label, attr in metrics:
        cells = []
        for r in results:
            s: Spread = getattr(r, attr)
            digits = 3 if "get_weight" in attr else 0
            cells.append(f"{_fmt(s.p50, digits)} / {_fmt(s.p99, digits)} / {_fmt(s.max, digits)} (n={s.n})")
        ratios = [_fmt(ratio(getattr(r, attr).p99, getattr(stock, attr).p99), 2) + "x" for r in ours if stock]
        lines.append(f"| {label} p50 / p99 / max | " + " | ".join(cells + ratios) + " |")
    lines.append("")
    for r in results:
        slowest = sorted(r.get_weight_over_50ms, key=lambda call: -call[2])[:5]
        lines.append(
            f"- {r.rule}: {r.dags} DAGs ({r.tasks:,} tasks), {r.runs_triggered} runs triggered over "
            f"{r.window_s:.0f} s, {r.runs_queued} with their first task queued, {r.rewritten_reparsed} "
            f"DAGs rewritten and parsed again ({r.new_versions} new DAG versions), {r.plans} packing plans "
            f"(longest {r.plan_max_s:.2f} s), "
            f"get_weight calls {r.get_weight_calls_by_component}, {len(r.get_weight_over_50ms)} over 50 ms "
            f"({', '.join(f'{dag} {ms:.0f}' for dag, _task, ms in slowest)}), "
            f"load average {', '.join(f'{x:.1f}' for x in r.load_avg)}, {r.database}"
            + (f"; {'; '.join(r.notes)}" if r.notes else "")
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- first weights


@dataclass
class FirstWeights:
    """What the first ``get_weight`` of a new DAG version costs in the calling thread (the scheduler
    loop), seconds: ``first`` for the first DAG object of the version, ``same_version`` for another
    object of the same version (an api-server loads one per request), each as wall time and as the
    calling thread's CPU time (``*_cpu``: what the call costs a core, whatever else the machine runs);
    ``analysed_inline`` how many of those calls analysed the DAG in the calling thread."""

    tasks: int
    mapped: bool
    first: list[float] = field(default_factory=list)
    same_version: list[float] = field(default_factory=list)
    first_cpu: list[float] = field(default_factory=list)
    same_version_cpu: list[float] = field(default_factory=list)
    analysed_inline: int = 0


def first_weight_costs(tasks: int = 5000, repeats: int = 5, rule: str = "packing") -> list[FirstWeights]:
    """Time the first ``get_weight`` of ``repeats`` new versions of a generated ``tasks``-task DAG (the
    benchmark's DAG file, parsed through the provider's cluster policy and serialized as the
    dag-processor does), without a mapped task and with one, and of a second object of each version.
    In this process: no Airflow is started (``main`` sets ``[gpu_dag] pools`` and turns learned durations
    off: there is no database)."""
    from types import SimpleNamespace

    from airflow.serialization.serialized_objects import DagSerialization

    import airflow_gpu_dag.priority.weights as weights_module
    from airflow_gpu_dag.airflow.policy import dag_policy
    from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, PackingPriorityStrategy

    strategy_class = PackingPriorityStrategy if rule == "packing" else CriticalPathPriorityStrategy
    path = f"airflow_gpu_dag.priority_strategy.{strategy_class.__name__}"
    loop_thread = threading.current_thread()
    inline: list[int] = []
    build = weights_module.build_basis

    def counting(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is loop_thread:
            inline.append(1)
        return build(*args, **kwargs)

    def ti(dag: Any, version_id: str) -> Any:
        task_id = "t1"
        return SimpleNamespace(
            task=dag.task_dict[task_id],
            task_id=task_id,
            dag_id=dag.dag_id,
            run_id="manual__2026-11-30T12:00:00+00:00",
            map_index=-1,
            dag_version_id=version_id,
        )

    small: dict[str, Any] = {}
    exec(compile(render_file([DagSpec("warm_up", 5, 1, "w.py")], path), "w.py", "exec"), small)
    dag_policy(small["warm_up"])
    warm_up = DagSerialization.from_dict(DagSerialization.to_dict(small["warm_up"]))
    results = []
    weights_module.build_basis = counting
    try:
        for mapped in (False, True):
            result = FirstWeights(tasks, mapped)
            for version in range(repeats):
                spec = DagSpec("first_weight", tasks, 14 + version, "first_weight.py")
                source = render_file([spec], path, version, mapped_from=tasks if mapped else None)
                namespace: dict[str, Any] = {}
                exec(compile(source, "first_weight.py", "exec"), namespace)
                dag = namespace["first_weight"]
                dag_policy(dag)  # the dag-processor: validate, derive the figures
                data = DagSerialization.to_dict(dag)
                first, second = DagSerialization.from_dict(data), DagSerialization.from_dict(data)
                strategy_class._weights.reset()
                strategy_class().get_weight(ti(warm_up, "warm-up"))  # settings read, threads started
                background = strategy_class._weights.background
                if background is not None:
                    background.wait_idle(600)
                inline.clear()
                for dag_object, wall, cpu in (
                    (first, result.first, result.first_cpu),
                    (second, result.same_version, result.same_version_cpu),
                ):
                    started, started_cpu = time.perf_counter(), time.thread_time()
                    strategy_class().get_weight(ti(dag_object, f"v{version}"))
                    wall.append(time.perf_counter() - started)
                    cpu.append(time.thread_time() - started_cpu)
                result.analysed_inline += len(inline)
                background = strategy_class._weights.background
                if background is not None:
                    background.wait_idle(600)
            results.append(result)
    finally:
        weights_module.build_basis = build
        strategy_class._weights.reset()
    return results


def format_first_weights(results: Sequence[FirstWeights]) -> str:
    """A Markdown table: per DAG (with or without a mapped task), the median and the largest of each
    cost, wall time and the calling thread's CPU time."""
    lines = [
        "| DAG | first get_weight of a new version: wall, median / max | CPU, median / max "
        "| another object of the version: wall | CPU | analysed in the calling thread |",
        "|---|---|---|---|---|---|",
    ]

    def cell(values: Sequence[float]) -> str:
        spread = Spread.of(values)
        return f"{spread.p50:.4f} / {spread.max:.4f} s"

    for r in results:
        name = f"{r.tasks:,} tasks{', one mapped' if r.mapped else ''}"
        lines.append(
            f"| {name} | {cell(r.first)} | {cell(r.first_cpu)} "
            f"| {cell(r.same_version)} | {cell(r.same_version_cpu)} "
            f"| {r.analysed_inline} of {2 * len(r.first)} calls |"
        )
    return "\n".join(lines)


def _stress() -> Any:
    """``benchmarks/stress.py`` (its throwaway PostgreSQL, process-tree and paging helpers), loaded by
    path: ``benchmarks`` is no package."""
    spec = importlib.util.spec_from_file_location(
        "gpu_dag_benchmark_stress", ROOT / "benchmarks" / "stress.py"
    )
    assert spec and spec.loader
    module = sys.modules.get(spec.name)
    if module is None:  # loaded once (its process-tree and paging helpers are called in loops)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dags", type=int, default=200)
    parser.add_argument("--large", type=int, default=5, help="DAGs of 1,000-2,500 tasks among them")
    parser.add_argument(
        "--window", type=float, default=150.0, help="seconds over which the runs are triggered"
    )
    parser.add_argument("--rules", default="stock,critical_path,packing")
    parser.add_argument("--quick", action="store_true", help="smoke test: 40 DAGs (1 large), 45 s window")
    parser.add_argument("--sqlite", action="store_true", help="SQLite instead of a throwaway PostgreSQL")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument(
        "--first-weight",
        action="store_true",
        help="only time the first get_weight of new versions of one DAG (no Airflow is started)",
    )
    parser.add_argument("--first-weight-tasks", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.first_weight:
        os.environ.setdefault("AIRFLOW__GPU_DAG__POOLS", json.dumps({POOL: POOL_SLOTS}))
        os.environ.setdefault("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "false")  # no database here
        costs = first_weight_costs(args.first_weight_tasks, args.repeats)
        print(format_first_weights(costs))
        if args.json:
            args.json.write_text(json.dumps([asdict(c) for c in costs], indent=2))
        return 0
    if args.quick:
        args.dags, args.large, args.window = 40, 1, 45.0
    try:
        import statsd  # noqa: F401  (Airflow's StatsD logger needs it)
    except ImportError:
        parser.error("the scheduler loop metric needs the statsd package: pip install 'statsd==4.0.1'")
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    unknown = sorted(set(rules) - set(RULES))
    if unknown:
        parser.error(f"unknown rule(s) {unknown}; choose from {sorted(RULES)}")
    specs = dag_specs(args.dags, args.large)
    results = []
    for rule in rules:
        with contextlib.ExitStack() as stack:
            db_url = None if args.sqlite else stack.enter_context(_stress().throwaway_postgres())
            started = time.monotonic()
            result = run_round(rule, specs, window=args.window, db_url=db_url)
            result.notes.append(f"round took {time.monotonic() - started:.0f} s")
            results.append(result)
            print(f"[{rule}] done: {result.notes[-1]}", file=sys.stderr, flush=True)
    print(format_report(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
