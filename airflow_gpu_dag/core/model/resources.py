"""GPU requests and the units they are written in (durations, memory sizes).

Pure: no Airflow, no Kubernetes. Every parser raises :class:`EstimateError` with a message that says
what was wrong and what a valid value looks like; callers add the DAG and task id.
"""

from __future__ import annotations

import math
import numbers
import re
import unicodedata
from dataclasses import dataclass
from typing import cast

from airflow_gpu_dag.core.model.pools import normalize_gpu_type

__all__ = [
    "MAX_ESTIMATE_S",
    "EstimateError",
    "GpuRequest",
    "format_duration",
    "format_memory",
    "not_ascii",
    "parse_duration",
    "parse_estimate",
    "parse_memory_mib",
    "real_number",
]


class EstimateError(ValueError):
    """A duration, memory size or GPU request that cannot be understood or can never be valid."""


_DURATION_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}
#: Ints beyond this are no estimate (and ``float()`` of one past ~1e308 raises OverflowError).
_MAX_EXACT_INT = 2**63


#: Pool slots are an int32 column: no request can be larger.
_MAX_GPU_COUNT = 2**31 - 1


def _huge_int(value: int) -> str:
    """A huge int for a message (``repr`` of one over 4,300 digits raises ValueError)."""
    return f"{'-' if value < 0 else ''}<an integer of {abs(value).bit_length()} bits>"


_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")
_DURATION_HELP = 'use seconds (1800) or a string such as "90s", "30m", "1h30m", "2h"'
#: What each unit's factor is called, for "gives hours twice".
_UNIT_NAMES = {1.0: "seconds", 60.0: "minutes", 3600.0: "hours", 86400.0: "days"}


def not_ascii(what: str, value: str) -> EstimateError | None:
    """The error for a number or size written with characters that are not ASCII (full-width digits
    U+FF10 to U+FF19, Arabic-Indic digits), or None when ``value`` is ASCII.

    Python reads such digits as numbers (``float()`` of the full-width digits of "1000" is 1000.0), so
    a value copied from a document in another script would be taken silently; the provider refuses it
    and says the ASCII spelling when there is one (Unicode's compatibility form, NFKC)."""
    if value.isascii():
        return None
    odd = "".join(dict.fromkeys(c for c in value if not c.isascii()))
    spelled = unicodedata.normalize("NFKC", value)
    fix = f"write {spelled.strip()!r}" if spelled.isascii() else "write it with ASCII digits and letters"
    return EstimateError(f"{what} {value!r} has characters that are not ASCII ({odd!r}); {fix}")


