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


# -- Rung ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start_within", "seconds"),
    [("20m", 1200.0), ("1h30m", 5400.0), (90, 90.0), (datetime.timedelta(minutes=2), 120.0), (None, None)],
)
def test_rung_start_within_is_read_in_seconds(start_within: Any, seconds: float | None) -> None:
    assert Rung("a", start_within=start_within).start_within_seconds == seconds


@pytest.mark.parametrize(
    ("rung", "pool"),
    [
        (Rung("a", gpus=8, gpu_type="a100"), "gpu_a100"),
        (Rung("a", gpus=2), "gpu_default"),
        (Rung("a", gpus=2, gpu_type="h100", pool="reserved"), "reserved"),
        (Rung("a", pool="cpu_pool"), "cpu_pool"),
        (Rung("a", gpu_type="a100"), None),  # no GPUs asked for: no GPU pool
        (Rung("a"), None),
    ],
)
def test_rung_pool_is_explicit_or_derived_from_the_gpu_type(rung: Rung, pool: str | None) -> None:
    assert rung.pool_name == pool


def test_rung_describes_its_gpus_or_else_its_name() -> None:
    assert Rung("8x_a100", gpus=8, gpu_type="a100").describe() == "8x a100"
    assert Rung("two", gpus=2).describe() == "2x GPU"
    assert Rung("cpu_only").describe() == "cpu_only"


def test_rung_describes_its_deadline_as_the_docstring_shows() -> None:
    rung = Rung("8x_a100", gpus=8, gpu_type="a100", start_within="20m")
    assert rung.describe() == "8x a100 (start within 20m)"


def test_a_rung_is_immutable_and_keeps_its_own_params() -> None:
    import dataclasses

    rung = Rung("a", params={"bs": 64})
    with pytest.raises(dataclasses.FrozenInstanceError):
        rung.name = "b"  # type: ignore[misc]
    assert Rung("b").params == {} and Rung("b").params is not Rung("c").params


# -- validation: more ladders that cannot work --------------------------------------------------------


@pytest.mark.parametrize(
    ("rungs", "message"),
    [
        (
            [Rung("a", start_within="1m"), {"name": "b"}],
            "fallback ladder 'train' in DAG 'fba_bad': rung 1 is dict, not a Rung(...)",
        ),
        (
            [Rung("")],
            "fallback ladder 'train' in DAG 'fba_bad': rung name '' must match [A-Za-z0-9_-]+ "
            "(it is a task id)",
        ),
        (
            [Rung("a.b")],
            "fallback ladder 'train' in DAG 'fba_bad': rung name 'a.b' must match [A-Za-z0-9_-]+ "
            "(it is a task id)",
        ),
        (
            [Rung("a", gpus=-1)],
            "fallback ladder 'train' in DAG 'fba_bad', rung 'a': GPU count -1 must be at least 1; a task "
            "that needs no GPU should not declare a GPU request",
        ),
        (
            [Rung("a", gpus=2.5)],  # type: ignore[arg-type]
            "fallback ladder 'train' in DAG 'fba_bad', rung 'a': GPU count 2.5 must be a whole number of "
            "GPUs (1, 2, 4, 8)",
        ),
        (
            [Rung("a", gpus=True)],
            "fallback ladder 'train' in DAG 'fba_bad', rung 'a': GPU count True must be a whole number of "
            "GPUs (1, 2, 4, 8)",
        ),
        (
            [Rung("a", start_within=datetime.timedelta(0)), Rung("b")],
            "fallback ladder 'train' in DAG 'fba_bad', rung 'a': start_within must be > 0, "
            "e.g. start_within='20m'",
        ),
    ],
    ids=["not-a-rung", "empty-name", "dotted-name", "negative-gpus", "fractional-gpus", "bool-gpus", "zero"],
)
def test_a_bad_rung_is_refused_before_any_task_is_added(rungs: list[Any], message: str) -> None:
    """The message names the ladder, the rung and the fix, and the DAG is left as it was."""
    with _dag("fba_bad") as dag, pytest.raises(FallbackError) as err:
        fallback_ladder("train", rungs, _py)
    assert str(err.value) == message
    assert dag.task_dict == {}


