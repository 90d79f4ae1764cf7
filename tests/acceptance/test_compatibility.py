"""Taskcluster's own tools against this queue on Azurite, driven by code nobody here wrote: the official Python
client's upload and download helpers, the official JavaScript client from npm in a node script, `s3` artifacts
PUT as docker-worker and generic-worker PUT them (only `Content-Type`), the Azure-era `azure` form, a client
generated from the served API reference, a browser's CORS preflight, and the counts an autoscaler reads."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import requests
import taskcluster
import taskcluster.download
import taskcluster.upload
from taskcluster.client import createApiClient
from taskcluster.exceptions import TaskclusterArtifactError

from tests.acceptance.helpers import WORKER, claimed, in_days
from tests.conftest import ROOT_ACCESS_TOKEN, ROOT_CLIENT_ID, expect_error, slugid, task_definition, task_queue_id

PROJECT = Path(__file__).resolve().parents[2]
TC_CLIENT = PROJECT / ".tools" / "node_modules" / "taskcluster-client" / "src" / "index.js"
MIB = 1024 * 1024


@pytest.fixture
def queue(host):
    return host.client()


def anonymous(host, cls=taskcluster.Queue):
    return cls({"rootUrl": host.root_url, "maxRetries": 0})


def pattern(size):
    return bytes((i * 31 + 7) % 251 for i in range(size))


# --- s3 artifacts, as docker-worker and generic-worker upload them -------------------------------------------


def test_s3_artifact_put_with_only_content_type_reads_back_with_the_official_helper(host, queue):
    task_id, worker = claimed(queue)
    name, data = "public/build/target.tar.bz2", pattern(3 * MIB + 5)
    created = worker.createArtifact(
        task_id, "0", name, {"storageType": "s3", "expires": in_days(), "contentType": "application/x-bzip2"}
    )
    assert set(created) == {"storageType", "putUrl", "expires", "contentType"}
    assert created["storageType"] == "s3" and created["contentType"] == "application/x-bzip2"
    # What a worker that knows only S3 sends: the body, its length and the content type. No Azure header.
    put = requests.put(created["putUrl"], data=data, headers={"Content-Type": "application/x-bzip2"}, timeout=30)
    # As S3 answers a presigned PUT: 200, the data's MD5 as its ETag (scriptworker accepts only 200 or 204).
    assert put.status_code == 200, put.text
    assert put.headers["etag"] == f'"{hashlib.md5(data).hexdigest()}"'
    # Present at once, as in Taskcluster: listed, and readable once its data is there.
    listed = queue.listArtifacts(task_id, "0")["artifacts"]
    assert [(a["name"], a["storageType"]) for a in listed] == [(name, "s3")]
    buf, content_type = taskcluster.download.downloadArtifactToBuf(
        taskId=task_id, runId=0, name=name, queueService=anonymous(host)
    )
    assert bytes(buf) == data and content_type == "application/x-bzip2"
    # The redirect serves the same bytes as an attachment with the declared type.
    body = anonymous(host).getArtifact(task_id, "0", name)
    got = httpx.get(body["url"])
    assert got.content == data and got.headers["content-type"] == "application/x-bzip2"
    assert got.headers["content-disposition"] == "attachment"


def test_s3_artifact_declared_gzip_is_served_with_its_encoding(host, queue):
    task_id, worker = claimed(queue)
    name, text = "public/logs/live_backing.log", ("line of log output\n" * 20000).encode()
    created = worker.createArtifact(
        task_id,
        "0",
        name,
        {
            "storageType": "s3",
            "expires": in_days(),
            "contentType": "text/plain; charset=utf-8",
            "contentEncoding": "gzip",
        },
    )
    compressed = gzip.compress(text)
    put = requests.put(
        created["putUrl"],
        data=compressed,
        headers={"Content-Type": "text/plain; charset=utf-8", "Content-Encoding": "gzip"},
        timeout=30,
    )
    assert put.status_code == 200
    url = queue.getLatestArtifact(task_id, name)["url"]
    raw = httpx.get(url, headers={"Accept-Encoding": "identity"})
    assert raw.headers["content-encoding"] == "gzip" and raw.headers["content-type"] == "text/plain; charset=utf-8"
    assert raw.content == text  # httpx decodes what is declared gzip: the bytes stored are the compressed ones
    assert int(raw.headers["content-length"]) == len(compressed)


def test_s3_artifact_encoding_given_only_in_the_put_is_kept_and_served(host, queue):
    """What scriptworker does: gzip the log and say so only in the PUT's own header, as S3 keeps it."""
    task_id, worker = claimed(queue)
    name, text = "public/logs/chain_of_trust.log", ("signed line\n" * 5000).encode()
    created = worker.createArtifact(
        task_id, "0", name, {"storageType": "s3", "expires": in_days(), "contentType": "text/plain"}
    )
    compressed = gzip.compress(text)
    put = requests.put(
        created["putUrl"],
        data=compressed,
        timeout=30,
        headers={
            "Content-Type": "text/plain",
            "Content-Encoding": "gzip",
            "Cache-Control": "max-age=60",
            "Content-Language": "en",
        },
    )
    assert put.status_code == 200, put.text
    raw = httpx.get(anonymous(host).artifact(task_id, "0", name)["url"], headers={"Accept-Encoding": "identity"})
    assert raw.headers["content-encoding"] == "gzip" and int(raw.headers["content-length"]) == len(compressed)
    assert raw.headers["cache-control"] == "max-age=60" and raw.headers["content-language"] == "en"
    assert raw.content == text  # decoded by the client, as from S3
    buf, _ = taskcluster.download.downloadArtifactToBuf(
        taskId=task_id, runId=0, name=name, queueService=anonymous(host)
    )
    assert bytes(buf) == text


