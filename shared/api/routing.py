"""What a route of the API declares and what its handler receives: paths with parameter patterns, scope
templates (Taskcluster's notation), the query parameters each route takes; a `Call` (one request, as a handler
sees it) and a `Reply`. shared/api/framework.py serves them.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from starlette.requests import Request

from shared import errors, validation
from shared.auth.authenticator import Authenticator, Caller
from shared.scopes import ScopeExpr, describe

HELD_SHOWN = 100  # scopes an InsufficientScopes message lists of those the caller holds
ALWAYS_ALLOWED_QUERY = frozenset({"bewit"})  # a signed URL's Hawk bewit, on any GET

# Patterns of path parameters (reference section 0, modern identifiers of up to 38 characters).
PARAM_PATTERNS: dict[str, str] = {
    "taskId": r"^[A-Za-z0-9_-]{8}[Q-T][A-Za-z0-9_-][CGKOSWaeimquy26-][A-Za-z0-9_-]{10}[AQgw]$",
    "taskGroupId": r"^[A-Za-z0-9_-]{8}[Q-T][A-Za-z0-9_-][CGKOSWaeimquy26-][A-Za-z0-9_-]{10}[AQgw]$",
    "runId": r"^[1-9]*[0-9]+$",
    "provisionerId": r"^[a-zA-Z0-9-_]{1,38}$",
    "workerType": r"^[a-z]([-a-z0-9]{0,36}[a-z0-9])?$",  # the schemas' workertype-pattern (taskQueueId's second part)
    "workerGroup": r"^[a-zA-Z0-9-_]{1,38}$",
    "workerId": r"^[a-zA-Z0-9-_]{1,38}$",
    "taskQueueId": r"^[a-zA-Z0-9-_]{1,38}/[a-z]([-a-z0-9]{0,36}[a-z0-9])?$",
    "name": r"^[\x20-\x7e]+$",  # artifact names: printable ASCII
    "clientId": r"^[A-Za-z0-9!@/:.+|_-]+$",  # the auth service's
    "roleId": r"^[\x20-\x7e]+$",
    "entityId": r"^[\x20-\x7e]{1,1024}$",  # a client's, role's, secret's, hook's or worker pool's id
    "workerPoolId": r"^[A-Za-z0-9_-]{1,38}/[A-Za-z0-9_-]{1,38}$",  # purge-cache's
    "wstAudience": r"^[a-zA-Z0-9_-]{1,38}$",  # the Auth service's delegation endpoints'
    "wstClient": r"^[a-zA-Z0-9_~.%-]+$",
    "appName": r"^[a-zA-Z0-9_-]+$",
    "owner": r"^[A-Za-z0-9._-]+$",
}
# These hold `/` (a workerPoolId one, an S3 prefix or a secret's name any).
_SEGMENT = {
    "taskQueueId": r"[^/]+/[^/]+",
    "workerPoolId": r"[^/]+/[^/]+",
    "name": r".+",
    "clientId": r".+",
    "roleId": r".+",
    "entityId": r".+",
    "prefix": r".*",
}
# Parameters that may be empty, and then omitted with their slash (the Index's root namespace: `/namespaces`,
# `/namespaces/`), as Taskcluster's `:namespace?`.
_OPTIONAL = {"namespace"}
MAX_RUN_ID = 1000

# A scope template: scope strings with `<param>` placeholders, AllOf/AnyOf, `{for, in, each}` expanding a
# list parameter, and `{if, then}` included only when the parameter is truthy (Taskcluster's notation).
ScopeTemplate = str | dict[str, Any]


def render_scopes(template: ScopeTemplate | None, params: dict[str, Any]) -> ScopeExpr | None:
    """Substitute parameters into a scope template; None means the route needs no scopes."""
    if template is None:
        return None

    def subst(text: str, values: dict[str, Any]) -> str:
        def one(match: re.Match[str]) -> str:
            value = values[match.group(1)]
            if not isinstance(value, str | int):
                raise TypeError(f"scope parameter {match.group(1)} must be a string")
            return str(value)

        return re.sub(r"<([a-zA-Z]+)>", one, text)

    def expand(node: ScopeTemplate) -> list[ScopeExpr]:
        if isinstance(node, str):
            return [subst(node, params)]
        if "for" in node:
            return [subst(node["each"], {**params, node["for"]: item}) for item in params[node["in"]]]
        if "if" in node:
            return expand(node["then"]) if params.get(node["if"]) else expand(node["else"]) if "else" in node else []
        ((kind, children),) = node.items()
        return [{kind: [r for child in children for r in expand(child)]}]

    rendered = expand(template)
    return rendered[0] if len(rendered) == 1 else {"AllOf": rendered}


ContextT = TypeVar("ContextT")


@dataclass
class Call(Generic[ContextT]):
    """One API request, as a handler sees it: `context` is what the application serves (the queue)."""

    route: Route
    params: dict[str, str]
    query: dict[str, str]
    body: Any
    request: Request
    context: ContextT
    caller: Caller
    required_scopes: ScopeExpr | None = None
    # Authenticates this request with another authenticator (testAuthenticate's made-up client).
    authenticate_as: Callable[[Authenticator[Any]], Awaitable[Caller]] | None = None

    def run_id(self) -> int:
        return int(self.params["runId"])

    async def authorize(self, **extra: Any) -> None:
        """Check the caller holds the scopes this request needs: the route's template, filled in from the path
        parameters and `extra` (values from the body or the stored task). 403 InsufficientScopes if not."""
        await self.require(render_scopes(self.route.scopes, {**self.params, **extra}))

    async def require(self, scopes: ScopeExpr | None) -> None:
        """Check the caller holds `scopes` (None: nothing needed); 403 InsufficientScopes if not."""
        self.required_scopes = scopes
        if self.required_scopes is None:
            return
        missing = self.caller.held.unsatisfied(self.required_scopes)
        if missing is not None:
            who = f"Client `{self.caller.client_id}`" if self.caller.client_id else "An anonymous caller"
            held = self.caller.scopes
            shown = ", ".join(held[:HELD_SHOWN]) + (
                f" and {len(held) - HELD_SHOWN} more" if len(held) > HELD_SHOWN else ""
            )
            raise errors.InsufficientScopes(
                f"{who} lacks the scopes for {self.route.name}. Missing: {describe(missing)}\n\n"
                f"Required: {describe(self.required_scopes)}\n\nHeld: {shown or '(none)'}"
            )

    async def client_gone(self) -> bool:
        return await self.request.is_disconnected()


@dataclass
class Reply:
    """A handler's answer other than 200 with a JSON body: a status, headers, and a body (JSON, or none), which
    is checked against the route's output schema when the status is below 400."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Call[Any]], Awaitable[Any]]


