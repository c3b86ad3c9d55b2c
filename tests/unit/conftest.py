"""Shared fakes and helpers of the tests under ``tests/unit/``."""

from __future__ import annotations

import pytest

from airflow_gpu_dag import settings
from airflow_gpu_dag.log_once import LogOnce


@pytest.fixture
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (
        "PLAN_POLICY",
        "PLAN_BACKFILL",
        "PLAN_IN_BACKGROUND",
        "LEARNED_DURATIONS",
        "LEARNED_REFRESH",
        "BUDGET_CLAIM_TTL",
        "KEY_EPOCH",
        "PLAN_SEARCH_BUDGET",
        "PLANNER_NICE",
        "LEARNED_WINDOW",
        "LEARNED_QUANTILE",
        "LEARNED_MIN_RUNS",
        "LEARNED_FLAG_FACTOR",
        "TOO_LARGE_ACTION",
        "TOO_LARGE_INTERVALS",
        "LEASE_TTL",
        "LEASE_HEARTBEAT",
    ):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{key}", raising=False)
    monkeypatch.setattr(settings, "_warned", LogOnce(settings.log))
    settings.conf_get("objective", None)  # Airflow configures logging once, on first use: before caplog


def _set(monkeypatch: pytest.MonkeyPatch, option: str, value: str) -> None:
    monkeypatch.setenv(f"AIRFLOW__GPU_DAG__{option.upper()}", value)


def _problem(option: str) -> str | None:
    return dict(settings.config_problems()).get(option)
