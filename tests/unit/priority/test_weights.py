"""Tests of ``airflow_gpu_dag.priority.weights``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import airflow_gpu_dag.priority.weights as weights_module
from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, PACKING_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow import parse_time
from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.airflow.policy import dag_policy
from airflow_gpu_dag.core.analysis.estimates import DurationEstimate, with_estimates
from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX, INT32_MIN
from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.core.policy.objective import DEFAULT_EPOCH, get_objective, key_of_weight
from airflow_gpu_dag.priority.learned import LearnedDurations
from airflow_gpu_dag.priority.weights import (
    SETTINGS_TTL_S,
    CrossDagWeights,
    WeightSettings,
    fallback_weight,
    key_capacities,
    policy_text,
)
from tests.unit.airflow_dags import (
    CRITICAL,
    GOOD_HINTS,
    POOL_SETTINGS,
    airflow_dags,
    check_weights,
    serialized,
    strategy_ti,
    under,
)
from tests.unit.task_contracts import FORGED_DERIVED

#: Every test starts and ends with fresh strategy caches.
pytestmark = pytest.mark.usefixtures("_fresh_strategies")

RUN_ID = "manual__2026-11-30T12:00:00+00:00"
TRIGGER = 1_796_040_000.0  # the time in RUN_ID
BALANCED = get_objective("balanced")  # key = T + min(4 W, W + 12 h) - 0.5 x remaining: no descendants term


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
        sdag = serialized(dag)
        weights = check_weights(sdag, [run])
        for rule in weights.values():
            for up, task in sdag.task_dict.items():
                for down in task.downstream_task_ids:
                    assert rule[up] >= rule[down], (up, down, rule)

    under(pools, check)


# -- helpers ------------------------------------------------------------------------------------------


class Config:
    """Settings for a test's own CrossDagWeights (inline, balanced, no pools, no learning); counts reads."""

    def __init__(self, **changes: Any) -> None:
        self.current = replace(
            WeightSettings(BALANCED, DEFAULT_EPOCH, {}, "reservation", 0, False, plan_in_background=False),
            **changes,
        )
        self.reads = 0

    def __call__(self) -> WeightSettings:
        self.reads += 1
        return self.current

    def change(self, weights: CrossDagWeights, **changes: Any) -> None:
        """New settings, which ``weights`` reads on its next call (the settings' TTL has passed)."""
        self.current = replace(self.current, **changes)
        weights._settings_at -= SETTINGS_TTL_S + 1


@pytest.fixture
def own() -> Iterator[Callable[..., tuple[CrossDagWeights, Config]]]:
    """``own(rule, **settings)``: weights of the test's own, whose threads end with the test."""
    made: list[CrossDagWeights] = []

    def make(rule: str = "critical_path", **changes: Any) -> tuple[CrossDagWeights, Config]:
        config = Config(**changes)
        made.append(CrossDagWeights(rule, config))
        return made[-1], config

    yield make
    for weights in made:
        weights.reset()


def _bash(task_id: str, duration: str, gpus: int | None = None, **kwargs: Any) -> BashOperator:
    hints = gpu_hints(duration=duration, gpus=gpus) if gpus else gpu_hints(duration=duration)
    return BashOperator(task_id=task_id, bash_command="true", executor_config=hints, **kwargs)


def _pipeline(dag_id: str = "pipe", train: str = "1h", rule: str = CRITICAL_PATH_WEIGHT_RULE) -> DAG:
    """prep (10 min) >> train (4 GPUs of pool ``gpu``)."""
    with DAG(dag_id, schedule=None, default_args={"weight_rule": rule}) as dag:
        prep = _bash("prep", "10m")
        prep >> _bash("train", train, gpus=4, pool="gpu", pool_slots=4)
    return dag


def _weights(weights: CrossDagWeights, sdag: Any, **extra: Any) -> dict[str, int]:
    out = {}
    for task_id in sdag.task_dict:
        ti = strategy_ti(sdag, task_id, RUN_ID)
        for name, value in extra.items():
            setattr(ti, name, value)
        out[task_id] = weights.weight(ti)
    return out


def _key(weight: int, epoch: float = DEFAULT_EPOCH) -> float:
    key = key_of_weight(weight, epoch)
    assert key is not None, weight
    return key


