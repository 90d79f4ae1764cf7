"""One rootUrl: requests for a service this app does not host go to where it runs (QUEUE_FORWARD_SERVICES), and
come back unchanged. The stand-in service here does what Taskcluster's services do with each request: it asks
the rootUrl's authenticateHawk about the caller (with the Host and forwarded port it was given), so the official
client's `Secrets` class, signing for the rootUrl, is answered by it through the queue."""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import taskcluster

from local_host.azurite import free_port
from tests.conftest import ROOT_ACCESS_TOKEN, ROOT_CLIENT_ID, expect_error

BIG = bytes((i * 7919) % 251 for i in range(3 * 1024 * 1024 + 5))


class StandIn(BaseHTTPRequestHandler):
    """A service behind the rootUrl: `/api/secrets/v1/...` asks authenticateHawk as Taskcluster's API library does
    and answers who called; `/api/echo/v1/...` answers what it received."""

    root_url = ""
    seen: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
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
    import socket

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
