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


WATCHDOG_INTERVAL = "10s"


def watermark_watchdog_interval() -> float:
    """Seconds between the scheduler's fail-open checks of GPU pools
    (``[gpu_dag] watermark_watchdog_interval``, default 10s; 0 = off)."""
    raw = conf_get("watermark_watchdog_interval", WATCHDOG_INTERVAL) or WATCHDOG_INTERVAL
    try:
        return parse_duration(raw)
    except EstimateError as err:
        log.warning(
            "[gpu_dag] watermark_watchdog_interval %r is invalid (%s); using %s", raw, err, WATCHDOG_INTERVAL
        )
        return parse_duration(WATCHDOG_INTERVAL)
