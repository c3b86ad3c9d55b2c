"""Parse-time validation through Airflow's own DagBag and the provider's cluster policy."""

from __future__ import annotations

import math
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from airflow.exceptions import AirflowClusterPolicyViolation
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.serialization.serialized_objects import DagSerialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow.policy import dag_policy, validate_dag
from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX, INT32_MIN
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy
from tests.unit.airflow.conftest import one_task_dag
from tests.unit.airflow_dags import (
    CRITICAL,
    STRATEGIES,
    check_weights,
    serialized,
    strategy_ti,
    under,
)
from tests.unit.conftest import record_analysis_threads
from tests.unit.task_contracts import (
    FORGED,
    FORGED_DERIVED,
    GOOD,
    VALUES,
    all_weights,
    contract_weight,
    small_dag,
    training_dag,
)

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
    assert (
        error.is_error
        and error.code == "bad-config"
        and "throughput, balanced, fair, latency" in error.message
    )


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


def _evaluation(dag_id: str = "evaluate") -> DAG:
    with DAG(dag_id, schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        BashOperator(
            task_id="eval",
            bash_command="true",
            pool="gpu_default",
            pool_slots=1,
            executor_config=gpu_hints(duration="10m", gpus=1),
        )
    return dag


FORGERY = st.one_of(
    st.fixed_dictionaries({"gpu_dag_critical_path": VALUES}),
    st.fixed_dictionaries({"derived": VALUES}),
    st.fixed_dictionaries(
        {"derived": st.fixed_dictionaries(
            {"remaining_s": st.floats(0, 1e9), "slot_seconds": st.just({}), "digest": st.text(max_size=32)}
        )}
    ),
)  # fmt: skip


def _forge(config: dict[str, Any], forgery: dict[str, Any]) -> dict[str, Any]:
    forged = {**config, **{k: v for k, v in forgery.items() if k != "derived"}}
    if "derived" in forgery:
        forged["gpu_dag"] = {**config.get("gpu_dag", {}), "derived": forgery["derived"]}
    return forged


@pytest.mark.usefixtures("_fresh_task_contract")
@pytest.mark.parametrize(
    "forged",
    [
        {"gpu_dag_critical_path": FORGED},  # the key of contract version 1
        {"gpu_dag": {**gpu_hints(duration="250h", gpus=4)["gpu_dag"], "derived": FORGED_DERIVED}},
    ],
    ids=["legacy-key", "derived"],
)
@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "plain"])
def test_a_forged_parse_time_key_does_not_jump_the_queue(
    forged: dict[str, Any], mapped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 250-hour training that writes its own 'remaining time' of a year into its executor_config
    must not go ahead of a 10-minute evaluation triggered at the same moment: the cluster policy
    writes the derived figures itself, for every DAG, mapped or not. (Under ``balanced``: ``fair``
    puts a training with tasks below it first, as stock Airflow does, forged figures or not.)"""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "balanced")
    honest, forger = training_dag(None, mapped=mapped), training_dag(forged, mapped=mapped)
    for dag in (honest, forger, evaluation := _evaluation()):
        dag_policy(dag)
    honest_weight = contract_weight(serialized(honest), "train")
    CriticalPathPriorityStrategy._weights.reset()
    forged_weight = contract_weight(serialized(forger), "train")
    assert forged_weight == honest_weight
    assert forged_weight < contract_weight(serialized(evaluation), "eval")  # the evaluation starts first
    config = serialized(forger).task_dict["train"].executor_config
    assert "gpu_dag_critical_path" not in config
    assert config["gpu_dag"]["derived"]["remaining_s"] < 3e7


@pytest.mark.usefixtures("_fresh_task_contract")
def test_figures_of_another_version_are_ignored() -> None:
    """Figures copied from another version (a longer estimate) do not match the DAG they are in."""
    short, long = training_dag(None, "copy", mapped=False), training_dag(None, "copy", mapped=False)
    long.task_dict["train"].executor_config = gpu_hints(duration="300h", gpus=4)
    dag_policy(short)
    dag_policy(long)
    copied = DagSerialization.to_dict(short)
    figures = DagSerialization.to_dict(long)
    train = next(t for t in copied["dag"]["tasks"] if t["__var"]["task_id"] == "train")
    source = next(t for t in figures["dag"]["tasks"] if t["__var"]["task_id"] == "train")
    derived = source["__var"]["executor_config"]["__var"]["gpu_dag"]["__var"]["derived"]
    train["__var"]["executor_config"]["__var"]["gpu_dag"]["__var"]["derived"] = derived
    tampered = DagSerialization.from_dict(copied)
    expected = contract_weight(serialized(short), "train")
    CriticalPathPriorityStrategy._weights.reset()
    assert contract_weight(tampered, "train") == expected


@pytest.mark.usefixtures("_fresh_task_contract")
def test_the_first_weights_of_a_mapped_dag_are_not_analysed_in_the_scheduler_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Neither the first object of a new version nor a new object of the same version is analysed in
    the calling thread: the analysis runs once, in the background thread."""

    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "true")
    analysed_in = record_analysis_threads(monkeypatch)
    dag = training_dag(None)
    dag_policy(dag)
    data = DagSerialization.to_dict(dag)
    first = DagSerialization.from_dict(data)
    weights = {t: contract_weight(first, t, dag_version_id="v1") for t in first.task_dict}
    assert threading.current_thread().name not in analysed_in  # the policy's figures; analysed off the loop
    background = CriticalPathPriorityStrategy._weights.background
    assert background is not None and background.wait_idle(60)
    assert analysed_in == ["gpu-dag-weights"]
    second = DagSerialization.from_dict(data)  # a new object of the same version (an api-server request)
    assert {t: contract_weight(second, t, dag_version_id="v1") for t in second.task_dict} == weights
    assert analysed_in == ["gpu-dag-weights"]  # shared, not analysed again


