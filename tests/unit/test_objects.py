"""The Object service's rules, `s3` and `object` artifacts, and exact task queue counts on the in-memory connector
(Azurite and the official clients: tests/acceptance/test_compatibility.py)."""

from __future__ import annotations

import base64
import hashlib
import urllib.parse

import pytest

from shared.domain import artifacts as A
from shared.domain.artifacts import S3_BLOCK, blob_path
from shared.domain.objects import OBJECT_EXPIRY_TABLE, OBJECTS_TABLE, object_blob
from shared.operations import object_uploads as OU
from shared.operations import objects as O
from shared.operations.writes import staging
from shared.storage.memory_blobs import MemoryBlobs
from tests.answers import artifact_url, create_artifact
from tests.conftest import schema_defaults, slugid, task_definition
from tests.unit.helpers import ARTIFACT_SETTINGS, CONTAINER, expires, running_task


@pytest.fixture
def blobs():
    return MemoryBlobs()


pytestmark = pytest.mark.service(**ARTIFACT_SETTINGS)


def upload_request(clock, upload_id, methods, **extra):
    return {
        "projectId": "proj",
        "uploadId": upload_id,
        "expires": expires(clock),
        "proposedUploadMethods": methods,
        **extra,
    }


def inline(data, content_type="text/plain"):
    return {"dataInline": {"contentType": content_type, "objectData": base64.b64encode(data).decode()}}


async def test_data_inline_is_written_at_once_and_finished_with_its_hashes(service, clock, blobs):
    upload_id, data = slugid(), b"hello object"
    upload = await service.objects.create_upload("o/1", upload_request(clock, upload_id, inline(data)))
    assert upload.method == "dataInline" and blobs.get(CONTAINER, object_blob("o/1")) == data
    with pytest.raises(O.ObjectNotFound):  # not downloadable before finishUpload
        await service.objects.start_download("o/1", {"getUrl": True})
    await service.objects.finish_upload("o/1", {"projectId": "proj", "uploadId": upload_id})
    download = await service.objects.start_download("o/1", {"getUrl": True, "simple": True})
    assert download.method == "getUrl" and download.hashes["sha256"] == hashlib.sha256(data).hexdigest()
    assert "snapshot=" in download.url and "sp=r" in download.url


async def test_put_url_upload_must_hold_the_proposed_length(service, clock, blobs):
    upload_id = slugid()
    methods = {"putUrl": {"contentType": "application/octet-stream", "contentLength": 5}}
    upload = await service.objects.create_upload("o/2", upload_request(clock, upload_id, methods))
    assert upload.method == "putUrl" and upload.headers == {
        "x-ms-blob-type": "BlockBlob",
        "Content-Type": "application/octet-stream",
        "Content-Length": "5",
    }
    finish = {"projectId": "proj", "uploadId": upload_id}
    with pytest.raises(O.UploadIncomplete, match="nothing was uploaded"):
        await service.objects.finish_upload("o/2", finish)
    blobs.put(CONTAINER, object_blob("o/2"), b"1234")
    with pytest.raises(O.UploadIncomplete, match="holds 4 bytes"):
        await service.objects.finish_upload("o/2", finish)
    blobs.put(CONTAINER, object_blob("o/2"), b"12345")
    with pytest.raises(O.HashMismatch, match="sha256"):
        await service.objects.finish_upload("o/2", {**finish, "hashes": {"sha256": "0" * 64}})
    assert (await service.objects.stored("o/2")).state == "uploading"  # the refusal changed nothing
    await service.objects.finish_upload("o/2", finish)
    await service.objects.finish_upload("o/2", finish)  # again: nothing changes
    stored = await service.objects.finished("o/2")
    assert stored.hashes["sha512"] == hashlib.sha512(b"12345").hexdigest() and stored.content_length == 5
    blobs.put(CONTAINER, object_blob("o/2"), b"changed")  # the put URL may still write the blob...
    assert await service.stores.blobs.read(CONTAINER, stored.blob, snapshot=stored.snapshot) == b"12345"