def test_s3_artifact_is_unavailable_until_uploaded_and_unchangeable_once_its_run_resolved(host, queue):
    task_id, worker = claimed(queue)
    name = "public/result.json"
    created = worker.createArtifact(
        task_id, "0", name, {"storageType": "s3", "expires": in_days(), "contentType": "application/json"}
    )
    body = expect_error(404, "ResourceNotFound", anonymous(host).artifact, task_id, "0", name)
    assert "not uploaded" in body["message"] or "not available" in body["message"]
    assert (
        requests.put(
            created["putUrl"], data=b'{"a": 1}', headers={"Content-Type": "application/json"}, timeout=30
        ).status_code
        == 200
    )
    first = anonymous(host).artifact(task_id, "0", name)
    assert first["storageType"] == "s3" and httpx.get(first["url"]).json() == {"a": 1}
    # While the run goes, a PUT replaces the data, as on S3 (a worker's retry).
    assert requests.put(created["putUrl"], data=b'{"a": 2}', timeout=30).status_code == 200
    assert httpx.get(anonymous(host).artifact(task_id, "0", name)["url"]).json() == {"a": 2}
    assert httpx.get(first["url"]).json() == {"a": 1}  # a URL handed out reads what it was given
    worker.reportCompleted(task_id, "0")
    late = requests.put(created["putUrl"], data=b'{"a": 3}', timeout=30)
    assert late.status_code == 409 and late.json()["code"] == "RequestConflict", late.text
    assert httpx.get(anonymous(host).artifact(task_id, "0", name)["url"]).json() == {"a": 2}


def test_s3_artifact_over_the_single_put_limit_is_refused_and_changes_nothing(queue):
    task_id, worker = claimed(queue)
    body = expect_error(
        400,
        "InputError",
        worker.createArtifact,
        task_id,
        "0",
        "public/huge",
        {
            "storageType": "s3",
            "expires": in_days(),
            "contentType": "application/binary",
            "contentLength": 5 * 1024 * MIB + 1,
        },
    )
    assert "QUEUE_ARTIFACT_S3_MAX_BYTES" in body["message"] and "`object`" in body["message"]
    assert queue.listArtifacts(task_id, "0")["artifacts"] == []


# --- the Azure-era azure form ---------------------------------------------------------------------------------


