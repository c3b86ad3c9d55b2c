"""The watermark controller's configuration file: pools, their capacity sources, faults, lease.

YAML or JSON, e.g.::

    interval: 60              # seconds between ticks (CLI --interval overrides); "30s", "2m" too
    fail_open_after: 3        # intervals without a write after which the scheduler's watchdog
                              # writes the pools back to their capacity
    lease:
      lock_file: /tmp/airflow-gpu-dag-watermark.lock   # one active controller per host
      variable: gpu_dag_watermark_lease                 # one active controller across hosts (REST)
      ttl: 180                                          # seconds; default 3 x interval
    pools:
      gpu_a100:
        source: {type: nvml, min_free_memory: 40GiB, max_utilization: 10}
        floor: 0                # slots used once the source failed for too long
        stale_intervals: 3      # failed ticks during which the last good value is kept
        reservation: true       # apply decide_pools() (false: pool size = capacity)
        backfill: true          # safe backfill while a reservation is active (strict: only work
                                # that ends before the reserved task can start; false: none)
        lookahead: true         # also reserve for tasks about to be ready (upstream all started)
        source_timeout: 30s     # a source that does not answer in time has failed (never null)
      gpu_static:
        source: {type: static, gpus: 8}

When no file is given, the pools of ``[gpu_dag] pools`` (JSON ``{"pool": slots}``) are managed with
static sources. Errors name the pool and the key at fault. Every duration (``interval``,
``lease.ttl``, ``source_timeout``, a source's ``max_age``/``timeout``) takes seconds or a string like
``"30s"``, ``"2m"``, ``"1h30m"`` (as the ``[gpu_dag]`` options do). ``source_timeout`` and a source's
``timeout`` cannot be null: nothing the controller waits on may block a tick without limit.

The file's JSON Schema ships in the package (``watermark.schema.json``, :data:`SCHEMA`; editors use it
through a ``# yaml-language-server: $schema=...`` line). The controller checks the document's structure
against it (mappings, their keys, what is required: :func:`_check_structure`), then parses the values
here, with messages that name the key and the fix.
"""

from __future__ import annotations

import json
import math
import reprlib
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from airflow_gpu_dag.core.model.resources import EstimateError, parse_duration, parse_memory_mib
from airflow_gpu_dag.pool_claim.state import MAX_CLAIM, MAX_POOL_SLOTS
from airflow_gpu_dag.settings import config_problems, pool_capacities

__all__ = [
    "DEFAULT_FAIL_OPEN_AFTER",
    "DEFAULT_INTERVAL",
    "DEFAULT_LEASE_VARIABLE",
    "DEFAULT_LOCK_FILE",
    "DEFAULT_SOURCE_TIMEOUT",
    "SCHEMA",
    "SOURCE_TYPES",
    "ConfigError",
    "LeaderLockSpec",
    "PoolSpec",
    "SourceSpec",
    "WatermarkConfig",
    "load_config",
    "parse_config",
]

DEFAULT_INTERVAL = 60.0
DEFAULT_FAIL_OPEN_AFTER = 3
#: Longest tick interval (a day): a longer one is a typo, and waits that long overflow ``time_t``.
MAX_INTERVAL = 86400.0
#: Longest pool name Airflow stores (``slot_pool.pool``).
MAX_POOL_NAME = 256
#: The JSON Schema of the file (``airflow_gpu_dag/watermark/watermark.schema.json``): the keys below
#: are read from it, so the schema editors check with and the parser cannot disagree on them.
SCHEMA: Mapping[str, Any] = json.loads(
    resources.files("airflow_gpu_dag.watermark").joinpath("watermark.schema.json").read_text(encoding="utf-8")
)
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
_TOP_KEYS = frozenset(SCHEMA["properties"])
_LEASE_KEYS = frozenset(SCHEMA["properties"]["lease"]["properties"])
#: Options given in seconds (or a duration string) per source type.
_DURATION_OPTIONS = {"file": ("max_age",), "prometheus": ("timeout",), "kubernetes": ("timeout",)}
#: The options of the sources that ignore unknown ones (the others reject them when built).
_KNOWN_OPTIONS = {
    kind: set(SCHEMA["$defs"][f"{kind}_source"]["properties"]) - {"type"} for kind in ("static", "file")
}
DEFAULT_LOCK_FILE = "/tmp/airflow-gpu-dag-watermark.lock"
DEFAULT_LEASE_VARIABLE = "gpu_dag_watermark_lease"
SOURCE_TYPES: tuple[str, ...] = tuple(SCHEMA["$defs"]["source"]["anyOf"][1]["enum"])
#: Seconds a pool's source may take to answer, when ``source_timeout`` is left out.
DEFAULT_SOURCE_TIMEOUT = 30.0


