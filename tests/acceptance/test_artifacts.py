"""Artifacts on Azurite through the official client and plain HTTP: uploads straight to Blob Storage through the
signed putUrl, downloads through the queue's redirects, every refusal, the exception window, links, expiry."""

from __future__ import annotations

import datetime as dt
import io
import os
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import taskcluster
import taskcluster.download
from azure.storage.blob import BlobClient

from local_host import azurite as azurite_mod
from shared import timeutil
from tests.acceptance.conftest import QUICK_CLAIMS
from tests.acceptance.helpers import WORKER, anonymous, azure_request, claimed, in_days, put
from tests.conftest import expect_error, queue_client, slugid, task_definition, wait_for
from worker.artifact_upload import upload

UPLOAD_TTL = 4
EXCEPTION_WINDOW = 2


@pytest.fixture(scope="module")
def host(host_factory):
    return host_factory(
        artifact_upload_ttl=UPLOAD_TTL,
        artifact_exception_window=EXCEPTION_WINDOW,
        expiry_schedule="*/1 * * * * *",
        expiry_delay=0,
        **QUICK_CLAIMS,
    )


@pytest.fixture
def queue(host):
    return host.client()


def test_upload_through_put_url_and_download_through_the_redirect(host, queue):
    task_id, worker = claimed(queue)
    data = "héllo, world\n".encode() * 1000
    name = "public/logs/live.log"
    created = worker.createArtifact(task_id, "0", name, azure_request(data))
    assert created["storageType"] == "azure" and created["headers"]["x-ms-blob-type"] == "BlockBlob"
    assert timeutil.parse(created["expires"]) <= timeutil.now() + dt.timedelta(seconds=UPLOAD_TTL + 1)
    assert put(created, data).status_code == 201
    assert worker.finishArtifact(task_id, "0", name, {"uploadId": created["uploadId"]}) is None  # 204
    # The official client does not follow the 303: it returns the body, which names the same URL.
    body = anonymous(host).getArtifact(task_id, "0", name)
    assert body["storageType"] == "azure" and httpx.get(body["url"]).content == data
    # Plain HTTP, anonymously (a public/ name), following the redirect: the data, byte for byte.
    response = httpx.get(anonymous(host).buildUrl("getLatestArtifact", task_id, name), follow_redirects=True)
    assert response.status_code == 200 and response.content == data
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    first = response.history[0]
    assert first.status_code == 303 and first.headers["x-taskcluster-artifact-storage-type"] == "azure"
    # The official download helper (artifact endpoint), unchanged.
    buf, content_type = taskcluster.download.downloadArtifactToBuf(
        taskId=task_id, runId=0, name=name, queueService=anonymous(host)
    )
    assert bytes(buf) == data and content_type.startswith("text/plain")
    info = queue.artifactInfo(task_id, "0", name)
    assert info == {
        "storageType": "azure",
        "name": name,
        "expires": info["expires"],
        "contentType": "text/plain; charset=utf-8",
        "contentLength": len(data),
    }
    assert queue.latestArtifactInfo(task_id, name) == info
    recorded = httpx.get(f"{host.root_url}/api/queue/v1/task/{task_id}/events").json()["events"]
    events = [e for e in recorded if e["exchange"].endswith("/artifact-created")]
    assert len(events) == 1 and events[0]["payload"]["artifact"]["name"] == name
    assert events[0]["payload"]["workerId"] == WORKER["workerId"]


def test_a_file_larger_than_one_block_goes_up_in_blocks(host, queue, tmp_path):
    task_id, worker = claimed(queue)
    data = os.urandom(5 * 1024 * 1024 + 12345)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    created = worker.createArtifact(
        task_id, "0", "public/big.bin", azure_request(data, content_type="application/octet-stream")
    )
    block = 1024 * 1024
    assert upload(created, path, block_size=block, single_put_limit=block) == len(data)
    worker.finishArtifact(task_id, "0", "public/big.bin", {"uploadId": created["uploadId"]})
    committed = BlobClient.from_connection_string(
        host.env["QUEUE_STORAGE"], "artifacts", f"{task_id}/0/public/big.bin"
    ).get_block_list()[0]
    assert len(committed) == 6  # five whole blocks and a partial one
    url = anonymous(host).buildUrl("getArtifact", task_id, "0", "public/big.bin")
    assert httpx.get(url, follow_redirects=True).content == data


