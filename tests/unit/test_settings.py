"""The ``[gpu_dag]`` options the priority weights read: a value the provider cannot use is never taken
silently. Where it is read (the scheduler: never raising) the default is used and a warning logged
once; ``config_problems`` names it, so ``airflow gpu-dag lint`` reports it (``bad-config``) and the
cluster policy logs it once."""

from __future__ import annotations

import functools
import logging
from typing import Any

import pytest

from airflow_gpu_dag import settings
from airflow_gpu_dag.core.policy.objective import DEFAULT_EPOCH, DEFAULT_OBJECTIVE, OBJECTIVES
from tests.unit.conftest import (
    _problem,
    _set,
)

NOW = 1_796_040_000.0  # 2026-11-30T12:00:00Z


# -- [gpu_dag] learned_refresh ---------------------------------------------------------------------------
@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize("value", ["0", "0s", "0.5"])
def test_a_learned_refresh_under_one_second_is_refused_and_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    """Under 1 s, every settings re-read of the weights (each 30 s) built a new LearnedDurations whose
    refresh thread never stopped: one more thread re-reading every DAG's history each second."""
    _set(monkeypatch, "learned_refresh", value)
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.settings"):
        assert settings.learned_refresh() == 600.0
        assert settings.learned_refresh() == 600.0
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"[gpu_dag] learned_refresh {value!r} is under 1s; using 10m"
    ]
    assert _problem("learned_refresh") == f"{value!r} is under 1s, the shortest refresh"


@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize("value", ["0", "0s", "0m"])
def test_a_budget_claim_ttl_not_over_zero_is_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    """Where it is read a claim TTL <= 0 was already refused (claims would lapse as they are made, so every
    budget gate would pass), but lint and the cluster policy did not report it: found in logs only."""
    from airflow_gpu_dag.budget.check import claim_ttl_seconds

    _set(monkeypatch, "budget_claim_ttl", value)
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.budget.check"):
        assert claim_ttl_seconds() == 86400.0
    problem = _problem("budget_claim_ttl")
    assert problem is not None and problem.startswith(f"{value!r} is not > 0"), problem


@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize("option", ["learned_refresh", "budget_claim_ttl"])
def test_durations_that_do_not_parse_are_reported(monkeypatch: pytest.MonkeyPatch, option: str) -> None:
    _set(monkeypatch, option, "soon")
    problem = _problem(option)
    assert problem is not None and problem.startswith("'soon': ") and "cannot be parsed" in problem
    _set(monkeypatch, option, "2m")
    assert _problem(option) is None


@pytest.mark.usefixtures("_fresh")
def test_a_valid_learned_refresh_is_read() -> None:
    assert settings.learned_refresh() == 600.0  # unset: 10m
    assert _problem("learned_refresh") is None


# -- [gpu_dag] key_epoch ----------------------------------------------------------------------------------
@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("1735689600000", "in the future (epoch milliseconds? give seconds)"),  # 2025-01-01 in milliseconds
        ("1e12", "in the future (epoch milliseconds? give seconds)"),
        ("2099-06-01T00:00:00+00:00", "in the future: every key would be before it"),
        ("0", "more than 34 years"),  # 1970: weights under KEY_WEIGHT_FLOOR, not read as keys
        ("1950-01-01", "more than 34 years"),
        ("soon", "neither epoch seconds nor an ISO date"),
    ],
)
def test_a_key_epoch_in_the_future_or_too_old_is_refused_and_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str, fragment: str
) -> None:
    """An epoch after now put every key before it: every task instance of every DAG got the same weight,
    2147483647, and the critical-path order was gone, without a word."""
    _set(monkeypatch, "key_epoch", value)
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.settings"):
        assert settings.key_epoch() == DEFAULT_EPOCH
    assert fragment in caplog.text and "using 2025-01-01" in caplog.text
    problem = _problem("key_epoch")
    assert problem is not None and problem.startswith(repr(value)) and fragment in problem


