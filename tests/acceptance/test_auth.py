"""Authentication and scopes: the official client, raw Hawk requests, and attempts that must fail."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import hmac
import json
import time
import uuid

import httpx
import mohawk
import pytest
import taskcluster

from shared import timeutil
from shared.auth.clients import ClientStore
from shared.storage.azure import AzureTables
from tests.conftest import (
    ROOT_ACCESS_TOKEN,
    TOKEN_SECRET,
    deployment_of_its_own,
    expect_error,
    slugid,
    task_definition,
    task_queue_id,
)

WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}


@pytest.fixture(scope="module")
def auth_host(host_factory):
    """Clients are re-read at once, and temporary credentials get no extra clock skew."""
    return host_factory(client_cache_seconds=0, claim_work_wait=1, claim_work_poll_interval=0.2)


@pytest.fixture(scope="module")
def closed_host(tmp_path_factory):
    """A deployment whose anonymous role starts empty: what a caller holds is what its credentials give (Taskcluster
    gives every caller the anonymous role again after `authorizedScopes` narrowed theirs). Its own Azurite: the
    role is the deployment's, shared by every host over the same storage."""
    with deployment_of_its_own(tmp_path_factory, "closed") as factory:
        yield factory(anonymous_scopes="[]", claim_work_wait=1, claim_work_poll_interval=0.2)


@pytest.fixture(scope="module")
def expiring_host(host_factory):
    """Claims of 2 s and temporary credentials with no clock skew: credentials expire at takenUntil."""
    return host_factory(certificate_skew=0, claim_timeout=2, claim_work_wait=1, claim_work_poll_interval=0.2)


@pytest.fixture(scope="module")
def make_client(azurite):
    """Create a client in the Clients table, as the `clients` command does; returns its credentials."""

    def make(*scopes, **options):
        async def go():
            tables = AzureTables(azurite.connection_string)
            try:
                store = ClientStore(
                    tables, token_secret=TOKEN_SECRET, root_client_id="root", root_access_token=ROOT_ACCESS_TOKEN
                )
                client = await store.create(f"test/{uuid.uuid4().hex[:12]}", list(scopes), **options)
                return {"clientId": client.client_id, "accessToken": client.access_token}
            finally:
                await tables.close()

        return asyncio.run(go())

    return make


def client_for(host, credentials=None, **options):
    opts = {"rootUrl": host.root_url, "maxRetries": 0, **options}
    if credentials is not None:
        opts["credentials"] = dict(credentials)  # the client turns the values it is given into bytes
    return taskcluster.Queue(opts)


def root(host, **options):
    return client_for(host, {"clientId": "root", "accessToken": ROOT_ACCESS_TOKEN}, **options)


def hawk_request(
    host,
    method,
    path,
    *,
    client_id="root",
    key=ROOT_ACCESS_TOKEN,
    body=None,
    send_body=None,
    ext=None,
    tamper=None,
    timestamp=None,
):
    """A request signed by hand with mohawk, optionally altered after signing."""
    url = f"{host.root_url}/api/queue/v1{path}"
    content = json.dumps(body) if body is not None else ""
    sender = mohawk.Sender(
        {"id": client_id, "key": key, "algorithm": "sha256"},
        url,
        method,
        content=content,
        content_type="application/json" if body is not None else "",
        ext=ext,
        _timestamp=timestamp,
    )
    header = sender.request_header
    if tamper:
        header = tamper(header)
    headers = {"Authorization": header}
    if body is not None:
        headers["Content-Type"] = "application/json"
    data = send_body if send_body is not None else content
    return httpx.request(method, url, headers=headers, content=data.encode() if data else None)


def created_task(host, **overrides):
    task_id = slugid()
    definition = task_definition(**overrides)
    root(host).createTask(task_id, definition)
    return task_id, definition


# --- Hawk -------------------------------------------------------------------------------------------------------


def test_root_credentials_work_through_the_official_client(auth_host):
    task_id, _ = created_task(auth_host)
    assert root(auth_host).status(task_id)["status"]["taskId"] == task_id


def test_wrong_key_is_401_with_www_authenticate(auth_host):
    task_id, _ = created_task(auth_host)
    response = hawk_request(auth_host, "POST", f"/task/{task_id}/cancel", key="not-the-right-key-at-all")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "hawk"
    assert response.json()["code"] == "AuthenticationFailed"
    assert "ours" not in response.json()["message"]  # never reveals the expected MAC
    assert root(auth_host).status(task_id)["status"]["state"] == "pending"


