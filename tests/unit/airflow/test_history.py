"""Reading past runs from the metadata database (airflow.history) with the real queries, on a SQLite
database holding the columns they read; an unreadable history falls back and says so once."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task
from airflow.serialization.serialized_objects import DagSerialization
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from airflow_gpu_dag import CRITICAL_PATH_WEIGHT_RULE, gpu_hints
from airflow_gpu_dag.airflow import history
from airflow_gpu_dag.airflow.dag_reader import build_task_graph
from airflow_gpu_dag.airflow.history import (
    learned_durations,
    learned_task_graph,
    read_history,
    read_map_counts,
)
from airflow_gpu_dag.core.analysis.estimates import EstimateSettings
from airflow_gpu_dag.core.policy.objective import KEY_WEIGHT_FLOOR
from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy
from tests.unit.cli.conftest import (
    run_cli,
    run_json,
)

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _ts(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f") if value is not None else None


class History:
    """A SQLite database with the ``task_instance`` and ``dag_run`` columns the queries read."""

    def __init__(self) -> None:
        self.engine: Engine = create_engine("sqlite://")
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "create table task_instance (dag_id text, task_id text, run_id text, map_index integer, "
                    "state text, start_date timestamp, end_date timestamp, duration float)"
                )
            )
            conn.execute(text("create table dag_run (dag_id text, run_id text, run_after timestamp)"))
        self.runs = 0

    def run(self, dag_id: str, tasks: dict[str, list[tuple[str, float | None]]]) -> str:
        """One DAG run; per task its instances as ``(state, duration)`` (several: a mapped task)."""
        self.runs += 1
        run_id = f"run_{self.runs:03d}"
        start = T0 + timedelta(hours=self.runs)
        with self.engine.begin() as conn:
            conn.execute(
                text("insert into dag_run values (:d, :r, :a)"), {"d": dag_id, "r": run_id, "a": _ts(start)}
            )
            for task_id, instances in tasks.items():
                for index, (state, duration) in enumerate(instances):
                    end = start + timedelta(seconds=duration) if duration is not None else None
                    conn.execute(
                        text("insert into task_instance values (:d, :t, :r, :m, :s, :b, :e, :u)"),
                        {
                            "d": dag_id,
                            "t": task_id,
                            "r": run_id,
                            "m": index if len(instances) > 1 or task_id.startswith("m") else -1,
                            "s": state,
                            "b": _ts(start),
                            "e": _ts(end),
                            "u": duration,
                        },
                    )
        return run_id

    def session(self) -> Session:
        return Session(self.engine)


@pytest.fixture
def db() -> Iterator[History]:
    store = History()
    yield store
    store.engine.dispose()


def _dag() -> DAG:
    with DAG("learn", schedule=None) as dag:
        prep = BashOperator(task_id="prep", bash_command="true", executor_config=gpu_hints(duration="10m"))

        @task(executor_config=gpu_hints(duration="1h", gpus=1, map_length=2))
        def mtrain(x: int) -> int:
            return x

        @task
        def configs() -> list[int]:
            return [1, 2, 3]

        cfg = configs()
        prep >> cfg
        mtrain.expand(x=cfg)
    return dag


def _subquery_after_in(sql: str) -> list[str]:
    """The text inside every ``IN (SELECT ...)`` of ``sql`` (up to its closing parenthesis)."""
    import re

    found = []
    for match in re.finditer(r"\bIN\s*\(\s*SELECT\b", sql, re.IGNORECASE):
        depth, start = 0, match.end() - len("SELECT")
        for index in range(match.end() - len("SELECT") - 1, len(sql)):
            depth += {"(": 1, ")": -1}.get(sql[index], 0)
            if depth == 0:
                found.append(sql[start:index])
                break
    return found


def test_read_history_keeps_successful_tries_most_recent_first(db: History) -> None:
    for i in range(30):
        db.run("learn", {"prep": [("success", 100.0 + i)], "configs": [("failed", 5.0)]})
    db.run("other", {"prep": [("success", 9999.0)]})
    with db.session() as session:
        found = read_history("learn", window=5, session=session)
    assert set(found) == {"prep"}  # failed tries are not read; other DAGs neither
    durations = [s.duration for s in found["prep"]]
    assert durations[:5] == [129.0, 128.0, 127.0, 126.0, 125.0]
    assert len(durations) <= 5 * 2 + 2
    assert found["prep"][0].run_id == "run_030" and found["prep"][0].end is not None


def test_read_map_counts_takes_the_median_of_the_latest_runs(db: History) -> None:
    for count in (2, 2, 9, 5, 5, 5, 3):  # the first two runs are older than the window of 5
        db.run("learn", {"mtrain": [("success", 60.0)] * count + [("removed", None)]})
    with db.session() as session:
        assert read_map_counts("learn", ["mtrain"], runs=5, session=session) == {"mtrain": 5}
        assert read_map_counts("learn", [], session=session) == {}


def test_map_counts_skip_the_newest_runs_that_have_not_expanded_the_task_yet(db: History) -> None:
    # Queued or running runs have only the task's placeholder row: taking the 5 latest runs first
    # would leave nothing, and the plan would fall back to one node.

    for _ in range(6):
        db.run("learn", {"mtrain": [("success", 60.0)] * 8})
    for k in range(5):
        with db.engine.begin() as connection:
            after = _ts(T0 + timedelta(days=1, hours=k))
            connection.execute(
                text("insert into dag_run values ('learn', :r, :a)"), {"r": f"new{k}", "a": after}
            )
            connection.execute(
                text("insert into task_instance values ('learn', 'mtrain', :r, -1, NULL, NULL, NULL, NULL)"),
                {"r": f"new{k}"},
            )
    with db.session() as session:
        assert read_map_counts("learn", ["mtrain"], session=session) == {"mtrain": 8}


def test_learned_task_graph_follows_the_history(db: History) -> None:
    for _ in range(4):
        db.run("learn", {"prep": [("success", 30.0)], "mtrain": [("success", 600.0)] * 3})
    with db.session() as session:
        learned = learned_task_graph(_dag(), session=session, settings=EstimateSettings(min_runs=3))
    assert learned.note == "" and learned.map_counts == {"mtrain": 3}
    assert [t for t in learned.graph.nodes if t.startswith("mtrain")] == [
        "mtrain[0]",
        "mtrain[1]",
        "mtrain[2]",
    ]
    assert learned.graph.nodes["prep"].duration == pytest.approx(30, rel=0.02)
    assert learned.graph.nodes["prep"].attrs["declared_duration"] == 600
    assert learned.graph.nodes["mtrain[2]"].duration == pytest.approx(600, rel=0.02)
    assert learned.declared.nodes["mtrain[2]"].duration == 3600
    assert learned.estimates["prep"].off_by(1.5) and learned.estimates["mtrain"].off_by(1.5)
    assert learned.estimates["configs"].source == "default"


def test_unreadable_history_falls_back_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    broken = create_engine("sqlite://")  # no tables at all
    history._warned.clear()
    graph, _ = build_task_graph(_dag(), expand_mapped=True)
    with caplog.at_level(logging.WARNING, logger=history.__name__), Session(broken) as session:
        for _ in range(3):
            estimates = learned_durations("learn", graph, session=session)
            learned = learned_task_graph(_dag(), session=session)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, [r.getMessage() for r in warnings]  # task history once, map counts once
    assert "cannot read the task history of DAG 'learn'" in warnings[0].getMessage()
    assert all(e.learned is None and "history unreadable" in e.note for e in estimates.values())
    assert estimates["prep"].duration == 600
    assert learned.note.startswith("history unreadable")
    assert learned.graph.nodes["mtrain[1]"].duration == 3600  # map_length hint, declared duration


def test_learning_off_reads_nothing() -> None:
    class NoSession:
        def execute(self, *args: object) -> None:
            raise AssertionError("the database must not be read")

    graph, _ = build_task_graph(_dag())
    estimates = learned_durations("learn", graph, EstimateSettings(enabled=False), session=NoSession())
    assert {e.source for e in estimates.values()} == {"declared", "default"}


def test_map_counts_query_has_no_limit_inside_an_in_subquery_on_mysql() -> None:
    """``run_id IN (SELECT ... ORDER BY ... LIMIT 20)``: MySQL and MariaDB (Airflow metadata databases)
    refuse LIMIT inside an IN subquery (error 1235), so on them the map counts were never read."""
    from sqlalchemy.dialects import mysql, postgresql

    captured: list[Any] = []

    class Capture:
        def execute(self, query: Any) -> Any:
            captured.append(query)
            return SimpleNamespace(all=list)

    assert read_map_counts("d", ["train"], session=Capture()) == {}
    (query,) = captured
    for dialect in (mysql.dialect(), postgresql.dialect()):
        sql = str(query.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
        assert "LIMIT 20" in sql  # the recent runs are still bounded...
        assert all("LIMIT" not in inner.upper() for inner in _subquery_after_in(sql)), sql  # ...not in an IN
    assert _subquery_after_in("x IN (SELECT a FROM t ORDER BY a LIMIT 3) AND y") == [
        "SELECT a FROM t ORDER BY a LIMIT 3"
    ]


RUN_ID = "manual__2026-11-30T12:00:00+00:00"


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


@pytest.mark.usefixtures("_fresh_weights")
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


@pytest.mark.usefixtures("_no_configured_pools")
def test_a_database_without_tables_says_run_db_migrate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh AIRFLOW_HOME where `airflow db migrate` never ran: reading past runs fails with ``no
    such table: task_instance``; plan and estimates still work on the declared estimates and say the
    fix."""
    import contextlib

    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from airflow_gpu_dag.airflow import history

    engine = create_engine(f"sqlite:///{tmp_path / 'airflow.db'}")  # an empty database

    @contextlib.contextmanager
    def empty_database(scoped: bool = True) -> Any:
        with Session(engine) as session:
            yield session

    monkeypatch.setattr(history, "create_session", empty_database)
    good = Path(__file__).resolve().parents[3] / "tests" / "integration" / "dags" / "ui"
    code, plan = run_json(capsys, "plan", "gpu_pipeline", "--file", str(good))
    assert code == 0
    assert plan["history_note"].startswith("the metadata database is not set up: run `airflow db migrate`")
    assert "no such table: task_instance" in plan["history_note"]
    assert run_cli("estimates", "gpu_pipeline", "--file", str(good)) == 0
    assert "run `airflow db migrate`" in capsys.readouterr().out


