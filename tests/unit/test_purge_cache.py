"""Purge-cache's bounds, on the memory connector: a pool's workers asking before every task cost one storage read
per QUEUE_PURGE_CACHE_SECONDS (not one a task), the per-pool copies are bounded in pools, a purge made here is
seen here at once, and expired requests leave the table."""

from __future__ import annotations

import collections
import datetime as dt

from bench.opcount import Counting
from shared.operations import purge_cache as purge_mod
from shared.storage.memory import MemoryTables
from shared.stores.purges import REQUEST_LIFETIME
from tests.clock import Clock, Ticks
from tests.services import memory_service


def counted_queue(monkeypatch, ticks: Ticks, clock: Clock, counts: collections.Counter[str]):
    """A queue whose table calls are counted, its purge-cache period on `ticks`."""
    monkeypatch.setattr(purge_mod.time, "monotonic", ticks)
    return memory_service(tables=Counting(MemoryTables(), "table", counts), clock=clock, purge_cache_seconds=10)


async def test_workers_asking_before_every_task_cost_one_read_per_cache_period(monkeypatch):
    ticks, clock, counts = Ticks(), Clock(), collections.Counter[str]()
    queue = counted_queue(monkeypatch, ticks, clock, counts)

    async def go() -> None:
        await queue.purge_cache.purge("prov/wt", "gecko")
        counts.clear()
        for _ in range(1_000):  # a thousand tasks starting within the period
            found = await queue.purge_cache.of_pool("prov/wt", None)
            assert [r.cache_name for r in found] == ["gecko"]
        assert counts["table.query"] == 1
        ticks.now += 10.1
        await queue.purge_cache.of_pool("prov/wt", None)
        assert counts["table.query"] == 2

    (await go())


async def test_a_purge_here_is_seen_here_at_once_and_since_filters(monkeypatch):
    ticks, clock, counts = Ticks(), Clock(), collections.Counter[str]()
    queue = counted_queue(monkeypatch, ticks, clock, counts)

    async def go() -> None:
        assert await queue.purge_cache.of_pool("prov/wt", None) == []  # an empty answer is kept too
        await queue.purge_cache.purge("prov/wt", "gecko")
        first = (await queue.purge_cache.of_pool("prov/wt", None))[0].before
        clock.advance(5)
        assert await queue.purge_cache.of_pool("prov/wt", first + dt.timedelta(seconds=1)) == []
        await queue.purge_cache.purge("prov/wt", "gecko")
        again = await queue.purge_cache.of_pool("prov/wt", first + dt.timedelta(seconds=1))
        assert [r.before for r in again] == [first + dt.timedelta(seconds=5)]

    (await go())


async def test_the_per_pool_copies_are_bounded(monkeypatch):
    ticks, clock, counts = Ticks(), Clock(), collections.Counter[str]()
    monkeypatch.setattr(purge_mod, "KNOWN_POOLS", 50)
    queue = counted_queue(monkeypatch, ticks, clock, counts)

    async def go() -> None:
        for n in range(500):  # pools named by anyone who may ask (purgeRequests' scope)
            await queue.purge_cache.of_pool(f"prov/pool-{n}", None)
        copies = queue.purge_cache._pools
        assert len(copies) <= 50 and copies.bytes <= purge_mod.KNOWN_POOLS_BYTES
        assert "prov/pool-499" in copies and "prov/pool-0" not in copies

    (await go())


async def test_expired_requests_are_not_answered_and_are_deleted(monkeypatch):
    ticks, clock, counts = Ticks(), Clock(), collections.Counter[str]()
    queue = counted_queue(monkeypatch, ticks, clock, counts)

    async def go() -> None:
        await queue.purge_cache.purge("prov/wt", "old")
        clock.advance(REQUEST_LIFETIME.total_seconds() - 60)
        await queue.purge_cache.purge("prov/wt", "new")
        clock.advance(120)
        assert [r.cache_name for r in await queue.purge_cache.of_pool("prov/wt", None)] == ["new"]
        assert await queue.purge_cache.expire_due() == 1
        listed, _ = await queue.purge_cache.page(limit=10, continuation=None)
        assert [r.cache_name for r in listed] == ["new"]

    (await go())
