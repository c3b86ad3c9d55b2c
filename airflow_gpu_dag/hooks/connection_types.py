"""The provider's connection types, as its provider info declares them (``connection-types``).

Plain data, no imports: ``get_provider_info()`` returns it without loading any hook, and Airflow 3.2+
builds the connection form (fields, labels, placeholders, hidden fields) from it without importing
:mod:`airflow_gpu_dag.hooks.airflow_api`, whose ``get_ui_field_behaviour()`` returns the same behaviour.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AIRFLOW_API_CONNECTION_TYPE", "CONNECTION_TYPES"]

#: ``gpu_dag_api``: the watermark controller's credentials for the Airflow REST API (docs/connections.md).
AIRFLOW_API_CONNECTION_TYPE: dict[str, Any] = {
    "hook-class-name": "airflow_gpu_dag.hooks.airflow_api.AirflowApiHook",
    "hook-name": "Airflow REST API (gpu-dag)",
    "connection-type": "gpu_dag_api",
    "conn-fields": {
        "token": {
            "label": "Bearer token",
            "description": "A ready API token (JWT) instead of username and password.",
            "schema": {"type": ["string", "null"], "format": "password"},
        },
        "timeout": {
            "label": "Timeout (seconds)",
            "description": "Seconds one REST call may take in all, slow answers included (default 10).",
            "schema": {"type": ["number", "null"]},
        },
    },
    "ui-field-behaviour": {
        "hidden-fields": ["schema"],
        "relabeling": {"host": "API server URL", "login": "Username"},
        "placeholders": {
            "host": "http://airflow-api-server:8080",
            "port": "8080 (when the URL has no port)",
            "login": "admin",
            "password": "password of that user (or set a bearer token below)",
        },
    },
}

#: Every connection type of the provider.
CONNECTION_TYPES: tuple[dict[str, Any], ...] = (AIRFLOW_API_CONNECTION_TYPE,)
