"""Deliberately broken: a completeness sensor without a timeout must be a parse-time import error."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_gpu_dag.sensors import DatasetCompleteSensor

with DAG("edges_bad_sensor", schedule=None, start_date=datetime(2026, 1, 1)):
    DatasetCompleteSensor(task_id="wait_forever", path="/nowhere")
