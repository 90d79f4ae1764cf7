"""The lean storage client's small parts that run on every request (shared/storage/rest/http.py)."""

from __future__ import annotations

import datetime as dt
import email.utils
from typing import Any

import pytest

from shared.storage.rest import http as rest


@pytest.mark.parametrize("seconds", [0, 951_782_400, 1_795_400_408, 1_803_254_399, 4_102_444_799])
def test_storage_dates_parse_as_the_email_parser_reads_them(seconds):
    text = email.utils.formatdate(seconds, usegmt=True)
    assert rest.rfc1123(text) == email.utils.parsedate_to_datetime(text)
    assert rest.rfc1123(text) == dt.datetime.fromtimestamp(seconds, dt.UTC)


@pytest.mark.parametrize(
    "text", ["Mon, 3 Nov 2026 02:00:08 GMT", "Mon, 23 Nov 2026 02:00:08 +0000", "Mon, 23 Nov 2026 02:00:08 -0100"]
)
def test_other_date_forms_go_to_the_email_parser(text):
    assert rest.rfc1123(text) == email.utils.parsedate_to_datetime(text)


def test_no_date_is_none():
    assert rest.rfc1123(None) is None and rest.rfc1123("") is None


def test_the_date_header_is_the_current_second(monkeypatch):
    for now in (1_795_400_408.2, 1_795_400_408.9, 1_795_400_409.0, 1_795_400_470.5):
        monkeypatch.setattr(rest.time, "time", lambda now=now: now)
        assert rest.http_date() == email.utils.formatdate(int(now), usegmt=True)


class _Response:
    status = 200
    headers: dict[str, str] = {}

    async def read(self) -> bytes:
        return b"ok"

    async def __aenter__(self) -> _Response:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None


class _Session:
    def request(self, *args: Any, **kwargs: Any) -> _Response:
        return _Response()


class _Tracer:
    def __init__(self) -> None:
        self.spans: list[str] = []

    def start_as_current_span(self, name: str, **kwargs: Any) -> Any:
        self.spans.append(name)
        raise AssertionError("a span was started")


async def test_no_span_is_made_without_a_tracer_provider():
    """Spans from opentelemetry's default (proxy) provider do nothing; the client skips making them."""
    from opentelemetry import trace

    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # nothing configured in unit tests
    http = rest.Http(traced=True)
    http._session = _Session()  # type: ignore[assignment]
    http.tracer = _Tracer()  # type: ignore[assignment]
    assert (
        await http.send("GET", "http://127.0.0.1:1/x", name="x", data=None, headers={}, operation="table.get")
    ).body == b"ok"
    assert http.tracer.spans == []  # type: ignore[attr-defined]
