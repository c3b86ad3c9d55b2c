"""One budget ledger for every host: a SQL database named by an Airflow connection.

``[gpu_dag] budget_conn_id = gpu_dag_budget`` selects it. Task code and triggers cannot use Airflow's
metadata database in Airflow 3, so the ledger lives in a database of its own (PostgreSQL or MySQL for
several hosts; SQLite for one host and for tests), reached with the connection's credentials::

    airflow connections add gpu_dag_budget --conn-type postgres --conn-host db.internal \\
        --conn-login budget --conn-password ... --conn-schema gpu_budget --conn-port 5432
    # or any SQLAlchemy URL: --conn-extra '{"sqlalchemy_url": "postgresql+psycopg2://..."}'

Three tables, created on first use (``gpu_dag_budget_usage``, ``gpu_dag_budget_claim``,
``gpu_dag_budget_lock``). Every row is committed before the call returns, so the ledger survives a
restart of any Airflow component, host or of the database server itself. A claim is checked and
written in one transaction that first updates the single row of ``gpu_dag_budget_lock``: the
database holds that row lock (SQLite: its write lock) until commit, so claims are serialised across
hosts and two gates cannot both pass when only one fits.

Usage gets here three ways: pods charge themselves when they end
(:class:`~airflow_gpu_dag.operators.kubernetes.GpuKubernetesPodOperator`); the GPU operators forward
their host's lease usage file when a lease ends (:func:`forward_local_usage`, idempotent by lease id,
so a record missed once is sent with the next one); a gated task without either is charged GPUs x its
run time when it ends.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook
from sqlalchemy import (
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    and_,
    create_engine,
    delete,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.pool import NullPool
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_incrementing

from airflow_gpu_dag.budget.ledger import summarise, today
from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetClaim, BudgetDecision, BudgetUsage, evaluate
from airflow_gpu_dag.gpu.usage import UsageRecord

__all__ = ["SqlBudgetLedger", "forward_local_usage", "sqlalchemy_url"]

log = logging.getLogger(__name__)

_LOCK_NAME = "budget"


def sqlalchemy_url(conn: Any) -> str:
    """A SQLAlchemy URL from an Airflow connection: ``extra["sqlalchemy_url"]``, else from its fields
    (``sqlite`` with ``host`` = the database file; ``postgres``/``postgresql``; ``mysql``)."""
    extra = getattr(conn, "extra_dejson", None) or {}
    if extra.get("sqlalchemy_url"):
        return str(extra["sqlalchemy_url"])
    conn_type = (getattr(conn, "conn_type", None) or "").lower()
    if conn_type == "sqlite":
        path = getattr(conn, "host", None) or getattr(conn, "schema", None)
        if not path:
            raise ValueError("a sqlite budget connection needs host=<path of the database file>")
        return f"sqlite:///{path}"
    driver = {"postgres": "postgresql+psycopg2", "postgresql": "postgresql+psycopg2", "mysql": "mysql"}.get(
        conn_type
    )
    if driver is None:
        raise ValueError(
            f"connection type {conn_type!r} is not supported for the budget ledger; use postgres, mysql or "
            'sqlite, or put a SQLAlchemy URL in the extra: {"sqlalchemy_url": "..."}'
        )
    return URL.create(
        driver,
        username=getattr(conn, "login", None) or None,
        password=getattr(conn, "password", None) or None,
        host=getattr(conn, "host", None) or None,
        port=getattr(conn, "port", None) or None,
        database=getattr(conn, "schema", None) or None,
    ).render_as_string(hide_password=False)


@functools.lru_cache(maxsize=4)
def _schema(url: str) -> tuple[Any, Any, Any, Any]:
    """Engine and tables for ``url`` (created once per process)."""
    connect_args = {"timeout": 60} if url.startswith("sqlite") else {}
    engine = create_engine(url, poolclass=NullPool, connect_args=connect_args)
    meta = MetaData()
    usage = Table(
        "gpu_dag_budget_usage",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("record_id", String(250), nullable=False, unique=True),
        Column("dag_id", String(250)),
        Column("run_id", String(250)),
        Column("task_id", String(250)),
        Column("map_index", Integer),
        Column("try_number", Integer),
        Column("pool", String(256)),
        Column("gpus", Integer),
        Column("start_ts", Float),
        Column("end_ts", Float),
        Column("outcome", String(32)),
        Column("host", String(256)),
    )
    claims = Table(
        "gpu_dag_budget_claim",
        meta,
        Column("claim_id", String(800), primary_key=True),
        Column("dag_id", String(250)),
        Column("run_id", String(250)),
        Column("task_id", String(250)),
        Column("map_index", Integer),
        Column("pool", String(256)),
        Column("day", String(10)),
        Column("gpu_seconds", Float),
        Column("created", Float),
        Column("expires", Float),
    )
    lock = Table(
        "gpu_dag_budget_lock",
        meta,
        Column("name", String(64), primary_key=True),
        Column("counter", Integer),
    )
    _create_tables(meta, engine)
    try:
        with engine.begin() as conn:
            conn.execute(insert(lock).values(name=_LOCK_NAME, counter=0))
    except IntegrityError:
        pass  # another process created it
    return engine, usage, claims, lock


#: How many times the tables are created before giving up (see :func:`_create_tables`).
_CREATE_ATTEMPTS = 5


@retry(
    stop=stop_after_attempt(_CREATE_ATTEMPTS),
    wait=wait_incrementing(start=0.05, increment=0.05),  # 0.05 s x the attempt that failed
    retry=retry_if_exception_type(DBAPIError),
    reraise=True,
)
def _create_tables(meta: Any, engine: Any) -> None:
    """Create the ledger's tables unless they exist. Processes that first use a new ledger at the same
    moment (two budget gates starting together) all see no table and all create it; all but one then
    fail ("table ... already exists" on SQLite, a duplicate type on PostgreSQL). Checking again sees the
    winner's tables, so a failed attempt is retried (the last failure is raised)."""
    meta.create_all(engine, checkfirst=True)


