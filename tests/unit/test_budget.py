"""GPU-hour budget: usage from the lease ledger, caps, the gate and its trigger."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import multiprocessing
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import TaskDeferred

from airflow_gpu_dag.authoring import budget_gate
from airflow_gpu_dag.budget import check as gate_module
from airflow_gpu_dag.budget import read_usage
from airflow_gpu_dag.budget.ledger import BudgetLedger, FileBudgetLedger, today
from airflow_gpu_dag.budget.shared import SqlBudgetLedger
from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetClaim, BudgetUsage, claim_id, evaluate
from airflow_gpu_dag.gpu.usage import UsageLedger, UsageRecord
from airflow_gpu_dag.operators.budget import BudgetGateOperator
from airflow_gpu_dag.triggers.budget import BudgetTrigger

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()


@pytest.fixture(autouse=True)
def _deferring(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests exercise the deferring path: a deployment with a triggerer, which turns on
    ``[operators] default_deferrable`` (without it the sensors and gates wait in a worker)."""
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")


def _record(run_id: str, hours: float, devices: int = 1, pool: str = "gpu", end: float = NOW) -> UsageRecord:
    return UsageRecord(
        dag_id="train",
        run_id=run_id,
        task_id="fit",
        try_number=1,
        devices=tuple(range(devices)),
        start=end - hours * 3600 / devices,
        end=end,
        pool=pool,
    )


@pytest.fixture
def ledger(tmp_path) -> str:
    path = tmp_path / "usage.jsonl"
    book = UsageLedger(path)
    book.append(_record("r1", 2.0, devices=2))
    book.append(_record("r1", 1.0))
    book.append(_record("r2", 4.0, pool="gpu"))
    book.append(_record("r2", 8.0, pool="other"))
    book.append(_record("r3", 5.0, end=NOW - 86400))  # yesterday
    return str(path)


def test_read_usage_sums_by_run_and_pool_day(ledger: str) -> None:
    usage = read_usage(ledger, "train", "r1", "gpu", now=NOW)
    assert usage.run_gpu_hours == pytest.approx(3.0)
    assert usage.pool_day_gpu_hours == pytest.approx(7.0)  # r1 3h + r2 4h today; yesterday not counted
    assert usage.day == "2026-11-30"
    assert read_usage(None, "train", "r1", "gpu").run_gpu_seconds == 0.0
    assert read_usage(ledger + ".missing", "train", "r1", "gpu").pool_day_gpu_seconds == 0.0


def test_evaluate_caps() -> None:
    usage = BudgetUsage(run_gpu_seconds=3 * 3600, pool_day_gpu_seconds=7 * 3600, day="2026-11-30")
    assert evaluate(BudgetCap(gpu_hours_per_run=4), usage).allowed
    blocked = evaluate(BudgetCap(gpu_hours_per_run=3), usage)
    assert not blocked.allowed and "cap 3" in blocked.reason
    pool = evaluate(BudgetCap(gpu_hours_per_pool_day=7, pool="gpu"), usage)
    assert not pool.allowed and "pool 'gpu'" in pool.reason and "2026-11-30" in pool.reason
    assert not evaluate(BudgetCap(gpu_hours_per_run=0), BudgetUsage(0, 0, "d")).allowed
    # a request must fit in what is left, claims count like usage
    assert evaluate(BudgetCap(gpu_hours_per_run=4), usage, request_gpu_seconds=3600).allowed
    short = evaluate(BudgetCap(gpu_hours_per_run=4), usage, request_gpu_seconds=3601)
    assert not short.allowed and "this task needs 1.000" in short.reason
    claimed = BudgetUsage(3 * 3600, 0, "d", run_claimed_seconds=1800)
    assert not evaluate(BudgetCap(gpu_hours_per_run=4), claimed, request_gpu_seconds=3600).allowed
    assert "+ 0.500 claimed" in evaluate(BudgetCap(gpu_hours_per_run=4), claimed).reason


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu_hours_per_run": -1}, "gpu_hours_per_run=-1 is negative"),
        ({"gpu_hours_per_run": 0}, "gpu_hours_per_run=0 is zero; a GPU-hour budget must be > 0.*Fix"),
        ({"gpu_hours_per_pool_day": -2.5, "pool_to_cap": "gpu"}, "gpu_hours_per_pool_day=-2.5 is negative"),
        (
            {"gpu_hours_per_run": 1, "claim_gpu_seconds": 7200},
            "expected to use 2 GPU-hours .*could never pass",
        ),
        ({"gpu_hours_per_run": "ten"}, "is not a number of GPU-hours"),
        ({"gpu_hours_per_pool_day": 5}, "needs the pool"),
        ({}, "needs gpu_hours_per_run= or gpu_hours_per_pool_day="),
    ],
)
def test_bad_budgets_fail_at_parse_time(kwargs: dict, message: str) -> None:
    with DAG("b", schedule=None), pytest.raises(ValueError, match=r"DAG 'b', task 'gate': .*" + message):
        BudgetGateOperator(task_id="gate", **kwargs)


