"""Cross-DAG priority: weights in one unit for every DAG run, and the objective that balances them.

Airflow orders the scheduled task instances of *all* DAGs by ``priority_weight``. For weights of two
DAGs to mean something next to each other they must share a unit, and for nobody to wait without
bound they must age. Every task instance therefore gets a **key**, an absolute time in seconds::

    due(run)  = T + min(s * W, W + overdue)    T: when the run was triggered
    key(t)    = due(run) - c * remaining(t)    W: the run's GPU work / the pool capacity (max over pools)
                - U * min(lead(t), K)          lead: the most tasks downstream of any task of the run
                                                whose remaining is at most t's (stock's weight - 1)
    weight(t) = 2**31 - 1 - round(key(t) - E)      E: a fixed epoch; the earliest key goes first

* **Within one run** ``due`` is a constant, so the order is exactly the critical-path order (or the
  packing plan's order when ``remaining`` comes from the plan: planned end - planned start).
* **Across runs** the ``s * W`` term is shortest-work-first with aging: a 20-minute evaluation DAG
  is due long before a 40-GPU-hour pipeline triggered at the same moment, but a run triggered later
  is due later. The ``- c * remaining(t)`` term starts a long chain early (``c``, the objective's
  ``chain``, is how much of it counts across runs). The ``- U * min(lead, K)`` term (``fair`` only;
  ``U`` = 0 elsewhere) moves the keys toward stock Airflow's order across runs, a pipeline's early
  stages first: it is what keeps p95 and the makespan near stock's while small runs still go first.
  ``lead(t)`` is the largest descendants count of the tasks of the run with at most ``t``'s remaining
  time, so it never decreases along the critical path and the order *within* a run stays the
  critical path's (or the plan's).
* **No run pays for the others without bound**: ``due <= T + W + overdue``, so a wide run (a sweep)
  triggered early is overtaken only by runs triggered within ``W + overdue + c * CP`` after it
  (``CP`` the overtaker's critical path), however large its work; and ``key >= T - c * CP - U * K``, so
  a run triggered after ``key(X) + CP_max + U * K`` can never overtake task ``X`` (docs/priority.md
  states the wait bound and proves it; :class:`ReservationGate` is the controller's half).
* ``W`` scales with the pool: at 8 GPUs the keys behave like shortest-work-first, at 32 like the
  critical path with first-come-first-served.

The objective (``[gpu_dag] objective``) picks ``s``, ``c``, ``U``, ``K`` and the reservation gate
(:data:`OBJECTIVES`): ``fair`` (the default: every kind of DAG within 1.05x stock, p95 and makespan
nearest stock's), ``throughput`` (makespan and pipelines first, every wide task reserved for),
``balanced`` (more of the mean gain; makespan and p95 up to 5 % and 11 % above stock), ``latency``
(mean completion time and small DAGs first). Pure and deterministic.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.analysis.weight_rules import INT32_MAX, clamp_int32, descendant_counts
from airflow_gpu_dag.core.model.graph import TaskGraph, task_pool, task_slots
from airflow_gpu_dag.core.policy.admission import PendingTask, ReadyTask, admission_order

__all__ = [
    "DEFAULT_EPOCH",
    "DEFAULT_OBJECTIVE",
    "KEY_WEIGHT_FLOOR",
    "MAX_DESCENDANTS_COUNTED",
    "MAX_OVERDUE",
    "MAX_STAGE_LENGTH",
    "OBJECTIVES",
    "STAGE_FIT",
    "STAGE_LENGTH",
    "Objective",
    "ReservationGate",
    "RunShape",
    "StageMisfit",
    "StarvingWatch",
    "descendant_lead",
    "fitted_stage_length",
    "get_objective",
    "key_of_weight",
    "key_weight",
    "longest_gpu_task",
    "objective_problems",
    "run_shape",
    "run_weights",
    "slot_seconds",
    "stage_length_mismatch",
    "stage_length_problem",
    "stage_misfit",
    "task_keys",
    "work_of",
]

#: ``[gpu_dag] key_epoch`` default: 2025-01-01T00:00:00Z. Keys are seconds after it (2**31 s = 68 years).
DEFAULT_EPOCH = 1_735_689_600.0
#: Weights at or above this are keys (``key - epoch < 2**30`` s, 34 years); below, a stock weight.
KEY_WEIGHT_FLOOR = 2**30
#: The longest ``overdue`` (30 days, the oldest trigger time a key is made from): the wait bound holds
#: for any finite value, but a task may wait ``overdue`` before anything is reserved for it, and a wait
#: of months is, to the team that waits, a wait without bound.
MAX_OVERDUE = 30 * 24 * 3600.0
#: The most descendants a key counts (an objective's ``descendant_cap`` is at most this): what
#: :class:`RunShape` keeps per task, counted in O(E x this) however large the DAG.
MAX_DESCENDANTS_COUNTED = 64
#: The length of one training stage the objectives' times were chosen for (a pre-training runs 2-8 h in
#: the benchmark's mixes): each time constant of :data:`OBJECTIVES` is a multiple of it, and
#: :meth:`Objective.for_stage` scales them to another pool's stages (``[gpu_dag] stage_length``).
STAGE_LENGTH = 6 * 3600.0


@dataclass(frozen=True)
class Objective:
    """What the cross-DAG policy optimizes.

    ``stretch`` is ``s`` in ``due = T + min(s * W, W + overdue)``: how much a run's own GPU work
    delays its due time (larger: small DAGs first, the mean completion time; smaller: closer to the
    longest chain first, the makespan). ``chain`` is ``c`` in ``key = due - c * remaining``: how much
    of a task's remaining critical path moves it ahead of other runs (1: all of it, long chains first;
    below 1 a long chain no longer jumps a wide run triggered before it by its whole length; within a
    run the order is the critical path's whatever ``c``). ``gap`` and ``overdue`` (seconds) gate the
    reservation of wide tasks (:class:`ReservationGate`): slots are held for a wide head ``W`` only
    when ``W``'s key is earlier than the next waiting task's by at least ``gap``, or ``W`` is
    ``overdue`` seconds past its key; ``gap = 0`` reserves for every wide head. A task that has waited
    ``overdue`` seconds since it turned ready (or since its key, when that is later) is *starving*: the
    head is then reserved for, with only work ahead of the starving task backfilled. ``overdue`` also
    caps the due time: no run is due more than ``overdue`` after its own work could end.

    ``descendant_unit`` and ``descendant_cap`` are ``U`` (seconds) and ``K`` in ``key -= U * min(lead,
    K)`` (:attr:`RunShape.descendant_lead`): a task with many tasks downstream (a pipeline's first
    stages, what stock Airflow runs first) starts earlier, by at most ``U * K`` (:attr:`head_start`).
    With that term keys lie up to days before the trigger, so the gate no longer holds for a head
    ``overdue`` past its *key* (every such head would be at once) and ``reserve_overdue`` (None:
    ``overdue``) is the gate's own: a task that has waited it since it turned ready starves, while
    ``overdue`` still caps the due time.

    ``stage_length`` (seconds) is the length of the pool's training stages these times are for
    (:meth:`for_stage` scales them to another).

    :raises ValueError: a constant that would let a run wait without bound or lose the critical-path
        order, with the reason (:func:`objective_problems`).
    """

    name: str
    stretch: float
    gap: float
    overdue: float
    chain: float = 1.0
    descendant_unit: float = 0.0
    descendant_cap: int = 0
    reserve_overdue: float | None = None
    stage_length: float = STAGE_LENGTH

    def __post_init__(self) -> None:
        problems = objective_problems(
            self.stretch,
            self.chain,
            self.gap,
            self.overdue,
            self.descendant_unit,
            self.descendant_cap,
            self.reserve_overdue,
        )
        if not (math.isfinite(self.stage_length) and self.stage_length > 0):
            problems.append(f"stage length {self.stage_length!r} must be a positive number of seconds")
        if problems:
            raise ValueError(f"objective {self.name!r}: " + "; ".join(problems))

    @property
    def always_reserves(self) -> bool:
        return self.gap <= 0

    @property
    def head_start(self) -> float:
        """``U * K``: the most the descendants term moves a key before its run's trigger (0 without it)."""
        return self.descendant_unit * self.descendant_cap if self.descendant_unit > 0 else 0.0

    @property
    def gate_overdue(self) -> float:
        """The gate's overdue: ``reserve_overdue``, else ``overdue``."""
        return self.overdue if self.reserve_overdue is None else self.reserve_overdue

    def for_stage(self, length: float) -> Objective:
        """This objective for a pool whose training stages last ``length`` seconds: every time constant
        (``gap``, ``overdue``, ``reserve_overdue``, ``descendant_unit``) times ``length /``
        :attr:`stage_length`, the stage its times are for (:data:`STAGE_LENGTH` as shipped);
        ``stretch``, ``chain`` and ``descendant_cap`` have no unit and stay. The keys of a pool whose
        every duration is ``f`` times another's then order its tasks as the other pool's are ordered at
        ``f`` times the stage length, so the objective behaves the same at any time scale
        (docs/priority.md, "The stage length").

        :raises ValueError: ``length`` is not a positive finite number of seconds, or a scaled constant
            is refused (:func:`objective_problems`: e.g. fair's ``U * K`` over 30 days).
        """
        if not (math.isfinite(length) and length > 0):
            raise ValueError(
                f"objective {self.name!r}: stage length {length!r} must be a positive number of seconds"
            )
        factor = length / self.stage_length
        if factor == 1.0:
            return self
        return replace(
            self,
            stage_length=length,
            gap=self.gap * factor,
            overdue=self.overdue * factor,
            descendant_unit=self.descendant_unit * factor,
            reserve_overdue=None if self.reserve_overdue is None else self.reserve_overdue * factor,
        )

    def due_offset(self, work: float) -> float:
        """``min(s * W, W + overdue)``: how long after its trigger a run of work ``W`` is due."""
        return min(self.stretch * work, work + self.overdue)

    def key(self, trigger: float, work: float, remaining: float, lead: int = 0) -> float:
        """``T + min(s * W, W + overdue) - c * remaining - U * min(lead, K)``: the key of a task with
        ``remaining`` seconds of critical path and a descendants lead of ``lead``
        (:attr:`RunShape.descendant_lead`), of a run of work ``W`` triggered at ``T``."""
        key = trigger + self.due_offset(work) - self.chain * remaining
        if self.descendant_unit > 0:
            key -= self.descendant_unit * min(lead, self.descendant_cap)
        return key


