"""In-memory table and queue stores with Azure's semantics (ETags, visibility, dequeue counts); blobs: memory_blobs.py.

For fast unit tests of the domain logic; behaviour is proven again against Azurite in the integration tests.
Filters support the small OData subset the queue uses: `PartitionKey eq @pk`, joined with `and`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import operator
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.storage.base import (
    Entity,
    Op,
    Page,
    QueueMessage,
    Received,
    announce_put,
    transaction_is_empty,
)
from shared.storage.keys import MAX_KEY_UNITS, decode_continuation, encode_continuation, key_units


class StoredKeyRefused(Exception):
    """A key longer than Azure stores (Azurite answers InvalidInput): the in-memory store refuses it as they do, so
    that a unit test sees the storage error a name too long for its key would be (shared/storage/keys.py)."""


def _refuse_long_keys(entity: Entity) -> None:
    for key in (entity.partition_key, entity.row_key):
        if key_units(key) > MAX_KEY_UNITS:
            raise StoredKeyRefused(f"a key of {key_units(key)} units: {key[:60]}...")


class MemoryTables:
    def __init__(self) -> None:
        self._tables: dict[str, dict[tuple[str, str], Entity]] = {}
        self._etags = itertools.count(1)

    def _table(self, name: str) -> dict[tuple[str, str], Entity]:
        return self._tables.setdefault(name, {})

    def _stamp(self, entity: Entity) -> Entity:
        return entity.with_etag(f'W/"{next(self._etags)}"')

    async def ensure_tables(self, names: list[str]) -> None:
        for name in names:
            self._tables.setdefault(name, {})

    async def get(self, table: str, partition_key: str, row_key: str) -> Entity | None:
        _refuse_long_keys(Entity(partition_key, row_key, {}))
        return self._table(table).get((partition_key, row_key))

    async def insert(self, table: str, entity: Entity) -> Entity | None:
        _refuse_long_keys(entity)
        rows = self._table(table)
        key = (entity.partition_key, entity.row_key)
        if key in rows:
            return None
        rows[key] = self._stamp(entity)
        return rows[key]

    async def replace(self, table: str, entity: Entity) -> Entity | None:
        _refuse_long_keys(entity)
        rows = self._table(table)
        key = (entity.partition_key, entity.row_key)
        current = rows.get(key)
        if current is None or (entity.etag is not None and current.etag != entity.etag):
            return None
        rows[key] = self._stamp(entity)
        return rows[key]

    async def upsert(self, table: str, entity: Entity) -> Entity:
        _refuse_long_keys(entity)
        rows = self._table(table)
        rows[(entity.partition_key, entity.row_key)] = self._stamp(entity)
        return rows[(entity.partition_key, entity.row_key)]

    async def delete(self, table: str, partition_key: str, row_key: str, etag: str | None = None) -> bool:
        _refuse_long_keys(Entity(partition_key, row_key, {}))
        rows = self._table(table)
        current = rows.get((partition_key, row_key))
        if current is None or (etag not in (None, "*") and current.etag != etag):
            return False
        del rows[(partition_key, row_key)]
        return True

    async def query(
        self,
        table: str,
        filter: str,
        parameters: dict[str, Any],
        *,
        limit: int | None = None,
        continuation: str | None = None,
    ) -> Page:
        compare: dict[str, Callable[[Any, Any], bool]] = {
            "eq": operator.eq,
            "ne": operator.ne,
            "lt": operator.lt,
            "le": operator.le,
            "gt": operator.gt,
            "ge": operator.ge,
        }
        conditions = []
        for clause in filter.split(" and "):
            prop, op, ref = clause.strip().split(" ", 2)
            if op not in compare or not ref.startswith("@"):
                raise NotImplementedError(f"memory store filter {clause!r}")
            conditions.append((prop, compare[op], parameters[ref[1:]]))

        def value(e: Entity, prop: str) -> Any:
            return {"PartitionKey": e.partition_key, "RowKey": e.row_key}.get(prop, e.data.get(prop))

        rows = sorted(self._table(table).values(), key=lambda e: (e.partition_key, e.row_key))
        matched = [e for e in rows if all(value(e, p) is not None and f(value(e, p), v) for p, f, v in conditions)]
        # As Azure's, the continuation names the next row by its keys (not by position: rows deleted meanwhile
        # must not make a page skip any).
        start = 0
        if continuation:
            next_pk, next_rk = decode_continuation(continuation)
            after = (next_pk, next_rk or "")
            start = next((i for i, e in enumerate(matched) if (e.partition_key, e.row_key) >= after), len(matched))
        end = len(matched) if limit is None else start + limit
        if end >= len(matched):
            return Page(matched[start:], None)
        return Page(matched[start:end], encode_continuation(matched[end].partition_key, matched[end].row_key))

    async def transact(self, table: str, ops: list[Op]) -> bool:
        return await self.commit(table, ops) is not None

    async def commit(self, table: str, ops: list[Op]) -> list[str | None] | None:
        if transaction_is_empty(ops):
            return []
        for op in ops:
            _refuse_long_keys(op.entity)
        rows = self._table(table)
        etags: list[str | None] = []
        staged = dict(rows)
        for op in ops:
            key = (op.entity.partition_key, op.entity.row_key)
            current = staged.get(key)
            if op.kind == "insert" and current is not None:
                return None
            if op.kind in ("replace", "merge", "delete") and (
                current is None or (op.entity.etag is not None and current.etag != op.entity.etag)
            ):
                return None
            if op.kind == "delete":
                del staged[key]
                etags.append(None)
                continue
            if op.kind == "merge":
                assert current is not None
                staged[key] = self._stamp(
                    Entity(current.partition_key, current.row_key, {**current.data, **op.entity.data})
                )
            else:
                staged[key] = self._stamp(op.entity)
            etags.append(staged[key].etag)
        rows.clear()
        rows.update(staged)
        return etags

    async def close(self) -> None:
        return None


@dataclass
class _Stored:
    id: str
    content: bytes
    inserted: dt.datetime
    expires: dt.datetime | None
    visible_at: dt.datetime
    dequeue_count: int = 0
    pop_receipt: str = ""


def _wall_clock() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class MemoryQueues:
    """Queues in memory. `clock`: what time it is for visibility and expiry (the tests' clock, moved by hand, so a
    wait for a message to show takes no real time); the wall clock unless given."""

    def __init__(self, clock: Callable[[], dt.datetime] | None = None) -> None:
        self._queues: dict[str, list[_Stored]] = {}
        self._lock = asyncio.Lock()
        self._now = clock or _wall_clock

    async def ensure_queues(self, names: list[str]) -> None:
        for name in names:
            self._queues.setdefault(name, [])

    async def put(self, queue: str, content: bytes, *, visible_in: int = 0, ttl: int | None = None) -> QueueMessage:
        now = self._now()
        expires = now + dt.timedelta(seconds=ttl) if ttl else None
        stored = _Stored(
            uuid.uuid4().hex,
            content,
            now,
            expires,
            now + dt.timedelta(seconds=visible_in),
            pop_receipt=uuid.uuid4().hex,
        )
        self._queues.setdefault(queue, []).append(stored)
        announce_put(queue, visible_in)
        return QueueMessage(stored.id, stored.pop_receipt, content, 0, now, expires, stored.visible_at)

    async def receive(self, queue: str, max_messages: int, visibility_timeout: int) -> Received:
        now = self._now()
        out = Received()
        async with self._lock:
            stored = self._queues.get(queue, [])
            stored[:] = [m for m in stored if m.expires is None or m.expires > now]
            for m in stored:
                if len(out) >= max_messages:
                    break
                if m.visible_at <= now:
                    m.dequeue_count += 1
                    m.pop_receipt = uuid.uuid4().hex
                    m.visible_at = now + dt.timedelta(seconds=visibility_timeout)
                    out.append(
                        QueueMessage(
                            m.id, m.pop_receipt, m.content, m.dequeue_count, m.inserted, m.expires, m.visible_at
                        )
                    )
        return out

    def _find(self, queue: str, message: QueueMessage) -> _Stored | None:
        for m in self._queues.get(queue, []):
            if m.id == message.id and m.pop_receipt == message.pop_receipt:
                return m
        return None

    async def delete(self, queue: str, message: QueueMessage) -> None:
        found = self._find(queue, message)
        if found is not None:
            self._queues[queue].remove(found)

    async def release(
        self, queue: str, message: QueueMessage, visible_in: int, *, content: bytes | None = None
    ) -> QueueMessage | None:
        found = self._find(queue, message)
        if found is None:
            return None
        found.pop_receipt = uuid.uuid4().hex
        found.visible_at = self._now() + dt.timedelta(seconds=visible_in)
        if content is not None:
            found.content = content
        announce_put(queue, visible_in)
        return QueueMessage(
            found.id,
            found.pop_receipt,
            found.content,
            found.dequeue_count,
            found.inserted,
            found.expires,
            found.visible_at,
        )

    async def approximate_count(self, queue: str) -> int:
        return len(self._queues.get(queue, []))

    async def any_visible(self, queue: str) -> bool:
        now = self._now()
        return any(m.visible_at <= now for m in self._queues.get(queue, []))

    def contents(self, queue: str) -> list[bytes]:
        """Tests: every message of `queue`, visible or not."""
        return [m.content for m in self._queues.get(queue, [])]

    def clear(self, queue: str) -> int:
        """Tests: lose every message of `queue`, visible or not (as an operator clearing it would)."""
        lost = len(self._queues.get(queue, []))
        self._queues[queue] = []
        return lost

    async def process_url(self, queue: str, expires: dt.datetime) -> str:
        return f"memory://queues/{queue}?sp=p&se={expires.isoformat()}"

    async def close(self) -> None:
        return None
