"""No name a caller chooses becomes a storage error (issue #83: purge-cache names of 513-1,024 characters, or 171
`/`, answered 500, which the official client retries five times). A table key holds 512 UTF-16 units, and `/ \\ #
? %` are escaped as three characters each (shared/storage/base.py); the in-memory store refuses a longer key as
Azurite does, so each store here either takes a name or refuses it with a 4xx, whatever its characters and length.
"""

from __future__ import annotations

import asyncio
import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

from shared import errors, timeutil
from shared.auth.audit import AuditLog
from shared.auth.clients import ClientStore
from shared.auth.roles import RoleStore
from shared.domain.index import IndexedTask
from shared.storage.memory import MemoryTables, StoredKeyRefused
from shared.stores.purges import PurgeRequests


# What a key escapes (three characters each), a character of two UTF-16 units, and plain ones.
def sized(alphabet: str, low: int, high: int) -> st.SearchStrategy[str]:
    """Names of `low` to `high` characters, drawn long as often as short (a plain text strategy seldom nears the
    bounds)."""
    size = st.one_of(st.integers(1, 20), st.integers(low, high))
    return size.flatmap(lambda n: st.text(alphabet=st.sampled_from(alphabet), min_size=n, max_size=n))


NAMES = sized("/\\#?%.a-_:𝔘é", 150, 1100)
ID_NAMES = sized("/%a:._-", 150, 520)


async def refused_or_done(call) -> None:
    """The call succeeds or is refused as a caller's error (4xx); never a storage error."""
    try:
        await call
    except StoredKeyRefused as refused:
        raise AssertionError(f"a storage error: {refused}") from None
    except errors.QueueError as refused:
        assert refused.status < 500, refused


@settings(max_examples=150, deadline=None)
@given(name=NAMES)
def test_a_purge_cache_name_is_stored_or_refused(name):
    async def go() -> None:
        requests = PurgeRequests(MemoryTables())
        await refused_or_done(requests.put("prov/type", name, timeutil.now()))

    asyncio.run(go())


@settings(max_examples=150, deadline=None)
@given(name=ID_NAMES)
def test_a_client_id_is_stored_or_refused_and_never_looked_up_past_a_key(name):
    async def go() -> None:
        tables = MemoryTables()
        clients = ClientStore(tables, token_secret="s" * 30, root_client_id="root", root_access_token="r" * 30)
        await refused_or_done(clients.create(name, ["queue:x"]))
        await refused_or_done(clients.get(name))
        await refused_or_done(clients.reset(name))
        await refused_or_done(clients.delete(name))
        await refused_or_done(AuditLog(tables).by_client(name, 10, None))
        await AuditLog(tables).record("client", name, name, "created")  # written under a hash if too long
        assert [e.entity_id for e in (await AuditLog(tables).of_entity("client", name, 10, None))[0]] == [name]

    asyncio.run(go())


@settings(max_examples=150, deadline=None)
@given(name=ID_NAMES)
def test_a_role_id_is_stored_or_refused(name):
    async def go() -> None:
        roles = RoleStore(MemoryTables())
        await refused_or_done(roles.create(name, ["queue:x"], ""))
        await refused_or_done(roles.get(name))
        await refused_or_done(roles.update(name, ["queue:y"], ""))
        await refused_or_done(roles.delete(name))

    asyncio.run(go())


@settings(max_examples=150, deadline=None)
@given(words=st.lists(sized("%a-_:", 20, 60), min_size=1, max_size=8))
def test_an_index_path_is_stored_or_refused(words):
    async def go() -> None:
        tables = MemoryTables()
        now = timeutil.now()
        entry = IndexedTask(".".join(words), "fN7ZIunmTnaqxn5T4qk0eQ", 0, {}, now + dt.timedelta(days=1), now)
        try:
            entity = entry.to_entity()
        except errors.QueueError as refused:
            assert refused.status < 500
            return
        await tables.insert("Index", entity)  # the memory store refuses what Azurite would

    asyncio.run(go())
