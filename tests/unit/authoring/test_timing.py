"""The timing helpers (start_window, stage_dependency): edges across task groups, odd inputs, messages."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Label, TaskGroup, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_gpu_dag.authoring import budget_gate, data_edge, stage_dependency, start_window
from airflow_gpu_dag.authoring.timing import TIME
from airflow_gpu_dag.core.model.windows import seconds_until_open, window_from_hint
from airflow_gpu_dag.executor_config import read_hints
from airflow_gpu_dag.operators import GpuBashOperator
from airflow_gpu_dag.operators.budget import BudgetGateOperator
from airflow_gpu_dag.sensors import CheckpointSensor, DatasetCompleteSensor, StartWindowSensor
from airflow_gpu_dag.sensors.window import WindowGuard
from tests.unit.authoring.conftest import edge_kinds, edges


def test_stage_dependency_across_task_groups_adds_no_edge_from_training() -> None:
    """Airflow's Label joins the groups of two tasks in different groups: the checkpoint sensor's
    edge to ``h.eval`` also made ``g.train >> h.eval``, so evaluate waited for training to end."""
    with DAG("groups_stage", schedule=None) as dag:
        prepare = EmptyOperator(task_id="prepare")
        with TaskGroup("g"):
            train = EmptyOperator(task_id="train")
        with TaskGroup("h"):
            evaluate = EmptyOperator(task_id="eval")
        prepare >> train
        sensor = stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=5, timeout=60)
    assert "h.eval" not in train.downstream_task_ids
    assert edges(dag) == {("prepare", "g.train"), ("prepare", sensor.task_id), (sensor.task_id, "h.eval")}
    assert dag.edge_info[sensor.task_id]["h.eval"] == {"label": "time"}


def test_start_window_moves_a_labelled_edge_from_another_group_to_its_gate_only() -> None:
    with DAG("groups_window", schedule=None) as dag:
        with TaskGroup("pre"):
            prepare = EmptyOperator(task_id="prepare")
            EmptyOperator(task_id="log")  # another leaf of the group
        train = EmptyOperator(task_id="train")
        prepare.set_downstream(train, edge_modifier=Label("data"))
        window = start_window(train, opens="22:00", closes="06:00")
    assert window.upstream_task_ids == {"pre.prepare"}
    assert train.upstream_task_ids == {window.task_id}
    assert dag.edge_info["pre.prepare"][window.task_id] == {"label": "data"}


def test_stage_dependency_on_itself_is_refused() -> None:
    with DAG("self_stage", schedule=None) as dag:
        train = EmptyOperator(task_id="train")
        with pytest.raises(ValueError, match=r"DAG 'self_stage', task 'train'.*both upstream.*Fix"):
            stage_dependency(train, train, checkpoint_dir="/ckpt", step=10, timeout=60)
    assert list(dag.task_dict) == ["train"]


@pytest.mark.usefixtures("_deferring")
def test_start_window_inserts_sensor_before_task() -> None:
    with DAG("w", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train")
        prep >> train
        sensor = start_window(train, opens="22:00", closes="06:00", on_missed="fail")
    assert isinstance(sensor, StartWindowSensor)
    assert edge_kinds(dag) == {("prep", "train__window"): None, ("train__window", "train"): "time"}


@pytest.mark.usefixtures("_deferring")
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"opens": "08:00", "closes": "08:00"}, "impossible start window.*never open"),
        ({"opens": "25:00", "closes": "08:00"}, "opens='25:00' is not a time of day"),
        ({"opens": "08:00", "closes": "09:00", "on_missed": "wait"}, "on_missed='wait' is not a policy"),
        ({"opens": "08:00", "closes": "09:00", "tz": "Mars/Base"}, "unknown timezone"),
    ],
)
def test_bad_windows_fail_at_parse_time(kwargs: dict, message: str) -> None:
    with DAG("bw", schedule=None):
        train = EmptyOperator(task_id="train")
        with pytest.raises(ValueError, match=r"DAG 'bw', task 'train': " + message):
            start_window(train, **kwargs)


@pytest.mark.usefixtures("_deferring")
def test_stage_dependency_waits_on_checkpoint_not_on_task() -> None:
    with DAG("s", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train")
        ev = EmptyOperator(task_id="eval")
        prep >> train
        sensor = stage_dependency(train, ev, checkpoint_dir="/ckpt", step=100, timeout=600)
    assert sensor.task_id == "wait_train_ckpt_100"
    kinds = edge_kinds(dag)
    assert ("train", "eval") not in kinds
    assert kinds[("wait_train_ckpt_100", "eval")] == "time"
    assert ("prep", "wait_train_ckpt_100") in kinds
    with DAG("s2", schedule=None):
        a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
        a >> b
        with pytest.raises(ValueError, match=r"remove a >> b"):
            stage_dependency(a, b, checkpoint_dir="/c", step=1, timeout=1)
        with pytest.raises(ValueError, match=r"stable sizes"):
            CheckpointSensor(task_id="cs", checkpoint_dir="/c", step=1, timeout=1, completeness="stable")


ENV = "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"


def _dag(**default_args: Any) -> DAG:
    return DAG("d", schedule=None, start_date=dt.datetime(2026, 1, 1), default_args=default_args)


def _pair(dag: DAG) -> tuple[Any, Any]:
    with dag:
        train = GpuBashOperator(task_id="train", bash_command="true", gpus=1, duration="1h")
        evaluate = GpuBashOperator(task_id="evaluate", bash_command="true", gpus=1, duration="10m")
    return train, evaluate


#: Each way an author gets a sensor or a gate, built in a fresh DAG, with ``deferrable`` if given.
BUILDERS: dict[str, Callable[..., Any]] = {
    "DatasetCompleteSensor": lambda dag, **kw: DatasetCompleteSensor(
        task_id="s", path="/lake/x", timeout=60, dag=dag, **kw
    ),
    "CheckpointSensor": lambda dag, **kw: CheckpointSensor(
        task_id="s", checkpoint_dir="/ckpt", step=1, timeout=60, dag=dag, **kw
    ),
    "StartWindowSensor": lambda dag, **kw: StartWindowSensor(
        task_id="s", opens="01:00", closes="02:00", dag=dag, **kw
    ),
    "BudgetGateOperator": lambda dag, **kw: BudgetGateOperator(
        task_id="s", gpu_hours_per_run=10, dag=dag, **kw
    ),
    "data_edge": lambda dag, **kw: data_edge(*_pair(dag), path="/lake/x", timeout=60, **kw),
    "stage_dependency": lambda dag, **kw: stage_dependency(
        *_pair(dag), checkpoint_dir="/ckpt", step=1, timeout=60, **kw
    ),
    "start_window": lambda dag, **kw: start_window(_pair(dag)[1], opens="01:00", closes="02:00", **kw),
    "budget_gate": lambda dag, **kw: budget_gate(_pair(dag)[1], gpu_hours_per_run=10, **kw),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_default_follows_default_deferrable(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)  # Airflow's default: False (no triggerer needed)
    assert BUILDERS[name](_dag()).deferrable is False
    monkeypatch.setenv(ENV, "True")
    assert BUILDERS[name](_dag()).deferrable is True


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_author_still_chooses(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "False")
    assert BUILDERS[name](_dag(), deferrable=True).deferrable is True
    assert BUILDERS[name](_dag(deferrable=True)).deferrable is True  # through default_args
    monkeypatch.setenv(ENV, "True")
    assert BUILDERS[name](_dag(), deferrable=False).deferrable is False
    assert BUILDERS[name](_dag(deferrable=False)).deferrable is False


def test_start_window_installs_the_guard_on_gpu_tasks() -> None:
    with DAG("gw", schedule=None) as dag:

        @task.gpu(gpus=1, duration="30m")
        def fit() -> None:
            pass

        fitted = fit()
        bash = GpuBashOperator(task_id="bash_fit", bash_command="true", gpus=1)
        start_window(fitted, opens="22:00", closes="06:00", on_missed="fail")
        start_window(bash, opens="{{ dag_run.conf['o'] }}", closes="06:00")
    fit_task = dag.get_task("fit")
    assert isinstance(fit_task._pre_execute_hook, WindowGuard)
    assert fit_task._pre_execute_hook.on_missed == "fail"
    assert read_hints(fit_task.executor_config)["window"] == {
        "opens": "22:00:00",
        "closes": "06:00:00",
        "tz": "UTC",
        "on_missed": "fail",
    }
    assert read_hints(dag.get_task("bash_fit").executor_config)["window"] == {
        "templated": True,
        "on_missed": "skip",
    }
    assert fit_task.upstream_task_ids == {"fit__window"}


def test_bad_window_names_dag_task_and_fix() -> None:
    with DAG("bad_window", schedule=None):
        train = EmptyOperator(task_id="train")
        with pytest.raises(
            ValueError, match=r"DAG 'bad_window', task 'train': impossible start window.*Fix: swap"
        ):
            start_window(train, opens="2026-11-11T06:00+00:00", closes="2026-11-10T22:00+00:00")


def test_stage_dependency_refuses_a_path_that_makes_it_useless_or_a_cycle() -> None:
    with DAG("stages", schedule=None):
        train, x, evaluate = (
            EmptyOperator(task_id="train"),
            EmptyOperator(task_id="x"),
            EmptyOperator(task_id="eval"),
        )
        train >> x >> evaluate  # eval already waits for train to finish, through x
        with pytest.raises(
            ValueError, match=r"DAG 'stages': task 'eval' already waits for 'train'.*path from"
        ):
            stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=1, timeout=60)
        with pytest.raises(ValueError, match=r"task 'eval' runs after 'train'.*\(a cycle\)"):
            stage_dependency(evaluate, train, checkpoint_dir="/ckpt", step=1, timeout=60)
    assert {t.task_id for t in train.dag.tasks} == {"train", "x", "eval"}  # nothing added


@pytest.mark.usefixtures("_deferring")
def test_stage_dependency_watches_its_training_task() -> None:
    with DAG("s", schedule=None):
        train, evaluate = EmptyOperator(task_id="train"), EmptyOperator(task_id="evaluate")
        sensor = stage_dependency(train, evaluate, checkpoint_dir="/ckpt", step=100, timeout=600)
    assert sensor.training_task_id == "train"


# -- start_window: what it builds ------------------------------------------------------------------------
def test_start_window_with_its_own_task_id_gates_the_task_over_a_time_edge() -> None:
    with DAG("own_id", schedule=None) as dag:
        prep = EmptyOperator(task_id="prep")
        train = EmptyOperator(task_id="train")
        prep >> train
        sensor = start_window(train, opens="22:00", closes="06:00", tz="Europe/Berlin", task_id="night")
    assert TIME == "time"
    assert sensor.task_id == "night" and train.upstream_task_ids == {"night"}
    assert edge_kinds(dag) == {("prep", "night"): None, ("night", "train"): "time"}
    assert (sensor.opens, sensor.closes, sensor.tz, sensor.on_missed) == (
        "22:00",
        "06:00",
        "Europe/Berlin",
        "skip",
    )
    guard = train._pre_execute_hook
    assert isinstance(guard, WindowGuard)
    assert (guard.opens, guard.closes, guard.tz, guard.on_missed, guard.sensor_task_id) == (
        "22:00",
        "06:00",
        "Europe/Berlin",
        "skip",
        "night",
    )


def test_a_daily_window_in_a_zone_is_recorded_for_the_task_and_its_sensor_as_the_plan_reads_it() -> None:
    """Both hints carry the window in its zone; read back as the plan does, it opens at 22:00 Berlin."""
    with DAG("hinted", schedule=None):
        train = EmptyOperator(task_id="train")
        sensor = start_window(train, opens="22:00", closes="06:00", tz="Europe/Berlin", on_missed="fail")
    expected = {"opens": "22:00:00", "closes": "06:00:00", "tz": "Europe/Berlin", "on_missed": "fail"}
    assert read_hints(train.executor_config)["window"] == expected
    assert read_hints(sensor.executor_config)["window"] == expected
    window = window_from_hint(read_hints(train.executor_config)["window"])
    assert window is not None
    # 12:00 UTC on the day the clocks jump forward at night: 22:00 CET is 21:00 UTC, 9 h later
    assert seconds_until_open(window, dt.datetime(2026, 3, 28, 12, tzinfo=dt.UTC)) == 9 * 3600.0


def test_a_one_off_window_is_recorded_as_two_instants_with_their_offset() -> None:
    """Naive date-times are read in ``tz``; the hint keeps their offset so the plan needs no zone."""
    with DAG("once", schedule=None):
        train = EmptyOperator(task_id="train")
        start_window(train, opens="2026-11-10T22:00", closes="2026-11-11T06:00", tz="Europe/Berlin")
    hint = read_hints(train.executor_config)["window"]
    assert hint == {
        "opens": "2026-11-10T22:00:00+01:00",
        "closes": "2026-11-11T06:00:00+01:00",
        "fixed": True,
        "on_missed": "skip",
    }
    window = window_from_hint(hint)
    assert window is not None
    assert seconds_until_open(window, dt.datetime(2026, 11, 10, 12, tzinfo=dt.UTC)) == 9 * 3600.0


def test_a_fixed_offset_timezone_object_is_recorded_by_its_offset() -> None:
    with DAG("offset", schedule=None):
        train = EmptyOperator(task_id="train")
        start_window(train, opens="22:00", closes="06:00", tz=dt.timezone(dt.timedelta(hours=2)))
    hint = read_hints(train.executor_config)["window"]
    assert hint == {"opens": "22:00:00", "closes": "06:00:00", "tz": "UTC+02:00", "on_missed": "skip"}
    window = window_from_hint(hint)
    assert window is not None  # 12:00 UTC is 14:00 at +02:00: opens in 8 h
    assert seconds_until_open(window, dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)) == 8 * 3600.0


def test_a_window_templated_on_one_side_only_is_left_to_run_time() -> None:
    """One template is enough to make the window unknown at parse time: it is planned as open."""
    with DAG("tmpl", schedule=None):
        train = EmptyOperator(task_id="train")
        sensor = start_window(train, opens="22:00", closes="{{ dag_run.conf['closes'] }}", on_missed="fail")
    assert read_hints(train.executor_config)["window"] == {"templated": True, "on_missed": "fail"}
    assert read_hints(sensor.executor_config)["window"] == {"templated": True, "on_missed": "fail"}
    assert sensor.closes == "{{ dag_run.conf['closes'] }}" and "closes" in sensor.template_fields
    assert train._pre_execute_hook.closes == "{{ dag_run.conf['closes'] }}"  # rendered when it runs


def _guard_context(task_obj: Any, anchor: dt.datetime) -> dict[str, Any]:
    """The context the Task SDK gives a task's ``pre_execute`` hook: a fresh start (not resumed)."""
    return {
        "dag_run": SimpleNamespace(data_interval_end=anchor, run_after=anchor, logical_date=anchor),
        "ti": SimpleNamespace(_ti_context_from_server=SimpleNamespace(next_method=None)),
        "task": task_obj,
    }


