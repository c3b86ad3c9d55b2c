"""Provider settings, read from Airflow's configuration section ``[gpu_dag]``.

Every option can also be set through the environment, e.g. ``AIRFLOW__GPU_DAG__DEFAULT_DURATION``.
Documented in ``get_provider_info()["config"]`` so ``airflow config list`` shows them.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_gpu_dag.core.analysis.estimates import EstimateSettings
from airflow_gpu_dag.core.model.pools import pool_name_problem
from airflow_gpu_dag.core.model.resources import (
    EstimateError,
    format_duration,
    parse_duration,
    parse_estimate,
)
from airflow_gpu_dag.core.policy.objective import (
    DEFAULT_EPOCH,
    DEFAULT_OBJECTIVE,
    KEY_WEIGHT_FLOOR,
    MAX_OVERDUE,
    OBJECTIVES,
    STAGE_LENGTH,
    get_objective,
    stage_length_problem,
)
from airflow_gpu_dag.log_once import LogOnce

if TYPE_CHECKING:
    from collections.abc import Callable

    from airflow_gpu_dag.core.policy.objective import Objective

log = logging.getLogger(__name__)

SECTION = "gpu_dag"
DEFAULT_DURATION = "30m"


def conf_get(key: str, fallback: str | None) -> str | None:
    """``[gpu_dag] key`` from Airflow's configuration (env ``AIRFLOW__GPU_DAG__KEY``), or ``fallback``."""
    try:
        # process boundary: importing the settings never loads Airflow (scripts use gpu.lease); reading does
        from airflow.configuration import conf

        return conf.get(SECTION, key, fallback=fallback)
    except Exception:  # outside a configured Airflow (pure tests)
        return fallback


#: Airflow's own default of ``[core] max_map_length``.
MAX_MAP_LENGTH = 1024


def max_map_length() -> int:
    """Airflow's ``[core] max_map_length``: the longest list an upstream task may push for a mapped
    task to expand over (a longer one fails that task); 1024 when unset or unreadable."""
    try:
        from airflow.configuration import conf  # process boundary: see conf_get

        value = conf.getint("core", "max_map_length", fallback=MAX_MAP_LENGTH)
    except Exception:  # outside a configured Airflow, or not a number
        return MAX_MAP_LENGTH
    return value if value >= 0 else MAX_MAP_LENGTH


def default_duration_seconds() -> float:
    """Estimate used for tasks that declare none (``[gpu_dag] default_duration``, default 30m)."""
    raw = conf_get("default_duration", DEFAULT_DURATION) or DEFAULT_DURATION
    try:
        return parse_estimate(raw)  # capped as a declared estimate is: weights stay in int32
    except EstimateError as err:
        log.warning("[gpu_dag] default_duration %r is invalid (%s); using %s", raw, err, DEFAULT_DURATION)
        return parse_duration(DEFAULT_DURATION)


def _pool_sizes(raw: str) -> dict[str, int] | str:
    """``[gpu_dag] pools`` parsed, or what is wrong with it."""
    try:
        value = json.loads(raw)
    except ValueError as err:
        return f"is not JSON ({err})"
    if not isinstance(value, dict):
        return "is not a JSON object of pool -> slots"
    sizes: dict[str, int] = {}
    for name, slots in value.items():
        if problem := pool_name_problem(str(name)):
            return problem
        if isinstance(slots, str) and slots.isascii() and slots.strip().isdecimal() and len(slots) < 4300:
            # isdecimal: int() refuses "²"; isascii: int() would read full-width digits silently
            slots = int(slots)
        elif isinstance(slots, float) and slots.is_integer():
            slots = int(slots)  # 8.0: a whole number written as a float
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 0:
            return f"gives pool {name!r} {slots!r} slots: a pool's slots are a whole number >= 0"
        sizes[str(name)] = slots
    return sizes


def pools_problem() -> str | None:
    """What is wrong with ``[gpu_dag] pools`` (``"is not JSON (...)"``); None when usable or unset."""
    raw = conf_get("pools", None)
    problem = _pool_sizes(raw) if raw else None
    return problem if isinstance(problem, str) else None


