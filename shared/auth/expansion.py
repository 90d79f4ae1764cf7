"""Role expansion with Taskcluster's semantics (its auth service's ScopeResolver), bounded in size and in work.

A role `R` gives its scopes to whoever holds `assume:R`. A role id ending in `*` is a prefix: `assume:X` assumes
it when `X` starts with the prefix, and a scope `<..>` in its scopes is replaced by the rest of `X` (what the `*`
matched). A held scope ending in `*` is a kleene: `assume:repo:*` assumes every role whose id starts with
`repo:` (and a parameterized role through it with `*`: the scope is cut after the `*`); `*` alone, or any kleene
that covers `assume:`, assumes every role. Expansion goes on until nothing new is granted, and the result is
normalized (a scope covered by a held `...*` is dropped).

Costs. The roles are indexed (`RoleIndex`): the roles an `assume:` scope can match are found by a binary search
and a lookup per distinct length of the `*`-roles' prefixes, not by trying every role. Every step is counted:
an expansion gives at most MAX_EXPANDED_SCOPES scopes and takes at most MAX_EXPANSION_WORK steps
(`ExpansionTooLarge` beyond), and the work is done in slices of SLICE_WORK steps between which the event loop
runs other requests (the async drivers). A role write is checked beforehand (role_graph.py): no cycle, and no role
whose expansion could exceed MAX_EXPANDED_SCOPES, counted along every path of the role graph for an
`assume:` with a parameter without `*` (a parameterized scope counts the largest group of roles one parameter
reaches together: `assume:project:<..>:*` one project's roles, not every project's). An input ending in `*` can
reach more (`assume:project-admin:*`, all projects); its expansion is bounded when it is made.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from shared import errors
from shared.scopes import normalize, normalize_steps

ASSUME = "assume:"
PARAM = "<..>"
MAX_EXPANDED_SCOPES = 50_000  # scopes one expansion may give
MAX_EXPANDED_CHARS = 2_000_000  # characters of the scopes one expansion may give, in all
MAX_EXPANSION_WORK = 2_000_000  # steps one expansion or role check may take (a step: a grant, a lookup)
SLICE_WORK = 2_000  # steps between two yields to the event loop (a step takes about a microsecond)

T = TypeVar("T")
Steps = Generator[None, None, T]  # a computation that yields between slices of work


class ExpansionTooLarge(errors.InputError):
    """Expanding `{what}` through the roles {problem}: an expansion may give at most {limit} scopes and take at
    most {work} steps (docs/security.md)"""


def assumed(scope: str) -> str | None:
    """What `scope` asks to assume (`assume:X` -> `X`; a kleene covering `assume:` -> `*`), or None."""
    if scope.startswith(ASSUME):
        return scope[len(ASSUME) :]
    if scope.endswith("*") and ASSUME.startswith(scope[:-1]):
        return "*"
    return None


def _parameterize(scope: str, param: str) -> str:
    if PARAM not in scope:
        return scope
    if param.endswith("*"):
        return scope[: scope.index(PARAM)] + param  # a kleene parameter covers everything after it
    return scope.replace(PARAM, param, 1)


def grants(wanted: str, role_id: str, scopes: Sequence[str]) -> list[str]:
    """What role `role_id` (with `scopes`) gives to the assume input `wanted` (`X` of `assume:X`); [] if none."""
    kleene = wanted.endswith("*")
    stem = wanted[:-1] if kleene else wanted
    if role_id.endswith("*"):
        prefix = role_id[:-1]
        if stem.startswith(prefix):
            param = wanted[len(prefix) :]
        elif kleene and prefix.startswith(stem):
            param = "*"  # the held kleene covers the whole role
        else:
            return []
        return [_parameterize(s, param) for s in scopes]
    if (kleene and role_id.startswith(stem)) or (not kleene and role_id == wanted):
        return [s for s in scopes if PARAM not in s]
    return []


class RoleIndex:
    """The roles, indexed by what an `assume:` scope can match: ids sorted (a kleene matches a range of them) and
    the prefixes of `*`-roles by length (an id matches the prefixes it starts with)."""

    def __init__(self, roles: Mapping[str, Sequence[str]]) -> None:
        self.roles: dict[str, tuple[str, ...]] = {role_id: tuple(s) for role_id, s in roles.items()}
        self._ids = sorted(self.roles)
        self._prefixes = {role_id[:-1] for role_id in self.roles if role_id.endswith("*")}
        self._lengths = sorted({len(p) for p in self._prefixes})

    def candidates(self, wanted: str) -> list[str]:
        """Every role `grants(wanted, ...)` could give something (maybe more): the `*`-roles whose prefix `wanted`
        starts with, and the role named `wanted` (or, for a kleene, every role whose id starts with its stem)."""
        kleene = wanted.endswith("*")
        stem = wanted[:-1] if kleene else wanted
        found = [
            stem[:n] + "*"
            for n in self._lengths[: bisect.bisect_right(self._lengths, len(stem))]
            if stem[:n] in self._prefixes
        ]
        if kleene:
            # Role ids are printable ASCII, so every id starting with the stem sorts before stem + DEL.
            found += self._ids[bisect.bisect_left(self._ids, stem) : bisect.bisect_left(self._ids, stem + "\x7f")]
        elif stem in self.roles:
            found.append(stem)
        return list(dict.fromkeys(found))

    def cost(self, wanted: str) -> int:
        """Steps `candidates(wanted)` takes, about."""
        return 1 + bisect.bisect_right(self._lengths, len(wanted))

    def _range(self, stem: str) -> list[str]:
        """Every role whose id starts with `stem`."""
        return self._ids[bisect.bisect_left(self._ids, stem) : bisect.bisect_left(self._ids, stem + "\x7f")]

    def _prefixed_by(self, stem: str) -> list[str]:
        """The `*`-roles whose prefix `stem` starts with (matched whatever follows `stem`)."""
        return [
            stem[:n] + "*"
            for n in self._lengths[: bisect.bisect_right(self._lengths, len(stem))]
            if stem[:n] in self._prefixes
        ]

    def depends(self, role_id: str) -> list[Reach]:
        """What each `assume:` scope of the role can reach, for `check_steps` (role_graph.py): the roles it assumes
        whatever the role's parameter is (`always`), and those it may assume depending on it (`some`, grouped by the
        parameter that reaches them together: `max` of the groups counts)."""
        out = []
        for scope in self.roles[role_id]:
            if PARAM not in scope:
                wanted = assumed(scope)
                if wanted is not None:
                    out.append(Reach(self.candidates(wanted), []))
                continue
            head, tail = scope.split(PARAM, 1)
            wanted = assumed(head + "*")  # the widest case, as Taskcluster checks: `*` for the parameter
            if wanted is None:
                continue
            stem = wanted[:-1]
            always = self._prefixed_by(stem)
            ranged = [r for r in self._range(stem) if r not in always]
            out.append(Reach(always, _groups(stem, tail, ranged)))
        return out


@dataclass(frozen=True)
class Reach:
    """The roles an `assume:` scope of a role reaches (`RoleIndex.depends`)."""

    always: list[str]
    some: list[list[str]]  # alternatives: one parameter reaches the roles of one group at most

    def roles(self) -> list[str]:
        return [*self.always, *(r for group in self.some for r in group)]


GROUPING_LIMIT = 2_000_000  # comparisons `_groups` may make; past it, one group of every role (a coarser bound)


def _groups(stem: str, tail: str, ranged: list[str]) -> list[list[str]]:
    """The roles whose id starts with `stem` that a scope `assume:<stem><..><tail>` reaches, grouped by what one
    parameter `p` reaches together (the check counts the largest group). With `k` = `p` + the tail's text: a role
    `<stem><rest>` is reached when `rest` is `k` (a role named so), when `rest` starts with `k` and the tail ends in
    `*` (a kleene covers it), and a `*`-role `<stem><rest>*` when `k` starts with `rest` (its prefix matches)."""
    kleene = tail.endswith("*")
    text = tail[:-1] if kleene else tail
    roles = [(r[len(stem) : -1] if r.endswith("*") else r[len(stem) :], r.endswith("*"), r) for r in ranged]
    keys: set[str] = set()
    for rest, star, _ in roles:
        if kleene:
            at = rest.find(text) if text else 0
            while at >= 0:
                keys.add(rest[: at + len(text)])
                at = rest.find(text, at + 1) if text else -1
        elif star or rest.endswith(text):
            keys.add(rest)  # a role named `<stem><k>`, or a `*`-role's prefix continued by `p`
    if len(keys) * len(roles) > GROUPING_LIMIT:
        return [ranged] if ranged else []

    def reached(key: str, rest: str, star: bool) -> bool:
        return rest == key or (kleene and rest.startswith(key)) or (star and key.startswith(rest))

    groups = [[r for rest, star, r in roles if reached(key, rest, star)] for key in keys]
    return [g for g in groups if g]


class _Cover:
    """The `*`-scopes of a growing expansion, to tell whether a new scope is covered by one already held."""

    def __init__(self) -> None:
        self._stems: set[str] = set()
        self._lengths: list[int] = []

    def add(self, scope: str) -> None:
        if scope.endswith("*"):
            stem = scope[:-1]
            if stem not in self._stems:
                self._stems.add(stem)
                at = bisect.bisect_left(self._lengths, len(stem))
                if at == len(self._lengths) or self._lengths[at] != len(stem):
                    self._lengths.insert(at, len(stem))

    def covers(self, scope: str) -> tuple[bool, int]:
        """Whether a held `*`-scope other than `scope` itself covers it, and the steps that took."""
        tried = 0
        for n in self._lengths:
            if n > len(scope):
                break
            tried += 1
            if scope[:n] in self._stems and scope != scope[:n] + "*":
                return True, tried
        return False, tried


class Work:
    """Counts steps; `spent(n)` tells when a slice is used up (time to yield)."""

    def __init__(self, what: str, limit: int) -> None:
        self.what, self.limit = what, limit
        self.total = self._slice = 0

    def spent(self, steps: int) -> bool:
        self.total += steps
        self._slice += steps
        if self.total > self.limit:
            raise ExpansionTooLarge(
                what=self.what,
                problem=f"takes more than {self.limit} steps",
                limit=MAX_EXPANDED_SCOPES,
                work=self.limit,
            )
        if self._slice >= SLICE_WORK:
            self._slice = 0
            return True
        return False


def _describe(scopes: Sequence[str]) -> str:
    shown = ", ".join(scopes[:3])
    text = shown if len(scopes) <= 3 else f"{shown} and {len(scopes) - 3} more"
    return text if len(text) <= 300 else text[:300] + "..."


@dataclass
class _Expanding:
    """An expansion under way: the scopes held (and their `*`-cover), the roles still to look up, the work spent."""

    counter: Work
    limit: int
    held: set[str]
    cover: _Cover
    todo: list[str] = field(default_factory=list)  # roles assumed and not looked up yet
    asked: set[str] = field(default_factory=set)  # roles looked up
    chars: int = 0

    def take(self, scope: str) -> Steps[None]:
        """A scope a role gives: kept unless held or covered by a `*`-scope held, the role it assumes queued."""
        if scope in self.held:
            return
        covered, tried = self.cover.covers(scope)
        if self.counter.spent(tried):
            yield
        if covered:
            return
        self.held.add(scope)
        self.cover.add(scope)
        self.chars += len(scope)
        if len(self.held) > self.limit or self.chars > MAX_EXPANDED_CHARS:
            raise ExpansionTooLarge(
                what=self.counter.what,
                problem=f"gives more than {self.limit} scopes"
                if len(self.held) > self.limit
                else f"gives more than {MAX_EXPANDED_CHARS} characters of scopes",
                limit=self.limit,
                work=self.counter.limit,
            )
        more = assumed(scope)
        if more is not None and more not in self.asked:
            self.todo.append(more)


def expansion_steps(
    scopes: Iterable[str], index: RoleIndex, *, limit: int = MAX_EXPANDED_SCOPES, work: int = MAX_EXPANSION_WORK
) -> Steps[tuple[str, ...]]:
    """`scopes` with every scope the roles they assume give, transitively; normalized. ExpansionTooLarge past
    `limit` scopes or `work` steps."""
    start = normalize(scopes)
    if start == ("*",):
        return start
    expanding = _Expanding(Work(_describe(start), work), limit, set(start), _Cover())
    for scope in start:
        expanding.cover.add(scope)
    expanding.chars = sum(map(len, start))
    expanding.todo = [w for s in start if (w := assumed(s)) is not None]
    counter = expanding.counter
    while expanding.todo:
        wanted = expanding.todo.pop()
        if wanted in expanding.asked:
            continue
        expanding.asked.add(wanted)
        if counter.spent(index.cost(wanted)):
            yield
        for role_id in index.candidates(wanted):
            given = grants(wanted, role_id, index.roles[role_id])
            if counter.spent(1 + len(given)):
                yield
            for scope in given:
                yield from expanding.take(scope)
    held = expanding.held
    yield
    return (yield from normalize_steps(held))


def run(steps: Steps[T]) -> T:
    """Run a computation to its end, without yielding (tests, and work known to be small)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def run_async(steps: Steps[T]) -> T:
    """Run a computation, letting the event loop serve other requests between its slices of work."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        await asyncio.sleep(0)


def expand(scopes: Iterable[str], roles: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """`scopes` with every scope the roles they assume give, transitively; normalized (at once, for tests)."""
    return run(expansion_steps(scopes, RoleIndex(roles)))
