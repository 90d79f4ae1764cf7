"""The AMQP publisher on the real RabbitMQ: a burst of publishes takes turns (at most `in_flight` awaiting the
broker's confirmation) and every event arrives once; a broker that stops confirming for longer than the publish
timeout costs one reconnect, not one per publish that was waiting (before, each timed-out publish closed whatever
connection was current, the one a later publish had just opened too)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator

import aio_pika
import pytest

from shared.bus.amqp import AmqpPublisher
from shared.domain.events import EXCHANGES, Event, exchange_name
from shared.outbox.rows import PublishError
from tests.amqp import AMQP_URL, Listener, TcpProxy, broker_reachable, delete_exchanges

pytestmark = pytest.mark.skipif(
    not broker_reachable() and not os.environ.get("QUEUE_TEST_REQUIRE_BROKER"),
    reason="no AMQP broker on 127.0.0.1:5672",
)

NAMESPACE = f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module", autouse=True)
def _drop_exchanges() -> Iterator[None]:
    yield
    delete_exchanges(NAMESPACE, list(EXCHANGES))  # a connection declares them all


def pending(i: int, run: str) -> Event:
    task_id = f"{run}{i:06d}"
    return Event("task-pending", f"{run}.{task_id}", {"taskId": task_id}, [], message_id=f"Tasks/{task_id}/1")


def test_a_burst_takes_turns_and_every_event_arrives_once() -> None:
    run = uuid.uuid4().hex[:8]
    listener = Listener(NAMESPACE, [("task-pending", f"{run}.#")])
    publisher = AmqpPublisher(f"amqp://guest:guest@127.0.0.1:{5672}/", namespace=NAMESPACE, timeout=30, in_flight=16)

    async def burst() -> None:
        try:
            await asyncio.gather(*(publisher.publish(pending(i, run)) for i in range(2000)))
        finally:
            await publisher.close()

    try:
        asyncio.run(burst())
        received = listener.wait_for(2000, timeout=60)
    finally:
        listener.close()
    assert publisher.turns.most == 16  # 2,000 started together, never more than 16 awaiting the broker
    assert publisher.turns.in_flight == 0
    ids = [m.message_id for m in received]
    assert len(ids) == len(set(ids)) == 2000


def test_a_connection_that_stops_confirming_costs_one_reconnect() -> None:
    proxy = TcpProxy()
    run = uuid.uuid4().hex[:8]
    listener = Listener(NAMESPACE, [("task-pending", f"{run}.#")])
    publisher = AmqpPublisher(proxy.url, namespace=NAMESPACE, timeout=1)

    async def scenario() -> list[BaseException | None]:
        await publisher.publish(pending(0, run))  # connected, the exchange declared
        proxy.stall()  # that connection's confirmations are held from now on
        # Publishes start one after another for 1.5 s: the first times out (nothing confirmed since it started)
        # and reconnects; those still waiting on the stalled connection then fail, and must leave the new one be.
        started = []
        for i in range(1, 301):
            started.append(asyncio.ensure_future(publisher.publish(pending(i, run))))
            await asyncio.sleep(0.005)
        outcomes = await asyncio.gather(*started, return_exceptions=True)
        await publisher.close()
        return outcomes

    try:
        outcomes = asyncio.run(scenario())
        failed = [o for o in outcomes if o is not None]
        assert all(isinstance(o, PublishError) for o in failed), failed[:3]  # never a raw channel error
        assert failed and len(failed) < len(outcomes)  # the stalled ones failed, those after the reconnect did not
        assert proxy.accepted == 2  # the first connection and one reconnect
        assert all(o is None for o in outcomes[-50:])
        listener.wait_for(1 + len(outcomes) - len(failed), timeout=30)
    finally:
        proxy.flow()
        listener.close()
        proxy.close()


async def exchanges_present(namespace: str) -> list[str]:
    """The queue's exchanges of `namespace` that exist on the broker (a passive declare each, on its own channel:
    a missing one closes the channel)."""
    connection = await aio_pika.connect(AMQP_URL)
    found = []
    async with connection:
        for exchange in EXCHANGES:
            channel = await connection.channel()
            with contextlib.suppress(aio_pika.exceptions.ChannelClosed):
                await channel.declare_exchange(exchange_name(exchange, namespace), passive=True)
                found.append(exchange)
    return found


def test_every_exchange_is_declared_when_connecting_and_again_after_a_reconnect() -> None:
    namespace = f"test-{uuid.uuid4().hex[:10]}"
    proxy = TcpProxy()
    publisher = AmqpPublisher(proxy.url, namespace=namespace, timeout=2)

    async def scenario() -> None:
        assert await exchanges_present(namespace) == []
        await publisher.prepare()
        assert await exchanges_present(namespace) == list(EXCHANGES)  # before any event
        # A broker that lost them (a new node, a reset), and the connection cut.
        await asyncio.to_thread(delete_exchanges, namespace, list(EXCHANGES))
        proxy.cut()
        proxy.restore()
        with contextlib.suppress(PublishError):  # the first publish may meet the cut connection
            await publisher.publish(pending(0, "again"))
        await publisher.publish(pending(1, "again"))  # connected anew
        assert await exchanges_present(namespace) == list(EXCHANGES)
        await publisher.close()

    try:
        asyncio.run(scenario())
        assert proxy.accepted == 2
    finally:
        proxy.close()
        delete_exchanges(namespace, list(EXCHANGES))


def test_prepare_says_when_the_broker_cannot_be_reached() -> None:
    proxy = TcpProxy()
    proxy.cut()
    publisher = AmqpPublisher(proxy.url, namespace=f"test-{uuid.uuid4().hex[:10]}", timeout=1)

    async def scenario() -> None:
        with pytest.raises(PublishError, match="exchanges could not be declared"):
            await publisher.prepare()
        await publisher.close()

    try:
        asyncio.run(scenario())
    finally:
        proxy.close()
