"""The two storage interfaces the queue is written against: a table store and a message-queue store.

Lost races come back as values (`None`), never as exceptions: a conditional write that finds the entity
changed is a normal outcome the caller re-reads and retries.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from shared import errors


@dataclass(frozen=True)
class Entity:
    """A table row: PartitionKey, RowKey, its properties, and the ETag it was read or written with."""

    partition_key: str
    row_key: str
    data: dict[str, Any] = field(default_factory=dict)
    etag: str | None = None

    def with_etag(self, etag: str | None) -> Entity:
        return replace(self, etag=etag)


@dataclass(frozen=True)
class Page:
    entities: list[Entity]
    continuation: str | None


BATCH_LIMIT = 100  # operations in one Azure Table transaction (all in one partition)


@dataclass(frozen=True)
class Op:
    """One operation of a transaction: `insert` (fails if it exists), `upsert`, `replace` (conditional on
    the entity's ETag when it has one), `merge` (sets the given properties, keeps the others; conditional
    likewise) or `delete` (conditional likewise; fails if absent)."""

    kind: str
    entity: Entity


class TableStore(Protocol):
    async def ensure_tables(self, names: list[str]) -> None: ...

    async def get(self, table: str, partition_key: str, row_key: str) -> Entity | None: ...

    async def insert(self, table: str, entity: Entity) -> Entity | None:
        """Insert; the stored entity with its ETag, or None when one with these keys exists."""

    async def replace(self, table: str, entity: Entity) -> Entity | None:
        """Replace if unchanged since `entity.etag` was read; None when it changed or is gone."""

    async def upsert(self, table: str, entity: Entity) -> Entity: ...

    async def delete(self, table: str, partition_key: str, row_key: str, etag: str | None = None) -> bool:
        """Delete (if unchanged since `etag`, when given; `"*"`: whatever it is, without asking whether it
        existed); False when absent or changed."""

    async def query(
        self,
        table: str,
        filter: str,
        parameters: dict[str, Any],
        *,
        limit: int | None = None,
        continuation: str | None = None,
    ) -> Page:
        """One page of entities matching an OData filter (`PartitionKey eq @pk and RowKey ge @from`, ...),
        in key order."""

    async def transact(self, table: str, ops: list[Op]) -> bool:
        """Apply up to 100 operations on one partition atomically; False (nothing applied) when a condition
        failed (exists, changed, absent)."""

    async def commit(self, table: str, ops: list[Op]) -> list[str | None] | None:
        """`transact`, answering the ETag each operation left (None for a delete) instead of True, so that a
        writer can make its next change conditional on this one without reading the row again."""

    async def close(self) -> None: ...


def transaction_is_empty(ops: list[Op]) -> bool:
    """Check a transaction's shape (what Azure accepts: at most 100 operations, one partition); True when there
    is nothing to do."""
    if len(ops) > BATCH_LIMIT or len({op.entity.partition_key for op in ops}) > 1:
        raise ValueError("a transaction is at most 100 operations on one partition")
    return not ops


async def all_at_once(calls: Iterable[Awaitable[Any]]) -> None:
    """Run independent storage calls at once (one round trip where one after another took one each) and wait for
    every one, none left running on its own; the first failure is raised once all have ended."""
    done = await asyncio.gather(*calls, return_exceptions=True)
    failed = next((r for r in done if isinstance(r, BaseException)), None)
    if failed is not None:
        raise failed


PARTITIONS_AT_ONCE = 32  # partitions upsert_all and delete_all write at the same time


async def _each_partition(work: list[Coroutine[Any, Any, None]], at_once: int = PARTITIONS_AT_ONCE) -> None:
    """Run the writes of several partitions at once, `at_once` at a time (a task with many dependencies writes an
    edge in each of theirs: one after another, 57 of them took 57 round trips)."""
    limit = asyncio.Semaphore(at_once)

    async def one(write: Coroutine[Any, Any, None]) -> None:
        async with limit:
            await write

    if len(work) == 1:
        await work[0]
    elif work:
        await all_at_once([one(w) for w in work])


async def upsert_all(
    tables: TableStore, table: str, entities: list[Entity], *, at_once: int = PARTITIONS_AT_ONCE
) -> None:
    """Upsert many entities, a transaction per partition and 100 (not atomic as a whole), `at_once` partitions at
    the same time."""
    by_partition: dict[str, list[Entity]] = {}
    for entity in entities:
        by_partition.setdefault(entity.partition_key, []).append(entity)

    async def partition(rows: list[Entity]) -> None:
        if len(rows) == 1:
            await tables.upsert(table, rows[0])  # the plain call: one request either way, and no batch machinery
            return
        for i in range(0, len(rows), BATCH_LIMIT):
            if not await tables.transact(table, [Op("upsert", e) for e in rows[i : i + BATCH_LIMIT]]):
                raise RuntimeError(f"an upsert transaction on {table} did not apply")  # upserts have no condition

    await _each_partition([partition(rows) for rows in by_partition.values()], at_once)


async def each_entity(tables: TableStore, table: str, filter: str, parameters: dict[str, Any]) -> AsyncIterator[Entity]:
    """Every entity the query matches, page after page of 1,000."""
    token: str | None = None
    while True:
        page = await tables.query(table, filter, parameters, limit=1000, continuation=token)
        for entity in page.entities:
            yield entity
        token = page.continuation
        if token is None:
            return


async def query_all(tables: TableStore, table: str, filter: str, parameters: dict[str, Any]) -> list[Entity]:
    """Every entity the query matches, in a list (for small tables read whole: clients, roles)."""
    return [entity async for entity in each_entity(tables, table, filter, parameters)]


async def delete_all(
    tables: TableStore, table: str, keys: list[tuple[str, str]], *, at_once: int = PARTITIONS_AT_ONCE
) -> None:
    """Delete many entities that may or may not exist (a batch where it can, one by one where it cannot), `at_once`
    partitions at the same time."""
    by_partition: dict[str, list[str]] = {}
    for pk, rk in keys:
        by_partition.setdefault(pk, []).append(rk)

    async def partition(pk: str, rks: list[str]) -> None:
        if len(rks) == 1:
            await tables.delete(table, pk, rks[0], etag="*")
            return
        for i in range(0, len(rks), BATCH_LIMIT):
            chunk = rks[i : i + BATCH_LIMIT]
            if not await tables.transact(table, [Op("delete", Entity(pk, rk)) for rk in chunk]):
                for rk in chunk:  # some were gone already
                    await tables.delete(table, pk, rk)

    await _each_partition([partition(pk, rks) for pk, rks in by_partition.items()], at_once)


def encode_message(body: bytes) -> str:
    """Queue messages are base64 text, as the Functions host decodes them (host.json `messageEncoding`)."""
    return base64.b64encode(body).decode()


def decode_message(text: str) -> bytes:
    return base64.b64decode(text)


@dataclass(frozen=True)
class QueueMessage:
    id: str
    pop_receipt: str
    content: bytes
    dequeue_count: int
    inserted: dt.datetime
    expires: dt.datetime | None = None
    next_visible: dt.datetime | None = None

    def json(self) -> Any:
        return json.loads(self.content)


class Received(list[QueueMessage]):
    """The messages one receive returned. `lost`: an attempt before the one that answered may have received
    messages whose answer never came (a dropped connection, a timeout); Azure then keeps those hidden until
    their visibility timeout ends, and nobody can get them back sooner. Callers that cannot wait that long look
    for the work by other means (claimWork reads the task queue's index)."""

    lost: bool = False
    sent_at: float | None = None  # when the receive that answered was sent (its receiver's ticks), if known

    def __init__(
        self, messages: Iterable[QueueMessage] = (), *, lost: bool = False, sent_at: float | None = None
    ) -> None:
        super().__init__(messages)
        self.lost, self.sent_at = lost, sent_at


# Told of each message this process puts that is visible at once (the queue's name). The local host listens, so that
# a queue trigger of the same process polls at once instead of after its back-off (up to maxPollingInterval); on
# Azure nothing listens and the Functions host polls on its own schedule.
PUT_LISTENERS: list[Callable[[str], None]] = []


def announce_put(queue: str, visible_in: int) -> None:
    if not visible_in:
        for listener in PUT_LISTENERS:
            listener(queue)


class QueueStore(Protocol):
    async def ensure_queues(self, names: list[str]) -> None: ...

    async def put(self, queue: str, content: bytes, *, visible_in: int = 0, ttl: int | None = None) -> QueueMessage:
        """Add a message (creating the queue when missing), invisible for `visible_in` seconds; the message as
        stored, whose id and pop receipt delete it until someone receives it."""

    async def receive(self, queue: str, max_messages: int, visibility_timeout: int) -> Received:
        """Up to `max_messages` (≤ 32) visible messages, hidden for `visibility_timeout` s (Azure: ≥ 1);
        none if there is no such queue."""

    async def delete(self, queue: str, message: QueueMessage) -> None:
        """Delete a received message; a message already gone is not an error."""

    async def release(
        self, queue: str, message: QueueMessage, visible_in: int, *, content: bytes | None = None
    ) -> QueueMessage | None:
        """Make a message visible again after `visible_in` s (Update Message), with new `content` if given; None
        if it is gone (deleted, or received by someone else since its pop receipt was issued). A message not yet
        received may be updated with the pop receipt its put returned."""

    async def approximate_count(self, queue: str) -> int: ...

    async def any_visible(self, queue: str) -> bool:
        """Whether a peek finds a message visible now (one a receive would get); False for a missing queue."""

    async def process_url(self, queue: str, expires: dt.datetime) -> str:
        """The queue's URL with a signature that may only get (receive) and delete its messages until `expires`:
        `<endpoint>/<queue>?<sas>`."""

    async def close(self) -> None: ...


JSON_CHUNK = 30_000  # characters of ASCII JSON per property (a string property holds 32 K UTF-16 units)


def pack_json(name: str, value: Any) -> dict[str, Any]:
    """`value` as JSON split over properties `<name>_0..n` plus `<name>Chunks` (a property holds 64 KiB)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=True)
    chunks = [text[i : i + JSON_CHUNK] for i in range(0, len(text), JSON_CHUNK)] or [""]
    packed: dict[str, Any] = {f"{name}_{i}": chunk for i, chunk in enumerate(chunks)}
    packed[f"{name}Chunks"] = len(chunks)
    return packed


def unpack_json(name: str, data: dict[str, Any]) -> Any:
    return json.loads("".join(data[f"{name}_{i}"] for i in range(int(data[f"{name}Chunks"]))))


def put_json(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class BlobInfo:
    size: int
    content_type: str | None
    etag: str | None
    snapshot: str | None = None  # the snapshot's id, for a snapshot


@dataclass(frozen=True)
class ServedAs:
    """The headers a download URL makes Blob Storage answer with, whatever the blob's own properties say (SAS
    response overrides): the uploader cannot choose how its data is served."""

    content_type: str
    content_disposition: str | None = None
    content_encoding: str | None = None
    content_language: str | None = None
    cache_control: str | None = None


class BlocksMissing(errors.ServiceUnavailable):
    """Another upload of the same data committed first, which discarded this upload's blocks: try again"""