async def test_an_upload_is_bound_to_its_id_project_and_expiry_and_a_finished_object_does_not_change(service, clock):
    upload_id = slugid()
    request = upload_request(clock, upload_id, {})
    assert (await service.objects.create_upload("o/3", request)).method is None
    for changed, problem in [
        ({"uploadId": slugid()}, "another uploadId"),
        ({"projectId": "other"}, "projectId"),
        ({"expires": expires(clock, days=2)}, "it expires"),
    ]:
        with pytest.raises(O.UploadConflict, match=problem):
            await service.objects.create_upload("o/3", {**request, **changed})
    await service.objects.create_upload("o/3", {**request, "proposedUploadMethods": inline(b"x")})
    await service.objects.finish_upload("o/3", {"projectId": "proj", "uploadId": upload_id})
    with pytest.raises(O.UploadConflict, match="finished"):
        await service.objects.create_upload("o/3", {**request, "proposedUploadMethods": inline(b"y")})
    with pytest.raises(O.UploadConflict, match="already recorded"):
        await service.objects.finish_upload(
            "o/3", {"projectId": "proj", "uploadId": upload_id, "hashes": {"sha256": "1" * 64}}
        )
    with pytest.raises(O.NoDownloadMethod):
        await service.objects.start_download("o/3", {"carrierPigeon": True})


async def test_inline_data_that_is_not_base64_is_refused(service, clock):
    methods = {"dataInline": {"contentType": "text/plain", "objectData": "not base64!"}}
    with pytest.raises(O.InlineDataInvalid):
        await service.objects.create_upload("o/4", upload_request(clock, slugid(), methods))
    assert await service.objects.stored("o/4") is None


async def test_expired_objects_lose_blob_snapshots_and_row(service, clock, blobs):
    upload_id = slugid()
    await service.objects.create_upload("o/5", upload_request(clock, upload_id, inline(b"bye")))
    await service.objects.finish_upload("o/5", {"projectId": "proj", "uploadId": upload_id})
    assert await service.expiry.expire_objects() == 0
    clock.advance(2 * 86400)
    assert await service.expiry.expire_objects() == 1
    assert not [k for k in blobs.blobs if k[1].startswith(object_blob("o/5"))]
    assert await service.objects.stored("o/5") is None
    assert not service.stores.tables._tables[OBJECT_EXPIRY_TABLE] and not service.stores.tables._tables[OBJECTS_TABLE]


async def chunks(data: bytes, size: int = 1000):
    for offset in range(0, len(data), size):
        yield data[offset : offset + size]


def data_request(url: str, name: str, **headers: str) -> OU.ObjectDataRequest:
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    return OU.ObjectDataRequest(name, query["uploadId"], int(query["expires"]), query["signature"], headers)


async def test_a_chunked_client_uploads_through_the_queue_then_finishes(service, clock, blobs):
    """Taskcluster's Go client PUTs chunked bodies, which Blob Storage refuses: its putUrl is the queue's own."""
    upload_id, data = slugid(), bytes(range(256)) * 40
    methods = {"putUrl": {"contentType": "application/x-tar", "contentLength": len(data)}}
    upload = await service.objects.create_upload("o/go", upload_request(clock, upload_id, methods), chunked=True)
    assert upload.method == "putUrl" and upload.headers == {"Content-Type": "application/x-tar"}
    assert upload.put_url.startswith("http://127.0.0.1:7071/api/object/v1/upload-data/o/go?uploadId=")
    etag = await service.object_uploads.receive(data_request(upload.put_url, "o/go"), chunks(data))
    assert etag == f'"{hashlib.md5(data).hexdigest()}"' and blobs.get(CONTAINER, object_blob("o/go")) == data
    assert blobs.properties[(CONTAINER, object_blob("o/go"))].content_type == "application/x-tar"
    await service.objects.finish_upload(
        "o/go", {"projectId": "proj", "uploadId": upload_id, "hashes": {"sha256": hashlib.sha256(data).hexdigest()}}
    )
    with pytest.raises(O.UploadConflict, match="finished"):  # objects do not change
        await service.object_uploads.receive(data_request(upload.put_url, "o/go"), chunks(b"other"))
    assert (await service.objects.finished("o/go")).content_length == len(data)


async def test_a_chunked_upload_is_refused_when_altered_expired_or_too_long(service, clock, blobs):
    upload_id = slugid()
    methods = {"putUrl": {"contentType": "text/plain", "contentLength": 10}}
    upload = await service.objects.create_upload("o/bad", upload_request(clock, upload_id, methods), chunked=True)
    good = data_request(upload.put_url, "o/bad")
    for altered in [
        OU.ObjectDataRequest("o/other", good.upload_id, good.expires, good.signature, {}),
        OU.ObjectDataRequest("o/bad", slugid(), good.expires, good.signature, {}),
        OU.ObjectDataRequest("o/bad", good.upload_id, good.expires + 1, good.signature, {}),
    ]:
        with pytest.raises(OU.ObjectUploadUrlInvalid, match="signature"):
            await service.object_uploads.receive(altered, chunks(b"0123456789"))
    with pytest.raises(staging.UploadTooLarge):  # past the proposed contentLength, counted as it streams
        await service.object_uploads.receive(good, chunks(b"0123456789X", 4))
    clock.advance(3600)
    with pytest.raises(OU.ObjectUploadUrlInvalid, match="expired"):
        await service.object_uploads.receive(good, chunks(b"0123456789"))
    assert blobs.get(CONTAINER, object_blob("o/bad")) is None


