"""One rootUrl: requests for a service this app does not host go to where it runs (QUEUE_FORWARD_SERVICES), and
come back unchanged. The stand-in service here does what Taskcluster's services do with each request: it asks
the rootUrl's authenticateHawk about the caller (with the Host and forwarded port it was given), so the official
client's `Secrets` class, signing for the rootUrl, is answered by it through the queue."""

from __future__ import annotations

import gzip
import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import taskcluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local_host.azurite import free_port
from tests.conftest import ROOT_ACCESS_TOKEN, ROOT_CLIENT_ID, expect_error, wait_for

BIG = bytes((i * 7919) % 251 for i in range(3 * 1024 * 1024 + 5))


class StandIn(BaseHTTPRequestHandler):
    """A service behind the rootUrl: `/api/secrets/v1/...` asks authenticateHawk as Taskcluster's API library does
    and answers who called; `/api/echo/v1/...` answers what it received."""

    root_url = ""
    seen: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("transfer-encoding") or ""):
            body = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return body
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        body = self._body()
        self.seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "size": len(body)})
        if self.path.startswith("/api/secrets/"):
            host, _, port = self.headers["host"].partition(":")
            answer = taskcluster.Auth({"rootUrl": self.root_url, "maxRetries": 0}).authenticateHawk(
                {
                    "method": self.command.lower(),
                    "resource": self.path,
                    "host": host,
                    "port": int(self.headers.get("x-forwarded-port") or port or 80),
                    **({"authorization": self.headers["authorization"]} if "authorization" in self.headers else {}),
                }
            )
            secret = {
                "secret": {"who": answer.get("clientId"), "status": answer["status"]},
                "expires": "3000-01-01T00:00:00.000Z",
            }
            self._answer(200, json.dumps(secret).encode(), {"content-type": "application/json"})
        elif self.path.startswith("/api/echo/v1/big"):
            self._answer(
                207,
                gzip.compress(BIG),
                {"content-type": "application/octet-stream", "content-encoding": "gzip", "x-stand-in": "yes"},
            )
        else:
            digest = hashlib.sha256(body).hexdigest()
            self._answer(
                201,
                json.dumps({"sha256": digest, "size": len(body)}).encode(),
                {"content-type": "application/json", "x-stand-in": "yes"},
            )

    do_GET = do_POST = do_PUT = do_DELETE = _handle


@pytest.fixture(scope="module")
def stand_in() -> Iterator[int]:
    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield port
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def host(host_factory, stand_in):
    unreachable = free_port()  # nothing listens there
    forwarded = (
        f"secrets=http://127.0.0.1:{stand_in} echo=http://127.0.0.1:{stand_in}/ hooks=http://127.0.0.1:{unreachable}"
    )
    started = host_factory(forward_services=forwarded)
    StandIn.root_url = started.root_url
    return started


def test_the_official_secrets_client_is_answered_by_the_service_behind_the_root_url(host):
    credentials = {"clientId": ROOT_CLIENT_ID, "accessToken": ROOT_ACCESS_TOKEN}
    secrets = taskcluster.Secrets({"rootUrl": host.root_url, "credentials": dict(credentials), "maxRetries": 0})
    assert secrets.get("project/a")["secret"] == {"who": ROOT_CLIENT_ID, "status": "auth-success"}
    anonymous = taskcluster.Secrets({"rootUrl": host.root_url, "maxRetries": 0})
    assert anonymous.get("project/a")["secret"] == {"who": None, "status": "no-auth"}
    wrong = taskcluster.Secrets(
        {"rootUrl": host.root_url, "credentials": {**credentials, "accessToken": "x" * 44}, "maxRetries": 0}
    )
    assert wrong.get("project/a")["secret"]["status"] == "auth-failed"
    request = StandIn.seen[-1]["headers"]
    assert request["host"] == httpx.URL(host.root_url).netloc.decode()  # the Host the caller signed
    assert request["x-forwarded-port"] == str(httpx.URL(host.root_url).port) and request["x-forwarded-proto"] == "http"


def test_bodies_and_answers_pass_unchanged_both_ways(host):
    answer = httpx.put(
        f"{host.root_url}/api/echo/v1/upload?x=1&y=%2F",
        content=BIG,
        headers={"content-type": "application/octet-stream"},
    )
    assert answer.status_code == 201 and answer.headers["x-stand-in"] == "yes"
    assert answer.json() == {"sha256": hashlib.sha256(BIG).hexdigest(), "size": len(BIG)}
    assert StandIn.seen[-1]["path"] == "/api/echo/v1/upload?x=1&y=%2F"
    raw = httpx.get(f"{host.root_url}/api/echo/v1/big", headers={"accept-encoding": "gzip"})
    assert raw.status_code == 207 and raw.headers["content-encoding"] == "gzip"
    assert raw.content == BIG  # httpx decodes what the service encoded: it came as the service sent it
    assert httpx.get(f"{host.root_url}/references/echo/v1/api.json").status_code == 201  # its references too


