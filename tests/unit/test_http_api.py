"""The API behind the HTTP function as the Functions worker calls it (HTTP streams, functions/http_api.py): requests
signed as the official client signs them authenticate after the host's proxy hop (the client's Host moved to
X-Forwarded-Host), whether the path arrives encoded or decoded; bodies arrive and leave in chunks, never whole."""

from __future__ import annotations

import urllib.parse
from types import SimpleNamespace
from unittest.mock import patch

import mohawk
import pytest
from starlette.requests import Request

from functions.http_api import client_view, http_app_func
from shared.api.framework import ApiApp
from shared.api.queue_v1 import api
from shared.auth.authenticator import Authenticator
from shared.auth.clients import ClientStore
from shared.storage.memory_blobs import MemoryBlobs
from tests.answers import create_artifact
from tests.conftest import schema_defaults, slugid, task_definition
from tests.services import memory_service

ROOT_TOKEN = "r" * 30
HOST = "queue.example.net"  # the deployment's public host, as the client addressed it
ROOT_URL = f"https://{HOST}"


def proxied(method: str, path: str, raw_path: bytes, headers: list[tuple[bytes, bytes]], chunks=(b"",)) -> Request:
    """A request as the worker's web server gets it from the Functions host's proxy."""
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive():
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": urllib.parse.unquote(path),
        "raw_path": raw_path,
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1:5555"),  # the worker's own address
            (b"x-forwarded-host", HOST.encode()),
            (b"x-forwarded-proto", b"http"),  # the host behind the front end that ended TLS
            (b"x-ms-invocation-id", b"5f2b"),
            *headers,
        ],
        "client": ("10.0.0.4", 50000),
        "server": ("127.0.0.1", 5555),
        "router": object(),  # what the worker's FastAPI adds; the API never sees it
    }
    return Request(scope, receive)


async def answer_of(app, request: Request) -> tuple[int, list[tuple[bytes, bytes]], list[bytes]]:
    """What the HTTP function answers `request` with, sent as the worker's web server sends it."""
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    with patch("functions.http_api.API", app), patch("functions.http_api.get_settings", settings):
        response = await http_app_func(request)
        await response(request.scope, request.receive, send)
    head = sent[0]
    return head["status"], head["headers"], [m["body"] for m in sent[1:] if m.get("body")]


def settings():
    return SimpleNamespace(public_root_url=ROOT_URL)


@pytest.mark.parametrize("encoded", [True, False])
async def test_artifact_names_with_encoded_slashes_authenticate_behind_the_host_proxy(encoded):
    service = memory_service(blobs=MemoryBlobs(), root_access_token=ROOT_TOKEN)
    clients = ClientStore(service.stores.tables, token_secret=None, root_client_id="root", root_access_token=ROOT_TOKEN)
    app = ApiApp([api], lambda: service, lambda: Authenticator(clients, []), validate_responses=True)
    task_id, definition = slugid(), task_definition()
    await service.creation.create_task(task_id, dict(definition, **schema_defaults(definition)))
    await service.claims.claim(task_id, 0, "g", "w")
    name = "private/with space/a%b"
    reference = {"storageType": "reference", "expires": definition["deadline"], "contentType": "text/plain"}
    await create_artifact(service, task_id, 0, name, {**reference, "url": "https://example.com/x"})
    path = f"/api/queue/v1/task/{task_id}/runs/0/artifacts/{urllib.parse.quote(name, safe='')}"
    raw_path = path.encode() if encoded else urllib.parse.unquote(path).encode()

    def signed(signed_path: str) -> list[tuple[bytes, bytes]]:
        credentials = {"id": "root", "key": ROOT_TOKEN, "algorithm": "sha256"}
        sender = mohawk.Sender(credentials, f"{ROOT_URL}{signed_path}", "GET", content=b"", content_type="")
        return [(b"authorization", sender.request_header.encode())]

    status, headers, _ = await answer_of(app, proxied("GET", path, raw_path, signed(path)))
    assert status == 303 and dict(headers)[b"location"] == b"https://example.com/x"
    # A MAC that is wrong for every form of the path is still refused.
    forged = proxied("GET", path, raw_path, signed(path.replace("a%25b", "a%25c")))
    assert (await answer_of(app, forged))[0] == 401


def test_the_client_view_restores_the_host_and_the_public_scheme_and_port():
    request = proxied("GET", "/x", b"/x", [(b"x-custom", b"kept")])
    view = client_view(dict(request.scope), lambda: ROOT_URL)
    headers = dict(view["headers"])
    assert view["scheme"] == "https" and headers[b"host"] == HOST.encode()
    assert headers[b"x-forwarded-proto"] == b"https" and headers[b"x-custom"] == b"kept"
    assert "router" not in view
    # Another host name (a custom domain not set as the rootUrl) keeps what the proxy said of it.
    other = client_view(dict(request.scope), lambda: "https://elsewhere.example")
    assert dict(other["headers"])[b"host"] == HOST.encode() and other["scheme"] == "http"
    # Not proxied (no invocation id): as it came.
    plain = {**request.scope, "headers": [(b"host", b"127.0.0.1:7071")]}
    assert client_view(plain, lambda: ROOT_URL)["headers"] == [(b"host", b"127.0.0.1:7071")]


async def test_a_body_reaches_the_app_chunk_by_chunk_and_the_answer_leaves_as_it_is_made():
    seen: list[int] = []

    async def app(scope, receive, send):
        while True:
            message = await receive()
            seen.append(len(message.get("body", b"")))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1"), (b"x-a", b"2")]})
        for part in (b"one", b"two", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    chunks = (b"a" * 4096, b"b" * 4096, b"c" * 10)
    status, headers, body = await answer_of(app, proxied("PUT", "/up", b"/up", [], chunks))
    assert seen == [4096, 4096, 10]  # as they came, never joined
    assert status == 200 and body == [b"one", b"two", b"three"]
    assert [v for k, v in headers if k == b"x-a"] == [b"1", b"2"]  # repeated headers kept


async def test_what_the_app_raises_is_raised_to_the_server():
    async def failing(scope, receive, send):
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        await answer_of(failing, proxied("GET", "/x", b"/x", []))