class ConfigError(ValueError):
    """The watermark configuration is invalid; the message names the pool/key and the fix."""


@dataclass(frozen=True)
class SourceSpec:
    """Which capacity source a pool uses and its options (see :mod:`..sources`)."""

    type: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PoolSpec:
    """One managed GPU pool."""

    name: str
    source: SourceSpec
    floor: int = 0
    stale_intervals: int = 3
    reservation: bool = True
    backfill: bool = True
    strict_backfill: bool = False
    lookahead: bool = True
    include_deferred: bool = False
    #: seconds a read of the source may take; a read still running then counts as failed
    source_timeout: float = DEFAULT_SOURCE_TIMEOUT


@dataclass(frozen=True)
class LeaderLockSpec:
    """How a controller makes sure it is the only active one.

    ``lock_file``: an fcntl lock on this host (None disables it). ``variable``: an Airflow Variable
    holding ``{"holder", "expires"}`` written over REST, for controllers on several hosts (None
    disables it). ``ttl``: lease lifetime in seconds (None = 3 x interval).
    """

    lock_file: str | None = DEFAULT_LOCK_FILE
    variable: str | None = DEFAULT_LEASE_VARIABLE
    ttl: float | None = None


@dataclass(frozen=True)
class WatermarkConfig:
    """The whole controller configuration."""

    pools: tuple[PoolSpec, ...]
    interval: float = DEFAULT_INTERVAL
    lease: LeaderLockSpec = field(default_factory=LeaderLockSpec)
    fail_open_after: int = DEFAULT_FAIL_OPEN_AFTER

    def lease_ttl(self) -> float:
        """Lease lifetime: the configured ttl, else three intervals."""
        return float(self.lease.ttl) if self.lease.ttl else 3.0 * self.interval

    def fail_open_window(self) -> float:
        """Seconds a pool write stays claimed: ``fail_open_after`` intervals."""
        return self.fail_open_after * self.interval

    def source_wait(self) -> float:
        """Longest a tick may wait on its sources before writing (their timeouts, read in turn)."""
        return sum(p.source_timeout for p in self.pools)

    def fail_open_risk(self) -> str | None:
        """Why a slow tick could cost this live controller its pools: a claim (the watchdog opens them) or a
        Variable lease (no write, a standby takes over) not longer than a tick waiting on its sources."""
        need = self.interval + self.source_wait()
        risks: list[str] = []
        if self.fail_open_window() <= need:
            risks.append(
                f"fail_open_after x interval ({self.fail_open_window():g} s) is not longer than one interval "
                f"plus the sources' timeouts ({need:g} s): a tick whose sources answer slowly lets the "
                "scheduler's watchdog open the pools of this live controller. Fix: raise fail_open_after to "
                f"{int(need // self.interval) + 2}, or lower source_timeout"
            )

        if self.lease.variable and self.lease_ttl() <= need:
            risks.append(
                f"lease.ttl ({self.lease_ttl():g} s) is not longer than one interval plus the sources' "
                f"timeouts ({need:g} s): a tick whose sources answer slowly outlasts its lease, writes no "
                f"pool and lets a standby take over. Fix: set lease.ttl to {need + self.interval:g}s, or "
                "lower source_timeout"
            )

        return "; ".join(risks) or None

    def lease_group(self, host: str | None = None) -> str:
        """Who may manage these pools: controllers sharing the lease Variable (any host), else the
        lock file on this host, else this host. Standbys of one controller share it; a controller of
        another group finding a live claim of this one on a pool refuses to start."""
        if self.lease.variable:
            return f"variable:{self.lease.variable}"
        host = host or socket.gethostname()
        if self.lease.lock_file:
            return f"lock:{host}:{self.lease.lock_file}"
        return f"host:{host}"


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 3, 6, 6, 80, 80


