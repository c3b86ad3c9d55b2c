"""What the CLI reads from its arguments and settings: each test is a case it got wrong before.

* ``lint a.py b.py`` with one DAG id in both files kept the later one: the broken DAG was never
  checked and the duplicate not reported (exit 0);
* ``simulate --capacity`` threw ``[gpu_dag] pools`` away (``lint --pool`` adds to it), then told the
  user to set what was set; with several DAGs a ``--capacity`` pool no DAG uses (a typo) passed;
* ``simulate A A`` simulated one run without a word; ``--max-gpus-per-host 0`` was taken;
* ``plan`` showed "Declared 0s" for a mapped task with 0 instances that declares 15 minutes."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag.airflow import history
from airflow_gpu_dag.airflow.history import LearnedGraph
from airflow_gpu_dag.cli.common import parse_pool_args
from airflow_gpu_dag.cli.inputs import (
    history_note,
    history_note_line,
    input_json,
    input_notes,
    mapped_tasks,
    planning_graph,
)
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode
from airflow_gpu_dag.core.model.resources import GpuRequest
from tests.unit.cli.conftest import run_cli, run_json, two_pools_dag_file


@pytest.mark.usefixtures("_no_configured_pools")
def test_several_runs_refuse_a_capacity_no_dag_uses_and_a_dag_id_given_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two_pools_dag_file(tmp_path)
    capacity = ["--capacity", "gpu_a100=2", "--capacity", "gpu_default=1"]
    argv = ["simulate", "--file", str(tmp_path), "--trigger", "two_pools=0", "--trigger", "two_pools=1h"]
    assert run_cli(*argv, *capacity, "--capacity", "gpu_h100=8") == 1
    assert "pool(s) gpu_h100 not used by the simulated DAGs" in capsys.readouterr().err
    code, result = run_json(capsys, *argv, *capacity)
    assert code == 0 and len(result["runs"]) == 2
    assert run_cli("simulate", "two_pools", "two_pools", "--file", str(tmp_path), *capacity) == 1
    assert "DAG id 'two_pools' given twice" in capsys.readouterr().err


# -- the first run ---------------------------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
def test_no_dags_folder_names_the_setting_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh AIRFLOW_HOME has no dags folder: the error says where the folder comes from and how to
    name the DAG files instead, not only that a path does not exist."""
    from airflow import settings

    monkeypatch.setattr(settings, "DAGS_FOLDER", str(tmp_path / "dags"))
    assert run_cli("plan", "my_dag") == 1
    err = capsys.readouterr().err
    assert f"the DAGs folder '{tmp_path / 'dags'}' does not exist" in err
    assert "[core] dags_folder" in err and "--file PATH" in err
    assert run_cli("lint") == 1
    err = capsys.readouterr().err
    assert "[core] dags_folder" in err and "airflow gpu-dag lint PATH" in err


@pytest.mark.usefixtures("_no_configured_pools")
def test_bad_pool_argument() -> None:
    with pytest.raises(ValueError, match="expected NAME=SLOTS"):
        parse_pool_args(["gpu_a100"])
    with pytest.raises(ValueError, match="--capacity 'x=-1'"):
        parse_pool_args(["x=-1"], option="--capacity")
    assert parse_pool_args(["a=1", " b = 2 "]) == {"a": 1, "b": 2}
    # the same pool twice: the same size is harmless, two sizes are refused (not last-one-wins)
    assert parse_pool_args(["a=1", "a=1"]) == {"a": 1}
    with pytest.raises(ValueError, match="pool 'a' is given two sizes"):
        parse_pool_args(["a=1", "b=2", "a=4"], option="--capacity")


# -- direct unit tests of the module --------------------------------------------------------------------
_MIGRATE = "the metadata database is not set up: run `airflow db migrate` ("


@pytest.mark.parametrize(
    "reason",
    [
        "OperationalError: no such table: task_instance",
        'ProgrammingError: (psycopg2.errors.UndefinedTable) relation "task_instance" does not exist',
        "ProgrammingError: (1146, \"Table 'airflow.task_instance' doesn't exist\")",
    ],
)
def test_a_database_without_tables_gets_the_migrate_fix_and_keeps_the_reason(reason: str) -> None:
    note = f"history unreadable ({reason})"
    assert history_note(note) == f"{_MIGRATE}{note})"


@pytest.mark.parametrize(
    "note",
    [
        "",
        "declared only, past runs not read",
        "history unreadable (TimeoutError: the database did not answer)",
        "map counts: the table does not exist yet",  # not a history read at all
    ],
)
def test_other_notes_are_kept_as_they_are(note: str) -> None:
    assert history_note(note) == note


@pytest.mark.parametrize(
    "reason",
    [
        'OperationalError: (psycopg2.OperationalError) connection to server at "db" (10.0.0.5), port 5432 '
        'failed: FATAL:  role "airflow" does not exist',
        'OperationalError: (psycopg2.OperationalError) connection to server at "db" (10.0.0.5), port 5432 '
        'failed: FATAL:  database "airflow" does not exist',
    ],
)
def test_a_missing_database_role_is_not_called_unmigrated_tables(reason: str) -> None:
    assert "airflow db migrate" not in history_note(f"history unreadable ({reason})")


def test_the_history_note_line_says_the_declared_estimates_are_used() -> None:
    assert history_note_line("why") == "Note: why; the declared estimates are used."


