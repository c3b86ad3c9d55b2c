"""GPU-hour budgets at run time: the usage ledger and the cap check with run-time overrides.

The caps themselves are pure (:mod:`airflow_gpu_dag.core.model.budget`); the gate is
:class:`airflow_gpu_dag.operators.budget.BudgetGateOperator`, added by
:func:`airflow_gpu_dag.authoring.budget_gate`.
"""

from __future__ import annotations

from airflow_gpu_dag.budget.check import check_budget, effective_cap, pool_variable, run_variable
from airflow_gpu_dag.budget.ledger import read_usage, usage_ledger_path

__all__ = [
    "check_budget",
    "effective_cap",
    "pool_variable",
    "read_usage",
    "run_variable",
    "usage_ledger_path",
]
