"""Runs an Azure Functions app's queue and timer triggers the way the Functions host does.

Queue triggers (host.json `extensions.queues`): up to `batchSize` messages fetched at once and run
concurrently, a new batch fetched when no more than `newBatchThreshold` are still running; a message is deleted
when its function returns; when it raises, the message becomes visible again after `visibilityTimeout`, and its
dequeue count rises; once it has been tried `maxDequeueCount` times it moves to `<queue>-poison`. Empty polls
back off exponentially (with jitter) up to `maxPollingInterval`; a poll that found messages resets the delay.
Timer triggers follow their NCRONTAB schedule (seconds first) or a `hh:mm:ss` interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import inspect
import json
import logging
import os
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import azure.functions as func
from azure.functions.timer import TimerRequest
from croniter import croniter
from opentelemetry import trace

from shared.connections import StorageConnection
from shared.logs import fields
from shared.storage import queue_store
from shared.storage.base import QueueMessage, QueueStore

log = logging.getLogger("local_host.triggers")

MIN_POLLING_INTERVAL = 0.1
# The host hides a message it is running for a lease, renewed every half lease while its function runs (the
# Functions host does the same with a 10-minute lease): a message whose process died reappears after at most a
# lease, and so do the messages of a receive whose answer was lost (Azure hid them; nobody knows their pop
# receipts). Tests of such crashes and of storage faults shorten it (QUEUE_LOCAL_HOST_MESSAGE_LEASE, seconds).
RECEIVE_VISIBILITY = int(os.environ.get("QUEUE_LOCAL_HOST_MESSAGE_LEASE", "30"))


def parse_timespan(value: str | int | float) -> float:
    """host.json durations: `hh:mm:ss[.fff]`, `d.hh:mm:ss`, or milliseconds as a number."""
    if isinstance(value, int | float):
        return float(value) / 1000
    match = re.fullmatch(r"(?:(\d+)\.)?(\d+):(\d+):(\d+(?:\.\d+)?)", value.strip())
    if not match:
        raise ValueError(f"not a TimeSpan: {value!r}")
    days, hours, minutes, seconds = match.groups()
    return int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)


@dataclass(frozen=True)
class QueueOptions:
    batch_size: int = 16
    new_batch_threshold: int = 8
    max_polling_interval: float = 60.0
    visibility_timeout: float = 0.0
    max_dequeue_count: int = 5
    message_encoding: str = "base64"

    @classmethod
    def from_host_json(cls, path: Path) -> QueueOptions:
        config = json.loads(path.read_text()) if path.exists() else {}
        queues = config.get("extensions", {}).get("queues", {})
        batch = int(queues.get("batchSize", 16))
        if not 1 <= batch <= 32:
            raise ValueError(f"host.json extensions.queues.batchSize must be 1..32, not {batch}")
        options = cls(
            batch_size=batch,
            new_batch_threshold=int(queues.get("newBatchThreshold", batch // 2)),
            max_polling_interval=max(
                MIN_POLLING_INTERVAL, parse_timespan(queues.get("maxPollingInterval", "00:01:00"))
            ),
            visibility_timeout=parse_timespan(queues.get("visibilityTimeout", "00:00:00")),
            max_dequeue_count=int(queues.get("maxDequeueCount", 5)),
            message_encoding=str(queues.get("messageEncoding", "base64")),
        )
        if options.message_encoding != "base64":
            raise ValueError("the queue's messages are base64 text: host.json messageEncoding must be base64")
        return options


class LocalQueueMessage(func.QueueMessage):
    """A QueueMessage carrying the metadata the real host gives (dequeue count, times)."""

    def __init__(self, message: QueueMessage) -> None:
        super().__init__(id=message.id, body=message.content, pop_receipt=message.pop_receipt)
        self._message = message

    @property
    def dequeue_count(self) -> int:
        return self._message.dequeue_count

    @property
    def insertion_time(self) -> dt.datetime:
        return self._message.inserted

    @property
    def expiration_time(self) -> dt.datetime | None:
        return self._message.expires

    @property
    def time_next_visible(self) -> dt.datetime | None:
        return self._message.next_visible


def resolve_setting_expression(value: str) -> str:
    """Binding expressions `%NAME%` are app settings (environment variables)."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise KeyError(f"binding expression %{name}% names an app setting that is not set")
        return os.environ[name]

    return re.sub(r"%([^%]+)%", one, value)


