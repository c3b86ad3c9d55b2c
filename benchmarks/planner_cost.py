"""Planning time of the ``packing`` rule, without and with the planner's local search, side by side.

For WfCommons instances of 41, 405, 738 and 1,121 tasks (``../shared/workloads``), plans the weights for
the reservation controller at ``--gpus`` GPUs with ``search_budget=0`` (the default) and with
``search_budget=SEARCH_BUDGET``, each from a cold planner cache, and prints the seconds and the predicted
makespans. (Stock Airflow plans nothing: its ``downstream`` rule costs are in ``priority_overhead.py``.)

With ``--learned`` it times instead what durations learned from past runs cost: the instance's durations
learned from five runs (declared estimates off by +/- 30 %, as in ``learned_estimates.py``), planned
unhedged (``estimate_error=0``), hedged over four worlds without the last choice on fresh worlds
(``final_worlds=0``), and as shipped.

    .venv/bin/python benchmarks/planner_cost.py [--gpus 16] [--learned]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from learned_estimates import history_seed, learned_graph  # type: ignore[import-not-found]
from makespan import DEFAULT_WORKLOADS  # type: ignore[import-not-found]
from workloads import GPU_POOL, Workload, load_workloads

from airflow_gpu_dag.core.planning import planner as priority
from airflow_gpu_dag.core.planning.hedging import perturbed

SIZES = (41, 405, 738, 1121)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=16, help="GPU pool capacity")
    parser.add_argument("--learned", action="store_true", help="time the hedging of learned durations")
    args = parser.parse_args(argv)
    workloads = load_workloads(DEFAULT_WORKLOADS)
    if args.learned:
        return learned_cost(workloads, args.gpus)
    print("| instance | tasks | steps 1-4 (s) | with the local search (s) | makespan without / with |")
    print("|---|---|---|---|---|")
    for size in SIZES:
        workload = next((w for w in workloads if len(w.graph) == size), None)
        if workload is None:
            continue
        seconds, makespans = [], []
        for budget in (0, priority.SEARCH_BUDGET):
            priority._STAGE_CACHE.clear()  # cold: steps 1-2 are cached per graph object
            started = time.perf_counter()
            plan = priority.packing_weights_plan(
                workload.graph, {GPU_POOL: args.gpus}, "reservation", search_budget=budget
            )
            seconds.append(time.perf_counter() - started)
            makespans.append(plan.makespan)
        print(
            f"| {workload.name.rsplit('/', 1)[-1]} | {size} | {seconds[0]:.2f} | {seconds[1]:.2f} "
            f"| {makespans[0]:.1f} / {makespans[1]:.1f} |"
        )
    return 0


def learned_cost(workloads: Sequence[Workload], gpus: int) -> int:
    """Seconds to plan learned durations: unhedged, hedged without the last choice, shipped."""
    variants: tuple[tuple[str, dict[str, Any]], ...] = (
        ("unhedged", {"estimate_error": 0.0}),
        ("hedged, no last choice", {"final_worlds": 0}),
        ("shipped", {}),
    )
    print(f"| instance | tasks | {' | '.join(f'{name} (s)' for name, _ in variants)} |")
    print("|---|---|" + "---|" * len(variants))
    for size in SIZES:
        workload = next((w for w in workloads if len(w.graph) == size), None)
        if workload is None:
            continue
        declared = perturbed(workload.graph, 0.3, f"declared:{workload.name}")
        learned = learned_graph(workload.graph, declared, 5, 0.1, history_seed(workload.name))
        seconds = []
        for _name, options in variants:
            priority._STAGE_CACHE.clear()  # cold: steps 1-2 are cached per graph object
            started = time.perf_counter()
            priority.packing_weights_plan(learned, {GPU_POOL: gpus}, "reservation", **options)
            seconds.append(time.perf_counter() - started)
        cells = " | ".join(f"{s:.2f}" for s in seconds)
        print(f"| {workload.name.rsplit('/', 1)[-1]} | {size} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
