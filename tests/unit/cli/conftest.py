"""Shared fakes and helpers of the tests under ``tests/unit/cli/``."""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
import yaml

from airflow_gpu_dag.cli import explain as explain_cli
from airflow_gpu_dag.cli.definition import get_parser
from airflow_gpu_dag.cli.explain_report import (
    build_report,
)
from airflow_gpu_dag.core.policy.objective import ReservationGate, key_weight
from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook
from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.watermark.config import parse_config
from airflow_gpu_dag.watermark.controller import WatermarkController
from airflow_gpu_dag.watermark.durations import ControllerHistory
from airflow_gpu_dag.watermark.sources import CapacityReading
from tests.unit.watermark.conftest import FakeRest, ti

ROOT = Path(__file__).resolve().parents[3]


GOOD = ROOT / "tests" / "integration" / "dags" / "ui"


#: DAG files with a defect each (a cycle, a hidden dependency, an impossible request, ...).
BROKEN = ROOT / "tests" / "fixtures" / "dags_broken"


PIPELINE = "gpu_pipeline"


#: ``airflow gpu-dag simulate`` of one run of the pipeline DAG on 4 GPUs.
ONE_RUN = ("simulate", PIPELINE, "--file", str(GOOD), "--capacity", "gpu_default=4")


#: ``airflow gpu-dag simulate`` of two runs of the pipeline DAG 20 min apart on 4 GPUs, for latency.
SEVERAL_RUNS = (
    "simulate",
    "--file",
    str(GOOD),
    "--trigger",
    f"{PIPELINE}=0",
    "--trigger",
    f"{PIPELINE}=20m",
    "--capacity",
    "gpu_default=4",
    "--objective",
    "latency",
)


def run_cli(*argv: str) -> int:
    """Run ``airflow gpu-dag <argv>`` in-process; returns the exit code (0 when it returned)."""
    args = get_parser().parse_args(["gpu-dag", *argv])
    try:
        args.func(args)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return int(exc.code or 0)
    return 0


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = run_cli(*argv, "--output", "json")
    return code, json.loads(capsys.readouterr().out)


NOW = 1_800_000_000.0


INTERVAL = 5.0


OURS = "airflow_gpu_dag.priority_strategy.CriticalPathPriorityStrategy"


def iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat()


