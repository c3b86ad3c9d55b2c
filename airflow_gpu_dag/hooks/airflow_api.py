"""A hook, and the ``gpu_dag_api`` connection type, for the Airflow REST API credentials.

The watermark controller (``airflow gpu-dag watermark``) reads the api-server URL and credentials
from the connection ``gpu_dag_api`` (the default; ``--conn-id`` picks another):

- ``host``: the api-server base URL, ``http://airflow-api-server:8080`` (a bare host name gets
  ``http://`` and the connection's ``port``), with the path prefix of a reverse proxy if any
  (``https://gw.example.com/airflow``; a trailing ``/api/v2`` is dropped: the client adds it);
- ``login``/``password``: exchanged for a bearer token via ``POST /auth/token``;
- extra ``token``: a ready bearer token instead of a login; extra ``timeout``: seconds one call may
  take in all (connecting, logging in, reading the whole answer), however slowly the server answers.

Examples::

    airflow connections add gpu_dag_api --conn-type gpu_dag_api \\
        --conn-host http://localhost:8080 --conn-login admin --conn-password '...'

    AIRFLOW_CONN_GPU_DAG_API='gpu-dag-api://admin:secret@localhost:8080'
    AIRFLOW_CONN_GPU_DAG_API='gpu-dag-api://https://admin:secret@airflow.example.com'

URIs of the generic ``http``/``https`` type (``AIRFLOW_CONN_GPU_DAG_API='http://admin:secret@localhost:8080'``)
keep working for the controller; the typed connection adds the form in the UI and the *Test* button
(:meth:`AirflowApiHook.test_connection`). See docs/connections.md.
"""

from __future__ import annotations

import ipaddress
import math
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from airflow.sdk import BaseHook

from airflow_gpu_dag.hooks.connection_types import AIRFLOW_API_CONNECTION_TYPE
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient, RestError, decode_json, mask

__all__ = ["CONN_TYPE", "DEFAULT_CONN_ID", "HEALTH_PATH", "AirflowApiHook", "base_url_of"]

DEFAULT_CONN_ID = "gpu_dag_api"
#: The connection type registered in provider info (``connection-types``).
CONN_TYPE: str = AIRFLOW_API_CONNECTION_TYPE["connection-type"]
#: The api-server's health endpoint (no login needed): metadatabase, scheduler, triggerer, dag-processor.
HEALTH_PATH = "/api/v2/monitor/health"
#: What ``test_connection`` reads with the credentials: the controller's own first call.
POOLS_PROBE_PATH = "/api/v2/pools"
DEFAULT_TIMEOUT = 10.0


def base_url_of(
    host: str | None, port: int | None, schema: str | None = None, conn_type: str | None = None
) -> str:
    """The api-server base URL from a connection's fields.

    ``host`` may be a full URL (``https://airflow.example.com``) or a bare host name (``http://``
    unless the connection type or ``schema`` is ``https``), either with a path prefix
    (``https://gw.example.com/airflow``: an api-server behind a reverse proxy). ``port`` goes into
    the URL's network location (``https://gw.example.com:8443/airflow``) when the host names none.
    A trailing ``/api/v2`` is dropped: the client puts it before every call. ``schema`` other than
    ``http``/``https`` is a path prefix when ``host`` has none: a URI
    ``gpu-dag-api://user:pass@gw.example.com:8443/airflow`` puts ``airflow`` there. An IPv6 address
    may come without its brackets (``::1``, as Airflow reads ``gpu-dag-api://u:p@[::1]:8080``).

    :raises ValueError: the connection has no host, or a port that is not a number.
    """
    if not host or not host.strip():
        raise ValueError(
            "the connection has no host: set it to the api-server URL, e.g. http://localhost:8080"
        )
    host = host.strip()
    if "://" not in host:
        scheme = "https" if (conn_type or "").lower() == "https" or schema == "https" else "http"
        host = f"{scheme}://{host}"
    parts = urlsplit(_bracket_ipv6(host))
    try:
        has_port = parts.port is not None
    except ValueError:
        shown = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))  # no user:password@
        raise ValueError(
            f"the connection's host {shown!r} has a port that is not a number; set the api-server URL, "
            "e.g. http://localhost:8080"
        ) from None
    netloc = f"{parts.netloc}:{int(port)}" if port and not has_port else parts.netloc
    path = parts.path.rstrip("/")
    prefix = (schema or "").strip().strip("/")
    if not path and prefix and prefix.lower() not in ("http", "https"):
        path = "/" + prefix
    if path.endswith("/api/v2"):
        path = path[: -len("/api/v2")].rstrip("/")
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


def _bracket_ipv6(url: str) -> str:
    """``url`` with a bare IPv6 address in its network location put in brackets (``http://::1`` ->
    ``http://[::1]``): Airflow's URI parsing drops them (``gpu-dag-api://u:p@[::1]:8080`` has the
    host ``::1``), and without them the address's colons read as a port."""
    scheme, sep, rest = url.partition("://")
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    userinfo, at, address = rest[:end].rpartition("@")
    if address.count(":") < 2 or address.startswith("["):
        return url
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return url
    return f"{scheme}{sep}{userinfo}{at}[{address}]{rest[end:]}"


def _extra_field(extra: dict[str, Any], name: str) -> Any:
    """An extra field as the Airflow 3 UI stores it (``token``) or with the Airflow 2 form prefix."""
    value = extra.get(name)
    if value in (None, ""):
        value = extra.get(f"extra__{CONN_TYPE}__{name}")
    return None if value in (None, "") else value


