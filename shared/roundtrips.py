"""Storage round trips one after another: how many storage calls a piece of work (an API request) waited for in
sequence, its critical path. Latency to a far storage service multiplies this number, not the number of calls.

A request's storage calls are recorded while it is `traced()`: every attempt of a call it makes
(shared/storage/retry.py), and the calls of shared work it waits for, which the shared work attributes to each of
its waiters (a group commit's transaction, a shared receive: tasks of their own that record nothing themselves,
`untraced`). `sequential` then counts the longest chain of those calls in which each started after the one before
had ended: the round trips the request waited through.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator

Span = tuple[float, float]  # when one storage call the work waited for started and ended (on `now`)

_SPANS: contextvars.ContextVar[list[Span] | None] = contextvars.ContextVar("storage_spans", default=None)
# How many API requests waited through how many round trips, by method: the local host's SIGUSR1 dump prints it
# (bench.lifecycle reads it); the same figures go to the `queue.api.storage_round_trips` histogram.
TALLY: defaultdict[str, Counter[int]] = defaultdict(Counter)


def now() -> float:
    """The clock spans and arrivals are read on: time.monotonic (a test may put its event loop's fake one here)."""
    return time.monotonic()


def current() -> list[Span] | None:
    """The spans of the work being traced in this context, to hand to shared work it will wait for."""
    return _SPANS.get()


def record(started: float, ended: float, into: list[Span] | None = None) -> None:
    """A storage call from `started` to `ended`, for the traced work of this context (or `into`)."""
    spans = _SPANS.get() if into is None else into
    if spans is not None:
        spans.append((started, ended))


def waited(spans: Iterable[Span], arrived: float, into: list[Span] | None) -> None:
    """Shared work's calls, told to a caller that waited for them (`into`, its spans): those that ended after it
    came (`arrived`), as they were. A call already in flight when it came is one round trip of its wait that began
    before it; kept so, two such waits in parallel branches of its work (a group commit of one partition beside one
    of another, each in flight when it came) overlap and count once, rather than as two round trips one after
    another for two waits of a fraction of one."""
    for started, ended in spans:
        if ended > arrived:
            record(started, ended, into=into)


def untraced() -> None:
    """In a task shared by several callers (it was started in one caller's context): record nothing here; the
    task attributes its calls to each caller itself."""
    _SPANS.set(None)


@contextlib.contextmanager
def traced() -> Iterator[list[Span]]:
    spans: list[Span] = []
    token = _SPANS.set(spans)
    try:
        yield spans
    finally:
        _SPANS.reset(token)


def sequential(spans: Iterable[Span], until: float | None = None) -> int:
    """The most calls among `spans` (those started before `until`) that ran one after another, each starting once
    the one before had ended: the earliest-ending first, as for any largest set of intervals that do not overlap."""
    chain, last_end = 0, float("-inf")
    for started, ended in sorted((s for s in spans if until is None or s[0] < until), key=lambda s: s[1]):
        if started >= last_end:
            chain, last_end = chain + 1, ended
    return chain
