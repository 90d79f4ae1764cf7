"""Pieces of the local host that need no Azurite: settings, host.json parsing, polling back-off."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from local_host.triggers import QueueOptions, QueueTriggerRunner, parse_timespan
from shared import timeutil
from shared.errors import SettingsError
from shared.settings import load_settings
from shared.storage.memory import MemoryQueues
from tests.unit.helpers import check_back_off


def test_bad_settings_name_the_variable(monkeypatch):
    monkeypatch.setenv("QUEUE_STORAGE", "x")
    monkeypatch.setenv("QUEUE_ROOT_ACCESS_TOKEN", "y" * 30)
    monkeypatch.setenv("QUEUE_CLAIM_TIMEOUT", "-3")
    with pytest.raises(SettingsError) as bad:
        load_settings()
    assert "QUEUE_CLAIM_TIMEOUT" in bad.value.message
    monkeypatch.delenv("QUEUE_STORAGE")
    monkeypatch.setenv("QUEUE_CLAIM_TIMEOUT", "5")
    with pytest.raises(SettingsError) as missing:
        load_settings()
    assert "QUEUE_STORAGE" in missing.value.message


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("QUEUE_STORAGE", "conn")
    monkeypatch.setenv("QUEUE_ROOT_ACCESS_TOKEN", "y" * 30)
    monkeypatch.setenv("QUEUE_CLAIM_TIMEOUT", "1.5")
    monkeypatch.setenv("QUEUE_PORT", "9999")
    settings = load_settings()
    assert settings.claim_timeout == 1.5 and settings.public_root_url == "http://127.0.0.1:9999"


@pytest.mark.parametrize(
    "text, seconds", [("00:00:01", 1), ("00:00:00.500", 0.5), ("01:02:03", 3723), ("1.00:00:00", 86400), (250, 0.25)]
)
def test_timespans(text, seconds):
    assert parse_timespan(text) == seconds


def test_polling_backs_off_when_idle_and_resets_on_messages():
    check_back_off(MemoryQueues(), scale=0.25)  # the memory queues answer at once: a quarter of the real waits


@pytest.mark.looptime
async def test_a_put_by_this_process_wakes_the_queues_trigger(monkeypatch):
    """A trigger idle in its back-off polls at once when a message is put on its queue in this process
    (PUT_LISTENERS, as the local host registers it), instead of when its wait ends (here at least 0.8 s later).
    On the loop's fake clock (looptime): the waits below move it on without the wall clock."""
    from local_host import triggers
    from shared.storage.base import PUT_LISTENERS

    monkeypatch.setattr(triggers, "MIN_POLLING_INTERVAL", 1.0)  # its first idle wait: 0.8-1 s
    loop = asyncio.get_running_loop()
    store = MemoryQueues()
    handled: list[float] = []

    async def handle(msg: object) -> None:
        handled.append(loop.time())

    runner = QueueTriggerRunner("f", "q", handle, "msg", store, QueueOptions(max_polling_interval=30))
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    await asyncio.sleep(0.2)  # idle: the next poll is at least 0.6 s away
    listener = lambda queue: runner.wake() if queue == "q" else None  # noqa: E731
    PUT_LISTENERS.append(listener)
    try:
        put_at = loop.time()
        await store.put("q", b"{}")
        await store.put("other", b"{}")  # another queue's put wakes nothing here
        await asyncio.sleep(0.3)
    finally:
        PUT_LISTENERS.remove(listener)
        stop.set()
        await task
    assert len(handled) == 1 and handled[0] - put_at < 0.3


def test_host_json_is_validated(tmp_path):
    path = tmp_path / "host.json"
    path.write_text('{"extensions": {"queues": {"batchSize": 64}}}')
    with pytest.raises(ValueError, match="batchSize"):
        QueueOptions.from_host_json(path)
    path.write_text('{"extensions": {"queues": {"messageEncoding": "none"}}}')
    with pytest.raises(ValueError, match="base64"):
        QueueOptions.from_host_json(path)
    assert QueueOptions.from_host_json(tmp_path / "missing.json").max_dequeue_count == 5


def test_tune_gc_freezes_what_the_app_made_and_raises_the_young_threshold():
    import gc

    from local_host.host import GC_THRESHOLDS, tune_gc

    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 1000  # the modules this test process imported
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.mark.looptime
async def test_a_lease_keeps_a_running_message_hidden_and_ends_with_its_last_receipt(monkeypatch):
    """On the loop's fake clock (looptime), which the queue's visibility follows too: the waits below move both on
    without the wall clock."""
    from local_host import triggers

    monkeypatch.setattr(triggers, "RECEIVE_VISIBILITY", 0.6)  # renewed every 0.3 s
    loop = asyncio.get_running_loop()
    start = timeutil.now()
    store = MemoryQueues(clock=lambda: start + dt.timedelta(seconds=loop.time()))
    await store.put("q", b"{}")
    [message] = await store.receive("q", 1, triggers.RECEIVE_VISIBILITY)
    async with triggers.Lease(store, "q", message) as lease:
        await asyncio.sleep(0.9)  # longer than the lease: without renewals the message would be back
        assert await store.receive("q", 1, 1) == []
    assert lease.message.pop_receipt != message.pop_receipt  # renewed
    await store.delete("q", lease.message)
    await asyncio.sleep(0.7)
    assert await store.approximate_count("q") == 0  # deleted with the last receipt, not left to come back


@pytest.mark.looptime
async def test_the_host_serves_once_the_timers_that_run_at_startup_ran_or_their_bound_passed(monkeypatch):
    """What a timer with run_on_startup does (the exchanges' declaration) is done before the host answers; one that
    takes longer than STARTUP_SECONDS does not hold the host back."""
    from local_host import host as host_mod
    from local_host.triggers import TimerTriggerRunner

    monkeypatch.setattr(host_mod, "STARTUP_SECONDS", 0.3)
    fired: list[str] = []

    async def quick(timer) -> None:
        fired.append("quick")

    async def slow(timer) -> None:
        await asyncio.sleep(30)

    stop = asyncio.Event()
    runners = [
        TimerTriggerRunner("quick", "0 0 0 1 1 *", quick, "timer", True),
        TimerTriggerRunner("later", "0 0 0 1 1 *", quick, "timer", False),
    ]
    tasks = [asyncio.create_task(r.run(stop)) for r in runners]
    await host_mod._started(runners)
    assert fired == ["quick"]  # the startup run is over; the other timer has not fired
    slow_runner = TimerTriggerRunner("slow", "0 0 0 1 1 *", slow, "timer", True)
    tasks.append(asyncio.create_task(slow_runner.run(stop)))
    loop = asyncio.get_running_loop()
    began = loop.time()  # the loop's fake clock (looptime): the slow timer's 30 s and the bound take no real time
    await host_mod._started([slow_runner])
    assert loop.time() - began == pytest.approx(0.3)
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
