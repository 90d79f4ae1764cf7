"""What the web inspector's browser tests share: Debian's Chromium driven by Playwright (the `browser` and `page`
fixtures are in this tier's conftest.py), screenshots for docs/inspector/, waiting on the page, signing in, and
tasks with a log written through the API (a worker's protocol, without a worker)."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from shared import timeutil
from tests.conftest import PROJECT, ROOT_ACCESS_TOKEN, ROOT_CLIENT_ID, slugid, task_definition, task_queue_id, wait_for

CHROMIUM = os.environ.get("QUEUE_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
# Skipped without Chromium on a developer's machine; `.ci/run` installs Debian's and sets QUEUE_TEST_REQUIRE_BROWSER.
needs_browser = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("QUEUE_TEST_REQUIRE_BROWSER"),
    reason="no Chromium (apt-get install chromium)",
)
SHOTS = PROJECT / "docs" / "inspector"
TAKE_SHOTS = os.environ.get("QUEUE_TEST_SCREENSHOTS") == "1"
WAIT_MS = 30_000
LOG = "public/logs/live.log"


def shot(page: Any, name: str) -> None:
    if TAKE_SHOTS:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"))


def wait_js(page: Any, expression: str, timeout: int = WAIT_MS) -> None:
    """Wait until `expression` is true on the page (Playwright's wait_for_function evaluates its predicate with
    `eval`, which the inspector's Content-Security-Policy refuses, rightly)."""
    wait_for(lambda: page.evaluate(expression), timeout=timeout / 1000, interval=0.2)


def answer_dialog(page: Any, click: Callable[[], Any], accept: bool) -> str:
    """Click (`click()`), answer the confirm it opens and return what it asked; a click that opens none fails here,
    saying so (a handler that is never called left a test polling until a timeout that named nothing). Answered by
    a handler: a click does not return while its dialog is open."""
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(str(dialog.message))
        if accept:
            dialog.accept()
        else:
            dialog.dismiss()

    page.once("dialog", answer)
    click()
    give_up = time.monotonic() + WAIT_MS / 1000
    while not asked:
        assert time.monotonic() < give_up, "the click opened no dialog"
        page.wait_for_timeout(100)  # a Playwright call: the page's events reach the handler during it
    return asked[0]


def sign_in(page: Any, client_id: str = ROOT_CLIENT_ID, token: str = ROOT_ACCESS_TOKEN) -> None:
    page.fill("#client-id", client_id)
    page.fill("#access-token", token)
    page.click("#sign-in button[type=submit]")


def in_days(days: int = 1) -> str:
    return timeutil.iso(timeutil.now() + dt.timedelta(days=days))


def log_address(host: Any, task_id: str, name: str = LOG, run_id: int = 0) -> str:
    return f"{host.root_url}/inspector/#/tasks/{task_id}/runs/{run_id}/logs/{urllib.parse.quote(name, safe='')}"


def claimed_task(queue: Any, **definition: Any) -> str:
    """A task created and claimed (run 0 running) by worker wg/w1."""
    tq = definition.pop("taskQueueId", None) or task_queue_id()
    created = task_definition(taskQueueId=tq, **definition)
    task_id = slugid()
    queue.createTask(task_id, created)
    give_up = time.monotonic() + 15
    while time.monotonic() < give_up:
        if queue.claimWork(tq, {"tasks": 1, "workerGroup": "wg", "workerId": "w1"})["tasks"]:
            return task_id
        time.sleep(0.1)
    raise AssertionError("the task was not claimed")


def start_live_log(queue: Any, task_id: str, name: str = LOG) -> str:
    """Creates the artifact as the reference worker does for a live log (`azure`, no contentLength) and its
    append blob; answers the blob's URL to append to."""
    created = queue.createArtifact(
        task_id, "0", name, {"storageType": "azure", "expires": in_days(), "contentType": "text/plain; charset=utf-8"}
    )
    assert httpx.put(created["putUrl"], headers={"x-ms-blob-type": "AppendBlob"}).status_code == 201
    return str(created["putUrl"])


def append_log(blob_url: str, text: str) -> None:
    parts = urllib.parse.urlsplit(blob_url)
    url = urllib.parse.urlunsplit(parts._replace(query=parts.query + "&comp=appendblock"))
    assert httpx.put(url, content=text.encode()).status_code == 201


def finished_task_with_log(queue: Any, text: str, name: str = LOG, **definition: Any) -> str:
    """A completed task whose run 0 has the artifact `name` holding `text`."""
    task_id = claimed_task(queue, **definition)
    created = queue.createArtifact(
        task_id, "0", name, {"storageType": "azure", "expires": in_days(), "contentType": "text/plain; charset=utf-8"}
    )
    assert (
        httpx.put(created["putUrl"], content=text.encode(), headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    )
    queue.reportCompleted(task_id, "0")
    return task_id
