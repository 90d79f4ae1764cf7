"""The Auth API's service-facing half through the official Python client's `Auth` class: authenticateHawk as
Taskcluster's other services call it (for every kind of caller, each refusal in Taskcluster's words),
testAuthenticate and testAuthenticateGet as client libraries check their signing, `static/` clientIds reserved,
listRoles2's pages, and the delegation endpoints answered as an unconfigured Taskcluster answers them."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

import httpx
import mohawk
import pytest
import taskcluster
from taskcluster.client import createApiClient

from shared import timeutil
from tests.conftest import ROOT_ACCESS_TOKEN, ROOT_CLIENT_ID, expect_error

ROOT = {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN}
SIGNED = "/api/secrets/v1/secret/project%2Fdemo%2Ftoken"  # what a service behind the rootUrl was asked


@pytest.fixture(scope="module")
def host(host_factory):
    return host_factory(client_cache_seconds=0)  # a disable or an expiry shows at once (the bound: unit tests)


def auth(host, credentials: dict[str, Any] | None = None, **options: Any) -> taskcluster.Auth:
    given = {"credentials": dict(credentials)} if credentials is not None else {}  # the client makes them bytes
    return taskcluster.Auth({"rootUrl": host.root_url, "maxRetries": 0, **given, **options})


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


def new_client(host, *scopes: str, expires: dt.datetime | None = None) -> dict[str, str]:
    when = timeutil.iso(expires or timeutil.now() + dt.timedelta(days=1))
    made = auth(host, ROOT).createClient(
        unique("svc/caller"), {"expires": when, "description": "d", "scopes": list(scopes)}
    )
    return {"clientId": made["clientId"], "accessToken": made["accessToken"]}


def signed(host, credentials: dict[str, Any], *, authorized: list[str] | None = None, ts: int | None = None) -> dict:
    """An authenticateHawk request for a GET that `credentials` signed, as a service passes it on."""
    options: dict[str, Any] = {"rootUrl": host.root_url, "credentials": dict(credentials)}
    if authorized is not None:
        options["authorizedScopes"] = authorized
    ext = taskcluster.Secrets(options).makeHawkExt()  # what the official client sends in ext
    sender = mohawk.Sender(
        {"id": credentials["clientId"], "key": credentials["accessToken"], "algorithm": "sha256"},
        host.root_url + SIGNED,
        "GET",
        always_hash_content=False,  # no body, no payload hash
        ext=taskcluster.utils.toStr(ext) if ext else None,
        _timestamp=ts,
    )
    port = httpx.URL(host.root_url).port
    return {
        "method": "get",
        "resource": SIGNED,
        "host": "127.0.0.1",
        "port": port,
        "authorization": sender.request_header,
    }


def check(host, request: dict) -> dict[str, Any]:
    return auth(host).authenticateHawk(request)  # without credentials, as Taskcluster's services call it


def test_a_permanent_client_is_answered_with_its_expanded_scopes_and_expiry(host):
    role = unique("project:builds")
    auth(host, ROOT).createRole(role, {"description": "d", "scopes": ["secrets:get:project/builds/*"]})
    expires = timeutil.now().replace(microsecond=0) + dt.timedelta(hours=5)
    client = new_client(host, f"assume:{role}", "hooks:trigger-hook:demo/*", expires=expires)
    answer = check(host, signed(host, client))
    assert answer["status"] == "auth-success" and answer["scheme"] == "hawk"
    assert answer["clientId"] == client["clientId"]
    assert {f"assume:{role}", "secrets:get:project/builds/*", "hooks:trigger-hook:demo/*"} <= set(answer["scopes"])
    assert "queue:get-task:*" in answer["scopes"]  # every caller holds the anonymous scopes
    assert timeutil.parse(answer["expires"]) == expires
    assert "hash" not in answer  # a GET's header carries no payload hash


def test_temporary_credentials_hold_their_certificate_scopes_until_it_expires(host):
    client = new_client(host, "secrets:get:project/*")
    start = timeutil.now() - dt.timedelta(minutes=1)
    temp = taskcluster.createTemporaryCredentials(
        client["clientId"], client["accessToken"], start, start + dt.timedelta(hours=1), ["secrets:get:project/a"]
    )
    answer = check(host, signed(host, temp))
    assert answer["status"] == "auth-success" and answer["clientId"] == client["clientId"]
    assert "secrets:get:project/a" in answer["scopes"] and "secrets:get:project/*" not in answer["scopes"]
    assert abs(timeutil.parse(answer["expires"]) - (start + dt.timedelta(hours=1))) < dt.timedelta(seconds=1)
    narrowed = check(host, signed(host, temp, authorized=["secrets:get:project/a"]))
    assert narrowed["status"] == "auth-success" and "secrets:get:project/a" in narrowed["scopes"]
    named = taskcluster.createTemporaryCredentials(
        ROOT_CLIENT_ID, ROOT_ACCESS_TOKEN, start, start + dt.timedelta(hours=1), ["x:y"], name="svc/named-temp"
    )
    assert check(host, signed(host, named))["clientId"] == "svc/named-temp"


def test_authorized_scopes_narrow_and_never_widen(host):
    client = new_client(host, "secrets:get:project/*", "secrets:set:project/*")
    answer = check(host, signed(host, client, authorized=["secrets:get:project/a"]))
    assert answer["status"] == "auth-success"
    assert "secrets:get:project/a" in answer["scopes"] and not any(
        s.startswith("secrets:set") for s in answer["scopes"]
    )
    wider = check(host, signed(host, client, authorized=["secrets:get:elsewhere/*"]))
    assert wider["status"] == "auth-failed"
    assert wider["message"].startswith("Supplied credentials do not satisfy authorizedScopes")


def test_a_bewit_authenticates_a_signed_url(host):
    client = new_client(host, "secrets:get:project/*")
    url = taskcluster.Secrets({"rootUrl": host.root_url, "credentials": dict(client)}).buildSignedUrl(
        "get", "project/a", expiration=300
    )
    parts = httpx.URL(url)
    request = {"method": "get", "resource": f"{parts.raw_path.decode()}", "host": parts.host, "port": parts.port}
    answer = check(host, request)
    assert answer["status"] == "auth-success" and answer["clientId"] == client["clientId"]
    expired = taskcluster.Secrets({"rootUrl": host.root_url, "credentials": dict(client)}).buildSignedUrl(
        "get", "project/a", expiration=-10
    )
    late = httpx.URL(expired)
    assert check(host, {**request, "resource": late.raw_path.decode()}) == {
        "status": "auth-failed",
        "message": "Unauthorized: Access expired",
    }


def test_a_request_without_credentials_gets_the_anonymous_scopes(host):
    answer = check(host, {"method": "get", "resource": SIGNED, "host": "127.0.0.1", "port": 80})
    assert answer["status"] == "no-auth" and answer["scheme"] == "none"
    assert "queue:get-task:*" in answer["scopes"] and "clientId" not in answer
    assert timeutil.parse(answer["expires"]) > timeutil.now() + dt.timedelta(minutes=14)


def test_refusals_read_as_taskclusters(host):
    client = new_client(host, "secrets:get:project/*")
    wrong = {**client, "accessToken": "x" * 44}
    assert check(host, signed(host, wrong)) == {"status": "auth-failed", "message": "Unauthorized: Bad mac"}
    # Whether a client exists is not told to someone without its key (Taskcluster says "not found"): a bad MAC.
    unknown = {"clientId": "svc/nobody-at-all", "accessToken": "x" * 44}
    assert check(host, signed(host, unknown))["message"] == "Unauthorized: Bad mac"
    disabled_wrong = {**client, "accessToken": "y" * 44}
    stale = signed(host, client, ts=int(time.time()) - 3600)
    assert check(host, stale)["message"] == "Unauthorized: Stale timestamp"
    moved = {**signed(host, client), "port": 1}  # signed for another port: the MAC covers it
    assert check(host, moved)["message"] == "Unauthorized: Bad mac"
    admin = auth(host, ROOT)
    admin.disableClient(client["clientId"])
    assert check(host, signed(host, client))["message"] == f"Client with clientId '{client['clientId']}' is disabled"
    assert check(host, signed(host, disabled_wrong))["message"] == "Unauthorized: Bad mac"  # told to the holder only
    admin.enableClient(client["clientId"])
    past = timeutil.iso(timeutil.now() - dt.timedelta(minutes=1))
    admin.updateClient(client["clientId"], {"expires": past, "description": "d", "scopes": ["secrets:get:project/*"]})
    assert check(host, signed(host, client))["message"] == f"Client with clientId: '{client['clientId']}' has expired"
    garbled = {**signed(host, client), "authorization": 'Hawk id="x", ts="1", nonce="n", mac="m", bogus="1"'}
    assert check(host, garbled)["message"] == "Bad Request: Unknown attribute: bogus"


def test_the_payload_hash_is_answered_for_the_service_to_check(host):
    body = b'{"secret": {}}'
    sender = mohawk.Sender(
        {"id": ROOT_CLIENT_ID, "key": ROOT_ACCESS_TOKEN, "algorithm": "sha256"},
        host.root_url + SIGNED,
        "PUT",
        content=body,
        content_type="application/json",
    )
    port = httpx.URL(host.root_url).port
    answer = check(
        host,
        {
            "method": "put",
            "resource": SIGNED,
            "host": "127.0.0.1",
            "port": port,
            "authorization": sender.request_header,
        },
    )
    assert (
        answer["status"] == "auth-success"
        and answer["hash"] == mohawk.util.calculate_payload_hash(body, "sha256", "application/json").decode()
    )


def test_test_authenticate_checks_a_clients_signing(host):
    tester = {"clientId": "tester", "accessToken": "no-secret"}
    answer = auth(host, tester).testAuthenticate({"clientScopes": ["test:a", "test:b"], "requiredScopes": ["test:a"]})
    assert answer == {"clientId": "tester", "scopes": ["assume:anonymous", "test:a", "test:b"]}
    expect_error(
        403,
        "InsufficientScopes",
        auth(host, tester).testAuthenticate,
        {"clientScopes": [], "requiredScopes": ["test:a"]},
    )
    expect_error(
        401,
        "AuthenticationFailed",
        auth(host, {**tester, "accessToken": "wrong"}).testAuthenticate,
        {"clientScopes": [], "requiredScopes": []},
    )
    start = timeutil.now() - dt.timedelta(minutes=1)
    temp = taskcluster.createTemporaryCredentials(
        "tester", "no-secret", start, start + dt.timedelta(hours=1), ["test:a"]
    )
    narrowed = auth(host, temp, authorizedScopes=["test:a"]).testAuthenticate(
        {"clientScopes": ["test:*"], "requiredScopes": ["test:a"]}
    )
    assert narrowed["scopes"] == ["assume:anonymous", "test:a"]
    assert auth(host, tester).testAuthenticateGet()["scopes"] == [
        "assume:anonymous",
        "auth:create-client:test:*",
        "test:*",
    ]
    url = auth(host, tester).buildSignedUrl("testAuthenticateGet")
    assert httpx.get(url).json()["clientId"] == "tester"


def test_static_client_ids_are_reserved(host):
    admin = auth(host, ROOT)
    body = expect_error(
        400,
        "InputError",
        admin.createClient,
        "static/taskcluster/hooks",
        {"expires": timeutil.iso(timeutil.now() + dt.timedelta(days=1)), "description": "d", "scopes": []},
    )
    assert body["message"].startswith(
        'clientId "static/taskcluster/hooks" starts with "static/" which is reserved for statically configured '
        "clients. Contact your administrator to change static clients."
    )
    for call in (admin.deleteClient, admin.resetAccessToken, admin.disableClient, admin.enableClient):
        expect_error(400, "InputError", call, "static/taskcluster/hooks")


def test_list_roles2_pages_in_role_order(host):
    admin = auth(host, ROOT)
    prefix = unique("paged")
    for n in range(5):
        admin.createRole(f"{prefix}:{n}", {"description": "d", "scopes": [f"x:{n}"]})
    every = [r["roleId"] for r in admin.listRoles2()["roles"]]
    paged, token = [], None
    while True:
        page = admin.listRoles2(query={"limit": 2, **({"continuationToken": token} if token else {})})
        assert len(page["roles"]) <= 2
        paged += [r["roleId"] for r in page["roles"]]
        token = page.get("continuationToken")
        if not token:
            break
    assert paged == every == sorted(every) and {f"{prefix}:{n}" for n in range(5)} <= set(paged)
    assert admin.listRoleIds(query={"limit": 1})["roleIds"] == every[:1]


def test_delegation_endpoints_check_scopes_then_say_nothing_is_delegated(host):
    admin = auth(host, ROOT)
    for call, args in (
        (admin.awsS3Credentials, ("read-only", "bucket", "some/prefix")),
        (admin.gcpCredentials, ("project", "account@example.com")),
        (admin.sentryDSN, ("project",)),
    ):
        body = expect_error(404, "ResourceNotFound", call, *args)
        assert "docs/auth.md#what-the-auth-api-delegates" in body["message"]
    expect_error(400, "InputError", admin.awsS3Credentials, "all", "bucket", "p")
    expect_error(403, "InsufficientScopes", auth(host).sentryDSN, "project")
    expect_error(
        404,
        "ResourceNotFound",
        admin.githubRepoToken,
        "app",
        "owner",
        {"permissions": {"contents": "read"}, "repositories": ["r"]},
    )
    reference = httpx.get(f"{host.root_url}/references/auth/v1/api.json").json()
    served = createApiClient("ServedAuth", {"reference": reference})(
        {"rootUrl": host.root_url, "maxRetries": 0, "credentials": ROOT}
    )
    assert served.azureAccounts() == {"accounts": []}
    body = expect_error(404, "ResourceNotFound", served.azureTableSAS, "account", "table", "read-write")
    assert body["message"].startswith("Account 'account' not found, can't delegate access")
    body = expect_error(404, "ResourceNotFound", admin.websocktunnelToken, "audience", "client")
    assert "QUEUE_WEBSOCKTUNNEL_SECRET" in body["message"]


def test_websocktunnel_tokens_are_signed_with_the_shared_secret(host_factory):
    import jwt

    secret = uuid.uuid4().hex + uuid.uuid4().hex  # a generated secret (a guessable one stops the host)
    host = host_factory(websocktunnel_secret=secret)
    answer = auth(host, ROOT).websocktunnelToken("my-audience", "worker-1")
    claims = jwt.decode(answer["token"], secret, algorithms=["HS256"], audience="my-audience")
    assert claims["tid"] == "worker-1" and claims["sub"] == ROOT_CLIENT_ID and claims["iss"] == "taskcluster-auth"
    assert claims["exp"] - claims["iat"] == 96 * 3600
    assert timeutil.parse(answer["expires"]).timestamp() == claims["exp"]
