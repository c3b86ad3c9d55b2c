"""What ``airflow gpu-dag explain`` knows about one DAG run, read from the live state over the REST API.

:func:`build_report` reads the run, its DAG's tasks and task instances, the pools its GPU tasks wait in
(with the watermark controller's latest decision, kept in each pool's state,
:mod:`airflow_gpu_dag.pool_claim.state`),
the task instances waiting in and holding those pools across every DAG, and the durations learned from
past runs (:class:`~airflow_gpu_dag.watermark.durations.ControllerHistory`, as the controller learns
them), and returns a JSON-ready report:

* for each GPU task instance of the run that has not finished: its state, its key and rank in its
  pool's queue, the tasks ahead of it, the controller's decision that concerns it
  (:func:`airflow_gpu_dag.core.policy.reasons.for_task`) and its predicted start and end
  (:func:`airflow_gpu_dag.core.simulation.live.predict_live`);
* for each finished one: its planned start and end (the run's plan,
  :func:`~airflow_gpu_dag.core.simulation.live.plan_run`) against what happened, and where the difference
  came from (:func:`~airflow_gpu_dag.core.simulation.live.compare_run`); for a finished run, the
  median and 90th percentile of the errors.

Problems the person asking must act on are :class:`ExplainError` with the exit code of
:data:`EXIT_CODES` (docs/cli.md, "explain").
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from airflow_gpu_dag.core.model.pools import is_gpu_pool
from airflow_gpu_dag.core.policy.objective import DEFAULT_EPOCH, ReservationGate, key_of_weight
from airflow_gpu_dag.core.policy.reasons import CODES, Reason, for_task
from airflow_gpu_dag.core.simulation.live import (
    CAUSES,
    DoneTask,
    LiveTask,
    PoolUse,
    Predicted,
    compare_run,
    error_summary,
    plan_run,
    predict_live,
)
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.hooks.rest_client import RestError, parse_time
from airflow_gpu_dag.pool_claim.state import PoolState, iso_time, parse_pool_state
from airflow_gpu_dag.watermark import task_instance_fields as fields

__all__ = [
    "EXIT_API",
    "EXIT_CODES",
    "EXIT_NOT_FOUND",
    "EXIT_NOT_PROVIDER",
    "EXIT_NO_CONTROLLER",
    "EXIT_OK",
    "ExplainError",
    "build_report",
]

EXIT_OK = 0
EXIT_NOT_FOUND = 3
EXIT_API = 4
EXIT_NOT_PROVIDER = 5
EXIT_NO_CONTROLLER = 6
#: Exit code -> what it means (docs/cli.md lists the same; 2 is argparse's usage error).
EXIT_CODES: Mapping[int, str] = {
    EXIT_OK: "explained",
    EXIT_NOT_FOUND: "the DAG, the run or the task does not exist (or the API user may not read it)",
    EXIT_API: "the api-server cannot be reached, or refused the connection's login",
    EXIT_NOT_PROVIDER: "the DAG does not use the provider (no weight rule of ours, or no GPU task)",
    EXIT_NO_CONTROLLER: "explained, but a GPU pool the run waits in has no live watermark controller",
}

#: Task instance states that are over.
FINISHED = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
#: States holding slots of their pool.
HOLDING = frozenset({"queued", "running"})
#: How many tasks ahead of a waiting task are listed.
AHEAD_SHOWN = 5
#: The module path of the provider's weight rules (``weight_rule`` as the REST API shows it).
PROVIDER_RULES = "airflow_gpu_dag.priority_strategy."


class ExplainError(Exception):
    """A question ``explain`` cannot answer, with the message that says why and what to do, and the
    exit code scripts rely on (:data:`EXIT_CODES`)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else iso_time(epoch)


def _api_error(err: RestError, what: str) -> ExplainError:
    if err.status is None:
        why = f"cannot reach the api-server ({err})"
        fix = "Start it, or fix the host of the connection (--conn-id, docs/connections.md)"
    elif err.status in (401, 403):
        why = f"the api-server refused the connection's login (HTTP {err.status})"
        fix = "Fix the login/password or token of the connection (--conn-id, docs/connections.md)"
    else:
        why = f"the api-server answered an error ({err})"
        fix = "Check the api-server's log"
    return ExplainError(f"{what}: {why}. {fix}.", EXIT_API)


