"""The inspector on Firefox CI's artifact layout (issue #85), in Chromium: `public/logs/live_backing.log` stored
gzip-encoded and `public/logs/live.log` a `reference` to it once the run ends, or to the worker's live stream
while it runs. The why follows the reference to the stored log, reads it decoded and names the real error
(a mozharness crash's KeyError, not the traceback's header); View log opens the stored log at that line; a live
stream is drawn as it arrives, long before it ends, and the stored log replaces it once the run is resolved."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from local_host.azurite import free_port
from tests.acceptance.browsing import WAIT_MS, claimed_task, in_days, log_address, needs_browser
from tests.conftest import slugid

pytestmark = needs_browser

BACKING = "public/logs/live_backing.log"
LIVE = "public/logs/live.log"
STAMP = "[task 2026-11-28T10:41:07.512Z] "
TEXT = "text/plain; charset=utf-8"


def reference(url: str) -> dict[str, str]:
    return {"storageType": "reference", "expires": in_days(), "url": url, "contentType": "text/plain"}


def mozharness(level: str, text: str) -> str:
    return f"{STAMP}10:41:07 {level:>8} - {text}"


def crashed_log(noise: int) -> tuple[str, int]:
    """A mozharness run that crashed, Firefox-shaped, `noise` test lines long; and the line of its KeyError."""
    lines = [mozharness("INFO", f"TEST-PASS | dom/tests/test_{i}.html | no exception thrown") for i in range(noise)]
    lines += [
        mozharness("FATAL", "Uncaught exception: Traceback (most recent call last):"),
        mozharness("FATAL", '  File "/builds/worker/checkouts/gecko/testing/mozharness/base/script.py", line 2201'),
        mozharness("FATAL", "    self.run_action(action)"),
        mozharness("FATAL", "KeyError: 'MOZ_FETCHES_DIR'"),
        mozharness("FATAL", "Running post_fatal callback..."),
        "[taskcluster 2026-11-28T10:45:19.823Z] Exit Code: 1",
    ]
    return "\n".join(lines) + "\n", len(lines) - 2


def store_gzip_backing_log(host: Any, queue: Any, task_id: str, text: str) -> None:
    """What docker-worker and generic-worker do at the end of a run: the backing log uploaded gzip-encoded, and
    live.log made a reference to it through the queue."""
    created = queue.createArtifact(
        task_id,
        "0",
        BACKING,
        {"storageType": "s3", "expires": in_days(), "contentType": TEXT, "contentEncoding": "gzip"},
    )
    put = httpx.put(
        created["putUrl"],
        content=gzip.compress(text.encode()),
        headers={"Content-Type": TEXT, "Content-Encoding": "gzip"},
        timeout=60,
    )
    assert put.status_code == 200
    backing_url = f"{host.root_url}/api/queue/v1/task/{task_id}/runs/0/artifacts/public%2Flogs%2Flive_backing.log"
    queue.createArtifact(task_id, "0", LIVE, reference(backing_url))


def test_the_why_follows_live_log_to_its_gzip_encoded_backing_log(host, page):
    queue = host.client()
    group = slugid()
    task_id = claimed_task(queue, taskGroupId=group)
    text, line = crashed_log(3000)
    store_gzip_backing_log(host, queue, task_id, text)
    queue.reportFailed(task_id, "0")
    page.goto(f"{host.root_url}/inspector/#/tasks/{task_id}")
    page.wait_for_selector("#exit-code", timeout=WAIT_MS)
    assert page.inner_text("#exit-code") == "1"
    first = page.locator("#run-why .error-lines li").first.inner_text()
    assert "KeyError: 'MOZ_FETCHES_DIR'" in first and f"line {line}" in first, first
    encoded_name = BACKING.replace("/", "%2F")
    page.wait_for_selector(f"#view-log-link[href$='{encoded_name}#L{line}']", timeout=WAIT_MS)
    page.click("#view-log-link")
    page.wait_for_selector(f"#log .line.sel[data-n='{line}']", timeout=WAIT_MS)  # the stored log, decoded
    assert "KeyError" in page.inner_text(f"#log .line[data-n='{line}']")
    page.goto(f"{host.root_url}/inspector/#/groups/{group}")
    why = page.locator(f"tr[data-task-id='{task_id}'] .why-line")
    why.wait_for(timeout=WAIT_MS)
    assert "exit code 1" in why.inner_text() and "KeyError" in why.inner_text()
    assert why.locator("a").get_attribute("href").endswith(f"{encoded_name}#L{line}")
    # live.log itself, as Taskcluster's UI opens it: the reference followed to the stored log, decoded.
    page.goto(log_address(host, task_id, LIVE))
    page.wait_for_selector("#log-status:has-text('the whole log')", timeout=WAIT_MS)
    assert "KeyError" in page.inner_text(f"#log .line[data-n='{line}']")


def test_a_gzip_encoded_log_longer_than_read_whole_as_text_keeps_its_line_numbers(host, page):
    """A log over 8 MiB of text that is sent gzip-encoded in far less is read whole (a range of compressed bytes
    could not be decoded): its error line is found with its number, not guessed from a tail."""
    queue = host.client()
    task_id = claimed_task(queue)
    text, line = crashed_log(150_000)
    assert len(text) > 9 * 1024 * 1024
    store_gzip_backing_log(host, queue, task_id, text)
    queue.reportFailed(task_id, "0")
    page.goto(f"{host.root_url}/inspector/#/tasks/{task_id}")
    page.wait_for_selector("#run-why .error-lines li", timeout=WAIT_MS)
    first = page.locator("#run-why .error-lines li").first.inner_text()
    assert "KeyError" in first and f"line {line:,}".replace(",", "") in first.replace(",", ""), first
    assert page.locator("#log-too-long").count() == 0


class LiveLog:
    """A worker's live-log server: one chunked answer per GET that sends the lines given to it as they come and
    ends when told, with the CORS header Taskcluster's livelog sends."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ended = threading.Event()
        self.changed = threading.Condition()
        live = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/plain; charset=utf-8")
                self.send_header("access-control-allow-origin", "*")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                sent = 0
                while True:
                    with live.changed:
                        live.changed.wait_for(lambda at=sent: len(live.lines) > at or live.ended.is_set(), timeout=1)
                        fresh, ended = live.lines[sent:], live.ended.is_set()
                    for text in fresh:
                        data = text.encode()
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                    sent += len(fresh)
                    if ended and sent == len(live.lines):
                        self.wfile.write(b"0\r\n\r\n")
                        return

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/log/token"

    def write(self, text: str) -> None:
        with self.changed:
            self.lines.append(text)
            self.changed.notify_all()

    def end(self) -> None:
        with self.changed:
            self.ended.set()
            self.changed.notify_all()

    def stop(self) -> None:
        self.end()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def live_log() -> Iterator[LiveLog]:
    served = LiveLog()
    yield served
    served.stop()


