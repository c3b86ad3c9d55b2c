"""Which GPUs our own task instances hold, as a remote capacity source can tell: per worker host, from
the running task instances over REST.

A capacity source that measures busy GPUs (``prometheus`` with DCGM metrics) must not exclude a GPU
that is busy because one of our task instances runs on it: Airflow subtracts that task's pool slots
already. DCGM series name a host and a GPU, not the task; the REST API names the worker host of each
running task instance and (through its hints or pool slots) how many GPUs it holds. So on a host where
our running task instances hold ``k`` GPUs, up to ``k`` of its busy GPUs are ours.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_gpu_dag.core.model.pools import is_gpu_pool
from airflow_gpu_dag.executor_config import gpus_hint

log = logging.getLogger(__name__)

__all__ = ["RunningTaskGpus", "gpus_of_task_instance", "normalize_host"]


def normalize_host(name: object) -> str:
    """A host name as both sides spell it: lower case, no port, no domain (IP addresses kept whole)."""
    text = str(name or "").strip().lower()
    if text.startswith("[") and "]" in text:  # [ipv6]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        return text.split(".", 1)[0]


def gpus_of_task_instance(ti: Mapping[str, Any]) -> int:
    """GPUs a task instance (as the REST API returns it) holds: its ``gpus`` hint, else its pool slots
    when it sits in a GPU pool, else 0."""
    gpus = gpus_hint(ti.get("executor_config"))  # the task contract's (a malformed one is none)
    if gpus is not None:
        return gpus
    if is_gpu_pool(str(ti.get("pool") or "")):
        try:
            return max(0, int(ti.get("pool_slots") or 1))
        except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite pool_slots
            return 0
    return 0


class RunningTaskGpus:
    """GPUs held by our running task instances per (normalised) worker host, read over REST and kept
    for ``ttl`` seconds (every pool's source reads it in the same tick).

    :param list_running: returns the running task instances (REST dicts); by default
        ``client.task_instances([], ("running",))``.
    """

    def __init__(
        self,
        client: Any = None,
        ttl: float = 5.0,
        list_running: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if list_running is None:
            if client is None:
                raise ValueError("RunningTaskGpus needs a REST client or list_running")
            list_running = lambda: client.task_instances([], ("running",))  # noqa: E731
        self._list = list_running
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Mapping[str, Any]]] | None = None

    def by_host(self, pool: str | None = None) -> dict[str, int]:
        """``host -> GPUs`` our running task instances hold there (raises what the REST call raises).

        ``pool``: only the task instances of that pool. Airflow subtracts a running task's slots from
        its own pool only: a GPU held by a task of another pool is not free for this one.
        """
        with self._lock:
            now = self._clock()
            if self._cached is None or now - self._cached[0] >= self.ttl:
                self._cached = (now, list(self._list()))
            running = self._cached[1]
        held: dict[str, int] = {}
        for ti in running:
            if pool is not None and ti.get("pool") != pool:
                continue
            host = normalize_host(ti.get("hostname"))
            gpus = gpus_of_task_instance(ti)
            if host and gpus:
                held[host] = held.get(host, 0) + gpus
        return held
