"""The unit tier's shared fixtures: the tests' clock, the stores, and the service under test over them (a module
overrides `tables` or `queues` to count or break calls, and defines its own service only to build it otherwise)."""

from __future__ import annotations

import pytest

from shared import timing
from shared.runtime import Queue
from shared.storage.base import QueueStore, TableStore
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.clock import Clock
from tests.services import memory_service


@pytest.fixture
def clock() -> Clock:
    """The wall clock the service under test reads (`now`), moved on by hand."""
    return Clock()


@pytest.fixture
def tables() -> TableStore:
    """The service's tables (a module overrides this fixture to count or break calls)."""
    return MemoryTables()


@pytest.fixture
def queues(clock: Clock) -> QueueStore:
    """The service's queues, on the tests' clock: a message's delay is `clock.advance` (a module may override)."""
    return MemoryQueues(clock)


@pytest.fixture
def service(request: pytest.FixtureRequest, clock: Clock, tables: TableStore, queues: QueueStore) -> Queue:
    """A queue on the memory connector and the tests' clock, over the `tables` and `queues` fixtures, with the unit
    tier's settings (tests/services.py) and those of the closest `service` mark:
    `pytestmark = pytest.mark.service(deadline_delay=2)`."""
    mark = request.node.get_closest_marker("service")
    return memory_service(clock=clock, tables=tables, queues=queues, **(mark.kwargs if mark is not None else {}))


SETTLE_SCALE = 0.05  # the memory connector answers in microseconds: a write in flight is done 20x sooner


@pytest.fixture(autouse=True)
def waits_for_storage_scaled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The waits that are there for storage's round trips, scaled to the memory connector: the pauses a message
    that arrived before its write waits for that write (timing.*_SETTLE_PAUSES: the same re-checks, 0.77 s ->
    0.04 s), the lingers that gather writes into one transaction (index rows tidied, members leaving a group:
    0.2 s -> 10 ms, still longer than the burst of a test's concurrent calls), and the patience for a slow
    publication mark (2 s -> 0.1 s)."""
    for name in ("CLAIM_SETTLE_PAUSES", "EVENT_SETTLE_PAUSES"):
        monkeypatch.setattr(timing, name, tuple(p * SETTLE_SCALE for p in getattr(timing, name)))
    for name in ("INDEX_TIDY_LINGER", "LEAVE_LINGER", "MARK_PATIENCE"):
        monkeypatch.setattr(timing, name, getattr(timing, name) * SETTLE_SCALE)