def test_a_live_log_is_drawn_as_its_stream_arrives_then_the_stored_log(host, page, live_log):
    queue = host.client()
    task_id = claimed_task(queue)
    queue.createArtifact(task_id, "0", LIVE, reference(live_log.url))
    page.goto(log_address(host, task_id, LIVE))
    first = "".join(f"{STAMP}step {i}: building\n" for i in range(200))
    live_log.write(first)
    # Drawn while the stream is open (it ends only with the task): not "Loading…" until the end.

    page.wait_for_selector("#log .line[data-n='200']", timeout=WAIT_MS)
    assert "following while the run runs" in page.inner_text("#log-status")
    live_log.write(f"{STAMP}step 200: linking\n")
    page.wait_for_selector("#log .line[data-n='201']:has-text('linking')", timeout=WAIT_MS)
    # The run ends as Firefox CI's workers end it: the stream closes, the backing log is stored gzip-encoded, and
    # live.log becomes a reference to it. The view ends on the stored log, the lines shown once each.
    text = first + f"{STAMP}step 200: linking\n" + f"{STAMP}error: linking failed\n" + "exit code 1 after 3 s\n"
    live_log.write(f"{STAMP}error: linking failed\n")
    live_log.end()
    store_gzip_backing_log(host, queue, task_id, text)
    queue.reportFailed(task_id, "0")
    page.wait_for_selector("#log-status:has-text('the whole log')", timeout=WAIT_MS)
    shown = page.evaluate("[...document.querySelectorAll('#log .line')].map(l => l.innerText)")
    assert len(shown) == 203 and "exit code 1" in shown[-1] and "error: linking failed" in shown[-2], shown[-3:]


def test_a_stream_still_open_when_its_run_is_resolved_is_not_waited_for(host, page, live_log):
    """A worker gone without closing its stream: once the run is resolved, the view gives up the stream and reads
    the stored log instead of waiting for ever."""
    queue = host.client()
    task_id = claimed_task(queue)
    queue.createArtifact(task_id, "0", LIVE, reference(live_log.url))
    page.goto(log_address(host, task_id, LIVE))
    live_log.write(f"{STAMP}started\n")
    page.wait_for_selector("#log .line[data-n='1']", timeout=WAIT_MS)
    store_gzip_backing_log(host, queue, task_id, f"{STAMP}started\n{STAMP}stopped by the deadline\n")
    began = time.monotonic()
    queue.reportException(task_id, "0", {"reason": "worker-shutdown"})
    page.wait_for_selector("#log-status:has-text('the whole log')", timeout=WAIT_MS)
    assert time.monotonic() - began < 20
    assert page.inner_text("#log .line[data-n='2']").endswith("stopped by the deadline")
