"""The critical path computed at parse time (airflow/parse_time.py): the cluster policy writes it, the
first get_weight of a DAG object uses it instead of analysing the DAG in the scheduler loop, and the
weights are the same either way."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.exceptions import AirflowClusterPolicyViolation
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task
from airflow.serialization.serialized_objects import DagSerialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow import parse_time
from airflow_gpu_dag.airflow.policy import dag_policy
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, PackingPriorityStrategy
from tests.unit.airflow_dags import STRATEGIES, serialized
from tests.unit.conftest import record_analysis_threads
from tests.unit.task_contracts import GOOD, RAW, all_weights, contract_weight, small_dag, training_dag

RUN_ID = "manual__2026-11-30T12:00:00+00:00"


@pytest.fixture
def _fresh_priority_parse_time(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu": 4}')
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "false")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "false")
    for cls in (CriticalPathPriorityStrategy, PackingPriorityStrategy):
        cls._weights.reset()
    yield
    for cls in (CriticalPathPriorityStrategy, PackingPriorityStrategy):
        cls._weights.reset()


def _dag(dag_id: str = "pt", rule: str = CRITICAL_PATH_WEIGHT_RULE) -> DAG:
    with DAG(dag_id, default_args={"weight_rule": rule}) as dag:
        prep = BashOperator(task_id="prep", bash_command="true", executor_config=gpu_hints(duration="10m"))
        previous = prep
        for i, (duration, gpus) in enumerate((("2h", 4), ("30m", 2), ("45m", 1))):
            step = BashOperator(
                task_id=f"gpu_{i}",
                bash_command="true",
                pool="gpu",
                pool_slots=gpus,
                executor_config=gpu_hints(duration=duration, gpus=gpus),
            )
            previous >> step
            previous = step
        side = BashOperator(
            task_id="side", bash_command="true", pool="gpu", executor_config=gpu_hints(duration="20m", gpus=1)
        )
        prep >> side
    return dag


def _weights(sdag: Any, strategy: Any) -> dict[str, int]:
    return {
        task_id: strategy.get_weight(
            SimpleNamespace(task=t, task_id=task_id, dag_id=sdag.dag_id, run_id=RUN_ID, map_index=-1)
        )
        for task_id, t in sdag.task_dict.items()
    }


@pytest.mark.usefixtures("_fresh_priority_parse_time")
def test_the_policy_writes_the_critical_path_and_the_serialized_dag_keeps_it() -> None:
    dag = _dag()
    dag_policy(dag)
    sdag = serialized(dag)
    paths = {task_id: parse_time.read(t) for task_id, t in sdag.task_dict.items()}
    assert all(p is not None for p in paths.values())
    assert paths["gpu_0"].remaining == (120 + 30 + 45) * 60  # type: ignore[union-attr]
    assert paths["prep"].remaining == (10 + 120 + 30 + 45) * 60  # type: ignore[union-attr]
    gpu_slot_seconds = (120 * 4 + 30 * 2 + 45 * 1 + 20 * 1) * 60
    assert paths["side"].slot_seconds["gpu"] == gpu_slot_seconds  # type: ignore[union-attr]
    # the tasks below each (fair's descendants term): prep has the three GPU steps and side
    assert {t: p.descendants for t, p in paths.items()} == {  # type: ignore[union-attr]
        "prep": 4,
        "gpu_0": 2,
        "gpu_1": 1,
        "gpu_2": 0,
        "side": 0,
    }
    # the declared hints are kept (in their canonical form)
    assert sdag.task_dict["gpu_0"].executor_config["gpu_dag"]["duration_s"] == 7200


@pytest.mark.usefixtures("_fresh_priority_parse_time")
@pytest.mark.parametrize("rule", [CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE])
def test_weights_from_the_parse_time_path_equal_those_of_the_analysis(rule: str) -> None:
    strategy = (
        CriticalPathPriorityStrategy() if rule == CRITICAL_PATH_WEIGHT_RULE else PackingPriorityStrategy()
    )
    annotated = _dag("same", rule)
    dag_policy(annotated)
    with_path = _weights(serialized(annotated), strategy)
    type(strategy)._weights.reset()
    without = _weights(serialized(_dag("same", rule)), strategy)  # no policy: analysed inline
    assert with_path == without


@pytest.mark.usefixtures("_fresh_priority_parse_time")
def test_the_first_get_weight_does_not_analyse_the_dag_in_the_calling_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "true")
    analysed_in = record_analysis_threads(monkeypatch)
    dag = _dag()
    dag_policy(dag)
    sdag = serialized(dag)
    strategy = CriticalPathPriorityStrategy()
    first = _weights(sdag, strategy)
    weights = CriticalPathPriorityStrategy._weights
    assert weights.background is not None and weights.background.wait_idle(60)
    assert analysed_in == ["gpu-dag-weights"]  # once, off the calling thread
    assert _weights(sdag, strategy) == first  # from the analysis now: the same weights


@pytest.mark.usefixtures("_fresh_priority_parse_time")
def test_without_the_policy_the_dag_is_analysed_inline_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "true")
    sdag = serialized(_dag())
    assert all(parse_time.read(t) is None for t in sdag.task_dict.values())
    _weights(sdag, CriticalPathPriorityStrategy())
    assert CriticalPathPriorityStrategy._weights.basis_builds == 1


@pytest.mark.usefixtures("_fresh_priority_parse_time")
def test_pool_sizes_are_applied_by_the_scheduler_not_written_at_parse_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Changing [gpu_dag] pools must not give every DAG a new version: the figures do not depend on it."""
    first, second = _dag(), _dag()
    dag_policy(first)
    small = _weights(serialized(first), CriticalPathPriorityStrategy())
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu": 16}')
    CriticalPathPriorityStrategy._weights.reset()
    dag_policy(second)
    assert DagSerialization.to_dict(first) == DagSerialization.to_dict(second)
    big = _weights(serialized(second), CriticalPathPriorityStrategy())
    assert small != big  # W = slot-seconds / capacity: 4 GPUs make a longer run than 16


