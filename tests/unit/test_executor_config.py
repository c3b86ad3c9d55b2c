"""``gpu_hints``' dataset paths: one path given as a string (or a path object) is one path, not the list
of its characters."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow.policy import validate_dag
from airflow_gpu_dag.executor_config import HINTS_KEY, duration_hint, read_hints


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


# -- 4. hints that raised --------------------------------------------------------------------------------
@pytest.mark.usefixtures("_fresh")
def test_a_duration_hint_too_large_for_a_float_is_no_duration() -> None:
    config = gpu_hints(duration=10**400)  # kept as written (the cluster policy reports it)
    assert duration_hint(config) is None  # before: OverflowError


@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize("text", ["{{}: 1}", "{'gpu_dag': {'duration_s': 1}, (1, [2]): 3}"])
def test_an_unhashable_literal_is_unreadable_not_raised(text: str) -> None:
    assert read_hints(text) == {}  # before: TypeError (the controller reads executor_config from REST)


# -- 4. duration_hint of an infinite or boolean duration ----------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize("raw", [float("inf"), "inf", "1e999", True])
def test_duration_hint_refuses_what_is_no_duration(raw: object) -> None:
    assert duration_hint({"gpu_dag": {"duration_s": raw}}) is None
    assert duration_hint(str({"gpu_dag": {"duration_s": str(raw)}})) is None


@pytest.mark.usefixtures("_no_configured_pools")
def test_duration_hint_reads_a_valid_duration() -> None:
    assert duration_hint({"gpu_dag": {"duration_s": 5400.0}}) == 5400.0
    assert duration_hint(str({"gpu_dag": {"duration_s": 0}})) == 0.0


np = pytest.importorskip("numpy")


def test_gpu_hints_take_numpy_numbers() -> None:
    from airflow_gpu_dag.executor_config import HINTS_KEY, gpu_hints

    hints = gpu_hints(duration=np.int64(1800), gpus=np.int64(2), gpu_memory=np.int64(1024))[HINTS_KEY]
    assert (hints["duration_s"], hints["gpus"], hints["gpu_memory_mib"]) == (1800.0, 2, 1024)
    json.dumps(hints)  # executor_config must serialize
