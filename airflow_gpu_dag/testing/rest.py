"""The REST side of the test cluster: authenticated calls, DAGs, runs, task instances, logs, pools.

:class:`ClusterRest` is mixed into :class:`~airflow_gpu_dag.testing.cluster.AirflowCluster`. Every
call goes through the provider's one REST client (:class:`~airflow_gpu_dag.hooks.rest_client.
AirflowRestClient`: bearer token, re-login on 401, GETs retried on connection errors while the
api-server boots, paging); this module turns its errors into :class:`ClusterError` and adds the
waits the tests need.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_gpu_dag.hooks.rest_client import AirflowRestClient, RestError
from airflow_gpu_dag.testing.errors import ClusterError

if TYPE_CHECKING:
    import httpx

__all__ = ["TERMINAL_RUN_STATES", "ClusterRest"]

#: Run states after which a DAG run does not change any more.
TERMINAL_RUN_STATES = frozenset({"success", "failed"})

#: How often a GET is retried after a connection error, and how long apart (seconds).
GET_RETRIES = 2
RETRY_WAIT = 2.0
#: How often a call is retried after a 500 "Database error" (SQLite busy under load).
DB_ERROR_RETRIES = 3


def _is_database_error(resp: httpx.Response) -> bool:
    """True for the api-server's answer to an SQLAlchemy error other than a unique violation."""
    if resp.status_code < 500:
        return False
    try:
        body = resp.json()
    except ValueError:
        return False
    detail = body.get("detail") if isinstance(body, dict) else None
    return isinstance(detail, dict) and detail.get("reason") == "Database error"


def _first_line(err: BaseException) -> str:
    return (str(err).splitlines() or [type(err).__name__])[0]


def rest_client(api_url: str, username: str, password: str) -> AirflowRestClient:
    """The cluster's client: 60 s per call, GETs retried on connection errors, redirects followed."""
    return AirflowRestClient(
        api_url,
        username,
        password,
        timeout=60.0,
        get_retries=GET_RETRIES,
        retry_wait=RETRY_WAIT,
        follow_redirects=True,
    )


