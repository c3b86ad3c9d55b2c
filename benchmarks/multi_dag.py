"""Many DAGs, one GPU pool: stock Airflow vs the cross-DAG policy, in the simulator (issue #11).

Each instance is a team-like mix of DAGs (:mod:`mixes`: pipelines of six-node stages with 1-8-GPU
training, sweeps of 4-12 trials, 5-40 single-task evaluations of 5-60 min; each its own DAG) on one GPU
pool of 8 / 16 / 32 GPUs, triggered spread over time or all at once. Every policy runs the same mix in
:func:`airflow_gpu_dag.core.simulation.simulator.simulate` (Airflow's admission at every event; the watermark
controller every ``--interval`` seconds, 60 by default):

* ``stock``: Airflow as shipped: the ``downstream`` weight rule, the pool fixed at capacity.
* ``v0.1``: the previous release: ``packing`` weights planned per DAG, the controller reserving for every
  wide head (what issue #11 measured). Expensive (it plans every DAG); not run by default.
* ``throughput`` / ``balanced`` / ``fair`` / ``latency``: the cross-DAG keys of
  :mod:`airflow_gpu_dag.core.policy.objective` (critical-path remaining times) and the objective's reservation
  gate: what ``[gpu_dag] objective`` selects (``fair`` is the default).

Weights and the controller see the estimates; tasks run for the estimates (``exact``), or for the
estimates times ``U(0.7, 1.3)`` (``uniform30``, estimates off by up to +/- 30 %), or times
``exp(N(0, 0.3))`` (``lognormal30``). Figures per group, each the mean over instances of the
per-instance ratio ours / stock: ``mean`` completion time (trigger -> last task ends) over the runs;
``p95`` completion time (nearest rank); ``makespan`` (last end - first trigger); the mean completion of
the ``pipeline`` / ``sweep`` / ``eval`` runs; ``worst``: the largest per-instance mean ratio. ``LB``:
our makespan over a release-aware lower bound. ``best makespan`` (stock's row): the mean over instances of
lower bound / stock's makespan: no schedule of the mixes, ours or any other, has a mean makespan ratio
below it. The targets of issue #11 are checked per group; a makespan target below ``best makespan`` is
marked unreachable.

    .venv/bin/python benchmarks/multi_dag.py                       # 30 mixes, A generator, about a minute
    .venv/bin/python benchmarks/multi_dag.py --seeds 100-129 --variant B --json out.json
    .venv/bin/python benchmarks/multi_dag.py --seeds 0-4 --caps 8 --policies v0.1,balanced   # quick
    .venv/bin/python benchmarks/multi_dag.py --time-scale 2 --stage-length 12   # tasks twice as long,
                                                     # the objectives at their stage length (6 h: as shipped)
    .venv/bin/python benchmarks/multi_dag.py --time-scale 0.1 --stage-length fit  # each mix at the stage
                                                     # length lint advises for it
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from multiprocessing import Pool
from typing import Any

from mixes import (  # type: ignore[import-not-found]
    GPU_POOL,
    KINDS,
    Run,
    actual_graphs,
    check_variant,
    make_mix,
    spread_factor,
    triggers,
)

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.planning.planner import packing_weights_plan
from airflow_gpu_dag.core.policy.objective import (
    OBJECTIVES,
    STAGE_LENGTH,
    ReservationGate,
    run_shape,
    stage_length_problem,
    stage_misfit,
)
from airflow_gpu_dag.core.simulation.cross_dag import believed_durations, predict_runs
from airflow_gpu_dag.core.simulation.simulator import RunPriority, SimulationResult, simulate

ESTIMATES = {"exact": 0.0, "uniform30": -0.3, "lognormal30": 0.3}
#: Issue #41's targets. ``fair`` (the default), ``balanced`` and ``latency``: every kind's mean
#: completion <= KIND_LIMIT, p95 and makespan <= 1 (hard), the mean <= TARGET_MEAN (the goal);
#: ``throughput``: makespan <= TARGET_MAKESPAN, every kind <= THROUGHPUT_KIND_LIMIT. (TARGET_MAKESPAN is
#: also the frontier script's makespan target.)
TARGET_MEAN = {8: 0.88, 16: 0.93, 32: 1.00}
TARGET_MAKESPAN = {8: 0.95, 16: 0.95, 32: 1.00}
KIND_LIMIT = 1.05
THROUGHPUT_KIND_LIMIT = 1.10
DEFAULT_POLICIES = ("throughput", "balanced", "fair", "latency")


def run_policy(
    policy: str,
    actual: Sequence[TaskGraph],
    estimated: Sequence[TaskGraph],
    trigger: Sequence[float],
    capacity: int,
    interval: float,
    stage_length: float = STAGE_LENGTH,
) -> SimulationResult:
    """Simulate one mix under ``policy``; weights and the controller see ``estimated`` durations; an
    objective's times are for stages of ``stage_length`` seconds (:meth:`Objective.for_stage`)."""
    caps = {GPU_POOL: capacity}
    if policy == "stock":
        return predict_runs(actual, trigger, caps, None, estimated=estimated)
    if policy == "v0.1":
        plans = {
            g.dag_id: packing_weights_plan(g, caps, "reservation", controller_interval=interval).weights
            for g in estimated
        }
        return simulate_weights(lambda g, t: plans[g.dag_id], actual, estimated, trigger, capacity, interval)
    objective = OBJECTIVES[policy].for_stage(stage_length)
    return predict_runs(actual, trigger, caps, objective, interval, estimated=estimated)


