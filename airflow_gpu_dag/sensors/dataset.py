"""Wait until a dataset is complete (not merely present); optionally fall back to the last good one.

    from airflow_gpu_dag.sensors import DatasetCompleteSensor

    DatasetCompleteSensor(task_id="wait_clean", path="s3://lake/clean/{{ ds_nodash }}",
                          completeness="manifest", timeout=timedelta(hours=2))

Deferrable by default: the wait runs in ``airflow triggerer`` and holds no worker slot. The task's
XCom return value is ``{"path", "fallback", "reason"}``; consumers read the path from it
(:func:`airflow_gpu_dag.authoring.data.dataset_path`).

Last good artifact (opt-in, ``fallback_to_last_good=True`` with ``producer_task_id`` and ``asset``):
the sensor runs even when the producer failed (trigger rule ``all_done``); then it takes the newest
event of ``asset`` whose ``extra["path"]`` is still complete, returns it with ``fallback: true`` and
logs a warning, so the run records that downstream used an older artifact. With no good artifact it
fails and the consumer is blocked. Every successful check emits an event of ``asset`` with
``extra={"path": ..., "fallback": ...}``: asset events mean "complete data", not "producer exited".
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from airflow_gpu_dag.airflow.declaring import partial_default
from airflow_gpu_dag.datasets.completeness import (
    CompletenessResult,
    StabilityTracker,
    StableSize,
    check_failed,
    check_once,
    parse_completeness,
    permanent_error,
    resolve,
    snapshot,
    storage_url,
)
from airflow_gpu_dag.deferral import (
    declared_where,
    is_deferrable,
    require_poke_interval,
    require_timeout,
    resume_race_retry,
    soft_failing,
)
from airflow_gpu_dag.executor_config import control_task_hints, merge_hints
from airflow_gpu_dag.triggers.dataset import DatasetCompleteTrigger

__all__ = ["DatasetCompleteSensor"]

#: Producer states that mean "this run produced nothing usable".
NOT_PRODUCED = frozenset({"failed", "upstream_failed", "skipped", "removed"})


class DatasetCompleteSensor(BaseSensorOperator):
    """Succeeds when ``path`` is complete under ``completeness``; fails with the missing part after
    ``timeout``.

    :param path: local path, URL (``file://``, ``s3://``, ``memory://``) or ``ObjectStoragePath``
        (kept as ``protocol://path``; its ``conn_id`` is used unless ``conn_id`` is given); templated.
    :param completeness: ``"marker"`` (``_SUCCESS``), ``"manifest"``, ``"stable"`` or a rule object
        (:class:`~airflow_gpu_dag.datasets.completeness.Marker`, ``Manifest``, ``StableSize(period=...)``).
    :param timeout: required: seconds or timedelta to wait before failing with a clear message.
    :param conn_id: Airflow connection for object storage (default: the ``ObjectStoragePath``'s).
    :param asset: the Asset this dataset is; emitted (with the path) when it is complete.
    :param fallback_to_last_good: when the producer failed, continue on the newest complete
        artifact recorded in ``asset``'s events.
    :param producer_task_id: the producing task in this DAG (needed for the fallback).
    :param deferrable: wait in the triggerer instead of poking in a worker; default
        ``[operators] default_deferrable`` (False unless set: deferring needs ``airflow triggerer``).
    """

    template_fields: Sequence[str] = ("path",)
    ui_color = "#c6e5ff"

    def __init__(
        self,
        *,
        path: Any,
        completeness: object = "marker",
        timeout: float | timedelta | None = None,
        poke_interval: float = 10.0,
        conn_id: str | None = None,
        asset: Asset | None = None,
        fallback_to_last_good: bool = False,
        producer_task_id: str | None = None,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        task_id = kwargs.get("task_id", "?")
        where = declared_where(kwargs)
        seconds = require_timeout(task_id, type(self).__name__, timeout, where=where)
        try:
            rule = parse_completeness(completeness)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        mode = partial_default(kwargs, "mode")  # the DAG's default_args too
        deferrable = is_deferrable(deferrable)
        if isinstance(rule, StableSize) and not deferrable and mode == "reschedule":
            # Each reschedule is a new process: the sizes seen last time are gone, so "unchanged for
            # the period" could never be proven and the sensor would wait out its timeout.
            raise ValueError(
                f"{where}: completeness='stable' cannot run in mode='reschedule' (each check "
                "starts afresh and never sees the sizes stay unchanged). Fix: pass deferrable=True "
                "(with a running triggerer), or use mode='poke'."
            )
        if fallback_to_last_good and (asset is None or not producer_task_id):
            raise ValueError(
                f"{where}: fallback_to_last_good needs asset= (where good artifacts are recorded) "
                "and producer_task_id= (whose failure triggers the fallback)."
            )
        if fallback_to_last_good:
            kwargs.setdefault("trigger_rule", "all_done")
        if asset is not None:
            kwargs["outlets"] = [*list(kwargs.get("outlets") or []), asset]
            kwargs["inlets"] = [*list(kwargs.get("inlets") or []), asset]
        require_poke_interval(poke_interval, where)
        url, path_conn_id = storage_url(path)
        # Declared for the lint: readers downstream of this sensor wait for a complete dataset.
        config = control_task_hints(kwargs.get("executor_config"))
        kwargs["executor_config"] = merge_hints(config, {"awaits": [url]})
        super().__init__(timeout=seconds, poke_interval=poke_interval, **resume_race_retry(kwargs))
        self.path = url
        self.completeness = rule.to_dict()
        self.conn_id = conn_id if conn_id is not None else path_conn_id
        self.asset = asset
        self.fallback_to_last_good = fallback_to_last_good
        self.producer_task_id = producer_task_id
        self.deferrable = deferrable
        self._tracker: StabilityTracker | None = None
        self._last = CompletenessResult(False, "not checked yet")

    # -- shared ------------------------------------------------------------------------------------
    def _check(self) -> CompletenessResult:
        """One check. An error no later check can cure (a missing package or connection) fails the
        task at once; any other (a flaky object store) is logged and counts as "not complete yet",
        as in the trigger: the timeout still bounds the wait."""
        rule = parse_completeness(self.completeness)
        if isinstance(rule, StableSize) and self._tracker is None:
            self._tracker = StabilityTracker(rule)
        try:
            self._last = check_once(self.path, rule, conn_id=self.conn_id, tracker=self._tracker)
        except Exception as err:
            fix = permanent_error(err)
            if fix is not None:
                raise AirflowFailException(self._error_message(fix)) from err
            self._last = CompletenessResult(False, check_failed(err))
            self.log.warning("dataset %s: %s; checking again", self.path, self._last.reason)
        return self._last

    def _error_message(self, reason: str) -> str:
        return f"task {self.task_id!r}: cannot check dataset {self.path}: {reason}."

    def _timeout_message(self, reason: str) -> str:
        rule = parse_completeness(self.completeness)
        return (
            f"task {self.task_id!r}: dataset {self.path} was not complete after {self.timeout:.0f}s "
            f"({rule.kind} rule): {reason}. Fix: make the producer finish the dataset "
            f"(write_marker/write_manifest), check the path, or raise timeout=."
        )

    def _done(self, context: Any, path: str, reason: str, fallback: bool) -> dict[str, Any]:
        if self.asset is not None:
            try:
                context["outlet_events"][self.asset].extra = {"path": path, "fallback": fallback}
            except Exception as err:  # outside a real run (unit tests)
                self.log.debug("could not set asset event extra: %s", err)
        return {"path": path, "fallback": fallback, "reason": reason}

    def _producer_state(self, context: Any) -> str | None:
        if not self.producer_task_id:
            return None
        ti = context["ti"]
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=[self.producer_task_id], run_ids=[ti.run_id])
        state = (states.get(ti.run_id) or {}).get(self.producer_task_id)
        return str(state) if state is not None else None

    def _last_good(self, context: Any, producer_state: str) -> dict[str, Any]:
        assert self.asset is not None
        events = list(context["inlet_events"][self.asset])
        rule = parse_completeness(self.completeness)
        for event in reversed(events):
            path = (event.extra or {}).get("path")
            if not path or path == self.path:
                continue
            result = (
                _still_there(path, self.conn_id)
                if isinstance(rule, StableSize)
                else check_once(path, rule, conn_id=self.conn_id)
            )
            if result.complete:
                self.log.warning(
                    "producer %r ended %s; continuing on the last good artifact %s (asset %s)",
                    self.producer_task_id,
                    producer_state,
                    path,
                    self.asset.uri,
                )
                return self._done(
                    context, path, f"producer {self.producer_task_id!r} {producer_state}; last good", True
                )
        raise AirflowFailException(
            f"task {self.task_id!r}: producer {self.producer_task_id!r} ended {producer_state} and asset "
            f"{self.asset.uri!r} has no earlier complete artifact to fall back to; downstream is blocked. "
            "Fix the producer and clear it."
        )

    # -- execution ---------------------------------------------------------------------------------
    def execute(self, context: Any) -> Any:
        with soft_failing(self):  # a failure found before poke() or the trigger
            return self._execute(context)

    def _check_producer_task(self, state: str | None) -> None:
        """A producer that is not in the DAG has no state (None), so the fallback would never apply."""
        if state is not None or not self.has_dag() or self.dag.has_task(str(self.producer_task_id)):
            return
        raise AirflowFailException(
            f"task {self.task_id!r}: producer_task_id={self.producer_task_id!r} is not a task of DAG "
            f"{self.dag.dag_id!r}, so its failure could never start the fallback to the last good "
            "artifact. Fix: pass the task_id of the task that writes the dataset."
        )

    def _execute(self, context: Any) -> Any:
        if self.fallback_to_last_good:
            state = self._producer_state(context)
            self._check_producer_task(state)
            if state in NOT_PRODUCED:
                return self._last_good(context, state or "failed")
        result = self._check()
        if result.complete:
            return self._done(context, self.path, result.reason, False)
        if not self.deferrable:
            try:
                return super().execute(context)
            except AirflowSensorTimeout:
                raise AirflowSensorTimeout(self._timeout_message(self._last.reason)) from None
        self.log.info("dataset %s not complete yet (%s); deferring", self.path, result.reason)
        self.defer(
            trigger=DatasetCompleteTrigger(
                path=self.path,
                completeness=self.completeness,
                deadline=time.time() + self.timeout,
                poke_interval=self.poke_interval,
                conn_id=self.conn_id,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout + 120),
        )

    def poke(self, context: Any) -> PokeReturnValue:
        result = self._check()
        self.log.info("dataset %s: %s", self.path, result.reason)
        if result.complete:
            return PokeReturnValue(True, self._done(context, self.path, result.reason, False))
        return PokeReturnValue(False)

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:
        event = event or {}
        if event.get("status") == "complete":
            return self._done(context, self.path, str(event.get("reason", "")), False)
        if event.get("status") == "error":
            raise AirflowFailException(self._error_message(str(event.get("reason", "unknown error"))))
        raise AirflowSensorTimeout(self._timeout_message(str(event.get("reason", "unknown"))))


def _still_there(path: str, conn_id: str | None) -> CompletenessResult:
    """A stable-size artifact recorded complete earlier still counts while it has files (one check
    cannot prove stability again; a deleted path must not be handed on as good data)."""
    fs, inner = resolve(path, conn_id)
    files = snapshot(fs, inner)
    if not files:
        return CompletenessResult(False, f"{path} is gone or empty")
    return CompletenessResult(True, "recorded complete, still there", len(files), sum(files.values()))