def test_budget_gate_wiring_and_default_pool() -> None:
    with DAG("bw", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        fit = EmptyOperator(task_id="fit", pool="gpu_a100")
        prep >> fit
        gate = budget_gate(fit, gpu_hours_per_pool_day=10)
    assert gate.task_id == "fit__budget" and gate.cap.pool == "gpu_a100"
    assert gate.pool == "default_pool"
    assert dag.get_task("prep").downstream_task_ids == {"fit__budget"}
    assert fit.upstream_task_ids == {"fit__budget"}
    assert dag.edge_info["fit__budget"]["fit"]["label"] == "budget"


def test_budget_gate_inside_a_task_group_is_named_once() -> None:
    from airflow.sdk import TaskGroup

    with DAG("bg", schedule=None) as dag, TaskGroup("pretrain"):
        fit = EmptyOperator(task_id="train", pool="gpu_a100")
        gate = budget_gate(fit, gpu_hours_per_pool_day=10)
    assert gate.task_id == "pretrain.train__budget"
    assert set(dag.task_dict) == {"pretrain.train", "pretrain.train__budget"}


def _context(dag_id: str = "train", run_id: str = "r1") -> dict:
    return {"dag": SimpleNamespace(dag_id=dag_id), "run_id": run_id}


def test_gate_passes_under_cap_and_defers_over_it(ledger: str, monkeypatch) -> None:
    monkeypatch.setattr(gate_module, "_variable_float", lambda key: None)
    with DAG("g", schedule=None):
        ok = BudgetGateOperator(task_id="ok", gpu_hours_per_run=1000, ledger=ledger)
        over = BudgetGateOperator(task_id="over", gpu_hours_per_run=3, ledger=ledger, poke_interval=5)
    assert ok.execute(_context())["allowed"]
    with pytest.raises(TaskDeferred) as deferred:
        over.execute(_context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, BudgetTrigger)
    assert trigger.serialize()[1]["cap"]["gpu_hours_per_run"] == 3
    with pytest.raises(TaskDeferred):  # resumed while still over the cap: it claims again and waits
        over.execute_complete(_context(), {"reason": "raised"})
    monkeypatch.setattr(gate_module, "_variable_float", lambda key: 10.0)
    assert over.execute_complete(_context(), {"reason": "raised"})["waited"]


def test_budget_trigger_fires_when_cap_is_raised(ledger: str, monkeypatch) -> None:
    calls = {"n": 0}

    def variable(key: str) -> float | None:
        calls["n"] += 1
        assert key == "gpu_dag_budget.run.train"
        return None if calls["n"] < 3 else 10.0  # the operator raises the cap on the 3rd check

    monkeypatch.setattr(gate_module, "_variable_float", variable)
    trigger = BudgetTrigger("train", "r1", BudgetCap(gpu_hours_per_run=3).to_dict(), ledger, 0.05)

    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    payload = asyncio.run(asyncio.wait_for(first(), 20))
    assert payload["status"] == "allowed" and calls["n"] == 3
    assert "within budget" in payload["reason"]


# -- claims: check and reserve in one step -------------------------------------------------------------
def _claim(task_id: str, gpu_seconds: float = 3600.0, run_id: str = "r9", now: float = NOW) -> BudgetClaim:
    return BudgetClaim("train", run_id, task_id, gpu_seconds, "gpu", today(now), now, now + 86400)


def _ledgers(tmp_path: Path) -> list[BudgetLedger]:
    return [
        FileBudgetLedger(tmp_path / "usage.jsonl"),
        SqlBudgetLedger(f"sqlite:///{tmp_path / 'budget.db'}"),
    ]


@pytest.mark.parametrize("kind", [0, 1], ids=["file", "sql"])
def test_settling_does_not_depend_on_the_wall_clock(tmp_path: Path, kind: int) -> None:
    # A claim made a year ago (long expired) and one made a year from now are both closed by settle,
    # in both ledgers alike: the file ledger used to answer "no open claim" once its own clock had
    # passed the claim's expiry, which made this suite fail on the day after its fixed NOW.
    book = _ledgers(tmp_path)[kind]
    cap = BudgetCap(gpu_hours_per_pool_day=100, pool="gpu")
    for task_id, when in (("past", NOW - 365 * 86400), ("future", NOW + 365 * 86400)):
        assert book.claim(cap, _claim(task_id, now=when), when).allowed
        assert book.settle(claim_id("train", "r9", task_id))
        assert not book.settle(claim_id("train", "r9", task_id))


@pytest.mark.parametrize("kind", [0, 1], ids=["file", "sql"])
def test_claims_count_until_settled_and_are_idempotent(tmp_path: Path, kind: int) -> None:
    book = _ledgers(tmp_path)[kind]
    cap = BudgetCap(gpu_hours_per_pool_day=1.5, pool="gpu")
    assert book.claim(cap, _claim("a"), NOW).allowed
    assert book.claim(cap, _claim("a"), NOW).allowed  # the same gate again (a retry): no second claim
    assert book.usage("train", "r9", "gpu", NOW).pool_day_claimed_seconds == 3600
    refused = book.claim(cap, _claim("b"), NOW)
    assert not refused.allowed and "+ 1.000 claimed" in refused.reason
    assert book.claim(cap, _claim("small", 1800), NOW).allowed  # what is left still fits
    assert not book.charged("train", "r9", "a", -1, 1)
    actual = UsageRecord("train", "r9", "a", 1, (0,), NOW - 600, NOW, pool="gpu", lease_id="lease-a")
    assert book.settle(claim_id("train", "r9", "a"), actual)
    assert book.charged("train", "r9", "a", -1, 1)
    assert not book.settle(claim_id("train", "r9", "a"))
    usage = book.usage("train", "r9", "gpu", NOW)
    assert (usage.pool_day_gpu_seconds, usage.pool_day_claimed_seconds) == (600, 1800)
    assert book.claim(cap, _claim("b", 1800), NOW).allowed  # the actual use was lower than claimed
    book.record(actual)  # idempotent by lease id
    assert book.usage("train", "r9", "gpu", NOW).pool_day_gpu_seconds == 600


@pytest.mark.parametrize("kind", [0, 1], ids=["file", "sql"])
def test_expired_claims_no_longer_count(tmp_path: Path, kind: int) -> None:
    book = _ledgers(tmp_path)[kind]
    cap = BudgetCap(gpu_hours_per_run=1)
    old = BudgetClaim("train", "r9", "a", 3600, None, "2026-11-30", NOW - 90000, NOW - 10)
    assert book.claim(cap, old, NOW - 90000).allowed
    assert book.usage("train", "r9", None, NOW).run_claimed_seconds == 0
    assert book.claim(cap, _claim("b"), NOW).allowed


def _race(args: tuple[str, str, int, str]) -> bool:
    """One process: wait at the start line, then claim 1 GPU-hour against a 1.5 GPU-hour cap."""
    kind, where, index, start_file = args
    book: BudgetLedger = FileBudgetLedger(where) if kind == "file" else SqlBudgetLedger(where)
    Path(f"{start_file}.ready{index}").touch()
    deadline = time.monotonic() + 120
    while not Path(start_file).exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    decision = book.claim(
        BudgetCap(gpu_hours_per_pool_day=1.5, pool="gpu"), _claim(f"t{index}", now=time.time())
    )
    return decision.allowed


def _postgres() -> Iterator[str]:
    """A throwaway PostgreSQL (scripts/postgres.sh), or a skip when its server binaries are missing."""
    script = Path(__file__).parents[2] / "scripts" / "postgres.sh"
    proc = subprocess.run(
        ["bash", str(script), "start"], capture_output=True, text=True, timeout=180, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"no PostgreSQL server here: {proc.stderr.strip()[-200:]}")
    values = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    try:
        yield values["DATABASE_URL"]
    finally:
        subprocess.run(["bash", str(script), "stop", values["PGDATA_DIR"]], timeout=120, check=False)


@pytest.mark.parametrize("kind", ["file", "sqlite", "postgres"])
def test_two_gates_cannot_both_pass_when_only_one_fits(tmp_path: Path, kind: str) -> None:
    """Six processes claim 1 GPU-hour each at the same moment under a 1.5 GPU-hour cap: one passes."""
    with contextlib.ExitStack() as stack:
        if kind == "file":
            where = str(tmp_path / "usage.jsonl")
        else:
            where = f"sqlite:///{tmp_path / 'budget.db'}" if kind == "sqlite" else stack.enter_context(_pg())
            SqlBudgetLedger(where)  # tables created once, before the race
        outcomes = _run_race("file" if kind == "file" else "sql", where, tmp_path)
    assert outcomes.count(True) == 1, outcomes


_pg = contextlib.contextmanager(_postgres)


def _run_race(kind: str, where: str, tmp_path: Path) -> list[bool]:
    start = tmp_path / "go"
    # spawn, not fork: this process runs the weights' daemon threads, and a child forked while one of
    # them holds a lock (logging, an import) would wait for it for ever
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(6) as pool:
        result = pool.map_async(_race, [(kind, where, i, str(start)) for i in range(6)])
        deadline = time.monotonic() + 180
        while len(list(tmp_path.glob("go.ready*"))) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)  # every process at the start line, then all go at once
        start.touch()
        return list(result.get(timeout=240))


