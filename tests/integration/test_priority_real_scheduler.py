"""Critical-path priority on the real Airflow scheduler (not ``dag.test()``, which ignores pools and
priority).

Setup: three independent chains (DAG file ``dags/priority/priority_chains.py``), generated twice,
with our weight rule and with Airflow's default ``downstream`` rule, and a DAG of the features that
change the task graph (``priority_features.py``). Each DAG has a pool of its own of 1 slot
(``one_slot_critical``, ``one_slot_downstream``, ``one_slot_features``) and ``[core] parallelism`` is 3,
one executor slot per pool: the three runs go at the same time and never compete, each alone in its pool.

What the scheduler does at each step: a loop first moves task instances whose upstreams are done to
``scheduled`` and then queues the ready task instances ordered by ``-priority_weight`` (ties:
logical date, map index) while pool slots and executor slots are free. With one slot only the
highest-priority ready task of the pool starts, and it runs alone until it is done. Two checks follow
from that:

- the scheduler's own rule, free of timing: when it queued a task, no task of the run that was
  already ``scheduled`` and still waiting had a higher weight (each task instance records when it
  was scheduled and when it was queued: :func:`queued_over_higher_weight`);
- the start order is a greedy order "highest weight among ready tasks" (:func:`greedy_orders`, all
  of them when ties leave a choice), where "ready" may lag the last completion by one step.
  Usually the worker reports the finished task's state to the api-server before the executor frees
  its slot, so the finished task's downstream is ``scheduled`` before the next pick. Under load that
  does not always hold: a CI run on a busy 2-core machine started b1, c1, b2 with the downstream rule
  (c1 picked while b2, of higher weight, was not yet ``scheduled``). The likely path: the report of
  b1's success was late (a slow api-server; the executor freed its slot anyway), and it was
  committed between a scheduler loop's scheduling step, which still saw b1 running, and the same
  loop's queueing step, which saw the pool slot free. The component logs of that run were not kept.
  The pick is then made among the tasks ready without b1's downstream, and it is still the highest
  weight the scheduler could see, which the first check verifies.

    critical-path weights: a1=10800 c1=6000 c2=3000 b1=2400 b2=1800 b3=1200 b4=600
        -> a1, c1, c2, b1, b2, b3, b4 (the only greedy order)
    downstream weights:    b1=4 b2=3 b3=2 c1=2 a1=1 b4=1 c2=1
        -> b1, b2, then ties: {b3, c1} ..., a1 among the last three
           (with a lagging view: b1 first, a1 never among the first three)
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.core.analysis.critical_path import analyze
from airflow_gpu_dag.core.model.mapping import task_of
from airflow_gpu_dag.core.policy.objective import DEFAULT_OBJECTIVE, KEY_WEIGHT_FLOOR, OBJECTIVES, run_shape
from airflow_gpu_dag.testing import AirflowCluster
from tests.scripts import load_script

pytestmark = pytest.mark.airflow_real

AIRFLOW_DAGS = "priority"
POOLS = {
    "cp_chains_critical": "one_slot_critical",
    "cp_chains_downstream": "one_slot_downstream",
    "cp_features": "one_slot_features",
}
AIRFLOW_POOLS = {pool: 1 for pool in POOLS.values()}
AIRFLOW_ENV = {"AIRFLOW__CORE__PARALLELISM": str(len(POOLS))}  # one executor slot per pool

DAG_DIR = Path(__file__).parent / "dags" / AIRFLOW_DAGS
CRITICAL = "cp_chains_critical"
DOWNSTREAM = "cp_chains_downstream"
FEATURES = "cp_features"

UPSTREAM: dict[str, list[str]] = {
    "a1": [],
    "b1": [],
    "b2": ["b1"],
    "b3": ["b2"],
    "b4": ["b3"],
    "c1": [],
    "c2": ["c1"],
}
EXPECTED_CP_WEIGHTS = {"a1": 10800, "b1": 2400, "b2": 1800, "b3": 1200, "b4": 600, "c1": 6000, "c2": 3000}
EXPECTED_DOWNSTREAM_WEIGHTS = {"a1": 1, "b1": 4, "b2": 3, "b3": 2, "b4": 1, "c1": 2, "c2": 1}
EXPECTED_CP_ORDER = ["a1", "c1", "c2", "b1", "b2", "b3", "b4"]
EXPECTED_FEATURE_WEIGHTS = {
    "setup_env": 6900,
    "prep.load": 6600,
    "prep.clean": 5400,
    "train": 4800,
    "evaluate": 1200,
    "teardown_env": 300,
}


@dataclass
class RunResult:
    dag_id: str
    run_id: str
    state: str
    tis: list[dict[str, Any]]

    def by_task(self) -> dict[str, dict[str, Any]]:
        """Unmapped task instances by task_id."""
        return {ti["task_id"]: ti for ti in self.tis if ti["map_index"] == -1}

    def start_order(self) -> list[str]:
        """task_ids in the order they started."""
        return [ti["task_id"] for ti in sorted(self.tis, key=lambda ti: _ts(ti["start_date"]))]


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def greedy_orders(
    weights: dict[str, int], upstream: dict[str, list[str]], *, lag: bool = False
) -> list[list[str]]:
    """Every order a 1-slot scheduler can start the tasks in: each step starts a task of maximal
    weight among those whose upstream tasks are done (ties branch). With ``lag``, a step may also
    pick as if the task started last were not done yet (its downstream not yet ``scheduled``)."""
    orders: list[list[str]] = []

    def top_ready(done: list[str], seen_done: list[str]) -> set[str]:
        ready = [t for t in weights if t not in done and all(u in seen_done for u in upstream[t])]
        top = max((weights[t] for t in ready), default=None)
        return {t for t in ready if weights[t] == top}

    def extend(done: list[str]) -> None:
        if len(done) == len(weights):
            orders.append(done)
            return
        choices = top_ready(done, done)
        if lag and done:
            choices |= top_ready(done, done[:-1])
        for task_id in sorted(choices):
            extend([*done, task_id])

    extend([])
    return orders


def queued_over_higher_weight(tis: list[dict[str, Any]]) -> list[str]:
    """Where the scheduler queued a task while a task of higher weight was ``scheduled`` and waiting.

    Each task instance records when it was scheduled and when it was queued (the scheduler's clock;
    one scheduler, so the order of these times is the order of its decisions). Returns one line per
    breach, empty when every pick was the highest weight the scheduler could see."""
    breaches = []
    for picked in tis:
        queued = _ts(picked["queued_when"])
        for waiting in tis:
            if waiting is picked or waiting["priority_weight"] <= picked["priority_weight"]:
                continue
            if _ts(waiting["scheduled_when"]) <= queued < _ts(waiting["queued_when"]):
                breaches.append(
                    f"{picked['task_id']} (weight {picked['priority_weight']}) queued at {queued} while "
                    f"{waiting['task_id']} (weight {waiting['priority_weight']}) waited since "
                    f"{waiting['scheduled_when']}"
                )
    return breaches


def timeline(tis: list[dict[str, Any]]) -> str:
    """The scheduler's view of a run, one task per line in start order (for failure messages)."""
    rows = sorted(tis, key=lambda ti: _ts(ti["start_date"]))
    return "\n".join(
        f"{ti['task_id']:>4} w={ti['priority_weight']} scheduled={ti['scheduled_when']} "
        f"queued={ti['queued_when']} start={ti['start_date']} end={ti['end_date']}"
        for ti in rows
    )


