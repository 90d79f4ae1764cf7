"""The bounds of what authentication remembers, proven with many distinct keys (shared/auth/clients.py,
shared/auth/roles.py): nothing for a clientId that fails its pattern, unknown clientIds in a small map of their own
that cannot push known clients out, and expansions bounded in entries and bytes."""

from __future__ import annotations

import pytest

from shared import errors
from shared.auth import clients as clients_mod
from shared.auth import roles as roles_mod
from shared.auth.clients import ClientStore
from shared.auth.roles import InvalidRole, RoleStore
from shared.storage.memory import MemoryTables


def store(tables: MemoryTables | None = None) -> ClientStore:
    return ClientStore(
        tables or MemoryTables(),
        token_secret="s" * 30,
        root_client_id="root",
        root_access_token="r" * 30,
        cache_seconds=60,
    )


async def test_a_clientid_that_fails_its_pattern_is_neither_looked_up_nor_remembered():
    tables = MemoryTables()
    clients = store(tables)
    for i in range(300):
        assert await clients.get(f"{i:08x}" + "A" * 90_000) is None  # the probe: a 90,000-character bewit id
        assert await clients.get(f"bad id {i}") is None
    assert len(clients._known) == len(clients._unknown) == 0
    assert "Clients" not in tables._tables  # not even the table was touched


async def test_unknown_clientids_are_remembered_in_a_small_map_that_spares_known_clients(monkeypatch):
    monkeypatch.setattr(clients_mod, "UNKNOWN_CLIENTS", 50)
    clients = store()
    await clients.create("ci/decision", ["queue:create-task:*"])
    assert (await clients.get("ci/decision")) is not None
    for i in range(5_000):
        assert await clients.get(f"made-up/{i}") is None
    assert len(clients._unknown) == 50
    assert len(clients._known) == 1 and "ci/decision" in clients._known


async def test_known_clients_are_bounded_in_entries_and_bytes(monkeypatch):
    monkeypatch.setattr(clients_mod, "KNOWN_CLIENTS", 100)
    monkeypatch.setattr(clients_mod, "KNOWN_CLIENTS_BYTES", 2_000_000)
    tables = MemoryTables()
    writer = store(tables)
    for i in range(150):  # each with scopes of 100 KB: 150 would weigh 15 MB
        await writer.create(f"c/{i}", [f"queue:get-task:{i}:{j}:" + "x" * 1000 for j in range(100)])
    reader = store(tables)
    for i in range(150):
        assert (await reader.get(f"c/{i}")) is not None
    assert len(reader._known) <= 100
    assert reader._known.bytes <= 2_000_000
    assert len(reader._known) < 30  # the bytes bound is the one that held


async def test_clients_with_scopes_over_the_bounds_are_refused_with_400_and_large_sets_are_stored_whole():
    clients = store()
    with pytest.raises(errors.InputError, match="may not end in"):
        await clients.create("c/x", ["queue:**"])
    with pytest.raises(errors.InputError, match="at most 5000"):
        await clients.create("c/x", [f"s:{i}" for i in range(5001)])
    many = [f"queue:get-task:{i}:" + "y" * 60 for i in range(4000)]  # 300 KB of JSON: several properties
    created = await clients.create("c/big", many)
    assert len(created.scopes) == 4000
    assert (await clients.must_get("c/big")).scopes == tuple(sorted(many))


@pytest.fixture
def fixed_clock(monkeypatch):
    import types

    monkeypatch.setattr(roles_mod, "time", types.SimpleNamespace(monotonic=lambda: 1000.0))


async def test_remembered_expansions_are_bounded_in_entries_and_bytes(monkeypatch, fixed_clock):
    monkeypatch.setattr(roles_mod, "EXPANSIONS_BYTES", 3_000_000)
    roles = RoleStore(MemoryTables(), cache_seconds=60)
    await roles.create("wide*", [f"queue:get-task:<..>:{j}:" + "z" * 100 for j in range(1000)], "")
    for i in range(200):  # each expansion about 250 KB
        assert len(await roles.expand((f"assume:wide{i}",))) == 1001
    assert roles._expansions.bytes <= 3_000_000 and len(roles._expansions) < 20
    for i in range(20_000):  # small and many: the entry bound
        await roles.expand((f"plain:{i}",))
    assert len(roles._expansions) <= roles_mod.EXPANSIONS_KEPT


async def test_a_role_write_that_could_explode_expansion_is_refused_naming_the_bound(fixed_clock):
    roles = RoleStore(MemoryTables())
    # The probe, written from the deepest level up, as a delegated admin would: each level doubles what
    # `assume:project:me:L00-z` expands to, and the write that takes the bound past 50,000 is refused.
    await roles.create("project:me:L16-*", ["queue:get-task:<..>"], "")
    written = []
    with pytest.raises(InvalidRole, match="could expand to more than 50000 scopes"):
        for i in range(15, -1, -1):
            await roles.create(
                f"project:me:L{i:02d}-*",
                [f"assume:project:me:L{i + 1:02d}-<..>a", f"assume:project:me:L{i + 1:02d}-<..>b"],
                "",
            )
            written.append(i)
    assert written[-1] > 0 and len(await roles.list()) == len(written) + 1
    expanded = await roles.expand((f"assume:project:me:L{written[-1]:02d}-z",))
    assert len(expanded) <= 50_000
    # Shallower, the same shape expands in full.
    small = RoleStore(MemoryTables())
    for i in range(4):
        await small.create(f"p:L{i}-*", [f"assume:p:L{i + 1}-<..>a", f"assume:p:L{i + 1}-<..>b"], "")
    await small.create("p:L4-*", ["queue:get-task:<..>"], "")
    assert "queue:get-task:zabab" in await small.expand(("assume:p:L0-z",))


async def test_a_chain_of_500_roles_is_written_and_expanded(fixed_clock):
    roles = RoleStore(MemoryTables())
    for i in range(500, 0, -1):
        await roles.create(f"r{i}", [f"assume:r{i + 1}", f"s{i}"], "")
    expanded = await roles.expand(("assume:r1",))
    assert "s500" in expanded and len(expanded) == 1001
    with pytest.raises(InvalidRole, match="cycle"):
        await roles.create("r501", ["assume:r1"], "")


async def test_an_expansion_past_its_bound_is_refused_again_without_the_work(monkeypatch, fixed_clock):
    """Roles that slipped past the write check (two writers at once): the refusal is remembered like a result,
    so repeated requests with those scopes cost a lookup, not another 2,000,000 steps."""
    tables = MemoryTables()
    roles = RoleStore(tables, cache_seconds=60)
    await roles.create("wide*", [f"queue:get-task:<..>:{j}" for j in range(100)], "")
    calls = []
    real = roles_mod.expansion_steps
    monkeypatch.setattr(roles_mod, "expansion_steps", lambda *a, **k: (calls.append(1), real(*a, limit=50, **k))[1])
    for _ in range(5):
        with pytest.raises(roles_mod.ExpansionTooLarge):
            await roles.expand(("assume:wide1",))
    assert len(calls) == 1
