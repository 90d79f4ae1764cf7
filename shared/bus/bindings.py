"""Pulse-style bindings (`primary.*.*.*.*.<provisionerId>.<workerType>.#`, `route.notify.#`) as AMQP topic
matching and as Service Bus subscription filters.

AMQP topic patterns: words separated by `.`, `*` is exactly one word, `#` is zero or more words.

On Service Bus a message carries each routing-key word as an application property named after it (`taskId`,
`workerType`, ...) and its CC routes in one property, `routes`, as `|route.a.b|route.c|`. A primary binding
becomes an exact filter (the routing key has a fixed number of words, so each `#` is expanded into the word
counts it can stand for). A route binding becomes a LIKE over `routes`: exact for literal words and `#`, a
superset for a `*` inside it (LIKE's `%` may span several words), so a listener re-checks such messages with
`binding_matches` (the listener example does).
"""

from __future__ import annotations

import itertools
import re

from shared.domain.events import GROUP_EXCHANGES, GROUP_KEY_WORDS, TASK_KEY_WORDS

ROUTES_PROPERTY = "routes"
ROUTE_SEPARATOR = "|"
NEVER = "1=0"
ALWAYS = "1=1"


def binding_matches(pattern: str, routing_key: str) -> bool:
    """AMQP topic-exchange matching, as RabbitMQ does it."""
    words, key = pattern.split("."), routing_key.split(".")

    def match(i: int, j: int) -> bool:
        if i == len(words):
            return j == len(key)
        if words[i] == "#":
            return any(match(i + 1, k) for k in range(j, len(key) + 1))
        return j < len(key) and words[i] in ("*", key[j]) and match(i + 1, j + 1)

    return match(0, 0)


def routes_property(cc: list[str]) -> str:
    return ROUTE_SEPARATOR + ROUTE_SEPARATOR.join(cc) + ROUTE_SEPARATOR if cc else ""


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _like_literal(text: str) -> str:
    # `!` escapes LIKE's own wildcards (and itself) in a literal word.
    return re.sub(r"([%_\[\]!])", r"!\1", text)


def _expansions(words: list[str], length: int) -> list[list[str]]:
    """The ways to read `words` as exactly `length` words, each `#` replaced by that many `*`."""
    hashes = [i for i, w in enumerate(words) if w == "#"]
    fixed = len(words) - len(hashes)
    out: list[list[str]] = []
    for counts in itertools.product(range(length + 1), repeat=len(hashes)):
        if fixed + sum(counts) != length:
            continue
        expanded: list[str] = []
        for i, w in enumerate(words):
            expanded.extend(["*"] * counts[hashes.index(i)] if w == "#" else [w])
        if expanded not in out:
            out.append(expanded)
    return out


def _primary_filter(words: list[str], names: tuple[str, ...]) -> str:
    clauses = []
    for expanded in _expansions(words, len(names)):
        terms = [f"{name} = {_quote(w)}" for name, w in zip(names, expanded, strict=True) if w != "*"]
        if not terms:
            return ALWAYS
        clauses.append(" AND ".join(terms))
    if not clauses:
        return NEVER
    return clauses[0] if len(clauses) == 1 else " OR ".join(f"({c})" for c in clauses)


def _route_likes(words: list[str]) -> list[str]:
    """LIKE patterns for one route (`route.` included), `#` standing for zero or for one or more words."""
    options: list[list[str]] = [[]]
    for w in words:
        if w == "#":
            options = [o + alt for o in options for alt in ([], ["%"])]
        else:
            options = [[*o, "%" if w == "*" else _like_literal(w)] for o in options]
    patterns = []
    for o in options:
        if not o:
            continue  # `#` alone standing for no words: a route is never empty
        like = f"%{ROUTE_SEPARATOR}{'.'.join(o)}{ROUTE_SEPARATOR}%"
        if like not in patterns:
            patterns.append(like)
    return patterns


def subscription_filter(pattern: str, exchange: str) -> str:
    """The Service Bus SQL filter for a Pulse binding of `pattern` on `exchange`."""
    words = pattern.split(".")
    if any(w == "" for w in words):
        raise ValueError(f"empty word in binding {pattern!r}")
    names = GROUP_KEY_WORDS if exchange in GROUP_EXCHANGES else TASK_KEY_WORDS
    if words[0] == "route":
        if exchange in GROUP_EXCHANGES:
            return NEVER  # task-group messages carry no CC routes
        likes = _route_likes(words)
        return " OR ".join(f"{ROUTES_PROPERTY} LIKE {_quote(p)} ESCAPE '!'" for p in likes) or NEVER
    if words[0] == "#":
        # `#...` may also match CC routes: primary keys or any route matching the rest.
        primary = _primary_filter(words, names)
        route = subscription_filter(".".join(["route", *words]), exchange)
        return ALWAYS if ALWAYS in (primary, route) else f"({primary}) OR ({route})"
    if words[0] == "*":
        # `*` as the first word matches "primary" and "route": match both readings.
        primary = _primary_filter(words, names)
        route = subscription_filter(".".join(["route", *words[1:]]), exchange)
        return ALWAYS if primary == ALWAYS else f"({primary}) OR ({route})"
    return _primary_filter(words, names)


def rule_name(pattern: str) -> str:
    """A rule name for a binding (Service Bus: at most 50 characters of letters, digits, `.-_`)."""
    import hashlib

    slug = re.sub(r"[^A-Za-z0-9._-]", "_", pattern)[:36]
    return f"{slug}-{hashlib.sha1(pattern.encode()).hexdigest()[:8]}"
