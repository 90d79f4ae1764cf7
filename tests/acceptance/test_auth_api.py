"""The Auth service API (clients, roles, expandScopes, currentScopes) through the official Python client's `Auth`
class against a local host on Azurite, and role expansion applied when the queue authenticates."""

from __future__ import annotations

import uuid

import pytest
import taskcluster
from taskcluster.exceptions import TaskclusterAuthFailure, TaskclusterRestFailure

from tests.acceptance.helpers import admin
from tests.conftest import ROOT_ACCESS_TOKEN, ROOT_CLIENT_ID, expect_error, slugid, task_definition, wait_for


@pytest.fixture(scope="module")
def host(host_factory):
    return host_factory(client_cache_seconds=0)  # changes take effect at once (the bound is tested in units)


def auth(host, credentials=None):
    return taskcluster.Auth(
        {
            "rootUrl": host.root_url,
            "maxRetries": 0,
            "credentials": credentials or {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN},
        }
    )


def queue(host, credentials):
    return taskcluster.Queue({"rootUrl": host.root_url, "maxRetries": 0, "credentials": credentials})


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


def expires() -> str:
    return taskcluster.stringDate(taskcluster.fromNow("1 day"))


def test_a_client_holding_only_a_role_creates_what_the_role_allows_and_nothing_else(host):
    root = auth(host)
    role_id, client_id = unique("project:builders"), unique("builder")
    prov = unique("allowed")[:30]
    root.createRole(
        role_id,
        {
            "description": "may create tasks on allowed/*",
            "scopes": [f"queue:create-task:lowest:{prov}/*", "queue:scheduler-id:-", "queue:create-task:project:none"],
        },
    )
    created = root.createClient(
        client_id, {"expires": expires(), "description": "a builder", "scopes": [f"assume:{role_id}"]}
    )
    assert created["accessToken"] and created["scopes"] == [f"assume:{role_id}"]
    assert f"queue:create-task:lowest:{prov}/*" in created["expandedScopes"]
    builder = {"clientId": client_id, "accessToken": created["accessToken"]}
    assert f"queue:create-task:lowest:{prov}/*" in auth(host, builder).currentScopes()["scopes"]
    task_id = slugid()
    queue(host, builder).createTask(task_id, task_definition(taskQueueId=f"{prov}/wt"))
    assert queue(host, builder).status(task_id)["status"]["state"] == "pending"
    with pytest.raises(TaskclusterRestFailure) as refused:
        queue(host, builder).createTask(slugid(), task_definition(taskQueueId="elsewhere/wt"))
    assert refused.value.status_code == 403 and "queue:create-task:lowest:elsewhere/wt" in str(refused.value)
    # A change of the role changes what the client may do (here at once: QUEUE_CLIENT_CACHE_SECONDS is 0).
    root.updateRole(role_id, {"description": "nothing any more", "scopes": []})
    with pytest.raises(TaskclusterRestFailure) as after:
        queue(host, builder).createTask(slugid(), task_definition(taskQueueId=f"{prov}/wt"))
    assert after.value.status_code == 403


def test_expand_scopes_answers_as_taskclusters_documentation_says(host):
    root = auth(host)
    tag = uuid.uuid4().hex[:8]
    root.createRole(
        f"group:{tag}:admins",
        {"description": "admins", "scopes": ["admin-scope-1", "admin-scope-2", f"assume:group:{tag}:devs"]},
    )
    root.createRole(f"group:{tag}:devs", {"description": "devs", "scopes": ["dev-scope"]})
    assert root.expandScopes({"scopes": [f"assume:group:{tag}:admins", "my-scope"]})["scopes"] == [
        "admin-scope-1",
        "admin-scope-2",
        f"assume:group:{tag}:admins",
        f"assume:group:{tag}:devs",
        "dev-scope",
        "my-scope",
    ]
    root.createRole(
        f"repo:{tag}/taskcluster/taskcluster-auth", {"description": "", "scopes": ["secrets:get:auth-tests"]}
    )
    assert "secrets:get:auth-tests" in root.expandScopes({"scopes": [f"assume:repo:{tag}/taskcluster/*"]})["scopes"]
    root.createRole(
        f"hook-id:{tag}/*", {"description": "", "scopes": ["queue:create-task:aws-provisioner/taskcluster-hooks"]}
    )
    assert (
        "queue:create-task:aws-provisioner/taskcluster-hooks"
        in root.expandScopes({"scopes": [f"assume:hook-id:{tag}/nightly-diagnostics"]})["scopes"]
    )
    root.createRole(
        f"project-admin-{tag}:*",
        {"description": "", "scopes": [f"assume:project:{tag}-<..>:*", f"auth:create-client:project/{tag}-<..>/*"]},
    )
    assert root.expandScopes({"scopes": [f"assume:project-admin-{tag}:bugzilla"]})["scopes"] == [
        f"assume:project-admin-{tag}:bugzilla",
        f"assume:project:{tag}-bugzilla:*",
        f"auth:create-client:project/{tag}-bugzilla/*",
    ]
    assert root.role(f"group:{tag}:admins")["expandedScopes"] == [
        "admin-scope-1",
        "admin-scope-2",
        f"assume:group:{tag}:admins",
        f"assume:group:{tag}:devs",
        "dev-scope",
    ]
    assert f"group:{tag}:devs" in root.listRoleIds()["roleIds"]
    assert any(r["roleId"] == f"group:{tag}:devs" for r in root.listRoles())


