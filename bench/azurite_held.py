"""What the data Azurite holds costs its table service while little happens: a `make run` left up for days holds the
rows of every task not yet expired, and each autosave (every 5 s while anything changed) wrote the whole database
(local_host/azurite-patches/README.md); with the journal it writes what changed.

    .venv/bin/python -m bench.azurite_held [--entities 0 20000 100000] [--rate 10] [--seconds 20]

Starts its own Azurite, data on disk as `make run` keeps it, fills a table with entities of about 2 KB (a task's
row is 2-10 KB) in batches of 100, waits for the autosave that follows, then upserts `--rate` entities a second for
`--seconds`, twice, and prints the table service's CPU in each window, as a share of one core, and the size of its
database file and journal. Each count of entities comes after the one before (they add up). Set
QUEUE_AZURITE_BIN_DIR to measure another Azurite build.
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

TABLE = "BenchHeld"
CONCURRENCY = 8
SETTLE_SECONDS = 7  # an autosave comes every 5 s


def file_size(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB" if path.exists() else "none"


async def measure(store: azurite.Azurite, data: Path, counts: list[int], rate: float, seconds: float) -> None:
    tables = RestTables(store.connection_string)
    pids = {"table": [store.processes["table"].pid]}
    limit = asyncio.Semaphore(CONCURRENCY)
    payload = "x" * 2000
    try:
        await tables.ensure_tables([TABLE])
        held = 0

        async def fill(partition: int) -> None:
            async with limit:
                await tables.transact(
                    TABLE,
                    [
                        Op("insert", Entity(f"held-{partition:06d}", f"row-{i:03d}", {"payload": payload}))
                        for i in range(100)
                    ],
                )

        for target in counts:
            first = held // 100
            await asyncio.gather(*(fill(p) for p in range(first, first + (target - held) // 100)))
            held = target
            await asyncio.sleep(SETTLE_SECONDS)
            for window in (1, 2):
                before, started = cpu_seconds(pids)["table"], time.monotonic()
                for i in range(int(rate * seconds)):
                    await tables.upsert(TABLE, Entity("trickle", f"row-{i % 10}", {"n": i}))
                    await asyncio.sleep(1 / rate)
                share = (cpu_seconds(pids)["table"] - before) / (time.monotonic() - started)
                db = data / "__azurite_db_table__.json"
                print(
                    f"{held} entities held, window {window}: Azurite table CPU {share * 100:.1f} % of a core under "
                    f"{rate:g} upserts a second; database file {file_size(db)}, journal "
                    f"{file_size(Path(f'{db}.journal'))}",
                    flush=True,
                )
    finally:
        await tables.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.azurite_held", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entities", type=int, nargs="+", default=[0, 20_000, 100_000])
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-held-") as folder:
        data = Path(folder)
        store = azurite.start(data)
        try:
            asyncio.run(measure(store, data, sorted(args.entities), args.rate, args.seconds))
        finally:
            store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