def _show(value: object) -> str:
    """``repr`` cut to a readable length (a config value can be anything YAML holds, aliases that
    nest a list in itself a million times included: the repr stops at a few levels and items)."""
    text = _REPR.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _int(value: object, where: str, minimum: int = 0, maximum: int | None = None) -> int:
    bounds = f">= {minimum}" if maximum is None else f">= {minimum} and <= {maximum:,}"
    problem = f"{where}: expected an integer {bounds}, got {_show(value)}"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(problem)
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise ConfigError(problem)
    try:
        number = int(value)
    except (ValueError, OverflowError):
        raise ConfigError(problem) from None
    if number < minimum or (maximum is not None and number > maximum):
        raise ConfigError(problem)
    return number


def _duration(value: object, where: str) -> float:
    """Seconds > 0 from a number or a duration string (``"30s"``, ``"2m"``)."""
    problem = f'{where}: expected seconds > 0 or a duration like "30s", "2m", got {_show(value)}'
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(problem)  # before parse_duration, whose message writes out the whole value
    try:
        seconds = parse_duration(value)
    except EstimateError:
        raise ConfigError(problem) from None
    if seconds <= 0:
        raise ConfigError(problem)
    return seconds


def _limit(value: object, where: str) -> float:
    """A time limit in seconds: a duration, never null (nothing the controller waits on may block it)."""
    if value is None:
        raise ConfigError(
            f"{where}: null would let a source that never answers block every tick of the controller; "
            'give a limit like "30s", or leave the key out for the default'
        )
    seconds = _duration(value, where)
    if seconds > MAX_INTERVAL:  # a typo; and waits that long overflow the clocks' C types
        raise ConfigError(f"{where}: at most 1 day ({MAX_INTERVAL:.0f} s), got {_show(value)}")
    return seconds


def _optional_str(value: object, where: str) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    raise ConfigError(f"{where}: expected a non-empty string or null, got {_show(value)}")