def test_start_window_keeps_the_tasks_own_pre_execute_hook() -> None:
    """The task's own ``pre_execute`` runs first, then the window check: the window must not drop it."""
    calls: list[str] = []
    with DAG("hooked", schedule=None):
        train = EmptyOperator(task_id="train", pre_execute=lambda context: calls.append("own"))
        own = train._pre_execute_hook
        start_window(train, opens="2000-01-01T00:00+00:00", closes="2999-01-01T00:00+00:00")
    guard = train._pre_execute_hook
    assert guard.previous is own
    guard(_guard_context(train, dt.datetime(2026, 5, 4, tzinfo=dt.UTC)))  # open: the task starts
    assert calls == ["own"]


@pytest.mark.parametrize(
    ("on_missed", "error"),
    [("skip", AirflowSkipException), ("fail", AirflowFailException)],
)
def test_the_installed_check_stops_a_task_whose_one_off_window_is_over(
    on_missed: str, error: type[Exception]
) -> None:
    """A task that waited in its pool past its window does not start: skipped or failed per on_missed."""
    with DAG("missed", schedule=None):
        train = EmptyOperator(task_id="train")
        start_window(
            train, opens="2020-01-01T22:00+00:00", closes="2020-01-02T06:00+00:00", on_missed=on_missed
        )
    window = re.escape("task 'train': start window 2020-01-01T22:00:00+00:00 - 2020-01-02T06:00:00+00:00")
    verb = "skipping" if on_missed == "skip" else "failing"
    policy = re.escape(f"{verb} (on_missed='{on_missed}').")
    expected = rf"^{window} was missed \(now [^)]+\) before the task could start; {policy}$"
    with pytest.raises(error, match=expected):
        train._pre_execute_hook(_guard_context(train, dt.datetime(2020, 1, 1, tzinfo=dt.UTC)))


