"""The holes of a probe as an attacker would make it (issue 41), each reproduced against a local host on Azurite
through the official clients or plain HTTP: memory that anonymous requests grew, expansions that exploded, names
that took another's row, values storage or headers could not hold, answers that repeated a Host header, and the
HTTP server's missing bounds. Each is refused with a 4xx in Taskcluster's error format, or bounded, and changes
nothing (docs/security.md)."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import json
import socket
import subprocess
import sys
import time
import uuid

import httpx
import pytest
import taskcluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from taskcluster.exceptions import TaskclusterRestFailure

from shared import timeutil
from tests.acceptance.conftest import QUICK_CLAIMS
from tests.acceptance.helpers import claimed, in_days
from tests.conftest import PROJECT, ROOT_ACCESS_TOKEN, base_env, expect_error, slugid, wait_for


@pytest.fixture(scope="module")
def host(host_factory):
    return host_factory(**QUICK_CLAIMS, client_cache_seconds=60)


@pytest.fixture
def queue(host):
    return host.client()


def auth(host, credentials=None):
    return taskcluster.Auth(
        {
            "rootUrl": host.root_url,
            "maxRetries": 0,
            "credentials": credentials or {"clientId": "root", "accessToken": ROOT_ACCESS_TOKEN},
        }
    )


def objects(host):
    return taskcluster.Object(
        {
            "rootUrl": host.root_url,
            "maxRetries": 0,
            "credentials": {"clientId": "root", "accessToken": ROOT_ACCESS_TOKEN},
        }
    )


def bewit(client_id: str) -> str:
    """A bewit naming `client_id`, valid for an hour, with a MAC that cannot match."""
    raw = f"{client_id}\\{int(time.time()) + 3600}\\{'A' * 43}=\\"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


# --- 1, 2: anonymous requests do not grow memory ------------------------------------------------------------------


def test_anonymous_floods_of_made_up_clients_and_inspector_paths_keep_memory_flat(host):
    with httpx.Client(base_url=host.root_url, timeout=30) as http:

        def flood(count: int, offset: int) -> None:
            for i in range(offset, offset + count):
                made_up = f"{i:08x}" + "A" * 40_000  # a clientId no client has, nor can have (over 256)
                answer = http.get("/api/queue/v1/ping", params={"bewit": bewit(made_up)})
                assert answer.status_code == 401 and answer.json()["code"] == "AuthenticationFailed"
                assert len(answer.text) < 5_000  # the id is not repeated whole
                valid_unknown = f"nobody/{i}"
                assert http.get("/api/queue/v1/ping", params={"bewit": bewit(valid_unknown)}).status_code == 401
                inspected = http.get(f"/inspector/x/{i}" + "B" * 20_000)
                assert inspected.status_code == 404 and inspected.json()["code"] == "ResourceNotFound"

        # Warm: the first flood takes the allocator's high water up (glibc keeps the heap that 40-60 KB strings
        # came from), and fills the bounded map of clientIds not found.
        flood(600, 0)
        before = host.rss_mb()
        flood(600, 600)
        grown = host.rss_mb() - before
    # Unbounded (ee5c73d), every 600 of each kept ~40 MB more; bounded, nothing is kept per made-up name.
    assert grown < 12, f"RSS grew {grown:.1f} MB"


# --- 3, 4: scopes and roles bounded ---------------------------------------------------------------------------


def test_sets_of_scopes_a_caller_brings_are_bounded_and_refused_with_400(host):
    root = auth(host)
    body = expect_error(400, "InputError", root.expandScopes, {"scopes": [f"queue:x:{i}" for i in range(5001)]})
    assert "at most 5000" in body["message"]
    expect_error(
        400,
        "InputError",
        root.createClient,
        "hostile/doubled",
        {
            "expires": timeutil.iso(timeutil.now() + dt.timedelta(days=1)),
            "description": "",
            "scopes": ["queue:get-task:**"],
        },
    )
    expect_error(
        400, "InputValidationError", root.createRole, "hostile-long", {"description": "", "scopes": ["x" * 4097]}
    )

    # authorizedScopes: a Hawk header and a signed URL hold 4,096 characters at most, as Taskcluster's hawk
    # library takes them: within that, `...*` scopes are checked in one sort; past it, refused before any work.
    def narrowed(scopes: list[str]) -> taskcluster.Auth:
        credentials = {"clientId": "root", "accessToken": ROOT_ACCESS_TOKEN}
        options = {"rootUrl": host.root_url, "maxRetries": 0, "authorizedScopes": scopes, "credentials": credentials}
        return taskcluster.Auth(options)

    some = [f"project:bench:{i}z*" for i in range(100)]  # none within an anonymous scope
    answer = httpx.get(narrowed(some).buildSignedUrl("currentScopes"))
    assert answer.status_code == 200 and set(some) <= set(answer.json()["scopes"])
    refused = httpx.get(narrowed([f"queue:get-task:{i}z*" for i in range(1200)]).buildSignedUrl("currentScopes"))
    assert refused.status_code == 401 and refused.json()["message"].startswith(
        "Bad Request: Resource path exceeds max length"
    )


def test_a_large_set_of_scopes_is_stored_not_a_500(host):
    root = auth(host)
    scopes = [f"queue:get-task:large-role-{i}:" + "s" * 30 for i in range(2000)]  # 100 KB of JSON
    created = root.createRole("hostile-large", {"description": "many scopes", "scopes": scopes})
    assert len(created["scopes"]) == 2000
    assert sorted(root.role("hostile-large")["scopes"]) == sorted(scopes)


def test_a_delegated_role_admin_cannot_make_expansion_explode(host):
    root = auth(host)
    root.createClient(
        "hostile/admin",
        {
            "expires": timeutil.iso(timeutil.now() + dt.timedelta(days=1)),
            "description": "delegated",
            "scopes": ["auth:create-role:project:me:*", "assume:project:me:*"],
        },
    )
    token = root.resetAccessToken("hostile/admin")["accessToken"]
    admin = auth(host, {"clientId": "hostile/admin", "accessToken": token})
    admin.createRole("project:me:L16-*", {"description": "", "scopes": ["assume:project:me:leaf-<..>"]})
    refused = None
    for level in range(15, -1, -1):
        try:
            admin.createRole(
                f"project:me:L{level:02d}-*",
                {
                    "description": "",
                    "scopes": [
                        f"assume:project:me:L{level + 1:02d}-<..>a",
                        f"assume:project:me:L{level + 1:02d}-<..>b",
                    ],
                },
            )
        except TaskclusterRestFailure as exc:
            refused = exc
            break
    assert refused is not None and refused.status_code == 400
    assert "could expand to more than 50000 scopes" in refused.body["message"]
    # What was stored expands within the bound, and a role from the top of what was written answers at once.
    top = f"project:me:L{level + 1:02d}-*"
    expanded = root.expandScopes({"scopes": [f"assume:{top[:-1]}z"]})["scopes"]
    assert 1 < len(expanded) <= 50_000


# --- 5: names cannot take another's row ---------------------------------------------------------------------------


def test_an_object_name_cannot_take_the_row_of_a_long_name(host):
    service = objects(host)
    long_name = "project/" + "n" * 600
    squatter = "~" + hashlib.sha256(long_name.encode()).hexdigest()
    expires = timeutil.iso(timeutil.now() + dt.timedelta(days=1))

    def upload(name: str, data: bytes) -> None:
        upload_id = slugid()
        service.createUpload(
            name,
            {
                "projectId": "p",
                "uploadId": upload_id,
                "expires": expires,
                "proposedUploadMethods": {
                    "dataInline": {
                        "contentType": "application/octet-stream",
                        "objectData": base64.b64encode(data).decode(),
                    }
                },
            },
        )
        service.finishUpload(name, {"projectId": "p", "uploadId": upload_id})

    upload(squatter, b"the squatter's bytes")
    upload(long_name, b"the long name's bytes")  # 409 when the squatter held its row
    for name, data in [(squatter, b"the squatter's bytes"), (long_name, b"the long name's bytes")]:
        url = service.startDownload(name, {"acceptDownloadMethods": {"getUrl": True}})["url"]
        assert httpx.get(url).content == data


# --- values storage or a header cannot hold -------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain\r\nX-Evil: 1",
        "text/plain; charset=\u00e9",
        "plain",
        "",
        "text/plain;x=y, text/html",
        "text/plain; q",
    ],
)
def test_content_types_that_are_not_media_types_are_refused(host, queue, content_type):
    task_id, worker = claimed(queue)
    request = {"storageType": "s3", "expires": in_days(), "contentType": content_type}
    if content_type == "":
        assert worker.createArtifact(task_id, "0", "public/default", request)["contentType"] == "application/binary"
        return
    expect_error(400, "InputValidationError", worker.createArtifact, task_id, "0", "public/x", request)
    assert queue.listArtifacts(task_id, "0")["artifacts"] == []
    upload = {
        "projectId": "p",
        "uploadId": slugid(),
        "expires": in_days(),
        "proposedUploadMethods": {"putUrl": {"contentType": content_type, "contentLength": 1}},
    }
    expect_error(400, "InputValidationError", objects(host).createUpload, f"hostile/{slugid()}", upload)


def test_objects_take_only_taskclusters_hashes_and_a_future_expiry(host):
    service = objects(host)
    name = f"hostile/{slugid()}"
    base = {"projectId": "p", "uploadId": slugid(), "expires": in_days(), "proposedUploadMethods": {}}
    expect_error(400, "InputValidationError", service.createUpload, name, {**base, "hashes": {"md5": "0" * 32}})
    past = timeutil.iso(timeutil.now() - dt.timedelta(minutes=1))
    body = expect_error(400, "InputError", service.createUpload, name, {**base, "expires": past})
    assert "past" in body["message"]
    expect_error(404, "ResourceNotFound", service.object, name)


# --- the rootUrl from settings only ---------------------------------------------------------------------------


def test_a_host_header_never_reaches_the_references(host):
    for path in ["/references/manifest.json", "/references/queue/v1/api.json", "/schemas/queue/v1/task.json"]:
        answer = httpx.get(
            f"{host.root_url}{path}", headers={"Host": "evil.example:666", "X-Forwarded-Proto": "gopher"}
        )
        assert answer.status_code == 200
        assert "evil.example" not in answer.text and "gopher" not in answer.text
        assert host.root_url in answer.text


# --- the HTTP server's bounds --------------------------------------------------------------------------------


def test_a_request_head_over_64_kib_is_refused_even_when_it_arrives_whole(host):
    for size in (70_000, 100_000, 130_000):
        answer = httpx.get(f"{host.root_url}/api/queue/v1/ping", headers={"X-Big": "x" * size})
        assert answer.status_code == 400 and answer.json()["code"] == "InvalidRequestArguments", size


def test_an_inspector_name_over_255_characters_is_a_json_404(host):
    answer = httpx.get(f"{host.root_url}/inspector/" + "n" * 300 + ".js")
    assert answer.status_code == 404 and answer.json()["code"] == "ResourceNotFound"


@pytest.fixture(scope="module")
def tight_host(host_factory):
    """20 connections, 10 a peer; a head within 1 s, a body's byte every second and, after 2 s, 1,000 bytes a
    second on average; claimWork waits 5 s (a connection being served)."""
    return host_factory(
        http_max_connections=20,
        http_header_timeout=1,
        http_body_timeout=1,
        http_body_grace=2,
        http_min_body_rate=1000,
        claim_work_wait=5,
        claim_work_poll_interval=0.5,
        list_page_bytes=64 * 1024 * 1024,  # a page of big_group whole: more than the kernels hold
    )


def open_socket(host, peer: str = "127.0.0.1") -> socket.socket:
    """A connection from `peer` (any 127.x.y.z address is this machine's: a peer of its own)."""
    port = int(host.root_url.rsplit(":", 1)[1])
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(peer, 0))


