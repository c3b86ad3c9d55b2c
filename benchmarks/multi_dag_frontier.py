"""The trade-off frontier of the cross-DAG policy: can *any* setting meet every target of issue #11?

``benchmarks/multi_dag.py`` measures the three shipped objectives. This script measures the family they
come from, on the same mixes (:mod:`mixes`) and against the same stock run, to show where the targets
conflict rather than say so. Every member orders tasks by the key of
:mod:`airflow_gpu_dag.core.policy.objective`, extended by one term::

    key(t) = T + min(s * W, W + overdue) - chain * max(0, CP - W) - c * remaining(t)

``s`` (stretch) moves small runs first (the mean completion); ``chain`` moves runs whose critical path
``CP`` is longer than their work ``W`` (pipelines) first (the makespan); ``c`` (``--remaining-weights``,
the objective's own ``chain``) is how much of a task's remaining critical path counts across runs;
``overdue`` is ``balanced``'s (8 h). ``chain = 0`` is the shipped key (``throughput`` is ``s = 2, c = 1``
always reserving, ``balanced`` ``s = 4, c = 0.5`` gated, ``latency`` ``s = 6, c = 0.5`` gated). Each
member runs with the controller reserving for every wide head (``always``) and with the ``balanced``
reservation gate (``gated``; ``--gates GAP:OVERDUE`` other constants), and with ``--reservations never``
with no slot ever held (Airflow's greedy admission on the keys alone). ``--chain-caps K`` keeps every key
at most ``T + W + K - remaining(t)``: a run whose chain is longer than its work (a pipeline) starts it
as if due ``K`` after its work. The oracles below keep ``c = 1``.

Two terms of issue #41 move toward what stock Airflow does (its ``downstream`` weight rule starts the
tasks with the most work behind them first), each known from the run's own shape when it is triggered::

    key(t) -= U * descendants(t) + a * unlocked(t)

``--downstream-units U`` (hours per descendant task: stock's weight, 1 + descendants, in time) and
``--unlocked-work a`` (``unlocked(t)``: the GPU slot-seconds of ``t`` and all its descendants over the
pool capacity, the work ``t`` unlocks, in the unit of ``W``; scale-free). Both are 0 by default (the
shipped key); both come from the *estimated* graphs, as ``W`` and ``remaining`` do. Both move keys hours
before the trigger, where ``balanced``'s gate (overdue 12 h past the key) would hold slots at once: the
gate's constants then scale with them (``--gates 96:720``: hold only 96 h ahead, overdue after 30 days;
or ``--reservations ready``, the overdue counted from the ready time, not the key), ``--due-overdues X``
keeps the due cap ``T + W + X`` apart from the gate's overdue (default: the same), and
``--descendant-caps K`` counts at most ``K`` descendants (a DAG of hundreds of tasks would otherwise be
keyed months before its trigger), and ``--descendant-orders task,lead`` counts each task's own
descendants (``task``) or its *lead*, the most descendants of any task of its run with at most its
remaining time (``lead``: what the shipped ``fair`` objective counts; the order within a run stays the
critical path's, :func:`~airflow_gpu_dag.core.policy.objective.descendant_lead`).

``--oracle`` adds two schedules no trigger-time policy can have: the packing planner
(:func:`~airflow_gpu_dag.core.planning.planner.packing_weights_plan`) run on the *whole mix* as one graph
(every run's trigger as its tasks' earliest start), its weights given to every run (``mix-plan``), and
the same with every evaluation run ahead of everything (``mix-plan+evals``; the oracle knows the kinds);
``stock-due``: ``balanced``'s keys with no run due later than stock completes it (the oracle knows
stock's completion times); and ``pipelines s=0|1|2``: ``balanced``'s keys and gate, but the pipelines
(the runs that end last) due at ``T + s * W`` (the oracle knows which runs are pipelines).

``--hold-critical yes`` makes the gate also hold slots for every wide head of the mix's critical run
(the latest trigger + critical path, estimated: the run that sets the makespan's lower bound), whatever
the gate's gap says: what holding for the run that ends last buys the makespan, and who pays for it.

``--time-scale f`` runs the same mixes with every duration times ``f``, the members' times (``--gates``,
``--downstream-units``, ``--due-overdues``) staying as given: how a setting fares on a pool of longer or
shorter tasks (``multi_dag.py --stage-length`` scales the shipped objectives instead).

``--search N`` adds an oracle that sees the outcomes: per mix, a hill-climb over one offset per run
(``key = offset - remaining(t)``; the shipped keys are ``offset = T + s * W``), starting from
``balanced``'s, the controller reserving for every wide head, ``N`` simulations, keeping the offsets
whose ratios to stock exceed issue #11's targets least on that mix (:func:`target_excess`). What it
finds, a policy that must fix weights when a run is triggered would have to find without seeing them.

Per group (generator, triggers, estimates, GPUs) the script prints each member's figures (as
``multi_dag.py``: ratios ours / stock, mean over instances; the targets it misses), then a summary:
how many members meet every target, the best makespan among members that meet the other targets, and
the best worst-kind ratio among members that meet the mean and makespan targets; and the members
ordered by issue #41's hard requirements (:func:`hard_excess`: p95 and makespan at most stock's, every
kind within 1.05x, in every group), with each member's worst figures over the groups.

    .venv/bin/python benchmarks/multi_dag_frontier.py                  # A 0-29, 8/16 GPUs, ~1 min
    .venv/bin/python benchmarks/multi_dag_frontier.py --oracle --modes once --caps 8   # + whole-mix plan
    .venv/bin/python benchmarks/multi_dag_frontier.py --stretches 3 --chains 0 --reservations gated \
        --search 600 --modes once --caps 16                                    # + search, ~6 min
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from mixes import GPU_POOL, KINDS, Run  # type: ignore[import-not-found]
from multi_dag import (  # type: ignore[import-not-found]
    KIND_LIMIT,
    TARGET_MAKESPAN,
    TARGET_MEAN,
    add_mix_arguments,
    best_makespan,
    figures,
    instance_ratios,
    measure,
    misses,
    mix_jobs,
    outcome,
    run_jobs,
    run_policy,
    simulate_weights,
)

from airflow_gpu_dag.core.model.graph import TaskGraph, task_pool, task_slots
from airflow_gpu_dag.core.planning.planner import packing_weights_plan
from airflow_gpu_dag.core.policy.objective import (
    OBJECTIVES,
    Objective,
    ReservationGate,
    RunShape,
    descendant_lead,
    key_weight,
    run_shape,
    task_keys,
)
from airflow_gpu_dag.core.simulation.cross_dag import SIMULATION_EPOCH
from airflow_gpu_dag.core.simulation.simulator import RunPriority, SimulationResult

STRETCHES = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0)
CHAINS = (0.0, 1.0, 2.0)
REMAINING_WEIGHTS = (1.0, 0.5)  # c: the shipped objectives' values
RESERVATIONS = ("always", "gated", "never", "ready")  # the default run: always, gated
PLAN_ORACLES = ("mix-plan", "mix-plan+evals")  # one whole-mix plan, two ways of giving it to the runs
#: ``pipelines s=X``: pipelines due at ``T + X * W``, every other run at ``balanced``'s (kinds known)
PIPELINE_ORACLES = {f"pipelines s={x:g}": x for x in (0.0, 1.0, 2.0)}
ORACLES = (*PLAN_ORACLES, "stock-due", *PIPELINE_ORACLES, "search")  # --oracle: all but "search" (--search N)
#: The search oracle's score weighs a makespan above its target this many times more than other misses.
SEARCH_MAKESPAN_WEIGHT = 8.0


@dataclasses.dataclass(frozen=True)
class Member:
    """One setting of the key family (see the module docstring). Variants, off by default: ``cap``
    (seconds) caps the stretch, ``due = T + min(s * W, CP + cap)``; ``inherit`` gives a GPU task the
    earlier key of a GPU task it follows (a stage's train keeps its init's key); ``chain_cap`` (seconds)
    keeps every key at most ``T + W + chain_cap - remaining(t)`` (a run whose chain is longer than its
    work starts it as if it were due ``chain_cap`` after its work); ``gate`` ``(gap, overdue)`` seconds
    replaces ``balanced``'s gate constants (and the cap ``W + overdue`` of the due time, unless
    ``due_overdue`` gives that cap's overdue); ``downstream_unit`` (seconds per descendant task) and
    ``unlocked`` move keys earlier by ``downstream_unit * descendants + unlocked * unlocked work``
    (:class:`RunTerms`), counting each task's descendant lead instead of its own count with
    ``descendant_lead``; ``hold_critical`` holds slots for every wide head of the mix's critical run
    whatever the gate says (:class:`CriticalRunHolds`)."""

    stretch: float
    chain: float
    reservation: str
    cap: float = math.inf
    inherit: bool = False
    remaining_weight: float = 1.0
    chain_cap: float = math.inf
    gate: tuple[float, float] | None = None
    downstream_unit: float = 0.0
    unlocked: float = 0.0
    due_overdue: float | None = None
    descendant_cap: float = math.inf
    descendant_lead: bool = False
    hold_critical: bool = False

    @property
    def name(self) -> str:
        extra = (f" cap={self.cap / 3600:g}h" if math.isfinite(self.cap) else "") + (
            " inherit" if self.inherit else ""
        )
        if math.isfinite(self.chain_cap):
            extra += f" chaincap={self.chain_cap / 3600:g}h"
        if self.gate is not None:
            extra += f" gate={self.gate[0] / 3600:g}h/{self.gate[1] / 3600:g}h"
        if self.downstream_unit:
            extra += f" U={self.downstream_unit / 3600:g}h"
        if self.unlocked:
            extra += f" a={self.unlocked:g}"
        if self.due_overdue is not None:
            extra += f" due={self.due_overdue / 3600:g}h"
        if math.isfinite(self.descendant_cap):
            extra += f" dcap={self.descendant_cap:g}"
        if self.descendant_lead:
            extra += " lead"
        if self.hold_critical:
            extra += " hold-critical"
        c = f" c={self.remaining_weight:g}" if self.remaining_weight != 1.0 else ""
        return f"s={self.stretch:g} chain={self.chain:g}{c} {self.reservation}{extra}"

    def gate_constants(self) -> tuple[float, float]:
        """``(gap, overdue)``: the member's, else ``balanced``'s."""
        balanced = OBJECTIVES["balanced"]
        return self.gate if self.gate is not None else (balanced.gap, balanced.overdue)


def members(
    stretches: Sequence[float],
    chains: Sequence[float],
    reservations: Sequence[str],
    caps: Sequence[float] = (math.inf,),
    inherit: Sequence[bool] = (False,),
    remaining_weights: Sequence[float] = (1.0,),
    chain_caps: Sequence[float] = (math.inf,),
    gates: Sequence[tuple[float, float] | None] = (None,),
    downstream_units: Sequence[float] = (0.0,),
    unlocked: Sequence[float] = (0.0,),
    due_overdues: Sequence[float | None] = (None,),
    descendant_caps: Sequence[float] = (math.inf,),
    descendant_leads: Sequence[bool] = (False,),
    hold_critical: Sequence[bool] = (False,),
) -> list[Member]:
    return [
        Member(s, c, r, x, i, w, k, g, u, a, d, n, lead, h)
        for s in stretches
        for c in chains
        for w in remaining_weights
        for r in reservations
        for x in caps
        for i in inherit
        for k in chain_caps
        for g in gates
        for u in downstream_units
        for a in unlocked
        for d in due_overdues
        for n in descendant_caps
        for lead in descendant_leads
        for h in hold_critical
    ]


@dataclasses.dataclass(frozen=True)
class RunTerms:
    """Per task of a DAG, what the issue #41 terms read: ``descendants`` (stock's ``downstream`` weight
    less 1) and ``unlocked`` (the GPU slot-seconds of the task and all its descendants over the pool
    capacity, seconds)."""

    descendants: dict[str, int]
    unlocked: dict[str, float]


def run_terms(graph: TaskGraph, capacity: int) -> RunTerms:
    """The :class:`RunTerms` of ``graph`` (its durations: pass the estimated graph) on ``capacity`` GPUs."""
    own = {
        t: node.duration * task_slots(node) if task_pool(node) == GPU_POOL else 0.0
        for t, node in graph.nodes.items()
    }
    descendants = {t: graph.descendants(t) for t in graph.nodes}
    return RunTerms(
        {t: len(d) for t, d in descendants.items()},
        {t: (own[t] + sum(own[d] for d in below)) / capacity for t, below in descendants.items()},
    )


def inherited_keys(graph: TaskGraph, keys: Mapping[str, float]) -> dict[str, float]:
    """``keys`` with every GPU task's key at most that of the GPU tasks it follows."""
    out = dict(keys)
    for task_id in graph.topological_order():
        if graph.nodes[task_id].gpu is None:
            continue
        for up in graph.upstream(task_id):
            if graph.nodes[up].gpu is not None:
                out[task_id] = min(out[task_id], out[up])
    return out