@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize(
    ("value", "expected"), [("1700000000", 1_700_000_000.0), ("2024-01-01", 1_704_067_200.0)]
)
def test_a_past_key_epoch_is_used(monkeypatch: pytest.MonkeyPatch, value: str, expected: float) -> None:
    _set(monkeypatch, "key_epoch", value)
    assert settings.key_epoch() == expected and _problem("key_epoch") is None


@pytest.mark.usefixtures("_fresh")
def test_the_epoch_range_is_checked_against_the_clock() -> None:
    assert settings._epoch_problem("2026-11-30T12:00:01Z", now=NOW) is not None  # one second ahead
    assert settings._epoch_problem("2026-11-30T12:00:00Z", now=NOW) is None
    assert settings._epoch_problem(str(NOW - 2**30 + 1), now=NOW) is None
    assert settings._epoch_problem(str(NOW - 2**30 - 1), now=NOW) is not None


@pytest.mark.usefixtures("_fresh")
def test_weights_keep_the_critical_path_order_with_a_millisecond_epoch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """End to end: a ``key_epoch`` given in milliseconds is read as such, so the weights keep the
    critical-path order instead of all saturating at 2147483647."""
    from types import SimpleNamespace

    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
    from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy

    _set(monkeypatch, "key_epoch", "1735689600000")
    _set(monkeypatch, "plan_in_background", "false")
    _set(monkeypatch, "learned_durations", "false")
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    with DAG("chain", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}, schedule=None) as dag:
        load = BashOperator(task_id="load", bash_command="x", executor_config=gpu_hints(duration="10m"))
        train = BashOperator(task_id="train", bash_command="x", executor_config=gpu_hints(duration="6h"))
        load >> train
    sdag = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    weights = CriticalPathPriorityStrategy._weights
    weights.reset()
    try:
        run_id = "manual__2026-11-30T12:00:00+00:00"
        got = {
            t: CriticalPathPriorityStrategy().get_weight(
                SimpleNamespace(
                    task=sdag.task_dict[t], task_id=t, dag_id="chain", run_id=run_id, map_index=-1
                )
            )
            for t in ("load", "train")
        }
    finally:
        weights.reset()
    # keys of one run differ by c x the remaining times (10 min of difference) and U x the descendants
    # (load has train below it)
    objective = OBJECTIVES[DEFAULT_OBJECTIVE]
    apart = 600 * objective.chain + objective.descendant_unit
    assert got["load"] - got["train"] == apart and got["load"] < 2**31 - 1


# -- enumerations and booleans ------------------------------------------------------------------------------
@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize(
    ("option", "value", "read", "used"),
    [
        ("plan_policy", "gredy", settings.plan_policy, "reservation"),
        ("plan_backfill", "stict", settings.plan_strict_backfill, False),
    ],
)
def test_unknown_plan_values_fall_back_and_are_reported(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    option: str,
    value: str,
    read: Any,
    used: Any,
) -> None:
    _set(monkeypatch, option, value)
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.settings"):
        assert read() == used
    assert f"[gpu_dag] {option} {value!r} is not one of" in caplog.text
    problem = _problem(option)
    assert problem is not None and problem.startswith(f"{value!r} is not one of")


@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize(
    ("value", "policy"),
    [
        ("reservation", "reservation"),
        (" Greedy ", "critical_path"),
        ("stock", "critical_path"),
        ("", "reservation"),
    ],
)
def test_known_plan_policies(monkeypatch: pytest.MonkeyPatch, value: str, policy: str) -> None:
    _set(monkeypatch, "plan_policy", value)
    assert settings.plan_policy() == policy and _problem("plan_policy") is None


