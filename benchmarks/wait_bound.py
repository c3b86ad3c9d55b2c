"""How long a wide task waits behind a stream of small DAGs: stock Airflow vs the controller, against
the wait bound that docs/priority.md states ("Nothing waits without bound").

One 4-slot pool. A pipeline-like DAG triggered at 100 s has a 4-GPU ``train`` task (300 s) and a long
CPU tail after it, so its key is early (a long remaining critical path): it goes first once ready.
Two 2,000-s evaluations triggered at 0 hold two slots when it turns ready. From 150 s on, a Poisson
stream of 1-GPU evaluation DAGs (mean gap ``--gap-mean`` seconds) arrives, each a 10-s task, or a 2,000-s
one with probability ``--long``. Every run has its own DAG and cross-DAG keys (``balanced``, the
reservation gate scaled to these durations: ``--reservation-gap`` / ``--reservation-overdue``).

Per stream seed it prints the wait of ``train`` (ready -> start) under stock Airflow (``downstream``
rule, pool at capacity: greedy admission can starve it), under the controller deciding at every event
(``Δ = 0``) and every ``--interval`` seconds, next to the bound docs/priority.md states and proves:
``max(0, K - ready) + overdue + (|A| + 1) x (D + 2Δ)``, at ``Δ = 0`` the tighter ``max(0, K + overdue -
ready) + (|A| + 1) x D`` (``K``: its key, ``A``: the tasks with an earlier key, ``D``: the longest task in
the pool). Between ticks a slot freed by a running or backfilled task is open to Airflow's greedy
admission, which can hand it to a later-key 2,000-s task; once a task has waited ``overdue`` since it
turned ready (it *starves*) the controller backfills only work ahead of it, which is what keeps the
``Δ > 0`` wait within the bound. The ratio column is wait / bound: above 1 would be a violation.

    .venv/bin/python benchmarks/wait_bound.py                  # 12 streams, about 40 s
    .venv/bin/python benchmarks/wait_bound.py --seeds 0-3 --gap-mean 4 --long 0.01
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Sequence

from multi_dag import parse_seeds  # type: ignore[import-not-found]
from workloads import GPU_POOL, graph_from_tasks  # type: ignore[import-not-found]

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.policy.objective import ReservationGate, get_objective, key_of_weight, run_weights
from airflow_gpu_dag.core.simulation.simulator import simulate

EPOCH = -10_000_000.0  # keys are seconds after it; any epoch before the simulation's clock works
CAPACITY = {GPU_POOL: 4}


def _eval(dag_id: str, seconds: float) -> TaskGraph:
    return graph_from_tasks(dag_id, [{"id": "eval", "d": seconds, "gpus": 1}])


def stream(
    seed: int, gap_mean: float, long_share: float, horizon: float
) -> tuple[list[TaskGraph], list[float]]:
    """The DAGs of one instance and their trigger times (the pipeline first)."""
    rng = random.Random(seed)
    pipeline = [{"id": "train", "d": 300.0, "gpus": 4}, {"id": "tail", "d": 20_000.0, "parents": ["train"]}]
    graphs = [graph_from_tasks("pipeline", pipeline)]
    triggers = [100.0]
    for i in range(2):
        graphs.append(_eval(f"busy{i}", 2000.0))
        triggers.append(0.0)
    t = 150.0
    while t < horizon:
        duration = 2000.0 if rng.random() < long_share else 10.0
        graphs.append(_eval(f"eval{len(graphs)}", duration))
        triggers.append(t)
        t += rng.expovariate(1 / gap_mean)
    return graphs, triggers


def one(seed: int, args: argparse.Namespace) -> dict[str, float]:
    graphs, triggers = stream(seed, args.gap_mean, args.long, args.horizon)
    objective = get_objective("balanced")
    weights: dict[str, dict[str, int]] = {}

    def keys(graph: TaskGraph, trigger: float) -> dict[str, int]:
        weights[graph.dag_id] = run_weights(graph, trigger, CAPACITY, objective, EPOCH)
        return weights[graph.dag_id]

    gate = ReservationGate(args.reservation_gap, args.reservation_overdue, EPOCH)
    row: dict[str, float] = {}
    stock = simulate(graphs, CAPACITY, "stock", triggers=triggers).by_id()["0:pipeline/train"]
    row["stock"] = stock.wait
    for g, t in zip(graphs, triggers, strict=True):
        keys(g, t)  # every run's weights (the same in every simulation): the bound's K and A
    own = weights["pipeline"]["train"]
    key = key_of_weight(own, EPOCH)
    assert key is not None
    earlier = sum(1 for dag, w in weights.items() if dag != "pipeline" and w["eval"] >= own)
    longest = max(node.duration for g in graphs for node in g.nodes.values() if node.pool == GPU_POOL)
    for interval in (0.0, args.interval):
        result = simulate(
            graphs, CAPACITY, "reservation", interval, run_priority=keys, gate=gate, triggers=triggers
        )
        train = result.by_id()["0:pipeline/train"]
        row[f"wait_{interval:g}"] = train.wait
        row[f"bound_{interval:g}"] = gate.wait_bound(key, train.ready, earlier, longest, interval)
    return row


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", default="0-11", help="stream seeds, e.g. 0-11 or 0-3,7")
    parser.add_argument(
        "--gap-mean", type=float, default=4.0, help="mean seconds between evaluation triggers"
    )
    parser.add_argument("--long", type=float, default=0.008, help="share of 2,000-s evaluations")
    parser.add_argument("--horizon", type=float, default=40_000.0, help="the stream's last trigger, seconds")
    parser.add_argument("--interval", type=float, default=60.0, help="controller interval, seconds")
    parser.add_argument("--reservation-gap", type=float, default=600.0, help="gate gap, seconds")
    parser.add_argument("--reservation-overdue", type=float, default=1800.0, help="gate overdue, seconds")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    d = f"{args.interval:g}"
    print(f"| seed | stock wait | Δ=0 wait / bound | Δ={d} wait / bound | Δ={d} wait ÷ bound |")
    print("|---|---|---|---|---|")
    ratios = []
    for seed in parse_seeds(args.seeds):
        r = one(seed, args)
        ratio = r[f"wait_{d}"] / r[f"bound_{d}"]
        ratios.append(ratio)
        print(
            f"| {seed} | {r['stock'] / 3600:.2f} h | {r['wait_0'] / 3600:.2f} / {r['bound_0'] / 3600:.2f} h"
            f" | {r[f'wait_{d}'] / 3600:.2f} / {r[f'bound_{d}'] / 3600:.2f} h | {ratio:.2f} |",
            flush=True,
        )
    over = sum(1 for x in ratios if x > 1)
    mean, worst = statistics.mean(ratios), max(ratios)
    print(
        f"\nΔ={d}: wait ÷ bound mean {mean:.2f}, max {worst:.2f}; over the bound in {over} of {len(ratios)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
