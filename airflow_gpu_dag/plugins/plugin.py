"""The Airflow plugin: registers the priority weight strategies, the critical-path page and the
scheduler's fail-open watchdog of GPU pools (a listener)."""

from __future__ import annotations

import logging

from airflow.plugins_manager import AirflowPlugin

from airflow_gpu_dag.priority_strategy import CriticalPathPriorityStrategy, PackingPriorityStrategy

log = logging.getLogger(__name__)

# The critical-path tab (FastAPI app + external view) and the fail-open watchdog of GPU pools (started in
# the scheduler only): neither may break the loading of the plugin, which every Airflow process does.
try:
    from airflow_gpu_dag.plugins.critical_path_page import CRITICAL_PATH_APP, CRITICAL_PATH_VIEW
except Exception:
    log.exception("airflow-gpu-dag: critical-path page disabled")
    _FASTAPI_APPS: list[dict] = []
    _EXTERNAL_VIEWS: list[dict] = []
else:
    _FASTAPI_APPS, _EXTERNAL_VIEWS = [CRITICAL_PATH_APP], [CRITICAL_PATH_VIEW]

try:
    from airflow_gpu_dag.pool_claim import watchdog
except Exception:
    log.exception("airflow-gpu-dag: pool watchdog disabled")
    _LISTENERS: list = []
else:
    _LISTENERS = [watchdog]


class GpuDagPlugin(AirflowPlugin):
    """Loaded through the ``airflow.plugins`` entry point in every Airflow process."""

    name = "gpu_dag"
    priority_weight_strategies = [CriticalPathPriorityStrategy, PackingPriorityStrategy]
    fastapi_apps = _FASTAPI_APPS
    external_views = _EXTERNAL_VIEWS
    listeners = _LISTENERS
