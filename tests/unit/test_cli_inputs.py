"""What the CLI reads from its arguments and settings: each test is a case it got wrong before.

* ``lint a.py b.py`` with one DAG id in both files kept the later one: the broken DAG was never
  checked and the duplicate not reported (exit 0);
* ``simulate --capacity`` threw ``[gpu_dag] pools`` away (``lint --pool`` adds to it), then told the
  user to set what was set; with several DAGs a ``--capacity`` pool no DAG uses (a typo) passed;
* ``simulate A A`` simulated one run without a word; ``--max-gpus-per-host 0`` was taken;
* ``plan`` showed "Declared 0s" for a mapped task with 0 instances that declares 15 minutes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_cli import run_cli, run_json

_HEAD = """
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task
from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
"""


@pytest.fixture(autouse=True)
def _settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


def _dag_file(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(_HEAD + body)
    return path


def _two_pools(folder: Path) -> Path:
    return _dag_file(
        folder,
        "two_pools.py",
        """
with DAG("two_pools", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}):
    a = EmptyOperator(task_id="a", pool="gpu_a100", pool_slots=2,
                      executor_config=gpu_hints(duration="1h", gpus=2, gpu_type="a100"))
    b = EmptyOperator(task_id="b", pool="gpu_default", executor_config=gpu_hints(duration="30m", gpus=1))
    a >> b
""",
    )


def test_lint_reports_a_dag_id_defined_in_two_of_the_files_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = 'EmptyOperator(task_id="t1", executor_config=gpu_hints(duration="forty minutes"))'
    broken = _dag_file(tmp_path, "d1.py", f'with DAG("dup", schedule=None):\n    {bad}\n')
    clean = _dag_file(tmp_path, "d2.py", 'with DAG("dup", schedule=None):\n    EmptyOperator(task_id="t1")\n')
    code, result = run_json(capsys, "lint", str(broken), str(clean))
    assert code == 1 and result["ok"] is False
    codes = {(f["code"], f.get("task_id")) for f in result["findings"]}
    assert ("bad-estimate", "t1") in codes  # the first file's DAG is checked, not replaced
    (error,) = result["import_errors"]
    assert error["file"] == str(clean)
    assert "Ignoring DAG dup from" in error["message"] and "also found in" in error["message"]
    assert run_cli("lint", str(tmp_path), str(clean), str(tmp_path)) == 1
    assert "in 2 file(s)" in capsys.readouterr().out  # each file counted once


def test_simulate_capacity_adds_to_the_configured_pools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _two_pools(tmp_path)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", json.dumps({"gpu_default": 4, "gpu_a100": 4}))
    code, result = run_json(
        capsys, "simulate", "two_pools", "--file", str(tmp_path), "--capacity", "gpu_a100=2"
    )
    assert code == 0 and result["capacity"] == {"gpu_a100": 2, "gpu_default": 4}
    runs = ["--trigger", "two_pools=0", "--trigger", "two_pools=30m", "--capacity", "gpu_a100=2"]
    code, result = run_json(capsys, "simulate", "--file", str(tmp_path), *runs)
    assert code == 0 and result["capacity"] == {"gpu_a100": 2, "gpu_default": 4}


def test_simulate_says_what_is_wrong_with_the_pools_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _two_pools(tmp_path)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", json.dumps({"gpu_a100": 4}))
    assert run_cli("simulate", "two_pools", "--file", str(tmp_path)) == 1
    assert "add 'gpu_default' to [gpu_dag] pools (it has gpu_a100)" in capsys.readouterr().err
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", "not json")
    assert run_cli("simulate", "two_pools", "--file", str(tmp_path), "--capacity", "gpu_a100=2") == 1
    assert "fix [gpu_dag] pools, which is not JSON" in capsys.readouterr().err


def test_several_runs_refuse_a_capacity_no_dag_uses_and_a_dag_id_given_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _two_pools(tmp_path)
    capacity = ["--capacity", "gpu_a100=2", "--capacity", "gpu_default=1"]
    argv = ["simulate", "--file", str(tmp_path), "--trigger", "two_pools=0", "--trigger", "two_pools=1h"]
    assert run_cli(*argv, *capacity, "--capacity", "gpu_h100=8") == 1
    assert "pool(s) gpu_h100 not used by the simulated DAGs" in capsys.readouterr().err
    code, result = run_json(capsys, *argv, *capacity)
    assert code == 0 and len(result["runs"]) == 2
    assert run_cli("simulate", "two_pools", "two_pools", "--file", str(tmp_path), *capacity) == 1
    assert "DAG id 'two_pools' given twice" in capsys.readouterr().err


def test_lint_refuses_a_host_of_zero_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_cli("lint", "--max-gpus-per-host", "0")
    assert exit_.value.code == 2 and "a whole number >= 1" in capsys.readouterr().err


def test_plan_keeps_the_declared_estimate_of_a_mapped_task_with_no_instance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _dag_file(
        tmp_path,
        "zero.py",
        """
