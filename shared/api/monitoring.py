"""The monitoring routes every service of a Taskcluster deployment answers (`ping`, `__heartbeat__`), registered on
each API's route table."""

from __future__ import annotations

import time
from typing import Any

from shared.api.framework import Api, Call
from shared.settings import check_serving, get_settings

STARTED = time.monotonic()


async def ping(call: Call[Any]) -> dict[str, Any]:
    """Respond without doing anything: the service is up."""
    return {"alive": True, "uptime": round(time.monotonic() - STARTED, 3)}


async def heartbeat(call: Call[Any]) -> dict[str, Any]:
    """Healthy when the settings are fit to serve: a setting that still holds an unresolved Key Vault reference
    (or any other settings problem) answers 500 with the problem, until it resolves (a health probe's target)."""
    check_serving(get_settings())
    return {}


def register(api: Api) -> None:
    api.route("GET", "/ping", name="ping", title="Ping Server", scopes=None)(ping)
    api.route("GET", "/__heartbeat__", name="heartbeat", title="Heartbeat", scopes=None)(heartbeat)
