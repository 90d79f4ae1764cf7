"""The purge-cache service's operations: purge a cache on a pool's workers, and what a worker asks before every
task (generic-worker does), answered from a per-pool copy read at most every QUEUE_PURGE_CACHE_SECONDS, as
Taskcluster's purge-cache does (`cacheTime`): a pool's workers cost one storage read per process in that time,
not one per task. The copies are kept in a map bounded in pools and bytes (KNOWN_POOLS, KNOWN_POOLS_BYTES).
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from shared.bounded import Bounded
from shared.domain.purges import MAX_POOL_REQUESTS, PURGE_REQUESTS_TABLE, PurgeRequest
from shared.operations.writes.stores import Stores
from shared.stores.purges import PurgeRequests

log = logging.getLogger("queue.purge-cache")

KNOWN_POOLS = 10_000  # pools whose requests a process keeps a copy of
KNOWN_POOLS_BYTES = 16 * 1024 * 1024  # ... and their bytes, about
EXPIRED_PER_RUN = 1_000  # expired rows one expiry run deletes (the rest wait for the next)


class PurgeCaches:
    def __init__(self, stores: Stores, cache_seconds: float) -> None:
        self.stores = stores
        self.requests = PurgeRequests(stores.tables)
        self.cache_seconds = cache_seconds
        self._pools: Bounded[str, tuple[float, list[PurgeRequest]]] = Bounded(
            KNOWN_POOLS, max_bytes=KNOWN_POOLS_BYTES, weigh=lambda pool, kept: len(pool) + _weight(kept[1])
        )

    async def purge(self, worker_pool_id: str, cache_name: str) -> None:
        """Ask the pool's workers to drop caches named `cache_name` made before now (Taskcluster's purgeCache)."""
        await self.stores.ready()
        await self.requests.put(worker_pool_id, cache_name, self.stores.now())
        self._pools.pop(worker_pool_id)  # this process's own workers see it at once

    async def of_pool(self, worker_pool_id: str, since: dt.datetime | None) -> list[PurgeRequest]:
        """The pool's open requests made at or after `since` (all without it), from a copy at most
        `cache_seconds` old."""
        now = time.monotonic()
        kept = self._pools.get(worker_pool_id)
        if kept is None or kept[0] <= now:
            await self.stores.ready()
            requests = await self.requests.of_pool(worker_pool_id, self.stores.now())
            if len(requests) >= MAX_POOL_REQUESTS:
                log.warning("purge-cache: pool %s holds more than %d open requests", worker_pool_id, MAX_POOL_REQUESTS)
            kept = (now + self.cache_seconds, requests)
            self._pools.put(worker_pool_id, kept)
        wall = self.stores.now()
        return [r for r in kept[1] if (since is None or r.before >= since) and r.expires > wall]

    async def page(self, *, limit: int, continuation: str | None) -> tuple[list[PurgeRequest], str | None]:
        """Every pool's open requests, a page at a time (Taskcluster's allPurgeRequests)."""
        await self.stores.ready()
        return await self.requests.page(self.stores.now(), limit=limit, continuation=continuation)

    async def expire_due(self) -> int:
        """Delete the requests past their expiry (at most EXPIRED_PER_RUN a run)."""
        await self.stores.ready()
        deleted = 0
        async for entity in self.requests.expired(self.stores.now()):
            await self.stores.tables.delete(PURGE_REQUESTS_TABLE, entity.partition_key, entity.row_key, entity.etag)
            deleted += 1
            if deleted >= EXPIRED_PER_RUN:
                break
        return deleted


def _weight(requests: list[PurgeRequest]) -> int:
    return sum(r.weight() for r in requests) + 100
