"""Events published to a real RabbitMQ through the official client's API calls: exchanges, routing keys, CC
routes, payloads valid against the official schemas; bindings with `*` and `#`; no event lost when a process
dies between a change and its publication or while the broker is down; in order per task."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from local_host import azurite as azurite_mod
from shared.bus.bindings import binding_matches
from shared.domain.events import EXCHANGES, GROUP_EXCHANGES, TASK_EXCHANGES
from shared.faults import EXIT_STATUS
from shared.validation import errors_of
from tests.amqp import AMQP_URL, Listener, Received, TcpProxy, broker_reachable, delete_exchanges, fresh_vhost
from tests.conftest import HostProcess, azurite_of_its_own, slugid, task_definition, task_queue_id, wait_for

# Skipped without a broker on a developer's machine; `.ci/run` starts one and sets QUEUE_TEST_REQUIRE_BROKER.
pytestmark = pytest.mark.skipif(
    not broker_reachable() and not os.environ.get("QUEUE_TEST_REQUIRE_BROKER"),
    reason="no AMQP broker on 127.0.0.1:5672",
)

NAMESPACE = f"test-{uuid.uuid4().hex[:10]}"  # exchanges of this test session only
WORKER = {"workerGroup": "wg-1", "workerId": "worker-1"}
BUS = {
    "event_bus": "amqp",
    "pulse_namespace": NAMESPACE,
    "event_lease": 2,
    "event_retry_max_delay": 2,
    "claim_work_wait": 2,
    "claim_work_poll_interval": 0.2,
}


@pytest.fixture(scope="module", autouse=True)
def _drop_exchanges() -> Iterator[None]:
    yield
    delete_exchanges(NAMESPACE, list(EXCHANGES))


@pytest.fixture(scope="module")
def bus_azurite(tmp_path_factory) -> Iterator[azurite_mod.Azurite]:
    with azurite_of_its_own(tmp_path_factory, "bus-azurite") as instance:
        yield instance


@pytest.fixture(scope="module")
def bus_host(host_factory: Callable[..., HostProcess], bus_azurite: azurite_mod.Azurite) -> Iterator[HostProcess]:
    """A host publishing to RabbitMQ, with 3-second claims for the expiry cases (stopped before its Azurite)."""
    host = host_factory(storage=bus_azurite.connection_string, claim_timeout=3, deadline_delay=0, **BUS)
    yield host
    host.stop()


@pytest.fixture
def listen() -> Iterator[Callable[..., Listener]]:
    listeners: list[Listener] = []

    def make(bindings: list[tuple[str, str]]) -> Listener:
        listener = Listener(NAMESPACE, bindings)
        listeners.append(listener)
        return listener

    yield make
    for listener in listeners:
        listener.close()


def on_all(pattern: str, exchanges: Any = TASK_EXCHANGES) -> list[tuple[str, str]]:
    return [(exchange, pattern) for exchange in exchanges]


# Taskcluster's queue's exchanges (services/queue/src/exchanges.js, v106): what Pulse consumers bind to.
TASKCLUSTER_EXCHANGES = (
    "task-defined",
    "task-pending",
    "task-running",
    "artifact-created",
    "task-completed",
    "task-failed",
    "task-exception",
    "task-group-resolved",
    "task-group-sealed",
    "task-priority-changed",
    "task-group-priority-changed",
)


def test_consumers_bind_to_every_exchange_before_the_first_event(host_factory, bus_azurite):
    """On a vhost created for the test, which this queue never published to, a Pulse consumer (which binds and
    declares nothing) binds to every exchange of the queue's reference as soon as the host answers ping, before any
    task exists; then the events arrive. Taskcluster's publisher asserts its exchanges when it connects; this
    queue's declares them at its start (functions/events.py) and at every connection (shared/bus/amqp.py)."""
    with fresh_vhost() as vhost:
        namespace = f"test-{uuid.uuid4().hex[:10]}"  # where rabbitmqctl cannot be run: exchanges never declared
        url = vhost or AMQP_URL
        host = host_factory(
            storage=bus_azurite.connection_string, **{**BUS, "pulse_namespace": namespace}, amqp_url=url
        )
        listener = None
        try:
            reference = httpx.get(f"{host.root_url}/references/queue/v1/exchanges.json").json()
            exchanges = [entry["exchange"] for entry in reference["entries"]]
            assert set(TASKCLUSTER_EXCHANGES) <= set(exchanges)
            listener = Listener(namespace, [(exchange, "#") for exchange in exchanges], url=url, declare=False)
            task_id = slugid()
            host.client().createTask(task_id, task_definition())
            arrived = listener.wait_for(2, lambda m: m.payload.get("status", {}).get("taskId") == task_id)
            assert {m.exchange for m in arrived} == {"task-defined", "task-pending"}
        finally:
            if listener is not None:
                listener.close()
            host.stop()
            if vhost is None:
                delete_exchanges(namespace, list(EXCHANGES))


