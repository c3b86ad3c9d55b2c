"""The wait bound of the cross-DAG policy (docs/priority.md, "Nothing waits without bound"), checked on
random mixes in the simulator: every task of the GPU pool starts within

    max(0, K - ready) + overdue + (|A| + 1) x (D + 2Δ)

(and at Δ = 0 within the tighter ``max(0, K + overdue - ready) + (|A| + 1) x D``), whatever the
objective, the gate's constants and the controller interval. Before starving tasks stopped the backfill
of later work, slots freed between two ticks broke it (mixes 11 and 12 below: 1.19x and 1.40x)."""

from __future__ import annotations

import random

import pytest

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.policy.objective import ReservationGate, get_objective, key_of_weight, run_weights
from airflow_gpu_dag.core.simulation.simulator import simulate
from tests.unit.graphs import gpu_graph

EPOCH = -10_000_000.0


def _mix(rng: random.Random, capacity: int) -> tuple[list[TaskGraph], list[float]]:
    """4-30 runs of 1-3 chained tasks, 1 GPU to the whole pool (or CPU), 3 s to about an hour each,
    triggered over the first 100 minutes."""
    graphs, triggers = [], []
    for r in range(rng.randint(4, 30)):
        n = rng.randint(1, 3)
        tasks = {}
        for i in range(n):
            gpus = rng.choice([0, 1, 1, 1, 2, capacity, rng.randint(1, capacity)])
            tasks[f"t{i}"] = (float(round(10 ** rng.uniform(0.5, 3.5))), gpus)
        graphs.append(gpu_graph(tasks, [(f"t{i}", f"t{i + 1}") for i in range(n - 1)], dag_id=f"r{r}"))
        triggers.append(float(round(rng.uniform(0, 6000))))
    return graphs, triggers


@pytest.mark.parametrize("seed", range(24))
def test_every_gpu_task_starts_within_the_wait_bound(seed: int) -> None:
    rng = random.Random(seed)
    capacity = rng.choice([2, 4, 8])
    caps = {"gpu": capacity}
    objective = get_objective(rng.choice(["throughput", "balanced", "latency"]))
    graphs, triggers = _mix(rng, capacity)
    gap = 0.0 if objective.name == "throughput" else rng.choice([300.0, 600.0, 3600.0])
    overdue = rng.choice([120.0, 600.0, 1800.0])
    interval = rng.choice([0.0, 10.0, 30.0, 60.0, 120.0])
    gate = ReservationGate(gap, overdue, EPOCH)
    result = simulate(
        graphs,
        caps,
        "reservation",
        interval,
        run_priority=lambda g, t: run_weights(g, t, caps, objective, EPOCH),
        gate=gate,
        triggers=triggers,
        verify_controller=True,
    )
    pool = [s for s in result.schedule if s.pool == "gpu"]
    longest = max((s.end - s.start for s in pool), default=0.0)
    for task in pool:
        key = key_of_weight(task.priority, EPOCH)
        assert key is not None
        ahead = sum(1 for other in pool if other.priority >= task.priority) - 1  # earlier keys (and ties)
        bound = gate.wait_bound(key, task.ready, ahead, longest, interval)
        assert task.wait <= bound, (
            f"{task.task_id} waited {task.wait:.0f}s > bound {bound:.0f}s "
            f"(|A|={ahead}, D={longest:.0f}s, Δ={interval:g}s, C={capacity}, {objective.name})"
        )
