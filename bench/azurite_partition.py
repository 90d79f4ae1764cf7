"""What a partition query costs Azurite's table service while other partitions hold many entities: the queries the
queue makes on its hot paths (a task's dependents, its artifacts, a task queue's pending runs, a deadline bucket)
name one partition, which Azure serves from that partition; Azurite 3.37.0 as npm ships it runs the filter over
every entity of the table.

    .venv/bin/python -m bench.azurite_partition [--others 0 10000 40000] [--queries 300]

Starts its own Azurite (in memory) and prints, per count of other entities (each count after the one before: they
add up), the Azurite table CPU milliseconds per query of a 10-entity partition, per insert, and per replace, merge
and delete of one entity (what a task's changes are): with Azurite and LokiJS as npm ships them, each grows with
the table (local_host/azurite-patches/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lifecycle import cpu_seconds
from local_host import azurite
from shared.storage.base import Entity, Op
from shared.storage.rest import RestTables

TABLE = "BenchPartitions"
CONCURRENCY = 16


async def measure(store: azurite.Azurite, others: list[int], queries: int) -> None:
    tables = RestTables(store.connection_string)
    pids = {"table": [store.processes["table"].pid]}
    limit = asyncio.Semaphore(CONCURRENCY)
    try:
        await tables.ensure_tables([TABLE])
        await tables.transact(TABLE, [Op("insert", Entity("hot", f"row-{i:03d}", {"n": i})) for i in range(10)])
        held = 0

        async def fill(partition: int) -> None:
            async with limit:
                await tables.transact(
                    TABLE,
                    [
                        Op("insert", Entity(f"other-{partition:06d}", f"row-{i:03d}", {"payload": "x" * 200}))
                        for i in range(100)
                    ],
                )

        async def query() -> None:
            async with limit:
                page = await tables.query(
                    TABLE, "PartitionKey eq @pk and RowKey ge @lo", {"pk": "hot", "lo": "row-"}, limit=100
                )
                assert len(page.entities) == 10

        async def change(kind: str, i: int) -> None:
            async with limit:
                key = ("hot", f"churn-{i:05d}")
                if kind == "insert":
                    await tables.insert(TABLE, Entity(*key, {"n": i}))
                elif kind == "replace":
                    assert await tables.replace(TABLE, Entity(*key, {"n": i + 1}, "*")) is not None
                elif kind == "merge":
                    assert await tables.transact(TABLE, [Op("merge", Entity(*key, {"m": i}, "*"))])
                else:
                    assert await tables.delete(TABLE, *key, etag="*")

        async def per_change(kind: str, count: int) -> float:
            before = cpu_seconds(pids)["table"]
            await asyncio.gather(*(change(kind, i) for i in range(count)))
            return (cpu_seconds(pids)["table"] - before) / count * 1000

        for target in others:
            before = cpu_seconds(pids)
            first = held // 100
            await asyncio.gather(*(fill(p) for p in range(first, first + (target - held) // 100)))
            inserted = target - held
            filled = cpu_seconds(pids)
            held = target
            started = time.perf_counter()
            await asyncio.gather(*(query() for _ in range(queries)))
            elapsed = time.perf_counter() - started
            after = cpu_seconds(pids)
            per_insert = (filled["table"] - before["table"]) / inserted * 1000 if inserted else 0.0
            per_query = (after["table"] - filled["table"]) / queries * 1000
            costs = {kind: await per_change(kind, queries) for kind in ("insert", "replace", "merge", "delete")}
            print(
                f"{held} entities in other partitions: {queries} partition queries in {elapsed:.1f} s; Azurite table "
                f"CPU {per_query:.2f} ms per query, {per_insert:.2f} ms per entity inserted (in batches of 100); "
                "one entity's " + ", ".join(f"{kind} {ms:.2f}" for kind, ms in costs.items()) + " ms",
                flush=True,
            )
    finally:
        await tables.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.azurite_partition",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--others", type=int, nargs="+", default=[0, 10_000, 40_000])
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-partition-") as data:
        store = azurite.start(Path(data), in_memory=True)
        try:
            asyncio.run(measure(store, sorted(args.others), args.queries))
        finally:
            store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
