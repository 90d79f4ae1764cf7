"""Deployed, the queue reaches storage with a managed identity and no connection string (issue #8).

Azurite serves HTTPS and accepts bearer tokens (`--oauth basic`: it checks a token's claims, not its signature).
A stand-in for the managed-identity endpoint that Azure gives a function app (`IDENTITY_ENDPOINT` and
`IDENTITY_HEADER`, the App Service protocol) issues the tokens, so the code under test is the production path:
azure-identity's ManagedIdentityCredential for the user-assigned identity of `QUEUE_STORAGE__clientId`, the
identity-based settings the Functions host reads for the queue triggers, blob URLs signed with a user
delegation key, and polling URLs signed with the account key given apart (`QUEUE_STORAGE_ACCOUNT_KEY`). Without
that key, polling URLs are user delegation SAS (as in Azure): Azurite 3.37's queue service issues no delegation
key, which is answered clearly, and is why the key is given apart here (the signing itself:
tests/unit/test_delegation_keys.py).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import secrets
import ssl
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import taskcluster
from azure.storage.blob import BlobClient

from local_host import azurite as azurite_mod
from shared import timeutil
from tests.acceptance.helpers import poll_task_urls
from tests.conftest import slugid, task_definition, wait_for
from tests.stand_ins import JsonEndpoint

CLIENT_ID = "5f3c1b9e-0d1a-4c55-9d7e-3a1f2b4c6d8e"  # of the user-assigned identity the deployment creates
WORKER = {"workerGroup": "wg-identity", "workerId": "worker-1"}


def _self_signed(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def _jwt(audience: str) -> str:
    """A token of the shape Entra ID issues (Azurite reads aud, iss, nbf, exp; the signature is not checked)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    tenant, now = "72f988bf-86f1-41af-91ab-2d7cd011db47", int(time.time())
    claims = {
        "aud": audience,
        "iss": f"https://sts.windows.net/{tenant}/",
        "iat": now - 60,
        "nbf": now - 60,
        "exp": now + 3600,
        "oid": "7d3b5e6a-1b2c-4d5e-8f90-a1b2c3d4e5f6",
        "tid": tenant,
        "appid": CLIENT_ID,
    }
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def trusting(tls: tuple[Path, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(tls[0]))


class IdentityEndpoint(JsonEndpoint):
    """The App Service managed-identity endpoint: GET ?api-version&resource&client_id with X-IDENTITY-HEADER."""

    def __init__(self) -> None:
        self.header = secrets.token_hex(16)
        self.requests: list[dict[str, str]] = []
        super().__init__(self._token)
        self.url += "msi/token"

    def _token(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, Any]:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(path).query))
        if headers.get("X-IDENTITY-HEADER") != self.header:
            return 401, {"error": "wrong identity header"}
        self.requests.append(query)
        return 200, {
            "access_token": _jwt(query["resource"]),
            "token_type": "Bearer",
            "expires_on": str(int(time.time()) + 3600),
            "resource": query["resource"],
            "client_id": query.get("client_id", ""),
        }


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> tuple[Path, Path]:
    return _self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def identity() -> Iterator[IdentityEndpoint]:
    endpoint = IdentityEndpoint()
    yield endpoint
    endpoint.stop()


@pytest.fixture(scope="module")
def oauth_azurite(tmp_path_factory, tls) -> Iterator[azurite_mod.Azurite]:
    instance = azurite_mod.start(tmp_path_factory.mktemp("azurite-oauth"), in_memory=True, tls=tls, oauth=True)
    yield instance
    instance.stop()


def identity_env(
    azurite: azurite_mod.Azurite, identity: IdentityEndpoint, cert: Path, *, account_key: str | None
) -> dict[str, str]:
    """The app settings infra/ gives the function app, pointed at Azurite; no connection string anywhere."""
    env = {
        "QUEUE_STORAGE": "",
        "QUEUE_STORAGE__tableServiceUri": azurite.endpoint("table"),
        "QUEUE_STORAGE__queueServiceUri": azurite.endpoint("queue"),
        "QUEUE_STORAGE__blobServiceUri": azurite.endpoint("blob"),
        "QUEUE_STORAGE__credential": "managedidentity",
        "QUEUE_STORAGE__clientId": CLIENT_ID,
        "IDENTITY_ENDPOINT": identity.url,
        "IDENTITY_HEADER": identity.header,
        "SSL_CERT_FILE": str(cert),  # the host trusts Azurite's certificate as it would Azure's
    }
    if account_key:
        env["QUEUE_STORAGE_ACCOUNT_KEY"] = account_key
    return env


@pytest.fixture(scope="module")
def identity_host(host_factory, oauth_azurite, identity, tls):
    return host_factory(
        storage="",
        claim_timeout=1,
        deadline_delay=0,
        claim_work_wait=1,
        extra_env=identity_env(oauth_azurite, identity, tls[0], account_key=oauth_azurite.key),
    )


