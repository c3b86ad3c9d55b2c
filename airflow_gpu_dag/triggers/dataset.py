"""Wait in the triggerer until a dataset is complete (marker, manifest or stable sizes)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu_dag.datasets.completeness import (
    CompletenessResult,
    StabilityTracker,
    StableSize,
    check_failed,
    check_once,
    parse_completeness,
    permanent_error,
)

__all__ = ["DatasetCompleteTrigger", "off_loop"]

T = TypeVar("T")


async def off_loop(check: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``check(*args, stop=..., **kwargs)`` in a thread, off the triggerer's event loop (shared by every
    trigger of the deployment). When the trigger is cancelled (task cleared, triggerer stopping) the
    ``CancelledError`` propagates at once and ``stop`` is set, so the thread stops reading checksums
    instead of hashing the rest of the dataset for nobody while it holds one of the loop's threads."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(check, *args, stop=stop, **kwargs)
    except asyncio.CancelledError:
        stop.set()
        raise


class DatasetCompleteTrigger(BaseTrigger):
    """Poll ``path`` every ``poke_interval`` seconds until it is complete or ``deadline`` passes.

    Fires exactly one event: ``{"status": "complete", "path", "reason", "files", "bytes"}``,
    ``{"status": "timeout", "path", "reason"}`` where ``reason`` says what was still missing, or
    ``{"status": "error", "path", "reason"}`` at once on an error no later check can cure (a missing
    package such as s3fs, an undefined connection; see
    :func:`~airflow_gpu_dag.datasets.completeness.permanent_error`), with the fix in ``reason``. Any
    other error of a check (a flaky object store) counts as "not complete yet" and is logged; the
    deadline still bounds the wait.

    :param path: local path or fsspec URL (``file://``, ``s3://``, ...).
    :param completeness: a rule dict (``Marker().to_dict()``, ...).
    :param deadline: epoch seconds after which the trigger gives up.
    :param conn_id: Airflow connection for object storage (``ObjectStoragePath(..., conn_id=)``).
    """

    def __init__(
        self,
        path: str,
        completeness: dict[str, Any],
        deadline: float,
        poke_interval: float = 10.0,
        conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.path = path
        self.completeness = completeness
        self.deadline = float(deadline)
        self.poke_interval = float(poke_interval)
        self.conn_id = conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "path": self.path,
                "completeness": self.completeness,
                "deadline": self.deadline,
                "poke_interval": self.poke_interval,
                "conn_id": self.conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        rule = parse_completeness(self.completeness)
        tracker = StabilityTracker(rule) if isinstance(rule, StableSize) else None
        result = CompletenessResult(False, "not checked yet")
        while True:
            try:
                result = await off_loop(check_once, self.path, rule, conn_id=self.conn_id, tracker=tracker)
            except Exception as err:  # a flaky object store must not kill the wait...
                fix = permanent_error(err)
                if fix is not None:  # ...but no wait cures a missing package or connection
                    self.log.error("dataset %s cannot be checked: %s", self.path, fix)
                    yield TriggerEvent({"status": "error", "path": self.path, "reason": fix})
                    return
                result = CompletenessResult(False, check_failed(err))
            if result.complete:
                yield TriggerEvent(
                    {
                        "status": "complete",
                        "path": self.path,
                        "reason": result.reason,
                        "files": result.files,
                        "bytes": result.bytes,
                    }
                )
                return
            if time.time() >= self.deadline:
                yield TriggerEvent({"status": "timeout", "path": self.path, "reason": result.reason})
                return
            self.log.info("dataset %s not complete: %s", self.path, result.reason)
            await asyncio.sleep(max(0.1, min(self.poke_interval, self.deadline - time.time())))
