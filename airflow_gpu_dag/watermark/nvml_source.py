"""The ``nvml`` capacity source: this host's GPUs through NVML, minus those held by work that is not ours.

A GPU counts when every query on it succeeds and it has no uncorrected volatile ECC errors, and then:

* when no live lease of this host's lease table (:mod:`airflow_gpu_dag.gpu.lease_view`) holds it:
  free memory >= ``min_free_memory`` and utilisation <= ``max_utilization`` percent;
* when one of our task instances holds it (a lease): it counts, busy or not. Airflow already
  subtracts that task's pool slots; leaving the GPU out as well would count it twice (8 GPUs, 4 of
  them running our 1-GPU tasks: capacity 4, pool 4, no open slot and 4 GPUs idle). Only when NVML
  lists a process on it that is not the lease's (not a recorded process, in its process group or a
  descendant) are the thresholds applied, to the memory left without the lease's own processes.
  When processes cannot be listed or told apart (another pid namespace), the lease is trusted.

NVML is a C library whose calls cannot be interrupted (a GPU fallen off the bus can hang one): the
controller runs each read in a worker thread bounded by the pool's ``source_timeout``
(:class:`~airflow_gpu_dag.watermark.sources.CapacityTracker`); a read still running then counts as
failed, and no other read starts until it returns (the ticks meanwhile count as failed too).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_gpu_dag.gpu.lease_view import held_devices
from airflow_gpu_dag.watermark.capacity import CapacityReading, SourceError

log = logging.getLogger(__name__)

__all__ = ["NvmlSource"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class _Process:
    pid: int
    used_mib: int


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSource:
    """Local GPUs through NVML, filtered by health, free memory and utilisation, with GPUs held by
    our leased task instances counted (see the module docstring).

    :param nvml: the ``pynvml`` module or a fake with the same functions (tests).
    :param lease_dir: the lease table's directory (default ``[gpu_dag] lease_dir``); the controller
        must run on the GPU host and see the workers' table.
    :param leases: False: ignore the lease table (every busy GPU is excluded).
    """

    kind = "nvml"

    def __init__(
        self,
        min_free_memory: int = 0,
        max_utilization: int = 100,
        devices: Sequence[int] | None = None,
        nvml: Any = None,
        lease_dir: str | None = None,
        leases: bool = True,
        pool: str | None = None,
    ) -> None:
        self.min_free_mib = int(min_free_memory)
        self.max_utilization = int(max_utilization)
        self.devices = list(devices) if devices is not None else None
        self._nvml = nvml
        self.lease_dir = lease_dir
        self.leases = leases
        #: The pool measured: a GPU leased by a task of another pool is held, not free (None: every
        #: lease counts as this pool's, as for a source used outside the controller).
        self.pool = pool

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml  # optional dependency: the nvml extra
            except ImportError:
                raise SourceError("pynvml is not installed (pip install nvidia-ml-py)") from None
            self._nvml = pynvml
        return self._nvml

    def _held(self) -> tuple[list[Any], str | None]:
        """Live leases of this host, or nothing and why (the source then behaves as without leases)."""
        if not self.leases:
            return [], None
        try:
            return held_devices(Path(self.lease_dir) if self.lease_dir else None), None
        except Exception as err:
            log.warning("nvml source: cannot read the GPU lease table (%s); busy GPUs are excluded", err)
            return [], f"lease table unreadable: {err}"

    def read(self) -> CapacityReading:
        nvml = self._module()
        held, problem = self._held()
        try:
            nvml.nvmlInit()
        except Exception as err:
            raise SourceError(f"NVML init failed: {err}") from None
        try:
            try:
                count = int(nvml.nvmlDeviceGetCount())
            except Exception as err:
                raise SourceError(f"NVML device count failed: {err}") from None
            absent = sorted(set(self.devices or ()) - set(range(count)))
            if absent:  # a typo in devices must not read as "ok, 0 GPUs"
                raise SourceError(f"devices {absent} are not on this host (NVML sees {count} GPU(s))")
            indices = [i for i in range(count) if self.devices is None or i in self.devices]
            mine = [d for d in held if self.pool is None or d.owner.pool in (None, self.pool)]
            others = [d for d in held if d not in mine]
            usable, ours, reasons = 0, 0, []
            for index in indices:
                reason, leased = self._excluded(nvml, index, mine, others)
                if reason is None:
                    usable += 1
                    ours += leased
                else:
                    reasons.append(f"gpu{index} {reason}")
            detail = f"nvml {usable}/{len(indices)} usable"
            if ours:
                detail += f", {ours} of them held by our tasks"
            if reasons:
                detail += " (" + "; ".join(reasons) + ")"
            if problem:
                detail += f" [{problem}]"
            return CapacityReading(usable, detail)
        finally:
            try:
                nvml.nvmlShutdown()
            except Exception:
                log.debug("NVML shutdown failed", exc_info=True)

    @staticmethod
    def _lease_of(nvml: Any, handle: Any, index: int, held: list[Any]) -> Any:
        if not held:
            return None
        try:
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except Exception:
            uuid = None
        for device in held:
            if uuid and device.uuid:
                if device.uuid == uuid:
                    return device
            elif device.index == index:
                return device
        return None

    @staticmethod
    def _processes(nvml: Any, handle: Any) -> list[_Process] | None:
        """Compute and graphics processes on the GPU; None when NVML cannot list them."""
        found: dict[int, _Process] = {}
        listed = False
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            query = getattr(nvml, name, None)
            if query is None:
                continue
            try:
                entries = query(handle)
            except Exception:
                continue
            listed = True
            for entry in entries or ():
                used = getattr(entry, "usedGpuMemory", None)
                pid = int(entry.pid)
                mib = int(used) // MIB if isinstance(used, int) else 0
                # a process in both lists (compute and graphics) keeps the most memory either reports:
                # a graphics entry without a figure must not erase our task's memory from the count
                if pid not in found or mib > found[pid].used_mib:
                    found[pid] = _Process(pid, mib)
        return list(found.values()) if listed else None

    def _excluded(
        self,
        nvml: Any,
        index: int,
        held: list[Any],
        others: list[Any],
    ) -> tuple[str | None, int]:
        """(why GPU ``index`` is not usable or None, 1 when it counts because our task holds it);
        ``held``: leases of this pool's tasks, ``others``: leases of other pools' tasks."""
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            utilization = nvml.nvmlDeviceGetUtilizationRates(handle)
        except Exception as err:
            return f"unhealthy ({err})", 0
        other = self._lease_of(nvml, handle, index, others)
        if other is not None:  # Airflow does not count it in this pool: it is not free here
            return f"held by {other.owner.describe()} of pool {other.owner.pool}", 0
        try:
            ecc = nvml.nvmlDeviceGetTotalEccErrors(
                handle,
                getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                getattr(nvml, "NVML_VOLATILE_ECC", 0),
            )
            if int(ecc) > 0:
                return f"unhealthy ({ecc} uncorrected ECC errors)", 0
        except Exception:  # ECC not supported on this GPU
            pass
        free_mib = int(memory.free) // MIB
        util = int(utilization.gpu)
        lease = self._lease_of(nvml, handle, index, held)
        if lease is not None:
            processes = self._processes(nvml, handle)
            verdicts = [(p, lease.owns(p.pid)) for p in processes or ()]
            foreign = [p for p, mine in verdicts if mine is False]
            if not foreign:
                return None, 1
            free_mib += sum(p.used_mib for p, mine in verdicts if mine)
            pids = ",".join(str(p.pid) for p in foreign)
            if free_mib < self.min_free_mib:
                return f"free {free_mib}MiB < {self.min_free_mib}MiB (foreign pid {pids} on a leased GPU)", 0
            if util > self.max_utilization:
                return f"util {util}% > {self.max_utilization}% (foreign pid {pids} on a leased GPU)", 0
            return None, 1
        if free_mib < self.min_free_mib:
            return f"free {free_mib}MiB < {self.min_free_mib}MiB", 0
        if util > self.max_utilization:
            return f"util {util}% > {self.max_utilization}%", 0
        return None, 0
