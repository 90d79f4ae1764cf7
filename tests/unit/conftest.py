"""The unit tier's shared fixtures: the tests' clock, the stores, and the one service under test over them. A module
overrides `tables` or `queues` to count or break calls, gives `blobs` (artifacts) or a `publisher` (a process that
publishes its own events), and sets the service's settings with a `service` mark."""

from __future__ import annotations

import pytest

from shared import timeutil, timing
from shared.outbox.rows import Publisher
from shared.runtime import Queue
from shared.storage.base import BlobStore, QueueStore, TableStore
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.clock import Clock
from tests.services import memory_service


@pytest.fixture
def clock() -> Clock:
    """The wall clock the service under test reads (`now`), moved on by hand. It starts on a whole millisecond, as
    times are stored, and half-way between two seconds, as real time most often is (a delay's rounding shows)."""
    return Clock(timeutil.now().replace(microsecond=500_000))


@pytest.fixture
def tables() -> TableStore:
    """The service's tables (a module overrides this fixture to count or break calls)."""
    return MemoryTables()


@pytest.fixture
def queues(clock: Clock) -> QueueStore:
    """The service's queues, on the tests' clock: a message's delay is `clock.advance` (a module may override)."""
    return MemoryQueues(clock)


@pytest.fixture
def blobs() -> BlobStore | None:
    """The service's blob store: none (a module on artifacts overrides this fixture)."""
    return None


@pytest.fixture
def publisher() -> Publisher | None:
    """What publishes the service's events itself: none, they are dispatched (a module overrides this fixture)."""
    return None


@pytest.fixture
def service(
    request: pytest.FixtureRequest,
    clock: Clock,
    tables: TableStore,
    queues: QueueStore,
    blobs: BlobStore | None,
    publisher: Publisher | None,
) -> Queue:
    """A queue on the memory connector and the tests' clock, over the `tables`, `queues`, `blobs` and `publisher`
    fixtures, with the unit tier's settings (tests/services.py) and those of the closest `service` mark:
    `pytestmark = pytest.mark.service(deadline_delay=2)`."""
    mark = request.node.get_closest_marker("service")
    queue = memory_service(
        clock=clock, tables=tables, queues=queues, blobs=blobs, **(mark.kwargs if mark is not None else {})
    )
    if publisher is not None:
        queue.stores.events.publisher = publisher
    return queue


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
