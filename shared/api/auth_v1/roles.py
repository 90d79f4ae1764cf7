"""Auth API v1: roles (list, get, create, update, delete) and scopes (expandScopes, currentScopes), in Taskcluster's
shapes and scopes. Whoever creates or updates a role must hold every scope it gives. Roles are kept by
shared/auth/roles.py, read by the authentication of every process within QUEUE_CLIENT_CACHE_SECONDS."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from shared import errors, timeutil
from shared.api.auth_v1.common import GRANTING, ROLE_PAGING, api, audited, authenticator, expandable
from shared.api.routing import Call, Reply
from shared.auth.roles import Role, RoleStore

MAX_ROLES_PAGE = 1000


async def _role(role: Role) -> dict[str, Any]:
    return {
        "roleId": role.role_id,
        "description": role.description,
        "scopes": list(role.scopes),
        "created": timeutil.iso(role.created),
        "lastModified": timeutil.iso(role.last_modified),
        "expandedScopes": list((await authenticator().expand((f"assume:{role.role_id}",))).scopes),
    }


def _roles() -> RoleStore:
    roles = authenticator().roles
    assert roles is not None, "the app's authenticator has a role store"
    return roles


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
    await audited(call, "role", role.role_id, "created")
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
    await audited(call, "role", role.role_id, "updated")
    return await _role(role)


@api.route("DELETE", "/roles/<roleId>", name="deleteRole", title="Delete Role", scopes="auth:delete-role:<roleId>")
async def delete_role(call: Call[Any]) -> Reply:
    """Delete a role; deleting one that does not exist is not an error."""
    await call.authorize()
    await _roles().delete(call.params["roleId"])
    await audited(call, "role", call.params["roleId"], "deleted")
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
    await expandable(call.body["scopes"])
    return {"scopes": list((await authenticator().expand(tuple(call.body["scopes"]))).scopes)}


@api.route(
    "GET", "/scopes/current", name="currentScopes", title="Get Current Scopes", scopes=None, output="auth/scopeset"
)
async def current_scopes(call: Call[Any]) -> dict[str, Any]:
    """The scopes the credentials of this request hold, as the queue authenticates them: the client's scopes
    (or a certificate's, narrowed by `authorizedScopes`) with `assume:anonymous`, which every caller holds, roles
    expanded. Anonymous callers get the role `anonymous`'s scopes. Answers Taskcluster's scopeset:
    `{"scopes": [...]}`."""
    return {"scopes": sorted(call.caller.scopes)}