@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize("option", ["plan_in_background", "learned_durations"])
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("f", False),
        ("F", False),
        ("false", False),
        ("0", False),
        ("off", False),
        ("no", False),
        ("false  # inline comment", False),
        ("t", True),
        ("True", True),
        ("1", True),
        ("on", True),
        ("yes", True),
    ],
)
def test_booleans_are_read_one_way(
    monkeypatch: pytest.MonkeyPatch, option: str, value: str, expected: bool
) -> None:
    """``plan_in_background = f`` (an Airflow boolean) planned in the background, ``off`` too, while
    ``learned_durations`` took ``off`` but not ``f``."""
    _set(monkeypatch, option, value)
    read = settings.plan_in_background if option == "plan_in_background" else settings.estimate_settings
    got = read()
    assert (got if isinstance(got, bool) else got.enabled) is expected
    assert _problem(option) is None


@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize("option", ["plan_in_background", "learned_durations"])
def test_a_value_that_is_not_a_boolean_falls_back_and_is_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, option: str
) -> None:
    _set(monkeypatch, option, "nope")
    read = settings.plan_in_background if option == "plan_in_background" else settings.estimate_settings
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.settings"):
        got = read()
    assert (got if isinstance(got, bool) else got.enabled) is True  # the default
    assert f"[gpu_dag] {option} 'nope' is not a boolean" in caplog.text
    assert _problem(option) == "'nope' is not a boolean (true or false)"


@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize("option", ["plan_search_budget", "planner_nice"])
def test_whole_numbers_that_do_not_parse_are_reported(monkeypatch: pytest.MonkeyPatch, option: str) -> None:
    _set(monkeypatch, option, "lots")
    assert _problem(option) == "'lots' is not a whole number"
    _set(monkeypatch, option, "5")
    assert _problem(option) is None


@pytest.mark.usefixtures("_fresh")
def test_the_defaults_have_no_problem() -> None:
    assert settings.config_problems() == []


@pytest.mark.usefixtures("_fresh")
def test_bad_config_names_each_option_in_lint(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``airflow gpu-dag lint`` shows (docs/cli.md, ``bad-config``); the cluster policy logs them."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
    from airflow_gpu_dag.airflow.policy import priority_findings
    from airflow_gpu_dag.cli.lint import config_findings

    for option, value in (
        ("plan_policy", "gredy"),
        ("plan_backfill", "stict"),
        ("plan_in_background", "nope"),
        ("learned_refresh", "soon"),
        ("budget_claim_ttl", "soon"),
        ("key_epoch", "1735689600000"),
    ):
        _set(monkeypatch, option, value)
    with DAG("d", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        EmptyOperator(task_id="train", executor_config=gpu_hints(duration="1h", gpus=2))
    assert not [f for f in priority_findings(dag) if f.code == "bad-config"]  # the DAG imports
    found = [f for f in config_findings() if f.code == "bad-config"]  # lint (and the controller) refuse
    assert sorted(f.message.split()[1] for f in found) == [
        "budget_claim_ttl",
        "key_epoch",
        "learned_refresh",
        "plan_backfill",
        "plan_in_background",
        "plan_policy",
    ]
    assert all(f.is_error for f in found)


@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("learned_window", "0", "must be >= 1, got 0"),
        ("learned_window", "twenty", "'twenty' is not a whole number"),
        ("learned_quantile", "1.5", "must be between 0 and 1 (exclusive), got 1.5"),
        ("learned_min_runs", "0", "must be >= 1, got 0"),
        ("learned_flag_factor", "0.5", "must be a finite number > 1, got 0.5"),
        ("too_large_action", "kept", "'kept' is not one of fail, keep"),
        ("too_large_intervals", "0", "0 must be >= 1"),
    ],
)
def test_learned_and_too_large_options_are_reported(
    monkeypatch: pytest.MonkeyPatch, option: str, value: str, problem: str
) -> None:
    """A bad value is a reported config problem, not only a log line where its default is used:
    ``too_large_action = kept`` (for keep) would make the controller *fail* the tasks the user meant to
    keep waiting."""
    _set(monkeypatch, option, value)
    assert _problem(option) == problem
    if option == "too_large_action":
        assert settings.too_large_policy() == (3, "fail")  # where it is read: the default, logged


