"""The anonymous role as a Taskcluster operator uses it (Taskcluster's deploying guide, "Anonymous Role"), through
the official Python client against a local host on its own Azurite (the role is the deployment's: hosts over the
same storage share it): every caller holds `assume:anonymous`, the deployment starts with the role holding the
public reads, and what the operator does to the role is what anonymous callers, authenticateHawk and currentScopes
see, within the role cache's bound."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import taskcluster

from shared.settings import DEFAULT_ANONYMOUS_SCOPES
from tests.conftest import (
    ROOT_ACCESS_TOKEN,
    ROOT_CLIENT_ID,
    HostProcess,
    deployment_of_its_own,
    expect_error,
    slugid,
    task_definition,
    wait_for,
)

CACHE_SECONDS = 1  # the role cache's bound here (QUEUE_CLIENT_CACHE_SECONDS)
# What Taskcluster's deploying guide gives the role in a public deployment, the queue's and the Auth API's part.
PUBLIC = [
    "auth:current-scopes",
    "auth:expand-scopes",
    "auth:get-role:*",
    "auth:list-roles",
    "queue:get-artifact:public/*",
    "queue:get-provisioner:*",
    "queue:get-task:*",
    "queue:get-worker-type:*",
    "queue:get-worker:*",
    "queue:list-artifacts:*",
    "queue:list-dependent-tasks:*",
    "queue:list-provisioners",
    "queue:list-task-group:*",
    "queue:list-worker-types:*",
    "queue:list-workers:*",
    "queue:pending-count:*",
    "queue:status:*",
]
ROOT = {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN}


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Iterator[HostProcess]:
    with deployment_of_its_own(tmp_path_factory, "anonymous") as factory:
        yield factory(client_cache_seconds=CACHE_SECONDS)


def options(host: HostProcess, credentials: dict[str, str] | None) -> dict[str, object]:
    given = {"rootUrl": host.root_url, "maxRetries": 0}
    return {**given, "credentials": credentials} if credentials else given


def auth(host: HostProcess, credentials: dict[str, str] | None = None) -> taskcluster.Auth:
    return taskcluster.Auth(options(host, credentials))


def queue(host: HostProcess, credentials: dict[str, str] | None = None) -> taskcluster.Queue:
    return taskcluster.Queue(options(host, credentials))


def anonymous_hawk(host: HostProcess) -> dict[str, object]:
    """authenticateHawk for a request without credentials, as Taskcluster's services ask it."""
    return dict(auth(host).authenticateHawk({"method": "get", "resource": "/", "host": "example.com", "port": 443}))


def refused(call, *args) -> bool:
    """True when the call is refused for its scopes (403)."""
    try:
        call(*args)
    except taskcluster.exceptions.TaskclusterRestFailure as failure:
        if failure.status_code == 403:
            return True
        raise
    return False


def test_a_fresh_deployment_starts_with_the_role_and_everyone_holds_it(host):
    role = auth(host, ROOT).role("anonymous")
    assert sorted(role["scopes"]) == sorted(DEFAULT_ANONYMOUS_SCOPES)
    assert "anonymous" in [r["roleId"] for r in auth(host, ROOT).listRoles()]
    hawk = anonymous_hawk(host)
    assert hawk["status"] == "no-auth" and hawk["scheme"] == "none"
    assert sorted(hawk["scopes"]) == sorted(["assume:anonymous", *DEFAULT_ANONYMOUS_SCOPES])
    assert sorted(auth(host).currentScopes()["scopes"]) == sorted(hawk["scopes"])
    expect_error(403, "InsufficientScopes", queue(host).listProvisioners)  # not among the defaults


def test_the_operators_role_is_what_anonymous_callers_may_do(host):
    admin = auth(host, ROOT)
    task_id = slugid()
    queue(host, ROOT).createTask(task_id, task_definition())
    created = admin.createClient(
        f"reader/{slugid()}",
        {"expires": taskcluster.stringDate(taskcluster.fromNow("1 day")), "description": "x", "scopes": ["x:y"]},
    )
    reader = {"clientId": created["clientId"], "accessToken": created["accessToken"]}
    try:
        # Taskcluster's guide, on a deployment that had none: createRole. Here it exists, so update it.
        body = expect_error(
            409, "RequestConflict", admin.createRole, "anonymous", {"description": "", "scopes": PUBLIC}
        )
        assert "`anonymous` already exists" in body["message"]
        admin.updateRole("anonymous", {"description": "public", "scopes": PUBLIC})
        assert wait_for(lambda: not refused(queue(host).listProvisioners), timeout=10 * CACHE_SECONDS)
        assert "queue:list-provisioners" in anonymous_hawk(host)["scopes"]
        assert "queue:list-provisioners" in auth(host, reader).currentScopes()["scopes"]  # every caller holds it
        # A private deployment: the role deleted, then created anew with nothing but the task's status.
        admin.deleteRole("anonymous")
        assert wait_for(lambda: refused(queue(host).status, task_id), timeout=10 * CACHE_SECONDS)
        assert anonymous_hawk(host)["scopes"] == ["assume:anonymous"]
        assert refused(queue(host, reader).task, task_id)  # a client's own scopes no longer read it either
        assert "x:y" in auth(host, reader).currentScopes()["scopes"]
        admin.createRole("anonymous", {"description": "private", "scopes": [f"queue:status:{task_id}"]})
        assert wait_for(lambda: not refused(queue(host).status, task_id), timeout=10 * CACHE_SECONDS)
        assert refused(queue(host).task, task_id)
    finally:
        admin.deleteRole("anonymous")
        admin.createRole("anonymous", {"description": "defaults", "scopes": list(DEFAULT_ANONYMOUS_SCOPES)})