def pool_capacities() -> dict[str, int] | None:
    """Known GPU pools and their full size for parse-time validation.

    ``[gpu_dag] pools`` is a JSON object ``{"gpu_default": 8, "gpu_a100": 4}``. When unset, pools
    are not checked at parse time (the dag-processor has no database access); when invalid (not an
    object, slots that are not whole numbers >= 0), it is ignored with a warning and
    :func:`config_problems` reports it.
    """
    raw = conf_get("pools", None)
    if not raw:
        return None
    sizes = _pool_sizes(raw)
    if isinstance(sizes, str):
        _warn_once(f"pools\0{raw}", "[gpu_dag] pools %r %s; ignoring it", raw, sizes)  # read per GPU task
        return None
    return sizes


def _host_size(raw: str) -> int | str:
    try:
        size = int(raw)
    except ValueError:
        return "is not a whole number"
    return size if size >= 1 else "must be at least 1 (GPUs on the largest host)"


def max_gpus_per_host() -> int | None:
    """The largest single host/node (``[gpu_dag] max_gpus_per_host``, a whole number >= 1), or None when
    unknown or invalid (then ignored with a warning; :func:`config_problems` reports it)."""
    raw = conf_get("max_gpus_per_host", None)
    if not raw:
        return None
    size = _host_size(raw)
    if isinstance(size, str):
        _warn_once(f"max_gpus_per_host\0{raw}", "[gpu_dag] max_gpus_per_host %r %s; ignoring it", raw, size)
        return None
    return size


def config_problems() -> list[tuple[str, str]]:
    """``(option, what is wrong)`` for every ``[gpu_dag]`` option set to a value the provider cannot use.

    Where an option is read, such a value is ignored (its default used) with a logged warning: the
    scheduler must not stop on it, and no DAG fails its import on it (the cluster policy logs each
    once, as an error: :func:`log_config_problems`). ``airflow gpu-dag lint`` and the watermark
    controller refuse to run with any of them (``bad-config``). Never raises.
    """
    problems: list[tuple[str, str]] = []
    if pools := pools_problem():
        problems.append(("pools", f"{conf_get('pools', None)!r} {pools}"))
    if objective_name() not in OBJECTIVES:
        names = ", ".join(OBJECTIVES)
        problems.append(("objective", f"{conf_get('objective', None)!r} is not one of {names}"))
    raw = conf_get("max_gpus_per_host", None)
    if raw and isinstance(size := _host_size(raw), str):
        problems.append(("max_gpus_per_host", f"{raw!r} {size}"))

    for key in _DURATIONS:
        raw = conf_get(key, None)
        if raw:
            try:
                seconds = (parse_estimate if key == "default_duration" else parse_duration)(raw)
            except EstimateError as err:
                problems.append((key, f"{raw!r}: {err}"))
                continue
            if key in _DURATION_FLOORS and not _DURATION_FLOORS[key][0](seconds):
                problems.append((key, f"{raw!r} {_DURATION_FLOORS[key][1]}"))

    raw = conf_get("key_epoch", None)
    if raw and (problem := _epoch_problem(raw)):
        problems.append(("key_epoch", problem))

    for key, known in _CHOICES.items():
        if problem := _choice(key, known)[1]:
            problems.append((key, problem))
    for key in _BOOLEANS:
        if problem := _boolean(key)[1]:
            problems.append((key, problem))

    numbers: dict[str, Any] = {}
    for key, kind in _NUMBERS.items():
        if raw := (conf_get(key, None) or "").strip():
            try:
                numbers[key] = kind(raw)
            except ValueError:
                problems.append((key, f"{raw!r} is not a {'whole ' if kind is int else ''}number"))

    try:  # the learned_* options' ranges, as EstimateSettings checks them
        _learning(**{k.removeprefix("learned_"): v for k, v in numbers.items() if "learned_" in k})
    except ValueError as err:
        problems.append((str(err).split()[0], str(err).split(" ", 1)[1]))

    for key, (low, high) in _RANGES.items():
        if key in numbers and not low <= numbers[key] <= high:
            bound = f"must be >= {low}" + (f" and <= {high}" if math.isfinite(high) else "")
            problems.append((key, f"{numbers[key]:g} {bound}"))
    return problems


_config_errors = LogOnce(log, level=logging.ERROR)