# -- start_window: what it refuses -----------------------------------------------------------------------
class _Unnamed(dt.tzinfo):
    """A zone with no name a plan could read back from the task's hint."""

    def utcoffset(self, when: dt.datetime | None) -> dt.timedelta:
        return dt.timedelta(hours=1)

    def dst(self, when: dt.datetime | None) -> dt.timedelta:
        return dt.timedelta(0)

    def __repr__(self) -> str:
        return "_Unnamed()"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"opens": "22:00", "closes": "2026-11-11T06:00"},
            "opens='22:00' and closes='2026-11-11T06:00' mix a time of day and a date-time; give two times "
            "of day for a daily window",
        ),
        (
            {"opens": "2026-11-10T22:00", "closes": "2026-11-31T06:00"},
            "closes='2026-11-31T06:00' is neither a time of day ('22:00') nor an ISO date-time",
        ),
        ({"opens": "22:00", "closes": "12:60"}, "closes='12:60' is not a time of day; use 'HH:MM'"),
        (
            {"opens": "22:00", "closes": "06:00", "tz": _Unnamed()},
            "timezone _Unnamed() has no name a plan can read back; use an IANA name like 'Europe/Berlin'.",
        ),
        (
            {"opens": "2026-11-10T22:00+00:00", "closes": "2026-11-10T22:00+00:00"},
            "impossible start window: it closes at 2026-11-10T22:00:00+00:00, before it opens at "
            "2026-11-10T22:00:00+00:00, so the task could never start. Fix: swap opens and closes",
        ),
    ],
    ids=["mixed-kinds", "bad-date-time", "bad-minute", "unnamed-zone", "empty-one-off"],
)
def test_a_bad_window_names_the_dag_the_task_and_the_fix_and_adds_nothing(
    kwargs: dict[str, Any], message: str
) -> None:
    with DAG("refused", schedule=None) as dag:
        train = EmptyOperator(task_id="train")
        hook = train._pre_execute_hook
        with pytest.raises(ValueError, match="^" + re.escape(f"DAG 'refused', task 'train': {message}")):
            start_window(train, **kwargs)
    assert list(dag.task_dict) == ["train"] and not train.upstream_task_ids
    assert train._pre_execute_hook is hook and "window" not in read_hints(train.executor_config)