def test_unknown_client_is_401(auth_host):
    response = hawk_request(auth_host, "GET", "/ping", client_id="nobody", key="x" * 44)
    # Not Taskcluster's "Client with clientId 'nobody' not found": whether it exists is not told without its key.
    assert response.json()["message"].startswith("Unauthorized: Bad mac")
    assert response.status_code == 401


def test_tampered_mac_is_401(auth_host):
    task_id, _ = created_task(auth_host)

    def flip(header):
        mac = header.split('mac="')[1].split('"')[0]
        forged = base64.b64encode(bytes(b ^ 1 for b in base64.b64decode(mac))).decode()
        return header.replace(mac, forged)

    response = hawk_request(auth_host, "POST", f"/task/{task_id}/cancel", tamper=flip)
    assert response.status_code == 401
    assert root(auth_host).status(task_id)["status"]["state"] == "pending"


def test_tampered_payload_is_401_and_changes_nothing(auth_host):
    task_id = slugid()
    good = task_definition()
    evil = dict(good, payload={"command": ["rm", "-rf", "/"]})
    response = hawk_request(auth_host, "PUT", f"/task/{task_id}", body=good, send_body=json.dumps(evil))
    assert response.status_code == 401 and "payload hash" in response.json()["message"]
    expect_error(404, "ResourceNotFound", root(auth_host).status, task_id)
    assert hawk_request(auth_host, "PUT", f"/task/{task_id}", body=good).status_code == 200


def test_request_without_payload_hash_is_accepted(auth_host):
    # Taskcluster does not require the hash; the official clients always send one.
    task_id, _ = created_task(auth_host)
    url = f"{auth_host.root_url}/api/queue/v1/task/{task_id}/cancel"
    sender = mohawk.Sender(
        {"id": "root", "key": ROOT_ACCESS_TOKEN, "algorithm": "sha256"},
        url,
        "POST",
        content=None,
        content_type=None,
        always_hash_content=False,
    )
    response = httpx.post(url, headers={"Authorization": sender.request_header})
    assert response.status_code == 200 and response.json()["status"]["state"] == "exception"


@pytest.mark.parametrize("offset, status", [(-14 * 60, 200), (14 * 60, 200), (-16 * 60, 401), (16 * 60, 401)])
def test_fifteen_minutes_of_clock_skew(auth_host, offset, status):
    response = hawk_request(auth_host, "GET", "/ping", timestamp=str(int(time.time()) + offset))
    assert response.status_code == status


def test_anonymous_reads_but_does_not_write(auth_host):
    task_id, _ = created_task(auth_host)
    anonymous = client_for(auth_host)
    assert anonymous.status(task_id)["status"]["taskId"] == task_id
    assert anonymous.task(task_id)["payload"]
    body = expect_error(403, "InsufficientScopes", anonymous.cancelTask, task_id)
    assert "anonymous" in body["message"] and "queue:cancel-task" in body["message"]
    other = slugid()
    expect_error(403, "InsufficientScopes", anonymous.createTask, other, task_definition())
    expect_error(404, "ResourceNotFound", root(auth_host).status, other)


# --- Clients ----------------------------------------------------------------------------------------------------


def test_disabled_expired_and_deleted_clients_cannot_authenticate(auth_host, make_client, azurite):
    expired = make_client("queue:status:*", expires=timeutil.now() - dt.timedelta(minutes=1))
    expect_error(401, "AuthenticationFailed", client_for(auth_host, expired).ping)
    creds = make_client("*")
    assert client_for(auth_host, creds).ping()["alive"]

    async def change(action):
        tables = AzureTables(azurite.connection_string)
        try:
            store = ClientStore(
                tables, token_secret=TOKEN_SECRET, root_client_id="root", root_access_token=ROOT_ACCESS_TOKEN
            )
            return await getattr(store, action[0])(creds["clientId"], *action[1:])
        finally:
            await tables.close()

    asyncio.run(change(("set_disabled", True)))
    body = expect_error(401, "AuthenticationFailed", client_for(auth_host, creds).ping)
    assert "disabled" in body["message"]
    asyncio.run(change(("set_disabled", False)))
    assert client_for(auth_host, creds).ping()["alive"]
    reset = asyncio.run(change(("reset",)))
    expect_error(401, "AuthenticationFailed", client_for(auth_host, creds).ping)
    assert client_for(auth_host, {"clientId": reset.client_id, "accessToken": reset.access_token}).ping()
    asyncio.run(change(("delete",)))
    expect_error(
        401,
        "AuthenticationFailed",
        client_for(auth_host, {"clientId": reset.client_id, "accessToken": reset.access_token}).ping,
    )


