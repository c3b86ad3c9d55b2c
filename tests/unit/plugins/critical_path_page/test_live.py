"""The Critical path page's per-run live view: the plan's Gantt with the actual bars over it, the waiting
tasks with their reason and predicted start, reloading while the run is live; and its routes."""

from __future__ import annotations

import re
from typing import Any
from xml.etree import ElementTree

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


# -- gantt_svg and render_live on hand-made reports ------------------------------------------------------
def _task(name: str, **fields: Any) -> dict[str, Any]:
    return {"task": f"d/r/{name}/-1", "task_id": name, "map_index": -1, **fields}


def _report(**fields: Any) -> dict[str, Any]:
    return {"now": 1000.0, "dag_id": "d", "run_id": "r", "run_state": "running", **fields}


def test_an_empty_chart_has_its_now_line_and_a_one_second_axis() -> None:
    svg = gantt_svg([], 500.0, 500.0)
    assert '<line class="now" x1="260.0" y1="18" x2="260.0" y2="34"/>' in svg
    assert ">+0s</text>" in svg and ">+1s</text>" in svg
    assert "<rect" not in svg
    ElementTree.fromstring(svg)


def test_the_axis_spans_from_the_origin_to_the_latest_time_of_any_bar() -> None:
    tasks = [
        _task("a", planned_start=0.0, planned_end=600.0),
        _task("b", predicted_start=0.0, predicted_end=3600.0),
    ]
    svg = gantt_svg(tasks, 0.0, 60.0)
    assert 'text-anchor="end">+1h00m</text>' in svg
    # the predicted bar reaches the right edge of the chart
    ((x, width),) = _bars(svg, "predicted").values()
    assert x == 260.0 and x + width == pytest.approx(260 + 760)


def test_rows_are_one_per_task_in_the_order_given() -> None:
    tasks = [_task(n, planned_start=0.0, planned_end=10.0) for n in ("c", "a", "b")]
    svg = gantt_svg(tasks, 0.0, 10.0)
    assert re.findall(r'<text class="label"[^>]*>([^<]+)</text>', svg) == ["c", "a", "b"]
    assert re.findall(r'class="planned" data-task="[^"]+" x="[\d.]+" y="(\d+)"', svg) == ["26", "48", "70"]
    assert f'height="{24 + 3 * 22 + 10}"' in svg


@pytest.mark.parametrize(
    ("map_index", "label"), [(-1, "fit"), (0, "fit[0]"), (12, "fit[12]"), ("3", "fit"), (None, "fit")]
)
def test_a_mapped_instance_is_labelled_with_its_index(map_index: object, label: str) -> None:
    svg = gantt_svg([{"task": "d/r/fit/x", "task_id": "fit", "map_index": map_index}], 0.0, 1.0)
    assert re.findall(r'<text class="label"[^>]*>([^<]+)</text>', svg) == [label]


def test_a_running_task_is_drawn_up_to_now_and_a_finished_one_up_to_its_end() -> None:
    tasks = [_task("run", state="running", start=100.0), _task("done", state="success", start=0.0, end=50.0)]
    bars = _bars(gantt_svg(tasks, 0.0, 200.0), "actual")
    scale = 760 / 200
    assert bars["d/r/run/-1"] == (pytest.approx(260 + 100 * scale), pytest.approx(100 * scale))
    assert bars["d/r/done/-1"] == (260.0, pytest.approx(50 * scale))


def test_a_task_started_after_now_by_clock_skew_gets_a_thin_bar_at_its_start() -> None:
    """The api-server's clock behind the worker's: a start in the future must not give a negative width."""
    svg = gantt_svg([_task("skewed", state="running", start=120.0)], 0.0, 100.0)
    ((x, width),) = _bars(svg, "actual").values()
    assert width == 1.0 and x == pytest.approx(260 + 760)


def test_what_is_half_known_is_not_drawn() -> None:
    """A plan bar needs both ends, a predicted bar too; the row and its label stay."""
    tasks = [
        _task("half_plan", planned_start=0.0, planned_end=None),
        _task("half_guess", predicted_start=10.0, predicted_end=None),
        _task("unknown"),
    ]
    svg = gantt_svg(tasks, 0.0, 60.0)
    assert "<rect" not in svg
    assert len(re.findall('<text class="label"', svg)) == 3


