"""Boot a real Apache Airflow 3 for integration tests and demos.

:class:`AirflowCluster` starts an api-server, a scheduler, a dag-processor (and, when asked, a
triggerer) in a fresh temporary ``AIRFLOW_HOME`` with SQLite and the LocalExecutor, waits until
they report healthy, creates the pools you ask for over REST, and on exit kills exactly the
processes it started (their process groups and every descendant it saw) and removes the home::

    from airflow_gpu_dag.testing import AirflowCluster

    with AirflowCluster("tests/integration/dags/priority", pools={"gpu": 1}) as cluster:
        cluster.wait_for_dag("my_dag")
        run_id = cluster.trigger("my_dag")
        assert cluster.wait_for_run("my_dag", run_id, timeout=300) == "success"
        for ti in cluster.task_instances("my_dag", run_id):
            print(ti["task_id"], ti["state"], ti["start_date"], ti["priority_weight"])

Everything the tests look at goes through the public REST API (``/api/v2``) with a bearer token
of a known admin user (SimpleAuthManager, user ``admin``, password :attr:`AirflowCluster.PASSWORD`,
written to the passwords file before the api-server starts, so nothing is generated at random).

Settings are passed to the children as ``AIRFLOW__*`` environment variables (see
:meth:`AirflowCluster.env`); inherited ``AIRFLOW__*``, ``AIRFLOW_CONN_*``, ``AIRFLOW_VAR_*``,
``AIRFLOW_HOME`` and ``AIRFLOW_CONFIG`` variables of the calling process are dropped so a developer's
own Airflow setup cannot leak in. Extra settings go in ``env=``, which wins over the defaults.

Set ``AIRFLOW_GPU_DAG_KEEP_HOME=1`` (or ``keep_home=True``) to keep the home with the component
logs (``<home>/<component>.log``) and the task logs (``<home>/logs``) after the cluster stops.

Modules: this one boots and stops the cluster; :mod:`~airflow_gpu_dag.testing.processes` starts and
kills the component processes; :mod:`~airflow_gpu_dag.testing.rest` has the REST helpers (through
the provider's :class:`~airflow_gpu_dag.hooks.rest_client.AirflowRestClient`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import psutil

from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.testing import sqlite
from airflow_gpu_dag.testing.errors import ClusterError
from airflow_gpu_dag.testing.migrated_db import migrated_database
from airflow_gpu_dag.testing.processes import Component, Components, free_port
from airflow_gpu_dag.testing.rest import TERMINAL_RUN_STATES, ClusterRest, rest_client

__all__ = ["TERMINAL_RUN_STATES", "AirflowCluster", "ClusterError"]

#: Environment variable: keep the temporary AIRFLOW_HOME after stop() when set to 1/true/yes.
KEEP_HOME_ENV = "AIRFLOW_GPU_DAG_KEEP_HOME"

_SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


#: What the cluster does not take from the caller's environment: these names, and settings,
#: connections and Variables (a developer's ``AIRFLOW_CONN_*`` may point at a real deployment).
_NOT_INHERITED = frozenset({"AIRFLOW_HOME", "AIRFLOW_CONFIG", "COLUMNS", "LINES"})
_NOT_INHERITED_PREFIXES = ("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_")


#: A log line that names an exception (``sqlalchemy.exc.OperationalError: ...``, ``KeyError: 'x'``).
_ERROR_LINE = re.compile(r"\b\w*(Error|Exception|Interrupt)\b:")

#: Marks the api-server's access log lines (left out of :meth:`AirflowCluster.log_tails`).
_ACCESS_LOG = "[http.access]"

#: SQLite's answer when a connection cannot get the write lock; Airflow's scheduler loop does not retry
#: its commit on it and exits (see :meth:`AirflowCluster.check_alive`).
SQLITE_LOCKED = "database is locked"
#: How many times one cluster restarts a component that exited on :data:`SQLITE_LOCKED`.
LOCKED_RESTARTS = 2
#: The components restarted after such an exit: those whose loop Airflow ends on it (the api-server
#: answers it with a 500 and goes on, so an api-server that exits has another cause).
_RESTARTABLE = ("scheduler", "dag-processor", "triggerer")


def _distinct_free_ports(count: int, taken: set[int]) -> tuple[int, ...]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in taken and port not in ports:
            ports.append(port)
    return tuple(ports)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


class AirflowCluster(ClusterRest):
    """A real Airflow 3 (SQLite + LocalExecutor) in a temporary ``AIRFLOW_HOME``.

    :param dags_folder: the DAG folder to parse (only what is in it is loaded; keep it small).
    :param pools: pools to create after boot, ``{"name": slots}``.
    :param env: extra ``AIRFLOW__SECTION__KEY`` (or any) environment variables for every component;
        they override the defaults of :meth:`env`.
    :param triggerer: also start ``airflow triggerer`` (deferrable operators / sensors).
    :param dag_processor: start ``airflow dag-processor`` (default). When False, DAGs are
        serialized once with ``airflow dags reserialize`` before the scheduler starts.
    :param keep_home: keep the home after :meth:`stop`; default: ``$AIRFLOW_GPU_DAG_KEEP_HOME``.
    :param boot_timeout: seconds to wait for all components to be healthy.
    :param stop_grace: seconds between SIGTERM and SIGKILL in :meth:`stop`.
    :param parallelism: ``[core] parallelism`` (LocalExecutor worker processes at most).
    """

    #: SimpleAuthManager admin user and its password (fixed: a test cluster, bound to 127.0.0.1).
    USERNAME = "admin"
    PASSWORD = "airflow-gpu-dag-admin"
    #: Fixed secrets so every component (and a re-run) agree on them.
    JWT_SECRET = "airflow-gpu-dag-test-jwt-secret-0123456789abcdef"
    API_SECRET_KEY = "airflow-gpu-dag-test-api-secret-key"
    FERNET_KEY = "7TXzIe3q5jYQ6bBv0jV5y2uZ7XJYq3n6v2o7kq1wN8Q="  # urlsafe base64 of 32 bytes

    def __init__(
        self,
        dags_folder: str | os.PathLike[str],
        *,
        pools: Mapping[str, int] | None = None,
        env: Mapping[str, str] | None = None,
        triggerer: bool = False,
        dag_processor: bool = True,
        keep_home: bool | None = None,
        boot_timeout: float = 300.0,
        stop_grace: float = 15.0,
        parallelism: int = 4,
    ) -> None:
        folder = Path(dags_folder).resolve()
        if not folder.is_dir():
            raise ClusterError(
                f"AirflowCluster: dags_folder {folder} is not a directory; pass the folder path."
            )
        self.dags_folder = folder
        self.pools: dict[str, int] = dict(pools or {})
        for name, slots in self.pools.items():
            if not isinstance(slots, int) or slots < 0:
                raise ClusterError(f"AirflowCluster: pool {name!r} needs a whole number of slots >= 0.")
        self._extra_env = {str(k): str(v) for k, v in (env or {}).items()}
        self.with_triggerer = triggerer
        self.with_dag_processor = dag_processor
        self.keep_home = _truthy(os.environ.get(KEEP_HOME_ENV)) if keep_home is None else keep_home
        self.boot_timeout = boot_timeout
        self.stop_grace = stop_grace
        self.parallelism = parallelism
        self._home: Path | None = None
        self._port: int | None = None
        self._log_ports: tuple[int, ...] = (0, 0)
        self._env: dict[str, str] | None = None
        self._components = Components()
        self._rest_client: AirflowRestClient | None = None
        self._started = False
        self._stopped = False
        #: What the harness did on its own while the cluster ran (restarts after SQLite lock errors).
        self.notices: list[str] = []

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> AirflowCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> AirflowCluster:
        """Migrate the database, start the components, wait until healthy, create the pools.

        :raises ClusterError: a step failed or timed out; the message has each component's log tail.
        """
        if self._started:
            raise ClusterError("AirflowCluster.start() called twice; create a new cluster instead.")
        self._started = True
        self._home = Path(tempfile.mkdtemp(prefix="airflow-gpu-dag-"))
        self._port = free_port()
        self._log_ports = _distinct_free_ports(2, taken={self._port})
        self._rest_client = rest_client(self.api_url, self.USERNAME, self.PASSWORD)
        atexit.register(self.stop)
        try:
            self._write_passwords()
            self._env = self._build_env()
            self._migrate()
            if not self.with_dag_processor:
                self.cli("dags", "reserialize", timeout=600)
            self._spawn("api-server", ["api-server", "--host", "127.0.0.1", "--port", str(self._port)])
            self._spawn("scheduler", ["scheduler"])
            if self.with_dag_processor:
                self._spawn("dag-processor", ["dag-processor"])
            if self.with_triggerer:
                self._spawn("triggerer", ["triggerer"])
            self._wait_healthy(self.boot_timeout)
            self._warm_up_execution_api()
            self.token()
            for name, slots in self.pools.items():
                self.set_pool(name, slots)
        except BaseException as err:
            tails = self.log_tails()
            home = self._home
            self.stop()
            if not isinstance(err, Exception):  # KeyboardInterrupt, SystemExit: cleaned up, pass on
                raise
            kept = f" (home kept at {home})" if self.keep_home else ""
            raise ClusterError(f"Airflow cluster failed to boot{kept}: {err}\n{tails}") from err
        return self

    def stop(self) -> None:
        """Kill what :meth:`start` started and remove the home (unless kept). Idempotent.

        Each component runs in its own process group: the groups get SIGTERM, then SIGKILL after
        ``stop_grace`` seconds; descendants that left the group (task supervisors call ``setpgid``)
        are tracked while the cluster runs and get the same treatment.
        """
        if self._stopped or not self._started:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if self._rest_client is not None:
            self._rest_client.close()
        self._components.stop(self.stop_grace)
        if self._home is not None and not self.keep_home:
            shutil.rmtree(self._home, ignore_errors=True)
        elif self._home is not None:
            print(f"AirflowCluster: kept AIRFLOW_HOME {self._home}", file=sys.stderr)

    # ------------------------------------------------------------------ properties

    @property
    def home(self) -> Path:
        """The temporary ``AIRFLOW_HOME`` (component logs are ``<home>/<component>.log``)."""
        if self._home is None:
            raise ClusterError("AirflowCluster is not started; use it as a context manager or call start().")
        return self._home

    @property
    def port(self) -> int:
        """TCP port of the api-server on 127.0.0.1."""
        if self._port is None:
            raise ClusterError("AirflowCluster is not started; use it as a context manager or call start().")
        return self._port

    @property
    def api_url(self) -> str:
        """Base URL of the api-server (``[api] base_url``), e.g. ``http://127.0.0.1:41234``.
        The REST API is under ``api_url + "/api/v2"``; plugin apps are mounted under it too."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """A copy of the environment every component runs with (use it for your own ``airflow``
        subprocesses, or see :meth:`cli`)."""
        if self._env is None:
            raise ClusterError("AirflowCluster is not started; use it as a context manager or call start().")
        return dict(self._env)

    @property
    def pids(self) -> dict[str, int]:
        """``component name -> pid`` (also the process group id) of the running components."""
        return self._components.pids

    # ------------------------------------------------------------------ processes and logs

    def process_tree(self) -> list[psutil.Process]:
        """Every live process this cluster started: the components and their descendants."""
        return self._components.process_tree()

    def log_path(self, component: str) -> Path:
        """Path of a component's stdout/stderr log (``api-server``, ``scheduler``, ...)."""
        return self.home / f"{component}.log"

    def read_log(self, component: str) -> str:
        """The whole log of a component ('' when it has none)."""
        try:
            return self.log_path(component).read_text(errors="replace")
        except OSError:
            return ""

    def log_tails(self, lines: int = 40) -> str:
        """The last ``lines`` lines of every component log, each under a header: the scheduler's
        first (a cut-off CI log keeps the start of a message), the api-server's last and without its
        access log (a test polling the REST API would fill the tail with it)."""
        if self._home is None:
            return ""
        latest = self._components.latest()  # a restarted one appends to one log
        order = sorted(latest.values(), key=lambda c: (c.name != "scheduler", c.name == "api-server"))
        parts = []
        for comp in order:
            text = [line for line in self.read_log(comp.name).splitlines() if _ACCESS_LOG not in line]
            parts.append(f"----- {comp.name} ({comp.log_path}) last {lines} lines -----")
            parts.extend(text[-lines:])
        return "\n".join(parts)

    def check_alive(self) -> None:
        """Raise at once if a component exited without the harness stopping it (a crashed scheduler
        would otherwise leave every wait to run out its timeout, one test after another).

        A scheduler, dag-processor or triggerer whose last error is SQLite's ``database is locked`` is
        started again instead, at most :data:`LOCKED_RESTARTS` times per cluster, as the supervisor of a
        real deployment would: on a loaded machine the components' writes to the one SQLite file can
        collide, and Airflow's scheduler exits on that error in its commit rather than retrying it.
        Each restart is kept in :attr:`notices` and issued as a ``RuntimeWarning`` (pytest's warnings
        summary lists it, also for a test that passes); any other exit still raises.

        :raises ClusterError: naming the component, its exit status, the last error line of its log
            (first: a CI log may keep only the start of a message) and the log's tail.
        """
        dead = self._components.died()
        if dead is None or dead.proc is None:
            return
        tail = self.read_log(dead.name).splitlines()[-80:]
        errors = [line for line in tail if _ERROR_LINE.search(line)]
        last = errors[-1].strip() if errors else "(none logged)"
        died = f"{dead.name} (pid {dead.proc.pid}) exited with status {dead.proc.returncode} on its own"
        locked = [n for n in self.notices if SQLITE_LOCKED in n]
        if SQLITE_LOCKED in last and dead.name in _RESTARTABLE and len(locked) < LOCKED_RESTARTS:
            notice = f"{died} ({last}); started again ({len(locked) + 1} of at most {LOCKED_RESTARTS})"
            warnings.warn(f"airflow-gpu-dag test cluster: {notice}", RuntimeWarning, stacklevel=2)
            self.notices.append(notice)
            self._restart(dead.name)
            return
        raise ClusterError(
            f"{died}; the cluster cannot go on. Last error: {last}\n"
            f"Last lines of its log ({dead.log_path}):\n" + "\n".join(tail)
        )

    def _restart(self, name: str) -> Component:
        """Start ``name`` again with its argv, logging to the same file, and return the new process
        (the waits that call :meth:`check_alive` go on polling; ``faults.start_component`` also waits
        for its heartbeat)."""
        old = self._components.latest()[name]
        return self._components.spawn(name, old.argv, self.env, self.home, self.log_path(name))

    def dump_stacks(self, name: str = "scheduler", wait: float = 15.0) -> str:
        """Make a live component that seems stuck print every thread's Python stack, and end it: it gets
        SIGABRT, which the interpreter's fault handler (``PYTHONFAULTHANDLER=1`` in :meth:`env`) answers
        with the stacks in its log. Returns the last lines of that log ('' when it is not running).
        Its exit then counts as a death (:meth:`check_alive`): the cluster was stuck anyway."""
        comp = self._components.latest().get(name)
        if comp is None or comp.proc is None or comp.proc.poll() is not None:
            return ""
        comp.proc.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            comp.proc.wait(timeout=wait)
        tail = self.read_log(name).splitlines()[-150:]
        return f"----- {name} stacks at SIGABRT ({comp.log_path}) -----\n" + "\n".join(tail)

    def stuck_report(self, health: object) -> str:
        """The scheduler's stacks when ``health`` (``/monitor/health``) finds it unhealthy although its
        process runs (a hung scheduler loop); '' otherwise (no health answer proves nothing)."""
        scheduler = health.get("scheduler") if isinstance(health, dict) else None
        if not isinstance(scheduler, dict) or scheduler.get("status") in (None, "healthy"):
            return ""
        return self.dump_stacks("scheduler")

    def cli(self, *args: str, check: bool = True, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        """Run ``airflow <args>`` with the cluster's environment; returns the completed process.

        :raises ClusterError: exit status != 0 (when ``check``) or timeout; with the output tail.
        """
        argv = [self._airflow_bin(), *args]
        try:
            result = subprocess.run(
                argv,
                env=self.env,
                cwd=str(self.home),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise ClusterError(f"`airflow {' '.join(args)}` did not finish in {timeout:.0f}s") from err
        if check and result.returncode != 0:
            tail = "\n".join((result.stdout + "\n" + result.stderr).splitlines()[-60:])
            raise ClusterError(f"`airflow {' '.join(args)}` exited with {result.returncode}:\n{tail}")
        return result

    # ------------------------------------------------------------------ internals

    def _migrate(self) -> None:
        """``airflow db migrate``; on SQLite, a copy of this process's earlier migration with the same
        settings instead (:mod:`~airflow_gpu_dag.testing.migrated_db`)."""
        conn = self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        prefix = "sqlite:///"
        if not conn.startswith(prefix) or "?" in conn:
            self.cli("db", "migrate", timeout=600)
            return
        migrated_database(
            Path(conn.removeprefix(prefix)),
            self.env,
            self.home,
            lambda: self.cli("db", "migrate", timeout=600),
        )

    def _airflow_bin(self) -> str:
        candidate = Path(sys.executable).parent / "airflow"
        if candidate.exists():
            return str(candidate)
        found = shutil.which("airflow")
        if not found:
            raise ClusterError(
                "cannot find the `airflow` executable next to the Python interpreter or on PATH."
            )
        return found

    def _write_passwords(self) -> None:
        # SimpleAuthManager only generates passwords for users missing from this file.
        (self.home / "simple_auth_manager_passwords.json").write_text(
            '{"%s": "%s"}\n' % (self.USERNAME, self.PASSWORD)  # noqa: UP031
        )

    def _build_env(self) -> dict[str, str]:
        home = self.home
        base_url = self.api_url
        # COLUMNS / LINES describe the caller's terminal (a pytest-xdist worker sets 80 x 24); the
        # cluster's components and CLI calls have none, so their tables get the no-terminal width.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(_NOT_INHERITED_PREFIXES) and k not in _NOT_INHERITED
        }
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                # A task's temporary folders (BashOperator's airflowtmp*) live in the home, so one
                # left by a killed task goes with the home in stop().
                "TMPDIR": str(home / "tmp"),
                "PYTHONUNBUFFERED": "1",
                # SIGABRT makes a component print every thread's stack (dump_stacks: a hung one).
                "PYTHONFAULTHANDLER": "1",
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__FERNET_KEY": self.FERNET_KEY,
                "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
                "AIRFLOW__CORE__AUTH_MANAGER": _SIMPLE_AUTH_MANAGER,
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{self.USERNAME}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(
                    home / "simple_auth_manager_passwords.json"
                ),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url}/execution/",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__BASE_URL": base_url,
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API__SECRET_KEY": self.API_SECRET_KEY,
                "AIRFLOW__API__EXPOSE_CONFIG": "True",
                # A 500 "Database error" then names the statement and the driver's error.
                "AIRFLOW__API__EXPOSE_STACKTRACE": "True",
                "AIRFLOW__API_AUTH__JWT_SECRET": self.JWT_SECRET,
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "120",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
                "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
                "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
                "AIRFLOW__DAG_PROCESSOR__FILE_PARSING_SORT_MODE": "modified_time",
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
                # Each cluster's own log servers: with the defaults (8793, 8794) a second cluster's
                # scheduler and triggerer cannot bind, and its api-server would ask the first's for logs.
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self._log_ports[0]),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self._log_ports[1]),
            }
        )
        if self.with_triggerer:  # with a triggerer, the sensors and gates defer (settings given in env= win)
            env["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] = "True"
        env.update(self._extra_env)
        if env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("sqlite"):
            # SQLite only (psycopg2 refuses a "timeout" argument); settings given in env= win.
            env.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", sqlite.CONNECT_ARGS_PATH)
            env.setdefault(
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC", sqlite.CONNECT_ARGS_ASYNC_PATH
            )
        (home / "plugins").mkdir(exist_ok=True)
        Path(env["TMPDIR"]).mkdir(parents=True, exist_ok=True)
        return env

    def _rest(self) -> AirflowRestClient:
        if self._rest_client is None or self._stopped:
            raise ClusterError("AirflowCluster is not running; use it as a context manager or call start().")
        return self._rest_client

    def _spawn(self, name: str, args: list[str]) -> None:
        argv = [self._airflow_bin(), *args]
        self._components.spawn(name, argv, self.env, self.home, self.log_path(name))

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        wanted = ["metadatabase", "scheduler"]
        if self.with_dag_processor:
            wanted.append("dag_processor")
        if self.with_triggerer:
            wanted.append("triggerer")
        last: object = "api-server not answering yet"
        while True:
            exited = self._components.exited()
            if exited is not None and exited.proc is not None:
                raise ClusterError(f"{exited.name} exited with status {exited.proc.returncode} during boot")
            try:
                health = self.health()
                last = health
                if all((health.get(k) or {}).get("status") == "healthy" for k in wanted):
                    return
            except (ClusterError, ValueError) as err:
                last = err
            if time.monotonic() >= deadline:
                raise ClusterError(f"components not healthy after {timeout:.0f}s; last health: {last}")
            time.sleep(1.0)
