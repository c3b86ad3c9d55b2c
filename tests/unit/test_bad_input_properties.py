"""Bad input never reaches the scheduler as a crash (issue #14.4, the cluster policy and the strategies).

Hypothesis builds real Airflow DAGs (``airflow.sdk.DAG``) of random shapes whose tasks carry random or
malformed hints in ``executor_config["gpu_dag"]`` (wrong types, huge numbers, NaN, inf, negative,
unicode task ids), then:

- the cluster policy (``airflow_gpu_dag.airflow.policy.dag_policy``, what the dag-processor runs) either
  passes or raises ``AirflowClusterPolicyViolation`` whose message names the DAG, the task at fault and
  the fix; no other exception;
- both priority strategies, given task-instance-like objects of the *serialized* DAG (what the scheduler
  and the api-server hold), return an ``int`` within int32 and never raise, and never reach their
  last-resort fallback (an exception swallowed inside ``get_weight`` is a crash hidden from the
  scheduler, not a weight): malformed hints are read as the policy reads them (default estimate);
- with well-formed hints the weights follow the graph: an upstream task's weight is never below its
  downstream task's (its remaining time is at least as long).

One hand-written case has 10,000 tasks. Every crash these properties found is pinned below as a regular
test (``test_found_*``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from airflow.exceptions import AirflowClusterPolicyViolation
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.serialization.serialized_objects import DagSerialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_gpu_dag.airflow.policy import dag_policy, validate_dag
from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX, INT32_MIN
from airflow_gpu_dag.core.model.resources import EstimateError, parse_duration, parse_memory_mib
from airflow_gpu_dag.priority.trigger import parse_run_id_time
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, PackingPriorityStrategy

CRITICAL = "airflow_gpu_dag.priority_strategy.CriticalPathPriorityStrategy"
PACKING = "airflow_gpu_dag.priority_strategy.PackingPriorityStrategy"
STRATEGIES = (CriticalPathPriorityStrategy, PackingPriorityStrategy)
#: [gpu_dag] pools settings a case runs under (None: unset; packing then has nothing to plan against).
POOL_SETTINGS = (None, '{"gpu_default": 8}', '{"gpu_default": 2, "gpu_a100": 4, "gpu_ü": 1}')


# ------------------------------------------------------------------------------------------- values

#: Anything a hand-written ``executor_config`` might hold where a hint is expected.
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, 1, 2, 8, -1, 2**31, 2**63]),
    st.sampled_from([64, 1100, 1329, 4000]).map(lambda bits: 2**bits),  # past float: OverflowError
    st.sampled_from([64, 1329]).map(lambda bits: -(2**bits)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324]),
    st.text(max_size=12),
    st.sampled_from(["30m", "1h30m", "-5m", "1e400", "9" * 400 + "d", "80GiB", "eighty", "nan", "inf", ""]),
    st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=4)), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(-5, 5), max_size=2),
)
PATHS = st.one_of(ANY_VALUE, st.lists(st.text(max_size=10), max_size=3))
FALLBACK = st.one_of(
    ANY_VALUE,
    st.fixed_dictionaries({}, optional={"index": ANY_VALUE, "of": ANY_VALUE, "ladder": ANY_VALUE}),
)
MALFORMED_HINTS = st.fixed_dictionaries(
    {},
    optional={
        "duration_s": ANY_VALUE,
        "gpus": ANY_VALUE,
        "gpu_memory_mib": ANY_VALUE,
        "gpu_type": ANY_VALUE,
        "inputs": PATHS,
        "outputs": PATHS,
        "awaits": PATHS,
        "fallback": FALLBACK,
    },
)
GOOD_HINTS = st.fixed_dictionaries(
    {"duration_s": st.integers(0, 10 * 86400)},
    optional={"gpus": st.integers(1, 8), "gpu_memory_mib": st.integers(0, 81920)},
)
#: What a task's ``executor_config`` is: nothing, our hints (or garbage under our key), or garbage.
EXECUTOR_CONFIG = st.one_of(
    st.none(),
    st.builds(lambda h: {"gpu_dag": h}, MALFORMED_HINTS),
    st.builds(lambda h: {"gpu_dag": h}, ANY_VALUE),
    st.builds(lambda h: {"gpu_dag": h, "pod_override": None}, GOOD_HINTS),
)
#: Task ids Airflow accepts (``[\w.-]+``), unicode letters included.
TASK_ID = st.text(
    alphabet=st.characters(categories=("Ll", "Lu", "Lo", "Nd"), include_characters="_-"),
    min_size=1,
    max_size=16,
)
RUN_ID = st.one_of(
    st.just("manual__2026-11-30T12:00:00+00:00"),
    st.sampled_from(
        [
            "manual__0001-01-01T00:00:00+14:00",
            "manual__9999-12-31T23:59:59-14:00",
            "manual__2026-13-45T99:00:00",
            "asset_triggered__2026-11-30T12:00:00Z",
            "scheduled__2026-11-30T12:00:00+00:00",
            "",
        ]
    ),
    st.text(max_size=40),
    st.builds(lambda s: f"manual__{s}", st.text(max_size=30)),
)


# ------------------------------------------------------------------------------------------- DAGs


@st.composite
def airflow_dags(
    draw: st.DrawFn, hints: st.SearchStrategy[Any] = EXECUTOR_CONFIG, max_tasks: int = 12
) -> DAG:
    """A random acyclic Airflow DAG: unique (unicode) task ids, each task with up to 3 earlier upstream
    tasks, a random pool, pool slots, priority weight, weight rule and ``executor_config``."""
    ids = draw(st.lists(TASK_ID, min_size=1, max_size=max_tasks, unique_by=str.lower))
    dag_id = "bad_" + draw(TASK_ID)
    with DAG(dag_id, schedule=None) as dag:
        tasks = []
        for task_id in ids:
            tasks.append(
                EmptyOperator(
                    task_id=task_id,
                    executor_config=draw(hints),
                    pool=draw(st.sampled_from(["default_pool", "gpu_default", "gpu_a100", "gpu_ü", "nope"])),
                    pool_slots=draw(st.integers(1, 16)),
                    priority_weight=draw(st.integers(-(2**31), 2**31 - 1)),
                    weight_rule=draw(
                        st.sampled_from([CRITICAL, CRITICAL, PACKING, "downstream", "absolute"])
                    ),
                )
            )
        for i in range(1, len(tasks)):
            for j in draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)):
                tasks[j] >> tasks[i]
    return dag


def _serialized(dag: DAG) -> Any:
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def _ti(sdag: Any, task_id: str, run_id: str, map_index: int | None = -1) -> Any:
    """What ``get_weight`` is given: the serialized task (``ti.task.get_dag()`` is the serialized DAG)."""
    return SimpleNamespace(
        task=sdag.task_dict[task_id], task_id=task_id, dag_id=sdag.dag_id, run_id=run_id, map_index=map_index
    )


@pytest.fixture(autouse=True)
def _fresh_strategies() -> Iterator[None]:
    _reset()
    yield
    _reset()


def _reset() -> None:
    for cls in STRATEGIES:
        cls._weights.reset()
        cls._failed.clear()


@mock.patch.dict(os.environ, {"AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND": "false"})
def _under(pools: str | None, check: Any) -> None:
    """Run ``check()`` with ``[gpu_dag] pools`` = ``pools`` and plans made inline, fresh caches."""
    env = {"AIRFLOW__GPU_DAG__POOLS": pools} if pools else {}
    with mock.patch.dict(os.environ, env):
        if not pools:
            os.environ.pop("AIRFLOW__GPU_DAG__POOLS", None)
        _reset()
        check()


def _check_policy(dag: DAG) -> None:
    """Passes, or an AirflowClusterPolicyViolation naming the DAG, a task of it and the fix."""
    try:
        dag_policy(dag)
    except AirflowClusterPolicyViolation as err:
        message = str(err)
        assert f"DAG {dag.dag_id!r}" in message, message
        assert "Fix:" in message, message
        assert any(f"task {t!r}" in message for t in dag.task_dict), message


def _check_weights(sdag: Any, run_ids: list[str]) -> dict[str, dict[str, int]]:
    """Every task's weight under both strategies: an int within int32, no exception, no fallback."""
    out: dict[str, dict[str, int]] = {}
    for cls in STRATEGIES:
        strategy = cls()
        weights = out.setdefault(cls.__name__, {})
        for task_id in sdag.task_dict:
            for run_id in run_ids:
                for map_index in (-1, 0, None):
                    weight = strategy.get_weight(_ti(sdag, task_id, run_id, map_index))
                    assert type(weight) is int, (cls.__name__, task_id, weight)
                    assert INT32_MIN <= weight <= INT32_MAX, (cls.__name__, task_id, weight)
            weights[task_id] = strategy.get_weight(_ti(sdag, task_id, run_ids[0]))
        assert not cls._failed, f"{cls.__name__}.get_weight fell back (a swallowed crash) for {cls._failed}"
    return out


