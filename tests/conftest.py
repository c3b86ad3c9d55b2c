"""Shared test set-up: every test session gets its own throwaway AIRFLOW_HOME, so importing Airflow never
touches ~/airflow (the real-Airflow harness makes its own home per boot), and ``benchmarks/`` is on
``sys.path`` so tests import the benchmark workloads as the benchmark scripts do (``import workloads``)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

_HOME = tempfile.mkdtemp(prefix="gpu-dag-tests-home-")
os.environ.setdefault("AIRFLOW_HOME", _HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