def _load_dag_module(name: str) -> ModuleType:
    return load_script(DAG_DIR / f"{name}.py", f"priority_dags_{name}", register=False)


def _analysed_weights(dag: Any) -> dict[str, int]:
    graph, findings = build_task_graph(dag)
    assert not [f for f in findings if f.is_error], findings
    return {task_id: int(round(t.remaining)) for task_id, t in analyze(graph).timings.items()}


@pytest.fixture(scope="module")
def runs(airflow_cluster: AirflowCluster) -> dict[str, RunResult]:
    """Run the three DAGs at the same time, each in its own 1-slot pool (so they never compete), and
    collect their TIs."""
    for pool in POOLS.values():
        assert airflow_cluster.get_pool(pool)["slots"] == 1
    airflow_cluster.wait_for_dags([CRITICAL, DOWNSTREAM, FEATURES], timeout=240)
    assert airflow_cluster.import_errors() == []
    run_ids = {dag_id: airflow_cluster.trigger(dag_id) for dag_id in (CRITICAL, DOWNSTREAM, FEATURES)}
    results: dict[str, RunResult] = {}
    for dag_id, run_id in run_ids.items():
        state = airflow_cluster.wait_for_run(dag_id, run_id, timeout=600)
        results[dag_id] = RunResult(dag_id, run_id, state, airflow_cluster.task_instances(dag_id, run_id))
    return results