# ------------------------------------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dag=airflow_dags(),
    pools=st.sampled_from(POOL_SETTINGS),
    run_ids=st.lists(RUN_ID, min_size=1, max_size=3),
)
def test_policy_is_clear_and_weights_never_raise(dag: DAG, pools: str | None, run_ids: list[str]) -> None:
    def check() -> None:
        _check_policy(dag)
        _check_weights(_serialized(dag), run_ids)

    _under(pools, check)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dag=airflow_dags(hints=st.builds(lambda h: {"gpu_dag": h}, GOOD_HINTS), max_tasks=10),
    pools=st.sampled_from(POOL_SETTINGS),
)
def test_well_formed_weights_follow_the_graph(dag: DAG, pools: str | None) -> None:
    """Our rules on every task, valid hints: upstream weight >= downstream weight (remaining time)."""
    for task in dag.task_dict.values():
        task.weight_rule = CRITICAL  # type: ignore[assignment]
    run = "manual__2026-11-30T12:00:00+00:00"

    def check() -> None:
        sdag = _serialized(dag)
        weights = _check_weights(sdag, [run])
        for rule in weights.values():
            for up, task in sdag.task_dict.items():
                for down in task.downstream_task_ids:
                    assert rule[up] >= rule[down], (up, down, rule)

    _under(pools, check)


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
    return dag, _serialized(dag)


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
                weight = strategy.get_weight(_ti(sdag, task_id, "manual__2026-11-30T12:00:00+00:00"))
                assert type(weight) is int and INT32_MIN <= weight <= INT32_MAX
            assert not cls._failed
            assert cls._weights.basis_builds == 1

    _under(pools, check)


