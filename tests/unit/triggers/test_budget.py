"""Tests of ``airflow_gpu_dag.triggers.budget``."""

from __future__ import annotations

import asyncio

import pytest

from airflow_gpu_dag.budget import check as gate_module
from airflow_gpu_dag.core.model.budget import BudgetCap
from airflow_gpu_dag.triggers.budget import BudgetTrigger

#: Every test takes the deferring path (a deployment with a triggerer).
pytestmark = pytest.mark.usefixtures("_deferring")


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