@pytest.mark.usefixtures("_fresh")
def test_unusable_lease_options_are_reported_at_parse_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lease options LeaseSettings refuses are found at parse time: otherwise lint says OK and every
    GPU task fails when it starts."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag.airflow.policy import priority_findings

    with DAG("lease_cfg", schedule=None) as dag:
        EmptyOperator(task_id="train")
    assert not [f for f in priority_findings(dag) if f.code == "bad-config"]
    _set(monkeypatch, "lease_heartbeat", "90s")  # over half the default ttl of 120 s
    (found,) = [f for f in priority_findings(dag) if f.code == "bad-config"]
    assert found.is_error and "lease heartbeat (90.0s) must be at most half the lease ttl" in found.message
    assert "every GPU task fails when it starts" in found.message and "lease_heartbeat" in found.fix
    _set(monkeypatch, "lease_heartbeat", "10s")
    _set(monkeypatch, "lease_ttl", "soon")
    (found,) = [f for f in priority_findings(dag) if f.code == "bad-config"]
    assert "[gpu_dag] lease_ttl" in found.message


@pytest.mark.usefixtures("_fresh")
def test_config_problems_never_raises_when_the_configuration_cannot_be_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(settings, "conf_get", lambda key, fallback: fallback)
    assert settings.config_problems() == []
    assert settings.plan_in_background() is True and settings.plan_policy() == "reservation"


# -- ``[gpu_dag]`` values the checks must catch: a pool size ``int()`` refuses, a default


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


def _lint(*argv: str) -> int:
    from tests.unit.cli.conftest import run_cli

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


# -- the dag-processor's own GPUs are not the workers' ------------------------------------------------
def _nvml_sees(monkeypatch: pytest.MonkeyPatch, gpu_type: str) -> None:
    from airflow_gpu_dag.gpu import inventory as inv

    host = inv.GpuInventory((inv.GpuDevice(0, gpu_type, 15360),), source="nvml")
    monkeypatch.setattr(inv, "nvml_inventory", lambda: host)
    # a cache of its own (restored after the test): a fake host's GPUs must not outlive it
    fresh = functools.lru_cache(maxsize=8)(inv._parse_time_for.__wrapped__)
    monkeypatch.setattr(inv, "_parse_time_for", fresh)


@pytest.mark.usefixtures("_fresh")
def test_a_pool_size_int_refuses_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    # "²".isdigit() is True but int("²") raises: before, config_problems, pool_capacities and with them
    # every cross-DAG weight (WeightSettings.read) raised ValueError
    _set(monkeypatch, "pools", '{"gpu_default": "²"}')
    assert "gives pool 'gpu_default' '²' slots" in str(_problem("pools"))
    assert settings.pool_capacities() is None
    _set(monkeypatch, "pools", '{"gpu_default": " 8 "}')
    assert settings.pool_capacities() == {"gpu_default": 8}


@pytest.mark.usefixtures("_fresh")
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


@pytest.mark.usefixtures("_fresh")
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


@pytest.mark.usefixtures("_fresh")
def test_queue_entries_of_the_right_type_still_load(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, "queues", '{"a": "gpu_a", "b": {"pool": "gpu_b", "node_labels": {"zone": "z1"}}}')
    assert settings.queue_sites() == {
        "a": {"pool": "gpu_a"},
        "b": {"pool": "gpu_b", "node_labels": {"zone": "z1"}},
    }


@pytest.mark.usefixtures("_fresh")
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


@pytest.mark.usefixtures("_fresh")
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
    """A bad optional option is logged and its default used; the cluster policy does not raise
    ``bad-config`` (``bad-objective``) for every GPU DAG, so one typo of an admin cannot take every
    team's DAGs off the scheduler."""
    from airflow_gpu_dag.airflow.policy import dag_policy

    _set(monkeypatch, option, value)
    with caplog.at_level(logging.WARNING):
        for dag_id in ("team_a", "team_b", "team_c"):
            dag_policy(_gpu_dag(dag_id))  # imports, with the option's default
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors  # once per process, not once per DAG
    assert f"[gpu_dag] {option}" in errors[0] and "default" in errors[0]
    assert f"AIRFLOW__GPU_DAG__{option.upper()}" in errors[0]