# ------------------------------------------------------------------------------------------- found


def _one_task_dag(hints: Mapping[str, Any], dag_id: str = "found") -> DAG:
    with DAG(dag_id, schedule=None, default_args={"weight_rule": CRITICAL}) as dag:
        EmptyOperator(task_id="train", executor_config={"gpu_dag": dict(hints)}, pool="gpu_default")
    return dag


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
    """Hints that crashed the policy (a traceback as the import error) and ``get_weight`` (caught by its
    last-resort fallback) before the fix: now a policy error naming the DAG, the task and the hint, and a
    real weight."""
    dag = _one_task_dag(hints)

    def check() -> None:
        report = validate_dag(dag)
        assert [f.task_id for f in report.errors] == ["train"], report.findings
        assert expected in str(report.errors[0]) and "Fix:" in str(report.errors[0])
        with pytest.raises(AirflowClusterPolicyViolation, match="DAG 'found', task 'train'"):
            dag_policy(dag)
        _check_weights(_serialized(dag), ["manual__2026-11-30T12:00:00+00:00"])

    _under('{"gpu_default": 8}', check)


def test_found_a_single_path_string_is_one_path() -> None:
    """``inputs="/data/clean"`` written by hand (not through gpu_hints) is one path, not one per
    character (which made up hidden dependencies between unrelated tasks)."""
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph

    graph, findings = build_task_graph(_one_task_dag({"duration_s": 60, "inputs": "/data/clean"}))
    assert findings == []
    assert graph.nodes["train"].inputs == ("/data/clean",)


@pytest.mark.parametrize("value", [10**400, -(10**400), 2**20_000], ids=["1e400", "-1e400", "2**20000"])
def test_found_huge_ints_are_estimate_errors(value: int) -> None:
    """``float()`` of these raised OverflowError (and ``repr`` of the last one, over 4,300 digits,
    raises ValueError): now an EstimateError with a short message."""
    with pytest.raises(EstimateError, match="out of range"):
        parse_duration(value)
    with pytest.raises(EstimateError, match="finite"):
        parse_memory_mib(value)


@pytest.mark.parametrize(
    "run_id",
    ["manual__0001-01-01T00:00:00+14:00", "manual__9999-12-31T23:59:59-14:00", "manual__2026-13-45T99:00:00"],
)
def test_out_of_range_run_ids_do_not_raise(run_id: str) -> None:
    found = parse_run_id_time(run_id)
    assert found is None or math.isfinite(found)


def test_found_a_failing_analysis_is_not_repeated_per_task_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DAG whose analysis raised was analysed again for every task instance (0.4 s each for 10,000
    tasks: hours in the scheduler loop for one run); now once per DAG object, then the fallback."""
    import airflow_gpu_dag.priority.weights as weights

    calls = []

    def broken(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(weights, "build_basis", broken)
    with DAG("broken", schedule=None, default_args={"weight_rule": CRITICAL}) as dag:
        for i in range(20):
            EmptyOperator(task_id=f"t{i}", priority_weight=3)
    sdag = _serialized(dag)

    def check() -> None:
        strategy = CriticalPathPriorityStrategy()
        assert {
            strategy.get_weight(_ti(sdag, t, "manual__2026-11-30T12:00:00+00:00")) for t in sdag.task_dict
        } == {3}
        assert len(calls) == 1

    _under(None, check)


def test_found_through_the_dag_processor_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end through Airflow's DagBag (what the dag-processor runs): a hand-written hint that used
    to raise OverflowError in the policy is now an import error naming the DAG, the task and the fix."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 8}')
    path = tmp_path / "bad_hints.py"
    path.write_text(
        "from airflow.sdk import DAG\n"
        "from airflow.providers.standard.operators.empty import EmptyOperator\n"
        f"with DAG('bad_hints', schedule=None, default_args={{'weight_rule': {CRITICAL!r}}}):\n"
        "    EmptyOperator(task_id='train', pool='gpu_default',\n"
        "                  executor_config={'gpu_dag': {'duration_s': 60, 'gpus': 10**400, 'inputs': 5}})\n"
    )
    bag = DagBag(dag_folder=str(path))
    errors = list(bag.import_errors.values())
    assert len(errors) == 1, errors
    assert "DAG 'bad_hints', task 'train'" in errors[0] and "Fix:" in errors[0]
    assert "out of range" in errors[0] and "'inputs' must be a list" in errors[0]
    assert "OverflowError" not in errors[0] and "Traceback" not in errors[0]
