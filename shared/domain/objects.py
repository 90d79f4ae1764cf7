"""Objects of the Object service (Taskcluster's `object` API, served at `/api/object/v1/`): named, immutable data
with hashes, uploaded once and then only read.

An object is a row of the `Objects` table (PartitionKey: its name, key-encoded, or a hash of a long name; RowKey
`object`) and a block blob `o/<sha256 of its name>` in the artifact container. It is created by createUpload with
an `uploadId` (only uploads with that id may touch it), and once finishUpload found its data it is `finished`: the
blob's snapshot is the object (no upload URL can change a snapshot), its hashes are recorded, and it can be
downloaded. Queue artifacts of storage type `object` are objects named `t/<taskId>/<runId>/<name>`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import urllib.parse
from dataclasses import dataclass, field
from typing import Literal

from shared import timeutil
from shared.credentials import url_signature
from shared.storage.base import Entity, pack_json, unpack_json
from shared.storage.keys import unhashed_key

OBJECTS_TABLE = "Objects"
OBJECT_EXPIRY_TABLE = "ObjectExpiry"
OBJECT_ROW = "object"
MAX_KEY_CHARS = 400  # a name longer than this (key-encoded) is keyed by its hash
ObjectState = Literal["uploading", "finished"]
UploadMethod = Literal["dataInline", "putUrl"]
ACCEPTABLE_HASHES = ("sha256", "sha512")


def object_key(name: str) -> str:
    """The name key-encoded (a leading `~` too), or for a long name `~<sha256 of the name>`: no name can take
    another's row."""
    key = unhashed_key(name)
    return key if len(key) <= MAX_KEY_CHARS else "~" + hashlib.sha256(name.encode()).hexdigest()


def object_blob(name: str) -> str:
    return "o/" + hashlib.sha256(name.encode()).hexdigest()


def upload_data_signature(key: bytes, name: str, upload_id: str, expires: int) -> str:
    """What signs the queue's own upload URL of an object (shared/operations/object_uploads.py): this object and
    upload, until `expires` (seconds since the epoch); unpadded base64url of an HMAC-SHA256."""
    return url_signature(key, "object-upload", name, upload_id, expires)


def upload_data_path(name: str) -> str:
    """The path, under the Object service's API, an object's data is PUT to through the queue."""
    return f"/upload-data/{urllib.parse.quote(name, safe='/')}"


def hashes_of(data: bytes) -> dict[str, str]:
    return {"sha256": hashlib.sha256(data).hexdigest(), "sha512": hashlib.sha512(data).hexdigest()}


@dataclass
class StoredObject:
    name: str
    project_id: str
    upload_id: str
    expires: dt.datetime
    state: ObjectState = "uploading"
    content_type: str = "application/binary"
    content_length: int | None = None  # declared by a putUrl proposal, or the inline data's size
    method: UploadMethod | None = None
    hashes: dict[str, str] = field(default_factory=dict)
    snapshot: str | None = None
    etag: str | None = None

    @property
    def blob(self) -> str:
        return object_blob(self.name)

    def to_entity(self) -> Entity:
        return Entity(
            object_key(self.name),
            OBJECT_ROW,
            {
                "name": self.name,
                "projectId": self.project_id,
                "uploadId": self.upload_id,
                "expires": timeutil.iso(self.expires),
                "state": self.state,
                "contentType": self.content_type,
                "contentLength": -1 if self.content_length is None else self.content_length,
                "method": self.method or "",
                "snapshot": self.snapshot or "",
                **pack_json("hashes", self.hashes),
            },
            self.etag,
        )

    @classmethod
    def from_entity(cls, entity: Entity) -> StoredObject:
        d = entity.data
        length = int(d.get("contentLength", -1))
        return cls(
            d["name"],
            d["projectId"],
            d["uploadId"],
            timeutil.parse(d["expires"]),
            d["state"],
            d["contentType"],
            None if length < 0 else length,
            d.get("method") or None,
            unpack_json("hashes", d),
            d.get("snapshot") or None,
            entity.etag,
        )
