"""Auth service API v1 routes: currentScopes.

The web inspector asks it to check a sign-in (wrong credentials answer 401 AuthenticationFailed) and to tell
which buttons the signed-in credentials may use; the official clients' `Auth` class calls it as it would call
Taskcluster's auth service.
"""

from __future__ import annotations

from typing import Any

from shared.api import monitoring
from shared.api.framework import Api, Call

api = Api("auth", "v1")
monitoring.register(api)


@api.route("GET", "/scopes/current", name="currentScopes", title="Get Current Scopes", scopes=None)
async def current_scopes(call: Call[Any]) -> dict[str, Any]:
    """The scopes the credentials of this request hold, as the queue authenticates them: the client's scopes
    (or a certificate's, narrowed by `authorizedScopes`) with the anonymous scopes every caller holds. Anonymous
    callers get the anonymous scopes. Answers Taskcluster's scopeset: `{"scopes": [...]}`."""
    return {"scopes": sorted(call.caller.scopes)}
