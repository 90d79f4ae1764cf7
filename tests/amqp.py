"""Test helpers for the AMQP event bus: a consumer bound with Pulse-style patterns, and a TCP proxy that can cut
the connection to the broker ("the broker is down"), each running an event loop on its own thread."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import aio_pika

from shared.domain.events import exchange_name

AMQP_HOST, AMQP_PORT = "127.0.0.1", 5672
AMQP_URL = os.environ.get("TEST_AMQP_URL", f"amqp://guest:guest@{AMQP_HOST}:{AMQP_PORT}/")


def broker_reachable() -> bool:
    with contextlib.suppress(OSError), socket.create_connection((AMQP_HOST, AMQP_PORT), timeout=2):
        return True
    return False


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


@dataclass(frozen=True)
class Received:
    exchange: str  # short name, e.g. task-defined
    routing_key: str
    payload: dict[str, Any]
    headers: dict[str, Any]
    message_id: str | None
    content_type: str | None
    persistent: bool

    @property
    def seq(self) -> int:
        return int((self.message_id or "0").rsplit("/", 1)[1])


class Listener:
    """An exclusive queue bound to `(exchange, pattern)` pairs of namespace `namespace`; collects what arrives.
    `declare=False` binds as a Pulse consumer does, to exchanges that must exist already (the broker refuses a
    binding to a missing one: 404 NOT_FOUND)."""

    def __init__(
        self, namespace: str, bindings: list[tuple[str, str]], *, url: str = AMQP_URL, declare: bool = True
    ) -> None:
        self.namespace, self.bindings, self.url, self.declare = namespace, bindings, url, declare
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._runner = _LoopThread()
        self._connection: Any = None
        self._runner.run(self._start())

    async def _start(self) -> None:
        self._connection = await aio_pika.connect(self.url)
        channel = await self._connection.channel()
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        prefix = exchange_name("", self.namespace)
        for exchange, pattern in self.bindings:
            name = exchange_name(exchange, self.namespace)
            if self.declare:
                await queue.bind(
                    await channel.declare_exchange(name, aio_pika.ExchangeType.TOPIC, durable=True), pattern
                )
            else:
                await queue.bind(name, pattern)

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                item = Received(
                    (message.exchange or "").removeprefix(prefix),
                    message.routing_key or "",
                    json.loads(message.body),
                    dict(message.headers or {}),
                    message.message_id,
                    message.content_type,
                    message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT,
                )
                with self._lock:
                    self.received.append(item)

        await queue.consume(on_message)

    def messages(self, predicate: Callable[[Received], bool] = lambda m: True) -> list[Received]:
        with self._lock:
            return [m for m in self.received if predicate(m)]

    def wait_for(
        self, count: int, predicate: Callable[[Received], bool] = lambda m: True, timeout: float = 20
    ) -> list[Received]:
        give_up = time.monotonic() + timeout
        while True:
            found = self.messages(predicate)
            if len(found) >= count:
                return found
            if time.monotonic() > give_up:
                raise AssertionError(f"{len(found)} of {count} messages within {timeout} s: {found}")
            time.sleep(0.05)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._runner.run(self._connection.close(), timeout=10)
        self._runner.stop()


def delete_exchanges(namespace: str, exchanges: list[str]) -> None:
    async def delete() -> None:
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            for exchange in exchanges:
                await channel.exchange_delete(exchange_name(exchange, namespace))

    asyncio.run(delete())


class TcpProxy:
    """Forwards 127.0.0.1:<port> to the broker; `cut()` closes the listener and every open connection,
    `restore()` listens again on the same port; `stall()` holds what the broker sends (its confirmations) on the
    connections open then, until `flow()` (later connections flow). `accepted` counts the connections made through
    it."""

    def __init__(self, upstream: tuple[str, int] = (AMQP_HOST, AMQP_PORT)) -> None:
        self.upstream = upstream
        self._runner = _LoopThread()
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing: list[asyncio.Event] = []  # one per connection
        self.accepted = 0
        self.port = 0
        self.restore()

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, flowing: asyncio.Event | None = None
    ) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                if flowing is not None:
                    await flowing.wait()
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self.accepted += 1
        flowing = asyncio.Event()
        flowing.set()
        self._flowing.append(flowing)
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer, flowing=flowing))
        self._writers.difference_update((writer, up_writer))

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self._runner.run(self._listen())

    def cut(self) -> None:
        self._runner.run(self._cut())

    def stall(self) -> None:
        for flowing in list(self._flowing):
            self._runner.loop.call_soon_threadsafe(flowing.clear)

    def flow(self) -> None:
        for flowing in list(self._flowing):
            self._runner.loop.call_soon_threadsafe(flowing.set)

    def close(self) -> None:
        self.cut()
        self._runner.stop()


@contextlib.contextmanager
def fresh_vhost() -> Iterator[str | None]:
    """A RabbitMQ vhost created for the test (guest may use it), deleted after: its AMQP URL; None where
    `rabbitmqctl` cannot be run here (a broker of another machine or user)."""
    name = f"test-{uuid.uuid4().hex[:10]}"

    def ctl(*args: str) -> bool:
        try:
            return subprocess.run(["rabbitmqctl", *args], capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    if not (ctl("add_vhost", name) and ctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")):
        ctl("delete_vhost", name)
        yield None
        return
    try:
        yield f"amqp://guest:guest@{AMQP_HOST}:{AMQP_PORT}/{name}"
    finally:
        ctl("delete_vhost", name)
