"""The ``[gpu_dag]`` options the priority weights read: a value the provider cannot use is never taken
silently. Where it is read (the scheduler: never raising) the default is used and a warning logged
once; ``config_problems`` names it, so ``airflow gpu-dag lint`` reports it (``bad-config``) and the
cluster policy logs it once."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from airflow_gpu_dag import settings
from airflow_gpu_dag.core.policy.objective import DEFAULT_EPOCH
from airflow_gpu_dag.log_once import LogOnce

NOW = 1_796_040_000.0  # 2026-11-30T12:00:00Z


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (
        "PLAN_POLICY",
        "PLAN_BACKFILL",
        "PLAN_IN_BACKGROUND",
        "LEARNED_DURATIONS",
        "LEARNED_REFRESH",
        "BUDGET_CLAIM_TTL",
        "KEY_EPOCH",
        "PLAN_SEARCH_BUDGET",
        "PLANNER_NICE",
        "LEARNED_WINDOW",
        "LEARNED_QUANTILE",
        "LEARNED_MIN_RUNS",
        "LEARNED_FLAG_FACTOR",
        "TOO_LARGE_ACTION",
        "TOO_LARGE_INTERVALS",
        "LEASE_TTL",
        "LEASE_HEARTBEAT",
    ):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{key}", raising=False)
    monkeypatch.setattr(settings, "_warned", LogOnce(settings.log))
    settings.conf_get("objective", None)  # Airflow configures logging once, on first use: before caplog


def _set(monkeypatch: pytest.MonkeyPatch, option: str, value: str) -> None:
    monkeypatch.setenv(f"AIRFLOW__GPU_DAG__{option.upper()}", value)


def _problem(option: str) -> str | None:
    return dict(settings.config_problems()).get(option)


# -- [gpu_dag] learned_refresh ---------------------------------------------------------------------------
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


@pytest.mark.parametrize("option", ["learned_refresh", "budget_claim_ttl"])
def test_durations_that_do_not_parse_are_reported(monkeypatch: pytest.MonkeyPatch, option: str) -> None:
    _set(monkeypatch, option, "soon")
    problem = _problem(option)
    assert problem is not None and problem.startswith("'soon': ") and "cannot be parsed" in problem
    _set(monkeypatch, option, "2m")
    assert _problem(option) is None


def test_a_valid_learned_refresh_is_read() -> None:
    assert settings.learned_refresh() == 600.0  # unset: 10m
    assert _problem("learned_refresh") is None


# -- [gpu_dag] key_epoch ----------------------------------------------------------------------------------
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


@pytest.mark.parametrize(
    ("value", "expected"), [("1700000000", 1_700_000_000.0), ("2024-01-01", 1_704_067_200.0)]
)
def test_a_past_key_epoch_is_used(monkeypatch: pytest.MonkeyPatch, value: str, expected: float) -> None:
    _set(monkeypatch, "key_epoch", value)
    assert settings.key_epoch() == expected and _problem("key_epoch") is None


def test_the_epoch_range_is_checked_against_the_clock() -> None:
    assert settings._epoch_problem("2026-11-30T12:00:01Z", now=NOW) is not None  # one second ahead
    assert settings._epoch_problem("2026-11-30T12:00:00Z", now=NOW) is None
    assert settings._epoch_problem(str(NOW - 2**30 + 1), now=NOW) is None
    assert settings._epoch_problem(str(NOW - 2**30 - 1), now=NOW) is not None


def test_weights_keep_the_critical_path_order_with_a_millisecond_epoch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The audit's case end to end: with ``key_epoch`` in milliseconds the weights were all 2147483647."""
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
    assert got["load"] - got["train"] == 600 and got["load"] < 2**31 - 1


# -- enumerations and booleans ------------------------------------------------------------------------------
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


@pytest.mark.parametrize("option", ["plan_search_budget", "planner_nice"])
def test_whole_numbers_that_do_not_parse_are_reported(monkeypatch: pytest.MonkeyPatch, option: str) -> None:
    _set(monkeypatch, option, "lots")
    assert _problem(option) == "'lots' is not a whole number"
    _set(monkeypatch, option, "5")
    assert _problem(option) is None


def test_the_defaults_have_no_problem() -> None:
    assert settings.config_problems() == []


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
    """Before: replaced by their defaults with a log line only; ``too_large_action = kept`` (for keep)
    made the controller *fail* the tasks the user meant to keep waiting."""
    _set(monkeypatch, option, value)
    assert _problem(option) == problem
    if option == "too_large_action":
        assert settings.too_large_policy() == (3, "fail")  # where it is read: the default, logged


def test_unusable_lease_options_are_reported_at_parse_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: lint said OK and every GPU task failed when it started (LeaseSettings refused them)."""
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


def test_config_problems_never_raises_when_the_configuration_cannot_be_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(settings, "conf_get", lambda key, fallback: fallback)
    assert settings.config_problems() == []
    assert settings.plan_in_background() is True and settings.plan_policy() == "reservation"
