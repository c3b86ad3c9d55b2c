"""GPU-hour budget caps per DAG run and per pool per day; a gate defers the next GPU task when
a cap is reached (holding no worker and no GPU) until the cap is raised or the day resets."""

from __future__ import annotations

from airflow_gpu_dag.budget.gate import BudgetCap, BudgetDecision, BudgetGateOperator, budget_gate, evaluate
from airflow_gpu_dag.budget.ledger import BudgetUsage, read_usage, usage_ledger_path

__all__ = [
    "BudgetCap",
    "BudgetDecision",
    "BudgetGateOperator",
    "BudgetUsage",
    "budget_gate",
    "evaluate",
    "read_usage",
    "usage_ledger_path",
]
