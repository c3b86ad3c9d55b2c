"""GPU usage of a finished pod: GPUs x the time its main container ran, as a usage-ledger record.

The run time is taken from the pod's own status, not from the Airflow task: the main container's
``state.terminated.startedAt``/``finishedAt`` (or ``state.running.startedAt`` until now, for a pod
that is being cleaned up while running), else the pod's ``status.startTime``. A pod whose container
never started (unschedulable, image pull failure) used no GPU time and gives no record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

from airflow_gpu_dag.budget import charge as budget_charge
from airflow_gpu_dag.gpu.usage import UsageRecord

__all__ = ["pod_run_window", "pod_usage_record"]


def _ts(value: Any) -> float | None:
    """Epoch seconds of a Kubernetes timestamp (a ``datetime`` or an ISO string); one without a zone is
    UTC, as the API's are, whatever the worker's local zone."""
    if isinstance(value, str) and value:
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return None


def pod_run_window(pod: Any, container: str = "base", now: float | None = None) -> tuple[float, float] | None:
    """``(start, end)`` epoch seconds of ``container`` in ``pod`` (a ``V1Pod``), or None if it never ran
    (or the pod has several containers, none of them ``container``)."""
    status = getattr(pod, "status", None)
    if status is None:
        return None
    statuses = list(getattr(status, "container_statuses", None) or [])
    # the container by name; a pod of one container whatever its name, never a guess among several
    # (the first of several may be a sidecar that ran far longer or shorter than the work)
    main = next(
        (s for s in statuses if getattr(s, "name", None) == container),
        statuses[0] if len(statuses) == 1 else None,
    )
    state = getattr(main, "state", None)
    terminated = getattr(state, "terminated", None)
    running = getattr(state, "running", None)
    start = _ts(getattr(terminated, "started_at", None)) or _ts(getattr(running, "started_at", None))
    if start is None and (terminated is not None or running is not None):
        start = _ts(getattr(status, "start_time", None))
    if start is None:
        return None
    end = _ts(getattr(terminated, "finished_at", None)) if terminated is not None else None
    if end is None:
        end = now if now is not None else datetime.now(UTC).timestamp()
    return start, max(start, end)


def pod_usage_record(
    pod: Any,
    *,
    gpus: int,
    dag_id: str | None,
    run_id: str | None,
    task_id: str | None,
    map_index: int = -1,
    try_number: int | None = None,
    pool: str | None = None,
    container: str = "base",
    now: float | None = None,
) -> UsageRecord | None:
    """The usage record of a finished pod (keyed ``pod:<namespace>/<name>:<uid>``), or None."""
    window = pod_run_window(pod, container, now)
    if window is None or gpus < 1:
        return None
    meta = getattr(pod, "metadata", None)
    namespace = getattr(meta, "namespace", None) or "default"
    name = getattr(meta, "name", None) or "?"
    uid = getattr(meta, "uid", None) or ""
    phase = getattr(getattr(pod, "status", None), "phase", None) or "unknown"
    return UsageRecord(
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        try_number=try_number,
        devices=tuple(range(int(gpus))),
        start=window[0],
        end=window[1],
        map_index=map_index,
        pool=pool,
        outcome=str(phase).lower(),
        lease_id=f"pod:{namespace}/{name}:{uid}",
        host=getattr(getattr(pod, "spec", None), "node_name", None),
        extra={"source": "pod"},
    )


def charge_finished_pod(
    pod: Any,
    *,
    gpus: int,
    context: Any,
    pool: str | None,
    container: str = "base",
    reread: Callable[[Any], Any] | None = None,
) -> bool:
    """Charge a finished pod's GPU time to the budget ledger (never raises); False when nothing was
    charged (the pod never ran, or the ledger could not be written).

    ``reread``: reads the pod again from the API when ``pod`` does not show its container ended: the
    pod an operator holds can be the snapshot taken when it was created (still Pending), when the task
    ended by an exception or a kill while the container ran (hours of GPU time charged as none).
    """
    if reread is not None and not _ended(pod, container):
        with suppress(Exception):
            pod = reread(pod) or pod
    ti = (context or {}).get("ti")
    map_index = getattr(ti, "map_index", -1)
    labels = getattr(getattr(pod, "metadata", None), "labels", None) or {}
    try:
        record = pod_usage_record(
            pod,
            gpus=gpus,
            dag_id=getattr(ti, "dag_id", None) or labels.get("dag_id"),
            run_id=getattr(ti, "run_id", None) or labels.get("run_id"),
            task_id=getattr(ti, "task_id", None) or labels.get("task_id"),
            map_index=map_index if isinstance(map_index, int) else -1,
            try_number=getattr(ti, "try_number", None),
            pool=pool,
            container=container,
        )
    except Exception:
        logging.getLogger(__name__).exception("budget: cannot read the run time of a finished pod")
        return False
    return record is not None and budget_charge.charge(record)


def _ended(pod: Any, container: str) -> bool:
    """True when ``pod``'s status shows ``container`` terminated."""
    statuses = getattr(getattr(pod, "status", None), "container_statuses", None) or []
    main = next((s for s in statuses if getattr(s, "name", None) == container), None)
    return getattr(getattr(main, "state", None), "terminated", None) is not None
