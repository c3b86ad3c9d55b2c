"""Fallback ladder: structure, parse-time errors, decision logic, and trigger-rule semantics under dag.test().

``dag.test()`` ignores pools, so here "not started in time" is reported by the rung itself (a task that
gives up waiting for its lease and raises NotStartedInTime, as GpuKubernetesPodOperator does for an
unscheduled pod). The pool-wait watcher is tested directly here and for real in
tests/integration/test_fallback_real.py.
"""

from __future__ import annotations

import datetime
import textwrap
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, DownstreamTasksSkipped

from airflow_gpu_dag.authoring.fallback import FallbackError, Rung, fallback_ladder
from airflow_gpu_dag.operators.fallback import FALLBACK_XCOM_KEY, FallbackDecision
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator
from airflow_gpu_dag.sensors.start_deadline import StartDeadlineSensor
from tests.unit.dag_files import dag_module

RUN_ID = "manual__2026-11-30T00:00:00+00:00"


def _dag(dag_id: str = "fb") -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1))


def _py(rung: Rung) -> PythonOperator:
    return PythonOperator(task_id=rung.name, python_callable=lambda: rung.params)


RUNGS = [
    Rung(
        "8x_a100", gpus=8, gpu_type="a100", start_within="20m", params={"bs": 64, "accum": 1}, duration="2h"
    ),
    Rung(
        "4x_a100", gpus=4, gpu_type="a100", start_within="20m", params={"bs": 32, "accum": 2}, duration="3h"
    ),
    Rung(
        "8x_h100", gpus=8, gpu_type="h100", start_within="20m", params={"bs": 64, "accum": 1}, duration="2h"
    ),
]


