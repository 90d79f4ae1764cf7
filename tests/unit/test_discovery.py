"""The references, schemas and OpenAPI documents are rendered once per process (the OpenAPI documents take
0.7 MB: rendered per request, 500 anonymous GETs at once delayed a ping 8 s), for the settings' rootUrl."""

from __future__ import annotations

from starlette.requests import Request

from shared.api import discovery as discovery_mod
from shared.api.app import APIS
from shared.api.discovery import Discovery


def get(path: str) -> Request:
    return Request({"type": "http", "method": "GET", "path": path, "headers": [(b"host", b"evil.example")]})


def test_each_document_is_rendered_once_for_the_settings_root_url(monkeypatch):
    rendered = []
    dumps = discovery_mod.json.dumps

    def counting(value, **kwargs):
        rendered.append(1)
        return dumps(value, **kwargs)

    monkeypatch.setattr(discovery_mod.json, "dumps", counting)
    found = Discovery(APIS, root_url=lambda: "https://tc.example.com", namespace=lambda: "taskcluster-queue")
    first = found(get("/references/queue/v1/openapi.json"))
    for _ in range(50):
        again = found(get("/references/queue/v1/openapi.json"))
    assert first is not None and again is not None and again.body == first.body and len(rendered) == 1
    assert b"https://tc.example.com/" in first.body and b"evil.example" not in first.body
    assert found(get("/references/nothing/v1/api.json")) is None and len(found._rendered) == 1
