"""Queue API v1: routes, scope templates (modern Taskcluster's, reference section 1b) and handlers, a module per
part of the API. Handlers parse, authorize, call one operation and shape its answer (shared/api/answers.py); the
rules live in the operations."""

from __future__ import annotations

from shared.api.queue_v1 import artifacts, groups, tasks, work, workers
from shared.api.queue_v1.common import api

ROUTE_MODULES = (tasks, work, groups, artifacts, workers)  # each registers its routes on `api` when imported

__all__ = ["ROUTE_MODULES", "api"]