def of_task(task_id: str) -> Callable[[Received], bool]:
    return lambda m: m.routing_key.split(".")[1] == task_id


def assert_valid(messages: list[Received]) -> None:
    for m in messages:
        assert errors_of(EXCHANGES[m.exchange], m.payload) == [], m


def assert_in_order(messages: list[Received]) -> None:
    """In order per stream: each message's position is at most one past the highest seen before it (a
    re-published run starts again from the cursor, so earlier positions may repeat, never run ahead)."""
    highest = 0
    for m in messages:
        assert m.seq <= highest + 1, [x.seq for x in messages]
        highest = max(highest, m.seq)


def test_worker_loop_publishes_each_exchange_with_routing_key_and_cc(
    bus_host: HostProcess, listen: Callable[..., Listener]
) -> None:
    queue = bus_host.client()
    tq = task_queue_id()
    prov, wt = tq.split("/")
    route = f"index.{uuid.uuid4().hex[:12]}.latest"
    primary = listen(on_all(f"primary.*.*.*.*.{prov}.{wt}.#"))
    routed = listen(on_all(f"route.{route}"))
    task_id = slugid()
    queue.createTask(
        task_id,
        task_definition(
            taskQueueId=tq, routes=[route], tags={"kind": "test"}, schedulerId="sched-1", taskGroupId=task_id
        ),
    )
    [claim] = queue.claimWork(tq, {**WORKER, "tasks": 1})["tasks"]
    expires = claim["task"]["expires"]
    queue.createArtifact(
        task_id,
        0,
        "public/ref",
        {"storageType": "reference", "expires": expires, "contentType": "text/html", "url": "https://example.com"},
    )
    upload = queue.createArtifact(
        task_id,
        0,
        "public/log",
        {"storageType": "azure", "expires": expires, "contentType": "text/plain", "contentLength": 3},
    )
    assert httpx.put(upload["putUrl"], content=b"log", headers=upload["headers"]).status_code == 201
    queue.finishArtifact(task_id, 0, "public/log", {"uploadId": upload["uploadId"]})
    queue.reportCompleted(task_id, 0)
    messages = primary.wait_for(6)
    assert [m.exchange for m in messages] == [
        "task-defined",
        "task-pending",
        "task-running",
        "artifact-created",
        "artifact-created",
        "task-completed",
    ]
    running_key = f"primary.{task_id}.0.wg-1.worker-1.{prov}.{wt}.sched-1.{task_id}._"
    assert [m.routing_key for m in messages] == [
        f"primary.{task_id}._._._.{prov}.{wt}.sched-1.{task_id}._",
        f"primary.{task_id}.0._._.{prov}.{wt}.sched-1.{task_id}._",
        *[running_key] * 4,
    ]
    assert all(m.headers == {"CC": [f"route.{route}"]} for m in messages)
    assert all(m.content_type == "application/json" and m.persistent for m in messages)
    assert [m.seq for m in messages] == [1, 2, 3, 4, 5, 6]
    assert_valid(messages)
    assert messages[0].payload["task"] == {"tags": {"kind": "test"}}
    assert messages[2].payload["takenUntil"] == claim["takenUntil"]
    assert [m.payload["artifact"] for m in messages[3:5]] == [
        {"storageType": "reference", "name": "public/ref", "expires": expires, "contentType": "text/html"},
        {"storageType": "azure", "name": "public/log", "expires": expires, "contentType": "text/plain"},
    ]
    assert messages[5].payload["status"]["state"] == "completed"
    # The CC'd copies arrive on a queue bound to the route only, with the primary routing key.
    copies = routed.wait_for(6)
    assert [(m.exchange, m.routing_key, m.payload) for m in copies] == [
        (m.exchange, m.routing_key, m.payload) for m in messages
    ]
    # Recorded in order too, and listed by the API.
    listed = httpx.get(f"{bus_host.root_url}/api/queue/v1/task/{task_id}/events").json()["events"]
    assert [e["payload"] for e in listed] == [m.payload for m in messages]


