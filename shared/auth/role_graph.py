"""The role graph checked as a whole before a role is written (shared/auth/roles.py): no cycle of roles assuming
each other, and no role whose expansion could give more than MAX_EXPANDED_SCOPES, each bounded along every path of
the graph (expansion.py's docstring tells how a parameter is counted). Bounded in work as an expansion is, and
sliced so that the event loop serves other requests meanwhile."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shared.auth.expansion import MAX_EXPANDED_SCOPES, MAX_EXPANSION_WORK, Reach, RoleIndex, Steps, Work, run


@dataclass(frozen=True)
class RoleCheck:
    """What `check_steps` found: a cycle of roles (ids, the first repeated at the end), or none; and for each role
    an upper bound of the scopes `assume:<its id>` can expand to (capped at the limit plus one)."""

    cycle: list[str] | None
    bounds: dict[str, int]


def check_steps(
    index: RoleIndex, *, limit: int = MAX_EXPANDED_SCOPES, work: int = MAX_EXPANSION_WORK
) -> Steps[RoleCheck]:
    """Walk the role graph once (iteratively, depth first): find a cycle, or bound each role's expansion by the
    scopes along every path from it (`bound(R) = |scopes(R)| + sum of bound(B) over each assume scope of R and
    each role B it could assume`)."""
    counter = Work("the roles", work)
    bounds: dict[str, int] = {}
    reaches: dict[str, list[Reach]] = {}
    on_path: dict[str, int] = {}  # role id -> its place on the current path
    path: list[str] = []
    # Each frame: a role on the path, the roles it depends on (one entry per assume scope and role it could
    # assume), and the next of them to visit.
    stack: list[tuple[str, list[str], int]] = []
    for root in sorted(index.roles):
        if root in bounds:
            continue
        entering: str | None = root
        while entering is not None or stack:
            if entering is not None:
                reaches[entering] = index.depends(entering)
                edges = list(dict.fromkeys(r for reach in reaches[entering] for r in reach.roles()))
                on_path[entering] = len(path)
                path.append(entering)
                stack.append((entering, edges, 0))
                if counter.spent(1 + len(index.roles[entering]) + len(edges)):
                    yield
                entering = None
                continue
            role_id, edges, at = stack[-1]
            if at < len(edges):
                stack[-1] = (role_id, edges, at + 1)
                other = edges[at]
                if other in on_path:
                    return RoleCheck([*path[on_path[other] :], other], bounds)
                if other not in bounds:
                    entering = other
                continue
            stack.pop()
            path.pop()
            del on_path[role_id]
            bound = len(index.roles[role_id])
            for reach in reaches.pop(role_id):
                bound += sum(bounds[o] for o in reach.always)
                bound += max((sum(bounds[o] for o in group) for group in reach.some), default=0)
            bounds[role_id] = min(limit + 1, bound)
    return RoleCheck(None, bounds)


def find_cycle(roles: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle of roles assuming each other (role ids, the first repeated at the end), or None. A role depends on
    every role its scopes would assume with `*` for its parameter (the widest case), as Taskcluster checks."""
    return run(check_steps(RoleIndex(roles))).cycle
