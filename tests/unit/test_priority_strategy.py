"""The priority strategies on serialized DAGs, as the scheduler sees them: cross-DAG keys
(weight = 2**31 - 1 - round(trigger + s * W - remaining - epoch)), never raising."""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.exceptions import AirflowClusterPolicyViolation
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, TaskGroup, task
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow.policy import dag_policy
from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX
from airflow_gpu_dag.core.policy.objective import DEFAULT_EPOCH, DEFAULT_OBJECTIVE, OBJECTIVES, key_of_weight
from airflow_gpu_dag.log_once import LogOnce
from airflow_gpu_dag.priority.background import Background
from airflow_gpu_dag.priority_strategy import (
    CriticalPathPriorityStrategy,
    clamp_weight,
)
from tests.unit.airflow_dags import (
    CRITICAL,
    POOL_SETTINGS,
    airflow_dags,
    check_weights,
    serialized,
    strategy_ti,
    under,
)
from tests.unit.task_contracts import FORGED_DERIVED, contract_weight, training_dag

RUN_ID = "manual__2026-11-30T12:00:00+00:00"


TRIGGER = 1_796_040_000.0  # the time in RUN_ID
DEFAULT = OBJECTIVES[DEFAULT_OBJECTIVE]
C = DEFAULT.chain  # key = trigger + due offset - C x remaining - U x min(descendant lead, K)


def _ahead(remaining: float, lead: int = 0) -> float:
    """How far before ``trigger + due offset`` the default objective puts a task's key (``lead``: its
    descendant lead, the tasks below it where no task with less remaining time has more)."""
    return C * remaining + DEFAULT.descendant_unit * min(lead, DEFAULT.descendant_cap)


def _ti(sdag: Any, task_id: str, run_id: str = RUN_ID, map_index: int = -1) -> Any:
    return SimpleNamespace(
        task=sdag.task_dict[task_id], task_id=task_id, dag_id=sdag.dag_id, run_id=run_id, map_index=map_index
    )


def _weight(sdag: Any, task_id: str, run_id: str = RUN_ID, strategy: Any = None) -> int:
    chosen = strategy or CriticalPathPriorityStrategy()
    return chosen.get_weight(_ti(sdag, task_id, run_id))  # type: ignore[no-any-return]


def _key(weight: int) -> float:
    found = key_of_weight(weight, DEFAULT_EPOCH)
    assert found is not None, weight
    return found


def _bash(task_id: str, duration: str, **kwargs: Any) -> BashOperator:
    return BashOperator(
        task_id=task_id, bash_command="true", executor_config=gpu_hints(duration=duration), **kwargs
    )


