"""The Airflow plugin: registers the priority weight strategies, the critical-path page and the
scheduler's fail-open watchdog of GPU pools (a listener)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, PackingPriorityStrategy


def _critical_path_page() -> tuple[list[dict], list[dict]]:
    """The critical-path tab (FastAPI app + external view); never breaks plugin loading."""
    try:
        from airflow_gpu_dag.plugins.critical_path_page import CRITICAL_PATH_APP, CRITICAL_PATH_VIEW
    except Exception:
        import logging

        logging.getLogger(__name__).exception("airflow-gpu-dag: critical-path page disabled")
        return [], []
    return [CRITICAL_PATH_APP], [CRITICAL_PATH_VIEW]


_FASTAPI_APPS, _EXTERNAL_VIEWS = _critical_path_page()


def _listeners() -> list:
    """The fail-open watchdog of GPU pools (started in the scheduler only); never breaks loading."""
    try:
        from airflow_gpu_dag.pool_claim import watchdog
    except Exception:
        import logging

        logging.getLogger(__name__).exception("airflow-gpu-dag: pool watchdog disabled")
        return []
    return [watchdog]


class GpuDagPlugin(AirflowPlugin):
    """Loaded through the ``airflow.plugins`` entry point in every Airflow process."""

    name = "gpu_dag"
    priority_weight_strategies = [CriticalPathPriorityStrategy, PackingPriorityStrategy]
    fastapi_apps = _FASTAPI_APPS
    external_views = _EXTERNAL_VIEWS
    listeners = _listeners()
