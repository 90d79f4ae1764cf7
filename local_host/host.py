"""The local Functions host: serves the app's HTTP function with uvicorn (through the hops in front of it on Azure:
local_host/front_end.py, local_host/functions_worker.py) and runs its queue and timer triggers.

Azure Functions Core Tools cannot be installed on these machines, so this stands in for it. It introspects the
same `function_app.app` the real host loads, so the code it runs is the code that is deployed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from local_host.front_end import FrontEnd, FrontEndLimits
from local_host.functions_worker import WorkerWebApp, http_function_of
from local_host.http import BoundedH11
from local_host.triggers import QueueOptions, QueueTriggerRunner, TimerTriggerRunner, build_runners
from shared import roundtrips
from shared.api.framework import MAX_HEAD_BYTES
from shared.storage.base import PUT_LISTENERS
from shared.storage.retry import ATTEMPTS

log = logging.getLogger("local_host")
PROJECT = Path(__file__).resolve().parent.parent
# Python's default (700, 10, 10) ran ~700 young and 6 full collections in a benchmark run of two fan-outs (a full
# one took 80-100 ms, over every object the imports made): 9 % of the host's CPU. See tune_gc.
GC_THRESHOLDS = (10_000, 10, 10)
STARTUP_SECONDS = 5.0  # the longest the HTTP server waits for the timers that run at startup
AZURE_FRONT_END = FrontEndLimits(body_limit=5 * 1024**3, answer_within=230.0)  # infra's, and the front end's


def tune_gc() -> None:
    """Once the app is loaded: move what exists (modules, schemas, the app) out of the collector's reach for good
    (`gc.freeze`), and collect young objects every 10,000 allocations rather than 700. Garbage in cycles lives a
    little longer; docs/performance.md has the figures."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def print_storage_calls() -> None:
    """On SIGUSR1: a line `storage-calls {"calls": {"<operation>": <attempts so far>, ...}, "roundTrips":
    {"<API method>": {"<storage round trips one after another>": <requests so far>, ...}, ...}}` on stdout
    (bench.lifecycle reads it before and after each scenario to print storage calls per task and round trips
    per API call)."""
    print(
        "storage-calls "
        + json.dumps(
            {
                "calls": dict(sorted(ATTEMPTS.items())),
                "roundTrips": {
                    method: {str(n): count for n, count in sorted(tally.items())}
                    for method, tally in sorted(roundtrips.TALLY.items())
                },
            }
        ),
        flush=True,
    )


def load_app(reference: str) -> Any:
    module_name, _, attr = reference.partition(":")
    if str(PROJECT) not in sys.path:
        sys.path.insert(0, str(PROJECT))
    return getattr(importlib.import_module(module_name), attr or "app")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The host owns SIGINT/SIGTERM, so it can stop the triggers too.
        yield