def test_roles_that_would_assume_each_other_in_a_cycle_are_refused(host):
    root = auth(host)
    a, b = unique("cycle-a"), unique("cycle-b")
    root.createRole(a, {"description": "", "scopes": [f"assume:{b}"]})
    with pytest.raises(TaskclusterRestFailure) as refused:
        root.createRole(b, {"description": "", "scopes": [f"assume:{a}"]})
    assert refused.value.status_code == 400 and "cycle" in str(refused.value)
    with pytest.raises(TaskclusterRestFailure):
        root.role(b)  # nothing was written
    # The same request again answers the role; a different one is a conflict.
    assert root.createRole(a, {"description": "", "scopes": [f"assume:{b}"]})["roleId"] == a
    with pytest.raises(TaskclusterRestFailure) as conflict:
        root.createRole(a, {"description": "other", "scopes": []})
    assert conflict.value.status_code == 409
    root.deleteRole(a)
    with pytest.raises(TaskclusterRestFailure) as gone:
        root.role(a)
    assert gone.value.status_code == 404


def test_a_client_cannot_give_scopes_it_does_not_hold(host):
    root = auth(host)
    limited_id = unique("limited")
    limited = root.createClient(
        limited_id,
        {
            "expires": expires(),
            "description": "",
            "scopes": ["auth:create-client:limited-children/*", "auth:create-role:limited-roles/*", "queue:get-task:*"],
        },
    )
    creds = {"clientId": limited_id, "accessToken": limited["accessToken"]}
    child = auth(host, creds).createClient(
        f"limited-children/{uuid.uuid4().hex[:6]}",
        {"expires": expires(), "description": "", "scopes": ["queue:get-task:*"]},
    )
    assert child["scopes"] == ["queue:get-task:*"]
    for call in (
        lambda: auth(host, creds).createClient(
            f"limited-children/{uuid.uuid4().hex[:6]}", {"expires": expires(), "description": "", "scopes": ["*"]}
        ),
        lambda: auth(host, creds).createRole(
            f"limited-roles/{uuid.uuid4().hex[:6]}", {"description": "", "scopes": ["queue:cancel-task:*"]}
        ),
        lambda: auth(host, creds).createClient(
            unique("elsewhere"), {"expires": expires(), "description": "", "scopes": []}
        ),
    ):
        with pytest.raises(TaskclusterRestFailure) as refused:
            call()
        assert refused.value.status_code == 403


def test_reset_disable_enable_update_and_delete_a_client(host):
    root = auth(host)
    client_id = unique("ops")
    first = root.createClient(client_id, {"expires": expires(), "description": "ops", "scopes": ["queue:get-task:*"]})
    old = {"clientId": client_id, "accessToken": first["accessToken"]}
    auth(host, old).currentScopes()
    reset = root.resetAccessToken(client_id)
    new = {"clientId": client_id, "accessToken": reset["accessToken"]}
    assert reset["accessToken"] != first["accessToken"]
    with pytest.raises(TaskclusterAuthFailure):
        auth(host, old).currentScopes()
    assert "queue:get-task:*" in auth(host, new).currentScopes()["scopes"]
    assert root.disableClient(client_id)["disabled"] is True
    with pytest.raises(TaskclusterAuthFailure):
        auth(host, new).currentScopes()
    assert root.enableClient(client_id)["disabled"] is False
    updated = root.updateClient(
        client_id, {"expires": expires(), "description": "ops, more", "scopes": ["queue:status:*"]}
    )
    assert updated["scopes"] == ["queue:status:*"] and updated["description"] == "ops, more"
    assert "queue:status:*" in auth(host, new).currentScopes()["scopes"]
    assert client_id in [c["clientId"] for c in root.listClients(query={"prefix": client_id})["clients"]]
    assert root.client(client_id)["clientId"] == client_id
    root.deleteClient(client_id)
    with pytest.raises(TaskclusterAuthFailure):
        auth(host, new).currentScopes()
    assert root.listClients(query={"prefix": client_id})["clients"] == []


