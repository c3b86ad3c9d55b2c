"""Wait in the triggerer until a training task has written checkpoint N (stage dependency)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu_dag.datasets.completeness import (
    CompletenessResult,
    check_failed,
    check_once,
    parse_completeness,
    permanent_error,
    resolve,
)

__all__ = ["CheckpointTrigger", "checkpoint_regex", "find_checkpoint"]


def checkpoint_regex(pattern: str) -> re.Pattern[str]:
    """``"checkpoint-{step}"`` -> a regex matching the directory name and capturing the step.

    :raises ValueError: the pattern has no ``{step}`` placeholder.
    """
    if pattern.count("{step}") != 1:
        raise ValueError(
            f"checkpoint pattern {pattern!r} must contain '{{step}}' exactly once, "
            "e.g. 'checkpoint-{step}'."
        )
    head, tail = pattern.split("{step}")
    return re.compile("^" + re.escape(head) + r"(\d+)" + re.escape(tail) + "$")


def find_checkpoint(
    directory: str, pattern: str, min_step: int, completeness: object, conn_id: str | None = None
) -> tuple[str | None, int | None, str]:
    """The first complete checkpoint with step >= ``min_step``: ``(path, step, reason)``; path and
    step are None (and reason says why) when there is none yet."""
    regex = checkpoint_regex(pattern)
    rule = parse_completeness(completeness)
    fs, inner = resolve(directory, conn_id)
    if not fs.exists(inner):
        return None, None, f"checkpoint directory {directory} does not exist yet"
    steps: list[tuple[int, str]] = []
    for entry in fs.ls(inner, detail=False):
        name = str(entry).rstrip("/").rsplit("/", 1)[-1]
        match = regex.match(name)
        if match and int(match.group(1)) >= min_step:
            steps.append((int(match.group(1)), name))
    if not steps:
        return None, None, f"no checkpoint with step >= {min_step} in {directory} yet"
    last = CompletenessResult(False, "")
    for step, name in sorted(steps):
        full = directory.rstrip("/") + "/" + name
        last = check_once(full, rule, conn_id=conn_id)
        if last.complete:
            return full, step, last.reason
    return None, None, f"checkpoint(s) >= {min_step} exist but none is complete: {last.reason}"


class CheckpointTrigger(BaseTrigger):
    """Poll ``directory`` until a complete checkpoint with step >= ``min_step`` exists.

    Fires ``{"status": "complete", "path", "step", "reason"}``, ``{"status": "timeout", "path",
    "reason"}``, or ``{"status": "error", "path", "reason"}`` at once on an error no later check can
    cure (a missing package, an undefined connection), with the fix in ``reason``. Other errors of a
    check (a flaky object store) count as "not there yet" and are logged until the deadline.
    Stable-size completeness is not supported here (checkpoints are written once and marked).
    """

    def __init__(
        self,
        directory: str,
        pattern: str,
        min_step: int,
        completeness: dict[str, Any],
        deadline: float,
        poke_interval: float = 10.0,
        conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.directory = directory
        self.pattern = pattern
        self.min_step = int(min_step)
        self.completeness = completeness
        self.deadline = float(deadline)
        self.poke_interval = float(poke_interval)
        self.conn_id = conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "directory": self.directory,
                "pattern": self.pattern,
                "min_step": self.min_step,
                "completeness": self.completeness,
                "deadline": self.deadline,
                "poke_interval": self.poke_interval,
                "conn_id": self.conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                path, step, reason = await asyncio.to_thread(
                    find_checkpoint,
                    self.directory,
                    self.pattern,
                    self.min_step,
                    self.completeness,
                    self.conn_id,
                )
            except Exception as err:  # a flaky object store must not kill the wait...
                fix = permanent_error(err)
                if fix is not None:  # ...but no wait cures a missing package or connection
                    self.log.error("checkpoint directory %s cannot be checked: %s", self.directory, fix)
                    yield TriggerEvent({"status": "error", "path": self.directory, "reason": fix})
                    return
                path, step, reason = None, None, check_failed(err)
                self.log.warning("checkpoint directory %s: %s; checking again", self.directory, reason)
            if path is not None:
                yield TriggerEvent({"status": "complete", "path": path, "step": step, "reason": reason})
                return
            if time.time() >= self.deadline:
                yield TriggerEvent({"status": "timeout", "path": self.directory, "reason": reason})
                return
            await asyncio.sleep(max(0.1, min(self.poke_interval, self.deadline - time.time())))
