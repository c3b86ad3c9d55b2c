"""Shared helpers of the tests under ``tests/unit/triggers/``."""

from __future__ import annotations

import asyncio
from typing import Any


def first_event(trigger: Any) -> dict[str, Any]:
    """The payload of the first event ``trigger`` fires (20 s at most)."""

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    return asyncio.run(asyncio.wait_for(first(), 20))