# --- Scopes of each endpoint ------------------------------------------------------------------------------------


def test_create_task_needs_every_scope(auth_host, make_client):
    tq = task_queue_id()
    definition = task_definition(
        taskQueueId=tq,
        priority="high",
        routes=["index.a"],
        scopes=["secrets:get:x"],
        schedulerId="sched",
        projectId="proj",
    )
    needed = [
        f"queue:create-task:high:{tq}",
        "queue:route:index.a",
        "secrets:get:x",
        "queue:scheduler-id:sched",
        "queue:create-task:project:proj",
    ]
    for left_out in needed:
        creds = make_client(*[s for s in needed if s != left_out])
        task_id = slugid()
        body = expect_error(403, "InsufficientScopes", client_for(auth_host, creds).createTask, task_id, definition)
        assert left_out in body["message"]
        expect_error(404, "ResourceNotFound", root(auth_host).status, task_id)
    creds = make_client(*needed)
    assert client_for(auth_host, creds).createTask(slugid(), definition)["status"]["state"] == "pending"


@pytest.mark.parametrize(
    "held, priority, allowed",
    [
        ("high", "high", True),
        ("high", "lowest", True),
        ("high", "medium", True),
        ("high", "very-high", False),
        ("high", "highest", False),
        ("highest", "highest", True),
        ("highest", "lowest", True),
        ("lowest", "low", False),
    ],
)
def test_a_priority_scope_permits_that_priority_and_lower(auth_host, make_client, held, priority, allowed):
    tq = task_queue_id()
    creds = make_client(f"queue:create-task:{held}:{tq}", "queue:scheduler-id:-", "queue:create-task:project:none")
    queue = client_for(auth_host, creds)
    definition = task_definition(taskQueueId=tq, priority=priority)
    if allowed:
        assert queue.createTask(slugid(), definition)["status"]["state"] == "pending"
    else:
        expect_error(403, "InsufficientScopes", queue.createTask, slugid(), definition)


@pytest.mark.parametrize("action", ["scheduleTask", "rerunTask", "cancelTask"])
def test_task_actions_accept_scheduler_project_or_legacy_scopes(auth_host, make_client, action):
    scope = {"scheduleTask": "schedule-task", "rerunTask": "rerun-task", "cancelTask": "cancel-task"}[action]
    task_id, definition = created_task(auth_host, dependencies=None, schedulerId="sch", projectId="prj")
    group = definition.get("taskGroupId", task_id)
    expect_error(403, "InsufficientScopes", getattr(client_for(auth_host, make_client("queue:x")), action), task_id)
    for scopes in (
        [f"queue:{scope}:sch/{group}/{task_id}"],
        [f"queue:{scope}-in-project:prj"],
        [f"queue:{scope}", f"assume:scheduler-id:sch/{group}"],
    ):
        getattr(client_for(auth_host, make_client(*scopes)), action)(task_id)


def test_read_endpoints_need_their_scopes(closed_host):
    auth_host = closed_host
    task_id, _ = created_task(auth_host)
    # Without anonymous scopes, reads need their own scopes: narrow with authorizedScopes to see that.
    narrow = root(auth_host, authorizedScopes=["queue:status:" + task_id])
    assert narrow.status(task_id)
    expect_error(403, "InsufficientScopes", narrow.claimTask, task_id, "0", WORKER)
    expect_error(403, "InsufficientScopes", narrow.cancelTask, task_id)
    other, _ = created_task(auth_host)
    expect_error(403, "InsufficientScopes", narrow.status, other)
    expect_error(403, "InsufficientScopes", narrow.task, task_id)