# -- read_history: edge cases -------------------------------------------------------------------------------
def _insert(db: History, task_id: str, run_id: str, map_index: int, state: str | None, **times: Any) -> None:
    with db.engine.begin() as conn:
        conn.execute(
            text("insert into task_instance values ('learn', :t, :r, :m, :s, :b, :e, :u)"),
            {
                "t": task_id,
                "r": run_id,
                "m": map_index,
                "s": state,
                "b": _ts(times.get("start")),
                "e": _ts(times.get("end")),
                "u": times.get("duration"),
            },
        )


def test_read_history_of_no_task_ids_reads_nothing(db: History) -> None:
    db.run("learn", {"prep": [("success", 10.0)]})
    with db.session() as session:
        assert read_history("learn", set(), session=session) == {}
        assert read_history("nobody", None, session=session) == {}


def test_read_history_counts_every_map_index_as_a_try_newest_first(db: History) -> None:
    run_id = db.run("learn", {"mtrain": [("success", 60.0), ("success", 60.0), ("success", 30.0)]})
    with db.session() as session:
        (samples,) = read_history("learn", ["mtrain"], session=session).values()
    # the same end for 0 and 1: the higher map index first
    assert [(s.map_index, s.duration, s.run_id) for s in samples] == [
        (1, 60.0, run_id),
        (0, 60.0, run_id),
        (2, 30.0, run_id),
    ]


