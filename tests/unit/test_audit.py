"""The Auth API's audit history on the in-memory connector (shared/auth/audit.py): each entry listed by its entity
and by the client that acted, oldest first, paged, and gone after the retention."""

from __future__ import annotations

import datetime as dt

from shared.auth.audit import AUDIT_TABLE, AuditLog
from shared.storage.memory import MemoryTables


async def test_an_entry_is_listed_by_its_entity_and_by_who_acted_oldest_first(clock):
    log = AuditLog(MemoryTables(), clock=clock)
    await log.record("role", "project:ci", "alice", "created")
    clock.advance(1)
    await log.record("role", "project:ci", "bob", "updated")
    await log.record("client", "ci/decision", "alice", "access token reset")
    entries, token = await log.of_entity("role", "project:ci", 100, None)
    assert [(e.client_id, e.action) for e in entries] == [("alice", "created"), ("bob", "updated")] and token is None
    mine, _ = await log.by_client("alice", 100, None)
    assert [(e.entity_type, e.entity_id, e.action) for e in mine] == [
        ("role", "project:ci", "created"),
        ("client", "ci/decision", "access token reset"),
    ]
    assert mine[0].as_answer()["created"].endswith("Z") and set(mine[0].as_answer()) == {
        "clientId",
        "actionType",
        "created",
        "entityId",
        "entityType",
    }


async def test_pages_follow_their_token(clock):
    log = AuditLog(MemoryTables(), clock=clock)
    for i in range(7):
        await log.record("client", "c", "root", f"action {i}")
        clock.advance(0.001)
    seen, token = [], None
    while True:
        entries, token = await log.of_entity("client", "c", 3, token)
        seen += [e.action for e in entries]
        if token is None:
            break
    assert seen == [f"action {i}" for i in range(7)]


async def test_entries_past_the_retention_are_not_listed_and_are_deleted(clock):
    tables = MemoryTables()
    log = AuditLog(tables, retention_days=30, clock=clock)
    await log.record("role", "old", "root", "created")
    clock.advance(dt.timedelta(days=20).total_seconds())
    await log.record("role", "old", "root", "updated")
    clock.advance(dt.timedelta(days=11).total_seconds())
    entries, _ = await log.of_entity("role", "old", 100, None)
    assert [e.action for e in entries] == ["updated"]
    assert await log.expire_due() == 2  # the old entry's two rows
    left = await tables.query(AUDIT_TABLE, "RowKey lt @x", {"x": "~"})
    assert len(left.entities) == 2 and clock() > entries[0].created


async def test_a_failed_write_is_logged_and_does_not_raise(caplog):
    class Broken(MemoryTables):
        async def upsert(self, table, entity):
            raise OSError("storage is gone")

    await AuditLog(Broken()).record("client", "c", "root", "deleted")
    assert "could not be written" in caplog.text
