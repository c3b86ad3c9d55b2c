"""End to end: the "Critical path" tab in a real Airflow UI, driven by headless Chromium.

Boots a real api-server (``AirflowCluster``), logs a browser in with the api-server's JWT in the
``_token`` cookie (what the UI's login sets), opens the DAG page, checks that the tab is there,
opens it and checks the page rendered inside the tab's iframe: the graph with exactly the critical
tasks highlighted, slack on every node, the predicted Gantt chart and the GPU pools (the pool row
shows the reservation the watermark controller wrote in the pool's description). Screenshots go to a
temp folder removed at the end of the run, or with GPU_DAG_UPDATE_SCREENSHOTS=1 to
``docs/img/critical_path.png`` (graph), ``critical_path_gantt.png`` and ``critical_path_pools.png``.
A run's live view (``/gpu-dag/critical-path/<dag>/runs/<run>``) is opened while a task of a real run
waits for slots (the plan's bars with the actual and predicted ones over them, the waiting tasks with
their reasons and predicted starts; ``critical_path_live.png``) and again once the run has finished
(every task's actual bar, the plan's error).
Anonymous requests to the page and its data are refused. The connection form offers the
``gpu_dag_api`` type, and the api-server's *Test* (``POST /api/v2/connections/test``, enabled here by
``[core] test_connection``) runs its hook against this api-server.

Chromium is driven over the DevTools protocol with ``websockets`` (installed with Airflow); needs
Debian's ``chromium`` package. Skipped, with the reason, only when no chromium binary is found.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from airflow_gpu_dag.testing import AirflowCluster

AIRFLOW_DAGS = "ui"
AIRFLOW_POOLS = {"gpu_default": 4}
#: The live view's DAG: its own folder (tests/integration/dags/ui_live), parsed as a second DAG bundle.
LIVE_DAGS = Path(__file__).resolve().parent / "dags" / "ui_live"
_BUNDLES = [
    {"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}},
    {
        "name": "ui-live",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {"path": str(LIVE_DAGS)},
    },
]
AIRFLOW_ENV = {
    # the connection form's Test button (off by default in Airflow 3)
    "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
    "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(_BUNDLES),
}
DAG_ID = "gpu_pipeline"
#: Zero-slack tasks of tests/integration/dags/ui/pipeline_dag.py (its docstring derives them).
EXPECTED_CRITICAL = {"load", "preprocess", "train", "checkpoint", "evaluate"}
# Screenshots go to docs/img (the ones the docs show) only when asked, so a test run leaves the tree clean.
_SHOT_DIR = (
    Path(__file__).resolve().parents[2] / "docs" / "img"
    if os.environ.get("GPU_DAG_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.mkdtemp(prefix="gpu-dag-screens-", dir=os.environ.get("GPU_DAG_TESTS_TMP")))
)
SCREENSHOT = _SHOT_DIR / "critical_path.png"
GANTT_SCREENSHOT = SCREENSHOT.with_name("critical_path_gantt.png")
POOLS_SCREENSHOT = SCREENSHOT.with_name("critical_path_pools.png")
LIVE_SCREENSHOT = SCREENSHOT.with_name("critical_path_live.png")
LIVE_DAG_ID = "gpu_live_run"
LIVE_POOL = "gpu_live"
TAB_ROUTE = "gpu-dag-critical-path"

pytestmark = pytest.mark.airflow_real


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """A headless Chromium and one page, over the DevTools protocol."""

    def __init__(self, binary: str) -> None:
        from websockets.sync.client import connect

        self.profile = tempfile.mkdtemp(prefix="gpu-dag-chromium-", dir=os.environ.get("GPU_DAG_TESTS_TMP"))
        self.proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                f"--user-data-dir={self.profile}",
                "--remote-debugging-port=0",
                "--window-size=1500,1000",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": self.profile},  # its own temp folders go with the profile
        )
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not start its DevTools endpoint within 60 s")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        targets = requests.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        page = next(t for t in targets if t.get("type") == "page")
        # No keepalive pings: while a test waits without reading (a run going on), Chromium's events fill
        # the client's queue, the pong is not read behind them and the ping would close the connection.
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30, ping_interval=None)
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events in between are dropped)."""
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Evaluate ``expression`` until it is truthy; return its value (or fail with the page text)."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            time.sleep(0.5)
        text = self.evaluate("document.body ? document.body.innerText.slice(0, 2000) : ''")
        raise AssertionError(f"timed out waiting for {expression!r}; page text:\n{text}")

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
            shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(airflow_cluster: AirflowCluster) -> AirflowCluster:
    airflow_cluster.wait_for_dag(DAG_ID)
    return airflow_cluster


