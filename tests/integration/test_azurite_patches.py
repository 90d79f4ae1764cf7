"""The Azurite that `make setup` installs carries local_host/azurite-patches (applied by patch-package), and the
patches keep Azurite's behaviour: a message past its time to live is removed (one put after a sweep too), the
others stay, a receive takes the earliest visible ones in order and answers its own queue's messages only; a query
naming one partition answers what the whole table's scan did; a replace takes the entity's place (found by key
and by partition query afterwards, its ETag new, a failed batch restoring it); entities are found by key through
every insert, replace, delete and failed batch, and LokiJS keeps its indices sorted."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from local_host import azurite as azurite_mod
from shared.storage.base import Entity, Op
from shared.storage.rest import RestQueues, RestTables

QUEUE_STORE = Path("dist/src/queue/persistence/LokiQueueMetadataStore.js")
TABLE_STORE = Path("dist/src/table/persistence/LokiTableMetadataStore.js")


def test_the_installed_azurite_is_patched() -> None:
    if os.environ.get("QUEUE_AZURITE_BIN_DIR"):
        pytest.skip("an Azurite of one's own (QUEUE_AZURITE_BIN_DIR) is not the one `make setup` patches")
    main = Path(azurite_mod.find_binary("azurite-queue")).resolve()  # .../azurite/dist/src/queue/main.js
    package = main.parents[3]
    source = (package / QUEUE_STORE).read_text()
    unpatched = "Azurite's queue service is not patched: run `make setup` (local_host/azurite-patches/README.md)"
    assert "if (expired.length > 0) {\n            coll.remove(expired);" in source, unpatched
    assert "queryTime < earliest" in source, unpatched  # no scan while nothing can have expired
    assert "LokiQueueMetadataStore.earliest(coll.chain().find(query).data()" in source, unpatched  # no sort
    assert "accountName: account,\n            queueName: queue," not in source, unpatched  # queue first
    assert "for (const doc of docs) {\n            coll.update(doc);" in source, unpatched  # receives keep indices
    tables = (package / TABLE_STORE).read_text()
    assert "partitionKeyOfFilter(queryOptions.filter)" in tables, unpatched.replace("queue", "table")
    assert "tableEntityCollection.update({ ...entity, $loki: doc.$loki" in tables, unpatched.replace("queue", "table")
    assert "LokiTableMetadataStore.entityByKey(tableEntityCollection" in tables, unpatched.replace("queue", "table")
    lokijs = (package.parent / "lokijs" / "src" / "lokijs.js").read_text()
    assert "Patched (tc-azure-queue)" in lokijs, "LokiJS is not patched: run `make setup`"
    assert "LokiFsAdapter.prototype.mode = 'reference';" in lokijs, "LokiJS's file adapter is unpatched: make setup"


QUEUES_COME_AND_GO = """
const Store = require(process.argv[1]).default;
(async () => {
  const store = new Store("unused", true);
  await store.init();
  const put = (queue, ttl) => store.insertMessage({accountName: "a", queueName: queue, messageId: queue + ttl,
    popReceipt: "r", insertionTime: new Date(), expirationTime: new Date(Date.now() + ttl), timeNextVisible: new Date(),
    dequeueCount: 0, persistency: {id: "", offset: 0, count: 0}});
  const take = (queue, count) => store.getMessages("a", queue, new Date(Date.now() + 30000), "r2", count);
  const queues = Number(process.argv[2]);
  for (let i = 0; i < queues; i++) {
    await store.createQueue({accountName: "a", name: "q" + i});
    await put("q" + i, 3600000);
    await take("q" + i, 1);  // a sweep: the queue's earliest expiry is known
    await store.deleteQueue("a", "q" + i);
  }
  await store.createQueue({accountName: "a", name: "kept"});
  await take("kept", 1);
  await put("kept", 1);  // put after the sweep: lowers the bound
  await new Promise((done) => setTimeout(done, 20));
  const left = await take("kept", 32);
  console.log(JSON.stringify({entries: store.earliestExpiry.size, left: left.length}));
  await store.close();
})().catch((err) => { console.error(err); process.exit(1); });
"""


def test_a_deleted_queue_leaves_no_expiry_bound_behind() -> None:
    """The queue service's per-queue lower bound of expiry times is dropped with its queue: after 2,000 queues
    were made, swept and deleted, one entry is left (the queue that exists), whose bound still lets an expired
    message go."""
    if os.environ.get("QUEUE_AZURITE_BIN_DIR"):
        pytest.skip("an Azurite of one's own (QUEUE_AZURITE_BIN_DIR) is not the one `make setup` patches")
    package = Path(azurite_mod.find_binary("azurite-queue")).resolve().parents[3]
    done = subprocess.run(
        ["node", "-e", QUEUES_COME_AND_GO, str(package / QUEUE_STORE), "2000"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"entries": 1, "left": 0}


EXTENTS_ROUND_TRIP = """
const Store = require(process.argv[1]).default;
const { readStreamToString } = require(process.argv[2]);
(async () => {
  const meta = {isInitialized: () => true, isClosed: () => false, init: async () => {}, close: async () => {},
                updateExtent: async () => {}, getExtentLocationId: async () => "loc"};
  const quiet = {info() {}, debug() {}, verbose() {}, warn() {}, error() {}};
  const store = new Store(meta, [{locationId: "loc", locationPath: process.argv[3], maxConcurrency: 2}], quiet);
  await store.init();
  // 25,000 short texts (the count bound), then 5,000 of up to 8 KB (the bytes bound)
  const text = (i) => `message ${i} ` + "x".repeat(i < 25000 ? i % 50 : (i * 7919) % 8000);
  const append = (from, to) => Promise.all(Array.from({length: to - from},
                                                      (_, i) => store.appendExtent(Buffer.from(text(from + i)))));
  const chunks = await append(0, 25000);
  const short = {kept: store.recentChunks.size, bytes: store.recentChunkBytes};
  chunks.push(...await append(25000, 30000));
  let wrong = 0;
  for (let i = 0; i < chunks.length; i += 1) {
    if (await readStreamToString(await store.readExtent(chunks[i])) !== text(i)) wrong += 1;
  }
  const numbers = chunks.every((c) => typeof c.count === "number" && typeof c.offset === "number");
  console.log(JSON.stringify({wrong, short, kept: store.recentChunks.size, bytes: store.recentChunkBytes, numbers}));
})().catch((err) => { console.error(err); process.exit(1); });
"""


def test_message_texts_are_read_back_from_memory_or_disk_and_memory_is_bounded(tmp_path: Path) -> None:
    """The queue service's extent store keeps the chunks it last appended from buffers in memory, within 16 MiB and
    20,000 chunks, and writes each without a stream or a sync: 30,000 texts (25,000 short, then 5,000 of up to 8 KB)
    appended two at a time are each read back as written, the latest from memory, the others from their files."""
    if os.environ.get("QUEUE_AZURITE_BIN_DIR"):
        pytest.skip("an Azurite of one's own (QUEUE_AZURITE_BIN_DIR) is not the one `make setup` patches")
    package = Path(azurite_mod.find_binary("azurite-queue")).resolve().parents[3]
    common = package / "dist" / "src" / "common"
    done = subprocess.run(
        [
            "node",
            "-e",
            EXTENTS_ROUND_TRIP,
            str(common / "persistence" / "FSExtentStore.js"),
            str(common.parent / "queue" / "utils" / "utils.js"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["wrong"] == 0 and found["numbers"], found
    assert found["short"]["kept"] == 20_000 and found["short"]["bytes"] < 2 * 1024 * 1024, found  # by count
    assert found["kept"] < 20_000 and 12 * 1024 * 1024 < found["bytes"] <= 16 * 1024 * 1024, found  # by bytes


def test_expired_messages_are_still_removed(azurite: azurite_mod.Azurite) -> None:
    async def go() -> None:
        queues = RestQueues(azurite.connection_string)
        name, other = f"ttl-{uuid.uuid4().hex[:10]}", f"other-{uuid.uuid4().hex[:10]}"
        try:
            await queues.ensure_queues([name, other])
            await queues.put(other, b'{"n": "other"}', ttl=1)
            await queues.put(name, b'{"n": "short"}', ttl=1)
            await queues.put(name, b'{"n": "long"}', ttl=3600)
            # Before it expires, the short-lived one is there: the guard removes nothing that has not expired.
            assert sorted(m.json()["n"] for m in await queues.receive(name, 32, 1)) == ["long", "short"]
            await asyncio.sleep(2.2)  # visible again (1 s) and past its time to live (1 s)
            assert [m.json()["n"] for m in await queues.receive(name, 32, 30)] == ["long"]
            assert await queues.receive(other, 32, 30) == []  # expired in its own queue too
        finally:
            await queues.close()

    asyncio.run(go())


def test_a_message_put_after_a_look_at_its_queue_still_expires_on_time(azurite: azurite_mod.Azurite) -> None:
    """Azurite skips its sweep of expired messages while the queue's earliest expiry is ahead: a message put
    after a sweep found nothing due for an hour moves that time forward, and goes once expired."""

    async def go() -> None:
        queues = RestQueues(azurite.connection_string)
        name = f"late-{uuid.uuid4().hex[:10]}"
        try:
            await queues.ensure_queues([name])
            await queues.put(name, b'{"n": "long"}', ttl=3600)
            assert [m.json()["n"] for m in await queues.receive(name, 32, 1)] == ["long"]  # swept: an hour ahead
            await queues.put(name, b'{"n": "short"}', ttl=1)
            assert sorted(m.json()["n"] for m in await queues.receive(name, 32, 1)) == ["short"]
            await asyncio.sleep(2.2)  # the long one visible again, the short one past its time to live
            assert [m.json()["n"] for m in await queues.receive(name, 32, 30)] == ["long"]
        finally:
            await queues.close()

    asyncio.run(go())


def test_a_receive_takes_the_earliest_visible_of_many(azurite: azurite_mod.Azurite) -> None:
    """A receive picks its messages from the visible ones in one pass (Azurite sorted them all): the first 32 of
    100 by the time they became visible, then by when they were put."""

    async def go() -> None:
        queues = RestQueues(azurite.connection_string)
        name = f"many-{uuid.uuid4().hex[:10]}"
        try:
            await queues.ensure_queues([name])
            for i in range(100):
                await queues.put(name, b'{"n": %d}' % i)
            first = await queues.receive(name, 32, 1)  # 0-31, hidden for a second
            assert [m.json()["n"] for m in first] == list(range(32))
            assert [m.json()["n"] for m in await queues.receive(name, 32, 30)] == list(range(32, 64))
            await asyncio.sleep(1.2)  # 0-31 visible again, since later than 64-99 were put
            assert [m.json()["n"] for m in await queues.receive(name, 32, 30)] == list(range(64, 96))
            assert [m.json()["n"] for m in await queues.receive(name, 32, 30)] == [96, 97, 98, 99, *range(28)]
        finally:
            await queues.close()

    asyncio.run(go())


def test_receives_take_in_order_and_hide_what_they_took(azurite: azurite_mod.Azurite) -> None:
    """A receive updates each message it takes alone (LokiJS rebuilt all the messages' indices after an update of
    several): messages are still taken oldest first, each once while hidden, with their dequeue counts, a message
    whose visibility ran out is taken again, and another queue's messages are left alone."""

    async def go() -> None:
        queues = RestQueues(azurite.connection_string)
        name, other = f"take-{uuid.uuid4().hex[:10]}", f"other-{uuid.uuid4().hex[:10]}"
        try:
            await queues.ensure_queues([name, other])
            for i in range(40):
                await queues.put(other, b'{"n": %d}' % i)
            for i in range(10):
                await queues.put(name, b'{"n": %d}' % i)
            taken = []
            while batch := await queues.receive(name, 3, 2):
                taken += [(m.json()["n"], m.dequeue_count) for m in batch]
            assert taken == [(i, 1) for i in range(10)]
            await asyncio.sleep(2.2)  # hidden for 2 s: all visible again, in the same order
            again = await queues.receive(name, 32, 30)
            assert [(m.json()["n"], m.dequeue_count) for m in again] == [(i, 2) for i in range(10)]
            assert sorted(m.json()["n"] for m in await queues.receive(other, 32, 30)) == list(range(32))
        finally:
            await queues.close()

    asyncio.run(go())