def test_azure_era_artifact_is_present_at_once_and_uploaded_with_one_put(host, queue):
    task_id, worker = claimed(queue)
    name, data = "public/azure-era.txt", b"uploaded the 2018 way\n"
    created = worker.createArtifact(
        task_id, "0", name, {"storageType": "azure", "expires": in_days(), "contentType": "text/plain"}
    )
    assert set(created) == {"storageType", "putUrl", "expires", "contentType"}
    assert [a["name"] for a in queue.listArtifacts(task_id, "0")["artifacts"]] == [name]
    put = httpx.put(
        created["putUrl"], content=data, headers={"x-ms-blob-type": "BlockBlob", "Content-Type": "text/plain"}
    )
    assert put.status_code == 201
    buf, content_type = taskcluster.download.downloadArtifactToBuf(
        taskId=task_id, name=name, queueService=anonymous(host)
    )
    assert bytes(buf) == data and content_type == "text/plain"


# --- object artifacts and the Object service ---------------------------------------------------------------


@pytest.mark.parametrize("size", [100, 3 * MIB + 17], ids=["dataInline", "putUrl"])
def test_object_artifact_with_the_official_upload_and_download_helpers(host, queue, size):
    task_id, worker = claimed(queue)
    name, data = "public/object.bin", pattern(size)
    created = worker.createArtifact(
        task_id, "0", name, {"storageType": "object", "expires": in_days(), "contentType": "application/octet-stream"}
    )
    assert set(created) == {"storageType", "name", "projectId", "uploadId", "expires", "credentials"}
    assert created["name"] == f"t/{task_id}/0/{name}" and created["projectId"] == "none"
    assert created["credentials"]["clientId"] == (
        f"artifact-upload/{task_id}/0/on/{WORKER['workerGroup']}/{WORKER['workerId']}"
    )
    objects = taskcluster.Object({"rootUrl": host.root_url, "credentials": created["credentials"], "maxRetries": 0})
    taskcluster.upload.uploadFromBuf(
        projectId=created["projectId"],
        name=created["name"],
        contentType="application/octet-stream",
        contentLength=size,
        expires=created["expires"],
        uploadId=created["uploadId"],
        data=data,
        objectService=objects,
    )
    # Not available before finishArtifact.
    expect_error(404, "ResourceNotFound", anonymous(host).artifact, task_id, "0", name)
    worker.finishArtifact(task_id, "0", name, {"uploadId": created["uploadId"]})
    content = anonymous(host).artifact(task_id, "0", name)
    assert content["storageType"] == "object" and content["name"] == created["name"]
    assert content["credentials"]["clientId"].startswith(f"artifact-download/{task_id}/0/")
    buf, content_type = taskcluster.download.downloadArtifactToBuf(
        taskId=task_id, runId=0, name=name, queueService=anonymous(host)
    )
    assert bytes(buf) == data and content_type == "application/octet-stream"
    # The hashes the helper sent are recorded, and are those of the data.
    meta = taskcluster.Object(
        {"rootUrl": host.root_url, "credentials": content["credentials"], "maxRetries": 0}
    ).object(created["name"])
    assert meta["hashes"]["sha256"] == hashlib.sha256(data).hexdigest()
    # getArtifact redirects to the data itself.
    assert httpx.get(anonymous(host).getArtifact(task_id, "0", name)["url"]).content == data