def simulate_weights(
    run_priority: RunPriority,
    actual: Sequence[TaskGraph],
    estimated: Sequence[TaskGraph],
    trigger: Sequence[float],
    capacity: int,
    interval: float,
    gate: ReservationGate | None = None,
) -> SimulationResult:
    """Simulate one mix with the weights ``run_priority(graph, trigger)`` gives each run and the watermark
    controller every ``interval`` seconds (``gate``: its reservation gate; None reserves for every wide
    head); the controller believes the ``estimated`` durations."""
    return simulate(
        list(actual),
        {GPU_POOL: capacity},
        "reservation",
        interval,
        triggers=trigger,
        estimates=believed_durations(estimated),
        run_priority=run_priority,
        gate=gate,
    )


def lower_bound(actual: Sequence[TaskGraph], trigger: Sequence[float], capacity: int) -> float:
    """No schedule of the mix ends before: the latest trigger + critical path of any run, and for every
    trigger time ``t``, ``t`` + the GPU work triggered at or after ``t`` / capacity (from the first
    trigger)."""
    shapes = [run_shape(g, {GPU_POOL: capacity}) for g in actual]
    bound = max(t + max(s.remaining.values(), default=0.0) for t, s in zip(trigger, shapes, strict=True))
    for moment in sorted(set(trigger)):
        later = sum(s.work for t, s in zip(trigger, shapes, strict=True) if t >= moment)
        bound = max(bound, moment + later)
    return bound - min(trigger)


#: ``(runs, estimated graphs, actual graphs, triggers) -> (name, result)`` for every policy of a mix
Simulations = Callable[
    [list[Run], list[TaskGraph], list[TaskGraph], list[float]], Iterable[tuple[str, SimulationResult]]
]


def outcome(result: SimulationResult, start: float) -> dict[str, Any]:
    """What the figures read of a simulation: every run's ``completion`` time and the ``makespan`` (last
    end - ``start``, the first trigger)."""
    return {
        "completion": [r.completion for r in result.runs],
        "makespan": max(r.end for r in result.runs) - start,
    }


def measure(
    variant: str,
    seed: int,
    capacity: int,
    mode: str,
    estimates: str,
    simulations: Simulations,
    time_scale: float = 1.0,
) -> dict[str, Any]:
    """Build the mix ``seed`` of ``variant`` (every duration times ``time_scale``; tasks running for the
    ``estimates`` errors, triggered in ``mode``), run ``simulations`` on it and keep every policy's run
    completion times and makespan."""
    runs: list[Run] = make_mix(seed, variant, time_scale)
    estimated = [r.graph for r in runs]
    actual = actual_graphs(runs, ESTIMATES[estimates], seed, variant)
    trigger = triggers(runs, capacity, mode, seed, variant)
    out = {
        name: outcome(result, min(trigger)) for name, result in simulations(runs, estimated, actual, trigger)
    }
    return {
        "variant": variant,
        "seed": seed,
        "capacity": capacity,
        "mode": mode,
        "estimates": estimates,
        "kinds": [r.kind for r in runs],
        "lower_bound": lower_bound(actual, trigger, capacity),
        "results": out,
    }


