"""Tests of ``airflow_gpu_dag.budget.shared``."""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_gpu_dag.budget.ledger import BudgetLedger, FileBudgetLedger, today
from airflow_gpu_dag.budget.shared import SqlBudgetLedger
from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetClaim
from airflow_gpu_dag.gpu.usage import UsageLedger, UsageRecord
from tests.unit.usage_ledgers import NOW, usage_record


# -- claims: check and reserve in one step -------------------------------------------------------------
def _claim(task_id: str, gpu_seconds: float = 3600.0, run_id: str = "r9", now: float = NOW) -> BudgetClaim:
    return BudgetClaim("train", run_id, task_id, gpu_seconds, "gpu", today(now), now, now + 86400)


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
    script = Path(__file__).parents[3] / "scripts" / "postgres.sh"
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


def shared_digest(shared: SqlBudgetLedger) -> str:
    import hashlib

    return hashlib.sha1(shared.url.encode()).hexdigest()[:12]


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize("kind", ["file", "sqlite", "postgres"])
def test_two_gates_cannot_both_pass_when_only_one_fits(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """Six processes claim 1 GPU-hour each at the same moment under a 1.5 GPU-hour cap: one passes."""
    if kind == "postgres":
        request.getfixturevalue("system_packages")
    with contextlib.ExitStack() as stack:
        if kind == "file":
            where = str(tmp_path / "usage.jsonl")
        else:
            where = f"sqlite:///{tmp_path / 'budget.db'}" if kind == "sqlite" else stack.enter_context(_pg())
            SqlBudgetLedger(where)  # tables created once, before the race
        outcomes = _run_race("file" if kind == "file" else "sql", where, tmp_path)
    assert outcomes.count(True) == 1, outcomes


@pytest.mark.usefixtures("_deferring")
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


@pytest.mark.usefixtures("_deferring")
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


@pytest.mark.usefixtures("_deferring")
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


# -- usage from every host and from pods ---------------------------------------------------------------
@pytest.mark.usefixtures("_deferring")
def test_forward_local_usage_is_idempotent(tmp_path: Path) -> None:
    from airflow_gpu_dag.budget.shared import forward_local_usage

    local = tmp_path / "host1" / "usage.jsonl"
    local.parent.mkdir()
    book = UsageLedger(local)
    book.append(dataclasses.replace(usage_record("r1", 1.0), lease_id="l1"))
    shared = SqlBudgetLedger(f"sqlite:///{tmp_path / 'budget.db'}")
    assert forward_local_usage(shared, local) == 1
    assert forward_local_usage(shared, local) == 0  # nothing new
    book.append(dataclasses.replace(usage_record("r1", 2.0, devices=2), lease_id="l2", try_number=2))
    with local.open("a") as handle:
        handle.write('{"torn": ')  # a line still being written is left for next time
    assert forward_local_usage(shared, local) == 1
    (local.parent / f"{local.name}.forwarded-{shared_digest(shared)}").unlink()
    assert forward_local_usage(shared, local) == 0  # offset lost: re-checked by lease id, no duplicates
    assert shared.usage("train", "r1", "gpu", NOW).run_gpu_seconds == pytest.approx(3 * 3600)
    assert shared.charged("train", "r1", "fit", -1, 2)


@pytest.mark.usefixtures("_deferring", "_no_variables")
def test_creating_the_shared_ledger_tables_is_retried_then_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Processes that create a new shared ledger at once all but one fail ("table already exists"): the
    creation is tried 5 times, 0.05 s x the attempt apart, and the last failure is raised."""
    from sqlalchemy.exc import OperationalError

    from airflow_gpu_dag.budget import shared

    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)  # tenacity's sleep
    failures = [OperationalError("CREATE TABLE", {}, Exception(f"already exists {n}")) for n in range(5)]

    class Meta:
        calls = 0

        def create_all(self, engine: object, checkfirst: bool) -> None:
            assert checkfirst
            Meta.calls += 1
            if failures:
                raise failures.pop(0)

    del failures[2:]  # two processes won the race first
    shared._create_tables(Meta(), None)
    assert Meta.calls == 3 and slept == pytest.approx([0.05, 0.1])
    Meta.calls, slept[:] = 0, []
    failures[:] = [OperationalError("CREATE TABLE", {}, Exception(f"already exists {n}")) for n in range(6)]
    with pytest.raises(OperationalError, match="already exists 4"):
        shared._create_tables(Meta(), None)
    assert Meta.calls == 5 and slept == pytest.approx([0.05, 0.1, 0.15, 0.2])
