"""Azurite's data on disk (`make run` keeps it there) survives a restart, whatever its size: the patched LokiJS
writes a database a document per line, from a snapshot, instead of one JSON string that V8 cannot make past
~512 MiB, then appends what changed to a journal until it outgrows the snapshot
(local_host/azurite-patches/README.md), and still reads a file in the earlier form."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from local_host import azurite as azurite_mod
from shared.storage.base import Entity, Op
from shared.storage.rest import RestQueues, RestTables


@contextlib.asynccontextmanager
async def clients(store: azurite_mod.Azurite) -> AsyncIterator[tuple[RestTables, RestQueues]]:
    tables, queues = RestTables(store.connection_string), RestQueues(store.connection_string)
    try:
        yield tables, queues
    finally:
        await tables.close()
        await queues.close()


def lokijs() -> Path:
    main = Path(azurite_mod.find_binary("azurite-table")).resolve()  # .../azurite/dist/src/table/main.js
    return main.parents[4] / "lokijs"


def run_node(script: str, *args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        ["node", "--max-old-space-size=8192", "-e", script, str(lokijs()), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_table_and_queue_data_survive_a_restart(tmp_path: Path) -> None:
    """Entities in several partitions, and messages whose visibility changed (an indexed field of the queue's
    collection), are all there after Azurite stopped and started again on its files; each file holds a line per
    document."""
    data = tmp_path / "azurite"
    store = azurite_mod.start(data)
    table, queue = f"Persist{uuid.uuid4().hex[:8]}", f"persist-{uuid.uuid4().hex[:8]}"

    async def write() -> list[str]:
        async with clients(store) as (tables, queues):
            await tables.ensure_tables([table])
            await queues.ensure_queues([queue])
            for p in range(3):
                await tables.transact(
                    table, [Op("insert", Entity(f"p{p}", f"r{i:03d}", {"n": i, "text": "a\nb\tc"})) for i in range(100)]
                )
            await tables.delete(table, "p1", "r050")
            for i in range(20):
                await queues.put(queue, f'{{"n": {i}}}'.encode(), visible_in=0 if i % 2 else 3600)
            visible = await queues.receive(queue, 32, 1)
            assert sorted(m.json()["n"] for m in visible) == list(range(1, 20, 2))  # their texts read back
            for message in visible[:5]:  # hidden for an hour now: their visibleTime changed
                await queues.release(queue, message, 3600)
            return sorted(m.json()["n"] for m in visible[5:])

    try:
        expected_visible = asyncio.run(write())
    finally:
        store.stop()
    lines = (data / "__azurite_db_table__.json").read_text().count("\n")
    assert lines > 300, lines  # the database, then a line per document
    store = azurite_mod.start(data, ports=store.ports, key=store.key)

    async def read() -> None:
        async with clients(store) as (tables, queues):
            for p in range(3):
                page = await tables.query(table, "PartitionKey eq @pk", {"pk": f"p{p}"})
                assert [e.row_key for e in page.entities] == [f"r{i:03d}" for i in range(100) if (p, i) != (1, 50)]
            got = await tables.get(table, "p2", "r007")
            assert got is not None and got.data == {"n": 7, "text": "a\nb\tc"}
            assert await tables.insert(table, Entity("p2", "r008", {"n": 0})) is None  # found by key after loading
            await tables.upsert(table, Entity("p1", "r050", {"n": 50}))  # the indices still take writes
            assert (await tables.get(table, "p1", "r050")) is not None
            await asyncio.sleep(1.2)  # the five received (1 s) would be visible again, had their change been lost
            assert sorted(m.json()["n"] for m in await queues.receive(queue, 32, 30)) == expected_visible

    try:
        asyncio.run(read())
    finally:
        store.stop()


LARGE = """
const Loki = require(process.argv[1]);
const fs = require("fs");
const file = process.argv[2];
const db = new Loki(file, {persistenceMethod: "fs", autosave: true, autosaveInterval: 60000});
const c = db.addCollection("t", {indices: ["PartitionKey", "RowKey"]});
const pad = "x".repeat(10000);
for (let i = 0; i < 60000; i++) c.insert({PartitionKey: "p" + (i % 97), RowKey: "r" + i, data: pad + i});
db.close(() => {
  const again = new Loki(file, {persistenceMethod: "fs"});
  again.loadDatabase({}, (err) => {
    const t = again.getCollection("t");
    const result = {err: err ? String(err) : null, size: fs.statSync(file).size, count: t.count(),
                    last: t.findOne({RowKey: "r59999"}).data.slice(10000),
                    partition: t.find({PartitionKey: "p5"}).length};
    for (const d of t.data.slice()) { d.data = pad + "v2-" + d.RowKey; t.update(d); }  // all of it, to the journal
    again.saveDatabase((err) => {
      result.journal = fs.statSync(file + ".journal").size;
      const third = new Loki(file, {persistenceMethod: "fs"});
      third.loadDatabase({}, (err) => {
        result.journalErr = err ? String(err) : null;
        result.changed = third.getCollection("t").find({data: pad + "v2-r12345"}).length;
        console.log(JSON.stringify(result));
      });
    });
  });
});
"""


@pytest.mark.slow
def test_a_database_larger_than_a_string_is_saved_and_loaded(tmp_path: Path) -> None:
    """600 MB of documents (Azurite's table service with ~50,000 tasks' rows): as one string, JSON.stringify
    aborted the process ("Check failed" in Builtin_JsonStringify); a document per line, it is saved and read. Then
    every document changes: a journal as large, read a line at a time."""
    import json

    result = json.loads(run_node(LARGE, str(tmp_path / "large.json")))
    assert result == {
        "err": None,
        "size": result["size"],
        "count": 60000,
        "last": "59999",
        "partition": 619,
        "journal": result["journal"],
        "journalErr": None,
        "changed": 1,
    }
    assert result["size"] > 600_000_000
    assert result["journal"] > 600_000_000  # every document changed: a journal past the longest string, read too


EARLIER_FORM = """
const Loki = require(process.argv[1]);
const fs = require("fs");
const file = process.argv[2];
const old = new Loki(file, {persistenceMethod: "memory"});
const c = old.addCollection("t", {indices: ["PartitionKey", "RowKey"]});
for (let i = 0; i < 500; i++) c.insert({PartitionKey: "p" + (i % 7), RowKey: "r" + i, text: "a\\nb " + i});
fs.writeFileSync(file, old.serialize());  // what the unpatched adapter wrote: the database as one JSON string
const db = new Loki(file, {persistenceMethod: "fs"});
db.loadDatabase({}, (err) => {
  const t = db.getCollection("t");
  t.insert({PartitionKey: "p3", RowKey: "new"});
  console.log(JSON.stringify({err: err ? String(err) : null, count: t.count(), p3: t.find({PartitionKey: "p3"}).length,
                              text: t.findOne({RowKey: "r42"}).text}));
});
"""


def test_a_database_in_the_earlier_form_is_read() -> None:
    """A data folder written by the unpatched Azurite (one JSON string) loads as it was, indices included."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        result = json.loads(run_node(EARLIER_FORM, str(Path(folder) / "old.json")))
    assert result == {"err": None, "count": 501, "p3": 72, "text": "a\nb 42"}


