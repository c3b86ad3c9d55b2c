"""Timeout fallback ladder: if a task cannot *start* in time, run a smaller or different variant.

A ladder is an ordered list of :class:`Rung` s, e.g. "8x a100; if not started within 20 min, 4x a100
with batch size 32 and gradient accumulation 2; if that is not started within 20 min either, 8x
h100; then fail". :func:`fallback_ladder` turns it into ordinary Airflow tasks inside a task group,
so the graph view shows every rung and which one ran::

    train = fallback_ladder(
        "train",
        [
            Rung("8x_a100", gpus=8, gpu_type="a100", start_within="20m", params={"bs": 64, "accum": 1}),
            Rung("4x_a100", gpus=4, gpu_type="a100", start_within="20m", params={"bs": 32, "accum": 2}),
            Rung("8x_h100", gpus=8, gpu_type="h100", start_within="20m", params={"bs": 64, "accum": 1}),
        ],
        lambda rung: BashOperator(
            task_id=rung.name,
            bash_command=f"python train.py --bs {rung.params['bs']} --accum {rung.params['accum']}",
        ),
    )
    prepare >> train >> evaluate          # evaluate gets train.output: the result of the rung that ran

Tasks of the group ``train`` (rung *i* = ``train.<name>``):

``train.<name>``
    the rung's work, built by your factory (any operator: bash, python, KubernetesPodOperator). Its
    pool and pool slots default to ``gpu_<type>`` / the GPU count, its ``executor_config`` gets the
    GPU hints.
``train.<name>_start_deadline``
    (rungs with ``start_within`` whose task waits in an Airflow pool) a sensor running beside the
    rung. It reads the rung's state through the Task SDK (no REST credentials).
    As soon as the rung is queued or running it succeeds; if the rung is still waiting for pool slots
    after ``start_within``, it marks the reason in XCom and skips the waiting rung (the Execution
    API's skip only touches task instances that are not running/finished, so a rung that started in
    the meantime is never skipped: no race), which takes it out of the pool queue.
``train.fallback_to_<next>``
    (trigger rule ``all_done``) decides from the rung's final state and the recorded reason: the
    rung did not start in time -> succeed, so the next rung (its downstream) runs; anything else
    (the rung succeeded, failed after it started, or never became ready) -> skip, so no later rung
    runs and the rung's own outcome decides the run.
``train.exhausted``
    the same decision after the last rung, except that "did not start" fails the task with the
    reasons of every rung: the DAG run fails truthfully.
``train.result``
    (trigger rule ``one_success``) returns the XCom result of the rung that succeeded and pushes
    ``rung`` (its name) under the key ``fallback_rung``. A rung that failed after starting makes it
    ``upstream_failed``, and the run fails.

"Not started within T" is detected in one of two ways:

- **waiting for an Airflow pool** (local hosts, Celery): the ``_start_deadline`` watcher above;
- **inside the task**: the task itself gives up waiting (e.g. Kubernetes: the pod was not scheduled
  within ``schedule_timeout_seconds``) and raises
  :class:`NotStartedInTime` after :func:`mark_not_started`. :class:`GpuKubernetesPodOperator
  <airflow_gpu_dag.operators.kubernetes.GpuKubernetesPodOperator>` does this, and the ladder sets
  its ``schedule_timeout_seconds`` to the rung's ``start_within``.

A GPU operator on a local host (``GpuBashOperator``, ``@task.gpu``) that has left its pool is started:
if it then waits for its device lease (devices held outside the pool) and the lease times out
(``lease_timeout``), that is a failure with retries, not "not started".

Only the "not started" outcome moves down the ladder: a rung that started and then crashed is a
real failure (its retries apply) and is not hidden by running a smaller variant.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, TaskGroup, TriggerRule
from airflow.sdk.bases.operator import DEFAULT_POOL_NAME
from airflow.sdk.definitions._internal.mixins import DependencyMixin

from airflow_gpu_dag.airflow.declaring import declaring_dag
from airflow_gpu_dag.contract import FallbackHint
from airflow_gpu_dag.core.model.pools import pool_for_gpu_type
from airflow_gpu_dag.core.model.resources import (
    EstimateError,
    GpuRequest,
    format_duration,
    parse_duration,
    parse_estimate,
)
from airflow_gpu_dag.executor_config import HINTS_KEY, gpu_hints, read_hints
from airflow_gpu_dag.operators.fallback import FallbackDecision, FallbackResult
from airflow_gpu_dag.operators.gpu_spec import building_rung
from airflow_gpu_dag.sensors.start_deadline import StartDeadlineSensor

if TYPE_CHECKING:
    from airflow.sdk.definitions.xcom_arg import XComArg

__all__ = [
    "FallbackError",
    "FallbackLadder",
    "Rung",
    "fallback_ladder",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]+\Z")


class FallbackError(ValueError):
    """A ladder that cannot work as written; the message names the ladder, the rung and the fix."""


@dataclass(frozen=True)
class Rung:
    """One variant of the work, tried in ladder order.

    :param name: task id of the rung inside the ladder's group (``[A-Za-z0-9_-]``).
    :param gpus: GPUs the rung needs (pool slots); None for a rung without GPUs.
    :param gpu_type: GPU type (``gpu_<type>`` pool, Kubernetes product affinity); None = any.
    :param start_within: how long the rung may wait to *start* (``"20m"``, seconds, timedelta);
        None: wait as long as it takes (only sensible on the last rung).
    :param params: arguments that change with the rung (batch size, gradient accumulation, ...),
        for the factory to use.
    :param duration: estimated run time, stored in the GPU hints (``"2h"``).
    :param pool: Airflow pool; default ``gpu_<type>`` / ``gpu_default`` when ``gpus`` is set.
    :param watch: add the ``_start_deadline`` watcher (pool waits). None = when ``start_within`` is
        set and the rung's task does not detect "not started" itself.
    """

    name: str
    gpus: int | None = None
    gpu_type: str | None = None
    start_within: float | str | datetime.timedelta | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    duration: float | str | datetime.timedelta | None = None
    pool: str | None = None
    watch: bool | None = None

    @property
    def start_within_seconds(self) -> float | None:
        """``start_within`` in seconds (None when unset)."""
        return None if self.start_within is None else parse_duration(self.start_within)

    @property
    def pool_name(self) -> str | None:
        """The rung's Airflow pool (explicit, or derived from the GPU type when it needs GPUs)."""
        if self.pool:
            return self.pool
        return pool_for_gpu_type(self.gpu_type) if self.gpus else None

    def describe(self) -> str:
        """``8x a100 (start within 20m)``."""
        text = GpuRequest(int(self.gpus), None, self.gpu_type).describe() if self.gpus else self.name
        if self.start_within is not None:
            text += f" (start within {format_duration(parse_duration(self.start_within))})"
        return text


