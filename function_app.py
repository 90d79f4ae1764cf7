"""The Azure Functions app: the HTTP API (one ASGI app) and the queue-triggered checks.

The local host (`python -m local_host`) introspects this same `app` to run it without Core Tools.
"""

from __future__ import annotations

import azure.functions as func

from functions.checks import bp as checks
from shared.runtime import create_asgi_app

app = func.AsgiFunctionApp(app=create_asgi_app(), http_auth_level=func.AuthLevel.ANONYMOUS)
app.register_functions(checks)