def member_priority(
    member: Member, shapes: Mapping[str, Any], terms: Mapping[str, RunTerms] | None = None
) -> RunPriority:
    """The weights of ``member`` for every run: the objective's keys, the trigger moved earlier by
    ``chain * max(0, CP - W)`` (and the member's variants); ``shapes`` and ``terms``
    (:func:`run_terms`, needed when the member has an issue #41 term) by DAG id, of the estimated
    graphs."""
    overdue = member.gate_constants()[1] if member.due_overdue is None else member.due_overdue
    objective = Objective(member.name, member.stretch, 0.0, overdue, member.remaining_weight)
    needs_terms = bool(member.downstream_unit or member.unlocked)

    def weights(graph: TaskGraph, trigger: float) -> dict[str, int]:
        shape = shapes[graph.dag_id]
        chain = max(shape.remaining.values(), default=0.0)
        moved = trigger - member.chain * max(0.0, chain - shape.work)
        moved -= max(0.0, objective.due_offset(shape.work) - (chain + member.cap))  # 0 unless capped
        keys = task_keys(shape, moved, objective)
        if math.isfinite(member.chain_cap):
            latest = trigger + shape.work + member.chain_cap
            keys = {t: min(k, latest - shape.remaining[t]) for t, k in keys.items()}
        if needs_terms:
            if terms is None:
                raise ValueError(f"{member.name}: the downstream and unlocked terms need run_terms")
            extra = terms[graph.dag_id]
            counted = {t: int(min(extra.descendants[t], member.descendant_cap)) for t in keys}
            if member.descendant_lead:
                counted = descendant_lead(counted, shape.remaining)
            keys = {
                t: k - member.downstream_unit * counted[t] - member.unlocked * extra.unlocked[t]
                for t, k in keys.items()
            }
        if member.inherit:
            keys = inherited_keys(graph, keys)
        return {t: key_weight(k, SIMULATION_EPOCH) for t, k in keys.items()}

    return weights