class TestStructure:
    def test_tasks_trigger_rules_pools_and_hints(self):
        with _dag() as dag:
            prep = PythonOperator(task_id="prep", python_callable=lambda: None)
            ladder = fallback_ladder("train", RUNGS, _py)
            evaluate = PythonOperator(task_id="evaluate", python_callable=lambda: None)
            prep >> ladder >> evaluate
        t = dag.task_dict
        assert sorted(t) == sorted(
            [
                "prep",
                "evaluate",
                "train.8x_a100",
                "train.8x_a100_start_deadline",
                "train.fallback_to_4x_a100",
                "train.4x_a100",
                "train.4x_a100_start_deadline",
                "train.fallback_to_8x_h100",
                "train.8x_h100",
                "train.8x_h100_start_deadline",
                "train.exhausted",
                "train.result",
            ]
        )
        assert t["prep"].downstream_task_ids == {"train.8x_a100", "train.8x_a100_start_deadline"}
        assert t["train.fallback_to_4x_a100"].upstream_task_ids == {
            "train.8x_a100",
            "train.8x_a100_start_deadline",
        }
        assert t["train.fallback_to_4x_a100"].downstream_task_ids == {
            "train.4x_a100",
            "train.4x_a100_start_deadline",
        }
        assert t["train.exhausted"].upstream_task_ids == {"train.8x_h100", "train.8x_h100_start_deadline"}
        assert t["train.result"].upstream_task_ids == {"train.8x_a100", "train.4x_a100", "train.8x_h100"}
        assert t["evaluate"].upstream_task_ids == {"train.result"}
        assert t["train.fallback_to_4x_a100"].trigger_rule == "all_done"
        assert t["train.exhausted"].trigger_rule == "all_done"
        assert t["train.result"].trigger_rule == "one_success"
        assert (t["train.8x_a100"].pool, t["train.8x_a100"].pool_slots) == ("gpu_a100", 8)
        assert (t["train.8x_h100"].pool, t["train.8x_h100"].pool_slots) == ("gpu_h100", 8)
        hints = t["train.4x_a100"].executor_config["gpu_dag"]
        assert hints["gpus"] == 4 and hints["duration_s"] == 3 * 3600
        assert hints["fallback"] == {
            "ladder": "train",
            "rung": "4x_a100",
            "index": 1,
            "rungs": 3,
            "assumed_index": 0,
            "assumed_rung": "8x_a100",
            "start_within_s": 1200.0,
            "watched": True,
        }
        assert t["train.result"].executor_config["gpu_dag"]["duration_s"] == 0
        watcher = t["train.8x_a100_start_deadline"]
        assert isinstance(watcher, StartDeadlineSensor) and watcher.mode == "poke"
        assert watcher.start_within == 1200 and watcher.timeout > 1200
        assert ladder.output.operator is t["train.result"]

    def test_kubernetes_rungs_detect_themselves_and_get_the_deadline_as_schedule_timeout(self):
        def pod(rung: Rung) -> GpuKubernetesPodOperator:
            return GpuKubernetesPodOperator(
                task_id=rung.name, image="i", namespace="ml", gpus=rung.gpus, gpu_type=rung.gpu_type
            )

        with _dag() as dag:
            fallback_ladder("train", RUNGS, pod)
        assert not any(tid.endswith("_start_deadline") for tid in dag.task_dict)
        assert dag.task_dict["train.8x_a100"].schedule_timeout_seconds == 1200
        assert dag.task_dict["train.fallback_to_4x_a100"].upstream_task_ids == {"train.8x_a100"}

    def test_plan_counts_only_the_first_rung(self):
        from airflow_gpu_dag.airflow.dag_reader import build_task_graph
        from airflow_gpu_dag.core.analysis.critical_path import analyze

        with _dag() as dag:
            fallback_ladder("train", RUNGS, _py)
        graph, _ = build_task_graph(dag)
        first, second = graph.nodes["train.8x_a100"], graph.nodes["train.4x_a100"]
        assert first.duration > 0 and second.duration == 0
        assert second.attrs["contingent_duration"] == 3 * 3600
        # the expected plan: the ladder takes as long as its first rung, not the sum of all rungs
        assert first.duration == 2 * 3600
        assert analyze(graph).makespan == first.duration

    def test_plan_gives_every_rung_its_expected_duration_and_names_the_assumed_rung(self):
        from airflow_gpu_dag.airflow.dag_reader import plan_dag

        with _dag() as dag:
            fallback_ladder("train", RUNGS, _py)
        plan = plan_dag(dag)
        first, second = plan.task("train.8x_a100"), plan.task("train.4x_a100")
        assert (first.duration, first.expected_duration) == (2 * 3600, 2 * 3600)
        assert (second.duration, second.expected_duration) == (0, 3 * 3600)
        assert first.fallback["role"] == "assumed" and second.fallback["role"] == "contingent"
        assert "the plan assumes this rung 1 of 3 (2h00m)" in first.note
        assert "rung 2 of 3 expected 3h00m, counted 0" in second.note and "8x_a100 (assumed)" in second.note
        as_json = plan.to_dict()["tasks"]
        row = next(t for t in as_json if t["task_id"] == "train.4x_a100")
        assert row["expected_duration"] == 3 * 3600 and row["fallback"]["assumed_rung"] == "8x_a100"
        assert row["note"] == second.note

    def test_plan_rung_assumes_a_later_rung_after_the_earlier_ones_waited(self):
        from airflow_gpu_dag.airflow.dag_reader import plan_dag

        with _dag() as dag:
            fallback_ladder("train", RUNGS, _py, plan_rung="4x_a100")
        plan = plan_dag(dag)
        first, second, third = (plan.task(f"train.{r.name}") for r in RUNGS)
        assert first.fallback["role"] == "fell back" and first.duration == 1200  # waited, did not start
        assert first.gpu_hours == 0  # waiting holds no GPU
        assert second.fallback["role"] == "assumed" and second.duration == 3 * 3600
        assert third.fallback["role"] == "contingent" and third.duration == 0
        assert second.earliest_start == first.earliest_finish == 1200
        assert plan.makespan == 1200 + 3 * 3600
        assert "the plan assumes 4x_a100" in first.note
        with _dag(), pytest.raises(FallbackError, match="plan_rung='9x' is not one of its rungs"):
            fallback_ladder("train", RUNGS, _py, plan_rung="9x")

    def test_ladder_dag_serializes(self):
        from airflow.serialization.serialized_objects import DagSerialization

        with _dag() as dag:
            fallback_ladder("train", RUNGS, _py)
        restored = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
        assert restored.task_dict["train.result"].trigger_rule == "one_success"
        assert restored.task_dict["train.8x_a100"].executor_config["gpu_dag"]["fallback"]["rung"] == "8x_a100"

    @pytest.mark.parametrize(
        ("rungs", "factory", "match"),
        [
            ([], _py, "has no rungs"),
            ([Rung("a", start_within="1m"), Rung("a")], _py, "two rungs are named 'a'"),
            ([Rung("a b")], _py, "must match"),
            ([Rung("a"), Rung("b")], _py, "rung 'a' has no start_within"),
            ([Rung("a", start_within=0), Rung("b")], _py, "must be > 0"),
            ([Rung("a", start_within="soon"), Rung("b")], _py, "cannot be parsed"),
            ([Rung("a", gpus=0, start_within="1m")], _py, "at least 1"),
            ([Rung("a", watch=True)], _py, "watch=True needs start_within"),
            (
                [Rung("a", start_within="1m")],
                lambda r: PythonOperator(task_id="other", python_callable=lambda: None),
                "task_id=rung.name",
            ),
            ([Rung("a", start_within="1m")], lambda r: [], "must return one operator"),
        ],
    )
    def test_bad_ladders_fail_at_parse_time(self, rungs, factory, match):
        with _dag(), pytest.raises(FallbackError, match=match) as err:
            fallback_ladder("train", rungs, factory)
        assert "fallback ladder 'train'" in str(err.value)


