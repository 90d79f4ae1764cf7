"""Purge-cache requests (Taskcluster's purge-cache service, built in): "workers of this pool, drop the caches named
so that were made before this time".

PurgeRequests: PartitionKey = the workerPoolId (`<provisionerId>/<workerType>`, key-encoded), RowKey = the cache
name (key-encoded), `before` and `expires` (ISO 8601, UTC, milliseconds: they compare as strings). A purge of the
same cache again replaces its row, with a later `before`, so a pool holds a row per cache name purged within a
day (REQUEST_LIFETIME, as Taskcluster keeps them); the expiry timer deletes the rows past their `expires`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from shared import errors, timeutil
from shared.storage.base import Entity
from shared.storage.keys import decode_key, encode_key, fitting_key

PURGE_REQUESTS_TABLE = "PurgeRequests"
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