class NeverHolds(ReservationGate):
    """A gate that never holds slots, not even for a starving task: the pool stays at its capacity and
    Airflow's greedy admission runs on the keys alone (no wait bound: a frontier point, not a policy)."""

    def verdict(self, now: float, head: Any, competitor: Any, starving: Any = None) -> dict[str, Any]:
        return {"code": "not-urgent-enough"}


@dataclasses.dataclass(frozen=True)
class CriticalRunHolds(ReservationGate):
    """The member's gate, but slots are always held for a wide head of ``critical``: the run of the mix
    with the latest ``T + CP`` (estimated), which sets the lower bound of the makespan. A frontier point
    (``--hold-critical yes``): does holding for the run that ends last buy the makespan, and who pays?"""

    inner: ReservationGate | None = None
    critical: str = ""

    def verdict(self, now: float, head: Any, competitor: Any, starving: Any = None) -> dict[str, Any]:
        assert self.inner is not None
        found = self.inner.verdict(now, head, competitor, starving)
        if found["code"] == "not-urgent-enough" and head.run == self.critical:
            return {"code": "reserving"}
        return found


def critical_run(shapes: Sequence[RunShape], trigger: Sequence[float]) -> str:
    """The simulator's run name (its index) of the run with the latest trigger + critical path."""
    ends = [t + max(shape.remaining.values(), default=0.0) for t, shape in zip(trigger, shapes, strict=True)]
    return str(max(range(len(ends)), key=ends.__getitem__))


