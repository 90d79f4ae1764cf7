"""A fault-injecting HTTP proxy between the queue and Azurite, on 127.0.0.1 (tests, the soak).

It forwards the table and queue services (blobs stay direct) and injects, on the queue's own calls (requests
with an Authorization header: Shared Key or bearer; SAS requests of workers pass untouched), what Azure does:

| kind | what the caller sees | applied by storage? |
|---|---|---|
| `busy` | `503 ServerBusy`, Azure's error body | no |
| `timeout` | `500 OperationTimedOut`, Azure's error body | yes (forwarded first) |
| `reset-before` | the connection reset before the request reached storage | no |
| `reset-after` | the connection reset after storage answered (the lost response) | yes |
| `delay` | the answer, `delay` seconds late | yes |

at a random `rate` per request, or exactly when a test asks (`inject`), per operation kind (`table.insert`,
`queue.put`, ...: `operation()` in storage_wire.py). With `limits` (local_host/limits.py), it is also a scale model
of one storage account: every request beyond the account's, a queue's or a table partition's target divided by a
factor is answered 503 ServerBusy, as Azure answers it. Run in-process (`async with FaultProxy(...)`) or as a process:

    python -m local_host.fault_proxy --storage "<Azurite connection string>" --rate 0.05 [--kinds busy,timeout]
    python -m local_host.fault_proxy --storage "<...>" --rate 0 --factor 100    # Azure's targets / 100

which prints the connection string to use instead (a line `CONNECTION <string>`) and serves until SIGTERM.

An outage, as a zone incident brings one (`outage`, or signals to the process): SIGUSR1 refuses every connection
(the listeners closed, open connections reset), SIGUSR2 answers every request `503 ServerBusy` (the storage front
end up, the service not), SIGHUP ends the outage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import random
import signal
import sys
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from yarl import URL

from local_host.limits import Limits
from local_host.storage_wire import HOP_BY_HOP, MAX_HEAD, Request, error_body, operation, read_request, reset

KINDS = ("busy", "timeout", "reset-before", "reset-after", "delay")
SERVICES = ("queue", "table")


@dataclass
class Faults:
    """What to inject: at `rate` per eligible request, one of `kinds`, on `operations` (None: all)."""

    rate: float = 0.0
    kinds: tuple[str, ...] = KINDS
    operations: frozenset[str] | None = None
    delay: float = 1.0
    seed: int | None = None
    forced: list[tuple[str, str]] = field(default_factory=list)  # (kind, operation): the next such request

    def choose(self, op: str, rng: random.Random) -> str | None:
        for i, (kind, wanted) in enumerate(self.forced):
            if wanted == op:
                del self.forced[i]
                return kind
        if self.rate and (self.operations is None or op in self.operations) and rng.random() < self.rate:
            return rng.choice(self.kinds)
        return None


class FaultProxy:
    """The proxy for the queue and table services of `storage` (a connection string with their endpoints)."""

    def __init__(self, storage: str, faults: Faults | None = None, limits: Limits | None = None) -> None:
        self.upstream = dict(item.split("=", 1) for item in storage.split(";") if "=" in item)
        self.faults = faults or Faults()
        self.limits = limits
        self.rng = random.Random(self.faults.seed)
        self.injected: Counter[tuple[str, str]] = Counter()  # (kind, operation) -> times
        self.seen: Counter[str] = Counter()  # operation -> requests
        self.last_headers: dict[str, dict[str, str]] = {}  # operation -> the last request's headers (lower case)
        self.ports: dict[str, int] = {}
        self._servers: list[asyncio.Server] = []
        self._session: aiohttp.ClientSession | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self.state = "well"  # or an outage: "refused", "busy"

    def inject(self, kind: str, op: str, times: int = 1) -> None:
        """The next `times` requests of operation `op` get fault `kind`."""
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind}")
        self.faults.forced.extend([(kind, op)] * times)

    @property
    def connection_string(self) -> str:
        """The storage connection string with the table and queue endpoints through this proxy."""
        values = dict(self.upstream)
        for service in SERVICES:
            path = urllib.parse.urlsplit(self.upstream[f"{service.capitalize()}Endpoint"]).path
            values[f"{service.capitalize()}Endpoint"] = f"http://127.0.0.1:{self.ports[service]}{path}"
        return ";".join(f"{k}={v}" for k, v in values.items()) + ";"

    async def start(self) -> FaultProxy:
        self._session = aiohttp.ClientSession(
            auto_decompress=False,
            trust_env=False,
            skip_auto_headers=("User-Agent", "Content-Type", "Accept-Encoding"),
            timeout=aiohttp.ClientTimeout(total=60),
        )
        await self._listen()
        return self

    async def _listen(self) -> None:
        for service in SERVICES:
            server = await asyncio.start_server(
                functools.partial(self._serve, service),
                "127.0.0.1",
                self.ports.get(service, 0),
                limit=MAX_HEAD,
                reuse_address=True,
            )
            self.ports[service] = server.sockets[0].getsockname()[1]
            self._servers.append(server)

    async def outage(self, state: str) -> None:
        """Refuse every connection ("refused"), answer every request 503 ("busy"), or serve again ("well")."""
        if state not in ("refused", "busy", "well"):
            raise ValueError(f"unknown state {state}")
        if state == "refused" and self._servers:
            for server in self._servers:
                server.close()
            self._servers.clear()
            for writer in list(self._open):
                reset(writer)
        elif state != "refused" and not self._servers:
            await self._listen()
        self.state = state

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def _serve(self, service: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            while True:
                request = await read_request(reader)
                if request is None:
                    break
                if not await self._one(service, request, writer):
                    return  # reset
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except aiohttp.ClientError:  # storage itself unreachable (Azurite restarting): the caller sees a reset
            reset(writer)
        finally:
            self._open.discard(writer)
            if not writer.is_closing():
                writer.close()

    async def _one(self, service: str, request: Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request (or reset the connection: False)."""
        op = operation(service, request.method, request.path, request.query, request.lower)
        self.seen[op] += 1
        self.last_headers[op] = request.lower
        over = (
            self.limits.admit(service, request.method, request.path, request.query, request.body)
            if self.limits is not None
            else None
        )
        if self.state == "busy":  # an outage: every caller, the workers' SAS requests too
            over = "outage"
        if over is not None:  # every caller counts against the account's targets, SAS requests of workers too
            message = "Operations per second is over the account limit." if over == "account" else "The server is busy."
            body, content_type = error_body(service, "ServerBusy", message)
            await self._write(
                writer, 503, "Server Busy", [("Content-Type", content_type), ("x-ms-error-code", "ServerBusy")], body
            )
            return True
        kind = self.faults.choose(op, self.rng) if "authorization" in request.lower else None
        if kind is not None:
            self.injected[(kind, op)] += 1
        if kind == "reset-before":
            reset(writer)
            return False
        if kind == "busy":
            body, content_type = error_body(service, "ServerBusy", "The server is busy.")
            await self._write(
                writer, 503, "Server Busy", [("Content-Type", content_type), ("x-ms-error-code", "ServerBusy")], body
            )
            return True
        if kind == "delay":
            await asyncio.sleep(self.faults.delay)
        status, reason, headers, body = await self._forward(service, request)
        if kind == "reset-after":
            reset(writer)
            return False
        if kind == "timeout":
            body, content_type = error_body(
                service, "OperationTimedOut", "Operation could not be completed within the specified time."
            )
            await self._write(
                writer,
                500,
                "Operation Timed Out",
                [("Content-Type", content_type), ("x-ms-error-code", "OperationTimedOut")],
                body,
            )
            return True
        await self._write(writer, status, reason, headers, body)
        return True

    async def _forward(self, service: str, request: Request) -> tuple[int, str, list[tuple[str, str]], bytes]:
        assert self._session is not None
        base = urllib.parse.urlsplit(self.upstream[f"{service.capitalize()}Endpoint"])
        url = f"{base.scheme}://{base.netloc}{request.target}"
        headers = [(k, v) for k, v in request.headers if k.lower() not in HOP_BY_HOP]
        async with self._session.request(
            request.method, URL(url, encoded=True), headers=headers, data=request.body if request.body else None
        ) as response:
            body = await response.read()
            return (
                response.status,
                response.reason or "",
                [(k, v) for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP],
                body,
            )

    @staticmethod
    async def _write(
        writer: asyncio.StreamWriter, status: int, reason: str, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        head = [
            f"HTTP/1.1 {status} {reason}",
            *(f"{k}: {v}" for k, v in headers),
            f"Content-Length: {len(body)}",
            "",
            "",
        ]
        writer.write("\r\n".join(head).encode("latin-1") + body)
        await writer.drain()


async def _main(args: argparse.Namespace) -> None:
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise SystemExit(f"unknown fault kinds: {', '.join(sorted(unknown))}")
    operations = frozenset(o.strip() for o in args.operations.split(",")) if args.operations else None
    limits = Limits(args.factor) if args.factor else None
    proxy = await FaultProxy(args.storage, Faults(args.rate, kinds, operations, args.delay, args.seed), limits).start()
    print(f"CONNECTION {proxy.connection_string}", flush=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    changes: set[asyncio.Task[None]] = set()

    def change(state: str) -> None:
        task = loop.create_task(_announce(proxy, state))
        changes.add(task)
        task.add_done_callback(changes.discard)

    for signum, state in ((signal.SIGUSR1, "refused"), (signal.SIGUSR2, "busy"), (signal.SIGHUP, "well")):
        loop.add_signal_handler(signum, change, state)
    await stopped.wait()
    injected = ", ".join(f"{kind} {op}: {n}" for (kind, op), n in sorted(proxy.injected.items()))
    print(
        f"requests {sum(proxy.seen.values())}, faults {sum(proxy.injected.values())}: {injected}",
        file=sys.stderr,
        flush=True,
    )
    if limits is not None:
        over = ", ".join(f"{name}: {n}" for name, n in limits.throttled.most_common(10))
        print(
            f"over the model's targets (factor {limits.factor:g}): {sum(limits.throttled.values())} refused "
            f"of {limits.admitted + sum(limits.throttled.values())}; most: {over or 'none'}",
            file=sys.stderr,
            flush=True,
        )
        busiest = ", ".join(f"{name}: {used:g} (target {rate:g}/s)" for name, used, rate in limits.busiest())
        print(f"admitted by the busiest scopes: {busiest}", file=sys.stderr, flush=True)
        # For a benchmark reading this process's output: the same, as one JSON line.
        print(
            "LIMITS "
            + json.dumps({"factor": limits.factor, "throttled": dict(limits.throttled), "busiest": limits.busiest(12)}),
            flush=True,
        )
    await proxy.stop()


async def _announce(proxy: FaultProxy, state: str) -> None:
    await proxy.outage(state)
    print(f"storage {state}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m local_host.fault_proxy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--storage", required=True, help="connection string of the storage to proxy (Azurite)")
    parser.add_argument("--rate", type=float, default=0.05, help="fraction of the queue's calls that get a fault")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated fault kinds")
    parser.add_argument("--operations", default="", help="comma-separated operation kinds (default: all)")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds of a `delay` fault")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--factor", type=float, default=0.0, help="model Azure's scalability targets divided by this (0: no limits)"
    )
    asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
