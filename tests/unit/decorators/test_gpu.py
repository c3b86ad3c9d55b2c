"""Tests of ``airflow_gpu_dag.decorators.gpu``."""

from __future__ import annotations

import pytest

from airflow_gpu_dag.decorators.gpu import gpu_task


# -- decorator ------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("static_host")
def test_task_gpu_is_registered_with_the_task_sdk() -> None:
    from airflow.sdk import task
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    assert ProvidersManagerTaskRuntime().taskflow_decorators["gpu"] is gpu_task
    assert task.gpu is gpu_task
