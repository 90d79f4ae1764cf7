"""The anonymous role (shared/auth/anonymous.py, shared/auth/roles.py's seeds), on the in-memory connector: every
caller holds what the role `anonymous` gives, the role is planted once in a deployment's life, and what an operator
does to it afterwards is what counts.

The invariant, over made-up roles and clients (Hypothesis): what a caller holds is the expansion of its own scopes
with `assume:anonymous`, so a caller without credentials holds exactly the role's expansion and one with
credentials holds at least that."""

from __future__ import annotations

import asyncio
import time

import mohawk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.auth.anonymous import ANONYMOUS_ROLE, ASSUME_ANONYMOUS, EVERY_CALLER, anonymous_seed
from shared.auth.authenticator import Attempt, Authenticator
from shared.auth.clients import ClientStore
from shared.auth.roles import ROLE_ROW, ROLES_TABLE, SEEDED_ROW, RoleNotFound, RoleStore
from shared.settings import DEFAULT_ANONYMOUS_SCOPES
from shared.storage.keys import encode_key
from shared.storage.memory import MemoryTables

ROOT_TOKEN = "r" * 30


def roles(tables: MemoryTables, scopes: tuple[str, ...] = DEFAULT_ANONYMOUS_SCOPES, **kw: float) -> RoleStore:
    """A process's role store, as runtime.py builds it: the anonymous role as its seed."""
    return RoleStore(tables, seeds=[anonymous_seed(scopes)], cache_seconds=kw.get("cache_seconds", 0))


def authenticator(tables: MemoryTables, store: RoleStore) -> Authenticator[ClientStore]:
    clients = ClientStore(
        tables, token_secret="s" * 30, root_client_id="root", root_access_token=ROOT_TOKEN, cache_seconds=0
    )
    return Authenticator(clients, EVERY_CALLER, roles=store)


def attempt(credentials: dict[str, str] | None = None) -> Attempt:
    if credentials is None:
        return Attempt("GET", "/api/queue/v1/provisioners", "queue.test", 443)
    header = mohawk.Sender(
        {"id": credentials["clientId"], "key": credentials["accessToken"], "algorithm": "sha256"},
        "https://queue.test/api/queue/v1/provisioners",
        "GET",
        content=b"",
        content_type="",
    ).request_header
    return Attempt("GET", "/api/queue/v1/provisioners", "queue.test", 443, header)


async def test_a_fresh_deployment_starts_with_the_role_holding_the_public_reads():
    tables = MemoryTables()
    store = roles(tables)
    found = await authenticator(tables, store).check(attempt())
    assert found.scheme == "none"
    assert set(DEFAULT_ANONYMOUS_SCOPES) <= set(found.caller.scopes) and ASSUME_ANONYMOUS in found.caller.scopes
    assert [r.role_id for r in await store.list()] == [ANONYMOUS_ROLE]  # the marker row is never a role
    assert (await store.get(ANONYMOUS_ROLE)).scopes == tuple(sorted(DEFAULT_ANONYMOUS_SCOPES))


async def test_what_the_operator_does_to_the_role_is_what_anonymous_callers_get():
    tables = MemoryTables()
    admin, serving = roles(tables), roles(tables)
    auth = authenticator(tables, serving)
    await admin.update(ANONYMOUS_ROLE, ["queue:list-provisioners"], "public")
    assert "queue:list-provisioners" in (await auth.check(attempt())).caller.scopes
    await admin.delete(ANONYMOUS_ROLE)
    assert (await auth.check(attempt())).caller.scopes == (ASSUME_ANONYMOUS,)  # a private deployment
    # The next process (a new release, a restart) does not plant it again.
    again = roles(tables)
    assert (await authenticator(tables, again).check(attempt())).caller.scopes == (ASSUME_ANONYMOUS,)
    assert await again.list() == []


async def test_a_delete_before_the_first_read_is_not_undone_by_the_planting():
    tables = MemoryTables()
    await roles(tables).delete(ANONYMOUS_ROLE)
    later = roles(tables)
    assert await later.list() == []
    try:
        await later.get(ANONYMOUS_ROLE)
        raise AssertionError("the deleted role came back")
    except RoleNotFound:
        pass


