"""The storage retry loop (shared/storage/retry.py), the lost-answer checks, and what callers see when storage
stays busy: a 503 with Retry-After from the API, a message put back by a trigger. (On Azurite, through the fault
proxy: tests/integration/test_storage_faults.py.)"""

from __future__ import annotations

import time

import azure.functions as func
import pytest

from functions import triggers
from shared.api.framework import error_response
from shared.domain.messages import CLAIM_QUEUE
from shared.storage.base import Entity, Op
from shared.storage.lost_responses import holds, transaction_applied, written_by_us
from shared.storage.memory import MemoryTables
from shared.storage.retry import RetryPolicy, StorageUnavailable, Verdict, status_verdict, with_retries
from tests.services import memory_service

FAST = RetryPolicy(budget=0.5, backoff=0.01, max_backoff=0.05)


def judge(result, failure):
    if failure is not None:
        return Verdict(retry=isinstance(failure, ConnectionResetError), ambiguous=True, why="reset")
    return status_verdict(result, "ServerBusy" if result == 503 else None)


def attempts(*outcomes):
    """An attempt function answering each of `outcomes` in turn (an exception is raised), and the ids it saw."""
    seen: list[str] = []
    queue = list(outcomes)

    async def attempt(request_id):
        seen.append(request_id)
        outcome = queue.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return attempt, seen


async def test_busy_then_success_is_retried_with_one_request_id():
    attempt, seen = attempts(503, 503, 200)
    done = await with_retries(FAST, "table.get", attempt, judge)
    assert done.value == 200 and not done.ambiguous
    assert len(seen) == 3 and len(set(seen)) == 1


async def test_a_lost_answer_makes_the_call_ambiguous():
    attempt, _ = attempts(ConnectionResetError("reset"), 412)
    done = await with_retries(FAST, "table.replace", attempt, judge)
    assert done.value == 412 and done.ambiguous


async def test_answers_and_bugs_are_not_retried():
    attempt, seen = attempts(404)
    assert (await with_retries(FAST, "table.get", attempt, judge)).value == 404 and len(seen) == 1
    attempt, seen = attempts(ValueError("bug"), 200)
    with pytest.raises(ValueError):
        (await with_retries(FAST, "table.get", attempt, judge))
    assert len(seen) == 1


async def test_storage_busy_beyond_the_budget_is_a_503_with_retry_after():
    attempt, seen = attempts(*([503] * 1000))
    started = time.monotonic()
    with pytest.raises(StorageUnavailable) as raised:
        (await with_retries(FAST, "queue.put", attempt, judge))
    assert time.monotonic() - started <= FAST.budget + 0.05 and len(seen) > 3
    response = error_response(raised.value, method="createTask", params={}, payload=None)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert b'"ServiceUnavailable"' in response.body and b"queue.put" in response.body


def test_backoff_grows_to_its_cap_with_jitter_and_honours_retry_after():
    policy = RetryPolicy(backoff=0.2, max_backoff=4)
    assert 0.05 <= policy.delay(1) <= 0.15
    assert 0.1 <= policy.delay(2) <= 0.3 and 0.2 <= policy.delay(3) <= 0.6 and 0.4 <= policy.delay(4) <= 1.2
    assert all(2 <= policy.delay(20) <= 6 for _ in range(50))
    assert policy.delay(1, retry_after=3) == 3


async def test_what_a_row_holds_after_a_lost_answer_tells_whose_write_it_was():
    async def go():
        tables = MemoryTables()
        await tables.ensure_tables(["T"])
        await tables.upsert("T", Entity("p", "mine", {"n": 1, "gone": None}))
        await tables.upsert("T", Entity("p", "theirs", {"n": 2}))
        assert await written_by_us(tables.get, "T", Entity("p", "mine", {"n": 1, "gone": None})) is not None
        assert await written_by_us(tables.get, "T", Entity("p", "theirs", {"n": 1})) is None
        assert await written_by_us(tables.get, "T", Entity("p", "absent", {"n": 1})) is None
        applied = [Op("replace", Entity("p", "mine", {"n": 1})), Op("delete", Entity("p", "absent"))]
        assert await transaction_applied(tables.get, "T", applied) is not None
        assert await transaction_applied(tables.get, "T", [Op("insert", Entity("p", "theirs", {"n": 9}))]) is None
        assert holds({"a": 1}, {"a": 1, "b": 2}, merge=True) and not holds({"a": 1}, {"a": 1, "b": 2})

    (await go())


async def test_a_trigger_puts_its_message_back_when_storage_stays_busy(monkeypatch):
    queue = memory_service()
    monkeypatch.setattr(triggers, "get_queue", lambda: queue)

    async def busy() -> None:
        raise StorageUnavailable(operation="table.get", budget=20, last="503 ServerBusy")

    message = func.QueueMessage(id="m1", body=b'{"taskId": "x"}')
    (await triggers.later_if_busy(CLAIM_QUEUE, message, busy))
    [put_back] = queue.stores.queues._queues[CLAIM_QUEUE]
    assert put_back.content == b'{"taskId": "x"}' and put_back.dequeue_count == 0
