"""Shared test set-up: every test process gets its own throwaway AIRFLOW_HOME, so importing Airflow never
touches ~/airflow (the real-Airflow harness makes its own home per boot), and ``benchmarks/`` is on
``sys.path`` so tests import the benchmark workloads as the benchmark scripts do (``import workloads``).

``scripts/test.sh`` runs the suite on two pytest-xdist workers, one test file per work unit
(``--dist loadfile``): the modules that boot a real Airflow spend most of their time waiting on the
scheduler, so two of them, or one and the unit tests, share the machine well. The files that boot
Airflow are handed out first (see ``pytest_collection_modifyitems``), so the short unit-test files
fill the gaps at the end instead of a long real-Airflow module starting last.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

# An AIRFLOW_HOME set by the user is kept. The one made here is made again in each xdist worker (the
# workers inherit the controller's environment), so two workers never share an Airflow home.
_OURS = "GPU_DAG_TESTS_HOME"
if "AIRFLOW_HOME" not in os.environ or os.environ.get("AIRFLOW_HOME") == os.environ.get(_OURS):
    os.environ["AIRFLOW_HOME"] = os.environ[_OURS] = tempfile.mkdtemp(prefix="gpu-dag-tests-home-")
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that boot a real Airflow first (a stable sort: file order and test order are kept)."""
    items.sort(key=lambda item: item.get_closest_marker("airflow_real") is None)
