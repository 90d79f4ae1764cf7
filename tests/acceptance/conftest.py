"""Fixtures of the acceptance tier: an Azurite of a test's own, and hosts on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from local_host import azurite as azurite_mod
from tests.conftest import HostProcess


@pytest.fixture
def own_azurite(tmp_path) -> Iterator[azurite_mod.Azurite]:
    """An Azurite of the test's own: its hosts are the only ones that see its queues."""
    instance = azurite_mod.start(tmp_path / "azurite", in_memory=True)
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def own_hosts(host_factory: Callable[..., HostProcess],
              own_azurite: azurite_mod.Azurite) -> Iterator[Callable[..., HostProcess]]:
    """Hosts on the test's own Azurite, stopped when the test ends (before that Azurite is)."""
    started: list[HostProcess] = []

    def start(**settings: Any) -> HostProcess:
        host = host_factory(storage=own_azurite.connection_string, **settings)
        started.append(host)
        return host

    yield start
    for host in started:
        host.stop()
