"""No task lost, no claim doubled: processes die at chosen points (QUEUE_FAULTS), messages are lost or poisoned,
and the normal triggers with the reconciler bring every task to the outcome it should have. Each test has an
Azurite of its own, and ends with the full invariant audit (shared/maintenance/invariants.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import taskcluster
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.queue import QueueClient

from local_host import azurite as azurite_mod
from shared import timeutil
from shared.domain.events import EXCHANGES
from shared.domain.messages import (
    CLAIM_DUE_QUEUE,
    CLAIM_QUEUE,
    DEADLINE_DUE_QUEUE,
    DEADLINE_QUEUE,
    pending_queue,
    poison_queue,
)
from shared.faults import EXIT_STATUS
from shared.storage.sharded import queue_account, shard_name
from tests.acceptance.helpers import BROKER, run_audit
from tests.amqp import delete_exchanges
from tests.conftest import (
    HostProcess,
    azurite_env,
    shards_of,
    slugid,
    task_definition,
    task_queue_id,
    wait_for,
)

WORKER = {"workerGroup": "wg", "workerId": "w1"}
# Short everything: 10-second claims (3 where a claim must expire), the reconciler every second judging states
# older than 2 seconds, messages of a dead host visible again after 2 seconds.
FAST = {
    "claim_timeout": 10,
    "deadline_delay": 0,
    "claim_work_wait": 1,
    "claim_work_poll_interval": 0.2,
    "pending_hint_visibility": 2,
    "reconcile_schedule": "*/1 * * * * *",
    "reconcile_grace": 2,
    "extra_env": {"QUEUE_LOCAL_HOST_MESSAGE_LEASE": "2"},
}


NAMESPACE = f"test-faults-{uuid.uuid4().hex[:8]}"
# Where a broker runs (always in CI), the crash tests also publish, and the audit checks every event went out.
BUS = (
    {"event_bus": "amqp", "pulse_namespace": NAMESPACE, "event_lease": 2, "event_retry_max_delay": 2} if BROKER else {}
)


@pytest.fixture(scope="module", autouse=True)
def _drop_exchanges() -> Iterator[None]:
    yield
    if BUS:
        delete_exchanges(NAMESPACE, list(EXCHANGES))


def settings_of(**overrides: Any) -> dict[str, Any]:
    merged = {**FAST, **BUS, **overrides}
    merged["extra_env"] = {**FAST["extra_env"], **overrides.get("extra_env", {})}
    return merged


def crash(host: HostProcess, call: Callable[[], Any]) -> None:
    """Make a call that kills `host` at its armed fault point."""
    with contextlib.suppress(Exception):
        call()
    assert wait_for(lambda: host.process.poll() is not None, timeout=20)
    assert host.process.returncode == EXIT_STATUS, host.log()


class Workers:
    """claimWork + reportCompleted until the tasks are completed; every claim handed out is recorded."""

    def __init__(self, queue: taskcluster.Queue, tq: str) -> None:
        self.queue, self.tq = queue, tq
        self.claims: list[tuple[str, int]] = []

    def complete(self, task_ids: list[str], timeout: float = 60) -> None:
        wanted = set(task_ids)

        def step() -> bool:
            for claim in self.queue.claimWork(self.tq, {**WORKER, "tasks": 32})["tasks"]:
                key = (claim["status"]["taskId"], claim["runId"])
                self.claims.append(key)
                self.queue.reportCompleted(*key)
            return all(self.queue.status(t)["status"]["state"] == "completed" for t in wanted)

        wait_for(step, timeout=timeout, interval=0.2)
        doubled = [k for k, n in Counter(self.claims).items() if n > 1]
        assert doubled == [], f"runs claimed twice: {doubled}"


def queue_connection(azurite: azurite_mod.Azurite, queue: str) -> str:
    """The connection string of the account (of this Azurite) that holds `queue`, sharded as the hosts are."""
    accounts = int(azurite_env(azurite).get("QUEUE_STORAGE_SHARDS") or 1)
    return azurite.account_connection_string(queue_account(queue, accounts))


def clear(azurite: azurite_mod.Azurite, queue: str, shards: int = 1) -> None:
    """Lose every message of a queue (of each of its `shards`), hidden ones included (as an operator clearing it
    would)."""
    for name in (shard_name(queue, j) for j in range(shards)):
        with (
            QueueClient.from_connection_string(queue_connection(azurite, name), name) as client,
            contextlib.suppress(ResourceNotFoundError),
        ):  # a shard nothing was put on yet
            client.clear_messages()


def repairs(*hosts: HostProcess) -> Counter[str]:
    found: Counter[str] = Counter()
    for host in hosts:
        for line in host.log().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("event") == "repair":
                    found[record["reason"]] += 1
    return found


@pytest.mark.parametrize("retried", [True, False])
def test_create_task_dies_before_its_write(
    retried: bool, own_hosts: Callable[..., HostProcess], own_azurite: azurite_mod.Azurite
) -> None:
    """Its hint and checks are out, the task is not written: a retry creates it once; without one, nothing is
    left that would keep its group unresolved. (A group named after the task is written in the task's own
    transaction, so nothing of it would be left: the group here has another name, and its member rows are
    written before the task.)"""
    doomed = own_hosts(**settings_of(faults="before-state-write"))
    tq, group = task_queue_id(), slugid()
    task_id, definition = slugid(), task_definition(taskQueueId=tq, taskGroupId=group)
    crash(doomed, lambda: doomed.client().createTask(task_id, definition))
    survivor = own_hosts(**settings_of())
    queue = survivor.client()
    if retried:
        queue.createTask(task_id, definition)  # what a client whose request failed does
        workers = Workers(queue, tq)
        workers.complete([task_id])
        assert workers.claims == [(task_id, 0)]
    else:
        wait_for(lambda: repairs(survivor)["phantom-member"] == 1, timeout=20)
        assert survivor.client().getTaskGroup(group)["taskGroupId"] == group
    assert run_audit(own_azurite) == []


@pytest.mark.parametrize("fault", ["after-state-write", "claimed-before-response"])
def test_claim_work_dies_between_claim_and_response(
    fault: str, own_hosts: Callable[..., HostProcess], own_azurite: azurite_mod.Azurite
) -> None:
    """The run is claimed but no worker heard of it: the claim expires, the retry is claimed once."""
    survivor = own_hosts(**settings_of(claim_timeout=3))
    doomed = own_hosts(**settings_of(claim_timeout=3, faults=fault))
    tq = task_queue_id()
    task_id = slugid()
    survivor.client().createTask(task_id, task_definition(taskQueueId=tq))
    # Another worker than the one that goes on: the same worker polling again would be handed the same claim
    # back by the hint, which comes back since it was not deleted (it never heard of it: not a double claim).
    crash(doomed, lambda: doomed.client().claimWork(tq, {"workerGroup": "wg", "workerId": "lost", "tasks": 1}))
    queue = survivor.client()
    workers = Workers(queue, tq)
    workers.complete([task_id])
    runs = queue.status(task_id)["status"]["runs"]
    assert [(r["state"], r.get("reasonResolved")) for r in runs] == [
        ("exception", "claim-expired"),
        ("completed", "completed"),
    ]
    assert workers.claims == [(task_id, 1)]  # run 0 reached no worker; its hint, if left, claimed nothing
    assert run_audit(own_azurite) == []


def test_report_dies_after_its_write(own_hosts: Callable[..., HostProcess], own_azurite: azurite_mod.Azurite) -> None:
    """reportCompleted wrote the resolution and died before deleting the run's index row and answering: the
    worker's retry is answered from the stored outcome, the dependent is released, the index row goes."""
    survivor = own_hosts(**settings_of(claim_timeout=60))
    doomed = own_hosts(**settings_of(claim_timeout=60, faults="after-state-write"))
    tq = task_queue_id()
    root, dependent = slugid(), slugid()
    queue = survivor.client()
    queue.createTask(root, task_definition(taskQueueId=tq))
    queue.createTask(dependent, task_definition(taskQueueId=tq, dependencies=[root]))
    [claim] = queue.claimWork(tq, {**WORKER, "tasks": 1})["tasks"]
    crash(doomed, lambda: doomed.client().reportCompleted(root, claim["runId"]))
    assert queue.reportCompleted(root, claim["runId"])["status"]["state"] == "completed"  # the worker retries
    Workers(queue, tq).complete([dependent])
    wait_for(lambda: queue.taskQueueCounts(tq)["claimedTasks"] == 0, timeout=20)  # the stale index row went
    assert repairs(survivor)["run-index"] == 1
    assert run_audit(own_azurite) == []


