"""The purge-cache requests' store: a request per worker pool and cache, read by workers before a task (rows:
shared/domain/purges.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

from shared import timeutil
from shared.domain.purges import MAX_POOL_REQUESTS, PURGE_REQUESTS_TABLE, CacheNameTooLong, PurgeRequest
from shared.storage.base import Entity, TableStore, each_entity
from shared.storage.keys import encode_key

REQUEST_LIFETIME = dt.timedelta(days=1)  # Taskcluster's: a worker that has not asked for a day starts afresh

MAX_CACHE_NAME = 1024  # characters of a cache name; its row key must fit too (512 UTF-16 units, escaped)


class PurgeRequests:
    def __init__(self, tables: TableStore) -> None:
        self.tables = tables

    async def put(self, worker_pool_id: str, cache_name: str, now: dt.datetime) -> PurgeRequest:
        """Record a purge of `cache_name` on the pool's workers as of `now` (replacing an earlier one)."""
        if len(cache_name) > MAX_CACHE_NAME:
            raise CacheNameTooLong(length=len(cache_name), limit=MAX_CACHE_NAME)
        request = PurgeRequest(worker_pool_id, cache_name, now, now + REQUEST_LIFETIME)
        await self.tables.upsert(PURGE_REQUESTS_TABLE, request.to_entity())
        return request

    async def of_pool(self, worker_pool_id: str, now: dt.datetime) -> list[PurgeRequest]:
        """The pool's requests not yet expired, at most MAX_POOL_REQUESTS."""
        found = []
        rows = each_entity(
            self.tables,
            PURGE_REQUESTS_TABLE,
            "PartitionKey eq @pk and expires gt @now",
            {"pk": encode_key(worker_pool_id), "now": timeutil.iso(now)},
        )
        async for entity in rows:
            found.append(PurgeRequest.from_entity(entity))
            if len(found) >= MAX_POOL_REQUESTS:
                break
        return found

    async def page(
        self, now: dt.datetime, *, limit: int, continuation: str | None
    ) -> tuple[list[PurgeRequest], str | None]:
        """One page of every pool's requests not yet expired, in pool and cache name order."""
        page = await self.tables.query(
            PURGE_REQUESTS_TABLE,
            "expires gt @now",
            {"now": timeutil.iso(now)},
            limit=limit,
            continuation=continuation,
        )
        return [PurgeRequest.from_entity(e) for e in page.entities], page.continuation

    async def expired(self, now: dt.datetime) -> AsyncIterator[Entity]:
        """The rows past their `expires`, for the expiry timer to delete."""
        due = {"now": timeutil.iso(now)}
        async for entity in each_entity(self.tables, PURGE_REQUESTS_TABLE, "expires lt @now", due):
            yield entity
