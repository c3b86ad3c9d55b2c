"""Tests of ``airflow_gpu_dag.gpu.lease_settings``."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_gpu_dag.budget import check as gate_module
from airflow_gpu_dag.gpu.lease import LeaseSettings

#: Every test takes the deferring path (a deployment with a triggerer).
pytestmark = pytest.mark.usefixtures("_deferring")


@pytest.fixture(autouse=True)
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_module, "_variable_float", lambda key: None)


def test_without_the_option_leases_stay_in_the_lease_directory(tmp_path: Path) -> None:
    settings = LeaseSettings(lease_dir=tmp_path)
    assert settings.usage_file == tmp_path / "usage.jsonl"