def test_a_window_below_one_still_reads_the_latest_tries(db: History) -> None:
    for i in range(10):
        db.run("learn", {"prep": [("success", 100.0 + i)]})
    with db.session() as session:
        found = read_history("learn", ["prep"], window=0, session=session)
    durations = [s.duration for s in found["prep"]]
    assert durations[0] == 109.0 and 1 <= len(durations) <= 1 * 2 + 2


def test_more_than_500_task_ids_still_read_every_asked_task(db: History) -> None:
    """Past 500 ids the query is not narrowed by an IN list (it would be too long); the tasks asked
    for must still all be read."""
    db.run("learn", {"prep": [("success", 10.0)], "train": [("success", 20.0)]})
    asked = {"prep", "train", *(f"t{i}" for i in range(600))}
    with db.session() as session:
        found = read_history("learn", asked, session=session)
    assert [s.duration for s in found["prep"]] == [10.0] and [s.duration for s in found["train"]] == [20.0]


def test_a_try_marked_success_without_running_is_read_with_no_duration(db: History) -> None:
    _insert(db, "prep", "marked", -1, "success", end=T0)
    with db.session() as session:
        (sample,) = read_history("learn", ["prep"], session=session)["prep"]
    assert (sample.duration, sample.start, sample.end) == (None, None, T0.timestamp())
    graph, _ = build_task_graph(_dag(), expand_mapped=True)
    with db.session() as session:
        estimates = learned_durations("learn", graph, EstimateSettings(min_runs=1), session=session)
    assert estimates["prep"].learned is None and estimates["prep"].duration == 600  # the declared 10m