def test_exceptions_retries_and_reruns(bus_host: HostProcess, listen: Callable[..., Listener]) -> None:
    queue = bus_host.client()
    tq = task_queue_id()
    prov, wt = tq.split("/")
    listener = listen(on_all(f"primary.*.*.*.*.{prov}.{wt}.#"))
    expired, failed, cancelled = slugid(), slugid(), slugid()
    queue.createTask(expired, task_definition(taskQueueId=tq, retries=1, priority="high"))
    queue.claimWork(tq, {**WORKER, "tasks": 1})  # then let the 3-second claim expire
    queue.createTask(failed, task_definition(taskQueueId=tq, priority="lowest"))
    queue.createTask(cancelled, task_definition(taskQueueId=tq, dependencies=[failed]))  # unscheduled
    wait_for(lambda: queue.status(expired)["status"]["runs"][0]["state"] == "exception", timeout=20)
    claims = queue.claimWork(tq, {**WORKER, "tasks": 2})["tasks"]
    assert {c["status"]["taskId"] for c in claims} == {expired, failed}
    queue.reportFailed(failed, 0)
    queue.reportException(expired, 1, {"reason": "malformed-payload"})
    queue.cancelTask(cancelled)
    queue.rerunTask(failed)
    names = {
        expired: [
            "task-defined",
            "task-pending",
            "task-running",
            "task-exception",
            "task-pending",
            "task-running",
            "task-exception",
        ],
        failed: ["task-defined", "task-pending", "task-running", "task-failed", "task-pending"],
        cancelled: ["task-defined", "task-exception"],
    }
    for task_id, expected in names.items():
        got = listener.wait_for(len(expected), of_task(task_id))
        assert [m.exchange for m in got] == expected, task_id
        assert_valid(got)
    retried = listener.messages(of_task(expired))
    assert retried[3].payload["status"]["runs"][0]["reasonResolved"] == "claim-expired"
    assert retried[4].payload["runId"] == 1 and retried[4].routing_key.split(".")[2] == "1"
    assert listener.messages(of_task(failed))[-1].payload["status"]["runs"][1]["reasonCreated"] == "rerun"
    exception = listener.messages(of_task(cancelled))[-1]
    assert exception.payload["status"]["runs"][0]["reasonResolved"] == "canceled"
    assert exception.routing_key.split(".")[3:5] == ["_", "_"]


def test_group_and_priority_exchanges(bus_host: HostProcess, listen: Callable[..., Listener]) -> None:
    queue = bus_host.client()
    group = slugid()
    group_listener = listen(on_all(f"primary.{group}.#", GROUP_EXCHANGES))
    task_listener = listen([("task-priority-changed", f"#.{group}.*")])
    task_id = slugid()
    tq = task_queue_id()
    queue.createTask(task_id, task_definition(taskQueueId=tq, taskGroupId=group, schedulerId="sched-2"))
    queue.changeTaskPriority(task_id, {"newPriority": "high"})
    queue.changeTaskGroupPriority(group, {"newPriority": "low"})
    queue.sealTaskGroup(group)
    queue.claimWork(tq, {**WORKER, "tasks": 1})
    queue.reportCompleted(task_id, 0)
    got = group_listener.wait_for(3)
    assert [m.exchange for m in got] == ["task-group-priority-changed", "task-group-sealed", "task-group-resolved"]
    assert all(m.routing_key == f"primary.{group}.sched-2._" and m.headers == {} for m in got)
    assert got[0].payload["tasksAffected"] == 1 and got[0].payload["newPriority"] == "low"
    assert got[1].payload["sealed"] == got[2].payload["sealed"]
    assert_valid(got)
    changes = task_listener.wait_for(2)
    assert [(m.payload["oldPriority"], m.payload["newPriority"]) for m in changes] == [
        ("lowest", "high"),
        ("high", "low"),
    ]
    assert_valid(changes)


