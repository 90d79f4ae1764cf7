"""What hostile traffic costs a host: the probes of issue 41, measured (docs/security.md has the latest figures).

    .venv/bin/python -m bench.hostile [--requests 600]

Starts its own Azurite (in memory) and local host, then prints:

- flood: the host's RSS before and after `--requests` anonymous GETs with a bewit naming a made-up 40,000-character
  clientId, as many naming made-up valid clientIds, and as many inspector paths of 20 KB (nothing of which should
  be kept);
- stall: the latency of pings sent every 20 ms while signed URLs with 1,200 `authorizedScopes` ending in `*` (past
  4,096 characters: refused at the door), then with 100, are answered one after another (the scope algebra's cost
  shows as the pings' wait);
- roles: a delegated role admin (`auth:create-role:project:me:*`, `assume:project:me:*`) writing the doubling roles
  from the deepest level up: which level is refused, the size of the largest expansion left, and the pings' wait
  while it is expanded;
- pipelined (issue 72, H1): `--sockets` connections from 127.0.0.1 each sending a whole GET and the head of a POST
  that declares a body and never sends it; whether a client of the same address is answered meanwhile, and how
  many of the sockets are still open after 15 s;
- documents (W4): `--requests` GETs of the 0.7 MB OpenAPI document, 50 at a time, and the pings' wait meanwhile;

and the probes of issue 83 (round four; its host forwards `trap`, `slow` and `echo` to stand-in services here):

- open proxy (N1): raw targets that spell another authority (`%2Fapi%2Fsecrets%2F@127.0.0.1:<trap>/x`): the
  answers, and how many requests reached the trap, a server on another port;
- forwarding flood (N2): 100 anonymous requests to a forwarded service that trickles its answers, held open; then
  a request to another forwarded service: its status and how long it took;
- drip (H1): 500 sockets from 127.0.0.5 sending a body byte every 0.8 s, reopened when closed; the answers to 10
  pings from the same address;
- unread (N3): 16 clients asking for a 19 MB listTaskGroup page and reading nothing; the host's RSS before, and 15 s
  after.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import taskcluster
from taskcluster.exceptions import TaskclusterRestFailure

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lifecycle import start_embedded, stop_all


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def bewit(client_id: str) -> str:
    raw = f"{client_id}\\{int(time.time()) + 3600}\\{'A' * 43}=\\"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


class Pinger:
    """Pings every 20 ms from a thread; the latencies seen while it ran."""

    def __init__(self, root_url: str) -> None:
        self.url = f"{root_url}/api/queue/v1/ping"
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=60) as http:
            while not self._stop.wait(0.02):
                started = time.perf_counter()
                http.get(self.url)
                self.latencies.append(time.perf_counter() - started)

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def line(self) -> str:
        ms = sorted(x * 1000 for x in self.latencies) or [0.0]
        return (
            f"pings p50 {statistics.median(ms):.1f} ms, p99 {ms[int(len(ms) * 0.99) - 1]:.1f} ms, "
            f"most {ms[-1]:.1f} ms ({len(ms)} pings)"
        )


def flood(root_url: str, pid: int, count: int) -> None:
    with httpx.Client(base_url=root_url, timeout=60) as http:

        def send(n: int, offset: int) -> None:
            for i in range(offset, offset + n):
                http.get("/api/queue/v1/ping", params={"bewit": bewit(f"{i:08x}" + "A" * 40_000)})
                http.get("/api/queue/v1/ping", params={"bewit": bewit(f"nobody/{i}")})
                http.get(f"/inspector/x/{i}" + "B" * 20_000)

        send(50, 0)
        before = rss_mb(pid)
        started = time.perf_counter()
        send(count, 50)
        elapsed = time.perf_counter() - started
        middle = rss_mb(pid)
        send(count, 50 + count)  # as many again: what is kept grows, what is the allocator's high water does not
        after = rss_mb(pid)
    print(
        f"flood: {3 * count} anonymous requests in {elapsed:.1f} s; host RSS {before:.0f} -> {middle:.0f} MB "
        f"({middle - before:+.1f} MB), then {3 * count} more -> {after:.0f} MB ({after - middle:+.1f} MB)",
        flush=True,
    )


def stall(root_url: str, token: str) -> None:
    """1,200 scopes no longer fit a signed URL (4,096 characters, as Taskcluster's hawk): the refusal's cost, then
    the cost of the most that fit."""
    for count in (1200, 100):
        scopes = [f"queue:get-task:{i}z*" for i in range(count)]
        narrowed = taskcluster.Auth(
            {
                "rootUrl": root_url,
                "maxRetries": 0,
                "authorizedScopes": scopes,
                "credentials": {"clientId": "root", "accessToken": token},
            }
        )
        times, statuses = [], set()
        with Pinger(root_url) as pinger, httpx.Client(timeout=60) as http:
            for _ in range(20):
                started = time.perf_counter()
                answer = http.get(narrowed.buildSignedUrl("currentScopes"))
                times.append(time.perf_counter() - started)
                statuses.add(answer.status_code)
        print(
            f"stall: 20 signed URLs of {count:,} authorizedScopes answered {sorted(statuses)} in "
            f"{statistics.median(times) * 1000:.0f} ms each (p50); {pinger.line()}",
            flush=True,
        )


def roles(root_url: str, token: str) -> None:
    root = taskcluster.Auth(
        {"rootUrl": root_url, "maxRetries": 0, "credentials": {"clientId": "root", "accessToken": token}}
    )
    expires = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat()
    root.createClient(
        "bench/admin",
        {
            "expires": expires,
            "description": "delegated role admin",
            "scopes": ["auth:create-role:project:me:*", "assume:project:me:*"],
        },
    )
    admin_token = root.resetAccessToken("bench/admin")["accessToken"]
    admin = taskcluster.Auth(
        {"rootUrl": root_url, "maxRetries": 0, "credentials": {"clientId": "bench/admin", "accessToken": admin_token}}
    )
    admin.createRole("project:me:L16-*", {"description": "", "scopes": ["queue:get-task:<..>"]})
    top, outcome = 16, "every level written"
    started = time.perf_counter()
    for level in range(15, -1, -1):
        try:
            admin.createRole(
                f"project:me:L{level:02d}-*",
                {"description": "", "scopes": [f"assume:project:me:L{level + 1:02d}-<..>{c}" for c in "ab"]},
            )
            top = level
        except TaskclusterRestFailure as exc:
            outcome = f"level {level} refused ({exc.status_code}: {exc.body['message'].splitlines()[0][:160]})"
            break
    written = time.perf_counter() - started
    with Pinger(root_url) as pinger:
        started = time.perf_counter()
        try:
            size: int | str = len(root.expandScopes({"scopes": [f"assume:project:me:L{top:02d}-z"]})["scopes"])
        except TaskclusterRestFailure as exc:
            size = f"refused ({exc.status_code})"
        except Exception as exc:  # the host stalled past the client's timeout
            size = f"failed ({type(exc).__name__})"
        expanded = time.perf_counter() - started
    print(
        f"roles: {outcome}; roles written in {written:.1f} s; `assume:project:me:L{top:02d}-z` expands to {size} "
        f"scopes in {expanded:.1f} s; {pinger.line()}",
        flush=True,
    )


def is_open(sock: socket.socket) -> bool:
    """Whether the server still holds `sock` open: what it answered is read past, up to its end if it closed."""
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
        return False  # the end of the stream: closed by the server
    except BlockingIOError:
        return True
    except OSError:
        return False


def pipelined(root_url: str, count: int) -> None:

    port = int(root_url.rsplit(":", 1)[1])
    head = (
        b"GET /api/queue/v1/ping HTTP/1.1\r\nHost: x\r\n\r\n"
        b"POST /api/queue/v1/task/x/cancel HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    )
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(head)
        socks.append(sock)
    time.sleep(1)
    answered = []
    for _ in range(5):
        try:
            answered.append(httpx.get(f"{root_url}/api/queue/v1/ping", timeout=5).status_code)
        except httpx.HTTPError as exc:
            answered.append(type(exc).__name__)  # type: ignore[arg-type]
    time.sleep(14)
    still_open = 0
    for sock in socks:
        still_open += is_open(sock)
        sock.close()
    print(
        f"pipelined: {count} sockets holding a POST head; pings from 127.0.0.1 meanwhile: {answered}; "
        f"still open after 15 s: {still_open}",
        flush=True,
    )


def documents(root_url: str, requests: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    url = f"{root_url}/references/queue/v1/openapi.json"
    with Pinger(root_url) as pinger, ThreadPoolExecutor(50) as pool:
        started = time.perf_counter()
        sizes = list(pool.map(lambda _: len(httpx.get(url, timeout=60).content), range(requests)))
        took = time.perf_counter() - started
    print(
        f"documents: {requests} GETs of the OpenAPI document ({sizes[0] / 1e6:.2f} MB) in {took:.1f} s; "
        f"{pinger.line()}",
        flush=True,
    )


class Service:
    """A stand-in service on raw sockets: counts the requests it gets; `/trickle/` answers a byte every 0.2 s."""

    def __init__(self) -> None:
        import socketserver

        self.requests = 0
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    head = self.request.recv(65536)
                    outer.requests += 1
                    if b"/trickle/" not in head:
                        self.request.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
                        return
                    self.request.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                    while True:
                        time.sleep(0.2)
                        self.request.sendall(b"1\r\nx\r\n")
                except OSError:
                    pass

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def raw(root_url: str, target: str, source: str = "127.0.0.1") -> str:
    port = int(root_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        answer = sock.recv(200)
    return answer.split(b"\r\n", 1)[0].decode(errors="replace").removeprefix("HTTP/1.1 ")


def open_proxy(root_url: str, trap: Service) -> None:
    targets = [f"%2Fapi%2Fsecrets%2F@127.0.0.1:{trap.port}/x", f"%2Fapi/secrets/@127.0.0.1:{trap.port}/x"]
    answers = [raw(root_url, t) for t in targets] + [raw(root_url, "/api/trap/v1/../../x")]
    print(f"open proxy: answers {answers}; requests that reached the trap: {trap.requests}", flush=True)


def forwarding_flood(root_url: str) -> None:
    port = int(root_url.rsplit(":", 1)[1])
    held = []
    for n in range(100):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(f"127.0.1.{n % 250 + 1}", 0))
        sock.sendall(b"GET /api/slow/v1/trickle/x HTTP/1.1\r\nHost: x\r\n\r\n")
        held.append(sock)
    time.sleep(2)
    started = time.perf_counter()
    try:
        status: Any = httpx.get(f"{root_url}/api/echo/v1/x", timeout=30).status_code
    except httpx.HTTPError as exc:
        status = type(exc).__name__
    took = time.perf_counter() - started
    for sock in held:
        sock.close()
    print(f"forwarding flood: 100 held on a trickling service; another service answered {status} in {took:.2f} s")


def drip(root_url: str, count: int = 500, interval: float = 0.8, kind: str = "body") -> None:
    """`count` sockets from 127.0.0.5 sending a byte of a body (`kind` "body") or a line of a head ("head") every
    `interval` seconds, reopened when closed; the answers to 10 pings from the same address meanwhile."""
    port = int(root_url.rsplit(":", 1)[1])
    stop = threading.Event()
    if kind == "body":
        body, piece = b"PUT /api/queue/v1/task/x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{", b"a"
    else:
        body, piece = b"GET /api/queue/v1/ping HTTP/1.1\r\nHost: x\r\n", b"X-Slow: 1\r\n"

    def opened() -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.5", 0))
            sock.sendall(body)
            return sock
        except OSError:
            return None

    socks = [opened() for _ in range(count)]

    def run() -> None:
        while not stop.wait(interval):
            for i, sock in enumerate(socks):
                try:
                    if sock is None:
                        raise OSError
                    sock.sendall(piece)
                except OSError:
                    if sock is not None:
                        sock.close()
                    socks[i] = opened()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(3)
    client = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.5"), timeout=10)
    answers: list[Any] = []
    for _ in range(10):
        try:
            answers.append(client.get(f"{root_url}/api/queue/v1/ping").status_code)
        except httpx.HTTPError as exc:
            answers.append(type(exc).__name__)
        time.sleep(0.3)
    stop.set()
    thread.join(10)
    for sock in socks:
        if sock is not None:
            sock.close()
    print(f"drip: {count} sockets from 127.0.0.5, a {kind} piece every {interval} s; its pings: {answers}", flush=True)


def unread(root_url: str, pid: int, token: str) -> None:
    queue = taskcluster.Queue({"rootUrl": root_url, "credentials": {"clientId": "root", "accessToken": token}})
    group = taskcluster.slugid.nice()
    now = dt.datetime.now(dt.UTC)
    for _ in range(50):
        queue.createTask(
            taskcluster.slugid.nice(),
            {
                "taskQueueId": "bench/unread",
                "taskGroupId": group,
                "created": now.isoformat(),
                "deadline": (now + dt.timedelta(hours=1)).isoformat(),
                "payload": {"blob": "x" * 380_000},
                "metadata": {"name": "u", "description": "u", "owner": "me@example.com", "source": "https://x.example"},
            },
        )
    path = f"/api/queue/v1/task-group/{group}/list?limit=1000"
    size = len(httpx.get(f"{root_url}{path}", timeout=60).content)
    port = int(root_url.rsplit(":", 1)[1])
    before = rss_mb(pid)
    socks = []
    for _ in range(16):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=("127.0.0.6", 0))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        socks.append(sock)
    time.sleep(15)
    after = rss_mb(pid)
    for sock in socks:
        sock.close()
    print(
        f"unread: 16 clients asking for a {size / 1e6:.1f} MB page, reading nothing: host RSS {before:.0f} MB "
        f"before, {after:.0f} MB 15 s later",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.hostile", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--sockets", type=int, default=600, help="pipelined sockets (the host holds 1,000)")
    parser.add_argument("--round", choices=["all", "four"], default="all", help="`four`: issue 83's probes only")
    args = parser.parse_args()
    stops: list[Any] = []
    watched: dict[str, list[int]] = {}
    services = {name: Service() for name in ("trap", "slow", "echo")}
    for service in services.values():
        stops.append(service.stop)
    os.environ["QUEUE_FORWARD_SERVICES"] = " ".join(
        f"{name}=http://127.0.0.1:{service.port}" for name, service in services.items()
    )
    try:
        root_url, credentials, _ = start_embedded(stops, watched, in_memory=True)
        token, pid = credentials["accessToken"], watched["host"][0]
        if args.round == "all":
            flood(root_url, pid, args.requests)
            stall(root_url, token)
            roles(root_url, token)
            pipelined(root_url, args.sockets)
            documents(root_url, min(args.requests, 500))
        open_proxy(root_url, services["trap"])
        forwarding_flood(root_url)
        drip(root_url)
        unread(root_url, pid, token)
    finally:
        stop_all(stops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