def objective_problems(
    stretch: float,
    chain: float,
    gap: float,
    overdue: float,
    descendant_unit: float = 0.0,
    descendant_cap: int = 0,
    reserve_overdue: float | None = None,
) -> list[str]:
    """What is wrong with these objective constants (empty: nothing). Each refused value would break
    a guarantee of docs/priority.md: a stretch that is negative or not finite lets ever larger runs go
    first (or puts every key at infinity); a chain outside (0, 1] loses the critical-path order within
    a run (0) or lets a long run overtake by more than its critical path (> 1); a negative gap is
    meaningless; an overdue (or gate overdue) that is negative, not finite or over :data:`MAX_OVERDUE`
    lets a task wait without bound before it is reserved for; a descendants term whose head start
    ``U * K`` is not finite or over :data:`MAX_OVERDUE` lets a run overtake runs triggered that long after
    it, and a cap that is not a whole number in [0, :data:`MAX_DESCENDANTS_COUNTED`] is not counted."""
    problems = []
    if not (math.isfinite(stretch) and stretch >= 0):
        problems.append(
            f"stretch {stretch!r} must be a finite number >= 0 (larger runs would always go first)"
        )
    if not (math.isfinite(chain) and 0 < chain <= 1):
        problems.append(
            f"chain {chain!r} must be in (0, 1]: 0 loses the critical-path order within a run, above 1 a "
            "long run could overtake by more than its critical path"
        )
    if math.isnan(gap) or gap < 0:
        problems.append(f"reservation gap {gap!r} must be >= 0 seconds")
    if not (math.isfinite(overdue) and 0 <= overdue <= MAX_OVERDUE):
        problems.append(
            f"reservation overdue {overdue!r} must be finite, >= 0 and at most {MAX_OVERDUE:.0f} s "
            "(30 days): "
            "a task may wait that long before it is reserved for, so a larger one lets it wait without bound"
        )
    if reserve_overdue is not None and not (
        math.isfinite(reserve_overdue) and 0 <= reserve_overdue <= MAX_OVERDUE
    ):
        problems.append(
            f"reservation overdue {reserve_overdue!r} must be finite, >= 0 and at most {MAX_OVERDUE:.0f} s "
            "(30 days): a task may wait that long before it is reserved for"
        )
    if not (isinstance(descendant_cap, int) and 0 <= descendant_cap <= MAX_DESCENDANTS_COUNTED):
        problems.append(
            f"descendant cap {descendant_cap!r} must be a whole number in [0, {MAX_DESCENDANTS_COUNTED}] "
            "(the most descendants a key counts)"
        )
    elif not (math.isfinite(descendant_unit) and descendant_unit >= 0):
        problems.append(f"descendant unit {descendant_unit!r} must be a finite number of seconds >= 0")
    elif descendant_unit * descendant_cap > MAX_OVERDUE:
        problems.append(
            f"descendant unit x cap = {descendant_unit * descendant_cap:.0f} s must be at most "
            f"{MAX_OVERDUE:.0f} s (30 days): a run's first tasks would go ahead of every run triggered "
            "up to that long after it, a wait without bound to those runs"
        )
    return problems


