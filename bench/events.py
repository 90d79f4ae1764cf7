"""Benchmark of event delivery to RabbitMQ: how many events per second the dispatcher publishes, and how long
after its change an event arrives.

    .venv/bin/python -m bench.events --tasks 1000      # embedded Azurite + local host, RabbitMQ on 127.0.0.1:5672

Creates tasks from 8 threads (each createTask records task-defined and task-pending), while a consumer bound
with `#` counts what arrives. Prints the creation rate, the delivery rate over the whole run (first create to
last event), and the lag from a createTask's answer to its task-pending's arrival.

    .venv/bin/python -m bench.events --tasks 1000 --backlog

With `--backlog` the host reaches the broker through a proxy that is cut while the tasks are created; the
figure is then how fast the dispatcher drains the backlog once the broker is back (nothing else running).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
import time
import uuid
from typing import Any

import aio_pika
import taskcluster

from bench.lifecycle import definition, percentile, run_threads, start_embedded, stop_all
from shared.domain.events import exchange_name

AMQP_URL = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


class Counter:
    """Consumes `exchange/<namespace>/v1/{task-defined,task-pending}` with `#`; arrival time per message."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.arrivals: dict[tuple[str, str], float] = {}
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)

    async def _start(self) -> None:
        self.connection = await aio_pika.connect(AMQP_URL)
        channel = await self.connection.channel()
        await channel.set_qos(prefetch_count=1000)
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        for name in ("task-defined", "task-pending"):
            exchange = await channel.declare_exchange(
                exchange_name(name, self.namespace), aio_pika.ExchangeType.TOPIC, durable=True
            )
            await queue.bind(exchange, "#")

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            task_id = json.loads(message.body)["status"]["taskId"]
            with self.lock:
                self.arrivals[((message.exchange or "").rsplit("/", 1)[1], task_id)] = time.perf_counter()
            await message.ack()

        await queue.consume(on_message)

    def count(self) -> int:
        with self.lock:
            return len(self.arrivals)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.connection.close(), self.loop).result(10)
        for name in ("task-defined", "task-pending"):
            asyncio.run_coroutine_threadsafe(self._delete(name), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)

    async def _delete(self, name: str) -> None:
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            await channel.exchange_delete(exchange_name(name, self.namespace))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the last event")
    parser.add_argument(
        "--backlog", action="store_true", help="create while the broker is unreachable, then measure the drain"
    )
    args = parser.parse_args()
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    processes: list[Any] = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    proxy = None
    if args.backlog:
        from tests.amqp import TcpProxy

        proxy = TcpProxy()
        proxy.cut()
    os.environ.update(
        {
            "QUEUE_EVENT_BUS": "amqp",
            "QUEUE_AMQP_URL": proxy.url if proxy else AMQP_URL,
            "QUEUE_PULSE_NAMESPACE": namespace,
            "QUEUE_EVENT_RETRY_MAX_DELAY": "1",
        }
    )
    counter = Counter(namespace)
    try:
        root_url, creds, _ = start_embedded(processes)
        tq = f"bench/events-{uuid.uuid4().hex[:8]}"
        answered: dict[str, float] = {}
        lock = threading.Lock()
        per_thread = args.tasks // args.threads

        def creator(i: int) -> None:
            queue = taskcluster.Queue({"rootUrl": root_url, "credentials": creds})
            for _ in range(per_thread):
                task_id = taskcluster.slugId()
                queue.createTask(task_id, definition(tq))
                with lock:
                    answered[task_id] = time.perf_counter()

        started = time.perf_counter()
        created_in = run_threads(args.threads, creator)
        expected = 2 * len(answered)
        if proxy is not None:
            time.sleep(2)  # every dispatch request has failed once and waits
            assert counter.count() == 0, "events got through the cut proxy"
            proxy.restore()
            started = time.perf_counter()
        give_up = time.monotonic() + args.timeout
        last_report = time.monotonic()
        while counter.count() < expected and time.monotonic() < give_up:
            time.sleep(0.2)
            if time.monotonic() - last_report > 5:
                print(f"  ... {counter.count()}/{expected} events delivered", flush=True)
                last_report = time.monotonic()
        delivered = counter.count()
        with counter.lock:
            last = max(counter.arrivals.values(), default=started)
            lags = [
                (counter.arrivals[("task-pending", t)] - at) * 1000
                for t, at in answered.items()
                if ("task-pending", t) in counter.arrivals
            ]
        label = "events (backlog drained after the broker came back)" if proxy else "events"
        print(
            f"{label}: {len(answered)} tasks created in {created_in:.1f} s ({len(answered) / created_in:.0f}/s); "
            f"{delivered}/{expected} events delivered in {last - started:.1f} s "
            f"({delivered / max(last - started, 1e-9):.0f} events/s); task-pending arrives after createTask "
            f"answered: p50 {percentile(lags, 0.5):.0f} ms, p95 {percentile(lags, 0.95):.0f} ms, "
            f"max {max(lags, default=float('nan')):.0f} ms",
            flush=True,
        )
        return 0 if delivered >= expected else 1
    finally:
        stop_all(processes)
        counter.close()
        if proxy is not None:
            proxy.close()


if __name__ == "__main__":
    sys.exit(main())
