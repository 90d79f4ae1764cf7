"""Several storage accounts as one: a table store and a queue store that route each call to one account.

Azure caps each storage account (about 20,000 requests/s), so a deployment that outgrows one spreads its data over
N accounts (`QUEUE_STORAGE_SHARDS`). The routing needs nothing but the call itself:

- A table row goes to the account of its PartitionKey (a hash), so everything of a task (its row, artifacts,
  events, requirements, the edges of its dependents: PartitionKey = taskId) is in one account, and a group's rows
  in its group's. Tables every process reads whole or by their own keys (clients, roles, worker information, the
  index, objects, the event publishers' marks: `global_tables`) stay in the first account. A query that names
  its partition (`PartitionKey eq @pk`) asks that partition's account; any other query (the timers' and the
  reconciler's scans) asks every account at once for a share of the page, its continuation token saying where it
  stands in each: a pass of a timer moves on in every account.
- A queue goes to an account by its name: `<base>` and its shards `<base>-s<j>` (`shard_name`) go to consecutive
  accounts from a hash of `<base>`, so K shards of a check queue land on K different accounts (when K ≤ N), and
  `<queue>-poison` goes with its queue.

With one account the runtime uses the account's own stores, not these.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import json
import re
import zlib
from collections.abc import Sequence
from typing import Any

from shared import strict_json
from shared.storage.base import Entity, Op, Page, QueueMessage, QueueStore, Received, TableStore, all_at_once
from shared.storage.keys import MAX_KEY_LENGTH, InvalidContinuation

_SHARD = re.compile(r"(?P<base>.+)-s(?P<shard>[0-9]{1,3})")
_PARTITION = re.compile(r"\bPartitionKey eq @(?P<name>\w+)")
POISON = "-poison"


def shard_name(base: str, shard: int) -> str:
    """The name of shard `shard` of queue `base`: the base itself for the first (so one shard is today's queue)."""
    return base if shard == 0 else f"{base}-s{shard}"


def split_shard(name: str) -> tuple[str, int]:
    """(base, shard) of a queue name that `shard_name` made; a poison queue's are its queue's."""
    name = name.removesuffix(POISON)
    match = _SHARD.fullmatch(name)
    return (match["base"], int(match["shard"])) if match else (name, 0)


def stable_hash(text: str) -> int:
    """A hash every process computes alike (Python's own `hash` of a str differs per process)."""
    return zlib.crc32(text.encode())


def queue_account(name: str, accounts: int) -> int:
    """The account (0..accounts-1) that holds queue `name`."""
    base, shard = split_shard(name)
    return (stable_hash(base) + shard) % accounts


def partition_account(partition_key: str, accounts: int) -> int:
    return stable_hash(partition_key) % accounts


START, DONE = None, False  # where a scan stands in an account: not begun, finished (else the account's own token)
Position = str | None | bool


def scan_token(where: list[Position]) -> str:
    """A continuation of a scan of every account: where it stands in each (a store's token is opaque)."""
    return base64.urlsafe_b64encode(json.dumps({"Accounts": where}, separators=(",", ":")).encode()).decode()


def read_scan_token(token: str, accounts: int) -> list[Position]:
    """The positions of a `scan_token` over `accounts` accounts; InvalidContinuation (400) for anything else."""
    try:
        value = strict_json.loads(base64.urlsafe_b64decode(token.encode("ascii") + b"=" * (-len(token) % 4)))
        where = value["Accounts"]
    except (ValueError, TypeError, KeyError, UnicodeError, binascii.Error):
        raise InvalidContinuation(token=token[:100]) from None
    valid = (
        isinstance(where, list)
        and len(where) == accounts
        and all(at is START or at is DONE or (isinstance(at, str) and len(at) <= 4 * MAX_KEY_LENGTH) for at in where)
        and any(at is not DONE for at in where)
    )  # a scan finished everywhere has no token
    if not valid:
        raise InvalidContinuation(token=token[:100])
    return list(where)


def _inner(at: Position) -> str | None:
    """An account's own token from where a scan stands in it (None: from its start)."""
    return at if isinstance(at, str) else None


class ShardedTables:
    """A TableStore over several accounts' table stores (see the module's docstring)."""

    def __init__(self, accounts: Sequence[TableStore], global_tables: frozenset[str] = frozenset()) -> None:
        if not accounts:
            raise ValueError("at least one account")
        self.accounts = list(accounts)
        self.global_tables = global_tables

    def account(self, table: str, partition_key: str) -> TableStore:
        if table in self.global_tables:
            return self.accounts[0]
        return self.accounts[partition_account(partition_key, len(self.accounts))]

    async def ensure_tables(self, names: list[str]) -> None:
        await all_at_once(store.ensure_tables(names) for store in self.accounts)

    async def get(self, table: str, partition_key: str, row_key: str) -> Entity | None:
        return await self.account(table, partition_key).get(table, partition_key, row_key)

    async def insert(self, table: str, entity: Entity) -> Entity | None:
        return await self.account(table, entity.partition_key).insert(table, entity)

    async def replace(self, table: str, entity: Entity) -> Entity | None:
        return await self.account(table, entity.partition_key).replace(table, entity)

    async def upsert(self, table: str, entity: Entity) -> Entity:
        return await self.account(table, entity.partition_key).upsert(table, entity)

    async def delete(self, table: str, partition_key: str, row_key: str, etag: str | None = None) -> bool:
        return await self.account(table, partition_key).delete(table, partition_key, row_key, etag)

    async def transact(self, table: str, ops: list[Op]) -> bool:
        if not ops:
            return True
        return await self.account(table, ops[0].entity.partition_key).transact(table, ops)

    async def commit(self, table: str, ops: list[Op]) -> list[str | None] | None:
        if not ops:
            return []
        return await self.account(table, ops[0].entity.partition_key).commit(table, ops)

    async def query(
        self,
        table: str,
        filter: str,
        parameters: dict[str, Any],
        *,
        limit: int | None = None,
        continuation: str | None = None,
    ) -> Page:
        named = _PARTITION.search(filter)
        if table in self.global_tables or (
            named and " or " not in filter and isinstance(parameters.get(named["name"]), str)
        ):
            partition = "" if table in self.global_tables else str(parameters[named["name"]])  # type: ignore[index]
            return await self.account(table, partition).query(
                table, filter, parameters, limit=limit, continuation=continuation
            )
        return await self._scan(table, filter, parameters, limit, continuation)

    async def _scan(
        self, table: str, filter: str, parameters: dict[str, Any], limit: int | None, continuation: str | None
    ) -> Page:
        """A query of no one partition: every account at once, each a share of the page, so a timer's or the
        reconciler's pass moves on in every account (a share per account; the token says where each stands)."""
        where: list[Position] = (
            [START] * len(self.accounts) if continuation is None else read_scan_token(continuation, len(self.accounts))
        )
        live = [a for a, at in enumerate(where) if at is not DONE]
        if limit is not None:
            live = live[: max(1, limit)]  # a page smaller than the accounts: the first ones this time
        shares = [
            None if limit is None else limit // len(live) + (1 if j < limit % len(live) else 0)
            for j in range(len(live))
        ]
        pages = await asyncio.gather(
            *(
                self.accounts[a].query(table, filter, parameters, limit=share, continuation=_inner(where[a]))
                for a, share in zip(live, shares, strict=True)
            )
        )
        found: list[Entity] = []
        for a, page in zip(live, pages, strict=True):
            found.extend(page.entities)
            where[a] = DONE if page.continuation is None else page.continuation
        if all(at is DONE for at in where):
            return Page(found, None)
        return Page(found, scan_token(where))

    async def close(self) -> None:
        await all_at_once(store.close() for store in self.accounts)


class ShardedQueues:
    """A QueueStore over several accounts' queue stores, each queue in the account `queue_account` names."""

    def __init__(self, accounts: Sequence[QueueStore]) -> None:
        if not accounts:
            raise ValueError("at least one account")
        self.accounts = list(accounts)

    def account(self, queue: str) -> QueueStore:
        return self.accounts[queue_account(queue, len(self.accounts))]

    async def ensure_queues(self, names: list[str]) -> None:
        by_account: dict[int, list[str]] = {}
        for name in names:
            by_account.setdefault(queue_account(name, len(self.accounts)), []).append(name)
        await all_at_once(self.accounts[a].ensure_queues(n) for a, n in by_account.items())

    async def put(self, queue: str, content: bytes, *, visible_in: int = 0, ttl: int | None = None) -> QueueMessage:
        return await self.account(queue).put(queue, content, visible_in=visible_in, ttl=ttl)

    async def receive(self, queue: str, max_messages: int, visibility_timeout: int) -> Received:
        return await self.account(queue).receive(queue, max_messages, visibility_timeout)

    async def delete(self, queue: str, message: QueueMessage) -> None:
        await self.account(queue).delete(queue, message)

    async def release(
        self, queue: str, message: QueueMessage, visible_in: int, *, content: bytes | None = None
    ) -> QueueMessage | None:
        return await self.account(queue).release(queue, message, visible_in, content=content)

    async def approximate_count(self, queue: str) -> int:
        return await self.account(queue).approximate_count(queue)

    async def any_visible(self, queue: str) -> bool:
        return await self.account(queue).any_visible(queue)

    async def process_url(self, queue: str, expires: dt.datetime) -> str:
        return await self.account(queue).process_url(queue, expires)

    async def close(self) -> None:
        await all_at_once(store.close() for store in self.accounts)