# -- decision logic with a fake Task SDK context ---------------------------------------------------


def _ctx(states: dict[str, str | None], xcoms: dict[tuple[str, str], Any] | None = None, waited: float = 0):
    xcoms = dict(xcoms or {})
    pushed: list[tuple[str, Any]] = []

    def xcom_pull(task_ids: str, key: str = "return_value") -> Any:
        return xcoms.get((task_ids, key))

    ti = SimpleNamespace(
        dag_id="fb",
        map_index=-1,
        start_date=datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=waited),
        get_task_states=lambda dag_id, task_ids, run_ids: {RUN_ID: {t: states.get(t) for t in task_ids}},
        get_first_reschedule_date=lambda context: None,
        xcom_pull=xcom_pull,
        xcom_push=lambda key, value: pushed.append((key, value)),
    )
    return {"ti": ti, "run_id": RUN_ID}, pushed


class TestStartDeadlineSensor:
    def _sensor(self):
        with _dag():
            rung = PythonOperator(task_id="rung", python_callable=lambda: None)
            sensor = StartDeadlineSensor(
                task_id="rung_start_deadline", watched_task_id="rung", start_within=60
            )
        return rung, sensor

    @pytest.mark.parametrize("state", ["queued", "running", "success", "up_for_retry", "deferred"])
    def test_started_rung_ends_the_watch(self, state):
        _, sensor = self._sensor()
        ctx, pushed = _ctx({"rung": state}, waited=3600)
        result = sensor.poke(ctx)
        assert result.is_done and result.xcom_value == {"outcome": "started", "state": state}
        assert pushed == []

    @pytest.mark.parametrize("state", ["failed", "upstream_failed", "skipped", "removed"])
    def test_rung_that_ended_otherwise_is_not_reported_as_started(self, state, capsys):
        # A rung failed or skipped while it waited (by hand, by an older controller) never got its
        # resources: the watch ends, but neither the XCom nor the log claims it started.
        _, sensor = self._sensor()
        ctx, pushed = _ctx({"rung": state}, waited=10)
        result = sensor.poke(ctx)
        assert result.is_done and result.xcom_value == {"outcome": "ended", "state": state}
        assert pushed == []
        logged = capsys.readouterr().out  # the task logger writes through structlog to stdout
        assert f"rung is {state}: it left its pool's queue" in logged
        assert "got its resources" not in logged

    @pytest.mark.parametrize("state", [None, "scheduled"])
    def test_waiting_rung_within_deadline_keeps_waiting(self, state):
        _, sensor = self._sensor()
        ctx, pushed = _ctx({"rung": state}, waited=10)
        assert sensor.poke(ctx) is False and pushed == []

    def test_waiting_rung_after_deadline_is_marked_and_skipped(self):
        _, sensor = self._sensor()
        ctx, pushed = _ctx({"rung": "scheduled"}, waited=61)
        with pytest.raises(DownstreamTasksSkipped) as skip:
            sensor.poke(ctx)
        assert skip.value.tasks == [("rung", -1)] or skip.value.tasks == ["rung"]
        (_key, value), *_ = [p for p in pushed if p[0] == FALLBACK_XCOM_KEY]
        assert value["outcome"] == "not_started" and "did not start within 60s" in value["reason"]


