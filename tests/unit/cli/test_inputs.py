"""What the CLI reads from its arguments and settings: each test is a case it got wrong before.

* ``lint a.py b.py`` with one DAG id in both files kept the later one: the broken DAG was never
  checked and the duplicate not reported (exit 0);
* ``simulate --capacity`` threw ``[gpu_dag] pools`` away (``lint --pool`` adds to it), then told the
  user to set what was set; with several DAGs a ``--capacity`` pool no DAG uses (a typo) passed;
* ``simulate A A`` simulated one run without a word; ``--max-gpus-per-host 0`` was taken;
* ``plan`` showed "Declared 0s" for a mapped task with 0 instances that declares 15 minutes."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_gpu_dag.cli.common import parse_pool_args
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
