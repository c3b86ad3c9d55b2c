"""Second audit of the priority weights (airflow_gpu_dag/priority, priority_strategy, airflow/policy,
airflow/parse_time): each test reproduces a defect found there."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG
from airflow.serialization.serialized_objects import DagSerialization

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.core.policy.objective import KEY_WEIGHT_FLOOR
from airflow_gpu_dag.priority.learned import LearnedDurations
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, PackingPriorityStrategy

RUN_ID = "manual__2026-11-30T12:00:00+00:00"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("AIRFLOW__GPU_DAG__POOLS", raising=False)
    monkeypatch.setenv("AIRFLOW__GPU_DAG__PLAN_IN_BACKGROUND", "false")
    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "false")
    for cls in (CriticalPathPriorityStrategy, PackingPriorityStrategy):
        cls._weights.reset()
    yield
    for cls in (CriticalPathPriorityStrategy, PackingPriorityStrategy):
        cls._weights.reset()


def _pipeline(dag_id: str = "audit") -> Any:
    with DAG(dag_id, default_args={"weight_rule": CRITICAL_PATH_WEIGHT_RULE}, schedule=None) as dag:
        prep = BashOperator(task_id="prep", bash_command="true", executor_config=gpu_hints(duration="10m"))
        train = BashOperator(task_id="train", bash_command="true", executor_config=gpu_hints(duration="2h"))
        prep >> train
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def _ti(sdag: Any, task_id: str, run_id: str = RUN_ID, map_index: int = -1) -> Any:
    return SimpleNamespace(
        task=sdag.task_dict[task_id], task_id=task_id, dag_id=sdag.dag_id, run_id=run_id, map_index=map_index
    )


class FakeSession:
    """A metadata-database session that answers every query with no rows and counts what it was asked."""

    def __init__(self) -> None:
        self.executed = 0
        self.commits = 0
        self.closes = 0

    def execute(self, query: Any) -> Any:
        self.executed += 1
        return SimpleNamespace(first=lambda: None, all=lambda: [])

    def commit(self) -> None:
        self.commits += 1

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        self.closes += 1


def test_an_inline_history_read_leaves_the_schedulers_own_session_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``plan_in_background = false`` the learned durations are read inside ``get_weight``, in the
    scheduler's thread. Airflow's scoped session there is the scheduler's own, mid-transaction: the read
    used ``create_session()``, which committed and closed it (releasing the scheduler's row locks and
    detaching its DAG runs). The read must use a session of its own."""
    import airflow.settings as airflow_settings

    monkeypatch.setenv("AIRFLOW__GPU_DAG__LEARNED_DURATIONS", "true")
    scheduler = FakeSession()  # the thread's scoped session: what the scheduler loop is using
    own: list[FakeSession] = []

    def non_scoped() -> FakeSession:
        own.append(FakeSession())
        return own[-1]

    monkeypatch.setattr(airflow_settings, "Session", lambda: scheduler)
    monkeypatch.setattr(airflow_settings, "NonScopedSession", non_scoped)
    sdag = _pipeline()
    weight = CriticalPathPriorityStrategy().get_weight(_ti(sdag, "prep"))  # type: ignore[arg-type]
    assert weight >= KEY_WEIGHT_FLOOR
    assert sum(s.executed for s in own) >= 1  # the history was asked (one LIMIT 1 query: no history)
    assert (scheduler.executed, scheduler.commits, scheduler.closes) == (0, 0, 0)
    assert all(s.closes == 1 for s in own)


def test_a_refresh_bound_of_years_still_reads_the_learned_durations() -> None:
    """``[gpu_dag] learned_refresh = "1000000d"`` (never refresh, in effect) is accepted, but the refresh
    thread waited a quarter of it, longer than a wait may take (``threading.TIMEOUT_MAX``): it died with
    OverflowError before reading anything, and each new DAG version started another that died too."""
    reads: list[str] = []

    def read(dag: Any) -> tuple[None, int]:
        reads.append(dag)
        return None, 0

    learned = LearnedDurations(refresh_s=86_400_000_000.0, read=read)
    try:
        assert learned.get("audit:v1", "dag") is None  # queued for the thread
        assert learned.wait_for("audit:v1", timeout=20) is not None
        assert reads == ["dag"] and learned.running
    finally:
        learned.stop()


@pytest.mark.parametrize("rule", ["critical_path", "CRITICAL_PATH_WEIGHT_RULE", "PackingPriorityStrategy"])
def test_a_dag_naming_our_rule_the_way_airflow_cannot_load_fails_its_import_with_the_task_and_fix(
    tmp_path: Any, rule: str
) -> None:
    """A DAG without GPU hints that means our rule but writes its short name was skipped by the cluster
    policy (it looked for ``airflow_gpu_dag`` in the rule): the DAG file imported, and its serialization
    then failed with ``Unknown priority strategy critical_path``, naming neither the task nor the fix."""
    from airflow.dag_processing.dagbag import DagBag

    path = tmp_path / "short_rule.py"
    path.write_text(
        "from airflow.sdk import DAG\n"
        "from airflow.providers.standard.operators.bash import BashOperator\n"
        f"with DAG('short_rule', schedule=None, default_args={{'weight_rule': {rule!r}}}):\n"
        "    BashOperator(task_id='evaluate', bash_command='true')\n"
    )
    bag = DagBag(dag_folder=str(path))
    errors = list(bag.import_errors.values())
    assert len(errors) == 1, errors
    assert "DAG 'short_rule', task 'evaluate'" in errors[0] and "bad-weight-rule" in errors[0]
    meant = "PackingPriorityStrategy" if "Packing" in rule else "CriticalPathPriorityStrategy"
    assert f"did you mean 'airflow_gpu_dag.priority_strategy.{meant}'" in errors[0]


def test_a_plugin_rule_that_shares_a_short_name_with_ours_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a rule Airflow cannot load is taken as ours misspelled: a registered plugin strategy whose
    class happens to be called ``packing`` keeps its DAG out of the policy."""
    import airflow.task.priority_strategy as airflow_strategies

    from airflow_gpu_dag.airflow.policy import uses_provider

    with DAG("theirs", schedule=None, default_args={"weight_rule": "mycompany.rules.packing"}) as dag:
        BashOperator(task_id="x", bash_command="true", pool="no_such_pool")
    assert uses_provider(dag)  # unknown to Airflow: the policy names the task and the fix
    loads = lambda rule: object()  # noqa: E731  (a registered plugin of that name)
    monkeypatch.setattr(airflow_strategies, "validate_and_load_priority_weight_strategy", loads)
    assert not uses_provider(dag)