def log_config_problem(
    option: str, problem: str, effect: str = "its default is used where it is read"
) -> None:
    """Log that ``[gpu_dag] option`` cannot be used, as an error, once per process and value: the cluster
    policy runs for every DAG of every parse, and one line per option is what an admin needs to see."""
    _config_errors.warning(
        f"{option}\0{problem}",
        "airflow-gpu-dag: [gpu_dag] %s %s; %s, and GPU DAGs still import. Fix or unset it (env "
        "AIRFLOW__GPU_DAG__%s; docs/configuration.md gives its format): `airflow gpu-dag lint` and the "
        "watermark controller refuse to run until then.",
        option,
        problem,
        effect,
        option.upper(),
    )


def log_config_problems() -> None:
    """:func:`config_problems`, each logged once per process as an error (the cluster policy's report:
    a malformed optional option must not fail the import of every GPU DAG). Never raises."""
    for option, problem in config_problems():
        log_config_problem(option, problem)


#: Whole-number options with a range (``config_problems`` reports a value outside it).
_RANGES = {"too_large_intervals": (1, math.inf), "planner_nice": (0, 19), "plan_search_budget": (0, math.inf)}

#: Options that are numbers: where read, one that is not is ignored (its default used).
_NUMBERS: dict[str, type] = {
    "plan_search_budget": int,
    "planner_nice": int,
    "learned_window": int,
    "learned_quantile": float,
    "learned_min_runs": int,
    "learned_flag_factor": float,
    "too_large_intervals": int,
}

#: Options that are durations (``parse_duration``): where read, one that does not parse is ignored.
_DURATIONS = (
    "default_duration",
    "reservation_gap",
    "reservation_overdue",
    "descendant_unit",
    "stage_length",
    "watermark_watchdog_interval",
    "learned_refresh",
    "budget_claim_ttl",
)

#: Durations with a floor: where read, one under it is ignored (its default used) with a warning.
_DURATION_FLOORS: dict[str, tuple[Callable[[float], bool], str]] = {
    "learned_refresh": (lambda s: s >= MIN_LEARNED_REFRESH_S, "is under 1s, the shortest refresh"),
    "budget_claim_ttl": (lambda s: s > 0, "is not > 0 (a claim would lapse as it is made: gates pass)"),
    "descendant_unit": (
        lambda s: s * OBJECTIVES["fair"].descendant_cap <= MAX_OVERDUE,
        f"times fair's {OBJECTIVES['fair'].descendant_cap} descendants is over 30 days: a run's first tasks "
        "would go ahead of every run triggered up to that long after it (a wait without bound to them)",
    ),
    "stage_length": (
        lambda s: stage_length_problem(s) is None,
        f"is not > 0 or is over {MAX_OVERDUE / OBJECTIVES['fair'].descendant_cap / 3600:g}h: fair's "
        f"{OBJECTIVES['fair'].descendant_cap} stages of descendant lead would exceed 30 days (a run's first "
        "tasks would go ahead of every run triggered up to that long after it)",
    ),
    "reservation_overdue": (
        lambda s: s <= MAX_OVERDUE,
        "is over 30 days: a task could wait that long before anything is reserved for it, and runs "
        "could be overtaken that long (a wait without bound; docs/priority.md)",
    ),
}

#: Options with a fixed set of values: the values, each with the one it means (the first: the default).
_CHOICES: dict[str, dict[str, str]] = {
    "plan_policy": {
        "reservation": "reservation",
        "greedy": "critical_path",
        "stock": "critical_path",
        "critical_path": "critical_path",
    },
    "plan_backfill": {"easy": "easy", "strict": "strict"},
    "too_large_action": {"fail": "fail", "keep": "keep"},
}

#: Boolean options and their defaults.
_BOOLEANS = {"plan_in_background": True, "learned_durations": True}

#: Boolean values: those of Airflow's ``conf.getboolean`` (t, true, 1 / f, false, 0; any case, an inline
#: ``# comment`` dropped) and the yes/no, on/off the provider has always accepted.
_TRUE = frozenset({"t", "true", "1", "y", "yes", "on"})
_FALSE = frozenset({"f", "false", "0", "n", "no", "off"})


def _choice(key: str, known: dict[str, str]) -> tuple[str, str | None]:
    """``[gpu_dag] key`` as what it means in ``known`` (unset or empty: the default, ``known``'s first),
    and what is wrong with it (None: nothing; else the default is used)."""
    default = next(iter(known))
    raw = conf_get(key, None)
    value = (raw or "").split("#", 1)[0].strip().lower() or default
    if value in known:
        return known[value], None
    return known[default], f"{raw!r} is not one of {', '.join(known)}"


