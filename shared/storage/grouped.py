"""Writes of many callers' small items a group at a time ("group commit").

Index rows (a task queue's pending and claimed runs, the deadline and expiry indexes) are upserted by many
concurrent requests into a few shared partitions: a task queue's, a deadline's second, an expiry's hour. Each
caller still waits until its own row is stored, as before, but the rows that arrive while a partition's write is
in flight go together in the next one, as one transaction (at most 100 rows, no row twice). At low load nothing
waits (the first row is written at once, as a plain upsert); under load the calls per row fall with the
concurrency (eight creators: about one transaction for eight rows). Upserts have no condition, so a batch only
fails as a whole (storage unreachable), and then every caller in it gets the error.

Work nobody waits for (the index row a resolution leaves behind, deleted after the answer) may *linger*: it is
not written at once but waits up to `linger` seconds for another row of its partition, and goes with it. So it
is seldom a write of its own, and, more to the point, seldom in flight when a request's row comes (a createTask's
pending-index row used to wait a round trip behind the previous task's index delete). A row that does not linger
takes the lingering ones along at once.

Event-dispatch requests go the same way (`GroupCommit` with a queue put as the write): the requests announced
while a put is in flight go in the next message together (shared/outbox/log.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from shared import roundtrips
from shared.storage.base import BATCH_LIMIT, Entity, Op, TableStore

Item = TypeVar("Item")
Key = TypeVar("Key", bound=Hashable)


@dataclass
class _Caller(Generic[Item]):
    item: Item
    done: asyncio.Future[None]
    arrived: float  # roundtrips.now()
    spans: list[roundtrips.Span] | None  # the caller's traced round trips, which the writes it waits for join


@dataclass
class _Group(Generic[Item]):
    loop: asyncio.AbstractEventLoop
    waiting: list[_Caller[Item]] = field(default_factory=list)
    writing: list[_Caller[Item]] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None
    hurry: asyncio.Event = field(default_factory=asyncio.Event)  # set: a lingering writer goes now


class GroupCommit(Generic[Key, Item]):
    """`add(key, item)` returns once `item` is written by `write(key, items)`, with the items of the same key that
    arrived while the previous write of that key was in flight; `take` picks each write's items from the
    waiting ones (a prefix, so that items keep their order)."""

    def __init__(self, write: Callable[[Key, list[Item]], Awaitable[None]], take: Callable[[list[Item]], int]) -> None:
        self._write_items, self._take = write, take
        self._groups: dict[Key, _Group[Item]] = {}

    async def add(self, key: Key, item: Item, *, linger: float = 0.0) -> None:
        """Returns once `item` is written. `linger`: when no write of `key` is under way, wait up to that long
        for another item to go with (one that does not linger ends the wait)."""
        loop = asyncio.get_running_loop()
        group = self._groups.get(key)
        if group is None or group.loop is not loop:
            group = self._groups[key] = _Group(loop)
        done: asyncio.Future[None] = loop.create_future()
        done.add_done_callback(_retrieved)  # a caller that gave up leaves no "exception never retrieved"
        group.waiting.append(_Caller(item, done, roundtrips.now(), roundtrips.current()))
        if group.writer is None:
            # A task of its own, so that a caller that gives up (its request cancelled) strands no other.
            group.writer = loop.create_task(self._write(key, group, linger))
        elif not linger:
            group.hurry.set()
        await asyncio.shield(done)

    def pending(self) -> int:
        """Keys with items waiting to be written (nothing is kept for a key once its items are)."""
        return len(self._groups)

    async def flush(self, key: Key) -> None:
        """Returns once the items of `key` added so far are written (or failed): lingering ones go now."""
        group = self._groups.get(key)
        if group is None or group.loop is not asyncio.get_running_loop():
            return
        pending = [caller.done for caller in (*group.writing, *group.waiting)]
        group.hurry.set()
        if pending:
            await asyncio.wait(pending)

    async def _write(self, key: Key, group: _Group[Item], linger: float) -> None:
        try:
            if linger:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(group.hurry.wait(), linger)
            while group.waiting:
                count = max(1, self._take([caller.item for caller in group.waiting]))
                group.writing, group.waiting = group.waiting[:count], group.waiting[count:]
                # This task began in one caller's context: its calls are told to each caller that waits for them
                # (those still waiting wait behind this write too), from when the caller came.
                with roundtrips.traced() as spans:
                    try:
                        await self._write_items(key, [caller.item for caller in group.writing])
                    except Exception as exc:  # every caller of this batch gets the error; the next batch tries again
                        _settle(group.writing, exc)
                    else:
                        _settle(group.writing, None)
                for caller in (*group.writing, *group.waiting):
                    roundtrips.waited(spans, caller.arrived, caller.spans)
                group.writing = []
        finally:
            # Cancelled (the loop is closing) with items unwritten: fail them rather than leave their callers waiting.
            _settle([*group.writing, *group.waiting], RuntimeError("the group writer was stopped"))
            group.writing, group.waiting, group.writer = [], [], None
            if self._groups.get(key) is group:
                del self._groups[key]


class GroupedUpserts:
    """Upserts and deletes of index rows, a transaction per partition for the ones that arrive together."""

    def __init__(self, tables: TableStore) -> None:
        self.tables = tables

        async def write(key: tuple[str, str], ops: list[Op]) -> None:
            table = key[0]
            if len(ops) == 1 or not await tables.transact(table, ops):
                # Alone, or a batch in which a row to delete was gone already (a delete fails the transaction
                # then; upserts have no condition): one call per row.
                for op in ops:
                    if op.kind == "delete":
                        await tables.delete(table, op.entity.partition_key, op.entity.row_key, etag="*")
                    else:
                        await tables.upsert(table, op.entity)

        self._commit: GroupCommit[tuple[str, str], Op] = GroupCommit(write, _distinct_rows)

    async def upsert(self, table: str, entity: Entity) -> None:
        """Upsert `entity`; returns once it is stored (with whatever rows of its partition went along)."""
        await self._commit.add((table, entity.partition_key), Op("upsert", entity))

    async def flush(self, table: str, partition_key: str) -> None:
        """Returns once the rows of the partition added here so far are written (lingering deletes go now): for
        a reader that must see them, such as a count."""
        await self._commit.flush((table, partition_key))

    async def delete(self, table: str, partition_key: str, row_key: str, *, linger: float = 0.0) -> None:
        """Delete a row if it exists; returns once it is gone. `linger`: see GroupCommit.add."""
        await self._commit.add((table, partition_key), Op("delete", Entity(partition_key, row_key, {})), linger=linger)


def _settle(callers: list[_Caller[Item]], error: Exception | None) -> None:
    for caller in callers:
        if not caller.done.done():
            if error is None:
                caller.done.set_result(None)
            else:
                caller.done.set_exception(error)


def _retrieved(done: asyncio.Future[None]) -> None:
    if not done.cancelled():
        done.exception()


def distinct_rows(waiting: list[Item], row: Callable[[Item], str]) -> int:
    """How many of `waiting` one transaction takes: the longest prefix of at most 100 rows, no row (its RowKey,
    `row`) twice (rows of the same key keep their order across batches)."""
    rows: set[str] = set()
    for count, item in enumerate(waiting):
        if count == BATCH_LIMIT or row(item) in rows:
            return count
        rows.add(row(item))
    return len(waiting)


def _distinct_rows(waiting: list[Op]) -> int:
    return distinct_rows(waiting, lambda op: op.entity.row_key)
