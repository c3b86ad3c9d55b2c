"""``gpu_hints``' dataset paths: one path given as a string (or a path object) is one path, not the list
of its characters."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow.policy import validate_dag
from airflow_gpu_dag.contract import WindowHint
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.executor_config import (
    HINTS_KEY,
    control_task_hints,
    duration_hint,
    fallback_hint,
    gpus_hint,
    map_length_hint,
    merge_hints,
    read_hints,
    request_hints,
    window_hints,
)


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


# -- the helpers, directly ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("duration", "seconds"),
    [("1h30m", 5400.0), ("30m", 1800.0), (timedelta(minutes=5), 300.0), (90, 90.0), (0, 0.0)],
)
def test_a_valid_duration_is_normalised_to_seconds(duration: object, seconds: float) -> None:
    assert gpu_hints(duration=duration)[HINTS_KEY] == {"duration_s": seconds}


def test_an_invalid_duration_is_kept_as_written_for_the_policy_to_report() -> None:
    assert gpu_hints(duration="soon")[HINTS_KEY] == {"duration_s": "soon"}
    assert gpu_hints(duration=-5)[HINTS_KEY] == {"duration_s": -5}


def test_a_value_that_is_no_primitive_is_kept_as_its_repr_so_executor_config_serializes() -> None:
    """``executor_config`` is serialized with the DAG: a list or an object must not reach it as such."""
    hints = gpu_hints(duration=[1], gpus=[2], map_length=[3])[HINTS_KEY]
    assert hints == {"duration_s": "[1]", "gpus": "[2]", "map_length": "[3]"}
    json.dumps(hints)


def test_gpu_memory_or_gpu_type_alone_ask_for_one_gpu_and_are_normalised() -> None:
    assert gpu_hints(gpu_memory="80GiB")[HINTS_KEY] == {"gpus": 1, "gpu_memory_mib": 81920}
    assert gpu_hints(gpus=2, gpu_type="A100")[HINTS_KEY] == {"gpus": 2, "gpu_type": "a100"}


def test_an_invalid_gpu_request_is_kept_as_written_field_by_field() -> None:
    hints = gpu_hints(gpus=1, gpu_memory="eighty gigs", gpu_type="a100")[HINTS_KEY]
    assert hints == {"gpus": 1, "gpu_memory_mib": "eighty gigs", "gpu_type": "a100"}


def test_a_cpu_task_without_hints_writes_an_empty_contract() -> None:
    assert gpu_hints() == {HINTS_KEY: {}}


def test_unicode_and_undecodable_byte_paths_are_kept() -> None:
    hints = gpu_hints(inputs="/lake/données/日本", outputs=[b"/lake/\xff"])[HINTS_KEY]
    assert hints == {"inputs": ["/lake/données/日本"], "outputs": ["/lake/\udcff"]}


def test_a_generator_of_paths_is_read_once_into_a_list() -> None:
    assert gpu_hints(awaits=(p for p in ("/a", "/b")))[HINTS_KEY] == {"awaits": ["/a", "/b"]}


def test_the_hints_merge_into_an_existing_executor_config_without_changing_it() -> None:
    """The user's ``pod_override`` stays; keys the call gives replace the old ones, the others stay."""
    existing = {"pod_override": {"spec": 1}, HINTS_KEY: {"duration_s": 60.0, "gpus": 3}}
    merged = gpu_hints(gpus=1, executor_config=existing)
    assert merged == {"pod_override": {"spec": 1}, HINTS_KEY: {"duration_s": 60.0, "gpus": 1}}
    assert existing == {"pod_override": {"spec": 1}, HINTS_KEY: {"duration_s": 60.0, "gpus": 3}}
    merged[HINTS_KEY]["gpus"] = 8
    assert existing[HINTS_KEY]["gpus"] == 3


@pytest.mark.parametrize("config", [None, {}, {HINTS_KEY: None}, {HINTS_KEY: {}}])
def test_merge_hints_into_nothing_gives_the_hints_alone(config: Any) -> None:
    assert merge_hints(config, {"gpus": 2}) == {HINTS_KEY: {"gpus": 2}}


