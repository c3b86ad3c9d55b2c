"""Team-like mixes of many DAGs for the cross-DAG benchmark (``benchmarks/multi_dag.py``).

Every pipeline, sweep and evaluation is its own DAG (``TaskGraph``), GPU tasks in pool ``"gpu"`` (slots =
GPU count), CPU tasks in Airflow's unlimited ``default_pool``. Deterministic from (variant, seed).

* variant ``"A"`` (tuning): 1-3 pipelines, 1-4 sweeps, 5-40 evaluation DAGs.
  - pipeline: 2-4 consecutive stages of clean -> pretrain -> SFT -> align; each stage is six atomic
    nodes: load (CPU), preprocess (CPU), init, train, checkpoint (the stage's 1-8 GPUs), evaluate
    (1 GPU); the next stage's load follows the checkpoint (the stage's evaluation runs beside it).
  - sweep: optional data prep (CPU), 4-12 trials of one width (1, 2 or 4 GPUs, 20-120 min each),
    each maybe followed by a 1-GPU evaluation, and maybe a select task (CPU) after all of them.
  - evaluation: one task, 5-60 min, 1 GPU (2 GPUs 15 % of the time).
  - triggers "spread": each DAG uniformly in [0, rho * GPU-seconds / capacity], rho = 1 (mode
    ``"spread:RHO"``: another rho; a smaller one is a busier pool).
* variant ``"B"`` (held out, different proportions and durations): 0-4 pipelines with longer,
  wider pre-training and any ordered subset of stages, 2-6 sweeps of 3-16 trials up to 8 GPUs,
  10-60 evaluations with log-uniform 3-90 min durations (2 GPUs 25 %), triggers from a Poisson
  process with evaluations arriving in bursts, window 0.6-1.4 x rho x GPU-seconds / capacity.
* mode ``"once"``: every trigger at 0.

Tie-break order among runs with the same trigger is the (shuffled) order of the mix.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.resources import GpuRequest
from airflow_gpu_dag.core.planning.planner import perturbed

GPU_POOL = "gpu"
KINDS = ("pipeline", "sweep", "eval")
VARIANTS = ("A", "B")  # the tuning generator and the held-out one


def check_variant(variant: str) -> str:
    """``variant`` if it names a generator; any other name (``"b"``, ``" B"``) would silently draw
    other mixes than the recorded ones.

    :raises ValueError: not one of :data:`VARIANTS`.
    """
    if variant not in VARIANTS:
        raise ValueError(f"mix generator {variant!r}: use A (tuning) or B (held out)")
    return variant


@dataclass
class Run:
    graph: TaskGraph  # estimated durations
    kind: str


class _B:
    def __init__(self, name: str, rng: random.Random) -> None:
        self.g = TaskGraph(name)
        self.rng = rng

    def task(self, tid: str, minutes: float, gpus: int = 0) -> str:
        node = self.g.add(tid, max(1.0, round(minutes * 60.0)), 0)
        if gpus:
            node.gpu = GpuRequest(gpus)
            node.pool = GPU_POOL
            node.pool_slots = gpus
        return tid

    def edge(self, up: str, down: str) -> None:
        self.g.add_edge(up, down)

    def u(self, lo: float, hi: float) -> float:
        return self.rng.uniform(lo, hi)


STAGES_A = {  # name: (gpu choices, train minutes)
    "clean": ((1, 2), (30, 90)),
    "pretrain": ((4, 8), (120, 360)),
    "sft": ((2, 4, 8), (45, 180)),
    "align": ((1, 2, 4), (30, 120)),
}
STAGES_B = {
    "clean": ((1, 2, 4), (20, 60)),
    "pretrain": ((8, 8, 4), (180, 480)),
    "sft": ((4, 8), (30, 120)),
    "align": ((2, 4), (20, 90)),
}


def _pipeline(b: _B, variant: str) -> None:
    rng = b.rng
    names = list(STAGES_A)
    k = rng.randint(2, 4)
    ev: tuple[tuple[int, int], tuple[int, ...]]
    if variant == "A":
        first = rng.randint(0, 4 - k)
        stages = names[first : first + k]
        spec = STAGES_A
        cpu_load, cpu_prep, small, ev = (5, 15), (10, 40), (3, 8), ((10, 30), (1,))
    else:
        chosen = set(rng.sample(names, k))
        stages = [n for n in names if n in chosen]
        spec = STAGES_B
        cpu_load, cpu_prep, small, ev = (2, 10), (5, 60), (2, 15), ((5, 45), (1, 1, 2))
    prev = None
    for st in stages:
        gpus = rng.choice(spec[st][0])
        load = b.task(f"{st}.load", b.u(*cpu_load))
        prep = b.task(f"{st}.preprocess", b.u(*cpu_prep))
        init = b.task(f"{st}.init", b.u(*small), gpus)
        train = b.task(f"{st}.train", b.u(*spec[st][1]), gpus)
        ckpt = b.task(f"{st}.checkpoint", b.u(*small), gpus)
        evaluate = b.task(f"{st}.evaluate", b.u(*ev[0]), rng.choice(ev[1]))
        if prev is not None:
            b.edge(prev, load)
        for up, down in ((load, prep), (prep, init), (init, train), (train, ckpt), (ckpt, evaluate)):
            b.edge(up, down)
        prev = ckpt


def _sweep(b: _B, variant: str) -> None:
    rng = b.rng
    if variant == "A":
        width = rng.choice((1, 1, 2, 2, 4))
        trials = rng.randint(4, 12)
        train, p_eval, p_prep, p_select = (20, 120), 0.6, 0.7, 0.8
    else:
        width = rng.choice((1, 2, 2, 4, 4, 8))
        trials = rng.randint(3, 16)
        train, p_eval, p_prep, p_select = (10, 150), 0.4, 0.5, 0.9
    prep = None
    if rng.random() < p_prep:
        load = b.task("load", b.u(5, 15))
        prep = b.task("preprocess", b.u(10, 30))
        b.edge(load, prep)
    has_eval = rng.random() < p_eval
    has_select = rng.random() < p_select
    ends = []
    for t in range(trials):
        tr = b.task(f"trial_{t}.train", b.u(*train), width)
        if prep is not None:
            b.edge(prep, tr)
        end = tr
        if has_eval:
            end = b.task(f"trial_{t}.evaluate", b.u(5, 15), 1)
            b.edge(tr, end)
        ends.append(end)
    if has_select:
        sel = b.task("select", 2)
        for e in ends:
            b.edge(e, sel)


def _eval(b: _B, variant: str) -> None:
    rng = b.rng
    if variant == "A":
        gpus = 2 if rng.random() < 0.15 else 1
        b.task("evaluate", b.u(5, 60), gpus)
    else:
        gpus = 2 if rng.random() < 0.25 else 1
        b.task("evaluate", math.exp(b.u(math.log(3), math.log(90))), gpus)


def make_mix(seed: int, variant: str = "A", time_scale: float = 1.0) -> list[Run]:
    """The DAGs of one mix, in tie-break order; ``time_scale``: every duration times it (whole seconds,
    at least 1), the same DAGs on a pool whose tasks are that much longer (the triggers follow: they come
    from the GPU-seconds)."""
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time scale {time_scale!r}: give a positive number")
    rng = random.Random(f"mix:{check_variant(variant)}:{seed}")
    if variant == "A":
        counts = {"pipeline": rng.randint(1, 3), "sweep": rng.randint(1, 4), "eval": rng.randint(5, 40)}
    else:
        counts = {"pipeline": rng.randint(0, 4), "sweep": rng.randint(2, 6), "eval": rng.randint(10, 60)}
    make = {"pipeline": _pipeline, "sweep": _sweep, "eval": _eval}
    runs: list[Run] = []
    for kind in KINDS:
        for i in range(counts[kind]):
            b = _B(f"{variant}{seed}-{kind}-{i:02d}", random.Random(f"{variant}:{seed}:{kind}:{i}"))
            make[kind](b, variant)
            b.g.topological_order()
            runs.append(Run(b.g, kind))
    rng.shuffle(runs)
    if time_scale != 1.0:
        for run in runs:
            for node in run.graph.nodes.values():
                node.duration = max(1.0, round(node.duration * time_scale))
    return runs


def gpu_seconds(runs: list[Run]) -> float:
    return sum(n.duration * n.gpu.count for r in runs for n in r.graph.nodes.values() if n.gpu is not None)


def spread_factor(mode: str) -> float:
    """``rho`` of a trigger mode: ``"spread"`` 1, ``"spread:0.5"`` 0.5 (the runs arrive twice as fast:
    the window is rho x GPU-seconds / capacity), ``"once"`` 0."""
    if mode == "once":
        return 0.0
    name, _, factor = mode.partition(":")
    try:
        rho = float(factor) if factor else 1.0
    except ValueError:
        rho = -1.0
    if name != "spread" or not 0.0 < rho < math.inf:
        raise ValueError(f"trigger mode {mode!r}: use once, spread or spread:RHO (RHO > 0, e.g. spread:0.5)")
    return rho


def triggers(runs: list[Run], capacity: int, mode: str, seed: int, variant: str = "A") -> list[float]:
    """Trigger time of every run (seconds, the first at 0); ``mode``: see :func:`spread_factor`."""
    rho = spread_factor(mode)
    if rho == 0.0:
        return [0.0] * len(runs)
    rng = random.Random(f"trig:{check_variant(variant)}:{seed}:{capacity}")
    window = rho * gpu_seconds(runs) / capacity
    times: list[float]
    if variant == "A":
        times = [round(rng.uniform(0.0, window)) for _ in runs]
    else:
        window *= rng.uniform(0.6, 1.4)
        big = [i for i, r in enumerate(runs) if r.kind != "eval"]
        evals = [i for i, r in enumerate(runs) if r.kind == "eval"]
        times = [0.0] * len(runs)
        # Poisson arrivals for pipelines and sweeps over the window
        t, rate = 0.0, max(1, len(big)) / window
        for i in big:
            times[i] = t
            t += rng.expovariate(rate)
        # evaluations in bursts of 3-10, burst times uniform over the window, a few minutes apart inside
        k = 0
        while k < len(evals):
            size = rng.randint(3, 10)
            at = rng.uniform(0.0, window)
            for i in evals[k : k + size]:
                times[i] = at + rng.uniform(0.0, 300.0)
            k += size
        times = [round(min(x, window)) for x in times]
    first = min(times)
    return [x - first for x in times]


def actual_graphs(runs: list[Run], noise: float, seed: int, variant: str = "A") -> list[TaskGraph]:
    """The graphs as they really run: the estimates, or (noise > 0) the estimates times
    exp(N(0, noise)) per task (log-normal, sigma = noise; seeded per run), or (noise < 0) the estimates
    times U(1 - |noise|, 1 + |noise|)."""
    if noise == 0:
        return [r.graph for r in runs]
    if noise < 0:  # uniform: actual = estimate x U(1 - |noise|, 1 + |noise|)
        out = []
        for r in runs:
            rng = random.Random(f"unoise:{variant}:{seed}:{r.graph.dag_id}")
            g = TaskGraph(r.graph.dag_id)
            for node in r.graph.nodes.values():
                g.add_task(replace(node, duration=node.duration * rng.uniform(1 + noise, 1 - noise)))
            for up, down, kind in r.graph.edges():
                g.add_edge(up, down, kind)
            out.append(g)
        return out
    return [perturbed(r.graph, noise, f"noise:{variant}:{seed}:{r.graph.dag_id}") for r in runs]
