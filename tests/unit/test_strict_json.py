"""Input as Taskcluster defines it: strict JSON, JavaScript's regular expressions, continuation tokens that come
from clients, and a refused createTask whose cost does not grow with what it names."""

from __future__ import annotations

import base64
import collections
import json
import math

import pytest

from bench.opcount import Counting
from shared import errors, strict_json, timeutil, validation
from shared.storage.base import Entity
from shared.storage.keys import InvalidContinuation, decode_continuation, encode_continuation
from shared.storage.memory import MemoryQueues, MemoryTables
from tests.conftest import task_definition
from tests.services import memory_service


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "[Infinity]",
        '{"a": -Infinity}',
        "1e400",
        "[-1e999]",
        '"\\ud800"',
        '{"\\udbff": 1}',
        '["x", "\\udfff"]',
        '"a\\ud83d"',
    ],
)
def test_what_cannot_be_written_back_as_json_is_refused(text):
    with pytest.raises(strict_json.JsonRefused) as refused:
        strict_json.loads(text.encode())
    assert not isinstance(refused.value, strict_json.NotJson)


@pytest.mark.parametrize("raw", [b"{", b"[1,]", b'{"a": "\xff"}', b'"\xed\xa0\x80"', b"\xef\xbb\xbf{}"])
def test_what_is_not_json_or_not_utf8_is_not_json(raw):
    with pytest.raises(strict_json.NotJson):
        strict_json.loads(raw)


def test_valid_json_with_escapes_and_pairs_is_accepted():
    value = strict_json.loads(
        '{"emoji": "\\ud83d\\ude00", "text": "caf\\u00e9 \u00e9", "big": 1e308, "n": -0.5}'.encode()
    )
    assert value == {"emoji": "\U0001f600", "text": "caf\u00e9 \u00e9", "big": 1e308, "n": -0.5}
    assert strict_json.loads(b'"\\\\ud800"') == "\\ud800"  # an escaped backslash, not a surrogate


def test_nesting_is_limited_and_very_deep_nesting_does_not_overflow():
    limit = strict_json.MAX_DEPTH
    assert strict_json.loads(("[" * limit + "]" * limit).encode())
    for depth in (limit + 1, 5000):
        with pytest.raises(strict_json.JsonRefused, match="nested"):
            strict_json.loads(("[" * depth + "]" * depth).encode())
    with pytest.raises(strict_json.JsonRefused, match="nested"):
        strict_json.loads(('{"a":' * (limit + 1) + "1" + "}" * (limit + 1)).encode())


def test_rendering_never_fails():
    assert strict_json.dumps({"a": "caf\u00e9"}) == '{"a":"caf\u00e9"}'.encode()
    rendered = strict_json.dumps({"a": math.nan, "b": [math.inf, "\ud800"], "c": "\u00e9"})
    assert json.loads(rendered) == {"a": None, "b": [None, "\ud800"], "c": "\u00e9"}
    rendered.decode("utf-8")  # valid UTF-8: the surrogate is escaped


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("^[\\x20-\\x7e]*$", "queue:x", True),
        ("^[\\x20-\\x7e]*$", "queue:x\n", False),
        ("^[a-z]+$", "abc\n", False),
        ("^a$|^b$", "b", True),
        ("^a$|^b$", "a\n", False),
        ("^[$]+$", "$$", True),
        ("^\\$x$", "$x", True),
        ("^\\d+$", "\u0663", False),
        ("^\\w+$", "\u00e9", False),
        ("^(https?:\\/\\/|ssh:\\/\\/|git@)", "https://x", True),
    ],
)
def test_patterns_have_javascripts_meaning(pattern, text, matches):
    assert bool(validation.ecma_pattern(pattern).search(text)) is matches


def test_schemas_refuse_a_final_newline():
    problems = validation.errors_of(
        "create-task-request", dict(task_definition(), scopes=["a:b\n"]), fill_defaults=True
    )
    assert any("scopes" in p for p in problems)
    assert validation.errors_of("create-task-request", task_definition(), fill_defaults=True) == []


def test_continuation_tokens_round_trip_and_anything_else_is_a_400():
    for keys in [("pk", "rk"), ("pk", None), ("a/b c", "d~e")]:
        assert decode_continuation(encode_continuation(*keys)) == keys
    bad = [
        "",
        "!!!",
        "e30",
        base64.urlsafe_b64encode(b'{"RowKey": "x"}').decode(),
        base64.urlsafe_b64encode(b'{"PartitionKey": ["x"]}').decode(),
        base64.urlsafe_b64encode(b'{"PartitionKey": "x", "RowKey": "\\u0001"}').decode(),
        base64.urlsafe_b64encode(json.dumps({"PartitionKey": "x" * 2000}).encode()).decode(),
        "\u00e9",
    ]
    for token in bad:
        with pytest.raises(InvalidContinuation) as refused:
            decode_continuation(token)
        assert refused.value.status == 400 and refused.value.code == "InvalidRequestArguments"


async def test_memory_store_pages_with_the_shared_tokens():
    tables = MemoryTables()
    for i in range(5):
        await tables.upsert("T", Entity("p", f"r{i}", {}))
    page = await tables.query("T", "PartitionKey eq @pk", {"pk": "p"}, limit=2)
    assert decode_continuation(page.continuation or "") == ("p", "r2")
    rest = await tables.query("T", "PartitionKey eq @pk", {"pk": "p"}, continuation=page.continuation)
    assert [e.row_key for e in rest.entities] == ["r2", "r3", "r4"]
    with pytest.raises(InvalidContinuation):
        await tables.query("T", "PartitionKey eq @pk", {"pk": "p"}, continuation="[1, 2]")


async def test_a_createtask_naming_thousands_of_missing_dependencies_costs_a_batch_of_reads():
    counts: collections.Counter[str] = collections.Counter()
    service = memory_service(
        tables=Counting(MemoryTables(), "table", counts),  # type: ignore[arg-type]
        queues=Counting(MemoryQueues(), "queue", counts),  # type: ignore[arg-type]
    )
    await service.stores.ready()
    counts.clear()
    missing = [timeutil.slugid() for _ in range(10_000)]
    body = validation_filled(task_definition(dependencies=missing))
    with pytest.raises(errors.InputError, match="Dependencies not found"):
        await service.creation.create_task(timeutil.slugid(), body)
    assert sum(counts.values()) <= 150, counts  # one batch of point reads (and the group's row), no writes
    assert not any(k.endswith((".upsert", ".transact", ".commit", ".insert")) for k in counts), counts


def validation_filled(body: dict) -> dict:
    assert validation.errors_of("create-task-request", body, fill_defaults=True) == []
    return body
