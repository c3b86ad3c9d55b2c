"""The GPU lease table of one host: locking, atomic load/save, and reclaiming stale leases.

One directory per host (``[gpu_dag] lease_dir``) holds:

* ``lock``: an ``fcntl.flock`` target. Every read-modify-write of the table holds it. The kernel drops
  the lock when its holder dies, so a crash never leaves the table locked.
* ``leases.json``: the allocation table ``{"version": 1, "leases": {lease_id: record}}``. It is only
  ever replaced whole: written to a temporary file, fsynced, ``os.replace``-d over the old one and the
  directory fsynced. A crash leaves either the old or the new table, never a torn one; temporary files
  left by a crashed writer are removed by the next writer (only the lock holder writes them).
* ``usage.jsonl``: the GPU-seconds ledger (:mod:`airflow_gpu_dag.gpu.usage`), unless ``[gpu_dag]
  usage_ledger`` puts it elsewhere (the file budget gates read).

A lease is stale when its holder process is gone (same host, boot and pid namespace), the host
rebooted, or its heartbeat is older than its ttl. Reclaiming it kills its recorded work processes
that still run (orphans of a killed holder) and appends a ``reclaimed`` usage record. The lease API
on top of this table is :mod:`airflow_gpu_dag.gpu.lease`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import airflow_gpu_dag.metrics as metrics
from airflow_gpu_dag.gpu.lease_errors import LeaseError, LeaseTableCorrupt, LeaseTimeout
from airflow_gpu_dag.gpu.lease_settings import LeaseOwner, LeaseSettings
from airflow_gpu_dag.gpu.process import HostIdentity, process_alive, process_start_token
from airflow_gpu_dag.gpu.usage import UsageLedger, UsageRecord

__all__ = ["LOCK_FILE", "TABLE_FILE", "LeaseTable", "group_exists"]

log = logging.getLogger(__name__)

TABLE_FILE = "leases.json"
LOCK_FILE = "lock"
_TMP_PREFIX = ".leases.json."
_TMP_SUFFIX = ".tmp"

# lock files this thread holds: a signal handler (on_kill) that needs the table while the interrupted
# code holds it would deadlock on flock, so it gets a LeaseError instead
_held = threading.local()


class LeaseTable:
    """The lease table, lock and usage ledger in ``settings.lease_dir``, seen from this process."""

    def __init__(self, settings: LeaseSettings, identity: HostIdentity | None = None) -> None:
        self.settings = settings
        self.dir = settings.lease_dir
        self.table_path = self.dir / TABLE_FILE
        self.lock_path = self.dir / LOCK_FILE
        self.ledger = UsageLedger(settings.usage_file)
        self.identity = identity or HostIdentity.current()
        #: Seconds the last :meth:`locked` waited for the lock.
        self.lock_waited = 0.0

    # -- storage ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, timeout: float | None = None) -> Iterator[None]:
        """Hold the table lock (not reentrant: a second lock by this thread is a :class:`LeaseError`).

        ``timeout``: seconds to wait for it (None: as long as it takes); then :class:`LeaseTimeout`
        naming the lock (a holder stopped or hung inside the table). :attr:`lock_waited` says how
        long this took: no holder could renew its heartbeat meanwhile, which :meth:`stale_reason`
        does not count against them.
        """
        held: set[str] = _held.__dict__.setdefault("paths", set())
        key = str(self.lock_path.absolute())
        if key in held:
            raise LeaseError(f"the GPU lease table {self.table_path} is already locked by this thread")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as err:  # a file in the way, no permission, a read-only mount
            raise LeaseError(
                f"cannot use the GPU lease directory {self.dir} ([gpu_dag] lease_dir): "
                f"{err.strerror or err}. Fix: set [gpu_dag] lease_dir to a directory every worker of "
                "this host can create and write (a local path, the same for all of them)"
            ) from err
        try:
            self.lock_waited = self._take(fd, timeout)
            held.add(key)
            try:
                yield
            finally:
                held.discard(key)
        finally:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def _take(self, fd: int, timeout: float | None) -> float:
        """Lock ``fd``; the seconds it took."""
        started = time.monotonic()
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return time.monotonic() - started
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return time.monotonic() - started
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited >= timeout:
                    raise LeaseTimeout(
                        f"the GPU lease table lock {self.lock_path} was held by another process for "
                        f"{waited:.0f}s (a task stopped or hung while it held it?). Fix: find it with "
                        f"`fuser {self.lock_path}` and resume or kill it; the kernel frees the lock when "
                        "its holder dies."
                    ) from None
                time.sleep(min(0.05, max(0.0, timeout - waited)))

    def load(self) -> dict[str, Any]:
        """The table (an empty one when there is no file). Call with the lock held.

        :raises LeaseTableCorrupt: the file cannot be read as a table.
        """
        try:
            raw = self.table_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"version": 1, "leases": {}}
        except OSError as err:  # a directory in its place, no permission, an I/O error
            raw = ""
            problem: Exception | None = err
        else:
            problem = None
        try:
            if problem is not None:
                raise ValueError(str(problem))
            table = json.loads(raw)
            if not isinstance(table, dict) or not isinstance(table.get("leases"), dict):
                raise ValueError("no 'leases' object")
            for lease_id, record in table["leases"].items():
                _check_record(lease_id, record)
        except ValueError as err:
            raise LeaseTableCorrupt(
                f"GPU lease table {self.table_path} cannot be read ({err}). It is only ever replaced "
                "atomically, so this means outside damage. Stop the GPU tasks of this host, then remove "
                "or repair the file (check running GPU processes with nvidia-smi first)."
            ) from None
        return table

    def save(self, table: dict[str, Any]) -> None:
        """Replace the table atomically (temporary file, fsync, rename, directory fsync)."""
        for stale in self.dir.glob(f"{_TMP_PREFIX}*{_TMP_SUFFIX}"):
            with contextlib.suppress(OSError):  # left by a writer that crashed
                stale.unlink()
        fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX, dir=self.dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(table, handle, sort_keys=True, indent=1)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o664)
            os.replace(tmp, self.table_path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    # -- staleness ----------------------------------------------------------------------------------
    def stale_reason(self, record: Mapping[str, Any], now: float) -> str | None:
        """Why the lease ``record`` is stale, or None while it is healthy."""
        me = self.identity
        holder = record.get("holder") or {}
        if holder.get("host") == me.host:
            if holder.get("boot_id") and me.boot_id and holder["boot_id"] != me.boot_id:
                return "the host rebooted since the lease was taken"
            if holder.get("pidns") == me.pidns and not process_alive(int(holder["pid"]), holder.get("start")):
                return f"holder process {holder['pid']} is gone"
        ttl = float(record.get("ttl_s") or self.settings.ttl_s)
        # time spent waiting for the lock is time no holder could renew: not held against them
        age = now - float(record.get("heartbeat_at", 0.0)) - self.lock_waited
        if record.get("heartbeat_mono") is not None and self._same_boot(holder):
            # this boot's monotonic clock: a wall clock stepped forward past the ttl (NTP, a resumed VM)
            # must not make a live holder's lease look stale and hand its GPUs to another task
            age = time.monotonic() - float(record["heartbeat_mono"]) - self.lock_waited
        if age > ttl:
            return f"no heartbeat for {age:.0f}s (lease_ttl {ttl:.0f}s)"
        return None

    def _same_boot(self, holder: Mapping[str, Any]) -> bool:
        """Whether ``holder`` ran on this host and boot (so its monotonic clock is ours)."""
        me = self.identity
        return bool(me.boot_id) and holder.get("host") == me.host and holder.get("boot_id") == me.boot_id

    def kill_orphans(self, record: Mapping[str, Any]) -> None:
        """Kill the recorded work processes of ``record`` that still run (on this host only)."""
        holder = record.get("holder") or {}
        if not self.settings.kill_orphans or holder.get("host") != self.identity.host:
            return
        if holder.get("pidns") != self.identity.pidns:
            return
        for proc in record.get("processes") or ():
            pid, start, pgid = int(proc["pid"]), proc.get("start"), proc.get("pgid")
            if pid == os.getpid():
                continue
            leader = process_start_token(pid)
            if leader is not None and start is not None and leader != start:
                continue  # the pid was reused by another process: not ours
            if pgid == pid:
                # Its own process group (a bash command's session): kill all of it, also when its leader
                # has exited and left workers behind (a pgid is not reused while the group has members).
                if leader is None and not group_exists(pid):
                    continue
            elif leader is None:
                continue
            try:
                if pgid == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
                log.warning("GPU lease %s reclaimed: killed orphaned process %s", record["lease_id"], pid)
            except (ProcessLookupError, PermissionError) as err:
                log.warning("GPU lease %s: cannot kill orphan %s: %s", record["lease_id"], pid, err)

    def rebase_future_heartbeats(self, table: dict[str, Any], now: float) -> bool:
        """Count a heartbeat later than ``now`` (the clock was set back since) from ``now``; True when
        one changed (save the table). Else a holder that died after its last heartbeat would keep its
        GPUs until the clock reached that time again, not for ``lease_ttl``; a live holder renews."""
        changed = False
        for record in table["leases"].values():
            if float(record.get("heartbeat_at", 0.0)) > now:
                record["heartbeat_at"] = now
                changed = True
        return changed

    def reclaim(self, table: dict[str, Any], now: float) -> list[dict[str, Any]]:
        """Remove every stale lease from ``table`` (not saved); returns them with ``reclaim_reason``."""
        reclaimed = []
        for lease_id, record in list(table["leases"].items()):
            reason = self.stale_reason(record, now)
            if reason is None:
                continue
            self.kill_orphans(record)
            end = max(float(record.get("acquired_at", now)), float(record.get("heartbeat_at", now)))
            self.record_usage(record, end, "reclaimed", reclaim_reason=reason)
            del table["leases"][lease_id]
            log.warning(
                "GPU lease %s (devices %s, %s) reclaimed: %s",
                lease_id,
                record.get("devices"),
                LeaseOwner(**record.get("owner", {})).describe(),
                reason,
            )
            reclaimed.append({**record, "reclaim_reason": reason})
        return reclaimed

    # -- usage --------------------------------------------------------------------------------------
    def record_usage(self, record: Mapping[str, Any], end: float, outcome: str, **extra: Any) -> None:
        """Append the lease's GPU-seconds to the usage ledger (logged, not raised, when it fails)."""
        owner = record.get("owner") or {}
        try:
            self.ledger.append(
                UsageRecord(
                    dag_id=owner.get("dag_id"),
                    run_id=owner.get("run_id"),
                    task_id=owner.get("task_id"),
                    try_number=owner.get("try_number"),
                    map_index=owner.get("map_index", -1),
                    pool=owner.get("pool"),
                    devices=tuple(record.get("devices", ())),
                    start=float(record.get("acquired_at", end)),
                    end=end,
                    outcome=outcome,
                    lease_id=record.get("lease_id"),
                    host=(record.get("holder") or {}).get("host"),
                    extra=extra,
                )
            )
        except OSError:
            log.exception("GPU usage ledger %s cannot be written", self.ledger.path)
        start = float(record.get("acquired_at", end))
        metrics.lease_used(len(record.get("devices", ())), start, end, outcome, owner.get("pool"))


