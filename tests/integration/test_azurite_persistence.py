"""Azurite's data on disk (`make run` keeps it there) survives a restart, whatever its size: the patched LokiJS
writes a database a document per line, from a snapshot, instead of one JSON string that V8 cannot make past
~512 MiB (local_host/azurite-patches/README.md), and still reads a file in the earlier form."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import Path

from local_host import azurite as azurite_mod
from shared.storage.base import Entity, Op
from shared.storage.rest import RestQueues, RestTables


def lokijs() -> Path:
    main = Path(azurite_mod.find_binary("azurite-table")).resolve()  # .../azurite/dist/src/table/main.js
    return main.parents[4] / "lokijs"


def run_node(script: str, *args: str, timeout: float = 120) -> str:
    done = subprocess.run(["node", "--max-old-space-size=8192", "-e", script, str(lokijs()), *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_table_and_queue_data_survive_a_restart(tmp_path: Path) -> None:
    """Entities in several partitions, and messages whose visibility changed (an indexed field of the queue's
    collection), are all there after Azurite stopped and started again on its files; each file holds a line per
    document."""
    data = tmp_path / "azurite"
    store = azurite_mod.start(data)
    table, queue = f"Persist{uuid.uuid4().hex[:8]}", f"persist-{uuid.uuid4().hex[:8]}"

    async def write() -> list[str]:
        tables, queues = RestTables(store.connection_string), RestQueues(store.connection_string)
        try:
            await tables.ensure_tables([table])
            await queues.ensure_queues([queue])
            for p in range(3):
                await tables.transact(table, [Op("insert", Entity(f"p{p}", f"r{i:03d}", {"n": i, "text": "a\nb\tc"}))
                                              for i in range(100)])
            await tables.delete(table, "p1", "r050")
            for i in range(20):
                await queues.put(queue, f'{{"n": {i}}}'.encode(), visible_in=0 if i % 2 else 3600)
            visible = await queues.receive(queue, 32, 1)
            assert sorted(m.json()["n"] for m in visible) == list(range(1, 20, 2))  # their texts read back
            for message in visible[:5]:  # hidden for an hour now: their visibleTime changed
                await queues.release(queue, message, 3600)
            return sorted(m.json()["n"] for m in visible[5:])
        finally:
            await tables.close()
            await queues.close()

    try:
        expected_visible = asyncio.run(write())
    finally:
        store.stop()
    lines = (data / "__azurite_db_table__.json").read_text().count("\n")
    assert lines > 300, lines  # the database, then a line per document
    store = azurite_mod.start(data, ports=store.ports, key=store.key)

    async def read() -> None:
        tables, queues = RestTables(store.connection_string), RestQueues(store.connection_string)
        try:
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
        finally:
            await tables.close()
            await queues.close()

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
    console.log(JSON.stringify({err: err ? String(err) : null, size: fs.statSync(file).size, count: t.count(),
                                last: t.findOne({RowKey: "r59999"}).data.slice(10000),
                                partition: t.find({PartitionKey: "p5"}).length}));
  });
});
"""


def test_a_database_larger_than_a_string_is_saved_and_loaded(tmp_path: Path) -> None:
    """600 MB of documents (Azurite's table service with ~50,000 tasks' rows): as one string, JSON.stringify
    aborted the process ("Check failed" in Builtin_JsonStringify); a document per line, it is saved and read."""
    import json

    result = json.loads(run_node(LARGE, str(tmp_path / "large.json")))
    assert result == {"err": None, "size": result["size"], "count": 60000, "last": "59999", "partition": 619}
    assert result["size"] > 600_000_000


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
