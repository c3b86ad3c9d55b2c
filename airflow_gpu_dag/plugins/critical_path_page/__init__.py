"""The "Critical path" tab on the DAG page of the Airflow UI.

``CRITICAL_PATH_APP`` goes in the plugin's ``fastapi_apps`` (the api-server mounts the app at
``/gpu-dag``), ``CRITICAL_PATH_VIEW`` in its ``external_views`` (destination ``dag``: a tab on every
DAG page whose iframe loads ``/gpu-dag/critical-path/{DAG_ID}``).
"""

from __future__ import annotations

from typing import Any

from airflow_gpu_dag.plugins.critical_path_page.app import URL_PREFIX, create_app

__all__ = ["CRITICAL_PATH_APP", "CRITICAL_PATH_VIEW", "URL_ROUTE"]

#: The tab's route under the DAG page (``/dags/<dag_id>/plugin/gpu-dag-critical-path``).
URL_ROUTE = "gpu-dag-critical-path"

CRITICAL_PATH_APP: dict[str, Any] = {
    "app": create_app(),
    "url_prefix": URL_PREFIX,
    "name": "airflow-gpu-dag critical path",
}

CRITICAL_PATH_VIEW: dict[str, Any] = {
    "name": "Critical path",
    "href": URL_PREFIX + "/critical-path/{DAG_ID}",
    "destination": "dag",
    "url_route": URL_ROUTE,
    "category": "GPU",
}
