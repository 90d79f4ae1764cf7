"""A scale model of Azure Storage's scalability targets, for the fault proxy (local_host/fault_proxy.py): requests
beyond a storage account's, a queue's or a table partition's target, divided by a chosen `factor`, are answered
503 ServerBusy with Azure's body, as Azure answers them. One proxy models one storage account (one Azurite each).

The targets (Azure Storage scalability targets for standard v2 accounts; docs/deploy.md cites them):

- an account: 20,000 requests per second; counted here: every table and queue request through the proxy;
- a queue: 2,000 messages per second (of 1 KiB); counted: every request on that queue's messages;
- a table partition: 2,000 entities per second; counted: each entity an operation touches (one for a point
  operation or a query of the partition, each operation of an entity group transaction).

Each is a token bucket refilled continuously at its rate, holding at most one second of it (Azure measures over
short windows and throttles a burst above the target; the model does not try to be closer than that). A query
that names no partition counts against the account only. Blob requests do not pass the proxy.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

ACCOUNT_REQUESTS = 20_000
QUEUE_MESSAGES = 2_000
PARTITION_ENTITIES = 2_000
MAX_BUCKETS = 100_000  # queues and partitions tracked; the least recently used are forgotten beyond it (full)

_PK_IN_KEY = re.compile(r"PartitionKey='((?:[^']|'')*)'")
_PK_IN_FILTER = re.compile(r"PartitionKey\s+eq\s+'((?:[^']|'')*)'")
_PK_IN_JSON = re.compile(rb'"PartitionKey"\s*:\s*"((?:[^"\\]|\\.)*)"')
_BATCH_OP = re.compile(rb"^(?:POST|PUT|MERGE|PATCH|DELETE|GET) \S+ HTTP/1\.1", re.MULTILINE)
_BATCH_TABLE = re.compile(
    rb"^(?:POST|PUT|MERGE|PATCH|DELETE|GET) https?://[^/\s]+/[^/\s]+/([A-Za-z0-9]+)", re.MULTILINE
)


@dataclass
class Bucket:
    rate: float
    tokens: float
    at: float
    used: float = 0.0  # what it admitted (requests, messages or entities), while it is remembered


@dataclass
class Limits:
    """Azure's targets divided by `factor` (100: an account of 200 requests/s, queues and partitions of 20/s)."""

    factor: float = 100.0
    clock: Callable[[], float] = time.monotonic
    throttled: Counter[str] = field(default_factory=Counter)  # "account", "queue <name>", "partition <t>/<pk>"
    admitted: int = 0
    _buckets: dict[str, Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def rate(self, scope: str) -> float:
        base = {"account": ACCOUNT_REQUESTS, "queue": QUEUE_MESSAGES, "partition": PARTITION_ENTITIES}[scope]
        return base / self.factor

    def _bucket(self, key: str, rate: float, now: float) -> Bucket:
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            bucket = Bucket(rate, rate, now)
            if len(self._buckets) >= MAX_BUCKETS:
                del self._buckets[next(iter(self._buckets))]
        self._buckets[key] = bucket  # most recently used last
        return bucket

    def admit(self, service: str, method: str, path: str, query: dict[str, str], body: bytes) -> str | None:
        """None if the request is within every target; else the scope it is over ("account", "queue <name>",
        "partition <table>/<key>"), counted in `throttled`. A refused request takes no token."""
        scopes = [("account", "account", 1.0)]
        scoped = queue_of(path) if service == "queue" else partition_of(method, path, query, body)
        if scoped is not None:
            kind, key, amount = scoped
            scopes.append((kind, f"{kind} {key}", amount))
        with self._lock:
            now = self.clock()
            buckets = [(name, self._bucket(name, self.rate(kind), now), amount) for kind, name, amount in scopes]
            for name, bucket, amount in buckets:
                # What one request needs of a bucket is capped at the bucket's size, so a large batch still
                # passes an empty-enough second.
                bucket.tokens = min(bucket.rate, bucket.tokens + (now - bucket.at) * bucket.rate)
                bucket.at = now
                if bucket.tokens < min(amount, bucket.rate):
                    self.throttled[name] += 1
                    return name
            for _, bucket, amount in buckets:
                bucket.tokens -= min(amount, bucket.rate)
                bucket.used += amount
            self.admitted += 1
            return None

    def busiest(self, count: int = 6) -> list[tuple[str, float, float]]:
        """The scopes that admitted most: (name, admitted, its rate per second), most used first."""
        with self._lock:
            ranked = sorted(self._buckets.items(), key=lambda item: item[1].used, reverse=True)[:count]
            return [(name, bucket.used, bucket.rate) for name, bucket in ranked]

    def first_throttled(self) -> str | None:
        """The kind of limit that refused most ("account", "queue", "partition"), or None."""
        kinds: Counter[str] = Counter()
        for name, times in self.throttled.items():
            kinds[name.split(" ", 1)[0]] += times
        return kinds.most_common(1)[0][0] if kinds else None


def _account_parts(path: str) -> list[str]:
    return [p for p in urllib.parse.unquote(path).split("/") if p][1:]  # after the account


def queue_of(path: str) -> tuple[str, str, float] | None:
    """("queue", name, 1) for a request on a queue's messages; None for account-level and queue-level calls."""
    parts = _account_parts(path)
    if len(parts) >= 2 and parts[1] == "messages":
        return "queue", parts[0], 1.0
    return None


def partition_of(method: str, path: str, query: dict[str, str], body: bytes) -> tuple[str, str, float] | None:
    """("partition", "<table>/<PartitionKey>", entities) for a table request on one partition, else None."""
    parts = _account_parts(path)
    if not parts or parts[0] == "Tables":
        return None
    unquoted = urllib.parse.unquote(path)
    if parts[0] == "$batch":
        batch_table = _BATCH_TABLE.search(body)
        in_key = _PK_IN_KEY.search(urllib.parse.unquote(body.decode("utf-8", "replace")))
        in_json = _PK_IN_JSON.search(body)
        if batch_table is None:
            return None
        if in_key is not None:
            pk_text = in_key.group(1)
        elif in_json is not None:
            pk_text = in_json.group(1).decode("utf-8", "replace")
        else:
            return None
        entities = float(max(1, len(_BATCH_OP.findall(body))))
        return "partition", f"{batch_table.group(1).decode()}/{pk_text}", entities
    table = parts[0].split("(", 1)[0]
    key = _PK_IN_KEY.search(unquoted)
    if key is not None:
        return "partition", f"{table}/{key.group(1)}", 1.0
    if method == "GET":
        found = _PK_IN_FILTER.search(query.get("$filter", ""))
        return ("partition", f"{table}/{found.group(1)}", 1.0) if found else None
    if method == "POST" and body:
        try:
            pk = json.loads(body).get("PartitionKey")
        except (ValueError, AttributeError):
            return None
        return ("partition", f"{table}/{pk}", 1.0) if isinstance(pk, str) else None
    return None
