"""Many DAGs through the real Airflow scheduler: stock vs the cross-DAG policy, next to the simulator.

One real Airflow 3.3 (SQLite + LocalExecutor, :class:`airflow_gpu_dag.testing.AirflowCluster`), one GPU
pool ``gpu`` of ``--capacity`` slots, and a team's mix with durations in seconds, each its own DAG:

* a pipeline ``prep`` (1 GPU) -> ``pretrain`` (every GPU) -> ``finetune`` (1 GPU) -> ``evaluate`` (1 GPU);
* a sweep of ``--trials`` 1-GPU trials and a CPU ``select``;
* ``--evals`` single-task evaluation DAGs (1 GPU),

triggered over REST at given offsets (pipeline at 0 s, sweep at 3 s, evaluations every 3 s from 2 s).
The mix runs twice, on copies of the DAGs:

* ``stock``: Airflow's ``downstream`` weight rule, pool fixed at capacity, no controller;
* ``provider``: ``CriticalPathPriorityStrategy`` (cross-DAG keys, ``[gpu_dag] objective``, default
  ``fair``) and the watermark controller every ``--interval`` s with the objective's reservation gate.
  The objective's times are for 6-h training stages; here the stages last seconds, so the scheduler is
  told ``[gpu_dag] stage_length`` = 6 h over :data:`TIME_SCALE` = 18 s, which scales every time of the
  objective (``fair``'s unit, due cap, gap and gate overdue 18 s, 36 s, 288 s and 108 s; ``balanced``'s
  gap and overdue 24 s and 36 s), and the prediction reads the same settings back through
  :func:`airflow_gpu_dag.settings.objective`, so both sides agree. ``--gap``, ``--overdue`` and
  ``--descendant-unit`` override single times (``reservation_gap``, ``reservation_overdue``,
  ``descendant_unit``).

Printed side by side: every run's completion time (trigger -> last task ends), the mean, the p95 and
the makespan, real and predicted (:func:`airflow_gpu_dag.core.simulation.cross_dag.predict_runs` with the
declared
durations, the real trigger offsets, and the same controller interval).

    .venv/bin/python benchmarks/real_airflow_multi_dag.py                 # ~4-5 minutes
    .venv/bin/python benchmarks/real_airflow_multi_dag.py --json /tmp/multi.json
    .venv/bin/python benchmarks/real_airflow_multi_dag.py --order provider-first   # repeats: alternate

``--orders N`` boots nothing: it asks whether *any* order of the mix meets issue #41's targets for this
benchmark (:data:`TARGETS`), predicted with the declared durations and the offsets above. It simulates
every order of the runs (each run's tasks in critical-path order; ``N`` random ones when there are more
than :data:`EXHAUSTIVE_RUNS` runs) and ``N`` random orders of the tasks themselves (a random key per
task), each once with every wide task reserved for and once with none, then (``--climb M``) ``M`` steps
of a hill-climb over the task keys from the order nearest the targets, and prints how many meet every
target and the best each target allows the others (:func:`order_frontier`).

    .venv/bin/python benchmarks/real_airflow_multi_dag.py --orders 10000 --climb 20000  # ~4 min, no Airflow
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from controller_thread import controller_running
from multi_dag_frontier import NeverHolds

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, settings
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.core.policy.objective import STAGE_LENGTH, Objective, key_weight, run_shape
from airflow_gpu_dag.core.simulation.cross_dag import SIMULATION_EPOCH, believed_durations, predict_runs
from airflow_gpu_dag.core.simulation.simulator import SimulationResult, simulate
from airflow_gpu_dag.hooks.rest_client import parse_time
from airflow_gpu_dag.priority.trigger import parse_run_id_time
from airflow_gpu_dag.testing import AirflowCluster
from airflow_gpu_dag.testing.errors import ClusterError

POOL = "gpu"
ORDERS = ("stock-first", "provider-first")
#: Issue #41's targets for this benchmark, ratios to stock Airflow: the sweep's completion time, the
#: mean completion time over the runs, and the makespan.
TARGETS = {"sweep": 1.10, "mean": 0.85, "makespan": 1.00}
#: Up to this many runs ``--orders`` simulates every order of them (8 runs: 40,320 orders).
EXHAUSTIVE_RUNS = 8
#: Between two runs' keys in a run order: longer than any run, so the order is strict.
RUN_RANK_S = 1000.0

DAG_TEMPLATE = """
import datetime
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG
from airflow_gpu_dag import gpu_hints

