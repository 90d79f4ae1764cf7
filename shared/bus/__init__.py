"""Event bus adapters behind `shared.outbox.rows.Publisher`: AMQP 0-9-1 (Pulse-style) and Azure Service Bus."""

from __future__ import annotations

from shared.outbox.rows import Publisher
from shared.settings import Settings

BUSES = ("none", "amqp", "servicebus")


def create_publisher(settings: Settings) -> Publisher | None:
    """The publisher the settings name; None when no bus is configured (events are recorded, not published)."""
    if settings.event_bus == "amqp":
        from shared.bus.amqp import AmqpPublisher

        return AmqpPublisher(
            settings.amqp_url, namespace=settings.pulse_namespace, timeout=settings.event_publish_timeout
        )
    if settings.event_bus == "servicebus":
        from shared.bus.servicebus import ServiceBusPublisher

        if settings.servicebus_connection:
            return ServiceBusPublisher.from_connection_string(
                settings.servicebus_connection,
                namespace=settings.pulse_namespace,
                timeout=settings.event_publish_timeout,
            )
        assert settings.servicebus_namespace is not None  # checked by Settings
        return ServiceBusPublisher.from_identity(
            settings.servicebus_namespace,
            settings.storage_client_id,
            namespace=settings.pulse_namespace,
            timeout=settings.event_publish_timeout,
        )
    return None
