"""The HTTP API as one function, served through Azure Functions' HTTP streams.

Behind `func.AsgiFunctionApp` the Functions host hands the Python worker a request's body whole, in one message,
and refuses one over 100 MB: an `s3` artifact's PUT of a few GB could not pass. With HTTP streams
(`azurefunctions-extensions-http-fastapi`, Functions runtime 4.34.1 or later, app setting
`PYTHON_ENABLE_INIT_INDEXING=1`) the host proxies each request to a web server inside the worker and the function
gets a Starlette request whose body arrives in chunks as the client sends it; `FUNCTIONS_REQUEST_BODY_SIZE_LIMIT`
sets the largest. The function answers with `ApiAnswer`, which runs the ASGI API as the answer is sent, so
neither the body nor the answer is ever held whole. The local host calls this same function the same way
(local_host/functions_worker.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import azure.functions as func
from azurefunctions.extensions.http.fastapi import Request, Response
from starlette.responses import Response as StarletteResponse

from shared.api.app import create_asgi_app
from shared.settings import get_settings

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

bp = func.Blueprint()  # type: ignore[no-untyped-call]
API = create_asgi_app()
# The header the Functions host adds to every request it proxies to the worker (its invocation id).
PROXIED = b"x-ms-invocation-id"
ALL_METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"]


@bp.function_name("http_app_func")
@bp.route(route="/{*route}", methods=ALL_METHODS, auth_level=func.AuthLevel.ANONYMOUS)
async def http_app_func(req: Request) -> Response:
    return ApiAnswer(API, client_view(dict(req.scope), lambda: get_settings().public_root_url))


class ApiAnswer(StarletteResponse):
    """The API's answer to one request, made as the worker's web server sends it: the ASGI app runs then, with the
    server's own `receive` and `send`, so the body is read as the client sends it and the answer written as it is
    made, with nothing copied or queued between (a task and a queue per request cost 0.25 ms of CPU and delayed
    each answer behind the work the app left running after it). What the app raises, the server answers 500."""

    def __init__(self, app: ASGIApp, scope: dict[str, Any]) -> None:
        super().__init__()
        self.app, self.app_scope = app, scope

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        await self.app(self.app_scope, receive, send)


def client_view(scope: dict[str, Any], root_url: Callable[[], str]) -> dict[str, Any]:
    """The request's scope as its client sent it. Proxied by the Functions host (YARP's default transforms), the
    request carries the worker's own address as `Host` and the client's in `X-Forwarded-Host`/`-Proto`; a Hawk
    MAC covers the host and port the client signed, so they are put back: the client's host, and for the
    deployment's own host name, the scheme and port of its public rootUrl (the host may see plain http behind
    the front end that ended TLS)."""
    headers = {k.lower(): v for k, v in scope["headers"]}
    if PROXIED not in headers or b"x-forwarded-host" not in headers:
        return asgi_only(scope)
    host = headers[b"x-forwarded-host"].split(b",")[0].strip().decode("latin-1")
    proto = headers.get(b"x-forwarded-proto", b"http").split(b",")[0].strip().decode("latin-1")
    public = urlsplit(root_url())
    if host.lower() == (public.hostname or "").lower():
        host, proto = public.netloc, public.scheme
    moved = (b"host", b"x-forwarded-host", b"x-forwarded-proto")
    kept = [(k, v) for k, v in scope["headers"] if k.lower() not in moved]
    return {
        **asgi_only(scope),
        "scheme": proto,
        "headers": [(b"host", host.encode("latin-1")), (b"x-forwarded-proto", proto.encode("latin-1")), *kept],
    }


ASGI_KEYS = frozenset(
    {
        *("type", "asgi", "http_version", "method", "scheme", "path", "raw_path", "root_path", "query_string"),
        *("headers", "client", "server", "state", "extensions"),
    }
)


def asgi_only(scope: dict[str, Any]) -> dict[str, Any]:
    """The scope without what the worker's web framework added to it (its app, router, route and parameters)."""
    return {k: v for k, v in scope.items() if k in ASGI_KEYS}
