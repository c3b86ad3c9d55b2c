"""Plan quality as a number: the watermark controller sends ``gpu_dag.plan.*`` once per DAG run that
finished since its previous tick (docs/metrics.md, "Plan against what happened").

Each active tick, after the pools are written, :meth:`PlanErrorReporter.check` lists the DAG runs that
ended (success or failed) since the previous check, builds for each the report of ``airflow gpu-dag
explain`` (:func:`airflow_gpu_dag.cli.explain_report.build_report`, with the controller's REST client,
learned durations and reservation gate) and sends its ``plan_error`` (median and p90 of the start and
end errors over the run's GPU tasks) through ``airflow_gpu_dag.metrics.plan_error``, for runs that
use a pool this controller manages.

Why the controller and not a listener on DAG runs: Airflow 3.3 calls ``on_dag_run_success`` /
``on_dag_run_failed`` from ``DagRun.update_state`` inside the scheduler's loop (and in the api-server
for a run marked by hand), where the report would need a thread of its own and the live state read
through the ORM instead of the REST API the report is built from. The controller already holds that
REST client and the durations, ticks anyway, and runs in a process of its own: nothing here can slow
or break the scheduler or a run.

Cheap and safe: a DAG found not to use the provider is skipped without a request for
:data:`NOT_PROVIDER_TTL` seconds; a check builds reports for at most a quarter of the controller's
interval (the rest wait for the next tick) and measures at most :data:`MAX_RUNS` runs at once (more:
the oldest are not measured, and the log says so once); any failure is logged once per kind and never
raised. Runs that ended before the controller started, or while it stood by, are not
measured.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any

import airflow_gpu_dag.metrics as metrics
from airflow_gpu_dag.cli.explain_report import EXIT_NOT_PROVIDER, ExplainError, build_report
from airflow_gpu_dag.core.policy.objective import DEFAULT_EPOCH, ReservationGate
from airflow_gpu_dag.hooks.rest_client import parse_time
from airflow_gpu_dag.log_once import LogOnce

log = logging.getLogger(__name__)
_once = LogOnce(log)

__all__ = ["DEFAULT_BUDGET_S", "MARGIN_S", "MAX_RUNS", "NOT_PROVIDER_TTL", "PlanErrorReporter"]

#: Finished runs measured at most per check (more at once: the oldest are not measured).
MAX_RUNS = 20
#: Seconds one check spends building reports by default; the watermark controller gives a quarter of
#: its interval, so that its next tick stays on time.
DEFAULT_BUDGET_S = 15.0
#: Seconds a DAG found not to use the provider is skipped before it is asked about again.
NOT_PROVIDER_TTL = 600.0
#: Seconds each check looks back before the latest end it has seen: a run whose end the scheduler
#: committed late (or a clock step) is still found; runs already measured are not sent twice.
MARGIN_S = 120.0

#: ``report(dag_id, run_id)``: the explain report of one run.
ReportFn = Callable[[str, str], Mapping[str, Any]]


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


class PlanErrorReporter:
    """Sends the plan error of each finished DAG run once (:mod:`.plan_quality`).

    :param client: the controller's REST client (``pages``, and what ``build_report`` reads).
    :param pools: the pools this controller manages: a run is measured when one of its GPU pools is one.
    :param history: the controller's learned durations (``ControllerHistory``), as ``explain`` uses them.
    :param gate: the objective's reservation gate; ``epoch``: ``[gpu_dag] key_epoch``.
    :param clock: epoch seconds.
    :param budget: seconds one check may spend building reports (at least one is built; the rest wait
        for the next check); ``timer`` measures it.
    :param report: builds the explain report of a run (default: ``build_report`` with the above).
    """

    def __init__(
        self,
        client: Any,
        pools: Collection[str],
        *,
        history: Any,
        gate: ReservationGate | None = None,
        epoch: float = DEFAULT_EPOCH,
        clock: Callable[[], float] = time.time,
        budget: float = DEFAULT_BUDGET_S,
        timer: Callable[[], float] = time.monotonic,
        report: ReportFn | None = None,
    ) -> None:
        self.client = client
        self.budget = float(budget)
        self._timer = timer
        self.report: ReportFn = report or (
            lambda dag_id, run_id: build_report(
                client, dag_id, run_id, history=history, gate=gate, epoch=epoch
            )
        )
        self.pools = frozenset(pools)
        self._clock = clock
        #: when measuring started (the first check) and the latest end date seen (epoch s); None before
        self.started: float | None = None
        self.since: float | None = None
        #: run key -> its end date, for the runs already handled within the look-back margin
        self.done: dict[str, float] = {}
        #: dag_id -> when to ask again whether it uses the provider
        self.not_provider: dict[str, float] = {}
        #: (dag_id, run_id, plan_error) of every run sent (tests, the heartbeat)
        self.sent: list[tuple[str, str, Mapping[str, Any]]] = []

    def check(self) -> int:
        """Send the plan error of each run that finished since the previous check; returns how many
        were sent. Never raises."""
        try:
            return self._check()
        except Exception as err:  # a metric never breaks a tick
            what = f"check:{type(err).__name__}"
            _once.warning(
                what, "gpu-dag plan error: not measured this tick (%s: %s)", type(err).__name__, err
            )
            return 0

    def _check(self) -> int:
        now = self._clock()
        if self.started is None or self.since is None:  # the first check: measure what finishes from now on
            self.started = self.since = now
            return 0
        params: list[tuple[str, str | int]] = [
            ("state", "success"),
            ("state", "failed"),
            ("end_date_gte", _iso(self.since - MARGIN_S)),
            ("order_by", "end_date"),
        ]
        try:
            runs = self.client.pages("/dags/~/dagRuns", "dag_runs", params)
        except Exception as err:
            _once.warning(
                f"list:{type(err).__name__}", "gpu-dag plan error: cannot list the finished runs (%s)", err
            )
            return 0
        todo: list[tuple[str, str, float]] = []
        for run in runs:
            dag_id, run_id = str(run.get("dag_id")), str(run.get("dag_run_id"))
            end = parse_time(run.get("end_date"))
            if end is None or f"{dag_id}/{run_id}" in self.done:
                continue
            if end < self.started or self.not_provider.get(dag_id, 0.0) > now:
                self.done[f"{dag_id}/{run_id}"] = end
                continue
            todo.append((dag_id, run_id, end))
        if len(todo) > MAX_RUNS:
            _once.warning(
                "too-many",
                "gpu-dag plan error: %d finished runs to measure at once, more than %d: the oldest are not "
                "measured",
                len(todo),
                MAX_RUNS,
            )
            for dag_id, run_id, end in todo[:-MAX_RUNS]:
                self.done[f"{dag_id}/{run_id}"] = end
            todo = todo[-MAX_RUNS:]
        began, sent = self._timer(), 0
        left: list[float] = []
        for index, (dag_id, run_id, end) in enumerate(todo):
            if index > 0 and self._timer() - began >= self.budget:  # the rest at the next tick
                left = [e for _d, _r, e in todo[index:]]
                break
            self.done[f"{dag_id}/{run_id}"] = end
            sent += self._measure(dag_id, run_id, now)
        self.since = min([max([self.since, *self.done.values()]), *left])
        self.done = {k: e for k, e in self.done.items() if e >= self.since - MARGIN_S}
        return sent

    def _measure(self, dag_id: str, run_id: str, now: float) -> bool:
        try:
            report = self.report(dag_id, run_id)
        except ExplainError as err:
            if err.code == EXIT_NOT_PROVIDER:
                self.not_provider[dag_id] = now + NOT_PROVIDER_TTL
            else:
                _once.warning(f"report:{err.code}", "gpu-dag plan error of %s/%s: %s", dag_id, run_id, err)
            return False
        except Exception as err:
            _once.warning(
                f"report:{type(err).__name__}",
                "gpu-dag plan error of %s/%s not measured (%s)",
                dag_id,
                run_id,
                err,
            )
            return False
        if not self.pools.intersection(report.get("controller") or {}):
            return False
        error = report.get("plan_error")
        if not isinstance(error, Mapping) or not error.get("tasks"):
            return False
        metrics.plan_error(dag_id, error["start_error_s"], error["end_error_s"])
        self.sent.append((dag_id, run_id, error))
        return True
