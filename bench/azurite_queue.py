"""How the cost of Azurite's queue operations grows with the messages it holds (in any queue).

    .venv/bin/python -m bench.azurite_queue

Puts N invisible messages in one queue, then times receives on that queue and deletes on another, nearly
empty queue. Starts and stops its own in-memory Azurite.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from local_host import azurite
from shared.storage.azure import AzureQueues


async def measure(connection_string: str, sizes: list[int]) -> None:
    queues = AzureQueues(connection_string)
    try:
        for n in sizes:
            held, other = f"bench-held-{n}", f"bench-other-{n}"
            await queues.ensure_queues([held, other])
            await asyncio.gather(*(queues.put(held, b"x", visible_in=3600) for _ in range(n)))
            started = time.perf_counter()
            for _ in range(50):
                await queues.receive(held, 32, 30)
            receive_ms = (time.perf_counter() - started) / 50 * 1000
            for _ in range(32):
                await queues.put(other, b"y")
            messages = await queues.receive(other, 32, 30)
            started = time.perf_counter()
            for message in messages:
                await queues.delete(other, message)
            delete_ms = (time.perf_counter() - started) / len(messages) * 1000
            print(
                f"{n:>6} invisible messages held: receive (nothing visible) {receive_ms:5.1f} ms, "
                f"delete in another queue {delete_ms:5.1f} ms",
                flush=True,
            )
    finally:
        await queues.close()


def main() -> int:
    store = azurite.start(Path(tempfile.mkdtemp(prefix="bench-azurite-")), in_memory=True)
    try:
        asyncio.run(measure(store.connection_string, [0, 2000, 8000]))
    finally:
        store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
