"""Tests of ``airflow_gpu_dag.budget.shared``."""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select

from airflow_gpu_dag.budget.ledger import BudgetLedger, FileBudgetLedger, today
from airflow_gpu_dag.budget.shared import SqlBudgetLedger, forward_local_usage
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
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_gates_stay_serialised_after_the_lock_row_was_deleted(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """A cleaned ``gpu_dag_budget_lock`` table: the first claim writes the row again, so the race above
    still lets one gate of six pass (an update of no row would lock nothing)."""
    from sqlalchemy import delete

    if kind == "postgres":
        request.getfixturevalue("system_packages")
    with contextlib.ExitStack() as stack:
        where = f"sqlite:///{tmp_path / 'budget.db'}" if kind == "sqlite" else stack.enter_context(_pg())
        book = SqlBudgetLedger(where)
        with book.engine.begin() as conn:
            conn.execute(delete(book.lock_table))
        outcomes = _run_race("sql", where, tmp_path)
        with book.engine.connect() as conn:
            rows = conn.execute(select(book.lock_table.c.name, book.lock_table.c.counter)).all()
        book.engine.dispose()
    assert outcomes.count(True) == 1, outcomes
    assert [(name, counter) for name, counter in rows] == [("budget", 6)]


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


# -- the claim at the edge of a cap ------------------------------------------------------------------------
@pytest.fixture
def book(tmp_path: Path) -> SqlBudgetLedger:
    """A fresh shared ledger in a SQLite file of ``tmp_path``."""
    return SqlBudgetLedger(f"sqlite:///{tmp_path / 'budget.db'}")


def _charge(book: SqlBudgetLedger, lease_id: str, hours: float, **kw: Any) -> None:
    """Charge a finished lease of ``train.fit`` (run r9, pool gpu, ending at NOW unless told)."""
    run_id = kw.pop("run_id", "r9")
    book.record(dataclasses.replace(usage_record(run_id, hours, **kw), lease_id=lease_id))


def test_a_claim_that_exactly_fills_the_run_cap_passes_and_one_more_second_does_not(
    book: SqlBudgetLedger,
) -> None:
    """``used + claimed + request <= cap``: the cap can be reached, never passed."""
    run_cap = BudgetCap(gpu_hours_per_run=2)
    _charge(book, "l1", 1.0)
    assert book.claim(run_cap, _claim("a", 3600.0), NOW).allowed
    refused = book.claim(run_cap, _claim("b", 1.0), NOW)
    assert not refused.allowed
    assert refused.reason.startswith("this DAG run used 1.000 + 1.000 claimed GPU-hours, cap 2")
    usage = book.usage("train", "r9", "gpu", NOW)
    assert (usage.run_gpu_seconds, usage.run_claimed_seconds) == (3600.0, 3600.0)  # b wrote nothing


def test_a_run_at_its_cap_lets_no_gate_pass_not_even_one_asking_for_nothing(book: SqlBudgetLedger) -> None:
    _charge(book, "l1", 2.0)
    assert not book.claim(BudgetCap(gpu_hours_per_run=2), _claim("a", 0.0), NOW).allowed
    assert book.claim(BudgetCap(gpu_hours_per_run=2), _claim("a", 0.0, run_id="r10"), NOW).allowed


def test_a_claim_for_a_request_that_is_not_a_number_is_refused(book: SqlBudgetLedger) -> None:
    """A NaN request (a broken estimate) compares false with everything: it must block, not pass."""
    decision = book.claim(BudgetCap(gpu_hours_per_run=100), _claim("a", float("nan")), NOW)
    assert not decision.allowed
    assert book.usage("train", "r9", "gpu", NOW).run_claimed_seconds == 0.0


def test_the_pool_day_cap_counts_todays_usage_of_every_run_in_that_pool_only(book: SqlBudgetLedger) -> None:
    """Today (UTC) in pool ``gpu``: r1 2 GPU-h, and the second half of a 2-hour lease that began
    before midnight; r2's 8 GPU-h in another pool and r3's 5 GPU-h yesterday do not count."""
    _charge(book, "l1", 2.0, run_id="r1", devices=2)
    _charge(book, "l2", 8.0, run_id="r2", pool="other")
    _charge(book, "l3", 5.0, run_id="r3", end=NOW - 86400)
    _charge(book, "l4", 2.0, run_id="r4", end=NOW - 11 * 3600)  # 23:00 to 01:00
    usage = book.usage("train", "r9", "gpu", NOW)
    assert (usage.day, usage.pool_day_gpu_seconds, usage.run_gpu_seconds) == ("2026-11-30", 3 * 3600, 0)
    day_cap = BudgetCap(gpu_hours_per_pool_day=4, pool="gpu")
    assert book.claim(day_cap, _claim("a", 3600.0), NOW).allowed
    refused = book.claim(day_cap, _claim("b", 1.0, run_id="r5"), NOW)
    assert not refused.allowed
    assert refused.reason.startswith(
        "pool 'gpu' used 3.000 + 1.000 claimed GPU-hours on 2026-11-30, cap 4 per day"
    )
    tomorrow = NOW + 86000  # 11:53 the next day: a's claim (24 h) still counts, today's usage does not
    assert book.claim(day_cap, _claim("c", 3 * 3600.0, now=tomorrow), tomorrow).allowed
    assert not book.claim(day_cap, _claim("d", 1.0, now=tomorrow), tomorrow).allowed


def test_an_open_claim_made_before_midnight_counts_against_the_new_day(book: SqlBudgetLedger) -> None:
    """A task claimed at 23:00 may run past midnight: its claim holds its room in the new day."""
    late = NOW - 13 * 3600  # 23:00 the day before
    day_cap = BudgetCap(gpu_hours_per_pool_day=2, pool="gpu")
    assert book.claim(day_cap, _claim("a", 2 * 3600.0, now=late), late).allowed
    usage = book.usage("train", "r10", "gpu", NOW)
    assert (usage.day, usage.pool_day_claimed_seconds, usage.run_claimed_seconds) == ("2026-11-30", 7200, 0)
    assert not book.claim(day_cap, _claim("b", 60.0, run_id="r10"), NOW).allowed


# -- stale claims --------------------------------------------------------------------------------------------
def test_a_claim_stops_counting_when_it_expires_and_can_then_be_made_again(book: SqlBudgetLedger) -> None:
    """A claim whose task never reported counts until its expiry, not one second more; the gate's
    claim made again after that replaces the stale row (one claim per task instance)."""
    run_cap = BudgetCap(gpu_hours_per_run=1)
    stale = dataclasses.replace(_claim("a", 3600.0), expires=NOW + 60)
    assert book.claim(run_cap, stale, NOW).allowed
    assert book.usage("train", "r9", "gpu", NOW + 59.5).run_claimed_seconds == 3600
    assert not book.claim(run_cap, _claim("b", 60.0), NOW + 59.5).allowed
    assert book.usage("train", "r9", "gpu", NOW + 60).run_claimed_seconds == 0
    again = dataclasses.replace(_claim("a", 1800.0), expires=NOW + 600)
    assert book.claim(run_cap, again, NOW + 60).allowed
    assert book.usage("train", "r9", "gpu", NOW + 61).run_claimed_seconds == 1800
    with book.engine.connect() as conn:
        rows = conn.execute(select(book.claim_table.c.claim_id, book.claim_table.c.gpu_seconds)).all()
    assert [tuple(r) for r in rows] == [("train|r9|a|-1", 1800.0)]


def test_a_retried_gate_finds_its_own_claim_even_when_the_cap_is_reached_since(book: SqlBudgetLedger) -> None:
    """A gate that runs again (a retry) must not lose its task's room to usage charged meanwhile, nor
    claim twice."""
    run_cap = BudgetCap(gpu_hours_per_run=2)
    assert book.claim(run_cap, _claim("a", 3600.0), NOW).allowed
    _charge(book, "l1", 5.0)  # other tasks of the run, ungated
    again = book.claim(run_cap, _claim("a", 7200.0), NOW + 10)
    assert (again.allowed, again.reason) == (True, "already claimed 1.000 GPU-h")
    assert book.usage("train", "r9", "gpu", NOW + 10).run_claimed_seconds == 3600  # not doubled
    assert not book.claim(run_cap, _claim("b", 60.0), NOW + 10).allowed


def test_settling_a_claim_replaces_it_by_what_the_task_used_once(book: SqlBudgetLedger) -> None:
    run_cap = BudgetCap(gpu_hours_per_run=3)
    claim = _claim("a", 2 * 3600.0)
    assert book.claim(run_cap, claim, NOW).allowed
    used = dataclasses.replace(usage_record("r9", 0.5), lease_id="l1")
    assert book.settle(claim.claim_id, used) is True
    usage = book.usage("train", "r9", "gpu", NOW)
    assert (usage.run_gpu_seconds, usage.run_claimed_seconds) == (1800, 0)
    assert book.settle(claim.claim_id, used) is False  # no open claim; the record is not charged twice
    assert book.usage("train", "r9", "gpu", NOW).run_gpu_seconds == 1800
    assert book.settle("train|r9|never|-1") is False
    assert book.charged("train", "r9", "fit", -1, 1)


def test_settling_an_expired_claim_still_closes_it(book: SqlBudgetLedger) -> None:
    """Settling does not read the clock (as the file ledger): a late task closes its stale claim, so
    a gate retried later claims afresh."""
    claim = dataclasses.replace(_claim("a"), expires=NOW + 60)
    assert book.claim(BudgetCap(gpu_hours_per_run=5), claim, NOW).allowed
    assert book.settle(claim.claim_id) is True
    with book.engine.connect() as conn:
        assert conn.execute(select(book.claim_table)).all() == []


# -- charging usage ---------------------------------------------------------------------------------------
def test_records_are_charged_once_by_lease_id_or_else_by_task_try(book: SqlBudgetLedger) -> None:
    """``record_many`` returns how many were new: a lease sent again (a forward retried) or a task try
    charged again (no lease id: a plain gated task) is not counted twice."""
    leases = [dataclasses.replace(usage_record("r9", 1.0), lease_id=f"l{i}") for i in range(3)]
    assert book.record_many(leases[:2]) == 2
    assert book.record_many(leases) == 1
    book.record(leases[0])
    plain = usage_record("r9", 0.5)  # try 1 of train.fit, no lease id
    assert book.record_many([plain, plain]) == 1
    assert book.record_many([dataclasses.replace(plain, try_number=2)]) == 1
    assert book.record_many([]) == 0
    assert book.usage("train", "r9", None, NOW).run_gpu_seconds == 4 * 3600


def test_a_large_batch_of_records_is_charged_in_full_and_once(book: SqlBudgetLedger) -> None:
    """The ids already charged are looked up in chunks (500): a host that forwards many leases at once
    (after an outage) is charged for every one of them, and for none twice."""
    batch = [dataclasses.replace(usage_record("r9", 0.01), lease_id=f"lease-{i}") for i in range(1203)]
    assert book.record_many(batch[:600]) == 600
    assert book.record_many(batch) == 603
    assert book.record_many(batch) == 0
    assert book.usage("train", "r9", None, NOW).run_gpu_seconds == pytest.approx(1203 * 36)


def test_charged_matches_task_instance_and_try(book: SqlBudgetLedger) -> None:
    record = dataclasses.replace(usage_record("r9", 1.0), lease_id="l1", try_number=2, map_index=3)
    assert not book.charged("train", "r9", "fit", 3, None)
    book.record(record)
    assert book.charged("train", "r9", "fit", 3, 2) and book.charged("train", "r9", "fit", 3, None)
    assert not book.charged("train", "r9", "fit", 3, 1)
    assert not book.charged("train", "r9", "fit", -1, None)
    assert not book.charged("train", "r10", "fit", 3, 2)


def test_concurrent_writers_charge_every_record_exactly_once(book: SqlBudgetLedger) -> None:
    """Four workers forward the same 40 leases at the same moment: the ledger's lock serialises the
    check and the insert, so none fails on the unique lease id and none is counted twice."""
    records = [dataclasses.replace(usage_record("r9", 0.5), lease_id=f"l{i}") for i in range(40)]
    start = threading.Barrier(4)
    sent: list[int] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            start.wait(60)
            sent.append(book.record_many(records))
        except BaseException as err:  # reported below, not lost in the thread
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == [] and sorted(sent) == [0, 0, 0, 40]
    assert book.usage("train", "r9", None, NOW).run_gpu_seconds == 40 * 1800


# -- forwarding a host's usage file -----------------------------------------------------------------------
def _lease(run_id: str, lease_id: str, hours: float = 1.0) -> UsageRecord:
    return dataclasses.replace(usage_record(run_id, hours), lease_id=lease_id)


def _host_file(tmp_path: Path, *records: UsageRecord) -> Path:
    local = tmp_path / "host1" / "usage.jsonl"
    book = UsageLedger(local)
    for record in records:
        book.append(record)
    return local


def _marker(local: Path, shared: SqlBudgetLedger) -> Path:
    return local.with_name(f"{local.name}.forwarded-{shared_digest(shared)}")


def test_forwarding_a_host_without_a_usage_file_sends_nothing(tmp_path: Path, book: SqlBudgetLedger) -> None:
    local = tmp_path / "host1" / "usage.jsonl"
    assert forward_local_usage(book, local) == 0
    assert not local.parent.exists()  # no marker written either


def test_unreadable_lines_are_skipped_for_good_and_the_rest_is_sent(
    tmp_path: Path, book: SqlBudgetLedger
) -> None:
    """A damaged line (garbage, a time that is no time) cannot be charged: it is passed over once,
    the records around it are sent, and the offset moves past it."""
    local = _host_file(tmp_path, _lease("r1", "l1"))
    with local.open("a") as handle:
        handle.write("not json\n")
        handle.write('{"start": NaN, "end": 1.0, "devices": [0], "lease_id": "nan"}\n')
    UsageLedger(local).append(_lease("r1", "l2", 2.0))
    assert forward_local_usage(book, local) == 2
    assert _marker(local, book).read_text().split()[0] == str(local.stat().st_size)
    assert forward_local_usage(book, local) == 0
    with local.open("a") as handle:
        handle.write("still garbage\n")  # only unreadable lines are new: nothing sent, offset moves on
    assert forward_local_usage(book, local) == 0
    assert _marker(local, book).read_text().split()[0] == str(local.stat().st_size)
    assert book.usage("train", "r1", None, NOW).run_gpu_seconds == 3 * 3600


def test_a_damaged_offset_marker_is_read_from_the_start_without_duplicates(
    tmp_path: Path, book: SqlBudgetLedger
) -> None:
    local = _host_file(tmp_path, _lease("r1", "l1"))
    assert forward_local_usage(book, local) == 1
    UsageLedger(local).append(_lease("r1", "l2"))
    _marker(local, book).write_text("\x00garbage")
    assert forward_local_usage(book, local) == 1  # l2; l1 re-checked by its lease id
    assert book.usage("train", "r1", None, NOW).run_gpu_seconds == 2 * 3600
    assert _marker(local, book).read_text().split()[0] == str(local.stat().st_size)


def test_a_negative_offset_marker_is_read_from_the_start(tmp_path: Path, book: SqlBudgetLedger) -> None:
    """A damaged marker must not stop this host's usage from ever reaching the shared ledger (the
    callers log the error and go on: the budget would be overspent by everything this host uses)."""
    local = _host_file(tmp_path, _lease("r1", "l1"))
    _marker(local, book).write_text("-5")
    assert forward_local_usage(book, local) == 1
    assert book.usage("train", "r1", None, NOW).run_gpu_seconds == 3600


def test_a_usage_file_replaced_by_a_shorter_one_is_read_from_its_start(
    tmp_path: Path, book: SqlBudgetLedger
) -> None:
    local = _host_file(tmp_path, _lease("r1", "l1"), _lease("r1", "l2"), _lease("r1", "l3"))
    assert forward_local_usage(book, local) == 3
    local.unlink()
    UsageLedger(local).append(_lease("r2", "l4"))
    assert forward_local_usage(book, local) == 1
    assert book.usage("train", "r2", None, NOW).run_gpu_seconds == 3600


def test_a_usage_file_replaced_by_a_longer_one_is_read_from_its_start(
    tmp_path: Path, book: SqlBudgetLedger
) -> None:
    """The usage file is rotated while forwarding fails (shared ledger away); by the next forward the
    new file has grown past the old offset. Every record of the new file must still be charged."""
    local = _host_file(tmp_path, _lease("r1", "l1"))
    assert forward_local_usage(book, local) == 1
    local.unlink()
    _host_file(tmp_path, *(_lease("r2", f"n{i}") for i in range(3)))
    assert forward_local_usage(book, local) == 3
    assert book.usage("train", "r2", None, NOW).run_gpu_seconds == 3 * 3600


def test_records_not_sent_while_the_ledger_was_away_go_with_the_next_forward(
    tmp_path: Path, book: SqlBudgetLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    local = _host_file(tmp_path, _lease("r1", "l1"))
    real = book.record_many

    def database_away(records: list[UsageRecord]) -> int:
        raise OperationalError("INSERT", {}, Exception("could not connect to server"))

    monkeypatch.setattr(book, "record_many", database_away)
    with pytest.raises(OperationalError):
        forward_local_usage(book, local)
    assert not _marker(local, book).exists()  # the offset did not move past what was not sent
    UsageLedger(local).append(_lease("r1", "l2"))
    monkeypatch.setattr(book, "record_many", real)
    assert forward_local_usage(book, local) == 2
    assert book.usage("train", "r1", None, NOW).run_gpu_seconds == 2 * 3600


def test_two_forwards_that_overlap_send_each_record_once(
    tmp_path: Path, book: SqlBudgetLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two GPU tasks of one host end together: the second forward runs in full while the first is
    between reading the file and sending it. The first then finds its records charged already."""
    local = _host_file(tmp_path, _lease("r1", "l1"), _lease("r1", "l2"))
    real = book.record_many
    inner: list[int] = []

    def other_task_forwards_first(records: list[UsageRecord]) -> int:
        if not inner:
            monkeypatch.setattr(book, "record_many", real)
            inner.append(forward_local_usage(book, local))
        return real(records)

    monkeypatch.setattr(book, "record_many", other_task_forwards_first)
    assert forward_local_usage(book, local) == 0
    assert inner == [2]
    assert book.usage("train", "r1", None, NOW).run_gpu_seconds == 2 * 3600
    assert _marker(local, book).read_text().split()[0] == str(local.stat().st_size)


def test_each_shared_ledger_keeps_its_own_offset(tmp_path: Path, book: SqlBudgetLedger) -> None:
    """Pointing ``budget_conn_id`` at another database sends that one the host's whole file."""
    local = _host_file(tmp_path, _lease("r1", "l1"))
    assert forward_local_usage(book, local) == 1
    other = SqlBudgetLedger(f"sqlite:///{tmp_path / 'other.db'}")
    assert forward_local_usage(other, local) == 1
    assert forward_local_usage(book, local) == forward_local_usage(other, local) == 0


# -- the connection -------------------------------------------------------------------------------------
def _conn(**kw: Any) -> SimpleNamespace:
    base = {"conn_type": None, "host": None, "login": None, "password": None, "schema": None, "port": None}
    return SimpleNamespace(**{**base, **kw, "extra_dejson": kw.get("extra_dejson", {})})


@pytest.mark.parametrize(
    ("fields", "url"),
    [
        ({"conn_type": "SQLite", "schema": "/var/b.db"}, "sqlite:////var/b.db"),
        ({"conn_type": "postgresql", "host": "db", "schema": "s"}, "postgresql+psycopg2://db/s"),
        (
            {"conn_type": "mysql", "host": "db", "login": "u", "password": "p", "port": 3306, "schema": "b"},
            "mysql://u:p@db:3306/b",
        ),
        (
            {"conn_type": "http", "host": "h", "extra_dejson": {"sqlalchemy_url": "sqlite:////x.db"}},
            "sqlite:////x.db",
        ),
    ],
)
def test_sqlalchemy_url_of_each_supported_connection(fields: dict[str, Any], url: str) -> None:
    from airflow_gpu_dag.budget.shared import sqlalchemy_url

    assert sqlalchemy_url(_conn(**fields)) == url


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"conn_type": "sqlite"}, "a sqlite budget connection needs host=<path of the database file>"),
        ({}, "connection type '' is not supported for the budget ledger; use postgres, mysql or sqlite"),
    ],
)
def test_sqlalchemy_url_says_what_a_connection_lacks(fields: dict[str, Any], message: str) -> None:
    from airflow_gpu_dag.budget.shared import sqlalchemy_url

    with pytest.raises(ValueError, match=re.escape(message)):
        sqlalchemy_url(_conn(**fields))


