"""Auth service API v1 routes, in Taskcluster's shapes: clients (list, get, create, update, reset the access
token, enable, disable, delete), roles (list, get, create, update, delete), expandScopes and currentScopes.

Scopes are Taskcluster's (`auth:create-client:<clientId>`, ...). Whoever creates or updates a client or a role
must hold every scope it gives, so no one can hand out more than they hold. Clients are kept by
shared/auth/clients.py (access tokens derived, never stored), roles by shared/auth/roles.py; both are read by the
authentication of every process within QUEUE_CLIENT_CACHE_SECONDS.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from shared import errors, timeutil
from shared.api import monitoring
from shared.api.routing import Api, Call, Reply
from shared.auth.audit import ENTITY_TYPES, AuditEntry
from shared.auth.audit import MAX_PAGE as AUDIT_PAGE
from shared.auth.authenticator import Authenticator
from shared.auth.clients import Client, ClientStore
from shared.auth.roles import Role, RoleStore
from shared.runtime import get_audit_log, get_authenticator
from shared.scopes import problems_of

api = Api("auth", "v1")
monitoring.register(api)
GRANTING = {"for": "scope", "in": "scopes", "each": "<scope>"}  # the caller must hold what it gives
STATIC_PREFIX = "static/"  # Taskcluster reserves these clientIds for the clients its deployment configures
ROLE_PAGING = {"continuationToken": "^.*$", "limit": "^[0-9]+$"}
MAX_ROLES_PAGE = 1000


class StaticClient(errors.InputError):
    """clientId "{clientId}" starts with "static/" which is reserved for statically configured clients. Contact
    your administrator to change static clients."""


def _not_static(call: Call[Any]) -> str:
    """The clientId of a request that changes a client, unless it is reserved (400, as Taskcluster's)."""
    client_id = call.params["clientId"]
    if client_id.startswith(STATIC_PREFIX):
        raise StaticClient(clientId=client_id)
    return client_id


def _auth() -> Authenticator[ClientStore]:
    return get_authenticator()


def _iso(value: Any) -> str | None:
    return timeutil.iso(value) if value is not None else None


async def _client(client: Client, *, with_token: bool = False) -> dict[str, Any]:
    """get-client-response (create-client-response with the accessToken)."""
    never = "3000-01-01T00:00:00.000Z"
    created = _iso(client.created) or never
    out: dict[str, Any] = {
        "clientId": client.client_id,
        "description": client.description,
        "expires": _iso(client.expires) or never,
        "created": created,
        "lastModified": _iso(client.last_modified) or created,
        "lastDateUsed": created,
        "lastRotated": _iso(client.last_rotated) or created,
        "deleteOnExpiration": False,
        "disabled": client.disabled,
        "scopes": list(client.scopes),
        "expandedScopes": list((await _auth().expand(client.scopes)).scopes),
    }
    if with_token:
        out["accessToken"] = client.access_token
    return out


async def _role(role: Role) -> dict[str, Any]:
    return {
        "roleId": role.role_id,
        "description": role.description,
        "scopes": list(role.scopes),
        "created": timeutil.iso(role.created),
        "lastModified": timeutil.iso(role.last_modified),
        "expandedScopes": list((await _auth().expand((f"assume:{role.role_id}",))).scopes),
    }


async def _expandable(scopes: list[str]) -> None:
    """400 when the scopes are not a set a caller may bring, or expand past the bounds of an expansion: checked
    before a client is written, so that no stored client is refused at authentication for its scopes."""
    problems = problems_of(scopes, "scopes")
    if problems:
        raise errors.InputError("The scopes cannot be used: {problems}", problems="; ".join(problems))
    await _auth().expand(tuple(scopes))


def _roles() -> RoleStore:
    roles = _auth().roles
    assert roles is not None, "the app's authenticator has a role store"
    return roles


# --- clients ------------------------------------------------------------------------------------------------


@api.route(
    "GET",
    "/clients/",
    name="listClients",
    title="List Clients",
    scopes="auth:list-clients",
    query={"prefix": "^[A-Za-z0-9!@/:.+|_-]*$"},
)
async def list_clients(call: Call[Any]) -> dict[str, Any]:
    """Every stored client (not the root client of the settings), in clientId order; `prefix` narrows the list.
    All in one answer: no `continuationToken`."""
    await call.authorize()
    prefix = call.query.get("prefix", "")
    clients = [c for c in await _auth().clients.list() if c.client_id.startswith(prefix)]
    return {"clients": [await _client(c) for c in clients]}


class UnknownEntityType(errors.InvalidRequestArguments):
    """entityType `{entityType}` is none of {known}"""


async def _audited(call: Call[Any], entity_type: str, entity_id: str, action: str) -> None:
    """Record what the caller did (shared/auth/audit.py), as Taskcluster's auth does after each change."""
    await get_audit_log().record(entity_type, entity_id, call.caller.client_id or "anonymous", action)


def _history(entries: list[AuditEntry], token: str | None) -> dict[str, Any]:
    return {"auditHistory": [e.as_answer() for e in entries], **({"continuationToken": token} if token else {})}


def _page_size(call: Call[Any]) -> int:
    return int(call.query.get("limit") or AUDIT_PAGE)


# Before `client`: `/clients/<clientId>` would also take `<clientId>/audit`.
@api.route(
    "GET",
    "/clients/<clientId>/audit",
    name="listAuditHistory",
    title="List Audit History",
    scopes="auth:client-audit-history:<clientId>",
    output="auth/get-entity-history-response",
    query=ROLE_PAGING,
)
async def list_audit_history(call: Call[Any]) -> dict[str, Any]:
    """What a client did to clients and roles, oldest first, kept QUEUE_AUDIT_RETENTION_DAYS (30); a page of
    `limit` entries (at most 1,000) and the `continuationToken` of the next."""
    await call.authorize()
    log = get_audit_log()
    return _history(
        *await log.by_client(call.params["clientId"], _page_size(call), call.query.get("continuationToken"))
    )


@api.route(
    "GET",
    "/audit/<entityType>/<entityId>",
    name="getEntityHistory",
    title="Get Entity History",
    scopes="auth:audit-history:<entityType>",
    output="auth/get-entity-history-response",
    query=ROLE_PAGING,
)
async def get_entity_history(call: Call[Any]) -> dict[str, Any]:
    """Who did what to a client or a role, oldest first, kept QUEUE_AUDIT_RETENTION_DAYS (30), paged as
    listAuditHistory. A secret's, hook's or worker pool's history is kept by that service in its own database:
    empty here."""
    entity_type = call.params["entityType"]
    if entity_type not in ENTITY_TYPES:
        raise UnknownEntityType(entityType=entity_type, known=", ".join(ENTITY_TYPES))
    await call.authorize()
    token = call.query.get("continuationToken")
    return _history(*await get_audit_log().of_entity(entity_type, call.params["entityId"], _page_size(call), token))


@api.route("GET", "/clients/<clientId>", name="client", title="Get Client", scopes="auth:get-client:<clientId>")
async def get_client(call: Call[Any]) -> dict[str, Any]:
    """A client, with its scopes and their expansion through roles."""
    await call.authorize()
    return await _client(await _auth().clients.must_get(call.params["clientId"]))


@api.route(
    "PUT",
    "/clients/<clientId>",
    name="createClient",
    title="Create Client",
    scopes={"AllOf": ["auth:create-client:<clientId>", GRANTING]},
    input="auth/create-client-request",
)
async def create_client(call: Call[Any]) -> dict[str, Any]:
    """Create a client and answer its accessToken, this once (`resetAccessToken` gives a new one). The caller
    must hold every scope the client is given."""
    client_id = _not_static(call)
    await call.authorize(scopes=call.body["scopes"])
    await _expandable(call.body["scopes"])
    client = await _auth().clients.create(
        client_id,
        call.body["scopes"],
        expires=timeutil.parse(call.body["expires"]),
        description=call.body["description"],
    )
    await _audited(call, "client", client_id, "created")
    return await _client(client, with_token=True)


@api.route(
    "POST",
    "/clients/<clientId>/reset",
    name="resetAccessToken",
    title="Reset `accessToken`",
    scopes="auth:reset-access-token:<clientId>",
)
async def reset_access_token(call: Call[Any]) -> dict[str, Any]:
    """A new accessToken for the client, answered this once; the old one stops working (in every process within
    QUEUE_CLIENT_CACHE_SECONDS)."""
    client_id = _not_static(call)
    await call.authorize()
    client = await _auth().clients.reset(client_id)
    await _audited(call, "client", client_id, "access token reset")
    return await _client(client, with_token=True)


@api.route(
    "POST",
    "/clients/<clientId>/enable",
    name="enableClient",
    title="Enable Client",
    scopes="auth:enable-client:<clientId>",
)
async def enable_client(call: Call[Any]) -> dict[str, Any]:
    client_id = _not_static(call)
    await call.authorize()
    client = await _auth().clients.set_disabled(client_id, False)
    await _audited(call, "client", client_id, "client enabled")
    return await _client(client)


@api.route(
    "POST",
    "/clients/<clientId>/disable",
    name="disableClient",
    title="Disable Client",
    scopes="auth:disable-client:<clientId>",
)
async def disable_client(call: Call[Any]) -> dict[str, Any]:
    """The client stops authenticating (within QUEUE_CLIENT_CACHE_SECONDS); `enableClient` undoes it."""
    client_id = _not_static(call)
    await call.authorize()
    client = await _auth().clients.set_disabled(client_id, True)
    await _audited(call, "client", client_id, "client disabled")
    return await _client(client)


# After reset, enable and disable: a clientId may hold `/`, so `/clients/<clientId>` also matches theirs.
@api.route(
    "POST",
    "/clients/<clientId>",
    name="updateClient",
    title="Update Client",
    scopes={"AllOf": ["auth:update-client:<clientId>", GRANTING]},
    input="auth/create-client-request",
)
async def update_client(call: Call[Any]) -> dict[str, Any]:
    """Replace a client's scopes, description and expiry. The caller must hold every scope it is given."""
    client_id = _not_static(call)
    await call.authorize(scopes=call.body["scopes"])
    await _expandable(call.body["scopes"])
    client = await _auth().clients.update(
        client_id,
        scopes=call.body["scopes"],
        description=call.body["description"],
        expires=timeutil.parse(call.body["expires"]),
    )
    await _audited(call, "client", client_id, "updated")
    return await _client(client)


@api.route(
    "DELETE", "/clients/<clientId>", name="deleteClient", title="Delete Client", scopes="auth:delete-client:<clientId>"
)
async def delete_client(call: Call[Any]) -> Reply:
    """Delete a client; deleting one that does not exist is not an error."""
    client_id = _not_static(call)
    await call.authorize()
    await _auth().clients.delete(client_id)
    await _audited(call, "client", client_id, "deleted")
    return Reply(None)


# --- roles --------------------------------------------------------------------------------------------------


@api.route("GET", "/roles/", name="listRoles", title="List Roles", scopes="auth:list-roles")
async def list_roles(call: Call[Any]) -> Reply:
    """Every role, in roleId order (a JSON array, as Taskcluster's listRoles answers)."""
    await call.authorize()
    return Reply([await _role(r) for r in await _roles().list()])


async def _roles_page(call: Call[Any]) -> tuple[list[Role], dict[str, str]]:
    """The roles of one page, in roleId order: all of them without `limit` (as Taskcluster), else up to `limit`
    (at most MAX_ROLES_PAGE) after the roleId the `continuationToken` names."""
    await call.authorize()
    roles = await _roles().list()
    token = call.query.get("continuationToken")
    if token:
        after = _token_role(token)
        roles = [r for r in roles if r.role_id > after]
    limit = call.query.get("limit")
    if not limit:
        return roles, {}
    size = max(1, min(int(limit), MAX_ROLES_PAGE))
    more = {"continuationToken": _role_token(roles[size - 1].role_id)} if len(roles) > size else {}
    return roles[:size], more


def _role_token(role_id: str) -> str:
    return base64.urlsafe_b64encode(role_id.encode()).decode().rstrip("=")


def _token_role(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("ascii")
    except (ValueError, binascii.Error):
        raise errors.InputError("Invalid continuationToken") from None


@api.route(
    "GET",
    "/roles2/",
    name="listRoles2",
    title="List Roles",
    scopes="auth:list-roles",
    output="auth/list-roles2-response",
    query=ROLE_PAGING,
)
async def list_roles2(call: Call[Any]) -> dict[str, Any]:
    """Every role with the scopes it expands to, in roleId order, a page at a time with `limit` and
    `continuationToken` (all at once without `limit`)."""
    roles, more = await _roles_page(call)
    return {"roles": [await _role(r) for r in roles], **more}


@api.route(
    "GET",
    "/roleids/",
    name="listRoleIds",
    title="List Role IDs",
    scopes="auth:list-roles",
    output="auth/list-role-ids-response",
    query=ROLE_PAGING,
)
async def list_role_ids(call: Call[Any]) -> dict[str, Any]:
    """The roleIds, in order, paged as listRoles2."""
    roles, more = await _roles_page(call)
    return {"roleIds": [r.role_id for r in roles], **more}


@api.route(
    "GET",
    "/roles/<roleId>",
    name="role",
    title="Get Role",
    scopes="auth:get-role:<roleId>",
    output="auth/get-role-response",
)
async def get_role(call: Call[Any]) -> dict[str, Any]:
    """A role, with the scopes `assume:<roleId>` expands to."""
    await call.authorize()
    return await _role(await _roles().get(call.params["roleId"]))


@api.route(
    "PUT",
    "/roles/<roleId>",
    name="createRole",
    title="Create Role",
    scopes={"AllOf": ["auth:create-role:<roleId>", GRANTING]},
    input="auth/create-role-request",
)
async def create_role(call: Call[Any]) -> dict[str, Any]:
    """Create a role (the same request again answers it as it is; other scopes or description: 409). The caller
    must hold every scope the role gives. A role that would close a cycle of roles is refused (400)."""
    await call.authorize(scopes=call.body["scopes"])
    role = await _roles().create(call.params["roleId"], call.body["scopes"], call.body["description"])
    await _audited(call, "role", role.role_id, "created")
    return await _role(role)


@api.route(
    "POST",
    "/roles/<roleId>",
    name="updateRole",
    title="Update Role",
    scopes={"AllOf": ["auth:update-role:<roleId>", GRANTING]},
    input="auth/create-role-request",
)
async def update_role(call: Call[Any]) -> dict[str, Any]:
    """Replace a role's scopes and description; the caller must hold every scope it gives."""
    await call.authorize(scopes=call.body["scopes"])
    role = await _roles().update(call.params["roleId"], call.body["scopes"], call.body["description"])
    await _audited(call, "role", role.role_id, "updated")
    return await _role(role)


@api.route("DELETE", "/roles/<roleId>", name="deleteRole", title="Delete Role", scopes="auth:delete-role:<roleId>")
async def delete_role(call: Call[Any]) -> Reply:
    """Delete a role; deleting one that does not exist is not an error."""
    await call.authorize()
    await _roles().delete(call.params["roleId"])
    await _audited(call, "role", call.params["roleId"], "deleted")
    return Reply(None)


# --- scopes -------------------------------------------------------------------------------------------------


@api.route(
    "POST",
    "/scopes/expand",
    name="expandScopes",
    title="Expand Scopes",
    scopes="auth:expand-scopes",
    input="auth/scopeset",
    output="auth/scopeset",
)
async def expand_scopes(call: Call[Any]) -> dict[str, Any]:
    """The scopes with every scope the roles they assume give, transitively, normalized (Taskcluster's role
    expansion: trailing-`*` roles, `<..>` parameters, `assume:` scopes ending in `*`)."""
    await call.authorize()
    await _expandable(call.body["scopes"])
    return {"scopes": list((await _auth().expand(tuple(call.body["scopes"]))).scopes)}


@api.route(
    "GET", "/scopes/current", name="currentScopes", title="Get Current Scopes", scopes=None, output="auth/scopeset"
)
async def current_scopes(call: Call[Any]) -> dict[str, Any]:
    """The scopes the credentials of this request hold, as the queue authenticates them: the client's scopes
    (or a certificate's, narrowed by `authorizedScopes`) with `assume:anonymous`, which every caller holds, roles
    expanded. Anonymous callers get the role `anonymous`'s scopes. Answers Taskcluster's scopeset:
    `{"scopes": [...]}`."""
    return {"scopes": sorted(call.caller.scopes)}
