"""The Docker Compose stack of ``docker/``, started for real: ``scripts/docker_smoke.py`` builds the
images (stand-ins for the registry images where they cannot be pulled), runs ``docker compose up``,
waits for every healthcheck, triggers ``llm_pipeline`` and ``hparam_sweep`` over the REST API, checks
the controller's pool sizing, the shared lease volume and the Critical-path page, and ends with
``down -v``. One run for the whole module (about 5 to 10 minutes, docs/deployment.md); the tests
below read its summary. ``scripts/test.sh`` runs it beside the pytest workers and this module reads
that run's result (``GPU_DAG_SMOKE_RESULT``, docs/testing.md); run any other way, the module runs it.

It needs a Docker daemon: one that answers, or root with ``dockerd`` installed (Debian's
``docker.io``, which ``scripts/ci_system_deps.sh`` installs), and then a private daemon is started and
stopped. Without either the module is skipped and says why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.docker_stack, pytest.mark.airflow_real]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "docker_smoke.py"
STANDINS = ROOT / "scripts" / "docker_smoke"
SERVICES = {
    "postgres",
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-watermark",
}
EXIT_CANNOT_RUN = 77


def _daemon_answers() -> bool:
    docker = shutil.which("docker")
    if not docker:
        return False
    try:
        return subprocess.run([docker, "info"], capture_output=True, timeout=30, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _cannot_run_reason() -> str | None:
    """Why no Docker daemon can be had here, or None."""
    root = os.geteuid() == 0
    if root and shutil.which("dockerd"):
        return None
    if _daemon_answers():
        return None
    if not root:
        return (
            "no Docker daemon answers and starting one needs root (run the tests as root, or start dockerd)"
        )
    return (
        "no Docker daemon answers and dockerd is not installed "
        "(sudo bash scripts/ci_system_deps.sh installs Debian's docker.io)"
    )


#: Set by ``scripts/test.sh``: the folder where its smoke lane, started once the system packages are in,
#: leaves ``status`` (the script's exit status), ``summary.json`` and ``smoke.log``.
LANE_RESULT = "GPU_DAG_SMOKE_RESULT"
#: How long the module waits for that lane (the script's own limit is the run's, an hour at most).
LANE_TIMEOUT_S = 3600.0


def _lane_result(folder: Path) -> int:
    """Wait for the smoke lane of ``scripts/test.sh`` to finish; its exit status."""
    status, deadline = folder / "status", time.monotonic() + LANE_TIMEOUT_S
    while not status.is_file():
        if time.monotonic() > deadline:
            pytest.fail(f"the smoke lane of scripts/test.sh still running after {LANE_TIMEOUT_S:.0f} s")
        time.sleep(2.0)
    return int(status.read_text().strip())


def _run_here(summary_file: Path, log_file: Path) -> int:
    """Run the smoke script in this process's worker; its exit status."""
    reason = _cannot_run_reason()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ)
    if os.geteuid() == 0 and shutil.which("dockerd"):
        # a private daemon: isolated from any other, with the stand-in NVIDIA hook the GPU
        # reservations of the compose file need on a host without GPUs
        env["GPU_DAG_SMOKE_OWN_DAEMON"] = "1"
    with log_file.open("w") as log:
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), "--summary", str(summary_file)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            timeout=3600,
            check=False,
        )
    return proc.returncode


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory, system_packages: None) -> dict[str, Any]:
    """The smoke run's summary: the one ``scripts/test.sh`` ran beside the workers
    (``GPU_DAG_SMOKE_RESULT``), else a run started here."""
    lane = os.environ.get(LANE_RESULT)
    if lane:
        folder = Path(lane)
        returncode = _lane_result(folder)
    else:
        folder = tmp_path_factory.mktemp("docker-smoke")
        returncode = _run_here(folder / "summary.json", folder / "smoke.log")
    summary_file, log_file = folder / "summary.json", folder / "smoke.log"
    text = log_file.read_text() if log_file.is_file() else ""
    summary: dict[str, Any] = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    if returncode == EXIT_CANNOT_RUN:
        pytest.skip(f"docker smoke run cannot run here: {summary.get('reason', text[-500:])}")
    print(text[-6000:])  # shown with -rA / on failure: timings and what was checked
    summary["returncode"] = returncode
    summary["log_tail"] = text[-12000:]
    return summary


