"""Auth API v1: clients (list, get, create, update, reset the access token, enable, disable, delete) and the audit
of who changed which client or role, in Taskcluster's shapes and scopes (`auth:create-client:<clientId>`, ...).
Whoever creates or updates a client must hold every scope it gives. Clients are kept by shared/auth/clients.py
(access tokens derived, never stored), read by the authentication of every process within
QUEUE_CLIENT_CACHE_SECONDS. Registered before roles.py, and in this order: a clientId may hold `/`."""

from __future__ import annotations

from typing import Any

from shared import errors, timeutil
from shared.api.auth_v1.common import GRANTING, ROLE_PAGING, api, audited, authenticator, expandable
from shared.api.routing import Call, Reply
from shared.auth.audit import ENTITY_TYPES, AuditEntry
from shared.auth.audit import MAX_PAGE as AUDIT_PAGE
from shared.auth.clients import Client
from shared.runtime import get_audit_log

STATIC_PREFIX = "static/"  # Taskcluster reserves these clientIds for the clients its deployment configures


class StaticClient(errors.InputError):
    """clientId "{clientId}" starts with "static/" which is reserved for statically configured clients. Contact
    your administrator to change static clients."""


def _not_static(call: Call[Any]) -> str:
    """The clientId of a request that changes a client, unless it is reserved (400, as Taskcluster's)."""
    client_id = call.params["clientId"]
    if client_id.startswith(STATIC_PREFIX):
        raise StaticClient(clientId=client_id)
    return client_id


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
        "expandedScopes": list((await authenticator().expand(client.scopes)).scopes),
    }
    if with_token:
        out["accessToken"] = client.access_token
    return out


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
    clients = [c for c in await authenticator().clients.list() if c.client_id.startswith(prefix)]
    return {"clients": [await _client(c) for c in clients]}


class UnknownEntityType(errors.InvalidRequestArguments):
    """entityType `{entityType}` is none of {known}"""


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
    return await _client(await authenticator().clients.must_get(call.params["clientId"]))


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
    await expandable(call.body["scopes"])
    client = await authenticator().clients.create(
        client_id,
        call.body["scopes"],
        expires=timeutil.parse(call.body["expires"]),
        description=call.body["description"],
    )
    await audited(call, "client", client_id, "created")
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
    client = await authenticator().clients.reset(client_id)
    await audited(call, "client", client_id, "access token reset")
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
    client = await authenticator().clients.set_disabled(client_id, False)
    await audited(call, "client", client_id, "client enabled")
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
    client = await authenticator().clients.set_disabled(client_id, True)
    await audited(call, "client", client_id, "client disabled")
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
    await expandable(call.body["scopes"])
    client = await authenticator().clients.update(
        client_id,
        scopes=call.body["scopes"],
        description=call.body["description"],
        expires=timeutil.parse(call.body["expires"]),
    )
    await audited(call, "client", client_id, "updated")
    return await _client(client)


@api.route(
    "DELETE", "/clients/<clientId>", name="deleteClient", title="Delete Client", scopes="auth:delete-client:<clientId>"
)
async def delete_client(call: Call[Any]) -> Reply:
    """Delete a client; deleting one that does not exist is not an error."""
    client_id = _not_static(call)
    await call.authorize()
    await authenticator().clients.delete(client_id)
    await audited(call, "client", client_id, "deleted")
    return Reply(None)