def test_the_state_class_and_titles_are_escaped() -> None:
    tasks = [_task('x"y', state='failed" onmouseover="alert(1)', start=0.0, end=5.0)]
    svg = gantt_svg(tasks, 0.0, 10.0)
    root = ElementTree.fromstring(svg)
    (bar,) = [el for el in root.iter("{http://www.w3.org/2000/svg}rect")]
    assert bar.get("class") == 'actual failed" onmouseover="alert(1)'
    assert bar.get("onmouseover") is None and bar.get("data-task") == 'd/r/x"y/-1'


def test_a_time_no_date_can_be_is_drawn_not_raised() -> None:
    """A huge or corrupt time in the report (``iso_time`` says "epoch ..." for it) must not fail the view."""
    page = render_live(
        _report(tasks=[_task("far", state="scheduled", predicted_start=1e20, predicted_end=1e20)])
    )
    assert "epoch 1e+20" in page


@pytest.mark.parametrize(
    ("state", "reloads"),
    [("queued", True), ("running", True), ("success", False), ("failed", False), (None, False)],
)
def test_only_a_queued_or_running_run_reloads_itself(state: str | None, reloads: bool) -> None:
    page = render_live(_report(run_state=state), refresh_s=30)
    assert ('<meta http-equiv="refresh" content="30">' in page) is reloads
    assert ("refreshed every 30 s" in page) is reloads


def test_a_run_without_tasks_is_drawn_from_now_and_says_nothing_waits() -> None:
    page = render_live(_report())
    assert '<p id="waiting">No GPU task of this run is waiting.</p>' in page
    assert "As of 1970-01-01T00:16:40Z" in page
    assert 'id="plan-error"' not in page


def test_the_waiting_table_lists_only_tasks_not_yet_holding_slots_nor_done() -> None:
    tasks = [
        _task("holding", state="running", start=900.0, reason={"code": "running", "text": "holds 2"}),
        _task("queued", state="queued", reason={"code": "queued", "text": "holds 1"}),
        _task("done", state="success", start=0.0, end=10.0, start_error_s=3.0),
        _task(
            "wide",
            state="scheduled",
            rank=2,
            reason={"code": "reserved", "text": "4 slots are held for it"},
            predicted_start=1093.0,
        ),
        _task("blocked", state="none", reason=None),
    ]
    page = render_live(_report(tasks=tasks))
    table = page.split('<table id="waiting">')[1].split("</table>")[0]
    assert re.findall(r"<tr><td>([^<]+)</td>", table) == ["d/r/wide/-1", "d/r/blocked/-1"]
    assert 'data-code="reserved">4 slots are held for it</td>' in table
    assert "(+93s)" in table and "<td>2</td>" in table
    assert '<td class="reason" data-code="-">-</td><td class="predicted-start">-</td>' in table


def test_every_text_from_the_report_is_escaped() -> None:
    evil = "<script>x</script>"
    page = render_live(
        _report(
            dag_id=evil,
            run_id=f"manual__{evil}",
            warnings=[evil],
            controller={evil: {"capacity": evil, "status": evil, "decision": {"code": evil}}},
            tasks=[_task("t", state="scheduled", reason={"code": f'"{evil}', "text": evil})],
        )
    )
    assert "<script>" not in page
    assert page.count("&lt;script&gt;x&lt;/script&gt;") >= 8


def test_the_pools_show_capacity_status_and_the_latest_decision_when_there_is_one() -> None:
    page = render_live(
        _report(
            controller={
                "gpu_a": {"capacity": 8, "status": "running", "decision": {"code": "reserving"}},
                "gpu_b": {"capacity": None, "status": "stopped", "decision": None},
            }
        )
    )
    assert "<li>pool gpu_a: capacity 8, controller running, latest decision reserving</li>" in page
    assert "<li>pool gpu_b: capacity -, controller stopped</li>" in page


@pytest.mark.parametrize("error", [None, {}, {"tasks": 0, "start_error_s": {}, "end_error_s": {}}])
def test_no_plan_error_summary_without_compared_tasks(error: Any) -> None:
    assert 'id="plan-error"' not in render_live(_report(run_state="success", plan_error=error))


def test_the_plan_error_summary_rounds_to_seconds() -> None:
    error = {
        "tasks": 3,
        "start_error_s": {"median": 1.4, "p90": 59.6},
        "end_error_s": {"median": 0.0, "p90": 2.5},
    }
    page = render_live(_report(run_state="success", plan_error=error))
    assert "over 3 GPU task(s): start error median 1s, p90 60s; end error median 0s, p90 2s." in page