def test_object_upload_methods_and_what_the_credentials_allow(host, queue):
    task_id, worker = claimed(queue)
    name = "public/methods.bin"
    created = worker.createArtifact(
        task_id, "0", name, {"storageType": "object", "expires": in_days(), "contentType": "application/octet-stream"}
    )
    objects = taskcluster.Object({"rootUrl": host.root_url, "credentials": created["credentials"], "maxRetries": 0})
    request = {"projectId": "none", "uploadId": created["uploadId"], "expires": created["expires"]}
    small = b"tiny"
    answer = objects.createUpload(
        created["name"],
        {
            **request,
            "proposedUploadMethods": {
                "dataInline": {"contentType": "text/plain", "objectData": "dGlueQ=="},
                "putUrl": {"contentType": "text/plain", "contentLength": len(small)},
            },
        },
    )
    assert answer["uploadMethod"] == {"dataInline": True}
    answer = objects.createUpload(
        created["name"],
        {**request, "proposedUploadMethods": {"putUrl": {"contentType": "text/plain", "contentLength": len(small)}}},
    )
    assert set(answer["uploadMethod"]["putUrl"]) == {"url", "expires", "headers"}
    assert answer["uploadMethod"]["putUrl"]["headers"]["x-ms-blob-type"] == "BlockBlob"
    assert objects.createUpload(created["name"], {**request, "proposedUploadMethods": {}})["uploadMethod"] == {}
    # Another uploadId, another object, or a download: not with these credentials / not so.
    expect_error(
        409,
        "RequestConflict",
        objects.createUpload,
        created["name"],
        {**request, "uploadId": slugid(), "proposedUploadMethods": {}},
    )
    expect_error(
        403,
        "InsufficientScopes",
        objects.createUpload,
        f"t/{task_id}/0/public/other",
        {**request, "proposedUploadMethods": {}},
    )
    expect_error(
        403, "InsufficientScopes", objects.startDownload, created["name"], {"acceptDownloadMethods": {"getUrl": True}}
    )
    # A wrong hash is refused where the data can be checked, and the object stays unfinished.
    body = expect_error(
        400,
        "InputError",
        objects.finishUpload,
        created["name"],
        {"projectId": "none", "uploadId": created["uploadId"], "hashes": {"sha256": "0" * 64}},
    )
    assert "sha256" in body["message"]
    expect_error(400, "InputError", worker.finishArtifact, task_id, "0", name, {"uploadId": created["uploadId"]})
    objects.finishUpload(
        created["name"],
        {"projectId": "none", "uploadId": created["uploadId"], "hashes": {"sha256": hashlib.sha256(small).hexdigest()}},
    )
    expect_error(
        409, "RequestConflict", objects.createUpload, created["name"], {**request, "proposedUploadMethods": {}}
    )
    worker.finishArtifact(task_id, "0", name, {"uploadId": created["uploadId"]})
    root_objects = taskcluster.Object(
        {
            "rootUrl": host.root_url,
            "maxRetries": 0,
            "credentials": {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN},
        }
    )
    simple = root_objects.startDownload(created["name"], {"acceptDownloadMethods": {"simple": True}})
    assert simple["method"] == "simple" and httpx.get(simple["url"]).content == small
    # The `download` method's redirect, through a signed URL (bewit) as a browser link would carry it.
    redirect = httpx.get(root_objects.buildSignedUrl("download", created["name"]))
    assert redirect.status_code == 303 and httpx.get(redirect.headers["location"]).content == small


def test_reference_and_error_artifacts_through_the_download_helper(host, queue):
    task_id, worker = claimed(queue)
    worker.createArtifact(
        task_id,
        "0",
        "public/ref",
        {
            "storageType": "reference",
            "expires": in_days(),
            "contentType": "application/json",
            "url": f"{host.root_url}/api/queue/v1/ping",
        },
    )
    worker.createArtifact(
        task_id,
        "0",
        "public/err",
        {"storageType": "error", "expires": in_days(), "reason": "file-missing-on-worker", "message": "no file"},
    )
    buf, _ = taskcluster.download.downloadArtifactToBuf(
        taskId=task_id, runId=0, name="public/ref", queueService=anonymous(host)
    )
    assert json.loads(bytes(buf))["alive"] is True
    with pytest.raises(TaskclusterArtifactError) as raised:
        taskcluster.download.downloadArtifactToBuf(
            taskId=task_id, runId=0, name="public/err", queueService=anonymous(host)
        )
    assert raised.value.reason == "file-missing-on-worker"


