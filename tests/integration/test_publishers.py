"""The AMQP publisher on the real RabbitMQ: a burst of publishes takes turns (at most `in_flight` awaiting the
broker's confirmation) and every event arrives once; a broker that stops confirming for longer than the publish
timeout costs one reconnect, not one per publish that was waiting (before, each timed-out publish closed whatever
connection was current, the one a later publish had just opened too)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator

import pytest

from shared.bus.amqp import AmqpPublisher
from shared.domain.events import Event
from shared.outbox.rows import PublishError
from tests.amqp import Listener, TcpProxy, broker_reachable, delete_exchanges

pytestmark = pytest.mark.skipif(
    not broker_reachable() and not os.environ.get("QUEUE_TEST_REQUIRE_BROKER"),
    reason="no AMQP broker on 127.0.0.1:5672",
)

NAMESPACE = f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module", autouse=True)
def _drop_exchanges() -> Iterator[None]:
    yield
    delete_exchanges(NAMESPACE, ["task-pending"])


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
