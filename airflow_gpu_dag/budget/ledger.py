"""The budget ledger: GPU usage charged so far and the claims gates hold, with an atomic claim.

Two implementations of :class:`BudgetLedger`:

* :class:`FileBudgetLedger` (default): the lease usage ledger of this host (``usage.jsonl``, JSON
  lines written by the lease manager when a lease ends, and by pods when they end) plus a claims
  file next to it, both changed under a POSIX lock (``fcntl.lockf``). Location: ``[gpu_dag]
  usage_ledger`` (a file), else ``<[gpu_dag] lease_dir>/usage.jsonl`` (the lease directory's
  default when unset); a gate may also name the file. It is one host's ledger, unless the file sits on
  storage every host mounts with working POSIX locks.
* :class:`~airflow_gpu_dag.budget.shared.SqlBudgetLedger` (``[gpu_dag] budget_conn_id``): one ledger
  for every host in a SQL database given by an Airflow connection (see docs/edges.md).

Usage counts finished leases and pods; a task still running is covered by its gate's claim until it
is charged.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from airflow_gpu_dag.core.model.budget import BudgetCap, BudgetClaim, BudgetDecision, BudgetUsage, evaluate
from airflow_gpu_dag.gpu.lease_settings import configured_usage_ledger
from airflow_gpu_dag.gpu.usage import UsageLedger, UsageRecord, gpu_seconds_by_pool_day

__all__ = [
    "BudgetLedger",
    "BudgetLedgerError",
    "BudgetUsage",
    "FileBudgetLedger",
    "read_usage",
    "summarise",
    "today",
    "usage_ledger_path",
]


def usage_ledger_path(explicit: str | os.PathLike[str] | None = None) -> str:
    """The ledger file: ``explicit``, else the one the lease manager charges ended leases to
    (``[gpu_dag] usage_ledger``, or ``usage.jsonl`` in ``[gpu_dag] lease_dir`` or its default)."""
    if explicit:
        return os.fspath(explicit)
    return os.fspath(configured_usage_ledger())


def today(now: float | None = None) -> str:
    """UTC day ``YYYY-MM-DD`` of ``now`` (epoch seconds; default: now)."""
    moment = datetime.now(UTC) if now is None else datetime.fromtimestamp(now, UTC)
    return moment.date().isoformat()


def summarise(
    records: Iterable[UsageRecord],
    claims: Iterable[BudgetClaim],
    dag_id: str,
    run_id: str,
    pool: str | None,
    now: float | None = None,
) -> BudgetUsage:
    """Usage of ``(dag_id, run_id)`` and of ``pool`` on today's UTC day, with the open claims.

    Every open claim of the pool counts against today, whatever day it was made: its task may still
    be running, and what it uses after midnight is charged to today."""
    day = today(now)
    records = list(records)
    run_used = sum(r.gpu_seconds for r in records if (r.dag_id, r.run_id) == (dag_id, run_id))
    pool_used = gpu_seconds_by_pool_day(r for r in records if pool and r.pool == pool).get((pool, day), 0.0)
    claims = list(claims)
    return BudgetUsage(
        run_gpu_seconds=run_used,
        pool_day_gpu_seconds=pool_used if pool else 0.0,
        day=day,
        run_claimed_seconds=sum(c.gpu_seconds for c in claims if (c.dag_id, c.run_id) == (dag_id, run_id)),
        pool_day_claimed_seconds=sum(c.gpu_seconds for c in claims if pool and c.pool == pool),
    )


class BudgetLedgerError(RuntimeError):
    """The ledger's state cannot be read; the message says which file and the fix."""


class BudgetLedger(Protocol):
    """What the budget gate, its trigger and the charging code need from a ledger."""

    def usage(self, dag_id: str, run_id: str, pool: str | None, now: float | None = None) -> BudgetUsage:
        """Charged usage and open claims of the run and of the pool today (a read, no lock held after)."""
        ...

    def claim(self, cap: BudgetCap, claim: BudgetClaim, now: float | None = None) -> BudgetDecision:
        """Atomically: if ``claim`` fits under ``cap`` (or is already held), record it and allow."""
        ...

    def settle(self, claim_id: str, record: UsageRecord | None = None) -> bool:
        """Close a claim (its task was charged); ``record`` is charged with it. False: no open claim."""
        ...

    def record(self, record: UsageRecord) -> None:
        """Charge one finished lease, pod or task (idempotent by ``record.lease_id``)."""
        ...

    def charged(self, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int | None) -> bool:
        """True when a usage record of that task instance try is in the ledger."""
        ...


_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _forget_thread_locks() -> None:
    """A forked child starts with no thread in the ledger: locks copied while held would never open."""
    global _THREAD_LOCKS_GUARD
    _THREAD_LOCKS.clear()
    _THREAD_LOCKS_GUARD = threading.Lock()


os.register_at_fork(after_in_child=_forget_thread_locks)


