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
:meth:`AirflowCluster.env`); inherited ``AIRFLOW__*``/``AIRFLOW_HOME``/``AIRFLOW_CONFIG`` variables of
the calling process are dropped so a developer's own Airflow setup cannot leak in. Extra settings
go in ``env=``, which wins over the defaults.

Set ``AIRFLOW_GPU_DAG_KEEP_HOME=1`` (or ``keep_home=True``) to keep the home with the component
logs (``<home>/<component>.log``) and the task logs (``<home>/logs``) after the cluster stops.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import psutil
import requests

__all__ = ["AirflowCluster", "ClusterError"]

#: Environment variable: keep the temporary AIRFLOW_HOME after stop() when set to 1/true/yes.
KEEP_HOME_ENV = "AIRFLOW_GPU_DAG_KEEP_HOME"

#: Run states after which a DAG run does not change any more.
TERMINAL_RUN_STATES = frozenset({"success", "failed"})

_SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


class ClusterError(RuntimeError):
    """The cluster failed to boot, a REST call failed, or a wait timed out. The message says what
    was expected, what was found, and includes the tail of the component logs where useful."""


@dataclass
class _Component:
    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None
    seen: dict[int, psutil.Process] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class AirflowCluster:
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
        self._env: dict[str, str] | None = None
        self._components: list[_Component] = []
        self._session = requests.Session()
        self._token: str | None = None
        self._started = False
        self._stopped = False

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
        self._port = _free_port()
        atexit.register(self.stop)
        try:
            self._write_passwords()
            self._env = self._build_env()
            self.cli("db", "migrate", timeout=600)
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
        self._session.close()
        for comp in self._components:
            self._remember_descendants(comp)
        # The scheduler first (it stops queuing work), the api-server last (workers report to it).
        order = sorted(self._components, key=lambda c: c.name == "api-server")
        for comp in order:
            self._signal_group(comp, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace
        for comp in order:
            if comp.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    comp.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for comp in order:
            if comp.proc is not None and (
                comp.proc.poll() is None or any(_alive(p) for p in comp.seen.values())
            ):
                self._signal_group(comp, signal.SIGKILL)
            if comp.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    comp.proc.wait(timeout=10)
        leftovers = [p for comp in order for p in comp.seen.values() if _alive(p)]
        for proc in leftovers:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, still = psutil.wait_procs(leftovers, timeout=3)
        for proc in still:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(still, timeout=3)
        for comp in self._components:
            if comp.log_file is not None:
                comp.log_file.close()
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
        return {c.name: c.proc.pid for c in self._components if c.proc is not None}

    # ------------------------------------------------------------------ processes and logs

    def process_tree(self) -> list[psutil.Process]:
        """Every live process this cluster started: the components and their descendants."""
        out: list[psutil.Process] = []
        for comp in self._components:
            self._remember_descendants(comp)
            out.extend(p for p in comp.seen.values() if _alive(p))
        return out

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
        """The last ``lines`` lines of every component log, each under a header."""
        if self._home is None:
            return ""
        parts = []
        for comp in self._components:
            text = self.read_log(comp.name).splitlines()[-lines:]
            parts.append(f"----- {comp.name} ({comp.log_path}) last {lines} lines -----")
            parts.extend(text)
        return "\n".join(parts)

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

    # ------------------------------------------------------------------ REST

    def token(self, refresh: bool = False) -> str:
        """A bearer token for the admin user (``POST /auth/token``), cached."""
        if self._token is None or refresh:
            resp = self._session.post(
                f"{self.api_url}/auth/token",
                json={"username": self.USERNAME, "password": self.PASSWORD},
                timeout=60,
            )
            if resp.status_code not in (200, 201):
                raise ClusterError(f"POST /auth/token -> {resp.status_code}: {resp.text[:500]}")
            self._token = str(resp.json()["access_token"])
        return self._token

    def request(
        self, method: str, path: str, *, check: bool = True, timeout: float = 60.0, **kwargs: Any
    ) -> requests.Response:
        """An authenticated request to ``api_url + path`` (``path`` starts with ``/``; a full URL is
        used as is). GETs are retried on connection errors; a 401 refreshes the token once.

        :raises ClusterError: status >= 400 when ``check``; the message has the response body.
        """
        url = path if path.startswith(("http://", "https://")) else f"{self.api_url}{path}"
        extra_headers = dict(kwargs.pop("headers", None) or {})

        def send() -> requests.Response:
            headers = {**extra_headers, "Authorization": f"Bearer {self.token()}"}
            return self._session.request(method, url, headers=headers, timeout=timeout, **kwargs)

        attempts = 3 if method.upper() == "GET" else 1
        for attempt in range(attempts):
            try:
                resp = send()
                break
            except (requests.ConnectionError, requests.Timeout) as err:
                if attempt + 1 >= attempts:
                    raise ClusterError(f"{method} {path}: {err}") from err
                time.sleep(2.0)
        if resp.status_code == 401:
            self.token(refresh=True)
            resp = send()
        if check and resp.status_code >= 400:
            raise ClusterError(f"{method} {path} -> {resp.status_code}: {resp.text[:2000]}")
        return resp

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """An authenticated call to the REST API: ``path`` is relative to ``/api/v2``
        (``cluster.api("GET", "/pools")``); a path already starting with ``/api/`` is used as is.
        Keyword arguments go to :meth:`request` (``json=``, ``params=``, ``check=False``, ...)."""
        if not path.startswith("/"):
            path = "/" + path
        if not path.startswith("/api/"):
            path = "/api/v2" + path
        return self.request(method, path, **kwargs)

    def health(self) -> dict[str, Any]:
        """``GET /api/v2/monitor/health``."""
        resp = self._session.get(f"{self.api_url}/api/v2/monitor/health", timeout=30)
        resp.raise_for_status()
        return dict(resp.json())

    def import_errors(self) -> list[dict[str, Any]]:
        """The DAG import errors the dag-processor recorded (``GET /api/v2/importErrors``)."""
        return self._paged("/importErrors", "import_errors")

    def wait_for_dag(self, dag_id: str, timeout: float = 180.0) -> dict[str, Any]:
        """Wait until ``dag_id`` is parsed and serialized, and unpause it if needed; returns the
        REST DAG object.

        :raises ClusterError: not there in time; the message lists the import errors.
        """
        deadline = time.monotonic() + timeout
        while True:
            resp = self.api("GET", f"/dags/{dag_id}", check=False)
            if resp.status_code == 200:
                dag = dict(resp.json())
                if dag.get("is_paused"):
                    self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
                    continue
                details = self.api("GET", f"/dags/{dag_id}/details", check=False)
                if details.status_code == 200:
                    return dag
            if time.monotonic() >= deadline:
                errors = "\n".join(
                    f"  {e.get('filename')}: {str(e.get('stack_trace', ''))[-1500:]}"
                    for e in self.import_errors()
                )
                raise ClusterError(
                    f"DAG {dag_id!r} was not parsed within {timeout:.0f}s from {self.dags_folder}. "
                    f"Import errors:\n{errors or '  (none)'}\n{self.log_tails(30)}"
                )
            time.sleep(1.0)

    def wait_for_dags(self, dag_ids: Iterable[str], timeout: float = 180.0) -> None:
        """:meth:`wait_for_dag` for several DAGs, sharing one deadline."""
        deadline = time.monotonic() + timeout
        for dag_id in dag_ids:
            self.wait_for_dag(dag_id, timeout=max(1.0, deadline - time.monotonic()))

    def trigger(
        self,
        dag_id: str,
        conf: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        logical_date: str | None = None,
    ) -> str:
        """Trigger a run over REST (``POST /dags/{dag_id}/dagRuns``); returns its run_id."""
        body: dict[str, Any] = {"logical_date": logical_date, "conf": dict(conf or {})}
        if run_id is not None:
            body["dag_run_id"] = run_id
        resp = self.api("POST", f"/dags/{dag_id}/dagRuns", json=body)
        return str(resp.json()["dag_run_id"])

    def get_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        """The REST DAG run object."""
        return dict(self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}").json())

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300.0, poll: float = 1.0) -> str:
        """Wait until the run is ``success`` or ``failed``; returns that state.

        :raises ClusterError: still running after ``timeout`` seconds; the message lists the task
            instance states and the scheduler log tail.
        """
        deadline = time.monotonic() + timeout
        while True:
            state = str(self.get_run(dag_id, run_id).get("state"))
            if state in TERMINAL_RUN_STATES:
                return state
            if time.monotonic() >= deadline:
                tis = "\n".join(
                    f"  {ti['task_id']}[{ti.get('map_index', -1)}]: {ti.get('state')}"
                    for ti in self.task_instances(dag_id, run_id)
                )
                raise ClusterError(
                    f"DAG run {dag_id}/{run_id} is still {state!r} after {timeout:.0f}s.\n"
                    f"Task instances:\n{tis}\n{self.log_tails(40)}"
                )
            time.sleep(poll)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of the run (mapped ones once per ``map_index``), as REST dicts with
        ``task_id``, ``map_index``, ``state``, ``start_date``, ``end_date``, ``priority_weight``,
        ``pool``, ``pool_slots``, ``try_number``, ..."""
        return self._paged(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", "task_instances")

    def task_log(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> str:
        """The log of one task try (over REST), one line per log event ('' when there is none)."""
        resp = self.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"map_index": map_index, "full_content": "true"},
            headers={"Accept": "application/json"},
            check=False,
        )
        if resp.status_code >= 400:
            return ""
        content = resp.json().get("content")
        if isinstance(content, str):
            return content
        lines = []
        for event in content or []:
            if isinstance(event, dict):
                extra = {k: v for k, v in event.items() if k not in ("event", "timestamp", "level", "logger")}
                text = f"{event.get('timestamp', '')} {event.get('level', '')} {event.get('event', '')}"
                lines.append(text + (f" {extra}" if extra else ""))
            else:
                lines.append(str(event))
        return "\n".join(lines)

    def set_pool(
        self, name: str, slots: int, *, description: str = "", include_deferred: bool = False
    ) -> dict[str, Any]:
        """Create or resize a pool over REST; returns the REST pool object."""
        body = {
            "name": name,
            "slots": int(slots),
            "description": description or f"created by AirflowCluster ({name})",
            "include_deferred": include_deferred,
        }
        resp = self.api("POST", "/pools", json=body, check=False)
        if resp.status_code == 409:
            resp = self.api("PATCH", f"/pools/{name}", json=body, check=False)
        if resp.status_code >= 400:
            raise ClusterError(f"set_pool({name!r}, {slots}) -> {resp.status_code}: {resp.text[:1000]}")
        return dict(resp.json())

    def get_pool(self, name: str) -> dict[str, Any]:
        """The REST pool object (``slots``, ``occupied_slots``, ``running_slots``, ``open_slots``...)."""
        return dict(self.api("GET", f"/pools/{name}").json())

    # ------------------------------------------------------------------ internals

    def _paged(self, path: str, key: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = self.api("GET", path, params={"limit": 100, "offset": offset}).json()
            items = list(page.get(key) or [])
            out.extend(items)
            offset += len(items)
            if not items or offset >= int(page.get("total_entries", 0)):
                return out

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
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("AIRFLOW__") and k not in ("AIRFLOW_HOME", "AIRFLOW_CONFIG")
        }
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "PYTHONUNBUFFERED": "1",
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
                "AIRFLOW__API_AUTH__JWT_SECRET": self.JWT_SECRET,
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "120",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "15",
                "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
                "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
                "AIRFLOW__DAG_PROCESSOR__FILE_PARSING_SORT_MODE": "alphabetical",
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            }
        )
        env.update(self._extra_env)
        (home / "plugins").mkdir(exist_ok=True)
        return env

    def _spawn(self, name: str, args: list[str]) -> None:
        comp = _Component(name=name, argv=[self._airflow_bin(), *args], log_path=self.log_path(name))
        self._components.append(comp)
        comp.log_file = open(comp.log_path, "ab")  # noqa: SIM115 - closed in stop()
        comp.proc = subprocess.Popen(
            comp.argv,
            env=self.env,
            cwd=str(self.home),
            stdin=subprocess.DEVNULL,
            stdout=comp.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stop() kills exactly this group
        )

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        wanted = ["metadatabase", "scheduler"]
        if self.with_dag_processor:
            wanted.append("dag_processor")
        if self.with_triggerer:
            wanted.append("triggerer")
        last: object = "api-server not answering yet"
        while True:
            for comp in self._components:
                if comp.proc is not None and comp.proc.poll() is not None:
                    raise ClusterError(f"{comp.name} exited with status {comp.proc.returncode} during boot")
                self._remember_descendants(comp)
            try:
                health = self.health()
                last = health
                if all((health.get(k) or {}).get("status") == "healthy" for k in wanted):
                    return
            except (requests.RequestException, ValueError) as err:
                last = err
            if time.monotonic() >= deadline:
                raise ClusterError(f"components not healthy after {timeout:.0f}s; last health: {last}")
            time.sleep(1.0)

    def _warm_up_execution_api(self) -> None:
        # The api-server builds its Execution API (the one task workers call) on the first request
        # to /execution, which takes ~15-20 s on a small machine and blocks every other request
        # meanwhile; the first task would stall and its start call be retried. Pay it during boot.
        try:
            self._session.get(f"{self.api_url}/execution/health", timeout=max(60.0, self.boot_timeout))
        except requests.RequestException as err:
            raise ClusterError(f"the api-server's Execution API did not answer: {err}") from err

    def _remember_descendants(self, comp: _Component) -> None:
        if comp.proc is None:
            return
        try:
            root = psutil.Process(comp.proc.pid)
            comp.seen.setdefault(root.pid, root)
            for child in root.children(recursive=True):
                comp.seen.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def _signal_group(self, comp: _Component, sig: signal.Signals) -> None:
        if comp.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(comp.proc.pid, sig)
