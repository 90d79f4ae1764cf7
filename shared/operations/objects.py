"""The Object service (Taskcluster's `object` API v1, served at `<rootUrl>/api/object/v1/`), over Blob Storage.

An upload: `createUpload` (the service picks one of the proposed methods: `dataInline`, whose data comes with the
request and is written here, or `putUrl`, a signed URL the caller PUTs the data to), then `finishUpload`, which takes
a snapshot of the blob, checks its size and, where the data is small enough to read (DATA_CHECKED), the hashes the
caller gives, and makes the object immutable. A download: `startDownload` (`getUrl`: a signed URL of the snapshot
and the hashes to check; `simple`: the URL alone), or the `download` redirect. Objects expire at their `expires`
(shared/operations/expiry.py). shared/domain/objects.py has the record.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import logging
import urllib.parse
from dataclasses import dataclass
from typing import Any

from shared import errors, timeutil
from shared.domain.artifacts import served_as
from shared.domain.objects import (
    ACCEPTABLE_HASHES,
    OBJECT_ROW,
    OBJECTS_TABLE,
    StoredObject,
    hashes_of,
    object_key,
    upload_data_path,
    upload_data_signature,
)
from shared.logs import fields
from shared.operations.writes.stores import Stores
from shared.storage.base import BlobStore

log = logging.getLogger("queue.objects")

DATA_INLINE_MAX = 64 * 1024  # bytes a dataInline upload may carry (the official clients send it under 8 KiB)
DATA_CHECKED = 16 * 1024 * 1024  # objects up to this size are read at finishUpload to check their hashes
WRITE_ATTEMPTS = 5


class ObjectNotFound(errors.ResourceNotFound):
    """Object `{name}` not found (or not finished: it is downloadable once finishUpload was called)"""


class ObjectExpiresInvalid(errors.InputError):
    """Object `{name}` expires {expires}, which is past: an object must expire in the future"""


class UploadConflict(errors.RequestConflict):
    """Object `{name}` cannot be uploaded so: {problem}"""


class UploadIncomplete(errors.InputError):
    """Object `{name}` cannot be finished: {problem}"""


class HashMismatch(errors.InputError):
    """Object `{name}`: the {algorithm} of its data is {actual}, not {given}"""


class InlineDataInvalid(errors.InputError):
    """Object `{name}`: dataInline's objectData must be base64 of at most {limit} bytes"""


class NoDownloadMethod(errors.InputError):
    """None of the download methods offered ({offered}) is one this service supports: getUrl, simple"""


@dataclass(frozen=True)
class Upload:
    """What createUpload agreed to: the object, and the method chosen (None: none of those proposed)."""

    stored: StoredObject
    method: str | None
    put_url: str | None = None
    put_url_expires: dt.datetime | None = None
    headers: dict[str, str] | None = None


@dataclass(frozen=True)
class Download:
    method: str
    url: str
    expires: dt.datetime
    hashes: dict[str, str]


