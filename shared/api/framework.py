"""A small API framework in Taskcluster's manner: declared routes, parameter patterns, schema-checked bodies,
scope templates, and errors in Taskcluster's format. It is plain ASGI (Starlette's Request/Response), so the
same app runs under `func.AsgiFunctionApp` in Azure and under uvicorn locally.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import re
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from shared import errors, metrics, roundtrips, strict_json, timeutil, validation
from shared.api.routing import (
    Api,
    Call,
    Reply,
    Route,
    check_params,
    check_query,
)
from shared.auth.authenticator import Authenticator, Caller
from shared.auth.authenticator import Request as AuthRequest

log = logging.getLogger("queue.api")

MAX_BODY_BYTES = 10 * 1024 * 1024  # Taskcluster's body-parser limit
MAX_HEAD_BYTES = 64 * 1024  # request line and headers; Hawk headers with temporary credentials can be large

# Taskcluster's API library answers every request so (and a preflight OPTIONS with 200): any origin may call the
# API from a browser, with credentials in the Authorization header (Hawk), not cookies.
CORS_HEADERS = {
    "access-control-allow-origin": "*",
    "access-control-max-age": "900",
    "access-control-allow-methods": "OPTIONS,GET,HEAD,POST,PUT,DELETE,TRACE,CONNECT",
    "access-control-request-method": "*",
    "access-control-allow-headers": "X-Requested-With,Content-Type,Authorization,Accept,Origin,Cache-Control",
}


async def _read_raw_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise errors.BodyTooLarge(size=int(declared), limit=MAX_BODY_BYTES)
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise errors.BodyTooLarge(size=f"more than {len(raw)}", limit=MAX_BODY_BYTES)
    return raw


class HeadTooLarge(errors.InvalidRequestArguments):
    """The request line and headers hold more than {limit} bytes"""


def _head_bytes(scope: Scope) -> int:
    """The size of the request's line and headers, about (what HTTP/1.1 sent)."""
    target = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
    return target + sum(len(name) + len(value) + 4 for name, value in scope.get("headers") or ())


class NotJsonContent(errors.MalformedPayload):
    """The request body must be JSON sent with `Content-Type: application/json`, not `{contentType}`"""


class JsonRefused(errors.InputValidationError):
    """The request body is not JSON this queue accepts: {problem}"""


