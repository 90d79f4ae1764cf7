"""The Index's rules on the in-memory connector: paths, ranks, races, namespaces, listings, expiry, indexing of
completed tasks' routes, and the bound of what a process remembers."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import errors, timeutil
from shared.domain.index import (
    INDEX_TABLE,
    IndexedTask,
    IndexedTaskNotFound,
    InvalidIndexPath,
    ancestors,
    entry_partition,
    hour_ceiling,
    route_entries,
    split,
    words,
)
from shared.domain.messages import CLAIM_QUEUE, RESOLVED_QUEUE, ResolvedCheck
from shared.operations import index as index_ops
from shared.storage.keys import encode_key
from tests.conftest import schema_defaults, slugid, task_definition

pytestmark = pytest.mark.service(expiry_delay=0)


def entry(path, task_id=None, rank=0, days=1, clock=None, at=None, data=None):
    now = clock.now if clock else timeutil.to_ms(timeutil.now())
    return IndexedTask(path, task_id or slugid(), rank, data or {}, now + dt.timedelta(days=days), at or now)


# --- paths ----------------------------------------------------------------------------------------------------


def test_paths_words_and_limits():
    assert words("") == [] and words("a.b-c.d_e") == ["a", "b-c", "d_e"]
    assert split("a.b.c") == ("a.b", "c") and split("c") == ("", "c")
    assert ancestors("a.b.c") == [("", "a"), ("a", "b"), ("a.b", "c")] and ancestors("") == []
    for bad, why in [
        ("a..b", "a word is empty"),
        (".a", "a word is empty"),
        ("a.", "a word is empty"),
        ("a/b", "'/'"),
        ("a b", "' '"),
        ("x" * 256, "256 characters"),
        (".".join("a" * 65), "65 words"),
        ("a\nb", "'\\n'"),
    ]:
        with pytest.raises(InvalidIndexPath) as caught:
            words(bad)
        assert why in str(caught.value) and caught.value.status == 400
    with pytest.raises(InvalidIndexPath, match="it is empty"):
        split("")


def test_namespace_expiry_rounds_up_to_the_hour():
    at = dt.datetime(2027, 1, 1, 10, 0, 0, tzinfo=dt.UTC)
    assert hour_ceiling(at) == at
    assert hour_ceiling(at + dt.timedelta(milliseconds=1)) == at + dt.timedelta(hours=1)


def test_route_entries_follow_extra_index():
    definition = {
        "routes": ["index.a.b", "tc-treeherder.x", "index.a.b", "index.bad..path"],
        "expires": "2027-01-01T00:00:00.000Z",
        "extra": {"index": {"rank": 42, "data": {"k": "v"}, "expires": "2026-12-31T00:00:00.000Z"}},
    }
    entries, problems = route_entries(definition)
    assert [(e.path, e.rank, e.data, timeutil.iso(e.expires)) for e in entries] == [
        ("a.b", 42, {"k": "v"}, "2026-12-31T00:00:00.000Z")
    ]
    assert len(problems) == 1 and "bad..path" in problems[0]
    defaults, _ = route_entries({"routes": ["index.x"], "expires": "2027-01-01T00:00:00.000Z", "extra": {}})
    assert (defaults[0].rank, defaults[0].data, timeutil.iso(defaults[0].expires)) == (
        0,
        {},
        "2027-01-01T00:00:00.000Z",
    )
    for wrong in [
        {"rank": "high"},
        {"rank": True},
        {"data": []},
        {"expires": 5},
        {"expires": "tomorrow"},
        {"data": {"x": "y" * 40_000}},
    ]:
        found, problems = route_entries(
            {"routes": ["index.x"], "expires": "2027-01-01T00:00:00.000Z", "extra": {"index": wrong}}
        )
        assert found == [] and problems, wrong


# --- the rank rule ----------------------------------------------------------------------------------------------


async def test_higher_rank_stays_and_equal_rank_later_wins(service, clock):
    index = service.index
    first = await index.insert(entry("proj.latest.build", rank=5, clock=clock))
    lower = entry("proj.latest.build", rank=3, clock=clock)
    assert await index.insert(lower) == first  # the answer is the entry that stays
    assert (await index.find("proj.latest.build")).task_id == first.task_id
    clock.now += dt.timedelta(seconds=1)
    later = entry("proj.latest.build", rank=5, clock=clock)
    assert (await index.insert(later)).task_id == later.task_id
    # A retried indexing of the older completion (same rank, earlier) does not displace the later one.
    assert (await index.insert(first)).task_id == later.task_id
    assert (await index.find("proj.latest.build")).task_id == later.task_id
    higher = entry("proj.latest.build", rank=6, clock=clock, at=clock.now - dt.timedelta(days=1))
    assert (await index.insert(higher)).task_id == higher.task_id


RANKED = st.lists(
    st.tuples(st.integers(-3, 3), st.integers(0, 50)), min_size=1, max_size=8, unique=True
)  # (rank, seconds after the first completion): one completion each


@given(ranked=RANKED, order=st.randoms(use_true_random=False), retries=st.lists(st.integers(0, 7), max_size=8))
def test_the_entry_that_stays_does_not_depend_on_the_order_of_indexing(ranked, order, retries):
    """The rank rule (IndexedTask.replaces), applied as the store applies it, one write at a time over what stands:
    whatever order a path's completions are indexed in, retried or not, the highest rank stays, the latest of
    equal rank; a retry of what stands writes nothing."""
    start = timeutil.to_ms(timeutil.now())
    entries = [
        IndexedTask("p.q", f"task{i}", rank, {}, start + dt.timedelta(days=1), start + dt.timedelta(seconds=at))
        for i, (rank, at) in enumerate(ranked)
    ]
    writes = entries + [entries[i % len(entries)] for i in retries]
    order.shuffle(writes)
    standing = None
    for written in writes:
        if standing is None or written.replaces(standing, start):
            standing = written
        assert not standing.replaces(standing, start)
    assert standing == max(entries, key=lambda e: (e.rank, e.indexed_at))


async def test_racing_inserts_leave_the_highest_rank(service, clock):
    index = service.index
    entries = [entry("race.path", rank=r, clock=clock) for r in (3, 9, 1, 7, 9.5, 2, 8, 0)]

    async def race():
        return await asyncio.gather(*(index.insert(e) for e in entries))

    await race()
    assert (await index.find("race.path")).rank == 9.5
    rows = (await service.stores.tables.query(INDEX_TABLE, "PartitionKey eq @pk", {"pk": "t:race"})).entities
    assert len(rows) == 1


async def test_an_expired_entry_is_invisible_and_replaced_whatever_its_rank(service, clock):
    index = service.index
    await index.insert(entry("old.one", rank=100, clock=clock, days=1))
    clock.now += dt.timedelta(days=2)
    with pytest.raises(IndexedTaskNotFound):
        await index.find("old.one")
    assert (await index.list_tasks("old", limit=10, continuation=None))[0] == []
    fresh = entry("old.one", rank=0, clock=clock)
    assert (await index.insert(fresh)).task_id == fresh.task_id


# --- namespaces and listings -------------------------------------------------------------------------------------


async def test_namespaces_are_listed_with_their_latest_expiry(service, clock):
    index = service.index
    await index.insert(entry("a.b.c.d", clock=clock, days=1))
    await index.insert(entry("a.b.e", clock=clock, days=3))
    await index.insert(entry("a.f", clock=clock, days=2))
    root, _ = await index.list_namespaces("", limit=10, continuation=None)
    assert [n["namespace"] for n in root] == ["a"]
    assert root[0]["expires"] == timeutil.iso(hour_ceiling(clock.now + dt.timedelta(days=3)))
    below_a, _ = await index.list_namespaces("a", limit=10, continuation=None)
    assert {(n["namespace"], n["name"]) for n in below_a} == {("a.b", "b")}
    assert [n["namespace"] for n in (await index.list_namespaces("a.b", limit=10, continuation=None))[0]] == ["a.b.c"]
    assert [t.path for t in (await index.list_tasks("a.b", limit=10, continuation=None))[0]] == ["a.b.e"]
    assert [t.path for t in (await index.list_tasks("a", limit=10, continuation=None))[0]] == ["a.f"]
    # Namespaces expire with their latest entry (rounded up to the hour).
    clock.now += dt.timedelta(days=2, hours=2)
    assert [n["namespace"] for n in (await index.list_namespaces("a.b", limit=10, continuation=None))[0]] == []
    assert [n["namespace"] for n in (await index.list_namespaces("", limit=10, continuation=None))[0]] == ["a"]


async def test_listings_page(service, clock):
    index = service.index
    for i in range(7):
        await index.insert(entry(f"paged.t{i}", clock=clock))
        await index.insert(entry(f"paged.n{i}.x", clock=clock))
    for lister in (index.list_tasks, index.list_namespaces):
        seen, token = [], None
        while True:
            rows, token = await lister("paged", limit=3, continuation=token)
            assert len(rows) <= 3
            seen += rows
            if token is None:
                break
        assert len(seen) == 7


async def test_find_many_pages_over_the_paths_and_skips_what_is_missing(service, clock):
    index = service.index
    paths = [f"many.p{i}" for i in range(5)]
    for p in paths[:3]:
        await index.insert(entry(p, clock=clock))
    asked = [*paths, "many..bad"]
    found, token = await index.find_many(asked, limit=4, continuation=None)
    assert [e.path for e in found] == paths[:3] and token is not None
    rest, token = await index.find_many(asked, limit=4, continuation=token)
    assert rest == [] and token is None
    with pytest.raises(errors.InvalidRequestArguments):
        await index.find_many(asked, limit=4, continuation="garbage")
    with pytest.raises(errors.InputError):
        await index.find_many(["a"] * 1001, limit=4, continuation=None)


async def test_data_of_32_kib_in_any_script_is_kept(service, clock):
    data = {"note": "漢" * 10_000, "emoji": "🦀" * 500}  # about 32 KiB of UTF-8, 66,000 characters escaped
    assert (await service.index.insert(entry("wide.data", clock=clock, data=data))).data == data
    assert (await service.index.find("wide.data")).data == data


async def test_delete_removes_the_entry_only(service, clock):
    index = service.index
    await index.insert(entry("gone.soon", clock=clock))
    await index.delete("gone.soon")
    await index.delete("gone.soon")  # nothing there: not an error
    with pytest.raises(IndexedTaskNotFound):
        await index.find("gone.soon")
    assert [n["name"] for n in (await index.list_namespaces("", limit=10, continuation=None))[0]] == ["gone"]


async def test_expiry_deletes_what_expired(service, clock):
    index = service.index
    await index.insert(entry("exp.short", clock=clock, days=1))
    await index.insert(entry("keep.long", clock=clock, days=30))
    clock.now += dt.timedelta(days=2)
    assert await index.expire_due() == 2  # the entry and its namespace `exp`; nothing of `keep`
    rows = (await service.stores.tables.query(INDEX_TABLE, "expires gt @t", {"t": ""})).entities
    assert {r.row_key for r in rows} == {"long", "keep"}
    # A namespace expired and deleted is written again when an entry needs it.
    await index.insert(entry("exp.again", clock=clock, days=1))
    assert [n["name"] for n in (await index.list_namespaces("", limit=10, continuation=None))[0]] == ["exp", "keep"]


async def test_remembered_namespaces_stay_bounded(service, clock, monkeypatch):
    monkeypatch.setattr(index_ops, "KNOWN_NAMESPACES", 50)
    index = index_ops.TaskIndex(service.stores)
    for i in range(400):
        await index.insert(entry(f"bound.n{i}.x{i}", clock=clock))
    assert len(index._namespaces) <= 50
    assert len((await index.list_namespaces("bound", limit=1000, continuation=None))[0]) == 400


class IndexCalls:
    """Counts the storage calls on Index entry rows (not namespaces): (operation, how many rows)."""

    def __init__(self, tables):
        self.calls = []
        for name in ("get", "insert", "replace", "commit"):
            original = getattr(tables, name)

            def counted(table, *args, _name=name, _original=original, **kwargs):
                first = args[0]
                partition = (
                    first
                    if isinstance(first, str)
                    else (first[0].entity.partition_key if isinstance(first, list) else first.partition_key)
                )
                if table == INDEX_TABLE and partition.startswith(entry_partition("")):
                    self.calls.append((_name, len(first) if isinstance(first, list) else 1))
                return _original(table, *args, **kwargs)

            setattr(tables, name, counted)


async def test_new_paths_of_a_namespace_that_come_together_are_one_transaction(service, clock):
    index = service.index
    calls = IndexCalls(service.stores.tables)
    entries = [entry(f"push.latest.test.chunk-{i}", clock=clock) for i in range(30)]

    async def together():
        return await asyncio.gather(*(index.insert(e) for e in entries))

    assert await together() == entries
    assert calls.calls == [("commit", 30)]
    assert [(await index.find(e.path)).task_id for e in entries] == [e.task_id for e in entries]


async def test_new_paths_with_large_data_are_split_into_transactions_azure_takes(service, clock):
    index = service.index
    calls = IndexCalls(service.stores.tables)
    data = {"text": "é" * 15_000}  # 30 KB of UTF-8, about 90 KB escaped
    entries = [entry(f"big.latest.chunk-{i}", clock=clock, data=data) for i in range(60)]

    async def together():
        return await asyncio.gather(*(index.insert(e) for e in entries))

    assert await together() == entries
    sizes = [n for op, n in calls.calls if op == "commit"]
    assert sum(sizes) == 60 and len(sizes) >= 3  # about 5.4 MB escaped: at most 2 MiB a transaction
    assert all(n * 90_000 <= index_ops.BATCH_BYTES + 90_000 for n in sizes)
    assert (await index.find("big.latest.chunk-59")).data == data


async def test_a_path_taken_among_new_ones_is_decided_on_its_row_and_the_others_still_go_in(service, clock):
    other_process = index_ops.TaskIndex(service.stores)  # remembers nothing this one wrote
    taken = await other_process.insert(entry("push.latest.test.chunk-3", rank=9, clock=clock))
    index = service.index
    calls = IndexCalls(service.stores.tables)
    entries = [entry(f"push.latest.test.chunk-{i}", rank=1, clock=clock) for i in range(6)]

    async def together():
        return await asyncio.gather(*(index.insert(e) for e in entries))

    answers = await together()
    assert answers[3] == taken and [a for i, a in enumerate(answers) if i != 3] == entries[:3] + entries[4:]
    # The transaction failed on the taken path: each went alone, and the taken one was read and kept.
    assert calls.calls == [("commit", 6)] + [("insert", 1)] * 6 + [("get", 1)]
    assert (await index.find("push.latest.test.chunk-3")).rank == 9


async def test_a_path_this_process_wrote_is_replaced_on_its_etag_in_one_call(service, clock):
    index = service.index
    await index.insert(entry("proj.latest.build", rank=1, clock=clock))
    calls = IndexCalls(service.stores.tables)
    clock.now += dt.timedelta(seconds=1)
    newer = entry("proj.latest.build", rank=1, clock=clock)
    assert await index.insert(newer) == newer
    assert calls.calls == [("replace", 1)]  # no insert that fails, no read
    # Another process replaces it: the remembered ETag fails, and the row decides.
    other_process = index_ops.TaskIndex(service.stores)
    higher = entry("proj.latest.build", rank=5, clock=clock)
    assert await other_process.insert(higher) == higher
    calls.calls.clear()
    clock.now += dt.timedelta(seconds=1)
    assert await index.insert(entry("proj.latest.build", rank=3, clock=clock)) == higher
    assert calls.calls == [("replace", 1), ("get", 1)]
    assert (await index.find("proj.latest.build")).task_id == higher.task_id


async def test_a_remembered_path_deleted_or_expired_is_written_again(service, clock):
    index = service.index
    await index.insert(entry("gone.path", rank=1, clock=clock, days=1))
    await index.delete("gone.path")
    again = entry("gone.path", rank=0, clock=clock)
    assert await index.insert(again) == again
    # Deleted by another process (its expiry, or deleteTask there): the remembered ETag fails, the row is read.
    assert await service.stores.tables.delete(INDEX_TABLE, entry_partition("gone"), encode_key("path"))
    clock.now += dt.timedelta(seconds=1)
    third = entry("gone.path", rank=0, clock=clock)
    assert await index.insert(third) == third and (await index.find("gone.path")).task_id == third.task_id


async def test_remembered_entries_stay_bounded(service, clock, monkeypatch):
    monkeypatch.setattr(index_ops, "KNOWN_ENTRIES", 50)
    index = index_ops.TaskIndex(service.stores)
    for i in range(400):
        await index.insert(entry(f"bounded.n{i % 7}.x{i}", clock=clock, data={"i": i}))
    assert len(index._entries) <= 50
    assert (await index.find("bounded.n3.x3")).data == {"i": 3}
    monkeypatch.setattr(index_ops, "KNOWN_ENTRIES_BYTES", 64 * 1024)
    big = index_ops.TaskIndex(service.stores)
    for i in range(40):
        await big.insert(entry(f"bytes.x{i}", clock=clock, data={"blob": "x" * 30_000}))
    assert big._entries.bytes <= 64 * 1024 and len(big._entries) <= 2


# --- completed tasks --------------------------------------------------------------------------------------------


async def _create(service, **overrides):
    task_id = slugid()
    definition = task_definition(**overrides)
    await service.creation.create_task(task_id, {**definition, **schema_defaults(definition)})
    return task_id


async def _resolve(service, task_id, outcome):
    async def go():
        await service.claims.claim(task_id, 0, "g", "w")
        await service.lifecycle.resolve(task_id, 0, outcome, outcome)
        await service.stores.settled()

    await go()


async def _deliver_resolutions(service):
    async def go():
        for queue in (RESOLVED_QUEUE, CLAIM_QUEUE):
            for message in await service.stores.queues.receive(queue, 32, 30):
                body = message.json()
                if queue == RESOLVED_QUEUE or ResolvedCheck.carried_by(body):
                    await service.resolution.follow_up(ResolvedCheck.decode(body))

    await go()


async def test_a_completed_task_is_indexed_at_its_routes_and_a_failed_one_is_not(service, clock):
    done = await _create(
        service,
        routes=["index.ci.done.build", "index.ci.latest.build"],
        extra={"index": {"rank": 7, "data": {"rev": "abc"}}},
    )
    failed = await _create(service, routes=["index.ci.failed.build"])
    await _resolve(service, done, "completed")
    await _resolve(service, failed, "failed")
    await _deliver_resolutions(service)
    for path in ("ci.done.build", "ci.latest.build"):
        found = await service.index.find(path)
        assert (found.task_id, found.rank, found.data) == (done, 7, {"rev": "abc"})
    with pytest.raises(IndexedTaskNotFound):
        await service.index.find("ci.failed.build")
    # The resolution handled again (a redelivered message) changes nothing.
    before = await service.stores.tables.get(INDEX_TABLE, "t:ci.done", "build")
    await service.resolution.resolve_dependencies(ResolvedCheck(done, 0, done, None, clock.now))
    assert (await service.stores.tables.get(INDEX_TABLE, "t:ci.done", "build")).etag == before.etag
