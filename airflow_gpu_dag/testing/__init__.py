"""Test support: boot a real Airflow 3 (api-server, scheduler, dag-processor) for integration tests
and demos. See :class:`airflow_gpu_dag.testing.cluster.AirflowCluster`."""

from __future__ import annotations

from airflow_gpu_dag.testing.cluster import AirflowCluster, ClusterError

__all__ = ["AirflowCluster", "ClusterError"]