def test_a_service_that_does_not_answer_is_a_503_and_one_not_named_is_not_forwarded(host):
    hooks = taskcluster.Hooks({"rootUrl": host.root_url, "maxRetries": 0})
    body = expect_error(503, "ServiceUnavailable", hooks.listHookGroups)
    assert "`hooks` service of this rootUrl" in body["message"]
    notify = taskcluster.Notify({"rootUrl": host.root_url, "maxRetries": 0})
    expect_error(404, "ResourceNotFound", notify.listDenylist)
    assert taskcluster.Queue({"rootUrl": host.root_url, "maxRetries": 0}).ping()["alive"]  # the queue's own
    assert str(host.env.get("QUEUE_FORWARD_SERVICES", "")).split("hooks=")[1] not in body["message"]  # no address


@pytest.fixture(scope="module")
def trap() -> Iterator[list[str]]:
    """A server no forwarded request may reach: what reaches it is recorded."""
    reached: list[str] = []

    class Trap(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _handle(self) -> None:
            reached.append(f"{self.command} {self.path}")
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        do_GET = do_POST = _handle

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Trap)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    reached.append(str(server.server_address[1]))  # its port first
    yield reached
    server.shutdown()
    server.server_close()


def raw_request(root_url: str, target: str, method: str = "GET") -> tuple[int, bytes]:
    """A request whose target is sent byte for byte (no client library normalizes it): the status and body."""
    address = httpx.URL(root_url)
    with socket.create_connection((address.host, address.port), timeout=10) as sock:
        sock.sendall(
            f"{method} {target} HTTP/1.1\r\nHost: {address.netloc.decode()}\r\nConnection: close\r\n\r\n".encode()
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize(
    "target",
    [
        "%2Fapi%2Fsecrets%2F@127.0.0.1:{trap}/x",  # round four's open proxy: matched decoded, sent raw
        "%2Fapi/secrets/@127.0.0.1:{trap}/x",  # was an unhandled 500
        "http://127.0.0.1:{trap}/api/secrets/v1/x",
        "//127.0.0.1:{trap}/api/secrets/v1/x",
        "/api/secrets/v1/../../x",
        "/api/secrets/v1/%2e%2E/x",
        "/api/secrets/v1/secret/%2F..%2F..%2Fx",
    ],
)
def test_a_target_that_could_leave_the_service_is_refused_and_sent_nowhere(host, trap, target):
    port = trap[0]
    seen = len(StandIn.seen)
    status, body = raw_request(host.root_url, target.format(trap=port))
    assert (status, json.loads(body)["code"]) in ((400, "InputError"), (404, "ResourceNotFound")), body
    assert trap[1:] == [] and len(StandIn.seen) == seen  # neither the trap nor the service was asked
    assert raw_request(host.root_url, "/api/secrets/v1/secret/project%2Fa")[0] == 200  # a name with `%2F` is data


class SlowService:
    """A service behind the rootUrl that answers slowly, on raw sockets: `/api/slow/v1/trickle/<ms>` sends its head
    and then a byte every <ms> milliseconds until its connection is closed; every connection's open and close
    times are recorded, so a test sees when the forwarder let go of it."""

    def __init__(self) -> None:
        import socketserver

        self.connections: list[dict[str, float | None]] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                record: dict[str, float | None] = {"opened": time.monotonic(), "closed": None}
                outer.connections.append(record)
                try:
                    head = b""
                    while b"\r\n\r\n" not in head:
                        chunk = self.request.recv(4096)
                        if not chunk:
                            return
                        head += chunk
                    path = head.split(b" ")[1].decode()
                    interval = int(path.rsplit("/", 1)[1]) / 1000 if "/trickle/" in path else 3600
                    self.request.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    while True:
                        time.sleep(interval)
                        self.request.sendall(b"1\r\nx\r\n")
                except OSError:
                    pass
                finally:
                    record["closed"] = time.monotonic()

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def open(self) -> int:
        return sum(1 for c in self.connections if c["closed"] is None)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


DEADLINE, PER_CALLER, POOL = 2, 3, 4


@pytest.fixture(scope="module")
def slow() -> Iterator[SlowService]:
    service = SlowService()
    yield service
    service.close()


@pytest.fixture(scope="module")
def bounded_host(host_factory, slow, stand_in):
    """Forwarding with small bounds: a 2-second deadline, 3 requests an address, 4 connections a service."""
    return host_factory(
        forward_services=f"slow=http://127.0.0.1:{slow.port} echo=http://127.0.0.1:{stand_in}",
        forward_timeout=DEADLINE,
        forward_per_caller=PER_CALLER,
        forward_connections=POOL,
    )


def held(root_url: str, path: str, source: str = "127.0.0.1") -> socket.socket:
    """A forwarded GET from `source`, left open after its answer's head was read (its status line returned)."""
    address = httpx.URL(root_url)
    sock = socket.create_connection((address.host, address.port), timeout=10, source_address=(source, 0))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {address.netloc.decode()}\r\n\r\n".encode())
    return sock


def status_of(sock: socket.socket) -> int:
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    return int(head.split()[1])


def test_one_address_gets_its_share_of_forwarded_requests_and_no_more(bounded_host, slow):
    mine = [held(bounded_host.root_url, "/api/slow/v1/trickle/100") for _ in range(PER_CALLER)]
    try:
        assert [status_of(s) for s in mine] == [200] * PER_CALLER
        status, body = raw_request(bounded_host.root_url, "/api/slow/v1/trickle/100")
        assert status == 503 and json.loads(body)["code"] == "ServiceUnavailable"
        assert "under way already" in json.loads(body)["message"]
        other = held(bounded_host.root_url, "/api/slow/v1/trickle/100", source="127.0.0.2")
        assert status_of(other) == 200  # another address is not held back
        other.close()
    finally:
        for sock in mine:
            sock.close()


def test_a_service_that_holds_its_connections_does_not_hold_another_services(bounded_host, slow):
    sources = [f"127.0.0.{i}" for i in range(10, 10 + POOL)]
    hogs = [held(bounded_host.root_url, "/api/slow/v1/trickle/500", source=s) for s in sources]
    try:
        assert [status_of(s) for s in hogs] == [200] * POOL  # the slow service's pool is full
        answer = httpx.put(f"{bounded_host.root_url}/api/echo/v1/upload", content=b"abc", timeout=10)
        assert answer.status_code == 201 and answer.json()["size"] == 3
    finally:
        for sock in hogs:
            sock.close()


def test_an_exchange_ends_at_its_deadline_and_when_its_caller_leaves(bounded_host, slow):
    sock = held(bounded_host.root_url, "/api/slow/v1/trickle/100")
    began = time.monotonic()
    assert status_of(sock) == 200
    sock.settimeout(DEADLINE + 10)
    while sock.recv(65536):  # the answer trickles, then is cut at the deadline
        pass
    assert time.monotonic() - began < DEADLINE + 3
    sock.close()
    wait_for(lambda: slow.open() == 0, timeout=5)  # and the service's connection with it
    # A caller that leaves: the service's connection is closed with it, long before the deadline.
    leaving = held(bounded_host.root_url, "/api/slow/v1/trickle/50")
    assert status_of(leaving) == 200
    wait_for(lambda: slow.open() == 1, timeout=5)
    leaving.close()
    closed_at = time.monotonic()
    wait_for(lambda: slow.open() == 0, timeout=5)
    assert time.monotonic() - closed_at < DEADLINE


def test_the_request_is_framed_as_the_server_read_it(bounded_host, stand_in):
    # Content-Length and Transfer-Encoding both: the body is the chunked one; the length is not passed on.
    address = httpx.URL(bounded_host.root_url)
    with socket.create_connection((address.host, address.port), timeout=10) as sock:
        sock.sendall(
            b"PUT /api/echo/v1/framing HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400") or json.loads(answer.partition(b"\r\n\r\n")[2])["size"] == 5
    # Expect: 100-continue is answered here, not passed on for the service to wait on.
    started = time.monotonic()
    with socket.create_connection((address.host, address.port), timeout=10) as sock:
        sock.sendall(
            b"PUT /api/echo/v1/expect HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n"
            b"Connection: close\r\n\r\n"
        )
        assert sock.recv(64).startswith(b"HTTP/1.1 100")
        sock.sendall(b"abc")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert b" 201 " in answer.split(b"\r\n")[0] and time.monotonic() - started < 5
    assert "expect" not in {k.lower() for k in StandIn.seen[-1]["headers"]}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(interval_ms=st.integers(min_value=20, max_value=900))
def test_no_forwarded_exchange_outlives_its_deadline_whatever_the_pace(bounded_host, slow, interval_ms):
    sock = held(bounded_host.root_url, f"/api/slow/v1/trickle/{interval_ms}")
    began = time.monotonic()
    try:
        assert status_of(sock) == 200
        sock.settimeout(DEADLINE + 10)
        while sock.recv(65536):
            pass
        assert time.monotonic() - began < DEADLINE + 3
    finally:
        sock.close()
    wait_for(lambda: slow.open() == 0, timeout=5)
