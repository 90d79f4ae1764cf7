"""`tc-queue-admin pools` (queue_admin/pools.py): the entry of infra's workerPools a pool gets, checked as infra/
and the queue would check it."""

from __future__ import annotations

import argparse
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_admin.pools import DEFAULTS, POOL_NAME, PoolError, pool_entry, pool_scopes, secret_name
from shared.domain.messages import pending_queues
from shared.domain.tasks import PRIORITIES
from shared.storage.sharded import queue_account

IDENTIFIERS = st.from_regex(r"[a-zA-Z0-9_-]{1,38}", fullmatch=True)
NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,26}[a-z0-9]", fullmatch=True)


def args(**given_: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "name": "builders",
        "task_queue": "proj/builder",
        "worker_group": "azure",
        "image": "registry.example/worker:1",
        "max_executions": DEFAULTS["maxExecutions"],
        "polling_interval": DEFAULTS["pollingInterval"],
        "idle_exit": DEFAULTS["idleExit"],
        "pending_shards": 1,
        "storage_shards": 1,
        "priorities": "",
    }
    return argparse.Namespace(**{**values, **given_})


@given(IDENTIFIERS, IDENTIFIERS, st.integers(1, 16), st.integers(1, 64))
def test_the_rules_read_every_pending_queue_of_the_task_queue_in_the_account_that_holds_it(
    provisioner: str, worker_type: str, pending: int, storage: int
) -> None:
    task_queue = f"{provisioner}/{worker_type}"
    rules = pool_entry(args(task_queue=task_queue, pending_shards=pending, storage_shards=storage))["rules"]
    assert sorted(r["queueName"] for r in rules) == sorted(pending_queues(task_queue, pending))
    assert all(r["account"] == queue_account(r["queueName"], storage) for r in rules)
    assert all(re.fullmatch(r"[a-z0-9](?:[a-z0-9]|-(?!-)){2,62}", r["queueName"]) for r in rules)  # Azure's rule


@given(NAMES)
def test_a_valid_name_makes_names_azure_takes(name: str) -> None:
    entry = pool_entry(args(name=name))
    assert len("caj-" + entry["name"]) <= 32  # a Container Apps job's name
    assert re.fullmatch(r"[0-9a-zA-Z-]{1,127}", secret_name(name))  # a Key Vault secret's
    assert entry["clientId"] == f"worker-pool/{name}"


@given(st.text(max_size=40).filter(lambda name: not POOL_NAME.fullmatch(name)))
def test_any_other_name_is_refused(name: str) -> None:
    with pytest.raises(PoolError):
        pool_entry(args(name=name))


@pytest.mark.parametrize(
    "bad",
    [
        {"task_queue": "no-slash"},
        {"task_queue": "a/b/c"},
        {"task_queue": "a/" + "x" * 39},
        {"worker_group": "has space"},
        {"priorities": "urgent"},
        {"pending_shards": 17},
        {"storage_shards": 0},
        {"max_executions": 0},
        {"polling_interval": 5},
        {"idle_exit": 0},
    ],
)
def test_settings_infra_would_not_take_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(PoolError):
        pool_entry(args(**bad))


def test_priorities_narrow_the_rules_and_the_scopes_are_the_pools() -> None:
    rules = pool_entry(args(priorities="highest,lowest", pending_shards=2))["rules"]
    assert len(rules) == 4 and len(PRIORITIES) * 2 > 4
    assert pool_scopes("p/t", "g", ["secrets:get:x"]) == [
        "queue:claim-work:p/t",
        "queue:worker-id:g/*",
        "secrets:get:x",
    ]