with DAG("zero", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}):
    @task(executor_config=gpu_hints(duration="10m"))
    def make():
        return []

    @task(pool="gpu_default", executor_config=gpu_hints(duration="15m", gpus=1, map_length=0))
    def trial(x):
        return x

    trial.expand(x=make())
""",
    )
    code, plan = run_json(capsys, "plan", "zero", "--file", str(tmp_path), "--declared-only")
    assert code == 0
    (trial,) = [t for t in plan["tasks"] if t["task_id"] == "trial"]
    assert (trial["duration"], trial["declared_duration"]) == (0.0, 900.0)


def test_plan_critical_only_holds_in_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.test_cli import GOOD, PIPELINE

    _, whole = run_json(capsys, "plan", PIPELINE, "--file", str(GOOD))
    _, critical = run_json(capsys, "plan", PIPELINE, "--file", str(GOOD), "--critical-only")
    assert [t["task_id"] for t in critical["tasks"]] == [
        t["task_id"] for t in whole["tasks"] if t["critical"]
    ]
    assert (
        len(critical["tasks"]) < len(whole["tasks"]) and critical["critical_path"] == whole["critical_path"]
    )


def test_an_objective_with_one_dag_simulates_it_as_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    # Before: --objective was ignored for one DAG (the single-DAG report, no word on the objective).
    from tests.unit.test_cli import GOOD, PIPELINE

    argv = [
        "simulate",
        PIPELINE,
        "--file",
        str(GOOD),
        "--capacity",
        "gpu_default=4",
        "--objective",
        "latency",
    ]
    code, result = run_json(capsys, *argv)
    assert code == 0 and result["objective"]["name"] == "latency" and len(result["runs"]) == 1


# -- the first run ---------------------------------------------------------------------------------------
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


def test_a_database_without_tables_says_run_db_migrate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh AIRFLOW_HOME where `airflow db migrate` never ran: reading past runs fails with ``no
    such table: task_instance``; plan and estimates still work on the declared estimates and say the
    fix."""
    import contextlib

    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from airflow_gpu_dag.airflow import history

    engine = create_engine(f"sqlite:///{tmp_path / 'airflow.db'}")  # an empty database

    @contextlib.contextmanager
    def empty_database(scoped: bool = True) -> Any:
        with Session(engine) as session:
            yield session

    monkeypatch.setattr(history, "create_session", empty_database)
    good = Path(__file__).resolve().parents[2] / "tests" / "integration" / "dags" / "ui"
    code, plan = run_json(capsys, "plan", "gpu_pipeline", "--file", str(good))
    assert code == 0
    assert plan["history_note"].startswith("the metadata database is not set up: run `airflow db migrate`")
    assert "no such table: task_instance" in plan["history_note"]
    assert run_cli("estimates", "gpu_pipeline", "--file", str(good)) == 0
    assert "run `airflow db migrate`" in capsys.readouterr().out
