"""Durations learned from past runs: a robust estimate per task from its recent successful tries.

Pure: no Airflow. The adapters read the history (:mod:`airflow_gpu_dag.airflow.history` from the
metadata database, :mod:`airflow_gpu_dag.watermark.durations` over REST) as :class:`RunSample` objects;
:func:`estimate_duration` turns them into a :class:`DurationEstimate`:

1. only successful tries count: failed, up-for-retry, skipped... tries are dropped (``not_success``);
2. a try with an end before its start or a negative duration (clock skew between hosts) is dropped
   (``clock_skew``), and so is a try shorter than :data:`MIN_RUN_SECONDS` (``zero_length``: a no-op
   run, a task that found its output already there);
3. the last ``window`` remaining tries are kept (most recent first);
4. a change of level is followed (``before_change``): when the newest tries (at least
   :data:`SHIFT_RUNS` and ``min_runs``) all lie on one side of the older tries' median beyond the
   outlier limit and agree with each other, the task's duration changed (new data, a new model, a new DAG
   version): the older tries are dropped instead of the new ones;
5. outliers are dropped (``outlier``): a try whose log-duration is more than ``outlier_mads`` robust
   standard deviations (1.4826 x the median absolute deviation, at least 0.1, and at least
   :data:`FEW_RUNS_SPREAD` with fewer than :data:`FEW_RUNS` tries, whose spread says little) from the
   median log-duration; a handful of outliers cannot move the median, this keeps them out of the
   quantile;
6. with at least ``min_runs`` tries left, the learned duration is the mean of their log-durations
   (a geometric mean: once the outliers are out it locates the duration more precisely than the
   median, and the packing planner is sensitive to that error), shrunk towards the
   declared estimate (the prior) by precision: the prior counts as one observation
   with a log-scale error of :data:`PRIOR_SIGMA` (declared estimates are guesses, about x/÷1.65), each
   try as one with the tries' own robust spread. Five consistent tries outweigh the declaration almost
   completely; two wildly scattered ones do not. A declaration more than :data:`PRIOR_CONFLICT`
   standard deviations from the tries is plainly wrong and is not averaged in. The high quantile
   (``quantile``, default 0.9) is read from the kept tries;
7. below ``min_runs`` tries (or with learning off) the declared estimate is used, else the default.

:meth:`DurationEstimate.expected_remaining` answers the controller's question "this task has run for
``t`` seconds, how much longer?": the median of the kept tries longer than ``t``, minus ``t``; without
such tries the estimate minus ``t``; once a task has overrun everything known, a tenth of the estimate.

:func:`with_estimates` returns a copy of a :class:`~airflow_gpu_dag.core.model.graph.TaskGraph` whose
durations are the estimates (the declared value kept in ``node.attrs["declared_duration"]``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_gpu_dag.core.model.graph import TaskGraph, TaskNode

__all__ = [
    "DEFAULT_SETTINGS",
    "MIN_RUN_SECONDS",
    "OVERRUN_FRACTION",
    "PRIOR_CONFLICT",
    "PRIOR_SIGMA",
    "DurationEstimate",
    "EstimateSettings",
    "RunSample",
    "estimate_duration",
    "estimate_durations",
    "planning_error",
    "quantile",
    "with_estimates",
]

#: Tries shorter than this are zero-length (marked success by hand, a no-op run), not evidence of how
#: long the work takes. Short but real runs are judged by the outlier rule instead.
MIN_RUN_SECONDS = 0.1
#: Log-scale error assumed for a declared estimate (the prior): a guess within x/÷1.65 most of the time.
PRIOR_SIGMA = 0.5
#: A prior further than this many standard deviations (its own and the tries' combined) from the tries
#: is a declaration the tries show to be wrong ("1 hour" for a 3-second task): it is dropped, not
#: averaged in (a normal prior would drag the estimate by the size of the mistake).
PRIOR_CONFLICT = 3.0
#: Once a running task has overrun every known try and its estimate, it is expected to need this
#: fraction of its estimate more.
OVERRUN_FRACTION = 0.1
#: Lower bound of the robust log-scale spread (identical tries would otherwise reject any deviation).
_MIN_SPREAD = 0.1
#: Below this many tries their spread is a poor measure: two similar tries would make a third one
#: 1.5x away an outlier and throw the history away. The spread is then taken as at least
#: :data:`FEW_RUNS_SPREAD` (3.5 of them: about x/÷2.9).
FEW_RUNS = 8
FEW_RUNS_SPREAD = 0.3
#: Fewest newest tries that, all beyond the outlier limit on one side and agreeing, are a change of
#: level rather than outliers (one or two such tries may be a bad night).
SHIFT_RUNS = 3
#: Spread assumed when there is a single try (nothing to measure it from).
_SINGLE_SPREAD = 0.25
_STATES_OK = frozenset({"success"})


@dataclass(frozen=True)
class RunSample:
    """One past try of a task, as the history records it.

    ``duration`` is Airflow's recorded duration in seconds (None: compute it from ``start``/``end``,
    epoch seconds). ``state`` is the try's final state. ``map_index`` and ``run_id`` say which
    instance it was (-1: not mapped).
    """

    duration: float | None
    state: str = "success"
    start: float | None = None
    end: float | None = None
    map_index: int = -1
    run_id: str | None = None


@dataclass(frozen=True)
class EstimateSettings:
    """How durations are learned (``[gpu_dag] learned_*`` options, see ``settings.estimate_settings``).

    ``enabled``: learn at all. ``window``: the last N successful tries per task. ``quantile``: the high
    quantile reported next to the estimate. ``min_runs``: tries needed before the history is used.
    ``flag_factor``: a declared estimate off from the learned one by more than this factor is flagged.
    ``outlier_mads``: the outlier limit, in robust standard deviations (finite, > 0).
    """

    enabled: bool = True
    window: int = 20
    quantile: float = 0.9
    min_runs: int = 3
    flag_factor: float = 1.5
    outlier_mads: float = 3.5

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"learned_window must be >= 1, got {self.window}")
        if not 0.0 < self.quantile < 1.0:
            raise ValueError(f"learned_quantile must be between 0 and 1 (exclusive), got {self.quantile}")
        if self.min_runs < 1:
            raise ValueError(f"learned_min_runs must be >= 1, got {self.min_runs}")
        if not 1.0 < self.flag_factor < math.inf:  # also NaN
            raise ValueError(f"learned_flag_factor must be a finite number > 1, got {self.flag_factor}")
        if not 0.0 < self.outlier_mads < math.inf:  # NaN, 0 or less: (nearly) every try an outlier
            raise ValueError(f"outlier_mads must be a finite number > 0, got {self.outlier_mads}")


DEFAULT_SETTINGS = EstimateSettings()


@dataclass(frozen=True)
class DurationEstimate:
    """What is known about how long one task (each instance of a mapped task) runs.

    ``declared``: the task's own estimate (None when it declares none). ``fallback``: what is used
    without history (the declared estimate, else ``[gpu_dag] default_duration``). ``learned``: the
    estimate from history (None: too few tries, learning off, or the history could not be read).
    ``high``: the ``quantile`` of the kept tries. ``runs``: tries the estimate rests on; ``dropped``:
    tries left out, by reason. ``samples``: the kept tries' durations, most recent first.
    ``note``: why there is no learned value when that is not simply "too few runs".
    """

    task_id: str
    declared: float | None
    fallback: float
    learned: float | None = None
    high: float | None = None
    runs: int = 0
    dropped: Mapping[str, int] = field(default_factory=dict)
    samples: tuple[float, ...] = ()
    spread: float | None = None
    note: str = ""

    @property
    def duration(self) -> float:
        """The duration to plan with: learned when there is enough history, else the fallback."""
        return self.learned if self.learned is not None else self.fallback

    @property
    def error(self) -> float | None:
        """How far :attr:`learned` may still be off, as a log-scale standard error: the tries' robust
        spread over the square root of their number (None without a learned value)."""
        if self.learned is None or self.spread is None or self.runs <= 0:
            return None
        return self.spread / math.sqrt(self.runs)

    @property
    def source(self) -> str:
        """``learned``, ``declared`` or ``default``: where :attr:`duration` comes from."""
        if self.learned is not None:
            return "learned"
        return "declared" if self.declared is not None else "default"

    @property
    def ratio(self) -> float | None:
        """learned / declared (None unless both are known and positive)."""
        if self.learned is None or not self.declared or self.declared <= 0:
            return None
        return self.learned / self.declared

    def off_by(self, factor: float) -> bool:
        """True when the declared estimate is off from the learned one by more than ``factor``
        (either way), or when nothing is declared but a duration was learned."""
        if self.learned is None:
            return False
        if self.declared is None:
            return True
        ratio = self.ratio
        if ratio is None:  # declared 0 (a marker task) but it takes time
            return self.learned >= MIN_RUN_SECONDS
        return ratio > factor or ratio < 1.0 / factor

    def expected_remaining(self, elapsed: float) -> float:
        """Seconds a try still needs after running ``elapsed`` seconds (conditional on ``elapsed``)."""
        elapsed = max(0.0, float(elapsed))
        if self.learned is not None:
            longer = [d for d in self.samples if d > elapsed]
            if longer:
                return statistics.median(longer) - elapsed
        base = self.duration
        if elapsed < base:
            return base - elapsed
        return OVERRUN_FRACTION * base

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (CLI ``-o json``, the UI's data endpoint)."""
        return {
            "task_id": self.task_id,
            "declared": self.declared,
            "fallback": self.fallback,
            "learned": self.learned,
            "high": self.high,
            "duration": self.duration,
            "source": self.source,
            "runs": self.runs,
            "dropped": dict(self.dropped),
            "ratio": self.ratio,
            "note": self.note,
        }


