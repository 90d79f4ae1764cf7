"""The unit tier's shared fixtures: the tests' clock, and the service under test on it (a module that needs another
start, or other stores, defines its own)."""

from __future__ import annotations

import pytest

from shared import timing
from shared.runtime import Queue
from shared.storage.memory import MemoryQueues
from tests.clock import Clock
from tests.services import memory_service


@pytest.fixture
def clock() -> Clock:
    """The wall clock the service under test reads (`now`), moved on by hand."""
    return Clock()


@pytest.fixture
def service(request: pytest.FixtureRequest, clock: Clock) -> Queue:
    """A queue on the memory connector and the tests' clock (its queues' visibility too: a wait is `clock.advance`),
    with the unit tier's settings (tests/services.py) and those of the closest `service` mark:
    `pytestmark = pytest.mark.service(deadline_delay=2)`."""
    mark = request.node.get_closest_marker("service")
    return memory_service(clock=clock, queues=MemoryQueues(clock), **(mark.kwargs if mark is not None else {}))


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
