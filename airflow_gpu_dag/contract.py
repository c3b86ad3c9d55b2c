"""The task contract: everything a task declares and everything the provider derives, in one typed form.

A task tells the provider what it needs under one key of its ``executor_config``, ``"gpu_dag"``: the one
place of a task that survives Airflow's DAG serialization verbatim, so the dag-processor, the scheduler,
the api-server, the controller (over REST) and the CLI all see the same thing. This module is its only
parser and its only reader:

* :func:`parse` validates a hand-written or helper-written ``executor_config["gpu_dag"]`` and returns a
  :class:`TaskContract`, or raises :class:`ContractError` listing every problem (an unknown key with a
  did-you-mean, ``gpu_mem`` -> ``gpu_memory``; a malformed estimate, GPU request, path list, start
  window or fallback rung). The cluster policy runs it once per task when the DAG file is parsed.
* :func:`read` gives the contract of any ``executor_config`` (a dict, or the ``str(dict)`` the REST API
  returns) and never raises: a malformed field is left at its default and named in
  :attr:`TaskContract.problems`. The scheduler, the controller, the CLI and the UI read tasks with it.
* :meth:`TaskContract.to_executor_config` is the wire form the cluster policy writes back: canonical
  units (seconds, MiB, lists of paths), the contract version (``"v"``) and the figures the provider
  derives (``"derived"``: the task's remaining critical path, its run's slot-seconds per pool and the
  digest of the DAG version they belong to). Those are always written by the policy, for every DAG, and
  never taken from the author.
* :func:`json_schema` is the wire form's JSON schema (rendered in docs/task-contract.md).

A ``gpu_dag`` dict without ``"v"`` (written by the authoring helpers, by hand, or by a provider before the
contract was versioned) is read with the current keys; the policy writes ``"v": 2`` at the next parse.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_gpu_dag.core.model.resources import EstimateError, GpuRequest, parse_estimate, real_number
from airflow_gpu_dag.core.model.windows import ON_MISSED, FixedWindow, Window, window_from_hint

__all__ = [
    "CONTRACT_VERSION",
    "DERIVED_KEY",
    "HINTS_KEY",
    "LEGACY_DERIVED_KEY",
    "ContractError",
    "ContractProblem",
    "Derived",
    "FallbackHint",
    "TaskContract",
    "WindowHint",
    "json_schema",
    "parse",
    "read",
    "read_derived",
]

#: The wire form's version: 1 was the unversioned dict (same declared keys, the parse-time figures under
#: a second top-level key); 2 added ``"v"`` and ``"derived"``.
CONTRACT_VERSION = 2
#: The key under ``executor_config`` that holds the contract.
HINTS_KEY = "gpu_dag"
#: Where contract version 1 kept the parse-time figures (top level of ``executor_config``). Never read:
#: the policy strips it, and a DAG serialized with it is analysed until it is parsed again.
LEGACY_DERIVED_KEY = "gpu_dag_critical_path"
#: The key of the figures the provider derives.
DERIVED_KEY = "derived"

_HINTS_FIX = "build it with gpu_hints(...) from airflow_gpu_dag (docs/task-contract.md lists the keys)."
_FALLBACK_FIX = "build fallback rungs with airflow_gpu_dag.authoring.fallback_ladder, not by hand."
_WINDOW_FIX = "set start windows with airflow_gpu_dag.authoring.start_window, not by hand."


# -------------------------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class ContractProblem:
    """One thing wrong with a task's contract: the key at fault, a finding code (``unknown-hint``,
    ``bad-estimate``, ``bad-gpu-request``, ``bad-hint``, ``bad-map-length``), what is wrong and the fix."""

    key: str
    code: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.message} Fix: {self.fix}"


class ContractError(ValueError):
    """A contract that does not validate; :attr:`problems` lists every problem found."""

    def __init__(self, problems: Iterable[ContractProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


# -------------------------------------------------------------------------------------------- types


@dataclass(frozen=True)
class WindowHint:
    """A start window (written by ``start_window``): two times of day (``tz``), two date-times
    (``fixed``), or Jinja templates checked at run time (``templated``); ``on_missed`` is ``skip`` or
    ``fail``."""

    opens: str | None = None
    closes: str | None = None
    tz: str | None = None
    fixed: bool = False
    templated: bool = False
    on_missed: str = "skip"

    @classmethod
    def of(cls, window: Window | None, on_missed: str) -> WindowHint:
        """The hint of a parsed window (None: templated, checked at run time)."""
        if window is None:
            return cls(templated=True, on_missed=on_missed)
        if isinstance(window, FixedWindow):
            return cls(window.start.isoformat(), window.end.isoformat(), fixed=True, on_missed=on_missed)
        written = window.to_hint()
        return cls(written["opens"], written["closes"], written["tz"], on_missed=on_missed)

    def to_wire(self) -> dict[str, Any]:
        if self.templated:
            return {"templated": True, "on_missed": self.on_missed}
        wire: dict[str, Any] = {"opens": self.opens, "closes": self.closes}
        if self.fixed:
            wire["fixed"] = True
        if self.tz is not None:  # also a one-off window's: its naive times are read in it
            wire["tz"] = self.tz
        wire["on_missed"] = self.on_missed
        return wire


@dataclass(frozen=True)
class FallbackHint:
    """A fallback rung's place in its ladder (written by ``fallback_ladder``): its ``index`` among
    ``rungs``, the rung the plan assumes (``assumed_index``), how long it may wait to start
    (``start_within_s``) and whether a watcher skips it when it does not (``watched``; None in hints
    written before that field)."""

    ladder: str | None = None
    rung: str | None = None
    index: int = 0
    rungs: int | None = None
    assumed_index: int = 0
    assumed_rung: str | None = None
    start_within_s: float | None = None
    watched: bool | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "ladder": self.ladder,
            "rung": self.rung,
            "index": self.index,
            "rungs": self.rungs,
            "assumed_index": self.assumed_index,
            "assumed_rung": self.assumed_rung,
            "start_within_s": self.start_within_s,
        }
        if self.watched is not None:
            wire["watched"] = self.watched
        return wire


@dataclass(frozen=True)
class Derived:
    """What the cluster policy derives for a task: its remaining critical path (seconds, own duration
    included), its run's GPU slot-seconds per pool (independent of the pool sizes), ``digest``, the
    digest of the DAG version they were computed for
    (:func:`airflow_gpu_dag.airflow.parse_time.version_digest`), and ``descendants``, its descendants
    lead (:func:`airflow_gpu_dag.core.policy.objective.descendant_lead`: the most tasks downstream of any
    task with at most its remaining time, up to 64; None: figures written before it was; the ``fair``
    objective then analyses the DAG)."""

    remaining_s: float
    slot_seconds: Mapping[str, float]
    digest: str
    descendants: int | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "remaining_s": float(self.remaining_s),
            "slot_seconds": {pool: float(s) for pool, s in sorted(self.slot_seconds.items())},
            "digest": self.digest,
        }
        if self.descendants is not None:
            wire["descendants"] = int(self.descendants)
        return wire


@dataclass(frozen=True)
class TaskContract:
    """A task's contract (see the module docstring). ``version`` is the wire version it was read from (1:
    no ``"v"``); ``problems`` what :func:`read` left out (empty for a contract from :func:`parse`)."""

    version: int = field(default=CONTRACT_VERSION, compare=False)
    duration_s: float | None = None
    gpus: int | None = None
    gpu_memory_mib: int | None = None
    gpu_type: str | None = None
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    awaits: tuple[str, ...] = ()
    map_length: int | None = None
    window: WindowHint | None = None
    fallback: FallbackHint | None = None
    derived: Derived | None = None
    problems: tuple[ContractProblem, ...] = field(default=(), compare=False)

    @property
    def gpu_request(self) -> GpuRequest | None:
        """The GPU request (None for a task that declares no GPUs)."""
        if self.gpus is None:
            return None
        return GpuRequest(self.gpus, self.gpu_memory_mib or None, self.gpu_type)

    def declared(self) -> TaskContract:
        """The contract without what the provider derives (and without problems)."""
        return replace(self, version=CONTRACT_VERSION, derived=None, problems=())

    def with_derived(self, derived: Derived | None) -> TaskContract:
        return replace(self, version=CONTRACT_VERSION, derived=derived, problems=())

    def to_wire(self) -> dict[str, Any]:
        """The ``executor_config["gpu_dag"]`` dict: JSON types only, keys in one order, the version first."""
        wire: dict[str, Any] = {"v": CONTRACT_VERSION}
        if self.duration_s is not None:
            wire["duration_s"] = float(self.duration_s)
        if self.gpus is not None:
            wire["gpus"] = self.gpus
            if self.gpu_memory_mib:
                wire["gpu_memory_mib"] = self.gpu_memory_mib
            if self.gpu_type is not None:
                wire["gpu_type"] = self.gpu_type
        for key in ("inputs", "outputs", "awaits"):
            if getattr(self, key):
                wire[key] = list(getattr(self, key))
        if self.map_length is not None:
            wire["map_length"] = self.map_length
        if self.window is not None:
            wire["window"] = self.window.to_wire()
        if self.fallback is not None:
            wire["fallback"] = self.fallback.to_wire()
        if self.derived is not None:
            wire[DERIVED_KEY] = self.derived.to_wire()
        return wire

    def to_executor_config(self, executor_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A new ``executor_config``: ``executor_config``'s other keys (``pod_override``, ...) and this
        contract under :data:`HINTS_KEY`; the version-1 figures' key is dropped."""
        config = {k: v for k, v in dict(executor_config or {}).items() if k != LEGACY_DERIVED_KEY}
        config[HINTS_KEY] = self.to_wire()
        return config


