"""The process-wide queue service and ASGI app, built from the settings on first use."""

from __future__ import annotations

import functools
from typing import Any

from shared import faults, telemetry
from shared.api.framework import ApiApp
from shared.api.queue_v1 import api as queue_v1
from shared.auth.clients import ClientStore
from shared.auth.hawk import Authenticator
from shared.bus import create_publisher
from shared.domain.eventlog import Publisher
from shared.service import QueueService
from shared.settings import get_settings
from shared.storage import queue_store, table_store
from shared.storage.azure import AzureBlobs


@functools.cache
def get_service() -> QueueService:
    settings = get_settings()
    faults.arm(settings.faults)
    connection, client = settings.storage_connection, settings.storage_client
    return QueueService(settings, table_store(connection, client), queue_store(connection, client),
                        AzureBlobs(settings.artifact_connection))


@functools.cache
def get_publisher() -> Publisher | None:
    """The event bus publisher (connected on first publish), or None when no bus is configured."""
    return create_publisher(get_settings())


@functools.cache
def get_authenticator() -> Authenticator:
    settings = get_settings()
    clients = ClientStore(get_service().tables, token_secret=settings.token_secret,
                          root_client_id=settings.root_client_id, root_access_token=settings.root_access_token,
                          cache_seconds=settings.client_cache_seconds)
    return Authenticator(clients, settings.anonymous_scope_list, certificate_skew_seconds=settings.certificate_skew)


def create_asgi_app() -> Any:
    """The ASGI app serving every API route (traced when telemetry is on). Settings are read at the first
    request, not at import, so a missing setting shows as a clear error in the response and the logs rather
    than as a failed import."""
    return telemetry.instrument_asgi(
        ApiApp([queue_v1], get_service, get_authenticator, validate_responses=_validate_responses()))


def _validate_responses() -> bool:
    import os
    return os.environ.get("QUEUE_VALIDATE_RESPONSES", "").lower() in ("1", "true", "yes")
