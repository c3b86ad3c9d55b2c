"""Tests of ``airflow_gpu_dag.core.model.findings``: a problem found in a DAG, its task and its fix."""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_gpu_dag.core.model.findings import ERROR, WARNING, Finding


def _finding(severity: str = ERROR, task_id: str | None = "train") -> Finding:
    return Finding(
        severity=severity,
        code="too-many-gpus",
        dag_id="etl",
        task_id=task_id,
        message="The task asks for 16 GPUs; the largest host has 8.",
        fix="Ask for at most 8 GPUs.",
    )


def test_the_severities_are_lowercase_words() -> None:
    """Findings written to JSON and compared by other tools carry these exact strings."""
    assert (ERROR, WARNING) == ("error", "warning")


def test_an_error_finding_is_an_error() -> None:
    assert _finding(ERROR).is_error is True


@pytest.mark.parametrize("severity", [WARNING, "info", "ERROR"])
def test_any_other_severity_is_not_an_error(severity: str) -> None:
    """Only the exact :data:`ERROR` string makes a finding an error (it is compared, not parsed)."""
    assert _finding(severity).is_error is False


def test_a_finding_reads_as_severity_code_dag_task_message_and_fix() -> None:
    assert str(_finding()) == (
        "ERROR [too-many-gpus] DAG 'etl', task 'train': The task asks for 16 GPUs; the largest host has 8. "
        "Fix: Ask for at most 8 GPUs."
    )


def test_a_warning_reads_with_its_severity_in_capitals() -> None:
    assert str(_finding(WARNING)).startswith("WARNING [too-many-gpus] DAG 'etl', task 'train': ")


@pytest.mark.parametrize("task_id", [None, ""])
def test_a_finding_about_the_whole_dag_names_no_task(task_id: str | None) -> None:
    text = str(_finding(task_id=task_id))
    assert text.startswith("ERROR [too-many-gpus] DAG 'etl': The task asks")
    assert "task '" not in text and "None" not in text


def test_ids_are_quoted_so_odd_ids_stay_readable() -> None:
    finding = dataclasses.replace(_finding(), dag_id="my dag", task_id="group.train's")
    assert "DAG 'my dag', task \"group.train's\": " in str(finding)


def test_to_dict_holds_every_field_and_survives_json() -> None:
    expected = {
        "severity": "error",
        "code": "too-many-gpus",
        "dag_id": "etl",
        "task_id": "train",
        "message": "The task asks for 16 GPUs; the largest host has 8.",
        "fix": "Ask for at most 8 GPUs.",
    }
    assert _finding().to_dict() == expected
    assert json.loads(json.dumps(_finding().to_dict())) == expected
    assert _finding(task_id=None).to_dict()["task_id"] is None


def test_a_finding_rebuilt_from_its_dict_is_equal() -> None:
    finding = _finding(WARNING)
    assert Finding(**finding.to_dict()) == finding  # type: ignore[arg-type]


def test_a_finding_cannot_be_changed() -> None:
    """Checks hand findings to the policy, the CLI and the operators: none may alter another's."""
    finding = _finding()
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.severity = WARNING  # type: ignore[misc]


def test_equal_findings_are_one_in_a_set() -> None:
    """Frozen findings hash by value, so a check run twice can be de-duplicated."""
    assert len({_finding(), _finding(), _finding(WARNING)}) == 2
