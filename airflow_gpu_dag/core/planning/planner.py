"""The planned priority rule ``packing``: simulate the rules, improve the schedules, keep the best.

:func:`packing_weights_plan` simulates every candidate rule of
:mod:`airflow_gpu_dag.core.analysis.weight_rules` (and
perturbations of them) under Airflow's admission, improves the schedules by justification
(:mod:`airflow_gpu_dag.core.planning.justification`) and, optionally, a seeded local search over the start
order
(:func:`search_order`), and keeps the weights whose predicted schedule is shortest. Never worse than
any candidate (Airflow's ``downstream`` included) in the model. :func:`resolve_rule` resolves any rule
name, ``packing`` included, for the simulator; :func:`predict` simulates a DAG under the rule it
declares, as the CLI and the UI show it.
"""

from __future__ import annotations

import math
import random
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from airflow_gpu_dag.core.analysis.bounds import lower_bound
from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.analysis.estimates import planning_error
from airflow_gpu_dag.core.analysis.weight_rules import (
    PriorityRule,
    clamp_int32,
    critical_path_weights,
    plan_order_weights,
    resolve_priority,
)
from airflow_gpu_dag.core.model.graph import TaskGraph, task_pool
from airflow_gpu_dag.core.model.ladders import fitted_once
from airflow_gpu_dag.core.planning.hedging import FINAL_WORLDS, FINALISTS, final_choice, perturbed, worlds
from airflow_gpu_dag.core.planning.justification import (
    TaskTable,
    justify,
    ordered_schedule,
    priority_serial_schedule,
)
from airflow_gpu_dag.core.simulation.simulator import (
    SimulationResult,
    SimulationTables,
    default_rule,
    simulate,
)

__all__ = [
    "JUSTIFY_BUDGET",
    "PACKING_CANDIDATES",
    "SEARCH_BUDGET",
    "PackingPlan",
    "packing_rule",
    "packing_weights_plan",
    "perturbed",
    "planned_remaining",
    "predict",
    "resolve_rule",
    "search_order",
]

_GreedyRun = tuple[float, str, dict[str, int], dict[str, float]]
_Justified = tuple[float, str, dict[str, float]]
_Stage = tuple[list[_GreedyRun], list[_GreedyRun], list[_Justified]]
_STAGE_CACHE: weakref.WeakKeyDictionary[TaskGraph, dict[tuple, _Stage]] = weakref.WeakKeyDictionary()


def _greedy_stage(
    graph: TaskGraph,
    capacity: Mapping[str, int],
    candidates: tuple[str, ...],
    justify_rounds: int,
    samples: int,
    serial_samples: int = 0,
    tables: Callable[[], SimulationTables] | None = None,
) -> tuple[list[_GreedyRun], list[_GreedyRun], list[_Justified]]:
    """Steps 1-2 of the plan, cached per graph object so that planning for both admission policies
    costs them once (do not mutate a graph after planning it): greedy runs of every candidate rule,
    greedy runs of ``samples`` seeded perturbations of their weights (each weight times
    ``1 +/- eps``, ``eps`` up to 0.3: other tie-breaks of almost the same priority), and the
    justification of the candidates' schedules and of the two best sampled ones (the
    ``_JUSTIFIED_KEPT`` shortest justified schedules are returned). ``tables``: gives the simulator's
    tables of ``graph`` on ``capacity``, built once for all the plan's simulations."""

    key = (tuple(sorted(capacity.items())), candidates, justify_rounds, samples, serial_samples)
    per_graph = _STAGE_CACHE.setdefault(graph, {})
    if key in per_graph:
        return per_graph[key]

    bound = lower_bound(graph, {p: int(c) for p, c in capacity.items()})  # as simulate() has it, once
    table = TaskTable(graph)  # what justification reads of the graph, once
    built: list[SimulationTables] = []

    def tables_of_graph() -> SimulationTables:
        if tables is not None:
            return tables()
        if not built:
            built.append(SimulationTables.build(graph, capacity))
        return built[0]

    def greedy(label: str, weights: dict[str, int]) -> _GreedyRun:
        result = simulate(
            graph,
            capacity,
            "critical_path",
            priority=lambda g: weights,
            _lower_bound=bound,
            _tables=tables_of_graph(),
        )
        return (result.makespan, label, weights, {t.task_id: t.start for t in result.schedule})

    runs = [
        greedy(name, {t: clamp_int32(w) for t, w in resolve_priority(name, capacity)(graph).items()})
        for name in candidates
    ]
    sampled: list[_GreedyRun] = []
    rng = random.Random(f"{graph.dag_id}:{len(graph)}")
    for k in range(samples if runs else 0):
        _m, name, base, _s = runs[k % len(runs)]
        eps = rng.uniform(0.05, 0.3)
        weights = {t: clamp_int32(w * (1 + rng.uniform(-eps, eps))) for t, w in base.items()}
        sampled.append(greedy(f"{name}~{k}", weights))
    sampled.sort(key=lambda r: r[0])
    justified: list[_Justified] = []
    for _makespan, name, _weights, start in [*runs, *sampled[:2]]:
        improved, makespan = justify(graph, capacity, start, max_rounds=justify_rounds, table=table)
        justified.append((makespan, name, improved))
    justified.extend(_serial_samples(graph, capacity, serial_samples, table))
    justified.sort(key=lambda j: j[0])
    per_graph[key] = (runs, sampled, justified[:_JUSTIFIED_KEPT])
    return per_graph[key]


