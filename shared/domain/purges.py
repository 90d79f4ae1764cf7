"""Purge-cache requests (Taskcluster's purge-cache service, built in): "workers of this pool, drop the caches named
so that were made before this time".

PurgeRequests: PartitionKey = the workerPoolId (`<provisionerId>/<workerType>`, key-encoded), RowKey = the cache
name (key-encoded), `before` and `expires` (ISO 8601, UTC, milliseconds: they compare as strings). A purge of the
same cache again replaces its row, with a later `before`, so a pool holds a row per cache name purged within a
day (REQUEST_LIFETIME, as Taskcluster keeps them); the expiry timer deletes the rows past their `expires`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass

from shared import errors, timeutil
from shared.storage.base import Entity, TableStore, decode_key, each_entity, encode_key, fitting_key

PURGE_REQUESTS_TABLE = "PurgeRequests"
REQUEST_LIFETIME = dt.timedelta(days=1)  # Taskcluster's: a worker that has not asked for a day starts afresh
MAX_CACHE_NAME = 1024  # characters of a cache name; its row key must fit too (512 UTF-16 units, escaped)
MAX_POOL_REQUESTS = 10_000  # rows of one pool read for its workers: 10,000 caches purged within a day


class CacheNameTooLong(errors.InputError):
    """cacheName holds {length} characters: at most {limit}"""


@dataclass(frozen=True)
class PurgeRequest:
    worker_pool_id: str
    cache_name: str
    before: dt.datetime
    expires: dt.datetime

    def to_api(self) -> dict[str, str]:
        provisioner_id, worker_type = self.worker_pool_id.split("/", 1)
        return {
            "provisionerId": provisioner_id,
            "workerType": worker_type,
            "cacheName": self.cache_name,
            "before": timeutil.iso(self.before),
        }

    def to_entity(self) -> Entity:
        data = {"before": timeutil.iso(self.before), "expires": timeutil.iso(self.expires)}
        name = fitting_key(encode_key(self.cache_name), "cacheName")
        return Entity(fitting_key(encode_key(self.worker_pool_id), "workerPoolId"), name, data)

    @staticmethod
    def from_entity(entity: Entity) -> PurgeRequest:
        return PurgeRequest(
            decode_key(entity.partition_key),
            decode_key(entity.row_key),
            timeutil.parse(entity.data["before"]),
            timeutil.parse(entity.data["expires"]),
        )

    def weight(self) -> int:
        """Bytes it takes in a cache, about."""
        return len(self.worker_pool_id) + len(self.cache_name) + 200


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
