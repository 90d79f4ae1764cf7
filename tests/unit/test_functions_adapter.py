"""The API behind Azure Functions' own ASGI adapter (`func.AsgiMiddleware`, what `AsgiFunctionApp` serves
through): requests signed as the official client signs them must authenticate there too."""

from __future__ import annotations

import urllib.parse

import azure.functions as func
import mohawk
from azure.functions._http_asgi import AsgiRequest

from shared.api.framework import ApiApp
from shared.api.queue_v1 import api
from shared.auth.authenticator import Authenticator
from shared.auth.clients import ClientStore
from shared.storage.memory import MemoryBlobs
from tests.answers import create_artifact
from tests.conftest import slugid, task_definition
from tests.services import memory_service
from tests.unit.test_service import _defaults

ROOT_TOKEN = "r" * 30
HOST = "127.0.0.1:7071"


def signed(method: str, path: str, body: bytes = b"") -> func.HttpRequest:
    url = f"http://{HOST}{path}"
    sender = mohawk.Sender(
        {"id": "root", "key": ROOT_TOKEN, "algorithm": "sha256"},
        url,
        method,
        content=body,
        content_type="application/json" if body else "",
    )
    headers = {"authorization": sender.request_header, "host": HOST}
    if body:
        headers["content-type"] = "application/json"
    return func.HttpRequest(method, url, headers=headers, body=body)


async def test_artifact_names_with_encoded_slashes_authenticate_behind_the_functions_adapter():
    service = memory_service(blobs=MemoryBlobs(), root_access_token=ROOT_TOKEN)
    clients = ClientStore(service.stores.tables, token_secret=None, root_client_id="root", root_access_token=ROOT_TOKEN)
    app = ApiApp([api], lambda: service, lambda: Authenticator(clients, []), validate_responses=True)
    middleware = func.AsgiMiddleware(app)
    task_id, definition = slugid(), task_definition()
    await service.creation.create_task(task_id, dict(definition, **_defaults(definition)))
    await service.claims.claim(task_id, 0, "g", "w")
    name = "private/with space/a%b"
    await create_artifact(
        service,
        task_id,
        0,
        name,
        {
            "storageType": "reference",
            "expires": definition["deadline"],
            "contentType": "text/plain",
            "url": "https://example.com/x",
        },
    )
    path = f"/api/queue/v1/task/{task_id}/runs/0/artifacts/{urllib.parse.quote(name, safe='')}"
    request = signed("GET", path)
    # The adapter's scope carries the decoded path as raw_path: the signed (encoded) path is lost.
    assert b"%2F" not in AsgiRequest(request).to_asgi_http_scope()["raw_path"]
    response = await middleware.handle_async(request)
    assert response.status_code == 303, response.get_body()
    assert response.headers["location"] == "https://example.com/x"
    # A MAC that is wrong for every form of the path is still refused.
    forged = signed("GET", path.replace("a%25b", "a%25c"))
    forged_response = await middleware.handle_async(
        func.HttpRequest("GET", f"http://{HOST}{path}", headers=dict(forged.headers), body=b"")
    )
    assert forged_response.status_code == 401
