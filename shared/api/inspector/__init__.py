"""The web inspector's files: `<rootUrl>/inspector/` (and `<rootUrl>/`, which leads there) serves a page that
shows task groups, tasks, runs, artifacts, live logs and task queues by calling this same API from the browser
(shared/api/inspector/app/: plain HTML, CSS and JavaScript modules, no build step).

Taskcluster's UI addresses (`<rootUrl>/tasks/<taskId>`, `/tasks/groups/<taskGroupId>`,
`/tasks/<taskId>/runs/<runId>/logs/<name>`, `/provisioners/<p>/worker-types/<t>`, `/worker-manager/<pool>`, and
the old tools site's `/task-inspector/` and `/task-group-inspector/`), which Taskcluster's tools print, answer a
page whose script (address.js) opens the same thing in the inspector: in the browser, because a log's line anchor
(`#L12`) never reaches the server and a redirect would lose it.

The page signs its requests with Hawk itself (WebCrypto), so it needs nothing but the API; its headers keep it
from being framed or from loading code from anywhere else.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

STATIC = Path(__file__).parent / "app"
PREFIX = "/inspector/"
CONFIG = "config.json"
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
SECURITY_HEADERS = {
    # Code and styles only from here; API calls to here, and artifact reads (logs) to Blob Storage anywhere.
    "content-security-policy": "default-src 'self'; connect-src 'self' https: http:; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
UI_ADDRESSES = ("/tasks", "/provisioners", "/worker-manager", "/task-inspector", "/task-group-inspector")
ADDRESS_PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Opening in the queue inspector</title><link rel="icon" href="data:,">
<script type="module" src="{script}"></script></head>
<body><p>Opening this address in the <a href="{inspector}">queue inspector</a>…</p>
<noscript>The inspector needs JavaScript: open it at <a href="{inspector}">{inspector}</a>.</noscript></body>
</html>
"""


@functools.cache
def _files() -> dict[str, tuple[bytes, str]]:
    """The inspector's files by name, with their ETags, read once: a request is answered from this map, so no
    requested name reaches the file system or any cache (the names are what the folder holds, nothing else)."""
    files = {}
    for path in sorted(STATIC.iterdir()):
        if path.is_file() and path.suffix in MEDIA_TYPES and not path.name.startswith("."):
            data = path.read_bytes()
            files[path.name] = (data, '"' + hashlib.sha256(data).hexdigest()[:32] + '"')
    return files


def _file(name: str) -> tuple[bytes, str] | None:
    """A file of the inspector and its ETag; None if there is no such file."""
    return _files().get(name)


class Inspector:
    """Answers GETs of the inspector's files (`documents` of the ApiApp, after the discovery documents), or
    None for any other path. `config`: what the deployment tells the page (`config.json`: its push Index template
    and Treeherder's address), read per request, so that a changed setting needs no new release."""

    def __init__(self, config: Callable[[], dict[str, str]] = dict) -> None:
        self.config = config

    def __call__(self, request: Request) -> Response | None:
        path = request.scope["path"]
        if path in ("/", PREFIX.rstrip("/")):
            return RedirectResponse(PREFIX, status_code=302)
        if any(path == address or path.startswith(address + "/") for address in UI_ADDRESSES):
            return self._address_page(request)
        if not path.startswith(PREFIX):
            return None
        name = path[len(PREFIX) :] or "index.html"
        if name == CONFIG:
            return JSONResponse(self.config(), headers={"cache-control": "no-cache", **SECURITY_HEADERS})
        found = _file(name)
        if found is None:
            return None
        data, etag = found
        headers = {"etag": etag, "cache-control": "no-cache", **SECURITY_HEADERS}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return Response(data, media_type=MEDIA_TYPES[Path(name).suffix], headers=headers)

    @staticmethod
    def _address_page(request: Request) -> Response:
        """The page at a Taskcluster UI address (any path under UI_ADDRESSES: what it names is read in the
        browser, by address.js, and nothing of the path is put on this page)."""
        inspector = request.scope.get("root_path", "") + PREFIX
        page = ADDRESS_PAGE.format(script=inspector + "address.js", inspector=inspector)
        headers = {"cache-control": "no-cache", **SECURITY_HEADERS}
        return Response(page, media_type=MEDIA_TYPES[".html"], headers=headers)
