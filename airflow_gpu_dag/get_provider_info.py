"""Provider metadata for Airflow's ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-gpu-dag",
        "name": "GPU DAG",
        "description": "Dependency-graph-driven GPU scheduling: critical-path priority, GPU watermark "
        "pools, reservation for wide critical tasks.",
        "versions": ["0.1.0"],
        "config": {
            "gpu_dag": {
                "description": "airflow-gpu-dag settings.",
                "options": {
                    "default_duration": {
                        "description": "Estimate used for tasks that declare none.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "30m",
                        "default": "30m",
                    },
                    "pools": {
                        "description": "JSON object of GPU pool -> total slots, used to reject "
                        "impossible requests and unknown pools at parse time.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": '{"gpu_default": 8}',
                        "default": "",
                    },
                    "max_gpus_per_host": {
                        "description": "GPUs on the largest host; larger requests are rejected.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "8",
                        "default": "",
                    },
                },
            }
        },
    }