def test_partition_queries_answer_as_the_scan_did(azurite: azurite_mod.Azurite) -> None:
    """Filters that name one partition are narrowed through its index; any other filter is scanned as before. The
    answers, their order and their pages are the same either way."""

    async def go() -> None:
        tables = RestTables(azurite.connection_string)
        table = f"Patch{uuid.uuid4().hex[:10]}"
        try:
            await tables.ensure_tables([table])
            for partition in ["p", "p2", "q", "it's"]:
                await tables.transact(
                    table,
                    [Op("insert", Entity(partition, f"r{i:02d}", {"n": i, "odd": i % 2 == 1})) for i in range(30)],
                )

            async def rows(flt: str, params: dict[str, object], limit: int = 7) -> list[tuple[str, str]]:
                found, token = [], None
                while True:
                    page = await tables.query(table, flt, params, limit=limit, continuation=token)
                    found += [(e.partition_key, e.row_key) for e in page.entities]
                    token = page.continuation
                    if token is None:
                        return found

            assert await rows("PartitionKey eq @pk", {"pk": "p"}) == [("p", f"r{i:02d}") for i in range(30)]
            assert await rows("PartitionKey eq @pk", {"pk": "it's"}) == [("it's", f"r{i:02d}") for i in range(30)]
            assert await rows(
                "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi and odd eq @odd",
                {"pk": "p2", "lo": "r10", "hi": "r20", "odd": True},
            ) == [("p2", f"r{i:02d}") for i in range(11, 20, 2)]
            # `or`: not narrowed, and still right.
            both = await rows("PartitionKey eq @a or PartitionKey eq @b", {"a": "p", "b": "q"}, limit=11)
            assert both == [("p", f"r{i:02d}") for i in range(30)] + [("q", f"r{i:02d}") for i in range(30)]
            assert await rows("PartitionKey eq @pk", {"pk": "none"}) == []
        finally:
            await tables.close()

    asyncio.run(go())