def _bool(value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{where}: expected true or false, got {_show(value)}")


def _backfill(value: object, where: str) -> str:
    """``backfill``: true (EASY), ``strict`` or false -> ``"easy"``, ``"strict"`` or ``"off"``."""
    if value == "strict":
        return "strict"
    if isinstance(value, bool):
        return "easy" if value else "off"
    raise ConfigError(f"{where}: expected true, false or strict, got {_show(value)}")


#: The keys of one pool's entry under ``pools``.
_POOL_KEYS = frozenset(SCHEMA["$defs"]["pool"]["properties"])


#: Options of some capacity source, named when they are misplaced at the pool's level.
_SOURCE_OPTIONS = frozenset(
    {"gpus", "path", "max_age", "min_free_memory", "max_utilization", "devices", "url", "conn_id", "timeout"}
)


def _source(pool: str, raw: object) -> SourceSpec:
    where = f"pools.{pool}.source"
    if isinstance(raw, int) and not isinstance(raw, bool):
        return SourceSpec("static", {"gpus": _int(raw, f"{where} (static GPU count)", 0, MAX_POOL_SLOTS)})
    if isinstance(raw, str) and raw.strip() in SOURCE_TYPES:
        raw = {"type": raw.strip()}  # "source: nvml": a type with its default options
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{where}: expected a mapping like {{type: static, gpus: 8}}, a GPU count or a source type "
            f"({', '.join(SOURCE_TYPES)}), got {_show(raw)}"
        )
    options = dict(raw)
    kind = options.pop("type", None)
    if kind not in SOURCE_TYPES:
        raise ConfigError(f"{where}.type: expected one of {', '.join(SOURCE_TYPES)}, got {_show(kind)}")
    unknown = {str(k) for k in options} - _KNOWN_OPTIONS.get(str(kind), {str(k) for k in options})
    if unknown:
        known = sorted(_KNOWN_OPTIONS[str(kind)])
        raise ConfigError(f"{where}: unknown options {sorted(unknown)} for a {kind} source (known: {known})")
    if kind == "static":
        options["gpus"] = _int(options.get("gpus"), f"{where}.gpus", 0, MAX_POOL_SLOTS)
    if kind == "nvml" and "devices" in options and options["devices"] is not None:
        devices = options["devices"]
        if not isinstance(devices, list | tuple) or not devices:
            raise ConfigError(
                f"{where}.devices: expected a non-empty list of GPU indices like [0, 1], got {_show(devices)}"
            )
        options["devices"] = [_int(d, f"{where}.devices[{i}] (a GPU index)") for i, d in enumerate(devices)]
        if twice := sorted({d for d in options["devices"] if options["devices"].count(d) > 1}):
            # counted once by the source, while the floor is checked against the list's length
            raise ConfigError(f"{where}.devices: GPU index {twice[0]} is listed twice; list each GPU once")
    if "leases" in options:
        options["leases"] = _bool(options["leases"], f"{where}.leases")
    if "lease_dir" in options and options["lease_dir"] is not None:
        options["lease_dir"] = _optional_str(options["lease_dir"], f"{where}.lease_dir")
    if "headers" in options and not (  # the error names keys, never values: they often hold a token
        isinstance(h := options["headers"], Mapping)
        and all({type(k), type(v)} == {str} for k, v in h.items())
    ):
        raise ConfigError(
            f"{where}.headers: expected a mapping of header name to text, e.g. {{X-Scope-OrgID: team-a}}, "
            f"got {f'a non-text entry among {list(h)}' if isinstance(h, Mapping) else type(h).__name__}"
        )
    if kind == "file" and not (isinstance(options.get("path"), str) and options["path"]):
        raise ConfigError(f"{where}.path: a file source needs the path of a file holding the GPU count")
    url_given = isinstance(options.get("url"), str) and bool(options["url"])
    if kind == "prometheus" and not url_given and not options.get("conn_id"):
        raise ConfigError(
            f"{where}.url: a prometheus source needs the Prometheus base URL, or conn_id: an Airflow "
            "connection holding the URL and token"
        )
    if "min_free_memory" in options:
        memory = options["min_free_memory"]
        if isinstance(memory, bool) or not isinstance(memory, int | float | str):
            raise ConfigError(
                f'{where}.min_free_memory: expected a size like "40GiB" or MiB, got {_show(memory)}'
            )
        try:
            options["min_free_memory"] = parse_memory_mib(options["min_free_memory"])
        except EstimateError as err:
            raise ConfigError(f"{where}.min_free_memory: {err}") from None
    if "max_utilization" in options:
        options["max_utilization"] = _int(options["max_utilization"], f"{where}.max_utilization (%)", 0, 100)
    for key in _DURATION_OPTIONS.get(str(kind), ()):
        if key == "timeout" and key in options:
            options[key] = _limit(options[key], f"{where}.{key}")
        elif options.get(key) is not None:
            options[key] = _duration(options[key], f"{where}.{key}")
    return SourceSpec(str(kind), options)