def test_the_auth_routes_need_their_scopes(host):
    anonymous = taskcluster.Auth({"rootUrl": host.root_url, "maxRetries": 0})
    for call in (
        anonymous.listClients,
        anonymous.listRoles,
        lambda: anonymous.expandScopes({"scopes": ["assume:x"]}),
        lambda: anonymous.createRole(unique("r"), {"description": "", "scopes": []}),
    ):
        with pytest.raises(TaskclusterRestFailure) as refused:
            call()
        assert refused.value.status_code == 403
    wait_for(lambda: "queue:get-task:*" in anonymous.currentScopes()["scopes"], timeout=5)


def test_the_admin_command_administers_over_the_api_with_credentials(host):
    role_id, client_id = unique("admin-cli:role"), unique("admin-cli")
    made = admin(
        host,
        "roles",
        "create",
        role_id,
        "--scope",
        "queue:get-task:*",
        "--scope",
        "secrets:get:x",
        "--description",
        "from the command",
    )
    assert made.returncode == 0, made.stderr
    created = admin(
        host, "--json", "clients", "create", client_id, "--scope", f"assume:{role_id}", "--expires", "2 days"
    )
    assert created.returncode == 0, created.stderr
    answer = __import__("json").loads(created.stdout)
    assert "secrets:get:x" in answer["expandedScopes"]
    own = admin(host, "scopes", "current", credentials={"clientId": client_id, "accessToken": answer["accessToken"]})
    assert own.returncode == 0 and "secrets:get:x" in own.stdout.split()
    expanded = admin(host, "scopes", "expand", f"assume:{role_id}")
    assert expanded.stdout.split() == sorted([f"assume:{role_id}", "queue:get-task:*", "secrets:get:x"])
    listed = admin(host, "clients", "list", "--prefix", client_id)
    assert listed.stdout.startswith(client_id)
    # Refused by the API: a clear line and exit 1, nothing written.
    refused = admin(
        host,
        "roles",
        "create",
        unique("admin-cli:other"),
        "--scope",
        "*",
        credentials={"clientId": client_id, "accessToken": answer["accessToken"]},
    )
    assert refused.returncode == 1 and "403" in refused.stderr and "auth:create-role" in refused.stderr
    assert admin(host, "clients", "delete", client_id).returncode == 0
    assert admin(host, "clients", "show", client_id).returncode == 1


def test_the_audit_history_says_who_changed_which_client_and_role(host):
    """What taskcluster-ui shows on a client's and a role's page (getEntityHistory) and of a client's doings
    (listAuditHistory), in Taskcluster's actions and shapes."""
    root = auth(host)
    role_id, client_id = unique("project:audited"), unique("audited")
    root.createRole(role_id, {"description": "a", "scopes": ["queue:status:*"]})
    root.updateRole(role_id, {"description": "b", "scopes": ["queue:status:*"]})
    root.createClient(client_id, {"expires": expires(), "description": "c", "scopes": []})
    root.resetAccessToken(client_id)
    root.disableClient(client_id)
    root.enableClient(client_id)
    root.deleteClient(client_id)
    root.deleteRole(role_id)
    role_history = root.getEntityHistory("role", role_id)["auditHistory"]
    assert [(e["clientId"], e["actionType"]) for e in role_history] == [
        (ROOT_CLIENT_ID, "created"),
        (ROOT_CLIENT_ID, "updated"),
        (ROOT_CLIENT_ID, "deleted"),
    ]
    client_history = root.getEntityHistory("client", client_id)["auditHistory"]
    assert [e["actionType"] for e in client_history] == [
        "created",
        "access token reset",
        "client disabled",
        "client enabled",
        "deleted",
    ]
    mine = root.listAuditHistory(ROOT_CLIENT_ID, query={"limit": "1000"})["auditHistory"]
    assert {(e["entityType"], e["entityId"]) for e in mine} >= {("role", role_id), ("client", client_id)}
    first = root.getEntityHistory("client", client_id, query={"limit": "2"})
    assert len(first["auditHistory"]) == 2 and first["continuationToken"]
    assert root.getEntityHistory("secret", "project/a") == {"auditHistory": []}  # kept by the secrets service
    expect_error(400, "InvalidRequestArguments", root.getEntityHistory, "table", "x")
    anonymous = taskcluster.Auth({"rootUrl": host.root_url, "maxRetries": 0})
    expect_error(403, "InsufficientScopes", anonymous.listAuditHistory, ROOT_CLIENT_ID)