@pytest.mark.usefixtures("_fresh_weights")
def test_weights_are_keys_of_the_remaining_critical_path() -> None:
    with DAG("cp", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        load = _bash("load", "10m")
        train = _bash("train", "1h")
        eval_ = _bash("eval", "20m")
        side = _bash("side", "5m")
        load >> train >> eval_
        load >> side
    sdag = serialized(dag)
    # no pool sizes configured: the work term is 0, key = trigger - c x remaining critical path
    # - U x min(descendants, K) (fair, the default: load has train, eval and side below it)
    assert {t: TRIGGER - _key(_weight(sdag, t)) for t in sdag.task_dict} == {
        "load": _ahead(600 + 3600 + 1200, 3),
        "train": _ahead(3600 + 1200, 1),
        "eval": _ahead(1200),
        "side": _ahead(300),
    }


@pytest.mark.usefixtures("_fresh_weights")
def test_task_group_mapped_and_setup_teardown() -> None:
    with DAG("shapes", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        setup = _bash("create_cluster", "5m").as_setup()
        with TaskGroup("prep"):
            clean = _bash("clean", "20m")

        @task(executor_config=gpu_hints(duration="30m", gpus=1))
        def sweep(lr: float) -> float:
            return lr

        swept = sweep.expand(lr=[0.1, 0.01])
        teardown = _bash("delete_cluster", "5m").as_teardown(setups=setup)
        setup >> clean >> swept >> teardown
    sdag = serialized(dag)
    assert set(sdag.task_dict) == {"create_cluster", "prep.clean", "sweep", "delete_cluster"}
    assert TRIGGER - _key(_weight(sdag, "sweep")) == _ahead(1800 + 300, 1)  # the teardown below it
    mapped = CriticalPathPriorityStrategy().get_weight(_ti(sdag, "sweep", map_index=1))  # type: ignore[arg-type]
    assert mapped == _weight(sdag, "sweep")  # every instance of a mapped task alike
    assert TRIGGER - _key(_weight(sdag, "prep.clean")) == _ahead(1200 + 1800 + 300, 3)  # 2 instances
    assert TRIGGER - _key(_weight(sdag, "create_cluster")) == _ahead(300 + 1200 + 1800 + 300, 4)


@pytest.mark.usefixtures("_fresh_weights")
def test_never_raises_and_falls_back_to_priority_weight() -> None:
    def broken_dag() -> Any:
        raise RuntimeError("boom")

    ti = SimpleNamespace(
        task=SimpleNamespace(get_dag=broken_dag, priority_weight=7, task_id="x"), task_id="x"
    )
    assert CriticalPathPriorityStrategy().get_weight(ti) == 7  # type: ignore[arg-type]
    no_dag = SimpleNamespace(
        task=SimpleNamespace(get_dag=lambda: None, priority_weight=3, task_id="y"), task_id="y"
    )
    assert CriticalPathPriorityStrategy().get_weight(no_dag) == 3  # type: ignore[arg-type]
    nothing = SimpleNamespace(task=None, task_id="z")
    assert CriticalPathPriorityStrategy().get_weight(nothing) == 1  # type: ignore[arg-type]


@pytest.mark.usefixtures("_fresh_weights")
def test_cyclic_or_malformed_dag_does_not_raise() -> None:
    class FakeTask:
        def __init__(self, task_id: str, downstream: set[str], config: Any) -> None:
            self.task_id = task_id
            self.downstream_task_ids = downstream
            self.executor_config = config
            self.priority_weight = 5
            self.pool = "default_pool"
            self.pool_slots = 1
            self.retries = 0

        def get_dag(self) -> Any:
            return dag

    dag = SimpleNamespace(dag_id="bad", task_dict={})
    dag.task_dict = {
        "a": FakeTask("a", {"b"}, {"gpu_dag": {"duration_s": "soon"}}),
        "b": FakeTask("b", {"a"}, None),
    }
    ti = SimpleNamespace(task=dag.task_dict["a"], task_id="a")
    assert CriticalPathPriorityStrategy().get_weight(ti) == 5  # type: ignore[arg-type]


@pytest.mark.usefixtures("_fresh_weights")
def test_clamp_to_int32() -> None:
    assert clamp_weight(1e20) == INT32_MAX
    assert clamp_weight(-1e20) == -(2**31)
    assert clamp_weight(12.6) == 13


@pytest.mark.usefixtures("_fresh_weights")
def test_huge_estimates_are_clamped() -> None:
    with DAG("huge", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        # 6 x 300 days, of which c = 0.5 counts: the key lies 900 days before the trigger (2026-11-30)
        chain = [_bash(name, "300d") for name in "abcdef"]
        for up, down in itertools.pairwise(chain):
            up >> down
    assert _weight(serialized(dag), "a") == INT32_MAX  # a key before the epoch: clamped, not wrapped


@pytest.mark.usefixtures("_fresh_weights")
def test_an_estimate_refused_at_parse_time_is_logged_and_weighed_with_the_default(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A DAG parsed without the cluster policy reaches the scheduler with "100000d" (over the 366-day
    bound) or "soon": the strategy weighs the task with the default estimate and says so once."""
    with DAG("typo", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        _bash("a", "100000d") >> _bash("b", "30m")
    with DAG("fine", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as fine:
        _bash("a", "30m") >> _bash("b", "30m")
    with caplog.at_level("WARNING", logger="airflow_gpu_dag.priority.basis"):
        typo = _weight(serialized(dag), "a")
        _weight(serialized(dag), "b")
    assert typo == _weight(serialized(fine), "a")  # 30m, the default estimate
    (record,) = [r for r in caplog.records if "bad-estimate" in r.getMessage()]
    assert "DAG 'typo', task 'a'" in record.getMessage() and "'100000d'" in record.getMessage()


@pytest.mark.usefixtures("_fresh_weights")
def test_analysis_once_per_dag_object() -> None:
    weights = CriticalPathPriorityStrategy._weights
    with DAG("cache", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        prev = _bash("t0", "10m")
        for i in range(1, 50):
            cur = _bash(f"t{i}", "10m")
            prev >> cur
            prev = cur
    first = serialized(dag)
    for task_id in first.task_dict:
        _weight(first, task_id)
    assert weights.basis_builds == 1
    second = serialized(dag)  # a new serialized version is a new object: analysed again
    _weight(second, "t0")
    assert weights.basis_builds == 2


@pytest.mark.usefixtures("_fresh_weights")
def test_runs_age_and_small_runs_go_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """With pool sizes known, a run's due time includes its GPU work: a small run triggered with a big one
    goes first; runs triggered later come later; the objective's stretch is what changes."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 8}')
    with DAG("big", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as big:
        BashOperator(
            task_id="pretrain",
            bash_command="true",
            pool="gpu_default",
            pool_slots=8,
            executor_config=gpu_hints(duration="6h", gpus=8),
        )
    with DAG("small", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as small:
        BashOperator(
            task_id="eval",
            bash_command="true",
            pool="gpu_default",
            pool_slots=1,
            executor_config=gpu_hints(duration="20m", gpus=1),
        )
    sbig, ssmall = serialized(big), serialized(small)
    assert _weight(ssmall, "eval") > _weight(sbig, "pretrain")
    # balanced (s = 4, c = 0.5, overdue 12 h): W = 6 h * 8 GPUs / 8 = 6 h, due = T + min(4 W, W + 12 h)
    # = T + 18 h; key = due - 0.5 x 6 h
    assert _key(_weight(sbig, "pretrain")) == TRIGGER + 18 * 3600 - 3 * 3600
    later = "manual__2026-11-30T18:00:00+00:00"  # 6 hours later
    assert _weight(ssmall, "eval", later) < _weight(ssmall, "eval")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "throughput")
    CriticalPathPriorityStrategy._weights.reset()
    assert _key(_weight(sbig, "pretrain")) == TRIGGER + 2 * 6 * 3600 - 6 * 3600


@pytest.mark.usefixtures("_fresh_weights")
def test_unknown_objective_is_logged_once_and_the_default_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import airflow_gpu_dag.settings as settings

    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "fastest")
    monkeypatch.setattr(settings, "_warned", LogOnce(settings.log))
    assert settings.objective().name == DEFAULT_OBJECTIVE == "fair"
    assert settings.objective().name == DEFAULT_OBJECTIVE
    assert caplog.text.count("unknown objective 'fastest'") == 1


@pytest.mark.usefixtures("_fresh_weights")
def test_packing_keys_follow_the_plan_and_start_from_the_critical_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Until the plan of a DAG version is ready the packing rule uses the critical path (same unit);
    with the plan (made inline here) a task's remaining time is planned end - planned start."""
    from airflow_gpu_dag import PACKING_WEIGHT_RULE
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.core.planning.planner import planned_remaining
    from airflow_gpu_dag.priority_strategy import PackingPriorityStrategy

    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 4}')
    with DAG("packed", default_args={"weight_rule": PACKING_WEIGHT_RULE}) as dag:
        for i in range(6):
            BashOperator(
                task_id=f"t{i}",
                bash_command="true",
                pool="gpu_default",
                pool_slots=1 + i % 3,
                executor_config=gpu_hints(duration=f"{10 + 7 * i}m", gpus=1 + i % 3),
            )
    sdag = serialized(dag)
    expected = planned_remaining(build_task_graph(sdag)[0], {"gpu_default": 4})
    strategy = PackingPriorityStrategy()
    work = sum((10 + 7 * i) * 60 * (1 + i % 3) for i in range(6)) / 4
    for task_id, rest in expected.items():
        expected = TRIGGER + DEFAULT.due_offset(work) - _ahead(rest)  # independent tasks
        assert _key(_weight(sdag, task_id, strategy=strategy)) == math.floor(expected + 0.5)


@pytest.mark.usefixtures("_fresh_weights")
def test_packing_dags_above_the_planning_limit_use_the_width_aware_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above ``PACKING_PLAN_MAX_TASKS`` no plan is made and, as docs/priority.md says, the keys follow the
    ``width_aware`` rule (critical path in which a wide task pays for the drain it needs), not the plain
    critical path, which put four 50-minute narrow tasks ahead of the 4-GPU task they starve. The limit is
    patched to 3 so a 5-task DAG takes the branch a 3,001-task DAG takes."""
    import airflow_gpu_dag.priority.weights as weights_module
    from airflow_gpu_dag import PACKING_WEIGHT_RULE
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.core.analysis.weight_rules import width_aware_weights
    from airflow_gpu_dag.priority_strategy import PackingPriorityStrategy

    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu": 4}')
    monkeypatch.setattr(weights_module, "PACKING_PLAN_MAX_TASKS", 3)
    planned: list[object] = []
    monkeypatch.setattr(Background, "plan", lambda self, request: planned.append(request))
    with DAG("big", default_args={"weight_rule": PACKING_WEIGHT_RULE}) as dag:
        BashOperator(
            task_id="wide",
            bash_command="true",
            pool="gpu",
            pool_slots=4,
            executor_config=gpu_hints(duration="40m", gpus=4),
        )
        for i in range(4):
            BashOperator(
                task_id=f"narrow{i}",
                bash_command="true",
                pool="gpu",
                pool_slots=1,
                executor_config=gpu_hints(duration="50m", gpus=1),
            )
    sdag = serialized(dag)
    strategy = PackingPriorityStrategy()
    keys = {t: _key(_weight(sdag, t, strategy=strategy)) for t in sdag.task_dict}
    assert planned == []  # over the limit: never planned
    widths = width_aware_weights(build_task_graph(sdag)[0], {"gpu": 4})
    work = (40 * 60 * 4 + 4 * 50 * 60) / 4
    due = TRIGGER + DEFAULT.due_offset(work)
    assert keys == {t: math.floor(due - _ahead(w / 10) + 0.5) for t, w in widths.items()}
    assert min(keys, key=keys.__getitem__) == "wide"  # the plain critical path started the narrow ones first
    # the critical-path rule is unchanged by the limit
    assert _key(_weight(sdag, "wide")) > _key(_weight(sdag, "narrow0"))


@pytest.mark.usefixtures("_fresh_weights")
def test_a_plan_in_the_background_does_not_block_get_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_gpu_dag import PACKING_WEIGHT_RULE
    from airflow_gpu_dag.priority_strategy import PackingPriorityStrategy

    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 2}')
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "true")
    with DAG("bg", default_args={"weight_rule": PACKING_WEIGHT_RULE}) as dag:
        a = BashOperator(
            task_id="a",
            bash_command="true",
            pool="gpu_default",
            pool_slots=2,
            executor_config=gpu_hints(duration="1h", gpus=2),
        )
        a >> BashOperator(
            task_id="b",
            bash_command="true",
            pool="gpu_default",
            pool_slots=1,
            executor_config=gpu_hints(duration="10m", gpus=1),
        )
    sdag = serialized(dag)
    strategy = PackingPriorityStrategy()
    before = _weight(sdag, "a", strategy=strategy)  # the critical path while the plan is made
    weights = PackingPriorityStrategy._weights
    assert weights.background is not None and weights.background.wait_idle(120)
    assert len(weights.background.known_plans()) == 1
    assert _weight(sdag, "a", strategy=strategy) == before  # alone on the pool: the plan is the chain


@pytest.mark.usefixtures("_fresh_weights")
@pytest.mark.parametrize("configured, expected", [(None, 19), ("5", 5), ("0", 0), ("99", 19), ("x", 19)])
def test_the_planning_subprocess_yields_the_cpu_to_the_scheduler(
    monkeypatch: pytest.MonkeyPatch, configured: str | None, expected: int
) -> None:
    """[gpu_dag] planner_nice: the plans are made at a lower CPU priority than the scheduler's, so a
    busy machine delays plans, not the scheduler loop."""

    from airflow_gpu_dag.priority.weights import WeightSettings

    if configured is None:
        monkeypatch.delenv("AIRFLOW__GPU_DAG__PLANNER_NICE", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW__GPU_DAG__PLANNER_NICE", configured)
    assert WeightSettings.read().planner_nice == expected
    background = Background(nice=expected)
    try:
        own = os.nice(0)
        assert background._executor().submit(os.nice, 0).result(timeout=120) == min(19, own + expected)
    finally:
        background._reset_executor()


@pytest.mark.usefixtures("_fresh_weights")
def test_graph_records_the_provider_rule_the_dag_uses() -> None:
    from airflow_gpu_dag import PACKING_WEIGHT_RULE
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph

    with DAG("cp_rule", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as cp_dag:
        _bash("a", "10m")
    with DAG("packing_rule", default_args={"weight_rule": PACKING_WEIGHT_RULE}) as packing_dag:
        _bash("a", "10m")
    with DAG("stock_rule") as stock_dag:
        _bash("a", "10m")
    for dag, expected in ((cp_dag, "critical_path"), (packing_dag, "packing"), (stock_dag, None)):
        assert build_task_graph(dag)[0].priority_rule == expected  # authoring DAG: class-path string
        assert build_task_graph(serialized(dag))[0].priority_rule == expected  # scheduler: instance


@pytest.mark.usefixtures("_fresh_weights")
def test_edge_labels_across_task_groups_become_edge_kinds() -> None:
    from airflow.sdk import Label

    from airflow_gpu_dag.airflow.dag_reader import build_task_graph

    with DAG("labels") as dag:
        with TaskGroup("pretrain") as pretrain:
            _bash("train", "1h") >> _bash("evaluate", "10m")
        check = _bash("check", "5m")
        prep = _bash("prep", "10m")
        pretrain >> Label("control") >> check
        prep >> Label("data") >> pretrain
    for reader in (dag, serialized(dag)):
        graph, _ = build_task_graph(reader)
        assert graph.edge_kind("pretrain.evaluate", "check") == "control"
        assert graph.edge_kind("prep", "pretrain.train") == "data"
        assert graph.edge_kind("pretrain.train", "pretrain.evaluate") is None


@pytest.mark.usefixtures("_fresh_weights")
def test_the_weight_rule_constants_name_the_strategy_classes() -> None:
    """The constants DAG files use are the class paths stored in serialized DAGs."""
    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE
    from airflow_gpu_dag.priority_strategy import PackingPriorityStrategy

    for constant, cls in (
        (CRITICAL_PATH_WEIGHT_RULE, CriticalPathPriorityStrategy),
        (PACKING_WEIGHT_RULE, PackingPriorityStrategy),
    ):
        assert constant == f"{cls.__module__}.{cls.__qualname__}"


@pytest.mark.usefixtures("_fresh_weights")
def test_the_strategy_reports_cache_hits_and_plan_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/metrics.md: gpu_dag.priority.cache_hits / cache_misses per get_weight, plan_time per plan."""
    import airflow_gpu_dag.metrics as metrics
    from airflow_gpu_dag import PACKING_WEIGHT_RULE
    from airflow_gpu_dag.priority_strategy import PackingPriorityStrategy

    seen: list[tuple[str, object, str]] = []
    monkeypatch.setattr(
        metrics, "priority_cache", lambda hit, strategy: seen.append(("cache", hit, strategy))
    )
    monkeypatch.setattr(
        metrics, "priority_plan_time", lambda seconds, strategy: seen.append(("plan", seconds >= 0, strategy))
    )
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 2}')
    with DAG("metered", default_args={"weight_rule": PACKING_WEIGHT_RULE}) as dag:
        BashOperator(
            task_id="a",
            bash_command="true",
            pool="gpu_default",
            pool_slots=2,
            executor_config=gpu_hints(duration="1h", gpus=2),
        )
        BashOperator(
            task_id="b",
            bash_command="true",
            pool="gpu_default",
            pool_slots=1,
            executor_config=gpu_hints(duration="10m", gpus=1),
        )
    sdag = serialized(dag)
    strategy = PackingPriorityStrategy()
    _weight(sdag, "a", strategy=strategy)
    _weight(sdag, "b", strategy=strategy)
    assert seen == [("cache", False, "packing"), ("plan", True, "packing"), ("cache", True, "packing")]


@pytest.mark.usefixtures("_fresh_weights")
def test_background_keeps_a_bounded_record_of_plan_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans are capped (MAX_PLANS); the list of their durations grew by one float per plan for ever."""
    from airflow_gpu_dag.core.model.graph import TaskGraph
    from airflow_gpu_dag.priority import background as module

    monkeypatch.setattr(module, "planned_remaining", lambda *args: {"a": 1.0})
    planner = Background(inline=True)
    graph = TaskGraph("d")
    graph.add("a", 1.0)
    for i in range(module.MAX_PLANS + 50):
        planner.plan((f"fp{i}", graph, {"gpu": 8}, "reservation", 0, False))
    assert len(planner._plans) == len(planner.plan_seconds) == module.MAX_PLANS


RUN_ID_bad_input_properties = st.one_of(
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


def _check_policy(dag: DAG) -> None:
    """Passes, or an AirflowClusterPolicyViolation naming the DAG, a task of it and the fix."""
    try:
        dag_policy(dag)
    except AirflowClusterPolicyViolation as err:
        message = str(err)
        assert f"DAG {dag.dag_id!r}" in message, message
        assert "Fix:" in message, message
        assert any(f"task {t!r}" in message for t in dag.task_dict), message


@pytest.mark.usefixtures("_fresh_strategies")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dag=airflow_dags(),
    pools=st.sampled_from(POOL_SETTINGS),
    run_ids=st.lists(RUN_ID_bad_input_properties, min_size=1, max_size=3),
)
def test_policy_is_clear_and_weights_never_raise(dag: DAG, pools: str | None, run_ids: list[str]) -> None:
    def check() -> None:
        _check_policy(dag)
        check_weights(serialized(dag), run_ids)

    under(pools, check)


@pytest.mark.usefixtures("_fresh_strategies")
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
    sdag = serialized(dag)

    def check() -> None:
        strategy = CriticalPathPriorityStrategy()
        assert {
            strategy.get_weight(strategy_ti(sdag, t, "manual__2026-11-30T12:00:00+00:00"))
            for t in sdag.task_dict
        } == {3}
        assert len(calls) == 1

    under(None, check)


@pytest.mark.usefixtures("_fresh_strategies")
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


@pytest.mark.usefixtures("_fresh_weights")
@pytest.mark.parametrize("rule", ["critical_path", "CRITICAL_PATH_WEIGHT_RULE", "PackingPriorityStrategy"])
def test_a_dag_naming_our_rule_the_way_airflow_cannot_load_fails_its_import_with_the_task_and_fix(
    tmp_path: Any, rule: str
) -> None:
    """A DAG without GPU hints that means our rule but writes its short name was skipped by the cluster
    policy (it looked for ``airflow_gpu_dag`` in the rule): the DAG file imported, and its serialization
    then failed with ``Unknown priority strategy critical_path``, naming neither the task nor the fix."""
    from airflow.dag_processing.dagbag import DagBag

    path = tmp_path / "short_rule.py"
    path.write_text(
        "from airflow.sdk import DAG\n"
        "from airflow.providers.standard.operators.bash import BashOperator\n"
        f"with DAG('short_rule', schedule=None, default_args={{'weight_rule': {rule!r}}}):\n"
        "    BashOperator(task_id='evaluate', bash_command='true')\n"
    )
    bag = DagBag(dag_folder=str(path))
    errors = list(bag.import_errors.values())
    assert len(errors) == 1, errors
    assert "DAG 'short_rule', task 'evaluate'" in errors[0] and "bad-weight-rule" in errors[0]
    meant = "PackingPriorityStrategy" if "Packing" in rule else "CriticalPathPriorityStrategy"
    assert f"did you mean 'airflow_gpu_dag.priority_strategy.{meant}'" in errors[0]


def test_packing_strategy_never_raises_and_follows_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_gpu_dag import PACKING_WEIGHT_RULE, gpu_hints
    from airflow_gpu_dag import priority_strategy as ps
    from airflow_gpu_dag.airflow.dag_reader import build_task_graph
    from airflow_gpu_dag.core.planning.planner import planned_remaining
    from airflow_gpu_dag.core.policy.objective import descendant_lead, key_of_weight

    assert PACKING_WEIGHT_RULE == "airflow_gpu_dag.priority_strategy.PackingPriorityStrategy"
    with DAG("packing_strategy_dag", schedule=None) as dag:
        a = EmptyOperator(task_id="a", pool="gpu", executor_config=gpu_hints(duration=10, gpus=1))
        b = EmptyOperator(task_id="b", pool="gpu", executor_config=gpu_hints(duration=100, gpus=8))
        c = EmptyOperator(task_id="c", pool="gpu", executor_config=gpu_hints(duration=5, gpus=1))
        a >> b
    del c
    strategy = ps.PackingPriorityStrategy()
    run_id = "manual__2026-11-30T12:00:00+00:00"

    def ti(task_id: str) -> Any:
        return SimpleNamespace(task=dag.task_dict[task_id], task_id=task_id, dag_id=dag.dag_id, run_id=run_id)

    def rest(task_id: str) -> float:  # the remaining time a weight encodes (trigger and work removed)
        key = key_of_weight(strategy.get_weight(ti(task_id)))
        assert key is not None
        return -key

    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "false")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu": 8}')
    ps.PackingPriorityStrategy._weights.reset()
    planned = planned_remaining(build_task_graph(dag)[0], {"gpu": 8})
    lead = descendant_lead({"a": 1}, planned)  # a has b below it
    base = rest("a") - _ahead(planned["a"], lead["a"])  # -(trigger + due offset): the same for every task
    assert all(abs(rest(t) - _ahead(planned[t], lead[t]) - base) <= 1 for t in ("b", "c"))  # (whole s)
    assert strategy.get_weight(ti("a")) > strategy.get_weight(ti("b"))  # a gates the long wide task
    # a task wider than the configured pool: the planner refuses, critical-path remaining, no exception
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu": 4}')
    ps.PackingPriorityStrategy._weights.reset()
    assert rest("a") - rest("b") == _ahead(10, 1)  # remaining 110 vs 100: the critical path
    # no pool sizes configured: the critical path too
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS")
    ps.PackingPriorityStrategy._weights.reset()
    assert abs(rest("a") - rest("c") - _ahead(105, 1)) <= 1
    no_task: Any = SimpleNamespace(task=None, task_id="x")
    assert strategy.get_weight(no_task) == 1
    # anything else failing: the task's own priority_weight
    import airflow_gpu_dag.priority.basis as basis

    monkeypatch.setattr(basis, "build_task_graph", lambda dag: 1 / 0)
    ps.PackingPriorityStrategy._weights.reset()
    assert strategy.get_weight(ti("c")) == dag.task_dict["c"].priority_weight
    ps.PackingPriorityStrategy._weights.reset()


def test_packing_strategy_reads_the_search_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """``[gpu_dag] plan_search_budget`` reaches the planner; unset or malformed it stays 0 (off)."""
    import airflow_gpu_dag.settings as config

    seen: list[int] = []

    def fake_conf(key: str, fallback: str | None) -> str | None:
        return {"plan_search_budget": budget}.get(key, fallback)

    for budget, expected in (("60000", 60000), ("", 0), ("lots", 0), ("-5", 0)):
        monkeypatch.setattr(config, "conf_get", fake_conf)
        seen.append(config.plan_search_budget())
        assert seen[-1] == expected, budget
    monkeypatch.setattr(config, "conf_get", lambda key, fallback: fallback)
    assert config.plan_search_budget() == 0


def test_packing_strategy_reads_the_backfill_it_plans_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """``[gpu_dag] plan_backfill = strict`` makes the planner predict a strict-backfill controller."""
    import airflow_gpu_dag.settings as config

    for raw, expected in (("strict", True), (" Strict ", True), ("easy", False), ("", False)):
        monkeypatch.setattr(
            config, "conf_get", lambda key, fallback, raw=raw: raw if key == "plan_backfill" else fallback
        )
        assert config.plan_strict_backfill() is expected, raw
    monkeypatch.setattr(config, "conf_get", lambda key, fallback: fallback)
    assert config.plan_strict_backfill() is False


@pytest.mark.usefixtures("_fresh_task_contract")
def test_derived_figures_written_without_the_policy_are_ignored(caplog: pytest.LogCaptureFixture) -> None:
    """A DAG parsed where the provider's policy does not run keeps what its file wrote; the scheduler
    uses derived figures only when their digest is the DAG's own."""
    forger = training_dag(
        {"gpu_dag": {**gpu_hints(duration="250h", gpus=4)["gpu_dag"], "derived": FORGED_DERIVED}},
        mapped=False,
    )
    weight = contract_weight(serialized(forger), "train")
    CriticalPathPriorityStrategy._weights.reset()
    plain = training_dag(None, mapped=False)  # no derived figures: the scheduler analyses it
    clean = contract_weight(serialized(plain), "train")
    assert weight == clean
    assert "not this DAG version's" in caplog.text