async def _invoke(name: str, function: Callable[..., Any], arg_name: str, argument: Any) -> None:
    # A span per invocation (exported as a request), as the Functions host makes one; without telemetry
    # configured the tracer is OpenTelemetry's no-op one.
    with _tracer.start_as_current_span(name, kind=trace.SpanKind.CONSUMER):
        if inspect.iscoroutinefunction(function):
            await function(**{arg_name: argument})
        else:
            await asyncio.to_thread(function, **{arg_name: argument})


_tracer = trace.get_tracer("local_host")


class QueueTriggerRunner:
    def __init__(
        self,
        name: str,
        queue: str,
        function: Callable[..., Any],
        arg_name: str,
        store: QueueStore,
        options: QueueOptions,
    ) -> None:
        self.name, self.queue, self.function, self.arg_name = name, queue, function, arg_name
        self.store, self.options = store, options
        self.poison_queue = f"{queue}-poison"
        self.processed = 0
        self.failed = 0
        self.poisoned = 0
        self._woken = asyncio.Event()  # set when this process put a message on the queue (wake)

    def wake(self) -> None:
        """A message was put on the queue by this process: poll now rather than after the back-off."""
        self._woken.set()

    async def run(self, stop: asyncio.Event) -> None:
        delay = MIN_POLLING_INTERVAL
        running: set[asyncio.Task[None]] = set()
        await self.store.ensure_queues([self.queue])
        try:
            while not stop.is_set():
                if len(running) > self.options.new_batch_threshold:
                    await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                    continue
                self._woken.clear()  # before the receive: a put during it still wakes the wait below
                messages: list[QueueMessage]
                try:
                    messages = await self.store.receive(self.queue, self.options.batch_size, RECEIVE_VISIBILITY)
                except Exception:
                    log.exception("receiving from %s failed", self.queue, extra=fields(queue=self.queue))
                    messages = []
                for message in messages:
                    task = asyncio.create_task(self._process(message))
                    running.add(task)
                    task.add_done_callback(running.discard)
                if messages:
                    delay = MIN_POLLING_INTERVAL
                    continue
                if await self._idle(stop, delay * random.uniform(0.8, 1.0)):
                    delay = MIN_POLLING_INTERVAL
                else:
                    delay = min(delay * 2, self.options.max_polling_interval)
        finally:
            if running:
                await asyncio.wait(running)

    async def _idle(self, stop: asyncio.Event, seconds: float) -> bool:
        """Wait `seconds`, or until stopping or woken; True when woken."""
        waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._woken.wait())}
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        return self._woken.is_set() and not stop.is_set()

    async def _process(self, received: QueueMessage) -> None:
        if received.dequeue_count > self.options.max_dequeue_count:
            await self._poison(received)
            return
        lease = Lease(self.store, self.queue, received)
        try:
            async with lease:
                await _invoke(self.name, self.function, self.arg_name, LocalQueueMessage(received))
        except Exception:
            message = lease.message
            self.failed += 1
            log.exception(
                "function %s failed (attempt %d of %d)",
                self.name,
                message.dequeue_count,
                self.options.max_dequeue_count,
                extra=fields(queue=self.queue, messageId=message.id, dequeueCount=message.dequeue_count),
            )
            if message.dequeue_count >= self.options.max_dequeue_count:
                await self._poison(message)
            else:
                await self.store.release(self.queue, message, round(self.options.visibility_timeout))
            return
        self.processed += 1
        await self.store.delete(self.queue, lease.message)

    async def _poison(self, message: QueueMessage) -> None:
        self.poisoned += 1
        log.error(
            "message moved to %s after %d attempts",
            self.poison_queue,
            message.dequeue_count,
            extra=fields(queue=self.queue, messageId=message.id, dequeueCount=message.dequeue_count),
        )
        await self.store.put(self.poison_queue, message.content)
        await self.store.delete(self.queue, message)


