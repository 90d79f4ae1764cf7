"""The expiry index's store: which tasks expire in each hour, read by the expiry timer
(rows: shared/domain/expiry.py)."""

from __future__ import annotations

import datetime as dt

from shared import timeutil
from shared.domain.expiry import TASK_EXPIRY_TABLE, bucket
from shared.domain.messages import Shards
from shared.storage.base import Entity, TableStore, upsert_all
from shared.storage.grouped import GroupedUpserts


class ExpiryIndex:
    def __init__(self, tables: TableStore, table: str = TASK_EXPIRY_TABLE, shards: Shards | None = None) -> None:
        self.tables, self.table = tables, table
        self.shards = shards or Shards()
        self._rows = GroupedUpserts(tables)  # an hour's rows, a transaction for many requests

    def partition(self, key: str, expires: dt.datetime) -> str:
        """The (salted) hour partition of an entry."""
        return self.shards.salted(bucket(expires), key)

    async def add(self, key: str, expires: dt.datetime) -> None:
        await self._rows.upsert(
            self.table, Entity(self.partition(key, expires), key, {"expires": timeutil.iso(expires)})
        )

    async def add_all(self, entries: list[tuple[str, dt.datetime]]) -> None:
        """Many entries (key, expires) at once: a transaction per partition (and 100 entries)."""
        await upsert_all(
            self.tables,
            self.table,
            [Entity(self.partition(key, expires), key, {"expires": timeutil.iso(expires)}) for key, expires in entries],
        )

    async def due(self, cutoff: dt.datetime, limit: int) -> list[tuple[str, str]]:
        """(bucket, key) of entries whose `expires` is before `cutoff`, oldest hours first."""
        page = await self.tables.query(
            self.table,
            "PartitionKey le @bucket and expires lt @cutoff",
            {"bucket": bucket(cutoff) + "~~", "cutoff": timeutil.iso(cutoff)},
            limit=limit,
        )  # "~~": the cut-off's hour with its salted partitions
        return [(e.partition_key, e.row_key) for e in page.entities]

    async def remove(self, hour: str, key: str) -> None:
        await self.tables.delete(self.table, hour, key, etag="*")
