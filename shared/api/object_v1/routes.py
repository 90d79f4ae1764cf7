"""Object service API v1 routes: createUpload, finishUpload, startDownload, object, download.

Scopes are Taskcluster's: `object:upload:<projectId>:<name>` to upload (what an `object` artifact's temporary
credentials hold), `object:download:<name>` to read.
"""

from __future__ import annotations

from typing import Any

from shared.api import answers, monitoring
from shared.api.routing import Api, Call, Reply
from shared.operations.object_uploads import ObjectDataRequest
from shared.runtime import Queue

api = Api("object", "v1")
monitoring.register(api)
ObjectCall = Call[Queue]
UPLOAD_SCOPES = "object:upload:<projectId>:<name>"
# Clients that PUT an upload chunked whatever the answered headers say, which Blob Storage refuses: Taskcluster's Go
# client (Go sends no length for the reader it is given; it names itself so). They get the queue's own putUrl.
CHUNKED_CLIENTS = ("Go-http-client/",)
DOWNLOAD_SCOPES = "object:download:<name>"


@api.route(
    "PUT",
    "/upload/<name>",
    name="createUpload",
    title="Begin upload of a new object",
    scopes=UPLOAD_SCOPES,
    input="object/create-upload-request",
    output="object/create-upload-response",
)
async def create_upload(call: ObjectCall) -> dict[str, Any]:
    """Create the object (or, with the same `uploadId`, `projectId` and `expires`, answer again) and choose one
    of the proposed upload methods: `dataInline` (the data comes with this request; up to 64 KiB) or `putUrl` (a
    signed URL a single PUT with the answered `headers` writes, until its `expires`). An empty `uploadMethod`
    means none of those proposed is possible. Then upload, and call finishUpload. A caller that sends chunked
    bodies (Taskcluster's Go client) gets a `putUrl` of the queue's own (uploadObjectData), since Blob Storage
    takes no chunked body."""
    await call.authorize(projectId=call.body["projectId"])
    chunked = call.request.headers.get("user-agent", "").startswith(CHUNKED_CLIENTS)
    return answers.created_upload(
        await call.context.objects.create_upload(call.params["name"], call.body, chunked=chunked)
    )


@api.route(
    "PUT",
    "/upload-data/<name>",
    name="uploadObjectData",
    title="Upload an object's data through the queue",
    scopes=None,
    stability="experimental",
    streamed=True,
    query={
        "uploadId": r"^[A-Za-z0-9_-]{8}[Q-T][A-Za-z0-9_-][CGKOSWaeimquy26-][A-Za-z0-9_-]{10}[AQgw]$",
        "expires": r"^[0-9]{1,12}$",
        "signature": r"^[A-Za-z0-9_-]{43}$",
    },
)
async def upload_object_data(call: ObjectCall) -> Reply:
    """The `putUrl` createUpload answers a caller that sends chunked bodies: a PUT of the data, chunked or not,
    authorized by the URL's signature (this object and upload, until `expires`). The data is streamed to Blob
    Storage; `200` with its MD5 as `ETag`. At most the proposed `contentLength`; refused once the object is
    finished. Then finishUpload, as for any upload."""
    query = call.query
    request = ObjectDataRequest(
        call.params["name"],
        query.get("uploadId", ""),
        int(query.get("expires", "0")),
        query.get("signature", ""),
        call.request.headers,
    )
    etag = await call.context.object_uploads.receive(request, call.request.stream())
    return Reply(None, 200, {"etag": etag})


@api.route(
    "POST",
    "/finish-upload/<name>",
    name="finishUpload",
    title="Mark an upload as complete",
    scopes=UPLOAD_SCOPES,
    input="object/finish-upload-request",
)
async def finish_upload(call: ObjectCall) -> dict[str, Any]:
    """The data is uploaded: the object becomes immutable and downloadable. Its size must be the proposed
    `contentLength`; `hashes` are recorded, and checked against the data for objects up to 16 MiB (a mismatch is
    a 400 and nothing changes). Objects larger than that need a sha256 or sha512, which downloaders check."""
    await call.authorize(projectId=call.body["projectId"])
    await call.context.objects.finish_upload(call.params["name"], call.body)
    return {}


@api.route(
    "PUT",
    "/start-download/<name>",
    name="startDownload",
    title="Download object data",
    scopes=DOWNLOAD_SCOPES,
    input="object/download-object-request",
    output="object/download-object-response",
)
async def start_download(call: ObjectCall) -> dict[str, Any]:
    """Where to download a finished object: `getUrl` (a signed URL until `expires`, and the `hashes` to check
    the data against) or `simple` (the URL alone), whichever the caller accepts (getUrl first)."""
    await call.authorize()
    download = await call.context.objects.start_download(call.params["name"], call.body["acceptDownloadMethods"])
    return answers.download(download)


@api.route(
    "GET",
    "/metadata/<name>",
    name="object",
    title="Get an object's metadata",
    scopes=DOWNLOAD_SCOPES,
    output="object/get-object-response",
)
async def object_metadata(call: ObjectCall) -> dict[str, Any]:
    """A finished object's project, expiry and hashes."""
    await call.authorize()
    return answers.stored_object(await call.context.objects.finished(call.params["name"]))


@api.route("GET", "/download/<name>", name="download", title="Get an object's data", scopes=DOWNLOAD_SCOPES)
async def download(call: ObjectCall) -> Reply:
    """A 303 redirect to the data (the `simple` method: no hashes are checked)."""
    await call.authorize()
    found = await call.context.objects.start_download(call.params["name"], {"simple": True})
    return Reply(None, 303, {"location": found.url})