def _boolean(key: str) -> tuple[bool, str | None]:
    """``[gpu_dag] key`` as a boolean (unset or empty: its default in :data:`_BOOLEANS`) and what is
    wrong with it (None: nothing; else the default is used). Never raises."""
    default = _BOOLEANS[key]
    raw = conf_get(key, None)
    value = (raw or "").split("#", 1)[0].strip().lower()
    if not value:
        return default, None
    if value in _TRUE or value in _FALSE:
        return value in _TRUE, None
    return default, f"{raw!r} is not a boolean (true or false)"


def _read_boolean(key: str) -> bool:
    value, problem = _boolean(key)
    if problem:
        _warn_once(key, "airflow-gpu-dag: [gpu_dag] %s %s; using %s", key, problem, str(value).lower())
    return value


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


# -- the cross-DAG policy and the planner (read by the priority strategy and the controller) ----------
_warned = LogOnce(log)


def _warn_once(key: str, message: str, *args: object) -> None:
    _warned.warning(key, message, *args)


#: ``[gpu_dag] stage_length`` default: the stage the objectives' times were chosen for
#: (:data:`~airflow_gpu_dag.core.policy.objective.STAGE_LENGTH`).
DEFAULT_STAGE_LENGTH = format_duration(STAGE_LENGTH)


def objective_name() -> str:
    """``[gpu_dag] objective`` as written (``fair`` when unset); see :func:`objective`."""
    return (conf_get("objective", DEFAULT_OBJECTIVE) or DEFAULT_OBJECTIVE).strip().lower()


def stage_length() -> float:
    """``[gpu_dag] stage_length`` in seconds: how long one training stage of the pool runs, the unit of
    the objective's times (default :data:`DEFAULT_STAGE_LENGTH`). A value that does not parse, is not >
    0 or would put fair's 24 stages of lead over 30 days is logged once and the default used. Never
    raises."""
    raw = conf_get("stage_length", None)
    if not raw:
        return STAGE_LENGTH
    try:
        seconds = parse_duration(raw)
    except EstimateError as err:
        problem = str(err)
    else:
        if stage_length_problem(seconds) is None:
            return seconds
        problem = _DURATION_FLOORS["stage_length"][1]
    _warn_once(
        "stage_length",
        "airflow-gpu-dag: [gpu_dag] stage_length %r is invalid (%s); using %s",
        raw,
        problem,
        DEFAULT_STAGE_LENGTH,
    )
    return STAGE_LENGTH


def objective(stage: float | None = None) -> Objective:
    """The cross-DAG objective (``[gpu_dag] objective``: ``fair`` — the default —, ``throughput``,
    ``balanced`` or ``latency``) for the pool's ``[gpu_dag] stage_length`` (``stage`` seconds instead
    when given; its times scaled from the 6-h stages they were chosen for,
    :meth:`Objective.for_stage`), then with ``[gpu_dag]
    reservation_gap`` / ``reservation_overdue`` overriding its gate (``reservation_overdue`` is also the
    due-time cap, but for ``fair``, whose gate has its own) and ``[gpu_dag] descendant_unit`` fair's time
    per descendant task.

    Never raises (the scheduler calls it): an unknown name is logged once and ``fair`` is used; the
    cluster policy fails the import of DAGs using our weight rules with the fix instead.
    """
    try:
        chosen = get_objective(objective_name())
    except ValueError as err:
        _warn_once("objective", "airflow-gpu-dag: %s; using %r", err, DEFAULT_OBJECTIVE)
        chosen = get_objective(DEFAULT_OBJECTIVE)
    chosen = chosen.for_stage(stage_length() if stage is None else stage)
    for key in ("reservation_gap", "reservation_overdue", "descendant_unit"):
        raw = conf_get(key, None)
        if raw:
            try:
                seconds = parse_duration(raw)
                if key == "reservation_gap":
                    chosen = replace(chosen, gap=seconds)
                elif key == "descendant_unit":  # fair's term; the other objectives have none
                    if chosen.descendant_cap > 0:
                        chosen = replace(chosen, descendant_unit=seconds)
                elif chosen.reserve_overdue is not None:  # the gate's own (fair): the due cap stays
                    chosen = replace(chosen, reserve_overdue=seconds)
                else:
                    chosen = replace(chosen, overdue=seconds)
            except (EstimateError, ValueError) as err:  # ValueError: a constant the Objective refuses
                _warn_once(
                    key, "airflow-gpu-dag: [gpu_dag] %s %r is invalid (%s); ignoring it", key, raw, err
                )
    return chosen


