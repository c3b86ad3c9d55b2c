"""The GPU inventory of this host: which devices exist, their type, memory, utilisation and health.

Two sources:

* ``nvml``: the real devices, read through NVML (``pynvml`` from the ``nvidia-ml-py`` package).
* ``static``: a fixed inventory from configuration, for machines without GPUs (demo, CI) or to
  describe a host. ``[gpu_dag] inventory`` (env ``AIRFLOW__GPU_DAG__INVENTORY``) holds either JSON::

      {"gpus": [{"index": 0, "type": "a100", "memory": "80GiB"},
                {"index": 1, "type": "a100", "memory": "80GiB"}]}

  or the shorthand ``"4xa100:80GiB"`` (several groups separated by commas:
  ``"4xa100:80GiB,2xv100:16GiB"``; memory may be omitted: ``"2xa100"``).

``[gpu_dag] inventory_source`` picks one: ``auto`` (default: NVML when it works and sees at least one
device, else the static inventory), ``nvml`` or ``static``.

Parse-time checks (the GPU operators, the cluster policy, ``airflow gpu-dag lint``) run where DAG files
are parsed, which is seldom a worker: with ``auto`` they use the static inventory only (it describes
the workers), never the GPUs of the parsing host; those only with ``inventory_source = nvml``
(:func:`parse_time_inventory`).

:class:`GpuDevice` and :class:`GpuInventory` are plain data; only :func:`nvml_inventory` touches NVML.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_gpu_dag.core.analysis.gpu_requests import InventorySummary, device_could_hold
from airflow_gpu_dag.core.model.pools import normalize_gpu_type, pool_sizes_for_devices
from airflow_gpu_dag.core.model.resources import EstimateError, format_memory, parse_memory_mib
from airflow_gpu_dag.settings import conf_get, log_config_problem

__all__ = [
    "AUTO",
    "NVML",
    "STATIC",
    "GpuDevice",
    "GpuInventory",
    "InventoryError",
    "InventoryUnavailable",
    "configured_inventory_source",
    "configured_inventory_spec",
    "gpu_type_from_name",
    "inventory_problem",
    "load_inventory",
    "nvml_inventory",
    "parse_inventory",
    "parse_time_inventory",
    "parse_time_inventory_summary",
    "parse_time_pool_sizes",
    "parse_time_source",
    "visible_to",
]

AUTO = "auto"
NVML = "nvml"
STATIC = "static"
SOURCES = (AUTO, NVML, STATIC)

_INVENTORY_HELP = (
    'set [gpu_dag] inventory (env AIRFLOW__GPU_DAG__INVENTORY) to a shorthand such as "4xa100:80GiB" '
    'or JSON {"gpus": [{"index": 0, "type": "a100", "memory": "80GiB"}]}'
)


class InventoryError(ValueError):
    """The inventory configuration cannot be understood."""


class InventoryUnavailable(RuntimeError):
    """The requested inventory source cannot be used here (no NVML, no configuration)."""


@dataclass(frozen=True)
class GpuDevice:
    """One GPU of this host.

    ``index`` is the NVML/PCI-bus index (what ``CUDA_VISIBLE_DEVICES`` names with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``). ``gpu_type`` is the normalised family (``"a100"``); ``name`` the
    full product name. Memory is in MiB; ``memory_total_mib`` None means unknown (a static
    inventory that gave no size: memory requests are then not checked against this device).
    ``memory_free_mib`` None means "no live reading" and is taken to be the total.
    """

    index: int
    gpu_type: str
    memory_total_mib: int | None = None
    memory_free_mib: int | None = None
    uuid: str | None = None
    name: str | None = None
    utilization_pct: float | None = None
    healthy: bool = True
    health_reason: str | None = None

    @property
    def free_mib(self) -> int | None:
        """Free memory now: the live reading, else the total (None when unknown)."""
        return self.memory_free_mib if self.memory_free_mib is not None else self.memory_total_mib

    def matches_type(self, gpu_type: str | None) -> bool:
        """True when ``gpu_type`` is None (any) or names this device's type."""
        return gpu_type is None or normalize_gpu_type(gpu_type) == self.gpu_type

    def could_ever_fit(self, memory_mib: int | None, gpu_type: str | None) -> bool:
        """True when this device could hold the request if it were idle (type and total memory)."""
        return device_could_hold(self.gpu_type, self.memory_total_mib, memory_mib, gpu_type)

    def fits_now(self, memory_mib: int | None, gpu_type: str | None) -> bool:
        """True when this device is healthy, of the type and has ``memory_mib`` free right now."""
        if not self.healthy or not self.matches_type(gpu_type):
            return False
        free = self.free_mib
        return not memory_mib or free is None or free >= memory_mib

    def describe(self) -> str:
        """``#0 a100 80GiB (free 79GiB)``."""
        text = f"#{self.index} {self.gpu_type}"
        if self.memory_total_mib is not None:
            text += f" {format_memory(self.memory_total_mib)}"
        if self.memory_free_mib is not None and self.memory_free_mib != self.memory_total_mib:
            text += f" (free {format_memory(self.memory_free_mib)})"
        if not self.healthy:
            text += f" UNHEALTHY: {self.health_reason or 'unknown'}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuInventory:
    """The devices of one host and where the list came from (``"nvml"`` or ``"static"``)."""

    devices: tuple[GpuDevice, ...]
    source: str = STATIC
    host: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        indices = [d.index for d in self.devices]
        if len(set(indices)) != len(indices):
            raise InventoryError(f"GPU indices must be unique, got {indices}; {_INVENTORY_HELP}")
        for device in self.devices:
            if device.index < 0:
                raise InventoryError(f"GPU index {device.index} must be >= 0; {_INVENTORY_HELP}")
        # leases match devices by UUID: one UUID on two GPUs would let one of them be leased twice
        uuids = [d.uuid for d in self.devices if d.uuid]
        if len(set(uuids)) != len(uuids):
            raise InventoryError(f"GPU UUIDs must be unique, got {uuids}; {_INVENTORY_HELP}")

    def __len__(self) -> int:
        return len(self.devices)

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def indices(self) -> list[int]:
        return [d.index for d in self.devices]

    @property
    def types(self) -> frozenset[str]:
        """The GPU types present (normalised)."""
        return frozenset(d.gpu_type for d in self.devices)

    def device(self, index: int) -> GpuDevice:
        for device in self.devices:
            if device.index == index:
                return device
        raise KeyError(f"no GPU with index {index} in the inventory ({self.indices})")

    def pool_sizes(self) -> dict[str, int]:
        """Full pool sizes this host stands for: ``{"gpu_default": n, "gpu_<type>": m, ...}``."""
        return pool_sizes_for_devices(d.gpu_type for d in self.devices)

    def summary(self) -> InventorySummary:
        """The devices as plain data for the request checks of
        :mod:`airflow_gpu_dag.core.analysis.gpu_requests`."""
        return InventorySummary(
            tuple((d.gpu_type, d.memory_total_mib) for d in self.devices), self.source, self.describe()
        )

    def max_fitting(self, memory_mib: int | None = None, gpu_type: str | None = None) -> int:
        """How many devices could ever hold one GPU of this request (type, total memory)."""
        return sum(1 for d in self.devices if d.could_ever_fit(memory_mib, gpu_type))

    def why_impossible(
        self, count: int, memory_mib: int | None = None, gpu_type: str | None = None
    ) -> str | None:
        """Why ``count`` GPUs of this kind can never be leased on this host, or None when they can."""
        if gpu_type is not None and normalize_gpu_type(gpu_type) not in self.types:
            known = ", ".join(sorted(self.types)) or "none"
            return f"GPU type {gpu_type!r} is not in the inventory (types here: {known})"
        fitting = self.max_fitting(memory_mib, gpu_type)
        if count > fitting:
            kind = f"{gpu_type} " if gpu_type else ""
            mem = f" with {format_memory(memory_mib)}" if memory_mib else ""
            return (
                f"{count} {kind}GPU(s){mem} requested but this host has only {fitting} such device(s) "
                f"(inventory: {self.describe()})"
            )
        return None

    def describe(self) -> str:
        return ", ".join(d.describe() for d in self.devices) or "no GPUs"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "host": self.host, "gpus": [d.to_dict() for d in self.devices]}