@pytest.mark.usefixtures("_fresh_task_contract")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    configs=st.lists(GOOD, min_size=1, max_size=4),
    forgeries=st.lists(st.one_of(st.none(), FORGERY), min_size=4, max_size=4),
    mapped=st.booleans(),
)
def test_derived_figures_a_dag_file_writes_change_no_weight(
    configs: list[dict[str, Any]], forgeries: list[Any], mapped: bool
) -> None:
    forged = [c if f is None else _forge(c, f) for c, f in zip(configs, forgeries, strict=False)]
    honest, forger = small_dag("same", configs, mapped), small_dag("same", forged, mapped)
    dag_policy(honest)
    dag_policy(forger)
    expected = all_weights(serialized(honest))
    for cls in STRATEGIES:
        cls._weights.reset()
    assert all_weights(serialized(forger)) == expected


@pytest.mark.usefixtures("_fresh_task_contract")
def test_lint_reports_derived_figures_a_dag_file_writes() -> None:
    from airflow_gpu_dag.airflow.policy import priority_findings

    forger = training_dag({"gpu_dag_critical_path": FORGED}, mapped=False)
    found = [f for f in priority_findings(forger) if f.code == "derived-hint"]
    assert [(f.task_id, f.is_error) for f in found] == [("train", False)]
    assert "gpu_dag_critical_path" in found[0].message and "remove them" in found[0].fix


@pytest.fixture(scope="module")
def ten_thousand() -> tuple[DAG, Any]:
    """A DAG of 10,000 tasks (unicode ids, chains of 10, every 97th task with a malformed hint) and its
    serialized form (built once: about 6 s)."""
    bad_values: list[Any] = [math.nan, math.inf, -1, 10**400, "soon", [1], {"x": 1}]
    with DAG("ten_thousand", schedule=None, default_args={"weight_rule": CRITICAL}) as dag:
        previous = None
        for i in range(10_000):
            hints: dict[str, Any] = {"duration_s": 60 + i % 7, "gpus": 1 + i % 2}
            if i % 97 == 0:
                hints[["duration_s", "gpus", "gpu_memory_mib"][i % 3]] = bad_values[i % len(bad_values)]
            task = EmptyOperator(
                task_id=f"训练_{i}" if i % 2 else f"étape_{i}",
                executor_config={"gpu_dag": hints},
                pool="gpu_default",
                pool_slots=1 + i % 2,
            )
            if previous is not None and i % 10:
                previous >> task
            previous = task
    return dag, serialized(dag)


@pytest.mark.usefixtures("_fresh_strategies")
@pytest.mark.parametrize("pools", [None, '{"gpu_default": 8}'])
def test_ten_thousand_tasks_with_bad_hints(ten_thousand: tuple[DAG, Any], pools: str | None) -> None:
    """The policy names the bad tasks, every weight is an int32, nothing falls back, and the DAG is
    analysed once per strategy (not once per task instance)."""
    dag, sdag = ten_thousand

    def check() -> None:
        with pytest.raises(AirflowClusterPolicyViolation) as caught:
            dag_policy(dag)
        assert "DAG 'ten_thousand', task 'étape_0'" in str(caught.value)
        for cls in STRATEGIES:
            strategy = cls()
            for task_id in sdag.task_dict:
                weight = strategy.get_weight(strategy_ti(sdag, task_id, "manual__2026-11-30T12:00:00+00:00"))
                assert type(weight) is int and INT32_MIN <= weight <= INT32_MAX
            assert not cls._failed
            assert cls._weights.basis_builds == 1

    under(pools, check)