@pytest.mark.usefixtures("_fresh_priority_parse_time")
def test_dags_with_mapped_tasks_are_annotated_too() -> None:
    with DAG("mapped", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:

        @task(executor_config=gpu_hints(duration="15m"))
        def trial(x: int) -> int:
            return x

        trial.expand(x=[1, 2, 3])
    dag_policy(dag)
    path = parse_time.read(serialized(dag).task_dict["trial"])
    assert path is not None and path.remaining == 15 * 60
    assert path.slot_seconds == {"default_pool": 3 * 15 * 60}  # three instances of one slot


@pytest.mark.usefixtures("_fresh_priority_parse_time")
@pytest.mark.parametrize(
    "entry",
    [
        "not a dict",
        {},
        {"remaining_s": "600", "slot_seconds": {}, "digest": "d"},
        {"remaining_s": True, "slot_seconds": {}, "digest": "d"},
        {"remaining_s": math.nan, "slot_seconds": {}, "digest": "d"},
        {"remaining_s": -1.0, "slot_seconds": {}, "digest": "d"},
        {"remaining_s": 600.0, "slot_seconds": {"gpu": math.inf}, "digest": "d"},
        {"remaining_s": 600.0, "slot_seconds": {"gpu": "1"}, "digest": "d"},
        {"remaining_s": 600.0, "slot_seconds": {1: 1.0}, "digest": "d"},
        {"remaining_s": 600.0, "slot_seconds": ["gpu", 1.0], "digest": "d"},
        {"remaining_s": 600.0, "slot_seconds": {}},
        {"remaining_s": 600.0, "slot_seconds": {}, "digest": 5},
        {"remaining_s": 600.0, "slot_seconds": {}, "digest": "d", "extra": 1},
        {"remaining_s": 600.0, "slot_seconds": {}, "digest": "d", "descendants": -1},
        {"remaining_s": 600.0, "slot_seconds": {}, "digest": "d", "descendants": 1.5},
        {"remaining_s": 600.0, "slot_seconds": {}, "digest": "d", "descendants": True},
        {"remaining_s": 600.0, "slot_seconds": {}, "digest": "d", "descendants": "3"},
    ],
)
def test_a_malformed_entry_is_ignored(entry: object) -> None:
    config = {"gpu_dag": {"derived": entry}}
    assert parse_time.read(SimpleNamespace(executor_config=config)) is None


@pytest.mark.usefixtures("_fresh_priority_parse_time")
def test_a_well_formed_entry_is_read_and_the_version_1_key_is_not() -> None:
    entry = {"remaining_s": 600, "slot_seconds": {"gpu": 3600.0}, "digest": "d"}
    path = parse_time.read(SimpleNamespace(executor_config={"gpu_dag": {"derived": entry}}))
    assert path == parse_time.ParseTimePath(600.0, {"gpu": 3600.0}, "d")
    counted = {**entry, "descendants": 3}
    path = parse_time.read(SimpleNamespace(executor_config={"gpu_dag": {"derived": counted}}))
    assert path == parse_time.ParseTimePath(600.0, {"gpu": 3600.0}, "d", 3)
    legacy = {"gpu_dag_critical_path": {"remaining_s": 600, "slot_seconds": {"gpu": 3600.0}, "version": "d"}}
    assert parse_time.read(SimpleNamespace(executor_config=legacy)) is None


@pytest.mark.usefixtures("_fresh_priority_parse_time")
def test_a_dag_whose_analysis_fails_keeps_its_parse_time_weights(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import airflow_gpu_dag.priority.weights as weights_module

    dag = _dag()
    dag_policy(dag)
    sdag = serialized(dag)
    expected = _weights(sdag, CriticalPathPriorityStrategy())
    CriticalPathPriorityStrategy._weights.reset()
    tries: list[int] = []

    def broken(*args: Any, **kwargs: Any) -> Any:
        tries.append(1)
        raise RuntimeError("cannot analyse")

    monkeypatch.setattr(weights_module, "build_basis", broken)
    for _ in range(3):
        assert _weights(sdag, CriticalPathPriorityStrategy()) == expected
    assert len(tries) == 1  # one analysis per DAG object, not one per task instance
    assert caplog.text.count("cannot analyse DAG 'pt'") == 1


@pytest.mark.usefixtures("_fresh_task_contract")
@pytest.mark.parametrize("rule", [CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE])
def test_a_dag_with_mapped_tasks_gets_derived_figures_equal_to_the_analysis(rule: str) -> None:
    def dag_of() -> DAG:
        with DAG("sweep", schedule=None, default_args={"weight_rule": rule}) as dag:
            prep = BashOperator(
                task_id="prep", bash_command="true", executor_config=gpu_hints(duration="10m")
            )

            @task(executor_config=gpu_hints(duration="1h", gpus=1), pool="gpu_default")
            def trial(lr: float) -> float:
                return lr

            @task(
                executor_config=gpu_hints(duration="30m", gpus=2, map_length=4),
                pool="gpu_default",
                pool_slots=2,
            )
            def train(x: int) -> int:
                return x

            @task(executor_config=gpu_hints(duration="5m"))
            def pick(scores: Any) -> None:
                return None

            trials = trial.expand(lr=[0.1, 0.01, 0.001])
            prep >> trials
            pick(train.expand(x=trials))
        return dag

    strategy = (
        CriticalPathPriorityStrategy() if rule == CRITICAL_PATH_WEIGHT_RULE else PackingPriorityStrategy()
    )
    annotated = dag_of()
    dag_policy(annotated)
    sdag = serialized(annotated)
    assert all(parse_time.read(t) is not None for t in sdag.task_dict.values())
    cases = [("prep", -1), ("trial", 0), ("trial", 2), ("train", 3), ("pick", -1)]
    with_figures = {case: contract_weight(sdag, case[0], strategy, case[1]) for case in cases}
    type(strategy)._weights.reset()
    analysed = serialized(dag_of())  # no policy: analysed by the scheduler
    assert {case: contract_weight(analysed, case[0], strategy, case[1]) for case in cases} == with_figures
    remaining = {t: parse_time.read(sdag.task_dict[t]).remaining for t in ("prep", "trial", "train")}  # type: ignore[union-attr]
    assert remaining == {"prep": (10 + 60 + 30 + 5) * 60, "trial": (60 + 30 + 5) * 60, "train": (30 + 5) * 60}
    # 3 trials of 1 GPU-hour, 4 trainings of 2 GPUs for 30 minutes
    assert parse_time.read(sdag.task_dict["pick"]).slot_seconds["gpu_default"] == 3 * 3600 + 4 * 2 * 1800  # type: ignore[union-attr]


@pytest.mark.usefixtures("_fresh_task_contract")
def test_the_digest_is_the_same_before_and_after_serialization() -> None:
    dag = training_dag(None)
    dag_policy(dag)
    sdag = serialized(dag)
    digest = parse_time.version_digest(sdag)
    assert digest == parse_time.version_digest(dag)
    assert {parse_time.read(t).version for t in sdag.task_dict.values()} == {digest}  # type: ignore[union-attr]


@pytest.mark.usefixtures("_fresh_task_contract")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    configs=st.lists(
        st.one_of(st.none(), st.fixed_dictionaries({"gpu_dag": RAW}), GOOD), min_size=1, max_size=4
    ),
    mapped=st.booleans(),
)
def test_any_executor_config_fails_the_import_clearly_and_never_breaks_get_weight(
    configs: list[Any], mapped: bool
) -> None:
    dag = small_dag("fuzzed", configs, mapped)
    try:
        dag_policy(dag)
    except AirflowClusterPolicyViolation as err:
        assert "DAG 'fuzzed'" in str(err) and "Fix:" in str(err)
        assert any(f"task '{t}'" in str(err) for t in dag.task_dict)
    else:
        sdag = serialized(dag)
        digests = {parse_time.read(t).version for t in sdag.task_dict.values()}  # type: ignore[union-attr]
        assert digests == {parse_time.version_digest(sdag)}  # every task, mapped or not
    for cls in STRATEGIES:
        cls._weights.reset()
    all_weights(serialized(dag))


@pytest.mark.usefixtures("_fresh_priority_parse_time")
@pytest.mark.parametrize(("objective", "early"), [("fair", False), ("balanced", True)])
def test_figures_written_without_the_descendants_count_are_used_only_where_the_key_needs_none(
    monkeypatch: pytest.MonkeyPatch, objective: str, early: bool
) -> None:
    """Figures a provider wrote before it counted descendants (a DAG not parsed again since): ``fair``'s
    key needs the count, so the DAG is analysed at once (right weights, not early ones without the
    term); ``balanced`` uses them while its analysis runs off the loop. The weights are the same."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", objective)
    dag = _dag("older")
    dag_policy(dag)
    expected = _weights(serialized(dag), CriticalPathPriorityStrategy())
    CriticalPathPriorityStrategy._weights.reset()
    data = DagSerialization.to_dict(dag)
    for entry in data["dag"]["tasks"]:
        derived = entry["__var"]["executor_config"]["__var"]["gpu_dag"]["__var"]["derived"]
        del derived["__var"]["descendants"]
    older = DagSerialization.from_dict(data)
    assert all(parse_time.read(t).descendants is None for t in older.task_dict.values())  # type: ignore[union-attr]
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "true")
    analysed_in = record_analysis_threads(monkeypatch)
    assert _weights(older, CriticalPathPriorityStrategy()) == expected
    weights = CriticalPathPriorityStrategy._weights
    assert weights.background is not None and weights.background.wait_idle(60)
    assert ("gpu-dag-weights" in analysed_in[0]) == early, analysed_in