# -------------------------------------------------------------------------------------------- keys

#: The wire keys, each with what it holds (the JSON schema, :func:`json_schema`, is made of these).
_KEYS: dict[str, dict[str, Any]] = {
    "v": {
        "type": "integer",
        "minimum": 1,
        "maximum": CONTRACT_VERSION,
        "description": "Contract version, written by the cluster policy (absent: the current keys).",
    },
    "duration_s": {
        "type": ["number", "string"],
        "description": "Estimated run time: seconds >= 0 (at most 366 days) or a duration such as "
        "'1h30m'. Alias: duration.",
    },
    "gpus": {
        "type": ["integer", "string"],
        "description": "Whole GPUs the task needs (>= 1); also its pool slots. Absent: a CPU task.",
    },
    "gpu_memory_mib": {
        "type": ["integer", "string"],
        "description": "Free memory needed on each GPU: MiB, or a size such as '80GiB'. Needs gpus. "
        "Alias: gpu_memory.",
    },
    "gpu_type": {
        "type": "string",
        "description": "GPU family ('a100', 'h100'); absent: any. Needs gpus.",
    },
    "inputs": {
        "type": ["array", "string"],
        "items": {"type": "string"},
        "description": "Dataset paths or URIs the task reads (one string is one path).",
    },
    "outputs": {
        "type": ["array", "string"],
        "items": {"type": "string"},
        "description": "Dataset paths or URIs the task writes.",
    },
    "awaits": {
        "type": ["array", "string"],
        "items": {"type": "string"},
        "description": "Dataset paths or URIs whose completeness the task waits for.",
    },
    "map_length": {
        "type": "integer",
        "minimum": 0,
        "description": "For a mapped task: the number of instances expected (at most [core] max_map_length).",
    },
    "window": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "opens": {"type": "string"},
            "closes": {"type": "string"},
            "tz": {"type": "string"},
            "fixed": {"type": "boolean"},
            "templated": {"type": "boolean"},
            "on_missed": {"enum": list(ON_MISSED)},
        },
        "description": "Start window, written by start_window().",
    },
    "fallback": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "ladder": {"type": ["string", "null"]},
            "rung": {"type": ["string", "null"]},
            "index": {"type": "integer", "minimum": 0},
            "rungs": {"type": ["integer", "null"], "minimum": 1},
            "assumed_index": {"type": "integer", "minimum": 0},
            "assumed_rung": {"type": ["string", "null"]},
            "start_within_s": {"type": ["number", "null"], "minimum": 0},
            "watched": {"type": "boolean"},
        },
        "description": "Fallback rung, written by fallback_ladder().",
    },
    DERIVED_KEY: {
        "type": "object",
        "additionalProperties": False,
        "required": ["remaining_s", "slot_seconds", "digest"],
        "properties": {
            "remaining_s": {"type": "number", "minimum": 0},
            "slot_seconds": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
            "digest": {"type": "string"},
            "descendants": {"type": "integer", "minimum": 0},
        },
        "description": "Derived by the cluster policy for every task (remaining critical path, the "
        "run's slot-seconds per pool, the DAG version's digest, its descendants lead up to 64); "
        "never written by the author: the policy "
        "replaces it, and the scheduler ignores one whose digest is not the DAG's.",
    },
}
#: Keys an author may write instead of a wire key (the names of :func:`~airflow_gpu_dag.gpu_hints`).
_ALIASES = {"duration": "duration_s", "gpu_memory": "gpu_memory_mib"}
_WINDOW_KEYS = tuple(_KEYS["window"]["properties"])
_FALLBACK_KEYS = tuple(_KEYS["fallback"]["properties"])
_DERIVED_KEYS = tuple(_KEYS[DERIVED_KEY]["properties"])