def test_resolution_dies_mid_page(own_hosts: Callable[..., HostProcess], own_azurite: azurite_mod.Azurite) -> None:
    """The resolution scheduled part of a page of dependents and died; its message comes back, and every
    dependent gets exactly one pending run."""
    doomed = own_hosts(**settings_of(claim_timeout=30, faults="resolution-mid-page"))
    queue = doomed.client()
    tq = task_queue_id()
    root = slugid()
    queue.createTask(root, task_definition(taskQueueId=tq))
    dependents = [slugid() for _ in range(80)]
    for task_id in dependents:
        queue.createTask(task_id, task_definition(taskQueueId=tq, taskGroupId=root, dependencies=[root]))
    [claim] = queue.claimWork(tq, {**WORKER, "tasks": 1})["tasks"]
    crash(doomed, lambda: queue.reportCompleted(root, claim["runId"]))  # its resolution trigger dies
    survivor = own_hosts(**settings_of(claim_timeout=30))
    workers = Workers(survivor.client(), tq)
    workers.complete(dependents)
    assert sorted(workers.claims) == sorted((t, 0) for t in dependents)  # one run each, each claimed once
    assert run_audit(own_azurite) == []


def test_lost_messages_are_repaired_by_the_reconciler(
    own_hosts: Callable[..., HostProcess], own_azurite: azurite_mod.Azurite
) -> None:
    host = own_hosts(**settings_of(claim_timeout=3))
    queue = host.client()
    tq = task_queue_id()
    # A hint lost (a polling worker deleted it without claiming; a queue cleared):
    lost_hint = slugid()
    queue.createTask(lost_hint, task_definition(taskQueueId=tq))
    shards = shards_of(host.env)
    clear(own_azurite, pending_queue(tq, "lowest"), shards.pending)
    # A claim check lost:
    lost_claim = slugid()
    queue.createTask(lost_claim, task_definition(taskQueueId=tq, priority="high"))
    [claim] = queue.claimWork(tq, {**WORKER, "tasks": 1})["tasks"]
    assert claim["status"]["taskId"] == lost_claim
    for name in (CLAIM_QUEUE, CLAIM_DUE_QUEUE):  # parked or not (a claim of 3 s is not)
        clear(own_azurite, name, shards.checks)
    # A deadline check lost:
    lost_deadline = slugid()
    queue.createTask(
        lost_deadline,
        task_definition(taskQueueId=task_queue_id(), deadline=timeutil.iso(timeutil.now() + dt.timedelta(seconds=3))),
    )
    for name in (DEADLINE_QUEUE, DEADLINE_DUE_QUEUE):
        clear(own_azurite, name, shards.checks)

    workers = Workers(queue, tq)
    workers.complete([lost_hint, lost_claim], timeout=60)
    assert (lost_hint, 0) in workers.claims and (lost_claim, 1) in workers.claims
    assert [r.get("reasonResolved") for r in queue.status(lost_claim)["status"]["runs"]] == [
        "claim-expired",
        "completed",
    ]
    wait_for(lambda: queue.status(lost_deadline)["status"]["state"] == "exception", timeout=30)
    assert queue.status(lost_deadline)["status"]["runs"][-1]["reasonResolved"] == "deadline-exceeded"
    found = repairs(host)
    assert found["hint-lost"] >= 1 and found["claim-expired"] == 1 and found["deadline-exceeded"] == 1, found
    assert run_audit(own_azurite) == []