# -- names ------------------------------------------------------------------------------------------
_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro", "titan"}


def gpu_type_from_name(name: str) -> str:
    """GPU family from an NVML product name.

    ``"NVIDIA A100-SXM4-80GB"`` -> ``"a100"``, ``"NVIDIA H100 80GB HBM3"`` -> ``"h100"``,
    ``"NVIDIA GeForce RTX 4090"`` -> ``"rtx_4090"``, ``"Tesla V100-SXM2-16GB"`` -> ``"v100"``.
    """
    tokens = [t for t in re.split(r"\s+", str(name).strip()) if t]
    words = [t for t in tokens if t.lower() not in _VENDOR_WORDS]
    picked: list[str] = []
    for word in words:
        base = word.split("-")[0]
        picked.append(base)
        if any(ch.isdigit() for ch in base):
            break
    text = "_".join(picked) if picked else str(name)
    try:
        return normalize_gpu_type(text)
    except ValueError:
        return "gpu"


# -- static -----------------------------------------------------------------------------------------
_SHORTHAND = re.compile(r"^\s*(?:(\d+)\s*[xX*]\s*)?([A-Za-z][\w.\- ]*?)\s*(?::\s*(\S+))?\s*$")


def _memory(value: object, where: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return parse_memory_mib(value)
    except EstimateError as err:
        raise InventoryError(f"{where}: {err}") from None


def _is_memory(word: str) -> bool:
    try:
        return any(c.isdigit() for c in word) and parse_memory_mib(word) > 0
    except EstimateError:
        return False


def _gpu_type(raw: str, where: str) -> str:
    try:
        return normalize_gpu_type(raw)
    except ValueError as err:
        raise InventoryError(f"{where}: {err}") from None


#: GPUs a static inventory may describe (a count of 10**20, a typo, hung the scheduler building them).
MAX_INVENTORY_GPUS = 65_536


def _parse_shorthand(text: str) -> list[GpuDevice]:
    devices: list[GpuDevice] = []
    for part in text.split(","):
        if not part.strip():
            continue
        match = _SHORTHAND.match(part)
        if not match:
            raise InventoryError(f"inventory part {part.strip()!r} cannot be parsed; {_INVENTORY_HELP}")
        digits = match.group(1)
        if digits and len(digits) > len(str(MAX_INVENTORY_GPUS)):  # int() refuses 4,300 digits and more
            raise InventoryError(
                f"inventory part {part.strip()!r}: more than {MAX_INVENTORY_GPUS} GPUs in all"
            )
        count = int(digits) if digits else 1
        if count <= 0:
            raise InventoryError(f"inventory part {part.strip()!r} has a GPU count of 0; {_INVENTORY_HELP}")
        if len(devices) + count > MAX_INVENTORY_GPUS:  # one object per GPU: a typo would fill the memory
            raise InventoryError(
                f"inventory part {part.strip()!r}: more than {MAX_INVENTORY_GPUS} GPUs in all"
            )
        words = match.group(2).split()
        if len(words) > 1 and _is_memory(words[-1]):  # "4xa100 80GiB": the memory without its colon
            raise InventoryError(
                f"inventory part {part.strip()!r}: {words[-1]!r} reads as part of the GPU type; put a colon "
                f"before the memory: '{match.group(1) or 1}x{' '.join(words[:-1])}:{words[-1]}'"
            )
        gpu_type = _gpu_type(match.group(2), f"inventory part {part.strip()!r}")
        memory = _memory(match.group(3), f"inventory part {part.strip()!r}")
        if memory == 0:
            raise InventoryError(
                f"inventory part {part.strip()!r}: memory must be more than 0 (leave it out when unknown)"
            )
        for _ in range(count):
            devices.append(GpuDevice(index=len(devices), gpu_type=gpu_type, memory_total_mib=memory))
    return devices


def _device_from_mapping(item: Mapping[str, Any], position: int) -> GpuDevice:
    where = f"inventory GPU #{position}"
    unknown = set(item) - {
        "index",
        "type",
        "gpu_type",
        "memory",
        "memory_total",
        "free_memory",
        "memory_free",
        "uuid",
        "name",
        "healthy",
        "utilization",
    }
    if unknown:
        raise InventoryError(f"{where} has unknown keys {sorted(unknown)}; {_INVENTORY_HELP}")
    index = item.get("index", position)
    if isinstance(index, bool) or not isinstance(index, int):
        raise InventoryError(f"{where}: index {index!r} must be an integer")
    raw_type = item.get("type", item.get("gpu_type"))
    name = item.get("name")
    for key, value in (("type", raw_type), ("name", name), ("uuid", item.get("uuid"))):
        if value is not None and not isinstance(value, str):  # str() would make a type up: "a100_h100"
            raise InventoryError(f'{where}: {key}={value!r} must be a string, e.g. "a100"')
    if raw_type:
        gpu_type = _gpu_type(str(raw_type), where)
    elif name:
        gpu_type = gpu_type_from_name(str(name))
    else:
        raise InventoryError(f"{where} has no 'type' (e.g. \"a100\"); {_INVENTORY_HELP}")
    total = _memory(item.get("memory", item.get("memory_total")), where)
    if total == 0:
        raise InventoryError(f"{where}: memory must be more than 0 (leave it out when unknown)")
    free = _memory(item.get("free_memory", item.get("memory_free")), where)
    util = item.get("utilization")
    healthy = item.get("healthy", True)
    if not isinstance(healthy, bool):  # "false" would be truthy: the GPU would still be leased
        raise InventoryError(f"{where}: healthy={healthy!r} must be true or false (JSON booleans)")
    if util is not None and (
        isinstance(util, bool) or not isinstance(util, int | float) or not 0 <= util <= 100  # NaN fails too
    ):
        raise InventoryError(f"{where}: utilization={util!r} must be a number (percent, 0 to 100)")
    return GpuDevice(
        index=index,
        gpu_type=gpu_type,
        memory_total_mib=total,
        memory_free_mib=free,
        uuid=str(item["uuid"]) if item.get("uuid") else None,
        name=str(name) if name else None,
        utilization_pct=float(util) if util is not None else None,
        healthy=healthy,
        health_reason=None if healthy else "marked unhealthy in the static inventory",
    )


def parse_inventory(spec: str | Mapping[str, Any] | Sequence[Any], host: str | None = None) -> GpuInventory:
    """A static :class:`GpuInventory` from JSON text, a parsed JSON value, or the shorthand."""
    value: Any = spec
    if isinstance(spec, str):
        text = spec.strip()
        if not text:
            raise InventoryError(f"the static inventory is empty; {_INVENTORY_HELP}")
        if text[0] in "[{":
            try:
                value = json.loads(text)
            except ValueError as err:
                raise InventoryError(f"inventory JSON cannot be parsed ({err}); {_INVENTORY_HELP}") from None
        else:
            devices = _parse_shorthand(text)
            if not devices:  # " , ," is as empty as "" (which is refused above)
                raise InventoryError(
                    f"the static inventory is empty ({text!r} lists no GPUs); {_INVENTORY_HELP}"
                )
            return GpuInventory(tuple(devices), source=STATIC, host=host)
    items: Any = value.get("gpus") if isinstance(value, Mapping) else value
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        raise InventoryError(f"inventory must list GPUs under 'gpus'; {_INVENTORY_HELP}")
    devices = []
    for position, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InventoryError(f"inventory GPU #{position} must be an object; {_INVENTORY_HELP}")
        devices.append(_device_from_mapping(item, position))
    return GpuInventory(tuple(devices), source=STATIC, host=host)


# -- NVML -------------------------------------------------------------------------------------------
def _nvml_text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_inventory() -> GpuInventory:
    """The real devices through NVML. Raises :class:`InventoryUnavailable` when NVML cannot be used."""
    try:
        import pynvml  # optional dependency: the nvml extra
    except ImportError as err:
        raise InventoryUnavailable(
            "pynvml is not installed; pip install nvidia-ml-py (extra airflow-gpu-dag[nvml])"
        ) from err
    try:
        pynvml.nvmlInit()
    except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise InventoryUnavailable(f"NVML cannot be initialised: {err}") from err
    try:
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        except Exception as err:  # "GPU is lost", a driver/library mismatch: NVML is of no use here
            raise InventoryUnavailable(f"NVML cannot count the GPUs: {err}") from err
        devices = [_nvml_device(pynvml, i) for i in range(count)]
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return GpuInventory(tuple(devices), source=NVML, host=socket.gethostname())


def _nvml_device(pynvml: Any, index: int) -> GpuDevice:
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as err:
        return GpuDevice(index=index, gpu_type="unknown", healthy=False, health_reason=f"no handle: {err}")
    name = uuid = None
    total = free = None
    util: float | None = None
    problems: list[str] = []
    try:
        name = _nvml_text(pynvml.nvmlDeviceGetName(handle))
        uuid = _nvml_text(pynvml.nvmlDeviceGetUUID(handle))
    except Exception as err:
        problems.append(f"identity unreadable ({err})")
    try:
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        total, free = int(memory.total) // (1024 * 1024), int(memory.free) // (1024 * 1024)
    except Exception as err:
        problems.append(f"memory unreadable ({err})")
    try:
        util = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except Exception as err:
        if "Not Supported" not in str(err):
            problems.append(f"utilisation unreadable ({err})")
    try:  # Ampere+: rows that could not be remapped mean failing memory
        remap = pynvml.nvmlDeviceGetRemappedRows(handle)
        if len(remap) >= 4 and remap[3]:
            problems.append("row remapping failed (failing memory)")
    except Exception:
        pass  # not supported on this GPU/driver
    return GpuDevice(
        index=index,
        gpu_type=gpu_type_from_name(name) if name else "unknown",
        memory_total_mib=total,
        memory_free_mib=free,
        uuid=uuid,
        name=name,
        utilization_pct=util,
        healthy=not problems,
        health_reason="; ".join(problems) or None,
    )


# -- configuration ----------------------------------------------------------------------------------
def configured_inventory_source() -> str:
    """``[gpu_dag] inventory_source``: ``auto`` (default), ``nvml`` or ``static``."""
    raw = (conf_get("inventory_source", AUTO) or AUTO).strip().lower()
    if raw not in SOURCES:
        raise InventoryError(f"[gpu_dag] inventory_source {raw!r} must be one of {', '.join(SOURCES)}")
    return raw


def configured_inventory_spec() -> str | None:
    """``[gpu_dag] inventory`` (static inventory text), or None when unset."""
    raw = conf_get("inventory", None)
    return raw.strip() if raw and raw.strip() else None


def inventory_problem() -> tuple[str, str] | None:
    """``(option, what is wrong)`` when ``[gpu_dag] inventory_source`` or ``[gpu_dag] inventory`` cannot
    be understood, else None: what ``airflow gpu-dag lint`` and the watermark controller refuse, and
    what the parse-time checks log once (they then check against no inventory). Never raises."""
    raw = (conf_get("inventory_source", AUTO) or AUTO).strip().lower()
    if raw not in SOURCES:
        return "inventory_source", f"{raw!r} is not one of {', '.join(SOURCES)}"
    spec = configured_inventory_spec()
    if spec:
        try:
            parse_inventory(spec)
        except InventoryError as err:
            return "inventory", f"{spec!r} cannot be read: {err}"
    return None


def load_inventory(source: str | None = None, spec: str | None = None) -> GpuInventory:
    """This host's inventory from ``source`` (default ``[gpu_dag] inventory_source``).

    ``auto``: NVML when it works and sees at least one GPU, else the static inventory. ``spec``
    overrides ``[gpu_dag] inventory``. Raises :class:`InventoryUnavailable` when neither works.
    """
    source = (source or configured_inventory_source()).lower()
    if source not in SOURCES:
        raise InventoryError(f"inventory source {source!r} must be one of {', '.join(SOURCES)}")
    nvml_problem = None
    if source in (NVML, AUTO):
        try:
            inventory = nvml_inventory()
            if inventory.devices or source == NVML:
                return inventory
            nvml_problem = "NVML sees no GPUs"
        except InventoryUnavailable as err:
            if source == NVML:
                raise
            nvml_problem = str(err)
    spec = spec if spec is not None else configured_inventory_spec()
    if not spec:
        prefix = f"no GPUs found ({nvml_problem}) and " if nvml_problem else ""
        raise InventoryUnavailable(f"{prefix}no static inventory is configured; {_INVENTORY_HELP}")
    return parse_inventory(spec, host=socket.gethostname())


def parse_time_source(source: str) -> str:
    """The inventory source parse-time checks use for ``[gpu_dag] inventory_source = source``: ``auto``
    is the static inventory, not NVML. DAG files are parsed by a dag-processor (or a CI job) that
    seldom has the workers' GPUs: one with a T4 of its own would refuse every DAG asking for the
    workers' a100s. The parsing host's own GPUs are used only when asked for (``nvml``)."""
    return STATIC if source == AUTO else source


@functools.lru_cache(maxsize=8)
def _parse_time_for(source: str, spec: str | None) -> GpuInventory | None:
    try:
        return load_inventory(source, spec)
    except InventoryUnavailable:
        return None


def parse_time_inventory() -> GpuInventory | None:
    """The inventory GPU declarations are checked against while DAG files are parsed (the GPU
    operators, the cluster policy, ``airflow gpu-dag lint``): the static inventory
    (``[gpu_dag] inventory``) with ``inventory_source`` ``auto`` or ``static``, this host's NVML
    devices only with ``nvml`` (:func:`parse_time_source`); None when there is none (requests are then
    checked against ``[gpu_dag] pools`` and ``max_gpus_per_host`` only). Cached per process and
    configuration.

    Never raises: an inventory configuration that cannot be understood is logged once as an error
    naming the option (lint and the watermark controller refuse it: :func:`inventory_problem`), and no
    inventory is used, so no DAG fails its import on it."""
    try:
        return _parse_time_for(parse_time_source(configured_inventory_source()), configured_inventory_spec())
    except InventoryError as err:
        option, problem = inventory_problem() or ("inventory", str(err))
        log_config_problem(
            option, problem, "GPU requests are checked against no inventory when DAGs are parsed"
        )
        return None


def parse_time_inventory_summary() -> InventorySummary | None:
    """:func:`parse_time_inventory` as plain data for the parse-time request checks of the cluster
    policy and ``airflow gpu-dag lint``. Never raises."""
    inventory = parse_time_inventory()
    return inventory.summary() if inventory is not None else None


def parse_time_pool_sizes() -> dict[str, int] | None:
    """The GPU pools the static inventory stands for (``{"gpu_default": 8, "gpu_a100": 8}``; the
    capacities the cross-DAG weights use when ``[gpu_dag] pools`` is unset), or None when the
    parse-time inventory is not a static one."""
    inventory = parse_time_inventory()
    if inventory is None or inventory.source != STATIC:
        return None
    return {pool: size for pool, size in inventory.pool_sizes().items() if size > 0}


def devices_by_index(devices: Iterable[GpuDevice]) -> dict[int, GpuDevice]:
    return {d.index: d for d in devices}


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
