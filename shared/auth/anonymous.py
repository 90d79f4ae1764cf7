"""The anonymous role, as Taskcluster has it: every caller, with credentials or without, holds `assume:anonymous`,
expanded through the roles like any other scope, so that what anyone may do without credentials is the role
`anonymous`, which an operator changes with the Auth API (Taskcluster's "Anonymous Role" deployment guide).

A deployment starts with the role holding the public reads (`QUEUE_ANONYMOUS_SCOPES`, by default
shared/settings/access.py's): planted once, at its first start, if absent (shared/auth/roles.py, `RoleSeed`), so
that nothing changes at an upgrade until an operator changes the role, and a role they changed or deleted stays so.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.auth.roles import RoleSeed

ANONYMOUS_ROLE = "anonymous"
ASSUME_ANONYMOUS = f"assume:{ANONYMOUS_ROLE}"
EVERY_CALLER = (ASSUME_ANONYMOUS,)  # what every caller holds besides its credentials' scopes


def anonymous_seed(scopes: Sequence[str]) -> RoleSeed:
    """The role `anonymous` as a deployment starts with it: `scopes`."""
    return RoleSeed(
        ANONYMOUS_ROLE,
        tuple(scopes),
        "What every caller may do, with credentials or without (created at the deployment's first start from "
        "QUEUE_ANONYMOUS_SCOPES; Taskcluster's anonymous role).",
    )
