"""The one client of the Airflow 3 public REST API: pools, task instances, DAGs, Variables.

Used by the watermark controller (through :class:`airflow_gpu_dag.hooks.airflow_api.AirflowApiHook`
or built directly), and by the test cluster (:mod:`airflow_gpu_dag.testing.cluster`).

Everything goes through the public REST API (``/api/v2``) with a bearer token from
``POST /auth/token``, so the controller needs no database access and can run anywhere that reaches
the api-server. The password and token are never logged, never part of ``repr()``, and are
registered with Airflow's secrets masker when it is available.

Every call ends within the client's ``timeout`` (or the call's own ``timeout=``): connecting, logging
in again, sending and reading the whole answer, by one deadline (:mod:`.deadline`), not per read. An
answer that is not the JSON expected (an HTML login page from a proxy, a list where an object is
expected) is a :class:`RestError` that names the URL and shows the start of what came back.
"""

from __future__ import annotations

import errno
import logging
import math
import re
import socket
import ssl
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_fixed

from airflow_gpu_dag.core.model.resources import real_number
from airflow_gpu_dag.hooks.deadline import deadline, deadline_client, fetch

log = logging.getLogger(__name__)

__all__ = ["AirflowRestClient", "RestError", "decode_json", "mask", "parse_time", "transport_failure"]

PAGE = 100
#: A list endpoint that keeps answering full pages past this many items is refused (a broken or
#: hostile server must not keep a caller paging forever).
MAX_ITEMS = 200_000


class RestError(RuntimeError):
    """A REST call failed; the message has the method, path and status, never credentials."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _chain(err: BaseException) -> list[BaseException]:
    """``err`` and the errors it was raised from (httpx wraps httpcore's, which wraps the socket's)."""
    seen: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and current not in seen and len(seen) < 10:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def transport_failure(err: BaseException, base_url: str = "") -> str:
    """What a failed connection means, in words: ``ConnectError: api:8080 refused the connection ...``.

    The class name alone (``ConnectError``) does not say whether nothing listens on the port, the host
    name does not resolve, the host does not answer in time or TLS failed; each needs another fix. The
    host and port come from the request (else ``base_url``); the cause from the chain of errors."""
    url: httpx.URL | None
    try:
        url = err.request.url if isinstance(err, httpx.RequestError) else httpx.URL(base_url)
    except (RuntimeError, httpx.InvalidURL):  # a RequestError raised without its request
        url = httpx.URL(base_url) if base_url else None
    host = (url.host or "?") if url is not None else "?"
    port = (url.port or (443 if url.scheme == "https" else 80)) if url is not None else "?"
    where = f"{host}:{port}"
    errors = _chain(err)
    text = " ".join(str(e) for e in errors).lower()
    name = type(err).__name__
    if any(isinstance(e, ConnectionRefusedError) for e in errors) or "refused" in text:
        cause = (
            f"{where} refused the connection: nothing listens there (is the api-server running, and is "
            "this its host and port?)"
        )
    elif any(isinstance(e, socket.gaierror) for e in errors) or "resolv" in text:
        cause = f"the host name {host!r} cannot be resolved (DNS): check the connection's host"
    elif isinstance(err, httpx.TimeoutException) or any(isinstance(e, TimeoutError) for e in errors):
        cause = (
            f"no complete answer from {where} within the call's deadline (the host is unreachable or "
            "drops packets, or the api-server, or a proxy in front of it, is overloaded)"
        )
    elif any(isinstance(e, ssl.SSLError) for e in errors):
        cause = (
            f"TLS with {where} failed ({err}): an https URL for a plain-http server, or a certificate "
            "this host does not trust?"
        )
    elif any(isinstance(e, ConnectionResetError) for e in errors) or "reset" in text:
        cause = f"{where} reset the connection (a proxy or a server that closed it)"
    elif any(getattr(e, "errno", None) in (errno.EHOSTUNREACH, errno.ENETUNREACH) for e in errors):
        cause = f"no route to {where} (host or network unreachable)"
    else:
        cause = f"{where}: {err}" if str(err) else where
    return f"{name}: {cause}"


def mask(secret: str | None) -> None:
    """Hide ``secret`` in Airflow's logs (a no-op when empty or when no secrets masker is set up)."""
    if not secret:
        return
    try:
        # process boundary: the test harness (testing/) and scripts use this client without loading Airflow
        from airflow.sdk.log import mask_secret

        mask_secret(secret)
    except Exception:  # masker unavailable outside a configured Airflow
        log.debug("secrets masker not available")


