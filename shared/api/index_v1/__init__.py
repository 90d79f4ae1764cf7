"""Index API v1 (Taskcluster's index service, served at `<rootUrl>/api/index/v1/`): completed tasks found by a
dotted name, over the `Index` table (shared/operations/index.py)."""

from __future__ import annotations

from shared.api.index_v1 import routes
from shared.api.index_v1.routes import api

ROUTE_MODULES = (routes,)

__all__ = ["ROUTE_MODULES", "api"]
