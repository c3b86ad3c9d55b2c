"""Why the watermark controller sized a pool as it did, as data: a code, the tasks involved, the times.

:func:`~airflow_gpu_dag.core.policy.reservation.decide_pool` returns, with each decision, a
:class:`Reason`: the case of the reservation walk it took (:data:`CODES`), the task it reserved for or
weighed, the tasks that start now or are let through as backfill, and when the reserved task's slots
are expected free. :func:`render` puts it in the one sentence the controller writes into the pool
description (docs/watermarks.md, "Reservation"); ``airflow gpu-dag explain`` and the Critical path page
read it back from the pool's state (:func:`reason_to_json`, :func:`reason_from_json`) and say what it
means for one waiting task (:func:`for_task`). The metrics count decisions by :attr:`Reason.code`.

Pure: no Airflow. The JSON form is bounded (at most :data:`MAX_LISTED` task keys per list, each at most
:data:`MAX_KEY` characters) because it travels in a pool description on every write.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CODES",
    "HOLDING_CODES",
    "MAX_KEY",
    "MAX_LISTED",
    "TASK_CODES",
    "Reason",
    "TaskReason",
    "for_task",
    "reason_from_json",
    "reason_to_json",
    "render",
]

#: Every code of a pool decision, with what it means (docs/watermarks.md lists the same).
CODES: Mapping[str, str] = {
    "idle": "no task waits in the pool",
    "fits": "every waiting task that fits starts; nothing to reserve for",
    "too-wide": "no waiting task fits the pool's capacity",
    "not-ready": "only tasks that are not ready yet wait; none to reserve for yet",
    "next-slot": "the first task that cannot start needs 1 slot: it takes the next free slot",
    "not-urgent-enough": "a wide task waits, but its key is too close to the other runs' work to hold slots",
    "reserving": "slots are held for a wide task until enough are free (safe backfill let through)",
    "overdue": "slots are held for a wide task that is past its key by the objective's overdue time",
    "starving": "a task has waited the overdue time: slots are held, nothing behind it is backfilled",
}
#: The codes under which slots are held for :attr:`Reason.task`.
HOLDING_CODES = frozenset({"reserving", "overdue", "starving"})

#: What a pool decision means for one waiting task (:func:`for_task`).
TASK_CODES: Mapping[str, str] = {
    "reserved": "slots of the pool are held for this task",
    "starting": "it fits the free slots: the scheduler starts it at its next loop",
    "backfill": "let through as backfill: it cannot delay the task slots are held for",
    "waiting-for-reservation": "slots are held for another task; this one waits until that one starts",
    "starving": "it has waited the overdue time: nothing behind it is let through",
    "next-slot": "it takes the next slot that frees",
    "not-urgent-enough": "not urgent enough to hold slots for: it waits for slots to free by themselves",
    "waiting-for-slots": "it waits for free slots behind the tasks ahead of it in the pool's queue",
}

#: At most this many task keys per list in the JSON form (the counts are kept whole).
MAX_LISTED = 10
#: Task keys longer than this are cut in the JSON form.
MAX_KEY = 300


@dataclass(frozen=True)
class Reason:
    """One pool decision of :func:`~airflow_gpu_dag.core.policy.reservation.decide_pool`, as data.

    ``code`` is one of :data:`CODES`; ``at`` the decision time (epoch seconds on the controller's
    clock); ``task`` the key of the head ``W`` (the first task that cannot start now) with its
    ``slots``; ``free`` the pool's free slots before anything starts (``capacity`` minus what running
    tasks hold, at least 0); ``starting`` the slots the ``admitted`` tasks (ahead of ``W``, starting
    now) take, ``admitted_count`` how many they are; ``backfill_slots`` / ``backfill`` what is let
    through behind ``W``; ``until`` when ``W``'s slots are expected free (its shadow time; None:
    unknown); ``lookahead``: ``W`` is not scheduled yet, expected ready by ``until``; ``nothing_else``:
    no other ready task could take ``W``'s slots, so the pool stays open. The objective's gate:
    ``competitor`` the next waiting task of another run, ``key_gap`` its key minus ``W``'s, ``gap`` and
    ``overdue_after`` the objective's thresholds, ``past_key`` how far ``now`` is past ``W``'s key
    (``from_ready``: the gate holds for ``W`` only once it starves, ``overdue_after`` after it turned
    ready, not once it is past its key); ``starving`` the starving task and ``waited`` how long it has
    waited.
    """

    code: str
    pool: str
    capacity: int
    at: float
    task: str | None = None
    slots: int = 0
    free: int = 0
    starting: int = 0
    admitted: tuple[str, ...] = ()
    admitted_count: int = 0
    backfill_slots: int = 0
    backfill: tuple[str, ...] = ()
    backfill_count: int = 0
    until: float | None = None
    lookahead: bool = False
    nothing_else: bool = False
    competitor: str | None = None
    key_gap: float | None = None
    gap: float | None = None
    past_key: float | None = None
    overdue_after: float | None = None
    starving: str | None = None
    waited: float | None = None
    from_ready: bool = False

    @property
    def holds(self) -> bool:
        """Slots are held for :attr:`task`."""
        return self.code in HOLDING_CODES


def _num(value: float | None) -> float:
    return 0.0 if value is None else value


def render(reason: Reason) -> str:
    """The sentence the controller writes into the pool description for ``reason`` (the words of
    docs/watermarks.md; countdowns relative to :attr:`Reason.at`)."""
    code = reason.code
    if code == "idle":
        return "no task waiting; pool = capacity"
    if code == "fits":
        return f"{reason.admitted_count} waiting task(s) start, nothing to reserve for; pool = capacity"
    if code == "too-wide":
        return f"no waiting task fits capacity {reason.capacity}; pool = capacity"
    if code == "not-ready":
        return "no task ready, none to reserve for yet; pool = capacity"
    if code == "next-slot":
        return f"{reason.task} (1 slot) takes the next free slot; pool = capacity"
    if code == "not-urgent-enough":
        overdue = (
            f"held for once it has waited {_num(reason.overdue_after):.0f}s since it turned ready"
            if reason.from_ready
            else f"{_num(reason.past_key):.0f}s past (overdue after {_num(reason.overdue_after):.0f}s)"
        )
        return (
            f"{reason.task} ({reason.slots} slots) is not urgent enough to hold slots for: its key is "
            f"{_num(reason.key_gap):.0f}s before {reason.competitor}'s (gap {_num(reason.gap):.0f}s) and "
            f"{overdue}; pool = capacity"
        )
    when = "unknown" if reason.until is None else f"+{reason.until - reason.at:g}s"
    what = "expected ready and its slots free" if reason.lookahead else "slots expected free"
    text = (
        f"reserving {reason.slots} slots for {reason.task}: {reason.free} of {reason.capacity} free"
        + (f", {reason.starting} starting first" if reason.starting else "")
        + f", {what} at {when}; backfill {reason.backfill_slots} slot(s) for work that cannot delay it"
        + ("; nothing else waiting: pool = capacity" if reason.nothing_else else "")
    )
    if code == "starving":
        text += (
            f"; {reason.starving} starving ({_num(reason.waited):.0f}s waited): nothing behind it backfilled"
        )
    elif code == "overdue":
        text += f"; {_num(reason.past_key):.0f}s past its key: overdue"
    return text


# -- the JSON form, kept in the pool's state -------------------------------------------------------------
_KEYS: tuple[str, ...] = ("task", "competitor", "starving")
_INTS: tuple[str, ...] = (
    "capacity",
    "slots",
    "free",
    "starting",
    "admitted_count",
    "backfill_slots",
    "backfill_count",
)
_FLOATS: tuple[str, ...] = ("at", "until", "key_gap", "gap", "past_key", "overdue_after", "waited")
_BOOLS: tuple[str, ...] = ("lookahead", "nothing_else", "from_ready")


def _cut(key: str) -> str:
    return key if len(key) <= MAX_KEY else key[: MAX_KEY - 1] + "…"


def reason_to_json(reason: Reason) -> dict[str, Any]:
    """``reason`` as a JSON-ready object, bounded (see the module docstring): fields left at their
    default are left out, lists cut to :data:`MAX_LISTED` keys (their ``*_count`` stays whole)."""
    data: dict[str, Any] = {"code": reason.code, "pool": _cut(reason.pool)}
    for name in _INTS + _FLOATS + _BOOLS:
        value = getattr(reason, name)
        if name in ("capacity", "at") or (value is not None and value is not False and value != 0):
            data[name] = value
    for name in _KEYS:
        value = getattr(reason, name)
        if value is not None:
            data[name] = _cut(value)
    for name in ("admitted", "backfill"):
        keys = getattr(reason, name)
        if keys:
            data[name] = [_cut(k) for k in keys[:MAX_LISTED]]
    return data


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int of hundreds of digits (JSON has no limit)
        return None
    return number if math.isfinite(number) else None


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(v) for v in value[:MAX_LISTED] if isinstance(v, str))


def reason_from_json(data: object) -> Reason | None:
    """The :class:`Reason` of :func:`reason_to_json`'s form; None when ``data`` is not one (an unknown
    code, a missing pool). Never raises: a field of the wrong type reads as absent (the description is
    text anyone can edit)."""
    if not isinstance(data, Mapping):
        return None
    code, pool = data.get("code"), data.get("pool")
    if not isinstance(code, str) or code not in CODES or not isinstance(pool, str):
        return None
    fields: dict[str, Any] = {"code": code, "pool": pool}
    for name in _INTS:
        number = _int(data.get(name))
        if number is not None:
            fields[name] = number
    for name in _FLOATS:
        value = _float(data.get(name))
        if value is not None:
            fields[name] = value
    for name in _BOOLS:
        fields[name] = data.get(name) is True
    for name in _KEYS:
        value = data.get(name)
        if isinstance(value, str):
            fields[name] = value
    fields["admitted"] = _strings(data.get("admitted"))
    fields["backfill"] = _strings(data.get("backfill"))
    fields.setdefault("capacity", 0)
    fields.setdefault("at", 0.0)
    return Reason(**fields)


# -- what a decision means for one task --------------------------------------------------------------------
@dataclass(frozen=True)
class TaskReason:
    """What the pool decision ``decision`` means for the waiting task ``task``: a code of
    :data:`TASK_CODES` and the sentence :func:`for_task` says it in."""

    task: str
    code: str
    text: str
    decision: Reason


def _time(when: float | None, now: float | None, at: float) -> str:
    if when is None:
        return "an unknown time"
    ahead = when - (at if now is None else now)
    return f"+{ahead:.0f}s" if ahead >= 0 else "any moment now"  # a time already past: no "+-40s"


def for_task(decision: Reason, task: str, now: float | None = None) -> TaskReason:
    """What ``decision`` (its pool's latest) means for the waiting task ``task`` (its key), in words;
    times are counted from ``now`` (default: the decision's time)."""
    holder = decision.task
    if task in decision.admitted:
        return TaskReason(task, "starting", "it fits the free slots: the scheduler starts it now", decision)
    if decision.holds and task == holder:
        what = "expected ready and its slots free" if decision.lookahead else "its slots expected free"
        text = (
            f"{decision.slots} slots of pool {decision.pool} are held for it ({decision.free} of "
            f"{decision.capacity} free), {what} at {_time(decision.until, now, decision.at)}"
        )
        return TaskReason(task, "reserved", text, decision)
    if decision.starving is not None and task == decision.starving:
        text = (
            f"starving: it has waited {_num(decision.waited):.0f}s, so nothing behind it is let through and "
            f"slots are held for {holder}"
        )
        return TaskReason(task, "starving", text, decision)
    if task in decision.backfill:
        text = f"let through as backfill: it cannot delay {holder}, for which slots are held"
        return TaskReason(task, "backfill", text, decision)
    if decision.holds and holder is not None:
        text = (
            f"waiting for a reservation: {decision.slots} slots of pool {decision.pool} are held for "
            f"{holder} until it can start (expected at {_time(decision.until, now, decision.at)})"
        )
        return TaskReason(task, "waiting-for-reservation", text, decision)
    if decision.code == "next-slot" and task == holder:
        return TaskReason(task, "next-slot", "it takes the next slot that frees", decision)
    if decision.code == "not-urgent-enough" and task == holder:
        text = (
            f"not urgent enough to hold slots for: its key is {_num(decision.key_gap):.0f}s before "
            f"{decision.competitor}'s (gap {_num(decision.gap):.0f}s); it waits for slots to free"
        )
        return TaskReason(task, "not-urgent-enough", text, decision)
    text = "waiting for free slots behind the tasks ahead of it in the pool's queue"
    return TaskReason(task, "waiting-for-slots", text, decision)