def group_exists(pgid: int) -> bool:
    """True while some process of process group ``pgid`` is left (signal 0 checks, sends nothing; a
    zombie counts until it is reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_record(lease_id: str, record: Any) -> None:
    """Raise ``ValueError`` unless ``record`` has the shape every reader of the table relies on."""
    if not isinstance(record, dict):
        raise ValueError(f"lease {lease_id!r} is not an object")
    devices = record.get("devices")
    if not isinstance(devices, list) or not all(type(d) is int for d in devices):
        raise ValueError(f"lease {lease_id!r}: 'devices' is not a list of GPU indices")
    for key in ("acquired_at", "heartbeat_at", "heartbeat_mono", "ttl_s"):
        if key not in record or (key == "ttl_s" and record[key] is None):  # ttl_s None: the setting
            continue
        # null would crash every allocation (float(None)); NaN or Infinity would never go stale
        if type(record[key]) not in (int, float) or not math.isfinite(record[key]):
            raise ValueError(f"lease {lease_id!r}: {key!r} is not a number")
    holder = record.get("holder")
    if not isinstance(holder, dict) or not isinstance(holder.get("pid"), int):
        raise ValueError(f"lease {lease_id!r}: 'holder' has no pid")
    for proc in record.get("processes") or ():
        if not isinstance(proc, dict) or not isinstance(proc.get("pid"), int):
            raise ValueError(f"lease {lease_id!r}: a recorded process has no pid")
