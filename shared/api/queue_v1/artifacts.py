"""Queue API v1: the artifact routes (registered on the same route table as queue_v1's).

Reads name every artifact on a link chain in their scopes: the requested name is authorized before anything
is read (so nobody learns what exists without the scope), then the whole chain once it is known.
"""

from __future__ import annotations

from typing import Any

from shared.api import answers
from shared.api.framework import Reply
from shared.api.queue_v1.common import QueueCall, api, paging
from shared.domain.artifacts import Artifact

STORAGE_TYPE_HEADER = "x-taskcluster-artifact-storage-type"
GET_SCOPES = {"AllOf": [{"for": "name", "in": "names", "each": "queue:get-artifact:<name>"}]}


@api.route("POST", "/task/<taskId>/runs/<runId>/artifacts/<name>", name="createArtifact", title="Create Artifact",
           scopes="queue:create-artifact:<taskId>/<runId>", input="create-artifact-request",
           output="create-artifact-response")
async def create_artifact(call: QueueCall) -> dict[str, Any]:
    """Types `azure` (this queue's: answered with a `putUrl` that may only write the artifact's blob, and an
    `uploadId` for finishArtifact), `reference`, `link` and `error`; `s3` and `object` are refused (400)."""
    await call.authorize()
    created = await call.context.artifacts.create(call.params["taskId"], call.run_id(), call.params["name"],
                                                  call.body)
    return answers.created_artifact(created)


@api.route("PUT", "/task/<taskId>/runs/<runId>/artifacts/<name>", name="finishArtifact", title="Finish Artifact",
           scopes="queue:create-artifact:<taskId>/<runId>", input="finish-artifact-request")
async def finish_artifact(call: QueueCall) -> Reply:
    """For `azure` artifacts: the blob must exist with the declared `contentLength`; then the artifact is
    available and `artifact-created` is published. 204."""
    await call.authorize()
    await call.context.artifacts.finish(call.params["taskId"], call.run_id(), call.params["name"],
                                        call.body["uploadId"])
    return Reply(None, 204)


async def _follow(call: QueueCall, run_id: int | None) -> Artifact:
    name = call.params["name"]
    await call.authorize(names=[name])
    chain, artifact = await call.context.artifacts.follow(call.params["taskId"], run_id, name)
    if len(chain) > 1:
        await call.authorize(names=chain)
    return artifact


async def _redirect(call: QueueCall, run_id: int | None) -> Reply:
    artifact = await _follow(call, run_id)
    headers = {STORAGE_TYPE_HEADER: artifact.storage_type}
    if artifact.storage_type == "error":
        return Reply({"reason": artifact.details["reason"], "message": artifact.details["message"]}, 424, headers)
    url = await call.context.artifacts.url_of(artifact)
    return Reply({"storageType": artifact.storage_type, "url": url}, 303, {**headers, "location": url})


@api.route("GET", "/task/<taskId>/runs/<runId>/artifacts/<name>", name="getArtifact",
           title="Get Artifact Data from Run", scopes=GET_SCOPES, output="get-artifact-response")
async def get_artifact(call: QueueCall) -> Reply:
    """303 to the data (a short-lived read URL of its blob, or a reference's URL); 424 for an error artifact."""
    return await _redirect(call, call.run_id())


@api.route("GET", "/task/<taskId>/artifacts/<name>", name="getLatestArtifact",
           title="Get Artifact Data from Latest Run", scopes=GET_SCOPES, output="get-artifact-response")
async def get_latest_artifact(call: QueueCall) -> Reply:
    """As getArtifact, for the task's latest run."""
    return await _redirect(call, None)


async def _content(call: QueueCall, run_id: int | None) -> dict[str, Any]:
    artifact = await _follow(call, run_id)
    if artifact.storage_type == "error":
        return {"storageType": "error", "reason": artifact.details["reason"], "message": artifact.details["message"]}
    # A blob is described as `s3` here: a URL to GET without credentials, which is what that branch of the
    # schema means and what the official clients' download helpers fetch (they know no other such type).
    storage_type = "s3" if artifact.storage_type == "azure" else artifact.storage_type
    return {"storageType": storage_type, "url": await call.context.artifacts.url_of(artifact)}


@api.route("GET", "/task/<taskId>/runs/<runId>/artifact-content/<name>", name="artifact",
           title="Get Artifact Content From Run", scopes=GET_SCOPES, output="artifact-content-response")
async def artifact_content(call: QueueCall) -> dict[str, Any]:
    """200 with where to fetch the data; an `azure` artifact is described as `s3` (a URL to GET without
    credentials), which the official clients' download helpers understand."""
    return await _content(call, call.run_id())


@api.route("GET", "/task/<taskId>/artifact-content/<name>", name="latestArtifact",
           title="Get Artifact Content From Latest Run", scopes=GET_SCOPES, output="artifact-content-response")
async def latest_artifact_content(call: QueueCall) -> dict[str, Any]:
    return await _content(call, None)


@api.route("GET", "/task/<taskId>/runs/<runId>/artifact-info/<name>", name="artifactInfo",
           title="Get Artifact Information From Run", scopes="queue:list-artifacts:<taskId>:<runId>",
           output="artifact-info-response")
async def artifact_info(call: QueueCall) -> dict[str, Any]:
    """The artifact itself (a link is not followed); only available artifacts (an `azure` one once finished)."""
    await call.authorize()
    return answers.artifact(await call.context.artifacts.info(call.params["taskId"], call.run_id(),
                                                              call.params["name"]))


@api.route("GET", "/task/<taskId>/artifact-info/<name>", name="latestArtifactInfo",
           title="Get Artifact Information From Latest Run", scopes="queue:list-artifacts:<taskId>",
           output="artifact-info-response")
async def latest_artifact_info(call: QueueCall) -> dict[str, Any]:
    await call.authorize()
    return answers.artifact(await call.context.artifacts.info(call.params["taskId"], None, call.params["name"]))


@api.route("GET", "/task/<taskId>/runs/<runId>/artifacts", name="listArtifacts", title="Get Artifacts from Run",
           scopes="queue:list-artifacts:<taskId>:<runId>", output="list-artifacts-info-response")
async def list_artifacts(call: QueueCall) -> dict[str, Any]:
    """The run's available artifacts, paged (`limit`, `continuationToken`)."""
    await call.authorize()
    artifacts, token = await call.context.artifacts.list(call.params["taskId"], call.run_id(), **paging(call))
    return answers.page("artifacts", [answers.artifact(a) for a in artifacts], token)


@api.route("GET", "/task/<taskId>/artifacts", name="listLatestArtifacts", title="Get Artifacts from Latest Run",
           scopes="queue:list-artifacts:<taskId>", output="list-artifacts-info-response")
async def list_latest_artifacts(call: QueueCall) -> dict[str, Any]:
    await call.authorize()
    artifacts, token = await call.context.artifacts.list(call.params["taskId"], None, **paging(call))
    return answers.page("artifacts", [answers.artifact(a) for a in artifacts], token)
