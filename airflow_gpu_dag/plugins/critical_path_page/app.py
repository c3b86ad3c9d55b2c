"""The FastAPI app behind the "Critical path" tab, mounted by the api-server at ``/gpu-dag``.

Routes (all behind Airflow's authentication and authorization; plugin apps are open otherwise):

* ``GET /gpu-dag/critical-path/{dag_id}``: the page (needs read access to the DAG);
* ``GET /gpu-dag/api/plan/{dag_id}``: the plan and predicted schedules as JSON (same access);
* ``GET /gpu-dag/api/pools``: the live pools as JSON (needs read access to pools);
* one run's live view and its data (:mod:`.live_routes`);
* ``GET /gpu-dag/static/...``: the page's CSS and JS (no data).

The user is the one of the api-server's JWT: the ``Authorization: Bearer`` header, or the ``_token``
cookie the Airflow UI sets at login, which the browser sends with the tab's iframe request (same
origin). An anonymous request gets 401, a user without access to the DAG 403.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import airflow.api_fastapi.app as airflow_app
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag, requires_access_pool
from airflow.models.pool import Pool
from airflow.models.serialized_dag import SerializedDagModel
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy import select

from airflow_gpu_dag.airflow.history import learned_task_graph
from airflow_gpu_dag.core.model.graph import task_pool
from airflow_gpu_dag.core.planning.plan import Plan
from airflow_gpu_dag.plugins.critical_path_page.data import (
    PoolView,
    ScheduleView,
    plan_of,
    pool_views,
    predicted_schedules,
    rule_uses_of_serialized,
    weight_rule_notes,
)
from airflow_gpu_dag.plugins.critical_path_page.live_routes import add_live_routes
from airflow_gpu_dag.plugins.critical_path_page.page_html import render_page
from airflow_gpu_dag.priority.weights import policy_text
from airflow_gpu_dag.settings import estimate_settings

log = logging.getLogger(__name__)

__all__ = ["URL_PREFIX", "create_app"]

#: Where the api-server mounts the app.
URL_PREFIX = "/gpu-dag"
_STATIC = Path(__file__).parent / "static"


def _load(dag_id: str, session: Any) -> tuple[Any, Plan, Any]:
    """The serialized DAG's task graph (durations learned from past runs, mapped tasks expanded), its
    plan and the :class:`~airflow_gpu_dag.airflow.history.LearnedGraph`; 404 when the DAG is unknown."""
    dag = SerializedDagModel.get_dag(dag_id, session=session)
    if dag is None:
        raise HTTPException(404, f"DAG {dag_id!r} not found (not parsed yet, or removed).")
    learned = learned_task_graph(dag, session=session)
    graph = learned.graph
    cycle = graph.find_cycle()
    if cycle:
        raise HTTPException(422, f"DAG {dag_id!r} has a dependency cycle: {' -> '.join(cycle)}")
    return graph, replace(plan_of(graph, learned.findings), policy=policy_text(graph)), learned


def _pools(session: Any, dag_pools: set[str], user: Any) -> list[PoolView]:
    """The pools ``user`` may read, as Airflow's own pools API filters them (per team with
    ``[core] multi_team``: another team's pools, and the DAG and task ids in their descriptions, are
    not shown)."""
    readable = airflow_app.get_auth_manager().get_authorized_pools(user=user, method="GET", session=session)
    stats = {name: dict(stat) for name, stat in Pool.slots_stats(session=session).items() if name in readable}
    descriptions = dict(session.execute(select(Pool.pool, Pool.description)).all())
    return pool_views(stats, descriptions, dag_pools)


def _weight_rule_notes(dag_id: str, session: Any, user: Any) -> list[str]:
    """The DAGs whose weights cannot be compared with those sharing this DAG's GPU pools, among the DAGs
    ``user`` may read (no other DAG is named)."""
    try:
        readable = airflow_app.get_auth_manager().get_authorized_dag_ids(
            user=user, method="GET", session=session
        )
        rows = SerializedDagModel.get_latest_serialized_dags(
            dag_ids=sorted(readable | {dag_id}), session=session
        )
        uses = [use for row in rows for use in rule_uses_of_serialized(row.dag_id, row.data)]
    except Exception:
        log.exception("airflow-gpu-dag: cannot read the weight rules of the DAGs sharing %r's pools", dag_id)
        return []
    return weight_rule_notes(dag_id, uses)


def _may_read_pools(user: Any) -> bool:
    try:
        return bool(airflow_app.get_auth_manager().is_authorized_pool(method="GET", user=user))
    except Exception:
        log.exception("airflow-gpu-dag: pool authorization check failed")
        return False


def _flag_factor() -> float:
    return estimate_settings().flag_factor


def _sources(graph: Any) -> dict[str, str]:
    """Per task, where the plan's duration comes from (``learned``/``declared``/``default``)."""
    return {
        task_id: str(node.attrs["duration_source"])
        for task_id, node in graph.nodes.items()
        if node.attrs.get("duration_source")
    }


