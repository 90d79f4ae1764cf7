"""Scope algebra at the cost of taskcluster-lib-scopes (shared/scopes.py): normalization and satisfaction agree with
the definition on generated sets, the sets a caller brings are bounded, and role expansion is bounded in size and
work, done in slices, and checked at role writes (shared/auth/expansion.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.auth.expansion import (
    MAX_EXPANDED_SCOPES,
    SLICE_WORK,
    ExpansionTooLarge,
    RoleIndex,
    expand,
    expansion_steps,
    run,
)
from shared.auth.role_graph import check_steps, find_cycle
from shared.scopes import ScopeSet, normalize, problems_of

# Scopes over a small alphabet with `*` (and `!`, which sorts before `*`: the case a plain sort gets wrong).
scope = st.text(alphabet="ab!*:", max_size=5)


def held_satisfies(held: list[str], required: str) -> bool:
    """The definition, scope by scope."""
    return any(h == required or (h.endswith("*") and required.startswith(h[:-1])) for h in held)


@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(st.lists(scope, max_size=12), st.lists(scope, max_size=12))
def test_normalize_and_satisfaction_agree_with_the_definition(held, required):
    normalized = normalize(held)
    assert list(normalized) == sorted(set(normalized))
    # Nothing dropped that no other kept scope covers, nothing kept that another covers.
    for s in set(held):
        assert s in normalized or held_satisfies([k for k in normalized if k != s], s)
    for s in normalized:
        assert not held_satisfies([k for k in normalized if k != s], s)
    as_set = ScopeSet(held)
    for r in required:
        assert as_set.satisfies_scope(r) == held_satisfies(held, r), (held, r)
    assert as_set.satisfies({"AllOf": list(required)}) == all(held_satisfies(held, r) for r in required)


def test_the_probe_of_2650_star_scopes_costs_one_sort():
    """The issue's probe: `authorizedScopes` of thousands of `...z*` scopes held beside `queue:get-task:*`. Each is
    checked by one binary search; normalizing them keeps one."""
    probe = [f"queue:get-task:{i}z*" for i in range(2650)]
    assert normalize([*probe, "queue:get-task:*"]) == ("queue:get-task:*",)
    assert ScopeSet(["queue:get-task:*"]).satisfies_all(probe)
    assert normalize(probe) == tuple(sorted(probe))  # none covers another


def test_a_set_a_caller_brings_is_bounded():
    assert problems_of(["a", "b*"], "scopes") == []
    assert "may not end in `**`" in problems_of(["queue:x:**"], "scopes")[0]
    assert "at most 5000" in problems_of([f"s{i}" for i in range(5001)], "scopes")[0]
    assert "characters" in problems_of(["x" * 4097], "scopes")[0]
    assert "printable ASCII" in problems_of(["tab\tscope"], "scopes")[0]
    many_long = ["x" * 4000 + str(i) for i in range(130)]
    assert "characters of scopes" in problems_of(many_long, "scopes")[0]


def doubling_roles(levels: int) -> dict[str, list[str]]:
    """The issue's delegated-admin probe: each level's role gives two roles of the next, with its parameter."""
    roles = {f"project:me:L{i:02d}-*": [f"assume:project:me:L{i + 1:02d}-<..>{c}" for c in "ab"] for i in range(levels)}
    roles[f"project:me:L{levels:02d}-*"] = ["queue:get-task:<..>"]
    return roles


def test_an_exploding_expansion_is_refused_at_its_bound_and_yields_in_slices():
    steps = expansion_steps(["assume:project:me:L00-z"], RoleIndex(doubling_roles(16)))
    slices = 0
    with pytest.raises(ExpansionTooLarge, match=f"more than {MAX_EXPANDED_SCOPES} scopes"):
        while True:
            next(steps)
            slices += 1
    assert slices > 10  # the event loop ran between slices of SLICE_WORK steps, not once at the end
    # Below the bound, the same roles expand in full.
    # The assume scopes of 11 levels, and the 2 ** 10 leaves.
    assert len(expand(["assume:project:me:L00-z"], doubling_roles(10))) == (2**11 - 1) + 2**10


def test_the_role_check_bounds_every_role_by_its_paths_and_refuses_what_could_explode():
    found = run(check_steps(RoleIndex(doubling_roles(16))))
    assert found.cycle is None
    assert found.bounds["project:me:L00-*"] > MAX_EXPANDED_SCOPES
    assert run(check_steps(RoleIndex(doubling_roles(10)))).bounds["project:me:L00-*"] <= MAX_EXPANDED_SCOPES


def test_a_large_expansion_gives_the_loop_a_turn_every_slice():
    index = RoleIndex({f"p{i}": [f"queue:get-task:{i}-{j}z*" for j in range(1100)] for i in range(5)})
    steps = expansion_steps(["assume:p*"], index)
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            assert len(done.value) == 5501
            break
        yields += 1
    assert yields >= 5500 // SLICE_WORK


def test_cycle_detection_is_iterative_and_a_chain_of_5000_roles_is_fine():
    chain = {f"r{i:05d}": [f"assume:r{i + 1:05d}", f"s{i}"] for i in range(5000)}
    assert find_cycle(chain) is None  # no RecursionError
    chain["r05000"] = ["assume:r00000"]
    cycle = find_cycle(chain)
    assert cycle is not None and cycle[0] == cycle[-1] and len(cycle) == 5002


def test_a_parameterized_role_is_bounded_by_what_one_parameter_reaches_not_by_every_role_it_could():
    """Taskcluster's documented `project-admin:*` gives `assume:project:<..>:*`: one project's roles per parameter.
    200 projects of 300 scopes each (60,000 in all) are within the bound; what one parameter reaches is counted."""
    roles = {"project-admin:*": ["assume:project:<..>:*", "auth:create-client:project/<..>/*"]}
    for p in range(200):
        roles[f"project:p{p}:ci"] = [f"queue:create-task:highest:p{p}/worker-{j}" for j in range(150)]
        roles[f"project:p{p}:release*"] = [f"secrets:get:p{p}/<..>/{j}" for j in range(150)]
    found = run(check_steps(RoleIndex(roles)))
    assert found.cycle is None and found.bounds["project-admin:*"] == 2 + 300
    assert len(expand(["assume:project-admin:p7"], roles)) == 2 + 1 + 300 - 149  # the release* scopes cut at `*`
    # A `*`-role whose prefix a parameter continues is reached with the group it continues into.
    chain = {"r*": ["assume:n:<..>"], "n:a*": ["x"] * 1, "n:ab*": ["y", "z"], "n:abc": ["w"]}
    assert run(check_steps(RoleIndex(chain))).bounds["r*"] == 1 + 1 + 2 + 1