async def test_s3_artifact_uploaded_to_an_earlier_versions_block_url_is_sealed_when_first_read(service, clock, blobs):
    """Earlier versions answered an `s3` createArtifact with a Put Block URL on Blob Storage; what was uploaded
    there is committed and snapshotted at the first read, as then."""
    task_id = await running_task(service)
    created = await create_artifact(
        service,
        task_id,
        0,
        "public/s3",
        {"storageType": "s3", "expires": expires(clock), "contentType": "text/plain", "contentEncoding": "gzip"},
    )
    assert (
        set(created) == {"storageType", "putUrl", "expires", "contentType"} and "/artifact-upload/" in created["putUrl"]
    )
    _, artifact = await service.artifact_reads.follow(task_id, 0, "public/s3")
    with pytest.raises(A.ArtifactNotUploaded):  # present, but nothing uploaded yet
        await artifact_url(service, artifact)
    blobs.put_block(CONTAINER, blob_path(task_id, 0, "public/s3"), S3_BLOCK, b"gz-bytes")
    url = await artifact_url(service, artifact)
    assert "snapshot=" in url and "rsce=gzip" in url and "rsct=text/plain" in url
    _, sealed = await service.artifact_reads.follow(task_id, 0, "public/s3")
    assert sealed.sealed and sealed.details["snapshot"] in url  # sealed once: later reads use the same snapshot
    blobs.put_block(CONTAINER, blob_path(task_id, 0, "public/s3"), S3_BLOCK, b"other")  # a later PUT...
    snapshot = sealed.details["snapshot"]
    assert blobs.get_snapshot(CONTAINER, blob_path(task_id, 0, "public/s3"), snapshot) == b"gz-bytes"  # ...is unseen


async def test_object_artifact_is_present_once_its_object_is_finished(service, clock):
    task_id = await running_task(service)
    created = await create_artifact(
        service,
        task_id,
        0,
        "public/o",
        {"storageType": "object", "expires": expires(clock), "contentType": "application/json"},
    )
    assert created["name"] == f"t/{task_id}/0/public/o" and created["credentials"]["certificate"]
    with pytest.raises(A.UploadIncomplete, match="was not uploaded"):
        await service.artifacts.finish(task_id, 0, "public/o", created["uploadId"])
    await service.objects.create_upload(
        created["name"],
        {
            "projectId": created["projectId"],
            "uploadId": created["uploadId"],
            "expires": created["expires"],
            "proposedUploadMethods": inline(b"{}", "application/json"),
        },
    )
    await service.objects.finish_upload(created["name"], {"projectId": "none", "uploadId": created["uploadId"]})
    await service.artifacts.finish(task_id, 0, "public/o", created["uploadId"])
    _, artifact = await service.artifact_reads.follow(task_id, 0, "public/o")
    location = await service.artifact_reads.location(artifact)
    assert location.object_name == created["name"] and location.credentials is not None
    assert "snapshot=" in str(location.url)


async def test_s3_artifacts_over_the_block_limit_are_refused(service, clock):
    task_id = await running_task(service)
    with pytest.raises(A.ArtifactTooLarge):
        await create_artifact(
            service,
            task_id,
            0,
            "big",
            {
                "storageType": "s3",
                "expires": expires(clock),
                "contentType": "application/x-a",
                "contentLength": A.S3_MAX_BYTES + 1,
            },
        )
    await create_artifact(
        service,
        task_id,
        0,
        "fits",
        {
            "storageType": "s3",
            "expires": expires(clock),
            "contentType": "application/x-a",
            "contentLength": A.S3_MAX_BYTES,
        },
    )


async def test_counts_are_the_index_rows_not_the_hints(service):
    tq = "prov/counts"
    ids = [slugid() for _ in range(3)]
    for task_id in ids:
        definition = task_definition(taskQueueId=tq)
        await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    assert await service.queries.task_queue_counts(tq) == (3, 0)
    await service.lifecycle.cancel_task(ids[0])  # its hint stays in the pending queue; the count drops at once
    await service.claims.claim(ids[1], 0, "g", "w")
    assert await service.queries.task_queue_counts(tq) == (1, 1)