_HOUR = 3600.0
#: The objectives ``[gpu_dag] objective`` accepts (figures in docs/benchmarks/multi_dag.md).
#: Why each constant (docs/priority.md, "Why these constants"); every time is for pools whose training
#: stages last :data:`STAGE_LENGTH` (6 h) and scales with ``[gpu_dag] stage_length``
#: (:meth:`Objective.for_stage`): ``gap`` 8 h is about one long training stage (a pre-training): slots
#: are held for a wide task only when it is at least that much more urgent than the work they would
#: run; ``overdue`` 12 h is that stage and half again: a task waits no longer before it is reserved
#: for, and no run is due later after its own work could end; ``chain`` 0.5 lets a long pipeline start
#: early but not jump a wide sweep triggered before it by its whole length; ``stretch`` 4 puts small
#: runs first while every kind stays within 1.05x of stock. ``throughput`` keeps the 8 h ``overdue`` it
#: was measured with. ``fair``: one stage per task of descendant lead (``U``), so a pipeline's first
#: stage, with tens of tasks below it, goes ahead of runs triggered a day or more after it, as in stock
#: Airflow (5 h or 7 h for 6-h stages let a kind reach 1.09x); at most 24 counted (``K``: all give the
#: same figures, and a DAG of hundreds of tasks is not put weeks ahead); the gap of 16 stages is 16
#: tasks of lead, so slots are held almost only when no other run's task waits; a task that has waited
#: 6 stages since it turned ready is reserved for (4 cost the sweeps); ``stretch`` 5 and the due cap of
#: 2 stages keep small runs first.
OBJECTIVES: dict[str, Objective] = {
    "throughput": Objective("throughput", stretch=2.0, gap=0.0, overdue=8 * _HOUR, chain=1.0),
    "balanced": Objective("balanced", stretch=4.0, gap=8 * _HOUR, overdue=12 * _HOUR, chain=0.5),
    "fair": Objective(
        "fair",
        stretch=5.0,
        gap=16 * STAGE_LENGTH,  # 96 h
        overdue=2 * STAGE_LENGTH,  # 12 h
        chain=0.5,
        descendant_unit=STAGE_LENGTH,  # 6 h
        descendant_cap=24,
        reserve_overdue=6 * STAGE_LENGTH,  # 36 h
    ),
    "latency": Objective("latency", stretch=6.0, gap=8 * _HOUR, overdue=12 * _HOUR, chain=0.5),
}
DEFAULT_OBJECTIVE = "fair"