def _epoch(raw: str) -> float:
    """Epoch seconds or an ISO date as epoch seconds; NaN when it is neither (or not finite)."""
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        return math.nan
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _epoch_problem(raw: str, now: float | None = None) -> str | None:
    """What is wrong with ``raw`` as ``[gpu_dag] key_epoch`` at ``now`` (epoch seconds; None: the clock).

    A weight is ``2**31 - 1 - round(key - epoch)`` with a key about the trigger time: an epoch after now
    (a date ahead, epoch milliseconds) puts every key before it, so every weight is the int32 maximum
    and no order is left; keys more than 2**30 s (34 years) after it make weights under
    ``KEY_WEIGHT_FLOOR``, which the watermark controller no longer reads as keys."""
    epoch = _epoch(raw)
    if not math.isfinite(epoch):  # "nan" and "inf" parse as floats: every key would be NaN or infinite
        return f"{raw!r} is neither epoch seconds nor an ISO date"
    now = time.time() if now is None else now
    if epoch > now:
        unit = " (epoch milliseconds? give seconds)" if epoch > 1e11 else ""
        return (
            f"{raw!r} is in the future{unit}: every key would be before it and every weight "
            "2147483647; use a past date such as 2025-01-01"
        )
    if epoch < now - KEY_WEIGHT_FLOOR:
        return f"{raw!r} is more than 34 years (2**30 s) ago: weights would no longer be read as keys"
    return None


def key_epoch() -> float:
    """``[gpu_dag] key_epoch``: the epoch of cross-DAG keys, epoch seconds or an ISO date (default
    2025-01-01T00:00:00Z), in the past and less than 34 years ago (:func:`_epoch_problem`); any other
    value is logged once and the default used. Every scheduler, api-server and controller must use the
    same value."""
    raw = conf_get("key_epoch", None)
    if not raw:
        return DEFAULT_EPOCH
    problem = _epoch_problem(raw)
    if problem is None:
        return _epoch(raw)
    _warn_once("key_epoch", "airflow-gpu-dag: [gpu_dag] key_epoch %s; using 2025-01-01", problem)
    return DEFAULT_EPOCH


def plan_policy() -> str:
    """``[gpu_dag] plan_policy``: ``reservation`` (default: the watermark controller reserves) or
    ``greedy`` (stock pool admission); as the simulator's policy name. Another value is logged once and
    ``reservation`` used."""
    value, problem = _choice("plan_policy", _CHOICES["plan_policy"])
    if problem:
        _warn_once("plan_policy", "airflow-gpu-dag: [gpu_dag] plan_policy %s; using reservation", problem)
    return value


def plan_search_budget() -> int:
    """``[gpu_dag] plan_search_budget``: simulated tasks the planner's local search may spend (0, the
    default, turns it off; ``core.planning.planner.SEARCH_BUDGET`` = 60000 is the measured setting)."""
    budget = int(_conf_number("plan_search_budget", 0, int))  # as lint reads it: "+5", "60_000"
    if budget < 0:
        _warn_once("plan_search_budget", "[gpu_dag] plan_search_budget '%d' is < 0; using 0", budget)
    return max(0, budget)


def plan_strict_backfill() -> bool:
    """``[gpu_dag] plan_backfill``: ``strict`` when the watermark controller's pools use
    ``backfill: strict`` (the plan is made for that controller), ``easy`` (default) otherwise; another
    value is logged once and ``easy`` used."""
    value, problem = _choice("plan_backfill", _CHOICES["plan_backfill"])
    if problem:
        _warn_once("plan_backfill", "airflow-gpu-dag: [gpu_dag] plan_backfill %s; using easy", problem)
    return value == "strict"


def plan_in_background() -> bool:
    """``[gpu_dag] plan_in_background`` (default true): plans are made off the scheduler loop, in a
    subprocess; false plans inline (tests, or a scheduler that must not start processes). A boolean
    as Airflow reads them (:data:`_TRUE`, :data:`_FALSE`); another value is logged once, true used."""
    return _read_boolean("plan_in_background")


