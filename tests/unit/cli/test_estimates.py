"""Tests of ``airflow_gpu_dag.cli.estimates``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_gpu_dag.cli.estimates import ESTIMATE_COLUMNS, estimates_report, estimates_table
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate, EstimateSettings
from tests.unit.cli.conftest import GOOD, PIPELINE, dag_file, fake_history, run_cli, run_json


# -- 5. the quantile column of estimates -------------------------------------------------------------------
@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize(("quantile", "label"), [(0.9, "p90"), (0.995, "p99.5"), (0.999, "p99.9")])
def test_estimates_table_names_the_quantile_it_shows(quantile: float, label: str) -> None:
    settings = EstimateSettings(quantile=quantile)
    estimate = DurationEstimate("train", declared=600.0, fallback=600.0)
    table = estimates_table("d", {"train": estimate}, settings, 1.5)
    assert [name for name, _ in table.columns][3] == label


# -- learned durations: estimates and plan ------------------------------------------------------------


@pytest.mark.usefixtures("_no_configured_pools")
def test_estimates_flags_declared_estimates_that_are_off(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # train declares 2h but takes 20m; load declares 20m and takes 21m
    fake_history(monkeypatch, {"train": 1200.0, "load": 1260.0})
    code, report = run_json(capsys, "estimates", PIPELINE, "--file", str(GOOD))
    assert code == 0 and report["flagged"] == ["train"]
    by_task = {t["task_id"]: t for t in report["tasks"]}
    assert by_task["train"]["source"] == "learned" and by_task["train"]["runs"] == 4
    assert by_task["train"]["learned"] == pytest.approx(1200, rel=0.02)
    assert by_task["train"]["declared"] == 7200 and by_task["train"]["ratio"] == pytest.approx(
        1 / 6, rel=0.02
    )
    assert by_task["evaluate"]["source"] == "declared" and not by_task["evaluate"]["flagged"]
    code, report = run_json(capsys, "estimates", PIPELINE, "--file", str(GOOD), "--factor", "1.01")
    assert report["flagged"] == ["load", "train"]
    for factor in ("1", "nan", "inf"):
        assert run_cli("estimates", PIPELINE, "--file", str(GOOD), "--factor", factor) == 1
        assert "must be a finite number greater than 1" in capsys.readouterr().err
    assert run_cli("estimates", PIPELINE, "--file", str(GOOD)) == 0
    out = capsys.readouterr().out
    assert "OFF >1.5x" in out and "1 of 13 task(s) flagged" in out


# -- direct unit tests of the module --------------------------------------------------------------------
def _estimates() -> dict[str, DurationEstimate]:
    """``off`` declares 2 h and takes 20 min; ``right`` declares 20 min and takes 21; ``undeclared`` has
    a history but no estimate; ``marker`` declares 0 and takes 2 min; ``new`` has no history yet."""
    found = [
        DurationEstimate("off", 7200.0, 7200.0, learned=1200.0, high=1300.0, runs=5, dropped={"outlier": 2}),
        DurationEstimate(
            "right",
            1200.0,
            1200.0,
            learned=1260.0,
            high=1300.0,
            runs=4,
            dropped={"outlier": 1, "clock_skew": 3},
        ),
        DurationEstimate("undeclared", None, 600.0, learned=900.0, high=950.0, runs=3),
        DurationEstimate("marker", 0.0, 0.0, learned=120.0, high=130.0, runs=3),
        DurationEstimate("new", 1800.0, 1800.0, runs=1),
    ]
    return {e.task_id: e for e in found}


def test_the_report_flags_far_off_undeclared_and_marker_tasks_with_every_column() -> None:
    settings = EstimateSettings(window=7, quantile=0.95, min_runs=3)
    report = estimates_report("d", _estimates(), settings, 1.5, note="why not")
    assert report["dag_id"] == "d" and report["note"] == "why not"
    assert report["settings"] == {
        "enabled": True,
        "window": 7,
        "quantile": 0.95,
        "min_runs": 3,
        "flag_factor": 1.5,
    }
    assert report["flagged"] == ["off", "undeclared", "marker"]
    assert all(list(task) == list(ESTIMATE_COLUMNS) for task in report["tasks"])  # the plain header
    json.dumps(report)  # JSON-ready as it is
    assert estimates_report("d", _estimates(), settings, 1.01)["flagged"] == [
        "off",
        "right",
        "undeclared",
        "marker",
    ]


def test_the_report_of_a_dag_without_tasks_is_empty() -> None:
    report = estimates_report("d", {}, EstimateSettings(), 1.5)
    assert report["flagged"] == [] and report["tasks"] == [] and report["note"] == ""


def test_the_table_shows_each_kind_of_estimate_in_words() -> None:
    table = estimates_table("d", _estimates(), EstimateSettings(window=7), 1.5)
    assert table.title == "Durations of DAG 'd': declared vs learned from the last 7 successful tries"
    rows = {cells[0]: (cells, highlight) for cells, highlight in table.rows}
    off, highlight = rows["off"]
    assert off[1:] == ["2h00m", "20m", "21m40s", "5", "outlier 2", "0.17x", "learned 20m", "OFF >1.5x"]
    assert highlight
    right, highlight = rows["right"]
    assert right[5] == "clock_skew 3, outlier 1" and right[6] == "1.05x" and right[8] == "" and not highlight
    undeclared, highlight = rows["undeclared"]
    assert (undeclared[1], undeclared[6], undeclared[8], highlight) == ("(none)", "-", "UNDECLARED", True)
    marker, highlight = rows["marker"]
    assert (marker[1], marker[6], marker[8], highlight) == ("0s", "-", "OFF >1.5x", True)
    new, highlight = rows["new"]
    assert new[1:] == ["30m", "-", "-", "1", "-", "-", "declared 30m", ""] and not highlight


def test_the_flag_names_the_factor_asked_for() -> None:
    table = estimates_table("d", _estimates(), EstimateSettings(), 1.01)
    assert {cells[0]: cells[8] for cells, _ in table.rows}["right"] == "OFF >1.01x"


# -- the command -------------------------------------------------------------------------------------------
def _empty_dag(folder: Path) -> Path:
    return dag_file(folder, "empty.py", '\nwith DAG("no_tasks", schedule=None):\n    pass\n')


@pytest.mark.usefixtures("_no_configured_pools")
def test_plain_output_of_a_dag_without_tasks_is_the_header_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cli.md: the header is printed also for a DAG with no task."""
    _empty_dag(tmp_path)
    assert run_cli("estimates", "no_tasks", "--file", str(tmp_path), "-o", "plain") == 0
    assert capsys.readouterr().out == "\t".join(ESTIMATE_COLUMNS) + "\n"