def _get(client: Any, path: str, what: str) -> dict[str, Any] | None:
    """``GET /api/v2{path}`` as a JSON object; None for a 404. :raises ExplainError: anything else."""
    try:
        response = client.request("GET", path)
    except RestError as err:
        raise _api_error(err, what) from None
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise _api_error(
            RestError(f"GET /api/v2{path}: HTTP {response.status_code}", response.status_code), what
        )
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ExplainError(f"{what}: GET /api/v2{path} did not answer a JSON object", EXIT_API)
    return body


def _call(what: str, function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except RestError as err:
        raise _api_error(err, what) from None


def _gpus(ti: Mapping[str, Any]) -> int:
    value = read_hints(ti.get("executor_config")).get("gpus")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class _Pool:
    """A pool the run's GPU tasks use: its size now, its capacity (the watermark ``C`` when a
    controller manages it, else its size) and the controller's state (None: never managed)."""

    name: str
    size: int | None
    capacity: int | None
    state: PoolState | None

    def controller(self, now: float) -> str:
        """``running`` (a live claim), ``stale`` (its claim lapsed: no tick for longer than its lease),
        ``stopped`` (released, or failed open by the scheduler's watchdog), ``absent`` (never managed)."""
        if self.state is None:
            return "absent"
        if self.state.expires is None:
            return "stopped"
        return "running" if self.state.claimed(now) else "stale"


def _pool(client: Any, name: str) -> _Pool:
    pool = _call(f"pool {name}", client.get_pool, name)
    if not isinstance(pool, dict):
        return _Pool(name, None, None, None)
    slots = pool.get("slots")
    size = slots if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 0 else None
    state = parse_pool_state(pool.get("description"))
    capacity = state.capacity if state is not None and state.capacity is not None else size
    return _Pool(name, size, capacity, state)


def _controller_text(pool: _Pool, now: float) -> str:
    status = pool.controller(now)
    state = pool.state
    if status == "running":
        return f"pool {pool.name}: a watermark controller decides its size ({state.holder if state else '?'})"
    if status == "stale" and state is not None:
        lapsed = _iso(state.expires)
        return (
            f"pool {pool.name}: its watermark controller ({state.holder or '?'}) has not ticked since its "
            f"claim lapsed at {lapsed}; the scheduler's watchdog opens the pool to its capacity, and no "
            "slots are held for wide tasks. Start the controller (airflow gpu-dag watermark --config ...) "
            "or check why it stopped (airflow gpu-dag watermark-health)"
        )
    if status == "stopped":
        return (
            f"pool {pool.name}: no watermark controller runs (it stopped, or the pool failed open): Airflow "
            "admits its tasks alone and holds no slots for wide tasks. Start it: airflow gpu-dag watermark"
        )
    return (
        f"pool {pool.name}: no watermark controller has ever managed it: Airflow admits its tasks alone. "
        "To hold slots for wide tasks, run airflow gpu-dag watermark (docs/watermarks.md)"
    )


class _Durations:
    """Durations learned from past runs (the controller's way), or fixed ones in tests."""

    def __init__(self, history: Any) -> None:
        self.history = history

    def duration(self, ti: Mapping[str, Any]) -> float:
        return float(self.history.duration(ti))

    def remaining(self, ti: Mapping[str, Any], now: float) -> float:
        return max(0.0, float(self.history.expected_end(ti, now)) - now)


def _run(client: Any, dag_id: str, run_id: str | None) -> dict[str, Any]:
    what = f"DAG {dag_id!r}"
    if _get(client, f"/dags/{quote(dag_id, safe='')}", what) is None:
        raise ExplainError(
            f"DAG {dag_id!r} does not exist, or the API user may not read it. List the DAGs: airflow dags "
            "list",
            EXIT_NOT_FOUND,
        )
    if run_id is None:
        runs = _call(what, client.recent_runs, dag_id, 1)
        if not runs:
            raise ExplainError(
                f"DAG {dag_id!r} has no runs yet: nothing to explain. Trigger one: airflow dags trigger "
                f"{dag_id}",
                EXIT_NOT_FOUND,
            )
        return dict(runs[0])
    run = _get(client, f"/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}", what)
    if run is None:
        latest = [str(r.get("dag_run_id")) for r in _call(what, client.recent_runs, dag_id, 3)]
        hint = f" Its latest runs: {', '.join(latest)}." if latest else " It has no runs."
        raise ExplainError(f"DAG {dag_id!r} has no run {run_id!r}.{hint}", EXIT_NOT_FOUND)
    return run


def _check_provider(dag_id: str, tasks: Mapping[str, Mapping[str, Any]]) -> None:
    rules = {str(t.get("weight_rule")) for t in tasks.values()}
    if not any(PROVIDER_RULES in rule for rule in rules):
        shown = ", ".join(sorted(rules)) or "none"
        raise ExplainError(
            f"DAG {dag_id!r} does not use the provider's weight rule (its tasks use: {shown}), so its "
            "priority weights are not the cross-DAG keys explain ranks and predicts with. Give the DAG "
            "default_args={'weight_rule': CRITICAL_PATH_WEIGHT_RULE} "
            "(from airflow_gpu_dag.priority_strategy; docs/priority.md)",
            EXIT_NOT_PROVIDER,
        )


def _upstream(tasks: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    upstream: dict[str, list[str]] = {task_id: [] for task_id in tasks}
    for task_id, task in tasks.items():
        for down in task.get("downstream_task_ids") or []:
            upstream.setdefault(str(down), []).append(task_id)
    return upstream


def _order(ti: Mapping[str, Any]) -> tuple:
    return (-fields.priority(ti), fields.order(ti), fields.key(ti))


def _ahead_entry(ti: Mapping[str, Any], epoch: float) -> dict[str, Any]:
    weight = fields.priority(ti)
    return {
        "task": fields.key(ti),
        "run": f"{ti.get('dag_id')}/{ti.get('dag_run_id')}",
        "priority_weight": weight,
        "key": _iso(key_of_weight(weight, epoch)),
        "slots": fields.slots(ti),
    }


def build_report(
    client: Any,
    dag_id: str,
    run_id: str | None = None,
    task_id: str | None = None,
    *,
    history: Any,
    now: float | None = None,
    gate: ReservationGate | None = None,
    epoch: float = DEFAULT_EPOCH,
) -> dict[str, Any]:
    """The report on one run (the DAG's latest when ``run_id`` is None), or on one of its tasks.

    ``history``: what durations are learned from (``duration(ti)``, ``expected_end(ti, now)``, as
    :class:`~airflow_gpu_dag.watermark.durations.ControllerHistory`); ``gate``: the objective's
    reservation gate the controller applies; ``epoch``: ``[gpu_dag] key_epoch``.

    :raises ExplainError: the DAG, run or task does not exist, the DAG does not use the provider, or
        the api-server cannot be reached.
    """
    now = time.time() if now is None else now
    durations = _Durations(history)
    run = _run(client, dag_id, run_id)
    run_id = str(run.get("dag_run_id"))
    tasks = {str(t["task_id"]): t for t in _call(f"DAG {dag_id!r}", client.dag_tasks, dag_id)}
    if task_id is not None and task_id not in tasks:
        close = difflib.get_close_matches(task_id, list(tasks), n=3)
        hint = (
            f" Did you mean {', '.join(close)}?" if close else f" Its tasks: {', '.join(sorted(tasks)[:10])}."
        )
        raise ExplainError(f"DAG {dag_id!r} has no task {task_id!r}.{hint}", EXIT_NOT_FOUND)
    _check_provider(dag_id, tasks)
    tis = [dict(ti) for ti in _call(f"run {run_id!r}", client.run_task_instances, dag_id, run_id)]
    pools = {name: _pool(client, name) for name in sorted({str(ti.get("pool")) for ti in tis})}

    def is_gpu(ti: Mapping[str, Any]) -> bool:
        pool = pools[str(ti.get("pool"))]
        return pool.state is not None or is_gpu_pool(pool.name) or _gpus(ti) > 0

    gpu_tis = [ti for ti in tis if is_gpu(ti)]
    if not gpu_tis:
        raise ExplainError(
            f"run {run_id!r} of DAG {dag_id!r} has no GPU task (none in a pool a watermark controller "
            "manages, in a gpu_* pool, or with gpu_hints(gpus=...)): explain has nothing to say about it",
            EXIT_NOT_PROVIDER,
        )
    gpu_pools = {str(ti.get("pool")): pools[str(ti.get("pool"))] for ti in gpu_tis}
    capacity = {name: p.capacity for name, p in gpu_pools.items() if p.capacity is not None}
    managed = [p for p in gpu_pools.values() if p.controller(now) == "running" and p.state is not None]
    interval = max((p.state.interval or 0.0 for p in managed if p.state is not None), default=0.0)
    last_tick = next((p.state.why.at for p in managed if p.state is not None and p.state.why), None)
    reservation = bool(managed)
    upstream = _upstream(tasks)
    keys_of: dict[str, list[str]] = {}
    for ti in tis:
        keys_of.setdefault(str(ti.get("task_id")), []).append(fields.key(ti))
    run_key = f"{dag_id}/{run_id}"

    def upstream_keys(ti: Mapping[str, Any], done: set[str] | None = None) -> tuple[str, ...]:
        ups = (k for u in upstream.get(str(ti.get("task_id")), []) for k in keys_of.get(u, []))
        return tuple(k for k in ups if done is None or k not in done)

    state_of = {fields.key(ti): str(ti.get("state") or "none") for ti in tis}
    finished = {k for k, s in state_of.items() if s in FINISHED}
    selected = [ti for ti in gpu_tis if task_id is None or ti.get("task_id") == task_id]
    report: dict[str, Any] = {
        "dag_id": dag_id,
        "run_id": run_id,
        "run_state": run.get("state"),
        "now": now,
        "controller": {
            name: {
                "status": p.controller(now),
                "capacity": p.capacity,
                "size": p.size,
                "interval": p.state.interval if p.state else None,
                "decision": None if p.state is None or p.state.why is None else _decision(p.state.why),
                "claim_expires": _iso(p.state.expires) if p.state else None,
                "message": _controller_text(p, now),
            }
            for name, p in gpu_pools.items()
        },
        "tasks": [],
        "warnings": [],
    }

    # -- the plan of the run: its tasks alone, from its start, with the learned durations ----------------
    origin = parse_time(run.get("start_date")) or parse_time(run.get("queued_at")) or now
    plan_tasks = [
        LiveTask(
            fields.key(ti),
            run_key,
            str(ti.get("pool")),
            fields.slots(ti),
            fields.priority(ti),
            durations.duration(ti),
            "later",
            upstream_keys(ti),
            fields.order(ti),
        )
        for ti in tis
        if state_of[fields.key(ti)] not in ("skipped", "upstream_failed", "removed")
    ]
    plan = plan_run(origin, plan_tasks, capacity, interval=interval, reservation=reservation, gate=gate)

    # -- the live state: what holds and waits in the run's GPU pools, and the rest of this run ----------
    live_entries: list[dict[str, Any]] = []
    unfinished = [ti for ti in selected if state_of[fields.key(ti)] not in FINISHED]
    if unfinished:
        queue = _call(
            "the GPU pools' task instances",
            client.task_instances,
            sorted(gpu_pools),
            ("scheduled", *sorted(HOLDING)),
        )
        live = _live_tasks(queue, tis, run_key, now, durations, upstream_keys, finished)
        predicted = predict_live(
            now, live, capacity, interval=interval, last_tick=last_tick, reservation=reservation, gate=gate
        )
        waiting_by_pool: dict[str, list[dict[str, Any]]] = {}
        for ti in queue:
            if ti.get("state") == "scheduled":
                waiting_by_pool.setdefault(str(ti.get("pool")), []).append(ti)
        for name in waiting_by_pool:
            waiting_by_pool[name].sort(key=_order)
        for ti in unfinished:
            live_entries.append(
                _live_entry(ti, state_of, waiting_by_pool, gpu_pools, predicted, plan, now, epoch, durations)
            )
        stale = [p for p in gpu_pools.values() if p.controller(now) != "running"]
        report["warnings"] = [_controller_text(p, now) for p in stale]

    # -- the finished tasks against the plan -------------------------------------------------------------
    done = [ti for ti in selected if state_of[fields.key(ti)] in FINISHED and ti.get("start_date")]
    done_entries: list[dict[str, Any]] = []
    if done:
        uses = _pool_uses(client, gpu_pools, tis, origin, now)
        done_tasks = []
        for ti in done:
            start, end = parse_time(ti.get("start_date")), parse_time(ti.get("end_date"))
            if start is None or end is None:
                continue
            done_tasks.append(
                DoneTask(
                    fields.key(ti),
                    str(ti.get("pool")),
                    fields.slots(ti),
                    fields.priority(ti),
                    durations.duration(ti),
                    start,
                    end,
                    upstream_keys(ti),
                    fields.order(ti),
                )
            )
        comparisons = compare_run(origin, done_tasks, plan, capacity, uses)
        by_key = {fields.key(ti): ti for ti in done}
        for comparison in comparisons:
            done_entries.append(_done_entry(by_key[comparison.key], comparison, epoch))
        if run.get("state") in ("success", "failed") and task_id is None:
            report["plan_error"] = error_summary(comparisons)
    report["tasks"] = sorted(
        live_entries + done_entries,
        key=lambda e: (e.get("start") or e.get("predicted_start") or float("inf"), e["task"]),
    )
    return report


def _decision(why: Reason) -> dict[str, Any]:
    """A pool's decision as the report shows it."""
    return {
        "code": why.code,
        "meaning": CODES.get(why.code, ""),
        "reserved_for": why.task if why.holds else None,
        "slots": why.slots,
        "until": _iso(why.until),
        "at": _iso(why.at),
    }


def _live_tasks(
    queue: Sequence[Mapping[str, Any]],
    tis: Sequence[Mapping[str, Any]],
    run_key: str,
    now: float,
    durations: _Durations,
    upstream_keys: Any,
    finished: set[str],
) -> list[LiveTask]:
    """The simulation's input: every task instance holding or waiting in the GPU pools (any run), and
    every unfinished task instance of this run (after its unfinished upstream tasks)."""
    live: dict[str, LiveTask] = {}
    for ti in queue:
        key = fields.key(ti)
        holding = ti.get("state") in HOLDING
        run = f"{ti.get('dag_id')}/{ti.get('dag_run_id')}"
        duration = durations.remaining(ti, now) if holding else durations.duration(ti)
        state = "holding" if holding else "waiting"
        live[key] = LiveTask(
            key,
            run,
            str(ti.get("pool")),
            fields.slots(ti),
            fields.priority(ti),
            duration,
            state,
            (),
            fields.order(ti),
        )
    for ti in tis:
        key = fields.key(ti)
        state = str(ti.get("state") or "none")
        if state in FINISHED or key in live:
            continue
        holding = state in HOLDING
        duration = durations.remaining(ti, now) if holding else durations.duration(ti)
        live[key] = LiveTask(
            key,
            run_key,
            str(ti.get("pool")),
            fields.slots(ti),
            fields.priority(ti),
            duration,
            "holding" if holding else ("waiting" if state == "scheduled" else "later"),
            () if holding or state == "scheduled" else upstream_keys(ti, finished),
            fields.order(ti),
        )
    return list(live.values())


def _live_entry(
    ti: Mapping[str, Any],
    state_of: Mapping[str, str],
    waiting_by_pool: Mapping[str, list[dict[str, Any]]],
    pools: Mapping[str, _Pool],
    predicted: Mapping[str, Predicted],
    plan: Mapping[str, Predicted],
    now: float,
    epoch: float,
    durations: _Durations,
) -> dict[str, Any]:
    key = fields.key(ti)
    pool_name = str(ti.get("pool"))
    pool = pools[pool_name]
    weight = fields.priority(ti)
    state = state_of[key]
    queue = waiting_by_pool.get(pool_name, [])
    mine = _order(ti)
    # only a task waiting for slots has tasks ahead of it (a running one holds its slots already)
    waits = state == "scheduled"
    ahead = [other for other in queue if waits and _order(other) < mine and fields.key(other) != key]
    entry: dict[str, Any] = {
        "task": key,
        "task_id": ti.get("task_id"),
        "map_index": fields.as_int(ti.get("map_index"), -1, -1, fields.INT32_MAX),
        "state": state,
        "pool": pool_name,
        "slots": fields.slots(ti),
        "priority_weight": weight,
        "key": _iso(key_of_weight(weight, epoch)),
        "rank": len(ahead) + 1 if state == "scheduled" else None,
        "queue_length": len(queue),
        "ahead_count": len(ahead),
        "ahead": [_ahead_entry(other, epoch) for other in ahead[:AHEAD_SHOWN]],
        "reason": None,
        "start": parse_time(ti.get("start_date")) if state in HOLDING else None,
        "predicted_start": None,
        "predicted_end": None,
        "planned_start": plan[key].start if key in plan else None,
        "planned_end": plan[key].end if key in plan else None,
    }
    if state in HOLDING:
        entry["reason"] = {
            "code": state,
            "text": f"{state}: it holds {fields.slots(ti)} slot(s) of pool {pool_name}",
        }
        entry["predicted_start"] = entry["start"]
        entry["predicted_end"] = now + durations.remaining(ti, now)
    else:
        why = pool.state.why if pool.state is not None and pool.controller(now) == "running" else None
        if state != "scheduled":
            entry["reason"] = {"code": "not-ready", "text": f"{state}: {_NOT_READY.get(state, _UPSTREAM)}"}
        elif why is not None:
            reason = for_task(why, key, now)
            entry["reason"] = {"code": reason.code, "text": reason.text}
        else:
            text = (
                f"waiting for free slots of pool {pool_name} ({len(ahead)} task(s) ahead); no watermark "
                "controller decides this pool now"
            )
            entry["reason"] = {"code": "waiting-for-slots", "text": text}
        if why is not None:
            entry["decision"] = _decision(why)
        guess = predicted.get(key)
        if guess is not None:
            entry["predicted_start"], entry["predicted_end"] = guess.start, guess.end
        elif pool.capacity is None or fields.slots(ti) > pool.capacity:
            entry["reason"]["text"] += (
                f"; it needs more slots than pool {pool_name} has ({pool.capacity}): it never starts"
            )
        else:
            entry["reason"]["text"] += (
                "; it comes after a task that needs more slots than its pool has: it never starts"
            )
    return entry


#: Why a task that is not SCHEDULED yet waits, by state (else: its upstream tasks).
_UPSTREAM = "not ready yet (its upstream tasks have not all ended)"
_NOT_READY = {
    "up_for_retry": "not ready yet (it failed and waits for its retry delay)",
    "up_for_reschedule": "not ready yet (a sensor waiting for its next poke)",
    "deferred": "not ready yet (deferred: its trigger has not fired)",
}


def _done_entry(ti: Mapping[str, Any], comparison: Any, epoch: float) -> dict[str, Any]:
    cause = comparison.main_cause
    weight = fields.priority(ti)
    return {
        "task": comparison.key,
        "task_id": ti.get("task_id"),
        "map_index": fields.as_int(ti.get("map_index"), -1, -1, fields.INT32_MAX),
        "state": ti.get("state"),
        "pool": ti.get("pool"),
        "slots": fields.slots(ti),
        "priority_weight": weight,
        "key": _iso(key_of_weight(weight, epoch)),
        "planned_start": comparison.planned_start,
        "planned_end": comparison.planned_end,
        "start": comparison.start,
        "end": comparison.end,
        "start_error_s": comparison.start_error,
        "end_error_s": comparison.end_error,
        "causes": {name: round(seconds, 3) for name, seconds in comparison.causes.items()},
        "main_cause": cause,
        "reason": {
            "code": cause or "as-planned",
            "text": CAUSES[cause] if cause else "it started as planned (within a second)",
        },
    }


def _pool_uses(
    client: Any, pools: Mapping[str, _Pool], tis: Sequence[Mapping[str, Any]], origin: float, now: float
) -> dict[str, list[PoolUse]]:
    """The task instances of each GPU pool that ran while the run did (any DAG), for the wait's causes."""
    ends = [parse_time(ti.get("end_date")) for ti in tis]
    until = max([e for e in ends if e is not None], default=now)
    since_iso = datetime.fromtimestamp(origin, UTC).isoformat()
    until_iso = datetime.fromtimestamp(until, UTC).isoformat()
    out: dict[str, list[PoolUse]] = {}
    for name in pools:
        params = [("pool", name), ("start_date_lte", until_iso), ("end_date_gte", since_iso)]
        rows = _call(
            f"pool {name}", client.pages, "/dags/~/dagRuns/~/taskInstances", "task_instances", params
        )
        out[name] = [
            PoolUse(
                fields.key(row),
                name,
                fields.slots(row),
                fields.priority(row),
                parse_time(row.get("start_date")),
                parse_time(row.get("end_date")),
                fields.scheduled_time(row),
            )
            for row in rows
        ]
    return out
