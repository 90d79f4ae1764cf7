"""The ASGI app serving every API route (the Queue, the Object service, the Auth service's, the Index,
Purge-cache), the
discovery documents and the web inspector, for
`func.AsgiFunctionApp` in Azure and uvicorn locally."""

from __future__ import annotations

import functools
import os
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from shared import telemetry
from shared.api import monitoring
from shared.api.auth_v1 import api as auth_v1
from shared.api.discovery import Discovery
from shared.api.forwarding import Forwarder, Forwarding
from shared.api.framework import ApiApp
from shared.api.index_v1 import api as index_v1
from shared.api.inspector import Inspector
from shared.api.object_v1 import api as object_v1
from shared.api.purge_cache_v1 import api as purge_cache_v1
from shared.api.queue_v1 import api as queue_v1
from shared.runtime import get_authenticator, get_queue
from shared.settings import get_settings

APIS = [queue_v1, object_v1, auth_v1, index_v1, purge_cache_v1]


def create_asgi_app() -> Any:
    """The app (traced when telemetry is on). The queue and its settings are built at the first request, not at
    import, so a missing setting shows as a clear error in the response and the logs rather than as a failed
    import."""
    validate = os.environ.get("QUEUE_VALIDATE_RESPONSES", "").lower() in ("1", "true", "yes")
    discovery = Discovery(
        APIS, root_url=lambda: get_settings().public_root_url, namespace=lambda: get_settings().pulse_namespace
    )
    inspector = Inspector(
        lambda: {
            "pushIndex": get_settings().inspector_push_index,
            "treeherder": get_settings().inspector_treeherder_url.rstrip("/"),
        }
    )

    def documents(request: Request) -> Response | None:
        return monitoring.root_document(request) or discovery(request) or inspector(request)

    api = ApiApp(APIS, get_queue, get_authenticator, validate_responses=validate, documents=documents)

    @functools.cache  # the settings are read once: so is what they say of forwarding
    def forwarding() -> Forwarding:
        settings = get_settings()
        return Forwarding(
            settings.forwarded_services,
            deadline=settings.forward_timeout,
            pool=settings.forward_connections,
            per_caller=settings.forward_per_caller,
        )

    return telemetry.instrument_asgi(Forwarder(api, forwarding))
