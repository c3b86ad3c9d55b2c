"""Makespan benchmark: stock Airflow admission vs our priority, alone and with reservation.

Every instance runs alone on one GPU pool of capacity 8, 16 and 32 GPUs in the discrete-event simulator
(:mod:`airflow_gpu_dag.core.simulation.simulator`, Airflow's exact admission rule at every event). Policies:

* ``stock``: Airflow's ``downstream`` weight rule, greedy skip-if-it-does-not-fit admission.
* ``critical_path``: plain critical-path weights, greedy admission (for reference).
* ``packing``: our planned priority (``packing`` rule), greedy admission.
* ``packing+reservation``: our planned priority and the reservation controller (every event).

Figures per policy: mean makespan / lower bound (LB = max(critical path, GPU-seconds / capacity));
``closed``: mean over instances with stock > LB of (stock - ours) / (stock - LB); ``closed_agg``:
sum(stock - ours) / sum(stock - LB); ``worst``: max over instances of ours / stock; ``>2%``: instances
more than 2 % worse than stock; ``LB_best``: the tightest bound we have,
:func:`~airflow_gpu_dag.core.analysis.bounds.best_lower_bound` (valid for any schedule: dependencies, release
profile, forced overlaps of rigid tasks), and the same two figures against it. The ``ceiling`` row per
set and capacity is what a schedule ending at ``LB_best`` would close: no scheduler closes more.

    .venv/bin/python benchmarks/makespan.py            # full run
    .venv/bin/python benchmarks/makespan.py --quick    # a subset, for a fast check
    .venv/bin/python benchmarks/makespan.py --strict-backfill --search-budget 60000   # exact estimates
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from workloads import GPU_POOL, Workload, load_workloads, ml_pipeline_workloads, parse_sets

from airflow_gpu_dag.core.analysis.bounds import best_lower_bound, lower_bound
from airflow_gpu_dag.core.analysis.weight_rules import resolve_priority
from airflow_gpu_dag.core.planning.planner import SEARCH_BUDGET, packing_weights_plan, perturbed
from airflow_gpu_dag.core.simulation.simulator import simulate

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKLOADS = REPO_ROOT.parent / "shared" / "workloads" / "wfinstances_dev.json"
POLICIES: dict[str, tuple[str, str]] = {
    "stock": ("stock", "downstream"),
    "critical_path": ("critical_path", "critical_path"),
    "packing": ("critical_path", "packing"),
    "packing+reservation": ("reservation", "packing"),
}


def _closed(stock: Sequence[float], ours: Sequence[float], bounds: Sequence[float]) -> float:
    gaps = [(s - o) / (s - lb) for s, o, lb in zip(stock, ours, bounds, strict=True) if s > lb * (1 + 1e-9)]
    return statistics.mean(gaps) if gaps else 0.0


Measurements = tuple[dict[str, list[float]], list[float], list[float]]


def measure(
    workloads: Sequence[Workload],
    capacity: int,
    policies: Sequence[str],
    interval: float,
    noise: float = 0.0,
    search_budget: int = 0,
    strict_backfill: bool = False,
) -> Measurements:
    """Return (policy -> makespan per instance, lower bound per instance, LB_best per instance).

    Priorities and the controller work with the workload's durations (the estimates); tasks run for
    those durations, or with ``noise`` > 0 for the estimates times a log-normal factor.
    """
    caps = {GPU_POOL: capacity}
    makespans: dict[str, list[float]] = {p: [] for p in policies}
    bounds: list[float] = []
    tight: list[float] = []
    for w in workloads:
        estimated = w.graph
        actual = perturbed(estimated, noise, w.name) if noise > 0 else estimated
        believed = {t: n.duration for t, n in estimated.nodes.items()}
        tight.append(best_lower_bound(actual, caps))
        bounds.append(lower_bound(actual, caps))
        for p in policies:
            sim_policy, rule = POLICIES[p]
            if rule == "packing":
                weights = packing_weights_plan(
                    estimated,
                    caps,
                    sim_policy,
                    controller_interval=interval,
                    search_budget=search_budget,
                    strict_backfill=strict_backfill,
                ).weights
            else:
                weights = dict(resolve_priority(rule, caps)(estimated))
            result = simulate(
                actual,
                caps,
                sim_policy,
                controller_interval=interval,
                priority=lambda g, w=weights: w,  # type: ignore[misc]
                estimates=believed,
                strict_backfill=strict_backfill,
            )
            makespans[p].append(result.makespan)
    return makespans, bounds, tight


def summarize(data: Measurements) -> dict[str, dict[str, float]]:
    """Return ``policy -> figures`` (see the module docstring) for measured instances."""
    makespans, bounds, tight = data
    stock = makespans["stock"]
    policies = list(makespans)
    out: dict[str, dict[str, float]] = {}
    for p in policies:
        ours = makespans[p]
        gaps = [
            (s - o) / (s - lb) for s, o, lb in zip(stock, ours, bounds, strict=True) if s > lb * (1 + 1e-9)
        ]
        total_gap = sum(s - lb for s, lb in zip(stock, bounds, strict=True))
        out[p] = {
            "ratio": statistics.mean(o / lb if lb > 0 else 1.0 for o, lb in zip(ours, bounds, strict=True)),
            "closed": statistics.mean(gaps) if gaps else 0.0,
            "closed_agg": sum(s - o for s, o in zip(stock, ours, strict=True)) / total_gap
            if total_gap
            else 0.0,
            "worst": max(o / s for o, s in zip(ours, stock, strict=True) if s > 0),
            "worse2": sum(1 for o, s in zip(ours, stock, strict=True) if o > s * 1.02),
            "n": len(ours),
            "tight_ratio": statistics.mean(
                o / lb if lb > 0 else 1.0 for o, lb in zip(ours, tight, strict=True)
            ),
            "closed_tight": _closed(stock, ours, tight),
        }
    total_gap = sum(s - lb for s, lb in zip(stock, bounds, strict=True))
    out["ceiling"] = {  # a schedule that ends at LB_best on every instance
        "ratio": statistics.mean(t / lb if lb > 0 else 1.0 for t, lb in zip(tight, bounds, strict=True)),
        "closed": _closed(stock, tight, bounds),
        "closed_agg": sum(s - t for s, t in zip(stock, tight, strict=True)) / total_gap if total_gap else 0.0,
        "worst": max(t / s for t, s in zip(tight, stock, strict=True) if s > 0),
        "worse2": 0,
        "n": len(tight),
        "tight_ratio": 1.0,
        "closed_tight": 1.0,
    }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=Path, default=DEFAULT_WORKLOADS, help="workload JSON file")
    parser.add_argument("--capacities", default="8,16,32", help="GPU pool capacities, comma separated")
    parser.add_argument("--ml-count", type=int, default=24, help="generated ML-pipeline instances")
    parser.add_argument("--seed", type=int, default=0, help="seed of the ML-pipeline generator")
    parser.add_argument("--interval", type=float, default=0.0, help="controller interval (0 = every event)")
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="run tasks for estimate x exp(N(0, NOISE)) (plans and controller see the estimates)",
    )
    parser.add_argument(
        "--sets", default="wfinstances,ml_pipelines", help="workload sets: wfinstances, ml_pipelines"
    )
    parser.add_argument("--quick", action="store_true", help="a subset: every 4th file instance, 9 ML ones")
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help=f"comma separated, from {', '.join(POLICIES)}"
    )
    parser.add_argument(
        "--search-budget",
        type=int,
        default=0,
        help=f"the packing planner's local search budget (0 = off, the default; {SEARCH_BUDGET} measured)",
    )
    parser.add_argument(
        "--strict-backfill",
        action="store_true",
        help="controller backfills only work that ends before the reserved task can start (backfill: strict)",
    )
    args = parser.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        parser.error(f"unknown policies {unknown}; use {', '.join(POLICIES)}")
    if "stock" not in policies:
        policies.insert(0, "stock")
    try:
        chosen = parse_sets(args.sets)
    except ValueError as err:
        parser.error(str(err))
    started = time.perf_counter()
    # the file only when its set is run: --sets ml_pipelines needs no ../shared/workloads
    files = load_workloads(args.workloads)[:: 4 if args.quick else 1] if "wfinstances" in chosen else []
    ml = ml_pipeline_workloads(9 if args.quick else args.ml_count, seed=args.seed)
    sets = {name: {"wfinstances": files, "ml_pipelines": ml}[name] for name in chosen}
    print(
        "# makespan benchmark: "
        + ", ".join(
            f"{len(files)} file instances ({args.workloads.name})"
            if name == "wfinstances"
            else f"{len(ml)} ML pipelines (seed {args.seed})"
            for name in chosen
        )
    )
    print(
        f"# controller interval {args.interval:g}s; duration noise sigma {args.noise:g}; "
        f"planner search budget {args.search_budget}; "
        f"backfill {'strict' if args.strict_backfill else 'easy'}; "
        "closed = mean over instances with stock > LB\n"
    )
    print(
        "| set | GPUs | policy | makespan/LB | closed | closed_agg | worst ours/stock | >2% worse "
        "| makespan/LB_best | closed vs LB_best |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cap in (int(c) for c in args.capacities.split(",")):
        measured = {
            name: measure(
                ws, cap, policies, args.interval, args.noise, args.search_budget, args.strict_backfill
            )
            for name, ws in sets.items()
        }
        if len(measured) > 1:
            measured["all"] = (
                {p: [m for data in measured.values() for m in data[0][p]] for p in policies},
                [b for data in measured.values() for b in data[1]],
                [b for data in measured.values() for b in data[2]],
            )
        for set_name, data in measured.items():
            figures = summarize(data)
            for p in [*policies, "ceiling"]:
                f = figures[p]
                print(
                    f"| {set_name} | {cap} | {p} | {f['ratio']:.4f} | {f['closed']:.1%} "
                    f"| {f['closed_agg']:.1%} "
                    f"| {f['worst']:.4f} | {int(f['worse2'])}/{int(f['n'])} "
                    f"| {f['tight_ratio']:.4f} | {f['closed_tight']:.1%} |",
                    flush=True,
                )
    print(f"\n# elapsed {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