@pytest.mark.usefixtures("_no_configured_pools")
@pytest.mark.parametrize("factor", ["0.5", "-2", "1e400"])
def test_a_factor_of_one_or_less_or_infinite_is_refused_with_an_example(
    factor: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("estimates", PIPELINE, "--file", str(GOOD), "--factor", factor) == 1
    assert "must be a finite number greater than 1 (e.g. --factor 1.5)" in capsys.readouterr().err


@pytest.mark.usefixtures("_no_configured_pools")
def test_with_learning_off_the_table_says_so_and_nothing_is_learned(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_history(monkeypatch, {"train": 1200.0})
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "false")
    code, report = run_json(capsys, "estimates", PIPELINE, "--file", str(GOOD))
    assert code == 0 and report["settings"]["enabled"] is False and report["flagged"] == []
    assert all(t["learned"] is None for t in report["tasks"])
    assert run_cli("estimates", PIPELINE, "--file", str(GOOD)) == 0
    assert "Learning is off ([gpu_dag] learned_durations = false)" in capsys.readouterr().out


@pytest.mark.usefixtures("_no_configured_pools")
def test_a_database_without_tables_is_a_note_naming_db_migrate_not_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_gpu_dag.airflow import history

    def no_table(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no such table: task_instance")

    monkeypatch.setattr(history, "read_history", no_table)
    code, report = run_json(capsys, "estimates", PIPELINE, "--file", str(GOOD))
    assert code == 0
    assert report["note"].startswith("the metadata database is not set up: run `airflow db migrate`")
    assert run_cli("estimates", PIPELINE, "--file", str(GOOD)) == 0
    out = capsys.readouterr().out
    assert "Note: the metadata database is not set up: run `airflow db migrate`" in out
    assert "plans use the declared estimates." in out


@pytest.mark.usefixtures("_no_configured_pools")
def test_yaml_output_has_the_same_content_as_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_history(monkeypatch, {"train": 1200.0})
    _, report = run_json(capsys, "estimates", PIPELINE, "--file", str(GOOD))
    assert run_cli("estimates", PIPELINE, "--file", str(GOOD), "-o", "yaml") == 0
    assert yaml.safe_load(capsys.readouterr().out) == report


@pytest.mark.usefixtures("_no_configured_pools")
def test_an_unknown_dag_is_an_error_naming_it_and_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("estimates", "no_such_dag", "--file", str(GOOD)) == 1
    err = capsys.readouterr().err
    assert "DAG 'no_such_dag' not found" in err and "--file PATH" in err