@dataclass(frozen=True)
class BlobProperties:
    """The properties a committed blob keeps and answers with (what S3 keeps of a PUT's headers)."""

    content_type: str
    content_encoding: str | None = None
    content_language: str | None = None
    content_disposition: str | None = None
    cache_control: str | None = None


class BlobStore(Protocol):
    """Blob storage for artifacts. Clients move most data with signed URLs; an `s3` artifact's upload passes
    through the queue (shared/operations/s3_uploads.py), which stages it block by block."""

    async def ensure_container(self, container: str) -> None: ...

    async def upload_url(self, container: str, blob: str, expires: dt.datetime, *, overwrite: bool = True) -> str:
        """A URL that may write (single PUT, or blocks and a block list) this one blob until `expires`, and do
        nothing else: not read it, not touch another blob. Without `overwrite` it may only create the blob, so
        it is useless once the blob exists."""

    async def download_url(
        self,
        container: str,
        blob: str,
        expires: dt.datetime,
        *,
        snapshot: str | None = None,
        served_as: ServedAs | None = None,
    ) -> str:
        """A URL that may read this one blob (or this snapshot of it) until `expires`, answered with the headers
        of `served_as` when given."""

    async def info(self, container: str, blob: str) -> BlobInfo | None:
        """The blob's size and content type; None if there is no such (committed) blob."""

    async def snapshot(self, container: str, blob: str) -> BlobInfo | None:
        """Take a read-only snapshot of the blob as it is now; its size, content type and id (None: no such
        blob). No upload URL can change a snapshot, so data read from it stays as it was."""

    async def stage_block(self, container: str, blob: str, block_id: str, data: bytes) -> None:
        """Upload one uncommitted block of the blob (Put Block); block ids of one blob have one length."""

    async def commit_blocks(
        self, container: str, blob: str, block_ids: Sequence[str], properties: BlobProperties
    ) -> None:
        """Make the blob these staged blocks in this order, with these properties (Put Block List); its other
        uncommitted blocks are discarded. BlocksMissing when one of them is not staged (any more)."""

    async def commit_block(
        self, container: str, blob: str, block_id: str, *, content_type: str, content_encoding: str | None = None
    ) -> bool:
        """Make the blob that one block (Put Block List), with these properties; False when no such block was
        uploaded (a block already committed commits again). What seals an `s3` artifact uploaded to the Put
        Block URL that earlier versions handed out (docs/artifacts.md)."""

    async def write(self, container: str, blob: str, data: bytes, content_type: str) -> BlobInfo:
        """Write a (small) blob from here; its properties."""

    async def read(self, container: str, blob: str, *, snapshot: str | None = None) -> bytes | None:
        """A blob's (or snapshot's) data; None if there is none. For small blobs: it is read whole."""

    async def delete(self, container: str, blob: str) -> bool:
        """Delete the blob; False if it did not exist."""

    async def close(self) -> None: ...
