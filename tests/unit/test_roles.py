"""The role store on the in-memory connector: what authentication expands with, how long it trusts what it read,
and how many expansions it remembers (shared/auth/roles.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shared.auth import roles as roles_mod
from shared.auth.roles import InvalidRole, RoleExists, RoleStore
from shared.storage.memory import MemoryTables


@pytest.fixture
def ticks(monkeypatch):
    """The roles module's monotonic clock, moved on by hand."""
    now = [1000.0]
    # The module's own `time` only: the event loop's clock (time.monotonic) must keep running.
    monkeypatch.setattr(roles_mod, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


async def test_expansion_follows_role_changes_within_the_cache_bound(ticks):
    tables = MemoryTables()
    writer, reader = RoleStore(tables, cache_seconds=10), RoleStore(tables, cache_seconds=10)
    await writer.create("ci", ["queue:create-task:*"], "ci")
    assert "queue:create-task:*" in await reader.expand(("assume:ci",))
    await writer.update("ci", ["queue:status:*"], "ci")
    assert "queue:create-task:*" in await reader.expand(("assume:ci",))  # trusted for 10 s
    ticks[0] += 11
    expanded = await reader.expand(("assume:ci",))
    assert "queue:status:*" in expanded and "queue:create-task:*" not in expanded
    assert (await reader.expand(("queue:x",))).scopes == ("queue:x",)  # nothing to assume: no read


async def test_remembered_expansions_are_bounded(ticks, monkeypatch):
    monkeypatch.setattr(roles_mod, "EXPANSIONS_KEPT", 3)
    store = RoleStore(MemoryTables(), cache_seconds=60)
    await store.create("r*", ["s:<..>"], "")
    for i in range(10):
        assert f"s:{i}" in await store.expand((f"assume:r{i}",))
    assert len(store._expansions) == 3


async def test_invalid_roles_and_conflicts_are_refused(ticks):
    store = RoleStore(MemoryTables())
    with pytest.raises(InvalidRole, match="only roles whose id ends in"):
        await store.create("plain", ["a:<..>"], "")
    with pytest.raises(InvalidRole, match="once"):
        await store.create("p*", ["a:<..>:<..>"], "")
    await store.create("a", ["assume:b"], "")
    with pytest.raises(InvalidRole, match="cycle"):
        await store.create("b", ["assume:a"], "")
    assert (await store.create("a", ["assume:b"], "")).role_id == "a"
    with pytest.raises(RoleExists):
        await store.create("a", ["x"], "")
