"""Letting other tasks run in a test without letting time pass: `await others_run()` instead of a short sleep, where
a test waits until the tasks it started got as far as they can (blocked on an event, a lock or a timer)."""

from __future__ import annotations

import asyncio

TURNS = 100  # turns of the event loop: every task that can run goes as far as it can, on the memory connector


async def others_run(turns: int = TURNS) -> None:
    """Give the event loop `turns` turns: tasks that are ready run; those waiting on an event or a timer stay so.
    Nothing of the wall clock passes, so what a test asserts next cannot depend on how fast this machine is."""
    for _ in range(turns):
        await asyncio.sleep(0)
