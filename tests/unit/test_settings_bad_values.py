"""``[gpu_dag]`` values that used to escape the checks: a pool size ``int()`` refuses, a default
duration longer than any estimate may be, ``[gpu_dag] queues`` entries of the wrong type, and numbers
outside their range. Each is reported by ``config_problems`` (so ``lint`` and the cluster policy show
it) and ignored where it is read, and nothing raises in the scheduler."""

from __future__ import annotations

import functools
import logging
from typing import Any

import pytest

from airflow_gpu_dag import settings
from tests.unit.test_priority_settings import _fresh, _problem, _set  # noqa: F401 (autouse fixture)


def test_a_pool_size_int_refuses_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    # "²".isdigit() is True but int("²") raises: before, config_problems, pool_capacities and with them
    # every cross-DAG weight (WeightSettings.read) raised ValueError
    _set(monkeypatch, "pools", '{"gpu_default": "²"}')
    assert "gives pool 'gpu_default' '²' slots" in str(_problem("pools"))
    assert settings.pool_capacities() is None
    _set(monkeypatch, "pools", '{"gpu_default": " 8 "}')
    assert settings.pool_capacities() == {"gpu_default": 8}


def test_a_default_duration_longer_than_any_estimate_is_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # before: taken as is, every key of a run fell before the epoch and all weights saturated at int32
    _set(monkeypatch, "default_duration", "1000d")
    assert "longer than any task runs" in str(_problem("default_duration"))
    with caplog.at_level(logging.WARNING):
        assert settings.default_duration_seconds() == 1800.0
    _set(monkeypatch, "default_duration", "2h")
    assert _problem("default_duration") is None and settings.default_duration_seconds() == 7200.0


@pytest.mark.parametrize(
    "site",
    [
        {"pool": "gpu01", "node_labels": "gpu01"},  # before: an unexplained dict() error in pin_to_queue
        {"pool": 7},  # before: task.pool = "7"
        {"pool": ["a"]},  # before: task.pool = "['a']"
        {"pool": None},  # before: the GPU task silently stayed in default_pool
        {"pool": "gpu01", "node_labels": {"zone": 1}},
    ],
)
def test_queue_entries_of_the_wrong_type_are_refused(monkeypatch: pytest.MonkeyPatch, site: Any) -> None:
    import json

    _set(monkeypatch, "queues", json.dumps({"host-gpu01": site}))
    with pytest.raises(ValueError, match=r"\[gpu_dag\] queues .*'host-gpu01': pools must be names"):
        settings.queue_sites()


def test_queue_entries_of_the_right_type_still_load(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, "queues", '{"a": "gpu_a", "b": {"pool": "gpu_b", "node_labels": {"zone": "z1"}}}')
    assert settings.queue_sites() == {
        "a": {"pool": "gpu_a"},
        "b": {"pool": "gpu_b", "node_labels": {"zone": "z1"}},
    }


@pytest.mark.parametrize(
    ("option", "value", "problem", "used"),
    [
        ("planner_nice", "-5", "-5 must be >= 0 and <= 19", 19),
        ("planner_nice", "25", "25 must be >= 0 and <= 19", 19),
        ("plan_search_budget", "-5", "-5 must be >= 0", 0),
    ],
)
def test_numbers_outside_their_range_are_reported_and_logged(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    option: str,
    value: str,
    problem: str,
    used: int,
) -> None:
    # before: clamped silently (planner_nice -5 -> 0, neither the default nor logged), never reported
    _set(monkeypatch, option, value)
    assert _problem(option) == problem
    with caplog.at_level(logging.WARNING):
        assert getattr(settings, option)() == used
    assert f"[gpu_dag] {option} '{value}'" in caplog.text


