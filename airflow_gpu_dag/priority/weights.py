"""``get_weight`` for the provider's rules: a task instance's cross-DAG key, fast and never raising.

For a task instance of DAG ``d`` (the serialized DAG object the scheduler or api-server holds) in a run
triggered at ``T``::

    weight = 2**31 - 1 - round(T + min(s * W(d), W(d) + overdue) - c * remaining(d, task)
                               - U * min(lead(d, task), K) - E)

(:mod:`airflow_gpu_dag.core.policy.objective`): ``remaining`` is the critical path from the task to the end of
the run (``critical_path`` rule) or the packing plan's planned end - planned start (``packing`` rule,
once the plan is ready; the critical path until then; for a DAG of more than
:data:`PACKING_PLAN_MAX_TASKS` tasks, which is not planned, the ``width_aware`` critical path), ``W``
the DAG's GPU work over the pool capacity, ``lead`` the descendants lead of the task (the most tasks
downstream of any task of the DAG with at most its remaining time), ``s``,
``c``, ``overdue``, ``U`` and ``K`` the objective's stretch, chain, overdue, descendant unit and cap
(``U`` = 0 but for ``fair``), ``E`` ``[gpu_dag] key_epoch``.
Work per call: dictionary lookups, plus, once per DAG object, the O(V + E) basis (:mod:`.basis`): made
off the scheduler loop when the task carries the figures the cluster policy derived
(:mod:`airflow_gpu_dag.airflow.parse_time`; the weights use them until the basis is ready, once their
digest is checked against the DAG, one pass over its tasks per DAG version), else inline (a DAG parsed
without the policy, or whose figures are not its own). Plans come from :class:`~.background.Background`,
durations learned from past runs from :class:`~.learned.LearnedDurations` (both off the scheduler loop).
Settings are re-read at most every :data:`SETTINGS_TTL_S` seconds.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import airflow_gpu_dag.metrics as metrics
import airflow_gpu_dag.settings as settings
from airflow_gpu_dag.airflow import parse_time
from airflow_gpu_dag.core.analysis.estimates import planning_error
from airflow_gpu_dag.core.analysis.weight_rules import clamp_int32, width_aware_weights
from airflow_gpu_dag.core.model.graph import TaskGraph
from airflow_gpu_dag.core.model.resources import format_duration
from airflow_gpu_dag.core.policy.objective import Objective, key_weight, run_shape, work_of
from airflow_gpu_dag.log_once import LogOnce
from airflow_gpu_dag.priority.background import Background
from airflow_gpu_dag.priority.basis import DagBasis, build_basis
from airflow_gpu_dag.priority.learned import LEARNED_REFRESH_S, Learned, LearnedDurations, refresh_bound
from airflow_gpu_dag.priority.trigger import TriggerTimes

log = logging.getLogger(__name__)
#: Derived figures of another DAG version, said once per DAG and digest.
_mismatch = LogOnce(log)

__all__ = [
    "PACKING_PLAN_MAX_TASKS",
    "SETTINGS_TTL_S",
    "CrossDagWeights",
    "WeightSettings",
    "key_capacities",
    "policy_text",
]

#: Above this many tasks no packing plan is made: the ``width_aware`` critical path is used instead.
PACKING_PLAN_MAX_TASKS = 3000
SETTINGS_TTL_S = 30.0
#: DAG versions whose latest basis is kept per process (shared by the objects of a version).
MAX_VERSION_BASES = 1024


def key_capacities() -> dict[str, int]:
    """The pool capacities a run's GPU work is measured against: ``[gpu_dag] pools``, else the pool
    sizes of the static inventory (``[gpu_dag] inventory``), else none (the work term is then 0: runs are
    ordered by trigger time and critical path)."""
    pools = settings.pool_capacities()
    if pools:
        return {p: c for p, c in pools.items() if c > 0}
    # start-up: the plugin imports the weight rule in every process; the GPU package loads only without pools
    from airflow_gpu_dag.gpu.inventory import InventoryError, configured_inventory_spec, parse_inventory

    spec = configured_inventory_spec()
    if spec:
        try:
            return {p: c for p, c in parse_inventory(spec).pool_sizes().items() if c > 0}
        except InventoryError as err:
            log.warning("airflow-gpu-dag: [gpu_dag] inventory is invalid (%s)", err)
    return {}


@dataclass(frozen=True)
class WeightSettings:
    """The settings the weights depend on, read together."""

    objective: Objective
    epoch: float
    capacity: dict[str, int]
    plan_policy: str
    plan_search_budget: int
    plan_strict_backfill: bool
    plan_in_background: bool
    planner_nice: int = settings.PLANNER_NICE  # [gpu_dag] planner_nice
    learned: bool = False  # [gpu_dag] learned_durations
    learned_refresh: float = LEARNED_REFRESH_S  # [gpu_dag] learned_refresh, seconds

    @classmethod
    def read(cls) -> WeightSettings:
        return cls(
            objective=settings.objective(),
            epoch=settings.key_epoch(),
            capacity=key_capacities(),
            plan_policy=settings.plan_policy(),
            plan_search_budget=settings.plan_search_budget(),
            plan_strict_backfill=settings.plan_strict_backfill(),
            plan_in_background=settings.plan_in_background(),
            planner_nice=settings.planner_nice(),
            learned=settings.estimate_settings().enabled,
            learned_refresh=settings.learned_refresh(),
        )

    def planner_settings(self) -> dict[str, Any]:
        return {
            "policy": self.plan_policy,
            "search": self.plan_search_budget,
            "strict": self.plan_strict_backfill,
        }


class CrossDagWeights:
    """The weights of one process (one instance per strategy class; the class is rebuilt without
    arguments by Airflow, the state lives here)."""

    def __init__(self, rule: str, read_settings: Callable[[], WeightSettings] = WeightSettings.read) -> None:
        self.rule = rule
        self._read_settings = read_settings
        self._settings: WeightSettings | None = None
        self._settings_at = -1e18
        self._bases: weakref.WeakKeyDictionary[Any, DagBasis] = weakref.WeakKeyDictionary()
        self._failed: weakref.WeakKeyDictionary[Any, tuple[dict[str, int], str]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._settings_lock = threading.RLock()  # re-entered: a reader's prepare may ask for the settings
        self.triggers = TriggerTimes()
        self.background: Background | None = None
        self.learned: LearnedDurations | None = None
        self.basis_builds = 0  # DAG objects analysed (metrics, tests)
        # the latest basis of each DAG version ("dag_id:version"), shared by every object of it (an
        # api-server loads a new object per request) and made by the learned-durations thread
        self._versions: OrderedDict[str, DagBasis] = OrderedDict()
        # the digest of each DAG version ("dag_id:dag_version_id") and DAG object, checked against the
        # digest of the parse-time figures before they are used
        self._digests: OrderedDict[str, str] = OrderedDict()
        self._object_digests: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    # -- settings ---------------------------------------------------------------------------------
    def settings(self) -> WeightSettings:
        with self._settings_lock:  # one thread re-reads: two would each make (and leak) a new reader
            return self._fresh_settings()

    def _fresh_settings(self) -> WeightSettings:
        now = time.monotonic()
        if self._settings is None or now - self._settings_at > SETTINGS_TTL_S:
            self._settings = self._read_settings()
            self._settings_at = now
            background = (not self._settings.plan_in_background, self._settings.planner_nice)
            if self.background is None or (self.background.inline, self.background.nice) != background:
                old_background, self.background = (
                    self.background,
                    Background(inline=background[0], label=self.rule, nice=background[1]),
                )
                if old_background is not None:
                    old_background.close()  # its thread and subprocess end once its queued jobs are done
            # compared as LearnedDurations keeps it (at least 1 s): else every re-read makes a new one
            inline, refresh = (
                not self._settings.plan_in_background,
                refresh_bound(self._settings.learned_refresh),
            )
            if self.learned is None or (self.learned.inline, self.learned.refresh_s) != (inline, refresh):
                old_learned, self.learned = (
                    self.learned,
                    LearnedDurations(refresh, inline=inline, prepare=self._prepare_learned),
                )
                if old_learned is not None:
                    old_learned.stop()  # else its refresh thread re-reads every DAG's history for ever
        return self._settings

    def reset(self) -> None:
        """Forget settings, bases and plans (tests); the threads of the forgotten objects end."""
        with self._lock:
            if self.background is not None:
                self.background.close()
            if self.learned is not None:
                self.learned.stop()
            self._settings = None
            self._bases = weakref.WeakKeyDictionary()
            self._failed = weakref.WeakKeyDictionary()
            self._versions = OrderedDict()
            self._digests = OrderedDict()
            self._object_digests = weakref.WeakKeyDictionary()
            self.background = None
            self.learned = None
            self.triggers = TriggerTimes()
            self.basis_builds = 0

    # -- the basis of a DAG object ----------------------------------------------------------------
    def basis(self, dag: Any) -> DagBasis:
        current = self.settings()
        try:
            basis = self._bases.get(dag)
        except TypeError:  # not weak-referenceable: no cache
            basis = None
        hit = basis is not None and self._current(basis, current)
        if basis is None or not hit:
            basis = self._build(dag, current)
            self.basis_builds += 1
        if current.learned and self.learned is not None:
            learned = self.learned.get(f"{basis.dag_id}:{basis.version}", dag)
            if learned is not None and basis.learned_at != learned.at:
                ready = self._version(f"{basis.dag_id}:{basis.version}", current)
                if learned.changes_nothing and not basis.from_history:
                    basis.learned_at = learned.at  # no history yet: the declared analysis stands
                elif ready is not None and ready.learned_at == learned.at:
                    basis, hit = ready, False  # made by the learned-durations thread
                elif self._in_background():
                    relearned = self._learned_basis(dag, basis.version, learned, current)
                    if relearned is None:  # cannot be analysed: the declared durations stay
                        basis.learned_at = learned.at
                    else:
                        basis, hit = relearned, False
                else:  # the O(V + E) analysis of the learned graph: in the background thread
                    self._relearn_later(dag, basis, learned, current)
        metrics.priority_cache(hit, self.rule)
        if not hit:
            with contextlib.suppress(TypeError):  # not weak-referenceable: no cache
                self._bases[dag] = basis
            self._keep_version(basis)
        if self.rule == "packing" and not basis.planned:
            self._apply_plan(basis, current)
        return basis

    def _in_background(self) -> bool:
        """True in the background worker thread, or when work runs inline (tests)."""
        return self.background is None or self.background.inline or self.background.is_worker()

    def _planner(self, current: WeightSettings) -> dict[str, Any]:
        """The settings a plan depends on (part of a basis's fingerprint)."""
        return {"rule": self.rule, **current.planner_settings()}

    def _learned_basis(
        self, dag: Any, version: str, learned: Learned, current: WeightSettings
    ) -> DagBasis | None:
        """The basis of DAG version ``version`` from its learned graph (None: it cannot be analysed)."""
        try:
            new = build_basis(
                dag, current.capacity, self._planner(current), learned.graph, learned.at, version
            )
        except Exception:  # a learned graph that cannot be analysed: the declared durations
            return None
        new.from_history = not learned.changes_nothing
        return new

    def _relearn_later(self, dag: Any, basis: DagBasis, learned: Learned, current: WeightSettings) -> None:
        """Rebuild ``dag``'s basis from its learned graph in the background thread; until then its
        weights stay those of ``basis``."""
        assert self.background is not None

        def relearn() -> None:
            new = self._learned_basis(dag, basis.version, learned, current)
            if new is None:
                basis.learned_at = learned.at  # cannot be analysed: not tried again per call
            else:
                self._keep_version(new)
                with contextlib.suppress(TypeError):
                    if self._bases.get(dag) is basis:  # nothing newer meanwhile
                        self._bases[dag] = new

        self.background.run(f"learned:{id(dag)}:{learned.at}", relearn)

    def _version(self, key: str, current: WeightSettings) -> DagBasis | None:
        """The latest basis of DAG version ``key`` for the current capacities, if one was made."""
        with self._lock:
            basis = self._versions.get(key)
            if basis is not None:
                self._versions.move_to_end(key)
        return basis if basis is not None and self._current(basis, current) else None

    def _current(self, basis: DagBasis, current: WeightSettings) -> bool:
        """Whether ``basis`` was made for the current capacities and planner settings (a change of
        either makes the DAG analysed, and planned, again), and not from history learning has since
        been turned off for."""
        same = basis.capacity == current.capacity and basis.planner == self._planner(current)
        return same and (current.learned or not basis.from_history)  # learning turned off: declared again

    def _keep_version(self, basis: DagBasis) -> None:
        key = f"{basis.dag_id}:{basis.version}"
        with self._lock:
            kept = self._versions.get(key)
            if kept is not None and (kept.learned_at or -1.0) > (basis.learned_at or -1.0):
                return  # a newer learned basis is kept already
            self._versions[key] = basis
            self._versions.move_to_end(key)
            while len(self._versions) > MAX_VERSION_BASES:
                self._versions.popitem(last=False)

    def _prepare_learned(self, key: str, dag: Any, learned: Learned) -> None:
        """Called by the learned-durations thread after each read: make the version's basis from the
        learned graph there, so no scheduler or api-server call waits for that analysis."""
        if learned.changes_nothing:
            return
        version = key.split(":", 1)[1] if ":" in key else ""
        new = self._learned_basis(dag, version, learned, self.settings())
        if new is not None:  # else the objects keep the declared analysis (and retry in the background)
            self._keep_version(new)

    def _analysed(self, dag: Any) -> bool:
        """Whether ``dag`` (this object) has its basis for the current capacities."""
        try:
            basis = self._bases.get(dag)
        except TypeError:  # not weak-referenceable: analysed on every call
            return True
        return basis is not None and basis.capacity == self.settings().capacity

    def _analyse_later(self, dag: Any) -> None:
        """Make ``dag``'s basis in the background thread (inline in tests), once per DAG object."""
        self.settings()  # makes the background worker
        assert self.background is not None
        with contextlib.suppress(TypeError):  # not weak-referenceable: never cached as failed
            if self._failed.get(dag) is not None:
                return  # analysed once and failed: the parse-time figures it is, without a job per call

        def analyse() -> None:
            try:
                self.basis(dag)
            except Exception as err:  # remembered by _build; said once per DAG object
                log.warning(
                    "airflow-gpu-dag: cannot analyse DAG %r (%s: %s); its weights use the critical path "
                    "computed when it was parsed",
                    getattr(dag, "dag_id", "?"),
                    type(err).__name__,
                    err,
                )

        self.background.run(f"basis:{id(dag)}", analyse)

    def _build(self, dag: Any, current: WeightSettings) -> DagBasis:
        """Build the basis of ``dag``; a failure is remembered for the DAG object (and these capacities),
        so a DAG whose analysis fails costs one analysis, not one per task instance of every run."""
        try:
            failed = self._failed.get(dag)
        except TypeError:  # not weak-referenceable
            failed = None
        if failed is not None and failed[0] == current.capacity:
            raise RuntimeError(f"the analysis of DAG {getattr(dag, 'dag_id', '?')!r} failed: {failed[1]}")
        try:
            return build_basis(dag, current.capacity, self._planner(current))
        except Exception as err:
            with contextlib.suppress(TypeError):
                self._failed[dag] = (dict(current.capacity), f"{type(err).__name__}: {str(err)[:200]}")
            raise

    def _apply_plan(self, basis: DagBasis, current: WeightSettings) -> None:
        if not basis.capacity:
            basis.planned = True  # nothing to plan against: the critical path it is
            return
        if len(basis.graph) > PACKING_PLAN_MAX_TASKS:
            # too large to plan: the width_aware rule (O(V + E)), the critical path in which a wide task
            # also pays for the drain it needs; its weights are tenths of a second
            basis.planned = True
            try:
                widths = width_aware_weights(basis.graph, basis.capacity)
            except Exception:  # the critical path stands
                log.exception("airflow-gpu-dag: width_aware weights of DAG %r failed", basis.dag_id)
                return
            basis.shape = replace(basis.critical, remaining={t: w / 10.0 for t, w in widths.items()})
            return
        assert self.background is not None
        remaining = self.background.plan(
            (
                basis.fingerprint,
                basis.graph,
                basis.capacity,
                current.plan_policy,
                current.plan_search_budget,
                current.plan_strict_backfill,
            )
        )
        if remaining is not None:
            basis.shape = replace(basis.critical, remaining=dict(remaining))
            basis.planned = True

    # -- one weight -------------------------------------------------------------------------------
    def weight(self, ti: Any) -> int:
        """The weight of ``ti`` (see the module docstring). Raises on anything unexpected; the
        strategy catches it and falls back to the task's own ``priority_weight``."""
        task = ti.task
        dag = task.get_dag()
        map_index = getattr(ti, "map_index", -1)
        if not self._analysed(dag):
            early = self._parse_time_weight(ti, task, dag)
            if early is not None:
                return early
        basis = self.basis(dag)  # inline only for a DAG without the policy's figures (or forged ones)
        index = -1 if map_index is None else int(map_index)
        remaining = basis.remaining(task.task_id, index)
        if remaining is None:
            raise KeyError(f"task {task.task_id!r} is not in the graph of DAG {basis.dag_id!r}")
        current = self.settings()
        key = current.objective.key(
            self.triggers.of(ti), basis.shape.work, remaining, basis.descendant_lead(task.task_id, index)
        )
        return key_weight(key, current.epoch)

    def _parse_time_weight(self, ti: Any, task: Any, dag: Any) -> int | None:
        """The weight from the figures the cluster policy derived (:mod:`airflow_gpu_dag.airflow.parse_time`)
        while ``dag`` (a new DAG object) is analysed off the loop; None when the basis is to be used: an
        object of the same DAG version was analysed already (its basis is shared), or the task carries no
        figures that belong to this DAG version (then the DAG is analysed inline)."""
        path = parse_time.read(task)
        if path is None:
            return None
        current = self.settings()
        if not self._digest_matches(dag, ti, path.version):  # first: figures of another version
            return None  # must not borrow that version's basis either
        ready = self._version(f"{dag.dag_id}:{path.version}", current)
        if ready is not None:  # another object of this DAG version was analysed: share its basis
            with contextlib.suppress(TypeError):
                self._bases[dag] = ready
            return None
        if path.descendants is None and current.objective.head_start > 0:
            return None  # figures written before the descendants count: the DAG is analysed
        self._analyse_later(dag)
        if self._analysed(dag):  # (inline, in tests, it is ready now)
            return None
        work = work_of(path.slot_seconds, current.capacity)
        key = current.objective.key(self.triggers.of(ti), work, path.remaining, path.descendants or 0)
        return key_weight(key, current.epoch)

    def _digest_matches(self, dag: Any, ti: Any, claimed: str) -> bool:
        """Whether ``claimed``, the digest a task's derived figures carry, is the digest of ``dag`` as the
        scheduler holds it (:func:`~airflow_gpu_dag.airflow.parse_time.version_digest`, computed once per
        DAG version: by ``ti.dag_version_id`` when Airflow gives it, else once per DAG object). Figures
        of another version, or written without the provider's cluster policy, are not used."""
        version_id = getattr(ti, "dag_version_id", None)
        key = f"{dag.dag_id}:{version_id}" if version_id is not None else None
        with self._lock:
            actual = self._digests.get(key) if key is not None else None
        if actual is None:
            try:
                actual = self._object_digests.get(dag)
            except TypeError:  # not weak-referenceable
                actual = None
        if actual is None:
            actual = parse_time.version_digest(dag)
            with contextlib.suppress(TypeError):
                self._object_digests[dag] = actual
            if key is not None:
                with self._lock:
                    self._digests[key] = actual
                    while len(self._digests) > MAX_VERSION_BASES:
                        self._digests.popitem(last=False)
        if actual == claimed:
            return True
        _mismatch.warning(
            f"{dag.dag_id}:{claimed}",
            "airflow-gpu-dag: the tasks of DAG %r carry derived figures that are not this DAG version's "
            "(digest %s, the DAG's is %s): written without the provider's cluster policy, or by hand. "
            "They are ignored and the DAG is analysed in the scheduler. Fix: install airflow-gpu-dag where "
            "the dag-processor runs, and write no 'derived' figures in executor_config.",
            dag.dag_id,
            claimed[:12],
            actual[:12],
        )
        return False


def fallback_weight(task: Any) -> int:
    """The task's own ``priority_weight`` (what Airflow would use; 1 when it has none), clamped."""
    try:
        value = getattr(task, "priority_weight", None)
        return clamp_int32(1 if value is None else value)
    except Exception:
        return 1


def policy_text(graph: TaskGraph, read_settings: Callable[[], WeightSettings] = WeightSettings.read) -> str:
    """One line saying which priority policy a plan or a prediction of ``graph`` assumes: the rule the
    DAG uses, the objective and its key, the run's GPU work and the reservation gate."""
    current = read_settings()
    rule = {"critical_path": "critical path", "packing": "packing plan"}.get(graph.priority_rule or "", "")
    if not rule:
        return (
            f"DAG {graph.dag_id!r} uses a stock weight rule: its weights are Airflow's, not cross-DAG keys "
            "(set weight_rule=CRITICAL_PATH_WEIGHT_RULE)."
        )
    objective = current.objective
    work = run_shape(graph, current.capacity).work
    pools = ", ".join(f"{p}={c}" for p, c in sorted(current.capacity.items()))
    work_text = (
        f"this run's GPU work on {pools}"
        if pools
        else "this run's GPU work: 0 without [gpu_dag] pools or inventory, so runs go by trigger time"
    )
    overdue = (
        f"or {format_duration(objective.gate_overdue)} overdue"
        if objective.head_start <= 0
        else f"or once it has waited {format_duration(objective.gate_overdue)} since it turned ready"
    )
    gate = (
        "reserves for every wide task"
        if objective.always_reserves
        else f"reserves for a wide task {format_duration(objective.gap)} more urgent than other runs' work, "
        f"{overdue}"
    )
    descendants = (
        f" - {format_duration(objective.descendant_unit)} x min(descendant lead, {objective.descendant_cap})"
        if objective.head_start > 0
        else ""
    )
    error = planning_error(graph) if graph.priority_rule == "packing" else 0.0
    hedge = (
        f" The plan is chosen over worlds whose durations are off by {error:.1%} (the learned durations' "
        "typical error)."
        if error > 0
        else ""
    )
    return (
        f"Priority: {rule}, objective {objective.name} for stages of "
        f"{format_duration(objective.stage_length)}: key = trigger + min({objective.stretch:g} x W, W + "
        f"{format_duration(objective.overdue)}) - {objective.chain:g} x remaining{descendants}, W = "
        f"{format_duration(work)} ({work_text}); the earliest key starts "
        f"first across all DAGs.{hedge} Controller: {gate}."
    )