class Objects:
    def __init__(self, stores: Stores) -> None:
        self.stores = stores
        self.settings = stores.settings

    @property
    def blobs(self) -> BlobStore:
        if self.stores.blobs is None:
            raise errors.InternalServerError("No blob storage is configured for objects")
        return self.stores.blobs

    @property
    def container(self) -> str:
        return self.settings.artifact_container

    async def stored(self, name: str) -> StoredObject | None:
        await self.stores.ready()
        entity = await self.stores.tables.get(OBJECTS_TABLE, object_key(name), OBJECT_ROW)
        if entity is None or entity.data.get("name") != name:  # another name's row (written before keys escaped
            return None  # a leading `~`): not this object
        return StoredObject.from_entity(entity)

    async def _write(self, stored: StoredObject, *, new: bool) -> bool:
        tables = self.stores.tables
        written = await (tables.insert if new else tables.replace)(OBJECTS_TABLE, stored.to_entity())
        return written is not None

    # --- uploads ----------------------------------------------------------------------------------------------

    async def create_upload(self, name: str, body: dict[str, Any], *, chunked: bool = False) -> Upload:
        """createUpload: `body` has passed the create-upload-request schema. `chunked`: the caller PUTs its data
        chunked, which Blob Storage refuses, so a `putUrl` is the queue's own (shared/operations/object_uploads.py)."""
        await self.stores.ready()
        now = self.stores.now()
        project_id, upload_id = body["projectId"], body["uploadId"]
        expires = timeutil.to_ms(timeutil.parse(body["expires"]))
        if expires <= now:
            raise ObjectExpiresInvalid(name=name, expires=timeutil.iso(expires))
        given = dict(body.get("hashes") or {})
        proposed = body["proposedUploadMethods"]
        for _ in range(WRITE_ATTEMPTS):
            existing = await self.stored(name)
            if existing is not None:
                _check_same_upload(existing, name, project_id, upload_id, expires)
                if existing.state == "finished":
                    raise UploadConflict(name=name, problem="it is finished, and objects do not change")
            else:
                await self.stores.object_expiry.add(object_key(name), expires)  # indexed before it exists
            stored = existing or StoredObject(name, project_id, upload_id, expires)
            stored.hashes = _merged(stored.hashes, given, name)
            upload = await self._choose(stored, proposed, now, chunked=chunked)
            if await self._write(stored, new=existing is None):
                log.info(
                    "object %s: upload %s by %s",
                    name,
                    upload_id,
                    upload.method or "no method",
                    extra=fields(event="object-upload", object=name),
                )
                return upload
            if existing is None and await self.stored(name) is None:
                # The key is held by another name's entry (one written before keys escaped a leading `~`).
                raise UploadConflict(name=name, problem="its storage key is held by another object")
        raise errors.InternalServerError("The object's entry kept changing; try again")

    async def _choose(
        self, stored: StoredObject, proposed: dict[str, Any], now: dt.datetime, *, chunked: bool
    ) -> Upload:
        inline = proposed.get("dataInline")
        if inline is not None:
            try:
                data = base64.b64decode(inline["objectData"], validate=True)
            except (binascii.Error, ValueError):
                raise InlineDataInvalid(name=stored.name, limit=DATA_INLINE_MAX) from None
            if len(data) <= DATA_INLINE_MAX:
                for algorithm, value in hashes_of(data).items():  # the data is here: its hashes can be checked
                    if stored.hashes.get(algorithm, value) != value:
                        raise HashMismatch(
                            name=stored.name, algorithm=algorithm, actual=value, given=stored.hashes[algorithm]
                        )
                await self.blobs.write(self.container, stored.blob, data, inline["contentType"])
                stored.content_type, stored.content_length, stored.method = (
                    inline["contentType"],
                    len(data),
                    "dataInline",
                )
                return Upload(stored, "dataInline")
        put = proposed.get("putUrl")
        if put is not None:
            stored.content_type, stored.content_length, stored.method = (
                put["contentType"],
                put["contentLength"],
                "putUrl",
            )
            url_expires = min(now + dt.timedelta(seconds=self.settings.artifact_upload_ttl), stored.expires)
            if chunked:
                return Upload(
                    stored,
                    "putUrl",
                    self._upload_data_url(stored, url_expires),
                    url_expires,
                    {"Content-Type": put["contentType"]},
                )
            url = await self.blobs.upload_url(self.container, stored.blob, url_expires)
            # What Blob Storage needs of a single PUT: the blob type, the content type it stores, and a length
            # (it takes no chunked body; with the header, the official clients stream with a fixed length).
            return Upload(
                stored,
                "putUrl",
                url,
                url_expires,
                {
                    "x-ms-blob-type": "BlockBlob",
                    "Content-Type": put["contentType"],
                    "Content-Length": str(put["contentLength"]),
                },
            )
        return Upload(stored, None)

    def _upload_data_url(self, stored: StoredObject, expires: dt.datetime) -> str:
        seconds = int(expires.timestamp())
        signature = upload_data_signature(self.settings.upload_key, stored.name, stored.upload_id, seconds)
        query = urllib.parse.urlencode({"uploadId": stored.upload_id, "expires": seconds, "signature": signature})
        return f"{self.settings.public_root_url}/api/object/v1{upload_data_path(stored.name)}?{query}"

    async def finish_upload(self, name: str, body: dict[str, Any]) -> None:
        """finishUpload: the data is there; the object becomes immutable (a repeat changes nothing but may add
        hashes)."""
        await self.stores.ready()
        for _ in range(WRITE_ATTEMPTS):
            stored = await self.stored(name)
            if stored is None:
                raise ObjectNotFound(name=name)
            _check_same_upload(stored, name, body["projectId"], body["uploadId"], stored.expires)
            given = dict(body.get("hashes") or {})
            if stored.state == "finished":
                merged = _merged(stored.hashes, given, name)
                if merged == stored.hashes:
                    return
                stored.hashes = merged
            else:
                await self._seal(stored, given)
            if await self._write(stored, new=False):
                log.info(
                    "object %s finished (%s bytes)",
                    name,
                    stored.content_length,
                    extra=fields(event="object-finished", object=name),
                )
                return
        raise errors.InternalServerError("The object's entry kept changing; try again")

    async def _seal(self, stored: StoredObject, given: dict[str, str]) -> None:
        """Snapshot the uploaded blob, check it, and make the record finished (not yet written)."""
        snapshot = await self.blobs.snapshot(self.container, stored.blob)
        if snapshot is None:
            raise UploadIncomplete(
                name=stored.name, problem="nothing was uploaded (PUT the data to the putUrl of createUpload first)"
            )
        if stored.content_length is not None and snapshot.size != stored.content_length:
            raise UploadIncomplete(
                name=stored.name,
                problem=f"the upload holds {snapshot.size} bytes, but "
                f"contentLength {stored.content_length} was proposed",
            )
        hashes = _merged(stored.hashes, given, stored.name)
        if snapshot.size <= DATA_CHECKED:
            data = await self.blobs.read(self.container, stored.blob, snapshot=snapshot.snapshot) or b""
            for algorithm, value in hashes_of(data).items():
                if hashes.get(algorithm, value) != value:
                    raise HashMismatch(name=stored.name, algorithm=algorithm, actual=value, given=hashes[algorithm])
                hashes[algorithm] = value
        elif not any(a in hashes for a in ACCEPTABLE_HASHES):
            raise UploadIncomplete(
                name=stored.name,
                problem=f"an object over {DATA_CHECKED} bytes needs the "
                f"hashes of its data ({' or '.join(ACCEPTABLE_HASHES)}), which clients check",
            )
        stored.state, stored.snapshot, stored.hashes = "finished", snapshot.snapshot, hashes
        stored.content_length = snapshot.size

    # --- downloads --------------------------------------------------------------------------------------------

    async def finished(self, name: str) -> StoredObject:
        stored = await self.stored(name)
        if stored is None or stored.state != "finished":
            raise ObjectNotFound(name=name)
        return stored

    async def url(self, stored: StoredObject) -> tuple[str, dt.datetime]:
        """A short-lived read URL of the object's data, served with its content type; and until when it works."""
        expires = self.stores.now() + dt.timedelta(seconds=self.settings.artifact_download_ttl)
        return await self.blobs.download_url(
            self.container, stored.blob, expires, snapshot=stored.snapshot, served_as=served_as(stored.content_type)
        ), expires

    async def start_download(self, name: str, accepted: dict[str, Any]) -> Download:
        stored = await self.finished(name)
        url, expires = await self.url(stored)
        for method in ("getUrl", "simple"):
            if accepted.get(method) is True:
                return Download(method, url, expires, stored.hashes)
        raise NoDownloadMethod(offered=", ".join(accepted) or "none")


def _check_same_upload(stored: StoredObject, name: str, project_id: str, upload_id: str, expires: dt.datetime) -> None:
    problems = []
    if stored.upload_id != upload_id:
        problems.append("it is being uploaded with another uploadId")
    if stored.project_id != project_id:
        problems.append(f"its projectId is `{stored.project_id}`")
    if stored.expires != expires:
        problems.append(f"it expires {timeutil.iso(stored.expires)}")
    if problems:
        raise UploadConflict(name=name, problem="; ".join(problems))


def _merged(known: dict[str, str], given: dict[str, str], name: str) -> dict[str, str]:
    """Hashes may be added, never changed."""
    changed = [a for a, v in given.items() if a in known and known[a] != v]
    if changed:
        raise UploadConflict(name=name, problem=f"its {', '.join(changed)} is already recorded as another value")
    return {**known, **given}