# -- key_capacities -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("_fresh", "_no_configured_limits")
def test_key_capacities_are_the_configured_pools_without_empty_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """[gpu_dag] pools wins over the inventory; a pool of 0 slots measures no work (no division by 0)."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu": 8, "gpu_a100": 0}')
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "2xa100")
    assert key_capacities() == {"gpu": 8}


@pytest.mark.usefixtures("_fresh", "_no_configured_limits")
@pytest.mark.parametrize("pools", [None, "not json", '{"gpu": -1}', '["gpu", 8]'])
def test_key_capacities_fall_back_to_the_static_inventory_without_usable_pools(
    monkeypatch: pytest.MonkeyPatch, pools: str | None
) -> None:
    """Unset or invalid [gpu_dag] pools (ignored, as documented): the static inventory's pool sizes."""
    if pools is not None:
        monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", pools)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "2xa100:80GiB,1xh100")
    assert key_capacities() == {"gpu_default": 3, "gpu_a100": 2, "gpu_h100": 1}


@pytest.mark.usefixtures("_fresh", "_no_configured_limits")
def test_an_invalid_inventory_is_logged_and_gives_no_capacities(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An inventory that cannot be read must not raise into every get_weight: no capacities (W = 0)."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "4xa100 80GiB")
    with caplog.at_level(logging.WARNING, logger=weights_module.__name__):
        assert key_capacities() == {}
    assert "[gpu_dag] inventory is invalid" in caplog.text and "put a colon" in caplog.text


@pytest.mark.usefixtures("_fresh", "_no_configured_limits")
def test_without_pools_or_inventory_there_are_no_capacities() -> None:
    assert key_capacities() == {}


# -- WeightSettings -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("_fresh", "_no_configured_limits")
def test_weight_settings_read_every_option_the_weights_depend_on(monkeypatch: pytest.MonkeyPatch) -> None:
    for option, value in {
        "OBJECTIVE": "throughput",
        "KEY_EPOCH": "2025-06-01",
        "POOLS": '{"gpu": 4}',
        "PLAN_POLICY": "greedy",
        "PLAN_SEARCH_BUDGET": "500",
        "PLAN_BACKFILL": "strict",
        "PLAN_IN_BACKGROUND": "false",
        "PLANNER_NICE": "7",
        "LEARNED_DURATIONS": "false",
        "LEARNED_REFRESH": "90s",
    }.items():
        monkeypatch.setenv(f"AIRFLOW__GPU_DAG__{option}", value)
    read = WeightSettings.read()
    assert (read.objective.name, read.objective.stretch) == ("throughput", 2.0)
    assert read.epoch == datetime(2025, 6, 1, tzinfo=UTC).timestamp()
    assert read.capacity == {"gpu": 4}
    assert (read.plan_in_background, read.planner_nice, read.learned, read.learned_refresh) == (
        False,
        7,
        False,
        90.0,
    )
    # greedy admission, by the simulator's name for it
    assert read.planner_settings() == {"policy": "critical_path", "search": 500, "strict": True}


@pytest.mark.usefixtures("_fresh", "_no_configured_limits")
def test_weight_settings_defaults() -> None:
    """Nothing configured: fair, 2025-01-01, no pools, reservation plans in the background, learning on."""
    read = WeightSettings.read()
    assert read.objective.name == "fair"
    assert (read.epoch, read.capacity) == (DEFAULT_EPOCH, {})
    assert read.planner_settings() == {"policy": "reservation", "search": 0, "strict": False}
    assert (read.plan_in_background, read.planner_nice, read.learned, read.learned_refresh) == (
        True,
        19,
        True,
        600.0,
    )


# -- CrossDagWeights.settings / reset -----------------------------------------------------------------


def test_settings_are_read_once_per_ttl(own: Callable[..., tuple[CrossDagWeights, Config]]) -> None:
    """A weight per task instance must not re-read Airflow's configuration each time."""
    weights, config = own()
    first = weights.settings()
    assert weights.settings() is first and weights.settings() is first
    assert config.reads == 1
    config.change(weights, epoch=DEFAULT_EPOCH - 60)
    assert weights.settings().epoch == DEFAULT_EPOCH - 60 and config.reads == 2


def test_switching_plans_inline_replaces_the_workers_and_the_old_ones_take_no_new_work(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """plan_in_background changes: new inline/threaded workers; the replaced ones take no new work."""
    weights, config = own(plan_in_background=True, learned=True)
    weights.settings()
    old_background, old_learned = weights.background, weights.learned
    assert old_background is not None and not old_background.inline
    assert old_learned is not None and not old_learned.inline
    config.change(weights, planner_nice=19, learned_refresh=600.0)  # the same workers' settings
    weights.settings()
    assert weights.background is old_background and weights.learned is old_learned
    config.change(weights, plan_in_background=False)
    weights.settings()
    assert weights.background is not None and weights.background.inline
    assert weights.learned is not None and weights.learned.inline
    ran: list[str] = []
    old_background.run("late", lambda: ran.append("late"))  # closed: dropped, its key freed
    assert old_background.wait_idle(60) and ran == []
    assert old_learned.get("pipe:v1", object()) is None and not old_learned.running  # stopped


def test_reset_forgets_settings_and_bases_and_ends_the_workers(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    weights, config = own()
    sdag = serialized(_pipeline())
    before = _weights(weights, sdag)
    background = weights.background
    assert weights.basis_builds == 1 and background is not None and config.reads == 1
    weights.reset()
    assert (weights.background, weights.learned, weights.basis_builds) == (None, None, 0)
    assert _weights(weights, sdag) == before
    assert weights.basis_builds == 1 and config.reads == 2  # analysed and read again
    assert weights.background is not background


# -- the basis of a DAG object ------------------------------------------------------------------------


def test_a_capacity_change_rebuilds_the_cached_basis_and_moves_the_keys(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """Bases are cached per DAG object and pool sizes: new sizes (after the TTL) re-analyse and move W."""
    weights, config = own()
    sdag = serialized(_pipeline())
    keys = {t: _key(w) - TRIGGER for t, w in _weights(weights, sdag).items()}
    assert keys == {"prep": -0.5 * (600 + 3600), "train": -0.5 * 3600}  # no pools: W = 0
    first = weights.basis(sdag)
    assert weights.basis(sdag) is first and weights.basis_builds == 1
    config.change(weights, capacity={"gpu": 8})
    keys = {t: _key(w) - TRIGGER for t, w in _weights(weights, sdag).items()}
    # W = 1 h x 4 slots / 8 = 30 min; due = T + min(4 W, W + 12 h) = T + 2 h
    assert keys == {"prep": 7200 - 0.5 * (600 + 3600), "train": 7200 - 0.5 * 3600}
    assert weights.basis_builds == 2 and weights.basis(sdag) is not first
    assert weights.basis(sdag).capacity == {"gpu": 8}


def test_objective_and_epoch_changes_apply_without_a_new_analysis(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """They enter the key per call: a settings re-read changes every weight at once, for no analysis."""
    weights, config = own(capacity={"gpu": 8})
    sdag = serialized(_pipeline())
    _weights(weights, sdag)
    epoch = DEFAULT_EPOCH - 86_400
    config.change(weights, objective=get_objective("throughput"), epoch=epoch)
    weight = weights.weight(strategy_ti(sdag, "train", RUN_ID))
    # throughput: s = 2, c = 1; W = 30 min: key = T + min(2 W, W + 8 h) - 1 h = T
    assert _key(weight, epoch) == TRIGGER
    assert weight == INT32_MAX - round(TRIGGER - epoch)
    assert weights.basis_builds == 1


def test_a_planner_settings_change_replans_dags_already_weighed(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """Planner settings are part of a basis's fingerprint: plan_policy = greedy must bring a greedy plan."""
    weights, config = own("packing", capacity={"gpu": 4})
    with DAG("replanned", schedule=None, default_args={"weight_rule": PACKING_WEIGHT_RULE}) as dag:
        for i in range(3):
            _bash(f"t{i}", f"{10 + i}m", gpus=1 + i, pool="gpu", pool_slots=1 + i)
    sdag = serialized(dag)
    _weights(weights, sdag)
    assert weights.background is not None and len(weights.background.known_plans()) == 1
    config.change(weights, plan_policy="greedy")
    _weights(weights, sdag)
    assert weights.background is not None and len(weights.background.known_plans()) == 2


def test_a_failed_analysis_is_remembered_per_object_and_retried_for_new_capacities(
    own: Callable[..., tuple[CrossDagWeights, Config]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One analysis per DAG object, not per task instance; new pool sizes may analyse, so they retry."""
    tries: list[dict[str, int]] = []

    def broken(dag: Any, capacity: dict[str, int], *args: Any, **kwargs: Any) -> Any:
        tries.append(dict(capacity))
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(weights_module, "build_basis", broken)
    weights, config = own()
    sdag = serialized(_pipeline("unanalysable"))
    with pytest.raises(OverflowError):
        weights.weight(strategy_ti(sdag, "prep", RUN_ID))
    with pytest.raises(RuntimeError, match=r"'unanalysable' failed: OverflowError: int too large"):
        weights.weight(strategy_ti(sdag, "train", RUN_ID))
    assert tries == [{}]
    config.change(weights, capacity={"gpu": 8})
    with pytest.raises(OverflowError):
        weights.weight(strategy_ti(sdag, "prep", RUN_ID))
    assert tries == [{}, {"gpu": 8}]


def test_a_failing_width_aware_analysis_keeps_the_critical_path(
    own: Callable[..., tuple[CrossDagWeights, Config]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Over PACKING_PLAN_MAX_TASKS (patched to 1), a width_aware failure is logged; no plan, no raise."""

    def broken(*args: Any) -> Any:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(weights_module, "PACKING_PLAN_MAX_TASKS", 1)
    monkeypatch.setattr(weights_module, "width_aware_weights", broken)
    packing, _ = own("packing", capacity={"gpu": 4})
    critical, _ = own("critical_path", capacity={"gpu": 4})
    sdag = serialized(_pipeline("wide_fails", rule=PACKING_WEIGHT_RULE))
    with caplog.at_level(logging.ERROR, logger=weights_module.__name__):
        assert _weights(packing, sdag) == _weights(critical, sdag)
    assert "width_aware weights of DAG 'wide_fails' failed" in caplog.text
    assert packing.background is not None and packing.background.known_plans() == {}
    assert packing.basis(sdag).planned  # not retried per call


def test_a_learned_graph_that_cannot_be_analysed_keeps_the_declared_weights(
    own: Callable[..., tuple[CrossDagWeights, Config]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The declared estimates stand, and the failing analysis is not tried again on every call."""
    reference, _ = own()
    sdag = serialized(_pipeline("relearned", train="2h"))
    declared = _weights(reference, sdag)
    weights, _ = own(learned=True)

    def history(dag: Any) -> tuple[TaskGraph, int]:  # train really takes 20 minutes
        graph, _ = build_task_graph(dag)
        return with_estimates(graph, {"train": DurationEstimate("train", 7200.0, 7200.0, learned=1200.0)}), 1

    weights.settings()
    assert weights.learned is not None and weights.learned.inline
    weights.learned = LearnedDurations(
        weights.learned.refresh_s, inline=True, read=history, prepare=weights._prepare_learned
    )
    tries: list[bool] = []
    build = weights_module.build_basis

    def refusing(dag: Any, capacity: Any, planner: Any, graph: Any = None, *args: Any) -> Any:
        tries.append(graph is not None)
        if graph is not None:
            raise ValueError("the learned graph has a cycle")
        return build(dag, capacity, planner, graph, *args)

    monkeypatch.setattr(weights_module, "build_basis", refusing)
    assert _weights(weights, sdag) == declared
    assert tries[0] is False and True in tries  # the declared analysis, then the learned one refused
    attempts = len(tries)
    assert _weights(weights, sdag) == declared and _weights(weights, sdag) == declared
    assert len(tries) == attempts
    learned = weights.learned.get(f"relearned:{weights.basis(sdag).version}", sdag)
    assert learned is not None and weights.basis(sdag).learned_at == learned.at


# -- one weight ---------------------------------------------------------------------------------------


def test_a_task_missing_from_the_graph_raises_for_the_strategy_to_fall_back(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """weight() raises on anything unexpected (the strategy turns it into the task's priority_weight)."""
    weights, _ = own()
    sdag = serialized(_pipeline("ghostly"))
    ghost = SimpleNamespace(task_id="ghost", get_dag=lambda: sdag, executor_config=None)
    ti = SimpleNamespace(task=ghost, task_id="ghost", dag_id="ghostly", run_id=RUN_ID, map_index=-1)
    with pytest.raises(KeyError, match=r"task 'ghost' is not in the graph of DAG 'ghostly'"):
        weights.weight(ti)


def test_the_weight_of_a_huge_run_is_clamped_to_int32_on_both_paths(
    own: Callable[..., tuple[CrossDagWeights, Config]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """24 tasks of 366 days x 8 slots on a 1-slot pool: W = 6e9 s, a key past the int32 range."""
    with DAG("huge_run", schedule=None, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}) as dag:
        for i in range(24):
            _bash(f"t{i}", "366d", gpus=8, pool="gpu", pool_slots=8)
    dag_policy(dag)
    sdag = serialized(dag)
    analysed, _ = own(capacity={"gpu": 1})
    assert set(_weights(analysed, sdag).values()) == {INT32_MIN}
    assert analysed.basis_builds == 1

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no analysis: the parse-time figures are used")

    monkeypatch.setattr(weights_module, "build_basis", broken)
    early, _ = own(capacity={"gpu": 1})
    assert set(_weights(early, serialized(dag)).values()) == {INT32_MIN}


def test_a_new_object_of_an_analysed_version_shares_its_basis(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """An api-server loads a new DAG object per request: one analysis per DAG version, not per object."""
    weights, _ = own(capacity={"gpu": 8})
    dag = _pipeline("shared")
    dag_policy(dag)
    first, second = serialized(dag), serialized(dag)
    assert _weights(weights, first) == _weights(weights, second)
    assert weights.basis_builds == 1 and weights.basis(second) is weights.basis(first)


def test_the_digest_is_computed_once_per_dag_version_id_else_once_per_object(
    own: Callable[..., tuple[CrossDagWeights, Config]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digest (0.02 s for 5,000 tasks) is checked once per version (ti.dag_version_id), never per task."""
    dag = _pipeline("digested")
    dag_policy(dag)
    reference, _ = own(capacity={"gpu": 8})
    expected = _weights(reference, serialized(dag))

    def broken(*args: Any, **kwargs: Any) -> Any:  # keeps every object on its parse-time figures
        raise RuntimeError("not analysed")

    monkeypatch.setattr(weights_module, "build_basis", broken)
    digest = parse_time.version_digest
    digests: list[str] = []
    monkeypatch.setattr(parse_time, "version_digest", lambda d: digests.append(d.dag_id) or digest(d))
    weights, _ = own(capacity={"gpu": 8})
    for _ in range(2):
        sdag = serialized(dag)
        assert _weights(weights, sdag, dag_version_id="v1") == expected
        assert _weights(weights, sdag, dag_version_id="v1") == expected
    assert digests == ["digested"]
    for _ in range(2):
        assert _weights(weights, serialized(dag)) == expected  # no version id: once per object
    assert digests == ["digested"] * 3


def test_figures_of_another_digest_are_said_once_per_dag_and_digest(
    own: Callable[..., tuple[CrossDagWeights, Config]], caplog: pytest.LogCaptureFixture
) -> None:
    """Every task of every object of a DAG with forged figures: one warning, naming both digests."""
    weights, _ = own()

    def forged(dag_id: str) -> Any:
        dag = _pipeline(dag_id)
        for task in dag.task_dict.values():
            task.executor_config = {"gpu_dag": {**task.executor_config["gpu_dag"], "derived": FORGED_DERIVED}}
        return dag

    with caplog.at_level(logging.WARNING, logger=weights_module.__name__):
        for dag_id in ("forged_once", "forged_once", "forged_twice"):
            _weights(weights, serialized(forged(dag_id)))
    said = [r.getMessage() for r in caplog.records if "not this DAG version's" in r.getMessage()]
    assert len(said) == 2, said
    assert "DAG 'forged_once'" in said[0] and "(digest 000000000000, the DAG's is" in said[0]
    assert "DAG 'forged_twice'" in said[1]


def test_figures_claiming_another_versions_digest_do_not_borrow_its_basis(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """A DAG parsed without the policy, carrying its previous version's figures, is weighed as itself."""
    weights, _ = own()
    previous = _pipeline("reversioned", train="1h")
    dag_policy(previous)
    old = serialized(previous)
    _weights(weights, old)
    copied = _pipeline("reversioned", train="5h")  # no policy: what the file wrote is kept
    for task_id, task in copied.task_dict.items():
        derived = old.task_dict[task_id].executor_config["gpu_dag"]["derived"]
        task.executor_config = {"gpu_dag": {**task.executor_config["gpu_dag"], "derived": dict(derived)}}
    clean, _ = own()
    expected = _weights(clean, serialized(_pipeline("reversioned", train="5h")))
    assert _weights(weights, serialized(copied)) == expected


# -- fallback_weight ----------------------------------------------------------------------------------


class _Raising:
    @property
    def priority_weight(self) -> int:
        raise RuntimeError("lazy attribute failed")


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        (SimpleNamespace(priority_weight=7), 7),
        (SimpleNamespace(priority_weight=-3), -3),
        (SimpleNamespace(priority_weight=12.6), 13),
        (SimpleNamespace(priority_weight=2**40), INT32_MAX),
        (SimpleNamespace(priority_weight=-(2**40)), INT32_MIN),
        (SimpleNamespace(priority_weight=float("inf")), INT32_MAX),
        (SimpleNamespace(priority_weight=None), 1),
        (SimpleNamespace(priority_weight=float("nan")), 1),
        (SimpleNamespace(priority_weight="high"), 1),
        (SimpleNamespace(), 1),
        (None, 1),
        (_Raising(), 1),
    ],
)
def test_the_fallback_is_the_tasks_own_priority_weight_clamped_and_never_raises(
    task: Any, expected: int
) -> None:
    weight = fallback_weight(task)
    assert weight == expected and type(weight) is int


def test_the_fallback_keeps_a_priority_weight_of_zero() -> None:
    """Airflow accepts priority_weight=0 and weighs such a task 0 with the absolute rule."""
    assert fallback_weight(SimpleNamespace(priority_weight=0)) == 0


# -- policy_text --------------------------------------------------------------------------------------


def _graph(rule: str | None) -> TaskGraph:
    """train: 1 h on 4 slots of ``gpu``; evaluate: 30 min on 1 slot of ``gpu_a100``."""
    graph = TaskGraph("told", priority_rule=rule)
    graph.add_task(TaskNode("train", 3600.0, GpuRequest(4), pool="gpu", pool_slots=4))
    graph.add_task(TaskNode("evaluate", 1800.0, GpuRequest(1), pool="gpu_a100", pool_slots=1))
    graph.add_edge("train", "evaluate")
    return graph


def test_policy_text_of_fair_names_its_descendants_term_and_ready_time_gate() -> None:
    config = Config(objective=get_objective("fair"), capacity={"gpu": 4, "gpu_a100": 2})
    assert policy_text(_graph("critical_path"), config) == (
        "Priority: critical path, objective fair for stages of 6h00m: key = trigger + min(5 x W, W + "
        "12h00m) - 0.5 x remaining - 6h00m x min(descendant lead, 24), W = 1h00m (this run's GPU work on "
        "gpu=4, gpu_a100=2); the earliest key starts first across all DAGs. Controller: reserves for a "
        "wide task 96h00m more urgent than other runs' work, or once it has waited 36h00m since it turned "
        "ready."
    )


def test_policy_text_without_capacities_says_runs_go_by_trigger_time() -> None:
    config = Config(objective=get_objective("throughput"))
    assert policy_text(_graph("packing"), config) == (
        "Priority: packing plan, objective throughput for stages of 6h00m: key = trigger + min(2 x W, W + "
        "8h00m) - 1 x remaining, W = 0s (this run's GPU work: 0 without [gpu_dag] pools or inventory, so "
        "runs go by trigger time); the earliest key starts first across all DAGs. Controller: reserves for "
        "every wide task."
    )


def test_policy_text_of_balanced_gates_on_the_key_overdue() -> None:
    text = policy_text(_graph("critical_path"), Config(capacity={"gpu": 2}))
    assert "objective balanced" in text and "W = 2h00m (this run's GPU work on gpu=2)" in text
    assert "descendant lead" not in text
    assert text.endswith(
        "Controller: reserves for a wide task 8h00m more urgent than other runs' work, or 12h00m overdue."
    )


def test_policy_text_of_a_stock_rule_says_its_weights_are_not_keys() -> None:
    assert policy_text(_graph(None), Config()) == (
        "DAG 'told' uses a stock weight rule: its weights are Airflow's, not cross-DAG keys "
        "(set weight_rule=CRITICAL_PATH_WEIGHT_RULE)."
    )


# -- more: settings changes, empty DAGs, the descendants term, concurrent use --------------------------


def _learned_history(train_s: float) -> Callable[[Any], tuple[TaskGraph, int]]:
    """A history in which ``train`` really takes ``train_s`` (declared 1 h by ``_pipeline``)."""

    def read(dag: Any) -> tuple[TaskGraph, int]:
        graph, _ = build_task_graph(dag)
        estimate = DurationEstimate("train", 3600.0, 3600.0, learned=train_s, runs=5)
        return with_estimates(graph, {"train": estimate}), 1

    return read


def _learning(weights: CrossDagWeights, train_s: float) -> None:
    """``weights`` reads its learned durations (inline) from a history where train takes ``train_s``."""
    weights.settings()
    assert weights.learned is not None and weights.learned.inline
    weights.learned = LearnedDurations(
        weights.learned.refresh_s,
        inline=True,
        read=_learned_history(train_s),
        prepare=weights._prepare_learned,
    )


def test_turning_learned_durations_off_returns_the_weights_to_the_declared_estimates(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """Settings are re-read every SETTINGS_TTL_S: ``learned_durations = false`` must bring the declared
    estimates back for DAG objects already weighed with learned ones."""
    reference, _ = own()
    sdag = serialized(_pipeline("unlearned"))
    declared = _weights(reference, sdag)
    weights, config = own(learned=True)
    _learning(weights, train_s=1200.0)
    learned = _weights(weights, sdag)
    assert _key(learned["train"]) - TRIGGER == -0.5 * 1200  # the learned 20 minutes
    config.change(weights, learned=False)
    assert _weights(weights, sdag) == declared


def test_a_capacity_change_keeps_following_the_learned_durations(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """New pool sizes re-analyse the DAG: from its learned graph, not from the declared estimates."""
    weights, config = own(learned=True, capacity={"gpu": 8})
    _learning(weights, train_s=1200.0)
    sdag = serialized(_pipeline("relearned_caps"))
    # W = 20 min x 4 slots / 8 = 10 min; due = T + min(4 W, W + 12 h) = T + 40 min
    assert _key(_weights(weights, sdag)["train"]) - TRIGGER == 2400 - 0.5 * 1200
    config.change(weights, capacity={"gpu": 4})
    # W = 20 min; due = T + 80 min
    assert _key(_weights(weights, sdag)["train"]) - TRIGGER == 4800 - 0.5 * 1200
    assert weights.basis(sdag).capacity == {"gpu": 4} and weights.basis(sdag).from_history


@pytest.mark.parametrize("rule", ["critical_path", "packing"])
def test_an_empty_dag_has_an_empty_basis_under_both_rules(
    own: Callable[..., tuple[CrossDagWeights, Config]], rule: str
) -> None:
    """A DAG without tasks (a file being written) is analysed, and planned, without an error."""
    weights, _ = own(rule, capacity={"gpu": 8})
    with DAG("empty", schedule=None) as dag:
        pass
    basis = weights.basis(serialized(dag))
    assert basis.shape.remaining == {} and basis.shape.work == 0.0
    assert basis.remaining("anything") is None and basis.descendant_lead("anything") == 0


def test_packing_without_pool_sizes_uses_the_critical_path_and_plans_nothing(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    packing, _ = own("packing")
    critical, _ = own("critical_path")
    sdag = serialized(_pipeline("unsized", rule=PACKING_WEIGHT_RULE))
    assert _weights(packing, sdag) == _weights(critical, sdag)
    assert packing.basis(sdag).planned  # not tried again per call
    assert packing.background is not None and packing.background.known_plans() == {}


def test_fair_weighs_the_descendants_lead(own: Callable[..., tuple[CrossDagWeights, Config]]) -> None:
    """fair: key = T + min(5 W, W + 12 h) - 0.5 x remaining - 6 h x min(lead, 24); prep leads train."""
    weights, _ = own(objective=get_objective("fair"))
    keys = {t: _key(w) - TRIGGER for t, w in _weights(weights, serialized(_pipeline("fairly"))).items()}
    assert keys == {"prep": -0.5 * (600 + 3600) - 6 * 3600 * 1, "train": -0.5 * 3600}


def test_a_mapped_index_is_weighed_like_its_task_when_the_dag_does_not_expand_it(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """An instance ``map_index`` 3 of an unmapped task node (or None) is weighed as the task itself."""
    weights, _ = own()
    sdag = serialized(_pipeline("indexed"))
    plain = _weights(weights, sdag)
    assert _weights(weights, sdag, map_index=3) == plain
    assert _weights(weights, sdag, map_index=None) == plain


def test_a_settings_read_that_fails_raises_for_the_strategy_to_fall_back(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """weight() may raise (the strategy catches it); the strategy's get_weight itself never raises."""
    from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy

    def broken() -> WeightSettings:
        raise ValueError("[gpu_dag] pools is not JSON")

    weights = CrossDagWeights("critical_path", broken)
    sdag = serialized(_pipeline("unconfigured"))
    with pytest.raises(ValueError, match="not JSON"):
        weights.weight(strategy_ti(sdag, "prep", RUN_ID))
    saved = CriticalPathPriorityStrategy._weights
    CriticalPathPriorityStrategy._weights = weights
    try:
        task = sdag.task_dict["prep"]
        assert CriticalPathPriorityStrategy().get_weight(strategy_ti(sdag, "prep", RUN_ID)) == (
            fallback_weight(task)
        )
    finally:
        CriticalPathPriorityStrategy._weights = saved
        weights.reset()


def test_concurrent_weights_of_one_dag_object_equal_the_serial_ones(
    own: Callable[..., tuple[CrossDagWeights, Config]],
) -> None:
    """An api-server weighs task instances from several threads at once: same weights as one by one."""
    import threading

    reference, _ = own(capacity={"gpu": 8})
    dag = _pipeline("threaded")
    dag_policy(dag)
    expected = _weights(reference, serialized(dag))
    weights, _ = own(capacity={"gpu": 8})
    sdag = serialized(dag)
    barrier = threading.Barrier(8)
    results: list[dict[str, int]] = []
    errors: list[BaseException] = []

    def weigh() -> None:
        try:
            barrier.wait(timeout=10)
            results.append(_weights(weights, sdag))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=weigh) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == [] and len(results) == 8
    assert all(result == expected for result in results)


def test_concurrent_settings_rereads_leave_no_unstopped_reader(
    own: Callable[..., tuple[CrossDagWeights, Config]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The learned-durations thread re-reads settings (``_prepare_learned``) while the scheduler's thread
    does: every LearnedDurations that a settings change replaces must be stopped, or its refresh thread
    re-reads every DAG's history for ever."""
    import threading

    made: list[LearnedDurations] = []
    both_read, both_made = threading.Barrier(2), threading.Barrier(2)

    class Recorded(LearnedDurations):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)
            with contextlib.suppress(threading.BrokenBarrierError):
                both_made.wait(timeout=1)

    weights, config = own(plan_in_background=True, learned=True)
    weights.settings()
    monkeypatch.setattr(weights_module, "LearnedDurations", Recorded)
    config.change(weights, learned_refresh=1200.0)
    read = weights._read_settings

    def reading_together() -> WeightSettings:
        with contextlib.suppress(threading.BrokenBarrierError):
            both_read.wait(timeout=1)
        return read()

    weights._read_settings = reading_together
    threads = [threading.Thread(target=weights.settings) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    live = [learned for learned in made if not learned._stopped.is_set()]
    assert live == [weights.learned], f"{len(live)} readers not stopped"
