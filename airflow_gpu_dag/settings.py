"""Provider settings, read from Airflow's configuration section ``[gpu_dag]``.

Every option can also be set through the environment, e.g. ``AIRFLOW__GPU_DAG__DEFAULT_DURATION``.
Documented in ``get_provider_info()["config"]`` so ``airflow config list`` shows them.
"""

from __future__ import annotations

import json
import logging

from airflow_gpu_dag.core.estimates import EstimateSettings
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


def _conf_number(key: str, default: float, kind: type = float) -> float:
    raw = conf_get(key, None)
    if raw is None or not str(raw).strip():
        return default
    try:
        return kind(str(raw).strip())
    except ValueError:
        log.warning("[gpu_dag] %s %r is not a number; using %s", key, raw, default)
        return default


def estimate_settings() -> EstimateSettings:
    """How durations are learned from past runs: ``[gpu_dag] learned_durations`` (true/false, default
    true), ``learned_window`` (last N successful tries, 20), ``learned_quantile`` (0.9),
    ``learned_min_runs`` (3) and ``learned_flag_factor`` (1.5). An invalid value is logged and the
    default used."""
    enabled = (conf_get("learned_durations", "true") or "true").strip().lower() not in (
        "false",
        "0",
        "off",
        "no",
    )
    default = EstimateSettings()
    values = {
        "window": int(_conf_number("learned_window", default.window, int)),
        "quantile": _conf_number("learned_quantile", default.quantile),
        "min_runs": int(_conf_number("learned_min_runs", default.min_runs, int)),
        "flag_factor": _conf_number("learned_flag_factor", default.flag_factor),
    }
    try:
        return EstimateSettings(enabled=enabled, **values)  # type: ignore[arg-type]
    except ValueError as err:
        log.warning("[gpu_dag] learned_* options are invalid (%s); using the defaults", err)
        return EstimateSettings(enabled=enabled)


#: What the watermark controller does with a waiting task larger than its pool's capacity.
TOO_LARGE_ACTIONS = ("fail", "keep")


def too_large_policy() -> tuple[int, str]:
    """``([gpu_dag] too_large_intervals, [gpu_dag] too_large_action)``: after how many controller
    intervals (default 3) a waiting task whose request exceeds its pool's capacity (or every host's GPU
    count) is acted on, and how: ``fail`` (default: the task instance is failed with a note naming the
    task, the request and the capacity) or ``keep`` (it waits, shown in the pool description, the log
    and the UI)."""
    intervals = int(_conf_number("too_large_intervals", 3, int))
    if intervals < 1:
        log.warning("[gpu_dag] too_large_intervals %r must be >= 1; using 3", intervals)
        intervals = 3
    action = (conf_get("too_large_action", "fail") or "fail").strip().lower()
    if action not in TOO_LARGE_ACTIONS:
        log.warning("[gpu_dag] too_large_action %r must be fail or keep; using fail", action)
        action = "fail"
    return intervals, action
