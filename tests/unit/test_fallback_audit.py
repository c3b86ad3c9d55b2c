"""Fallback ladder audit: trigger rules the ladder must own, ladders in nested and expanded task
groups. ``dag.test()`` ignores pools, so the rungs here report "not started" themselves (as
GpuKubernetesPodOperator does); the watcher is tested with a fake Task SDK context."""

from __future__ import annotations

import datetime
import textwrap
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, TaskGroup
from airflow.sdk.exceptions import DownstreamTasksSkipped

from airflow_gpu_dag.authoring.fallback import Rung, fallback_ladder
from airflow_gpu_dag.operators.fallback import FALLBACK_XCOM_KEY, FallbackDecision, FallbackResult
from airflow_gpu_dag.sensors.start_deadline import StartDeadlineSensor
from tests.unit.dag_files import dag_module

RUN_ID = "manual__2026-11-30T00:00:00+00:00"
RUNGS = [
    Rung("big", gpus=2, start_within="20m", duration="1h"),
    Rung("small", gpus=1, start_within="20m", duration="2h"),
]


def _dag(dag_id: str = "fba", **kwargs: Any) -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1), **kwargs)


def _py(rung: Rung, **kwargs: Any) -> PythonOperator:
    return PythonOperator(task_id=rung.name, python_callable=lambda: rung.name, **kwargs)


# -- trigger rules --------------------------------------------------------------------------------


def test_later_rungs_and_their_watchers_run_only_when_the_ladder_falls_back_to_them():
    # default_args={"trigger_rule": "none_failed"} used to reach the later rungs, whose only upstream is
    # the decision: a skipped decision (the first rung ran) then let them run as well
    with _dag(default_args={"trigger_rule": "none_failed"}) as dag:
        fallback_ladder("train", RUNGS, _py)
    small = dag.task_dict["train.small"]
    assert small.upstream_task_ids == {"train.fallback_to_small"}
    assert small.trigger_rule == "all_success"
    assert dag.task_dict["train.small_start_deadline"].trigger_rule == "all_success"
    # the first rung keeps the rule it was given (it concerns the user's upstream tasks)
    assert dag.task_dict["train.big"].trigger_rule == "none_failed"


def test_first_rungs_watcher_has_the_rungs_trigger_rule():
    # a first rung after a branch (none_failed_min_one_success) ran unwatched: its watcher kept
    # all_success, was skipped with the branch, and the rung could wait for its pool forever
    with _dag() as dag:
        fallback_ladder("train", RUNGS, lambda r: _py(r, trigger_rule="none_failed_min_one_success"))
    assert dag.task_dict["train.big"].trigger_rule == "none_failed_min_one_success"
    assert dag.task_dict["train.big_start_deadline"].trigger_rule == "none_failed_min_one_success"


# -- ladders in task groups -------------------------------------------------------------------------


def test_same_named_ladders_in_different_groups_are_planned_apart():
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.core.model.ladders import fit_ladders, unfit_rungs

    with _dag() as dag:
        for lang in ("en", "de"):
            with TaskGroup(lang):
                fallback_ladder("train", RUNGS, _py)
    assert dag.task_dict["de.train.big"].executor_config["gpu_dag"]["fallback"]["ladder"] == "de.train"
    graph, _ = build_task_graph(dag)
    fitted = fit_ladders(graph, {"gpu_default": 1})  # no 2-GPU rung fits: both ladders run "small"
    roles = {
        t: fitted.nodes[t].attrs["fallback"]["role"]
        for t in fitted.nodes
        if "fallback" in fitted.nodes[t].attrs
    }
    assert roles == {
        "en.train.big": "fell back",
        "en.train.small": "assumed",
        "de.train.big": "fell back",
        "de.train.small": "assumed",
    }
    assert fitted.nodes["de.train.small"].duration == 2 * 3600
    unfit = {u.task_id: u.assumed for u in unfit_rungs(graph, {"gpu_default": 1})}
    assert unfit == {"en.train.big": "en.train.small", "de.train.big": "de.train.small"}