def test_sql_ledger_survives_a_restart(tmp_path: Path) -> None:
    from airflow_gpu_dag.budget import shared

    url = f"sqlite:///{tmp_path / 'budget.db'}"
    first = SqlBudgetLedger(url)
    assert first.claim(BudgetCap(gpu_hours_per_run=2), _claim("a"), NOW).allowed
    first.record(UsageRecord("train", "r9", "x", 1, (0, 1), NOW - 1800, NOW, pool="gpu", lease_id="l1"))
    first.engine.dispose()
    shared._schema.cache_clear()  # a new process: nothing cached
    again = SqlBudgetLedger(url)
    usage = again.usage("train", "r9", "gpu", NOW)
    assert (usage.run_gpu_seconds, usage.run_claimed_seconds) == (3600, 3600)
    assert not again.claim(BudgetCap(gpu_hours_per_run=2), _claim("b"), NOW).allowed


def test_a_new_sql_ledger_first_used_by_two_processes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two gates starting together on a new ledger both find no table and both create it; the loser's
    CREATE TABLE fails. Played here deterministically: another process creates the tables between this
    one's check and its create (the race CI hit with two budget gates)."""
    from sqlalchemy import MetaData, create_engine

    from airflow_gpu_dag.budget import shared

    url = f"sqlite:///{tmp_path / 'budget.db'}"
    real_create_all = MetaData.create_all
    calls = []

    def create_all_losing_the_race(meta: MetaData, bind: Any, checkfirst: bool = True, **kw: Any) -> None:
        calls.append(checkfirst)
        if len(calls) == 1:
            real_create_all(meta, create_engine(url), checkfirst=True)  # the other process wins ...
            real_create_all(meta, bind, checkfirst=False)  # ... and this one's CREATE TABLE fails
        real_create_all(meta, bind, checkfirst=checkfirst)

    monkeypatch.setattr(MetaData, "create_all", create_all_losing_the_race)
    shared._schema.cache_clear()
    try:
        ledger = SqlBudgetLedger(url)
        assert len(calls) == 2  # failed once ("table ... already exists"), then found the tables
        assert ledger.claim(BudgetCap(gpu_hours_per_run=2), _claim("a"), NOW).allowed
    finally:
        shared._schema.cache_clear()