def test_bindings_with_star_and_hash_route_as_rabbitmq_does(
    bus_host: HostProcess, listen: Callable[..., Listener]
) -> None:
    """What each binding receives is what `binding_matches` says (the matcher the Service Bus rules are checked
    against), on the primary routing key or any CC route."""
    queue = bus_host.client()
    tq = task_queue_id()
    prov, wt = tq.split("/")
    tag = uuid.uuid4().hex[:10]
    task_id = slugid()
    patterns = [
        f"primary.{task_id}.#",
        f"*.{task_id}.*.*.*.*.*.*.*.*",  # ten words
        f"*.{task_id}.*.*.*.*.*.*.*",  # nine words: matches nothing
        f"primary.{task_id}.0.#",
        f"primary.*.*.*.*.{prov}.{wt}.nobody.#",
        f"route.{tag}.*",
        f"route.{tag}.#",
        f"route.{tag}.a.#",
        f"#.{tag}.a.b",
        f"#.{task_id}.#",
    ]
    listeners = {p: listen([("task-defined", p), ("task-pending", p)]) for p in patterns}
    routes = [f"{tag}.a", f"{tag}.a.b"]
    queue.createTask(task_id, task_definition(taskQueueId=tq, routes=routes))
    keys = [f"primary.{task_id}._._._.{prov}.{wt}.-.{task_id}._", f"primary.{task_id}.0._._.{prov}.{wt}.-.{task_id}._"]
    time.sleep(1.5)
    # Wait for every binding that should receive both messages, then check every binding exactly.
    for pattern, listener in listeners.items():
        expected = [
            k
            for k in keys
            if binding_matches(pattern, k) or any(binding_matches(pattern, f"route.{r}") for r in routes)
        ]
        if expected:
            listener.wait_for(len(expected))
    time.sleep(0.5)
    for pattern, listener in listeners.items():
        expected = [
            k
            for k in keys
            if binding_matches(pattern, k) or any(binding_matches(pattern, f"route.{r}") for r in routes)
        ]
        assert [m.routing_key for m in listener.messages()] == expected, pattern


def test_events_are_recorded_and_listed_without_a_bus(queue_host: HostProcess) -> None:
    queue = queue_host.client()
    task_id = slugid()
    queue.createTask(task_id, task_definition())
    queue.cancelTask(task_id)
    url = f"{queue_host.root_url}/api/queue/v1/task/{task_id}/events"
    first = httpx.get(url, params={"limit": 2}).json()
    assert [e["seq"] for e in first["events"]] == [1, 2] and "continuationToken" in first
    rest = httpx.get(url, params={"limit": 2, "continuationToken": first["continuationToken"]}).json()
    events = first["events"] + rest["events"]
    assert [e["exchange"] for e in events] == [
        f"exchange/taskcluster-queue/v1/{n}" for n in ("task-defined", "task-pending", "task-exception")
    ]
    missing = httpx.get(f"{queue_host.root_url}/api/queue/v1/task/{slugid()}/events")
    assert missing.status_code == 404 and missing.json()["code"] == "ResourceNotFound"


# --- no event lost -------------------------------------------------------------------------------------------


def _crash_then_recover(
    own_hosts: Callable[..., HostProcess], fault: str, listener: Listener, tq: str
) -> tuple[str, list[Received], HostProcess]:
    """A host armed with `fault` handles createTask and dies there; a second host takes over."""
    doomed = own_hosts(faults=fault, **BUS, extra_env={"QUEUE_LOCAL_HOST_MESSAGE_LEASE": "2"})
    task_id = slugid()
    with contextlib.suppress(Exception):
        doomed.client().createTask(task_id, task_definition(taskQueueId=tq))
    assert wait_for(lambda: doomed.process.poll() is not None, timeout=20)
    assert doomed.process.returncode == EXIT_STATUS, doomed.log()
    time.sleep(0.5)
    before_recovery = listener.messages()
    survivor = own_hosts(**BUS)
    return task_id, before_recovery, survivor