def test_the_ledger_of_a_connection_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``from_conn_id`` opens the connection's database; a connection it cannot use names the option
    that points at it."""
    from airflow_gpu_dag.budget import shared

    conns = {
        "gpu_dag_budget": _conn(conn_type="sqlite", host=str(tmp_path / "budget.db")),
        "wrong": _conn(conn_type="http", host="h"),
    }
    monkeypatch.setattr(shared.BaseHook, "get_connection", lambda conn_id: conns[conn_id])
    ledger = SqlBudgetLedger.from_conn_id("gpu_dag_budget")
    assert ledger.url == f"sqlite:///{tmp_path / 'budget.db'}"
    assert ledger.claim(BudgetCap(gpu_hours_per_run=1), _claim("a"), NOW).allowed
    with pytest.raises(
        ValueError, match=r"^\[gpu_dag\] budget_conn_id='wrong': connection type 'http'"
    ) as err:
        SqlBudgetLedger.from_conn_id("wrong")
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_the_ledgers_repr_hides_the_database_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger is named in log lines (``forwarded ... to %r``): its password must not be."""
    from sqlalchemy import create_engine

    from airflow_gpu_dag.budget import shared

    engine = create_engine("postgresql+psycopg2://budget:s3cret@db.internal:5432/gpu_budget")  # no connect
    monkeypatch.setattr(shared, "_schema", lambda url: (engine, None, None, None))
    text = repr(SqlBudgetLedger("postgresql+psycopg2://budget:s3cret@db.internal:5432/gpu_budget"))
    assert text == "SqlBudgetLedger('postgresql+psycopg2://budget:***@db.internal:5432/gpu_budget')"


def test_a_damaged_database_file_fails_instead_of_letting_gates_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that is no database cannot be made a ledger: opening it raises (the gate then waits and
    retries) rather than passing every claim on an empty ledger."""
    from sqlalchemy.exc import DatabaseError

    monkeypatch.setattr("time.sleep", lambda s: None)  # tenacity's waits between attempts
    damaged = tmp_path / "budget.db"
    damaged.write_bytes(b"this is not a SQLite database, only its name is" * 100)
    with pytest.raises(DatabaseError, match="file is not a database"):
        SqlBudgetLedger(f"sqlite:///{damaged}")
    assert damaged.read_bytes().startswith(b"this is not a SQLite database")  # left for repair
