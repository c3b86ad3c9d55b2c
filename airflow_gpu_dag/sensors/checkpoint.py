"""Stage dependency: wait until a (still running) training task has written checkpoint N.

    CheckpointSensor(task_id="wait_ckpt_1000", checkpoint_dir="/ckpt/run1",
                     step=1000, pattern="step-{step}", timeout=timedelta(hours=6))

Succeeds on the first checkpoint directory named by ``pattern`` with step >= ``step`` that is
complete (marker ``_SUCCESS`` by default), and returns ``{"path", "step"}`` as XCom. Unlike an
ordinary edge it does not wait for the training task to finish. Given ``training_task_id`` (as
:func:`~airflow_gpu_dag.authoring.stage_dependency` does), it fails as soon as that task has ended
(failed, or succeeded without the checkpoint) instead of waiting out its timeout.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, NoReturn

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException

from airflow_gpu_dag.datasets.completeness import (
    StableSize,
    check_failed,
    parse_completeness,
    permanent_error,
    storage_url,
)
from airflow_gpu_dag.deferral import (
    declared_where,
    is_deferrable,
    require_timeout,
    resume_race_retry,
    soft_failing,
)
from airflow_gpu_dag.executor_config import control_task_hints
from airflow_gpu_dag.triggers.checkpoint import (
    CheckpointTrigger,
    checkpoint_regex,
    ended_training_state,
    find_checkpoint,
    training_over_message,
)

__all__ = ["CheckpointSensor"]


class CheckpointSensor(BaseSensorOperator):
    """Succeeds once a complete checkpoint with step >= ``step`` exists under ``checkpoint_dir``.

    :param checkpoint_dir: directory holding one sub-directory per checkpoint: a path, a URL or an
        ``ObjectStoragePath`` (kept as ``protocol://path``; its ``conn_id`` is used unless ``conn_id``
        is given); templated.
    :param step: the checkpoint number N to wait for (>= 0).
    :param pattern: sub-directory name with ``{step}``, e.g. ``"checkpoint-{step}"``.
    :param completeness: ``"marker"`` or ``"manifest"`` (a checkpoint is written once, then marked).
    :param timeout: required.
    :param conn_id: Airflow connection for object storage (default: the ``ObjectStoragePath``'s).
    :param deferrable: wait in the triggerer instead of poking in a worker; default
        ``[operators] default_deferrable`` (False unless set: deferring needs ``airflow triggerer``).
    :param training_task_id: the task of this DAG that writes the checkpoints. Once it has ended
        (``failed``, ``upstream_failed``, ``removed``, or ``success`` without the checkpoint) the
        sensor fails at once, naming it, instead of waiting out ``timeout``; once it was
        ``skipped``, the sensor is skipped (what follows is skipped, as after an ordinary edge).
    """

    template_fields: Sequence[str] = ("checkpoint_dir",)
    ui_color = "#d9c6ff"

    def __init__(
        self,
        *,
        checkpoint_dir: Any,
        step: int,
        pattern: str = "checkpoint-{step}",
        completeness: object = "marker",
        timeout: float | timedelta | None = None,
        poke_interval: float = 10.0,
        conn_id: str | None = None,
        deferrable: bool | None = None,
        training_task_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        task_id = kwargs.get("task_id", "?")
        where = declared_where(kwargs)
        seconds = require_timeout(task_id, type(self).__name__, timeout, where=where)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"{where}: step={step!r} must be a checkpoint number >= 0.")
        try:
            checkpoint_regex(pattern)
            rule = parse_completeness(completeness)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        if isinstance(rule, StableSize):
            raise ValueError(
                f"{where}: checkpoints need a marker or manifest rule, not stable sizes; "
                "have the trainer call write_marker(checkpoint_path) after saving."
            )
        kwargs["executor_config"] = control_task_hints(kwargs.get("executor_config"))
        super().__init__(timeout=seconds, poke_interval=poke_interval, **resume_race_retry(kwargs))
        url, path_conn_id = storage_url(checkpoint_dir)
        self.checkpoint_dir = url
        self.step = step
        self.pattern = pattern
        self.completeness = rule.to_dict()
        self.conn_id = conn_id if conn_id is not None else path_conn_id
        self.deferrable = is_deferrable(deferrable)
        self.training_task_id = training_task_id
        self._reason = "not checked yet"

    def _message(self, reason: str) -> str:
        return (
            f"task {self.task_id!r}: no complete checkpoint with step >= {self.step} in "
            f"{self.checkpoint_dir} after {self.timeout:.0f}s: {reason}. Fix: check that training saves "
            f"'{self.pattern}' directories with a completeness marker, or raise timeout=."
        )

    def _error_message(self, reason: str) -> str:
        return f"task {self.task_id!r}: cannot check checkpoint directory {self.checkpoint_dir}: {reason}."

    def _find(self) -> tuple[str | None, int | None, str]:
        """One look. An error no later look can cure (a missing package or connection) fails the
        task at once; any other (a flaky object store) is logged and counts as "not there yet", as
        in the trigger: the timeout still bounds the wait."""
        self._look_failed = False
        try:
            path, step, reason = find_checkpoint(
                self.checkpoint_dir, self.pattern, self.step, self.completeness, self.conn_id
            )
        except Exception as err:
            fix = permanent_error(err)
            if fix is not None:
                raise AirflowFailException(self._error_message(fix)) from err
            path, step, reason = None, None, check_failed(err)
            self._look_failed = True
            self.log.warning("checkpoint directory %s: %s; checking again", self.checkpoint_dir, reason)
        self._reason = reason
        return path, step, reason

    def _training_over(self, context: Any) -> str | None:
        """The training task's state once it has ended, else None (also when it cannot be read: the
        timeout still bounds the wait)."""
        if not self.training_task_id:
            return None
        ti = context["ti"]
        return ended_training_state(ti.dag_id, ti.run_id, self.training_task_id, self.log)

    def _fail_if_training_over(self, context: Any) -> dict[str, Any] | None:
        """None while training may still write the checkpoint (or the store cannot be read to tell); the
        checkpoint if it landed just before training ended; raises once training has ended without it."""
        over = self._training_over(context)
        if over is None:
            return None
        path, step, _ = self._find()  # it may have landed since the last look
        if path is not None:
            return {"path": path, "step": step}
        if self._look_failed:  # the store could not be read: the checkpoint may be there (timeout bounds it)
            return None
        self._give_up(over)

    def _give_up(self, state: str) -> NoReturn:
        """Training ended without the checkpoint: skip when it was skipped (as an ordinary edge would
        skip what follows), else fail naming it."""
        if state == "skipped":
            raise AirflowSkipException(
                f"training task {self.training_task_id!r} was skipped: no checkpoint {self.step} will come"
            )
        raise AirflowFailException(self._training_message(state))

    def _training_message(self, state: str) -> str:
        return training_over_message(
            self.task_id, self.training_task_id or "?", state, self.checkpoint_dir, self.step, self.pattern
        )

    def _check_training_task(self) -> None:
        if not self.training_task_id or not self.has_dag():
            return
        dag = self.dag
        if not dag.has_task(self.training_task_id):
            raise AirflowFailException(
                f"task {self.task_id!r}: training_task_id={self.training_task_id!r} is not a task of DAG "
                f"{dag.dag_id!r}. Fix: pass the task_id of the task that writes the checkpoints."
            )

    def execute(self, context: Any) -> Any:
        with soft_failing(self):  # a failure found before poke() or the trigger
            return self._execute(context)

    def _execute(self, context: Any) -> Any:
        self._check_training_task()
        path, step, reason = self._find()
        if path is not None:
            return {"path": path, "step": step}
        found = self._fail_if_training_over(context)
        if found is not None:
            return found
        if not self.deferrable:
            try:
                return super().execute(context)
            except AirflowSensorTimeout:
                raise AirflowSensorTimeout(self._message(self._reason)) from None
        self.log.info("%s; deferring", reason)
        self.defer(
            trigger=CheckpointTrigger(
                directory=self.checkpoint_dir,
                pattern=self.pattern,
                min_step=self.step,
                completeness=self.completeness,
                deadline=time.time() + self.timeout,
                poke_interval=self.poke_interval,
                conn_id=self.conn_id,
                training_task_id=self.training_task_id,
                dag_id=context["ti"].dag_id if self.training_task_id else None,
                run_id=context["ti"].run_id if self.training_task_id else None,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout + 120),
        )

    def poke(self, context: Any) -> PokeReturnValue:
        path, step, reason = self._find()
        self.log.info("%s", reason)
        if path is not None:
            return PokeReturnValue(True, {"path": path, "step": step})
        found = self._fail_if_training_over(context)
        if found is not None:
            return PokeReturnValue(True, found)
        return PokeReturnValue(False)

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:
        event = event or {}
        if event.get("status") == "complete":
            return {"path": event["path"], "step": event["step"]}
        if event.get("status") == "error":
            raise AirflowFailException(self._error_message(str(event.get("reason", "unknown error"))))
        if event.get("status") == "training_over":
            self._give_up(str(event.get("state", "ended")))
        raise AirflowSensorTimeout(self._message(str(event.get("reason", "unknown"))))
