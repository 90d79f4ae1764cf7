"""The artifact record: what a run produced, its keys, its blob's name, and the rules a change to it follows.

An artifact is the row `artifact:<runId>:<name>` (name key-encoded) of the Tasks table, in its task's partition,
so every artifact write is one transaction with the task entity (shared/operations/artifacts.py). An `azure`
artifact's data is a block blob; once finished, the artifact reads a snapshot of it (docs/artifacts.md).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Literal

from shared import errors, timeutil
from shared.credentials import url_signature
from shared.domain.tasks import Run
from shared.storage.base import Entity, ServedAs, pack_json, unpack_json
from shared.storage.keys import unhashed_key
from shared.validation import ATTACHMENT

ARTIFACT_ROW, ARTIFACT_ROW_END = "artifact:", "artifact;"  # ";" sorts right after ":"
ARTIFACT_EXPIRY_TABLE = "ArtifactExpiry"
MAX_NAME_CHARS = 1024  # artifact-response.yml
# Azure Table keys hold 1 KiB of UTF-16: 512 characters. A row key (and its expiry index key, which adds the taskId)
# that would be longer names the artifact by a hash of its name instead (such artifacts list last).
MAX_KEY_CHARS = 512
INDEX_SEPARATOR = "~"  # not in taskIds
EXPIRES_PAST = dt.timedelta(minutes=15)  # how far in the past `expires` may be (Taskcluster)
MAX_LINK_DEPTH = 32
DEFAULT_CONTENT_TYPE = "application/binary"
CONTENT_TYPE_HEADER = "x-ms-blob-content-type"
# Content types a browser displays without running anything: served inline. Any other is an attachment.
INLINE_TYPES = frozenset(
    {
        "text/plain",
        "text/csv",
        "application/json",
        "application/x-ndjson",
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/avif",
        "image/bmp",
    }
)
# Blob names kept readable when they are plainly safe in a URL path; any other name is hashed.
_PLAIN_BLOB_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*$")


class ArtifactNameInvalid(errors.InputError):
    """Artifact name is too long: at most {limit} characters"""


class ContentTypeInvalid(errors.InputError):
    """Artifact `{name}`: contentType `{contentType}` is not one media type (`type/subtype`, then `; name=value`
    parameters, each value a token or a quoted string); downloads serve it as a header"""


class ArtifactTooLarge(errors.InputError):
    """Artifact `{name}` is declared {size} bytes: an `s3` artifact holds at most {limit} bytes on this deployment
    (`QUEUE_ARTIFACT_S3_MAX_BYTES`; its upload is one PUT through the queue); upload larger data as an `object` or
    `azure` artifact"""


class ArtifactExpiresInvalid(errors.InputError):
    """Artifact expires {expires}: {problem}"""


class ArtifactTaskNotFound(errors.InputError):
    """Task `{taskId}` not found: artifacts can only be created for an existing task"""


class ArtifactRunNotFound(errors.InputError):
    """Run {runId} of task `{taskId}` not found"""


class RunNeverClaimed(errors.InputError):
    """Run {runId} of task `{taskId}` was never claimed: artifacts belong to a run a worker claimed"""


class RunNotAcceptingArtifacts(errors.RequestConflict):
    """Run {runId} of task `{taskId}` is {state}: artifacts can be created while a run is running, and for {window}
    seconds after it resolved as exception"""


class ArtifactConflict(errors.RequestConflict):
    """Artifact `{name}` of run {runId} of task `{taskId}` exists with different properties: {problems}"""


class ArtifactNotFound(errors.ResourceNotFound):
    """Artifact `{name}` of run {runId} of task `{taskId}` not found"""


class ArtifactNotUploaded(errors.ResourceNotFound):
    """Artifact `{name}` of run {runId} of task `{taskId}` is not available: its data was not uploaded (or, for
    `azure` and `object` artifacts, finishArtifact was not called)"""


class ArtifactExpired(errors.ResourceExpired):
    """Artifact `{name}` of run {runId} of task `{taskId}` expired at {expires}"""


class TaskHasNoRuns(errors.ResourceNotFound):
    """Task `{taskId}` has no runs, so it has no latest artifacts"""


class ArtifactLinkInvalid(errors.InputError):
    """Artifact `{name}` of run {runId} of task `{taskId}` is a link chain that {problem}: {chain}"""


class NothingToFinish(errors.InputError):
    """Artifact `{name}` is a `{storageType}` artifact: only `azure` (with contentLength) and `object` artifacts
    are finished"""


class UploadIdMismatch(errors.InputError):
    """uploadId `{given}` is not the uploadId createArtifact gave for artifact `{name}`"""


class UploadIncomplete(errors.InputError):
    """Artifact `{name}` cannot be finished: {problem}"""


StorageType = Literal["azure", "s3", "object", "reference", "link", "error"]
S3_MAX_BYTES = 5 * 1024**3  # S3's largest single PUT (5 GiB): the default of QUEUE_ARTIFACT_S3_MAX_BYTES
# The one block the Put Block URL earlier versions handed out uploaded an `s3` artifact's data to, committed when the
# artifact is first read (shared/operations/artifact_reads.py); uploads through the queue stage blocks of their own.
S3_BLOCK = "s3-artifact"


def upload_signature(key: bytes, task_id: str, run_id: int, name: str, expires: int) -> str:
    """What signs an `s3` artifact's upload URL (shared/operations/s3_uploads.py): this artifact, until `expires`
    (seconds since the epoch); unpadded base64url of an HMAC-SHA256."""
    return url_signature(key, "s3-upload", task_id, run_id, name, expires)


def upload_path(task_id: str, run_id: int, name: str) -> str:
    """The path, under the queue's API, that an `s3` artifact's data is PUT to."""
    return f"/artifact-upload/{task_id}/{run_id}/{urllib.parse.quote(name, safe='/')}"


def object_name(task_id: str, run_id: int, name: str) -> str:
    """The Object service's name of an `object` artifact (Taskcluster's)."""
    return f"t/{task_id}/{run_id}/{name}"


def run_of_object(name: str) -> tuple[str, int] | None:
    """The task and run an `object` artifact's object belongs to, by its name; None for any other object."""
    parts = name.split("/", 3)
    if len(parts) == 4 and parts[0] == "t" and parts[2].isdigit() and len(parts[2]) <= 3:
        return parts[1], int(parts[2])
    return None


