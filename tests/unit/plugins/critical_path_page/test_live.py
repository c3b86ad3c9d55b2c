"""The Critical path page's per-run live view: the plan's Gantt with the actual bars over it, the waiting
tasks with their reason and predicted start, reloading while the run is live; and its routes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi import HTTPException
from starlette.requests import Request

from airflow_gpu_dag.plugins.critical_path_page import app as page_app
from airflow_gpu_dag.plugins.critical_path_page import live_routes
from airflow_gpu_dag.plugins.critical_path_page.live import REFRESH_S, gantt_svg, render_live
from tests.unit.cli.conftest import (
    NOW,
    finished_state,
    report,
    reservation_state,
    tick,
)


def _bars(svg: str, kind: str) -> dict[str, tuple[float, float]]:
    found = re.findall(
        rf'<rect class="{kind}[^"]*" data-task="([^"]+)" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg
    )
    return {task: (float(x), float(width)) for task, x, width in found}


def _request(*headers: tuple[bytes, bytes]) -> Request:
    return Request({"type": "http", "headers": list(headers)})


def test_a_live_run_shows_plan_actual_and_predicted_bars_and_why_each_task_waits() -> None:
    api = reservation_state()
    tick(api, NOW - 2)
    page = render_live(report(api, "train"))
    assert f'<meta http-equiv="refresh" content="{REFRESH_S}">' in page  # the run is live: it reloads
    planned, actual, predicted = (_bars(page, kind) for kind in ("planned", "actual", "predicted"))
    assert set(planned) == {"train/t1/hold/-1", "train/t1/wide/-1"}
    assert set(actual) == {"train/t1/hold/-1"}  # running since NOW - 10: drawn up to now
    assert set(predicted) == {"train/t1/wide/-1"}
    # wide is predicted to start at NOW + 93, after hold's bar (which ends at now)
    assert predicted["train/t1/wide/-1"][0] > actual["train/t1/hold/-1"][0] + actual["train/t1/hold/-1"][1]
    assert 'class="now"' in page
    row = re.search(r"<tr><td>train/t1/wide/-1</td>.*?</tr>", page)
    assert row is not None
    assert 'data-code="reserved"' in row.group(0) and "4 slots of pool gpu are held for it" in row.group(0)
    assert "(+93s)" in row.group(0)  # its predicted start
    assert "train/t1/hold/-1</td>" not in page.split('id="waiting"')[1]  # running: not in the waiting table
    assert "controller running, latest decision reserving" in page


def test_a_finished_run_is_drawn_against_its_plan_and_does_not_reload() -> None:
    page = render_live(report(finished_state(), "pipe"))
    assert "http-equiv" not in page
    planned, actual = _bars(page, "planned"), _bars(page, "actual")
    assert set(planned) == set(actual) == {"pipe/p1/prep/-1", "pipe/p1/train/-1", "pipe/p1/eval/-1"}
    # train was planned to start at +60 and started at +120: its actual bar lies to the right of the plan
    assert actual["pipe/p1/train/-1"][0] > planned["pipe/p1/train/-1"][0]
    assert "No GPU task of this run is waiting." in page
    assert 'id="plan-error"' in page and "start error median 60s, p90 60s" in page


def test_the_chart_escapes_task_ids_and_keeps_bars_inside_it() -> None:
    tasks = [
        {
            "task": "d/r/<b>/-1",
            "task_id": "<b>",
            "map_index": 0,
            "state": "success",
            "start": 10.0,
            "end": 20.0,
            "planned_start": 0.0,
            "planned_end": 5.0,
        },
    ]
    svg = gantt_svg(tasks, 0.0, 30.0)
    assert "<b>" not in svg and "&lt;b&gt;[0]" in svg
    for x, width in _bars(svg, "actual").values():
        assert x >= 260 and x + width <= 260 + 760 + 0.5


def test_the_view_reads_the_rest_api_as_the_viewer_and_maps_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    assert live_routes.viewer_token(_request((b"authorization", b"Bearer abc"))) == "abc"
    assert live_routes.viewer_token(_request((b"cookie", b"_token=xyz"))) == "xyz"
    api = reservation_state()
    tick(api, NOW - 2)
    monkeypatch.setattr(live_routes, "own_api", lambda request: api)
    live = live_routes.live_report("evals", "~", _request())
    assert live["run_id"] == "e1" and any(t["task_id"] == "small" for t in live["tasks"])
    for dag_id, status in (("nope", 404),):
        with pytest.raises(HTTPException) as err:
            live_routes.live_report(dag_id, "~", _request())
        assert err.value.status_code == status
    api.dag("evals", {"small": ["report"], "report": []}, rule="downstream")
    with pytest.raises(HTTPException) as err:
        live_routes.live_report("evals", "e1", _request())
    assert err.value.status_code == 422 and "weight rule" in str(err.value.detail)


def test_anonymous_requests_to_the_live_view_are_refused() -> None:
    from fastapi.testclient import TestClient

    client = TestClient(page_app.create_app())
    for path in ("/critical-path/d/runs/~", "/api/live/d/r"):
        resp: Any = client.get(path)
        assert resp.status_code == 401, (path, resp.text)