@pytest.mark.parametrize(
    ("rung", "match"),
    [
        (
            Rung("a", duration="forever"),
            r"^fallback ladder 'train' in DAG 'fba_durations', rung 'a': duration 'forever' cannot be parsed",
        ),
        (
            Rung("a", start_within=-5),
            r"^fallback ladder 'train' in DAG 'fba_durations', rung 'a': duration -5 is negative; "
            "use seconds",
        ),
        (
            Rung("a", start_within="soon"),
            r"^fallback ladder 'train' in DAG 'fba_durations', rung 'a': duration 'soon' cannot be parsed",
        ),
    ],
    ids=["duration", "negative-start-within", "unparsable-start-within"],
)
def test_an_unreadable_duration_names_the_rung_and_the_accepted_forms(rung: Rung, match: str) -> None:
    with _dag("fba_durations"), pytest.raises(FallbackError, match=match) as err:
        fallback_ladder("train", [rung], _py)
    assert '"30m", "1h30m"' in str(err.value)


def test_a_fallback_error_is_a_value_error() -> None:
    """A DAG file that guards its ladders with ``except ValueError`` catches it, as other parse errors."""
    assert issubclass(FallbackError, ValueError)


@pytest.mark.parametrize(
    ("factory", "returned"),
    [
        (lambda r: None, "NoneType"),
        (
            lambda r: PythonOperator.partial(task_id=r.name, python_callable=lambda x: x).expand(
                op_args=[[1]]
            ),
            "MappedOperator",
        ),
    ],
    ids=["none", "mapped"],
)
def test_a_factory_that_returns_no_single_operator_is_refused(factory: Any, returned: str) -> None:
    with _dag("fba_factory"), pytest.raises(FallbackError) as err:
        fallback_ladder("train", [Rung("a")], factory)
    assert str(err.value) == (
        f"fallback ladder 'train' in DAG 'fba_factory', rung 'a': the factory returned {returned}; it "
        "must return one operator (not a mapped task, not a list)"
    )


def test_a_factory_task_with_another_id_is_named_with_the_fix() -> None:
    with _dag("fba_ids"), pytest.raises(FallbackError) as err:
        fallback_ladder("train", [Rung("a")], lambda r: PythonOperator(task_id="b", python_callable=print))
    assert str(err.value) == (
        "fallback ladder 'train' in DAG 'fba_ids': the factory built task 'train.b' for rung 'a'; "
        "create it with task_id=rung.name inside the factory"
    )


def test_rung_names_may_hold_digits_dashes_and_underscores() -> None:
    with _dag("fba_names") as dag:
        fallback_ladder("train", [Rung("8x-a100_v2", start_within="1m"), Rung("4X")], _py)
    expected = {"train.8x-a100_v2", "train.8x-a100_v2_start_deadline", "train.fallback_to_4X", "train.4X"}
    assert expected <= set(dag.task_dict)


# -- what each rung's task looks like -----------------------------------------------------------------


def _pool(dag: DAG, task_id: str) -> tuple[str, int]:
    """The pool and pool slots of a task of ``dag``."""
    task = dag.task_dict[task_id]
    return task.pool, task.pool_slots


def test_pool_and_slots_the_factory_did_not_set_come_from_the_rung() -> None:
    rungs = [
        Rung("typed", gpus=8, gpu_type="a100", start_within="1m"),
        Rung("own_pool", gpus=4, pool="reserved", start_within="1m"),
        Rung("cpu", pool="cpu_pool", start_within="1m"),
        Rung("plain"),
    ]
    with _dag("fba_pools") as dag:
        fallback_ladder("train", rungs, _py)
    assert {r.name: _pool(dag, f"train.{r.name}") for r in rungs} == {
        "typed": ("gpu_a100", 8),
        "own_pool": ("reserved", 4),
        "cpu": ("cpu_pool", 1),
        "plain": ("default_pool", 1),
    }


def test_pool_slots_the_factory_set_are_kept() -> None:
    with _dag("fba_slots") as dag:
        fallback_ladder(
            "train", [Rung("a", gpus=8, start_within="1m"), Rung("b", gpus=4)], lambda r: _py(r, pool_slots=2)
        )
    assert [_pool(dag, "train.a"), _pool(dag, "train.b")] == [("gpu_default", 2), ("gpu_default", 2)]