def trickling(host, peer: str) -> socket.socket:
    """A connection that sent a whole head and a first piece of a body it will send a piece at a time."""
    sock = open_socket(host, peer)
    sock.sendall(
        b"PUT /api/queue/v1/task/" + slugid().encode() + b" HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    )
    return sock


def closed(sock: socket.socket, wait: float) -> bytes | None:
    """What the server sent before closing the connection (this end is closed too), or None if it is still open
    after `wait` s (left open)."""
    sock.settimeout(wait)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        return None
    sock.close()
    return received


def test_a_connection_that_sends_no_whole_head_in_time_is_closed(tight_host):
    slow = open_socket(tight_host)
    slow.sendall(b"GET /api/queue/v1/ping HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    for _ in range(3):
        time.sleep(0.3)
        slow.sendall(b"X-Slow: 1\r\n")  # a byte now and then does not extend the time
    assert closed(slow, 3) == b""
    silent = open_socket(tight_host)
    assert closed(silent, 3) == b""
    # A kept-alive connection gets the same time for its next head.
    kept = open_socket(tight_host)
    kept.sendall(b"GET /api/queue/v1/ping HTTP/1.1\r\nHost: x\r\n\r\n")
    first = b""
    while b'"alive"' not in first:
        first += kept.recv(65536)
    assert first.startswith(b"HTTP/1.1 200")
    kept.sendall(b"GET /api/queue/v1/ping HTTP/1.1\r\n")
    assert closed(kept, 3) == b""


def test_a_body_that_stops_coming_or_crawls_is_closed_and_one_that_keeps_coming_is_not(tight_host):
    stalled = trickling(tight_host, "127.0.0.5")
    assert closed(stalled, 3) == b""  # nothing for the body timeout (1 s): closed, nothing answered
    crawling, steady = trickling(tight_host, "127.0.0.5"), trickling(tight_host, "127.0.0.5")
    started, crawled = time.monotonic(), None
    for _ in range(12):  # 3.6 s in all, never 1 s without a byte
        time.sleep(0.3)
        steady.sendall(b" " * 2000)  # about 6.6 KB/s
        try:
            crawling.sendall(b" ")  # a byte every 0.3 s: under the body timeout, far under 1,000 B/s
        except OSError:
            crawled = crawled or time.monotonic() - started
    assert closed(crawling, 0.1) == b"" and (crawled is None or crawled > 2)  # closed once the grace (2 s) ended
    assert closed(steady, 0.1) is None  # still open
    steady.close()


def test_a_request_pipelined_behind_another_gets_the_same_bounds(tight_host):
    """A complete GET and the head of a POST in one packet, then nothing: the POST starts inside the server's
    buffer, reading its body, and once held its connection for ever."""
    sock = open_socket(tight_host, "127.0.0.6")
    sock.sendall(
        b"GET /api/queue/v1/ping HTTP/1.1\r\nHost: x\r\n\r\n"
        b"POST /api/queue/v1/task/x/cancel HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    )
    answered = closed(sock, 4)
    assert answered is not None and answered.startswith(b"HTTP/1.1 200")  # answered, then closed: not held
    dribbler = open_socket(tight_host, "127.0.0.6")
    dribbler.sendall(
        b"GET /api/queue/v1/ping HTTP/1.1\r\nHost: x\r\n\r\n"
        b"PUT /api/queue/v1/task/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    for _ in range(15):  # a one-byte chunk every 0.3 s
        time.sleep(0.3)
        try:
            dribbler.sendall(b"1\r\n \r\n")
        except OSError:
            break
    assert closed(dribbler, 1) is not None  # closed by the rate floor, not left open


@pytest.fixture(scope="module")
def patient_host(host_factory):
    """20 connections, 10 a peer, and 5 s for a head or a body's next byte: stalled connections stay open long
    enough (more than EVICTABLE_AFTER) to be the ones that make room."""
    return host_factory(http_max_connections=20, http_header_timeout=5, http_body_timeout=5)


def test_slow_connections_make_room_for_others_of_their_peer_and_of_the_host(patient_host):
    """1,000 connections trickling a body, or 500 pipelined heads, once held every slot of the host from one
    address (on the local host every client is 127.0.0.1). Now a connection over its address's share, or over the
    host's limit, closes the one that has waited longest for its client: slow clients go first."""
    tight_host = patient_host
    held = [trickling(tight_host, "127.0.0.2") for _ in range(10)]  # the share of 127.0.0.2
    try:
        time.sleep(1.2)  # waiting for their bodies for a second: they may make room
        same_peer = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"))
        assert same_peer.get(f"{tight_host.root_url}/api/queue/v1/ping").status_code == 200
        same_peer.close()
        assert sum(closed(sock, 0.05) is not None for sock in held) >= 1  # the stalest made room
        held += [trickling(tight_host, "127.0.0.3") for _ in range(10)]
        time.sleep(1.2)
        assert httpx.get(f"{tight_host.root_url}/api/queue/v1/ping").status_code == 200  # past the host's 20
    finally:
        for sock in held:
            sock.close()


class Drip:
    """Sockets that each send one byte every `interval` seconds from a thread of their own, reopened (and dripping
    again) when the server closes one, as round four's probe did: a body's bytes, or a head's lines."""

    def __init__(self, host, peer: str, count: int, interval: float, kind: str) -> None:
        import threading

        self.host, self.peer, self.interval, self.kind = host, peer, interval, kind
        self.stop = threading.Event()
        self.sockets = [self._open() for _ in range(count)]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _open(self) -> socket.socket:
        if self.kind == "body":
            return trickling(self.host, self.peer)
        sock = open_socket(self.host, self.peer)
        sock.sendall(b"GET /api/queue/v1/ping HTTP/1.1\r\nHost: x\r\n")  # a head never finished
        return sock

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            for i, sock in enumerate(self.sockets):
                try:
                    sock.sendall(b"a" if self.kind == "body" else b"X: 1\r\n")
                except OSError:
                    sock.close()
                    with contextlib.suppress(OSError):
                        self.sockets[i] = self._open()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for sock in self.sockets:
            sock.close()


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(interval=st.floats(min_value=0.1, max_value=1.5), kind=st.sampled_from(["body", "head"]))
def test_a_client_of_the_peer_is_served_whatever_the_pace_of_its_slow_connections(patient_host, interval, kind):
    """Round four: eviction picked connections whose last byte was a second old, so a byte every 0.8 s was never
    evicted (500 such sockets answered 69 pings of 70 with 503). Whatever the pace, slow connections filling an
    address's share, reopened when closed, make room for a client of the same address: slowness is judged by
    how long a request has been coming and at what rate."""
    drip = Drip(patient_host, "127.0.0.4", 10, interval, kind)  # the share of 127.0.0.4
    try:
        time.sleep(1.3)  # their requests have been coming for more than a second
        client = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.4"), timeout=10)
        answers = [client.get(f"{patient_host.root_url}/api/queue/v1/ping").status_code for _ in range(5)]
        client.close()
        assert answers == [200] * 5, (interval, kind, answers)
    finally:
        drip.close()


def test_only_connections_being_served_make_a_peer_wait(tight_host):
    """When every connection of a peer is being answered (claimWork long polls), there is no slow client to
    close: one more is refused 503, with Retry-After."""
    import mohawk

    tq = f"hostile/wait-{uuid.uuid4().hex[:8]}"
    url = f"{tight_host.root_url}/api/queue/v1/claim-work/{tq.replace('/', '%2F')}"
    polls = []
    for number in range(10):  # the share of 127.0.0.7, each waiting for work (5 s)
        body = json.dumps({"workerGroup": "g", "workerId": f"w{number}", "tasks": 1}).encode()
        signed = mohawk.Sender(
            {"id": "root", "key": ROOT_ACCESS_TOKEN, "algorithm": "sha256"},
            url,
            "POST",
            content=body,
            content_type="application/json",
        )
        sock = open_socket(tight_host, "127.0.0.7")
        head = (
            f"POST {httpx.URL(url).raw_path.decode()} HTTP/1.1\r\nHost: {httpx.URL(url).netloc.decode()}\r\n"
            f"Authorization: {signed.request_header}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        polls.append(sock)
    try:
        # Every poll read and being answered (each records its worker first): on a loaded machine the host may
        # read them late, and a poll not read yet would be a connection waiting for its client.
        provisioner, worker_type = tq.split("/")
        queue = tight_host.client()
        wait_for(lambda: len(queue.listWorkers(provisioner, worker_type)["workers"]) == 10, timeout=4)
        refused = closed(open_socket(tight_host, "127.0.0.7"), 3)
        assert refused is not None and refused.startswith(b"HTTP/1.1 503"), refused
        answer = json.loads(refused.split(b"\r\n\r\n", 1)[1])
        assert answer["code"] == "ServiceUnavailable" and "10 connections from your address" in answer["message"]
        assert b"retry-after:" in refused.lower()
        waited = closed(polls[0], 8)
        assert waited is not None and waited.startswith(b"HTTP/1.1 200")  # each long poll was answered
    finally:
        for sock in polls:
            sock.close()


# --- settings -----------------------------------------------------------------------------------------------


def test_a_host_without_its_token_secret_refuses_to_start_with_one_clear_line(azurite):
    env = {k: v for k, v in base_env(azurite.connection_string).items() if k != "QUEUE_TOKEN_SECRET"}
    env["QUEUE_PORT"] = "1"  # never bound: it must not get that far
    done = subprocess.run(
        [sys.executable, "-m", "local_host", "--settings", "/nonexistent", "serve"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "QUEUE_TOKEN_SECRET is required" in lines[0], done.stderr


def test_a_secret_still_holding_its_key_vault_reference_stops_the_host_with_one_clear_line(azurite):
    """What App Service hands an app whose reference it could not resolve: the reference, as the value."""
    env = base_env(azurite.connection_string)
    env["QUEUE_ROOT_ACCESS_TOKEN"] = "@Microsoft.KeyVault(VaultName=kv-queue-abc;SecretName=root-access-token)"
    env["QUEUE_PORT"] = "1"  # never bound: it must not get that far
    done = subprocess.run(
        [sys.executable, "-m", "local_host", "--settings", "/nonexistent", "serve"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "QUEUE_ROOT_ACCESS_TOKEN holds an unresolved Key Vault reference" in lines[0], (
        done.stderr
    )


def test_anonymous_callers_cannot_list_every_push(host, queue):
    """listRecentTaskGroups lists the newest groups of every project (their tasks then readable anonymously):
    it takes its own scope, which the default anonymous scopes do not hold."""
    from taskcluster.client import createApiClient

    reference = httpx.get(f"{host.root_url}/references/queue/v1/api.json").json()
    served = createApiClient("Served", {"reference": reference})
    body = expect_error(
        403, "InsufficientScopes", served({"rootUrl": host.root_url, "maxRetries": 0}).listRecentTaskGroups
    )
    assert "queue:list-recent-task-groups" in body["message"]
    root = served({"rootUrl": host.root_url, "maxRetries": 0, "credentials": queue.options["credentials"]})
    assert "taskGroups" in root.listRecentTaskGroups()


def big_group(host, tasks: int = 50, payload_bytes: int = 380_000) -> str:
    """A task group whose listTaskGroup page is about `tasks` x `payload_bytes` of JSON (19 MB, as round four's),
    more than the kernels of both ends hold for a connection (about 10 MB on loopback)."""
    from tests.conftest import task_definition

    queue = host.client(credentials={"clientId": "root", "accessToken": ROOT_ACCESS_TOKEN})
    group = slugid()
    for _ in range(tasks):
        queue.createTask(slugid(), task_definition(taskGroupId=group, payload={"blob": "x" * payload_bytes}))
    return group


def asking(host, path: str, peer: str) -> socket.socket:
    """A client that asks for `path` and reads nothing."""
    sock = open_socket(host, peer)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def received_until_cut(sock: socket.socket, wait: float) -> int | None:
    """Bytes read until the server ended the connection (reset or end; this end is closed too); None if it was
    still open after `wait` seconds without a byte."""
    sock.settimeout(wait)
    got = 0
    try:
        while chunk := sock.recv(1024 * 1024):
            got += len(chunk)
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    sock.close()
    return got


def test_an_answer_nobody_reads_is_dropped_and_its_memory_with_it(tight_host):
    """Round four: 30 clients that never read a 19 MB listTaskGroup page took the host from 216 to 851 MB, and
    once an answer was handed over its connection left the counts. An answer's reading has the body's bounds:
    nothing read for a second here (QUEUE_HTTP_BODY_TIMEOUT), and the connection is aborted, its answer dropped."""
    group = big_group(tight_host)
    path = f"/api/queue/v1/task-group/{group}/list?limit=1000"
    whole = len(httpx.get(f"{tight_host.root_url}{path}", timeout=60).content)
    assert whole > 18_000_000  # a client that reads gets it all
    sockets = [asking(tight_host, path, "127.0.0.9") for _ in range(8)]
    try:
        time.sleep(10)  # the answers built and written, and a second of nothing read, each
        # Each was dropped: read now, a connection gives what its kernels held, then ends. The code before closed it
        # gracefully, its answer held in memory until read, for ever: read now, it gave the whole answer.
        cut = [received_until_cut(sock, 5) for sock in sockets]
        assert all(c is not None and c < whole for c in cut), cut
    finally:
        for sock in sockets:
            sock.close()


def test_a_listing_page_of_heavy_definitions_stops_at_its_bytes(host, queue):
    """Round four: a 1,000-task page of heavy definitions was built whole (400 MB for one anonymous request). A
    page ends once what it holds weighs QUEUE_LIST_PAGE_BYTES (8 MiB), but for its last batch, and its
    continuation goes on from there: every task comes once, through the official client's paging."""
    group = big_group(host, tasks=30, payload_bytes=380_000)
    path = f"/api/queue/v1/task-group/{group}/list?limit=1000"
    first = httpx.get(f"{host.root_url}{path}", timeout=60)
    page = first.json()
    assert len(first.content) < 8 * 1024 * 1024 + 32 * 420_000 and len(page["tasks"]) < 30
    assert page["continuationToken"].startswith("cut:")
    seen: list[str] = []
    queue.listTaskGroup(
        group, paginationHandler=lambda answer: seen.extend(t["status"]["taskId"] for t in answer["tasks"])
    )
    assert len(seen) == 30 and len(set(seen)) == 30
    # A token this queue did not give is refused, as any other.
    forged = page["continuationToken"][:-4] + "AAAA"
    answer = httpx.get(f"{host.root_url}{path}&continuationToken={forged}", timeout=60)
    assert answer.status_code == 400 and answer.json()["code"] == "InvalidRequestArguments"