def quantile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile of ``values`` by linear interpolation (type 7); ``ValueError`` when empty."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _duration_of(sample: RunSample) -> tuple[float | None, str | None]:
    """The try's duration, or None and the reason it is dropped."""
    if sample.start is not None and sample.end is not None and sample.end < sample.start:
        return None, "clock_skew"
    value = sample.duration
    if value is None and sample.start is not None and sample.end is not None:
        value = sample.end - sample.start
    if value is None or not math.isfinite(value):
        return None, "no_duration"
    if value < 0:
        return None, "clock_skew"
    if value < MIN_RUN_SECONDS:
        return None, "zero_length"
    return float(value), None


def _recent_first(samples: Iterable[RunSample]) -> list[RunSample]:
    """Most recent first: by end (or start) time when known; the given order otherwise (stable)."""
    listed = list(samples)
    if all(s.end is None and s.start is None for s in listed):
        return listed
    return sorted(
        listed, key=lambda s: -(s.end if s.end is not None else s.start if s.start is not None else -math.inf)
    )


def estimate_duration(
    task_id: str,
    samples: Iterable[RunSample],
    declared: float | None,
    fallback: float,
    settings: EstimateSettings = DEFAULT_SETTINGS,
) -> DurationEstimate:
    """The :class:`DurationEstimate` of one task from its past tries (see the module docstring).

    :param declared: the task's declared estimate in seconds (None when it declares none); it is the
        prior and, without enough history, the value used.
    :param fallback: the value used without history when nothing is declared (the default duration).
    """
    fallback = float(declared) if declared is not None else float(fallback)
    if not settings.enabled:
        return DurationEstimate(task_id, declared, fallback, note="learning is off")
    dropped: dict[str, int] = {}
    kept: list[float] = []
    for sample in _recent_first(samples):
        if str(sample.state).lower() not in _STATES_OK:
            dropped["not_success"] = dropped.get("not_success", 0) + 1
            continue
        value, reason = _duration_of(sample)
        if value is None:
            dropped[str(reason)] = dropped.get(str(reason), 0) + 1
            continue
        if len(kept) < settings.window:
            kept.append(value)
    if not kept:
        return DurationEstimate(task_id, declared, fallback, dropped=dropped)
    since = _since_change(kept, settings, max(SHIFT_RUNS, settings.min_runs))
    if since < len(kept):
        dropped["before_change"] = len(kept) - since
        kept = kept[:since]
    logs = [math.log(v) for v in kept]
    centre, limit = _centre_and_limit(logs, settings)
    inliers = [v for v, x in zip(kept, logs, strict=True) if abs(x - centre) <= limit]
    if len(inliers) < len(kept):
        dropped["outlier"] = len(kept) - len(inliers)
    if len(inliers) < settings.min_runs:
        return DurationEstimate(
            task_id, declared, fallback, runs=len(inliers), dropped=dropped, samples=tuple(inliers)
        )
    logs = [math.log(v) for v in inliers]
    centre = statistics.fmean(logs)  # outliers are out: the mean is the more precise location
    if len(logs) == 1:
        spread = _SINGLE_SPREAD
    else:
        spread = max(1.4826 * statistics.median(abs(x - centre) for x in logs), _MIN_SPREAD / 2)
    mu = centre
    if declared is not None and declared >= MIN_RUN_SECONDS:
        data_precision = len(logs) / spread**2
        prior_precision = 1.0 / PRIOR_SIGMA**2
        conflict = abs(math.log(declared) - centre) / math.sqrt(1 / data_precision + 1 / prior_precision)
        if conflict <= PRIOR_CONFLICT:  # else the tries show the declaration is plainly wrong: drop it
            mu = (centre * data_precision + math.log(declared) * prior_precision) / (
                data_precision + prior_precision
            )
    learned = math.exp(mu)
    high = max(learned, quantile(inliers, settings.quantile))
    return DurationEstimate(
        task_id,
        declared,
        fallback,
        learned=learned,
        high=high,
        runs=len(inliers),
        dropped=dropped,
        samples=tuple(inliers),
        spread=spread,
    )


