"""The GPUs a worker was given: ``CUDA_VISIBLE_DEVICES`` applied to its host's inventory.

NVML lists every GPU of the host whatever ``CUDA_VISIBLE_DEVICES`` says, so a worker started with a
share of the host's GPUs must narrow the inventory itself before it leases any
(:meth:`airflow_gpu_dag.gpu.lease.LeaseManager.inventory`).
"""

from __future__ import annotations

from airflow_gpu_dag.gpu.inventory import GpuDevice, GpuInventory, InventoryError

__all__ = ["visible_to"]


def visible_to(inventory: GpuInventory, visible: str | None) -> GpuInventory:
    """The devices of ``inventory`` a process started with ``CUDA_VISIBLE_DEVICES=visible`` was given.

    NVML lists every GPU of the host whatever ``CUDA_VISIBLE_DEVICES`` says: a worker started with a
    share of the GPUs would otherwise lease (and hand its tasks) GPUs another worker was given.
    Entries: NVML indices (the PCI bus order the leases use), ``GPU-<uuid>`` (a unique prefix is
    enough); an empty value gives no GPU; None (unset) keeps them all.

    :raises InventoryError: a MIG device, or an entry that names no device here (the fix in the message).
    """
    if visible is None:
        return inventory
    kept: list[GpuDevice] = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry:
            continue
        if entry.upper().startswith("MIG-"):
            raise InventoryError(
                f"CUDA_VISIBLE_DEVICES={visible!r} names a MIG device ({entry}); GPU leases hand out whole "
                "GPUs. Fix: start the worker with whole GPUs (indices or GPU-<uuid>) or without the variable."
            )
        if entry.isdigit():
            found = [d for d in inventory.devices if d.index == int(entry)]
        else:
            found = [d for d in inventory.devices if d.uuid and d.uuid.lower().startswith(entry.lower())]
        if len(found) != 1:
            raise InventoryError(
                f"CUDA_VISIBLE_DEVICES={visible!r}: {entry!r} names {'no' if not found else 'more than one'} "
                f"GPU of this host ({inventory.describe()}). Fix: give the worker NVML indices or GPU UUIDs "
                "of this host, or unset the variable to lease from all of its GPUs."
            )
        if found[0] not in kept:
            kept.append(found[0])
    return GpuInventory(
        tuple(kept), inventory.source, inventory.host, {**inventory.extra, "cuda_visible_devices": visible}
    )
