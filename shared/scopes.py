"""Scopes and scope expressions, as Taskcluster defines them.

An expression is a scope string, `{"AllOf": [expr, ...]}` or `{"AnyOf": [expr, ...]}`. A held scope satisfies a
required one when they are equal, or when the held scope ends in `*` and the required one starts with the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias

ScopeExpr: TypeAlias = "str | dict[str, list[ScopeExpr]]"


def scope_satisfied(held: Iterable[str], required: str) -> bool:
    return any(h == required or (h.endswith("*") and required.startswith(h[:-1])) for h in held)


def satisfies(held: Sequence[str], expr: ScopeExpr) -> bool:
    if isinstance(expr, str):
        return scope_satisfied(held, expr)
    if "AllOf" in expr:
        return all(satisfies(held, sub) for sub in expr["AllOf"])
    if "AnyOf" in expr:
        return any(satisfies(held, sub) for sub in expr["AnyOf"])
    raise ValueError(f"not a scope expression: {expr!r}")


def unsatisfied(held: Sequence[str], expr: ScopeExpr) -> ScopeExpr | None:
    """The part of `expr` that `held` does not satisfy (None when satisfied), for error messages."""
    if isinstance(expr, str):
        return None if scope_satisfied(held, expr) else expr
    if "AllOf" in expr:
        missing = [m for m in (unsatisfied(held, sub) for sub in expr["AllOf"]) if m is not None]
        if not missing:
            return None
        return missing[0] if len(missing) == 1 else {"AllOf": missing}
    if any(satisfies(held, sub) for sub in expr["AnyOf"]):
        return None
    return expr


def describe(expr: ScopeExpr) -> str:
    if isinstance(expr, str):
        return expr
    if "AllOf" in expr:
        return "(" + " and ".join(describe(e) for e in expr["AllOf"]) + ")"
    return "(" + " or ".join(describe(e) for e in expr["AnyOf"]) + ")"