def member_gate(member: Member) -> ReservationGate:
    """``always``: every wide head reserved for (gap 0, as ``throughput``); ``gated``: ``balanced``'s
    gate (or the member's ``gate``); both with that ``overdue``, after which a waiting task starves;
    ``ready``: ``gated`` with the overdue counted from the ready time only, no hold for a head past its
    key (``fair``'s gate); ``never``: no slot ever held (:class:`NeverHolds`)."""
    gap, overdue = member.gate_constants()
    if member.reservation == "never":
        return NeverHolds(0.0, overdue, SIMULATION_EPOCH)
    if member.reservation == "ready":  # fair's gate: no hold for a head past its key
        return ReservationGate(gap, overdue, SIMULATION_EPOCH, past_key_holds=False)
    return ReservationGate(0.0 if member.reservation == "always" else gap, overdue, SIMULATION_EPOCH)


def mix_graph(graphs: Sequence[TaskGraph], trigger: Sequence[float]) -> TaskGraph:
    """The whole mix as one graph: task ``<run index>/<task id>``, each run's tasks not before its
    trigger."""
    mix = TaskGraph("mix")
    for i, (graph, at) in enumerate(zip(graphs, trigger, strict=True)):
        for task_id, node in graph.nodes.items():
            mix.add_task(
                dataclasses.replace(
                    node, task_id=f"{i}/{task_id}", attrs=dict(node.attrs), not_before=node.not_before + at
                )
            )
        for up, down, kind in graph.edges():
            mix.add_edge(f"{i}/{up}", f"{i}/{down}", kind)
    return mix


def mix_plan(
    estimated: Sequence[TaskGraph], trigger: Sequence[float], capacity: int, interval: float
) -> dict[str, int]:
    """The packing planner's weights for the whole mix (:func:`mix_graph`), by ``<run index>/<task id>``."""
    return packing_weights_plan(
        mix_graph(estimated, trigger), {GPU_POOL: capacity}, "reservation", controller_interval=interval
    ).weights


def oracle_priority(
    name: str, plan: Mapping[str, int], runs: Sequence[Run], actual: Sequence[TaskGraph]
) -> RunPriority:
    """The whole-mix plan's weights per run (``mix-plan+evals``: evaluation runs above all others)."""
    ahead = max(plan.values(), default=0) + 1 if name == "mix-plan+evals" else 0
    index = {id(g): i for i, g in enumerate(actual)}

    def weights(graph: TaskGraph, at: float) -> dict[str, int]:
        i = index[id(graph)]
        boost = ahead if runs[i].kind == "eval" else 0
        return {t: plan[f"{i}/{t}"] + boost for t in graph.nodes}

    return weights


