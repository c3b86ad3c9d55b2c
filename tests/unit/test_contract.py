"""The task contract (airflow_gpu_dag/contract.py): one typed, versioned form of what a task declares and
of what the provider derives, validated once by the cluster policy and read by the scheduler.

What a team sharing a GPU pool relies on: no DAG file can write the figures that order every DAG's
tasks (the parse-time remaining time, the run's GPU work), a typo in a hint is an import error that says
what was meant, and no DAG, mapped tasks included, is analysed inside the scheduler loop."""

from __future__ import annotations

import json
import re
import runpy
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG
from hypothesis import HealthCheck, given, settings

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE
from airflow_gpu_dag import contract as contract_module
from airflow_gpu_dag.airflow import parse_time
from airflow_gpu_dag.airflow.policy import dag_policy
from airflow_gpu_dag.core.model.resources import GpuRequest
from tests.unit.airflow_dags import serialized
from tests.unit.task_contracts import FORGED, RAW, training_dag

#: Every test runs under the task-contract settings (a gpu_default pool of 8, fresh strategies).
pytestmark = pytest.mark.usefixtures("_fresh_task_contract")


def test_an_unknown_key_is_refused_at_parse_time_with_a_did_you_mean(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    path = tmp_path / "typo.py"
    path.write_text(
        "from airflow.sdk import DAG\n"
        "from airflow.providers.standard.operators.bash import BashOperator\n"
        f"with DAG('typo', schedule=None, default_args={{'weight_rule': {CRITICAL_PATH_WEIGHT_RULE!r}}}):\n"
        "    BashOperator(task_id='train', bash_command='true', pool='gpu_default',\n"
        "                 executor_config={'gpu_dag': {'duration': '1h', 'gpus': 1, 'gpu_mem': '40GiB'}})\n"
    )
    errors = list(DagBag(dag_folder=str(path)).import_errors.values())
    assert len(errors) == 1, errors
    assert "DAG 'typo', task 'train'" in errors[0]
    assert "unknown key 'gpu_mem'" in errors[0] and "did you mean 'gpu_memory'?" in errors[0]


def test_the_contract_survives_serialization_and_reads_back_equal() -> None:
    from airflow_gpu_dag import contract

    dag = training_dag(None)
    dag_policy(dag)
    sdag = serialized(dag)
    for task_id, original in dag.task_dict.items():
        before = contract.read(original.executor_config)
        after = contract.read(sdag.task_dict[task_id].executor_config)
        assert before == after and before.derived is not None and not after.problems
        assert sdag.task_dict[task_id].executor_config["gpu_dag"]["v"] == contract.CONTRACT_VERSION
    assert contract.read(sdag.task_dict["train"].executor_config).gpu_request.count == 4  # type: ignore[union-attr]


def test_an_old_format_executor_config_is_read_and_rewritten_at_the_next_parse() -> None:
    """A DAG serialized before the contract was versioned: its hints read as they are; its parse-time
    figures (the version-1 key) are not trusted; the policy writes the current form."""
    from airflow_gpu_dag import contract

    old = {"gpu_dag": {"duration_s": 3600.0, "gpus": 2}, "gpu_dag_critical_path": FORGED}
    read = contract.read(old)
    assert (read.version, read.duration_s, read.gpus, read.derived, read.problems) == (1, 3600.0, 2, None, ())
    with DAG("old", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        BashOperator(task_id="t", bash_command="true", pool="gpu_default", pool_slots=2, executor_config=old)
    assert parse_time.read(serialized(dag).task_dict["t"]) is None  # the scheduler analyses it
    dag_policy(dag)
    config = dag.task_dict["t"].executor_config
    assert set(config) == {"gpu_dag"} and config["gpu_dag"]["v"] == contract.CONTRACT_VERSION


def test_the_docs_render_the_generated_schema() -> None:
    from airflow_gpu_dag import contract

    text = (Path(__file__).resolve().parents[2] / "docs" / "task-contract.md").read_text()
    block = re.search(r"<!-- schema -->\s*```json\n(.*?)```", text, re.S)
    assert block, "docs/task-contract.md has no ```json block after <!-- schema -->"
    assert json.loads(block.group(1)) == contract.json_schema(), (
        "regenerate it: .venv/bin/python -m airflow_gpu_dag.contract"
    )


def test_the_wire_form_validates_against_the_schema_and_parses_back() -> None:
    import jsonschema

    from airflow_gpu_dag import contract

    raw = {
        "duration": "1h30m",
        "gpus": "2",
        "gpu_memory": "40GiB",
        "gpu_type": "A100",
        "inputs": "/lake/raw",
        "outputs": ["/lake/a", "/lake/b"],
        "map_length": 3,
        "fallback": {
            "ladder": "l",
            "rung": "r",
            "index": 0,
            "rungs": 2,
            "start_within_s": 60,
            "watched": True,
        },
        "window": {"opens": "22:00", "closes": "06:00", "tz": "UTC", "on_missed": "fail"},
    }
    parsed = contract.parse(raw)
    wire = parsed.to_wire()
    jsonschema.validate(wire, contract.json_schema())
    assert contract.parse(wire) == parsed
    assert (parsed.duration_s, parsed.gpu_request) == (5400.0, GpuRequest(2, 40960, "a100"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**wire, "gpu_mem": 1}, contract.json_schema())
    # the policy's figures, with the descendants count fair's key reads (optional: older figures lack it)
    derived = parsed.with_derived(contract.Derived(600.0, {"gpu": 3600.0}, "d", 3)).to_wire()
    jsonschema.validate(derived, contract.json_schema())
    assert contract.read({"gpu_dag": derived}).derived == contract.Derived(600.0, {"gpu": 3600.0}, "d", 3)
    del derived["derived"]["descendants"]
    jsonschema.validate(derived, contract.json_schema())
    assert contract.read({"gpu_dag": derived}).derived == contract.Derived(600.0, {"gpu": 3600.0}, "d")


@pytest.mark.parametrize(
    ("raw", "key", "expected"),
    [
        ({"gpu_mem": 1}, "gpu_mem", "did you mean 'gpu_memory'?"),
        ({"durration": "1h"}, "durration", "did you mean 'duration'?"),
        ({"inputs": ["/a", 5]}, "inputs", "must be a list of dataset paths"),
        ({"gpus": 1, "fallback": {"index": 0, "of": 2}}, "of", "unknown key 'of'"),
        ({"gpu_memory_mib": 4096}, "gpu_memory_mib", "without gpus"),
        ({"duration": "1h", "duration_s": 60}, "duration_s", "twice"),
        ({"v": 99}, "v", "newer than this airflow-gpu-dag reads"),
        ({"window": {"opens": "22:00"}}, "window", "no window"),
        ({"derived": {"remaining_s": -1, "slot_seconds": {}, "digest": ""}}, "derived", "malformed"),
    ],
)
def test_malformed_contracts_name_the_key_and_the_fix(raw: dict[str, Any], key: str, expected: str) -> None:
    from airflow_gpu_dag import contract

    with pytest.raises(contract.ContractError) as caught:
        contract.parse(raw)
    assert [p.key for p in caught.value.problems][:1] == [key]
    assert expected in str(caught.value) and "Fix:" in str(caught.value)
    assert contract.read({"gpu_dag": raw}).problems == caught.value.problems  # the reader: same problems


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=RAW)
def test_the_parser_only_ever_refuses_with_the_documented_error(raw: Any) -> None:
    """``parse`` returns a contract or raises ContractError naming each problem and its fix; ``read``
    never raises and lists the same problems; what parses writes a wire form that matches the schema and
    parses back to the same contract."""
    import jsonschema

    try:
        parsed = contract_module.parse(raw)
    except contract_module.ContractError as err:
        assert err.problems and all(p.fix and p.message for p in err.problems)
        assert "Fix:" in str(err)
        assert contract_module.read({"gpu_dag": raw}).problems == err.problems
        return
    assert contract_module.read({"gpu_dag": raw}) == parsed
    wire = parsed.to_wire()
    jsonschema.validate(wire, contract_module.json_schema())
    assert contract_module.parse(json.loads(json.dumps(wire))) == parsed  # JSON types only, a fixed point


# -------------------------------------------------------------------------------------------- problems


class _Unreadable(Mapping[str, Any]):
    """An executor_config whose every lookup raises."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("no")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("no")

    def __len__(self) -> int:
        return 1


def test_every_problem_of_a_contract_is_listed_with_its_finding_code() -> None:
    """``parse`` lists every problem at once (one import error to fix them all), each with the finding code
    lint reports, and the error is a ValueError with one ``... Fix: ...`` line per problem."""
    raw = {
        "gpu_mem": 1,
        "duration": "-5m",
        "gpus": 0,
        "inputs": 5,
        "map_length": -1,
        "window": [],
        "fallback": {"index": -1},
        "derived": "x",
    }
    with pytest.raises(ValueError, match="Fix:") as caught:
        contract_module.parse(raw)
    assert isinstance(caught.value, contract_module.ContractError)
    problems = caught.value.problems
    assert {p.key: p.code for p in problems} == {
        "gpu_mem": "unknown-hint",
        "duration_s": "bad-estimate",
        "gpus": "bad-gpu-request",
        "inputs": "bad-hint",
        "map_length": "bad-map-length",
        "window": "bad-hint",
        "fallback": "bad-hint",
        "derived": "bad-hint",
    }
    assert str(caught.value).splitlines() == [f"{p.message} Fix: {p.fix}" for p in problems]


def test_the_reader_keeps_every_well_formed_field_next_to_a_malformed_one() -> None:
    """``read`` leaves only the malformed field at its default (a 2.5-GPU request is no GPU request) and
    still reads the estimate, the map length and the paths."""
    read = contract_module.read(
        {"gpu_dag": {"duration": "1h", "gpus": 2.5, "gpu_memory": "40GiB", "map_length": 3, "outputs": "/o"}}
    )
    assert (read.duration_s, read.gpus, read.gpu_memory_mib, read.gpu_request) == (3600.0, None, None, None)
    assert (read.map_length, read.outputs) == (3, ("/o",))
    assert [(p.key, p.code) for p in read.problems] == [("gpus", "bad-gpu-request")]


@pytest.mark.parametrize(
    ("raw", "key", "expected"),
    [
        ({"gpus": 0}, "gpus", "must be at least 1"),
        ({"gpus": 2.5}, "gpus", "whole number of GPUs"),
        ({"gpus": True}, "gpus", "whole number of GPUs"),
        ({"gpus": "two"}, "gpus", "whole number of GPUs"),
        ({"gpus": 1, "gpu_memory": "40"}, "gpu_memory_mib", "has no unit"),
        ({"gpus": 1, "gpu_type": ["a100", "h100"]}, "gpu_type", "is not one GPU type name"),
        ({"gpu_type": "a100"}, "gpu_type", "without gpus"),
    ],
)
def test_a_malformed_gpu_request_names_the_key_at_fault(raw: dict[str, Any], key: str, expected: str) -> None:
    with pytest.raises(contract_module.ContractError) as caught:
        contract_module.parse(raw)
    [problem] = caught.value.problems
    assert (problem.key, problem.code) == (key, "bad-gpu-request")
    assert expected in problem.message and "gpu_hints(" in problem.fix


def test_an_estimate_is_seconds_and_at_most_366_days() -> None:
    year = 366 * 86400
    assert contract_module.parse({"duration_s": year}).duration_s == float(year)
    assert contract_module.parse({"duration": "90"}).duration_s == 90.0  # a bare number is seconds
    with pytest.raises(contract_module.ContractError, match="at most 366 days") as caught:
        contract_module.parse({"duration": year + 1})
    assert [(p.key, p.code) for p in caught.value.problems] == [("duration_s", "bad-estimate")]


@pytest.mark.parametrize(
    ("raw", "key", "expected"),
    [
        ({"window": {"opns": "22:00", "closes": "06:00"}}, "opns", "did you mean 'opens'?"),
        ({"fallback": {"watch": True}}, "watch", "did you mean 'watched'?"),
        ({"derived": {"remaning_s": 1, "slot_seconds": {}, "digest": ""}}, "remaning_s", "'remaining_s'?"),
    ],
)
def test_an_unknown_key_inside_a_part_is_refused_with_a_did_you_mean(
    raw: dict[str, Any], key: str, expected: str
) -> None:
    """The docs promise the did-you-mean in the window, fallback and derived parts, not only at the top."""
    with pytest.raises(contract_module.ContractError) as caught:
        contract_module.parse(raw)
    [problem] = caught.value.problems
    assert (problem.key, problem.code) == (key, "unknown-hint")
    assert problem.fix.startswith(f"did you mean {expected.removeprefix('did you mean ')}")


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"gpus": 1, "gpu_memory_mib": 1024, "gpu_memory": "1GiB"}, "gpu_memory"),
        ({"duration_s": 60, "duration": "1h"}, "duration"),
    ],
)
def test_a_key_given_under_both_names_is_one_problem_naming_both(raw: dict[str, Any], key: str) -> None:
    with pytest.raises(contract_module.ContractError) as caught:
        contract_module.parse(raw)
    [problem] = caught.value.problems
    wire = contract_module._ALIASES[key]
    assert (problem.key, problem.code) == (key, "bad-hint")
    assert f"(as {wire!r} and as {key!r})" in problem.message
    assert problem.fix == f"give one of {wire!r} and {key!r}."


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("inputs", {"a": "/x"}, "got dict"),
        ("outputs", ("/a", 5), "got a list holding int 5"),
        ("awaits", 7, "got int"),
    ],
)
def test_a_path_hint_that_is_not_a_list_of_paths_says_what_it_got(
    key: str, value: Any, expected: str
) -> None:
    with pytest.raises(contract_module.ContractError) as caught:
        contract_module.parse({key: value})
    [problem] = caught.value.problems
    assert (problem.key, problem.code) == (key, "bad-hint")
    assert expected in problem.message and problem.fix == f"pass {key}=['/data/...'] to gpu_hints()."


def test_path_hints_accept_one_string_a_tuple_or_a_set_and_write_lists() -> None:
    """One string is one path, an empty string none, a set is sorted (a stable wire form)."""
    parsed = contract_module.parse({"inputs": "/raw", "outputs": {"/b", "/a"}, "awaits": ""})
    assert (parsed.inputs, parsed.outputs, parsed.awaits) == (("/raw",), ("/a", "/b"), ())
    wire = parsed.to_wire()
    assert (wire["inputs"], wire["outputs"], "awaits" in wire) == (["/raw"], ["/a", "/b"], False)


# -------------------------------------------------------------------------------------------- versions


@pytest.mark.parametrize(
    ("raw", "version"), [({"gpus": 1}, 1), ({"v": 1, "gpus": 1}, 1), ({"v": 2, "gpus": 1}, 2)]
)
def test_the_version_read_is_recorded_and_the_current_one_is_written(
    raw: dict[str, Any], version: int
) -> None:
    """No ``"v"`` is version 1 (read with the current keys); whatever was read, the wire has ``"v": 2``."""
    parsed = contract_module.parse(raw)
    assert (parsed.version, parsed.gpus) == (version, 1)
    assert parsed.to_wire() == {"v": contract_module.CONTRACT_VERSION, "gpus": 1}


@pytest.mark.parametrize("value", ["2", 0, -1, True, 1.0])
def test_a_version_that_is_not_one_says_to_drop_it(value: object) -> None:
    with pytest.raises(contract_module.ContractError) as caught:
        contract_module.parse({"v": value, "gpus": 1})
    [problem] = caught.value.problems
    assert (problem.key, problem.code) == ("v", "bad-hint")
    assert "is not one" in problem.message and problem.fix == "drop 'v': the cluster policy writes it."


def test_a_newer_version_is_a_problem_and_the_reader_keeps_the_keys_it_knows() -> None:
    read = contract_module.read({"gpu_dag": {"v": contract_module.CONTRACT_VERSION + 1, "gpus": 2}})
    assert read.gpus == 2
    [problem] = read.problems
    assert problem.key == "v" and "newer than this airflow-gpu-dag reads (2)" in problem.message
    assert "one airflow-gpu-dag version" in problem.fix


@pytest.mark.parametrize("raw", [{"v": 10**5000, "gpus": 2}, {10**5000: 1, "gpus": 2}])
def test_a_huge_integer_version_or_key_is_refused_with_the_documented_error(raw: dict[Any, Any]) -> None:
    """``_short`` exists for ints with no repr; a huge ``v`` or key must still be a ContractError."""
    with pytest.raises(contract_module.ContractError):
        contract_module.parse(raw)
    assert contract_module.read({"gpu_dag": raw}).gpus == 2


# -------------------------------------------------------------------------------------------- wire form


def test_the_wire_form_is_canonical_with_the_version_first_and_keys_in_one_order() -> None:
    """Whatever order and names the author used: seconds, MiB, lists, and one key order (stable JSON, so
    an unchanged DAG serializes to the same bytes)."""
    raw = {
        "window": {"opens": "22:00", "closes": "06:00"},
        "fallback": {"index": 1, "rungs": 2},
        "map_length": 4,
        "awaits": ["/c"],
        "outputs": ["/b"],
        "inputs": ["/a"],
        "gpu_type": "H100",
        "gpu_memory": "80GiB",
        "gpus": "4",
        "duration": "2h",
    }
    wire = contract_module.parse(raw).with_derived(contract_module.Derived(1.0, {}, "d")).to_wire()
    assert list(wire) == [
        "v",
        "duration_s",
        "gpus",
        "gpu_memory_mib",
        "gpu_type",
        "inputs",
        "outputs",
        "awaits",
        "map_length",
        "window",
        "fallback",
        "derived",
    ]
    assert (wire["duration_s"], wire["gpus"], wire["gpu_memory_mib"], wire["gpu_type"]) == (
        7200.0,
        4,
        81920,
        "h100",
    )


def test_a_zero_estimate_and_a_zero_map_length_survive_the_round_trip() -> None:
    """Falsy but declared: a marker task's 0 s and a mapped task expecting no instances are written."""
    wire = contract_module.parse({"duration_s": 0, "map_length": 0}).to_wire()
    assert wire == {"v": 2, "duration_s": 0.0, "map_length": 0}
    assert (contract_module.parse(wire).duration_s, contract_module.parse(wire).map_length) == (0.0, 0)


def test_the_contract_round_trips_through_json_and_the_rest_api_string() -> None:
    """Airflow stores executor_config as JSON and the REST API returns ``str(dict)``: both read back to the
    same contract, derived figures included, with no problems."""
    contract = contract_module.parse(
        {
            "duration": "1h",
            "gpus": 2,
            "gpu_memory": "40GiB",
            "gpu_type": "a100",
            "inputs": ["/in"],
            "map_length": 3,
            "window": {"opens": "22:00", "closes": "06:00", "tz": "Europe/Berlin", "on_missed": "fail"},
            "fallback": {"ladder": "l", "rung": "a100", "index": 0, "rungs": 2, "watched": False},
        }
    ).with_derived(contract_module.Derived(7200.0, {"gpu_a100": 7200.0}, "abc", 5))
    config = contract.to_executor_config({"pod_override": {"spec": {"priorityClassName": "high"}}})
    for stored in (json.loads(json.dumps(config)), str(config)):
        read = contract_module.read(stored)
        assert read == contract and read.version == contract_module.CONTRACT_VERSION and not read.problems
        assert read.window == contract.window and read.fallback == contract.fallback
        assert contract_module.read_derived(stored) == contract_module.Derived(
            7200.0, {"gpu_a100": 7200.0}, "abc", 5
        )


def test_to_executor_config_keeps_other_keys_replaces_the_contract_and_drops_version_1_figures() -> None:
    original = {
        "pod_override": {"spec": {}},
        contract_module.HINTS_KEY: {"gpus": 8},
        contract_module.LEGACY_DERIVED_KEY: FORGED,
    }
    config = contract_module.parse({"gpus": 1}).to_executor_config(original)
    assert config == {"pod_override": {"spec": {}}, "gpu_dag": {"v": 2, "gpus": 1}}
    assert (
        original[contract_module.HINTS_KEY] == {"gpus": 8} and contract_module.LEGACY_DERIVED_KEY in original
    )
    assert contract_module.TaskContract().to_executor_config() == {"gpu_dag": {"v": 2}}


def test_declared_and_with_derived_reset_the_version_and_the_problems() -> None:
    """``declared`` is what the author wrote (the policy then adds its figures with ``with_derived``)."""
    figures = contract_module.Derived(60.0, {"gpu": 60.0}, "d")
    read = contract_module.read({"gpu_dag": {"gpus": 1, "map_length": -1, "derived": figures.to_wire()}})
    assert (read.version, read.derived, len(read.problems)) == (1, figures, 1)
    declared = read.declared()
    assert (declared.version, declared.derived, declared.problems, declared.gpus) == (2, None, (), 1)
    other = contract_module.Derived(5.0, {}, "e", 0)
    redone = read.with_derived(other)
    assert (redone.version, redone.derived, redone.problems, redone.gpus) == (2, other, (), 1)
    assert read.with_derived(None).derived is None


def test_the_gpu_request_is_none_for_a_cpu_task_and_no_memory_means_any() -> None:
    assert contract_module.TaskContract().gpu_request is None
    assert contract_module.TaskContract(gpus=2, gpu_memory_mib=0).gpu_request == GpuRequest(2, None, None)
    assert contract_module.TaskContract(gpus=1, gpu_type="h100").to_wire() == {
        "v": 2,
        "gpus": 1,
        "gpu_type": "h100",
    }


# -------------------------------------------------------------------------------------------- windows


def _window(kind: str) -> Any:
    from airflow_gpu_dag.core.model.windows import parse_window

    if kind == "daily":
        return parse_window("22:00", "06:00", "Europe/Berlin")
    if kind == "fixed":
        return parse_window("2026-12-01T22:00:00+01:00", "2026-12-02T06:00:00+01:00")
    return None


@pytest.mark.parametrize(
    ("kind", "hint", "wire"),
    [
        (
            "daily",
            contract_module.WindowHint("22:00:00", "06:00:00", "Europe/Berlin", on_missed="fail"),
            {"opens": "22:00:00", "closes": "06:00:00", "tz": "Europe/Berlin", "on_missed": "fail"},
        ),
        (
            "fixed",
            contract_module.WindowHint(
                "2026-12-01T22:00:00+01:00", "2026-12-02T06:00:00+01:00", fixed=True, on_missed="fail"
            ),
            {
                "opens": "2026-12-01T22:00:00+01:00",
                "closes": "2026-12-02T06:00:00+01:00",
                "fixed": True,
                "on_missed": "fail",
            },
        ),
        (
            "templated",
            contract_module.WindowHint(templated=True, on_missed="fail"),
            {"templated": True, "on_missed": "fail"},
        ),
    ],
)
def test_a_start_window_of_each_kind_is_written_and_read_back(
    kind: str, hint: contract_module.WindowHint, wire: dict[str, Any]
) -> None:
    """``WindowHint.of`` a daily, a one-off and a templated (None) window, its wire form, and back."""
    assert contract_module.WindowHint.of(_window(kind), "fail") == hint
    assert hint.to_wire() == wire
    assert contract_module.parse({"window": wire}).window == hint


def test_a_one_off_window_keeps_the_timezone_its_naive_times_are_read_in() -> None:
    """parse_window reads naive date-times in ``tz``; the wire form must keep it, or the planner (which
    reads ``window_from_hint(hint.to_wire())``) shifts the window by the zone's offset."""
    from airflow_gpu_dag.core.model.windows import window_from_hint

    raw = {"opens": "2026-12-01T22:00", "closes": "2026-12-02T06:00", "tz": "Europe/Berlin", "fixed": True}
    parsed = contract_module.parse({"window": raw})
    assert parsed.window is not None
    assert window_from_hint(parsed.window.to_wire()) == window_from_hint(raw)
    assert contract_module.parse(parsed.to_wire()) == parsed


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("22:00-06:00", "must be a dict, got str"),
        ({"opens": 22, "closes": "06:00"}, "opens 22 has the wrong type"),
        ({"opens": "22:00", "closes": "06:00", "fixed": None}, "fixed None has the wrong type"),
        ({"opens": "22:00", "closes": "06:00", "on_missed": "retry"}, "is not one of skip, fail"),
        ({"opens": "22:00", "closes": "22:00"}, "is no window"),
        ({"opens": "22:00", "closes": "06:00", "tz": "Mars/Base"}, "is no window"),
    ],
)
def test_a_malformed_start_window_is_left_out_with_the_start_window_fix(value: object, expected: str) -> None:
    read = contract_module.read({"gpu_dag": {"gpus": 1, "window": value}})
    assert (read.window, read.gpus) == (None, 1)
    [problem] = read.problems
    assert (problem.key, problem.code) == ("window", "bad-hint")
    assert expected in problem.message and "authoring.start_window" in problem.fix