def _mapped_ctx(states: dict[str, str | None], xcoms: dict[tuple[str, str], Any] | None = None, waited=0.0):
    """A task instance with map index 1 in an expanded task group: the Execution API keys the states of
    mapped task instances ``<task_id>_<map_index>``, and an XCom pull without ``map_indexes`` returns
    the values of every map index."""
    xcoms = dict(xcoms or {})
    pushed: list[tuple[str, Any]] = []

    def get_task_states(dag_id, task_ids, run_ids, map_index=None):
        rows = {f"{t}_{i}": states.get(t) for t in task_ids for i in (0, 1, 2) if map_index in (None, i)}
        return {RUN_ID: rows}

    def xcom_pull(task_ids, key="return_value", map_indexes=None):
        value = xcoms.get((task_ids, key))
        if map_indexes is None:  # the Task SDK returns the values of every map index
            return [value, value, value]
        return value if map_indexes == 1 else None

    ti = SimpleNamespace(
        dag_id="fba",
        map_index=1,
        start_date=datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=waited),
        get_task_states=get_task_states,
        get_first_reschedule_date=lambda context: None,
        xcom_pull=xcom_pull,
        xcom_push=lambda key, value: pushed.append((key, value)),
    )
    return {"ti": ti, "run_id": RUN_ID}, pushed


def test_decision_and_result_read_the_rungs_of_their_own_map_index():
    with _dag():
        decision = FallbackDecision(
            task_id="decide",
            rung_task_id="big",
            watcher_task_id=None,
            next_rung="small",
            ladder=[("big", None)],
        )
        result = FallbackResult(task_id="result", rung_task_ids=["big", "small"])
    mark = {"outcome": "not_started", "reason": "big: no GPUs"}
    ctx, _ = _mapped_ctx({"big": "failed"}, {("big", FALLBACK_XCOM_KEY): mark})
    assert decision.execute(ctx) == {"from": "big", "to": "small", "reason": "big: no GPUs"}
    ctx, pushed = _mapped_ctx({"big": "failed", "small": "success"}, {("small", "return_value"): 7})
    assert result.execute(ctx) == 7 and pushed == [("fallback_rung", "small")]


def test_watcher_in_an_expanded_group_skips_the_rung_of_its_map_index():
    with _dag():
        PythonOperator(task_id="rung", python_callable=lambda: None)
        sensor = StartDeadlineSensor(task_id="rung_start_deadline", watched_task_id="rung", start_within=60)
    ctx, _ = _mapped_ctx({"rung": "running"}, waited=3600)
    assert sensor.poke(ctx).xcom_value == {"outcome": "started", "state": "running"}
    ctx, pushed = _mapped_ctx({"rung": "scheduled"}, waited=61)
    with pytest.raises(DownstreamTasksSkipped) as skip:
        sensor.poke(ctx)
    assert skip.value.tasks == [("rung", 1)]
    assert [v["outcome"] for k, v in pushed if k == FALLBACK_XCOM_KEY] == ["not_started"]


# -- dag.test() -----------------------------------------------------------------------------------

