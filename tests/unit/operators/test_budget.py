"""Tests of ``airflow_gpu_dag.operators.budget``."""

from __future__ import annotations

import math

import pytest
from airflow.sdk import DAG

from airflow_gpu_dag.core.model.budget import BudgetCap
from airflow_gpu_dag.operators.budget import BudgetGateOperator


@pytest.mark.usefixtures("_no_variables")
@pytest.mark.parametrize("claim", [math.nan, math.inf, -3600.0, True, "1h"])
def test_a_claim_that_is_not_a_number_of_seconds_is_refused_naming_the_task(claim: object) -> None:
    with DAG("d", schedule=None), pytest.raises(ValueError, match="DAG 'd', task 'gate': claim_gpu_seconds="):
        BudgetGateOperator(
            task_id="gate",
            gpu_hours_per_pool_day=10,
            pool_to_cap="gpu",
            claim_gpu_seconds=claim,  # type: ignore[arg-type]
        )


@pytest.mark.usefixtures("_no_variables")
def test_a_cap_too_large_for_a_float_is_refused_naming_the_task() -> None:
    with DAG("d", schedule=None), pytest.raises(ValueError, match="DAG 'd', task 'gate': gpu_hours_per_run="):
        BudgetGateOperator(task_id="gate", gpu_hours_per_run=10**400)  # before: OverflowError
    assert BudgetCap.checked("here", gpu_hours_per_run=10**300).gpu_hours_per_run == 1e300


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu_hours_per_run": -1}, "gpu_hours_per_run=-1 is negative"),
        ({"gpu_hours_per_run": 0}, "gpu_hours_per_run=0 is zero; a GPU-hour budget must be > 0.*Fix"),
        ({"gpu_hours_per_pool_day": -2.5, "pool_to_cap": "gpu"}, "gpu_hours_per_pool_day=-2.5 is negative"),
        (
            {"gpu_hours_per_run": 1, "claim_gpu_seconds": 7200},
            "expected to use 2 GPU-hours .*could never pass",
        ),
        ({"gpu_hours_per_run": "ten"}, "is not a number of GPU-hours"),
        ({"gpu_hours_per_pool_day": 5}, "needs the pool"),
        ({}, "needs gpu_hours_per_run= or gpu_hours_per_pool_day="),
    ],
)
def test_bad_budgets_fail_at_parse_time(kwargs: dict, message: str) -> None:
    with DAG("b", schedule=None), pytest.raises(ValueError, match=r"DAG 'b', task 'gate': .*" + message):
        BudgetGateOperator(task_id="gate", **kwargs)
