"""``gpu_hints``' dataset paths: one path given as a string (or a path object) is one path, not the list
of its characters."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow.policy import validate_dag
from airflow_gpu_dag.executor_config import HINTS_KEY


@pytest.mark.parametrize("argument", ["inputs", "outputs", "awaits"])
@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("/lake/raw", ["/lake/raw"]),
        (Path("/lake/raw"), ["/lake/raw"]),
        (PurePosixPath("/lake/raw"), ["/lake/raw"]),
        (b"/lake/raw", ["/lake/raw"]),
        (["/lake/raw", Path("/lake/b")], ["/lake/raw", "/lake/b"]),
        (("s3://bucket/a",), ["s3://bucket/a"]),
    ],
)
def test_one_path_is_a_list_of_one(argument: str, given: Any, stored: list[str]) -> None:
    assert gpu_hints(**{argument: given})[HINTS_KEY] == {argument: stored}


@pytest.mark.parametrize("empty", ["", (), [], None])
def test_no_path_stores_nothing(empty: Any) -> None:
    assert gpu_hints(inputs=empty, outputs=empty, awaits=empty)[HINTS_KEY] == {}


def test_an_object_storage_path_keeps_its_scheme() -> None:
    from airflow.sdk import ObjectStoragePath

    assert gpu_hints(outputs=ObjectStoragePath("s3://bucket/features"))[HINTS_KEY] == {
        "outputs": ["s3://bucket/features"]
    }
    # with a connection, str() gives s3://lake@bucket/...: the hidden-dependency check compares paths
    with_conn = ObjectStoragePath("s3://bucket/features", conn_id="lake")
    assert gpu_hints(inputs=[with_conn], outputs=with_conn)[HINTS_KEY] == {
        "inputs": ["s3://bucket/features"],
        "outputs": ["s3://bucket/features"],
    }


def test_string_paths_of_unrelated_tasks_are_no_hidden_dependency() -> None:
    """Split into characters, every task with a string path read and wrote "/", "l", "a", ...: two
    unrelated tasks were reported as a hidden dependency (and ``fix_hidden_dependencies`` added an
    edge between them)."""

    def dag(wrap: Any) -> DAG:
        with DAG("paths", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}, schedule=None) as dag:
            hints = {"duration": "20m"}
            BashOperator(
                task_id="featurize",
                bash_command="x",
                executor_config=gpu_hints(**hints, outputs=wrap("/lake/f")),
            )
            BashOperator(
                task_id="report",
                bash_command="x",
                executor_config=gpu_hints(**hints, inputs=wrap("/lake/raw")),
            )
        return dag

    for wrap in (str, lambda p: [p]):
        assert [f for f in validate_dag(dag(wrap)).findings if f.code == "hidden-dependency"] == []
    # the same path written and read: still found
    with DAG("paths2", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}, schedule=None) as same:
        BashOperator(task_id="write", bash_command="x", executor_config=gpu_hints(outputs="/lake/f"))
        BashOperator(task_id="read", bash_command="x", executor_config=gpu_hints(inputs="/lake/f"))
    assert [f.code for f in validate_dag(same).findings if f.code == "hidden-dependency"] == [
        "hidden-dependency"
    ]