def real_number(value: object) -> float:
    """``value`` (a real number, not a bool: ints, floats and NumPy's numbers computed in a DAG file) as
    a float: NaN for anything else, and an infinity of its sign for an int too large for a float
    (``10**400``), so one ``math.isfinite`` refuses both."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return math.nan
    try:
        return float(value)
    except OverflowError:  # an int beyond any float: only its sign is left
        return math.inf if cast(int, value) > 0 else -math.inf


def parse_duration(value: object) -> float:
    """Return a duration in seconds.

    Accepts a non-negative number of seconds, a :class:`datetime.timedelta`, or a string of one or
    more ``<number><unit>`` parts (``"90s"``, ``"30m"``, ``"1h30m"``, ``"2 hours"``). A bare numeric
    string is read as seconds. Zero is allowed (a marker task); negative, NaN and infinite are not.
    """
    seconds: float
    if isinstance(value, bool):
        raise EstimateError(f"duration {value!r} is a boolean; {_DURATION_HELP}")
    if hasattr(value, "total_seconds"):
        seconds = float(value.total_seconds())  # type: ignore[attr-defined]
    elif isinstance(value, numbers.Real):  # also NumPy's numbers (np.int64(1800)), computed in DAG files
        if isinstance(value, numbers.Integral):
            value = int(value)
            if abs(value) > _MAX_EXACT_INT:
                raise EstimateError(f"duration {_huge_int(value)} is out of range; {_DURATION_HELP}")
        try:
            seconds = float(value)
        except OverflowError:  # a Fraction too large for a float
            too_large = f"duration of type {type(value).__name__} is out of range"
            raise EstimateError(f"{too_large}; {_DURATION_HELP}") from None
    elif isinstance(value, str):
        seconds = _parse_duration_text(value)
    else:
        raise EstimateError(f"duration {value!r} has type {type(value).__name__}; {_DURATION_HELP}")
    if math.isnan(seconds) or math.isinf(seconds):
        raise EstimateError(f"duration {value!r} is not finite; {_DURATION_HELP}")
    if seconds < 0:
        raise EstimateError(f"duration {value!r} is negative; {_DURATION_HELP}")
    if seconds == 0 and math.copysign(1.0, seconds) < 0:  # -0.0 compares equal to 0 but prints "-0"
        raise EstimateError(f"duration {value!r} is negative zero; write 0 for no time")
    return seconds


def _parse_duration_text(value: str) -> float:
    """Seconds of a duration string: a bare number, or ``<number><unit>`` parts with each unit at most
    once (``"1h30m"``, ``"30m 1h"``). Refused, as they would be read silently otherwise: characters that
    are not ASCII (``float`` reads full-width digits), ``_`` digit groups (``float("1_000")`` is 1000)
    and a unit given twice (``"1h 1h"``: a typo, not two hours)."""
    text = value.strip().lower()
    if not text:
        raise EstimateError(f"duration is empty; {_DURATION_HELP}")
    if error := not_ascii("duration", value):
        raise error
    if "_" in text:
        raise EstimateError(
            f"duration {value!r} has an underscore: digit groups are not read; write "
            f"{text.replace('_', '')!r}"
        )
    if text.startswith("-"):
        raise EstimateError(f"duration {value!r} is negative; {_DURATION_HELP}")
    try:
        return float(text)
    except ValueError:
        pass
    pos = 0
    seconds = 0.0
    seen: set[float] = set()
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if not match or match.group(2) not in _DURATION_UNITS:
            raise EstimateError(f"duration {value!r} cannot be parsed; {_DURATION_HELP}")
        factor = _DURATION_UNITS[match.group(2)]
        if factor in seen:
            raise EstimateError(
                f"duration {value!r} gives {_UNIT_NAMES[factor]} twice; write each unit once, "
                'e.g. "2h" or "1h30m"'
            )
        seen.add(factor)
        seconds += float(match.group(1)) * factor
        pos = match.end()
    return seconds


#: No task's estimate is longer than this (366 days): a longer one is a typo or the wrong unit
#: (milliseconds given as seconds), and it would push critical-path weights past the int32 column.
MAX_ESTIMATE_S = 366 * 86400.0


def parse_estimate(value: object) -> float:
    """A task's estimated run time in seconds: :func:`parse_duration`, and at most
    :data:`MAX_ESTIMATE_S`.

    :raises EstimateError: what :func:`parse_duration` refuses, or an estimate longer than a year.
    """
    seconds = parse_duration(value)
    if seconds > MAX_ESTIMATE_S:
        raise EstimateError(
            f"duration {value!r} is {format_duration(seconds)}, longer than any task runs (at most "
            f"366 days): a typo or the wrong unit (a number is seconds); {_DURATION_HELP}"
        )
    return seconds


def format_duration(seconds: float) -> str:
    """Format seconds as a short human string: ``1h05m``, ``12m30s``, ``45s``."""
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s" if secs else f"{minutes}m"
    return f"{secs}s"


_MEMORY_UNITS_MIB = {
    "b": 1.0 / (1024 * 1024),
    "k": 1000 / (1024 * 1024),
    "kb": 1000 / (1024 * 1024),
    "ki": 1.0 / 1024,
    "kib": 1.0 / 1024,
    "m": 1000**2 / 1024**2,
    "mb": 1000**2 / 1024**2,
    "mi": 1.0,
    "mib": 1.0,
    "g": 1000**3 / 1024**2,
    "gb": 1000**3 / 1024**2,
    "gi": 1024.0,
    "gib": 1024.0,
    "t": 1000**4 / 1024**2,
    "tb": 1000**4 / 1024**2,
    "ti": 1024.0 * 1024,
    "tib": 1024.0 * 1024,
}
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_MEMORY_HELP = 'use a size such as "80GiB", "80Gi", "80G", "40960MiB" (an int is MiB)'


def parse_memory_mib(value: object) -> int:
    """Return a memory size in MiB (rounded up).

    Strings take a number and a unit: decimal (``K``/``KB``, ``M``/``MB``, ``G``/``GB``, ``T``/``TB``)
    or binary (``Ki``/``KiB``, ``Mi``/``MiB``, ``Gi``/``GiB``, ``Ti``/``TiB``), or ``B`` for bytes,
    case-insensitive. A bare ``int`` is MiB; a string without a unit (``"40000"``) is refused: MiB (as
    for an int) and bytes (as in Kubernetes) are both plausible readings, a millionfold apart.
    ``"80G"`` is 76,294 MiB and ``"80GiB"`` is 81,920 MiB, as in Kubernetes.
    """
    if isinstance(value, bool):
        raise EstimateError(f"GPU memory {value!r} is a boolean; {_MEMORY_HELP}")
    if isinstance(value, numbers.Integral):  # int, and NumPy's (np.int64) computed in DAG files
        value = int(value)
        if abs(value) > _MAX_EXACT_INT:
            raise EstimateError(f"GPU memory {_huge_int(value)} must be a finite size >= 0; {_MEMORY_HELP}")
        mib = float(value)
    elif isinstance(value, numbers.Real):
        try:
            mib = float(value)
        except OverflowError:  # a Fraction too large for a float
            mib = math.inf
    elif isinstance(value, str):
        if error := not_ascii("GPU memory", value):
            raise error
        match = _MEMORY_RE.match(value)
        if match and not match.group(2):
            raise EstimateError(
                f"GPU memory {value!r} has no unit; write {match.group(1) + 'MiB'!r} or "
                f"{match.group(1) + 'GiB'!r} (or the int {match.group(1)} for MiB)"
            )
        if not match or match.group(2).lower() not in _MEMORY_UNITS_MIB:
            raise EstimateError(f"GPU memory {value!r} cannot be parsed; {_MEMORY_HELP}")
        mib = float(match.group(1)) * _MEMORY_UNITS_MIB[match.group(2).lower()]
    else:
        raise EstimateError(f"GPU memory {value!r} has type {type(value).__name__}; {_MEMORY_HELP}")
    if math.isnan(mib) or math.isinf(mib) or mib < 0:
        raise EstimateError(f"GPU memory {value!r} must be a finite size >= 0; {_MEMORY_HELP}")
    return int(math.ceil(mib - 1e-9))


def format_memory(mib: int | None) -> str:
    """Format MiB as ``80GiB`` / ``512MiB``; ``-`` for no requirement."""
    if not mib:
        return "-"
    if mib % 1024 == 0:
        return f"{mib // 1024}GiB"
    return f"{mib}MiB"


@dataclass(frozen=True)
class GpuRequest:
    """What one task needs from a GPU pool: ``count`` devices, each with ``memory_mib`` free.

    ``count`` is the number of whole GPUs and also the task's pool slots. ``gpu_type`` selects the
    pool/hardware family (``"a100"``, ``"h100"``); ``None`` means any.
    """

    count: int
    memory_mib: int | None = None
    gpu_type: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.count, numbers.Integral) and not isinstance(self.count, bool | int):
            object.__setattr__(self, "count", int(self.count))  # np.int64(2): a plain int, for JSON hints
        if isinstance(self.count, bool) or not isinstance(self.count, int):
            raise EstimateError(f"GPU count {self.count!r} must be a whole number of GPUs (1, 2, 4, 8)")
        if abs(self.count) > _MAX_GPU_COUNT:  # no pool holds it (pool slots are int32)
            raise EstimateError(
                f"GPU count {_huge_int(self.count) if abs(self.count) > _MAX_EXACT_INT else self.count} "
                f"is out of range (at most {_MAX_GPU_COUNT}, the most slots an Airflow pool can have)"
            )
        if self.count <= 0:
            raise EstimateError(
                f"GPU count {self.count} must be at least 1; a task that needs no GPU should not "
                "declare a GPU request"
            )
        if self.memory_mib is not None and self.memory_mib < 0:
            raise EstimateError(f"GPU memory {self.memory_mib} MiB must be >= 0")
        if self.gpu_type is not None and not str(self.gpu_type).strip():
            raise EstimateError("GPU type must be a non-empty name such as 'a100', or None for any")
        if self.gpu_type is not None and (
            not isinstance(self.gpu_type, str) or any(c in self.gpu_type for c in "[]{}()'\",")
        ):  # a list would mean "any" silently; gpu_hints keeps one as written (repr) for the policy
            raise EstimateError(
                f"GPU type {self.gpu_type!r} is not one GPU type name such as 'a100' (or None for any); "
                "a task runs on one type: for alternatives, use a fallback ladder with one rung per type"
            )
        if self.gpu_type is not None:
            try:  # its pool is gpu_<type>: a name with no letters or digits ("--") names no pool
                normalize_gpu_type(self.gpu_type)
            except ValueError as err:
                raise EstimateError(str(err)) from None

    @classmethod
    def parse(cls, count: object, memory: object = None, gpu_type: str | None = None) -> GpuRequest:
        """Build a request from user input (``count`` int or numeric string, ``memory`` any size)."""
        if isinstance(count, str) and (error := not_ascii("GPU count", count)):
            raise error  # int() reads a full-width "4" as 4: it would be taken silently
        if isinstance(count, str) and count.strip().isdecimal():  # isdigit: "²", which int() refuses
            digits = count.strip()
            try:
                count = int(digits)
            except ValueError:  # over 4,300 digits: int() refuses it
                raise EstimateError(
                    f"GPU count of {len(digits)} digits is out of range (at most {_MAX_GPU_COUNT}, "
                    "the most slots an Airflow pool can have)"
                ) from None
        if isinstance(count, numbers.Real) and not isinstance(count, numbers.Integral | float):
            count = float(count)  # np.float32(2.0), Fraction(4): whole numbers are GPU counts
        if isinstance(count, float) and count.is_integer():
            count = int(count)
        memory_mib = None if memory in (None, "", 0) else parse_memory_mib(memory)
        if isinstance(gpu_type, str):  # another type is refused by __post_init__, naming it
            gpu_type = gpu_type.strip().lower() or None
        return cls(count=count, memory_mib=memory_mib, gpu_type=gpu_type)  # type: ignore[arg-type]

    def describe(self) -> str:
        """Short human form: ``4x a100 (80GiB each)``."""
        kind = self.gpu_type or "GPU"
        mem = f" ({format_memory(self.memory_mib)} each)" if self.memory_mib else ""
        return f"{self.count}x {kind}{mem}"
