"""What Azurite itself can do on this machine: the storage calls a task's lifecycle cannot avoid, each timed alone.

    .venv/bin/python -m bench.azurite_floor [--seconds 3] [--concurrency 16] [--messages 1000]

Starts its own in-memory Azurite (one process per service, as the embedded host does) and, through the
project's lean REST client, runs each kind of call as fast as it goes for a few seconds: a table insert, a point
read, a conditional replace, a two-row transaction, a queue put (`--messages` of them), and taking those
messages back (received 32 at a time, each deleted). It
prints each kind's rate and the CPU milliseconds Azurite and this client spent per call, then the fewest calls a
lifecycle (create, claim, complete, resolution) needs and what that bounds: Azurite's CPU alone, at that
count, caps the lifecycles per second the two cores of this machine can serve, before the host's own work.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lifecycle import cpu_seconds
from local_host import azurite
from shared.storage.base import Entity, Op, QueueMessage
from shared.storage.rest import RestQueues, RestTables

TABLE = "BenchFloor"
QUEUE = "bench-floor"
PAYLOAD = {"definition": "x" * 1200, "state": "pending", "runs": "[]"}  # about a task's size

# The fewest calls of one lifecycle in a design on Azure Tables and Queues that keeps Taskcluster's guarantees:
# createTask writes the task (1 insert) and its pending hint (1 put); claimWork receives hints (a receive serves
# up to 32: counted as a fraction), writes the claim (1 replace), deletes the hint and puts the claim-expiry check
# (1 delete, 1 put); reportCompleted writes the resolution (1 replace) and its resolution message (1 put); the
# resolution handler receives it (a fraction), reads the task (1 read) and deletes the message (1 delete).
MINIMAL_LIFECYCLE = {"insert": 1, "read": 1, "replace": 2, "put": 3, "take": 2}
MINIMAL_CALLS = 9  # a take is a delete and a share of a receive of up to 32 messages


async def timed(
    name: str,
    seconds: float,
    concurrency: int,
    call: Callable[[int], Awaitable[int | None]],
    pids: dict[str, list[int]],
    *,
    most: int | None = None,
) -> tuple[str, int, float, dict[str, float]]:
    """Run `call` from `concurrency` loops for `seconds` (or `most` calls in all, if sooner)."""
    counter = itertools.count()
    stop_at = time.monotonic() + seconds

    async def loop() -> int:
        done = 0
        while time.monotonic() < stop_at:
            i = next(counter)
            if most is not None and i >= most:
                break
            counted = await call(i)
            if counted == 0:
                break  # nothing left to take
            done += counted if isinstance(counted, int) else 1
        return done

    before = cpu_seconds(pids)
    started = time.perf_counter()
    calls = sum(await asyncio.gather(*(loop() for _ in range(concurrency))))
    elapsed = time.perf_counter() - started
    after = cpu_seconds(pids)
    return name, calls, elapsed, {k: after[k] - before[k] for k in after}


async def measure(store: azurite.Azurite, seconds: float, concurrency: int, messages: int) -> int:
    tables, queues = RestTables(store.connection_string), RestQueues(store.connection_string)
    pids = {f"azurite-{n}": [p.pid] for n, p in store.processes.items()} | {"client": [os.getpid()]}
    try:
        await tables.ensure_tables([TABLE])
        await queues.ensure_queues([QUEUE])
        etags: dict[int, str | None] = {}

        async def insert(i: int) -> None:
            stored = await tables.insert(TABLE, Entity(f"t{i}", f"task:t{i}", PAYLOAD))
            etags[i] = stored.etag if stored is not None else None

        inserted = 0

        async def read(i: int) -> None:
            await tables.get(TABLE, f"t{i % inserted}", f"task:t{i % inserted}")

        async def replace(i: int) -> None:
            key = i % inserted
            stored = await tables.replace(TABLE, Entity(f"t{key}", f"task:t{key}", PAYLOAD, etags.get(key)))
            etags[key] = stored.etag if stored is not None else None
            if stored is None:  # two loops took the same row: read its ETag again
                fresh = await tables.get(TABLE, f"t{key}", f"task:t{key}")
                etags[key] = fresh.etag if fresh is not None else None

        async def transact(i: int) -> None:
            await tables.transact(
                TABLE,
                [Op("upsert", Entity(f"x{i}", f"a:x{i}", PAYLOAD)), Op("upsert", Entity(f"x{i}", f"b:x{i}", {"n": i}))],
            )

        async def put(i: int) -> None:
            await queues.put(QUEUE, b'{"taskId": "%d"}' % i)

        async def take(i: int) -> int:
            """Receive up to 32 messages and delete each: a worker's or a handler's share of a message."""
            messages: list[QueueMessage] = await queues.receive(QUEUE, 32, 30)
            await asyncio.gather(*(queues.delete(QUEUE, message) for message in messages))
            return len(messages)

        rows: list[tuple[str, int, float, dict[str, float]]] = []
        for name, call in (
            ("insert", insert),
            ("read", read),
            ("replace", replace),
            ("transaction", transact),
            ("put", put),
            ("take", take),
        ):
            if name == "read":
                inserted = len(etags)
            # Puts stop at `messages`: Azurite's queue calls cost more the more messages it holds (in any queue),
            # and the takes then drain them.
            rows.append(await timed(name, seconds, concurrency, call, pids, most=messages if name == "put" else None))
        azurite_ms: dict[str, float] = {}
        both_ms: dict[str, float] = {}  # Azurite's and this client's CPU
        for name, calls, elapsed, cpu in rows:
            spent = sum(v for k, v in cpu.items() if k.startswith("azurite"))
            azurite_ms[name] = spent / max(calls, 1) * 1000
            client_ms = cpu["client"] / max(calls, 1) * 1000
            both_ms[name] = azurite_ms[name] + client_ms
            print(
                f"{name:>15}: {calls / elapsed:7.0f} a second ({calls} in {elapsed:.1f} s, {concurrency} at once); "
                f"Azurite {azurite_ms[name]:.2f} ms CPU a call, this client {client_ms:.2f}",
                flush=True,
            )
        floor = sum(azurite_ms[kind] * count for kind, count in MINIMAL_LIFECYCLE.items())
        with_client = sum(both_ms[kind] * count for kind, count in MINIMAL_LIFECYCLE.items())
        print(
            f"fewest calls a lifecycle needs: {MINIMAL_CALLS} and shares of receives; Azurite's CPU for them "
            f"{floor:.1f} ms (at most {2000 / floor:.0f} lifecycles/s on 2 cores with nothing else running); "
            f"with the calling side's CPU for the same calls {with_client:.1f} ms (at most "
            f"{2000 / with_client:.0f}/s, before the API's own work: HTTP, Hawk, schemas)",
            flush=True,
        )
    finally:
        await tables.close()
        await queues.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--messages",
        type=int,
        default=1000,
        help="messages put (and then taken): what the queue holds while they are taken",
    )
    args = parser.parse_args()
    store = azurite.start(Path(tempfile.mkdtemp(prefix="bench-azurite-")), in_memory=True)
    try:
        return asyncio.run(measure(store, args.seconds, args.concurrency, args.messages))
    finally:
        store.stop()


if __name__ == "__main__":
    sys.exit(main())
