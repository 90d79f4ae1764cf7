"""What a holder of an upload URL can do beyond the upload it is for, on Azurite. An `s3` putUrl is the queue's
own, signed for one artifact until it expires: altered, expired, or carrying Azure's query parameters, it is
refused and changes nothing. An Azure SAS (the `azure` and `object` putUrls) names kinds of operation, not one
operation, so it can also take a lease or make an append blob: none of these may make a read of the artifact fail;
each leaves the artifact readable, or not uploaded (404), never a 500 (docs/security.md)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
import urllib.parse

import httpx
import pytest
import taskcluster
from azure.storage.blob import BlobServiceClient

from shared.domain.artifacts import S3_BLOCK, blob_path, upload_signature
from tests.acceptance.helpers import anonymous, claimed, in_days
from tests.conftest import ROOT_ACCESS_TOKEN, expect_error, slugid

LEASE = {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "-1", "x-ms-version": "2021-08-06"}


@pytest.fixture
def queue(host):
    return host.client()


def with_query(url: str, **changes: str | None) -> str:
    """The URL with query parameters changed (None: removed), the SAS kept."""
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k not in changes]
    query += [(k, v) for k, v in changes.items() if v is not None]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def s3_artifact(queue, name="public/data.bin"):
    task_id, worker = claimed(queue)
    created = worker.createArtifact(
        task_id, "0", name, {"storageType": "s3", "expires": in_days(), "contentType": "application/octet-stream"}
    )
    return task_id, name, created["putUrl"]


def read(host, task_id, name):
    return httpx.get(anonymous(host).buildUrl("getArtifact", task_id, "0", name), follow_redirects=True)


def test_an_s3_put_url_is_the_queues_and_answers_as_s3(host, queue):
    """The putUrl is the queue's own, not a storage SAS: nothing it allows reaches Blob Storage but the upload."""
    task_id, name, url = s3_artifact(queue)
    assert url.startswith(f"{host.root_url}/api/queue/v1/artifact-upload/{task_id}/0/public/data.bin?")
    put = httpx.put(url, content=b"data")
    assert put.status_code == 200 and put.headers["etag"] == f'"{hashlib.md5(b"data").hexdigest()}"'
    assert read(host, task_id, name).content == b"data"


@pytest.mark.parametrize("tamper", ["signature", "name", "run", "expires", "extra-query", "azure-query"])
def test_a_tampered_s3_put_url_is_refused_and_changes_nothing(host, queue, tamper):
    task_id, name, url = s3_artifact(queue, f"public/{tamper}.bin")
    assert httpx.put(url, content=b"kept").status_code == 200
    signature = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))["signature"]
    bad, status = {
        "signature": (with_query(url, signature=signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")), 403),
        "name": (url.replace(f"/public/{tamper}.bin?", "/public/other.bin?"), 403),
        "run": (url.replace(f"/{task_id}/0/", f"/{task_id}/1/"), 403),
        "expires": (with_query(url, expires="9999999999"), 403),
        "extra-query": (with_query(url, evil="1"), 400),
        "azure-query": (with_query(url, comp="lease"), 400),
    }[tamper]
    answer = httpx.put(bad, content=b"changed", headers=LEASE)
    assert answer.status_code == status, answer.text
    assert answer.json()["code"] in ("InsufficientScopes", "InvalidRequestArguments")
    assert read(host, task_id, name).content == b"kept"


def test_an_expired_s3_put_url_is_refused(host, queue):
    task_id, name, url = s3_artifact(queue, "public/expired.bin")
    past = 1_700_000_000
    key = hmac.new(ROOT_ACCESS_TOKEN.encode(), b"s3-upload-signing-key", hashlib.sha256).digest()
    expired = with_query(url, expires=str(past), signature=upload_signature(key, task_id, 0, name, past))
    answer = httpx.put(expired, content=b"late")
    assert answer.status_code == 403 and "expired at 2023-11-14" in answer.json()["message"], answer.text
    expect_error(404, "ResourceNotFound", anonymous(host).getArtifact, task_id, "0", name)


def test_an_s3_upload_with_a_wrong_md5_or_cut_short_stores_nothing(host, queue):
    task_id, name, url = s3_artifact(queue, "public/digest.bin")
    wrong = httpx.put(url, content=b"data", headers={"Content-MD5": base64.b64encode(b"0" * 16).decode()})
    assert wrong.status_code == 400 and "BadDigest" in wrong.json()["message"]
    right = httpx.put(
        url, content=b"data", headers={"Content-MD5": base64.b64encode(hashlib.md5(b"data").digest()).decode()}
    )
    assert right.status_code == 200
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port)) as conn:  # declares 100 bytes, sends 10, goes
        conn.sendall(
            f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            "Content-Length: 100\r\n\r\n0123456789".encode()
        )
    assert read(host, task_id, name).content == b"data"


