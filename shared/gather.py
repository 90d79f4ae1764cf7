"""Independent awaitables run at once, each awaited to its end: what a write's steps use to put the messages
that go before it together (one round trip, not one after another)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def nothing() -> None:
    """A step that does nothing: the place of a step that does not apply, in `all_of`."""
    return None


async def all_of(*steps: Awaitable[Any]) -> list[Any]:
    """Run independent steps at once and wait for every one (none is left running on its own); the first
    failure is raised once all have ended."""
    done = await asyncio.gather(*steps, return_exceptions=True)
    failed = next((r for r in done if isinstance(r, BaseException)), None)
    if failed is not None:
        raise failed
    return done