def test_all_runs_succeed(runs: dict[str, RunResult]) -> None:
    for result in runs.values():
        states = {(ti["task_id"], ti["map_index"]): ti["state"] for ti in result.tis}
        assert result.state == "success", f"{result.dag_id}: {states}"
        assert set(states.values()) == {"success"}, f"{result.dag_id}: {states}"


@pytest.mark.parametrize("dag_id", [CRITICAL, DOWNSTREAM])
def test_one_slot_pool_runs_one_task_at_a_time(runs: dict[str, RunResult], dag_id: str) -> None:
    tis = sorted(runs[dag_id].tis, key=lambda ti: _ts(ti["start_date"]))
    assert {ti["pool"] for ti in tis} == {POOLS[dag_id]}
    for before, after in itertools.pairwise(tis):
        assert _ts(after["start_date"]) >= _ts(before["end_date"]), (before["task_id"], after["task_id"])


#: The cluster's objective (the default): keys of one run differ by ``c`` x the remaining times and
#: ``U`` x the descendant leads (``fair``)
OBJECTIVE = OBJECTIVES[DEFAULT_OBJECTIVE]
CHAIN = OBJECTIVE.chain


def _leads(dag: Any) -> dict[str, int]:
    """Each task's descendant lead, as the scheduler's analysis computes it (mapped tasks expanded)."""
    graph, _ = build_task_graph(dag, expand_mapped=True)
    leads: dict[str, int] = {}
    for node, lead in run_shape(graph, {}).descendant_lead.items():
        task_id = task_of(graph, node)
        leads[task_id] = max(lead, leads.get(task_id, 0))
    return leads


def _as_remaining(
    observed: dict[str, int], analysed: dict[str, int], leads: dict[str, int]
) -> dict[str, int]:
    """Cross-DAG keys of one run differ exactly by ``c`` x the tasks' remaining critical paths plus ``U``
    x their descendant leads (the run's trigger time and work are the same for all of them): the
    remaining times, anchored on one task."""
    anchor = next(iter(analysed))

    def ahead(task_id: str) -> float:
        return OBJECTIVE.key(0.0, 0.0, 0.0, 0) - OBJECTIVE.key(0.0, 0.0, 0.0, leads.get(task_id, 0))

    return {
        t: round(analysed[anchor] + (w - observed[anchor] - ahead(t) + ahead(anchor)) / CHAIN)
        for t, w in observed.items()
    }


def test_critical_path_weights_are_keys_of_the_remaining_critical_path(runs: dict[str, RunResult]) -> None:
    module = _load_dag_module("priority_chains")
    analysed = _analysed_weights(module.cp_chains_critical)
    assert analysed == EXPECTED_CP_WEIGHTS
    observed = {task_id: ti["priority_weight"] for task_id, ti in runs[CRITICAL].by_task().items()}
    assert all(w >= KEY_WEIGHT_FLOOR for w in observed.values()), observed  # cross-DAG keys
    assert _as_remaining(observed, analysed, _leads(module.cp_chains_critical)) == analysed


@pytest.mark.parametrize("dag_id", [CRITICAL, DOWNSTREAM])
def test_scheduler_queues_the_highest_weight_it_sees(runs: dict[str, RunResult], dag_id: str) -> None:
    tis = runs[dag_id].tis
    assert queued_over_higher_weight(tis) == [], timeline(tis)