def _centre_and_limit(logs: list[float], settings: EstimateSettings) -> tuple[float, float]:
    """Median of the log-durations ``logs`` and the outlier limit around it (see the module docstring)."""
    centre = statistics.median(logs)
    spread = 1.4826 * statistics.median(abs(x - centre) for x in logs)
    floor = FEW_RUNS_SPREAD if len(logs) < FEW_RUNS else _MIN_SPREAD
    return centre, settings.outlier_mads * max(spread, floor)


def _since_change(kept: list[float], settings: EstimateSettings, runs: int) -> int:
    """How many of the newest tries (``kept`` is newest first) came after a change of level: all of
    them when there was none. A change: at least ``runs`` newest tries beyond the outlier limit on one
    side of the older tries' median (all but the newest ``runs``: with the new level half the window
    the window's own median would sit between the two), at least ``runs`` of them within that limit of
    their own median (one new level, not scatter; a spike among them is left to the outlier rule)."""
    if len(kept) <= runs:
        return len(kept)
    logs = [math.log(v) for v in kept]
    centre, limit = _centre_and_limit(logs[runs:], settings)
    side = 0
    count = 0
    for x in logs:
        offset = x - centre
        here = 1 if offset > limit else -1 if offset < -limit else 0
        if here == 0 or (side and here != side):
            break
        side, count = here, count + 1
    if count < runs or count == len(kept):
        return len(kept)
    newest = logs[:count]
    level = statistics.median(newest)
    return count if sum(abs(x - level) <= limit for x in newest) >= runs else len(kept)