def test_put_url_writes_only_its_own_blob_for_a_limited_time(host, queue):
    task_id, worker = claimed(queue)
    created = worker.createArtifact(task_id, "0", "public/a.txt", azure_request(b"abc"))
    base, query = created["putUrl"].split("?", 1)
    assert put(created, b"abc").status_code == 201
    assert httpx.get(created["putUrl"]).status_code == 403  # it cannot read
    assert (
        httpx.put(f"{base.replace('a.txt', 'b.txt')}?{query}", content=b"x", headers=created["headers"]).status_code
        == 403
    )  # nor write another blob
    assert httpx.delete(created["putUrl"]).status_code == 403  # nor delete
    container = base.rsplit(f"/{task_id}/", 1)[0]
    assert httpx.get(f"{container}?restype=container&comp=list&{query}").status_code == 403  # nor list
    worker.finishArtifact(task_id, "0", "public/a.txt", {"uploadId": created["uploadId"]})
    # Asked again once finished: a URL that cannot overwrite the data.
    again = worker.createArtifact(task_id, "0", "public/a.txt", azure_request(b"abc"))
    assert again["uploadId"] == created["uploadId"] and again["putUrl"] != created["putUrl"]
    assert put(again, b"xyz").status_code == 403
    other = worker.createArtifact(task_id, "0", "public/late.txt", azure_request(b"late"))
    time.sleep(UPLOAD_TTL + 1.5)
    assert put(other, b"late").status_code == 403  # expired
    assert put(created, b"abd").status_code == 403
    url = anonymous(host).buildUrl("getArtifact", task_id, "0", "public/a.txt")
    assert httpx.get(url, follow_redirects=True).content == b"abc"


def test_same_request_again_gives_a_fresh_url_and_other_differences_conflict(host, queue):
    task_id, worker = claimed(queue)
    request = azure_request(b"12345")
    first = worker.createArtifact(task_id, "0", "public/x", request)
    time.sleep(1.1)  # SAS times are whole seconds
    second = worker.createArtifact(task_id, "0", "public/x", request)
    assert second["putUrl"] != first["putUrl"] and second["uploadId"] == first["uploadId"]
    longer = dict(request, expires=in_days(2))
    worker.createArtifact(task_id, "0", "public/x", longer)
    for changed in (
        request,
        dict(longer, contentType="image/png"),
        dict(longer, contentLength=6),
        {"storageType": "reference", "expires": in_days(2), "contentType": "text/plain", "url": "https://example.com"},
    ):
        expect_error(409, "RequestConflict", worker.createArtifact, task_id, "0", "public/x", changed)


