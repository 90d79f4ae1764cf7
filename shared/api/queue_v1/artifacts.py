"""Queue API v1: the artifact routes (registered on the same route table as queue_v1's).

Reads name every artifact on a link chain in their scopes: the requested name is authorized before anything
is read (so nobody learns what exists without the scope), then the whole chain once it is known.
"""

from __future__ import annotations

from typing import Any

from shared.api import answers
from shared.api.queue_v1.common import PAGING, QueueCall, api, paging
from shared.api.routing import Reply
from shared.domain.artifacts import Artifact
from shared.operations.s3_uploads import UploadRequest

STORAGE_TYPE_HEADER = "x-taskcluster-artifact-storage-type"
GET_SCOPES = {"AllOf": [{"for": "name", "in": "names", "each": "queue:get-artifact:<name>"}]}


@api.route(
    "POST",
    "/task/<taskId>/runs/<runId>/artifacts/<name>",
    name="createArtifact",
    title="Create Artifact",
    scopes="queue:create-artifact:<taskId>/<runId>",
    input="create-artifact-request",
    output="create-artifact-response",
)
async def create_artifact(call: QueueCall) -> dict[str, Any]:
    """Every storage type (docs/artifacts.md). `s3`: a `putUrl` of the queue's own that a plain PUT uploads to,
    as to S3 (uploadArtifactData), present at once, as in Taskcluster. `object`: the object's name, `uploadId` and
    temporary credentials for the Object service's createUpload/finishUpload; then finishArtifact. `azure` with
    `contentLength` (this queue's form): a `putUrl` that may only write the artifact's blob, and an `uploadId` for
    finishArtifact; without it (the Azure-era form): a `putUrl` for a PUT with `x-ms-blob-type: BlockBlob`, present
    at once. `reference`, `link` and `error`: present at once."""
    await call.authorize()
    created = await call.context.artifacts.create(call.params["taskId"], call.run_id(), call.params["name"], call.body)
    return answers.created_artifact(created)


@api.route(
    "PUT",
    "/artifact-upload/<taskId>/<runId>/<name>",
    name="uploadArtifactData",
    title="Upload an s3 Artifact's Data",
    scopes=None,
    stability="experimental",
    streamed=True,
    query={"expires": r"^[0-9]{1,12}$", "signature": r"^[A-Za-z0-9_-]{43}$"},
)
async def upload_artifact_data(call: QueueCall) -> Reply:
    """The `putUrl` createArtifact answers for an `s3` artifact: a plain PUT of the data, as to a presigned S3
    URL (no Azure header; the URL's signature is the authorization). Answers `200` with the data's MD5 as `ETag`,
    as S3 does; the PUT's `Content-Encoding`, `Content-Language`, `Cache-Control` and an attachment's
    `Content-Disposition` are kept and served on download. At most `QUEUE_ARTIFACT_S3_MAX_BYTES` (5 GiB by
    default); refused once the run takes no more artifacts (docs/artifacts.md)."""
    request = UploadRequest(
        call.params["taskId"],
        call.run_id(),
        call.params["name"],
        int(call.query.get("expires", "0")),
        call.query.get("signature", ""),
        call.request.headers,
    )
    etag = await call.context.s3_uploads.receive(request, call.request.stream())
    return Reply(None, 200, {"etag": etag})


@api.route(
    "PUT",
    "/task/<taskId>/runs/<runId>/artifacts/<name>",
    name="finishArtifact",
    title="Finish Artifact",
    scopes="queue:create-artifact:<taskId>/<runId>",
    input="finish-artifact-request",
)
async def finish_artifact(call: QueueCall) -> Reply:
    """For `azure` artifacts with `contentLength`: the blob must exist with the declared size; for `object`
    artifacts: the object must be finished (object.finishUpload) with this `uploadId`. Then the artifact is
    available and `artifact-created` is published. 204."""
    await call.authorize()
    await call.context.artifacts.finish(
        call.params["taskId"], call.run_id(), call.params["name"], call.body["uploadId"]
    )
    return Reply(None, 204)


async def _follow(call: QueueCall, run_id: int | None) -> Artifact:
    name = call.params["name"]
    await call.authorize(names=[name])
    chain, artifact = await call.context.artifact_reads.follow(call.params["taskId"], run_id, name)
    if len(chain) > 1:
        await call.authorize(names=chain)
    return artifact


async def _redirect(call: QueueCall, run_id: int | None) -> Reply:
    return await artifact_reply(call, await _follow(call, run_id))