def stage_length_problem(length: float) -> str | None:
    """What is wrong with training stages of ``length`` seconds for the objectives of :data:`OBJECTIVES`
    (None: nothing): a length that is not positive and finite, or one at which an objective refuses its
    scaled times (:meth:`Objective.for_stage`; ``fair``'s 24 stages of lead over 30 days bind: stages
    over 30 h: the message names that limit and why)."""
    if not (math.isfinite(length) and length > 0):
        return f"a stage length must be a positive number of seconds, not {length!r}"
    if length > MAX_STAGE_LENGTH:
        return (
            f"a stage length of {length:g} s is over the longest allowed, {MAX_STAGE_LENGTH / 3600:g}h: "
            "'fair' counts up to 24 stages of lead, which must stay within 30 days (a run's first tasks "
            "would otherwise go ahead of every run triggered up to that long after it, a wait without bound "
            f"to those runs); give at most {MAX_STAGE_LENGTH / 3600:g}h"
        )
    try:
        for known in OBJECTIVES.values():
            known.for_stage(length)
    except ValueError as err:
        return str(err)
    return None


def _longest_stage_length() -> float:
    """The longest stage at which every objective's scaled times stay within :data:`MAX_OVERDUE`
    (:func:`objective_problems`: the overdue, the gate's overdue and fair's head start ``U * K``)."""
    bounds = []
    for known in OBJECTIVES.values():
        bounded = max(known.overdue, known.gate_overdue, known.descendant_unit * known.descendant_cap)
        if bounded > 0:
            bounds.append(MAX_OVERDUE * known.stage_length / bounded)
    return min(bounds)


#: The longest ``[gpu_dag] stage_length`` every objective accepts (:func:`stage_length_problem`):
#: fair's 24 stages of lead must stay within 30 days, so 30 h.
MAX_STAGE_LENGTH = _longest_stage_length()


