"""What a backlog costs Azurite's queue service: messages put and taken (received 32 at a time, each deleted) in
one queue while other messages wait in another, each backlog size after the one before (the backlogs add up).

    .venv/bin/python -m bench.azurite_backlog [--backlogs 0 2000 2000] [--messages 500] [--per-receive 32]
                                              [--in-memory]

Starts its own Azurite (data on disk, as `make run` keeps it, unless `--in-memory`) and prints, per backlog, the
CPU milliseconds Azurite's queue process spent per message put and per message taken. Azurite 3.37.0 as npm
ships it rebuilt the indices of all the messages it held on every queue call, so a take grew with the backlog
(1.0 ms with none, 9 ms with 4,000 waiting); `make setup` patches that (local_host/azurite-patches/README.md).
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
from shared.storage.rest import RestQueues

CONCURRENCY = 16


async def measure(store: azurite.Azurite, backlog: int, messages: int, per_receive: int = 32) -> None:
    queues = RestQueues(store.connection_string)
    pids = {"queue": [store.processes["queue"].pid]}
    limit = asyncio.Semaphore(CONCURRENCY)

    async def put(queue: str, i: int) -> None:
        async with limit:
            await queues.put(queue, b'{"taskId": "%d"}' % i)

    try:
        await queues.ensure_queues(["bench-backlog", "bench-work"])
        await asyncio.gather(*(put("bench-backlog", i) for i in range(backlog)))
        before = cpu_seconds(pids)
        started = time.perf_counter()
        await asyncio.gather(*(put("bench-work", i) for i in range(messages)))
        put_done = cpu_seconds(pids)
        taken = 0
        while taken < messages:
            received = await queues.receive("bench-work", per_receive, 30)
            await asyncio.gather(*(queues.delete("bench-work", message) for message in received))
            taken += len(received)
        elapsed = time.perf_counter() - started
        after = cpu_seconds(pids)
        print(
            f"{backlog} more waiting: {messages} messages put and taken in {elapsed:.1f} s; Azurite queue CPU "
            f"{(put_done['queue'] - before['queue']) / messages * 1000:.2f} ms per put, "
            f"{(after['queue'] - put_done['queue']) / messages * 1000:.2f} ms per take",
            flush=True,
        )
    finally:
        await queues.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--backlogs",
        type=int,
        nargs="+",
        default=[0, 2000, 2000],
        help="messages added to the waiting queue before each measurement",
    )
    parser.add_argument("--messages", type=int, default=500, help="messages put and taken per measurement")
    parser.add_argument(
        "--per-receive",
        type=int,
        default=32,
        help="messages asked for per receive (claimWork asks for its worker's capacity: often 1 to 4)",
    )
    parser.add_argument("--in-memory", action="store_true", help="Azurite without its data on disk")
    args = parser.parse_args()
    store = azurite.start(Path(tempfile.mkdtemp(prefix="bench-backlog-")), in_memory=args.in_memory)
    try:
        for backlog in args.backlogs:
            asyncio.run(measure(store, backlog, args.messages, args.per_receive))
    finally:
        store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
