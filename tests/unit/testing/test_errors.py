"""Tests of ``airflow_gpu_dag.testing.errors``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_gpu_dag.hooks.rest_client import RestError
from airflow_gpu_dag.testing import ClusterError
from airflow_gpu_dag.testing import rest as rest_module
from airflow_gpu_dag.testing.rest import ClusterRest


class FakeClient:
    def __init__(self, answers: list[tuple[int, Any] | RestError]) -> None:
        self.answers = list(answers)

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        answer = self.answers.pop(0)
        if isinstance(answer, RestError):
            raise answer
        return httpx.Response(answer[0], json=answer[1])

    def run_task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        raise RestError(f"GET /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances: ReadTimeout")

    def pages(self, path: str, key: str) -> list[dict[str, Any]]:
        raise RestError(f"GET /api/v2{path}: ReadTimeout")


class FakeCluster(ClusterRest):
    dags_folder = Path("/dags")
    dead: str | None = None

    def __init__(self, answers: list[tuple[int, Any] | RestError]) -> None:
        self.client = FakeClient(answers)

    def _rest(self) -> Any:
        return self.client

    def log_tails(self, lines: int = 40) -> str:
        return "----- scheduler tail -----"

    def check_alive(self) -> None:
        if self.dead:
            raise ClusterError(f"{self.dead} (pid 7) exited with status 1 on its own; Last error: boom")


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest_module, "RETRY_WAIT", 0.0)


def _refused(path: str) -> RestError:
    return RestError(f"GET {path}: ConnectError")


def test_wait_for_run_names_a_dead_api_server() -> None:
    cluster = FakeCluster([_refused("/api/v2/dags/d/dagRuns/r")])
    cluster.dead = "api-server"
    with pytest.raises(ClusterError, match=r"api-server \(pid 7\) exited .*boom"):
        cluster.wait_for_run("d", "r")


def test_wait_for_dag_names_a_dead_api_server() -> None:
    cluster = FakeCluster([_refused("/api/v2/dags/d")])
    cluster.dead = "api-server"
    with pytest.raises(ClusterError, match=r"api-server \(pid 7\) exited .*boom"):
        cluster.wait_for_dag("d")


def test_a_failed_poll_with_everything_alive_is_raised_as_it_was() -> None:
    cluster = FakeCluster([_refused("/api/v2/dags/d/dagRuns/r")])
    with pytest.raises(ClusterError, match="ConnectError"):
        cluster.wait_for_run("d", "r")


def test_wait_for_run_timeout_keeps_its_message_when_the_task_instances_cannot_be_read() -> None:
    cluster = FakeCluster([(200, {"state": "running"}), _refused("/api/v2/monitor/health")])
    with pytest.raises(ClusterError) as err:
        cluster.wait_for_run("d", "r", timeout=0)
    message = str(err.value)
    assert "DAG run d/r is still 'running' after 0s" in message
    assert "taskInstances: ReadTimeout" in message and "scheduler tail" in message


def test_wait_for_dag_timeout_keeps_its_message_when_the_import_errors_cannot_be_read() -> None:
    cluster = FakeCluster([(404, {"detail": "not found"})])
    with pytest.raises(ClusterError) as err:
        cluster.wait_for_dag("d", timeout=0)
    message = str(err.value)
    assert "DAG 'd' was not parsed within 0s from /dags" in message
    assert "importErrors: ReadTimeout" in message and "scheduler tail" in message