MIX = {mix!r}

for prefix, rule in (("stock", "downstream"), ("provider", {rule!r})):
    for name, tasks in MIX.items():
        args = {{"weight_rule": rule, "retries": 0}}
        with DAG(f"{{prefix}}_{{name}}", schedule=None, start_date=datetime.datetime(2026, 1, 1),
                 catchup=False, max_active_tasks=64, default_args=args) as dag:
            ops = {{}}
            for t in tasks:
                gpu = t["gpus"] > 0
                ops[t["id"]] = BashOperator(
                    task_id=t["id"], bash_command=f"sleep {{t['d']}}",
                    pool="{pool}" if gpu else "default_pool", pool_slots=max(1, t["gpus"]),
                    executor_config=gpu_hints(duration=t["d"], gpus=t["gpus"] or None),
                )
            for t in tasks:
                for p in t["parents"]:
                    ops[p] >> ops[t["id"]]
        globals()[dag.dag_id] = dag
"""


def mix(capacity: int, trials: int, evals: int) -> dict[str, list[dict[str, Any]]]:
    """DAG name -> tasks ``{"id", "d" (s), "gpus", "parents"}``."""
    out: dict[str, list[dict[str, Any]]] = {
        "pipeline": [
            {"id": "prep", "d": 3, "gpus": 1, "parents": []},
            {"id": "pretrain", "d": 12, "gpus": capacity, "parents": ["prep"]},
            {"id": "finetune", "d": 8, "gpus": 1, "parents": ["pretrain"]},
            {"id": "evaluate", "d": 4, "gpus": 1, "parents": ["finetune"]},
        ],
        "sweep": [{"id": f"trial_{i}", "d": 6 + i % 3, "gpus": 1, "parents": []} for i in range(trials)]
        + [{"id": "select", "d": 1, "gpus": 0, "parents": [f"trial_{i}" for i in range(trials)]}],
    }
    for k in range(evals):
        out[f"eval_{k}"] = [{"id": "evaluate", "d": 4 + k % 3, "gpus": 1, "parents": []}]
    return out


def offsets(names: Sequence[str]) -> dict[str, float]:
    """Trigger offsets: pipeline 0 s, sweep 3 s, evaluations every 3 s from 2 s."""
    out = {"pipeline": 0.0, "sweep": 3.0}
    for k, name in enumerate(n for n in names if n.startswith("eval_")):
        out[name] = 2.0 + 3.0 * k
    return out


def graph_of(name: str, tasks: Sequence[Mapping[str, Any]], rule: str | None) -> TaskGraph:
    graph = TaskGraph(name, priority_rule=rule)
    for t in tasks:
        node = graph.add(t["id"], float(t["d"]), 0)
        if t["gpus"]:
            node.gpu, node.pool, node.pool_slots = GpuRequest(t["gpus"]), POOL, t["gpus"]
    for t in tasks:
        for parent in t["parents"]:
            graph.add_edge(parent, t["id"])
    return graph


def mix_graphs(the_mix: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[TaskGraph]:
    """The mix's DAGs as the simulator reads them (declared durations, critical-path rule), in order."""
    return [graph_of(name, tasks, "critical_path") for name, tasks in the_mix.items()]


#: The mix's tasks run seconds where the objectives' times are hours of training: each is divided by this.
TIME_SCALE = 1200.0


def settings_env(args: argparse.Namespace) -> dict[str, str]:
    """What the scheduler, the api-server and the controller are told: the pool, the objective, its stage
    length (:data:`STAGE_LENGTH` over :data:`TIME_SCALE`) and the single times given on the command
    line."""
    env = {
        "AIRFLOW__GPU_DAG__POOLS": json.dumps({POOL: args.capacity}),
        "AIRFLOW__GPU_DAG__OBJECTIVE": args.objective,
        "AIRFLOW__GPU_DAG__STAGE_LENGTH": f"{STAGE_LENGTH / TIME_SCALE:g}s",
    }
    for option, value in (
        ("RESERVATION_GAP", args.gap),
        ("RESERVATION_OVERDUE", args.overdue),
        ("DESCENDANT_UNIT", args.descendant_unit),
    ):
        if value is not None:
            env[f"AIRFLOW__GPU_DAG__{option}"] = f"{value:g}s"
    return env