#: The pool's longest GPU task, in stages, inside which ``[gpu_dag] stage_length`` is taken to fit the
#: pool (:func:`stage_length_mismatch`). In the benchmark's mixes, on which the objectives' times were
#: chosen, the longest GPU task is 0.3-1.3 stages; this range is that one widened about twice on each
#: side. Beyond it the pool runs on another time scale, where ``fair`` loses to stock Airflow: with every
#: duration a tenth, evaluations wait 1.44x and the mean reaches 1.23x stock's at 32 GPUs; four times,
#: sweeps wait 1.32x (docs/benchmarks/multi_dag.md, "The stage length").
STAGE_FIT = (1 / 6, 3.0)


def stage_length_mismatch(length: float, longest: float) -> str | None:
    """Why training stages of ``length`` seconds do not fit a pool whose longest GPU task takes
    ``longest`` seconds (None: they fit, or ``longest`` is not a positive duration): the longest task is
    under a sixth of a stage or over three stages (:data:`STAGE_FIT`). That is another time scale, not
    another mix: every time of the objective (the descendant unit, the due cap, the reservation gap and
    overdue) is then off by about that factor."""
    if not (math.isfinite(length) and length > 0 and math.isfinite(longest) and longest > 0):
        return None
    low, high = STAGE_FIT
    ratio = longest / length
    if low <= ratio <= high:
        return None
    side = f"under {low:.3g}" if ratio < low else f"over {high:g}"
    factor = max(ratio, 1 / ratio)
    return (
        f"{ratio:.3g} stages ({side}): the objective's times (descendant unit, due cap, reservation gap "
        f"and overdue) are for pools whose longest GPU task is about one stage, so here they are about "
        f"{factor:.0f}x too {'long' if ratio < low else 'short'}"
    )


def fitted_stage_length(length: float, longest: float) -> float:
    """The stage length lint and simulate advise for a pool whose longest GPU task takes ``longest``
    seconds: ``length`` while that task fits it (:func:`stage_length_mismatch`), else the task's own
    duration, taken as one training stage, at most :data:`MAX_STAGE_LENGTH`. Inside the fit nothing
    moves, so a pool at the benchmark's time scale keeps the figures the objectives were chosen on; a
    pool of minutes-long (or days-long) tasks gets stages of its own scale (docs/benchmarks/multi_dag.md,
    "The stage length", measures both)."""
    if stage_length_mismatch(length, longest) is None:
        return length
    return min(longest, MAX_STAGE_LENGTH)


@dataclass(frozen=True)
class StageMisfit:
    """The longest declared GPU task of some DAGs, when stages of the length asked about do not fit it
    (:func:`stage_misfit`): where it is, :func:`stage_length_mismatch`'s words (``problem``) and the
    stage length to try (``advised``, :func:`fitted_stage_length`). What lint and simulate report."""

    duration: float
    dag_id: str
    task_id: str
    problem: str
    advised: float


def stage_misfit(graphs: Mapping[str, TaskGraph], length: float) -> StageMisfit | None:
    """The :class:`StageMisfit` of ``graphs`` (by DAG id) at stages of ``length`` seconds; None when
    their longest declared GPU task fits them, or they have none."""
    longest = longest_gpu_task(graphs)
    if longest is None:
        return None
    duration, dag_id, task_id = longest
    problem = stage_length_mismatch(length, duration)
    if problem is None:
        return None
    return StageMisfit(duration, dag_id, task_id, problem, fitted_stage_length(length, duration))


def longest_gpu_task(graphs: Mapping[str, TaskGraph]) -> tuple[float, str, str] | None:
    """``(duration, dag_id, task_id)`` of the longest GPU task of ``graphs`` (by DAG id) with a declared
    estimate, what :func:`stage_length_mismatch` measures a pool by (the first of equal ones, DAGs in id
    order); None without one."""
    declared = [
        (node.duration, dag_id, node.task_id)
        for dag_id, graph in sorted(graphs.items())
        for node in graph.nodes.values()
        if node.gpus > 0 and node.duration_declared and node.duration > 0
    ]
    return max(declared, key=lambda found: found[0]) if declared else None


def get_objective(name: str | None) -> Objective:
    """The objective called ``name`` (case-insensitive; None: the default).

    :raises ValueError: an unknown name, listing the known ones.
    """
    key = (name or DEFAULT_OBJECTIVE).strip().lower()
    if key not in OBJECTIVES:
        known = ", ".join(OBJECTIVES)
        raise ValueError(f"unknown objective {name!r}: use one of {known} ([gpu_dag] objective)")
    return OBJECTIVES[key]