class FakeApi:
    """Pools, DAGs, runs and task instances in memory, with the REST client's method names."""

    def __init__(self) -> None:
        self.pools: dict[str, dict[str, Any]] = {}
        self.tis: list[dict[str, Any]] = []
        self.dags: dict[str, list[dict[str, Any]]] = {}  # dag id -> its tasks (GET /dags/{id}/tasks)
        self.runs: dict[tuple[str, str], dict[str, Any]] = {}
        self.down: RestError | None = None
        self.pages_asked: list[list[tuple[str, Any]]] = []

    def close(self) -> None:
        pass

    def _up(self) -> None:
        if self.down is not None:
            raise self.down

    # -- what explain reads
    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        self._up()
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[0] == "dags" and len(parts) == 2:
            found = parts[1] in self.dags
            return httpx.Response(200 if found else 404, json={"dag_id": parts[1]} if found else {})
        if parts[0] == "dags" and len(parts) == 4 and parts[2] == "dagRuns":
            run = self.runs.get((parts[1], parts[3]))
            return httpx.Response(200 if run else 404, json=run or {"detail": "not found"})
        return httpx.Response(404, json={})

    def recent_runs(self, dag_id: str, limit: int = 5) -> list[dict[str, Any]]:
        self._up()
        runs = [r for (d, _r), r in self.runs.items() if d == dag_id]
        return sorted(runs, key=lambda r: r["run_after"], reverse=True)[:limit]

    def dag_tasks(self, dag_id: str) -> list[dict[str, Any]]:
        self._up()
        return [dict(t) for t in self.dags[dag_id]]

    def run_task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        self._up()
        return [dict(t) for t in self.tis if t["dag_id"] == dag_id and t["dag_run_id"] == run_id]

    def task_instances(self, pools: Any, states: Any) -> list[dict[str, Any]]:
        self._up()
        wanted = {None if s == "no_status" else s for s in states}
        return [dict(t) for t in self.tis if t["pool"] in set(pools) and t["state"] in wanted]

    def pages(self, path: str, key: str, params: Any = ()) -> list[dict[str, Any]]:
        self._up()
        self.pages_asked.append(list(params))
        asked = dict(params)
        return [dict(t) for t in self.tis if t["pool"] == asked.get("pool") and t.get("start_date")]

    def get_pool(self, name: str) -> dict[str, Any] | None:
        self._up()
        return dict(self.pools[name]) if name in self.pools else None

    def task_history(self, dag_id: str, task_id: str, limit: int = 40, states: Any = ()) -> list[Any]:
        return []  # no history: the declared estimates are the learned durations

    # -- what the controller writes
    def set_pool(self, name: str, slots: int, description: str, include_deferred: bool = False) -> Any:
        self.pools[name] = {"name": name, "slots": slots, "description": description}
        return self.pools[name]

    def upstream_task_ids(self, dag_id: str) -> dict[str, list[str]]:
        up: dict[str, list[str]] = {}
        for task in self.dags[dag_id]:
            up.setdefault(task["task_id"], [])
            for down in task.get("downstream_task_ids") or []:
                up.setdefault(down, []).append(task["task_id"])
        return up

    # -- building the state
    def dag(self, dag_id: str, edges: dict[str, list[str]], rule: str = OURS, pool: str = "gpu") -> None:
        self.dags[dag_id] = [
            {"task_id": t, "downstream_task_ids": d, "weight_rule": rule, "pool": pool}
            for t, d in edges.items()
        ]

    def run(self, dag_id: str, run_id: str, started: float, state: str = "running") -> None:
        self.runs[(dag_id, run_id)] = {
            "dag_id": dag_id,
            "dag_run_id": run_id,
            "state": state,
            "start_date": iso(started),
            "run_after": iso(started),
            "logical_date": iso(started),
        }

    def ti(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        state: str | None,
        slots: int = 1,
        key_at: float = NOW,
        duration: float = 60.0,
        start: float | None = None,
        end: float | None = None,
        scheduled: float | None = None,
        pool: str = "gpu",
        weight: int | None = None,
        cpu: bool = False,
    ) -> None:
        hints: dict[str, Any] = {"duration_s": duration} if cpu else {"duration_s": duration, "gpus": slots}
        self.tis.append(
            {
                "dag_id": dag_id,
                "dag_run_id": run_id,
                "task_id": task_id,
                "map_index": -1,
                "state": state,
                "pool": pool,
                "pool_slots": slots,
                "priority_weight": key_weight(key_at) if weight is None else weight,
                "executor_config": str({"gpu_dag": hints}),
                "logical_date": iso(NOW - 3600),
                "start_date": iso(start),
                "end_date": iso(end),
                "scheduled_when": iso(scheduled),
            }
        )


class Capacity:
    kind = "fake"

    def read(self) -> CapacityReading:
        return CapacityReading(4, "fake 4")


def tick(api: FakeApi, at: float = NOW) -> None:
    """One tick of the real watermark controller on ``api`` (writes pool 'gpu' and its state)."""
    config = parse_config(
        {
            "interval": INTERVAL,
            "pools": {"gpu": {"source": 0}},
            "lease": {"lock_file": None, "variable": None},
        }
    )
    gate = ReservationGate(gap=4 * 3600, overdue=8 * 3600)
    client: Any = api
    controller = WatermarkController(
        config, client, {"gpu": Capacity()}, default_duration=60.0, clock=lambda: at
    )
    controller.gate = gate
    controller.tick()


def reservation_state() -> FakeApi:
    """A wide task (4 slots) of 'train' waits while 'hold' holds 3 slots until NOW+90: the controller
    reserves for it. Then 'evals' is triggered: its 1-slot task waits behind the reservation."""
    api = FakeApi()
    api.dag("train", {"hold": [], "wide": []})
    api.dag("evals", {"small": ["report"], "report": []})
    api.run("train", "t1", NOW - 600)
    api.run("evals", "e1", NOW - 5)
    api.ti("train", "t1", "hold", "running", slots=3, key_at=NOW - 900, duration=100, start=NOW - 10)
    api.ti(
        "train", "t1", "wide", "scheduled", slots=4, key_at=NOW - 5 * 3600, duration=30, scheduled=NOW - 20
    )
    api.ti("evals", "e1", "small", "scheduled", key_at=NOW + 60, duration=120, scheduled=NOW - 4)
    api.ti("evals", "e1", "report", None, key_at=NOW + 200, duration=10)
    return api


