"""Only one active watermark controller: a host lock file plus a lease stored in an Airflow Variable.

- :class:`FileLeaderLock`: ``fcntl.flock`` on a file. Controllers on the **same host** exclude each other;
  the kernel releases the lock when the holder dies, so a standby takes over at its next tick.
- :class:`VariableLeaderLock`: an Airflow Variable ``{"holder": id, "expires": epoch}`` written over REST,
  for controllers on **several hosts**. The holder renews it every tick; a standby takes it once
  ``expires`` has passed (the holder crashed or hung). Writes are read back to confirm ownership. The
  REST API has no compare-and-swap, so two standbys racing for an expired lease at the same instant
  may both believe they won for one tick; this is harmless because both compute the same pool sizes
  from the same sources and REST state, and the read-back makes the loser stand down at its next tick.
- :class:`CombinedLeaderLock` combines both (either may be disabled in the config).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

log = logging.getLogger(__name__)

__all__ = [
    "CombinedLeaderLock",
    "FileLeaderLock",
    "LeaderLock",
    "LeaderLockStore",
    "VariableLeaderLock",
    "default_holder_id",
]


def default_holder_id() -> str:
    """``host:pid:random`` — unique per controller process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaderLock(Protocol):
    """Something a controller must hold to act."""

    def acquire(self) -> bool: ...

    def release(self) -> None: ...


class FileLeaderLock:
    """A non-blocking exclusive ``fcntl`` lock on ``path`` (one active controller per host)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._file is not None

    def acquire(self) -> bool:
        """Take the lock if free (or already ours); never blocks."""
        if self._file is not None:
            if self._is_the_lock_file(self._file):
                return True
            # Deleted or replaced while held (a /tmp cleaner, a person): our lock is on a file nobody
            # else can find, and another controller may lock the new one. Take the lock file again.
            log.warning("watermark lease: lock file %s was removed or replaced; taking it again", self.path)
            self._file.close()
            self._file = None
        try:
            handle = self._open()
        except OSError as err:  # checked at start (check()); gone since: stand by, say why
            log.error("watermark lease: cannot open the lock file %s (%s); standing by", self.path, err)
            return False
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        if not self._is_the_lock_file(handle):  # replaced between our open and our lock
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._file = handle
        return True

    def _is_the_lock_file(self, handle: IO[str]) -> bool:
        """Whether ``handle`` is still the file at :attr:`path` (not deleted, not replaced)."""
        try:
            there = os.stat(self.path)
        except OSError:
            return False
        ours = os.fstat(handle.fileno())
        return (there.st_dev, there.st_ino) == (ours.st_dev, ours.st_ino)

    def _open(self) -> IO[str]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return open(self.path, "a+")  # acquire keeps it open while the lock is held

    def check(self) -> str | None:
        """What stops this lock file from being used (it cannot be created or opened), or None."""
        try:
            self._open().close()
        except OSError as err:
            return str(err)
        return None

    def release(self) -> None:
        """Release the lock (no-op when not held)."""
        if self._file is not None:
            try:
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            finally:
                self._file.close()
                self._file = None


class LeaderLockStore(Protocol):
    """Where a :class:`VariableLeaderLock` lives: the Variable calls of the REST client."""

    def get_variable(self, key: str) -> str | None: ...

    def create_variable(self, key: str, value: str, description: str = "") -> bool: ...

    def put_variable(self, key: str, value: str, description: str = "") -> None: ...


class VariableLeaderLock:
    """A lease with holder id and expiry kept in an Airflow Variable (multi-host exclusion)."""

    DESCRIPTION = "airflow-gpu-dag watermark controller lease (holder, expires epoch); do not edit"

    def __init__(
        self,
        store: LeaderLockStore,
        key: str,
        holder: str,
        ttl: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.key = key
        self.holder = holder
        self.ttl = float(ttl)
        self._clock = clock
        self.current_holder: str | None = None
        #: Until when our lease runs (epoch), as last written and read back; None when not ours.
        self.held_until: float | None = None

    def _read(self) -> tuple[str | None, float]:
        raw = self.store.get_variable(self.key)
        if raw is None:
            return None, 0.0
        try:
            value = json.loads(raw)
            return str(value["holder"]), float(value["expires"])
        except (ValueError, KeyError, TypeError):
            log.warning("lease variable %s holds unreadable %r; treating it as expired", self.key, raw[:80])
            return "?", 0.0

    def acquire(self) -> bool:
        """Take or renew the lease; False while another holder's lease has not expired."""
        now = self._clock()
        holder, expires = self._read()
        self.current_holder = holder
        if holder is not None and holder != self.holder and expires > now:
            self.held_until = None  # another holder's now: a later failed read must not act on ours
            return False
        value = json.dumps({"holder": self.holder, "expires": now + self.ttl})
        if holder is None:
            if not self.store.create_variable(self.key, value, self.DESCRIPTION):
                return self._ours_until(now + self.ttl)
        else:
            self.store.put_variable(self.key, value, self.DESCRIPTION)
        return self._ours_until(now + self.ttl)

    def _ours_until(self, expires: float) -> bool:
        ours = self.acquire_after_race()
        self.held_until = expires if ours else None
        return ours

    def still_ours(self) -> bool:
        """True while the lease we last took has not expired: nobody else may take it before then,
        so a controller that cannot read the Variable (a REST blip) may keep acting until it does."""
        return self.held_until is not None and self._clock() < self.held_until

    def acquire_after_race(self) -> bool:
        """Read the lease back: ours only if our write is the one that stuck."""
        holder, _ = self._read()
        self.current_holder = holder
        return holder == self.holder

    def release(self) -> None:
        """Expire our lease now so a standby takes over at once (no-op if not ours)."""
        self.held_until = None
        try:
            holder, _ = self._read()
            if holder == self.holder:
                value = json.dumps({"holder": self.holder, "expires": 0})
                self.store.put_variable(self.key, value, self.DESCRIPTION)
        except Exception:
            log.warning("could not release lease variable %s", self.key, exc_info=True)