@dataclass(frozen=True)
class RunShape:
    """What a DAG contributes to its runs' keys: ``remaining[t]`` (seconds from ``t``'s start to the
    run's end: the critical path, own duration included, or planned end - planned start), ``work``
    (its GPU slot-seconds over the pool capacity, the largest over the capacity pools) and
    ``descendants[t]`` (the tasks downstream of ``t``, up to :data:`MAX_DESCENDANTS_COUNTED`; a task not
    in it counts 0)."""

    remaining: dict[str, float]
    work: float
    descendants: dict[str, int] = field(default_factory=dict)

    @cached_property
    def descendant_lead(self) -> dict[str, int]:
        """Per task, the count the descendants term uses (:func:`descendant_lead`)."""
        return descendant_lead(self.descendants, self.remaining)


def descendant_lead(descendants: Mapping[str, int], remaining: Mapping[str, float]) -> dict[str, int]:
    """Per task of ``remaining``, the largest ``descendants`` count of the tasks whose remaining time is
    at most its own (a task not in ``descendants`` counts 0).

    It never decreases as the remaining time grows, so ``- U * min(lead, K)`` moves a task at least as
    far as every task with less remaining: the order within a run stays the critical path's (or the
    plan's), while across runs a pipeline's early stages (many tasks below them) go first as in stock
    Airflow. The count of the task itself alone would put a short task with many successors ahead of
    its run's long critical task, stock's mistake the critical path exists to fix."""
    lead: dict[str, int] = {}
    best = 0
    ordered = sorted(remaining, key=remaining.__getitem__)
    start = 0
    while start < len(ordered):  # tasks of equal remaining time share one lead
        best = max(best, descendants.get(ordered[start], 0))
        end = start + 1  # at least one task a round: a NaN equals nothing, not even itself
        while end < len(ordered) and remaining[ordered[end]] == remaining[ordered[start]]:
            best = max(best, descendants.get(ordered[end], 0))
            end += 1
        for task_id in ordered[start:end]:
            lead[task_id] = best
        start = end
    return lead


def run_shape(
    graph: TaskGraph, capacity: Mapping[str, int], remaining: Mapping[str, float] | None = None
) -> RunShape:
    """The :class:`RunShape` of ``graph`` on pools of ``capacity`` (pools not named are unlimited and
    add no work); ``remaining`` replaces the critical-path remaining times (e.g. from a plan)."""
    if remaining is None:
        remaining = {t: timing.remaining for t, timing in analyze(graph).timings.items()}
    else:
        for task_id, seconds in remaining.items():
            if not 0.0 <= seconds < math.inf:  # NaN fails too
                raise ValueError(
                    f"DAG {graph.dag_id!r}, task {task_id!r}: remaining time {seconds!r} is not a finite "
                    "number of seconds >= 0; plan the DAG again (airflow gpu-dag plan)"
                )
    descendants = descendant_counts(graph, MAX_DESCENDANTS_COUNTED)
    return RunShape(dict(remaining), work_of(slot_seconds(graph), capacity), descendants)


def slot_seconds(graph: TaskGraph) -> dict[str, float]:
    """Per pool, the slot-seconds the tasks of ``graph`` hold (duration x slots): the run's work before
    it is divided by the pool's capacity (independent of the capacity, so it can be computed once). A
    fallback rung the plan has fall back (``plan_rung``) only waits its ``start_within``, holding no
    slots: it adds none."""
    seconds: dict[str, float] = {}
    for node in graph.nodes.values():
        fallback = node.attrs.get("fallback")
        if isinstance(fallback, Mapping) and fallback.get("role") == "fell back":
            continue
        pool = task_pool(node)
        seconds[pool] = seconds.get(pool, 0.0) + node.duration * task_slots(node)
    return seconds


def work_of(seconds: Mapping[str, float], capacity: Mapping[str, int]) -> float:
    """``W``: the largest slot-seconds / capacity over the pools of known capacity (others add none)."""
    return max((s / capacity[p] for p, s in seconds.items() if capacity.get(p, 0) > 0), default=0.0)


def task_keys(shape: RunShape, trigger: float, objective: Objective) -> dict[str, float]:
    """``key(t) = trigger + min(s * W, W + overdue) - c * remaining(t) - U * min(lead(t), K)`` for every
    task (see the module docstring)."""
    if objective.head_start <= 0:
        return {
            task_id: objective.key(trigger, shape.work, rest) for task_id, rest in shape.remaining.items()
        }
    lead = shape.descendant_lead
    return {
        task_id: objective.key(trigger, shape.work, rest, lead[task_id])
        for task_id, rest in shape.remaining.items()
    }