@pytest.mark.usefixtures("_fresh")
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


@pytest.mark.usefixtures("_fresh")
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


@pytest.mark.usefixtures("_fresh")
def test_the_watermark_controller_refuses_to_start_on_a_malformed_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], _config_errors_fresh: None
) -> None:
    from tests.unit.cli.conftest import run_cli

    _set(monkeypatch, "pools", '{"gpu_default": 8}')
    _set(monkeypatch, "learned_quantile", "1.5")
    assert run_cli("watermark", "--once", "--dry-run") == 1
    err = capsys.readouterr().err
    assert "[gpu_dag] learned_quantile" in err and "1.5" in err


@pytest.mark.usefixtures("_fresh")
def test_auto_does_not_check_dags_against_the_parsing_hosts_gpus(
    monkeypatch: pytest.MonkeyPatch, _config_errors_fresh: None
) -> None:
    """A dag-processor with a T4 of its own refused every DAG asking for the workers' a100s."""
    from airflow_gpu_dag.airflow.policy import validate_dag

    _nvml_sees(monkeypatch, "t4")
    assert validate_dag(_gpu_dag("on_a_t4_host")).errors == []


@pytest.mark.usefixtures("_fresh")
def test_auto_checks_against_the_static_inventory_even_on_a_host_with_gpus(
    monkeypatch: pytest.MonkeyPatch, _config_errors_fresh: None
) -> None:
    from airflow_gpu_dag.operators.gpu_spec import GpuTaskError

    _nvml_sees(monkeypatch, "a100")
    _set(monkeypatch, "inventory", "8xh100:80GiB")
    static = r"not in the inventory \(known types: h100; the static inventory, \[gpu_dag\] inventory\)"
    with pytest.raises(GpuTaskError, match=static):
        _gpu_dag("static_wins")


@pytest.mark.usefixtures("_fresh")
def test_nvml_at_parse_time_only_when_asked_and_the_error_names_inventory_source(
    monkeypatch: pytest.MonkeyPatch, _config_errors_fresh: None
) -> None:
    from airflow_gpu_dag.operators.gpu_spec import GpuTaskError

    _nvml_sees(monkeypatch, "t4")
    _set(monkeypatch, "inventory_source", "nvml")
    with pytest.raises(GpuTaskError, match="inventory_source = nvml") as err:
        _gpu_dag("asked_for_nvml")
    assert "inventory_source = auto" in str(err.value)  # the fix


@pytest.mark.usefixtures("_fresh")
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


@pytest.mark.usefixtures("_fresh")
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


# -- 1. whole numbers as lint reads them ------------------------------------------------------------
@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize(
    ("option", "value", "used"),
    [
        ("plan_search_budget", "60_000", 60000),  # before: 0, with a warning in the scheduler log only
        ("plan_search_budget", "+5", 5),
        ("planner_nice", "+5", 5),  # before: 19
        ("planner_nice", " 1_0 ", 10),
    ],
)
def test_a_whole_number_lint_accepts_is_the_one_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, option: str, value: str, used: int
) -> None:
    _set(monkeypatch, option, value)
    assert _problem(option) is None
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.settings"):
        assert getattr(settings, option)() == used
    assert option not in caplog.text


@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize(("option", "default"), [("plan_search_budget", 0), ("planner_nice", 19)])
def test_a_number_that_does_not_parse_is_warned_once_and_the_default_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, option: str, default: int
) -> None:
    _set(monkeypatch, option, "lots")
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.settings"):
        assert getattr(settings, option)() == default
        assert getattr(settings, option)() == default  # read again every 30 s: said once
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"[gpu_dag] {option} 'lots' is not a number; using {default}"]


# -- 2. numbers int() refuses -------------------------------------------------------------------------
@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize(("option", "default"), [("plan_search_budget", 0), ("planner_nice", 19)])
def test_a_number_too_long_for_int_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, option: str, default: int
) -> None:
    # before: ValueError "Exceeds the limit (4300 digits)" from WeightSettings.read (the scheduler)
    _set(monkeypatch, option, "9" * 5000)
    assert getattr(settings, option)() == default
    assert str(_problem(option)).endswith("is not a whole number")


