"""The DAG-authoring helpers with inputs they got wrong: each was a bare AttributeError (after
changing the DAG), a silent no-op or a cycle; now a parse-time error naming the DAG, the task and the
fix, or the right wiring."""

from __future__ import annotations

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task

from airflow_gpu_dag.authoring import cleanup, failure_policy, stage_dependency, start_window


def test_stage_dependency_refuses_a_path_that_makes_it_useless_or_a_cycle() -> None:
    with DAG("stages", schedule=None):
        train, x, evaluate = (
            EmptyOperator(task_id="train"),
            EmptyOperator(task_id="x"),
            EmptyOperator(task_id="eval"),
        )
        train >> x >> evaluate  # eval already waits for train to finish, through x
        with pytest.raises(
            ValueError, match=r"DAG 'stages': task 'eval' already waits for 'train'.*path from"
        ):
            stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=1, timeout=60)
        with pytest.raises(ValueError, match=r"task 'eval' runs after 'train'.*\(a cycle\)"):
            stage_dependency(evaluate, train, checkpoint_dir="/ckpt", step=1, timeout=60)
    assert {t.task_id for t in train.dag.tasks} == {"train", "x", "eval"}  # nothing added


def test_helpers_take_taskflow_results() -> None:
    with DAG("flow", schedule=None) as dag:

        @task
        def work() -> int:
            return 1

        @task
        def tidy() -> None:
            pass

        @task
        def evaluate() -> None:
            pass

        done, cleaned, checked = work(), tidy(), evaluate()
        failure_policy(done, "skip")
        cleanup(cleaned, after=done)
        sensor = stage_dependency(done, checked, checkpoint_dir="/ckpt", step=2, timeout=60)
    assert dag.get_task("tidy").is_teardown and "work" in dag.get_task("tidy").upstream_task_ids
    assert dag.get_task("evaluate").upstream_task_ids == {sensor.task_id}


def test_mapped_tasks_are_refused_before_anything_changes() -> None:
    with DAG("mapped", schedule=None) as dag:

        @task
        def trial(x: int) -> int:
            return x

        up = EmptyOperator(task_id="up")
        trials = trial.expand(x=[1, 2])
        up >> trials
        with pytest.raises(
            ValueError, match=r"DAG 'mapped', task 'trial': the 'skip' policy needs a task that is not mapped"
        ):
            failure_policy(trials, "skip", retries=1)
        failure_policy(trials, "retry", retries=3, delay="1m")  # retry works on a mapped task
        with pytest.raises(
            ValueError, match=r"task 'trial' is mapped \(\.expand\(\)\): a gate cannot be inserted"
        ):
            start_window(trials, opens="00:00", closes="06:00")
    mapped = dag.get_task("trial")
    assert mapped.upstream_task_ids == {"up"} and len(dag.tasks) == 2  # no sensor, edges untouched
    assert mapped.retries == 3 and mapped.retry_delay.total_seconds() == 60


def test_cleanup_after_itself_is_an_error() -> None:
    with DAG("self", schedule=None):
        a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
        with pytest.raises(
            ValueError, match=r"DAG 'self', task 'b': cleanup\(\) lists the task in its own after="
        ):
            cleanup(b, after=[a, b])


def test_sensor_mode_still_orders_two_writers_of_one_path() -> None:
    # w1 and w2 write /lake/p, reader reads it, reader >> w2. The sensor for (w1, reader) does not
    # order w1 before anything; before, the planning copy's w1 -> reader edge made (w1, w2) look
    # ordered, no edge was added, and the two writers still raced (lint warned after the fix).
    from airflow.providers.standard.operators.bash import BashOperator

    from airflow_gpu_dag import gpu_hints
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.authoring import fix_hidden_dependencies
    from airflow_gpu_dag.core.analysis.validation import hidden_dependency_pairs

    def bash(task_id: str, inputs: tuple[str, ...] = (), outputs: tuple[str, ...] = ()) -> BashOperator:
        return BashOperator(
            task_id=task_id, bash_command="true", executor_config=gpu_hints(inputs=inputs, outputs=outputs)
        )

    with DAG("race", schedule=None) as dag:
        w1 = bash("w1", outputs=("/lake/p",))
        reader = bash("reader", inputs=("/lake/p",))
        w2 = bash("w2", outputs=("/lake/p",))
        reader >> w2
    fixes = fix_hidden_dependencies(dag, mode="sensor", timeout=60)
    graph, _ = build_task_graph(dag)
    assert "w2" in graph.descendants("w1") or "w1" in graph.descendants("w2"), fixes
    assert [(f.writer, f.other) for f in fixes if f.how == "edge"] == [("w1", "w2")]
    assert hidden_dependency_pairs(graph) == []  # nothing left racing
    assert w1.downstream_task_ids >= {"w2"}
