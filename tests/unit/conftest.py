"""Unit-tier plumbing: `async def` tests run in a fresh event loop each (the memory connector needs no more)."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from shared.runtime import Queue, build_queue
from shared.settings import load_settings
from shared.storage.base import QueueStore, TableStore
from shared.storage.memory import MemoryQueues, MemoryTables


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**arguments))
    return True


def memory_service(
    *,
    tables: TableStore | None = None,
    queues: QueueStore | None = None,
    clock: Callable[[], dt.datetime] | None = None,
    **settings: Any,
) -> Queue:
    """A service on the memory connector with the unit tier's settings: short claims, no deadline delay, no
    claimWork wait, resolutions left to their messages (each overridable)."""
    values: dict[str, Any] = {
        "storage": "memory",
        "root_access_token": "x" * 30,
        "claim_timeout": 60,
        "deadline_delay": 0,
        "hint_grace": 60,
        "claim_work_wait": 0,
        "resolution_grace": 0,
        **settings,
    }
    return build_queue(
        load_settings(**values),
        tables or MemoryTables(),
        queues or MemoryQueues(),
        **({"clock": clock} if clock is not None else {}),
    )