def key_weight(key: float, epoch: float = DEFAULT_EPOCH) -> int:
    """The ``priority_weight`` of a key: ``2**31 - 1 - round(key - epoch)``, clamped to int32 (halves round
    up, so two keys a whole number of seconds apart stay exactly that far apart)."""
    if not math.isfinite(key):
        return 1
    return clamp_int32(INT32_MAX - math.floor(key - epoch + 0.5))


def key_of_weight(weight: int, epoch: float = DEFAULT_EPOCH) -> float | None:
    """The key a weight encodes, or None when ``weight`` is below :data:`KEY_WEIGHT_FLOOR` (a stock
    weight, e.g. of a DAG that does not use the cross-DAG rules)."""
    if weight < KEY_WEIGHT_FLOOR:
        return None
    return float(INT32_MAX - weight) + epoch


def run_weights(
    graph: TaskGraph,
    trigger: float,
    capacity: Mapping[str, int],
    objective: Objective,
    epoch: float = DEFAULT_EPOCH,
    remaining: Mapping[str, float] | None = None,
) -> dict[str, int]:
    """The weights of one run of ``graph`` triggered at ``trigger`` (same clock as ``epoch``)."""
    keys = task_keys(run_shape(graph, capacity, remaining), trigger, objective)
    return {task_id: key_weight(key, epoch) for task_id, key in keys.items()}


@dataclass(frozen=True)
class ReservationGate:
    """Whether holding slots for a wide head ``W`` is worth what it costs the other DAGs' waiting work.

    Holding slots idles them until ``W`` can start; the work waiting behind ``W`` (often other DAGs'
    small runs) pays for it. With cross-DAG keys (:mod:`airflow_gpu_dag.core.policy.objective`) the gate
    holds slots for ``W`` only when

    * no ready task of another run waits (nobody else pays; within its own run the priority, the
      critical path or the plan, has already ordered the work), or
    * ``W``'s key is earlier than that of the next waiting ready task of another run by at least
      ``gap`` seconds: ``W`` is clearly more urgent than the work the held slots would run, or
    * ``W`` is ``overdue`` seconds past its key: from then on it is always reserved for (only with
      ``past_key_holds``; an objective with a descendants term has keys days before the trigger, every
      head would be past it, and its heads are held for once they starve instead).

    Otherwise the pool stays at its capacity and Airflow's own admission runs. A head or competitor
    whose weight is not a key (a DAG on a stock weight rule) is always reserved for (no gate).

    **Starving** (:meth:`starving`): a ready task that has waited ``overdue`` seconds since
    ``max(its key, when it turned ready)``. While one waits, the head is reserved for whatever the gate
    says and only work ahead of the starving task is backfilled
    (:func:`~airflow_gpu_dag.core.policy.reservation.decide_pool`): slots that free between two controller
    ticks then go to later work only after a tick that admitted earlier work, which bounds every wait
    (docs/priority.md states the bound and proves it). Measured from the ready time, not the key, so
    a long pipeline whose key lies hours before its trigger is not starving the moment it is ready.
    """

    gap: float
    overdue: float
    epoch: float = DEFAULT_EPOCH
    past_key_holds: bool = True

    @classmethod
    def for_objective(cls, objective: Objective, epoch: float = DEFAULT_EPOCH) -> ReservationGate:
        """The gate of ``objective`` (``gap`` 0: it holds slots for every wide head; with a descendants
        term, overdue counted from the ready time only)."""
        return cls(objective.gap, objective.gate_overdue, epoch, past_key_holds=objective.head_start <= 0)

    def waiting_since(self, task: ReadyTask) -> float | None:
        """``max(key, ready time)`` of ``task``: what its starving is measured from (None when its weight
        is not a key or its ready time is unknown, as for a pending task)."""
        key = key_of_weight(task.priority, self.epoch)
        if key is None or task.since is None or isinstance(task, PendingTask):
            return None
        return max(key, task.since)

    def starving(self, now: float, tasks: Iterable[ReadyTask]) -> ReadyTask | None:
        """The first, in admission order, of the ready tasks of ``tasks`` that have waited ``overdue``
        (:meth:`waiting_since`); None when none has. Backfill is limited to work ahead of it, so ahead of
        every starving task."""
        first: ReadyTask | None = None
        for task in tasks:
            since = self.waiting_since(task)
            if since is None or now - since < self.overdue:
                continue
            if first is None or admission_order(task) < admission_order(first):
                first = task
        return first

    def wait_bound(self, key: float, ready: float, ahead: int, longest: float, interval: float) -> float:
        """The most a task with key ``key``, ready at ``ready``, waits with the controller running every
        ``interval`` seconds (docs/priority.md proves it), ``ahead`` task instances of its pool having an
        earlier key and ``longest`` being the pool's longest task: ``max(0, key - ready) + overdue +
        (ahead + 1) * (longest + 2 * interval)``; at interval 0, with past-key holds, the tighter
        ``max(0, key + overdue - ready) + (ahead + 1) * longest``."""
        if interval <= 0 and self.past_key_holds:
            return max(0.0, key + self.overdue - ready) + (ahead + 1) * longest
        return max(0.0, key - ready) + self.overdue + (ahead + 1) * (longest + 2 * interval)

    def verdict(
        self, now: float, head: ReadyTask, competitor: ReadyTask | None, starving: ReadyTask | None = None
    ) -> dict[str, Any]:
        """The gate's verdict on holding slots for the wide ``head``, as the fields of a
        :class:`~airflow_gpu_dag.core.policy.reasons.Reason`: ``code`` (``starving``, ``reserving``,
        ``overdue`` or, when it does not hold, ``not-urgent-enough``) and the figures behind it.
        ``competitor`` is the next ready task of another run after ``head`` (None: there is none),
        ``starving`` a starving task (:meth:`starving`; always held for).

        The branches, in order: a starving task; a head or competitor without a key, or a gap of 0
        (always held for); ``overdue`` (with ``past_key_holds`` only); then the gap. Without past-key
        holds (``fair``) the words say ``from_ready``: the head is held for once it starves,
        ``overdue`` seconds after it turned ready."""
        if starving is not None:
            since = self.waiting_since(starving)
            waited = 0.0 if since is None else now - since
            return {"code": "starving", "starving": starving.key, "waited": waited}
        head_key = key_of_weight(head.priority, self.epoch)
        if head_key is None or competitor is None or self.gap <= 0:
            return {"code": "reserving"}
        if self.past_key_holds and now - head_key >= self.overdue:
            return {"code": "overdue", "past_key": now - head_key, "overdue_after": self.overdue}
        other = key_of_weight(competitor.priority, self.epoch)
        if other is None or other - head_key >= self.gap:
            return {"code": "reserving"}
        return {
            "code": "not-urgent-enough",
            "competitor": competitor.key,
            "key_gap": other - head_key,
            "gap": self.gap,
            "past_key": max(0.0, now - head_key),
            "overdue_after": self.overdue,
            "from_ready": not self.past_key_holds,
        }

    def holds_for(
        self, now: float, head: ReadyTask, competitor: ReadyTask | None, starving: ReadyTask | None = None
    ) -> bool:
        """Whether the gate holds slots for ``head`` (:meth:`verdict`)."""
        return self.verdict(now, head, competitor, starving)["code"] != "not-urgent-enough"