@dataclass
class Route:
    name: str
    method: str
    path: str  # e.g. /task/<taskId>/runs/<runId>/claim
    handler: Handler
    title: str
    scopes: ScopeTemplate | None
    input: str | None = None  # schema names, e.g. create-task-request
    output: str | None = None
    stability: str = "stable"
    query: dict[str, str] = field(default_factory=dict)  # the query parameters it takes, and their patterns
    streamed: bool = False  # the handler reads the body itself (`call.request.stream()`), of any size and type
    # The framework does not authenticate (the caller is anonymous): the handler does, or needs no caller, as
    # Taskcluster's authenticateHawk, which other services call without credentials about their callers'.
    authenticated: bool = True
    regex: re.Pattern[str] = field(init=False)

    def __post_init__(self) -> None:
        def segment(m: re.Match[str]) -> str:
            slash, name, last = m.group(1), m.group(2), m.group(3) is not None
            if slash and last and name in _OPTIONAL:
                return f"(?:/(?P<{name}>[^/]*))?"
            return f"{slash}(?P<{name}>{_SEGMENT.get(name, '[^/]+')})"

        pattern = re.sub(r"(/?)<([a-zA-Z]+)>(\Z)?", segment, self.path)
        if pattern.endswith("/") and len(pattern) > 1:
            pattern = pattern[:-1] + "/?"  # `/roles/` is also asked as `/roles` (the official clients do)
        self.regex = re.compile(f"^{pattern}\\Z", re.DOTALL)  # any character reaches the parameter checks


class Api:
    """The route table of one service version, mounted at `/api/<service>/<version>`."""

    def __init__(self, service_name: str, version: str) -> None:
        self.prefix = f"/api/{service_name}/{version}"
        self.routes: list[Route] = []

    @property
    def service_name(self) -> str:
        return self.prefix.split("/")[2]

    @property
    def version(self) -> str:
        return self.prefix.split("/")[3]

    def route(
        self,
        method: str,
        path: str,
        *,
        name: str,
        title: str,
        scopes: ScopeTemplate | None,
        input: str | None = None,
        output: str | None = None,
        stability: str = "stable",
        query: dict[str, str] | None = None,
        streamed: bool = False,
        authenticated: bool = True,
    ) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self.routes.append(
                Route(
                    name,
                    method,
                    path,
                    handler,
                    title,
                    scopes,
                    input,
                    output,
                    stability,
                    dict(query or {}),
                    streamed,
                    authenticated,
                )
            )
            return handler

        return register

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        if not path.startswith(self.prefix):
            return None
        rest = path[len(self.prefix) :] or "/"
        for route in self.routes:
            if route.method == method:
                found = route.regex.match(rest)
                if found:
                    return route, found.groupdict(default="")
        return None


def check_params(params: dict[str, str]) -> None:
    bad = [
        f"{name}: `{value!r}` does not match {PARAM_PATTERNS[name]}"
        for name, value in params.items()
        if name in PARAM_PATTERNS and not validation.ecma_pattern(PARAM_PATTERNS[name]).search(value)
    ]
    if "runId" in params and not bad and int(params["runId"]) > MAX_RUN_ID:
        bad.append(f"runId: {params['runId']} is larger than {MAX_RUN_ID}")
    if bad:
        raise errors.InvalidRequestArguments("Invalid request arguments:\n" + "\n".join(f"* {b}" for b in bad))


def check_query(route: Route, query: dict[str, str]) -> None:
    """Only the query parameters a route declares, each matching its pattern (as Taskcluster's API library)."""
    bad = []
    for key, value in query.items():
        if key in ALWAYS_ALLOWED_QUERY:
            continue
        pattern = route.query.get(key)
        if pattern is None:
            bad.append(
                f"Query-string parameter: {key} is not supported by {route.name}"
                + (f" (it takes {', '.join(sorted(route.query))})" if route.query else "")
            )
        elif not validation.ecma_pattern(pattern).search(value):
            bad.append(f"Query-string parameter: {key}={value!r} does not match {pattern}")
    if bad:
        raise errors.InvalidRequestArguments("Invalid request arguments:\n" + "\n".join(f"* {b}" for b in bad))