@pytest.fixture(scope="module")
def browser(cluster: AirflowCluster, system_packages: None) -> Iterator[Browser]:
    binary = _chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver)")
    chrome = Browser(binary)
    try:
        chrome.call("Page.enable")
        chrome.call("Network.enable")
        chrome.call(
            "Emulation.setDeviceMetricsOverride", width=1500, height=1000, deviceScaleFactor=1, mobile=False
        )
        chrome.call("Network.setCookie", name="_token", value=cluster.token(), url=cluster.api_url + "/")
        yield chrome
    finally:
        chrome.close()


def test_anonymous_requests_get_no_dag_data(cluster: AirflowCluster) -> None:
    for path in (f"/gpu-dag/critical-path/{DAG_ID}", f"/gpu-dag/api/plan/{DAG_ID}", "/gpu-dag/api/pools"):
        resp = requests.get(cluster.api_url + path, timeout=30)
        assert resp.status_code == 401, (path, resp.status_code, resp.text[:300])
        assert "preprocess" not in resp.text and "gpu_default" not in resp.text
    forged = requests.get(
        cluster.api_url + f"/gpu-dag/api/plan/{DAG_ID}", cookies={"_token": "not-a-jwt"}, timeout=30
    )
    assert forged.status_code in (401, 403), forged.text[:300]
    assert "preprocess" not in forged.text


def test_plan_endpoint_with_token(cluster: AirflowCluster) -> None:
    resp = cluster.request("GET", f"/gpu-dag/api/plan/{DAG_ID}")
    assert resp.status_code == 200, resp.text[:300]
    data = resp.json()
    assert set(data["critical_tasks"]) == EXPECTED_CRITICAL
    assert data["critical_path"] == ["load", "preprocess", "train", "checkpoint", "evaluate"]
    assert data["makespan"] == 3.5 * 3600
    assert data["predicted"]["capacity"]["gpu_default"] == 4
    assert set(data["predicted"]["results"]) == {"stock", "reservation"}


def test_plugin_registers_the_dag_tab(cluster: AirflowCluster) -> None:
    plugins = cluster.api("GET", "/api/v2/plugins").json()["plugins"]
    views = [v for p in plugins for v in p["external_views"]]
    ours = [v for v in views if v.get("url_route") == TAB_ROUTE]
    assert ours, views
    assert ours[0]["destination"] == "dag"
    assert ours[0]["href"] == "/gpu-dag/critical-path/{DAG_ID}"


def test_connection_form_offers_the_gpu_dag_api_type(cluster: AirflowCluster) -> None:
    metas = cluster.request("GET", "/ui/connections/hook_meta").json()
    (ours,) = [m for m in metas if m["connection_type"] == "gpu_dag_api"]
    assert ours["hook_name"] == "Airflow REST API (gpu-dag)"
    assert ours["hook_class_name"] == "airflow_gpu_dag.hooks.airflow_api.AirflowApiHook"
    assert ours["standard_fields"]["host"]["title"] == "API server URL"
    assert ours["standard_fields"]["url_schema"]["hidden"] is True
    assert set(ours["extra_fields"]) == {"token", "timeout"}
    assert ours["extra_fields"]["token"]["schema"]["format"] == "password"


def test_api_server_tests_a_gpu_dag_api_connection(cluster: AirflowCluster) -> None:
    """The UI's Test button: the api-server builds AirflowApiHook for the form's fields and calls its
    test_connection(), which here calls this very api-server (health, login, pools)."""
    form = {
        "connection_id": "gpu_dag_api",
        "conn_type": "gpu_dag_api",
        "host": cluster.api_url,
        "login": cluster.USERNAME,
        "password": cluster.PASSWORD,
        "extra": json.dumps({"timeout": 20}),
    }
    cluster.api("POST", "/connections", json=form)
    try:
        result = cluster.api("POST", "/connections/test", json=form).json()
        assert result["status"] is True, result
        assert result["message"].startswith(f"{cluster.api_url}: api-server healthy"), result
        assert "metadatabase healthy" in result["message"]
        assert "credentials can read pools" in result["message"]

        wrong = cluster.api("POST", "/connections/test", json={**form, "password": "wrong-pw-SECRET"}).json()
        assert wrong["status"] is False, wrong
        assert f"login as {cluster.USERNAME!r} refused" in wrong["message"], wrong
        assert "wrong-pw-SECRET" not in wrong["message"]

        nowhere = {**form, "connection_id": "gpu_dag_api_nowhere", "host": "http://127.0.0.1:9"}
        down = cluster.api("POST", "/connections/test", json=nowhere).json()
        assert down["status"] is False and "monitor/health: ConnectError" in down["message"], down
    finally:
        cluster.api("DELETE", "/connections/gpu_dag_api", check=False)