# -------------------------------------------------------------------------------------------- fallback


def test_a_malformed_fallback_field_is_left_at_its_default_and_the_rung_is_kept() -> None:
    """The rung keeps its place in its ladder: only the bad fields fall back, each named."""
    read = contract_module.read(
        {
            "gpu_dag": {
                "fallback": {
                    "ladder": "l",
                    "rung": 5,
                    "index": -1,
                    "rungs": 3,
                    "assumed_index": 1,
                    "start_within_s": "soon",
                    "watched": "yes",
                }
            }
        }
    )
    assert read.fallback == contract_module.FallbackHint(ladder="l", rungs=3, assumed_index=1)
    assert [p.key for p in read.problems] == ["fallback"] * 4
    assert all("fallback_ladder" in p.fix for p in read.problems)
    messages = " ".join(p.message for p in read.problems)
    for fragment in ("rung 5 is not a name", "index -1 is not a whole number >= 0", "start_within_s 'soon'"):
        assert fragment in messages
    assert "watched 'yes' is not true or false" in messages
    assert contract_module.read({"gpu_dag": {"fallback": [1]}}).fallback is None


def test_a_fallback_rung_writes_watched_only_when_it_is_known() -> None:
    """Hints written before ``watched`` existed stay without it (None), and read back the same."""
    old = contract_module.FallbackHint(ladder="l", rung="r", index=1, rungs=2, start_within_s=60.0)
    assert old.to_wire() == {
        "ladder": "l",
        "rung": "r",
        "index": 1,
        "rungs": 2,
        "assumed_index": 0,
        "assumed_rung": None,
        "start_within_s": 60.0,
    }
    assert contract_module.parse({"fallback": old.to_wire()}).fallback == old
    assert replace(old, watched=False).to_wire()["watched"] is False


