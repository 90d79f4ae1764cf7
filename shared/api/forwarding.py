"""One rootUrl for a whole Taskcluster: requests for the services this app does not host (worker-manager, hooks,
secrets, github, notify, ...) are forwarded to where they run, as QUEUE_FORWARD_SERVICES names them, with their
bodies and answers streamed both ways.

Taskcluster's services check each request's Hawk signature against the host and port the caller signed (the
Host header and `X-Forwarded-Port`/`-Proto`) by asking this app's authenticateHawk, so the forwarded request
keeps the caller's Host header and says the scheme and port the caller used. Only `/api/<service>/`,
`/references/<service>/` and `/schemas/<service>/` are forwarded; the service must trust the forwarding
headers (Taskcluster's `TRUST_PROXY`). docs/services.md says how to run them beside the queue.

The target is the caller's path only, checked and joined to the service's base by parts
(shared/api/request_target.py): whatever a caller sends, the request goes to that base and under its path. A
request whose target is not a path (absolute-, authority- or asterisk-form) is refused whether forwarded or not.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping

import aiohttp
import yarl
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared import errors
from shared.api.framework import CORS_HEADERS, error_response
from shared.api.request_target import BadRequestTarget, forwarded_service, target_url

log = logging.getLogger("queue.forwarding")

# Hop-by-hop headers (RFC 9110 7.6.1) and what aiohttp sets itself: not passed on either way.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
CONNECT_SECONDS = 10.0  # to reach a forwarded service
READ_SECONDS = 300.0  # between two chunks of its answer (a long poll, a slow listing)


class ServiceUnreachable(errors.ServiceUnavailable):
    """The `{service}` service of this rootUrl did not answer: {problem}"""


class Forwarder:
    """ASGI middleware: a request for a forwarded service goes to its base URL; every other to `app`."""

    def __init__(self, app: ASGIApp, services: Callable[[], Mapping[str, str]]) -> None:
        self.app = app
        self.services = services  # read at each request (settings are read at the first, not at import)
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _raw_path(scope).startswith(b"/"):
            problem = BadRequestTarget(problem="only a path starting with `/` is served (origin-form)")
            await _answer(problem, scope, receive, send)
            return
        base = self._base_for(scope)
        if base is None:
            await self.app(scope, receive, send)
            return
        await self._forward(scope, receive, send, *base)

    def _base_for(self, scope: Scope) -> tuple[str, str] | None:
        """The service a request names in its path as sent, and that service's base, if it is forwarded."""
        if scope["type"] != "http":
            return None
        service = forwarded_service(_raw_path(scope))
        services = self.services() if service else None
        base = services.get(service) if services and service else None
        return (service, base) if service and base else None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                auto_decompress=False,  # answers pass as they came, Content-Encoding and all
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS, sock_read=READ_SECONDS),
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
            )
        return self._session

    async def _forward(self, scope: Scope, receive: Receive, send: Send, service: str, base: str) -> None:
        try:
            target = target_url(yarl.URL(base, encoded=True), _raw_path(scope), scope.get("query_string") or b"")
        except BadRequestTarget as refused:
            await _answer(refused, scope, receive, send)
            return
        method = scope["method"]
        body = _request_body(receive) if method not in ("GET", "HEAD", "OPTIONS") else None
        started = False
        try:
            async with self._client().request(
                method,
                target,  # the path and query as the caller sent them: Hawk signed these very bytes
                headers=forwarded_headers(scope),
                data=body,
                allow_redirects=False,
            ) as answer:
                head = [(k.lower(), v) for k, v in answer.raw_headers if k.decode("latin-1").lower() not in HOP_BY_HOP]
                await send({"type": "http.response.start", "status": answer.status, "headers": head})
                started = True
                async for chunk in answer.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.warning("forwarding to %s at %s failed: %s", service, target.origin(), exc)
            if started:  # cut short: the caller sees its answer end early (its length or chunking says so)
                raise
            # What went wrong, in words that name neither the service's address nor anything of its URL.
            problem = ServiceUnreachable(service=service, problem=_said(exc))
            await _answer(problem, scope, receive, send)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _raw_path(scope: Scope) -> bytes:
    raw = scope.get("raw_path")
    return raw if isinstance(raw, bytes) else str(scope.get("path") or "").encode()


def _said(exc: BaseException) -> str:
    """A forwarding failure, told to the caller: its kind only (the message of a connection error names the
    address, which the base URL keeps to the operator)."""
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return "it did not answer in time"
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionError):
        return "it could not be reached"
    return "the connection to it failed"


async def _answer(problem: errors.QueueError, scope: Scope, receive: Receive, send: Send) -> None:
    response = error_response(problem, method="unknown", params={}, payload=None)
    response.headers.update(CORS_HEADERS)
    await response(scope, receive, send)


def forwarded_headers(scope: Scope) -> dict[str, str]:
    """The request's headers as the service gets them: the caller's Host kept (Hawk signed it), hop-by-hop
    headers dropped, and the scheme and port the caller used, the address it came from."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers") or ():
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        if name not in HOP_BY_HOP:
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
    scheme = (headers.get("x-forwarded-proto") or str(scope.get("scheme") or "http")).split(",")[0].strip()
    host = headers.get("host", "")
    port = headers.get("x-forwarded-port") or _port_of(host) or ("443" if scheme == "https" else "80")
    client = scope.get("client")
    if client:
        prior = headers.get("x-forwarded-for")
        headers["x-forwarded-for"] = f"{prior}, {client[0]}" if prior else str(client[0])
    headers["x-forwarded-proto"] = scheme
    headers["x-forwarded-port"] = port.split(",")[0].strip()
    return headers


def _port_of(host: str) -> str | None:
    found = re.fullmatch(r"(?:\[[^\]]*\]|[^:]*):(\d+)", host)
    return found.group(1) if found else None


async def _request_body(receive: Receive) -> AsyncIterator[bytes]:
    """The request body as it arrives, chunk by chunk (never held whole)."""
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return
