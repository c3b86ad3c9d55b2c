"""Wait in the triggerer until a training task has written checkpoint N (stage dependency)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_gpu_dag.datasets.completeness import (
    CompletenessResult,
    check_failed,
    check_once,
    parse_completeness,
    permanent_error,
    resolve,
)
from airflow_gpu_dag.triggers.dataset import off_loop

__all__ = [
    "TRAINING_OVER",
    "CheckpointTrigger",
    "checkpoint_regex",
    "ended_training_state",
    "find_checkpoint",
    "training_over_message",
    "training_state",
]

#: States of the training task after which no checkpoint will come. ``up_for_retry`` is not one:
#: the next try may still write it.
TRAINING_OVER = frozenset({"success", "failed", "upstream_failed", "skipped", "removed"})


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
    directory: str,
    pattern: str,
    min_step: int,
    completeness: object,
    conn_id: str | None = None,
    stop: threading.Event | None = None,
) -> tuple[str | None, int | None, str]:
    """The first complete checkpoint with step >= ``min_step``: ``(path, step, reason)``; path and
    step are None (and reason says why) when there is none yet. ``stop``: see ``check_once``."""
    regex = checkpoint_regex(pattern)
    rule = parse_completeness(completeness)
    fs, inner = resolve(directory, conn_id)
    # s3fs, gcsfs and adlfs keep directory listings (no expiry by default) in a filesystem object that
    # lives as long as the process: without this, every later look saw the first listing again and a
    # checkpoint written after it never appeared.
    fs.invalidate_cache(inner)
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
        last = check_once(full, rule, conn_id=conn_id, stop=stop)
        if last.complete:
            return full, step, last.reason
    return None, None, f"checkpoint(s) >= {min_step} exist but none is complete: {last.reason}"


def training_state(dag_id: str, run_id: str, task_id: str) -> str | None:
    """The state of ``task_id`` in the run ``run_id`` of ``dag_id`` (None: no task instance yet), read
    through the Task SDK (a worker or the triggerer; Airflow's ``GetTaskStates``)."""
    states = RuntimeTaskInstance.get_task_states(dag_id=dag_id, task_ids=[task_id], run_ids=[run_id])
    state = (states.get(run_id) or {}).get(task_id)
    return None if state is None else str(getattr(state, "value", state))


def ended_training_state(dag_id: str, run_id: str, task_id: str, log: Any) -> str | None:
    """The training task's state once it has ended (:data:`TRAINING_OVER`), else None, also when it
    cannot be read (the api-server is down): the wait goes on, bounded by its timeout, and ``log``
    says why."""
    try:
        state = training_state(dag_id, run_id, task_id)
    except Exception as err:
        log.warning("cannot read the state of training task %r: %s", task_id, err)
        return None
    return state if state in TRAINING_OVER else None


def training_over_message(
    sensor_id: str, training_task_id: str, state: str, directory: str, min_step: int, pattern: str
) -> str:
    """Why a checkpoint sensor gave up before its timeout: the task that writes the checkpoints ended."""
    return (
        f"task {sensor_id!r}: training task {training_task_id!r} ended {state} without a complete "
        f"checkpoint with step >= {min_step} in {directory}, so none will come and the tasks waiting "
        f"for it cannot start. Fix: make {training_task_id!r} save '{pattern}' directories with a "
        f"completeness marker up to step {min_step}, then clear {training_task_id!r} and {sensor_id!r}."
    )


class CheckpointTrigger(BaseTrigger):
    """Poll ``directory`` until a complete checkpoint with step >= ``min_step`` exists.

    Fires ``{"status": "complete", "path", "step", "reason"}``, ``{"status": "timeout", "path",
    "reason"}``, or ``{"status": "error", "path", "reason"}`` at once on an error no later check can
    cure (a missing package, an undefined connection), with the fix in ``reason``. Other errors of a
    check (a flaky object store) count as "not there yet" and are logged until the deadline.
    Stable-size completeness is not supported here (checkpoints are written once and marked).

    With ``training_task_id`` (and the run's ``dag_id`` / ``run_id``) it also watches the task that
    writes the checkpoints: once that task has ended (:data:`TRAINING_OVER`) and one more look finds
    no checkpoint, it fires ``{"status": "training_over", "state", "path", "reason"}`` instead of
    waiting out the deadline. A failed look at the task's state is logged and the wait goes on.
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
        training_task_id: str | None = None,
        dag_id: str | None = None,
        run_id: str | None = None,
    ) -> None:
        super().__init__()
        self.directory = directory
        self.pattern = pattern
        self.min_step = int(min_step)
        self.completeness = completeness
        self.deadline = float(deadline)
        self.poke_interval = float(poke_interval)
        self.conn_id = conn_id
        self.training_task_id = training_task_id
        self.dag_id = dag_id
        self.run_id = run_id

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
                "training_task_id": self.training_task_id,
                "dag_id": self.dag_id,
                "run_id": self.run_id,
            },
        )

    async def _find(self) -> tuple[str | None, int | None, str, str | None]:
        """One look: ``(path, step, reason, fix)``; ``fix`` is set for an error no later look cures
        (:attr:`_look_failed`: this look could not read the store)."""
        self._look_failed = False
        try:
            path, step, reason = await off_loop(
                find_checkpoint, self.directory, self.pattern, self.min_step, self.completeness, self.conn_id
            )
        except Exception as err:  # a flaky object store must not kill the wait...
            fix = permanent_error(err)
            if fix is not None:  # ...but no wait cures a missing package or connection
                self.log.error("checkpoint directory %s cannot be checked: %s", self.directory, fix)
                return None, None, fix, fix
            path, step, reason = None, None, check_failed(err)
            self._look_failed = True
            self.log.warning("checkpoint directory %s: %s; checking again", self.directory, reason)
        return path, step, reason, None

    async def _training_over(self) -> str | None:
        """The training task's state once it has ended, else None (also when it cannot be read)."""
        if not (self.training_task_id and self.dag_id and self.run_id):
            return None
        return await asyncio.to_thread(
            ended_training_state, self.dag_id, self.run_id, self.training_task_id, self.log
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            path, step, reason, fix = await self._find()
            if fix is not None:
                yield TriggerEvent({"status": "error", "path": self.directory, "reason": fix})
                return
            if path is not None:
                yield TriggerEvent({"status": "complete", "path": path, "step": step, "reason": reason})
                return
            over = await self._training_over()
            if over is not None:
                # the last checkpoint may have landed between the look above and the task's end
                path, step, reason, fix = await self._find()
                if path is not None:
                    yield TriggerEvent({"status": "complete", "path": path, "step": step, "reason": reason})
                    return
                if fix is not None:
                    yield TriggerEvent({"status": "error", "path": self.directory, "reason": fix})
                    return
                if self._look_failed:  # the store could not be read: the checkpoint may be there
                    await asyncio.sleep(max(0.1, min(self.poke_interval, self.deadline - time.time())))
                    if time.time() < self.deadline:
                        continue
                    yield TriggerEvent({"status": "timeout", "path": self.directory, "reason": reason})
                    return
                self.log.error("training task %r ended %s: %s", self.training_task_id, over, reason)
                yield TriggerEvent(
                    {"status": "training_over", "state": over, "path": self.directory, "reason": reason}
                )
                return
            if time.time() >= self.deadline:
                yield TriggerEvent({"status": "timeout", "path": self.directory, "reason": reason})
                return
            await asyncio.sleep(max(0.1, min(self.poke_interval, self.deadline - time.time())))