def estimate_durations(
    graph: TaskGraph,
    history: Mapping[str, Iterable[RunSample]],
    settings: EstimateSettings = DEFAULT_SETTINGS,
    note: str = "",
) -> dict[str, DurationEstimate]:
    """Estimates for every task of ``graph`` (``task_id -> estimate``; the instances of an expanded
    mapped task share their task's estimate, keyed by the task id). ``history`` maps a task id to its
    past tries. ``note`` is set on every estimate (e.g. why the history is missing)."""
    estimates: dict[str, DurationEstimate] = {}
    for node in graph.nodes.values():
        task_id = str(node.attrs.get("map_of") or node.task_id)
        if task_id in estimates:
            continue
        declared, fallback = _declared_of(node)
        estimate = estimate_duration(task_id, history.get(task_id, ()), declared, fallback, settings)
        estimates[task_id] = replace(estimate, note=note) if note and not estimate.note else estimate
    return estimates


def _declared_of(node: TaskNode) -> tuple[float | None, float]:
    """``(declared, fallback)`` of a node: its own estimate (for a contingent fallback rung, the
    duration it would have), or None and the default the graph reader filled in."""
    raw = node.attrs.get("declared_duration", node.attrs.get("contingent_duration", node.duration))
    fallback = node.attrs.get("fallback")
    if _fell_back(node) and isinstance(fallback, Mapping):  # planned as its start_within wait
        raw = fallback.get("expected_duration", raw)
    value = float(raw) if isinstance(raw, int | float) else node.duration
    return (value if node.duration_declared else None), value