@pytest.mark.parametrize("config", ["{'pod_override': None}", ["pod_override"]])
def test_an_executor_config_that_is_no_mapping_is_refused_naming_executor_config(config: Any) -> None:
    """``dict(config)`` raised ``ValueError: dictionary update sequence element #0 ...``, naming neither
    ``executor_config`` nor the fix (pass a dict)."""
    with pytest.raises((TypeError, ValueError), match="executor_config"):
        gpu_hints(gpus=1, executor_config=config)


def test_control_task_hints_declare_a_zero_estimate_unless_one_is_declared() -> None:
    assert control_task_hints() == {HINTS_KEY: {"duration_s": 0.0}}
    assert control_task_hints({"pod_override": 1}) == {"pod_override": 1, HINTS_KEY: {"duration_s": 0.0}}
    declared = {HINTS_KEY: {"duration_s": 120.0}}
    kept = control_task_hints(declared)
    assert kept == declared and kept is not declared


@pytest.mark.parametrize(
    ("config", "hints"),
    [
        (str({HINTS_KEY: {"gpus": 2, "duration_s": 60.0}}), {"gpus": 2, "duration_s": 60.0}),
        ("   ", {}),
        ("", {}),
        ("not python at all", {}),
        ("[" * 10_000 + "]" * 10_000, {}),
        (str({HINTS_KEY: [1, 2]}), {}),
        ({HINTS_KEY: "gpus=2"}, {}),
        ([HINTS_KEY], {}),
        (None, {}),
        (42, {}),
    ],
)
def test_read_hints_reads_a_dict_or_its_rest_string_and_nothing_else(config: Any, hints: dict) -> None:
    assert read_hints(config) == hints


def test_read_hints_never_evaluates_code_in_a_rest_string(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    assert read_hints(f"__import__('pathlib').Path({str(marker)!r}).touch()") == {}
    assert not marker.exists()


def test_read_hints_returns_a_copy() -> None:
    config = {HINTS_KEY: {"gpus": 2}}
    read_hints(config)["gpus"] = 8
    assert config[HINTS_KEY]["gpus"] == 2


@pytest.mark.usefixtures("_no_configured_pools")
def test_the_contract_readers_take_a_dict_or_its_rest_string_and_refuse_malformed_values() -> None:
    config = {HINTS_KEY: {"gpus": 4, "map_length": 5}}
    assert (gpus_hint(config), gpus_hint(str(config))) == (4, 4)
    assert (map_length_hint(config), map_length_hint(str(config))) == (5, 5)
    bad = {HINTS_KEY: {"gpus": "four", "map_length": -1, "duration_s": float("nan")}}
    assert (gpus_hint(bad), map_length_hint(bad), duration_hint(bad)) == (None, None, None)
    assert (gpus_hint({}), map_length_hint({}), duration_hint({}), fallback_hint({})) == (None,) * 4


def test_request_hints_replace_the_gpu_fields_and_keep_the_rest() -> None:
    old = {"pod_override": 1, HINTS_KEY: {"gpu_type": "h100", "gpu_memory_mib": 5, "outputs": ["/o"]}}
    typed = request_hints(GpuRequest.parse(2, "40GiB", "a100"), 60.0, inputs="/a", executor_config=old)
    assert typed == {
        "pod_override": 1,
        HINTS_KEY: {
            "gpus": 2,
            "gpu_memory_mib": 40960,
            "gpu_type": "a100",
            "duration_s": 60.0,
            "inputs": ["/a"],
            "outputs": ["/o"],
        },
    }
    # a re-declaration without memory or type drops them (not the old task's h100)
    assert request_hints(GpuRequest.parse(1, None, None), executor_config=old)[HINTS_KEY] == {
        "gpus": 1,
        "outputs": ["/o"],
    }
    assert old[HINTS_KEY] == {"gpu_type": "h100", "gpu_memory_mib": 5, "outputs": ["/o"]}


def test_window_hints_write_the_window_under_the_contract() -> None:
    window = WindowHint("22:00", "06:00", "Europe/Berlin", on_missed="fail")
    assert window_hints({"pod_override": 1}, window) == {
        "pod_override": 1,
        HINTS_KEY: {
            "window": {"opens": "22:00", "closes": "06:00", "tz": "Europe/Berlin", "on_missed": "fail"}
        },
    }