JOURNAL = """
const Loki = require(process.argv[1]);
const fs = require("fs");
const file = process.argv[2];
const save = (db) => new Promise((res, rej) => db.saveDatabase(e => e ? rej(e) : res()));
const load = () => new Promise((res, rej) => {
  const d = new Loki(file, {persistenceMethod: "fs"});
  d.loadDatabase({}, e => e ? rej(e) : res(d));
});
const dump = (db) => JSON.stringify(db.getCollection("t").data.map(d => [d.$loki, d.PartitionKey, d.RowKey, d.n]));
(async () => {
  const db = new Loki(file, {persistenceMethod: "fs"});
  const t = db.addCollection("t", {indices: ["PartitionKey"], unique: ["RowKey"]});
  const u = db.addCollection("u", {indices: ["q"]});
  for (let i = 0; i < 1000; i++) t.insert({PartitionKey: "p" + (i % 7), RowKey: "r" + i, n: i});
  for (let i = 0; i < 50; i++) u.insert({q: "a", n: i});
  await save(db);  // the first save: a snapshot
  const snapshot = fs.readFileSync(file, "utf8");
  for (let i = 0; i < 100; i++) {
    const d = t.by("RowKey", "r" + i); d.n = -i; d.PartitionKey = "px"; t.update(d);  // an indexed value changes
  }
  for (let i = 100; i < 150; i++) t.remove(t.by("RowKey", "r" + i));
  for (let i = 1000; i < 1100; i++) t.insert({PartitionKey: "p" + (i % 7), RowKey: "r" + i, n: i});
  u.findAndRemove({n: {$lt: 10}});  // a batch removal
  await save(db);
  const gone = t.insert({PartitionKey: "tmp", RowKey: "gone", n: 0}); t.remove(gone);  // both between two saves
  const five = t.by("RowKey", "r5"); five.n = 555; t.update(five);
  await save(db);
  const result = {journaled: fs.readFileSync(file, "utf8") === snapshot,
                  journalLines: fs.readFileSync(file + ".journal", "utf8").trim().split("\\n").length};
  const expected = dump(db), maxId = t.maxId;
  const a = await load();
  const at = a.getCollection("t");
  result.restored = dump(a) === expected && at.maxId === maxId;
  result.indexed = [at.find({PartitionKey: "px"}).length, at.find({PartitionKey: "tmp"}).length,
                    at.by("RowKey", "r5").n, at.by("RowKey", "r120") === undefined,
                    a.getCollection("u").find({q: "a"}).length];
  result.freshId = at.insert({PartitionKey: "p1", RowKey: "after", n: 1}).$loki > maxId;
  fs.appendFileSync(file + ".journal", '0\\t{"PartitionKey":"p9","RowKey":"torn"');  // a save cut short
  const b = await load();
  result.tornIgnored = dump(b) === expected;
  b.getCollection("t").insert({PartitionKey: "p2", RowKey: "b1", n: 1});
  await save(b);
  result.snapshotAfterTorn = fs.readFileSync(file, "utf8") !== snapshot &&
    fs.readFileSync(file + ".journal", "utf8").trim().split("\\n").length === 1;
  const c = await load();
  result.afterTorn = [c.getCollection("t").by("RowKey", "b1") !== undefined, c.getCollection("t").count()];
  fs.writeFileSync(file + ".journal", "#another-snapshot\\n0\\t" + JSON.stringify(
    {PartitionKey: "p1", RowKey: "stale", n: 0, $loki: 99999, meta: {}}) + "\\n");
  result.otherGenerationIgnored = (await load()).getCollection("t").by("RowKey", "stale") === undefined;
  console.log(JSON.stringify(result));
})().catch(e => { console.error(e); process.exit(1); });
"""


