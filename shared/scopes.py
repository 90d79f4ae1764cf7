"""Scopes and scope expressions, as Taskcluster defines them, at the cost of Taskcluster's own library
(taskcluster-lib-scopes: sort, then one pass).

An expression is a scope string, `{"AllOf": [expr, ...]}` or `{"AnyOf": [expr, ...]}`. A held scope satisfies a
required one when they are equal, or when the held scope ends in `*` and the required one starts with the rest.

A normalized set (`normalize`) holds no scope that another of its scopes ending in `*` covers, so the `*`-stems it
keeps are free of prefixes of one another: the only one that can cover a scope `r` is the greatest stem not after
`r`, which a binary search finds (`ScopeSet`). Normalizing n scopes and checking m against them costs
O((n + m) log n) comparisons, whatever the scopes are (every set a caller brings is bounded: `MAX_SCOPES`).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import json
import re
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, TypeAlias

ScopeExpr: TypeAlias = "str | dict[str, list[ScopeExpr]]"

SCOPE_PATTERN = re.compile(r"[\x20-\x7e]*")  # used with fullmatch: `$` would accept a final newline
# Bounds on any set of scopes a caller brings: a client's, a role's, a certificate's, `authorizedScopes`, the body
# of expandScopes (docs/security.md). Taskcluster sets none; these are far above what its deployments use.
MAX_SCOPES = 5_000
MAX_SCOPE_LENGTH = 4_096
MAX_SCOPES_CHARS = 500_000  # characters of one set's scopes in all (what a stored client or role can hold)


def _order(scope: str) -> tuple[str, int]:
    """Sorts `a*` right before `a` and everything starting with `a`, which it covers: they follow it unbroken."""
    return (scope[:-1], 0) if scope.endswith("*") else (scope, 1)


def normalize(scopes: Iterable[str]) -> tuple[str, ...]:
    """Sorted, unique, and without the scopes a held `...*` already covers; O(n log n)."""
    kept: list[str] = []
    stem: str | None = None  # the stem of the last `*` scope kept: what it covers follows it
    for scope in sorted(set(scopes), key=_order):
        if stem is not None and scope.startswith(stem) and scope != stem + "*":
            continue
        kept.append(scope)
        if scope.endswith("*"):
            stem = scope[:-1]
    kept.sort()
    return tuple(kept)


SORT_SLICE = 2_048  # scopes sorted, or merged, between two yields of normalize_steps


def _sorted_steps(items: list[str], key: Callable[[str], Any] | None) -> Generator[None, None, list[str]]:
    """`sorted(items, key=key)` in slices: runs of SORT_SLICE sorted, then merged SORT_SLICE at a time, with a
    yield between slices (so a caller on an event loop can let others run)."""
    runs = []
    for at in range(0, len(items), SORT_SLICE):
        runs.append(sorted(items[at : at + SORT_SLICE], key=key))
        yield
    if len(runs) <= 1:
        return runs[0] if runs else []
    out: list[str] = []
    merged = heapq.merge(*runs, key=key)
    while True:
        before = len(out)
        out.extend(itertools.islice(merged, SORT_SLICE))
        if len(out) - before < SORT_SLICE:
            return out
        yield


def normalize_steps(scopes: Iterable[str]) -> Generator[None, None, tuple[str, ...]]:
    """`normalize`, yielding between slices of work: never more than SORT_SLICE scopes sorted or merged at once."""
    unique = list(set(scopes))
    yield
    by_order = yield from _sorted_steps(unique, _order)
    kept: list[str] = []
    stem: str | None = None
    for at, scope in enumerate(by_order):
        if at % (4 * SORT_SLICE) == 0 and at:
            yield
        if stem is not None and scope.startswith(stem) and scope != stem + "*":
            continue
        kept.append(scope)
        if scope.endswith("*"):
            stem = scope[:-1]
    return tuple((yield from _sorted_steps(kept, None)))


class ScopeSet:
    """A normalized set of scopes, ready to answer which scopes it satisfies (O(log n) each)."""

    __slots__ = ("_exact", "_stems", "scopes")

    def __init__(self, scopes: Iterable[str], *, normalized: bool = False, stems: list[str] | None = None) -> None:
        self.scopes: tuple[str, ...] = tuple(scopes) if normalized else normalize(scopes)
        self._exact = frozenset(self.scopes)
        # Sorted, since the scopes are.
        self._stems = stems if stems is not None else [s[:-1] for s in self.scopes if s.endswith("*")]

    @classmethod
    def steps(cls, normalized: Sequence[str]) -> Generator[None, None, ScopeSet]:
        """The set of `normalized` scopes, built with a yield between slices (a set of 50,000 scopes takes
        several milliseconds to index)."""
        stems: list[str] = []
        for at in range(0, len(normalized), 4 * SORT_SLICE):
            stems += [s[:-1] for s in normalized[at : at + 4 * SORT_SLICE] if s.endswith("*")]
            yield
        return cls(normalized, normalized=True, stems=stems)

    def __len__(self) -> int:
        return len(self.scopes)

    def __contains__(self, scope: object) -> bool:
        """Whether `scope` is one of the set's scopes (not: satisfied by them)."""
        return scope in self._exact

    def __iter__(self) -> Iterator[str]:
        return iter(self.scopes)

    def __repr__(self) -> str:
        return f"ScopeSet({len(self.scopes)} scopes)"

    def satisfies_scope(self, required: str) -> bool:
        if required in self._exact:
            return True
        at = bisect.bisect_right(self._stems, required) - 1
        return at >= 0 and required.startswith(self._stems[at])

    def satisfies_all(self, required: Iterable[str]) -> bool:
        return all(self.satisfies_scope(r) for r in required)

    def satisfies(self, expr: ScopeExpr) -> bool:
        if isinstance(expr, str):
            return self.satisfies_scope(expr)
        if "AllOf" in expr:
            return all(self.satisfies(sub) for sub in expr["AllOf"])
        if "AnyOf" in expr:
            return any(self.satisfies(sub) for sub in expr["AnyOf"])
        raise ValueError(f"not a scope expression: {expr!r}")

    def unsatisfied(self, expr: ScopeExpr) -> ScopeExpr | None:
        """The part of `expr` this set does not satisfy (None when satisfied), for error messages."""
        if isinstance(expr, str):
            return None if self.satisfies_scope(expr) else expr
        if "AllOf" in expr:
            missing = [m for m in (self.unsatisfied(sub) for sub in expr["AllOf"]) if m is not None]
            if not missing:
                return None
            return missing[0] if len(missing) == 1 else {"AllOf": missing}
        if any(self.satisfies(sub) for sub in expr["AnyOf"]):
            return None
        return expr