def scaled_objective(args: argparse.Namespace) -> Objective:
    """The objective as the scheduler reads it under :func:`settings_env` (the environment is restored
    after: ``--orders`` runs inside other processes' tests)."""
    with mock.patch.dict(os.environ, settings_env(args)):
        return settings.objective()


def run_mix(cluster: AirflowCluster, prefix: str, when: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """Trigger every DAG of the mix at its offset (REST), wait for all runs; per DAG: trigger time,
    task (start, end) times, state."""
    started = time.monotonic()
    triggered: dict[str, tuple[float, str]] = {}

    def trigger(name: str) -> None:
        for attempt in range(6):  # SQLite: a trigger can meet "database is locked" (HTTP 500); try again
            try:
                run_id = cluster.trigger(f"{prefix}_{name}")
            except ClusterError as err:
                print(f"# trigger {prefix}_{name} failed ({err}); retrying", file=sys.stderr)
                time.sleep(0.5 * (attempt + 1))
                continue
            at = parse_run_id_time(run_id)  # when the api-server created the run: what the weights use
            triggered[name] = (at if at is not None else time.time(), run_id)
            return
        raise SystemExit(f"could not trigger {prefix}_{name}")

    timers = [threading.Timer(offset, trigger, args=(name,)) for name, offset in when.items()]
    for timer in timers:
        timer.start()
    for timer in timers:
        timer.join()
    missing = sorted(set(when) - set(triggered))
    if missing:
        raise SystemExit(f"runs not triggered: {missing}")
    out: dict[str, dict[str, Any]] = {}
    for name, (at, run_id) in triggered.items():
        state = cluster.wait_for_run(f"{prefix}_{name}", run_id, timeout=900)
        tis = cluster.task_instances(f"{prefix}_{name}", run_id)
        times = {ti["task_id"]: (parse_time(ti["start_date"]), parse_time(ti["end_date"])) for ti in tis}
        out[name] = {"trigger": at, "state": state, "times": times}
    print(f"# {prefix}: every run done after {time.monotonic() - started:.0f}s", file=sys.stderr)
    return out


def completions(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    return {
        name: max(end for _start, end in run["times"].values() if end is not None) - run["trigger"]
        for name, run in runs.items()
    }


def summary(values: Mapping[str, float], makespan: float) -> dict[str, float]:
    ordered = sorted(values.values())
    p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
    return {"mean": statistics.mean(ordered), "p95": p95, "makespan": makespan}


@dataclasses.dataclass(frozen=True)
class OrderOutcome:
    """One simulated order of the mix: ``how`` (``runs``, ``tasks`` or ``climb``), ``reserved`` (every
    wide task reserved for, or none), the run order (``runs`` only) and the ratios to stock of
    :data:`TARGETS`."""

    how: str
    reserved: bool
    order: tuple[str, ...]
    sweep: float
    mean: float
    makespan: float

    @property
    def excess(self) -> float:
        """How far above :data:`TARGETS` (0: every target met)."""
        return sum(max(0.0, getattr(self, k) - limit) for k, limit in TARGETS.items())


def _ratios(result: SimulationResult, stock: SimulationResult, names: Sequence[str]) -> tuple[float, ...]:
    ours = [r.completion for r in result.runs]
    base = [r.completion for r in stock.runs]
    start = min(r.trigger for r in stock.runs)
    sweep = names.index("sweep")
    return (
        ours[sweep] / base[sweep],
        statistics.mean(ours) / statistics.mean(base),
        (max(r.end for r in result.runs) - start) / (max(r.end for r in stock.runs) - start),
    )


def order_outcomes(
    the_mix: Mapping[str, Sequence[Mapping[str, Any]]],
    when: Mapping[str, float],
    capacity: int,
    interval: float,
    samples: int,
    seed: int = 0,
    climb: int = 0,
) -> list[OrderOutcome]:
    """Simulate the mix under many orders (see the module docstring, ``--orders``), ratios to the stock
    prediction: every order of the runs (``samples`` random ones above :data:`EXHAUSTIVE_RUNS` runs) and
    ``samples`` random task orders, each with every wide task reserved for and with none; then ``climb``
    steps of a hill-climb over the task keys from the order nearest to the targets (a step moves one
    task's key or swaps two tasks' keys, and is kept when the nearer of its two outcomes is not farther
    from the targets: outcomes ``climb``)."""
    names = list(the_mix)
    graphs = mix_graphs(the_mix)
    triggers = [when[n] for n in names]
    caps = {POOL: capacity}
    stock = predict_runs(graphs, triggers, caps, None)
    estimates = believed_durations(graphs)
    remaining = {g.dag_id: run_shape(g, caps).remaining for g in graphs}
    gates = ((True, None), (False, NeverHolds(0.0, math.inf, SIMULATION_EPOCH)))
    rng = random.Random(seed)

    def outcome(
        how: str, order: tuple[str, ...], keys: Mapping[tuple[str, str], float]
    ) -> list[OrderOutcome]:
        def weights(graph: TaskGraph, _at: float) -> dict[str, int]:
            return {
                t: key_weight(SIMULATION_EPOCH + keys[(graph.dag_id, t)], SIMULATION_EPOCH)
                for t in graph.nodes
            }

        out = []
        for reserved, gate in gates:
            result = simulate(
                list(graphs),
                caps,
                "reservation",
                interval,
                triggers=triggers,
                estimates=estimates,
                run_priority=weights,
                gate=gate,
            )
            out.append(OrderOutcome(how, reserved, order, *_ratios(result, stock, names)))
        return out

    if len(names) <= EXHAUSTIVE_RUNS:
        run_orders: Iterable[tuple[str, ...]] = itertools.permutations(names)
    else:
        run_orders = (tuple(rng.sample(names, len(names))) for _ in range(samples))
    outcomes: list[OrderOutcome] = []
    nearest: tuple[float, dict[tuple[str, str], float]] = (math.inf, {})

    def add(how: str, order: tuple[str, ...], keys: dict[tuple[str, str], float]) -> float:
        nonlocal nearest
        found = outcome(how, order, keys)
        outcomes.extend(found)
        excess = min(o.excess for o in found)
        if excess < nearest[0]:
            nearest = (excess, keys)
        return excess

    for order in run_orders:
        rank = {n: i * RUN_RANK_S for i, n in enumerate(order)}
        add("runs", order, {(n, t): rank[n] - rest for n in names for t, rest in remaining[n].items()})
    tasks = [(n, t) for n in names for t in remaining[n]]
    for _ in range(samples):
        add("tasks", (), {k: rng.random() * RUN_RANK_S for k in tasks})
    if climb:
        hill_climb(nearest[1], nearest[0], lambda trial: add("climb", (), trial), climb, rng)
    return outcomes


def hill_climb(
    keys: Mapping[Any, float],
    score: float,
    scored: Callable[[dict[Any, float]], float],
    steps: int,
    rng: random.Random,
) -> tuple[dict[Any, float], list[float]]:
    """From ``keys`` (of score ``score``), ``steps`` moves, each one key moved by ``N(0, RUN_RANK_S /
    10)`` or two keys swapped, kept when ``scored(trial)`` is not higher. Returns the keys kept last and
    the score after every step (never rising)."""
    current, best = score, dict(keys)
    names = list(best)
    path = []
    for _ in range(steps):
        trial = dict(best)
        if rng.random() < 0.5 or len(names) < 2:
            name = rng.choice(names)
            trial[name] += rng.gauss(0.0, RUN_RANK_S / 10)
        else:
            a, b = rng.sample(names, 2)
            trial[a], trial[b] = trial[b], trial[a]
        value = scored(trial)
        if value <= current:
            current, best = value, trial
        path.append(current)
    return best, path


def order_frontier(outcomes: Sequence[OrderOutcome]) -> dict[str, Any]:
    """What the simulated orders allow: how many meet every target, and, for each target, the best the
    others can be while it and the makespan's are met (None: no order meets them)."""
    limit = TARGETS

    def best(key: str, keep: str) -> OrderOutcome | None:
        kept = [o for o in outcomes if getattr(o, keep) <= limit[keep] and o.makespan <= limit["makespan"]]
        return min(kept, key=lambda o: getattr(o, key), default=None)

    return {
        "simulated": len(outcomes),
        "meeting_every_target": sum(1 for o in outcomes if o.excess == 0),
        "best_mean_with_sweep_and_makespan": best("mean", "sweep"),
        "best_sweep_with_mean_and_makespan": best("sweep", "mean"),
        "least_excess": min(outcomes, key=lambda o: o.excess, default=None),
    }


def print_frontier(frontier: Mapping[str, Any], provider: tuple[float, ...]) -> None:
    def show(o: OrderOutcome | None) -> str:
        if o is None:
            return "none"
        kind = {"tasks": "a random task order", "climb": "a task order of the climb"}.get(o.how, "")
        order = f", runs {' > '.join(o.order)}" if o.order else f", {kind}"
        held = "every wide task reserved for" if o.reserved else "no slot held"
        return f"sweep {o.sweep:.3f}, mean {o.mean:.3f}, makespan {o.makespan:.3f} ({held}{order})"

    targets = ", ".join(f"{k} <= {v:.2f}" for k, v in TARGETS.items())
    lines = [
        f"# orders of the mix, predicted, ratios to stock; targets: {targets}",
        f"simulated: {frontier['simulated']}; meeting every target: {frontier['meeting_every_target']}",
        "best mean with the sweep and the makespan met: "
        + show(frontier["best_mean_with_sweep_and_makespan"]),
        "best sweep with the mean and the makespan met: "
        + show(frontier["best_sweep_with_mean_and_makespan"]),
        f"nearest to every target: {show(frontier['least_excess'])}",
        f"the provider's keys (predicted): sweep {provider[0]:.3f}, mean {provider[1]:.3f}, "
        f"makespan {provider[2]:.3f}",
    ]
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--capacity", type=int, default=4, help="GPU pool capacity (default 4)")
    parser.add_argument("--trials", type=int, default=8, help="sweep trials (default 8)")
    parser.add_argument("--evals", type=int, default=6, help="evaluation DAGs (default 6)")
    parser.add_argument("--interval", type=float, default=2.0, help="controller interval, s (default 2)")
    parser.add_argument("--objective", default="fair", help="cross-DAG objective (default fair)")
    parser.add_argument("--gap", type=float, help="reservation gap, s (default: the objective's / 1200)")
    parser.add_argument(
        "--overdue", type=float, help="reservation overdue, s (default: the objective's / 1200)"
    )
    parser.add_argument(
        "--descendant-unit", type=float, help="fair's time per descendant task, s (default: 6 h / 1200 = 18)"
    )
    parser.add_argument(
        "--order",
        choices=ORDERS,
        default=ORDERS[0],
        help="which side runs first on the cluster (alternate it between repeats: the second side finds "
        "a warmed-up scheduler and file cache)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--orders",
        type=int,
        default=0,
        metavar="N",
        help="boot nothing: whether any order of the mix meets the targets (N random task orders)",
    )
    parser.add_argument(
        "--climb",
        type=int,
        default=0,
        metavar="N",
        help="with --orders: N steps of a hill-climb over task keys from the order nearest the targets",
    )
    args = parser.parse_args(argv)
    if args.orders < 0 or args.climb < 0:
        parser.error("--orders, --climb: a number, 0 or more")
    the_mix = mix(args.capacity, args.trials, args.evals)
    when = offsets(list(the_mix))
    if args.orders:
        started = time.time()
        frontier = order_frontier(
            order_outcomes(the_mix, when, args.capacity, args.interval, args.orders, climb=args.climb)
        )
        names = list(the_mix)
        graphs = mix_graphs(the_mix)
        triggers = [when[n] for n in names]
        objective = scaled_objective(args)
        caps = {POOL: args.capacity}
        provider = _ratios(
            predict_runs(graphs, triggers, caps, objective, args.interval),
            predict_runs(graphs, triggers, caps, None),
            names,
        )
        print_frontier(frontier, provider)
        print(f"# elapsed {time.time() - started:.0f}s")
        return 0
    env = settings_env(args)
    os.environ.update(env)  # the in-process controller reads the same settings
    caps = {POOL: args.capacity}
    with tempfile.TemporaryDirectory(prefix="gpu-dag-multi-") as folder:
        Path(folder, "mix.py").write_text(
            DAG_TEMPLATE.format(mix=the_mix, rule=CRITICAL_PATH_WEIGHT_RULE, pool=POOL)
        )
        with AirflowCluster(folder, pools=caps, parallelism=max(8, args.capacity + 4), env=env) as cluster:
            cluster.wait_for_dags([f"{p}_{n}" for p in ("stock", "provider") for n in the_mix], timeout=300)
            sides: dict[str, dict[str, dict[str, Any]]] = {}
            for side in ("stock", "provider") if args.order == "stock-first" else ("provider", "stock"):
                if side == "stock":
                    sides["stock"] = run_mix(cluster, "stock", when)
                else:
                    with controller_running(cluster, POOL, args.capacity, args.interval):
                        sides["provider"] = run_mix(cluster, "provider", when)
            stock, provider = sides["stock"], sides["provider"]
    bad = {
        f"{p}/{n}": r["state"]
        for p, rs in (("stock", stock), ("provider", provider))
        for n, r in rs.items()
        if r["state"] != "success"
    }
    if bad:
        raise SystemExit(f"runs that did not succeed: {bad}")

    names = list(the_mix)
    real: dict[str, dict[str, float]] = {"stock": completions(stock), "provider": completions(provider)}
    first = {
        p: min(r["trigger"] for r in rs.values()) for p, rs in (("stock", stock), ("provider", provider))
    }
    makespans = {
        p: max(end for r in rs.values() for _s, end in r["times"].values() if end is not None) - first[p]
        for p, rs in (("stock", stock), ("provider", provider))
    }
    # prediction: declared durations, the real trigger offsets of the provider runs
    real_offsets = [provider[n]["trigger"] - first["provider"] for n in names]
    graphs = mix_graphs(the_mix)
    scaled = scaled_objective(args)
    predicted_runs = {
        "stock": predict_runs(graphs, real_offsets, caps, None),
        "provider": predict_runs(graphs, real_offsets, caps, scaled, args.interval),
    }
    predicted = {p: {n: r.runs[i].completion for i, n in enumerate(names)} for p, r in predicted_runs.items()}
    figures = {
        "capacity": args.capacity,
        "interval_s": args.interval,
        "objective": args.objective,
        "order": args.order,
        "gap_s": scaled.gap,
        "overdue_s": scaled.gate_overdue,
        "descendant_unit_s": scaled.descendant_unit,
        "due_cap_s": scaled.overdue,
        "runs": {
            n: {
                "trigger_offset_s": round(when[n], 1),
                "real_stock_s": round(real["stock"][n], 1),
                "real_provider_s": round(real["provider"][n], 1),
                "predicted_stock_s": round(predicted["stock"][n], 1),
                "predicted_provider_s": round(predicted["provider"][n], 1),
            }
            for n in names
        },
        "summary": {
            "real_stock": summary(real["stock"], makespans["stock"]),
            "real_provider": summary(real["provider"], makespans["provider"]),
            "predicted_stock": summary(predicted["stock"], max(r.end for r in predicted_runs["stock"].runs)),
            "predicted_provider": summary(
                predicted["provider"], max(r.end for r in predicted_runs["provider"].runs)
            ),
        },
    }
    print("| DAG | trigger | stock (real) | provider (real) | ratio | stock (pred.) | provider (pred.) |")
    print("|---|---|---|---|---|---|---|")
    for n in names:
        row = figures["runs"][n]
        ratio = row["real_provider_s"] / row["real_stock_s"]
        print(
            f"| {n} | +{row['trigger_offset_s']:g}s | {row['real_stock_s']:.1f}s | "
            f"{row['real_provider_s']:.1f}s | {ratio:.2f} | {row['predicted_stock_s']:.1f}s | "
            f"{row['predicted_provider_s']:.1f}s |"
        )
    for label in ("mean", "p95", "makespan"):
        s = figures["summary"]
        stock_s, provider_s = s["real_stock"][label], s["real_provider"][label]
        print(
            f"| **{label}** | | {stock_s:.1f}s | {provider_s:.1f}s | {provider_s / stock_s:.2f} | "
            f"{s['predicted_stock'][label]:.1f}s | {s['predicted_provider'][label]:.1f}s |"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