#: ``--stage-length fit``: each mix at the stage length lint advises for it.
FIT = "fit"


def mix_stage_length(stage: float | str, estimated: Sequence[TaskGraph]) -> float:
    """The objectives' stage length for one mix: ``stage`` seconds, or for :data:`FIT` what
    ``airflow gpu-dag lint`` advises a team whose pool runs this mix (the shipped 6 h while its longest
    declared GPU task fits them, else that task's duration: :func:`stage_misfit`)."""
    if stage != FIT:
        return float(stage)
    misfit = stage_misfit({graph.dag_id: graph for graph in estimated}, STAGE_LENGTH)
    return STAGE_LENGTH if misfit is None else misfit.advised


def one_instance(job: tuple) -> dict[str, Any]:
    """One mix under every policy: ``(variant, seed, capacity, mode, estimates, policies, interval)``,
    then optionally the ``time_scale`` (:func:`mix_jobs`) and the objectives' ``stage_length`` (seconds,
    or :data:`FIT`)."""
    variant, seed, capacity, mode, estimates, policies, interval, *rest = job
    time_scale = rest[0] if rest else 1.0
    stage = rest[1] if len(rest) > 1 else STAGE_LENGTH
    return measure(
        variant,
        seed,
        capacity,
        mode,
        estimates,
        lambda runs, estimated, actual, trigger: (
            (
                p,
                run_policy(
                    p, actual, estimated, trigger, capacity, interval, mix_stage_length(stage, estimated)
                ),
            )
            for p in policies
        ),
        time_scale,
    )


def _p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def instance_ratios(
    ours: Mapping[str, Any], stock: Mapping[str, Any], kinds: Sequence[str]
) -> dict[str, float]:
    """One instance's ratios ours / stock (each a ``{"completion": [...], "makespan": ...}``): ``mean``
    and ``p95`` completion, ``makespan``, and the mean completion of each kind present."""
    out = {
        "mean": statistics.mean(ours["completion"]) / statistics.mean(stock["completion"]),
        "p95": _p95(ours["completion"]) / _p95(stock["completion"]),
        "makespan": ours["makespan"] / stock["makespan"],
    }
    for k in KINDS:
        idx = [i for i, kk in enumerate(kinds) if kk == k]
        if idx:
            ours_k = statistics.mean(ours["completion"][i] for i in idx)
            out[k] = ours_k / statistics.mean(stock["completion"][i] for i in idx)
    return out


def figures(instances: Sequence[Mapping[str, Any]], policy: str) -> dict[str, float]:
    """The mean over instances of the per-instance ratios ours / stock (see the module docstring)."""
    mean, p95, makespan, bound = [], [], [], []
    kind: dict[str, list[float]] = defaultdict(list)
    for inst in instances:
        ours = inst["results"][policy]
        ratios = instance_ratios(ours, inst["results"]["stock"], inst["kinds"])
        mean.append(ratios["mean"])
        p95.append(ratios["p95"])
        makespan.append(ratios["makespan"])
        bound.append(ours["makespan"] / inst["lower_bound"])
        for k in KINDS:
            if k in ratios:
                kind[k].append(ratios[k])
    out = {
        "mean": statistics.mean(mean),
        "p95": statistics.mean(p95),
        "makespan": statistics.mean(makespan),
        "worst": max(mean),
        "lb": statistics.mean(bound),
        "n": len(mean),
    }
    out.update({k: statistics.mean(kind[k]) if kind[k] else math.nan for k in KINDS})
    return out


def best_makespan(instances: Sequence[Mapping[str, Any]]) -> float:
    """The mean over instances of lower bound / stock's makespan: every schedule's makespan is at least the
    lower bound, so no policy's mean makespan ratio to stock can be below this."""
    return statistics.mean(inst["lower_bound"] / inst["results"]["stock"]["makespan"] for inst in instances)


