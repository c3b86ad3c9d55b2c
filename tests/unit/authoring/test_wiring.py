"""A gate put before a task that a branch chooses (``start_window``, ``budget_gate``) must not make the
branch skip that task.

A branch skips every task directly downstream of it that it does not follow. Once a gate sits between
the branch and the chosen task, the branch still returns the task's id; before, it skipped the gate,
and so the task it chose, and the run ended ``success`` with the chosen branch never run."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, TaskGroup, TriggerRule

from airflow_gpu_dag import gpu_hints
from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.authoring import budget_gate, data_edge, stage_dependency, start_window, validation_edge
from tests.unit.dag_files import dag_module

BRANCH_DAGS = textwrap.dedent(
    """
    from airflow.providers.standard.operators.python import BranchPythonOperator, PythonOperator
    from airflow.sdk import DAG, task

    from airflow_gpu_dag.authoring import branch_edge, start_window

    ALWAYS = {"opens": "00:00", "closes": "23:59:59"}

    # our branch_edge, the gate added after the branch
    with DAG("gab_branch_edge", schedule=None) as gab_branch_edge:
        ev = PythonOperator(task_id="evaluate", python_callable=lambda: {"acc": 0.95})
        deploy = PythonOperator(task_id="deploy", python_callable=lambda: "deployed")
        retrain = PythonOperator(task_id="retrain", python_callable=lambda: "retrained")
        pick = lambda r: "good" if r["acc"] > 0.9 else "bad"  # noqa: E731
        branch_edge(ev, {"good": deploy, "bad": retrain}, choose=pick)
        start_window(deploy, **ALWAYS)

    # Airflow's own branch operators, a templated task behind the gate
    with DAG("gab_task_branch", schedule=None) as gab_task_branch:
        @task.branch
        def pick():
            return "deploy"

        deploy = PythonOperator(task_id="deploy", python_callable=lambda x: x, op_args=["{{ run_id }}"])
        other = PythonOperator(task_id="other", python_callable=lambda: 1)
        pick() >> [deploy, other]
        start_window(deploy, **ALWAYS)
        start_window(other, **ALWAYS)

    with DAG("gab_operator_list", schedule=None) as gab_operator_list:
        b = BranchPythonOperator(task_id="pick", python_callable=lambda: ["a", "c"])
        a, bb, c = (PythonOperator(task_id=t, python_callable=lambda: 1) for t in ("a", "b", "c"))
        b >> [a, bb, c]
        for t in (a, bb):
            start_window(t, **ALWAYS)
    """
)


@pytest.fixture(scope="module")
def dags() -> Iterator[Any]:
    with dag_module("gpu_dag_gate_after_branch", BRANCH_DAGS) as module:
        yield module


def _states(module: Any, dag_id: str) -> tuple[str, dict[str, str | None]]:
    from airflow.utils.session import create_session

    run = getattr(module, dag_id).test()
    with create_session() as session:
        tis = run.get_task_instances(session=session)
        return str(run.state), {ti.task_id: (str(ti.state) if ti.state else None) for ti in tis}


def test_branch_edge_runs_the_chosen_task_behind_its_gate(dags: Any) -> None:
    state, states = _states(dags, "gab_branch_edge")
    assert states["deploy__window"] == "success" and states["deploy"] == "success", states
    assert states["retrain"] == "skipped", states
    assert state == "success"


def test_task_branch_runs_the_chosen_task_and_skips_the_other_gate(dags: Any) -> None:
    state, states = _states(dags, "gab_task_branch")
    assert states["deploy__window"] == "success" and states["deploy"] == "success", states
    assert states["other__window"] == "skipped" and states["other"] == "skipped", states
    assert state == "success"


def test_a_branch_to_several_tasks_follows_each_gate(dags: Any) -> None:
    _, states = _states(dags, "gab_operator_list")
    assert states["a__window"] == states["a"] == "success", states
    assert states["b__window"] == states["b"] == "skipped", states
    assert states["c"] == "success", states  # not gated: followed as before


def test_the_gate_is_followed_once_however_often_gates_are_added() -> None:
    from airflow.providers.standard.operators.python import BranchPythonOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag.authoring._wiring import follow_gate

    with DAG("gab_unit", schedule=None):
        branch = BranchPythonOperator(task_id="pick", python_callable=lambda: "x")
    seen: list[Any] = []
    branch.skip_all_except = lambda ti, ids: seen.append(ids)  # what Airflow's method would receive
    follow_gate(branch, "x", "x__window")
    wrapped = branch.skip_all_except
    follow_gate(branch, "y", "y__budget")
    assert branch.skip_all_except is wrapped  # wrapped once
    branch.skip_all_except(object(), "x")
    branch.skip_all_except(object(), ["y", "z"])
    branch.skip_all_except(object(), None)  # skip everything: nothing to add
    assert seen == [["x", "x__window"], ["y", "z", "y__budget"], None]


# -- Gates and sensors a helper adds for a task inside a task group sit in that group, with the id the


def test_start_window_outside_the_group_context() -> None:
    with DAG("g1", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        with TaskGroup("grp"):
            train = EmptyOperator(task_id="train")
        prep >> train
    sensor = start_window(train, opens="22:00", closes="06:00")
    assert sensor.task_id == "grp.train__window"
    assert sensor.task_group.group_id == "grp"
    assert dag.task_group_dict["grp"].children.keys() >= {"grp.train", "grp.train__window"}
    assert sensor.upstream_task_ids == {"prep"} and sensor.downstream_task_ids == {"grp.train"}


def test_start_window_inside_the_group_context() -> None:
    with DAG("g2", schedule=None), TaskGroup("grp"):
        train = EmptyOperator(task_id="train")
        sensor = start_window(train, opens="22:00", closes="06:00")
    assert sensor.task_id == "grp.train__window" and sensor.task_group.group_id == "grp"


def test_start_window_of_a_root_task_keeps_its_id() -> None:
    with DAG("g3", schedule=None):
        train = EmptyOperator(task_id="train")
    assert start_window(train, opens="22:00", closes="06:00").task_id == "train__window"


def test_stage_dependency_sensor_sits_in_the_training_task_group() -> None:
    with DAG("g4", schedule=None):
        with TaskGroup("grp"):
            train = EmptyOperator(task_id="train")
        evaluate = EmptyOperator(task_id="evaluate")
        sensor = stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=10, timeout=600)
    assert sensor.task_id == "grp.wait_train_ckpt_10" and sensor.task_group.group_id == "grp"
    assert sensor.training_task_id == "grp.train"
    assert sensor.downstream_task_ids == {"evaluate"}


# -- A gate inserted before a task (``start_window``'s sensor, ``budget_gate``) takes the task's trigger


BRANCH_DAGS_gate_trigger_rules = textwrap.dedent(
    """
    import datetime
    from airflow.sdk import DAG
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.providers.standard.operators.python import BranchPythonOperator
    from airflow_gpu_dag.authoring import start_window

    for dag_id, gated in (("join_plain", False), ("join_window", True)):
        with DAG(dag_id, schedule=None, start_date=datetime.datetime(2026, 1, 1)) as dag:
            branch = BranchPythonOperator(task_id="branch", python_callable=lambda: "a")
            a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
            train = EmptyOperator(task_id="train", trigger_rule="none_failed_min_one_success")
            branch >> [a, b] >> train
            if gated:
                start_window(train, opens="2000-01-01T00:00:00", closes="2999-01-01T00:00:00")
        globals()[dag_id] = dag
    """
)


@pytest.fixture(scope="module")
def branch_dags() -> Iterator[Any]:
    with dag_module("gpu_dag_gate_rules", BRANCH_DAGS_gate_trigger_rules) as module:
        yield module


def _states_gate_trigger_rules(dag: Any) -> tuple[str, dict[str, str]]:
    from airflow.utils.session import create_session

    run = dag.test()
    with create_session() as session:
        return str(run.state), {ti.task_id: str(ti.state) for ti in run.get_task_instances(session=session)}


def test_a_window_before_a_branch_join_keeps_the_join_running(branch_dags: Any) -> None:
    plain_state, plain = _states_gate_trigger_rules(branch_dags.join_plain)
    state, gated = _states_gate_trigger_rules(branch_dags.join_window)
    assert (plain_state, plain["train"]) == ("success", "success")
    assert (state, gated["train"], gated["b"]) == ("success", "success", "skipped")


def test_the_gate_takes_the_rule_and_the_task_follows_its_gate(tmp_path: Path) -> None:
    with DAG("rules", schedule=None):
        up = EmptyOperator(task_id="up")
        alert = EmptyOperator(task_id="alert", trigger_rule="one_failed")
        up >> alert
        gate = budget_gate(alert, gpu_hours_per_run=10, ledger=str(tmp_path / "u.jsonl"))
        plain = EmptyOperator(task_id="plain")
        up >> plain
        plain_gate = budget_gate(plain, gpu_hours_per_run=10, ledger=str(tmp_path / "u.jsonl"))
        teardown = EmptyOperator(task_id="clean").as_teardown()
        with pytest.raises(ValueError, match="task 'clean' is a teardown"):
            start_window(teardown, opens="00:00", closes="01:00")
    assert (gate.trigger_rule, alert.trigger_rule) == (TriggerRule.ONE_FAILED, TriggerRule.ALL_SUCCESS)
    assert gate.upstream_task_ids == {"up"} and alert.upstream_task_ids == {gate.task_id}
    assert (plain_gate.trigger_rule, plain.trigger_rule) == (TriggerRule.ALL_SUCCESS, TriggerRule.ALL_SUCCESS)


@pytest.mark.usefixtures("_deferring")
def test_wiring_tasks_declare_a_zero_estimate() -> None:
    """Sensors, gates and branches added by the helpers must not pad the plan with the default estimate."""
    from airflow_gpu_dag.authoring import budget_gate
    from airflow_gpu_dag.core.analysis.validation import validate_graph

    with DAG("wired", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep", executor_config=gpu_hints(duration="20m"))
        train = EmptyOperator(task_id="train", pool="gpu_default", executor_config=gpu_hints(duration="1h"))
        evaluate = EmptyOperator(task_id="evaluate", executor_config=gpu_hints(duration="15m"))
        data_edge(prep, train, path="/lake/clean", timeout=60)
        validation_edge(train, evaluate, check=lambda value: True)
        start_window(evaluate, opens="22:00", closes="06:00")
        budget_gate(train, gpu_hours_per_pool_day=10)
    graph, findings = build_task_graph(dag)
    added = set(graph.nodes) - {"prep", "train", "evaluate"}
    assert len(added) == 4
    assert all(graph.nodes[t].duration == 0 and graph.nodes[t].duration_declared for t in added)
    report = validate_graph(graph, extra=findings)
    assert [f for f in report.findings if f.code == "missing-estimate"] == []


# -- The graph surgery itself (``_wiring``): names, labels, moved edges, gates a branch follows.


def _all_edges(dag: DAG) -> set[tuple[str, str]]:
    return {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}


def _label(dag: DAG, up: str, down: str) -> str | None:
    return ((dag.edge_info.get(up) or {}).get(down) or {}).get("label")


def test_where_of_names_the_dag_only_when_the_task_has_one() -> None:
    from types import SimpleNamespace

    from airflow_gpu_dag.authoring._wiring import where_of

    with DAG("wo", schedule=None) as dag:
        inside = EmptyOperator(task_id="inside")
    loose = EmptyOperator(task_id="loose")
    assert where_of(inside) == "DAG 'wo', task 'inside'"
    assert where_of(loose) == "task 'loose'"
    # a task-like object without has_dag(): its dag attribute, if any
    assert where_of(SimpleNamespace(task_id="fake", dag=dag)) == "DAG 'wo', task 'fake'"
    assert where_of(SimpleNamespace(task_id="fake")) == "task 'fake'"


def test_require_dag_returns_the_dag_or_names_the_helper_and_the_fix() -> None:
    from airflow_gpu_dag.authoring._wiring import require_dag

    with DAG("rd", schedule=None) as dag:
        inside = EmptyOperator(task_id="inside")
    assert require_dag(inside, "start_window") is dag
    with pytest.raises(
        ValueError,
        match=r"task 'l\u00f6se': create it inside a DAG \(with DAG\(\.\.\.\):\) before calling cleanup\(\)",
    ):
        require_dag(EmptyOperator(task_id="l\u00f6se"), "cleanup")


def test_labelled_joins_two_tasks_of_different_groups_and_nothing_else() -> None:
    """Airflow's ``a >> Label(x) >> b`` would join the groups (every leaf of ``g`` to every root of ``h``)."""
    from airflow_gpu_dag.authoring._wiring import labelled

    with DAG("lab_groups", schedule=None) as dag:
        with TaskGroup("g"):
            train = EmptyOperator(task_id="train")
            EmptyOperator(task_id="other_leaf")
        with TaskGroup("h"):
            evaluate = EmptyOperator(task_id="eval")
            EmptyOperator(task_id="other_root")
    labelled(train, evaluate, "data")
    assert _all_edges(dag) == {("g.train", "h.eval")}
    assert _label(dag, "g.train", "h.eval") == "data"