@pytest.mark.parametrize("fault", ["after-state-write", "dispatch-before-publish", "dispatch-after-publish"])
def test_a_process_killed_between_change_and_publish_loses_no_event(
    fault: str, own_hosts: Callable[..., HostProcess], listen: Callable[..., Listener]
) -> None:
    tq = task_queue_id()
    prov, wt = tq.split("/")
    listener = listen(on_all(f"primary.*.*.*.*.{prov}.{wt}.#"))
    task_id, before_recovery, survivor = _crash_then_recover(own_hosts, fault, listener, tq)
    # Died before publishing anything, or after publishing the first event.
    assert [m.seq for m in before_recovery] == ([1] if fault == "dispatch-after-publish" else [])
    queue = survivor.client()
    assert queue.status(task_id)["status"]["state"] == "pending"  # the change itself was stored
    queue.claimWork(tq, {**WORKER, "tasks": 1})
    queue.reportCompleted(task_id, 0)
    got = wait_for(lambda: (m := listener.messages()) and m[-1].exchange == "task-completed" and m, timeout=30)
    unique = list(dict.fromkeys(m.seq for m in got))
    assert unique == [1, 2, 3, 4]
    assert [m.exchange for m in sorted({m.seq: m for m in got}.values(), key=lambda m: m.seq)] == [
        "task-defined",
        "task-pending",
        "task-running",
        "task-completed",
    ]
    assert_in_order(got)
    if fault == "dispatch-after-publish":
        assert [m.seq for m in got][:3] == [1, 1, 2]  # the one published before the crash, again


@pytest.mark.parametrize("dependent", [False, True], ids=["alone", "with-a-dependent"])
def test_a_resolution_killed_before_publishing_is_followed_up_by_its_claim_check(
    dependent: bool, own_hosts: Callable[..., HostProcess], listen: Callable[..., Listener]
) -> None:
    """reportCompleted wrote the resolution, with nothing put before it (its run's claim check stands in), and its
    process died before publishing: the check (or the resolution message it became, where a dependent waits)
    comes due in another host, which publishes the task's events, its group's, and releases the dependent."""
    tq = task_queue_id()
    prov, wt = tq.split("/")
    listener = listen(on_all(f"primary.*.*.*.*.{prov}.{wt}.#"))
    group_listener = listen(on_all("primary.#", GROUP_EXCHANGES))
    survivor = own_hosts(**BUS, claim_timeout=8, resolution_grace=2)
    queue = survivor.client()
    task_id = slugid()
    queue.createTask(task_id, task_definition(taskQueueId=tq))
    follower = slugid()
    if dependent:
        queue.createTask(follower, task_definition(taskQueueId=tq, dependencies=[task_id]))
    [claim] = queue.claimWork(tq, {**WORKER, "tasks": 1})["tasks"]
    assert claim["status"]["taskId"] == task_id
    listener.wait_for(3, of_task(task_id))  # defined, pending, running: published by the survivor
    doomed = own_hosts(**BUS, claim_timeout=8, resolution_grace=2, faults="after-state-write")
    with contextlib.suppress(Exception):
        doomed.client().reportCompleted(task_id, "0")  # the root client may resolve any run
    assert wait_for(lambda: doomed.process.poll() is not None, timeout=20)
    assert doomed.process.returncode == EXIT_STATUS, doomed.log()
    assert queue.status(task_id)["status"]["state"] == "completed"  # the write was stored
    got = wait_for(
        lambda: (m := listener.messages(of_task(task_id))) and m[-1].exchange == "task-completed" and m, timeout=30
    )
    assert [m.exchange for m in sorted({m.seq: m for m in got}.values(), key=lambda m: m.seq)] == [
        "task-defined",
        "task-pending",
        "task-running",
        "task-completed",
    ]
    assert_in_order(got)
    resolved = wait_for(
        lambda: [m for m in group_listener.messages() if m.routing_key.split(".")[1] == task_id], timeout=30
    )
    assert [m.exchange for m in resolved] == ["task-group-resolved"]
    if dependent:
        wait_for(lambda: queue.status(follower)["status"]["state"] == "pending", timeout=30)
    time.sleep(1)  # nothing more comes: the group was not announced twice
    assert len([m for m in group_listener.messages() if m.routing_key.split(".")[1] == task_id]) == 1


