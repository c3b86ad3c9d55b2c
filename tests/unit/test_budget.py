"""GPU-hour budget: usage from the lease ledger, caps, the gate and its trigger."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import TaskDeferred

from airflow_gpu_dag.authoring import budget_gate
from airflow_gpu_dag.budget import check as gate_module
from airflow_gpu_dag.budget import read_usage
from airflow_gpu_dag.core.budget import BudgetCap, BudgetUsage, evaluate
from airflow_gpu_dag.gpu.usage import UsageLedger, UsageRecord
from airflow_gpu_dag.operators.budget import BudgetGateOperator
from airflow_gpu_dag.triggers.budget import BudgetTrigger

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()


def _record(run_id: str, hours: float, devices: int = 1, pool: str = "gpu", end: float = NOW) -> UsageRecord:
    return UsageRecord(
        dag_id="train",
        run_id=run_id,
        task_id="fit",
        try_number=1,
        devices=tuple(range(devices)),
        start=end - hours * 3600 / devices,
        end=end,
        pool=pool,
    )


@pytest.fixture
def ledger(tmp_path) -> str:
    path = tmp_path / "usage.jsonl"
    book = UsageLedger(path)
    book.append(_record("r1", 2.0, devices=2))
    book.append(_record("r1", 1.0))
    book.append(_record("r2", 4.0, pool="gpu"))
    book.append(_record("r2", 8.0, pool="other"))
    book.append(_record("r3", 5.0, end=NOW - 86400))  # yesterday
    return str(path)


def test_read_usage_sums_by_run_and_pool_day(ledger: str) -> None:
    usage = read_usage(ledger, "train", "r1", "gpu", now=NOW)
    assert usage.run_gpu_hours == pytest.approx(3.0)
    assert usage.pool_day_gpu_hours == pytest.approx(7.0)  # r1 3h + r2 4h today; yesterday not counted
    assert usage.day == "2026-11-30"
    assert read_usage(None, "train", "r1", "gpu").run_gpu_seconds == 0.0
    assert read_usage(ledger + ".missing", "train", "r1", "gpu").pool_day_gpu_seconds == 0.0


def test_evaluate_caps() -> None:
    usage = BudgetUsage(run_gpu_seconds=3 * 3600, pool_day_gpu_seconds=7 * 3600, day="2026-11-30")
    assert evaluate(BudgetCap(gpu_hours_per_run=4), usage).allowed
    blocked = evaluate(BudgetCap(gpu_hours_per_run=3), usage)
    assert not blocked.allowed and "cap 3" in blocked.reason
    pool = evaluate(BudgetCap(gpu_hours_per_pool_day=7, pool="gpu"), usage)
    assert not pool.allowed and "pool 'gpu'" in pool.reason and "2026-11-30" in pool.reason
    assert not evaluate(BudgetCap(gpu_hours_per_run=0), BudgetUsage(0, 0, "d")).allowed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu_hours_per_run": -1}, "gpu_hours_per_run=-1 is negative"),
        ({"gpu_hours_per_run": "ten"}, "is not a number of GPU-hours"),
        ({"gpu_hours_per_pool_day": 5}, "needs the pool"),
        ({}, "needs gpu_hours_per_run= or gpu_hours_per_pool_day="),
    ],
)
def test_bad_budgets_fail_at_parse_time(kwargs: dict, message: str) -> None:
    with DAG("b", schedule=None), pytest.raises(ValueError, match=r"task .gate.: .*" + message):
        BudgetGateOperator(task_id="gate", **kwargs)


def test_budget_gate_wiring_and_default_pool() -> None:
    with DAG("bw", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        fit = EmptyOperator(task_id="fit", pool="gpu_a100")
        prep >> fit
        gate = budget_gate(fit, gpu_hours_per_pool_day=10)
    assert gate.task_id == "fit__budget" and gate.cap.pool == "gpu_a100"
    assert gate.pool == "default_pool"
    assert dag.get_task("prep").downstream_task_ids == {"fit__budget"}
    assert fit.upstream_task_ids == {"fit__budget"}
    assert dag.edge_info["fit__budget"]["fit"]["label"] == "budget"


def test_budget_gate_inside_a_task_group_is_named_once() -> None:
    from airflow.sdk import TaskGroup

    with DAG("bg", schedule=None) as dag, TaskGroup("pretrain"):
        fit = EmptyOperator(task_id="train", pool="gpu_a100")
        gate = budget_gate(fit, gpu_hours_per_pool_day=10)
    assert gate.task_id == "pretrain.train__budget"
    assert set(dag.task_dict) == {"pretrain.train", "pretrain.train__budget"}


def _context(dag_id: str = "train", run_id: str = "r1") -> dict:
    return {"dag": SimpleNamespace(dag_id=dag_id), "run_id": run_id}


def test_gate_passes_under_cap_and_defers_over_it(ledger: str, monkeypatch) -> None:
    monkeypatch.setattr(gate_module, "_variable_float", lambda key: None)
    with DAG("g", schedule=None):
        ok = BudgetGateOperator(task_id="ok", gpu_hours_per_run=1000, ledger=ledger)
        over = BudgetGateOperator(task_id="over", gpu_hours_per_run=3, ledger=ledger, poke_interval=5)
    assert ok.execute(_context())["allowed"]
    with pytest.raises(TaskDeferred) as deferred:
        over.execute(_context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, BudgetTrigger)
    assert trigger.serialize()[1]["cap"]["gpu_hours_per_run"] == 3
    assert over.execute_complete(_context(), {"reason": "raised"})["waited"]


def test_budget_trigger_fires_when_cap_is_raised(ledger: str, monkeypatch) -> None:
    calls = {"n": 0}

    def variable(key: str) -> float | None:
        calls["n"] += 1
        assert key == "gpu_dag_budget.run.train"
        return None if calls["n"] < 3 else 10.0  # the operator raises the cap on the 3rd check

    monkeypatch.setattr(gate_module, "_variable_float", variable)
    trigger = BudgetTrigger("train", "r1", BudgetCap(gpu_hours_per_run=3).to_dict(), ledger, 0.05)

    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    payload = asyncio.run(asyncio.wait_for(first(), 20))
    assert payload["status"] == "allowed" and calls["n"] == 3
    assert "within budget" in payload["reason"]
