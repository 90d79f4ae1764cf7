"""The storage adapters on Azurite, both of them (the Azure SDK's and the lean REST one): the semantics the
domain relies on (ETags, visibility, paging, transactions, key encoding, property types)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from azure.storage.blob import BlobServiceClient

from shared.storage.azure import AzureQueues, AzureTables
from shared.storage.base import Entity
from shared.storage.keys import encode_key
from shared.storage.rest import RestQueues, RestTables
from tests.answers import create_artifact

IMPLEMENTATIONS = {"sdk": (AzureTables, AzureQueues), "rest": (RestTables, RestQueues)}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def Tables(request):
    return IMPLEMENTATIONS[request.param][0]


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def Queues(request):
    return IMPLEMENTATIONS[request.param][1]


def run(coro):
    return asyncio.run(coro)


def test_table_insert_get_replace_with_etags(azurite, Tables):
    async def go():
        tables = Tables(azurite.connection_string)
        name = f"T{uuid.uuid4().hex[:10]}"
        try:
            await tables.ensure_tables([name])
            await tables.ensure_tables([name])  # idempotent
            first = await tables.insert(name, Entity("pk", "rk", {"n": 1, "s": "x"}))
            assert first is not None and first.etag
            assert await tables.insert(name, Entity("pk", "rk", {"n": 2})) is None  # exists: a value
            read = await tables.get(name, "pk", "rk")
            assert read.data == {"n": 1, "s": "x"} and read.etag == first.etag
            updated = await tables.replace(name, Entity("pk", "rk", {"n": 3}, read.etag))
            assert updated is not None and updated.etag != read.etag
            assert await tables.replace(name, Entity("pk", "rk", {"n": 4}, read.etag)) is None  # stale ETag
            assert (await tables.get(name, "pk", "rk")).data == {"n": 3}
            assert await tables.delete(name, "pk", "rk", read.etag) is False
            assert await tables.delete(name, "pk", "rk", updated.etag) is True
            assert await tables.get(name, "pk", "rk") is None
            assert await tables.replace(name, Entity("pk", "rk", {"n": 5}, updated.etag)) is None
        finally:
            await tables.close()

    run(go())


def test_table_query_pages_with_continuation(azurite, Tables):
    async def go():
        tables = Tables(azurite.connection_string)
        name = f"T{uuid.uuid4().hex[:10]}"
        try:
            await tables.ensure_tables([name])
            for i in range(5):
                await tables.insert(name, Entity("p", f"r{i}", {"i": i}))
            await tables.insert(name, Entity("other", "r0", {"i": 99}))
            seen, token = [], None
            while True:
                page = await tables.query(name, "PartitionKey eq @pk", {"pk": "p"}, limit=2, continuation=token)
                assert len(page.entities) <= 2
                seen += [e.data["i"] for e in page.entities]
                token = page.continuation
                if token is None:
                    break
            assert seen == [0, 1, 2, 3, 4]
        finally:
            await tables.close()

    run(go())


def test_queue_visibility_release_and_delete(azurite, Queues):
    async def go():
        queues = Queues(azurite.connection_string)
        name = f"q-{uuid.uuid4().hex[:12]}"
        try:
            assert await queues.receive(name, 32, 30) == []  # no such queue yet: nothing, not an error
            await queues.put(name, b'{"a":1}')  # creates the queue
            # A delayed message, in a queue of its own so its timing cannot disturb the checks below.
            await queues.put(f"{name}-later", b'{"later":1}', visible_in=1)
            assert await queues.receive(f"{name}-later", 32, 30) == []
            [message] = await queues.receive(name, 32, 30)
            assert message.json() == {"a": 1} and message.dequeue_count == 1
            assert await queues.receive(name, 32, 30) == []  # hidden while received
            released = await queues.release(name, message, 0)
            assert released is not None and released.pop_receipt != message.pop_receipt
            [again] = await queues.receive(name, 32, 30)
            assert again.id == message.id and again.dequeue_count == 2
            # The first receipt is stale now (received again since): release and delete say "not ours".
            assert await queues.release(name, message, 0) is None
            await queues.delete(name, message)
            assert await queues.receive(name, 32, 0) == []  # the stale delete did not delete it
            await queues.delete(name, again)
            await queues.delete(name, again)  # already gone: fine
            await asyncio.sleep(1.1)
            [later] = await queues.receive(f"{name}-later", 32, 30)
            assert later.json() == {"later": 1}
        finally:
            await queues.close()

    run(go())


def test_a_peek_tells_whether_any_message_is_visible(azurite, Queues):
    """What the reconciler asks of a pending queue whose count is not zero: are its messages all hidden?"""

    async def go():
        queues = Queues(azurite.connection_string)
        name = f"q-{uuid.uuid4().hex[:12]}"
        try:
            assert await queues.any_visible(name) is False  # no such queue
            await queues.put(name, b'{"a":1}')
            assert await queues.any_visible(name) is True
            assert await queues.any_visible(name) is True  # a peek hides nothing
            [taken] = await queues.receive(name, 32, 3600)  # hidden, as a poll URL's visibilitytimeout does
            assert await queues.any_visible(name) is False and await queues.approximate_count(name) == 1
            await queues.release(name, taken, 0)
            assert await queues.any_visible(name) is True
        finally:
            await queues.close()

    run(go())


def test_a_put_message_is_deleted_by_the_id_and_receipt_its_put_returned(azurite, Queues):
    """What lets a resolution delete its spent checks: the put's answer deletes the message until someone
    receives it; once received, that receipt no longer matches and the delete is a harmless no-op."""

    async def go():
        queues = Queues(azurite.connection_string)
        name = f"q-{uuid.uuid4().hex[:12]}"
        try:
            sent = await queues.put(name, b'{"a":1}', visible_in=30)
            assert sent.id and sent.pop_receipt and sent.content == b'{"a":1}'
            await queues.delete(name, sent)
            assert await queues.approximate_count(name) == 0
            sent = await queues.put(name, b'{"b":2}')
            [received] = await queues.receive(name, 1, 30)
            await queues.delete(name, sent)  # stale receipt: not deleted, no error
            assert await queues.approximate_count(name) == 1
            await queues.delete(name, received)
            assert await queues.approximate_count(name) == 0
        finally:
            await queues.close()

    run(go())


def test_queue_receives_32_in_one_call(azurite, Queues):
    async def go():
        queues = Queues(azurite.connection_string)
        name = f"q-{uuid.uuid4().hex[:12]}"
        try:
            for i in range(40):
                await queues.put(name, str(i).encode())
            first = await queues.receive(name, 32, 30)
            second = await queues.receive(name, 32, 30)
            assert len(first) == 32 and len(second) == 8
            assert [int(m.content) for m in first + second] == list(range(40))  # FIFO
            assert await queues.approximate_count(name) == 40
        finally:
            await queues.close()

    run(go())


def test_transactions_are_atomic_per_partition(azurite, Tables):
    from shared.storage.base import Op, delete_all, upsert_all

    async def go():
        tables = Tables(azurite.connection_string)
        name = f"T{uuid.uuid4().hex[:10]}"
        try:
            await tables.ensure_tables([name])
            assert await tables.transact(
                name, [Op("insert", Entity("p", "a", {"v": 1})), Op("upsert", Entity("p", "b", {"v": 2}))]
            )
            stale = (await tables.get(name, "p", "a")).with_etag("W/\"datetime'2000-01-01T00%3A00%3A00Z'\"")
            # One failing condition and nothing applies.
            assert not await tables.transact(
                name, [Op("upsert", Entity("p", "c", {"v": 3})), Op("replace", Entity("p", "a", {"v": 9}, stale.etag))]
            )
            assert await tables.get(name, "p", "c") is None
            assert not await tables.transact(name, [Op("insert", Entity("p", "a", {"v": 5}))])
            assert (await tables.get(name, "p", "a")).data == {"v": 1}
            # commit: each operation's new ETag (None for a delete), for the next conditional change without a read.
            etags = await tables.commit(
                name, [Op("insert", Entity("e", "a", {"v": 1})), Op("upsert", Entity("e", "b", {"v": 2}))]
            )
            assert etags == [(await tables.get(name, "e", "a")).etag, (await tables.get(name, "e", "b")).etag]
            assert await tables.replace(name, Entity("e", "a", {"v": 3}, etags[0])) is not None
            assert (
                await tables.commit(
                    name, [Op("delete", Entity("e", "b")), Op("replace", Entity("e", "a", {"v": 4}, etags[0]))]
                )
                is None
            )
            assert await tables.commit(name, [Op("delete", Entity("e", "b"))]) == [None]
            await upsert_all(tables, name, [Entity("q", f"r{i:03d}", {"i": i}) for i in range(250)])
            page = await tables.query(
                name, "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi", {"pk": "q", "lo": "r100", "hi": "r110"}
            )
            assert [e.row_key for e in page.entities] == [f"r{i}" for i in range(100, 110)]
            await delete_all(tables, name, [("q", f"r{i:03d}") for i in range(0, 260)])  # some never existed
            assert (await tables.query(name, "PartitionKey eq @pk", {"pk": "q"})).entities == []
        finally:
            await tables.close()

    run(go())


def test_keys_property_types_and_filters_round_trip(azurite, Tables):
    """Keys with quotes and escapes, every property type the code stores, and filters with typed parameters;
    what one adapter writes the other reads the same."""

    async def go():
        name = f"T{uuid.uuid4().hex[:10]}"
        writer, other = (
            Tables(azurite.connection_string),
            (AzureTables if Tables is RestTables else RestTables)(azurite.connection_string),
        )
        pk, rk = encode_key("it's a/b#c?d%e"), "r'1 é"
        data = {"s": "x'y", "n": 7, "f": 2.0, "neg": -3, "yes": True, "no": False, "empty": ""}
        if Tables is RestTables:
            data["big"] = 2**40  # the SDK refuses to write a plain int beyond 32 bits
        try:
            await writer.ensure_tables([name])
            assert await writer.insert(name, Entity(pk, rk, data)) is not None
            for reader in (writer, other):
                read = await reader.get(name, pk, rk)
                assert read is not None
                # The SDK wraps a 64-bit integer in an EntityProperty; the REST adapter gives the int.
                assert {k: getattr(v, "value", v) for k, v in read.data.items()} == data
                assert type(read.data["f"]) is float
                page = await reader.query(
                    name,
                    "PartitionKey eq @pk and n gt @low and yes eq @t and s eq @s",
                    {"pk": pk, "low": 6, "t": True, "s": "x'y"},
                )
                assert [(e.partition_key, e.row_key) for e in page.entities] == [(pk, rk)]
                assert page.entities[0].etag == read.etag
            assert await writer.delete(name, pk, rk, "*") and await writer.delete(name, pk, rk, "*")
            assert await writer.delete(name, pk, rk) is False
        finally:
            await writer.close()
            await other.close()

    run(go())


def test_task_expiry_deletes_its_artifacts_blobs_and_rows(tmp_path):
    """Through the service on Azurite's adapters: an expiring task takes its artifacts with it (blob, then row),
    while another task's artifact stays. On an Azurite of its own: expiring with a clock two days ahead would
    take other tests' tasks too."""
    import datetime as dt

    from local_host import azurite as azurite_mod
    from shared import timeutil
    from shared.domain.artifacts import blob_path, row_key
    from shared.domain.tasks import TASKS_TABLE
    from shared.runtime import build_queue
    from shared.settings import load_settings
    from shared.storage.azure import AzureBlobs, AzureQueues
    from tests.clock import Clock
    from tests.conftest import schema_defaults, slugid, task_definition

    azurite = azurite_mod.start(tmp_path / "azurite", in_memory=True)
    cs = azurite.connection_string
    clock = Clock()
    settings = load_settings(storage=cs, root_access_token="x" * 30, expiry_delay=0, claim_work_wait=0)

    async def scenario():
        service = build_queue(settings, AzureTables(cs), AzureQueues(cs), AzureBlobs(cs), clock=clock)
        blobs = BlobServiceClient.from_connection_string(cs).get_container_client(settings.artifact_container)
        try:
            ids = []
            for days in (1, 30):
                task_id, definition = slugid(), task_definition()
                definition["expires"] = timeutil.iso(clock() + dt.timedelta(days=days))
                await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
                await service.claims.claim(task_id, 0, "g", "w")
                created = await create_artifact(
                    service,
                    task_id,
                    0,
                    "public/a.txt",
                    {
                        "storageType": "azure",
                        "expires": definition["expires"],
                        "contentType": "text/plain",
                        "contentLength": 2,
                    },
                )
                blobs.upload_blob(blob_path(task_id, 0, "public/a.txt"), b"hi")
                await service.artifacts.finish(task_id, 0, "public/a.txt", created["uploadId"])
                ids.append(task_id)
            clock.advance(2 * 86400)
            assert await service.expiry.expire_tasks() == 1
            gone, kept = ids
            assert await service.stores.tables.get(TASKS_TABLE, gone, row_key(0, "public/a.txt")) is None
            assert not blobs.get_blob_client(blob_path(gone, 0, "public/a.txt")).exists()
            assert await service.stores.tables.get(TASKS_TABLE, kept, row_key(0, "public/a.txt")) is not None
            assert blobs.get_blob_client(blob_path(kept, 0, "public/a.txt")).exists()
        finally:
            blobs.close()
            await service.close()

    try:
        run(scenario())
    finally:
        azurite.stop()


