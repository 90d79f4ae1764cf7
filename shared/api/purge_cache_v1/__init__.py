"""Purge-cache API v1 (Taskcluster's purge-cache service, served at `<rootUrl>/api/purge-cache/v1/`): requests to
drop a worker pool's caches, which generic-worker asks for before every task (shared/operations/purge_cache.py)."""

from __future__ import annotations

from shared.api.purge_cache_v1 import routes
from shared.api.purge_cache_v1.routes import api

ROUTE_MODULES = (routes,)

__all__ = ["ROUTE_MODULES", "api"]