def _to_record(row: Any) -> UsageRecord:
    return UsageRecord(
        dag_id=row.dag_id,
        run_id=row.run_id,
        task_id=row.task_id,
        try_number=row.try_number,
        devices=tuple(range(int(row.gpus or 0))),
        start=float(row.start_ts),
        end=float(row.end_ts),
        map_index=int(row.map_index if row.map_index is not None else -1),
        pool=row.pool,
        outcome=row.outcome or "released",
        lease_id=row.record_id,
        host=row.host,
    )


def _to_claim(row: Any) -> BudgetClaim:
    return BudgetClaim(
        dag_id=row.dag_id,
        run_id=row.run_id,
        task_id=row.task_id,
        gpu_seconds=float(row.gpu_seconds),
        pool=row.pool,
        day=row.day,
        created=float(row.created),
        expires=float(row.expires),
        map_index=int(row.map_index),
    )


def _record_id(record: UsageRecord) -> str:
    if record.lease_id:
        return str(record.lease_id)
    return f"task:{record.dag_id}|{record.run_id}|{record.task_id}|{record.map_index}|{record.try_number}"


class SqlBudgetLedger:
    """The budget ledger in a SQL database (see the module docstring)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine, self.usage_table, self.claim_table, self.lock_table = _schema(url)

    def __repr__(self) -> str:
        return f"SqlBudgetLedger({self.engine.url.render_as_string(hide_password=True)!r})"

    @classmethod
    def from_conn_id(cls, conn_id: str) -> SqlBudgetLedger:
        """The ledger of an Airflow connection (workers; triggers call it via ``asyncio.to_thread``)."""
        try:
            return cls(sqlalchemy_url(BaseHook.get_connection(conn_id)))
        except ValueError as err:
            raise ValueError(f"[gpu_dag] budget_conn_id={conn_id!r}: {err}") from None

    # -- reading ------------------------------------------------------------------------------------
    def _read(self, conn: Any, dag_id: str, run_id: str, pool: str | None, now: float) -> BudgetUsage:
        day = today(now)
        day_start = datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()
        day_end = day_start + timedelta(days=1).total_seconds()
        u = self.usage_table
        wanted = and_(u.c.dag_id == dag_id, u.c.run_id == run_id)
        if pool:
            wanted = or_(wanted, and_(u.c.pool == pool, u.c.end_ts > day_start, u.c.start_ts < day_end))
        records = [_to_record(row) for row in conn.execute(select(u).where(wanted))]
        c = self.claim_table
        claims = [_to_claim(row) for row in conn.execute(select(c).where(c.c.expires > now))]
        return summarise(records, claims, dag_id, run_id, pool, now)

    def usage(self, dag_id: str, run_id: str, pool: str | None, now: float | None = None) -> BudgetUsage:
        moment = now if now is not None else datetime.now(UTC).timestamp()
        with self.engine.connect() as conn:
            return self._read(conn, dag_id, run_id, pool, moment)

    def charged(self, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int | None) -> bool:
        u = self.usage_table
        query = select(u.c.id).where(
            u.c.dag_id == dag_id, u.c.run_id == run_id, u.c.task_id == task_id, u.c.map_index == map_index
        )
        if try_number is not None:
            query = query.where(u.c.try_number == try_number)
        with self.engine.connect() as conn:
            return conn.execute(query.limit(1)).first() is not None

    # -- writing ------------------------------------------------------------------------------------
    def _lock(self, conn: Any) -> None:
        """Take the ledger's write lock for the rest of the transaction. A lock row deleted by hand (a
        cleaned table) is written again first: an update of no row locks nothing, and claims would no
        longer be serialised (two hosts could both spend the last of a budget)."""
        table = self.lock_table
        bump = update(table).where(table.c.name == _LOCK_NAME).values(counter=table.c.counter + 1)
        if conn.execute(bump).rowcount > 0:
            return
        try:
            with conn.begin_nested():  # a savepoint: a row another process wrote first fails only this
                conn.execute(insert(table).values(name=_LOCK_NAME, counter=1))
        except IntegrityError:
            conn.execute(bump)  # theirs: waits for their transaction, then holds the row

    def claim(self, cap: BudgetCap, claim: BudgetClaim, now: float | None = None) -> BudgetDecision:
        moment = now if now is not None else datetime.now(UTC).timestamp()
        c = self.claim_table
        with self.engine.begin() as conn:
            self._lock(conn)
            held = conn.execute(select(c).where(c.c.claim_id == claim.claim_id, c.c.expires > moment)).first()
            if held is not None:
                return BudgetDecision(True, f"already claimed {float(held.gpu_seconds) / 3600:.3f} GPU-h")
            usage = self._read(conn, claim.dag_id, claim.run_id, cap.pool, moment)
            decision = evaluate(cap, usage, claim.gpu_seconds)
            if decision.allowed:
                conn.execute(delete(c).where(c.c.claim_id == claim.claim_id))  # an expired one
                conn.execute(insert(c).values(claim_id=claim.claim_id, **claim.to_dict()))
        return decision

    def _insert_missing(self, conn: Any, records: list[UsageRecord]) -> int:
        u = self.usage_table
        ids = {_record_id(r): r for r in records}
        if not ids:
            return 0
        present: set[str] = set()
        keys = list(ids)
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            present.update(
                row[0] for row in conn.execute(select(u.c.record_id).where(u.c.record_id.in_(chunk)))
            )
        rows = [
            {
                "record_id": key,
                "dag_id": r.dag_id,
                "run_id": r.run_id,
                "task_id": r.task_id,
                "map_index": r.map_index,
                "try_number": r.try_number,
                "pool": r.pool,
                "gpus": len(r.devices),
                "start_ts": r.start,
                "end_ts": r.end,
                "outcome": r.outcome,
                "host": r.host,
            }
            for key, r in ids.items()
            if key not in present
        ]
        if rows:
            conn.execute(insert(u), rows)
        return len(rows)

    def record(self, record: UsageRecord) -> None:
        self.record_many([record])

    def record_many(self, records: list[UsageRecord]) -> int:
        """Charge records not in the ledger yet (by lease id); returns how many were new."""
        with self.engine.begin() as conn:
            self._lock(conn)
            return self._insert_missing(conn, records)

    def settle(self, claim_id: str, record: UsageRecord | None = None) -> bool:
        c = self.claim_table
        with self.engine.begin() as conn:
            self._lock(conn)
            held = conn.execute(delete(c).where(c.c.claim_id == claim_id)).rowcount > 0
            if record is not None:
                self._insert_missing(conn, [record])
        return bool(held)


def _offset_file(local: Path, url: str) -> Path:
    digest = hashlib.sha1(url.encode()).hexdigest()[:12]
    return local.with_name(f"{local.name}.forwarded-{digest}")


def _new_records(local: Path, offset: int) -> Iterator[tuple[int, UsageRecord | None]]:
    """Records appended to ``local`` after byte ``offset`` (complete lines only), with their end."""
    with local.open("rb") as handle:
        handle.seek(offset)
        for raw in handle:
            if not raw.endswith(b"\n"):
                return  # a line still being written: sent next time
            offset += len(raw)
            try:
                record = UsageRecord.from_dict(json.loads(raw))
            except (ValueError, KeyError, TypeError, AttributeError):
                yield offset, None
                continue
            yield offset, record


def _first_line_digest(path: Path) -> str:
    """What tells this usage file from one that replaced it: a digest of its first line (a rotated file
    starts with another lease; an inode number can be reused at once). Empty while it has no line."""
    with path.open("rb") as handle:
        first = handle.readline()
    return hashlib.sha1(first).hexdigest()[:16] if first.endswith(b"\n") else ""


def forward_local_usage(shared: SqlBudgetLedger, local: str | os.PathLike[str]) -> int:
    """Send the records of this host's usage file that the shared ledger does not have yet.

    Idempotent (a record is keyed by its lease id), so concurrent callers and a crash between the
    insert and the offset update only cost a re-check. Returns how many records were new.
    """
    path = Path(local)
    if not path.exists():
        return 0
    marker = _offset_file(path, shared.url)
    stat = path.stat()
    identity = _first_line_digest(path)
    try:
        # "<offset> <digest of the file's first line>" (a marker written before it was kept: "<offset>")
        offset_text, _, marked = marker.read_text().strip().partition(" ")
        offset = int(offset_text or 0)
    except (FileNotFoundError, ValueError):
        offset, marked = 0, ""
    if not 0 <= offset <= stat.st_size or (marked and marked != identity):
        offset = 0  # a damaged marker, or the file was replaced (shorter, or another file altogether)
    batch: list[UsageRecord] = []
    end = offset
    for position, record in _new_records(path, offset):
        end = position
        if record is not None:
            batch.append(record)
    if not batch and end == offset:
        return 0
    sent = shared.record_many(batch) if batch else 0
    tmp = marker.with_name(marker.name + f".{os.getpid()}.tmp")
    tmp.write_text(f"{end} {identity}")
    os.replace(tmp, marker)
    if sent:
        log.info("budget: forwarded %d usage record(s) of %s to %r", sent, path, shared)
    return sent
