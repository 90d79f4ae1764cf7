"""AMQP 0-9-1 publisher, as Taskcluster publishes to Pulse: durable topic exchanges named
`exchange/<namespace>/v1/<exchange>`, persistent JSON messages, publisher confirms, and the task's routes in the
`CC` header (RabbitMQ's sender-selected distribution), so existing Pulse consumers bind exactly as before.

Every exchange is declared as soon as a connection is made (`prepare` at a host's start, and after every
reconnect), as Taskcluster's publisher asserts its exchanges when it connects: a consumer can bind to any of them
on a broker, or a vhost, this queue never published to, before the first event of that kind.

One connection and channel per process, shared by every publish: at most PUBLISHES_IN_FLIGHT of them at once
(shared/bus/turns.py). A publish that fails drops the connection it used, not the one a later publish opened
since; and one that timed out while the broker confirmed others keeps it (the broker is slow, not gone).
"""

from __future__ import annotations

import asyncio
import json
import logging

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange

from shared.bus.turns import PUBLISHES_IN_FLIGHT, Turns
from shared.domain.events import EXCHANGES, Event, exchange_name
from shared.outbox.rows import PublishError

log = logging.getLogger("queue.events.amqp")

# What a broker that is gone, slow or refusing raises (ChannelInvalidStateError, a RuntimeError: the channel was
# closed under the call).
BROKER_FAILURES = (
    TimeoutError,
    aio_pika.exceptions.AMQPError,
    aio_pika.exceptions.ChannelInvalidStateError,
    OSError,
    ConnectionError,
)


class AmqpPublisher:
    def __init__(self, url: str, *, namespace: str, timeout: float = 10, in_flight: int = PUBLISHES_IN_FLIGHT) -> None:
        self.url, self.namespace, self.timeout = url, namespace, timeout
        self.turns = Turns(in_flight)
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._exchanges: dict[str, AbstractExchange] = {}
        self._lock = asyncio.Lock()

    async def _exchange(self, exchange: str, using: list[AbstractChannel]) -> AbstractExchange:
        """The exchange on the current channel (connecting first if there is none); `using` gets the channel."""
        async with self._lock:
            if self._channel is None or self._channel.is_closed:
                await self._connect()
            assert self._channel is not None
            using.append(self._channel)
            found = self._exchanges.get(exchange)
            if found is None:
                found = self._exchanges[exchange] = await self._declare(self._channel, exchange)
            return found

    async def _connect(self) -> None:
        """A new connection and channel, with every exchange declared; none kept if any step fails."""
        await self._reset()
        try:
            self._connection = await aio_pika.connect(self.url, timeout=self.timeout)
            # Confirms: publish() returns once the broker has taken responsibility for the message.
            self._channel = await self._connection.channel(publisher_confirms=True)
            for each in EXCHANGES:
                self._exchanges[each] = await self._declare(self._channel, each)
        except BaseException:
            await self._reset()
            raise

    async def _declare(self, channel: AbstractChannel, exchange: str) -> AbstractExchange:
        """Durable topic exchanges, as Taskcluster's (`assertExchange(..., 'topic', {durable: true})`)."""
        return await channel.declare_exchange(
            exchange_name(exchange, self.namespace), aio_pika.ExchangeType.TOPIC, durable=True, timeout=self.timeout
        )

    async def prepare(self) -> None:
        """Connect, if not connected, which declares every exchange; PublishError if the broker cannot be reached."""
        try:
            await self._exchange(next(iter(EXCHANGES)), [])
        except BROKER_FAILURES as exc:  # a failed connect kept nothing (`_connect`)
            raise PublishError(f"AMQP exchanges could not be declared: {exc!r}") from exc

    async def publish(self, event: Event) -> None:
        message = aio_pika.Message(
            json.dumps(event.payload, separators=(",", ":")).encode(),
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            message_id=event.message_id or None,
            headers={"CC": list(event.cc)} if event.cc else None,
        )
        using: list[AbstractChannel] = []
        async with self.turns.turn() as started:
            try:
                exchange = await self._exchange(event.exchange, using)
                # mandatory=False: an exchange nobody is bound to is normal, as on Pulse.
                await exchange.publish(message, event.routing_key, mandatory=False, timeout=self.timeout)
            except BROKER_FAILURES as exc:
                if self.turns.broken(exc, started):
                    await self._drop(using[0] if using else None)
                raise PublishError(f"AMQP publish to {event.exchange} failed: {exc!r}") from exc
            self.turns.confirmed()

    async def _drop(self, channel: AbstractChannel | None) -> None:
        """Close the connection of `channel` (None: of the current one), unless another publish already replaced
        it: the first of many publishes failing together reconnects; the others leave the new connection be."""
        async with self._lock:
            if channel is None or channel is self._channel:
                await self._reset()

    async def _reset(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        self._exchanges.clear()
        if connection is not None and not connection.is_closed:
            try:
                await asyncio.wait_for(connection.close(), self.timeout)
            except Exception:  # closing a broken connection: nothing to save
                log.debug("closing a broken AMQP connection failed", exc_info=True)

    async def close(self) -> None:
        async with self._lock:
            await self._reset()
