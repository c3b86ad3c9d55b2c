"""The provider's sensors and gates take the DAG's ``default_args`` retries.

They default ``retries`` to one quick retry for Airflow's resume race (``deferral``). Set in
the constructor, that default was an explicit argument, which Airflow prefers to ``default_args``:
with ``default_args={"retries": 3}`` every other task got 3 retries and these sensors 1, so two
infrastructure faults (a scheduler restart, an api-server restart) in one sensor's life failed the
run (seen in the chaos test: ``wait_clean_corpus`` failed on try 2 of 2 while the DAG asked for 4)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, TaskGroup
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException

from airflow_gpu_dag.authoring import data_edge, fix_hidden_dependencies, stage_dependency, start_window
from airflow_gpu_dag.deferral import (
    RESUME_RACE_RETRIES,
    RESUME_RACE_RETRY_DELAY,
    declared_where,
    is_deferrable,
    require_timeout,
    resume_race_retry,
    soft_failing,
)
from airflow_gpu_dag.executor_config import gpu_hints
from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor, StartWindowSensor


def test_the_dags_default_retries_reach_every_sensor_a_helper_adds() -> None:
    with DAG("r", schedule=None, default_args={"retries": 3, "retry_delay": timedelta(minutes=1)}) as dag:
        prep, train, evaluate = (EmptyOperator(task_id=t) for t in ("prep", "train", "evaluate"))
        writer = EmptyOperator(task_id="write", executor_config=gpu_hints(outputs=["/lake/a"]))
        reader = EmptyOperator(task_id="read", executor_config=gpu_hints(inputs=["/lake/a"]))
        prep >> train
        added = [
            data_edge(prep, train, path="/lake/clean", timeout=60),
            start_window(train, opens="01:00", closes="02:00"),
            stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=1, timeout=60),
            DatasetCompleteSensor(task_id="plain", path="/x", timeout=60),
        ]
    added += [dag.get_task(f.added) for f in fix_hidden_dependencies(dag, mode="sensor", timeout=60)]
    assert writer and reader and len(added) == 5
    # the DAG's count; the delay stays the quick one (a retried sensor only checks again)
    assert {(t.task_id, t.retries, t.retry_delay) for t in added} == {
        (t.task_id, 3, RESUME_RACE_RETRY_DELAY) for t in added
    }


def test_without_default_args_one_quick_retry_for_the_resume_race() -> None:
    with DAG("q", schedule=None):
        sensor = CheckpointSensor(task_id="c", checkpoint_dir="/c", step=1, timeout=60)
    assert (sensor.retries, sensor.retry_delay) == (RESUME_RACE_RETRIES, RESUME_RACE_RETRY_DELAY)


def test_the_task_groups_default_args_and_the_authors_own_values_win() -> None:
    with DAG("g", schedule=None, default_args={"retries": 0}):
        at_least_one = DatasetCompleteSensor(task_id="a", path="/x", timeout=60)
        with TaskGroup("tg", default_args={"retries": 4}):
            grouped = DatasetCompleteSensor(task_id="b", path="/x", timeout=60)
        own = DatasetCompleteSensor(task_id="c", path="/x", timeout=60, retries=0)
    assert at_least_one.retries == RESUME_RACE_RETRIES  # the resume race still gets its retry
    assert grouped.retries == 4
    assert own.retries == 0


@pytest.mark.usefixtures("_deferring")
def test_deferring_tasks_get_one_quick_retry_for_the_resume_race() -> None:
    """apache/airflow#72716: a trigger that fires at once can have the resumed try failed as a "state
    mismatch"; every deferring task the helpers add retries at least once, quickly (5 s, whatever
    default_args say), and as often as the DAG's default_args ask (tests/unit/test_deferral.py)."""
    from airflow_gpu_dag.authoring import budget_gate

    slow = {"retries": 4, "retry_delay": timedelta(minutes=10)}
    with DAG("race", schedule=None, default_args=slow) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train", pool="gpu_default")
        evaluate = EmptyOperator(task_id="evaluate")
        prep >> train
        added = [
            data_edge(prep, evaluate, path="/lake/clean", timeout=60),
            stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=2, timeout=60),
            start_window(train, opens="22:00", closes="06:00"),
            budget_gate(train, gpu_hours_per_pool_day=10),
        ]
    for task in added:
        assert (task.retries, task.retry_delay) == (4, timedelta(seconds=5)), task.task_id
    assert (dag.get_task("train").retries, dag.get_task("prep").retry_delay) == (4, timedelta(minutes=10))
    # built directly, a sensor takes the same default and the author's own values win
    with DAG("direct", schedule=None):
        plain = CheckpointSensor(task_id="plain", checkpoint_dir="/c", step=1, timeout=60)
        mine = DatasetCompleteSensor(task_id="mine", path="/p", timeout=60, retries=0)
        window = StartWindowSensor(task_id="window", opens="22:00", closes="06:00", retries=3)
    assert (plain.retries, plain.retry_delay) == (1, timedelta(seconds=5))
    assert (mine.retries, window.retries) == (0, 3)


