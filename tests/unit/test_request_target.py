"""The forwarder sends only to the base (shared/api/request_target.py, shared/api/forwarding.py): over request
targets of any bytes and of the shapes attackers send (absolute- and authority-form, `@`, `%2F`, dot segments
escaped or not, backslashes), a request either is refused (400, nothing sent) or goes to the service's base
scheme, host and port, under its path and the service's prefix, with no dot segment an upstream could resolve.
Base URLs with credentials, queries, dot segments or bad ports are refused at the setting."""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

import pytest
import yarl
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.api.forwarding import Forwarder, Forwarding
from shared.api.request_target import BadRequestTarget, check_target, forwarded_service, target_url
from shared.settings.serving import parse_forwarding

BASES = ["http://127.0.0.1:8080", "https://secrets.internal/prefix", "http://[::1]:9000/a/b"]
PIECES = [
    "/", "//", "@", ":", "%2F", "%2f", "%2e", "%2E", ".", "..", "%40", "127.0.0.1:7399", "\\", "%5C", "?", "#",
    "api", "secrets", "v1", "x", "%", "%zz", " ", "\t", "\x00", "é", "%00", "*", "http:", "https://evil",
]  # fmt: skip
TARGETS = st.one_of(
    st.binary(max_size=60),
    st.lists(st.sampled_from(PIECES), max_size=12).map(lambda parts: "".join(parts).encode("utf-8")),
    st.lists(st.sampled_from(PIECES), max_size=8).map(lambda parts: ("/api/secrets/" + "".join(parts)).encode()),
)


def resolves_to_a_dot_segment(path: str) -> bool:
    """Whether an upstream that unescapes (once or twice) and takes `\\` for `/` could see `.` or `..`."""
    for text in (path, urllib.parse.unquote(path), urllib.parse.unquote(urllib.parse.unquote(path))):
        if {".", ".."} & set(text.replace("\\", "/").split("/")):
            return True
    return False


@settings(max_examples=1500, deadline=None)
@given(base=st.sampled_from(BASES), raw_path=TARGETS, query=st.one_of(st.just(b""), TARGETS))
def test_a_target_is_refused_or_stays_under_the_base(base, raw_path, query):
    base_url = yarl.URL(base, encoded=True)
    try:
        url = target_url(base_url, raw_path, query)
    except BadRequestTarget:
        return
    assert (url.scheme, url.raw_host, url.port) == (base_url.scheme, base_url.raw_host, base_url.port)
    assert url.user is None and url.password is None
    assert url.raw_path == base_url.raw_path.rstrip("/") + raw_path.decode()
    assert not resolves_to_a_dot_segment(raw_path.decode())
    # What goes on the wire parses back to the same place (no `#`, `?` or authority hidden in the path).
    again = yarl.URL(str(url))  # (which normalizes escapes: compared unescaped)
    assert (again.scheme, again.raw_host, again.port, again.path) == (url.scheme, url.raw_host, url.port, url.path)


@pytest.mark.parametrize(
    "raw_path",
    [
        b"%2Fapi%2Fsecrets%2F@127.0.0.1:7399/x",  # the round-four reproduction: matched decoded, sent raw
        b"%2Fapi/secrets/@127.0.0.1:7399/x",  # the unhandled 500
        b"http://127.0.0.1:7399/api/secrets/v1/x",
        b"127.0.0.1:7399",
        b"*",
        b"//127.0.0.1:7399/api/secrets/v1/x",
        b"/api/secrets/../../x",
        b"/api/secrets/v1/%2e%2e/%2E%2E/x",
        b"/api/secrets/v1/secret/%2F..%2F..%2Fx",
        b"/api/secrets/v1/..\\..\\x",
        b"/api/secrets/v1/%zz",
        b"/api/secrets/v1/a#b",
    ],
)
def test_the_reproductions_are_refused(raw_path):
    with pytest.raises(BadRequestTarget):
        check_target(raw_path, b"")


def test_the_service_is_named_by_the_path_as_sent_not_through_escapes():
    assert forwarded_service(b"/api/secrets/v1/secret/project%2Fa") == "secrets"
    assert forwarded_service(b"/references/hooks/v1/api.json") == "hooks"
    assert forwarded_service(b"/api%2Fsecrets/v1/x") is None
    assert forwarded_service(b"%2Fapi%2Fsecrets%2F@127.0.0.1:7399/x") is None


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("secrets=http://user:pass@127.0.0.1:8080", "credentials"),
        ("secrets=http://127.0.0.1:99999", "port"),
        ("secrets=http://127.0.0.1/a/../b", "dot segments"),
        ("secrets=http://127.0.0.1/%2e%2e", "escapes"),
        ("secrets=http://127.0.0.1/?x=1", "query"),
        ("secrets=ftp://127.0.0.1", r"http\(s\)"),
        ("queue=http://127.0.0.1", "served by this app"),
    ],
)
def test_a_base_url_is_an_http_origin_and_a_plain_path(setting, problem):
    with pytest.raises(ValueError, match=problem) as refused:
        parse_forwarding(setting)
    assert "user:pass@" not in str(refused.value)  # the credentials are not repeated where the error is shown


class Recording:
    """An aiohttp session's stand-in: records where each request would go, answers nothing."""

    def __init__(self) -> None:
        self.sent: list[yarl.URL] = []
        self.closed = False

    def request(self, method: str, url: yarl.URL, **kw: Any) -> Any:
        self.sent.append(url)
        raise OSError("not sent")


async def asgi_call(app: Any, raw_path: bytes, path: str) -> int:
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": raw_path,
        "query_string": b"",
        "headers": [(b"host", b"queue.example")],
        "client": ("10.0.0.1", 5000),
        "scheme": "http",
    }
    answered: list[int] = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.sleep(3600)  # as a server does until the caller leaves
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answered.append(message["status"])

    await app(scope, receive, send)
    return answered[0]


@settings(max_examples=400, deadline=None)
@given(raw_path=TARGETS)
async def test_the_forwarder_sends_nothing_off_the_base(raw_path):
    recording = Recording()

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    forwarder = Forwarder(inner, lambda: Forwarding({"secrets": "http://127.0.0.1:8080/base"}))
    forwarder._sessions["secrets"] = recording  # type: ignore[assignment]
    decoded = urllib.parse.unquote(raw_path.decode("latin-1"))
    status = await asgi_call(forwarder, raw_path, decoded)
    for url in recording.sent:
        assert (url.scheme, url.host, url.port) == ("http", "127.0.0.1", 8080)
        assert url.raw_path.startswith("/base/api/secrets/") or url.raw_path == "/base/api/secrets"
    if not raw_path.startswith(b"/"):
        assert status == 400 and not recording.sent
