"""The test harness (no Airflow booted): transient SQLite errors are retried without starting a run
twice, the SQLite busy timeout goes only to clusters on SQLite, and a component that dies on its own
ends a wait at once, with its log."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.testing import AirflowCluster, ClusterError, sqlite
from airflow_gpu_dag.testing import rest as rest_module
from airflow_gpu_dag.testing.cluster import _distinct_free_ports
from airflow_gpu_dag.testing.processes import Components
from airflow_gpu_dag.testing.rest import ClusterRest

DB_ERROR = {"detail": {"reason": "Database error", "statement": "INSERT ...", "message": "locked"}}


CONFLICT = {"detail": {"reason": "Unique constraint violation"}}


class FakeClient:
    """Answers each call with the next prepared (status, body) and records what was sent."""

    def __init__(self, answers: list[tuple[int, Any] | RestError]) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, str, Any]] = []

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        self.sent.append((method, path, kwargs.get("json")))
        answer = self.answers.pop(0)
        if isinstance(answer, RestError):
            raise answer
        status, body = answer
        return httpx.Response(status, json=body)


def _timeout(path: str = "/api/v2/dags/d/dagRuns") -> RestError:
    return RestError(f"POST {path}: ReadTimeout")


class FakeCluster(ClusterRest):
    def __init__(self, answers: list[tuple[int, Any] | RestError]) -> None:
        self.client = FakeClient(answers)

    def _rest(self) -> Any:
        return self.client

    dead: str | None = None  # check_alive raises naming it

    def log_tails(self, lines: int = 40) -> str:
        return "----- api-server tail -----"

    def check_alive(self) -> None:
        if self.dead:
            raise ClusterError(f"{self.dead} exited with status 1 on its own")


@pytest.fixture
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest_module, "RETRY_WAIT", 0.0)


def _env(tmp_path: Path, **env: str) -> dict[str, str]:
    cluster = AirflowCluster(tmp_path, env=env)
    cluster._home, cluster._port = tmp_path, 8080  # what start() sets before it builds the environment
    return cluster._build_env()


def _spawn(components: Components, tmp_path: Path, name: str, code: str) -> None:
    log = tmp_path / f"{name}.log"
    components.spawn(name, [sys.executable, "-c", code], {}, tmp_path, log)


def _wait_exit(components: Components, name: str) -> None:
    proc = [c for c in components if c.name == name][-1].proc
    assert proc is not None
    proc.wait(timeout=30)


LOCKED = "raise RuntimeError('(sqlite3.OperationalError) database is locked')"


#: Dies on the lock error the first ``$DEATHS`` times it starts (a marker file per start), then runs.
LOCKED_THEN_RUNS = f"""
import os, pathlib, time
starts = pathlib.Path(os.environ["STARTS"])
starts.write_text(starts.read_text() + "x" if starts.exists() else "x")
if len(starts.read_text()) <= int(os.environ["DEATHS"]):
    {LOCKED}
time.sleep(60)
"""


def _locked_cluster(tmp_path: Path, deaths: int) -> AirflowCluster:
    cluster = AirflowCluster(tmp_path)
    cluster._home = tmp_path
    cluster._env = {"STARTS": str(tmp_path / "starts"), "DEATHS": str(deaths), "PATH": os.environ["PATH"]}
    cluster._components.spawn(
        "scheduler",
        [sys.executable, "-c", LOCKED_THEN_RUNS],
        cluster.env,
        tmp_path,
        tmp_path / "scheduler.log",
    )
    return cluster


def _starts(tmp_path: Path) -> int:
    return len((tmp_path / "starts").read_text())


STUCK = """
import time

def stuck_in_the_loop():
    print("looping", flush=True)
    time.sleep(120)