def parse_time(value: object) -> float | None:
    """Epoch seconds of an ISO-8601 timestamp from the REST API (None stays None)."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


#: ``token: ...``, ``"password": "..."``, ``Authorization: Bearer ...`` in an answer: the value is masked.
_SECRET_VALUE = re.compile(
    r"(?i)((?:access_|refresh_|id_)?token|password|passwd|secret|authorization|api[_-]?key|session)"
    # the field's name and its separator (JSON or Python quotes, = or :), then its value: a quoted one
    # to its closing quote (spaces included), else up to the next separator
    r"([\"']?\s*[:=]\s*)(?:\"(?:bearer\s+)?[^\"]*\"?|'(?:bearer\s+)?[^']*'?|(?:bearer\s+)?[^\s\"'&,;<>]+)"
)
_NOT_JSON = object()


def excerpt(text: str, secrets: Iterable[str | None] = (), limit: int = 120) -> str:
    """The start of an answer, safe to show: one line of printable characters, at most ``limit``
    long, with ``secrets`` and the values of fields that look like credentials masked."""
    text = text[: limit * 20]
    # the fields first: a secret that is also a field's name ("password") would hide the field
    text = _SECRET_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown_url(base_url: str, url: str) -> str:
    """``url`` (a path under ``base_url``, or a full URL) as a message shows it: no ``user:password@``."""
    full = url if "://" in url else f"{base_url}{url}"
    parts = urlsplit(full)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def decode_json(
    response: httpx.Response,
    where: str,
    expect: type | tuple[type, ...] = dict,
    secrets: Iterable[str | None] = (),
) -> Any:
    """The JSON body of ``response``, which must be an ``expect`` (an object by default).

    :param where: the method and URL, for the message.
    :raises RestError: the body is not JSON (an HTML login page from a proxy) or not an ``expect``
        (a list where an object is expected); the message names ``where``, the status and content
        type, and shows the start of the body with credentials masked.
    """
    try:
        value = response.json()
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError; [[[...]]] nested too deep
        value = _NOT_JSON
    if value is not _NOT_JSON and isinstance(value, expect):
        return value
    kinds = expect if isinstance(expect, tuple) else (expect,)
    names: dict[type, str] = {dict: "a JSON object", list: "a JSON list"}
    wanted = " or ".join(names.get(kind, kind.__name__) for kind in kinds)
    got = "not JSON" if value is _NOT_JSON else f"a JSON {type(value).__name__}"
    content_type = response.headers.get("content-type") or "no content type"
    shown = excerpt(response.text, secrets) or "(empty)"
    raise RestError(
        f"{where}: expected {wanted}, got {got} (HTTP {response.status_code}, {content_type}): {shown}",
        response.status_code,
    )


def _map_index(ti: object) -> int:
    """A task instance's ``map_index`` (-1: not mapped, or not a task instance the answer can tell)."""
    value = ti.get("map_index", -1) if isinstance(ti, dict) else -1
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


