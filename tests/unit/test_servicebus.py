"""The Service Bus adapter without a Service Bus (its emulator needs Docker): the message each event becomes, the
publisher's calls and failures, and the subscription rules, evaluated by a small interpreter of the SQL filter
subset the rules use and compared with AMQP topic matching (which test_events checks against RabbitMQ)."""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import Any

import pytest

from shared.bus.bindings import ALWAYS, NEVER, binding_matches, routes_property, rule_name, subscription_filter
from shared.bus.servicebus import ServiceBusPublisher, application_properties, subscription_rules, to_message
from shared.domain.events import TASK_KEY_WORDS, Event
from shared.outbox.rows import PublishError
from tests.turns import others_run

# --- a small evaluator of the SQL filter subset -----------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op>=|\(|\))|(?P<word>[A-Za-z_][A-Za-z0-9_.]*|\d+))")


def _tokens(sql: str) -> list[str]:
    out, pos = [], 0
    while pos < len(sql):
        match = _TOKEN.match(sql, pos)
        if match is None:
            if sql[pos:].strip() == "":
                break
            raise ValueError(f"cannot parse {sql[pos:]!r}")
        out.append(match.group(match.lastgroup or "word"))
        pos = match.end()
    return out


def _like(value: str, pattern: str, escape: str) -> bool:
    regex, chars = "", iter(pattern)
    for c in chars:
        if c == escape:
            regex += re.escape(next(chars))
        elif c == "%":
            regex += ".*"
        elif c == "_":
            regex += "."
        else:
            regex += re.escape(c)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def evaluate(sql: str, properties: dict[str, Any]) -> bool:
    """Evaluate `sql` (comparisons `name = 'x'`, `1=1`/`1=0`, `name LIKE 'p' ESCAPE 'e'`, AND, OR, NOT, ())."""
    tokens = _tokens(sql)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def literal(token: str) -> Any:
        return (
            token[1:-1].replace("''", "'")
            if token.startswith("'")
            else (int(token) if token.isdigit() else properties.get(token))
        )

    def primary() -> bool:
        token = take()
        if token == "(":
            value = disjunction()
            assert take() == ")"
            return value
        if token.upper() == "NOT":
            return not primary()
        operator = take().upper()
        if operator == "=":
            return bool(literal(token) == literal(take()))
        if operator == "LIKE":
            pattern = literal(take())
            escape = "\0"
            if (peek() or "").upper() == "ESCAPE":
                take()
                escape = literal(take())
            value = literal(token)
            return isinstance(value, str) and _like(value, pattern, escape)
        raise ValueError(f"unsupported operator {operator}")

    def conjunction() -> bool:
        value = primary()
        while (peek() or "").upper() == "AND":
            take()
            value = primary() and value
        return value

    def disjunction() -> bool:
        value = conjunction()
        while (peek() or "").upper() == "OR":
            take()
            value = conjunction() or value
        return value

    result = disjunction()
    assert pos == len(tokens), f"unparsed: {tokens[pos:]}"
    return result


# --- the mapping -------------------------------------------------------------------------------------------------

TASK_KEY = "primary.T1.0.wg.w1.prov.wt.sched.G1._"
EVENT = Event(
    "task-completed",
    TASK_KEY,
    {"version": 1, "status": {"taskId": "T1"}},
    ["route.index.a.b", "route.notify.email.x@y.com.on-completed"],
    "2026-11-22T00:00:00.000Z",
    "Tasks/T1/4",
)


def test_message_carries_subject_words_routes_and_id():
    message = to_message(EVENT, "taskcluster-queue")
    assert message.subject == TASK_KEY
    assert message.content_type == "application/json"
    assert message.message_id == "Tasks/T1/4"
    assert str(message) == '{"version":1,"status":{"taskId":"T1"}}'
    props = {k.decode() if isinstance(k, bytes) else k: v for k, v in message.application_properties.items()}
    assert props["exchange"] == "exchange/taskcluster-queue/v1/task-completed"
    assert props["routingKey"] == TASK_KEY
    assert {name: props[name] for name in TASK_KEY_WORDS} == dict(zip(TASK_KEY_WORDS, TASK_KEY.split("."), strict=True))
    assert props["routes"] == "|route.index.a.b|route.notify.email.x@y.com.on-completed|"


def test_group_message_properties():
    event = Event("task-group-resolved", "primary.G1.sched._", {"version": 1}, [], "", "TaskGroups/G1/2")
    props = application_properties(event, "ns")
    assert props == {
        "exchange": "exchange/ns/v1/task-group-resolved",
        "routingKey": "primary.G1.sched._",
        "routingKeyKind": "primary",
        "taskGroupId": "G1",
        "schedulerId": "sched",
        "reserved": "_",
        "routes": "",
    }


