"""Parse-time validation through Airflow's own DagBag and the provider's cluster policy."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

HEADER = """
from airflow.sdk import DAG
from airflow.providers.standard.operators.bash import BashOperator
from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
"""


def _load(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch, **conf: str) -> object:
    for key, value in conf.items():
        monkeypatch.setenv(f"AIRFLOW__GPU_DAG__{key.upper()}", value)
    from airflow.dag_processing.dagbag import DagBag

    path = tmp_path / "dag_file.py"
    path.write_text(HEADER + textwrap.dedent(body))
    return DagBag(dag_folder=str(path))


def test_valid_dag_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bag = _load(
        tmp_path,
        """
        with DAG("good", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}):
            BashOperator(task_id="train", bash_command="true", pool="gpu_default", pool_slots=2,
                         executor_config=gpu_hints(duration="1h", gpus=2, gpu_memory="40GiB"))
        """,
        monkeypatch,
        pools='{"gpu_default": 4}',
    )
    assert bag.import_errors == {}  # type: ignore[attr-defined]
    assert "good" in bag.dags  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ('executor_config=gpu_hints(duration="-5m")', "duration '-5m' is negative"),
        ('executor_config=gpu_hints(duration="soonish")', "cannot be parsed"),
        ("executor_config=gpu_hints(duration='1h', gpus=0)", "GPU count 0 must be at least 1"),
        (
            'executor_config=gpu_hints(duration="1h", gpus=1, gpu_memory="eighty")',
            "'eighty' cannot be parsed",
        ),
        (
            'executor_config=gpu_hints(duration="1h", gpus=16), pool="gpu_default", pool_slots=16',
            "only 4 in all",
        ),
        ('executor_config=gpu_hints(duration="1h", gpus=1), pool="gpu_tpu"', "pool 'gpu_tpu' does not exist"),
    ],
)
def test_bad_input_fails_import_naming_dag_task_and_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: str, expected: str
) -> None:
    bag = _load(
        tmp_path,
        f"""
        with DAG("bad", default_args={{"weight_rule": CRITICAL_PATH_WEIGHT_RULE}}):
            BashOperator(task_id="train_step", bash_command="true", {task})
        """,
        monkeypatch,
        pools='{"gpu_default": 4}',
    )
    errors = list(bag.import_errors.values())  # type: ignore[attr-defined]
    assert len(errors) == 1, errors
    assert expected in errors[0]
    assert "DAG 'bad', task 'train_step'" in errors[0]
    assert "Fix:" in errors[0]
    assert "bad" not in bag.dags  # type: ignore[attr-defined]


def test_cycle_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bag = _load(
        tmp_path,
        """
        with DAG("cyclic"):
            a = BashOperator(task_id="a", bash_command="true", executor_config=gpu_hints(duration="20m"))
            b = BashOperator(task_id="b", bash_command="true", executor_config=gpu_hints(duration="20m"))
            a >> b >> a
        """,
        monkeypatch,
    )
    errors = list(bag.import_errors.values())  # type: ignore[attr-defined]
    assert len(errors) == 1 and "cycle" in errors[0].lower()


def test_dags_not_using_the_provider_are_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bag = _load(
        tmp_path,
        """
        with DAG("plain"):
            BashOperator(task_id="x", bash_command="true", pool="no_such_pool")
        """,
        monkeypatch,
        pools='{"gpu_default": 4}',
    )
    assert bag.import_errors == {}  # type: ignore[attr-defined]


def test_unknown_objective_is_a_lint_error_and_stock_rules_on_gpu_tasks_are_flagged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cross-DAG policy at parse time: an unknown objective fails no DAG's import (the default is
    used, one error logged) but is a lint error naming the fix; GPU tasks on a stock weight rule
    (weights not comparable with other DAGs' keys) are a warning naming the rule."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
    from airflow_gpu_dag.airflow.policy import priority_findings
    from airflow_gpu_dag.cli.lint import config_findings

    with DAG("stock_gpu", schedule=None) as stock_dag:
        EmptyOperator(task_id="train", executor_config=gpu_hints(duration="1h", gpus=2))
    with DAG("ours_gpu", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as ours_dag:
        EmptyOperator(task_id="train", executor_config=gpu_hints(duration="1h", gpus=2))
    (warning,) = priority_findings(stock_dag)
    assert warning.code == "incomparable-priority" and not warning.is_error
    assert "'downstream'" in warning.message and "CRITICAL_PATH_WEIGHT_RULE" in warning.fix
    assert priority_findings(ours_dag) == []
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "fastest")
    assert priority_findings(ours_dag) == []
    (error,) = config_findings()
    assert error.is_error and error.code == "bad-config" and "throughput, balanced, latency" in error.message


def test_inventory_checks_requests_when_no_pool_sizes_are_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No [gpu_dag] pools, no max_gpus_per_host: a static (or NVML) inventory still rejects a request
    no host can hold, at parse time, naming the DAG, the task and the inventory."""
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    bag = _load(
        tmp_path,
        """
        with DAG("too_big", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}):
            BashOperator(task_id="pretrain", bash_command="true", pool="gpu_default", pool_slots=8,
                         executor_config=gpu_hints(duration="1h", gpus=8))
            BashOperator(task_id="fits", bash_command="true", pool="gpu_default", pool_slots=2,
                         executor_config=gpu_hints(duration="1h", gpus=2, gpu_memory="40GiB"))
        """,
        monkeypatch,
        inventory_source="static",
        inventory="4xa100:80GiB",
    )
    [message] = bag.import_errors.values()  # type: ignore[attr-defined]
    assert "too_big" in message and "pretrain" in message and "fits" not in message
    assert "needs 8x GPU but the static inventory has only 4 GPU(s)" in message


