"""The request target a forwarded request may have, and the one URL it becomes: the forwarder sends only to the
base URL of the service, on its scheme, host and port, under its path (docs/security.md, "Request targets").

A target is taken in origin-form only (`/path?query`, RFC 9112 3.2.1): absolute-form, authority-form and
asterisk-form, or a path that does not start with exactly one `/`, are refused. Its path is made of RFC 3986's
path characters and well-formed `%XX` escapes only, names the service in its first two segments as sent (not
through escapes: `/api%2Fsecrets/` is not a forwarded path), and holds no dot segment, as sent or unescaped once
or twice (`..`, `%2e%2E`, `%2F..%2F`, `..\\`): an upstream that normalizes or unescapes cannot be walked out of
the service's prefix. The URL is then built from the base's parts, never by joining strings, and checked to stay
on the base.
"""

from __future__ import annotations

import re
import urllib.parse

import yarl

from shared import errors

# RFC 3986: pchar = unreserved / pct-encoded / sub-delims / ":" / "@"; a query adds "/" and "?".
_PATH = re.compile(rb"(?:/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})*)+")
_QUERY = re.compile(rb"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*")
FORWARDED = re.compile(rb"/(?:api|references|schemas)/([a-z][a-z0-9-]*)(?:/|$)")
DOT_SEGMENTS = frozenset({".", ".."})


class BadRequestTarget(errors.InputError):
    """The request target cannot be forwarded: {problem}"""


def forwarded_service(raw_path: bytes) -> str | None:
    """The service an origin-form target's path names as sent (`/api/<service>/...`), or None."""
    found = FORWARDED.match(raw_path)
    return found.group(1).decode() if found else None


def check_target(raw_path: bytes, query: bytes) -> None:
    """BadRequestTarget unless the target is an origin-form path of path characters with no dot segment and a
    query of query characters."""
    if not raw_path.startswith(b"/") or raw_path.startswith(b"//"):
        raise BadRequestTarget(problem="only a path starting with one `/` is forwarded (origin-form)")
    if not _PATH.fullmatch(raw_path):
        raise BadRequestTarget(problem="the path holds a character that is not a path character, or a bad `%` escape")
    if not _QUERY.fullmatch(query):
        raise BadRequestTarget(problem="the query holds a character that is not a query character, or a bad escape")
    if _dot_segments(raw_path.decode("ascii")):
        raise BadRequestTarget(problem="the path holds a `.` or `..` segment (as sent, or unescaped once or twice)")


def _dot_segments(path: str) -> bool:
    """Whether `path`, as sent or unescaped once or twice, with `\\` taken for `/`, has a `.` or `..` segment."""
    for _ in range(3):
        if DOT_SEGMENTS & set(path.replace("\\", "/").split("/")):
            return True
        path = urllib.parse.unquote(path, errors="replace")
    return False


def target_url(base: yarl.URL, raw_path: bytes, query: bytes) -> yarl.URL:
    """The URL a checked target becomes: the base's scheme, host and port, its path followed by the target's path,
    the query as sent; AssertionError if it would leave the base (it cannot, built by parts: a guard)."""
    check_target(raw_path, query)
    path = base.raw_path.rstrip("/") + raw_path.decode("ascii")
    url = yarl.URL.build(
        scheme=base.scheme,
        authority=base.raw_authority,  # the base's host and port (a base holds no credentials: the setting's check)
        path=path,
        query_string=query.decode("ascii"),
        encoded=True,
    )
    stays = (url.scheme, url.raw_host, url.port, url.user, url.password) == (
        base.scheme,
        base.raw_host,
        base.port,
        None,
        None,
    )
    assert stays and url.raw_path.startswith(base.raw_path.rstrip("/") + "/"), f"{url} leaves {base}"
    return url