def report(
    api: FakeApi, dag_id: str, run_id: str | None = None, task: str | None = None, now: float = NOW
) -> Any:
    return build_report(
        api,
        dag_id,
        run_id,
        task,
        history=ControllerHistory(api, 60.0, clock=lambda: 0.0),
        now=now,
        gate=ReservationGate(gap=4 * 3600, overdue=8 * 3600),
    )


# -- learned durations ------------------------------------------------------------------------------
def fake_history(monkeypatch: pytest.MonkeyPatch, durations: dict[str, float], runs: int = 4) -> None:
    """The metadata DB's history as ``airflow.history`` reads it: ``runs`` successful runs of each task
    taking its ``durations`` seconds, and no mapped tasks."""
    from airflow_gpu_dag.airflow import history
    from airflow_gpu_dag.core.analysis.estimates import RunSample

    def read(dag_id: str, task_ids: Any = None, window: int = 20, *, session: Any = None) -> Any:
        return {
            t: [RunSample(d, "success", 1000.0 * i, 1000.0 * i + d) for i in range(runs)]
            for t, d in durations.items()
        }

    monkeypatch.setattr(history, "read_history", read)
    monkeypatch.setattr(history, "read_map_counts", lambda *a, **k: {})


def run_cli_explain(monkeypatch: pytest.MonkeyPatch, api: FakeApi, argv: list[str], now: float = NOW) -> int:
    """``airflow gpu-dag explain ARGV`` on ``api``; its exit code."""
    monkeypatch.setattr(explain_cli, "_client", lambda conn_id: api)
    monkeypatch.setattr(explain_cli, "build_report", functools.partial(build_report, now=now))
    args: argparse.Namespace = get_parser().parse_args(["gpu-dag", "explain", *argv])
    try:
        args.func(args)
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0


# -- a finished run against its plan ---------------------------------------------------------------------
def finished_state() -> FakeApi:
    """'prep' ran 20 s longer than its 60-s estimate; 'train' (2 slots) then waited 30 s: the pool was
    full with another DAG's 3-slot task until +110; then it waited 10 s more while slots were held for a
    4-slot task of higher weight; 'eval' ran as planned after it."""
    api = FakeApi()
    t0 = NOW - 3600
    api.dag("pipe", {"prep": ["train"], "train": ["eval"], "eval": []})
    api.run("pipe", "p1", t0, state="success")
    api.ti("pipe", "p1", "prep", "success", key_at=t0, duration=60, start=t0, end=t0 + 80, scheduled=t0)
    api.ti(
        "pipe",
        "p1",
        "train",
        "success",
        slots=2,
        key_at=t0 + 60,
        duration=100,
        start=t0 + 120,
        end=t0 + 220,
        scheduled=t0 + 80,
    )
    api.ti(
        "pipe",
        "p1",
        "eval",
        "success",
        key_at=t0 + 160,
        duration=50,
        start=t0 + 220,
        end=t0 + 270,
        scheduled=t0 + 220,
    )
    api.ti("other", "o1", "busy", "success", slots=3, key_at=t0 - 500, start=t0 + 20, end=t0 + 110)
    api.ti(
        "other",
        "o1",
        "big",
        "success",
        slots=4,
        key_at=t0 - 400,
        start=t0 + 400,
        end=t0 + 500,
        scheduled=t0 + 100,
    )
    api.pools["gpu"] = {"name": "gpu", "slots": 4, "description": "GPU pool"}
    return api


def table_column(out: str, index: int, table: int = 0) -> str:
    """The cells of column ``index`` of the ``table``-th table in ``out`` (as printed in a pipe: a line
    of dashes under the header), joined in order (a wrapped cell's lines join back into its text; rows
    follow each other). The dashes give each column's span; a row has blanks between the spans."""
    lines = out.splitlines()
    underlines = [n for n, line in enumerate(lines) if line.startswith("-") and set(line) <= {"-", " "}]
    first = underlines[table]
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[first])]
    parts = []
    for line in lines[first + 1 :]:
        if not line.strip() or any(line[end : end + 1] not in ("", " ") for _, end in spans[:-1]):
            break  # the table ended: an empty line, or text across the gaps between columns
        start, end = spans[index]
        parts.append(line[start : end + 1].strip())
    return "".join(parts)


