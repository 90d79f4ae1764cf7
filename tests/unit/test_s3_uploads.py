"""An `s3` artifact's PUT through the queue (shared/operations/s3_uploads.py), on the memory connector: staged in
blocks, committed with the PUT's representation headers, recorded with the artifact; every refusal stores nothing.
The same on Azurite, with the official client and real workers: tests/acceptance/test_compatibility.py,
test_signed_url_abuse.py, test_scriptworker.py."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import urllib.parse
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain import artifacts as A
from shared.domain.artifacts import blob_path
from shared.operations import s3_uploads as U
from shared.operations.writes import staging as S
from shared.storage.base import BlobProperties, BlocksMissing
from shared.storage.memory_blobs import MemoryBlobs
from tests.answers import artifact_url, create_artifact
from tests.turns import others_run
from tests.unit.helpers import ARTIFACT_SETTINGS, CONTAINER, expires, running_task

MiB = 1024 * 1024


@pytest.fixture
def blobs():
    return MemoryBlobs()


pytestmark = pytest.mark.service(**ARTIFACT_SETTINGS)


async def pieces(data: bytes, size: int = 100_000) -> AsyncIterator[bytes]:
    for offset in range(0, len(data), size):
        yield data[offset : offset + size]


class GatedBlobs(MemoryBlobs):
    """Blobs whose every block waits for `gate`: uploads hold their slots until it opens."""

    def __init__(self, gate: asyncio.Event) -> None:
        super().__init__()
        self.gate = gate

    async def stage_block(self, container, blob, block_id, data):
        await self.gate.wait()
        await super().stage_block(container, blob, block_id, data)


async def s3(service, clock, name="public/data.bin", **body) -> tuple[str, U.UploadRequest]:
    task_id = await running_task(service)
    created = await create_artifact(
        service,
        task_id,
        0,
        name,
        {"storageType": "s3", "expires": expires(clock), "contentType": "application/octet-stream", **body},
    )
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(created["putUrl"]).query))
    return task_id, U.UploadRequest(task_id, 0, name, int(query["expires"]), query["signature"], {})


def with_headers(request: U.UploadRequest, **headers: str) -> U.UploadRequest:
    return U.UploadRequest(
        request.task_id,
        request.run_id,
        request.name,
        request.expires,
        request.signature,
        {k.replace("_", "-"): v for k, v in headers.items()},
    )


async def test_a_put_is_staged_in_blocks_and_committed_with_its_headers(service, clock, blobs):
    task_id, request = await s3(service, clock)
    data = bytes(range(256)) * (9 * MiB // 256 + 7)  # three blocks and a bit
    etag = await service.s3_uploads.receive(
        with_headers(request, content_encoding="gzip", cache_control="max-age=60", content_length=str(len(data))),
        pieces(data),
    )
    assert etag == f'"{hashlib.md5(data).hexdigest()}"'
    blob = blob_path(task_id, 0, "public/data.bin")
    assert blobs.get(CONTAINER, blob) == data and not any(k[:2] == (CONTAINER, blob) for k in blobs.blocks)
    assert blobs.properties[(CONTAINER, blob)] == BlobProperties(
        "application/octet-stream", "gzip", None, None, "max-age=60"
    )
    _, artifact = await service.artifact_reads.follow(task_id, 0, "public/data.bin")
    assert artifact.sealed and artifact.details["uploaded"] == {
        "encoding": "gzip",
        "cacheControl": "max-age=60",
        "bytes": str(len(data)),
        "etag": etag,
    }
    url = await artifact_url(service, artifact)
    assert "rsce=gzip" in url and "rscc=max-age=60" in url and f"snapshot={artifact.details['snapshot']}" in url
    assert blobs.get_snapshot(CONTAINER, blob, artifact.details["snapshot"]) == data


async def test_the_declared_encoding_is_used_when_the_put_names_none(service, clock, blobs):
    task_id, request = await s3(service, clock, contentEncoding="gzip")
    await service.s3_uploads.receive(request, pieces(b"gz"))
    assert blobs.properties[(CONTAINER, blob_path(task_id, 0, "public/data.bin"))].content_encoding == "gzip"
    _, artifact = await service.artifact_reads.follow(task_id, 0, "public/data.bin")
    assert "rsce=gzip" in await artifact_url(service, artifact)


async def test_an_empty_body_is_an_empty_artifact(service, clock, blobs):
    task_id, request = await s3(service, clock)
    assert await service.s3_uploads.receive(request, pieces(b"")) == f'"{hashlib.md5(b"").hexdigest()}"'
    assert blobs.get(CONTAINER, blob_path(task_id, 0, "public/data.bin")) == b""


@pytest.mark.parametrize(
    "problem", ["signature", "expired", "other-artifact", "encoding", "md5", "short", "too-large", "resolved", "not-s3"]
)
async def test_refusals_store_nothing(service, clock, blobs, problem):
    task_id, request = await s3(service, clock)
    data = b"data" * 1000
    error: type[Exception] = {
        "signature": U.UploadUrlInvalid,
        "expired": U.UploadUrlInvalid,
        "other-artifact": U.UploadUrlInvalid,
        "encoding": U.UploadHeaderInvalid,
        "md5": S.UploadDigestMismatch,
        "short": S.UploadTruncated,
        "too-large": S.UploadTooLarge,
        "resolved": A.RunNotAcceptingArtifacts,
        "not-s3": U.NotAnS3Artifact,
    }[problem]
    if problem == "signature":
        request = U.UploadRequest(task_id, 0, request.name, request.expires, "A" * 43, {})
    elif problem == "expired":
        clock.advance(2 * 3600)
    elif problem == "other-artifact":
        request = U.UploadRequest(task_id, 0, "public/other.bin", request.expires, request.signature, {})
    elif problem == "encoding":
        request = with_headers(request, content_encoding="gzip\r\nx-evil: 1")
    elif problem == "md5":
        request = with_headers(request, content_md5=base64.b64encode(b"0" * 16).decode())
    elif problem == "short":
        request = with_headers(request, content_length=str(len(data) + 1))
    elif problem == "too-large":
        request = with_headers(request, content_length=str(6 * 1024**3))
    elif problem == "resolved":
        await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    elif problem == "not-s3":
        await create_artifact(
            service,
            task_id,
            0,
            "public/ref",
            {"storageType": "reference", "expires": expires(clock), "url": "https://example.com/"},
        )
        request = U.UploadRequest(
            task_id,
            0,
            "public/ref",
            request.expires,
            A.upload_signature(service.settings.upload_key, task_id, 0, "public/ref", request.expires),
            {},
        )
    with pytest.raises(error):
        await service.s3_uploads.receive(request, pieces(data))
    assert blobs.get(CONTAINER, blob_path(task_id, 0, "public/data.bin")) is None
    _, artifact = await service.artifact_reads.follow(task_id, 0, "public/data.bin")
    assert "uploaded" not in artifact.details


async def test_a_body_counted_past_the_limit_is_refused_while_it_streams(service, clock, blobs):
    service.s3_uploads.limit = S.Limit(1000, "QUEUE_ARTIFACT_S3_MAX_BYTES")  # as that setting would
    task_id, request = await s3(service, clock)
    with pytest.raises(S.UploadTooLarge):
        await service.s3_uploads.receive(request, pieces(b"x" * 1001, 300))
    assert blobs.get(CONTAINER, blob_path(task_id, 0, "public/data.bin")) is None


async def test_a_put_whose_blocks_another_commit_discarded_is_told_to_retry(service, clock, blobs, monkeypatch):
    _, request = await s3(service, clock)
    real_commit = blobs.commit_blocks

    async def racing(container, blob, ids, properties):
        blobs.blocks.clear()  # another PUT of the same artifact committed first
        await real_commit(container, blob, ids, properties)

    monkeypatch.setattr(blobs, "commit_blocks", racing)
    with pytest.raises(BlocksMissing) as refused:
        await service.s3_uploads.receive(request, pieces(b"data"))
    assert refused.value.status == 503


async def test_uploads_at_once_are_bounded_by_the_slots_and_the_others_wait_unread():
    """QUEUE_ARTIFACT_UPLOAD_SLOTS bounds what uploads hold (each at most two blocks): with one slot, a second
    upload reads none of its body until the first is staged."""
    gate, read_by_second = asyncio.Event(), []

    staging = S.BlockStaging(lambda: GatedBlobs(gate), CONTAINER, slots=1)
    limit = S.Limit(1000, "test")

    async def second_body():
        read_by_second.append(True)
        yield b"second"

    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    first = asyncio.create_task(staging.stage("a", "a", pieces(b"first"), limit, {}, holder="a", deadline=later))
    await others_run()
    second = asyncio.create_task(staging.stage("b", "b", second_body(), limit, {}, holder="b", deadline=later))
    await others_run()
    assert read_by_second == []  # waiting for the slot, its body unread
    gate.set()
    assert (await first).size == 5 and (await second).size == 6 and read_by_second == [True]


async def test_one_worker_takes_at_most_its_share_and_waits_in_a_bounded_line():
    """One worker once held all 8 slots with 8 trickled PUTs to its own runs' URLs, every other waiting, and 498
    more waited unread, exempt from every bound: a holder (a worker) now takes at most a quarter of them (2 of 8),
    at most 4 more of its uploads wait, and the rest are refused at once (503), holding nothing."""
    gate = asyncio.Event()
    read: list[str] = []

    staging = S.BlockStaging(lambda: GatedBlobs(gate), CONTAINER, slots=8)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)

    async def body(tag: str) -> AsyncIterator[bytes]:
        read.append(tag)
        yield tag.encode()

    def stage(holder: str, n: int) -> asyncio.Task[S.Staged]:
        name = f"{holder}-{n}"
        return asyncio.create_task(
            staging.stage(name, name, body(name), S.Limit(100, "t"), {}, holder=holder, deadline=later)
        )

    hog = [stage("worker:g/hog", n) for n in range(8)]
    await others_run()
    assert sorted(read) == ["worker:g/hog-0", "worker:g/hog-1"]  # its share; four wait unread, two refused
    refused = [t for t in hog if t.done()]
    assert len(refused) == 2 and all(isinstance(t.exception(), S.UploadsBusy) for t in refused)
    other = stage("worker:g/other", 0)
    await others_run()
    assert "worker:g/other-0" in read  # another worker is not kept waiting behind it
    gate.set()
    waited = [t for t in hog if t not in refused]
    assert [(await t).size for t in [*waited, other]] == [14] * 6 + [16]
    assert staging._holders == {} and staging._waiting == {}  # nothing kept once they ended


async def test_an_upload_waits_for_a_slot_at_most_its_bound():
    gate = asyncio.Event()

    staging = S.BlockStaging(lambda: GatedBlobs(gate), CONTAINER, slots=1)
    staging.wait_seconds = 0.2
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    first = asyncio.create_task(staging.stage("a", "a", pieces(b"a"), S.Limit(9, "t"), {}, holder="x", deadline=later))
    await others_run()
    with pytest.raises(S.UploadsBusy, match="no upload slot came free in time"):
        await staging.stage("b", "b", pieces(b"b"), S.Limit(9, "t"), {}, holder="y", deadline=later)
    gate.set()
    assert (await first).size == 1 and staging._waiting == {}


@settings(max_examples=40, deadline=None)
@given(uploads=st.lists(st.sampled_from(["w1", "w2", "w3", "w4"]), min_size=1, max_size=30))
def test_no_worker_holds_more_than_its_share_or_waits_past_its_line(uploads):
    """Whatever mix of workers uploads at once: at most `slots` stage, each worker at most its share, at most
    LINE_PER_HOLDER more of its uploads wait, every other one is refused at once, and all that were taken end."""

    async def go() -> None:
        gate = asyncio.Event()
        staging_now: dict[str, int] = {}
        most: dict[str, int] = {}

        staging = S.BlockStaging(lambda: GatedBlobs(gate), CONTAINER, slots=8)
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)

        async def body(holder: str) -> AsyncIterator[bytes]:
            staging_now[holder] = staging_now.get(holder, 0) + 1
            most[holder] = max(most.get(holder, 0), staging_now[holder])
            assert sum(staging_now.values()) <= 8
            yield b"x"
            staging_now[holder] -= 1

        tasks = [
            asyncio.create_task(
                staging.stage(f"{h}-{i}", f"{h}-{i}", body(h), S.Limit(9, "t"), {}, holder=h, deadline=later)
            )
            for i, h in enumerate(uploads)
        ]
        await others_run()  # each upload staged as far as its slot or the gate lets it
        gate.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for holder in set(uploads):
            mine = [o for h, o in zip(uploads, outcomes, strict=True) if h == holder]
            taken = [o for o in mine if not isinstance(o, BaseException)]
            assert len(taken) == min(len(mine), staging.per_holder + S.LINE_PER_HOLDER)
            assert all(isinstance(o, S.UploadsBusy) for o in mine if isinstance(o, BaseException))
            assert most.get(holder, 0) <= staging.per_holder
        assert staging._holders == {} and staging._waiting == {}

    asyncio.run(go())


async def test_a_body_still_coming_when_its_url_expires_is_cut(service, clock, blobs):
    task_id, request = await s3(service, clock)

    async def slow() -> AsyncIterator[bytes]:
        yield b"a" * 1000
        clock.advance(3 * 3600)  # past the URL's expiry while it sends
        yield b"b" * 1000

    with pytest.raises(S.UploadPastItsUrl):
        await service.s3_uploads.receive(request, slow())
    assert await blobs.read(CONTAINER, blob_path(task_id, 0, "public/data.bin")) is None  # nothing committed


async def test_an_upload_that_ends_after_its_run_resolved_is_refused_and_stores_nothing(service, clock, blobs):
    task_id, request = await s3(service, clock)
    await service.s3_uploads.receive(request, pieces(b"first"))
    resolved = asyncio.Event()

    async def late() -> AsyncIterator[bytes]:
        yield b"replaced"
        await resolved.wait()
        clock.advance(60)  # the rest comes a minute after the run resolved
        yield b" after the report"

    upload = asyncio.create_task(service.s3_uploads.receive(request, late()))
    await others_run()
    await service.lifecycle.resolve(task_id, 0, "completed", "completed")
    resolved.set()
    with pytest.raises(A.RunNotAcceptingArtifacts):
        await upload
    blob = blob_path(task_id, 0, "public/data.bin")
    assert await blobs.read(CONTAINER, blob) == b"first"  # what readers read is still the first upload


async def test_an_exception_runs_uploaded_artifact_does_not_change(service, clock, blobs):
    """Round four: an `exception` run (which takes new artifacts for 25 minutes) let an uploaded `s3` artifact be
    replaced all that while. Its artifacts not yet uploaded still take data; an uploaded one no more."""
    task_id, request = await s3(service, clock)
    await service.s3_uploads.receive(request, pieces(b"first"))
    pending = await create_artifact(
        service,
        task_id,
        0,
        "public/later.bin",
        {"storageType": "s3", "expires": expires(clock), "contentType": "application/octet-stream"},
    )
    await service.lifecycle.resolve(task_id, 0, "exception", "worker-shutdown")
    clock.advance(10)  # within the window in which an exception run takes artifacts
    with pytest.raises(U.ResolvedArtifactUploaded):
        await service.s3_uploads.receive(request, pieces(b"replaced"))
    assert await blobs.read(CONTAINER, blob_path(task_id, 0, "public/data.bin")) == b"first"
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(pending["putUrl"]).query))
    later = U.UploadRequest(task_id, 0, "public/later.bin", int(query["expires"]), query["signature"], {})
    await service.s3_uploads.receive(later, pieces(b"after the exception"))  # its first data: taken
    assert await blobs.read(CONTAINER, blob_path(task_id, 0, "public/later.bin")) == b"after the exception"