def test_a_save_appends_what_changed_and_a_load_replays_it(tmp_path: Path) -> None:
    """After a snapshot, a save appends the documents changed since (updates of indexed values, removals, a batch
    removal, inserts) to the journal and leaves the snapshot as it is; a load applies the journal (indices and
    `maxId` too); a journal cut short is applied up to the cut and the next save is a snapshot; a journal that
    names another snapshot is ignored."""
    import json

    result = json.loads(run_node(JOURNAL, str(tmp_path / "db.json")))
    assert result == {
        "journaled": True,
        "journalLines": 1 + 260 + 2,
        "restored": True,
        "indexed": [100, 0, 555, True, 40],
        "freshId": True,
        "tornIgnored": True,
        "snapshotAfterTorn": True,
        "afterTorn": [True, 1051],
        "otherGenerationIgnored": True,
    }


JOURNAL_BOUND = """
const Loki = require(process.argv[1]);
const fs = require("fs");
const file = process.argv[2];
const save = (db) => new Promise((res, rej) => db.saveDatabase(e => e ? rej(e) : res()));
(async () => {
  const db = new Loki(file, {persistenceMethod: "fs"});
  const t = db.addCollection("t", {indices: ["PartitionKey"]});
  for (let i = 0; i < 200; i++) t.insert({PartitionKey: "p", RowKey: "r" + i, pad: ""});
  await save(db);
  let most = 0, snapshots = 0, inode = fs.statSync(file).ino;
  for (let round = 0; round < 60; round++) {  // each round changes 100 documents of ~10 KB: ~1 MB a save
    for (let i = 0; i < 100; i++) {
      const d = t.by("RowKey", "r" + ((round * 100 + i) % 200)); d.pad = "x".repeat(10000) + round; t.update(d);
    }
    await save(db);
    most = Math.max(most, fs.statSync(file + ".journal").size);
    const now = fs.statSync(file).ino;
    if (now !== inode) { snapshots += 1; inode = now; }
  }
  const again = new Loki(file, {persistenceMethod: "fs"});
  again.loadDatabase({}, (err) => {
    const same = JSON.stringify(again.getCollection("t").data) === JSON.stringify(t.data);
    console.log(JSON.stringify({err: err ? String(err) : null, most, snapshots, same}));
  });
})().catch(e => { console.error(e); process.exit(1); });
"""


def test_the_journal_is_bounded_by_the_snapshot(tmp_path: Path) -> None:
    """60 saves of ~1 MB of changes each to a ~2 MB database: the journal grows to at most the larger of the snapshot
    and 4 MiB (plus the save that passed it), then a snapshot starts it again; what a load finds is what was saved."""
    import json

    result = json.loads(run_node(JOURNAL_BOUND, str(tmp_path / "db.json")))
    assert result["err"] is None and result["same"] is True
    assert 4 * 1024 * 1024 < result["most"] < 4 * 1024 * 1024 + 1_100_000, result
    assert 8 <= result["snapshots"] <= 15, result