def test_the_typed_uri_drives_the_controllers_client(
    cluster: AirflowCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AIRFLOW_CONN_GPU_DAG_API='gpu-dag-api://user:pw@host:port'``, what docs/connections.md shows."""
    from airflow_gpu_dag.hooks.airflow_api import AirflowApiHook

    address = cluster.api_url.split("://", 1)[1]
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPU_DAG_API", f"gpu-dag-api://{cluster.USERNAME}:{cluster.PASSWORD}@{address}"
    )
    hook = AirflowApiHook()
    ok, message = hook.test_connection()
    assert ok, message
    client = hook.get_client()
    try:
        assert client.base_url == cluster.api_url
        assert client.get_pool("gpu_default") is not None
    finally:
        client.close()


def test_controller_cli_with_the_typed_connection_and_no_metadata_db(
    cluster: AirflowCluster, tmp_path: Path
) -> None:
    """What deploy/kubernetes runs: ``airflow gpu-dag watermark`` with only the connection (a
    ``gpu-dag-api://`` URI) and its config; an empty AIRFLOW_HOME, so no metadata database to read."""
    import sys

    config = tmp_path / "watermark.yaml"
    config.write_text(
        f"lease: {{lock_file: {tmp_path / 'wm.lock'}, variable: null}}\n"
        "pools:\n  gpu_conn_cli:\n    source: {type: static, gpus: 2}\n"
    )
    home = tmp_path / "home"
    home.mkdir()
    address = cluster.api_url.split("://", 1)[1]
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_GPU_DAG_API": f"gpu-dag-api://{cluster.USERNAME}:{cluster.PASSWORD}@{address}",
    }
    once = subprocess.run(
        [
            str(Path(sys.executable).parent / "airflow"),
            "gpu-dag",
            "watermark",
            "--once",
            "--config",
            str(config),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert once.returncode == 0, once.stdout[-2000:] + once.stderr[-3000:]
    assert "gpu_conn_cli: size 2" in once.stdout, once.stdout[-2000:]
    assert cluster.get_pool("gpu_conn_cli")["slots"] == 2
    assert cluster.PASSWORD not in once.stdout + once.stderr


def _reserving_description() -> tuple[str, str]:
    """A pool description exactly as the watermark controller writes it while it reserves 4 GPUs of
    gpu_default for ``train``; returns it and the reserved task's key."""
    from airflow_gpu_dag.core.policy.admission import ReadyTask, RunningTask
    from airflow_gpu_dag.core.policy.reservation import decide_pools
    from airflow_gpu_dag.watermark.controller import describe
    from airflow_gpu_dag.watermark.sources import PoolCapacity

    key = f"{DAG_ID}/manual__2026-11-30T01:00:00+00:00/train/-1"
    decision = decide_pools(
        0.0,
        {"gpu_default": 4},
        [RunningTask(f"{DAG_ID}/r/sweep_0/-1", "gpu_default", 2, 900.0)],
        [ReadyTask(key, "gpu_default", 4, 9600, 7200.0)],
    )["gpu_default"]
    return describe(PoolCapacity(4, "ok", "static 4 GPUs", 0, 4), decision, 4), key


def test_tab_renders_critical_path_in_the_ui(cluster: AirflowCluster, browser: Browser) -> None:
    description, reserved_key = _reserving_description()
    cluster.set_pool("gpu_default", 4, description=description)
    browser.navigate(f"{cluster.api_url}/dags/{DAG_ID}")
    browser.wait_for(
        "Array.from(document.querySelectorAll('a, button'))"
        ".some(e => e.textContent.trim() === 'Critical path')",
        timeout=90,
    )
    browser.navigate(f"{cluster.api_url}/dags/{DAG_ID}/plugin/{TAB_ROUTE}")
    frame = "document.querySelector('iframe[title=\"Critical path\"]')"
    doc = f"({frame} && {frame}.contentDocument)"
    browser.wait_for(f"{doc} && {doc}.querySelectorAll('svg.graph .node').length > 0", timeout=90)
    nodes = browser.evaluate(
        f"Array.from({doc}.querySelectorAll('svg.graph .node')).map(n => "
        "({id: n.dataset.taskId, critical: n.classList.contains('critical'), slack: n.dataset.slack, "
        "text: n.textContent}))"
    )
    assert len(nodes) == 13
    assert {n["id"] for n in nodes if n["critical"]} == EXPECTED_CRITICAL
    assert all("slack" in n["text"] for n in nodes)
    slack = {n["id"]: float(n["slack"]) for n in nodes}
    assert slack["tokenizer_stats"] == 2 * 3600 + 25 * 60  # LS 2h45m - ES 20m
    assert all(slack[t] == 0 for t in EXPECTED_CRITICAL)
    critical_edges = browser.evaluate(
        f"Array.from({doc}.querySelectorAll('svg.graph .edge.critical'))"
        ".map(e => e.dataset.from + '>' + e.dataset.to)"
    )
    assert set(critical_edges) == {
        "load>preprocess",
        "preprocess>train",
        "train>checkpoint",
        "checkpoint>evaluate",
    }
    gantt_bars = browser.evaluate(f"{doc}.querySelectorAll('svg.gantt .gantt-bar').length")
    assert gantt_bars == 2 * 13  # stock and reservation
    pool_rows = browser.evaluate(
        f"Object.fromEntries(Array.from({doc}.querySelectorAll('#pools tbody tr'))"
        ".map(r => [r.dataset.pool, Array.from(r.cells).map(c => c.textContent)]))"
    )
    # Pool, Watermark, Capacity, Used, Running, Queued, Open, Reserved, Reserved for, Description
    assert pool_rows["gpu_default"][:3] == ["gpu_default", "4", "4"]
    assert pool_rows["gpu_default"][7:9] == ["4", reserved_key]
    browser.screenshot(SCREENSHOT)
    assert SCREENSHOT.stat().st_size > 10_000
    browser.evaluate(f"{doc}.querySelector('button[data-target=\"gantt-section\"]').click(); true")
    browser.wait_for(f"{doc}.getElementById('gantt-section').classList.contains('active')")
    browser.screenshot(GANTT_SCREENSHOT)
    browser.evaluate(f"{doc}.querySelector('button[data-target=\"pools-section\"]').click(); true")
    browser.wait_for(f"{doc}.getElementById('pools-section').classList.contains('active')")
    browser.screenshot(POOLS_SCREENSHOT)


def _task_states(cluster: AirflowCluster, dag_id: str, run_id: str) -> str:
    """The run's task instances as one line each (for a failure message)."""
    try:
        tis = cluster.task_instances(dag_id, run_id)
    except Exception as err:  # the message must come out whatever is broken
        return f"  (task instances not readable: {err})"
    return "\n".join(
        f"  {ti['task_id']}: {ti.get('state')} (start {ti.get('start_date')}, end {ti.get('end_date')})"
        for ti in tis
    )


def _page_text(browser: Browser) -> str:
    try:
        return str(browser.evaluate("document.body ? document.body.innerText.slice(0, 3000) : ''"))
    except Exception as err:  # the message must come out whatever is broken
        return f"(page text not readable: {err})"


#: The live view's chart and waiting table, as the browser sees them.
_LIVE_STATE = """(() => {
  const rows = Array.from(document.querySelectorAll('#waiting tr')).slice(1).map(r => ({
    task: r.cells[0].textContent, state: r.cells[1].textContent, rank: r.cells[2].textContent,
    code: r.cells[3].dataset.code, reason: r.cells[3].textContent, predicted: r.cells[4].textContent}));
  const bars = kind => Array.from(document.querySelectorAll('svg.live-gantt rect.' + kind))
    .map(b => b.dataset.task.split('/')[2]);
  const error = document.getElementById('plan-error');
  return {planned: bars('planned'), actual: bars('actual'), predicted: bars('predicted'), rows: rows,
          error: error ? error.textContent : null, title: document.title};
})()"""


def test_live_view_of_a_run_in_the_browser(cluster: AirflowCluster, browser: Browser) -> None:
    """A real run of tests/integration/dags/ui_live/live_dag.py: while ``train`` holds both slots of
    ``gpu_live`` the view shows ``sweep`` waiting for slots with a predicted start, ``evaluate`` not
    ready, and the plan's bars under the actual and predicted ones; once the run has finished, an actual
    bar over every plan bar and the plan's error."""
    cluster.set_pool(LIVE_POOL, 2)
    cluster.wait_for_dag(LIVE_DAG_ID, timeout=300)
    run_id = cluster.trigger(LIVE_DAG_ID)
    url = f"{cluster.api_url}/gpu-dag/critical-path/{LIVE_DAG_ID}/runs/{quote(run_id, safe='')}"

    def fail(what: str) -> None:
        pytest.fail(
            f"{what}\nTask instances:\n{_task_states(cluster, LIVE_DAG_ID, run_id)}\n"
            f"Page ({url}):\n{_page_text(browser)}"
        )

    deadline = time.monotonic() + 240
    while True:
        states = {ti["task_id"]: ti.get("state") for ti in cluster.task_instances(LIVE_DAG_ID, run_id)}
        if states.get("train") == "running" and states.get("sweep") == "scheduled":
            break
        if states.get("sweep") in ("queued", "running", "success") or time.monotonic() > deadline:
            fail(f"never saw train running while sweep waits: {states}")
        time.sleep(1)

    browser.navigate(url)
    live = None
    deadline = time.monotonic() + 45  # train sleeps 60 s: sweep waits for all of it
    while time.monotonic() < deadline:
        try:
            live = browser.evaluate(_LIVE_STATE)
        except RuntimeError:  # the page is reloading itself
            live = None
        if live and any(r["task"].endswith("/sweep/-1") for r in live["rows"]) and live["actual"]:
            break
        time.sleep(1)
    else:
        fail(f"the live view never showed sweep waiting: {live}")
    assert live is not None
    rows = {r["task"].split("/")[2]: r for r in live["rows"]}
    assert rows["sweep"]["state"] == "scheduled" and rows["sweep"]["rank"] == "1", rows
    assert rows["sweep"]["code"] == "waiting-for-slots", rows
    assert f"waiting for free slots of pool {LIVE_POOL}" in rows["sweep"]["reason"], rows
    assert rows["sweep"]["predicted"] != "-" and "(+" in rows["sweep"]["predicted"], rows
    assert rows["evaluate"]["code"] == "not-ready" and rows["evaluate"]["predicted"] != "-", rows
    assert "train" not in rows  # running: drawn, not waiting
    assert sorted(live["planned"]) == ["evaluate", "sweep", "train"], live
    assert live["actual"] == ["train"], live
    assert sorted(live["predicted"]) == ["evaluate", "sweep"], live
    assert live["error"] is None
    assert "refreshed every 10 s" in _page_text(browser)
    # the screenshot once train has run a while (its bar visible), sweep still waiting
    (train,) = [ti for ti in cluster.task_instances(LIVE_DAG_ID, run_id) if ti["task_id"] == "train"]
    shot_at = datetime.fromisoformat(train["start_date"]).timestamp() + 20
    while time.time() < shot_at:
        time.sleep(0.5)
    browser.navigate(url)
    browser.wait_for("document.querySelectorAll('svg.live-gantt rect.actual').length > 0", timeout=30)
    browser.screenshot(LIVE_SCREENSHOT)
    assert LIVE_SCREENSHOT.stat().st_size > 10_000

    state = cluster.wait_for_run(LIVE_DAG_ID, run_id, timeout=300)
    assert state == "success", _task_states(cluster, LIVE_DAG_ID, run_id)
    browser.navigate(url)
    try:
        done = browser.wait_for(
            f"(() => {{ const s = {_LIVE_STATE}; return s.error ? s : null; }})()", timeout=90
        )
    except AssertionError as err:
        fail(f"the finished run's view shows no plan error: {err}")
    assert sorted(done["planned"]) == sorted(done["actual"]) == ["evaluate", "sweep", "train"], done
    assert done["predicted"] == [] and done["rows"] == [], done
    assert "over 3 GPU task(s)" in done["error"] and "start error median" in done["error"], done
    assert "refreshed every" not in _page_text(browser)  # a finished run's view no longer reloads
