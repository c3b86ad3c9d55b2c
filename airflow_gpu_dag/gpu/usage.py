"""GPU-seconds used per task: an append-only JSON-lines ledger in the lease directory.

The lease manager appends one record when a lease ends (released by its task, or reclaimed after
the holder died). Each record says who held which devices from when to when::

    {"dag_id": "train", "run_id": "manual__...", "task_id": "fit", "map_index": -1, "try_number": 1,
     "pool": "gpu_default", "devices": [0, 1], "start": 1764466000.0, "end": 1764469600.0,
     "gpu_seconds": 7200.0, "outcome": "success", "lease_id": "...", "host": "gpu-01"}

Records are written while the lease table lock is held, each in a single ``write``; a reader skips a
torn last line (a crash mid-write), so the ledger stays readable. :func:`gpu_seconds_by_dag_run` and
:func:`gpu_seconds_by_pool_day` are what a GPU-hour budget reads.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "USAGE_FILE",
    "UsageLedger",
    "UsageRecord",
    "gpu_seconds_by_dag_run",
    "gpu_seconds_by_pool_day",
]

log = logging.getLogger(__name__)

#: Ledger file name inside the lease directory.
USAGE_FILE = "usage.jsonl"


@dataclass(frozen=True)
class UsageRecord:
    """One finished lease: ``devices`` held from ``start`` to ``end`` (epoch seconds)."""

    dag_id: str | None
    run_id: str | None
    task_id: str | None
    try_number: int | None
    devices: tuple[int, ...]
    start: float
    end: float
    map_index: int = -1
    pool: str | None = None
    outcome: str = "released"
    lease_id: str | None = None
    host: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu_seconds(self) -> float:
        """Device count x wall seconds held."""
        return max(0.0, self.end - self.start) * len(self.devices)

    def to_json(self) -> str:
        data = asdict(self)
        extra = data.pop("extra")
        data.update({k: v for k, v in extra.items() if k not in data})  # flat: readable with jq
        data["devices"] = list(self.devices)
        data["gpu_seconds"] = self.gpu_seconds
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UsageRecord:
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        extra = {k: v for k, v in data.items() if k not in known and k != "gpu_seconds"}
        for key in ("start", "end"):  # NaN, Infinity or 1e20 broke every budget summary of the ledger
            if not 0 <= float(data[key]) < _YEAR_10000:
                raise ValueError(f"{key} {data[key]!r} is not a time (seconds since 1970)")
        for key in ("dag_id", "run_id", "task_id", "pool", "lease_id", "host"):  # keys of the summaries
            if data.get(key) is not None and not isinstance(data[key], str):
                raise TypeError(f"{key} {data[key]!r} is not a name")
        return cls(
            dag_id=data.get("dag_id"),
            run_id=data.get("run_id"),
            task_id=data.get("task_id"),
            try_number=data.get("try_number"),
            devices=tuple(int(d) for d in data.get("devices", ())),
            start=float(data["start"]),
            end=float(data["end"]),
            map_index=int(data.get("map_index", -1) if data.get("map_index") is not None else -1),
            pool=data.get("pool"),
            outcome=str(data.get("outcome", "released")),
            lease_id=data.get("lease_id"),
            host=data.get("host"),
            extra=extra,
        )


#: Seconds since 1970 of 10000-01-01: later times (and NaN, Infinity) are not usage record times.
_YEAR_10000 = 253_402_300_800.0


class UsageLedger:
    """Append-only ledger file (``<lease_dir>/usage.jsonl``, or ``[gpu_dag] usage_ledger``)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, record: UsageRecord) -> None:
        """Append one record with a single ``write`` (callers hold the lease lock). After a torn last
        line (a writer that crashed mid-write) the record starts a line of its own: appended to the torn
        one, it would be skipped as unreadable with it, its usage never counted."""
        line = (record.to_json() + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)  # [gpu_dag] usage_ledger may be elsewhere
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o664)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def __iter__(self) -> Iterator[UsageRecord]:
        return iter(self.read())

    def read(self) -> list[UsageRecord]:
        """All readable records, one per lease (the first record of a lease id wins).

        Malformed lines (a torn final write) are skipped with a warning.
        """
        if not self.path.exists():
            return []
        records: list[UsageRecord] = []
        seen: set[str] = set()
        with self.path.open(encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = UsageRecord.from_dict(json.loads(line))
                except (ValueError, KeyError, TypeError, AttributeError) as err:
                    log.warning("%s line %d is not a usage record (%s); skipped", self.path, number, err)
                    continue
                if record.lease_id:
                    if record.lease_id in seen:
                        continue
                    seen.add(record.lease_id)
                records.append(record)
        return records


def gpu_seconds_by_dag_run(records: Iterable[UsageRecord]) -> dict[tuple[str | None, str | None], float]:
    """Total GPU-seconds per ``(dag_id, run_id)``."""
    totals: dict[tuple[str | None, str | None], float] = {}
    for record in records:
        key = (record.dag_id, record.run_id)
        totals[key] = totals.get(key, 0.0) + record.gpu_seconds
    return totals


def gpu_seconds_by_pool_day(records: Iterable[UsageRecord]) -> dict[tuple[str | None, str], float]:
    """Total GPU-seconds per ``(pool, "YYYY-MM-DD")`` (UTC days; a lease spanning midnight is split)."""
    totals: dict[tuple[str | None, str], float] = {}
    for record in records:
        start = datetime.fromtimestamp(record.start, UTC)
        end = datetime.fromtimestamp(max(record.start, record.end), UTC)
        while True:
            day_end = datetime(start.year, start.month, start.day, tzinfo=UTC) + timedelta(days=1)
            chunk_end = min(end, day_end)
            key = (record.pool, start.date().isoformat())
            totals[key] = totals.get(key, 0.0) + (chunk_end - start).total_seconds() * len(record.devices)
            if chunk_end >= end:
                break
            start = chunk_end
    return totals
