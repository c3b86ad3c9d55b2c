"""Triggers (run in ``airflow triggerer``) behind the provider's deferrable sensors and gates."""

from __future__ import annotations

from airflow_gpu_dag.triggers.budget import BudgetTrigger
from airflow_gpu_dag.triggers.checkpoint import CheckpointTrigger
from airflow_gpu_dag.triggers.dataset import DatasetCompleteTrigger

__all__ = ["BudgetTrigger", "CheckpointTrigger", "DatasetCompleteTrigger"]
