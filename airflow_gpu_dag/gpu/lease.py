"""GPU leases: which task holds which devices of this host, atomic across processes.

Airflow pools count GPUs; leases decide *which* GPUs. A task leases concrete device indices before its
command runs and its process sees only those (``CUDA_VISIBLE_DEVICES``/``NVIDIA_VISIBLE_DEVICES``).

A lease records its holder (pid, the process start time from ``/proc`` to beat pid reuse, host,
boot id, pid namespace: :mod:`airflow_gpu_dag.gpu.process`), the processes doing its work (e.g. the
bash command's session, a Python task's own process group from the moment it takes the lease), and
a heartbeat that the holder renews every ``lease_heartbeat`` seconds. Before every allocation, stale
leases are reclaimed: the holder process is gone (killed with -9, host rebooted), or the heartbeat is
older than ``lease_ttl``. A reclaimed lease's devices are given out again only once its work is gone:
its recorded processes and groups, and processes started with its ``GPU_DAG_LEASE_ID``, get SIGTERM,
then SIGKILL after ``reclaim_grace_s`` (:meth:`LeaseTable.stop_work`), and the lease keeps its devices
until none is left. The holder itself, if still alive and not in a recorded group, finds the lease
lost at its next heartbeat.

Modules: this one is the API (:class:`LeaseManager`, :class:`Lease`);
:mod:`~airflow_gpu_dag.gpu.lease_table` stores the table (one directory per host, ``[gpu_dag]
lease_dir``: the lock, the atomically replaced ``leases.json``, the ``usage.jsonl`` ledger) and
reclaims stale leases; :mod:`~airflow_gpu_dag.gpu.lease_settings` has the settings and the owner;
:mod:`~airflow_gpu_dag.gpu.lease_errors` the errors. Everything public is importable from here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict
from typing import Any

import airflow_gpu_dag.metrics as metrics
from airflow_gpu_dag.core.model.resources import GpuRequest, format_memory
from airflow_gpu_dag.gpu.inventory import GpuInventory, load_inventory, visible_to
from airflow_gpu_dag.gpu.lease_dir_marker import LeaseDirMarkers
from airflow_gpu_dag.gpu.lease_errors import (
    LeaseError,
    LeaseImpossible,
    LeaseLost,
    LeaseTableCorrupt,
    LeaseTimeout,
)
from airflow_gpu_dag.gpu.lease_settings import LeaseOwner, LeaseSettings, default_lease_dir, owner_of
from airflow_gpu_dag.gpu.lease_table import LEASE_ENV, LeaseTable
from airflow_gpu_dag.gpu.lease_table import LOCK_FILE as LOCK_FILE
from airflow_gpu_dag.gpu.lease_table import TABLE_FILE as TABLE_FILE
from airflow_gpu_dag.gpu.process import process_alive, process_start_token

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
            LEASE_ENV: self.lease_id,  # also finds the work started with it when the lease is reclaimed
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
        self.table = LeaseTable(self.settings)
        self.dir = self.table.dir
        self.table_path = self.table.table_path
        self.lock_path = self.table.lock_path
        self.ledger = self.table.ledger
        self._host = self.table.identity.host
        marker_dir = self.settings.host_marker_dir
        self.markers = (
            None if marker_dir is None else LeaseDirMarkers(marker_dir, self.dir, self.settings.ttl_s)
        )

    # -- inventory --------------------------------------------------------------------------------
    def inventory(self) -> GpuInventory:
        if isinstance(self._inventory, GpuInventory):
            return self._inventory
        if callable(self._inventory):
            return self._inventory()
        # this worker's GPUs: a worker started with CUDA_VISIBLE_DEVICES leases only those
        return visible_to(load_inventory(), os.environ.get("CUDA_VISIBLE_DEVICES"))

    # -- public API ---------------------------------------------------------------------------------
    def leases(self) -> list[dict[str, Any]]:
        """The lease records now in the table (read-only view, nothing reclaimed)."""
        with self.table.locked():
            return list(self.table.load()["leases"].values())

    def reclaim_stale(self) -> list[dict[str, Any]]:
        """Reclaim every stale lease now; returns the reclaimed records (with ``reclaim_reason``)."""
        with self.table.locked():
            table = self.table.load()
            now = time.time()
            rebased = self.table.rebase_future_heartbeats(table, now)
            reclaimed, changed = self.table.sweep(table, now)
            if changed or rebased:
                self.table.save(table)
            return reclaimed

    def check_possible(
        self, request: GpuRequest, inventory: GpuInventory | None = None, owner: LeaseOwner | None = None
    ) -> None:
        """Raise :class:`LeaseImpossible` when this host can never satisfy ``request``."""
        inventory = inventory or self.inventory()
        problem = inventory.why_impossible(request.count, request.memory_mib, request.gpu_type)
        if problem:
            who = f"{owner.describe()}: " if owner is not None else ""
            raise LeaseImpossible(
                f"{who}{request.describe()} can never be leased on {self._host}: {problem}. Fix: route the "
                "task to a queue whose hosts have such GPUs (pin_to_queue, [gpu_dag] queues), or change its "
                "gpus / gpu_type / gpu_memory."
            )

    def try_acquire(
        self,
        request: GpuRequest,
        owner: LeaseOwner | None = None,
        *,
        holder_pid: int | None = None,
        lock_timeout: float | None = None,
        work_groups: Iterable[int] = (),
    ) -> Lease | None:
        """Lease ``request`` now if the devices are free (after reclaiming stale leases), else None.

        ``lock_timeout``: seconds to wait for the table lock (None: as long as it takes), then
        :class:`LeaseTimeout`. ``work_groups``: process groups doing the lease's work, recorded in the
        same write that grants the devices, so there is no moment the devices are leased and the work
        unknown (a reclaim stops every process left in them).
        """
        owner = owner or LeaseOwner()
        inventory = self.inventory()
        self.check_possible(request, inventory, owner)
        pid = holder_pid if holder_pid is not None else os.getpid()
        with self.table.locked(lock_timeout):
            table = self.table.load()
            now = time.time()
            changed = self.table.rebase_future_heartbeats(table, now)
            changed = self.table.sweep(table, now)[1] or changed
            held = _held_devices(inventory, table["leases"].values())
            chosen = self._choose(inventory, request, held)
            if chosen is None:
                if changed:
                    self.table.save(table)
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
                "holder": self.table.identity.holder(pid),
                "processes": [_process_record(pgid) for pgid in work_groups],
                "acquired_at": now,
                "heartbeat_at": now,
                "heartbeat_mono": time.monotonic(),  # ages the lease on this boot (wall clocks jump)
                "ttl_s": self.settings.ttl_s,
            }
            self.table.save(table)
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
        work_groups: Iterable[int] = (),
    ) -> Lease:
        """Lease ``request``, polling every ``poll_s`` until ``timeout`` (default ``wait_timeout_s``).
        ``work_groups``: see :meth:`try_acquire`.

        :raises LeaseImpossible: at once, when this host can never satisfy the request.
        :raises LeaseTimeout: when the devices did not become free in time (the message lists holders).
        """
        owner = owner or LeaseOwner()
        timeout = self.settings.wait_timeout_s if timeout is None else timeout
        if not timeout >= 0:  # NaN too: it never ran out, and the task polled for ever
            raise ValueError(
                f"{owner.describe()}: a lease timeout of {timeout!r} s is not a number of seconds >= 0"
            )
        if self.markers is not None:  # another lease_dir on this host would hand out our GPUs twice
            self.markers.announce()
        asked = time.monotonic()
        deadline = asked + timeout
        waited_logged = False
        while True:
            lock_timeout = max(1.0, deadline - time.monotonic())  # brief contention is normal
            lease = self.try_acquire(
                request, owner, holder_pid=holder_pid, lock_timeout=lock_timeout, work_groups=work_groups
            )
            if lease is not None:
                metrics.lease_waited(time.monotonic() - asked, owner.pool)
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
                f"{owner_of(r).describe()} (pid {(r.get('holder') or {}).get('pid')})"
                + (
                    f", being reclaimed: waiting for its processes to exit ({r['reclaim'].get('reason')})"
                    if isinstance(r.get("reclaim"), dict)
                    else ""
                )
                for r in self.leases()
            ]
            inventory = self.inventory().describe()
        except Exception as err:  # the message must not fail
            holders, inventory = [f"unknown ({err})"], "unknown"
        mem = f" with {format_memory(request.memory_mib)} free each" if request.memory_mib else ""
        unhealthy = self._unhealthy_shortfall(request)
        return (
            f"{owner.describe()} waited {timeout:.0f}s for {request.count} GPU(s){mem} on {self._host} and "
            f"they did not become free. Held now: {'; '.join(holders) or 'nothing'}. Inventory: {inventory}. "
            + (
                f"Only {unhealthy} such device(s) are healthy. Fix: repair or reset the unhealthy GPU(s), "
                "or request fewer GPUs."
                if unhealthy is not None
                else "Fix: make the GPU pool no larger than the host's GPUs so Airflow queues the task "
                "instead, raise lease_timeout / [gpu_dag] lease_wait_timeout, or free the devices (other "
                "processes using GPU memory count against free memory)."
            )
        )

    def _unhealthy_shortfall(self, request: GpuRequest) -> int | None:
        """The healthy devices that could hold ``request`` when unhealthy ones make it too few, else None."""
        try:
            devices = [
                d for d in self.inventory().devices if d.could_ever_fit(request.memory_mib, request.gpu_type)
            ]
        except Exception:
            return None
        healthy = sum(1 for d in devices if d.healthy)
        return healthy if healthy < request.count <= len(devices) else None

    def heartbeat(self, lease_id: str) -> bool:
        """Renew ``lease_id``; False when it is no longer in the table or is being reclaimed."""
        with self.table.locked():
            table = self.table.load()
            record = table["leases"].get(lease_id)
            if record is None or "reclaim" in record:
                return False
            record["heartbeat_at"] = time.time()
            record["heartbeat_mono"] = time.monotonic()
            self.table.save(table)
        if self.markers is not None:
            self.markers.touch()
        return True

    def register_process(self, lease_id: str, pid: int) -> bool:
        """Record a work process of ``lease_id`` (False when the lease is gone)."""
        with self.table.locked():
            table = self.table.load()
            record = table["leases"].get(lease_id)
            if record is None:
                return False
            entry = _process_record(pid)
            processes = record.setdefault("processes", [])
            if entry not in processes:
                processes.append(entry)
                self.table.save(table)
            return True

    def release(self, lease_id: str, outcome: str = "success") -> bool:
        """Remove ``lease_id`` and append its usage record; False when it was not held (reclaimed)."""
        with self.table.locked():
            table = self.table.load()
            record = table["leases"].get(lease_id)
            if record is None:
                log.warning("GPU lease %s was already reclaimed; nothing to release", lease_id)
                return False
            if "reclaim" in record:  # its devices are freed once the reclaim has stopped its work
                log.warning("GPU lease %s is being reclaimed; its devices are freed by the reclaim", lease_id)
                return False
            # ledger first: a crash between the two leaves a record the reader de-duplicates by lease id
            self.table.record_usage(record, time.time(), outcome)
            del table["leases"][lease_id]
            self.table.save(table)
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


def _process_record(pid: int) -> dict[str, Any]:
    """The table's record of work process ``pid``: with its start time (a reused pid is not it) and
    its process group (``pgid == pid``: the whole group is the lease's work)."""
    try:
        pgid: int | None = os.getpgid(pid)
    except OSError:
        pgid = None
    return {"pid": pid, "start": process_start_token(pid), "pgid": pgid}


def _held_devices(inventory: GpuInventory, records: Iterable[Mapping[str, Any]]) -> set[int]:
    """This inventory's indices of the devices the lease ``records`` hold.

    A device leased with its UUID is matched by UUID: workers sharing one lease directory from
    containers that see different GPUs number them differently (NVML counts from 0 in each), and the
    same index would be two GPUs. A lease without UUIDs (a static inventory) is matched by index, and
    so is every lease when this inventory knows no UUIDs (a static inventory on a host whose other
    workers read NVML): it cannot tell the GPUs apart otherwise, and skipping the lease would hand
    out its devices twice.
    """
    by_uuid = {d.uuid: d.index for d in inventory.devices if d.uuid}
    held: set[int] = set()
    for record in records:
        indices = [int(i) for i in record.get("devices", ())]
        uuids = list(record.get("uuids") or ())
        for position, index in enumerate(indices):
            device_uuid = uuids[position] if position < len(uuids) else None
            if device_uuid and by_uuid:
                if device_uuid in by_uuid:  # else a GPU this worker does not see
                    held.add(by_uuid[device_uuid])
            else:
                held.add(index)
    return held