@pytest.mark.usefixtures("_fresh")
def test_pool_slots_too_long_for_int_are_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: config_problems (the cluster policy, lint) and pool_capacities (the weights) raised ValueError
    _set(monkeypatch, "pools", '{"gpu_default": "%s"}' % ("9" * 5000))
    assert "gives pool 'gpu_default'" in str(_problem("pools"))
    assert settings.pool_capacities() is None


# -- 3. a window that can never hold min_runs tries -----------------------------------------------------
@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize(("window", "min_runs"), [("2", None), (None, "30"), ("4", "5")])
def test_a_window_under_min_runs_is_reported_and_the_defaults_used(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    window: str | None,
    min_runs: str | None,
) -> None:
    """At most ``learned_window`` tries of a task are read and ``learned_min_runs`` are needed: with fewer
    in the window than needed, no task ever learned (declared estimates everywhere) and nothing said so."""
    from airflow_gpu_dag.core.analysis.estimates import EstimateSettings, RunSample, estimate_duration

    if window is not None:
        _set(monkeypatch, "learned_window", window)
    if min_runs is not None:
        _set(monkeypatch, "learned_min_runs", min_runs)
    problem = _problem("learned_window")
    assert problem is not None and "learned_min_runs" in problem, settings.config_problems()
    with caplog.at_level(logging.WARNING, logger="airflow_gpu_dag.settings"):
        used = settings.estimate_settings()
    assert (used.window, used.min_runs) == (EstimateSettings().window, EstimateSettings().min_runs)
    assert "learned_window" in caplog.text
    runs = [RunSample(600.0 + i % 3) for i in range(40)]
    assert estimate_duration("t", runs, 60.0, 60.0, used).learned is not None
    assert estimate_duration("t", runs, 60.0, 60.0, EstimateSettings(window=2)).learned is None  # before


@pytest.mark.usefixtures("_fresh")
def test_a_window_that_holds_min_runs_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    _set(monkeypatch, "learned_window", "5")
    _set(monkeypatch, "learned_min_runs", "5")
    assert settings.config_problems() == []
    used = settings.estimate_settings()
    assert (used.window, used.min_runs) == (5, 5)


@pytest.mark.usefixtures("_fresh")
@pytest.mark.parametrize("value", ["31d", "1e30"])
def test_an_overdue_that_lets_a_task_wait_without_bound_is_refused_at_start_up_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    """``reservation_overdue`` is how long a task may wait before it is reserved for, and it caps how far
    a run's due time lies past its own work: a huge one (1e30 s parses) is a wait without bound."""
    from airflow_gpu_dag.cli.watermark_command import _refuse_bad_config  # start-up: loads the CLI

    _set(monkeypatch, "reservation_overdue", value)
    assert "over 30 days" in (_problem("reservation_overdue") or "")
    with caplog.at_level(logging.WARNING):  # where it is read (the scheduler): logged, default used
        assert settings.objective().gate_overdue == OBJECTIVES[DEFAULT_OBJECTIVE].gate_overdue
    assert "reservation_overdue" in caplog.text and "30 days" in caplog.text
    with pytest.raises(
        SystemExit, match=r"\[gpu_dag\] reservation_overdue .* over 30 days: a task could wait"
    ):
        _refuse_bad_config()  # the watermark controller does not start on it
    _set(monkeypatch, "reservation_overdue", "30d")  # the longest accepted
    assert _problem("reservation_overdue") is None
    assert settings.objective().gate_overdue == 30 * 24 * 3600.0