class TestFallbackDecision:
    def _decision(self, next_rung: str | None = "small", watcher: str | None = "big_start_deadline"):
        with _dag():
            return FallbackDecision(
                task_id="decide",
                rung_task_id="big",
                watcher_task_id=watcher,
                next_rung=next_rung,
                ladder=[("big", watcher)],
            )

    NOT_STARTED = {"outcome": "not_started", "reason": "big did not start within 60s"}

    def test_watcher_skipped_the_rung_falls_back(self):
        ctx, _ = _ctx({"big": "skipped"}, {("big_start_deadline", FALLBACK_XCOM_KEY): self.NOT_STARTED})
        assert self._decision().execute(ctx)["to"] == "small"

    def test_rung_that_reported_not_started_falls_back(self):
        ctx, _ = _ctx({"big": "failed"}, {("big", FALLBACK_XCOM_KEY): self.NOT_STARTED})
        assert self._decision(watcher=None).execute(ctx)["from"] == "big"

    @pytest.mark.parametrize(
        ("states", "xcoms"),
        [
            ({"big": "success"}, {}),
            ({"big": "failed"}, {}),  # crashed after it started: a real failure, no fallback
            ({"big": "upstream_failed"}, {}),
            ({"big": "skipped"}, {}),  # skipped by an upstream branch, not by the watcher
            # the watcher marked it, but the rung had started in the meantime (the skip did not apply)
            ({"big": "success"}, {("big_start_deadline", FALLBACK_XCOM_KEY): NOT_STARTED}),
            ({"big": "failed"}, {("big_start_deadline", FALLBACK_XCOM_KEY): NOT_STARTED}),
        ],
    )
    def test_anything_else_skips_the_rest_of_the_ladder(self, states, xcoms):
        ctx, _ = _ctx(states, xcoms)
        with pytest.raises(AirflowSkipException, match="no fallback"):
            self._decision().execute(ctx)

    def test_end_of_ladder_fails_with_every_reason(self):
        ctx, _ = _ctx({"big": "skipped"}, {("big_start_deadline", FALLBACK_XCOM_KEY): self.NOT_STARTED})
        with pytest.raises(
            AirflowFailException, match=r"no rung could start: big: big did not start within 60s"
        ):
            self._decision(next_rung=None).execute(ctx)


# -- dag.test(): which rung runs, the run's state, what downstream receives ---------------------------