def test_a_bad_policy_is_refused_before_the_window_is_read() -> None:
    """on_missed is checked first, so its message wins over a bad window given with it."""
    with DAG("policy", schedule=None) as dag:
        train = EmptyOperator(task_id="train")
        with pytest.raises(
            ValueError,
            match=re.escape(
                "DAG 'policy', task 'train': on_missed='wait' is not a policy; use 'skip' or 'fail'."
            ),
        ):
            start_window(train, opens="08:00", closes="08:00", tz="Mars/Base", on_missed="wait")
    assert list(dag.task_dict) == ["train"]


def test_an_unknown_timezone_is_refused_at_parse_time_even_for_a_templated_window() -> None:
    """The docstring promises a ValueError for an unknown timezone; tz is not templated, so it is known."""
    with DAG("tz_tmpl", schedule=None):
        train = EmptyOperator(task_id="train")
        with pytest.raises(ValueError, match=r"DAG 'tz_tmpl', task 'train': unknown timezone 'Europe/Berln'"):
            start_window(train, opens="{{ dag_run.conf['opens'] }}", closes="06:00", tz="Europe/Berln")


@pytest.mark.parametrize("helper", ["start_window", "stage_dependency"])
def test_a_task_outside_a_dag_is_refused_saying_to_create_it_inside_one(helper: str) -> None:
    loose = EmptyOperator(task_id="loose")
    other = EmptyOperator(task_id="other")
    with pytest.raises(
        ValueError, match=rf"task 'loose': create it inside a DAG .* before calling {helper}\(\)"
    ):
        if helper == "start_window":
            start_window(loose, opens="22:00", closes="06:00")
        else:
            stage_dependency(loose, other, checkpoint_dir="/ckpt", step=1, timeout=60)


