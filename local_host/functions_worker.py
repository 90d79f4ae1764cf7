"""The two hops in front of the HTTP function on Azure, as the local host runs them.

On Azure a request goes through the platform's front end, then the Functions host, which (HTTP streams) proxies it
to a web server inside the Python worker, which calls the HTTP function with a Starlette request and sends back
the response the function returns. `WorkerWebApp` is that last hop: it finds the app's HTTP function and calls
it the same way, after rewriting the request's headers as the host's proxy does (YARP's default transforms:
the client's `Host` moved to `X-Forwarded-Host`, `X-Forwarded-Proto`/`-For` set, the invocation id added), so
the function's own code (functions/http_api.py) is what every local request runs through. `FrontEnd` is the
first hop's limits (local_host/front_end.py).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

log = logging.getLogger("local_host")
HttpFunction = Callable[[Request], Awaitable[Response]]
# What YARP's default transforms set (replacing what the client sent) or drop.
SET_BY_PROXY = (b"host", b"x-forwarded-host", b"x-forwarded-proto", b"x-forwarded-for", b"x-forwarded-prefix")


def http_function_of(functions: Iterable[Any]) -> HttpFunction:
    """The HTTP-triggered function (its user code) among the app's `functions`, as the worker indexes it."""
    for function in functions:
        if any(binding.type == "httpTrigger" for binding in function.get_bindings()):
            user_function: HttpFunction = function.get_user_function()
            return user_function
    raise TypeError("the function app has no HTTP-triggered function")


class WorkerWebApp:
    """ASGI: each request handed to the HTTP function as the Python worker hands it (HTTP streams), the
    function's response sent back; what the function raises answered 500, as the worker's web framework does."""

    def __init__(self, function: HttpFunction) -> None:
        self.function = function

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        proxied = proxy_hop(scope)
        try:
            response = await self.function(Request(proxied, receive, send))
        except Exception:
            log.exception("the HTTP function failed")
            response = PlainTextResponse("Internal Server Error", status_code=500)
        await response(proxied, receive, send)


def proxy_hop(scope: dict[str, Any]) -> dict[str, Any]:
    """`scope` as the Functions host's proxy forwards it to the worker."""
    headers = scope["headers"]
    host = next((v for k, v in headers if k.lower() == b"host"), None)
    server = scope.get("server") or ("127.0.0.1", 80)
    client = scope.get("client")
    added = [
        (b"host", f"{server[0]}:{server[1]}".encode()),
        (b"x-forwarded-proto", str(scope.get("scheme", "http")).encode()),
        (b"x-ms-invocation-id", str(uuid.uuid4()).encode()),
    ]
    if host is not None:
        added.append((b"x-forwarded-host", host))
    if client:
        added.append((b"x-forwarded-for", str(client[0]).encode()))
    kept = [(k, v) for k, v in headers if k.lower() not in SET_BY_PROXY and k.lower() != b"x-ms-invocation-id"]
    return {**scope, "headers": [*added, *kept]}
