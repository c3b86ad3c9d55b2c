"""Tests of ``airflow_gpu_dag.gpu.lease_settings``."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_gpu_dag.gpu.lease import LeaseSettings

#: Every test takes the deferring path (a deployment with a triggerer) and reads no budget Variable.
pytestmark = pytest.mark.usefixtures("_deferring", "_no_variables")


def test_without_the_option_leases_stay_in_the_lease_directory(tmp_path: Path) -> None:
    settings = LeaseSettings(lease_dir=tmp_path)
    assert settings.usage_file == tmp_path / "usage.jsonl"