def json_schema() -> dict[str, Any]:
    """The JSON schema of ``executor_config["gpu_dag"]`` (docs/task-contract.md renders it)."""
    properties = {key: dict(spec) for key, spec in _KEYS.items()}
    for alias, key in _ALIASES.items():
        properties[alias] = {
            "type": properties[key]["type"],
            "description": f"Alias of {key} (give one of the two).",
        }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:airflow-gpu-dag:task-contract:{CONTRACT_VERSION}",
        "title": 'executor_config["gpu_dag"]: the task contract',
        "type": "object",
        "additionalProperties": False,
        "properties": dict(sorted(properties.items())),
    }


# -------------------------------------------------------------------------------------------- parsing


def _unknown(key: object, known: Iterable[str], where: str, fix: str) -> ContractProblem:
    name = key if isinstance(key, str) else _short(key)
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6) if isinstance(key, str) else []
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ContractProblem(
        name,
        "unknown-hint",
        f"{where} has an unknown key {_short(name)}.",
        f"{hint}The keys are {', '.join(sorted(known))}; {fix}",
    )


def _short(value: object, limit: int = 40) -> str:
    """``repr`` of ``value``, cut to ``limit`` characters (an int of over 4,300 digits has no repr)."""
    try:
        text = repr(value)
    except ValueError:
        return f"<a {type(value).__name__} too large to print>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Parser:
    """One pass over a raw ``gpu_dag`` dict, collecting every problem."""

    def __init__(self) -> None:
        self.problems: list[ContractProblem] = []

    def problem(self, key: str, code: str, message: str, fix: str) -> None:
        self.problems.append(ContractProblem(key, code, message, fix))

    def contract(self, raw: object) -> TaskContract:
        if raw is None:
            return TaskContract(version=1)
        if not isinstance(raw, Mapping):
            self.problem(
                HINTS_KEY,
                "bad-hint",
                f"executor_config[{HINTS_KEY!r}] must be a dict of hints, got {type(raw).__name__}.",
                _HINTS_FIX,
            )
            return TaskContract(version=1)
        values: dict[str, Any] = {}
        for key, value in raw.items():
            wire = _ALIASES.get(key, key) if isinstance(key, str) else key
            if wire not in _KEYS:
                self.problems.append(
                    _unknown(key, [*_KEYS, *_ALIASES], f"executor_config[{HINTS_KEY!r}]", _HINTS_FIX)
                )
            elif wire in values:
                alias = next(a for a, k in _ALIASES.items() if k == wire)
                self.problem(
                    str(key),
                    "bad-hint",
                    f"executor_config[{HINTS_KEY!r}] gives {wire!r} twice (as {wire!r} and as {alias!r}).",
                    f"give one of {wire!r} and {alias!r}.",
                )
            else:
                values[wire] = value
        version = self.version(values.get("v"))
        gpus, memory, gpu_type = self.gpu_request(values)
        return TaskContract(
            version=version,
            duration_s=self.duration(values.get("duration_s")),
            gpus=gpus,
            gpu_memory_mib=memory,
            gpu_type=gpu_type,
            inputs=self.paths(values, "inputs"),
            outputs=self.paths(values, "outputs"),
            awaits=self.paths(values, "awaits"),
            map_length=self.map_length(values.get("map_length")),
            window=self.window(values.get("window")),
            fallback=self.fallback(values.get("fallback")),
            derived=self.derived(values.get(DERIVED_KEY)),
        )

    def version(self, value: object) -> int:
        if value is None:
            return 1
        whole = isinstance(value, int) and not isinstance(value, bool)
        if whole and 1 <= value <= CONTRACT_VERSION:  # type: ignore[operator]
            return value  # type: ignore[return-value]
        if whole and value > CONTRACT_VERSION:  # type: ignore[operator]
            newer = f"is newer than this airflow-gpu-dag reads ({CONTRACT_VERSION})."
            message = f"contract version {_short(value)} {newer}"
            fix = "run one airflow-gpu-dag version where DAGs are parsed and where they are scheduled."
        else:
            message, fix = (
                f"contract version {_short(value)} is not one.",
                "drop 'v': the cluster policy writes it.",
            )
        self.problem("v", "bad-hint", message, fix)
        return CONTRACT_VERSION

    def duration(self, value: object) -> float | None:
        if value is None:
            return None
        try:
            return parse_estimate(value)
        except EstimateError as err:
            self.problem(
                "duration_s",
                "bad-estimate",
                f"{err}.",
                'set a valid estimate, e.g. gpu_hints(duration="45m").',
            )
            return None

    def gpu_request(self, values: Mapping[str, Any]) -> tuple[int | None, int | None, str | None]:
        count, memory, gpu_type = values.get("gpus"), values.get("gpu_memory_mib"), values.get("gpu_type")
        if count is None:
            if memory is not None or gpu_type is not None:
                key = "gpu_memory_mib" if memory is not None else "gpu_type"
                self.problem(
                    key,
                    "bad-gpu-request",
                    f"{key} is given without gpus: a task without gpus takes no GPU, so it would be ignored.",
                    "give the GPU count too, e.g. gpu_hints(gpus=1, gpu_memory='40GiB').",
                )
            return None, None, None
        try:
            request = GpuRequest.parse(count, memory, gpu_type)
        except EstimateError as err:
            key, fix = self._gpu_fault(count, memory)
            self.problem(key, "bad-gpu-request", f"{err}.", fix)
            return None, None, None
        return request.count, request.memory_mib or None, request.gpu_type

    @staticmethod
    def _gpu_fault(count: object, memory: object) -> tuple[str, str]:
        """The key at fault in a GPU request that does not parse, and its fix."""
        for key, (n, m), fix in (
            ("gpus", (count, None), "request a whole number of GPUs >= 1, e.g. gpu_hints(gpus=2)."),
            (
                "gpu_memory_mib",
                (1, memory),
                "give the memory per GPU as a size: gpu_hints(gpu_memory='40GiB').",
            ),
        ):
            try:
                GpuRequest.parse(n, m)
            except EstimateError:
                return key, fix
        return "gpu_type", "give one GPU type name, e.g. gpu_hints(gpu_type='a100'), or none for any GPU."

    def paths(self, values: Mapping[str, Any], key: str) -> tuple[str, ...]:
        value = values.get(key)
        if isinstance(value, str):
            return (value,) if value else ()
        if value is None:
            return ()
        if isinstance(value, list | tuple | set | frozenset):
            items = sorted(value, key=repr) if isinstance(value, set | frozenset) else list(value)
            if all(isinstance(p, str) for p in items):
                return tuple(items)
            bad = next(p for p in items if not isinstance(p, str))
            got = f"a list holding {type(bad).__name__} {_short(bad, 20)}"
        else:
            got = type(value).__name__
        self.problem(
            key,
            "bad-hint",
            f"hint {key!r} must be a list of dataset paths, got {got}.",
            f"pass {key}=['/data/...'] to gpu_hints().",
        )
        return ()

    def map_length(self, value: object) -> int | None:
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        self.problem(
            "map_length",
            "bad-map-length",
            f"map_length {_short(value)} is not a whole number >= 0.",
            "declare the expected number of mapped instances, e.g. gpu_hints(map_length=12).",
        )
        return None

    def _keys(self, value: Mapping[Any, Any], known: tuple[str, ...], where: str, fix: str) -> bool:
        unknown = [k for k in value if k not in known]
        for key in unknown:
            self.problems.append(_unknown(key, known, where, fix))
        return not unknown

    def window(self, value: object) -> WindowHint | None:
        if value is None:
            return None

        def bad(problem: str) -> None:
            self.problem("window", "bad-hint", f"start window hint {problem}.", _WINDOW_FIX)

        if not isinstance(value, Mapping):
            bad(f"must be a dict, got {type(value).__name__}")
            return None
        if not self._keys(value, _WINDOW_KEYS, "start window hint", _WINDOW_FIX):
            return None
        texts = {k: value.get(k) for k in ("opens", "closes", "tz")}
        flags = {k: value.get(k, False) for k in ("fixed", "templated")}
        on_missed = value.get("on_missed", "skip")
        wrong = [k for k, v in texts.items() if v is not None and not isinstance(v, str)]
        wrong += [k for k, v in flags.items() if not isinstance(v, bool)]
        if wrong:
            bad(f"{wrong[0]} {_short(value.get(wrong[0]))} has the wrong type")
            return None
        if on_missed not in ON_MISSED:
            bad(f"on_missed {_short(on_missed)} is not one of {', '.join(ON_MISSED)}")
            return None
        hint = WindowHint(
            texts["opens"], texts["closes"], texts["tz"], flags["fixed"], flags["templated"], on_missed
        )
        if not hint.templated and window_from_hint(dict(value)) is None:
            bad(f"opens={_short(hint.opens)}, closes={_short(hint.closes)} is no window")
            return None
        return hint

    def fallback(self, value: object) -> FallbackHint | None:
        """A fallback rung's hint; a malformed field is reported and left at its default (the rung keeps
        its place in its ladder)."""
        if value is None:
            return None

        def bad(problem: str) -> None:
            self.problem("fallback", "bad-hint", f"fallback hint {problem}.", _FALLBACK_FIX)

        if not isinstance(value, Mapping):
            bad(f"must be a dict, got {type(value).__name__}")
            return None
        self._keys(value, _FALLBACK_KEYS, "fallback hint", _FALLBACK_FIX)
        names: dict[str, str | None] = {}
        for key in ("ladder", "rung", "assumed_rung"):
            name = value.get(key)
            if name is not None and not isinstance(name, str):
                bad(f"{key} {_short(name)} is not a name")
                name = None
            names[key] = name
        whole: dict[str, int | None] = {}
        for key, least, default in (("index", 0, 0), ("rungs", 1, None), ("assumed_index", 0, 0)):
            number = value.get(key, default)
            if number is None and default is None:
                whole[key] = None
            elif isinstance(number, int) and not isinstance(number, bool) and number >= least:
                whole[key] = number
            else:
                bad(f"{key} {_short(number)} is not a whole number >= {least}")
                whole[key] = default
        seconds = value.get("start_within_s")
        if seconds is not None and not 0 <= real_number(seconds) < math.inf:
            bad(f"start_within_s {_short(seconds)} is not a number of seconds >= 0")
            seconds = None
        watched = value.get("watched")
        if watched is not None and not isinstance(watched, bool):
            bad(f"watched {_short(watched)} is not true or false")
            watched = None
        return FallbackHint(
            ladder=names["ladder"],
            rung=names["rung"],
            index=whole["index"] or 0,
            rungs=whole["rungs"],
            assumed_index=whole["assumed_index"] or 0,
            assumed_rung=names["assumed_rung"],
            start_within_s=None if seconds is None else float(seconds),
            watched=watched,
        )

    def derived(self, value: object) -> Derived | None:
        if value is None:
            return None
        fix = "drop it: the cluster policy writes the derived figures of every task."
        if not isinstance(value, Mapping):
            self.problem(DERIVED_KEY, "bad-hint", "derived figures must be a dict.", fix)
            return None
        if not self._keys(value, _DERIVED_KEYS, "derived figures", fix):
            return None
        remaining, seconds, digest, descendants = (value.get(k) for k in _DERIVED_KEYS)
        good = (
            0 <= real_number(remaining) < math.inf
            and isinstance(digest, str)
            and isinstance(seconds, Mapping)
            and (
                descendants is None
                or (isinstance(descendants, int) and not isinstance(descendants, bool) and descendants >= 0)
            )
        )
        pools: dict[str, float] = {}
        for pool, amount in seconds.items() if good and isinstance(seconds, Mapping) else ():
            if not isinstance(pool, str) or not 0 <= real_number(amount) < math.inf:
                good = False
                break
            pools[pool] = float(amount)
        if not good:
            self.problem(DERIVED_KEY, "bad-hint", "derived figures are malformed.", fix)
            return None
        return Derived(float(remaining), pools, str(digest), descendants)  # type: ignore[arg-type]