# -- stage_dependency ------------------------------------------------------------------------------------
def test_stage_dependency_passes_its_settings_to_the_sensor_and_starts_with_training() -> None:
    """The sensor has all of training's upstream tasks (it starts alongside it) and gets every setting."""
    with DAG("staged", schedule=None) as dag:
        a, b = EmptyOperator(task_id="a"), EmptyOperator(task_id="b")
        train, evaluate = EmptyOperator(task_id="train"), EmptyOperator(task_id="eval")
        [a, b] >> train
        sensor = stage_dependency(
            train,
            evaluate,
            checkpoint_dir="/ckpt/{{ run_id }}",
            step=1000,
            pattern="step-{step}",
            timeout=dt.timedelta(hours=8),
            poke_interval=30,
            task_id="ckpt_1000",
        )
    assert sensor.task_id == "ckpt_1000"
    assert (sensor.checkpoint_dir, sensor.step, sensor.pattern) == ("/ckpt/{{ run_id }}", 1000, "step-{step}")
    assert (sensor.timeout, sensor.poke_interval, sensor.training_task_id) == (8 * 3600.0, 30.0, "train")
    assert sensor.doc_md == "Stage dependency: eval starts at checkpoint 1000 of train."
    assert sensor.upstream_task_ids == {"a", "b"} and evaluate.upstream_task_ids == {"ckpt_1000"}
    assert not train.downstream_task_ids
    assert edge_kinds(dag)[("ckpt_1000", "eval")] == "time"


@pytest.mark.parametrize("mapped_side", ["upstream", "downstream"])
def test_stage_dependency_refuses_a_mapped_task_on_either_side(mapped_side: str) -> None:
    with DAG("mapped_stage", schedule=None) as dag:

        @task
        def trial(x: int) -> None:
            pass

        trials, other = trial.expand(x=[1, 2]), EmptyOperator(task_id="other")
        pair = (trials, other) if mapped_side == "upstream" else (other, trials)
        with pytest.raises(
            ValueError,
            match=re.escape(
                "DAG 'mapped_stage', task 'trial': stage_dependency() takes plain tasks, not mapped ones "
                "(.expand()): a checkpoint belongs to one training run."
            ),
        ):
            stage_dependency(*pair, checkpoint_dir="/ckpt", step=1, timeout=60)
    assert set(dag.task_dict) == {"trial", "other"}