class FakeSender:
    def __init__(self, fail: bool) -> None:
        self.sent: list[Any] = []
        self.fail = fail
        self.closed = False

    async def send_messages(self, message: Any) -> None:
        if self.fail:
            from azure.servicebus.exceptions import ServiceBusConnectionError

            raise ServiceBusConnectionError(message="namespace unreachable")
        self.sent.append(message)

    async def close(self) -> None:
        self.closed = True


class FakeClient:
    def __init__(self, fail: bool = False) -> None:
        self.senders: dict[str, FakeSender] = {}
        self.fail = fail

    def get_topic_sender(self, topic: str) -> FakeSender:
        self.senders[topic] = FakeSender(self.fail)
        return self.senders[topic]

    async def close(self) -> None:
        pass


async def test_publisher_sends_to_the_exchanges_topic_and_reports_failures():
    client = FakeClient()
    publisher = ServiceBusPublisher(client, namespace="taskcluster-queue")
    (await publisher.publish(EVENT))
    (await publisher.publish(EVENT))
    [(topic, sender)] = client.senders.items()
    assert topic == "taskcluster-queue.v1.task-completed" and len(sender.sent) == 2
    failing = FakeClient(fail=True)
    with pytest.raises(PublishError):
        (await ServiceBusPublisher(failing, namespace="ns").publish(EVENT))
    assert failing.senders["ns.v1.task-completed"].closed  # a failed sender is dropped and made again


class GatedSender(FakeSender):
    """Sends wait for the client's gate; those the client names as stalled (by send number, counted over all its
    senders) never end (a Service Bus that stopped)."""

    def __init__(self, client: GatedClient) -> None:
        super().__init__(False)
        self.client = client

    async def send_messages(self, message: Any) -> None:
        self.client.calls += 1
        if self.client.calls in self.client.stalled:
            await asyncio.Event().wait()
        await self.client.gate.wait()
        self.sent.append(message)