def test_a_factory_that_chose_the_pool_still_gets_the_rungs_gpu_count_as_slots() -> None:
    with _dag("fba_own_pool") as dag:
        fallback_ladder(
            "train",
            [Rung("a", gpus=8, start_within="1m"), Rung("b", gpus=4)],
            lambda r: _py(r, pool="gpu_a100"),
        )
    assert [_pool(dag, "train.a"), _pool(dag, "train.b")] == [("gpu_a100", 8), ("gpu_a100", 4)]


def test_the_factorys_own_hints_win_over_the_rungs_and_the_ladder_adds_its_place() -> None:
    from airflow_gpu_dag.executor_config import gpu_hints

    def declared(rung: Rung) -> PythonOperator:
        config = {**gpu_hints(duration="30m"), "KubernetesExecutor": {"cpu": 2}}
        return _py(rung, executor_config=config)

    with _dag("fba_hints") as dag:
        fallback_ladder("train", [Rung("a", gpus=2, gpu_type="a100", duration="2h")], declared)
    config = dag.task_dict["train.a"].executor_config
    assert config["KubernetesExecutor"] == {"cpu": 2}
    hints = config["gpu_dag"]
    assert (hints["duration_s"], hints["gpus"], hints["gpu_type"]) == (1800.0, 2, "a100")
    assert hints["fallback"] == {
        "ladder": "train",
        "rung": "a",
        "index": 0,
        "rungs": 1,
        "assumed_index": 0,
        "assumed_rung": "a",
        "start_within_s": None,
        "watched": False,
    }


def test_every_rungs_hints_name_the_rung_the_plan_assumes() -> None:
    rungs = [Rung("a", start_within="1m"), Rung("b", start_within="2m"), Rung("c")]
    with _dag("fba_assumed") as dag:
        fallback_ladder("train", rungs, _py, plan_rung="b")
    places = [dag.task_dict[f"train.{r.name}"].executor_config["gpu_dag"]["fallback"] for r in rungs]
    assert [(p["index"], p["assumed_index"], p["assumed_rung"], p["start_within_s"]) for p in places] == [
        (0, 1, "b", 60.0),
        (1, 1, "b", 120.0),
        (2, 1, "b", None),
    ]


class _ReportsNotStarted(PythonOperator):
    """A task that gives up waiting for its resources itself, with a schedule timeout to set."""

    reports_not_started = True
    schedule_timeout_seconds = 999


def _reporting(rung: Rung) -> _ReportsNotStarted:
    return _ReportsNotStarted(task_id=rung.name, python_callable=print)


def test_a_rung_that_reports_not_started_gets_its_deadline_as_schedule_timeout_and_no_watcher() -> None:
    """The deadline is rounded down to whole seconds, at least 1; a rung without one keeps its own."""
    rungs = [Rung("a", start_within=0.4), Rung("b", start_within="2m"), Rung("c")]
    with _dag("fba_reporting") as dag:
        ladder = fallback_ladder("train", rungs, _reporting)
    assert [t.schedule_timeout_seconds for t in ladder.rung_tasks] == [1, 120, 999]
    assert ladder.watchers == [None, None, None]
    assert not any(tid.endswith("_start_deadline") for tid in dag.task_dict)
    assert [d.upstream_task_ids for d in ladder.decisions] == [{"train.a"}, {"train.b"}, {"train.c"}]
    assert [t.executor_config["gpu_dag"]["fallback"]["watched"] for t in ladder.rung_tasks] == [False] * 3


def test_a_rung_that_reports_not_started_needs_no_start_within_to_fall_back() -> None:
    with _dag("fba_reporting_no_deadline") as dag:
        fallback_ladder("train", [Rung("a"), Rung("b")], _reporting)
    assert dag.task_dict["train.fallback_to_b"].upstream_task_ids == {"train.a"}


def test_watch_true_adds_a_watcher_to_a_rung_that_reports_itself() -> None:
    """The watcher covers the Airflow pool wait, the task the cluster's wait: both feed the decision."""
    with _dag("fba_both"):
        ladder = fallback_ladder("train", [Rung("a", start_within="5m", watch=True), Rung("b")], _reporting)
    watcher = ladder.watchers[0]
    assert watcher is not None and watcher.task_id == "train.a_start_deadline"
    assert ladder.decisions[0].upstream_task_ids == {"train.a", "train.a_start_deadline"}
    assert ladder.decisions[0].watcher_task_id == "train.a_start_deadline"
    assert ladder.rung_tasks[0].schedule_timeout_seconds == 300