def test_refusals(host, queue):
    task_id, worker = claimed(queue)
    ref = {
        "storageType": "reference",
        "expires": in_days(),
        "contentType": "text/plain",
        "url": "https://example.com/x",
    }
    body = expect_error(
        400,
        "InputError",
        queue.createArtifact,
        task_id,
        "0",
        "s",
        {"storageType": "s3", "expires": in_days(), "contentType": "text/plain", "contentLength": 2**40},
    )
    assert "at most 5368709120 bytes" in body["message"]
    expect_error(400, "InputError", queue.createArtifact, slugid(), "0", "x", ref)  # no such task: 400
    expect_error(400, "InputError", queue.createArtifact, task_id, "1", "x", ref)  # no such run
    expect_error(400, "InputError", queue.createArtifact, task_id, "0", "x", dict(ref, expires=in_days(400)))
    expect_error(
        400,
        "InputError",
        queue.createArtifact,
        task_id,
        "0",
        "x",
        dict(ref, expires=timeutil.iso(timeutil.now() - dt.timedelta(minutes=20))),
    )
    body = expect_error(
        400,
        "InputValidationError",
        queue.createArtifact,
        task_id,
        "0",
        "x",
        {"storageType": "azure", "expires": in_days(), "contentLength": 4},
    )
    assert "contentType" in body["message"] and "not valid under any" not in body["message"]
    unclaimed = slugid()
    queue.createTask(unclaimed, task_definition())
    expect_error(400, "InputError", queue.createArtifact, unclaimed, "0", "x", ref)
    created = worker.createArtifact(task_id, "0", "public/u", azure_request(b"1234"))
    expect_error(400, "InputError", worker.finishArtifact, task_id, "0", "public/u", {"uploadId": slugid()})
    expect_error(
        400, "InputError", worker.finishArtifact, task_id, "0", "public/u", {"uploadId": created["uploadId"]}
    )  # nothing uploaded
    put(created, b"123")
    body = expect_error(
        400, "InputError", worker.finishArtifact, task_id, "0", "public/u", {"uploadId": created["uploadId"]}
    )
    assert "3 bytes" in body["message"]
    expect_error(404, "ResourceNotFound", queue.getArtifact, task_id, "0", "public/u")  # not finished
    expect_error(
        404, "ResourceNotFound", worker.finishArtifact, task_id, "0", "public/none", {"uploadId": created["uploadId"]}
    )
    expect_error(404, "ResourceNotFound", queue.getArtifact, task_id, "0", "public/none")
    expect_error(404, "ResourceNotFound", queue.getArtifact, task_id, "5", "public/none")
    expect_error(404, "ResourceNotFound", queue.listArtifacts, task_id, "5")
    expect_error(404, "ResourceNotFound", queue.listLatestArtifacts, slugid())
    body = expect_error(404, "ResourceNotFound", queue.getLatestArtifact, unclaimed, "public/x")
    assert "no runs" not in body["message"]  # it has a pending run
    deferred = slugid()
    queue.createTask(deferred, task_definition(dependencies=[deferred]))
    body = expect_error(404, "ResourceNotFound", queue.listLatestArtifacts, deferred)
    assert "no runs" in body["message"]
    # Another run's credentials, or none, may not create artifacts.
    expect_error(403, "InsufficientScopes", worker.createArtifact, task_id, "1", "x", ref)
    expect_error(403, "InsufficientScopes", anonymous(host).createArtifact, task_id, "0", "x", ref)
    worker.reportCompleted(task_id, "0")
    expect_error(409, "RequestConflict", worker.createArtifact, task_id, "0", "public/after", ref)
    assert queue.listArtifacts(task_id, "0")["artifacts"] == []


def test_artifacts_may_be_created_shortly_after_a_run_resolved_exception(queue):
    task_id, worker = claimed(queue, retries=0)
    worker.reportException(task_id, "0", {"reason": "malformed-payload"})
    error = {
        "storageType": "error",
        "expires": in_days(),
        "reason": "invalid-resource-on-worker",
        "message": "the payload could not be run",
    }
    worker.createArtifact(task_id, "0", "public/error", error)
    time.sleep(EXCEPTION_WINDOW + 0.5)
    expect_error(409, "RequestConflict", worker.createArtifact, task_id, "0", "public/late", error)
    assert [a["name"] for a in queue.listArtifacts(task_id, "0")["artifacts"]] == ["public/error"]