#: Default of ``[gpu_dag] planner_nice``.
PLANNER_NICE = 19


def planner_nice() -> int:
    """``[gpu_dag] planner_nice`` (default 19): the ``nice`` level of the planning subprocess, so the
    kernel gives the scheduler (and the api-server) the CPU first and plans use what is left; 0 plans
    at the scheduler's own priority. An invalid value is logged once and the default used."""
    value = int(_conf_number("planner_nice", PLANNER_NICE, int))  # as lint reads it: "+5", "1_0"
    if not 0 <= value <= 19:
        _warn_once("planner_nice", "[gpu_dag] planner_nice '%d' is not 0-19; using %d", value, PLANNER_NICE)
        return PLANNER_NICE
    return value


LEARNED_REFRESH = "10m"
#: The shortest ``[gpu_dag] learned_refresh``, seconds.
MIN_LEARNED_REFRESH_S = 1.0


def learned_refresh() -> float:
    """``[gpu_dag] learned_refresh`` in seconds (default 10m): how old the learned durations behind the
    priority weights may get. An invalid value (one that does not parse, or under 1 s) is logged once
    and the default used."""
    raw = conf_get("learned_refresh", LEARNED_REFRESH) or LEARNED_REFRESH
    try:
        seconds = parse_duration(raw)
    except EstimateError as err:
        _warn_once("learned_refresh", "[gpu_dag] learned_refresh %r is invalid (%s); using 10m", raw, err)
        return parse_duration(LEARNED_REFRESH)
    if seconds < MIN_LEARNED_REFRESH_S:
        _warn_once("learned_refresh", "[gpu_dag] learned_refresh %r is under 1s; using 10m", raw)
        return parse_duration(LEARNED_REFRESH)
    return seconds


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
            labels = entry.get("node_labels", {})
            if not all(isinstance(entry.get(k, ""), str) for k in ("pool", "cpu_pool")) or not (
                isinstance(labels, dict) and all(isinstance(v, str) for v in [*labels, *labels.values()])
            ):
                raise TypeError(f"queue {queue!r}: pools must be names, node_labels an object of strings")
            sites[str(queue)] = entry
    except (ValueError, TypeError, AttributeError) as err:
        raise ValueError(
            f"[gpu_dag] queues {raw!r} is not a JSON object of queue -> pool or "
            f'{{"pool", "cpu_pool", "node_labels"}} ({err})'
        ) from None
    return sites


def _conf_number(key: str, default: float, kind: type = float) -> float:
    raw = conf_get(key, None)
    if raw is None or not str(raw).strip():
        return default
    try:
        return kind(str(raw).strip())
    except ValueError:
        _warn_once(key, "[gpu_dag] %s %r is not a number; using %s", key, raw, default)
        return default


def _learning(**values: Any) -> EstimateSettings:
    """``EstimateSettings(**values)``, refused when its window cannot hold ``min_runs`` tries (at most
    ``window`` tries of a task are read, so no task would ever learn)."""
    learn = EstimateSettings(**values)
    if learn.min_runs > learn.window:
        raise ValueError(f"learned_window {learn.window} < learned_min_runs {learn.min_runs}: no task learns")
    return learn


def estimate_settings() -> EstimateSettings:
    """How durations are learned from past runs: ``[gpu_dag] learned_durations`` (a boolean, default
    true, read as :func:`plan_in_background`), ``learned_window`` (last N successful tries, 20),
    ``learned_quantile`` (0.9), ``learned_min_runs`` (3) and ``learned_flag_factor`` (1.5). An invalid
    value is logged and the default used."""
    enabled = _read_boolean("learned_durations")
    default = EstimateSettings()
    values = {
        "window": int(_conf_number("learned_window", default.window, int)),
        "quantile": _conf_number("learned_quantile", default.quantile),
        "min_runs": int(_conf_number("learned_min_runs", default.min_runs, int)),
        "flag_factor": _conf_number("learned_flag_factor", default.flag_factor),
    }
    try:
        return _learning(enabled=enabled, **values)
    except ValueError as err:
        log.warning("[gpu_dag] learned_* options are invalid (%s); using the defaults", err)
        return EstimateSettings(enabled=enabled)


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
    action, problem = _choice("too_large_action", _CHOICES["too_large_action"])
    if problem:
        log.warning("[gpu_dag] too_large_action %s; using fail", problem)
    return intervals, action