def test_tasks_claims_and_artifacts_work_through_the_managed_identity(identity_host, identity, tls, oauth_azurite):
    queue = identity_host.client()
    task_id = slugid()
    definition = task_definition()
    queue.createTask(task_id, definition)
    [claim] = queue.claimWork(definition["taskQueueId"], {"tasks": 1, **WORKER})["tasks"]
    assert claim["status"]["taskId"] == task_id
    worker = taskcluster.Queue(
        {"rootUrl": identity_host.root_url, "credentials": claim["credentials"], "maxRetries": 0}
    )

    data = b"built by a managed identity\n" * 100
    created = worker.createArtifact(
        task_id,
        "0",
        "public/build.txt",
        {
            "storageType": "azure",
            "contentType": "text/plain",
            "contentLength": len(data),
            "expires": timeutil.iso(timeutil.now() + dt.timedelta(days=1)),
        },
    )
    put_query = urllib.parse.parse_qs(urllib.parse.urlsplit(created["putUrl"]).query)
    assert put_query["skoid"] and put_query["sktid"], "the upload URL is signed with a user delegation key"
    assert (
        httpx.put(created["putUrl"], content=data, headers=created["headers"], verify=trusting(tls)).status_code == 201
    )
    worker.finishArtifact(task_id, "0", "public/build.txt", {"uploadId": created["uploadId"]})
    url = queue.getArtifact(task_id, "0", "public/build.txt")["url"]
    # The download URL is a user delegation SAS for the snapshot finishArtifact took. Azurite 3.37 cannot check
    # such a SAS (its user-delegation string-to-sign leaves out a snapshot's name and time, which Azure signs and
    # the SDK includes), so the bytes at that snapshot are read here with the account key instead.
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert query["skoid"] and query["sr"] == ["bs"] and query["rsct"] == ["text/plain"], url
    path = urllib.parse.unquote(urllib.parse.urlsplit(url).path).split("/", 2)[2]  # <container>/<blob>
    container, blob = path.split("/", 1)
    snapshot = BlobClient(
        oauth_azurite.endpoint("blob"),
        container,
        blob,
        snapshot=query["snapshot"][0],
        credential={"account_name": azurite_mod.ACCOUNT, "account_key": oauth_azurite.key},
        connection_verify=str(tls[0]),
    )
    assert snapshot.download_blob().readall() == data

    worker.reportCompleted(task_id, "0")
    assert queue.status(task_id)["status"]["state"] == "completed"
    # Every token was asked for the user-assigned identity, for storage.
    assert identity.requests and {r.get("client_id") for r in identity.requests} == {CLIENT_ID}
    assert {r["resource"] for r in identity.requests} == {"https://storage.azure.com"}


def test_queue_triggers_read_the_identity_based_connection(identity_host):
    """The claim-expiry trigger (a queue trigger on QUEUE_STORAGE) retries a claim that was not renewed."""
    queue = identity_host.client()
    task_id = slugid()
    definition = task_definition()
    queue.createTask(task_id, definition)
    queue.claimWork(definition["taskQueueId"], {"tasks": 1, **WORKER})
    status = wait_for(lambda: (s := queue.status(task_id)["status"]) and len(s["runs"]) == 2 and s, timeout=20)
    assert status["runs"][0]["reasonResolved"] == "claim-expired" and status["runs"][1]["state"] == "pending"


def test_polling_urls_are_signed_with_the_account_key_given_apart(identity_host, tls):
    queue = identity_host.client()
    definition = task_definition()
    queue.createTask(slugid(), definition)
    urls = poll_task_urls(queue, definition["taskQueueId"])
    polled = [httpx.get(q["signedPollUrl"], verify=trusting(tls)) for q in urls["queues"]]
    assert all(r.status_code == 200 for r in polled)
    assert sum(r.text.count("<QueueMessage>") for r in polled) == 1


def test_without_the_account_key_polling_urls_ask_for_a_delegation_key_azurite_refuses_it_clearly(
    host_factory, oauth_azurite, identity, tls
):
    host = host_factory(
        storage="", claim_work_wait=1, extra_env=identity_env(oauth_azurite, identity, tls[0], account_key=None)
    )
    try:
        queue = host.client()
        definition = task_definition()
        task_id = slugid()
        queue.createTask(task_id, definition)
        with pytest.raises(taskcluster.exceptions.TaskclusterRestFailure) as failure:
            poll_task_urls(queue, definition["taskQueueId"])
        assert failure.value.status_code == 500
        message = failure.value.body["message"]
        assert "user delegation key" in message and "QUEUE_STORAGE_ACCOUNT_KEY" in message, message
        [claim] = queue.claimWork(definition["taskQueueId"], {"tasks": 1, **WORKER})["tasks"]
        assert claim["status"]["taskId"] == task_id
    finally:
        host.stop()