def test_queued_over_higher_weight_finds_a_breach() -> None:
    def ti(task_id: str, weight: int, scheduled_s: float, queued_s: float) -> dict[str, Any]:
        base = datetime(2026, 1, 1, tzinfo=UTC)
        return {
            "task_id": task_id,
            "priority_weight": weight,
            "scheduled_when": (base + timedelta(seconds=scheduled_s)).isoformat(),
            "queued_when": (base + timedelta(seconds=queued_s)).isoformat(),
        }

    b2 = ti("b2", 3, scheduled_s=1, queued_s=5)
    # c1 queued before b2 was scheduled: the highest weight the scheduler could see
    assert queued_over_higher_weight([b2, ti("c1", 2, scheduled_s=0, queued_s=0.5)]) == []
    # c1 queued while b2 waited: a breach, named
    (breach,) = queued_over_higher_weight([b2, ti("c1", 2, scheduled_s=0, queued_s=3)])
    assert breach.startswith("c1 (weight 2) queued at") and "b2 (weight 3) waited" in breach


def test_critical_path_rule_starts_tasks_in_critical_path_order(runs: dict[str, RunResult]) -> None:
    # The expected order is the only one a 1-slot greedy scheduler can produce with these weights ...
    assert greedy_orders(EXPECTED_CP_WEIGHTS, UPSTREAM) == [EXPECTED_CP_ORDER]
    order = runs[CRITICAL].start_order()
    message = f"{order}\n{timeline(runs[CRITICAL].tis)}"
    # ... or, where the scheduler's view lagged a completion, one of the lagging greedy orders
    assert order in greedy_orders(EXPECTED_CP_WEIGHTS, UPSTREAM, lag=True), message
    assert order[:2] == ["a1", "c1"], message  # the 3-hour task first, then the longer chain


def test_downstream_rule_orders_differently(runs: dict[str, RunResult]) -> None:
    result = runs[DOWNSTREAM]
    observed_weights = {task_id: ti["priority_weight"] for task_id, ti in result.by_task().items()}
    assert observed_weights == EXPECTED_DOWNSTREAM_WEIGHTS
    order = result.start_order()
    message = f"{order}\n{timeline(result.tis)}"
    stock_orders = greedy_orders(EXPECTED_DOWNSTREAM_WEIGHTS, UPSTREAM, lag=True)
    assert order in stock_orders, f"not a greedy order of the downstream weights: {message}"
    cp_orders = greedy_orders(EXPECTED_CP_WEIGHTS, UPSTREAM, lag=True)
    assert not [o for o in stock_orders if o in cp_orders]  # no order fits both rules
    assert order[0] == "b1", message  # the longest chain by task count goes first ...
    assert order.index("a1") >= 3, message  # ... and the 3-hour task, the real critical path, comes late


def test_features_get_critical_path_weights(runs: dict[str, RunResult]) -> None:
    module = _load_dag_module("priority_features")
    analysed = _analysed_weights(module.cp_features)
    assert analysed == EXPECTED_FEATURE_WEIGHTS
    result = runs[FEATURES]
    unmapped = {task_id: ti["priority_weight"] for task_id, ti in result.by_task().items()}
    expected = {k: v for k, v in EXPECTED_FEATURE_WEIGHTS.items() if k != "train"}
    leads = _leads(module.cp_features)
    relative = _as_remaining({k: unmapped[k] for k in expected}, expected, leads)
    assert relative == expected
    anchor = {"setup_env": unmapped["setup_env"]}
    mapped = sorted(
        (ti["map_index"], _as_remaining({**anchor, "train": ti["priority_weight"]}, expected, leads)["train"])
        for ti in result.tis
        if ti["task_id"] == "train"
    )
    # expanded by the scheduler at run time, with the run's trigger time from its run id: same key as
    # the task instances the api-server created when the run was triggered
    assert mapped == [(0, 4800), (1, 4800), (2, 4800)]
    order = result.start_order()
    assert order[:3] == ["setup_env", "prep.load", "prep.clean"]
    assert order[-2:] == ["evaluate", "teardown_env"]


def test_no_strategy_errors_in_component_logs(
    runs: dict[str, RunResult], airflow_cluster: AirflowCluster
) -> None:
    assert runs  # the runs above went through the scheduler and the api-server
    for component in ("scheduler", "api-server", "dag-processor"):
        text = airflow_cluster.read_log(component)
        assert "critical-path weight failed" not in text, f"{component} log:\n{text[-4000:]}"
        for block in re.split(r"(?=Traceback \(most recent call last\))", text)[1:]:
            assert "airflow_gpu_dag" not in block[:4000], f"traceback in {component} log:\n{block[:4000]}"
