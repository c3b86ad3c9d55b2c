"""Errors of the GPU lease manager (:mod:`airflow_gpu_dag.gpu.lease`)."""

from __future__ import annotations

__all__ = ["LeaseError", "LeaseImpossible", "LeaseLost", "LeaseTableCorrupt", "LeaseTimeout"]


class LeaseError(RuntimeError):
    """A GPU lease could not be obtained or kept."""


class LeaseImpossible(LeaseError):
    """The request can never be satisfied on this host (too many GPUs, unknown type, too much memory)."""


class LeaseTimeout(LeaseError):
    """The devices did not become free within the wait timeout."""


class LeaseLost(LeaseError):
    """The lease was reclaimed while its task was still running (heartbeat missed for ``lease_ttl``)."""


class LeaseTableCorrupt(LeaseError):
    """``leases.json`` cannot be read; nothing is allocated until a person repairs or removes it."""