def _serial_samples(
    graph: TaskGraph, capacity: Mapping[str, int], count: int, table: TaskTable | None = None
) -> list[_Justified]:
    """Biased random sampling (Kolisch's regret-based sampling, simplified): ``count`` serial
    schedules (:func:`~airflow_gpu_dag.core.planning.justification.priority_serial_schedule`) by the
    critical-path priority times ``exp(N(0, sigma))`` (``sigma`` from 0.05 to 0.4, seeded), each
    justified twice; the two shortest are returned. Serial generation places a task into a hole left
    by earlier placed work, which greedy admission cannot; that packs rigid tasks of mixed widths
    (BLAST shards, mosaic tiles) much better."""
    if count <= 0 or len(graph) < 2:
        return []

    remaining = {t: timing.remaining for t, timing in analyze(graph).timings.items()}
    rng = random.Random(f"serial:{graph.dag_id}:{len(graph)}")
    found: list[_Justified] = []
    for k in range(count):
        sigma = (0.05, 0.1, 0.2, 0.4)[k % 4]
        priority = {t: r * math.exp(rng.gauss(0.0, sigma)) for t, r in remaining.items()}
        start = priority_serial_schedule(graph, capacity, priority, table)
        improved, makespan = justify(graph, capacity, start, max_rounds=2, table=table)
        found.append((makespan, f"serial~{k}", improved))
    found.sort(key=lambda j: j[0])
    return found[:2]


#: How many justified schedules (the shortest) compete in the last step of the plan. Which justified
#: schedule Airflow follows best under the admission that really runs is only known by simulating
#: it, so more than the shortest two compete.
_JUSTIFIED_KEPT = 4


#: A budget for the local search of :func:`packing_weights_plan` (step 5), in simulated tasks: about
#: 60 simulations of a 1,000-task DAG, 600 of a 100-task one. The planner's default is 0 (off): the
#: searched orders gain about two points of the makespan benchmark with exact estimates but lose
#: 2-11 points with +/- 30 % estimate errors (``docs/benchmarks/makespan.md``).
SEARCH_BUDGET = 60_000
#: Simulations the local search runs at least, however large the DAG, and at most, however small.
SEARCH_MIN_EVALS = 20
SEARCH_MAX_EVALS = 600


#: A budget for the serial samples of :func:`packing_weights_plan` (step 2), in placed tasks:
#: ``serial_budget // tasks`` samples, at least ``SERIAL_MIN_SAMPLES`` and at most
#: ``SERIAL_MAX_SAMPLES``.
SERIAL_BUDGET = 20_000
SERIAL_MIN_SAMPLES = 4  # one of each spread of the priorities (sigma 0.05, 0.1, 0.2, 0.4)
SERIAL_MAX_SAMPLES = 64

