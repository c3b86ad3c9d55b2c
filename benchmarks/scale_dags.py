"""Random DAGs the size of a real platform's, for the planner's scale benchmarks (issue #44).

``planner_cost.py --scale`` and ``plan_speed.py --scale`` time the packing plan, the simulator and the
CLI on them; ``tests/unit/core/simulation/test_simulator.py`` runs small ones. Each task needs 1-8 GPUs
(uniform) of one 8-GPU pool and runs 10 min-2 h (uniform whole seconds); each depends on 0, 1 or 2
(uniform) of the 30 tasks before it, so about a third of the tasks are ready at the start and the
waiting queue is long. Deterministic from (tasks, seed).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.resources import GpuRequest

__all__ = ["GPU_POOL", "SIZES", "dag_file", "fitted_exponent", "nlogn_exponent", "random_graph"]

GPU_POOL = "gpu"
#: The sizes the scale benchmarks run: 1,000 to 8,000 tasks.
SIZES = (1000, 2000, 4000, 8000)


def _tasks(tasks: int, seed: int) -> Iterator[tuple[int, int, int, list[int]]]:
    """``(index, GPUs, seconds, upstream indexes)`` of every task."""
    rng = random.Random(f"scale:{tasks}:{seed}")
    for i in range(tasks):
        gpus = rng.randint(1, 8)
        seconds = rng.randint(600, 7200)
        ups = rng.sample(range(max(0, i - 30), i), min(i, rng.randint(0, 2))) if i else []
        yield i, gpus, seconds, ups


def random_graph(tasks: int, seed: int = 0, pool: str = GPU_POOL) -> TaskGraph:
    """A random DAG of ``tasks`` tasks ``t0 .. t<tasks-1>`` (see the module docstring)."""
    graph = TaskGraph(f"scale_{tasks}_{seed}")
    edges: list[tuple[str, str]] = []
    for i, gpus, seconds, ups in _tasks(tasks, seed):
        node = graph.add(f"t{i}", float(seconds), 0)
        node.gpu = GpuRequest(gpus)
        node.pool = pool
        node.pool_slots = gpus
        edges.extend((f"t{up}", f"t{i}") for up in ups)
    for up, down in edges:
        graph.add_edge(up, down)
    return graph


def dag_file(folder: Path, tasks: int, mapped: int, seed: int = 0, pool: str = "gpu_default") -> str:
    """Write the DAG of :func:`random_graph` as an Airflow DAG file (``EmptyOperator`` tasks with GPU
    hints), plus one mapped task ``train`` of ``mapped`` instances (2 GPUs, 30 min, over a literal list)
    after ``t0`` and before the last task; returns its dag_id."""
    dag_id = f"scale_{tasks}_{mapped}"
    lines = [
        "import pendulum",
        "from airflow.providers.standard.operators.empty import EmptyOperator",
        "from airflow.sdk import DAG, task",
        "from airflow_gpu_dag import gpu_hints",
        f"with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz='UTC')):",
        "    t = {}",
    ]
    for i, gpus, seconds, ups in _tasks(tasks, seed):
        lines.append(
            f"    t[{i}] = EmptyOperator(task_id='t{i}', pool={pool!r}, pool_slots={gpus}, "
            f"executor_config=gpu_hints(duration={seconds}, gpus={gpus}))"
        )
        lines.extend(f"    t[{up}] >> t[{i}]" for up in ups)
    if mapped:
        lines += [
            f"    @task(pool={pool!r}, pool_slots=2, executor_config=gpu_hints(duration='30m', gpus=2))",
            "    def train(shard): return shard",
            f"    trained = train.expand(shard={list(range(mapped))!r})",
            f"    t[0] >> trained >> t[{tasks - 1}]",
        ]
    (folder / f"{dag_id}.py").write_text("\n".join(lines) + "\n")
    return dag_id


def fitted_exponent(sizes: Sequence[int], seconds: Sequence[float]) -> float:
    """``b`` of the least-squares fit ``seconds = a * sizes ** b`` (log-log); NaN with fewer than two
    sizes or a time that is not positive."""
    points = [(math.log(n), math.log(s)) for n, s in zip(sizes, seconds, strict=True) if s > 0]
    if len(points) < 2 or len(points) < len(sizes):
        return math.nan
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else math.nan


def nlogn_exponent(sizes: Sequence[int]) -> float:
    """The exponent :func:`fitted_exponent` finds for a cost of exactly ``n log n`` over ``sizes``: the
    bound the scale benchmarks compare with (1.13 from 1,000 to 8,000 tasks)."""
    return fitted_exponent(sizes, [n * math.log(n) for n in sizes])