class AirflowRestClient:
    """A small authenticated client for the Airflow 3 public REST API.

    :param base_url: the api-server base URL, e.g. ``http://localhost:8080``.
    :param username: login for ``POST /auth/token`` (None with ``token`` given).
    :param password: password for ``POST /auth/token``.
    :param token: a ready bearer token (skips the login).
    :param timeout: seconds one call may take in all: connecting, logging in (again), sending and
        reading the whole answer (a call's own ``timeout=`` wins). A server that trickles its answer
        fails the call with a :class:`RestError` once they are spent.
    :param get_retries: how often a GET is retried after a transport error (connection refused,
        timeout), ``retry_wait`` seconds apart; 0 (the default) raises at once. Each try has its own
        ``timeout``: a GET takes at most ``(1 + get_retries) * timeout + get_retries * retry_wait``.
    :param follow_redirects: follow HTTP redirects.
    """

    def __init__(
        self,
        base_url: str,
        username: str | None = None,
        password: str | None = None,
        token: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        *,
        get_retries: int = 0,
        retry_wait: float = 2.0,
        follow_redirects: bool = False,
    ) -> None:
        if not (isinstance(timeout, int | float) and 0 < timeout < math.inf):
            raise ValueError(f"timeout must be a number of seconds > 0, not {timeout!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self._username = username
        self._password = password
        self._token = token
        #: True while the token is one this client got from ``POST /auth/token`` (it can get another).
        self._token_from_login = False
        mask(password)
        mask(token)
        self._get_retries = max(0, int(get_retries))
        if not 0 <= real_number(retry_wait) < math.inf:  # NaN fails too: it would fail the first retry
            raise ValueError(f"retry_wait={retry_wait!r} must be a finite number of seconds >= 0, e.g. 2")
        self._retry_wait = retry_wait
        self._http = deadline_client(
            base_url=self.base_url, timeout=timeout, transport=transport, follow_redirects=follow_redirects
        )

    def __repr__(self) -> str:  # no user:password@ of the base URL either
        return f"AirflowRestClient(base_url={shown_url(self.base_url, '')!r}, username={self._username!r})"

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    # -- auth ---------------------------------------------------------------------------------
    def _secrets(self) -> tuple[str | None, ...]:
        return (self._password, self._token)

    def _exchange(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One HTTP request and its whole answer, within this thread's deadline (set by the caller).

        :raises RestError: a transport error, or no complete answer in time."""
        try:
            return fetch(self._http, method, url, **kwargs)
        except httpx.HTTPError as err:  # the host, the port and the cause: refused, DNS, timeout, TLS
            raise RestError(f"{method} {url}: {transport_failure(err, self.base_url)}") from None

    def _login(self) -> str:
        if self._username is None:
            raise RestError("no token and no login: set the connection's login/password")
        body = {"username": self._username, "password": self._password or ""}
        response = self._exchange("POST", "/auth/token", json=body)
        if response.status_code >= 300:
            raise RestError(f"POST /auth/token: HTTP {response.status_code}", response.status_code)
        where = f"POST {shown_url(self.base_url, '/auth/token')}"
        token = decode_json(response, where, secrets=self._secrets()).get("access_token")
        if not token or not isinstance(token, str):  # an answer, not a transport error: not retried
            raise RestError("POST /auth/token: no access_token in the answer", response.status_code)
        mask(token)
        self._token = str(token)
        self._token_from_login = True
        return self._token

    def token(self, refresh: bool = False) -> str:
        """The bearer token; logs in when there is none yet, or again with ``refresh`` (within
        ``timeout``)."""
        if self._token is None or refresh:
            with deadline(self.timeout):
                return self._login()
        return self._token

    def send(
        self,
        method: str,
        url: str,
        *,
        authenticate: bool = True,
        retry: bool = True,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """Call ``url``: a path under the base URL (``/api/v2/pools``, ``/execution/health``, a plugin's
        path) or a full URL. With ``authenticate``, sends the bearer token and logs in as needed: again
        on 401 (an expired token), and on 403 when the token came from a login (``Invalid JWT token``:
        the api-server restarted with another JWT secret); a 403 that persists after the new login is
        the answer. GETs are retried after transport errors (``get_retries``), unless ``retry`` is
        False. ``timeout``: seconds for the whole call, logins included (default: the client's); each
        retry gets as long again. Other keyword arguments go to ``httpx`` (``json=``, ``params=``).
        Raises :class:`RestError` on a transport error or when the time is spent, never on an HTTP
        status."""
        seconds = self.timeout if timeout is None else float(timeout)
        attempts = 1 + (self._get_retries if retry and method.upper() == "GET" else 0)

        def once() -> httpx.Response:
            with deadline(seconds):  # each try gets the whole time again
                return self._send_once(method, url, authenticate, dict(headers or {}), kwargs)

        if attempts == 1:  # the usual call: no retry machinery (tenacity costs ~20-50 us a call)
            return once()
        retrying = Retrying(  # transport errors only (no status): an HTTP answer is the answer
            stop=stop_after_attempt(attempts),
            wait=wait_fixed(self._retry_wait),
            retry=retry_if_exception(lambda err: isinstance(err, RestError) and err.status is None),
            reraise=True,
        )
        return retrying(once)

    def _send_once(
        self, method: str, url: str, authenticate: bool, headers: dict[str, str], kwargs: dict[str, Any]
    ) -> httpx.Response:
        for attempt in (1, 2):
            if authenticate:
                headers["Authorization"] = f"Bearer {self._token or self._login()}"
            response = self._exchange(method, url, headers=headers, **kwargs)
            if authenticate and attempt == 1 and self._username is not None and self._stale(response):
                self._token = None
                continue
            return response
        raise AssertionError("unreachable")

    def _stale(self, response: httpx.Response) -> bool:
        """Whether ``response`` says the token is no longer good and a new login may help: 401 (expired,
        or none), or 403 for a token from a login (Airflow answers ``403 Invalid JWT token`` for a token
        signed with another secret, e.g. after an api-server restart with a new ``jwt_secret``)."""
        if response.status_code == 401:
            return True
        return response.status_code == 403 and self._token_from_login

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Call ``/api/v2{path}``; logs in (again on 401, or 403 for a token from a login) as needed.
        Raises :class:`RestError`."""
        return self.send(method, f"/api/v2{path}", **kwargs)

    def _where(self, method: str, path: str) -> str:
        """``METHOD URL`` of a call to ``/api/v2{path}``, for messages."""
        return f"{method} {shown_url(self.base_url, '/api/v2' + path)}"

    def _answer(self, response: httpx.Response, method: str, path: str) -> dict[str, Any]:
        """The JSON object ``response`` holds (see :func:`decode_json`)."""
        return dict(decode_json(response, self._where(method, path), dict, self._secrets()))

    def _json(
        self, method: str, path: str, ok: Iterable[int] = (200,), empty: bool = False, **kwargs: Any
    ) -> Any:
        """The JSON object answered to ``method /api/v2{path}`` (None for an empty answer when
        ``empty``). :raises RestError: another status, or an answer that is not a JSON object."""
        response = self.request(method, path, **kwargs)
        if response.status_code not in set(ok):
            detail = excerpt(response.text, self._secrets(), 200)
            raise RestError(
                f"{method} /api/v2{path}: HTTP {response.status_code} {detail}", response.status_code
            )
        if empty and not response.content:
            return None
        return self._answer(response, method, path)

    def _objects(self, page: Mapping[str, Any], key: str, where: str) -> list[dict[str, Any]]:
        """The list of objects under ``key`` of an answer (none when the key is missing).

        :raises RestError: not a list, or an item that is not an object."""
        items = page.get(key, [])
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            shown = excerpt(repr(items), self._secrets())
            raise RestError(f"{where}: expected a list of objects under {key!r}, got {shown}")
        return items

    # -- pools --------------------------------------------------------------------------------
    def get_pool(self, name: str) -> dict[str, Any] | None:
        """The pool as the REST API returns it, or None when it does not exist."""
        response = self.request("GET", f"/pools/{quote(name, safe='')}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RestError(f"GET /api/v2/pools/{name}: HTTP {response.status_code}", response.status_code)
        return self._answer(response, "GET", f"/pools/{quote(name, safe='')}")

    def set_pool(
        self, name: str, slots: int, description: str, include_deferred: bool = False
    ) -> dict[str, Any]:
        """Set the pool's size and description (full-body PATCH), creating the pool when missing."""
        body = {
            "name": name,
            "slots": int(slots),
            "description": description,
            "include_deferred": include_deferred,
        }
        response = self.request("PATCH", f"/pools/{quote(name, safe='')}", json=body)
        if response.status_code == 404:
            return dict(self._json("POST", "/pools", ok=(200, 201), json=body))
        if response.status_code != 200:
            raise RestError(f"PATCH /api/v2/pools/{name}: HTTP {response.status_code}", response.status_code)
        return self._answer(response, "PATCH", f"/pools/{quote(name, safe='')}")

    # -- lists --------------------------------------------------------------------------------
    def pages(
        self, path: str, key: str, params: Iterable[tuple[str, str | int]] = ()
    ) -> list[dict[str, Any]]:
        """Every item of a paginated list endpoint ``/api/v2{path}`` (the items are under ``key``),
        page by page: until ``total_entries`` items were read (or a page is empty), or, when the answer
        has no ``total_entries``, until a page shorter than asked for."""
        found: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = self._json("GET", path, params=[*params, ("limit", PAGE), ("offset", offset)])
            items = page.get(key, [])
            if not isinstance(items, list):
                shown = excerpt(repr(items), self._secrets())
                raise RestError(f"{self._where('GET', path)}: the answer has no list {key!r}: {shown}")
            found.extend(items)
            if len(found) > MAX_ITEMS:
                raise RestError(f"GET /api/v2{path}: more than {MAX_ITEMS} items; refusing to page further")
            offset += len(items)
            total = page.get("total_entries")
            if not items:
                return found
            if isinstance(total, int) and not isinstance(total, bool):
                # The server may cap the page below PAGE ([api] maximum_page_limit, 50 say): a short
                # page is not the last one while the total says more are left.
                if offset >= total:
                    return found
            elif len(items) < PAGE:
                return found

    # -- task instances -----------------------------------------------------------------------
    def _task_instance_pages(self, path: str, params: list[tuple[str, str | int]]) -> list[dict[str, Any]]:
        """Every task instance a task-instance list endpoint returns, page by page."""
        return self.pages(path, "task_instances", params)

    def task_instances(self, pools: Iterable[str], states: Iterable[str]) -> list[dict[str, Any]]:
        """All task instances in ``pools`` with one of ``states``, across DAGs and runs (paginated)."""
        params: list[tuple[str, str | int]] = [("pool", p) for p in pools]
        params += [("state", s) for s in states]
        return self._task_instance_pages("/dags/~/dagRuns/~/taskInstances", params)

    def run_task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of one DAG run, any state (paginated)."""
        path = f"/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}/taskInstances"
        return self._task_instance_pages(path, [])

    def upstream_task_ids(self, dag_id: str) -> dict[str, list[str]]:
        """task id -> its upstream task ids, from the DAG's tasks (``downstream_task_ids``)."""
        upstream: dict[str, list[str]] = {}
        for task in self.dag_tasks(dag_id):
            downstream = task.get("downstream_task_ids") or []
            if not isinstance(downstream, list):
                where = self._where("GET", f"/dags/{quote(dag_id, safe='')}/tasks")
                raise RestError(f"{where}: downstream_task_ids of {task['task_id']!r} is not a list")
            upstream.setdefault(str(task["task_id"]), [])
            for down in downstream:
                upstream.setdefault(str(down), []).append(str(task["task_id"]))
        return upstream

    def dag_tasks(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's tasks as ``GET /dags/{dag_id}/tasks`` returns them (``task_id``, ``is_mapped``,
        ``downstream_task_ids``, ``pool_slots``, ...)."""
        path = f"/dags/{quote(dag_id, safe='')}/tasks"
        tasks = self._objects(self._json("GET", path), "tasks", self._where("GET", path))
        if not all("task_id" in task for task in tasks):
            raise RestError(f"{self._where('GET', path)}: a task without a task_id")
        return tasks

    def task_history(
        self, dag_id: str, task_id: str, limit: int = 40, states: Iterable[str] = ("success",)
    ) -> list[dict[str, Any]]:
        """The latest task instances of one task over all runs of its DAG (every map index), most
        recent end first, at most ``limit`` (one page, <= 100): the history durations are learned from."""
        params: list[tuple[str, str | int]] = [("task_id", task_id), *(("state", s) for s in states)]
        params += [("order_by", "-end_date"), ("limit", max(1, min(int(limit), PAGE))), ("offset", 0)]
        path = f"/dags/{quote(dag_id, safe='')}/dagRuns/~/taskInstances"
        page = self._json("GET", path, params=params)
        return self._objects(page, "task_instances", self._where("GET", path))

    def recent_runs(self, dag_id: str, limit: int = 5) -> list[dict[str, Any]]:
        """The DAG's latest runs (newest first, at most ``limit``)."""
        params: list[tuple[str, str | int]] = [
            ("order_by", "-run_after"),
            ("limit", max(1, min(limit, PAGE))),
        ]
        path = f"/dags/{quote(dag_id, safe='')}/dagRuns"
        return self._objects(self._json("GET", path, params=params), "dag_runs", self._where("GET", path))

    def map_counts(self, dag_id: str, task_id: str, runs: int = 5) -> list[int]:
        """How many instances the mapped task ``task_id`` had in each of the DAG's latest ``runs``
        runs where it was expanded (newest first; instances marked ``removed`` do not count)."""
        counts: list[int] = []
        # more runs than asked: the newest may not have expanded the task yet (queued, running)
        for run in self.recent_runs(dag_id, runs * 4):
            run_id = str(run.get("dag_run_id"))
            path = f"/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}/taskInstances"
            tis = self._task_instance_pages(path, [("task_id", task_id)])
            count = sum(1 for ti in tis if _map_index(ti) >= 0 and ti.get("state") != "removed")
            if count:
                counts.append(count)
                if len(counts) >= runs:
                    break
        return counts

    def set_task_instance_state(
        self, dag_id: str, run_id: str, task_id: str, map_index: int, state: str, note: str | None = None
    ) -> list[dict[str, Any]]:
        """Set a task instance's state (``failed``, ``success`` or ``skipped``) with an optional note
        (at most 1,000 characters, shown in the UI); returns the task instances changed."""
        path = f"/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}/taskInstances/"
        path += quote(task_id, safe="") + (f"/{int(map_index)}" if int(map_index) >= 0 else "")
        body: dict[str, Any] = {"new_state": state}
        if note is not None:
            body["note"] = note[:1000]
        answer = self._json("PATCH", path, empty=True, json=body)
        return self._objects(answer or {}, "task_instances", self._where("PATCH", path))

    # -- variables (lease) --------------------------------------------------------------------
    def get_variable(self, key: str) -> str | None:
        """A Variable's value, or None when it does not exist."""
        response = self.request("GET", f"/variables/{quote(key, safe='')}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RestError(f"GET /api/v2/variables/{key}: HTTP {response.status_code}", response.status_code)
        answer = self._answer(response, "GET", f"/variables/{quote(key, safe='')}")
        value = answer.get("value")
        if not isinstance(value, str):  # {} from a proxy: no value is not the text "None"
            raise RestError(f"GET /api/v2/variables/{key}: the answer has no value ({excerpt(str(answer))})")
        return value

    def create_variable(self, key: str, value: str, description: str = "") -> bool:
        """Create a Variable; False when it already exists (409)."""
        body = {"key": key, "value": value, "description": description}
        response = self.request("POST", "/variables", json=body)
        if response.status_code == 409:
            return False
        if response.status_code not in (200, 201):
            raise RestError(f"POST /api/v2/variables: HTTP {response.status_code}", response.status_code)
        return True

    def put_variable(self, key: str, value: str, description: str = "") -> None:
        """Overwrite a Variable (full-body PATCH)."""
        body = {"key": key, "value": value, "description": description}
        self._json("PATCH", f"/variables/{quote(key, safe='')}", empty=True, json=body)
