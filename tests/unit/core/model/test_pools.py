"""Tests of ``airflow_gpu_dag.core.model.pools``."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.core.model.pools import MAX_POOL_NAME_LENGTH


@pytest.fixture(autouse=True)
def _no_configured_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    for option in ("POOLS", "MAX_GPUS_PER_HOST", "INVENTORY", "INVENTORY_SOURCE"):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{option}", raising=False)


# -- pool names ----------------------------------------------------------------------------------
def test_our_pool_name_bound_is_airflows_column_length() -> None:
    from airflow.models.pool import Pool
    from airflow.models.taskinstance import TaskInstance

    assert Pool.__table__.c.pool.type.length == MAX_POOL_NAME_LENGTH
    assert TaskInstance.__table__.c.pool.type.length == MAX_POOL_NAME_LENGTH