class GatedClient(FakeClient):
    def __init__(self, gate: asyncio.Event, stalled: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.gate, self.stalled = gate, stalled
        self.calls = 0
        self.made: list[GatedSender] = []

    def get_topic_sender(self, topic: str) -> GatedSender:  # type: ignore[override]
        sender = GatedSender(self)
        self.made.append(sender)
        return sender


async def test_publishes_take_turns():
    async def scenario() -> None:
        gate = asyncio.Event()
        client = GatedClient(gate)
        publisher = ServiceBusPublisher(client, namespace="ns", in_flight=8)
        sends = [asyncio.ensure_future(publisher.publish(EVENT)) for _ in range(50)]
        await others_run()
        assert publisher.turns.in_flight == 8  # the other 42 wait their turn, not on Service Bus
        gate.set()
        await asyncio.gather(*sends)
        assert publisher.turns.most == 8 and len(client.made[0].sent) == 50

    (await scenario())


@pytest.mark.looptime
async def test_a_send_that_times_out_while_others_are_confirmed_keeps_its_sender():
    async def scenario() -> None:
        gate = asyncio.Event()
        gate.set()
        client = GatedClient(gate, stalled=frozenset({1}))  # the first send never ends; the others go through
        publisher = ServiceBusPublisher(client, namespace="ns", timeout=0.3)
        first = asyncio.ensure_future(publisher.publish(EVENT))
        await others_run()  # sent (and stalled)
        for _ in range(5):
            await publisher.publish(EVENT)
        with pytest.raises(PublishError):
            await first
        assert len(client.made) == 1 and not client.made[0].closed  # slow, not gone
        await publisher.publish(EVENT)
        assert len(client.made[0].sent) == 6

    (await scenario())


@pytest.mark.looptime
async def test_a_stale_failure_leaves_the_new_sender_be():
    async def scenario() -> None:
        gate = asyncio.Event()
        gate.set()
        client = GatedClient(gate, stalled=frozenset({1, 2}))  # two sends of the first sender hang: nothing confirmed
        publisher = ServiceBusPublisher(client, namespace="ns", timeout=0.3)
        first = asyncio.ensure_future(publisher.publish(EVENT))
        await asyncio.sleep(0.1)  # on the loop's fake clock: the second send starts 0.1 s after the first
        second = asyncio.ensure_future(publisher.publish(EVENT))
        with pytest.raises(PublishError):
            await first  # nothing confirmed since it started: its sender is closed, a new one made next time
        await publisher.publish(EVENT)
        with pytest.raises(PublishError):
            await second  # failed on the old sender after the new one was made
        assert [s.closed for s in client.made] == [True, False]
        await publisher.publish(EVENT)
        assert len(client.made) == 2 and len(client.made[1].sent) == 2

    (await scenario())


# --- the rules ---------------------------------------------------------------------------------------------------


def props_of(routing_key: str, cc: list[str]) -> dict[str, Any]:
    return application_properties(Event("task-pending", routing_key, {}, cc), "ns")


def amqp_delivers(pattern: str, routing_key: str, cc: list[str]) -> bool:
    return binding_matches(pattern, routing_key) or any(binding_matches(pattern, r) for r in cc)


KEYS = [
    "primary.T1.0.wg.w1.prov.wt.sched.G1._",
    "primary.T2._._._.prov.other.sched.G1._",
    "primary.T3.1._._.p2.wt.s2.G2._",
]
CCS = [[], ["route.index.a.b"], ["route.notify.email.on-failed", "route.index.a"], ["route.a"]]
PRIMARY_PATTERNS = [
    "#",
    "primary.#",
    "primary.*.*.*.*.prov.wt.#",
    "primary.T1.#",
    "*.T2.*.*.*.*.*.*.*.*",
    "primary.*.*.*.*.*.*.*.*",
    "#.G1.#",
    "#.G1._",
    "primary.#.sched.#",
    "#.wt.#",
    "*.#",
    "primary.T3.1.*.*.p2.wt.s2.G2._",
    "primary.T3.1.*.*.p2.wt.s2.G2",
    "*.*.*",
]
ROUTE_PATTERNS = [
    "route.#",
    "route.index.#",
    "route.index.a",
    "route.index.a.#",
    "route.notify.#",
    "route.a",
    "route.index.a.b.#",
    "#.a",
    "#.on-failed",
    "*.index.a",
    "route.nothing.#",
]


@pytest.mark.parametrize("pattern", PRIMARY_PATTERNS + ROUTE_PATTERNS)
def test_rule_selects_what_the_binding_receives(pattern: str) -> None:
    """Exact, except that a `*` in a pattern's route reading (after `route.`, `*.` or `#.`) lets the rule pass
    a superset; never does a rule miss what RabbitMQ would deliver."""
    sql = subscription_filter(pattern, "task-pending")
    words = pattern.split(".")
    superset = words[0] in ("route", "*", "#") and "*" in words[1:]
    for key, cc in itertools.product(KEYS, CCS):
        passed, delivered = evaluate(sql, props_of(key, cc)), amqp_delivers(pattern, key, cc)
        assert passed == delivered or (superset and passed), (pattern, key, cc, sql)


def test_star_inside_a_route_binding_is_a_documented_superset() -> None:
    sql = subscription_filter("route.index.*.b", "task-pending")
    assert evaluate(sql, props_of(KEYS[0], ["route.index.a.b"]))
    # LIKE's % spans words: the rule also passes this message, which RabbitMQ would not deliver...
    assert evaluate(sql, props_of(KEYS[0], ["route.index.a.x.b"]))
    # ...so the listener re-checks with binding_matches.
    assert not binding_matches("route.index.*.b", "route.index.a.x.b")


def test_group_exchange_rules_and_special_characters() -> None:
    assert subscription_filter("route.#", "task-group-resolved") == NEVER  # group messages carry no routes
    assert subscription_filter("#", "task-group-sealed") == ALWAYS
    sql = subscription_filter("primary.G'1.*.#", "task-group-sealed")
    assert evaluate(sql, {"routingKeyKind": "primary", "taskGroupId": "G'1", "schedulerId": "s", "reserved": "_"})
    sql = subscription_filter("route.a_b%.#", "task-pending")
    assert evaluate(sql, props_of(KEYS[0], ["route.a_b%.x"]))
    assert not evaluate(sql, props_of(KEYS[0], ["route.aXbY.x"]))  # _ and % are literal characters here
    with pytest.raises(ValueError):
        subscription_filter("primary..x", "task-pending")


def test_subscription_rules_group_bindings_by_topic() -> None:
    rules = subscription_rules(
        [
            ("task-completed", "primary.*.*.*.*.prov.wt.#"),
            ("task-failed", "route.x.#"),
            ("task-completed", "route.notify.#"),
        ],
        "taskcluster-queue",
    )
    assert set(rules) == {"taskcluster-queue.v1.task-completed", "taskcluster-queue.v1.task-failed"}
    assert len(rules["taskcluster-queue.v1.task-completed"]) == 2
    assert all(
        len(name) <= 50 and re.fullmatch(r"[A-Za-z0-9._-]+", name)
        for name, _ in rules["taskcluster-queue.v1.task-completed"]
    )
    assert rule_name("a") != rule_name("b")


def test_routes_property_is_empty_without_routes() -> None:
    assert routes_property([]) == ""
    assert not evaluate(subscription_filter("route.#", "task-pending"), props_of(KEYS[0], []))