def test_claim_work_and_claim_task_scopes(auth_host, make_client):
    tq = task_queue_id()
    task_id, _ = created_task(auth_host, taskQueueId=tq)
    no_worker_id = client_for(auth_host, make_client(f"queue:claim-work:{tq}"))
    body = expect_error(403, "InsufficientScopes", no_worker_id.claimWork, tq, {**WORKER, "tasks": 1})
    assert "queue:worker-id:wg-1/worker-1" in body["message"]
    wrong_queue = client_for(auth_host, make_client("queue:claim-work:other/queue", "queue:worker-id:*"))
    expect_error(403, "InsufficientScopes", wrong_queue.claimWork, tq, {**WORKER, "tasks": 1})
    expect_error(
        403,
        "InsufficientScopes",
        client_for(auth_host, make_client("queue:worker-id:*")).claimTask,
        task_id,
        "0",
        WORKER,
    )
    assert root(auth_host).status(task_id)["status"]["state"] == "pending"
    worker = client_for(auth_host, make_client(f"queue:claim-work:{tq}", "queue:worker-id:wg-1/*"))
    [claim] = worker.claimWork(tq, {**WORKER, "tasks": 1})["tasks"]
    assert claim["status"]["taskId"] == task_id
    other_id, _ = created_task(auth_host, taskQueueId=tq)
    claimer = client_for(auth_host, make_client(f"queue:claim-task:{tq}", "queue:worker-id:wg-1/worker-1"))
    assert claimer.claimTask(other_id, "0", WORKER)["runId"] == 0


# --- Temporary credentials --------------------------------------------------------------------------------------


def claimed(host, **overrides):
    tq = task_queue_id()
    task_id, _ = created_task(host, taskQueueId=tq, **overrides)
    [claim] = root(host).claimWork(tq, {**WORKER, "tasks": 1})["tasks"]
    return task_id, claim


def test_claim_credentials_serve_their_own_run_and_nothing_else(auth_host):
    task_id, claim = claimed(auth_host, retries=1)
    other_id, other_claim = claimed(auth_host)
    mine = client_for(auth_host, claim["credentials"])
    reclaim = mine.reclaimTask(task_id, "0")
    # Another run's credentials cannot touch this run, nor can this run's credentials touch another.
    theirs = client_for(auth_host, other_claim["credentials"])
    expect_error(403, "InsufficientScopes", theirs.reclaimTask, task_id, "0")
    expect_error(403, "InsufficientScopes", theirs.reportCompleted, task_id, "0")
    expect_error(403, "InsufficientScopes", mine.reportFailed, other_id, "0")
    expect_error(403, "InsufficientScopes", mine.cancelTask, task_id)
    expect_error(403, "InsufficientScopes", mine.createTask, slugid(), task_definition())
    # Fresh credentials from the reclaim work; so did the first ones.
    fresh = client_for(auth_host, reclaim["credentials"])
    assert fresh.reportException(task_id, "0", {"reason": "worker-shutdown"})["status"]["runs"][1]["state"] == "pending"
    # The retry is run 1: run 0's credentials cannot resolve it.
    root(auth_host).claimTask(task_id, "1", WORKER)
    expect_error(403, "InsufficientScopes", fresh.reportCompleted, task_id, "1")
    assert root(auth_host).status(task_id)["status"]["runs"][1]["state"] == "running"


def test_claim_credentials_expire_at_taken_until(expiring_host):
    task_id, claim = claimed(expiring_host)
    mine = client_for(expiring_host, claim["credentials"])
    mine.reclaimTask(task_id, "0")
    time.sleep(max(0.0, (timeutil.parse(claim["takenUntil"]) - timeutil.now()).total_seconds()) + 0.5)
    body = expect_error(401, "AuthenticationFailed", mine.reportCompleted, task_id, "0")
    assert body["message"].startswith("ext.certificate.expiry < now")


def temp_creds(issuer_id, issuer_token, scopes, *, start=None, expiry=None, name=None, tamper=None):
    """Temporary credentials built with the official client's own function."""
    start = start or timeutil.now() - dt.timedelta(minutes=1)
    expiry = expiry or timeutil.now() + dt.timedelta(hours=1)
    creds = taskcluster.createTemporaryCredentials(issuer_id, issuer_token, start, expiry, scopes, name=name)
    if tamper:
        cert = json.loads(creds["certificate"])
        tamper(cert)
        creds["certificate"] = json.dumps(cert)
    return creds


def test_official_temporary_credentials_work_and_narrow(auth_host):
    task_id, _ = created_task(auth_host)
    creds = temp_creds("root", ROOT_ACCESS_TOKEN, ["queue:cancel-task:*"])
    assert client_for(auth_host, creds).cancelTask(task_id)["status"]["state"] == "exception"
    named = temp_creds("root", ROOT_ACCESS_TOKEN, ["queue:rerun-task:*"], name="my-temp-client")
    assert named["clientId"] == "my-temp-client"
    assert client_for(auth_host, named).rerunTask(task_id)["status"]["state"] == "pending"
    expect_error(403, "InsufficientScopes", client_for(auth_host, named).cancelTask, task_id)


