"""Artifact rules on the in-memory connector (Azurite and the official client: tests/acceptance/test_artifacts.py)."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from shared import errors, timeutil
from shared.domain import artifacts as A
from shared.domain.artifacts import ARTIFACT_EXPIRY_TABLE, blob_path, row_key
from shared.domain.tasks import TASKS_TABLE
from shared.storage.memory_blobs import MemoryBlobs
from tests.answers import artifact_url, create_artifact, list_artifacts, task_events
from tests.conftest import schema_defaults, slugid, task_definition
from tests.unit.helpers import ARTIFACT_SETTINGS, CONTAINER, expires, running_task


@pytest.fixture
def blobs():
    return MemoryBlobs()


pytestmark = pytest.mark.service(**ARTIFACT_SETTINGS)  # short artifact and expiry settings


def azure(clock, size=5, **extra):
    return {
        "storageType": "azure",
        "expires": expires(clock),
        "contentType": "text/plain",
        "contentLength": size,
        **extra,
    }


def reference(clock, url="https://example.com/a", **extra):
    return {"storageType": "reference", "expires": expires(clock), "contentType": "text/plain", "url": url, **extra}


async def events_of(service, task_id):
    return [
        e["exchange"].rsplit("/", 1)[1]
        for e in (await task_events(service, task_id, limit=100, continuation=None))["events"]
    ]


async def test_azure_artifact_is_present_once_finished_with_the_declared_size(service, clock, blobs):
    task_id = await running_task(service)
    created = await create_artifact(service, task_id, 0, "public/logs/live.log", azure(clock))
    assert created["storageType"] == "azure" and created["headers"]["x-ms-blob-type"] == "BlockBlob"
    assert f"/{task_id}/0/public/logs/live.log?sp=cw" in created["putUrl"]
    listed = await list_artifacts(service, task_id, 0, limit=10, continuation=None)
    assert listed["artifacts"] == []  # not uploaded yet
    with pytest.raises(A.ArtifactNotUploaded):
        await service.artifact_reads.follow(task_id, 0, "public/logs/live.log")
    with pytest.raises(A.UploadIncomplete, match="no blob"):
        await service.artifacts.finish(task_id, 0, "public/logs/live.log", created["uploadId"])
    blob = blob_path(task_id, 0, "public/logs/live.log")
    blobs.put(CONTAINER, blob, b"four")
    with pytest.raises(A.UploadIncomplete, match="4 bytes, but contentLength 5"):
        await service.artifacts.finish(task_id, 0, "public/logs/live.log", created["uploadId"])
    with pytest.raises(A.UploadIdMismatch):
        await service.artifacts.finish(task_id, 0, "public/logs/live.log", slugid())
    blobs.put(CONTAINER, blob, b"five!")
    await service.artifacts.finish(task_id, 0, "public/logs/live.log", created["uploadId"])
    await service.artifacts.finish(task_id, 0, "public/logs/live.log", created["uploadId"])  # a repeat
    again = await create_artifact(service, task_id, 0, "public/logs/live.log", azure(clock))
    assert "?sp=c&" in again["putUrl"]  # create-only: the finished blob can no longer be overwritten
    chain, artifact = await service.artifact_reads.follow(task_id, 0, "public/logs/live.log")
    assert chain == ["public/logs/live.log"] and artifact.present
    assert "sp=r&" in await artifact_url(service, artifact)
    assert (await list_artifacts(service, task_id, None, limit=10, continuation=None))["artifacts"] == [
        {
            "storageType": "azure",
            "name": "public/logs/live.log",
            "expires": timeutil.iso(artifact.expires),
            "contentType": "text/plain",
            "contentLength": 5,
        }
    ]
    assert (await events_of(service, task_id)).count("artifact-created") == 1  # at finish, not at the repeat


async def test_same_request_again_gives_a_fresh_url_and_differences_conflict(service, clock):
    task_id = await running_task(service)
    body = azure(clock)
    first = await create_artifact(service, task_id, 0, "a", body)
    clock.advance(1)
    again = await create_artifact(service, task_id, 0, "a", body)
    assert again["uploadId"] == first["uploadId"] and again["putUrl"] != first["putUrl"]
    longer = dict(body, expires=expires(clock, days=2))
    await create_artifact(service, task_id, 0, "a", longer)
    for changed, problem in [
        (body, "not shortened"),
        (dict(longer, contentType="x/y"), "contentType"),
        (dict(longer, contentLength=6), "contentLength"),
        (reference(clock), "storageType"),
    ]:
        with pytest.raises(A.ArtifactConflict, match=problem):
            await create_artifact(service, task_id, 0, "a", changed)
    with pytest.raises(A.ArtifactExpiresInvalid, match="outlive its task"):
        await create_artifact(service, task_id, 0, "b", azure(clock, expires="2999-01-01T00:00:00.000Z"))


async def test_reference_may_change_its_url_or_become_a_link_and_each_change_is_announced(service, clock):
    task_id = await running_task(service)
    await create_artifact(service, task_id, 0, "r", reference(clock))
    await create_artifact(service, task_id, 0, "r", reference(clock))  # the same again: nothing new
    await create_artifact(service, task_id, 0, "r", reference(clock, url="https://example.com/b"))
    _, artifact = await service.artifact_reads.follow(task_id, 0, "r")
    assert await artifact_url(service, artifact) == "https://example.com/b"
    await create_artifact(service, task_id, 0, "target", reference(clock))
    await create_artifact(
        service, task_id, 0, "r", {"storageType": "link", "expires": expires(clock), "artifact": "target"}
    )
    chain, artifact = await service.artifact_reads.follow(task_id, 0, "r")
    assert chain == ["r", "target"] and artifact.name == "target"
    assert (await events_of(service, task_id)).count("artifact-created") == 4
    with pytest.raises(A.ArtifactConflict, match="only a reference may become a link"):
        await create_artifact(service, task_id, 0, "r", reference(clock))


async def test_link_cycles_and_missing_targets(service, clock):
    task_id = await running_task(service)
    for name, target in [("a", "b"), ("b", "c"), ("c", "a"), ("d", "nowhere")]:
        await create_artifact(
            service, task_id, 0, name, {"storageType": "link", "expires": expires(clock), "artifact": target}
        )
    with pytest.raises(A.ArtifactLinkInvalid, match="loops: a -> b -> c -> a"):
        await service.artifact_reads.follow(task_id, 0, "a")
    with pytest.raises(A.ArtifactNotFound, match="`nowhere`"):
        await service.artifact_reads.follow(task_id, 0, "d")


async def test_runs_accept_artifacts_while_running_and_shortly_after_an_exception(service, clock):
    task_id = await running_task(service)
    await service.lifecycle.resolve(task_id, 0, "exception", "malformed-payload")
    await create_artifact(service, task_id, 0, "late", reference(clock))  # inside the window (60 s here)
    clock.advance(61)
    with pytest.raises(A.RunNotAcceptingArtifacts):
        await create_artifact(service, task_id, 0, "later", reference(clock))
    done = await running_task(service)
    await service.lifecycle.resolve(done, 0, "completed", "completed")
    with pytest.raises(A.RunNotAcceptingArtifacts, match="is completed"):
        await create_artifact(service, done, 0, "x", reference(clock))
    with pytest.raises(A.ArtifactTaskNotFound):
        await create_artifact(service, slugid(), 0, "x", reference(clock))
    with pytest.raises(A.ArtifactRunNotFound):
        await create_artifact(service, done, 1, "x", reference(clock))
    pending = slugid()
    definition = task_definition()
    await service.creation.create_task(pending, dict(definition, **schema_defaults(definition)))
    with pytest.raises(A.RunNeverClaimed):
        await create_artifact(service, pending, 0, "x", reference(clock))


async def test_refusals_change_nothing(service, clock):
    task_id = await running_task(service)
    before = dict(service.stores.tables._tables[TASKS_TABLE])
    s3 = {
        "storageType": "s3",
        "expires": expires(clock),
        "contentType": "application/octet-stream",
        "contentLength": 5 * 2**30 + 1,
    }
    for body, error in [
        (s3, A.ArtifactTooLarge),
        ({**s3, "contentLength": 1, "contentType": "text/plain;x=y, text/html"}, A.ContentTypeInvalid),
        ({**s3, "contentLength": 1, "contentType": "text/plain\r\nX-Evil: 1"}, A.ContentTypeInvalid),
        ({**s3, "contentLength": 1, "contentType": "text/plain; charset=\u00e9"}, A.ContentTypeInvalid),
        (azure(clock, expires=timeutil.iso(clock() - dt.timedelta(minutes=16))), A.ArtifactExpiresInvalid),
    ]:
        with pytest.raises(error):
            await create_artifact(service, task_id, 0, "x", body)
    with pytest.raises(A.ArtifactNameInvalid):
        await create_artifact(service, task_id, 0, "x" * 1025, reference(clock))
    assert service.stores.tables._tables[TASKS_TABLE] == before


async def test_concurrent_creates_of_many_artifacts_all_land(service, clock):
    task_id = await running_task(service)
    await asyncio.gather(*(create_artifact(service, task_id, 0, f"public/{i}", reference(clock)) for i in range(20)))
    listed = await list_artifacts(service, task_id, 0, limit=7, continuation=None)
    names = [a["name"] for a in listed["artifacts"]]
    while "continuationToken" in listed:
        listed = await list_artifacts(service, task_id, 0, limit=7, continuation=listed["continuationToken"])
        names += [a["name"] for a in listed["artifacts"]]
    assert sorted(names) == sorted(f"public/{i}" for i in range(20))
    assert (await events_of(service, task_id)).count("artifact-created") == 20


async def test_expiry_deletes_the_blob_then_the_row_and_keeps_what_was_extended(service, clock, blobs):
    task_id = await running_task(service)
    short, extended = azure(clock), azure(clock)
    for name in ("short", "extended"):
        created = await create_artifact(service, task_id, 0, name, short)
        blobs.put(CONTAINER, blob_path(task_id, 0, name), b"12345")
        await service.artifacts.finish(task_id, 0, name, created["uploadId"])
    await create_artifact(service, task_id, 0, "extended", dict(extended, expires=expires(clock, days=3)))
    clock.advance(2 * 86400)
    assert await service.expiry.expire_artifacts() == 1
    assert blobs.get(CONTAINER, blob_path(task_id, 0, "short")) is None
    assert await service.stores.tables.get(TASKS_TABLE, task_id, row_key(0, "short")) is None
    assert blobs.get(CONTAINER, blob_path(task_id, 0, "extended")) == b"12345"
    await service.artifact_reads.follow(task_id, 0, "extended")
    assert service.stores.tables._tables[ARTIFACT_EXPIRY_TABLE] and await service.expiry.expire_artifacts() == 0
    assert len(service.stores.tables._tables[ARTIFACT_EXPIRY_TABLE]) == 1  # the later entry of `extended`


async def test_expired_artifacts_answer_410_before_they_are_deleted(service, clock):
    task_id = await running_task(service)
    await create_artifact(service, task_id, 0, "r", reference(clock))
    clock.advance(86400 + 1)
    with pytest.raises(A.ArtifactExpired):
        await service.artifact_reads.follow(task_id, 0, "r")


def test_blob_paths_are_readable_when_safe_and_hashed_otherwise():
    assert blob_path("T", 0, "public/build/a.tar.gz") == "T/0/public/build/a.tar.gz"
    for odd in ("public/../x", "a/./b", "ends.", "a\\b", "q?x", "sp ace", "/lead", "trail/", "a//b"):
        path = blob_path("T", 0, odd)
        assert path.startswith("T/0/~") and len(path) == len("T/0/~") + 64, odd


async def test_error_artifacts_are_recorded_with_reason_and_message(service, clock):
    task_id = await running_task(service)
    await create_artifact(
        service,
        task_id,
        0,
        "e",
        {"storageType": "error", "expires": expires(clock), "reason": "file-missing-on-worker", "message": "gone"},
    )
    _, artifact = await service.artifact_reads.follow(task_id, 0, "e")
    assert artifact.details == {"reason": "file-missing-on-worker", "message": "gone"}
    with pytest.raises(errors.RunNotFound):
        await list_artifacts(service, task_id, 3, limit=10, continuation=None)


async def test_names_too_long_for_a_table_key_are_keyed_by_their_hash(service, clock):
    task_id = await running_task(service)
    names = ["public/" + "/" * 600, "y" * 1024, "short"]
    for name in names:
        await create_artifact(service, task_id, 0, name, reference(clock))
    assert len(row_key(0, names[0])) < 100 and row_key(0, "short") == "artifact:0:short"
    listed = await list_artifacts(service, task_id, 0, limit=10, continuation=None)
    assert sorted(a["name"] for a in listed["artifacts"]) == sorted(names)
    for name in names:
        assert (await service.artifact_reads.follow(task_id, 0, name))[1].name == name


async def test_an_azure_era_artifact_is_read_live_while_its_run_runs_and_sealed_once_resolved(service, clock, blobs):
    """The worker's live log (worker/live_log.py): no snapshot while the worker may still append."""
    task_id = await running_task(service)
    name = "public/logs/live.log"
    await create_artifact(
        service, task_id, 0, name, {"storageType": "azure", "expires": expires(clock), "contentType": "text/plain"}
    )
    blobs.put(CONTAINER, blob_path(task_id, 0, name), b"line 1\n")
    _, artifact = await service.artifact_reads.follow(task_id, 0, name)
    live = await artifact_url(service, artifact)
    assert live is not None and "snapshot=" not in live  # the growing blob itself
    blobs.put(CONTAINER, blob_path(task_id, 0, name), b"line 1\nline 2\n")
    assert "snapshot=" not in (await artifact_url(service, artifact) or "")
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    _, artifact = await service.artifact_reads.follow(task_id, 0, name)
    sealed = await artifact_url(service, artifact)
    assert sealed is not None and "snapshot=" in sealed
    _, again = await service.artifact_reads.follow(task_id, 0, name)
    assert await artifact_url(service, again) == sealed  # the snapshot taken at the resolution, from then on
    assert (await service.tasks.load(task_id)).runs[0].live[name] in sealed
