"""Writing a task's contract into its ``executor_config``: the helpers DAG files call.

Custom operator attributes are dropped when Airflow serializes a DAG, but ``executor_config`` is
kept verbatim, and it is what the scheduler (priority strategy), the api-server (critical-path page),
the controller and the CLI see. The provider therefore stores a task's duration estimate, GPU request
and declared dataset paths under one key of ``executor_config``: the task contract
(:mod:`airflow_gpu_dag.contract`, its keys and schema in docs/task-contract.md). Executors ignore keys
they do not know (the KubernetesExecutor reads only ``pod_override``).

    from airflow_gpu_dag import gpu_hints

    BashOperator(task_id="train", bash_command="...",
                 executor_config=gpu_hints(duration="1h30m", gpus=4, gpu_memory="80GiB"))

Valid values are normalised here (seconds, MiB). An invalid value is kept as written: the provider's
cluster policy (``airflow.policy`` entry point) parses every task's contract, fails the DAG's import
with an error that names the DAG, the task and the fix, and writes the canonical form back;
``airflow gpu-dag lint`` reports the same. What runs later reads the contract with
:func:`airflow_gpu_dag.contract.read`, not these raw dicts.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_gpu_dag.contract import HINTS_KEY, WindowHint
from airflow_gpu_dag.contract import read as read_contract
from airflow_gpu_dag.core.model.resources import EstimateError, GpuRequest, parse_estimate

__all__ = [
    "HINTS_KEY",
    "control_task_hints",
    "duration_hint",
    "fallback_hint",
    "gpu_hints",
    "gpus_hint",
    "map_length_hint",
    "merge_hints",
    "read_hints",
    "request_hints",
    "window_hints",
]


def gpu_hints(
    duration: object = None,
    gpus: object = None,
    gpu_memory: object = None,
    gpu_type: str | None = None,
    inputs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] = (),
    outputs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] = (),
    awaits: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] = (),
    executor_config: Mapping[str, Any] | None = None,
    map_length: object = None,
) -> dict[str, Any]:
    """Return an ``executor_config`` dict carrying the hints (merged into ``executor_config``).

    :param duration: estimated run time: seconds, a timedelta, or ``"30m"``, ``"1h30m"``.
    :param gpus: whole GPUs the task needs (>= 1); omit for a CPU task.
    :param gpu_memory: free memory needed on each GPU: ``"80GiB"``, ``"80G"``, or an int of MiB.
    :param gpu_type: GPU family (``"a100"``, ``"h100"``); None = any.
    :param inputs: dataset paths/URIs the task reads (used to find hidden dependencies): a list, or one
        path (a string or ``os.PathLike``).
    :param outputs: dataset paths/URIs the task writes (a list, or one path).
    :param awaits: dataset paths/URIs whose completeness the task waits for (completeness sensors; a
        list, or one path).
    :param executor_config: an existing executor_config (e.g. with ``pod_override``) to merge into.
    :param map_length: for a task mapped over another task's output (``.expand(x=up.output)``), the
        number of instances expected; the plan, the UI and the controller's lookahead then show that
        many (a literal ``expand()`` argument or the instances of past runs win over it). A whole
        number from 0 to Airflow's ``[core] max_map_length`` (1024 by default; a longer list fails the
        upstream task that pushes it), else a parse-time error naming the task.
    """
    hints: dict[str, Any] = {}
    if duration is not None:
        hints["duration_s"] = _checked(parse_estimate, duration)
    if gpus is not None or gpu_memory is not None or gpu_type is not None:
        count = 1 if gpus is None else gpus
        try:
            request = GpuRequest.parse(count, gpu_memory, gpu_type)
        except EstimateError:
            # Kept as written: the cluster policy / lint reports it naming the DAG and the task.
            hints["gpus"] = _primitive(count)
            if gpu_memory is not None:
                hints["gpu_memory_mib"] = _primitive(gpu_memory)
            if gpu_type is not None:
                hints["gpu_type"] = _primitive(gpu_type)
        else:
            hints["gpus"] = request.count
            if request.memory_mib:
                hints["gpu_memory_mib"] = request.memory_mib
            if request.gpu_type:
                hints["gpu_type"] = request.gpu_type
    for key, paths in (("inputs", inputs), ("outputs", outputs), ("awaits", awaits)):
        listed = _paths(paths)
        if listed:
            hints[key] = listed
    if map_length is not None:
        hints["map_length"] = _primitive(map_length)  # checked (naming DAG and task) by the policy
    return merge_hints(executor_config, hints)


def _paths(paths: object) -> list[str]:
    """Dataset paths as a list of strings. One path (a string, ``bytes`` or an ``os.PathLike`` such as a
    ``pathlib.Path`` or an ``ObjectStoragePath``) is a list of one, not a list of its characters; a path
    is kept as ``str()`` writes it (an object storage path keeps its ``s3://``; one with a connection
    id is ``protocol://path``, without the ``conn@`` its ``str()`` puts in)."""
    # process boundary: the core imports the package root, hence this module, and must not load Airflow
    from airflow_gpu_dag.datasets.completeness import storage_url

    if paths is None or (isinstance(paths, str | bytes) and not paths):
        return []
    if isinstance(paths, str | bytes | os.PathLike):
        paths = [paths]
    if not isinstance(paths, Iterable):
        return [storage_url(paths)[0]]  # kept as written: one path
    return [os.fsdecode(p) if isinstance(p, bytes) else storage_url(p)[0] for p in paths]


def _primitive(value: object) -> object:
    return value if isinstance(value, str | int | float | bool) else repr(value)


def _checked(parse: Any, value: object) -> object:
    """Parsed value, or the raw value when it is invalid (reported later with DAG and task names)."""
    try:
        return parse(value)
    except EstimateError:
        return _primitive(value)


def merge_hints(executor_config: Mapping[str, Any] | None, hints: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of ``executor_config`` with ``hints`` merged under :data:`HINTS_KEY`.

    :raises TypeError: ``executor_config`` (or the hints already in it) is not a mapping.
    """
    if executor_config is not None and not isinstance(executor_config, Mapping):
        raise TypeError(
            f"executor_config must be a dict, e.g. executor_config={{'pod_override': ...}}, not "
            f"{type(executor_config).__name__} {executor_config!r:.80}"
        )
    merged = dict(executor_config or {})
    ours = merged.get(HINTS_KEY) or {}
    if not isinstance(ours, Mapping):
        raise TypeError(
            f"executor_config[{HINTS_KEY!r}] holds this provider's hints and must be a dict, not "
            f"{type(ours).__name__}; set them with gpu_hints(...) instead"
        )
    merged[HINTS_KEY] = {**dict(ours), **hints}
    return merged


def control_task_hints(executor_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``executor_config`` for a task the provider adds to wire the graph (sensor, gate, branch):
    a duration estimate of 0 unless one is declared, so the plan and the critical path are not
    padded with the default estimate and the lint does not ask for an estimate the user never wrote."""
    if "duration_s" in read_hints(executor_config):
        return dict(executor_config or {})
    return merge_hints(executor_config, {"duration_s": 0.0})


def read_hints(executor_config: object) -> dict[str, Any]:
    """The raw hints dict of a task's ``executor_config``, as written (empty when there are none or it is
    unreadable): what the authoring helpers merge into before the cluster policy has parsed it. Code
    that uses the hints reads the parsed contract instead (:func:`airflow_gpu_dag.contract.read`).

    The REST API returns ``executor_config`` as ``str(dict)``; that form is read with
    ``ast.literal_eval`` (never ``eval``).
    """
    if isinstance(executor_config, str):
        try:
            executor_config = ast.literal_eval(executor_config) if executor_config.strip() else {}
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # TypeError: {[1]: 2}
            return {}
    if isinstance(executor_config, Mapping):
        hints = executor_config.get(HINTS_KEY)
        if isinstance(hints, Mapping):
            return dict(hints)
    return {}


def duration_hint(executor_config: object) -> float | None:
    """The declared estimate of a task instance's ``executor_config`` (a dict, or the REST API's
    ``str(dict)``), in seconds, from its contract; None when absent or malformed."""
    return read_contract(executor_config).duration_s


def gpus_hint(executor_config: object) -> int | None:
    """The GPU count of a task instance's contract (None: no GPU, or a malformed request)."""
    return read_contract(executor_config).gpus


def map_length_hint(executor_config: object) -> int | None:
    """The declared ``map_length`` of a task instance's contract (None when absent or malformed)."""
    return read_contract(executor_config).map_length


def fallback_hint(executor_config: object) -> dict[str, Any] | None:
    """The fallback-rung hint of a task instance's contract, as its wire dict (None: not a rung)."""
    fallback = read_contract(executor_config).fallback
    return fallback.to_wire() if fallback is not None else None


def request_hints(
    request: GpuRequest,
    duration_s: float | None = None,
    inputs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] = (),
    outputs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] = (),
    executor_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``executor_config`` with the hints of a GPU request already parsed (the GPU operators parse it
    once, when the task is declared): ``gpu_memory_mib`` and ``gpu_type`` are those of ``request``, a
    re-declaration that drops them drops them here too."""
    hints: dict[str, Any] = {"gpus": request.count}
    if request.memory_mib:
        hints["gpu_memory_mib"] = request.memory_mib
    if request.gpu_type:
        hints["gpu_type"] = request.gpu_type
    if duration_s is not None:
        hints["duration_s"] = duration_s
    for key, paths in (("inputs", inputs), ("outputs", outputs)):
        if listed := _paths(paths):
            hints[key] = listed
    merged = merge_hints(executor_config, hints)
    for key in ("gpu_memory_mib", "gpu_type"):
        if key not in hints:
            merged[HINTS_KEY].pop(key, None)
    return merged


def window_hints(executor_config: Mapping[str, Any] | None, window: WindowHint) -> dict[str, Any]:
    """``executor_config`` with a start window (``start_window`` gates a task and its sensor so)."""
    return merge_hints(executor_config, {"window": window.to_wire()})