def test_labelled_labels_each_edge_to_a_list_or_to_a_groups_roots() -> None:
    from airflow_gpu_dag.authoring._wiring import labelled

    with DAG("lab_many", schedule=None) as dag:
        up = EmptyOperator(task_id="up")
        b, c = EmptyOperator(task_id="b"), EmptyOperator(task_id="c")
        with TaskGroup("grp") as grp:
            first, second = EmptyOperator(task_id="first"), EmptyOperator(task_id="second")
            first >> second
    labelled(up, [b, c], "cleanup")
    labelled(up, grp, "time")
    assert up.downstream_task_ids == {"b", "c", "grp.first"}
    assert (_label(dag, "up", "b"), _label(dag, "up", "c")) == ("cleanup", "cleanup")
    assert _label(dag, "up", "grp.first") == "time"
    assert "up" not in second.upstream_task_ids


def test_check_gatable_refuses_a_task_of_a_mapped_group_naming_dag_task_and_fix() -> None:
    from airflow.sdk import task_group

    from airflow_gpu_dag.authoring._wiring import check_gatable

    with DAG("gate_mapped_group", schedule=None) as dag:

        @task_group
        def trial(x: int) -> None:
            EmptyOperator(task_id="fit")

        trial.expand(x=[1, 2])
        plain = EmptyOperator(task_id="plain")
    assert check_gatable(plain) is dag
    with pytest.raises(
        ValueError,
        match=r"DAG 'gate_mapped_group', task 'trial.fit' is mapped .* Fix: gate a task that is not",
    ):
        check_gatable(dag.get_task("trial.fit"))