#: A budget for each justification of :func:`packing_weights_plan` (steps 2 and 4), in placed tasks per
#: round: at most ``justify_budget // tasks`` rounds (at least ``JUSTIFY_MIN_ROUNDS``, at most
#: ``justify_rounds``). Up to 4,000 tasks every justification may run its 4 rounds; a DAG of 8,000
#: tasks runs 2, where each further round shortens the schedule by less than 0.1 % (a round that
#: does not shorten it ends the justification anyway).
JUSTIFY_BUDGET = 16_000
JUSTIFY_MIN_ROUNDS = 2

#: With the reservation policy the local search scores an order with one pass
#: (:func:`_ordered`, a small fraction of a simulation) and runs ``FAST_SEARCH_FACTOR`` times as many
#: evaluations as the budget buys simulations, at most ``FAST_SEARCH_MAX_EVALS``.
FAST_SEARCH_FACTOR = 48
FAST_SEARCH_MAX_EVALS = 9000

#: Rules the planner tries, in order of preference on ties.
PACKING_CANDIDATES: tuple[str, ...] = ("critical_path", "width_aware", "work", "downstream")


@dataclass(frozen=True)
class PackingPlan:
    """The outcome of :func:`packing_weights_plan`.

    ``weights`` task -> priority weight; ``rule`` where they came from (a rule name, ``"<rule>+plan_order"``
    or ``"<rule>+justified"``, with ``"+refined<k>"`` appended after ``k`` refinement rounds);
    ``makespan`` the predicted makespan of the DAG alone on the pools with these weights under
    ``policy``; ``schedule`` the planned start of every task; ``tried`` the predicted makespan of every
    option the planner simulated.
    """

    weights: dict[str, int]
    rule: str
    makespan: float
    schedule: dict[str, float]
    tried: dict[str, float]