def test_an_s3_upload_over_the_limit_is_refused_before_its_body(host_factory):
    host = host_factory(claim_work_wait=1, artifact_s3_max_bytes=1000)
    queue = host.client()
    task_id, name, url = s3_artifact(queue, "public/big.bin")
    declared = httpx.put(url, content=b"x" * 1001)
    assert declared.status_code == 413 and "QUEUE_ARTIFACT_S3_MAX_BYTES" in declared.json()["message"]

    def chunks():
        yield b"x" * 600
        yield b"x" * 600

    streamed = httpx.put(url, content=chunks())  # chunked: no length declared, counted as it comes
    assert streamed.status_code == 413, streamed.text
    assert httpx.put(url, content=b"x" * 1000).status_code == 200
    assert len(read(host, task_id, name).content) == 1000


def test_an_s3_artifact_uploaded_to_an_earlier_versions_block_url_is_still_read(host, queue, azurite):
    """Earlier versions handed out a Put Block URL for `s3` artifacts (data staged as one block, committed at the
    first read): an artifact created then and uploaded there, read by this version, is sealed and served."""
    task_id, name, _ = s3_artifact(queue, "public/earlier.bin")
    blob = BlobServiceClient.from_connection_string(azurite.connection_string).get_blob_client(
        "artifacts", blob_path(task_id, 0, name)
    )
    blob.stage_block(S3_BLOCK, b"staged the earlier way")
    response = read(host, task_id, name)
    assert response.status_code == 200 and response.content == b"staged the earlier way"
    assert response.headers["content-type"] == "application/octet-stream"


def test_an_s3_artifact_never_uploaded_is_404_not_500(host, queue):
    task_id, name, _ = s3_artifact(queue, "public/never.bin")
    expect_error(404, "ResourceNotFound", anonymous(host).getArtifact, task_id, "0", name)


def test_a_live_log_is_sealed_when_its_run_resolves_not_at_its_first_read(host, queue):
    """The upload URL of a live log stays valid after the run resolved: what a read serves is what the blob held
    when the run resolved."""
    task_id, worker = claimed(queue)
    name = "public/logs/live.log"
    created = worker.createArtifact(
        task_id, "0", name, {"storageType": "azure", "expires": in_days(), "contentType": "text/plain"}
    )
    headers = {"x-ms-blob-type": "BlockBlob", "Content-Type": "text/plain"}
    assert httpx.put(created["putUrl"], content=b"line 1\n", headers=headers).status_code == 201
    assert read(host, task_id, name).content == b"line 1\n"  # running: the growing blob
    assert httpx.put(created["putUrl"], content=b"line 1\nline 2\n", headers=headers).status_code == 201
    worker.reportCompleted(task_id, "0")
    assert (
        httpx.put(created["putUrl"], content=b"rewritten after the run resolved\n", headers=headers).status_code == 201
    )
    response = read(host, task_id, name)
    assert response.status_code == 200 and response.content == b"line 1\nline 2\n"


def test_a_live_log_never_written_reads_404_once_its_run_resolved(host, queue):
    task_id, worker = claimed(queue)
    name = "public/logs/empty.log"
    created = worker.createArtifact(
        task_id, "0", name, {"storageType": "azure", "expires": in_days(), "contentType": "text/plain"}
    )
    worker.reportFailed(task_id, "0")
    headers = {"x-ms-blob-type": "BlockBlob", "Content-Type": "text/plain"}
    assert httpx.put(created["putUrl"], content=b"too late\n", headers=headers).status_code == 201
    expect_error(404, "ResourceNotFound", anonymous(host).getArtifact, task_id, "0", name)


def test_an_object_put_url_leased_or_made_an_append_blob_still_finishes_and_downloads(host):
    """An object's putUrl (create and write, so that a retried upload may overwrite) can also lease the blob or make
    it an append blob: finishUpload snapshots what is there, and the download reads that snapshot."""
    service = taskcluster.Object(
        {
            "rootUrl": host.root_url,
            "maxRetries": 0,
            "credentials": {"clientId": "root", "accessToken": ROOT_ACCESS_TOKEN},
        }
    )
    for kind in ("lease", "append"):
        name, upload_id, data = f"abuse/{kind}/{slugid()}", slugid(), f"{kind} data".encode()
        answer = service.createUpload(
            name,
            {
                "projectId": "p",
                "uploadId": upload_id,
                "expires": in_days(),
                "proposedUploadMethods": {
                    "putUrl": {"contentType": "application/octet-stream", "contentLength": len(data)}
                },
            },
        )
        put = answer["uploadMethod"]["putUrl"]
        if kind == "lease":
            assert httpx.put(put["url"], content=data, headers=put["headers"]).status_code == 201
            assert httpx.put(with_query(put["url"], comp="lease"), headers=LEASE).status_code == 201
        else:
            assert httpx.put(put["url"], headers={"x-ms-blob-type": "AppendBlob"}).status_code == 201
            assert httpx.put(with_query(put["url"], comp="appendblock"), content=data).status_code == 201
        service.finishUpload(
            name, {"projectId": "p", "uploadId": upload_id, "hashes": {"sha256": hashlib.sha256(data).hexdigest()}}
        )
        url = service.startDownload(name, {"acceptDownloadMethods": {"getUrl": True}})["url"]
        assert httpx.get(url).content == data, kind