def test_insert_before_moves_every_upstream_edge_with_its_label() -> None:
    from airflow.sdk import Label

    from airflow_gpu_dag.authoring._wiring import insert_before

    with DAG("ib_labels", schedule=None) as dag:
        a, c, task, gate = (EmptyOperator(task_id=t) for t in ("a", "c", "task", "gate"))
        a >> Label("data") >> task
        c >> task
    insert_before(task, gate, "time")
    assert _all_edges(dag) == {("a", "gate"), ("c", "gate"), ("gate", "task")}
    assert _label(dag, "a", "gate") == "data"
    assert _label(dag, "c", "gate") is None  # an unlabelled edge stays unlabelled
    assert _label(dag, "gate", "task") == "time"
    assert _label(dag, "a", "task") is None  # no label left on the removed edge
    dag.check_cycle()


def test_insert_before_a_root_task_only_adds_the_gate_edge() -> None:
    from airflow_gpu_dag.authoring._wiring import insert_before

    with DAG("ib_root", schedule=None) as dag:
        task, gate = EmptyOperator(task_id="task"), EmptyOperator(task_id="gate")
    insert_before(task, gate)
    assert _all_edges(dag) == {("gate", "task")}
    assert _label(dag, "gate", "task") is None
    assert gate.trigger_rule == TriggerRule.ALL_SUCCESS


