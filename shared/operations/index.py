"""The Index's operations: finding, listing, inserting and deleting entries (the Index API), indexing a completed
task's `index.` routes (called by the resolution that follows the completion), and expiry.

Entry writes are cheap where they repeat: a path this process wrote is remembered with its ETag, and a later entry
that outranks the remembered one replaces it on that ETag (one call; a path another process changed meanwhile
fails the condition and is read). A path not remembered is inserted, with the other new paths of its namespace
that arrive while an insert of that namespace is in flight (one transaction; group commit,
shared/storage/grouped.py): a push's tasks completing together share them.

Indexing happens exactly once in effect: the completion's resolution message stands until the resolution,
indexing included, is done (shared/operations/resolution/steps.py, `resolve_here`); a process that dies before leaves
the message to its handler, which indexes again. Every write is idempotent (the same entry written twice is the
same entry) and conditional on the ETag read, so a retry, or two tasks racing for one path, leave the entry the
rank rule chooses (shared/domain/index.py).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from shared import errors, faults, timeutil
from shared.bounded import Bounded
from shared.domain.index import (
    INDEX_TABLE,
    MAX_FIND_MANY,
    IndexedTask,
    IndexedTaskNotFound,
    InvalidIndexPath,
    ancestors,
    data_size,
    entry_partition,
    hour_ceiling,
    join,
    name_key,
    namespace_partition,
    route_entries,
    split,
    words,
)
from shared.domain.tasks import Task
from shared.logs import fields
from shared.operations.writes.stores import Stores
from shared.storage.base import Entity, Op
from shared.storage.grouped import GroupCommit, distinct_rows
from shared.storage.keys import decode_key

log = logging.getLogger("queue.index")

KNOWN_NAMESPACES = 10_000  # namespaces this process wrote or read, with the expiry stored (a few MB at most)
KNOWN_ENTRIES = 10_000  # entries this process wrote, with their ETags ...
KNOWN_ENTRIES_BYTES = 16 * 1024 * 1024  # ... at most (an entry's data is up to 32 KiB)
WRITE_ATTEMPTS = 20  # conditional writes of one row that lose a race before the call fails (500, safe to retry)
AT_ONCE = 32  # point reads of one findTasksAtIndex page in flight together
# Entries' serialized bytes in one transaction of new paths (Azure takes 4 MiB a batch, and an entry's data may
# take 200 KB escaped: 32 KiB of UTF-8 outside ASCII).
BATCH_BYTES = 2 * 1024 * 1024


class BadContinuation(errors.InvalidRequestArguments):
    """continuationToken `{token}` is not one this index gave: pass back the `continuationToken` of the previous
    page unchanged"""


@dataclass
class _NewEntry:
    """A path not known here, inserted with the other new paths of its namespace that arrive meanwhile: the ETag
    it was stored with, or None when a row was at its path."""

    entity: Entity
    etag: str | None = None


class TaskIndex:
    def __init__(self, stores: Stores) -> None:
        self.stores = stores
        # namespace -> the expiry stored for it, as last written or read here (rows only ever grow later)
        self._namespaces: Bounded[str, dt.datetime] = Bounded(
            KNOWN_NAMESPACES, max_bytes=4 * 1024 * 1024, weigh=lambda k, _: len(k)
        )
        # path -> the entry this process last wrote there, with the ETag it left
        self._entries: Bounded[str, tuple[str, IndexedTask]] = Bounded(
            KNOWN_ENTRIES, max_bytes=KNOWN_ENTRIES_BYTES, weigh=lambda path, known: len(path) + data_size(known[1].data)
        )
        self._inserts: GroupCommit[str, _NewEntry] = GroupCommit(self._insert_together, _distinct_paths)

    # --- reads ---------------------------------------------------------------------------------------------

    async def _get(self, path: str) -> IndexedTask | None:
        namespace, name = split(path)
        entity = await self.stores.tables.get(INDEX_TABLE, entry_partition(namespace), name_key(name))
        if entity is None:
            return None
        entry = IndexedTask.from_entity(path, entity)
        return entry if entry.expires > self.stores.now() else None

    async def find(self, path: str) -> IndexedTask:
        await self.stores.ready()
        entry = await self._get(path)
        if entry is None:
            raise IndexedTaskNotFound(path=path)
        return entry

    async def find_many(
        self, paths: list[str], *, limit: int, continuation: str | None
    ) -> tuple[list[IndexedTask], str | None]:
        """The entries at `paths` that exist, `limit` paths looked up per page (Taskcluster's findTasksAtIndex);
        a malformed path is one where nothing can be indexed."""
        if len(paths) > MAX_FIND_MANY:
            raise errors.InputError(f"findTasksAtIndex takes at most {MAX_FIND_MANY} index paths, not {len(paths)}")
        await self.stores.ready()
        start = _offset(continuation) if continuation is not None else 0
        if start > len(paths):
            raise BadContinuation(token=continuation)
        chunk = paths[start : start + limit]
        limiter = asyncio.Semaphore(AT_ONCE)

        async def one(path: str) -> IndexedTask | None:
            async with limiter:
                try:
                    return await self._get(path)
                except InvalidIndexPath:
                    return None

        found = [e for e in await asyncio.gather(*(one(p) for p in chunk)) if e is not None]
        end = start + len(chunk)
        return found, (_token(end) if end < len(paths) else None)

    async def list_tasks(
        self, namespace: str, *, limit: int, continuation: str | None
    ) -> tuple[list[IndexedTask], str | None]:
        words(namespace)
        await self.stores.ready()
        page = await self._listing(entry_partition(namespace), limit, continuation)
        return [IndexedTask.from_entity(join(namespace, decode_key(e.row_key)), e) for e in page[0]], page[1]

    async def list_namespaces(
        self, namespace: str, *, limit: int, continuation: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        words(namespace)
        await self.stores.ready()
        rows, token = await self._listing(namespace_partition(namespace), limit, continuation)
        return [
            {
                "namespace": join(namespace, decode_key(e.row_key)),
                "name": decode_key(e.row_key),
                "expires": e.data["expires"],
            }
            for e in rows
        ], token

    async def _listing(self, partition: str, limit: int, continuation: str | None) -> tuple[list[Entity], str | None]:
        """One page of a partition's rows that have not expired. A page may hold fewer than `limit` rows (the
        storage service filters after it takes `limit` rows) and still have a continuation: follow it."""
        page = await self.stores.tables.query(
            INDEX_TABLE,
            "PartitionKey eq @pk and expires gt @now",
            {"pk": partition, "now": timeutil.iso(self.stores.now())},
            limit=limit,
            continuation=continuation,
        )
        return page.entities, page.continuation

    # --- writes ---------------------------------------------------------------------------------------------

    async def insert(self, entry: IndexedTask) -> IndexedTask:
        """Index `entry` at its path (and create its namespaces), unless an entry there outranks it: the entry
        that stays at the path."""
        namespace, _ = split(entry.path)
        await self.stores.ready()
        stored, _ = await asyncio.gather(self._write_entry(entry), self._ensure_namespaces(namespace, entry.expires))
        return stored

    async def _write_entry(self, entry: IndexedTask) -> IndexedTask:
        tables = self.stores.tables
        new = entry.to_entity()
        known = self._entries.get(entry.path)
        if known is None:  # a new path, as far as this process knows: inserted with its namespace's new ones
            item = _NewEntry(new)
            await self._inserts.add(new.partition_key, item)
            if self._kept(entry, item.etag):
                return entry
        elif entry.replaces(known[1], self.stores.now()):
            stored = await tables.replace(INDEX_TABLE, new.with_etag(known[0]))
            if self._kept(entry, stored.etag if stored else None):  # unchanged since this process wrote it
                return entry
        # Taken (another process), changed since, or not outranking what this process wrote: decided on the row.
        for _ in range(WRITE_ATTEMPTS):
            found = await tables.get(INDEX_TABLE, new.partition_key, new.row_key)
            if found is None:
                stored = await tables.insert(INDEX_TABLE, new)
                if self._kept(entry, stored.etag if stored else None):
                    return entry
                continue
            current = IndexedTask.from_entity(entry.path, found)
            if not entry.replaces(current, self.stores.now()):
                return current  # it outranks this one, or is this one written before (a retried indexing)
            stored = await tables.replace(INDEX_TABLE, new.with_etag(found.etag))
            if self._kept(entry, stored.etag if stored else None):
                return entry
        raise errors.InternalServerError(f"index path {entry.path} keeps changing; try again")

    def _kept(self, entry: IndexedTask, etag: str | None) -> bool:
        """Whether a write of `entry` stored it (it left an ETag): then remembered with that ETag."""
        if etag is None:
            return False
        self._entries.put(entry.path, (etag, entry))
        return True

    async def _insert_together(self, partition: str, items: list[_NewEntry]) -> None:
        """Insert new paths of one namespace: in one transaction when several came together; when it fails (a
        row was at one of the paths), each alone, so that the others are still one call each."""
        tables = self.stores.tables
        if len(items) > 1:
            etags = await tables.commit(INDEX_TABLE, [Op("insert", item.entity) for item in items])
            if etags is not None:
                for item, etag in zip(items, etags, strict=True):
                    item.etag = etag
                return

        async def alone(item: _NewEntry) -> None:
            stored = await tables.insert(INDEX_TABLE, item.entity)
            item.etag = stored.etag if stored is not None else None

        await asyncio.gather(*(alone(item) for item in items))

    async def _ensure_namespaces(self, namespace: str, expires: dt.datetime) -> None:
        """Every namespace down to `namespace` exists and expires no earlier than `expires` (rounded up to the
        hour). Those this process knows to be so are not written."""
        needed = hour_ceiling(expires)
        todo = [
            (parent, name)
            for parent, name in ancestors(namespace)
            if (self._namespaces.get(join(parent, name)) or dt.datetime.min.replace(tzinfo=dt.UTC)) < needed
        ]
        await asyncio.gather(*(self._ensure_namespace(parent, name, needed) for parent, name in todo))

    async def _ensure_namespace(self, parent: str, name: str, needed: dt.datetime) -> None:
        tables = self.stores.tables
        row = Entity(namespace_partition(parent), name_key(name), {"expires": timeutil.iso(needed)})
        full = join(parent, name)
        for _ in range(WRITE_ATTEMPTS):
            if await tables.insert(INDEX_TABLE, row) is not None:
                self._namespaces.put(full, needed)
                return
            found = await tables.get(INDEX_TABLE, row.partition_key, row.row_key)
            if found is None:
                continue  # expired and deleted meanwhile
            stored = timeutil.parse(found.data["expires"])
            if stored >= needed:
                self._namespaces.put(full, stored)
                return
            if await tables.replace(INDEX_TABLE, row.with_etag(found.etag)) is not None:
                self._namespaces.put(full, needed)
                return
        raise errors.InternalServerError(f"index namespace {full} keeps changing; try again")

    async def delete(self, path: str) -> None:
        """Remove the entry at `path` (its namespaces stay until they expire); nothing there is not an error."""
        namespace, name = split(path)
        await self.stores.ready()
        self._entries.pop(path)
        await self.stores.tables.delete(INDEX_TABLE, entry_partition(namespace), name_key(name), etag="*")

    # --- indexing completed tasks ---------------------------------------------------------------------------

    async def index_completed(self, task: Task, run_id: int) -> int:
        """Index a completed run's task at each of its `index.` routes (Taskcluster's index service does so on
        `task-completed`); how many entries it wrote or found written. Routes that cannot be indexed are logged,
        never retried. A storage failure raises: the resolution is then retried from its message."""
        entries, problems = route_entries(task.definition)
        for problem in problems:
            log.warning("index route not indexed: %s", problem, extra=fields(taskId=task.task_id, runId=run_id))
        if not entries:
            return 0
        faults.point("before-indexing")
        resolved = task.runs[run_id].resolved
        indexed_at = resolved if resolved is not None else self.stores.now()
        await self.stores.ready()
        await asyncio.gather(
            *(self.insert(IndexedTask(e.path, task.task_id, e.rank, e.data, e.expires, indexed_at)) for e in entries)
        )
        log.debug("indexed at %d paths", len(entries), extra=fields(taskId=task.task_id, runId=run_id))
        return len(entries)

    # --- expiry ---------------------------------------------------------------------------------------------

    async def expire_due(self) -> int:
        """The expiry timer's run: what expired more than QUEUE_EXPIRY_DELAY ago (reads hide it already)."""
        deleted = await self.expire(self.stores.now() - dt.timedelta(seconds=self.stores.settings.expiry_delay))
        if deleted:
            log.info("expired %d index entries and namespaces", deleted, extra=fields(event="index-expired"))
        return deleted

    async def expire(self, cutoff: dt.datetime, *, budget_seconds: float = 60) -> int:
        """Delete entries and namespaces whose `expires` is before `cutoff`: a query with a filter over the table
        (the service filters; what comes back is what is deleted), run by the expiry timer."""
        await self.stores.ready()
        give_up = time.monotonic() + budget_seconds
        deleted, continuation = 0, None
        tables = self.stores.tables
        limiter = asyncio.Semaphore(AT_ONCE)

        async def delete(entity: Entity) -> bool:
            async with limiter:  # on the ETag read: a row extended meanwhile stays
                return await tables.delete(INDEX_TABLE, entity.partition_key, entity.row_key, etag=entity.etag)

        while time.monotonic() < give_up:
            page = await tables.query(
                INDEX_TABLE,
                "expires lt @cutoff",
                {"cutoff": timeutil.iso(cutoff)},
                limit=100,
                continuation=continuation,
            )
            deleted += sum(await asyncio.gather(*(delete(e) for e in page.entities)))
            continuation = page.continuation
            if continuation is None:
                break
        for key, expires in self._namespaces.items():
            if expires < cutoff:
                self._namespaces.pop(key)  # deleted (or about to be): to be written again when next needed
        for path, (_, entry) in self._entries.items():
            if entry.expires < cutoff:
                self._entries.pop(path)  # a remembered ETag would only fail its replace: read instead
        return deleted


def _distinct_paths(waiting: list[_NewEntry]) -> int:
    """How many of `waiting` one transaction takes: at most 100, no path twice (the first repeat waits), and at
    most BATCH_BYTES of them as serialized (the first whatever its size)."""
    count = distinct_rows(waiting, lambda item: item.entity.row_key)
    size = 0
    for taken, item in enumerate(waiting[:count]):
        size += len(json.dumps(item.entity.data))
        if taken and size > BATCH_BYTES:
            return taken
    return count


def _token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode().rstrip("=")


def _offset(token: str) -> int:
    try:
        value = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))["offset"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadContinuation(token=token) from exc
    if not isinstance(value, int) or value < 0:
        raise BadContinuation(token=token)
    return value