def test_reference_error_and_link_artifacts(host, queue):
    task_id, worker = claimed(queue)
    expires = in_days()
    worker.createArtifact(
        task_id,
        "0",
        "public/ref",
        {"storageType": "reference", "expires": expires, "contentType": "text/html", "url": "https://example.com/a"},
    )
    worker.createArtifact(
        task_id,
        "0",
        "public/err",
        {"storageType": "error", "expires": expires, "reason": "file-missing-on-worker", "message": "no file"},
    )
    worker.createArtifact(
        task_id,
        "0",
        "private/secret",
        {
            "storageType": "reference",
            "expires": expires,
            "contentType": "text/plain",
            "url": "https://example.com/secret",
        },
    )
    for name, target in [
        ("public/to-ref", "public/ref"),
        ("public/to-secret", "private/secret"),
        ("public/loop-a", "public/loop-b"),
        ("public/loop-b", "public/loop-a"),
    ]:
        worker.createArtifact(task_id, "0", name, {"storageType": "link", "expires": expires, "artifact": target})
    raw = httpx.get(anonymous(host).buildUrl("getArtifact", task_id, "0", "public/ref"))
    assert raw.status_code == 303 and raw.headers["location"] == "https://example.com/a"
    assert raw.json() == {"storageType": "reference", "url": "https://example.com/a"}
    raw = httpx.get(anonymous(host).buildUrl("getArtifact", task_id, "0", "public/err"))
    assert raw.status_code == 424 and raw.json() == {"reason": "file-missing-on-worker", "message": "no file"}
    assert raw.headers["x-taskcluster-artifact-storage-type"] == "error"
    assert queue.artifact(task_id, "0", "public/err") == {
        "storageType": "error",
        "reason": "file-missing-on-worker",
        "message": "no file",
    }
    # A link is followed; the caller needs the scopes of every name on the way.
    assert anonymous(host).getArtifact(task_id, "0", "public/to-ref")["url"] == "https://example.com/a"
    assert anonymous(host).latestArtifact(task_id, "public/to-ref") == {
        "storageType": "reference",
        "url": "https://example.com/a",
    }
    expect_error(403, "InsufficientScopes", anonymous(host).getArtifact, task_id, "0", "public/to-secret")
    expect_error(403, "InsufficientScopes", anonymous(host).getArtifact, task_id, "0", "private/secret")
    narrowed = queue_client(
        host.root_url, authorizedScopes=["queue:get-artifact:public/to-secret", "queue:get-artifact:private/secret"]
    )
    assert narrowed.getArtifact(task_id, "0", "public/to-secret")["url"] == "https://example.com/secret"
    body = expect_error(400, "InputError", queue.getArtifact, task_id, "0", "public/loop-a")
    assert "loops" in body["message"]
    assert queue.artifactInfo(task_id, "0", "public/to-ref")["storageType"] == "link"  # not followed
    # A reference may move to another URL, or become a link.
    worker.createArtifact(
        task_id,
        "0",
        "public/ref",
        {"storageType": "reference", "expires": expires, "contentType": "text/html", "url": "https://example.com/b"},
    )
    assert queue.getArtifact(task_id, "0", "public/ref")["url"] == "https://example.com/b"
    worker.createArtifact(
        task_id, "0", "public/ref", {"storageType": "link", "expires": expires, "artifact": "public/err"}
    )
    expect_error(
        409,
        "RequestConflict",
        worker.createArtifact,
        task_id,
        "0",
        "public/ref",
        {"storageType": "reference", "expires": expires, "contentType": "text/html", "url": "https://example.com/b"},
    )


def test_listings_page_through_every_artifact(queue):
    task_id, worker = claimed(queue)
    names = [f"public/many/{i:03d}.txt" for i in range(23)] + ["private/one"]
    body = {"storageType": "reference", "expires": in_days(), "contentType": "text/plain", "url": "https://example.com"}
    with ThreadPoolExecutor(8) as pool:  # at once: each write races the others for the task's ETag
        list(pool.map(lambda name: worker.createArtifact(task_id, "0", name, body), names))
    seen, token = [], None
    while True:
        page = queue.listArtifacts(task_id, "0", query={"limit": 10, **({"continuationToken": token} if token else {})})
        assert len(page["artifacts"]) <= 10
        seen += [a["name"] for a in page["artifacts"]]
        token = page.get("continuationToken")
        if not token:
            break
    assert sorted(seen) == sorted(names)
    assert len(queue.listLatestArtifacts(task_id)["artifacts"]) == len(names)