def served_as(
    content_type: str, content_encoding: str | None = None, *, uploaded: dict[str, str] | None = None
) -> ServedAs:
    """How a blob artifact's download answers: with its declared content type, and as an attachment (a download,
    not a page) unless the type is one a browser only displays (an artifact declared `text/html` or `image/svg+xml`
    could otherwise run script in the storage account's origin). The encoding is the declared one, or what an `s3`
    upload's PUT said (`uploaded`: its Content-Encoding, Content-Language, Cache-Control and an attachment's
    Content-Disposition, which S3 keeps and serves)."""
    media = content_type.split(";", 1)[0].strip().lower()
    kept = uploaded or {}
    disposition = None if media in INLINE_TYPES else "attachment"
    if ATTACHMENT.fullmatch(kept.get("disposition", "")):
        disposition = kept["disposition"]  # its file name, say; never `inline` for a type served as a download
    return ServedAs(
        content_type,
        disposition,
        kept.get("encoding", content_encoding),
        kept.get("language"),
        kept.get("cacheControl"),
    )


def row_key(run_id: int, name: str) -> str:
    """`artifact:<runId>:<name, key-encoded>`, or for a long name `artifact:<runId>:~<sha256 of the name>`. A name
    that itself starts with `~` has it encoded (`%7E`), so that no name's key is another's hash key."""
    key = f"{ARTIFACT_ROW}{run_id}:{unhashed_key(name)}"
    if len(key) + 23 > MAX_KEY_CHARS:  # 22 characters of taskId and the separator, in the index key
        key = f"{ARTIFACT_ROW}{run_id}:~{hashlib.sha256(name.encode()).hexdigest()}"
    return key


def index_key(task_id: str, run_id: int, name: str) -> str:
    return f"{task_id}{INDEX_SEPARATOR}{row_key(run_id, name)}"


def parse_index_key(key: str) -> tuple[str, str]:
    task_id, row = key.split(INDEX_SEPARATOR, 1)
    return task_id, row


