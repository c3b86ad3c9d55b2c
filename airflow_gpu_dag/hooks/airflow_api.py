"""A hook that reads Airflow REST API credentials from an Airflow connection.

Connection ``gpu_dag_api`` (the default; any conn id works): ``host`` is the api-server base URL
(``http://airflow-api:8080``; a bare host name gets ``http://`` and the connection's ``port``),
``login``/``password`` are exchanged for a bearer token via ``POST /auth/token``; alternatively
``extra`` may hold ``{"token": "..."}``. Example::

    airflow connections add gpu_dag_api --conn-type http \\
        --conn-host http://localhost:8080 --conn-login admin --conn-password '...'

or ``AIRFLOW_CONN_GPU_DAG_API='http://admin:secret@localhost:8080'``.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_gpu_dag.hooks.rest_client import AirflowRestClient

__all__ = ["DEFAULT_CONN_ID", "AirflowApiHook", "base_url_of"]

DEFAULT_CONN_ID = "gpu_dag_api"


def base_url_of(
    host: str | None, port: int | None, schema: str | None = None, conn_type: str | None = None
) -> str:
    """The api-server base URL from a connection's fields.

    :raises ValueError: the connection has no host.
    """
    if not host:
        raise ValueError(
            "the connection has no host: set it to the api-server URL, e.g. http://localhost:8080"
        )
    if "://" in host:
        url = host.rstrip("/")
        if port and url.count(":") == 1:
            url = f"{url}:{port}"
        return url
    scheme = "https" if (conn_type or "").lower() == "https" or schema == "https" else "http"
    return f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"


class AirflowApiHook(BaseHook):
    """Build an :class:`AirflowRestClient` for the Airflow REST API from a connection."""

    conn_name_attr = "conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "http"
    hook_name = "Airflow REST API (gpu-dag)"

    def __init__(self, conn_id: str = DEFAULT_CONN_ID, timeout: float = 10.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id
        self.timeout = timeout

    def get_client(self) -> AirflowRestClient:
        """An authenticated client; the password/token stay inside it (never logged)."""
        conn = self.get_connection(self.conn_id)
        try:
            url = base_url_of(conn.host, conn.port, conn.schema, conn.conn_type)
        except ValueError as err:
            raise ValueError(f"connection {self.conn_id!r}: {err}") from None
        token = None
        extra = conn.extra_dejson if conn.extra else {}
        if isinstance(extra, dict):
            token = extra.get("token")
        return AirflowRestClient(
            url, username=conn.login, password=conn.password, token=token, timeout=self.timeout
        )

    def get_conn(self) -> AirflowRestClient:
        """Alias of :meth:`get_client` (the BaseHook contract)."""
        return self.get_client()
