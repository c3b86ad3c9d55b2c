"""The routes of the Critical path page's per-run live view (added to the page's app by
:func:`add_live_routes`):

* ``GET /gpu-dag/critical-path/{dag_id}/runs/{run_id}``: one run's live view (``~``: the DAG's latest
  run), the plan against what happened and why each GPU task waits
  (:func:`~airflow_gpu_dag.plugins.critical_path_page.live.render_live`);
* ``GET /gpu-dag/api/live/{dag_id}/{run_id}``: its data, the report of ``airflow gpu-dag explain``.

Both need read access to the DAG. The report is read from this api-server's own REST API
(``[api] base_url``) with the viewer's token, so the view shows exactly what the viewer may read there.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.configuration import conf
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse

from airflow_gpu_dag.cli.explain_report import (
    EXIT_API,
    EXIT_NOT_FOUND,
    EXIT_NOT_PROVIDER,
    ExplainError,
    build_report,
)
from airflow_gpu_dag.core.policy.objective import ReservationGate
from airflow_gpu_dag.hooks.rest_client import AirflowRestClient
from airflow_gpu_dag.plugins.critical_path_page.live import render_live
from airflow_gpu_dag.settings import default_duration_seconds, key_epoch, objective
from airflow_gpu_dag.watermark.durations import ControllerHistory

__all__ = ["add_live_routes", "live_report"]

#: An explain error's exit code -> the HTTP status of the live view.
_LIVE_STATUS = {EXIT_NOT_FOUND: 404, EXIT_NOT_PROVIDER: 422, EXIT_API: 502}


def viewer_token(request: Request) -> str:
    """The JWT the viewer came with: the ``Authorization: Bearer`` header, else the UI's ``_token``
    cookie (the tab's iframe sends it)."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.cookies.get("_token", "")


def own_api(request: Request) -> AirflowRestClient:
    """A REST client of this api-server (``[api] base_url``, else ``[api] host`` and ``port``) that acts
    as the viewer."""
    base = conf.get("api", "base_url", fallback="") or (
        f"http://{_reachable(conf.get('api', 'host', fallback='localhost'))}"
        f":{conf.get('api', 'port', fallback='8080')}"
    )
    return AirflowRestClient(base.rstrip("/"), token=viewer_token(request), timeout=30.0)


def _reachable(host: str) -> str:
    """``[api] host`` as a URL host this process can call: a wildcard bind address (``0.0.0.0``,
    ``::``) is the loopback one, and an IPv6 address is bracketed."""
    host = host.strip() or "localhost"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host
    if address.is_unspecified:
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    return f"[{address}]" if address.version == 6 else str(address)


def live_report(dag_id: str, run_id: str, request: Request) -> dict[str, Any]:
    """The explain report of one run (``~``: the latest); an explain error becomes its HTTP status
    (unknown DAG or run 404, a DAG not on the provider 422, the REST API unreachable 502)."""
    client = own_api(request)
    try:
        return build_report(
            client,
            dag_id,
            None if run_id == "~" else run_id,
            history=ControllerHistory(client, default_duration_seconds()),
            gate=ReservationGate.for_objective(objective(), key_epoch()),
            epoch=key_epoch(),
        )
    except ExplainError as err:
        raise HTTPException(_LIVE_STATUS.get(err.code, 500), str(err)) from None
    finally:
        client.close()


def add_live_routes(app: FastAPI) -> None:
    """Add the live view's page and data routes to the Critical path page's ``app``."""

    @app.get(
        "/critical-path/{dag_id}/runs/{run_id}",
        response_class=HTMLResponse,
        dependencies=[Depends(requires_access_dag(method="GET"))],
    )
    def live_page(dag_id: str, run_id: str, request: Request) -> HTMLResponse:
        return HTMLResponse(render_live(live_report(dag_id, run_id, request)))

    @app.get("/api/live/{dag_id}/{run_id}", dependencies=[Depends(requires_access_dag(method="GET"))])
    def live_data(dag_id: str, run_id: str, request: Request) -> dict[str, Any]:
        return live_report(dag_id, run_id, request)
