"""Control edges (``exit_code_edge``, ``validation_edge``, ``branch_edge``) take an ``@task`` call's result
as docs/edges.md promises, refuse a mapped upstream whose return value a gate cannot read, and never let
a second ``exit_code_edge`` of one upstream silently replace the first one's skip codes."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, TaskGroup, task

from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.authoring import branch_edge, exit_code_edge, validation_edge
from tests.unit.authoring.conftest import edge_kinds
from tests.unit.dag_files import dag_module


def _converged(value: object) -> bool:
    return isinstance(value, dict) and float(value["loss"]) < 0.1


def _pick(value: object) -> str:
    return "good" if isinstance(value, dict) and value["acc"] > 0.9 else "bad"


RUN_DAGS = textwrap.dedent(
    """
    from airflow.sdk import DAG, task

    from airflow_gpu_dag.authoring import branch_edge, validation_edge


    def converged(value):
        return value["loss"] < 0.1


    def pick(value):
        return "good" if value["acc"] > 0.9 else "bad"


    def validated(dag_id, loss):
        with DAG(dag_id, schedule=None) as dag:
            @task
            def train():
                return {"loss": loss}

            @task
            def deploy():
                return "deployed"

            validation_edge(train(), deploy(), check=converged)
        return dag


    tf_good = validated("tf_good", 0.05)
    tf_bad = validated("tf_bad", 0.5)

    with DAG("tf_branch_run", schedule=None) as tf_branch_run:
        @task
        def evaluate():
            return {"acc": 0.95}

        @task
        def deploy():
            return "deployed"

        @task
        def retrain():
            return "retrained"

        branch_edge(evaluate(), {"good": deploy(), "bad": retrain()}, choose=pick)
    """
)


@pytest.fixture(scope="module")
def run_dags() -> Iterator[Any]:
    with dag_module("gpu_dag_control_taskflow", RUN_DAGS) as module:
        yield module


def _states(module: Any, dag_id: str) -> dict[str, str | None]:
    from airflow.utils.session import create_session

    run = getattr(module, dag_id).test()
    with create_session() as session:
        return {
            ti.task_id: (str(ti.state) if ti.state else None)
            for ti in run.get_task_instances(session=session)
        }


def test_validation_edge_takes_taskflow_results() -> None:
    with DAG("tf_validate", schedule=None) as dag:

        @task
        def train() -> dict[str, float]:
            return {"loss": 0.0}

        @task
        def report() -> None:
            return None

        deploy = BashOperator(task_id="deploy", bash_command="true")
        gate = validation_edge(train(), deploy, check=bool)
        other = validation_edge(deploy, report(), check=bool, on_invalid="fail")
    assert gate.task_id == "check_train" and gate.op_kwargs["upstream_task_id"] == "train"
    assert other.task_id == "check_deploy"
    kinds = edge_kinds(dag)
    assert kinds[("train", "check_train")] == kinds[("check_train", "deploy")] == "control"
    assert kinds[("check_deploy", "report")] == "control"


def test_branch_edge_takes_taskflow_upstream_and_targets() -> None:
    with DAG("tf_branch", schedule=None) as dag:

        @task
        def evaluate() -> dict[str, float]:
            return {"acc": 0.95}

        @task
        def deploy() -> None:
            return None

        retrain = EmptyOperator(task_id="retrain")
        gate = branch_edge(evaluate(), {"good": deploy(), "bad": retrain}, choose=_pick)
    assert gate.task_id == "branch_evaluate"
    kinds = edge_kinds(dag)
    assert kinds[("evaluate", "branch_evaluate")] == "control"
    assert kinds[("branch_evaluate", "deploy")] == kinds[("branch_evaluate", "retrain")] == "control"


def test_exit_code_edge_takes_taskflow_results() -> None:
    with DAG("tf_exit", schedule=None) as dag:

        @task.bash
        def train() -> str:
            return "exit 0"

        @task
        def evaluate() -> None:
            return None

        run: Any = train()
        exit_code_edge(run, evaluate(), skip_on=97)
    assert run.operator.skip_on_exit_code == [97]
    assert edge_kinds(dag)[("train", "evaluate")] == "control"


def test_exit_code_edge_refuses_a_plain_task_with_the_fix() -> None:
    with DAG("tf_exit_python", schedule=None):

        @task
        def train() -> int:
            return 0

        with pytest.raises(ValueError, match=r"DAG 'tf_exit_python', task 'train': .*@task\.bash.*Fix: "):
            exit_code_edge(train(), EmptyOperator(task_id="evaluate"))


def test_exit_code_edge_sets_the_codes_of_every_instance_of_a_mapped_task() -> None:
    with DAG("tf_exit_mapped", schedule=None):
        mapped: Any = BashOperator.partial(task_id="trial").expand(bash_command=["exit 0", "exit 98"])

        @task.bash
        def sweep(lr: float) -> str:
            return f"train --lr {lr}"

        swept: Any = sweep.expand(lr=[0.1, 0.01])
        exit_code_edge(mapped, EmptyOperator(task_id="summary"), skip_on=98)
        exit_code_edge(swept, EmptyOperator(task_id="pick"), skip_on=[98, 99])
    assert mapped.unmap({"bash_command": "exit 98"}).skip_on_exit_code == [98]
    assert swept.operator.unmap({"op_kwargs": {"lr": 0.1}}).skip_on_exit_code == [98, 99]


def test_a_gate_refuses_a_mapped_upstream_with_the_fix() -> None:
    with DAG("tf_mapped", schedule=None):

        @task
        def trial(lr: float) -> dict[str, float]:
            return {"loss": lr}

        deploy = EmptyOperator(task_id="deploy")
        with pytest.raises(ValueError, match=r"DAG 'tf_mapped', task 'trial' is mapped.*Fix: "):
            validation_edge(trial.expand(lr=[0.1, 0.2]), deploy, check=_converged)
        with pytest.raises(ValueError, match=r"DAG 'tf_mapped', task 'trial__1' is mapped.*Fix: "):
            branch_edge(trial.expand(lr=[0.1]), {"good": deploy}, choose=_pick)
        # a mapped task downstream (or as a branch target) is fine: the gate skips it as a whole
        validation_edge(deploy, trial.expand(lr=[0.3]), check=_converged)


def test_exit_code_edge_twice_with_the_same_codes_wires_both_chains() -> None:
    with DAG("twice_same", schedule=None) as dag:
        train = BashOperator(task_id="train", bash_command="exit 0")
        ev, deploy, report = (EmptyOperator(task_id=t) for t in ("evaluate", "deploy", "report"))
        exit_code_edge(train, ev, skip_on=[99, 98])
        exit_code_edge(train, deploy, skip_on=[98, 99])
        exit_code_edge(train, [report], skip_on=[98, 99])
    assert train.skip_on_exit_code == [98, 99]
    kinds = edge_kinds(dag)
    assert (
        kinds[("train", "evaluate")] == kinds[("train", "deploy")] == kinds[("train", "report")] == "control"
    )


def test_exit_code_edge_twice_with_other_codes_is_refused_and_keeps_the_first() -> None:
    with DAG("twice_other", schedule=None) as dag:
        train = BashOperator(task_id="train", bash_command="exit 0")
        ev, deploy = EmptyOperator(task_id="evaluate"), EmptyOperator(task_id="deploy")
        exit_code_edge(train, ev, skip_on=99)
        with pytest.raises(
            ValueError,
            match=r"DAG 'twice_other', task 'train': an earlier exit_code_edge\(\) gave it skip_on=\[99\], "
            r"this one skip_on=\[98\].*Fix: pass the same skip_on=\[98, 99\]",
        ):
            exit_code_edge(train, deploy, skip_on=98)
    assert train.skip_on_exit_code == [99]  # exit 99 still skips, as the first call promised
    assert ("train", "deploy") not in edge_kinds(dag)


def test_the_operators_own_codes_are_still_replaced_by_the_first_call() -> None:
    """BashOperator skips on 99 by default; ``skip_on=98`` means 98 skips and 99 fails, as before."""
    with DAG("own_codes", schedule=None):
        train = BashOperator(task_id="train", bash_command="exit 0")
        exit_code_edge(train, EmptyOperator(task_id="evaluate"), skip_on=98)
    assert train.skip_on_exit_code == [98]


def test_validation_of_a_taskflow_result_gates_the_chain(run_dags: Any) -> None:
    good, bad = _states(run_dags, "tf_good"), _states(run_dags, "tf_bad")
    assert (good["check_train"], good["deploy"]) == ("success", "success"), good
    assert (bad["check_train"], bad["deploy"]) == ("success", "skipped"), bad


def test_branch_on_a_taskflow_result_runs_the_chosen_task(run_dags: Any) -> None:
    states = _states(run_dags, "tf_branch_run")
    assert (states["deploy"], states["retrain"]) == ("success", "skipped"), states


def test_control_edges_from_a_task_group_wire_only_their_upstream() -> None:
    with DAG("groups_control", schedule=None) as dag:
        with TaskGroup("fit"):
            train = BashOperator(task_id="train", bash_command="true")
            evaluate = EmptyOperator(task_id="evaluate")
            EmptyOperator(task_id="report")  # another leaf of the group
        deploy = EmptyOperator(task_id="deploy")
        retrain = EmptyOperator(task_id="retrain")
        exit_code_edge(train, retrain, skip_on=99)
        gate = branch_edge(evaluate, {"good": deploy}, choose=lambda v: "good")
    assert retrain.upstream_task_ids == {"fit.train"}
    assert gate.upstream_task_ids == {"fit.evaluate"}
    assert dag.edge_info["fit.evaluate"][gate.task_id] == {"label": "control"}


@pytest.mark.parametrize("skip_on", [99.0, None])
def test_exit_code_edge_non_code_names_the_task(skip_on: object) -> None:
    with DAG("exit_odd", schedule=None):
        train = BashOperator(task_id="train", bash_command="true")
        evaluate = EmptyOperator(task_id="evaluate")
        with pytest.raises(ValueError, match=r"DAG 'exit_odd', task 'train': skip_on=.*Fix"):
            exit_code_edge(train, evaluate, skip_on=skip_on)  # type: ignore[arg-type]
    assert evaluate.upstream_task_ids == set()


def test_branch_edge_refuses_a_choose_that_is_not_callable() -> None:
    with DAG("branch_odd", schedule=None) as dag:
        evaluate = EmptyOperator(task_id="evaluate")
        deploy = EmptyOperator(task_id="deploy")
        with pytest.raises(ValueError, match=r"DAG 'branch_odd', task 'branch_evaluate': choose='good'.*Fix"):
            branch_edge(evaluate, {"good": deploy}, choose="good")  # type: ignore[arg-type]
    assert set(dag.task_dict) == {"evaluate", "deploy"}


def _kinds_edges(dag: DAG) -> dict[tuple[str, str], str | None]:
    graph, _ = build_task_graph(dag)
    return {(u, d): graph._down[u][d] for u in graph._down for d in graph._down[u]}


@pytest.mark.usefixtures("_deferring")
def test_exit_code_edge_sets_skip_codes_and_label() -> None:
    with DAG("c", schedule=None) as dag:
        train = BashOperator(task_id="train", bash_command="exit 0")
        ev = EmptyOperator(task_id="eval")
        exit_code_edge(train, ev, skip_on=[3, 4])
        with pytest.raises(ValueError, match=r"task 'eval'.*skip_on_exit_code"):
            exit_code_edge(ev, train)
        with pytest.raises(ValueError, match=r"exit codes 1..255"):
            exit_code_edge(train, ev, skip_on=0)
    assert train.skip_on_exit_code == [3, 4]
    assert _kinds_edges(dag)[("train", "eval")] == "control"


@pytest.mark.usefixtures("_deferring")
def test_validation_and_branch_edges() -> None:
    with DAG("v", schedule=None) as dag:
        train = EmptyOperator(task_id="train")
        ev = EmptyOperator(task_id="eval")
        gate = validation_edge(train, ev, check=_converged)
        deploy, retrain = EmptyOperator(task_id="deploy"), EmptyOperator(task_id="retrain")
        branch = branch_edge(ev, {"good": deploy, "bad": retrain}, choose=lambda v: "good")
        with pytest.raises(ValueError, match=r"on_invalid='maybe'"):
            validation_edge(train, ev, check=_converged, on_invalid="maybe", task_id="x")
    assert type(gate).__name__ == "ShortCircuitOperator" and gate.ignore_downstream_trigger_rules
    kinds = _kinds_edges(dag)
    assert kinds[("train", "check_train")] == kinds[("check_train", "eval")] == "control"
    assert kinds[(branch.task_id, "deploy")] == "control"