def _pool_name(name: object) -> str:
    if isinstance(name, bool) or not isinstance(name, str | int) or not str(name).strip():
        raise ConfigError(f"pools: pool names must be non-empty strings, got {name!r}")
    if len(str(name)) > MAX_POOL_NAME:
        raise ConfigError(f"pools: pool name {str(name)[:40]!r}... is longer than {MAX_POOL_NAME} characters")
    return str(name)


#: The schema's rules about the document's shape (a mapping where one is expected, its keys, the keys
#: it needs) and where they apply: the top level, ``lease``, ``pools`` and each pool.
_STRUCTURAL = frozenset({"type", "additionalProperties", "required", "minProperties"})
_POOLS_NEEDED = "watermark config: 'pools' must map at least one pool name to its settings"


def _path(err: Any) -> tuple[str, ...]:
    return tuple(str(part) for part in err.absolute_path)


def _skeleton(value: object, depth: int = 0) -> Any:
    """``value`` down to a pool's keys (the depth the shape rules look at), with text keys (YAML keys
    may be numbers); anything deeper, or any value that is not a mapping, becomes an empty stand-in of
    its kind: a YAML alias bomb is never walked or written out."""
    if isinstance(value, Mapping):
        return {str(k): _skeleton(v, depth + 1) for k, v in value.items()} if depth < 3 else {}
    if isinstance(value, bool | int | float):
        return value
    return [] if isinstance(value, list | tuple) else "" if isinstance(value, str) else None


def _at(raw: object, path: tuple[str, ...]) -> object:
    """The value of ``raw`` at a schema error's ``path`` (keys compared as text)."""
    for part in path:
        if not isinstance(raw, Mapping):
            return None
        raw = next((v for k, v in raw.items() if str(k) == part), None)
    return raw


def _shape_errors(raw: object) -> list[Any]:
    """The schema's errors about the shape of ``raw`` (see :data:`_STRUCTURAL`), outermost first;
    values are left to the parsers below."""
    where = {(), ("lease",), ("pools",)}
    shape = [
        e
        for e in _VALIDATOR.iter_errors(_skeleton(raw))
        if e.validator in _STRUCTURAL
        and (_path(e) in where or (len(_path(e)) == 2 and _path(e)[0] == "pools"))
    ]
    return sorted(shape, key=lambda e: len(_path(e)))


def _shape_message(err: Any, raw: object) -> str:
    """The message of a shape error: what is wrong where, and the fix (the keys known, an example)."""
    path = _path(err)
    instance = _at(raw, path)
    if path == ("pools",) or (path == () and err.validator == "required"):
        return _POOLS_NEEDED
    if err.validator == "type":
        if path == ():
            return f"watermark config: expected a mapping at the top level, got {type(raw).__name__}"
        if path == ("lease",):
            return (
                f"lease: expected a mapping, got {_show(instance)}; to run without a lease set "
                "{lock_file: null, variable: null}"
            )
        return f"pools.{path[1]}: expected a mapping with a 'source', got {_show(instance)}"
    if err.validator == "required":
        return f"pools.{path[1]}.source: missing (e.g. source: {{type: static, gpus: 8}})"
    known = {(): _TOP_KEYS, ("lease",): _LEASE_KEYS}.get(path, _POOL_KEYS)
    unknown = sorted({str(k) for k in instance} - known) if isinstance(instance, Mapping) else []
    where = "watermark config" if path == () else "lease" if path == ("lease",) else f"pools.{path[-1]}"
    source_options = [key for key in unknown if key in _SOURCE_OPTIONS] if known is _POOL_KEYS else []
    hint = (
        f"; {', '.join(source_options)} belong inside the source, e.g. "
        f"source: {{type: nvml, min_free_memory: 40GiB, max_utilization: 10}}"
        if source_options
        else ""
    )
    return f"{where}: unknown keys {unknown} (known: {sorted(known)}){hint}"