def test_sqlalchemy_url_from_connections() -> None:
    from airflow_gpu_dag.budget.shared import sqlalchemy_url

    def conn(**kw: object) -> SimpleNamespace:
        base = {
            "conn_type": None,
            "host": None,
            "login": None,
            "password": None,
            "schema": None,
            "port": None,
        }
        return SimpleNamespace(**{**base, **kw, "extra_dejson": kw.get("extra_dejson", {})})

    assert sqlalchemy_url(conn(conn_type="sqlite", host="/var/b.db")) == "sqlite:////var/b.db"
    url = sqlalchemy_url(
        conn(conn_type="postgres", host="db", login="u", password="p@w", schema="s", port=5432)
    )
    assert url == "postgresql+psycopg2://u:p%40w@db:5432/s"
    assert sqlalchemy_url(conn(extra_dejson={"sqlalchemy_url": "mysql://x"})) == "mysql://x"
    with pytest.raises(ValueError, match="connection type 'http' is not supported"):
        sqlalchemy_url(conn(conn_type="http", host="h"))


def test_budget_ledger_follows_budget_conn_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "shared.db"
    monkeypatch.setenv("AIRFLOW_CONN_GPU_DAG_BUDGET", json.dumps({"conn_type": "sqlite", "host": str(db)}))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__BUDGET_CONN_ID", "gpu_dag_budget")
    book = gate_module.budget_ledger()
    assert isinstance(book, SqlBudgetLedger) and db.exists()
    assert isinstance(
        gate_module.budget_ledger(str(tmp_path / "x.jsonl")), FileBudgetLedger
    )  # explicit file wins
    monkeypatch.delenv("AIRFLOW__GPU_DAG__BUDGET_CONN_ID")
    assert isinstance(gate_module.budget_ledger(), FileBudgetLedger)