def test_watch_false_leaves_the_last_rung_unwatched_but_records_its_deadline() -> None:
    with _dag("fba_unwatched") as dag:
        ladder = fallback_ladder(
            "train", [Rung("a", start_within="1m"), Rung("b", start_within="1m", watch=False)], _py
        )
    assert ladder.watchers[1] is None and "train.b_start_deadline" not in dag.task_dict
    place = dag.task_dict["train.b"].executor_config["gpu_dag"]["fallback"]
    assert (place["watched"], place["start_within_s"]) == (False, 60.0)


# -- the watchers and control tasks -------------------------------------------------------------------


def test_the_watchers_take_the_ladders_mode_and_interval_and_the_rungs_deadline() -> None:
    rungs = [Rung("a", start_within="1m"), Rung("b", start_within=30), Rung("c")]
    with _dag("fba_watchers") as dag:
        ladder = fallback_ladder("train", rungs, _py, poke_interval=60, watch_mode="reschedule")
    a, b, none = ladder.watchers
    assert none is None
    assert [(w.task_id, w.watched_task_id, w.start_within, w.mode, w.poke_interval) for w in (a, b)] == [
        ("train.a_start_deadline", "train.a", 60.0, "reschedule", 60.0),
        ("train.b_start_deadline", "train.b", 30.0, "reschedule", 60.0),
    ]
    assert a.doc_md == "Skips `a` if it has not started within 1m."
    # the watcher runs when its rung runs: the rung's upstream and trigger rule
    assert dag.task_dict["train.b_start_deadline"].upstream_task_ids == {"train.fallback_to_b"}
    assert b.trigger_rule == dag.task_dict["train.b"].trigger_rule == "all_success"


def test_the_control_tasks_are_planned_as_taking_no_time() -> None:
    with _dag("fba_control") as dag:
        fallback_ladder(
            "train", [Rung("a", gpus=2, start_within="1m", duration="1h"), Rung("b", gpus=1)], _py
        )
    control = ["train.a_start_deadline", "train.fallback_to_b", "train.exhausted", "train.result"]
    assert {t: dag.task_dict[t].executor_config["gpu_dag"]["duration_s"] for t in control} == dict.fromkeys(
        control, 0
    )


def test_each_decision_knows_its_rung_its_watcher_and_the_next_rung() -> None:
    """The last decision, ``exhausted``, also gets every rung and watcher to give every reason."""
    rungs = [Rung("a", start_within="1m"), Rung("b", start_within="1m"), Rung("c")]
    with _dag("fba_decisions"):
        ladder = fallback_ladder("train", rungs, _py)
    assert [(d.task_id, d.rung_task_id, d.watcher_task_id, d.next_rung) for d in ladder.decisions] == [
        ("train.fallback_to_b", "train.a", "train.a_start_deadline", "b"),
        ("train.fallback_to_c", "train.b", "train.b_start_deadline", "c"),
        ("train.exhausted", "train.c", None, None),
    ]
    assert ladder.exhausted is ladder.decisions[-1]
    assert ladder.exhausted.ladder == [
        ("train.a", "train.a_start_deadline"),
        ("train.b", "train.b_start_deadline"),
        ("train.c", None),
    ]
    assert ladder.result.rung_task_ids == ["train.a", "train.b", "train.c"]


def test_a_watched_last_rung_feeds_exhausted_with_its_watcher() -> None:
    with _dag("fba_last_watched"):
        ladder = fallback_ladder("train", [Rung("a", start_within="1m"), Rung("b", start_within="1m")], _py)
    assert ladder.exhausted.upstream_task_ids == {"train.b", "train.b_start_deadline"}
    assert ladder.exhausted.watcher_task_id == "train.b_start_deadline"
    # a watcher is never upstream of result: its success must not release result (one_success)
    assert ladder.result.upstream_task_ids == {"train.a", "train.b"}


def test_a_one_rung_ladder_has_its_rung_exhausted_and_result() -> None:
    with _dag("fba_single") as dag:
        ladder = fallback_ladder("train", [Rung("only")], _py)
    assert sorted(dag.task_dict) == ["train.exhausted", "train.only", "train.result"]
    assert [d.task_id for d in ladder.decisions] == ["train.exhausted"]
    assert dag.task_dict["train.exhausted"].upstream_task_ids == {"train.only"}
    assert dag.task_dict["train.result"].upstream_task_ids == {"train.only"}