def test_expired_artifacts_answer_410_then_their_blobs_and_rows_are_deleted(host, queue):
    task_id, worker = claimed(queue)
    soon = timeutil.iso(timeutil.now() + dt.timedelta(seconds=2))
    created = worker.createArtifact(task_id, "0", "public/short", dict(azure_request(b"bye"), expires=soon))
    put(created, b"bye")
    worker.finishArtifact(task_id, "0", "public/short", {"uploadId": created["uploadId"]})
    keep = worker.createArtifact(task_id, "0", "public/keep", azure_request(b"stay"))
    put(keep, b"stay")
    worker.finishArtifact(task_id, "0", "public/keep", {"uploadId": keep["uploadId"]})
    blob = BlobClient.from_connection_string(host.env["QUEUE_STORAGE"], "artifacts", f"{task_id}/0/public/short")
    assert blob.exists()
    wait_for(lambda: not blob.exists(), timeout=20, interval=0.5)  # the timer runs every second here
    expect_error(404, "ResourceNotFound", queue.getArtifact, task_id, "0", "public/short")
    assert [a["name"] for a in queue.listArtifacts(task_id, "0")["artifacts"]] == ["public/keep"]
    url = anonymous(host).buildUrl("getArtifact", task_id, "0", "public/keep")
    assert httpx.get(url, follow_redirects=True).content == b"stay"


@pytest.fixture(scope="module")
def quiet_host(host_factory, tmp_path_factory):
    """A host on an Azurite of its own: the hosts of other tests run expiry timers (with no delay) on theirs."""
    instance = azurite_mod.start(tmp_path_factory.mktemp("quiet-azurite"), in_memory=True)
    host = host_factory(storage=instance.connection_string)  # production expiry delay: 30 minutes
    yield host
    host.stop()
    instance.stop()


def test_an_expired_artifact_is_gone_410_until_the_timer_deletes_it(quiet_host):
    queue_host = quiet_host
    queue = queue_host.client()
    task_id, worker = claimed(queue)
    soon = timeutil.iso(timeutil.now() + dt.timedelta(seconds=1))
    worker.createArtifact(
        task_id,
        "0",
        "public/ref",
        {"storageType": "reference", "expires": soon, "contentType": "text/plain", "url": "https://example.com"},
    )
    assert queue.getArtifact(task_id, "0", "public/ref")["url"] == "https://example.com"
    time.sleep(1.2)
    expect_error(410, "ResourceExpired", queue.getArtifact, task_id, "0", "public/ref")
    expect_error(410, "ResourceExpired", anonymous(queue_host).latestArtifact, task_id, "public/ref")


def test_odd_artifact_names_round_trip(host, queue):
    task_id, worker = claimed(queue)
    names = ["public/with space/and#hash?and%percent", "public/../up", "public/" + "x" * 1000, "public/" + "/" * 500]
    for name in names:
        data = name.encode()
        created = worker.createArtifact(task_id, "0", name, azure_request(data))
        assert put(created, data).status_code == 201
        worker.finishArtifact(task_id, "0", name, {"uploadId": created["uploadId"]})
        assert (
            httpx.get(anonymous(host).buildUrl("getArtifact", task_id, "0", name), follow_redirects=True).content
            == data
        )
    assert sorted(a["name"] for a in queue.listArtifacts(task_id, "0")["artifacts"]) == sorted(names)
    expect_error(400, "InputError", worker.createArtifact, task_id, "0", "public/" + "x" * 1018, azure_request(b"x"))


def test_upload_helper_takes_bytes_and_streams(host, queue):
    task_id, worker = claimed(queue)
    for name, data in [("public/bytes", b"bytes!"), ("public/stream", b"stream!")]:
        created = worker.createArtifact(task_id, "0", name, azure_request(data))
        source = data if name.endswith("bytes") else io.BytesIO(data)
        assert upload(created, source) == len(data)
        worker.finishArtifact(task_id, "0", name, {"uploadId": created["uploadId"]})
        url = anonymous(host).buildUrl("getArtifact", task_id, "0", name)
        assert httpx.get(url, follow_redirects=True).content == data
