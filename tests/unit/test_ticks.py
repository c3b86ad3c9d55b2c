"""The simulated controller's clock: the next tick is always after now.

Before, ``(floor(now / interval) + 1) * interval`` could equal ``now`` (``now = 3 * 0.7``, where
``now / 0.7`` rounds down to 2.999...), and ``simulate`` looped forever at that instant.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Iterator

import pytest

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.simulation.simulator import ControllerOptions, next_multiple, simulate


@pytest.mark.parametrize("interval", [0.1, 0.3, 0.7, 1.1, 1.3, 2.5, 59.9, 60.0])
def test_the_next_tick_is_the_first_grid_point_after_now(interval: float) -> None:
    for k in range(0, 2000):
        for now in (k * interval, math.nextafter(k * interval, math.inf), (k + 0.5) * interval):
            tick = next_multiple(now, interval)
            assert tick > now, (interval, k, now)
            assert tick - interval <= now + 1e-9 * max(1.0, now), (interval, k, now)
    assert ControllerOptions(0.0, True, True, False, False).next_decision(5.0) is None
    assert ControllerOptions(0.7, True, True, False, False).next_decision(3 * 0.7) > 3 * 0.7


@pytest.fixture
def deadline() -> Iterator[None]:
    def stop(*_: object) -> None:
        raise TimeoutError("simulate() did not return: the controller clock stood still")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(30)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("interval", [0.1, 0.3, 0.7, 1.1, 59.9])
def test_simulate_ends_with_a_fractional_controller_interval(interval: float, deadline: None) -> None:
    graph = TaskGraph("fractional")
    graph.add("long", 10.0, 1, pool="gpu")  # holds 1 of 2 GPUs
    graph.add("wide", 1.0, 2, pool="gpu")  # waits for both, so the controller keeps ticking
    result = simulate(
        graph, {"gpu": 2}, "reservation", controller_interval=interval, priority="critical_path"
    )
    assert result.makespan >= 11.0
    assert {t.task_id for t in result.schedule} == {"long", "wide"}