def _parse_body(raw: bytes, route: Route, content_type: str) -> Any:
    if route.input is None:
        return None  # bodies of routes without input are ignored, as Taskcluster does
    if not raw.strip():
        body: Any = {}
    else:
        media = content_type.split(";", 1)[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            raise NotJsonContent(contentType=content_type or "(none)")
        try:
            body = strict_json.loads(raw)
        except strict_json.NotJson as exc:
            raise errors.MalformedPayload(error=str(exc)) from None
        except strict_json.JsonRefused as exc:
            raise JsonRefused(problem=str(exc)) from None
    problems = validation.errors_of(route.input, body, fill_defaults=True)
    if problems:
        raise errors.InputValidationError(
            "Request payload must match the schema {schema}:\n{problems}",
            schema=f"{route.input}.json#",
            problems="\n".join(f"* {p}" for p in problems),
        )
    return body


def _auth_request(request: Request, raw: bytes, path: str) -> AuthRequest:
    """The request as its client addressed it: Hawk MACs cover the scheme's port, host and raw path."""
    scope = request.scope
    scheme = request.headers.get("x-forwarded-proto", scope.get("scheme", "http")).split(",")[0].strip()
    host = request.headers.get("host") or "{}:{}".format(*scope.get("server") or ("localhost", 80))
    query = "?" + scope["query_string"].decode("latin-1") if scope.get("query_string") else ""
    return AuthRequest(
        method=request.method,
        url=f"{scheme}://{host}{path}{query}",
        authorization=request.headers.get("authorization"),
        content=raw,
        content_type=request.headers.get("content-type", ""),
    )


async def _authenticate(
    authenticator: Authenticator[Any], request: Request, raw: bytes, api: Api, route: Route, params: dict[str, str]
) -> Caller:
    """Authenticate with the raw path; failing that, with the path as the official clients write it (each
    parameter percent-encoded, `/` as `%2F`), since the Azure Functions ASGI adapter hands the app a decoded
    path as `raw_path`, which would fail the MAC of every request whose parameters hold an encoded character
    (artifact names). A request that fails both gets the first failure."""
    raw_path = (request.scope.get("raw_path") or request.scope["path"].encode()).decode("latin-1")
    try:
        return await authenticator.authenticate(_auth_request(request, raw, raw_path))
    except errors.AuthenticationFailed as first:
        failure = first
        canonical = api.prefix + re.sub(
            r"<([a-zA-Z]+)>", lambda m: urllib.parse.quote(params[m.group(1)], safe=""), route.path
        )
    if canonical != raw_path:
        with contextlib.suppress(errors.AuthenticationFailed):
            return await authenticator.authenticate(_auth_request(request, raw, canonical))
    raise failure


def error_body(exc: errors.QueueError, *, method: str, params: dict[str, str], payload: Any) -> dict[str, Any]:
    """Taskcluster's error format."""
    stamp = timeutil.iso(timeutil.now())
    message = (
        f"{exc.message}\n\n---\n\n* method:     {method}\n* errorCode:  {exc.code}\n"
        f"* statusCode: {exc.status}\n* time:       {stamp}"
    )
    return {
        "code": exc.code,
        "message": message,
        "requestInfo": {"method": method, "params": params, "payload": payload, "time": stamp},
    }


def error_response(exc: errors.QueueError, *, method: str, params: dict[str, str], payload: Any) -> Response:
    headers = {"www-authenticate": "hawk"} if exc.status == 401 else None
    if isinstance(exc, errors.ServiceUnavailable):
        headers = {"retry-after": str(exc.retry_after)}
    return json_response(error_body(exc, method=method, params=params, payload=payload), exc.status, headers)


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer that can always be rendered (shared/strict_json.py)."""
    return Response(strict_json.dumps(body), status_code=status, headers=headers, media_type="application/json")


Documents = Callable[[Request], Response | None]


class ApiApp:
    """The ASGI application serving one or more `Api` tables; `context` gives what handlers see as `call.context`,
    and `documents` answers a GET that no route matches (the references and schemas), or None."""

    def __init__(
        self,
        apis: list[Api],
        context: Callable[[], Any],
        authenticator: Callable[[], Authenticator[Any]],
        *,
        validate_responses: bool = False,
        documents: Documents | None = None,
    ) -> None:
        self.apis = apis
        self.context = context
        self.authenticator = authenticator
        self.validate_responses = validate_responses
        self.documents = documents

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        if _head_bytes(scope) > MAX_HEAD_BYTES:
            response = error_response(HeadTooLarge(limit=MAX_HEAD_BYTES), method="unknown", params={}, payload=None)
        elif request.method == "OPTIONS":
            response = Response(status_code=200)
        else:
            response = await self.handle(request)
        response.headers.update(CORS_HEADERS)
        await response(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def handle(self, request: Request) -> Response:
        with roundtrips.traced() as spans:
            response = await self._handle(request)
        answered = time.monotonic()  # work after the answer (tidying) is not on the request's path
        method = request.scope.get("queue.route", "unknown")
        metrics.API_REQUESTS.add(1, {"method": method, "status": response.status_code})
        sequential = roundtrips.sequential(spans, answered)
        metrics.STORAGE_ROUND_TRIPS.record(sequential, {"method": method})
        roundtrips.TALLY[method][sequential] += 1
        return response

    async def _handle(self, request: Request) -> Response:
        started = dt.datetime.now(dt.UTC)
        # The decoded path as the server gave it (request.url.path re-quotes `#` and `?` within a segment).
        method, path = request.method, request.scope["path"]
        found = next(
            ((api, match) for api in self.apis if (match := api.match("GET" if method == "HEAD" else method, path))),
            None,
        )
        if found is None:
            document = self.documents(request) if self.documents and method in ("GET", "HEAD") else None
            if document is not None:
                return document
            return error_response(
                errors.UnknownRoute(method=method, path=path), method="unknown", params={}, payload=None
            )
        api, (route, params) = found
        request.scope["queue.route"] = f"{api.service_name}.{route.name}"
        body: Any = None
        try:
            check_params(params)
            check_query(route, dict(request.query_params))
            raw = b"" if route.streamed else await _read_raw_body(request)

            async def authenticate_as(authenticator: Authenticator[Any]) -> Caller:
                return await _authenticate(authenticator, request, raw, api, route, params)

            authenticator = self.authenticator()
            caller = await authenticate_as(authenticator) if route.authenticated else authenticator.anonymous()
            body = _parse_body(raw, route, request.headers.get("content-type", ""))
            call = Call(route, params, dict(request.query_params), body, request, self.context(), caller)
            call.authenticate_as = authenticate_as
            result = await route.handler(call)
            reply = result if isinstance(result, Reply) else Reply(result)
            if self.validate_responses and route.output and reply.body is not None and reply.status < 400:
                problems = validation.errors_of(route.output, reply.body)
                if problems:
                    log.error("response of %s does not match %s: %s", route.name, route.output, problems)
                    raise errors.InternalServerError("Response does not match its schema: {p}", p="; ".join(problems))
            if reply.body is None:
                return Response(status_code=reply.status, headers=reply.headers)
            return json_response(reply.body, reply.status, reply.headers)
        except errors.QueueError as exc:
            if exc.status >= 500:
                log.error("%s failed: %s", route.name, exc.message)
            return error_response(exc, method=route.name, params=params, payload=body)
        except ClientDisconnect:  # gone before its whole body came (or closed for sending none): nobody to answer
            log.info("%s: the client went away before its request body came", route.name)
            return Response(status_code=400)
        except Exception:
            log.exception("%s failed", route.name)
            return error_response(errors.InternalServerError(), method=route.name, params=params, payload=body)
        finally:
            elapsed = (dt.datetime.now(dt.UTC) - started).total_seconds() * 1000
            log.debug("%s %s", method, path, extra={"durationMs": round(elapsed, 1)})