def _schedules(graph: Any, pools: list[PoolView] | None) -> ScheduleView:
    if pools is None:
        return ScheduleView(note="No access to pools, so no simulation on them.")
    return predicted_schedules(graph, pools)


def create_app() -> FastAPI:
    """Build the app (one per api-server process)."""
    app = FastAPI(
        title="airflow-gpu-dag: critical path",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.mount("/static", StaticFiles(directory=str(_STATIC)), name="static")

    @app.get(
        "/critical-path/{dag_id}",
        response_class=HTMLResponse,
        dependencies=[Depends(requires_access_dag(method="GET"))],
    )
    def critical_path_page(dag_id: str, session: SessionDep, user: GetUserDep) -> HTMLResponse:
        graph, plan, learned = _load(dag_id, session)
        dag_pools = {task_pool(node) for node in graph.nodes.values()}
        pools = _pools(session, dag_pools, user) if _may_read_pools(user) else None
        body = render_page(
            plan,
            _schedules(graph, pools),
            pools,
            "../static",
            "../api/pools?" + urlencode([("pool", name) for name in sorted(dag_pools)]),
            estimates=learned.estimates,
            flag_factor=_flag_factor(),
            history_note=learned.note,
            sources=_sources(graph),
            weight_rules=_weight_rule_notes(dag_id, session, user),
        )
        return HTMLResponse(body)

    @app.get("/api/plan/{dag_id}", dependencies=[Depends(requires_access_dag(method="GET"))])
    def plan_data(dag_id: str, session: SessionDep, user: GetUserDep) -> dict[str, Any]:
        graph, plan, learned = _load(dag_id, session)
        dag_pools = {task_pool(node) for node in graph.nodes.values()}
        pools = _pools(session, dag_pools, user) if _may_read_pools(user) else None
        schedules = _schedules(graph, pools)
        factor = _flag_factor()
        return {
            **plan.to_dict(graph),  # the JSON of `airflow gpu-dag plan -o json`
            "estimates": {
                task_id: {**e.to_dict(), "flagged": e.off_by(factor)}
                for task_id, e in learned.estimates.items()
            },
            "history_note": learned.note,
            "map_counts": learned.map_counts,
            "incomparable_weight_rules": _weight_rule_notes(dag_id, session, user),
            "predicted": {
                "capacity": schedules.capacity,
                "note": schedules.note,
                "unfit_rungs": schedules.unfit_rungs,
                # as `simulate -o json`: which admission and priority rule each assumes, the schedule
                "results": {label: r.to_dict() for label, r in schedules.results.items()},
            },
        }

    @app.get("/api/pools", dependencies=[Depends(requires_access_pool(method="GET"))])
    def pools_data(
        session: SessionDep, user: GetUserDep, pool: Annotated[list[str] | None, Query()] = None
    ) -> dict[str, Any]:
        """``?pool=a&pool=b``: the pools a DAG uses, listed first (as on the page)."""
        return {"pools": [p.to_dict() for p in _pools(session, set(pool or ()), user)]}

    add_live_routes(app)  # one run's live view (live_routes.py)
    return app