def offset_priority(
    offsets: Sequence[float], shapes: Sequence[Any], actual: Sequence[TaskGraph]
) -> RunPriority:
    """Weights ``key = offsets[i] - remaining(t)`` for the tasks of run ``i`` (the shipped key is
    ``offsets[i] = T + s * W``)."""
    index = {id(g): i for i, g in enumerate(actual)}

    def weights(graph: TaskGraph, at: float) -> dict[str, int]:
        i = index[id(graph)]
        return {t: key_weight(offsets[i] - rest, SIMULATION_EPOCH) for t, rest in shapes[i].remaining.items()}

    return weights


def mix_ratios(result: SimulationResult, stock: SimulationResult, kinds: Sequence[str]) -> dict[str, float]:
    """One mix's :func:`multi_dag.instance_ratios` from two simulations of it."""
    start = min(r.trigger for r in stock.runs)
    return instance_ratios(outcome(result, start), outcome(stock, start), kinds)


def target_excess(capacity: int, ratios: Mapping[str, float]) -> float:
    """How far one mix's :func:`mix_ratios` are above issue #11's targets (0: all met on this mix); the
    makespan's excess counts :data:`SEARCH_MAKESPAN_WEIGHT` times."""
    excess = max(0.0, ratios["mean"] - TARGET_MEAN.get(capacity, 1.0))
    excess += SEARCH_MAKESPAN_WEIGHT * max(0.0, ratios["makespan"] - TARGET_MAKESPAN.get(capacity, 1.0))
    excess += max(0.0, ratios["p95"] - 1.0)
    return excess + sum(max(0.0, ratios[k] - 1.05) for k in KINDS if k in ratios)


def search_offsets(
    simulate_offsets: Callable[[list[float]], Any],
    start: Sequence[float],
    kinds: Sequence[str],
    score: Callable[[Any], float],
    iterations: int,
    scale: float,
    rng: random.Random,
) -> tuple[list[float], Any]:
    """Hill-climb the per-run offsets from ``start``: each step moves one run's offset by
    ``N(0, scale)``, swaps two runs' offsets, or moves every run of one kind by ``N(0, scale)``, and keeps
    the move when ``score(simulate_offsets(offsets))`` is not worse. Returns the best offsets and their
    simulation."""
    best = list(start)
    result = simulate_offsets(best)
    value = score(result)
    for _ in range(iterations):
        trial = list(best)
        move = rng.random()
        if move < 0.4:
            i = rng.randrange(len(trial))
            trial[i] += rng.gauss(0, scale)
        elif move < 0.7 and len(trial) > 1:
            i, j = rng.sample(range(len(trial)), 2)
            trial[i], trial[j] = trial[j], trial[i]
        else:
            kind, delta = rng.choice(KINDS), rng.gauss(0, scale)
            trial = [x + delta if k == kind else x for x, k in zip(trial, kinds, strict=True)]
        candidate = simulate_offsets(trial)
        candidate_value = score(candidate)
        if candidate_value <= value:
            best, result, value = trial, candidate, candidate_value
    return best, result


def one_instance(job: tuple) -> dict[str, Any]:
    variant, seed, capacity, mode, estimates, settings, oracle, search, interval, *rest = job
    time_scale = rest[0] if rest else 1.0  # mix_jobs: the mixes' --time-scale

    def simulations(
        runs: list[Run], estimated: list[TaskGraph], actual: list[TaskGraph], trigger: list[float]
    ) -> Iterator[tuple[str, SimulationResult]]:
        stock = run_policy("stock", actual, estimated, trigger, capacity, interval)
        yield "stock", stock
        shapes = [run_shape(g, {GPU_POOL: capacity}) for g in estimated]
        by_dag = {g.dag_id: shape for g, shape in zip(estimated, shapes, strict=True)}
        terms = {g.dag_id: run_terms(g, capacity) for g in estimated}
        for member in settings:
            priority = member_priority(member, by_dag, terms)
            gate = member_gate(member)
            if member.hold_critical:
                gate = CriticalRunHolds(
                    gate.gap,
                    gate.overdue,
                    gate.epoch,
                    gate.past_key_holds,
                    gate,
                    critical_run(shapes, trigger),
                )
            yield (
                member.name,
                simulate_weights(priority, actual, estimated, trigger, capacity, interval, gate),
            )
        plan = mix_plan(estimated, trigger, capacity, interval) if oracle else {}
        for name in PLAN_ORACLES if oracle else ():
            priority = oracle_priority(name, plan, runs, actual)
            yield name, simulate_weights(priority, actual, estimated, trigger, capacity, interval)
        stretch = OBJECTIVES["balanced"].stretch
        balanced = [
            t + OBJECTIVES["balanced"].due_offset(shape.work)
            for t, shape in zip(trigger, shapes, strict=True)
        ]
        if oracle:  # balanced, but no run due later than stock completes it
            due = [min(b, r.trigger + r.completion) for b, r in zip(balanced, stock.runs, strict=True)]
            priority = offset_priority(due, shapes, actual)
            gate = member_gate(Member(stretch, 0.0, "gated"))
            yield (
                "stock-due",
                simulate_weights(priority, actual, estimated, trigger, capacity, interval, gate),
            )
            for name, pipeline_stretch in PIPELINE_ORACLES.items():  # the makespan's runs first
                due = [
                    t + pipeline_stretch * shape.work if r.kind == "pipeline" else b
                    for t, r, shape, b in zip(trigger, runs, shapes, balanced, strict=True)
                ]
                priority = offset_priority(due, shapes, actual)
                yield name, simulate_weights(priority, actual, estimated, trigger, capacity, interval, gate)
        if search:
            kinds = [r.kind for r in runs]
            _, best = search_offsets(
                lambda offsets: simulate_weights(
                    offset_priority(offsets, shapes, actual), actual, estimated, trigger, capacity, interval
                ),
                balanced,
                kinds,
                lambda result: target_excess(capacity, mix_ratios(result, stock, kinds)),
                search,
                2 * statistics.mean(shape.work for shape in shapes),
                random.Random(seed * 7 + capacity),
            )
            yield "search", best

    return measure(variant, seed, capacity, mode, estimates, simulations, time_scale)


