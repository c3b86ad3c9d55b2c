"""The error of the test cluster (:mod:`airflow_gpu_dag.testing.cluster`)."""

from __future__ import annotations

__all__ = ["ClusterError"]


class ClusterError(RuntimeError):
    """The cluster failed to boot, a REST call failed, or a wait timed out. The message says what
    was expected, what was found, and includes the tail of the component logs where useful."""