def scope_satisfied(held: Iterable[str], required: str) -> bool:
    return ScopeSet(held).satisfies_scope(required)


def satisfies(held: Sequence[str] | ScopeSet, expr: ScopeExpr) -> bool:
    return (held if isinstance(held, ScopeSet) else ScopeSet(held)).satisfies(expr)


def unsatisfied(held: Sequence[str] | ScopeSet, expr: ScopeExpr) -> ScopeExpr | None:
    """The part of `expr` that `held` does not satisfy (None when satisfied), for error messages."""
    return (held if isinstance(held, ScopeSet) else ScopeSet(held)).unsatisfied(expr)


def problems_of(scopes: Sequence[object], what: str) -> list[str]:
    """Why `scopes` cannot be taken as a set of scopes a caller brings (empty when it can): each a string of
    printable ASCII, at most MAX_SCOPE_LENGTH characters, not ending in `**` (Taskcluster refuses those), at most
    MAX_SCOPES of them and MAX_SCOPES_CHARS characters in all."""
    problems = []
    if len(scopes) > MAX_SCOPES:
        problems.append(f"{what} holds {len(scopes)} scopes: at most {MAX_SCOPES} are accepted")
    total = 0
    for scope in scopes:
        if not isinstance(scope, str) or not SCOPE_PATTERN.fullmatch(scope):
            problems.append(f"{what} must be a list of strings of printable ASCII characters")
            break
        total += len(scope)
        if len(scope) > MAX_SCOPE_LENGTH:
            problems.append(f"{what} holds a scope of {len(scope)} characters: at most {MAX_SCOPE_LENGTH} are accepted")
            break
        if scope.endswith("**"):
            problems.append(f"{what} holds `{scope}`: a scope may not end in `**`")
            break
    if total > MAX_SCOPES_CHARS:
        problems.append(f"{what} holds {total} characters of scopes: at most {MAX_SCOPES_CHARS} are accepted")
    return problems


def describe(expr: ScopeExpr) -> str:
    if isinstance(expr, str):
        return expr
    if "AllOf" in expr:
        return "(" + " and ".join(describe(e) for e in expr["AllOf"]) + ")"
    return "(" + " or ".join(describe(e) for e in expr["AnyOf"]) + ")"


def parse_scopes(text: str) -> list[str]:
    """A JSON list of scopes, or scopes separated by whitespace or commas."""
    stripped = text.strip()
    if stripped.startswith("["):
        value = json.loads(stripped)
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise ValueError("must be a JSON list of strings")
        return value
    return [s for s in re.split(r"[\s,]+", stripped) if s]