# -- usage from every host and from pods ---------------------------------------------------------------
def test_forward_local_usage_is_idempotent(tmp_path: Path) -> None:
    from airflow_gpu_dag.budget.shared import forward_local_usage

    local = tmp_path / "host1" / "usage.jsonl"
    local.parent.mkdir()
    book = UsageLedger(local)
    book.append(dataclasses.replace(_record("r1", 1.0), lease_id="l1"))
    shared = SqlBudgetLedger(f"sqlite:///{tmp_path / 'budget.db'}")
    assert forward_local_usage(shared, local) == 1
    assert forward_local_usage(shared, local) == 0  # nothing new
    book.append(dataclasses.replace(_record("r1", 2.0, devices=2), lease_id="l2", try_number=2))
    with local.open("a") as handle:
        handle.write('{"torn": ')  # a line still being written is left for next time
    assert forward_local_usage(shared, local) == 1
    (local.parent / f"{local.name}.forwarded-{shared_digest(shared)}").unlink()
    assert forward_local_usage(shared, local) == 0  # offset lost: re-checked by lease id, no duplicates
    assert shared.usage("train", "r1", "gpu", NOW).run_gpu_seconds == pytest.approx(3 * 3600)
    assert shared.charged("train", "r1", "fit", -1, 2)


def shared_digest(shared: SqlBudgetLedger) -> str:
    import hashlib

    return hashlib.sha1(shared.url.encode()).hexdigest()[:12]


def _pod(started: datetime | None, finished: datetime | None, phase: str = "Succeeded") -> Any:
    from kubernetes.client import models as k8s

    state = k8s.V1ContainerState(
        terminated=k8s.V1ContainerStateTerminated(exit_code=0, started_at=started, finished_at=finished)
        if finished
        else None,
        running=k8s.V1ContainerStateRunning(started_at=started) if started and not finished else None,
    )
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="train-abc", namespace="ml", uid="u-1", labels={"run_id": "r7"}),
        spec=k8s.V1PodSpec(containers=[], node_name="node-7"),
        status=k8s.V1PodStatus(
            phase=phase,
            start_time=started,
            container_statuses=[
                k8s.V1ContainerStatus(
                    name="base", image="i", image_id="", ready=False, restart_count=0, state=state
                )
            ],
        ),
    )


def test_pod_usage_is_gpus_times_the_containers_run_time() -> None:
    from airflow_gpu_dag.kubernetes.usage import pod_usage_record

    start = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    record = pod_usage_record(
        _pod(start, start + timedelta(minutes=30)),
        gpus=4,
        dag_id="d",
        run_id="r7",
        task_id="train",
        pool="gpu",
    )
    assert record is not None and record.gpu_seconds == 4 * 1800
    assert (record.lease_id, record.host, record.outcome) == ("pod:ml/train-abc:u-1", "node-7", "succeeded")
    running = pod_usage_record(
        _pod(start, None, "Running"), gpus=1, dag_id="d", run_id="r", task_id="t", now=start.timestamp() + 60
    )
    assert running is not None and running.gpu_seconds == 60
    assert pod_usage_record(_pod(None, None, "Pending"), gpus=1, dag_id="d", run_id="r", task_id="t") is None


