"""Object service API v1 (Taskcluster's `object` service, served at `<rootUrl>/api/object/v1/`): the uploads and
downloads of `object` artifacts, over the artifact container (shared/operations/objects.py)."""

from __future__ import annotations

from shared.api.object_v1 import routes
from shared.api.object_v1.routes import api

ROUTE_MODULES = (routes,)

__all__ = ["ROUTE_MODULES", "api"]