def _check_structure(errors: list[Any], raw: object, pool: str | None = None) -> None:
    """Raise the first shape error: of the top level and ``lease`` (``pool`` None), else of ``pool``."""
    for err in errors:
        path = _path(err)
        if (pool is None and len(path) < 2) or (pool is not None and path == ("pools", pool)):
            raise ConfigError(_shape_message(err, raw))


def _pool(name: str, raw: Mapping[str, Any]) -> PoolSpec:
    """One pool's settings (its shape already checked against the schema)."""
    source = _source(name, raw["source"])
    floor = _int(raw.get("floor", 0), f"pools.{name}.floor", 0, MAX_POOL_SLOTS)
    devices = source.options.get("devices") if source.type == "nvml" else None
    if devices and floor > len(devices):
        raise ConfigError(
            f"pools.{name}.floor: {floor} exceeds the {len(devices)} GPUs of the nvml source's devices; the "
            "floor is the size kept once the source has failed, so it must not give more slots than there "
            "are GPUs"
        )
    return PoolSpec(
        name=name,
        source=source,
        floor=floor,
        stale_intervals=_int(raw.get("stale_intervals", 3), f"pools.{name}.stale_intervals"),
        reservation=_bool(raw.get("reservation", True), f"pools.{name}.reservation"),
        backfill=_backfill(raw.get("backfill", True), f"pools.{name}.backfill") != "off",
        strict_backfill=_backfill(raw.get("backfill", True), f"pools.{name}.backfill") == "strict",
        lookahead=_bool(raw.get("lookahead", True), f"pools.{name}.lookahead"),
        include_deferred=_bool(raw.get("include_deferred", False), f"pools.{name}.include_deferred"),
        source_timeout=_limit(
            raw.get("source_timeout", DEFAULT_SOURCE_TIMEOUT), f"pools.{name}.source_timeout"
        ),
    )


def parse_config(raw: Mapping[str, Any]) -> WatermarkConfig:
    """Build a :class:`WatermarkConfig` from a parsed YAML/JSON document.

    :raises ConfigError: naming the pool and key at fault.
    """
    shape = _shape_errors(raw)
    _check_structure(shape, raw)  # the top level, pools and lease: mappings with known keys
    pools_raw = raw["pools"]
    interval = _duration(raw.get("interval", DEFAULT_INTERVAL), "interval")
    fail_open_after = _int(raw.get("fail_open_after", DEFAULT_FAIL_OPEN_AFTER), "fail_open_after", 2)
    _check_interval(interval, fail_open_after, _show(raw.get("interval")))
    lease_raw = raw.get("lease") or {}  # left out, or an empty "lease:" key: the defaults
    ttl = _duration(lease_raw["ttl"], "lease.ttl") if lease_raw.get("ttl") is not None else None
    _check_ttl(ttl, interval)
    lease = LeaderLockSpec(
        lock_file=_optional_str(lease_raw.get("lock_file", DEFAULT_LOCK_FILE), "lease.lock_file"),
        variable=_optional_str(lease_raw.get("variable", DEFAULT_LEASE_VARIABLE), "lease.variable"),
        ttl=ttl,
    )
    names = [_pool_name(name) for name in pools_raw]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError(f"pools: {', '.join(map(repr, twice))} defined twice; give each pool one entry")
    pools = []
    for name, spec in zip(names, pools_raw.values(), strict=True):
        _check_structure(shape, raw, name)  # a mapping with a source and known keys
        pools.append(_pool(name, spec))
    return WatermarkConfig(
        pools=tuple(pools), interval=interval, lease=lease, fail_open_after=fail_open_after
    )


def _check_interval(interval: float, fail_open_after: int, shown: str) -> None:
    if interval > MAX_INTERVAL:
        raise ConfigError(f"interval: at most 1 day ({MAX_INTERVAL:.0f} s), got {shown}")
    if fail_open_after * interval > MAX_CLAIM:
        raise ConfigError(
            f"fail_open_after: {fail_open_after} intervals of {interval:g} s is more than 30 days without "
            "failing the pools open; use fewer intervals"
        )


