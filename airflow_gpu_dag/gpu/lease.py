"""GPU leases: which task holds which devices of this host, atomic across processes.

Airflow pools count GPUs; leases decide *which* GPUs. A task leases concrete device indices before its
command runs and its process sees only those (``CUDA_VISIBLE_DEVICES``/``NVIDIA_VISIBLE_DEVICES``).

Design (one directory per host, ``[gpu_dag] lease_dir``):

* ``lock``: an ``fcntl.flock`` target. Every read-modify-write of the table holds it. The kernel drops
  the lock when its holder dies, so a crash never leaves the table locked.
* ``leases.json``: the allocation table ``{"version": 1, "leases": {lease_id: record}}``. It is only
  ever replaced whole: written to a temporary file, fsynced, ``os.replace``-d over the old one and the
  directory fsynced. A crash leaves either the old or the new table, never a torn one; temporary files
  left by a crashed writer are removed by the next writer (only the lock holder writes them).
* ``usage.jsonl``: the GPU-seconds ledger (:mod:`airflow_gpu_dag.gpu.usage`).

A lease records its holder (pid, the process start time from ``/proc`` to beat pid reuse, host,
boot id, pid namespace), the processes doing its work (e.g. the bash command's session), and a
heartbeat that the holder renews every ``lease_heartbeat`` seconds. Before every allocation, stale
leases are reclaimed: the holder process is gone (killed with -9, host rebooted), or the heartbeat is
older than ``lease_ttl``. A stale lease therefore holds its GPUs for at most ``lease_ttl`` (plus one
poll of the next waiting task). When a lease is reclaimed, its recorded work processes that are still
running (orphans of a killed holder) are killed, so the GPUs are really free when they are given out
again; the holder itself, if still alive, finds the lease lost at its next heartbeat.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from airflow_gpu_dag.core.resources import EstimateError, GpuRequest, format_memory, parse_duration
from airflow_gpu_dag.gpu.inventory import GpuInventory, load_inventory
from airflow_gpu_dag.gpu.usage import USAGE_FILE, UsageLedger, UsageRecord

__all__ = [
    "Lease",
    "LeaseError",
    "LeaseImpossible",
    "LeaseLost",
    "LeaseManager",
    "LeaseOwner",
    "LeaseSettings",
    "LeaseTableCorrupt",
    "LeaseTimeout",
    "default_lease_dir",
    "process_alive",
    "process_start_token",
]

log = logging.getLogger(__name__)

TABLE_FILE = "leases.json"
LOCK_FILE = "lock"
_TMP_PREFIX = ".leases.json."
_TMP_SUFFIX = ".tmp"

# lock files this thread holds: a signal handler (on_kill) that needs the table while the interrupted
# code holds it would deadlock on flock, so it gets a LeaseError instead
_held = threading.local()


class LeaseError(RuntimeError):
    """A GPU lease could not be obtained or kept."""


class LeaseImpossible(LeaseError):
    """The request can never be satisfied on this host (too many GPUs, unknown type, too much memory)."""


class LeaseTimeout(LeaseError):
    """The devices did not become free within the wait timeout."""


class LeaseLost(LeaseError):
    """The lease was reclaimed while its task was still running (heartbeat missed for ``lease_ttl``)."""


class LeaseTableCorrupt(LeaseError):
    """``leases.json`` cannot be read; nothing is allocated until a person repairs or removes it."""


# -- processes --------------------------------------------------------------------------------------
def process_start_token(pid: int) -> str | None:
    """An id of the process ``pid`` that changes when the pid is reused, or None when it is gone.

    Linux: the start time in clock ticks since boot (``/proc/<pid>/stat`` field 22). Zombies
    (killed, not yet reaped) count as gone. Elsewhere: psutil's create time.
    """
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode(errors="replace")
    except FileNotFoundError:
        return None
    except OSError:
        raw = ""
    if raw:
        fields = raw[raw.rfind(")") + 2 :].split()
        if len(fields) > 19:
            return None if fields[0] in ("Z", "X", "x") else fields[19]
    try:
        import psutil

        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return f"{proc.create_time():.3f}"
    except Exception:
        return None


def process_alive(pid: int, start_token: str | None) -> bool:
    """True when ``pid`` runs and is the same process as when ``start_token`` was taken."""
    token = process_start_token(pid)
    return token is not None and (start_token is None or token == start_token)


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None


# -- settings ---------------------------------------------------------------------------------------
def default_lease_dir() -> Path:
    """Host-wide default: ``<tmp>/airflow-gpu-dag/leases`` (shared by every worker of the host)."""
    return Path(tempfile.gettempdir()) / "airflow-gpu-dag" / "leases"


@dataclass(frozen=True)
class LeaseSettings:
    """Where leases live and their timing (seconds).

    ``ttl_s``: a lease whose heartbeat is older than this is reclaimed (the bound on how long a stale
    lease can hold a GPU). ``heartbeat_s``: how often a holder renews (must be well below ``ttl_s``).
    ``poll_s``: how often a waiting task retries. ``wait_timeout_s``: how long a task waits for its
    devices before failing. ``kill_orphans``: kill a reclaimed lease's recorded work processes.
    """

    lease_dir: Path = field(default_factory=default_lease_dir)
    ttl_s: float = 120.0
    heartbeat_s: float = 10.0
    poll_s: float = 2.0
    wait_timeout_s: float = 600.0
    kill_orphans: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "lease_dir", Path(self.lease_dir))
        for name in ("ttl_s", "heartbeat_s", "poll_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"lease setting {name}={getattr(self, name)} must be > 0")
        if self.wait_timeout_s < 0:
            raise ValueError(f"lease setting wait_timeout_s={self.wait_timeout_s} must be >= 0")
        if self.heartbeat_s * 2 > self.ttl_s:
            raise ValueError(
                f"lease heartbeat ({self.heartbeat_s}s) must be at most half the lease ttl ({self.ttl_s}s), "
                "or healthy leases are reclaimed; lower [gpu_dag] lease_heartbeat or raise lease_ttl"
            )

    @classmethod
    def from_config(cls, **overrides: Any) -> LeaseSettings:
        """Settings from ``[gpu_dag]`` (``lease_dir``, ``lease_ttl``, ``lease_heartbeat``,
        ``lease_poll_interval``, ``lease_wait_timeout``), then ``overrides``."""
        from airflow_gpu_dag.settings import conf_get

        def seconds(key: str, default: float) -> float:
            raw = conf_get(key, None)
            if raw is None or not str(raw).strip():
                return default
            try:
                return parse_duration(raw)
            except EstimateError as err:
                raise ValueError(f"[gpu_dag] {key}: {err}") from None

        values: dict[str, Any] = {
            "lease_dir": Path(conf_get("lease_dir", None) or default_lease_dir()),
            "ttl_s": seconds("lease_ttl", 120.0),
            "heartbeat_s": seconds("lease_heartbeat", 10.0),
            "poll_s": seconds("lease_poll_interval", 2.0),
            "wait_timeout_s": seconds("lease_wait_timeout", 600.0),
        }
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True)
class LeaseOwner:
    """The task instance a lease is for (all optional outside Airflow)."""

    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int = -1
    try_number: int | None = None
    pool: str | None = None

    @classmethod
    def from_context(cls, context: Mapping[str, Any], pool: str | None = None) -> LeaseOwner:
        """From an Airflow task context."""
        ti = context.get("ti") or context.get("task_instance")
        map_index = getattr(ti, "map_index", -1)
        return cls(
            dag_id=getattr(ti, "dag_id", None),
            run_id=getattr(ti, "run_id", None),
            task_id=getattr(ti, "task_id", None),
            map_index=map_index if isinstance(map_index, int) else -1,
            try_number=getattr(ti, "try_number", None),
            pool=pool,
        )

    def describe(self) -> str:
        if not self.task_id:
            return "an unnamed holder"
        index = f"[{self.map_index}]" if self.map_index not in (-1, None) else ""
        return f"{self.dag_id}.{self.task_id}{index} (run {self.run_id}, try {self.try_number})"


# -- the lease --------------------------------------------------------------------------------------
class Lease:
    """Devices held by one task. Release it (or use it as a context manager) when the work ends."""

    def __init__(
        self,
        manager: LeaseManager,
        lease_id: str,
        devices: tuple[int, ...],
        owner: LeaseOwner,
        request: GpuRequest,
        acquired_at: float,
        uuids: tuple[str | None, ...] = (),
    ) -> None:
        self.manager = manager
        self.lease_id = lease_id
        self.devices = devices
        self.owner = owner
        self.request = request
        self.acquired_at = acquired_at
        self.uuids = uuids
        self.state = "held"  # held -> releasing -> released | lost
        self._heartbeat: _Heartbeat | None = None

    def __repr__(self) -> str:
        return f"Lease({self.lease_id!r}, devices={list(self.devices)}, state={self.state!r})"

    @property
    def visible_devices(self) -> str:
        """The value for ``CUDA_VISIBLE_DEVICES``: ``"0,2"``."""
        return ",".join(str(i) for i in self.devices)

    def env(self) -> dict[str, str]:
        """Environment for the task's process: the leased devices and nothing else."""
        ids = self.visible_devices
        return {
            "CUDA_VISIBLE_DEVICES": ids,
            "NVIDIA_VISIBLE_DEVICES": ids,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # CUDA numbers like NVML (PCI bus order)
            "GPU_DAG_LEASE_ID": self.lease_id,
            "GPU_DAG_DEVICES": ids,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "lease_id": self.lease_id,
            "devices": list(self.devices),
            "uuids": list(self.uuids),
            "acquired_at": self.acquired_at,
            "owner": asdict(self.owner),
        }

    @property
    def lost(self) -> bool:
        return self.state == "lost"

    def heartbeat(self) -> bool:
        """Renew now; False (and state ``lost``) when the lease was reclaimed."""
        if self.state != "held":
            return self.state != "lost"
        ok = self.manager.heartbeat(self.lease_id)
        if not ok and self.state == "held":
            self.state = "lost"
        return ok

    def start_heartbeat(self, on_lost: Callable[[Lease], None] | None = None) -> None:
        """Renew in a daemon thread every ``heartbeat_s``; call ``on_lost`` once if it is reclaimed."""
        if self._heartbeat is None:
            self._heartbeat = _Heartbeat(self, self.manager.settings.heartbeat_s, on_lost)
            self._heartbeat.start()

    def stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None

    def register_process(self, pid: int) -> None:
        """Record a process doing this lease's work (killed if the lease is reclaimed)."""
        self.manager.register_process(self.lease_id, pid)

    def release(self, outcome: str = "success") -> bool:
        """Give the devices back and record the GPU-seconds. Idempotent; safe from ``on_kill``.

        Returns False when there was nothing to release (already released, or reclaimed).
        """
        if self.state != "held":
            return False
        self.state = "releasing"
        self.stop_heartbeat()
        try:
            released = self.manager.release(self.lease_id, outcome=outcome)
        except BaseException:
            self.state = "held"
            raise
        self.state = "released" if released else "lost"
        return released

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.release("success" if exc_type is None else "failed")