def _thread_lock(path: Path) -> threading.Lock:
    """This process's lock of the ledger whose lock file is ``path`` (one per file, whichever object)."""
    key = os.path.abspath(path)
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(key, threading.Lock())


class FileBudgetLedger:
    """The JSON-lines usage ledger plus ``<ledger>.claims.json``, changed under ``<ledger>.lock``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.claims_path = self.path.with_name(self.path.name + ".claims.json")
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    def __repr__(self) -> str:
        return f"FileBudgetLedger({str(self.path)!r})"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The ledger for this thread alone: the lock file for other processes (``lockf`` locks are a
        process's, so they do not keep two threads of one process apart) and a lock of this process."""
        with _thread_lock(self.lock_path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o664)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX)
                yield
            finally:
                with contextlib.suppress(OSError):
                    fcntl.lockf(fd, fcntl.LOCK_UN)
                os.close(fd)

    def _claims(self, now: float | None) -> dict[str, BudgetClaim]:
        """The claims on file that have not expired at ``now`` (all of them with ``now`` None).

        :raises BudgetLedgerError: the claims file exists but cannot be read. It is only ever replaced
            atomically; reading it as empty would let the next claim overwrite every open claim.
        """
        try:
            raw = json.loads(self.claims_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            raise BudgetLedgerError(
                f"budget claims file {self.claims_path} cannot be read ({err}); gates wait rather than "
                "overwrite the open claims in it. Fix: repair the file, or remove it (open claims are "
                "then forgotten: their tasks' usage still counts once they end)."
            ) from None
        claims = {}
        for key, value in (raw if isinstance(raw, dict) else {}).items():
            try:
                claim = BudgetClaim.from_dict(value)
            except (KeyError, TypeError, ValueError):
                continue
            if now is None or claim.expires > now:
                claims[key] = claim
        return claims

    def _write_claims(self, claims: dict[str, BudgetClaim]) -> None:
        tmp = self.claims_path.with_name(self.claims_path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({k: c.to_dict() for k, c in claims.items()}, sort_keys=True), "utf-8")
        os.replace(tmp, self.claims_path)

    def _records(self) -> list[UsageRecord]:
        return UsageLedger(self.path).read()

    def usage(self, dag_id: str, run_id: str, pool: str | None, now: float | None = None) -> BudgetUsage:
        moment = now if now is not None else datetime.now(UTC).timestamp()
        with self._locked():
            claims = self._claims(moment)
            records = self._records()
        return summarise(records, claims.values(), dag_id, run_id, pool, moment)

    def claim(self, cap: BudgetCap, claim: BudgetClaim, now: float | None = None) -> BudgetDecision:
        moment = now if now is not None else datetime.now(UTC).timestamp()
        with self._locked():
            try:
                claims = self._claims(moment)
            except BudgetLedgerError as err:
                return BudgetDecision(False, str(err))
            if claim.claim_id in claims:
                return BudgetDecision(
                    True, f"already claimed {claims[claim.claim_id].gpu_seconds / 3600:.3f} GPU-h"
                )
            usage = summarise(self._records(), claims.values(), claim.dag_id, claim.run_id, cap.pool, moment)
            decision = evaluate(cap, usage, claim.gpu_seconds)
            if decision.allowed:
                claims[claim.claim_id] = claim
                self._write_claims(claims)
        return decision

    def settle(self, claim_id: str, record: UsageRecord | None = None) -> bool:
        # The claim is closed whether or not it has expired (as the SQL ledger deletes its row), and
        # the others are kept as they are (a claim's next write prunes expired ones): nothing here
        # depends on the wall clock.
        with self._locked():
            if record is not None:
                self._append_once(record)
            claims = self._claims(None)  # unreadable: raised after the usage is recorded
            held = claims.pop(claim_id, None) is not None
            if held:
                self._write_claims(claims)
        return held

    def _append_once(self, record: UsageRecord) -> None:
        if record.lease_id and any(r.lease_id == record.lease_id for r in self._records()):
            return
        UsageLedger(self.path).append(record)  # after a torn last line, on a line of its own

    def record(self, record: UsageRecord) -> None:
        with self._locked():
            self._append_once(record)

    def charged(self, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int | None) -> bool:
        return any(
            (r.dag_id, r.run_id, r.task_id, r.map_index) == (dag_id, run_id, task_id, map_index)
            and (try_number is None or r.try_number == try_number)
            for r in self._records()
        )


def read_usage(
    ledger: str | os.PathLike[str] | None,
    dag_id: str,
    run_id: str,
    pool: str | None,
    now: float | None = None,
) -> BudgetUsage:
    """Sum the file ledger for ``(dag_id, run_id)`` and for ``pool`` on today's UTC day (with the open
    claims). A missing ledger (no lease ended yet) counts as zero usage."""
    if not ledger or not Path(ledger).parent.is_dir():
        return BudgetUsage(0.0, 0.0, today(now))
    return FileBudgetLedger(ledger).usage(dag_id, run_id, pool, now)