def test_weight_rules_airflow_cannot_load_are_errors_naming_the_task_and_the_rule_meant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow fails these only when it serializes the DAG ("Unknown priority strategy X", no task); a
    strategy object on a mapped task is stored as its repr and fails when read back. Both are parse-time
    errors now, and a stock rule is named by its value, not the enum's repr."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
    from airflow_gpu_dag.airflow.policy import priority_findings
    from airflow_gpu_dag.operators.gpu import GpuBashOperator
    from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy

    with DAG("typo", schedule=None) as typo:
        EmptyOperator(task_id="train", weight_rule="critical_pth", executor_config=gpu_hints(gpus=1))
    (error,) = priority_findings(typo)
    assert (error.code, error.task_id, error.is_error) == ("bad-weight-rule", "train", True)
    assert "'critical_pth'" in error.message and f"did you mean {CRITICAL_PATH_WEIGHT_RULE!r}" in error.fix
    with DAG("instance", schedule=None) as instance:
        GpuBashOperator.partial(
            task_id="sweep", gpus=1, duration="30m", weight_rule=CriticalPathPriorityStrategy()
        ).expand(bash_command=["true", "true"])
    (error,) = priority_findings(instance)
    assert error.code == "bad-weight-rule" and "CriticalPathPriorityStrategy object" in error.message
    assert "CRITICAL_PATH_WEIGHT_RULE" in error.fix
    with DAG("stock", schedule=None) as stock:
        EmptyOperator(task_id="train", executor_config=gpu_hints(gpus=1))
    (warning,) = priority_findings(stock)
    assert "weight rule 'downstream'" in warning.message and "WeightRule" not in warning.message
    bag = _load(
        tmp_path,
        """
        with DAG("typo_file", default_args={"weight_rule": "airflow_gpu_dag.priority_strategy.CriticalPath"}):
            BashOperator(task_id="train", bash_command="true", executor_config=gpu_hints(duration="1h"))
        """,
        monkeypatch,
        pools='{"gpu_default": 4}',
    )
    (message,) = bag.import_errors.values()  # type: ignore[attr-defined]
    assert "bad-weight-rule" in message and "'train'" in message


@pytest.mark.parametrize(
    ("option", "value", "fragment"),
    [
        ("pools", '{"gpu_default": -8}', "whole number >= 0"),
        ("pools", '{"gpu_default": 1.9}', "1.9 slots"),
        ("pools", "[8]", "not a JSON object"),
        ("max_gpus_per_host", "0", "at least 1"),
        ("max_gpus_per_host", "eight", "not a whole number"),
        ("reservation_gap", "soon", "cannot be parsed"),
        ("reservation_overdue", "-5m", "negative"),
        ("default_duration", "forty", "cannot be parsed"),
        ("key_epoch", "soon", "neither epoch seconds nor an ISO date"),
    ],
)
def test_unusable_config_values_are_lint_errors_naming_the_option(
    monkeypatch: pytest.MonkeyPatch, option: str, value: str, fragment: str
) -> None:
    """Such values are ignored where they are read (the scheduler must not stop), which hid them: a pool
    of -8 slots made every GPU DAG fail with "request at most -8 GPUs", a bad reservation_gap only
    showed in scheduler logs. Lint names the option (the cluster policy logs it once, and the DAG
    imports with the default)."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
    from airflow_gpu_dag.airflow.policy import priority_findings
    from airflow_gpu_dag.cli.lint import config_findings
    from airflow_gpu_dag.settings import max_gpus_per_host, pool_capacities

    monkeypatch.setenv(f"AIRFLOW__GPU_DAG__{option.upper()}", value)
    with DAG("d", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        EmptyOperator(task_id="train", pool="gpu_default", pool_slots=2, executor_config=gpu_hints(gpus=2))
    assert priority_findings(dag) == []
    (error,) = config_findings()
    assert error.code == "bad-config" and error.is_error
    assert f"[gpu_dag] {option} {value!r}" in error.message and fragment in error.message
    assert f"AIRFLOW__GPU_DAG__{option.upper()}" in error.fix
    assert pool_capacities() is None or option != "pools"  # ignored, not half-read
    assert max_gpus_per_host() is None or option != "max_gpus_per_host"


def test_valid_pool_and_host_sizes_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_gpu_dag.settings import config_problems, max_gpus_per_host, pool_capacities

    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 8, "gpu_a100": "4", "off": 0, "f": 2.0}')
    monkeypatch.setenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", "8")
    assert pool_capacities() == {"gpu_default": 8, "gpu_a100": 4, "off": 0, "f": 2}
    assert max_gpus_per_host() == 8 and config_problems() == []
