"""The Auth API's audit history, as Taskcluster's auth keeps it (`audit_history`, served by `getEntityHistory`
and `listAuditHistory`, shown on taskcluster-ui's client and role pages): who created, updated, reset, enabled,
disabled or deleted which client or role, and when.

Each entry is two rows of the `AuditHistory` table, one in the entity's partition and one in the acting client's,
so that each listing is one partition read in time order (the row key starts with the time). Entries are kept
for `QUEUE_AUDIT_RETENTION_DAYS` (Taskcluster's default, 30) and deleted by the expiry timer after, at most
EXPIRED_PER_RUN a run; a page is at most MAX_PAGE entries. Writing an entry never fails the change it records:
a failed write is logged.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from shared import timeutil
from shared.storage.base import Entity, TableStore
from shared.storage.keys import MAX_KEY_UNITS, encode_key, key_units

log = logging.getLogger("queue.auth")

AUDIT_TABLE = "AuditHistory"
MAX_PAGE = 1000  # entries a page answers (Taskcluster's maxLimit)
EXPIRED_PER_RUN = 5000  # rows the expiry deletes a run
ENTITY_TYPES = ("client", "role", "secret", "hook", "worker-pool")  # what getEntityHistory names (Taskcluster's)


@dataclass(frozen=True)
class AuditEntry:
    entity_type: str
    entity_id: str
    client_id: str  # who acted
    action: str  # Taskcluster's words: created, updated, deleted, client enabled, client disabled, access token reset
    created: dt.datetime

    def as_answer(self) -> dict[str, str]:
        """An entry of get-entity-history-response."""
        return {
            "clientId": self.client_id,
            "actionType": self.action,
            "created": timeutil.iso(self.created),
            "entityId": self.entity_id,
            "entityType": self.entity_type,
        }


def _partition(name: str) -> str:
    """`name` as a PartitionKey; a hash of it (after `~`) when that would be too long for a key (the entries keep
    the ids themselves)."""
    key = encode_key(name)
    return key if key_units(key) <= MAX_KEY_UNITS else "~" + hashlib.sha256(name.encode()).hexdigest()


def _entity_partition(entity_type: str, entity_id: str) -> str:
    return _partition(f"e/{entity_type}/{entity_id}")


def _client_partition(client_id: str) -> str:
    return _partition(f"c/{client_id}")


class AuditLog:
    def __init__(
        self, tables: TableStore, *, retention_days: float = 30, clock: Callable[[], dt.datetime] = timeutil.now
    ) -> None:
        self.tables, self.now = tables, clock
        self.retention = dt.timedelta(days=retention_days)
        self._ready = False

    async def _ensure(self) -> None:
        if not self._ready:
            await self.tables.ensure_tables([AUDIT_TABLE])
            self._ready = True

    async def record(self, entity_type: str, entity_id: str, client_id: str, action: str) -> None:
        """Record what `client_id` did to an entity, now; logged, not raised, if it cannot be written."""
        now = self.now()
        row = f"{timeutil.iso(now)}~{secrets.token_hex(4)}"  # time order; two entries of one millisecond apart
        data = {"entityType": entity_type, "entityId": entity_id, "clientId": client_id, "action": action}
        data["created"] = timeutil.iso(now)
        try:
            await self._ensure()
            for partition in (_entity_partition(entity_type, entity_id), _client_partition(client_id)):
                await self.tables.upsert(AUDIT_TABLE, Entity(partition, row, data))
        except Exception:  # the change is made; its record is what is missing
            log.exception(
                "the audit history of %s %s could not be written (%s by %s)", entity_type, entity_id, action, client_id
            )

    async def of_entity(
        self, entity_type: str, entity_id: str, limit: int, continuation: str | None
    ) -> tuple[list[AuditEntry], str | None]:
        """What was done to an entity, oldest first: a page and the token of the next."""
        return await self._page(_entity_partition(entity_type, entity_id), limit, continuation)

    async def by_client(
        self, client_id: str, limit: int, continuation: str | None
    ) -> tuple[list[AuditEntry], str | None]:
        """What a client did, oldest first: a page and the token of the next."""
        return await self._page(_client_partition(client_id), limit, continuation)

    async def _page(self, partition: str, limit: int, continuation: str | None) -> tuple[list[AuditEntry], str | None]:
        await self._ensure()
        cutoff = timeutil.iso(self.now() - self.retention)  # expired, not yet deleted: not shown
        page = await self.tables.query(
            AUDIT_TABLE,
            "PartitionKey eq @pk and RowKey ge @from",
            {"pk": partition, "from": cutoff},
            limit=max(1, min(limit, MAX_PAGE)),
            continuation=continuation,
        )
        entries = [
            AuditEntry(
                str(e.data["entityType"]),
                str(e.data["entityId"]),
                str(e.data["clientId"]),
                str(e.data["action"]),
                timeutil.parse(str(e.data["created"])),
            )
            for e in page.entities
        ]
        return entries, page.continuation

    async def expire_due(self) -> int:
        """Delete the entries older than the retention (at most EXPIRED_PER_RUN rows a run)."""
        await self._ensure()
        cutoff = timeutil.iso(self.now() - self.retention)
        deleted, continuation = 0, None
        while deleted < EXPIRED_PER_RUN:
            page = await self.tables.query(
                AUDIT_TABLE, "RowKey lt @cutoff", {"cutoff": cutoff}, limit=1000, continuation=continuation
            )
            for entity in page.entities[: EXPIRED_PER_RUN - deleted]:
                await self.tables.delete(AUDIT_TABLE, entity.partition_key, entity.row_key, "*")
                deleted += 1
            continuation = page.continuation
            if continuation is None:
                break
        return deleted
