"""Auth service API v1 (Taskcluster's `auth` service, served at `<rootUrl>/api/auth/v1/`): what a deployment's
callers ask of it about their own credentials. The queue authenticates in process (shared/auth/hawk.py); these
routes answer from the same authentication."""

from __future__ import annotations

from shared.api.auth_v1 import routes
from shared.api.auth_v1.routes import api

ROUTE_MODULES = (routes,)

__all__ = ["ROUTE_MODULES", "api"]
