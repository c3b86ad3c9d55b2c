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
rebooted, or its heartbeat is older than its ttl. Its devices are freed only once its work is gone:
the processes and process groups recorded in the lease (a Python GPU task records its own process
group when it takes the lease, a bash task its command's session when it starts) and the processes
started with the lease's environment (``GPU_DAG_LEASE_ID``). While any of them still runs, the lease
stays in the table marked ``reclaim`` (its devices held, its holder's heartbeat refused): they get
SIGTERM, and SIGKILL once ``reclaim_grace_s`` has passed, from whichever allocation on the host comes
next (``kill_orphans=False``: none, it waits for them). Then the lease is removed with a
``reclaimed`` usage record. The lease API on top of this table is :mod:`airflow_gpu_dag.gpu.lease`.
"""

from __future__ import annotations

import contextlib
import errno
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
from airflow_gpu_dag.gpu.lease_settings import LeaseSettings, owner_of
from airflow_gpu_dag.gpu.process import (
    HostIdentity,
    group_members,
    process_alive,
    process_start_token,
    processes_with_env,
)
from airflow_gpu_dag.gpu.usage import UsageLedger, UsageRecord

__all__ = ["LEASE_ENV", "LOCK_FILE", "TABLE_FILE", "LeaseTable", "group_exists"]

log = logging.getLogger(__name__)

TABLE_FILE = "leases.json"
LOCK_FILE = "lock"
_TMP_PREFIX = ".leases.json."
_TMP_SUFFIX = ".tmp"
#: errno values of a lease directory this process may not write (no permission, a read-only mount)
_NOT_WRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
#: The environment variable naming the lease in every process started for its work.
LEASE_ENV = "GPU_DAG_LEASE_ID"
#: Seconds one allocation waits, holding the table lock, for a reclaimed lease's work to exit after a
#: signal; work still running then keeps the devices until a later allocation finds it gone.
_EXIT_WAIT_S = {"SIGTERM": 0.5, "SIGKILL": 1.0}

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
            data = self.table_path.read_bytes()
        except FileNotFoundError:
            return {"version": 1, "leases": {}}
        except PermissionError as err:
            raise self._unwritable(err, "read") from err
        except OSError as err:  # a directory in its place, no permission, an I/O error
            data = b""
            problem: Exception | None = err
        else:
            problem = None
        try:
            if problem is not None:
                raise ValueError(str(problem))
            table = json.loads(data.decode("utf-8"))  # UnicodeDecodeError is a ValueError: corrupt
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

    def _unwritable(self, err: OSError, action: str) -> LeaseError:
        """The error for a lease directory this process may lock but not use (its files or the directory
        itself belong to another user, or are read-only)."""
        return LeaseError(
            f"cannot {action} the GPU lease table in {self.dir} ([gpu_dag] lease_dir): "
            f"{err.strerror or err} ({err.filename or self.dir}). The lock file can be opened, but the "
            "table is replaced by writing a new file into the directory, so every worker of this host "
            "needs write access to the directory itself (on a writable file system). Fix: give the "
            f"workers' user write access to {self.dir} and its files (e.g. a group they share, with "
            "`chmod g+rwxs`), or set [gpu_dag] lease_dir to a local directory they can all write"
        )

    def save(self, table: dict[str, Any]) -> None:
        """Replace the table atomically (temporary file, fsync, rename, directory fsync).

        :raises LeaseError: the directory cannot be written (with the fix).
        """
        for stale in self.dir.glob(f"{_TMP_PREFIX}*{_TMP_SUFFIX}"):
            with contextlib.suppress(OSError):  # left by a writer that crashed
                stale.unlink()
        try:
            fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX, dir=self.dir)
        except OSError as err:
            if err.errno in _NOT_WRITABLE:
                raise self._unwritable(err, "write") from err
            raise
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(table, handle, sort_keys=True, indent=1)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o664)
            os.replace(tmp, self.table_path)
        except BaseException as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(err, OSError) and err.errno in _NOT_WRITABLE:
                raise self._unwritable(err, "write") from err
            raise
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    # -- staleness ----------------------------------------------------------------------------------
    def stale_reason(self, record: Mapping[str, Any], now: float) -> str | None:
        """Why the lease ``record`` is stale, or None while it is healthy. A lease being reclaimed
        (its work still stopping) stays stale whatever its heartbeat says."""
        reclaim = record.get("reclaim")
        if isinstance(reclaim, dict):
            return str(reclaim.get("reason") or "being reclaimed")
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

    def _sees_processes_of(self, record: Mapping[str, Any]) -> bool:
        """Whether the pids of ``record`` are this process's to judge (same host, boot, pid namespace)."""
        holder = record.get("holder") or {}
        me = self.identity
        if holder.get("host") != me.host or holder.get("pidns") != me.pidns:
            return False
        return not (holder.get("boot_id") and me.boot_id and holder["boot_id"] != me.boot_id)

    def running_work(self, lease_id: str, record: Mapping[str, Any]) -> tuple[list[int], list[int]]:
        """The work of lease ``lease_id`` that still runs on this host: (process groups, single pids).

        Recorded process groups with a running member (also when their leader has exited: a pgid is
        not reused while its group has members), recorded processes that still run (not a reused pid),
        and processes started with ``GPU_DAG_LEASE_ID=<lease_id>`` in their environment (a command
        started in the instant before its task recorded it, or one that left its task's group).
        Nothing for a lease whose holder ran on another host, boot or pid namespace: its pids mean
        nothing here.
        """
        if not self._sees_processes_of(record):
            return [], []
        groups: set[int] = set()
        pids: set[int] = set()
        for proc in record.get("processes") or ():
            pid, start, pgid = int(proc["pid"]), proc.get("start"), proc.get("pgid")
            leader = process_start_token(pid)
            if leader is not None and start is not None and leader != start:
                continue  # the pid was reused by another process: not ours (nor is a group it leads)
            if pgid == pid:
                if group_members(pid):
                    groups.add(pid)
            elif leader is not None:  # this process too: it runs, so its devices stay held
                pids.add(pid)
        holder_start = (record.get("holder") or {}).get("start")
        pids.update(processes_with_env(LEASE_ENV, lease_id, started_after=holder_start))
        return sorted(groups), sorted(pids)

    def stop_work(self, lease_id: str, record: dict[str, Any], reason: str) -> bool:
        """Stop what runs of the stale lease ``record`` (changed in place: save the table); True once
        nothing does, so its devices can be leased again.

        The first call marks the lease ``reclaim`` and sends SIGTERM; a call ``reclaim_grace_s``
        later sends SIGKILL. Each waits briefly for the work to exit. This process and its own
        process group are never signalled (they count as running: the devices stay held).
        """
        groups, pids = self.running_work(lease_id, record)
        if not groups and not pids:
            return True
        state = record.get("reclaim")
        if not isinstance(state, dict):
            state = record["reclaim"] = {
                "reason": reason,
                "since": time.time(),
                "since_mono": time.monotonic(),
                "boot_id": self.identity.boot_id,
                "signal": None,
            }
        who = owner_of(record).describe()
        if not self.settings.kill_orphans:
            log.warning(
                "GPU lease %s (devices %s, %s) is stale (%s); its devices stay held until its processes "
                "%s exit (kill_orphans is off)",
                lease_id,
                record.get("devices"),
                who,
                reason,
                groups + pids,
            )
            return False
        sent = state.get("signal")
        if sent is None:
            sig = signal.SIGTERM
        elif self._reclaiming_for(state) >= self.settings.reclaim_grace_s or sent == "SIGKILL":
            sig = signal.SIGKILL
        else:
            return False  # SIGTERM sent; the grace is not over
        state["signal"] = sig.name
        self._signal(groups, pids, sig)
        log.warning(
            "GPU lease %s (devices %s, %s) is stale (%s): sent %s to its processes still running "
            "(process groups %s, processes %s); its devices are leased again once they are gone",
            lease_id,
            record.get("devices"),
            who,
            reason,
            sig.name,
            groups,
            pids,
        )
        deadline = time.monotonic() + _EXIT_WAIT_S[sig.name]
        while True:
            groups, pids = self.running_work(lease_id, record)
            if not groups and not pids:
                return True
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if sig == signal.SIGKILL:
            log.error(
                "GPU lease %s (devices %s, %s): processes %s survive SIGKILL (stuck in the GPU driver, or "
                "not this user's to signal); its devices stay held until they are gone",
                lease_id,
                record.get("devices"),
                who,
                groups + pids,
            )
        return False

    def _reclaiming_for(self, state: Mapping[str, Any]) -> float:
        """Seconds since the reclaim of ``state`` began (this boot's monotonic clock when it began on
        this boot: a wall clock stepped back must not stretch the grace)."""
        if state.get("since_mono") is not None and state.get("boot_id") == self.identity.boot_id:
            return time.monotonic() - float(state["since_mono"])
        return time.time() - float(state.get("since") or 0.0)

    @staticmethod
    def _signal(groups: list[int], pids: list[int], sig: signal.Signals) -> None:
        try:
            mine = os.getpgid(0)
        except OSError:
            mine = None
        for pgid in groups:
            if pgid == mine:
                continue  # our own group: the reclaimer itself is in it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        for pid in pids:
            if pid != os.getpid():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

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
        """Remove every stale lease whose work is gone from ``table`` (not saved); returns them with
        ``reclaim_reason``. See :meth:`sweep`."""
        return self.sweep(table, now)[0]

    def sweep(self, table: dict[str, Any], now: float) -> tuple[list[dict[str, Any]], bool]:
        """Reclaim stale leases in ``table`` (not saved): those whose work is gone are removed and
        returned with ``reclaim_reason``; those whose work still runs are marked ``reclaim`` and their
        work signalled (:meth:`stop_work`). Also True when the table changed (save it)."""
        reclaimed = []
        changed = False
        for lease_id, record in list(table["leases"].items()):
            reason = self.stale_reason(record, now)
            if reason is None:
                continue
            before = json.dumps(record.get("reclaim"), sort_keys=True)
            if not self.stop_work(lease_id, record, reason):
                changed = changed or json.dumps(record.get("reclaim"), sort_keys=True) != before
                continue
            changed = True
            record.pop("reclaim", None)
            end = max(float(record.get("acquired_at", now)), float(record.get("heartbeat_at", now)))
            self.record_usage(record, end, "reclaimed", reclaim_reason=reason)
            del table["leases"][lease_id]
            log.warning(
                "GPU lease %s (devices %s, %s) reclaimed: %s",
                lease_id,
                record.get("devices"),
                owner_of(record).describe(),
                reason,
            )
            reclaimed.append({**record, "reclaim_reason": reason})
        return reclaimed, changed

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


def _is_int(value: Any) -> bool:
    return type(value) is int


def _is_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _optional_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _check_record(lease_id: str, record: Any) -> None:
    """Raise ``ValueError`` unless ``record`` has the shape every reader of the table relies on.

    Anything a reader could take for free devices or a dead holder is refused: a lease the table
    misreads would hand its GPUs to a second task.
    """
    if not isinstance(record, dict):
        raise ValueError(f"lease {lease_id!r} is not an object")
    devices = record.get("devices")
    if not isinstance(devices, list) or not all(_is_int(d) for d in devices):
        raise ValueError(f"lease {lease_id!r}: 'devices' is not a list of GPU indices")
    uuids = record.get("uuids")
    # a string here would be read one character per device: no UUID any worker knows, devices "free"
    if uuids is not None and (not isinstance(uuids, list) or not all(_optional_str(u) for u in uuids)):
        raise ValueError(f"lease {lease_id!r}: 'uuids' is not a list of GPU UUIDs")
    for key in ("acquired_at", "heartbeat_at", "heartbeat_mono", "ttl_s"):
        if key not in record or (key == "ttl_s" and record[key] is None):  # ttl_s None: the setting
            continue
        # null would crash every allocation (float(None)); NaN or Infinity would never go stale
        if not _is_number(record[key]):
            raise ValueError(f"lease {lease_id!r}: {key!r} is not a number")
    if "ttl_s" in record and record["ttl_s"] is not None and record["ttl_s"] <= 0:
        # a live holder's lease would be stale at once and its GPUs handed out again
        raise ValueError(f"lease {lease_id!r}: 'ttl_s' {record['ttl_s']} is not a positive number of seconds")
    holder = record.get("holder")
    if not isinstance(holder, dict) or not _is_int(holder.get("pid")) or holder["pid"] < 1:
        raise ValueError(f"lease {lease_id!r}: 'holder' has no pid")
    for key in ("host", "boot_id", "pidns", "start"):
        if not _optional_str(holder.get(key)):
            raise ValueError(f"lease {lease_id!r}: the holder's {key!r} is not a string")
    owner = record.get("owner")
    if owner is not None and not isinstance(owner, dict):
        raise ValueError(f"lease {lease_id!r}: 'owner' is not an object")
    processes = record.get("processes")
    if processes is not None and not isinstance(processes, list):
        raise ValueError(f"lease {lease_id!r}: 'processes' is not a list")
    for proc in processes or ():
        if not isinstance(proc, dict) or not _is_int(proc.get("pid")) or proc["pid"] < 1:
            raise ValueError(f"lease {lease_id!r}: a recorded process has no pid")
        pgid = proc.get("pgid")
        if not _optional_str(proc.get("start")) or not (pgid is None or (_is_int(pgid) and pgid >= 1)):
            raise ValueError(f"lease {lease_id!r}: process {proc['pid']} has a bad 'start' or 'pgid'")
    reclaim = record.get("reclaim")
    if reclaim is not None and (
        not isinstance(reclaim, dict)
        or not _optional_str(reclaim.get("reason"))
        or not _optional_str(reclaim.get("boot_id"))
        or reclaim.get("signal") not in (None, "SIGTERM", "SIGKILL")
        or not all(reclaim.get(k) is None or _is_number(reclaim[k]) for k in ("since", "since_mono"))
    ):
        raise ValueError(f"lease {lease_id!r}: 'reclaim' is not a reclaim in progress")