stuck_in_the_loop()
"""


@pytest.mark.usefixtures("no_wait")
def test_trigger_sends_its_own_run_id() -> None:
    cluster = FakeCluster([(200, {"dag_run_id": "r1"})])
    assert cluster.trigger("d", {"a": 1}, run_id="r1") == "r1"
    ((method, path, body),) = cluster.client.sent
    assert (method, path) == ("POST", "/api/v2/dags/d/dagRuns")
    assert body == {"dag_run_id": "r1", "logical_date": None, "conf": {"a": 1}}


@pytest.mark.usefixtures("no_wait")
def test_trigger_retries_a_database_error_with_the_same_run_id() -> None:
    cluster = FakeCluster([(500, DB_ERROR), (500, DB_ERROR), (200, {"dag_run_id": "x"})])
    assert cluster.trigger("d") == "x"
    run_ids = {body["dag_run_id"] for _, _, body in cluster.client.sent}
    assert len(cluster.client.sent) == 3
    assert len(run_ids) == 1 and run_ids.pop().startswith("manual__")


@pytest.mark.usefixtures("no_wait")
def test_trigger_retry_that_finds_the_run_already_made_returns_it() -> None:
    # The first POST committed but its answer was an error: the retry's 409 means "already there".
    cluster = FakeCluster([(500, DB_ERROR), (409, CONFLICT)])
    assert cluster.trigger("d", run_id="mine") == "mine"


@pytest.mark.usefixtures("no_wait")
def test_trigger_conflict_on_first_try_is_an_error() -> None:
    cluster = FakeCluster([(409, CONFLICT)])
    with pytest.raises(ClusterError, match="409"):
        cluster.trigger("d", run_id="taken")


@pytest.mark.usefixtures("no_wait")
def test_trigger_gives_up_after_the_retries_with_the_log_tails() -> None:
    answers = [(500, DB_ERROR)] * (1 + rest_module.DB_ERROR_RETRIES)
    cluster = FakeCluster(answers)
    with pytest.raises(ClusterError, match="Database error") as err:
        cluster.trigger("d")
    assert "api-server tail" in str(err.value)
    assert cluster.client.answers == []


@pytest.mark.usefixtures("no_wait")
def test_trigger_retries_a_read_timeout_with_the_same_run_id() -> None:
    # The api-server answered nothing in time (it waited for the SQLite lock) but did create the
    # run: the retry's 409 for the same run_id means it is there, and no second run is started.
    cluster = FakeCluster([_timeout(), (409, CONFLICT)])
    assert cluster.trigger("d", run_id="mine") == "mine"
    assert [body["dag_run_id"] for _, _, body in cluster.client.sent] == ["mine", "mine"]
    cluster = FakeCluster([_timeout(), _timeout(), (200, {"dag_run_id": "r"})])
    assert cluster.trigger("d", run_id="r") == "r"


@pytest.mark.usefixtures("no_wait")
def test_trigger_gives_up_after_as_many_timeouts_with_the_log_tails() -> None:
    cluster = FakeCluster([_timeout()] * (1 + rest_module.DB_ERROR_RETRIES))
    with pytest.raises(ClusterError, match="ReadTimeout") as err:
        cluster.trigger("d")
    assert "api-server tail" in str(err.value)
    assert cluster.client.answers == []


@pytest.mark.usefixtures("no_wait")
def test_patches_are_retried_after_a_timeout() -> None:
    cluster = FakeCluster([_timeout("/api/v2/pools/gpu"), (200, {"slots": 3})])
    assert cluster.api("PATCH", "/pools/gpu", json={"slots": 3}).json() == {"slots": 3}
    assert len(cluster.client.sent) == 2


@pytest.mark.usefixtures("no_wait")
def test_other_posts_are_not_retried_after_a_timeout() -> None:
    cluster = FakeCluster([_timeout("/api/v2/pools"), (200, {})])
    with pytest.raises(ClusterError, match="ReadTimeout"):
        cluster.api("POST", "/pools", json={"name": "gpu"})
    assert len(cluster.client.sent) == 1


@pytest.mark.usefixtures("no_wait")
def test_other_server_errors_are_not_retried() -> None:
    cluster = FakeCluster([(500, {"detail": "boom"})])
    with pytest.raises(ClusterError, match="boom"):
        cluster.trigger("d")
    assert len(cluster.client.sent) == 1


@pytest.mark.usefixtures("no_wait")
def test_idempotent_calls_retry_database_errors_but_posts_do_not() -> None:
    cluster = FakeCluster([(500, DB_ERROR), (200, {"slots": 2})])
    assert cluster.api("PATCH", "/pools/gpu", json={"slots": 2}).json() == {"slots": 2}
    cluster = FakeCluster([(500, DB_ERROR)])
    with pytest.raises(ClusterError, match="Database error"):
        cluster.api("POST", "/pools", json={"name": "gpu"})
    assert len(cluster.client.sent) == 1


@pytest.mark.usefixtures("no_wait")
def test_sqlite_clusters_get_the_busy_timeout(tmp_path: Path) -> None:
    env = _env(tmp_path)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("sqlite:///")
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] == sqlite.CONNECT_ARGS_PATH
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC"] == sqlite.CONNECT_ARGS_ASYNC_PATH
    assert sqlite.CONNECT_ARGS is not sqlite.CONNECT_ARGS_ASYNC
    # Longer than the driver's 5 s, and short enough that a lock wait ends in an answer (a retried
    # 500) before the harness's client gives up on the call.
    client = rest_module.rest_client("http://127.0.0.1:8080", "admin", "pw")
    read_timeout = client._http.timeout.read
    client.close()
    assert read_timeout is not None
    assert 5 < sqlite.CONNECT_ARGS["timeout"] == sqlite.CONNECT_ARGS_ASYNC["timeout"] <= read_timeout / 2


@pytest.mark.usefixtures("no_wait")
def test_postgresql_clusters_do_not(tmp_path: Path) -> None:
    # psycopg2 refuses a "timeout" connection option: `airflow db migrate` would fail at boot.
    env = _env(tmp_path, AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg2://u:p@127.0.0.1:5/db")
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS" not in env
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC" not in env


@pytest.mark.usefixtures("no_wait")
def test_connect_args_given_by_the_caller_win(tmp_path: Path) -> None:
    env = _env(tmp_path, AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS="my.module.ARGS")
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] == "my.module.ARGS"


@pytest.mark.usefixtures("no_wait")
def test_the_callers_terminal_size_is_not_passed_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pytest-xdist worker sets COLUMNS=80 / LINES=24: `cluster.cli("gpu-dag", ...)` tables would
    # wrap at 80 columns under xdist and not without it.
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "24")
    monkeypatch.setenv("GPU_DAG_SOMETHING_ELSE", "kept")
    env = _env(tmp_path)
    assert "COLUMNS" not in env and "LINES" not in env
    assert env["GPU_DAG_SOMETHING_ELSE"] == "kept"
    # ... while a caller that wants a width gives it explicitly.
    assert _env(tmp_path, COLUMNS="120")["COLUMNS"] == "120"


# -- a component that dies on its own ends a wait at once -------------------------------------------------
@pytest.mark.usefixtures("no_wait")
def test_wait_for_run_stops_at_once_when_a_component_died() -> None:
    cluster = FakeCluster([(200, {"state": "running"})])
    cluster.dead = "scheduler"
    started = time.monotonic()
    with pytest.raises(ClusterError, match="scheduler exited"):
        cluster.wait_for_run("d", "r", timeout=300)
    assert time.monotonic() - started < 60  # not the 300 s timeout
    assert cluster.client.answers == []  # one poll


@pytest.mark.usefixtures("no_wait")
def test_wait_for_run_returns_a_finished_run_even_if_a_component_died_since() -> None:
    cluster = FakeCluster([(200, {"state": "success"})])
    cluster.dead = "scheduler"
    assert cluster.wait_for_run("d", "r") == "success"


@pytest.mark.usefixtures("no_wait")
def test_died_names_a_component_that_exited_on_its_own(tmp_path: Path) -> None:
    components = Components()
    try:
        _spawn(components, tmp_path, "api-server", "import time; time.sleep(60)")
        _spawn(components, tmp_path, "scheduler", "import sys; print('boom'); sys.exit(3)")
        _wait_exit(components, "scheduler")
        dead = components.died()
        assert dead is not None and dead.name == "scheduler" and dead.proc is not None
        assert dead.proc.returncode == 3
        # Killed on purpose (a fault) is not a death; neither is an exit whose restart runs.
        dead.stopped_on_purpose = True
        assert components.died() is None
        dead.stopped_on_purpose = False
        _spawn(components, tmp_path, "scheduler", "import time; time.sleep(60)")
        assert components.died() is None
    finally:
        components.stop(grace=5)


@pytest.mark.usefixtures("no_wait")
def test_check_alive_raises_with_the_dead_components_log(tmp_path: Path) -> None:
    cluster = AirflowCluster(tmp_path)
    cluster._home = tmp_path
    try:
        code = "print('the last words'); raise RuntimeError('no such table: dag_run')"
        _spawn(cluster._components, tmp_path, "scheduler", code)
        _wait_exit(cluster._components, "scheduler")
        with pytest.raises(ClusterError, match=r"scheduler \(pid \d+\) exited with status 1") as err:
            cluster.check_alive()
        first, *rest = str(err.value).splitlines()
        assert first.endswith("Last error: RuntimeError: no such table: dag_run")
        assert "the last words" in rest
    finally:
        cluster._components.stop(grace=5)


@pytest.mark.usefixtures("no_wait")
def test_a_scheduler_that_exits_on_a_sqlite_lock_is_started_again(tmp_path: Path) -> None:
    cluster = _locked_cluster(tmp_path, deaths=2)
    try:
        for attempt in (1, 2):
            _wait_exit(cluster._components, "scheduler")
            with pytest.warns(
                RuntimeWarning, match=rf"database is locked.*started again \({attempt} of at most 2\)"
            ):
                cluster.check_alive()
        deadline = time.monotonic() + 30
        while _starts(tmp_path) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        cluster.check_alive()  # the third start runs
        assert _starts(tmp_path) == 3 and len(cluster.notices) == 2
        assert "started again (2 of at most 2)" in cluster.notices[-1]
    finally:
        cluster._components.stop(grace=5)


@pytest.mark.usefixtures("no_wait")
def test_a_third_sqlite_lock_exit_fails_the_cluster(tmp_path: Path) -> None:
    cluster = _locked_cluster(tmp_path, deaths=3)
    try:
        for _ in (1, 2):
            _wait_exit(cluster._components, "scheduler")
            with pytest.warns(RuntimeWarning):
                cluster.check_alive()
        _wait_exit(cluster._components, "scheduler")
        with pytest.raises(ClusterError, match="database is locked"):  # three times: not chance any more
            cluster.check_alive()
        assert _starts(tmp_path) == 3
    finally:
        cluster._components.stop(grace=5)


@pytest.mark.usefixtures("no_wait")
def test_an_api_server_that_exits_on_a_sqlite_lock_still_fails_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = AirflowCluster(tmp_path)
    cluster._home = tmp_path
    monkeypatch.setattr(cluster, "_restart", lambda name: pytest.fail(f"{name} restarted"))
    try:
        _spawn(cluster._components, tmp_path, "api-server", LOCKED)
        _wait_exit(cluster._components, "api-server")
        with pytest.raises(ClusterError, match=r"api-server .* database is locked"):
            cluster.check_alive()
        assert cluster.notices == []
    finally:
        cluster._components.stop(grace=5)


@pytest.mark.usefixtures("no_wait")
def test_log_tails_put_the_scheduler_first_and_leave_out_the_access_log(tmp_path: Path) -> None:
    cluster = AirflowCluster(tmp_path)
    cluster._home = tmp_path
    try:
        access = "2026-12-01 [info ] request finished [http.access] path=/api/v2/dags/d/dagRuns/r"
        _spawn(cluster._components, tmp_path, "api-server", f"print('served'); print({access!r})")
        _spawn(cluster._components, tmp_path, "scheduler", "print('scheduled')")
        _wait_exit(cluster._components, "api-server")
        _wait_exit(cluster._components, "scheduler")
        tails = cluster.log_tails()
        assert tails.index("----- scheduler") < tails.index("----- api-server")
        assert "served" in tails and "scheduled" in tails and "http.access" not in tails
    finally:
        cluster._components.stop(grace=5)


@pytest.mark.usefixtures("no_wait")
def test_each_cluster_gets_its_own_log_server_ports(tmp_path: Path) -> None:
    ports = _distinct_free_ports(2, taken={8080})
    assert len(set(ports)) == 2 and 8080 not in ports
    cluster = AirflowCluster(tmp_path)
    cluster._home, cluster._port, cluster._log_ports = tmp_path, 8080, ports
    env = cluster._build_env()
    assert env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] == str(ports[0])
    assert env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] == str(ports[1])


@pytest.mark.usefixtures("no_wait")
def test_a_hung_scheduler_prints_its_stacks_when_health_finds_it_unhealthy(tmp_path: Path) -> None:
    cluster = AirflowCluster(tmp_path)
    cluster._home = tmp_path
    log = tmp_path / "scheduler.log"
    cluster._components.spawn(
        "scheduler", [sys.executable, "-c", STUCK], {"PYTHONFAULTHANDLER": "1"}, tmp_path, log
    )
    try:
        deadline = time.monotonic() + 30
        while "looping" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        # A healthy scheduler is left alone.
        assert cluster.stuck_report({"scheduler": {"status": "healthy"}}) == ""
        assert cluster.stuck_report(ClusterError("no answer")) == ""  # proves nothing
        assert cluster._components.died() is None
        report = cluster.stuck_report({"scheduler": {"status": "unhealthy"}})
        assert "stuck_in_the_loop" in report and "scheduler stacks" in report
        with pytest.raises(ClusterError, match="exited with status -6"):  # SIGABRT
            cluster.check_alive()
        assert cluster.dump_stacks() == ""  # nothing left to ask
    finally:
        cluster._components.stop(grace=5)


@pytest.mark.usefixtures("no_wait")
def test_components_run_with_the_fault_handler(tmp_path: Path) -> None:
    assert _env(tmp_path)["PYTHONFAULTHANDLER"] == "1"


@pytest.mark.usefixtures("no_wait")
def test_the_callers_connections_and_variables_are_not_inherited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A developer's connection to the shared budget ledger of a real deployment: tasks of the test cluster
    # would spend its budget (an environment connection wins over the cluster's own).
    monkeypatch.setenv("AIRFLOW_CONN_GPU_DAG_BUDGET", "postgresql://prod-ledger/budget")
    monkeypatch.setenv("AIRFLOW_VAR_GPU_DAG_BUDGET_CAP", "0")
    monkeypatch.setenv("AIRFLOW_GPU_DAG_KEEP_HOME_NOT_A_SETTING", "kept")
    cluster = AirflowCluster(tmp_path, env={"AIRFLOW_CONN_MINE": "sqlite:///x.db"})
    cluster._home, cluster._port = tmp_path, 8080
    env = cluster._build_env()
    assert "AIRFLOW_CONN_GPU_DAG_BUDGET" not in env and "AIRFLOW_VAR_GPU_DAG_BUDGET_CAP" not in env
    assert env["AIRFLOW_CONN_MINE"] == "sqlite:///x.db"  # given in env=: passed on
    assert env["AIRFLOW_GPU_DAG_KEEP_HOME_NOT_A_SETTING"] == "kept"
