"""Learned durations, many DAGs: how much of the exact-estimate gain in mean completion do five past runs
recover?

The team-like mixes of ``benchmarks/multi_dag.py`` (``benchmarks/mixes.py``: pipelines, sweeps and
evaluation DAGs sharing one GPU pool of 8, 16 and 32 GPUs, triggered over time or at once), run in the
simulator with the watermark controller every 60 s under the cross-DAG policy (``[gpu_dag] objective``,
default ``balanced``). The mix's durations are the truth; the keys and the controller see:

* ``exact``: the truth;
* ``declared``: the truth x exp(N(0, 0.3)) per task (hand-written estimates off by about +/- 30 %);
* ``learned``: :func:`airflow_gpu_dag.core.analysis.estimates.estimate_duration` over five past runs of each
task,
  each the truth x U(0.9, 1.1), the declared estimate as the prior (``benchmarks/learned_estimates.py``'s
  model, the single-DAG half).

Stock Airflow uses no estimates. The gain of a variant is ``stock - ours`` in mean completion time
(trigger -> the run's last task ends, averaged over the mix's runs) and in makespan; ``recovered`` is the
gain of ``learned`` (or ``declared``) over the gain of ``exact``, summed over instances.

    .venv/bin/python benchmarks/learned_multi_dag.py                     # A and B, seeds 100-129 (~30 s)
    .venv/bin/python benchmarks/learned_multi_dag.py --seeds 0-9 --caps 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from multiprocessing import Pool
from typing import Any

from learned_estimates import learned_graph
from mixes import check_variant, make_mix, spread_factor, triggers
from multi_dag import parse_seeds

from airflow_gpu_dag.core.planning.planner import perturbed
from airflow_gpu_dag.core.policy.objective import OBJECTIVES
from airflow_gpu_dag.core.simulation.cross_dag import predict_runs
from airflow_gpu_dag.core.simulation.simulator import SimulationResult

GPU_POOL = "gpu"
VARIANTS = ("exact", "declared", "learned")


def _figures(result: SimulationResult, trigger: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(r.completion for r in result.runs), max(r.end for r in result.runs) - min(trigger)


def one_instance(job: tuple[Any, ...]) -> dict[str, Any]:
    """Mean completion and makespan of one mix: stock, and ours with each variant's estimates."""
    variant, seed, capacity, mode, objective, error, runs, spread, interval = job
    mix = make_mix(seed, variant)
    truth = [r.graph for r in mix]
    declared = [perturbed(g, error, f"declared:{variant}:{seed}:{g.dag_id}") for g in truth]
    believed = {
        "exact": truth,
        "declared": declared,
        "learned": [
            learned_graph(t, d, runs, spread, f"runs:{variant}:{seed}:{t.dag_id}")
            for t, d in zip(truth, declared, strict=True)
        ],
    }
    trigger = triggers(mix, capacity, mode, seed, variant)
    caps = {GPU_POOL: capacity}
    out = {"stock": _figures(predict_runs(truth, trigger, caps, None), trigger)}
    for name, graphs in believed.items():
        result = predict_runs(truth, trigger, caps, OBJECTIVES[objective], interval, estimated=graphs)
        out[name] = _figures(result, trigger)
    return {"variant": variant, "capacity": capacity, "mode": mode, "figures": out}


def recovered(instances: Sequence[dict[str, Any]], variant: str, index: int) -> float:
    """Share of the summed exact-estimate gain (figure ``index``: 0 mean completion, 1 makespan)."""
    total = sum(i["figures"]["stock"][index] - i["figures"]["exact"][index] for i in instances)
    gain = sum(i["figures"]["stock"][index] - i["figures"][variant][index] for i in instances)
    return gain / total if total > 0 else float("nan")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variant", default="A,B", help="mix generator(s): A, B")
    parser.add_argument("--seeds", default="100-129", help="mix seeds, e.g. 100-129")
    parser.add_argument("--caps", default="8,16,32", help="GPU pool capacities")
    parser.add_argument("--modes", default="spread,once", help="trigger modes: spread, once")
    parser.add_argument("--objective", default="balanced", choices=sorted(OBJECTIVES))
    parser.add_argument("--error", type=float, default=0.3, help="declared = truth x exp(N(0, ERROR))")
    parser.add_argument("--runs", type=int, default=5, help="past runs learned from")
    parser.add_argument("--spread", type=float, default=0.1, help="each past run = truth x U(1 +/- SPREAD)")
    parser.add_argument("--interval", type=float, default=60.0, help="controller interval, seconds")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    caps = [int(c) for c in args.caps.split(",")]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    variants = [v.strip() for v in args.variant.split(",") if v.strip()]
    try:  # before any job: an unknown generator would silently draw other mixes
        for variant in variants:
            check_variant(variant)
        for mode in modes:
            spread_factor(mode)
    except ValueError as err:
        parser.error(str(err))
    jobs = [
        (v, seed, cap, mode, args.objective, args.error, args.runs, args.spread, args.interval)
        for v in variants
        for cap in caps
        for mode in modes
        for seed in parse_seeds(args.seeds)
    ]
    if args.jobs > 1:
        with Pool(args.jobs) as pool:
            results = pool.map(one_instance, jobs, chunksize=4)
    else:  # in this process: no fork (the tests call it from a process with daemon threads)
        results = [one_instance(job) for job in jobs]
    print(
        f"# learned durations, many DAGs: objective {args.objective}; declared = truth x exp(N(0, "
        f"{args.error:g})); learned from {args.runs} runs, each truth x U(1 +/- {args.spread:g}); "
        f"controller every {args.interval:g}s; generators {args.variant}, seeds {args.seeds}\n"
    )
    print(
        "| GPUs | mixes | stock/exact (mean compl.) | recovered, mean completion: declared | learned "
        "| recovered, makespan: declared | learned |"
    )
    print("|---|---|---|---|---|---|---|")
    for cap in [*caps, 0]:
        group = [r for r in results if cap in (0, r["capacity"])]
        ratio = statistics.fmean(r["figures"]["stock"][0] / r["figures"]["exact"][0] for r in group)
        shares = [recovered(group, v, i) for i in (0, 1) for v in ("declared", "learned")]
        cells = ["- (exact gains nothing)" if share != share else f"{share:.1%}" for share in shares]
        print(f"| {cap or 'all'} | {len(group)} | {ratio:.3f} | " + " | ".join(cells) + " |")
    print(f"\n# elapsed {time.perf_counter() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