def test_gpu_pod_charges_the_budget_when_it_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator

    ledger = tmp_path / "usage.jsonl"
    monkeypatch.setenv("AIRFLOW__GPU_DAG__USAGE_LEDGER", str(ledger))
    monkeypatch.setattr(KubernetesPodOperator, "cleanup", lambda self, *a, **k: None)
    with DAG("pods", schedule=None):
        op = GpuKubernetesPodOperator(task_id="train", image="i", gpus=2, gpu_type="a100")
    start = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    ti = SimpleNamespace(dag_id="pods", run_id="r7", task_id="train", map_index=-1, try_number=1)
    pod = _pod(start, start + timedelta(hours=1))
    op.cleanup(pod, pod, context={"ti": ti})
    op.cleanup(pod, pod, context={"ti": ti})  # cleaned up twice: charged once
    records = UsageLedger(ledger).read()
    assert len(records) == 1 and records[0].gpu_seconds == 2 * 3600
    assert (records[0].dag_id, records[0].run_id, records[0].pool) == ("pods", "r7", "gpu_a100")
    assert read_usage(str(ledger), "pods", "r7", "gpu_a100", now=start.timestamp() + 7200).run_gpu_hours == 2


def test_budget_gate_claims_the_tasks_expected_use_and_settles_it(tmp_path: Path, monkeypatch) -> None:
    from airflow_gpu_dag.budget.charge import SettleBudgetClaim
    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    monkeypatch.setattr(gate_module, "_variable_float", lambda key: None)
    ledger = str(tmp_path / "usage.jsonl")
    with DAG("claims", schedule=None):
        fit = GpuBashOperator(task_id="fit", bash_command="true", gpus=2, duration="1h")
        gate = budget_gate(fit, gpu_hours_per_run=3, ledger=ledger)
    assert (gate.gated_task_id, gate.claim_gpu_seconds) == ("fit", 7200)
    settles = [cb for cb in fit.on_success_callback if isinstance(cb, SettleBudgetClaim)]
    assert (
        len(settles) == 1 and settles[0] in fit.on_failure_callback and settles[0] in fit.on_skipped_callback
    )
    context = {"dag": SimpleNamespace(dag_id="claims"), "run_id": "r1", "ti": SimpleNamespace(map_index=-1)}
    assert gate.execute(context)["allowed"]
    assert read_usage(ledger, "claims", "r1", None).run_claimed_hours == 2
    with pytest.raises(TaskDeferred):  # a second task of 2 GPU-hours does not fit in what is left
        BudgetGateOperator(
            task_id="g2", gpu_hours_per_run=3, ledger=ledger, gated_task_id="other", claim_gpu_seconds=7200
        ).execute(context)
    # the task ends without a lease record: charged GPUs x its run time, the claim is closed
    started = datetime.now(UTC) - timedelta(minutes=30)
    ti = SimpleNamespace(
        dag_id="claims", run_id="r1", task_id="fit", map_index=-1, try_number=1, start_date=started
    )
    settles[0]({"ti": ti})
    usage = read_usage(ledger, "claims", "r1", None)
    assert usage.run_claimed_seconds == 0 and usage.run_gpu_hours == pytest.approx(1.0, abs=0.01)
    with DAG("too_big", schedule=None):
        big = GpuBashOperator(task_id="big", bash_command="true", gpus=4, duration="2h")
        with pytest.raises(
            ValueError, match=r"DAG 'too_big', task 'big__budget': the gated task is expected to use 8"
        ):
            budget_gate(big, gpu_hours_per_run=4)


def test_a_variable_of_zero_pauses_gated_tasks_a_negative_one_is_ignored(monkeypatch) -> None:
    from airflow.sdk import Variable

    values = {"gpu_dag_budget.run.train": "0", "gpu_dag_budget.pool_day.gpu": "-1"}
    monkeypatch.setattr(Variable, "get", staticmethod(lambda key, default=None: values.get(key, default)))
    cap = gate_module.effective_cap(
        BudgetCap(gpu_hours_per_run=5, gpu_hours_per_pool_day=9, pool="gpu"), "train"
    )
    assert (cap.gpu_hours_per_run, cap.gpu_hours_per_pool_day) == (0, 9)
    assert not evaluate(cap, BudgetUsage(0, 0, "d")).allowed
