"""Where events are published (RabbitMQ, Service Bus or nowhere) and how the outbox dispatches them."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import AliasChoices, BaseModel, Field, model_validator


class EventSettings(BaseModel):
    event_bus: Literal["none", "amqp", "servicebus"] = Field(
        default="none",
        description="Where events are published: `amqp` (RabbitMQ / Pulse), `servicebus` (Azure "
        "Service Bus) or `none` (recorded and listed by the API, not published).",
    )
    amqp_url: str = Field(
        default="amqp://guest:guest@127.0.0.1:5672/", description="AMQP 0-9-1 broker URL (with `QUEUE_EVENT_BUS=amqp`)."
    )
    servicebus_connection: str | None = Field(
        default=None, description="Service Bus connection string (with `QUEUE_EVENT_BUS=servicebus`)."
    )
    servicebus_namespace: str | None = Field(
        default=None,
        validation_alias=AliasChoices("QUEUE_SERVICEBUS__fullyQualifiedNamespace", "servicebus_namespace"),
        description="Identity-based Service Bus connection (`QUEUE_SERVICEBUS__fullyQualifiedNamespace`, e.g. "
        "`<name>.servicebus.windows.net`), used with the managed identity of `QUEUE_STORAGE__clientId` when "
        "`QUEUE_SERVICEBUS_CONNECTION` is not set.",
    )
    pulse_namespace: str = Field(
        default="taskcluster-queue",
        pattern=r"^[a-z0-9][a-z0-9._-]*$",
        description="Exchange namespace: exchanges are `exchange/<this>/v1/<name>` "
        "(Service Bus topics `<this>/v1/<name>`).",
    )
    event_lease: float = Field(
        default=30,
        gt=0,
        description="Seconds a dispatcher holds a stream while publishing; one that dies is replaced after this.",
    )
    event_publish_timeout: float = Field(
        default=10,
        gt=0,
        description="Seconds to wait for the bus to confirm one message (keep it well under `event_lease`).",
    )
    event_mark_interval: float = Field(
        default=0.2,
        ge=0,
        description="Seconds between writes of a process's "
        "publication mark, which tells other processes that the events its writers "
        "published are published (shared/outbox/marks.py); another "
        "process's dispatch of the same stream waits about this long.",
    )
    event_retry_max_delay: int = Field(
        default=60,
        ge=1,
        description="Longest wait before dispatching again after the bus refused (the wait doubles from 1 s).",
    )

    @model_validator(mode="after")
    def _bus_configured(self) -> Self:
        if self.event_bus == "servicebus" and not (self.servicebus_connection or self.servicebus_namespace):
            raise ValueError(
                "QUEUE_SERVICEBUS_CONNECTION or QUEUE_SERVICEBUS__fullyQualifiedNamespace is required "
                "with QUEUE_EVENT_BUS=servicebus"
            )
        return self
