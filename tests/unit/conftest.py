"""Shared fakes and helpers of the tests under ``tests/unit/``."""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_gpu_dag import settings
from airflow_gpu_dag.log_once import LogOnce
from tests.unit.usage_ledgers import sample_ledger

# The fixtures that need Airflow (the priority strategies, the budget check) import it when they run,
# not here: collecting a test of the pure core stays free of Airflow's import (about 2.5 s).


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


@pytest.fixture
def _fresh_strategies() -> Iterator[None]:
    """Both priority strategies start and end with no cached weights or bases and no recorded fallbacks."""
    from tests.unit.airflow_dags import reset_strategies

    reset_strategies()
    yield
    reset_strategies()


@pytest.fixture
def _fresh_weights(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts with no cached settings or bases, no pool sizes and plans made inline (learned
    durations off: the weights come from the hints alone)."""
    from tests.unit.airflow_dags import STRATEGIES

    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "false")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "false")
    for cls in STRATEGIES:
        cls._weights.reset()
    yield
    for cls in STRATEGIES:
        cls._weights.reset()


@pytest.fixture
def _fresh_task_contract(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The task-contract tests' settings (``tests/unit/task_contracts.py``): a ``gpu_default`` pool of 8,
    learned durations off, plans made inline, and both strategies reset before and after."""
    monkeypatch.setenv("AIRFLOW__GPU_DAG__POOLS", '{"gpu_default": 8}')
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "false")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "false")
    from tests.unit.airflow_dags import reset_strategies

    reset_strategies()
    yield
    reset_strategies()


@pytest.fixture
def _no_configured_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``[gpu_dag] pools`` or ``max_gpus_per_host`` from the environment, and wide lines (200
    columns), so what a command prints depends on the test alone."""
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def _no_configured_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """No pool sizes, host size or GPU inventory from the environment: the checks against configured
    limits find nothing to check against."""
    for option in ("POOLS", "MAX_GPUS_PER_HOST", "INVENTORY", "INVENTORY_SOURCE"):
        monkeypatch.delenv(f"AIRFLOW__GPU_DAG__{option}", raising=False)


@pytest.fixture
def static_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 4x A100 static inventory (no pools or host size configured) and a private lease directory,
    whose path it returns: what the GPU operators lease from."""
    lease_dir = tmp_path / "leases"
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY_SOURCE", "static")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__INVENTORY", "4xa100:80GiB")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_DIR", str(lease_dir))
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEASE_POLL_INTERVAL", "0.05")
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.delenv("AIRFLOW__GPU_DAG__MAX_GPUS_PER_HOST", raising=False)
    return lease_dir


@pytest.fixture
def _deferring(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests exercise the deferring path: a deployment with a triggerer, which turns on
    ``[operators] default_deferrable`` (without it the sensors and gates wait in a worker)."""
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")


@pytest.fixture
def _no_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget check reads no Airflow Variable (no cap is set at run time)."""
    from airflow_gpu_dag.budget import check as budget_check

    monkeypatch.setattr(budget_check, "_variable_float", lambda key: None)


@pytest.fixture
def ledger(tmp_path: Path) -> str:
    """The path of the sample usage ledger (``tests/unit/usage_ledgers.py``) written in ``tmp_path``."""
    return sample_ledger(tmp_path / "usage.jsonl")


@pytest.fixture
def mem_dir() -> str:
    """A fresh directory in fsspec's in-memory object store."""
    return f"memory://lake-{uuid.uuid4().hex[:8]}/clean"


@pytest.fixture
def ckpt_dir() -> str:
    """A fresh checkpoint directory in fsspec's in-memory object store."""
    return f"memory://ckpt-{uuid.uuid4().hex[:8]}/run"


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Real processes standing for CUDA loads (ours once registered with a lease, else foreign), killed
    at the end of the test."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(10)


def record_analysis_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the name of the thread each DAG analysis (``build_basis``) runs in, in order: whether
    the scheduler loop's own thread ever analyses a DAG."""
    from airflow_gpu_dag.priority import weights as weights_module

    analysed_in: list[str] = []
    build = weights_module.build_basis

    def recording(*args: Any, **kwargs: Any) -> Any:
        analysed_in.append(threading.current_thread().name)
        return build(*args, **kwargs)

    monkeypatch.setattr(weights_module, "build_basis", recording)
    return analysed_in


def _set(monkeypatch: pytest.MonkeyPatch, option: str, value: str) -> None:
    monkeypatch.setenv(f"AIRFLOW__GPU_DAG__{option.upper()}", value)


def _problem(option: str) -> str | None:
    return dict(settings.config_problems()).get(option)
