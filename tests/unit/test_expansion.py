"""Role expansion (shared/auth/expansion.py) on the examples of Taskcluster's auth documentation
(services/auth/docs/roles.md, and its parameterized-roles section), and the edges of its ScopeResolver."""

from __future__ import annotations

import pytest

from shared.auth.expansion import ExpansionTooLarge, expand
from shared.auth.role_graph import find_cycle
from shared.scopes import normalize


def test_the_documented_example_expands_transitively():
    roles = {"group:admins": ["admin-scope-1", "admin-scope-2", "assume:group:devs"], "group:devs": ["dev-scope"]}
    assert list(expand(["assume:group:admins", "my-scope"], roles)) == [
        "admin-scope-1",
        "admin-scope-2",
        "assume:group:admins",
        "assume:group:devs",
        "dev-scope",
        "my-scope",
    ]


def test_an_assume_scope_ending_in_a_star_gets_every_role_it_is_a_prefix_of():
    roles = {"repo:github.com/taskcluster/taskcluster-auth": ["secrets:get:auth-tests"]}
    assert "secrets:get:auth-tests" in expand(["assume:repo:github.com/taskcluster/*"], roles)
    assert "secrets:get:auth-tests" in expand(["assu*"], roles)
    assert "secrets:get:auth-tests" not in expand(["assume:repo:github.com/mozilla/*"], roles)


def test_a_role_ending_in_a_star_applies_to_every_role_id_it_is_a_prefix_of():
    roles = {"hook-id:taskcluster/*": ["queue:create-task:aws-provisioner/taskcluster-hooks"]}
    assert "queue:create-task:aws-provisioner/taskcluster-hooks" in expand(
        ["assume:hook-id:taskcluster/nightly-diagnostics"], roles
    )
    assert expand(["assume:hook-id:other/x"], roles) == ("assume:hook-id:other/x",)


def test_parameterized_roles_substitute_what_the_star_matched():
    roles = {
        "project-admin:*": [
            "assume:hook-id:project-<..>/*",
            "assume:project:<..>:*",
            "auth:create-client:project/<..>/*",
        ]
    }
    assert expand(["assume:project-admin:bugzilla"], roles) == (
        "assume:hook-id:project-bugzilla/*",
        "assume:project-admin:bugzilla",
        "assume:project:bugzilla:*",
        "auth:create-client:project/bugzilla/*",
    )
    # A kleene parameter cuts the scope after it.
    assert "assume:hook-id:project-bug*" in expand(["assume:project-admin:bug*"], roles)
    assert "auth:create-client:project/*" in expand(["assume:project-admin:*"], roles)
    assert "auth:create-client:project/*" in expand(["assume:project-*"], roles)


def test_normalize_drops_what_a_star_covers():
    assert normalize(["q:1", "q:*", "q:*", "r"]) == ("q:*", "r")
    assert normalize(["*", "a"]) == ("*",)


def test_cycles_are_found_and_acyclic_roles_pass():
    assert find_cycle({"a": ["assume:b"], "b": ["assume:a"]}) == ["a", "b", "a"]
    assert find_cycle({"a*": ["assume:a<..>x"]}) == ["a*", "a*"]
    assert find_cycle({"a": ["assume:b"], "b": ["scope"], "c*": ["assume:a"]}) is None
    with pytest.raises(ExpansionTooLarge):  # a cycle that slipped in is stopped, not followed forever
        expand(["assume:a1"], {"a*": ["assume:a<..>1"]})