AUDIT_DAGS = textwrap.dedent(
    '''
    """Fallback ladder audit DAGs for tests/unit/test_fallback_audit.py (written there at test time)."""
    import datetime

    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG, task_group

    from airflow_gpu_dag.authoring.fallback import Rung, fallback_ladder
    from airflow_gpu_dag.operators.fallback import NotStartedInTime, mark_not_started


    class LeaseWaitingTask(PythonOperator):
        reports_not_started = True


    def work(rung, starved, **context):
        if rung in starved:
            mark_not_started(context, f"{rung}: no GPUs within the deadline")
            raise NotStartedInTime(f"{rung} could not start")
        return {"rung": rung, "shard": context["ti"].map_index}


    RUNGS = [Rung("big", gpus=2, start_within="1h"), Rung("small", gpus=1, start_within="1h")]


    def rung_task(starved):
        return lambda r: LeaseWaitingTask(
            task_id=r.name, python_callable=work, op_kwargs={"rung": r.name, "starved": starved}
        )


    with DAG(
        "fba_default_rule",
        schedule=None,
        start_date=datetime.datetime(2026, 1, 1),
        default_args={"trigger_rule": "none_failed"},
    ) as fba_default_rule:
        fallback_ladder("train", RUNGS, rung_task([]))

    with DAG("fba_mapped", schedule=None, start_date=datetime.datetime(2026, 1, 1)) as fba_mapped:

        @task_group
        def shard(x):
            fallback_ladder("train", RUNGS, rung_task(["big"]))

        shard.expand(x=[1, 2])
    '''
)


@pytest.fixture(scope="module")
def audit_module() -> Iterator[Any]:
    with dag_module("gpu_dag_fallback_audit", AUDIT_DAGS) as module:
        yield module


def _run(module: Any, dag_id: str) -> tuple[str, dict[tuple[str, int], str | None], dict[Any, Any]]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    dr = getattr(module, dag_id).test()
    with create_session() as session:
        states = {
            (ti.task_id, ti.map_index): (str(ti.state) if ti.state else None)
            for ti in dr.get_task_instances(session=session)
        }
        rows = session.scalars(XComModel.get_many(run_id=dr.run_id, dag_ids=dag_id, task_ids=None)).all()
        xcoms = {(r.task_id, r.map_index, r.key): XComModel.deserialize_value(r) for r in rows}
    return str(dr.state), states, xcoms


def test_default_trigger_rule_does_not_run_a_second_rung(audit_module):
    state, states, xcoms = _run(audit_module, "fba_default_rule")
    assert states[("train.big", -1)] == "success"
    assert states[("train.small", -1)] == "skipped", states  # was "success": both rungs ran
    assert state == "success"
    assert xcoms[("train.result", -1, "fallback_rung")] == "train.big"


def test_ladder_in_an_expanded_task_group_falls_back_per_map_index(audit_module):
    state, states, xcoms = _run(audit_module, "fba_mapped")
    for i in (0, 1):
        assert states[("shard.train.big", i)] == "failed"
        assert states[("shard.train.fallback_to_small", i)] == "success", states
        assert states[("shard.train.small", i)] == "success"
        assert states[("shard.train.result", i)] == "success"
        assert xcoms[("shard.train.result", i, "fallback_rung")] == "shard.train.small"
        assert xcoms[("shard.train.result", i, "return_value")] == {"rung": "small", "shard": i}
    assert state == "success"


def test_ladder_decisions_and_join_retry_infrastructure_faults() -> None:
    """The decision and join tasks had ``retries=0``: a try killed with the scheduler, or an Execution API
    call made while the api-server restarted, failed the run (the chaos test's ``exhausted`` did, with
    every rung fine). They take the DAG's retries now (at least 1, 5 s apart); their own outcomes (a skip,
    an exhausted ladder's AirflowFailException) are never retried."""
    from datetime import timedelta

    from airflow.sdk import DAG

    from airflow_gpu_dag.operators.fallback import FallbackDecision, FallbackResult

    with DAG("ladder_retries", schedule=None, default_args={"retries": 3}):
        decision = FallbackDecision(
            task_id="exhausted", rung_task_id="r", watcher_task_id=None, next_rung=None
        )
        join = FallbackResult(task_id="result", rung_task_ids=["r"])
    with DAG("ladder_no_retries", schedule=None):
        plain = FallbackDecision(task_id="exhausted", rung_task_id="r", watcher_task_id=None, next_rung=None)
    assert (decision.retries, join.retries, plain.retries) == (3, 3, 1)
    assert decision.retry_delay == join.retry_delay == timedelta(seconds=5)
