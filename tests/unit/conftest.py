"""The unit tier's shared fixtures: the tests' clock (a module that needs another start defines its own)."""

from __future__ import annotations

import pytest

from tests.clock import Clock


@pytest.fixture
def clock() -> Clock:
    """The wall clock the service under test reads (`now`), moved on by hand."""
    return Clock()