@pytest.mark.parametrize(
    "case", ["expired", "future", "too-long", "forged-signature", "more-scopes-than-signed", "wrong-issuer-token"]
)
def test_bad_certificates_are_401(auth_host, case):
    task_id, _ = created_task(auth_host)
    now = timeutil.now()
    kwargs = {}
    tamper = None
    issuer_token = ROOT_ACCESS_TOKEN
    if case == "expired":
        kwargs = {"start": now - dt.timedelta(hours=2), "expiry": now - dt.timedelta(minutes=6)}  # past the skew
    elif case == "future":
        kwargs = {"start": now + dt.timedelta(hours=1), "expiry": now + dt.timedelta(hours=2)}
    elif case == "too-long":
        kwargs = {"start": now - dt.timedelta(minutes=1), "expiry": now + dt.timedelta(days=32)}
    elif case == "forged-signature":
        tamper = lambda cert: cert.update(signature=base64.b64encode(b"x" * 32).decode())  # noqa: E731
    elif case == "more-scopes-than-signed":
        tamper = lambda cert: cert["scopes"].append("queue:cancel-task:*")  # noqa: E731
    elif case == "wrong-issuer-token":
        issuer_token = "a" * 44
    scopes = ["queue:status:*"] if case == "more-scopes-than-signed" else ["queue:cancel-task:*"]
    if case == "too-long":
        # The client refuses to make such a certificate; sign one by hand.
        creds = _hand_made_cert("root", ROOT_ACCESS_TOKEN, scopes, **kwargs)
    else:
        creds = temp_creds("root", issuer_token, scopes, tamper=tamper, **kwargs)
    expect_error(401, "AuthenticationFailed", client_for(auth_host, creds).cancelTask, task_id)
    assert root(auth_host).status(task_id)["status"]["state"] == "pending"


def _hand_made_cert(issuer, token, scopes, *, start, expiry):
    seed = "s" * 44
    start_ms, expiry_ms = int(start.timestamp() * 1000), int(expiry.timestamp() * 1000)
    lines = ["version:1", f"seed:{seed}", f"start:{start_ms}", f"expiry:{expiry_ms}", "scopes:", *scopes]
    signature = base64.b64encode(hmac.new(token.encode(), "\n".join(lines).encode(), hashlib.sha256).digest())
    access = base64.urlsafe_b64encode(hmac.new(token.encode(), seed.encode(), hashlib.sha256).digest())
    cert = {
        "version": 1,
        "scopes": scopes,
        "start": start_ms,
        "expiry": expiry_ms,
        "seed": seed,
        "signature": signature.decode(),
    }
    return {"clientId": issuer, "accessToken": access.decode().rstrip("="), "certificate": json.dumps(cert)}


def test_certificate_wider_than_its_issuer_is_401(auth_host, make_client):
    task_id, _ = created_task(auth_host)
    issuer = make_client("queue:status:*", "auth:create-client:*")
    creds = temp_creds(issuer["clientId"], issuer["accessToken"], ["queue:cancel-task:*"])
    body = expect_error(401, "AuthenticationFailed", client_for(auth_host, creds).cancelTask, task_id)
    assert "doesn't satisfy all certificate scopes queue:cancel-task:*" in body["message"]
    # A named certificate also needs auth:create-client:<name>.
    no_create = make_client("queue:cancel-task:*")
    named = temp_creds(no_create["clientId"], no_create["accessToken"], ["queue:cancel-task:*"], name="x/y")
    expect_error(401, "AuthenticationFailed", client_for(auth_host, named).cancelTask, task_id)
    assert root(auth_host).status(task_id)["status"]["state"] == "pending"


def test_authorized_scopes_narrow_and_never_widen(auth_host, make_client):
    task_id, _ = created_task(auth_host)
    narrowed = root(auth_host, authorizedScopes=["queue:status:*"])
    expect_error(403, "InsufficientScopes", narrowed.cancelTask, task_id)
    limited = make_client("queue:status:*")
    widened = client_for(auth_host, limited, authorizedScopes=["queue:cancel-task:*"])
    expect_error(401, "AuthenticationFailed", widened.cancelTask, task_id)
    temp = temp_creds("root", ROOT_ACCESS_TOKEN, ["queue:cancel-task:*", "queue:status:*"])
    both = client_for(auth_host, temp, authorizedScopes=["queue:status:*"])
    expect_error(403, "InsufficientScopes", both.cancelTask, task_id)
    assert root(auth_host).status(task_id)["status"]["state"] == "pending"


