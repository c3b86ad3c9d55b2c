"""What the watermark controller keeps in a pool's description, and when it rewrites it.

The description ends with a machine-readable state::

    gpu-dag watermark: pool 0 of capacity 4 | ... [gpu-dag-state {"last_good":4,"failures":0,
        "capacity":4,"lease":"variable:gpu_dag_watermark_lease","holder":"h:12:ab","expires":1800000180.0}]

- ``last_good`` / ``failures``: the fault ladder, read back by a controller that (re)starts;
- ``capacity``: the watermark ``C`` the pool returns to when it fails open;
- ``lease`` / ``holder`` / ``expires``: the **claim** of a running controller. ``lease`` names the
  controller group (its lease Variable or host lock file: standbys of one group share it), ``holder``
  the process that wrote it, ``expires`` (epoch) when the claim lapses unless renewed. A lapsed claim
  means no controller has written for ``fail_open_after`` intervals (a claim expiring more than
  ``MAX_CLAIM`` ahead counts as lapsed: no controller writes one, so it was edited or corrupted): the
  watchdog in the scheduler (:mod:`.watchdog`) then writes the pool back to ``capacity``. A controller
  that stops cleanly writes the pool back itself and drops the claim;
- ``why``: the controller's latest decision as data
  (:func:`~airflow_gpu_dag.core.policy.reasons.reason_to_json`: a code, the tasks involved, the times;
  bounded), which the human part says in words, and ``interval``
  the controller's seconds between ticks: what ``airflow gpu-dag explain`` and the Critical path page
  read. Both go with the claim.

The claim is renewed only when less than 1.5 intervals of it remain, and the human-readable part is
compared without its countdowns (``+12s``): a pool is not rewritten when nothing but a countdown
changed.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

from airflow_gpu_dag.core.model.resources import real_number
from airflow_gpu_dag.core.policy.reasons import Reason, reason_from_json, reason_to_json

__all__ = [
    "MAX_CLAIM",
    "RENEW_MARGIN_INTERVALS",
    "PoolState",
    "comparable",
    "human_part",
    "iso_time",
    "needs_write",
    "parse_pool_state",
    "unsized_description",
    "with_state",
]

# ``(?<!\s)``: a match starts where a run of whitespace starts, not at every position inside it (which
# made a long run of whitespace cost quadratic time on every parse).
_STATE = re.compile(r"(?<!\s)\s*\[gpu-dag-state (\{.*?\})\]")
_COUNTDOWN = re.compile(r"(?<![\w.])[+-]\d+(?:\.\d+)?(?:e[+-]?\d+)?s\b")
#: A claim is renewed once fewer than this many intervals of it remain.
RENEW_MARGIN_INTERVALS = 1.5
#: Longest a pool write stays claimed (``fail_open_after`` x ``interval``) and longest lease: 30 days.
MAX_CLAIM = 30 * 86400.0
#: How far the clocks of the controller's host and the scheduler's may disagree before a claim written
#: at the longest window reads as further ahead than any controller writes.
CLOCK_SKEW = 3600.0


#: Most slots a pool can be given (Airflow's ``slot_pool.slots`` is an int column; as for tasks).
MAX_POOL_SLOTS = 1_000_000


def _int_or_none(value: object) -> int | None:
    """A pool size read from a description: a whole number 0..MAX_POOL_SLOTS, else None (unknown). A
    hand-edited ``capacity`` of 1e12 would overflow the watchdog's UPDATE, and its one transaction
    would then open no pool at all."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):  # OverflowError: an integer too large for a float
        return None
    return int(number) if math.isfinite(number) and 0 <= number <= MAX_POOL_SLOTS else None


def _float_or_none(value: object) -> float | None:
    number = real_number(value)
    return number if math.isfinite(number) else None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class PoolState:
    """The state at the end of a pool description (see the module docstring)."""

    last_good: int | None = None
    failures: int = 0
    capacity: int | None = None
    lease: str | None = None
    holder: str | None = None
    expires: float | None = None
    source: str | None = None  # fingerprint of the source configuration that measured last_good
    interval: float | None = None  # the controller's seconds between ticks
    why: Reason | None = None  # the latest decision, as data

    def claimed(self, now: float) -> bool:
        """A live claim: a controller has written within its fail-open window. A claim expiring more
        than ``MAX_CLAIM`` (and ``CLOCK_SKEW``) after ``now`` is not live: no controller writes one (the
        window is at most ``MAX_CLAIM``), and taking it at its word would keep the pool shrunk for years."""
        return self.expires is not None and now < self.expires <= now + MAX_CLAIM + CLOCK_SKEW

    def lapsed(self, now: float) -> bool:
        """A claim that is there but not live at ``now`` (what the watchdog fails open)."""
        return self.expires is not None and not self.claimed(now)

    def unclaimed(self) -> PoolState:
        """The same state without a claim (what a released or failed-open pool carries): no controller
        decides for it, so its decision goes too."""
        return replace(self, lease=None, holder=None, expires=None, interval=None, why=None)

    def to_json(self) -> str:
        """Compact JSON; fields that are None are left out. A ``}]`` inside a string is written
        ``}\\u005d`` so that the description's state marker still ends at the first ``}]``."""
        data = {k: v for k, v in asdict(self).items() if v is not None and k != "why"}
        if self.why is not None:
            data["why"] = reason_to_json(self.why)
        return json.dumps(data, separators=(",", ":")).replace("}]", "}\\u005d")


