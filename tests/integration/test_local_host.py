"""The local host runs queue and timer triggers with the Functions host's semantics, on Azurite."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import uuid
from collections import Counter
from pathlib import Path

import pytest

from shared.storage.azure import AzureQueues
from shared.storage.base import put_json
from tests.conftest import start_host, wait_for

SAMPLE = Path(__file__).parent / "sample"


@pytest.fixture
def sample(azurite, tmp_path):
    """Start sample-app hosts (triggers only) on queues of their own; stop them afterwards."""
    prefix = f"s{uuid.uuid4().hex[:12]}"
    record = tmp_path / "record.jsonl"
    record.touch()
    hosts = []

    def start():
        host = start_host(
            azurite.connection_string,
            tmp_path,
            http=False,
            app="tests.integration.sample.function_app:app",
            host_json=SAMPLE / "host.json",
        )
        hosts.append(host)
        return host

    import os

    os.environ["SAMPLE_PREFIX"] = prefix
    os.environ["SAMPLE_RECORD"] = str(record)

    def records(kind):
        return [r for r in map(json.loads, record.read_text().splitlines()) if r["kind"] == kind]

    def put(queue, *bodies):
        async def go():
            store = AzureQueues(azurite.connection_string)
            try:
                for body in bodies:
                    await store.put(f"{prefix}-{queue}", put_json(body))
            finally:
                await store.close()

        asyncio.run(go())

    def peek(queue):
        async def go():
            store = AzureQueues(azurite.connection_string)
            try:
                return await store.approximate_count(f"{prefix}-{queue}")
            finally:
                await store.close()

        return asyncio.run(go())

    class Sample:
        pass

    s = Sample()
    s.start, s.records, s.put, s.count, s.prefix = start, records, put, peek, prefix
    try:
        yield s
    finally:
        for host in hosts:
            host.stop()
        os.environ.pop("SAMPLE_PREFIX", None)
        os.environ.pop("SAMPLE_RECORD", None)


def test_messages_are_processed_once_and_deleted(sample):
    sample.start()
    sample.put("ok", *({"n": i} for i in range(10)))
    done = wait_for(lambda: len(r := sample.records("ok")) >= 10 and r)
    assert sorted(r["body"]["n"] for r in done) == list(range(10))
    assert all(r["dequeue"] == 1 for r in done)
    wait_for(lambda: sample.count("ok") == 0)


def test_batches_run_concurrently_up_to_batch_size_plus_threshold(sample):
    sample.start()
    sample.put("ok", *({"n": i, "sleep": 0.3} for i in range(24)))
    done = wait_for(lambda: len(r := sample.records("ok")) >= 24 and r, timeout=30)
    most = max(r["active"] for r in done)
    assert 2 <= most <= 6, most  # batchSize 4 + newBatchThreshold 2


def test_a_failing_message_is_retried_then_poisoned(sample):
    sample.start()
    sample.put("fail", {"poison": "me"})
    wait_for(lambda: sample.count("fail-poison") == 1, timeout=30)
    attempts = [r["dequeue"] for r in sample.records("fail")]
    assert attempts == [1, 2, 3]  # maxDequeueCount 3
    assert sample.count("fail") == 0


def test_a_message_that_fails_once_succeeds_on_retry(sample):
    sample.start()
    sample.put("flaky", {"x": 1})
    wait_for(lambda: len(sample.records("flaky")) >= 2)
    wait_for(lambda: sample.count("flaky") == 0)
    assert [r["dequeue"] for r in sample.records("flaky")] == [1, 2]
    assert sample.count("flaky-poison") == 0


def test_timer_trigger_fires_on_schedule(sample):
    sample.start()
    ticks = wait_for(lambda: len(r := sample.records("tick")) >= 3 and r, timeout=10)
    gaps = [b["time"] - a["time"] for a, b in itertools.pairwise(ticks)]
    assert all(0.5 < g < 1.6 for g in gaps), gaps


def test_several_host_processes_share_a_queue(sample):
    sample.start()
    sample.start()
    sample.put("ok", *({"n": i, "sleep": 0.2} for i in range(40)))
    done = wait_for(lambda: len(r := sample.records("ok")) >= 40 and r, timeout=30)
    counts = Counter(r["body"]["n"] for r in done)
    assert set(counts) == set(range(40)) and set(counts.values()) == {1}
    assert len({r["pid"] for r in done}) == 2


def test_polling_backs_off_on_azurite(azurite):
    from shared.storage.azure import AzureQueues
    from tests.unit.helpers import check_back_off

    check_back_off(AzureQueues(azurite.connection_string), queue=f"backoff-{uuid.uuid4().hex[:10]}")


@pytest.mark.parametrize("access_log", [False, True])
def test_azurite_access_log_is_off_unless_asked_for(access_log, tmp_path, monkeypatch):
    """Azurite prints a line per request unless `--silent`: about a sixth of its CPU per call (bench.azurite_floor),
    so the embedded Azurite is silent by default and QUEUE_AZURITE_ACCESS_LOG=1 brings the log back."""
    from local_host import azurite as azurite_mod

    monkeypatch.setenv("QUEUE_AZURITE_ACCESS_LOG", "1" if access_log else "0")
    instance = azurite_mod.start(tmp_path / "azurite", in_memory=True)
    try:

        async def create_queue() -> None:
            queues = AzureQueues(instance.connection_string)
            try:
                await queues.ensure_queues([f"log-{uuid.uuid4().hex[:10]}"])
            finally:
                await queues.close()

        asyncio.run(create_queue())
    finally:
        instance.stop()
    requests = [
        line
        for line in (tmp_path / "azurite" / "azurite.log").read_text().splitlines()
        if "/devstoreaccount1/" in line and "HTTP/1.1" in line
    ]
    assert bool(requests) is access_log


def test_azurite_leaves_the_port_the_host_will_bind(tmp_path, monkeypatch):
    """`make run` picks the host's port first and binds it after Azurite started: Azurite's free ports must not
    be that one (two runs side by side once failed so, the host's bind refused)."""
    from local_host import azurite as azurite_mod

    with contextlib.ExitStack() as held:  # held open while taken, so that the six are distinct
        sockets = [held.enter_context(socket.socket()) for _ in range(6)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        fresh = [sock.getsockname()[1] for sock in sockets]
    host_port = fresh[0]
    offered = iter(fresh)  # the first attempt is offered the host's port, the second three others
    monkeypatch.setattr(azurite_mod, "free_port", lambda: next(offered))
    instance = azurite_mod.start(tmp_path / "azurite", in_memory=True, avoid=frozenset({host_port}))
    try:
        assert set(instance.ports.values()) == set(fresh[3:])
    finally:
        instance.stop()
