"""Durations learned from past runs, for the weights: read off the scheduler loop, refreshed on a bound.

``get_weight`` may not query the database (it runs once per task instance, inside the scheduler's own
transaction; ``create_session`` in that thread would even hand back the scheduler's session). So a
DAG object's learned graph (:func:`airflow_gpu_dag.airflow.history.learned_task_graph`: durations from
the recent successful tries, mapped tasks expanded with their past counts) is read by one daemon
thread per process:

* the first time a DAG version is asked for, it is queued and read at once (one windowed query, plus one
  for the map counts of a DAG with mapped tasks); until then the weights use the declared estimates;
* every version in use is read again when its entry is ``[gpu_dag] learned_refresh`` old (default 10
  minutes), whether or not anything asks: the weights of a new run follow what the runs before it took at
  most that long ago. In use: the DAG's newest version, or asked for since the newest appeared. A
  superseded version keeps what was read and is not refreshed, so re-versioning a DAG does not multiply
  the reads.

At most :data:`MAX_VERSIONS` DAG versions are kept, the least recently asked for dropped first. With
``inline=True`` (``[gpu_dag] plan_in_background = false``: tests) the read happens in the caller. The
refresh bound is at least :data:`MIN_REFRESH_S`; :meth:`LearnedDurations.stop` ends the thread (the
weights call it when new settings replace the object).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow import settings as airflow_settings

from airflow_gpu_dag.airflow import history
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.settings import MIN_LEARNED_REFRESH_S

log = logging.getLogger(__name__)

__all__ = [
    "LEARNED_REFRESH_S",
    "MAX_VERSIONS",
    "MIN_REFRESH_S",
    "Learned",
    "LearnedDurations",
    "refresh_bound",
]

#: Default of ``[gpu_dag] learned_refresh``: how old a DAG's learned durations may get, seconds.
LEARNED_REFRESH_S = 600.0
#: The shortest refresh bound: a shorter ``refresh_s`` is raised to it (``[gpu_dag] learned_refresh``
#: under it is refused where it is read and reported by ``settings.config_problems``).
MIN_REFRESH_S = MIN_LEARNED_REFRESH_S
#: DAG versions whose learned durations are kept per process.
MAX_VERSIONS = 1024
#: The refresh thread looks for due versions at least this often (seconds).
MAX_POLL_S = 3600.0
#: After each read the thread sleeps this many times as long as the read took (at most YIELD_MAX_S).
YIELD_FACTOR = 2.0
YIELD_MAX_S = 1.0


@dataclass(frozen=True)
class Learned:
    """A DAG object's graph with learned durations, as read at ``at`` (``time.monotonic()``); ``graph``
    None when the DAG has no history yet (its declared graph stands)."""

    at: float
    graph: TaskGraph | None
    learned_tasks: int  # tasks whose duration (or, mapped, whose instance count) comes from their history

    @property
    def changes_nothing(self) -> bool:
        """Nothing was learned: no history, or no task with a learned duration or a past map count."""
        return self.graph is None or self.learned_tasks == 0


def refresh_bound(refresh_s: float) -> float:
    """The refresh bound a :class:`LearnedDurations` made with ``refresh_s`` uses (at least
    :data:`MIN_REFRESH_S`): what to compare its ``refresh_s`` with to tell whether settings changed."""
    return max(MIN_REFRESH_S, refresh_s)


def read_learned(dag: Any) -> tuple[TaskGraph | None, int]:
    """The learned graph of ``dag`` and how many of its tasks have a learned duration or map count;
    ``(None, 0)`` without building anything when the DAG has no history yet (one ``LIMIT 1`` query).
    Never raises for an unreadable history: the declared estimates are used."""
    session = _own_session()
    try:
        try:
            if not history.has_history(str(dag.dag_id), session=session):
                return None, 0
        except Exception:  # learned_task_graph says why, once
            if session is not None:
                with contextlib.suppress(Exception):
                    session.rollback()  # else the next query fails on the aborted transaction
        learned = history.learned_task_graph(dag, expand_mapped=True, session=session)
    finally:
        if session is not None:
            with contextlib.suppress(Exception):
                session.close()  # read only: nothing to commit
    durations = sum(1 for e in learned.estimates.values() if e.learned is not None)
    return learned.graph, durations + len(learned.map_counts)


def _own_session() -> Any:
    """A session of its own, not the thread's scoped one: with ``[gpu_dag] plan_in_background = false``
    the history is read inside ``get_weight``, in the scheduler's thread, whose scoped session is the
    scheduler's own, mid-transaction (``create_session()`` would commit and close it). None when no
    session can be made (the history functions then say why; the declared estimates are used)."""
    try:
        maker = airflow_settings.NonScopedSession
        return maker() if maker is not None else None
    except Exception:
        return None


class LearnedDurations:
    """See the module docstring. Entries are keyed by DAG version (``dag_id`` and a digest of its declared
    graph), not by DAG object: an api-server may load a new object of the same version for every
    request. The latest object of each version is kept for the refreshes (at most :data:`MAX_VERSIONS`,
    least recently asked for dropped first). ``read`` and ``clock`` are replaceable for tests;
    ``prepare(version, dag, entry)`` is called with every new entry in the reading thread, before the
    entry is visible (the weights make the version's basis there)."""

    def __init__(
        self,
        refresh_s: float = LEARNED_REFRESH_S,
        inline: bool = False,
        read: Callable[[Any], tuple[TaskGraph | None, int]] = read_learned,
        clock: Callable[[], float] = time.monotonic,
        prepare: Callable[[str, Any, Learned], None] | None = None,
    ) -> None:
        self.refresh_s = refresh_bound(refresh_s)
        self.inline = inline
        self._read = read
        self._clock = clock
        self._prepare = prepare  # called with each new entry, in the reading thread (the weights' basis)
        self._entries: dict[str, Learned] = {}
        self._dags: OrderedDict[str, Any] = OrderedDict()  # version -> the latest DAG object asked with
        self._asks = 0  # calls of get so far: the order of first and last asks below
        self._first: dict[str, int] = {}  # version -> when (in asks) it was first asked for
        self._last: dict[str, int] = {}  # version -> when it was last asked for
        self._wanted: set[str] = set()  # asked for, not read yet
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.reads = 0  # DAG versions read (tests, metrics)

    def get(self, version: str, dag: Any) -> Learned | None:
        """The learned graph of DAG version ``version`` when one has been read, else None (and ``dag``
        is queued to be read)."""
        with self._lock:
            self._dags[version] = dag
            self._dags.move_to_end(version)
            self._asks += 1
            self._first.setdefault(version, self._asks)
            self._last[version] = self._asks
            while len(self._dags) > MAX_VERSIONS:
                old, _ = self._dags.popitem(last=False)
                self._entries.pop(old, None)
                self._first.pop(old, None)
                self._last.pop(old, None)
                self._wanted.discard(old)
            entry = self._entries.get(version)
            queue = (
                entry is None
                and not self.inline
                and version not in self._wanted
                and not self._stopped.is_set()
            )
            if queue:
                self._wanted.add(version)
                self._start()
        if queue:
            self._wake.set()
        stale = entry is None or self._clock() - entry.at > self.refresh_s
        if self.inline and stale and not self._stopped.is_set():  # stopped: nothing new is read
            return self._refresh(version, dag)
        return entry

    def _refresh(self, version: str, dag: Any) -> Learned | None:
        try:
            graph, learned_tasks = self._read(dag)
        except Exception as err:  # an optimization: keep the declared estimates
            log.warning(
                "airflow-gpu-dag: cannot learn durations of DAG %r (%s: %s); its weights use the declared "
                "estimates",
                getattr(dag, "dag_id", "?"),
                type(err).__name__,
                err,
            )
            with self._lock:
                self._wanted.discard(version)
            return None
        entry = Learned(self._clock(), graph, learned_tasks)
        if self._prepare is not None:
            try:
                self._prepare(version, dag, entry)  # before the entry is visible: callers find both
            except Exception:
                log.exception("airflow-gpu-dag: preparing the weights of DAG version %s failed", version)
        with self._lock:
            self.reads += 1
            if version in self._dags:
                self._entries[version] = entry
            self._wanted.discard(version)
        return entry

    # -- the refresh thread -------------------------------------------------------------------------
    def stop(self) -> None:
        """End the refresh thread (after the read in progress, if any) and start no other: the object
        was replaced. Entries already read stay readable; new versions are no longer read."""
        self._stopped.set()
        self._wake.set()

    @property
    def running(self) -> bool:
        """Whether the refresh thread is alive (tests)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def _start(self) -> None:
        if self._stopped.is_set():
            return
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="gpu-dag-learned", daemon=True)
            self._thread.start()

    def _due(self) -> list[tuple[str, Any]]:
        """Versions asked for and not read yet, and the versions in use whose entry is as old as the
        refresh bound: each DAG's newest version (the last one first asked for) and any version asked for
        since the newest one appeared (runs of it still create task instances). A version not asked for
        since a newer one appeared is superseded and not refreshed (its entry stays readable; asked for
        again, it is in use again)."""
        now = self._clock()
        with self._lock:
            newest: dict[str, int] = {}  # dag_id -> when its newest version was first asked for
            for version, first in self._first.items():
                dag_id = version.rpartition(":")[0]
                newest[dag_id] = max(newest.get(dag_id, 0), first)
            return [
                (version, dag)
                for version, dag in self._dags.items()
                if version in self._wanted
                or (
                    self._last[version] >= newest[version.rpartition(":")[0]]
                    and version in self._entries
                    and now - self._entries[version].at >= self.refresh_s
                )
            ]

    def _loop(self) -> None:
        while not self._stopped.is_set():
            # at most MAX_POLL_S: a refresh bound of years ("1000000d") would exceed what a wait takes
            # (threading.TIMEOUT_MAX) and end the thread before it read anything
            self._wake.wait(timeout=min(self.refresh_s / 4, MAX_POLL_S))
            self._wake.clear()
            for version, dag in self._due():
                if self._stopped.is_set():
                    return
                started = time.monotonic()
                try:
                    self._refresh(version, dag)
                except Exception:  # never let the thread die
                    log.exception("airflow-gpu-dag: refreshing learned durations failed")
                # Building a large DAG's learned graph is Python work that holds the GIL: rest twice as
                # long as it took, so the scheduler's own thread keeps at least two thirds of the time.
                self._stopped.wait(min(YIELD_MAX_S, YIELD_FACTOR * (time.monotonic() - started)))

    def wait_for(self, version: str, timeout: float = 30.0) -> Learned | None:
        """Wait until DAG version ``version`` has been read (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                entry = self._entries.get(version)
            if entry is not None:
                return entry
            time.sleep(0.01)
        return None
