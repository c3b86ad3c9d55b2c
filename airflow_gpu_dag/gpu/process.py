"""Process identity for GPU leases: is the process that took a lease still the same process?

A pid alone is not an identity: pids are reused, a host reboots, and a container has its own pid
namespace. A lease therefore records its holder's pid together with the process start time
(:func:`process_start_token`), the host name, the boot id and the pid namespace
(:class:`HostIdentity`); a lease is only judged by its holder's pid on the same host, boot and pid
namespace.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["HostIdentity", "boot_id", "pid_namespace", "process_alive", "process_start_token"]


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
