"""Audit of the pure core (second pass): defects found on edge cases, each reproduced here first."""

from __future__ import annotations

import math
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.resources import EstimateError, GpuRequest
from airflow_gpu_dag.core.simulation.simulator import simulate


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (the defect was an endless event loop)."""

    def expired(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("duration", [math.nan, math.inf, -5.0])
@pytest.mark.parametrize("policy", ["stock", "reservation"])
def test_simulate_refuses_a_duration_that_is_not_finite_seconds(duration: float, policy: str) -> None:
    # NaN made the event loop wait forever for a task that never ends; a negative duration gave a task
    # that ends before it starts, and inf an infinite makespan
    graph = TaskGraph("train")
    graph.add("prep", 5, 1).pool = "gpu"
    graph.add("fit", duration, 2).pool = "gpu"
    graph.add_edge("prep", "fit")
    with deadline(5), pytest.raises(ValueError, match=r"DAG 'train', task 'fit': duration .* not finite"):
        simulate(graph, {"gpu": 2}, policy, priority="critical_path")


@pytest.mark.parametrize("count", ["²", " ³ ", "¹"])
def test_gpu_count_of_superscript_digits_is_an_estimate_error(count: str) -> None:
    # str.isdigit() is True for superscripts, which int() refuses: a bare ValueError escaped the
    # adapters' `except EstimateError` (a DAG's graph could not be built) without naming the fix
    with pytest.raises(EstimateError, match=r"not ASCII .*; write '\d'"):  # the digit it stands for
        GpuRequest.parse(count)
    assert GpuRequest.parse(" 4 ").count == 4