class Lease:
    """Keeps a received message hidden while its function runs: every half lease its visibility is renewed for a
    lease (each renewal gives the message a new pop receipt: `message` is the current one). Leaving waits for a
    renewal in flight, so the receipt the caller then deletes or releases with is the message's last."""

    def __init__(self, store: QueueStore, queue: str, message: QueueMessage) -> None:
        self.store, self.queue, self.message = store, queue, message
        self._done = asyncio.Event()
        self._renewing: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Lease:
        self._renewing = asyncio.create_task(self._renew())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._done.set()
        if self._renewing is not None:
            await self._renewing

    async def _renew(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), RECEIVE_VISIBILITY / 2)
                return
            try:
                renewed = await self.store.release(self.queue, self.message, RECEIVE_VISIBILITY)
            except Exception:
                log.warning(
                    "renewing a message lease failed; it may run twice",
                    exc_info=True,
                    extra=fields(queue=self.queue, messageId=self.message.id),
                )
                continue
            if renewed is None:
                return  # gone (or renewed by a lost answer: the message comes back after the lease)
            self.message = renewed


class TimerTriggerRunner:
    def __init__(
        self, name: str, schedule: str, function: Callable[..., Any], arg_name: str, run_on_startup: bool
    ) -> None:
        self.name, self.schedule, self.function, self.arg_name = name, schedule, function, arg_name
        self.run_on_startup = run_on_startup
        self.runs = 0
        self.started = asyncio.Event()  # set once the run at startup (if any) is over

    def next_run(self, after: dt.datetime) -> dt.datetime:
        if re.fullmatch(r"(\d+\.)?\d+:\d+:\d+(\.\d+)?", self.schedule.strip()):
            return after + dt.timedelta(seconds=parse_timespan(self.schedule))
        nxt: dt.datetime = croniter(self.schedule, after, second_at_beginning=True).get_next(dt.datetime)
        return nxt

    async def run(self, stop: asyncio.Event) -> None:
        if self.run_on_startup:
            await self._fire(past_due=False)
        self.started.set()
        due = self.next_run(dt.datetime.now(dt.UTC))
        while not stop.is_set():
            wait = (due - dt.datetime.now(dt.UTC)).total_seconds()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
                continue
            late = -wait > 1
            await self._fire(past_due=late)
            due = self.next_run(max(due, dt.datetime.now(dt.UTC)) if late else due)

    async def _fire(self, past_due: bool) -> None:
        self.runs += 1
        try:
            await _invoke(self.name, self.function, self.arg_name, TimerRequest(past_due=past_due))
        except Exception:
            log.exception("timer function %s failed", self.name)


def build_runners(
    functions: Iterable[Any], options: QueueOptions, store_for: Callable[[str], QueueStore] | None = None
) -> list[QueueTriggerRunner | TimerTriggerRunner]:
    """One runner per queue or timer trigger among the app's `functions` (its `get_functions()`, which may be
    called only once)."""
    stores: dict[str, QueueStore] = {}

    def default_store(connection: str) -> QueueStore:
        if connection not in stores:
            # As the Functions host reads a connection: a connection string, or the identity-based form.
            value = StorageConnection.from_environ(connection, os.environ)
            if value is None:
                raise KeyError(f"queue trigger connection setting {connection} is not set")
            # Untraced: in Azure the Functions host polls and deletes outside the app's telemetry; traced here
            # the polling would be most of it (and use up the sampler's budget of traces per second).
            stores[connection] = queue_store(value, os.environ.get("QUEUE_STORAGE_CLIENT", "rest"), traced=False)
        return stores[connection]

    store_for = store_for or default_store
    runners: list[QueueTriggerRunner | TimerTriggerRunner] = []
    for function in functions:
        trigger = function.get_trigger()
        binding = trigger.get_dict_repr()
        name = function.get_function_name()
        user_function = function.get_user_function()
        if binding["type"] == "queueTrigger":
            queue = resolve_setting_expression(binding["queueName"])
            runners.append(
                QueueTriggerRunner(
                    name,
                    queue,
                    user_function,
                    binding["name"],
                    store_for(binding.get("connection") or "AzureWebJobsStorage"),
                    options,
                )
            )
        elif binding["type"] == "timerTrigger":
            runners.append(
                TimerTriggerRunner(
                    name,
                    resolve_setting_expression(binding["schedule"]),
                    user_function,
                    binding["name"],
                    bool(binding.get("runOnStartup")),
                )
            )
        elif binding["type"] != "httpTrigger":
            raise NotImplementedError(f"the local host does not run {binding['type']} ({name})")
    return runners