# -- a small blast radius: a bad optional option does not fail every GPU DAG's import -----------------
def _gpu_dag(dag_id: str) -> Any:
    from airflow.sdk import DAG

    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE
    from airflow_gpu_dag.operators.gpu import GpuBashOperator

    with DAG(dag_id, schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        GpuBashOperator(task_id="train", bash_command="true", gpus=2, gpu_type="a100", duration="1h")
    return dag


@pytest.fixture
def _config_errors_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_gpu_dag.log_once import LogOnce

    for option in ("POOLS", "OBJECTIVE", "INVENTORY", "INVENTORY_SOURCE", "MAX_GPUS_PER_HOST"):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{option}", raising=False)
    monkeypatch.setattr(settings, "_config_errors", LogOnce(settings.log, level=logging.ERROR))


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("pools", "gpu_default=8"),
        ("learned_quantile", "1.5"),
        ("objective", "fastest"),
        ("key_epoch", "soon"),
    ],
)
def test_a_malformed_option_is_one_logged_error_not_an_import_error_of_every_gpu_dag(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    _config_errors_fresh: None,
    option: str,
    value: str,
) -> None:
    """Before, the cluster policy raised ``bad-config`` (``bad-objective``) for every GPU DAG: one typo
    of an admin took every team's DAGs off the scheduler."""
    from airflow_gpu_dag.airflow.policy import dag_policy

    _set(monkeypatch, option, value)
    with caplog.at_level(logging.WARNING):
        for dag_id in ("team_a", "team_b", "team_c"):
            dag_policy(_gpu_dag(dag_id))  # imports, with the option's default
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors  # once per process, not once per DAG
    assert f"[gpu_dag] {option}" in errors[0] and "default" in errors[0]
    assert f"AIRFLOW__GPU_DAG__{option.upper()}" in errors[0]


def _lint(*argv: str) -> int:
    from tests.unit.test_cli import run_cli

    return run_cli("lint", *argv)


def _dag_files(folder: Any, *dag_ids: str, gpu: bool = True) -> str:
    folder.mkdir(exist_ok=True)
    for dag_id in dag_ids:
        body = (
            "from airflow_gpu_dag.operators.gpu import GpuBashOperator\n"
            f"with DAG({dag_id!r}, schedule=None):\n"
            "    GpuBashOperator(task_id='t', bash_command='true', duration='30m')\n"
            if gpu
            else "from airflow.providers.standard.operators.empty import EmptyOperator\n"
            f"with DAG({dag_id!r}, schedule=None):\n    EmptyOperator(task_id='t')\n"
        )
        (folder / f"{dag_id}.py").write_text("from airflow.sdk import DAG\n" + body)
    return str(folder)


def test_lint_fails_on_a_malformed_option_once_whatever_the_dags(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
    _config_errors_fresh: None,
) -> None:
    import json

    _set(monkeypatch, "learned_quantile", "1.5")
    # before: OK for DAGs that do not use the provider (the check ran per GPU DAG only)
    assert _lint(_dag_files(tmp_path / "plain", "plain", gpu=False), "-o", "json") == 1
    (bad,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["code"] == "bad-config"]
    assert "[gpu_dag] learned_quantile" in bad["message"]
    assert "AIRFLOW__GPU_DAG__LEARNED_QUANTILE" in bad["fix"]
    # before: one bad-config finding per GPU DAG
    assert _lint(_dag_files(tmp_path / "gpu", "gpu_a", "gpu_b"), "-o", "json") == 1
    found = json.loads(capsys.readouterr().out)["findings"]
    assert len([f for f in found if f["code"] == "bad-config"]) == 1


def test_lint_fails_on_a_malformed_inventory(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
    _config_errors_fresh: None,
) -> None:
    import json

    _set(monkeypatch, "inventory", "4xa100:80XB")
    assert _lint(_dag_files(tmp_path, "gpu_a"), "-o", "json") == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["import_errors"]  # before: every GPU operator failed its DAG's import
    (bad,) = [f for f in report["findings"] if f["code"] == "bad-config"]
    assert "[gpu_dag] inventory" in bad["message"] and "80XB" in bad["message"]


