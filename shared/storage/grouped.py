"""Upserts of index rows written a partition at a time ("group commit").

Index rows (a task queue's pending and claimed runs, the deadline and expiry indexes) are upserted by many
concurrent requests into a few shared partitions: a task queue's, a deadline's second, an expiry's hour. Each
caller still waits until its own row is stored, as before, but the rows that arrive while a partition's write is
in flight go together in the next one, as one transaction (at most 100 rows, no row twice). At low load nothing
waits (the first row is written at once, as a plain upsert); under load the calls per row fall with the
concurrency (eight creators: about one transaction for eight rows). Upserts have no condition, so a batch only
fails as a whole (storage unreachable), and then every caller in it gets the error.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from shared.storage.base import BATCH_LIMIT, Entity, TableStore, upsert_all

_Waiting = tuple[Entity, "asyncio.Future[None]"]


@dataclass
class _Partition:
    loop: asyncio.AbstractEventLoop
    waiting: list[_Waiting] = field(default_factory=list)
    writing: list[_Waiting] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None


class GroupedUpserts:
    def __init__(self, tables: TableStore) -> None:
        self.tables = tables
        self._partitions: dict[tuple[str, str], _Partition] = {}

    async def upsert(self, table: str, entity: Entity) -> None:
        """Upsert `entity`; returns once it is stored (with whatever rows of its partition went along)."""
        key, loop = (table, entity.partition_key), asyncio.get_running_loop()
        partition = self._partitions.get(key)
        if partition is None or partition.loop is not loop:
            partition = self._partitions[key] = _Partition(loop)
        done: asyncio.Future[None] = loop.create_future()
        done.add_done_callback(_retrieved)  # a caller that gave up leaves no "exception never retrieved"
        partition.waiting.append((entity, done))
        if partition.writer is None:
            # A task of its own, so that a caller that gives up (its request cancelled) strands no other.
            partition.writer = loop.create_task(self._write(key, partition))
        await asyncio.shield(done)

    async def _write(self, key: tuple[str, str], partition: _Partition) -> None:
        table = key[0]
        try:
            while partition.waiting:
                partition.writing = _take_batch(partition.waiting)
                try:
                    await upsert_all(self.tables, table, [entity for entity, _ in partition.writing])
                except Exception as exc:  # every caller of this batch gets the error; the next batch tries again
                    _settle(partition.writing, exc)
                else:
                    _settle(partition.writing, None)
                partition.writing = []
        finally:
            # Cancelled (the loop is closing) with rows unwritten: fail them rather than leave their callers waiting.
            _settle([*partition.writing, *partition.waiting], RuntimeError("the index writer was stopped"))
            partition.writing, partition.waiting, partition.writer = [], [], None
            if self._partitions.get(key) is partition:
                del self._partitions[key]


def _settle(callers: list[_Waiting], error: Exception | None) -> None:
    for _, done in callers:
        if not done.done():
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)


def _retrieved(done: asyncio.Future[None]) -> None:
    if not done.cancelled():
        done.exception()


def _take_batch(waiting: list[_Waiting]) -> list[_Waiting]:
    """The longest prefix of `waiting` that one transaction takes (at most 100 rows, no row twice): rows of the
    same key keep their order across batches."""
    batch: list[_Waiting] = []
    rows: set[str] = set()
    for entity, done in waiting:
        if len(batch) == BATCH_LIMIT or entity.row_key in rows:
            break
        rows.add(entity.row_key)
        batch.append((entity, done))
    del waiting[:len(batch)]
    return batch
