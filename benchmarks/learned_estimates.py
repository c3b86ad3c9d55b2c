"""Learned durations benchmark: how much of the exact-estimate gain do five past runs recover?

Every instance runs alone on one GPU pool (8, 16 and 32 GPUs) in the discrete-event simulator, tasks
taking exactly the workload's durations (the truth). Our policy (``packing+reservation``: planned
packing priority and the reservation controller) is planned and its controller sized with:

* ``exact``: the truth (the best estimates can do);
* ``declared``: the truth x exp(N(0, 0.3)) per task (hand-written estimates off by about +/- 30 %,
  the ``--noise 0.3`` model of ``benchmarks/makespan.py``);
* ``learned``: :func:`airflow_gpu_dag.core.analysis.estimates.estimate_duration` over five past runs of each
  task, each the truth x U(0.9, 1.1), with the declared estimate as the prior: what
  ``airflow_gpu_dag.airflow.history.learned_durations`` gives the planner after five runs (the graph
  built by :func:`~airflow_gpu_dag.core.analysis.estimates.with_estimates`, so the planner hedges by the
  learned
  durations' standard error as it does in the scheduler).

Stock Airflow (``downstream`` rule, greedy admission) uses no estimates. The gain of a variant is
``stock - makespan``; ``recovered`` is the gain of ``learned`` (or ``declared``) over the gain of
``exact``, summed over instances (``agg``) and as the mean over instances where ``exact`` gains.
Single DAG only: ``benchmarks/learned_multi_dag.py`` measures the multi-DAG mean completion time.

    .venv/bin/python benchmarks/learned_estimates.py            # all instances, 8/16/32 GPUs
    .venv/bin/python benchmarks/learned_estimates.py --quick    # every 4th file instance, 9 ML ones
    .venv/bin/python benchmarks/learned_estimates.py --capacities 32 --history-draw 1  # other past runs
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from workloads import GPU_POOL, Workload, load_workloads, ml_pipeline_workloads, parse_sets

from airflow_gpu_dag.core.analysis.estimates import (
    RunSample,
    estimate_duration,
    planning_error,
    with_estimates,
)
from airflow_gpu_dag.core.analysis.weight_rules import resolve_priority
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.planner import packing_weights_plan, perturbed
from airflow_gpu_dag.core.simulation.simulator import simulate

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKLOADS = REPO_ROOT.parent / "shared" / "workloads" / "wfinstances_dev.json"
VARIANTS = ("exact", "declared", "learned")


def learned_graph(truth: TaskGraph, declared: TaskGraph, runs: int, spread: float, seed: str) -> TaskGraph:
    """``declared`` with every duration replaced by the estimate learned from ``runs`` past runs of
    the task, each the truth times U(1 - spread, 1 + spread) (seeded)."""
    rng = random.Random(seed)
    estimates = {}
    for task_id, node in declared.nodes.items():
        true = truth.nodes[task_id].duration
        samples = [RunSample(true * rng.uniform(1 - spread, 1 + spread)) for _ in range(runs)]
        estimates[task_id] = estimate_duration(
            task_id, samples, declared=node.duration, fallback=node.duration
        )
    # as the provider builds it: the planner reads how sure each learned duration is (learned_error)
    return with_estimates(declared, estimates)


def history_seed(name: str, draw: int = 0) -> str:
    """The seed of the past runs of instance ``name``: draw 0 is the recorded one, others are further
    draws of the same five runs (how much the figure owes to one draw of the history)."""
    return f"runs:{name}" if draw == 0 else f"runs{draw}:{name}"


def measure(
    workloads: Sequence[Workload],
    capacity: int,
    error: float,
    runs: int,
    spread: float,
    draw: int = 0,
    hedge_scale: float = 1.0,
) -> dict[str, list[float]]:
    """Makespan per instance: stock and our policy planned on each variant's estimates.

    ``hedge_scale`` multiplies the error of the worlds the planner scores its options over (the
    learned durations' :func:`planning_error`; 1 is what the provider does, 0 plans on the learned
    durations alone). Exact and declared estimates carry no error, so it changes only ``learned``.
    """
    caps = {GPU_POOL: capacity}
    out: dict[str, list[float]] = {"stock": [], **{v: [] for v in VARIANTS}}
    for w in workloads:
        truth = w.graph
        declared = perturbed(truth, error, f"declared:{w.name}") if error > 0 else truth
        estimates = {
            "exact": truth,
            "declared": declared,
            "learned": learned_graph(truth, declared, runs, spread, history_seed(w.name, draw)),
        }
        stock_weights = dict(resolve_priority("downstream", caps)(truth))
        out["stock"].append(
            simulate(truth, caps, "stock", priority=lambda g, w=stock_weights: w).makespan  # type: ignore[misc]
        )
        for variant, believed in estimates.items():
            hedge = hedge_scale * planning_error(believed)
            weights = packing_weights_plan(believed, caps, "reservation", estimate_error=hedge).weights
            result = simulate(
                truth,
                caps,
                "reservation",
                priority=lambda g, w=weights: w,  # type: ignore[misc]
                estimates={t: n.duration for t, n in believed.nodes.items()},
            )
            out[variant].append(result.makespan)
    return out


def recovered(data: dict[str, list[float]], variant: str) -> tuple[float, float]:
    """(aggregate, mean over instances where exact gains) share of the exact-estimate gain."""
    stock, exact, ours = data["stock"], data["exact"], data[variant]
    total = sum(s - e for s, e in zip(stock, exact, strict=True))
    agg = sum(s - o for s, o in zip(stock, ours, strict=True)) / total if total > 0 else float("nan")
    shares = [
        (s - o) / (s - e) for s, e, o in zip(stock, exact, ours, strict=True) if s - e > 1e-9 * max(s, 1.0)
    ]
    return agg, statistics.mean(shares) if shares else float("nan")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=Path, default=DEFAULT_WORKLOADS, help="workload JSON file")
    parser.add_argument("--capacities", default="8,16,32", help="GPU pool capacities, comma separated")
    parser.add_argument("--ml-count", type=int, default=24, help="generated ML-pipeline instances")
    parser.add_argument("--error", type=float, default=0.3, help="declared = truth x exp(N(0, ERROR))")
    parser.add_argument("--runs", type=int, default=5, help="past runs learned from")
    parser.add_argument("--spread", type=float, default=0.1, help="each past run = truth x U(1 +/- SPREAD)")
    parser.add_argument("--sets", default="wfinstances,ml_pipelines", help="wfinstances, ml_pipelines")
    parser.add_argument(
        "--history-draw", type=int, default=0, help="which draw of the past runs (0: the recorded one)"
    )
    parser.add_argument(
        "--hedge-scale",
        type=float,
        default=1.0,
        help="scale the error of the planner's hedging worlds (1: as shipped, 0: no hedging)",
    )
    parser.add_argument("--quick", action="store_true", help="every 4th file instance, 9 ML pipelines")
    args = parser.parse_args(argv)
    try:
        chosen = parse_sets(args.sets)
    except ValueError as err:
        parser.error(str(err))
    started = time.perf_counter()
    # the file only when its set is run: --sets ml_pipelines needs no ../shared/workloads
    files = load_workloads(args.workloads)[:: 4 if args.quick else 1] if "wfinstances" in chosen else []
    ml = ml_pipeline_workloads(9 if args.quick else args.ml_count, seed=0)
    sets = {name: {"wfinstances": files, "ml_pipelines": ml}[name] for name in chosen}
    print(
        f"# learned durations: declared = truth x exp(N(0, {args.error:g})); learned from {args.runs} runs, "
        f"each truth x U(1 +/- {args.spread:g}), history draw {args.history_draw}, "
        f"hedge scale {args.hedge_scale:g}; "
        "policy packing+reservation; single DAG\n"
    )
    print("| set | GPUs | n | stock/exact | declared/exact | learned/exact | recovered: declared | learned |")
    print("|---|---|---|---|---|---|---|---|")
    for cap in (int(c) for c in args.capacities.split(",")):
        measured = {
            name: measure(ws, cap, args.error, args.runs, args.spread, args.history_draw, args.hedge_scale)
            for name, ws in sets.items()
        }
        if len(measured) > 1:
            measured["all"] = {k: [m for d in measured.values() for m in d[k]] for k in ("stock", *VARIANTS)}
        for name, data in measured.items():
            ratio = {
                k: statistics.mean(v / e for v, e in zip(data[k], data["exact"], strict=True))
                for k in ("stock", "declared", "learned")
            }
            rec = {v: recovered(data, v) for v in ("declared", "learned")}
            print(
                f"| {name} | {cap} | {len(data['exact'])} | {ratio['stock']:.4f} | {ratio['declared']:.4f} "
                f"| {ratio['learned']:.4f} | {rec['declared'][0]:.1%} (mean {rec['declared'][1]:.1%}) "
                f"| {rec['learned'][0]:.1%} (mean {rec['learned'][1]:.1%}) |",
                flush=True,
            )
    print(f"\n# elapsed {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