# -------------------------------------------------------------------------------------------- derived


def test_derived_figures_are_written_as_floats_with_pools_sorted() -> None:
    wire = contract_module.Derived(600, {"gpu_h100": 2, "gpu_a100": 1}, "d").to_wire()
    assert wire == {"remaining_s": 600.0, "slot_seconds": {"gpu_a100": 1.0, "gpu_h100": 2.0}, "digest": "d"}
    assert list(wire["slot_seconds"]) == ["gpu_a100", "gpu_h100"] and type(wire["remaining_s"]) is float
    assert contract_module.Derived(1.0, {}, "d", 0).to_wire()["descendants"] == 0


@pytest.mark.parametrize(
    "figures",
    [
        [600.0],
        {"remaining_s": float("nan"), "slot_seconds": {}, "digest": "d"},
        {"remaining_s": "600", "slot_seconds": {}, "digest": "d"},
        {"remaining_s": 1.0, "slot_seconds": {"gpu": -1.0}, "digest": "d"},
        {"remaining_s": 1.0, "slot_seconds": {1: 1.0}, "digest": "d"},
        {"remaining_s": 1.0, "slot_seconds": [], "digest": "d"},
        {"remaining_s": 1.0, "slot_seconds": {}, "digest": None},
        {"remaining_s": 1.0, "slot_seconds": {}, "digest": "d", "descendants": True},
        {"remaining_s": 1.0, "slot_seconds": {}, "digest": "d", "descendants": -1},
    ],
)
def test_malformed_derived_figures_are_not_used(figures: object) -> None:
    """A hand-written or damaged ``derived`` never reaches the weights: both readers leave it out."""
    config = {"gpu_dag": {"gpus": 1, "derived": figures}}
    read = contract_module.read(config)
    assert (read.derived, read.gpus) == (None, 1)
    assert [(p.key, p.code) for p in read.problems] == [("derived", "bad-hint")]
    assert "cluster policy writes" in read.problems[0].fix
    assert contract_module.read_derived(config) is None


