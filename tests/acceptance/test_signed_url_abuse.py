"""What a holder of an upload URL can do beyond the upload it is for, on Azurite: Azure SAS permissions name kinds
of operation, not one operation, so an `s3` putUrl (a Put Block URL, which needs write permission) can also take a
lease, write metadata or make an append blob. None of these may make a read of the artifact fail: each leaves
the artifact readable, or not uploaded (404), never a 500 (docs/security.md)."""

from __future__ import annotations

import hashlib
import urllib.parse

import httpx
import pytest
import taskcluster

from tests.acceptance.test_artifacts import anonymous, claimed, in_days
from tests.conftest import ROOT_ACCESS_TOKEN, expect_error, slugid

LEASE = {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "-1", "x-ms-version": "2021-08-06"}


@pytest.fixture(scope="module")
def host(host_factory):
    return host_factory(claim_work_wait=1)


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
    created = worker.createArtifact(task_id, "0", name, {"storageType": "s3", "expires": in_days(),
                                                         "contentType": "application/octet-stream"})
    return task_id, name, created["putUrl"]


def read(host, task_id, name):
    return httpx.get(anonymous(host).buildUrl("getArtifact", task_id, "0", name), follow_redirects=True)


def test_a_lease_taken_through_the_put_url_does_not_break_reads(host, queue):
    task_id, name, url = s3_artifact(queue)
    assert httpx.put(url, content=b"leased data").status_code == 201  # the block
    # The blob does not exist until the block is committed: upload a blob, lease it, then the block again.
    blob_url = with_query(url, comp=None, blockid=None)
    assert httpx.put(blob_url, content=b"x", headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    assert httpx.put(with_query(url, comp="lease", blockid=None), headers=LEASE).status_code == 201
    assert httpx.put(url, content=b"leased data").status_code in (201, 412)
    response = read(host, task_id, name)
    assert response.status_code == 200, response.text
    assert response.content in (b"leased data", b"x")


def test_an_append_blob_made_through_the_put_url_is_read_as_it_is(host, queue):
    task_id, name, url = s3_artifact(queue, "public/append.bin")
    blob_url = with_query(url, comp=None, blockid=None)
    assert httpx.put(blob_url, headers={"x-ms-blob-type": "AppendBlob"}).status_code == 201
    assert httpx.put(with_query(url, comp="appendblock", blockid=None), content=b"appended").status_code == 201
    response = read(host, task_id, name)
    assert response.status_code == 200, response.text
    assert response.content == b"appended"


def test_metadata_written_through_the_put_url_does_not_break_reads(host, queue):
    task_id, name, url = s3_artifact(queue, "public/meta.bin")
    assert httpx.put(url, content=b"data").status_code == 201
    blob_url = with_query(url, comp=None, blockid=None)
    assert httpx.put(blob_url, content=b"data", headers={"x-ms-blob-type": "BlockBlob",
                                                         "x-ms-meta-evil": "1"}).status_code == 201
    metadata = {"x-ms-meta-contenttype": "text/html", "x-ms-version": "2021-08-06"}
    assert httpx.put(with_query(url, comp="metadata", blockid=None), headers=metadata).status_code in (200, 201)
    response = read(host, task_id, name)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"


def test_an_s3_artifact_never_uploaded_is_404_not_500(host, queue):
    task_id, name, _ = s3_artifact(queue, "public/never.bin")
    expect_error(404, "ResourceNotFound", anonymous(host).getArtifact, task_id, "0", name)


def test_a_live_log_is_sealed_when_its_run_resolves_not_at_its_first_read(host, queue):
    """The upload URL of a live log stays valid after the run resolved: what a read serves is what the blob held
    when the run resolved."""
    task_id, worker = claimed(queue)
    name = "public/logs/live.log"
    created = worker.createArtifact(task_id, "0", name, {"storageType": "azure", "expires": in_days(),
                                                         "contentType": "text/plain"})
    headers = {"x-ms-blob-type": "BlockBlob", "Content-Type": "text/plain"}
    assert httpx.put(created["putUrl"], content=b"line 1\n", headers=headers).status_code == 201
    assert read(host, task_id, name).content == b"line 1\n"  # running: the growing blob
    assert httpx.put(created["putUrl"], content=b"line 1\nline 2\n", headers=headers).status_code == 201
    worker.reportCompleted(task_id, "0")
    assert httpx.put(created["putUrl"], content=b"rewritten after the run resolved\n",
                     headers=headers).status_code == 201
    response = read(host, task_id, name)
    assert response.status_code == 200 and response.content == b"line 1\nline 2\n"


def test_a_live_log_never_written_reads_404_once_its_run_resolved(host, queue):
    task_id, worker = claimed(queue)
    name = "public/logs/empty.log"
    created = worker.createArtifact(task_id, "0", name, {"storageType": "azure", "expires": in_days(),
                                                         "contentType": "text/plain"})
    worker.reportFailed(task_id, "0")
    headers = {"x-ms-blob-type": "BlockBlob", "Content-Type": "text/plain"}
    assert httpx.put(created["putUrl"], content=b"too late\n", headers=headers).status_code == 201
    expect_error(404, "ResourceNotFound", anonymous(host).getArtifact, task_id, "0", name)


def test_an_object_put_url_leased_or_made_an_append_blob_still_finishes_and_downloads(host):
    """An object's putUrl (create and write, so that a retried upload may overwrite) can also lease the blob or make
    it an append blob: finishUpload snapshots what is there, and the download reads that snapshot."""
    service = taskcluster.Object({"rootUrl": host.root_url, "maxRetries": 0,
                                  "credentials": {"clientId": "root", "accessToken": ROOT_ACCESS_TOKEN}})
    for kind in ("lease", "append"):
        name, upload_id, data = f"abuse/{kind}/{slugid()}", slugid(), f"{kind} data".encode()
        answer = service.createUpload(name, {"projectId": "p", "uploadId": upload_id, "expires": in_days(),
                                             "proposedUploadMethods": {"putUrl": {
                                                 "contentType": "application/octet-stream",
                                                 "contentLength": len(data)}}})
        put = answer["uploadMethod"]["putUrl"]
        if kind == "lease":
            assert httpx.put(put["url"], content=data, headers=put["headers"]).status_code == 201
            assert httpx.put(with_query(put["url"], comp="lease"), headers=LEASE).status_code == 201
        else:
            assert httpx.put(put["url"], headers={"x-ms-blob-type": "AppendBlob"}).status_code == 201
            assert httpx.put(with_query(put["url"], comp="appendblock"), content=data).status_code == 201
        service.finishUpload(name, {"projectId": "p", "uploadId": upload_id,
                                    "hashes": {"sha256": hashlib.sha256(data).hexdigest()}})
        url = service.startDownload(name, {"acceptDownloadMethods": {"getUrl": True}})["url"]
        assert httpx.get(url).content == data, kind