def _check_ttl(ttl: float | None, interval: float) -> None:
    if ttl is not None and not interval < ttl <= MAX_CLAIM:
        raise ConfigError(
            f"lease.ttl: {ttl:g} s must be longer than the interval ({interval:g} s; a holder renews it "
            f"once per tick, so a shorter lease lapses between ticks and two controllers act) and at most "
            f"30 days; e.g. {3 * interval:g}s, or leave it out (3 x interval)"
        )


def with_interval(config: WatermarkConfig, interval: float) -> WatermarkConfig:
    """``config`` ticking every ``interval`` seconds (``--interval``), checked as the file's own
    interval is: a lease shorter than the interval would let two controllers act.

    :raises ConfigError: naming the setting and the fix.
    """
    if not interval > 0:
        raise ConfigError(f"interval: expected seconds > 0, got {interval!r}")
    _check_interval(float(interval), config.fail_open_after, f"{interval:g} s")
    _check_ttl(config.lease.ttl, float(interval))
    return replace(config, interval=float(interval))


def load_config(path: str | Path | None) -> WatermarkConfig:
    """Read the configuration file (``.json``, else YAML); None = static pools from ``[gpu_dag] pools``.

    :raises ConfigError: unreadable file, bad syntax, or invalid content.
    """
    if path is None:
        capacities = pool_capacities()
        if not capacities:
            problem = dict(config_problems()).get("pools")
            raise ConfigError(
                f"no watermark config: [gpu_dag] pools {problem}; fix it, or pass --config FILE"
                if problem
                else "no watermark config: pass --config FILE (YAML/JSON with 'pools') or set "
                '[gpu_dag] pools = {"gpu_default": 8} for static pools'
            )
        try:
            return parse_config({"pools": {name: {"source": slots} for name, slots in capacities.items()}})
        except ConfigError as err:  # the user wrote [gpu_dag] pools, not a file with pools.<name>.source
            raise ConfigError(
                f"[gpu_dag] pools = {json.dumps(capacities)}: {err}; fix the option, or pass --config FILE"
            ) from None
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"watermark config {file}: no such file; check the --config path "
            "(or leave --config out to use [gpu_dag] pools)"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"watermark config {file}: cannot read it as UTF-8 text ({err})") from None
    try:
        raw = json.loads(text, object_pairs_hook=_unique_keys) if file.suffix == ".json" else _yaml(text)
    except ConfigError as err:
        raise ConfigError(f"watermark config {file}: {err}") from None
    except Exception as err:  # json.JSONDecodeError, yaml.YAMLError
        if text.strip():
            raise ConfigError(f"watermark config {file}: not valid JSON/YAML ({err})") from None
        raw = None
    if raw is None:  # nothing but whitespace, comments or a YAML "---"
        raise ConfigError(f"watermark config {file}: the file is empty; it needs at least 'pools'")
    try:
        return parse_config(raw)
    except ConfigError as err:
        message = str(err).removeprefix("watermark config: ")
        raise ConfigError(f"watermark config {file}: {message}") from None


def _unique_keys(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """A mapping from ``pairs``; a key given twice is an error (JSON and YAML keep the last silently)."""
    out: dict[Any, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"key {key!r} is given twice in one mapping; keep one")
        out[key] = value
    return out


def _yaml(text: str) -> Any:
    class UniqueKeyLoader(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # the mapping's own keys only: a key merged in with `<<: *anchor` may be overridden, as YAML says
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=deep)
            try:
                if key in seen:
                    raise ConfigError(f"key {key!r} is given twice in one mapping; keep one")
                seen.add(key)
            except TypeError:  # an unhashable key: construct_mapping below says what is wrong
                break
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