class ClusterRest:
    """REST helpers of a running cluster (needs ``_rest()``, ``dags_folder``, ``log_tails()`` and
    ``check_alive()``)."""

    if TYPE_CHECKING:
        dags_folder: Path
        boot_timeout: float

        def _rest(self) -> AirflowRestClient: ...

        def log_tails(self, lines: int = 40) -> str: ...

    def check_alive(self) -> None:
        """Raise :class:`ClusterError` when a component died on its own (the cluster overrides it)."""

    def stuck_report(self, health: object) -> str:
        """What a hung component was doing, given the health answer ('' here; the cluster overrides it)."""
        return ""

    # ------------------------------------------------------------------ calls

    def token(self, refresh: bool = False) -> str:
        """A bearer token for the admin user (``POST /auth/token``), cached."""
        try:
            return self._rest().token(refresh)
        except RestError as err:
            raise ClusterError(str(err)) from err

    def request(
        self, method: str, path: str, *, check: bool = True, timeout: float = 60.0, **kwargs: Any
    ) -> httpx.Response:
        """An authenticated request to ``api_url + path`` (``path`` starts with ``/``; a full URL is
        used as is). GETs are retried on connection errors, PATCHes and PUTs (which set a state, so
        repeating one is harmless) on any transport error; a 401 refreshes the token once; calls
        other than POST (which may not be idempotent) are retried after a transient 500
        "Database error".

        :raises ClusterError: status >= 400 when ``check``; the message has the response body (and,
            for a 5xx, the components' log tails).
        """
        retries = 0 if method.upper() == "POST" else DB_ERROR_RETRIES
        idempotent = method.upper() in ("PATCH", "PUT")
        resp, _attempt = self._send(method, path, timeout, retries, idempotent=idempotent, **kwargs)
        if check and resp.status_code >= 400:
            raise self._failure(method, path, resp, tails=resp.status_code >= 500)
        return resp

    def _send(
        self,
        method: str,
        path: str,
        timeout: float,
        db_retries: int,
        *,
        idempotent: bool = False,
        **kwargs: Any,
    ) -> tuple[httpx.Response, int]:
        """One call, repeated up to ``db_retries`` times after a 500 "Database error" and, when the
        call is ``idempotent``, after a transport error too (a read timeout while the api-server
        waits for the SQLite lock); returns the last response and its attempt number (0 for the
        first)."""
        for attempt in range(1 + db_retries):
            try:
                resp = self._rest().send(method, path, timeout=timeout, **kwargs)
            except RestError as err:
                if not idempotent:
                    raise ClusterError(str(err)) from err
                if err.status is not None or attempt == db_retries:
                    raise ClusterError(f"{err}\n{self.log_tails(40)}") from err
                print(f"{method} {path}: {err}; retrying\n{self.log_tails(20)}", file=sys.stderr)
                time.sleep(RETRY_WAIT)
                continue
            if attempt == db_retries or not _is_database_error(resp):
                break
            time.sleep(RETRY_WAIT)
        return resp, attempt

    def _failure(self, method: str, path: str, resp: httpx.Response, *, tails: bool) -> ClusterError:
        """The error for a call answered with ``resp``, with the components' log tails if asked."""
        logs = f"\n{self.log_tails(40)}" if tails else ""
        return ClusterError(f"{method} {path} -> {resp.status_code}: {resp.text[:2000]}{logs}")

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """An authenticated call to the REST API: ``path`` is relative to ``/api/v2``
        (``cluster.api("GET", "/pools")``); a path already starting with ``/api/`` is used as is.
        Keyword arguments go to :meth:`request` (``json=``, ``params=``, ``check=False``, ...)."""
        if not path.startswith("/"):
            path = "/" + path
        if not path.startswith("/api/"):
            path = "/api/v2" + path
        return self.request(method, path, **kwargs)

    def health(self) -> dict[str, Any]:
        """``GET /api/v2/monitor/health`` (no token needed, no retry).

        :raises ClusterError: no answer, or a status >= 400.
        """
        return dict(
            self.request(
                "GET", "/api/v2/monitor/health", authenticate=False, retry=False, timeout=30.0
            ).json()
        )

    def _warm_up_execution_api(self) -> None:
        # The api-server builds its Execution API (the one task workers call) on the first request
        # to /execution, which takes ~15-20 s on a small machine and blocks every other request
        # meanwhile; the first task would stall and its start call be retried. Pay it during boot.
        try:
            self._rest().send(
                "GET",
                "/execution/health",
                authenticate=False,
                retry=False,
                timeout=max(60.0, self.boot_timeout),
            )
        except RestError as err:
            raise ClusterError(f"the api-server's Execution API did not answer: {err}") from err

    def _paged(self, path: str, key: str) -> list[dict[str, Any]]:
        try:
            return self._rest().pages(path, key)
        except RestError as err:
            raise ClusterError(str(err)) from err

    # ------------------------------------------------------------------ DAGs and runs

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
            unpaused = False
            try:
                resp = self.api("GET", f"/dags/{dag_id}", check=False)
                if resp.status_code == 200:
                    dag = dict(resp.json())
                    if dag.get("is_paused"):  # read again soon, within the deadline like any other wait
                        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
                        unpaused = True
                    else:
                        details = self.api("GET", f"/dags/{dag_id}/details", check=False)
                        if details.status_code == 200:
                            return dag
            except ClusterError:
                self.check_alive()  # a dead api-server is why nothing answers: name it, with its log
                raise
            self.check_alive()
            if time.monotonic() >= deadline:
                try:
                    errors = "\n".join(
                        f"  {e.get('filename')}: {str(e.get('stack_trace', ''))[-1500:]}"
                        for e in self.import_errors()
                    )
                except ClusterError as err:
                    errors = f"  (not readable: {_first_line(err)})"
                raise ClusterError(
                    f"DAG {dag_id!r} was not parsed within {timeout:.0f}s from {self.dags_folder}. "
                    f"Import errors:\n{errors or '  (none)'}\n{self.log_tails(30)}"
                )
            time.sleep(0.1 if unpaused else 1.0)

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
        # The run_id is chosen here, so a retry after a transient database error or a timed-out
        # answer cannot start a second run: if the first POST did commit, the retry answers 409
        # for the same run_id.
        run_id = run_id or f"manual__{datetime.now(UTC).isoformat()}"
        body = {"dag_run_id": run_id, "logical_date": logical_date, "conf": dict(conf or {})}
        path = f"/api/v2/dags/{dag_id}/dagRuns"
        resp, attempt = self._send("POST", path, 60.0, DB_ERROR_RETRIES, idempotent=True, json=body)
        if resp.status_code < 400:
            return str(resp.json()["dag_run_id"])
        if resp.status_code == 409 and attempt > 0:
            return run_id
        raise self._failure("POST", path, resp, tails=True)

    def get_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        """The REST DAG run object."""
        return dict(self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}").json())

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300.0, poll: float = 1.0) -> str:
        """Wait until the run is ``success`` or ``failed``; returns that state.

        :raises ClusterError: a component exited on its own (at once: nothing would finish the run),
            or still running after ``timeout`` seconds; the message lists the task instance states,
            the components' health (the scheduler's last heartbeat) and their log tails.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                state = str(self.get_run(dag_id, run_id).get("state"))
            except ClusterError:
                self.check_alive()  # a dead api-server is why nothing answers: name it, with its log
                raise
            if state in TERMINAL_RUN_STATES:
                return state
            self.check_alive()
            if time.monotonic() >= deadline:
                try:
                    tis = "\n".join(
                        f"  {ti['task_id']}[{ti.get('map_index', -1)}]: {ti.get('state')}"
                        for ti in self.task_instances(dag_id, run_id)
                    )
                except ClusterError as err:
                    tis = f"  (not readable: {_first_line(err)})"
                try:
                    health: object = self.health()
                except ClusterError as err:
                    health = err
                stuck = self.stuck_report(health)
                raise ClusterError(
                    f"DAG run {dag_id}/{run_id} is still {state!r} after {timeout:.0f}s.\n"
                    f"Task instances:\n{tis}\nHealth: {health}\n{stuck}\n{self.log_tails(40)}"
                )
            time.sleep(poll)

    # ------------------------------------------------------------------ task instances

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of the run (mapped ones once per ``map_index``), as REST dicts with
        ``task_id``, ``map_index``, ``state``, ``start_date``, ``end_date``, ``priority_weight``,
        ``pool``, ``pool_slots``, ``try_number``, ..."""
        try:
            return self._rest().run_task_instances(dag_id, run_id)
        except RestError as err:
            raise ClusterError(str(err)) from err

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

    # ------------------------------------------------------------------ pools

    def set_pool(
        self, name: str, slots: int, *, description: str = "", include_deferred: bool = False
    ) -> dict[str, Any]:
        """Create or resize a pool over REST; returns the REST pool object."""
        try:
            return self._rest().set_pool(
                name,
                slots,
                description or f"created by AirflowCluster ({name})",
                include_deferred=include_deferred,
            )
        except RestError as err:
            raise ClusterError(f"set_pool({name!r}, {slots}): {err}") from err

    def get_pool(self, name: str) -> dict[str, Any]:
        """The REST pool object (``slots``, ``occupied_slots``, ``running_slots``, ``open_slots``...)."""
        return dict(self.api("GET", f"/pools/{name}").json())
