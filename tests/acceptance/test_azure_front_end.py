"""Uploads as Azure's front end takes them: a body over `FUNCTIONS_REQUEST_BODY_SIZE_LIMIT` is answered 413 and a
request unanswered after 230 s is answered 502, as the local host models them (local_host/front_end.py, with a
limit of 1 MiB and a second here), and what was cut off is never stored. Every request here goes through the HTTP
function as the Functions worker calls it (functions/http_api.py, HTTP streams)."""

from __future__ import annotations

import socket
import time
import urllib.parse

import httpx
import pytest

from tests.acceptance.conftest import QUICK_CLAIMS
from tests.acceptance.helpers import claimed, in_days

LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def host(host_factory):
    return host_factory(**QUICK_CLAIMS, http_request_body_limit=LIMIT, http_answer_within=1)


@pytest.fixture
def queue(host):
    return host.client()


def s3_put_url(queue) -> tuple[str, str, str]:
    task_id, worker = claimed(queue)
    answer = worker.createArtifact(
        task_id, "0", "public/big.bin", {"storageType": "s3", "expires": in_days(), "contentType": "application/x"}
    )
    return task_id, answer["putUrl"], answer["contentType"]


def raw_put(url: str, head_extra: str, chunks, pause: float = 0.0) -> bytes:
    """PUT `chunks` over a socket of its own (what an unchanged worker's HTTP client sends), then what came back."""
    parts = urllib.parse.urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    path = parts.path + ("?" + parts.query if parts.query else "")
    sock.sendall(f"PUT {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n{head_extra}\r\n".encode())
    try:
        for chunk in chunks:
            sock.sendall(chunk)
            time.sleep(pause)
    except OSError:
        pass  # the front end answered and closed while the body was still coming
    answer = b""
    try:
        while data := sock.recv(65536):
            answer += data
    except OSError:
        pass
    sock.close()
    return answer


def stored(queue, task_id: str) -> int:
    """The status of reading the artifact back through its redirect."""
    url = queue.buildUrl("getArtifact", task_id, "0", "public/big.bin")
    return httpx.get(url, follow_redirects=True, timeout=10).status_code


def test_a_declared_body_over_the_limit_is_refused_413_and_nothing_is_stored(queue):
    task_id, put_url, content_type = s3_put_url(queue)
    body = b"x" * (LIMIT + 1)
    too_big = raw_put(put_url, f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n", [body])
    assert too_big.startswith(b"HTTP/1.1 413 ") and too_big.endswith(b"\r\n\r\n"), too_big[:200]  # no body
    assert stored(queue, task_id) == 404
    # A body within the limit is taken through the same URL, streamed through the HTTP function.
    fits = httpx.put(put_url, content=b"y" * LIMIT, headers={"Content-Type": content_type}, timeout=30)
    assert fits.status_code == 200, fits.text
    assert httpx.get(queue.buildUrl("getArtifact", task_id, "0", "public/big.bin"), follow_redirects=True).content == (
        b"y" * LIMIT
    )


def test_a_chunked_body_passing_the_limit_is_cut_413_and_nothing_is_stored(queue):
    task_id, put_url, content_type = s3_put_url(queue)
    piece = b"z" * (256 * 1024)
    chunks = [b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(6)] + [b"0\r\n\r\n"]
    answer = raw_put(put_url, f"Content-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n", chunks)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert stored(queue, task_id) == 404


def test_a_request_unanswered_within_the_front_ends_time_is_answered_502_and_nothing_is_stored(queue):
    task_id, put_url, content_type = s3_put_url(queue)
    piece = b"s" * 32 * 1024
    answer = raw_put(put_url, f"Content-Type: {content_type}\r\nContent-Length: {len(piece) * 8}\r\n", [piece] * 8, 0.4)
    assert answer.startswith(b"HTTP/1.1 502 "), answer[:200]  # the app, given the whole body, would answer 200
    assert stored(queue, task_id) == 404