class StarvingWatch:
    """:meth:`ReservationGate.starving` kept up to date as tasks turn ready and start (the simulator's
    way; the controller reads every waiting task at each tick instead). A task enters a heap of waits
    when it turns ready, moves to a heap in admission order once it has waited ``overdue``, and leaves
    when it has started."""

    def __init__(self, gate: ReservationGate) -> None:
        self.gate = gate
        self._aging: list[tuple[float, str, ReadyTask]] = []
        self._starving: list[tuple[tuple, ReadyTask]] = []

    def add(self, task: ReadyTask) -> None:
        """``task`` turned ready (ignored when it can never starve: no key or no ready time)."""
        since = self.gate.waiting_since(task)
        if since is not None:
            heapq.heappush(self._aging, (since, task.key, task))

    def first(self, now: float, started: Container[str]) -> ReadyTask | None:
        """The first starving task in admission order at ``now`` (tasks whose key is in ``started`` have
        left the queue)."""
        while self._aging and now - self._aging[0][0] >= self.gate.overdue:
            task = heapq.heappop(self._aging)[2]
            if task.key not in started:
                heapq.heappush(self._starving, (admission_order(task), task))
        while self._starving and self._starving[0][1].key in started:
            heapq.heappop(self._starving)
        return self._starving[0][1] if self._starving else None

    def next_change(self) -> float:
        """No task starts starving before this time (about: ``since + overdue`` of the longest wait not
        yet starving; infinite when none ages), unless tasks turn ready."""
        return self._aging[0][0] + self.gate.overdue if self._aging else math.inf