def test_replaces_and_merges_keep_the_table_whole(azurite: azurite_mod.Azurite) -> None:
    """Replaced and merged entities are found by key and by partition query, in key order, with new ETags; the
    others are untouched; a batch that fails after replacing an entity leaves it as it was."""

    async def go() -> None:
        tables = RestTables(azurite.connection_string)
        table = f"Replace{uuid.uuid4().hex[:10]}"
        try:
            await tables.ensure_tables([table])
            for partition in ["a", "b"]:
                await tables.transact(
                    table, [Op("insert", Entity(partition, f"r{i:02d}", {"n": i})) for i in range(20)]
                )
            first = await tables.get(table, "a", "r05")
            assert first is not None
            replaced = await tables.replace(table, Entity("a", "r05", {"n": 105, "new": "yes"}, first.etag))
            assert replaced is not None and replaced.etag != first.etag
            assert await tables.replace(table, Entity("a", "r05", {"n": 0}, first.etag)) is None  # stale ETag
            assert await tables.transact(table, [Op("merge", Entity("a", "r06", {"m": "merged"}, "*"))])
            got = await tables.get(table, "a", "r05")
            assert got is not None and got.data["n"] == 105 and got.data["new"] == "yes" and got.etag == replaced.etag
            page = await tables.query(table, "PartitionKey eq @pk", {"pk": "a"})
            assert [e.row_key for e in page.entities] == [f"r{i:02d}" for i in range(20)]
            by_key = {e.row_key: e.data for e in page.entities}
            assert by_key["r05"]["n"] == 105 and by_key["r06"] == {"n": 6, "m": "merged"} and by_key["r07"] == {"n": 7}
            # A batch that replaces r08 and then fails (an insert of an existing row) changes nothing.
            before = await tables.get(table, "a", "r08")
            assert not await tables.transact(
                table, [Op("replace", Entity("a", "r08", {"n": -1}, "*")), Op("insert", Entity("a", "r09", {"n": -1}))]
            )
            after = await tables.get(table, "a", "r08")
            assert after is not None and before is not None and after.data == before.data and after.etag == before.etag
            other = await tables.query(table, "PartitionKey eq @pk", {"pk": "b"})
            assert [(e.row_key, e.data["n"]) for e in other.entities] == [(f"r{i:02d}", i) for i in range(20)]
        finally:
            await tables.close()

    asyncio.run(go())


