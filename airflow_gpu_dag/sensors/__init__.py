"""Deferrable sensors: dataset completeness, checkpoint N reached, start windows, start deadlines."""

from __future__ import annotations

from airflow_gpu_dag.sensors.checkpoint import CheckpointSensor
from airflow_gpu_dag.sensors.dataset import DatasetCompleteSensor
from airflow_gpu_dag.sensors.start_deadline import StartDeadlineSensor
from airflow_gpu_dag.sensors.window import StartWindowSensor, TimeWindow

__all__ = [
    "CheckpointSensor",
    "DatasetCompleteSensor",
    "StartDeadlineSensor",
    "StartWindowSensor",
    "TimeWindow",
]