def _fell_back(node: TaskNode) -> bool:
    """A fallback rung before the planned one: planned as waiting its ``start_within``."""
    fallback = node.attrs.get("fallback")
    return isinstance(fallback, Mapping) and fallback.get("role") == "fell back"


def with_estimates(graph: TaskGraph, estimates: Mapping[str, DurationEstimate]) -> TaskGraph:
    """A copy of ``graph`` planned with the estimated durations.

    Each node keeps its declared value in ``attrs["declared_duration"]`` and gets
    ``attrs["duration_source"]`` (``learned``/``declared``/``default``), and with a learned value
    ``attrs["learned_duration"]`` and ``attrs["learned_error"]`` (:attr:`DurationEstimate.error`, read by
    :func:`planning_error`); nodes of an expanded mapped
    task use their task's estimate (``attrs["map_of"]``). A fallback rung before the planned one keeps
    its ``start_within`` (its estimate goes to ``attrs["fallback"]["expected_duration"]``). These keep
    a duration of 0: a contingent fallback rung (its estimate goes to ``attrs["contingent_duration"]``),
    a task that declares 0 (a marker or control task the plan must not pad) and a mapped task with no instance
    (``attrs["map_count"] == 0``). The input graph is not changed.
    """
    copy = TaskGraph(graph.dag_id, priority_rule=graph.priority_rule)
    for node in graph.nodes.values():
        estimate = estimates.get(str(node.attrs.get("map_of") or node.task_id))
        attrs = dict(node.attrs)
        attrs.setdefault("declared_duration", attrs.get("contingent_duration", node.duration))
        duration = node.duration
        if estimate is not None:
            marker = (  # a marker or control task declaring 0, or a mapped task with no instance
                node.duration_declared and node.duration == 0 and "contingent_duration" not in attrs
            ) or attrs.get("map_count") == 0
            attrs["duration_source"] = "declared" if marker else estimate.source
            if estimate.learned is not None:
                attrs["learned_duration"] = estimate.learned
                if estimate.error is not None:
                    attrs["learned_error"] = estimate.error
            if "contingent_duration" in attrs:
                attrs["contingent_duration"] = estimate.duration
            elif _fell_back(node):  # it waits its start_within, then the ladder moves on
                rung: Mapping[str, Any] = node.attrs["fallback"]  # type: ignore[assignment]
                attrs["fallback"] = {**rung, "expected_duration": estimate.duration}
            elif not marker:
                duration = estimate.duration
        copy.add_task(replace(node, duration=duration, attrs=attrs))
    for up, down, kind in graph.edges():
        copy.add_edge(up, down, kind)
    return copy


#: The largest hedge :func:`planning_error` asks of the planner: with errors this large no plan is
#: reliably better than another (docs/benchmarks/makespan.md, estimates off by +/- 30 %).
MAX_PLANNING_ERROR = 0.3


def planning_error(graph: TaskGraph) -> float:
    """How far the learned durations of ``graph`` (:func:`with_estimates`) may typically still be off: the
    median over its learned tasks of their standard error (``attrs["learned_error"]``), at most
    :data:`MAX_PLANNING_ERROR`; 0 when no duration was learned (declared estimates: their error is unknown).

    The packing planner scores its options over worlds whose durations are off by this much
    (:func:`~airflow_gpu_dag.core.planning.planner.packing_weights_plan`), so that of two plans it keeps the
    one
    that still wins when the estimates are off by what the history says they may be.
    """
    errors = [
        float(value)
        for node in graph.nodes.values()
        if isinstance(value := node.attrs.get("learned_error"), int | float) and math.isfinite(value)
    ]
    if not errors:
        return 0.0
    return min(MAX_PLANNING_ERROR, max(0.0, statistics.median(errors)))