def test_entities_are_found_by_key_through_every_change(azurite: azurite_mod.Azurite) -> None:
    """Azurite finds an entity by its keys through a map that the collection's inserts, updates and deletes keep
    (it searched the RowKey index, which is gone): a deleted entity is not found and can be inserted again, an
    insert of an existing key conflicts, keys that differ only in where the partition ends are distinct, rows of a
    failed batch are not found and can be inserted, and a replaced entity's old version is not what a read finds."""

    async def go() -> None:
        tables = RestTables(azurite.connection_string)
        table = f"Keys{uuid.uuid4().hex[:10]}"
        try:
            await tables.ensure_tables([table])
            for first in range(0, 300, 100):
                assert await tables.transact(
                    table, [Op("insert", Entity("p", f"r{i:03d}", {"n": i})) for i in range(first, first + 100)]
                )
            assert await tables.insert(table, Entity("p", "r001", {"n": -1})) is None  # exists: 409
            # ("ab", "c") and ("a", "bc") are different entities.
            assert await tables.insert(table, Entity("ab", "c", {"n": 1})) is not None
            assert await tables.insert(table, Entity("a", "bc", {"n": 2})) is not None
            ab, a = await tables.get(table, "ab", "c"), await tables.get(table, "a", "bc")
            assert ab is not None and a is not None and (ab.data["n"], a.data["n"]) == (1, 2)
            for i in range(0, 300, 3):
                assert await tables.delete(table, "p", f"r{i:03d}")
            assert await tables.get(table, "p", "r000") is None
            assert await tables.get(table, "p", "r001") is not None
            assert not await tables.delete(table, "p", "r003")  # gone: 404
            assert await tables.insert(table, Entity("p", "r003", {"n": 303})) is not None
            again = await tables.get(table, "p", "r003")
            assert again is not None and again.data == {"n": 303}
            # A batch that inserts two new rows and replaces one, then fails: none of it is found.
            assert not await tables.transact(
                table,
                [
                    Op("insert", Entity("p", "new-1", {})),
                    Op("replace", Entity("p", "r004", {"n": -4}, "*")),
                    Op("insert", Entity("p", "new-2", {})),
                    Op("insert", Entity("p", "r001", {})),
                ],
            )
            assert await tables.get(table, "p", "new-1") is None and await tables.get(table, "p", "new-2") is None
            r004 = await tables.get(table, "p", "r004")
            assert r004 is not None and r004.data == {"n": 4}
            assert await tables.insert(table, Entity("p", "new-1", {"n": "n1"})) is not None
            replaced = await tables.replace(table, Entity("p", "r004", {"n": 404}, r004.etag))
            assert replaced is not None
            read = await tables.get(table, "p", "r004")
            assert read is not None and read.data == {"n": 404} and read.etag == replaced.etag
            assert await tables.replace(table, Entity("p", "r004", {"n": 0}, r004.etag)) is None  # the old ETag: 412
            page = await tables.query(table, "PartitionKey eq @pk", {"pk": "p"}, limit=1000)
            expected = sorted([f"r{i:03d}" for i in range(300) if i % 3 or i == 3] + ["new-1"])
            assert [e.row_key for e in page.entities] == expected
        finally:
            await tables.close()

    asyncio.run(go())