def test_poison_message_is_reported_and_its_task_moves_on(
    own_hosts: Callable[..., HostProcess], own_azurite: azurite_mod.Azurite, tmp_path: Path
) -> None:
    """The resolution handler keeps failing (a bug, an outage): its message ends in the poison queue and the
    dependent waits. Once the handler works again, the reconciler reports the message and runs it."""
    host_json = tmp_path / "host.json"
    host_json.write_text(
        json.dumps(
            {
                "version": "2.0",
                "extensions": {
                    "queues": {
                        "maxPollingInterval": "00:00:00.200",
                        "visibilityTimeout": "00:00:00",
                        "maxDequeueCount": 2,
                    }
                },
            }
        )
    )
    # Resolutions go straight to their messages: no grace in which the resolver's own process tries first, which
    # would delay the poisoning past the reconciler's grace (it would unblock the dependent itself).
    broken = own_hosts(**settings_of(faults="resolve-dependencies:raise", resolution_grace=0), host_json=host_json)
    queue = broken.client()
    tq = task_queue_id()
    root, dependent = slugid(), slugid()
    queue.createTask(root, task_definition(taskQueueId=tq))
    queue.createTask(dependent, task_definition(taskQueueId=tq, dependencies=[root]))
    [claim] = queue.claimWork(tq, {**WORKER, "tasks": 1})["tasks"]
    queue.reportCompleted(root, claim["runId"])
    # The root's resolution message is its claim check, turned into it (a claim of 10 s is not parked): it is
    # poisoned in the triggered claim queue's poison.
    poisoned = poison_queue(shards_of(broken.env).check_queue(CLAIM_DUE_QUEUE, root))
    wait_for(lambda: f"moved to {poisoned}" in broken.log(), timeout=30)
    wait_for(lambda: "poison message still fails" in broken.log(), timeout=30)  # its reconciler tried, reported
    assert queue.status(dependent)["status"]["state"] == "unscheduled"
    broken.stop()

    fixed = own_hosts(**settings_of(), host_json=host_json)
    workers = Workers(fixed.client(), tq)
    workers.complete([dependent], timeout=60)
    assert f"poison message in {poisoned}" in fixed.log()
    assert repairs(fixed)["poison"] == 1
    with QueueClient.from_connection_string(queue_connection(own_azurite, poisoned), poisoned) as client:
        assert client.get_queue_properties().approximate_message_count == 0
    assert run_audit(own_azurite) == []
