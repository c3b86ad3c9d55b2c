"""GPU lease settings (``[gpu_dag] lease_*``) and the task instance a lease is for."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_gpu_dag.core.model.resources import EstimateError, parse_duration
from airflow_gpu_dag.gpu.lease_dir_marker import default_marker_dir
from airflow_gpu_dag.gpu.usage import USAGE_FILE
from airflow_gpu_dag.settings import conf_get

__all__ = [
    "LeaseOwner",
    "LeaseSettings",
    "configured_lease_dir",
    "configured_usage_ledger",
    "default_lease_dir",
    "owner_of",
]


def default_lease_dir() -> Path:
    """Host-wide default: ``<tmp>/airflow-gpu-dag/leases`` (shared by every worker of the host)."""
    return Path(tempfile.gettempdir()) / "airflow-gpu-dag" / "leases"


def configured_lease_dir() -> Path:
    """``[gpu_dag] lease_dir``, else :func:`default_lease_dir`."""
    return Path((conf_get("lease_dir", None) or "").strip() or default_lease_dir())


def configured_usage_ledger() -> Path:
    """The usage ledger ended leases are charged to and budget gates read: ``[gpu_dag]
    usage_ledger``, else ``usage.jsonl`` in :func:`configured_lease_dir`."""
    return _usage_ledger_option() or configured_lease_dir() / USAGE_FILE


def _usage_ledger_option() -> Path | None:
    configured = conf_get("usage_ledger", None)
    return Path(str(configured).strip()) if configured and str(configured).strip() else None


@dataclass(frozen=True)
class LeaseSettings:
    """Where leases live and their timing (seconds).

    ``ttl_s``: a lease whose heartbeat is older than this is reclaimed (the bound on how long a stale
    lease can hold a GPU). ``heartbeat_s``: how often a holder renews (must be well below ``ttl_s``).
    ``poll_s``: how often a waiting task retries. ``wait_timeout_s``: how long a task waits for its
    devices before failing. ``kill_orphans``: stop a stale lease's work that still runs (SIGTERM, then
    SIGKILL after ``reclaim_grace_s``); off, the devices stay held until that work exits by itself.
    ``usage_ledger``: the file ended leases are charged to (None: ``<lease_dir>/usage.jsonl``).
    ``host_marker_dir``: where the workers of this host announce their lease directories, so that a
    worker using another one than its neighbours is warned about (:mod:`~airflow_gpu_dag.gpu.
    lease_dir_marker`); None (the default outside :meth:`from_config`): no announcement, no check.
    """

    lease_dir: Path = field(default_factory=default_lease_dir)
    ttl_s: float = 120.0
    heartbeat_s: float = 10.0
    poll_s: float = 2.0
    wait_timeout_s: float = 600.0
    kill_orphans: bool = True
    usage_ledger: Path | None = None
    reclaim_grace_s: float = 10.0
    host_marker_dir: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "lease_dir", Path(self.lease_dir))
        if self.usage_ledger is not None:
            object.__setattr__(self, "usage_ledger", Path(self.usage_ledger))
        if self.host_marker_dir is not None:
            object.__setattr__(self, "host_marker_dir", Path(self.host_marker_dir))
        for name in ("ttl_s", "heartbeat_s", "poll_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):  # a NaN ttl written into a lease corrupts the table
                raise ValueError(f"lease setting {name}={value} must be > 0 (a finite number of seconds)")
        if self.reclaim_grace_s < 0:
            raise ValueError(f"lease setting reclaim_grace_s={self.reclaim_grace_s} must be >= 0")
        if not self.wait_timeout_s >= 0:  # NaN too: a lease would wait for ever
            raise ValueError(f"lease setting wait_timeout_s={self.wait_timeout_s} must be >= 0")
        if self.heartbeat_s * 2 > self.ttl_s:
            raise ValueError(
                f"lease heartbeat ({self.heartbeat_s}s) must be at most half the lease ttl ({self.ttl_s}s), "
                "or healthy leases are reclaimed; lower [gpu_dag] lease_heartbeat or raise lease_ttl"
            )

    @property
    def usage_file(self) -> Path:
        """Where ended leases are charged: ``usage_ledger``, else ``<lease_dir>/usage.jsonl``."""
        return self.usage_ledger if self.usage_ledger is not None else self.lease_dir / USAGE_FILE

    @classmethod
    def from_config(cls, **overrides: Any) -> LeaseSettings:
        """Settings from ``[gpu_dag]`` (``lease_dir``, ``lease_ttl``, ``lease_heartbeat``,
        ``lease_poll_interval``, ``lease_wait_timeout``, ``usage_ledger``), then ``overrides``.
        ``host_marker_dir`` is the host's well-known one (:func:`~airflow_gpu_dag.gpu.lease_dir_marker.
        default_marker_dir`)."""

        def seconds(key: str, default: float) -> float:
            raw = conf_get(key, None)
            if raw is None or not str(raw).strip():
                return default
            try:
                return parse_duration(raw)
            except EstimateError as err:
                raise ValueError(f"[gpu_dag] {key}: {err}") from None

        values: dict[str, Any] = {
            "lease_dir": configured_lease_dir(),
            "ttl_s": seconds("lease_ttl", 120.0),
            "heartbeat_s": seconds("lease_heartbeat", 10.0),
            "poll_s": seconds("lease_poll_interval", 2.0),
            "wait_timeout_s": seconds("lease_wait_timeout", 600.0),
            "usage_ledger": _usage_ledger_option(),  # None: <lease_dir>/usage.jsonl
            "host_marker_dir": default_marker_dir(),  # a worker: announce the lease_dir it uses
        }
        values.update(overrides)
        return cls(**values)


def owner_of(record: Mapping[str, Any]) -> LeaseOwner:
    """The owner of a lease record; fields of the wrong type (a damaged or newer table) are left out
    rather than failing the reader."""
    raw = record.get("owner")
    if not isinstance(raw, Mapping):
        return LeaseOwner()
    text = {k: raw[k] for k in ("dag_id", "run_id", "task_id", "pool") if isinstance(raw.get(k), str)}
    numbers = {
        k: raw[k]
        for k in ("map_index", "try_number")
        if type(raw.get(k)) is int  # not bool
    }
    return LeaseOwner(**text, **numbers)


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
