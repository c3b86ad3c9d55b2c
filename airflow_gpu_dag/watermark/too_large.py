"""Never pending forever: a waiting task whose request exceeds what its pool can ever give.

Airflow never runs a task needing more slots than its pool has in all (it only logs a warning), so a
request larger than the live capacity of a GPU pool waits forever when no ``[gpu_dag] pools`` /
``max_gpus_per_host`` / inventory caught it at parse time, or when capacity drops below it later.

Every tick the controller hands :class:`TooLargeWatch` the live capacities and the waiting (SCHEDULED)
task instances. A task whose pool slots exceed its pool's capacity (while the capacity source reads
``ok``: a failing source's floor says nothing about the hardware; nor does a capacity of 0, which is a
drain or an outage, not a request too large: every task of the pool waits for it, visibly, as
``pool 0 of capacity 0``), or whose GPU count exceeds
``[gpu_dag] max_gpus_per_host``, is counted; after ``[gpu_dag] too_large_intervals`` ticks in a row:

* ``too_large_action = fail`` (default): the task instance is set to ``failed`` over REST with a note
  naming the task, its request and the capacity (shown in the UI), and the controller logs the same;
* ``keep``: it keeps waiting, and the pool description (so the UI's pool table), the controller log and
  the Critical path page say why.

A fallback rung that can fall back (:func:`airflow_gpu_dag.core.model.ladders.can_fall_back`) is never
failed, whatever the action: its start-deadline watcher skips it after its ``start_within`` and the
ladder runs the next rung, which failing it would prevent (a rung that *failed* ends the ladder). It is
flagged like ``keep``.

A task that fits again (capacity came back) is forgotten. The counts live in the controller's memory:
a restarted controller counts again from zero, which only delays the verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import airflow_gpu_dag.settings as settings
from airflow_gpu_dag.core.policy.admission import ReadyTask

log = logging.getLogger(__name__)

__all__ = ["TooLarge", "TooLargeWatch", "split_key"]

_STATE_MARK = " [gpu-dag-state "


def split_key(key: str) -> tuple[str, str, str, int]:
    """``(dag_id, run_id, task_id, map_index)`` of a controller key ``dag/run/task/map_index``."""
    dag_id, rest = key.split("/", 1)
    rest, map_index = rest.rsplit("/", 1)
    run_id, task_id = rest.rsplit("/", 1)
    return dag_id, run_id, task_id, int(map_index)


@dataclass(frozen=True)
class TooLarge:
    """A waiting task that does not fit its pool, and for how many intervals it has not."""

    key: str
    pool: str
    slots: int
    limit: int
    limit_what: str
    intervals: int
    failed: bool = False
    rung: bool = False

    @property
    def task(self) -> str:
        dag_id, run_id, task_id, map_index = split_key(self.key)
        index = f"[{map_index}]" if map_index >= 0 else ""
        return f"{dag_id}.{task_id}{index} (run {run_id})"

    def message(self, needed: int) -> str:
        if self.rung:
            return (
                f"{self.task} needs {self.slots} slots of pool {self.pool!r} but {self.limit_what} is "
                f"{self.limit}, for {self.intervals} controller intervals in a row: a fallback rung, left to "
                "its ladder (its watcher skips it after start_within and the next rung runs). Fix: drop the "
                f"rung or grow pool {self.pool!r} if every run falls back."
            )
        return (
            f"{self.task} needs {self.slots} slots of pool {self.pool!r} but {self.limit_what} is "
            f"{self.limit}, for {self.intervals} controller intervals in a row: it can never start. Fix: "
            f"request at most {self.limit} GPUs (split the task), grow pool {self.pool!r}, or repair the "
            f"capacity source{'' if self.intervals >= needed else ' (still waiting)'}."
        )


class TooLargeWatch:
    """Counts, per waiting task instance, the ticks in a row it did not fit; fails or flags it.

    :param client: the REST client (``set_task_instance_state``), for the ``fail`` action.
    :param intervals: ticks in a row before acting (default ``[gpu_dag] too_large_intervals``).
    :param action: ``fail`` or ``keep`` (default ``[gpu_dag] too_large_action``).
    :param max_gpus_per_host: the largest host (default ``[gpu_dag] max_gpus_per_host``).
    :param dry_run: count and log, but fail nothing (``--dry-run`` writes nothing).
    """

    def __init__(
        self,
        client: Any,
        intervals: int | None = None,
        action: str | None = None,
        max_gpus_per_host: int | None = None,
        gpus_of: Mapping[str, int] | None = None,
        dry_run: bool = False,
    ) -> None:
        default_intervals, default_action = settings.too_large_policy()
        self.client = client
        self.dry_run = dry_run
        self.intervals = int(intervals if intervals is not None else default_intervals)
        self.action = action or default_action
        if self.action not in ("fail", "keep"):
            raise ValueError(f"too_large action must be fail or keep, got {self.action!r}")
        self.max_gpus_per_host = (
            max_gpus_per_host if max_gpus_per_host is not None else settings.max_gpus_per_host()
        )
        self._counts: dict[str, int] = {}
        self.current: dict[str, list[TooLarge]] = {}

    def _limit(self, capacity: Any, slots: int) -> tuple[int, str] | None:
        """(limit, what it is) when ``slots`` exceed what the pool can give, else None."""
        host = self.max_gpus_per_host
        if host is not None and slots > host:
            return host, "the largest host has (gpu_dag.max_gpus_per_host)"
        if getattr(capacity, "status", "ok") != "ok":
            return None
        gpus = int(capacity.gpus)
        if 0 < gpus < slots:  # 0 GPUs: an outage (see the module docstring)
            return gpus, "its live capacity"
        return None

    def check(self, capacities: Mapping[str, Any], ready: Sequence[ReadyTask]) -> list[ReadyTask]:
        """Count this tick; fail the tasks that reached the limit (``fail``). Returns ``ready`` without
        the task instances failed now."""
        seen: set[str] = set()
        self.current = {}
        failed: set[str] = set()
        for task in ready:
            capacity = capacities.get(task.pool)
            found = self._limit(capacity, task.slots) if capacity is not None else None
            if found is None:
                continue
            seen.add(task.key)
            count = self._counts.get(task.key, 0) + 1
            self._counts[task.key] = count
            entry = TooLarge(task.key, task.pool, task.slots, found[0], found[1], count, rung=task.falls_back)
            if (
                count >= self.intervals
                and self.action == "fail"
                and not task.falls_back
                and self._fail(entry)
            ):
                entry = TooLarge(task.key, task.pool, task.slots, found[0], found[1], count, failed=True)
                failed.add(task.key)
            elif count >= self.intervals:
                log.warning("pool %s: %s", task.pool, entry.message(self.intervals))
            self.current.setdefault(task.pool, []).append(entry)
        self._counts = {k: v for k, v in self._counts.items() if k in seen and k not in failed}
        return [t for t in ready if t.key not in failed]

    def _fail(self, entry: TooLarge) -> bool:
        dag_id, run_id, task_id, map_index = split_key(entry.key)
        note = "gpu-dag watermark: " + entry.message(self.intervals)
        if self.dry_run:
            log.warning("pool %s: dry run: would fail %s", entry.pool, note)
            return False
        try:
            self.client.set_task_instance_state(dag_id, run_id, task_id, map_index, "failed", note)
        except Exception as err:
            log.error("pool %s: cannot fail %s (%s); trying again next tick", entry.pool, entry.task, err)
            return False
        log.error("pool %s: failed %s", entry.pool, note)
        return True

    def annotate(self, pool: str, description: str) -> str:
        """``description`` with this tick's too-large tasks of ``pool`` (before the state marker)."""
        entries = self.current.get(pool)
        if not entries:
            return description
        parts = []
        for e in entries[:3]:
            verdict = (
                "failed"
                if e.failed
                else (
                    "a fallback rung: left to its ladder"
                    if e.rung
                    else f"waiting {e.intervals}/{self.intervals} intervals"
                )
            )
            parts.append(f"{e.task} needs {e.slots} > {e.limit} ({verdict})")
        more = f" and {len(entries) - 3} more" if len(entries) > 3 else ""
        note = " | too large: " + "; ".join(parts) + more
        head, mark, tail = description.partition(_STATE_MARK)
        return head + note + mark + tail
