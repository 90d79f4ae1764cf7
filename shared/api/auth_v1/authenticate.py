"""What Taskcluster's other services ask of the Auth service about their callers: authenticateHawk (called by
worker-manager, hooks, secrets, github, notify and the rest for every request they receive), and the two test
endpoints client libraries check their signing against (testAuthenticate, testAuthenticateGet).

authenticateHawk answers from the same authentication as the queue's own routes (shared/auth/authenticator.py):
warm, it reads no storage (clients are trusted for QUEUE_CLIENT_CACHE_SECONDS, roles and expansions are kept
per process, each in a bounded map).
"""

from __future__ import annotations

from typing import Any

from shared import errors, timeutil
from shared.api.auth_v1.common import api
from shared.api.routing import Call
from shared.auth.authenticator import Authenticator, Caller
from shared.auth.clients import Client
from shared.auth.hawk import Attempt, AuthFailure
from shared.runtime import get_authenticator
from shared.scopes import ScopeExpr, problems_of

TESTER = "tester"  # testAuthenticate's made-up client and its access token, as Taskcluster's
TESTER_TOKEN = "no-secret"
TESTER_GET_SCOPES = ("test:*", "auth:create-client:test:*")


class _Tester:
    """The only client testAuthenticate knows: `tester`, with the scopes the request gives it."""

    def __init__(self, scopes: list[str]) -> None:
        self.client = Client(TESTER, TESTER_TOKEN, tuple(scopes))

    async def get(self, client_id: str) -> Client | None:
        return self.client if client_id == TESTER else None


def _as_answer(caller: Caller) -> dict[str, Any]:
    return {"scopes": list(caller.scopes), "expires": timeutil.iso(caller.expires) if caller.expires else None}


@api.route(
    "POST",
    "/authenticate-hawk",
    name="authenticateHawk",
    title="Authenticate Hawk Request",
    scopes=None,
    input="auth/authenticate-hawk-request",
    output="auth/authenticate-hawk-response",
    authenticated=False,
)
async def authenticate_hawk(call: Call[Any]) -> dict[str, Any]:
    """Check the signature of a request another service received and answer who made it: `auth-success` with
    the clientId, its scopes (roles expanded, `assume:anonymous` included) and until when they hold;
    `no-auth` with `assume:anonymous` expanded for a request without credentials; `auth-failed` with Taskcluster's
    message. The service checks the payload hash (`hash`) against the body itself."""
    body = call.body
    attempt = Attempt(body["method"].upper(), body["resource"], body["host"], body["port"], body.get("authorization"))
    try:
        found = await get_authenticator().check(attempt)
    except AuthFailure as failure:
        return {"status": "auth-failed", "message": failure.message}
    answer = _as_answer(found.caller)
    if found.scheme == "none":
        return {"status": "no-auth", "scheme": "none", **answer}
    extra = {"hash": found.hash} if found.hash is not None else {}
    return {"status": "auth-success", "scheme": "hawk", "clientId": found.caller.client_id, **answer, **extra}


async def _as_tester(call: Call[Any], client_scopes: list[str], required: list[str]) -> dict[str, Any]:
    """Authenticate the request as if `tester` held `client_scopes` (no roles; `assume:anonymous` added, as
    Taskcluster's test endpoints do), then require `required`."""
    problems = problems_of(client_scopes, "clientScopes") + problems_of(required, "requiredScopes")
    if problems:
        raise errors.InputError("The scopes cannot be used: {problems}", problems="; ".join(problems))
    tester = Authenticator(
        _Tester(client_scopes),
        ("assume:anonymous",),
        certificate_skew_seconds=get_authenticator().certificate_skew_ms / 1000,
    )
    assert call.authenticate_as is not None, "the framework lets a handler authenticate"
    call.caller = await call.authenticate_as(tester)
    await call.require({"AllOf": list[ScopeExpr](required)})
    client_id = call.caller.client_id or "auth-failed:no-auth"
    return {"clientId": client_id, "scopes": list(call.caller.scopes)}


@api.route(
    "POST",
    "/test-authenticate",
    name="testAuthenticate",
    title="Test Authentication",
    scopes=None,
    input="auth/test-authenticate-request",
    output="auth/test-authenticate-response",
    authenticated=False,
)
async def test_authenticate(call: Call[Any]) -> dict[str, Any]:
    """For client libraries to test their signing: the request is signed by clientId `tester` with accessToken
    `no-secret` (certificates and authorizedScopes applied), whose scopes are `clientScopes`; it must satisfy
    `requiredScopes`. Answers the clientId and scopes as an API method sees them."""
    return await _as_tester(call, call.body["clientScopes"], call.body["requiredScopes"])


@api.route(
    "GET",
    "/test-authenticate-get/",
    name="testAuthenticateGet",
    title="Test Authentication (GET)",
    scopes=None,
    output="auth/test-authenticate-response",
    authenticated=False,
)
async def test_authenticate_get(call: Call[Any]) -> dict[str, Any]:
    """testAuthenticate for GET and signed URLs (bewits): `tester` holds `test:*` and
    `auth:create-client:test:*`, and the request must satisfy `test:authenticate-get`."""
    return await _as_tester(call, list(TESTER_GET_SCOPES), ["test:authenticate-get"])