class _Heartbeat(threading.Thread):
    def __init__(self, lease: Lease, interval: float, on_lost: Callable[[Lease], None] | None) -> None:
        super().__init__(name=f"gpu-lease-heartbeat-{lease.lease_id[:8]}", daemon=True)
        self.lease = lease
        self.interval = interval
        self.on_lost = on_lost
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        if self is not threading.current_thread() and self.is_alive():
            self.join(timeout=self.interval + 5)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            if self.lease.state != "held":
                return
            try:
                ok = self.lease.manager.heartbeat(self.lease.lease_id)
            except Exception:
                log.exception("GPU lease %s: heartbeat failed; retrying", self.lease.lease_id)
                continue
            if not ok and self.lease.state == "held" and not self._stop_event.is_set():
                self.lease.state = "lost"
                log.error(
                    "GPU lease %s on devices %s was reclaimed while %s was running (no heartbeat for "
                    "lease_ttl); stopping the task's GPU work",
                    self.lease.lease_id,
                    list(self.lease.devices),
                    self.lease.owner.describe(),
                )
                if self.on_lost is not None:
                    try:
                        self.on_lost(self.lease)
                    except Exception:
                        log.exception("GPU lease %s: on_lost callback failed", self.lease.lease_id)
                return


# -- the manager ------------------------------------------------------------------------------------
class LeaseManager:
    """Leases concrete GPUs of this host to tasks.

    ``inventory`` is a fixed :class:`GpuInventory`, a callable returning one (called before every
    allocation attempt, so NVML free memory is live), or None for :func:`load_inventory`.
    """

    def __init__(
        self,
        settings: LeaseSettings | None = None,
        inventory: GpuInventory | Callable[[], GpuInventory] | None = None,
    ) -> None:
        self.settings = settings or LeaseSettings.from_config()
        self._inventory = inventory
        self.dir = self.settings.lease_dir
        self.table_path = self.dir / TABLE_FILE
        self.lock_path = self.dir / LOCK_FILE
        self.ledger = UsageLedger(self.dir / USAGE_FILE)
        self._host = socket.gethostname()
        self._boot_id = _boot_id()
        self._pidns = _pid_namespace()

    # -- inventory --------------------------------------------------------------------------------
    def inventory(self) -> GpuInventory:
        if isinstance(self._inventory, GpuInventory):
            return self._inventory
        if callable(self._inventory):
            return self._inventory()
        return load_inventory()

    # -- table --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        held: set[str] = _held.__dict__.setdefault("paths", set())
        key = str(self.lock_path.absolute())
        if key in held:
            raise LeaseError(f"the GPU lease table {self.table_path} is already locked by this thread")
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
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

    def _load(self) -> dict[str, Any]:
        try:
            raw = self.table_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {"version": 1, "leases": {}}
        try:
            table = json.loads(raw)
            if not isinstance(table, dict) or not isinstance(table.get("leases"), dict):
                raise ValueError("no 'leases' object")
        except ValueError as err:
            raise LeaseTableCorrupt(
                f"GPU lease table {self.table_path} cannot be read ({err}). It is only ever replaced "
                "atomically, so this means outside damage. Stop the GPU tasks of this host, then remove "
                "or repair the file (check running GPU processes with nvidia-smi first)."
            ) from None
        return table

    def _save(self, table: dict[str, Any]) -> None:
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
    def _stale_reason(self, record: Mapping[str, Any], now: float) -> str | None:
        holder = record.get("holder") or {}
        if holder.get("host") == self._host:
            if holder.get("boot_id") and self._boot_id and holder["boot_id"] != self._boot_id:
                return "the host rebooted since the lease was taken"
            if holder.get("pidns") == self._pidns and not process_alive(
                int(holder["pid"]), holder.get("start")
            ):
                return f"holder process {holder['pid']} is gone"
        ttl = float(record.get("ttl_s") or self.settings.ttl_s)
        age = now - float(record.get("heartbeat_at", 0.0))
        if age > ttl:
            return f"no heartbeat for {age:.0f}s (lease_ttl {ttl:.0f}s)"
        return None

    def _kill_orphans(self, record: Mapping[str, Any]) -> None:
        holder = record.get("holder") or {}
        if not self.settings.kill_orphans or holder.get("host") != self._host:
            return
        if holder.get("pidns") != self._pidns:
            return
        for proc in record.get("processes") or ():
            pid, start, pgid = int(proc["pid"]), proc.get("start"), proc.get("pgid")
            if pid == os.getpid() or not process_alive(pid, start):
                continue
            try:
                if pgid == pid:  # its own process group (a bash command's session): kill all of it
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
                log.warning("GPU lease %s reclaimed: killed orphaned process %s", record["lease_id"], pid)
            except (ProcessLookupError, PermissionError) as err:
                log.warning("GPU lease %s: cannot kill orphan %s: %s", record["lease_id"], pid, err)

    def _reclaim(self, table: dict[str, Any], now: float) -> list[dict[str, Any]]:
        reclaimed = []
        for lease_id, record in list(table["leases"].items()):
            reason = self._stale_reason(record, now)
            if reason is None:
                continue
            self._kill_orphans(record)
            end = max(float(record.get("acquired_at", now)), float(record.get("heartbeat_at", now)))
            self._record_usage(record, end, "reclaimed", reclaim_reason=reason)
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

    def _record_usage(self, record: Mapping[str, Any], end: float, outcome: str, **extra: Any) -> None:
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

    # -- public API ---------------------------------------------------------------------------------
    def leases(self) -> list[dict[str, Any]]:
        """The lease records now in the table (read-only view, nothing reclaimed)."""
        with self._locked():
            return list(self._load()["leases"].values())

    def reclaim_stale(self) -> list[dict[str, Any]]:
        """Reclaim every stale lease now; returns the reclaimed records (with ``reclaim_reason``)."""
        with self._locked():
            table = self._load()
            reclaimed = self._reclaim(table, time.time())
            if reclaimed:
                self._save(table)
            return reclaimed

    def check_possible(self, request: GpuRequest, inventory: GpuInventory | None = None) -> None:
        """Raise :class:`LeaseImpossible` when this host can never satisfy ``request``."""
        inventory = inventory or self.inventory()
        problem = inventory.why_impossible(request.count, request.memory_mib, request.gpu_type)
        if problem:
            raise LeaseImpossible(f"{request.describe()} can never be leased on {self._host}: {problem}")

    def try_acquire(
        self, request: GpuRequest, owner: LeaseOwner | None = None, *, holder_pid: int | None = None
    ) -> Lease | None:
        """Lease ``request`` now if the devices are free (after reclaiming stale leases), else None."""
        owner = owner or LeaseOwner()
        inventory = self.inventory()
        self.check_possible(request, inventory)
        pid = holder_pid if holder_pid is not None else os.getpid()
        with self._locked():
            table = self._load()
            now = time.time()
            changed = bool(self._reclaim(table, now))
            held = {int(d) for record in table["leases"].values() for d in record.get("devices", ())}
            chosen = self._choose(inventory, request, held)
            if chosen is None:
                if changed:
                    self._save(table)
                return None
            lease_id = uuid.uuid4().hex
            uuids = tuple(inventory.device(i).uuid for i in chosen)
            table["leases"][lease_id] = {
                "lease_id": lease_id,
                "devices": list(chosen),
                "uuids": list(uuids),
                "request": {
                    "gpus": request.count,
                    "memory_mib": request.memory_mib,
                    "gpu_type": request.gpu_type,
                },
                "owner": asdict(owner),
                "holder": {
                    "pid": pid,
                    "start": process_start_token(pid),
                    "host": self._host,
                    "boot_id": self._boot_id,
                    "pidns": self._pidns,
                },
                "processes": [],
                "acquired_at": now,
                "heartbeat_at": now,
                "ttl_s": self.settings.ttl_s,
            }
            self._save(table)
        return Lease(self, lease_id, tuple(chosen), owner, request, now, uuids)

    @staticmethod
    def _choose(inventory: GpuInventory, request: GpuRequest, held: set[int]) -> list[int] | None:
        candidates = [
            d
            for d in inventory.devices
            if d.index not in held and d.fits_now(request.memory_mib, request.gpu_type)
        ]
        if len(candidates) < request.count:
            return None
        # best fit: the smallest devices that hold the request, keeping big ones for big requests
        candidates.sort(key=lambda d: (d.memory_total_mib or 0, d.index))
        return sorted(d.index for d in candidates[: request.count])

    def acquire(
        self,
        request: GpuRequest,
        owner: LeaseOwner | None = None,
        *,
        timeout: float | None = None,
        holder_pid: int | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> Lease:
        """Lease ``request``, polling every ``poll_s`` until ``timeout`` (default ``wait_timeout_s``).

        :raises LeaseImpossible: at once, when this host can never satisfy the request.
        :raises LeaseTimeout: when the devices did not become free in time (the message lists holders).
        """
        owner = owner or LeaseOwner()
        timeout = self.settings.wait_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        waited_logged = False
        while True:
            lease = self.try_acquire(request, owner, holder_pid=holder_pid)
            if lease is not None:
                return lease
            if cancelled is not None and cancelled():
                raise LeaseError(f"{owner.describe()}: stopped while waiting for {request.describe()}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LeaseTimeout(self._timeout_message(request, owner, timeout))
            if not waited_logged:
                log.info("%s waits for %s on %s", owner.describe(), request.describe(), self._host)
                waited_logged = True
            time.sleep(min(self.settings.poll_s, remaining))

    def _timeout_message(self, request: GpuRequest, owner: LeaseOwner, timeout: float) -> str:
        try:
            holders = [
                f"#{','.join(str(d) for d in r.get('devices', ()))} by "
                f"{LeaseOwner(**r.get('owner', {})).describe()} (pid {(r.get('holder') or {}).get('pid')})"
                for r in self.leases()
            ]
            inventory = self.inventory().describe()
        except Exception as err:  # the message must not fail
            holders, inventory = [f"unknown ({err})"], "unknown"
        mem = f" with {format_memory(request.memory_mib)} free each" if request.memory_mib else ""
        return (
            f"{owner.describe()} waited {timeout:.0f}s for {request.count} GPU(s){mem} on {self._host} and "
            f"they did not become free. Held now: {'; '.join(holders) or 'nothing'}. Inventory: {inventory}. "
            "Fix: make the GPU pool no larger than the host's GPUs so Airflow queues the task instead, "
            "raise lease_timeout / [gpu_dag] lease_wait_timeout, or free the devices (other processes "
            "using GPU memory count against free memory)."
        )

    def heartbeat(self, lease_id: str) -> bool:
        """Renew ``lease_id``; False when it is no longer in the table (reclaimed)."""
        with self._locked():
            table = self._load()
            record = table["leases"].get(lease_id)
            if record is None:
                return False
            record["heartbeat_at"] = time.time()
            self._save(table)
            return True

    def register_process(self, lease_id: str, pid: int) -> bool:
        """Record a work process of ``lease_id`` (False when the lease is gone)."""
        with self._locked():
            table = self._load()
            record = table["leases"].get(lease_id)
            if record is None:
                return False
            try:
                pgid: int | None = os.getpgid(pid)
            except OSError:
                pgid = None
            record.setdefault("processes", []).append(
                {"pid": pid, "start": process_start_token(pid), "pgid": pgid}
            )
            self._save(table)
            return True

    def release(self, lease_id: str, outcome: str = "success") -> bool:
        """Remove ``lease_id`` and append its usage record; False when it was not held (reclaimed)."""
        with self._locked():
            table = self._load()
            record = table["leases"].get(lease_id)
            if record is None:
                log.warning("GPU lease %s was already reclaimed; nothing to release", lease_id)
                return False
            # ledger first: a crash between the two leaves a record the reader de-duplicates by lease id
            self._record_usage(record, time.time(), outcome)
            del table["leases"][lease_id]
            self._save(table)
            return True

    @contextlib.contextmanager
    def lease(
        self, request: GpuRequest, owner: LeaseOwner | None = None, *, timeout: float | None = None
    ) -> Iterator[Lease]:
        """``with manager.lease(GpuRequest(2)) as lease:`` acquire, heartbeat, release."""
        held = self.acquire(request, owner, timeout=timeout)
        held.start_heartbeat()
        try:
            yield held
        except BaseException:
            held.release("failed")
            raise
        else:
            held.release("success")