def worst_kind(f: Mapping[str, float]) -> float:
    """The largest mean completion ratio over the run kinds present (a kind absent from every mix is NaN)."""
    return max((f[k] for k in KINDS if not math.isnan(f[k])), default=math.nan)


def hard_excess(f: Mapping[str, float]) -> float:
    """How far one group's figures are above issue #41's hard requirements for the default objective
    (p95 and makespan at most stock's, every kind's mean completion at most :data:`KIND_LIMIT` x stock's):
    the largest excess, 0 when all hold."""
    kind = worst_kind(f)
    return max(0.0, f["p95"] - 1.0, f["makespan"] - 1.0, 0.0 if math.isnan(kind) else kind - KIND_LIMIT)


def hard_summary(groups: Mapping[tuple, Mapping[str, Mapping[str, float]]]) -> list[dict[str, Any]]:
    """Per member, over every group of ``groups`` ((variant, mode, estimates, capacity) -> name ->
    figures): the worst :func:`hard_excess`, the worst p95, makespan and kind, and the range of the mean
    per capacity; members that keep the requirements first, then by their largest mean."""
    names = {n for rows in groups.values() for n in rows}
    out: list[dict[str, Any]] = []
    for name in names:
        rows = [(g, r[name]) for g, r in groups.items() if name in r]
        means: dict[int, list[float]] = defaultdict(list)
        for g, f in rows:
            means[g[3]].append(f["mean"])
        out.append(
            {
                "name": name,
                "excess": max(hard_excess(f) for _, f in rows),
                "p95": max(f["p95"] for _, f in rows),
                "makespan": max(f["makespan"] for _, f in rows),
                "kind": max(worst_kind(f) for _, f in rows),
                "mean": {c: (min(v), max(v)) for c, v in sorted(means.items())},
            }
        )
    out.sort(key=lambda s: (round(s["excess"], 4), max(hi for _, hi in s["mean"].values()), s["name"]))
    return out


def summary(capacity: int, rows: Mapping[str, Mapping[str, float]], best: float) -> dict[str, Any]:
    """Of the members' figures ``rows`` (name -> :func:`multi_dag.figures`): which meet every target,
    ``(name, makespan)`` of the best makespan among those meeting every other target, ``(name, ratio)``
    of the best worst-kind ratio among those meeting the mean and makespan targets (None: no member
    qualifies)."""
    missed = {name: misses(capacity, f, best) for name, f in rows.items()}
    others = [n for n, m in missed.items() if all(x.startswith("makespan") for x in m)]
    fast = [n for n, m in missed.items() if not any(x == "mean" or x.startswith("makespan") for x in m)]
    by_makespan = min(others, key=lambda n: rows[n]["makespan"], default=None)
    by_kind = min(fast, key=lambda n: worst_kind(rows[n]), default=None)
    return {
        "members": len(rows),
        "meet_every_target": [n for n, m in missed.items() if not m],
        "best_makespan_else_on_target": None
        if by_makespan is None
        else (by_makespan, rows[by_makespan]["makespan"]),
        "best_worst_kind_with_mean_and_makespan": None
        if by_kind is None
        else (by_kind, worst_kind(rows[by_kind])),
    }


