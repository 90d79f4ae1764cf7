"""The unit tier's shared fixtures: the tests' clock, and the service under test on it (a module that needs another
start, or other stores, defines its own)."""

from __future__ import annotations

import pytest

from shared.runtime import Queue
from tests.clock import Clock
from tests.services import memory_service


@pytest.fixture
def clock() -> Clock:
    """The wall clock the service under test reads (`now`), moved on by hand."""
    return Clock()


@pytest.fixture
def service(request: pytest.FixtureRequest, clock: Clock) -> Queue:
    """A queue on the memory connector and the tests' clock, with the unit tier's settings (tests/services.py) and
    those of the closest `service` mark: `pytestmark = pytest.mark.service(deadline_delay=2)`."""
    mark = request.node.get_closest_marker("service")
    return memory_service(clock=clock, **(mark.kwargs if mark is not None else {}))
