"""Tests of ``airflow_gpu_dag.priority.weights``."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.airflow_dags import (
    CRITICAL,
    GOOD_HINTS,
    POOL_SETTINGS,
    airflow_dags,
    check_weights,
    serialized,
    under,
)

#: Every test starts and ends with fresh strategy caches.
pytestmark = pytest.mark.usefixtures("_fresh_strategies")


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
