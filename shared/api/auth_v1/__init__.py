"""Auth service API v1 (Taskcluster's `auth` service, served at `<rootUrl>/api/auth/v1/`): clients, roles and
scopes (routes), what Taskcluster's other services ask about their callers (authenticate: authenticateHawk), and
credentials for other systems (delegation). The queue authenticates in process (shared/auth/authenticator.py);
these routes answer from the same authentication."""

from __future__ import annotations

from shared.api.auth_v1 import authenticate, delegation, routes
from shared.api.auth_v1.routes import api

ROUTE_MODULES = (routes, authenticate, delegation)

__all__ = ["ROUTE_MODULES", "api"]
