"""A read-only view of this host's lease table: which GPUs our task instances hold right now, and
whether a process on a GPU is doing a lease's work.

For the watermark controller's ``nvml`` capacity source: a GPU that is busy or short of memory
because one of our task instances holds it still counts as capacity (Airflow already subtracts that
task's pool slots), while a GPU used by anything else does not. Nothing is written: stale leases are
skipped here and left for the workers to reclaim (:mod:`airflow_gpu_dag.gpu.lease_table`), so the
lease semantics stay the workers' alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from airflow_gpu_dag.gpu.lease_settings import LeaseOwner, LeaseSettings, owner_of
from airflow_gpu_dag.gpu.lease_table import LeaseTable
from airflow_gpu_dag.gpu.process import HostIdentity

__all__ = ["HeldDevice", "held_devices", "parent_pid", "process_group"]


@dataclass(frozen=True)
class HeldDevice:
    """One GPU of a live lease: its index and UUID, the lease, its owner, and the processes the lease
    recorded (holder and work processes, with their process groups: a Python GPU task's own group, a
    bash task's command session). ``same_pidns``: the lease's
    pids are comparable with this process's (same host, boot and pid namespace)."""

    index: int
    uuid: str | None
    lease_id: str
    owner: LeaseOwner
    pids: frozenset[int]
    pgids: frozenset[int]
    same_pidns: bool

    def describe(self) -> str:
        return f"gpu{self.index} leased to {self.owner.describe()}"

    def owns(self, pid: int, ancestry_depth: int = 64) -> bool | None:
        """True when process ``pid`` does this lease's work: a recorded process, in a recorded
        process group, or a descendant of one. None when that cannot be told (another pid
        namespace, or a pid NVML reports that this process cannot see: NVML in a container without the
        host's pid namespace reports host pids)."""
        if not self.same_pidns:
            return None
        if pid in self.pids:
            return True
        if not Path(f"/proc/{pid}").exists():
            return None
        group = process_group(pid)
        if group is not None and group in self.pgids:
            return True
        current = pid
        for _ in range(ancestry_depth):
            parent = parent_pid(current)
            if parent is None or parent <= 1:
                return False
            if parent in self.pids:
                return True
            current = parent
        return False


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (None when it is gone or unknown)."""
    fields = _stat_fields(pid)
    if fields and len(fields) > 1:
        return int(fields[1])
    try:
        return int(psutil.Process(pid).ppid())
    except Exception:
        return None


def process_group(pid: int) -> int | None:
    """The process group of ``pid`` (None when it is gone)."""
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _ints(values: Iterable[object]) -> frozenset[int]:
    found = set()
    for value in values:
        try:
            found.add(int(value))  # type: ignore[call-overload]
        except (TypeError, ValueError):
            continue
    return frozenset(found)


def held_devices(
    lease_dir: str | os.PathLike[str] | None = None,
    *,
    identity: HostIdentity | None = None,
    now: float | None = None,
) -> list[HeldDevice]:
    """The devices of every live (not stale) lease in the table under ``lease_dir`` (default
    ``[gpu_dag] lease_dir``). No table yet: nothing is held.

    :raises airflow_gpu_dag.gpu.lease_errors.LeaseTableCorrupt: the table cannot be read.
    """
    settings = LeaseSettings.from_config() if lease_dir is None else LeaseSettings(lease_dir=Path(lease_dir))
    table = LeaseTable(settings, identity)
    if not table.table_path.exists():
        return []
    with table.locked():
        records = list(table.load()["leases"].values())
    now = time.time() if now is None else now
    me = table.identity
    held: list[HeldDevice] = []
    for record in records:
        if table.stale_reason(record, now) is not None:
            continue
        holder = record.get("holder") or {}
        processes: Sequence[dict[str, object]] = record.get("processes") or ()
        same = (
            holder.get("host") == me.host
            and (not holder.get("boot_id") or holder.get("boot_id") == me.boot_id)
            and holder.get("pidns") == me.pidns
        )
        owner = owner_of(record)
        uuids = list(record.get("uuids") or [])
        for position, index in enumerate(record.get("devices") or ()):
            held.append(
                HeldDevice(
                    index=int(index),
                    uuid=uuids[position] if position < len(uuids) else None,
                    lease_id=str(record.get("lease_id")),
                    owner=owner,
                    pids=_ints([holder.get("pid"), *(p.get("pid") for p in processes)]),
                    pgids=_ints(p.get("pgid") for p in processes if p.get("pgid") is not None),
                    same_pidns=same,
                )
            )
    return held