def test_two_gates_before_one_task_are_chained_and_the_branch_follows_the_first() -> None:
    from airflow.providers.standard.operators.python import BranchPythonOperator

    from airflow_gpu_dag.authoring._wiring import insert_before

    with DAG("ib_two", schedule=None) as dag:
        branch = BranchPythonOperator(task_id="pick", python_callable=lambda: "task")
        task, window, budget = (EmptyOperator(task_id=t) for t in ("task", "task__window", "task__budget"))
        branch >> task
    seen: list[Any] = []
    branch.skip_all_except = lambda ti, ids: seen.append(ids)
    insert_before(task, window, "time")
    insert_before(task, budget, "budget")
    assert _all_edges(dag) == {
        ("pick", "task__window"),
        ("task__window", "task__budget"),
        ("task__budget", "task"),
    }
    branch.skip_all_except(object(), "task")
    assert seen == [["task", "task__window"]]


def test_insert_before_a_teardown_changes_nothing() -> None:
    from airflow_gpu_dag.authoring._wiring import insert_before

    with DAG("ib_teardown", schedule=None) as dag:
        work = EmptyOperator(task_id="work")
        free = EmptyOperator(task_id="free").as_teardown()
        gate = EmptyOperator(task_id="gate")
        work >> free
    with pytest.raises(ValueError, match=r"DAG 'ib_teardown', task 'free' is a teardown.*Fix: put the gate"):
        insert_before(free, gate)
    assert _all_edges(dag) == {("work", "free")}


