"""Shared test set-up: every test session gets its own throwaway AIRFLOW_HOME, so importing Airflow never
touches ~/airflow (the real-Airflow harness makes its own home per boot)."""

from __future__ import annotations

import os
import tempfile

_HOME = tempfile.mkdtemp(prefix="gpu-dag-tests-home-")
os.environ.setdefault("AIRFLOW_HOME", _HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