def misses(capacity: int, f: Mapping[str, float], best: float = 0.0, policy: str = "") -> list[str]:
    """The targets a group misses (``best``: :func:`best_makespan` of the group; a makespan target below
    it is marked unreachable). ``policy`` ``throughput``: issue #41's throughput targets (makespan
    :data:`TARGET_MAKESPAN`, every kind <= :data:`THROUGHPUT_KIND_LIMIT`); ``fair``, ``balanced`` or
    ``latency``: the default's (mean :data:`TARGET_MEAN`, p95 and makespan <= 1, every kind <=
    :data:`KIND_LIMIT`); any other (``""``): all of them, the frontier's question."""
    out = []
    if policy != "throughput" and f["mean"] > TARGET_MEAN.get(capacity, 1.0):
        out.append("mean")
    target = 1.0 if policy in ("fair", "balanced", "latency") else TARGET_MAKESPAN.get(capacity, 1.0)
    if f["makespan"] > target:
        out.append(f"makespan (unreachable: best {best:.3f})" if best > target else "makespan")
    if policy != "throughput" and f["p95"] > 1.0:
        out.append("p95")
    limit = THROUGHPUT_KIND_LIMIT if policy == "throughput" else KIND_LIMIT
    out.extend(k for k in KINDS if f[k] > limit)
    return out


