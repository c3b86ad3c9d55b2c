"""What ``airflow gpu-dag watermark --once --dry-run`` reads when no ``gpu_dag_api`` connection is
defined: nothing from Airflow.

A dry run checks a ``watermark.yaml`` before it is deployed. The configuration and the capacity sources
(a static GPU count, a file, NVML, Kubernetes, Prometheus) are read by the controller itself; only the
pools' current sizes and the tasks waiting in them come from the api-server. Without a connection the
dry run does not need one: every pool reads as missing (it would be created), no task waits, so each
pool's decided size is its capacity, and nothing is written, as in any dry run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["OfflineClient"]


class OfflineClient:
    """A stand-in for :class:`~airflow_gpu_dag.hooks.rest_client.AirflowRestClient` that reads an empty
    Airflow (no pool, no task instance, no Variable) and refuses every write: a dry run writes nothing,
    and a call that would write is a bug to surface, not to swallow."""

    #: Says where the output comes from (``-o json``: ``offline``).
    reason = "pools and queues not read"

    def get_pool(self, name: str) -> dict[str, Any] | None:
        return None

    def task_instances(self, pools: Iterable[str], states: Iterable[str]) -> list[dict[str, Any]]:
        return []

    def run_task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return []

    def upstream_task_ids(self, dag_id: str) -> dict[str, list[str]]:
        return {}

    def dag_tasks(self, dag_id: str) -> list[dict[str, Any]]:
        return []

    def task_history(
        self, dag_id: str, task_id: str, limit: int = 40, states: Iterable[str] = ("success",)
    ) -> list[dict[str, Any]]:
        return []

    def map_counts(self, dag_id: str, task_id: str, runs: int = 5) -> list[int]:
        return []

    def get_variable(self, key: str) -> str | None:
        return None

    def _write(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("an offline dry run writes nothing to Airflow")

    set_pool = set_task_instance_state = create_variable = put_variable = request = _write

    def close(self) -> None:
        """Nothing to close."""