def test_the_watermark_controller_refuses_to_start_on_a_malformed_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], _config_errors_fresh: None
) -> None:
    from tests.unit.test_cli import run_cli

    _set(monkeypatch, "pools", '{"gpu_default": 8}')
    _set(monkeypatch, "learned_quantile", "1.5")
    assert run_cli("watermark", "--once", "--dry-run") == 1
    err = capsys.readouterr().err
    assert "[gpu_dag] learned_quantile" in err and "1.5" in err


# -- the dag-processor's own GPUs are not the workers' ------------------------------------------------
def _nvml_sees(monkeypatch: pytest.MonkeyPatch, gpu_type: str) -> None:
    from airflow_gpu_dag.gpu import inventory as inv

    host = inv.GpuInventory((inv.GpuDevice(0, gpu_type, 15360),), source="nvml")
    monkeypatch.setattr(inv, "nvml_inventory", lambda: host)
    # a cache of its own (restored after the test): a fake host's GPUs must not outlive it
    fresh = functools.lru_cache(maxsize=8)(inv._parse_time_for.__wrapped__)
    monkeypatch.setattr(inv, "_parse_time_for", fresh)


def test_auto_does_not_check_dags_against_the_parsing_hosts_gpus(
    monkeypatch: pytest.MonkeyPatch, _config_errors_fresh: None
) -> None:
    """A dag-processor with a T4 of its own refused every DAG asking for the workers' a100s."""
    from airflow_gpu_dag.airflow.policy import validate_dag

    _nvml_sees(monkeypatch, "t4")
    assert validate_dag(_gpu_dag("on_a_t4_host")).errors == []


def test_auto_checks_against_the_static_inventory_even_on_a_host_with_gpus(
    monkeypatch: pytest.MonkeyPatch, _config_errors_fresh: None
) -> None:
    from airflow_gpu_dag.operators.gpu_spec import GpuTaskError

    _nvml_sees(monkeypatch, "a100")
    _set(monkeypatch, "inventory", "8xh100:80GiB")
    static = r"not in the inventory \(known types: h100; the static inventory, \[gpu_dag\] inventory\)"
    with pytest.raises(GpuTaskError, match=static):
        _gpu_dag("static_wins")


def test_nvml_at_parse_time_only_when_asked_and_the_error_names_inventory_source(
    monkeypatch: pytest.MonkeyPatch, _config_errors_fresh: None
) -> None:
    from airflow_gpu_dag.operators.gpu_spec import GpuTaskError

    _nvml_sees(monkeypatch, "t4")
    _set(monkeypatch, "inventory_source", "nvml")
    with pytest.raises(GpuTaskError, match="inventory_source = nvml") as err:
        _gpu_dag("asked_for_nvml")
    assert "inventory_source = auto" in str(err.value)  # the fix


def test_a_malformed_inventory_does_not_fail_the_import_of_gpu_dags(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, _config_errors_fresh: None
) -> None:
    _set(monkeypatch, "inventory", "4xa100:80XB")
    with caplog.at_level(logging.WARNING):
        _gpu_dag("inv_a")  # before: GpuTaskError "the GPU inventory configuration is invalid"
        _gpu_dag("inv_b")
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "[gpu_dag] inventory" in errors[0]
    assert "checked against no inventory" in errors[0]


@pytest.mark.parametrize(("option", "value"), [("pools", "nope"), ("max_gpus_per_host", "eight")])
def test_a_malformed_limit_is_warned_once_not_at_every_gpu_task(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    _config_errors_fresh: None,
    option: str,
    value: str,
) -> None:
    """Every GPU operator reads ``pools`` and ``max_gpus_per_host`` when it is declared: a warning per
    task buried the one error the cluster policy logs."""
    _set(monkeypatch, option, value)
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.settings"):
        for dag_id in ("w_a", "w_b", "w_c"):
            _gpu_dag(dag_id)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([m for m in warned if f"[gpu_dag] {option}" in m]) == 1, warned