@pytest.mark.usefixtures("_fresh")
def test_reservation_overdue_sets_the_gates_overdue_and_the_due_cap_only_where_they_are_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``fair`` counts its gate's overdue from the ready time, apart from the 12-h due cap: the setting
    moves the gate alone. The other objectives have one ``overdue`` for both: it moves both."""
    _set(monkeypatch, "reservation_overdue", "2d")
    fair = settings.objective()
    assert (fair.name, fair.gate_overdue, fair.overdue) == ("fair", 48 * 3600.0, 12 * 3600.0)
    _set(monkeypatch, "objective", "balanced")
    balanced = settings.objective()
    assert (balanced.gate_overdue, balanced.overdue) == (48 * 3600.0, 48 * 3600.0)


@pytest.mark.usefixtures("_fresh")
def test_descendant_unit_scales_fairs_term_and_a_unit_without_bound_is_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``descendant_unit`` is fair's time per descendant task (6 h: a training stage; 30 m for 10-minute
    jobs); the other objectives have no such term. 24 units over 30 days would put a run's first tasks
    ahead of a month of later runs: refused by lint and the controller, ignored where it is read."""
    _set(monkeypatch, "descendant_unit", "30m")
    assert _problem("descendant_unit") is None
    assert settings.objective().descendant_unit == 1800.0 and settings.objective().descendant_cap == 24
    _set(monkeypatch, "objective", "balanced")
    assert settings.objective().head_start == 0
    _set(monkeypatch, "objective", "fair")
    _set(monkeypatch, "descendant_unit", "2d")  # x 24 = 48 days
    assert "over 30 days" in (_problem("descendant_unit") or "")
    with caplog.at_level(logging.WARNING):
        assert settings.objective().descendant_unit == OBJECTIVES["fair"].descendant_unit
    assert "descendant_unit" in caplog.text


@pytest.mark.usefixtures("_fresh")
def test_stage_length_scales_every_time_of_the_objective_and_the_single_overrides_come_after(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``stage_length`` moves all of an objective's times from the 6-h stages they were chosen for to the
    pool's (fair: its unit, due cap, gap and gate overdue; balanced: its gap and overdue), the unitless
    constants staying; ``descendant_unit`` and the reservation options still override one time each.
    Stages whose 24 units of lead exceed 30 days (over 30 h) or that are not > 0 are refused by lint and
    the controller, ignored where read."""
    _set(monkeypatch, "stage_length", "20m")
    assert _problem("stage_length") is None
    fair, shipped = settings.objective(), OBJECTIVES["fair"]
    assert (fair.descendant_unit, fair.overdue, fair.gap, fair.gate_overdue) == (
        1200.0,
        2400.0,
        19200.0,
        7200.0,
    )
    assert (fair.stretch, fair.chain, fair.descendant_cap) == (shipped.stretch, shipped.chain, 24)
    _set(monkeypatch, "descendant_unit", "30m")
    _set(monkeypatch, "reservation_gap", "1h")
    fair = settings.objective()
    assert (fair.descendant_unit, fair.gap, fair.overdue, fair.gate_overdue) == (
        1800.0,
        3600.0,
        2400.0,
        7200.0,
    )
    _set(monkeypatch, "objective", "balanced")
    _set(monkeypatch, "reservation_gap", "")
    _set(monkeypatch, "stage_length", "3h")
    balanced = settings.objective()
    assert (balanced.gap, balanced.overdue, balanced.head_start) == (4 * 3600.0, 6 * 3600.0, 0)
    _set(monkeypatch, "objective", "fair")
    _set(monkeypatch, "descendant_unit", "")
    _set(monkeypatch, "stage_length", settings.DEFAULT_STAGE_LENGTH)
    assert settings.objective() == OBJECTIVES["fair"]
    for bad, words in (("31h", "over 30h"), ("0s", "is not > 0"), ("soon", "'soon'")):
        _set(monkeypatch, "stage_length", bad)
        assert words in (_problem("stage_length") or ""), bad
        with caplog.at_level(logging.WARNING):
            assert settings.objective() == OBJECTIVES["fair"]
    assert "stage_length" in caplog.text
    _set(monkeypatch, "stage_length", "30h")  # the longest accepted: 24 x 30 h = 30 days
    assert _problem("stage_length") is None and settings.objective().head_start == 30 * 24 * 3600.0