def packing_weights_plan(
    graph: TaskGraph,
    capacity: Mapping[str, int],
    policy: str = "critical_path",
    candidates: Sequence[str] = PACKING_CANDIDATES,
    controller_interval: float = 0.0,
    justify_rounds: int = 4,
    refine_rounds: int = 2,
    refine_options: int = 2,
    estimate_error: float | None = None,
    scenarios: int = 4,
    samples: int = 8,
    search_budget: int = 0,
    serial_budget: int = SERIAL_BUDGET,
    strict_backfill: bool = False,
    finalists: int = FINALISTS,
    final_worlds: int = FINAL_WORLDS,
    justify_budget: int = JUSTIFY_BUDGET,
) -> PackingPlan:
    """Plan priorities that pack the pools: the ``packing`` rule.

    1. Every candidate rule (critical path, width-aware critical path, downstream work, Airflow's
       ``downstream``) is simulated with Airflow's greedy admission, and so are ``samples`` seeded
       perturbations of their weights (each weight times ``1 +/- eps``, ``eps <= 0.3``).
    2. The candidates' schedules and the two best sampled ones are improved by forward-backward
       justification
       (:func:`~airflow_gpu_dag.core.planning.justification.justify`): work that waited in front of a wide
       task
       is moved into the holes the greedy admission left, in at most ``justify_rounds`` rounds and at
       most ``justify_budget // tasks`` (at least 2: :data:`JUSTIFY_BUDGET`). Next to them,
       ``serial_budget // tasks`` (4 to 64) serial schedules by randomly perturbed critical-path
       priorities, justified (:func:`_serial_samples`); the four shortest of all are kept.
    3. Options are simulated under ``policy`` (``"critical_path"``: greedy admission with pools at
       capacity; ``"reservation"``: with the reservation controller): every candidate rule's own
       weights (with reservation a rule that loses under greedy admission can win: a wide critical task
       is no longer starved) and the *plan-order* weights (:func:`plan_order_weights`) of the best
       greedy schedule (sampled ones included) and of the kept justified ones. The option with the
       shortest predicted makespan wins; ties go to the earlier option.
    4. The predicted schedule of each of the ``refine_options`` best options is justified again and
       its plan-order weights replace that option while that shortens the prediction (at most
       ``refine_rounds`` times each); the shortest prediction wins. Refining more than the winner
       matters: the option that refines best is not always the winner of step 3.
    5. Local search on the winner's start order (:func:`search_order`): a task is moved to another
       place in the order, or two tasks are exchanged (seeded, so the plan stays deterministic), and the
       move is kept when the prediction is no longer (equal moves are kept too, so the search can cross
       plateaus); the shortest order seen wins. Under ``policy="reservation"`` (and no
       ``estimate_error``) an order is scored by :func:`_ordered`, one pass of
       :func:`~airflow_gpu_dag.core.planning.justification.ordered_schedule` (what the controller with
       lookahead
       realizes), ``FAST_SEARCH_FACTOR * search_budget // tasks`` times, at most
       ``FAST_SEARCH_MAX_EVALS``; the best order is then simulated and kept only when the simulation
       is shorter too. Otherwise every move is simulated under ``policy``, ``search_budget // tasks``
       times, 20 to 600. Off by default (``search_budget=0``); :data:`SEARCH_BUDGET` is the budget
       measured in the benchmark. Use it when the estimates are good: searched orders are tuned to them
       and lose when they are off; it costs seconds of planning.

    ``strict_backfill``: plan for a controller that backfills only work that ends before the reserved task
    can start (``backfill: strict``), as the simulator's argument of that name.

    With ``estimate_error`` > 0, each option of steps 3-5 is scored by its mean makespan over the exact
    durations and ``scenarios`` seeded worlds whose durations are the estimates times
    ``exp(N(0, estimate_error))`` (the controller still sees the estimates): options that only win when
    every estimate is right lose. ``estimate_error`` None (the default) takes it from the graph:
    :func:`~airflow_gpu_dag.core.analysis.estimates.planning_error`, the typical standard error of its learned
    durations, 0 for declared ones. With five past runs per task that recovers 3 more points of the
    exact-estimate gain at 32 GPUs (``docs/benchmarks/learned_estimates.md``); with errors as large as
    +/- 30 % it helps little (``docs/benchmarks/makespan.md``). It costs ``1 + scenarios`` simulations
    per option instead of one. Before step 5 the ``finalists`` best distinct options (steps 3-4) are
    scored again over ``final_worlds`` fresh worlds, drawn apart from those that ranked them, and the
    shortest there wins (:func:`~airflow_gpu_dag.core.planning.hedging.final_choice`: the best of many
    scores on
    the same worlds is fitted to them); ``final_worlds=0`` skips it.

    With the reservation controller, plan-order weights keep Airflow on the plan: the task the plan
    starts next is the one the controller reserves for, and only work that cannot delay it is let
    through. Deterministic.
    """

    policy = "reservation" if policy == "reservation" else "critical_path"
    graph = fitted_once(graph, capacity)  # the rungs a simulation assumes, as simulate() does

    believed = {t: n.duration for t, n in graph.nodes.items()}
    if estimate_error is None:
        estimate_error = planning_error(graph)
    scored_worlds = worlds(graph, estimate_error, scenarios)
    table = TaskTable(graph)  # what justification reads of the graph, once
    bounds: dict[int, float] = {}  # id(graph or world) -> its lower bound, each computed once
    tables: dict[int, SimulationTables] = {}  # id(graph or world) -> the simulator's tables, built once

    def bound_of(world: TaskGraph) -> float:
        if id(world) not in bounds:
            bounds[id(world)] = lower_bound(world, {p: int(c) for p, c in capacity.items()})
        return bounds[id(world)]

    def tables_of(world: TaskGraph) -> SimulationTables:
        if id(world) not in tables:
            tables[id(world)] = SimulationTables.build(world, capacity)
        return tables[id(world)]

    def makespan_in(weights: Mapping[str, int], world: TaskGraph) -> float:
        return simulate(
            world,
            capacity,
            policy,
            controller_interval,
            priority=lambda g: weights,
            estimates=believed,
            strict_backfill=strict_backfill,
            _lower_bound=bound_of(world),
            _tables=tables_of(world),
        ).makespan

    runs: dict[frozenset[tuple[str, int]], tuple[float, dict[str, float]]] = {}

    def run(weights: Mapping[str, int]) -> tuple[float, dict[str, float]]:
        key = frozenset(weights.items())  # two options with the same weights: one simulation
        if key in runs:
            return runs[key][0], dict(runs[key][1])
        result = simulate(
            graph,
            capacity,
            policy,
            controller_interval,
            priority=lambda g: weights,
            strict_backfill=strict_backfill,
            _lower_bound=bound_of(graph),
            _tables=tables_of(graph),
        )
        # durations off by the estimate error: score the mean
        score = result.makespan + sum(makespan_in(weights, world) for world in scored_worlds)
        runs[key] = (score / (1 + len(scored_worlds)), {t.task_id: t.start for t in result.schedule})
        return runs[key][0], dict(runs[key][1])

    tried: dict[str, float] = {}
    options: list[tuple[str, dict[str, int]]] = []
    serial_samples = (
        min(SERIAL_MAX_SAMPLES, max(SERIAL_MIN_SAMPLES, serial_budget // max(1, len(graph))))
        if serial_budget > 0
        else 0
    )
    if justify_budget > 0:  # the rounds the budget buys for a DAG of this size
        justify_rounds = min(justify_rounds, max(JUSTIFY_MIN_ROUNDS, justify_budget // max(1, len(graph))))
    greedy_runs, sampled, justified = _greedy_stage(
        graph, capacity, tuple(candidates), justify_rounds, samples, serial_samples, lambda: tables_of(graph)
    )
    for makespan, name, weights, _start in greedy_runs:
        tried[name if policy == "critical_path" and not scored_worlds else f"{name} (greedy)"] = makespan
        options.append((name, weights))
    if not greedy_runs:  # no candidate rule (or no task): the critical path, as the policy runs it
        weights = critical_path_weights(graph)
        makespan, start = run(weights) if len(graph) else (0.0, {})
        return PackingPlan(weights, "critical_path", makespan, start, tried)
    _best_makespan, best_name, _best_weights, best_start = min([*greedy_runs, *sampled], key=lambda r: r[0])
    options.append((f"{best_name}+plan_order", plan_order_weights(graph, best_start)))
    for _makespan, name, schedule in justified:
        options.append((f"{name}+justified", plan_order_weights(graph, schedule)))

    scored: list[PackingPlan] = []
    for label, weights in options:
        if policy == "critical_path" and not scored_worlds and label in tried:
            makespan = tried[label]
            start = next(r[3] for r in greedy_runs if r[1] == label)
        else:
            makespan, start = run(weights)
            tried[label] = makespan
        scored.append(PackingPlan(weights, label, makespan, start, tried))
    scored.sort(key=lambda option: option.makespan)  # stable: ties keep the earlier option
    # 4. what Airflow is predicted to do with an option is itself a schedule: justify it again, keep
    #    the plan-order weights while that shortens the predicted makespan, for the best few options

    winner = scored[0]
    contenders = list(scored)
    for option in scored[: max(1, refine_options)]:
        current = option
        for round_ in range(1, refine_rounds + 1):
            improved, _ = justify(graph, capacity, current.schedule, max_rounds=justify_rounds, table=table)
            weights = plan_order_weights(graph, improved)
            makespan, start = run(weights)
            label = f"{option.rule}+refined{round_}"
            tried[label] = makespan
            if makespan >= current.makespan - 1e-9 * max(1.0, makespan):
                break
            current = PackingPlan(weights, label, makespan, start, tried)
            contenders.append(current)
        if current.makespan < winner.makespan - 1e-9 * max(1.0, current.makespan):
            winner = current
    if scored_worlds and final_worlds > 0:  # the best few again, on worlds that did not rank them
        contenders.sort(key=lambda option: option.makespan)
        fresh = worlds(graph, estimate_error, final_worlds, "final")
        index, fresh_scores = final_choice([c.weights for c in contenders], makespan_in, fresh, finalists)
        tried.update({f"{contenders[k].rule} (fresh worlds)": score for k, score in fresh_scores.items()})
        winner = contenders[index]
    # 5. local search on the winner's start order
    if search_budget > 0 and len(graph) > 1:
        seed = f"{graph.dag_id}:{len(graph)}:{policy}"
        if policy == "reservation" and not scored_worlds:
            # the controller follows a start order (lookahead): score orders by the schedule it
            # realizes, one pass each, then check the best by simulation
            found = search_order(
                graph,
                winner,
                lambda weights: _ordered(graph, capacity, weights),
                search_budget,
                seed,
                fast=True,
            )
            if "+search" in found.rule:
                makespan, start = run(found.weights)
                tried[found.rule] = makespan
                if makespan < winner.makespan - 1e-9 * max(1.0, makespan):
                    winner = PackingPlan(found.weights, found.rule, makespan, start, tried)
        else:
            winner = search_order(graph, winner, run, search_budget, seed)
            tried[winner.rule] = winner.makespan
    return PackingPlan(winner.weights, winner.rule, winner.makespan, winner.schedule, dict(tried))


def _respects_dependencies(graph: TaskGraph, order: Sequence[str], moved: Sequence[str]) -> bool:
    """Whether the tasks in ``moved`` still come after their upstream and before their downstream
    tasks in ``order``."""
    position = {t: k for k, t in enumerate(order)}
    for task in moved:
        here = position[task]
        if any(position[u] > here for u in graph.upstream(task)):
            return False
        if any(position[d] < here for d in graph.downstream(task)):
            return False
    return True


def _ordered(
    graph: TaskGraph, capacity: Mapping[str, int], weights: Mapping[str, int]
) -> tuple[float, dict[str, float]]:
    """(makespan, start) of :func:`~airflow_gpu_dag.core.planning.justification.ordered_schedule` for the rank
    order of ``weights``."""

    topo = {t: i for i, t in enumerate(graph.topological_order())}
    order = sorted(graph.nodes, key=lambda t: (-weights.get(t, 0), topo[t]))
    start = ordered_schedule(graph, capacity, order)
    return max((start[t] + graph.nodes[t].duration for t in start), default=0.0), start


def search_order(
    graph: TaskGraph,
    plan: PackingPlan,
    evaluate: Callable[[Mapping[str, int]], tuple[float, dict[str, float]]],
    budget: int = SEARCH_BUDGET,
    seed: str = "",
    fast: bool = False,
) -> PackingPlan:
    """Improve a plan by moving or exchanging tasks in its priority order (hill climbing).

    The tasks are ranked by ``plan.weights`` (ties by graph order). Each step either exchanges two
    tasks or takes one out of the order and puts it back at another place (half of the steps each),
    all chosen by a ``random.Random(seed)``; ``evaluate``
    (weights -> (predicted makespan, start per task)) scores the new order's rank weights
    (``n`` for the first task, ``1`` for the last). A move is kept when the prediction is not longer;
    the returned plan is the shortest seen (``plan`` itself when nothing was shorter), its ``rule``
    suffixed ``+search<k>`` after ``k`` improving moves. Runs ``budget // n`` evaluations, at least
    ``SEARCH_MIN_EVALS`` and at most ``SEARCH_MAX_EVALS``. With ``fast`` (a one-pass ``evaluate``,
    which may score ``plan`` differently from ``plan.makespan``) it starts from ``evaluate``'s own score
    of ``plan``, skips moves that put a task before an upstream task, and runs
    ``FAST_SEARCH_FACTOR * budget // n`` evaluations, at most ``FAST_SEARCH_MAX_EVALS``; the returned
    makespan is then ``evaluate``'s. Deterministic for a given seed.

    Moving one task is what the justified plans cannot do: a long or wide task at the end of the
    schedule is started earlier and the narrow ones fill in behind it (independent rigid tasks such as
    BLAST shards pack much better), whatever rule produced the order.
    """
    topo = {t: i for i, t in enumerate(graph.topological_order())}
    order = sorted(plan.weights, key=lambda t: (-plan.weights[t], topo.get(t, 0)))
    count = len(order)
    if count < 2:
        return plan
    rng = random.Random(seed)
    current = plan.makespan
    best = plan
    improvements = 0
    if fast:  # a one-pass evaluator: start from its own score of the plan, allow more evaluations
        current = evaluate(plan.weights)[0]
        best = replace(plan, makespan=current)
        evaluations = min(FAST_SEARCH_MAX_EVALS, max(SEARCH_MIN_EVALS, budget * FAST_SEARCH_FACTOR // count))
    else:
        evaluations = min(SEARCH_MAX_EVALS, max(SEARCH_MIN_EVALS, budget // count))
    for _ in range(evaluations):
        i, j = rng.randrange(count), rng.randrange(count)
        if i == j:
            continue
        candidate = order[:]
        if rng.random() < 0.5:  # exchange two tasks (packs rigid tasks of different widths)
            candidate[i], candidate[j] = candidate[j], candidate[i]
        else:  # move one task
            candidate.insert(j, candidate.pop(i))
        if fast and not _respects_dependencies(graph, candidate, (candidate[i], candidate[j])):
            continue
        weights = {t: count - k for k, t in enumerate(candidate)}
        makespan, start = evaluate(weights)
        if makespan <= current:
            order, current = candidate, makespan
            if makespan < best.makespan - 1e-9 * max(1.0, makespan):
                improvements += 1
                best = PackingPlan(weights, f"{plan.rule}+search{improvements}", makespan, start, plan.tried)
    return best


def packing_rule(
    capacity: Mapping[str, int],
    policy: str = "reservation",
    controller_interval: float = 0.0,
    strict_backfill: bool = False,
) -> PriorityRule:
    """The ``packing`` rule as a callable ``graph -> weights`` for
    :func:`~airflow_gpu_dag.core.simulation.simulator.simulate` (each graph planned alone on ``capacity`` for
    ``policy``)."""
    caps = dict(capacity)

    def packing(graph: TaskGraph) -> Mapping[str, int]:
        return packing_weights_plan(
            graph, caps, policy, controller_interval=controller_interval, strict_backfill=strict_backfill
        ).weights

    return packing


def resolve_rule(
    rule: str | PriorityRule,
    capacity: Mapping[str, int],
    policy: str = "reservation",
    controller_interval: float = 0.0,
    strict_backfill: bool = False,
) -> PriorityRule:
    """Any rule name (``packing`` included, planned for ``policy``) or a callable, as a callable."""
    if rule == "packing":
        return packing_rule(capacity, policy, controller_interval, strict_backfill)
    return resolve_priority(rule, capacity)


def predict(
    graph: TaskGraph | Sequence[TaskGraph],
    capacity: Mapping[str, int],
    policy: str = "reservation",
    controller_interval: float = 0.0,
    priority: str | PriorityRule | None = None,
    **options: object,
) -> SimulationResult:
    """:func:`~airflow_gpu_dag.core.simulation.simulator.simulate` with every rule name resolvable,
    ``packing``
    included: the default rule of ``policy`` (for ``reservation`` the rule the DAG(s) declare, else
    ``packing``). What ``airflow gpu-dag simulate`` and the critical-path page show."""
    chosen = priority if priority is not None else default_rule(policy, graph)
    if chosen == "packing":
        strict = bool(options.get("strict_backfill", False))
        chosen = packing_rule(capacity, policy, controller_interval, strict)
    return simulate(graph, capacity, policy, controller_interval, priority=chosen, **options)  # type: ignore[arg-type]


def planned_remaining(
    graph: TaskGraph,
    capacity: Mapping[str, int],
    policy: str = "reservation",
    search_budget: int = 0,
    strict_backfill: bool = False,
) -> dict[str, float]:
    """Per task, the planned end minus its planned start under the ``packing`` plan: the remaining time
    the cross-DAG keys use for a packing DAG (:mod:`airflow_gpu_dag.core.policy.objective`), so the plan's
    start
    order is kept within the run. Falls back to the critical-path remaining times when nothing is planned
    (no task holds slots of a pool in ``capacity``: every task would start at its earliest start)."""
    nodes = fitted_once(graph, capacity).nodes
    if not any(task_pool(node) in capacity for node in nodes.values()):  # an empty graph too
        return {t: timing.remaining for t, timing in analyze(graph).timings.items()}
    plan = packing_weights_plan(
        graph, capacity, policy, search_budget=search_budget, strict_backfill=strict_backfill
    )
    # the plan's own end: plan.makespan is a score, averaged over worlds when durations are learned
    end = max(start + nodes[t].duration for t, start in plan.schedule.items())
    return {t: end - start for t, start in plan.schedule.items()}
