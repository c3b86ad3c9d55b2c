"""Cost of priority weights at DAG-run creation: ours vs Airflow's stock ``downstream`` rule.

For layered random DAGs of 1,000 and 10,000 tasks, serialize the DAG the way the dag-processor does,
deserialize it the way the scheduler does (a fresh object, so our per-DAG cache starts cold), then
build the task-instance rows exactly as the scheduler does when it creates a DAG run
(``TaskInstance.insert_mapping`` for every task, which calls the weight rule's ``get_weight``).
Both rules run in the same process, on the same DAG shape, one after the other.

    .venv/bin/python benchmarks/priority_overhead.py [--sizes 1000 10000] [--repeat 3]

Prints, for each rule, the best of ``--repeat`` runs: the time to create all rows (mostly Airflow's own
TaskInstance construction, the same for both rules) and the time spent inside ``get_weight`` (the
rule's own cost; ours includes the one CPM analysis of the DAG), and the ratio stock / ours.
"""

from __future__ import annotations

import argparse
import atexit
import os
import random
import shutil
import tempfile
import time
from types import SimpleNamespace
from typing import Any

if "AIRFLOW_HOME" not in os.environ:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="gpu-dag-bench-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from airflow.models.taskinstance import TaskInstance
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.serialization.serialized_objects import DagSerialization
from airflow.task.priority_strategy import _DownstreamPriorityWeightStrategy

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy


def layered_dag(
    dag_id: str, n_tasks: int, weight_rule: str, seed: int = 7, width: int = 50
) -> dict[str, Any]:
    """A serialized DAG of ``n_tasks`` in layers of ``width``; each task depends on 1-3 tasks of the
    previous layer. Returns the serialized dict (what the scheduler loads)."""
    rng = random.Random(seed)
    with DAG(dag_id, default_args={"weight_rule": weight_rule}, schedule=None) as dag:
        layers: list[list[EmptyOperator]] = []
        made = 0
        while made < n_tasks:
            layer = []
            for _ in range(min(width, n_tasks - made)):
                config = gpu_hints(duration=rng.randint(60, 7200), gpus=rng.choice([1, 1, 1, 2, 4, 8]))
                layer.append(EmptyOperator(task_id=f"t{made}", executor_config=config))
                made += 1
            if layers:
                for task in layer:
                    for parent in rng.sample(layers[-1], k=min(len(layers[-1]), rng.randint(1, 3))):
                        parent >> task
            layers.append(layer)
    return DagSerialization.to_dict(dag)


class _Timed:
    """Accumulates the time spent inside a strategy class's ``get_weight``."""

    def __init__(self, cls: type) -> None:
        self.cls, self.seconds, self.calls = cls, 0.0, 0
        self._orig = cls.get_weight

    def __enter__(self) -> _Timed:
        timed = self

        def get_weight(strategy: Any, ti: Any) -> int:
            start = time.perf_counter()
            try:
                return timed._orig(strategy, ti)
            finally:
                timed.seconds += time.perf_counter() - start
                timed.calls += 1

        self.cls.get_weight = get_weight  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self.cls.get_weight = self._orig  # type: ignore[method-assign]


def create_weights(serialized: dict[str, Any], strategy_cls: type) -> tuple[float, float, list[int]]:
    """Deserialize (a new object: our per-DAG cache starts cold) and build every task-instance row as
    the scheduler does at run creation. Returns (total seconds, seconds inside get_weight, weights)."""
    dag = DagSerialization.from_dict(serialized)
    dag_run = SimpleNamespace(context_carrier={})
    with _Timed(strategy_cls) as timed:
        start = time.perf_counter()
        rows = [
            TaskInstance.insert_mapping("bench", task, -1, dag_version_id=None, dag_run=dag_run)  # type: ignore[arg-type]
            for task in dag.task_dict.values()
        ]
        total = time.perf_counter() - start
    return total, timed.seconds, [row["priority_weight"] for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("Seconds to create all task-instance rows of one DAG run (best of --repeat), and of that the")
    print("time spent inside the weight rule's get_weight (first call of ours includes the CPM analysis).")
    header = (
        f"{'tasks':>7} | {'stock rows':>10} {'stock rule':>10} | {'ours rows':>10} {'ours rule':>10} | "
        f"{'rule stock/ours':>15}"
    )
    print(header)
    print("-" * len(header))
    for size in args.sizes:
        stock_dag = layered_dag(f"stock_{size}", size, "downstream")
        ours_dag = layered_dag(f"ours_{size}", size, CRITICAL_PATH_WEIGHT_RULE)
        stock_runs = [
            create_weights(stock_dag, _DownstreamPriorityWeightStrategy) for _ in range(args.repeat)
        ]
        ours_runs = [create_weights(ours_dag, CriticalPathPriorityStrategy) for _ in range(args.repeat)]
        weights = ours_runs[-1][2]
        assert len(weights) == size and max(weights) > 0
        s_total, s_rule = min(r[0] for r in stock_runs), min(r[1] for r in stock_runs)
        o_total, o_rule = min(r[0] for r in ours_runs), min(r[1] for r in ours_runs)
        print(
            f"{size:>7} | {s_total:>10.3f} {s_rule:>10.3f} | {o_total:>10.3f} {o_rule:>10.3f} | "
            f"{s_rule / o_rule:>14.1f}x"
        )


if __name__ == "__main__":
    main()