def test_smoke_run_passes(smoke: dict[str, Any]) -> None:
    assert smoke["returncode"] == 0 and smoke["result"] == "passed", smoke["log_tail"]


def test_every_service_became_healthy(smoke: dict[str, Any]) -> None:
    assert set(smoke.get("healthy_after_s", {})) == SERVICES, smoke["log_tail"]


def test_example_dags_succeed_over_the_rest_api(smoke: dict[str, Any]) -> None:
    runs = smoke.get("runs", {})
    assert {dag: r["state"] for dag, r in runs.items()} == {
        "llm_pipeline": "success",
        "hparam_sweep": "success",
    }, smoke["log_tail"]
    llm = runs["llm_pipeline"]["tasks"]
    assert llm["alignment_eval[-1]"] == "success"
    assert llm["finetune.train.two_gpus[-1]"] == "success"  # 2 GPUs were free: no fallback
    sweep = runs["hparam_sweep"]["tasks"]
    assert [sweep[f"train_trial[{i}]"] for i in range(3)] == ["success"] * 3


def test_controller_sized_the_gpu_pool(smoke: dict[str, Any]) -> None:
    pool = smoke.get("pool", {})
    assert pool.get("slots") == 2, smoke["log_tail"]  # docker/pools.json says 8
    assert pool["description"].startswith("gpu-dag watermark: pool 2 of capacity 2 | source ok: static 2")


def test_scheduler_and_controller_share_the_lease_volume(smoke: dict[str, Any]) -> None:
    lease = smoke.get("lease_volume", {})
    assert lease.get("volume", "").endswith("_gpu-leases"), smoke["log_tail"]
    assert lease["ledger_lines"] > 0 and "usage.jsonl" in lease["files"]


def test_critical_path_page_needs_a_login(smoke: dict[str, Any]) -> None:
    page = smoke.get("critical_path_page", {})
    assert (page.get("with_login"), page.get("without_login")) == (200, 401), smoke["log_tail"]


def test_down_leaves_nothing_behind(smoke: dict[str, Any]) -> None:
    assert smoke.get("left_behind") == [], smoke["log_tail"]
    daemon = smoke.get("daemon", {})
    if daemon.get("started_here"):
        assert "stopping dockerd" in smoke["log_tail"]


# ------------------------------------------------------------------ without Docker: the smoke files
def test_root_dockerignore_matches_the_dockerfiles() -> None:
    """Builders without BuildKit (Compose v1's own build, Docker < 23) read only the context's
    .dockerignore, not docker/Dockerfile.dockerignore: both must keep the same things out (docker/.env
    with the secrets, .venv, .git)."""
    ours = (ROOT / "docker" / "Dockerfile.dockerignore").read_text().split("\n")
    root = (ROOT / ".dockerignore").read_text().split("\n")
    patterns = lambda lines: {line.strip() for line in lines if line.strip() and not line.startswith("#")}  # noqa: E731
    assert patterns(root) == patterns(ours)


def test_standin_pins_do_not_repeat_constraints() -> None:
    """constraints-standin.txt only adds pins (the providers the official image has and ours lacks)."""

    def names(path: Path) -> set[str]:
        lines = path.read_text().splitlines()
        return {re.sub(r"[-_.]+", "-", ln.split("==")[0]).lower() for ln in lines if "==" in ln}

    assert not names(STANDINS / "constraints-standin.txt") & names(ROOT / "constraints.txt")
    assert {"apache-airflow-providers-celery", "apache-airflow-providers-postgres"} <= names(
        STANDINS / "constraints-standin.txt"
    )


def test_standin_base_matches_the_dockerfile() -> None:
    """The Airflow stand-in installs the Airflow version of docker/Dockerfile's FROM."""
    (image,) = re.findall(r"^FROM\s+(\S+)", (ROOT / "docker" / "Dockerfile").read_text(), re.MULTILINE)
    version = re.fullmatch(r"apache/airflow:([\d.]+)-python3\.11", image)
    assert version, image
    assert f"ARG AIRFLOW_VERSION={version.group(1)}" in (STANDINS / "airflow.Dockerfile").read_text()