def table(results: Sequence[Mapping[str, Any]], policies: Sequence[str], file: Any = None) -> None:
    file = file or sys.stdout  # resolved per call: a captured stdout changes
    groups: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for inst in results:
        groups[(inst["variant"], inst["mode"], inst["estimates"], inst["capacity"])].append(inst)
    print(
        "| set | triggers | estimates | GPUs | policy | mean | p95 | makespan | pipeline | sweep | eval | "
        "worst | makespan/LB | best makespan | misses |",
        file=file,
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|", file=file)
    for (variant, mode, estimates, capacity), insts in sorted(groups.items()):
        stock_lb = statistics.mean(i["results"]["stock"]["makespan"] / i["lower_bound"] for i in insts)
        best = best_makespan(insts)
        print(
            f"| {variant} | {mode} | {estimates} | {capacity} | stock | 1 | 1 | 1 | 1 | 1 | 1 | 1 | "
            f"{stock_lb:.3f} | {best:.3f} | |",
            file=file,
        )
        for policy in policies:
            if policy == "stock":
                continue
            f = figures(insts, policy)
            missed = ", ".join(misses(capacity, f, best, policy)) or "none"
            print(
                f"| {variant} | {mode} | {estimates} | {capacity} | {policy} | {f['mean']:.3f} | "
                f"{f['p95']:.3f} | {f['makespan']:.3f} | {f['pipeline']:.3f} | {f['sweep']:.3f} | "
                f"{f['eval']:.3f} | {f['worst']:.2f} | {f['lb']:.3f} | | {missed} |",
                file=file,
            )


def seed_set(seed: int) -> str:
    """The name of the block of seeds ``seed`` belongs to (``0-99``: tuning, ``100-199``: held out,
    ``200-299``: fresh, ...): the sets the summary reports separately."""
    block = seed // 100 * 100
    return f"{block}-{block + 99}"


def summary(results: Sequence[Mapping[str, Any]], policies: Sequence[str], file: Any = None) -> None:
    """Per seed set (generator and :func:`seed_set`), GPU count and policy: the range of the mean
    completion over the set's groups (trigger mode x estimates) and the worst group of the p95, the
    makespan and each kind; ``hard``: whether issue #41's hard requirements hold in every group of the
    set (``fair``/``balanced``/``latency``: p95 and makespan <= 1, every kind <= :data:`KIND_LIMIT`;
    ``throughput``: every kind <= :data:`THROUGHPUT_KIND_LIMIT`)."""
    file = file or sys.stdout
    groups: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for inst in results:
        key = (inst["variant"], seed_set(inst["seed"]), inst["capacity"], inst["mode"], inst["estimates"])
        groups[key].append(inst)
    cells: dict[tuple, list[dict[str, float]]] = defaultdict(list)
    for (variant, seeds, capacity, _mode, _estimates), insts in groups.items():
        for policy in policies:
            if policy != "stock":
                cells[(capacity, policy, variant, seeds)].append(figures(insts, policy))
    print(
        "| GPUs | policy | set | mean (range over groups) | p95 (worst) | makespan (worst) | "
        "pipeline / sweep / eval (worst) | hard |",
        file=file,
    )
    print("|---|---|---|---|---|---|---|---|", file=file)
    for (capacity, policy, variant, seeds), rows in sorted(cells.items()):
        worst = {m: max(r[m] for r in rows if not math.isnan(r[m])) for m in ("p95", "makespan", *KINDS)}
        if policy == "throughput":
            broken = [k for k in KINDS if worst[k] > THROUGHPUT_KIND_LIMIT]
        else:
            broken = [m for m in ("p95", "makespan") if worst[m] > 1.0]
            broken += [k for k in KINDS if worst[k] > KIND_LIMIT]
        kinds = " / ".join(f"{worst[k]:.3f}" for k in KINDS)
        means = [r["mean"] for r in rows]
        print(
            f"| {capacity} | {policy} | {variant} {seeds} | {min(means):.2f}-{max(means):.2f} | "
            f"{worst['p95']:.3f} | {worst['makespan']:.3f} | {kinds} | "
            f"{'met' if not broken else 'missed: ' + ', '.join(broken)} |",
            file=file,
        )


#: Colours of the plot's points, by policy.
COLOURS = {
    "stock": "#000000",
    "throughput": "#d62728",
    "balanced": "#1f77b4",
    "fair": "#9467bd",
    "latency": "#2ca02c",
    "v0.1": "#7f7f7f",
}


def plot_points(
    results: Sequence[Mapping[str, Any]], policies: Sequence[str]
) -> dict[int, dict[str, dict[str, float]]]:
    """Per capacity and policy: ``mean`` and ``makespan``, the mean over the groups (trigger mode,
    estimates, generator) of that capacity of :func:`figures`, and each kind's ratio in the group where
    it is worst (what the hard "no kind above 1.05" reads); stock is 1 everywhere."""
    groups: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for inst in results:
        groups[(inst["variant"], inst["mode"], inst["estimates"], inst["capacity"])].append(inst)
    out: dict[int, dict[str, dict[str, float]]] = defaultdict(dict)
    for capacity in sorted({key[3] for key in groups}):
        cells = [insts for key, insts in groups.items() if key[3] == capacity]
        out[capacity]["stock"] = {"mean": 1.0, "makespan": 1.0, **dict.fromkeys(KINDS, 1.0)}
        for policy in policies:
            if policy == "stock":
                continue
            rows = [figures(insts, policy) for insts in cells]
            point = {m: statistics.mean(r[m] for r in rows) for m in ("mean", "makespan")}
            point.update({k: max(r[k] for r in rows if not math.isnan(r[k])) for k in KINDS})
            out[capacity][policy] = point
    return out


def plot_svg(points: Mapping[int, Mapping[str, Mapping[str, float]]], title: str = "") -> str:
    """An SVG of :func:`plot_points`: per capacity a panel of mean completion (y) against makespan (x),
    both ratios to stock, one point per policy labelled with each kind's worst-group ratio. Written by
    hand (matplotlib is not a dependency of the project)."""
    width, height, margin = 420, 400, 60
    panels = sorted(points)
    xs = [p["makespan"] for c in panels for p in points[c].values()]
    ys = [p["mean"] for c in panels for p in points[c].values()]
    x0, x1 = min(0.95, min(xs)) - 0.01, max(1.05, max(xs)) + 0.01
    y0, y1 = min(ys) - 0.05, max(1.02, max(ys)) + 0.03

    def sx(x: float, i: int) -> float:
        return i * width + margin + (x - x0) / (x1 - x0) * (width - 1.5 * margin)

    def sy(y: float) -> float:
        return 40 + (y1 - y) / (y1 - y0) * (height - margin - 40)

    legend = 26 * max(len(points[c]) for c in panels)  # two lines per policy under each panel
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(panels)}" '
        f'height="{height + 20 + legend}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="100%" height="100%" fill="white"/><text x="10" y="18" font-size="13">{title}</text>',
    ]
    for i, capacity in enumerate(panels):
        left, right, top, bottom = sx(x0, i), sx(x1, i), sy(y1), sy(y0)
        out.append(
            f'<rect x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" height="{bottom - top:.1f}" '
            'fill="none" stroke="#444"/>'
        )
        out.append(f'<text x="{left + 4:.1f}" y="{top - 6:.1f}" font-size="12">{capacity} GPUs</text>')
        for x, y in ((1.0, None), (None, 1.0)):  # stock's lines
            if x is not None:
                out.append(
                    f'<line x1="{sx(x, i):.1f}" y1="{top:.1f}" x2="{sx(x, i):.1f}" y2="{bottom:.1f}" '
                    'stroke="#999" stroke-dasharray="4 3"/>'
                )
            else:
                out.append(
                    f'<line x1="{left:.1f}" y1="{sy(y):.1f}" x2="{right:.1f}" y2="{sy(y):.1f}" '  # type: ignore[arg-type]
                    'stroke="#999" stroke-dasharray="4 3"/>'
                )
        for tick in (x0 + 0.01, 1.0, x1 - 0.01):
            out.append(
                f'<text x="{sx(tick, i):.1f}" y="{bottom + 14:.1f}" text-anchor="middle">{tick:.2f}</text>'
            )
        for tick in (y0 + 0.05, 1.0):
            out.append(f'<text x="{left - 4:.1f}" y="{sy(tick) + 4:.1f}" text-anchor="end">{tick:.2f}</text>')
        out.append(
            f'<text x="{(left + right) / 2:.1f}" y="{bottom + 30:.1f}" text-anchor="middle">'
            "makespan / stock</text>"
        )
        out.append(
            f'<text x="{left - 40:.1f}" y="{(top + bottom) / 2:.1f}" text-anchor="middle" '
            f'transform="rotate(-90 {left - 40:.1f} {(top + bottom) / 2:.1f})">mean completion / stock</text>'
        )
        for n, (policy, p) in enumerate(sorted(points[capacity].items())):
            colour = COLOURS.get(policy, "#9467bd")
            cx, cy = sx(p["makespan"], i), sy(p["mean"])
            out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{colour}"/>')
            out.append(
                f'<text x="{cx + 7:.1f}" y="{cy - 5 - 10 * (n % 2):.1f}" fill="{colour}">{policy}</text>'
            )
            kinds = " ".join(f"{k[:5]} {p[k]:.2f}" for k in KINDS)
            out.append(
                f'<text x="{left + 6:.1f}" y="{bottom + 48 + 26 * n:.1f}" fill="{colour}">{policy}: '
                f"mean {p['mean']:.2f}, makespan {p['makespan']:.2f}</text>"
            )
            out.append(
                f'<text x="{left + 6:.1f}" y="{bottom + 60 + 26 * n:.1f}" fill="{colour}">'
                f"  worst group: {kinds}</text>"
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


def add_mix_arguments(
    parser: argparse.ArgumentParser,
    caps: str = "8,16,32",
    modes: str = "spread,once",
    estimates: str = "exact,uniform30",
) -> None:
    """The options that choose the mixes (``--variant --seeds --caps --modes --estimates
    --time-scale``), the controller's ``--interval`` and the worker ``--jobs``; read back by
    :func:`mix_jobs`."""
    parser.add_argument("--variant", default="A", help="mix generator(s): A, B (comma separated)")
    parser.add_argument("--seeds", default="0-29", help="mix seeds, e.g. 0-29 or 100-129")
    parser.add_argument("--caps", default=caps, help="GPU pool capacities")
    parser.add_argument(
        "--modes", default=modes, help="trigger modes: spread, once, spread:RHO (spread:0.5: a busier pool)"
    )
    parser.add_argument("--estimates", default=estimates, help=f"from {', '.join(ESTIMATES)}")
    parser.add_argument("--interval", type=float, default=60.0, help="controller interval, seconds")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="every task duration of the mixes times this (the same DAGs on a pool of longer or shorter "
        "tasks; the triggers follow)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")