def test_the_pending_census_and_role_store_on_azurite(azurite):
    """The metrics' census of pending runs (a query across every task queue's partition) and the role store
    (insert, ETag replace, whole-table read) against Azurite itself."""
    from shared.auth.roles import RoleStore
    from shared.runtime import build_queue
    from shared.settings import load_settings
    from shared.storage.azure import AzureBlobs
    from tests.clock import Clock
    from tests.conftest import schema_defaults, slugid, task_definition

    cs = azurite.connection_string
    settings = load_settings(storage=cs, root_access_token="x" * 30, claim_work_wait=0)

    async def scenario():
        service = build_queue(settings, AzureTables(cs), AzureQueues(cs), AzureBlobs(cs), clock=Clock())
        try:
            queues = [f"census/q{slugid()[:6].lower().replace('_', 'a').replace('-', 'b')}" for _ in range(2)]
            for tq, count in zip(queues, (3, 1), strict=True):
                for _ in range(count):
                    task_id, definition = slugid(), task_definition(taskQueueId=tq)
                    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
            census = await service.stores.queue_runs.pending_census()
            assert [census[tq][0] for tq in queues] == [3, 1] and all(census[tq][1] for tq in queues)
            roles = RoleStore(service.stores.tables, cache_seconds=0)
            role_id = f"census-role-{slugid()}"
            await roles.create(role_id, ["queue:status:*"], "r")
            await roles.update(role_id, ["queue:get-task:*"], "r2")
            assert "queue:get-task:*" in await roles.expand((f"assume:{role_id}",))
            assert role_id in [r.role_id for r in await roles.list()]
            await roles.delete(role_id)
            assert (await roles.expand((f"assume:{role_id}",))).scopes == (f"assume:{role_id}",)
        finally:
            await service.close()

    run(scenario())