def test_follow_gate_accepts_any_collection_of_ids_and_adds_each_gate_once() -> None:
    from airflow.providers.standard.operators.python import BranchPythonOperator

    from airflow_gpu_dag.authoring._wiring import follow_gate

    with DAG("fg_ids", schedule=None):
        branch = BranchPythonOperator(task_id="pick", python_callable=lambda: "x")
    seen: list[Any] = []
    branch.skip_all_except = lambda ti, ids: seen.append(ids)
    follow_gate(branch, "x", "x__window")
    branch.skip_all_except(object(), ("x",))
    branch.skip_all_except(object(), ["x", "x__window"])  # the gate chosen already: not twice
    branch.skip_all_except(object(), [])
    assert seen == [["x", "x__window"], ["x", "x__window"], []]


def test_follow_gate_runs_the_original_on_the_rendered_copy_airflow_runs() -> None:
    """Airflow runs a rendered copy of the operator (``ti.task``): the saved method must run on it."""
    from types import SimpleNamespace

    from airflow.providers.standard.operators.python import BranchPythonOperator

    from airflow_gpu_dag.authoring._wiring import follow_gate

    ran_on: list[Any] = []

    class Recording(BranchPythonOperator):
        def skip_all_except(self, ti: Any, branch_task_ids: Any) -> None:
            ran_on.append((self, branch_task_ids))

    with DAG("fg_copy", schedule=None):
        parsed = Recording(task_id="pick", python_callable=lambda: "x")
        rendered = Recording(task_id="pick_copy", python_callable=lambda: "x")
    follow_gate(parsed, "x", "x__window")
    parsed.skip_all_except(SimpleNamespace(task=rendered), "x")
    parsed.skip_all_except(SimpleNamespace(task=None), "x")
    assert ran_on == [(rendered, ["x", "x__window"]), (parsed, ["x", "x__window"])]


def test_run_original_calls_a_plain_function_as_it_is() -> None:
    from airflow_gpu_dag.authoring._wiring import run_original

    parsed = EmptyOperator(task_id="parsed_ro")
    assert run_original(parsed, lambda *args: args, object(), 1, 2) == (1, 2)


def test_as_operator_unwraps_a_taskflow_result_and_keeps_anything_else() -> None:
    from types import SimpleNamespace

    from airflow.sdk import task

    from airflow_gpu_dag.authoring._wiring import as_operator

    with DAG("as_op", schedule=None):

        @task
        def fit() -> int:
            return 1

        result = fit()
        plain = EmptyOperator(task_id="plain")
    assert as_operator(result) is result.operator and as_operator(plain) is plain
    odd = SimpleNamespace(operator=object())  # an ``operator`` that is no task: kept as given
    assert as_operator(odd) is odd