def blob_path(task_id: str, run_id: int, name: str) -> str:
    """`<taskId>/<runId>/<name>`; a name that is not plainly URL-safe (dot segments, `\\`, `?`...) is hashed."""
    if _PLAIN_BLOB_NAME.match(name) and not any(part.endswith(".") for part in name.split("/")):
        return f"{task_id}/{run_id}/{name}"
    return f"{task_id}/{run_id}/~{hashlib.sha256(name.encode()).hexdigest()}"


@dataclass
class Artifact:
    task_id: str
    run_id: int
    name: str
    storage_type: StorageType
    content_type: str
    expires: dt.datetime
    present: bool
    # azure: blob, uploadId and contentLength (this queue's form, finished by finishArtifact), or blob only (the
    # Azure-era form, present at once), sealed (snapshot) when its run resolves or when first read; s3: blob,
    # contentEncoding if declared, and once its PUT through the queue committed: snapshot, `uploaded` (the PUT's
    # size, ETag and representation headers, shared/operations/s3_uploads.py); one uploaded to the Put Block URL of
    # earlier versions is sealed when first read; object: object, projectId, uploadId; reference: url; link:
    # artifact; error: reason, message. A blob artifact's `snapshot` is what downloads read once it is finished or
    # sealed.
    details: dict[str, Any] = field(default_factory=dict)
    etag: str | None = None

    @property
    def blob(self) -> str | None:
        """The artifact's blob in the artifact container (azure, s3), if any."""
        return self.details.get("blob")

    @property
    def sealed(self) -> bool:
        """Whether downloads read a snapshot (or, for artifacts finished before snapshots, need none)."""
        return "snapshot" in self.details or (self.storage_type == "azure" and "contentLength" in self.details)

    def to_event(self) -> dict[str, Any]:
        return {
            "storageType": self.storage_type,
            "name": self.name,
            "expires": timeutil.iso(self.expires),
            "contentType": self.content_type,
        }

    def to_entity(self) -> Entity:
        return Entity(
            self.task_id,
            row_key(self.run_id, self.name),
            {
                "runId": self.run_id,
                "name": self.name,
                "storageType": self.storage_type,
                "contentType": self.content_type,
                "expires": timeutil.iso(self.expires),
                "present": self.present,
                **pack_json("details", self.details),
            },
            self.etag,
        )

    @classmethod
    def from_entity(cls, entity: Entity) -> Artifact:
        data = entity.data
        return cls(
            entity.partition_key,
            int(data["runId"]),
            data["name"],
            data["storageType"],
            data["contentType"],
            timeutil.parse(data["expires"]),
            bool(data["present"]),
            unpack_json("details", data),
            entity.etag,
        )


def conflicts(old: Artifact, new: Artifact) -> list[str]:
    """Why `new` may not replace `old` (Taskcluster's rules): `expires` may grow, a reference may change its URL
    or become a link; anything else must be the same."""
    problems = []
    if new.expires < old.expires:
        problems.append(f"expires may be extended, not shortened (it is {timeutil.iso(old.expires)})")
    if old.storage_type != new.storage_type:
        if (old.storage_type, new.storage_type) != ("reference", "link"):
            problems.append(f"storageType is `{old.storage_type}` (only a reference may become a link)")
        return problems
    if old.content_type != new.content_type:
        problems.append(f"contentType is `{old.content_type}`")
    if old.storage_type == "azure":
        if old.details.get("contentLength") != new.details.get("contentLength"):
            problems.append(f"contentLength is {old.details.get('contentLength', '(none)')}")
    elif old.storage_type == "s3":
        if old.details.get("contentEncoding") != new.details.get("contentEncoding"):
            problems.append(f"contentEncoding is {old.details.get('contentEncoding') or '(none)'}")
    elif old.storage_type in ("link", "error"):
        for key, value in old.details.items():
            if new.details.get(key) != value:
                problems.append(f"{key} is `{value}`")
    return problems


def run_accepts_artifacts(run: Run, now: dt.datetime, window: float) -> bool:
    if run.state == "running":
        return True
    return run.state == "exception" and run.resolved is not None and run.resolved + dt.timedelta(seconds=window) > now
