"""Local GPU host support: the inventory of devices, leases of concrete GPUs, and GPU-seconds usage.

* :mod:`airflow_gpu_dag.gpu.inventory`: which GPUs this host has (NVML or a static inventory).
* :mod:`airflow_gpu_dag.gpu.lease`: lease device indices to tasks, atomic across worker processes
  (the table storage in ``lease_table``, settings and owner in ``lease_settings``, errors in
  ``lease_errors``, process identity in ``process``).
* :mod:`airflow_gpu_dag.gpu.usage`: the append-only GPU-seconds ledger and its readers.
"""

from __future__ import annotations

from airflow_gpu_dag.gpu.inventory import (
    GpuDevice,
    GpuInventory,
    InventoryError,
    load_inventory,
    parse_inventory,
)
from airflow_gpu_dag.gpu.lease import (
    Lease,
    LeaseError,
    LeaseImpossible,
    LeaseLost,
    LeaseManager,
    LeaseOwner,
    LeaseSettings,
    LeaseTableCorrupt,
    LeaseTimeout,
)
from airflow_gpu_dag.gpu.usage import (
    UsageLedger,
    UsageRecord,
    gpu_seconds_by_dag_run,
    gpu_seconds_by_pool_day,
)

__all__ = [
    "GpuDevice",
    "GpuInventory",
    "InventoryError",
    "Lease",
    "LeaseError",
    "LeaseImpossible",
    "LeaseLost",
    "LeaseManager",
    "LeaseOwner",
    "LeaseSettings",
    "LeaseTableCorrupt",
    "LeaseTimeout",
    "UsageLedger",
    "UsageRecord",
    "gpu_seconds_by_dag_run",
    "gpu_seconds_by_pool_day",
    "load_inventory",
    "parse_inventory",
]