SCENARIO_DAGS = textwrap.dedent(
    '''
    """Fallback ladder scenarios for tests/unit/test_fallback_ladder.py (written there at test time)."""
    import datetime

    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag.authoring.fallback import Rung, fallback_ladder
    from airflow_gpu_dag.operators.fallback import NotStartedInTime, mark_not_started


    class LeaseWaitingTask(PythonOperator):
        """Stands in for a task that waits for its GPUs itself and gives up after its deadline."""

        reports_not_started = True


    def work(rung, starved, crash, **context):
        if rung in starved:
            mark_not_started(context, f"{rung}: no GPUs within the deadline")
            raise NotStartedInTime(f"{rung} could not start")
        if rung in crash:
            raise RuntimeError(f"{rung} crashed after it started")
        return {"rung": rung}


    def prep(fail):
        if fail:
            raise RuntimeError("prep failed")


    def evaluate(result):
        return {"evaluated": result}


    SCENARIOS = {
        "fb_first_ok": dict(starved=[], crash=[]),
        "fb_second_rung": dict(starved=["big"], crash=[]),
        "fb_third_rung": dict(starved=["big", "mid"], crash=[]),
        "fb_exhausted": dict(starved=["big", "mid", "other"], crash=[]),
        "fb_crash": dict(starved=[], crash=["big"]),
        "fb_crash_after_fallback": dict(starved=["big"], crash=["mid"]),
        "fb_prep_fails": dict(starved=["big"], crash=[], prep_fails=True),
    }

    for dag_id, sc in SCENARIOS.items():
        with DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1)) as dag:
            p = PythonOperator(task_id="prep", python_callable=prep, op_args=[sc.get("prep_fails", False)])
            ladder = fallback_ladder(
                "train",
                [
                    Rung("big", gpus=8, start_within="1h", params={"bs": 64}),
                    Rung("mid", gpus=4, start_within="1h", params={"bs": 32}),
                    Rung("other", gpus=8, gpu_type="h100", start_within="1h", params={"bs": 64}),
                ],
                lambda r, sc=sc: LeaseWaitingTask(
                    task_id=r.name,
                    python_callable=work,
                    op_kwargs={"rung": r.name, "starved": sc["starved"], "crash": sc["crash"]},
                ),
            )
            ev = PythonOperator(task_id="evaluate", python_callable=evaluate, op_args=[ladder.output])
            p >> ladder
        globals()[dag_id] = dag
    '''
)


@pytest.fixture(scope="module")
def scenario_module() -> Iterator[Any]:
    with dag_module("gpu_dag_fallback_scenarios", SCENARIO_DAGS) as module:
        yield module


def _run(module: Any, dag_id: str) -> tuple[str, dict[str, str | None], Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    dr = getattr(module, dag_id).test()
    with create_session() as session:
        states = {
            ti.task_id: (str(ti.state) if ti.state else None) for ti in dr.get_task_instances(session=session)
        }
        query = XComModel.get_many(run_id=dr.run_id, dag_ids=dag_id, task_ids=["evaluate", "train.result"])
        rows = session.scalars(query).all()
        xcoms = {(r.task_id, r.key): XComModel.deserialize_value(r) for r in rows}
    return str(dr.state), states, xcoms


RUNGS_IDS = ("train.big", "train.mid", "train.other")


@pytest.mark.parametrize(
    ("dag_id", "run_state", "rungs", "result"),
    [
        ("fb_first_ok", "success", ("success", "skipped", "skipped"), "big"),
        ("fb_second_rung", "success", ("failed", "success", "skipped"), "mid"),
        ("fb_third_rung", "success", ("failed", "failed", "success"), "other"),
        ("fb_exhausted", "failed", ("failed", "failed", "failed"), None),
        ("fb_crash", "failed", ("failed", "skipped", "skipped"), None),
        ("fb_crash_after_fallback", "failed", ("failed", "failed", "skipped"), None),
        ("fb_prep_fails", "failed", ("upstream_failed", "skipped", "skipped"), None),
    ],
)
def test_trigger_rule_semantics_under_dag_test(scenario_module, dag_id, run_state, rungs, result):
    state, states, xcoms = _run(scenario_module, dag_id)
    assert tuple(states[t] for t in RUNGS_IDS) == rungs, states
    assert state == run_state, states
    if result is None:
        assert states["train.result"] in ("upstream_failed", "skipped")
        assert states["evaluate"] in ("upstream_failed", "skipped")
        assert ("evaluate", "return_value") not in xcoms
    else:
        assert states["train.result"] == "success" and states["evaluate"] == "success"
        assert xcoms[("train.result", "fallback_rung")] == f"train.{result}"
        assert xcoms[("evaluate", "return_value")] == {"evaluated": {"rung": result}}
    assert states["train.exhausted"] == ("failed" if dag_id == "fb_exhausted" else "skipped")


def test_mark_not_started_pushes_the_marker():
    from airflow_gpu_dag.operators.fallback import mark_not_started

    ti = mock.Mock()
    mark_not_started({"ti": ti}, "no lease")
    ti.xcom_push.assert_called_once_with(
        key=FALLBACK_XCOM_KEY, value={"outcome": "not_started", "reason": "no lease"}
    )
