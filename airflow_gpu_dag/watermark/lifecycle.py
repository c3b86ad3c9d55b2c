"""The watermark controller's start and stop: checks before anything is written, and failing open.

- :func:`preflight` (at start, before the lease is taken): every managed pool is read; a pool that
  carries a live claim of **another** controller group (another lease Variable, another host's lock
  file) is a clear error and nothing is written: two controllers would fight over its size. A missing
  pool is created (size 0 until the first tick, with this controller's claim: another group's
  controller starting meanwhile is refused; one that a replica of the same group created meanwhile is
  used); when one cannot be created, the pools created by this
  start are deleted again and the error names the pool and the fix. A controller that stops before
  its first tick leaves such a pool at 0 (its capacity was never measured) and says so in the
  description: :func:`release_pools` on a clean stop, the scheduler's watchdog once the claim lapses.
- :func:`release_pools` (clean stop: SIGTERM/SIGINT, the end of ``--once``, a lost lease): every pool
  whose claim this process wrote goes back to its capacity and the claim is dropped, so the next
  controller (or another group) starts from an open pool. A pool another controller wrote since is
  left alone.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import airflow_gpu_dag.metrics as metrics
from airflow_gpu_dag.pool_claim.state import (
    PoolState,
    iso_time,
    parse_pool_state,
    unsized_description,
    with_state,
)
from airflow_gpu_dag.watermark.config import PoolSpec

log = logging.getLogger(__name__)

__all__ = ["CREATED_DESCRIPTION", "Preflight", "PreflightError", "preflight", "release_pools"]

CREATED_DESCRIPTION = "gpu-dag watermark: created by the watermark controller; sized at its first tick"


class PreflightError(RuntimeError):
    """The controller must not start; the message names the pools and the fix."""


class PoolClient(Protocol):
    """The REST client calls used here (see :class:`airflow_gpu_dag.hooks.rest_client.AirflowRestClient`)."""

    def get_pool(self, name: str) -> dict[str, Any] | None: ...

    def set_pool(
        self, name: str, slots: int, description: str, include_deferred: bool = False
    ) -> dict[str, Any]: ...


@dataclass
class Preflight:
    """What the start-up check found: pools created (or, in a dry run, missing)."""

    created: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    taken_over: list[str] = field(default_factory=list)


def _delete(client: Any, name: str) -> None:
    try:
        client.request("DELETE", f"/pools/{quote(name, safe='')}")
    except Exception:
        log.warning("could not delete pool %s again; delete it by hand if unwanted", name, exc_info=True)


def preflight(
    client: PoolClient,
    specs: Mapping[str, PoolSpec],
    group: str,
    now: float | None = None,
    dry_run: bool = False,
    holder: str = "",
    claim_for: float = 0.0,
) -> Preflight:
    """Check the pools before the controller writes anything (see the module docstring). A pool
    created here carries the claim of ``holder`` (of ``group``) for ``claim_for`` seconds (none
    without them).

    :raises PreflightError: a pool is unreadable, managed by another controller group, or missing and
        cannot be created.
    """
    now = time.time() if now is None else now
    pools: dict[str, dict[str, Any] | None] = {}
    for name in specs:
        try:
            pools[name] = client.get_pool(name)
        except Exception as err:
            raise PreflightError(f"cannot read pool {name!r} over the REST API ({err})") from None
    report = Preflight()
    _refuse(_conflicts(pools, group, now, report), group)
    for name in report.taken_over:
        log.warning("pool %s: the claim of another controller group has lapsed; taking it over", name)
    missing = [name for name, pool in pools.items() if pool is None]
    if dry_run:
        report.missing = missing
        return report
    created = CREATED_DESCRIPTION
    if holder and claim_for > 0:
        created = with_state(created, PoolState(lease=group, holder=holder, expires=now + claim_for))
    for name in missing:
        try:
            client.set_pool(name, 0, created, include_deferred=specs[name].include_deferred)
        except Exception as err:
            try:  # created meanwhile by a controller starting at the same moment (HTTP 409)?
                there = client.get_pool(name)
            except Exception:
                there = None
            conflicts = _conflicts({name: there}, group, now, report) if there is not None else []
            if there is not None and not conflicts:
                log.info("pool %s: created meanwhile by another controller of %s", name, group)
                continue
            for done in report.created:
                _delete(client, done)
            deleted = "The pools created meanwhile were deleted again. " if report.created else ""
            _refuse(conflicts, group, deleted)
            raise PreflightError(
                f"pool {name!r} does not exist and cannot be created ({err}). Create it "
                f"(airflow pools set {shlex.quote(name)} 0 'GPU pool') or let the controller's API user "
                f"create pools. {deleted}Nothing else was written."
            ) from None
        report.created.append(name)
        log.info("pool %s: created (size 0 until the first tick)", name)
    return report


def _conflicts(
    pools: Mapping[str, dict[str, Any] | None], group: str, now: float, report: Preflight
) -> list[str]:
    """The pools another controller group claims (and still renews); lapsed claims go to
    ``report.taken_over``."""
    conflicts = []
    for name, pool in pools.items():
        state = parse_pool_state(pool.get("description")) if isinstance(pool, dict) else None
        if state is None or state.lease is None or state.lease == group:
            continue
        if state.claimed(now):
            conflicts.append(
                f"{name!r} (managed by {state.lease}, controller {state.holder}, claim renewed until "
                f"{iso_time(state.expires or now)})"
            )
        else:
            report.taken_over.append(name)
    return conflicts


def _refuse(conflicts: list[str], group: str, deleted: str = "") -> None:
    if conflicts:
        raise PreflightError(
            f"pool(s) {', '.join(conflicts)} are managed by another watermark controller; this one is "
            f"{group}. Two controllers would fight over the pool size. Manage each pool from one "
            "controller configuration, or give the controllers the same lease (lease.variable) so that "
            f"one stands by. {deleted}Nothing {'else ' if deleted else ''}was written."
        )


def release_pools(
    client: PoolClient,
    specs: Mapping[str, PoolSpec],
    holder: str,
    reason: str,
    now: float | None = None,
) -> list[str]:
    """Write every pool whose claim ``holder`` wrote back to its capacity, without the claim.

    Best effort (a pool that cannot be read or written is logged; the watchdog opens it once the
    claim lapses). Returns the pools written. A pool ``holder`` created but never sized (no capacity
    known) keeps its size; its claim is dropped and its description says so.
    """
    now = time.time() if now is None else now
    released = []
    for name, spec in specs.items():
        try:
            pool = client.get_pool(name)
            state = parse_pool_state(pool.get("description")) if isinstance(pool, dict) else None
            if pool is None or state is None or state.holder != holder:
                continue
            if state.capacity is None:
                slots = pool.get("slots")
                if isinstance(slots, int) and not isinstance(slots, bool):
                    event = f"released at {iso_time(now)} ({reason})"
                    text = unsized_description(name, slots, state, event)
                    client.set_pool(name, slots, text, spec.include_deferred)
                    log.warning(
                        "pool %s: left at %d slots: the controller %s before sizing it", name, slots, reason
                    )
                continue
            capacity = state.capacity
            text = (
                f"gpu-dag watermark: pool {capacity} of capacity {capacity} | released at {iso_time(now)}: "
                f"controller {holder} {reason} (the pool had {pool.get('slots')} slots)"
            )
            client.set_pool(name, capacity, with_state(text, state.unclaimed()), spec.include_deferred)
        except Exception as err:
            log.error("pool %s: cannot write it back to its capacity on %s (%s)", name, reason, err)
            continue
        released.append(name)
        metrics.watermark_fail_open(name, "controller")
        log.info("pool %s: back to its capacity %d (%s)", name, capacity, reason)
    return released