def mix_jobs(args: argparse.Namespace, *extra: Any) -> list[tuple]:
    """One job per mix the options of :func:`add_mix_arguments` name:
    ``(variant, seed, capacity, mode, estimates, *extra, interval, time_scale)``; a bad generator,
    trigger mode, estimate model or time scale stops here (not in a worker, and not by silently drawing
    other mixes)."""
    variants, modes, models = _items(args.variant), _items(args.modes), _items(args.estimates)
    for variant in variants:
        try:
            check_variant(variant)
        except ValueError as err:
            raise SystemExit(f"error: --variant: {err}") from None
    for mode in modes:
        try:
            spread_factor(mode)
        except ValueError as err:
            raise SystemExit(f"error: --modes: {err}") from None
    if not (math.isfinite(args.time_scale) and args.time_scale > 0):
        raise SystemExit(f"error: --time-scale: {args.time_scale!r} is not a positive number")
    unknown = [e for e in models if e not in ESTIMATES]
    if unknown:
        raise SystemExit(f"error: --estimates: {', '.join(map(repr, unknown))}: use {', '.join(ESTIMATES)}")
    return [
        (variant, seed, int(cap), mode, estimates, *extra, args.interval, args.time_scale)
        for variant in variants
        for cap in _items(args.caps)
        for mode in modes
        for estimates in models
        for seed in parse_seeds(args.seeds)
    ]