@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
def test_tasks_whose_deadline_buckets_were_never_checked_expire_on_azurite(tmp_path, implementation):
    """The expiry timer's look for deadline rows past `expires` (a bucket whose message was lost: here no trigger
    ever reads them), through each adapter's query filter on Azurite: 120 tasks in 120 buckets, 60 of them past
    `expires`, read 25 at a time. Those 60 go with their rows; the others stay, rows and all. (Azure's pages that
    end at partition boundaries: tests/unit/test_deadlines.py.) On an Azurite of its own, as above (the clock
    jumps two days)."""
    import datetime as dt

    from local_host import azurite as azurite_mod
    from shared import timeutil
    from shared.domain.deadlines import DEADLINES_TABLE
    from shared.runtime import build_queue
    from shared.settings import load_settings
    from shared.storage.azure import AzureBlobs
    from tests.clock import Clock
    from tests.conftest import schema_defaults, slugid, task_definition

    Tables, Queues = IMPLEMENTATIONS[implementation]
    azurite = azurite_mod.start(tmp_path / "azurite", in_memory=True)
    cs = azurite.connection_string
    clock = Clock()
    settings = load_settings(storage=cs, root_access_token="x" * 30, expiry_delay=0, claim_work_wait=0)

    async def rows(service) -> set[str]:
        page, token, found = None, None, set()
        while page is None or token is not None:
            page = await service.stores.tables.query(
                DEADLINES_TABLE, "PartitionKey ge @lo", {"lo": ""}, continuation=token
            )
            found |= {e.row_key for e in page.entities}
            token = page.continuation
        return found

    async def scenario(service):
        expiring, kept = set(), set()
        for i in range(120):
            task_id, definition = slugid(), task_definition()
            deadline = clock() + dt.timedelta(seconds=10 + i)  # a bucket each
            definition.update(
                deadline=timeutil.iso(deadline),
                expires=timeutil.iso(deadline + (dt.timedelta(hours=1) if i % 2 else dt.timedelta(days=30))),
            )
            await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
            (expiring if i % 2 else kept).add(task_id)
        assert await rows(service) == expiring | kept
        clock.advance(2 * 86400)
        reads: list[int] = []
        real = service.stores.deadlines.expired

        async def counted(cutoff, limit):
            found = await real(cutoff, limit)
            reads.append(len(found))
            return found

        service.stores.deadlines.expired = counted
        assert await service.expiry.expire_tasks(batch=25) == 60
        assert reads == [25, 25, 10, 0]  # a batch a look (those taken are gone before the next)
        assert await rows(service) == kept
        for task_id in expiring:
            assert await service.tasks.get(task_id) is None
        for task_id in kept:
            assert (await service.tasks.get(task_id)) is not None

    async def on_azurite():
        service = build_queue(settings, Tables(cs), Queues(cs), AzureBlobs(cs), clock=clock)
        try:
            await scenario(service)
        finally:
            await service.close()

    try:
        run(on_azurite())
    finally:
        azurite.stop()