def _hints_of(executor_config: object) -> tuple[bool, object]:
    """``(found, raw gpu_dag value)`` of an ``executor_config``: a dict, or the ``str(dict)`` form the
    REST API returns (read with ``ast.literal_eval``, never ``eval``)."""
    if isinstance(executor_config, str):
        try:
            executor_config = ast.literal_eval(executor_config) if executor_config.strip() else {}
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # TypeError: {[1]: 2}
            return False, None
    if isinstance(executor_config, Mapping) and HINTS_KEY in executor_config:
        return True, executor_config[HINTS_KEY]
    return False, None


def parse(raw: object) -> TaskContract:
    """The contract of a raw ``executor_config["gpu_dag"]`` value (None: nothing declared).

    :raises ContractError: every problem found (messages name the key and the fix; the caller adds the
        DAG and the task).
    """
    parser = _Parser()
    contract = parser.contract(raw)
    if parser.problems:
        raise ContractError(parser.problems)
    return contract


def read(executor_config: object) -> TaskContract:
    """The contract of a task's ``executor_config`` (a dict or the REST API's ``str(dict)``). Never
    raises: a malformed field keeps its default and is listed in :attr:`TaskContract.problems`."""
    try:
        _found, raw = _hints_of(executor_config)
        parser = _Parser()
        contract = parser.contract(raw)
        return replace(contract, problems=tuple(parser.problems)) if parser.problems else contract
    except Exception as err:  # a mapping whose methods raise, a recursion: nothing is read
        problem = ContractProblem(
            HINTS_KEY, "bad-hint", f"executor_config cannot be read ({type(err).__name__}).", _HINTS_FIX
        )
        return TaskContract(version=1, problems=(problem,))


def read_derived(executor_config: object) -> Derived | None:
    """Only the derived figures of a task's ``executor_config`` (what ``get_weight`` needs, without
    reading the rest); None when there are none or they are malformed. Never raises."""
    try:
        _found, raw = _hints_of(executor_config)
        if not isinstance(raw, Mapping) or DERIVED_KEY not in raw:
            return None
        return _Parser().derived(raw[DERIVED_KEY])
    except Exception:
        return None


if __name__ == "__main__":  # python -m airflow_gpu_dag.contract: the schema docs/task-contract.md shows
    print(json.dumps(json_schema(), indent=2))