class AirflowApiHook(BaseHook):
    """Build an :class:`~airflow_gpu_dag.hooks.rest_client.AirflowRestClient` for the Airflow REST API
    from a ``gpu_dag_api`` connection (or a generic ``http`` one).

    :param conn_id: the connection id (default ``gpu_dag_api``).
    :param timeout: seconds one REST call may take in all; None takes the connection's extra
        ``timeout``, else 10.
    """

    conn_name_attr = "conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Airflow REST API (gpu-dag)"

    def __init__(self, conn_id: str = DEFAULT_CONN_ID, timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id
        self.timeout = timeout

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form's behaviour (hidden fields, labels, placeholders) in the hook-method
        format of Airflow < 3.2, from the ``ui-field-behaviour`` the provider info declares
        (:data:`~airflow_gpu_dag.hooks.connection_types.AIRFLOW_API_CONNECTION_TYPE`). Airflow 3.2+
        reads the provider info itself and does not call this."""
        behaviour = AIRFLOW_API_CONNECTION_TYPE["ui-field-behaviour"]
        return {
            "hidden_fields": list(behaviour.get("hidden-fields", [])),
            "relabeling": dict(behaviour.get("relabeling", {})),
            "placeholders": dict(behaviour.get("placeholders", {})),
        }

    def get_client(self) -> AirflowRestClient:
        """An authenticated client; the password/token stay inside it (never logged).

        :raises ValueError: the connection has no host or a bad ``timeout``.
        """
        return self._client_for(self.get_connection(self.conn_id))

    def _client_for(self, conn: Any) -> AirflowRestClient:
        try:
            url = base_url_of(conn.host, conn.port, conn.schema, conn.conn_type)
        except ValueError as err:
            raise ValueError(f"connection {self.conn_id!r}: {err}") from None
        parts = urlsplit(url)
        if "@" in parts.netloc:
            # user:password@ in the host: httpx would send it as Basic auth in place of the bearer
            # token, and every message naming the URL would show the password (login/password fields)
            userinfo, _, netloc = parts.netloc.rpartition("@")
            mask(unquote(userinfo.partition(":")[2]))
            url = urlunsplit(parts._replace(netloc=netloc))
        extra = conn.extra_dejson if conn.extra else {}
        if not isinstance(extra, dict):
            extra = {}
        token = _extra_field(extra, "token")
        timeout = self.timeout if self.timeout is not None else _extra_field(extra, "timeout")
        try:
            seconds = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        except (TypeError, ValueError):
            seconds = -1.0
        if not 0 < seconds < math.inf:  # inf (no limit): every call would fail in httpx (OverflowError)
            raise ValueError(
                f"connection {self.conn_id!r}: timeout must be a number of seconds > 0, not {timeout!r}"
            )
        return AirflowRestClient(
            url,
            username=conn.login or None,
            password=conn.password,
            token=str(token) if token is not None else None,
            timeout=seconds,
        )

    def get_conn(self) -> AirflowRestClient:
        """Alias of :meth:`get_client` (the BaseHook contract)."""
        return self.get_client()

    def test_connection(self) -> tuple[bool, str]:
        """What the UI's *Test* button and ``POST /api/v2/connections/test`` run.

        Calls the api-server's health endpoint (``GET /api/v2/monitor/health``: reachable, metadata
        database healthy), then logs in and reads one page of pools, as the watermark controller
        does on its first tick. Never raises; the message names the URL and what failed, never the
        password or the token.

        :return: ``(True, "...")`` when the controller could work with this connection, else
            ``(False, reason)``.
        """
        try:
            conn = self.get_connection(self.conn_id)
            client = self._client_for(conn)
            login = conn.login or None
        except Exception as err:
            return False, str(err)
        try:
            return self._check(client, login)
        except RestError as err:
            if err.status in (400, 401, 403, 422) and "/auth/token" in str(err):
                return (
                    False,
                    f"{client.base_url}: login as {login!r} refused ({err}): check login and password",
                )
            return False, f"{client.base_url}: {err}"
        except Exception as err:  # a bad answer (not JSON, ...): say what, never raise
            return False, f"{client.base_url}: {type(err).__name__}: {err}"
        finally:
            client.close()

    @staticmethod
    def _check(client: AirflowRestClient, login: str | None) -> tuple[bool, str]:
        base = client.base_url
        health = client.send("GET", HEALTH_PATH, authenticate=False, retry=False)
        if health.status_code != 200:
            return False, (
                f"GET {base}{HEALTH_PATH}: HTTP {health.status_code}; is the host the api-server URL "
                "(Airflow 3), e.g. http://airflow-api-server:8080?"
            )
        body = decode_json(health, f"GET {base}{HEALTH_PATH}")
        states = {
            name: str(part.get("status"))
            for name, part in (body.items() if isinstance(body, dict) else ())
            if isinstance(part, dict) and part.get("status")
        }
        if "metadatabase" not in states:
            return False, f"GET {base}{HEALTH_PATH}: not an Airflow 3 health answer: {str(body)[:200]}"
        if states["metadatabase"] != "healthy":
            return False, f"{base}: the api-server's metadata database is {states['metadatabase']}"
        pools = client.send("GET", POOLS_PROBE_PATH, params={"limit": 1}, retry=False)
        if pools.status_code in (401, 403):
            who = f"user {login!r}" if login else "the token"
            verb = "is refused" if pools.status_code == 401 else "may not read pools"
            return False, f"GET {base}{POOLS_PROBE_PATH}: HTTP {pools.status_code}: {who} {verb}"
        if pools.status_code != 200:
            return False, f"GET {base}{POOLS_PROBE_PATH}: HTTP {pools.status_code}"
        parts = ", ".join(f"{name} {state}" for name, state in sorted(states.items()))
        return True, f"{base}: api-server healthy ({parts}); credentials can read pools"
