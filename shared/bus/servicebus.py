"""Azure Service Bus publisher: a topic per exchange (`<namespace>.v1.<exchange>`, e.g.
`taskcluster-queue.v1.task-completed`: Service Bus would take the exchange's slashes, but an ARM template cannot
declare a child resource whose name holds one, so the deployment could not create such topics), the routing key
as the message subject, each routing-key word and the CC routes as application properties (see
`shared/bus/bindings.py` for how a Pulse binding becomes a subscription rule), and the event's stream position
as the message id, so a topic with duplicate detection drops re-published events.

A sender per topic, shared by every publish to it: at most PUBLISHES_IN_FLIGHT publishes at once
(shared/bus/turns.py). A failed send closes its sender unless a later publish replaced it already, or it timed out
while others were confirmed (Service Bus is slow, not gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable
from typing import Any

from shared.bus.bindings import ROUTES_PROPERTY, routes_property, rule_name, subscription_filter
from shared.bus.turns import PUBLISHES_IN_FLIGHT, Turns
from shared.domain.events import Event, exchange_name
from shared.outbox.rows import PublishError


def topic_name(exchange: str, namespace: str) -> str:
    return exchange_name(exchange, namespace).removeprefix("exchange/").replace("/", ".")


def application_properties(event: Event, namespace: str) -> dict[str, str]:
    return {
        "exchange": exchange_name(event.exchange, namespace),
        "routingKey": event.routing_key,
        **event.words,
        ROUTES_PROPERTY: routes_property(event.cc),
    }


def to_message(event: Event, namespace: str) -> Any:
    """The ServiceBusMessage for an event."""
    from azure.servicebus import ServiceBusMessage

    return ServiceBusMessage(
        json.dumps(event.payload, separators=(",", ":")),
        content_type="application/json",
        subject=event.routing_key,
        message_id=event.message_id or None,
        application_properties=application_properties(event, namespace),  # type: ignore[arg-type]
    )


class ServiceBusPublisher:
    """Publishes through an `azure.servicebus.aio.ServiceBusClient` (or anything with its `get_topic_sender`)."""

    def __init__(
        self, client: Any, *, namespace: str, timeout: float = 10, in_flight: int = PUBLISHES_IN_FLIGHT
    ) -> None:
        self.client, self.namespace, self.timeout = client, namespace, timeout
        self.turns = Turns(in_flight)
        self._senders: dict[str, Any] = {}

    @classmethod
    def from_connection_string(
        cls, connection_string: str, *, namespace: str, timeout: float = 10
    ) -> ServiceBusPublisher:
        from azure.servicebus.aio import ServiceBusClient

        return cls(ServiceBusClient.from_connection_string(connection_string), namespace=namespace, timeout=timeout)

    @classmethod
    def from_identity(
        cls, fully_qualified_namespace: str, client_id: str | None, *, namespace: str, timeout: float = 10
    ) -> ServiceBusPublisher:
        """Connect with the managed identity (it needs the Azure Service Bus Data Sender role)."""
        from azure.servicebus.aio import ServiceBusClient

        from shared.connections import async_credential

        return cls(
            ServiceBusClient(fully_qualified_namespace, async_credential(client_id)),
            namespace=namespace,
            timeout=timeout,
        )

    async def prepare(self) -> None:
        """Nothing to declare: every topic exists from the deployment (infra/app/servicebus.bicep, whose list
        tests/habits/test_deploy.py keeps equal to the exchanges)."""

    async def publish(self, event: Event) -> None:
        from azure.servicebus.exceptions import ServiceBusError

        topic = topic_name(event.exchange, self.namespace)
        async with self.turns.turn() as started:
            sender = self._senders.get(topic)
            if sender is None:
                sender = self._senders[topic] = self.client.get_topic_sender(topic)
            try:
                await asyncio.wait_for(sender.send_messages(to_message(event, self.namespace)), self.timeout)
            except (TimeoutError, ServiceBusError, OSError) as exc:
                if self.turns.broken(exc, started) and self._senders.get(topic) is sender:
                    self._senders.pop(topic)
                    await _close_quietly(sender)
                raise PublishError(f"Service Bus send to {topic} failed: {exc!r}") from exc
            self.turns.confirmed()

    async def close(self) -> None:
        for sender in self._senders.values():
            await _close_quietly(sender)
        self._senders.clear()
        await _close_quietly(self.client)


async def _close_quietly(closable: Any) -> None:
    with contextlib.suppress(Exception):  # a sender that failed may fail to close too
        await closable.close()


def subscription_rules(bindings: Iterable[tuple[str, str]], namespace: str) -> dict[str, list[tuple[str, str]]]:
    """For Pulse bindings `(exchange, pattern)`: per topic, the `(rule name, SQL filter)` rules of one
    subscription that receives what those bindings would (rules of a subscription are OR-ed)."""
    rules: dict[str, list[tuple[str, str]]] = {}
    for exchange, pattern in bindings:
        rules.setdefault(topic_name(exchange, namespace), []).append(
            (rule_name(pattern), subscription_filter(pattern, exchange))
        )
    return rules


def ensure_subscription(admin: Any, subscription: str, bindings: Iterable[tuple[str, str]], *, namespace: str) -> None:
    """Create (or reset) `subscription` on each bound topic with one SQL rule per binding, using an
    `azure.servicebus.management.ServiceBusAdministrationClient`."""
    from azure.core.exceptions import ResourceExistsError
    from azure.servicebus.management import SqlRuleFilter

    for topic, rules in subscription_rules(bindings, namespace).items():
        with contextlib.suppress(ResourceExistsError):
            admin.create_subscription(topic, subscription)
        for existing in list(admin.list_rules(topic, subscription)):
            admin.delete_rule(topic, subscription, existing.name)  # including $Default, which accepts all
        for name, sql in rules:
            admin.create_rule(topic, subscription, name, filter=SqlRuleFilter(sql))
