"""Process identity for GPU leases: is the process that took a lease still the same process?

A pid alone is not an identity: pids are reused, a host reboots, and a container has its own pid
namespace. A lease therefore records its holder's pid together with the process start time
(:func:`process_start_token`), the host name, the boot id and the pid namespace
(:class:`HostIdentity`); a lease is only judged by its holder's pid on the same host, boot and pid
namespace.

The work of a lease is found by process group (:func:`group_members`) and, for processes started with
the lease's environment, by that environment (:func:`processes_with_env`); both read ``/proc`` and
skip zombies, which hold no GPU.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

__all__ = [
    "HostIdentity",
    "boot_id",
    "group_members",
    "own_process_group",
    "pid_namespace",
    "process_alive",
    "process_start_token",
    "processes_with_env",
]

_PROC = Path("/proc")


def process_start_token(pid: int) -> str | None:
    """An id of the process ``pid`` that changes when the pid is reused, or None when it is gone.

    Linux: the start time in clock ticks since boot (``/proc/<pid>/stat`` field 22). Zombies
    (killed, not yet reaped) count as gone. Elsewhere: psutil's create time.
    """
    if pid <= 0:
        return None
    try:
        with open(_PROC / str(pid) / "stat", "rb") as handle:
            raw = handle.read().decode(errors="replace")
    except FileNotFoundError:
        if (_PROC / "self" / "stat").exists():
            return None  # /proc is there and the pid is not: gone
        raw = ""  # no /proc (not Linux): psutil below
    except OSError:
        raw = ""
    if raw:
        fields = raw[raw.rfind(")") + 2 :].split()
        if len(fields) > 19:
            return None if fields[0] in ("Z", "X", "x") else fields[19]
    try:
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


def boot_id() -> str | None:
    """This boot of the host (``/proc/sys/kernel/random/boot_id``), or None where unknown."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def pid_namespace() -> str | None:
    """This process's pid namespace (inode of ``/proc/self/ns/pid``), or None where unknown."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None


@dataclass(frozen=True)
class HostIdentity:
    """Where pids mean something: host name, boot id and pid namespace of this process."""

    host: str
    boot_id: str | None
    pidns: str | None

    @classmethod
    def current(cls) -> HostIdentity:
        return cls(socket.gethostname(), boot_id(), pid_namespace())

    def holder(self, pid: int) -> dict[str, Any]:
        """The lease table's ``holder`` record of process ``pid`` on this host."""
        return {
            "pid": pid,
            "start": process_start_token(pid),
            "host": self.host,
            "boot_id": self.boot_id,
            "pidns": self.pidns,
        }


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, ...), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode(errors="replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields if len(fields) > 19 else None


def _pids() -> list[int]:
    try:
        return [int(entry.name) for entry in os.scandir(_PROC) if entry.name.isdigit()]
    except OSError:
        return []


def own_process_group() -> int | None:
    """This process's group when this process leads it (its pgid is its pid), else None.

    Airflow's Task SDK supervisor forks each task process into a group of its own, so every process
    the task starts is in it unless it leaves on purpose (``setsid``, ``setpgid``). A process that does
    not lead its group (``dag.test()``, a test runner) shares it with others: that group is not the
    task's to record or kill.
    """
    try:
        return os.getpid() if os.getpgid(0) == os.getpid() else None
    except OSError:
        return None


def group_members(pgid: int) -> list[int]:
    """The running (not zombie) processes of process group ``pgid``; empty when none is left.

    Without ``/proc`` (not Linux) a group that still exists is reported as ``[pgid]``: its zombies
    cannot be told from running members there.
    """
    if pgid <= 1:
        return []
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    except (OSError, OverflowError):  # OverflowError: a number no pgid can be (a damaged record)
        return []
    if not (_PROC / "self" / "stat").exists():
        return [pgid]
    members = []
    for pid in _pids():
        fields = _stat_fields(pid)
        if fields is not None and fields[0] not in ("Z", "X", "x") and fields[2] == str(pgid):
            members.append(pid)
    return members


def processes_with_env(name: str, value: str, *, started_after: str | None = None) -> list[int]:
    """Running processes of this user whose environment has ``name=value`` (from ``/proc/<pid>/environ``:
    the environment a process was started with, which its children started with ``exec`` inherit).

    ``started_after``: a :func:`process_start_token`; only processes started at or after it are read
    (a lease's work starts after its holder). Other users' processes are not readable and not listed;
    without ``/proc`` nothing is.
    """
    needle = f"{name}={value}".encode()
    me, uid = os.getpid(), os.geteuid()
    after = int(started_after) if started_after is not None and started_after.isdigit() else None
    found = []
    for pid in _pids():
        if pid == me:
            continue
        fields = _stat_fields(pid)
        if fields is None or fields[0] in ("Z", "X", "x"):
            continue
        if after is not None and fields[19].isdigit() and int(fields[19]) < after:
            continue
        try:
            if uid != 0 and os.stat(_PROC / str(pid)).st_uid != uid:
                continue
            with open(_PROC / str(pid) / "environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(pid)
    return found