async def test_a_role_the_operator_created_before_the_upgrade_is_kept_as_it_is():
    tables = MemoryTables()
    await RoleStore(tables).create(ANONYMOUS_ROLE, ["queue:list-provisioners"], "mine")  # no seeds: the old release
    store = roles(tables)
    kept = await store.get(ANONYMOUS_ROLE)
    assert kept.scopes == ("queue:list-provisioners",) and kept.description == "mine"
    assert await tables.get(ROLES_TABLE, encode_key(ANONYMOUS_ROLE), SEEDED_ROW) is not None


async def test_processes_starting_together_plant_one_role_once():
    tables = MemoryTables()
    stores = [roles(tables, ("queue:status:*",)) for _ in range(8)]
    await asyncio.gather(*(s.expand((ASSUME_ANONYMOUS,)) for s in stores for _ in range(3)))
    rows = await tables.query(ROLES_TABLE, "PartitionKey eq @pk", {"pk": encode_key(ANONYMOUS_ROLE)})
    assert sorted(e.row_key for e in rows.entities) == [ROLE_ROW, SEEDED_ROW]


async def test_the_setting_is_the_roles_first_value_only():
    tables = MemoryTables()
    await roles(tables, ()).list()  # QUEUE_ANONYMOUS_SCOPES=[]: a private deployment from the start
    assert (await roles(tables, DEFAULT_ANONYMOUS_SCOPES).get(ANONYMOUS_ROLE)).scopes == ()


async def test_a_seed_the_stored_roles_refuse_grants_nothing_and_is_tried_again():
    tables = MemoryTables()
    await RoleStore(tables).create("public", [ASSUME_ANONYMOUS], "")
    store = roles(tables, ("assume:public",))  # anonymous -> public -> anonymous: a cycle
    assert (await store.expand((ASSUME_ANONYMOUS,))).scopes == (ASSUME_ANONYMOUS,)
    await RoleStore(tables).delete("public")
    assert (await roles(tables, ("assume:public",)).get(ANONYMOUS_ROLE)).scopes == ("assume:public",)


SCOPE = st.from_regex(r"(queue|index|auth):[a-z]{1,3}(:[a-z]{1,2})?\*?", fullmatch=True) | st.sampled_from(
    ["assume:r1", "assume:r2", "assume:r*", "assume:anonymous"]
)
ROLE_SCOPES = st.lists(SCOPE.filter(lambda s: not s.startswith("assume:anonymous")), max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    anonymous=st.lists(st.sampled_from(["queue:a", "index:b*", "assume:r1", "assume:r2"]), max_size=3),
    r1=ROLE_SCOPES,
    r2=st.lists(st.sampled_from(["queue:c", "auth:d:*", "assume:r1"]), max_size=3),
    own=st.lists(SCOPE, max_size=4),
)
def test_every_caller_holds_the_expansion_of_its_scopes_with_assume_anonymous(anonymous, r1, r2, own):
    async def go() -> None:
        tables = MemoryTables()
        admin = RoleStore(tables)
        r1_scopes = [s for s in r1 if s not in ("assume:r1", "assume:r*", "assume:r2")]  # no cycle through r2
        await admin.create("r1", r1_scopes, "")
        await admin.create("r2", r2, "")
        store = roles(tables, tuple(anonymous))
        auth = authenticator(tables, store)
        expected_anonymous = await store.expand((ASSUME_ANONYMOUS,))
        nobody = await auth.check(attempt())
        assert nobody.caller.held.scopes == expected_anonymous.scopes
        client = await auth.clients.create(f"c/{time.monotonic_ns()}", own)
        found = await auth.check(attempt({"clientId": client.client_id, "accessToken": client.access_token}))
        assert found.caller.held.scopes == (await store.expand(tuple(dict.fromkeys((*own, ASSUME_ANONYMOUS))))).scopes
        assert found.caller.held.satisfies_all(list(expected_anonymous.scopes))

    asyncio.run(go())
