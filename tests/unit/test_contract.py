"""The task contract (airflow_gpu_dag/contract.py): one typed, versioned form of what a task declares and
of what the provider derives, validated once by the cluster policy and read by the scheduler.

What a team sharing a GPU pool relies on: no DAG file can write the figures that order every DAG's
tasks (the parse-time remaining time, the run's GPU work), a typo in a hint is an import error that says
what was meant, and no DAG, mapped tasks included, is analysed inside the scheduler loop."""

from __future__ import annotations

import json
import re
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