def test_a_ladder_in_a_task_group_reads_and_reports_its_rungs_by_their_full_ids() -> None:
    from airflow.sdk import TaskGroup

    with _dag("fba_nested") as dag, TaskGroup("en"):
        ladder = fallback_ladder("train", [Rung("a", start_within="1m"), Rung("b")], _py)
    assert ladder.group.group_id == "en.train"
    assert {"en.train.a", "en.train.a_start_deadline", "en.train.b", "en.train.result"} <= set(dag.task_dict)
    assert ladder.decisions[0].rung_task_id == "en.train.a"
    assert ladder.watchers[0] is not None and ladder.watchers[0].watched_task_id == "en.train.a"
    assert ladder.exhausted.ladder == [("en.train.a", "en.train.a_start_deadline"), ("en.train.b", None)]
    assert ladder.result.rung_task_ids == ["en.train.a", "en.train.b"]
    assert dag.task_dict["en.train.b"].executor_config["gpu_dag"]["fallback"]["ladder"] == "en.train"


# -- the ladder object --------------------------------------------------------------------------------


def test_the_ladder_holds_its_group_rungs_and_tasks_in_order() -> None:
    rungs = [Rung("a", start_within="1m"), Rung("b")]
    with _dag("fba_object") as dag:
        ladder = fallback_ladder("train", rungs, _py)
    assert ladder.group.group_id == "train" and ladder.rungs == rungs
    assert [t.task_id for t in ladder.rung_tasks] == ["train.a", "train.b"]
    assert [w.task_id if w else None for w in ladder.watchers] == ["train.a_start_deadline", None]
    assert ladder.result is dag.task_dict["train.result"]
    assert ladder.output.operator is ladder.result and ladder.output.key == "return_value"
    assert ladder.roots == [dag.task_dict["train.a"], dag.task_dict["train.a_start_deadline"]]
    assert ladder.leaves == [ladder.result]


def test_the_group_tooltip_shows_the_ladder_or_the_given_text() -> None:
    with _dag("fba_tooltip"):
        default = fallback_ladder("train", [Rung("a", start_within="1m"), Rung("b")], _py)
        given = fallback_ladder("eval", [Rung("c")], _py, tooltip="evaluate on any GPU")
    assert default.group.tooltip == "fallback ladder: a -> b"
    assert given.group.tooltip == "evaluate on any GPU"


def test_a_ladder_wires_to_lists_and_both_shift_directions() -> None:
    """Upstream tasks reach the first rung and its watcher; downstream tasks hang off ``result`` only."""
    from airflow.providers.standard.operators.empty import EmptyOperator

    with _dag("fba_shifts") as dag:
        a, b, z = (EmptyOperator(task_id=t) for t in ("a", "b", "z"))
        c, d = EmptyOperator(task_id="c"), EmptyOperator(task_id="d")
        ladder = fallback_ladder("train", [Rung("x", start_within="1m"), Rung("y")], _py)
        [a, b] >> ladder
        ladder << z
        ladder >> [c, d]
    t = dag.task_dict
    assert t["train.x"].upstream_task_ids == t["train.x_start_deadline"].upstream_task_ids == {"a", "b", "z"}
    assert t["train.y"].upstream_task_ids == {"train.fallback_to_y"}
    assert t["c"].upstream_task_ids == t["d"].upstream_task_ids == {"train.result"}
    edges_before = {(task.task_id, down) for task in dag.tasks for down in task.downstream_task_ids}
    ladder.update_relative(a)
    assert {(task.task_id, down) for task in dag.tasks for down in task.downstream_task_ids} == edges_before


def test_a_bad_watch_mode_is_a_fallback_error() -> None:
    with _dag("fba_mode"), pytest.raises(FallbackError, match=r"fallback ladder 'train'.*watch_mode"):
        fallback_ladder("train", [Rung("a", start_within="1m"), Rung("b")], _py, watch_mode="sometimes")


def test_a_ladder_checked_outside_a_dag_is_named_by_its_group_alone() -> None:
    """Its rungs are checked before any task is made, so the error comes even without a DAG to name."""
    with pytest.raises(FallbackError) as err:
        fallback_ladder("train", [], _py)
    assert str(err.value) == "fallback ladder 'train' has no rungs; give at least one Rung(...)"
