"""Retries of storage calls, as the Azure SDK's pipeline retries them, shared by both adapters (rest/, azure/).

What is retried: the statuses azure-core's RetryPolicy retries (408, 429, 500, 502, 503, 504), connection errors
and timeouts. How: exponential backoff as azure-core computes it (its `backoff * 2 ** (retries - 1)` with the
first retry at once; here the first after `backoff / 2`, the second after `backoff`, doubling), capped at
`max_backoff`, with jitter (±50 %, so that processes throttled
together do not come back together), a `Retry-After` from storage honoured, within a time budget per call. The
defaults are shorter than azure-core's (0.8 s factor, 120 s cap, 10 retries): a storage call here serves a
request whose client is waiting (and retries 5xx itself) or a trigger whose message comes back anyway, so a
call gives up after `budget` seconds with `StorageUnavailable` (a 503 with `Retry-After` to API clients).

An attempt whose request may have been applied although its answer was lost (a connection dropped after the
request was sent, a timeout, 500 OperationTimedOut, 502, 504) makes the call *ambiguous*: the adapter then
checks what a conditional answer of a later attempt means (shared/storage/lost_responses.py), so that a retried
insert, ETag-conditional write or delete ends in the outcome the first attempt had.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

import aiohttp
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from shared import __version__, errors, roundtrips
from shared.logs import fields

log = logging.getLogger("queue.storage")

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})  # azure-core's RetryPolicy
THROTTLE_STATUSES = frozenset({429, 503})  # the account or partition is busy: back off
NOT_APPLIED_STATUSES = frozenset({408, 429, 503})  # refused before the request was carried out
USER_AGENT = f"tc-azure-queue/{__version__}"

_meter = metrics.get_meter("queue.storage")
RETRIES = _meter.create_counter("storage.retries", description="storage calls attempted again")
THROTTLES = _meter.create_counter("storage.throttles", description="storage answers 429 or 503 (busy)")
FAILURES = _meter.create_counter("storage.failures", description="storage calls that failed after retries")
# Every attempt of every storage call, by operation (`table.insert`, `queue.put`, ...): on Azure each is a billed
# transaction. A plain counter (an increment per attempt), observed by the metric below and read by the local
# host's SIGUSR1 dump, which bench.lifecycle uses to print storage calls per task.
ATTEMPTS: Counter[str] = Counter()


def _observe_attempts(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(n, {"operation": op}) for op, n in list(ATTEMPTS.items())]


_meter.create_observable_counter(
    "storage.requests",
    [_observe_attempts],
    description="storage requests sent (attempts, retries included), by operation",
)

T = TypeVar("T")


class StorageUnavailable(errors.ServiceUnavailable):
    """Storage did not complete {operation} within {budget:g} s ({last}); retry in a few seconds"""


@dataclass(frozen=True)
class RetryPolicy:
    budget: float = 20.0  # seconds a call may spend, retries included
    backoff: float = 0.2  # seconds before the second retry; doubled each retry after
    max_backoff: float = 4.0
    timeout: float = 10.0  # seconds for one attempt, from connecting to the last byte of the answer
    connect_timeout: float = 3.0

    def delay(self, retries: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `retries` (1-based)."""
        base = min(self.max_backoff, self.backoff * 2 ** (retries - 2)) if retries > 1 else self.backoff / 2
        jittered = base * random.uniform(0.5, 1.5)
        return max(jittered, min(retry_after, self.max_backoff * 2)) if retry_after else jittered


@dataclass(frozen=True)
class Verdict:
    """How one attempt ended, for the retry loop: retried or not; whether its request may have been applied."""

    retry: bool
    ambiguous: bool = False
    throttled: bool = False
    retry_after: float | None = None
    why: str = ""


def status_verdict(status: int, code: str | None, retry_after: str | None = None) -> Verdict:
    if status not in RETRY_STATUSES:
        return Verdict(retry=False)
    after = None
    if retry_after and retry_after.isdigit():
        after = float(retry_after)
    return Verdict(
        retry=True,
        ambiguous=status not in NOT_APPLIED_STATUSES,
        throttled=status in THROTTLE_STATUSES,
        retry_after=after,
        why=f"{status} {code or ''}".strip(),
    )


def error_verdict(exc: BaseException, *, sent: bool = True) -> Verdict:
    """A connection error or timeout; `sent`: the request may have reached storage."""
    return Verdict(retry=True, ambiguous=sent, why=f"{type(exc).__name__}: {exc}"[:200])


@dataclass
class Call(Generic[T]):
    """The result of a call, and whether an attempt before the last may have been applied."""

    value: T
    ambiguous: bool
    request_id: str


def without_silent_resend(session: aiohttp.ClientSession) -> aiohttp.ClientSession:
    """aiohttp resends a PUT, DELETE or GET once, unasked, when a keep-alive connection drops mid-request, and
    says nothing: a lost answer then looks like a plain refusal (a 412 of our own write). Off, so every attempt is
    this module's and the call knows it was ambiguous. aiohttp has no public switch for it (aio-libs/aiohttp
    #10790, closed with the private attribute as the way)."""
    session._retry_connection = False  # noqa: SLF001
    return session


def new_request_id() -> str:
    return str(uuid.uuid4())


async def with_retries(
    policy: RetryPolicy,
    operation: str,
    attempt: Callable[[str], Awaitable[T]],
    judge: Callable[[T | None, BaseException | None], Verdict],
    request_id: str | None = None,
) -> Call[T]:
    """Run `attempt(request_id)` until `judge` says its result (or exception) needs no retry, or the budget is
    spent: then StorageUnavailable (or the last exception, when it is not one to retry). The request id is the
    same for every attempt of the call (`x-ms-client-request-id`, logged on failure)."""
    request_id = request_id or new_request_id()
    started = time.monotonic()
    ambiguous, retries = False, 0
    while True:
        result: T | None = None
        failure: BaseException | None = None
        ATTEMPTS[operation] += 1
        sent = roundtrips.now()
        try:
            result = await attempt(request_id)
        except Exception as exc:  # transport errors (judged below), or a bug (not retried)
            failure = exc
        roundtrips.record(sent, roundtrips.now())
        verdict = judge(result, failure)
        if not verdict.retry:
            if failure is not None:
                raise failure
            return Call(result, ambiguous, request_id)  # type: ignore[arg-type]
        if verdict.throttled:
            THROTTLES.add(1, {"operation": operation})
        retries += 1
        wait = policy.delay(retries, verdict.retry_after)
        elapsed = time.monotonic() - started
        if elapsed + wait > policy.budget:
            FAILURES.add(1, {"operation": operation})
            log.warning(
                "storage %s failed after %d attempts in %.1f s: %s (x-ms-client-request-id %s)",
                operation,
                retries,
                elapsed,
                verdict.why,
                request_id,
                extra=fields(event="storage-failed", operation=operation, requestId=request_id),
            )
            raise StorageUnavailable(
                operation=operation,
                budget=policy.budget,
                last=verdict.why,
                retry_after=max(1, round(policy.max_backoff)),
            ) from failure
        RETRIES.add(1, {"operation": operation, "reason": "throttled" if verdict.throttled else "failed"})
        log.info(
            "storage %s: %s; retry %d in %.2f s (x-ms-client-request-id %s)",
            operation,
            verdict.why,
            retries,
            wait,
            request_id,
            extra=fields(event="storage-retry", operation=operation, requestId=request_id),
        )
        ambiguous = ambiguous or verdict.ambiguous
        await asyncio.sleep(wait)