# --- the shared parse-time checks, directly ---------------------------------------------------------


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [(60, 60.0), (0.5, 0.5), (timedelta(hours=2), 7200.0), (timedelta(microseconds=1), 1e-6)],
)
def test_require_timeout_returns_the_seconds_of_a_number_or_a_timedelta(
    timeout: object, seconds: float
) -> None:
    result = require_timeout("t", "DatasetCompleteSensor", timeout)  # type: ignore[arg-type]
    assert result == seconds
    assert type(result) is float


def test_a_missing_timeout_is_refused_naming_the_task_and_the_fix() -> None:
    with pytest.raises(ValueError, match=r"task 'wait'.*DatasetCompleteSensor.*timeout=timedelta\(hours=2\)"):
        require_timeout("wait", "DatasetCompleteSensor", None)


@pytest.mark.parametrize(
    "timeout",
    [
        0,
        -1,
        0.0,
        -0.0,
        float("nan"),
        float("inf"),
        float("-inf"),
        timedelta(0),
        timedelta(seconds=-5),
        True,
        "60",
    ],
)
def test_a_non_positive_or_non_finite_or_non_numeric_timeout_is_refused(timeout: object) -> None:
    with pytest.raises(
        ValueError, match=r"task 't': CheckpointSensor timeout=.* must be a positive \(finite\) number"
    ):
        require_timeout("t", "CheckpointSensor", timeout)  # type: ignore[arg-type]


def test_require_timeout_names_where_when_given_instead_of_the_bare_task() -> None:
    with pytest.raises(ValueError, match=r"^DAG 'd', task 'g\.t': ") as info:
        require_timeout("t", "StartWindowSensor", None, where="DAG 'd', task 'g.t'")
    assert "task 't'" not in str(info.value).replace("task 'g.t'", "")


def test_a_timeout_too_large_for_a_float_is_refused_with_the_timeout_error() -> None:
    """``10**400 < math.inf`` is True in Python, so the check passes and ``float()`` overflows."""
    with pytest.raises(ValueError, match="task 't'"):
        require_timeout("t", "CheckpointSensor", 10**400)


def test_declared_where_outside_any_dag_names_the_task_alone() -> None:
    assert declared_where({"task_id": "wait"}) == "task 'wait'"
    assert declared_where({}) == "task '?'"


def test_declared_where_names_the_dag_of_the_with_block_and_the_task_groups_prefix() -> None:
    with DAG("déjà_vu", schedule=None):
        top = declared_where({"task_id": "a"})
        with TaskGroup("outer"), TaskGroup("inner"):
            nested = declared_where({"task_id": "b"})
    assert top == "DAG 'déjà_vu', task 'a'"
    assert nested == "DAG 'déjà_vu', task 'outer.inner.b'"


