"""Fallback ladders: trigger rules the ladder must own, ladders in nested and expanded task
groups. ``dag.test()`` ignores pools, so the rungs here report "not started" themselves (as
GpuKubernetesPodOperator does); the watcher is tested with a fake Task SDK context."""

from __future__ import annotations

import datetime
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring.fallback import FallbackError, Rung, fallback_ladder
from airflow_gpu_dag.core.policy.objective import run_shape
from airflow_gpu_dag.operators.kubernetes import GpuKubernetesPodOperator
from airflow_gpu_dag.sensors.start_deadline import StartDeadlineSensor
from tests.unit.dag_files import dag_module
from tests.unit.fallback_contexts import ladder_dag

RUNGS = [
    Rung("big", gpus=2, start_within="20m", duration="1h"),
    Rung("small", gpus=1, start_within="20m", duration="2h"),
]


def _dag(dag_id: str = "fba", **kwargs: Any) -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1), **kwargs)


def _py(rung: Rung, **kwargs: Any) -> PythonOperator:
    return PythonOperator(task_id=rung.name, python_callable=lambda: rung.name, **kwargs)


LADDER_DAGS = textwrap.dedent(
    '''
    """Fallback ladder DAGs for tests/unit/authoring/test_fallback.py (written there at test time)."""
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
def ladder_dags() -> Iterator[Any]:
    with dag_module("gpu_dag_fallback_audit", LADDER_DAGS) as module:
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


def test_later_rungs_and_their_watchers_run_only_when_the_ladder_falls_back_to_them():
    # default_args={"trigger_rule": "none_failed"} must not reach the later rungs, whose only upstream
    # is the decision: a skipped decision (the first rung ran) would then let them run as well
    with _dag(default_args={"trigger_rule": "none_failed"}) as dag:
        fallback_ladder("train", RUNGS, _py)
    small = dag.task_dict["train.small"]
    assert small.upstream_task_ids == {"train.fallback_to_small"}
    assert small.trigger_rule == "all_success"
    assert dag.task_dict["train.small_start_deadline"].trigger_rule == "all_success"
    # the first rung keeps the rule it was given (it concerns the user's upstream tasks)
    assert dag.task_dict["train.big"].trigger_rule == "none_failed"


def test_first_rungs_watcher_has_the_rungs_trigger_rule():
    # a first rung after a branch (none_failed_min_one_success) stays watched: a watcher on
    # all_success would be skipped with the branch, and the rung could wait for its pool forever
    with _dag() as dag:
        fallback_ladder("train", RUNGS, lambda r: _py(r, trigger_rule="none_failed_min_one_success"))
    assert dag.task_dict["train.big"].trigger_rule == "none_failed_min_one_success"
    assert dag.task_dict["train.big_start_deadline"].trigger_rule == "none_failed_min_one_success"


def test_default_trigger_rule_does_not_run_a_second_rung(ladder_dags):
    state, states, xcoms = _run(ladder_dags, "fba_default_rule")
    assert states[("train.big", -1)] == "success"
    assert states[("train.small", -1)] == "skipped", states  # "success" would mean both rungs ran
    assert state == "success"
    assert xcoms[("train.result", -1, "fallback_rung")] == "train.big"


def test_ladder_in_an_expanded_task_group_falls_back_per_map_index(ladder_dags):
    state, states, xcoms = _run(ladder_dags, "fba_mapped")
    for i in (0, 1):
        assert states[("shard.train.big", i)] == "failed"
        assert states[("shard.train.fallback_to_small", i)] == "success", states
        assert states[("shard.train.small", i)] == "success"
        assert states[("shard.train.result", i)] == "success"
        assert xcoms[("shard.train.result", i, "fallback_rung")] == "shard.train.small"
        assert xcoms[("shard.train.result", i, "return_value")] == {"rung": "small", "shard": i}
    assert state == "success"


def _py_fallback_ladder(rung: Rung) -> PythonOperator:
    return PythonOperator(task_id=rung.name, python_callable=lambda: rung.params)


RUNGS_fallback_ladder = [
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


SCENARIO_DAGS = textwrap.dedent(
    '''
    """Fallback ladder scenarios for tests/unit/authoring/test_fallback.py (written there at test time)."""
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


def _run_fallback_ladder(module: Any, dag_id: str) -> tuple[str, dict[str, str | None], Any]:
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


class TestStructure:
    def test_tasks_trigger_rules_pools_and_hints(self):
        with ladder_dag() as dag:
            prep = PythonOperator(task_id="prep", python_callable=lambda: None)
            ladder = fallback_ladder("train", RUNGS_fallback_ladder, _py_fallback_ladder)
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

        with ladder_dag() as dag:
            fallback_ladder("train", RUNGS_fallback_ladder, pod)
        assert not any(tid.endswith("_start_deadline") for tid in dag.task_dict)
        assert dag.task_dict["train.8x_a100"].schedule_timeout_seconds == 1200
        assert dag.task_dict["train.fallback_to_4x_a100"].upstream_task_ids == {"train.8x_a100"}

    def test_plan_counts_only_the_first_rung(self):
        from airflow_gpu_dag.airflow.dag_reader import build_task_graph
        from airflow_gpu_dag.core.analysis.critical_path import analyze

        with ladder_dag() as dag:
            fallback_ladder("train", RUNGS_fallback_ladder, _py_fallback_ladder)
        graph, _ = build_task_graph(dag)
        first, second = graph.nodes["train.8x_a100"], graph.nodes["train.4x_a100"]
        assert first.duration > 0 and second.duration == 0
        assert second.attrs["contingent_duration"] == 3 * 3600
        # the expected plan: the ladder takes as long as its first rung, not the sum of all rungs
        assert first.duration == 2 * 3600
        assert analyze(graph).makespan == first.duration

    def test_plan_gives_every_rung_its_expected_duration_and_names_the_assumed_rung(self):
        from airflow_gpu_dag.airflow.dag_reader import plan_dag

        with ladder_dag() as dag:
            fallback_ladder("train", RUNGS_fallback_ladder, _py_fallback_ladder)
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

        with ladder_dag() as dag:
            fallback_ladder("train", RUNGS_fallback_ladder, _py_fallback_ladder, plan_rung="4x_a100")
        plan = plan_dag(dag)
        first, second, third = (plan.task(f"train.{r.name}") for r in RUNGS_fallback_ladder)
        assert first.fallback["role"] == "fell back" and first.duration == 1200  # waited, did not start
        assert first.gpu_hours == 0  # waiting holds no GPU
        assert second.fallback["role"] == "assumed" and second.duration == 3 * 3600
        assert third.fallback["role"] == "contingent" and third.duration == 0
        assert second.earliest_start == first.earliest_finish == 1200
        assert plan.makespan == 1200 + 3 * 3600
        assert "the plan assumes 4x_a100" in first.note
        with (
            ladder_dag(),
            pytest.raises(FallbackError, match="plan_rung='9x' is not one of its rungs"),
        ):
            fallback_ladder("train", RUNGS_fallback_ladder, _py_fallback_ladder, plan_rung="9x")

    def test_ladder_dag_serializes(self):
        from airflow.serialization.serialized_objects import DagSerialization

        with ladder_dag() as dag:
            fallback_ladder("train", RUNGS_fallback_ladder, _py_fallback_ladder)
        restored = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
        assert restored.task_dict["train.result"].trigger_rule == "one_success"
        assert restored.task_dict["train.8x_a100"].executor_config["gpu_dag"]["fallback"]["rung"] == "8x_a100"

    @pytest.mark.parametrize(
        ("rungs", "factory", "match"),
        [
            ([], _py_fallback_ladder, "has no rungs"),
            ([Rung("a", start_within="1m"), Rung("a")], _py_fallback_ladder, "two rungs are named 'a'"),
            ([Rung("a b")], _py_fallback_ladder, "must match"),
            ([Rung("a"), Rung("b")], _py_fallback_ladder, "rung 'a' has no start_within"),
            ([Rung("a", start_within=0), Rung("b")], _py_fallback_ladder, "must be > 0"),
            ([Rung("a", start_within="soon"), Rung("b")], _py_fallback_ladder, "cannot be parsed"),
            ([Rung("a", gpus=0, start_within="1m")], _py_fallback_ladder, "at least 1"),
            ([Rung("a", watch=True)], _py_fallback_ladder, "watch=True needs start_within"),
            (
                [Rung("a", start_within="1m")],
                lambda r: PythonOperator(task_id="other", python_callable=lambda: None),
                "task_id=rung.name",
            ),
            ([Rung("a", start_within="1m")], lambda r: [], "must return one operator"),
        ],
    )
    def test_bad_ladders_fail_at_parse_time(self, rungs, factory, match):
        with ladder_dag(), pytest.raises(FallbackError, match=match) as err:
            fallback_ladder("train", rungs, factory)
        assert "fallback ladder 'train'" in str(err.value)


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
    state, states, xcoms = _run_fallback_ladder(scenario_module, dag_id)
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


def _bash(rung: Rung) -> BashOperator:
    return BashOperator(task_id=rung.name, bash_command="true")


@pytest.mark.parametrize(
    "rungs",
    [
        [Rung("a", start_within="1m"), Rung("result")],
        [Rung("a", start_within="1m"), Rung("exhausted")],
        [Rung("a", start_within="1m"), Rung("a_start_deadline")],
        [Rung("fallback_to_b", start_within="1m"), Rung("b")],
    ],
)
def test_fallback_rung_named_like_a_control_task_is_a_fallback_error(rungs: list[Rung]) -> None:
    match = r"fallback ladder 'train'.*own tasks.*rename"
    with DAG("ladder_names", schedule=None) as dag, pytest.raises(FallbackError, match=match):
        fallback_ladder("train", rungs, _bash)
    assert dag.task_dict == {}


H = 3600.0


def test_a_ladder_dag_with_plan_rung_is_weighed_by_the_gpu_work_it_does() -> None:
    from airflow.sdk import DAG

    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.authoring import Rung, fallback_ladder
    from airflow_gpu_dag.operators import GpuPythonOperator

    def rung_task(rung: Rung) -> GpuPythonOperator:
        return GpuPythonOperator(
            task_id=rung.name, python_callable=lambda: None, gpus=rung.gpus or 1, duration=rung.duration
        )

    rungs = [Rung("eight", gpus=8, start_within="2h", duration="1h"), Rung("one", gpus=1, duration="3h")]
    with DAG("ladder_work", schedule=None) as dag:
        fallback_ladder("train", rungs, rung_task, plan_rung="one")
    graph, _findings = build_task_graph(dag)
    assert graph.nodes["train.eight"].attrs["fallback"]["role"] == "fell back"  # type: ignore[index]
    assert run_shape(graph, {"gpu_default": 8}).work == pytest.approx(3 * H / 8)
