"""Tests of ``airflow_gpu_dag.plugins.plugin``."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("key", ["fastapi_apps", "external_views"])
def test_plugin_registers_the_page(key: str) -> None:
    from airflow_gpu_dag.plugins.plugin import GpuDagPlugin

    entries = getattr(GpuDagPlugin, key)
    assert len(entries) == 1
    if key == "fastapi_apps":
        assert entries[0]["url_prefix"] == "/gpu-dag"
    else:
        assert entries[0]["destination"] == "dag"
        assert entries[0]["href"] == "/gpu-dag/critical-path/{DAG_ID}"