def report(
    results: Sequence[Mapping[str, Any]], names: Sequence[str], file: Any = None
) -> list[dict[str, Any]]:
    """Print every group's members and its summary; returns the summaries."""
    file = file or sys.stdout  # resolved per call: a captured stdout changes
    groups: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for inst in results:
        groups[(inst["variant"], inst["mode"], inst["estimates"], inst["capacity"])].append(inst)
    out = []
    family_rows: dict[tuple, dict[str, Mapping[str, float]]] = {}
    for (variant, mode, estimates, capacity), insts in sorted(groups.items()):
        best = best_makespan(insts)
        rows = {name: figures(insts, name) for name in names}
        family_rows[(variant, mode, estimates, capacity)] = {
            n: f for n, f in rows.items() if n not in ORACLES
        }
        print(
            f"\n## {variant}, {mode}, {estimates}, {capacity} GPUs "
            f"({len(insts)} mixes; best makespan {best:.3f})",
            file=file,
        )
        print("| setting | mean | p95 | makespan | pipeline | sweep | eval | misses |", file=file)
        print("|---|---|---|---|---|---|---|---|", file=file)
        for name in sorted(rows, key=lambda n: rows[n]["mean"]):
            f = rows[name]
            print(
                f"| {name} | {f['mean']:.3f} | {f['p95']:.3f} | {f['makespan']:.3f} | {f['pipeline']:.3f} | "
                f"{f['sweep']:.3f} | {f['eval']:.3f} | {', '.join(misses(capacity, f, best)) or 'none'} |",
                file=file,
            )
        family = {n: f for n, f in rows.items() if n not in ORACLES}
        s = summary(capacity, family, best)
        s.update(variant=variant, mode=mode, estimates=estimates, capacity=capacity)
        out.append(s)
    print("\n## Summary: the key family (oracles excluded)", file=file)
    print(
        "| set | triggers | estimates | GPUs | settings | meet every target | "
        "best makespan, every other target met | best worst kind, mean and makespan met |",
        file=file,
    )
    print("|---|---|---|---|---|---|---|---|", file=file)
    for s in out:
        mk, kind = s["best_makespan_else_on_target"], s["best_worst_kind_with_mean_and_makespan"]
        print(
            f"| {s['variant']} | {s['mode']} | {s['estimates']} | {s['capacity']} | {s['members']} | "
            f"{len(s['meet_every_target'])} | {f'{mk[1]:.3f} ({mk[0]})' if mk else '—'} | "
            f"{f'{kind[1]:.3f} ({kind[0]})' if kind else '—'} |",
            file=file,
        )
    print(
        f"\n## Issue #41 hard requirements over all {len(family_rows)} groups (excess: the largest of "
        "p95 - 1, makespan - 1, worst kind - 1.05, 0)",
        file=file,
    )
    print("| setting | excess | worst p95 | worst makespan | worst kind | mean per GPUs |", file=file)
    print("|---|---|---|---|---|---|", file=file)
    for h in hard_summary(family_rows):
        means = ", ".join(f"{c}: {lo:.3f}-{hi:.3f}" for c, (lo, hi) in h["mean"].items())
        print(
            f"| {h['name']} | {h['excess']:.3f} | {h['p95']:.3f} | {h['makespan']:.3f} | {h['kind']:.3f} | "
            f"{means} |",
            file=file,
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_mix_arguments(parser, caps="8,16", modes="once,spread", estimates="exact")
    parser.add_argument("--stretches", default=",".join(f"{s:g}" for s in STRETCHES), help="values of s")
    parser.add_argument("--chains", default=",".join(f"{c:g}" for c in CHAINS), help="values of chain")
    parser.add_argument(
        "--remaining-weights",
        default=",".join(f"{c:g}" for c in REMAINING_WEIGHTS),
        help="values of c, in (0, 1]",
    )
    parser.add_argument("--reservations", default="always,gated", help="always, gated, never")
    parser.add_argument(
        "--chain-caps", default="inf", help="hours K: keys at most T + W + K - remaining; inf: none"
    )
    parser.add_argument(
        "--gates", default="balanced", help="gated's GAP:OVERDUE in hours (e.g. 4:8,8:12); balanced: its own"
    )
    parser.add_argument(
        "--stretch-caps", default="inf", help="hours X of the cap due = T + min(s W, CP + X); inf: none"
    )
    parser.add_argument("--inherit", default="no", help="no, yes: GPU tasks keep their GPU parents' keys")
    parser.add_argument(
        "--downstream-units",
        default="0",
        help="hours U per descendant task: key - U * descendants (stock's weight, in time); 0: none",
    )
    parser.add_argument(
        "--due-overdues",
        default="gate",
        help="hours X of the due cap T + W + X (gate: the gate's overdue, as balanced)",
    )
    parser.add_argument(
        "--descendant-caps",
        default="inf",
        help="at most K descendants counted by --downstream-units (inf: all)",
    )
    parser.add_argument(
        "--descendant-orders",
        default="task",
        help="task (each task's own count), lead (the most of any task with at most its remaining time)",
    )
    parser.add_argument(
        "--hold-critical",
        default="no",
        help="no, yes: slots always held for the wide heads of the run with the latest T + CP",
    )
    parser.add_argument(
        "--unlocked-work",
        default="0",
        help="values of a: key - a * (GPU work of the task and its descendants / capacity); 0: none",
    )
    parser.add_argument(
        "--oracle",
        action="store_true",
        help="also the whole-mix plans (slow: plans every mix) and stock-due (stock's completion times)",
    )
    parser.add_argument(
        "--search",
        type=int,
        default=0,
        metavar="N",
        help="also the search oracle: N simulations per mix (600: ~6 min per group of 30 mixes)",
    )
    args = parser.parse_args(argv)
    reservations = [r for r in args.reservations.split(",") if r]
    if set(reservations) - set(RESERVATIONS):
        parser.error(f"reservations: use {', '.join(RESERVATIONS)}")
    if args.search < 0:
        parser.error("--search: a number of simulations per mix, 0 (off) or more")
    inherit = [i for i in args.inherit.split(",") if i]
    if set(inherit) - {"no", "yes"}:
        parser.error("--inherit: use no, yes")
    try:
        caps = [float(x) * 3600.0 for x in args.stretch_caps.split(",")]
    except ValueError:
        parser.error("--stretch-caps: hours, e.g. inf,2,4")
    if any(not x > 0 for x in caps):
        parser.error("--stretch-caps: hours > 0 (inf: no cap)")
    try:
        chain_caps = [float(x) * 3600.0 for x in args.chain_caps.split(",")]
        gates: list[tuple[float, float] | None] = [
            None if g == "balanced" else (float(g.split(":")[0]) * 3600.0, float(g.split(":")[1]) * 3600.0)
            for g in args.gates.split(",")
            if g
        ]
    except (ValueError, IndexError):
        parser.error("--chain-caps: hours (inf: none); --gates: GAP:OVERDUE hours or balanced")
    if any(not x >= 0 for x in chain_caps) or any(g is not None and min(g) < 0 for g in gates):
        parser.error("--chain-caps and --gates: hours >= 0")
    try:
        weights = [float(c) for c in args.remaining_weights.split(",") if c]
    except ValueError:
        parser.error("--remaining-weights: numbers in (0, 1], e.g. 1,0.5")
    if any(not 0 < c <= 1 for c in weights):
        parser.error("--remaining-weights: numbers in (0, 1], e.g. 1,0.5")
    try:
        units = [float(u) * 3600.0 for u in args.downstream_units.split(",") if u]
        unlocked = [float(a) for a in args.unlocked_work.split(",") if a]
    except ValueError:
        parser.error("--downstream-units: hours >= 0; --unlocked-work: numbers >= 0")
    if any(not (math.isfinite(x) and x >= 0) for x in [*units, *unlocked]) or not units or not unlocked:
        parser.error("--downstream-units: hours >= 0; --unlocked-work: numbers >= 0")
    try:
        dues = [None if d == "gate" else float(d) * 3600.0 for d in args.due_overdues.split(",") if d]
    except ValueError:
        parser.error("--due-overdues: hours (or gate)")
    if not dues or any(d is not None and not 0 <= d <= 30 * 24 * 3600.0 for d in dues):
        parser.error("--due-overdues: hours from 0 to 720 (or gate)")
    try:
        descendant_caps = [float(k) for k in args.descendant_caps.split(",") if k]
    except ValueError:
        parser.error("--descendant-caps: numbers of tasks >= 0 (inf: all)")
    if not descendant_caps or any(not k >= 0 for k in descendant_caps):
        parser.error("--descendant-caps: numbers of tasks >= 0 (inf: all)")
    orders = [o for o in args.descendant_orders.split(",") if o]
    if not orders or set(orders) - {"task", "lead"}:
        parser.error("--descendant-orders: use task, lead")
    hold = [h for h in args.hold_critical.split(",") if h]
    if not hold or set(hold) - {"no", "yes"}:
        parser.error("--hold-critical: use no, yes")
    settings = members(
        [float(s) for s in args.stretches.split(",")],
        [float(c) for c in args.chains.split(",")],
        reservations,
        caps,
        [i == "yes" for i in inherit],
        weights,
        chain_caps,
        gates,
        units,
        unlocked,
        dues,
        descendant_caps,
        [o == "lead" for o in orders],
        [h == "yes" for h in hold],
    )
    jobs = mix_jobs(args, settings, args.oracle, args.search)
    started = time.time()
    results = run_jobs(one_instance, jobs, args.jobs)
    print(
        f"# key-family frontier: {len(jobs)} mixes x {len(settings)} settings; "
        "ratios ours / stock, mean over mixes"
    )
    oracles = [n for n in ORACLES if (args.search if n == "search" else args.oracle)]
    report(results, [m.name for m in settings] + oracles)
    print(f"\n# elapsed {time.time() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
