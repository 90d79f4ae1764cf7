"""Fixtures of the acceptance tier: an Azurite of a test's own, and hosts on it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import taskcluster

from local_host import azurite as azurite_mod
from tests.acceptance.browsing import CHROMIUM
from tests.conftest import HostProcess, start_azurite


@pytest.fixture
def own_azurite(tmp_path) -> Iterator[azurite_mod.Azurite]:
    """An Azurite of the test's own: its hosts are the only ones that see its queues."""
    instance = start_azurite(tmp_path / "azurite")
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def own_hosts(
    host_factory: Callable[..., HostProcess], own_azurite: azurite_mod.Azurite
) -> Iterator[Callable[..., HostProcess]]:
    """Hosts on the test's own Azurite, stopped when the test ends (before that Azurite is)."""
    started: list[HostProcess] = []

    def start(**settings: Any) -> HostProcess:
        host = host_factory(storage=own_azurite.connection_string, **settings)
        started.append(host)
        return host

    yield start
    for host in started:
        host.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium, through Playwright (which downloads no browser here); a module's tests share it."""
    sync_api = pytest.importorskip("playwright.sync_api")
    assert CHROMIUM, "Chromium is required: apt-get install chromium"
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any, host: Any) -> Iterator[Any]:
    """A fresh browser context at 1280 px on the module's host; the test fails if the page had a script error."""
    context = browser.new_context(viewport={"width": 1280, "height": 860}, timezone_id="Europe/Berlin")
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert not errors, f"script errors on the page: {errors}"


# The tier's claimWork timings, which a module's own `host` starts from: an answer within a second, the pending
# queues polled every 0.2 s meanwhile (so a task created during a claimWork is claimed in it).
QUICK_CLAIMS: dict[str, Any] = {"claim_work_wait": 1, "claim_work_poll_interval": 0.2}


@pytest.fixture(scope="module")
def host(host_factory: Callable[..., HostProcess]) -> HostProcess:
    """A host of the module's own with the tier's settings (QUICK_CLAIMS); a module whose tests need other
    settings defines its own `host` from them."""
    return host_factory(**QUICK_CLAIMS)


def streamed_sha256(host: HostProcess, task_id: str, name: str) -> str:
    """The SHA-256 of an artifact of run 0, read through getArtifact's redirect a piece at a time."""
    url = taskcluster.Queue({"rootUrl": host.root_url}).buildUrl("getArtifact", task_id, "0", name)
    digest = hashlib.sha256()
    with httpx.stream("GET", url, follow_redirects=True, timeout=60) as answer:
        answer.raise_for_status()
        for piece in answer.iter_bytes(1 << 20):
            digest.update(piece)
    return digest.hexdigest()


def assert_memory_flat(host: HostProcess, before: float, mib: int) -> None:
    """The host's peak memory since `reset_peak_rss` (resident `before`) grew by far less than the `mib` that went
    through it: a few staged blocks, not the body."""
    grown = host.rss_mb("VmHWM") - before
    print(f"host resident {before:.0f} MiB, peak while {mib} MiB went through: +{grown:.0f} MiB")
    assert grown < min(mib / 2, 48), f"the host's peak memory grew {grown:.0f} MiB for {mib} MiB"