def test_broker_down_for_a_while_loses_no_event(
    own_hosts: Callable[..., HostProcess], listen: Callable[..., Listener]
) -> None:
    proxy = TcpProxy()
    try:
        host = own_hosts(**{**BUS, "amqp_url": proxy.url})
        tq = task_queue_id()
        prov, wt = tq.split("/")
        listener = listen(on_all(f"primary.*.*.*.*.{prov}.{wt}.#"))
        queue = host.client()
        before = slugid()
        queue.createTask(before, task_definition(taskQueueId=tq))
        listener.wait_for(2)  # the bus works
        proxy.cut()
        task_ids = [slugid() for _ in range(3)]
        for task_id in task_ids:
            queue.createTask(task_id, task_definition(taskQueueId=tq))
        for claim in queue.claimWork(tq, {**WORKER, "tasks": 4})["tasks"]:
            queue.reportCompleted(claim["status"]["taskId"], 0)
        time.sleep(3)
        assert len(listener.messages()) == 2  # nothing got through meanwhile
        assert "event bus refused an event" in host.log()
        proxy.restore()
        for task_id in [before, *task_ids]:
            got = wait_for(
                lambda task_id=task_id: (
                    (m := listener.messages(of_task(task_id))) and m[-1].exchange == "task-completed" and m
                ),
                timeout=30,
            )
            # At least once: a publish the broker took just as the connection was cut has no confirmation, so it
            # is published again (from the cursor, in order) once the bus is back.
            by_seq = {m.seq: m.exchange for m in got}
            assert [by_seq[seq] for seq in sorted(by_seq)] == [
                "task-defined",
                "task-pending",
                "task-running",
                "task-completed",
            ]
            assert sorted(by_seq) == [1, 2, 3, 4]
            assert_in_order(got)
    finally:
        proxy.close()


def test_a_burst_of_changes_shares_dispatch_messages_and_every_event_arrives(
    bus_host: HostProcess, bus_azurite: azurite_mod.Azurite, listen: Callable[..., Listener]
) -> None:
    """Sixty createTasks at once in one process (a service on the bus host's Azurite) ask for dispatch in fewer
    messages than changes (batches); the host's dispatcher takes those batch messages and every task-defined and
    task-pending event reaches RabbitMQ."""
    import asyncio

    from shared.outbox.rows import DISPATCH_QUEUE
    from shared.runtime import build_queue
    from shared.settings import load_settings
    from shared.storage.base import QueueStore
    from shared.storage.sharded import split_shard
    from tests.conftest import schema_defaults, sharding_settings, stores_of

    class CountingQueues:
        """The host's queue store (sharded as it is), counting the puts to the dispatch queue (its shards)."""

        def __init__(self, inner: QueueStore) -> None:
            self.inner, self.dispatch_puts = inner, 0

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        async def put(self, queue: str, content: bytes, **kwargs: Any) -> Any:
            if split_shard(queue)[0] == DISPATCH_QUEUE:
                self.dispatch_puts += 1
            return await self.inner.put(queue, content, **kwargs)

    tq = task_queue_id()
    listener = listen(on_all(f"primary.*.*.*.*.{tq.replace('/', '.')}.#", ["task-defined", "task-pending"]))
    env = {**bus_host.env, "QUEUE_STORAGE": bus_azurite.connection_string}
    tables, inner = stores_of(env)
    queues = CountingQueues(inner)
    service = build_queue(
        load_settings(storage=env["QUEUE_STORAGE"], root_access_token="x" * 30, **BUS, **sharding_settings(env)),
        tables,
        queues,
    )  # type: ignore[arg-type]
    task_ids = [slugid() for _ in range(60)]

    async def create_all() -> None:
        try:
            definition = task_definition(taskQueueId=tq)
            body = dict(definition, **schema_defaults(definition))
            await asyncio.gather(*(service.creation.create_task(task_id, body) for task_id in task_ids))
        finally:
            await service.close()

    asyncio.run(create_all())
    assert 1 <= queues.dispatch_puts < len(task_ids)
    arrived = listener.wait_for(2 * len(task_ids), timeout=60)
    assert {(m.routing_key.split(".")[1], m.exchange) for m in arrived} == {
        (t, x) for t in task_ids for x in ("task-defined", "task-pending")
    }