def test_task_scopes_cannot_escalate(auth_host, make_client):
    tq = task_queue_id()
    creds = make_client(f"queue:create-task:lowest:{tq}", "queue:scheduler-id:-", "queue:create-task:project:none")
    task_id = slugid()
    body = expect_error(
        403,
        "InsufficientScopes",
        client_for(auth_host, creds).createTask,
        task_id,
        task_definition(taskQueueId=tq, scopes=["queue:cancel-task:*"]),
    )
    assert "queue:cancel-task:*" in body["message"]
    expect_error(404, "ResourceNotFound", root(auth_host).status, task_id)


# --- Signed URLs (bewit) ----------------------------------------------------------------------------------------


def test_signed_urls(auth_host, make_client):
    task_id, _ = created_task(auth_host)
    reader = make_client(f"queue:status:{task_id}")
    narrowed = root(auth_host, authorizedScopes=[f"queue:status:{task_id}"])
    for client in (client_for(auth_host, reader), narrowed):
        url = client.buildSignedUrl("status", task_id, expiration=60)
        response = httpx.get(url)
        assert response.status_code == 200 and response.json()["status"]["taskId"] == task_id
    url = client_for(auth_host, reader).buildSignedUrl("status", task_id, expiration=60)
    bewit = url.split("bewit=")[1]
    raw = base64.urlsafe_b64decode(bewit + "=" * (-len(bewit) % 4)).decode()
    client_id, exp, mac, ext = raw.split("\\")
    for forged in (
        f"{client_id}\\{int(exp) + 3600}\\{mac}\\{ext}",  # longer life
        f"root\\{exp}\\{mac}\\{ext}",
    ):  # another client
        token = base64.urlsafe_b64encode(forged.encode()).decode().rstrip("=")
        assert httpx.get(url.replace(bewit, token)).status_code == 401
    other = slugid()
    assert httpx.get(url.replace(task_id, other)).status_code == 401  # another resource
    expired = client_for(auth_host, reader).buildSignedUrl("status", task_id, expiration=-5)
    response = httpx.get(expired)
    assert response.status_code == 401 and "expired" in response.json()["message"]


def test_tasks_and_statuses_need_a_scope_per_task(closed_host):
    auth_host = closed_host
    a, _ = created_task(auth_host)
    b, _ = created_task(auth_host)
    narrow = root(auth_host, authorizedScopes=[f"queue:status:{a}", f"queue:get-task:{a}"])
    assert [s["taskId"] for s in narrow.statuses({"taskIds": [a]})["statuses"]] == [a]
    body = expect_error(403, "InsufficientScopes", narrow.statuses, {"taskIds": [a, b]})
    assert f"queue:status:{b}" in body["message"]
    expect_error(403, "InsufficientScopes", narrow.tasks, {"taskIds": [b]})


def test_clients_command(auth_host, azurite, tmp_path):
    import subprocess
    import sys

    from tests.conftest import PROJECT, base_env

    env = base_env(azurite.connection_string) | {"QUEUE_DATA_DIR": str(tmp_path)}

    def clients(*args):
        done = subprocess.run(
            [sys.executable, "-m", "local_host", "--settings", "/nonexistent", "clients", "--json", *args],
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout) if done.stdout.strip().startswith(("{", "[")) else done.stdout

    name = f"ci/{uuid.uuid4().hex[:10]}"
    created = clients("create", name, "--scope", "queue:cancel-task:*", "--description", "made by a test")
    assert created["clientId"] == name and created["scopes"] == ["queue:cancel-task:*"]
    creds = {"clientId": name, "accessToken": created["accessToken"]}
    task_id, _ = created_task(auth_host)
    assert client_for(auth_host, creds).cancelTask(task_id)["status"]["state"] == "exception"
    listed = clients("list")
    assert any(c["clientId"] == name and "accessToken" not in c for c in listed)
    reset = clients("reset", name)
    assert reset["accessToken"] != created["accessToken"]
    expect_error(401, "AuthenticationFailed", client_for(auth_host, creds).ping)
    assert client_for(auth_host, {"clientId": name, "accessToken": reset["accessToken"]}).ping()
    clients("delete", name)
    expect_error(
        401, "AuthenticationFailed", client_for(auth_host, {"clientId": name, "accessToken": reset["accessToken"]}).ping
    )
