"""Role expansion with Taskcluster's semantics (its auth service's ScopeResolver), as plain functions.

A role `R` gives its scopes to whoever holds `assume:R`. A role id ending in `*` is a prefix: `assume:X` assumes
it when `X` starts with the prefix, and a scope `<..>` in its scopes is replaced by the rest of `X` (what the `*`
matched). A held scope ending in `*` is a kleene: `assume:repo:*` assumes every role whose id starts with
`repo:` (and a parameterized role through it with `*`: the scope is cut after the `*`); `*` alone, or any kleene
that covers `assume:`, assumes every role. Expansion repeats until nothing new is granted, and the result is
normalized (a scope covered by a held `...*` is dropped).

Roles may not depend on each other in a cycle (`find_cycle`, checked before a role is written), which is what makes
the expansion finite.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

ASSUME = "assume:"
PARAM = "<..>"
MAX_ROUNDS = 1000  # a bound on rounds of expansion; roles without cycles need far fewer


def normalize(scopes: Iterable[str]) -> tuple[str, ...]:
    """Sorted, unique, and without the scopes a held `...*` already covers."""
    unique = sorted(set(scopes))
    kleenes = [s[:-1] for s in unique if s.endswith("*")]
    return tuple(s for s in unique
                 if not any(s != k + "*" and s.startswith(k) for k in kleenes))


def assumed(scope: str) -> str | None:
    """What `scope` asks to assume (`assume:X` -> `X`; a kleene covering `assume:` -> `*`), or None."""
    if scope.startswith(ASSUME):
        return scope[len(ASSUME):]
    if scope.endswith("*") and ASSUME.startswith(scope[:-1]):
        return "*"
    return None


def _parameterize(scope: str, param: str) -> str:
    if PARAM not in scope:
        return scope
    if param.endswith("*"):
        return scope[:scope.index(PARAM)] + param  # a kleene parameter covers everything after it
    return scope.replace(PARAM, param, 1)


def grants(wanted: str, role_id: str, scopes: Sequence[str]) -> list[str]:
    """What role `role_id` (with `scopes`) gives to the assume input `wanted` (`X` of `assume:X`); [] if none."""
    kleene = wanted.endswith("*")
    stem = wanted[:-1] if kleene else wanted
    if role_id.endswith("*"):
        prefix = role_id[:-1]
        if stem.startswith(prefix):
            param = wanted[len(prefix):]
        elif kleene and prefix.startswith(stem):
            param = "*"  # the held kleene covers the whole role
        else:
            return []
        return [_parameterize(s, param) for s in scopes]
    if (kleene and role_id.startswith(stem)) or (not kleene and role_id == wanted):
        return [s for s in scopes if PARAM not in s]
    return []


def expand(scopes: Iterable[str], roles: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """`scopes` with every scope the roles they assume give, transitively; normalized."""
    held = set(normalize(scopes))
    seen: set[str] = set()
    for _ in range(MAX_ROUNDS):
        wanted = {w for s in held - seen if (w := assumed(s)) is not None}
        seen |= held
        granted = {g for w in wanted for role_id, role_scopes in roles.items() for g in grants(w, role_id, role_scopes)}
        grown = set(normalize(held | granted))
        if grown == held:
            return tuple(sorted(held))
        held = grown
    raise RecursionError("role expansion did not finish: the roles form a cycle")


def find_cycle(roles: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle of roles assuming each other (role ids, the first repeated at the end), or None. A role depends on
    every role its scopes would assume with `*` for its parameter (the widest case), as Taskcluster checks."""
    def depends(role_id: str) -> list[str]:
        own = [_parameterize(s, "*") for s in roles[role_id]]
        wanted = [w for s in own if (w := assumed(s)) is not None]
        return [other for other in roles if any(grants(w, other, ["x"]) for w in wanted)]

    done: set[str] = set()
    stack: list[str] = []

    def visit(role_id: str) -> list[str] | None:
        if role_id in done:
            return None
        if role_id in stack:
            return [*stack[stack.index(role_id):], role_id]
        stack.append(role_id)
        for other in depends(role_id):
            found = visit(other)
            if found is not None:
                return found
        stack.pop()
        done.add(role_id)
        return None

    for role_id in roles:
        found = visit(role_id)
        if found is not None:
            return found
    return None