def test_declared_where_prefers_the_dag_passed_in_kwargs() -> None:
    other = DAG("explicit", schedule=None)
    with DAG("context", schedule=None):
        assert declared_where({"task_id": "x", "dag": other}) == "DAG 'explicit', task 'x'"


def test_declared_where_keeps_the_plain_id_when_the_task_group_cannot_prefix_it() -> None:
    class _BrokenGroup:
        def child_id(self, label: str) -> str:
            raise RuntimeError("boom")

    dag = DAG("d", schedule=None)
    assert declared_where({"task_id": "x", "dag": dag, "task_group": _BrokenGroup()}) == "DAG 'd', task 'x'"


class _Sensor:
    def __init__(self, **flags: bool) -> None:
        self.__dict__.update(flags)


@pytest.mark.parametrize("flag", ["soft_fail", "never_fail"])
@pytest.mark.parametrize("error", [AirflowFailException("missed"), AirflowSensorTimeout("missed")])
def test_soft_failing_turns_a_failure_into_a_skip_under_soft_fail_or_never_fail(
    flag: str, error: Exception
) -> None:
    skipped = pytest.raises(AirflowSkipException, match=f"{flag} is set to True: missed")
    with skipped as info, soft_failing(_Sensor(**{flag: True})):
        raise error
    assert info.value.__cause__ is error


def test_soft_failing_re_raises_the_failure_itself_without_the_flags() -> None:
    error = AirflowSensorTimeout("late")
    with (
        pytest.raises(AirflowSensorTimeout) as info,
        soft_failing(_Sensor(soft_fail=False, never_fail=False)),
    ):
        raise error
    assert info.value is error


def test_soft_failing_lets_other_errors_through_even_under_soft_fail() -> None:
    """Only the failures Airflow's sensor loop soft-fails are skipped; a bug stays a bug."""
    with pytest.raises(KeyError), soft_failing(_Sensor(soft_fail=True)):
        raise KeyError("bug")


def test_soft_failing_passes_when_nothing_is_raised() -> None:
    with soft_failing(_Sensor(soft_fail=True)):
        done = True
    assert done


@pytest.mark.parametrize(("given", "expected"), [(True, True), (False, False), (1, True), (0, False)])
def test_an_explicit_deferrable_wins_over_the_configured_default(
    monkeypatch: pytest.MonkeyPatch, given: object, expected: bool
) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", str(not expected))
    assert is_deferrable(given) is expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("configured", "expected"), [("True", True), ("false", False)])
def test_without_deferrable_the_operators_default_deferrable_decides(
    monkeypatch: pytest.MonkeyPatch, configured: str, expected: bool
) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", configured)
    assert is_deferrable(None) is expected


def test_resume_race_retry_defaults_both_outside_any_dag_and_keeps_the_authors_values() -> None:
    assert resume_race_retry({"task_id": "t"}) == {
        "task_id": "t",
        "retries": RESUME_RACE_RETRIES,
        "retry_delay": RESUME_RACE_RETRY_DELAY,
    }
    own = {"task_id": "t", "retries": 0, "retry_delay": timedelta(minutes=3)}
    assert resume_race_retry(dict(own)) == own


def test_resume_race_retry_ignores_a_non_integer_default_args_retries() -> None:
    """A bool or a string in ``default_args`` is not a count; the resume-race default applies."""
    for bad in (True, "3"):
        with DAG("odd", schedule=None, default_args={"retries": bad}):
            assert resume_race_retry({"task_id": "t"})["retries"] == RESUME_RACE_RETRIES


def test_a_poke_interval_that_is_no_positive_number_of_seconds_names_the_task() -> None:
    from airflow_gpu_dag.deferral import require_poke_interval

    assert require_poke_interval(30, "task 't'") == 30.0
    for bad in (0, -1, float("nan"), float("inf"), True, "30", 10**400):
        fix = r"Fix: pass e\.g\. poke_interval=30\."
        with pytest.raises(ValueError, match=rf"^task 't': poke_interval=.* {fix}"):
            require_poke_interval(bad, "task 't'")