def test_read_derived_reads_only_the_figures() -> None:
    """``get_weight``'s reader: the figures whatever else is malformed, None when there are none."""
    figures = contract_module.Derived(60.0, {"gpu": 120.0}, "d", 2)
    config = {"gpu_dag": {"gpus": 2.5, "gpu_mem": 1, "derived": figures.to_wire()}}
    assert contract_module.read_derived(config) == figures
    assert contract_module.read_derived(str(config)) == figures
    for nothing in (None, {}, {"gpu_dag": {"gpus": 1}}, {"gpu_dag": [1]}, "{'gpu_dag': ", _Unreadable()):
        assert contract_module.read_derived(nothing) is None


# -------------------------------------------------------------------------------------------- reader


@pytest.mark.parametrize("config", [None, {}, "", "{}", {"pod_override": None}, "{'pod_override': None}"])
def test_an_executor_config_without_a_contract_reads_as_nothing_declared(config: object) -> None:
    read = contract_module.read(config)
    assert read == contract_module.TaskContract() and (read.version, read.problems) == (1, ())


def test_the_reader_never_raises_and_names_what_it_cannot_read() -> None:
    unreadable = contract_module.read(_Unreadable())
    assert unreadable == contract_module.TaskContract()
    [problem] = unreadable.problems
    assert (problem.key, problem.code) == ("gpu_dag", "bad-hint")
    assert problem.message == "executor_config cannot be read (RuntimeError)."
    assert contract_module.read({"gpu_dag": _Unreadable()}).problems[0].message == problem.message
    [not_a_dict] = contract_module.read({"gpu_dag": ["gpus", 1]}).problems
    assert not_a_dict.key == "gpu_dag" and "must be a dict of hints, got list" in not_a_dict.message


def test_python_dash_m_prints_the_schema_the_docs_render(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/task-contract.md is regenerated with ``python -m airflow_gpu_dag.contract``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module is already imported
        runpy.run_module("airflow_gpu_dag.contract", run_name="__main__")
    assert json.loads(capsys.readouterr().out) == contract_module.json_schema()