# -- has_history -------------------------------------------------------------------------------------------
def test_has_history_is_a_successful_try_or_a_mapped_instance(db: History) -> None:
    with db.session() as session:
        assert not history.has_history("learn", session=session)
    _insert(db, "prep", "r1", -1, "failed", start=T0, end=T0, duration=1.0)
    db.run("other", {"prep": [("success", 10.0)]})
    with db.session() as session:
        assert not history.has_history("learn", session=session)  # a failure, and another DAG's success
    _insert(db, "mtrain", "r2", 0, None)  # an expanded instance not run yet: its map count
    with db.session() as session:
        assert history.has_history("learn", session=session)


# -- read_map_counts: edge cases -----------------------------------------------------------------------------
def test_the_median_map_count_of_an_even_number_of_runs_is_rounded_up(db: History) -> None:
    for count in (2, 3, 4, 5):
        db.run("learn", {"mtrain": [("success", 60.0)] * count})
    with db.session() as session:
        assert read_map_counts("learn", ["mtrain"], runs=4, session=session) == {"mtrain": 4}  # 3.5 -> 4
        assert read_map_counts("learn", ["mtrain"], runs=0, session=session) == {"mtrain": 5}  # the latest


def test_a_task_whose_instances_were_all_removed_has_no_map_count(db: History) -> None:
    db.run("learn", {"mtrain": [("removed", None)] * 3, "mprep": [("success", 1.0), (None, None)]})
    with db.session() as session:
        found = read_map_counts("learn", ["mtrain", "mprep", "absent"], session=session)
    assert found == {"mprep": 2}  # an instance with no state yet counts


# -- an unreadable history -----------------------------------------------------------------------------------
class _Failing:
    """A session whose every query fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.queries = 0

    def execute(self, query: Any) -> Any:
        self.queries += 1
        raise self.error


def test_the_note_of_an_unreadable_history_is_the_errors_first_line_cut_to_200_characters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    history._warned.clear()
    graph, _ = build_task_graph(_dag())
    error = RuntimeError("x" * 500 + "\n[SQL: select a very long statement]")
    with caplog.at_level(logging.WARNING, logger=history.__name__):
        estimates = learned_durations("learn", graph, session=_Failing(error))
    assert estimates["prep"].note == f"history unreadable (RuntimeError: {'x' * 200})"
    assert "[SQL" not in caplog.text and "DAG 'learn'" in caplog.text
    assert "planning with the declared durations instead" in caplog.text
    empty = learned_durations("learn", graph, session=_Failing(TimeoutError()))
    assert empty["prep"].note == "history unreadable (TimeoutError: )"


def test_an_unreadable_history_is_logged_once_per_dag(caplog: pytest.LogCaptureFixture) -> None:
    history._warned.clear()
    graph, _ = build_task_graph(_dag())
    with caplog.at_level(logging.WARNING, logger=history.__name__):
        for dag_id in ("a", "b", "a", "b"):
            learned_durations(dag_id, graph, session=_Failing(RuntimeError("database is locked")))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "DAG 'a'" in warnings[0] and "DAG 'b'" in warnings[1]


def test_without_a_session_the_read_uses_a_session_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib

    opened: list[bool] = []

    @contextlib.contextmanager
    def own(scoped: bool = True) -> Iterator[Any]:
        opened.append(scoped)
        yield SimpleNamespace(execute=lambda query: SimpleNamespace(all=list, first=lambda: None))

    monkeypatch.setattr(history, "create_session", own)
    assert read_history("learn", ["prep"]) == {}
    assert read_map_counts("learn", ["mtrain"]) == {}
    assert history.has_history("learn") is False
    assert opened == [False, False, False]  # never the thread's scoped session


# -- learned_task_graph without the database ----------------------------------------------------------
def test_learned_task_graph_without_past_runs_reads_nothing_and_says_so() -> None:
    never = _Failing(AssertionError("the database must not be read"))
    declared_only = learned_task_graph(_dag(), past_runs=False, session=never)
    assert never.queries == 0
    assert declared_only.note == "declared only, past runs not read" and declared_only.map_counts == {}
    assert [t for t in declared_only.graph.nodes if t.startswith("mtrain")] == ["mtrain[0]", "mtrain[1]"]
    assert declared_only.graph.nodes["prep"].duration == 600


def test_learned_task_graph_reads_map_counts_only_for_mapped_tasks_it_expands() -> None:
    with DAG("plain", schedule=None) as plain:
        BashOperator(task_id="prep", bash_command="true", executor_config=gpu_hints(duration="10m"))
    failing = _Failing(RuntimeError("no"))
    learned_task_graph(plain, session=failing)
    assert failing.queries == 1  # the task history only: no mapped task, no map-count query
    flat = _Failing(RuntimeError("no"))
    learned = learned_task_graph(_dag(), expand_mapped=False, session=flat)
    assert flat.queries == 1 and "mtrain" in learned.graph.nodes and learned.map_counts == {}