async def serve(
    app_reference: str = "function_app:app",
    host_json: Path = PROJECT / "host.json",
    *,
    port: int | None = 7071,
    announce: str | None = None,
    bounds: dict[str, Any] | None = None,
    front_end: FrontEndLimits | None = None,
    before_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run until SIGINT/SIGTERM. `port=None` runs the triggers only. The HTTP server's `bounds`: the keywords of
    local_host/http.py's `BoundedH11.configure`; `front_end`: Azure's limits on a request (local_host/front_end.py),
    Azure's defaults if not given.
    `before_stop` runs at the first signal while the queue still serves (a worker beside it reports its runs);
    a second signal stops at once."""
    app = load_app(app_reference)
    options = QueueOptions.from_host_json(host_json)
    functions = app.get_functions()  # once: a second call refuses the names it already saw
    runners = build_runners(functions, options)
    tune_gc()
    server = (
        None
        if port is None
        else _http_server(
            FrontEnd(WorkerWebApp(http_function_of(functions)), front_end or AZURE_FRONT_END),
            port,
            BoundedH11.configure(**{"max_connections": 1000, "header_timeout": 10.0, **(bounds or {})}),
        )
    )
    stopping = _Stopping(server, before_stop)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.request)
    loop.add_signal_handler(signal.SIGUSR1, print_storage_calls)
    wake = _waker(runners)
    PUT_LISTENERS.append(wake)
    tasks = [asyncio.create_task(r.run(stopping.stop), name=getattr(r, "name", "trigger")) for r in runners]
    for r in runners:
        kind = "queue " + r.queue if isinstance(r, QueueTriggerRunner) else "timer " + r.schedule
        log.info("trigger %s: %s", r.name, kind)
    await _started(runners)
    try:
        await _serve_until_stopped(server, stopping.stop, port, announce)
    finally:
        stopping.stop.set()
        PUT_LISTENERS.remove(wake)
        await asyncio.gather(*tasks, return_exceptions=True)
        await _close_stores(app, runners)


async def _started(runners: list[Any]) -> None:
    """Wait, up to STARTUP_SECONDS, for the timers that run at startup (the exchanges' declaration): once the host
    answers, consumers can bind. Past the bound (a broker that does not answer) it serves, and they finish later."""
    startup = [r.started.wait() for r in runners if isinstance(r, TimerTriggerRunner) and r.run_on_startup]
    if startup:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*startup), STARTUP_SECONDS)


def _http_server(asgi: Any, port: int, http: type[BoundedH11]) -> _Server:
    config = uvicorn.Config(
        asgi,
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
        http=http,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
    )
    return _Server(config)


class _Stopping:
    """The host's stop: the first SIGINT/SIGTERM runs `before_stop` while the queue still serves, then stops; a
    second one stops at once."""

    def __init__(self, server: _Server | None, before_stop: Callable[[], Awaitable[None]] | None) -> None:
        self.stop = asyncio.Event()
        self.server, self.before_stop = server, before_stop
        self._first: asyncio.Task[None] | None = None

    def now(self) -> None:
        self.stop.set()
        if self.server is not None:
            self.server.should_exit = True

    def request(self) -> None:
        if self.before_stop is None or self._first is not None:
            self.now()
        else:
            self._first = asyncio.get_running_loop().create_task(self._after(self.before_stop))

    async def _after(self, first: Callable[[], Awaitable[None]]) -> None:
        try:
            await first()
        finally:
            self.now()


def _waker(runners: list[Any]) -> Callable[[str], None]:
    """A message this process puts on a queue it has a trigger for wakes that trigger (see PUT_LISTENERS)."""
    by_queue: dict[str, list[QueueTriggerRunner]] = {}
    for r in runners:
        if isinstance(r, QueueTriggerRunner):
            by_queue.setdefault(r.queue, []).append(r)

    def wake(queue: str) -> None:
        for runner in by_queue.get(queue, ()):
            runner.wake()

    return wake


async def _serve_until_stopped(
    server: _Server | None, stop: asyncio.Event, port: int | None, announce: str | None
) -> None:
    """Serve HTTP (when there is a server) until it exits, or wait for the stop; `announce` once serving."""
    if server is None:
        if announce:
            print(announce, flush=True)
        await stop.wait()
        return
    serving = asyncio.create_task(server.serve())
    while not server.started and not serving.done():  # noqa: ASYNC110 - uvicorn offers no event
        await asyncio.sleep(0.05)
    if serving.done():
        await serving
        raise RuntimeError(f"the HTTP server did not start on port {port}")
    if announce:
        print(announce, flush=True)
    await serving
    stop.set()


async def _close_stores(app: Any, runners: list[Any]) -> None:
    for store in {id(r.store): r.store for r in runners if isinstance(r, QueueTriggerRunner)}.values():
        await store.close()
    with contextlib.suppress(Exception):
        from shared.runtime import get_queue

        if get_queue.cache_info().currsize:
            await get_queue().close()
    with contextlib.suppress(Exception):
        from shared.runtime import get_publisher

        publisher = get_publisher() if get_publisher.cache_info().currsize else None
        if publisher is not None:
            await publisher.close()