def _zero_duration_hints(executor_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Control tasks of the ladder take no time and no GPU in the plan."""
    return gpu_hints(duration=0, executor_config=executor_config)


class FallbackLadder(DependencyMixin):
    """The tasks of one ladder; ``upstream >> ladder >> downstream`` wires its entry and result.

    :ivar group: the task group.
    :ivar rung_tasks: the rungs' operators, in order.
    :ivar watchers: the ``_start_deadline`` sensor of each rung (None where there is none).
    :ivar decisions: ``fallback_to_<next>`` for each rung but the last, then ``exhausted``.
    :ivar result: the join; :attr:`output` is its XCom result.
    """

    def __init__(
        self,
        group: TaskGroup,
        rungs: Sequence[Rung],
        rung_tasks: Sequence[BaseOperator],
        watchers: Sequence[StartDeadlineSensor | None],
        decisions: Sequence[FallbackDecision],
        result: FallbackResult,
    ) -> None:
        self.group = group
        self.rungs = list(rungs)
        self.rung_tasks = list(rung_tasks)
        self.watchers = list(watchers)
        self.decisions = list(decisions)
        self.result = result

    @property
    def exhausted(self) -> FallbackDecision:
        """The final decision (fails when no rung could start)."""
        return self.decisions[-1]

    @property
    def output(self) -> XComArg:
        """The result of the rung that ran (``XComArg`` of :attr:`result`)."""
        return self.result.output

    @property
    def roots(self) -> list[BaseOperator]:
        first = [self.rung_tasks[0]]
        if self.watchers[0] is not None:
            first.append(self.watchers[0])
        return first

    @property
    def leaves(self) -> list[BaseOperator]:
        return [self.result]

    def set_upstream(self, other: Any, edge_modifier: Any = None) -> None:
        for root in self.roots:
            root.set_upstream(other, edge_modifier=edge_modifier)

    def set_downstream(self, other: Any, edge_modifier: Any = None) -> None:
        self.result.set_downstream(other, edge_modifier=edge_modifier)

    def update_relative(self, other: Any, upstream: bool = True, edge_modifier: Any = None) -> None:
        """No-op (required by ``DependencyMixin``)."""


def _apply_rung_defaults(
    ladder_id: str,
    rung: Rung,
    task: BaseOperator,
    index: int,
    rungs: Sequence[Rung],
    assumed: int,
    watched: bool,
) -> None:
    """Pool, pool slots, GPU hints and (Kubernetes) the schedule timeout of a rung's task. The hints
    record the rung's place in the ladder, whether a watcher skips it (``watched``) and the rung the
    plan assumes (``plan_rung``): the plan counts that rung's estimate, the ``start_within`` of the
    rungs before it, and 0 for the rungs after it (they run only when it could not start)."""
    if rung.gpus and task.pool == DEFAULT_POOL_NAME:
        task.pool = rung.pool_name  # type: ignore[assignment]
    elif rung.pool and task.pool == DEFAULT_POOL_NAME:
        task.pool = rung.pool
    if rung.gpus and task.pool_slots == 1:  # what the factory did not set: one slot per GPU
        task.pool_slots = int(rung.gpus)
    existing = read_hints(task.executor_config)
    ours = read_hints(gpu_hints(duration=rung.duration, gpus=rung.gpus, gpu_type=rung.gpu_type))
    config = dict(task.executor_config or {})
    place = FallbackHint(
        ladder=ladder_id,
        rung=rung.name,
        index=index,
        rungs=len(rungs),
        assumed_index=assumed,
        assumed_rung=rungs[assumed].name,
        start_within_s=rung.start_within_seconds,
        watched=watched,
    )
    config[HINTS_KEY] = {**ours, **existing, "fallback": place.to_wire()}
    task.executor_config = config
    seconds = rung.start_within_seconds
    if (
        seconds is not None
        and getattr(task, "reports_not_started", False)
        and hasattr(task, "schedule_timeout_seconds")
    ):
        task.schedule_timeout_seconds = max(1, int(seconds))  # type: ignore[attr-defined]


def _ladder_where(group_id: str) -> str:
    """How a ladder's errors name it: the group id and, inside a ``with DAG(...)`` block, the DAG."""
    dag_id = getattr(declaring_dag({}), "dag_id", None)
    return f"fallback ladder {group_id!r} in DAG {dag_id!r}" if dag_id else f"fallback ladder {group_id!r}"


def _check_rungs(group_id: str, rungs: Sequence[Rung]) -> None:
    where = _ladder_where(group_id)
    if not rungs:
        raise FallbackError(f"{where} has no rungs; give at least one Rung(...)")
    for index, rung in enumerate(rungs):  # before their names are read below
        if not isinstance(rung, Rung):
            raise FallbackError(f"{where}: rung {index} is {type(rung).__name__}, not a Rung(...)")
    # the ids of the ladder's own tasks in the group: a rung of that name would collide with one
    control = {"result", "exhausted", *(f"fallback_to_{r.name}" for r in rungs[1:])}
    control.update(f"{r.name}_start_deadline" for r in rungs if r.start_within is not None)
    seen: set[str] = set()
    for rung in rungs:
        if not _NAME.match(rung.name or ""):
            raise FallbackError(
                f"{where}: rung name {rung.name!r} must match [A-Za-z0-9_-]+ (it is a task id)"
            )
        if rung.name in seen:
            raise FallbackError(f"{where}: two rungs are named {rung.name!r}; names must be unique")
        if rung.name in control:
            raise FallbackError(
                f"{where}: rung name {rung.name!r} is the id of one of the ladder's own tasks (result, "
                "exhausted, fallback_to_<rung>, <rung>_start_deadline); rename the rung"
            )
        seen.add(rung.name)
        try:
            if rung.gpus is not None:
                GpuRequest.parse(rung.gpus, None, rung.gpu_type)
            seconds = rung.start_within_seconds
            if rung.duration is not None:
                parse_estimate(rung.duration)
        except EstimateError as err:
            raise FallbackError(f"{where}, rung {rung.name!r}: {err}") from None
        if seconds is not None and seconds <= 0:
            raise FallbackError(
                f"{where}, rung {rung.name!r}: start_within must be > 0, e.g. start_within='20m'"
            )


def fallback_ladder(
    group_id: str,
    rungs: Sequence[Rung],
    factory: Callable[[Rung], BaseOperator],
    *,
    poke_interval: float = 10,
    watch_mode: str = "poke",
    tooltip: str | None = None,
    plan_rung: str | None = None,
) -> FallbackLadder:
    """Build a fallback ladder (see the module docstring) in the current DAG.

    :param group_id: task group id (``train``); tasks are ``train.<rung name>`` etc.
    :param rungs: the variants in order of preference.
    :param factory: builds the rung's operator; must use ``task_id=rung.name`` (any operator).
    :param poke_interval: seconds between checks of the start-deadline watchers.
    :param watch_mode: the watchers' sensor mode, ``"poke"`` (default) or ``"reschedule"`` (see
        :class:`StartDeadlineSensor`).
    :param plan_rung: the rung the plan and the critical-path page assume runs (default: the first);
        the rungs before it count their ``start_within``, the ones after it 0.
    :raises FallbackError: the ladder cannot work as written (the message says how to fix it).
    """
    _check_rungs(group_id, rungs)
    where = _ladder_where(group_id)
    if watch_mode not in ("poke", "reschedule"):
        raise FallbackError(
            f"{where}: watch_mode={watch_mode!r} is not a sensor mode; use 'poke' (default) or 'reschedule'"
        )
    names = [r.name for r in rungs]
    if plan_rung is not None and plan_rung not in names:
        raise FallbackError(f"{where}: plan_rung={plan_rung!r} is not one of its rungs ({', '.join(names)})")
    assumed = names.index(plan_rung) if plan_rung is not None else 0
    rung_tasks: list[BaseOperator] = []
    watchers: list[StartDeadlineSensor | None] = []
    decisions: list[FallbackDecision] = []
    with TaskGroup(
        group_id, tooltip=tooltip or f"fallback ladder: {' -> '.join(r.name for r in rungs)}"
    ) as group:
        ladder_id = group.group_id or group_id  # inside another group: "outer.train" (the plan's key)
        for index, rung in enumerate(rungs):
            place = {
                "ladder": ladder_id,
                "rung": rung.name,
                "index": index,
                "rungs": len(rungs),
                "start_within_s": rung.start_within_seconds,
            }
            # a rung that can never start only warns (the ladder moves on), if a watcher skips it
            with building_rung(place) as never_starts:
                task = factory(rung)
            if not isinstance(task, BaseOperator):
                raise FallbackError(
                    f"{where}, rung {rung.name!r}: the factory returned {type(task).__name__}; it must "
                    "return one operator (not a mapped task, not a list)"
                )
            expected = f"{group.group_id}.{rung.name}" if group.prefix_group_id else rung.name
            if task.task_id != expected:
                raise FallbackError(
                    f"{where}: the factory built task {task.task_id!r} for rung {rung.name!r}; create it "
                    f"with task_id=rung.name inside the factory"
                )
            detects_itself = bool(getattr(task, "reports_not_started", False))
            watch = (
                rung.watch
                if rung.watch is not None
                else (rung.start_within is not None and not detects_itself)
            )
            _apply_rung_defaults(ladder_id, rung, task, index, rungs, assumed, watch)
            if index > 0:  # its only upstream is the decision: run only when that falls back to it
                task.trigger_rule = TriggerRule.ALL_SUCCESS
            if watch and rung.start_within is None:
                raise FallbackError(f"{where}, rung {rung.name!r}: watch=True needs start_within, e.g. '20m'")
            if never_starts and not watch:
                raise FallbackError(
                    f"{where}, rung {rung.name!r} can never start ({never_starts[0]}) and detects 'not "
                    "started' only once it runs, so it would wait for its pool forever; set watch=True (a "
                    "watcher skips it after start_within), or drop the rung"
                )
            if index < len(rungs) - 1 and rung.start_within is None and not detects_itself:
                raise FallbackError(
                    f"{where}, rung {rung.name!r} has no start_within, so the ladder could never fall back "
                    "from it; set start_within='20m' (or make it the last rung)"
                )
            watcher = (
                StartDeadlineSensor(
                    task_id=f"{rung.name}_start_deadline",
                    watched_task_id=task.task_id,
                    start_within=rung.start_within,  # type: ignore[arg-type]
                    poke_interval=poke_interval,
                    mode=watch_mode,
                    trigger_rule=task.trigger_rule,  # same upstream as the rung: runs when it runs
                    executor_config=_zero_duration_hints(),
                    doc_md=f"Skips `{rung.name}` if it has not started within {rung.start_within}.",
                )
                if watch
                else None
            )
            if index > 0:
                decisions[-1] >> [t for t in (task, watcher) if t is not None]
            following = rungs[index + 1].name if index + 1 < len(rungs) else None
            decision = FallbackDecision(
                task_id=f"fallback_to_{following}" if following else "exhausted",
                rung_task_id=task.task_id,
                watcher_task_id=watcher.task_id if watcher else None,
                next_rung=following,
                executor_config=_zero_duration_hints(),
            )
            [t for t in (task, watcher) if t is not None] >> decision
            rung_tasks.append(task)
            watchers.append(watcher)
            decisions.append(decision)
        ladder_pairs = [
            (t.task_id, w.task_id if w is not None else None)
            for t, w in zip(rung_tasks, watchers, strict=True)
        ]
        decisions[-1].ladder = ladder_pairs
        result = FallbackResult(
            task_id="result",
            rung_task_ids=[t.task_id for t in rung_tasks],
            executor_config=_zero_duration_hints(),
        )
        rung_tasks >> result
    return FallbackLadder(group, rungs, rung_tasks, watchers, decisions, result)