def parse_pool_state(description: object) -> PoolState | None:
    """The state from a pool description, or None when there is none. Never raises: a field of the
    wrong type is read as absent (the description is free text anyone can edit)."""
    if not isinstance(description, str) or not description:
        return None
    *_, match = (None, *_STATE.finditer(description))  # the last: the description ends with the state
    if match is None:
        return None
    try:
        raw: Any = json.loads(match.group(1))
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    return PoolState(
        last_good=_int_or_none(raw.get("last_good")),
        failures=_int_or_none(raw.get("failures")) or 0,
        capacity=_int_or_none(raw.get("capacity")),
        lease=_str_or_none(raw.get("lease")),
        holder=_str_or_none(raw.get("holder")),
        expires=_float_or_none(raw.get("expires")),
        source=_str_or_none(raw.get("source")),
        interval=_positive_or_none(raw.get("interval")),
        why=reason_from_json(raw.get("why")),
    )


def _positive_or_none(value: object) -> float | None:
    number = _float_or_none(value)
    return number if number is not None and number > 0 else None


def human_part(description: str) -> str:
    """The description without its state."""
    return _STATE.sub("", description).rstrip()


def with_state(text: str, state: PoolState) -> str:
    """``text`` followed by ``[gpu-dag-state {...}]``."""
    return f"{text} [gpu-dag-state {state.to_json()}]"


def comparable(description: object) -> str:
    """The description as compared between ticks: countdowns (``+12s``) masked, claim expiry left out.

    Two descriptions that differ only there say the same thing; the pool is not rewritten for them.
    """
    if not isinstance(description, str):
        return repr(description)
    text = _COUNTDOWN.sub("±s", human_part(description))
    state = parse_pool_state(description)
    if state is None:
        return text
    why = state.why
    if why is not None:  # its times are the countdowns of the words: masked alike
        why = replace(why, at=0.0, until=None if why.until is None else 0.0)
    return with_state(text, replace(state, expires=None, why=why))


def needs_write(
    current: dict[str, Any] | None,
    size: int,
    description: str,
    include_deferred: bool,
    now: float,
    interval: float,
    source_wait: float = 0.0,
) -> bool:
    """Whether the pool must be written: it is missing, its size, ``include_deferred`` or the meaning
    of its description changed, or the claim in it has less than 1.5 intervals left, plus
    ``source_wait`` (the next write can come that much later: the sources are read before it)."""
    if not current:
        return True
    slots = current.get("slots")
    if isinstance(slots, bool) or not isinstance(slots, int) or slots != size:
        return True
    if bool(current.get("include_deferred", False)) != include_deferred:
        return True
    old = current.get("description")
    if comparable(old) != comparable(description):
        return True
    state = parse_pool_state(old)
    wanted = parse_pool_state(description)
    if wanted is None or wanted.expires is None:
        return False
    return (
        state is None
        or state.expires is None
        or state.expires - now < RENEW_MARGIN_INTERVALS * interval + source_wait
    )


def iso_time(epoch: float) -> str:
    """``2026-11-30T12:00:00Z`` for epoch seconds; the number itself when it is no date (a claim written
    with a huge or corrupt ``expires``): a message about a pool must never fail on its timestamp."""
    try:
        return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"epoch {epoch:g}"


def unsized_description(pool: str, slots: object, state: PoolState, event: str) -> str:
    """The description of a pool whose controller stopped (``event``: how it ended) before it learnt the
    pool's capacity: nobody can open it to a size nobody measured, so it keeps its ``slots`` and says
    how to size it. The state is kept without the claim."""
    text = (
        f"gpu-dag watermark: pool {slots}, capacity unknown | {event}: the watermark controller "
        f"{state.holder or '?'} ({state.lease or '?'}) stopped before it measured the GPUs of this pool, "
        f"which stays at {slots} slots until a controller sizes it (start one) or you do "
        f"(airflow pools set {pool} <GPUs> <description>)"
    )
    return with_state(text, state.unclaimed())
