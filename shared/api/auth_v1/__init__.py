"""Auth service API v1 (Taskcluster's `auth` service, served at `<rootUrl>/api/auth/v1/`): clients and their audit
(clients.py), roles and scopes (roles.py), what Taskcluster's other services ask about their callers (authenticate:
authenticateHawk), and credentials for other systems (delegation). The queue authenticates in process
(shared/auth/authenticator.py); these routes answer from the same authentication."""

from __future__ import annotations

from shared.api.auth_v1 import authenticate, clients, delegation, roles
from shared.api.auth_v1.common import api

ROUTE_MODULES = (clients, roles, authenticate, delegation)

__all__ = ["ROUTE_MODULES", "api"]
