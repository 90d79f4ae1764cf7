"""The scale model of Azure Storage's targets (local_host/limits.py) on a fake clock: each scope's rate, what
counts against which scope, refusals that take no token, and a bound on the scopes remembered."""

from __future__ import annotations

from local_host import limits as limits_mod
from local_host.limits import Limits, partition_of, queue_of
from tests.clock import Ticks as Clock


def admitted(model: Limits, n: int, *request) -> int:
    return sum(model.admit(*request) is None for _ in range(n))


def test_the_account_admits_its_rate_per_second_and_refills():
    clock = Clock()
    model = Limits(factor=100, clock=clock)  # 200 requests/s
    assert admitted(model, 250, "table", "GET", "/acct/Tables", {}, b"") == 200
    assert model.throttled["account"] == 50 and model.first_throttled() == "account"
    clock.now += 0.5
    assert admitted(model, 150, "table", "GET", "/acct/Tables", {}, b"") == 100


def test_a_queue_and_a_partition_each_have_their_own_target():
    clock = Clock()
    model = Limits(factor=1000, clock=clock)  # account 20/s, queue and partition 2/s
    assert admitted(model, 5, "queue", "POST", "/acct/claim-expiry/messages", {}, b"") == 2
    assert admitted(model, 5, "queue", "POST", "/acct/task-deadlines/messages", {}, b"") == 2  # another queue
    assert admitted(model, 5, "table", "GET", "/acct/Tasks(PartitionKey='a',RowKey='x')", {}, b"") == 2
    assert admitted(model, 5, "table", "GET", "/acct/Tasks()", {"$filter": "PartitionKey eq 'b'"}, b"") == 2
    assert model.throttled["queue claim-expiry"] == 3 and model.throttled["partition Tasks/a"] == 3
    assert model.first_throttled() in ("queue", "partition")
    # A query of no partition counts against the account only (8 of its 20 used so far).
    assert admitted(model, 20, "table", "GET", "/acct/Tasks()", {"$filter": "expires lt '2026'"}, b"") == 12


def test_what_a_request_counts_against():
    assert queue_of("/acct/q1/messages/abc") == ("queue", "q1", 1.0)
    assert queue_of("/acct/q1") is None and queue_of("/acct") is None
    assert partition_of("POST", "/acct/Tasks", {}, b'{"PartitionKey": "p1", "RowKey": "r"}') == (
        "partition",
        "Tasks/p1",
        1.0,
    )
    assert partition_of("DELETE", "/acct/Tasks(PartitionKey='p%2F2',RowKey='r')", {}, b"") == (
        "partition",
        "Tasks/p/2",
        1.0,
    )
    batch = (
        "--batch\r\nContent-Type: multipart/mixed; boundary=changeset\r\n\r\n--changeset\r\n"
        "PUT http://127.0.0.1:1/acct/Tasks(PartitionKey='g',RowKey='a') HTTP/1.1\r\n\r\n{}\r\n--changeset\r\n"
        "DELETE http://127.0.0.1:1/acct/Tasks(PartitionKey='g',RowKey='b') HTTP/1.1\r\n\r\n--changeset\r\n"
        'POST http://127.0.0.1:1/acct/Tasks HTTP/1.1\r\n\r\n{"PartitionKey":"g"}\r\n--changeset--\r\n'
    )
    assert partition_of("POST", "/acct/$batch", {}, batch.encode()) == ("partition", "Tasks/g", 3.0)
    assert partition_of("GET", "/acct/Tables", {}, b"") is None


def test_a_batch_counts_each_entity_and_a_refused_request_takes_no_token():
    clock = Clock()
    model = Limits(factor=200, clock=clock)  # partitions of 10 entities/s
    batch = b"".join(b"MERGE http://h/acct/T(PartitionKey='g',RowKey='%d') HTTP/1.1\r\n" % i for i in range(4))
    assert admitted(model, 3, "table", "POST", "/acct/$batch", {}, batch) == 2  # 4 + 4 of 10
    assert admitted(model, 3, "table", "GET", "/acct/T(PartitionKey='g',RowKey='x')", {}, b"") == 2  # the last 2


def test_the_scopes_remembered_are_bounded(monkeypatch):
    monkeypatch.setattr(limits_mod, "MAX_BUCKETS", 500)
    model = Limits(factor=1, clock=Clock())
    for i in range(5_000):
        model.admit("table", "GET", f"/acct/T(PartitionKey='p{i}',RowKey='r')", {}, b"")
        model.admit("queue", "GET", f"/acct/q{i}/messages", {}, b"")
    assert len(model._buckets) <= 500


def test_the_busiest_scopes_are_reported_with_what_they_admitted():
    model = Limits(factor=100, clock=Clock())
    admitted(model, 7, "queue", "PUT", "/acct/claim-expiry/messages/1", {}, b"")
    admitted(model, 3, "table", "GET", "/acct/T(PartitionKey='p',RowKey='r')", {}, b"")
    busiest = model.busiest(3)
    assert busiest[0] == ("account", 10.0, 200.0)
    assert busiest[1] == ("queue claim-expiry", 7.0, 20.0) and busiest[2] == ("partition T/p", 3.0, 20.0)
