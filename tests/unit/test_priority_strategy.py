"""The priority strategies on serialized DAGs, as the scheduler sees them: cross-DAG keys
(weight = 2**31 - 1 - round(trigger + s * W - remaining - epoch)), never raising."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, TaskGroup, task
from airflow.serialization.serialized_objects import DagSerialization

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX
from airflow_gpu_dag.core.policy.objective import DEFAULT_EPOCH, key_of_weight
from airflow_gpu_dag.log_once import LogOnce
from airflow_gpu_dag.priority.background import Background
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, clamp_weight

RUN_ID = "manual__2026-11-30T12:00:00+00:00"
TRIGGER = 1_796_040_000.0  # the time in RUN_ID


@pytest.fixture(autouse=True)
def _fresh_weights(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every test starts with no cached settings or bases, no pool sizes and plans made inline."""
    from airflow_gpu_dag.priority_strategy import PackingPriorityStrategy

    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "false")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "false")  # tests/unit/test_priority_learned.py
    for cls in (CriticalPathPriorityStrategy, PackingPriorityStrategy):
        cls._weights.reset()
    yield
    for cls in (CriticalPathPriorityStrategy, PackingPriorityStrategy):
        cls._weights.reset()


def _serialized(dag: DAG) -> Any:
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


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


def test_weights_are_keys_of_the_remaining_critical_path() -> None:
    with DAG("cp", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        load = _bash("load", "10m")
        train = _bash("train", "1h")
        eval_ = _bash("eval", "20m")
        side = _bash("side", "5m")
        load >> train >> eval_
        load >> side
    sdag = _serialized(dag)
    # no pool sizes configured: the work term is 0, key = trigger - remaining critical path
    assert {t: TRIGGER - _key(_weight(sdag, t)) for t in sdag.task_dict} == {
        "load": 600 + 3600 + 1200,
        "train": 3600 + 1200,
        "eval": 1200,
        "side": 300,
    }


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
    sdag = _serialized(dag)
    assert set(sdag.task_dict) == {"create_cluster", "prep.clean", "sweep", "delete_cluster"}
    assert TRIGGER - _key(_weight(sdag, "sweep")) == 1800 + 300
    mapped = CriticalPathPriorityStrategy().get_weight(_ti(sdag, "sweep", map_index=1))  # type: ignore[arg-type]
    assert mapped == _weight(sdag, "sweep")  # every instance of a mapped task alike
    assert TRIGGER - _key(_weight(sdag, "prep.clean")) == 1200 + 1800 + 300
    assert TRIGGER - _key(_weight(sdag, "create_cluster")) == 300 + 1200 + 1800 + 300


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


def test_clamp_to_int32() -> None:
    assert clamp_weight(1e20) == INT32_MAX
    assert clamp_weight(-1e20) == -(2**31)
    assert clamp_weight(12.6) == 13


def test_huge_estimates_are_clamped() -> None:
    with DAG("huge", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        _bash("a", "300d") >> _bash("b", "300d") >> _bash("c", "300d")
    assert _weight(_serialized(dag), "a") == INT32_MAX  # a key before the epoch: clamped, not wrapped


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
        typo = _weight(_serialized(dag), "a")
        _weight(_serialized(dag), "b")
    assert typo == _weight(_serialized(fine), "a")  # 30m, the default estimate
    (record,) = [r for r in caplog.records if "bad-estimate" in r.getMessage()]
    assert "DAG 'typo', task 'a'" in record.getMessage() and "'100000d'" in record.getMessage()


def test_analysis_once_per_dag_object() -> None:
    weights = CriticalPathPriorityStrategy._weights
    with DAG("cache", default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        prev = _bash("t0", "10m")
        for i in range(1, 50):
            cur = _bash(f"t{i}", "10m")
            prev >> cur
            prev = cur
    first = _serialized(dag)
    for task_id in first.task_dict:
        _weight(first, task_id)
    assert weights.basis_builds == 1
    second = _serialized(dag)  # a new serialized version is a new object: analysed again
    _weight(second, "t0")
    assert weights.basis_builds == 2


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
    sbig, ssmall = _serialized(big), _serialized(small)
    assert _weight(ssmall, "eval") > _weight(sbig, "pretrain")
    # balanced (s = 3): due = T + 3 * W, W = 6 h * 8 GPUs / 8 = 6 h; key = due - 6 h
    assert _key(_weight(sbig, "pretrain")) == TRIGGER + 3 * 6 * 3600 - 6 * 3600
    later = "manual__2026-11-30T18:00:00+00:00"  # 6 hours later
    assert _weight(ssmall, "eval", later) < _weight(ssmall, "eval")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "throughput")
    CriticalPathPriorityStrategy._weights.reset()
    assert _key(_weight(sbig, "pretrain")) == TRIGGER + 2 * 6 * 3600 - 6 * 3600


def test_unknown_objective_is_logged_once_and_the_default_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import airflow_gpu_dag.settings as settings

    monkeypatch.setenv("AIRFLOW__GPU_DAG__OBJECTIVE", "fastest")
    monkeypatch.setattr(settings, "_warned", LogOnce(settings.log))
    assert settings.objective().name == "balanced"
    assert settings.objective().name == "balanced"
    assert caplog.text.count("unknown objective 'fastest'") == 1


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
    sdag = _serialized(dag)
    expected = planned_remaining(build_task_graph(sdag)[0], {"gpu_default": 4})
    strategy = PackingPriorityStrategy()
    work = sum((10 + 7 * i) * 60 * (1 + i % 3) for i in range(6)) / 4
    for task_id, rest in expected.items():
        assert _key(_weight(sdag, task_id, strategy=strategy)) == TRIGGER + 3 * work - round(rest)


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
    sdag = _serialized(dag)
    strategy = PackingPriorityStrategy()
    keys = {t: _key(_weight(sdag, t, strategy=strategy)) for t in sdag.task_dict}
    assert planned == []  # over the limit: never planned
    widths = width_aware_weights(build_task_graph(sdag)[0], {"gpu": 4})
    work = (40 * 60 * 4 + 4 * 50 * 60) / 4
    assert keys == {t: TRIGGER + 3 * work - round(w / 10) for t, w in widths.items()}
    assert min(keys, key=keys.__getitem__) == "wide"  # the plain critical path started the narrow ones first
    # the critical-path rule is unchanged by the limit
    assert _key(_weight(sdag, "wide")) > _key(_weight(sdag, "narrow0"))


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
    sdag = _serialized(dag)
    strategy = PackingPriorityStrategy()
    before = _weight(sdag, "a", strategy=strategy)  # the critical path while the plan is made
    weights = PackingPriorityStrategy._weights
    assert weights.background is not None and weights.background.wait_idle(120)
    assert len(weights.background.known_plans()) == 1
    assert _weight(sdag, "a", strategy=strategy) == before  # alone on the pool: the plan is the chain


@pytest.mark.parametrize("configured, expected", [(None, 19), ("5", 5), ("0", 0), ("99", 19), ("x", 19)])
def test_the_planning_subprocess_yields_the_cpu_to_the_scheduler(
    monkeypatch: pytest.MonkeyPatch, configured: str | None, expected: int
) -> None:
    """[gpu_dag] planner_nice: the plans are made at a lower CPU priority than the scheduler's, so a
    busy machine delays plans, not the scheduler loop."""
    import os

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
        assert build_task_graph(_serialized(dag))[0].priority_rule == expected  # scheduler: instance


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
    for reader in (dag, _serialized(dag)):
        graph, _ = build_task_graph(reader)
        assert graph.edge_kind("pretrain.evaluate", "check") == "control"
        assert graph.edge_kind("prep", "pretrain.train") == "data"
        assert graph.edge_kind("pretrain.train", "pretrain.evaluate") is None


def test_the_weight_rule_constants_name_the_strategy_classes() -> None:
    """The constants DAG files use are the class paths stored in serialized DAGs."""
    from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE
    from airflow_gpu_dag.priority_strategy import PackingPriorityStrategy

    for constant, cls in (
        (CRITICAL_PATH_WEIGHT_RULE, CriticalPathPriorityStrategy),
        (PACKING_WEIGHT_RULE, PackingPriorityStrategy),
    ):
        assert constant == f"{cls.__module__}.{cls.__qualname__}"


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
    sdag = _serialized(dag)
    strategy = PackingPriorityStrategy()
    _weight(sdag, "a", strategy=strategy)
    _weight(sdag, "b", strategy=strategy)
    assert seen == [("cache", False, "packing"), ("plan", True, "packing"), ("cache", True, "packing")]


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
