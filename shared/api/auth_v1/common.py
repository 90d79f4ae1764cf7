"""What the Auth API's routes share: the API object they register on, the authenticator they answer from, the
check that a set of scopes may be stored, and the audit of each change (shared/auth/audit.py)."""

from __future__ import annotations

from typing import Any

from shared import errors
from shared.api import monitoring
from shared.api.routing import Api, Call
from shared.auth.authenticator import Authenticator
from shared.auth.clients import ClientStore
from shared.runtime import get_audit_log, get_authenticator
from shared.scopes import problems_of

api = Api("auth", "v1")
monitoring.register(api)

GRANTING = {"for": "scope", "in": "scopes", "each": "<scope>"}  # the caller must hold what it gives
ROLE_PAGING = {"continuationToken": "^.*$", "limit": "^[0-9]+$"}


def authenticator() -> Authenticator[ClientStore]:
    return get_authenticator()


async def expandable(scopes: list[str]) -> None:
    """400 when the scopes are not a set a caller may bring, or expand past the bounds of an expansion: checked
    before a client is written, so that no stored client is refused at authentication for its scopes."""
    problems = problems_of(scopes, "scopes")
    if problems:
        raise errors.InputError("The scopes cannot be used: {problems}", problems="; ".join(problems))
    await authenticator().expand(tuple(scopes))


async def audited(call: Call[Any], entity_type: str, entity_id: str, action: str) -> None:
    """Record what the caller did (shared/auth/audit.py), as Taskcluster's auth does after each change."""
    await get_audit_log().record(entity_type, entity_id, call.caller.client_id or "anonymous", action)
