"""Operators of the airflow-gpu-dag provider."""

from __future__ import annotations

from airflow_gpu_dag.operators.gpu import GpuBashOperator, GpuPythonOperator, GpuTaskError

__all__ = ["GpuBashOperator", "GpuPythonOperator", "GpuTaskError"]
