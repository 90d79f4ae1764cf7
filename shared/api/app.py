"""The ASGI app serving every API route, for `func.AsgiFunctionApp` in Azure and uvicorn locally."""

from __future__ import annotations

import os
from typing import Any

from shared import telemetry
from shared.api.framework import ApiApp
from shared.api.queue_v1 import api as queue_v1
from shared.runtime import get_authenticator, get_queue


def create_asgi_app() -> Any:
    """The app (traced when telemetry is on). The queue and its settings are built at the first request, not at
    import, so a missing setting shows as a clear error in the response and the logs rather than as a failed
    import."""
    validate = os.environ.get("QUEUE_VALIDATE_RESPONSES", "").lower() in ("1", "true", "yes")
    return telemetry.instrument_asgi(ApiApp([queue_v1], get_queue, get_authenticator, validate_responses=validate))