async def artifact_reply(call: QueueCall, artifact: Artifact) -> Reply:
    """getArtifact's answer for an artifact found (at the end of its link chain) and authorized: 303 to its
    data, or 424 for an error artifact. The Index's findArtifactFromTask answers so too."""
    headers: dict[str, str] = {STORAGE_TYPE_HEADER: artifact.storage_type}
    if artifact.storage_type == "error":
        return Reply({"reason": artifact.details["reason"], "message": artifact.details["message"]}, 424, headers)
    location = await call.context.artifact_reads.location(artifact)
    url = str(location.url)
    return Reply({"storageType": artifact.storage_type, "url": url}, 303, {**headers, "location": url})


@api.route(
    "GET",
    "/task/<taskId>/runs/<runId>/artifacts/<name>",
    name="getArtifact",
    title="Get Artifact Data from Run",
    scopes=GET_SCOPES,
    output="get-artifact-response",
)
async def get_artifact(call: QueueCall) -> Reply:
    """303 to the data (a short-lived read URL of its blob or object, or a reference's URL); 424 for an error
    artifact."""
    return await _redirect(call, call.run_id())


@api.route(
    "GET",
    "/task/<taskId>/artifacts/<name>",
    name="getLatestArtifact",
    title="Get Artifact Data from Latest Run",
    scopes=GET_SCOPES,
    output="get-artifact-response",
)
async def get_latest_artifact(call: QueueCall) -> Reply:
    """As getArtifact, for the task's latest run."""
    return await _redirect(call, None)


async def _content(call: QueueCall, run_id: int | None) -> dict[str, Any]:
    artifact = await _follow(call, run_id)
    location = None if artifact.storage_type == "error" else await call.context.artifact_reads.location(artifact)
    return answers.artifact_content(artifact, location)


@api.route(
    "GET",
    "/task/<taskId>/runs/<runId>/artifact-content/<name>",
    name="artifact",
    title="Get Artifact Content From Run",
    scopes=GET_SCOPES,
    output="artifact-content-response",
)
async def artifact_content(call: QueueCall) -> dict[str, Any]:
    """200 with where to fetch the data: for a blob (`s3`, and `azure`, described as `s3`) a URL to GET without
    credentials; for an `object`, its name and credentials that may download it from the Object service for an
    hour; a reference's URL; an error's reason and message. The official download helpers understand each."""
    return await _content(call, call.run_id())


@api.route(
    "GET",
    "/task/<taskId>/artifact-content/<name>",
    name="latestArtifact",
    title="Get Artifact Content From Latest Run",
    scopes=GET_SCOPES,
    output="artifact-content-response",
)
async def latest_artifact_content(call: QueueCall) -> dict[str, Any]:
    return await _content(call, None)


@api.route(
    "GET",
    "/task/<taskId>/runs/<runId>/artifact-info/<name>",
    name="artifactInfo",
    title="Get Artifact Information From Run",
    scopes="queue:list-artifacts:<taskId>:<runId>",
    output="artifact-info-response",
)
async def artifact_info(call: QueueCall) -> dict[str, Any]:
    """The artifact itself (a link is not followed); only available artifacts (an `azure` one once finished)."""
    await call.authorize()
    return answers.artifact(
        await call.context.artifact_reads.info(call.params["taskId"], call.run_id(), call.params["name"])
    )


@api.route(
    "GET",
    "/task/<taskId>/artifact-info/<name>",
    name="latestArtifactInfo",
    title="Get Artifact Information From Latest Run",
    scopes="queue:list-artifacts:<taskId>",
    output="artifact-info-response",
)
async def latest_artifact_info(call: QueueCall) -> dict[str, Any]:
    await call.authorize()
    return answers.artifact(await call.context.artifact_reads.info(call.params["taskId"], None, call.params["name"]))


@api.route(
    "GET",
    "/task/<taskId>/runs/<runId>/artifacts",
    name="listArtifacts",
    title="Get Artifacts from Run",
    scopes="queue:list-artifacts:<taskId>:<runId>",
    output="list-artifacts-info-response",
    query=PAGING,
)
async def list_artifacts(call: QueueCall) -> dict[str, Any]:
    """The run's available artifacts, paged (`limit`, `continuationToken`)."""
    await call.authorize()
    artifacts, token = await call.context.artifact_reads.list(call.params["taskId"], call.run_id(), **paging(call))
    return answers.page("artifacts", [answers.artifact(a) for a in artifacts], token)


@api.route(
    "GET",
    "/task/<taskId>/artifacts",
    name="listLatestArtifacts",
    title="Get Artifacts from Latest Run",
    scopes="queue:list-artifacts:<taskId>",
    output="list-artifacts-info-response",
    query=PAGING,
)
async def list_latest_artifacts(call: QueueCall) -> dict[str, Any]:
    await call.authorize()
    artifacts, token = await call.context.artifact_reads.list(call.params["taskId"], None, **paging(call))
    return answers.page("artifacts", [answers.artifact(a) for a in artifacts], token)