class CombinedLeaderLock:
    """Both locks: the host file lock first (cheap), then the Variable lease."""

    def __init__(self, file_lock: FileLeaderLock | None, variable_lease: VariableLeaderLock | None) -> None:
        self.file_lock = file_lock
        self.variable_lease = variable_lease

    def acquire(self) -> bool:
        """True when this controller may act this tick."""
        if self.file_lock is not None and not self.file_lock.acquire():
            return False
        if self.variable_lease is not None:
            try:
                return self.variable_lease.acquire()
            except Exception as err:
                if self.variable_lease.still_ours():
                    # Not "lost": our lease runs until its expiry and nobody may take it before then.
                    # Releasing the pools for one failed read would drop every reservation.
                    log.warning(
                        "lease variable unreachable (%s); our lease runs until %.0f: acting this tick",
                        err,
                        self.variable_lease.held_until,
                    )
                    return True
                log.warning("lease variable unreachable (%s); standing by this tick", err)
                return False
        return True

    def may_write(self) -> bool:
        """False once the Variable lease this tick acted on has run out (a tick that outlasted it, slow
        sources): a standby may hold it by now, and two controllers would write the same pools."""
        return self.variable_lease is None or self.variable_lease.still_ours()

    def describe(self) -> str:
        """Who holds what, for logs."""
        parts = []
        if self.file_lock is not None:
            parts.append(f"lock file {self.file_lock.path}")
        if self.variable_lease is not None:
            parts.append(f"variable {self.variable_lease.key} held by {self.variable_lease.current_holder}")
        return ", ".join(parts) or "no lease"

    def release(self) -> None:
        """Give up both (on shutdown)."""
        if self.variable_lease is not None:
            self.variable_lease.release()
        if self.file_lock is not None:
            self.file_lock.release()
