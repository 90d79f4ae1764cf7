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

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

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
READ_SECONDS = 60.0  # between two chunks of its answer
# `Expect: 100-continue` is answered by this app's server, not passed on to wait for a service's.
NOT_PASSED_ON = HOP_BY_HOP | {"expect"}


class ServiceUnreachable(errors.ServiceUnavailable):
    """The `{service}` service of this rootUrl did not answer: {problem}"""


class CallerBusy(errors.ServiceUnavailable):
    """This address has {count} requests to the services this rootUrl forwards under way already, the most it may
    have at once: retry when one has ended"""


@dataclass(frozen=True)
class Forwarding:
    """What is forwarded where (service -> base URL), and the bounds: `deadline` seconds an exchange may take in
    all, `pool` connections to one service at once, `per_caller` requests of one caller address under way."""

    services: Mapping[str, str]
    deadline: float = 120.0
    pool: int = 32
    per_caller: int = 8


class Forwarder:
    """ASGI middleware: a request for a forwarded service goes to its base URL; every other to `app`.

    Each service has a pool of its own, each caller address a share of requests in flight, and every exchange a
    deadline (`Forwarding`); an exchange whose caller left is abandoned, so a service that trickles its answers
    holds nothing of this app's once its callers are gone."""

    def __init__(self, app: ASGIApp, config: Callable[[], Forwarding]) -> None:
        self.app = app
        self.config = config  # read at each request (settings are read at the first, not at import)
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._callers: dict[str, int] = {}  # address -> forwarded requests under way (no entry at 0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _raw_path(scope).startswith(b"/"):
            problem = BadRequestTarget(problem="only a path starting with `/` is served (origin-form)")
            await _answer(problem, scope, receive, send)
            return
        base = self._base_for(scope)
        if base is None:
            await self.app(scope, receive, send)
            return
        caller = caller_address(scope)
        count = self._callers.get(caller, 0)
        if count >= self.config().per_caller:
            await _answer(CallerBusy(count=count, retry_after=1), scope, receive, send)
            return
        self._callers[caller] = count + 1
        try:
            await self._forward(scope, receive, send, *base)
        finally:
            left = self._callers.pop(caller) - 1
            if left:
                self._callers[caller] = left

    def _base_for(self, scope: Scope) -> tuple[str, str] | None:
        """The service a request names in its path as sent, and that service's base, if it is forwarded."""
        if scope["type"] != "http":
            return None
        service = forwarded_service(_raw_path(scope))
        services = self.config().services if service else None
        base = services.get(service) if services and service else None
        return (service, base) if service and base else None

    def _client(self, service: str) -> aiohttp.ClientSession:
        """The service's own pool: a service that holds its connections does not take another's."""
        session = self._sessions.get(service)
        if session is None or session.closed:
            config = self.config()
            session = self._sessions[service] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=config.pool, limit_per_host=config.pool),
                auto_decompress=False,  # answers pass as they came, Content-Encoding and all
                timeout=aiohttp.ClientTimeout(
                    total=config.deadline,
                    sock_connect=min(CONNECT_SECONDS, config.deadline),
                    sock_read=min(READ_SECONDS, config.deadline),
                ),
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
            )
        return session

    async def _forward(self, scope: Scope, receive: Receive, send: Send, service: str, base: str) -> None:
        try:
            target = target_url(yarl.URL(base, encoded=True), _raw_path(scope), scope.get("query_string") or b"")
        except BadRequestTarget as refused:
            await _answer(refused, scope, receive, send)
            return
        body_read = asyncio.Event()
        exchange = asyncio.ensure_future(self._exchange(scope, receive, send, service, target, body_read))
        gone = asyncio.ensure_future(_caller_gone(receive, body_read))
        try:
            await asyncio.wait({exchange, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not exchange.done():  # the caller left: the service's answer is read no further
                log.info("forwarding to %s abandoned: its caller left", service)
                exchange.cancel()
            gone.cancel()
            await asyncio.gather(exchange, gone, return_exceptions=True)
        if not exchange.cancelled() and exchange.exception() is not None:
            raise exchange.exception()  # type: ignore[misc]

    async def _exchange(
        self, scope: Scope, receive: Receive, send: Send, service: str, target: yarl.URL, body_read: asyncio.Event
    ) -> None:
        method = scope["method"]
        has_body = method not in ("GET", "HEAD", "OPTIONS")
        if not has_body:
            body_read.set()
        started = False
        try:
            async with self._client(service).request(
                method,
                target,  # the path and query as the caller sent them: Hawk signed these very bytes
                headers=forwarded_headers(scope),
                data=_request_body(receive, body_read) if has_body else None,
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
        for session in list(self._sessions.values()):
            await session.close()
        self._sessions.clear()


async def _caller_gone(receive: Receive, body_read: asyncio.Event) -> None:
    """Returns when the caller has gone (the server's `http.disconnect`), once its body was read whole."""
    await body_read.wait()
    while (await receive())["type"] != "http.disconnect":  # noqa: ASYNC110 - the server offers no event
        await asyncio.sleep(0.1)  # a server that answers again at once (none should, once the body is over)


def caller_address(scope: Scope) -> str:
    """Who a request comes from, for its share: the address the Functions host's proxy puts in
    `X-Forwarded-For` (set by it, not the client's: local_host/functions_worker.py), else the peer's."""
    for name, value in scope.get("headers") or ():
        if name.lower() == b"x-forwarded-for":
            return str(value.decode("latin-1")).split(",")[-1].strip()[:64]
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


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
    headers dropped, and the scheme and port the caller used, the address it came from. Its framing is the one
    the server read the body by: `Content-Length` only when the caller sent no `Transfer-Encoding` (with both, the
    body is chunked and the length a lie the service would wait for); otherwise chunked anew."""
    headers: dict[str, str] = {}
    given = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope.get("headers") or ()]
    chunked = any(name == "transfer-encoding" for name, _ in given)
    for name, value in given:
        if name in NOT_PASSED_ON or (chunked and name == "content-length"):
            continue
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


async def _request_body(receive: Receive, read: asyncio.Event) -> AsyncIterator[bytes]:
    """The request body as it arrives, chunk by chunk (never held whole); `read` is set once it is over."""
    try:
        while True:
            message: Message = await receive()
            if message["type"] == "http.disconnect":
                raise ConnectionResetError("the caller left before its body was sent")
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return
    finally:
        read.set()