@pytest.mark.skipif(
    shutil.which("node") is None or not TC_CLIENT.exists(),
    reason="needs node and taskcluster-client (make test installs it)",
)
def test_official_javascript_client_creates_claims_uploads_completes_and_downloads(host):
    env = {
        **os.environ,
        "TC_CLIENT": str(TC_CLIENT),
        "ROOT_URL": host.root_url,
        "CLIENT_ID": ROOT_CLIENT_ID,
        "ACCESS_TOKEN": ROOT_ACCESS_TOKEN,
        "TASK_QUEUE_ID": task_queue_id(),
        "SIZE": str(2 * MIB + 3),
    }
    done = subprocess.run(
        ["node", str(PROJECT / "tests" / "acceptance" / "js" / "object_roundtrip.mjs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["state"] == "completed" and seen["same"] is True and seen["downloadedBytes"] == 2 * MIB + 3
    assert seen["objectName"] == f"t/{seen['taskId']}/0/public/js/data.bin"


# --- discovery ------------------------------------------------------------------------------------------------

REFERENCE_ENTRY_KEYS = {
    "type",
    "method",
    "route",
    "args",
    "query",
    "name",
    "stability",
    "scopes",
    "input",
    "output",
    "title",
    "description",
}  # what api-reference-v0 allows in an entry


def test_manifest_references_and_schemas_are_served_under_the_root_url(host):
    root = host.root_url
    manifest = httpx.get(f"{root}/references/manifest.json").json()
    assert set(manifest["references"]) == {
        f"{root}/references/queue/v1/api.json",
        f"{root}/references/queue/v1/exchanges.json",
        f"{root}/references/object/v1/api.json",
        f"{root}/references/auth/v1/api.json",
        f"{root}/references/index/v1/api.json",
        f"{root}/references/purge-cache/v1/api.json",
    }
    for url in manifest["references"]:
        reference = httpx.get(url).json()
        assert reference["$schema"].startswith(f"{root}/schemas/common/")
        for entry in reference["entries"]:
            if entry["type"] != "function":
                assert entry["type"] == "topic-exchange"
                assert httpx.get(f"{root}/schemas/queue/{entry['schema'].rstrip('#')}").status_code == 200
                continue
            assert set(entry) <= REFERENCE_ENTRY_KEYS
            assert entry["args"] == [p[1:-1] for p in entry["route"].split("/") if p.startswith("<")]
            for key in ("input", "output"):
                if key in entry:
                    url = f"{root}/schemas/{reference['serviceName']}/{entry[key].rstrip('#')}"
                    schema = httpx.get(url).json()
                    assert schema["$id"] == url + "#", url
    queue_ref = httpx.get(f"{root}/references/queue/v1/api.json").json()
    names = {e["name"] for e in queue_ref["entries"]}
    assert {"createTask", "claimWork", "pollTaskUrls", "listTaskGroupEvents", "listTaskEvents"} <= names
    listing = next(e for e in queue_ref["entries"] if e["name"] == "listTaskGroup")
    assert listing["query"] == ["continuationToken", "limit"]
    exchanges = httpx.get(f"{root}/references/queue/v1/exchanges.json").json()
    assert exchanges["exchangePrefix"] == "exchange/taskcluster-queue/v1/"
    defined = next(e for e in exchanges["entries"] if e["name"] == "taskDefined")
    assert [w["name"] for w in defined["routingKey"]][:3] == ["routingKeyKind", "taskId", "runId"]
    assert httpx.get(f"{root}/schemas/common/metaschema.json").status_code == 200
    assert httpx.get(f"{root}/schemas/queue/v1/nothing.json").status_code == 404


def test_a_client_generated_from_the_served_reference_calls_the_queue(host, queue):
    reference = httpx.get(f"{host.root_url}/references/queue/v1/api.json").json()
    Served = createApiClient("ServedQueue", {"reference": reference})
    served = Served(
        {
            "rootUrl": host.root_url,
            "maxRetries": 0,
            "credentials": {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN},
        }
    )
    assert served.ping()["alive"] is True
    task_id = slugid()
    definition = task_definition()
    served.createTask(task_id, definition)
    assert served.status(task_id)["status"]["state"] == "pending"
    # An extension method the official client has no definition of.
    urls = served.pollTaskUrls(definition["taskQueueId"])
    assert urls["queues"] and all("signedPollUrl" in q for q in urls["queues"])
    listed = served.listTaskGroup(task_id, query={"limit": 1})  # a task without taskGroupId is its own group
    assert [t["status"]["taskId"] for t in listed["tasks"]] == [task_id]


def test_a_client_generated_from_the_served_index_reference_calls_the_index(host):
    reference = httpx.get(f"{host.root_url}/references/index/v1/api.json").json()
    assert {e["name"] for e in reference["entries"]} >= {
        "findTask",
        "findTasksAtIndex",
        "listNamespaces",
        "listTasks",
        "insertTask",
        "deleteTask",
        "findArtifactFromTask",
        "ping",
    }
    Served = createApiClient("ServedIndex", {"reference": reference})
    served = Served(
        {
            "rootUrl": host.root_url,
            "maxRetries": 0,
            "credentials": {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN},
        }
    )
    path = f"generated.{slugid().lower().replace('_', 'x')}.entry"
    expires = in_days()
    task_id = slugid()
    served.insertTask(path, {"taskId": task_id, "rank": 1, "data": {}, "expires": expires})
    assert served.findTask(path)["taskId"] == task_id


# --- CORS ------------------------------------------------------------------------------------------------------


def test_browser_preflight_and_cors_headers_on_every_answer(host, queue):
    preflight = httpx.options(
        f"{host.root_url}/api/queue/v1/task/{slugid()}",
        headers={
            "Origin": "https://tc-ui.example.com",
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "GET" in preflight.headers["access-control-allow-methods"].split(",")
    assert {"Authorization", "Content-Type"} <= set(preflight.headers["access-control-allow-headers"].split(","))
    assert preflight.headers["access-control-max-age"] == "900"
    for response in (
        httpx.get(f"{host.root_url}/api/queue/v1/ping"),
        httpx.get(f"{host.root_url}/api/queue/v1/task/{slugid()}"),  # 404
        httpx.get(f"{host.root_url}/references/manifest.json"),
    ):
        assert response.headers["access-control-allow-origin"] == "*", response.url
    # A browser may also read an artifact's data from the signed blob URL the queue redirects to.
    task_id, worker = claimed(queue)
    created = worker.createArtifact(
        task_id, "0", "public/page.txt", {"storageType": "s3", "expires": in_days(), "contentType": "text/plain"}
    )
    requests.put(created["putUrl"], data=b"hi", headers={"Content-Type": "text/plain"}, timeout=30)
    url = anonymous(host).artifact(task_id, "0", "public/page.txt")["url"]
    fetched = httpx.get(url, headers={"Origin": "https://tc-ui.example.com"})
    assert fetched.content == b"hi" and fetched.headers["access-control-allow-origin"] in (
        "*",
        "https://tc-ui.example.com",
    )


def test_undeclared_query_parameters_are_refused(host, queue):
    task_id = slugid()
    queue.createTask(task_id, task_definition())
    refused = httpx.get(f"{host.root_url}/api/queue/v1/task/{task_id}/status?limit=5")
    assert refused.status_code == 400 and refused.json()["code"] == "InvalidRequestArguments"
    assert "limit" in refused.json()["message"]
    bad = httpx.get(f"{host.root_url}/api/queue/v1/task/{task_id}/dependents?limit=five")
    assert bad.status_code == 400 and "does not match" in bad.json()["message"]


# --- counts an autoscaler reads ------------------------------------------------------------------------------


def test_pending_and_claimed_counts_are_exact(queue):
    tq = task_queue_id()
    ids = [slugid() for _ in range(4)]
    for task_id in ids:
        queue.createTask(task_id, task_definition(taskQueueId=tq))
    assert queue.pendingTasks(tq)["pendingTasks"] == 4
    queue.cancelTask(ids[0])  # its pending hint stays in the Azure queue until a claimWork drops it
    assert queue.pendingTasks(tq)["pendingTasks"] == 3
    [claim] = queue.claimWork(tq, {"tasks": 1, **WORKER})["tasks"]
    counts = queue.taskQueueCounts(tq)
    assert (counts["pendingTasks"], counts["claimedTasks"]) == (2, 1)
    queue.reportCompleted(claim["status"]["taskId"], str(claim["runId"]))
    counts = queue.taskQueueCounts(tq)
    assert (counts["pendingTasks"], counts["claimedTasks"]) == (2, 0)