class ClosingRest(FakeRest):
    def close(self) -> None:
        self.closed = True


@pytest.fixture
def rest(monkeypatch: pytest.MonkeyPatch) -> ClosingRest:
    api = ClosingRest()
    monkeypatch.setattr(AirflowApiHook, "get_client", lambda self: api)
    monkeypatch.setattr("airflow_gpu_dag.metrics.configure", lambda force=False: None)
    api.tis = [
        ti("hold", "running", started=NOW - 10, duration=100),
        ti("wide", "scheduled", slots=4, priority=10),
    ]
    return api


@pytest.fixture
def rest_without_pool(monkeypatch: pytest.MonkeyPatch) -> ClosingRest:
    """An in-memory REST API with no pool yet and one running task, ``hold``, as the watermark command's
    client."""
    api = ClosingRest()
    monkeypatch.setattr(AirflowApiHook, "get_client", lambda self: api)
    monkeypatch.setattr("airflow_gpu_dag.metrics.configure", lambda force=False: None)
    api.tis = [ti("hold", "running", started=NOW - 10, duration=100)]
    return api


def config(tmp_path: Path, **extra: Any) -> str:
    path = tmp_path / "watermark.yaml"
    body = {
        "interval": "30s",
        "lease": {"lock_file": None, "variable": None},
        "pools": {"gpu": {"source": 4, "backfill": False, "lookahead": False}},
        **extra,
    }
    path.write_text(yaml.safe_dump(body))
    return str(path)


# -- DAG files the tests write --------------------------------------------------------------------------
#: The imports a DAG file written by :func:`dag_file` starts with.
DAG_FILE_HEAD = """
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task
from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
"""


def dag_file(folder: Path, name: str, body: str) -> Path:
    """Write ``folder/name``: :data:`DAG_FILE_HEAD` then ``body``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(DAG_FILE_HEAD + body)
    return path


def two_pools_dag_file(folder: Path) -> Path:
    """DAG ``two_pools``: ``a`` (1 h on 2 a100 GPUs of ``gpu_a100``) then ``b`` (30 min on 1 GPU of
    ``gpu_default``)."""
    return dag_file(
        folder,
        "two_pools.py",
        """
with DAG("two_pools", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}):
    a = EmptyOperator(task_id="a", pool="gpu_a100", pool_slots=2,
                      executor_config=gpu_hints(duration="1h", gpus=2, gpu_type="a100"))
    b = EmptyOperator(task_id="b", pool="gpu_default", executor_config=gpu_hints(duration="30m", gpus=1))
    a >> b
""",
    )


def write_sweep(folder: Path) -> None:
    """DAG ``sweep_sim``: four literal 2-GPU trials of 1 h (declared), then a 10-minute pick."""
    (folder / "sweep.py").write_text(
        "from airflow.sdk import DAG, task\n"
        "from airflow_gpu_dag import gpu_hints\n"
        "with DAG('sweep_sim', schedule=None):\n"
        "    @task.gpu(gpus=2, duration='1h')\n"
        "    def trial(lr): return lr\n"
        "    @task(executor_config=gpu_hints(duration='10m'))\n"
        "    def pick(scores): return None\n"
        "    pick(trial.expand(lr=[0.1, 0.01, 0.001, 0.0001]))\n"
    )


#: A task-id prefix longer than a table column.
LONG = "preprocessing_stage_for_the_large_language_model_training_shard_"


#: The two task ids of :func:`long_ids_dag_file`.
LONG_IDS = (f"{LONG}alpha", f"{LONG}bravo")


LONG_IDS_DAG = "long_ids_dag"


def long_ids_dag_file(folder: Path) -> Path:
    """DAG :data:`LONG_IDS_DAG`: two unconnected 1-GPU tasks of 5 min with the :data:`LONG_IDS`."""
    path = folder / "long_ids.py"
    tasks = "\n".join(
        f'    EmptyOperator(task_id="{task_id}", pool="gpu_default", '
        'executor_config=gpu_hints(duration="5m", gpus=1))'
        for task_id in LONG_IDS
    )
    path.write_text(
        "from airflow.providers.standard.operators.empty import EmptyOperator\n"
        "from airflow.sdk import DAG\n"
        "from airflow_gpu_dag import gpu_hints\n"
        f'with DAG("{LONG_IDS_DAG}", schedule=None):\n{tasks}\n'
    )
    return path