@pytest.mark.usefixtures("_fresh_strategies")
@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        ({"duration_s": 10**400}, "duration"),  # OverflowError: int too large to convert to float
        ({"gpus": 1, "gpu_memory_mib": 10**400}, "GPU memory"),  # the same in parse_memory_mib
        ({"gpus": 10**400}, "out of range"),  # OverflowError in the run's GPU work (run_shape)
        ({"gpus": -(2**20_000)}, "out of range"),  # ValueError: repr of an int over 4,300 digits
        ({"inputs": 5}, "inputs"),  # TypeError: 'int' object is not iterable
        ({"outputs": 3.5}, "outputs"),
        ({"awaits": True}, "awaits"),
        ({"fallback": {"index": "abc"}}, "fallback"),  # ValueError: invalid literal for int()
        ({"fallback": {"index": math.inf}}, "fallback"),  # OverflowError: cannot convert float infinity
        ({"fallback": {"index": [2]}}, "fallback"),  # TypeError
    ],
    ids=lambda v: str(v)[:40] if not isinstance(v, dict) else "-".join(map(str, v)),
)
def test_found_malformed_hints_are_policy_errors_and_weights(hints: dict[str, Any], expected: str) -> None:
    """Malformed hints are a policy error naming the DAG, the task and the hint, and still get a real
    weight: they must not crash the policy (a traceback as the import error) nor ``get_weight`` (left
    to its last-resort fallback)."""
    dag = one_task_dag(hints)

    def check() -> None:
        report = validate_dag(dag)
        assert [f.task_id for f in report.errors] == ["train"], report.findings
        assert expected in str(report.errors[0]) and "Fix:" in str(report.errors[0])
        with pytest.raises(AirflowClusterPolicyViolation, match="DAG 'found', task 'train'"):
            dag_policy(dag)
        check_weights(serialized(dag), ["manual__2026-11-30T12:00:00+00:00"])

    under('{"gpu_default": 8}', check)


@pytest.mark.usefixtures("_fresh_weights")
def test_a_plugin_rule_that_shares_a_short_name_with_ours_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a rule Airflow cannot load is taken as ours misspelled: a registered plugin strategy whose
    class happens to be called ``packing`` keeps its DAG out of the policy."""
    import airflow.task.priority_strategy as airflow_strategies

    from airflow_gpu_dag.airflow.policy import uses_provider

    with DAG("theirs", schedule=None, default_args={"weight_rule": "mycompany.rules.packing"}) as dag:
        BashOperator(task_id="x", bash_command="true", pool="no_such_pool")
    assert uses_provider(dag)  # unknown to Airflow: the policy names the task and the fix
    loads = lambda rule: object()  # noqa: E731  (a registered plugin of that name)
    monkeypatch.setattr(airflow_strategies, "validate_and_load_priority_weight_strategy", loads)
    assert not uses_provider(dag)


def test_the_cluster_policy_names_a_gpu_type_list_in_hints() -> None:
    from airflow.exceptions import AirflowClusterPolicyViolation

    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE
    from airflow_gpu_dag.airflow.policy import dag_policy

    with DAG("hinted", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        hints = gpu_hints(gpus=1, gpu_type=["h100"], duration="1h")  # type: ignore[arg-type]  # the mistake
        EmptyOperator(task_id="t", executor_config=hints)
    with pytest.raises(AirflowClusterPolicyViolation, match=r"bad-gpu-request.*task 't'.*one GPU type name"):
        dag_policy(dag)


@pytest.mark.usefixtures("_no_configured_limits")
def test_a_hinted_task_in_default_pool_is_warned_by_the_policy_and_lint() -> None:
    with DAG("dp_hint", schedule=None) as dag:
        EmptyOperator(task_id="t", executor_config=gpu_hints(duration="1h", gpus=2))
    (warning,) = [f for f in validate_dag(dag).findings if f.code == "gpu-in-default-pool"]
    assert not warning.is_error and "default_pool" in warning.message and "pool_slots=2" in warning.fix
