"""Provider settings, read from Airflow's configuration section ``[gpu_dag]``.

Every option can also be set through the environment, e.g. ``AIRFLOW__GPU_DAG__DEFAULT_DURATION``.
Documented in ``get_provider_info()["config"]`` so ``airflow config list`` shows them.
"""

from __future__ import annotations

import json
import logging

from airflow_gpu_dag.core.resources import EstimateError, parse_duration

log = logging.getLogger(__name__)

SECTION = "gpu_dag"
DEFAULT_DURATION = "30m"


def conf_get(key: str, fallback: str | None) -> str | None:
    """``[gpu_dag] key`` from Airflow's configuration (env ``AIRFLOW__GPU_DAG__KEY``), or ``fallback``."""
    try:
        from airflow.configuration import conf

        return conf.get(SECTION, key, fallback=fallback)
    except Exception:  # outside a configured Airflow (pure tests)
        return fallback


def default_duration_seconds() -> float:
    """Estimate used for tasks that declare none (``[gpu_dag] default_duration``, default 30m)."""
    raw = conf_get("default_duration", DEFAULT_DURATION) or DEFAULT_DURATION
    try:
        return parse_duration(raw)
    except EstimateError as err:
        log.warning("[gpu_dag] default_duration %r is invalid (%s); using %s", raw, err, DEFAULT_DURATION)
        return parse_duration(DEFAULT_DURATION)


def pool_capacities() -> dict[str, int] | None:
    """Known GPU pools and their full size for parse-time validation.

    ``[gpu_dag] pools`` is a JSON object ``{"gpu_default": 8, "gpu_a100": 4}``. When unset, pools
    are not checked at parse time (the dag-processor has no database access).
    """
    raw = conf_get("pools", None)
    if not raw:
        return None
    try:
        value = json.loads(raw)
        return {str(k): int(v) for k, v in value.items()}
    except (ValueError, TypeError, AttributeError) as err:
        log.warning("[gpu_dag] pools %r is not a JSON object of pool -> slots (%s); ignoring it", raw, err)
        return None


def max_gpus_per_host() -> int | None:
    """The largest single host/node (``[gpu_dag] max_gpus_per_host``), or None when unknown."""
    raw = conf_get("max_gpus_per_host", None)
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        log.warning("[gpu_dag] max_gpus_per_host %r is not an integer; ignoring it", raw)
        return None


def queue_sites() -> dict[str, dict[str, object]] | None:
    """``[gpu_dag] queues``: executor queue -> ``{"pool", "cpu_pool", "node_labels"}`` (a bare string
    is the pool), or None when unset. A malformed value raises ``ValueError`` (it is what affinity
    helpers check DAG files against, so it must not be ignored silently)."""
    raw = conf_get("queues", None)
    if not raw or not raw.strip():
        return None
    try:
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise TypeError("not a JSON object")
        sites: dict[str, dict[str, object]] = {}
        for queue, site in value.items():
            entry = {"pool": site} if isinstance(site, str) else dict(site)
            unknown = set(entry) - {"pool", "cpu_pool", "node_labels"}
            if unknown:
                raise TypeError(f"queue {queue!r} has unknown keys {sorted(unknown)}")
            sites[str(queue)] = entry
    except (ValueError, TypeError, AttributeError) as err:
        raise ValueError(
            f"[gpu_dag] queues {raw!r} is not a JSON object of queue -> pool or "
            f'{{"pool", "cpu_pool", "node_labels"}} ({err})'
        ) from None
    return sites