def _items(text: str) -> list[str]:
    """The values of a comma-separated option (``"A, B"`` is ``["A", "B"]``)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def run_jobs(
    worker: Callable[[tuple], dict[str, Any]], jobs: Sequence[tuple], processes: int
) -> list[dict[str, Any]]:
    """``worker`` on every job, in ``processes`` worker processes (1: in this one), results in order."""
    if processes > 1:
        with Pool(processes) as pool:
            return pool.map(worker, jobs, chunksize=1)
    return [worker(job) for job in jobs]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_mix_arguments(parser)
    parser.add_argument(
        "--policies", default=",".join(DEFAULT_POLICIES), help="besides stock: v0.1, " + ", ".join(OBJECTIVES)
    )
    parser.add_argument(
        "--stage-length",
        default=f"{STAGE_LENGTH / 3600.0:g}",
        help="hours, the objectives' [gpu_dag] stage_length (default 6: their times as shipped); 'fit': "
        "each mix at the one lint advises for it (6 h, or its longest GPU task when that is outside "
        "a sixth to three stages)",
    )
    parser.add_argument("--json", default="", help="write every instance's raw figures here")
    parser.add_argument("--plot", default="", help="write the mean-against-makespan plot here (SVG)")
    args = parser.parse_args(argv)
    stage: float | str = FIT
    if args.stage_length != FIT:
        try:
            stage = float(args.stage_length) * 3600.0
        except ValueError:
            parser.error(f"--stage-length: {args.stage_length!r} is neither hours nor {FIT!r}")
        if problem := stage_length_problem(stage):
            parser.error(f"--stage-length: {problem}")
    policies = ["stock", *(p for p in args.policies.split(",") if p and p != "stock")]
    unknown = [p for p in policies if p not in ("stock", "v0.1", *OBJECTIVES)]
    if unknown:
        parser.error(f"unknown policies {unknown}")
    jobs = [(*job, stage) for job in mix_jobs(args, policies)]
    started = time.time()
    results = run_jobs(one_instance, jobs, args.jobs)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle)
    length = "fitted to each mix" if stage == FIT else f"{float(stage) / 3600.0:g} h"
    scale = (
        f"; durations x {args.time_scale:g}, stage length {length}"
        if args.time_scale != 1.0 or stage != STAGE_LENGTH
        else ""
    )
    print(
        f"# multi-DAG benchmark: {len(jobs)} instances, controller every {args.interval:g} s{scale}; "
        "ratios ours / stock, mean over instances"
    )
    table(results, policies)
    print("\n# per seed set: mean range over groups, worst group of the rest; issue #41's hard requirements")
    summary(results, policies)
    if args.plot:
        title = f"{len(jobs)} mixes ({args.variant} seeds {args.seeds}; {args.modes}; {args.estimates})"
        with open(args.plot, "w") as handle:
            handle.write(plot_svg(plot_points(results, policies), title))
        print(f"\n# plot: {args.plot}")
    print(f"\n# elapsed {time.time() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
