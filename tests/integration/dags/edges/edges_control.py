"""Control edges: exit-code skip, validation (convergence) short-circuit; cleanup semantics."""

from __future__ import annotations

from datetime import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_gpu_dag.authoring import cleanup, exit_code_edge, validation_edge

START = datetime(2026, 1, 1)


def fit(**context: object) -> dict[str, float]:
    return {"loss": float(context["dag_run"].conf.get("loss", 0.05))}  # type: ignore[attr-defined]


def converged(value: dict[str, float]) -> bool:
    return value["loss"] < 0.1


with DAG("edges_control", schedule=None, start_date=START, catchup=False, tags=["edges"]):
    train = BashOperator(task_id="train", bash_command="exit {{ dag_run.conf.get('code', 0) }}")
    evaluate = BashOperator(task_id="evaluate", bash_command="true")
    report = BashOperator(task_id="report", bash_command="true")
    exit_code_edge(train, evaluate, skip_on=99)
    evaluate >> report

    fit_task = PythonOperator(task_id="fit", python_callable=fit)
    deploy = BashOperator(task_id="deploy", bash_command="true")
    notify = BashOperator(task_id="notify", bash_command="true", trigger_rule="all_done")
    validation_edge(fit_task, deploy, check=converged)
    deploy >> notify

# cleanup as a teardown: runs whatever happened, and the run state stays truthful
with DAG("edges_cleanup", schedule=None, start_date=START, catchup=False, tags=["edges"]):
    work = BashOperator(task_id="train", bash_command="exit {{ dag_run.conf.get('code', 0) }}")
    free = BashOperator(task_id="free_scratch", bash_command="true")
    cleanup(free, after=work)

# the pitfall the cleanup helper avoids: an all_done leaf decides the run state
with DAG("edges_cleanup_naive", schedule=None, start_date=START, catchup=False, tags=["edges"]):
    work = BashOperator(task_id="train", bash_command="exit 1")
    free = BashOperator(task_id="free_scratch", bash_command="true", trigger_rule="all_done")
    work >> free
    EmptyOperator(task_id="unused_root") >> free