def _mapped_graph() -> TaskGraph:
    """``sweep`` expanded into 3 instances, ``empty`` mapped over nothing, ``later`` and ``again`` mapped
    over an unknown number, and a plain ``report``."""
    graph = TaskGraph("sweeps")
    for i in (2, 0, 1):
        graph.add(f"sweep[{i}]", 600, gpus=1, attrs={"map_of": "sweep", "map_index": i})
    graph.add("empty", 600, attrs={"mapped": True, "map_count": 0})
    graph.add("later", 600, attrs={"mapped": True})
    graph.add("again", 600, attrs={"mapped": True, "map_count": None})
    graph.add("report", 60)
    return graph


def test_mapped_tasks_counts_instances_and_lists_unknown_counts_sorted() -> None:
    assert mapped_tasks(_mapped_graph()) == ({"empty": 0, "sweep": 3}, ["again", "later"])
    plain = TaskGraph("plain")
    plain.add("a", 60)
    assert mapped_tasks(plain) == ({}, [])
    assert mapped_tasks(TaskGraph("empty")) == ({}, [])


def _learned_estimates() -> dict[str, DurationEstimate]:
    return {
        "report": DurationEstimate("report", 60.0, 60.0, learned=70.0, runs=3),
        "later": DurationEstimate("later", 600.0, 600.0),
    }


def test_input_notes_say_what_was_learned_expanded_and_unknown_with_the_label_on_every_line() -> None:
    lines = input_notes(_mapped_graph(), _learned_estimates(), "why", verb="simulated", label="sweeps: ")
    assert lines == [
        "sweeps: ~ duration learned from past runs (1 task(s)); `airflow gpu-dag estimates sweeps` compares "
        "them with the declared estimates.",
        "sweeps: Note: why; the declared estimates are used.",
        "sweeps: Mapped tasks simulated as their instances: empty (0), sweep (3).",
        "sweeps: Mapped tasks with an unknown number of instances (simulated once): again, later; declare "
        "one with gpu_hints(map_length=N).",
    ]


def test_input_notes_of_a_plain_graph_with_nothing_learned_are_empty() -> None:
    plain = TaskGraph("plain")
    plain.add("a", 60)
    assert input_notes(plain, {"a": DurationEstimate("a", 60.0, 60.0)}, "") == []
    assert input_notes(TaskGraph("empty"), {}, "", capacity={"gpu": 4}) == []


def _ladder_graph() -> TaskGraph:
    """A ladder ``train``: rung ``train.big`` (4 GPUs of pool ``gpu``, assumed) then ``train.small`` (1)."""
    graph = TaskGraph("ladder")
    rung = {"ladder": "train", "rungs": 2, "start_within_s": 1200.0}
    big = {**rung, "index": 0, "rung": "big", "role": "assumed", "expected_duration": 3600.0}
    small = {**rung, "index": 1, "rung": "small", "role": "contingent", "expected_duration": 5400.0}
    graph.add_task(TaskNode("train.big", 3600.0, GpuRequest(4), "gpu", 4, attrs={"fallback": big}))
    graph.add_task(
        TaskNode(
            "train.small",
            0.0,
            GpuRequest(1),
            "gpu",
            1,
            attrs={"fallback": small, "contingent_duration": 5400.0},
        )
    )
    graph.add_edge("train.big", "train.small")
    return graph


def test_a_rung_too_large_for_the_simulated_capacity_is_named_only_with_a_capacity() -> None:
    graph = _ladder_graph()
    (line,) = input_notes(graph, {}, "", label="ladder: ", capacity={"gpu": 2})
    assert line.startswith(
        "ladder: fallback ladder train: train.big needs 4 slots of pool 'gpu' (capacity 2)"
    )
    assert line.endswith("then train.small runs.")
    assert input_notes(graph, {}, "") == [] and input_notes(graph, {}, "", capacity={"gpu": 4}) == []


def test_input_json_says_the_same_as_the_notes() -> None:
    learned = LearnedGraph(_mapped_graph(), _mapped_graph(), _learned_estimates(), note="why")
    assert input_json(learned) == {
        "learned_tasks": ["report"],
        "history_note": "why",
        "mapped_tasks": {"empty": 0, "sweep": 3},
        "mapped_unknown": ["again", "later"],
        "unfit_rungs": [],
    }
    ladder = LearnedGraph(_ladder_graph(), _ladder_graph(), {})
    (unfit,) = input_json(ladder, {"gpu": 2})["unfit_rungs"]
    assert unfit.startswith("fallback ladder train: train.big needs 4 slots") and not unfit.endswith(".")


def _authored_dag() -> Any:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag import gpu_hints

    with DAG("authored", schedule=None, start_date=datetime.datetime(2026, 1, 1)) as dag:
        EmptyOperator(task_id="train", executor_config=gpu_hints(duration="20m", gpus=1))
    return dag


@pytest.mark.usefixtures("_no_configured_pools")
def test_declared_only_never_reads_the_history(monkeypatch: pytest.MonkeyPatch) -> None:
    def read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the history was read")

    monkeypatch.setattr(history, "read_history", read)
    monkeypatch.setattr(history, "read_map_counts", read)
    learned = planning_graph(_authored_dag(), declared_only=True)
    assert learned.note == "declared only, past runs not read"
    assert learned.graph.nodes["train"].duration == 1200.0 and learned.estimates["train"].learned is None


@pytest.mark.usefixtures("_no_configured_pools")
def test_an_unreadable_history_is_a_note_with_the_fix_never_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_table(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no such table: task_instance")

    monkeypatch.setattr(history, "read_history", no_table)
    learned = planning_graph(_authored_dag())
    assert learned.note == f"{_MIGRATE}history unreadable (RuntimeError: no such table: task_instance))"
    assert learned.graph.nodes["train"].duration == 1200.0