@pytest.mark.slow
def test_changes_after_a_snapshot_survive_a_restart_from_the_journal(tmp_path: Path) -> None:
    """Azurite on its files as `make run` keeps them: entities and messages written, saved in a snapshot (an
    autosave after a table was added), then replaced, merged, deleted, inserted, put and deleted; these go to the
    journals (the snapshots are not rewritten) and are all there after a restart."""
    import time

    data = tmp_path / "azurite"
    store = azurite_mod.start(data)
    table, queue = f"Journal{uuid.uuid4().hex[:8]}", f"journal-{uuid.uuid4().hex[:8]}"
    files = [data / "__azurite_db_table__.json", data / "__azurite_db_queue__.json"]

    async def first() -> None:
        async with clients(store) as (tables, queues):
            await tables.ensure_tables([table])
            await queues.ensure_queues([queue])
            await tables.transact(table, [Op("insert", Entity("p", f"r{i:03d}", {"n": i})) for i in range(100)])
            for i in range(10):
                await queues.put(queue, f'{{"n": {i}}}'.encode())

    async def then() -> None:
        async with clients(store) as (tables, queues):
            await tables.upsert(table, Entity("p", "r001", {"n": -1}))
            await tables.transact(
                table, [Op("merge", Entity("p", "r002", {"m": 2}, "*")), Op("delete", Entity("p", "r003", {}, "*"))]
            )
            await tables.insert(table, Entity("q", "new", {"n": 1000}))
            taken = await queues.receive(queue, 3, 3600)
            for message in taken:
                await queues.delete(queue, message)
            await queues.put(queue, b'{"n": 10}')

    try:
        asyncio.run(first())
        time.sleep(6.5)  # an autosave (every 5 s): the new table's collection makes it a snapshot
        snapshots = [f.stat().st_ino for f in files]
        asyncio.run(then())
    finally:
        store.stop()
    assert [f.stat().st_ino for f in files] == snapshots  # not rewritten: the changes went to the journals
    assert all(len(Path(f"{f}.journal").read_text().splitlines()) > 1 for f in files)
    store = azurite_mod.start(data, ports=store.ports, key=store.key)

    async def read() -> None:
        async with clients(store) as (tables, queues):
            rows = {e.row_key: e.data for e in (await tables.query(table, "PartitionKey eq @pk", {"pk": "p"})).entities}
            assert len(rows) == 99 and "r003" not in rows
            assert rows["r001"] == {"n": -1} and rows["r002"] == {"n": 2, "m": 2} and rows["r004"] == {"n": 4}
            assert (await tables.get(table, "q", "new")) is not None
            assert await tables.insert(table, Entity("p", "r004", {"n": 0})) is None  # found by key after loading
            left = sorted(m.json()["n"] for m in await queues.receive(queue, 32, 30))
            assert len(left) == 8 and 10 in left

    try:
        asyncio.run(read())
    finally:
        store.stop()


JOURNAL_ANY_ADAPTER = """
const Loki = require(process.argv[1]); const fs = require("fs"); const file = process.argv[2];
const save = (db) => new Promise((res, rej) => db.saveDatabase(e => e ? rej(e) : res()));
const load = (o) => new Promise((res, rej) => {
  const d = new Loki(file, o());
  d.loadDatabase({}, e => e ? rej(e) : res(d));
});
(async () => {
  const out = {};
  for (const [name, o] of [["default", () => ({})], ["instance", () => ({adapter: new Loki.LokiFsAdapter()})]]) {
    for (const f of [file, file + ".journal"]) { try { fs.unlinkSync(f); } catch (e) {} }
    const db = new Loki(file, o());
    const t = db.addCollection("t", {indices: ["k"]});
    t.insert({k: "a", n: 1});
    await save(db);
    const d = t.findOne({k: "a"}); d.n = 2; t.update(d); t.insert({k: "b", n: 3});
    await save(db);
    t.remove(t.findOne({k: "b"}));
    await save(db);
    const a = await load(o);
    out[name] = [a.getCollection("t").findOne({k: "a"}).n, a.getCollection("t").count()];
  }
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
"""


def test_changes_are_journaled_however_the_file_adapter_was_chosen(tmp_path: Path) -> None:
    """LokiJS's default persistence on Node and an adapter instance passed in track changes from their first
    snapshot on, as the `fs` option does: an update after it, and an insert removed again, are what a load finds."""
    import json

    assert json.loads(run_node(JOURNAL_ANY_ADAPTER, str(tmp_path / "db.json"))) == {
        "default": [2, 1],
        "instance": [2, 1],
    }
