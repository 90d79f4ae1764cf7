"""The monitoring routes every service of a Taskcluster deployment answers (`ping`, and Dockerflow's
`__heartbeat__`, `__lbheartbeat__` and `__version__`), registered on each API's route table; the Dockerflow three
are also answered at the root (`root_document`)."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from shared import errors
from shared.api.framework import error_response, json_response
from shared.api.routing import Api, Call
from shared.settings import get_settings
from shared.settings.fitness import check_serving
from shared.version import version_object

STARTED = time.monotonic()


async def ping(call: Call[Any]) -> dict[str, Any]:
    """Respond without doing anything: the service is up."""
    return {"alive": True, "uptime": round(time.monotonic() - STARTED, 3)}


async def heartbeat(call: Call[Any]) -> dict[str, Any]:
    """Healthy when the settings are fit to serve: a setting that still holds an unresolved Key Vault reference
    (or any other settings problem) answers 500 with the problem, until it resolves (a health probe's target)."""
    check_serving(get_settings())
    return {}


async def lbheartbeat(call: Call[Any]) -> dict[str, Any]:
    """The process answers HTTP (a load balancer's probe): nothing is checked."""
    return {}


async def version(call: Call[Any]) -> dict[str, Any]:
    """The running release: Dockerflow's `source`, `version`, `commit` and `build` (shared/version.py)."""
    return version_object()


def register(api: Api) -> None:
    api.route("GET", "/ping", name="ping", title="Ping Server", scopes=None)(ping)
    api.route("GET", "/__heartbeat__", name="heartbeat", title="Heartbeat", scopes=None)(heartbeat)
    api.route("GET", "/__lbheartbeat__", name="lbheartbeat", title="Load Balancer Heartbeat", scopes=None)(lbheartbeat)
    api.route("GET", "/__version__", name="version", title="Taskcluster Version", scopes=None)(version)


def root_document(request: Request) -> Response | None:
    """`<rootUrl>/__version__`, `/__heartbeat__` and `/__lbheartbeat__`, as a Dockerflow service answers them;
    None for any other path."""
    path = request.scope["path"]
    if path == "/__version__":
        return json_response(version_object())
    if path == "/__lbheartbeat__":
        return json_response({})
    if path == "/__heartbeat__":
        try:
            check_serving(get_settings())
        except errors.QueueError as problem:
            return error_response(problem, method="heartbeat", params={}, payload=None)
        return json_response({})
    return None
